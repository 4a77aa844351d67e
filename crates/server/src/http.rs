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

/// The one route that also takes the key as the `homeagent_token` cookie:
/// `EventSource` cannot send headers. No route takes it in the URL, where
/// proxy and server logs would keep it.
pub const EVENTS_PATH: &str = "/api/v1/events";

/// The cookie the event stream accepts the key in.
pub const TOKEN_COOKIE: &str = "homeagent_token";

/// Middleware: with an API key configured, every route but the dashboard
/// page needs it; anything else is a 401 in the JSON error shape. Without
/// one, browsers of other sites are refused (see [`local_browser_check`]).
pub async fn require_key(State(state): State<ServerState>, req: Request, next: Next) -> Response {
    let Some(key) = state.options().api_key.as_deref() else {
        return match local_browser_check(req.headers()) {
            Ok(()) => next.run(req).await,
            Err(error) => error.into_response(),
        };
    };
    let path = req.uri().path();
    if path == PUBLIC_PATH || path == DEVICE_WS_PATH {
        return next.run(req).await;
    }
    if query_param(req.uri().query(), "token").is_some() {
        // Refused even when right: the key is already in some log, and
        // saying so is better than letting the habit stick.
        return ApiError::new(
            StatusCode::UNAUTHORIZED,
            "unauthorized",
            "the API key is not accepted in the URL (`?token=`), where logs keep it: send \
             `Authorization: Bearer <key>` (the event stream also takes the `homeagent_token` \
             cookie), and replace a key that was sent in a URL",
        )
        .into_response();
    }
    let mut presented: Vec<String> = bearer(req.headers()).into_iter().collect();
    if path == EVENTS_PATH {
        // Every cookie of that name counts: another app on the same host
        // can set one too (cookies ignore the port), and its stale value
        // must not hide the right one.
        presented.extend(cookies(req.headers(), TOKEN_COOKIE));
    }
    if presented.iter().any(|p| same_secret(p, key)) {
        next.run(req).await
    } else {
        ApiError::unauthorized().into_response()
    }
}

/// Without a key the server listens on loopback only, which keeps other
/// machines out but not the web pages the person opens: a page can send a
/// "simple" cross-site POST (`text/plain`, no preflight) to 127.0.0.1, and
/// a page whose own name was rebound to 127.0.0.1 (DNS rebinding) can even
/// read the answers. Browsers say where a request comes from, so:
///
/// - `Host` must name loopback (`localhost`, `*.localhost`, `127.x.x.x`,
///   `[::1]`): a rebound page's requests carry its own name;
/// - `Origin`, when a browser sends one, must be this same host and port
///   (the dashboard's own requests); `null` (sandboxed frames, files) is
///   refused.
///
/// Local clients (curl, SDKs, Open WebUI's backend) send no `Origin` and a
/// loopback `Host`, so they are not affected. With a key none of this is
/// needed: a page cannot know the key, and sending it needs a preflight
/// this server never grants.
fn local_browser_check(headers: &HeaderMap) -> Result<(), ApiError> {
    let refuse = |what: String| {
        ApiError::new(
            StatusCode::FORBIDDEN,
            "foreign_origin",
            format!(
                "{what}; without an API key only local clients and the dashboard at this \
                 address may use the server (set `server.api_key` to serve others)"
            ),
        )
    };
    let host = headers.get(header::HOST).and_then(|h| h.to_str().ok());
    if let Some(host) = host
        && !is_loopback_host(host)
    {
        return Err(refuse(format!(
            "the request names host `{host}`, not this machine"
        )));
    }
    if let Some(origin) = headers.get(header::ORIGIN) {
        let origin = origin.to_str().unwrap_or("null");
        let authority = origin
            .split_once("://")
            .map(|(_, rest)| rest.trim_end_matches('/'));
        let same = match (authority, host) {
            (Some(authority), Some(host)) => authority.eq_ignore_ascii_case(host),
            // No Host to compare with: a loopback origin is this machine.
            (Some(authority), None) => is_loopback_host(authority),
            (None, _) => false,
        };
        if !same {
            return Err(refuse(format!("a web page of `{origin}` sent the request")));
        }
    }
    Ok(())
}

/// Whether `host` (a `Host` header value or an origin's authority, port
/// included or not) names the loopback interface.
fn is_loopback_host(host: &str) -> bool {
    let name = match host.strip_prefix('[') {
        // `[::1]:8080`
        Some(rest) => rest.split(']').next().unwrap_or_default(),
        None => host.rsplit_once(':').map_or(host, |(name, port)| {
            if port.bytes().all(|b| b.is_ascii_digit()) {
                name
            } else {
                host
            }
        }),
    };
    let name = name.to_ascii_lowercase();
    name == "localhost"
        || name.ends_with(".localhost")
        || name
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback())
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

/// Every value of the cookie `name`, percent-decoded.
pub fn cookies(headers: &HeaderMap, name: &str) -> Vec<String> {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|pair| {
            let (k, v) = pair.trim().split_once('=')?;
            (k == name).then(|| percent_decode(v))
        })
        .collect()
}

