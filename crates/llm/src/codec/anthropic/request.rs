//! Building the Anthropic request body.

use std::collections::{HashMap, HashSet};

use homeagent_core::{AssistantMessage, Message, ToolMessage};
use serde::Serialize;
use serde_json::value::RawValue;
use serde_json::{Map, Value, json};

use super::{API_VERSION, PROTOCOL};
use crate::codec::{Endpoint, WireRequest, encoded_body, temperature_json};
use crate::error::CodecError;
use crate::request::ChatRequest;

/// The `POST /v1/messages` request for `request`.
pub(super) fn build(endpoint: &Endpoint, request: &ChatRequest) -> Result<WireRequest, CodecError> {
    let url = format!("{}/v1/messages", endpoint.base_url.trim_end_matches('/'));
    let mut headers = Vec::with_capacity(3);
    if let Some(key) = &endpoint.api_key {
        headers.push(("x-api-key".to_owned(), key.clone()));
    }
    headers.push(("anthropic-version".to_owned(), API_VERSION.to_owned()));
    headers.push(("content-type".to_owned(), "application/json".to_owned()));

    let ids = WireIds::of(&request.messages);
    let mut system: Vec<&str> = Vec::new();
    let mut messages: Vec<Value> = Vec::with_capacity(request.messages.len());
    for message in &request.messages {
        match message {
            Message::System { content } => system.push(content),
            Message::User { content } => {
                // Anthropic rejects text blocks without non-whitespace text.
                if has_text(content) {
                    push_user_block(&mut messages, json!({"type": "text", "text": content}));
                }
            }
            Message::Assistant(assistant) => {
                let blocks = assistant_blocks(assistant, &ids);
                // An assistant turn with nothing Anthropic can replay (e.g.
                // only another provider's reasoning) is left out rather than
                // sent empty, which the API rejects.
                if !blocks.is_empty() {
                    messages.push(json!({"role": "assistant", "content": blocks}));
                }
            }
            Message::Tool(tool) => push_user_block(&mut messages, tool_result(tool, &ids)),
        }
    }
    if messages.is_empty() {
        return Err(CodecError::Unencodable {
            protocol: PROTOCOL,
            detail: "Anthropic needs at least one user or assistant message".into(),
        });
    }

    let body = Body {
        model: &request.model,
        max_tokens: request.max_tokens,
        system: (!system.is_empty()).then(|| system.join("\n\n")),
        messages,
        // The schemas are written from their text, never re-parsed.
        tools: request
            .tools
            .iter()
            .map(|tool| Tool {
                name: &tool.name,
                description: &tool.description,
                input_schema: tool.parameters(),
            })
            .collect(),
        stream: request.stream,
        temperature: temperature_json(PROTOCOL, request.temperature)?,
    };
    Ok(WireRequest {
        url,
        headers,
        body: encoded_body(PROTOCOL, &body)?,
    })
}

#[derive(Serialize)]
struct Body<'a> {
    model: &'a str,
    max_tokens: u32,
    #[serde(skip_serializing_if = "Option::is_none")]
    system: Option<String>,
    messages: Vec<Value>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    tools: Vec<Tool<'a>>,
    stream: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    temperature: Option<Value>,
}

#[derive(Serialize)]
struct Tool<'a> {
    name: &'a str,
    description: &'a str,
    input_schema: &'a RawValue,
}

/// Appends a block to the trailing user message, or opens one.
///
/// Anthropic wants user and assistant turns to alternate, so the results of
/// one batch of calls travel as a single user message of `tool_result`
/// blocks, and a user message that follows them joins that same message.
fn push_user_block(messages: &mut Vec<Value>, block: Value) {
    if let Some(last) = messages.last_mut()
        && last.get("role").and_then(Value::as_str) == Some("user")
        && let Some(Value::Array(content)) = last.get_mut("content")
    {
        content.push(block);
        return;
    }
    messages.push(json!({"role": "user", "content": [block]}));
}

