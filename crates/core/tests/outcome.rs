//! Honest success and rendering: the shape table.

#![allow(clippy::unwrap_used, clippy::expect_used)] // a panic in a test is a test failure

use homeagent_core::outcome::{error_in_value, render_value};
use homeagent_core::{CallStatus, ErrorReason, ToolError, ToolOutcome};
use serde_json::json;

#[test]
fn failure_shapes_are_failures() {
    let failures = [
        serde_json::to_value(ToolError::new(ErrorReason::Timeout, "slow").with_field("x")).unwrap(),
        json!({"error": "disk full"}),
        json!({"error": "  permission denied  ", "path": "/x"}),
        json!({"error": {"code": 404, "message": "no such page"}}),
        json!({"error": {"code": 500}}),
        json!({"isError": true, "content": [{"type": "text", "text": "server says no"}]}),
        json!({"isError": true}),
        json!({"reason": "execution", "detail": "exploded"}),
        // Legacy plugins' `error` of another kind than a string or an
        // object: a failure all the same (seed 1b).
        json!({"error": true, "msg": "device offline"}),
        json!({"error": 500}),
        json!({"error": ["disk full"]}),
    ];
    for value in failures {
        let outcome = ToolOutcome::from_value("c", "t", value.clone());
        assert!(!outcome.success, "{value} must be a failure");
        assert!(outcome.error.is_some(), "{value}");
        assert!(
            outcome.text.starts_with("tool t failed"),
            "{value}: {}",
            outcome.text
        );
    }
    let mcp = error_in_value(
        &json!({"isError": true, "content": [{"type": "text", "text": "server says no"}]}),
    );
    assert_eq!(mcp.map(|e| e.detail), Some("server says no".to_owned()));
    let flagged = error_in_value(&json!({"error": true, "msg": "device offline"}));
    assert_eq!(flagged.map(|e| e.detail), Some("device offline".to_owned()));
    let listed = error_in_value(&json!({"error": ["disk full", "retry later"]}));
    assert_eq!(
        listed.map(|e| e.detail),
        Some("disk full\nretry later".to_owned())
    );
    let nested = error_in_value(&json!({"error": {"code": 404, "message": "no such page"}}));
    assert_eq!(nested.map(|e| e.detail), Some("no such page".to_owned()));
    // An object with an empty message is shown whole, not as nothing.
    let blank = error_in_value(&json!({"error": {"code": 7, "message": " "}}));
    assert_eq!(
        blank.map(|e| e.detail),
        Some(r#"{"code":7,"message":" "}"#.to_owned())
    );
    let typed = error_in_value(
        &serde_json::to_value(ToolError::new(ErrorReason::Timeout, "slow")).unwrap(),
    );
    assert_eq!(typed.map(|e| e.reason), Some(ErrorReason::Timeout));
}

#[test]
fn success_shapes_are_successes() {
    let successes = [
        json!("an error occurred in the log, line 3"),
        json!("error"),
        json!({"error": null}),
        json!({"error": ""}),
        json!({"exit_code": 1, "stdout": "", "stderr": "grep: no match"}),
        json!({"isError": false, "content": []}),
        json!(42),
        json!(0),
        json!(true),
        json!(false),
        json!([1, "error", {"error": "inside an array"}]),
        json!({}),
        json!(null),
        json!({"errors": ["a", "b"]}),
        // The conventional "no error" of the other kinds.
        json!({"error": false, "data": 1}),
        json!({"error": 0}),
        json!({"error": []}),
        // `{}` is an object's own "none", as `false`, `0` and `[]` are.
        json!({"value": 3, "error": {}}),
        json!({"reason": "fine", "status": "ok"}),
        // A sensor's own report that happens to use these two words: more
        // keys than a ToolError has, so it is the tool's data.
        json!({"reason": "timeout", "detail": "sensor offline", "temperature": 20}),
    ];
    for value in successes {
        let outcome = ToolOutcome::from_value("c", "t", value.clone());
        assert!(outcome.success, "{value} must be a success");
        assert_eq!(outcome.error, None, "{value}");
        assert_eq!(outcome.status(), CallStatus::Ok);
    }
}

#[test]
fn values_render_verbatim_compact_or_empty() {
    assert_eq!(
        render_value(&json!("line 1\nline \"2\"")),
        "line 1\nline \"2\""
    );
    assert_eq!(
        render_value(&json!({"a": [1, 2], "b": {"c": null}})),
        r#"{"a":[1,2],"b":{"c":null}}"#
    );
    assert_eq!(render_value(&json!([1, "x"])), r#"[1,"x"]"#);
    assert_eq!(render_value(&json!(null)), "");
    assert_eq!(render_value(&json!(3.5)), "3.5");
    let text = ToolOutcome::from_value("c", "t", json!({"k": "v"})).text;
    assert!(
        !text.contains("Object") && !text.contains("String("),
        "never Debug output: {text}"
    );
}

#[test]
fn failures_render_with_field_reason_detail_and_hint() {
    let err = ToolError::new(ErrorReason::Required, "missing required argument `path`")
        .with_field("path")
        .with_hint("add the `path` argument (the file to read)");
    assert_eq!(
        err.render("files_read"),
        "tool files_read failed (field path): required — missing required argument `path`\nhint: add the `path` argument (the file to read)"
    );
    assert_eq!(
        ToolError::execution("boom").render("x"),
        "tool x failed: execution — boom"
    );
}

#[test]
fn replacing_the_value_re_renders_text_and_success() {
    let mut outcome = ToolOutcome::from_value("c", "t", json!({"rows": 3}));
    outcome.warnings.push("kept".into());
    outcome.replace_value(json!({"error": "redacted by policy"}));
    assert!(!outcome.success);
    assert!(outcome.text.contains("redacted by policy"));
    assert_eq!(outcome.warnings, vec!["kept".to_owned()]);
    outcome.replace_value(json!("clean"));
    assert!(outcome.success);
    assert_eq!(outcome.text, "clean");
    assert_eq!(
        (outcome.call_id.as_str(), outcome.tool.as_str()),
        ("c", "t")
    );
}

#[test]
fn statuses_follow_the_error_reason() {
    let status = |reason| ToolOutcome::failure("c", "t", ToolError::new(reason, "x")).status();
    assert_eq!(status(ErrorReason::Denied), CallStatus::Denied);
    assert_eq!(status(ErrorReason::Unauthorized), CallStatus::Denied);
    assert_eq!(status(ErrorReason::Cancelled), CallStatus::Cancelled);
    assert_eq!(status(ErrorReason::Timeout), CallStatus::Timeout);
    assert_eq!(status(ErrorReason::Execution), CallStatus::Error);
    assert_eq!(status(ErrorReason::Truncated), CallStatus::Error);
}

#[test]
fn error_reasons_serialise_as_snake_case() {
    let json = serde_json::to_value(ToolError::new(ErrorReason::InvalidArguments, "d")).unwrap();
    assert_eq!(json, json!({"reason": "invalid_arguments", "detail": "d"}));
    for (reason, name) in [
        (ErrorReason::NotFound, "not_found"),
        (ErrorReason::Panic, "panic"),
    ] {
        assert_eq!(serde_json::to_value(reason).unwrap(), json!(name));
        assert_eq!(reason.as_str(), name);
    }
}

#[test]
fn is_error_values_report_their_best_text() {
    // A blank `error` is skipped in favour of the content text.
    let err = error_in_value(&json!({"isError": true, "error": "  ", "content": "real reason"}));
    assert_eq!(err.map(|e| e.detail), Some("real reason".to_owned()));
    // Nothing useful at all: a generic but honest detail.
    let err = error_in_value(&json!({"isError": true, "content": ""}));
    assert_eq!(
        err.map(|e| e.detail),
        Some("the tool reported isError: true".to_owned())
    );
    let err = error_in_value(&json!({"isError": true, "error": "quota exceeded"}));
    assert_eq!(err.map(|e| e.detail), Some("quota exceeded".to_owned()));
}

#[test]
fn a_hand_built_unsuccessful_outcome_without_error_reports_error_status() {
    let mut outcome = ToolOutcome::from_value("c", "t", json!("fine"));
    outcome.success = false;
    assert_eq!(outcome.status(), CallStatus::Error);
}

#[test]
fn warnings_follow_the_text_after_a_blank_line_or_stand_alone() {
    let warnings = ["a".to_owned(), "b".to_owned()];
    let mut text = "result".to_owned();
    homeagent_core::outcome::append_warnings(&mut text, &warnings);
    assert_eq!(text, "result\n\nwarning: a\nwarning: b");
    let mut empty = String::new();
    homeagent_core::outcome::append_warnings(&mut empty, &warnings);
    assert_eq!(empty, "warning: a\nwarning: b");
    let mut untouched = "result".to_owned();
    homeagent_core::outcome::append_warnings(&mut untouched, &[]);
    assert_eq!(untouched, "result");
}

/// A post-hook that rewords a failure (`{"error": "redacted"}`) changes
/// what the model reads, not what kind of failure it was: a timeout stays
/// a timeout in events and on the dashboard. A hook that sends a whole
/// error of its own says its kind itself.
#[test]
fn a_reworded_failure_keeps_its_kind() {
    let mut outcome =
        ToolOutcome::failure("c", "t", ToolError::new(ErrorReason::Timeout, "too slow"));
    outcome.replace_value(json!({"error": "redacted"}));
    assert_eq!(outcome.status(), CallStatus::Timeout);
    let error = outcome.error.clone().unwrap();
    assert_eq!(
        (error.reason, error.detail.as_str()),
        (ErrorReason::Timeout, "redacted")
    );
    assert_eq!(outcome.text, error.render("t"));
    assert!(!outcome.success);
    outcome.replace_value(serde_json::to_value(ToolError::new(ErrorReason::Denied, "no")).unwrap());
    assert_eq!(outcome.status(), CallStatus::Denied);
    // A success reworded as a failure is an execution failure.
    let mut ok = ToolOutcome::from_value("c", "t", json!({"v": 1}));
    ok.replace_value(json!({"error": "hidden"}));
    assert_eq!(ok.error.map(|e| e.reason), Some(ErrorReason::Execution));
}
