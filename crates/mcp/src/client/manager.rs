//! [`McpManager`]: every configured server's tools as one [`ToolSource`],
//! layered over a parent source (the built-in tools), and the status of
//! each server.

use std::collections::BTreeMap;
use std::sync::{Arc, RwLock};

use homeagent_core::call_notes;
use homeagent_core::registry::not_found;
use homeagent_core::{ErrorReason, ToolContext, ToolDef, ToolError, ToolFuture, ToolSource};
use rmcp::RoleClient;
use rmcp::model::CallToolRequestParams;
use rmcp::service::Peer;
use serde::Serialize;
use serde_json::Value;
use tokio_util::sync::CancellationToken;

use super::call::{CallLimits, call_tool};
use super::convert::{call_result_value, service_error};
use super::supervise::supervise;
use crate::spec::{McpOptions, McpServerSpec, McpTransport, SpecError, valid_server_name};

/// Where a server is in its life.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "state", rename_all = "snake_case")]
pub enum ServerPhase {
    /// Starting or restarting; its tools are not available yet.
    Connecting,
    /// Connected; its tools are available.
    Running,
    /// Crashed, failed to start, or never answered `initialize`; a restart
    /// is scheduled.
    Down { reason: String },
    /// Crashed too often: resting, then tried again (`reason` says when).
    GaveUp { reason: String },
    /// The spec is unusable; never started.
    Invalid { reason: String },
    /// [`McpManager::shutdown`] was called.
    Stopped,
}

/// An MCP tool that was not exposed because its name was taken.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Collision {
    /// The name both would have had.
    pub name: String,
    pub server: String,
    /// The tool's own name on its server.
    pub tool: String,
    /// Who has the name: `mcp server <s> tool <t>` or `built-in tool`.
    pub taken_by: String,
}

/// One server's status, as `homeagent status` or a dashboard shows it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct McpServerStatus {
    pub name: String,
    pub phase: ServerPhase,
    /// Exposed names of the tools it provides (while running).
    pub tools: Vec<String>,
    pub collisions: Vec<Collision>,
    /// Tools the server lists that cannot be offered to a model, as
    /// `(tool, why)` (an input schema that is not an object schema).
    pub unusable_tools: Vec<(String, String)>,
    /// Restarts after a crash or failed start.
    pub restarts: u32,
    /// The child's process id (stdio servers, while running).
    pub pid: Option<u32>,
    /// Results whose structured content broke the tool's outputSchema.
    pub output_schema_warnings: Vec<String>,
    /// Names in the server's `parallel_safe` / `serial` settings that its
    /// tool list does not have, as `(setting, name)`: a typo there
    /// changes nothing, so it is reported.
    pub unlisted_settings: Vec<(&'static str, String)>,
}

pub(crate) struct ExposedTool {
    pub(crate) def: Arc<ToolDef>,
    pub(crate) server: String,
    pub(crate) remote: String,
    pub(crate) output: Option<Arc<jsonschema::Validator>>,
    pub(crate) limits: CallLimits,
}

pub(crate) struct ServerState {
    pub(crate) status: McpServerStatus,
    pub(crate) peer: Option<Peer<RoleClient>>,
    /// Woken when a call failed at the transport: the supervisor checks
    /// whether the server is still there.
    pub(crate) suspect: Arc<tokio::sync::Notify>,
}

/// State shared by the manager and the supervisors.
pub(crate) struct Shared {
    pub(crate) parent: Option<Arc<dyn ToolSource>>,
    pub(crate) tools: RwLock<BTreeMap<String, ExposedTool>>,
    pub(crate) servers: RwLock<BTreeMap<String, ServerState>>,
    pub(crate) shutdown: CancellationToken,
}

impl Shared {
    pub(crate) fn with_server<T>(
        &self,
        name: &str,
        f: impl FnOnce(&mut ServerState) -> T,
    ) -> Option<T> {
        let mut servers = self.servers.write().unwrap_or_else(|e| e.into_inner());
        servers.get_mut(name).map(f)
    }

