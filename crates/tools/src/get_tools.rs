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
//! Tools that sit in front of that registry (an MCP manager's) are listed
//! once the embedder points [`ListedTools`] at the source in front.

use std::sync::{Arc, OnceLock, Weak};

use homeagent_core::registry::LIST_TOOLS_TOOL;
use homeagent_core::{Registry, RegistryError, ToolContext, ToolDef, ToolError, ToolSource};
use serde_json::{Value, json};

/// Decides whether the caller (known from the context's extras: agent,
/// session) may see a tool.
pub type ToolVisibility = Arc<dyn Fn(&ToolContext, &ToolDef) -> bool + Send + Sync>;

/// What `get_tools` lists: the registry it was registered into, until
/// [`ListedTools::list_from`] names the source that sits in front of that
/// registry (the MCP manager, whose definitions include the registry's).
#[derive(Clone, Default)]
pub struct ListedTools(Arc<OnceLock<Weak<dyn ToolSource>>>);

impl ListedTools {
    /// From now on `get_tools` lists `source`. Set once; later calls are
    /// ignored. Held weakly: the source usually owns the registry that owns
    /// `get_tools`.
    pub fn list_from(&self, source: &Arc<dyn ToolSource>) {
        let _ = self.0.set(Arc::downgrade(source));
    }
}

/// Registers `get_tools` into `registry`, listing that same registry.
pub fn register_get_tools(
    registry: &Arc<Registry>,
    visible: Option<ToolVisibility>,
) -> Result<(), RegistryError> {
    register_get_tools_listing(registry, visible, ListedTools::default())
}

/// [`register_get_tools`], listing what `listed` is pointed at once it is.
pub fn register_get_tools_listing(
    registry: &Arc<Registry>,
    visible: Option<ToolVisibility>,
    front: ListedTools,
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
            let front = front.clone();
            let visible = visible.clone();
            async move { list(&listed, &front, visible.as_ref(), &ctx) }
        },
    )
}

fn list(
    listed: &Weak<Registry>,
    front: &ListedTools,
    visible: Option<&ToolVisibility>,
    ctx: &ToolContext,
) -> Result<Value, ToolError> {
    let shut_down = || ToolError::execution("the tool registry this tool lists has been shut down");
    let definitions = match front.0.get() {
        Some(front) => front.upgrade().ok_or_else(shut_down)?.definitions(),
        None => listed.upgrade().ok_or_else(shut_down)?.definitions(),
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
    let tools: Vec<Value> = definitions
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
