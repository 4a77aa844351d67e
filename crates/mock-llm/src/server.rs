//! The mock LLM as a real HTTP server (`homeagent mock-llm`).
//!
//! It speaks the four provider wires on their native paths, streamed and
//! not, and plays [`crate::script::respond`] for every request:
//!
//! | wire      | path                                                        |
//! |-----------|-------------------------------------------------------------|
//! | OpenAI    | `POST /v1/chat/completions`                                 |
//! | Anthropic | `POST /v1/messages`                                         |
//! | Gemini    | `POST /v1beta/models/{model}:streamGenerateContent?alt=sse`, `:generateContent` (also under `/v1/`) |
//! | Ollama    | `POST /api/chat`                                            |
//!
//! plus `GET /v1/models`, `GET`/`HEAD /` (200), `GET /stats` and
//! `GET`/`DELETE /stats/inputs` (the per-input log, see [`crate::inputs`]).
//!
//! Two triggers act at the HTTP level, in the last user message when no
//! tool result follows it: `!err` answers HTTP 500 with an error body in the
//! wire's own shape, and `!hang` answers 200, sends the headers and one
//! chunk (half the body when not streaming), then sends nothing more until
//! the client goes away or the server shuts down.
//!
//! `/stats` counts what the server saw, including `peak_concurrent_requests`
//! (the most requests it was serving at once, from the request's arrival to
//! the end of its body) and, per kind of input, the mock's own time: parsing
//! the request, playing the script and encoding the reply, without the
//! configured delays.

use std::collections::BTreeMap;
use std::convert::Infallible;
use std::future::Future;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::{DefaultBodyLimit, FromRequestParts, Path, State};
use axum::http::request::Parts;
use axum::http::{StatusCode, Uri, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{delete, get, post};
use axum::serve::ListenerExt as _;
use homeagent_core::{CancellationToken, Message};
use serde_json::value::RawValue;
use serde_json::{Value, json};
use tokio::net::{TcpListener, TcpSocket};
use tokio::sync::mpsc;

use crate::inputs::{InputLog, RequestKind};
use crate::script::{Reply, ScriptOptions, Trigger, respond_sized};
use crate::stats::Stats;
use crate::wire::members::ToolsMemo;
use crate::wire::{self, Ctx, ParsedRequest, Wire};

/// Request bodies up to this size are accepted (long benchmark sessions).
const BODY_LIMIT: usize = 64 * 1024 * 1024;

const SSE: &str = "text/event-stream";
const NDJSON: &str = "application/x-ndjson";
const JSON: &str = "application/json";

/// How the server behaves.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ServerConfig {
    /// Time before the first byte of every model response.
    pub delay_ms: u64,
    /// Time between the chunks of a streamed response.
    pub chunk_delay_ms: u64,
    /// The script's knobs (`S`, `--tool`).
    pub script: ScriptOptions,
}

/// Places in the accept queue (the kernel caps it at `net.core.somaxconn`):
/// a bench's burst of connections waits there while the mock is busy,
/// where the common default of 128 drops the rest for a second (the
/// server crate's listener keeps as many, for the same reason).
const LISTEN_BACKLOG: u32 = 1024;

/// A listener on `addr` with [`LISTEN_BACKLOG`] places.
fn listen_on(addr: SocketAddr) -> std::io::Result<TcpListener> {
    let socket = if addr.is_ipv4() {
        TcpSocket::new_v4()?
    } else {
        TcpSocket::new_v6()?
    };
    #[cfg(unix)]
    socket.set_reuseaddr(true)?;
    socket.bind(addr)?;
    socket.listen(LISTEN_BACKLOG)
}

/// A running server (for tests and embedding). Dropping it does not stop
/// it; call [`MockServer::shutdown`].
#[derive(Debug)]
pub struct MockServer {
    addr: SocketAddr,
    stop: CancellationToken,
    task: tokio::task::JoinHandle<std::io::Result<()>>,
}

