//! The text of a stored tool event, written by hand.
//!
//! A batch row (schema 4) holds one element per event,
//! `{"event": <ToolEvent>, "at_ms": ..}`, rendered while the batch runs.
//! Through serde that took ~6.6 k instructions an event (two per call, a
//! seventh of what a call cost the agent): every key and string goes
//! through serde_json's byte-at-a-time escaper and a generic map
//! serializer. An event's shape is fixed, so this writes its keys as
//! literals and its strings and arguments with
//! [`homeagent_core::json_text`]; only an error (rare, and a nested
//! shape) still goes through serde_json.
//!
//! The text is exactly what serde writes for the same element (a test
//! holds the two side by side), so the reader, the schema and older
//! files are unchanged.

use homeagent_core::json_text::{push_array, push_string, push_value};
use homeagent_core::{CallStatus, ToolEvent};

/// The element of a batch row for `event` stamped `at_ms`; `None` if
/// serde_json failed on an error (it does not, for plain data).
pub(super) fn element(event: &ToolEvent, at_ms: i64) -> Option<String> {
    let mut out = String::with_capacity(256);
    match event {
        ToolEvent::Start {
            call_id,
            tool,
            args,
            batch_id,
            batch_size,
            parallel,
        } => {
            out.push_str(r#"{"event":{"phase":"start","call_id":"#);
            push_string(&mut out, call_id);
            out.push_str(r#","tool":"#);
            push_string(&mut out, tool);
            out.push_str(r#","args":"#);
            push_value(&mut out, args);
            batch(&mut out, batch_id, *batch_size, *parallel);
        }
        ToolEvent::End {
            call_id,
            tool,
            batch_id,
            batch_size,
            parallel,
            status,
            success,
            duration_ms,
            error,
            warnings,
        } => {
            out.push_str(r#"{"event":{"phase":"end","call_id":"#);
            push_string(&mut out, call_id);
            out.push_str(r#","tool":"#);
            push_string(&mut out, tool);
            batch(&mut out, batch_id, *batch_size, *parallel);
            out.push_str(r#","status":""#);
            out.push_str(status_name(*status));
            out.push_str(r#"","success":"#);
            out.push_str(if *success { "true" } else { "false" });
            out.push_str(r#","duration_ms":"#);
            out.push_str(itoa::Buffer::new().format(*duration_ms));
            if let Some(error) = error {
                out.push_str(r#","error":"#);
                out.push_str(&serde_json::to_string(error).ok()?);
            }
            if !warnings.is_empty() {
                out.push_str(r#","warnings":"#);
                push_array(&mut out, warnings, |out, warning| push_string(out, warning));
            }
        }
    }
    out.push_str(r#"},"at_ms":"#);
    out.push_str(itoa::Buffer::new().format(at_ms));
    out.push('}');
    Some(out)
}

/// The batch's three members, in the order `ToolEvent` declares them.
fn batch(out: &mut String, batch_id: &str, size: usize, parallel: bool) {
    out.push_str(r#","batch_id":"#);
    push_string(out, batch_id);
    out.push_str(r#","batch_size":"#);
    out.push_str(itoa::Buffer::new().format(size));
    out.push_str(r#","parallel":"#);
    out.push_str(if parallel { "true" } else { "false" });
}

/// The name serde gives `status` (`rename_all = "snake_case"`).
fn status_name(status: CallStatus) -> &'static str {
    match status {
        CallStatus::Ok => "ok",
        CallStatus::Error => "error",
        CallStatus::Denied => "denied",
        CallStatus::Cancelled => "cancelled",
        CallStatus::Timeout => "timeout",
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)] // a panic in a test is a test failure

    use homeagent_core::{ErrorReason, ToolError};
    use serde_json::json;

    use super::*;

    /// What serde writes for the same element: the format's definition.
    fn by_serde(event: &ToolEvent, at_ms: i64) -> String {
        #[derive(serde::Serialize)]
        struct Element<'a> {
            event: &'a ToolEvent,
            at_ms: i64,
        }
        serde_json::to_string(&Element { event, at_ms }).unwrap()
    }

    fn end(status: CallStatus, error: Option<ToolError>, warnings: &[&str]) -> ToolEvent {
        ToolEvent::End {
            call_id: "call_7".into(),
            tool: "demo_echo".into(),
            batch_id: "s-3-1".into(),
            batch_size: 64,
            parallel: false,
            status,
            success: status == CallStatus::Ok,
            duration_ms: 1_234,
            error,
            warnings: warnings.iter().map(|w| (*w).to_owned()).collect(),
        }
    }

    #[test]
    fn every_event_is_written_as_serde_writes_it() {
        let awkward = "quote \" back \\ tab \t nl \n bell \u{7} del \u{7f} é 雪 🎉 /";
        let mut detailed = ToolError::new(ErrorReason::InvalidArguments, awkward);
        detailed.field = Some("/tag".into());
        detailed.hint = Some("pass a \"tag\"".into());
        let events = [
            ToolEvent::Start {
                call_id: "call_0".into(),
                tool: "demo_echo".into(),
                args: json!({"tag": "done-1", "n": -3, "x": 0.5, "deep": [null, true, {"k": awkward}]}),
                batch_id: "s-1-1".into(),
                batch_size: 2,
                parallel: true,
            },
            ToolEvent::Start {
                call_id: awkward.into(),
                tool: "tool\u{1}\"".into(),
                args: json!({}),
                batch_id: "\\".into(),
                batch_size: 0,
                parallel: false,
            },
            end(CallStatus::Ok, None, &[]),
            end(CallStatus::Error, Some(ToolError::execution("boom")), &[]),
            end(CallStatus::Denied, None, &["coerced \"n\"", ""]),
            end(CallStatus::Cancelled, Some(detailed), &[awkward]),
            end(CallStatus::Timeout, None, &["one"]),
        ];
        for (i, event) in events.iter().enumerate() {
            for at_ms in [0, 1_796_171_026_607, -5, i64::MAX, i64::MIN] {
                assert_eq!(
                    element(event, at_ms).unwrap(),
                    by_serde(event, at_ms),
                    "event {i} at {at_ms}"
                );
            }
        }
    }
}
