//! `homeagent mcp-serve`: HomeAgent's own tools for any MCP client, on
//! stdin/stdout.
//!
//! The calls run as the agent `main` through [`ToolApi`] over the runtime's
//! executor, so they meet the same gate, argument validation, timeouts and
//! command hooks as the model's calls; the tool list is what the gate lets
//! `main` see. Stdout belongs to the MCP protocol while this runs: nothing
//! else may print there (notices and logs go to stderr).

use std::sync::Arc;

use anyhow::Context as _;
use homeagent_core::ToolSource;
use homeagent_mcp::{ToolServer, serve_stdio};
use homeagent_tools::{DEFAULT_AGENT, ToolApi};

/// The most of a result's text an MCP client gets (the model's own cap is
/// 32 KiB): the whole of what the files tools and `cmd_run` return under
/// their default caps, even escaped as JSON, and far inside the 16 MiB an
/// MCP message may take with the structured value beside it.
const MCP_RESULT_TEXT_CAP: usize = 1024 * 1024;

/// Serves `agent`'s tools until the MCP client closes the connection.
///
/// Build `agent` with an approval policy that does not read the terminal
/// (stdin is the MCP stream): refused, or granted in advance by `--yes`.
pub async fn run(agent: &homeagent_agent::Agent) -> anyhow::Result<()> {
    let runtime = agent.runtime.clone();
    let tools: Arc<dyn ToolSource> = runtime.tools().clone();
    let gate = runtime.tools().gate().clone();
    let api = ToolApi::new(Arc::new(runtime.client_executor(MCP_RESULT_TEXT_CAP)));
    let server = ToolServer::new(api, tools, DEFAULT_AGENT).with_gate(gate);
    serve_stdio(server)
        .await
        .context("serving HomeAgent's tools over MCP (stdio)")?;
    Ok(())
}
