//! What every handler shares: the agent's scheduler and runtime, the event
//! hub, the options, and the bookkeeping of turns the server started (for
//! per-client limits, client disconnects and graceful shutdown).

use std::collections::{BTreeMap, HashMap};
use std::net::IpAddr;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use axum::http::StatusCode;
use homeagent_agent::{Agent, InputId, Runtime, Scheduler};
use homeagent_core::{CancellationToken, Registry, ToolSource};
use homeagent_device::DeviceHub;

use crate::error::ApiError;
use crate::events::{DEFAULT_RING_CAPACITY, EventHub};
use crate::openai::Transcripts;

/// The server's knobs. `Debug` shows whether each secret is set and the
/// ids of the devices with their own tokens, never a secret.
#[derive(Clone)]
pub struct ServerOptions {
    /// The bearer token every API route requires; `None`: no auth (then
    /// only a loopback address may be used, see [`crate::bind`]).
    pub api_key: Option<String>,
    /// Largest request body accepted, in bytes.
    pub body_limit: usize,
    /// A request body that has not fully arrived this long after the
    /// request did is refused with 408 (one deadline for the whole body:
    /// a client trickling bytes cannot hold a connection and a task), and
    /// a connection whose request head has not arrived after this long is
    /// closed (an idle keep-alive connection as well).
    pub body_timeout: Duration,
    /// Events the `/api/v1/events` ring keeps for `Last-Event-ID` replay.
    pub event_ring: usize,
    /// Turns one client address may have running at once (429 beyond).
    pub turns_per_client: usize,
    /// On shutdown, how long running turns may take before they are
    /// stopped.
    pub shutdown_grace: Duration,
    /// The agent completions and sessions run as unless told otherwise.
    pub default_agent: String,
    /// The token devices bind with; `None`: the API key is used, and with
    /// neither, only the devices of `device_tokens` can bind.
    pub device_token: Option<String>,
    /// Devices with a token of their own, by id: such a device binds only
    /// with its own token, never the shared one.
    pub device_tokens: BTreeMap<String, String>,
}

impl std::fmt::Debug for ServerOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let set = |secret: &Option<String>| secret.as_ref().map(|_| "<redacted>");
        f.debug_struct("ServerOptions")
            .field("api_key", &set(&self.api_key))
            .field("body_limit", &self.body_limit)
            .field("body_timeout", &self.body_timeout)
            .field("event_ring", &self.event_ring)
            .field("turns_per_client", &self.turns_per_client)
            .field("shutdown_grace", &self.shutdown_grace)
            .field("default_agent", &self.default_agent)
            .field("device_token", &set(&self.device_token))
            .field(
                "device_tokens",
                &self.device_tokens.keys().collect::<Vec<_>>(),
            )
            .finish()
    }
}

impl Default for ServerOptions {
    fn default() -> Self {
        ServerOptions {
            api_key: None,
            body_limit: 1024 * 1024,
            body_timeout: Duration::from_secs(30),
            event_ring: DEFAULT_RING_CAPACITY,
            turns_per_client: 32,
            shutdown_grace: Duration::from_secs(10),
            default_agent: "main".to_owned(),
            device_token: None,
            device_tokens: BTreeMap::new(),
        }
    }
}

/// Shared by every handler. Cheap to clone.
#[derive(Clone)]
pub struct ServerState {
    inner: Arc<Inner>,
}

struct Inner {
    scheduler: Scheduler,
    runtime: Arc<Runtime>,
    registry: Arc<Registry>,
    devices: Option<DeviceHub>,
    tool_sources: BTreeMap<String, &'static str>,
    options: ServerOptions,
    events: EventHub,
    /// Where each stateless conversation's next request goes on.
    transcripts: Transcripts,
    started: Instant,
    shutdown: CancellationToken,
    /// Cancelled once shutdown has let every turn end (or given up on
    /// them): the event streams end then, not when shutdown begins, so
    /// they carry what the stopping turns still send.
    turns_ended: CancellationToken,
    turns: Mutex<Turns>,
    next_id: AtomicU64,
    /// Workers of the runtime the state was made on (the agent's), for
    /// status: a request served on another thread sees its own runtime.
    workers: usize,
    /// Threads serving connections (set by `serve_threads`).
    serve_threads: AtomicUsize,
}

