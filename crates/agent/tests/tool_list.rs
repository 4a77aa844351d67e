#![allow(clippy::unwrap_used, clippy::expect_used)] // a panic in a test is a test failure
//! The tool list and the system prompt an input sends follow the registry
//! as it is when the input starts: a tool registered while the agent runs
//! is offered from the next input on, a removed one is no longer offered,
//! and each agent sees only the tools its grant allows.

use crate::common;

use std::sync::Arc;

use common::{Recorder, TempDir};
use homeagent_agent::store::Store;
use homeagent_agent::{AgentSettings, FrameSink, Runtime, TurnControl, TurnInput};
use homeagent_core::{Message, Registry, ToolDef};
use homeagent_llm::{
    FallbackOptions, LocalModel, SourceConfig, SourceProtocol, SourceSetup, Sources,
};
use homeagent_tools::{AgentGrant, Approval, Gate, GatedSource, register_demo_tools};
use serde_json::{Value, json};

/// The tool names and the system prompt of `recorder`'s latest request.
fn latest(recorder: &Recorder) -> (Vec<String>, String) {
    {
        let requests = recorder.requests.lock().unwrap();
        let request = requests.last().expect("a request was sent");
        let names = request.tools.iter().map(|t| t.name().to_owned()).collect();
        let prompt = match request.messages.first() {
            Some(Message::System { content }) => content.clone(),
            other => panic!("the first message is not the system prompt: {other:?}"),
        };
        (names, prompt)
    }
}

struct Setup {
    _dir: TempDir,
    registry: Arc<Registry>,
    recorder: Arc<Recorder>,
    runtime: Runtime,
}

/// The demo tools, `main` with every tool and `kitchen` with `demo_e*` and
/// `demo_s*` only.
fn setup() -> Setup {
    let dir = TempDir::new("tool-list");
    let store = Arc::new(Store::open(&dir.db()).unwrap());
    let recorder = Arc::new(Recorder::replying("done"));
    let setup = SourceSetup {
        adapter_dir: None,
        local_model: Some(Arc::clone(&recorder) as Arc<dyn LocalModel>),
    };
    let sources = Sources::build(
        vec![SourceConfig::new("local", SourceProtocol::Demo)],
        &|_: &str| None,
        FallbackOptions::default(),
        &setup,
    )
    .unwrap();
    let registry = Arc::new(Registry::new());
    register_demo_tools(&registry).unwrap();
    let kitchen = AgentGrant {
        name: "kitchen".into(),
        allow_tools: vec!["demo_e*".into(), "demo_s*".into()],
        deny_tools: Vec::new(),
        devices: Vec::new(),
    };
    let tools = Arc::new(GatedSource::new(
        Arc::clone(&registry) as _,
        Arc::new(Gate::new([kitchen])),
        Approval::Refused,
    ));
    let runtime = Runtime::new(Arc::new(sources), tools, store, AgentSettings::default());
    Setup {
        _dir: dir,
        registry,
        recorder,
        runtime,
    }
}

async fn run(setup: &Setup, session: &str, agent: &str) {
    let sink: FrameSink = Arc::new(|_| {});
    let input = TurnInput {
        session: session.into(),
        agent: agent.into(),
        text: "hello".into(),
    };
    let frame = setup
        .runtime
        .run(&input, &TurnControl::default(), &sink)
        .await;
    assert!(
        matches!(frame, homeagent_agent::Frame::Response { .. }),
        "{frame:?}"
    );
}

/// The prompt's list of parallel-safe tools.
fn parallel_safe_line(prompt: &str) -> &str {
    prompt
        .lines()
        .find(|line| line.starts_with("- Parallel-safe tools: "))
        .unwrap_or_else(|| panic!("no parallel-safe line in {prompt}"))
}

