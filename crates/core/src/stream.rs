//! The normalized stream every provider codec produces, whatever its wire.

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// One piece of a tool call as it arrives from the wire.
///
/// `stream_index` is the provider's own position for the call (OpenAI's
/// `index`, Anthropic's content-block index, the order of Gemini's and
/// Ollama's whole calls). Adapters must pass it through unchanged: without it,
/// parallel calls collapse into one.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ToolCallFragment {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stream_index: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// A piece of the argument text; pieces of one call concatenate.
    #[serde(default)]
    pub raw_arguments: String,
}

/// Token counts for one model call.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Usage {
    pub prompt_tokens: u64,
    pub completion_tokens: u64,
    pub total_tokens: u64,
}

impl Usage {
    /// Folds a later usage report in: non-zero counts win, because providers
    /// send partial reports (Anthropic: input at the start, output at the end).
    pub fn merge(&mut self, other: Usage) {
        if other.prompt_tokens != 0 {
            self.prompt_tokens = other.prompt_tokens;
        }
        if other.completion_tokens != 0 {
            self.completion_tokens = other.completion_tokens;
        }
        if other.total_tokens != 0 {
            self.total_tokens = other.total_tokens;
        }
        // Figures come from the provider: saturate, never overflow.
        let sum = self.prompt_tokens.saturating_add(self.completion_tokens);
        if self.total_tokens < sum {
            self.total_tokens = sum;
        }
    }
}

/// Why the model stopped.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FinishReason {
    Stop,
    ToolCalls,
    /// The output token limit was reached: the last call may be cut off.
    Length,
    ContentFilter,
    Other(String),
}

impl FinishReason {
    /// Whether the model's output was cut off at a limit rather than ended
    /// by the model: the token limit, or a full context window (Anthropic's
    /// `model_context_window_exceeded`, Mistral's `model_length`, kept as
    /// `Other` since raising `max_tokens` does not help them). A call that
    /// was still arriving is then cut, never runnable.
    pub fn cut_output(&self) -> bool {
        match self {
            FinishReason::Length => true,
            FinishReason::Other(reason) => {
                matches!(
                    reason.as_str(),
                    "model_context_window_exceeded" | "model_length"
                )
            }
            _ => false,
        }
    }

    /// Normalizes a wire value. An empty string is *not* a finish: some
    /// servers send `finish_reason: ""` on every chunk.
    pub fn parse(raw: &str) -> Option<FinishReason> {
        Some(match raw.trim() {
            "" | "null" => return None,
            // `eos`/`eos_token`: servers that report the model's own end
            // token (Text Generation Inference, Together); Gemini may leave
            // a normal end unspecified.
            "stop"
            | "end_turn"
            | "STOP"
            | "stop_sequence"
            | "eos"
            | "eos_token"
            | "FINISH_REASON_UNSPECIFIED" => FinishReason::Stop,
            "tool_calls" | "tool_use" | "function_call" => FinishReason::ToolCalls,
            // Not Mistral's `model_length` (the context window is full):
            // raising the output limit, as the note advises, would not help.
            "length" | "max_tokens" | "MAX_TOKENS" => FinishReason::Length,
            // Gemini names the policy that withheld the answer.
            "content_filter" | "SAFETY" | "refusal" | "PROHIBITED_CONTENT" | "BLOCKLIST"
            | "SPII" | "RECITATION" | "IMAGE_SAFETY" => FinishReason::ContentFilter,
            other => FinishReason::Other(other.to_owned()),
        })
    }
}

/// One normalized stream event.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum StreamEvent {
    TextDelta {
        text: String,
    },
    ReasoningDelta {
        text: String,
    },
    /// Opaque provider metadata closing the current reasoning part (a
    /// thinking signature); replayed verbatim.
    ReasoningMetadata {
        metadata: Value,
    },
    ToolCall(ToolCallFragment),
    Usage(Usage),
    /// The wire's finish reason, as sent. Empty strings are ignored.
    Finish {
        reason: String,
    },
}
