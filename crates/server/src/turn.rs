//! Starting a turn for an HTTP client, and what its terminal frame means
//! in HTTP terms.

use std::net::IpAddr;

use axum::http::StatusCode;
use homeagent_agent::{Frame, Frames, SkipReason, Submission};

use crate::error::ApiError;
use crate::state::{ServerState, TurnGuard};

/// A submitted input: its frames and the guard that cancels it if the
/// client goes away before the terminal frame.
pub struct Started {
    pub frames: Frames,
    pub guard: TurnGuard,
}

/// Submits `text` to `session` as `agent` for `client`.
pub fn start(
    state: &ServerState,
    client: IpAddr,
    session: &str,
    agent: &str,
    text: String,
    interrupt: bool,
) -> Result<Started, ApiError> {
    let mut guard = state.begin_turn(client, session)?;
    let (input, frames) = state.scheduler().submit_tracked(Submission {
        session: session.to_owned(),
        agent: agent.to_owned(),
        text,
        interrupt,
    });
    guard.submitted(input);
    Ok(Started { frames, guard })
}

/// The error a terminal frame that is not a `response` stands for.
pub fn terminal_error(frame: &Frame) -> Option<ApiError> {
    match frame {
        Frame::Response { .. } | Frame::ContentDelta { .. } | Frame::ToolCall(_) => None,
        Frame::Skipped { reason } => Some(match reason {
            SkipReason::EmptyInput => {
                ApiError::bad_request("empty_input", "the input is empty; send some text")
            }
            SkipReason::QueueFull => ApiError::new(
                StatusCode::TOO_MANY_REQUESTS,
                "queue_full",
                "the session's queue is full; wait for its inputs to finish",
            ),
            SkipReason::Duplicate => ApiError::new(
                StatusCode::CONFLICT,
                "duplicate",
                "the same input was sent to this session moments ago and is not run twice",
            ),
            SkipReason::Stopped => ApiError::new(
                StatusCode::CONFLICT,
                "stopped",
                "the session was stopped before this input ran",
            ),
        }),
        Frame::Error { message, code } => {
            let (status, code) = match code.as_str() {
                "model" => (StatusCode::BAD_GATEWAY, "model_error"),
                "stopped" => (StatusCode::CONFLICT, "stopped"),
                "preempted" => (StatusCode::CONFLICT, "preempted"),
                "agent" => (StatusCode::BAD_REQUEST, "unknown_agent"),
                _ => (StatusCode::INTERNAL_SERVER_ERROR, "turn_failed"),
            };
            Some(ApiError::new(status, code, message.clone()))
        }
    }
}
