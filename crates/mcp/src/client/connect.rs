//! Opening one connection: the transport, the `initialize` handshake within
//! the server's timeout, and the client-side handler that hears
//! `notifications/tools/list_changed`.

use std::process::Stdio;
use std::sync::Arc;

use homeagent_tools::ProcessGroup;
use rmcp::model::{ClientConfig, Implementation};
use rmcp::service::{NotificationContext, RunningService};
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use rmcp::transport::{StreamableHttpClientTransport, TokioChildProcess};
use rmcp::{ClientHandler, RoleClient, ServiceExt};
use tokio::io::{AsyncBufReadExt, AsyncReadExt};
use tokio::sync::Notify;

use crate::spec::{McpServerSpec, McpTransport, NESTING_ENV, nesting};

/// Our side of a connection: it only listens for a changed tool list.
pub(crate) struct Listener {
    pub(crate) tools_changed: Arc<Notify>,
}

impl ClientHandler for Listener {
    fn on_tool_list_changed(
        &self,
        _context: NotificationContext<RoleClient>,
    ) -> impl Future<Output = ()> + Send + '_ {
        self.tools_changed.notify_one();
        std::future::ready(())
    }

    fn get_info(&self) -> ClientConfig {
        let mut info = ClientConfig::default();
        info.client_info = Implementation::new("homeagent", env!("CARGO_PKG_VERSION"));
        info
    }
}

pub(crate) type Connection = RunningService<RoleClient, Listener>;

/// Why a connection could not be opened.
#[derive(Debug, thiserror::Error)]
pub(crate) enum ConnectError {
    #[error("could not start `{command}`{}: {source}", .cwd.as_ref().map(|dir| format!(" in {}", dir.display())).unwrap_or_default())]
    Spawn {
        command: String,
        cwd: Option<std::path::PathBuf>,
        source: std::io::Error,
    },
    #[error("its working directory {} is not a directory; fix `cwd`", .dir.display())]
    Cwd { dir: std::path::PathBuf },
    #[error("did not answer `initialize` within {0:?}")]
    InitializeTimeout(std::time::Duration),
    #[error("the MCP handshake failed: {0}")]
    Handshake(String),
}

/// The program a stdio server runs as: its pid, and its process group,
/// killed whole when this is dropped (after the connection has closed).
#[derive(Debug)]
pub(crate) struct ServerProcess {
    pub(crate) pid: Option<u32>,
    _group: ProcessGroup,
}

/// Connects and completes `initialize`; a stdio server's process comes
/// with it (keep it as long as the connection).
pub(crate) async fn connect(
    spec: &McpServerSpec,
    tools_changed: Arc<Notify>,
) -> Result<(Connection, Option<ServerProcess>), ConnectError> {
    let listener = Listener { tools_changed };
    let timeout = spec.timeout;
    match &spec.transport {
        McpTransport::Stdio {
            command,
            args,
            env,
            cwd,
        } => {
            let mut cmd = tokio::process::Command::new(command);
            if let Some(dir) = cwd {
                // Checked here: a missing directory would otherwise fail
                // the spawn as if the command were missing.
                if !dir.is_dir() {
                    return Err(ConnectError::Cwd { dir: dir.clone() });
                }
                cmd.current_dir(dir);
            }
            // A clean environment: the server must not inherit HomeAgent's
            // API keys. It gets the few names launchers need (`npx`,
            // `uvx` and `docker` find nothing without PATH and HOME), as
            // the official SDKs pass them, and what the config lists.
            // Its own process group: a launcher (`sh -c`, `npx`, `uvx`,
            // `docker run`) is often what runs, and the signals rmcp sends
            // reach only it; what it started goes with the group.
            cmd.args(args)
                .env_clear()
                .envs(inherited_environment())
                .envs(env)
                .env(NESTING_ENV, (nesting() + 1).to_string())
                .process_group(0)
                .kill_on_drop(true);
            let (transport, stderr) = TokioChildProcess::builder(cmd)
                .stderr(Stdio::piped())
                .spawn()
                .map_err(|source| ConnectError::Spawn {
                    command: command.clone(),
                    cwd: cwd.clone(),
                    source,
                })?;
            let pid = transport.id();
            // Made before the handshake: a server that fails it takes its
            // group along too.
            let process = ServerProcess {
                pid,
                _group: ProcessGroup::of(pid),
            };
            if let Some(stderr) = stderr {
                forward_stderr(spec.name.clone(), stderr);
            }
            let running = handshake(listener.serve(transport), timeout).await?;
            Ok((running, Some(process)))
        }
        McpTransport::Http { url, bearer_token } => {
            install_crypto_provider();
            let mut config = StreamableHttpClientTransportConfig::with_uri(url.as_str());
            if let Some(token) = bearer_token {
                config = config.auth_header(token.clone());
            }
            let transport = StreamableHttpClientTransport::from_config(config);
            let running = handshake(listener.serve(transport), timeout).await?;
            Ok((running, None))
        }
    }
}

async fn handshake<E: std::fmt::Display>(
    serve: impl Future<Output = Result<Connection, E>>,
    timeout: std::time::Duration,
) -> Result<Connection, ConnectError> {
    match tokio::time::timeout(timeout, serve).await {
        Err(_) => Err(ConnectError::InitializeTimeout(timeout)),
        Ok(Err(e)) => Err(ConnectError::Handshake(e.to_string())),
        Ok(Ok(running)) => Ok(running),
    }
}

/// What a stdio server gets of HomeAgent's environment: the names the
/// official MCP SDKs pass by default on POSIX. None of them holds a key.
const INHERITED_ENV: [&str; 6] = ["HOME", "LOGNAME", "PATH", "SHELL", "TERM", "USER"];

fn inherited_environment() -> impl Iterator<Item = (&'static str, std::ffi::OsString)> {
    INHERITED_ENV
        .into_iter()
        .filter_map(|name| Some((name, std::env::var_os(name)?)))
}

/// The longest stderr line logged whole; a longer one is logged in pieces.
const STDERR_LINE_BYTES: u64 = 64 * 1024;

/// The server's stderr goes to the log, line by line, so a server that
/// fails at start says why. It is read to its end whatever it holds: a
/// reader that stopped at a byte that is not UTF-8 closed the pipe, and
/// the server's next write to stderr failed (a Go server dies of SIGPIPE).
fn forward_stderr(server: String, stderr: tokio::process::ChildStderr) {
    tokio::spawn(async move {
        let mut reader = tokio::io::BufReader::new(stderr);
        let mut line = Vec::new();
        loop {
            line.clear();
            match (&mut reader)
                .take(STDERR_LINE_BYTES)
                .read_until(b'\n', &mut line)
                .await
            {
                Ok(0) | Err(_) => return,
                Ok(_) => {
                    let text = String::from_utf8_lossy(&line);
                    tracing::debug!(server = %server, "mcp server stderr: {}", text.trim_end());
                }
            }
        }
    });
}

/// The workspace's one TLS provider is ring; reqwest's own default would be
/// aws-lc-rs. Installing twice is harmless (the first one stays).
fn install_crypto_provider() {
    let _ = rustls::crypto::ring::default_provider().install_default();
}
