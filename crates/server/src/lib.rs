//! HomeAgent's HTTP server: the agent made reachable by other programs
//! (an OpenAI-compatible endpoint, a sessions API, an event stream, status)
//! and watchable by a person (the dashboard at `/`).
//!
//! # Routes
//!
//! | route | what |
//! |---|---|
//! | `GET /` | the dashboard (one HTML page from the binary; no key needed to load it) |
//! | `POST /v1/chat/completions` | OpenAI chat completions as model `homeagent` ([`openai`]) |
//! | `GET /v1/models` | the one model |
//! | `GET /api/v1/sessions` | stored sessions |
//! | `POST /api/v1/sessions/{id}/messages` | `{text, agent?, interrupt?}` → SSE of frames |
//! | `POST /api/v1/sessions/{id}/stop` | stop the running input and the queue |
//! | `GET`/`DELETE /api/v1/sessions/{id}` | history with calls, results and tool events / delete |
//! | `GET /api/v1/events` | SSE of every frame, numbered, with `Last-Event-ID` replay ([`events`]) |
//! | `GET /api/v1/status` | scheduler counters, sources' health, tool counts, uptime |
//! | `GET /api/v1/tools` | every tool and its scheduling declarations |
//! | `GET /api/v1/device/ws` | WebSocket for `homeagent waiter` devices (token checked in the protocol) |
//!
//! # Security
//!
//! With an API key every route but `/` and the device WebSocket (devices
//! bind with the device token inside the protocol) needs `Authorization: Bearer <key>`
//! (the event stream also takes the `homeagent_token` cookie, because
//! browsers' `EventSource` cannot send headers; a key in the URL is refused,
//! since logs keep URLs). [`bind`] refuses a
//! non-loopback address without a key. Bodies are capped
//! ([`ServerOptions::body_limit`]) and each client address may run a
//! bounded number of turns at once.
//!
//! # Shutdown
//!
//! [`serve`] runs until its shutdown future completes, then stops accepting,
//! gives running turns [`ServerOptions::shutdown_grace`] to finish, stops
//! the ones still running and returns once they have ended, their outcomes
//! committed (so the stored history stays paired), or after a linger.
//! Event streams end when the turns have: a dashboard then sees every
//! stopped call end, which a server started later cannot tell it. A turn counts whether or not its client is still
//! connected: one whose client left is stopped at once, and its commit
//! may still be waiting for the disk or another writer.

mod device;
pub mod error;
pub mod events;
mod http;
pub mod openai;
mod sequences;
mod sessions;
pub mod state;
mod status;
mod threads;
mod turn;

use std::future::Future;
use std::net::SocketAddr;
use std::time::Duration;

use axum::Router;
use axum::extract::DefaultBodyLimit;
use axum::response::{Html, IntoResponse, Response};
use axum::routing::{get, post};
use tokio::net::{TcpListener, TcpSocket};

pub use device::{DEAD_AFTER, HANDSHAKE_TIMEOUT, PING_EVERY};
pub use error::{ApiError, ServeError};
pub use events::{EventHub, Read, Subscriber};
use homeagent_device::protocol::DEVICE_WS_PATH;
pub use http::TOKEN_COOKIE;
pub use state::{ServerOptions, ServerState};
pub use threads::ServeThreads;

/// The dashboard page, compiled into the binary.
pub const DASHBOARD_HTML: &str = include_str!("dashboard.html");

/// The default listen address.
pub const DEFAULT_LISTEN: &str = "127.0.0.1:8080";

/// How long, after the grace period, shutdown waits for stopped turns and
/// open connections before returning anyway.
const SHUTDOWN_LINGER: Duration = Duration::from_secs(5);

/// Every route, with the key check, the body limit and the body timeout.
pub fn router(state: ServerState) -> Router {
    let limit = state.options().body_limit;
    let body_timeout = state.options().body_timeout;
    Router::new()
        .route("/", get(dashboard))
        .route("/v1/models", get(openai::models))
        .route("/v1/models/{id}", get(openai::model))
        .route("/v1/chat/completions", post(openai::completions))
        .route("/api/v1/sessions", get(sessions::list))
        .route(
            "/api/v1/sessions/{id}",
            get(sessions::get).delete(sessions::delete),
        )
        .route("/api/v1/sessions/{id}/messages", post(sessions::send))
        .route("/api/v1/sessions/{id}/stop", post(sessions::stop))
        .route("/api/v1/events", get(events::stream))
        .route("/api/v1/status", get(status::status))
        .route("/api/v1/tools", get(status::tools))
        .route(
            "/api/v1/sequences",
            get(sequences::list).post(sequences::create),
        )
        .route(
            "/api/v1/sequences/{name}",
            get(sequences::get).delete(sequences::delete),
        )
        .route(DEVICE_WS_PATH, get(device::upgrade))
        .fallback(not_found)
        .method_not_allowed_fallback(method_not_allowed)
        .layer(axum::middleware::from_fn_with_state(
            state.clone(),
            http::require_key,
        ))
        .layer(DefaultBodyLimit::max(limit))
        .layer(axum::middleware::from_fn_with_state(
            body_timeout,
            http::body_deadline,
        ))
        .with_state(state)
}

async fn dashboard() -> Html<&'static str> {
    Html(DASHBOARD_HTML)
}

async fn not_found(uri: axum::http::Uri) -> Response {
    ApiError::not_found(format!(
        "no route {}; see GET /api/v1/status, /api/v1/sessions, /v1/chat/completions",
        uri.path()
    ))
    .into_response()
}

