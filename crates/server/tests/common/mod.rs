//! The test harness: a real agent (offline demo model, real SQLite store in
//! a fresh temp dir) behind the real server on 127.0.0.1:0, and a small SSE
//! reader over reqwest.

#![allow(dead_code)] // each test file uses part of the harness

use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use homeagent_agent::config::{Config, ConfigPaths};
use homeagent_agent::{Agent, BuildOptions, DemoModel, build};
use homeagent_mock_llm::script::ScriptOptions;
use homeagent_server::{
    ServeError, ServeThreads, ServerOptions, ServerState, bind, serve, serve_threads,
};
use serde_json::Value;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

pub const KEY: &str = "test-key-5f2a";

pub struct TestServer {
    pub url: String,
    pub dir: PathBuf,
    pub state: ServerState,
    pub agent: Agent,
    shutdown: Option<oneshot::Sender<()>>,
    pub task: Option<JoinHandle<Result<(), ServeError>>>,
}

impl TestServer {
    /// Triggers the graceful shutdown and waits for `serve` to return.
    pub async fn shutdown(&mut self) -> Result<(), ServeError> {
        if let Some(tx) = self.shutdown.take() {
            let _ = tx.send(());
        }
        match self.task.take() {
            Some(task) => task.await.unwrap(),
            None => Ok(()),
        }
    }

    pub fn client(&self) -> reqwest::Client {
        reqwest::Client::builder().no_proxy().build().unwrap()
    }

    pub fn get(&self, path: &str) -> reqwest::RequestBuilder {
        self.client()
            .get(format!("{}{path}", self.url))
            .bearer_auth(KEY)
    }

    /// A reader of `/api/v1/events`, subscribed when this returns.
    pub async fn events(&self) -> SseReader {
        let response = self.get("/api/v1/events").send().await.unwrap();
        SseReader::new(response)
    }

    pub fn post_json(&self, path: &str, body: &Value) -> reqwest::RequestBuilder {
        self.client()
            .post(format!("{}{path}", self.url))
            .bearer_auth(KEY)
            .header("content-type", "application/json")
            .body(body.to_string())
    }
}

