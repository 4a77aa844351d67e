//! HomeAgent's scripted mock model.
//!
//! The mock plays a model from trigger words in the last user message
//! (`!slowbatch4`, `!truncate`, ...), so the demo, the tests and the
//! benchmarks can drive the kernel through realistic tool-call streams
//! without a network or a real provider.
//!
//! [`script::respond`] is the whole model: messages in, one turn of
//! normalized [`homeagent_core::StreamEvent`]s out. It knows no wire format;
//! the HTTP server that speaks OpenAI, Anthropic, Gemini and Ollama (see the
//! providers issue) encodes these same events, so every protocol sees the
//! same calls.

pub mod script;

pub use script::{
    DEFAULT_TOOL_SLEEP_MS, MAX_BATCH, Reply, Report, ScriptOptions, ScriptedCall, ScriptedTurn,
    Trigger, parse_trigger, respond,
};
