#![allow(clippy::unwrap_used, clippy::expect_used)] // a panic in a test is a test failure

//! The one authorization gate: the model's path (a batch through the
//! executor) and the programmatic path ([`ToolApi`]) reach the same verdict
//! on every case, and approval is asked before the handler exists.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use homeagent_core::{
    AssembledCall, AssembledTurn, BatchContext, CallStatus, CancellationToken, ErrorReason,
    Executor, Registry, ToolCall, ToolContext, ToolDef, ToolError, ToolSource,
};
use homeagent_tools::{
    AgentGrant, Approval, Approver, Gate, GatedSource, ToolApi, gate::AGENT_EXTRA,
};
use serde_json::{Map, Value, json};

/// Counts the calls that really reached a handler.
#[derive(Default)]
struct Ran(AtomicUsize);

fn registry(ran: &Arc<Ran>) -> Arc<Registry> {
    let registry = Arc::new(Registry::new());
    for name in [
        "files_read",
        "files_write",
        "cmd_run",
        "device_cmd_run",
        "danger",
    ] {
        let ran = Arc::clone(ran);
        registry
            .register(
                ToolDef::new(name, "a test tool").parallel_safe(),
                move |ctx: ToolContext| {
                    let ran = Arc::clone(&ran);
                    async move {
                        ran.0.fetch_add(1, Ordering::SeqCst);
                        Ok::<Value, ToolError>(json!({"ran": ctx.tool}))
                    }
                },
            )
            .unwrap();
    }
    registry
}

fn gate() -> Gate {
    Gate::new([
        AgentGrant {
            name: "reader".into(),
            allow_tools: vec!["files_*".into(), "device_cmd_run".into()],
            deny_tools: vec!["files_write".into()],
            devices: vec!["nas".into()],
        },
        AgentGrant {
            name: "ops".into(),
            devices: vec!["pi".into()],
            ..AgentGrant::default()
        },
    ])
    .with_device_tool("device_cmd_run", "device_id")
    .with_approval_required(["danger".to_owned()])
}

/// (agent, tool, args, expected reason — None means it runs).
fn cases() -> Vec<(&'static str, &'static str, Value, Option<ErrorReason>)> {
    vec![
        ("reader", "files_read", json!({}), None),
        (
            "reader",
            "files_write",
            json!({}),
            Some(ErrorReason::Unauthorized),
        ),
        (
            "reader",
            "cmd_run",
            json!({}),
            Some(ErrorReason::Unauthorized),
        ),
        (
            "reader",
            "device_cmd_run",
            json!({"device_id": "nas"}),
            None,
        ),
        (
            "reader",
            "device_cmd_run",
            json!({"device_id": "pi"}),
            Some(ErrorReason::Unauthorized),
        ),
        (
            "reader",
            "device_cmd_run",
            json!({}),
            Some(ErrorReason::Unauthorized),
        ),
        ("ops", "device_cmd_run", json!({"device_id": "pi"}), None),
        (
            "ops",
            "device_cmd_run",
            json!({"device_id": ""}),
            Some(ErrorReason::Unauthorized),
        ),
        ("ops", "cmd_run", json!({}), None),
        ("main", "files_write", json!({}), None),
        // `main` exists without being declared, with no device.
        (
            "main",
            "device_cmd_run",
            json!({"device_id": "nas"}),
            Some(ErrorReason::Unauthorized),
        ),
        (
            "ghost",
            "files_read",
            json!({}),
            Some(ErrorReason::Unauthorized),
        ),
        // Requires approval; nobody can be asked here.
        ("ops", "danger", json!({}), Some(ErrorReason::Denied)),
    ]
}

fn turn(tool: &str, args: &Value) -> AssembledTurn {
    AssembledTurn {
        calls: vec![AssembledCall {
            call: ToolCall {
                id: "call_1".into(),
                name: tool.into(),
                arguments: args.clone(),
                raw_arguments: args.to_string(),
            },
            argument_error: None,
        }],
        ..AssembledTurn::default()
    }
}

fn extras(agent: &str) -> Map<String, Value> {
    let mut extras = Map::new();
    extras.insert(AGENT_EXTRA.into(), json!(agent));
    extras
}

