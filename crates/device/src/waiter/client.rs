//! The link to the server: connect, hello, bind, serve commands, keep the
//! link alive, and come back when it drops.
//!
//! - **Bind.** After `hello` and `bind {token}` the waiter waits for
//!   `bound` or `refused`. A refusal with `retry: false` (a wrong token, a
//!   server with devices off) ends [`run_waiter`] with
//!   [`WaiterError::Refused`]: retrying cannot help, and a waiter hammering a
//!   server with a bad token is a retry storm.
//! - **Reconnect.** Any other end of a link (connect failure, close, read
//!   error, a dead link, a refusal with `retry: true`) reconnects after an
//!   exponential backoff with jitter (`backoff_min` doubling to
//!   `backoff_max`, each wait 50–100 % of its step so waiters that lost the
//!   same server do not return in lockstep). A bind that lasts (at least the backoff cap) resets it.
//! - **Commands** run concurrently, each in its own task (at most
//!   `max_concurrent_cmds` at once, and at most [`MAX_WAITING_CMDS`] more
//!   waiting for a slot: the rest are answered busy at once); results go
//!   back as they finish. A `req_id` already running is not run again. When
//!   the link drops, running commands are dropped with it, which kills their
//!   children: the server has already failed those requests, and nobody is
//!   left to read the answers.
//! - **Keepalive.** A WebSocket ping every `ping_interval`; when nothing at
//!   all has been heard for `dead_after`, the link is declared dead.
//! - **Size.** Both directions are limited to
//!   [`MAX_FRAME_BYTES`](crate::protocol::MAX_FRAME_BYTES): incoming by the
//!   WebSocket configuration, outgoing by checking each result before it is
//!   sent.

use std::collections::HashMap;
use std::convert::Infallible;
use std::hash::{BuildHasher, Hasher};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures_util::{SinkExt, StreamExt};
use tokio::sync::Semaphore;
use tokio::task::JoinSet;
use tokio_tungstenite::tungstenite::{self, Message};

use super::config::Secret;
use super::link::{ConnectFailure, Socket, Target, connect};
use super::policy::{WaiterPolicy, failed, handle_cmd};
use super::tls;
use crate::protocol::{
    CmdStatus, DeviceFrame, Hello, MAX_FRAME_BYTES, RefusalCode, ServerFrame, hello_problem,
    is_valid_device_id, req_id_of, unreadable,
};

/// Commands that may wait for a slot beyond the `max_concurrent_cmds`
/// running: each holds its text (up to a frame) and a task, so a server
/// sending without end must not be able to queue without end.
pub const MAX_WAITING_CMDS: usize = 64;

/// How to reach the server and how patient to be.
#[derive(Debug, Clone)]
pub struct WaiterOptions {
    /// `ws://HOST:PORT` or `wss://HOST:PORT`; the device path
    /// ([`DEVICE_WS_PATH`](crate::protocol::DEVICE_WS_PATH)) is added when the URL has no path.
    pub server: String,
    pub token: Secret,
    pub hello: Hello,
    /// Extra trusted CA certificates (PEM) for `wss://`.
    pub ca_file: Option<PathBuf>,
    pub ping_interval: Duration,
    /// Nothing heard for this long: the link is dead.
    pub dead_after: Duration,
    /// For TCP + TLS + WebSocket handshake, and again for the bind answer.
    pub connect_timeout: Duration,
    pub backoff_min: Duration,
    pub backoff_max: Duration,
    pub max_concurrent_cmds: usize,
    /// How long a waiter refused because its id is connected already
    /// keeps trying. The other link may be this waiter's own, from before
    /// a restart, which the server closes once it has been silent (45 s);
    /// past that it is another machine with the same id, and taking the
    /// id over whenever that machine's link drops would send its commands
    /// here.
    pub duplicate_patience: Duration,
}

impl WaiterOptions {
    /// The defaults: ping every 20 s, dead after 60 s, connect within 10 s,
    /// back off 0.5 s → 30 s, 8 commands at once, a duplicate id tried
    /// for 2 min.
    pub fn new(server: impl Into<String>, token: Secret, hello: Hello) -> WaiterOptions {
        WaiterOptions {
            server: server.into(),
            token,
            hello,
            ca_file: None,
            ping_interval: Duration::from_secs(20),
            dead_after: Duration::from_secs(60),
            connect_timeout: Duration::from_secs(10),
            backoff_min: Duration::from_millis(500),
            backoff_max: Duration::from_secs(30),
            max_concurrent_cmds: 8,
            duplicate_patience: Duration::from_secs(120),
        }
    }
}