impl MockServer {
    /// Binds `listen` (use port 0 for a free port) and serves in the background.
    pub async fn start(listen: &str, config: ServerConfig) -> std::io::Result<MockServer> {
        let addr = tokio::net::lookup_host(listen)
            .await?
            .next()
            .ok_or_else(|| {
                std::io::Error::new(
                    std::io::ErrorKind::InvalidInput,
                    format!("{listen} resolves to no address"),
                )
            })?;
        let listener = listen_on(addr)?;
        let addr = listener.local_addr()?;
        let stop = CancellationToken::new();
        let task = tokio::spawn(serve(listener, config, stop.clone().cancelled_owned()));
        Ok(MockServer { addr, stop, task })
    }

    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// `http://<addr>`, without a trailing slash.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Stops accepting, ends hanging responses, and waits for open ones.
    pub async fn shutdown(self) -> std::io::Result<()> {
        self.stop.cancel();
        self.task.await.map_err(std::io::Error::other)?
    }
}

/// Serves on `listener` until `shutdown` completes, then finishes the
/// responses in progress (hanging ones are ended at once) and returns.
pub async fn serve(
    listener: TcpListener,
    config: ServerConfig,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let stop = CancellationToken::new();
    let state = Arc::new(ServerState {
        config,
        stats: Mutex::new(Stats::default()),
        inputs: Mutex::new(InputLog::default()),
        in_flight: AtomicU64::new(0),
        peak: AtomicU64::new(0),
        responses: AtomicU64::new(0),
        stop: stop.clone(),
        tools: ToolsMemo::default(),
    });
    let trigger = stop.clone();
    tokio::spawn(async move {
        shutdown.await;
        trigger.cancel();
    });
    // TCP_NODELAY: a streamed reply is many small writes, and with Nagle's
    // algorithm each one after the first waits for the client's delayed ACK
    // (40 ms on Linux), so the agent would see ~40 ms per model turn that
    // neither the configured delays nor `/stats/inputs` account for.
    let listener = listener.tap_io(|tcp| {
        let _ = tcp.set_nodelay(true);
    });
    axum::serve(listener, router(state))
        .with_graceful_shutdown(stop.cancelled_owned())
        .await
}

fn router(state: Arc<ServerState>) -> Router {
    Router::new()
        .route("/", get(root))
        .route("/v1/models", get(models))
        .route("/stats", get(stats))
        .route("/stats/inputs", get(input_log))
        .route("/stats/inputs", delete(clear_input_log))
        .route("/v1/chat/completions", post(openai))
        .route("/v1/messages", post(anthropic))
        .route("/v1beta/models/{model_action}", post(gemini))
        // google-genai 3.x asks for API version v1 by default; the real API serves both.
        .route("/v1/models/{model_action}", post(gemini))
        .route("/api/chat", post(ollama))
        .layer(DefaultBodyLimit::max(BODY_LIMIT))
        .with_state(state)
}

struct ServerState {
    config: ServerConfig,
    stats: Mutex<Stats>,
    inputs: Mutex<InputLog>,
    in_flight: AtomicU64,
    peak: AtomicU64,
    responses: AtomicU64,
    stop: CancellationToken,
    /// The last OpenAI tool list read, to recognise the next by.
    tools: wire::members::ToolsMemo,
}

impl ServerState {
    fn enter(self: &Arc<Self>) -> InFlight {
        let now = self.in_flight.fetch_add(1, Ordering::SeqCst) + 1;
        self.peak.fetch_max(now, Ordering::SeqCst);
        InFlight(Arc::clone(self))
    }

    fn with_stats(&self, f: impl FnOnce(&mut Stats)) {
        // A panic while holding the lock cannot leave the counters invalid.
        let mut stats = self.stats.lock().unwrap_or_else(|e| e.into_inner());
        f(&mut stats);
    }

    fn with_inputs(&self, f: impl FnOnce(&mut InputLog)) {
        let mut inputs = self.inputs.lock().unwrap_or_else(|e| e.into_inner());
        f(&mut inputs);
    }
}

/// One request being served; dropped when its body is finished (or the
/// client went away).
struct InFlight(Arc<ServerState>);

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.in_flight.fetch_sub(1, Ordering::SeqCst);
    }
}

async fn root() -> &'static str {
    "HomeAgent mock LLM: OpenAI, Anthropic, Gemini and Ollama wires. GET /stats for counters.\n"
}

async fn models() -> Response {
    json_response(
        StatusCode::OK,
        &json!({"object": "list", "data": [
            {"id": "mock-llm", "object": "model", "created": 0, "owned_by": "homeagent"}
        ]}),
    )
}

