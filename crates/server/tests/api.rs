#![allow(clippy::unwrap_used, clippy::expect_used)] // a panic in a test is a test failure

//! Auth, the listen-address rule, body limits and request checking.

use crate::common;

use common::{KEY, Setup, body_json, start};
use homeagent_server::{ServeError, ServerOptions, bind};
use serde_json::json;

/// Every API route, with a body that would be accepted with the key.
fn routes() -> Vec<(&'static str, &'static str)> {
    vec![
        ("GET", "/v1/models"),
        ("POST", "/v1/chat/completions"),
        ("GET", "/api/v1/sessions"),
        ("GET", "/api/v1/sessions/s1"),
        ("DELETE", "/api/v1/sessions/s1"),
        ("POST", "/api/v1/sessions/s1/messages"),
        ("POST", "/api/v1/sessions/s1/stop"),
        ("GET", "/api/v1/events"),
        ("GET", "/api/v1/status"),
        ("GET", "/api/v1/tools"),
        ("GET", "/api/v1/sequences"),
        ("POST", "/api/v1/sequences"),
        ("GET", "/api/v1/sequences/s1"),
        ("DELETE", "/api/v1/sequences/s1"),
        ("GET", "/api/v1/no-such-route"),
    ]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_api_route_needs_the_key_and_answers_401_json_without_it() {
    let server = start(Setup::default()).await;
    let client = server.client();
    for (method, path) in routes() {
        let url = format!("{}{path}", server.url);
        let method: reqwest::Method = method.parse().unwrap();
        for auth in [None, Some("Bearer wrong-key"), Some("Bearer "), Some(KEY)] {
            let mut request = client.request(method.clone(), &url);
            if let Some(auth) = auth {
                request = request.header("authorization", auth);
            }
            let response = request.send().await.unwrap();
            assert_eq!(response.status(), 401, "{method} {path} with {auth:?}");
            let body = body_json(response).await;
            assert_eq!(body["error"]["code"], "unauthorized", "{body}");
            assert!(
                body["error"]["message"]
                    .as_str()
                    .unwrap()
                    .contains("Authorization: Bearer"),
                "{body}"
            );
        }
        // `?token=` is not a way in anywhere (URLs end up in proxy and
        // server logs), and the cookie only on the event stream.
        let response = client
            .request(method.clone(), format!("{url}?token={KEY}"))
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), 401, "{method} {path} with ?token");
        let body = body_json(response).await;
        assert!(
            body["error"]["message"]
                .as_str()
                .unwrap()
                .contains("not accepted in the URL"),
            "{body}"
        );
        if path != "/api/v1/events" {
            let response = client
                .request(method.clone(), &url)
                .header("cookie", format!("homeagent_token={KEY}"))
                .send()
                .await
                .unwrap();
            assert_eq!(response.status(), 401, "{method} {path} with the cookie");
        }
    }
    // With the key, the read-only routes answer.
    for path in [
        "/v1/models",
        "/api/v1/status",
        "/api/v1/tools",
        "/api/v1/sessions",
    ] {
        let response = server.get(path).send().await.unwrap();
        assert_eq!(response.status(), 200, "{path}");
    }
    // The dashboard page loads without the key (it asks for it).
    let page = client.get(&server.url).send().await.unwrap();
    assert_eq!(page.status(), 200);
    assert!(page.text().await.unwrap().contains("<html"));
}

