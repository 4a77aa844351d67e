//! `GET /api/v1/device/ws`: where waiters connect (see `homeagent-device`).
//!
//! The route is outside the API-key middleware because devices prove
//! themselves inside the protocol, with the device token (which may differ
//! from the API key): hello, then bind, each within [`HANDSHAKE_TIMEOUT`].
//! A device declared with a token of its own (`[[server.devices]]`) binds
//! only with that token; the others bind with the shared device token.
//! A wrong token, an id already connected or a malformed handshake gets a
//! `refused` frame saying why (and whether retrying can help), then the
//! link closes. Without a device token and without an API key, devices are
//! off: every bind is refused.
//!
//! Once bound, the link forwards the hub's `cmd` frames to the device and
//! the device's `cmd_result` frames to the hub, pings every
//! [`PING_EVERY`], and closes when the device has sent nothing (not even a
//! pong) for [`DEAD_AFTER`], so a half-open TCP connection cannot keep
//! calls waiting. When the link ends, the device is unbound and its pending
//! commands fail at once.

use std::time::Duration;

use axum::extract::State;
use axum::extract::ws::rejection::WebSocketUpgradeRejection;
use axum::extract::ws::{Message, WebSocket, WebSocketUpgrade};
use axum::response::{IntoResponse, Response};
use homeagent_device::protocol::{PROTOCOL_VERSION, is_valid_device_id, unreadable};
use homeagent_device::{Delivery, DeviceFrame, Hello, MAX_FRAME_BYTES, RefusalCode, ServerFrame};
use tokio::time::{Instant, interval_at, timeout, timeout_at};

use crate::error::ApiError;
use crate::http::same_secret;
use crate::state::ServerState;

/// How long a device has for each handshake message.
pub const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);
/// How often the server pings a bound device.
pub const PING_EVERY: Duration = Duration::from_secs(15);
/// Silence after which a bound device's link is considered dead.
pub const DEAD_AFTER: Duration = Duration::from_secs(45);

pub async fn upgrade(
    State(state): State<ServerState>,
    ws: Result<WebSocketUpgrade, WebSocketUpgradeRejection>,
) -> Response {
    let ws = match ws {
        Ok(ws) => ws,
        // A plain GET (a browser, curl): the API's JSON, not axum's text.
        Err(rejection) => {
            return ApiError::new(
                rejection.status(),
                "websocket_expected",
                format!(
                    "{}; this route is the device bridge: `homeagent waiter` connects here \
                     over a WebSocket",
                    rejection.body_text()
                ),
            )
            .into_response();
        }
    };
    ws.max_message_size(MAX_FRAME_BYTES)
        .max_frame_size(MAX_FRAME_BYTES)
        .on_upgrade(move |socket| serve_device(state, socket))
}

async fn serve_device(state: ServerState, mut socket: WebSocket) {
    let hello = match handshake(&state, &mut socket).await {
        Ok(hello) => hello,
        Err(refusal) => {
            tracing::info!(reason = %refusal_reason(&refusal), "device refused");
            let _ = send(&mut socket, &refusal).await;
            let _ = socket.send(Message::Close(None)).await;
            return;
        }
    };
    let Some(hub) = state.devices() else {
        return;
    };
    let (link, mut outbound) = match hub.attach(&hello) {
        Ok(bound) => bound,
        Err(refusal) => {
            tracing::info!(%refusal, "device refused");
            let _ = send(&mut socket, &refusal.frame()).await;
            let _ = socket.send(Message::Close(None)).await;
            return;
        }
    };
    let bound = ServerFrame::Bound {
        device_id: hello.device_id.clone(),
    };
    if send(&mut socket, &bound).await.is_err() {
        return;
    }
    let mut ping = interval_at(Instant::now() + PING_EVERY, PING_EVERY);
    let mut last_heard = Instant::now();
    let shutdown = state.shutdown_token().clone();
    loop {
        tokio::select! {
            frame = outbound.recv() => {
                let Some(frame) = frame else { break };
                if send(&mut socket, &frame).await.is_err() {
                    break;
                }
            }
            message = socket.recv() => {
                let Some(Ok(message)) = message else { break };
                last_heard = Instant::now();
                match message {
                    Message::Text(text) => match link.deliver_text(text.as_str()) {
                        Delivery::Unexpected { frame } => {
                            tracing::warn!(device = %link.device_id(), frame, "unexpected frame from a bound device; ignored");
                        }
                        Delivery::Unreadable { req_id, failed_call, error } => {
                            tracing::warn!(device = %link.device_id(), ?req_id, failed_call, %error, "unreadable frame from a bound device");
                        }
                        Delivery::Answered { .. } | Delivery::Late { .. } => {}
                    },
                    Message::Close(_) => break,
                    // Pongs (and pings, answered by the library) only
                    // prove the link is alive.
                    _ => {}
                }
            }
            _ = ping.tick() => {
                if last_heard.elapsed() >= DEAD_AFTER {
                    tracing::warn!(device = %link.device_id(), "device silent too long; closing its link");
                    break;
                }
                let ping = timeout(DEAD_AFTER, socket.send(Message::Ping(Default::default())));
                if !matches!(ping.await, Ok(Ok(()))) {
                    break;
                }
            }
            () = shutdown.cancelled() => {
                let _ = socket.send(Message::Close(None)).await;
                break;
            }
        }
    }
    tracing::info!(device = %link.device_id(), "device link closed");
    // Dropping `link` unbinds the device and fails its pending commands.
}

