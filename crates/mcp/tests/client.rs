#![allow(clippy::unwrap_used, clippy::expect_used)] // a panic in a test is a test failure

//! The MCP client against a real server written with the official Python
//! MCP SDK (tests/mcp/fixture_server.py), over stdio and Streamable HTTP.

mod common;

use std::sync::Arc;
use std::time::Duration;

use common::*;
use homeagent_core::{
    BatchMode, CancellationToken, ErrorReason, Registry, SerialReason, ToolDef, ToolSource,
};
use homeagent_mcp::{McpManager, McpOptions, McpServerSpec, ServerPhase, start_mcp_servers};
use serde_json::json;

async fn start(specs: Vec<McpServerSpec>) -> (McpManager, Arc<dyn ToolSource>) {
    let manager = start_mcp_servers(specs, None, McpOptions::default()).await;
    let source: Arc<dyn ToolSource> = Arc::new(manager.clone());
    (manager, source)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stdio_tools_are_listed_and_called_with_a_clean_environment() {
    let (manager, source) = start(vec![stdio_spec("fx")]).await;
    let status = manager.status();
    assert_eq!(status.len(), 1);
    assert_eq!(status[0].phase, ServerPhase::Running, "{status:?}");
    let mut names: Vec<String> = source
        .definitions()
        .iter()
        .map(|d| d.name.clone())
        .collect();
    names.sort();
    assert_eq!(
        names,
        [
            "fx__add_tool",
            "fx__bad_output",
            "fx__echo",
            "fx__env_names",
            "fx__fail",
            "fx__hang",
            "fx__pid",
            "fx__progress_sleep",
            "fx__read_slow",
            "fx__stats",
            "fx__stderr_write",
            "fx__summary",
            "fx__write_slow"
        ]
    );
    // structuredContent arrives as the structured value.
    let echo = call(source.clone(), "fx__echo", json!({"text": "hi"})).await;
    assert!(echo.success, "{}", echo.text);
    assert_eq!(echo.value, json!({"echo": "hi", "length": 2}));
    // The listed environment and the few names launchers need (as the
    // official SDKs pass them), nothing else of ours (API keys).
    let env = call(source.clone(), "fx__env_names", json!({})).await;
    let mut expected: Vec<String> = ["HOME", "LOGNAME", "PATH", "SHELL", "TERM", "USER"]
        .into_iter()
        .filter(|name| std::env::var_os(name).is_some())
        .map(str::to_owned)
        // And how deep in HomeAgents it was started (a guard against a
        // config that lists `homeagent mcp-serve` as its own server).
        .chain([
            "HA_MARK".to_owned(),
            "HOMEAGENT_MCP_NESTING".to_owned(),
            "LC_ALL".to_owned(),
        ])
        .collect();
    expected.sort();
    assert!(
        expected.iter().any(|n| n == "PATH"),
        "the test needs PATH set"
    );
    assert_eq!(env.value, json!({"result": expected}));
    assert!(
        std::env::var_os("CARGO_MANIFEST_DIR").is_some(),
        "cargo sets it: the test checks it is not passed"
    );
    manager.shutdown().await;
    assert_eq!(manager.status()[0].phase, ServerPhase::Stopped);
}

/// A server's stderr is read to its end whatever it holds: one byte that
/// is not UTF-8 used to end the reading, the pipe then closed, and the
/// server's next write to stderr failed (Go servers die of SIGPIPE).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stderr_that_is_not_utf8_does_not_break_the_server() {
    let (manager, source) = start(vec![stdio_spec("fx")]).await;
    let bad = call(
        source.clone(),
        "fx__stderr_write",
        json!({"hex_bytes": "636166e90a", "repeat": 1}),
    )
    .await;
    assert_eq!(bad.value, json!({"result": "written"}), "{}", bad.text);
    // 512 KiB: far more than a pipe buffer holds, so someone must read it.
    let line = format!("{}0a", "78".repeat(1023));
    let lots = call(
        source.clone(),
        "fx__stderr_write",
        json!({"hex_bytes": line, "repeat": 512}),
    )
    .await;
    assert_eq!(lots.value, json!({"result": "written"}), "{}", lots.text);
    manager.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn streamable_http_tools_are_listed_and_called() {
    let fixture = http_fixture().await;
    let mut spec = McpServerSpec::http("web", fixture.url.clone());
    if let homeagent_mcp::McpTransport::Http { bearer_token, .. } = &mut spec.transport {
        *bearer_token = Some("test-token".into());
    }
    let (manager, source) = start(vec![spec]).await;
    assert_eq!(
        manager.status()[0].phase,
        ServerPhase::Running,
        "{:?}",
        manager.status()
    );
    assert!(source.definition("web__echo").is_some());
    let echo = call(source.clone(), "web__echo", json!({"text": "über"})).await;
    assert!(echo.success, "{}", echo.text);
    assert_eq!(echo.value, json!({"echo": "über", "length": 4}));
    let failed = call(source.clone(), "web__fail", json!({"message": "over http"})).await;
    assert!(!failed.success);
    assert!(failed.error.unwrap().detail.contains("over http"));
    manager.shutdown().await;
    drop(fixture);
}

/// The server's text next to its structured content is what the model reads;
/// the structure is the value. A structured value that breaks the tool's
/// outputSchema is kept, with a warning on the outcome that the model reads
/// too.
async fn structured_content_keeps_its_text_and_output_schema_breaks_warn(
    source: Arc<dyn ToolSource>,
    server: &str,
) {
    let summary = call(source.clone(), &format!("{server}__summary"), json!({})).await;
    assert!(summary.success, "{}", summary.text);
    assert_eq!(summary.value, json!({"items": 3, "status": "green"}));
    assert_eq!(summary.text, "3 items, all green");
    assert!(summary.warnings.is_empty(), "{:?}", summary.warnings);

    // The SDK's own text for a structured result: the JSON, indented by 2.
    let echo = call(
        source.clone(),
        &format!("{server}__echo"),
        json!({"text": "hi"}),
    )
    .await;
    assert_eq!(echo.text, "{\n  \"echo\": \"hi\",\n  \"length\": 2\n}");

    let bad = call(source.clone(), &format!("{server}__bad_output"), json!({})).await;
    assert!(bad.success, "{}", bad.text);
    assert_eq!(bad.value, json!({"n": "one"}));
    assert_eq!(bad.warnings.len(), 1, "{:?}", bad.warnings);
    let warning = &bad.warnings[0];
    let prefix = format!(
        "MCP tool bad_output of server `{server}` returned structured content that does not match its outputSchema: "
    );
    assert!(warning.starts_with(&prefix), "{warning}");
    assert!(
        warning.contains(r#""one" is not of type "integer""#),
        "{warning}"
    );
    assert_eq!(bad.text, format!("n is one\n\nwarning: {warning}"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stdio_structured_content_keeps_its_text_and_output_schema_breaks_warn() {
    let (manager, source) = start(vec![stdio_spec("fx")]).await;
    structured_content_keeps_its_text_and_output_schema_breaks_warn(source, "fx").await;
    // The person sees it in the status as well.
    assert_eq!(manager.status()[0].output_schema_warnings.len(), 1);
    manager.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http_structured_content_keeps_its_text_and_output_schema_breaks_warn() {
    let fixture = http_fixture().await;
    let (manager, source) = start(vec![McpServerSpec::http("web", fixture.url.clone())]).await;
    structured_content_keeps_its_text_and_output_schema_breaks_warn(source, "web").await;
    manager.shutdown().await;
    drop(fixture);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn read_only_tools_run_in_parallel_only_when_the_server_is_trusted() {
    let mut trusted = stdio_spec("tr");
    trusted.trusted = true;
    let untrusted = stdio_spec("un");
    let (manager, source) = start(vec![trusted, untrusted]).await;

    let three = |p: &str| {
        (0..3)
            .map(|_| (format!("{p}__read_slow"), json!({"ms": 400})))
            .collect::<Vec<_>>()
    };
    let calls = three("tr");
    let calls: Vec<(&str, serde_json::Value)> =
        calls.iter().map(|(n, a)| (n.as_str(), a.clone())).collect();
    let result = run_batch(source.clone(), &calls, CancellationToken::new()).await;
    assert_eq!(result.mode, BatchMode::Parallel);
    assert!(result.outcomes.iter().all(|o| o.success));
    let peak = stats(source.clone(), "tr").await["peak_in_flight"]
        .as_i64()
        .unwrap();
    assert!(
        peak >= 2,
        "trusted read-only calls did not overlap (peak {peak})"
    );

    let calls = three("un");
    let calls: Vec<(&str, serde_json::Value)> =
        calls.iter().map(|(n, a)| (n.as_str(), a.clone())).collect();
    let result = run_batch(source.clone(), &calls, CancellationToken::new()).await;
    assert_eq!(
        result.mode,
        BatchMode::Serial {
            reason: SerialReason::NotParallelSafe {
                tool: "un__read_slow".into()
            }
        }
    );
    let stats_un = stats(source.clone(), "un").await;
    assert_eq!(stats_un["peak_in_flight"], json!(1));
    assert_eq!(stats_un["calls"]["read_slow"], json!(3));
    // Annotations of an untrusted server are not even shown as read-only.
    assert!(!source.definition("un__read_slow").unwrap().read_only);
    assert!(source.definition("tr__read_slow").unwrap().read_only);
    manager.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn config_lists_override_annotations_and_serial_wins() {
    let mut spec = stdio_spec("cf");
    spec.trusted = true;
    spec.parallel_safe = vec!["write_slow".into(), "hang".into()];
    spec.serial = vec!["read_slow".into(), "hang".into()];
    let (manager, source) = start(vec![spec]).await;
    let def = |n: &str| source.definition(n).unwrap();
    assert!(def("cf__write_slow").runs_in_parallel());
    assert!(!def("cf__read_slow").runs_in_parallel());
    assert!(!def("cf__hang").runs_in_parallel());
    assert!(def("cf__echo").runs_in_parallel());
    assert!(!def("cf__pid").runs_in_parallel());
    manager.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn is_error_fails_and_invalid_arguments_never_reach_the_server() {
    let (manager, source) = start(vec![stdio_spec("fx")]).await;
    let failed = call(source.clone(), "fx__fail", json!({"message": "boom 42"})).await;
    assert!(!failed.success);
    let error = failed.error.unwrap();
    assert_eq!(error.reason, ErrorReason::Execution);
    assert!(error.detail.contains("boom 42"), "{}", error.detail);

    let missing = call(source.clone(), "fx__echo", json!({})).await;
    assert_eq!(missing.error.unwrap().reason, ErrorReason::Required);
    let wrong = call(source.clone(), "fx__read_slow", json!({"ms": "soon"})).await;
    assert_eq!(wrong.error.unwrap().reason, ErrorReason::Type);
    let counts = stats(source.clone(), "fx").await;
    assert_eq!(counts["calls"], json!({"fail": 1}));
    manager.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stopped_call_sends_notifications_cancelled() {
    let (manager, source) = start(vec![stdio_spec("fx")]).await;
    let stop = CancellationToken::new();
    let batch = spawn_batch(
        source.clone(),
        vec![("fx__hang", json!({"ms": 60000}))],
        stop.clone(),
    );
    wait_for(|| async { stats(source.clone(), "fx").await["calls"]["hang"] == json!(1) }).await;
    stop.cancel();
    let outcome = batch.await.unwrap().outcomes.pop().unwrap();
    assert_eq!(outcome.error.unwrap().reason, ErrorReason::Cancelled);
    wait_for(|| async { stats(source.clone(), "fx").await["cancelled"] == json!(1) }).await;
    manager.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_timed_out_call_sends_notifications_cancelled() {
    let mut spec = stdio_spec("fx");
    spec.timeout = Duration::from_secs(8);
    let (manager, source) = start(vec![spec]).await;
    let started = std::time::Instant::now();
    let outcome = call(source.clone(), "fx__hang", json!({"ms": 60000})).await;
    assert_eq!(outcome.error.unwrap().reason, ErrorReason::Timeout);
    assert!(started.elapsed() >= Duration::from_secs(8));
    wait_for(|| async { stats(source.clone(), "fx").await["cancelled"] == json!(1) }).await;
    manager.shutdown().await;
}

/// A server that hangs (here: stopped with SIGSTOP) keeps its pipes open,
/// so nothing closes. A call that times out makes the manager ping it; no
/// answer, and the server is restarted instead of making every later call
/// wait its whole timeout.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_that_hangs_is_restarted_after_a_call_times_out() {
    let options = McpOptions {
        restart_backoff: Duration::from_millis(200),
        ..McpOptions::default()
    };
    let mut spec = stdio_spec("fx");
    spec.timeout = Duration::from_secs(2);
    let manager = start_mcp_servers(vec![spec], None, options).await;
    let source: Arc<dyn ToolSource> = Arc::new(manager.clone());
    // The 2 s timeout also bounds initialize: on a loaded machine the
    // first start may miss it and be retried.
    assert!(
        manager.wait_running("fx", Duration::from_secs(60)).await,
        "{:?}",
        manager.status()
    );
    let pid = call(source.clone(), "fx__pid", json!({})).await.value["result"]
        .as_i64()
        .unwrap();
    let stopped = std::process::Command::new("kill")
        .args(["-STOP", &pid.to_string()])
        .status()
        .unwrap();
    assert!(stopped.success());
    let outcome = call(source.clone(), "fx__echo", json!({"text": "x"})).await;
    assert_eq!(outcome.error.unwrap().reason, ErrorReason::Timeout);
    wait_for(|| async { manager.status()[0].restarts >= 1 }).await;
    wait_for(|| async {
        call(source.clone(), "fx__echo", json!({"text": "back"}))
            .await
            .success
    })
    .await;
    let new_pid = call(source.clone(), "fx__pid", json!({})).await.value["result"]
        .as_i64()
        .unwrap();
    assert_ne!(new_pid, pid);
    // The hung process was killed, not left stopped.
    let _ = std::process::Command::new("kill")
        .args(["-CONT", &pid.to_string()])
        .status();
    manager.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_server_fails_its_calls_hides_its_tools_and_comes_back() {
    let options = McpOptions {
        restart_backoff: Duration::from_secs(3),
        ..McpOptions::default()
    };
    let manager = start_mcp_servers(vec![stdio_spec("fx")], None, options).await;
    let source: Arc<dyn ToolSource> = Arc::new(manager.clone());
    let pid = call(source.clone(), "fx__pid", json!({})).await.value["result"]
        .as_i64()
        .unwrap();
    assert_eq!(manager.status()[0].pid, Some(u32::try_from(pid).unwrap()));
    let in_flight = spawn_batch(
        source.clone(),
        vec![("fx__hang", json!({"ms": 60000}))],
        CancellationToken::new(),
    );
    wait_for(|| async { stats(source.clone(), "fx").await["calls"]["hang"] == json!(1) }).await;
    let killed = std::process::Command::new("kill")
        .args(["-9", &pid.to_string()])
        .status()
        .unwrap();
    assert!(killed.success());

    let outcome = in_flight.await.unwrap().outcomes.pop().unwrap();
    let error = outcome.error.unwrap();
    assert_eq!(error.reason, ErrorReason::Execution);
    assert!(error.detail.contains("disconnected"), "{}", error.detail);

    // Down until the restart: a typed not-found naming the server.
    wait_for(|| async { matches!(manager.status()[0].phase, ServerPhase::Down { .. }) }).await;
    let down = call(source.clone(), "fx__echo", json!({"text": "x"})).await;
    let error = down.error.unwrap();
    assert_eq!(error.reason, ErrorReason::NotFound);
    assert!(
        error.detail.contains("MCP server `fx` is down"),
        "{}",
        error.detail
    );
    assert!(source.definition("fx__echo").is_none());
    assert!(matches!(
        manager.status()[0].phase,
        ServerPhase::Down { .. }
    ));

    assert!(manager.wait_running("fx", Duration::from_secs(60)).await);
    let back = call(source.clone(), "fx__echo", json!({"text": "again"})).await;
    assert!(back.success, "{}", back.text);
    let status = &manager.status()[0];
    assert_eq!(status.restarts, 1);
    assert_ne!(status.pid, Some(u32::try_from(pid).unwrap()));
    manager.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_http_server_fails_its_calls_hides_its_tools_and_is_reconnected() {
    let mut fixture = http_fixture().await;
    let options = McpOptions {
        restart_backoff: Duration::from_millis(500),
        max_restart_backoff: Duration::from_secs(2),
        // Reconnect attempts while the server is away count as failures.
        max_crashes: 1000,
        // Only the failed call can tell that the server went away.
        http_ping_interval: Duration::from_secs(3600),
        ..McpOptions::default()
    };
    let manager = start_mcp_servers(
        vec![McpServerSpec::http("web", fixture.url.clone())],
        None,
        options,
    )
    .await;
    let source: Arc<dyn ToolSource> = Arc::new(manager.clone());
    assert_eq!(manager.status()[0].phase, ServerPhase::Running);
    let in_flight = spawn_batch(
        source.clone(),
        vec![("web__hang", json!({"ms": 60000}))],
        CancellationToken::new(),
    );
    wait_for(|| async { stats(source.clone(), "web").await["calls"]["hang"] == json!(1) }).await;
    fixture.child.kill().await.unwrap();

    // The call in flight fails clearly, well before its 60 s sleep ends.
    let outcome = in_flight.await.unwrap().outcomes.pop().unwrap();
    let error = outcome.error.unwrap();
    assert_eq!(error.reason, ErrorReason::Execution, "{error:?}");
    assert!(
        error.detail.contains("MCP server `web`"),
        "{}",
        error.detail
    );

    // Down: a typed not-found naming the server, and no definition.
    wait_for(|| async { matches!(manager.status()[0].phase, ServerPhase::Down { .. }) }).await;
    let down = call(source.clone(), "web__echo", json!({"text": "x"})).await;
    let error = down.error.unwrap();
    assert_eq!(error.reason, ErrorReason::NotFound);
    assert!(
        error.detail.contains("MCP server `web` is down"),
        "{}",
        error.detail
    );
    assert!(source.definition("web__echo").is_none());

    // The server comes back where it was; the client reconnects by itself.
    let back = http_fixture_on(Some(fixture.port)).await;
    assert!(manager.wait_running("web", Duration::from_secs(60)).await);
    let echo = call(source.clone(), "web__echo", json!({"text": "again"})).await;
    assert!(echo.success, "{}", echo.text);
    assert_eq!(echo.value, json!({"echo": "again", "length": 5}));
    // A new process: its counts start from zero.
    assert_eq!(
        stats(source.clone(), "web").await["calls"],
        json!({"echo": 1})
    );
    assert!(manager.status()[0].restarts >= 1);
    manager.shutdown().await;
    drop(back);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_http_server_that_went_away_is_noticed_by_its_ping() {
    let mut fixture = http_fixture().await;
    let options = McpOptions {
        http_ping_interval: Duration::from_millis(300),
        max_crashes: 1000,
        ..McpOptions::default()
    };
    let manager = start_mcp_servers(
        vec![McpServerSpec::http("web", fixture.url.clone())],
        None,
        options,
    )
    .await;
    let source: Arc<dyn ToolSource> = Arc::new(manager.clone());
    assert!(source.definition("web__echo").is_some());
    fixture.child.kill().await.unwrap();
    // No call is made: only the ping can notice.
    wait_for(|| async { matches!(manager.status()[0].phase, ServerPhase::Down { .. }) }).await;
    assert!(source.definition("web__echo").is_none());
    let ServerPhase::Down { reason } = manager.status()[0].phase.clone() else {
        unreachable!()
    };
    assert!(reason.contains("stopped answering"), "{reason}");
    manager.shutdown().await;
}

/// One malformed tool in a server's list (its inputSchema is `true`) is
/// left out and reported; the server's other tools are offered, and the
/// server is not taken for broken (it was: the whole page failed to
/// decode, the server was restarted, and given up on).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_malformed_tool_in_the_list_is_left_out_and_the_rest_offered() {
    let mut spec = stdio_spec("fx");
    if let homeagent_mcp::McpTransport::Stdio { env, .. } = &mut spec.transport {
        env.insert("FIXTURE_BAD_TOOL".into(), "1".into());
    }
    let (manager, source) = start(vec![spec]).await;
    let status = manager.status().remove(0);
    assert_eq!(status.phase, ServerPhase::Running, "{status:?}");
    assert_eq!(status.restarts, 0, "{status:?}");
    assert!(source.definition("fx__echo").is_some(), "{status:?}");
    assert!(source.definition("fx__malformed").is_none());
    let [(tool, why)] = status.unusable_tools.as_slice() else {
        panic!("{status:?}")
    };
    assert_eq!(tool, "malformed");
    assert!(why.contains("inputSchema is not an object"), "{why}");
    let echo = call(Arc::clone(&source), "fx__echo", json!({"text": "fine"})).await;
    assert!(echo.success, "{echo:?}");
    manager.shutdown().await;
}

/// A server that answers `ping` with an error (it does not implement it:
/// Method not found) has answered: it stays up, its tools stay listed and
/// its calls run, ping after ping.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_that_answers_ping_with_an_error_is_alive() {
    let fixture = common::http_fixture_with(None, &[("FIXTURE_REFUSE_PING", "1")]).await;
    let options = McpOptions {
        http_ping_interval: Duration::from_millis(100),
        ..McpOptions::default()
    };
    let manager = start_mcp_servers(
        vec![McpServerSpec::http("web", fixture.url.clone())],
        None,
        options,
    )
    .await;
    let source: Arc<dyn ToolSource> = Arc::new(manager.clone());
    assert!(source.definition("web__echo").is_some());
    // Ten pings and more.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let status = &manager.status()[0];
    assert_eq!(status.phase, ServerPhase::Running, "{status:?}");
    assert_eq!(status.restarts, 0, "{status:?}");
    let outcome = call(
        Arc::clone(&source),
        "web__echo",
        json!({"text": "still here"}),
    )
    .await;
    assert!(outcome.success, "{outcome:?}");
    manager.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_that_keeps_crashing_is_given_up_and_a_silent_one_does_not_block() {
    let python = python().to_string_lossy().into_owned();
    let crashing = McpServerSpec::stdio(
        "crashy",
        python.clone(),
        vec!["-c".into(), "import sys; sys.exit(3)".into()],
    );
    let mut silent = McpServerSpec::stdio(
        "silent",
        python,
        vec!["-c".into(), "import time; time.sleep(600)".into()],
    );
    silent.timeout = Duration::from_millis(700);
    let options = McpOptions {
        restart_backoff: Duration::from_millis(10),
        max_restart_backoff: Duration::from_millis(20),
        max_crashes: 3,
        ..McpOptions::default()
    };
    let manager =
        start_mcp_servers(vec![crashing, silent, stdio_spec("good")], None, options).await;
    let source: Arc<dyn ToolSource> = Arc::new(manager.clone());
    // The good server is usable although the silent one never answered.
    assert!(
        call(source.clone(), "good__echo", json!({"text": "ok"}))
            .await
            .success
    );
    wait_for(|| async {
        manager
            .status()
            .iter()
            .all(|s| s.name == "good" || matches!(s.phase, ServerPhase::GaveUp { .. }))
    })
    .await;
    let status = manager.status();
    let silent = status.iter().find(|s| s.name == "silent").unwrap();
    let ServerPhase::GaveUp { reason } = &silent.phase else {
        panic!("{silent:?}")
    };
    assert!(
        reason.contains("did not answer `initialize` within 700ms"),
        "{reason}"
    );
    let crashy = status.iter().find(|s| s.name == "crashy").unwrap();
    assert_eq!(crashy.restarts, 2);
    manager.shutdown().await;
}

/// A server that crashed too often rests, then is tried again: a home
/// server or a NAS that restarts takes longer than the crash window's
/// few backoffs, and giving up for good left its tools gone until
/// HomeAgent itself restarted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_given_up_on_is_tried_again_after_a_rest() {
    let python = python().to_string_lossy().into_owned();
    let counter = std::env::temp_dir().join(format!("homeagent-mcp-rest-{}", std::process::id()));
    let _ = std::fs::remove_file(&counter);
    // Exits 3 the first three times it starts, then is the fixture.
    let script = format!(
        "import os, sys\n\
         p = {counter:?}\n\
         n = int(open(p).read()) if os.path.exists(p) else 0\n\
         open(p, 'w').write(str(n + 1))\n\
         if n < 3: sys.exit(3)\n\
         os.execv(sys.executable, [sys.executable, {fixture:?}])\n",
        counter = counter.display().to_string(),
        fixture = fixture(),
    );
    let mut spec = McpServerSpec::stdio("late", python, vec!["-c".into(), script]);
    spec.timeout = Duration::from_secs(30);
    let options = McpOptions {
        restart_backoff: Duration::from_millis(10),
        max_restart_backoff: Duration::from_millis(20),
        max_crashes: 3,
        rest_after_giving_up: Duration::from_millis(500),
        ..McpOptions::default()
    };
    let manager = start_mcp_servers(vec![spec], None, options).await;
    wait_for(|| async {
        manager
            .status()
            .iter()
            .any(|s| matches!(s.phase, ServerPhase::Running))
    })
    .await;
    let source: Arc<dyn ToolSource> = Arc::new(manager.clone());
    assert!(
        call(source, "late__echo", json!({"text": "back"}))
            .await
            .success
    );
    let _ = std::fs::remove_file(&counter);
    manager.shutdown().await;
}

/// A refresh after `list_changed` that fails is tried again: it was only
/// logged, and the server's new tools stayed missing until its next
/// notification or a restart.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_refresh_of_a_changed_tool_list_is_tried_again() {
    let options = McpOptions {
        restart_backoff: Duration::from_millis(100),
        ..McpOptions::default()
    };
    let manager = start_mcp_servers(vec![stdio_spec("fx")], None, options).await;
    let source: Arc<dyn ToolSource> = Arc::new(manager.clone());
    assert!(source.definition("fx__late").is_none());
    let added = call(source.clone(), "fx__add_tool", json!({"fail_lists": 2})).await;
    assert!(added.success, "{}", added.text);
    wait_for(|| async { source.definition("fx__late").is_some() }).await;
    // Still the same connection: the refresh was retried, not the server
    // restarted.
    assert_eq!(manager.status()[0].restarts, 0);
    manager.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_changed_tool_list_is_picked_up() {
    let (manager, source) = start(vec![stdio_spec("fx")]).await;
    assert!(source.definition("fx__late").is_none());
    assert!(
        call(source.clone(), "fx__add_tool", json!({}))
            .await
            .success
    );
    wait_for(|| async { source.definition("fx__late").is_some() }).await;
    let late = call(source.clone(), "fx__late", json!({})).await;
    assert_eq!(late.value, json!({"result": "late tool ran"}));
    manager.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_name_taken_by_a_built_in_tool_is_a_reported_collision() {
    let builtin = Registry::new();
    builtin
        .register(ToolDef::new("fx__echo", "built in"), |_ctx| async {
            Ok(json!("from the built-in"))
        })
        .unwrap();
    let manager = start_mcp_servers(
        vec![stdio_spec("fx")],
        Some(Arc::new(builtin)),
        McpOptions::default(),
    )
    .await;
    let source: Arc<dyn ToolSource> = Arc::new(manager.clone());
    let status = &manager.status()[0];
    assert_eq!(status.collisions.len(), 1);
    assert_eq!(status.collisions[0].name, "fx__echo");
    assert_eq!(status.collisions[0].taken_by, "a built-in tool");
    let echo = call(source.clone(), "fx__echo", json!({"text": "x"})).await;
    assert_eq!(echo.value, json!("from the built-in"));
    let missing = call(source.clone(), "fx__nope", json!({})).await;
    assert_eq!(missing.error.unwrap().reason, ErrorReason::NotFound);
    manager.shutdown().await;
}

/// A built-in tool's own "not found" (a device that is offline) reaches
/// the model as the tool said it, not as "no such tool": only a name no
/// one has is the manager's to answer.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_built_in_tools_own_not_found_is_passed_through() {
    let builtin = Registry::new();
    builtin
        .register(ToolDef::new("device_probe", "built in"), |_ctx| async {
            Err::<serde_json::Value, _>(homeagent_core::ToolError::new(
                ErrorReason::NotFound,
                "device nas is not connected",
            ))
        })
        .unwrap();
    let manager =
        start_mcp_servers(Vec::new(), Some(Arc::new(builtin)), McpOptions::default()).await;
    let source: Arc<dyn ToolSource> = Arc::new(manager.clone());
    let offline = call(source.clone(), "device_probe", json!({})).await;
    let error = offline.error.unwrap();
    assert_eq!(error.reason, ErrorReason::NotFound);
    assert_eq!(error.detail, "device nas is not connected");
    let missing = call(source, "no_such_tool", json!({})).await;
    let error = missing.error.unwrap();
    assert_eq!(error.reason, ErrorReason::NotFound);
    assert_ne!(error.detail, "device nas is not connected");
    manager.shutdown().await;
}

/// A key in an MCP server's URL (its query, or user:password) is as
/// secret as its bearer token: not in the down reason `homeagent tools`
/// prints and the log keeps, not in `Debug`. And a server whose first
/// attempt failed is `down` with its reason as soon as the start returns
/// (the start was told before the status said so, and a status read at
/// once could still say `connecting`: tried a few times, as the window
/// was narrow).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn secrets_in_an_mcp_url_are_not_shown() {
    for _ in 0..200 {
        let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = closed.local_addr().unwrap().port();
        drop(closed);
        let mut spec = McpServerSpec::http(
            "remote",
            format!("http://me:pw-s3cret@127.0.0.1:{port}/mcp?key=q-s3cret"),
        );
        spec.timeout = Duration::from_secs(5);
        let shown = format!("{spec:?}");
        let manager = start_mcp_servers(vec![spec], None, McpOptions::default()).await;
        let status = manager.status();
        let reason = match &status[0].phase {
            ServerPhase::Down { reason } | ServerPhase::GaveUp { reason } => reason.clone(),
            other => panic!("unexpected {other:?}"),
        };
        let text = format!("{shown} {reason} {status:?}");
        assert!(text.contains(&format!("127.0.0.1:{port}/mcp")), "{text}");
        assert!(!text.contains("s3cret"), "{text}");
        manager.shutdown().await;
    }
}

/// Polls `check` until it holds; fails after 60 s (a generous bound on a
/// condition, not a timing assertion).
async fn wait_for<F, Fut>(mut check: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    for _ in 0..600 {
        if check().await {
            return;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("condition not reached within 60 s");
}

#[test]
fn spawning_outside_a_runtime_is_an_error_not_a_panic() {
    let spawned =
        homeagent_mcp::spawn_mcp_servers(vec![stdio_spec("fx")], None, McpOptions::default());
    assert_eq!(spawned.err(), Some(homeagent_mcp::NoRuntime));
}

/// `cwd` starts a stdio server in that directory (its `/proc/<pid>/cwd`
/// says so); a `cwd` that is not a directory is reported as such, not as a
/// missing command.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stdio_server_starts_in_its_cwd_and_a_missing_one_is_named() {
    let dir = std::env::temp_dir()
        .canonicalize()
        .unwrap()
        .join(format!("homeagent-mcp-cwd-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let with_cwd = |cwd_dir: std::path::PathBuf| {
        let mut spec = stdio_spec("fx");
        if let homeagent_mcp::McpTransport::Stdio { cwd, .. } = &mut spec.transport {
            *cwd = Some(cwd_dir);
        }
        spec
    };

    let (manager, _source) = start(vec![with_cwd(dir.clone())]).await;
    let status = manager.status();
    assert_eq!(status[0].phase, ServerPhase::Running, "{status:?}");
    let pid = status[0].pid.unwrap();
    assert_eq!(std::fs::read_link(format!("/proc/{pid}/cwd")).unwrap(), dir);
    manager.shutdown().await;

    let missing = dir.join("missing");
    let (manager, _source) = start(vec![with_cwd(missing.clone())]).await;
    // Between attempts the phase is Down (then Connecting again while the
    // next attempt starts): read it while it is Down.
    let mut reason = None;
    for _ in 0..1500 {
        if let ServerPhase::Down { reason: r } | ServerPhase::GaveUp { reason: r } =
            &manager.status()[0].phase
        {
            reason = Some(r.clone());
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let reason = reason.expect("the server was never down");
    assert!(
        reason.contains(&missing.display().to_string()) && reason.contains("cwd"),
        "{reason}"
    );
    manager.shutdown().await;
    let _ = std::fs::remove_dir_all(&dir);
}

/// A call that reports progress may run past its server's timeout (each
/// notification gives it the timeout again) up to `max_timeout`; one that
/// goes quiet for a whole timeout, or reaches the maximum, is cancelled at
/// the server.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn progress_extends_a_call_up_to_its_max_timeout() {
    let mut spec = stdio_spec("fx");
    // The timeout also bounds `initialize`: 3 s leaves a loaded machine
    // time to start Python, and a first attempt that still misses it is
    // retried (wait_running below).
    spec.timeout = Duration::from_secs(3);
    spec.max_timeout = Some(Duration::from_secs(8));
    let (manager, source) = start(vec![spec]).await;
    assert!(
        manager.wait_running("fx", Duration::from_secs(60)).await,
        "{:?}",
        manager.status()
    );
    let sleep = |ms: u64, every_ms: u64| json!({"ms": ms, "every_ms": every_ms});

    // Past the 3 s timeout, with progress every half second: answered.
    let started = std::time::Instant::now();
    let outcome = call(source.clone(), "fx__progress_sleep", sleep(5000, 500)).await;
    assert!(outcome.success, "{}", outcome.text);
    assert!(started.elapsed() >= Duration::from_millis(5000));

    // Quiet for longer than the timeout: cancelled after it.
    let started = std::time::Instant::now();
    let quiet = call(source.clone(), "fx__progress_sleep", sleep(6000, 6000)).await;
    assert_eq!(quiet.error.unwrap().reason, ErrorReason::Timeout);
    assert!(started.elapsed() >= Duration::from_secs(3));

    // Progress all along, but past the maximum: cancelled at it.
    let started = std::time::Instant::now();
    let endless = call(source.clone(), "fx__progress_sleep", sleep(60_000, 500)).await;
    let error = endless.error.unwrap();
    assert_eq!(error.reason, ErrorReason::Timeout);
    assert!(started.elapsed() >= Duration::from_secs(8), "{error:?}");
    // Stopped by the maximum (8 s), not by the executor's backstop past it.
    assert!(error.detail.contains("within 8s"), "{error:?}");
    wait_for(|| async { stats(source.clone(), "fx").await["cancelled"] == json!(2) }).await;
    manager.shutdown().await;
}

/// A server started through a launcher (`sh -c`, `npx`, `uvx`, `docker
/// run`) runs in its own process group, and the whole group goes when the
/// server does: SIGTERM and SIGKILL reached only the process HomeAgent
/// started, and whatever it had started kept running (holding ports,
/// locks, containers).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn what_a_stdio_server_started_goes_with_it() {
    let dir = std::env::temp_dir().join(format!("mcp-group-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let pid_file = dir.join("straggler.pid");
    let mut spec = stdio_spec("fx");
    if let homeagent_mcp::McpTransport::Stdio { command, args, .. } = &mut spec.transport {
        let script = format!(
            "sleep 300 & echo $! > '{}'; exec '{}' '{}'",
            pid_file.display(),
            python().display(),
            fixture()
        );
        *args = vec!["-c".into(), script];
        *command = "sh".into();
    }
    let (manager, source) = start(vec![spec]).await;
    assert_eq!(manager.status()[0].phase, ServerPhase::Running);
    let echo = call(source, "fx__echo", json!({"text": "hi"})).await;
    assert!(echo.success, "{}", echo.text);
    let straggler: i32 = std::fs::read_to_string(&pid_file)
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    let alive = |pid: i32| {
        // A zombie is gone for every purpose here: it holds nothing.
        std::fs::read_to_string(format!("/proc/{pid}/stat"))
            .is_ok_and(|stat| !stat.contains(") Z "))
    };
    assert!(alive(straggler));
    manager.shutdown().await;
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while alive(straggler) && std::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let left = alive(straggler);
    if left {
        let _ = std::process::Command::new("kill")
            .arg(straggler.to_string())
            .status();
    }
    std::fs::remove_dir_all(&dir).unwrap();
    assert!(!left, "the server's background child outlived it");
}