/// `EventSource` cannot send headers, so the event stream also takes the
/// key as the `homeagent_token` cookie (what the dashboard sets), decoded
/// as `encodeURIComponent` wrote it; never in the URL.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_event_stream_takes_the_key_as_a_cookie_never_in_the_url() {
    // A key with the characters base64 and percent-encoding care about.
    let key = "k+y/=%;x";
    let server = start(Setup {
        api_key: Some(key),
        ..Setup::default()
    })
    .await;
    let client = server.client();
    let encoded = "k%2By%2F%3D%25%3Bx";
    let by_cookie = client
        .get(format!("{}/api/v1/events", server.url))
        // A stale cookie of the same name (another app on this host) first.
        .header(
            "cookie",
            format!("homeagent_token=stale; other=1; homeagent_token={encoded}"),
        )
        .send()
        .await
        .unwrap();
    assert_eq!(by_cookie.status(), 200);
    assert_eq!(by_cookie.headers()["content-type"], "text/event-stream");
    let by_query = client
        .get(format!("{}/api/v1/events?token={encoded}", server.url))
        .send()
        .await
        .unwrap();
    assert_eq!(by_query.status(), 401);
    let wrong = client
        .get(format!("{}/api/v1/events", server.url))
        .header("cookie", "homeagent_token=nope")
        .send()
        .await
        .unwrap();
    assert_eq!(wrong.status(), 401);

    // A base64 key set raw by a script: `+` in a cookie is a plus.
    let base64_key = "ab+c/d==";
    let server = start(Setup {
        api_key: Some(base64_key),
        ..Setup::default()
    })
    .await;
    let raw = server
        .client()
        .get(format!("{}/api/v1/events", server.url))
        .header("cookie", format!("homeagent_token={base64_key}"))
        .send()
        .await
        .unwrap();
    assert_eq!(raw.status(), 200);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_a_key_the_api_is_open_but_only_on_loopback() {
    let server = start(Setup {
        api_key: None,
        ..Setup::default()
    })
    .await;
    let response = server
        .client()
        .get(format!("{}/api/v1/status", server.url))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);

    for addr in ["0.0.0.0:0", "[::]:0"] {
        match bind(addr, None).await {
            Err(ServeError::NonLoopbackWithoutKey { addr: refused }) => assert_eq!(refused, addr),
            other => panic!("{addr}: expected a refusal, got {other:?}"),
        }
        let empty = bind(addr, Some("")).await;
        assert!(
            matches!(empty, Err(ServeError::NonLoopbackWithoutKey { .. })),
            "{empty:?}"
        );
    }
    let message = bind("0.0.0.0:0", None).await.unwrap_err().to_string();
    assert!(message.contains("HOMEAGENT_API_KEY"), "{message}");
    // With a key, any address; loopback needs none.
    bind("0.0.0.0:0", Some("k")).await.unwrap();
    bind("127.0.0.1:0", None).await.unwrap();
    assert!(matches!(
        bind("not an address", None).await,
        Err(ServeError::BadAddress { .. })
    ));
}

/// Clients that arrive all at once (a burst of sessions, a dashboard's
/// reconnects) wait in the listener's accept queue while the server is
/// busy. With the common default of 128 places, the kernel drops the
/// connections beyond it, and each client tries again a second later (the
/// one-second tail of the bench's blast). The listener keeps 1,024 places
/// (capped by `net.core.somaxconn`): 300 connections opened while nothing
/// accepts all complete.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_listener_queues_a_burst_of_connections_without_dropping_any() {
    let listener = bind("127.0.0.1:0", None).await.unwrap();
    let addr = listener.local_addr().unwrap();
    let connects = (0..300).map(|_| {
        tokio::time::timeout(
            std::time::Duration::from_secs(10),
            tokio::net::TcpStream::connect(addr),
        )
    });
    let results = futures_util::future::join_all(connects).await;
    let connected = results.iter().filter(|r| matches!(r, Ok(Ok(_)))).count();
    assert_eq!(
        connected, 300,
        "connections completed while nothing accepted (is net.core.somaxconn below 300?)"
    );
    drop(listener);
}

/// A restarted `homeagent serve` binds its port again at once, while the
/// connections its last run closed still wait out TIME_WAIT (a minute on
/// Linux); without `SO_REUSEADDR` the bind fails until they are gone.
#[cfg(unix)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restarted_server_binds_its_port_while_closed_connections_linger() {
    use tokio::io::AsyncReadExt;
    let listener = bind("127.0.0.1:0", None).await.unwrap();
    let addr = listener.local_addr().unwrap();
    let mut client = tokio::net::TcpStream::connect(addr).await.unwrap();
    let (accepted, _) = listener.accept().await.unwrap();
    // The server closes first, so its end is the one left in TIME_WAIT.
    drop(accepted);
    assert_eq!(client.read(&mut [0u8; 1]).await.unwrap(), 0);
    drop(client);
    drop(listener);
    let again = bind(&addr.to_string(), None).await;
    assert!(again.is_ok(), "{again:?}");
}

