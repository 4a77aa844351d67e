//! Opening one connection: the transport, the `initialize` handshake within
//! the server's timeout, and the client-side handler that hears
//! `notifications/tools/list_changed`.

use std::process::Stdio;
use std::sync::Arc;

use rmcp::model::{ClientConfig, Implementation};
use rmcp::service::{NotificationContext, RunningService};
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use rmcp::transport::{StreamableHttpClientTransport, TokioChildProcess};
use rmcp::{ClientHandler, RoleClient, ServiceExt};
use tokio::io::AsyncBufReadExt;
use tokio::sync::Notify;

use crate::spec::{McpServerSpec, McpTransport};

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
    #[error("could not start `{command}`: {source}")]
    Spawn {
        command: String,
        source: std::io::Error,
    },
    #[error("did not answer `initialize` within {0:?}")]
    InitializeTimeout(std::time::Duration),
    #[error("the MCP handshake failed: {0}")]
    Handshake(String),
}

/// Connects and completes `initialize`; the returned pid is the child's
/// (stdio only).
pub(crate) async fn connect(
    spec: &McpServerSpec,
    tools_changed: Arc<Notify>,
) -> Result<(Connection, Option<u32>), ConnectError> {
    let listener = Listener { tools_changed };
    let timeout = spec.timeout;
    match &spec.transport {
        McpTransport::Stdio { command, args, env } => {
            let mut cmd = tokio::process::Command::new(command);
            // A clean environment: the server must not inherit HomeAgent's
            // API keys. It gets exactly what the config lists.
            cmd.args(args).env_clear().envs(env).kill_on_drop(true);
            let (transport, stderr) = TokioChildProcess::builder(cmd)
                .stderr(Stdio::piped())
                .spawn()
                .map_err(|source| ConnectError::Spawn {
                    command: command.clone(),
                    source,
                })?;
            let pid = transport.id();
            if let Some(stderr) = stderr {
                forward_stderr(spec.name.clone(), stderr);
            }
            let running = handshake(listener.serve(transport), timeout).await?;
            Ok((running, pid))
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

/// The server's stderr goes to the log, line by line, so a server that
/// fails at start says why.
fn forward_stderr(server: String, stderr: tokio::process::ChildStderr) {
    tokio::spawn(async move {
        let mut lines = tokio::io::BufReader::new(stderr).lines();
        while let Ok(Some(line)) = lines.next_line().await {
            tracing::debug!(server = %server, "mcp server stderr: {line}");
        }
    });
}

/// The workspace's one TLS provider is ring; reqwest's own default would be
/// aws-lc-rs. Installing twice is harmless (the first one stays).
fn install_crypto_provider() {
    let _ = rustls::crypto::ring::default_provider().install_default();
}