/// Registers `late_tool`, a parallel-safe tool no grant but `main`'s allows.
fn register_late_tool(registry: &Registry) {
    let def = ToolDef::new("late_tool", "registered while the agent runs")
        .with_parameters(json!({"type": "object", "properties": {}}))
        .parallel_safe();
    registry
        .register(def, |_| async { Ok(Value::Null) })
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tool_registered_or_removed_while_running_changes_the_next_inputs_request() {
    let setup = setup();
    run(&setup, "s1", "main").await;
    let (first, first_prompt) = latest(&setup.recorder);
    assert!(first.iter().any(|n| n == "demo_echo"), "{first:?}");
    assert!(!first.iter().any(|n| n == "late_tool"), "{first:?}");
    assert!(!first_prompt.contains("late_tool"), "{first_prompt}");

    // The same tools again: the same request parts.
    run(&setup, "s2", "main").await;
    assert_eq!(
        latest(&setup.recorder),
        (first.clone(), first_prompt.clone())
    );

    register_late_tool(&setup.registry);
    run(&setup, "s3", "main").await;
    let (with_late, prompt) = latest(&setup.recorder);
    let mut expected = first.clone();
    expected.push("late_tool".into());
    expected.sort();
    let mut sorted = with_late.clone();
    sorted.sort();
    assert_eq!(sorted, expected);
    assert!(
        parallel_safe_line(&prompt).contains("late_tool"),
        "{prompt}"
    );

    // What the runtime reports for an agent is what its next input sends.
    let names = |agent: &str| -> Vec<String> {
        setup
            .runtime
            .tool_specs(agent)
            .iter()
            .map(|t| t.name().to_owned())
            .collect()
    };
    assert_eq!(names("main"), with_late);

    assert!(setup.registry.unregister("late_tool"));
    assert_eq!(names("main"), first);
    run(&setup, "s4", "main").await;
    assert_eq!(latest(&setup.recorder), (first, first_prompt));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_agent_is_offered_only_the_tools_its_grant_allows() {
    let setup = setup();
    run(&setup, "main-1", "main").await;
    let (all, _) = latest(&setup.recorder);
    run(&setup, "kitchen-1", "kitchen").await;
    let (kitchen, _) = latest(&setup.recorder);
    let expected: Vec<String> = all
        .iter()
        .filter(|n| n.starts_with("demo_e") || n.starts_with("demo_s"))
        .cloned()
        .collect();
    assert!(
        !expected.is_empty() && expected.len() < all.len(),
        "{all:?}"
    );
    assert_eq!(kitchen, expected);
    assert_eq!(
        setup
            .runtime
            .tool_specs("kitchen")
            .iter()
            .map(|t| t.name().to_owned())
            .collect::<Vec<_>>(),
        expected
    );
    // And `main` again, after `kitchen`: its own list, not the last one.
    run(&setup, "main-2", "main").await;
    assert_eq!(latest(&setup.recorder).0, all);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_prompt_names_only_the_parallel_safe_tools_the_agent_may_use() {
    let setup = setup();
    register_late_tool(&setup.registry);
    run(&setup, "main-1", "main").await;
    let (_, main_prompt) = latest(&setup.recorder);
    run(&setup, "kitchen-1", "kitchen").await;
    let (kitchen_tools, kitchen_prompt) = latest(&setup.recorder);
    assert!(
        !kitchen_tools.iter().any(|n| n == "late_tool"),
        "{kitchen_tools:?}"
    );
    // Both see demo_echo and demo_sleep, parallel-safe; only main may use
    // late_tool, so only main is told about it.
    for prompt in [&main_prompt, &kitchen_prompt] {
        let line = parallel_safe_line(prompt);
        assert!(
            line.contains("demo_echo") && line.contains("demo_sleep"),
            "{line}"
        );
    }
    assert!(
        parallel_safe_line(&main_prompt).contains("late_tool"),
        "{main_prompt}"
    );
    assert!(
        !kitchen_prompt.contains("late_tool"),
        "kitchen is told about a tool it may not use: {kitchen_prompt}"
    );
}
