//! Conversation messages, as the kernel stores and replays them.
//!
//! The shapes here are provider-neutral. Codecs in `homeagent-llm` translate
//! them to each wire format; nothing in this module knows about any wire.

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// One message of a conversation.
///
/// The variants encode two pairing rules in the type: an assistant message
/// carries *all* tool calls of its turn (never one message per call), and a
/// tool message answers exactly one `tool_call_id`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "role", rename_all = "lowercase")]
pub enum Message {
    System { content: String },
    User { content: String },
    Assistant(AssistantMessage),
    Tool(ToolMessage),
}

impl Message {
    pub fn system(content: impl Into<String>) -> Self {
        Message::System {
            content: content.into(),
        }
    }

    pub fn user(content: impl Into<String>) -> Self {
        Message::User {
            content: content.into(),
        }
    }

    /// The role name as providers spell it.
    pub fn role(&self) -> &'static str {
        match self {
            Message::System { .. } => "system",
            Message::User { .. } => "user",
            Message::Assistant(_) => "assistant",
            Message::Tool(_) => "tool",
        }
    }
}

/// What the model said in one turn: its text once, its reasoning, and every
/// tool call it emitted, in stream-index order.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct AssistantMessage {
    #[serde(default)]
    pub content: String,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub reasoning: Vec<ReasoningPart>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tool_calls: Vec<ToolCall>,
}

/// A piece of model reasoning together with the opaque provider metadata
/// (Anthropic thinking signatures, Gemini thought signatures) that must be
/// sent back byte for byte when the history is replayed.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ReasoningPart {
    #[serde(default)]
    pub text: String,
    /// Never interpreted by the kernel; the codec that produced it reads it back.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metadata: Option<Value>,
}

/// One tool call of an assistant turn.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolCall {
    pub id: String,
    pub name: String,
    /// Always a JSON object. A call whose raw arguments could not be parsed
    /// holds `{}` here (providers require an object when the call is replayed)
    /// and is answered with its argument error instead of being run.
    pub arguments: Value,
    /// The argument text exactly as the model streamed it.
    #[serde(default)]
    pub raw_arguments: String,
}

/// The answer to exactly one tool call.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolMessage {
    pub tool_call_id: String,
    /// The tool's name, for wires that want it (Gemini's `functionResponse`).
    pub name: String,
    /// The rendered text the model reads.
    pub content: String,
    /// False when the call failed; wires with a native error channel
    /// (Anthropic `is_error`, Gemini's error field) use it.
    pub success: bool,
}
