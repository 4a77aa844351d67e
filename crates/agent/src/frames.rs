//! What a turn reports as it runs: the frames of `homeagent run --json`,
//! the sessions API's event stream and the chat UI.
//!
//! Every input ends with exactly one terminal frame ([`Frame::is_terminal`]):
//! `response`, `error` or `skipped`. Tool calls get a start and an end
//! frame each, also calls that never ran (bad arguments, denied, stopped).

use std::sync::Arc;

use homeagent_core::{FinishReason, ToolEvent, Usage};
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
        /// Why the answer may be incomplete; absent when the model
        /// finished it. Serialized with its [`Incomplete::note`] beside the
        /// reason, so every client can show the person what the console
        /// shows.
        #[serde(
            default,
            skip_serializing_if = "Option::is_none",
            serialize_with = "incomplete_with_note"
        )]
        incomplete: Option<Incomplete>,
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

/// Why a final answer may be incomplete: the model's turn ended for a
/// reason other than finishing it. Shown to the person (a note after the
/// answer, `finish_reason` on the OpenAI-compatible endpoint), never sent
/// back to the model.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "reason", rename_all = "snake_case")]
pub enum Incomplete {
    /// The answer reached the output token limit.
    Length {
        /// `agent.max_tokens`, the limit of each model request.
        max_tokens: u32,
    },
    /// The provider's content policy stopped or withheld the answer
    /// (OpenAI `content_filter`, Gemini `SAFETY`, Anthropic `refusal`).
    ContentFilter,
    /// Another reason the wire named (Gemini `MALFORMED_FUNCTION_CALL`,
    /// Anthropic `pause_turn`, ...), as sent.
    Other { finish_reason: String },
    /// The agent stopped after `agent.max_tool_turns` batches of tool
    /// calls, without asking the model about the last batch's results.
    ToolTurns { max_tool_turns: u32 },
    /// The model asked for tool calls that arrived without a tool name (a
    /// provider or adapter lost it), so none could run and the reply is
    /// only what came with them.
    UnnamedCalls { dropped: usize },
}

/// An [`Incomplete`] as the frames carry it: its fields and its note.
fn incomplete_with_note<S: serde::Serializer>(
    incomplete: &Option<Incomplete>,
    serializer: S,
) -> Result<S::Ok, S::Error> {
    #[derive(Serialize)]
    struct WithNote<'a> {
        #[serde(flatten)]
        incomplete: &'a Incomplete,
        note: String,
    }
    incomplete
        .as_ref()
        .map(|incomplete| WithNote {
            incomplete,
            note: incomplete.note(),
        })
        .serialize(serializer)
}

impl Incomplete {
    /// What a turn without runnable calls leaves incomplete, if anything:
    /// calls dropped for want of a name first (the finish reason then says
    /// `tool_calls`, which alone would pass for a finished answer), else
    /// what its finish reason means.
    pub fn of_turn(turn: &homeagent_core::AssembledTurn, max_tokens: u32) -> Option<Incomplete> {
        let dropped = turn
            .diagnostics
            .iter()
            .filter(|d| matches!(d, homeagent_core::Diagnostic::NamelessCallDropped { .. }))
            .count();
        if dropped > 0 {
            return Some(Incomplete::UnnamedCalls { dropped });
        }
        Incomplete::from_finish(turn.finish_reason.as_ref(), max_tokens)
    }

    /// The incompleteness a turn's finish reason means, if any.
    pub fn from_finish(reason: Option<&FinishReason>, max_tokens: u32) -> Option<Incomplete> {
        match reason? {
            FinishReason::Stop | FinishReason::ToolCalls => None,
            FinishReason::Length => Some(Incomplete::Length { max_tokens }),
            FinishReason::ContentFilter => Some(Incomplete::ContentFilter),
            FinishReason::Other(other) => Some(Incomplete::Other {
                finish_reason: other.clone(),
            }),
        }
    }

    /// The note shown after the answer.
    pub fn note(&self) -> String {
        match self {
            Incomplete::Length { max_tokens } => format!(
                "[the answer was cut off: it reached the output token limit \
                 (agent.max_tokens = {max_tokens}); ask me to continue, or raise agent.max_tokens]"
            ),
            Incomplete::ContentFilter => {
                "[the model's provider stopped or withheld this answer (its content policy: \
                 safety, recitation or blocked terms)]"
                    .to_owned()
            }
            Incomplete::Other { finish_reason } => {
                format!("[the model stopped early: its provider says {finish_reason}]")
            }
            Incomplete::UnnamedCalls { dropped } => {
                let calls = if *dropped == 1 { "call" } else { "calls" };
                let their = if *dropped == 1 { "its" } else { "their" };
                let they = if *dropped == 1 { "it" } else { "they" };
                format!(
                    "[the model asked for {dropped} tool {calls} without naming {their} tool, \
                     so {they} could not run; ask again, or try another model]"
                )
            }
            Incomplete::ToolTurns { max_tool_turns } => {
                let turns = if *max_tool_turns == 1 {
                    "turn"
                } else {
                    "turns"
                };
                format!(
                    "[stopped after {max_tool_turns} tool {turns}, the most agent.max_tool_turns \
                     allows; ask me to continue]"
                )
            }
        }
    }

