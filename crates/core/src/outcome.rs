//! The result contract: every call ends in exactly one [`ToolOutcome`], whose
//! `success` is honest and whose text is what the model reads.

use crate::message::ToolMessage;
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// Why a call failed. Callers match on this, never on message text.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ErrorReason {
    /// A required argument is missing.
    Required,
    /// An argument has the wrong JSON type.
    Type,
    /// The arguments are not a JSON object, or break the schema in another way.
    InvalidArguments,
    /// The arguments were cut off by the model's output token limit.
    Truncated,
    /// No tool of that name is available.
    NotFound,
    /// The agent may not use this tool (or this device).
    Unauthorized,
    /// A hook or a person refused the call.
    Denied,
    Timeout,
    Cancelled,
    /// The handler panicked.
    Panic,
    /// The handler ran and reported an error.
    Execution,
}

impl ErrorReason {
    pub fn as_str(self) -> &'static str {
        match self {
            ErrorReason::Required => "required",
            ErrorReason::Type => "type",
            ErrorReason::InvalidArguments => "invalid_arguments",
            ErrorReason::Truncated => "truncated",
            ErrorReason::NotFound => "not_found",
            ErrorReason::Unauthorized => "unauthorized",
            ErrorReason::Denied => "denied",
            ErrorReason::Timeout => "timeout",
            ErrorReason::Cancelled => "cancelled",
            ErrorReason::Panic => "panic",
            ErrorReason::Execution => "execution",
        }
    }
}

impl std::fmt::Display for ErrorReason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A structured tool failure: what went wrong, on which field, and what the
/// model should do about it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, thiserror::Error)]
#[error("{reason}: {detail}")]
pub struct ToolError {
    pub reason: ErrorReason,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub field: Option<String>,
    pub detail: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hint: Option<String>,
}

impl ToolError {
    pub fn new(reason: ErrorReason, detail: impl Into<String>) -> Self {
        ToolError {
            reason,
            field: None,
            detail: detail.into(),
            hint: None,
        }
    }

    /// The handler ran and failed; the most common error a tool returns.
    pub fn execution(detail: impl Into<String>) -> Self {
        Self::new(ErrorReason::Execution, detail)
    }

    pub fn with_field(mut self, field: impl Into<String>) -> Self {
        self.field = Some(field.into());
        self
    }

    pub fn with_hint(mut self, hint: impl Into<String>) -> Self {
        self.hint = Some(hint.into());
        self
    }

    /// The text the model reads for this failure:
    /// `tool T failed (field F): reason — detail`, then the hint on its own line.
    pub fn render(&self, tool: &str) -> String {
        let mut text = format!("tool {tool} failed");
        if let Some(field) = &self.field {
            text.push_str(&format!(" (field {field})"));
        }
        text.push_str(&format!(": {} — {}", self.reason, self.detail));
        if let Some(hint) = &self.hint {
            text.push_str("\nhint: ");
            text.push_str(hint);
        }
        text
    }
}

/// How a call ended, as events and the dashboard report it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CallStatus {
    Ok,
    Error,
    Denied,
    Cancelled,
    Timeout,
}

/// The one result of one call.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolOutcome {
    pub call_id: String,
    pub tool: String,
    /// True only when the handler returned a value that is not an error shape.
    pub success: bool,
    /// The structured value; kept whole even when `text` is capped.
    pub value: Value,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<ToolError>,
    /// What the model reads: rendered from `value` or `error` (or the
    /// tool's own rendering, [`crate::call_notes::set_text`]); the executor
    /// appends the `warnings` after capping it.
    pub text: String,
    /// Problems that did not fail the call: an unenforced schema, a hook
    /// that misbehaved, a result that breaks its declared output schema
    /// ([`crate::call_notes::add_warning`]).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub warnings: Vec<String>,
}

impl ToolOutcome {
    /// The tool message the model reads for this outcome.
    pub fn to_message(&self) -> ToolMessage {
        ToolMessage {
            tool_call_id: self.call_id.clone(),
            name: self.tool.clone(),
            content: self.text.clone(),
            success: self.success,
        }
    }

