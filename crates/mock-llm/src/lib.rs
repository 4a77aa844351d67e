//! HomeAgent's scripted mock model.
//!
//! The mock plays a model from trigger words in the last user message
//! (`!slowbatch4`, `!truncate`, ...), so the demo, the tests and the
//! benchmarks can drive the kernel through realistic tool-call streams
//! without a network or a real provider.
//!
//! [`script::respond`] is the whole model: messages in, one turn of
//! normalized [`homeagent_core::StreamEvent`]s out. It knows no wire format;
//! the HTTP server in [`server`] (`homeagent mock-llm`) speaks OpenAI,
//! Anthropic, Gemini and Ollama on their native paths and encodes these same
//! events onto each wire, so every protocol sees the same calls.

pub mod inputs;
pub mod script;
pub mod server;
mod stats;
mod wire;

pub use server::{MockServer, ServerConfig, serve};

pub use script::{
    DEFAULT_TOOL_SLEEP_MS, MAX_BATCH, MAX_TOOL_SLEEP_MS, Reply, Report, ScriptOptions,
    ScriptedCall, ScriptedTurn, Trigger, parse_trigger, respond,
};
