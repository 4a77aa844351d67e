#![allow(clippy::unwrap_used, clippy::expect_used)] // a panic in a test is a test failure

//! Source kinds beyond the four native wires: `lua` (an adapter found in
//! the user's adapter directory before the bundled ones) and `demo` (a
//! model answering in-process), and the setup errors that name what to fix.

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use homeagent_core::{CancellationToken, Message, StreamAssembler, StreamEvent, ToolCallFragment};
use homeagent_llm::{
    ChatRequest, EventStream, FallbackError, FallbackOptions, LocalModel, ProviderError,
    SetupError, SourceConfig, SourceProtocol, SourceSetup, Sources,
};
use homeagent_mock_llm::{MockServer, ServerConfig};
use serde_json::json;

fn chat(text: &str) -> ChatRequest {
    ChatRequest {
        model: String::new(),
        messages: vec![Message::user(text)],
        tools: Vec::new(),
        max_tokens: 256,
        temperature: None,
        stream: true,
        rendered: Default::default(),
    }
}

fn no_env(_: &str) -> Option<String> {
    None
}

/// A unique, empty directory under the system temp dir.
fn temp_dir(tag: &str) -> PathBuf {
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    let dir = std::env::temp_dir().join(format!(
        "homeagent-source-setup-{tag}-{}-{}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::SeqCst)
    ));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// A model that answers every request with one text and one call, and
/// counts the requests it saw (and the model name they carried).
#[derive(Default)]
struct Scripted {
    requests: AtomicUsize,
    models: std::sync::Mutex<Vec<String>>,
}

impl LocalModel for Scripted {
    fn respond(&self, request: &ChatRequest) -> Result<Vec<StreamEvent>, ProviderError> {
        self.requests.fetch_add(1, Ordering::SeqCst);
        self.models.lock().unwrap().push(request.model.clone());
        Ok(vec![
            StreamEvent::TextDelta {
                text: "scripted ".into(),
            },
            StreamEvent::ToolCall(ToolCallFragment {
                stream_index: Some(0),
                id: Some("call_local_1".into()),
                name: Some("demo_echo".into()),
                raw_arguments: "{\"x\":".into(),
            }),
            StreamEvent::ToolCall(ToolCallFragment {
                stream_index: Some(0),
                id: None,
                name: None,
                raw_arguments: "1}".into(),
            }),
            StreamEvent::Finish {
                reason: "tool_calls".into(),
            },
        ])
    }
}

async fn collect(set: &Sources, text: &str) -> (String, homeagent_core::AssembledTurn) {
    let (name, stream) = set
        .stream(&mut chat(text), CancellationToken::new())
        .await
        .unwrap();
    let mut assembler = StreamAssembler::new();
    for event in stream.collect().await.unwrap() {
        assembler.push(event);
    }
    (name, assembler.finish())
}

#[tokio::test]
async fn a_demo_source_answers_from_the_local_model() {
    let model = Arc::new(Scripted::default());
    let setup = SourceSetup {
        local_model: Some(Arc::clone(&model) as Arc<dyn LocalModel>),
        ..SourceSetup::default()
    };
    let set = Sources::build(
        vec![SourceConfig::new("offline", SourceProtocol::Demo)],
        &no_env,
        FallbackOptions::default(),
        &setup,
    )
    .unwrap();
    let (name, turn) = collect(&set, "hello").await;
    assert_eq!(name, "offline");
    assert_eq!(
        format!("{:?}", EventStream::from_events(Vec::new())),
        "EventStream { .. }"
    );
    assert_eq!(turn.text, "scripted ");
    assert_eq!(turn.calls.len(), 1);
    assert_eq!(turn.calls[0].call.id, "call_local_1");
    assert_eq!(turn.calls[0].call.name, "demo_echo");
    assert_eq!(turn.calls[0].call.arguments, json!({"x": 1}));
    assert_eq!(model.requests.load(Ordering::SeqCst), 1);
    // A demo source without a model name is sent the name "demo".
    assert_eq!(*model.models.lock().unwrap(), ["demo"]);
    let health = set.health();
    assert_eq!(health[0].protocol, SourceProtocol::Demo);
    assert_eq!(health[0].model, "demo");
}

/// A model that refuses every request with a 503, noting on tokio's
/// clock when each came.
#[derive(Default)]
struct Busy {
    asked_at: std::sync::Mutex<Vec<tokio::time::Instant>>,
}

impl LocalModel for Busy {
    fn respond(&self, _: &ChatRequest) -> Result<Vec<StreamEvent>, ProviderError> {
        self.asked_at
            .lock()
            .unwrap()
            .push(tokio::time::Instant::now());
        Err(ProviderError::Status {
            status: 503,
            message: "busy".into(),
            retry_after: None,
        })
    }
}

/// Retries wait `backoff_base`, then twice as long each time, each spread
/// up by at most half. Tokio's clock is paused, so the waits are read
/// exactly (no time is measured).
#[tokio::test(start_paused = true)]
async fn retries_back_off_from_the_base_doubling_each_time() {
    let model = Arc::new(Busy::default());
    let setup = SourceSetup {
        local_model: Some(Arc::clone(&model) as Arc<dyn LocalModel>),
        ..SourceSetup::default()
    };
    let options = FallbackOptions {
        attempts_per_source: 4,
        backoff_base: Duration::from_millis(100),
        ..FallbackOptions::default()
    };
    let set = Sources::build(
        vec![SourceConfig::new("offline", SourceProtocol::Demo)],
        &no_env,
        options,
        &setup,
    )
    .unwrap();
    let err = set
        .stream(&mut chat("hello"), CancellationToken::new())
        .await
        .unwrap_err();
    assert!(matches!(err, FallbackError::AllFailed { .. }), "{err:?}");
    let asked_at = model.asked_at.lock().unwrap();
    let waits: Vec<Duration> = asked_at.windows(2).map(|w| w[1] - w[0]).collect();
    // Each at least its doubled base, and at most half as much again
    // (the jitter that keeps requests failing together apart).
    assert_eq!(waits.len(), 3, "{asked_at:?}");
    for (wait, base) in waits.iter().zip([100, 200, 400].map(Duration::from_millis)) {
        assert!(*wait >= base && *wait < base * 3 / 2, "{waits:?}");
    }
}

#[test]
fn a_demo_source_without_a_local_model_is_a_setup_error() {
    let err = Sources::build(
        vec![SourceConfig::new("offline", SourceProtocol::Demo)],
        &no_env,
        FallbackOptions::default(),
        &SourceSetup::default(),
    )
    .unwrap_err();
    assert_eq!(
        err,
        SetupError::NoLocalModel {
            source_name: "offline".into()
        }
    );
}

#[test]
fn network_sources_need_a_base_url_and_a_model() {
    let err = Sources::build(
        vec![SourceConfig {
            model: Some("m".into()),
            ..SourceConfig::new("remote", SourceProtocol::Openai)
        }],
        &no_env,
        FallbackOptions::default(),
        &SourceSetup::default(),
    )
    .unwrap_err();
    assert!(
        matches!(&err, SetupError::Invalid { source_name, key, .. } if source_name == "remote" && *key == "base_url"),
        "{err:?}"
    );
    let err = Sources::build(
        vec![SourceConfig {
            base_url: Some("http://127.0.0.1:9/v1".into()),
            ..SourceConfig::new("remote", SourceProtocol::Anthropic)
        }],
        &no_env,
        FallbackOptions::default(),
        &SourceSetup::default(),
    )
    .unwrap_err();
    assert!(
        matches!(&err, SetupError::Invalid { source_name, key, .. } if source_name == "remote" && *key == "model"),
        "{err:?}"
    );
}

/// A `base_url` that is not an http(s) URL is a typo, refused by name at
/// start-up, not a connection error at the first request; a query or
/// fragment would land in the middle of the wire's path.
#[test]
fn a_base_url_that_is_not_an_http_url_is_refused_by_name() {
    let cases = [
        ("localhost:8080/v1", "http://"),
        ("ftp://example.com/v1", "http"),
        ("http://:8080/v1", "host"),
        ("http://example.com/v1?api-version=1", "query"),
        ("http://example.com/v1#x", "fragment"),
    ];
    for (url, piece) in cases {
        let err = Sources::build(
            vec![SourceConfig {
                base_url: Some(url.into()),
                model: Some("m".into()),
                ..SourceConfig::new("remote", SourceProtocol::Openai)
            }],
            &no_env,
            FallbackOptions::default(),
            &SourceSetup::default(),
        )
        .unwrap_err();
        assert!(
            matches!(&err, SetupError::Invalid { source_name, key, .. } if source_name == "remote" && *key == "base_url"),
            "{url}: {err:?}"
        );
        let text = err.to_string();
        assert!(text.contains(piece), "{url}: {text}");
    }
}

/// Credentials in a `base_url` (a proxy's `user:password@`, or a key in
/// the query a Lua adapter's URL keeps) reach neither the status report
/// nor a connection error's text.
#[tokio::test]
async fn credentials_in_a_base_url_are_never_shown() {
    // Bound and dropped at once: nothing listens on the port.
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = closed.local_addr().unwrap().port();
    drop(closed);
    let sources = [
        SourceConfig {
            base_url: Some(format!("http://proxyuser:s3cretpass@127.0.0.1:{port}/v1")),
            model: Some("m".into()),
            ..SourceConfig::new("remote", SourceProtocol::Openai)
        },
        lua_source(
            "adapted",
            &format!("http://127.0.0.1:{port}/v1?key=s3cretquery"),
            Some("openai"),
        ),
    ];
    for source in sources {
        let set = Sources::build(
            vec![source],
            &no_env,
            FallbackOptions::default(),
            &SourceSetup::default(),
        )
        .unwrap();
        let health = set.health();
        assert_eq!(health[0].base_url, format!("http://127.0.0.1:{port}/v1"));
        let err = set
            .stream(&mut chat("hi"), CancellationToken::new())
            .await
            .err()
            .unwrap();
        let text = format!("{err} {err:?} {set:?}");
        assert!(text.contains(&format!("127.0.0.1:{port}")), "{text}");
        for secret in ["s3cret", "proxyuser"] {
            assert!(!text.contains(secret), "{text}");
        }
    }
}

/// `max_concurrent` outside 1 to 65,536 is refused by name: 0 would let
/// nothing through (it used to be taken as 1, silently), and a huge value
/// made the semaphore panic at start-up.
#[test]
fn max_concurrent_out_of_range_is_refused_by_name() {
    for limit in [0, usize::MAX, 65_537] {
        let err = Sources::build(
            vec![SourceConfig {
                base_url: Some("http://127.0.0.1:9/v1".into()),
                model: Some("m".into()),
                max_concurrent: Some(limit),
                ..SourceConfig::new("remote", SourceProtocol::Openai)
            }],
            &no_env,
            FallbackOptions::default(),
            &SourceSetup::default(),
        )
        .unwrap_err();
        assert!(
            matches!(&err, SetupError::Invalid { source_name, key, .. } if source_name == "remote" && *key == "max_concurrent"),
            "{limit}: {err:?}"
        );
        assert!(err.to_string().contains("65536"), "{err}");
    }
}

/// `api_key_env` names a variable; a key pasted there instead must not be
/// echoed back in the error, in status pages or in logs.
#[test]
fn an_api_key_env_that_is_not_a_variable_name_is_refused_without_echoing_it() {
    let pasted = "sk-proj-4f9c1e7a-pasted-by-mistake";
    for value in [pasted, "", "OPENAI KEY", "1KEY"] {
        let err = Sources::build(
            vec![SourceConfig {
                base_url: Some("http://127.0.0.1:9/v1".into()),
                model: Some("m".into()),
                api_key_env: Some(value.into()),
                ..SourceConfig::new("remote", SourceProtocol::Openai)
            }],
            &no_env,
            FallbackOptions::default(),
            &SourceSetup::default(),
        )
        .err()
        .unwrap_or_else(|| panic!("{value:?} was taken"));
        assert!(
            matches!(&err, SetupError::Invalid { source_name, key, .. } if source_name == "remote" && *key == "api_key_env"),
            "{value:?}: {err:?}"
        );
        let text = err.to_string();
        assert!(!text.contains("pasted"), "{text}");
        assert!(text.contains("OPENAI_API_KEY"), "{text}");
    }
}

/// A key variable that is set but empty is a missing key: the source is
/// disabled naming the variable (as `config check` says), not sent with an
/// empty key.
#[test]
fn an_empty_key_variable_disables_the_source_like_an_unset_one() {
    let sources = Sources::build(
        vec![SourceConfig {
            base_url: Some("http://127.0.0.1:9/v1".into()),
            model: Some("m".into()),
            api_key_env: Some("REMOTE_KEY".into()),
            ..SourceConfig::new("remote", SourceProtocol::Openai)
        }],
        &|var: &str| (var == "REMOTE_KEY").then(|| "  ".to_owned()),
        FallbackOptions::default(),
        &SourceSetup::default(),
    )
    .unwrap();
    let health = sources.health();
    let disabled = health[0].disabled.as_deref().unwrap_or("(enabled)");
    assert!(disabled.contains("REMOTE_KEY"), "{disabled}");
}

fn lua_source(name: &str, base_url: &str, adapter: Option<&str>) -> SourceConfig {
    SourceConfig {
        base_url: Some(base_url.into()),
        model: Some("mock".into()),
        adapter: adapter.map(str::to_owned),
        ..SourceConfig::new(name, SourceProtocol::Lua)
    }
}

#[tokio::test]
async fn a_lua_source_with_a_bundled_adapter_speaks_to_the_mock() {
    let server = MockServer::start("127.0.0.1:0", ServerConfig::default())
        .await
        .unwrap();
    let set = Sources::build(
        vec![lua_source(
            "via-lua",
            &format!("{}/v1", server.url()),
            Some("openai"),
        )],
        &no_env,
        FallbackOptions::default(),
        &SourceSetup::default(),
    )
    .unwrap();
    let (name, turn) = collect(&set, "!batch3").await;
    assert_eq!(name, "via-lua");
    let names: Vec<&str> = turn.calls.iter().map(|c| c.call.name.as_str()).collect();
    assert_eq!(names, ["demo_echo", "demo_echo", "demo_echo"]);
    assert!(turn.calls.iter().all(|c| c.argument_error.is_none()));
    server.shutdown().await.unwrap();
}

#[tokio::test]
async fn the_users_adapter_directory_overrides_a_bundled_adapter() {
    let server = MockServer::start("127.0.0.1:0", ServerConfig::default())
        .await
        .unwrap();
    let dir = temp_dir("override");
    // Same name as the bundled adapter; answers every chunk with its own text.
    std::fs::write(
        dir.join("openai.lua"),
        r#"return {
            transform_request = function(raw) return raw end,
            transform_stream_chunk = function(raw)
                if raw == "[DONE]" then return json.encode({ done = true }) end
                return json.encode({ content = "user adapter" })
            end,
        }"#,
    )
    .unwrap();
    let setup = SourceSetup {
        adapter_dir: Some(dir.clone()),
        ..SourceSetup::default()
    };
    let set = Sources::build(
        vec![lua_source(
            "mine",
            &format!("{}/v1", server.url()),
            Some("openai"),
        )],
        &no_env,
        FallbackOptions::default(),
        &setup,
    )
    .unwrap();
    let (_, turn) = collect(&set, "!text").await;
    assert!(turn.text.starts_with("user adapter"), "{:?}", turn.text);
    assert!(turn.calls.is_empty());

    // A name found in neither place lists where it looked.
    let err = Sources::build(
        vec![lua_source("ghost", "http://127.0.0.1:9/v1", Some("nosuch"))],
        &no_env,
        FallbackOptions::default(),
        &setup,
    )
    .unwrap_err();
    let message = err.to_string();
    assert!(
        matches!(err, SetupError::Adapter { ref source_name, .. } if source_name == "ghost"),
        "{err:?}"
    );
    assert!(message.contains("nosuch"), "{message}");
    assert!(message.contains(&dir.display().to_string()), "{message}");
    assert!(
        message.contains("anthropic") && message.contains("openai"),
        "{message}"
    );

    // An adapter given as a path is loaded from that path.
    let path = dir.join("openai.lua");
    let set = Sources::build(
        vec![lua_source(
            "by-path",
            &format!("{}/v1", server.url()),
            Some(path.to_str().unwrap()),
        )],
        &no_env,
        FallbackOptions::default(),
        &SourceSetup::default(),
    )
    .unwrap();
    let (_, turn) = collect(&set, "!text").await;
    assert!(turn.text.starts_with("user adapter"), "{:?}", turn.text);

    server.shutdown().await.unwrap();
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn a_lua_source_without_an_adapter_names_the_missing_key() {
    let err = Sources::build(
        vec![lua_source("bare", "http://127.0.0.1:9/v1", None)],
        &no_env,
        FallbackOptions::default(),
        &SourceSetup::default(),
    )
    .unwrap_err();
    assert!(
        matches!(&err, SetupError::Invalid { source_name, key, .. } if source_name == "bare" && *key == "adapter"),
        "{err:?}"
    );
}

#[test]
fn source_protocols_parse_by_name_and_list_the_legal_ones() {
    let config: SourceConfig = serde_json::from_value(json!({
        "name": "x", "protocol": "lua", "base_url": "http://h/v1", "model": "m",
        "adapter": "openai"
    }))
    .unwrap();
    assert_eq!(config.protocol, SourceProtocol::Lua);
    assert_eq!(config.adapter.as_deref(), Some("openai"));
    let config: SourceConfig =
        serde_json::from_value(json!({"name": "d", "protocol": "demo"})).unwrap();
    assert_eq!(config.protocol, SourceProtocol::Demo);
    let err = serde_json::from_value::<SourceConfig>(json!({"name": "x", "protocol": "opneai"}))
        .unwrap_err()
        .to_string();
    for legal in ["openai", "anthropic", "gemini", "ollama", "lua", "demo"] {
        assert!(err.contains(legal), "{err}");
    }
}
