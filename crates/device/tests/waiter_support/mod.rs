//! A scripted server for the waiter tests: a real WebSocket on loopback,
//! played by the test, one frame at a time.

#![allow(dead_code)] // each test file uses a different part

use std::sync::Arc;
use std::time::Duration;

use futures_util::{SinkExt, StreamExt};
use homeagent_device::protocol::{DeviceFrame, Hello, PROTOCOL_VERSION, ServerFrame};
use homeagent_device::waiter::{Secret, WaiterError, WaiterOptions, WaiterPolicy, run_waiter};
use tokio::net::{TcpListener, TcpStream};
use tokio_tungstenite::WebSocketStream;
use tokio_tungstenite::tungstenite::Message;

pub type Ws = WebSocketStream<TcpStream>;
pub type Waiter = tokio::task::JoinHandle<Result<std::convert::Infallible, WaiterError>>;

pub const TOKEN: &str = "device-token-for-tests";
pub const DEVICE_ID: &str = "test-device";

/// A loopback listener and the `ws://` URL that reaches it.
pub async fn listen() -> (TcpListener, String) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("ws://{}", listener.local_addr().unwrap());
    (listener, url)
}

/// Options with short timers, so reconnects and dead links show quickly.
pub fn fast_options(url: &str) -> WaiterOptions {
    let hello = Hello {
        device_id: DEVICE_ID.into(),
        name: "Test device".into(),
        capabilities: vec!["cmd".into()],
        version: PROTOCOL_VERSION,
    };
    let mut options = WaiterOptions::new(url, Secret::new(TOKEN), hello);
    options.backoff_min = Duration::from_millis(50);
    options.backoff_max = Duration::from_millis(200);
    options.ping_interval = Duration::from_millis(200);
    options.dead_after = Duration::from_secs(5);
    options
}

pub fn start_waiter(options: WaiterOptions, policy: WaiterPolicy) -> Waiter {
    tokio::spawn(run_waiter(options, Arc::new(policy)))
}

/// The next connection, as a WebSocket (panics after 10 s without one).
pub async fn accept(listener: &TcpListener) -> Ws {
    let (tcp, _) = tokio::time::timeout(Duration::from_secs(10), listener.accept())
        .await
        .expect("the waiter did not connect within 10 s")
        .unwrap();
    tokio_tungstenite::accept_async(tcp).await.unwrap()
}

/// Whether another connection arrives within `wait`.
pub async fn connects_within(listener: &TcpListener, wait: Duration) -> bool {
    tokio::time::timeout(wait, listener.accept()).await.is_ok()
}

/// The next text frame from the device, skipping pings and pongs.
pub async fn recv(ws: &mut Ws) -> DeviceFrame {
    loop {
        let message = tokio::time::timeout(Duration::from_secs(20), ws.next())
            .await
            .expect("no frame from the waiter within 20 s")
            .expect("the waiter closed the link")
            .unwrap();
        match message {
            Message::Text(body) => return serde_json::from_str(&body).unwrap(),
            Message::Ping(_) | Message::Pong(_) => continue,
            other => panic!("unexpected message from the waiter: {other:?}"),
        }
    }
}

pub async fn send(ws: &mut Ws, frame: &ServerFrame) {
    ws.send(Message::text(serde_json::to_string(frame).unwrap()))
        .await
        .unwrap();
}

/// Reads hello then bind; returns the hello and the token.
pub async fn hello_and_bind(ws: &mut Ws) -> (Hello, String) {
    let DeviceFrame::Hello(hello) = recv(ws).await else {
        panic!("the first frame is not a hello");
    };
    let DeviceFrame::Bind { token } = recv(ws).await else {
        panic!("the second frame is not a bind");
    };
    (hello, token)
}

/// Accepts the waiter, checks its hello and token, and binds it.
pub async fn bind(listener: &TcpListener) -> Ws {
    let mut ws = accept(listener).await;
    let (hello, token) = hello_and_bind(&mut ws).await;
    assert_eq!(hello.device_id, DEVICE_ID);
    assert_eq!(hello.version, PROTOCOL_VERSION);
    assert_eq!(token, TOKEN);
    send(
        &mut ws,
        &ServerFrame::Bound {
            device_id: DEVICE_ID.into(),
        },
    )
    .await;
    ws
}

/// A bound waiter with `policy`, and the server's end of its link.
pub async fn bound_waiter(policy: WaiterPolicy) -> (Ws, Waiter, TcpListener) {
    let (listener, url) = listen().await;
    let waiter = start_waiter(fast_options(&url), policy);
    let ws = bind(&listener).await;
    (ws, waiter, listener)
}

/// The result of one command sent as text.
pub async fn run(ws: &mut Ws, req_id: u64, command: &str, timeout_ms: u64) -> Outcome {
    send(
        ws,
        &ServerFrame::Cmd {
            req_id,
            argv: None,
            command: Some(command.into()),
            timeout_ms,
        },
    )
    .await;
    Outcome::from(recv(ws).await, req_id)
}

/// The result of one command sent as argv.
pub async fn run_argv(ws: &mut Ws, req_id: u64, argv: &[&str]) -> Outcome {
    send(
        ws,
        &ServerFrame::Cmd {
            req_id,
            argv: Some(argv.iter().map(|s| s.to_string()).collect()),
            command: None,
            timeout_ms: 10_000,
        },
    )
    .await;
    Outcome::from(recv(ws).await, req_id)
}

/// A `cmd_result`, flattened for assertions.
#[derive(Debug, Clone)]
pub struct Outcome {
    pub status: homeagent_device::CmdStatus,
    pub exit_code: Option<i32>,
    pub stdout: String,
    pub stderr: String,
    pub truncated: bool,
    pub detail: String,
    pub hint: String,
}

impl Outcome {
    pub fn from(frame: DeviceFrame, expected_req_id: u64) -> Outcome {
        let DeviceFrame::CmdResult {
            req_id,
            status,
            exit_code,
            stdout,
            stderr,
            truncated,
            detail,
            hint,
            ..
        } = frame
        else {
            panic!("not a cmd_result: {frame:?}");
        };
        assert_eq!(req_id, expected_req_id);
        Outcome {
            status,
            exit_code,
            stdout,
            stderr,
            truncated,
            detail: detail.unwrap_or_default(),
            hint: hint.unwrap_or_default(),
        }
    }

    pub fn is_ok(&self) -> bool {
        self.status == homeagent_device::CmdStatus::Ok
    }

    pub fn is_refused(&self) -> bool {
        self.status == homeagent_device::CmdStatus::Refused
    }
}

/// A policy from waiter.toml text, through the same loader the CLI uses.
pub fn policy_from_toml(text: &str) -> WaiterPolicy {
    let dir = temp_dir("policy");
    let path = dir.join("waiter.toml");
    std::fs::write(&path, text).unwrap();
    let (_, policy) = WaiterPolicy::load(Some(&path), None).unwrap();
    std::fs::remove_dir_all(&dir).unwrap();
    policy
}

/// A fresh directory under the system temp dir.
pub fn temp_dir(label: &str) -> std::path::PathBuf {
    use std::sync::atomic::{AtomicU32, Ordering};
    static NEXT: AtomicU32 = AtomicU32::new(0);
    let dir = std::env::temp_dir().join(format!(
        "waiter-test-{label}-{}-{}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    ));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}