async fn stats(State(state): State<Arc<ServerState>>) -> Response {
    let mut body = json!({});
    state.with_stats(|s| body = s.to_json());
    body["peak_concurrent_requests"] = json!(state.peak.load(Ordering::SeqCst));
    body["in_flight_requests"] = json!(state.in_flight.load(Ordering::SeqCst));
    body["config"] = json!({
        "delay_ms": state.config.delay_ms,
        "chunk_delay_ms": state.config.chunk_delay_ms,
        "tool_sleep_ms": state.config.script.tool_sleep_ms,
        "tool": state.config.script.tool_name,
    });
    json_response(StatusCode::OK, &body)
}

async fn input_log(State(state): State<Arc<ServerState>>) -> Response {
    let mut body = json!({});
    state.with_inputs(|log| body = log.to_json());
    json_response(StatusCode::OK, &body)
}

async fn clear_input_log(State(state): State<Arc<ServerState>>) -> Response {
    let mut cleared = 0;
    state.with_inputs(|log| cleared = log.clear());
    json_response(StatusCode::OK, &json!({"cleared": cleared}))
}

async fn openai(State(state): State<Arc<ServerState>>, arrived: Arrived, body: Bytes) -> Response {
    chat(state, Wire::OpenAi, arrived, body, None).await
}

async fn anthropic(
    State(state): State<Arc<ServerState>>,
    arrived: Arrived,
    body: Bytes,
) -> Response {
    chat(state, Wire::Anthropic, arrived, body, None).await
}

async fn ollama(State(state): State<Arc<ServerState>>, arrived: Arrived, body: Bytes) -> Response {
    chat(state, Wire::Ollama, arrived, body, None).await
}

/// Gemini's model and method share a path segment: `gemini-2.5-flash:generateContent`.
struct GeminiCall {
    model: String,
    stream: bool,
    sse: bool,
}

async fn gemini(
    State(state): State<Arc<ServerState>>,
    Path(model_action): Path<String>,
    uri: Uri,
    arrived: Arrived,
    body: Bytes,
) -> Response {
    let parsed = model_action.rsplit_once(':').and_then(|(model, action)| {
        let stream = match action {
            "streamGenerateContent" => true,
            "generateContent" => false,
            _ => return None,
        };
        let sse = uri
            .query()
            .is_some_and(|q| q.split('&').any(|kv| kv == "alt=sse"));
        Some(GeminiCall {
            model: model.to_owned(),
            stream,
            sse,
        })
    });
    match parsed {
        Some(call) => chat(state, Wire::Gemini, arrived, body, Some(call)).await,
        None => json_response(
            StatusCode::NOT_FOUND,
            &wire::gemini::error_body(
                404,
                &format!(
                    "models/{model_action} is not a generateContent or streamGenerateContent method"
                ),
            ),
        ),
    }
}

/// What the last user message asks of the HTTP layer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum HttpTrigger {
    Err,
    Hang,
}

fn http_trigger(messages: &[Message]) -> Option<HttpTrigger> {
    let last = messages
        .iter()
        .rposition(|m| matches!(m, Message::User { .. }))?;
    if messages[last + 1..]
        .iter()
        .any(|m| matches!(m, Message::Tool(_)))
    {
        return None;
    }
    let Message::User { content } = &messages[last] else {
        return None;
    };
    content.match_indices('!').find_map(|(at, _)| {
        let rest = &content[at + 1..];
        [("err", HttpTrigger::Err), ("hang", HttpTrigger::Hang)]
            .into_iter()
            .find(|(word, _)| {
                rest.starts_with(word)
                    && !rest[word.len()..].starts_with(|c: char| c.is_alphanumeric() || c == '_')
            })
            .map(|(_, t)| t)
    })
}

/// The text of the last user message: the key of the per-input log.
fn last_user_text(messages: &[Message]) -> Option<&str> {
    messages.iter().rev().find_map(|m| match m {
        Message::User { content } => Some(content.as_str()),
        _ => None,
    })
}

