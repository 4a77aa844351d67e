//! `homeagent seq create --file F | list | show NAME | run NAME --args JSON
//! | delete NAME`. The work is in `homeagent_seq::cli`; this module builds
//! what it needs from the agent (its data directory, its ungated tools —
//! the MCP servers' in front of the registry — for create-time checks, an
//! executor over its gated tools for runs).

use std::io::Write;
use std::path::Path;
use std::process::ExitCode;
use std::sync::Arc;

use homeagent_agent::Agent;
use homeagent_core::ToolSource;
use homeagent_seq::{Engine, SeqBackend, SeqStore, cli};

/// The data directory the agent was built for: its store file lives there.
fn data_dir(agent: &Agent) -> &Path {
    agent.store_path.parent().unwrap_or(Path::new("."))
}

/// `seq create --file F`: exits non-zero on any error; warnings on stderr.
pub fn create(agent: &Agent, file: &Path, out: &mut dyn Write) -> anyhow::Result<()> {
    let store = SeqStore::new(data_dir(agent));
    let mut err = std::io::stderr().lock();
    // The tools a run reaches, before the gate: the MCP servers' (which
    // fall through to the registry) when any are configured.
    let tools: &dyn ToolSource = match &agent.mcp {
        Some(mcp) => mcp,
        None => agent.registry.as_ref(),
    };
    cli::create_from_file(&store, Some(tools), file, out, &mut err)?;
    Ok(())
}

/// `seq list`.
pub fn list(data_dir: &Path, out: &mut dyn Write) -> anyhow::Result<()> {
    Ok(cli::list(&SeqStore::new(data_dir), out)?)
}

/// `seq show NAME`.
pub fn show(data_dir: &Path, name: &str, out: &mut dyn Write) -> anyhow::Result<()> {
    Ok(cli::show(&SeqStore::new(data_dir), name, out)?)
}

/// `seq delete NAME`.
pub fn delete(data_dir: &Path, name: &str, out: &mut dyn Write) -> anyhow::Result<()> {
    Ok(cli::delete(&SeqStore::new(data_dir), name, out)?)
}

/// `seq run NAME --args JSON [--agent A]`: every call goes through the
/// agent's gate as `agent_name`; exits non-zero when the run failed.
pub async fn run(
    agent: &Agent,
    name: &str,
    args_json: &str,
    agent_name: &str,
    out: &mut dyn Write,
) -> anyhow::Result<ExitCode> {
    let store = Arc::new(SeqStore::new(data_dir(agent)));
    let backend = SeqBackend::new(Arc::new(agent.runtime.executor(None)));
    let engine = Engine::new(backend, store);
    let report = cli::run(&engine, name, args_json, agent_name, out).await?;
    Ok(if report.failed() {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    })
}
