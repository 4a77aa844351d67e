//! Building the Anthropic request body.

use std::sync::{Arc, LazyLock};

use homeagent_core::{AssistantMessage, Message, ToolMessage};
use serde::Serialize;
use serde_json::value::RawValue;
use serde_json::{Map, Value};

use super::{API_VERSION, PROTOCOL};
use crate::codec::wire_ids::{AnthropicIds, WireIds};
use crate::codec::{Endpoint, OPENING_NOTE, WireRequest, encoded_body, temperature_json};
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

    // A history made with another provider may hold ids Anthropic refuses
    // (Kimi writes `functions.ls:0`).
    let ids = WireIds::of(&request.messages, &AnthropicIds);
    let mut system: Vec<&str> = Vec::new();
    // Borrowed from the request: the history is written as it is, never
    // copied into `Value` trees first (a long session's requests were
    // mostly that copy).
    let mut messages: Vec<WireMessage<'_>> = Vec::with_capacity(request.messages.len());
    for message in &request.messages {
        match message {
            Message::System { content } => system.push(content),
            Message::User { content } => {
                // Anthropic rejects text blocks without non-whitespace text.
                if has_text(content) {
                    push_user_block(&mut messages, Block::Text { text: content });
                }
            }
            Message::Assistant(assistant) => {
                let blocks = assistant_blocks(assistant, &ids);
                // An assistant turn with nothing Anthropic can replay (e.g.
                // only another provider's reasoning) is left out rather than
                // sent empty, which the API rejects.
                if !blocks.is_empty() {
                    messages.push(WireMessage {
                        role: "assistant",
                        content: blocks,
                    });
                }
            }
            Message::Tool(tool) => push_user_block(&mut messages, tool_result(tool, &ids)),
        }
    }
    if messages
        .first()
        .is_some_and(|first| first.role == "assistant")
    {
        messages.insert(
            0,
            WireMessage {
                role: "user",
                content: vec![Block::Text { text: OPENING_NOTE }],
            },
        );
    }
    if messages.is_empty() {
        return Err(CodecError::Unencodable {
            protocol: PROTOCOL,
            detail: "Anthropic needs at least one user or assistant message".into(),
        });
    }

    // Each tool is written once per definition, never re-parsed.
    let tools: Vec<Arc<RawValue>> = request
        .tools
        .iter()
        .map(|tool| {
            tool.rendered(TOOL_SHAPE, || Tool {
                name: tool.name(),
                description: tool.description(),
                input_schema: tool.parameters(),
            })
        })
        .collect();
    let body = Body {
        model: &request.model,
        max_tokens: request.max_tokens,
        system: (!system.is_empty()).then(|| system.join("\n\n")),
        messages,
        // The schemas are written from their text, never re-parsed.
        tools: tools.iter().map(|tool| &**tool).collect(),
        stream: request.stream,
        temperature: temperature_json(PROTOCOL, request.temperature)?,
    };
    Ok(WireRequest {
        url,
        headers,
        body: encoded_body(PROTOCOL, &body, request)?,
    })
}

#[derive(Serialize)]
struct Body<'a> {
    model: &'a str,
    max_tokens: u32,
    #[serde(skip_serializing_if = "Option::is_none")]
    system: Option<String>,
    messages: Vec<WireMessage<'a>>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    tools: Vec<&'a RawValue>,
    stream: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    temperature: Option<Value>,
}

#[derive(Serialize)]
struct WireMessage<'a> {
    role: &'static str,
    content: Vec<Block<'a>>,
}

/// A content block, `type` first.
#[derive(Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
enum Block<'a> {
    Text {
        text: &'a str,
    },
    Thinking {
        thinking: &'a str,
        signature: &'a str,
    },
    RedactedThinking {
        data: &'a str,
    },
    ToolUse {
        id: &'a str,
        name: &'a str,
        input: &'a Value,
    },
    /// Failures use the wire's native `is_error` flag.
    ToolResult {
        tool_use_id: &'a str,
        content: &'a str,
        #[serde(skip_serializing_if = "is_false")]
        is_error: bool,
    },
}

fn is_false(flag: &bool) -> bool {
    !flag
}

/// The `input` of a call whose arguments are not an object.
static NO_INPUT: LazyLock<Value> = LazyLock::new(|| Value::Object(Map::new()));

#[derive(Serialize)]
struct Tool<'a> {
    name: &'a str,
    description: &'a str,
    input_schema: &'a RawValue,
}

/// The [`ToolSpec::rendered`] key of a tool in Anthropic's shape.
///
/// [`ToolSpec::rendered`]: crate::ToolSpec::rendered
const TOOL_SHAPE: &str = "anthropic.tool";

/// Appends a block to the trailing user message, or opens one.
///
/// Anthropic wants user and assistant turns to alternate, so the results of
/// one batch of calls travel as a single user message of `tool_result`
/// blocks, and a user message that follows them joins that same message.
fn push_user_block<'a>(messages: &mut Vec<WireMessage<'a>>, block: Block<'a>) {
    if let Some(last) = messages.last_mut()
        && last.role == "user"
    {
        last.content.push(block);
        return;
    }
    messages.push(WireMessage {
        role: "user",
        content: vec![block],
    });
}

/// Thinking blocks first (the API requires it), then the text, then every
/// call of the turn.
fn assistant_blocks<'a>(message: &'a AssistantMessage, ids: &'a WireIds<'_>) -> Vec<Block<'a>> {
    let mut blocks = Vec::with_capacity(message.reasoning.len() + 1 + message.tool_calls.len());
    for part in &message.reasoning {
        let Some(ours) = part.metadata.as_ref().and_then(|m| m.get(PROTOCOL)) else {
            continue;
        };
        if let Some(signature) = ours.get("signature").and_then(Value::as_str) {
            blocks.push(Block::Thinking {
                thinking: &part.text,
                signature,
            });
        } else if let Some(data) = ours.get("redacted_data").and_then(Value::as_str) {
            blocks.push(Block::RedactedThinking { data });
        }
    }
    if has_text(&message.content) {
        blocks.push(Block::Text {
            text: &message.content,
        });
    }
    for call in &message.tool_calls {
        // `input` must be an object; the kernel guarantees it, but a
        // hand-built history might not.
        let input = match &call.arguments {
            Value::Object(_) => &call.arguments,
            _ => &NO_INPUT,
        };
        blocks.push(Block::ToolUse {
            id: ids.get(&call.id),
            name: &call.name,
            input,
        });
    }
    blocks
}

/// Whether `text` may be a text block: Anthropic refuses one without
/// non-whitespace text ("text content blocks must contain non-whitespace
/// text"), and models often write "\n\n" before their calls. Sending it
/// would fail every later request that still holds the turn.
fn has_text(text: &str) -> bool {
    !text.trim().is_empty()
}

/// A tool result; failures use the wire's native `is_error` flag.
fn tool_result<'a>(tool: &'a ToolMessage, ids: &'a WireIds<'_>) -> Block<'a> {
    Block::ToolResult {
        tool_use_id: ids.get(&tool.tool_call_id),
        content: &tool.content,
        is_error: !tool.success,
    }
}
