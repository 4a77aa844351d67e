#![allow(clippy::unwrap_used, clippy::expect_used)] // a panic in a test is a test failure

//! The HTTP transport over real loopback HTTP: against the mock LLM server
//! for all four wires (calls, errors, silence, cancellation), and against a
//! tiny scripted server for what the mock does not do (401, Retry-After,
//! bodies that end early).

use std::time::{Duration, Instant};

use axum::Router;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use homeagent_core::{AssembledTurn, CancellationToken, Message, StreamAssembler, StreamEvent};
use homeagent_llm::{
    ChatRequest, Endpoint, HttpProvider, Options, Protocol, ProviderError, ToolSpec,
};
use homeagent_mock_llm::{MockServer, ServerConfig};
use serde_json::{Value, json};

const KEY: &str = "sk-test-4f9c1e7a-never-log-me";

async fn start_mock(config: ServerConfig) -> MockServer {
    MockServer::start("127.0.0.1:0", config).await.unwrap()
}

/// Each SDK's convention: OpenAI-compatible base URLs end in /v1.
fn endpoint(base: &str, protocol: Protocol) -> Endpoint {
    let base_url = match protocol {
        Protocol::Openai => format!("{base}/v1"),
        _ => base.to_owned(),
    };
    Endpoint {
        base_url,
        api_key: Some(KEY.into()),
    }
}

fn provider(base: &str, protocol: Protocol, options: Options) -> HttpProvider {
    HttpProvider::new(protocol, endpoint(base, protocol), options).unwrap()
}

fn chat(text: &str) -> ChatRequest {
    ChatRequest {
        model: "mock-model".into(),
        messages: vec![Message::user(text)],
        tools: vec![ToolSpec::new(
            "demo_sleep",
            "Sleeps ms milliseconds and returns its tag.",
            &json!({"type": "object", "properties": {
                "ms": {"type": "integer"}, "tag": {"type": "string"}}}),
        )],
        max_tokens: 512,
        temperature: None,
        stream: true,
        rendered: Default::default(),
    }
}

fn assemble(events: Vec<StreamEvent>) -> AssembledTurn {
    let mut assembler = StreamAssembler::new();
    for event in events {
        assembler.push(event);
    }
    assembler.finish()
}

async fn stat(server: &MockServer, key: &str) -> Value {
    let body = reqwest::get(format!("{}/stats", server.url()))
        .await
        .unwrap()
        .bytes()
        .await
        .unwrap();
    serde_json::from_slice::<Value>(&body).unwrap()[key].clone()
}