#[derive(Default)]
struct Turns {
    /// Turns running per session (a session may have queued inputs).
    sessions: HashMap<String, SessionTurns>,
    per_client: HashMap<IpAddr, usize>,
}

/// The turns the server runs on one session.
#[derive(Default)]
struct SessionTurns {
    running: usize,
    /// Turns begun since the session had none: a turn whose own number
    /// is still the last knows no other began after it.
    begun: u64,
}

impl std::fmt::Debug for ServerState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ServerState")
            .field("events", &self.inner.events)
            .finish_non_exhaustive()
    }
}

impl ServerState {
    /// The state over a built agent. Registers the event stream's observer
    /// on the agent's scheduler: build one state per agent.
    pub fn new(agent: &Agent, options: ServerOptions) -> Self {
        let events = EventHub::new(options.event_ring);
        {
            let events = events.clone();
            agent.scheduler.observe(Arc::new(move |session, frame| {
                events.publish(session, frame);
            }));
        }
        ServerState {
            inner: Arc::new(Inner {
                scheduler: agent.scheduler.clone(),
                runtime: Arc::clone(&agent.runtime),
                registry: Arc::clone(&agent.registry),
                devices: agent.devices.clone(),
                tool_sources: agent.tool_sources.clone(),
                options,
                events,
                transcripts: Transcripts::default(),
                started: Instant::now(),
                shutdown: CancellationToken::new(),
                turns_ended: CancellationToken::new(),
                turns: Mutex::new(Turns::default()),
                next_id: AtomicU64::new(1),
                workers: tokio::runtime::Handle::try_current()
                    .map_or(0, |runtime| runtime.metrics().num_workers()),
                serve_threads: AtomicUsize::new(1),
            }),
        }
    }

    /// The worker threads of the runtime this state was made on (0 when
    /// it was made outside one).
    pub fn worker_threads(&self) -> usize {
        self.inner.workers
    }

    /// The threads serving connections.
    pub fn serve_threads(&self) -> usize {
        self.inner.serve_threads.load(Ordering::Relaxed)
    }

    pub(crate) fn set_serve_threads(&self, threads: usize) {
        self.inner.serve_threads.store(threads, Ordering::Relaxed);
    }

    pub fn scheduler(&self) -> &Scheduler {
        &self.inner.scheduler
    }

    pub fn runtime(&self) -> &Arc<Runtime> {
        &self.inner.runtime
    }

    pub fn registry(&self) -> &Arc<Registry> {
        &self.inner.registry
    }

    /// The device bridge's hub, when the agent was built with devices.
    pub fn devices(&self) -> Option<&DeviceHub> {
        self.inner.devices.as_ref()
    }

    /// Whether any device can bind: a shared token is set, or a device
    /// has its own.
    pub fn devices_enabled(&self) -> bool {
        self.device_token().is_some() || !self.inner.options.device_tokens.is_empty()
    }

    /// The token a device that has none of its own must bind with: the
    /// device token, else the API key, but the API key only while no device
    /// is declared with a token of its own (declaring devices is how a
    /// server that has an API key, as any reachable from other machines
    /// must, limits binding to them). `None` when unset or empty.
    pub fn device_token(&self) -> Option<&str> {
        let options = &self.inner.options;
        let api_key = options
            .api_key
            .as_deref()
            .filter(|_| options.device_tokens.is_empty());
        options
            .device_token
            .as_deref()
            .or(api_key)
            .filter(|token| !token.is_empty())
    }

