//! `homeagent serve [--listen ADDR]`: the agent over HTTP (the
//! OpenAI-compatible endpoint, the sessions API, the event stream and the
//! dashboard; see `homeagent-server`).
//!
//! The address is `--listen`, else `server.listen` (127.0.0.1:8080). A
//! non-loopback address needs an API key (`HOMEAGENT_API_KEY` or
//! `server.api_key`). SIGTERM or Ctrl-C shuts down gracefully: no new
//! connections, running turns get a grace period and are then stopped
//! (their outcomes are committed, so the stored history stays paired).

use anyhow::Context as _;
use homeagent_agent::Agent;
use homeagent_agent::config::LoadedConfig;
use homeagent_server::{ServerOptions, ServerState, bind, serve};

pub async fn run(
    agent: &Agent,
    loaded: &LoadedConfig,
    listen: Option<String>,
) -> anyhow::Result<()> {
    let listen = listen.unwrap_or_else(|| loaded.config.server.listen.clone());
    let api_key = loaded
        .secrets
        .api_key
        .as_ref()
        .map(|key| key.expose().to_owned())
        .filter(|key| !key.is_empty());
    let listener = bind(&listen, api_key.as_deref()).await?;
    let addr = listener
        .local_addr()
        .with_context(|| format!("cannot read the address bound for {listen}"))?;
    for notice in &agent.notices {
        eprintln!("note: {notice}");
    }
    if api_key.is_none() {
        eprintln!("note: no API key is set: anyone on this machine can use the API");
    }
    let device_token = loaded
        .secrets
        .device_token
        .as_ref()
        .map(|token| token.expose().to_owned())
        .filter(|token| !token.is_empty());
    if device_token.is_some() || api_key.is_some() {
        eprintln!(
            "note: devices connect with `homeagent waiter --server ws://{addr} --token …` \
             (the device token, else the API key)"
        );
    } else {
        eprintln!(
            "note: devices are off: set HOMEAGENT_DEVICE_TOKEN (or server.device_token) to let \
             `homeagent waiter` connect"
        );
    }
    // Scripts (and tests) read the address from this line: with port 0 it
    // is the only way to learn the port.
    println!("HomeAgent listening on http://{addr}");
    let state = ServerState::new(
        agent,
        ServerOptions {
            api_key,
            device_token,
            ..ServerOptions::default()
        },
    );
    serve(listener, state, shutdown_signal("the server")).await?;
    eprintln!("HomeAgent stopped");
    Ok(())
}

/// Completes on SIGTERM or Ctrl-C (SIGINT). `what` names the program in
/// the warning printed when SIGTERM cannot be watched.
pub(crate) async fn shutdown_signal(what: &str) {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        match signal(SignalKind::terminate()) {
            Ok(mut term) => {
                tokio::select! {
                    _ = term.recv() => {}
                    _ = tokio::signal::ctrl_c() => {}
                }
            }
            Err(error) => {
                eprintln!("warning: cannot listen for SIGTERM ({error}); only Ctrl-C stops {what}");
                let _ = tokio::signal::ctrl_c().await;
            }
        }
    }
    #[cfg(not(unix))]
    {
        let _ = tokio::signal::ctrl_c().await;
    }
}