    /// The OpenAI `finish_reason` that says the same, if there is one
    /// (`length`, `content_filter`); without one, an OpenAI client learns
    /// it only from the note.
    pub fn openai_finish_reason(&self) -> Option<&'static str> {
        match self {
            Incomplete::Length { .. } => Some("length"),
            Incomplete::ContentFilter => Some("content_filter"),
            Incomplete::Other { .. }
            | Incomplete::ToolTurns { .. }
            | Incomplete::UnnamedCalls { .. } => None,
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
    /// Adds one request's counts. They are the provider's, so every sum
    /// saturates rather than overflow.
    pub(crate) fn add(&mut self, usage: &Usage) {
        self.prompt_tokens = self.prompt_tokens.saturating_add(usage.prompt_tokens);
        self.completion_tokens = self
            .completion_tokens
            .saturating_add(usage.completion_tokens);
        let total = if usage.total_tokens > 0 {
            usage.total_tokens
        } else {
            usage.prompt_tokens.saturating_add(usage.completion_tokens)
        };
        self.total_tokens = self.total_tokens.saturating_add(total);
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

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)] // a panic in a test is a test failure

    use super::*;

    /// OpenAI's `finish_reason` has words for the token limit and the
    /// content filter only; the rest must travel in the note.
    #[test]
    fn only_what_openai_can_name_gets_a_finish_reason() {
        let cases = [
            (Incomplete::Length { max_tokens: 9 }, Some("length")),
            (Incomplete::ContentFilter, Some("content_filter")),
            (
                Incomplete::Other {
                    finish_reason: "pause_turn".into(),
                },
                None,
            ),
            (Incomplete::ToolTurns { max_tool_turns: 3 }, None),
        ];
        for (incomplete, expected) in cases {
            assert_eq!(
                incomplete.openai_finish_reason(),
                expected,
                "{incomplete:?}"
            );
        }
    }

    #[test]
    fn the_tool_turns_note_names_the_setting_and_counts_right() {
        let one = Incomplete::ToolTurns { max_tool_turns: 1 }.note();
        assert!(one.starts_with("[stopped after 1 tool turn,"), "{one}");
        let three = Incomplete::ToolTurns { max_tool_turns: 3 }.note();
        assert!(three.starts_with("[stopped after 3 tool turns,"), "{three}");
        assert!(three.contains("agent.max_tool_turns"), "{three}");
    }

    /// The counts are the provider's: a sum of them saturates instead of
    /// overflowing.
    #[test]
    fn usage_sums_saturate() {
        let mut frame = UsageFrame::default();
        let huge = Usage {
            prompt_tokens: u64::MAX - 1,
            completion_tokens: 5,
            total_tokens: 0,
        };
        frame.add(&huge);
        frame.add(&huge);
        assert_eq!(frame.prompt_tokens, u64::MAX);
        assert_eq!(frame.completion_tokens, 10);
        assert_eq!(frame.total_tokens, u64::MAX);
        frame.add(&Usage {
            prompt_tokens: 1,
            completion_tokens: 2,
            total_tokens: 3,
        });
        assert_eq!(frame.completion_tokens, 12);
    }

    /// The frame carries the note beside the reason, and reads back.
    #[test]
    fn a_response_frame_carries_the_note_beside_the_reason() {
        let frame = Frame::Response {
            content: String::new(),
            turns: 1,
            usage: UsageFrame::default(),
            incomplete: Some(Incomplete::ToolTurns { max_tool_turns: 2 }),
        };
        let json = serde_json::to_value(&frame).unwrap();
        assert_eq!(json["incomplete"]["reason"], "tool_turns");
        assert_eq!(json["incomplete"]["max_tool_turns"], 2);
        assert_eq!(
            json["incomplete"]["note"],
            Incomplete::ToolTurns { max_tool_turns: 2 }.note()
        );
        assert_eq!(serde_json::from_value::<Frame>(json).unwrap(), frame);
    }
}
