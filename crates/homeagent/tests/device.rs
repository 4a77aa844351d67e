#![allow(clippy::unwrap_used, clippy::expect_used)] // a panic in a test is a test failure

//! The device bridge end to end, as a person deploys it: `homeagent serve`
//! and two `homeagent waiter` processes (the built binary) over loopback,
//! the model being the mock LLM server over HTTP, the turns sent through
//! the sessions API. Concurrency is proven without timing: one device reads
//! a FIFO that only the other device's command writes, so the batch can
//! only finish if the two commands overlap.

use crate::common;

use common::{Proc, temp_dir};
use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use homeagent_mock_llm::{MockServer, ServerConfig};
use serde_json::{Value, json};

const TOKEN: &str = "e2e-device-token-7c1";

fn homeagent(data_dir: &Path) -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_homeagent"));
    command
        .arg("--data-dir")
        .arg(data_dir)
        .env_remove("HOMEAGENT_CONFIG")
        .env_remove("HOMEAGENT_API_KEY")
        .env_remove("HOMEAGENT_DEVICE_TOKEN")
        .env_remove("OPENAI_API_KEY")
        .env_remove("RUST_LOG")
        .stdin(Stdio::null());
    command
}

/// Starts `homeagent serve` on `listen`; returns it and its base URL.
fn serve(dir: &Path, mock: &MockServer, listen: &str) -> (Proc, String) {
    let config = dir.join("homeagent.toml");
    std::fs::write(
        &config,
        format!(
            "[[llm.sources]]\nname = \"mock\"\nprotocol = \"openai\"\nbase_url = \"{}/v1\"\n\
             model = \"mock\"\n\n[[agents]]\nname = \"main\"\ndevices = [\"dev-a\", \"dev-b\"]\n",
            mock.url()
        ),
    )
    .unwrap();
    let mut child = homeagent(dir)
        .arg("--config")
        .arg(&config)
        .args(["serve", "--listen", listen])
        .env("HOMEAGENT_DEVICE_TOKEN", TOKEN)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let url = line
        .trim()
        .strip_prefix("HomeAgent listening on ")
        .unwrap_or_else(|| panic!("unexpected first line: {line:?}"))
        .to_owned();
    (Proc(child), url)
}

/// Starts a foreground waiter with `waiter_toml` as its config.
fn waiter(dir: &Path, url: &str, id: &str, waiter_toml: &str, token: &str) -> Proc {
    let data = dir.join(id);
    std::fs::create_dir_all(&data).unwrap();
    let config = data.join("waiter.toml");
    std::fs::write(&config, waiter_toml).unwrap();
    let child = homeagent(&data)
        .arg("--config")
        .arg(&config)
        .args(["waiter", "--server", &url.replace("http://", "ws://")])
        .args(["--token", token, "--device-id", id])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    Proc(child)
}

fn client() -> reqwest::Client {
    homeagent_llm::transport::install_crypto_provider();
    reqwest::Client::builder().no_proxy().build().unwrap()
}

async fn status(url: &str) -> Value {
    let text = client()
        .get(format!("{url}/api/v1/status"))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    serde_json::from_str(&text).unwrap()
}

