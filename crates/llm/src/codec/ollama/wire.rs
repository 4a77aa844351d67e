//! The typed shape of an Ollama `/api/chat` line: the decoder's fast path.
//!
//! Only the members the decoder reads are declared (`model`, `created_at`,
//! the durations, ... are skipped without allocating), and a call's
//! `arguments` object is kept as the wire's own text ([`RawValue`]), so it
//! reaches the assembler without being parsed and re-serialised here. The
//! types are strict on purpose: a line that does not fit (an `error`, a
//! member of an unexpected type) fails to parse and is read by the `Value`
//! path, which owns those rules. Anything this shape accepts must mean what
//! the `Value` path would make of it.

use serde::Deserialize;
use serde::de::IgnoredAny;
use serde_json::value::RawValue;

#[derive(Debug, Deserialize)]
pub(super) struct Line<'a> {
    /// `null` reads as absent, as `error_text` does; anything else goes the
    /// `Value` way, which words the message.
    pub error: Option<IgnoredAny>,
    #[serde(borrow)]
    pub message: Option<Message<'a>>,
    pub done: Option<bool>,
    pub done_reason: Option<String>,
    pub prompt_eval_count: Option<u64>,
    pub eval_count: Option<u64>,
}

#[derive(Debug, Deserialize)]
pub(super) struct Message<'a> {
    pub thinking: Option<String>,
    pub content: Option<String>,
    #[serde(borrow)]
    pub tool_calls: Option<Vec<Call<'a>>>,
}

#[derive(Debug, Deserialize)]
pub(super) struct Call<'a> {
    pub id: Option<String>,
    #[serde(borrow)]
    pub function: Option<Function<'a>>,
}

#[derive(Debug, Deserialize)]
pub(super) struct Function<'a> {
    pub name: Option<String>,
    /// An object (the norm) or a string of JSON text (some servers); `null`
    /// reads as absent.
    #[serde(borrow)]
    pub arguments: Option<&'a RawValue>,
}
