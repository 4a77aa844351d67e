//! Call notes: what a handler or hook attaches to the outcome of the call it
//! serves (warnings, and the text the model reads), and that it reaches the
//! model with the result.

#![allow(clippy::unwrap_used, clippy::expect_used)] // a panic in a test is a test failure

use std::sync::Arc;
use std::time::Duration;

use homeagent_core::assemble::AssembledCall;
use homeagent_core::hooks::HookFuture;
use homeagent_core::{
    AssembledTurn, BatchContext, BatchMode, CallInfo, ErrorReason, Executor, ExecutorOptions,
    PostToolHook, PreDecision, PreToolHook, Registry, ToolCall, ToolContext, ToolDef, ToolOutcome,
    call_notes,
};
use serde_json::{Value, json};

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

fn turn(calls: Vec<AssembledCall>) -> AssembledTurn {
    AssembledTurn {
        calls,
        ..Default::default()
    }
}

/// `warns` answers `done <word>` and warns `careful <word>`, after `ms`.
fn registry() -> Arc<Registry> {
    let reg = Registry::new();
    reg.register(
        ToolDef::new("warns", "").parallel_safe(),
        |ctx: ToolContext| async move {
            let word = ctx.arguments["word"].as_str().unwrap_or("").to_owned();
            let ms = ctx.arguments["ms"].as_u64().unwrap_or(0);
            // Warned before the sleep: the sibling call runs meanwhile.
            assert!(call_notes::add_warning(format!("careful {word}")));
            tokio::time::sleep(Duration::from_millis(ms)).await;
            Ok(json!(format!("done {word}")))
        },
    )
    .unwrap();
    reg.register(ToolDef::new("renders", ""), |_ctx: ToolContext| async {
        assert!(call_notes::set_text("n = 1 (from the tool's own text)"));
        Ok(json!({"n": 1}))
    })
    .unwrap();
    reg.register(
        ToolDef::new("hangs", "").with_timeout(Duration::from_millis(200)),
        |_ctx: ToolContext| async {
            call_notes::add_warning("started the slow part");
            tokio::time::sleep(Duration::from_secs(3600)).await;
            Ok(Value::Null)
        },
    )
    .unwrap();
    Arc::new(reg)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_handler_warning_lands_on_its_own_outcome_and_in_the_text_the_model_reads() {
    let exec = Executor::new(registry());
    let calls = vec![
        call("a", "warns", json!({"word": "a", "ms": 150})),
        call("b", "warns", json!({"word": "b", "ms": 10})),
    ];
    let result = exec.run(&turn(calls), &BatchContext::default()).await;
    assert_eq!(result.mode, BatchMode::Parallel);
    let a = &result.outcomes[0];
    let b = &result.outcomes[1];
    assert!(a.success && b.success);
    assert_eq!(a.warnings, vec!["careful a".to_owned()]);
    assert_eq!(b.warnings, vec!["careful b".to_owned()]);
    assert_eq!(a.value, json!("done a"));
    assert_eq!(a.text, "done a\n\nwarning: careful a");
    assert_eq!(
        result.tool_messages[0].content,
        "done a\n\nwarning: careful a"
    );
    assert_eq!(
        result.tool_messages[1].content,
        "done b\n\nwarning: careful b"
    );
}

/// A warning is a line the model reads after the result, which the result
/// cap does not cut: one that quotes a whole value (a schema check's
/// message about a 5 MB result) is cut to its own bound instead, marked.
#[tokio::test]
async fn a_long_warning_is_cut_to_its_bound() {
    let reg = Registry::new();
    reg.register(ToolDef::new("loud", ""), |_ctx: ToolContext| async {
        call_notes::add_warning(format!("value {} is not of type", "é".repeat(1_000_000)));
        Ok(json!("ok"))
    })
    .unwrap();
    let exec = Executor::new(Arc::new(reg));
    let result = exec
        .run(
            &turn(vec![call("a", "loud", json!({}))]),
            &BatchContext::default(),
        )
        .await;
    let warnings = &result.outcomes[0].warnings;
    assert_eq!(warnings.len(), 1);
    let kept = call_notes::MAX_WARNING_BYTES;
    let expected_start = format!("value {}", "é".repeat((kept - "value ".len()) / 2));
    assert!(
        warnings[0].starts_with(&expected_start),
        "{:.80}",
        warnings[0]
    );
    assert!(
        warnings[0].ends_with("… [warning cut: 2000021 bytes in all]"),
        "{} bytes",
        warnings[0].len()
    );
    assert!(warnings[0].len() < kept + 60);
}

#[tokio::test]
async fn a_warning_outside_a_call_is_refused_not_lost_silently() {
    assert!(!call_notes::add_warning("nobody hears this"));
    assert!(!call_notes::set_text("nor this"));
}

#[tokio::test]
async fn a_handler_may_render_its_own_text_and_a_post_hook_value_re_renders() {
    let exec = Executor::new(registry());
    let result = exec
        .run(
            &turn(vec![call("r", "renders", json!({}))]),
            &BatchContext::default(),
        )
        .await;
    let outcome = &result.outcomes[0];
    assert_eq!(outcome.value, json!({"n": 1}));
    assert_eq!(outcome.text, "n = 1 (from the tool's own text)");
    assert!(outcome.warnings.is_empty());

    struct Replace;
    impl PostToolHook for Replace {
        fn name(&self) -> &str {
            "replace"
        }
        fn after(&self, _call: &CallInfo, _outcome: &ToolOutcome) -> HookFuture<Option<Value>> {
            Box::pin(async { Ok(Some(json!({"n": 2}))) })
        }
    }
    let exec = Executor::new(registry()).with_post_hook(Arc::new(Replace));
    let result = exec
        .run(
            &turn(vec![call("r", "renders", json!({}))]),
            &BatchContext::default(),
        )
        .await;
    // The tool's text described the old value; the new one is rendered.
    assert_eq!(result.outcomes[0].text, r#"{"n":2}"#);
}

/// Warns, then allows or denies by the tool name.
struct NotingHook;

impl PreToolHook for NotingHook {
    fn name(&self) -> &str {
        "noting"
    }
    fn before(&self, call: &CallInfo) -> HookFuture<PreDecision> {
        let tool = call.tool.clone();
        Box::pin(async move {
            assert!(call_notes::add_warning(format!("hook saw {tool}")));
            tokio::task::yield_now().await;
            Ok(if tool == "renders" {
                PreDecision::Deny {
                    reason: "not today".into(),
                }
            } else {
                PreDecision::Allow
            })
        })
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pre_hook_warning_lands_on_the_outcome_allowed_or_denied() {
    let exec = Executor::new(registry()).with_pre_hook(Arc::new(NotingHook));
    let calls = vec![
        call("w", "warns", json!({"word": "x"})),
        call("r", "renders", json!({})),
    ];
    let result = exec.run(&turn(calls), &BatchContext::default()).await;
    let allowed = &result.outcomes[0];
    assert_eq!(
        allowed.warnings,
        vec!["hook saw warns".to_owned(), "careful x".to_owned()]
    );
    assert_eq!(
        allowed.text,
        "done x\n\nwarning: hook saw warns\nwarning: careful x"
    );
    let denied = &result.outcomes[1];
    assert_eq!(denied.error.as_ref().unwrap().reason, ErrorReason::Denied);
    assert_eq!(denied.warnings, vec!["hook saw renders".to_owned()]);
    assert_eq!(
        denied.text,
        "tool renders failed: denied — not today\n\nwarning: hook saw renders"
    );
}

#[tokio::test]
async fn warnings_survive_a_timeout_and_the_text_cap() {
    let exec = Executor::new(registry());
    let result = exec
        .run(
            &turn(vec![call("h", "hangs", json!({}))]),
            &BatchContext::default(),
        )
        .await;
    let outcome = &result.outcomes[0];
    assert_eq!(outcome.error.as_ref().unwrap().reason, ErrorReason::Timeout);
    assert_eq!(outcome.warnings, vec!["started the slow part".to_owned()]);
    assert!(
        outcome.text.ends_with("\n\nwarning: started the slow part"),
        "{}",
        outcome.text
    );

    let exec = Executor::new(registry()).with_options(ExecutorOptions {
        result_text_cap: 4,
        ..ExecutorOptions::default()
    });
    let result = exec
        .run(
            &turn(vec![call("w", "warns", json!({"word": "long"}))]),
            &BatchContext::default(),
        )
        .await;
    assert_eq!(
        result.outcomes[0].text,
        "done\n[output truncated: showing the first 4 of 9 bytes]\n\nwarning: careful long"
    );
}
