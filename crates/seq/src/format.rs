//! Reading a sequence as its author wrote it: strict JSON with messages that
//! say how to fix the mistake.
//!
//! This is hand-written over [`serde_json::Value`] rather than derived,
//! because the messages are the point: a derived parser says "invalid type:
//! sequence, expected a map" where the author needs "`in` must be an object
//! {"key":"type"}; no inputs = {}". Every level refuses unknown fields (a
//! typo such as `paralell` must fail, never fall back to the default), and
//! every enum lists its legal values.

use std::collections::BTreeMap;
use std::time::Duration;

use serde_json::{Map, Value};

use crate::model::{
    Group, MissingPolicy, OnError, SLOT_TYPES, Sequence, SlotType, ToolStep, duration_text,
};
use crate::split::{SplitError, split_tools};

/// The default group timeout.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(30);

/// Most retries a group may ask for.
pub const MAX_RETRIES: u32 = 10;

const SEQUENCE_FIELDS: &[&str] = &["name", "description", "groups"];
const GROUP_FIELDS: &[&str] = &[
    "name",
    "description",
    "in",
    "out",
    "when",
    "parallel",
    "unsafe_serial",
    "missing",
    "timeout",
    "on_error",
    "retries",
    "tools",
];
const TOOL_FIELDS: &[&str] = &["tool", "args", "as", "fallback"];

/// Why a sequence text could not be read. `at` says where: `sequence`,
/// `group #2 "fetch"`, `group #2 "fetch" tool #1`.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum FormatError {
    #[error("not valid JSON: {detail}")]
    Json { detail: String },
    #[error("{at}: unknown field `{field}`; allowed fields: {allowed}")]
    UnknownField {
        at: String,
        field: String,
        allowed: String,
    },
    #[error("{at}: `{field}` is required")]
    Missing { at: String, field: String },
    #[error("{at}: `{field}` {message}")]
    WrongType {
        at: String,
        field: String,
        message: String,
    },
    #[error("{at}: `{field}` is `{value}`; legal values: {legal}")]
    BadEnum {
        at: String,
        field: String,
        value: String,
        legal: String,
    },
    #[error("{at}: `{field}`: {message}")]
    BadValue {
        at: String,
        field: String,
        message: String,
    },
    #[error("{at}: tools: {source}")]
    Split {
        at: String,
        #[source]
        source: SplitError,
    },
    #[error("{at} tool #{index} (byte {position}): {message}")]
    BadTool {
        at: String,
        index: usize,
        position: usize,
        message: String,
    },
    #[error("{at}: two groups are named `{name}`; group names are unique (seq_call targets them)")]
    DuplicateGroup { at: String, name: String },
}

/// Parses a sequence from its JSON text.
pub fn parse_sequence(text: &str) -> Result<Sequence, FormatError> {
    let value: Value = crate::strict_json::from_str(text).map_err(|e| FormatError::Json {
        detail: e.to_string(),
    })?;
    parse_sequence_value(&value)
}

/// Parses a sequence from a JSON value (a tool's arguments, a file).
pub fn parse_sequence_value(value: &Value) -> Result<Sequence, FormatError> {
    let at = "sequence".to_owned();
    let map = as_object(
        value,
        &at,
        "sequence",
        "must be a JSON object {\"name\":…,\"groups\":[…]}",
    )?;
    check_fields(map, SEQUENCE_FIELDS, &at)?;
    let name = required_string(map, "name", &at)?;
    if name.trim().is_empty() {
        return Err(bad_value(&at, "name", "must not be blank"));
    }
    let description = optional_string(map, "description", &at)?.unwrap_or_default();
    let groups_value = map.get("groups").ok_or_else(|| missing(&at, "groups"))?;
    let Value::Array(items) = groups_value else {
        return Err(wrong_type(
            &at,
            "groups",
            format!(
                "must be an array of group objects, got {}",
                kind(groups_value)
            ),
        ));
    };
    if items.is_empty() {
        return Err(bad_value(&at, "groups", "needs at least one group"));
    }
    let mut groups: Vec<Group> = Vec::with_capacity(items.len());
    for (i, item) in items.iter().enumerate() {
        let group = parse_group(item, i + 1)?;
        if groups.iter().any(|g| g.name == group.name) {
            return Err(FormatError::DuplicateGroup {
                at: format!("group #{}", i + 1),
                name: group.name,
            });
        }
        groups.push(group);
    }
    Ok(Sequence {
        name,
        description,
        groups,
        author: None,
    })
}

