//! Reading Anthropic responses: the SSE event stream and the whole message.
//!
//! Both produce the same events: a content block's `index` becomes the
//! `stream_index` of a `tool_use` block's fragments, so interleaved blocks
//! stay apart, and the assembler orders the calls by it.

use homeagent_core::{FinishReason, StreamEvent, ToolCallFragment, Usage};
use serde_json::{Value, json};

use super::{PROTOCOL, wire};
use crate::codec::{Flow, Frame, StreamDecoder, frame_json, is_empty_object, typed_frame};
use crate::error::{CodecError, is_transient_report};

/// A `tool_use` block that has started and not yet stopped.
#[derive(Debug)]
struct OpenToolBlock {
    index: u32,
    /// Some `input_json_delta` carried argument text.
    saw_arguments: bool,
    /// A non-empty `input` given in `content_block_start` (some proxies send
    /// the whole input there instead of as deltas).
    start_input: Option<Value>,
}

/// Decodes one streamed Messages response.
#[derive(Debug, Default)]
pub(crate) struct Decoder {
    skipped: u64,
    /// Few blocks are open at once: a vector beats a map here.
    open_tools: Vec<OpenToolBlock>,
    /// `tool_use` blocks that stopped with no input at all. Their `{}` waits
    /// for the stop reason: a message the token limit ended may have cut
    /// them before their input, and then they must stay blank (the
    /// assembler marks them truncated) instead of running with nothing.
    stopped_without_input: Vec<u32>,
}

impl StreamDecoder for Decoder {
    fn decode(&mut self, frame: &Frame, out: &mut Vec<StreamEvent>) -> Result<Flow, CodecError> {
        if let Some(event) = typed_frame::<wire::Event>(frame.data.trim()) {
            let kind = event.kind.or(frame.event.as_deref()).unwrap_or("");
            // An error event is rare: the `Value` path words it.
            if kind != "error" {
                return Ok(self.decode_typed(kind, event, out));
            }
        }
        self.decode_value(frame, out)
    }

    fn skipped_frames(&self) -> u64 {
        self.skipped
    }
}

impl Decoder {
    /// The `Value` path: error events, and every lenient rule.
    fn decode_value(
        &mut self,
        frame: &Frame,
        out: &mut Vec<StreamEvent>,
    ) -> Result<Flow, CodecError> {
        let Some(event) = frame_json(frame, &mut self.skipped) else {
            return Ok(Flow::Continue);
        };
        // Every payload names its own type; the SSE `event:` line is the
        // fallback for servers that leave it out of the JSON.
        let kind = event
            .get("type")
            .and_then(Value::as_str)
            .or(frame.event.as_deref())
            .unwrap_or("");
        match kind {
            "message_start" => {
                if let Some(usage) = event.pointer("/message/usage").and_then(usage_of) {
                    out.push(StreamEvent::Usage(usage));
                }
            }
            "content_block_start" => {
                let index = block_index(&event);
                if let Some(block) = event.get("content_block") {
                    self.block_start(index, block, out);
                }
            }
            "content_block_delta" => {
                let index = block_index(&event);
                if let Some(delta) = event.get("delta") {
                    self.block_delta(index, delta, out);
                }
            }
            "content_block_stop" => self.block_stop(block_index(&event), out),
            "message_delta" => {
                let reason = event.pointer("/delta/stop_reason").and_then(Value::as_str);
                if let Some(reason) = reason {
                    self.settle_empty_inputs(Some(reason), out);
                    out.push(StreamEvent::Finish {
                        reason: reason.to_owned(),
                    });
                }
                if let Some(usage) = event.get("usage").and_then(usage_of) {
                    out.push(StreamEvent::Usage(usage));
                }
            }
            "message_stop" => {
                self.settle_empty_inputs(None, out);
                return Ok(Flow::Done);
            }
            "error" => return Err(reported(&event)),
            // `ping` and event types added after this was written.
            _ => {}
        }
        Ok(Flow::Continue)
    }

