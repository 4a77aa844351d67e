//! The seven sequence tools the model (or any caller) uses.
//!
//! None is parallel-safe: `seq_create`/`seq_delete` write the store and
//! the running ones run arbitrary tools.
//!
//! ## The late-bound backend
//!
//! The running tools (`seq_run`, `seq_call`, `seq_when_call`) call tools
//! through a [`ToolApi`](homeagent_tools::ToolApi) over the agent's gated source — but that source is
//! built *after* the tools are registered (it wraps the registry they are
//! registered in). So registration takes a [`BackendSlot`], an
//! `Arc<OnceLock<SeqBackend>>`, and the embedder fills it once the runtime
//! exists:
//!
//! ```ignore
//! let slot = BackendSlot::default();
//! register_seq_tools(&registry, store, Arc::clone(&slot), SeqToolsOptions::default())?;
//! // … build the gated source and the runtime …
//! let _ = slot.set(SeqBackend::new(Arc::new(runtime.executor(None))));
//! ```
//!
//! Until it is set, the running tools answer with an error saying so, and
//! `seq_create` checks tools without knowing which exist (warnings only).

use std::path::PathBuf;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use homeagent_core::{
    ErrorReason, Registry, RegistryError, ToolContext, ToolDef, ToolError, ToolSource,
};
use homeagent_tools::{AGENT_EXTRA, Access, Expect, Root};
use serde_json::{Map, Value, json};

use crate::create::{CreateError, create_sequence, summary};
use crate::engine::{CURRENT_EXTRA, Caller, Engine, STACK_EXTRA, SeqBackend};
use crate::format::{FormatError, parse_sequence, parse_sequence_value};
use crate::report::skipped_value;
use crate::store::{SeqStore, StoreError};

pub const SEQ_CREATE: &str = "seq_create";
pub const SEQ_LIST: &str = "seq_list";
pub const SEQ_DELETE: &str = "seq_delete";
pub const SEQ_RUN: &str = "seq_run";
pub const SEQ_CALL: &str = "seq_call";
pub const SEQ_WHEN_CALL: &str = "seq_when_call";
pub const SEQ_HELP: &str = "seq_help";

/// The seven tools, by name.
pub const SEQ_TOOLS: &[&str] = &[
    SEQ_CREATE,
    SEQ_LIST,
    SEQ_DELETE,
    SEQ_RUN,
    SEQ_CALL,
    SEQ_WHEN_CALL,
    SEQ_HELP,
];

/// The running tools' own timeout. Each group is bounded by its `timeout`;
/// this only keeps the executor's default (60 s) from cutting a long
/// sequence of short groups.
pub const RUN_TOOL_TIMEOUT: Duration = Duration::from_secs(3600);

/// The backend the running tools use, set once the runtime exists.
pub type BackendSlot = Arc<OnceLock<SeqBackend>>;

/// Registration options.
#[derive(Debug, Clone, Default)]
pub struct SeqToolsOptions {
    /// The directory `seq_create {file}` may read from; `None` refuses
    /// `file` inputs.
    pub source_dir: Option<PathBuf>,
}