fn input_key(reply: &Reply) -> String {
    match reply {
        Reply::Batch { trigger, .. } => match trigger {
            Trigger::SlowBatch(n) => format!("slowbatch{n}"),
            Trigger::SerialBatch(n) => format!("serialbatch{n}"),
            Trigger::Batch(n) => format!("batch{n}"),
            Trigger::Truncate => "truncate".into(),
            Trigger::BadJson => "badjson".into(),
            Trigger::Text => "text".into(),
            Trigger::CutText => "cut".into(),
            Trigger::Calls(calls) => format!("calls{}", calls.len()),
        },
        Reply::Report(_) => "report".into(),
        Reply::Text => "text".into(),
        Reply::Help { .. } => "help".into(),
    }
}

fn error_body(wire: Wire, status: u16, message: &str) -> Value {
    match wire {
        Wire::OpenAi => wire::openai::error_body(status, message),
        Wire::Anthropic => wire::anthropic::error_body(status, message),
        Wire::Gemini => wire::gemini::error_body(status, message),
        Wire::Ollama => wire::ollama::error_body(status, message),
    }
}

/// The request body as JSON, without its `tools`: no rule of the mock reads
/// them, and building their schemas as `Value` trees was two fifths of the
/// mock's CPU under load, CPU the agent it measures shares the machine with.
fn request_json(body: &[u8]) -> Result<Value, serde_json::Error> {
    let Ok(fields) = serde_json::from_slice::<BTreeMap<String, &RawValue>>(body) else {
        // Not an object: the wire parser says what is wrong with it.
        return serde_json::from_slice(body);
    };
    let mut object = serde_json::Map::new();
    for (name, raw) in fields {
        if name != "tools" {
            object.insert(name, serde_json::from_str(raw.get())?);
        }
    }
    Ok(Value::Object(object))
}

/// Reads a request body in `wire`'s shape. OpenAI's, the one the bench
/// and most clients use, has a typed reading of its own.
fn parse(wire: Wire, body: &[u8], tools: &ToolsMemo) -> Result<ParsedRequest, String> {
    let read = match wire {
        Wire::OpenAi => return wire::openai::parse_body(body, tools),
        Wire::Anthropic => wire::anthropic::parse,
        Wire::Gemini => wire::gemini::parse,
        Wire::Ollama => wire::ollama::parse,
    };
    let value = request_json(body).map_err(|err| format!("the request body is not JSON: {err}"))?;
    read(&value)
}

/// A response about to be sent: streamed chunks or one whole body.
struct Prepared {
    content_type: &'static str,
    chunks: Vec<Bytes>,
    stream: bool,
}

fn encode(
    wire: Wire,
    events: &[homeagent_core::StreamEvent],
    ctx: &Ctx,
    request: &ParsedRequest,
    gemini_sse: bool,
) -> Prepared {
    if !request.stream {
        let body = match wire {
            Wire::OpenAi => wire::openai::whole(events, ctx),
            Wire::Anthropic => wire::anthropic::whole(events, ctx),
            Wire::Gemini => wire::gemini::whole(events, ctx),
            Wire::Ollama => wire::ollama::whole(events, ctx),
        };
        return Prepared {
            content_type: JSON,
            chunks: vec![Bytes::from(body.to_string())],
            stream: false,
        };
    }
    let (content_type, chunks) = match wire {
        Wire::OpenAi => (SSE, wire::openai::stream(events, ctx)),
        Wire::Anthropic => (SSE, wire::anthropic::stream(events, ctx)),
        Wire::Gemini if gemini_sse => (SSE, wire::gemini::stream_sse(events, ctx)),
        Wire::Gemini => (JSON, wire::gemini::stream_array(events, ctx)),
        Wire::Ollama => (NDJSON, wire::ollama::stream(events, ctx)),
    };
    Prepared {
        content_type,
        chunks,
        stream: true,
    }
}

/// When a request arrived: its head parsed, its body not yet read. Axum
/// runs extractors of the request's parts before the body's, so a handler
/// that takes this before its `Bytes` starts its clock there, and an
/// input's time (what a bench subtracts as the model's) includes reading
/// its own request.
struct Arrived(Instant);

impl<S: Send + Sync> FromRequestParts<S> for Arrived {
    type Rejection = Infallible;

    async fn from_request_parts(_parts: &mut Parts, _state: &S) -> Result<Self, Infallible> {
        Ok(Arrived(Instant::now()))
    }
}

