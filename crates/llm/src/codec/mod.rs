//! Wire codecs: one per protocol, each a pure function of bytes.
//!
//! Every codec answers three questions for its wire: how to write a request
//! ([`WireCodec::build_request`]), how to read a streamed response one frame
//! at a time ([`WireCodec::stream_decoder`]), and how to read a whole one
//! ([`WireCodec::decode_response`]). Streamed and whole responses produce the
//! same events, so the kernel cannot tell them apart.
//!
//! A codec must pass each tool call's provider position through as
//! `stream_index` (OpenAI's `index`, Anthropic's block index, the position of
//! Gemini's and Ollama's whole calls): without it parallel calls collapse.

use homeagent_core::StreamEvent;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::error::CodecError;
use crate::request::ChatRequest;

pub use body::JsonBody;

pub mod anthropic;
mod body;
pub mod gemini;
pub mod ollama;
pub mod openai;
mod wire_ids;

/// The wire protocols HomeAgent speaks natively.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Protocol {
    /// OpenAI Chat Completions, and every server that copies it (DeepSeek,
    /// Groq, Mistral, OpenRouter, vLLM, llama.cpp, LM Studio).
    Openai,
    Anthropic,
    Gemini,
    Ollama,
}

impl Protocol {
    pub const ALL: [Protocol; 4] = [
        Protocol::Openai,
        Protocol::Anthropic,
        Protocol::Gemini,
        Protocol::Ollama,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Protocol::Openai => "openai",
            Protocol::Anthropic => "anthropic",
            Protocol::Gemini => "gemini",
            Protocol::Ollama => "ollama",
        }
    }
}

/// Where and as whom to send a request.
#[derive(Clone, PartialEq, Eq)]
pub struct Endpoint {
    /// Each provider's own SDK convention: OpenAI-compatible with `/v1`,
    /// Anthropic, Gemini and Ollama without a version path.
    pub base_url: String,
    pub api_key: Option<String>,
}

impl std::fmt::Debug for Endpoint {
    // Never print the key, nor credentials in the URL.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Endpoint")
            .field("base_url", &crate::base_url::shown_url(&self.base_url))
            .field("api_key", &self.api_key.as_ref().map(|_| "<redacted>"))
            .finish()
    }
}

/// An HTTP request ready to send (always a POST with a JSON body).
#[derive(Clone)]
pub struct WireRequest {
    pub url: String,
    /// Header names in lowercase. May hold the API key: never log them.
    pub headers: Vec<(String, String)>,
    /// The body as the exact JSON text that is sent. Text rather than a
    /// `Value`: codecs write it straight from the request, and a Lua
    /// adapter's body goes out byte for byte as the adapter wrote (and
    /// perhaps signed) it.
    pub body: JsonBody,
}

impl WireRequest {
    /// The body parsed, for inspecting it (tests, debugging).
    pub fn body_json(&self) -> Result<Value, serde_json::Error> {
        serde_json::from_slice(self.body.as_bytes())
    }
}

/// The user text that opens a history whose first turn is the model's, on
/// wires that refuse one (Anthropic: "first message must use the user
/// role"; Gemini: "alternate between user and model"). Such histories are
/// ordinary: a chat UI's greeting sent as an assistant message, or a first
/// user text left out because the wire refuses blank text. Dropping the
/// model's words instead would lose what it said, so a short note opens
/// the history and says only that the conversation starts here.
pub const OPENING_NOTE: &str = "(start of conversation)";

/// Serializes a codec's request body for `request`; the one way codecs
/// make [`WireRequest::body`].
pub(crate) fn encoded_body<T: Serialize + ?Sized>(
    protocol: &'static str,
    body: &T,
    request: &ChatRequest,
) -> Result<JsonBody, CodecError> {
    JsonBody::encode(protocol, body, request.encoded_size_hint())
}

impl std::fmt::Debug for WireRequest {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let names: Vec<&str> = self.headers.iter().map(|(k, _)| k.as_str()).collect();
        f.debug_struct("WireRequest")
            .field("url", &self.url)
            .field("header_names", &names)
            .field("body", &self.body)
            .finish()
    }
}

