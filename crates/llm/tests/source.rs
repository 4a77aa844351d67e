#![allow(clippy::unwrap_used, clippy::expect_used)] // a panic in a test is a test failure

//! Sources and fallback over real loopback HTTP: the mock LLM server for
//! good answers, and a tiny scripted server (500, 401, 429 with
//! Retry-After, empty bodies) for the failures.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use axum::Router;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use homeagent_core::{CancellationToken, Message, StreamEvent};
use homeagent_llm::{
    ChatRequest, FallbackError, FallbackOptions, ProviderError, SourceConfig, SourceProtocol,
    SourceSetup, Sources,
};
use homeagent_mock_llm::{MockServer, ServerConfig};
use serde_json::{Value, json};

const OK_SSE: &str = concat!(
    "data: {\"id\":\"x\",\"object\":\"chat.completion.chunk\",\"choices\":[{\"index\":0,",
    "\"delta\":{\"role\":\"assistant\",\"content\":\"from tiny\"},\"finish_reason\":null}]}\n\n",
    "data: {\"id\":\"x\",\"object\":\"chat.completion.chunk\",\"choices\":[{\"index\":0,",
    "\"delta\":{},\"finish_reason\":\"stop\"}]}\n\n",
    "data: [DONE]\n\n",
);

#[derive(Clone)]
struct Canned {
    status: u16,
    headers: Vec<(&'static str, String)>,
    body: String,
}

fn ok() -> Canned {
    Canned {
        status: 200,
        headers: vec![("content-type", "text/event-stream".into())],
        body: OK_SSE.into(),
    }
}

fn error(status: u16) -> Canned {
    Canned {
        status,
        headers: vec![("content-type", "application/json".into())],
        body: r#"{"error":{"message":"scripted failure"}}"#.into(),
    }
}

/// Answers the n-th request with `script[n]` (the last one once past the
/// end) and counts requests.
struct TinyServer {
    url: String,
    hits: Arc<AtomicUsize>,
    /// The `model` of each request, in order.
    models: Arc<std::sync::Mutex<Vec<String>>>,
}

impl TinyServer {
    fn hits(&self) -> usize {
        self.hits.load(Ordering::SeqCst)
    }