#[tokio::test]
async fn the_model_path_and_the_tool_api_agree_on_every_case() {
    let ran = Arc::new(Ran::default());
    let source: Arc<dyn ToolSource> = Arc::new(GatedSource::new(
        registry(&ran),
        Arc::new(gate()),
        Approval::Refused,
    ));
    let executor = Arc::new(Executor::new(source));
    let api = ToolApi::new(Arc::clone(&executor));
    let mut expected_runs = 0;
    for (agent, tool, args, expected) in cases() {
        let batch = BatchContext {
            batch_id: "b".into(),
            extras: extras(agent).into(),
            cancel: CancellationToken::new(),
        };
        let model = executor
            .run(&turn(tool, &args), &batch)
            .await
            .outcomes
            .remove(0);
        let programmatic = api
            .call(
                agent,
                tool,
                args.clone(),
                Map::new(),
                CancellationToken::new(),
            )
            .await;
        let reason = |o: &homeagent_core::ToolOutcome| o.error.as_ref().map(|e| e.reason);
        assert_eq!(
            reason(&model),
            expected,
            "model path: {agent} {tool} {args}"
        );
        assert_eq!(
            reason(&programmatic),
            expected,
            "tool api: {agent} {tool} {args}"
        );
        assert_eq!(model.success, expected.is_none());
        assert_eq!(programmatic.success, expected.is_none());
        if expected.is_none() {
            expected_runs += 2;
            assert_eq!(model.value, json!({"ran": tool}));
        }
    }
    // Refused calls never reached a handler.
    assert_eq!(ran.0.load(Ordering::SeqCst), expected_runs);
}

#[tokio::test]
async fn a_call_without_an_agent_is_refused() {
    let ran = Arc::new(Ran::default());
    let source = GatedSource::new(registry(&ran), Arc::new(gate()), Approval::Granted);
    let ctx = ToolContext {
        call_id: "c".into(),
        tool: "files_read".into(),
        arguments: json!({}),
        batch_id: "b".into(),
        extras: Map::new().into(),
        cancel: CancellationToken::new(),
    };
    let err = source.invoke("files_read", ctx).await.unwrap_err();
    assert_eq!(err.reason, ErrorReason::Unauthorized);
    assert_eq!(ran.0.load(Ordering::SeqCst), 0);
}

struct Person {
    answer: bool,
    asked: Mutex<Vec<(String, String, Value)>>,
}

impl Approver for Person {
    fn approve(
        &self,
        agent: &str,
        tool: &str,
        args: &Value,
    ) -> std::pin::Pin<Box<dyn std::future::Future<Output = bool> + Send + 'static>> {
        self.asked
            .lock()
            .unwrap()
            .push((agent.into(), tool.into(), args.clone()));
        let answer = self.answer;
        Box::pin(async move { answer })
    }
}

#[tokio::test]
async fn approval_asks_with_the_arguments_and_a_no_means_the_handler_never_runs() {
    for answer in [true, false] {
        let ran = Arc::new(Ran::default());
        let person = Arc::new(Person {
            answer,
            asked: Mutex::new(Vec::new()),
        });
        let source: Arc<dyn ToolSource> = Arc::new(GatedSource::new(
            registry(&ran),
            Arc::new(gate()),
            Approval::Ask(person.clone()),
        ));
        let api = ToolApi::new(Arc::new(Executor::new(source)));
        let outcome = api
            .call(
                "ops",
                "danger",
                json!({"x": 1}),
                Map::new(),
                CancellationToken::new(),
            )
            .await;
        assert_eq!(
            *person.asked.lock().unwrap(),
            [("ops".to_owned(), "danger".to_owned(), json!({"x": 1}))]
        );
        assert_eq!(outcome.success, answer);
        assert_eq!(ran.0.load(Ordering::SeqCst), usize::from(answer));
        if !answer {
            assert_eq!(outcome.status(), CallStatus::Denied);
        }
        // A tool without the requirement is never asked about.
        let outcome = api
            .call(
                "ops",
                "cmd_run",
                json!({}),
                Map::new(),
                CancellationToken::new(),
            )
            .await;
        assert!(outcome.success);
        assert_eq!(person.asked.lock().unwrap().len(), 1);
    }
}

