//! Anthropic Messages: `POST /v1/messages`.
//!
//! Streamed as SSE events: `message_start`, then per content block a
//! `content_block_start` (text or tool_use, with the block `index`), its
//! `content_block_delta`s (`text_delta` / `input_json_delta`) and a
//! `content_block_stop`, then `message_delta` (stop_reason, output usage)
//! and `message_stop`. Tool-use blocks of parallel calls interleave their
//! deltas by block index, as the script interleaves the calls' fragments;
//! every block stays open until the turn's content has been sent.

use axum::body::Bytes;
use homeagent_core::{
    AssistantMessage, Message, ReasoningPart, StreamEvent, ToolCall, ToolMessage,
};
use serde_json::{Value, json};

use super::{Collected, Ctx, ParsedRequest, arguments_value, collect, sse, str_field, text_of};

pub(crate) fn parse(body: &Value) -> Result<ParsedRequest, String> {
    let mut messages = Vec::new();
    let system = text_of(body.get("system"));
    if !system.is_empty() {
        messages.push(Message::System { content: system });
    }
    let items = body
        .get("messages")
        .and_then(Value::as_array)
        .ok_or("the body has no \"messages\" array")?;
    // As the real API: a history that opens with the assistant is refused.
    if items
        .first()
        .is_some_and(|first| str_field(first, "role") != "user")
    {
        return Err("messages: first message must use the \"user\" role".into());
    }
    for item in items {
        match str_field(item, "role") {
            "user" => parse_user(item.get("content"), &mut messages),
            "assistant" => messages.push(Message::Assistant(parse_assistant(item.get("content")))),
            other => return Err(format!("unknown message role {other:?}")),
        }
    }
    Ok(ParsedRequest::new(
        str_field(body, "model").to_owned(),
        messages,
        body.get("stream").and_then(Value::as_bool).unwrap_or(false),
        false,
    ))
}

/// A user turn: its `tool_result` blocks become tool messages, its text
/// (if any) a user message after them.
fn parse_user(content: Option<&Value>, messages: &mut Vec<Message>) {
    let Some(Value::Array(blocks)) = content else {
        messages.push(Message::User {
            content: text_of(content),
        });
        return;
    };
    let mut text = String::new();
    for block in blocks {
        match str_field(block, "type") {
            "tool_result" => {
                let tool_call_id = str_field(block, "tool_use_id").to_owned();
                messages.push(Message::Tool(ToolMessage {
                    name: super::openai::name_of_call(messages, &tool_call_id),
                    tool_call_id,
                    content: text_of(block.get("content")),
                    success: block.get("is_error").and_then(Value::as_bool) != Some(true),
                }));
            }
            "text" => text.push_str(str_field(block, "text")),
            _ => {}
        }
    }
    if !text.is_empty() {
        messages.push(Message::User { content: text });
    }
}

fn parse_assistant(content: Option<&Value>) -> AssistantMessage {
    let Some(Value::Array(blocks)) = content else {
        return AssistantMessage {
            content: text_of(content),
            ..AssistantMessage::default()
        };
    };
    let mut out = AssistantMessage::default();
    for block in blocks {
        match str_field(block, "type") {
            "text" => out.content.push_str(str_field(block, "text")),
            "thinking" => out.reasoning.push(ReasoningPart {
                text: str_field(block, "thinking").to_owned(),
                metadata: None,
            }),
            "tool_use" => {
                let input = block.get("input").cloned().unwrap_or_else(|| json!({}));
                out.tool_calls.push(ToolCall {
                    id: str_field(block, "id").to_owned(),
                    name: str_field(block, "name").to_owned(),
                    raw_arguments: input.to_string(),
                    arguments: if input.is_object() { input } else { json!({}) },
                });
            }
            _ => {}
        }
    }
    out
}

fn stop_reason(finish: &str) -> &'static str {
    match finish {
        "tool_calls" => "tool_use",
        "length" => "max_tokens",
        _ => "end_turn",
    }
}

