//! The OpenAI-compatible endpoint: the agent acts as the model
//! `homeagent`.
//!
//! # Sessions
//!
//! Without `X-Session-Id`, a request is stateless as OpenAI's are: it runs
//! in a fresh session whose stored history is seeded with the request's
//! earlier messages, and the last (user) message is the input. The
//! session id comes back in the `X-Session-Id` response header, so a client
//! can continue it. A stateless client that sends the conversation back
//! continues it without knowing: a request whose earlier messages are
//! exactly what an answer of this server left the client holding goes on
//! in that answer's session, if nothing else has moved it on
//! (`transcript`), so a conversation is one session and the agent keeps
//! its own tool calls of the earlier exchanges.
//!
//! With `X-Session-Id`, an existing session continues with
//! the last user message only (the store, not the client, holds the
//! history, tool calls included); a new id is seeded like a stateless
//! request.
//!
//! # Streaming
//!
//! `stream: true` answers `chat.completion.chunk`s: a first chunk with the
//! role, one per piece of text the model streams (on every model turn of
//! the input, so text written before a tool batch streams too), a last one
//! with the `finish_reason` (`stop`, `length`, `content_filter`), a usage chunk when
//! `stream_options.include_usage`, and `[DONE]`. A turn that fails after
//! the stream began ends with an `{"error": …}` chunk, which OpenAI clients
//! raise as an error. A client that disconnects stops its turn.

mod request;
mod streamed_text;
mod transcript;

use std::borrow::Cow;
use std::net::SocketAddr;

use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::{ConnectInfo, State};

use axum::http::{HeaderMap, HeaderValue};
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use futures_util::stream::{self, Stream};
use homeagent_agent::store::{StoreError, validate_session_id};
use homeagent_agent::{Frame, Incomplete, Submission, UsageFrame};
use serde_json::{Value, json};

pub use request::{CompletionRequest, IGNORED, MODEL_ID};
pub use transcript::{Fingerprint, Transcripts};

use crate::error::ApiError;
use crate::http::{ApiPath, json_body, json_ok};
use crate::state::{ServerState, TurnGuard};
use crate::turn::{self, terminal_error};
use streamed_text::StreamedText;
use transcript::Transcript;

/// The header naming the session to continue (and, in answers, the
/// session a request ran in).
pub const SESSION_HEADER: &str = "x-session-id";

/// The one model this server answers as, in OpenAI's shape.
fn model_object() -> Value {
    json!({"id": MODEL_ID, "object": "model", "created": 0, "owned_by": "homeagent"})
}

/// `GET /v1/models`.
pub async fn models() -> Response {
    json_ok(&json!({"object": "list", "data": [model_object()]})).into_response()
}

/// `GET /v1/models/{id}` (the clients' `models.retrieve`).
pub async fn model(ApiPath(id): ApiPath<String>) -> Response {
    if id == MODEL_ID {
        json_ok(&model_object()).into_response()
    } else {
        request::model_not_found(&id).into_response()
    }
}

