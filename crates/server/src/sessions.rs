//! The sessions API: send an input and watch its frames (the same frames
//! as `homeagent run --json`), stop a session, read or delete its history.

use std::net::SocketAddr;

use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::{ConnectInfo, State};

use axum::http::StatusCode;
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};

use futures_util::stream;
use homeagent_agent::Submission;
use homeagent_agent::store::{StoreError, validate_session_id};
use serde::Deserialize;
use serde_json::json;

use crate::error::ApiError;
use crate::http::{ApiPath, json_body, json_ok};
use crate::state::ServerState;
use crate::turn;

/// `POST /api/v1/sessions/{id}/messages` body.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SendMessage {
    pub text: String,
    /// The agent to run as (default: the server's default agent).
    #[serde(default)]
    pub agent: Option<String>,
    /// Cancel the session's model stream in flight and run this next.
    #[serde(default)]
    pub interrupt: bool,
}

fn store_error(e: StoreError) -> ApiError {
    match e {
        StoreError::InvalidSessionId { .. } => {
            ApiError::bad_request("invalid_session_id", e.to_string())
        }
        StoreError::SessionNotFound { id } => {
            ApiError::not_found(format!("session {id} does not exist"))
        }
        StoreError::AgentMismatch { .. } => {
            ApiError::new(StatusCode::CONFLICT, "session_conflict", e.to_string())
        }
        // Another process runs an input on it (a delete claims the session
        // as an input does): worth sending again once that has ended.
        StoreError::SessionBusy { .. } | StoreError::SessionWriting { .. } => {
            ApiError::new(StatusCode::CONFLICT, "session_busy", e.to_string())
        }
        other => ApiError::internal(other.to_string()),
    }
}

fn checked(id: &str) -> Result<(), ApiError> {
    validate_session_id(id).map_err(store_error)
}

/// `POST /api/v1/sessions/{id}/messages`: SSE, one `data:` per frame,
/// ending with the terminal frame. Disconnecting stops the turn.
pub async fn send(
    State(state): State<ServerState>,
    ConnectInfo(client): ConnectInfo<SocketAddr>,
    ApiPath(id): ApiPath<String>,
    body: Result<Bytes, BytesRejection>,
) -> Response {
    let started = (|| {
        checked(&id)?;
        let message: SendMessage = json_body(body, state.options().body_limit)?;
        let agent = message
            .agent
            .unwrap_or_else(|| state.options().default_agent.clone());
        turn::start(
            &state,
            client.ip(),
            Submission {
                session: id.clone(),
                agent,
                text: message.text,
                interrupt: message.interrupt,
                check_duplicate: true,
            },
        )
    })();
    let turn::Started { frames, guard } = match started {
        Ok(started) => started,
        Err(error) => return error.into_response(),
    };
    let events = stream::unfold(
        (frames, Some(guard)),
        |(mut frames, mut guard)| async move {
            guard.as_ref()?;
            let frame = frames.recv().await?;
            if frame.is_terminal()
                && let Some(guard) = guard.take()
            {
                guard.finish(&frame);
            }
            let data = serde_json::to_string(&frame).unwrap_or_default();
            let event = Event::default().data(data);
            Some((Ok::<_, std::convert::Infallible>(event), (frames, guard)))
        },
    );
    Sse::new(events)
        .keep_alive(KeepAlive::default())
        .into_response()
}

/// `POST /api/v1/sessions/{id}/stop`.
pub async fn stop(State(state): State<ServerState>, ApiPath(id): ApiPath<String>) -> Response {
    if let Err(error) = checked(&id) {
        return error.into_response();
    }
    let cancelled = state.scheduler().stop(&id);
    json_ok(&json!({"session": id, "cancelled": cancelled}))
}

/// `GET /api/v1/sessions`.
pub async fn list(State(state): State<ServerState>) -> Response {
    match state
        .runtime()
        .store()
        .call(|store| store.list_sessions())
        .await
    {
        Ok(sessions) => json_ok(&json!({"sessions": sessions})),
        Err(e) => store_error(e).into_response(),
    }
}

/// `GET /api/v1/sessions/{id}`: the session, its messages (calls and
/// results) and its tool events (timing and status of every call).
pub async fn get(State(state): State<ServerState>, ApiPath(id): ApiPath<String>) -> Response {
    if let Err(error) = checked(&id) {
        return error.into_response();
    }
    let key = id.clone();
    let found = state
        .runtime()
        .store()
        .call(move |store| {
            let Some(info) = store.session(&key)? else {
                return Ok(None);
            };
            Ok(Some((info, store.history(&key)?, store.tool_events(&key)?)))
        })
        .await;
    match found {
        Ok(Some((info, messages, events))) => {
            json_ok(&json!({"session": info, "messages": messages, "tool_events": events}))
        }
        Ok(None) => ApiError::not_found(format!("session {id} does not exist")).into_response(),
        Err(e) => store_error(e).into_response(),
    }
}

/// How long a DELETE waits for the stopped input to end, and how often it
/// looks. A stop ends tools at once; what remains is the input's last
/// commits.
const STOP_WAIT: std::time::Duration = std::time::Duration::from_secs(10);
const STOP_POLL: std::time::Duration = std::time::Duration::from_millis(10);

/// `DELETE /api/v1/sessions/{id}`: stops it, waits for its input to end,
/// then deletes its history. Deleted under a running input, the input's
/// later commits would fail (its client told of a store error, not of the
/// stop) or bring the session back.
pub async fn delete(State(state): State<ServerState>, ApiPath(id): ApiPath<String>) -> Response {
    if let Err(error) = checked(&id) {
        return error.into_response();
    }
    state.scheduler().stop(&id);
    let deadline = tokio::time::Instant::now() + STOP_WAIT;
    while state.scheduler().busy_sessions().contains(&id) {
        if tokio::time::Instant::now() >= deadline {
            return ApiError::new(
                StatusCode::CONFLICT,
                "session_busy",
                format!(
                    "session {id} was stopped, but its input has not ended within {} s; \
                     send the DELETE again",
                    STOP_WAIT.as_secs()
                ),
            )
            .into_response();
        }
        tokio::time::sleep(STOP_POLL).await;
    }
    let key = id.clone();
    let deleted = state
        .runtime()
        .store()
        .call(move |store| store.delete_session(&key))
        .await;
    match deleted {
        Ok(true) => StatusCode::NO_CONTENT.into_response(),
        Ok(false) => ApiError::not_found(format!("session {id} does not exist")).into_response(),
        Err(e) => store_error(e).into_response(),
    }
}
