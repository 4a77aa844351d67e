//! Registries: typed not-found, layered lookup that does not swallow errors.

#![allow(clippy::unwrap_used, clippy::expect_used)] // a panic in a test is a test failure

use std::sync::Arc;

use homeagent_core::assemble::AssembledCall;
use homeagent_core::registry::{LIST_TOOLS_TOOL, ToolSource, closest_names, not_found};
use homeagent_core::{
    AssembledTurn, BatchContext, ErrorReason, Executor, Registry, RegistryError, ToolCall,
    ToolContext, ToolDef, ToolError, ToolNameError,
};
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

fn ctx(tool: &str) -> ToolContext {
    ToolContext {
        call_id: "c1".into(),
        tool: tool.into(),
        arguments: json!({}),
        batch_id: "b".into(),
        extras: Default::default(),
        cancel: CancellationToken::new(),
    }
}

fn ok_tool(reg: &Registry, name: &str) {
    let answer = name.to_owned();
    reg.register(ToolDef::new(name, ""), move |_c: ToolContext| {
        let answer = answer.clone();
        async move { Ok(json!(answer)) }
    })
    .unwrap();
}

#[tokio::test]
async fn a_missing_tool_is_a_typed_not_found_with_a_useful_hint() {
    let reg = Registry::new();
    for name in ["files_read", "files_list", "cmd_run", LIST_TOOLS_TOOL] {
        ok_tool(&reg, name);
    }
    let err = reg.invoke("file_read", ctx("file_read")).await.unwrap_err();
    assert_eq!(err.reason, ErrorReason::NotFound);
    assert!(err.detail.contains("file_read"), "{}", err.detail);
    let hint = err.hint.unwrap();
    assert!(hint.contains("files_read"), "{hint}");
    assert!(hint.contains(LIST_TOOLS_TOOL), "{hint}");
    assert!(!hint.contains("cmd_run"), "only close names: {hint}");
}

#[tokio::test]
async fn a_handler_error_mentioning_not_found_is_still_an_execution_failure() {
    let reg = Registry::new();
    reg.register(ToolDef::new("files_read", ""), |_c: ToolContext| async {
        Err::<Value, _>(ToolError::execution(
            "file not found: tool not found in any plugin",
        ))
    })
    .unwrap();
    let err = reg
        .invoke("files_read", ctx("files_read"))
        .await
        .unwrap_err();
    assert_eq!(err.reason, ErrorReason::Execution);
}

/// A parent that has `device_cmd` but cannot reach the device.
struct OfflineParent;

impl ToolSource for OfflineParent {
    fn definition(&self, name: &str) -> Option<Arc<ToolDef>> {
        matches!(name, "device_cmd" | "device_run").then(|| Arc::new(ToolDef::new(name, "")))
    }
    fn definitions(&self) -> Vec<Arc<ToolDef>> {
        vec![
            Arc::new(ToolDef::new("device_cmd", "")),
            Arc::new(ToolDef::new("device_run", "")),
        ]
    }
    fn invoke(&self, name: &str, _ctx: ToolContext) -> homeagent_core::ToolFuture {
        let name = name.to_owned();
        Box::pin(async move {
            if name == "device_cmd" {
                Err(ToolError::execution("device offline"))
            } else if name == "device_run" {
                // The tool exists; what it looked for does not.
                Err(
                    ToolError::new(ErrorReason::NotFound, "device nas is not connected")
                        .with_field("device_id")
                        .with_hint("call device_list"),
                )
            } else {
                Err(not_found(&name, &[]))
            }
        })
    }
}

#[tokio::test]
async fn the_parent_fallback_passes_through_only_not_found() {
    let child = Registry::with_parent(Arc::new(OfflineParent));
    ok_tool(&child, "local");
    // The child's own tool.
    assert_eq!(
        child.invoke("local", ctx("local")).await.unwrap(),
        json!("local")
    );
    // The parent's real error is reported as it is.
    let err = child
        .invoke("device_cmd", ctx("device_cmd"))
        .await
        .unwrap_err();
    assert_eq!(
        (err.reason, err.detail.as_str()),
        (ErrorReason::Execution, "device offline")
    );
    // A parent tool's own not-found (what it looked for is missing) is its
    // answer, hint and field included, not "this tool does not exist"
    // (seed 0.2: only a tool that really does not exist is passed on as
    // one).
    let err = child
        .invoke("device_run", ctx("device_run"))
        .await
        .unwrap_err();
    assert_eq!(err.detail, "device nas is not connected");
    assert_eq!(err.field.as_deref(), Some("device_id"));
    // A miss in both is still typed, and the hint knows both layers' tools.
    let err = child
        .invoke("device_cmdd", ctx("device_cmdd"))
        .await
        .unwrap_err();
    assert_eq!(err.reason, ErrorReason::NotFound);
    assert!(err.hint.unwrap().contains("device_cmd"));
    let names: Vec<String> = child.definitions().iter().map(|d| d.name.clone()).collect();
    assert_eq!(names, vec!["device_cmd", "device_run", "local"]);
}