/// Why the waiter stopped. Match on the variant.
#[derive(Debug, thiserror::Error)]
pub enum WaiterError {
    /// The server refused the bind and said retrying cannot help, or
    /// kept refusing it because another link holds the device id.
    #[error("the server refused this device: {reason} ({}); {}", code_name(*code), refusal_hint(*code))]
    Refused { code: RefusalCode, reason: String },
    #[error("bad server address `{url}`: {why}")]
    BadServerUrl { url: String, why: String },
    /// The address answered the WebSocket handshake with a 4xx, which it
    /// will answer again: the URL or something in front of the server is
    /// wrong.
    #[error("{url} answered the device link with HTTP {status}; {}", handshake_hint(*status))]
    HandshakeRefused { url: String, status: u16 },
    #[error(
        "bad device id `{id}`: use 1–64 characters from A-Z, a-z, 0-9, `.`, `_` and `-` \
         (--device-id or device_id in waiter.toml)"
    )]
    BadDeviceId { id: String },
    #[error("this waiter's hello would be refused: {why}")]
    BadHello { why: String },
    #[error("cannot use the CA file {}: {why}", path.display())]
    CaFile { path: PathBuf, why: String },
    #[error("no trusted root certificates for wss://; pass --ca-file with the server's CA")]
    NoTrustedRoots,
    #[error("cannot set up TLS: {0}")]
    Tls(String),
}

fn code_name(code: RefusalCode) -> &'static str {
    match code {
        RefusalCode::BadToken => "bad_token",
        RefusalCode::DuplicateId => "duplicate_id",
        RefusalCode::Protocol => "protocol",
        RefusalCode::Disabled => "disabled",
    }
}

fn handshake_hint(status: u16) -> &'static str {
    match status {
        401 | 403 | 407 => {
            "something in front of the server (a proxy) wants its own login: let the device \
             path through to `homeagent serve` without it"
        }
        _ => {
            "check --server: `homeagent serve`'s address, with no path or its device path \
             /api/v1/device/ws"
        }
    }
}

fn refusal_hint(code: RefusalCode) -> &'static str {
    match code {
        RefusalCode::BadToken => {
            "the device token is wrong: pass the server's device token with --token or \
             HOMEAGENT_DEVICE_TOKEN (the server's server.device_token / \
             HOMEAGENT_DEVICE_TOKEN, or its API key when that is unset)"
        }
        RefusalCode::DuplicateId => {
            "another device is connected with this id: give this one its own --device-id"
        }
        RefusalCode::Protocol => {
            "the server could not use this waiter's hello or bind (its reason says why: a \
             handshake too slow, a name it refuses, another protocol version, which means \
             updating one of them)"
        }
        RefusalCode::Disabled => {
            "the server accepts no devices: set server.device_token (or an API key) there"
        }
    }
}

/// Runs the waiter until the server refuses it for good; every other end of
/// a link reconnects. Cancel it by dropping the future (which also kills
/// running commands).
pub async fn run_waiter(
    options: WaiterOptions,
    policy: Arc<WaiterPolicy>,
) -> Result<Infallible, WaiterError> {
    if !is_valid_device_id(&options.hello.device_id) {
        return Err(WaiterError::BadDeviceId {
            id: options.hello.device_id.clone(),
        });
    }
    // The server refuses such a hello for good; say so here, naming the
    // setting, rather than after connecting.
    if let Some(why) = hello_problem(&options.hello) {
        return Err(WaiterError::BadHello { why });
    }
    let target = Target::parse(&options.server)?;
    let tls = match target.secure {
        true => Some(tls::client_config(options.ca_file.as_deref())?),
        false => None,
    };
    tracing::info!(server = %target.url, device_id = %options.hello.device_id, "waiter starting");
    let mut failures: u32 = 0;
    // Since when every bind was refused as a duplicate.
    let mut duplicate_since: Option<Instant> = None;
    loop {
        let started = Instant::now();
        let ended = session(&target, tls.clone(), &options, &policy).await;
        duplicate_since = match &ended {
            End::Duplicate(_) => duplicate_since.or(Some(started)),
            _ => None,
        };
        match ended {
            End::Fatal(error) => return Err(error),
            End::Duplicate(error)
                if duplicate_since
                    .is_some_and(|since| since.elapsed() >= options.duplicate_patience) =>
            {
                return Err(error);
            }
            End::Duplicate(error) => {
                failures = failures.saturating_add(1);
                let why = format!(
                    "{error} (the other link may be this waiter's own, from before a restart)"
                );
                back_off(failures, &options, &why).await;
            }
            End::Lost { why, was_bound } => {
                failures =
                    failures_after(failures, was_bound, started.elapsed(), options.backoff_max);
                back_off(failures, &options, &why).await;
            }
        }
    }
}

