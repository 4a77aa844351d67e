#![allow(clippy::unwrap_used, clippy::expect_used)] // a panic in a test is a test failure

//! HomeAgent's tools served over MCP ([`ToolServer`]), driven by the
//! official Python MCP client (tests/mcp/check_mcp_serve.py).
//!
//! This binary has its own `main`: run plainly it is the test, which starts
//! the Python client; the client starts this same binary with
//! `--serve-child`, which serves real built-in tools (cmd_run, the demo
//! tools) through the gate, a command hook and [`ToolApi`] on stdio.

mod common;

use std::sync::Arc;

use homeagent_core::{Executor, Registry, ToolContext, ToolDef, ToolSource};
use homeagent_mcp::{ToolServer, serve_stdio};
use homeagent_tools::hooks::{CommandHookSpec, command_hooks};
use homeagent_tools::{
    AgentGrant, Approval, CmdRunPolicy, Gate, GatedSource, ToolApi, register_cmd_run,
    register_demo_tools,
};
use serde_json::json;

fn main() {
    if std::env::args().any(|a| a == "--serve-child") {
        serve_child();
        return;
    }
    // `cargo test -- <filter>` passes a filter: run only when it matches.
    let filter: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| !a.starts_with('-'))
        .collect();
    if !filter.is_empty()
        && !filter
            .iter()
            .any(|f| "mcp_serve_with_python_client".contains(f.as_str()))
    {
        println!("0 passed, 0 failed");
        return;
    }
    mcp_serve_with_python_client();
    println!("test mcp_serve_with_python_client ... ok\n1 passed, 0 failed");
}

fn serve_child() {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let registry = Arc::new(Registry::new());
        register_cmd_run(&registry, CmdRunPolicy::default()).unwrap();
        register_demo_tools(&registry).unwrap();
        // Parallel-safe, and not read-only: it switches something.
        registry
            .register(
                ToolDef::new("lamp_toggle", "Toggles the lamp.").parallel_safe(),
                |_: ToolContext| async { Ok(json!({"on": true})) },
            )
            .unwrap();
        let main = AgentGrant {
            deny_tools: vec!["demo_note".into()],
            ..AgentGrant::main()
        };
        let gate = Arc::new(Gate::new([main]));
        let gated: Arc<dyn ToolSource> =
            Arc::new(GatedSource::new(registry, gate.clone(), Approval::Refused));
        let mut hook = CommandHookSpec::new(std::env::var("HA_HOOK").unwrap());
        hook.matcher = "cmd_run".into();
        let hooks = command_hooks(&[hook], &[], Approval::Refused).unwrap();
        let executor = hooks.attach(Executor::new(gated.clone()));
        let server =
            ToolServer::new(ToolApi::new(Arc::new(executor)), gated, "main").with_gate(gate);
        serve_stdio(server).await.unwrap();
    });
}

fn mcp_serve_with_python_client() {
    let python = common::python();
    let dir = std::env::temp_dir().join(format!("homeagent-mcp-serve-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let hook = dir.join("hook.sh");
    std::fs::write(
        &hook,
        "if grep -q forbidden; then echo 'the hook blocks forbidden words' >&2; exit 2; fi\n",
    )
    .unwrap();
    let expect = json!({
        "tools": {
            // readOnlyHint comes from read_only ...
            "cmd_run": {"readOnlyHint": true},
            "demo_echo": {"readOnlyHint": true},
            "demo_sleep": {"readOnlyHint": true},
            // ... never from parallel_safe.
            "lamp_toggle": {"readOnlyHint": false}
        },
        // The gate hides what the agent may not use.
        "absent": ["demo_note"],
        "calls": [
            {"tool": "demo_echo", "arguments": {"tag": "x", "n": 1},
             "structured": {"tag": "x", "n": 1}},
            {"tool": "cmd_run", "arguments": {"command": "echo hello from mcp"},
             "text_contains": "hello from mcp"},
            {"tool": "cmd_run", "arguments": {"command": "echo forbidden"},
             "is_error": true, "text_contains": "the hook blocks forbidden words"},
            {"tool": "demo_sleep", "arguments": {"ms": "soon"},
             "is_error": true, "text_contains": "tool demo_sleep failed (field ms): type"},
            {"tool": "demo_note", "arguments": {"text": "x"},
             "is_error": true, "text_contains": "tool demo_note failed: unauthorized"}
        ]
    });
    let expect_file = dir.join("expect.json");
    std::fs::write(&expect_file, expect.to_string()).unwrap();
    let status = std::process::Command::new(python)
        .arg(common::repo_root().join("tests/mcp/check_mcp_serve.py"))
        .arg(&expect_file)
        .arg("--env")
        .arg(format!("HA_HOOK=sh '{}'", hook.display()))
        .arg("--")
        .arg(std::env::current_exe().unwrap())
        .arg("--serve-child")
        .status()
        .unwrap();
    let _ = std::fs::remove_dir_all(&dir);
    assert!(
        status.success(),
        "the Python MCP client's checks failed (see above)"
    );
}