#[test]
fn the_gate_lists_its_agents_with_main_added_and_the_source_passes_definitions_through() {
    let gate = gate();
    let names: Vec<&str> = gate.agents().map(|a| a.name.as_str()).collect();
    assert_eq!(names, ["main", "ops", "reader"]);
    assert_eq!(gate.agent("main"), Some(&AgentGrant::main()));
    assert_eq!(gate.agent("main").unwrap().name, "main");
    assert_eq!(gate.agent("reader").unwrap().devices, ["nas"]);
    assert_eq!(gate.agent("ghost"), None);

    let ran = Arc::new(Ran::default());
    let inner = registry(&ran);
    let source = GatedSource::new(Arc::clone(&inner) as _, Arc::new(gate), Approval::Refused);
    let names = |defs: Vec<Arc<ToolDef>>| defs.iter().map(|d| d.name.clone()).collect::<Vec<_>>();
    assert_eq!(names(source.definitions()), names(inner.definitions()));
    assert_eq!(names(source.definitions()).len(), 5);
    assert_eq!(source.definition("files_read").unwrap().name, "files_read");
    assert!(source.definition("nope").is_none());
}

/// A call refused because nobody can approve it says how to approve it
/// wherever HomeAgent runs without a person to ask: `run` and `mcp-serve`
/// both take `--yes` (the hint named only `run`).
#[tokio::test]
async fn a_refused_approval_names_every_way_to_approve() {
    let ran = Arc::new(Ran::default());
    let source = GatedSource::new(registry(&ran), Arc::new(gate()), Approval::Refused);
    let ctx = homeagent_core::ToolContext {
        call_id: "c".into(),
        tool: "danger".into(),
        arguments: json!({}),
        batch_id: "b".into(),
        extras: extras("ops").into(),
        cancel: CancellationToken::new(),
    };
    let refused = source.invoke("danger", ctx).await.unwrap_err();
    assert_eq!(refused.reason, ErrorReason::Denied);
    let hint = refused.hint.unwrap_or_default();
    for way in [
        "homeagent chat",
        "homeagent run",
        "homeagent mcp-serve",
        "tools.require_approval",
    ] {
        assert!(hint.contains(way), "{way}: {hint}");
    }
}

#[test]
fn visibility_follows_allow_and_deny_lists() {
    let gate = gate();
    assert!(gate.visible("reader", "files_read"));
    assert!(!gate.visible("reader", "files_write"));
    assert!(!gate.visible("reader", "cmd_run"));
    assert!(gate.visible("main", "cmd_run"));
    assert!(!gate.visible("ghost", "files_read"));
}

/// Counts the calls its pre-hook saw.
struct Watching(AtomicUsize);

impl homeagent_core::PreToolHook for Watching {
    fn name(&self) -> &str {
        "watching"
    }
    fn before(
        &self,
        _call: &homeagent_core::CallInfo,
    ) -> homeagent_core::hooks::HookFuture<homeagent_core::PreDecision> {
        self.0.fetch_add(1, Ordering::SeqCst);
        Box::pin(async { Ok(homeagent_core::PreDecision::Allow) })
    }
}

/// A call the gate refuses is refused before any pre-hook sees it: a
/// hook (a command the config runs, a question to the person) never acts
/// on a call that cannot run. One the gate lets through is seen.
#[tokio::test]
async fn a_refused_call_reaches_no_pre_hook() {
    let ran = Arc::new(Ran::default());
    let watching = Arc::new(Watching(AtomicUsize::new(0)));
    let source: Arc<dyn ToolSource> = Arc::new(GatedSource::new(
        registry(&ran),
        Arc::new(gate()),
        Approval::Granted,
    ));
    let executor = Executor::new(source).with_pre_hook(Arc::clone(&watching) as _);
    let run = |agent: Option<&'static str>, tool: &'static str| {
        let batch = BatchContext {
            batch_id: "b".into(),
            extras: agent.map(extras).unwrap_or_default().into(),
            cancel: CancellationToken::new(),
        };
        let executor = &executor;
        async move {
            executor
                .run(&turn(tool, &json!({})), &batch)
                .await
                .outcomes
                .remove(0)
        }
    };
    for (agent, tool) in [
        (Some("reader"), "files_write"),
        (Some("nobody"), "files_read"),
        (None, "files_read"),
        (Some("reader"), "device_cmd_run"),
    ] {
        let outcome = run(agent, tool).await;
        assert_eq!(
            outcome.error.map(|e| e.reason),
            Some(ErrorReason::Unauthorized),
            "{agent:?} {tool}"
        );
        assert_eq!(watching.0.load(Ordering::SeqCst), 0, "{agent:?} {tool}");
    }
    assert!(run(Some("reader"), "files_read").await.success);
    assert_eq!(watching.0.load(Ordering::SeqCst), 1);
    assert_eq!(ran.0.load(Ordering::SeqCst), 1);
}