/// A path that does not exist and a method a route does not take both get
/// the API's JSON error (not an empty body), naming what to do instead; the
/// 405 keeps its `Allow` header.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unknown_routes_and_wrong_methods_get_json_errors() {
    let server = start(Setup::default()).await;
    let client = server.client();
    let missing = client
        .get(format!("{}/api/v1/nothing", server.url))
        .bearer_auth(KEY)
        .send()
        .await
        .unwrap();
    assert_eq!(missing.status(), 404);
    let answer = body_json(missing).await;
    assert_eq!(answer["error"]["code"], "not_found", "{answer}");
    assert!(
        answer["error"]["message"]
            .as_str()
            .unwrap()
            .contains("/api/v1/nothing"),
        "{answer}"
    );

    let wrong = client
        .put(format!("{}/v1/chat/completions", server.url))
        .bearer_auth(KEY)
        .send()
        .await
        .unwrap();
    assert_eq!(wrong.status(), 405);
    let allow = wrong
        .headers()
        .get("allow")
        .map(|v| v.to_str().unwrap().to_owned());
    assert_eq!(allow.as_deref(), Some("POST"));
    let answer = body_json(wrong).await;
    assert_eq!(answer["error"]["code"], "method_not_allowed", "{answer}");
    let message = answer["error"]["message"].as_str().unwrap();
    assert!(
        message.contains("PUT") && message.contains("/v1/chat/completions"),
        "{message}"
    );
    assert_eq!(answer["error"]["type"], "invalid_request_error", "{answer}");

    // A path segment that is not UTF-8, and a plain GET of the device
    // socket: axum's own refusals, in the API's shape too.
    for (path, status, code) in [
        ("/api/v1/sessions/%FF", 400, "invalid_path"),
        ("/api/v1/sequences/%FF", 400, "invalid_path"),
        ("/v1/models/%FF", 400, "invalid_path"),
        ("/api/v1/device/ws", 400, "websocket_expected"),
    ] {
        let response = client
            .get(format!("{}{path}", server.url))
            .bearer_auth(KEY)
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), status, "{path}");
        let answer = body_json(response).await;
        assert_eq!(answer["error"]["code"], code, "{path}: {answer}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn malformed_unknown_and_refused_requests_get_a_400_naming_the_problem() {
    let server = start(Setup {
        options: ServerOptions {
            body_limit: 4096,
            ..ServerOptions::default()
        },
        ..Setup::default()
    })
    .await;
    let client = server.client();
    let post = |path: &str, body: String| {
        client
            .post(format!("{}{path}", server.url))
            .bearer_auth(KEY)
            .header("content-type", "application/json")
            .body(body)
            .send()
    };
    let user = json!([{"role": "user", "content": "hi"}]);
    // (path, body, status, code, a piece of the message)
    let cases: Vec<(&str, String, u16, &str, &str)> = vec![
        ("/v1/chat/completions", "{\"model\": ".into(), 400, "invalid_json", "EOF"),
        ("/v1/chat/completions", "[1]".into(), 400, "invalid_request", "JSON object"),
        (
            "/v1/chat/completions",
            json!({"model": "homeagent", "messages": user, "temperatur": 1}).to_string(),
            400,
            "unknown_field",
            "`temperatur`",
        ),
        (
            "/v1/chat/completions",
            json!({"model": "homeagent", "messages": user, "user": 42}).to_string(),
            400,
            "invalid_request",
            "`user` must be a string",
        ),
        (
            "/v1/chat/completions",
            json!({"model": "homeagent", "messages": user,
                   "tools": [{"type": "function", "function": {"name": "x"}}]})
            .to_string(),
            400,
            "tools_not_supported",
            "runs its own tools",
        ),
        (
            "/v1/chat/completions",
            json!({"model": "homeagent", "messages": user, "functions": [{"name": "x"}]})
                .to_string(),
            400,
            "tools_not_supported",
            "`functions`",
        ),
        (
            "/v1/chat/completions",
            json!({"model": "homeagent", "messages": [
                {"role": "user", "content": "a"},
                {"role": "tool", "tool_call_id": "c1", "content": "r"},
                {"role": "user", "content": "b"}]})
            .to_string(),
            400,
            "tools_not_supported",
            "messages[1]",
        ),
        (
            "/v1/chat/completions",
            json!({"model": "gpt-4o", "messages": user}).to_string(),
            404,
            "model_not_found",
            "`homeagent`",
        ),
        (
            "/v1/chat/completions",
            json!({"model": "homeagent", "messages": [{"role": "assistant", "content": "x"}]})
                .to_string(),
            400,
            "invalid_request",
            "role `user`",
        ),
        (
            "/v1/chat/completions",
            json!({"model": "homeagent", "messages": [{"role": "user", "content": "x", "colour": 1}]})
                .to_string(),
            400,
            "invalid_request",
            "messages[0]: unknown field `colour`",
        ),
        (
            "/v1/chat/completions",
            json!({"model": "homeagent", "messages": user, "n": 2}).to_string(),
            400,
            "unsupported_parameter",
            "`n` is 2",
        ),
        (
            "/v1/chat/completions",
            json!({"model": "homeagent", "messages": user, "modalities": ["text", "audio"]})
                .to_string(),
            400,
            "unsupported_parameter",
            "`modalities`",
        ),
        (
            "/v1/chat/completions",
            json!({"model": "homeagent", "messages": user, "audio": {"voice": "alloy", "format": "wav"}})
                .to_string(),
            400,
            "unsupported_parameter",
            "`audio`",
        ),
        (
            "/v1/chat/completions",
            json!({"model": "homeagent", "messages": user, "web_search_options": {}}).to_string(),
            400,
            "unsupported_parameter",
            "`web_search_options`",
        ),
        (
            "/v1/chat/completions",
            json!({"model": "homeagent", "messages": user, "pad": "x".repeat(5000)}).to_string(),
            413,
            "body_too_large",
            "larger",
        ),
        (
            "/api/v1/sessions/s1/messages",
            json!({"text": "hi", "agnet": "main"}).to_string(),
            400,
            "invalid_request",
            "unknown field `agnet`",
        ),
        (
            "/api/v1/sessions/s1/messages",
            "{}".into(),
            400,
            "invalid_request",
            "missing field `text`",
        ),
        (
            "/api/v1/sessions/bad%20id/messages",
            json!({"text": "hi"}).to_string(),
            400,
            "invalid_session_id",
            "allowed set",
        ),
    ];
    for (path, body, status, code, piece) in cases {
        let response = post(path, body.clone()).await.unwrap();
        assert_eq!(response.status(), status, "{path} {body:.200}");
        let answer = body_json(response).await;
        assert_eq!(answer["error"]["code"], code, "{answer}");
        let message = answer["error"]["message"].as_str().unwrap();
        assert!(message.contains(piece), "{message:?} lacks {piece:?}");
        // OpenAI's shape: every member there; a 4xx other than 401 and 429
        // (a missing model included) is an invalid request.
        assert_eq!(
            answer["error"].get("param"),
            Some(&serde_json::Value::Null),
            "{answer}"
        );
        if status != 413 {
            assert_eq!(answer["error"]["type"], "invalid_request_error", "{answer}");
        }
    }
    // Fields OpenAI clients send are accepted (and ignored).
    let response = post(
        "/v1/chat/completions",
        json!({"model": "homeagent", "messages": user, "temperature": 0.2, "user": "u",
               "max_tokens": 10, "n": 1, "stream": false, "tool_choice": "auto"})
        .to_string(),
    )
    .await
    .unwrap();
    assert_eq!(response.status(), 200);
    // An assistant message with no calls, said as an empty list (clients
    // other than the official one send it so), is plain text.
    let response = post(
        "/v1/chat/completions",
        json!({"model": "homeagent", "messages": [
            {"role": "user", "content": "a"},
            {"role": "assistant", "content": "b", "tool_calls": []},
            {"role": "user", "content": "c"}]})
        .to_string(),
    )
    .await
    .unwrap();
    assert_eq!(response.status(), 200);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn models_lists_homeagent_and_tools_and_status_describe_the_agent() {
    let server = start(Setup::default()).await;
    let models = body_json(server.get("/v1/models").send().await.unwrap()).await;
    assert_eq!(
        models,
        json!({"object": "list", "data": [
            {"id": "homeagent", "object": "model", "created": 0, "owned_by": "homeagent"}]})
    );
    // One model, as the official clients' `models.retrieve` reads it.
    let model = body_json(server.get("/v1/models/homeagent").send().await.unwrap()).await;
    assert_eq!(model, models["data"][0]);
    let other = server.get("/v1/models/gpt-4o").send().await.unwrap();
    assert_eq!(other.status(), 404);
    let other = body_json(other).await;
    assert_eq!(other["error"]["code"], "model_not_found", "{other}");
    assert!(
        other["error"]["message"]
            .as_str()
            .unwrap()
            .contains("`homeagent`"),
        "{other}"
    );
    let tools = body_json(server.get("/api/v1/tools").send().await.unwrap()).await;
    let tools = tools["tools"].as_array().unwrap();
    let sleep = tools.iter().find(|t| t["name"] == "demo_sleep").unwrap();
    assert_eq!(sleep["source"], "demo");
    assert_eq!(sleep["parallel_safe"], true);
    let note = tools.iter().find(|t| t["name"] == "demo_note").unwrap();
    assert_eq!(note["parallel_safe"], false);

    let status = body_json(server.get("/api/v1/status").send().await.unwrap()).await;
    assert_eq!(status["tools"]["total"], tools.len());
    assert_eq!(status["tools"]["by_source"]["demo"], 3);
    assert_eq!(status["sources"][0]["name"], "demo");
    assert_eq!(status["sources"][0]["protocol"], "demo");
    assert_eq!(status["sources"][0]["healthy"], true);
    assert_eq!(status["scheduler"]["executed"], 0);
    assert_eq!(status["store"], json!({"commits": 0, "writes": 0}));
    assert!(status["uptime_ms"].is_u64());
    assert_eq!(status["events"]["ring_capacity"], 4096);
}

/// A server with this body timeout on `threads` serving threads, and its
/// `host:port` for a raw connection.
async fn with_body_timeout(
    timeout: std::time::Duration,
    threads: usize,
) -> (common::TestServer, String) {
    let server = start(Setup {
        options: homeagent_server::state::ServerOptions {
            body_timeout: timeout,
            ..Default::default()
        },
        threads,
        ..Setup::default()
    })
    .await;
    let address = server.url.trim_start_matches("http://").to_owned();
    (server, address)
}

/// The head of a completions request announcing `length` body bytes.
fn completions_head(address: &str, length: usize) -> String {
    format!(
        "POST /v1/chat/completions HTTP/1.1\r\nHost: {address}\r\nAuthorization: Bearer {}\r\n\
         Content-Type: application/json\r\nContent-Length: {length}\r\n\r\n",
        common::KEY
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_body_that_trickles_in_is_refused_after_the_body_timeout() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let timeout = std::time::Duration::from_millis(400);
    let (_server, address) = with_body_timeout(timeout, 1).await;
    let mut stream = tokio::net::TcpStream::connect(&address).await.unwrap();
    let started = std::time::Instant::now();
    // Announce 100 bytes, send 9, then nothing.
    stream
        .write_all(format!("{}{{\"model\":", completions_head(&address, 100)).as_bytes())
        .await
        .unwrap();
    let mut answer = Vec::new();
    let mut buf = [0u8; 4096];
    // Read until the head and the JSON body are in (the server may keep
    // the connection open after answering).
    while !String::from_utf8_lossy(&answer).contains("body_timeout") {
        let n = tokio::time::timeout(std::time::Duration::from_secs(30), stream.read(&mut buf))
            .await
            .expect("the server answers the stalled request")
            .unwrap();
        if n == 0 {
            break;
        }
        answer.extend_from_slice(&buf[..n]);
    }
    let text = String::from_utf8_lossy(&answer);
    assert!(text.starts_with("HTTP/1.1 408"), "{text}");
    assert!(text.contains("body_timeout"), "{text}");
    assert!(started.elapsed() >= timeout, "{:?}", started.elapsed());
}

/// The body timeout bounds the whole body, not the pause between two of
/// its pieces: a byte every 100 ms never pauses 400 ms, and is still
/// refused once 400 ms have passed since the request arrived.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_body_that_keeps_trickling_is_refused_after_the_body_timeout() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let timeout = std::time::Duration::from_millis(400);
    let (_server, address) = with_body_timeout(timeout, 1).await;
    let stream = tokio::net::TcpStream::connect(&address).await.unwrap();
    let (mut reader, mut writer) = stream.into_split();
    let started = std::time::Instant::now();
    writer
        .write_all(completions_head(&address, 100_000).as_bytes())
        .await
        .unwrap();
    // One space every 100 ms, for up to 30 s, until the server has answered.
    let trickle = tokio::spawn(async move {
        for _ in 0..300 {
            if writer.write_all(b" ").await.is_err() {
                return;
            }
            tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        }
    });
    let mut answer = Vec::new();
    let mut buf = [0u8; 4096];
    while !String::from_utf8_lossy(&answer).contains("\r\n\r\n{") {
        let n = tokio::time::timeout(std::time::Duration::from_secs(40), reader.read(&mut buf))
            .await
            .expect("the server answers the trickling request")
            .unwrap();
        if n == 0 {
            break;
        }
        answer.extend_from_slice(&buf[..n]);
    }
    trickle.abort();
    let text = String::from_utf8_lossy(&answer);
    assert!(text.starts_with("HTTP/1.1 408"), "{text}");
    assert!(started.elapsed() >= timeout, "{:?}", started.elapsed());
}

/// A connection whose request head never completes (a slowloris client,
/// or one that connects and says nothing) is closed after the same
/// timeout as a trickling body, in both cases: it cannot hold a task and a
/// descriptor forever. A connection on several serving threads alike.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_head_that_never_completes_is_closed_after_the_timeout() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let timeout = std::time::Duration::from_millis(400);
    for threads in [1, 2] {
        let (server, address) = with_body_timeout(timeout, threads).await;
        for partial in ["", "GET /api/v1/status HTTP/1.1\r\nHost: x\r\n"] {
            // Before the connect: the server's clock for a head starts
            // when it accepts the connection, which may come before the
            // connect's own return is seen here.
            let started = std::time::Instant::now();
            let mut stream = tokio::net::TcpStream::connect(&address).await.unwrap();
            stream.write_all(partial.as_bytes()).await.unwrap();
            let mut buf = [0u8; 1024];
            // The server closes (end of stream or a reset), perhaps after a
            // 408; the 30 s only keeps a broken build from hanging here.
            loop {
                let read =
                    tokio::time::timeout(std::time::Duration::from_secs(30), stream.read(&mut buf))
                        .await
                        .unwrap_or_else(|_| panic!("{threads} threads, {partial:?}: still open"));
                match read {
                    Ok(0) | Err(_) => break,
                    Ok(_) => {}
                }
            }
            assert!(
                started.elapsed() >= timeout,
                "{threads} threads, {partial:?}: {:?}",
                started.elapsed()
            );
        }
        // Requests that do complete are still served.
        let response = reqwest::Client::new()
            .get(format!("{}/api/v1/status", server.url))
            .bearer_auth(common::KEY)
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), 200, "{threads} threads");
    }
}