/// Polls `/stats` (a bounded number of times) until no request is in flight.
async fn wait_for_no_request_in_flight(server: &MockServer) {
    let mut left = Value::Null;
    for _ in 0..100 {
        left = stat(server, "in_flight_requests").await;
        if left == json!(0) {
            return;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    panic!("the mock still serves {left} request(s): the connection outlived its client");
}

fn assert_four_demo_sleeps(turn: &AssembledTurn, what: &str) {
    let tag = turn.calls[0].call.arguments["tag"].as_str().unwrap();
    let nonce = tag
        .strip_prefix("done-")
        .and_then(|t| t.strip_suffix("-0"))
        .unwrap();
    let got: Vec<(&str, &Value)> = turn
        .calls
        .iter()
        .map(|c| (c.call.name.as_str(), &c.call.arguments))
        .collect();
    let expected: Vec<Value> = (0..4)
        .map(|i| json!({"ms": 150 + 5 * i, "tag": format!("done-{nonce}-{i}")}))
        .collect();
    let expected: Vec<(&str, &Value)> = expected.iter().map(|a| ("demo_sleep", a)).collect();
    assert_eq!(got, expected, "{what}");
    assert!(
        turn.calls.iter().all(|c| c.argument_error.is_none()),
        "{what}"
    );
}

async fn slowbatch4_streamed_and_complete(protocol: Protocol) {
    let server = start_mock(ServerConfig::default()).await;
    let provider = provider(&server.url(), protocol, Options::default());

    let mut stream = provider
        .stream(&chat("!slowbatch4"), CancellationToken::new())
        .await
        .unwrap();
    let mut events = Vec::new();
    while let Some(item) = stream.next().await {
        events.push(item.unwrap());
    }
    assert_four_demo_sleeps(&assemble(events), "streamed");

    // A request that says stream=false is streamed all the same by `stream`.
    let mut whole = chat("!slowbatch4");
    whole.stream = false;
    let events = provider
        .stream(&whole, CancellationToken::new())
        .await
        .unwrap()
        .collect()
        .await
        .unwrap();
    assert_four_demo_sleeps(&assemble(events), "streamed from a stream=false request");

    let events = provider
        .complete(&chat("!slowbatch4"), CancellationToken::new())
        .await
        .unwrap();
    assert_four_demo_sleeps(&assemble(events), "complete");
    assert_eq!(stat(&server, "batches").await, json!(3));
    server.shutdown().await.unwrap();
}

async fn err_is_a_status_500_with_the_mocks_message(protocol: Protocol) {
    let server = start_mock(ServerConfig::default()).await;
    let provider = provider(&server.url(), protocol, Options::default());
    let streamed = provider
        .stream(&chat("!err"), CancellationToken::new())
        .await
        .err();
    let whole = provider
        .complete(&chat("!err"), CancellationToken::new())
        .await
        .err();
    for err in [streamed, whole] {
        match err {
            Some(ProviderError::Status {
                status: 500,
                message,
                retry_after: None,
            }) => assert!(
                message.contains("the mock model failed on purpose (!err)"),
                "{message:?}"
            ),
            other => panic!("expected a 500 with the mock's message, got {other:?}"),
        }
    }
    server.shutdown().await.unwrap();
}

/// A body that keeps coming (keep-alive pings, comments, empty chunks, or
/// an answer slower than anyone waits for) reset the idle timer with every
/// byte and was read for ever: the whole body is bounded too
/// (`llm.request_timeout`), with an error that names the setting.
#[tokio::test]
async fn a_body_that_keeps_coming_is_cut_at_the_request_timeout() {
    let server = start_mock(ServerConfig {
        chunk_delay_ms: 150,
        ..ServerConfig::default()
    })
    .await;
    let total = Duration::from_millis(500);
    let options = Options {
        stream_idle_timeout: Duration::from_secs(30),
        request_timeout: total,
        ..Options::default()
    };
    let provider = provider(&server.url(), Protocol::Openai, options);
    let started = Instant::now();
    let mut stream = provider
        .stream(&chat("!text"), CancellationToken::new())
        .await
        .unwrap();
    let (mut content, mut error) = (0, None);
    while let Some(item) = stream.next().await {
        match item {
            Ok(_) => content += 1,
            Err(err) => error = Some(err),
        }
    }
    assert!(content > 0, "some of the answer came first");
    assert_eq!(error, Some(ProviderError::RequestTimeout { after: total }));
    assert!(started.elapsed() >= total, "{:?}", started.elapsed());
    let message = error.unwrap().to_string();
    assert!(message.contains("llm.request_timeout"), "{message}");
    drop(stream);
    server.shutdown().await.unwrap();
}

async fn hang_is_cut_by_the_idle_timeout(protocol: Protocol) {
    let server = start_mock(ServerConfig::default()).await;
    let idle = Duration::from_millis(300);
    let options = Options {
        stream_idle_timeout: idle,
        ..Options::default()
    };
    let provider = provider(&server.url(), protocol, options);

    let started = Instant::now();
    let mut stream = provider
        .stream(&chat("!hang"), CancellationToken::new())
        .await
        .unwrap();
    let mut error = None;
    while let Some(item) = stream.next().await {
        if let Err(err) = item {
            error = Some(err);
        }
    }
    assert_eq!(error, Some(ProviderError::IdleTimeout { after: idle }));
    assert!(started.elapsed() >= idle, "{:?}", started.elapsed());
    drop(stream);
    wait_for_no_request_in_flight(&server).await;

    let started = Instant::now();
    let err = provider
        .complete(&chat("!hang"), CancellationToken::new())
        .await
        .err();
    assert_eq!(err, Some(ProviderError::IdleTimeout { after: idle }));
    assert!(started.elapsed() >= idle, "{:?}", started.elapsed());
    // The message names the setting that would let a slow model finish.
    let message = err.unwrap().to_string();
    assert!(message.contains("llm.stream_idle_timeout"), "{message}");
    wait_for_no_request_in_flight(&server).await;
    assert_eq!(stat(&server, "hangs").await, json!(2));
    server.shutdown().await.unwrap();
}

/// The idle timeout is silence between pieces of the body, not the length
/// of the stream: a stream whose chunks keep coming, each well within the
/// timeout, runs to its end however long it takes in all. (The timeout is
/// the transport's, the same for every protocol; OpenAI's stream has the
/// most chunks for one prompt.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_steady_stream_outlives_the_idle_timeout() {
    let protocol = Protocol::Openai;
    let server = start_mock(ServerConfig {
        chunk_delay_ms: 200,
        ..ServerConfig::default()
    })
    .await;
    let idle = Duration::from_millis(500);
    let options = Options {
        stream_idle_timeout: idle,
        ..Options::default()
    };
    let provider = provider(&server.url(), protocol, options);
    let started = Instant::now();
    let events = provider
        .stream(&chat("!batch2"), CancellationToken::new())
        .await
        .unwrap()
        .collect()
        .await
        .unwrap();
    assert!(
        started.elapsed() > idle,
        "the stream must outlast the timeout for this test to mean anything: {:?}",
        started.elapsed()
    );
    assert_eq!(assemble(events).calls.len(), 2);
    server.shutdown().await.unwrap();
}

/// Cancelling mid-stream ends the stream with `Cancelled` and drops the
/// connection, though the caller still holds the stream. `!hang` sends part
/// of a body and then stalls forever, so the mock's in-flight count drops
/// only because the client went away.
async fn cancel_mid_stream_drops_the_connection(protocol: Protocol) {
    let server = start_mock(ServerConfig::default()).await;
    let provider = provider(&server.url(), protocol, Options::default());
    let cancel = CancellationToken::new();
    let mut stream = provider
        .stream(&chat("!hang"), cancel.clone())
        .await
        .unwrap();
    assert_eq!(stat(&server, "in_flight_requests").await, json!(1));
    let canceller = {
        let cancel = cancel.clone();
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(100)).await;
            cancel.cancel();
        })
    };
    // Events of the partial body may come out first; then the cancellation.
    let error = loop {
        match stream.next().await {
            Some(Ok(_)) => {}
            Some(Err(err)) => break err,
            None => panic!("the stream ended without reporting the cancellation"),
        }
    };
    assert_eq!(error, ProviderError::Cancelled);
    canceller.await.unwrap();
    // The connection is gone although the caller still holds the stream.
    wait_for_no_request_in_flight(&server).await;
    assert_eq!(stream.next().await, None);
    server.shutdown().await.unwrap();
}