    /// The fast path: an event that fits [`wire::Event`]. Same events, in
    /// the same order, as the `Value` path gives for it.
    fn decode_typed(&mut self, kind: &str, event: wire::Event, out: &mut Vec<StreamEvent>) -> Flow {
        let index = event.block_index();
        match kind {
            "message_start" => {
                if let Some(usage) = event.message.and_then(|m| m.usage).and_then(|u| u.usage()) {
                    out.push(StreamEvent::Usage(usage));
                }
            }
            "content_block_start" => {
                if let Some(block) = event.content_block {
                    self.typed_block_start(index, block, out);
                }
            }
            "content_block_delta" => {
                if let Some(delta) = event.delta {
                    self.typed_block_delta(index, delta, out);
                }
            }
            "content_block_stop" => self.block_stop(index, out),
            "message_delta" => {
                let reason = event.delta.and_then(|d| d.stop_reason);
                if let Some(reason) = reason {
                    self.settle_empty_inputs(Some(&reason), out);
                    out.push(StreamEvent::Finish { reason });
                }
                if let Some(usage) = event.usage.and_then(|u| u.usage()) {
                    out.push(StreamEvent::Usage(usage));
                }
            }
            "message_stop" => {
                self.settle_empty_inputs(None, out);
                return Flow::Done;
            }
            _ => {}
        }
        Flow::Continue
    }

    fn typed_block_start(
        &mut self,
        index: Option<u32>,
        block: wire::Block,
        out: &mut Vec<StreamEvent>,
    ) {
        match block.kind {
            Some("text") => push_text_owned(block.text, out),
            Some("thinking") => {
                push_reasoning_owned(block.thinking, out);
                push_signature_str(block.signature.as_deref(), out);
            }
            Some("redacted_thinking") => push_redacted_str(block.data.as_deref(), out),
            Some("tool_use") => {
                // Rare (see `block_start`): only a non-empty object is kept,
                // as a `Value`, so it is written out exactly as before.
                let start_input = block
                    .input
                    .filter(|raw| raw.get().starts_with('{') && !is_empty_object(raw))
                    .and_then(|raw| serde_json::from_str::<Value>(raw.get()).ok());
                self.open_tool(index, block.id, block.name, start_input, out);
            }
            _ => {}
        }
    }

    fn typed_block_delta(
        &mut self,
        index: Option<u32>,
        delta: wire::Delta,
        out: &mut Vec<StreamEvent>,
    ) {
        match delta.kind {
            Some("text_delta") => push_text_owned(delta.text, out),
            Some("thinking_delta") => push_reasoning_owned(delta.thinking, out),
            Some("signature_delta") => push_signature_str(delta.signature.as_deref(), out),
            Some("input_json_delta") => {
                self.input_piece(index, delta.partial_json.unwrap_or_default(), out);
            }
            _ => {}
        }
    }

    /// A `tool_use` block starts: its opening fragment, and its record.
    fn open_tool(
        &mut self,
        index: Option<u32>,
        id: Option<String>,
        name: Option<String>,
        start_input: Option<Value>,
        out: &mut Vec<StreamEvent>,
    ) {
        out.push(StreamEvent::ToolCall(ToolCallFragment {
            stream_index: index,
            id: id.filter(|s| !s.is_empty()),
            name: name.filter(|s| !s.is_empty()),
            raw_arguments: String::new(),
        }));
        if let Some(index) = index {
            self.open_tools.push(OpenToolBlock {
                index,
                saw_arguments: false,
                start_input,
            });
        }
    }

    /// One `input_json_delta` piece of a `tool_use` block's arguments.
    fn input_piece(&mut self, index: Option<u32>, piece: String, out: &mut Vec<StreamEvent>) {
        if piece.is_empty() {
            return;
        }
        if let Some(open) = self.open_tools.iter_mut().find(|b| Some(b.index) == index) {
            open.saw_arguments = true;
        }
        out.push(StreamEvent::ToolCall(ToolCallFragment {
            stream_index: index,
            id: None,
            name: None,
            raw_arguments: piece,
        }));
    }

    fn block_start(&mut self, index: Option<u32>, block: &Value, out: &mut Vec<StreamEvent>) {
        match block.get("type").and_then(Value::as_str) {
            Some("text") => push_text(block.get("text"), out),
            Some("thinking") => {
                push_reasoning(block.get("thinking"), out);
                push_signature(block.get("signature"), out);
            }
            Some("redacted_thinking") => push_redacted(block, out),
            Some("tool_use") => {
                // The `input: {}` sent here is a placeholder: the real input
                // follows as `input_json_delta` text. It is only used if no
                // delta ever comes (see `block_stop`).
                let start_input = block
                    .get("input")
                    .filter(|v| v.as_object().is_some_and(|m| !m.is_empty()))
                    .cloned();
                let id = string_field(block, "id");
                let name = string_field(block, "name");
                self.open_tool(index, id, name, start_input, out);
            }
            _ => {}
        }
    }

