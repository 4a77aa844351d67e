//! One task per server: connect, publish its tools, refresh them when the
//! server says they changed, and restart it with backoff when it dies;
//! when it has died too often within the window, rest a while (the
//! server is "given up on") and then start over.

use std::collections::VecDeque;
use std::sync::Arc;

use std::time::Duration;

use rmcp::model::{
    ClientRequest, CustomResult, ListToolsRequest, PaginatedRequestParams, PingRequest,
    ServerResult,
};
use rmcp::service::ServiceError;
use tokio::sync::Notify;
use tokio::time::Instant;

use super::call::CallLimits;
use super::connect::{Connection, connect};
use super::convert::{output_validator, tool_def};
use super::manager::{Collision, ExposedTool, ServerPhase, Shared};
use super::pages::all_pages;
use crate::naming::exposed_name;
use crate::spec::{McpOptions, McpServerSpec, McpTransport};

pub(crate) async fn supervise(
    shared: Arc<Shared>,
    spec: McpServerSpec,
    options: McpOptions,
    first_attempt: tokio::sync::oneshot::Sender<()>,
) {
    let mut first_attempt = Some(first_attempt);
    let mut restarts = Restarts::new(&options);
    let name = spec.name.clone();
    loop {
        set_phase(&shared, &name, ServerPhase::Connecting);
        let tools_changed = Arc::new(Notify::new());
        let reason = match connect(&spec, tools_changed.clone()).await {
            // `process` is dropped (its group killed) at the end of this
            // arm, once the connection has closed.
            Ok((connection, process)) => {
                let pid = process.as_ref().and_then(|p| p.pid);
                let refreshed = publish_tools(&shared, &spec, &connection).await;
                match refreshed {
                    Err(reason) => reason,
                    Ok(()) => {
                        shared.with_server(&name, |s| {
                            s.status.phase = ServerPhase::Running;
                            s.status.pid = pid;
                            s.peer = Some(connection.peer().clone());
                        });
                        tracing::info!(server = %name, "MCP server connected");
                        if let Some(done) = first_attempt.take() {
                            let _ = done.send(());
                        }
                        match run_until_closed(&shared, &spec, &options, connection, &tools_changed)
                            .await
                        {
                            Closed::Shutdown => {
                                set_phase(&shared, &name, ServerPhase::Stopped);
                                return;
                            }
                            Closed::Lost(reason) => reason,
                        }
                    }
                }
            }
            Err(e) => e.to_string(),
        };
        // The client's errors quote the URL it sent to, query and all.
        let reason = spec.transport.scrub(&reason);
        shared.with_server(&name, |s| {
            s.peer = None;
            s.status.pid = None;
        });
        tracing::warn!(server = %name, "MCP server down: {reason}");
        let wait = match restarts.failed(Instant::now(), &options) {
            Next::GiveUp { crashes } => {
                let reason = format!(
                    "{crashes} crashes or failed starts within {:?}; tried again in {:?}; last: {reason}",
                    options.crash_window, options.rest_after_giving_up
                );
                tracing::error!(server = %name, "giving up on MCP server for a while: {reason}");
                set_phase(&shared, &name, ServerPhase::GaveUp { reason });
                options.rest_after_giving_up
            }
            Next::Retry(wait) => {
                set_phase(&shared, &name, ServerPhase::Down { reason });
                wait
            }
        };
        // Only now, with the failure in the status: whoever waited for the
        // first attempt (`wait_started`, then `homeagent tools` or the
        // status API) reads `down` and why, never `connecting`.
        if let Some(done) = first_attempt.take() {
            let _ = done.send(());
        }
        tokio::select! {
            () = tokio::time::sleep(wait) => {}
            () = shared.shutdown.cancelled() => {
                set_phase(&shared, &name, ServerPhase::Stopped);
                return;
            }
        }
        shared.with_server(&name, |s| s.status.restarts += 1);
    }
}

/// When to start a server again after it failed: the failures within the
/// crash window, and the wait that doubles with each of them.
struct Restarts {
    failures: VecDeque<Instant>,
    backoff: Duration,
}

