#![allow(clippy::unwrap_used, clippy::expect_used)] // a panic in a test is a test failure

//! The API key is sent but never shows: not in the log, not in any `Debug`
//! output.
//!
//! This test has a file (so a process) of its own: `tracing` caches per
//! callsite whether anyone listens, process-wide, and a test in the same
//! process that hits a callsite concurrently with no subscriber can make it
//! cache "nobody" — the log would then miss events and the test would
//! either fail spuriously or pass vacuously.

use std::fmt::Write as _;
use std::sync::{Arc, Mutex};

use axum::Router;
use axum::http::{HeaderMap, StatusCode};
use homeagent_core::{CancellationToken, Message};
use homeagent_llm::{ChatRequest, Endpoint, HttpProvider, Options, Protocol};
use homeagent_mock_llm::{MockServer, ServerConfig};

const KEY: &str = "sk-test-4f9c1e7a-never-log-me";

fn provider(base: &str, protocol: Protocol) -> HttpProvider {
    let base_url = match protocol {
        Protocol::Openai => format!("{base}/v1"),
        _ => base.to_owned(),
    };
    let endpoint = Endpoint {
        base_url,
        api_key: Some(KEY.into()),
    };
    HttpProvider::new(protocol, endpoint, Options::default()).unwrap()
}

fn chat(text: &str) -> ChatRequest {
    ChatRequest {
        model: "mock-model".into(),
        messages: vec![Message::user(text)],
        tools: Vec::new(),
        max_tokens: 512,
        temperature: None,
        stream: true,
        rendered: Default::default(),
    }
}

/// A server that answers every request with 401 and keeps the headers it
/// received.
async fn unauthorized_server() -> (String, Arc<Mutex<Vec<HeaderMap>>>) {
    let received = Arc::new(Mutex::new(Vec::new()));
    let log = received.clone();
    let app = Router::new().fallback(move |headers: HeaderMap| {
        let log = log.clone();
        async move {
            log.lock().unwrap().push(headers);
            (
                StatusCode::UNAUTHORIZED,
                r#"{"error":{"message":"invalid api key","type":"authentication_error"}}"#,
            )
        }
    });
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    (url, received)
}

/// A `tracing` subscriber that writes every event and span field into a
/// string, so the test can search what would have been logged.
struct Capture(Arc<Mutex<String>>);

struct Fields<'a>(&'a mut String);

impl tracing::field::Visit for Fields<'_> {
    fn record_debug(&mut self, field: &tracing::field::Field, value: &dyn std::fmt::Debug) {
        let _ = write!(self.0, "{}={value:?} ", field.name());
    }
}

impl tracing::Subscriber for Capture {
    fn enabled(&self, _: &tracing::Metadata<'_>) -> bool {
        true
    }
    fn new_span(&self, span: &tracing::span::Attributes<'_>) -> tracing::span::Id {
        let mut log = self.0.lock().unwrap();
        span.record(&mut Fields(&mut log));
        log.push('\n');
        tracing::span::Id::from_u64(1)
    }
    fn record(&self, _: &tracing::span::Id, values: &tracing::span::Record<'_>) {
        let mut log = self.0.lock().unwrap();
        values.record(&mut Fields(&mut log));
        log.push('\n');
    }
    fn record_follows_from(&self, _: &tracing::span::Id, _: &tracing::span::Id) {}
    fn event(&self, event: &tracing::Event<'_>) {
        let mut log = self.0.lock().unwrap();
        let meta = event.metadata();
        let _ = write!(log, "{} {}: ", meta.level(), meta.target());
        event.record(&mut Fields(&mut log));
        log.push('\n');
    }
    fn enter(&self, _: &tracing::span::Id) {}
    fn exit(&self, _: &tracing::span::Id) {}
}

