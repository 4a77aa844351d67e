//! `homeagent mock-llm`: the scripted mock model as an HTTP server, until
//! Ctrl-C (or SIGTERM).

use std::io::Write;

use anyhow::Context as _;
use homeagent_mock_llm::{MockServer, ScriptOptions, ServerConfig};

use crate::cli::MockLlmArgs;

pub async fn run(args: MockLlmArgs, out: &mut impl Write) -> anyhow::Result<()> {
    let config = ServerConfig {
        delay_ms: args.delay_ms,
        chunk_delay_ms: args.chunk_delay_ms,
        script: ScriptOptions {
            tool_sleep_ms: args.tool_sleep_ms,
            tool_name: args.tool.filter(|t| !t.is_empty()),
        },
    };
    let server = MockServer::start(&args.listen, config)
        .await
        .with_context(|| {
            format!(
                "cannot listen on {} (use HOST:PORT, e.g. 127.0.0.1:9099; give another port \
                 with --listen, or port 0 for a free one)",
                args.listen
            )
        })?;
    let url = server.url();
    writeln!(
        out,
        "HomeAgent mock LLM listening on {url}\n\
         \x20 OpenAI     POST {url}/v1/chat/completions   (base_url {url}/v1)\n\
         \x20 Anthropic  POST {url}/v1/messages           (base_url {url})\n\
         \x20 Gemini     POST {url}/v1beta/models/MODEL:streamGenerateContent?alt=sse | :generateContent\n\
         \x20 Ollama     POST {url}/api/chat\n\
         \x20 Stats      GET  {url}/stats\n\
         Press Ctrl-C to stop."
    )?;
    out.flush()?;
    shutdown_signal().await?;
    writeln!(out, "stopping")?;
    out.flush()?;
    server.shutdown().await.context("the mock server failed")?;
    Ok(())
}

/// Ctrl-C, or SIGTERM where there is one (service managers, `kill`).
async fn shutdown_signal() -> anyhow::Result<()> {
    #[cfg(unix)]
    {
        let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
            .context("cannot listen for SIGTERM")?;
        tokio::select! {
            result = tokio::signal::ctrl_c() => result.context("cannot listen for Ctrl-C"),
            _ = term.recv() => Ok(()),
        }
    }
    #[cfg(not(unix))]
    {
        tokio::signal::ctrl_c()
            .await
            .context("cannot listen for Ctrl-C")
    }
}
