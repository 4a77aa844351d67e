//! Loading the config and building the agent, shared by the commands that
//! run it (`run`, `chat`, `config check`, `tools`).

use anyhow::Context as _;
use homeagent_agent::config::{Config, ConfigPaths, LoadedConfig};
use homeagent_agent::{Agent, BuildOptions, build};

use crate::cli::GlobalArgs;

/// Reads the real environment; everything below takes a closure so tests
/// can pass their own.
pub fn env(name: &str) -> Option<String> {
    std::env::var(name).ok()
}

pub fn load(global: &GlobalArgs) -> anyhow::Result<LoadedConfig> {
    let paths = ConfigPaths::resolve(global.config.clone(), global.data_dir.clone(), &env)?;
    let loaded = Config::load(&paths, &env)?;
    Ok(loaded)
}

pub fn agent(loaded: &LoadedConfig, options: BuildOptions) -> anyhow::Result<Agent> {
    build(loaded, &env, options).with_context(|| {
        format!(
            "cannot start the agent (config: {})",
            loaded.paths.config_file.display()
        )
    })
}

/// Waits until every MCP server has connected or failed its first attempt
/// (each bounded by its own timeout), so the first model request lists
/// their tools. Commands that answer at once (`run`, `chat`, `mcp-serve`,
/// `seq run`) call it; `serve` does not hold its listener back for it.
pub async fn mcp_started(agent: &Agent) {
    if let Some(mcp) = &agent.mcp {
        mcp.wait_started().await;
    }
}

/// Closes the MCP servers the way the protocol says (stdin closed, then
/// SIGTERM, then a kill, each after a wait), for a command that is ending;
/// otherwise they would be killed outright when the process exits, and a
/// server that saves its state on exit would lose it.
pub async fn mcp_stopped(agent: &Agent) {
    if let Some(mcp) = &agent.mcp {
        mcp.shutdown().await;
    }
}

/// A fresh session id for a command that was given none.
pub fn new_session_id(prefix: &str) -> String {
    let millis = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis());
    format!("{prefix}-{millis}-{}", std::process::id())
}
