//! Reading Gemini responses. Every SSE `data:` of a stream is a whole
//! `GenerateContentResponse`, the same object a non-streamed call returns,
//! so both paths share [`Decoder::chunk`].

use homeagent_core::{FinishReason, StreamEvent, ToolCallFragment, Usage};
use serde_json::Value;

use super::{PROTOCOL, SignatureTarget, signature_metadata, wire};
use crate::codec::{Flow, Frame, StreamDecoder, frame_json, is_empty_object, typed_frame};
use crate::error::{CodecError, is_transient_report};

/// Decodes one streamed (or whole) response.
#[derive(Debug, Default)]
pub(crate) struct Decoder {
    skipped: u64,
    /// The position the next call of the turn gets: its `stream_index`.
    next_call: u32,
    /// The latest call, which a nameless `functionCall` continues.
    last_call: Option<u32>,
    /// The latest call arrived with empty `args` and nothing has been sent
    /// for its arguments yet: some servers send the name first and the
    /// arguments in a later, nameless `functionCall` part.
    awaiting_args: Option<u32>,
}

impl StreamDecoder for Decoder {
    fn decode(&mut self, frame: &Frame, out: &mut Vec<StreamEvent>) -> Result<Flow, CodecError> {
        if let Some(response) = typed_frame::<wire::Response>(frame.data.trim())
            && response.error.is_none()
        {
            self.typed_chunk(response, out)?;
            return Ok(Flow::Continue);
        }
        let Some(chunk) = frame_json(frame, &mut self.skipped) else {
            return Ok(Flow::Continue);
        };
        self.chunk(&chunk, out)?;
        // Gemini has no end marker: the body's end is the stream's end.
        Ok(Flow::Continue)
    }

    fn skipped_frames(&self) -> u64 {
        self.skipped
    }
}

impl Decoder {
    /// The fast path: a response that fits [`wire::Response`]. Same events,
    /// in the same order, as [`Decoder::chunk`] gives for it, except that a
    /// call's arguments are the wire's own text rather than a re-serialised
    /// copy (same JSON, possibly other key order and spacing).
    fn typed_chunk(
        &mut self,
        response: wire::Response,
        out: &mut Vec<StreamEvent>,
    ) -> Result<(), CodecError> {
        if let Some(reason) = response.prompt_feedback.and_then(|f| f.block_reason) {
            return Err(blocked(&reason));
        }
        let candidate = response.candidates.and_then(|c| c.into_iter().next());
        let (parts, finish_reason) = match candidate {
            Some(c) => (c.content.and_then(|c| c.parts), c.finish_reason),
            None => (None, None),
        };
        for part in parts.into_iter().flatten() {
            let signature = part.thought_signature.as_deref().filter(|s| !s.is_empty());
            match part.function_call {
                Some(call) => {
                    // Any JSON value, as sent: `args` is an object by
                    // contract, and whatever else came is for the assembler
                    // to reject (a string is not unwrapped into arguments).
                    let args = call
                        .args
                        .filter(|raw| !is_empty_object(raw))
                        .map(|raw| raw.get().to_owned())
                        .unwrap_or_default();
                    self.call_part(call.name, call.id, args, signature, out);
                }
                None => {
                    let thought = part.thought == Some(true);
                    self.text_part(part.text, thought, signature, out);
                }
            }
        }
        if let Some(reason) = finish_reason {
            self.finish(reason, out);
        }
        if let Some(usage) = response.usage_metadata.and_then(|u| u.usage()) {
            out.push(StreamEvent::Usage(usage));
        }
        Ok(())
    }

