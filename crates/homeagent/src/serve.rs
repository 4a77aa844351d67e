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
use homeagent_server::{ServeThreads, ServerOptions, ServerState, bind, serve_threads};

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
    let device_tokens = declared_device_tokens(&loaded.secrets.device_tokens)?;
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
    if device_token.is_some() || api_key.is_some() || !device_tokens.is_empty() {
        eprintln!(
            "note: devices connect with `homeagent waiter --server ws://{addr} --token …` \
             (a device declared in [[server.devices]] with its own token; any other with the \
             device token, else the API key)"
        );
    } else {
        eprintln!(
            "note: devices are off: set HOMEAGENT_DEVICE_TOKEN (or server.device_token) to let \
             `homeagent waiter` connect"
        );
    }
    // Scripts (and tests) read the address from this line: with port 0 it
    // is the only way to learn the port.
    {
        use std::io::Write as _;
        let mut stdout = std::io::stdout();
        writeln!(stdout, "HomeAgent listening on http://{addr}")
            .and_then(|()| stdout.flush())
            .context("cannot write the listening address to stdout (is it closed?)")?;
    }
    let state = ServerState::new(
        agent,
        ServerOptions {
            api_key,
            device_token,
            device_tokens,
            body_limit: usize::try_from(loaded.config.server.max_body_bytes).unwrap_or(usize::MAX),
            ..ServerOptions::default()
        },
    );
    let threads = ServeThreads {
        threads: usize::from(loaded.config.runtime.serve_threads),
        blocking_threads: usize::from(loaded.config.runtime.blocking_threads),
    };
    serve_threads(listener, state, shutdown_signal("the server"), threads).await?;
    eprintln!("HomeAgent stopped");
    Ok(())
}

/// The tokens of the devices declared in `[[server.devices]]`, by id; an
/// error naming the variable when one was not found (a device that could
/// never bind is a config mistake, not something to find out later).
fn declared_device_tokens(
    declared: &[homeagent_agent::config::DeviceToken],
) -> anyhow::Result<std::collections::BTreeMap<String, String>> {
    declared
        .iter()
        .map(|device| match &device.token {
            Some(token) => Ok((device.id.clone(), token.expose().to_owned())),
            None => Err(anyhow::anyhow!(
                "device {:?} has no token: {} is not set (or empty) where `homeagent serve` \
                 runs; set it to the device's token",
                device.id,
                device.from
            )),
        })
        .collect()
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

#[cfg(test)]
mod tests {
    use super::*;
    use homeagent_agent::config::{DeviceToken, Secret};

    #[test]
    fn a_declared_device_without_its_token_stops_the_start_naming_the_variable() {
        let found = DeviceToken {
            id: "nas".into(),
            token: Some(Secret::new("nas-token")),
            from: "server.devices[0].token".into(),
        };
        let missing = DeviceToken {
            id: "pi".into(),
            token: None,
            from: "$PI_TOKEN (server.devices[1].token_env)".into(),
        };
        let tokens = declared_device_tokens(std::slice::from_ref(&found)).unwrap_or_default();
        assert_eq!(tokens.get("nas").map(String::as_str), Some("nas-token"));
        let error = declared_device_tokens(&[found, missing])
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(
            error.contains("\"pi\"") && error.contains("$PI_TOKEN"),
            "{error}"
        );
    }
}