    fn tools(&self) -> std::sync::RwLockReadGuard<'_, BTreeMap<String, ExposedTool>> {
        self.tools.read().unwrap_or_else(|e| e.into_inner())
    }

    fn running_peer(&self, server: &str) -> Result<Peer<RoleClient>, ServerPhase> {
        let servers = self.servers.read().unwrap_or_else(|e| e.into_inner());
        match servers.get(server) {
            Some(ServerState {
                status:
                    McpServerStatus {
                        phase: ServerPhase::Running,
                        ..
                    },
                peer: Some(peer),
                ..
            }) if !peer.is_transport_closed() => Ok(peer.clone()),
            // Closed but not yet noticed by the supervisor: down all the same.
            Some(ServerState {
                status:
                    McpServerStatus {
                        phase: ServerPhase::Running,
                        ..
                    },
                ..
            }) => Err(ServerPhase::Down {
                reason: "the connection closed".into(),
            }),
            Some(state) => Err(state.status.phase.clone()),
            None => Err(ServerPhase::Stopped),
        }
    }
}

/// Every MCP server's tools as one [`ToolSource`], over an optional parent.
///
/// Cheap to clone; clones share the servers.
#[derive(Clone)]
pub struct McpManager {
    shared: Arc<Shared>,
    /// One per server still making its first attempt.
    first_attempts: Arc<std::sync::Mutex<Vec<tokio::sync::oneshot::Receiver<()>>>>,
}

impl std::fmt::Debug for McpManager {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("McpManager")
            .field("servers", &self.status())
            .finish_non_exhaustive()
    }
}

/// Starts every server and returns once each has connected or failed its
/// first attempt (bounded by its own timeout). A server that failed is
/// retried in the background; the rest of the agent does not wait for it.
///
/// `parent` is where names that are not MCP tools go (the built-in
/// registry); an MCP tool whose name a parent tool already has is reported
/// as a collision and not exposed.
pub async fn start_mcp_servers(
    specs: Vec<McpServerSpec>,
    parent: Option<Arc<dyn ToolSource>>,
    options: McpOptions,
) -> McpManager {
    // Inside an async fn a runtime is always present.
    let manager = match spawn_mcp_servers(specs, parent, options) {
        Ok(manager) => manager,
        Err(NoRuntime) => return McpManager::empty(),
    };
    manager.wait_started().await;
    manager
}

/// How long [`McpManager::shutdown`] waits for the servers to close: past
/// rmcp's whole sequence (replies in flight, stdin closed, SIGTERM, kill).
pub const CLOSE_WAIT: std::time::Duration = std::time::Duration::from_secs(10);

/// [`spawn_mcp_servers`] was called outside a tokio runtime.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("MCP servers can only be started inside a tokio runtime")]
pub struct NoRuntime;

/// Like [`start_mcp_servers`] but returns at once, for a synchronous
/// builder running inside a tokio runtime; await
/// [`McpManager::wait_started`] before the first call that should see the
/// servers' tools.
pub fn spawn_mcp_servers(
    specs: Vec<McpServerSpec>,
    parent: Option<Arc<dyn ToolSource>>,
    options: McpOptions,
) -> Result<McpManager, NoRuntime> {
    let runtime = tokio::runtime::Handle::try_current().map_err(|_| NoRuntime)?;
    let manager = McpManager::with_parent(parent);
    let shared = &manager.shared;
    let mut first_attempts = Vec::new();
    let mut seen = std::collections::HashSet::new();
    for spec in specs {
        let checked = check_spec(&spec, &mut seen);
        let phase = match &checked {
            Ok(()) => ServerPhase::Connecting,
            Err(e) => ServerPhase::Invalid {
                reason: e.to_string(),
            },
        };
        if let Err(e) = &checked {
            tracing::error!("{e}");
        }
        let key = match &checked {
            // A duplicate keeps its report under a distinct key.
            Err(SpecError::DuplicateName(_)) => format!("{}#{}", spec.name, seen.len()),
            _ => spec.name.clone(),
        };
        shared
            .servers
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .insert(
                key,
                ServerState {
                    status: McpServerStatus {
                        name: spec.name.clone(),
                        phase,
                        tools: Vec::new(),
                        collisions: Vec::new(),
                        unusable_tools: Vec::new(),
                        restarts: 0,
                        pid: None,
                        output_schema_warnings: Vec::new(),
                        unlisted_settings: Vec::new(),
                    },
                    peer: None,
                    suspect: Arc::default(),
                },
            );
        if checked.is_ok() {
            let (done, first) = tokio::sync::oneshot::channel();
            runtime.spawn(supervise(shared.clone(), spec, options.clone(), done));
            first_attempts.push(first);
        }
    }
    *manager
        .first_attempts
        .lock()
        .unwrap_or_else(|e| e.into_inner()) = first_attempts;
    Ok(manager)
}

