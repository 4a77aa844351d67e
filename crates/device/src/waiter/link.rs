//! The link's transport: where to connect (a `ws://` or `wss://` URL
//! parsed once) and how (TCP, our own TLS stream for `wss://`, then the
//! WebSocket handshake with the frame limit in both directions).

use std::sync::Arc;

use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpStream;
use tokio_tungstenite::tungstenite::http::Uri;
use tokio_tungstenite::tungstenite::protocol::WebSocketConfig;

use super::client::WaiterError;
use crate::protocol::{DEVICE_WS_PATH, MAX_FRAME_BYTES};

/// Where to connect, parsed once.
pub(super) struct Target {
    pub(super) url: String,
    pub(super) host: String,
    pub(super) port: u16,
    pub(super) secure: bool,
}

impl Target {
    pub(super) fn parse(server: &str) -> Result<Target, WaiterError> {
        let bad = |why: &str| WaiterError::BadServerUrl {
            url: server.to_string(),
            why: why.to_string(),
        };
        let uri: Uri = server
            .parse()
            .map_err(|_| bad("not a URL; write ws://HOST:PORT or wss://HOST:PORT"))?;
        let secure = match uri.scheme_str() {
            Some("ws") => false,
            Some("wss") => true,
            Some("http" | "https") => {
                return Err(bad("use ws:// (or wss://) instead of http(s)://"));
            }
            _ => return Err(bad("write ws://HOST:PORT or wss://HOST:PORT")),
        };
        let host = uri
            .host()
            .ok_or_else(|| bad("no host; write ws://HOST:PORT"))?;
        let port = uri.port_u16().unwrap_or(if secure { 443 } else { 80 });
        let path = match uri.path_and_query().map(|p| p.as_str()) {
            None | Some("" | "/") => DEVICE_WS_PATH,
            Some(path) => path,
        };
        let authority = uri.authority().map_or(host, |a| a.as_str());
        Ok(Target {
            url: format!("{}://{authority}{path}", if secure { "wss" } else { "ws" }),
            // `[::1]` in a URL, `::1` for the socket.
            host: host
                .trim_start_matches('[')
                .trim_end_matches(']')
                .to_string(),
            port,
            secure,
        })
    }
}

/// Any byte stream the WebSocket can run over (plain TCP or TLS).
pub(super) trait Io: AsyncRead + AsyncWrite + Unpin + Send {}
impl<T: AsyncRead + AsyncWrite + Unpin + Send> Io for T {}

pub(super) type Socket = tokio_tungstenite::WebSocketStream<Box<dyn Io>>;

/// Why a link could not be opened.
pub(super) enum ConnectFailure {
    /// The WebSocket handshake was answered with an HTTP status that
    /// retrying will not change: a 4xx other than 408 and 429 (a wrong
    /// path, a proxy wanting its own login).
    Refused { status: u16 },
    /// Anything that may pass: no connection, TLS, a 5xx, a timeout.
    Lost(String),
}

impl From<String> for ConnectFailure {
    fn from(why: String) -> Self {
        ConnectFailure::Lost(why)
    }
}

pub(super) async fn connect(
    target: &Target,
    tls: Option<Arc<rustls::ClientConfig>>,
) -> Result<Socket, ConnectFailure> {
    let tcp = TcpStream::connect((target.host.as_str(), target.port))
        .await
        .map_err(|e| format!("cannot connect to {}:{}: {e}", target.host, target.port))?;
    let _ = tcp.set_nodelay(true);
    let stream: Box<dyn Io> = match tls {
        None => Box::new(tcp),
        Some(config) => {
            let name = rustls::pki_types::ServerName::try_from(target.host.clone())
                .map_err(|e| format!("`{}` is not a TLS server name: {e}", target.host))?;
            let tls = tokio_rustls::TlsConnector::from(config)
                .connect(name, tcp)
                .await
                .map_err(|e| format!("TLS with {} failed: {e}", target.host))?;
            Box::new(tls)
        }
    };
    let config = WebSocketConfig::default()
        .max_message_size(Some(MAX_FRAME_BYTES))
        .max_frame_size(Some(MAX_FRAME_BYTES));
    let (socket, _response) =
        tokio_tungstenite::client_async_with_config(target.url.as_str(), stream, Some(config))
            .await
            .map_err(|e| match e {
                tokio_tungstenite::tungstenite::Error::Http(response)
                    if response.status().is_client_error()
                        && !matches!(response.status().as_u16(), 408 | 429) =>
                {
                    ConnectFailure::Refused {
                        status: response.status().as_u16(),
                    }
                }
                e => ConnectFailure::Lost(format!(
                    "WebSocket handshake with {} failed: {e}",
                    target.url
                )),
            })?;
    Ok(socket)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    #[test]
    fn server_urls() {
        let t = Target::parse("ws://127.0.0.1:8080").unwrap();
        assert_eq!(
            (t.url.as_str(), t.host.as_str(), t.port, t.secure),
            (
                "ws://127.0.0.1:8080/api/v1/device/ws",
                "127.0.0.1",
                8080,
                false
            )
        );
        let t = Target::parse("wss://nas.home/").unwrap();
        assert_eq!(
            (t.url.as_str(), t.port, t.secure),
            ("wss://nas.home/api/v1/device/ws", 443, true)
        );
        let t = Target::parse("ws://[::1]:9/proxy/device").unwrap();
        assert_eq!(
            (t.url.as_str(), t.host.as_str()),
            ("ws://[::1]:9/proxy/device", "::1")
        );
        for bad in ["http://x:1", "x:1", "", "ws://"] {
            assert!(
                matches!(Target::parse(bad), Err(WaiterError::BadServerUrl { .. })),
                "{bad}"
            );
        }
    }
}
