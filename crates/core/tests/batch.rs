//! Batch execution: the acceptance criteria of the kernel's parallel layer.

#![allow(clippy::unwrap_used, clippy::expect_used)] // a panic in a test is a test failure

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use homeagent_core::assemble::AssembledCall;
use homeagent_core::hooks::HookFuture;
use homeagent_core::{
    AssembledTurn, BatchContext, BatchMode, CallInfo, CallStatus, ErrorReason, Executor,
    ExecutorOptions, Message, OrderKey, PostToolHook, PreDecision, PreToolHook, Registry,
    SerialReason, ToolCall, ToolContext, ToolDef, ToolError, ToolEvent, ToolOutcome, check_pairing,
};
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

/// Counts calls in flight and remembers the peak.
#[derive(Default)]
struct Gauge {
    now: AtomicUsize,
    peak: AtomicUsize,
    invoked: AtomicUsize,
}

impl Gauge {
    fn enter(&self) {
        self.invoked.fetch_add(1, Ordering::SeqCst);
        let now = self.now.fetch_add(1, Ordering::SeqCst) + 1;
        self.peak.fetch_max(now, Ordering::SeqCst);
    }
    fn leave(&self) {
        self.now.fetch_sub(1, Ordering::SeqCst);
    }
    fn peak(&self) -> usize {
        self.peak.load(Ordering::SeqCst)
    }
    fn invoked(&self) -> usize {
        self.invoked.load(Ordering::SeqCst)
    }
}

fn call(id: &str, name: &str, args: Value) -> AssembledCall {
    AssembledCall {
        call: ToolCall {
            id: id.into(),
            name: name.into(),
            raw_arguments: args.to_string(),
            arguments: args,
        },
        argument_error: None,
    }
}

fn turn(text: &str, calls: Vec<AssembledCall>) -> AssembledTurn {
    AssembledTurn {
        text: text.into(),
        calls,
        ..Default::default()
    }
}

/// A tool that sleeps `ms` and reports its own call id, watching the gauge.
fn sleeper(reg: &Registry, name: &str, gauge: &Arc<Gauge>, safe: bool) {
    let g = gauge.clone();
    let mut def = ToolDef::new(name, "sleeps");
    if safe {
        def = def.parallel_safe();
    }
    reg.register(def, move |ctx: ToolContext| {
        let g = g.clone();
        async move {
            g.enter();
            let ms = ctx
                .arguments
                .get("ms")
                .and_then(Value::as_u64)
                .unwrap_or(20);
            tokio::time::sleep(Duration::from_millis(ms)).await;
            g.leave();
            Ok(json!({"call_id": ctx.call_id}))
        }
    })
    .unwrap();
}

/// A tool that waits until `n` calls are in flight at once (or gives up
/// after a while), so full overlap is observed without timing assumptions.
fn rendezvous(reg: &Registry, gauge: &Arc<Gauge>, n: usize) {
    let g = gauge.clone();
    reg.register(
        ToolDef::new("meet", "waits for its siblings").parallel_safe(),
        move |_ctx: ToolContext| {
            let g = g.clone();
            async move {
                g.enter();
                for _ in 0..500 {
                    if g.now.load(Ordering::SeqCst) >= n {
                        break;
                    }
                    tokio::time::sleep(Duration::from_millis(10)).await;
                }
                // Stay a little so late siblings still see us in flight.
                tokio::time::sleep(Duration::from_millis(20)).await;
                g.leave();
                Ok(json!("met"))
            }
        },
    )
    .unwrap();
}

fn executor(reg: Registry) -> Executor {
    Executor::new(Arc::new(reg))
}

