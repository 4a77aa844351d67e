//! `homeagent config check` and `homeagent config example`.

use std::io::Write;

use homeagent_agent::BuildOptions;
use homeagent_agent::config::{describe, example_toml};
use homeagent_core::ToolSource;

use crate::cli::GlobalArgs;
use crate::setup;

/// Loads the config, builds the agent from it (so adapters, tool settings,
/// tool names and MCP server settings are checked too) and prints what it
/// resolved to. MCP servers are not started: their tools are listed by
/// `homeagent tools`, which runs them.
pub fn check(global: &GlobalArgs, out: &mut dyn Write) -> anyhow::Result<()> {
    let loaded = setup::load(global)?;
    let options = BuildOptions {
        start_mcp_servers: false,
        ..BuildOptions::default()
    };
    let agent = setup::agent(&loaded, options)?;
    write!(out, "{}", describe(&loaded))?;
    for notice in &agent.notices {
        writeln!(out, "note: {notice}")?;
    }
    writeln!(out, "sources, in the order they are tried:")?;
    for health in agent.runtime.sources().health() {
        writeln!(
            out,
            "  {} ({}, model {}, {})",
            health.name,
            health.protocol.as_str(),
            health.model,
            health.base_url
        )?;
    }
    writeln!(out, "tools:")?;
    for def in agent.registry.definitions() {
        let how = if def.runs_in_parallel() {
            "parallel-safe"
        } else {
            "serial"
        };
        writeln!(out, "  {} ({how})", def.name)?;
    }
    let servers = &loaded.config.mcp.servers;
    if !servers.is_empty() {
        writeln!(
            out,
            "MCP servers (settings checked, not started; `homeagent tools` lists their tools):"
        )?;
        for server in servers {
            writeln!(out, "  {}", server.name)?;
        }
    }
    writeln!(out, "config OK")?;
    Ok(())
}

pub fn example(out: &mut dyn Write) -> anyhow::Result<()> {
    write!(out, "{}", example_toml())?;
    Ok(())
}
