//! The device bridge's wire protocol: JSON text messages over one
//! WebSocket, tagged by `"type"`. Keepalive uses WebSocket ping/pong frames,
//! not JSON messages.
//!
//! ```text
//! waiter                                  server
//!   ── hello {device_id, name, capabilities, version} ──▶
//!   ── bind {token} ───────────────────────────────────▶
//!   ◀── bound {device_id}  |  refused {code, reason, retry}
//!   ◀── cmd {req_id, argv | command, timeout_ms} ──────
//!   ◀── cancel {req_id}   (the call was stopped: kill it, no result)
//!   ── cmd_result {req_id, status, exit_code, stdout, stderr, truncated, …} ▶
//! ```
//!
//! Every message is at most [`MAX_FRAME_BYTES`] in both directions; a larger
//! one closes the link (the waiter caps a command's output well below it).

use serde::{Deserialize, Serialize};

/// The largest message either side sends or accepts, in bytes.
pub const MAX_FRAME_BYTES: usize = 1024 * 1024;

/// The protocol version a hello carries; a server refuses others.
pub const PROTOCOL_VERSION: u32 = 1;

/// The path the server accepts device links on.
pub const DEVICE_WS_PATH: &str = "/api/v1/device/ws";

/// How a device introduces itself.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Hello {
    /// Unique among connected devices; `[A-Za-z0-9._-]`, 1–64 characters.
    pub device_id: String,
    /// A human name (the host name by default).
    pub name: String,
    /// What the device offers (`cmd` today).
    #[serde(default)]
    pub capabilities: Vec<String>,
    /// [`PROTOCOL_VERSION`] of the waiter.
    pub version: u32,
}

/// Device → server.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case", deny_unknown_fields)]
pub enum DeviceFrame {
    Hello(Hello),
    Bind {
        token: String,
    },
    CmdResult {
        req_id: u64,
        status: CmdStatus,
        /// The program's exit code when it ran (`status: ok`).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        exit_code: Option<i32>,
        #[serde(default)]
        stdout: String,
        #[serde(default)]
        stderr: String,
        /// Whether stdout or stderr was cut at the waiter's output cap.
        #[serde(default)]
        truncated: bool,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        duration_ms: Option<u64>,
        /// Why it was refused or failed, for the model.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        detail: Option<String>,
        /// How to fix a refusal.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        hint: Option<String>,
    },
}

/// How a command ended on the device.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CmdStatus {
    /// The program ran; `exit_code` says how it ended (non-zero is still ok).
    Ok,
    /// The device's policy refused it (not authorized, not allowlisted,
    /// a write option without `allow_writes`, shell syntax).
    Refused,
    /// It ran past its timeout and was killed.
    Timeout,
    /// It could not be started, or the request was malformed.
    Error,
}

/// Server → device.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case", deny_unknown_fields)]
pub enum ServerFrame {
    /// The bind was accepted.
    Bound { device_id: String },
    /// The bind was refused; the server closes the link after this.
    Refused {
        code: RefusalCode,
        reason: String,
        /// Whether reconnecting later can help (a duplicate id may go
        /// away; a wrong token will not).
        retry: bool,
    },
    /// Run one command. Exactly one of `argv` and `command` is set.
    Cmd {
        req_id: u64,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        argv: Option<Vec<String>>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        command: Option<String>,
        timeout_ms: u64,
    },
    /// Stop the command `req_id` (the call was stopped or gave up
    /// waiting): the device kills its program and sends no result.
    Cancel { req_id: u64 },
}

/// Why a bind was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RefusalCode {
    /// The token does not match the server's device token.
    BadToken,
    /// A device with this id is already connected.
    DuplicateId,
    /// The hello or bind was malformed, out of order, or another version.
    Protocol,
    /// The server has no device token and no API key: devices are off.
    Disabled,
}

/// How much of a peer's unreadable frame, or of a value it sent, a message
/// repeats: serde quotes the value it could not take whole, and a frame
/// may be a mebibyte.
pub const MAX_QUOTED_BYTES: usize = 200;

/// Why a frame could not be read, short enough to log and to send back,
/// with control characters escaped: serde quotes the unknown variant or
/// field it met as sent, and a stranger's newline or escape sequence would
/// otherwise write lines of its own into the server's log.
pub fn unreadable(error: &serde_json::Error) -> String {
    let text = error.to_string();
    let cut = homeagent_core::excerpt(&text, MAX_QUOTED_BYTES);
    let mut shown = String::with_capacity(cut.len());
    for c in cut.chars() {
        if c.is_control() {
            shown.extend(c.escape_default());
        } else {
            shown.push(c);
        }
    }
    shown
}

/// The `req_id` of a frame that could not be read as a whole, if it has a
/// readable one: the request the frame was meant to answer (or ask), so
/// that it can still get its one answer. Other members are skipped, not
/// copied.
pub fn req_id_of(text: &str) -> Option<u64> {
    #[derive(Deserialize)]
    struct Addressed {
        req_id: u64,
    }
    serde_json::from_str::<Addressed>(text)
        .ok()
        .map(|addressed| addressed.req_id)
}

