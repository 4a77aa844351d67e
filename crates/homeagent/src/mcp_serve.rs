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

/// Serves `agent`'s tools until the MCP client closes the connection.
///
/// Build `agent` with an approval policy that does not read the terminal
/// (stdin is the MCP stream): refused, or granted in advance by `--yes`.
pub async fn run(agent: &homeagent_agent::Agent) -> anyhow::Result<()> {
    let runtime = agent.runtime.clone();
    let tools: Arc<dyn ToolSource> = runtime.tools().clone();
    let gate = runtime.tools().gate().clone();
    let api = ToolApi::new(Arc::new(runtime.executor(None)));
    let server = ToolServer::new(api, tools, DEFAULT_AGENT).with_gate(gate);
    serve_stdio(server)
        .await
        .context("serving HomeAgent's tools over MCP (stdio)")?;
    Ok(())
}