async fn chat(
    state: Arc<ServerState>,
    wire: Wire,
    Arrived(started): Arrived,
    body: Bytes,
    gemini: Option<GeminiCall>,
) -> Response {
    let guard = state.enter();
    let mut request = match parse(wire, &body, &state.tools) {
        Ok(request) => request,
        Err(problem) => {
            state.with_stats(|s| s.bad_requests += 1);
            return json_response(StatusCode::BAD_REQUEST, &error_body(wire, 400, &problem));
        }
    };
    let gemini_sse = gemini.as_ref().is_some_and(|g| g.sse);
    if let Some(call) = gemini {
        request.model = call.model;
        request.stream = call.stream;
    }
    state.with_stats(|s| {
        s.requests += 1;
        *s.by_protocol.entry(wire.name()).or_default() += 1;
    });
    let delay = Duration::from_millis(state.config.delay_ms);
    let trigger = http_trigger(&request.messages);
    if trigger == Some(HttpTrigger::Err) {
        state.with_stats(|s| s.errors_injected += 1);
        model_delay(delay).await;
        return json_response(
            StatusCode::INTERNAL_SERVER_ERROR,
            &error_body(wire, 500, "the mock model failed on purpose (!err)"),
        );
    }

    let input = last_user_text(&request.messages).map(crate::inputs::input_key);
    let turn = respond_sized(
        &request.messages,
        request.prompt_bytes,
        &state.config.script,
    );
    let n = state.responses.fetch_add(1, Ordering::Relaxed) + 1;
    let ctx = Ctx {
        model: if request.model.is_empty() {
            "mock-llm".into()
        } else {
            request.model.clone()
        },
        response_id: match wire {
            Wire::OpenAi => format!("chatcmpl-mock{n}"),
            Wire::Anthropic => format!("msg_mock{n}"),
            Wire::Gemini | Wire::Ollama => format!("mock{n}"),
        },
        created: SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_secs()),
        include_usage: request.include_usage,
    };
    let prepared = encode(wire, &turn.events, &ctx, &request, gemini_sse);
    let own_us = micros(started.elapsed());
    let key = input_key(&turn.reply);
    state.with_stats(|s| {
        match &turn.reply {
            Reply::Batch { .. } => s.batches += 1,
            Reply::Report(report) => {
                let executed = report.executed as u64;
                s.reports += 1;
                s.executed_total += executed;
                s.last_executed = Some(executed);
                s.max_in_flight = s.max_in_flight.max(report.max_in_flight);
            }
            Reply::Text | Reply::Help { .. } => {}
        }
        s.per_input.entry(key).or_default().record(own_us);
    });
    if let Some(input) = &input {
        let kind = match &turn.reply {
            Reply::Batch { calls, .. } => RequestKind::Batch {
                calls: *calls as u64,
            },
            Reply::Report(report) => RequestKind::Report {
                executed: report.executed as u64,
                calls: report.calls as u64,
                results: report.results as u64,
                nonce: report.nonce.clone(),
            },
            Reply::Text | Reply::Help { .. } => RequestKind::Other,
        };
        state.with_inputs(|log| log.request(input, kind, own_us));
    }
    model_delay(delay).await;

    if trigger == Some(HttpTrigger::Hang) {
        state.with_stats(|s| s.hangs += 1);
        let first = if prepared.stream {
            prepared.chunks.into_iter().next().unwrap_or_default()
        } else {
            let whole = prepared.chunks.into_iter().next().unwrap_or_default();
            whole.slice(..whole.len() / 2)
        };
        return body_response(
            prepared.content_type,
            vec![first],
            Duration::ZERO,
            guard,
            true,
            None,
        );
    }
    if !prepared.stream {
        let whole = prepared.chunks.into_iter().next().unwrap_or_default();
        if let Some(input) = &input {
            let served_us = micros(started.elapsed());
            state.with_inputs(|log| log.served(input, served_us));
        }
        return (
            StatusCode::OK,
            [(header::CONTENT_TYPE, prepared.content_type)],
            whole,
        )
            .into_response();
    }
    let chunk_delay = Duration::from_millis(state.config.chunk_delay_ms);
    body_response(
        prepared.content_type,
        prepared.chunks,
        chunk_delay,
        guard,
        false,
        input.map(|input| (input, started)),
    )
}

