//! The four provider wires the mock server speaks.
//!
//! Each wire module does three things for its protocol: parse a request body
//! into provider-neutral [`Message`]s (so the script sees the conversation),
//! encode a scripted turn's [`StreamEvent`]s as a streamed body (a list of
//! chunks, sent one at a time) or as a whole response, and write an error
//! body in the provider's own error shape.
//!
//! The encoders are written from the providers' documented shapes, not from
//! HomeAgent's codecs, so a codec bug cannot be mirrored by the mock.

use homeagent_core::{Message, StreamEvent, Usage};
use serde_json::Value;

pub(crate) mod anthropic;
pub(crate) mod gemini;
pub(crate) mod members;
pub(crate) mod ollama;
pub(crate) mod openai;

/// The protocols the server speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Wire {
    OpenAi,
    Anthropic,
    Gemini,
    Ollama,
}

impl Wire {
    pub(crate) fn name(self) -> &'static str {
        match self {
            Wire::OpenAi => "openai",
            Wire::Anthropic => "anthropic",
            Wire::Gemini => "gemini",
            Wire::Ollama => "ollama",
        }
    }
}

/// What the server needs from a request body.
///
/// The script reads only the current turn (the last user message and what
/// follows it) and the size of the whole prompt, so that is all a request
/// keeps: a blast re-sends every session's whole history with each
/// request, and building every earlier message only to drop it was most
/// of the mock's work (`wire::openai::parse_body` does not build them).
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct ParsedRequest {
    pub model: String,
    /// From the last user message on (all of them when there is none).
    pub messages: Vec<Message>,
    /// [`crate::script::prompt_bytes`] of the whole history.
    pub prompt_bytes: usize,
    pub stream: bool,
    /// OpenAI's `stream_options.include_usage`.
    pub include_usage: bool,
}

impl ParsedRequest {
    /// A request of `messages`, the whole history, kept from its last
    /// user message on.
    pub fn new(
        model: String,
        mut messages: Vec<Message>,
        stream: bool,
        include_usage: bool,
    ) -> Self {
        let prompt_bytes = crate::script::prompt_bytes(&messages);
        messages.drain(..current_turn_start(&messages));
        ParsedRequest {
            model,
            messages,
            prompt_bytes,
            stream,
            include_usage,
        }
    }
}

/// Where the current turn starts: the last user message, or 0.
pub(crate) fn current_turn_start(messages: &[Message]) -> usize {
    messages
        .iter()
        .rposition(|m| matches!(m, Message::User { .. }))
        .unwrap_or(0)
}

/// Per-response values the encoders stamp into their bodies.
#[derive(Debug, Clone)]
pub(crate) struct Ctx {
    pub model: String,
    /// A response id unique to this response (`chatcmpl-...`, `msg_...`).
    pub response_id: String,
    /// Unix seconds.
    pub created: u64,
    pub include_usage: bool,
}

/// One tool call of a turn, with its argument text joined.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct WholeCall {
    pub id: Option<String>,
    pub name: String,
    pub raw: String,
}

/// A turn folded into whole parts, for wires that send calls whole and for
/// non-streamed responses.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct Collected {
    pub text: String,
    pub calls: Vec<WholeCall>,
    pub finish: String,
    pub usage: Usage,
}

/// Joins a turn's fragments per `stream_index` (the script always sends
/// one), in index order.
pub(crate) fn collect(events: &[StreamEvent]) -> Collected {
    let mut out = Collected::default();
    let mut by_index: std::collections::BTreeMap<u32, WholeCall> = Default::default();
    for event in events {
        match event {
            StreamEvent::TextDelta { text } => out.text.push_str(text),
            StreamEvent::ToolCall(fragment) => {
                let index = fragment.stream_index.unwrap_or(0);
                let call = by_index.entry(index).or_insert_with(|| WholeCall {
                    id: None,
                    name: String::new(),
                    raw: String::new(),
                });
                if let Some(id) = &fragment.id {
                    call.id = Some(id.clone());
                }
                if let Some(name) = &fragment.name {
                    call.name = name.clone();
                }
                call.raw.push_str(&fragment.raw_arguments);
            }
            StreamEvent::Finish { reason } => out.finish = reason.clone(),
            StreamEvent::Usage(usage) => out.usage = *usage,
            StreamEvent::ReasoningDelta { .. } | StreamEvent::ReasoningMetadata { .. } => {}
        }
    }
    out.calls = by_index.into_values().collect();
    out
}

