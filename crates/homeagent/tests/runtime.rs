#![allow(clippy::unwrap_used, clippy::expect_used)] // a panic in a test is a test failure

//! `[runtime] worker_threads` end to end: the built binary's `serve` runs
//! on as many worker threads as the config says (one without a
//! `[runtime]`), as its runtime reports them in `/api/v1/status`, and a
//! count out of range stops it with the key named.

use crate::common;

use common::{Dir, Proc, temp_dir};
use std::io::{BufRead, BufReader, Read};
use std::path::Path;
use std::process::{Command, Stdio};

use serde_json::Value;

/// `homeagent serve` on the offline demo model with `config` as its
/// config file; `tokio_env` sets tokio's own `TOKIO_WORKER_THREADS`.
fn serve(dir: &Path, config: &str, tokio_env: Option<&str>) -> Command {
    let file = dir.join("homeagent.toml");
    std::fs::write(&file, config).unwrap();
    let mut command = Command::new(env!("CARGO_BIN_EXE_homeagent"));
    command
        .arg("--data-dir")
        .arg(dir)
        .arg("--config")
        .arg(&file)
        .args(["serve", "--listen", "127.0.0.1:0"])
        .env_remove("HOMEAGENT_CONFIG")
        .env_remove("HOMEAGENT_API_KEY")
        .env_remove("RUST_LOG")
        .env_remove("TOKIO_WORKER_THREADS")
        .stdin(Stdio::null());
    if let Some(threads) = tokio_env {
        command.env("TOKIO_WORKER_THREADS", threads);
    }
    command
}

/// A `serve` (see [`serve`]) that has said it listens, with its directory
/// and the URL it gave. Bound in this order, the process is dropped (and
/// killed) before its directory.
fn listening(config: &str, tokio_env: Option<&str>) -> (Dir, Proc, String) {
    let dir = temp_dir("runtime-e2e");
    let mut child = serve(&dir.0, config, tokio_env)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let stdout = child.stdout.take().unwrap();
    let child = Proc(child);
    let mut line = String::new();
    BufReader::new(stdout).read_line(&mut line).unwrap();
    let url = line
        .trim()
        .strip_prefix("HomeAgent listening on ")
        .unwrap_or_else(|| panic!("unexpected first line: {line:?}"))
        .to_owned();
    (dir, child, url)
}

/// The worker threads a running `serve` reports.
async fn reported_workers(config: &str, tokio_env: Option<&str>) -> u64 {
    let (_dir, child, url) = listening(config, tokio_env);
    homeagent_llm::transport::install_crypto_provider();
    let http = reqwest::Client::builder().no_proxy().build().unwrap();
    let status: Value = http
        .get(format!("{url}/api/v1/status"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    drop(child);
    status["runtime"]["worker_threads"]
        .as_u64()
        .unwrap_or_else(|| panic!("no runtime.worker_threads in {status}"))
}

#[tokio::test]
async fn serve_runs_on_the_configured_worker_threads() {
    assert_eq!(reported_workers("", None).await, 1);
    assert_eq!(
        reported_workers("[runtime]\nworker_threads = 3\n", None).await,
        3
    );
    // The config decides, not tokio's own environment variable.
    assert_eq!(reported_workers("", Some("4")).await, 1);
}

/// The threads of a running `serve` named for serving connections
/// (`homeagent-serve-N`, which `/proc` cuts to 15 bytes), counted once it
/// answered a request: the threads are started before the first accept.
#[cfg(target_os = "linux")]
async fn serving_threads(config: &str) -> usize {
    let (_dir, child, url) = listening(config, None);
    homeagent_llm::transport::install_crypto_provider();
    let http = reqwest::Client::builder().no_proxy().build().unwrap();
    let answered = http.get(format!("{url}/api/v1/status")).send().await;
    assert_eq!(answered.unwrap().status(), 200);
    let tasks = std::fs::read_dir(format!("/proc/{}/task", child.0.id())).unwrap();
    tasks
        .filter_map(|task| std::fs::read_to_string(task.ok()?.path().join("comm")).ok())
        .filter(|name| name.trim() == "homeagent-serve")
        .count()
}

/// `[runtime] serve_threads` starts that many threads less the caller's:
/// each a thread running a runtime, and that runtime's one worker.
#[cfg(target_os = "linux")]
#[tokio::test]
async fn serve_starts_the_configured_serving_threads() {
    assert_eq!(serving_threads("[runtime]\nserve_threads = 1\n").await, 0);
    assert_eq!(serving_threads("").await, 2);
    assert_eq!(serving_threads("[runtime]\nserve_threads = 3\n").await, 4);
}

#[test]
fn serve_refuses_a_worker_count_out_of_range_by_its_key() {
    let dir = temp_dir("runtime-e2e");
    let mut child = serve(&dir.0, "[runtime]\nworker_threads = 0\n", None)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stderr = String::new();
    child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut stderr)
        .unwrap();
    let status = child.wait().unwrap();
    assert!(!status.success(), "serve started with 0 worker threads");
    assert!(stderr.contains("runtime.worker_threads"), "{stderr}");
    assert!(stderr.contains("between 1 and 256"), "{stderr}");
}

/// The running binary has transparent huge pages turned off for itself
/// (`PR_SET_THP_DISABLE`, shown as `THP_enabled: 0` in its
/// `/proc/<pid>/status`): with them, every fresh or purged 2 MiB region the
/// allocator touched was a huge page to zero, which was a third of
/// `serve`'s CPU in the blast (docs/BENCHMARKS.md).
#[cfg(target_os = "linux")]
#[test]
fn serve_runs_without_transparent_huge_pages() {
    let (_dir, child, _url) = listening("", None);
    let status = std::fs::read_to_string(format!("/proc/{}/status", child.0.id())).unwrap();
    let thp = status
        .lines()
        .find_map(|l| l.strip_prefix("THP_enabled:"))
        .unwrap_or_else(|| panic!("no THP_enabled line in {status}"));
    assert_eq!(thp.trim(), "0", "{status}");
}

/// The largest request body `serve` takes is `[server] max_body_bytes`
/// (a long stateless conversation sends its whole history each time, and
/// 1 MiB was a wall), and a body over it is told the limit and its key.
#[tokio::test]
async fn the_body_limit_is_the_configured_one_and_named_when_passed() {
    let big = format!(
        "{{\"model\":\"homeagent\",\"messages\":[{{\"role\":\"user\",\"content\":\"{}\"}}]}}",
        "x".repeat(1_500_000)
    );
    homeagent_llm::transport::install_crypto_provider();
    let http = reqwest::Client::builder().no_proxy().build().unwrap();
    let send = |url: String, body: String| {
        let http = http.clone();
        async move {
            http.post(format!("{url}/v1/chat/completions"))
                .header("content-type", "application/json")
                .body(body)
                .send()
                .await
                .unwrap()
        }
    };
    let (_dir, child, url) = listening("", None);
    let refused = send(url, big.clone()).await;
    assert_eq!(refused.status(), 413);
    let error: Value = refused.json().await.unwrap();
    let message = error["error"]["message"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    assert!(
        message.contains("1048576") && message.contains("max_body_bytes"),
        "{error}"
    );
    drop(child);
    let (_dir, child, url) = listening("[server]\nmax_body_bytes = 4000000\n", None);
    let taken = send(url, big).await;
    assert_ne!(taken.status(), 413, "{:?}", taken.text().await);
    drop(child);
}
