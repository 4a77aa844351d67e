//! The device bridge's server side over a real WebSocket: scripted devices
//! (this file plays the waiter's part of the protocol) bound to the real
//! server, driven by the demo model's `!calls` and by the tool API.

#![allow(clippy::unwrap_used, clippy::expect_used)] // a panic in a test is a test failure

use crate::common;

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::{KEY, Setup, SseReader, body_json, json, start};
use futures_util::{SinkExt, StreamExt};
use homeagent_core::CancellationToken;
use homeagent_server::ServerOptions;
use homeagent_tools::ToolApi;
use serde_json::{Value, json};
use tokio::net::TcpStream;
use tokio_tungstenite::WebSocketStream;
use tokio_tungstenite::tungstenite::Message;

const GRANTS: &str = r#"
[[agents]]
name = "main"
devices = ["nas", "pi"]
[[agents]]
name = "guest"
"#;

type Ws = WebSocketStream<TcpStream>;

async fn open(url: &str) -> Ws {
    let addr = url.trim_start_matches("http://");
    let stream = TcpStream::connect(addr).await.unwrap();
    let (ws, _) = tokio_tungstenite::client_async(format!("ws://{addr}/api/v1/device/ws"), stream)
        .await
        .unwrap();
    ws
}

async fn send(ws: &mut Ws, frame: Value) {
    ws.send(Message::text(frame.to_string())).await.unwrap();
}

/// The next JSON frame (pings skipped); `None` when the link closed.
async fn next(ws: &mut Ws) -> Option<Value> {
    loop {
        let message = tokio::time::timeout(Duration::from_secs(20), ws.next())
            .await
            .expect("no frame in time")?;
        match message {
            Ok(Message::Text(text)) => return Some(json(text.as_str())),
            Ok(Message::Close(_)) | Err(_) => return None,
            Ok(_) => {}
        }
    }
}

/// Hello + bind; returns the link and the server's answer.
async fn bind(url: &str, id: &str, token: &str) -> (Ws, Option<Value>) {
    let mut ws = open(url).await;
    let hello = json!({"type": "hello", "device_id": id, "name": format!("{id} box"),
                       "capabilities": ["cmd"], "version": 1});
    send(&mut ws, hello).await;
    send(&mut ws, json!({"type": "bind", "token": token})).await;
    let answer = next(&mut ws).await;
    (ws, answer)
}

/// What a scripted device saw: (device, command, arrived, answered).
type Log = Arc<Mutex<Vec<(String, String, Instant, Instant)>>>;

/// A bound device that answers `hold MS …` after MS milliseconds (each
/// command in its own task, so any ordering comes from the server) and
/// answers `vanish` by closing the link.
async fn device(url: &str, id: &'static str, log: Log) -> tokio::task::JoinHandle<()> {
    let (ws, answer) = bind(url, id, KEY).await;
    assert_eq!(answer.unwrap(), json!({"type": "bound", "device_id": id}));
    let (sink, mut stream) = ws.split();
    let sink = Arc::new(tokio::sync::Mutex::new(sink));
    tokio::spawn(async move {
        while let Some(Ok(message)) = stream.next().await {
            let Message::Text(text) = message else {
                continue;
            };
            let frame = json(text.as_str());
            assert_eq!(frame["type"], "cmd");
            let command = frame["command"].as_str().unwrap().to_owned();
            let req_id = frame["req_id"].clone();
            if command == "vanish" {
                let _ = sink.lock().await.close().await;
                return;
            }
            let ms: u64 = command
                .split_whitespace()
                .nth(1)
                .and_then(|n| n.parse().ok())
                .unwrap_or(0);
            let (sink, log) = (Arc::clone(&sink), Arc::clone(&log));
            tokio::spawn(async move {
                let arrived = Instant::now();
                tokio::time::sleep(Duration::from_millis(ms)).await;
                // Logged before the answer leaves, so the server cannot
                // see the answer before the log has it.
                log.lock()
                    .unwrap()
                    .push((id.to_owned(), command.clone(), arrived, Instant::now()));
                let result = json!({"type": "cmd_result", "req_id": req_id, "status": "ok",
                    "exit_code": 0, "stdout": format!("{id}: {command}"), "stderr": "",
                    "truncated": false, "duration_ms": ms});
                let _ = sink
                    .lock()
                    .await
                    .send(Message::text(result.to_string()))
                    .await;
            });
        }
    })
}