#[tokio::test]
async fn two_level_misses_stay_typed_and_child_tools_shadow_parent_tools() {
    let grandparent = Arc::new(Registry::new());
    ok_tool(&grandparent, "shared");
    let parent = Arc::new(Registry::with_parent(grandparent));
    let child = Registry::with_parent(parent);
    ok_tool(&child, "own");
    assert_eq!(
        child.invoke("shared", ctx("shared")).await.unwrap(),
        json!("shared")
    );
    let err = child.invoke("ghost", ctx("ghost")).await.unwrap_err();
    assert_eq!(err.reason, ErrorReason::NotFound);
    assert!(child.definition("shared").is_some());
}

#[tokio::test(flavor = "multi_thread")]
async fn end_to_end_the_parent_error_reaches_the_outcome() {
    let child = Registry::with_parent(Arc::new(OfflineParent));
    let exec = Executor::new(Arc::new(child));
    let turn = AssembledTurn {
        calls: vec![AssembledCall {
            call: ToolCall {
                id: "c".into(),
                name: "device_cmd".into(),
                arguments: json!({}),
                raw_arguments: "{}".into(),
            },
            argument_error: None,
        }],
        ..Default::default()
    };
    let result = exec.run(&turn, &BatchContext::default()).await;
    let outcome = &result.outcomes[0];
    assert_eq!(
        outcome.error.as_ref().map(|e| e.reason),
        Some(ErrorReason::Execution)
    );
    assert!(outcome.text.contains("device offline"), "{}", outcome.text);
}

#[test]
fn registration_refuses_bad_and_duplicate_names() {
    let reg = Registry::new();
    ok_tool(&reg, "dup");
    let again = reg.register(ToolDef::new("dup", ""), |_c: ToolContext| async {
        Ok(json!(1))
    });
    assert_eq!(again, Err(RegistryError::Duplicate("dup".into())));
    let bad = reg.register(ToolDef::new("has space", ""), |_c: ToolContext| async {
        Ok(json!(1))
    });
    assert!(matches!(
        bad,
        Err(RegistryError::BadName(ToolNameError::BadCharacter {
            bad: ' ',
            ..
        }))
    ));
    assert!(reg.unregister("dup"));
    assert!(!reg.unregister("dup"));
}

#[test]
fn closest_names_rank_similar_names_first() {
    let names: Vec<String> = ["files_read", "files_write", "cmd_run", "get_tools"]
        .iter()
        .map(|s| s.to_string())
        .collect();
    assert_eq!(
        closest_names("file_read", &names, 2),
        vec!["files_read", "files_write"]
    );
    assert!(closest_names("zzzz", &names, 3).is_empty());
}

#[test]
fn a_name_contained_in_a_tool_name_is_suggested() {
    let names: Vec<String> = ["files_read", "cmd_run"]
        .iter()
        .map(|s| s.to_string())
        .collect();
    // Too different by edit distance alone; suggested because it is part of the name.
    assert!(strsim::jaro_winkler("read", "files_read") < 0.75);
    assert_eq!(closest_names("read", &names, 3), vec!["files_read"]);
    assert!(closest_names("", &names, 3).is_empty());
}

#[test]
fn a_childs_definitions_list_each_name_once_by_name_with_its_own_shadowing() {
    let parent = Arc::new(Registry::new());
    for (name, description) in [("w_parent", "parent"), ("x_both", "parent")] {
        parent
            .register(ToolDef::new(name, description), |_| async {
                Ok(Value::Null)
            })
            .unwrap();
    }
    let child = Registry::with_parent(parent);
    for (name, description) in [("y_child", "child"), ("x_both", "child")] {
        child
            .register(ToolDef::new(name, description), |_| async {
                Ok(Value::Null)
            })
            .unwrap();
    }
    let listed: Vec<(String, String)> = child
        .definitions()
        .iter()
        .map(|d| (d.name.clone(), d.description.clone()))
        .collect();
    let expected = [
        ("w_parent", "parent"),
        ("x_both", "child"),
        ("y_child", "child"),
    ];
    assert_eq!(
        listed,
        expected.map(|(n, d)| (n.to_owned(), d.to_owned())).to_vec()
    );
}

#[test]
fn slip_of_finds_a_key_at_most_two_edits_away_ignoring_case() {
    use homeagent_core::registry::slip_of;
    let known = ["headers", "endpoint", "transform_response"];
    assert_eq!(
        slip_of("transfrom_response", &known),
        Some("transform_response")
    );
    assert_eq!(slip_of("Endpoint", &known), Some("endpoint"));
    assert_eq!(slip_of("hedrs", &known), Some("headers"));
    // Three edits, and a word merely alike, are not slips.
    assert_eq!(slip_of("hdrs", &known), None);
    assert_eq!(slip_of("helper", &known), None);
    assert_eq!(slip_of("", &known), None);
}