    pub fn tool_source(&self, tool: &str) -> &'static str {
        homeagent_agent::tool_source_of(&self.inner.tool_sources, &self.inner.registry, tool)
    }

    /// Every tool a run reaches, before the gate: the built-in registry's
    /// and the MCP servers' (the registry alone has no MCP tool), as the
    /// runtime sees them now.
    pub fn tools(&self) -> &dyn ToolSource {
        self.inner.runtime.tools().as_ref()
    }

    pub fn options(&self) -> &ServerOptions {
        &self.inner.options
    }

    pub fn events(&self) -> &EventHub {
        &self.inner.events
    }

    pub fn uptime(&self) -> Duration {
        self.inner.started.elapsed()
    }

    /// Cancelled when the server starts shutting down: streams end on it.
    pub fn shutdown_token(&self) -> &CancellationToken {
        &self.inner.shutdown
    }

    /// Cancelled when, after shutdown began, the turns have ended (or the
    /// linger for them ran out): the event stream ends on it.
    pub fn turns_ended_token(&self) -> &CancellationToken {
        &self.inner.turns_ended
    }

    /// A fresh id (sessions of stateless completions, completion ids).
    pub fn fresh_id(&self, prefix: &str) -> String {
        let n = self.inner.next_id.fetch_add(1, Ordering::Relaxed);
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos());
        format!("{prefix}-{nanos:x}-{n}")
    }

    fn turns(&self) -> std::sync::MutexGuard<'_, Turns> {
        self.inner
            .turns
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// Counts a turn in for `client` on `session`, or refuses it when the
    /// client is at its limit or the server is shutting down.
    pub fn begin_turn(&self, client: IpAddr, session: &str) -> Result<TurnGuard, ApiError> {
        let mut turns = self.turns();
        self.may_begin(&turns, client)?;
        Ok(self.count_in(&mut turns, client, session))
    }

    /// [`begin_turn`](Self::begin_turn) for a stateless request whose
    /// transcript has the note `fingerprint` (see `openai::transcript`):
    /// takes the note and counts the turn in on its session in one step,
    /// under the turns' lock, under which every other turn's `begin_turn`
    /// forgets its session's note. A note found here therefore proves that
    /// no turn began on the session since its answer. `None`: there is no
    /// note. A refusal takes nothing, so the client's retry may continue.
    pub(crate) fn continue_turn(
        &self,
        client: IpAddr,
        fingerprint: &crate::openai::Fingerprint,
    ) -> Result<Option<TurnGuard>, ApiError> {
        let mut turns = self.turns();
        self.may_begin(&turns, client)?;
        let Some(session) = self.inner.transcripts.take(fingerprint) else {
            return Ok(None);
        };
        Ok(Some(self.count_in(&mut turns, client, &session)))
    }

    /// Refuses a new turn of `client` when it is at its limit or the
    /// server is shutting down.
    fn may_begin(&self, turns: &Turns, client: IpAddr) -> Result<(), ApiError> {
        if self.inner.shutdown.is_cancelled() {
            return Err(crate::turn::shutting_down());
        }
        let running = turns.per_client.get(&client).copied().unwrap_or(0);
        if running >= self.inner.options.turns_per_client {
            return Err(ApiError::new(
                StatusCode::TOO_MANY_REQUESTS,
                "too_many_requests",
                format!(
                    "this client already has {running} turns running (the limit); wait for one to finish"
                ),
            ));
        }
        Ok(())
    }

    fn count_in(&self, turns: &mut Turns, client: IpAddr, session: &str) -> TurnGuard {
        *turns.per_client.entry(client).or_default() += 1;
        let entry = turns.sessions.entry(session.to_owned()).or_default();
        entry.running += 1;
        entry.begun += 1;
        // Under the turns' lock, as `note_answer` checks: an answer is
        // either noted before this (and forgotten here) or sees this turn.
        let forgotten = self.inner.transcripts.forget_session(session);
        TurnGuard {
            state: self.clone(),
            client,
            session: session.to_owned(),
            input: None,
            finished: false,
            begun: entry.begun,
            forgotten,
            stored_nothing: false,
        }
    }

    /// Sessions with a turn the server started and has not finished.
    pub fn sessions_running(&self) -> Vec<String> {
        self.turns().sessions.keys().cloned().collect()
    }

    /// Notes that a stateless answer left its client holding `fingerprint`
    /// in `session` (see `openai::transcript`), unless a turn waits on the
    /// session: it will move the session past that answer.
    pub(crate) fn note_answer(&self, session: String, fingerprint: crate::openai::Fingerprint) {
        let turns = self.turns();
        if !turns.sessions.contains_key(&session) {
            self.inner.transcripts.note(fingerprint, session);
        }
    }
}