/// `POST /v1/chat/completions`.
pub async fn completions(
    State(state): State<ServerState>,
    ConnectInfo(client): ConnectInfo<SocketAddr>,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Response {
    match completions_inner(&state, client, &headers, body).await {
        Ok(response) => response,
        Err(error) => error.into_response(),
    }
}

async fn completions_inner(
    state: &ServerState,
    client: SocketAddr,
    headers: &HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    let body: Value = json_body(body, state.options().body_limit)?;
    let mut request = request::parse(body)?;
    let agent = state.options().default_agent.clone();
    // Refused here, not only by the scheduler: by then earlier messages
    // would have seeded a session for an input that never runs.
    if request.input.trim().is_empty() {
        return Err(turn::empty_input());
    }
    let prior = std::mem::take(&mut request.prior);
    let named = headers.contains_key(SESSION_HEADER);
    // A stateless request: what the client holds, which may continue the
    // session an earlier answer left it with (`transcript`).
    let transcript = (!named).then(|| Transcript::new(&agent, request.user.as_deref(), &prior));
    let continued = match &transcript {
        Some(transcript) if !prior.is_empty() => {
            continue_session(state, client, &agent, transcript, &request.input).await?
        }
        _ => None,
    };
    let (session, turn::Started { frames, guard }, early) = match continued {
        Some(placed) => placed,
        None => {
            let session = session_id(state, headers)?;
            // Counted in before the session is created or seeded: a request
            // the client limit refuses stores nothing.
            let guard = state.begin_turn(client.ip(), &session)?;
            prepare_session(state, &session, named && request.stream, &agent, prior).await?;
            let submission = Submission {
                session: session.clone(),
                agent: agent.clone(),
                text: request.input.clone(),
                interrupt: false,
                check_duplicate: true,
            };
            let (started, early) = start_checked(state, guard, submission)?;
            (session, started, early)
        }
    };
    let note = transcript.map(|transcript| Note {
        state: state.clone(),
        session: session.clone(),
        transcript,
        input: request.input.clone(),
    });
    let completion_id = state.fresh_id("chatcmpl");
    let created = unix_seconds();
    let mut response = if request.stream {
        let sent = note.is_some().then(String::new);
        let mut chunks = ChunkStream {
            frames,
            guard: Some(guard),
            id: completion_id,
            created,
            include_usage: request.include_usage,
            queue: std::collections::VecDeque::new(),
            started: false,
            text: StreamedText::default(),
            sent,
            note,
            answered: false,
            shutdown: state.shutdown_token().clone(),
        };
        if let Some(frame) = early {
            chunks.push(frame);
        }
        Sse::new(chunks.into_stream())
            .keep_alive(KeepAlive::default())
            .into_response()
    } else {
        let shutdown = state.shutdown_token().clone();
        match whole(frames, early, guard, &shutdown, &completion_id, created).await {
            Ok((response, answer)) => {
                if let Some(note) = note {
                    note.answered(&answer);
                }
                response
            }
            // The input began in `session` and may have stored its message
            // and calls there (in a session seeded for this request, which
            // the client cannot otherwise find): the error names it, as a
            // stream's `200` does. One that stored nothing names none.
            Err(Failed {
                error,
                stored_nothing: true,
            }) => return Err(error),
            Err(Failed { error, .. }) => error.into_response(),
        }
    };
    if let Ok(value) = HeaderValue::from_str(&session) {
        response.headers_mut().insert(SESSION_HEADER, value);
    }
    Ok(response)
}

/// A whole completion whose input ended without an answer.
struct Failed {
    error: ApiError,
    /// The input stored nothing (see [`turn::stored_nothing`]).
    stored_nothing: bool,
}

/// Submits the input with the scheduler's immediate answer, if any: a
/// refusal it gives at once (a full queue, a duplicate) keeps its HTTP
/// status, since nothing is streamed or stored yet.
fn start_checked(
    state: &ServerState,
    guard: TurnGuard,
    submission: Submission,
) -> Result<(turn::Started, Option<Frame>), ApiError> {
    let turn::Started { mut frames, guard } = turn::submit(state, guard, submission);
    let early = frames.try_recv().ok();
    let shutting_down = state.shutdown_token().is_cancelled();
    if let Some((frame, error)) = early
        .as_ref()
        .and_then(|frame| Some((frame, terminal_error(frame, shutting_down)?)))
    {
        guard.finish(frame);
        return Err(error);
    }
    Ok((turn::Started { frames, guard }, early))
}

/// Starts a stateless request's input in the session its transcript
/// continues (see `transcript`): the one the answer that left the client
/// holding it ran in, if no turn has begun on it since and no other
/// request took it first (`ServerState::continue_turn`), and it is still
/// there (a read, in place of the commit that seeding a new session
/// costs). `None`: there is none; the caller seeds a fresh session. A
/// refusal of the client's turn (its limit, shutdown) takes nothing, and
/// one the scheduler gives at once (a full queue) puts the note back, so
/// the client's retry continues; one that comes later (`session_busy`:
/// another process holds the session) does not.
async fn continue_session(
    state: &ServerState,
    client: SocketAddr,
    agent: &str,
    transcript: &Transcript,
    input: &str,
) -> Result<Option<(String, turn::Started, Option<Frame>)>, ApiError> {
    let fingerprint = transcript.fingerprint();
    let Some(guard) = state.continue_turn(client.ip(), &fingerprint)? else {
        return Ok(None);
    };
    let session = guard.session().to_owned();
    let id = session.clone();
    let exists = state
        .runtime()
        .store()
        .call(move |store| store.session(&id))
        .await
        .ok()
        .flatten()
        .is_some_and(|info| info.agent == agent);
    if !exists {
        return Ok(None);
    }
    // The transcript shows the answer to the words before: the same
    // words again are a new input, not a resend.
    let submission = Submission {
        session: session.clone(),
        agent: agent.to_owned(),
        text: input.to_owned(),
        interrupt: false,
        check_duplicate: false,
    };
    match start_checked(state, guard, submission) {
        Ok((started, early)) => Ok(Some((session, started, early))),
        Err(refused) => {
            state.note_answer(session, fingerprint);
            Err(refused)
        }
    }
}

/// What a stateless request notes once answered (see `transcript`).
struct Note {
    state: ServerState,
    session: String,
    transcript: Transcript,
    input: String,
}

impl Note {
    /// Notes the transcript the client holds with `answer`, exactly as it
    /// was sent, so its next request continues this session; unless
    /// another turn is already waiting on the session, which will move it
    /// past this answer.
    fn answered(self, answer: &str) {
        let fingerprint = self.transcript.answered(&self.input, answer).fingerprint();
        self.state.note_answer(self.session, fingerprint);
    }
}

/// The session the request names (`X-Session-Id`, checked), or a fresh id.
fn session_id(state: &ServerState, headers: &HeaderMap) -> Result<String, ApiError> {
    match headers.get(SESSION_HEADER) {
        Some(value) => {
            let id = value.to_str().map_err(|_| {
                ApiError::bad_request(
                    "invalid_session_id",
                    format!("{SESSION_HEADER} must be visible ASCII"),
                )
            })?;
            validate_session_id(id).map_err(store_error)?;
            Ok(id.to_owned())
        }
        None => Ok(state.fresh_id("chat")),
    }
}

/// Creates `session` seeded with `prior` when it is new. Created and seeded
/// in one transaction: two first requests naming the same new session
/// cannot both seed it. A session that exists keeps its history (the
/// client's earlier messages are not added). Creating a session is a
/// commit, which waits for the disk, so it runs through `Store::call`.
///
/// Without earlier messages there is nothing to seed, and no commit is
/// spent on an empty session: the input's first commit creates it with
/// the user message (`Store::append_async_creating`).
///
/// `check_first`: read the session's agent now, so another agent's is
/// refused (409) before the answer starts. A streamed answer needs it: its
/// `200` goes out before the input runs. A whole answer does not: the
/// input's load checks the agent anyway, under the session's claim, and
/// refuses another agent's before anything is stored, with a
/// `session_conflict` frame that answers the same 409 (`terminal_error`).
/// The read saved is a trip to the blocking pool per input of a named
/// session (docs/BENCHMARKS.md). A fresh id needs no check.
async fn prepare_session(
    state: &ServerState,
    session: &str,
    check_first: bool,
    agent: &str,
    prior: Vec<homeagent_core::Message>,
) -> Result<(), ApiError> {
    if prior.is_empty() && !check_first {
        return Ok(());
    }
    let (session, agent) = (session.to_owned(), agent.to_owned());
    state
        .runtime()
        .store()
        .call(move |store| {
            if prior.is_empty() {
                store.check_session_agent(&session, &agent).map(|_| ())
            } else {
                store
                    .create_seeded_session(&session, &agent, &prior)
                    .map(|_| ())
            }
        })
        .await
        .map_err(store_error)
}

/// How a store refusal reads to the API client.
fn store_error(e: StoreError) -> ApiError {
    match e {
        StoreError::InvalidSessionId { .. } => {
            ApiError::bad_request("invalid_session_id", format!("{SESSION_HEADER}: {e}"))
        }
        StoreError::AgentMismatch { .. } => ApiError::new(
            axum::http::StatusCode::CONFLICT,
            "session_conflict",
            e.to_string(),
        ),
        other => ApiError::internal(other.to_string()),
    }
}

/// Waits for the terminal frame (`early` is the first, if the scheduler
/// gave one at once) and answers one `chat.completion`, with the answer's
/// text.
async fn whole(
    mut frames: homeagent_agent::Frames,
    mut early: Option<Frame>,
    guard: TurnGuard,
    shutdown: &homeagent_core::CancellationToken,
    id: &str,
    created: u64,
) -> Result<(Response, String), Failed> {
    loop {
        let Some(frame) = (match early.take() {
            Some(frame) => Some(frame),
            None => frames.recv().await,
        }) else {
            return Err(Failed {
                error: ApiError::internal("the scheduler ended without answering"),
                stored_nothing: false,
            });
        };
        if !frame.is_terminal() {
            continue;
        }
        guard.finish(&frame);
        if let Some(error) = terminal_error(&frame, shutdown.is_cancelled()) {
            return Err(Failed {
                error,
                stored_nothing: turn::stored_nothing(&frame),
            });
        }
        let Frame::Response {
            content,
            usage,
            incomplete,
            ..
        } = frame
        else {
            return Err(Failed {
                error: ApiError::internal("unexpected terminal frame"),
                stored_nothing: false,
            });
        };
        let answer = answer_text(&content, incomplete.as_ref()).into_owned();
        let response = json_ok(&json!({
            "id": id,
            "object": "chat.completion",
            "created": created,
            "model": MODEL_ID,
            "choices": [{
                "index": 0,
                "message": {
                    "role": "assistant",
                    "content": answer,
                    "refusal": null
                },
                "logprobs": null,
                "finish_reason": finish_reason(incomplete.as_ref()),
            }],
            "usage": usage_json(&usage),
        }))
        .into_response();
        return Ok((response, answer));
    }
}

/// The `finish_reason` of a finished answer: `stop`, or what made it
/// incomplete (`length`, `content_filter`) when OpenAI has a word for it.
fn finish_reason(incomplete: Option<&Incomplete>) -> &'static str {
    incomplete
        .and_then(Incomplete::openai_finish_reason)
        .unwrap_or("stop")
}

