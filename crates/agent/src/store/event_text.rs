//! The text of a stored tool event, written by hand.
//!
//! A batch row (schema 6) names its batch once and holds one element per
//! event: `{"start": <call id>, "tool", "args"}` or `{"end": <call id>,
//! "tool", "status", "success", "duration_ms", "error"?, "warnings"?}`,
//! then `"after_ms"` when the event came later (or earlier) than the row's
//! first. The element is rendered while the batch runs, open: the row's
//! writer (`events::insert_events`) knows the first event's time and adds
//! `after_ms` and the closing brace.
//!
//! Through serde an event took ~6.6 k instructions: every key and string
//! goes through serde_json's byte-at-a-time escaper and a generic map
//! serializer. An event's shape is fixed, so this writes its keys as
//! literals and its strings and arguments with
//! [`homeagent_core::json_text`]; only an error (rare, and a nested
//! shape) still goes through serde_json. The reader is serde
//! (`events::BatchEvent`); a test reads back every kind of event.

use std::sync::Arc;

use homeagent_core::json_text::{push_array, push_string, push_value};
use homeagent_core::{CallStatus, ToolEvent};

/// The batch an event belongs to: what a schema-6 row says once.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct BatchKey {
    /// The events' own id, shared.
    pub id: Arc<str>,
    pub size: usize,
    pub parallel: bool,
}

impl BatchKey {
    pub fn of(event: &ToolEvent) -> Self {
        let (ToolEvent::Start {
            batch_id,
            batch_size,
            parallel,
            ..
        }
        | ToolEvent::End {
            batch_id,
            batch_size,
            parallel,
            ..
        }) = event;
        BatchKey {
            id: Arc::clone(batch_id),
            size: *batch_size,
            parallel: *parallel,
        }
    }

    /// The row's members before its events, up to the first event's
    /// time: `{"batch_id":..,"batch_size":..,"parallel":..,"at_ms":`.
    pub fn push_head(&self, out: &mut String) {
        out.push_str(r#"{"batch_id":"#);
        push_string(out, &self.id);
        out.push_str(r#","batch_size":"#);
        out.push_str(itoa::Buffer::new().format(self.size));
        out.push_str(r#","parallel":"#);
        out.push_str(if self.parallel { "true" } else { "false" });
        out.push_str(r#","at_ms":"#);
    }
}

/// The element of a schema-6 batch row for `event`, open (no time, no
/// closing brace: see the module docs); `None` if serde_json failed on an
/// error (it does not, for plain data).
pub(super) fn open_element(event: &ToolEvent) -> Option<String> {
    let mut out = String::with_capacity(128);
    match event {
        ToolEvent::Start {
            call_id,
            tool,
            args,
            ..
        } => {
            out.push_str(r#"{"start":"#);
            push_string(&mut out, call_id);
            out.push_str(r#","tool":"#);
            push_string(&mut out, tool);
            out.push_str(r#","args":"#);
            push_value(&mut out, args);
        }
        ToolEvent::End {
            call_id,
            tool,
            status,
            success,
            duration_ms,
            error,
            warnings,
            ..
        } => {
            out.push_str(r#"{"end":"#);
            push_string(&mut out, call_id);
            out.push_str(r#","tool":"#);
            push_string(&mut out, tool);
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
    Some(out)
}

/// Closes an element from [`open_element`]: its time after the row's
/// first event (left out when the same), and the brace.
pub(super) fn close_element(out: &mut String, after_ms: i64) {
    if after_ms != 0 {
        out.push_str(r#","after_ms":"#);
        out.push_str(itoa::Buffer::new().format(after_ms));
    }
    out.push('}');
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
