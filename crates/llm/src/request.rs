//! The provider-neutral request every codec encodes.

use homeagent_core::{Message, ToolDef};
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// A tool as the model sees it: name, description, argument schema. The
/// scheduling declarations of [`ToolDef`] stay in the kernel.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolSpec {
    pub name: String,
    pub description: String,
    /// JSON Schema of the arguments; `{"type":"object"}` when the tool has none.
    pub parameters: Value,
}

impl From<&ToolDef> for ToolSpec {
    fn from(def: &ToolDef) -> Self {
        let parameters = match &def.parameters {
            Value::Object(map) if !map.is_empty() => def.parameters.clone(),
            // Providers require an object schema even for argument-less tools.
            _ => serde_json::json!({"type": "object", "properties": {}}),
        };
        ToolSpec {
            name: def.name.clone(),
            description: def.description.clone(),
            parameters,
        }
    }
}

/// One chat request: the whole conversation, the tools, and the limits.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ChatRequest {
    /// The provider's model name.
    pub model: String,
    /// System messages anywhere in the list are gathered by codecs whose wire
    /// keeps the system prompt apart (Anthropic, Gemini).
    pub messages: Vec<Message>,
    #[serde(default)]
    pub tools: Vec<ToolSpec>,
    /// Output token limit; every wire gets it (Anthropic requires it).
    pub max_tokens: u32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub temperature: Option<f32>,
    /// Ask for a streamed response.
    pub stream: bool,
}