/// Events come out while the body is still streaming, not after it: the
/// first event arrives while the mock is still serving the request (it waits
/// between chunks). Dropping the stream then frees the server.
async fn first_event_before_the_body_ends(protocol: Protocol) {
    let server = start_mock(ServerConfig {
        chunk_delay_ms: 300,
        ..ServerConfig::default()
    })
    .await;
    let provider = provider(&server.url(), protocol, Options::default());
    let mut stream = provider
        .stream(&chat("!slowbatch4"), CancellationToken::new())
        .await
        .unwrap();
    let first = stream.next().await.unwrap();
    assert!(first.is_ok(), "{first:?}");
    assert_eq!(stat(&server, "in_flight_requests").await, json!(1));
    drop(stream);
    wait_for_no_request_in_flight(&server).await;
    server.shutdown().await.unwrap();
}

/// The per-protocol tests against the mock.
macro_rules! against_the_mock {
    ($module:ident, $protocol:expr) => {
        mod $module {
            use super::*;

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn slowbatch4_assembles_to_four_calls_streamed_and_complete() {
                slowbatch4_streamed_and_complete($protocol).await;
            }

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn err_is_status_500_with_the_providers_message() {
                err_is_a_status_500_with_the_mocks_message($protocol).await;
            }

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn hang_is_an_idle_timeout() {
                hang_is_cut_by_the_idle_timeout($protocol).await;
            }

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn cancel_mid_stream_is_cancelled_and_frees_the_server() {
                cancel_mid_stream_drops_the_connection($protocol).await;
            }

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn events_arrive_while_the_body_streams() {
                first_event_before_the_body_ends($protocol).await;
            }
        }
    };
}

against_the_mock!(openai, Protocol::Openai);
against_the_mock!(anthropic, Protocol::Anthropic);
against_the_mock!(gemini, Protocol::Gemini);
against_the_mock!(ollama, Protocol::Ollama);

#[tokio::test]
async fn a_closed_port_is_a_connect_error() {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    drop(listener);
    for protocol in Protocol::ALL {
        let provider = provider(&base, protocol, Options::default());
        let streamed = provider
            .stream(&chat("!text"), CancellationToken::new())
            .await
            .err();
        assert!(
            matches!(streamed, Some(ProviderError::Connect { .. })),
            "{protocol:?}: {streamed:?}"
        );
        let whole = provider
            .complete(&chat("!text"), CancellationToken::new())
            .await
            .err();
        assert!(
            matches!(whole, Some(ProviderError::Connect { .. })),
            "{protocol:?}: {whole:?}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancelling_before_the_headers_is_cancelled() {
    let server = start_mock(ServerConfig {
        delay_ms: 5_000,
        ..ServerConfig::default()
    })
    .await;
    let provider = provider(&server.url(), Protocol::Ollama, Options::default());
    let cancel = CancellationToken::new();
    let canceller = {
        let cancel = cancel.clone();
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(100)).await;
            cancel.cancel();
        })
    };
    let err = provider.complete(&chat("!text"), cancel).await.err();
    assert_eq!(err, Some(ProviderError::Cancelled));
    canceller.await.unwrap();
    wait_for_no_request_in_flight(&server).await;
    server.shutdown().await.unwrap();
}

// ---------------------------------------------------------------------------
// A tiny scripted server: one canned response for every request.