    /// [`ToolOutcome::to_message`], taking the outcome's strings.
    pub fn into_message(self) -> ToolMessage {
        ToolMessage {
            tool_call_id: self.call_id,
            name: self.tool,
            content: self.text,
            success: self.success,
        }
    }

    /// The outcome of a handler's return value, with honest success.
    pub fn from_value(call_id: impl Into<String>, tool: impl Into<String>, value: Value) -> Self {
        let tool = tool.into();
        let error = error_in_value(&value);
        let text = match &error {
            Some(err) => err.render(&tool),
            None => render_value(&value),
        };
        ToolOutcome {
            call_id: call_id.into(),
            success: error.is_none(),
            tool,
            value,
            error,
            text,
            warnings: Vec::new(),
        }
    }

    /// A failed outcome; `value` holds the error as JSON so that after-hooks
    /// and stores see the same structure the model was told about.
    pub fn failure(call_id: impl Into<String>, tool: impl Into<String>, error: ToolError) -> Self {
        let tool = tool.into();
        ToolOutcome {
            call_id: call_id.into(),
            text: error.render(&tool),
            value: serde_json::to_value(&error).unwrap_or(Value::Null),
            success: false,
            tool,
            error: Some(error),
            warnings: Vec::new(),
        }
    }

    /// The status reported in events.
    pub fn status(&self) -> CallStatus {
        match &self.error {
            None if self.success => CallStatus::Ok,
            None => CallStatus::Error,
            Some(e) => match e.reason {
                ErrorReason::Denied | ErrorReason::Unauthorized => CallStatus::Denied,
                ErrorReason::Cancelled => CallStatus::Cancelled,
                ErrorReason::Timeout => CallStatus::Timeout,
                _ => CallStatus::Error,
            },
        }
    }

    /// Replaces the structured value (an after-hook did) and re-renders the
    /// text and success from it, so text and value never disagree. A
    /// failure reworded in a shape that names no kind (`{"error":
    /// "redacted"}`) keeps the kind it had: a timeout stays a timeout.
    pub fn replace_value(&mut self, value: Value) {
        let warnings = std::mem::take(&mut self.warnings);
        let earlier = self.error.take();
        *self = ToolOutcome::from_value(
            std::mem::take(&mut self.call_id),
            std::mem::take(&mut self.tool),
            value,
        );
        if let (Some(earlier), Some(error)) = (earlier, &mut self.error)
            && serialized_tool_error(&self.value).is_none()
        {
            error.reason = earlier.reason;
            self.text = error.render(&self.tool);
        }
        self.warnings = warnings;
    }
}

/// Recognises a value that reports a failure.
///
/// Error shapes: a serialised [`ToolError`] (exactly its keys),
/// `{"error": non-empty string}`,
/// `{"error": non-empty object}`, `{"isError": true}`, and `error: true`,
/// a number other than 0 or a non-empty list. Everything else is success,
/// including strings that mention "error", `{"error": null}` and non-zero
/// exit codes (a command that ran and exited 1 is a successful call).
pub fn error_in_value(value: &Value) -> Option<ToolError> {
    let Value::Object(map) = value else {
        return None;
    };
    if let Some(err) = serialized_tool_error(value) {
        return Some(err);
    }
    if map.get("isError") == Some(&Value::Bool(true)) {
        return Some(ToolError::execution(
            detail_of(map).unwrap_or_else(|| "the tool reported isError: true".into()),
        ));
    }
    match map.get("error") {
        Some(Value::String(s)) if !s.trim().is_empty() => Some(ToolError::execution(s.trim())),
        Some(obj @ Value::Object(inner)) if !inner.is_empty() => {
            let detail = inner
                .get("message")
                .and_then(Value::as_str)
                .map(str::trim)
                .filter(|message| !message.is_empty())
                .map_or_else(|| compact_json(obj), str::to_owned);
            Some(ToolError::execution(detail))
        }
        // Legacy plugins say it other ways too; each kind's own "none"
        // (`false`, `0`, `[]`, `{}`) is no error.
        Some(Value::Bool(true)) => Some(ToolError::execution(
            detail_of_other_keys(map).unwrap_or_else(|| "the tool reported error: true".into()),
        )),
        Some(number @ Value::Number(n)) if n.as_f64() != Some(0.0) => Some(ToolError::execution(
            format!("the tool reported error {number}"),
        )),
        Some(list @ Value::Array(items)) if !items.is_empty() => {
            let texts: Vec<&str> = items.iter().filter_map(Value::as_str).collect();
            Some(ToolError::execution(if texts.len() == items.len() {
                texts.join("\n")
            } else {
                compact_json(list)
            }))
        }
        _ => None,
    }
}

