//! Model providers.
//!
//! This crate turns the kernel's provider-neutral [`ChatRequest`] into each
//! provider's wire request, and each provider's response (streamed or whole)
//! back into the kernel's normalized [`homeagent_core::StreamEvent`]s, which
//! [`homeagent_core::StreamAssembler`] turns into one assistant turn.
//!
//! The codecs are pure: bytes in, events out, no I/O. That keeps every wire
//! quirk testable from a transcript and measurable in a benchmark. HTTP
//! transport, sources and fallback build on top of them.

pub mod codec;
pub mod error;
pub mod framing;
pub mod request;

pub use codec::{
    Endpoint, Flow, Frame, Protocol, StreamDecoder, WireCodec, WireRequest, codec_for,
};
pub use error::CodecError;
pub use request::{ChatRequest, ToolSpec};
