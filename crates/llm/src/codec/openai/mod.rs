//! The OpenAI Chat Completions wire, and every server that copies it
//! (DeepSeek, Groq, Mistral, OpenRouter, vLLM, llama.cpp server, LM Studio).
//!
//! - Requests: `POST {base_url}/chat/completions` with a bearer key
//!   (the `request` module).
//! - Streamed responses: SSE `data:` frames holding `chat.completion.chunk`
//!   objects, ended by `data: [DONE]` (the `decode` module).
//! - Whole responses: one `chat.completion` object, turned into the same
//!   events as its streamed form.
//!
//! The compatible servers differ in small ways the decoder absorbs: missing
//! tool-call `index`, every parallel call at index 0 with a fresh id,
//! `finish_reason: ""` on every chunk, reasoning under `reasoning_content` or
//! `reasoning`, arguments sent as an object instead of a string, and several
//! entries for one call inside one chunk. The rules that need the whole turn
//! (bucketing by index, ids, argument parsing) stay in
//! [`homeagent_core::StreamAssembler`].

use homeagent_core::StreamEvent;
use serde_json::Value;

use super::{Endpoint, Framing, Protocol, StreamDecoder, WireCodec, WireRequest};
use crate::error::CodecError;
use crate::request::ChatRequest;

mod decode;
mod request;
pub(crate) use request::Tools;
mod wire;

pub(crate) const PROTOCOL: &str = "openai";

/// How many bytes of an error body without a JSON error message are quoted.
const ERROR_EXCERPT_BYTES: usize = 200;

/// The OpenAI Chat Completions codec.
#[derive(Debug, Clone, Copy, Default)]
pub struct OpenAiCodec;

impl WireCodec for OpenAiCodec {
    fn protocol(&self) -> Protocol {
        Protocol::Openai
    }

    fn build_request(
        &self,
        endpoint: &Endpoint,
        request: &ChatRequest,
    ) -> Result<WireRequest, CodecError> {
        request::build(endpoint, request)
    }

    fn framing(&self) -> Framing {
        Framing::Sse
    }

    fn stream_decoder(&self) -> Box<dyn StreamDecoder> {
        Box::new(decode::ChunkDecoder::default())
    }

    fn decode_response(&self, body: &[u8]) -> Result<Vec<StreamEvent>, CodecError> {
        decode::decode_completion(body)
    }

    fn error_message(&self, status: u16, body: &[u8]) -> String {
        error_message(status, body)
    }
}

/// `HTTP <status>: <message>`, the message being the provider's own
/// (`{"error": {"message": ...}}`, `{"error": "..."}`, or the `message` /
/// `detail` some compatible servers put at the top level), else the start of
/// the body.
fn error_message(status: u16, body: &[u8]) -> String {
    let from_json = serde_json::from_slice::<Value>(body)
        .ok()
        .and_then(|value| provider_message(&value));
    let message = match from_json {
        Some(message) => message,
        None => excerpt(body, ERROR_EXCERPT_BYTES),
    };
    if message.is_empty() {
        format!("HTTP {status}")
    } else {
        format!("HTTP {status}: {message}")
    }
}

/// The message of an error object, wherever the server put it.
pub(crate) fn provider_message(value: &Value) -> Option<String> {
    fn text(v: &Value) -> Option<&str> {
        v.as_str().map(str::trim).filter(|s| !s.is_empty())
    }
    let message = match value.get("error") {
        Some(error @ Value::String(_)) => text(error),
        Some(Value::Object(error)) => error.get("message").and_then(text),
        _ => None,
    };
    message
        .or_else(|| value.get("message").and_then(text))
        .or_else(|| value.get("detail").and_then(text))
        .map(str::to_owned)
}

/// The first `max` bytes of `body` as text, cut at a character boundary.
fn excerpt(body: &[u8], max: usize) -> String {
    let mut end = body.len().min(max);
    // Back off to the start of a UTF-8 character (continuation bytes are
    // 0b10xxxxxx) so the cut does not leave a broken one behind.
    while end > 0 && end < body.len() && body[end] & 0xC0 == 0x80 {
        end -= 1;
    }
    String::from_utf8_lossy(&body[..end]).trim().to_owned()
}