/// Current-thread runtime: the subscriber set for this thread sees the
/// transport's events and the HTTP client's connection tasks alike.
#[tokio::test(flavor = "current_thread")]
async fn the_api_key_is_sent_but_never_logged_nor_printed() {
    let log = Arc::new(Mutex::new(String::new()));
    let _guard = tracing::subscriber::set_default(Capture(log.clone()));

    let (url, received) = unauthorized_server().await;
    let mut debug_output = String::new();
    // A proxy's credentials in the URL are as secret as the key.
    let with_credentials = url.replacen("http://", "http://proxyuser:s3cretpass@", 1);
    for (base, protocol) in [&url, &with_credentials]
        .into_iter()
        .flat_map(|base| Protocol::ALL.into_iter().map(move |p| (base, p)))
    {
        let provider = provider(base, protocol);
        let err = provider
            .stream(&chat("hi"), CancellationToken::new())
            .await
            .err();
        write!(
            debug_output,
            "{provider:?} {err:?} {}",
            err.as_ref().unwrap()
        )
        .unwrap();
    }
    let mock = MockServer::start("127.0.0.1:0", ServerConfig::default())
        .await
        .unwrap();
    for protocol in Protocol::ALL {
        let provider = provider(&mock.url(), protocol);
        let events = provider
            .stream(&chat("!text"), CancellationToken::new())
            .await
            .unwrap()
            .collect()
            .await
            .unwrap();
        write!(debug_output, "{provider:?} {events:?}").unwrap();
    }
    mock.shutdown().await.unwrap();

    // The key really went out, in each wire's own header...
    let received = received.lock().unwrap().clone();
    assert_eq!(received.len(), 8);
    for headers in &received {
        let carries_key = headers
            .values()
            .any(|value| value.to_str().unwrap_or_default().contains(KEY));
        assert!(carries_key, "{:?}", headers.keys().collect::<Vec<_>>());
    }
    // ...and the log saw every request...
    let log = log.lock().unwrap().clone();
    assert_eq!(
        log.matches("sending a model request").count(),
        12,
        "the transport did not log every request:\n{log}"
    );
    assert!(log.contains("/v1/chat/completions"), "{log}");
    // ...but never the key, and neither did any Debug output.
    assert!(!log.contains(KEY), "the key leaked into the log:\n{log}");
    for secret in ["s3cretpass", "proxyuser"] {
        assert!(
            !log.contains(secret),
            "{secret} leaked into the log:\n{log}"
        );
        assert!(
            !debug_output.contains(secret),
            "{secret} leaked into Debug output:\n{debug_output}"
        );
    }
    assert!(
        !debug_output.contains(KEY),
        "the key leaked into Debug output:\n{debug_output}"
    );
}

/// An adapter's `log(level, message)` lands at that level, named by the
/// adapter's file; an unknown level is info.
#[test]
fn an_adapters_log_keeps_its_level() {
    let log = Arc::new(Mutex::new(String::new()));
    let _guard = tracing::subscriber::set_default(Capture(log.clone()));
    let adapter = homeagent_llm::lua::LuaAdapter::from_source(
        "levels.lua",
        "return { transform_request = function(raw) return raw end }",
    )
    .unwrap();
    adapter
        .eval_json(
            r#"for _, level in ipairs({"error", "WARN", "warning", "info", "debug", "trace", "loud"}) do
                 log(level, "said at " .. level)
               end
               return 1"#,
        )
        .unwrap();
    let log = log.lock().unwrap().clone();
    let levels: Vec<(&str, &str)> = log
        .lines()
        .filter_map(|line| {
            let (level, rest) = line.split_once(' ')?;
            let said = rest.split("said at ").nth(1)?.split(" adapter=").next()?;
            assert!(rest.contains("adapter=levels.lua"), "{line}");
            Some((level, said))
        })
        .collect();
    assert_eq!(
        levels,
        [
            ("ERROR", "error"),
            ("WARN", "WARN"),
            ("WARN", "warning"),
            ("INFO", "info"),
            ("DEBUG", "debug"),
            ("TRACE", "trace"),
            ("INFO", "loud"),
        ],
        "{log}"
    );
}
