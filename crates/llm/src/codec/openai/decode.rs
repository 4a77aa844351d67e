//! Reading Chat Completions responses, streamed and whole.
//!
//! A streamed chunk looks like
//!
//! ```json
//! {"id":"chatcmpl-B9MHDbslfkBeAs8l4bebGdFOJ6PeG","object":"chat.completion.chunk","choices":[{"index":0,
//!   "delta":{"tool_calls":[{"index":1,"id":"call_y3Tlb0RPCbf4bfLbcPUVvi0W","type":"function",
//!   "function":{"name":"get_weather","arguments":""}}]},"finish_reason":null}]}
//! ```
//!
//! and each entry of `delta.tool_calls` becomes one [`ToolCallFragment`]
//! whose `stream_index` is the entry's `index`, passed through untouched.
//!
//! # Several entries for one call in one chunk (openai/openai-python#3201)
//!
//! Kimi-style servers, vLLM with speculative decoding and Dynamo put the
//! opening entry of a call *and* its first argument piece in the same chunk,
//! both at the same `index`:
//!
//! ```json
//! "tool_calls":[{"index":0,"id":"functions.list_files:0","type":"function","function":{"name":"list_files"}},
//!               {"index":0,"function":{"arguments":" {\""}}]
//! ```
//!
//! Clients that merged a chunk's list *by position* kept two entries and
//! later lost the `{"` piece. Here every entry is its own fragment, in wire
//! order, so the pieces concatenate. Dynamo also repeats a `choices` entry
//! with the same choice index in one chunk; every entry of choice 0 is read.
//! On top of that, an *exact* repeat of a call's opening fragment arriving
//! right after it (a re-sent first chunk) is dropped, so its argument piece
//! is not doubled; any other repeat is kept, since identical argument
//! pieces in a row are legitimate.

use homeagent_core::{ReasoningPart, StreamEvent, ToolCallFragment, Usage};
use serde_json::{Map, Value};

use super::{PROTOCOL, provider_message, wire};
use crate::codec::{Flow, Frame, StreamDecoder, typed_frame};
use crate::error::{CodecError, is_transient_report};

/// Decodes the SSE frames of one streamed response.
#[derive(Debug, Default)]
pub(super) struct ChunkDecoder {
    skipped: u64,
    calls: OpeningTracker,
    turn: TurnMetadata,
    /// The envelope members the last chunk had, to step over in the next.
    envelope: wire::SkippedRun,
}

/// What a turn has to send back besides its text and calls, recorded as
/// one `ReasoningMetadata` event in the `openai` namespace when the turn
/// closes (its finish reason, or `[DONE]`):
///
/// ```json
/// {"openai": {"reasoning_field": "reasoning_content",
///             "tool_call_extra_content": [{"id": "FL1tqiJ9", "extra_content": {"google": {"thought_signature": "<opaque>"}}}]}}
/// ```
///
/// - `reasoning_field`: DeepSeek's thinking mode wants the
///   `reasoning_content` of the current turn's assistant messages back,
///   even when empty ("Missing `reasoning_content` field in the assistant
///   message", a 400, on the request after a tool batch). Where a response
///   had that field, the marker makes the request builder send the turn's
///   reasoning back; reasoning from the `reasoning` field (OpenRouter) is
///   not marked, and neither goes to a wire without the field.
/// - `tool_call_extra_content`: a call's `extra_content`, verbatim, keyed
///   by the call's id (or, for a call the wire never gave an id, its
///   stream index, read back as its place in the message: the same for
///   the usual indexes from 0). Gemini's compatible endpoint puts each
///   call's thought signature there and refuses the turn's next request
///   without it.
///
/// Both go back in the current turn only, the one part of a history
/// servers check; other protocols' encoders ignore the namespace.
#[derive(Debug, Default)]
struct TurnMetadata {
    reasoning_seen: bool,
    marker_sent: bool,
    /// `{"id" | "index": .., "extra_content": ..}` not yet emitted.
    call_extras: Vec<Value>,
}

