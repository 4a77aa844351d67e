//! Model providers.
//!
//! This crate turns the kernel's provider-neutral [`ChatRequest`] into each
//! provider's wire request, and each provider's response (streamed or whole)
//! back into the kernel's normalized [`homeagent_core::StreamEvent`]s, which
//! [`homeagent_core::StreamAssembler`] turns into one assistant turn.
//!
//! The codecs are pure: bytes in, events out, no I/O. That keeps every wire
//! quirk testable from a transcript and measurable in a benchmark. The HTTP
//! transport ([`transport::HttpProvider`]) carries them over the network;
//! sources and fallback build on top of it.

pub mod base_url;
pub mod codec;
pub mod error;
pub mod framing;
pub mod lua;
pub mod request;
pub mod source;
pub mod transport;

pub use codec::{
    Endpoint, Flow, Frame, JsonBody, Protocol, StreamDecoder, WireCodec, WireRequest, codec_for,
};
pub use error::CodecError;
pub use lua::{AdapterError, LuaAdapter, LuaCodec};
pub use request::{ChatRequest, RenderCache, ToolSpec};
pub use source::{
    API_KEY_ENV_HELP, FallbackError, FallbackOptions, LocalModel, SourceConfig, SourceHealth,
    SourceProtocol, SourceSetup, SourceStream, Sources,
};
pub use transport::{EventStream, HttpProvider, Options, ProviderError, SetupError};
