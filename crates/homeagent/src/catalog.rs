//! The tool catalog: one registry holding every tool the program offers,
//! and where each tool came from.
//!
//! The kernel's [`Registry`] knows definitions and handlers, not origins, so
//! the catalog records the source of each tool as it is registered. Later
//! sources (MCP servers, plugins, device adapters) register through
//! [`Catalog::add`] the same way and get their own label.

use std::collections::{BTreeMap, BTreeSet};
use std::io::Write;
use std::sync::Arc;

use anyhow::Context as _;
use homeagent_core::{Registry, RegistryError, ToolDef, ToolSource};
use homeagent_tools::{DemoState, register_demo_tools};
use serde_json::Value;

/// Every registered tool and its source.
#[derive(Default)]
pub struct Catalog {
    pub registry: Arc<Registry>,
    sources: BTreeMap<String, &'static str>,
}

impl Catalog {
    /// The catalog at this stage of the project: the demo tools only.
    pub fn with_demo_tools() -> anyhow::Result<(Self, DemoState)> {
        let mut catalog = Catalog::default();
        let demo = catalog.add("demo", register_demo_tools)?;
        Ok((catalog, demo))
    }

    /// Runs one source's registration and labels the tools it added.
    pub fn add<T>(
        &mut self,
        source: &'static str,
        register: impl FnOnce(&Registry) -> Result<T, RegistryError>,
    ) -> anyhow::Result<T> {
        let before: BTreeSet<String> = self.names();
        let registered = register(&self.registry)
            .with_context(|| format!("could not register the {source} tools"))?;
        for name in self.names().difference(&before) {
            self.sources.insert(name.clone(), source);
        }
        Ok(registered)
    }

    fn names(&self) -> BTreeSet<String> {
        self.registry
            .definitions()
            .iter()
            .map(|d| d.name.clone())
            .collect()
    }
}

/// `homeagent tools [--json]`: every tool of the agent the config describes.
pub async fn print_tools(
    json: bool,
    global: &crate::cli::GlobalArgs,
    out: &mut dyn Write,
) -> anyhow::Result<()> {
    let loaded = crate::setup::load(global)?;
    let options = homeagent_agent::BuildOptions::default();
    let agent = crate::setup::agent(&loaded, options)?;
    // List the MCP servers' tools too, once they have answered (or failed
    // to; their status says which).
    crate::setup::mcp_started(&agent).await;
    let printed = print_agent_tools(&agent, json, out);
    let report = mcp_report(&agent);
    crate::setup::mcp_stopped(&agent).await;
    printed?;
    // Beside the table; with --json on stderr, so stdout stays one array.
    if json {
        eprint!("{report}");
    } else if !report.is_empty() {
        write!(out, "\n{report}")?;
    }
    Ok(())
}

/// One line per MCP server (its state, or why it has no tools) and one per
/// tool of it that could not be exposed: without it a server that did not
/// start was only a log line, its tools simply missing from the table.
fn mcp_report(agent: &homeagent_agent::Agent) -> String {
    use homeagent_mcp::ServerPhase;
    let Some(mcp) = &agent.mcp else {
        return String::new();
    };
    let mut report = String::new();
    for server in mcp.status() {
        let state = match &server.phase {
            ServerPhase::Running => format!("running, {} tools", server.tools.len()),
            ServerPhase::Connecting => "still starting; its tools are not listed yet".to_owned(),
            ServerPhase::Down { reason } => {
                format!("down ({reason}); it is restarted with backoff")
            }
            ServerPhase::GaveUp { reason } => {
                format!("resting after crashing too often ({reason})")
            }
            ServerPhase::Invalid { reason } => format!("not started: {reason}"),
            ServerPhase::Stopped => "stopped".to_owned(),
        };
        report.push_str(&format!("MCP server {}: {state}\n", server.name));
        for (setting, name) in &server.unlisted_settings {
            report.push_str(&format!(
                "  {setting} names `{name}`, which it does not list (a typo? it changes nothing)\n"
            ));
        }
        for (tool, why) in &server.unusable_tools {
            report.push_str(&format!("  its tool `{tool}` is not exposed: {why}\n"));
        }
        for collision in &server.collisions {
            report.push_str(&format!(
                "  its tool `{}` is not exposed: the name {} is taken by {}\n",
                collision.tool, collision.name, collision.taken_by
            ));
        }
    }
    report
}

fn print_agent_tools(
    agent: &homeagent_agent::Agent,
    json: bool,
    out: &mut dyn Write,
) -> anyhow::Result<()> {
    let entries: Vec<(Arc<ToolDef>, &'static str)> = agent
        .runtime
        .tools()
        .definitions()
        .into_iter()
        .map(|def| {
            let source = agent.tool_source(&def.name);
            (def, source)
        })
        .collect();
    if json {
        let mut items = Vec::with_capacity(entries.len());
        for (def, source) in &entries {
            // The definition's own serde form, so the JSON never drifts from
            // what the kernel stores; the source is added beside it.
            let mut item = serde_json::to_value(def.as_ref())
                .with_context(|| format!("could not serialise tool {}", def.name))?;
            if let Value::Object(map) = &mut item {
                map.insert("source".into(), Value::from(*source));
            }
            items.push(item);
        }
        // One JSON value on one line, as every `--json` output.
        writeln!(out, "{}", serde_json::to_string(&items)?)?;
        return Ok(());
    }

    let rows: Vec<[String; 5]> = entries
        .iter()
        .map(|(def, source)| {
            [
                def.name.clone(),
                (*source).to_owned(),
                yes_no(def.parallel_safe),
                yes_no(def.serial),
                first_sentence(&def.description).to_owned(),
            ]
        })
        .collect();
    let header = ["NAME", "SOURCE", "PARALLEL_SAFE", "SERIAL", "DESCRIPTION"];
    let mut widths = header.map(str::len);
    for row in &rows {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.chars().count());
        }
    }
    let line = |cells: [&str; 5]| {
        let mut text = String::new();
        for (i, cell) in cells.iter().enumerate() {
            if i + 1 == cells.len() {
                text.push_str(cell);
            } else {
                text.push_str(&format!("{cell:<width$}  ", width = widths[i]));
            }
        }
        text
    };
    writeln!(out, "{}", line(header))?;
    for row in &rows {
        writeln!(out, "{}", line(row.each_ref().map(String::as_str)))?;
    }
    writeln!(
        out,
        "\n{} tools. Calls of parallel-safe tools in one model reply run at the same time; \
         a serial tool (or any tool not declared parallel-safe) makes its whole batch run \
         one call at a time. `homeagent tools --json` shows the full definitions.",
        rows.len()
    )?;
    Ok(())
}

fn yes_no(flag: bool) -> String {
    if flag { "yes" } else { "no" }.to_owned()
}

/// The description up to its first sentence end, for a one-line table.
fn first_sentence(description: &str) -> &str {
    match description.find(". ") {
        Some(end) => &description[..=end],
        None => description,
    }
}