/// Counts the calls its post-hook saw.
struct WatchingAfter(AtomicUsize);

impl homeagent_core::PostToolHook for WatchingAfter {
    fn name(&self) -> &str {
        "watching-after"
    }
    fn after(
        &self,
        _call: &homeagent_core::CallInfo,
        _outcome: &homeagent_core::ToolOutcome,
    ) -> homeagent_core::hooks::HookFuture<Option<Value>> {
        self.0.fetch_add(1, Ordering::SeqCst);
        Box::pin(async { Ok(None) })
    }
}

/// A call the gate refuses reaches no hook at all, a post-hook included
/// and whether or not a pre-hook is configured, and is told it is refused
/// before its arguments are checked: an argument error would quote the
/// schema of a tool the agent may not see, and a client that fixed its
/// arguments would only be refused then. A call that needs approval where
/// nobody can be asked is refused the same way.
#[tokio::test]
async fn a_refused_call_reaches_no_hook_and_no_argument_check() {
    let ran = Arc::new(Ran::default());
    let inner = registry(&ran);
    inner
        .register(
            ToolDef::new("secret_op", "a tool the reader may not see").with_parameters(json!({
                "type": "object",
                "properties": {"target": {"type": "string", "description": "the hidden target"}},
                "required": ["target"]
            })),
            |_ctx: ToolContext| async { Ok::<Value, ToolError>(json!({})) },
        )
        .unwrap();
    let source: Arc<dyn ToolSource> =
        Arc::new(GatedSource::new(inner, Arc::new(gate()), Approval::Refused));
    let after = Arc::new(WatchingAfter(AtomicUsize::new(0)));
    let post_only = Executor::new(Arc::clone(&source)).with_post_hook(Arc::clone(&after) as _);
    let before = Arc::new(Watching(AtomicUsize::new(0)));
    let both = Executor::new(source)
        .with_pre_hook(Arc::clone(&before) as _)
        .with_post_hook(Arc::clone(&after) as _);
    for executor in [&post_only, &both] {
        for (agent, tool, reason) in [
            ("reader", "secret_op", ErrorReason::Unauthorized),
            ("reader", "files_write", ErrorReason::Unauthorized),
            ("ops", "danger", ErrorReason::Denied),
        ] {
            let batch = BatchContext {
                batch_id: "b".into(),
                extras: extras(agent).into(),
                cancel: CancellationToken::new(),
            };
            let outcome = executor
                .run(&turn(tool, &json!({})), &batch)
                .await
                .outcomes
                .remove(0);
            let error = outcome.error.unwrap();
            assert_eq!(error.reason, reason, "{agent} {tool}: {error:?}");
            assert!(
                !format!("{error:?}").contains("target"),
                "{agent} {tool}: {error:?}"
            );
        }
    }
    assert_eq!(before.0.load(Ordering::SeqCst), 0);
    assert_eq!(after.0.load(Ordering::SeqCst), 0);
    assert_eq!(ran.0.load(Ordering::SeqCst), 0);
    // The grant and the approval are asked apart: a sequence checks its
    // author's grant alone, and must not blame the author for an approval
    // nobody can give (the call itself is refused for that, saying so).
    let info = |agent: &str, tool: &str| homeagent_core::CallInfo {
        call_id: "c".into(),
        tool: tool.into(),
        arguments: json!({}),
        batch_id: "b".into(),
        extras: extras(agent).into(),
    };
    let gated = GatedSource::new(registry(&ran), Arc::new(gate()), Approval::Refused);
    assert!(gated.refusal(&info("ops", "danger")).is_none());
    assert_eq!(
        gated
            .approval_refusal(&info("ops", "danger"))
            .map(|e| e.reason),
        Some(ErrorReason::Denied)
    );
    assert!(gated.approval_refusal(&info("ops", "cmd_run")).is_none());
    let granted = GatedSource::new(registry(&ran), Arc::new(gate()), Approval::Granted);
    assert!(granted.approval_refusal(&info("ops", "danger")).is_none());
    // One the gate lets through is seen by both.
    let batch = BatchContext {
        batch_id: "b".into(),
        extras: extras("reader").into(),
        cancel: CancellationToken::new(),
    };
    assert!(
        both.run(&turn("files_read", &json!({})), &batch)
            .await
            .outcomes[0]
            .success
    );
    assert_eq!(before.0.load(Ordering::SeqCst), 1);
    assert_eq!(after.0.load(Ordering::SeqCst), 1);
}

