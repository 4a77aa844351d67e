//! The Ollama wire (being written).

use homeagent_core::StreamEvent;

use super::{Endpoint, Flow, Frame, Framing, Protocol, StreamDecoder, WireCodec, WireRequest};
use crate::error::CodecError;
use crate::request::ChatRequest;

/// The Ollama codec.
#[derive(Debug, Clone, Copy, Default)]
pub struct OllamaCodec;

impl WireCodec for OllamaCodec {
    fn protocol(&self) -> Protocol {
        Protocol::Ollama
    }

    fn build_request(
        &self,
        _endpoint: &Endpoint,
        _request: &ChatRequest,
    ) -> Result<WireRequest, CodecError> {
        Err(CodecError::Unencodable {
            protocol: "ollama",
            detail: "not implemented yet".into(),
        })
    }

    fn framing(&self) -> Framing {
        Framing::Sse
    }

    fn stream_decoder(&self) -> Box<dyn StreamDecoder> {
        Box::new(Decoder)
    }

    fn decode_response(&self, _body: &[u8]) -> Result<Vec<StreamEvent>, CodecError> {
        Err(CodecError::MalformedResponse {
            protocol: "ollama",
            detail: "not implemented yet".into(),
        })
    }

    fn error_message(&self, status: u16, _body: &[u8]) -> String {
        format!("HTTP {status}")
    }
}

struct Decoder;

impl StreamDecoder for Decoder {
    fn decode(&mut self, _frame: &Frame, _out: &mut Vec<StreamEvent>) -> Result<Flow, CodecError> {
        Ok(Flow::Continue)
    }

    fn skipped_frames(&self) -> u64 {
        0
    }
}
