//! What `transform_stream_chunk` and `transform_response` return, read
//! strictly.
//!
//! The seed's original dropped unknown keys silently, so an adapter that
//! wrote `index` instead of `stream_index` (or nested the call under
//! `function`) put every parallel call in slot 0. Here any key outside the
//! contract is an error that names it.

use homeagent_core::{StreamEvent, ToolCallFragment, Usage};
use serde::Deserialize;
use serde_json::Value;

/// One chunk (or a whole response) in the adapter contract's shape.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct ChunkOut {
    #[serde(default)]
    content: Option<String>,
    #[serde(default)]
    reasoning_content: Option<String>,
    #[serde(default)]
    done: Option<bool>,
    #[serde(default)]
    finish_reason: Option<String>,
    #[serde(default)]
    usage: Option<UsageOut>,
    #[serde(default, deserialize_with = "calls_list")]
    tool_calls: Option<Vec<ToolCallOut>>,
    /// An error the provider sent in the stream (or as the whole body),
    /// as it sent it: `{type, code, message, ...}`. The host decides from
    /// it whether trying again may help (`is_transient_report`).
    #[serde(default)]
    error: Option<Value>,
}

/// A flat tool-call fragment. `stream_index` is required: without it
/// parallel calls cannot be told apart.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct ToolCallOut {
    #[serde(default)]
    id: Option<String>,
    #[serde(default, rename = "type")]
    _kind: Option<String>,
    #[serde(default)]
    name: Option<String>,
    #[serde(default)]
    raw_arguments: Option<String>,
    stream_index: u32,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct UsageOut {
    #[serde(default)]
    prompt_tokens: Option<u64>,
    #[serde(default)]
    completion_tokens: Option<u64>,
    #[serde(default)]
    total_tokens: Option<u64>,
}

const CONTRACT: &str = "expected {content, reasoning_content, done, finish_reason, usage, \
     tool_calls: [{id, type, name, raw_arguments, stream_index}], error}";

/// Parses an adapter's JSON output. The error is a sentence for the
/// adapter's author.
pub(crate) fn parse(text: &str) -> Result<ChunkOut, String> {
    if text.len() > MAX_OUTPUT_BYTES {
        return Err(format!(
            "output is {} bytes, more than the {} MiB a chunk or a response may be",
            text.len(),
            MAX_OUTPUT_BYTES / (1024 * 1024)
        ));
    }
    // Read straight into the contract's types: a `serde_json::Value` first
    // took many times the text's size in small maps.
    serde_json::from_str(text).map_err(|e| match e.classify() {
        serde_json::error::Category::Data => format!("{e}; {CONTRACT}"),
        _ => format!("output is not JSON ({e})"),
    })
}

/// The largest output an adapter's function may return: well above any
/// chunk or whole response, far below what reading it could cost.
const MAX_OUTPUT_BYTES: usize = 16 * 1024 * 1024;

/// `tool_calls` as a list; an empty Lua table encodes as `{}`, read as no
/// calls. Each call is read with its own errors (an unknown key named).
fn calls_list<'de, D: serde::Deserializer<'de>>(
    deserializer: D,
) -> Result<Option<Vec<ToolCallOut>>, D::Error> {
    struct Calls;
    impl<'de> serde::de::Visitor<'de> for Calls {
        type Value = Option<Vec<ToolCallOut>>;

        fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
            f.write_str("a list of tool calls")
        }

        fn visit_unit<E: serde::de::Error>(self) -> Result<Self::Value, E> {
            Ok(None)
        }

        fn visit_seq<A: serde::de::SeqAccess<'de>>(
            self,
            mut seq: A,
        ) -> Result<Self::Value, A::Error> {
            let mut calls = Vec::new();
            while let Some(call) = seq.next_element()? {
                calls.push(call);
            }
            Ok(Some(calls))
        }

        fn visit_map<A: serde::de::MapAccess<'de>>(
            self,
            mut map: A,
        ) -> Result<Self::Value, A::Error> {
            match map.next_key::<String>()? {
                None => Ok(Some(Vec::new())),
                Some(key) => Err(serde::de::Error::custom(format!(
                    "tool_calls must be a list of calls, not an object (it has a key `{key}`)"
                ))),
            }
        }
    }
    deserializer.deserialize_any(Calls)
}

impl ChunkOut {
    /// The provider's error the adapter reported: its message, and
    /// whether it names a passing condition.
    pub(crate) fn reported_error(&self) -> Option<(String, bool)> {
        let error = self.error.as_ref().filter(|e| !e.is_null())?;
        let message = match error.get("message").and_then(Value::as_str) {
            Some(message) => message.to_owned(),
            None => match error {
                Value::String(text) => text.clone(),
                other => other.to_string(),
            },
        };
        Some((message, crate::error::is_transient_report(error)))
    }

    /// Whether the adapter said the response is complete.
    pub(crate) fn done(&self) -> bool {
        self.done.unwrap_or(false)
    }

    /// Appends the chunk's events to `out`, in the order reasoning, text,
    /// tool calls, usage, finish.
    pub(crate) fn into_events(self, out: &mut Vec<StreamEvent>) {
        if let Some(text) = self.reasoning_content.filter(|t| !t.is_empty()) {
            out.push(StreamEvent::ReasoningDelta { text });
        }
        if let Some(text) = self.content.filter(|t| !t.is_empty()) {
            out.push(StreamEvent::TextDelta { text });
        }
        for call in self.tool_calls.unwrap_or_default() {
            out.push(StreamEvent::ToolCall(ToolCallFragment {
                stream_index: Some(call.stream_index),
                id: call.id.filter(|s| !s.is_empty()),
                name: call.name.filter(|s| !s.is_empty()),
                raw_arguments: call.raw_arguments.unwrap_or_default(),
            }));
        }
        if let Some(usage) = self.usage {
            out.push(StreamEvent::Usage(Usage {
                prompt_tokens: usage.prompt_tokens.unwrap_or(0),
                completion_tokens: usage.completion_tokens.unwrap_or(0),
                total_tokens: usage.total_tokens.unwrap_or(0),
            }));
        }
        if let Some(reason) = self.finish_reason.filter(|r| !r.is_empty()) {
            out.push(StreamEvent::Finish { reason });
        }
    }
}