/// Arguments for wires that carry them as a JSON object. Text that is not
/// an object (a `!truncate` or `!badjson` call) is sent as a JSON string
/// instead: there is no object to send, and a string keeps the broken text
/// visible to the client, which must refuse to run it.
pub(crate) fn arguments_value(raw: &str) -> Value {
    match serde_json::from_str::<Value>(raw) {
        Ok(value @ Value::Object(_)) => value,
        _ => Value::String(raw.to_owned()),
    }
}

/// Text of a content field that may be a string, null, or a list of parts
/// (`{"type": "text", "text": ...}`).
pub(crate) fn text_of(value: Option<&Value>) -> String {
    match value {
        Some(Value::String(s)) => s.clone(),
        Some(Value::Array(parts)) => parts
            .iter()
            .filter_map(|p| match p {
                Value::String(s) => Some(s.as_str()),
                _ => p.get("text").and_then(Value::as_str),
            })
            .collect(),
        _ => String::new(),
    }
}

/// Whether a tool result's text is the `{"error": ...}` object that wires
/// without an error flag (OpenAI, Ollama) use for failures.
pub(crate) fn is_error_payload(content: &str) -> bool {
    // Most results are plain text: only an object can be the payload.
    if !content.trim_start().starts_with('{') {
        return false;
    }
    matches!(
        serde_json::from_str::<Value>(content),
        Ok(Value::Object(map)) if map.len() == 1 && map.contains_key("error")
    )
}

/// The string field `key` of `value`, or "".
pub(crate) fn str_field<'a>(value: &'a Value, key: &str) -> &'a str {
    value.get(key).and_then(Value::as_str).unwrap_or("")
}

/// One SSE event: `event:` line when named, one `data:` line, blank line.
pub(crate) fn sse<T: serde::Serialize + ?Sized>(
    event: Option<&str>,
    data: &T,
) -> axum::body::Bytes {
    let mut out = Vec::with_capacity(256);
    if let Some(event) = event {
        out.extend_from_slice(b"event: ");
        out.extend_from_slice(event.as_bytes());
        out.push(b'\n');
    }
    out.extend_from_slice(b"data: ");
    // Plain data (strings, numbers, JSON values) always serializes; were it
    // ever not to, the event goes out with an empty `data:` line.
    let _ = serde_json::to_writer(&mut out, data);
    out.extend_from_slice(b"\n\n");
    axum::body::Bytes::from(out)
}

#[cfg(test)]
mod tests {
    use homeagent_core::ToolCallFragment;

    use super::*;

    #[test]
    fn only_an_object_with_one_error_member_is_an_error_payload() {
        for (content, expected) in [
            (r#"{"error":{"reason":"denied"}}"#, true),
            (" \n\t{\"error\": \"x\"}", true),
            (r#"{"error":1,"more":2}"#, false),
            (r#"[{"error":1}]"#, false),
            ("error: denied", false),
            ("", false),
        ] {
            assert_eq!(is_error_payload(content), expected, "{content:?}");
        }
    }

    #[test]
    fn collect_joins_interleaved_fragments_in_index_order() {
        let frag = |i: u32, id: Option<&str>, name: Option<&str>, raw: &str| {
            StreamEvent::ToolCall(ToolCallFragment {
                stream_index: Some(i),
                id: id.map(str::to_owned),
                name: name.map(str::to_owned),
                raw_arguments: raw.to_owned(),
            })
        };
        let events = vec![
            frag(1, Some("b"), Some("two"), "{\"x\""),
            frag(0, Some("a"), Some("one"), "{}"),
            frag(1, None, None, ":1}"),
            StreamEvent::Finish {
                reason: "tool_calls".into(),
            },
        ];
        let collected = collect(&events);
        assert_eq!(
            collected.calls,
            vec![
                WholeCall {
                    id: Some("a".into()),
                    name: "one".into(),
                    raw: "{}".into()
                },
                WholeCall {
                    id: Some("b".into()),
                    name: "two".into(),
                    raw: "{\"x\":1}".into()
                },
            ]
        );
        assert_eq!(collected.finish, "tool_calls");
    }

    #[test]
    fn broken_arguments_travel_as_a_string() {
        assert_eq!(arguments_value("{\"a\":1}"), serde_json::json!({"a": 1}));
        assert_eq!(arguments_value("{\"a\":"), Value::String("{\"a\":".into()));
    }
}
