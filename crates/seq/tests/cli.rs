#![allow(clippy::unwrap_used, clippy::expect_used)] // a panic in a test is a test failure
//! What `homeagent seq …` prints and returns.

use crate::common;

use common::harness;
use homeagent_core::ToolSource;
use homeagent_seq::cli::{self, CliError};
use homeagent_seq::{CreateError, RunStatus};
use serde_json::json;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn create_list_show_run_delete() {
    let h = harness();
    let file = h.dir.path().join("person.json");
    std::fs::write(&file, json!({"name": "s", "description": "two groups", "groups": [
        {"name": "a", "in": {"unused": "string"}, "out": {"r": "object"},
         "tools": "{\"tool\":\"demo_echo\",\"args\":{\"v\":1},\"as\":\"r\"} ;"},
        {"name": "b", "in": {"go": "boolean"}, "when": "$args.go", "tools": "{\"tool\":\"gone\"} ;", "missing": "skip"}
    ]}).to_string()).unwrap();
    let tools: &dyn ToolSource = h.registry.as_ref();
    let (mut out, mut err) = (Vec::new(), Vec::new());
    cli::create_from_file(&h.store, Some(tools), &file, &mut out, &mut err).unwrap();
    assert_eq!(
        String::from_utf8(out).unwrap(),
        "saved s: two groups (2 groups)\n  · a in [unused] out [r] 1 tool(s)\n  · b in [go] out [] 1 tool(s)\n"
    );
    assert_eq!(
        String::from_utf8(err).unwrap(),
        "warning: group \"a\": input `unused` is declared but never used\nwarning: group \"b\": tool `gone` is not registered right now; the group's `missing` policy decides at run time\n"
    );

    let mut out = Vec::new();
    cli::list(&h.store, &mut out).unwrap();
    assert!(
        String::from_utf8(out)
            .unwrap()
            .starts_with("s: two groups (2 groups)\n")
    );
    let mut out = Vec::new();
    cli::show(&h.store, "s", &mut out).unwrap();
    // Shown as its author writes it (`tools` a string), so what `show`
    // prints goes back through `create` as it is.
    let shown: serde_json::Value = serde_json::from_slice(&out).unwrap();
    assert_eq!(
        shown["groups"][0]["tools"],
        "{\"tool\":\"demo_echo\",\"args\":{\"v\":1},\"as\":\"r\"} ;"
    );
    let shown_file = h.dir.path().join("shown.json");
    std::fs::write(&shown_file, &out).unwrap();
    let stored = h.store.load("s").unwrap();
    let (mut again, mut warned) = (Vec::new(), Vec::new());
    cli::create_from_file(&h.store, Some(tools), &shown_file, &mut again, &mut warned).unwrap();
    assert_eq!(h.store.load("s").unwrap(), stored);

    let mut out = Vec::new();
    let report = cli::run(&h.engine, "s", r#"{"go": true}"#, "main", &mut out)
        .await
        .unwrap();
    assert_eq!(report.status, RunStatus::Completed);
    assert_eq!(
        String::from_utf8(out).unwrap(),
        "sequence \"s\": completed (2/2 groups done)\n  a: ran (serial, 1 calls)\n  b: ran (serial, 1 calls); missing tools: gone\nslots:\n  r = {\"v\":1}\n"
    );
    let mut out = Vec::new();
    let report = cli::run(&h.engine, "s", r#"{}"#, "main", &mut out)
        .await
        .unwrap();
    assert!(report.failed(), "$args.go is unknown: the condition errs");
    assert!(
        String::from_utf8(out)
            .unwrap()
            .contains("sequence \"s\": FAILED (1/2 groups done)\n")
    );
    assert!(matches!(
        cli::run(&h.engine, "s", "[1]", "main", &mut Vec::new()).await,
        Err(CliError::Args(_))
    ));

    cli::delete(&h.store, "s", &mut Vec::new()).unwrap();
    assert!(matches!(
        cli::delete(&h.store, "s", &mut Vec::new()),
        Err(CliError::Store(_))
    ));
}

#[test]
fn create_errors_are_errors() {
    let h = harness();
    let file = h.dir.path().join("bad.json");
    std::fs::write(&file, json!({"name": "s", "groups": [{"name": "a", "tools": "{\"tool\":\"demo_echo\",\"as\":\"nope\"} ;"}]}).to_string()).unwrap();
    let result = cli::create_from_file(&h.store, None, &file, &mut Vec::new(), &mut Vec::new());
    assert!(
        matches!(result, Err(CliError::Create(CreateError::Check { .. }))),
        "{result:?}"
    );
    std::fs::write(
        &file,
        "{\"name\":\"s\",\"groups\":[{\"name\":\"a\",\"tools\":\"x\"}]}",
    )
    .unwrap();
    let result = cli::create_from_file(&h.store, None, &file, &mut Vec::new(), &mut Vec::new());
    assert!(matches!(result, Err(CliError::Format { .. })), "{result:?}");
    assert!(h.store.names().unwrap().is_empty());
}
