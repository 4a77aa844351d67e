//! Writing a Chat Completions request.

use homeagent_core::{AssistantMessage, Message, ToolMessage};
use serde_json::{Map, Value, json};

use super::PROTOCOL;
use crate::codec::{Endpoint, WireRequest, temperature_json};
use crate::error::CodecError;
use crate::request::{ChatRequest, ToolSpec};

pub(super) fn build(endpoint: &Endpoint, request: &ChatRequest) -> Result<WireRequest, CodecError> {
    let url = format!(
        "{}/chat/completions",
        endpoint.base_url.trim_end_matches('/')
    );
    let mut headers = vec![("content-type".to_owned(), "application/json".to_owned())];
    // Local servers (llama.cpp, LM Studio, vLLM) usually need no key; an
    // empty `Bearer ` header would only confuse the ones that check it.
    if let Some(key) = endpoint.api_key.as_deref().filter(|k| !k.is_empty()) {
        headers.push(("authorization".to_owned(), format!("Bearer {key}")));
    }

    let mut body = Map::new();
    body.insert("model".into(), Value::String(request.model.clone()));
    let messages = request
        .messages
        .iter()
        .map(encode_message)
        .collect::<Result<Vec<_>, _>>()?;
    body.insert("messages".into(), Value::Array(messages));
    if !request.tools.is_empty() {
        let tools = request.tools.iter().map(encode_tool).collect();
        body.insert("tools".into(), Value::Array(tools));
    }
    body.insert("max_tokens".into(), Value::from(request.max_tokens));
    if let Some(temperature) = request.temperature {
        body.insert(
            "temperature".into(),
            temperature_json(PROTOCOL, temperature)?,
        );
    }
    body.insert("stream".into(), Value::Bool(request.stream));
    if request.stream {
        // Without it the stream carries no token counts at all; with it they
        // arrive in a last chunk whose `choices` is empty.
        body.insert("stream_options".into(), json!({"include_usage": true}));
    }
    Ok(WireRequest {
        url,
        headers,
        body: Value::Object(body),
    })
}

fn encode_message(message: &Message) -> Result<Value, CodecError> {
    Ok(match message {
        Message::System { content } => json!({"role": "system", "content": content}),
        Message::User { content } => json!({"role": "user", "content": content}),
        Message::Assistant(assistant) => encode_assistant(assistant)?,
        Message::Tool(tool) => encode_tool_result(tool),
    })
}

/// Reasoning is not replayed: OpenAI has no input field for it, and DeepSeek
/// rejects `reasoning_content` in the input.
fn encode_assistant(message: &AssistantMessage) -> Result<Value, CodecError> {
    let mut out = Map::new();
    out.insert("role".into(), Value::String("assistant".into()));
    let content = if message.content.is_empty() && !message.tool_calls.is_empty() {
        // OpenAI's own shape for a turn that only called tools.
        Value::Null
    } else {
        Value::String(message.content.clone())
    };
    out.insert("content".into(), content);
    if !message.tool_calls.is_empty() {
        let calls = message
            .tool_calls
            .iter()
            .map(|call| {
                // The wire wants the arguments as a JSON *string*.
                let arguments = serde_json::to_string(&call.arguments).map_err(|e| {
                    CodecError::Unencodable {
                        protocol: PROTOCOL,
                        detail: format!("arguments of tool call {}: {e}", call.id),
                    }
                })?;
                Ok(json!({
                    "id": call.id,
                    "type": "function",
                    "function": {"name": call.name, "arguments": arguments},
                }))
            })
            .collect::<Result<Vec<_>, CodecError>>()?;
        out.insert("tool_calls".into(), Value::Array(calls));
    }
    Ok(Value::Object(out))
}

/// OpenAI has no error flag on tool messages, so a failure is framed as a
/// JSON error object the model cannot mistake for a result.
fn encode_tool_result(tool: &ToolMessage) -> Value {
    let content = if tool.success {
        tool.content.clone()
    } else {
        json!({"error": tool.content}).to_string()
    };
    json!({"role": "tool", "tool_call_id": tool.tool_call_id, "content": content})
}

fn encode_tool(tool: &ToolSpec) -> Value {
    json!({
        "type": "function",
        "function": {
            "name": tool.name,
            "description": tool.description,
            "parameters": tool.parameters,
        },
    })
}