fn parse_group(value: &Value, number: usize) -> Result<Group, FormatError> {
    let mut at = format!("group #{number}");
    let map = as_object(
        value,
        &at,
        "group",
        "must be an object {\"name\":…,\"tools\":\"…\"}",
    )?;
    // The name first, so every later message can say which group.
    let name = required_string(map, "name", &at)?;
    if name.trim().is_empty() {
        return Err(bad_value(&at, "name", "must not be blank"));
    }
    // `seq_call` reads a target starting with `#` as a sequence: a group
    // so named could never be called, and its caller would run a sequence.
    if name.starts_with('#') {
        return Err(bad_value(
            &at,
            "name",
            "must not start with `#`, which marks a sequence in a seq_call target",
        ));
    }
    at = format!("group #{number} \"{name}\"");
    check_fields(map, GROUP_FIELDS, &at)?;
    let description = optional_string(map, "description", &at)?.unwrap_or_default();
    let inputs = slot_map(map, "in", &at)?;
    let outputs = slot_map(map, "out", &at)?;
    let when = optional_string(map, "when", &at)?.unwrap_or_else(|| "true".to_owned());
    let parallel = optional_bool(map, "parallel", &at)?.unwrap_or(true);
    let unsafe_serial = optional_bool(map, "unsafe_serial", &at)?.unwrap_or(false);
    let missing_policy = match optional_string(map, "missing", &at)?.as_deref() {
        None | Some("fail") => MissingPolicy::Fail,
        Some("skip") => MissingPolicy::Skip,
        Some("degrade") => MissingPolicy::Degrade,
        Some(other) => return Err(bad_enum(&at, "missing", other, MissingPolicy::LEGAL)),
    };
    let on_error = match optional_string(map, "on_error", &at)?.as_deref() {
        None | Some("abort") => OnError::Abort,
        Some("continue") => OnError::Continue,
        Some("retry") => OnError::Retry,
        Some(other) => return Err(bad_enum(&at, "on_error", other, OnError::LEGAL)),
    };
    let timeout = match optional_string(map, "timeout", &at)? {
        None => DEFAULT_TIMEOUT,
        Some(text) => match duration_text::parse_any(&text) {
            Some(d) if !d.is_zero() => d,
            Some(_) => {
                return Err(bad_value(
                    &at,
                    "timeout",
                    format!(
                        "`{text}` is zero: a group needs more than zero time to run; write e.g. \"30s\""
                    ),
                ));
            }
            None => {
                return Err(bad_value(
                    &at,
                    "timeout",
                    format!("`{text}` is not a duration; write {}", duration_text::FORMS),
                ));
            }
        },
    };
    let retries = match map.get("retries") {
        None => 0,
        Some(v) => match v.as_u64() {
            Some(n) if n <= u64::from(MAX_RETRIES) => n as u32,
            _ => {
                return Err(wrong_type(
                    &at,
                    "retries",
                    format!("must be an integer from 0 to {MAX_RETRIES}, got {v}"),
                ));
            }
        },
    };
    let tools_value = map.get("tools").ok_or_else(|| missing(&at, "tools"))?;
    let Value::String(tools_text) = tools_value else {
        return Err(wrong_type(
            &at,
            "tools",
            format!(
                "must be a string of ';'-separated JSON objects, got {}; e.g. \
                 \"{{\\\"tool\\\":\\\"demo_echo\\\",\\\"args\\\":{{}}}} ;\"",
                kind(tools_value)
            ),
        ));
    };
    let tools = parse_tools(tools_text, &at)?;
    Ok(Group {
        name,
        description,
        inputs,
        outputs,
        when,
        parallel,
        unsafe_serial,
        missing: missing_policy,
        timeout,
        on_error,
        retries,
        tools,
    })
}

/// Splits and decodes a group's `tools` string.
pub fn parse_tools(text: &str, at: &str) -> Result<Vec<ToolStep>, FormatError> {
    let pieces = split_tools(text).map_err(|source| FormatError::Split {
        at: at.to_owned(),
        source,
    })?;
    let mut steps = Vec::with_capacity(pieces.len());
    for (i, piece) in pieces.iter().enumerate() {
        let index = i + 1;
        let bad = |message: String| FormatError::BadTool {
            at: at.to_owned(),
            index,
            position: piece.position,
            message,
        };
        let value: Value = crate::strict_json::from_str(piece.text).map_err(|e| {
            bad(format!(
                "not a JSON object: {e} (text: {})",
                crate::display::cut(piece.text, 120)
            ))
        })?;
        let Value::Object(map) = value else {
            return Err(bad(format!(
                "must be a JSON object {{\"tool\":…}}, got {}",
                kind(&value)
            )));
        };
        if let Some(field) = map.keys().find(|k| !TOOL_FIELDS.contains(&k.as_str())) {
            return Err(bad(format!(
                "unknown field `{field}`; allowed fields: {}",
                TOOL_FIELDS.join(", ")
            )));
        }
        let tool = match map.get("tool") {
            Some(Value::String(s)) if !s.trim().is_empty() => s.clone(),
            Some(other) => {
                return Err(bad(format!(
                    "`tool` must be a tool name (string), got {}",
                    kind(other)
                )));
            }
            None => return Err(bad("`tool` is required (the tool's name)".to_owned())),
        };
        let args = match map.get("args") {
            None | Some(Value::Null) => Map::new(),
            Some(Value::Object(args)) => args.clone(),
            Some(other) => {
                return Err(bad(format!(
                    "`args` must be an object of arguments, got {}; no arguments = {{}}",
                    kind(other)
                )));
            }
        };
        let slot = match map.get("as") {
            None | Some(Value::Null) => None,
            Some(Value::String(s)) if !s.trim().is_empty() => Some(s.clone()),
            Some(other) => {
                return Err(bad(format!(
                    "`as` must name an out slot (string), got {other}"
                )));
            }
        };
        steps.push(ToolStep {
            tool,
            args,
            slot,
            fallback: map.get("fallback").cloned(),
        });
    }
    Ok(steps)
}

