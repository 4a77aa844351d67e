//! The parsed sequence: what is stored on disk and what the engine runs.
//!
//! The author writes a group's `tools` as a string (see [`crate::split`]);
//! the stored tree holds them as a real array with every default filled in,
//! so a stored file is never re-split and its meaning cannot change when a
//! default does. Loading a stored file still refuses unknown fields.

use std::collections::BTreeMap;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

/// A named, reusable procedure: groups run one after another.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Sequence {
    pub name: String,
    #[serde(default)]
    pub description: String,
    pub groups: Vec<Group>,
    /// The agent whose model wrote it (`seq_create`); `None` for a person's
    /// (`homeagent seq`, the HTTP API). Never read from what is written:
    /// the authoring format has no such field. A sequence runs only the
    /// tools its author may use, and only its author replaces or deletes
    /// it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub author: Option<String>,
}

/// A set of tool calls that run together (concurrently when allowed) and
/// meet at a barrier before the next group starts.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Group {
    /// Unique within the sequence: `seq_call` targets a group by it.
    pub name: String,
    #[serde(default)]
    pub description: String,
    /// Inputs the group reads (`$args.K`), key → type.
    #[serde(rename = "in", default)]
    pub inputs: BTreeMap<String, SlotType>,
    /// Slots the group's calls write (`as`), key → type.
    #[serde(rename = "out", default)]
    pub outputs: BTreeMap<String, SlotType>,
    /// A condition over the group's args; false skips the group.
    pub when: String,
    pub parallel: bool,
    /// The author accepts that a tool that is not parallel-safe makes this
    /// group serial.
    pub unsafe_serial: bool,
    pub missing: MissingPolicy,
    #[serde(with = "duration_text")]
    pub timeout: Duration,
    pub on_error: OnError,
    pub retries: u32,
    pub tools: Vec<ToolStep>,
}

/// One call in a group.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ToolStep {
    pub tool: String,
    #[serde(default)]
    pub args: Map<String, Value>,
    /// The `out` slot the result is written to.
    #[serde(rename = "as", default, skip_serializing_if = "Option::is_none")]
    pub slot: Option<String>,
    /// The slot's value when the tool is missing and the group degrades.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fallback: Option<Value>,
}

/// What happens when a group's tool does not exist at run time.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum MissingPolicy {
    /// The call fails ("tool X does not exist") and `on_error` applies.
    Fail,
    /// The call is not made; no slot; the tool is listed as missing.
    Skip,
    /// The call is not made; its slot gets the step's `fallback`.
    Degrade,
}

/// What happens when a call fails.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum OnError {
    /// The sequence stops; the run is a failure.
    Abort,
    /// The failure is recorded and the sequence goes on.
    Continue,
    /// Failed calls are retried `retries` times with backoff, then abort.
    Retry,
}

impl MissingPolicy {
    pub const LEGAL: &'static str = "fail / skip / degrade";

    /// The word the format uses.
    pub fn as_str(self) -> &'static str {
        match self {
            MissingPolicy::Fail => "fail",
            MissingPolicy::Skip => "skip",
            MissingPolicy::Degrade => "degrade",
        }
    }
}

impl OnError {
    pub const LEGAL: &'static str = "abort / continue / retry";
}

/// A declared slot type: `string`, `integer`, `number`, `boolean`,
/// `object`, `array` or `array<T>`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct SlotType(String);

/// The legal type names, for messages.
pub const SLOT_TYPES: &str = "string, integer, number, boolean, object, array, array<T>";

impl SlotType {
    /// Parses a type name; `None` when it is not one of [`SLOT_TYPES`].
    pub fn parse(text: &str) -> Option<SlotType> {
        let text = text.trim();
        // Peeled one `array<…>` at a time in a loop: the text comes from
        // the model or the network, and recursing once per level let a
        // deep enough one overflow the stack.
        let mut inner = text;
        while let Some(element) = element_type(inner) {
            inner = element;
        }
        let ok = matches!(
            inner,
            "string" | "integer" | "number" | "boolean" | "object" | "array"
        );
        ok.then(|| SlotType(text.to_owned()))
    }

    /// Whether `value` is of this type. Lenient where models are: a
    /// string that reads as the integer, number or boolean asked for
    /// passes, read as the kernel's argument coercion reads it
    /// (`homeagent_core::lenient`), and
    /// null passes any type (a degraded slot without a fallback holds it).
    pub fn accepts(&self, value: &Value) -> bool {
        // `array<array<T>>` peeled a level per element, in a loop.
        let mut kind = self.0.as_str();
        let mut values = vec![value];
        while let Some(element) = element_type(kind) {
            let mut items = Vec::new();
            for value in values {
                match value {
                    Value::Array(list) => items.extend(list.iter()),
                    Value::Null => {}
                    _ => return false,
                }
            }
            kind = element;
            values = items;
        }
        values.into_iter().all(|value| scalar_accepts(kind, value))
    }

