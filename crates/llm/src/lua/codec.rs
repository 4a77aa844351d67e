//! A [`WireCodec`] made of a Lua adapter.
//!
//! Requests start as the native OpenAI body and go through
//! `transform_request`; headers come from `build_headers` (or the static
//! `headers`), with a bearer key added only when nothing set
//! `authorization`. Streamed chunks go through `transform_stream_chunk`,
//! falling back to the native OpenAI decoder when it returns `""` (unless
//! the fallback is switched off, as the conformance tests do).

use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use crate::codec::JsonBody;
use homeagent_core::StreamEvent;
use serde_json::json;

use super::{AdapterError, ChunkResult, LuaAdapter};
use crate::codec::openai::OpenAiCodec;
use crate::codec::{
    Endpoint, Flow, Frame, Framing, Protocol, StreamDecoder, WireCodec, WireRequest,
};
use crate::error::CodecError;
use crate::request::ChatRequest;

const PROTOCOL: &str = "lua";

/// A codec driven by a [`LuaAdapter`].
#[derive(Debug, Clone)]
pub struct LuaCodec {
    adapter: Arc<LuaAdapter>,
    fallback: bool,
}

impl LuaCodec {
    /// A codec over `adapter`, with the standard OpenAI fallback on.
    pub fn new(adapter: Arc<LuaAdapter>) -> Self {
        LuaCodec {
            adapter,
            fallback: true,
        }
    }

    /// Switches the fallback to the standard OpenAI decoder on or off. Off,
    /// an adapter that returns `""` (or has no `transform_stream_chunk`)
    /// fails the stream: every fragment must come from the Lua code.
    #[must_use]
    pub fn with_fallback(mut self, fallback: bool) -> Self {
        self.fallback = fallback;
        self
    }

    pub fn adapter(&self) -> &LuaAdapter {
        &self.adapter
    }
}

fn codec_error(error: AdapterError) -> CodecError {
    match error {
        AdapterError::ProviderReported {
            message, transient, ..
        } => CodecError::ProviderReported {
            protocol: PROTOCOL,
            message,
            transient,
        },
        other => CodecError::MalformedResponse {
            protocol: PROTOCOL,
            detail: other.to_string(),
        },
    }
}

impl WireCodec for LuaCodec {
    /// The wire the adapter's input is in (and the fallback reads).
    fn protocol(&self) -> Protocol {
        Protocol::Openai
    }