/// One turn the server started. Dropped before [`TurnGuard::finish`] (the
/// client went away mid-turn), it cancels that client's input, tools
/// included, and nothing else: other clients' inputs on the same session
/// run on. The runtime still commits every call's outcome, so the history
/// stays paired.
pub struct TurnGuard {
    state: ServerState,
    client: IpAddr,
    session: String,
    /// The input submitted under this guard (none yet: nothing to cancel).
    input: Option<InputId>,
    finished: bool,
    /// This turn's number among the session's turns (`SessionTurns`).
    begun: u64,
    /// The session's stateless-conversation note this turn forgot when it
    /// began (see `openai::transcript`).
    forgotten: Option<crate::openai::Fingerprint>,
    /// The turn ended storing nothing (see [`TurnGuard::finish`]).
    stored_nothing: bool,
}

impl TurnGuard {
    /// The input this guard cancels if the client goes away.
    pub fn submitted(&mut self, input: InputId) {
        self.input = Some(input);
    }

    /// The turn reached its terminal frame, `terminal`. A turn that
    /// stored nothing (skipped, or refused before it opened the session)
    /// did not move the session: the note it forgot when it began is put
    /// back if no other turn began on the session since, so the
    /// conversation that note continues still does.
    pub fn finish(mut self, terminal: &homeagent_agent::Frame) {
        self.finished = true;
        self.stored_nothing = crate::turn::stored_nothing(terminal);
    }

    pub fn session(&self) -> &str {
        &self.session
    }
}

impl Drop for TurnGuard {
    fn drop(&mut self) {
        if !self.finished
            && let Some(input) = self.input
            && self.state.scheduler().cancel(&self.session, input)
        {
            tracing::info!(session = %self.session, "client went away mid-turn: its input is cancelled");
        }
        let mut turns = self.state.turns();
        if let Some(n) = turns.per_client.get_mut(&self.client) {
            *n -= 1;
            if *n == 0 {
                turns.per_client.remove(&self.client);
            }
        }
        if let Some(entry) = turns.sessions.get_mut(&self.session) {
            entry.running -= 1;
            let alone = entry.running == 0 && entry.begun == self.begun;
            if entry.running == 0 {
                turns.sessions.remove(&self.session);
            }
            if alone
                && self.stored_nothing
                && let Some(fingerprint) = self.forgotten.take()
            {
                self.state
                    .inner
                    .transcripts
                    .note(fingerprint, self.session.clone());
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn debug_shows_which_secrets_are_set_and_never_one_of_them() {
        let options = ServerOptions {
            api_key: Some("api-secret-1".into()),
            device_token: Some("device-secret-2".into()),
            device_tokens: [("nas".to_owned(), "nas-secret-3".to_owned())].into(),
            ..ServerOptions::default()
        };
        let shown = format!("{options:?}");
        for secret in ["api-secret-1", "device-secret-2", "nas-secret-3"] {
            assert!(!shown.contains(secret), "{shown}");
        }
        assert!(shown.starts_with("ServerOptions {"), "{shown}");
        assert!(shown.contains(r#"api_key: Some("<redacted>")"#), "{shown}");
        assert!(shown.contains(r#"device_tokens: ["nas"]"#), "{shown}");
    }
}