    /// Array slots collect one value per writer, in declaration order.
    pub fn is_array(&self) -> bool {
        self.0.starts_with("array")
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

/// The `T` of `array<T>` (trimmed), or `None` for any other type.
fn element_type(kind: &str) -> Option<&str> {
    kind.strip_prefix("array<")
        .and_then(|rest| rest.strip_suffix('>'))
        .map(str::trim)
}

/// [`SlotType::accepts`] for a type without `array<…>`.
fn scalar_accepts(kind: &str, value: &Value) -> bool {
    use homeagent_core::lenient;
    match (kind, value) {
        (_, Value::Null) => true,
        ("string", v) => v.is_string(),
        // As JSON Schema counts them: 3.0 and 1e19 are integers (what the
        // tool's own schema takes; only turning one into an integer, which
        // the argument coercion does, stops at 2^53).
        ("integer", Value::Number(n)) => lenient::is_whole(n),
        ("integer", Value::String(s)) => lenient::integer(s).is_some(),
        ("number", Value::String(s)) => lenient::number(s).is_some(),
        ("number", v) => v.is_number(),
        ("boolean", Value::String(s)) => lenient::boolean(s).is_some(),
        ("boolean", v) => v.is_boolean(),
        ("object", v) => v.is_object(),
        ("array", v) => v.is_array(),
        _ => false,
    }
}

impl TryFrom<String> for SlotType {
    type Error = String;
    fn try_from(text: String) -> Result<Self, Self::Error> {
        SlotType::parse(&text).ok_or_else(|| format!("unknown type `{text}`; types: {SLOT_TYPES}"))
    }
}

impl From<SlotType> for String {
    fn from(t: SlotType) -> String {
        t.0
    }
}

impl Sequence {
    pub fn group(&self, name: &str) -> Option<&Group> {
        self.groups.iter().find(|g| g.name == name)
    }

    /// The sequence as its author writes it: the stored form, with each
    /// group's `tools` as the `;`-terminated string of step objects the
    /// format takes (it takes no array), so what `seq show` prints can be
    /// edited and given back to `seq create`.
    pub fn to_author_value(&self) -> Value {
        let mut value = serde_json::to_value(self).unwrap_or(Value::Null);
        // Who wrote it is the store's record, not part of what one writes.
        if let Some(map) = value.as_object_mut() {
            map.remove("author");
        }
        let groups = value.get_mut("groups").and_then(Value::as_array_mut);
        for (group, written) in groups.into_iter().flatten().zip(&self.groups) {
            let steps: Vec<String> = written
                .tools
                .iter()
                .map(|step| format!("{} ;", serde_json::to_string(step).unwrap_or_default()))
                .collect();
            group["tools"] = Value::String(steps.join(" "));
        }
        value
    }

    /// The sequences this one calls with `seq_call`/`seq_when_call`
    /// `#Name`, without the `#`.
    pub fn called_sequences(&self) -> Vec<String> {
        let mut names: Vec<String> = self
            .groups
            .iter()
            .flat_map(|g| &g.tools)
            .filter_map(ToolStep::sequence_target)
            .map(str::to_owned)
            .collect();
        names.sort();
        names.dedup();
        names
    }
}

impl ToolStep {
    /// Whether this step calls into a sequence (`seq_call`, `seq_when_call`).
    pub fn is_seq_call(&self) -> bool {
        self.tool == crate::tools::SEQ_CALL || self.tool == crate::tools::SEQ_WHEN_CALL
    }

    /// The `target` of a `seq_call`/`seq_when_call` step.
    pub fn target(&self) -> Option<&str> {
        if !self.is_seq_call() {
            return None;
        }
        self.args.get("target").and_then(Value::as_str)
    }

    /// `Name` when the step targets `#Name`.
    pub fn sequence_target(&self) -> Option<&str> {
        self.target().and_then(|t| t.strip_prefix('#'))
    }
}

/// Durations as written by people: `500ms`, `30s`, `2m`, `1h`.
pub mod duration_text {
    use std::time::Duration;

    use serde::{Deserialize, Deserializer, Serializer};

    pub const FORMS: &str = "a number followed by ms, s, m or h (e.g. \"500ms\", \"30s\", \"2m\")";

    /// A duration greater than zero.
    pub fn parse(text: &str) -> Option<Duration> {
        parse_any(text).filter(|d| !d.is_zero())
    }

    /// Any duration, zero included (for saying "zero" rather than "not a
    /// duration").
    pub fn parse_any(text: &str) -> Option<Duration> {
        let text = text.trim();
        let split = text.find(|c: char| !c.is_ascii_digit())?;
        let (number, unit) = text.split_at(split);
        let n: u64 = number.parse().ok()?;
        let d = match unit {
            "ms" => Duration::from_millis(n),
            "s" => Duration::from_secs(n),
            "m" => Duration::from_secs(n.checked_mul(60)?),
            "h" => Duration::from_secs(n.checked_mul(3600)?),
            _ => return None,
        };
        Some(d)
    }

    pub fn format(d: &Duration) -> String {
        let ms = d.as_millis();
        if !ms.is_multiple_of(1000) {
            format!("{ms}ms")
        } else {
            format!("{}s", ms / 1000)
        }
    }

    pub fn serialize<S: Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&format(d))
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
        let text = String::deserialize(d)?;
        parse(&text).ok_or_else(|| {
            serde::de::Error::custom(format!("bad duration `{text}`: expected {FORMS}"))
        })
    }
}