impl TurnMetadata {
    /// Emits what is pending, after the reasoning (before the finish
    /// reason, or at the end of the stream). The marker goes out once.
    fn close(&mut self, out: &mut Vec<StreamEvent>) {
        let mark = self.reasoning_seen && !self.marker_sent;
        if !mark && self.call_extras.is_empty() {
            return;
        }
        let mut ours = Map::new();
        if mark {
            ours.insert(REASONING_FIELD.into(), Value::from("reasoning_content"));
            self.marker_sent = true;
        }
        if !self.call_extras.is_empty() {
            let extras = std::mem::take(&mut self.call_extras);
            ours.insert(CALL_EXTRAS.into(), Value::Array(extras));
        }
        out.push(StreamEvent::ReasoningMetadata {
            metadata: Value::Object(Map::from_iter([(PROTOCOL.into(), Value::Object(ours))])),
        });
    }

    /// Records `extra` for the call `key` names, replacing an earlier
    /// record for the same call (a re-sent opening chunk).
    fn record_extra(&mut self, key: CallKey, extra: Value) {
        let key = match key {
            CallKey::Id(id) => ("id", Value::from(id)),
            CallKey::Index(index) => ("index", Value::from(index)),
        };
        self.call_extras
            .retain(|record| record.get(key.0) != Some(&key.1));
        self.call_extras.push(Value::Object(Map::from_iter([
            (key.0.into(), key.1),
            ("extra_content".into(), extra),
        ])));
    }
}

/// How a call's recorded `extra_content` finds its call again.
enum CallKey {
    Id(String),
    Index(u32),
}

/// The metadata key of the DeepSeek marker.
const REASONING_FIELD: &str = "reasoning_field";
/// The metadata key of the calls' `extra_content` records.
const CALL_EXTRAS: &str = "tool_call_extra_content";

/// Whether `metadata` marks reasoning that came as `reasoning_content`
/// (see [`TurnMetadata`]).
pub(super) fn is_reasoning_marker(metadata: &Value) -> bool {
    metadata
        .get(PROTOCOL)
        .and_then(|ours| ours.get(REASONING_FIELD))
        .and_then(Value::as_str)
        == Some("reasoning_content")
}

/// The `extra_content` recorded for the call `id` at `position` of its
/// message, from that message's reasoning metadata (see [`TurnMetadata`]).
pub(super) fn recorded_extra<'a>(
    reasoning: &'a [ReasoningPart],
    id: &str,
    position: usize,
) -> Option<&'a Value> {
    reasoning
        .iter()
        .filter_map(|part| part.metadata.as_ref()?.get(PROTOCOL)?.get(CALL_EXTRAS))
        .filter_map(Value::as_array)
        .flatten()
        .find(|record| match (record.get("id"), record.get("index")) {
            (Some(recorded), _) => recorded.as_str() == Some(id),
            (None, Some(index)) => index.as_u64() == u64::try_from(position).ok(),
            (None, None) => false,
        })
        .and_then(|record| record.get("extra_content"))
}

impl StreamDecoder for ChunkDecoder {
    fn decode(&mut self, frame: &Frame, out: &mut Vec<StreamEvent>) -> Result<Flow, CodecError> {
        let data = frame.data.trim();
        if data == "[DONE]" {
            self.turn.close(out);
            return Ok(Flow::Done);
        }
        if frame.event.as_deref() != Some("error")
            && let Some(chunk) = wire::scan_with(data, &mut self.envelope)
                .or_else(|| typed_frame::<wire::Chunk>(data))
            && chunk.error.is_none()
        {
            self.decode_typed(chunk, out);
            return Ok(Flow::Continue);
        }
        // Anything unusual: an error, content parts, arguments as an object,
        // a field of an odd type, or not JSON at all.
        self.decode_value(frame, data, out)
    }

    fn skipped_frames(&self) -> u64 {
        self.skipped
    }
}

