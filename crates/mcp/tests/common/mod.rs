//! Shared by the interop tests: the Python fixture server (official MCP SDK,
//! from the virtualenv scripts/sdk-check makes) and a way to run batches.

#![allow(dead_code)]

use std::path::PathBuf;
use std::process::Stdio;
use std::sync::Arc;
use std::time::Duration;

use homeagent_core::{
    AssembledCall, AssembledTurn, BatchContext, BatchResult, CancellationToken, Executor, ToolCall,
    ToolOutcome, ToolSource,
};
use homeagent_mcp::McpServerSpec;
use serde_json::{Value, json};
use tokio::io::AsyncBufReadExt;

pub fn repo_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// The virtualenv's python, with the `mcp` SDK importable. A missing venv is
/// a failure, never a silent pass.
pub fn python() -> PathBuf {
    let venv = std::env::var_os("HOMEAGENT_SDK_VENV")
        .map(PathBuf::from)
        .unwrap_or_else(|| repo_root().join(".venv-sdk"));
    let python = venv.join("bin/python");
    let ok = std::process::Command::new(&python)
        .args(["-c", "import mcp.server.mcpserver"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    assert!(
        ok,
        "the Python MCP SDK is not installed in {}: run scripts/sdk-check (it installs tests/sdk/requirements.txt into the virtualenv)",
        venv.display()
    );
    python
}

pub fn fixture() -> String {
    repo_root()
        .join("tests/mcp/fixture_server.py")
        .to_string_lossy()
        .into_owned()
}

/// The fixture over stdio, with a fixed small environment (LC_ALL keeps
/// Python from adding LC_CTYPE to its own environment).
pub fn stdio_spec(name: &str) -> McpServerSpec {
    let mut spec = McpServerSpec::stdio(
        name,
        python().to_string_lossy().into_owned(),
        vec![fixture()],
    );
    if let homeagent_mcp::McpTransport::Stdio { env, .. } = &mut spec.transport {
        env.insert("HA_MARK".into(), "1".into());
        env.insert("LC_ALL".into(), "C.UTF-8".into());
    }
    spec.timeout = Duration::from_secs(30);
    spec
}

/// The fixture over Streamable HTTP on a loopback port; killed on drop.
pub struct HttpFixture {
    pub child: tokio::process::Child,
    pub url: String,
    pub port: u16,
}

/// The fixture on a free port.
pub async fn http_fixture() -> HttpFixture {
    http_fixture_on(None).await
}

/// The fixture on `port` (a restart where the client expects the server),
/// or on a free one.
pub async fn http_fixture_on(port: Option<u16>) -> HttpFixture {
    http_fixture_with(port, &[]).await
}

/// [`http_fixture_on`] with `env` set for the fixture (its `FIXTURE_*`
/// switches).
pub async fn http_fixture_with(port: Option<u16>, env: &[(&str, &str)]) -> HttpFixture {
    let mut command = tokio::process::Command::new(python());
    command.arg(fixture()).arg("--http");
    command.envs(env.iter().copied());
    if let Some(port) = port {
        command.arg("--port").arg(port.to_string());
    }
    let mut child = command
        .env("NO_PROXY", "127.0.0.1")
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let stdout = child.stdout.take().unwrap();
    let mut lines = tokio::io::BufReader::new(stdout).lines();
    let line = tokio::time::timeout(Duration::from_secs(60), lines.next_line())
        .await
        .expect("the HTTP fixture printed no port within 60 s")
        .unwrap()
        .expect("the HTTP fixture exited before printing its port");
    let port: u16 = line.strip_prefix("PORT ").unwrap().trim().parse().unwrap();
    // Keep reading so the child never blocks on a full pipe.
    tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
    HttpFixture {
        child,
        url: format!("http://127.0.0.1:{port}/mcp"),
        port,
    }
}

pub fn turn(calls: &[(&str, Value)]) -> AssembledTurn {
    AssembledTurn {
        calls: calls
            .iter()
            .enumerate()
            .map(|(i, (name, args))| AssembledCall {
                call: ToolCall {
                    id: format!("call_{i}"),
                    name: (*name).to_owned(),
                    arguments: args.clone(),
                    raw_arguments: args.to_string(),
                },
                argument_error: None,
            })
            .collect(),
        ..AssembledTurn::default()
    }
}

pub async fn run_batch(
    source: Arc<dyn ToolSource>,
    calls: &[(&str, Value)],
    cancel: CancellationToken,
) -> BatchResult {
    let executor = Executor::new(source);
    let batch = BatchContext {
        batch_id: "b".into(),
        cancel,
        ..BatchContext::default()
    };
    executor.run(&turn(calls), &batch).await
}

pub async fn call(source: Arc<dyn ToolSource>, name: &str, args: Value) -> ToolOutcome {
    let mut result = run_batch(source, &[(name, args)], CancellationToken::new()).await;
    result.outcomes.pop().unwrap()
}

/// The fixture's own counts (`stats` tool) through the server `prefix`.
pub async fn stats(source: Arc<dyn ToolSource>, prefix: &str) -> Value {
    let outcome = call(source, &format!("{prefix}__stats"), json!({})).await;
    assert!(outcome.success, "stats failed: {}", outcome.text);
    outcome.value
}

/// Runs a batch on its own task (to stop it or kill its server meanwhile).
pub fn spawn_batch(
    source: Arc<dyn ToolSource>,
    calls: Vec<(&'static str, Value)>,
    cancel: CancellationToken,
) -> tokio::task::JoinHandle<BatchResult> {
    tokio::spawn(async move { run_batch(source, &calls, cancel).await })
}
