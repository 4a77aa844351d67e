#![allow(clippy::unwrap_used, clippy::expect_used)] // a panic in a test is a test failure

//! `homeagent run --json` end to end: the built binary, a config file in a
//! fresh data directory, and the mock LLM server over loopback HTTP. The
//! mock's own count of executed tools is the independent check.

use std::path::PathBuf;
use std::process::{Command, Output};
use std::sync::atomic::{AtomicUsize, Ordering};

use homeagent_mock_llm::{MockServer, ServerConfig};
use serde_json::{Value, json};

struct Setup {
    dir: PathBuf,
    config: PathBuf,
}

impl Drop for Setup {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn setup(sources_toml: &str) -> Setup {
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    let dir = std::env::temp_dir().join(format!(
        "homeagent-run-{}-{}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::SeqCst)
    ));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let config = dir.join("homeagent.toml");
    std::fs::write(&config, format!("{sources_toml}\n[tools]\ndemo = true\n")).unwrap();
    Setup { dir, config }
}

fn openai_source(server: &MockServer) -> String {
    format!(
        "[[llm.sources]]\nname = \"local\"\nprotocol = \"openai\"\nbase_url = \"{}/v1\"\nmodel = \"mock\"\n",
        server.url()
    )
}

fn run(setup: &Setup, args: &[&str]) -> (Output, Vec<Value>) {
    let output = Command::new(env!("CARGO_BIN_EXE_homeagent"))
        .arg("--config")
        .arg(&setup.config)
        .arg("--data-dir")
        .arg(&setup.dir)
        .arg("run")
        .args(args)
        .env_remove("OPENAI_API_KEY")
        .env_remove("HOMEAGENT_CONFIG")
        .output()
        .unwrap();
    let stdout = String::from_utf8(output.stdout.clone()).unwrap();
    if !args.contains(&"--json") {
        return (output, Vec::new());
    }
    let frames = stdout
        .lines()
        .map(|line| {
            serde_json::from_str::<Value>(line)
                .unwrap_or_else(|e| panic!("not a JSON line ({e}): {line}"))
        })
        .collect();
    (output, frames)
}

fn of_type<'a>(frames: &'a [Value], kind: &str) -> Vec<&'a Value> {
    frames.iter().filter(|f| f["type"] == kind).collect()
}

fn phase<'a>(frames: &'a [Value], phase: &str) -> Vec<&'a Value> {
    of_type(frames, "tool_call")
        .into_iter()
        .filter(|f| f["phase"] == phase)
        .collect()
}

async fn stats(server: &MockServer) -> Value {
    homeagent_llm::transport::install_crypto_provider();
    let body = reqwest::get(format!("{}/stats", server.url()))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    serde_json::from_str(&body).unwrap()
}