    fn block_delta(&mut self, index: Option<u32>, delta: &Value, out: &mut Vec<StreamEvent>) {
        match delta.get("type").and_then(Value::as_str) {
            Some("text_delta") => push_text(delta.get("text"), out),
            Some("thinking_delta") => push_reasoning(delta.get("thinking"), out),
            Some("signature_delta") => push_signature(delta.get("signature"), out),
            Some("input_json_delta") => {
                let piece = delta
                    .get("partial_json")
                    .and_then(Value::as_str)
                    .unwrap_or("");
                self.input_piece(index, piece.to_owned(), out);
            }
            _ => {}
        }
    }

    /// A `tool_use` block that ends without argument text had an empty (or
    /// start-supplied) input: say so explicitly, so the assembler sees `{}`
    /// rather than blank text, which it reports as lost arguments. An empty
    /// one waits for the stop reason ([`Decoder::settle_empty_inputs`]). A
    /// block cut off before its stop keeps its blank text, and stays suspect.
    fn block_stop(&mut self, index: Option<u32>, out: &mut Vec<StreamEvent>) {
        let Some(position) = self.open_tools.iter().position(|b| Some(b.index) == index) else {
            return;
        };
        let open = self.open_tools.swap_remove(position);
        if open.saw_arguments {
            return;
        }
        let Some(input) = &open.start_input else {
            self.stopped_without_input.push(open.index);
            return;
        };
        out.push(StreamEvent::ToolCall(ToolCallFragment {
            stream_index: Some(open.index),
            id: None,
            name: None,
            raw_arguments: input.to_string(),
        }));
    }

    /// Gives the blocks that stopped without input their `{}`, unless the
    /// message's output was cut (`max_tokens`, a full context window): then
    /// their input was cut, and they stay blank. Called with the stop
    /// reason when it comes (not with a `message_delta` that carries only
    /// usage), and with `None` at `message_stop` when none came: the
    /// blocks are then taken as complete.
    fn settle_empty_inputs(&mut self, reason: Option<&str>, out: &mut Vec<StreamEvent>) {
        let cut = reason.is_some_and(output_cut);
        for index in self.stopped_without_input.drain(..) {
            if !cut {
                out.push(StreamEvent::ToolCall(ToolCallFragment {
                    stream_index: Some(index),
                    id: None,
                    name: None,
                    raw_arguments: "{}".to_owned(),
                }));
            }
        }
    }
}

/// The events of a whole (non-streamed) Messages response.
pub(super) fn decode_message(body: &[u8]) -> Result<Vec<StreamEvent>, CodecError> {
    let message: Value =
        serde_json::from_slice(body).map_err(|e| CodecError::MalformedResponse {
            protocol: PROTOCOL,
            detail: format!("the body is not JSON: {e}"),
        })?;
    if message.get("type").and_then(Value::as_str) == Some("error") {
        return Err(reported(&message));
    }
    let Some(blocks) = message.get("content").and_then(Value::as_array) else {
        return Err(CodecError::MalformedResponse {
            protocol: PROTOCOL,
            detail: "the message has no `content` array".into(),
        });
    };
    let stop_reason = message.get("stop_reason").and_then(Value::as_str);
    // The stream's rule: an empty input on a cut message is a cut input.
    let cut = stop_reason.is_some_and(output_cut);
    let mut out = Vec::with_capacity(blocks.len() + 2);
    if let Some(usage) = message.get("usage").and_then(usage_of) {
        out.push(StreamEvent::Usage(usage));
    }
    for (index, block) in blocks.iter().enumerate() {
        match block.get("type").and_then(Value::as_str) {
            Some("text") => push_text(block.get("text"), &mut out),
            Some("thinking") => {
                push_reasoning(block.get("thinking"), &mut out);
                push_signature(block.get("signature"), &mut out);
            }
            Some("redacted_thinking") => push_redacted(block, &mut out),
            Some("tool_use") => {
                // Only an object is a usable input. Anything else is handed
                // to the assembler as it came, so that it is judged (cut off
                // by max_tokens, not JSON, not an object) and never run as
                // an innocent `{}`.
                let raw_arguments = match block.get("input") {
                    Some(Value::Object(input)) if input.is_empty() && cut => String::new(),
                    Some(input @ Value::Object(_)) => input.to_string(),
                    Some(Value::String(text)) => text.clone(),
                    None | Some(Value::Null) => String::new(),
                    Some(other) => other.to_string(),
                };
                out.push(StreamEvent::ToolCall(ToolCallFragment {
                    stream_index: u32::try_from(index).ok(),
                    id: string_field(block, "id"),
                    name: string_field(block, "name"),
                    raw_arguments,
                }));
            }
            _ => {}
        }
    }
    if let Some(reason) = stop_reason {
        out.push(StreamEvent::Finish {
            reason: reason.to_owned(),
        });
    }
    Ok(out)
}