/// The note of an incompleteness no `finish_reason` can say (the agent
/// stopped after its tool turns; another reason the provider named): an
/// OpenAI client's person reads it in the answer's text, as the console's
/// does below the answer. It is not stored: a stateless client that sends
/// it back continues the session, whose history holds the answer as the
/// model gave it (the note is part of the transcript's fingerprint only),
/// and a conversation seeded anew stores it with the client's messages.
fn unsaid_note(incomplete: Option<&Incomplete>) -> Option<String> {
    incomplete
        .filter(|incomplete| incomplete.openai_finish_reason().is_none())
        .map(Incomplete::note)
}

/// The whole answer's text for an OpenAI client: the content, then the
/// [`unsaid_note`] as a paragraph of its own.
fn answer_text<'a>(content: &'a str, incomplete: Option<&Incomplete>) -> Cow<'a, str> {
    match unsaid_note(incomplete) {
        Some(note) if content.is_empty() => Cow::Owned(note),
        Some(note) => Cow::Owned(format!("{content}\n\n{note}")),
        None => Cow::Borrowed(content),
    }
}

fn usage_json(usage: &UsageFrame) -> Value {
    json!({
        "prompt_tokens": usage.prompt_tokens,
        "completion_tokens": usage.completion_tokens,
        "total_tokens": usage.total_tokens,
    })
}

