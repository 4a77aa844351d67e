//! `get_tools {filter?}`: the tools the caller may use, with their flags.
//!
//! The registry's not-found hint tells the model to call this tool
//! ([`LIST_TOOLS_TOOL`]), so it must list exactly what the caller could call:
//! the registry's tools (its parents' included), minus whatever the
//! visibility predicate hides. The authorization gate supplies that predicate,
//! so an agent is never shown a tool it would be refused.
//!
//! The tool lives in the registry it lists, so it holds a [`Weak`] reference:
//! a strong one would be a cycle and the registry would never be dropped.

use std::sync::{Arc, Weak};

use homeagent_core::registry::LIST_TOOLS_TOOL;
use homeagent_core::{Registry, RegistryError, ToolContext, ToolDef, ToolError, ToolSource};
use serde_json::{Value, json};

/// Decides whether the caller (known from the context's extras: agent,
/// session) may see a tool.
pub type ToolVisibility = Arc<dyn Fn(&ToolContext, &ToolDef) -> bool + Send + Sync>;

/// Registers `get_tools` into `registry`, listing that same registry.
pub fn register_get_tools(
    registry: &Arc<Registry>,
    visible: Option<ToolVisibility>,
) -> Result<(), RegistryError> {
    let listed: Weak<Registry> = Arc::downgrade(registry);
    registry.register(
        ToolDef::new(
            LIST_TOOLS_TOOL,
            "Lists the tools you can call, with their descriptions and scheduling flags \
             (parallel_safe, serial, read_only). filter keeps tools whose name or description \
             contains it (case-insensitive). Read-only and parallel-safe.",
        )
        .with_parameters(json!({
            "type": "object",
            "properties": {
                "filter": {"type": "string", "description": "case-insensitive text to look for in names and descriptions"}
            },
            "additionalProperties": false
        }))
        .parallel_safe()
        .read_only(),
        move |ctx: ToolContext| {
            let listed = listed.clone();
            let visible = visible.clone();
            async move { list(&listed, visible.as_ref(), &ctx) }
        },
    )
}

fn list(
    listed: &Weak<Registry>,
    visible: Option<&ToolVisibility>,
    ctx: &ToolContext,
) -> Result<Value, ToolError> {
    let Some(registry) = listed.upgrade() else {
        return Err(ToolError::execution(
            "the tool registry this tool lists has been shut down",
        ));
    };
    let filter = match ctx.arguments.get("filter") {
        None | Some(Value::Null) => String::new(),
        Some(Value::String(s)) => s.trim().to_lowercase(),
        Some(other) => {
            return Err(ToolError::new(
                homeagent_core::ErrorReason::Type,
                format!("the argument filter must be a string, got {other}"),
            )
            .with_field("filter"));
        }
    };
    let tools: Vec<Value> = registry
        .definitions()
        .iter()
        .filter(|def| visible.is_none_or(|allow| allow(ctx, def)))
        .filter(|def| {
            filter.is_empty()
                || def.name.to_lowercase().contains(&filter)
                || def.description.to_lowercase().contains(&filter)
        })
        .map(|def| {
            json!({
                "name": def.name,
                "description": def.description,
                "parallel_safe": def.parallel_safe,
                "serial": def.serial,
                "read_only": def.read_only,
            })
        })
        .collect();
    Ok(json!({"count": tools.len(), "tools": tools}))
}