/// A stop switch that a person flips after `delay`.
fn stop_after(delay: Duration) -> CancellationToken {
    let cancel = CancellationToken::new();
    let stopper = cancel.clone();
    tokio::spawn(async move {
        tokio::time::sleep(delay).await;
        stopper.cancel();
    });
    cancel
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_all_safe_batch_reaches_full_concurrency_and_pairs_every_call_once() {
    let gauge = Arc::new(Gauge::default());
    let reg = Registry::new();
    rendezvous(&reg, &gauge, 8);
    let calls = (0..8)
        .map(|i| call(&format!("c{i}"), "meet", json!({})))
        .collect();
    let result = executor(reg)
        .run(&turn("Running 8 checks.", calls), &BatchContext::default())
        .await;

    assert_eq!(result.mode, BatchMode::Parallel);
    assert_eq!(gauge.peak(), 8, "all 8 calls were in flight at once");
    assert_eq!(gauge.invoked(), 8, "every call executed exactly once");
    let messages = result.messages();
    // One assistant message with all calls and the text once, then one tool
    // message per call in index order.
    assert_eq!(messages.len(), 9);
    let Message::Assistant(assistant) = &messages[0] else {
        panic!("first is the assistant")
    };
    assert_eq!(assistant.content, "Running 8 checks.");
    assert_eq!(assistant.tool_calls.len(), 8);
    let answered: Vec<&str> = messages[1..]
        .iter()
        .map(|m| match m {
            Message::Tool(t) => t.tool_call_id.as_str(),
            other => panic!("expected a tool message, got {other:?}"),
        })
        .collect();
    let expected: Vec<String> = (0..8).map(|i| format!("c{i}")).collect();
    assert_eq!(answered, expected);
    let mut history = vec![Message::user("go")];
    history.extend(messages);
    assert_eq!(check_pairing(&history), Ok(()));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn one_unsafe_tool_makes_the_whole_batch_serial() {
    let gauge = Arc::new(Gauge::default());
    let reg = Registry::new();
    sleeper(&reg, "read", &gauge, true);
    sleeper(&reg, "write", &gauge, false);
    let calls = vec![
        call("a", "read", json!({"ms": 30})),
        call("b", "write", json!({"ms": 30})),
        call("c", "read", json!({"ms": 30})),
        call("d", "read", json!({"ms": 30})),
    ];
    let result = executor(reg)
        .run(&turn("", calls), &BatchContext::default())
        .await;
    assert_eq!(
        result.mode,
        BatchMode::Serial {
            reason: SerialReason::NotParallelSafe {
                tool: "write".into()
            }
        }
    );
    assert_eq!(gauge.peak(), 1);
    assert_eq!(gauge.invoked(), 4);
    assert!(result.outcomes.iter().all(|o| o.success));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn serial_wins_and_unknown_tools_are_unsafe() {
    let gauge = Arc::new(Gauge::default());
    let reg = Registry::new();
    sleeper(&reg, "read", &gauge, true);
    reg.register(
        ToolDef::new("both", "").parallel_safe().serial(),
        |_c: ToolContext| async { Ok(json!(1)) },
    )
    .unwrap();
    let exec = executor(reg);
    let plan = |calls: Vec<AssembledCall>| exec.plan(&calls);
    assert_eq!(
        plan(vec![
            call("a", "read", json!({})),
            call("b", "both", json!({}))
        ]),
        BatchMode::Serial {
            reason: SerialReason::NotParallelSafe {
                tool: "both".into()
            }
        }
    );
    assert_eq!(
        plan(vec![
            call("a", "read", json!({})),
            call("b", "nope", json!({}))
        ]),
        BatchMode::Serial {
            reason: SerialReason::UnknownTool {
                tool: "nope".into()
            }
        }
    );
    assert_eq!(
        plan(vec![call("a", "read", json!({}))]),
        BatchMode::Serial {
            reason: SerialReason::SingleCall
        }
    );
    assert_eq!(
        plan(vec![
            call("a", "read", json!({})),
            call("b", "read", json!({}))
        ]),
        BatchMode::Parallel
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn parallel_execution_can_be_switched_off() {
    let gauge = Arc::new(Gauge::default());
    let reg = Registry::new();
    sleeper(&reg, "read", &gauge, true);
    let exec = executor(reg).with_options(ExecutorOptions {
        parallel: false,
        ..Default::default()
    });
    let calls = (0..4)
        .map(|i| call(&format!("c{i}"), "read", json!({"ms": 20})))
        .collect();
    let result = exec.run(&turn("", calls), &BatchContext::default()).await;
    assert_eq!(
        result.mode,
        BatchMode::Serial {
            reason: SerialReason::Disabled
        }
    );
    assert_eq!(gauge.peak(), 1);
}

/// Registers `send` (keyed on a fixed channel) and `device_run` (keyed on
/// its `device_id` argument). Earlier calls sleep longer, so running them
/// concurrently would finish them out of order.
fn ordered_tools(reg: &Registry, log: &Arc<Mutex<Vec<String>>>) {
    for (name, key) in [
        ("send", OrderKey::Fixed("console".into())),
        ("device_run", OrderKey::Argument("device_id".into())),
    ] {
        let log = log.clone();
        reg.register(
            ToolDef::new(name, "").parallel_safe().with_order_key(key),
            move |ctx: ToolContext| {
                let log = log.clone();
                async move {
                    let ms = ctx.arguments["ms"].as_u64().unwrap_or(0);
                    tokio::time::sleep(Duration::from_millis(ms)).await;
                    log.lock()
                        .unwrap()
                        .push(ctx.arguments["text"].as_str().unwrap_or("").to_owned());
                    Ok(json!("sent"))
                }
            },
        )
        .unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sends_to_one_channel_keep_their_order() {
    let log = Arc::new(Mutex::new(Vec::new()));
    let reg = Registry::new();
    ordered_tools(&reg, &log);
    let calls = vec![
        call("a", "send", json!({"text": "first", "ms": 60})),
        call("b", "send", json!({"text": "second", "ms": 30})),
        call("c", "send", json!({"text": "third", "ms": 0})),
    ];
    let result = executor(reg)
        .run(&turn("", calls), &BatchContext::default())
        .await;
    assert_eq!(
        result.mode,
        BatchMode::Serial {
            reason: SerialReason::SharedOrderKey {
                key: "fixed:console".into()
            }
        }
    );
    assert_eq!(*log.lock().unwrap(), vec!["first", "second", "third"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn commands_for_different_devices_overlap_and_for_one_device_keep_order() {
    let log = Arc::new(Mutex::new(Vec::new()));
    let reg = Registry::new();
    ordered_tools(&reg, &log);
    let exec = executor(reg);
    let different = vec![
        call(
            "a",
            "device_run",
            json!({"device_id": "nas", "text": "nas", "ms": 60}),
        ),
        call(
            "b",
            "device_run",
            json!({"device_id": "pi", "text": "pi", "ms": 0}),
        ),
    ];
    let result = exec
        .run(&turn("", different), &BatchContext::default())
        .await;
    assert_eq!(result.mode, BatchMode::Parallel);
    assert_eq!(*log.lock().unwrap(), vec!["pi", "nas"], "they overlapped");

    log.lock().unwrap().clear();
    let same = vec![
        call(
            "a",
            "device_run",
            json!({"device_id": "nas", "text": "1", "ms": 60}),
        ),
        call(
            "b",
            "device_run",
            json!({"device_id": "nas", "text": "2", "ms": 0}),
        ),
    ];
    let result = exec.run(&turn("", same), &BatchContext::default()).await;
    assert!(matches!(
        result.mode,
        BatchMode::Serial {
            reason: SerialReason::SharedOrderKey { .. }
        }
    ));
    assert_eq!(*log.lock().unwrap(), vec!["1", "2"]);

    // A device call without its device id cannot be placed: serial.
    let missing = vec![
        call("a", "device_run", json!({"text": "x"})),
        call("b", "device_run", json!({"device_id": "pi", "text": "y"})),
    ];
    assert_eq!(
        exec.plan(&missing),
        BatchMode::Serial {
            reason: SerialReason::MissingOrderKey {
                tool: "device_run".into()
            }
        }
    );
}

struct DenyTool(&'static str);

impl PreToolHook for DenyTool {
    fn name(&self) -> &str {
        "deny-tool"
    }
    fn before(&self, call: &CallInfo) -> HookFuture<PreDecision> {
        let verdict = if call.tool == self.0 {
            PreDecision::Deny {
                reason: format!("policy forbids {}", call.tool),
            }
        } else {
            PreDecision::Allow
        };
        Box::pin(async move { Ok(verdict) })
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_denied_call_does_not_stop_the_next_one() {
    let gauge = Arc::new(Gauge::default());
    let reg = Registry::new();
    sleeper(&reg, "danger", &gauge, false);
    sleeper(&reg, "fine", &gauge, false);
    let exec = executor(reg).with_pre_hook(Arc::new(DenyTool("danger")));
    let calls = vec![
        call("c1", "danger", json!({})),
        call("c2", "fine", json!({})),
    ];
    let result = exec.run(&turn("", calls), &BatchContext::default()).await;
    let denied = &result.outcomes[0];
    assert_eq!(denied.status(), CallStatus::Denied);
    assert!(
        denied.text.contains("policy forbids danger"),
        "{}",
        denied.text
    );
    assert!(result.outcomes[1].success);
    assert_eq!(gauge.invoked(), 1, "only the allowed call ran");
    assert_eq!(result.tool_messages[0].content, denied.text);
}

/// Checks inside the handler that its context is its own, and changes its
/// extras to prove that siblings do not see it: the batch's map is shared,
/// so a handler that writes to it gets a copy of its own (`Arc::make_mut`).
fn isolated(reg: &Registry) {
    reg.register(
        ToolDef::new("iso", "").parallel_safe(),
        |mut ctx: ToolContext| async move {
            let expect = ctx.arguments["expect"]
                .as_str()
                .unwrap_or_default()
                .to_owned();
            if ctx.call_id != expect {
                return Err(ToolError::execution(format!(
                    "saw {} but expected {expect}",
                    ctx.call_id
                )));
            }
            if ctx.extras.contains_key("touched_by") {
                return Err(ToolError::execution("extras were shared with a sibling"));
            }
            Arc::make_mut(&mut ctx.extras).insert("touched_by".into(), json!(ctx.call_id));
            tokio::time::sleep(Duration::from_millis(1)).await;
            Ok(json!({"call_id": ctx.call_id, "session": ctx.extras["session"]}))
        },
    )
    .unwrap();
}

struct TagWithOwnCall;

impl PostToolHook for TagWithOwnCall {
    fn name(&self) -> &str {
        "tag"
    }
    fn after(&self, call: &CallInfo, outcome: &ToolOutcome) -> HookFuture<Option<Value>> {
        let same =
            call.call_id == outcome.call_id && outcome.value["call_id"] == json!(call.call_id);
        let value = json!({"hook_saw": call.call_id, "consistent": same});
        Box::pin(async move { Ok(Some(value)) })
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn each_call_and_its_after_hook_see_only_their_own_call() {
    let reg = Registry::new();
    isolated(&reg);
    let exec = executor(reg).with_post_hook(Arc::new(TagWithOwnCall));
    let mut extras = serde_json::Map::new();
    extras.insert("session".into(), json!("s1"));
    for round in 0..100 {
        let calls: Vec<AssembledCall> = (0..8)
            .map(|i| {
                let id = format!("r{round}c{i}");
                call(&id, "iso", json!({"expect": id}))
            })
            .collect();
        let batch = BatchContext {
            batch_id: format!("b{round}"),
            extras: Arc::new(extras.clone()),
            ..Default::default()
        };
        let result = exec.run(&turn("", calls), &batch).await;
        assert_eq!(result.mode, BatchMode::Parallel);
        for (i, outcome) in result.outcomes.iter().enumerate() {
            let id = format!("r{round}c{i}");
            assert!(outcome.success, "{}", outcome.text);
            assert_eq!(outcome.value, json!({"hook_saw": id, "consistent": true}));
            assert_eq!(
                outcome.text,
                format!("{{\"consistent\":true,\"hook_saw\":\"{id}\"}}")
            );
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_timed_out_call_and_a_panicking_call_do_not_disturb_their_siblings() {
    let gauge = Arc::new(Gauge::default());
    let reg = Registry::new();
    sleeper(&reg, "ok", &gauge, true);
    reg.register(
        ToolDef::new("slow", "")
            .parallel_safe()
            .with_timeout(Duration::from_millis(100)),
        |_c: ToolContext| async {
            tokio::time::sleep(Duration::from_secs(30)).await;
            Ok(json!("late"))
        },
    )
    .unwrap();
    reg.register(
        ToolDef::new("boom", "").parallel_safe(),
        |_c: ToolContext| async {
            if true {
                panic!("index out of bounds in the tool");
            }
            Ok(json!(null))
        },
    )
    .unwrap();
    let calls = vec![
        call("a", "ok", json!({"ms": 10})),
        call("b", "slow", json!({})),
        call("c", "boom", json!({})),
        call("d", "ok", json!({"ms": 200})),
    ];
    let result = executor(reg)
        .run(&turn("", calls), &BatchContext::default())
        .await;
    assert_eq!(result.mode, BatchMode::Parallel);
    let reasons: Vec<Option<ErrorReason>> = result
        .outcomes
        .iter()
        .map(|o| o.error.as_ref().map(|e| e.reason))
        .collect();
    assert_eq!(
        reasons,
        vec![
            None,
            Some(ErrorReason::Timeout),
            Some(ErrorReason::Panic),
            None
        ]
    );
    assert!(
        result.outcomes[1].text.contains("100ms"),
        "{}",
        result.outcomes[1].text
    );
    assert!(
        result.outcomes[2].text.contains("index out of bounds"),
        "{}",
        result.outcomes[2].text
    );
    assert_eq!(result.outcomes[1].status(), CallStatus::Timeout);
    assert_eq!(gauge.invoked(), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn stopping_a_batch_cancels_running_calls_and_still_pairs_them() {
    let gauge = Arc::new(Gauge::default());
    let reg = Registry::new();
    sleeper(&reg, "long", &gauge, true);
    sleeper(&reg, "long_serial", &gauge, false);
    let exec = executor(reg);

    let cancel = stop_after(Duration::from_millis(100));
    let calls = (0..3)
        .map(|i| call(&format!("p{i}"), "long", json!({"ms": 30_000})))
        .collect();
    let batch = BatchContext {
        cancel,
        ..Default::default()
    };
    let result = exec.run(&turn("", calls), &batch).await;
    assert!(
        result
            .outcomes
            .iter()
            .all(|o| o.status() == CallStatus::Cancelled)
    );
    // Handlers that unwind at the stop are not said to be abandoned.
    for outcome in &result.outcomes {
        let detail = &outcome.error.as_ref().unwrap().detail;
        assert_eq!(
            detail, "the call was stopped before it finished",
            "{outcome:?}"
        );
    }
    assert_eq!(result.tool_messages.len(), 3);
    assert_eq!(
        gauge.now.load(Ordering::SeqCst),
        3,
        "dropped handlers never reached leave()"
    );

    // Serial: the running call is stopped, the later ones never start.
    let gauge_before = gauge.invoked();
    let cancel = stop_after(Duration::from_millis(100));
    let calls = (0..3)
        .map(|i| call(&format!("s{i}"), "long_serial", json!({"ms": 30_000})))
        .collect();
    let batch = BatchContext {
        cancel,
        ..Default::default()
    };
    let result = exec.run(&turn("", calls), &batch).await;
    assert_eq!(
        gauge.invoked() - gauge_before,
        1,
        "only the first serial call started"
    );
    assert!(
        result
            .outcomes
            .iter()
            .all(|o| o.status() == CallStatus::Cancelled)
    );
    assert!(
        result.outcomes[2].text.contains("did not run"),
        "{}",
        result.outcomes[2].text
    );
}

/// Counts the calls it saw.
struct CountingPostHook(Arc<AtomicUsize>);

impl PostToolHook for CountingPostHook {
    fn name(&self) -> &str {
        "count"
    }
    fn after(&self, _call: &CallInfo, _outcome: &ToolOutcome) -> HookFuture<Option<Value>> {
        self.0.fetch_add(1, Ordering::SeqCst);
        Box::pin(async move { Ok(None) })
    }
}

/// A call stopped with its batch has no result for a post-hook to see:
/// the hooks are skipped, every time (it was a race between a finished
/// hook and the stop), and the warning says they did not run (it said
/// the result "was kept as the tool returned it").
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn post_hooks_of_a_stopped_call_are_skipped_every_time() {
    let gauge = Arc::new(Gauge::default());
    let seen = Arc::new(AtomicUsize::new(0));
    let reg = Registry::new();
    sleeper(&reg, "long", &gauge, true);
    let exec = executor(reg).with_post_hook(Arc::new(CountingPostHook(seen.clone())));
    for round in 0..20 {
        let batch = BatchContext {
            cancel: stop_after(Duration::from_millis(20)),
            ..Default::default()
        };
        let calls = vec![call(&format!("c{round}"), "long", json!({"ms": 30_000}))];
        let result = exec.run(&turn("", calls), &batch).await;
        let outcome = &result.outcomes[0];
        assert_eq!(outcome.status(), CallStatus::Cancelled, "{outcome:?}");
        assert!(
            outcome
                .warnings
                .iter()
                .any(|w| w.contains("did not run") && w.contains("stopped")),
            "{outcome:?}"
        );
    }
    assert_eq!(
        seen.load(Ordering::SeqCst),
        0,
        "a post-hook saw a stopped call"
    );
}

/// A batch whose future is dropped (an outer timeout, a nested batch's
/// caller stopped) drops its running handlers with it: a handler left
/// running on its own task finished after its call was reported stopped,
/// and a serial tool could overlap the next call.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dropping_a_running_batch_drops_its_handlers() {
    let finished = Arc::new(AtomicUsize::new(0));
    let reg = Registry::new();
    let done = finished.clone();
    reg.register(
        ToolDef::new("slow_write", "serial"),
        move |_ctx: ToolContext| {
            let done = done.clone();
            async move {
                tokio::time::sleep(Duration::from_millis(300)).await;
                done.fetch_add(1, Ordering::SeqCst);
                Ok::<Value, ToolError>(json!({"ok": true}))
            }
        },
    )
    .unwrap();
    let exec = executor(reg);
    let writes = turn("", vec![call("w1", "slow_write", json!({}))]);
    let batch = BatchContext::default();
    let run = exec.run(&writes, &batch);
    let dropped = tokio::time::timeout(Duration::from_millis(50), run).await;
    assert!(dropped.is_err(), "the batch ended before the drop");
    tokio::time::sleep(Duration::from_millis(600)).await;
    assert_eq!(
        finished.load(Ordering::SeqCst),
        0,
        "the handler ran on after its batch was dropped"
    );
}

fn process_is_running(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        // The state follows the parenthesised command name; Z is a zombie.
        Ok(stat) => stat
            .rsplit(')')
            .next()
            .map(|rest| !rest.trim_start().starts_with('Z'))
            .unwrap_or(false),
        Err(_) => false,
    }
}

async fn wait_until_gone(pid: u32) -> bool {
    for _ in 0..200 {
        if !process_is_running(pid) {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    false
}

fn child_spawner(reg: &Registry, pids: &Arc<Mutex<Vec<u32>>>) {
    let pids = pids.clone();
    reg.register(
        ToolDef::new("spawn_child", "")
            .parallel_safe()
            .with_timeout(Duration::from_millis(300)),
        move |_c: ToolContext| {
            let pids = pids.clone();
            async move {
                let mut child = tokio::process::Command::new("sleep")
                    .arg("30")
                    .kill_on_drop(true)
                    .spawn()
                    .map_err(|e| ToolError::execution(e.to_string()))?;
                if let Some(pid) = child.id() {
                    pids.lock().unwrap().push(pid);
                }
                let status = child
                    .wait()
                    .await
                    .map_err(|e| ToolError::execution(e.to_string()))?;
                Ok(json!({"exit": status.code()}))
            }
        },
    )
    .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_timed_out_or_stopped_call_leaves_no_child_process_running() {
    let pids = Arc::new(Mutex::new(Vec::new()));
    let reg = Registry::new();
    child_spawner(&reg, &pids);
    let exec = executor(reg);

    // Timeout.
    let result = exec
        .run(
            &turn("", vec![call("t", "spawn_child", json!({}))]),
            &BatchContext::default(),
        )
        .await;
    assert_eq!(result.outcomes[0].status(), CallStatus::Timeout);
    // Stop.
    let cancel = stop_after(Duration::from_millis(100));
    let batch = BatchContext {
        cancel,
        ..Default::default()
    };
    let result = exec
        .run(&turn("", vec![call("s", "spawn_child", json!({}))]), &batch)
        .await;
    assert_eq!(result.outcomes[0].status(), CallStatus::Cancelled);

    let pids = pids.lock().unwrap().clone();
    assert_eq!(pids.len(), 2, "both calls spawned their child");
    for pid in pids {
        assert!(wait_until_gone(pid).await, "child {pid} still running");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_handler_that_blocks_its_thread_is_abandoned_and_reported() {
    let reg = Registry::new();
    reg.register(
        ToolDef::new("blocker", "").with_timeout(Duration::from_millis(100)),
        |_c: ToolContext| async {
            std::thread::sleep(Duration::from_millis(1500));
            Ok(json!("finally"))
        },
    )
    .unwrap();
    let result = executor(reg)
        .run(
            &turn("", vec![call("b", "blocker", json!({}))]),
            &BatchContext::default(),
        )
        .await;
    let outcome = &result.outcomes[0];
    assert_eq!(outcome.status(), CallStatus::Timeout);
    assert!(outcome.text.contains("abandoned"), "{}", outcome.text);
}

fn counting_path_tool(reg: &Registry, gauge: &Arc<Gauge>) {
    let g = gauge.clone();
    reg.register(
        ToolDef::new("files_read", "reads a file").with_parameters(json!({
            "type": "object",
            "properties": {
                "path": {"type": "string", "description": "the file to read"},
                "lines": {"type": "integer"},
                "follow": {"type": "boolean"}
            },
            "required": ["path"]
        })),
        move |ctx: ToolContext| {
            let g = g.clone();
            async move {
                g.enter();
                g.leave();
                Ok(ctx.arguments)
            }
        },
    )
    .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn invalid_arguments_never_reach_the_handler_and_lenient_forms_do() {
    let gauge = Arc::new(Gauge::default());
    let reg = Registry::new();
    counting_path_tool(&reg, &gauge);
    let exec = executor(reg);
    let calls = vec![
        call("none", "files_read", json!({})),
        call("wrong", "files_read", json!({"path": ["a"]})),
        call(
            "lenient",
            "files_read",
            json!({"path": "/etc/hosts", "lines": "20", "follow": "true"}),
        ),
    ];
    let result = exec.run(&turn("", calls), &BatchContext::default()).await;
    assert_eq!(
        gauge.invoked(),
        1,
        "only the valid call reached the handler"
    );
    let missing = result.outcomes[0].error.as_ref().unwrap();
    assert_eq!(
        (missing.reason, missing.field.as_deref()),
        (ErrorReason::Required, Some("path"))
    );
    assert!(
        missing
            .hint
            .as_deref()
            .unwrap_or_default()
            .contains("the file to read")
    );
    let wrong = result.outcomes[1].error.as_ref().unwrap();
    assert_eq!(
        (wrong.reason, wrong.field.as_deref()),
        (ErrorReason::Type, Some("path"))
    );
    assert_eq!(
        result.outcomes[2].value,
        json!({"path": "/etc/hosts", "lines": 20, "follow": true})
    );
}

struct Rewrite(Value);

impl PreToolHook for Rewrite {
    fn name(&self) -> &str {
        "rewrite"
    }
    fn before(&self, _call: &CallInfo) -> HookFuture<PreDecision> {
        let arguments = self.0.clone();
        Box::pin(async move { Ok(PreDecision::Rewrite { arguments }) })
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn rewritten_arguments_are_validated_again() {
    let gauge = Arc::new(Gauge::default());
    let reg = Registry::new();
    counting_path_tool(&reg, &gauge);
    let reg = Arc::new(reg);
    let bad = Executor::new(reg.clone()).with_pre_hook(Arc::new(Rewrite(json!({"lines": 3}))));
    let result = bad
        .run(
            &turn("", vec![call("a", "files_read", json!({"path": "x"}))]),
            &BatchContext::default(),
        )
        .await;
    assert_eq!(
        result.outcomes[0].error.as_ref().map(|e| e.reason),
        Some(ErrorReason::Required)
    );
    assert_eq!(gauge.invoked(), 0);

    let good = Executor::new(reg).with_pre_hook(Arc::new(Rewrite(json!({"path": "/safe"}))));
    let result = good
        .run(
            &turn("", vec![call("a", "files_read", json!({"path": "x"}))]),
            &BatchContext::default(),
        )
        .await;
    assert_eq!(result.outcomes[0].value, json!({"path": "/safe"}));
}

struct Broken {
    panics: bool,
}

impl PreToolHook for Broken {
    fn name(&self) -> &str {
        "broken-pre"
    }
    fn before(&self, _call: &CallInfo) -> HookFuture<PreDecision> {
        if self.panics {
            panic!("hook bug");
        }
        Box::pin(async { Err("policy server unreachable".to_owned()) })
    }
}

impl PostToolHook for Broken {
    fn name(&self) -> &str {
        "broken-post"
    }
    fn after(&self, _call: &CallInfo, _outcome: &ToolOutcome) -> HookFuture<Option<Value>> {
        let panics = self.panics;
        Box::pin(async move {
            if panics {
                panic!("post hook bug");
            }
            Err("audit log full".to_owned())
        })
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn failing_or_panicking_hooks_are_recorded_and_never_abort_the_batch() {
    for panics in [false, true] {
        let gauge = Arc::new(Gauge::default());
        let reg = Arc::new(Registry::new());
        sleeper(&reg, "t", &gauge, true);
        // Pre-hooks fail closed: the call is denied, the batch goes on.
        let pre = Executor::new(reg.clone()).with_pre_hook(Arc::new(Broken { panics }));
        let calls = vec![
            call("a", "t", json!({"ms": 1})),
            call("b", "t", json!({"ms": 1})),
        ];
        let result = pre
            .run(&turn("", calls.clone()), &BatchContext::default())
            .await;
        assert!(
            result
                .outcomes
                .iter()
                .all(|o| o.status() == CallStatus::Denied)
        );
        let expected = if panics {
            "panicked: hook bug"
        } else {
            "failed: policy server unreachable"
        };
        assert!(
            result.outcomes[0].text.contains(expected),
            "{}",
            result.outcomes[0].text
        );
        assert_eq!(gauge.invoked(), 0);
        // Post-hooks fail open: the result stands, with a warning, which
        // the call's end event carries too (a dashboard shows it there).
        let events = Arc::new(Mutex::new(Vec::new()));
        let sink = Arc::clone(&events);
        let post = Executor::new(reg)
            .with_post_hook(Arc::new(Broken { panics }))
            .with_events(Arc::new(move |e: ToolEvent| sink.lock().unwrap().push(e)));
        let result = post.run(&turn("", calls), &BatchContext::default()).await;
        let events = events.lock().unwrap().clone();
        for outcome in &result.outcomes {
            assert!(outcome.success);
            assert_eq!(outcome.warnings.len(), 1, "{:?}", outcome.warnings);
            assert!(outcome.warnings[0].contains("broken-post"));
            let end = events
                .iter()
                .find(|e| e.call_id() == outcome.call_id && matches!(e, ToolEvent::End { .. }));
            match end {
                Some(ToolEvent::End { warnings, .. }) => assert_eq!(warnings, &outcome.warnings),
                other => panic!("no end event for {}: {other:?}", outcome.call_id),
            }
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn result_text_is_capped_with_a_marker_and_the_value_kept_whole() {
    let reg = Registry::new();
    reg.register(ToolDef::new("big", ""), |_c: ToolContext| async {
        Ok(json!("é".repeat(50_000)))
    })
    .unwrap();
    let exec = executor(reg).with_options(ExecutorOptions {
        result_text_cap: 1001,
        ..Default::default()
    });
    let result = exec
        .run(
            &turn("", vec![call("a", "big", json!({}))]),
            &BatchContext::default(),
        )
        .await;
    let outcome = &result.outcomes[0];
    assert_eq!(outcome.value.as_str().map(str::len), Some(100_000));
    // 1001 bytes would split a two-byte character: the cut backs off to 1000.
    assert!(outcome.text.starts_with(&"é".repeat(500)));
    assert!(
        outcome
            .text
            .contains("showing the first 1000 of 100000 bytes"),
        "{}",
        &outcome.text[1000..]
    );
    assert_eq!(result.tool_messages[0].content, outcome.text);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn every_call_gets_a_start_and_an_end_event_even_when_it_never_ran() {
    let events = Arc::new(Mutex::new(Vec::<ToolEvent>::new()));
    let sink = events.clone();
    let gauge = Arc::new(Gauge::default());
    let reg = Registry::new();
    sleeper(&reg, "t", &gauge, true);
    let exec = executor(reg)
        .with_pre_hook(Arc::new(DenyTool("denied_tool")))
        .with_events(Arc::new(move |e: ToolEvent| sink.lock().unwrap().push(e)));
    let mut truncated = call("cut", "t", json!({}));
    truncated.argument_error = Some(ToolError::new(ErrorReason::Truncated, "cut off"));
    let calls = vec![
        call("ok", "t", json!({"ms": 1})),
        truncated,
        call("missing", "no_such_tool", json!({"q": 1})),
        call("denied", "denied_tool", json!({})),
    ];
    let batch = BatchContext {
        batch_id: "b7".into(),
        ..Default::default()
    };
    exec.run(&turn("", calls), &batch).await;
    let events = events.lock().unwrap().clone();
    assert_eq!(events.len(), 8);
    for id in ["ok", "cut", "missing", "denied"] {
        let mine: Vec<&ToolEvent> = events.iter().filter(|e| e.call_id() == id).collect();
        assert_eq!(mine.len(), 2, "{id}");
        assert!(
            matches!(mine[0], ToolEvent::Start { batch_id, batch_size: 4, parallel: false, args, .. }
            if &**batch_id == "b7" && args.is_object())
        );
        let ToolEvent::End {
            status,
            success,
            error,
            ..
        } = mine[1]
        else {
            panic!("end second")
        };
        let expected = match id {
            "ok" => CallStatus::Ok,
            "denied" => CallStatus::Denied,
            _ => CallStatus::Error,
        };
        assert_eq!(*status, expected, "{id}");
        assert_eq!(*success, id == "ok");
        assert_eq!(error.is_some(), id != "ok");
    }
    let missing_end = events
        .iter()
        .find(|e| e.call_id() == "missing" && matches!(e, ToolEvent::End { .. }));
    assert!(
        matches!(missing_end, Some(ToolEvent::End { error: Some(e), .. }) if e.reason == ErrorReason::NotFound)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn end_to_end_a_truncated_turn_runs_the_complete_call_and_not_the_cut_one() {
    use homeagent_core::{StreamAssembler, StreamEvent, ToolCallFragment};
    let gauge = Arc::new(Gauge::default());
    let reg = Registry::new();
    sleeper(&reg, "t", &gauge, true);
    let mut assembler = StreamAssembler::new();
    for (index, id, args) in [
        (0, "whole", "{\"ms\": 1}"),
        (1, "cut", "{\"ms\": 1, \"note\": \"this was go"),
    ] {
        assembler.push(StreamEvent::ToolCall(ToolCallFragment {
            stream_index: Some(index),
            id: Some(id.into()),
            name: Some("t".into()),
            raw_arguments: args.into(),
        }));
    }
    assembler.push(StreamEvent::Finish {
        reason: "length".into(),
    });
    let turn = assembler.finish();
    let result = executor(reg).run(&turn, &BatchContext::default()).await;
    assert_eq!(gauge.invoked(), 1, "only the complete call ran");
    assert!(result.outcomes[0].success);
    assert_eq!(
        result.outcomes[1].error.as_ref().map(|e| e.reason),
        Some(ErrorReason::Truncated)
    );
    // The cut call is still in the history, with {} and its error result.
    assert_eq!(result.assistant.tool_calls[1].arguments, json!({}));
    let mut history = vec![Message::user("go")];
    history.extend(result.messages());
    assert_eq!(check_pairing(&history), Ok(()));
}

/// A source that can run tools it has no definition for (a dynamic proxy):
/// it echoes its arguments.
struct Dynamic;

impl homeagent_core::ToolSource for Dynamic {
    fn definition(&self, _name: &str) -> Option<Arc<ToolDef>> {
        None
    }
    fn definitions(&self) -> Vec<Arc<ToolDef>> {
        Vec::new()
    }
    fn invoke(&self, _name: &str, ctx: ToolContext) -> homeagent_core::ToolFuture {
        Box::pin(async move { Ok(ctx.arguments) })
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_rewrite_for_a_tool_without_definition_must_still_be_an_object() {
    let bad = Executor::new(Arc::new(Dynamic)).with_pre_hook(Arc::new(Rewrite(json!("ls -la"))));
    let result = bad
        .run(
            &turn("", vec![call("a", "anything", json!({"x": 1}))]),
            &BatchContext::default(),
        )
        .await;
    assert_eq!(
        result.outcomes[0].error.as_ref().map(|e| e.reason),
        Some(ErrorReason::InvalidArguments)
    );
    let good = Executor::new(Arc::new(Dynamic)).with_pre_hook(Arc::new(Rewrite(json!({"y": 2}))));
    let result = good
        .run(
            &turn("", vec![call("a", "anything", json!({"x": 1}))]),
            &BatchContext::default(),
        )
        .await;
    assert_eq!(result.outcomes[0].value, json!({"y": 2}));
}

/// The agent loop moves a turn's calls into its assistant message and runs
/// them from there: the argument errors travel beside the message, so a
/// truncated call is still answered with its error and never run, and every
/// outcome matches what running the turn itself gives.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_turn_moved_into_its_message_runs_exactly_as_the_turn() {
    let gauge = Arc::new(Gauge::default());
    let reg = Registry::new();
    sleeper(&reg, "t", &gauge, true);
    let exec = executor(reg);
    let mut truncated = call("cut", "t", json!({}));
    truncated.argument_error = Some(ToolError::new(ErrorReason::Truncated, "cut off"));
    let calls = vec![
        call("first", "t", json!({"ms": 1})),
        truncated,
        call("third", "t", json!({"ms": 2})),
        call("missing", "no_such_tool", json!({})),
    ];
    let whole = turn("working", calls);
    let expected_message = whole.message();
    let (expected_mode, expected) = exec.run_calls(&whole, &BatchContext::default()).await;
    assert_eq!(
        gauge.invoked(),
        2,
        "the turn itself runs the two good calls"
    );

    let (message, errors) = whole.into_message();
    assert_eq!(message, expected_message);
    let (mode, outcomes) = exec
        .run_message_calls(&message.tool_calls, &errors, &BatchContext::default())
        .await;
    assert_eq!(
        gauge.invoked(),
        4,
        "the cut call never runs from the message either"
    );
    assert_eq!(mode, expected_mode);
    let seen = |o: &[ToolOutcome]| -> Vec<(String, bool, Option<ErrorReason>, String)> {
        o.iter()
            .map(|o| {
                let reason = o.error.as_ref().map(|e| e.reason);
                (o.call_id.clone(), o.success, reason, o.text.clone())
            })
            .collect()
    };
    assert_eq!(seen(&outcomes), seen(&expected));
    assert_eq!(
        outcomes[1].error.as_ref().map(|e| e.reason),
        Some(ErrorReason::Truncated)
    );
    assert_eq!(
        outcomes[3].error.as_ref().map(|e| e.reason),
        Some(ErrorReason::NotFound)
    );
    // An unknown tool makes the batch serial: the two good calls never
    // overlapped, from the turn or from the message.
    assert_eq!(gauge.peak(), 1);
}

/// Calls run from a message overlap when the plan says parallel.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_turn_moved_into_its_message_runs_its_parallel_calls_together() {
    let gauge = Arc::new(Gauge::default());
    let reg = Registry::new();
    rendezvous(&reg, &gauge, 4);
    let calls = (0..4)
        .map(|i| call(&format!("m{i}"), "meet", json!({})))
        .collect();
    let (message, errors) = turn("", calls).into_message();
    let (mode, outcomes) = executor(reg)
        .run_message_calls(&message.tool_calls, &errors, &BatchContext::default())
        .await;
    assert_eq!(mode, BatchMode::Parallel);
    assert!(outcomes.iter().all(|o| o.success));
    assert_eq!(gauge.peak(), 4, "all four calls were in flight at once");
}

/// Replaces every result with `{"redacted": true}`.
struct Redact;

impl PostToolHook for Redact {
    fn name(&self) -> &str {
        "redact"
    }
    fn after(&self, _call: &CallInfo, _outcome: &ToolOutcome) -> HookFuture<Option<Value>> {
        Box::pin(async { Ok(Some(json!({"redacted": true}))) })
    }
}

/// A post-hook may reword a result, but it cannot make a failed call
/// succeed: the model would be told a call worked that did not. A
/// successful one it may replace as it likes.
#[tokio::test]
async fn a_post_hook_cannot_turn_a_failed_call_into_a_success() {
    let reg = Registry::new();
    reg.register(
        ToolDef::new("fails", "always fails"),
        |_ctx: ToolContext| async { Err::<Value, _>(ToolError::execution("the disk is full")) },
    )
    .unwrap();
    reg.register(
        ToolDef::new("works", "always works"),
        |_ctx: ToolContext| async { Ok(json!({"ok": 1})) },
    )
    .unwrap();
    let exec = executor(reg).with_post_hook(Arc::new(Redact));
    let calls = vec![call("f", "fails", json!({})), call("w", "works", json!({}))];
    let result = exec.run(&turn("", calls), &BatchContext::default()).await;
    let failed = &result.outcomes[0];
    assert!(!failed.success, "{}", failed.text);
    assert!(failed.text.contains("the disk is full"), "{}", failed.text);
    assert_eq!(failed.warnings.len(), 1, "{:?}", failed.warnings);
    assert!(
        failed.warnings[0].contains("redact"),
        "{:?}",
        failed.warnings
    );
    let worked = &result.outcomes[1];
    assert!(worked.success);
    assert_eq!(worked.value, json!({"redacted": true}));
}

/// Lower-cases every `device_id`, the way a policy hook normalizes names.
struct LowercaseDevice;

impl PreToolHook for LowercaseDevice {
    fn name(&self) -> &str {
        "lowercase-device"
    }
    fn before(&self, call: &CallInfo) -> HookFuture<PreDecision> {
        let mut arguments = call.arguments.clone();
        let decision = match arguments.get("device_id").and_then(Value::as_str) {
            Some(id) if id != id.to_lowercase() => {
                arguments["device_id"] = json!(id.to_lowercase());
                PreDecision::Rewrite { arguments }
            }
            _ => PreDecision::Allow,
        };
        Box::pin(async move { Ok(decision) })
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_hook_that_moves_two_calls_onto_one_device_makes_them_keep_their_order() {
    let log = Arc::new(Mutex::new(Vec::new()));
    let reg = Registry::new();
    ordered_tools(&reg, &log);
    let events = Arc::new(Mutex::new(Vec::new()));
    let sink = events.clone();
    let exec = executor(reg)
        .with_pre_hook(Arc::new(LowercaseDevice))
        .with_events(Arc::new(move |e: ToolEvent| sink.lock().unwrap().push(e)));
    // As the model wrote them, the two calls name different devices.
    let calls = vec![
        call(
            "a",
            "device_run",
            json!({"device_id": "NAS", "text": "1", "ms": 80}),
        ),
        call(
            "b",
            "device_run",
            json!({"device_id": "nas", "text": "2", "ms": 0}),
        ),
    ];
    let result = exec.run(&turn("", calls), &BatchContext::default()).await;
    assert_eq!(
        *log.lock().unwrap(),
        vec!["1", "2"],
        "after the hook both calls are for one device: the second must wait for the first"
    );
    assert_eq!(
        result.mode,
        BatchMode::Serial {
            reason: SerialReason::SharedOrderKey {
                key: "device_id=nas".into()
            }
        }
    );
    assert!(result.outcomes.iter().all(|o| o.success));
    // Every event of the batch says how it really ran: a Start that said
    // "parallel" and an End that said "serial" would split it in two.
    let events = std::mem::take(&mut *events.lock().unwrap());
    assert_eq!(events.len(), 4, "{events:?}");
    for event in &events {
        match event {
            ToolEvent::Start { parallel, .. } | ToolEvent::End { parallel, .. } => {
                assert!(!parallel, "{event:?}");
            }
        }
    }

    // Names that stay different after the hook still overlap.
    log.lock().unwrap().clear();
    let calls = vec![
        call(
            "a",
            "device_run",
            json!({"device_id": "NAS", "text": "nas", "ms": 80}),
        ),
        call(
            "b",
            "device_run",
            json!({"device_id": "Pi", "text": "pi", "ms": 0}),
        ),
    ];
    let result = exec.run(&turn("", calls), &BatchContext::default()).await;
    assert_eq!(result.mode, BatchMode::Parallel);
    assert_eq!(*log.lock().unwrap(), vec!["pi", "nas"], "they overlapped");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_stop_during_a_batch_the_hook_made_serial_leaves_the_later_calls_unstarted() {
    let log = Arc::new(Mutex::new(Vec::new()));
    let reg = Registry::new();
    ordered_tools(&reg, &log);
    let exec = executor(reg).with_pre_hook(Arc::new(LowercaseDevice));
    let calls = vec![
        call(
            "a",
            "device_run",
            json!({"device_id": "NAS", "text": "1", "ms": 400}),
        ),
        call(
            "b",
            "device_run",
            json!({"device_id": "nas", "text": "2", "ms": 0}),
        ),
    ];
    let batch = BatchContext {
        cancel: stop_after(Duration::from_millis(100)),
        ..Default::default()
    };
    let result = exec.run(&turn("", calls), &batch).await;
    let second = result.outcomes[1]
        .error
        .as_ref()
        .expect("the second call failed");
    assert_eq!(second.reason, ErrorReason::Cancelled);
    assert!(
        second.detail.contains("before this call started"),
        "{}",
        second.detail
    );
    assert!(log.lock().unwrap().is_empty(), "neither call finished");
}

/// Holds the pre-hook of calls whose `hook_ms` asks for it, and logs when
/// each hook ends.
struct SlowHook(Arc<Mutex<Vec<String>>>);

impl PreToolHook for SlowHook {
    fn name(&self) -> &str {
        "slow"
    }
    fn before(&self, call: &CallInfo) -> HookFuture<PreDecision> {
        let ms = call.arguments["hook_ms"].as_u64().unwrap_or(0);
        let tag = call.arguments["text"].as_str().unwrap_or("").to_owned();
        let log = self.0.clone();
        Box::pin(async move {
            tokio::time::sleep(Duration::from_millis(ms)).await;
            log.lock().unwrap().push(format!("hook {tag}"));
            Ok(PreDecision::Allow)
        })
    }
}

/// Re-planning after the hooks is for tools whose order key a hook could
/// rewrite. Without one, a call whose hook is done runs at once instead of
/// waiting for the slowest hook of the batch.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_call_without_an_argument_key_does_not_wait_for_other_calls_hooks() {
    let log = Arc::new(Mutex::new(Vec::new()));
    let reg = Registry::new();
    let handler_log = log.clone();
    reg.register(
        ToolDef::new("note", "").parallel_safe(),
        move |ctx: ToolContext| {
            let log = handler_log.clone();
            async move {
                let tag = ctx.arguments["text"].as_str().unwrap_or("").to_owned();
                log.lock().unwrap().push(format!("ran {tag}"));
                Ok(json!("noted"))
            }
        },
    )
    .unwrap();
    let exec = executor(reg).with_pre_hook(Arc::new(SlowHook(log.clone())));
    let calls = vec![
        call("a", "note", json!({"text": "slow", "hook_ms": 300})),
        call("b", "note", json!({"text": "fast", "hook_ms": 0})),
    ];
    let result = exec.run(&turn("", calls), &BatchContext::default()).await;
    assert_eq!(result.mode, BatchMode::Parallel);
    let log = log.lock().unwrap();
    let position = |entry: &str| log.iter().position(|e| e == entry).unwrap();
    assert!(
        position("ran fast") < position("hook slow"),
        "the fast call waited for the slow call's hook: {log:?}"
    );
}

/// Denies every call, and rewrites every result, but says it sees only
/// `guarded`.
struct SeesOnlyGuarded;

impl PreToolHook for SeesOnlyGuarded {
    fn name(&self) -> &str {
        "sees-only-guarded"
    }
    fn sees(&self, tool: &str) -> bool {
        tool == "guarded"
    }
    fn before(&self, _call: &CallInfo) -> HookFuture<PreDecision> {
        Box::pin(async {
            Ok(PreDecision::Deny {
                reason: "denied".into(),
            })
        })
    }
}

impl PostToolHook for SeesOnlyGuarded {
    fn name(&self) -> &str {
        "sees-only-guarded"
    }
    fn sees(&self, tool: &str) -> bool {
        tool == "guarded"
    }
    fn after(&self, _call: &CallInfo, _outcome: &ToolOutcome) -> HookFuture<Option<Value>> {
        Box::pin(async { Ok(Some(json!({"rewritten": true}))) })
    }
}

/// What a hook says it does not see it does not act on: the executor plans
/// by `sees` (whether a hook can move an order key, whether a batch is
/// stored before it runs), so a hook must not act behind that answer.
#[tokio::test]
async fn a_hook_is_not_called_for_a_tool_it_does_not_see() {
    let reg = Registry::new();
    for name in ["guarded", "free"] {
        reg.register(ToolDef::new(name, ""), |_ctx: ToolContext| async {
            Ok(json!({"ran": true}))
        })
        .unwrap();
    }
    let exec = executor(reg)
        .with_pre_hook(Arc::new(SeesOnlyGuarded))
        .with_post_hook(Arc::new(SeesOnlyGuarded));
    let calls = vec![
        call("g", "guarded", json!({})),
        call("f", "free", json!({})),
    ];
    let result = exec.run(&turn("", calls), &BatchContext::default()).await;
    let guarded = result.outcomes[0]
        .error
        .as_ref()
        .expect("the hook denied it");
    assert_eq!(guarded.reason, ErrorReason::Denied);
    assert!(result.outcomes[1].success, "{}", result.outcomes[1].text);
    assert_eq!(result.outcomes[1].value, json!({"ran": true}));
}

/// A source whose tool appears only after the first look (an MCP server
/// that came back while the call was being checked).
struct AppearsLater {
    looks: AtomicUsize,
    invoked: AtomicUsize,
    def: Arc<ToolDef>,
}

impl homeagent_core::ToolSource for AppearsLater {
    fn definition(&self, name: &str) -> Option<Arc<ToolDef>> {
        let first = self.looks.fetch_add(1, Ordering::SeqCst) == 0;
        (!first && name == self.def.name).then(|| Arc::clone(&self.def))
    }
    fn definitions(&self) -> Vec<Arc<ToolDef>> {
        Vec::new()
    }
    fn invoke(&self, _name: &str, _ctx: ToolContext) -> homeagent_core::ToolFuture {
        self.invoked.fetch_add(1, Ordering::SeqCst);
        Box::pin(async { Ok(json!("ran")) })
    }
}

/// A call checked while its tool was missing (no schema to validate its
/// arguments against) is not handed to the tool that appeared since: it
/// would run with arguments nobody validated. It is refused as not run,
/// asking for the call again.
#[tokio::test]
async fn a_tool_that_appears_after_its_call_was_checked_does_not_run_it() {
    let source = Arc::new(AppearsLater {
        looks: AtomicUsize::new(0),
        invoked: AtomicUsize::new(0),
        def: Arc::new(ToolDef::new("srv__x", "").with_parameters(json!({
            "type": "object",
            "properties": {"n": {"type": "integer"}},
            "required": ["n"]
        }))),
    });
    let exec = Executor::new(Arc::clone(&source) as Arc<dyn homeagent_core::ToolSource>);
    let turn = AssembledTurn {
        calls: vec![AssembledCall {
            call: ToolCall {
                id: "c1".into(),
                name: "srv__x".into(),
                arguments: json!({"n": "not a number"}),
                raw_arguments: r#"{"n":"not a number"}"#.into(),
            },
            argument_error: None,
        }],
        ..AssembledTurn::default()
    };
    let result = exec.run(&turn, &BatchContext::default()).await;
    let outcome = &result.outcomes[0];
    assert!(!outcome.success);
    let error = outcome.error.as_ref().unwrap();
    assert_eq!(error.reason, ErrorReason::NotFound);
    assert_eq!(
        error.detail,
        "tool srv__x was not available when this call was checked (its server may have been \
         restarting), so its arguments were never validated; it did not run, call it again"
    );
    assert_eq!(source.invoked.load(Ordering::SeqCst), 0, "the tool ran");
}

/// The order key is read from the arguments the handlers get: `"1.0"` for
/// an integer `zone` is coerced to `1`, so two calls on zone 1 run one
/// after the other even when the model wrote one of them as a string
/// (planned from the model's text, their keys differed and they ran
/// together).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_order_key_is_read_after_the_arguments_are_coerced() {
    let log = Arc::new(Mutex::new(Vec::new()));
    let reg = Registry::new();
    let written = log.clone();
    reg.register(
        ToolDef::new("heat", "")
            .parallel_safe()
            .with_order_key(OrderKey::Argument("zone".into()))
            .with_parameters(json!({
                "type": "object",
                "properties": {"zone": {"type": "integer"}, "ms": {"type": "integer"},
                               "text": {"type": "string"}},
                "required": ["zone"]
            })),
        move |ctx: ToolContext| {
            let written = written.clone();
            async move {
                let ms = ctx.arguments["ms"].as_u64().unwrap_or(0);
                tokio::time::sleep(Duration::from_millis(ms)).await;
                written
                    .lock()
                    .unwrap()
                    .push(ctx.arguments["text"].as_str().unwrap_or("").to_owned());
                Ok(json!("set"))
            }
        },
    )
    .unwrap();
    let exec = Executor::new(Arc::new(reg));
    let calls = vec![
        call("a", "heat", json!({"zone": 1, "text": "first", "ms": 80})),
        call(
            "b",
            "heat",
            json!({"zone": "1.0", "text": "second", "ms": 10}),
        ),
    ];
    let result = exec.run(&turn("", calls), &BatchContext::default()).await;
    assert!(
        result.outcomes.iter().all(|o| o.success),
        "{:?}",
        result.outcomes
    );
    assert!(
        matches!(result.mode, BatchMode::Serial { .. }),
        "{:?}",
        result.mode
    );
    assert_eq!(*log.lock().unwrap(), ["first", "second"]);
}

/// Drops `device_id` from every call (a policy hook gone wrong).
struct DropDevice;

impl PreToolHook for DropDevice {
    fn name(&self) -> &str {
        "drop-device"
    }
    fn before(&self, call: &CallInfo) -> HookFuture<PreDecision> {
        let mut arguments = call.arguments.clone();
        let removed = arguments
            .as_object_mut()
            .and_then(|map| map.remove("device_id"))
            .is_some();
        let decision = if removed {
            PreDecision::Rewrite { arguments }
        } else {
            PreDecision::Allow
        };
        Box::pin(async move { Ok(decision) })
    }
}

/// One keyed call is enough for a hook to change the plan: a rewrite that
/// leaves the call without its key (which conflicts with every call) makes
/// the batch serial, planned again after the hooks.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_hook_that_takes_the_only_keyed_calls_key_makes_the_batch_serial() {
    let log = Arc::new(Mutex::new(Vec::new()));
    let reg = Registry::new();
    ordered_tools(&reg, &log);
    let exec = executor(reg).with_pre_hook(Arc::new(DropDevice));
    let calls = vec![
        call(
            "a",
            "device_run",
            json!({"device_id": "nas", "text": "1", "ms": 0}),
        ),
        call("b", "send", json!({"text": "2", "ms": 0})),
    ];
    let result = exec.run(&turn("", calls), &BatchContext::default()).await;
    assert_eq!(
        result.mode,
        BatchMode::Serial {
            reason: SerialReason::MissingOrderKey {
                tool: "device_run".into()
            }
        }
    );
}

/// Records the calls its hook saw, in order, and how many hooks ran at
/// once.
#[derive(Default)]
struct Ordered {
    seen: std::sync::Mutex<Vec<String>>,
    now: AtomicUsize,
    peak: AtomicUsize,
}

struct OrderingPostHook(Arc<Ordered>);

impl PostToolHook for OrderingPostHook {
    fn name(&self) -> &str {
        "ordering"
    }
    fn after(&self, call: &CallInfo, _outcome: &ToolOutcome) -> HookFuture<Option<Value>> {
        let me = Arc::clone(&self.0);
        let id = call.call_id.clone();
        Box::pin(async move {
            let now = me.now.fetch_add(1, Ordering::SeqCst) + 1;
            me.peak.fetch_max(now, Ordering::SeqCst);
            tokio::time::sleep(Duration::from_millis(5)).await;
            me.seen.lock().unwrap().push(id);
            me.now.fetch_sub(1, Ordering::SeqCst);
            Ok(None)
        })
    }
}

/// A parallel batch's calls run together, but their post-hooks run one at
/// a time, in index order (seed: fan out, join, then finish serially by
/// index): a quick later call's hook waits for a slow earlier one's.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn post_hooks_of_a_parallel_batch_run_one_at_a_time_in_index_order() {
    let gauge = Arc::new(Gauge::default());
    let reg = Registry::new();
    sleeper(&reg, "nap", &gauge, true);
    let hook = Arc::new(Ordered::default());
    let exec = executor(reg).with_post_hook(Arc::new(OrderingPostHook(Arc::clone(&hook))));
    let calls = vec![
        call("a", "nap", json!({"ms": 150})),
        call("b", "nap", json!({"ms": 0})),
        call("c", "nap", json!({"ms": 60})),
        call("d", "nap", json!({"ms": 0})),
    ];
    let result = exec.run(&turn("", calls), &BatchContext::default()).await;
    assert_eq!(result.mode, BatchMode::Parallel);
    assert!(
        gauge.peak.load(Ordering::SeqCst) >= 2,
        "the handlers overlapped"
    );
    assert_eq!(*hook.seen.lock().unwrap(), ["a", "b", "c", "d"]);
    assert_eq!(hook.peak.load(Ordering::SeqCst), 1, "hooks overlapped");
    assert!(result.outcomes.iter().all(|o| o.success));
}
