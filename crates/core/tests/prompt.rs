//! The execution-order prompt section agrees with the executor.

#![allow(clippy::unwrap_used, clippy::expect_used)] // a panic in a test is a test failure

use std::sync::Arc;

use homeagent_core::assemble::AssembledCall;
use homeagent_core::{
    BatchMode, Executor, ExecutorOptions, OrderKey, Registry, ToolCall, ToolContext, ToolDef,
    execution_order_section,
};
use serde_json::json;

fn registry() -> Registry {
    let reg = Registry::new();
    let defs = [
        ToolDef::new("files_read", "").parallel_safe().read_only(),
        ToolDef::new("files_write", ""),
        ToolDef::new("cmd_run", "").parallel_safe(),
        ToolDef::new("risky", "").parallel_safe().serial(),
        ToolDef::new("looks_safe", "").read_only(),
        ToolDef::new("output_send__console", "")
            .parallel_safe()
            .with_order_key(OrderKey::Fixed("console".into())),
        ToolDef::new("anchor", "").parallel_safe(),
    ];
    for def in defs {
        reg.register(def, |_c: ToolContext| async { Ok(json!(null)) })
            .unwrap();
    }
    reg
}

fn call(id: &str, name: &str) -> AssembledCall {
    AssembledCall {
        call: ToolCall {
            id: id.into(),
            name: name.into(),
            arguments: json!({}),
            raw_arguments: "{}".into(),
        },
        argument_error: None,
    }
}

#[test]
fn the_section_states_the_rules() {
    let text = execution_order_section(&Executor::new(Arc::new(registry())));
    for needle in [
        "run at the same time",
        "Do not depend on their order",
        "next reply",
        "keep their order",
        "same output channel",
        "same device",
        "not declared parallel-safe",
        "whole reply's batch run serially",
    ] {
        assert!(text.contains(needle), "missing {needle:?} in:\n{text}");
    }
}

#[test]
fn its_list_of_parallel_safe_tools_is_the_executors_own_decision() {
    let exec = Executor::new(Arc::new(registry()));
    let text = execution_order_section(&exec);
    let listed_line = text
        .lines()
        .find(|l| l.contains("Parallel-safe tools:"))
        .unwrap();
    let listed: Vec<&str> = listed_line
        .split(':')
        .nth(1)
        .unwrap()
        .split(',')
        .map(str::trim)
        .collect();
    // Ask the executor, tool by tool: does a batch of this tool and a known
    // parallel-safe one run in parallel?
    let mut decided = Vec::new();
    for def in exec.source().definitions() {
        if exec.plan(&[call("a", &def.name), call("b", "anchor")]) == BatchMode::Parallel {
            decided.push(def.name.clone());
        }
    }
    assert_eq!(listed, decided);
    assert_eq!(
        listed,
        vec!["anchor", "cmd_run", "files_read", "output_send__console"]
    );
}

#[test]
fn with_parallel_execution_off_the_section_claims_no_parallelism() {
    let exec = Executor::new(Arc::new(registry())).with_options(ExecutorOptions {
        parallel: false,
        ..Default::default()
    });
    let text = execution_order_section(&exec).to_lowercase();
    assert!(text.contains("one after another"), "{text}");
    for claim in ["same time", "parallel", "concurrent", "simultaneous"] {
        assert!(!text.contains(claim), "claims {claim:?}: {text}");
    }
}