fn block_index(event: &Value) -> Option<u32> {
    event
        .get("index")
        .and_then(Value::as_u64)
        .and_then(|i| u32::try_from(i).ok())
}

fn string_field(value: &Value, key: &str) -> Option<String> {
    value
        .get(key)
        .and_then(Value::as_str)
        .filter(|s| !s.is_empty())
        .map(str::to_owned)
}

fn push_text(text: Option<&Value>, out: &mut Vec<StreamEvent>) {
    push_text_owned(text.and_then(Value::as_str).map(str::to_owned), out);
}

fn push_text_owned(text: Option<String>, out: &mut Vec<StreamEvent>) {
    if let Some(text) = text.filter(|t| !t.is_empty()) {
        out.push(StreamEvent::TextDelta { text });
    }
}

fn push_reasoning(text: Option<&Value>, out: &mut Vec<StreamEvent>) {
    push_reasoning_owned(text.and_then(Value::as_str).map(str::to_owned), out);
}

fn push_reasoning_owned(text: Option<String>, out: &mut Vec<StreamEvent>) {
    if let Some(text) = text.filter(|t| !t.is_empty()) {
        out.push(StreamEvent::ReasoningDelta { text });
    }
}

fn push_signature(signature: Option<&Value>, out: &mut Vec<StreamEvent>) {
    push_signature_str(signature.and_then(Value::as_str), out);
}

fn push_signature_str(signature: Option<&str>, out: &mut Vec<StreamEvent>) {
    if let Some(signature) = signature.filter(|s| !s.is_empty()) {
        out.push(StreamEvent::ReasoningMetadata {
            metadata: json!({PROTOCOL: {"signature": signature}}),
        });
    }
}

fn push_redacted(block: &Value, out: &mut Vec<StreamEvent>) {
    push_redacted_str(block.get("data").and_then(Value::as_str), out);
}

fn push_redacted_str(data: Option<&str>, out: &mut Vec<StreamEvent>) {
    if let Some(data) = data {
        out.push(StreamEvent::ReasoningMetadata {
            metadata: json!({PROTOCOL: {"redacted_data": data}}),
        });
    }
}

/// Whether a stop reason says the output was cut at a limit.
fn output_cut(reason: &str) -> bool {
    FinishReason::parse(reason).is_some_and(|reason| reason.cut_output())
}

/// Token counts from a `usage` object. Cached input is still input: the
/// prompt is what was read, from cache or not.
fn usage_of(usage: &Value) -> Option<Usage> {
    let count = |key: &str| usage.get(key).and_then(Value::as_u64).unwrap_or(0);
    usage_from_counts(
        [
            count("input_tokens"),
            count("cache_read_input_tokens"),
            count("cache_creation_input_tokens"),
        ],
        count("output_tokens"),
    )
}

/// The usage of the three input counts and the output count, `None` when
/// all are zero. The counts are the provider's: their sum saturates.
pub(super) fn usage_from_counts(input: [u64; 3], output: u64) -> Option<Usage> {
    let prompt_tokens = input.into_iter().fold(0, u64::saturating_add);
    if prompt_tokens == 0 && output == 0 {
        return None;
    }
    Some(Usage {
        prompt_tokens,
        completion_tokens: output,
        total_tokens: 0,
    })
}

/// An `error` event or body: `{"type":"error","error":{"type","message"}}`.
fn reported(event: &Value) -> CodecError {
    let error = event.get("error");
    let message = error
        .and_then(|e| e.get("message"))
        .and_then(Value::as_str)
        .unwrap_or("unspecified error");
    let message = match error.and_then(|e| e.get("type")).and_then(Value::as_str) {
        Some(kind) if !kind.is_empty() => format!("{kind}: {message}"),
        _ => message.to_owned(),
    };
    CodecError::ProviderReported {
        protocol: PROTOCOL,
        message,
        transient: error.is_some_and(is_transient_report),
    }
}

#[cfg(test)]
#[path = "parity_tests.rs"]
mod parity_tests;