/// The model's thinking time. A zero delay answers at once: tokio's timer
/// rounds a deadline up to its next millisecond tick, so even a zero sleep
/// parks the request for up to a millisecond, which the bench's zero-delay
/// scenarios would then count as the mock's time.
async fn model_delay(delay: Duration) {
    if !delay.is_zero() {
        tokio::time::sleep(delay).await;
    }
}

fn micros(elapsed: Duration) -> u64 {
    u64::try_from(elapsed.as_micros()).unwrap_or(u64::MAX)
}

/// A body sent chunk by chunk from a task that owns the in-flight guard, so
/// the request counts as served until its last byte (or until the client
/// goes away). With `hang`, the task sends its chunks and then waits for the
/// client to leave or the server to stop. With `served`, the time from the
/// request's arrival to its last chunk is added to that input's log record.
fn body_response(
    content_type: &'static str,
    chunks: Vec<Bytes>,
    chunk_delay: Duration,
    guard: InFlight,
    hang: bool,
    served: Option<(String, Instant)>,
) -> Response {
    // Without a delay between them every chunk is ready at once, so the
    // channel holds them all: the connection then writes them together, as
    // a server with nothing to wait for would, not one write and one
    // reader wake-up per chunk.
    let capacity = if chunk_delay.is_zero() {
        chunks.len().max(1)
    } else {
        1
    };
    let (tx, rx) = mpsc::channel::<Result<Bytes, Infallible>>(capacity);
    let stop = guard.0.stop.clone();
    tokio::spawn(async move {
        let guard = guard;
        for (i, chunk) in chunks.into_iter().enumerate() {
            if i > 0 && !chunk_delay.is_zero() {
                tokio::select! {
                    () = tokio::time::sleep(chunk_delay) => {}
                    () = stop.cancelled() => return,
                }
            }
            if tx.send(Ok(chunk)).await.is_err() {
                return; // the client went away
            }
        }
        if let Some((input, started)) = served {
            let served_us = micros(started.elapsed());
            guard.0.with_inputs(|log| log.served(&input, served_us));
        }
        if hang {
            tokio::select! {
                () = tx.closed() => {}
                () = stop.cancelled() => {}
            }
        }
    });
    let stream = futures_util::stream::unfold(rx, |mut rx| async move {
        rx.recv().await.map(|item| (item, rx))
    });
    (
        StatusCode::OK,
        [
            (header::CONTENT_TYPE, content_type),
            (header::CACHE_CONTROL, "no-cache"),
        ],
        Body::from_stream(stream),
    )
        .into_response()
}

fn json_response(status: StatusCode, body: &Value) -> Response {
    (
        status,
        [(header::CONTENT_TYPE, JSON)],
        Bytes::from(body.to_string()),
    )
        .into_response()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn request_bodies_are_read_without_their_tools() {
        let body = br#"{"model":"m","tools":[{"type":"function"}],"messages":[{"role":"user","content":"hi"}]}"#;
        assert_eq!(
            request_json(body).unwrap(),
            json!({"model": "m", "messages": [{"role": "user", "content": "hi"}]})
        );
        // Not an object: still JSON, for the wire parser to name the problem.
        assert_eq!(request_json(b"[1]").unwrap(), json!([1]));
        assert!(request_json(br#"{"model": "m","#).is_err());
    }

    #[test]
    fn http_triggers_need_a_word_boundary_and_no_tool_result_after() {
        let user = |s: &str| vec![Message::user(s)];
        assert_eq!(
            http_trigger(&user("please !err now")),
            Some(HttpTrigger::Err)
        );
        assert_eq!(http_trigger(&user("!hang-3-1700")), Some(HttpTrigger::Hang));
        assert_eq!(http_trigger(&user("!errand")), None);
        assert_eq!(http_trigger(&user("!slowbatch4")), None);
        let mut answered = user("!err");
        answered.push(Message::Tool(homeagent_core::ToolMessage {
            tool_call_id: "c".into(),
            name: "t".into(),
            content: "x".into(),
            success: true,
        }));
        assert_eq!(http_trigger(&answered), None);
    }
}
