//! The Gemini wire: `POST {base_url}/v1beta/models/{model}:streamGenerateContent?alt=sse`
//! (or `:generateContent`), authenticated with the `x-goog-api-key` header
//! only, never a `?key=` in the URL.
//!
//! Gemini sends each `functionCall` whole (name and argument object in one
//! part) and usually without an id. The decoder numbers the calls of a turn
//! with a running counter that becomes their `stream_index`, so parallel
//! calls never collapse, and leaves `id` unset when the wire has none (the
//! assembler assigns unique ids). There is no `finish_reason: "tool_calls"`:
//! a turn with calls ends with `STOP`, and the calls still count. There is
//! no `[DONE]` either: the stream ends with the body.
//!
//! # Thought signatures
//!
//! A `thoughtSignature` may sit on any part, and Gemini 3 rejects a history
//! that does not give it back on the very part it came on (for parallel
//! calls, only the first `functionCall` part carries one). The decoder
//! records each as a `ReasoningMetadata` event whose metadata says where it
//! belongs:
//!
//! ```json
//! {"gemini": {"thought_signature": "<opaque>", "part": "function_call", "call_index": 0}}
//! {"gemini": {"thought_signature": "<opaque>", "part": "text"}}
//! ```
//!
//! `call_index` is the call's position in the turn, the same number as its
//! `stream_index` and (because the assembler orders calls by it) its index
//! in `AssistantMessage::tool_calls`. Ids cannot serve: Gemini mostly sends
//! none, and the ones the assembler assigns do not exist yet when the
//! signature is decoded. `"text"` covers text and thought-text parts: a turn
//! is replayed with its text as one part, which gets the signature.
//!
//! When a turn is replayed, the request builder puts every signature back on its
//! part, and keeps the whole turn (text and every call) in one `model`
//! Content; metadata of other protocols is ignored.

mod decode;
mod request;
mod schema;
mod wire;

use homeagent_core::StreamEvent;
use serde_json::{Value, json};

use super::{Endpoint, Framing, Protocol, StreamDecoder, WireCodec, WireRequest};
use crate::error::CodecError;
use crate::request::ChatRequest;

/// The protocol name used in errors and as the metadata namespace.
const PROTOCOL: &str = "gemini";

/// How many bytes of an unrecognised error body an error message quotes.
const ERROR_EXCERPT_BYTES: usize = 200;

/// The Gemini (Generative Language API) codec.
#[derive(Debug, Clone, Copy, Default)]
pub struct GeminiCodec;

impl WireCodec for GeminiCodec {
    fn protocol(&self) -> Protocol {
        Protocol::Gemini
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
        decode::decode_response(body)
    }

    /// `{"error":{"code":400,"message":"...","status":"INVALID_ARGUMENT"}}`
    /// (or a one-element array of it, as the non-SSE stream endpoint sends)
    /// becomes `HTTP <status>: <STATUS>: <message>`.
    /// `RetryInfo.retryDelay` (`"7.5s"`) among the error's details.
    fn retry_delay(&self, body: &[u8]) -> Option<std::time::Duration> {
        let parsed: Value = serde_json::from_slice(body).ok()?;
        let error = match &parsed {
            Value::Array(items) => items.first()?.get("error")?,
            other => other.get("error")?,
        };
        error
            .get("details")?
            .as_array()?
            .iter()
            .filter(|detail| {
                detail
                    .get("@type")
                    .and_then(Value::as_str)
                    .is_some_and(|kind| kind.ends_with("google.rpc.RetryInfo"))
            })
            .find_map(|detail| {
                let delay = detail
                    .get("retryDelay")?
                    .as_str()?
                    .trim()
                    .strip_suffix('s')?;
                let seconds: f64 = delay.parse().ok()?;
                (seconds.is_finite() && seconds >= 0.0)
                    .then(|| std::time::Duration::from_secs_f64(seconds.min(86_400.0)))
            })
    }

    /// A bad or expired key is a 400 `INVALID_ARGUMENT` whose `ErrorInfo`
    /// detail gives the reason `API_KEY_INVALID`.
    fn refused_key(&self, status: u16, body: &[u8]) -> bool {
        if status == 401 {
            return true;
        }
        let Ok(parsed) = serde_json::from_slice::<Value>(body) else {
            return false;
        };
        let error = match &parsed {
            Value::Array(items) => items.first().and_then(|first| first.get("error")),
            other => other.get("error"),
        };
        error
            .and_then(|error| error.get("details"))
            .and_then(Value::as_array)
            .is_some_and(|details| {
                details.iter().any(|detail| {
                    detail.get("reason").and_then(Value::as_str) == Some("API_KEY_INVALID")
                })
            })
    }

    /// `FAILED_PRECONDITION`: the request cannot be served here (the
    /// caller's region, an API not set up), whatever it asks.
    fn source_unavailable(&self, status: u16, body: &[u8]) -> bool {
        status == 400
            && serde_json::from_slice::<Value>(body).is_ok_and(|parsed| {
                let error = match &parsed {
                    Value::Array(items) => items.first().and_then(|first| first.get("error")),
                    other => other.get("error"),
                };
                error.and_then(|e| e.get("status")).and_then(Value::as_str)
                    == Some("FAILED_PRECONDITION")
            })
    }

    fn error_message(&self, status: u16, body: &[u8]) -> String {
        let parsed: Option<Value> = serde_json::from_slice(body).ok();
        let error = parsed.as_ref().and_then(|v| match v {
            Value::Array(items) => items.first().and_then(|first| first.get("error")),
            other => other.get("error"),
        });
        if let Some(error) = error
            && let Some(message) = error.get("message").and_then(Value::as_str)
        {
            return match error.get("status").and_then(Value::as_str) {
                Some(kind) if !kind.is_empty() => format!("HTTP {status}: {kind}: {message}"),
                _ => format!("HTTP {status}: {message}"),
            };
        }
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
}

/// The part of a turn a thought signature was received on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum SignatureTarget {
    /// The text (or thought) part.
    Text,
    /// The `functionCall` part of the call at this position in the turn.
    FunctionCall(usize),
}

/// The `ReasoningMetadata` recording a signature and its part.
fn signature_metadata(signature: &str, target: SignatureTarget) -> Value {
    match target {
        SignatureTarget::Text => {
            json!({PROTOCOL: {"thought_signature": signature, "part": "text"}})
        }
        SignatureTarget::FunctionCall(position) => json!({PROTOCOL: {
            "thought_signature": signature,
            "part": "function_call",
            "call_index": position,
        }}),
    }
}

/// Reads back what [`signature_metadata`] wrote; `None` for metadata of
/// other protocols.
fn signature_of(metadata: &Value) -> Option<(&str, SignatureTarget)> {
    let ours = metadata.get(PROTOCOL)?;
    let signature = ours.get("thought_signature")?.as_str()?;
    let target = match ours.get("part").and_then(Value::as_str) {
        Some("function_call") => {
            let position = ours.get("call_index")?.as_u64()?;
            SignatureTarget::FunctionCall(usize::try_from(position).ok()?)
        }
        _ => SignatureTarget::Text,
    };
    Some((signature, target))
}