/// Waits before the next link, longer after each failure in a row (the
/// first waits the least), saying why.
async fn back_off(failures: u32, options: &WaiterOptions, why: &str) {
    let delay = backoff(
        failures.saturating_sub(1),
        options.backoff_min,
        options.backoff_max,
    );
    tracing::warn!(%why, delay_ms = delay.as_millis() as u64, "no link to the server; reconnecting");
    tokio::time::sleep(delay).await;
}

/// The failure count after a session that ended: a link that bound and
/// lasted at least `backoff_max` starts it over (this loss is the first);
/// any other session adds one. (Reset by any bind, a peer that closes
/// each link right after `bound` had the waiter reconnect twice a second.)
fn failures_after(failures: u32, was_bound: bool, lasted: Duration, backoff_max: Duration) -> u32 {
    if was_bound && lasted >= backoff_max {
        1
    } else {
        failures.saturating_add(1)
    }
}

/// How a session ended.
enum End {
    Fatal(WaiterError),
    /// Refused because the id is connected already; tried again for
    /// [`WaiterOptions::duplicate_patience`].
    Duplicate(WaiterError),
    Lost {
        why: String,
        was_bound: bool,
    },
}

fn lost(why: impl Into<String>, was_bound: bool) -> End {
    End::Lost {
        why: why.into(),
        was_bound,
    }
}

/// `min · 2^failures`, capped at `max`, then 50–100 % of that.
fn backoff(failures: u32, min: Duration, max: Duration) -> Duration {
    let step = min
        .saturating_mul(2u32.saturating_pow(failures.min(20)))
        .min(max);
    step.mul_f64(0.5 + 0.5 * random_unit())
}

/// A number in [0, 1) that differs between calls and processes: the
/// standard library's randomly keyed hasher over the clock. Enough for
/// jitter, and no extra dependency.
fn random_unit() -> f64 {
    let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    hasher.write_u128(nanos);
    (hasher.finish() >> 11) as f64 / (1u64 << 53) as f64
}

/// Sends one message; a link that cannot take it within `limit` (a
/// half-open connection with full buffers) is reported broken, so the
/// loop never stalls on it and the waiter reconnects.
async fn send_within(sink: &mut Sink, message: Message, limit: Duration) -> Result<(), String> {
    match tokio::time::timeout(limit, sink.send(message)).await {
        Ok(Ok(())) => Ok(()),
        Ok(Err(e)) => Err(e.to_string()),
        Err(_) => Err(format!("the link took no data for {} s", limit.as_secs())),
    }
}

fn text(frame: &DeviceFrame) -> Message {
    // Serializing our own enum cannot fail; an empty text would be refused
    // by the server as malformed, which is the honest outcome if it ever did.
    Message::text(serde_json::to_string(frame).unwrap_or_default())
}

/// One connection, from connect to the end of the link.
async fn session(
    target: &Target,
    tls: Option<Arc<rustls::ClientConfig>>,
    options: &WaiterOptions,
    policy: &Arc<WaiterPolicy>,
) -> End {
    let socket = match tokio::time::timeout(options.connect_timeout, connect(target, tls)).await {
        Ok(Ok(socket)) => socket,
        Ok(Err(ConnectFailure::Lost(why))) => return lost(why, false),
        Ok(Err(ConnectFailure::Refused { status })) => {
            return End::Fatal(WaiterError::HandshakeRefused {
                url: target.url.clone(),
                status,
            });
        }
        Err(_) => return lost(format!("connecting to {} timed out", target.url), false),
    };
    let (mut sink, mut stream) = socket.split();
    let hello = DeviceFrame::Hello(options.hello.clone());
    let bind = DeviceFrame::Bind {
        token: options.token.expose().to_string(),
    };
    for frame in [&hello, &bind] {
        if let Err(e) = send_within(&mut sink, text(frame), options.connect_timeout).await {
            return lost(format!("sending {} failed: {e}", frame_name(frame)), false);
        }
    }

    // Wait for the answer to the bind.
    let answer = tokio::time::timeout(options.connect_timeout, async {
        loop {
            match stream.next().await {
                Some(Ok(Message::Text(body))) => return Ok(body),
                Some(Ok(Message::Close(_))) | None => {
                    return Err("the server closed the link before answering the bind".to_string());
                }
                Some(Ok(_)) => continue,
                Some(Err(e)) => return Err(format!("reading the bind answer failed: {e}")),
            }
        }
    })
    .await;
    let body = match answer {
        Ok(Ok(body)) => body,
        Ok(Err(why)) => return lost(why, false),
        Err(_) => return lost("the server did not answer the bind in time", false),
    };
    match serde_json::from_str::<ServerFrame>(&body) {
        Ok(ServerFrame::Bound { device_id }) => {
            tracing::info!(%device_id, server = %target.url, "bound: the server can send commands");
        }
        Ok(ServerFrame::Refused {
            code,
            reason,
            retry,
        }) => {
            let duplicate = code == RefusalCode::DuplicateId;
            let error = WaiterError::Refused { code, reason };
            return match (retry, duplicate) {
                (true, true) => End::Duplicate(error),
                (true, false) => lost(error.to_string(), false),
                (false, _) => End::Fatal(error),
            };
        }
        Ok(ServerFrame::Cmd { .. } | ServerFrame::Cancel { .. }) => {
            return lost("the server sent a command before `bound`", false);
        }
        Err(e) => return lost(format!("the bind answer is not a server frame: {e}"), false),
    }

    serve(&mut sink, &mut stream, options, policy).await
}