/// How a streamed body is cut into frames.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Framing {
    /// Server-sent events: `event:` / `data:` lines, blank-line separated.
    Sse,
    /// One JSON object per line (Ollama).
    Ndjson,
}

/// One frame of a streamed body: an SSE event or an NDJSON line.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Frame {
    /// The SSE `event:` field, when there was one.
    pub event: Option<String>,
    /// The SSE `data:` lines joined with `\n`, or the NDJSON line.
    pub data: String,
}

/// Whether the stream goes on after a frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Flow {
    Continue,
    /// The wire said the response is complete (`[DONE]`, `message_stop`,
    /// Ollama's `done: true`). Frames after it are ignored.
    Done,
}

/// Decodes the frames of one streamed response.
pub trait StreamDecoder: Send {
    /// Appends the events of one frame to `out`.
    fn decode(&mut self, frame: &Frame, out: &mut Vec<StreamEvent>) -> Result<Flow, CodecError>;
    /// Frames skipped because they were not JSON (counted, never fatal).
    fn skipped_frames(&self) -> u64;
}

/// One protocol's codec.
pub trait WireCodec: Send + Sync {
    fn protocol(&self) -> Protocol;
    /// The HTTP request for `request` (streamed or not, as it asks).
    fn build_request(
        &self,
        endpoint: &Endpoint,
        request: &ChatRequest,
    ) -> Result<WireRequest, CodecError>;
    fn framing(&self) -> Framing;
    /// A fresh decoder for one streamed response.
    fn stream_decoder(&self) -> Box<dyn StreamDecoder>;
    /// The events of a whole (non-streamed) response body.
    fn decode_response(&self, body: &[u8]) -> Result<Vec<StreamEvent>, CodecError>;
    /// `HTTP <status>: ` and the provider's own message from an HTTP error
    /// body, or a short excerpt of the body when it has none (`HTTP
    /// <status>` alone for an empty body). [`crate::ProviderError`]'s text
    /// shows it as it is, so it must name the status.
    fn error_message(&self, status: u16, body: &[u8]) -> String;

    /// A wait the provider named in an error body, for a response that
    /// came without a `Retry-After` header (Gemini puts it in the body's
    /// `RetryInfo`). `None` by default.
    fn retry_delay(&self, body: &[u8]) -> Option<std::time::Duration> {
        let _ = body;
        None
    }

    /// Whether an error status says the source's key was refused (the
    /// source is disabled, not tried again). 401 by default; Gemini says it
    /// with a 400 whose details give the reason `API_KEY_INVALID`.
    fn refused_key(&self, status: u16, body: &[u8]) -> bool {
        let _ = body;
        status == 401
    }

    /// Whether an error status says this source cannot answer at all,
    /// whatever the request (tried next: another source may). A status
    /// says so by itself (403, 404, ...; `ProviderError::is_source_fault`);
    /// this is for what a protocol says in the body. None by default.
    fn source_unavailable(&self, status: u16, body: &[u8]) -> bool {
        let _ = (status, body);
        false
    }
}

/// A temperature as JSON, through its shortest decimal form: `0.7f32`
/// widened to f64 is 0.699999988079071, and providers should get the 0.7 the
/// caller wrote. `None` (no temperature asked for) stays `None`.
pub(crate) fn temperature_json(
    protocol: &'static str,
    temperature: Option<f32>,
) -> Result<Option<Value>, CodecError> {
    let Some(temperature) = temperature else {
        return Ok(None);
    };
    let unencodable = || CodecError::Unencodable {
        protocol,
        detail: format!("temperature {temperature} is not a finite number"),
    };
    if !temperature.is_finite() {
        return Err(unencodable());
    }
    let value: f64 = temperature.to_string().parse().map_err(|_| unencodable())?;
    serde_json::Number::from_f64(value)
        .map(|n| Some(Value::Number(n)))
        .ok_or_else(unencodable)
}