/// What [`Restarts::failed`] decided.
#[derive(Debug, PartialEq, Eq)]
enum Next {
    /// Start it again after this long.
    Retry(Duration),
    /// Too many failures within the window: rest, then start over as new.
    GiveUp { crashes: usize },
}

impl Restarts {
    fn new(options: &McpOptions) -> Restarts {
        Restarts {
            failures: VecDeque::new(),
            backoff: options.restart_backoff,
        }
    }

    /// Records a failure at `now` and says what to do.
    fn failed(&mut self, now: Instant, options: &McpOptions) -> Next {
        self.failures.push_back(now);
        while self
            .failures
            .front()
            .is_some_and(|t| now.duration_since(*t) > options.crash_window)
        {
            self.failures.pop_front();
        }
        // The only failure within the window: the server had run well
        // since the last ones, so it waits as after its first crash, not
        // as after every crash it ever had.
        if self.failures.len() == 1 {
            self.backoff = options.restart_backoff;
        }
        if self.failures.len() >= options.max_crashes as usize {
            let crashes = self.failures.len();
            // After the rest it starts over, as if new.
            self.failures.clear();
            self.backoff = options.restart_backoff;
            return Next::GiveUp { crashes };
        }
        let wait = self.backoff;
        self.backoff = (self.backoff * 2).min(options.max_restart_backoff);
        Next::Retry(wait)
    }
}

enum Closed {
    Shutdown,
    Lost(String),
}

async fn run_until_closed(
    shared: &Arc<Shared>,
    spec: &McpServerSpec,
    options: &McpOptions,
    connection: Connection,
    tools_changed: &Notify,
) -> Closed {
    let peer_closed = connection.cancellation_token();
    let peer = connection.peer().clone();
    let suspect = shared
        .with_server(&spec.name, |s| s.suspect.clone())
        .unwrap_or_default();
    // A dead HTTP server does not close anything on our side (the client
    // keeps retrying its event stream), so it is asked regularly instead.
    let ping_every = match spec.transport {
        McpTransport::Http { .. } => options.http_ping_interval,
        McpTransport::Stdio { .. } => Duration::MAX,
    };
    let mut next_ping = Instant::now().checked_add(ping_every);
    // A refresh that failed is tried again after a backoff (doubling up to
    // a minute): otherwise the server's new tools stay missing until its
    // next notification.
    let mut relist: Option<(Instant, Duration)> = None;
    let waiting = connection.waiting();
    tokio::pin!(waiting);
    loop {
        let ping_due = async {
            match next_ping {
                Some(at) => tokio::time::sleep_until(at).await,
                None => std::future::pending().await,
            }
        };
        let relist_due = async {
            match relist {
                Some((at, _)) => tokio::time::sleep_until(at).await,
                None => std::future::pending().await,
            }
        };
        let refresh = async |after: Option<Duration>| -> Option<(Instant, Duration)> {
            let peer = shared
                .with_server(&spec.name, |s| s.peer.clone())
                .flatten()?;
            let reason = list_and_publish(shared, spec, &peer).await.err()?;
            // The client's errors quote the URL it sent to, query and all.
            let reason = spec.transport.scrub(&reason.to_string());
            let backoff = after
                .map_or(options.restart_backoff, |last| last.saturating_mul(2))
                .min(MAX_RELIST_BACKOFF);
            tracing::warn!(
                server = %spec.name,
                "refreshing the tool list failed: {reason}; trying again in {backoff:?}"
            );
            Some((Instant::now().checked_add(backoff)?, backoff))
        };
        tokio::select! {
            ended = &mut waiting => {
                let detail = match ended {
                    Ok(reason) => format!("the connection closed ({reason:?})"),
                    Err(e) => format!("the connection task failed: {e}"),
                };
                return Closed::Lost(detail);
            }
            () = tools_changed.notified() => {
                relist = refresh(None).await;
            }
            () = relist_due => {
                let last = relist.map(|(_, backoff)| backoff);
                relist = refresh(last).await;
            }
            () = shared.shutdown.cancelled() => {
                peer_closed.cancel();
                let _ = waiting.await;
                return Closed::Shutdown;
            }
            () = suspect.notified() => {
                if let Err(reason) = ping(&peer, spec.timeout).await {
                    peer_closed.cancel();
                    let _ = waiting.await;
                    return Closed::Lost(reason);
                }
            }
            () = ping_due => {
                next_ping = Instant::now().checked_add(ping_every);
                if let Err(reason) = ping(&peer, spec.timeout).await {
                    peer_closed.cancel();
                    let _ = waiting.await;
                    return Closed::Lost(reason);
                }
            }
        }
    }
}

