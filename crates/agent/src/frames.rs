//! What a turn reports as it runs: the frames of `homeagent run --json`,
//! the sessions API's event stream and the chat UI.
//!
//! Every input ends with exactly one terminal frame ([`Frame::is_terminal`]):
//! `response`, `error` or `skipped`. Tool calls get a start and an end
//! frame each, also calls that never ran (bad arguments, denied, stopped).

use std::sync::Arc;

use homeagent_core::{ToolEvent, Usage};
use serde::{Deserialize, Serialize};

/// One frame; serialized with a `type` field.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum Frame {
    /// A piece of the model's text, as it streams.
    ContentDelta { text: String },
    /// A tool call's start or end (`phase`), as the kernel reports it.
    /// Shared: the frame goes to the input's caller and to every observer
    /// (the server's event hub keeps it), and a start event holds the
    /// call's arguments.
    ToolCall(Arc<ToolEvent>),
    /// The final answer.
    Response {
        content: String,
        /// Model requests made for this input.
        turns: u32,
        usage: UsageFrame,
    },
    /// The input was not run.
    Skipped { reason: SkipReason },
    /// The input failed.
    Error {
        message: String,
        /// A matchable code: `model`, `stopped`, `preempted`, `store`,
        /// `pairing`.
        code: String,
    },
}

impl Frame {
    /// Whether this frame ends its input's frames.
    pub fn is_terminal(&self) -> bool {
        matches!(
            self,
            Frame::Response { .. } | Frame::Skipped { .. } | Frame::Error { .. }
        )
    }

    pub(crate) fn error(code: &str, message: impl Into<String>) -> Frame {
        Frame::Error {
            message: message.into(),
            code: code.to_owned(),
        }
    }
}

/// Token counts of every model request of one input.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct UsageFrame {
    pub prompt_tokens: u64,
    pub completion_tokens: u64,
    pub total_tokens: u64,
}

impl UsageFrame {
    pub(crate) fn add(&mut self, usage: &Usage) {
        self.prompt_tokens += usage.prompt_tokens;
        self.completion_tokens += usage.completion_tokens;
        self.total_tokens += if usage.total_tokens > 0 {
            usage.total_tokens
        } else {
            usage.prompt_tokens + usage.completion_tokens
        };
    }
}

/// Why an input was not run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SkipReason {
    /// The input was empty (or only whitespace).
    EmptyInput,
    /// The session's queue was full.
    QueueFull,
    /// The same input arrived again within `scheduler.dedup_window`.
    Duplicate,
    /// A `stop` dropped it from the queue before it ran.
    Stopped,
}

impl SkipReason {
    pub fn as_str(self) -> &'static str {
        match self {
            SkipReason::EmptyInput => "empty_input",
            SkipReason::QueueFull => "queue_full",
            SkipReason::Duplicate => "duplicate",
            SkipReason::Stopped => "stopped",
        }
    }
}