/// Checks every spec as the manager will at start, where a bad one is only
/// left out (and logged): a builder that checks the config first can fail
/// loudly on the first mistake instead.
/// Whether `url` starts with `http://` or `https://`, in any case (a
/// scheme is case-insensitive, and the client lowercases it).
fn is_http_url(url: &str) -> bool {
    ["http://", "https://"].iter().any(|scheme| {
        url.get(..scheme.len())
            .is_some_and(|start| start.eq_ignore_ascii_case(scheme))
    })
}

pub fn check_specs(specs: &[McpServerSpec]) -> Result<(), SpecError> {
    let mut seen = std::collections::HashSet::new();
    specs
        .iter()
        .try_for_each(|spec| check_spec(spec, &mut seen))
}

fn check_spec(
    spec: &McpServerSpec,
    seen: &mut std::collections::HashSet<String>,
) -> Result<(), SpecError> {
    if spec.name.is_empty() {
        return Err(SpecError::EmptyName);
    }
    if !valid_server_name(&spec.name) {
        return Err(SpecError::BadName(spec.name.clone()));
    }
    if spec.timeout.is_zero() {
        return Err(SpecError::ZeroTimeout(spec.name.clone()));
    }
    if spec.max_timeout.is_some_and(|max| max < spec.timeout) {
        return Err(SpecError::MaxTimeoutBelowTimeout(spec.name.clone()));
    }
    if !seen.insert(spec.name.clone()) {
        return Err(SpecError::DuplicateName(spec.name.clone()));
    }
    match &spec.transport {
        McpTransport::Stdio { command, .. } if command.is_empty() => {
            Err(SpecError::EmptyCommand(spec.name.clone()))
        }
        McpTransport::Http { url, .. } if !is_http_url(url) => Err(SpecError::BadUrl {
            server: spec.name.clone(),
            // The message is printed and logged: never the password or
            // the query (it may carry a token).
            url: crate::spec::shown_url(url),
        }),
        _ => Ok(()),
    }
}

impl McpManager {
    fn with_parent(parent: Option<Arc<dyn ToolSource>>) -> Self {
        McpManager {
            shared: Arc::new(Shared {
                parent,
                tools: RwLock::default(),
                servers: RwLock::default(),
                shutdown: CancellationToken::new(),
            }),
            first_attempts: Arc::default(),
        }
    }

    fn empty() -> Self {
        Self::with_parent(None)
    }

    /// Waits until every server has connected or failed its first attempt
    /// (each bounded by its own timeout).
    pub async fn wait_started(&self) {
        let pending = std::mem::take(
            &mut *self
                .first_attempts
                .lock()
                .unwrap_or_else(|e| e.into_inner()),
        );
        for first in pending {
            let _ = first.await;
        }
    }

    /// A snapshot of every server, sorted by name.
    pub fn status(&self) -> Vec<McpServerStatus> {
        let servers = self
            .shared
            .servers
            .read()
            .unwrap_or_else(|e| e.into_inner());
        servers.values().map(|s| s.status.clone()).collect()
    }