impl ChunkDecoder {
    /// The `Value` path: every lenient rule lives here.
    fn decode_value(
        &mut self,
        frame: &Frame,
        data: &str,
        out: &mut Vec<StreamEvent>,
    ) -> Result<Flow, CodecError> {
        let chunk = match serde_json::from_str::<Value>(data) {
            Ok(Value::Object(chunk)) => chunk,
            Ok(_) | Err(_) => {
                if frame.event.as_deref() == Some("error") {
                    return Err(reported(data.to_owned(), false));
                }
                // Keep-alives, proxy banners, half-written lines: not fatal.
                self.skipped += 1;
                tracing::debug!(
                    bytes = data.len(),
                    "skipping a stream frame that is not a JSON object"
                );
                return Ok(Flow::Continue);
            }
        };
        check_error(&chunk, frame.event.as_deref() == Some("error"))?;
        if let Some(Value::Array(choices)) = chunk.get("choices") {
            for choice in choices.iter().filter(|c| is_first_choice(c)) {
                if let Some(Value::Object(delta)) = choice.get("delta") {
                    self.turn.reasoning_seen |= push_content(delta, out);
                    if let Some(Value::Array(calls)) = delta.get("tool_calls") {
                        for call in calls {
                            let (fragment, extra) = fragment(call, None);
                            self.admit(fragment, extra, out);
                        }
                    }
                }
                // `""` (sent on every chunk by some servers) ends nothing.
                if non_empty_str(choice.get("finish_reason")).is_some() {
                    self.turn.close(out);
                }
                push_finish(choice, out);
            }
        }
        push_usage(&chunk, out);
        Ok(Flow::Continue)
    }

    /// The fast path: a chunk that fits [`wire::Chunk`]. Same events, in the
    /// same order, as the `Value` path gives for it.
    fn decode_typed(&mut self, chunk: wire::Chunk, out: &mut Vec<StreamEvent>) {
        for choice in chunk.choices.into_iter().flatten() {
            if !choice.is_first() {
                continue;
            }
            if let Some(mut delta) = choice.delta {
                self.turn.reasoning_seen |= delta.push_content(out);
                for call in delta.tool_calls.into_iter().flatten() {
                    let (fragment, extra) = call.into_fragment();
                    self.admit(fragment, extra, out);
                }
            }
            if let Some(reason) = choice.finish_reason {
                if !reason.is_empty() {
                    self.turn.close(out);
                }
                out.push(StreamEvent::Finish { reason });
            }
        }
        if let Some(usage) = chunk.usage {
            out.push(StreamEvent::Usage(usage.into()));
        }
    }

    /// Passes a fragment on unless it repeats the opening one, and records
    /// the entry's `extra_content` for the call it belongs to.
    fn admit(
        &mut self,
        fragment: ToolCallFragment,
        extra: Option<Value>,
        out: &mut Vec<StreamEvent>,
    ) {
        let admitted = self.calls.admit(&fragment);
        if let Some(extra) = extra {
            let id = fragment.id.as_ref().filter(|id| !id.is_empty());
            let key = match id.or_else(|| self.calls.open_id(fragment.stream_index)) {
                Some(id) => Some(CallKey::Id(id.clone())),
                None => fragment.stream_index.map(CallKey::Index),
            };
            match key {
                Some(key) => self.turn.record_extra(key, extra),
                None => tracing::debug!(
                    "dropping the extra_content of a tool call with neither id nor index"
                ),
            }
        }
        if admitted {
            out.push(StreamEvent::ToolCall(fragment));
        } else {
            tracing::debug!(
                stream_index = fragment.stream_index,
                "dropping an exact repeat of a tool call's opening fragment"
            );
        }
    }
}

/// Remembers each call's opening fragment until the next tool-call fragment
/// arrives, to recognise a re-sent first chunk.
#[derive(Debug, Default)]
struct OpeningTracker {
    /// The id currently open at each stream index (`None` key: no index).
    open: Vec<(Option<u32>, Option<String>)>,
    /// The fragment that opened a call, if it is the latest fragment.
    last_opening: Option<ToolCallFragment>,
}

impl OpeningTracker {
    /// The id of the call open at `stream_index`, if it has one.
    fn open_id(&self, stream_index: Option<u32>) -> Option<&String> {
        self.open
            .iter()
            .rev()
            .find(|(index, _)| *index == stream_index)
            .and_then(|(_, id)| id.as_ref())
    }