    /// The events of one `GenerateContentResponse` (or a JSON array of them,
    /// the shape of the stream endpoint without `alt=sse`).
    fn chunk(&mut self, chunk: &Value, out: &mut Vec<StreamEvent>) -> Result<(), CodecError> {
        if let Value::Array(items) = chunk {
            for item in items {
                self.chunk(item, out)?;
            }
            return Ok(());
        }
        if let Some(error) = chunk.get("error") {
            return Err(reported(error));
        }
        if let Some(reason) = chunk
            .pointer("/promptFeedback/blockReason")
            .and_then(Value::as_str)
        {
            return Err(blocked(reason));
        }
        // HomeAgent never asks for several candidates.
        let candidate = chunk.pointer("/candidates/0");
        if let Some(parts) = candidate
            .and_then(|c| c.pointer("/content/parts"))
            .and_then(Value::as_array)
        {
            for part in parts {
                self.part(part, out);
            }
        }
        if let Some(reason) = candidate
            .and_then(|c| c.get("finishReason"))
            .and_then(Value::as_str)
        {
            self.finish(reason.to_owned(), out);
        }
        if let Some(usage) = chunk.get("usageMetadata").and_then(usage_of) {
            out.push(StreamEvent::Usage(usage));
        }
        Ok(())
    }

    fn part(&mut self, part: &Value, out: &mut Vec<StreamEvent>) {
        let signature = part
            .get("thoughtSignature")
            .and_then(Value::as_str)
            .filter(|s| !s.is_empty());
        if let Some(call) = part.get("functionCall") {
            let name = string_field(call, "name");
            let id = string_field(call, "id");
            let args = call
                .get("args")
                .filter(|a| !a.is_null() && a.as_object().is_none_or(|m| !m.is_empty()));
            let raw_arguments = args.map(Value::to_string).unwrap_or_default();
            self.call_part(name, id, raw_arguments, signature, out);
            return;
        }
        let text = part.get("text").and_then(Value::as_str).map(str::to_owned);
        let thought = part.get("thought").and_then(Value::as_bool) == Some(true);
        self.text_part(text, thought, signature, out);
    }

    /// A `functionCall` part, then its thought signature.
    fn call_part(
        &mut self,
        name: Option<String>,
        id: Option<String>,
        raw_arguments: String,
        signature: Option<&str>,
        out: &mut Vec<StreamEvent>,
    ) {
        let name = name.filter(|s| !s.is_empty());
        let id = id.filter(|s| !s.is_empty());
        let position = self.function_call(name, id, raw_arguments, out);
        if let Some(signature) = signature {
            let target = SignatureTarget::FunctionCall(position as usize);
            out.push(StreamEvent::ReasoningMetadata {
                metadata: signature_metadata(signature, target),
            });
        }
    }

    /// A text (or thought) part, then its thought signature.
    fn text_part(
        &mut self,
        text: Option<String>,
        thought: bool,
        signature: Option<&str>,
        out: &mut Vec<StreamEvent>,
    ) {
        self.close_awaiting(out);
        if let Some(text) = text.filter(|t| !t.is_empty()) {
            if thought {
                out.push(StreamEvent::ReasoningDelta { text });
            } else {
                out.push(StreamEvent::TextDelta { text });
            }
        }
        if let Some(signature) = signature {
            out.push(StreamEvent::ReasoningMetadata {
                metadata: signature_metadata(signature, SignatureTarget::Text),
            });
        }
    }

    /// Emits one `functionCall` part; returns the call's position.
    fn function_call(
        &mut self,
        name: Option<String>,
        id: Option<String>,
        raw_arguments: String,
        out: &mut Vec<StreamEvent>,
    ) -> u32 {
        // A nameless part continues the latest call: same position, so the
        // assembler joins it to that call instead of dropping it as a
        // nameless phantom.
        if name.is_none()
            && let Some(position) = self.last_call
        {
            if self.awaiting_args == Some(position) && !raw_arguments.is_empty() {
                self.awaiting_args = None;
            }
            if id.is_some() || !raw_arguments.is_empty() {
                out.push(fragment(position, id, None, raw_arguments));
            }
            return position;
        }

        self.close_awaiting(out);
        let position = self.next_call;
        self.next_call = self.next_call.saturating_add(1);
        self.last_call = Some(position);
        if raw_arguments.is_empty() {
            self.awaiting_args = Some(position);
        }
        out.push(fragment(position, id, name, raw_arguments));
        position
    }