fn frame_name(frame: &DeviceFrame) -> &'static str {
    match frame {
        DeviceFrame::Hello(_) => "hello",
        DeviceFrame::Bind { .. } => "bind",
        DeviceFrame::CmdResult { .. } => "cmd_result",
    }
}

type Sink = futures_util::stream::SplitSink<Socket, Message>;
type Stream = futures_util::stream::SplitStream<Socket>;

/// The bound link: commands in, results out, pings, until the link ends.
async fn serve(
    sink: &mut Sink,
    stream: &mut Stream,
    options: &WaiterOptions,
    policy: &Arc<WaiterPolicy>,
) -> End {
    // Dropped with this function: aborting the tasks kills their children.
    let mut tasks: JoinSet<DeviceFrame> = JoinSet::new();
    let mut running: HashMap<tokio::task::Id, u64> = HashMap::new();
    let mut aborts: HashMap<u64, tokio::task::AbortHandle> = HashMap::new();
    let permits = Arc::new(Semaphore::new(options.max_concurrent_cmds.max(1)));
    let mut ping = tokio::time::interval(options.ping_interval);
    ping.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    ping.tick().await;
    let mut last_heard = Instant::now();

    loop {
        tokio::select! {
            message = stream.next() => {
                last_heard = Instant::now();
                let body = match message {
                    Some(Ok(Message::Text(body))) => body,
                    Some(Ok(Message::Close(_))) | None => return lost("the server closed the link", true),
                    Some(Ok(_)) => continue,
                    Some(Err(e)) => return lost(format!("reading from the server failed: {e}"), true),
                };
                match serde_json::from_str::<ServerFrame>(&body) {
                    Ok(ServerFrame::Cmd { req_id, argv, command, timeout_ms }) => {
                        if aborts.contains_key(&req_id) {
                            // The server waits for one answer per id; a
                            // second program would give it the wrong one.
                            tracing::warn!(req_id, "the server repeated a running command's req_id; not run");
                            continue;
                        }
                        let limit = options.max_concurrent_cmds.max(1);
                        if running.len() >= limit + MAX_WAITING_CMDS {
                            let frame = failed(req_id, CmdStatus::Error, format!(
                                "the device is busy: {limit} command{} running and {MAX_WAITING_CMDS} \
                                 waiting, the most it takes; try again when some have finished",
                                if limit == 1 { "" } else { "s" },
                            ));
                            if let Err(e) = send_within(sink, fit_in_frame(frame), options.dead_after).await {
                                return lost(format!("sending a result failed: {e}"), true);
                            }
                            continue;
                        }
                        let policy = Arc::clone(policy);
                        let permits = Arc::clone(&permits);
                        let arrived = Instant::now();
                        let handle = tasks.spawn(async move {
                            let _permit = permits.acquire_owned().await;
                            handle_cmd(&policy, req_id, argv, command, timeout_ms, arrived).await
                        });
                        running.insert(handle.id(), req_id);
                        aborts.insert(req_id, handle);
                    }
                    Ok(ServerFrame::Cancel { req_id }) => {
                        // Aborting drops the task: its child is killed
                        // (kill_on_drop); nobody waits for a result.
                        if let Some(handle) = aborts.remove(&req_id) {
                            running.remove(&handle.id());
                            handle.abort();
                            tracing::info!(req_id, "command cancelled by the server");
                        }
                    }
                    Ok(ServerFrame::Refused { code, reason, retry }) => {
                        let error = WaiterError::Refused { code, reason };
                        if retry {
                            return lost(error.to_string(), true);
                        }
                        return End::Fatal(error);
                    }
                    Ok(ServerFrame::Bound { .. }) => {
                        tracing::debug!("ignoring a second `bound`");
                    }
                    Err(e) => {
                        // Answer what can be answered: a cmd with a req_id
                        // but a bad shape still gets its one result.
                        let req_id = req_id_of(&body);
                        let error = unreadable(&e);
                        tracing::warn!(%error, ?req_id, "unreadable frame from the server");
                        if let Some(req_id) = req_id {
                            let frame = failed(req_id, CmdStatus::Error, format!("malformed cmd frame: {error}"));
                            if let Err(e) = send_within(sink, fit_in_frame(frame), options.dead_after).await {
                                return lost(format!("sending a result failed: {e}"), true);
                            }
                        }
                    }
                }
            }
            Some(joined) = tasks.join_next_with_id(), if !tasks.is_empty() => {
                let frame = match joined {
                    Ok((id, frame)) => {
                        if let Some(req_id) = running.remove(&id) {
                            aborts.remove(&req_id);
                        }
                        frame
                    }
                    Err(error) => {
                        let Some(req_id) = running.remove(&error.id()) else { continue };
                        aborts.remove(&req_id);
                        failed(req_id, CmdStatus::Error, format!("the command's task failed: {error}"))
                    }
                };
                if let Err(e) = send_within(sink, fit_in_frame(frame), options.dead_after).await {
                    return lost(format!("sending a result failed: {e}"), true);
                }
            }
            _ = ping.tick() => {
                if last_heard.elapsed() >= options.dead_after {
                    return lost(
                        format!("nothing heard from the server for {} s", last_heard.elapsed().as_secs()),
                        true,
                    );
                }
                if let Err(e) = send_within(sink, Message::Ping(tungstenite::Bytes::new()), options.dead_after).await {
                    return lost(format!("sending a ping failed: {e}"), true);
                }
            }
        }
    }
}