    /// Whether `fragment` should be passed on.
    fn admit(&mut self, fragment: &ToolCallFragment) -> bool {
        if self.last_opening.as_ref() == Some(fragment) {
            return false;
        }
        let id = fragment.id.as_ref().filter(|id| !id.is_empty());
        let opens = match self
            .open
            .iter_mut()
            .rev()
            .find(|(index, _)| *index == fragment.stream_index)
        {
            None => {
                self.open.push((fragment.stream_index, id.cloned()));
                true
            }
            Some((_, held)) => match (id, held.as_ref()) {
                // Same index, new id: a new call (Gemini's all-at-index-0).
                (Some(new), Some(old)) if new != old => {
                    *held = Some(new.clone());
                    true
                }
                (Some(new), None) => {
                    *held = Some(new.clone());
                    false
                }
                _ => false,
            },
        };
        let carries_header = id.is_some() || fragment.name.as_ref().is_some_and(|n| !n.is_empty());
        self.last_opening = (opens && carries_header).then(|| fragment.clone());
        true
    }
}

/// The events of a whole `chat.completion` body.
pub(super) fn decode_completion(body: &[u8]) -> Result<Vec<StreamEvent>, CodecError> {
    let completion = match serde_json::from_slice::<Value>(body) {
        Ok(Value::Object(completion)) => completion,
        Ok(_) => return Err(malformed("the body is not a JSON object".into())),
        Err(e) => return Err(malformed(format!("the body is not JSON: {e}"))),
    };
    check_error(&completion, false)?;
    let Some(Value::Array(choices)) = completion.get("choices") else {
        return Err(malformed("the body has no `choices` array".into()));
    };
    let mut out = Vec::new();
    if let Some(choice) = choices.iter().find(|c| is_first_choice(c)) {
        if let Some(Value::Object(message)) = choice.get("message") {
            let mut turn = TurnMetadata {
                reasoning_seen: push_content(message, &mut out),
                ..TurnMetadata::default()
            };
            if let Some(Value::Array(calls)) = message.get("tool_calls") {
                for (position, call) in calls.iter().enumerate() {
                    let position = u32::try_from(position).unwrap_or(u32::MAX);
                    let (fragment, extra) = fragment(call, Some(position));
                    if let Some(extra) = extra {
                        let key = match fragment.id.as_ref().filter(|id| !id.is_empty()) {
                            Some(id) => CallKey::Id(id.clone()),
                            None => CallKey::Index(position),
                        };
                        turn.record_extra(key, extra);
                    }
                    out.push(StreamEvent::ToolCall(fragment));
                }
            }
            turn.close(&mut out);
        }
        push_finish(choice, &mut out);
    }
    push_usage(&completion, &mut out);
    Ok(out)
}

/// Choice 0, or a choice without an index (some servers omit it). Other
/// choices only exist for `n > 1`, which HomeAgent never asks for.
fn is_first_choice(choice: &Value) -> bool {
    match choice.get("index") {
        None | Some(Value::Null) => true,
        Some(index) => index.as_u64() == Some(0),
    }
}

/// Reasoning, then text, from a `delta` or a `message`; whether it had a
/// `reasoning_content` (see [`TurnMetadata`]).
fn push_content(message: &Map<String, Value>, out: &mut Vec<StreamEvent>) -> bool {
    // DeepSeek and older vLLM say `reasoning_content`, OpenRouter and newer
    // vLLM `reasoning`; some vLLM versions send both with the same text, so
    // only one is read.
    let reasoning = non_empty_str(message.get("reasoning_content"))
        .or_else(|| non_empty_str(message.get("reasoning")));
    if let Some(text) = reasoning {
        out.push(StreamEvent::ReasoningDelta {
            text: text.to_owned(),
        });
    }
    match message.get("content") {
        Some(Value::String(text)) if !text.is_empty() => {
            out.push(StreamEvent::TextDelta { text: text.clone() });
        }
        // Mistral sends content as a list of typed parts; Magistral's
        // reasoning is a `thinking` part holding text parts (or a string).
        Some(Value::Array(parts)) => {
            for part in parts {
                match part.get("type").and_then(Value::as_str) {
                    Some("text") => {
                        if let Some(text) = non_empty_str(part.get("text")) {
                            out.push(StreamEvent::TextDelta {
                                text: text.to_owned(),
                            });
                        }
                    }
                    Some("thinking") => push_thinking(part.get("thinking"), out),
                    _ => {}
                }
            }
        }
        _ => {}
    }
    message
        .get("reasoning_content")
        .is_some_and(Value::is_string)
}