async fn run_async(setup: &Setup, args: &[&str]) -> (Output, Vec<Value>) {
    let args: Vec<String> = args.iter().map(|s| (*s).to_owned()).collect();
    let setup = Setup {
        dir: setup.dir.clone(),
        config: setup.config.clone(),
    };
    tokio::task::spawn_blocking(move || {
        let refs: Vec<&str> = args.iter().map(String::as_str).collect();
        let result = run(&setup, &refs);
        std::mem::forget(setup); // the caller's Setup cleans up
        result
    })
    .await
    .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_parallel_batch_of_eight_runs_in_one_parallel_batch_and_all_execute() {
    let server = MockServer::start("127.0.0.1:0", ServerConfig::default())
        .await
        .unwrap();
    let setup = setup(&openai_source(&server));
    let (output, frames) = run_async(&setup, &["--json", "!slowbatch8"]).await;
    assert!(output.status.success(), "{output:?}");
    let starts = phase(&frames, "start");
    let ends = phase(&frames, "end");
    assert_eq!(starts.len(), 8, "{frames:#?}");
    assert_eq!(ends.len(), 8);
    let batch = &starts[0]["batch_id"];
    for start in &starts {
        assert_eq!(start["tool"], "demo_sleep");
        assert_eq!(start["parallel"], true);
        assert_eq!(start["batch_size"], 8);
        assert_eq!(&start["batch_id"], batch);
        assert!(start["args"].is_object());
    }
    for end in &ends {
        assert_eq!(end["success"], true, "{end}");
        assert_eq!(end["status"], "ok");
        assert!(end["duration_ms"].is_u64());
    }
    let last = frames.last().unwrap();
    assert_eq!(last["type"], "response");
    assert_eq!(last["turns"], 2);
    assert!(last["usage"]["total_tokens"].is_u64());
    // The mock counted the tags of its batch in the results: all 8 ran.
    let content = last["content"].as_str().unwrap();
    assert!(content.contains("executed=8"), "{content}");
    assert_eq!(stats(&server).await["last_executed"], 8);
    // Text streamed as content deltas adds up to the reply's content.
    let streamed: String = of_type(&frames, "content_delta")
        .iter()
        .map(|f| f["text"].as_str().unwrap())
        .collect();
    assert!(streamed.ends_with(content), "{streamed:?} / {content:?}");
    server.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_serial_batch_says_so_and_a_cut_call_never_runs() {
    let server = MockServer::start("127.0.0.1:0", ServerConfig::default())
        .await
        .unwrap();
    let setup = setup(&openai_source(&server));
    let (output, frames) = run_async(&setup, &["--json", "!serialbatch8"]).await;
    assert!(output.status.success(), "{output:?}");
    let starts = phase(&frames, "start");
    assert_eq!(starts.len(), 9);
    assert!(starts.iter().all(|s| s["parallel"] == false));
    assert_eq!(
        starts.iter().filter(|s| s["tool"] == "demo_note").count(),
        1
    );
    assert!(
        frames.last().unwrap()["content"]
            .as_str()
            .unwrap()
            .contains("executed=8")
    );

    let (output, frames) = run_async(&setup, &["--json", "!truncate"]).await;
    assert!(output.status.success(), "{output:?}");
    let ends = phase(&frames, "end");
    assert_eq!(ends.len(), 1, "{frames:#?}");
    assert_eq!(ends[0]["success"], false);
    assert_eq!(ends[0]["error"]["reason"], "truncated");
    assert_eq!(frames.last().unwrap()["type"], "response");
    assert_eq!(stats(&server).await["last_executed"], 0);
    server.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failing_source_ends_with_an_error_frame_and_a_non_zero_exit() {
    let server = MockServer::start("127.0.0.1:0", ServerConfig::default())
        .await
        .unwrap();
    let setup = setup(&openai_source(&server));
    let (output, frames) = run_async(&setup, &["--json", "!err"]).await;
    assert!(!output.status.success());
    let last = frames.last().unwrap();
    assert_eq!(last["type"], "error", "{frames:#?}");
    assert_eq!(last["code"], "model");
    let message = last["message"].as_str().unwrap();
    assert!(
        message.contains("500") && message.contains("local"),
        "{message}"
    );

    // The same input with a second source behind it falls back.
    let backup = MockServer::start("127.0.0.1:0", ServerConfig::default())
        .await
        .unwrap();
    let both = format!(
        "{}priority = 10\n[[llm.sources]]\nname = \"backup\"\nprotocol = \"anthropic\"\nbase_url = \"{}\"\nmodel = \"mock\"\n",
        openai_source(&server),
        backup.url()
    );
    // `!err` fails at every mock, so fall back on a plain text input instead
    // from a source that is down.
    let down = both.replace(&server.url(), "http://127.0.0.1:9");
    let setup2 = self::setup(&down);
    let (output, frames) = run_async(&setup2, &["--json", "!text"]).await;
    assert!(output.status.success(), "{output:?} {frames:#?}");
    assert_eq!(frames.last().unwrap()["type"], "response");
    server.shutdown().await.unwrap();
    backup.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_empty_input_is_skipped_and_the_demo_model_answers_without_config() {
    let server = MockServer::start("127.0.0.1:0", ServerConfig::default())
        .await
        .unwrap();
    let setup = setup(&openai_source(&server));
    let (output, frames) = run_async(&setup, &["--json", "   "]).await;
    assert!(!output.status.success());
    assert_eq!(
        frames,
        [json!({"type": "skipped", "reason": "empty_input"})]
    );

    // No sources at all: the offline demo model answers, and stderr says
    // how to connect a real one.
    let bare = self::setup("");
    let (output, _) = run_async(&bare, &["!slowbatch4"]).await;
    assert!(output.status.success(), "{output:?}");
    let stdout = String::from_utf8(output.stdout.clone()).unwrap();
    let stderr = String::from_utf8(output.stderr.clone()).unwrap();
    assert!(stdout.contains("parallel batch of 4"), "{stdout}");
    assert!(stdout.contains("executed=4"), "{stdout}");
    assert!(
        stderr.contains("offline demo model") && stderr.contains("OPENAI_API_KEY"),
        "{stderr}"
    );
    let (output, frames) = run_async(&bare, &["--json", "!slowbatch4"]).await;
    assert!(output.status.success());
    assert_eq!(phase(&frames, "start").len(), 4);
    // A program reading the JSON is told too, on stderr, which the JSON
    // lines never share: scripted demo answers must not pass for a model's.
    let stderr = String::from_utf8(output.stderr.clone()).unwrap();
    assert!(stderr.contains("offline demo model"), "{stderr}");
    assert!(
        frames.last().unwrap()["content"]
            .as_str()
            .unwrap()
            .contains("executed=4")
    );
    server.shutdown().await.unwrap();
}

/// Every file under `dir`, as bytes (the store, its WAL, anything else).
fn all_bytes(dir: &std::path::Path) -> Vec<u8> {
    let mut bytes = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(path) = stack.pop() {
        if path.is_dir() {
            for entry in std::fs::read_dir(&path).unwrap() {
                stack.push(entry.unwrap().path());
            }
        } else if path.extension().is_some_and(|e| e == "toml") {
            // The config file holds the server key by design.
        } else if let Ok(content) = std::fs::read(&path) {
            bytes.extend(content);
        }
    }
    bytes
}

fn contains(haystack: &[u8], needle: &str) -> bool {
    haystack
        .windows(needle.len())
        .any(|window| window == needle.as_bytes())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn secrets_reach_no_output_no_store_and_no_child_environment() {
    const PROVIDER_KEY: &str = "sk-planted-provider-key-4f1c";
    const SERVER_KEY: &str = "srv-planted-server-key-9b7e";
    let server = MockServer::start("127.0.0.1:0", ServerConfig::default())
        .await
        .unwrap();
    let config = format!(
        "{}api_key_env = \"OPENAI_API_KEY\"\n[server]\napi_key = \"{SERVER_KEY}\"\n",
        openai_source(&server)
    );
    let setup = setup(&config);
    let calls = r#"!calls [{"name":"cmd_run","arguments":{"command":"cat /proc/self/environ"}}]"#;
    let output = Command::new(env!("CARGO_BIN_EXE_homeagent"))
        .arg("--config")
        .arg(&setup.config)
        .arg("--data-dir")
        .arg(&setup.dir)
        .args(["run", "--json", "--session", "sec", calls])
        .env("OPENAI_API_KEY", PROVIDER_KEY)
        .env("HOMEAGENT_API_KEY", SERVER_KEY)
        .env("RUST_LOG", "trace")
        .output()
        .unwrap();
    assert!(output.status.success(), "{output:?}");
    // RUST_LOG=trace really produced log lines to search.
    assert!(
        String::from_utf8_lossy(&output.stderr).contains("store opened"),
        "{output:?}"
    );
    let stdout = String::from_utf8(output.stdout.clone()).unwrap();
    // The child really ran and printed its environment (into the store).
    let store = homeagent_agent::store::Store::open(&setup.dir.join("homeagent.db")).unwrap();
    let environ: Vec<String> = store
        .history("sec")
        .unwrap()
        .into_iter()
        .filter_map(|m| match m {
            homeagent_core::Message::Tool(t) => Some(t.content),
            _ => None,
        })
        .collect();
    assert_eq!(environ.len(), 1);
    assert!(environ[0].contains("PATH="), "{environ:?}");
    drop(store);
    for secret in [PROVIDER_KEY, SERVER_KEY] {
        assert!(!stdout.contains(secret), "stdout leaks {secret}");
        assert!(!contains(&output.stderr, secret), "stderr leaks {secret}");
        assert!(
            !contains(&all_bytes(&setup.dir), secret),
            "the data directory holds {secret}"
        );
    }
    // The source was used (its key variable was set, so it was enabled).
    assert_eq!(stats(&server).await["requests"], 2);
    server.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kill_9_mid_turn_loses_no_committed_message_and_the_session_stays_paired() {
    let setup = setup("");
    let calls = r#"!calls [{"name":"demo_sleep","arguments":{"ms":30000,"tag":"a"}},{"name":"demo_sleep","arguments":{"ms":30000,"tag":"b"}}]"#;
    let mut child = Command::new(env!("CARGO_BIN_EXE_homeagent"))
        .arg("--config")
        .arg(&setup.config)
        .arg("--data-dir")
        .arg(&setup.dir)
        .args(["run", "--json", "--session", "crashy", calls])
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // Wait until both calls have started and their assistant message is
    // committed (`demo_sleep` changes nothing, so its calls are held for a
    // moment instead of being committed before they run); their results
    // are not.
    let stdout = child.stdout.take().unwrap();
    let started = tokio::task::spawn_blocking(move || {
        use std::io::BufRead;
        let mut starts = 0;
        for line in std::io::BufReader::new(stdout).lines() {
            let line = line.unwrap();
            if line.contains("\"phase\":\"start\"") {
                starts += 1;
                if starts == 2 {
                    return true;
                }
            }
        }
        false
    })
    .await
    .unwrap();
    assert!(started);
    let db = setup.dir.join("homeagent.db");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(25);
    loop {
        let store = homeagent_agent::store::Store::open(&db).unwrap();
        if store
            .history("crashy")
            .is_ok_and(|history| history.len() == 2)
        {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the calls were never stored"
        );
        tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    }
    child.kill().unwrap(); // SIGKILL
    child.wait().unwrap();

    // Committed: the user message and the assistant message with both
    // calls; their results never came.
    {
        let store = homeagent_agent::store::Store::open(&setup.dir.join("homeagent.db")).unwrap();
        let history = store.history("crashy").unwrap();
        assert_eq!(history.len(), 2, "{history:#?}");
        assert_eq!(history[0], homeagent_core::Message::user(calls));
        let homeagent_core::Message::Assistant(assistant) = &history[1] else {
            panic!("not an assistant message: {history:#?}");
        };
        let names: Vec<&str> = assistant
            .tool_calls
            .iter()
            .map(|c| c.name.as_str())
            .collect();
        assert_eq!(names, ["demo_sleep", "demo_sleep"]);
    }
    // The session continues: loading it answers both calls `cancelled`, and
    // the next input runs on a paired history.
    let (output, frames) =
        run_async(&setup, &["--json", "--session", "crashy", "!text again"]).await;
    assert!(output.status.success(), "{frames:#?}");
    let store = homeagent_agent::store::Store::open(&setup.dir.join("homeagent.db")).unwrap();
    let history = store.history("crashy").unwrap();
    homeagent_core::check_pairing(&history).unwrap();
    let results: Vec<&homeagent_core::ToolMessage> = history
        .iter()
        .filter_map(|m| match m {
            homeagent_core::Message::Tool(t) => Some(t),
            _ => None,
        })
        .collect();
    assert_eq!(results.len(), 2);
    assert!(
        results
            .iter()
            .all(|t| !t.success && t.content.contains("cancelled")),
        "{results:#?}"
    );
    // user, assistant + 2 cancelled results, user, assistant.
    assert_eq!(history.len(), 6, "{history:#?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_model_creates_a_sequence_and_runs_it_and_its_tools_execute() {
    let setup = setup("");
    let create = r#"!calls [{"name":"seq_create","arguments":{"name":"greet","description":"two echoes then a note","groups":[{"name":"echoes","description":"both at once","in":{"who":"string"},"out":{"said":"array<object>"},"tools":"{\"tool\":\"demo_echo\",\"args\":{\"to\":\"$args.who\",\"n\":1},\"as\":\"said\"} ; {\"tool\":\"demo_echo\",\"args\":{\"to\":\"$args.who\",\"n\":2},\"as\":\"said\"} ;"}]}}]"#;
    let (output, frames) = run_async(&setup, &["--json", "--session", "seq", create]).await;
    assert!(output.status.success(), "{frames:#?}");
    let ends = phase(&frames, "end");
    assert_eq!(ends.len(), 1);
    assert_eq!(ends[0]["tool"], "seq_create");
    assert_eq!(ends[0]["success"], true, "{frames:#?}");
    // The file is stored as the parsed tree.
    assert!(setup.dir.join("sequences/greet.json").is_file());

    let run = r#"!calls [{"name":"seq_run","arguments":{"name":"greet","args":{"who":"ada"}}}]"#;
    let (output, frames) = run_async(&setup, &["--json", "--session", "seq", run]).await;
    assert!(output.status.success(), "{frames:#?}");
    let ends = phase(&frames, "end");
    assert_eq!(ends[0]["tool"], "seq_run");
    assert_eq!(ends[0]["success"], true, "{frames:#?}");
    // The echoes really ran: their results are in the run's slots, in
    // declaration order.
    let store = homeagent_agent::store::Store::open(&setup.dir.join("homeagent.db")).unwrap();
    let result = store
        .history("seq")
        .unwrap()
        .into_iter()
        .filter_map(|m| match m {
            homeagent_core::Message::Tool(t) if t.name == "seq_run" => Some(t.content),
            _ => None,
        })
        .next_back()
        .unwrap();
    let first = result
        .find(r#""n":1"#)
        .unwrap_or_else(|| panic!("{result}"));
    let second = result
        .find(r#""n":2"#)
        .unwrap_or_else(|| panic!("{result}"));
    assert!(first < second, "{result}");
    assert!(result.contains("ada"), "{result}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unknown_agent_is_an_error_naming_it() {
    let setup = setup("");
    let (output, frames) = run_async(&setup, &["--json", "--agent", "ghost", "!text"]).await;
    assert!(!output.status.success());
    assert_eq!(frames.len(), 1, "{frames:#?}");
    assert_eq!(frames[0]["type"], "error");
    assert_eq!(frames[0]["code"], "agent");
    assert!(
        frames[0]["message"].as_str().unwrap().contains("ghost"),
        "{frames:#?}"
    );
}

/// The virtualenv's python with the MCP SDK (scripts/sdk-check makes it).
fn sdk_python() -> PathBuf {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..");
    let venv = std::env::var_os("HOMEAGENT_SDK_VENV")
        .map(PathBuf::from)
        .unwrap_or_else(|| root.join(".venv-sdk"));
    let python = venv.join("bin/python");
    assert!(
        python.exists(),
        "{} is missing: run scripts/sdk-check, which makes the virtualenv",
        python.display()
    );
    python
}

/// `[[mcp.servers]]` for the SDK fixture server as `fx`, with `extra` lines.
fn fixture_mcp(extra: &str) -> String {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..");
    format!(
        "[[mcp.servers]]\nname = \"fx\"\ncommand = \"{}\"\nargs = [\"{}\"]\n{extra}",
        sdk_python().display(),
        root.join("tests/mcp/fixture_server.py").display()
    )
}

/// A one-shot run waits for its MCP servers to start (each bounded by its
/// own timeout) before the first model request: a server that takes a
/// second to start used to be missing from that request, and a call to its
/// tool was an unknown tool.
#[test]
fn a_run_sees_the_tools_of_its_mcp_servers_from_the_first_turn() {
    let setup = setup(&fixture_mcp(""));
    let (output, frames) = run(
        &setup,
        &[
            "--json",
            r#"!calls [{"name": "fx__echo", "arguments": {"text": "first turn"}}]"#,
        ],
    );
    assert!(output.status.success(), "{output:?}");
    let ends = phase(&frames, "end");
    assert_eq!(ends.len(), 1, "{frames:#?}");
    assert_eq!(ends[0]["tool"], "fx__echo");
    assert_eq!(ends[0]["status"], "ok", "{frames:#?}");
}

/// A relative `command` is taken from the config file's directory (as
/// `cwd` and every other path in the config are), not from wherever
/// homeagent was started; `cwd` is where the server then runs.
#[test]
fn a_relative_mcp_command_is_found_beside_the_config() {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..");
    let setup = setup("");
    let launcher = setup.dir.join("bin/fx.sh");
    std::fs::create_dir_all(setup.dir.join("bin")).unwrap();
    std::fs::create_dir_all(setup.dir.join("work")).unwrap();
    std::fs::write(
        &launcher,
        format!(
            "#!/bin/sh\nexec \"{}\" \"{}\"\n",
            sdk_python().display(),
            root.join("tests/mcp/fixture_server.py").display()
        ),
    )
    .unwrap();
    std::fs::set_permissions(
        &launcher,
        std::os::unix::fs::PermissionsExt::from_mode(0o755),
    )
    .unwrap();
    let config = std::fs::read_to_string(&setup.config).unwrap();
    std::fs::write(
        &setup.config,
        format!(
            "{config}[[mcp.servers]]\nname = \"fx\"\ncommand = \"bin/fx.sh\"\ncwd = \"work\"\n"
        ),
    )
    .unwrap();
    // The test runs homeagent from the crate's directory, not the config's.
    let (output, frames) = run(
        &setup,
        &[
            "--json",
            r#"!calls [{"name": "fx__echo", "arguments": {"text": "found"}}]"#,
        ],
    );
    assert!(output.status.success(), "{output:?}");
    assert_eq!(phase(&frames, "end")[0]["status"], "ok", "{frames:#?}");
}

/// A run that ends closes its MCP servers the way the protocol says
/// (stdin closed, time to exit, then SIGTERM, then a kill) instead of
/// killing them: a server that saves its state on exit gets to.
#[test]
fn a_run_that_ends_closes_its_mcp_servers_gracefully() {
    // (exit delay after stdin closes, what the server then records)
    for (delay_ms, expected) in [(0, "stdin closed"), (6000, "SIGTERM")] {
        let marker = std::env::temp_dir().join(format!(
            "homeagent-mcp-exit-{}-{delay_ms}-{:?}",
            std::process::id(),
            std::time::SystemTime::now()
        ));
        let setup = setup(&fixture_mcp(&format!(
            "env = {{ FIXTURE_EXIT_MARKER = \"{}\", FIXTURE_EXIT_DELAY_MS = \"{delay_ms}\" }}\n",
            marker.display()
        )));
        let (output, frames) = run(
            &setup,
            &[
                "--json",
                r#"!calls [{"name": "fx__echo", "arguments": {"text": "then exit"}}]"#,
            ],
        );
        assert!(output.status.success(), "{output:?}");
        assert_eq!(phase(&frames, "end")[0]["status"], "ok", "{frames:#?}");
        let written = std::fs::read_to_string(&marker);
        let _ = std::fs::remove_file(&marker);
        assert_eq!(
            written.ok().as_deref(),
            Some(expected),
            "a server taking {delay_ms} ms to exit was not closed gracefully"
        );
    }
}

/// `[runtime] blocking_threads` bounds the threads the program runs: a
/// batch of 32 file listings (each a few blocking file-system calls) runs
/// on at most that many blocking threads, beside the main thread and the
/// one async worker. Without the bound tokio starts a thread per waiting
/// call (35 threads here).
#[cfg(target_os = "linux")]
#[test]
fn blocking_work_runs_on_at_most_the_configured_threads() {
    use std::io::BufRead;

    let setup = setup("[runtime]\nblocking_threads = 2\n");
    let files = setup.dir.join("files");
    std::fs::create_dir_all(&files).unwrap();
    for i in 0..50 {
        std::fs::write(files.join(format!("f{i}")), "x").unwrap();
    }
    let mut calls: Vec<Value> = (0..32)
        .map(|_| json!({"name": "files_list", "arguments": {"path": "."}}))
        .collect();
    // Keeps the process alive, its batch running, while the threads are counted.
    calls.push(json!({"name": "demo_sleep", "arguments": {"ms": 3000, "tag": "t"}}));
    let mut child = Command::new(env!("CARGO_BIN_EXE_homeagent"))
        .arg("--config")
        .arg(&setup.config)
        .arg("--data-dir")
        .arg(&setup.dir)
        .args(["run", "--json", &format!("!calls {}", Value::from(calls))])
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let stdout = child.stdout.take().unwrap();
    let mut lines = std::io::BufReader::new(stdout).lines();
    let mut listed = 0;
    while listed < 32 {
        let line = lines
            .next()
            .expect("the run ended before its listings")
            .unwrap();
        let frame: Value = serde_json::from_str(&line).unwrap();
        if frame["phase"] == "end" && frame["tool"] == "files_list" {
            assert_eq!(frame["success"], true, "{frame}");
            listed += 1;
        }
    }
    let threads = std::fs::read_dir(format!("/proc/{}/task", child.id()))
        .unwrap()
        .count();
    child.kill().unwrap();
    child.wait().unwrap();
    // The main thread, one async worker, two blocking threads.
    assert!(threads <= 4, "{threads} threads");
}

/// `get_tools` is what the not-found hint sends the model to: it lists the
/// MCP servers' tools beside the built-in ones.
#[test]
fn get_tools_lists_the_mcp_servers_tools() {
    let setup = setup(&fixture_mcp(""));
    let (output, _) = run(
        &setup,
        &[
            "--json",
            "--session",
            "tools",
            r#"!calls [{"name": "get_tools", "arguments": {"filter": "echo"}}]"#,
        ],
    );
    assert!(output.status.success(), "{output:?}");
    let store = homeagent_agent::store::Store::open(&setup.dir.join("homeagent.db")).unwrap();
    let listed: Vec<Value> = store
        .history("tools")
        .unwrap()
        .into_iter()
        .filter_map(|m| match m {
            homeagent_core::Message::Tool(t) => serde_json::from_str(&t.content).ok(),
            _ => None,
        })
        .collect();
    assert_eq!(listed.len(), 1, "one get_tools result");
    let names: Vec<&str> = listed[0]["tools"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|t| t["name"].as_str())
        .collect();
    assert!(names.contains(&"fx__echo"), "{names:?}");
    assert!(names.contains(&"demo_echo"), "{names:?}");
}

/// An answer the output token limit cut off is followed by a note saying
/// so and naming the setting; `--json` carries it on the response frame.
#[test]
fn an_answer_cut_off_by_the_token_limit_says_so() {
    let setup = setup("[agent]\nmax_tokens = 300\n");
    let (output, _) = run(&setup, &["!cut"]);
    assert!(output.status.success(), "{output:?}");
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        stdout.contains("in the middle of a\n[the answer was cut off"),
        "{stdout}"
    );
    assert!(stdout.contains("agent.max_tokens = 300"), "{stdout}");

    let (_, frames) = run(&setup, &["--json", "!cut"]);
    let response = frames.last().unwrap();
    assert_eq!(response["type"], "response");
    let incomplete = &response["incomplete"];
    assert_eq!(
        (&incomplete["reason"], &incomplete["max_tokens"]),
        (&json!("length"), &json!(300))
    );
    // The note the person reads travels with it, for every other client.
    let note = incomplete["note"].as_str().unwrap();
    assert!(
        note.starts_with("[the answer was cut off") && note.contains("agent.max_tokens = 300"),
        "{note}"
    );
    // A finished answer has no such field.
    let (_, frames) = run(&setup, &["--json", "!text"]);
    assert_eq!(frames.last().unwrap().get("incomplete"), None);
}

/// An input stopped at `agent.max_tool_turns` says so after whatever the
/// model said, on the console and on the `--json` response frame.
#[test]
fn an_input_stopped_after_its_tool_turns_says_so() {
    let setup = setup("[agent]\nmax_tool_turns = 1\n");
    let (output, _) = run(&setup, &["!batch2"]);
    assert!(output.status.success(), "{output:?}");
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        stdout.contains("[stopped after 1 tool turn") && stdout.contains("agent.max_tool_turns"),
        "{stdout}"
    );
    let (_, frames) = run(&setup, &["--json", "!batch2"]);
    let response = frames.last().unwrap();
    assert_eq!(response["type"], "response");
    assert_eq!(response["incomplete"]["reason"], "tool_turns", "{response}");
    assert_eq!(response["incomplete"]["max_tool_turns"], 1, "{response}");
}

/// The config file may hold the server's key, and the data directory the
/// store of every session: `cmd_run` refuses to read either (the agent's
/// own /proc entries are closed by the kernel, since the process is not
/// dumpable).
#[test]
fn cmd_run_cannot_read_the_config_file_or_the_agents_environment() {
    let setup = setup("[server]\napi_key = \"srv-planted-key-in-the-config\"\n");
    let config = setup.config.display().to_string();
    // The store holds every session; read before this run made it.
    let (first, _) = run(&setup, &["--json", "!text"]);
    assert!(first.status.success(), "{first:?}");
    let store = setup.dir.join("homeagent.db");
    assert!(store.is_file());
    let store = store.display();
    let calls = format!(
        r#"!calls [{{"name": "cmd_run", "arguments": {{"command": "cat {config}"}}}}, {{"name": "cmd_run", "arguments": {{"command": "grep -a PATH /proc/self/environ"}}}}, {{"name": "cmd_run", "arguments": {{"command": "cat {store}"}}}}]"#
    );
    let (output, frames) = run(&setup, &["--json", &calls]);
    assert!(output.status.success(), "{output:?}");
    let ends = phase(&frames, "end");
    assert_eq!(ends.len(), 3, "{frames:#?}");
    // The calls run side by side: their ends come in any order.
    let status_of = |command: &str| {
        let starts = phase(&frames, "start");
        let id = starts
            .iter()
            .find(|s| s["args"]["command"] == command)
            .unwrap_or_else(|| panic!("{command}: {frames:#?}"))["call_id"]
            .clone();
        let end = ends.iter().find(|e| e["call_id"] == id).unwrap();
        (
            end["status"].as_str().unwrap().to_owned(),
            end["error"]["detail"]
                .as_str()
                .unwrap_or_default()
                .to_owned(),
        )
    };
    for private in [format!("cat {config}"), format!("cat {store}")] {
        let (status, detail) = status_of(&private);
        assert_eq!(status, "denied", "{private}: {detail}");
        assert!(
            detail.contains("private to HomeAgent"),
            "{private}: {detail}"
        );
    }
    assert_eq!(
        status_of("grep -a PATH /proc/self/environ").0,
        "ok",
        "the child's own environment may be read"
    );
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(!stdout.contains("srv-planted-key-in-the-config"));
}

/// `homeagent seq create --file F` in `setup`'s data directory.
fn seq_create(setup: &Setup, source: &Value) -> Output {
    let file = setup.dir.join("source.json");
    std::fs::write(&file, source.to_string()).unwrap();
    Command::new(env!("CARGO_BIN_EXE_homeagent"))
        .arg("--config")
        .arg(&setup.config)
        .arg("--data-dir")
        .arg(&setup.dir)
        .args(["seq", "create", "--file"])
        .arg(&file)
        .env_remove("HOMEAGENT_CONFIG")
        .output()
        .unwrap()
}

/// `seq create` checks a sequence against the tools of the MCP servers too,
/// as `seq run` and the model's `seq_create` do: it used to start none, so
/// every MCP tool was "not registered right now" and a parallel group
/// holding one that must not overlap (`fx__write_slow` has no
/// `readOnlyHint`) was stored, to be serialized only at run time.
#[test]
fn seq_create_checks_the_tools_of_the_mcp_servers() {
    let setup = setup(&fixture_mcp(""));
    let known = json!({"name": "s", "description": "an MCP echo", "groups": [
        {"name": "a", "out": {"r": "object"},
         "tools": "{\"tool\":\"fx__echo\",\"args\":{\"text\":\"hi\"},\"as\":\"r\"} ;"}
    ]});
    let output = seq_create(&setup, &known);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{output:?}");
    assert!(!stderr.contains("not registered"), "{stderr}");
    assert!(setup.dir.join("sequences/s.json").is_file());

    let overlapping = json!({"name": "w", "description": "two writes at once", "groups": [
        {"name": "writes",
         "tools": "{\"tool\":\"fx__write_slow\",\"args\":{\"ms\":1}} ; {\"tool\":\"fx__write_slow\",\"args\":{\"ms\":1}} ;"}
    ]});
    let output = seq_create(&setup, &overlapping);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(!output.status.success(), "{output:?}");
    assert!(
        stderr.contains("group \"writes\" is parallel (the default) but tool `fx__write_slow` is not parallel-safe"),
        "{stderr}"
    );
    assert!(!setup.dir.join("sequences/w.json").exists());
}

/// `homeagent tools` says how each MCP server is doing: a server that did
/// not start (or whose tools were not exposed) used to be visible only in
/// logs nobody reads, its tools simply missing from the table.
#[test]
fn the_tool_list_reports_every_mcp_servers_state() {
    // `parallel_safe` and `serial` name the server's own tools, known only
    // once it runs: a name it does not list is reported then.
    let setup = setup(&format!(
        "{}\n[[mcp.servers]]\nname = \"gone\"\ncommand = \"/nonexistent/mcp-server\"\n",
        fixture_mcp("parallel_safe = [\"echo\", \"ecko\"]\nserial = [\"write_slo\"]\n")
    ));
    for json in [false, true] {
        let mut command = Command::new(env!("CARGO_BIN_EXE_homeagent"));
        command
            .arg("--config")
            .arg(&setup.config)
            .arg("--data-dir")
            .arg(&setup.dir)
            .arg("tools")
            .env_remove("HOMEAGENT_CONFIG");
        if json {
            command.arg("--json");
        }
        let output = command.output().unwrap();
        assert!(output.status.success(), "{output:?}");
        let stdout = String::from_utf8_lossy(&output.stdout);
        let stderr = String::from_utf8_lossy(&output.stderr);
        // The table (or the JSON array, which stays valid) on stdout; the
        // servers' states where a person sees them.
        let report = if json {
            serde_json::from_str::<Vec<Value>>(&stdout).unwrap();
            stderr.to_string()
        } else {
            stdout.to_string()
        };
        assert!(
            report.contains("MCP server fx: running, 13 tools"),
            "{report}"
        );
        assert!(report.contains("MCP server gone: down ("), "{report}");
        assert!(report.contains("/nonexistent/mcp-server"), "{report}");
        assert!(
            report.contains("  parallel_safe names `ecko`, which it does not list"),
            "{report}"
        );
        assert!(
            report.contains("  serial names `write_slo`, which it does not list"),
            "{report}"
        );
        assert!(!report.contains("`echo`, which"), "{report}");
    }
}

/// A config that lists `homeagent mcp-serve` with itself as one of its own
/// MCP servers: each copy would start another before serving, without
/// end (every one a process, each in its own group). The copies count how
/// deep they are, and the third starts no MCP server: the chain ends, the
/// top sees the server's tools.
#[test]
fn a_config_that_serves_itself_over_mcp_does_not_start_copies_without_end() {
    let dir = std::env::temp_dir().join(format!("homeagent-self-mcp-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let config = dir.join("homeagent.toml");
    std::fs::write(
        &config,
        format!(
            "[tools]\ndemo = true\n[[mcp.servers]]\nname = \"self\"\ncommand = \"{}\"\n\
             args = [\"--config\", \"{}\", \"--data-dir\", \"{}\", \"mcp-serve\"]\ntimeout = \"60s\"\n",
            env!("CARGO_BIN_EXE_homeagent"),
            config.display(),
            dir.display()
        ),
    )
    .unwrap();
    let output = Command::new(env!("CARGO_BIN_EXE_homeagent"))
        .arg("--config")
        .arg(&config)
        .arg("--data-dir")
        .arg(&dir)
        .arg("tools")
        .env_remove("HOMEAGENT_CONFIG")
        .env_remove("HOMEAGENT_MCP_NESTING")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(output.status.success(), "{output:?}");
    assert!(stdout.contains("self__demo_echo"), "{stdout}");
    assert!(stdout.contains("MCP server self: running"), "{stdout}");
    // Nothing of the chain is left running. A copy stopped by a signal
    // after a slow shutdown leaves the next one its stdin's end of file,
    // so the chain may take a moment to go: waited for, up to 60 s.
    let pattern = format!("--data-dir {} mcp-serve", dir.display());
    let mut left = Vec::new();
    for _ in 0..600 {
        left = Command::new("pgrep")
            .args(["-f", &pattern])
            .output()
            .unwrap()
            .stdout;
        if left.is_empty() {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    let _ = std::fs::remove_dir_all(&dir);
    assert!(left.is_empty(), "{}", String::from_utf8_lossy(&left));
}

/// Batch ids stay unique within a session across processes: each process
/// counted its batches from 1, so a session continued after a restart
/// reused its earlier batches' ids, and the dashboard drew a serial batch
/// into an earlier parallel one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn batch_ids_differ_across_processes_on_one_session() {
    let setup = setup("");
    let mut ids = Vec::new();
    for input in ["!slowbatch2", "!serialbatch1"] {
        let (output, frames) = run_async(&setup, &["--session", "dup1", "--json", input]).await;
        assert!(output.status.success(), "{output:?}");
        let starts = phase(&frames, "start");
        assert!(!starts.is_empty(), "{frames:?}");
        let batch: Vec<String> = starts
            .iter()
            .map(|f| f["batch_id"].as_str().unwrap().to_owned())
            .collect();
        ids.push(batch);
    }
    assert!(
        ids[0].iter().all(|id| !ids[1].contains(id)),
        "the second process reused a batch id: {ids:?}"
    );
}

/// `POST /api/v1/sequences` checks a sequence against the tools a run
/// reaches, MCP servers' included, as `homeagent seq create` does: it
/// checked the built-in registry only, so every MCP tool was "not
/// registered right now".
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_sequences_api_checks_against_the_mcp_tools_too() {
    use std::io::BufRead;
    let setup = setup(&fixture_mcp(""));
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_homeagent"))
        .arg("--config")
        .arg(&setup.config)
        .arg("--data-dir")
        .arg(&setup.dir)
        .args(["serve", "--listen", "127.0.0.1:0"])
        .env_remove("OPENAI_API_KEY")
        .env_remove("HOMEAGENT_CONFIG")
        .env_remove("HOMEAGENT_API_KEY")
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    struct Kill(std::process::Child);
    impl Drop for Kill {
        fn drop(&mut self) {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
    let mut line = String::new();
    std::io::BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let _serve = Kill(child);
    let url = line
        .trim()
        .strip_prefix("HomeAgent listening on ")
        .unwrap_or_else(|| panic!("unexpected first line: {line:?}"))
        .to_owned();
    homeagent_llm::transport::install_crypto_provider();
    let client = reqwest::Client::new();
    // The MCP server starts beside the HTTP front: wait for its tool.
    let mut listed = String::new();
    for _ in 0..200 {
        listed = client
            .get(format!("{url}/api/v1/tools"))
            .send()
            .await
            .unwrap()
            .text()
            .await
            .unwrap();
        if listed.contains("fx__echo") {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    assert!(listed.contains("fx__echo"), "{listed}");
    let listed: Value = serde_json::from_str(&listed).unwrap();
    let echo = listed["tools"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["name"] == "fx__echo")
        .unwrap();
    assert_eq!(echo["source"], "mcp", "{echo}");
    let seq = json!({"name": "via_mcp", "groups": [
        {"name": "g", "tools": "{\"tool\":\"fx__echo\",\"args\":{\"text\":\"hi\"}} ;"}
    ]});
    let created = client
        .post(format!("{url}/api/v1/sequences"))
        .json(&seq)
        .send()
        .await
        .unwrap();
    assert_eq!(created.status(), 201);
    let body: Value = created.json().await.unwrap();
    assert_eq!(body["warnings"], json!([]), "{body}");
}

/// Where nobody can be asked (`run` without `--yes`, `serve`), tools that
/// need approval are refused, and the start says so once, naming them
/// and the way out, instead of every call failing with nothing said up
/// front.
#[test]
fn tools_that_need_approval_are_named_where_nobody_can_be_asked() {
    let setup = setup("[tools]\nrequire_approval = [\"demo_note\"]\n");
    std::fs::write(
        &setup.config,
        "[tools]\ndemo = true\nrequire_approval = [\"demo_note\"]\n",
    )
    .unwrap();
    let (output, _) = run(&setup, &["!text"]);
    assert!(output.status.success(), "{output:?}");
    let stderr = String::from_utf8(output.stderr).unwrap();
    assert!(
        stderr.contains("demo_note") && stderr.contains("--yes"),
        "{stderr}"
    );
    let (output, _) = run(&setup, &["--yes", "!text"]);
    let stderr = String::from_utf8(output.stderr).unwrap();
    assert!(!stderr.contains("demo_note"), "{stderr}");
}

/// A files root that is the data directory would hand the model the
/// store and the config: refused at start, naming the key and the way out.
#[test]
fn a_files_root_that_is_the_data_directory_is_refused() {
    let setup = setup("");
    std::fs::write(&setup.config, "[tools.files]\nroot = \".\"\n").unwrap();
    let (output, _) = run(&setup, &["!text"]);
    assert!(!output.status.success());
    let stderr = String::from_utf8(output.stderr).unwrap();
    assert!(
        stderr.contains("tools.files.root") && stderr.contains("data directory"),
        "{stderr}"
    );
}

/// `homeagent tools` names an MCP tool's source (`mcp`), as the tools API
/// does: it said `unknown`.
#[test]
fn the_tools_command_names_mcp_as_an_mcp_tools_source() {
    let setup = setup(&fixture_mcp(""));
    let output = Command::new(env!("CARGO_BIN_EXE_homeagent"))
        .arg("--config")
        .arg(&setup.config)
        .arg("--data-dir")
        .arg(&setup.dir)
        .args(["tools", "--json"])
        .env_remove("OPENAI_API_KEY")
        .env_remove("HOMEAGENT_CONFIG")
        .output()
        .unwrap();
    assert!(output.status.success(), "{output:?}");
    let listed: Value = serde_json::from_slice(&output.stdout).unwrap();
    let tools = listed
        .as_array()
        .or_else(|| listed["tools"].as_array())
        .unwrap_or_else(|| panic!("{listed}"));
    let echo = tools
        .iter()
        .find(|t| t["name"] == "fx__echo")
        .unwrap_or_else(|| panic!("{listed}"));
    assert_eq!(echo["source"], "mcp", "{echo}");
    let note = tools.iter().find(|t| t["name"] == "cmd_run").unwrap();
    assert_eq!(note["source"], "builtin", "{note}");
}

/// Ctrl-C stops the input, tools included, and its terminal frame still
/// comes: `stopped`, with a failing exit. SIGINT is sent as a terminal
/// would.
#[test]
fn ctrl_c_stops_the_input_and_its_frame_says_so() {
    use std::io::{BufRead, BufReader};
    let setup = setup("");
    let mut child = Command::new(env!("CARGO_BIN_EXE_homeagent"))
        .arg("--config")
        .arg(&setup.config)
        .arg("--data-dir")
        .arg(&setup.dir)
        .args([
            "run",
            "--json",
            r#"!calls [{"name":"demo_sleep","arguments":{"ms":60000}}]"#,
        ])
        .env_remove("OPENAI_API_KEY")
        .env_remove("HOMEAGENT_CONFIG")
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    // Once the tool runs, the input is under way.
    for line in lines.by_ref() {
        if line.unwrap().contains("\"phase\":\"start\"") {
            break;
        }
    }
    let sent = Command::new("kill")
        .args(["-INT", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(sent.success());
    let rest: Vec<Value> = lines
        .map(|line| serde_json::from_str(&line.unwrap()).unwrap())
        .collect();
    let status = child.wait().unwrap();
    assert_eq!(status.code(), Some(1), "{status:?}");
    let last = rest.last().unwrap();
    assert_eq!(last["type"], "error", "{rest:?}");
    assert_eq!(last["code"], "stopped", "{rest:?}");
}

/// A command ended by a signal (a job's timeout sends SIGTERM; Ctrl-C in
/// `seq run`; a closed terminal) takes the programs its tools started with
/// it: they lead their own process groups, so the terminal's signal never
/// reaches them, and a process killed by the signal itself runs no
/// destructor to kill them.
#[test]
fn a_signal_ends_the_programs_a_command_started() {
    let setup = setup("[tools.cmd_run]\nallowlist = [\"sleep\"]\n");
    let sequence = json!({"name": "w", "description": "sleeps", "groups": [
        {"name": "g", "out": {"r": "object"},
         "tools": "{\"tool\":\"cmd_run\",\"args\":{\"command\":\"sleep 600\",\"timeout\":\"300s\"},\"as\":\"r\"} ;"}
    ]});
    let created = seq_create(&setup, &sequence);
    assert!(created.status.success(), "{created:?}");
    let calls =
        r#"!calls [{"name":"cmd_run","arguments":{"command":"sleep 600","timeout":"300s"}}]"#;
    for (command, signal) in [
        (vec!["seq", "run", "w"], "-TERM"),
        (vec!["seq", "run", "w"], "-INT"),
        (vec!["run", calls], "-TERM"),
    ] {
        let mut child = Command::new(env!("CARGO_BIN_EXE_homeagent"))
            .arg("--config")
            .arg(&setup.config)
            .arg("--data-dir")
            .arg(&setup.dir)
            .args(&command)
            .env_remove("OPENAI_API_KEY")
            .env_remove("HOMEAGENT_CONFIG")
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap();
        let started = std::time::Instant::now();
        let sleeping = loop {
            let found: Vec<u32> = crate::cli::children_of(child.id())
                .into_iter()
                .filter(|pid| {
                    std::fs::read_to_string(format!("/proc/{pid}/comm"))
                        .is_ok_and(|name| name.trim() == "sleep")
                })
                .collect();
            if let Some(pid) = found.first() {
                break *pid;
            }
            assert!(
                started.elapsed() < std::time::Duration::from_secs(60),
                "{command:?}: no sleep started"
            );
            std::thread::sleep(std::time::Duration::from_millis(20));
        };
        crate::cli::signal_and_outlive_none(
            &mut child,
            signal,
            &[sleeping],
            std::time::Duration::from_secs(20),
            &format!("{command:?}"),
        );
    }
}

/// With `--json` stdout holds only JSON, a line each: what the agent sends
/// to the console channel goes to stderr (it was a bare line among the
/// frames, and a line-by-line reader failed on it).
#[test]
fn run_json_keeps_the_console_channel_off_stdout() {
    let setup = setup("");
    let calls =
        r#"!calls [{"name":"output_send__console","arguments":{"text":"hello from the agent"}}]"#;
    let output = Command::new(env!("CARGO_BIN_EXE_homeagent"))
        .arg("--config")
        .arg(&setup.config)
        .arg("--data-dir")
        .arg(&setup.dir)
        .args(["run", "--json", calls])
        .env_remove("OPENAI_API_KEY")
        .env_remove("HOMEAGENT_CONFIG")
        .output()
        .unwrap();
    assert!(output.status.success(), "{output:?}");
    let stdout = String::from_utf8_lossy(&output.stdout);
    for line in stdout.lines() {
        assert!(
            serde_json::from_str::<Value>(line).is_ok(),
            "not JSON on stdout: {line:?}"
        );
    }
    assert!(
        String::from_utf8_lossy(&output.stderr).contains("hello from the agent"),
        "{output:?}"
    );
}