/// The longest wait before a failed tool-list refresh is tried again.
const MAX_RELIST_BACKOFF: Duration = Duration::from_secs(60);

/// Whether the server still answers; `Err` says why it is taken for gone.
async fn ping(
    peer: &rmcp::service::Peer<rmcp::RoleClient>,
    timeout: Duration,
) -> Result<(), String> {
    let request = ClientRequest::PingRequest(PingRequest {
        method: Default::default(),
        extensions: Default::default(),
    });
    match tokio::time::timeout(timeout, peer.send_request(request)).await {
        // An error answer is an answer: a server that refuses `ping`
        // (Method not found) is alive, and tearing it down every ping
        // interval cut the calls it was running.
        Ok(Ok(_) | Err(ServiceError::McpError(_) | ServiceError::UnexpectedResponse)) => Ok(()),
        Ok(Err(e)) => Err(format!("it stopped answering (ping failed: {e})")),
        Err(_) => Err(format!(
            "it stopped answering (no answer to ping within {timeout:?})"
        )),
    }
}

async fn publish_tools(
    shared: &Arc<Shared>,
    spec: &McpServerSpec,
    connection: &Connection,
) -> Result<(), String> {
    list_and_publish(shared, spec, connection.peer()).await
}

/// One entry of a `tools/list` page: a tool, or the name (as far as it
/// can be read) of one that could not be, and why.
type ListedTool = Result<rmcp::model::Tool, (String, String)>;

/// One page of `tools/list`, each tool read on its own: one malformed
/// tool (an `inputSchema` that is not an object, a missing one) leaves
/// that tool out, not the server. rmcp reads a page whole, and a page it
/// cannot read comes back as a custom result, which is read here tool by
/// tool.
async fn list_page(
    peer: &rmcp::service::Peer<rmcp::RoleClient>,
    cursor: Option<String>,
) -> Result<(Vec<ListedTool>, Option<String>), String> {
    let request = ClientRequest::ListToolsRequest(ListToolsRequest {
        method: Default::default(),
        params: Some(PaginatedRequestParams::default().with_cursor(cursor)),
        extensions: Default::default(),
    });
    match peer.send_request(request).await {
        Ok(ServerResult::ListToolsResult(page)) => {
            Ok((page.tools.into_iter().map(Ok).collect(), page.next_cursor))
        }
        Ok(ServerResult::CustomResult(CustomResult(page))) => read_tools_page(page),
        Ok(_) => Err("tools/list answered with a result of another kind".to_owned()),
        Err(e) => Err(format!("tools/list failed: {e}")),
    }
}

/// A `tools/list` page rmcp could not read whole, read tool by tool.
fn read_tools_page(
    mut page: serde_json::Value,
) -> Result<(Vec<ListedTool>, Option<String>), String> {
    let Some(serde_json::Value::Array(tools)) = page.get_mut("tools").map(serde_json::Value::take)
    else {
        return Err("tools/list answered without a `tools` list".to_owned());
    };
    let next_cursor = match page.get("nextCursor") {
        None | Some(serde_json::Value::Null) => None,
        Some(serde_json::Value::String(cursor)) => Some(cursor.clone()),
        Some(_) => return Err("tools/list sent a `nextCursor` that is not a string".to_owned()),
    };
    let tools = tools
        .into_iter()
        .map(|tool| {
            let name = tool
                .get("name")
                .and_then(serde_json::Value::as_str)
                .map_or_else(
                    || "(no name)".to_owned(),
                    |name| homeagent_core::excerpt(name, 64).into_owned(),
                );
            let schema_problem = match tool.get("inputSchema") {
                Some(serde_json::Value::Object(_)) => None,
                Some(_) => {
                    Some("its inputSchema is not an object (MCP requires a JSON Schema object)")
                }
                None => Some("it has no inputSchema (MCP requires one, a JSON Schema object)"),
            };
            serde_json::from_value(tool).map_err(|e| {
                let why = match schema_problem {
                    Some(problem) => problem.to_owned(),
                    None => format!(
                        "its listing is not a valid MCP tool: {}",
                        homeagent_core::excerpt(&e.to_string(), 200)
                    ),
                };
                (name, why)
            })
        })
        .collect();
    Ok((tools, next_cursor))
}