/// `value` when it is a serialised [`ToolError`]. Only a value with both
/// keys, and no key a ToolError lacks, is one (a sensor's `{"reason",
/// "detail", "temperature"}` is data); checking the keys first keeps
/// large successful values from being cloned.
fn serialized_tool_error(value: &Value) -> Option<ToolError> {
    let Value::Object(map) = value else {
        return None;
    };
    if map.contains_key("reason")
        && map.contains_key("detail")
        && map
            .keys()
            .all(|k| matches!(k.as_str(), "reason" | "detail" | "field" | "hint"))
    {
        return serde_json::from_value::<ToolError>(value.clone()).ok();
    }
    None
}

/// A message beside an `error: true`: the value's `message`, `msg` or
/// `detail` string.
fn detail_of_other_keys(map: &serde_json::Map<String, Value>) -> Option<String> {
    ["message", "msg", "detail"]
        .iter()
        .find_map(|key| map.get(*key).and_then(Value::as_str))
        .filter(|text| !text.trim().is_empty())
        .map(|text| text.trim().to_owned())
}

/// The most useful text a failing value carries: its `error` message, or its
/// `content` text (MCP results put the failure there).
fn detail_of(map: &serde_json::Map<String, Value>) -> Option<String> {
    if let Some(Value::String(s)) = map.get("error")
        && !s.trim().is_empty()
    {
        return Some(s.clone());
    }
    match map.get("content") {
        Some(Value::String(s)) if !s.is_empty() => Some(s.clone()),
        Some(Value::Array(items)) => {
            let texts: Vec<&str> = items
                .iter()
                .filter_map(|item| item.get("text").and_then(Value::as_str))
                .collect();
            (!texts.is_empty()).then(|| texts.join("\n"))
        }
        _ => None,
    }
}

/// The text the model reads for a successful value: strings verbatim,
/// structures as compact JSON, null as nothing. Never Rust `Debug` output.
pub fn render_value(value: &Value) -> String {
    match value {
        Value::Null => String::new(),
        Value::String(s) => s.clone(),
        other => compact_json(other),
    }
}

fn compact_json(value: &Value) -> String {
    // Serialising a `Value` cannot fail: its keys are strings and it holds no
    // non-finite floats.
    serde_json::to_string(value).unwrap_or_default()
}

/// Appends an outcome's warnings to the text the model reads, one
/// `warning:` line each after a blank line, so the model sees what the
/// outcome records (an `outputSchema` violation, a hook that misbehaved).
pub fn append_warnings(text: &mut String, warnings: &[String]) {
    for (i, warning) in warnings.iter().enumerate() {
        match (i, text.is_empty()) {
            (0, false) => text.push_str("\n\n"),
            (0, true) => {}
            _ => text.push('\n'),
        }
        text.push_str("warning: ");
        text.push_str(warning);
    }
}

/// Caps the text sent to the model, keeping the full value elsewhere. The
/// marker says how much there was, so the model knows it saw a part.
pub fn cap_text(text: &str, limit: usize) -> std::borrow::Cow<'_, str> {
    if text.len() <= limit {
        return std::borrow::Cow::Borrowed(text);
    }
    let cut = text.floor_char_boundary(limit);
    std::borrow::Cow::Owned(format!(
        "{}\n[output truncated: showing the first {cut} of {} bytes]",
        &text[..cut],
        text.len()
    ))
}