/// The reasoning in a `thinking` content part: a string, or a list of
/// text parts.
fn push_thinking(thinking: Option<&Value>, out: &mut Vec<StreamEvent>) {
    let mut push = |text: &str| {
        if !text.is_empty() {
            out.push(StreamEvent::ReasoningDelta {
                text: text.to_owned(),
            });
        }
    };
    match thinking {
        Some(Value::String(text)) => push(text),
        Some(Value::Array(parts)) => {
            for part in parts {
                if part.get("type").and_then(Value::as_str) == Some("text")
                    && let Some(text) = part.get("text").and_then(Value::as_str)
                {
                    push(text);
                }
            }
        }
        _ => {}
    }
}

/// One `tool_calls` entry, and its `extra_content`. `position` replaces the
/// wire's index for whole responses, where the index is the call's place in
/// the list.
fn fragment(call: &Value, position: Option<u32>) -> (ToolCallFragment, Option<Value>) {
    let function = call.get("function");
    // The nested `function` object is standard; a few servers send the
    // fields flat on the entry.
    let field = |key: &str| {
        function
            .and_then(|f| f.get(key))
            .filter(|v| !v.is_null())
            .or_else(|| call.get(key).filter(|v| !v.is_null()))
    };
    let stream_index = position.or_else(|| {
        call.get("index")
            .and_then(Value::as_u64)
            .and_then(|i| u32::try_from(i).ok())
    });
    let raw_arguments = match field("arguments") {
        Some(Value::String(text)) => text.clone(),
        // Some servers send the arguments as an object, not a string.
        Some(other) => other.to_string(),
        None => String::new(),
    };
    let fragment = ToolCallFragment {
        stream_index,
        id: call.get("id").and_then(Value::as_str).map(str::to_owned),
        name: field("name").and_then(Value::as_str).map(str::to_owned),
        raw_arguments,
    };
    let extra = call.get("extra_content").filter(|v| !v.is_null()).cloned();
    (fragment, extra)
}

/// `finish_reason` as sent, `""` included (the assembler ignores it). A
/// per-chunk `"stop"` ends nothing here: only `[DONE]` does.
fn push_finish(choice: &Value, out: &mut Vec<StreamEvent>) {
    if let Some(reason) = choice.get("finish_reason").and_then(Value::as_str) {
        out.push(StreamEvent::Finish {
            reason: reason.to_owned(),
        });
    }
}

fn push_usage(object: &Map<String, Value>, out: &mut Vec<StreamEvent>) {
    if let Some(Value::Object(usage)) = object.get("usage") {
        let count = |key: &str| usage.get(key).and_then(Value::as_u64).unwrap_or(0);
        out.push(StreamEvent::Usage(Usage {
            prompt_tokens: count("prompt_tokens"),
            completion_tokens: count("completion_tokens"),
            total_tokens: count("total_tokens"),
        }));
    }
}

/// An `error` member (OpenRouter and vLLM report mid-stream failures this
/// way), or any object in an `event: error` frame.
fn check_error(object: &Map<String, Value>, error_event: bool) -> Result<(), CodecError> {
    let has_error = object.get("error").is_some_and(|e| !e.is_null());
    if !has_error && !error_event {
        return Ok(());
    }
    let value = Value::Object(object.clone());
    let message = provider_message(&value).unwrap_or_else(|| value.to_string());
    let transient = match object.get("error") {
        Some(error @ Value::Object(_)) => is_transient_report(error),
        _ => is_transient_report(&value),
    };
    Err(reported(message, transient))
}

fn non_empty_str(value: Option<&Value>) -> Option<&str> {
    value.and_then(Value::as_str).filter(|s| !s.is_empty())
}

fn reported(message: String, transient: bool) -> CodecError {
    CodecError::ProviderReported {
        protocol: PROTOCOL,
        message,
        transient,
    }
}

fn malformed(detail: String) -> CodecError {
    CodecError::MalformedResponse {
        protocol: PROTOCOL,
        detail,
    }
}

#[cfg(test)]
#[path = "parity_tests.rs"]
mod parity_tests;