    /// Waits until `server` is running (after a restart, say), up to `limit`.
    pub async fn wait_running(&self, server: &str, limit: std::time::Duration) -> bool {
        let deadline = tokio::time::Instant::now() + limit;
        loop {
            if self.shared.running_peer(server).is_ok() {
                return true;
            }
            if tokio::time::Instant::now() >= deadline {
                return false;
            }
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
    }

    /// Closes every server and stops their supervisors: rmcp closes a
    /// stdio server's stdin, waits for it to exit, then sends SIGTERM and
    /// at last SIGKILL (some seconds each), so this waits up to
    /// `CLOSE_WAIT` for all of them, side by side, before returning;
    /// whatever is left then dies with the process.
    pub async fn shutdown(&self) {
        self.shared.shutdown.cancel();
        // Supervisors mark their server stopped once the connection closed.
        let polls = CLOSE_WAIT.as_millis() / 20;
        for _ in 0..polls {
            let all_stopped = self
                .status()
                .iter()
                .all(|s| !matches!(s.phase, ServerPhase::Running | ServerPhase::Connecting));
            if all_stopped {
                return;
            }
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
    }

    fn mcp_definition(&self, name: &str) -> Option<Arc<ToolDef>> {
        let tools = self.shared.tools();
        let tool = tools.get(name)?;
        self.shared
            .running_peer(&tool.server)
            .ok()
            .map(|_| tool.def.clone())
    }
}

impl ToolSource for McpManager {
    fn definition(&self, name: &str) -> Option<Arc<ToolDef>> {
        self.mcp_definition(name)
            .or_else(|| self.shared.parent.as_ref().and_then(|p| p.definition(name)))
    }

    fn definitions(&self) -> Vec<Arc<ToolDef>> {
        let mut all: BTreeMap<String, Arc<ToolDef>> = BTreeMap::new();
        if let Some(parent) = &self.shared.parent {
            for def in parent.definitions() {
                all.insert(def.name.clone(), def);
            }
        }
        let names: Vec<String> = self.shared.tools().keys().cloned().collect();
        for name in names {
            if let Some(def) = self.mcp_definition(&name) {
                all.insert(name, def);
            }
        }
        all.into_values().collect()
    }

    fn invoke(&self, name: &str, ctx: ToolContext) -> ToolFuture {
        let found = {
            let tools = self.shared.tools();
            tools.get(name).map(|t| {
                (
                    t.server.clone(),
                    t.remote.clone(),
                    t.output.clone(),
                    t.limits,
                )
            })
        };
        let Some((server, remote, output, limits)) = found else {
            return self.miss(name, ctx);
        };
        let peer = match self.shared.running_peer(&server) {
            Ok(peer) => peer,
            Err(phase) => {
                let error = server_down(name, &server, &phase);
                return Box::pin(async move { Err(error) });
            }
        };
        let shared = self.shared.clone();
        Box::pin(async move {
            let arguments = match ctx.arguments {
                Value::Object(map) => map,
                Value::Null => serde_json::Map::new(),
                _ => {
                    return Err(ToolError::new(
                        ErrorReason::InvalidArguments,
                        "arguments must be a JSON object",
                    ));
                }
            };
            let params = CallToolRequestParams::new(remote.clone()).with_arguments(arguments);
            // A call that ends unanswered at its timeout makes the server
            // suspect: it is asked whether it still answers at all (a hung
            // one keeps its pipes open, so nothing else would notice).
            let unanswered = SuspectUnlessAnswered {
                shared: shared.clone(),
                server: server.clone(),
                started: std::time::Instant::now(),
                timeout: Some(limits.total),
                answered: false,
            };
            // The server is told to cancel a call that runs out of time
            // and one that is dropped (a stop).
            let answer = tokio::select! {
                answer = call_tool(&peer, params, limits) => answer,
                () = ctx.cancel.cancelled() => {
                    // A stop says nothing about the server's health (a
                    // long call may have been reporting progress all along).
                    unanswered.answered();
                    return Err(ToolError::new(
                        ErrorReason::Cancelled,
                        format!("the call to MCP tool {remote} was stopped; the server was told to cancel it"),
                    ));
                }
            };
            // Quiet for a whole idle timeout: the server may be hung, so it
            // is asked whether it still answers (and restarted if not). A
            // call stopped at the total limit was reporting progress: the
            // server is alive.
            if matches!(answer, Err(rmcp::ServiceError::Timeout { timeout }) if timeout == limits.idle)
            {
                shared.with_server(&server, |s| s.suspect.notify_one());
            }
            unanswered.answered();
            let result = answer.map_err(|e| {
                if matches!(
                    e,
                    rmcp::ServiceError::TransportSend(_) | rmcp::ServiceError::TransportClosed
                ) {
                    shared.with_server(&server, |s| s.suspect.notify_one());
                }
                service_error(&server, &remote, e)
            })?;
            let answer = call_result_value(&server, &remote, result, output.as_deref())?;
            if let Some(text) = answer.text {
                call_notes::set_text(text);
            }
            if let Some(warning) = answer.warning {
                tracing::warn!("{warning}");
                // On the outcome for the model, and in the status (the
                // last 20) for the person.
                call_notes::add_warning(warning.clone());
                shared.with_server(&server, |s| {
                    let warnings = &mut s.status.output_schema_warnings;
                    if warnings.len() >= 20 {
                        warnings.remove(0);
                    }
                    warnings.push(warning);
                });
            }
            Ok(answer.value)
        })
    }
}

impl McpManager {
    fn miss(&self, name: &str, ctx: ToolContext) -> ToolFuture {
        match &self.shared.parent {
            Some(parent) => {
                // Only a name the parent does not have is ours to answer: a
                // tool it has may say NotFound about what it looked up (an
                // offline device), and that must reach the model as said.
                let parent_has_it = parent.definition(name).is_some();
                let from_parent = parent.invoke(name, ctx);
                let me = self.clone();
                let name = name.to_owned();
                Box::pin(async move {
                    match from_parent.await {
                        Err(e) if e.reason == ErrorReason::NotFound && !parent_has_it => {
                            Err(me.not_found(&name))
                        }
                        other => other,
                    }
                })
            }
            None => {
                let error = self.not_found(name);
                Box::pin(async move { Err(error) })
            }
        }
    }

    fn not_found(&self, name: &str) -> ToolError {
        let known: Vec<String> = self.definitions().iter().map(|d| d.name.clone()).collect();
        not_found(name, &known)
    }
}

/// The typed not-found of a tool whose server is not running.
/// Marks a server suspect when a call to it is dropped unanswered after
/// (nearly) its total limit: the executor's backstop, when even the
/// client's own limits did not end it. Stops and answers disarm it; the
/// idle timeout is handled where the call's answer is read.
struct SuspectUnlessAnswered {
    shared: Arc<Shared>,
    server: String,
    started: std::time::Instant,
    /// The call's timeout (`None`: the executor's default applies, and
    /// nothing is concluded).
    timeout: Option<std::time::Duration>,
    answered: bool,
}

impl SuspectUnlessAnswered {
    fn answered(mut self) {
        self.answered = true;
    }
}

impl Drop for SuspectUnlessAnswered {
    fn drop(&mut self) {
        let timed_out = self
            .timeout
            .is_some_and(|limit| self.started.elapsed() >= limit.mul_f64(0.9));
        if !self.answered && timed_out {
            self.shared
                .with_server(&self.server, |s| s.suspect.notify_one());
        }
    }
}

fn server_down(name: &str, server: &str, phase: &ServerPhase) -> ToolError {
    let (detail, hint) = match phase {
        ServerPhase::GaveUp { reason } => (
            format!(
                "tool {name} is unavailable: its MCP server `{server}` crashed too often and is resting ({reason})"
            ),
            "use another tool; the server is tried again after its rest".to_owned(),
        ),
        ServerPhase::Down { reason } => (
            format!(
                "tool {name} is unavailable: its MCP server `{server}` is down ({reason}) and is being restarted"
            ),
            "try again in a little while, or use another tool".to_owned(),
        ),
        _ => (
            format!("tool {name} is unavailable: its MCP server `{server}` is not connected"),
            "try again in a little while, or use another tool".to_owned(),
        ),
    };
    ToolError::new(ErrorReason::NotFound, detail).with_hint(hint)
}