/// Reads hello and bind; the refusal to send when they do not pass.
async fn handshake(state: &ServerState, socket: &mut WebSocket) -> Result<Hello, ServerFrame> {
    let protocol = |reason: String| ServerFrame::Refused {
        code: RefusalCode::Protocol,
        reason,
        retry: false,
    };
    // One deadline for the whole handshake: pings cannot keep an
    // unauthenticated link open.
    let deadline = Instant::now() + HANDSHAKE_TIMEOUT;
    let hello = match next_frame(socket, deadline).await? {
        DeviceFrame::Hello(hello) => hello,
        _ => return Err(protocol("the first message must be hello".to_owned())),
    };
    // Checked before anything repeats the id: the route is open to anyone,
    // and an id of a megabyte would go into the refusal and the log.
    if !is_valid_device_id(&hello.device_id) {
        return Err(protocol(
            "device_id must be 1 to 64 of A-Z, a-z, 0-9, '.', '_' and '-'; set the waiter's \
             device_id so"
                .to_owned(),
        ));
    }
    if hello.version != PROTOCOL_VERSION {
        return Err(protocol(format!(
            "protocol version {} is not supported (this server speaks {PROTOCOL_VERSION}); \
             update the waiter or the server so they match",
            hello.version
        )));
    }
    let token = match next_frame(socket, deadline).await? {
        DeviceFrame::Bind { token } => token,
        _ => return Err(protocol("the second message must be bind".to_owned())),
    };
    if state.devices().is_none() || !state.devices_enabled() {
        return Err(ServerFrame::Refused {
            code: RefusalCode::Disabled,
            reason: "this server accepts no devices: set HOMEAGENT_DEVICE_TOKEN (or \
                     server.device_token, or an API key), or declare devices with their own \
                     tokens in [[server.devices]], where `homeagent serve` runs"
                .to_owned(),
            retry: false,
        });
    }
    // One refusal for every wrong token, so it does not tell which ids are
    // declared.
    let id = &hello.device_id;
    let refused = || ServerFrame::Refused {
        code: RefusalCode::BadToken,
        reason: format!(
            "the token does not bind device {id:?}: a device declared in [[server.devices]] \
             binds only with its own token, any other with the server's device token \
             (HOMEAGENT_DEVICE_TOKEN or server.device_token; the API key when neither that \
             nor [[server.devices]] is set); pass it with --token or $HOMEAGENT_DEVICE_TOKEN"
        ),
        retry: false,
    };
    let expected = match state.options().device_tokens.get(id) {
        // A declared device: its own token and no other, or holding the
        // shared token (or another device's) would let a waiter pose as it.
        Some(own) => Some(own.as_str()).filter(|own| !own.is_empty()),
        None => state.device_token(),
    };
    match expected {
        Some(expected) if same_secret(&token, expected) => Ok(hello),
        _ => Err(refused()),
    }
}

async fn next_frame(socket: &mut WebSocket, deadline: Instant) -> Result<DeviceFrame, ServerFrame> {
    let refused = |reason: String| ServerFrame::Refused {
        code: RefusalCode::Protocol,
        reason,
        retry: false,
    };
    loop {
        let message = match timeout_at(deadline, socket.recv()).await {
            Err(_) => {
                // A slow or lossy link, not a mistake: the waiter may try
                // again (a refusal without retry makes it exit for good).
                return Err(ServerFrame::Refused {
                    code: RefusalCode::Protocol,
                    reason: format!(
                        "the handshake did not complete within {} s",
                        HANDSHAKE_TIMEOUT.as_secs()
                    ),
                    retry: true,
                });
            }
            Ok(None | Some(Err(_))) => {
                return Err(refused("the link closed during the handshake".to_owned()));
            }
            Ok(Some(Ok(message))) => message,
        };
        match message {
            Message::Text(text) => {
                return serde_json::from_str(text.as_str()).map_err(|err| {
                    refused(format!(
                        "unreadable handshake message: {}",
                        unreadable(&err)
                    ))
                });
            }
            Message::Ping(_) | Message::Pong(_) => {}
            _ => return Err(refused("handshake messages are JSON text".to_owned())),
        }
    }
}

/// Sends one frame; a link that cannot take it within [`DEAD_AFTER`] (a
/// half-open connection with a full buffer) counts as broken, so the loop
/// never stalls on it.
async fn send(socket: &mut WebSocket, frame: &ServerFrame) -> Result<(), axum::Error> {
    let text = serde_json::to_string(frame).map_err(axum::Error::new)?;
    timeout(DEAD_AFTER, socket.send(Message::text(text)))
        .await
        .map_err(axum::Error::new)?
}

fn refusal_reason(frame: &ServerFrame) -> &str {
    match frame {
        ServerFrame::Refused { reason, .. } => reason,
        _ => "",
    }
}
