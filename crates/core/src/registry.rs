//! Tool registries: definitions with async handlers, layered so that a child
//! agent's registry falls back to its parent's.
//!
//! "Not found" is [`ErrorReason::NotFound`], matched by type. A parent's
//! other errors pass through unchanged: a parent that says "device offline"
//! must not be reported as a missing tool.

use std::collections::BTreeMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, RwLock};

use serde_json::{Map, Value};
use tokio_util::sync::CancellationToken;

use crate::hooks::CallInfo;
use crate::outcome::{ErrorReason, ToolError};
use crate::tool::{ToolDef, ToolNameError, check_tool_name};

/// The tool that lists available tools; not-found hints point to it.
pub const LIST_TOOLS_TOOL: &str = "get_tools";

/// What a handler returns.
pub type ToolFuture = Pin<Box<dyn Future<Output = Result<Value, ToolError>> + Send + 'static>>;

/// Everything one call's handler gets. Built per call: nothing in it that a
/// handler can change is shared with sibling calls of the same batch (the
/// extras are the batch's, behind an `Arc`: writing to them makes a copy).
#[derive(Debug, Clone)]
pub struct ToolContext {
    pub call_id: String,
    pub tool: String,
    /// The validated (and leniently coerced) arguments object.
    pub arguments: Value,
    pub batch_id: String,
    /// Caller-supplied data (agent name, channel, session): the batch's
    /// map, shared by its calls (a copy per call was a measurable share of
    /// a quick call's cost).
    pub extras: Arc<Map<String, Value>>,
    /// Cancelled when the batch is stopped or the call times out; handlers
    /// that loop should watch it.
    pub cancel: CancellationToken,
}

impl ToolContext {
    /// The context of the call `info` describes (as the pre-hooks left it).
    pub(crate) fn from_info(info: CallInfo, cancel: CancellationToken) -> Self {
        ToolContext {
            call_id: info.call_id,
            tool: info.tool,
            arguments: info.arguments,
            batch_id: info.batch_id,
            extras: info.extras,
            cancel,
        }
    }
}

/// A tool's implementation.
pub trait ToolHandler: Send + Sync + 'static {
    fn call(&self, ctx: ToolContext) -> ToolFuture;
}

impl<F, Fut> ToolHandler for F
where
    F: Fn(ToolContext) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<Value, ToolError>> + Send + 'static,
{
    fn call(&self, ctx: ToolContext) -> ToolFuture {
        Box::pin(self(ctx))
    }
}

/// Anything that can describe and run tools: a [`Registry`], an MCP server's
/// proxy, a remote plugin host.
pub trait ToolSource: Send + Sync + 'static {
    /// The definition of one tool, if this source (or its parents) has it.
    fn definition(&self, name: &str) -> Option<Arc<ToolDef>>;
    /// Every visible tool, sorted by name; a child's tool hides a parent's
    /// tool of the same name.
    fn definitions(&self) -> Vec<Arc<ToolDef>>;
    /// Runs a tool. A source that does not have the tool answers with an
    /// error whose reason is [`ErrorReason::NotFound`].
    fn invoke(&self, name: &str, ctx: ToolContext) -> ToolFuture;
    /// Whether `agent` may use `tool` at all, by name: a gated source asks
    /// its gate; a source without one lets every agent see every tool.
    /// For a question asked on someone else's behalf (may the author of a
    /// sequence use what it wrote in?); a call is still decided by
    /// [`invoke`](Self::invoke).
    fn visible_to(&self, agent: &str, tool: &str) -> bool {
        let _ = (agent, tool);
        true
    }
    /// Why the call `call` would be refused before it runs (a gated source
    /// asks its gate, with the call's agent and arguments), or `None`. The
    /// executor asks first, before it checks the arguments and before any
    /// hook sees the call, so a hook never acts on (nor asks the person
    /// about) a call that cannot run, and an argument error never shows
    /// the schema of a tool the caller may not use;
    /// [`invoke`](Self::invoke) still decides, after hooks may have
    /// rewritten the arguments.
    fn refusal(&self, call: &crate::CallInfo) -> Option<ToolError> {
        let _ = call;
        None
    }
    /// Why the call `call`, which its caller may make, would still be
    /// refused: it needs a person's approval and nobody can be asked. Asked
    /// by the executor right after [`refusal`](Self::refusal), and apart
    /// from it, so that a check of a grant alone (a sequence's author's)
    /// does not blame the grant for it.
    fn approval_refusal(&self, call: &crate::CallInfo) -> Option<ToolError> {
        let _ = call;
        None
    }
}