#[derive(Clone)]
struct Canned {
    status: u16,
    headers: Vec<(&'static str, String)>,
    body: String,
}

struct TinyServer {
    url: String,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for TinyServer {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn tiny_server(canned: Canned) -> TinyServer {
    let app = Router::new().fallback(move || {
        let canned = canned.clone();
        async move {
            let mut response: Response = (
                StatusCode::from_u16(canned.status).unwrap(),
                canned.body.clone(),
            )
                .into_response();
            for (name, value) in canned.headers {
                response.headers_mut().insert(name, value.parse().unwrap());
            }
            response
        }
    });
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let task = tokio::spawn(async move {
        axum::serve(listener, app).await.unwrap();
    });
    TinyServer { url, task }
}

fn canned(status: u16, body: &str) -> Canned {
    Canned {
        status,
        headers: vec![("content-type", "application/json".into())],
        body: body.into(),
    }
}

#[tokio::test]
async fn status_401_is_unauthorized_on_every_wire() {
    for status in [401] {
        let server = tiny_server(canned(
            status,
            r#"{"error":{"message":"invalid api key","type":"authentication_error"}}"#,
        ))
        .await;
        for protocol in Protocol::ALL {
            let provider = provider(&server.url, protocol, Options::default());
            let streamed = provider
                .stream(&chat("hi"), CancellationToken::new())
                .await
                .err();
            let whole = provider
                .complete(&chat("hi"), CancellationToken::new())
                .await
                .err();
            for err in [streamed, whole] {
                assert!(
                    matches!(&err, Some(ProviderError::Unauthorized { status: s, .. }) if *s == status),
                    "{protocol:?}: {err:?}"
                );
                let err = err.unwrap();
                assert!(!err.is_retryable());
                // The status is named once, by the wire's message.
                let text = err.to_string();
                assert_eq!(
                    text.matches(&status.to_string()).count(),
                    1,
                    "{protocol:?}: {text}"
                );
                assert!(text.contains("invalid api key"), "{protocol:?}: {text}");
            }
        }
    }
}

/// Gemini names its wait in the body, not in a Retry-After header
/// (`RetryInfo.retryDelay` among the error's details): read as the
/// Retry-After it stands for, so a 429 on the free tier is retried after
/// the wait it asked for, not 200 ms later. A header still wins.
#[tokio::test]
async fn geminis_retry_delay_in_the_body_is_a_retry_after() {
    let body = r#"{"error":{"code":429,"message":"Resource has been exhausted","status":"RESOURCE_EXHAUSTED","details":[{"@type":"type.googleapis.com/google.rpc.QuotaFailure"},{"@type":"type.googleapis.com/google.rpc.RetryInfo","retryDelay":"7.5s"}]}}"#;
    let server = tiny_server(canned(429, body)).await;
    let err = provider(&server.url, Protocol::Gemini, Options::default())
        .stream(&chat("hi"), CancellationToken::new())
        .await
        .err();
    assert!(
        matches!(&err, Some(ProviderError::Status { status: 429, retry_after: Some(after), .. })
            if *after == Duration::from_millis(7500)),
        "{err:?}"
    );
    let mut with_header = canned(429, body);
    with_header.headers.push(("retry-after", "3".into()));
    let server = tiny_server(with_header).await;
    let err = provider(&server.url, Protocol::Gemini, Options::default())
        .stream(&chat("hi"), CancellationToken::new())
        .await
        .err();
    assert_eq!(
        err.and_then(|e| e.retry_after()),
        Some(Duration::from_secs(3))
    );
}

#[tokio::test]
async fn retry_after_is_read_on_429_and_503() {
    let cases = [
        (429, "7".to_owned(), Duration::from_secs(7)),
        (503, "120".to_owned(), Duration::from_secs(120)),
        // An HTTP date about 90 s from now: whole seconds, so 88..=90 s.
        (
            503,
            httpdate::fmt_http_date(std::time::SystemTime::now() + Duration::from_secs(90)),
            Duration::from_secs(90),
        ),
    ];
    for (status, header, expected) in cases {
        let mut response = canned(
            status,
            r#"{"error":{"message":"slow down","type":"rate_limit_error"}}"#,
        );
        response.headers.push(("retry-after", header.clone()));
        let server = tiny_server(response).await;
        let provider = provider(&server.url, Protocol::Openai, Options::default());
        let err = provider
            .stream(&chat("hi"), CancellationToken::new())
            .await
            .err();
        let Some(ProviderError::Status {
            status: got,
            message,
            retry_after: Some(after),
        }) = err
        else {
            panic!("{status} with Retry-After {header}: {err:?}");
        };
        assert_eq!(got, status);
        assert!(message.contains("slow down"), "{message:?}");
        assert!(
            after <= expected && after + Duration::from_secs(2) >= expected,
            "Retry-After {header}: {after:?}"
        );
    }
    // No header, no delay.
    let server = tiny_server(canned(503, "{}")).await;
    let err = provider(&server.url, Protocol::Openai, Options::default())
        .complete(&chat("hi"), CancellationToken::new())
        .await
        .err();
    assert!(
        matches!(
            err,
            Some(ProviderError::Status {
                status: 503,
                retry_after: None,
                ..
            })
        ),
        "{err:?}"
    );
}

/// Reads a stream to its end; returns the events and the error, if any.
async fn drain(provider: &HttpProvider) -> (Vec<StreamEvent>, Option<ProviderError>) {
    let mut stream = provider
        .stream(&chat("hi"), CancellationToken::new())
        .await
        .unwrap();
    let mut events = Vec::new();
    while let Some(item) = stream.next().await {
        match item {
            Ok(event) => events.push(event),
            Err(err) => return (events, Some(err)),
        }
    }
    (events, None)
}

#[tokio::test]
async fn a_stream_without_its_end_marker_is_cut_after_its_events() {
    let body = concat!(
        r#"data: {"id":"c1","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"role":"assistant","content":"Hel"},"finish_reason":null}]}"#,
        "\n\n",
        r#"data: {"id":"c1","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"content":"lo"},"finish_reason":"stop"}]}"#,
        "\n\n",
    );
    let server = tiny_server(canned(200, body)).await;
    let provider = provider(&server.url, Protocol::Openai, Options::default());
    let (events, err) = drain(&provider).await;
    assert!(matches!(err, Some(ProviderError::Cut { .. })), "{err:?}");
    // The events before the cut still came out, in order.
    assert_eq!(assemble(events).text, "Hello");

    // The same body with its end marker is complete.
    let server = tiny_server(canned(200, &format!("{body}data: [DONE]\n\n"))).await;
    let provider = self::provider(&server.url, Protocol::Openai, Options::default());
    let (events, err) = drain(&provider).await;
    assert_eq!(err, None);
    assert_eq!(assemble(events).text, "Hello");
}

#[tokio::test]
async fn a_gemini_stream_ends_with_its_body_but_only_after_a_finish_reason() {
    let chunk = |finish: &str| {
        format!(
            "data: {}\n\n",
            json!({"candidates": [{"content": {"role": "model", "parts": [{"text": "Hi"}]},
                                   "finishReason": finish}]})
        )
    };
    let server = tiny_server(canned(200, &chunk("STOP"))).await;
    let (events, err) = drain(&provider(&server.url, Protocol::Gemini, Options::default())).await;
    assert_eq!(err, None);
    assert_eq!(assemble(events).text, "Hi");

    let no_finish = format!(
        "data: {}\n\n",
        json!({"candidates": [{"content": {"role": "model", "parts": [{"text": "Hi"}]}}]})
    );
    let server = tiny_server(canned(200, &no_finish)).await;
    let (events, err) = drain(&provider(&server.url, Protocol::Gemini, Options::default())).await;
    assert!(matches!(err, Some(ProviderError::Cut { .. })), "{err:?}");
    assert_eq!(assemble(events).text, "Hi");
}

#[tokio::test]
async fn an_empty_body_is_cut_on_every_wire_streamed_and_whole() {
    let server = tiny_server(canned(200, "")).await;
    for protocol in Protocol::ALL {
        let provider = provider(&server.url, protocol, Options::default());
        let (events, err) = drain(&provider).await;
        assert!(events.is_empty());
        assert!(
            matches!(err, Some(ProviderError::Cut { .. })),
            "{protocol:?}: {err:?}"
        );
        let whole = provider
            .complete(&chat("hi"), CancellationToken::new())
            .await
            .err();
        assert!(
            matches!(whole, Some(ProviderError::Cut { .. })),
            "{protocol:?}: {whole:?}"
        );
    }
}

/// What a capturing server received: the body bytes and one header.
type Captured = std::sync::Arc<std::sync::Mutex<Vec<(Vec<u8>, Option<String>)>>>;

/// A Lua adapter that signs its body goes out byte for byte as it wrote it:
/// odd spacing and key order included, so the signature it computed over
/// `meta.body` holds for what the server receives.
#[tokio::test]
async fn a_lua_adapter_body_is_sent_exactly_as_the_adapter_wrote_and_signed_it() {
    use axum::body::Bytes;
    use axum::http::HeaderMap;
    use homeagent_llm::{LuaAdapter, LuaCodec};

    const TEXT: &str = r#"{"z": 1,   "model": "m",  "a": [2, 3]}"#;
    let captured = Captured::default();
    let sink = std::sync::Arc::clone(&captured);
    let app = Router::new().fallback(move |headers: HeaderMap, body: Bytes| {
        let sink = std::sync::Arc::clone(&sink);
        async move {
            let signed = headers
                .get("x-signed-body")
                .and_then(|v| v.to_str().ok())
                .map(str::to_owned);
            sink.lock().unwrap().push((body.to_vec(), signed));
            (
                StatusCode::OK,
                r#"{"choices":[{"index":0,"message":{"role":"assistant","content":"ok"},"finish_reason":"stop"}]}"#,
            )
        }
    });
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let server = tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });

    let source = format!(
        "return {{ transform_request = function(raw) return '{TEXT}' end,\n\
         build_headers = function(meta) return json.encode({{['x-signed-body'] = json.decode(meta).body}}) end }}"
    );
    let adapter = LuaAdapter::from_source("signed.lua", &source).unwrap();
    let codec = LuaCodec::new(std::sync::Arc::new(adapter)).with_fallback(false);
    let provider = keyless_provider(Box::new(codec), url);
    let request = ChatRequest {
        model: "m".into(),
        messages: vec![Message::user("hi")],
        tools: vec![],
        max_tokens: 16,
        temperature: None,
        stream: false,
        rendered: Default::default(),
    };
    provider
        .complete(&request, CancellationToken::new())
        .await
        .unwrap();
    server.abort();
    let captured = captured.lock().unwrap();
    assert_eq!(captured.len(), 1);
    let (body, signed) = &captured[0];
    assert_eq!(std::str::from_utf8(body).unwrap(), TEXT);
    assert_eq!(signed.as_deref(), Some(TEXT));
}

/// A provider speaking `codec` to `url`, with no key.
fn keyless_provider(codec: Box<dyn homeagent_llm::WireCodec>, url: String) -> HttpProvider {
    HttpProvider::with_codec(
        codec,
        Endpoint {
            base_url: url,
            api_key: None,
        },
        Options::default(),
    )
    .unwrap()
}

/// The `content-type` values each request arrived with, in order.
type SeenTypes = std::sync::Arc<std::sync::Mutex<Vec<Vec<String>>>>;

/// A server that records every request's `content-type` header values and
/// answers 400 (the request is all these tests look at).
async fn content_type_recorder() -> (String, SeenTypes, tokio::task::JoinHandle<()>) {
    use axum::http::HeaderMap;
    let seen = SeenTypes::default();
    let sink = std::sync::Arc::clone(&seen);
    let app = Router::new().fallback(move |headers: HeaderMap| {
        let sink = std::sync::Arc::clone(&sink);
        async move {
            let values = headers
                .get_all("content-type")
                .iter()
                .map(|v| v.to_str().unwrap_or("(not text)").to_owned())
                .collect();
            sink.lock().unwrap().push(values);
            (StatusCode::BAD_REQUEST, "recorded")
        }
    });
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let task = tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    (url, seen, task)
}

#[tokio::test]
async fn every_request_names_its_content_type_once() {
    let (url, seen, task) = content_type_recorder().await;
    for protocol in Protocol::ALL {
        for stream in [false, true] {
            let mut request = chat("hi");
            request.stream = stream;
            let provider = provider(&url, protocol, Options::default());
            let result = provider.complete(&request, CancellationToken::new()).await;
            assert!(result.is_err(), "the recorder answers 400");
        }
    }
    let seen = seen.lock().unwrap().clone();
    assert_eq!(seen.len(), 2 * Protocol::ALL.len());
    for (i, values) in seen.iter().enumerate() {
        assert_eq!(values, &["application/json"], "request {i}");
    }
    task.abort();
}

#[tokio::test]
async fn a_lua_adapters_own_content_type_is_the_only_one_sent() {
    use homeagent_llm::{LuaAdapter, LuaCodec};

    let (url, seen, task) = content_type_recorder().await;
    let source = "return { transform_request = function(raw) return raw end, \
                  build_headers = function(meta) return json.encode({['content-type'] = 'application/json; charset=utf-8'}) end }";
    let adapter = LuaAdapter::from_source("typed.lua", source).unwrap();
    let codec = LuaCodec::new(std::sync::Arc::new(adapter)).with_fallback(false);
    let provider = keyless_provider(Box::new(codec), url);
    let result = provider
        .complete(&chat("hi"), CancellationToken::new())
        .await;
    assert!(result.is_err(), "the recorder answers 400");
    let seen = seen.lock().unwrap().clone();
    assert_eq!(seen, [vec!["application/json; charset=utf-8".to_owned()]]);
    task.abort();
}

/// An embedder's codec that names no content type: OpenAI's, minus the
/// header.
struct UntypedCodec(Box<dyn homeagent_llm::WireCodec>);

impl homeagent_llm::WireCodec for UntypedCodec {
    fn protocol(&self) -> Protocol {
        self.0.protocol()
    }
    fn build_request(
        &self,
        endpoint: &Endpoint,
        request: &ChatRequest,
    ) -> Result<homeagent_llm::WireRequest, homeagent_llm::CodecError> {
        let mut wire = self.0.build_request(endpoint, request)?;
        wire.headers.retain(|(name, _)| name != "content-type");
        Ok(wire)
    }
    fn framing(&self) -> homeagent_llm::codec::Framing {
        self.0.framing()
    }
    fn stream_decoder(&self) -> Box<dyn homeagent_llm::StreamDecoder> {
        self.0.stream_decoder()
    }
    fn decode_response(&self, body: &[u8]) -> Result<Vec<StreamEvent>, homeagent_llm::CodecError> {
        self.0.decode_response(body)
    }
    fn error_message(&self, status: u16, body: &[u8]) -> String {
        self.0.error_message(status, body)
    }
}

#[tokio::test]
async fn a_codec_that_names_no_content_type_sends_json() {
    let (url, seen, task) = content_type_recorder().await;
    let codec = UntypedCodec(homeagent_llm::codec_for(Protocol::Openai));
    let provider = keyless_provider(Box::new(codec), url);
    let result = provider
        .complete(&chat("hi"), CancellationToken::new())
        .await;
    assert!(result.is_err(), "the recorder answers 400");
    assert_eq!(
        seen.lock().unwrap().clone(),
        [vec!["application/json".to_owned()]]
    );
    task.abort();
}

/// A history that opens with the assistant (a chat UI's greeting) is
/// answered on every wire; Anthropic and Gemini refuse one sent as it is,
/// and so does the mock.
#[tokio::test]
async fn a_history_that_opens_with_the_assistant_is_answered_on_every_wire() {
    let server = start_mock(ServerConfig::default()).await;
    for protocol in Protocol::ALL {
        let provider = provider(&server.url(), protocol, Options::default());
        let mut request = chat("hello");
        request.messages.insert(
            0,
            Message::Assistant(homeagent_core::AssistantMessage {
                content: "Ahoy! What can I do for ye?".into(),
                ..Default::default()
            }),
        );
        let events = provider
            .complete(&request, CancellationToken::new())
            .await
            .unwrap_or_else(|e| panic!("{protocol:?}: {e}"));
        let turn = assemble(events);
        assert!(!turn.text.is_empty(), "{protocol:?}: {turn:?}");
    }
    assert_eq!(stat(&server, "bad_requests").await, json!(0));
    server.shutdown().await.unwrap();
}

#[tokio::test]
async fn an_error_status_is_named_once_in_the_errors_text() {
    let (url, _seen, task) = content_type_recorder().await;
    for protocol in Protocol::ALL {
        let provider = provider(&url, protocol, Options::default());
        let error = provider
            .complete(&chat("hi"), CancellationToken::new())
            .await
            .unwrap_err();
        assert!(
            matches!(error, ProviderError::Status { status: 400, .. }),
            "{protocol:?}: {error:?}"
        );
        let text = error.to_string();
        assert_eq!(text.matches("400").count(), 1, "{protocol:?}: {text}");
        assert!(
            text.starts_with("the model server answered HTTP 400: recorded"),
            "{protocol:?}: {text}"
        );
    }
    task.abort();
}

/// A redirect is not followed: following it would send the API key (in
/// `authorization`, `x-api-key` or `x-goog-api-key`, which an HTTP client
/// keeps across hosts) to wherever the first server points. The error names
/// the new address so the user can fix `base_url`.
#[tokio::test]
async fn a_redirect_is_not_followed_and_the_key_goes_nowhere_else() {
    let (elsewhere, seen, task) = content_type_recorder().await;
    for status in [301, 302, 307, 308] {
        let mut response = canned(status, "");
        let location = format!("{elsewhere}/v1/chat/completions");
        response.headers.push(("location", location.clone()));
        let server = tiny_server(response).await;
        for protocol in Protocol::ALL {
            let provider = provider(&server.url, protocol, Options::default());
            for stream in [true, false] {
                let mut request = chat("hi");
                request.stream = stream;
                let err = provider
                    .complete(&request, CancellationToken::new())
                    .await
                    .err();
                let Some(err @ ProviderError::Status { status: got, .. }) = err else {
                    panic!("{status} {protocol:?}: {err:?}");
                };
                assert_eq!(got, status);
                assert!(!err.is_retryable(), "{err}");
                let text = err.to_string();
                assert!(text.contains(&location), "{text}");
                assert!(text.contains("base_url"), "{text}");
            }
        }
    }
    assert!(
        seen.lock().unwrap().is_empty(),
        "the redirect's target was asked"
    );
    task.abort();
}

/// A server that answers every request with `status` and `pieces` as the
/// body, one piece at a time with a pause between (so the client reads
/// them as separate chunks).
async fn piecewise_server(status: u16, pieces: Vec<String>) -> TinyServer {
    let app = Router::new().fallback(move || {
        let pieces = pieces.clone();
        async move {
            let stream = futures_util::stream::unfold(pieces.into_iter(), |mut rest| async move {
                let piece = rest.next()?;
                tokio::time::sleep(Duration::from_millis(20)).await;
                Some((Ok::<_, std::convert::Infallible>(piece), rest))
            });
            Response::builder()
                .status(status)
                .header("content-type", "application/json")
                .body(axum::body::Body::from_stream(stream))
                .unwrap()
        }
    });
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let task = tokio::spawn(async move {
        axum::serve(listener, app).await.unwrap();
    });
    TinyServer { url, task }
}

/// An error body is read past its first chunk, up to its cap (64 KiB): a
/// provider's long error (a context-length complaint quoting the request,
/// a validation error listing every field) still gives its message, not
/// the raw start of its JSON.
#[tokio::test]
async fn a_long_error_body_in_pieces_still_gives_the_providers_message() {
    let body = json!({"error": {
        "message": "This model's maximum context length is 8192 tokens.",
        "type": "invalid_request_error",
        "param": "messages",
        "code": "context_length_exceeded",
        "detail": "x".repeat(20_000),
    }})
    .to_string();
    let pieces: Vec<String> = body
        .as_bytes()
        .chunks(body.len() / 4 + 1)
        .map(|piece| String::from_utf8(piece.to_vec()).unwrap())
        .collect();
    assert_eq!(pieces.len(), 4);
    let server = piecewise_server(400, pieces).await;
    let provider = provider(&server.url, Protocol::Openai, Options::default());
    let error = provider
        .complete(&chat("hi"), CancellationToken::new())
        .await
        .unwrap_err();
    let ProviderError::Status {
        status, message, ..
    } = &error
    else {
        panic!("{error:?}");
    };
    assert_eq!(*status, 400);
    assert_eq!(
        message,
        "HTTP 400: This model's maximum context length is 8192 tokens."
    );
}

/// A whole response is read up to `max_body_bytes` and not a byte past
/// it, and the default (64 MiB) takes an answer of a few megabytes.
#[tokio::test]
async fn a_whole_response_is_read_up_to_its_limit_and_no_further() {
    let answer = |text: &str| {
        json!({"id": "chatcmpl-1", "object": "chat.completion", "created": 1, "model": "m",
               "choices": [{"index": 0, "message": {"role": "assistant", "content": text},
                            "finish_reason": "stop"}]})
        .to_string()
    };
    let body = answer("fits exactly");
    let server = tiny_server(canned(200, &body)).await;
    let limited = |max_body_bytes: usize| Options {
        max_body_bytes,
        ..Options::default()
    };
    let at_limit = provider(&server.url, Protocol::Openai, limited(body.len()));
    assert_eq!(at_limit.options(), &limited(body.len()));
    let events = at_limit
        .complete(&chat("hi"), CancellationToken::new())
        .await
        .unwrap();
    assert_eq!(assemble(events).text, "fits exactly");
    let under = provider(&server.url, Protocol::Openai, limited(body.len() - 1));
    let error = under
        .complete(&chat("hi"), CancellationToken::new())
        .await
        .unwrap_err();
    assert_eq!(
        error.to_string(),
        ProviderError::Codec(homeagent_llm::CodecError::MalformedResponse {
            protocol: "openai",
            detail: format!("the response body exceeds {} bytes", body.len() - 1),
        })
        .to_string()
    );

    let long = "long answer. ".repeat(3 * 1024 * 1024 / 13);
    let big = tiny_server(canned(200, &answer(&long))).await;
    let events = provider(&big.url, Protocol::Openai, Options::default())
        .complete(&chat("hi"), CancellationToken::new())
        .await
        .unwrap();
    assert_eq!(assemble(events).text, long);
}

/// A frame over the framer's bound is dropped, and the stream cannot go
/// on as if it had not been there: a tool call whose whole input was in
/// it would be closed as `{}` and run with no arguments. The stream ends
/// with an error naming the bound, and no call comes out runnable.
#[tokio::test]
async fn a_frame_over_the_bound_ends_the_stream_with_an_error() {
    let huge = "x".repeat(homeagent_llm::framing::DEFAULT_MAX_FRAME_BYTES + 1);
    let body = format!(
        "event: message_start\n\
         data: {{\"type\":\"message_start\",\"message\":{{\"id\":\"m\",\"role\":\"assistant\",\"usage\":{{\"input_tokens\":1,\"output_tokens\":0}}}}}}\n\n\
         event: content_block_start\n\
         data: {{\"type\":\"content_block_start\",\"index\":0,\"content_block\":{{\"type\":\"tool_use\",\"id\":\"toolu_1\",\"name\":\"demo_sleep\",\"input\":{{}}}}}}\n\n\
         event: content_block_delta\n\
         data: {{\"type\":\"content_block_delta\",\"index\":0,\"delta\":{{\"type\":\"input_json_delta\",\"partial_json\":\"{{\\\"tag\\\":\\\"{huge}\\\"}}\"}}}}\n\n\
         event: content_block_stop\n\
         data: {{\"type\":\"content_block_stop\",\"index\":0}}\n\n\
         event: message_delta\n\
         data: {{\"type\":\"message_delta\",\"delta\":{{\"stop_reason\":\"tool_use\"}},\"usage\":{{\"output_tokens\":5}}}}\n\n\
         event: message_stop\n\
         data: {{\"type\":\"message_stop\"}}\n\n"
    );
    let server = tiny_server(canned(200, &body)).await;
    let provider = provider(&server.url, Protocol::Anthropic, Options::default());
    let (events, err) = drain(&provider).await;
    let err = err.expect("the stream must end with an error");
    assert_eq!(
        err.to_string(),
        ProviderError::Codec(homeagent_llm::CodecError::MalformedResponse {
            protocol: "anthropic",
            detail: format!(
                "a streamed frame exceeded the {}-byte bound and was dropped, so the answer \
                 would be incomplete",
                homeagent_llm::framing::DEFAULT_MAX_FRAME_BYTES
            ),
        })
        .to_string()
    );
    let turn = assemble(events);
    assert!(
        turn.calls
            .iter()
            .all(|call| call.call.raw_arguments != "{}"),
        "{:?}",
        turn.calls
    );
}