    fn build_request(
        &self,
        endpoint: &Endpoint,
        request: &ChatRequest,
    ) -> Result<WireRequest, CodecError> {
        let unencodable = |error: AdapterError| CodecError::Unencodable {
            protocol: PROTOCOL,
            detail: error.to_string(),
        };
        let openai = OpenAiCodec.build_request(endpoint, request)?;
        let text = self
            .adapter
            .transform_request(&openai.body.text())
            .map_err(unencodable)?;
        // Sent as the adapter wrote it: a signature it computed over `text`
        // (passed to `headers` as `body`) holds for the bytes on the wire.
        let body = JsonBody::parse(text).map_err(|e| CodecError::Unencodable {
            protocol: PROTOCOL,
            detail: format!(
                "adapter {}: `transform_request` returned text that is not JSON ({e})",
                self.adapter.file()
            ),
        })?;
        // The endpoint joins the path, before any query the base URL has
        // (an Azure deployment's `?api-version=`).
        let (path, query) = match endpoint.base_url.split_once('?') {
            Some((path, query)) => (path, Some(query)),
            None => (endpoint.base_url.as_str(), None),
        };
        let mut url = format!("{}{}", path.trim_end_matches('/'), self.adapter.endpoint());
        if let Some(query) = query {
            url.push('?');
            url.push_str(query);
        }
        let timestamp = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_secs())
            .unwrap_or(0);
        let meta = json!({
            "url": url,
            "method": "POST",
            "body": body.text(),
            "api_key": endpoint.api_key.clone().unwrap_or_default(),
            "timestamp": timestamp,
        });
        let mut headers = self.adapter.headers(&meta).map_err(unencodable)?;
        if !headers.iter().any(|(name, _)| name == "content-type") {
            headers.push(("content-type".to_owned(), "application/json".to_owned()));
        }
        // A header set to "" is not sent, but still counts as set (an
        // adapter with its own auth scheme blocks the bearer key that way).
        let authorization_set = headers.iter().any(|(name, _)| name == "authorization");
        headers.retain(|(_, value)| !value.is_empty());
        if !authorization_set
            && let Some(key) = endpoint.api_key.as_deref().filter(|k| !k.is_empty())
        {
            headers.push(("authorization".to_owned(), format!("Bearer {key}")));
        }
        Ok(WireRequest { url, headers, body })
    }

    fn framing(&self) -> Framing {
        Framing::Sse
    }

    fn stream_decoder(&self) -> Box<dyn StreamDecoder> {
        Box::new(LuaDecoder {
            adapter: Arc::clone(&self.adapter),
            fallback: self.fallback.then(|| OpenAiCodec.stream_decoder()),
        })
    }

    fn decode_response(&self, body: &[u8]) -> Result<Vec<StreamEvent>, CodecError> {
        let text = String::from_utf8_lossy(body);
        match self.adapter.transform_response(&text) {
            Some(result) => result.map_err(codec_error),
            None => OpenAiCodec.decode_response(body),
        }
    }

    fn error_message(&self, status: u16, body: &[u8]) -> String {
        let text = String::from_utf8_lossy(body);
        match self.adapter.transform_error(status, &text) {
            Some(Ok(reason)) if !reason.trim().is_empty() => {
                format!("HTTP {status}: {}", reason.trim())
            }
            Some(Err(error)) => {
                tracing::warn!(%error, "the adapter's transform_error failed");
                OpenAiCodec.error_message(status, body)
            }
            _ => OpenAiCodec.error_message(status, body),
        }
    }
}

/// Decodes one streamed response through the adapter.
struct LuaDecoder {
    adapter: Arc<LuaAdapter>,
    /// The standard OpenAI decoder, when the fallback is on.
    fallback: Option<Box<dyn StreamDecoder>>,
}

impl LuaDecoder {
    fn standard(
        &mut self,
        frame: &Frame,
        out: &mut Vec<StreamEvent>,
        why: &str,
    ) -> Result<Flow, CodecError> {
        match self.fallback.as_mut() {
            Some(decoder) => decoder.decode(frame, out),
            None => Err(CodecError::MalformedResponse {
                protocol: PROTOCOL,
                detail: format!(
                    "adapter {}: {why}, and the fallback to the standard OpenAI decoder is off",
                    self.adapter.file()
                ),
            }),
        }
    }
}

impl StreamDecoder for LuaDecoder {
    fn decode(&mut self, frame: &Frame, out: &mut Vec<StreamEvent>) -> Result<Flow, CodecError> {
        let data = frame.data.trim();
        if data.is_empty() {
            return Ok(Flow::Continue);
        }
        if data == "[DONE]" {
            return Ok(Flow::Done);
        }
        match self.adapter.transform_stream_chunk(data) {
            None => self.standard(frame, out, "it has no `transform_stream_chunk`"),
            Some(Ok(ChunkResult::Standard)) => {
                self.standard(frame, out, "`transform_stream_chunk` returned \"\"")
            }
            Some(Ok(ChunkResult::Events { events, done })) => {
                out.extend(events);
                Ok(if done { Flow::Done } else { Flow::Continue })
            }
            Some(Err(error)) => Err(codec_error(error)),
        }
    }

    fn skipped_frames(&self) -> u64 {
        self.fallback.as_ref().map_or(0, |d| d.skipped_frames())
    }
}