/// Why the tools could not be registered.
#[derive(Debug, thiserror::Error)]
pub enum SeqSetupError {
    #[error(transparent)]
    Registry(#[from] RegistryError),
    #[error("cannot open the sequences source directory {path}: {source}")]
    SourceDir {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

#[derive(Clone)]
struct Shared {
    store: Arc<SeqStore>,
    backend: BackendSlot,
    source_root: Option<Root>,
}

/// Registers the seven `seq_*` tools.
pub fn register_seq_tools(
    registry: &Registry,
    store: Arc<SeqStore>,
    backend: BackendSlot,
    options: SeqToolsOptions,
) -> Result<(), SeqSetupError> {
    let source_root = match options.source_dir {
        Some(path) => {
            Some(Root::open(&path).map_err(|source| SeqSetupError::SourceDir { path, source })?)
        }
        None => None,
    };
    let shared = Shared {
        store,
        backend,
        source_root,
    };
    // Unknown arguments are refused by name: a misspelt `description` (or
    // `args`) would otherwise be dropped without a word.
    let obj = |props: Value, required: &[&str]| json!({"type": "object", "properties": props, "required": required, "additionalProperties": false});

    let s = shared.clone();
    registry.register(
        ToolDef::new(
            SEQ_CREATE,
            "Saves a named tool sequence. Give exactly one of `groups` (the group objects) or `file` \
             (a sequence JSON file in the sequence sources directory, <data dir>/sequence-sources). Groups run in order; calls inside a \
             group run in parallel when every tool allows it. Call seq_help first for the format.",
        )
        .with_parameters(obj(
            json!({
                "name": {"type": "string", "description": "the sequence's name"},
                "description": {"type": "string"},
                "groups": {"type": "array", "description": "group objects; see seq_help"},
                "file": {"type": "string", "description": "a path inside the sequence sources directory"}
            }),
            &["name"],
        )),
        move |ctx: ToolContext| {
            let s = s.clone();
            async move {
                let author = caller_of(&ctx)?.agent;
                s.create(&ctx.arguments, &author).await
            }
        },
    )?;

    let s = shared.clone();
    registry.register(
        ToolDef::new(
            SEQ_LIST,
            "Lists the saved sequences with their groups, inputs and outputs.",
        )
        .with_parameters(obj(json!({}), &[]))
        .read_only(),
        move |_ctx: ToolContext| {
            let s = s.clone();
            async move { s.list() }
        },
    )?;

    let s = shared.clone();
    registry.register(
        ToolDef::new(SEQ_DELETE, "Deletes a saved sequence.")
            .with_parameters(obj(json!({"name": {"type": "string"}}), &["name"])),
        move |ctx: ToolContext| {
            let s = s.clone();
            async move {
                let name = string_arg(&ctx.arguments, "name")?;
                s.may_replace(&name, &caller_of(&ctx)?.agent)?;
                s.store.delete(&name).map_err(store_error)?;
                Ok(json!({"deleted": name}))
            }
        },
    )?;

    let s = shared.clone();
    registry.register(
        ToolDef::new(
            SEQ_RUN,
            "Runs a saved sequence by name: its groups in order, each group's calls in parallel when \
             allowed. Returns each group's status (ran, skipped, failed, missing tools) and the final slots.",
        )
        .with_parameters(obj(
            json!({"name": {"type": "string"}, "args": {"type": "object", "description": "the run's $args"}}),
            &["name"],
        ))
        .with_timeout(RUN_TOOL_TIMEOUT),
        move |ctx: ToolContext| {
            let s = s.clone();
            async move {
                let engine = s.engine()?;
                let caller = caller_of(&ctx)?;
                let name = string_arg(&ctx.arguments, "name")?;
                let args = object_arg(&ctx.arguments, "args")?;
                Ok(engine.run_named(&name, args, &caller).await.to_value())
            }
        },
    )?;

    for (tool, description) in [
        (
            SEQ_CALL,
            "Runs one group of a sequence (`target` = group name, with `sequence` naming the sequence \
             when called from outside one) or a whole other sequence (`target` = \"#Name\").",
        ),
        (
            SEQ_WHEN_CALL,
            "Like seq_call, but first evaluates `when` against `args`; when false nothing runs and no \
             slots are written.",
        ),
    ] {
        let s = shared.clone();
        let mut props = json!({
            "target": {"type": "string", "description": "a group name, or #Sequence"},
            "sequence": {"type": "string", "description": "the sequence holding the target group"},
            "args": {"type": "object"}
        });
        let mut required = vec!["target"];
        if tool == SEQ_WHEN_CALL {
            props["when"] = json!({"type": "string", "description": "a condition over $args"});
            required.push("when");
        }
        registry.register(
            ToolDef::new(tool, description)
                .with_parameters(obj(props, &required))
                .with_timeout(RUN_TOOL_TIMEOUT),
            move |ctx: ToolContext| {
                let s = s.clone();
                async move { s.call(&ctx, tool == SEQ_WHEN_CALL).await }
            },
        )?;
    }

    registry.register(
        ToolDef::new(
            SEQ_HELP,
            "The sequence format guide, with a complete example to copy.",
        )
        .with_parameters(obj(json!({}), &[]))
        .read_only(),
        |_ctx: ToolContext| async move { Ok(Value::String(crate::help::GUIDE.to_owned())) },
    )?;
    Ok(())
}

impl Shared {
    fn engine(&self) -> Result<Engine, ToolError> {
        let backend = self.backend.get().ok_or_else(|| {
            ToolError::execution(
                "sequences cannot run yet: the sequence tools were registered but their tool backend \
                 was never set (an embedding bug; see homeagent_seq::tools)",
            )
        })?;
        Ok(Engine::new(backend.clone(), Arc::clone(&self.store)))
    }

    /// Refuses `author` replacing or deleting a sequence another agent, or
    /// a person, wrote: it would run later with their grants.
    fn may_replace(&self, name: &str, author: &str) -> Result<(), ToolError> {
        let existing = match self.store.load(name) {
            Ok(existing) => existing,
            // Nothing there, or a damaged file nobody can run: no owner
            // to protect.
            Err(StoreError::NotFound { .. } | StoreError::Corrupt { .. }) => return Ok(()),
            Err(other) => return Err(store_error(other)),
        };
        if existing.author.as_deref() == Some(author) {
            return Ok(());
        }
        let (writer, who) = match &existing.author {
            Some(agent) => (
                format!("agent `{agent}`"),
                "that agent (or a person, through `homeagent seq` or the HTTP API)",
            ),
            None => (
                "a person".to_owned(),
                "a person, through `homeagent seq` or the HTTP API,",
            ),
        };
        Err(ToolError::new(
            ErrorReason::Denied,
            format!(
                "sequence `{name}` was written by {writer}; only {who} may replace or delete it"
            ),
        ))
    }

    async fn create(&self, arguments: &Value, author: &str) -> Result<Value, ToolError> {
        let name = string_arg(arguments, "name")?;
        let description = arguments.get("description").and_then(Value::as_str);
        let groups = arguments.get("groups");
        let file = arguments.get("file").and_then(Value::as_str);
        let invalid = |detail: String| ToolError::new(ErrorReason::InvalidArguments, detail);
        let mut seq = match (groups, file) {
            (Some(_), Some(_)) => {
                return Err(invalid(
                    "give exactly one of `groups` or `file`, not both".into(),
                ));
            }
            (None, None) => {
                return Err(invalid(
                    "give one of `groups` (the group objects) or `file`".into(),
                ));
            }
            (Some(groups), None) => {
                let doc = json!({"name": name, "description": description.unwrap_or(""), "groups": groups});
                parse_sequence_value(&doc).map_err(|e| format_error(&e))?
            }
            (None, Some(file)) => {
                let root = self.source_root.as_ref().ok_or_else(|| {
                    invalid("`file` inputs are off: no sequences source directory is configured; give `groups`".into())
                })?;
                let path = root
                    .resolve(file)
                    .map_err(|e| invalid(e.to_string()).with_field("file"))?;
                // Off the runtime's threads; a stop while it reads leaves
                // nothing written (the store is written after the await).
                let root = root.clone();
                let text = tokio::task::spawn_blocking(move || read_source(&root, &path))
                    .await
                    .unwrap_or_else(|e| match e.try_into_panic() {
                        Ok(payload) => std::panic::resume_unwind(payload),
                        Err(e) => Err(format!("reading the file stopped: {e}")),
                    })
                    .map_err(|detail| invalid(detail).with_field("file"))?;
                let seq = parse_sequence(&text).map_err(|e| format_error(&e))?;
                if seq.name != name {
                    return Err(invalid(format!(
                        "the file names the sequence \"{}\" but `name` is \"{name}\"; make them agree",
                        seq.name
                    )));
                }
                seq
            }
        };
        if let Some(description) = description {
            seq.description = description.to_owned();
        }
        let tools = self
            .backend
            .get()
            .map(|b| b.source().as_ref() as &dyn ToolSource);
        // Whoever runs it later runs it with their grants: its author may
        // put in only what it may use itself.
        if let Some(source) = tools {
            let steps = seq.groups.iter().flat_map(|group| &group.tools);
            if let Some(step) = steps
                .into_iter()
                .find(|step| !source.visible_to(author, &step.tool))
            {
                return Err(ToolError::new(
                    ErrorReason::Denied,
                    format!(
                        "agent `{author}` may not use the tool `{}`, so it cannot put it in a sequence",
                        step.tool
                    ),
                ));
            }
        }
        self.may_replace(&seq.name, author)?;
        seq.author = Some(author.to_owned());
        let warnings = create_sequence(&self.store, &seq, tools).map_err(|e| match e {
            CreateError::Store(e) => store_error(e),
            other => invalid(other.to_string()),
        })?;
        let mut result = summary(&seq);
        result["saved"] = Value::String(seq.name.clone());
        result["warnings"] = json!(warnings.iter().map(ToString::to_string).collect::<Vec<_>>());
        Ok(result)
    }

    fn list(&self) -> Result<Value, ToolError> {
        let mut sequences = Vec::new();
        let mut damaged = Vec::new();
        for (name, loaded) in self.store.list().map_err(store_error)? {
            match loaded {
                Ok(seq) => sequences.push(summary(&seq)),
                Err(e) => damaged.push(json!({"name": name, "error": e.to_string()})),
            }
        }
        let mut result = json!({"sequences": sequences});
        if !damaged.is_empty() {
            result["damaged"] = Value::Array(damaged);
        }
        Ok(result)
    }

    async fn call(&self, ctx: &ToolContext, conditional: bool) -> Result<Value, ToolError> {
        let engine = self.engine()?;
        let caller = caller_of(ctx)?;
        let target = string_arg(&ctx.arguments, "target")?;
        let args = object_arg(&ctx.arguments, "args")?;
        if conditional {
            let when = string_arg(&ctx.arguments, "when")?;
            match crate::cond::evaluate(&when, &args) {
                Ok(true) => {}
                Ok(false) => return Ok(skipped_value(&target)),
                Err(e) => {
                    return Err(ToolError::new(
                        ErrorReason::InvalidArguments,
                        format!("seq_when_call condition evaluation failed (an argument problem, not a tool fault): {e}"),
                    )
                    .with_field("when"));
                }
            }
        }
        if let Some(name) = target.strip_prefix('#') {
            if ctx.arguments.get("sequence").is_some_and(|v| !v.is_null()) {
                return Err(ToolError::new(
                    ErrorReason::InvalidArguments,
                    format!(
                        "target \"{target}\" is a whole sequence, so `sequence` (which names \
                         the sequence of a group target) has nothing to say; leave it out, or \
                         target a group by its name"
                    ),
                )
                .with_field("sequence"));
            }
            let report = engine.run_named(name, args, &caller).await;
            return Ok(nested_result(report.to_whole_value(), &report.to_value()));
        }
        let sequence = ctx
            .arguments
            .get("sequence")
            .and_then(Value::as_str)
            .or_else(|| ctx.extras.get(CURRENT_EXTRA).and_then(Value::as_str))
            .ok_or_else(|| {
                ToolError::new(
                    ErrorReason::Required,
                    format!("target \"{target}\" is a group: name its sequence in `sequence` (or target \"#Name\" to run a whole sequence)"),
                )
                .with_field("sequence")
            })?
            .to_owned();
        let seq = self.store.load(&sequence).map_err(store_error)?;
        let report = engine.run_group_entry(&seq, &target, args, &caller).await;
        Ok(nested_result(report.to_whole_value(), &report.to_value()))
    }
}

/// A `seq_call`'s result: the value keeps every slot whole, because a
/// calling sequence's step stores it in its slot and reads on from there,
/// while the model reads `shown`, the slots cut for display (a failure is
/// rendered from its error either way).
fn nested_result(whole: Value, shown: &Value) -> Value {
    homeagent_core::call_notes::set_text(homeagent_core::outcome::render_value(shown));
    whole
}

/// The most bytes a sequence file may hold: a sequence is a few groups of
/// steps, so anything near this is not one.
const MAX_SOURCE_BYTES: u64 = 1 << 20;

/// Reads a sequence file from the sources directory: opened by the files
/// root's one confined open (never through a symlink swapped in after the
/// path was checked, never waiting on a FIFO, a regular file only), and no
/// more than [`MAX_SOURCE_BYTES`].
fn read_source(root: &Root, path: &std::path::Path) -> Result<String, String> {
    use std::io::Read;
    let (file, meta) = root
        .open_inside(path, Access::Read, Expect::File)
        .map_err(|refusal| {
            format!(
                "{refusal} (`file` is read from the sequence sources directory {})",
                root.configured().display()
            )
        })?;
    let shown = root.display_relative(path);
    if meta.len() > MAX_SOURCE_BYTES {
        return Err(format!(
            "{shown} has {} bytes, more than a sequence file may ({MAX_SOURCE_BYTES})",
            meta.len()
        ));
    }
    let mut text = String::new();
    file.take(MAX_SOURCE_BYTES)
        .read_to_string(&mut text)
        .map_err(|e| format!("cannot read {shown}: {e}"))?;
    Ok(text)
}

/// The calling agent and chain from the call's extras.
fn caller_of(ctx: &ToolContext) -> Result<Caller, ToolError> {
    let agent = ctx
        .extras
        .get(AGENT_EXTRA)
        .and_then(Value::as_str)
        .ok_or_else(|| {
            ToolError::new(
                ErrorReason::Unauthorized,
                "the call names no agent; sequences run as their caller",
            )
        })?;
    let stack = ctx
        .extras
        .get(STACK_EXTRA)
        .and_then(Value::as_array)
        .map(|frames| {
            frames
                .iter()
                .filter_map(Value::as_str)
                .map(str::to_owned)
                .collect()
        })
        .unwrap_or_default();
    let mut extras = Map::clone(&ctx.extras);
    for key in [AGENT_EXTRA, STACK_EXTRA, CURRENT_EXTRA] {
        extras.remove(key);
    }
    Ok(Caller {
        agent: agent.to_owned(),
        extras,
        stack,
        cancel: ctx.cancel.clone(),
    })
}

fn string_arg(arguments: &Value, key: &str) -> Result<String, ToolError> {
    match arguments.get(key) {
        Some(Value::String(s)) => Ok(s.clone()),
        _ => Err(ToolError::new(
            ErrorReason::Required,
            format!("`{key}` (a string) is required"),
        )
        .with_field(key)),
    }
}

fn object_arg(arguments: &Value, key: &str) -> Result<Map<String, Value>, ToolError> {
    match arguments.get(key) {
        None | Some(Value::Null) => Ok(Map::new()),
        Some(Value::Object(map)) => Ok(map.clone()),
        Some(other) => Err(ToolError::new(
            ErrorReason::Type,
            format!(
                "`{key}` must be an object, got {}",
                crate::format::kind(other)
            ),
        )
        .with_field(key)),
    }
}

fn format_error(e: &FormatError) -> ToolError {
    ToolError::new(
        ErrorReason::InvalidArguments,
        format!("the sequence cannot be read: {e}"),
    )
    .with_hint("call seq_help for the format and a complete example")
}

fn store_error(e: crate::store::StoreError) -> ToolError {
    use crate::store::StoreError;
    let reason = match &e {
        StoreError::NotFound { .. } => ErrorReason::InvalidArguments,
        StoreError::BadName { .. } | StoreError::Cycle { .. } | StoreError::TooDeep { .. } => {
            ErrorReason::InvalidArguments
        }
        StoreError::Corrupt { .. } | StoreError::Io { .. } => ErrorReason::Execution,
    };
    ToolError::new(reason, e.to_string())
}
