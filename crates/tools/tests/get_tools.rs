#![allow(clippy::unwrap_used, clippy::expect_used)] // a panic in a test is a test failure
//! `get_tools` through the real registry and executor.

use std::sync::Arc;

use homeagent_core::registry::LIST_TOOLS_TOOL;
use homeagent_core::{
    AssembledCall, AssembledTurn, BatchContext, ErrorReason, Executor, Registry, ToolCall,
    ToolContext, ToolDef, ToolSource,
};
use homeagent_tools::{ToolVisibility, register_demo_tools, register_get_tools};
use serde_json::{Map, Value, json};

fn turn(calls: &[(&str, Value)]) -> AssembledTurn {
    AssembledTurn {
        calls: calls
            .iter()
            .enumerate()
            .map(|(i, (name, arguments))| AssembledCall {
                call: ToolCall {
                    id: format!("call_{i}"),
                    name: (*name).to_owned(),
                    arguments: arguments.clone(),
                    raw_arguments: arguments.to_string(),
                },
                argument_error: None,
            })
            .collect(),
        ..AssembledTurn::default()
    }
}

async fn run(executor: &Executor, arguments: Value, extras: Map<String, Value>) -> Value {
    let batch = BatchContext {
        extras: extras.into(),
        ..BatchContext::default()
    };
    let result = executor
        .run(&turn(&[(LIST_TOOLS_TOOL, arguments)]), &batch)
        .await;
    let outcome = &result.outcomes[0];
    assert!(outcome.success, "{}", outcome.text);
    outcome.value.clone()
}

fn names(listed: &Value) -> Vec<String> {
    listed["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap().to_owned())
        .collect()
}

fn setup(visible: Option<ToolVisibility>) -> (Arc<Registry>, Executor) {
    let registry = Arc::new(Registry::new());
    register_demo_tools(&registry).unwrap();
    registry
        .register(
            ToolDef::new("lamp_off", "Turns a LAMP off.").read_only(),
            |_ctx: ToolContext| async { Ok(json!("off")) },
        )
        .unwrap();
    register_get_tools(&registry, visible).unwrap();
    let executor = Executor::new(registry.clone());
    (registry, executor)
}

#[tokio::test]
async fn lists_itself_and_the_others_with_their_exact_flags() {
    let (_registry, executor) = setup(None);
    let listed = run(&executor, json!({}), Map::new()).await;
    let flags: Vec<(String, bool, bool, bool)> = listed["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| {
            (
                t["name"].as_str().unwrap().to_owned(),
                t["parallel_safe"].as_bool().unwrap(),
                t["serial"].as_bool().unwrap(),
                t["read_only"].as_bool().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        flags,
        [
            ("demo_echo".to_owned(), true, false, true),
            ("demo_note".to_owned(), false, true, false),
            ("demo_sleep".to_owned(), true, false, true),
            ("get_tools".to_owned(), true, false, true),
            ("lamp_off".to_owned(), false, false, true),
        ]
    );
    assert_eq!(listed["count"], 5);
    let lamp = &listed["tools"][4];
    assert_eq!(
        lamp,
        &json!({"name": "lamp_off", "description": "Turns a LAMP off.",
                "parallel_safe": false, "serial": false, "read_only": true})
    );
}

#[tokio::test]
async fn the_filter_matches_names_and_descriptions_ignoring_case() {
    let (_registry, executor) = setup(None);
    let by_name = run(&executor, json!({"filter": "DEMO_S"}), Map::new()).await;
    assert_eq!(names(&by_name), ["demo_sleep"]);
    // "lamp" is only in lamp_off's name; "a lamp" only in its description.
    let by_description = run(&executor, json!({"filter": "a lamp"}), Map::new()).await;
    assert_eq!(names(&by_description), ["lamp_off"]);
    // "lamp_" is in lamp_off's name and nowhere in its description.
    let name_only = run(&executor, json!({"filter": "LAMP_"}), Map::new()).await;
    assert_eq!(names(&name_only), ["lamp_off"]);
    let none = run(&executor, json!({"filter": "zzz"}), Map::new()).await;
    assert_eq!(none, json!({"count": 0, "tools": []}));
}

#[tokio::test]
async fn the_predicate_hides_tools_per_caller() {
    // An agent named in the batch's extras sees only demo tools and
    // get_tools; the main agent sees everything.
    let visible: ToolVisibility = Arc::new(|ctx: &ToolContext, def: &ToolDef| {
        ctx.extras.get("agent").and_then(Value::as_str) != Some("kid")
            || def.name.starts_with("demo_")
            || def.name == LIST_TOOLS_TOOL
    });
    let (_registry, executor) = setup(Some(visible));
    let mut kid = Map::new();
    kid.insert("agent".into(), json!("kid"));
    let listed = run(&executor, json!({}), kid.clone()).await;
    assert_eq!(
        names(&listed),
        ["demo_echo", "demo_note", "demo_sleep", "get_tools"]
    );
    let filtered = run(&executor, json!({"filter": "lamp"}), kid).await;
    assert_eq!(filtered["count"], 0);
    let mut main = Map::new();
    main.insert("agent".into(), json!("main"));
    let listed = run(&executor, json!({}), main).await;
    assert_eq!(listed["count"], 5);
}

#[tokio::test]
async fn a_child_registry_lists_its_parents_tools_too() {
    let parent = Arc::new(Registry::new());
    register_demo_tools(&parent).unwrap();
    let child = Arc::new(Registry::with_parent(parent));
    register_get_tools(&child, None).unwrap();
    let executor = Executor::new(child.clone());
    let listed = run(&executor, json!({}), Map::new()).await;
    assert_eq!(
        names(&listed),
        ["demo_echo", "demo_note", "demo_sleep", "get_tools"]
    );
}

#[tokio::test]
async fn the_not_found_hint_points_at_a_tool_that_exists() {
    let (registry, executor) = setup(None);
    let result = executor
        .run(&turn(&[("lamp_of", json!({}))]), &BatchContext::default())
        .await;
    let error = result.outcomes[0].error.as_ref().unwrap();
    assert_eq!(error.reason, ErrorReason::NotFound);
    assert!(error.hint.as_deref().unwrap().contains("call get_tools"));
    assert!(registry.definition(LIST_TOOLS_TOOL).is_some());
}

#[tokio::test]
async fn the_tool_does_not_keep_its_registry_alive() {
    let registry = Arc::new(Registry::new());
    register_get_tools(&registry, None).unwrap();
    let weak = Arc::downgrade(&registry);
    drop(registry);
    assert!(
        weak.upgrade().is_none(),
        "get_tools holds a strong reference: the registry leaks"
    );
}

/// Pointed at another source (the MCP manager in front of the registry),
/// `get_tools` lists that source's tools, not only the registry's.
#[tokio::test]
async fn it_lists_the_source_it_is_pointed_at() {
    let registry = Arc::new(Registry::new());
    let listed = homeagent_tools::ListedTools::default();
    homeagent_tools::register_get_tools_listing(&registry, None, listed.clone()).unwrap();
    let front = Arc::new(Registry::new());
    front
        .register(
            ToolDef::new("git__status", "an MCP server's tool"),
            |_ctx: ToolContext| async { Ok(json!("clean")) },
        )
        .unwrap();
    let front: Arc<dyn ToolSource> = front;
    listed.list_from(&front);
    let executor = Executor::new(registry.clone());
    let shown = run(&executor, json!({}), Map::new()).await;
    assert_eq!(names(&shown), ["git__status"]);
}