/// `%XX` decoded. `+` stays `+`: cookie values are not form-encoded (a
/// base64 key holds `+`), and the one query parameter read, `token`, is
/// only looked for, never used.
fn percent_decode(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
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
/// The JSON of a request body; `limit` is the server's body limit, which
/// a refusal names.
pub fn json_body<T: DeserializeOwned>(
    body: Result<Bytes, BytesRejection>,
    limit: usize,
) -> Result<T, ApiError> {
    let bytes = body_bytes(body, limit)?;
    serde_json::from_slice(&bytes).map_err(|e| json_error(&e))
}

pub fn body_bytes(body: Result<Bytes, BytesRejection>, limit: usize) -> Result<Bytes, ApiError> {
    body.map_err(|rejection| {
        if deadline_passed(&rejection) {
            ApiError::new(
                StatusCode::REQUEST_TIMEOUT,
                "body_timeout",
                "the request body did not arrive within the server's body timeout, counted \
                 from the request's start; send the whole body without pauses",
            )
        } else if rejection.status() == StatusCode::PAYLOAD_TOO_LARGE {
            ApiError::new(
                StatusCode::PAYLOAD_TOO_LARGE,
                "body_too_large",
                format!(
                    "the request body is larger than the server takes ({limit} bytes, \
                     [server] max_body_bytes); send a shorter one, or raise the limit"
                ),
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
    // `to_vec` writes into the buffer directly; `Value`'s `Display` goes
    // through `fmt`'s adapters, which cost a reply twice the instructions.
    // Writing a `Value` cannot fail (its keys are strings); were it to, the
    // client gets a 500 that says so, not an empty 200.
    match serde_json::to_vec(value) {
        Ok(body) => (
            StatusCode::OK,
            [(header::CONTENT_TYPE, "application/json")],
            body,
        )
            .into_response(),
        Err(error) => {
            ApiError::internal(format!("the answer could not be written as JSON: {error}"))
                .into_response()
        }
    }
}

/// A path parameter, like axum's `Path`, whose refusal (a segment that is
/// not UTF-8, say) is the API's JSON error rather than axum's text.
pub struct ApiPath<T>(pub T);

impl<S, T> axum::extract::FromRequestParts<S> for ApiPath<T>
where
    S: Send + Sync,
    T: DeserializeOwned + Send,
{
    type Rejection = ApiError;

    async fn from_request_parts(
        parts: &mut axum::http::request::Parts,
        state: &S,
    ) -> Result<Self, ApiError> {
        match axum::extract::Path::<T>::from_request_parts(parts, state).await {
            Ok(axum::extract::Path(value)) => Ok(ApiPath(value)),
            Err(rejection) => Err(ApiError::bad_request(
                "invalid_path",
                format!(
                    "{}; path segments are percent-encoded UTF-8",
                    rejection.body_text()
                ),
            )),
        }
    }
}

/// The request body ran past its deadline (`ServerOptions::body_timeout`,
/// counted from the request's arrival).
#[derive(Debug)]
pub struct BodyDeadlinePassed;

impl std::fmt::Display for BodyDeadlinePassed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("the request body did not arrive in time")
    }
}

impl std::error::Error for BodyDeadlinePassed {}

/// Puts one deadline on a request's whole body. A timer between pieces
/// (what tower-http's body timeout does) lets a client that sends a byte
/// now and then hold the connection, its task and its buffer for ever.
pub async fn body_deadline(
    State(limit): State<std::time::Duration>,
    request: Request,
    next: Next,
) -> Response {
    let deadline = tokio::time::Instant::now() + limit;
    next.run(request.map(|body| {
        axum::body::Body::new(DeadlineBody {
            body,
            deadline: Box::pin(tokio::time::sleep_until(deadline)),
        })
    }))
    .await
}

/// A body that fails with [`BodyDeadlinePassed`] once its deadline passes.
struct DeadlineBody {
    body: axum::body::Body,
    deadline: std::pin::Pin<Box<tokio::time::Sleep>>,
}

impl http_body::Body for DeadlineBody {
    type Data = Bytes;
    type Error = axum::BoxError;

    fn poll_frame(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<http_body::Frame<Bytes>, axum::BoxError>>> {
        use std::future::Future as _;
        if self.deadline.as_mut().poll(cx).is_ready() {
            return std::task::Poll::Ready(Some(Err(Box::new(BodyDeadlinePassed))));
        }
        std::pin::Pin::new(&mut self.body)
            .poll_frame(cx)
            .map_err(Into::into)
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.body.size_hint()
    }
}

/// Whether `error`, or any error behind it, is [`BodyDeadlinePassed`].
fn deadline_passed(error: &(dyn std::error::Error + 'static)) -> bool {
    let mut next = Some(error);
    while let Some(error) = next {
        if error.is::<BodyDeadlinePassed>() {
            return true;
        }
        next = error.source();
    }
    false
}

#[cfg(test)]
mod tests;