fn setup() -> Setup {
    Setup {
        extra_toml: GRANTS,
        ..Setup::default()
    }
}

fn device_call(device: &str, command: &str) -> Value {
    json!({"name": "device_cmd_run", "arguments": {"device_id": device, "command": command}})
}

/// Sends `!calls` with these calls as `agent`; the tool_call end frames.
async fn run_calls(server: &common::TestServer, agent: &str, calls: &[Value]) -> Vec<Value> {
    let text = format!("!calls {}", Value::Array(calls.to_vec()));
    let response = server
        .post_json(
            &format!("/api/v1/sessions/dev-{agent}/messages"),
            &json!({"text": text, "agent": agent}),
        )
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    SseReader::new(response)
        .all()
        .await
        .iter()
        .map(|e| json(&e.data))
        .filter(|f| f["type"] == "tool_call" && f["phase"] == "end")
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn commands_for_two_devices_overlap_and_two_for_one_device_keep_their_order() {
    let server = start(setup()).await;
    let log: Log = Arc::default();
    let _nas = device(&server.url, "nas", Arc::clone(&log)).await;
    let _pi = device(&server.url, "pi", Arc::clone(&log)).await;

    let ends = run_calls(
        &server,
        "main",
        &[
            device_call("nas", "hold 400 a"),
            device_call("pi", "hold 400 b"),
        ],
    )
    .await;
    assert_eq!(ends.len(), 2, "{ends:?}");
    assert!(
        ends.iter()
            .all(|e| e["status"] == "ok" && e["parallel"] == true),
        "{ends:?}"
    );
    {
        let log = log.lock().unwrap();
        assert_eq!(log.len(), 2);
        // Each command arrived before the other one was answered.
        assert!(
            log[0].2 < log[1].3 && log[1].2 < log[0].3,
            "no overlap: {log:?}"
        );
    }

    log.lock().unwrap().clear();
    let ends = run_calls(
        &server,
        "main",
        &[
            device_call("nas", "hold 300 first"),
            device_call("nas", "hold 10 second"),
        ],
    )
    .await;
    assert_eq!(ends.len(), 2);
    assert!(
        ends.iter()
            .all(|e| e["status"] == "ok" && e["parallel"] == false),
        "{ends:?}"
    );
    let log = log.lock().unwrap();
    let order: Vec<&str> = log.iter().map(|entry| entry.1.as_str()).collect();
    assert_eq!(order, ["hold 300 first", "hold 10 second"]);
    assert!(
        log[1].2 >= log[0].3,
        "the second started before the first was answered"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_agent_without_the_grant_is_refused_on_the_model_path_and_the_tool_api() {
    let server = start(setup()).await;
    let log: Log = Arc::default();
    let _nas = device(&server.url, "nas", Arc::clone(&log)).await;

    let ends = run_calls(&server, "guest", &[device_call("nas", "hold 0 x")]).await;
    assert_eq!(ends.len(), 1);
    assert_eq!(ends[0]["status"], "denied", "{ends:?}");

    let api = ToolApi::new(Arc::new(server.agent.runtime.executor(None)));
    let call = |agent: &'static str, args: Value| {
        let api = &api;
        async move {
            api.call(
                agent,
                "device_cmd_run",
                args,
                Default::default(),
                CancellationToken::new(),
            )
            .await
        }
    };
    let guest = call("guest", json!({"device_id": "nas", "command": "hold 0 y"})).await;
    assert!(!guest.success);
    assert_eq!(guest.error.unwrap().reason.as_str(), "unauthorized");
    // `main` is granted nas and pi, not other ids; and an id is required.
    let other = call(
        "main",
        json!({"device_id": "desktop", "command": "hold 0 z"}),
    )
    .await;
    assert_eq!(other.error.unwrap().reason.as_str(), "unauthorized");
    let missing = call("main", json!({"command": "hold 0 z"})).await;
    assert!(!missing.success);
    assert!(
        log.lock().unwrap().is_empty(),
        "a refused call reached the device"
    );

    // device_list shows each agent only the devices it may use.
    let listed = |agent: &'static str| {
        let api = &api;
        async move {
            let outcome = api
                .call(
                    agent,
                    "device_list",
                    json!({}),
                    Default::default(),
                    CancellationToken::new(),
                )
                .await;
            assert!(outcome.success, "{outcome:?}");
            outcome.value["devices"]
                .as_array()
                .unwrap()
                .iter()
                .map(|d| d["id"].as_str().unwrap().to_owned())
                .collect::<Vec<_>>()
        }
    };
    assert_eq!(listed("main").await, ["nas"]);
    assert!(listed("guest").await.is_empty());

    let main = call("main", json!({"device_id": "nas", "command": "hold 0 ok"})).await;
    assert!(main.success, "{main:?}");
    assert_eq!(main.value["stdout"], "nas: hold 0 ok");
    assert_eq!(main.value["device_id"], "nas");
    assert_eq!(log.lock().unwrap().len(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_link_dropping_mid_command_fails_the_call_and_unbinds_the_device() {
    let server = start(setup()).await;
    let log: Log = Arc::default();
    let _pi = device(&server.url, "pi", Arc::clone(&log)).await;
    let status = body_json(server.get("/api/v1/status").send().await.unwrap()).await;
    let bound = &status["devices"]["bound"];
    assert_eq!(bound.as_array().unwrap().len(), 1, "{status}");
    assert_eq!(bound[0]["id"], "pi");
    assert_eq!(bound[0]["name"], "pi box");
    assert_eq!(bound[0]["capabilities"], json!(["cmd"]));
    let api = ToolApi::new(Arc::new(server.agent.runtime.executor(None)));
    let listed = api
        .call(
            "main",
            "device_list",
            json!({}),
            Default::default(),
            CancellationToken::new(),
        )
        .await;
    assert!(listed.success, "{listed:?}");
    let devices = listed.value["devices"].as_array().unwrap();
    assert_eq!(devices.len(), 1);
    assert_eq!(devices[0]["id"], "pi");
    assert_eq!(devices[0]["name"], "pi box");
    assert_eq!(devices[0]["in_flight"], 0);

    let ends = run_calls(&server, "main", &[device_call("pi", "vanish")]).await;
    assert_eq!(ends.len(), 1);
    assert_eq!(ends[0]["status"], "error", "{ends:?}");
    let detail = ends[0]["error"]["detail"].as_str().unwrap();
    assert!(
        detail.contains("pi") && detail.contains("disconnected"),
        "{detail}"
    );

    let status = body_json(server.get("/api/v1/status").send().await.unwrap()).await;
    assert_eq!(status["devices"]["bound"], json!([]));
    // The tools now say the device is not connected.
    let ends = run_calls(&server, "main", &[device_call("pi", "hold 0 again")]).await;
    assert_eq!(ends[0]["error"]["reason"], "not_found", "{ends:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wrong_tokens_duplicate_ids_and_disabled_devices_are_refused_with_reasons() {
    let server = start(setup()).await;
    let (_ws, answer) = bind(&server.url, "nas", "not-the-key").await;
    let answer = answer.unwrap();
    assert_eq!(answer["type"], "refused");
    assert_eq!(answer["code"], "bad_token");
    assert_eq!(answer["retry"], false);
    assert!(answer["reason"].as_str().unwrap().contains("token"));

    let (_first, ok) = bind(&server.url, "nas", KEY).await;
    assert_eq!(ok.unwrap()["type"], "bound");
    let (_second, dup) = bind(&server.url, "nas", KEY).await;
    let dup = dup.unwrap();
    assert_eq!(dup["code"], "duplicate_id");
    assert!(
        dup["reason"]
            .as_str()
            .unwrap()
            .contains("already connected")
    );

    let (_bad, bad_id) = bind(&server.url, "no spaces", KEY).await;
    assert_eq!(bad_id.unwrap()["code"], "protocol");
    // The route is open to anyone (the token is inside the protocol): a
    // huge id, with the right token or not, is refused without being
    // repeated into the refusal (and so into the log), and so is a huge
    // value serde would quote.
    let huge = "A".repeat(200_000);
    for token in [KEY, "wrong"] {
        let (_big, refused) = bind(&server.url, &huge, token).await;
        let refused = refused.unwrap();
        assert_eq!(refused["code"], "protocol", "{token}");
        let reason = refused["reason"].as_str().unwrap();
        assert!(reason.len() < 1000, "{} bytes", reason.len());
        assert!(reason.contains("device_id"), "{reason}");
    }
    let mut ws = open(&server.url).await;
    send(&mut ws, json!({"type": huge})).await;
    let refused = next(&mut ws).await.unwrap();
    assert_eq!(refused["code"], "protocol");
    let reason = refused["reason"].as_str().unwrap();
    assert!(reason.len() < 1000, "{} bytes", reason.len());
    assert!(reason.ends_with('…'), "a cut error says so: {reason}");
    // A short error is shown whole, with no mark of a cut.
    let mut ws = open(&server.url).await;
    send(&mut ws, json!({"type": "hullo"})).await;
    let refused = next(&mut ws).await.unwrap();
    let reason = refused["reason"].as_str().unwrap();
    assert!(
        reason.contains("hullo") && !reason.contains('…'),
        "{reason}"
    );

    // A device token, when set, is the one that counts (not the API key).
    let with_token = start(Setup {
        options: ServerOptions {
            device_token: Some("dev-token-1".into()),
            ..ServerOptions::default()
        },
        ..setup()
    })
    .await;
    let (_a, refused) = bind(&with_token.url, "nas", KEY).await;
    assert_eq!(refused.unwrap()["code"], "bad_token");
    let (_b, bound) = bind(&with_token.url, "nas", "dev-token-1").await;
    assert_eq!(bound.unwrap()["type"], "bound");

    // No device token and no API key: devices are off.
    let open_server = start(Setup {
        api_key: None,
        ..setup()
    })
    .await;
    let (_c, off) = bind(&open_server.url, "nas", "").await;
    assert_eq!(off.unwrap()["code"], "disabled");
}

/// A device declared with a token of its own binds with that token only:
/// neither the shared device token nor the API key nor another device's
/// token lets a waiter take its id. Undeclared ids still bind with the
/// shared token, and without one they are refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_declared_device_binds_only_with_its_own_token() {
    let own = |pairs: &[(&str, &str)]| {
        pairs
            .iter()
            .map(|(id, token)| ((*id).to_owned(), (*token).to_owned()))
            .collect()
    };
    let server = start(Setup {
        options: ServerOptions {
            device_token: Some("shared-token".into()),
            device_tokens: own(&[("nas", "nas-token"), ("pi", "pi-token")]),
            ..ServerOptions::default()
        },
        ..setup()
    })
    .await;
    for wrong in ["shared-token", KEY, "pi-token", ""] {
        let (_ws, answer) = bind(&server.url, "nas", wrong).await;
        let answer = answer.unwrap();
        assert_eq!(answer["code"], "bad_token", "nas with {wrong:?}: {answer}");
        assert!(
            answer["reason"].as_str().unwrap().contains("its own"),
            "{answer}"
        );
    }
    let (_nas, bound) = bind(&server.url, "nas", "nas-token").await;
    assert_eq!(bound.unwrap()["type"], "bound");
    // A device's own token is no key to other ids.
    let (_x, refused) = bind(&server.url, "garage", "nas-token").await;
    assert_eq!(refused.unwrap()["code"], "bad_token");
    let (_garage, bound) = bind(&server.url, "garage", "shared-token").await;
    assert_eq!(bound.unwrap()["type"], "bound");

    // Only declared devices, no shared token and no API key: devices are
    // on, for the declared ones.
    let declared_only = start(Setup {
        api_key: None,
        options: ServerOptions {
            device_tokens: own(&[("nas", "nas-token")]),
            ..ServerOptions::default()
        },
        ..setup()
    })
    .await;
    let (_y, refused) = bind(&declared_only.url, "garage", "").await;
    assert_eq!(refused.unwrap()["code"], "bad_token");
    let (_nas2, bound) = bind(&declared_only.url, "nas", "nas-token").await;
    assert_eq!(bound.unwrap()["type"], "bound");

    // With devices declared, the API key is no device token: a server
    // reachable from other machines has one, and undeclared ids would
    // otherwise bind with it.
    let with_key = start(Setup {
        options: ServerOptions {
            device_tokens: own(&[("nas", "nas-token")]),
            ..ServerOptions::default()
        },
        ..setup()
    })
    .await;
    let (_z, refused) = bind(&with_key.url, "garage", KEY).await;
    assert_eq!(refused.unwrap()["code"], "bad_token");
    // The refusal does not tell a declared id from an undeclared one.
    let declared = refused_reason(&with_key.url, "nas").await;
    let undeclared = refused_reason(&with_key.url, "garage").await;
    assert_eq!(
        declared.replace("nas", "ID"),
        undeclared.replace("garage", "ID")
    );
    // An empty token of its own never binds, even with an empty bind.
    let empty_own = start(Setup {
        options: ServerOptions {
            device_tokens: own(&[("nas", "")]),
            ..ServerOptions::default()
        },
        ..setup()
    })
    .await;
    let (_e, refused) = bind(&empty_own.url, "nas", "").await;
    assert_eq!(refused.unwrap()["code"], "bad_token");
}

async fn refused_reason(url: &str, id: &str) -> String {
    let (_ws, answer) = bind(url, id, "wrong").await;
    answer.unwrap()["reason"].as_str().unwrap().to_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pings_cannot_hold_an_unauthenticated_link_open() {
    let server = start(setup()).await;
    let mut ws = open(&server.url).await;
    let started = Instant::now();
    let answer = loop {
        // A ping every second, never a hello: the handshake's one deadline
        // still runs out.
        let _ = ws.send(Message::Ping(Default::default())).await;
        match tokio::time::timeout(Duration::from_secs(1), ws.next()).await {
            Ok(Some(Ok(Message::Text(text)))) => break json(text.as_str()),
            Ok(Some(Ok(_))) | Err(_) => {}
            Ok(None | Some(Err(_))) => panic!("closed without a refusal"),
        }
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "still open after 60 s"
        );
    };
    assert_eq!(answer["code"], "protocol");
    // A slow link is not a mistake to stop for: the waiter may try again
    // (with `retry: false` it exited for good, and systemd does not restart
    // it after a refusal).
    assert_eq!(answer["retry"], true, "{answer}");
    assert!(started.elapsed() >= homeagent_server::HANDSHAKE_TIMEOUT);
}

/// A device whose answer the server cannot read (a newer waiter's status,
/// a field this server does not know) has still answered: the call fails
/// at once, saying the answer was unreadable and why, instead of waiting
/// out its timeout and then blaming the device for silence. The link stays
/// bound, and the next command's readable answer goes through.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unreadable_answer_fails_its_call_at_once_naming_what_was_wrong() {
    let server = start(setup()).await;
    let (ws, answer) = bind(&server.url, "nas", KEY).await;
    assert_eq!(
        answer.unwrap(),
        json!({"type": "bound", "device_id": "nas"})
    );
    let (mut sink, mut stream) = ws.split();
    let _device = tokio::spawn(async move {
        while let Some(Ok(message)) = stream.next().await {
            let Message::Text(text) = message else {
                continue;
            };
            let frame = json(text.as_str());
            let req_id = frame["req_id"].clone();
            let result = match frame["command"].as_str() {
                Some("new-status") => json!({"type": "cmd_result", "req_id": req_id,
                    "status": "finished", "exit_code": 0}),
                Some("new-field") => json!({"type": "cmd_result", "req_id": req_id,
                    "status": "ok", "exit_code": 0, "stdout": "x".repeat(4000),
                    "cpu_ms": "y".repeat(4000)}),
                _ => json!({"type": "cmd_result", "req_id": req_id, "status": "ok",
                    "exit_code": 0, "stdout": "fine"}),
            };
            if sink.send(Message::text(result.to_string())).await.is_err() {
                return;
            }
        }
    });
    let ends = run_calls(
        &server,
        "main",
        &[
            device_call("nas", "new-status"),
            device_call("nas", "new-field"),
        ],
    )
    .await;
    assert_eq!(ends.len(), 2, "{ends:?}");
    for (end, named) in ends.iter().zip(["finished", "cpu_ms"]) {
        assert_eq!(end["status"], "error", "{end}");
        assert_eq!(end["error"]["reason"], "execution", "{end}");
        let detail = end["error"]["detail"].as_str().unwrap();
        assert!(
            detail.contains("device \"nas\" answered")
                && detail.contains("could not be read")
                && detail.contains(named),
            "{detail}"
        );
        // serde quotes what it could not take: never a page of it.
        assert!(detail.len() < 600, "{} bytes: {detail}", detail.len());
        let hint = end["error"]["hint"].as_str().unwrap_or_default();
        assert!(hint.contains("version"), "{end}");
    }
    let status = body_json(server.get("/api/v1/status").send().await.unwrap()).await;
    assert_eq!(status["devices"]["bound"][0]["id"], "nas", "{status}");
    assert_eq!(status["devices"]["bound"][0]["in_flight"], 0, "{status}");
    let ends = run_calls(&server, "main", &[device_call("nas", "plain")]).await;
    assert_eq!(ends[0]["status"], "ok", "{ends:?}");
}