/// Why a tool could not be registered.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RegistryError {
    #[error(transparent)]
    BadName(#[from] ToolNameError),
    #[error("a tool named `{0}` is already registered; tool names must be unique")]
    Duplicate(String),
}

struct Entry {
    def: Arc<ToolDef>,
    handler: Arc<dyn ToolHandler>,
}

/// A set of tools, optionally layered over a parent source.
///
/// Registration takes `&self` so tools can come and go while the agent runs
/// (an MCP server announcing new tools).
#[derive(Default)]
pub struct Registry {
    /// Shared so a pending parent call can read the names lazily, only if
    /// it ends in not-found and a hint is needed.
    tools: Arc<RwLock<BTreeMap<String, Entry>>>,
    parent: Option<Arc<dyn ToolSource>>,
}

impl Registry {
    pub fn new() -> Self {
        Self::default()
    }

    /// A registry whose misses fall back to `parent`.
    pub fn with_parent(parent: Arc<dyn ToolSource>) -> Self {
        Registry {
            tools: Arc::default(),
            parent: Some(parent),
        }
    }

    pub fn register(&self, def: ToolDef, handler: impl ToolHandler) -> Result<(), RegistryError> {
        self.register_arc(def, Arc::new(handler))
    }

    pub fn register_arc(
        &self,
        def: ToolDef,
        handler: Arc<dyn ToolHandler>,
    ) -> Result<(), RegistryError> {
        check_tool_name(&def.name)?;
        // Compile the schema now rather than inside the first call's poll,
        // where it would hold up the start of every sibling in the batch.
        def.compiled_schema();
        let mut tools = self.write();
        if tools.contains_key(&def.name) {
            return Err(RegistryError::Duplicate(def.name));
        }
        tools.insert(
            def.name.clone(),
            Entry {
                def: Arc::new(def),
                handler,
            },
        );
        Ok(())
    }

    /// Removes a tool; returns whether it was there.
    pub fn unregister(&self, name: &str) -> bool {
        self.write().remove(name).is_some()
    }

    fn read(&self) -> std::sync::RwLockReadGuard<'_, BTreeMap<String, Entry>> {
        lock_read(&self.tools)
    }

    /// Poisoning is ignored for the same reason as in [`lock_read`].
    fn write(&self) -> std::sync::RwLockWriteGuard<'_, BTreeMap<String, Entry>> {
        self.tools.write().unwrap_or_else(|e| e.into_inner())
    }
}

impl ToolSource for Registry {
    fn definition(&self, name: &str) -> Option<Arc<ToolDef>> {
        if let Some(entry) = self.read().get(name) {
            return Some(entry.def.clone());
        }
        self.parent.as_ref().and_then(|p| p.definition(name))
    }

    fn definitions(&self) -> Vec<Arc<ToolDef>> {
        // The parent's first, without holding this registry's lock.
        let inherited = self.parent.as_ref().map(|parent| parent.definitions());
        let tools = self.read();
        let Some(inherited) = inherited else {
            // Already by name, one per name.
            return tools.values().map(|entry| Arc::clone(&entry.def)).collect();
        };
        // Own tools shadow the parent's; names are borrowed, not copied
        // (this runs before every input).
        let mut all: BTreeMap<&str, &Arc<ToolDef>> = inherited
            .iter()
            .map(|def| (def.name.as_str(), def))
            .collect();
        for (name, entry) in tools.iter() {
            all.insert(name.as_str(), &entry.def);
        }
        all.into_values().map(Arc::clone).collect()
    }