/// The JSON payload of a frame, for decoders whose frames are plain JSON.
///
/// A blank frame (a keep-alive) gives `None`. So does a frame that is not
/// JSON (a proxy banner, a half-written line): streams go on past those, and
/// they are counted in `skipped` so that a stream made only of them shows.
pub(crate) fn frame_json(frame: &Frame, skipped: &mut u64) -> Option<Value> {
    let data = frame.data.trim();
    if data.is_empty() {
        return None;
    }
    match serde_json::from_str(data) {
        Ok(value) => Some(value),
        Err(_) => {
            *skipped += 1;
            tracing::debug!(
                bytes = data.len(),
                "skipping a stream frame that is not JSON"
            );
            None
        }
    }
}

/// A frame's payload read as the typed, borrowing shape `T` of that wire's
/// frames: the fast path of every decoder.
///
/// Building a `serde_json::Value` tree per frame (a map and a string
/// allocation per field, envelope fields included) cost more than the rest
/// of decoding and assembling together. A typed frame skips the fields it
/// does not need without allocating, and borrows what it can.
///
/// `None` when the payload does not fit `T` exactly: not JSON, or a field of
/// an unexpected type, or a duplicate field. The decoder then reads the frame
/// through its `Value` path, which owns every lenient rule (a wrong type is
/// treated as absent, a non-JSON frame is counted as skipped, and so on), so
/// the typed shapes must be strict: whatever they accept must mean exactly
/// what the `Value` path would make of it.
pub(crate) fn typed_frame<'a, T: Deserialize<'a>>(data: &'a str) -> Option<T> {
    serde_json::from_str(data).ok()
}

/// For `#[serde(default, deserialize_with = "present")]`: a field that is
/// there, even as `null`, is `Some`. (Plain `Option` reads `null` as absent,
/// which is wrong where the `Value` path treats a `null` member as present.)
pub(crate) fn present<'de, D, T>(deserializer: D) -> Result<Option<T>, D::Error>
where
    D: serde::Deserializer<'de>,
    T: Deserialize<'de>,
{
    T::deserialize(deserializer).map(Some)
}

/// A whole-call argument value as `raw_arguments` text, without a parse and
/// re-serialise round trip: an object (or any non-string value) is the
/// wire's own JSON text, key order and spacing included (the assembler
/// parses it, so only its meaning matters); a JSON string is the text it
/// holds (servers that send the arguments already serialised).
pub(crate) fn raw_argument_text(raw: &serde_json::value::RawValue) -> String {
    let text = raw.get();
    if text.starts_with('"') {
        // A RawValue is valid JSON, so this cannot fail; if it somehow did,
        // the raw text is still the argument as the wire sent it.
        serde_json::from_str::<String>(text).unwrap_or_else(|_| text.to_owned())
    } else {
        text.to_owned()
    }
}

/// Whether a raw JSON value is an object with no members (`{}`, `{ }`).
pub(crate) fn is_empty_object(raw: &serde_json::value::RawValue) -> bool {
    raw.get()
        .strip_prefix('{')
        .and_then(|rest| rest.strip_suffix('}'))
        .is_some_and(|inside| inside.trim().is_empty())
}

/// The native codec for a protocol.
pub fn codec_for(protocol: Protocol) -> Box<dyn WireCodec> {
    match protocol {
        Protocol::Openai => Box::new(openai::OpenAiCodec),
        Protocol::Anthropic => Box::new(anthropic::AnthropicCodec),
        Protocol::Gemini => Box::new(gemini::GeminiCodec),
        Protocol::Ollama => Box::new(ollama::OllamaCodec),
    }
}

/// Decodes a complete streamed body in one go: framing, then the codec's
/// decoder, stopping at the wire's own end marker. Used by tests, the
/// benchmarks and anything that already holds the whole body.
pub fn decode_stream_body(
    codec: &dyn WireCodec,
    body: &[u8],
) -> Result<Vec<StreamEvent>, CodecError> {
    let mut decoder = codec.stream_decoder();
    let mut frames = crate::framing::FrameReader::new(codec.framing());
    let mut out = Vec::new();
    let mut pending = Vec::new();
    frames.feed(body, &mut pending);
    frames.finish(&mut pending);
    for frame in &pending {
        if decoder.decode(frame, &mut out)? == Flow::Done {
            break;
        }
    }
    Ok(out)
}