    /// The turn's end. A call still waiting for arguments when the token
    /// limit ended the turn was cut, not called without any: it keeps its
    /// blank arguments, which the assembler marks `truncated` in a turn the
    /// limit ended. Any other end gives it `{}`.
    fn finish(&mut self, reason: String, out: &mut Vec<StreamEvent>) {
        if FinishReason::parse(&reason) == Some(FinishReason::Length) {
            self.awaiting_args = None;
        } else {
            self.close_awaiting(out);
        }
        out.push(StreamEvent::Finish { reason });
    }

    /// The call waiting for arguments gets none: its arguments are `{}`.
    /// (Said explicitly so the assembler does not flag blank arguments.)
    fn close_awaiting(&mut self, out: &mut Vec<StreamEvent>) {
        if let Some(position) = self.awaiting_args.take() {
            out.push(fragment(position, None, None, "{}".to_owned()));
        }
    }
}

/// The events of a whole `generateContent` response.
pub(super) fn decode_response(body: &[u8]) -> Result<Vec<StreamEvent>, CodecError> {
    let mut decoder = Decoder::default();
    let mut out = Vec::new();
    // The typed path first, as for a streamed chunk: streamed and whole
    // turns must come out the same, arguments' text included.
    if let Ok(response) = serde_json::from_slice::<wire::Response>(body)
        && response.error.is_none()
    {
        decoder.typed_chunk(response, &mut out)?;
        decoder.close_awaiting(&mut out);
        return Ok(out);
    }
    let response: Value =
        serde_json::from_slice(body).map_err(|e| CodecError::MalformedResponse {
            protocol: PROTOCOL,
            detail: format!("the body is not JSON: {e}"),
        })?;
    decoder.chunk(&response, &mut out)?;
    // The response is complete: a call still waiting has no arguments.
    decoder.close_awaiting(&mut out);
    Ok(out)
}

fn fragment(
    position: u32,
    id: Option<String>,
    name: Option<String>,
    raw_arguments: String,
) -> StreamEvent {
    StreamEvent::ToolCall(ToolCallFragment {
        stream_index: Some(position),
        id,
        name,
        raw_arguments,
    })
}

fn string_field(value: &Value, key: &str) -> Option<String> {
    value
        .get(key)
        .and_then(Value::as_str)
        .filter(|s| !s.is_empty())
        .map(str::to_owned)
}

fn usage_of(usage: &Value) -> Option<Usage> {
    let count = |key: &str| usage.get(key).and_then(Value::as_u64).unwrap_or(0);
    let usage = Usage {
        prompt_tokens: count("promptTokenCount"),
        // Thinking is output, billed as such (`thoughtsTokenCount`).
        completion_tokens: count("candidatesTokenCount")
            .saturating_add(count("thoughtsTokenCount")),
        total_tokens: count("totalTokenCount"),
    };
    (usage != Usage::default()).then_some(usage)
}

fn blocked(reason: &str) -> CodecError {
    CodecError::ProviderReported {
        protocol: PROTOCOL,
        message: format!("the prompt was blocked: {reason}"),
        transient: false,
    }
}

/// `{"code": 429, "message": "...", "status": "RESOURCE_EXHAUSTED"}`.
fn reported(error: &Value) -> CodecError {
    let message = error
        .get("message")
        .and_then(Value::as_str)
        .map(str::to_owned)
        .unwrap_or_else(|| error.to_string());
    let message = match error.get("status").and_then(Value::as_str) {
        Some(status) if !status.is_empty() => format!("{status}: {message}"),
        _ => message,
    };
    CodecError::ProviderReported {
        protocol: PROTOCOL,
        message,
        transient: is_transient_report(error),
    }
}

#[cfg(test)]
#[path = "parity_tests.rs"]
mod parity_tests;
