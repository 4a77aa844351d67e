#![allow(clippy::unwrap_used, clippy::expect_used)] // a panic in a test is a test failure

//! The mock LLM server over real loopback HTTP, read by HomeAgent's own
//! codecs: every wire, streamed and whole, must carry the script's calls
//! intact, and the HTTP-level triggers must behave like a failing provider.

use std::time::Duration;

use homeagent_core::{
    AssembledTurn, ErrorReason, FinishReason, Message, StreamAssembler, ToolMessage,
};
use homeagent_llm::codec::decode_stream_body;
use homeagent_llm::{ChatRequest, Endpoint, Protocol, ToolSpec, codec_for};
use homeagent_mock_llm::{MockServer, ScriptOptions, ServerConfig};
use serde_json::{Value, json};

async fn start(config: ServerConfig) -> MockServer {
    // reqwest is built with rustls but no default crypto provider (the
    // workspace's one is ring, installed explicitly): a client panics
    // unless one is installed, even for plain http. Every test starts here.
    homeagent_llm::transport::install_crypto_provider();
    MockServer::start("127.0.0.1:0", config).await.unwrap()
}

fn endpoint(server: &MockServer, protocol: Protocol) -> Endpoint {
    // Each SDK's convention: OpenAI-compatible base URLs end in /v1.
    let base_url = match protocol {
        Protocol::Openai => format!("{}/v1", server.url()),
        _ => server.url(),
    };
    Endpoint {
        base_url,
        api_key: Some("mock-key".into()),
    }
}

fn chat(messages: Vec<Message>, stream: bool) -> ChatRequest {
    ChatRequest {
        model: "mock-model".into(),
        messages,
        tools: vec![ToolSpec::new(
            "demo_sleep",
            "Sleeps ms milliseconds and returns its tag.",
            &json!({"type": "object", "properties": {
                "ms": {"type": "integer"}, "tag": {"type": "string"}}}),
        )],
        max_tokens: 512,
        temperature: None,
        stream,
        rendered: Default::default(),
    }
}

/// Sends the codec's request for `messages`; returns the status and body.
async fn exchange(
    server: &MockServer,
    protocol: Protocol,
    messages: Vec<Message>,
    stream: bool,
) -> (u16, Vec<u8>) {
    let codec = codec_for(protocol);
    let wire = codec
        .build_request(&endpoint(server, protocol), &chat(messages, stream))
        .unwrap();
    let mut request = reqwest::Client::new().post(&wire.url);
    for (name, value) in &wire.headers {
        request = request.header(name, value);
    }
    let response = request
        .header("content-type", "application/json")
        .body(wire.body.into_bytes())
        .timeout(Duration::from_secs(10))
        .send()
        .await
        .unwrap();
    let status = response.status().as_u16();
    (status, response.bytes().await.unwrap().to_vec())
}

/// One model turn through the codec and the assembler.
async fn turn(
    server: &MockServer,
    protocol: Protocol,
    messages: Vec<Message>,
    stream: bool,
) -> AssembledTurn {
    let (status, body) = exchange(server, protocol, messages, stream).await;
    assert_eq!(status, 200, "{}", String::from_utf8_lossy(&body));
    let codec = codec_for(protocol);
    let events = if stream {
        decode_stream_body(codec.as_ref(), &body).unwrap()
    } else {
        codec.decode_response(&body).unwrap()
    };
    let mut assembler = StreamAssembler::new();
    for event in events {
        assembler.push(event);
    }
    assembler.finish()
}

/// The nonce of a `done-<nonce>-0` tag.
fn nonce_of(turn: &AssembledTurn) -> String {
    let tag = turn.calls[0].call.arguments["tag"].as_str().unwrap();
    tag.strip_prefix("done-")
        .and_then(|t| t.strip_suffix("-0"))
        .unwrap()
        .to_owned()
}