/// The longest device name accepted, in characters.
pub const MAX_DEVICE_NAME_CHARS: usize = 128;
/// The most capabilities a device may declare.
pub const MAX_CAPABILITIES: usize = 16;

/// Why a hello's name or capabilities cannot be passed on to agents, if
/// they cannot: both end up in `device_list` results, in front of the
/// model, so they must be short text without control characters. The hub
/// refuses such a hello, and the waiter checks its own before connecting.
pub fn hello_problem(hello: &Hello) -> Option<String> {
    let name_chars = hello.name.chars().count();
    if name_chars > MAX_DEVICE_NAME_CHARS {
        return Some(format!(
            "its name has {name_chars} characters, more than {MAX_DEVICE_NAME_CHARS} \
             (waiter.toml `name`)"
        ));
    }
    if hello.name.chars().any(char::is_control) {
        return Some("its name holds control characters (waiter.toml `name`)".to_owned());
    }
    if hello.capabilities.len() > MAX_CAPABILITIES {
        return Some(format!(
            "it declares {} capabilities, more than {MAX_CAPABILITIES}",
            hello.capabilities.len()
        ));
    }
    let word = |c: &String| {
        (1..=32).contains(&c.len())
            && c.chars()
                .all(|ch| ch.is_ascii_alphanumeric() || ch == '_' || ch == '-')
    };
    hello.capabilities.iter().find(|c| !word(c)).map(|c| {
        // Checked before it is repeated: a capability may be a megabyte.
        let shown = homeagent_core::excerpt(c, 40);
        format!("capability {shown:?} is not 1 to 32 of A-Z, a-z, 0-9, '_' and '-'")
    })
}

/// Whether `id` is a usable device id: `[A-Za-z0-9._-]`, 1–64 characters.
pub fn is_valid_device_id(id: &str) -> bool {
    (1..=64).contains(&id.len())
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    /// A frame's unknown variant or field is quoted by serde as sent: its
    /// newlines and escape sequences reach the log and the refusal
    /// escaped, never as lines or terminal commands of their own.
    #[test]
    fn why_a_frame_is_unreadable_shows_no_control_characters() {
        for frame in [
            "{\"type\":\"x\\n2025-01-01T00:00:00Z  INFO device bound\\u001b[2J\"}",
            "{\"type\":\"hello\",\"a\\nFORGED\":1}",
        ] {
            let error = serde_json::from_str::<DeviceFrame>(frame).unwrap_err();
            assert!(
                error.to_string().contains('\n'),
                "the case is real: {error}"
            );
            let shown = unreadable(&error);
            assert!(!shown.chars().any(char::is_control), "{shown:?}");
            assert!(shown.contains("\\n"), "{shown}");
        }
    }

    #[test]
    fn frames_have_the_documented_wire_shape() {
        let cmd = ServerFrame::Cmd {
            req_id: 7,
            argv: None,
            command: Some("ls -l".into()),
            timeout_ms: 5000,
        };
        assert_eq!(
            serde_json::to_string(&cmd).unwrap(),
            r#"{"type":"cmd","req_id":7,"command":"ls -l","timeout_ms":5000}"#
        );
        let result: DeviceFrame = serde_json::from_str(
            r#"{"type":"cmd_result","req_id":7,"status":"ok","exit_code":0,"stdout":"a\n","stderr":"","truncated":false}"#,
        )
        .unwrap();
        assert_eq!(
            result,
            DeviceFrame::CmdResult {
                req_id: 7,
                status: CmdStatus::Ok,
                exit_code: Some(0),
                stdout: "a\n".into(),
                stderr: String::new(),
                truncated: false,
                duration_ms: None,
                detail: None,
                hint: None,
            }
        );
        let hello: DeviceFrame = serde_json::from_str(
            r#"{"type":"hello","device_id":"nas","name":"NAS","capabilities":["cmd"],"version":1}"#,
        )
        .unwrap();
        assert!(matches!(hello, DeviceFrame::Hello(h) if h.device_id == "nas"));
    }

    #[test]
    fn unknown_fields_and_types_are_refused() {
        assert!(
            serde_json::from_str::<DeviceFrame>(r#"{"type":"bind","token":"t","x":1}"#).is_err()
        );
        assert!(serde_json::from_str::<DeviceFrame>(r#"{"type":"shell","cmd":"ls"}"#).is_err());
    }

    #[test]
    fn the_frame_limit_is_one_mebibyte() {
        // Documented in the module docs and docs/DEVICES.md; the waiter's
        // output cap (64 KiB per stream) must stay well below it.
        assert_eq!(MAX_FRAME_BYTES, 1_048_576);
    }

    #[test]
    fn device_ids() {
        for good in ["nas", "waiter-pi4", "a.b_c-1", &"x".repeat(64)] {
            assert!(is_valid_device_id(good), "{good}");
        }
        for bad in ["", "a b", "a/b", "ü", &"x".repeat(65)] {
            assert!(!is_valid_device_id(bad), "{bad}");
        }
    }
}