/// Without a key the server listens on loopback only, but any web page the
/// person opens can still reach loopback: a cross-site "simple" POST (no
/// preflight) or a page whose name was rebound to 127.0.0.1. Requests that
/// a browser marks as coming from another site, or that name a host other
/// than loopback, are refused; local clients (no `Origin`) and the
/// dashboard (same origin) are not.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_a_key_browsers_of_other_sites_are_refused() {
    let server = start(Setup {
        api_key: None,
        ..Setup::default()
    })
    .await;
    let port = server.url.rsplit(':').next().unwrap().to_owned();
    let body = json!({"model": "homeagent", "messages": [{"role": "user", "content": "!text hi"}]})
        .to_string();
    let post = |origin: Option<String>, host: Option<String>| {
        let mut request = server
            .client()
            .post(format!("{}/v1/chat/completions", server.url))
            .header("content-type", "text/plain;charset=UTF-8")
            .body(body.clone());
        if let Some(origin) = origin {
            request = request.header("origin", origin);
        }
        if let Some(host) = host {
            request = request.header("host", host);
        }
        request.send()
    };
    for (origin, host) in [
        (Some("https://evil.example".to_owned()), None),
        (
            Some("https://evil.example".to_owned()),
            Some(format!("evil.example:{port}")),
        ),
        (None, Some(format!("evil.example:{port}"))),
        (Some("null".to_owned()), None),
        (Some(format!("http://127.0.0.1:{port}.evil.example")), None),
    ] {
        let response = post(origin.clone(), host.clone()).await.unwrap();
        assert_eq!(response.status(), 403, "origin {origin:?}, host {host:?}");
        let error = body_json(response).await;
        assert_eq!(error["error"]["code"], "foreign_origin", "{error}");
    }
    for (origin, host) in [
        (None, None),
        (Some(format!("http://127.0.0.1:{port}")), None),
        (
            Some(format!("http://localhost:{port}")),
            Some(format!("localhost:{port}")),
        ),
    ] {
        let response = post(origin.clone(), host.clone()).await.unwrap();
        assert_eq!(response.status(), 200, "origin {origin:?}, host {host:?}");
    }
    let events = server
        .get("/api/v1/sessions")
        .header("host", format!("rebound.example:{port}"))
        .send()
        .await
        .unwrap();
    assert_eq!(events.status(), 403);
}