/// Answers after a while, as a person does.
struct SlowPerson(std::time::Duration);

impl Approver for SlowPerson {
    fn approve(
        &self,
        _agent: &str,
        _tool: &str,
        _args: &Value,
    ) -> std::pin::Pin<Box<dyn std::future::Future<Output = bool> + Send + 'static>> {
        let after = self.0;
        Box::pin(async move {
            tokio::time::sleep(after).await;
            true
        })
    }
}

/// The time a person takes to answer is not the tool's: a call whose
/// answer came after its timeout runs (it timed out before it started),
/// and its timeout still bounds the tool itself once it runs.
#[tokio::test]
async fn waiting_for_approval_does_not_count_against_the_timeout() {
    let timeout = std::time::Duration::from_millis(300);
    let answer_after = std::time::Duration::from_millis(700);
    let registry = Arc::new(Registry::new());
    registry
        .register(
            ToolDef::new("danger", "a test tool"),
            |ctx: ToolContext| async move {
                let ms = ctx.arguments["sleep_ms"].as_u64().unwrap_or(0);
                tokio::time::sleep(std::time::Duration::from_millis(ms)).await;
                Ok::<Value, ToolError>(json!({"slept_ms": ms}))
            },
        )
        .unwrap();
    let source: Arc<dyn ToolSource> = Arc::new(GatedSource::new(
        registry,
        Arc::new(gate()),
        Approval::Ask(Arc::new(SlowPerson(answer_after))),
    ));
    let executor = Executor::new(source).with_options(homeagent_core::ExecutorOptions {
        default_timeout: timeout,
        ..homeagent_core::ExecutorOptions::default()
    });
    let run = |sleep_ms: u64| {
        let executor = &executor;
        async move {
            let batch = BatchContext {
                batch_id: "b".into(),
                extras: extras("ops").into(),
                cancel: CancellationToken::new(),
            };
            let began = std::time::Instant::now();
            let outcome = executor
                .run(&turn("danger", &json!({"sleep_ms": sleep_ms})), &batch)
                .await
                .outcomes
                .remove(0);
            (outcome, began.elapsed())
        }
    };
    let (outcome, _) = run(0).await;
    assert!(outcome.success, "{:?}", outcome.error);
    assert_eq!(outcome.value, json!({"slept_ms": 0}));
    // A tool that runs past its timeout once approved is still stopped,
    // and no sooner than the answer plus the timeout.
    let (outcome, took) = run(5_000).await;
    assert_eq!(outcome.error.map(|e| e.reason), Some(ErrorReason::Timeout));
    assert!(took >= answer_after + timeout, "{took:?}");
}

/// A name that is no tool is answered with the closest tools the agent
/// may use: never one its grant refuses (the next call would only be
/// refused), and never a hint that shows it what exists beyond its grant.
#[tokio::test]
async fn a_missing_tool_suggests_only_tools_the_agent_may_use() {
    let ran = Arc::new(Ran::default());
    let source = GatedSource::new(registry(&ran), Arc::new(gate()), Approval::Granted);
    let call = |agent: &str, tool: &str| ToolContext {
        call_id: "c".into(),
        tool: tool.into(),
        arguments: json!({}),
        batch_id: "b".into(),
        extras: extras(agent).into(),
        cancel: CancellationToken::new(),
    };
    // `reader` may not use files_write: "files_writ" suggests no such tool.
    let err = source
        .invoke("files_writ", call("reader", "files_writ"))
        .await
        .unwrap_err();
    assert_eq!(err.reason, ErrorReason::NotFound);
    let hint = err.hint.unwrap_or_default();
    assert!(!hint.contains("files_write"), "{hint}");
    // `ops` may: the same slip suggests it.
    let err = source
        .invoke("files_writ", call("ops", "files_writ"))
        .await
        .unwrap_err();
    assert!(err.hint.unwrap_or_default().contains("files_write"));
    assert_eq!(ran.0.load(Ordering::SeqCst), 0);
}