async fn slowbatch4(protocol: Protocol) {
    let server = start(ServerConfig::default()).await;
    for stream in [true, false] {
        let turn = turn(
            &server,
            protocol,
            vec![Message::user("!slowbatch4")],
            stream,
        )
        .await;
        let nonce = nonce_of(&turn);
        let got: Vec<(&str, &Value)> = turn
            .calls
            .iter()
            .map(|c| (c.call.name.as_str(), &c.call.arguments))
            .collect();
        let expected = [
            json!({"ms": 150, "tag": format!("done-{nonce}-0")}),
            json!({"ms": 155, "tag": format!("done-{nonce}-1")}),
            json!({"ms": 160, "tag": format!("done-{nonce}-2")}),
            json!({"ms": 165, "tag": format!("done-{nonce}-3")}),
        ];
        let expected: Vec<(&str, &Value)> = expected.iter().map(|a| ("demo_sleep", a)).collect();
        assert_eq!(got, expected, "stream={stream}");
        assert!(turn.calls.iter().all(|c| c.argument_error.is_none()));
        let mut ids: Vec<&str> = turn.calls.iter().map(|c| c.call.id.as_str()).collect();
        ids.sort_unstable();
        ids.dedup();
        assert_eq!(ids.len(), 4, "ids must be distinct: {ids:?}");
        assert!(turn.usage.prompt_tokens > 0 && turn.usage.completion_tokens > 0);
    }
    server.shutdown().await.unwrap();
}

async fn truncate(protocol: Protocol, stream: bool) {
    let server = start(ServerConfig::default()).await;
    let turn = turn(&server, protocol, vec![Message::user("!truncate")], stream).await;
    assert_eq!(turn.finish_reason, Some(FinishReason::Length));
    assert_eq!(turn.calls.len(), 1);
    assert!(
        turn.calls[0].argument_error.is_some(),
        "the cut call must not be runnable: {:?}",
        turn.calls[0]
    );
    server.shutdown().await.unwrap();
}

async fn text_only(protocol: Protocol) {
    let server = start(ServerConfig::default()).await;
    let streamed = turn(&server, protocol, vec![Message::user("!text")], true).await;
    let whole = turn(&server, protocol, vec![Message::user("!text")], false).await;
    assert!(streamed.calls.is_empty());
    assert!(
        streamed.text.starts_with("This is a plain text reply"),
        "{}",
        streamed.text
    );
    assert_eq!(streamed.text, whole.text);
    assert_eq!(streamed.finish_reason, Some(FinishReason::Stop));
    server.shutdown().await.unwrap();
}