pub(crate) fn stream(events: &[StreamEvent], ctx: &Ctx) -> Vec<Bytes> {
    let usage = collect(events).usage;
    let mut out = vec![sse(
        Some("message_start"),
        &json!({"type": "message_start", "message": {
            "id": ctx.response_id, "type": "message", "role": "assistant", "model": ctx.model,
            "content": [], "stop_reason": null, "stop_sequence": null,
            "usage": {"input_tokens": usage.prompt_tokens, "output_tokens": 1},
        }}),
    )];
    // Block index of the open text block and of each call (by stream index).
    let mut text_block: Option<usize> = None;
    let mut call_blocks: Vec<(u32, usize)> = Vec::new();
    let mut next_block = 0usize;
    let mut finish = String::new();
    for event in events {
        match event {
            StreamEvent::TextDelta { text } => {
                let index = *text_block.get_or_insert_with(|| {
                    out.push(sse(
                        Some("content_block_start"),
                        &json!({"type": "content_block_start", "index": next_block,
                                "content_block": {"type": "text", "text": ""}}),
                    ));
                    next_block += 1;
                    next_block - 1
                });
                out.push(sse(
                    Some("content_block_delta"),
                    &json!({"type": "content_block_delta", "index": index,
                            "delta": {"type": "text_delta", "text": text}}),
                ));
            }
            StreamEvent::ToolCall(fragment) => {
                let key = fragment.stream_index.unwrap_or(0);
                let index = match call_blocks.iter().find(|(k, _)| *k == key) {
                    Some((_, index)) => *index,
                    None => {
                        out.push(sse(
                            Some("content_block_start"),
                            &json!({"type": "content_block_start", "index": next_block,
                                    "content_block": {"type": "tool_use",
                                        "id": fragment.id.clone().unwrap_or_default(),
                                        "name": fragment.name.clone().unwrap_or_default(),
                                        "input": {}}}),
                        ));
                        call_blocks.push((key, next_block));
                        next_block += 1;
                        next_block - 1
                    }
                };
                if !fragment.raw_arguments.is_empty() {
                    out.push(sse(
                        Some("content_block_delta"),
                        &json!({"type": "content_block_delta", "index": index,
                                "delta": {"type": "input_json_delta", "partial_json": fragment.raw_arguments}}),
                    ));
                }
            }
            StreamEvent::Finish { reason } => finish = reason.clone(),
            _ => {}
        }
    }
    for index in 0..next_block {
        out.push(sse(
            Some("content_block_stop"),
            &json!({"type": "content_block_stop", "index": index}),
        ));
    }
    out.push(sse(
        Some("message_delta"),
        &json!({"type": "message_delta",
                "delta": {"stop_reason": stop_reason(&finish), "stop_sequence": null},
                "usage": {"output_tokens": usage.completion_tokens}}),
    ));
    out.push(sse(Some("message_stop"), &json!({"type": "message_stop"})));
    out
}

pub(crate) fn whole(events: &[StreamEvent], ctx: &Ctx) -> Value {
    let Collected {
        text,
        calls,
        finish,
        usage,
    } = collect(events);
    let mut content = Vec::new();
    if !text.is_empty() {
        content.push(json!({"type": "text", "text": text}));
    }
    for call in calls {
        content.push(json!({"type": "tool_use", "id": call.id, "name": call.name,
                            "input": arguments_value(&call.raw)}));
    }
    json!({
        "id": ctx.response_id, "type": "message", "role": "assistant", "model": ctx.model,
        "content": content, "stop_reason": stop_reason(&finish), "stop_sequence": null,
        "usage": {"input_tokens": usage.prompt_tokens, "output_tokens": usage.completion_tokens},
    })
}

pub(crate) fn error_body(status: u16, message: &str) -> Value {
    let kind = match status {
        400 => "invalid_request_error",
        404 => "not_found_error",
        529 => "overloaded_error",
        _ => "api_error",
    };
    json!({"type": "error", "error": {"type": kind, "message": message}})
}