impl Drop for TestServer {
    fn drop(&mut self) {
        if let Some(tx) = self.shutdown.take() {
            let _ = tx.send(());
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

pub struct Setup {
    pub api_key: Option<&'static str>,
    pub tool_sleep_ms: u64,
    pub options: ServerOptions,
    pub extra_toml: &'static str,
    /// `BuildOptions::write_hold`.
    pub write_hold: Option<std::time::Duration>,
    /// `ServeThreads::threads`.
    pub threads: usize,
}

impl Default for Setup {
    fn default() -> Self {
        Setup {
            api_key: Some(KEY),
            tool_sleep_ms: 40,
            options: ServerOptions::default(),
            extra_toml: "",
            write_hold: None,
            threads: 1,
        }
    }
}

pub fn temp_dir(tag: &str) -> PathBuf {
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    let dir = std::env::temp_dir().join(format!(
        "homeagent-server-{tag}-{}-{}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::SeqCst)
    ));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

pub async fn start(setup: Setup) -> TestServer {
    homeagent_llm::transport::install_crypto_provider();
    let dir = temp_dir("srv");
    let config = dir.join("homeagent.toml");
    std::fs::write(
        &config,
        format!(
            "[tools]\ndemo = true\n[scheduler]\nmax_concurrent_sessions = 32\n{}",
            setup.extra_toml
        ),
    )
    .unwrap();
    let no_env = |_: &str| None;
    let paths = ConfigPaths::resolve(Some(config), Some(dir.clone()), &no_env).unwrap();
    let key = setup.api_key;
    let env = move |name: &str| {
        (name == "HOMEAGENT_API_KEY")
            .then(|| key.map(str::to_owned))
            .flatten()
    };
    let loaded = Config::load(&paths, &env).unwrap();
    let agent = build(
        &loaded,
        &no_env,
        BuildOptions {
            demo: DemoModel {
                options: ScriptOptions {
                    tool_sleep_ms: setup.tool_sleep_ms,
                    ..ScriptOptions::default()
                },
            },
            devices: true,
            write_hold: setup.write_hold,
            ..BuildOptions::default()
        },
    )
    .unwrap();
    let options = ServerOptions {
        api_key: loaded
            .secrets
            .api_key
            .as_ref()
            .map(|k| k.expose().to_owned()),
        ..setup.options
    };
    let listener = bind("127.0.0.1:0", options.api_key.as_deref())
        .await
        .unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let state = ServerState::new(&agent, options);
    let (tx, rx) = oneshot::channel();
    let shutdown = async move {
        let _ = rx.await;
    };
    // `serve` is the one-thread form; the tests that ask for more threads
    // go through `serve_threads`.
    let task = if setup.threads == 1 {
        tokio::spawn(serve(listener, state.clone(), shutdown))
    } else {
        let threads = ServeThreads {
            threads: setup.threads,
            ..ServeThreads::default()
        };
        tokio::spawn(serve_threads(listener, state.clone(), shutdown, threads))
    };
    TestServer {
        url,
        dir,
        state,
        agent,
        shutdown: Some(tx),
        task: Some(task),
    }
}

/// One server-sent event.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct SseEvent {
    pub event: Option<String>,
    pub id: Option<String>,
    pub data: String,
}

/// Reads SSE events from a streaming response.
pub struct SseReader {
    response: reqwest::Response,
    buffer: String,
    /// Why the body ended, when it was cut off instead of ending.
    cut: Option<String>,
}

impl SseReader {
    pub fn new(response: reqwest::Response) -> Self {
        SseReader {
            response,
            buffer: String::new(),
            cut: None,
        }
    }

    /// The next event (comments skipped); `None` at the end of the body.
    pub async fn next(&mut self) -> Option<SseEvent> {
        loop {
            if let Some(end) = self.buffer.find("\n\n") {
                let block: String = self.buffer.drain(..end + 2).collect();
                let mut event = SseEvent::default();
                let mut data = Vec::new();
                for line in block.lines() {
                    if let Some(v) = line.strip_prefix("data:") {
                        data.push(v.strip_prefix(' ').unwrap_or(v).to_owned());
                    } else if let Some(v) = line.strip_prefix("id:") {
                        event.id = Some(v.trim().to_owned());
                    } else if let Some(v) = line.strip_prefix("event:") {
                        event.event = Some(v.trim().to_owned());
                    }
                }
                if data.is_empty() && event.id.is_none() && event.event.is_none() {
                    continue; // a keep-alive comment
                }
                event.data = data.join("\n");
                return Some(event);
            }
            let chunk = match self.response.chunk().await {
                Ok(chunk) => chunk?,
                Err(error) => {
                    self.cut = Some(format!("{error:?}"));
                    return None;
                }
            };
            self.buffer.push_str(&String::from_utf8_lossy(&chunk));
        }
    }

    /// The next event, failing the test after `secs` seconds (a hang is a
    /// failure, not a timing assertion).
    pub async fn next_within(&mut self, secs: u64) -> Option<SseEvent> {
        tokio::time::timeout(Duration::from_secs(secs), self.next())
            .await
            .expect("no event in time")
    }

    pub async fn all(self) -> Vec<SseEvent> {
        self.all_and_end().await.0
    }

    /// Every event, and why the body was cut off if it did not end as a
    /// body ends (a server that went away mid-stream).
    pub async fn all_and_end(mut self) -> (Vec<SseEvent>, Option<String>) {
        let mut out = Vec::new();
        while let Some(event) = self.next().await {
            out.push(event);
        }
        (out, self.cut)
    }

    /// A streamed chat completion's text: every chunk's content delta,
    /// joined, to the end of the stream.
    pub async fn completion_text(self) -> String {
        self.all()
            .await
            .iter()
            .filter(|e| e.data != "[DONE]")
            .filter_map(|e| {
                json(&e.data)["choices"][0]["delta"]["content"]
                    .as_str()
                    .map(str::to_owned)
            })
            .collect()
    }
}

/// The session an answer ran in (its `x-session-id` header).
pub fn session_of(response: &reqwest::Response) -> String {
    response.headers()["x-session-id"]
        .to_str()
        .unwrap()
        .to_owned()
}

pub fn json(text: &str) -> Value {
    serde_json::from_str(text).unwrap_or_else(|e| panic!("not JSON ({e}): {text}"))
}

pub async fn body_json(response: reqwest::Response) -> Value {
    json(&response.text().await.unwrap())
}