/// The result as a text message, or, when it would exceed the frame limit
/// (a cap configured near the maximum and output that escapes badly), an
/// error result saying so.
fn fit_in_frame(frame: DeviceFrame) -> Message {
    let message = text(&frame);
    let size = message.len();
    if size <= MAX_FRAME_BYTES {
        return message;
    }
    let req_id = match &frame {
        DeviceFrame::CmdResult { req_id, .. } => *req_id,
        _ => 0,
    };
    text(&failed(
        req_id,
        CmdStatus::Error,
        format!(
            "the result is {size} bytes, more than one frame ({MAX_FRAME_BYTES}); ask for less \
             output, or the device's owner lowers output_cap_bytes"
        ),
    ))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    #[test]
    fn backoff_doubles_to_the_cap_with_jitter() {
        let (min, max) = (Duration::from_millis(500), Duration::from_secs(30));
        for (failures, step_ms) in [
            (0, 500),
            (1, 1000),
            (2, 2000),
            (5, 16_000),
            (6, 30_000),
            (40, 30_000),
        ] {
            let d = backoff(failures, min, max).as_millis() as u64;
            assert!(
                d >= step_ms / 2 && d <= step_ms,
                "{failures}: {d} not in [{}, {step_ms}]",
                step_ms / 2
            );
        }
    }

    /// A link that bound and stayed up starts the backoff over; one that
    /// bound and dropped at once (a peer that closes every link after
    /// `bound`) does not, or the waiter would reconnect twice a second for
    /// ever.
    #[test]
    fn only_a_link_that_lasted_starts_the_backoff_over() {
        let max = Duration::from_secs(30);
        assert_eq!(failures_after(5, true, Duration::from_secs(31), max), 1);
        assert_eq!(failures_after(5, true, Duration::from_millis(200), max), 6);
        assert_eq!(failures_after(5, false, Duration::from_secs(300), max), 6);
        assert_eq!(
            failures_after(u32::MAX, false, Duration::ZERO, max),
            u32::MAX
        );
    }

    #[test]
    fn a_bad_token_refusal_names_the_token() {
        let error = WaiterError::Refused {
            code: RefusalCode::BadToken,
            reason: "wrong token".into(),
        };
        let text = error.to_string();
        assert!(
            text.contains("bad_token") && text.contains("HOMEAGENT_DEVICE_TOKEN"),
            "{text}"
        );
    }
}
