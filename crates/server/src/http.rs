//! Request plumbing shared by the handlers: the API-key check, JSON bodies
//! with JSON errors, and the few query/cookie lookups the server needs.

use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::{Request, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use serde::de::DeserializeOwned;

use homeagent_device::protocol::DEVICE_WS_PATH;

use crate::error::ApiError;
use crate::state::ServerState;

/// The one path served without a key: the dashboard page itself, which
/// holds no data and asks the person for the key.
pub const PUBLIC_PATH: &str = "/";

/// The one route that also takes the key as `?token=` or the
/// `homeagent_token` cookie: `EventSource` cannot send headers.
pub const EVENTS_PATH: &str = "/api/v1/events";

/// The cookie the event stream accepts the key in.
pub const TOKEN_COOKIE: &str = "homeagent_token";

/// Middleware: with an API key configured, every route but the dashboard
/// page needs it; anything else is a 401 in the JSON error shape.
pub async fn require_key(State(state): State<ServerState>, req: Request, next: Next) -> Response {
    let Some(key) = state.options().api_key.as_deref() else {
        return next.run(req).await;
    };
    let path = req.uri().path();
    if path == PUBLIC_PATH || path == DEVICE_WS_PATH {
        return next.run(req).await;
    }
    let mut presented: Vec<String> = bearer(req.headers()).into_iter().collect();
    if path == EVENTS_PATH {
        presented.extend(query_param(req.uri().query(), "token"));
        presented.extend(cookie(req.headers(), TOKEN_COOKIE));
    }
    if presented.iter().any(|p| same_secret(p, key)) {
        next.run(req).await
    } else {
        ApiError::unauthorized().into_response()
    }
}

fn bearer(headers: &HeaderMap) -> Option<String> {
    let value = headers.get(header::AUTHORIZATION)?.to_str().ok()?;
    let (scheme, token) = value.split_once(' ')?;
    scheme
        .eq_ignore_ascii_case("bearer")
        .then(|| token.trim().to_owned())
}

/// Compares without an early exit on the first differing byte, so the time
/// taken does not tell an attacker how much of a guess was right.
pub(crate) fn same_secret(presented: &str, key: &str) -> bool {
    let (a, b) = (presented.as_bytes(), key.as_bytes());
    let mut diff = a.len() ^ b.len();
    for (i, byte) in b.iter().enumerate() {
        diff |= usize::from(a.get(i).copied().unwrap_or(0) ^ byte);
    }
    diff == 0
}

/// A `name=value` query parameter, percent-decoded.
pub fn query_param(query: Option<&str>, name: &str) -> Option<String> {
    query?.split('&').find_map(|pair| {
        let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
        (percent_decode(k) == name).then(|| percent_decode(v))
    })
}

pub fn cookie(headers: &HeaderMap, name: &str) -> Option<String> {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .find_map(|pair| {
            let (k, v) = pair.trim().split_once('=')?;
            (k == name).then(|| percent_decode(v))
        })
}

fn percent_decode(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'+' => out.push(b' '),
            b'%' if i + 2 < bytes.len() => {
                let hex = std::str::from_utf8(&bytes[i + 1..i + 3]).ok();
                match hex.and_then(|h| u8::from_str_radix(h, 16).ok()) {
                    Some(byte) => {
                        out.push(byte);
                        i += 3;
                        continue;
                    }
                    None => out.push(b'%'),
                }
            }
            byte => out.push(byte),
        }
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// A JSON body as `T`: a body over the limit is a 413, bytes that are not
/// JSON a 400 `invalid_json`, JSON of the wrong shape (a missing or unknown
/// field, a wrong type) a 400 `invalid_request`; each message names the
/// problem and where it is.
pub fn json_body<T: DeserializeOwned>(body: Result<Bytes, BytesRejection>) -> Result<T, ApiError> {
    let bytes = body_bytes(body)?;
    serde_json::from_slice(&bytes).map_err(|e| json_error(&e))
}

pub fn body_bytes(body: Result<Bytes, BytesRejection>) -> Result<Bytes, ApiError> {
    body.map_err(|rejection| {
        if rejection.status() == StatusCode::PAYLOAD_TOO_LARGE {
            ApiError::new(
                StatusCode::PAYLOAD_TOO_LARGE,
                "body_too_large",
                "the request body is larger than the server accepts; send a shorter one",
            )
        } else {
            ApiError::bad_request(
                "invalid_body",
                format!("cannot read the request body: {rejection}"),
            )
        }
    })
}

pub fn json_error(error: &serde_json::Error) -> ApiError {
    use serde_json::error::Category;
    match error.classify() {
        Category::Data => ApiError::bad_request(
            "invalid_request",
            format!("the request body does not have the expected shape: {error}"),
        ),
        Category::Syntax | Category::Eof | Category::Io => ApiError::bad_request(
            "invalid_json",
            format!("the request body is not valid JSON: {error}"),
        ),
    }
}

/// A 200 answer with a JSON body.
pub fn json_ok(value: &serde_json::Value) -> Response {
    (
        StatusCode::OK,
        [(header::CONTENT_TYPE, "application/json")],
        value.to_string(),
    )
        .into_response()
}