    fn invoke(&self, name: &str, ctx: ToolContext) -> ToolFuture {
        let handler = self.read().get(name).map(|e| e.handler.clone());
        if let Some(handler) = handler {
            return handler.call(ctx);
        }
        let name = name.to_owned();
        match &self.parent {
            None => {
                let known = self
                    .definitions()
                    .iter()
                    .map(|d| d.name.clone())
                    .collect::<Vec<_>>();
                Box::pin(async move { Err(not_found(&name, &known)) })
            }
            Some(parent) => {
                // A child agent calls its parent's tools all the time: the
                // list of names for the hint is built only on a real miss.
                let from_parent = parent.invoke(&name, ctx);
                let parent = parent.clone();
                let own = self.tools.clone();
                Box::pin(async move {
                    match from_parent.await {
                        // Only a tool the parent does not have is missing: a
                        // parent tool's own not-found (a device not
                        // connected) is that tool's answer.
                        Err(e)
                            if e.reason == ErrorReason::NotFound
                                && parent.definition(&name).is_none() =>
                        {
                            let mut known: Vec<String> = parent
                                .definitions()
                                .iter()
                                .map(|d| d.name.clone())
                                .collect();
                            known.extend(lock_read(&own).keys().cloned());
                            known.sort();
                            known.dedup();
                            Err(not_found(&name, &known))
                        }
                        other => other,
                    }
                })
            }
        }
    }
}

/// The typed not-found error, with a hint naming the closest tools and the
/// tool that lists them all.
pub fn not_found(name: &str, available: &[String]) -> ToolError {
    let close = closest_names(name, available, 3);
    let mut hint = String::new();
    if !close.is_empty() {
        hint.push_str(&format!("did you mean {}? ", close.join(", ")));
    }
    hint.push_str(&format!(
        "call {LIST_TOOLS_TOOL} to see the available tools, then call one by its exact name"
    ));
    ToolError::new(
        ErrorReason::NotFound,
        format!("tool {name} does not exist or is not registered (its plugin or server may not be loaded)"),
    )
    .with_hint(hint)
}

/// Names most similar to `name`, best first.
pub fn closest_names(name: &str, available: &[String], limit: usize) -> Vec<String> {
    let lower = name.to_lowercase();
    let mut scored: Vec<(f64, &String)> = available
        .iter()
        .map(|candidate| {
            let c = candidate.to_lowercase();
            let mut score = strsim::jaro_winkler(&lower, &c);
            if !lower.is_empty() && (c.contains(&lower) || lower.contains(&c)) {
                score = score.max(0.9);
            }
            (score, candidate)
        })
        .filter(|(score, _)| *score >= 0.75)
        .collect();
    scored.sort_by(|a, b| b.0.total_cmp(&a.0).then_with(|| a.1.cmp(b.1)));
    scored
        .into_iter()
        .take(limit)
        .map(|(_, n)| n.clone())
        .collect()
}

/// The entry of `known` that `word` is a slip of: at most two edits away
/// (a letter wrong, missing, added, or two swapped), ignoring ASCII case;
/// the nearest, the first of equals. For keys of a fixed set (a config
/// table, a protocol's fields), where [`closest_names`]' similarity is too
/// loose: it takes a `helper` for `headers`.
pub fn slip_of<'a>(word: &str, known: &[&'a str]) -> Option<&'a str> {
    let word = word.to_ascii_lowercase();
    known
        .iter()
        .map(|candidate| {
            let edits = strsim::damerau_levenshtein(&word, &candidate.to_ascii_lowercase());
            (edits, *candidate)
        })
        .filter(|(edits, _)| *edits <= 2)
        .min_by_key(|(edits, _)| *edits)
        .map(|(_, candidate)| candidate)
}

/// Reads the tool map. A panic while the lock was held cannot leave the map
/// half-updated (every write is a single insert or remove), so a poisoned
/// lock is still safe to read.
fn lock_read(
    tools: &RwLock<BTreeMap<String, Entry>>,
) -> std::sync::RwLockReadGuard<'_, BTreeMap<String, Entry>> {
    tools.read().unwrap_or_else(|e| e.into_inner())
}