async fn err_is_a_500(protocol: Protocol) {
    let server = start(ServerConfig::default()).await;
    assert_eq!(stat(&server, "errors_injected").await, 0);
    for stream in [true, false] {
        let (status, body) = exchange(&server, protocol, vec![Message::user("!err")], stream).await;
        assert_eq!(status, 500);
        // Codecs may add the status or the error type; the provider's
        // message must come through.
        let message = codec_for(protocol).error_message(500, &body);
        assert!(
            message.contains("the mock model failed on purpose (!err)"),
            "{message:?} from {}",
            String::from_utf8_lossy(&body)
        );
    }
    assert_eq!(stat(&server, "errors_injected").await, 2);
    server.shutdown().await.unwrap();
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

async fn hang_sends_a_partial_body_then_nothing(protocol: Protocol) {
    let server = start(ServerConfig::default()).await;
    let codec = codec_for(protocol);
    for stream in [true, false] {
        let wire = codec
            .build_request(
                &endpoint(&server, protocol),
                &chat(vec![Message::user("!hang")], stream),
            )
            .unwrap();
        let mut request = reqwest::Client::new().post(&wire.url);
        for (name, value) in &wire.headers {
            request = request.header(name, value);
        }
        let mut response = request
            .header("content-type", "application/json")
            .body(wire.body.into_bytes())
            .send()
            .await
            .unwrap();
        assert_eq!(response.status().as_u16(), 200);
        let first = response.chunk().await.unwrap().unwrap();
        assert!(!first.is_empty());
        let more = tokio::time::timeout(Duration::from_millis(300), response.chunk()).await;
        assert!(
            more.is_err(),
            "the body went on after the first chunk: {more:?}"
        );
        // The client goes away: the server stops serving the request.
        drop(response);
        let mut left = Value::Null;
        for _ in 0..100 {
            left = stat(&server, "in_flight_requests").await;
            if left == json!(0) {
                break;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        assert_eq!(left, json!(0), "the hanging response outlived its client");
    }
    assert_eq!(stat(&server, "hangs").await, json!(2));
    server.shutdown().await.unwrap();
}

/// A whole agent round: the batch, its (simulated) demo_sleep results sent
/// back in the wire's own shape, and the report counting them.
async fn results_are_counted(protocol: Protocol) {
    let server = start(ServerConfig::default()).await;
    for stream in [true, false] {
        let user = Message::user("!slowbatch4");
        let batch = turn(&server, protocol, vec![user.clone()], stream).await;
        let mut history = vec![user, Message::Assistant(batch.message())];
        for call in &batch.calls {
            history.push(Message::Tool(ToolMessage {
                tool_call_id: call.call.id.clone(),
                name: call.call.name.clone(),
                content: json!({"tag": call.call.arguments["tag"], "in_flight_at_start": 4,
                                "in_flight_at_end": 3})
                .to_string(),
                success: true,
            }));
        }
        let report = turn(&server, protocol, history, stream).await;
        assert!(report.calls.is_empty());
        assert!(
            report.text.contains("executed=4 max_in_flight=4"),
            "stream={stream}: {}",
            report.text
        );
    }
    assert_eq!(stat(&server, "executed_total").await, json!(8));
    assert_eq!(stat(&server, "last_executed").await, json!(4));
    assert_eq!(stat(&server, "batches").await, json!(2));
    server.shutdown().await.unwrap();
}

/// The conformance tests of one protocol.
macro_rules! conformance {
    ($module:ident, $protocol:expr) => {
        mod $module {
            use super::*;

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn slowbatch4_gives_exactly_four_calls_streamed_and_whole() {
                slowbatch4($protocol).await;
            }

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn truncate_streamed_ends_with_length_and_a_call_that_cannot_run() {
                truncate($protocol, true).await;
            }

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn truncate_whole_ends_with_length_and_a_call_that_cannot_run() {
                truncate($protocol, false).await;
            }

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn text_only_turns_agree_streamed_and_whole() {
                text_only($protocol).await;
            }

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn err_gives_a_500_with_the_wires_error_body() {
                err_is_a_500($protocol).await;
            }

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn hang_sends_a_partial_body_then_stalls_until_the_client_leaves() {
                hang_sends_a_partial_body_then_nothing($protocol).await;
            }

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn tool_results_come_back_as_executed_4() {
                results_are_counted($protocol).await;
            }
        }
    };
}

conformance!(openai, Protocol::Openai);
conformance!(anthropic, Protocol::Anthropic);
conformance!(gemini, Protocol::Gemini);
conformance!(ollama, Protocol::Ollama);

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn stats_count_requests_and_peak_concurrency_under_a_burst() {
    let server = start(ServerConfig {
        delay_ms: 300,
        ..ServerConfig::default()
    })
    .await;
    let client = reqwest::Client::new();
    let url = format!("{}/api/chat", server.url());
    let requests = (0..6).map(|i| {
        let body = json!({"model": "m", "stream": i % 2 == 0,
                          "messages": [{"role": "user", "content": format!("!batch2-{i}")}]});
        client.post(&url).body(body.to_string()).send()
    });
    let responses = futures_util::future::join_all(requests).await;
    for response in responses {
        let response = response.unwrap();
        assert_eq!(response.status().as_u16(), 200);
        response.bytes().await.unwrap();
    }
    assert_eq!(stat(&server, "requests").await, json!(6));
    assert_eq!(stat(&server, "batches").await, json!(6));
    assert_eq!(stat(&server, "peak_concurrent_requests").await, json!(6));
    assert_eq!(stat(&server, "in_flight_requests").await, json!(0));
    let timing = stat(&server, "mock_time").await;
    assert_eq!(timing["batch2"]["count"], json!(6), "{timing}");
    server.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_delay_comes_before_the_first_byte() {
    let server = start(ServerConfig {
        delay_ms: 250,
        chunk_delay_ms: 20,
        script: ScriptOptions::default(),
    })
    .await;
    let started = std::time::Instant::now();
    let (status, _) = exchange(
        &server,
        Protocol::Ollama,
        vec![Message::user("!text")],
        true,
    )
    .await;
    assert_eq!(status, 200);
    // 250 ms before the first byte, then 20 ms between each of several chunks.
    assert!(
        started.elapsed() >= Duration::from_millis(250 + 3 * 20),
        "{:?}",
        started.elapsed()
    );
    server.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_probe_endpoints_answer() {
    let server = start(ServerConfig::default()).await;
    let client = reqwest::Client::new();
    let head = client
        .head(format!("{}/", server.url()))
        .send()
        .await
        .unwrap();
    assert_eq!(head.status().as_u16(), 200);
    let root = client
        .get(format!("{}/", server.url()))
        .send()
        .await
        .unwrap();
    assert_eq!(root.status().as_u16(), 200);
    let models: Value = serde_json::from_slice(
        &client
            .get(format!("{}/v1/models", server.url()))
            .send()
            .await
            .unwrap()
            .bytes()
            .await
            .unwrap(),
    )
    .unwrap();
    assert_eq!(models["data"][0]["id"], json!("mock-llm"));
    let bad = client
        .post(format!("{}/v1/messages", server.url()))
        .body("not json")
        .send()
        .await
        .unwrap();
    assert_eq!(bad.status().as_u16(), 400);
    let body: Value = serde_json::from_slice(&bad.bytes().await.unwrap()).unwrap();
    assert_eq!(body["type"], json!("error"));
    let unknown = client
        .post(format!(
            "{}/v1beta/models/gemini-2.5-flash:countTokens",
            server.url()
        ))
        .body("{}")
        .send()
        .await
        .unwrap();
    assert_eq!(unknown.status().as_u16(), 404);
    // google-genai 3.x defaults to API version v1.
    let v1 = client
        .post(format!(
            "{}/v1/models/gemini-2.5-flash:generateContent",
            server.url()
        ))
        .body(r#"{"contents":[{"role":"user","parts":[{"text":"!text"}]}]}"#)
        .send()
        .await
        .unwrap();
    assert_eq!(v1.status().as_u16(), 200);
    let body: Value = serde_json::from_slice(&v1.bytes().await.unwrap()).unwrap();
    assert!(
        body["candidates"][0]["content"]["parts"][0]["text"].is_string(),
        "{body}"
    );
    server.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_tool_flag_renames_the_scripted_calls() {
    let server = start(ServerConfig {
        script: ScriptOptions {
            tool_sleep_ms: 40,
            tool_name: Some("my_sleep".into()),
        },
        ..ServerConfig::default()
    })
    .await;
    let turn = turn(
        &server,
        Protocol::Ollama,
        vec![Message::user("!slowbatch2")],
        true,
    )
    .await;
    let nonce = nonce_of(&turn);
    let got: Vec<(String, Value)> = turn
        .calls
        .iter()
        .map(|c| (c.call.name.clone(), c.call.arguments.clone()))
        .collect();
    assert_eq!(
        got,
        vec![
            (
                "my_sleep".to_owned(),
                json!({"ms": 40, "tag": format!("done-{nonce}-0")})
            ),
            (
                "my_sleep".to_owned(),
                json!({"ms": 45, "tag": format!("done-{nonce}-1")})
            ),
        ]
    );
    server.shutdown().await.unwrap();
}

/// `!truncate` on Ollama: the cut arguments travel as a string, and the
/// assembler reports them as truncated (the turn hit its length limit).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_ollama_cut_call_is_reported_as_truncated() {
    let server = start(ServerConfig::default()).await;
    let turn = turn(
        &server,
        Protocol::Ollama,
        vec![Message::user("!truncate")],
        true,
    )
    .await;
    let error = turn.calls[0].argument_error.as_ref().unwrap();
    assert_eq!(error.reason, ErrorReason::Truncated);
    server.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_input_log_records_each_input_with_its_count_and_time() {
    let server = start(ServerConfig {
        delay_ms: 40,
        ..ServerConfig::default()
    })
    .await;
    let input = "!batch3-log-1";
    // The batch turn, streamed.
    let batch = turn(&server, Protocol::Openai, vec![Message::user(input)], true).await;
    assert_eq!(batch.calls.len(), 3);
    // The report turn: two of the three calls answered with their tags.
    let mut messages = vec![Message::user(input)];
    messages.push(Message::Assistant(homeagent_core::AssistantMessage {
        content: String::new(),
        tool_calls: batch.calls.iter().map(|c| c.call.clone()).collect(),
        reasoning: Vec::new(),
    }));
    for call in &batch.calls[..2] {
        messages.push(Message::Tool(ToolMessage {
            tool_call_id: call.call.id.clone(),
            name: call.call.name.clone(),
            content: call.call.arguments["tag"].as_str().unwrap().to_owned(),
            success: true,
        }));
    }
    let (status, _) = exchange(&server, Protocol::Openai, messages, false).await;
    assert_eq!(status, 200);

    let client = reqwest::Client::new();
    let url = format!("{}/stats/inputs", server.url());
    let log: Value = serde_json::from_slice(
        &client
            .get(&url)
            .send()
            .await
            .unwrap()
            .bytes()
            .await
            .unwrap(),
    )
    .unwrap();
    let record = &log["inputs"][input];
    assert_eq!(record["requests"], json!(2), "{log}");
    assert_eq!(record["reports"], json!(1));
    assert_eq!(record["batch_calls"], json!(3));
    assert_eq!(record["executed"], json!(2));
    assert_eq!(record["served"], json!(2));
    // Both requests waited the 40 ms delay before their first byte.
    assert!(record["served_us"].as_u64().unwrap() >= 80_000, "{record}");
    assert!(record["own_us"].as_u64().unwrap() > 0);

    let cleared: Value = serde_json::from_slice(
        &client
            .delete(&url)
            .send()
            .await
            .unwrap()
            .bytes()
            .await
            .unwrap(),
    )
    .unwrap();
    assert_eq!(cleared, json!({"cleared": 1}));
    server.shutdown().await.unwrap();
}

/// A blast opens hundreds of connections at once while the mock is busy:
/// they wait in its accept queue, which keeps 1,024 places (capped by
/// `net.core.somaxconn`) instead of the common 128, past which the kernel
/// drops handshakes and each client retries a second later. Here nothing
/// accepts at all: the runtime's only thread is blocked while 300 clients
/// connect from threads of their own.
#[tokio::test(flavor = "current_thread")]
async fn a_burst_of_connections_waits_in_the_accept_queue_without_drops() {
    let server = MockServer::start("127.0.0.1:0", ServerConfig::default())
        .await
        .unwrap();
    let addr = server.addr();
    let clients: Vec<_> = (0..300)
        .map(|_| {
            std::thread::spawn(move || {
                std::net::TcpStream::connect_timeout(&addr, Duration::from_secs(10)).is_ok()
            })
        })
        .collect();
    let connected = clients
        .into_iter()
        .map(|client| client.join().unwrap())
        .filter(|&ok| ok)
        .count();
    assert_eq!(
        connected, 300,
        "connections completed while nothing accepted (is net.core.somaxconn below 300?)"
    );
    server.shutdown().await.unwrap();
}

/// An input's time starts when its request arrives, not once its body has
/// been read: reading the body is the mock's work, and a bench that
/// subtracts the mock's time must not charge it to the agent.
#[tokio::test]
async fn an_inputs_time_includes_reading_its_request_body() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let server = start(ServerConfig::default()).await;
    let input = "!batch1-slow-body";
    let body = json!({"model": "m", "messages": [{"role": "user", "content": input}]}).to_string();
    let mut socket = tokio::net::TcpStream::connect(server.addr()).await.unwrap();
    let head = format!(
        "POST /v1/chat/completions HTTP/1.1\r\nhost: mock\r\ncontent-type: application/json\r\n\
         content-length: {}\r\nconnection: close\r\n\r\n",
        body.len()
    );
    socket.write_all(head.as_bytes()).await.unwrap();
    // The head alone, then the body a while later.
    let pause = Duration::from_millis(150);
    tokio::time::sleep(pause).await;
    socket.write_all(body.as_bytes()).await.unwrap();
    let mut reply = Vec::new();
    socket.read_to_end(&mut reply).await.unwrap();
    assert!(
        reply.starts_with(b"HTTP/1.1 200"),
        "{}",
        String::from_utf8_lossy(&reply)
    );

    let log: Value = serde_json::from_slice(
        &reqwest::get(format!("{}/stats/inputs", server.url()))
            .await
            .unwrap()
            .bytes()
            .await
            .unwrap(),
    )
    .unwrap();
    let served_us = log["inputs"][input]["served_us"].as_u64().unwrap();
    // The mock's clock starts once it has parsed the head, which may be a
    // moment after the pause began here (a run saw 148.3 ms of 150): half
    // the pause still tells a clock that includes the body's wait from one
    // that starts after it (well under a millisecond).
    assert!(served_us >= pause.as_micros() as u64 / 2, "{log}");
    server.shutdown().await.unwrap();
}