/// Lists the server's tools and replaces its entries in the shared map.
async fn list_and_publish(
    shared: &Arc<Shared>,
    spec: &McpServerSpec,
    peer: &rmcp::service::Peer<rmcp::RoleClient>,
) -> Result<(), String> {
    let listing = all_pages(|cursor| list_page(peer, cursor));
    let entries = tokio::time::timeout(spec.timeout, listing)
        .await
        .map_err(|_| format!("tools/list got no answer within {:?}", spec.timeout))??;
    let mut collisions = Vec::new();
    let mut unusable = Vec::new();
    let mut listed = Vec::with_capacity(entries.len());
    for entry in entries {
        match entry {
            Ok(tool) => listed.push(tool),
            Err((name, why)) => {
                tracing::warn!(server = %spec.name, "MCP tool `{name}` is not exposed: {why}");
                unusable.push((name, why));
            }
        }
    }
    let mut exposed_names = Vec::new();
    {
        let mut tools = shared.tools.write().unwrap_or_else(|e| e.into_inner());
        tools.retain(|_, t| t.server != spec.name);
        for tool in &listed {
            let name = match exposed_name(&spec.name, &tool.name) {
                Ok(name) => name,
                Err(e) => {
                    tracing::warn!("{e}");
                    continue;
                }
            };
            let taken_by = match tools.get(&name) {
                Some(other) => Some(format!(
                    "MCP server `{}` tool `{}`",
                    other.server, other.remote
                )),
                None => shared
                    .parent
                    .as_ref()
                    .and_then(|p| p.definition(&name))
                    .map(|_| "a built-in tool".to_owned()),
            };
            if let Some(taken_by) = taken_by {
                tracing::warn!(
                    server = %spec.name,
                    "MCP tool `{}` would be named {name}, which {taken_by} already has; it is not exposed",
                    tool.name
                );
                collisions.push(Collision {
                    name,
                    server: spec.name.clone(),
                    tool: tool.name.to_string(),
                    taken_by,
                });
                continue;
            }
            let def = match tool_def(spec, &name, tool) {
                Ok(def) => def,
                Err(why) => {
                    tracing::warn!(
                        server = %spec.name,
                        "MCP tool `{}` is not exposed: {why}",
                        tool.name
                    );
                    unusable.push((tool.name.to_string(), why));
                    continue;
                }
            };
            tools.insert(
                name.clone(),
                ExposedTool {
                    def: Arc::new(def),
                    server: spec.name.clone(),
                    remote: tool.name.to_string(),
                    output: output_validator(tool.output_schema.as_deref()).map(Arc::new),
                    limits: CallLimits {
                        idle: spec.timeout,
                        total: spec.max_call_time(),
                    },
                },
            );
            exposed_names.push(name);
        }
    }
    let unlisted = unlisted_settings(spec, &listed);
    for (setting, name) in &unlisted {
        tracing::warn!(
            server = %spec.name,
            "{setting} names `{name}`, which the server does not list; it changes nothing"
        );
    }
    shared.with_server(&spec.name, |s| {
        s.status.tools = exposed_names;
        s.status.collisions = collisions;
        s.status.unusable_tools = unusable;
        s.status.unlisted_settings = unlisted;
    });
    Ok(())
}

