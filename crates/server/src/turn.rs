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

/// Submits an input for `client`.
pub fn start(
    state: &ServerState,
    client: IpAddr,
    submission: Submission,
) -> Result<Started, ApiError> {
    let guard = state.begin_turn(client, &submission.session)?;
    Ok(submit(state, guard, submission))
}

/// Submits an input under a turn already counted in (`guard`), for
/// handlers that prepare the session between the two (and so store
/// nothing for a request the client limit refuses).
pub fn submit(state: &ServerState, mut guard: TurnGuard, submission: Submission) -> Started {
    let (input, frames) = state.scheduler().submit_tracked(submission);
    guard.submitted(input);
    Started { frames, guard }
}

/// The refusal of a blank input (the scheduler's `EmptyInput`, or a
/// request refused before it seeds anything).
pub fn empty_input() -> ApiError {
    ApiError::bad_request("empty_input", "the input is empty; send some text")
}

/// The refusal of a request that comes, or waited, while the server shuts
/// down: nothing of it ran, so a client may send it again, to the next
/// instance.
pub fn shutting_down() -> ApiError {
    ApiError::new(
        StatusCode::SERVICE_UNAVAILABLE,
        "shutting_down",
        "the server is shutting down; retry against the next instance",
    )
}

/// Whether an input that ended with `terminal` stored nothing: skipped by
/// the scheduler, or refused before it opened its session (an unknown
/// agent, another agent's session, one another process runs).
pub fn stored_nothing(terminal: &Frame) -> bool {
    match terminal {
        Frame::Skipped { .. } => true,
        Frame::Error { code, .. } => {
            matches!(code.as_str(), "agent" | "session_conflict" | "session_busy")
        }
        _ => false,
    }
}

/// The error a terminal frame that is not a `response` stands for.
/// `shutting_down`: the server is, so a stop is its doing, not a client's.
pub fn terminal_error(frame: &Frame, shutting_down: bool) -> Option<ApiError> {
    match frame {
        Frame::Response { .. } | Frame::ContentDelta { .. } | Frame::ToolCall(_) => None,
        Frame::Skipped { reason } => Some(match reason {
            SkipReason::EmptyInput => empty_input(),
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
            SkipReason::Stopped if shutting_down => self::shutting_down(),
            SkipReason::Stopped => ApiError::new(
                StatusCode::CONFLICT,
                "stopped",
                "the session was stopped before this input ran",
            ),
        }),
        Frame::Error { code, .. } if shutting_down && code == "stopped" => Some(ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "stopped_by_shutdown",
            "the server shut down while this input ran and stopped it; its tools may have run, \
             so look at the session before sending it again",
        )),
        Frame::Error { message, code } => {
            let (status, code) = match code.as_str() {
                "model" => (StatusCode::BAD_GATEWAY, "model_error"),
                "stopped" => (StatusCode::CONFLICT, "stopped"),
                "preempted" => (StatusCode::CONFLICT, "preempted"),
                "agent" => (StatusCode::BAD_REQUEST, "unknown_agent"),
                "session_conflict" => (StatusCode::CONFLICT, "session_conflict"),
                "session_busy" => (StatusCode::CONFLICT, "session_busy"),
                _ => (StatusCode::INTERNAL_SERVER_ERROR, "turn_failed"),
            };
            Some(ApiError::new(status, code, message.clone()))
        }
    }
}