/// What real clients send besides OpenAI's core fields: the sampling knobs
/// of other servers that Open WebUI and LibreChat pass through (`top_k`,
/// `min_p`, ...), OpenAI's `prediction` and text-only `modalities`, and
/// assistant messages as OpenAI returned them (`annotations`, `refusal`)
/// or as DeepSeek clients keep them (`reasoning_content`). All are
/// accepted; a misspelt field still is not.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fields_real_clients_send_are_accepted() {
    let server = start(Setup::default()).await;
    let body = json!({
        "model": "homeagent",
        "messages": [
            {"role": "user", "content": "hi"},
            {"role": "assistant", "content": "Hello.", "annotations": [], "refusal": null,
             "reasoning_content": "greet back"},
            {"role": "user", "content": "!text again"}
        ],
        "top_k": 40, "min_p": 0.05, "repetition_penalty": 1.1, "typical_p": 1.0,
        "prediction": {"type": "content", "content": "x"},
        "modalities": ["text"],
        // The current SDK's prompt-cache and moderation settings.
        "prompt_cache_retention": "24h",
        "prompt_cache_options": {"mode": "auto"},
        "moderation": null
    });
    let response = server
        .post_json("/v1/chat/completions", &body)
        .send()
        .await
        .unwrap();
    let status = response.status();
    let answer = body_json(response).await;
    assert_eq!(status, 200, "{answer}");
    assert_eq!(answer["object"], "chat.completion");
}