/// A route that exists, asked with a method it does not take. (axum adds
/// the `Allow` header to what this returns.)
async fn method_not_allowed(method: axum::http::Method, uri: axum::http::Uri) -> Response {
    ApiError::new(
        axum::http::StatusCode::METHOD_NOT_ALLOWED,
        "method_not_allowed",
        format!(
            "{} does not take {method}; the Allow header lists the methods it takes",
            uri.path()
        ),
    )
    .into_response()
}

/// Resolves `listen` and binds it, refusing an address other machines can
/// reach when there is no API key.
pub async fn bind(listen: &str, api_key: Option<&str>) -> Result<TcpListener, ServeError> {
    let addrs: Vec<SocketAddr> = tokio::net::lookup_host(listen)
        .await
        .map_err(|e| ServeError::BadAddress {
            addr: listen.to_owned(),
            detail: e.to_string(),
        })?
        .collect();
    let Some(first) = addrs.first().copied() else {
        return Err(ServeError::BadAddress {
            addr: listen.to_owned(),
            detail: "it resolves to no address".to_owned(),
        });
    };
    if api_key.is_none_or(str::is_empty) && !addrs.iter().all(|a| a.ip().is_loopback()) {
        return Err(ServeError::NonLoopbackWithoutKey {
            addr: listen.to_owned(),
        });
    }
    listen_on(first).map_err(|source| ServeError::Bind {
        addr: listen.to_owned(),
        source,
    })
}

/// Places in the listener's accept queue, for connections the server has
/// not accepted yet (the kernel caps it at `net.core.somaxconn`). With the
/// common default of 128, a burst of clients overflows it while the server
/// is busy: the kernel drops their handshakes and each client tries again
/// a second later.
pub const LISTEN_BACKLOG: u32 = 1024;

/// A listener on `addr` with [`LISTEN_BACKLOG`] places.
fn listen_on(addr: SocketAddr) -> std::io::Result<TcpListener> {
    let socket = if addr.is_ipv4() {
        TcpSocket::new_v4()?
    } else {
        TcpSocket::new_v6()?
    };
    // As `TcpListener::bind` does on Unix: a restarted server binds while
    // its old connections linger in TIME_WAIT. (On Windows the option
    // would let another process take the port.)
    #[cfg(unix)]
    socket.set_reuseaddr(true)?;
    socket.bind(addr)?;
    socket.listen(LISTEN_BACKLOG)
}

/// Serves until `shutdown` completes, then shuts down gracefully (see the
/// module docs). Returns once every connection is closed or the linger
/// after the grace period ran out. Connections are served on the caller's
/// thread; [`serve_threads`] spreads them over more.
pub async fn serve(
    listener: TcpListener,
    state: ServerState,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<(), ServeError> {
    serve_threads(listener, state, shutdown, ServeThreads::default()).await
}

/// [`serve`], with connections served on `threads` (see [`ServeThreads`]).
pub async fn serve_threads(
    listener: TcpListener,
    state: ServerState,
    shutdown: impl Future<Output = ()> + Send + 'static,
    threads: ServeThreads,
) -> Result<(), ServeError> {
    let token = state.shutdown_token().clone();
    state.set_serve_threads(threads.threads.max(1));
    let app = router(state.clone());
    // The body's timeout serves for the head as well: both stop a client
    // that trickles bytes from holding a connection.
    let head_timeout = state.options().body_timeout;
    let stopping = token.clone();
    tokio::spawn(async move {
        shutdown.await;
        tracing::info!("shutting down: no new connections");
        stopping.cancel();
    });
    // The serving threads' runtimes outlive their connections until this
    // returns: a turn whose client went away runs on there until it ends.
    let release = homeagent_core::CancellationToken::new();
    let _release_on_return = release.clone().drop_guard();
    let server =
        threads::serve_on_threads(listener, app, threads, head_timeout, token.clone(), release);
    tokio::pin!(server);
    let turns = async {
        stop_turns(&state, &token).await;
        state.turns_ended_token().cancel();
    };
    tokio::pin!(turns);
    tokio::select! {
        // Every connection closed after the shutdown began: turns whose
        // clients left may still run. (An error, such as a serving thread
        // that could not start, comes before any shutdown: return it.)
        result = &mut server => {
            result.map_err(ServeError::Io)?;
            turns.await;
            Ok(())
        }
        () = &mut turns => match tokio::time::timeout(SHUTDOWN_LINGER, server).await {
            Ok(result) => result.map_err(ServeError::Io),
            Err(_) => {
                tracing::warn!("connections still open after the shutdown linger; exiting anyway");
                Ok(())
            }
        },
    }
}

/// Once `token` fires: gives the running turns the grace period, stops the
/// ones still running, and waits (for at most the linger) until they have
/// ended, their outcomes committed. A turn counts whether or not its
/// client is still connected: the scheduler's busy sessions, not only the
/// server's.
async fn stop_turns(state: &ServerState, token: &homeagent_core::CancellationToken) {
    token.cancelled().await;
    let busy = || {
        let mut sessions = state.sessions_running();
        sessions.extend(state.scheduler().busy_sessions());
        sessions.sort_unstable();
        sessions.dedup();
        sessions
    };
    // `idle` also waits for the terminal frames of inputs that have just
    // ended: the event streams end after this, and would miss them.
    let ended = || busy().is_empty() && state.scheduler().idle();
    let until = |deadline: tokio::time::Instant| async move {
        while !ended() && tokio::time::Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    };
    until(tokio::time::Instant::now() + state.options().shutdown_grace).await;
    for session in busy() {
        tracing::info!(%session, "shutdown grace over: stopping its turn");
        state.scheduler().stop(&session);
    }
    until(tokio::time::Instant::now() + SHUTDOWN_LINGER).await;
}