fn unix_seconds() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// The state of one streamed completion. Dropped mid-turn (the client went
/// away), its guard stops the turn.
struct ChunkStream {
    frames: homeagent_agent::Frames,
    guard: Option<TurnGuard>,
    id: String,
    created: u64,
    include_usage: bool,
    queue: std::collections::VecDeque<String>,
    started: bool,
    text: StreamedText,
    /// Every piece of the answer's text sent so far, joined (kept only
    /// for a note).
    sent: Option<String>,
    /// A stateless request's note, made once the answer is whole.
    note: Option<Note>,
    /// The answer came (not an error): the note can be made.
    answered: bool,
    /// The server's: a stop while it fires is the shutdown's.
    shutdown: homeagent_core::CancellationToken,
}

impl ChunkStream {
    fn chunk(&self, delta: Value, finish: Option<&str>) -> String {
        let mut chunk = json!({
            "id": self.id,
            "object": "chat.completion.chunk",
            "created": self.created,
            "model": MODEL_ID,
            "choices": [{"index": 0, "delta": delta, "logprobs": null, "finish_reason": finish}],
        });
        // With include_usage, OpenAI's other chunks say `"usage": null`.
        if self.include_usage
            && let Some(object) = chunk.as_object_mut()
        {
            object.insert("usage".into(), Value::Null);
        }
        chunk.to_string()
    }