/// Thinking blocks first (the API requires it), then the text, then every
/// call of the turn.
fn assistant_blocks(message: &AssistantMessage, ids: &WireIds<'_>) -> Vec<Value> {
    let mut blocks = Vec::with_capacity(message.reasoning.len() + 1 + message.tool_calls.len());
    for part in &message.reasoning {
        let Some(ours) = part.metadata.as_ref().and_then(|m| m.get(PROTOCOL)) else {
            continue;
        };
        if let Some(signature) = ours.get("signature").and_then(Value::as_str) {
            blocks.push(json!({
                "type": "thinking",
                "thinking": part.text,
                "signature": signature,
            }));
        } else if let Some(data) = ours.get("redacted_data").and_then(Value::as_str) {
            blocks.push(json!({"type": "redacted_thinking", "data": data}));
        }
    }
    if has_text(&message.content) {
        blocks.push(json!({"type": "text", "text": message.content}));
    }
    for call in &message.tool_calls {
        // `input` must be an object; the kernel guarantees it, but a
        // hand-built history might not.
        let input = match &call.arguments {
            Value::Object(_) => call.arguments.clone(),
            _ => Value::Object(Map::new()),
        };
        blocks.push(json!({
            "type": "tool_use",
            "id": ids.get(&call.id),
            "name": call.name,
            "input": input,
        }));
    }
    blocks
}

/// The call ids of a request as Anthropic accepts them:
/// `^[a-zA-Z0-9_-]+$`. A history made with another provider may hold
/// others (Kimi writes `functions.ls:0`), and sending one fails the request
/// with a 400, every request of the session that still holds it. Such an id
/// gets every other character replaced by `_`, and a suffix if that form is
/// already an id of the request; a call and its result map alike. Valid
/// ids, the usual case, are sent as they are, without any map.
struct WireIds<'a> {
    renamed: HashMap<&'a str, String>,
}

impl<'a> WireIds<'a> {
    fn of(messages: &'a [Message]) -> Self {
        let calls = || {
            messages.iter().flat_map(|m| match m {
                Message::Assistant(a) => a.tool_calls.as_slice(),
                _ => &[],
            })
        };
        let mut renamed = HashMap::new();
        if calls().all(|c| is_wire_id(&c.id)) {
            return WireIds { renamed };
        }
        let mut taken: HashSet<String> = calls()
            .filter(|c| is_wire_id(&c.id))
            .map(|c| c.id.clone())
            .collect();
        for call in calls() {
            let id = call.id.as_str();
            if is_wire_id(id) || renamed.contains_key(id) {
                continue;
            }
            let base: String = id
                .chars()
                .map(|c| if is_wire_char(c) { c } else { '_' })
                .collect();
            let base = if base.is_empty() {
                "call".to_owned()
            } else {
                base
            };
            let mut safe = base.clone();
            let mut n = 2;
            while taken.contains(&safe) {
                safe = format!("{base}_{n}");
                n += 1;
            }
            taken.insert(safe.clone());
            renamed.insert(id, safe);
        }
        WireIds { renamed }
    }

    fn get<'b>(&'b self, id: &'b str) -> &'b str {
        self.renamed.get(id).map_or(id, String::as_str)
    }
}

fn is_wire_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_' || c == '-'
}

fn is_wire_id(id: &str) -> bool {
    !id.is_empty() && id.chars().all(is_wire_char)
}

/// Whether `text` may be a text block: Anthropic refuses one without
/// non-whitespace text ("text content blocks must contain non-whitespace
/// text"), and models often write "\n\n" before their calls. Sending it
/// would fail every later request that still holds the turn.
fn has_text(text: &str) -> bool {
    !text.trim().is_empty()
}

/// A tool result; failures use the wire's native `is_error` flag.
fn tool_result(tool: &ToolMessage, ids: &WireIds<'_>) -> Value {
    let mut block = json!({
        "type": "tool_result",
        "tool_use_id": ids.get(&tool.tool_call_id),
        "content": tool.content,
    });
    if !tool.success
        && let Value::Object(map) = &mut block
    {
        map.insert("is_error".into(), Value::Bool(true));
    }
    block
}
