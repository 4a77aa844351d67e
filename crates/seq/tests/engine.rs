#![allow(clippy::unwrap_used, clippy::expect_used)] // a panic in a test is a test failure
//! The engine against real tools in a real registry behind the gate.

use crate::common;

use std::time::{Duration, Instant};

use common::{args, harness, main_caller, seq};
use homeagent_core::ErrorReason;
use homeagent_seq::report::CallStatus;
use homeagent_seq::{GroupStatus, RunStatus};
use serde_json::{Value, json};

fn tools(steps: &[Value]) -> String {
    steps
        .iter()
        .map(|s| format!("{s} ;"))
        .collect::<Vec<_>>()
        .join(" ")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slots_are_written_by_name_and_args_are_substituted() {
    let h = harness();
    let s = seq(
        json!({"name": "s", "groups": [{"name": "g", "in": {"host": "string", "n": "integer"},
        "out": {"echo": "object", "slept": "string"},
        "tools": tools(&[
            json!({"tool": "demo_echo", "args": {"cmd": "ssh $args.host", "n": "$args.n", "all": "$args.host:$args.n"}, "as": "echo"}),
            json!({"tool": "t_delay", "args": {"ms": 0, "tag": "$args.host"}, "as": "slept"}),
        ])}]}),
    );
    let report = h
        .engine
        .run_sequence(&s, args(json!({"host": "node-a", "n": 3})), &main_caller())
        .await;
    assert_eq!(report.status, RunStatus::Completed, "{report:?}");
    assert_eq!(
        report.slots["echo"],
        json!({"cmd": "ssh node-a", "n": 3, "all": "node-a:3"})
    );
    assert_eq!(report.slots["slept"], json!("ran:node-a"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn results_merge_in_declaration_order_whatever_finishes_first() {
    let h = harness();
    let s = seq(
        json!({"name": "s", "groups": [{"name": "g", "out": {"r": "array<string>"},
        "tools": tools(&[
            json!({"tool": "t_delay", "args": {"ms": 300, "tag": "A"}, "as": "r"}),
            json!({"tool": "t_delay", "args": {"ms": 0, "tag": "B"}, "as": "r"}),
            json!({"tool": "t_delay", "args": {"ms": 0, "tag": "C"}, "as": "r"}),
        ])}]}),
    );
    let report = h
        .engine
        .run_sequence(&s, args(json!({})), &main_caller())
        .await;
    assert_eq!(report.groups[0].mode, Some("parallel"));
    let finished = h.finished.lock().unwrap().clone();
    assert_eq!(
        finished.last().map(String::as_str),
        Some("A"),
        "A was delayed: {finished:?}"
    );
    assert_eq!(report.slots["r"], json!(["ran:A", "ran:B", "ran:C"]));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tool_that_is_not_parallel_safe_makes_the_group_serial_at_run_time() {
    let h = harness();
    // Built without the create-time checks: it claims parallel.
    let s = seq(
        json!({"name": "s", "groups": [{"name": "g", "out": {"r": "array"},
        "tools": tools(&[
            json!({"tool": "t_delay", "args": {"ms": 200, "tag": "A"}, "as": "r"}),
            json!({"tool": "t_unsafe", "args": {"tag": "U"}, "as": "r"}),
            json!({"tool": "t_delay", "args": {"ms": 0, "tag": "B"}, "as": "r"}),
        ])}]}),
    );
    let report = h
        .engine
        .run_sequence(&s, args(json!({})), &main_caller())
        .await;
    assert_eq!(report.groups[0].mode, Some("serial"));
    assert_eq!(*h.finished.lock().unwrap(), ["A", "B"], "declaration order");
    assert_eq!(report.slots["r"], json!(["ran:A", "U", "ran:B"]));
}

/// A pre-hook that spells every `device` argument in lower case.
struct LowerCaseDevice;

impl homeagent_core::PreToolHook for LowerCaseDevice {
    fn name(&self) -> &str {
        "lower_case_device"
    }
    fn sees(&self, tool: &str) -> bool {
        tool == "t_device"
    }
    fn before(
        &self,
        call: &homeagent_core::CallInfo,
    ) -> homeagent_core::hooks::HookFuture<homeagent_core::PreDecision> {
        let mut arguments = call.arguments.clone();
        if let Some(device) = arguments["device"].as_str() {
            arguments["device"] = Value::String(device.to_lowercase());
        }
        Box::pin(async move { Ok(homeagent_core::PreDecision::Rewrite { arguments }) })
    }
}

/// Order keys are the ones the handlers get (invariant 4): `NAS` and `nas`
/// look like two devices, but a pre-hook that sees the tool may make them
/// one, so the group runs in order; without such a hook it runs at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keyed_calls_a_pre_hook_may_rewrite_run_in_order() {
    let steps = tools(&[
        json!({"tool": "t_device", "args": {"ms": 150, "device": "NAS"}, "as": "r"}),
        json!({"tool": "t_device", "args": {"ms": 150, "device": "nas"}, "as": "r"}),
    ]);
    let s = seq(
        json!({"name": "s", "groups": [{"name": "g", "out": {"r": "array<string>"},
        "tools": steps}]}),
    );
    let hooked = common::harness_with_pre_hooks(vec![std::sync::Arc::new(LowerCaseDevice)]);
    let report = hooked
        .engine
        .run_sequence(&s, args(json!({})), &main_caller())
        .await;
    assert_eq!(report.status, RunStatus::Completed, "{report:?}");
    assert_eq!(report.groups[0].mode, Some("serial"));
    assert_eq!(
        *hooked.finished.lock().unwrap(),
        ["start nas", "end nas", "start nas", "end nas"]
    );
    assert_eq!(report.slots["r"], json!(["nas", "nas"]));

    let plain = harness();
    let report = plain
        .engine
        .run_sequence(&s, args(json!({})), &main_caller())
        .await;
    assert_eq!(report.groups[0].mode, Some("parallel"));
    // Side by side: both started before either ended (in either order).
    let mut first_two = plain.finished.lock().unwrap()[..2].to_vec();
    first_two.sort();
    assert_eq!(first_two, ["start NAS", "start nas"]);
}

/// A group's order keys are read as the handlers get the arguments: on an
/// integer key, `"1.0"` is coerced to `1`, so two steps on zone 1 run in
/// order though the sequence wrote them apart.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_groups_order_keys_are_read_after_coercion() {
    use homeagent_core::{OrderKey, ToolContext, ToolDef};
    let h = harness();
    let log = std::sync::Arc::clone(&h.finished);
    h.registry
        .register(
            ToolDef::new("t_zone", "holds zone `zone` for ms")
                .parallel_safe()
                .with_order_key(OrderKey::Argument("zone".into()))
                .with_parameters(json!({"type": "object",
                    "properties": {"zone": {"type": "integer"}, "ms": {"type": "integer"}},
                    "required": ["zone"]})),
            move |ctx: ToolContext| {
                let log = std::sync::Arc::clone(&log);
                async move {
                    let zone = ctx.arguments["zone"].clone();
                    let ms = ctx.arguments["ms"].as_u64().unwrap_or(0);
                    log.lock().unwrap().push(format!("start {zone}"));
                    tokio::time::sleep(Duration::from_millis(ms)).await;
                    log.lock().unwrap().push(format!("end {zone}"));
                    Ok::<Value, homeagent_core::ToolError>(zone)
                }
            },
        )
        .unwrap();
    let steps = tools(&[
        json!({"tool": "t_zone", "args": {"ms": 100, "zone": 1}, "as": "r"}),
        json!({"tool": "t_zone", "args": {"ms": 100, "zone": "1.0"}, "as": "r"}),
    ]);
    let s = seq(
        json!({"name": "s", "groups": [{"name": "g", "out": {"r": "array<integer>"},
        "tools": steps}]}),
    );
    let report = h
        .engine
        .run_sequence(&s, args(json!({})), &main_caller())
        .await;
    assert_eq!(report.status, RunStatus::Completed, "{report:?}");
    assert_eq!(report.groups[0].mode, Some("serial"));
    assert_eq!(
        *h.finished.lock().unwrap(),
        ["start 1", "end 1", "start 1", "end 1"]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_false_condition_skips_the_group_and_field_access_works() {
    let h = harness();
    let s = seq(json!({"name": "s", "groups": [
        {"name": "first", "out": {"res": "object"},
         "tools": tools(&[json!({"tool": "demo_echo", "args": {"count": 5, "items": [{"name": "disk"}]}, "as": "res"})])},
        {"name": "skipped", "in": {"go": "boolean"}, "out": {"x": "string"}, "when": "$args.go == true",
         "tools": tools(&[json!({"tool": "t_delay", "args": {"ms": 0, "tag": "never"}, "as": "x"})])},
        {"name": "deep", "in": {"res": "object"}, "out": {"y": "string"},
         "when": "$args.res.count > 3 && $args.res.items.0.name == \"disk\"",
         "tools": tools(&[json!({"tool": "t_delay", "args": {"ms": 0, "tag": "deep"}, "as": "y"})])}
    ]}));
    let report = h
        .engine
        .run_sequence(&s, args(json!({"go": false})), &main_caller())
        .await;
    let statuses: Vec<GroupStatus> = report.groups.iter().map(|g| g.status).collect();
    assert_eq!(
        statuses,
        [GroupStatus::Ran, GroupStatus::Skipped, GroupStatus::Ran]
    );
    assert!(report.groups[1].calls.is_empty());
    assert!(
        !report.slots.contains_key("x"),
        "a skipped group writes no slot"
    );
    assert_eq!(*h.finished.lock().unwrap(), ["deep"]);
    assert_eq!(report.slots["y"], json!("ran:deep"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_condition_that_cannot_be_evaluated_fails_the_group_and_runs_nothing() {
    let h = harness();
    for when in ["$args.missing == 1", "$args.word > 3", "1 =="] {
        let s = seq(json!({"name": "s", "groups": [{"name": "g", "when": when,
            "tools": tools(&[json!({"tool": "t_delay", "args": {"ms": 0, "tag": "x"}})])}]}));
        let report = h
            .engine
            .run_sequence(&s, args(json!({"word": "abc"})), &main_caller())
            .await;
        assert_eq!(report.status, RunStatus::Aborted, "{when}");
        assert_eq!(report.groups[0].status, GroupStatus::Failed);
        let error = report.groups[0].error.clone().unwrap();
        assert!(error.contains("could not be evaluated"), "{error}");
    }
    assert!(h.finished.lock().unwrap().is_empty(), "no call ran");
}

/// A group's declared `in` types are checked when it starts: a value of
/// another kind fails the group naming the input, the type and what came,
/// and nothing runs (it used to run with whatever came: `verbose: 1` made
/// `$args.verbose == true` false and skipped work silently). The forms a
/// model sends for scalars ("3", "true") pass, as the kernel's coercion
/// lets them, and so does null (a degraded slot's value).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn declared_input_types_are_checked_when_a_group_starts() {
    let h = harness();
    let s = seq(json!({"name": "s", "groups": [{"name": "g",
        "in": {"host": "string", "verbose": "boolean", "n": "integer", "tags": "array<string>"},
        "tools": tools(&[json!({"tool": "t_delay", "args": {"ms": 0, "tag": "$args.host"}})])}]}));
    for (bad, named, wanted) in [
        (json!({"host": {"a": 1}}), "host", "string"),
        (json!({"host": "x", "verbose": 1}), "verbose", "boolean"),
        (json!({"host": "x", "n": 2.5}), "n", "integer"),
        (
            json!({"host": "x", "tags": ["a", 3]}),
            "tags",
            "array<string>",
        ),
    ] {
        let report = h
            .engine
            .run_sequence(&s, args(bad.clone()), &main_caller())
            .await;
        assert_eq!(report.groups[0].status, GroupStatus::Failed, "{bad}");
        let error = report.groups[0].error.clone().unwrap();
        assert!(
            error.contains(&format!("`{named}`")) && error.contains(wanted),
            "{bad}: {error}"
        );
    }
    assert!(h.finished.lock().unwrap().is_empty(), "no call ran");
    let report = h
        .engine
        .run_sequence(
            &s,
            args(json!({"host": "x", "verbose": "true", "n": 3.0, "tags": null})),
            &main_caller(),
        )
        .await;
    assert_eq!(report.status, RunStatus::Completed, "{report:?}");
    let report = h
        .engine
        .run_sequence(
            &s,
            args(json!({"host": "x", "verbose": false, "n": "3", "tags": ["a"]})),
            &main_caller(),
        )
        .await;
    assert_eq!(report.status, RunStatus::Completed, "{report:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn abort_stops_the_run_and_continue_goes_on() {
    let h = harness();
    let groups = |policy: &str| {
        json!({"name": "s", "groups": [
            {"name": "bad", "on_error": policy, "out": {"ok": "object", "failed": "object"},
             "tools": tools(&[
                json!({"tool": "t_flaky", "args": {"key": format!("k-{policy}"), "fail": 9}, "as": "failed"}),
                json!({"tool": "demo_echo", "args": {"v": 1}, "as": "ok"}),
             ])},
            {"name": "after", "out": {"z": "string"},
             "tools": tools(&[json!({"tool": "t_delay", "args": {"ms": 0, "tag": policy}, "as": "z"})])}
        ]})
    };
    let report = h
        .engine
        .run_sequence(&seq(groups("abort")), args(json!({})), &main_caller())
        .await;
    assert_eq!(report.status, RunStatus::Aborted);
    assert_eq!(report.groups[1].status, GroupStatus::NotRun);
    assert!(
        report
            .error
            .as_deref()
            .unwrap()
            .starts_with("group \"bad\" failed: tool t_flaky failed"),
        "{:?}",
        report.error
    );
    assert!(
        report.to_value()["error"].is_string(),
        "an aborted run is an error shape"
    );

    let report = h
        .engine
        .run_sequence(&seq(groups("continue")), args(json!({})), &main_caller())
        .await;
    assert_eq!(report.status, RunStatus::CompletedWithErrors);
    assert_eq!(report.groups[0].status, GroupStatus::Failed);
    assert_eq!(report.groups[1].status, GroupStatus::Ran);
    assert_eq!(report.slots["ok"], json!({"v": 1}));
    assert!(!report.slots.contains_key("failed"));
    assert_eq!(report.slots["z"], json!("ran:continue"));
    assert!(report.to_value().get("error").is_none());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retry_retries_execution_failures_with_backoff_then_gives_up() {
    let h = harness();
    let s = |key: &str, fail: u64| {
        seq(
            json!({"name": "s", "groups": [{"name": "g", "on_error": "retry", "retries": 2,
        "out": {"r": "object"},
        "tools": tools(&[json!({"tool": "t_flaky", "args": {"key": key, "fail": fail}, "as": "r"})])}]}),
        )
    };
    let started = Instant::now();
    let report = h
        .engine
        .run_sequence(&s("two", 2), args(json!({})), &main_caller())
        .await;
    // Backoff 100 ms then 200 ms.
    assert!(
        started.elapsed() >= Duration::from_millis(300),
        "{:?}",
        started.elapsed()
    );
    assert_eq!(report.status, RunStatus::Completed, "{report:?}");
    assert_eq!(report.groups[0].calls[0].attempts, 3);
    assert_eq!(report.slots["r"], json!({"key": "two", "call": 3}));
    // A call that succeeded on a retry reports no error of its earlier tries.
    let call = report.to_value()["groups"][0]["calls"][0].clone();
    assert_eq!(call["status"], "ok", "{call}");
    assert!(call.get("error").is_none_or(Value::is_null), "{call}");
    assert!(call.get("reason").is_none_or(Value::is_null), "{call}");

    let report = h
        .engine
        .run_sequence(&s("many", 9), args(json!({})), &main_caller())
        .await;
    assert_eq!(report.status, RunStatus::Aborted);
    assert_eq!(report.groups[0].calls[0].attempts, 3);
    assert_eq!(h.attempts.lock().unwrap()["many"], 3, "1 call + 2 retries");
}

/// A tool that panicked is not called again: the fault is the tool's, and
/// the same arguments would only make it panic again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_panicking_tool_is_not_retried() {
    let h = harness();
    let s = seq(
        json!({"name": "s", "groups": [{"name": "g", "on_error": "retry", "retries": 5,
        "tools": tools(&[json!({"tool": "t_panic", "args": {}})])}]}),
    );
    let report = h
        .engine
        .run_sequence(&s, args(json!({})), &main_caller())
        .await;
    assert_eq!(report.status, RunStatus::Aborted, "{report:?}");
    assert_eq!(report.groups[0].calls[0].attempts, 1);
    assert_eq!(h.attempts.lock().unwrap()["panic"], 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_group_timeout_bounds_its_wall_time() {
    let h = harness();
    let s = seq(
        json!({"name": "s", "groups": [{"name": "slow", "timeout": "200ms", "out": {"r": "array"},
        "tools": tools(&[
            json!({"tool": "t_delay", "args": {"ms": 20000, "tag": "slow"}, "as": "r"}),
            json!({"tool": "t_delay", "args": {"ms": 0, "tag": "fast"}, "as": "r"}),
        ])}]}),
    );
    let started = Instant::now();
    let report = h
        .engine
        .run_sequence(&s, args(json!({})), &main_caller())
        .await;
    assert!(started.elapsed() >= Duration::from_millis(200));
    assert_eq!(report.status, RunStatus::Aborted);
    let group = &report.groups[0];
    assert!(
        group.error.as_deref().unwrap().contains("timeout of 200ms"),
        "{group:?}"
    );
    assert_eq!(group.calls[0].reason, Some(ErrorReason::Cancelled));
    assert_eq!(group.calls[1].status, CallStatus::Ok);
    assert_eq!(
        *h.finished.lock().unwrap(),
        ["fast"],
        "the slow call was stopped"
    );
}

/// A tool that exists but answers "not found" about what it looks up (a
/// device that is not connected) failed; it is not a missing tool, whatever
/// the `missing` policy: `skip` used to count the group a success and
/// `degrade` wrote the fallback.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_not_found_answer_from_a_tool_that_exists_is_a_failure_not_a_missing_tool() {
    let h = harness();
    for policy in ["fail", "skip", "degrade"] {
        let s = seq(
            json!({"name": "s", "groups": [{"name": "g", "missing": policy,
            "out": {"r": "object"},
            "tools": tools(&[
                json!({"tool": "t_offline", "args": {}, "as": "r", "fallback": {"degraded": true}}),
            ])}]}),
        );
        let report = h
            .engine
            .run_sequence(&s, args(json!({})), &main_caller())
            .await;
        assert_eq!(report.status, RunStatus::Aborted, "{policy}: {report:?}");
        let group = &report.groups[0];
        assert_eq!(group.status, GroupStatus::Failed, "{policy}");
        assert!(group.missing.is_empty(), "{policy}: {group:?}");
        assert!(!report.slots.contains_key("r"), "{policy}");
        let call = &group.calls[0];
        assert_eq!(
            (call.status, call.reason, call.attempts),
            (CallStatus::Failed, Some(ErrorReason::NotFound), 1),
            "{policy}"
        );
        assert!(
            call.error
                .as_deref()
                .unwrap()
                .contains("device nas is not connected"),
            "{policy}: {call:?}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn missing_tools_fail_skip_or_degrade_and_are_never_retried() {
    let h = harness();
    let s = |policy: &str| {
        seq(
            json!({"name": "s", "groups": [{"name": "g", "missing": policy,
            "on_error": "retry", "retries": 3, "out": {"gone": "object", "here": "string"},
            "tools": tools(&[
                json!({"tool": "gone_tool", "args": {}, "as": "gone", "fallback": {"degraded": true}}),
                json!({"tool": "t_delay", "args": {"ms": 0, "tag": policy}, "as": "here"}),
            ])}]}),
        )
    };
    let report = h
        .engine
        .run_sequence(&s("fail"), args(json!({})), &main_caller())
        .await;
    assert_eq!(report.status, RunStatus::Aborted);
    let call = &report.groups[0].calls[0];
    assert_eq!(
        (call.status, call.reason, call.attempts),
        (CallStatus::Failed, Some(ErrorReason::NotFound), 0)
    );
    assert!(
        call.error
            .as_deref()
            .unwrap()
            .starts_with("tool gone_tool does not exist"),
        "{call:?}"
    );

    let report = h
        .engine
        .run_sequence(&s("skip"), args(json!({})), &main_caller())
        .await;
    assert_eq!(report.status, RunStatus::Completed);
    assert_eq!(report.groups[0].missing, ["gone_tool"]);
    assert!(!report.slots.contains_key("gone"));
    assert_eq!(report.slots["here"], json!("ran:skip"));

    let report = h
        .engine
        .run_sequence(&s("degrade"), args(json!({})), &main_caller())
        .await;
    assert_eq!(report.status, RunStatus::Completed);
    assert_eq!(report.groups[0].missing, ["gone_tool"]);
    assert_eq!(report.slots["gone"], json!({"degraded": true}));
    assert!(
        report.render().contains("missing tools: gone_tool"),
        "{}",
        report.render()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unprovided_argument_fails_the_call_without_running_it() {
    let h = harness();
    let s = seq(
        json!({"name": "s", "groups": [{"name": "g", "in": {"host": "string"},
        "tools": tools(&[json!({"tool": "t_delay", "args": {"ms": 0, "tag": "$args.host"}})])}]}),
    );
    let report = h
        .engine
        .run_sequence(&s, args(json!({})), &main_caller())
        .await;
    assert_eq!(report.status, RunStatus::Aborted);
    assert!(
        report.groups[0]
            .error
            .as_deref()
            .unwrap()
            .contains("$args.host is not provided"),
        "{report:?}"
    );
    assert!(h.finished.lock().unwrap().is_empty());
}

/// A `seq_when_call` step whose condition is false ran nothing, and its
/// `as` slot stays unwritten (its description says so), as a skipped
/// missing tool's does: it used to get the skip notice, which a later
/// `when: "$args.r"` read as true and an array slot collected.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_seq_when_call_whose_condition_is_false_writes_no_slot() {
    let h = harness();
    let s = seq(json!({"name": "s", "groups": [
        {"name": "inner", "out": {"e": "object"},
         "tools": tools(&[json!({"tool": "demo_echo", "args": {"v": 1}, "as": "e"})])},
        {"name": "outer", "in": {"x": "string"}, "out": {"r": "object", "all": "array<object>"},
         "tools": tools(&[
            json!({"tool": "seq_when_call", "args": {"target": "inner", "when": "$args.x == \"yes\"", "args": {"x": "$args.x"}}, "as": "r"}),
            json!({"tool": "seq_when_call", "args": {"target": "inner", "when": "$args.x == \"yes\"", "args": {"x": "$args.x"}}, "as": "all"}),
         ])}
    ]}));
    h.store.save(&s).unwrap();
    let report = h
        .engine
        .run_sequence(&s, args(json!({"x": "no"})), &main_caller())
        .await;
    assert_eq!(report.status, RunStatus::Completed, "{report:?}");
    assert!(!report.slots.contains_key("r"), "{:?}", report.slots);
    assert!(!report.slots.contains_key("all"), "{:?}", report.slots);
    let calls = &report.groups[1].calls;
    assert!(
        calls.iter().all(|c| c.status == CallStatus::Skipped),
        "{calls:?}"
    );

    let report = h
        .engine
        .run_sequence(&s, args(json!({"x": "yes"})), &main_caller())
        .await;
    assert_eq!(report.status, RunStatus::Completed, "{report:?}");
    assert_eq!(report.slots["r"]["status"], "ran", "{:?}", report.slots);
    assert_eq!(report.slots["all"].as_array().map(Vec::len), Some(1));
}

/// A `seq_call` to a group whose own `when` is false ran nothing either:
/// its step is skipped and writes no slot, as a false `seq_when_call`
/// does (the skipped report in the slot read as true to a later `when`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_seq_call_to_a_group_skipped_by_its_own_when_writes_no_slot() {
    let h = harness();
    let s = seq(json!({"name": "s", "groups": [
        {"name": "inner", "in": {"go": "boolean"}, "when": "$args.go", "out": {"e": "object"},
         "tools": tools(&[json!({"tool": "demo_echo", "args": {"v": 1}, "as": "e"})])},
        {"name": "outer", "in": {"go": "boolean"}, "out": {"r": "object", "all": "array<object>"},
         "tools": tools(&[
            json!({"tool": "seq_call", "args": {"target": "inner", "args": {"go": "$args.go"}}, "as": "r"}),
            json!({"tool": "seq_call", "args": {"target": "inner", "args": {"go": "$args.go"}}, "as": "all"}),
         ])}
    ]}));
    h.store.save(&s).unwrap();
    let report = h
        .engine
        .run_sequence(&s, args(json!({"go": false})), &main_caller())
        .await;
    assert_eq!(report.status, RunStatus::Completed, "{report:?}");
    assert!(!report.slots.contains_key("r"), "{:?}", report.slots);
    assert!(!report.slots.contains_key("all"), "{:?}", report.slots);
    let calls = &report.groups[1].calls;
    assert_eq!(calls.len(), 2);
    assert!(
        calls.iter().all(|c| c.status == CallStatus::Skipped),
        "{calls:?}"
    );

    let report = h
        .engine
        .run_sequence(&s, args(json!({"go": true})), &main_caller())
        .await;
    assert_eq!(report.status, RunStatus::Completed, "{report:?}");
    assert_eq!(report.slots["r"]["status"], "ran", "{:?}", report.slots);
    assert_eq!(report.slots["all"].as_array().map(Vec::len), Some(1));
}

/// A plain tool whose value happens to say `"status": "skipped"` ran: its
/// slot is written.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tool_value_that_says_skipped_is_still_a_result() {
    let h = harness();
    let s = seq(json!({"name": "s", "groups": [
        {"name": "only", "out": {"e": "object"},
         "tools": tools(&[json!({"tool": "demo_echo", "args": {"status": "skipped"}, "as": "e"})])}
    ]}));
    h.store.save(&s).unwrap();
    let report = h
        .engine
        .run_sequence(&s, args(json!({})), &main_caller())
        .await;
    assert_eq!(report.status, RunStatus::Completed, "{report:?}");
    assert_eq!(report.slots["e"]["status"], "skipped", "{:?}", report.slots);
    assert_eq!(report.groups[0].calls[0].status, CallStatus::Ok);
}

/// A `seq_call` step stores the called group's slots whole: the report's
/// slots are cut to 1000 characters for the model to read, and that cut
/// copy used to be what the calling step's slot got, and what later steps
/// read from it. The model still reads the cut text.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_seq_call_step_gets_the_called_groups_slots_whole() {
    let h = harness();
    let long = "x".repeat(1500);
    let s = seq(json!({"name": "s", "groups": [
        {"name": "inner", "in": {"t": "string"}, "out": {"e": "object"},
         "tools": tools(&[json!({"tool": "demo_echo", "args": {"text": "$args.t"}, "as": "e"})])},
        {"name": "outer", "in": {"t": "string"}, "out": {"r": "object"},
         "tools": tools(&[json!({"tool": "seq_call", "args": {"target": "inner", "args": {"t": "$args.t"}}, "as": "r"})])},
        {"name": "after", "in": {"r": "object"}, "out": {"n": "object"},
         "tools": tools(&[json!({"tool": "demo_echo", "args": {"copy": "$args.r"}, "as": "n"})])}
    ]}));
    h.store.save(&s).unwrap();
    let report = h
        .engine
        .run_sequence(&s, args(json!({"t": long})), &main_caller())
        .await;
    assert_eq!(report.status, RunStatus::Completed, "{report:?}");
    assert_eq!(report.slots["r"]["slots"]["e"], json!({"text": long}));
    assert_eq!(report.slots["n"]["copy"]["slots"]["e"]["text"], json!(long));

    let called = h
        .call(
            "main",
            "seq_call",
            json!({"target": "inner", "sequence": "s", "args": {"t": long}}),
        )
        .await;
    assert!(called.success, "{}", called.text);
    assert_eq!(called.value["slots"]["e"], json!({"text": long}));
    assert!(called.text.contains("[truncated"), "{}", called.text);
    assert!(called.text.len() < 1500, "{}", called.text.len());
}

/// Two calls with the same order key never overlap, whatever the group
/// says: `nas` twice runs one after the other. A keyed call that lacks its
/// key conflicts with every other. (Invariant 4, the kernel's own rule.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn calls_sharing_an_order_key_run_in_order() {
    let run = |steps: &[Value]| {
        let s = seq(
            json!({"name": "s", "groups": [{"name": "g", "out": {"r": "array<string>"},
            "tools": tools(steps)}]}),
        );
        async move {
            let h = harness();
            let report = h
                .engine
                .run_sequence(&s, args(json!({})), &main_caller())
                .await;
            assert_eq!(report.status, RunStatus::Completed, "{report:?}");
            let log = h.finished.lock().unwrap().clone();
            (report.groups[0].mode, log)
        }
    };
    let same = [
        json!({"tool": "t_device", "args": {"ms": 100, "device": "nas"}, "as": "r"}),
        json!({"tool": "t_device", "args": {"ms": 100, "device": "nas"}, "as": "r"}),
    ];
    assert_eq!(
        run(&same).await,
        (
            Some("serial"),
            ["start nas", "end nas", "start nas", "end nas"]
                .map(String::from)
                .to_vec()
        )
    );
    let unkeyed = [
        json!({"tool": "t_device", "args": {"ms": 100, "device": "nas"}, "as": "r"}),
        json!({"tool": "t_device", "args": {"ms": 100}, "as": "r"}),
    ];
    assert_eq!(run(&unkeyed).await.0, Some("serial"));
    let two = [
        json!({"tool": "t_device", "args": {"ms": 100, "device": "nas"}, "as": "r"}),
        json!({"tool": "t_device", "args": {"ms": 100, "device": "tv"}, "as": "r"}),
    ];
    let (mode, log) = run(&two).await;
    assert_eq!(mode, Some("parallel"));
    let mut first_two = log[..2].to_vec();
    first_two.sort();
    assert_eq!(first_two, ["start nas", "start tv"]);
}

/// The waits between attempts, read on tokio's paused clock, where they
/// are exact: 100 ms, then 200 ms (the existing test bounds them only from
/// below on the wall clock).
#[tokio::test(start_paused = true)]
async fn retry_backoff_doubles_from_its_first_wait() {
    let h = harness();
    let s = seq(
        json!({"name": "s", "groups": [{"name": "g", "on_error": "retry", "retries": 3,
        "out": {"r": "object"},
        "tools": tools(&[json!({"tool": "t_flaky", "args": {"key": "k", "fail": 3}, "as": "r"})])}]}),
    );
    let started = tokio::time::Instant::now();
    let report = h
        .engine
        .run_sequence(&s, args(json!({})), &main_caller())
        .await;
    assert_eq!(report.status, RunStatus::Completed, "{report:?}");
    assert_eq!(report.groups[0].calls[0].attempts, 4);
    assert_eq!(started.elapsed(), Duration::from_millis(100 + 200 + 400));
}

/// Only failures that another try may cure are retried: a refusal is
/// answered once, however many retries the group allows.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refusal_is_never_retried() {
    let h = harness();
    let s = seq(
        json!({"name": "s", "groups": [{"name": "g", "on_error": "retry", "retries": 3,
        "out": {"r": "object"},
        "tools": tools(&[json!({"tool": "t_denied_reason", "args": {}, "as": "r"})])}]}),
    );
    let report = h
        .engine
        .run_sequence(&s, args(json!({})), &main_caller())
        .await;
    let call = &report.groups[0].calls[0];
    assert_eq!(
        (call.status, call.reason, call.attempts),
        (CallStatus::Failed, Some(ErrorReason::Denied), 1),
        "{report:?}"
    );
}

/// An array slot keeps what every group wrote to it, in group order.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_array_slot_appends_across_groups() {
    let h = harness();
    let s = seq(json!({"name": "s", "groups": [
        {"name": "a", "out": {"r": "array<string>"},
         "tools": tools(&[json!({"tool": "t_delay", "args": {"ms": 0, "tag": "one"}, "as": "r"})])},
        {"name": "b", "out": {"r": "array<string>"},
         "tools": tools(&[
             json!({"tool": "t_delay", "args": {"ms": 0, "tag": "two"}, "as": "r"}),
             json!({"tool": "t_delay", "args": {"ms": 0, "tag": "three"}, "as": "r"}),
         ])},
    ]}));
    let report = h
        .engine
        .run_sequence(&s, args(json!({})), &main_caller())
        .await;
    assert_eq!(report.status, RunStatus::Completed, "{report:?}");
    assert_eq!(
        report.slots["r"],
        json!(["ran:one", "ran:two", "ran:three"])
    );
}

/// A tool that existed when the group was planned and is gone when its
/// turn comes (an MCP server unloaded in between) is a missing tool under
/// the group's `missing` policy, with no attempt counted, not a failure.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tool_that_vanishes_before_its_call_is_missing() {
    let h = harness();
    let registry = std::sync::Arc::downgrade(&h.registry);
    h.registry
        .register(
            homeagent_core::ToolDef::new("t_unload", "unregisters t_unloaded"),
            move |_ctx: homeagent_core::ToolContext| {
                let registry = registry.clone();
                async move {
                    let removed = registry
                        .upgrade()
                        .is_some_and(|registry| registry.unregister("t_unloaded"));
                    Ok(Value::Bool(removed))
                }
            },
        )
        .unwrap();
    h.registry
        .register(
            homeagent_core::ToolDef::new("t_unloaded", "never runs"),
            |_ctx: homeagent_core::ToolContext| async move { Ok(Value::String("ran".into())) },
        )
        .unwrap();
    let s = seq(
        json!({"name": "s", "groups": [{"name": "g", "parallel": false, "unsafe_serial": true,
        "missing": "skip", "out": {"removed": "boolean", "r": "string"},
        "tools": tools(&[
            json!({"tool": "t_unload", "args": {}, "as": "removed"}),
            json!({"tool": "t_unloaded", "args": {}, "as": "r"}),
        ])}]}),
    );
    let report = h
        .engine
        .run_sequence(&s, args(json!({})), &main_caller())
        .await;
    assert_eq!(report.slots["removed"], json!(true), "{report:?}");
    let call = &report.groups[0].calls[1];
    assert_eq!(
        (call.status, call.attempts),
        (CallStatus::Missing, 0),
        "{report:?}"
    );
    assert!(!report.slots.contains_key("r"));
}