    fn models(&self) -> Vec<String> {
        self.models.lock().unwrap().clone()
    }
}

async fn tiny(script: Vec<Canned>) -> TinyServer {
    let hits = Arc::new(AtomicUsize::new(0));
    let models = Arc::new(std::sync::Mutex::new(Vec::new()));
    let counter = Arc::clone(&hits);
    let seen = Arc::clone(&models);
    let script = Arc::new(script);
    let app = Router::new().fallback(move |body: String| {
        let model = serde_json::from_str::<Value>(&body)
            .ok()
            .and_then(|v| v["model"].as_str().map(str::to_owned))
            .unwrap_or_default();
        seen.lock().unwrap().push(model);
        let n = counter.fetch_add(1, Ordering::SeqCst);
        let canned = script[n.min(script.len() - 1)].clone();
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
    tokio::spawn(async move {
        axum::serve(listener, app).await.unwrap();
    });
    TinyServer { url, hits, models }
}

async fn start_mock(config: ServerConfig) -> MockServer {
    MockServer::start("127.0.0.1:0", config).await.unwrap()
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

fn source(name: &str, base: &str, priority: i32) -> SourceConfig {
    SourceConfig {
        base_url: Some(format!("{base}/v1")),
        model: Some(format!("{name}-model")),
        api_key_env: Some(format!("{}_KEY", name.to_uppercase())),
        priority,
        ..SourceConfig::new(name, SourceProtocol::Openai)
    }
}

/// Every `*_KEY` variable is set; nothing else.
fn fake_env(name: &str) -> Option<String> {
    name.ends_with("_KEY")
        .then(|| "sk-fake-key-never-log".to_owned())
}

fn fast() -> FallbackOptions {
    FallbackOptions {
        attempts_per_source: 2,
        backoff_base: Duration::from_millis(10),
        max_retry_after: Duration::from_secs(5),
        cooldown_base: Duration::from_secs(60),
        cooldown_max: Duration::from_secs(600),
        ..FallbackOptions::default()
    }
}

fn sources(configs: Vec<SourceConfig>, options: FallbackOptions) -> Sources {
    Sources::from_config(configs, &fake_env, options).unwrap()
}

/// `main` (priority 10) in front of `backup` (priority 0), fast options.
fn main_then_backup(main_url: &str, backup_url: &str) -> Sources {
    sources(
        vec![
            source("main", main_url, 10),
            source("backup", backup_url, 0),
        ],
        fast(),
    )
}

/// The source that answers the next request.
async fn answered_by(set: &Sources) -> String {
    let (name, _) = set
        .stream(&mut chat(), CancellationToken::new())
        .await
        .unwrap();
    name
}

/// How long source `name` cools down for (zero when it does not).
fn cooling_of(set: &Sources, name: &str) -> Duration {
    let health = set.health().into_iter().find(|h| h.name == name).unwrap();
    health.cooling_down_for.unwrap_or_default()
}

fn chat() -> ChatRequest {
    ChatRequest {
        model: String::new(),
        messages: vec![Message::user("!text")],
        tools: Vec::new(),
        max_tokens: 256,
        temperature: None,
        stream: true,
        rendered: Default::default(),
    }
}

fn text(events: &[StreamEvent]) -> String {
    events
        .iter()
        .filter_map(|e| match e {
            StreamEvent::TextDelta { text } => Some(text.as_str()),
            _ => None,
        })
        .collect()
}

#[tokio::test]
async fn a_500_source_falls_back_to_the_next_one() {
    let failing = tiny(vec![error(500)]).await;
    let mock = start_mock(ServerConfig::default()).await;
    let set = sources(
        vec![
            source("second", &mock.url(), 0),
            source("first", &failing.url, 10),
        ],
        fast(),
    );
    let (name, stream) = set
        .stream(&mut chat(), CancellationToken::new())
        .await
        .unwrap();
    assert_eq!(name, "second");
    let events = stream.collect().await.unwrap();
    assert!(!text(&events).is_empty(), "{events:?}");
    // The first source was retried once with backoff, then abandoned.
    assert_eq!(failing.hits(), 2);
    assert_eq!(stat(&mock, "requests").await, json!(1));
    let health = set.health();
    assert_eq!(health[0].name, "first");
    assert_eq!(health[0].failures, 1);
    assert!(health[0].cooling_down_for.is_some());
    assert_eq!(health[1].failures, 0);

    // While it cools down, the first source is skipped.
    let name = answered_by(&set).await;
    assert_eq!(name, "second");
    assert_eq!(failing.hits(), 2);
}

/// Each source tried gets its own model, and the request ends with the
/// model of the source that answered.
#[tokio::test]
async fn each_source_is_sent_its_own_model() {
    let failing = tiny(vec![error(500)]).await;
    let answering = tiny(vec![ok()]).await;
    let set = sources(
        vec![
            source("first", &failing.url, 10),
            source("second", &answering.url, 0),
        ],
        fast(),
    );
    let mut request = chat();
    let (name, stream) = set
        .stream(&mut request, CancellationToken::new())
        .await
        .unwrap();
    assert_eq!(name, "second");
    stream.collect().await.unwrap();
    assert_eq!(failing.models(), ["first-model", "first-model"]);
    assert_eq!(answering.models(), ["second-model"]);
    assert_eq!(request.model, "second-model");
}

#[tokio::test]
async fn a_500_then_ok_source_answers_on_retry() {
    let flaky = tiny(vec![error(500), ok()]).await;
    let set = sources(vec![source("only", &flaky.url, 0)], fast());
    let (name, stream) = set
        .stream(&mut chat(), CancellationToken::new())
        .await
        .unwrap();
    assert_eq!(name, "only");
    assert_eq!(text(&stream.collect().await.unwrap()), "from tiny");
    assert_eq!(flaky.hits(), 2);
    assert_eq!(set.health()[0].failures, 0);
}

#[tokio::test]
async fn a_401_source_is_disabled_named_and_not_touched_again() {
    let refusing = tiny(vec![error(401)]).await;
    let mock = start_mock(ServerConfig::default()).await;
    let set = sources(
        vec![
            source("backup", &mock.url(), 0),
            source("main", &refusing.url, 10),
        ],
        fast(),
    );
    let name = answered_by(&set).await;
    assert_eq!(name, "backup");
    assert_eq!(refusing.hits(), 1, "a 401 is never retried");
    let reason = set.health()[0].disabled.clone().unwrap();
    assert!(
        reason.contains("main") && reason.contains("MAIN_KEY"),
        "{reason}"
    );

    let name = answered_by(&set).await;
    assert_eq!(name, "backup");
    assert_eq!(refusing.hits(), 1, "a disabled source is not tried again");
    assert_eq!(stat(&mock, "requests").await, json!(2));
}

/// A 403 (moderation, a region, an API not enabled: rarely the key), a
/// 402 (no credit) or a 404 (a model retired or misnamed) says the source
/// cannot answer, not that the request is wrong: the next source is tried
/// (once each, no retry here), and the source cools down but is never
/// disabled for the life of the process, as a refused key (401) is.
#[tokio::test]
async fn a_source_that_cannot_answer_falls_back_and_is_not_disabled() {
    for status in [402, 403, 404] {
        let refusing = tiny(vec![error(status), ok()]).await;
        let answering = tiny(vec![ok()]).await;
        let set = main_then_backup(&refusing.url, &answering.url);
        let (name, _) = set
            .stream(&mut chat(), CancellationToken::new())
            .await
            .unwrap_or_else(|e| panic!("{status}: {e}"));
        assert_eq!(name, "backup", "{status}");
        assert_eq!(refusing.hits(), 1, "{status}: not retried");
        let main = set.health().into_iter().find(|h| h.name == "main").unwrap();
        assert!(main.disabled.is_none(), "{status}: {main:?}");
        assert_eq!(main.failures, 1, "{status}");
    }
    // Alone, its error is the provider's own message.
    let refusing = tiny(vec![error(403)]).await;
    let set = sources(vec![source("main", &refusing.url, 0)], fast());
    let err = set
        .stream(&mut chat(), CancellationToken::new())
        .await
        .unwrap_err();
    assert!(matches!(err, FallbackError::AllFailed { .. }), "{err:?}");
    assert!(err.to_string().contains("scripted failure"), "{err}");
}

/// A redirect (a `base_url` that moved) and a malformed answer (a body
/// the wire cannot read, a frame past the bound) are the source's doing,
/// not the request's: the next source answers, and the first cools down.
#[tokio::test]
async fn a_redirecting_or_malformed_source_falls_back() {
    let redirect = Canned {
        status: 301,
        headers: vec![("location", "https://elsewhere.example/v1".into())],
        body: String::new(),
    };
    let oversized = Canned {
        status: 200,
        headers: vec![("content-type", "text/event-stream".into())],
        body: format!(
            "data: {}\n\n",
            "x".repeat(homeagent_llm::framing::DEFAULT_MAX_FRAME_BYTES + 1)
        ),
    };
    for (what, canned) in [("redirect", redirect), ("oversized frame", oversized)] {
        let failing = tiny(vec![canned]).await;
        let answering = tiny(vec![ok()]).await;
        let set = main_then_backup(&failing.url, &answering.url);
        let (name, _) = set
            .stream(&mut chat(), CancellationToken::new())
            .await
            .unwrap_or_else(|e| panic!("{what}: {e}"));
        assert_eq!(name, "backup", "{what}");
        assert_eq!(failing.hits(), 1, "{what}: not retried");
        let main = set.health().into_iter().find(|h| h.name == "main").unwrap();
        assert_eq!(main.failures, 1, "{what}: {main:?}");
    }
}

#[tokio::test]
async fn a_lone_401_source_is_a_disabled_error_naming_its_variable() {
    let refusing = tiny(vec![error(401)]).await;
    let set = sources(vec![source("main", &refusing.url, 0)], fast());
    for _ in 0..2 {
        let err = set
            .stream(&mut chat(), CancellationToken::new())
            .await
            .unwrap_err();
        assert!(
            matches!(&err, FallbackError::Disabled { source, env_var, refusal: Some(_) }
                if source == "main" && env_var.as_deref() == Some("MAIN_KEY")),
            "{err:?}"
        );
        assert!(err.to_string().contains("MAIN_KEY"), "{err}");
        // What the provider said is kept, on the second call too (the
        // source is not asked again).
        assert!(err.to_string().contains("scripted failure"), "{err}");
    }
    assert_eq!(refusing.hits(), 1);
}

#[tokio::test]
async fn a_missing_key_variable_disables_the_source() {
    let mock = start_mock(ServerConfig::default()).await;
    let set = Sources::from_config(
        vec![source("main", &mock.url(), 0)],
        &|_: &str| None,
        fast(),
    )
    .unwrap();
    let err = set
        .stream(&mut chat(), CancellationToken::new())
        .await
        .unwrap_err();
    assert!(
        matches!(&err, FallbackError::Disabled { source, env_var, refusal: None }
            if source == "main" && env_var.as_deref() == Some("MAIN_KEY")),
        "{err:?}"
    );
    assert_eq!(stat(&mock, "requests").await, json!(0));
}

/// A `Retry-After` longer than this side waits (`max_retry_after`) is not
/// cut short: the source is not asked again before it, in this request
/// (the next source answers) or in the next ones (it cools down at least
/// that long).
#[tokio::test]
async fn a_retry_after_past_the_wait_cap_moves_on_and_cools_the_source_that_long() {
    let mut limited = error(429);
    limited.headers.push(("retry-after", "3600".into()));
    let server = tiny(vec![limited, ok()]).await;
    let answering = tiny(vec![ok()]).await;
    let set = main_then_backup(&server.url, &answering.url);
    let name = answered_by(&set).await;
    assert_eq!(name, "backup");
    assert_eq!(server.hits(), 1, "not asked again before its Retry-After");
    let cooling = cooling_of(&set, "main");
    assert!(
        cooling > Duration::from_secs(3590),
        "cooling down for {cooling:?}, less than the server's hour"
    );
}

/// A `Retry-After` of years (or past what a clock can add) cools the
/// source for a day at most, and cools it: the overflow gave no cooldown at
/// all, and a value of years pushed a source behind every other for good.
#[tokio::test]
async fn a_huge_retry_after_cools_the_source_for_a_day_at_most() {
    for value in ["4000000000", "18446744073709551615"] {
        let mut limited = error(429);
        limited.headers.push(("retry-after", value.into()));
        let server = tiny(vec![limited, ok()]).await;
        let answering = tiny(vec![ok(), ok()]).await;
        let set = main_then_backup(&server.url, &answering.url);
        let name = answered_by(&set).await;
        assert_eq!(name, "backup");
        let cooling = cooling_of(&set, "main");
        assert!(
            cooling > Duration::from_secs(86_000) && cooling <= Duration::from_secs(86_400),
            "{value}: cooling down for {cooling:?}"
        );
        let name = answered_by(&set).await;
        assert_eq!(name, "backup", "{value}: asked again while cooling");
        assert_eq!(server.hits(), 1, "{value}");
    }
}

/// A source whose stream breaks after its first content (an overloaded
/// upstream reporting so mid-answer) cools down like one that fails before
/// it: the next request goes to the backup, not to it again.
#[tokio::test]
async fn a_stream_that_breaks_after_its_opening_cools_its_source() {
    let breaking = Canned {
        status: 200,
        headers: vec![("content-type", "text/event-stream".into())],
        body: concat!(
            "data: {\"id\":\"x\",\"object\":\"chat.completion.chunk\",\"choices\":[{\"index\":0,",
            "\"delta\":{\"role\":\"assistant\",\"content\":\"half an\"},\"finish_reason\":null}]}\n\n",
            "data: {\"error\":{\"message\":\"upstream overloaded\",\"type\":\"server_error\",\"code\":503}}\n\n",
        )
        .into(),
    };
    let server = tiny(vec![breaking, ok()]).await;
    let answering = tiny(vec![ok(), ok()]).await;
    let set = main_then_backup(&server.url, &answering.url);
    let (name, stream) = set
        .stream(&mut chat(), CancellationToken::new())
        .await
        .unwrap();
    assert_eq!(name, "main");
    let read = stream.collect().await;
    assert!(read.is_err(), "{read:?}");
    let name = answered_by(&set).await;
    assert_eq!(name, "backup", "the broken source was asked first again");
    assert_eq!(server.hits(), 1);
}

#[tokio::test]
async fn retry_after_is_honoured() {
    let mut limited = error(429);
    limited.headers.push(("retry-after", "1".into()));
    let server = tiny(vec![limited, ok()]).await;
    let set = sources(vec![source("only", &server.url, 0)], fast());
    let started = Instant::now();
    let (_, stream) = set
        .stream(&mut chat(), CancellationToken::new())
        .await
        .unwrap();
    let waited = started.elapsed();
    assert_eq!(text(&stream.collect().await.unwrap()), "from tiny");
    assert_eq!(server.hits(), 2);
    assert!(
        waited >= Duration::from_secs(1),
        "retried after {waited:?}, before the server's Retry-After of 1 s"
    );
}

#[tokio::test]
async fn other_4xx_is_rejected_without_fallback() {
    let bad = tiny(vec![error(400)]).await;
    let mock = start_mock(ServerConfig::default()).await;
    let set = sources(
        vec![source("a", &bad.url, 1), source("b", &mock.url(), 0)],
        fast(),
    );
    let err = set
        .stream(&mut chat(), CancellationToken::new())
        .await
        .unwrap_err();
    assert!(
        matches!(&err, FallbackError::Rejected { source, error: ProviderError::Status { status: 400, .. } } if source == "a"),
        "{err:?}"
    );
    assert_eq!(bad.hits(), 1);
    assert_eq!(stat(&mock, "requests").await, json!(0));
    // The provider's error is the cause, for a caller that walks the chain.
    let cause = std::error::Error::source(&err).map(ToString::to_string);
    let FallbackError::Rejected { error, .. } = &err else {
        unreachable!("matched above");
    };
    assert_eq!(cause, Some(error.to_string()));
    assert!(std::error::Error::source(&FallbackError::NoSources).is_none());
}

#[tokio::test]
async fn an_empty_stream_is_retried_but_a_cut_after_content_is_not() {
    let empty = Canned {
        status: 200,
        headers: vec![("content-type", "text/event-stream".into())],
        body: String::new(),
    };
    let server = tiny(vec![empty, ok()]).await;
    let set = sources(vec![source("only", &server.url, 0)], fast());
    let (_, stream) = set
        .stream(&mut chat(), CancellationToken::new())
        .await
        .unwrap();
    assert_eq!(text(&stream.collect().await.unwrap()), "from tiny");
    assert_eq!(server.hits(), 2, "an empty body is retried");

    // Content, then the body ends without [DONE]: the caller sees the
    // content and then the error; nothing is retried behind its back.
    let partial = Canned {
        status: 200,
        headers: vec![("content-type", "text/event-stream".into())],
        body: OK_SSE.split("data: {\"id\":\"x\",\"object\":\"chat.completion.chunk\",\"choices\":[{\"index\":0,\"delta\":{},").next().unwrap().into(),
    };
    let server = tiny(vec![partial, ok()]).await;
    let mock = start_mock(ServerConfig::default()).await;
    let set = sources(
        vec![source("a", &server.url, 1), source("b", &mock.url(), 0)],
        fast(),
    );
    let (name, mut stream) = set
        .stream(&mut chat(), CancellationToken::new())
        .await
        .unwrap();
    assert_eq!(name, "a");
    let mut items = Vec::new();
    while let Some(item) = stream.next().await {
        items.push(item);
    }
    assert!(
        matches!(items.last(), Some(Err(ProviderError::Cut { .. }))),
        "{items:?}"
    );
    assert!(matches!(&items[0], Ok(StreamEvent::TextDelta { text }) if text == "from tiny"));
    assert_eq!(server.hits(), 1);
    assert_eq!(stat(&mock, "requests").await, json!(0));
}

/// Reasoning is not content the caller has seen (only text and calls
/// reach the user): a stream cut during a long reasoning phase is retried
/// and falls back like one cut before its first byte, and the reasoning
/// of the answer that came is all there once.
#[tokio::test]
async fn a_stream_cut_while_reasoning_is_retried() {
    // One chunk of the OpenAI stream with this `delta` and finish reason.
    let chunk = |delta: &str, finish: &str| {
        format!(
            "data: {{\"id\":\"x\",\"object\":\"chat.completion.chunk\",\"choices\":[{{\"index\":0,\
             \"delta\":{delta},\"finish_reason\":{finish}}}]}}\n\n"
        )
    };
    // A lone source answering `first`, then `ok()`: the text the stream
    // gave and how many requests the source got.
    let answer = |first: String| async move {
        let scripted = Canned {
            status: 200,
            headers: vec![("content-type", "text/event-stream".into())],
            body: first,
        };
        let server = tiny(vec![scripted, ok()]).await;
        let set = sources(vec![source("only", &server.url, 0)], fast());
        let (name, stream) = set
            .stream(&mut chat(), CancellationToken::new())
            .await
            .unwrap();
        assert_eq!(name, "only");
        (text(&stream.collect().await.unwrap()), server.hits())
    };
    let (said, hits) = answer(chunk(
        r#"{"reasoning_content":"Let me think about"}"#,
        "null",
    ))
    .await;
    assert_eq!(said, "from tiny");
    assert_eq!(hits, 2, "the cut while reasoning was retried");

    // An empty finish (some servers send `finish_reason: ""` on every
    // chunk) is no content either; a real one is the answer, if empty.
    let (said, hits) = answer(chunk("{}", r#""""#)).await;
    assert_eq!(said, "from tiny");
    assert_eq!(hits, 2, "the cut after an empty finish was retried");
    let (said, hits) = answer(chunk("{}", r#""stop""#) + "data: [DONE]\n\n").await;
    assert_eq!(said, "");
    assert_eq!(hits, 1, "an empty answer is an answer");
}

/// What comes before the first content is held until it comes, but only
/// so much: a server that reasons (or reports usage) on and on without
/// ever answering fails over once the hold is full, instead of growing
/// memory for as long as it sends.
#[tokio::test]
async fn the_hold_before_the_first_content_is_bounded() {
    let piece = "y".repeat(4 * 1024 * 1024);
    let reasoning = format!(
        "data: {{\"id\":\"x\",\"object\":\"chat.completion.chunk\",\"choices\":[{{\"index\":0,\
         \"delta\":{{\"reasoning_content\":\"{piece}\"}},\"finish_reason\":null}}]}}\n\n"
    );
    let endless = Canned {
        status: 200,
        headers: vec![("content-type", "text/event-stream".into())],
        body: reasoning.repeat(homeagent_llm::source::MAX_OPENING_BYTES / piece.len() + 1),
    };
    let server = tiny(vec![endless]).await;
    let alone = sources(vec![source("main", &server.url, 0)], fast());
    let error = alone
        .stream(&mut chat(), CancellationToken::new())
        .await
        .err()
        .map(|e| e.to_string())
        .unwrap_or_default();
    assert!(
        error.contains(&format!(
            "sent more than {} bytes before any content",
            homeagent_llm::source::MAX_OPENING_BYTES
        )),
        "{error}"
    );
    assert_eq!(server.hits(), 1, "not retried");
    let answering = tiny(vec![ok()]).await;
    let set = main_then_backup(&server.url, &answering.url);
    let (name, _) = set
        .stream(&mut chat(), CancellationToken::new())
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(name, "backup");
}

#[tokio::test]
async fn max_concurrent_holds_under_a_burst() {
    let mock = start_mock(ServerConfig {
        delay_ms: 50,
        chunk_delay_ms: 20,
        ..ServerConfig::default()
    })
    .await;
    let mut config = source("mock", &mock.url(), 0);
    config.max_concurrent = Some(2);
    let set = Arc::new(sources(vec![config], fast()));
    let burst: Vec<_> = (0..6)
        .map(|_| {
            let set = Arc::clone(&set);
            tokio::spawn(async move {
                let (_, stream) = set
                    .stream(&mut chat(), CancellationToken::new())
                    .await
                    .unwrap();
                stream.collect().await.unwrap()
            })
        })
        .collect();
    for task in burst {
        assert!(!text(&task.await.unwrap()).is_empty());
    }
    assert_eq!(stat(&mock, "requests").await, json!(6));
    let peak = stat(&mock, "peak_concurrent_requests")
        .await
        .as_u64()
        .unwrap();
    assert!(peak <= 2, "the mock saw {peak} requests at once");
    assert_eq!(set.health()[0].in_flight, 0);
}

#[tokio::test]
async fn a_single_source_in_cooldown_is_still_tried() {
    let server = tiny(vec![error(503), error(503), ok()]).await;
    let set = sources(vec![source("only", &server.url, 0)], fast());
    let err = set
        .stream(&mut chat(), CancellationToken::new())
        .await
        .unwrap_err();
    assert!(
        matches!(&err, FallbackError::AllFailed { attempts } if attempts.len() == 1 && attempts[0].0 == "only"),
        "{err:?}"
    );
    let health = set.health();
    assert!(health[0].cooling_down_for.is_some(), "{health:?}");

    let (name, stream) = set
        .stream(&mut chat(), CancellationToken::new())
        .await
        .unwrap();
    assert_eq!(name, "only");
    assert_eq!(format!("{stream:?}"), "SourceStream { .. }");
    assert_eq!(text(&stream.collect().await.unwrap()), "from tiny");
    assert_eq!(server.hits(), 3);
    assert!(set.health()[0].cooling_down_for.is_none());
}

/// Each failure in a row doubles the cooldown, from `cooldown_base` up to
/// `cooldown_max`: 60, 120, 240, 480 s, then the 600 s cap.
#[tokio::test]
async fn the_cooldown_doubles_with_each_failure_up_to_its_cap() {
    let server = tiny(vec![error(503)]).await;
    let set = sources(vec![source("only", &server.url, 0)], fast());
    for (failures, expected_s) in [(1, 60), (2, 120), (3, 240), (4, 480), (5, 600), (6, 600)] {
        let err = set
            .stream(&mut chat(), CancellationToken::new())
            .await
            .unwrap_err();
        assert!(matches!(err, FallbackError::AllFailed { .. }), "{err:?}");
        let health = set.health();
        assert_eq!(health[0].failures, failures);
        let left = health[0].cooling_down_for.unwrap();
        // Set just now: at most the whole cooldown is left, and more than
        // the level below it (half), which only a machine stalled for 30 s
        // between the failure and this line could miss.
        let expected = Duration::from_secs(expected_s);
        assert!(
            left <= expected && left > expected / 2,
            "after {failures} failures: {left:?}, expected about {expected:?}"
        );
    }
}

/// Requests that were in flight together when a source failed are one
/// outage, not seven: the first failure cools the source down, and the
/// others, which had started before it, do not double the cooldown again
/// (seven of them made a 1 s blip cost the source 30 min).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failures_in_flight_together_count_once() {
    let failing = tiny(vec![error(503)]).await;
    let answering = tiny(vec![ok()]).await;
    let set = std::sync::Arc::new(main_then_backup(&failing.url, &answering.url));
    let requests: Vec<_> = (0..7)
        .map(|_| {
            let set = std::sync::Arc::clone(&set);
            tokio::spawn(async move {
                set.stream(&mut chat(), CancellationToken::new())
                    .await
                    .map(|(name, _)| name)
                    .unwrap_or_else(|e| panic!("{e}"))
            })
        })
        .collect();
    for request in requests {
        assert_eq!(request.await.unwrap(), "backup");
    }
    // Every request had begun before the first failure cooled it down
    // (each tried main twice, 10 ms apart): one failure.
    assert!(
        failing.hits() >= 7,
        "{} requests reached main",
        failing.hits()
    );
    let main = set.health().into_iter().find(|h| h.name == "main").unwrap();
    assert_eq!(main.failures, 1, "{main:?}");
    let left = main.cooling_down_for.unwrap_or_default();
    assert!(left <= Duration::from_secs(60), "{left:?}");
}

#[tokio::test]
async fn order_is_priority_then_name() {
    let set = sources(
        vec![
            source("zeta", "http://127.0.0.1:9", 0),
            source("beta", "http://127.0.0.1:9", 5),
            source("alpha", "http://127.0.0.1:9", 0),
            source("omega", "http://127.0.0.1:9", 5),
            source("low", "http://127.0.0.1:9", -3),
        ],
        fast(),
    );
    assert_eq!(set.names(), ["beta", "omega", "alpha", "zeta", "low"]);
    assert!(!set.is_empty());
}

/// `Debug` shows each source's name, model, key variable and address,
/// and never the key itself.
#[test]
fn debug_names_each_source_and_never_its_key() {
    let set = sources(vec![source("alpha", "http://127.0.0.1:9", 0)], fast());
    let shown = format!("{set:?}");
    for expected in ["\"alpha\"", "alpha-model", "ALPHA_KEY", "127.0.0.1:9"] {
        assert!(shown.contains(expected), "{expected} in {shown}");
    }
    assert!(!shown.contains("sk-fake-key-never-log"), "{shown}");

    let setup = SourceSetup {
        adapter_dir: Some("/srv/adapters".into()),
        local_model: None,
    };
    assert_eq!(
        format!("{setup:?}"),
        r#"SourceSetup { adapter_dir: Some("/srv/adapters"), local_model: false }"#
    );
}

/// A protocol's name is the one the config file spells.
#[test]
fn protocol_names_are_the_configs_spellings() {
    for protocol in [
        SourceProtocol::Openai,
        SourceProtocol::Anthropic,
        SourceProtocol::Gemini,
        SourceProtocol::Ollama,
        SourceProtocol::Lua,
        SourceProtocol::Demo,
    ] {
        assert_eq!(
            serde_json::to_value(protocol).unwrap(),
            json!(protocol.as_str())
        );
        let spelled: SourceProtocol = serde_json::from_value(json!(protocol.as_str())).unwrap();
        assert_eq!(spelled, protocol);
    }
}

#[tokio::test]
async fn no_sources_is_an_error() {
    let set = sources(Vec::new(), fast());
    assert!(set.is_empty());
    assert_eq!(
        set.stream(&mut chat(), CancellationToken::new())
            .await
            .unwrap_err(),
        FallbackError::NoSources
    );
}

#[tokio::test]
async fn cancellation_stops_the_backoff() {
    let mut limited = error(429);
    limited.headers.push(("retry-after", "5".into()));
    let server = tiny(vec![limited]).await;
    let set = sources(vec![source("only", &server.url, 0)], fast());
    let cancel = CancellationToken::new();
    let trigger = cancel.clone();
    tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(100)).await;
        trigger.cancel();
    });
    let err = set.stream(&mut chat(), cancel).await.unwrap_err();
    assert_eq!(err, FallbackError::Cancelled);
}

#[tokio::test]
async fn cancellation_while_a_source_answers_is_cancelled_and_tries_no_other() {
    // The mock's `!hang` sends its headers and a first chunk without
    // content, then stalls: the token fires while the request is in
    // flight, not between tries.
    let hanging = start_mock(ServerConfig::default()).await;
    let backup = tiny(vec![ok()]).await;
    let set = sources(
        vec![
            source("silent", &hanging.url(), 10),
            source("backup", &backup.url, 0),
        ],
        fast(),
    );
    let cancel = CancellationToken::new();
    let trigger = cancel.clone();
    let mut request = chat();
    request.messages = vec![Message::user("!hang")];
    let waiting = tokio::spawn(async move { set.stream(&mut request, cancel).await.map(|_| ()) });
    // Until the mock holds the request (a liveness guard, not a timing:
    // a mock that never got it would otherwise hang the test run).
    for _ in 0..3_000 {
        if stat(&hanging, "hangs").await == json!(1) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(
        stat(&hanging, "hangs").await,
        json!(1),
        "the mock never held the request"
    );
    trigger.cancel();
    assert_eq!(
        waiting.await.unwrap().unwrap_err(),
        FallbackError::Cancelled
    );
    assert_eq!(stat(&hanging, "hangs").await, json!(1));
    assert_eq!(backup.hits(), 0);
}

/// `OLLAMA_HOST` as Ollama's own clients read it: without a port, the
/// port is Ollama's 11434 (443 for https), not the scheme's 80; and the
/// common `0.0.0.0` (what the server binds) is reached on loopback.
#[test]
fn ollama_host_without_a_port_means_ollamas_port() {
    let url_for = |host: &str| {
        let env = |name: &str| (name == "OLLAMA_HOST").then(|| host.to_owned());
        let configs = homeagent_llm::source::environment_configs(&env);
        configs[0].base_url.clone().unwrap()
    };
    assert_eq!(url_for("0.0.0.0"), "http://127.0.0.1:11434");
    assert_eq!(url_for("myhost"), "http://myhost:11434");
    assert_eq!(url_for("myhost:8000"), "http://myhost:8000");
    assert_eq!(url_for("http://myhost"), "http://myhost:11434");
    assert_eq!(
        url_for("https://ollama.example/"),
        "https://ollama.example:443"
    );
    assert_eq!(url_for("http://10.0.0.2:11434/"), "http://10.0.0.2:11434");
    assert_eq!(url_for("[::1]"), "http://[::1]:11434");
    assert_eq!(url_for("[::1]:9000"), "http://[::1]:9000");
    assert_eq!(url_for("0.0.0.0:11500"), "http://127.0.0.1:11500");
    assert_eq!(url_for("[::]"), "http://[::1]:11434");
    assert_eq!(url_for("::1"), "http://[::1]:11434");
    assert_eq!(url_for("fe80::2"), "http://[fe80::2]:11434");
}

#[test]
fn environment_discovery_uses_conventional_variables() {
    let vars: HashMap<&str, &str> = [
        ("OPENAI_API_KEY", "sk-openai-secret"),
        ("OPENAI_BASE_URL", "https://llm.example/v1"),
        ("GEMINI_API_KEY", "gm-secret"),
        ("OLLAMA_HOST", "127.0.0.1:11434"),
    ]
    .into_iter()
    .collect();
    let env = |name: &str| vars.get(name).map(|v| (*v).to_owned());
    let set = Sources::from_environment(&env, FallbackOptions::default()).unwrap();
    let health = set.health();
    let got: Vec<(&str, SourceProtocol, &str, &str)> = health
        .iter()
        .map(|h| {
            (
                h.name.as_str(),
                h.protocol,
                h.base_url.as_str(),
                h.model.as_str(),
            )
        })
        .collect();
    assert_eq!(
        got,
        [
            (
                "gemini",
                SourceProtocol::Gemini,
                "https://generativelanguage.googleapis.com",
                homeagent_llm::source::DEFAULT_GEMINI_MODEL
            ),
            (
                "ollama",
                SourceProtocol::Ollama,
                "http://127.0.0.1:11434",
                homeagent_llm::source::DEFAULT_OLLAMA_MODEL
            ),
            (
                "openai",
                SourceProtocol::Openai,
                "https://llm.example/v1",
                homeagent_llm::source::DEFAULT_OPENAI_MODEL
            ),
        ]
    );
    assert!(health.iter().all(|h| h.disabled.is_none()));
    let debug = format!("{set:?}");
    assert!(!debug.contains("secret"), "Debug leaks a key: {debug}");
    // Each keyed source reads its key from the variable that named it.
    let keys: Vec<(String, Option<String>)> = homeagent_llm::source::environment_configs(&env)
        .into_iter()
        .map(|c| (c.name, c.api_key_env))
        .collect();
    assert_eq!(
        keys,
        [
            ("openai".to_owned(), Some("OPENAI_API_KEY".to_owned())),
            ("gemini".to_owned(), Some("GEMINI_API_KEY".to_owned())),
            ("ollama".to_owned(), None),
        ]
    );

    // HOMEAGENT_MODEL overrides the default model; defaults otherwise.
    let env = |name: &str| match name {
        "ANTHROPIC_API_KEY" => Some("ak".to_owned()),
        "HOMEAGENT_MODEL" => Some("my-model".to_owned()),
        _ => None,
    };
    let set = Sources::from_environment(&env, FallbackOptions::default()).unwrap();
    let health = set.health();
    assert_eq!(health.len(), 1);
    assert_eq!(health[0].name, "anthropic");
    assert_eq!(health[0].base_url, "https://api.anthropic.com");
    assert_eq!(health[0].model, "my-model");
    assert_eq!(health[0].protocol, SourceProtocol::Anthropic);

    let none = Sources::from_environment(&|_: &str| None, FallbackOptions::default()).unwrap();
    assert!(none.is_empty());
}

#[test]
fn unknown_config_keys_are_rejected_by_name() {
    let err = serde_json::from_value::<SourceConfig>(json!({
        "name": "x", "protocol": "openai", "base_url": "http://h/v1", "model": "m",
        "api_key": "sk-inline"
    }))
    .unwrap_err();
    assert!(err.to_string().contains("api_key"), "{err}");

    let config: SourceConfig = serde_json::from_value(json!({
        "name": "x", "protocol": "anthropic", "base_url": "http://h", "model": "m",
        "api_key_env": "X_KEY", "priority": 3, "max_concurrent": 4
    }))
    .unwrap();
    assert_eq!(config.priority, 3);
    assert_eq!(config.max_concurrent, Some(4));
    assert_eq!(config.protocol, SourceProtocol::Anthropic);
}

#[tokio::test]
async fn a_silent_source_is_cut_by_the_idle_timeout_and_the_next_one_answers() {
    // The mock's `!hang` sends its headers and a first chunk without
    // content, then stalls: silence before any content, so the source is
    // retried and then left for the next one.
    let hanging = start_mock(ServerConfig::default()).await;
    let backup = tiny(vec![ok()]).await;
    let idle = Duration::from_millis(250);
    let options = FallbackOptions {
        transport: homeagent_llm::Options {
            stream_idle_timeout: idle,
            ..homeagent_llm::Options::default()
        },
        ..fast()
    };
    let set = sources(
        vec![
            source("silent", &hanging.url(), 10),
            source("backup", &backup.url, 0),
        ],
        options,
    );
    let mut request = chat();
    request.messages = vec![Message::user("!hang")];
    let started = Instant::now();
    let (name, stream) = set
        .stream(&mut request, CancellationToken::new())
        .await
        .unwrap();
    assert_eq!(name, "backup");
    assert_eq!(text(&stream.collect().await.unwrap()), "from tiny");
    // Both tries at the silent source waited out the idle timeout.
    assert!(started.elapsed() >= idle * 2, "{:?}", started.elapsed());
    assert_eq!(stat(&hanging, "hangs").await, json!(2));
    assert_eq!(backup.hits(), 1);
    let health = set.health();
    let silent = health.iter().find(|h| h.name == "silent").unwrap();
    assert_eq!(silent.failures, 1);
    assert!(silent.cooling_down_for.is_some());
}

fn anthropic_sse(events: &[(&str, Value)]) -> Canned {
    let body = events
        .iter()
        .map(|(name, data)| format!("event: {name}\ndata: {data}\n\n"))
        .collect();
    Canned {
        status: 200,
        headers: vec![("content-type", "text/event-stream".into())],
        body,
    }
}

fn message_start() -> (&'static str, Value) {
    (
        "message_start",
        json!({"type": "message_start", "message": {"id": "msg_1", "type": "message",
            "role": "assistant", "model": "m", "content": [], "stop_reason": null,
            "usage": {"input_tokens": 12, "output_tokens": 1}}}),
    )
}

fn anthropic_error(kind: &str) -> (&'static str, Value) {
    (
        "error",
        json!({"type": "error", "error": {"type": kind, "message": "scripted"}}),
    )
}

fn anthropic_ok() -> Canned {
    anthropic_sse(&[
        message_start(),
        (
            "content_block_start",
            json!({"type": "content_block_start", "index": 0,
                "content_block": {"type": "text", "text": ""}}),
        ),
        (
            "content_block_delta",
            json!({"type": "content_block_delta", "index": 0,
                "delta": {"type": "text_delta", "text": "from claude"}}),
        ),
        (
            "content_block_stop",
            json!({"type": "content_block_stop", "index": 0}),
        ),
        (
            "message_delta",
            json!({"type": "message_delta", "delta": {"stop_reason": "end_turn"},
                "usage": {"output_tokens": 3}}),
        ),
        ("message_stop", json!({"type": "message_stop"})),
    ])
}

fn anthropic_source(name: &str, base: &str, priority: i32) -> SourceConfig {
    SourceConfig {
        base_url: Some(base.to_owned()),
        model: Some(format!("{name}-model")),
        api_key_env: Some(format!("{}_KEY", name.to_uppercase())),
        priority,
        ..SourceConfig::new(name, SourceProtocol::Anthropic)
    }
}

/// Anthropic answers 200, sends `message_start` (which carries usage, not
/// content), then an `overloaded_error` event: nothing reached the caller,
/// so the request is tried again like any overload.
#[tokio::test]
async fn an_overload_reported_after_message_start_is_retried_before_any_content() {
    let overloaded = anthropic_sse(&[message_start(), anthropic_error("overloaded_error")]);
    let server = tiny(vec![overloaded, anthropic_ok()]).await;
    let set = sources(vec![anthropic_source("claude", &server.url, 0)], fast());
    let (_, stream) = set
        .stream(&mut chat(), CancellationToken::new())
        .await
        .unwrap();
    let events = stream.collect().await.unwrap();
    assert_eq!(text(&events), "from claude");
    assert_eq!(server.hits(), 2, "the overloaded answer was retried once");

    // A request the provider calls invalid is not retried, even when it
    // says so inside a stream.
    let invalid = anthropic_sse(&[message_start(), anthropic_error("invalid_request_error")]);
    let server = tiny(vec![invalid, anthropic_ok()]).await;
    let set = sources(vec![anthropic_source("claude", &server.url, 0)], fast());
    let err = set
        .stream(&mut chat(), CancellationToken::new())
        .await
        .unwrap_err();
    assert!(
        matches!(&err, FallbackError::Rejected { source, .. } if source == "claude"),
        "{err}"
    );
    assert!(err.to_string().contains("invalid_request_error"), "{err}");
    assert_eq!(server.hits(), 1);
}