    /// Turns one frame into the chunks it stands for.
    fn push(&mut self, frame: Frame) {
        if !self.started {
            self.started = true;
            let first = self.chunk(json!({"role": "assistant", "content": ""}), None);
            self.queue.push_back(first);
        }
        match frame {
            Frame::ContentDelta { text } => {
                let delta = self.text.text(&text);
                if let Some(sent) = &mut self.sent {
                    sent.push_str(&delta);
                }
                let chunk = self.chunk(json!({"content": delta}), None);
                self.queue.push_back(chunk);
            }
            Frame::ToolCall(_) => self.text.tool_call(),
            terminal => {
                if let Some(guard) = self.guard.take() {
                    guard.finish(&terminal);
                }
                if let Some(error) = terminal_error(&terminal, self.shutdown.is_cancelled()) {
                    self.queue.push_back(error.body().to_string());
                } else {
                    let incomplete = match &terminal {
                        Frame::Response { incomplete, .. } => incomplete.as_ref(),
                        _ => None,
                    };
                    if let Frame::Response { content, .. } = &terminal {
                        let after_calls = matches!(incomplete, Some(Incomplete::ToolTurns { .. }));
                        let note = unsaid_note(incomplete);
                        if let Some(delta) = self.text.ending(content, after_calls, note.as_deref())
                        {
                            if let Some(sent) = &mut self.sent {
                                sent.push_str(&delta);
                            }
                            let chunk = self.chunk(json!({"content": delta}), None);
                            self.queue.push_back(chunk);
                        }
                        self.answered = true;
                    }
                    let last = self.chunk(json!({}), Some(finish_reason(incomplete)));
                    self.queue.push_back(last);
                    if self.include_usage
                        && let Frame::Response { usage, .. } = &terminal
                    {
                        let usage = json!({
                            "id": self.id,
                            "object": "chat.completion.chunk",
                            "created": self.created,
                            "model": MODEL_ID,
                            "choices": [],
                            "usage": usage_json(usage),
                        });
                        self.queue.push_back(usage.to_string());
                    }
                }
                self.queue.push_back("[DONE]".to_owned());
            }
        }
    }

    fn into_stream(self) -> impl Stream<Item = Result<Event, std::convert::Infallible>> + Send {
        stream::unfold(self, |mut this| async move {
            loop {
                // Noted before the last chunks go out: the client's next
                // request may follow at once.
                if this.answered
                    && let Some(note) = this.note.take()
                {
                    note.answered(this.sent.as_deref().unwrap_or_default());
                }
                if let Some(data) = this.queue.pop_front() {
                    return Some((Ok(Event::default().data(data)), this));
                }
                // The terminal frame was turned into chunks: the end.
                this.guard.as_ref()?;
                match this.frames.recv().await {
                    Some(frame) => this.push(frame),
                    None => {
                        let error = ApiError::internal("the scheduler ended without answering");
                        this.guard = None;
                        this.queue.push_back(error.body().to_string());
                        this.queue.push_back("[DONE]".to_owned());
                    }
                }
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What no `finish_reason` can say follows the answer as a paragraph;
    /// what one can say leaves the text as the model wrote it.
    #[test]
    fn the_answer_text_adds_only_the_note_openai_cannot_say() {
        let turns = Incomplete::ToolTurns { max_tool_turns: 2 };
        let note = turns.note();
        assert_eq!(
            answer_text("Let me check.", Some(&turns)),
            format!("Let me check.\n\n{note}")
        );
        assert_eq!(answer_text("", Some(&turns)), note);
        let cut = Incomplete::Length { max_tokens: 10 };
        assert_eq!(answer_text("Half an", Some(&cut)), "Half an");
        assert_eq!(answer_text("Done.", None), "Done.");
    }
}
