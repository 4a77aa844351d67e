//! Errors: what the API answers when it refuses a request, and why the
//! server could not start.
//!
//! Every refusal is JSON in the OpenAI shape, `{"error": {"message", "type",
//! "param", "code"}}`, so an OpenAI client surfaces the message unchanged and a
//! program matches on `code`, never on the text.

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde_json::json;

/// A refused or failed API request. `code` is the matchable part.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct ApiError {
    pub status: StatusCode,
    /// Stable, matchable: `unauthorized`, `invalid_json`, `unknown_field`,
    /// `tools_not_supported`, `model_not_found`, `not_found`, …
    pub code: &'static str,
    pub message: String,
}

impl ApiError {
    pub fn new(status: StatusCode, code: &'static str, message: impl Into<String>) -> Self {
        ApiError {
            status,
            code,
            message: message.into(),
        }
    }

    pub fn bad_request(code: &'static str, message: impl Into<String>) -> Self {
        ApiError::new(StatusCode::BAD_REQUEST, code, message)
    }

    pub fn not_found(message: impl Into<String>) -> Self {
        ApiError::new(StatusCode::NOT_FOUND, "not_found", message)
    }

    pub fn unauthorized() -> Self {
        ApiError::new(
            StatusCode::UNAUTHORIZED,
            "unauthorized",
            "missing or wrong API key: send `Authorization: Bearer <key>` \
             (the key is server.api_key or HOMEAGENT_API_KEY)",
        )
    }

    pub fn internal(message: impl Into<String>) -> Self {
        ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, "internal", message)
    }

    /// The JSON body, also used inside event streams.
    pub fn body(&self) -> serde_json::Value {
        json!({
            "error": {
                "message": self.message,
                "type": error_type(self.status),
                "param": null,
                "code": self.code,
            }
        })
    }
}

/// The OpenAI `type` for a status (clients show it; programs use `code`).
/// OpenAI answers a missing model with 404 and `invalid_request_error`.
fn error_type(status: StatusCode) -> &'static str {
    match status.as_u16() {
        401 => "authentication_error",
        429 => "rate_limit_error",
        400..=499 => "invalid_request_error",
        _ => "server_error",
    }
}

impl ApiError {
    /// Whether sending the same request again may do any good: the codes
    /// for which nothing ran and the reason passes (a full queue, a busy
    /// session, a restart). OpenAI's SDKs retry 408, 409, 429 and 5xx on
    /// their own; after a model error or a failed turn the agent has
    /// retried already, and tools may have run, so a blind retry would run
    /// them twice.
    fn worth_retrying(&self) -> bool {
        matches!(
            self.code,
            "queue_full" | "too_many_requests" | "shutting_down" | "session_busy"
        )
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let body = self.body().to_string();
        let retried_by_sdks = matches!(self.status.as_u16(), 408 | 409 | 429 | 500..);
        // `x-should-retry: false` is the header OpenAI's SDKs obey.
        let should_retry = (retried_by_sdks && !self.worth_retrying()).then_some((
            axum::http::HeaderName::from_static("x-should-retry"),
            axum::http::HeaderValue::from_static("false"),
        ));
        (
            self.status,
            [(axum::http::header::CONTENT_TYPE, "application/json")],
            should_retry.map(|header| [header]),
            body,
        )
            .into_response()
    }
}

/// Why the server did not start.
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    /// A non-loopback address without an API key would hand the agent's
    /// tools to anyone on the network.
    #[error(
        "refusing to listen on {addr} without an API key: it is reachable from other machines. \
         Set HOMEAGENT_API_KEY (or server.api_key), or listen on 127.0.0.1"
    )]
    NonLoopbackWithoutKey { addr: String },
    /// The address could not be parsed or resolved.
    #[error(
        "cannot resolve the listen address {addr:?}: {detail}; use HOST:PORT, e.g. 127.0.0.1:8080"
    )]
    BadAddress { addr: String, detail: String },
    #[error(
        "cannot listen on {addr}: {source}; pass another address with --listen (or set \
         server.listen), or stop what holds this one"
    )]
    Bind {
        addr: String,
        source: std::io::Error,
    },
    #[error("the server failed: {0}")]
    Io(#[from] std::io::Error),
}