fn slot_map(
    map: &Map<String, Value>,
    field: &str,
    at: &str,
) -> Result<BTreeMap<String, SlotType>, FormatError> {
    let value = match map.get(field) {
        None | Some(Value::Null) => return Ok(BTreeMap::new()),
        Some(v) => v,
    };
    let Value::Object(entries) = value else {
        return Err(wrong_type(
            at,
            field,
            format!(
                "must be an object {{\"key\":\"type\"}}, got {}; no {} = {{}}",
                kind(value),
                if field == "in" { "inputs" } else { "outputs" }
            ),
        ));
    };
    let mut slots = BTreeMap::new();
    for (key, ty) in entries {
        if !is_key(key) {
            return Err(bad_value(
                at,
                field,
                format!("key `{key}` may use only letters, digits, `_` and `-`"),
            ));
        }
        let parsed = ty.as_str().and_then(SlotType::parse).ok_or_else(|| {
            bad_value(
                at,
                field,
                format!("`{key}` has type {ty}; types: {SLOT_TYPES}"),
            )
        })?;
        slots.insert(key.clone(), parsed);
    }
    Ok(slots)
}

/// Whether `key` is a legal `$args` key / slot name.
pub fn is_key(key: &str) -> bool {
    !key.is_empty()
        && key
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
}

fn check_fields(map: &Map<String, Value>, allowed: &[&str], at: &str) -> Result<(), FormatError> {
    match map.keys().find(|k| !allowed.contains(&k.as_str())) {
        Some(field) => Err(FormatError::UnknownField {
            at: at.to_owned(),
            field: field.clone(),
            allowed: allowed.join(", "),
        }),
        None => Ok(()),
    }
}

fn as_object<'a>(
    value: &'a Value,
    at: &str,
    field: &str,
    message: &str,
) -> Result<&'a Map<String, Value>, FormatError> {
    value
        .as_object()
        .ok_or_else(|| wrong_type(at, field, format!("{message}, got {}", kind(value))))
}

fn required_string(map: &Map<String, Value>, field: &str, at: &str) -> Result<String, FormatError> {
    optional_string(map, field, at)?.ok_or_else(|| missing(at, field))
}

fn optional_string(
    map: &Map<String, Value>,
    field: &str,
    at: &str,
) -> Result<Option<String>, FormatError> {
    match map.get(field) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => Ok(Some(s.clone())),
        Some(other) => Err(wrong_type(
            at,
            field,
            format!("should be a string, got {}", kind(other)),
        )),
    }
}

fn optional_bool(
    map: &Map<String, Value>,
    field: &str,
    at: &str,
) -> Result<Option<bool>, FormatError> {
    match map.get(field) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Bool(b)) => Ok(Some(*b)),
        Some(other) => Err(wrong_type(
            at,
            field,
            format!("should be true or false, got {}", kind(other)),
        )),
    }
}

/// How a JSON value's type is named in messages.
pub fn kind(value: &Value) -> String {
    match value {
        Value::Null => "null".to_owned(),
        Value::Bool(b) => format!("the boolean {b}"),
        Value::Number(n) => format!("the number {n}"),
        Value::String(_) => "a string".to_owned(),
        Value::Array(_) => "an array".to_owned(),
        Value::Object(_) => "an object".to_owned(),
    }
}

fn missing(at: &str, field: &str) -> FormatError {
    FormatError::Missing {
        at: at.to_owned(),
        field: field.to_owned(),
    }
}

fn wrong_type(at: &str, field: &str, message: String) -> FormatError {
    FormatError::WrongType {
        at: at.to_owned(),
        field: field.to_owned(),
        message,
    }
}

fn bad_value(at: &str, field: &str, message: impl Into<String>) -> FormatError {
    FormatError::BadValue {
        at: at.to_owned(),
        field: field.to_owned(),
        message: message.into(),
    }
}

fn bad_enum(at: &str, field: &str, value: &str, legal: &str) -> FormatError {
    FormatError::BadEnum {
        at: at.to_owned(),
        field: field.to_owned(),
        value: value.to_owned(),
        legal: legal.to_owned(),
    }
}
