//! The Anthropic Messages wire: `POST {base_url}/v1/messages`.
//!
//! Requests keep the system prompt apart (`system`), carry the conversation
//! as content blocks (`text`, `thinking`, `tool_use`, `tool_result`) and
//! authenticate with `x-api-key` plus a pinned `anthropic-version`.
//! Responses stream as named SSE events; the content-block `index` of a
//! `tool_use` block is the call's `stream_index`.
//!
//! Reasoning round trip: a `thinking` block's signature arrives as
//! `ReasoningMetadata {"anthropic": {"signature": "..."}}` and a
//! `redacted_thinking` block as `{"anthropic": {"redacted_data": "..."}}`;
//! both are replayed verbatim. Reasoning without Anthropic metadata (made by
//! another provider) is never sent, because Anthropic rejects unsigned
//! thinking blocks.

mod decode;
mod request;
mod wire;

use homeagent_core::StreamEvent;
use serde_json::Value;

use super::{Endpoint, Framing, Protocol, StreamDecoder, WireCodec, WireRequest};
use crate::error::CodecError;
use crate::request::ChatRequest;

/// The protocol name used in errors and as the metadata namespace.
const PROTOCOL: &str = "anthropic";

/// The API version every request pins (the only stable one).
pub const API_VERSION: &str = "2023-06-01";

/// How many bytes of an unrecognised error body an error message quotes.
const ERROR_EXCERPT_BYTES: usize = 200;

/// The Anthropic Messages codec.
#[derive(Debug, Clone, Copy, Default)]
pub struct AnthropicCodec;

impl WireCodec for AnthropicCodec {
    fn protocol(&self) -> Protocol {
        Protocol::Anthropic
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
        Box::new(decode::Decoder::default())
    }

    fn decode_response(&self, body: &[u8]) -> Result<Vec<StreamEvent>, CodecError> {
        decode::decode_message(body)
    }

    /// `{"type":"error","error":{"type":"...","message":"..."}}` becomes
    /// `HTTP <status>: <type>: <message>`.
    fn error_message(&self, status: u16, body: &[u8]) -> String {
        let parsed: Option<Value> = serde_json::from_slice(body).ok();
        if let Some(error) = parsed.as_ref().and_then(|v| v.get("error"))
            && let Some(message) = error.get("message").and_then(Value::as_str)
        {
            return match error.get("type").and_then(Value::as_str) {
                Some(kind) if !kind.is_empty() => format!("HTTP {status}: {kind}: {message}"),
                _ => format!("HTTP {status}: {message}"),
            };
        }
        excerpt_message(status, body)
    }
}

/// `HTTP <status>: <start of the body>` for bodies without a provider message.
fn excerpt_message(status: u16, body: &[u8]) -> String {
    let text = String::from_utf8_lossy(body);
    let text = text.trim();
    if text.is_empty() {
        return format!("HTTP {status}");
    }
    format!(
        "HTTP {status}: {}",
        homeagent_core::excerpt(text, ERROR_EXCERPT_BYTES)
    )
}