/// The bound devices' ids, once `want` holds (polled; a hang fails).
async fn wait_for_devices(url: &str, want: impl Fn(&[Value]) -> bool) -> Vec<Value> {
    for _ in 0..600 {
        let status = status(url).await;
        let bound = status["devices"]["bound"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        if want(&bound) {
            return bound;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("devices never reached the expected state");
}

fn ids(bound: &[Value]) -> Vec<&str> {
    bound.iter().filter_map(|d| d["id"].as_str()).collect()
}

fn run_on(device: &str, command: &str) -> Value {
    json!({"name": "device_cmd_run",
           "arguments": {"device_id": device, "command": command, "timeout": "20s"}})
}

/// One turn through the sessions API; the tool_call end frames.
async fn turn(url: &str, session: &str, calls: &[Value]) -> Vec<Value> {
    let text = format!("!calls {}", Value::Array(calls.to_vec()));
    let body = client()
        .post(format!("{url}/api/v1/sessions/{session}/messages"))
        .header("content-type", "application/json")
        .body(json!({"text": text}).to_string())
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    body.lines()
        .filter_map(|line| line.strip_prefix("data:"))
        .map(|data| serde_json::from_str::<Value>(data.trim()).unwrap())
        .filter(|frame| frame["type"] == "tool_call" && frame["phase"] == "end")
        .collect()
}

const A_TOML: &str = "device_cmd_allowlist = [\"cat\", \"cp\", \"sleep\"]\nallow_writes = true\n";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_waiters_run_a_batch_concurrently_in_order_per_device_and_survive_faults() {
    let dir = temp_dir("device-e2e");
    let mock = MockServer::start("127.0.0.1:0", ServerConfig::default())
        .await
        .unwrap();
    let (server, url) = serve(&dir.0, &mock, "127.0.0.1:0");
    let mut a = waiter(&dir.0, &url, "dev-a", A_TOML, TOKEN);
    // dev-b keeps the default allowlist (cat and sleep are on it, cp is not).
    let _b = waiter(&dir.0, &url, "dev-b", "", TOKEN);
    let bound = wait_for_devices(&url, |b| b.len() == 2).await;
    assert_eq!(ids(&bound), ["dev-a", "dev-b"]);

    // Overlap: dev-b's `cat` blocks on the FIFO until dev-a's `cp` writes it.
    let fifo = dir.0.join("pipe");
    let made = Command::new("mkfifo").arg(&fifo).status().unwrap();
    assert!(made.success());
    let source = dir.0.join("message.txt");
    std::fs::write(&source, "through the pipe\n").unwrap();
    let (fifo, source) = (fifo.display().to_string(), source.display().to_string());
    let ends = turn(
        &url,
        "overlap",
        &[
            run_on("dev-b", &format!("cat {fifo}")),
            run_on("dev-a", &format!("cp {source} {fifo}")),
        ],
    )
    .await;
    assert_eq!(ends.len(), 2, "{ends:?}");
    assert!(
        ends.iter()
            .all(|e| e["status"] == "ok" && e["parallel"] == true),
        "{ends:?}"
    );

    // Same device twice: the batch keeps its order (serial, by order key).
    let ends = turn(
        &url,
        "order",
        &[
            run_on("dev-a", "sleep 0.2"),
            run_on("dev-a", &format!("cat {source}")),
        ],
    )
    .await;
    assert_eq!(ends.len(), 2, "{ends:?}");
    assert!(ends.iter().all(|e| e["status"] == "ok"), "{ends:?}");
    assert!(ends.iter().all(|e| e["parallel"] == false), "{ends:?}");
    // Serial ends arrive in call order.
    let order: Vec<&str> = ends
        .iter()
        .map(|e| e["call_id"].as_str().unwrap())
        .collect();
    assert!(
        order[0].ends_with("_0") && order[1].ends_with("_1"),
        "{order:?}"
    );

    // The device's own allowlist: dev-b refuses what dev-a allows.
    let copy = format!("cp {source} {source}.copy");
    let ends = turn(&url, "refused", &[run_on("dev-b", &copy)]).await;
    assert_eq!(ends[0]["status"], "denied", "{ends:?}");
    let detail = ends[0]["error"]["detail"].as_str().unwrap();
    assert!(
        detail.contains("dev-b") && detail.contains("cp"),
        "{detail}"
    );

    // Kill dev-a mid-command: the call fails with a clear error, not a hang.
    let long = tokio::spawn({
        let url = url.clone();
        async move { turn(&url, "killed", &[run_on("dev-a", "sleep 5")]).await }
    });
    wait_for_devices(&url, |b| {
        b.iter().any(|d| d["id"] == "dev-a" && d["in_flight"] == 1)
    })
    .await;
    a.0.kill().unwrap();
    a.0.wait().unwrap();
    let ends = long.await.unwrap();
    assert_eq!(ends[0]["status"], "error", "{ends:?}");
    let detail = ends[0]["error"]["detail"].as_str().unwrap();
    assert!(detail.contains("disconnected"), "{detail}");
    wait_for_devices(&url, |b| ids(b) == ["dev-b"]).await;

    // A restarted dev-a binds again (its old binding is gone) and works.
    let _a = waiter(&dir.0, &url, "dev-a", A_TOML, TOKEN);
    wait_for_devices(&url, |b| b.len() == 2).await;
    let ends = turn(&url, "back", &[run_on("dev-a", &format!("cat {source}"))]).await;
    assert_eq!(ends[0]["status"], "ok", "{ends:?}");

    // The server restarts on the same port: both waiters reconnect alone.
    let listen = url.trim_start_matches("http://").to_owned();
    drop(server);
    let (_server, url) = serve(&dir.0, &mock, &listen);
    let bound = wait_for_devices(&url, |b| b.len() == 2).await;
    assert_eq!(ids(&bound), ["dev-a", "dev-b"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wrong_token_is_refused_once_and_the_waiter_exits_saying_why() {
    let dir = temp_dir("device-e2e");
    let mock = MockServer::start("127.0.0.1:0", ServerConfig::default())
        .await
        .unwrap();
    let (_server, url) = serve(&dir.0, &mock, "127.0.0.1:0");
    let mut wrong = waiter(&dir.0, &url, "dev-a", "", "not-the-token");
    let status = tokio::task::spawn_blocking(move || {
        // A waiter that retried a refused token would never exit.
        let mut waited = 0;
        let status = loop {
            if let Some(status) = wrong.0.try_wait().unwrap() {
                break status;
            }
            assert!(
                waited < 600,
                "the waiter kept running after its token was refused"
            );
            std::thread::sleep(Duration::from_millis(100));
            waited += 1;
        };
        let mut stderr = String::new();
        std::io::Read::read_to_string(&mut wrong.0.stderr.take().unwrap(), &mut stderr).unwrap();
        (status, stderr)
    })
    .await
    .unwrap();
    assert!(!status.0.success());
    assert!(status.1.contains("token"), "{}", status.1);
    assert!(!status.1.contains("not-the-token"), "the token was printed");
    let bound = wait_for_devices(&url, |_| true).await;
    assert!(bound.is_empty());
}