/// The names in `spec`'s `parallel_safe` and `serial` that no listed tool
/// has (they name the server's own tools, known only once it runs).
fn unlisted_settings(
    spec: &McpServerSpec,
    listed: &[rmcp::model::Tool],
) -> Vec<(&'static str, String)> {
    let settings = [
        ("parallel_safe", &spec.parallel_safe),
        ("serial", &spec.serial),
    ];
    settings
        .into_iter()
        .flat_map(|(setting, names)| names.iter().map(move |name| (setting, name)))
        .filter(|(_, name)| !listed.iter().any(|tool| tool.name == name.as_str()))
        .map(|(setting, name)| (setting, name.clone()))
        .collect()
}

fn set_phase(shared: &Shared, name: &str, phase: ServerPhase) {
    shared.with_server(name, |s| s.status.phase = phase);
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Failures close together double the wait up to its cap and, past
    /// `max_crashes` in the window, give up; a failure after a long good
    /// run waits as a first one does.
    #[test]
    fn the_wait_doubles_within_the_crash_window_and_starts_over_after_it() {
        let options = McpOptions::default();
        let start = Instant::now();
        let mut restarts = Restarts::new(&options);
        let second = Duration::from_secs(1);
        let mut waits = Vec::new();
        for n in 0..options.max_crashes {
            waits.push(restarts.failed(start + second * n, &options));
        }
        let first = options.restart_backoff;
        let expected: Vec<Next> = (0..options.max_crashes - 1)
            .map(|n| Next::Retry((first * 2u32.pow(n)).min(options.max_restart_backoff)))
            .chain([Next::GiveUp {
                crashes: options.max_crashes as usize,
            }])
            .collect();
        assert_eq!(waits, expected);

        // Crashes a day apart, each alone in its window: always the first wait.
        let mut restarts = Restarts::new(&options);
        let day = Duration::from_secs(86_400);
        for n in 1..10 {
            assert_eq!(
                restarts.failed(start + day * n, &options),
                Next::Retry(first),
                "crash {n}"
            );
        }
    }

    /// A page rmcp could not read whole is read tool by tool: each bad
    /// tool says what is wrong with it, the good ones and the cursor are
    /// kept, and a page with no tool list at all is the page's failure.
    #[test]
    fn a_tools_page_is_read_tool_by_tool() {
        let page = serde_json::json!({
            "tools": [
                {"name": "ok", "inputSchema": {"type": "object"}},
                {"name": "noargs"},
                {"name": "yes", "inputSchema": true},
                {"inputSchema": {}},
                {"name": "hint", "inputSchema": {}, "annotations": {"readOnlyHint": "yes"}}
            ],
            "nextCursor": "p2"
        });
        let (tools, next) = read_tools_page(page).unwrap();
        assert_eq!(next.as_deref(), Some("p2"));
        let read: Vec<Result<String, String>> = tools
            .into_iter()
            .map(|tool| {
                tool.map(|t| t.name.to_string())
                    .map_err(|(name, why)| format!("{name}: {why}"))
            })
            .collect();
        assert_eq!(read[0], Ok("ok".to_owned()));
        let problems: Vec<&String> = read[1..].iter().map(|r| r.as_ref().unwrap_err()).collect();
        assert!(
            problems[0].starts_with("noargs: it has no inputSchema"),
            "{problems:?}"
        );
        assert!(
            problems[1].starts_with("yes: its inputSchema is not an object"),
            "{problems:?}"
        );
        assert!(
            problems[2].starts_with("(no name): its listing is not a valid MCP tool"),
            "{problems:?}"
        );
        assert!(
            problems[3].starts_with("hint: its listing is not a valid MCP tool"),
            "{problems:?}"
        );

        assert!(read_tools_page(serde_json::json!({"items": []})).is_err());
        assert!(read_tools_page(serde_json::json!({"tools": [], "nextCursor": 2})).is_err());
        let (none, last) =
            read_tools_page(serde_json::json!({"tools": [], "nextCursor": null})).unwrap();
        assert!(none.is_empty() && last.is_none());
    }
}
