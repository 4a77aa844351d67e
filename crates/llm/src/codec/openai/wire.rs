//! The typed shape of a `chat.completion.chunk`: the decoder's fast path.
//!
//! Only the members the decoder reads are declared; everything else (`id`,
//! `object`, `model`, `system_fingerprint`, `logprobs`, ...) is skipped
//! without allocating. The types are strict on purpose: a chunk that does
//! not fit them (content as a list of parts, arguments sent as an object, an
//! `index` that is not a whole number, an `error` member) fails to parse and
//! is read by the `Value` path in `decode`, which owns those rules. Anything
//! this shape accepts must mean what the `Value` path would make of it.

use homeagent_core::{StreamEvent, ToolCallFragment, Usage};
use serde::Deserialize;
use serde::de::IgnoredAny;
use serde_json::Value;

/// One streamed chunk.
#[derive(Debug, PartialEq, Deserialize)]
pub(super) struct Chunk {
    /// Any `error` member (`null` reads as absent, as on the `Value` path):
    /// the chunk then goes the `Value` way, which builds the message.
    pub error: Option<IgnoredAny>,
    pub choices: Option<Vec<Choice>>,
    pub usage: Option<UsageCounts>,
}

#[derive(Debug, PartialEq, Deserialize)]
pub(super) struct Choice {
    index: Option<u64>,
    pub delta: Option<Delta>,
    pub finish_reason: Option<String>,
}

impl Choice {
    /// Choice 0, or a choice without an index (see `is_first_choice`).
    pub fn is_first(&self) -> bool {
        self.index.is_none_or(|i| i == 0)
    }
}

/// A chunk's `delta`. Strings are owned: every one read here is moved into
/// an event, so borrowing would only defer the allocation.
#[derive(Debug, PartialEq, Deserialize)]
pub(super) struct Delta {
    reasoning_content: Option<String>,
    reasoning: Option<String>,
    /// A list of typed parts (Mistral) does not fit: `Value` path.
    content: Option<String>,
    pub tool_calls: Option<Vec<CallEntry>>,
}

impl Delta {
    /// Reasoning, then text (same rules as `push_content`); whether the
    /// delta had a `reasoning_content` (see `decode::TurnMetadata`).
    pub fn push_content(&mut self, out: &mut Vec<StreamEvent>) -> bool {
        let deepseek = self.reasoning_content.is_some();
        let reasoning =
            non_empty(self.reasoning_content.take()).or_else(|| non_empty(self.reasoning.take()));
        if let Some(text) = reasoning {
            out.push(StreamEvent::ReasoningDelta { text });
        }
        if let Some(text) = non_empty(self.content.take()) {
            out.push(StreamEvent::TextDelta { text });
        }
        deepseek
    }
}

/// One `tool_calls` entry, nested `function` or flat.
#[derive(Debug, PartialEq, Deserialize)]
pub(super) struct CallEntry {
    index: Option<u64>,
    id: Option<String>,
    function: Option<FunctionPart>,
    name: Option<String>,
    /// Only text: arguments sent as an object go the `Value` path.
    arguments: Option<String>,
    /// Opaque per-call data to send back with the call (Gemini's thought
    /// signature, see `decode::TurnMetadata`).
    extra_content: Option<Value>,
}

#[derive(Debug, PartialEq, Deserialize)]
struct FunctionPart {
    name: Option<String>,
    arguments: Option<String>,
}

impl CallEntry {
    /// The fragment, with the nested `function` fields taking precedence
    /// over flat ones (a `null` nested field falls back to the flat one),
    /// and the entry's `extra_content`.
    pub fn into_fragment(self) -> (ToolCallFragment, Option<Value>) {
        let (nested_name, nested_arguments) = match self.function {
            Some(f) => (f.name, f.arguments),
            None => (None, None),
        };
        let fragment = ToolCallFragment {
            stream_index: self.index.and_then(|i| u32::try_from(i).ok()),
            id: self.id,
            name: nested_name.or(self.name),
            raw_arguments: nested_arguments.or(self.arguments).unwrap_or_default(),
        };
        (fragment, self.extra_content)
    }
}

/// `usage`; an object is reported even when its counts are all zero.
#[derive(Debug, PartialEq, Deserialize)]
pub(super) struct UsageCounts {
    prompt_tokens: Option<u64>,
    completion_tokens: Option<u64>,
    total_tokens: Option<u64>,
}

impl From<UsageCounts> for Usage {
    fn from(counts: UsageCounts) -> Self {
        Usage {
            prompt_tokens: counts.prompt_tokens.unwrap_or(0),
            completion_tokens: counts.completion_tokens.unwrap_or(0),
            total_tokens: counts.total_tokens.unwrap_or(0),
        }
    }
}

fn non_empty(text: Option<String>) -> Option<String> {
    text.filter(|t| !t.is_empty())
}

mod scan;
pub(super) use scan::{SkippedRun, scan_with};
