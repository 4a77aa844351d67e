//! Shared test setup: a real registry with the demo tools, small test tools
//! with controlled delays and failures, the seq tools, a gate with two
//! agents, and the executor/ToolApi over the gated source — the same path
//! the runtime builds.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)] // a panic in a test is a test failure

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use homeagent_core::{
    CancellationToken, ErrorReason, Executor, OrderKey, PreToolHook, Registry, ToolContext,
    ToolDef, ToolError, ToolOutcome,
};
use homeagent_seq::{
    BackendSlot, Caller, Engine, SeqBackend, SeqStore, SeqToolsOptions, Sequence,
    parse_sequence_value, register_seq_tools,
};
use homeagent_tools::{
    AgentGrant, Approval, DemoState, Gate, GatedSource, ToolApi, register_demo_tools,
};
use serde_json::{Map, Value, json};

/// A directory under the system temp dir, removed on drop.
pub struct TempDir(pub PathBuf);

impl TempDir {
    pub fn new(label: &str) -> Self {
        static NEXT: AtomicU64 = AtomicU64::new(0);
        let dir = std::env::temp_dir().join(format!(
            "homeagent-seq-{label}-{}-{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        ));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        TempDir(dir)
    }

    pub fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

pub struct Harness {
    pub dir: TempDir,
    pub registry: Arc<Registry>,
    pub demo: DemoState,
    pub store: Arc<SeqStore>,
    pub engine: Engine,
    pub api: ToolApi,
    /// Tags of `t_delay` calls in the order they finished.
    pub finished: Arc<Mutex<Vec<String>>>,
    /// Calls per `t_flaky` key.
    pub attempts: Arc<Mutex<HashMap<String, u64>>>,
}

/// The agent that may not use demo_note.
pub const LIMITED: &str = "limited";

/// The agent that may use the device `nas` (no other agent may).
pub const OPS: &str = "ops";

pub fn harness() -> Harness {
    harness_with_pre_hooks(Vec::new())
}

/// [`harness`], with these pre-hooks on the executor (as the runtime
/// attaches the command hooks).
pub fn harness_with_pre_hooks(pre_hooks: Vec<Arc<dyn PreToolHook>>) -> Harness {
    let dir = TempDir::new("engine");
    let registry = Arc::new(Registry::new());
    let demo = register_demo_tools(&registry).unwrap();
    let finished = Arc::new(Mutex::new(Vec::new()));
    let attempts = Arc::new(Mutex::new(HashMap::new()));
    register_test_tools(&registry, &finished, &attempts);
    let store = Arc::new(SeqStore::new(dir.path()));
    let slot = BackendSlot::default();
    let source_dir = dir.path().join("sources");
    register_seq_tools(
        &registry,
        Arc::clone(&store),
        Arc::clone(&slot),
        SeqToolsOptions {
            source_dir: Some(source_dir),
        },
    )
    .unwrap();
    let gate = Arc::new(
        Gate::new([
            AgentGrant {
                name: LIMITED.into(),
                deny_tools: vec!["demo_note".into()],
                ..AgentGrant::default()
            },
            AgentGrant {
                name: OPS.into(),
                devices: vec!["nas".into()],
                ..AgentGrant::default()
            },
        ])
        .with_device_tool("t_remote", "device_id"),
    );
    let gated = Arc::new(GatedSource::new(
        Arc::clone(&registry) as _,
        gate,
        Approval::Refused,
    ));
    let executor = Arc::new(
        pre_hooks
            .into_iter()
            .fold(Executor::new(gated as _), Executor::with_pre_hook),
    );
    let backend = SeqBackend::new(Arc::clone(&executor));
    slot.set(backend.clone()).unwrap();
    Harness {
        engine: Engine::new(backend, Arc::clone(&store)),
        api: ToolApi::new(executor),
        dir,
        registry,
        demo,
        store,
        finished,
        attempts,
    }
}

fn register_test_tools(
    registry: &Registry,
    finished: &Arc<Mutex<Vec<String>>>,
    attempts: &Arc<Mutex<HashMap<String, u64>>>,
) {
    let log = Arc::clone(finished);
    registry
        .register(
            ToolDef::new("t_delay", "sleeps ms then returns tag").parallel_safe(),
            move |ctx: ToolContext| {
                let log = Arc::clone(&log);
                async move {
                    let ms = ctx.arguments["ms"].as_u64().unwrap_or(0);
                    let tag = ctx.arguments["tag"].as_str().unwrap_or("").to_owned();
                    tokio::time::sleep(Duration::from_millis(ms)).await;
                    log.lock().unwrap().push(tag.clone());
                    Ok(Value::String(format!("ran:{tag}")))
                }
            },
        )
        .unwrap();
    let log = Arc::clone(finished);
    registry
        .register(
            ToolDef::new(
                "t_device",
                "holds device `device` for ms; logs start and end",
            )
            .parallel_safe()
            .with_order_key(OrderKey::Argument("device".into())),
            move |ctx: ToolContext| {
                let log = Arc::clone(&log);
                async move {
                    let ms = ctx.arguments["ms"].as_u64().unwrap_or(0);
                    let device = ctx.arguments["device"].as_str().unwrap_or("").to_owned();
                    log.lock().unwrap().push(format!("start {device}"));
                    tokio::time::sleep(Duration::from_millis(ms)).await;
                    log.lock().unwrap().push(format!("end {device}"));
                    Ok(Value::String(device))
                }
            },
        )
        .unwrap();
    let counts = Arc::clone(attempts);
    registry
        .register(
            ToolDef::new("t_flaky", "fails the first `fail` calls per key").parallel_safe(),
            move |ctx: ToolContext| {
                let counts = Arc::clone(&counts);
                async move {
                    let key = ctx.arguments["key"].as_str().unwrap_or("").to_owned();
                    let fail = ctx.arguments["fail"].as_u64().unwrap_or(0);
                    let n = {
                        let mut c = counts.lock().unwrap();
                        let n = c.entry(key.clone()).or_insert(0);
                        *n += 1;
                        *n
                    };
                    if n <= fail {
                        Err(ToolError::execution(format!(
                            "flaky {key} failed on call {n}"
                        )))
                    } else {
                        Ok(json!({"key": key, "call": n}))
                    }
                }
            },
        )
        .unwrap();
    let panics = Arc::clone(attempts);
    registry
        .register(
            ToolDef::new(
                "t_panic",
                "panics, counting its calls under the key `panic`",
            ),
            move |_ctx: ToolContext| {
                let panics = Arc::clone(&panics);
                async move {
                    *panics.lock().unwrap().entry("panic".into()).or_insert(0) += 1;
                    if true {
                        panic!("t_panic panics");
                    }
                    Ok(Value::Null)
                }
            },
        )
        .unwrap();
    registry
        .register(
            ToolDef::new("t_remote", "runs on the device named in `device_id`"),
            |ctx: ToolContext| async move {
                Ok(json!(format!("ran on {}", ctx.arguments["device_id"])))
            },
        )
        .unwrap();
    registry
        .register(
            ToolDef::new("t_unsafe", "not parallel-safe; returns its tag"),
            |ctx: ToolContext| async move { Ok(ctx.arguments["tag"].clone()) },
        )
        .unwrap();
    registry
        .register(
            ToolDef::new(
                "t_offline",
                "exists, but answers NotFound about what it looks up (an offline device)",
            )
            .parallel_safe(),
            |_ctx: ToolContext| async move {
                Err::<Value, _>(ToolError::new(
                    ErrorReason::NotFound,
                    "device nas is not connected",
                ))
            },
        )
        .unwrap();
    registry
        .register(
            ToolDef::new("t_denied_reason", "always refuses as Denied"),
            |_ctx: ToolContext| async move {
                Err::<Value, _>(ToolError::new(ErrorReason::Denied, "nope"))
            },
        )
        .unwrap();
}

/// Parses a sequence written as JSON (tools as strings).
pub fn seq(value: Value) -> Sequence {
    parse_sequence_value(&value).unwrap()
}

pub fn args(value: Value) -> Map<String, Value> {
    value.as_object().cloned().unwrap()
}

pub fn main_caller() -> Caller {
    Caller::new("main")
}

impl Harness {
    /// Calls a tool as `agent` through the gated ToolApi (as the model would).
    pub async fn call(&self, agent: &str, tool: &str, args: Value) -> ToolOutcome {
        self.api
            .call(agent, tool, args, Map::new(), CancellationToken::new())
            .await
    }
}
