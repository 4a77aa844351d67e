//! OpenAI Chat Completions: `POST /v1/chat/completions`.
//!
//! Streamed as SSE `chat.completion.chunk`s: one per text piece and one per
//! tool-call fragment (`tool_calls[].index` = the call's position, `id`,
//! `type` and `function.name` only on a call's first fragment), then a chunk
//! with the `finish_reason`, a usage chunk with empty `choices` when the
//! request set `stream_options.include_usage`, and `data: [DONE]`.

use axum::body::Bytes;
use homeagent_core::{AssistantMessage, Message, StreamEvent, ToolCall, ToolMessage};
use serde_json::{Value, json};

use super::{Collected, Ctx, ParsedRequest, collect, is_error_payload, sse, str_field, text_of};

pub(crate) fn parse(body: &Value) -> Result<ParsedRequest, String> {
    let items = body
        .get("messages")
        .and_then(Value::as_array)
        .ok_or("the body has no \"messages\" array")?;
    let mut messages = Vec::with_capacity(items.len());
    for item in items {
        let content = text_of(item.get("content"));
        match str_field(item, "role") {
            "system" | "developer" => messages.push(Message::System { content }),
            "user" => messages.push(Message::User { content }),
            "assistant" => {
                let tool_calls = item
                    .get("tool_calls")
                    .and_then(Value::as_array)
                    .map(|calls| calls.iter().map(parse_call).collect())
                    .unwrap_or_default();
                messages.push(Message::Assistant(AssistantMessage {
                    content,
                    reasoning: Vec::new(),
                    tool_calls,
                }));
            }
            "tool" => {
                let tool_call_id = str_field(item, "tool_call_id").to_owned();
                messages.push(Message::Tool(ToolMessage {
                    name: name_of_call(&messages, &tool_call_id),
                    tool_call_id,
                    success: !is_error_payload(&content),
                    content,
                }));
            }
            other => return Err(format!("unknown message role {other:?}")),
        }
    }
    Ok(ParsedRequest {
        model: str_field(body, "model").to_owned(),
        messages,
        stream: body.get("stream").and_then(Value::as_bool).unwrap_or(false),
        include_usage: body
            .pointer("/stream_options/include_usage")
            .and_then(Value::as_bool)
            .unwrap_or(false),
    })
}

fn parse_call(call: &Value) -> ToolCall {
    let function = call.get("function").unwrap_or(&Value::Null);
    let raw = str_field(function, "arguments").to_owned();
    ToolCall {
        id: str_field(call, "id").to_owned(),
        name: str_field(function, "name").to_owned(),
        arguments: object_or_empty(&raw),
        raw_arguments: raw,
    }
}

pub(crate) fn object_or_empty(raw: &str) -> Value {
    match serde_json::from_str::<Value>(raw) {
        Ok(value @ Value::Object(_)) => value,
        _ => json!({}),
    }
}

/// The tool name of the earlier call with this id (the wire does not repeat it).
pub(crate) fn name_of_call(messages: &[Message], id: &str) -> String {
    messages
        .iter()
        .rev()
        .filter_map(|m| match m {
            Message::Assistant(a) => Some(a),
            _ => None,
        })
        .flat_map(|a| &a.tool_calls)
        .find(|c| c.id == id)
        .map(|c| c.name.clone())
        .unwrap_or_default()
}

fn chunk(ctx: &Ctx, delta: Value, finish: Option<&str>) -> Value {
    json!({
        "id": ctx.response_id,
        "object": "chat.completion.chunk",
        "created": ctx.created,
        "model": ctx.model,
        "system_fingerprint": "fp_homeagent_mock",
        "choices": [{"index": 0, "delta": delta, "logprobs": null, "finish_reason": finish}],
    })
}

pub(crate) fn stream(events: &[StreamEvent], ctx: &Ctx) -> Vec<Bytes> {
    let mut out = vec![sse(
        None,
        &chunk(ctx, json!({"role": "assistant", "content": ""}), None),
    )];
    let mut usage = None;
    for event in events {
        match event {
            StreamEvent::TextDelta { text } => {
                out.push(sse(None, &chunk(ctx, json!({"content": text}), None)));
            }
            StreamEvent::ToolCall(fragment) => {
                let mut call = json!({"index": fragment.stream_index.unwrap_or(0)});
                let mut function = json!({"arguments": fragment.raw_arguments});
                if let Some(id) = &fragment.id {
                    call["id"] = json!(id);
                    call["type"] = json!("function");
                }
                if let Some(name) = &fragment.name {
                    function["name"] = json!(name);
                }
                call["function"] = function;
                out.push(sse(None, &chunk(ctx, json!({"tool_calls": [call]}), None)));
            }
            StreamEvent::Finish { reason } => {
                out.push(sse(None, &chunk(ctx, json!({}), Some(reason))));
            }
            StreamEvent::Usage(u) => usage = Some(*u),
            StreamEvent::ReasoningDelta { .. } | StreamEvent::ReasoningMetadata { .. } => {}
        }
    }
    if let (true, Some(u)) = (ctx.include_usage, usage) {
        out.push(sse(
            None,
            &json!({
                "id": ctx.response_id,
                "object": "chat.completion.chunk",
                "created": ctx.created,
                "model": ctx.model,
                "choices": [],
                "usage": {"prompt_tokens": u.prompt_tokens, "completion_tokens": u.completion_tokens, "total_tokens": u.total_tokens},
            }),
        ));
    }
    out.push(Bytes::from_static(b"data: [DONE]\n\n"));
    out
}

pub(crate) fn whole(events: &[StreamEvent], ctx: &Ctx) -> Value {
    let Collected {
        text,
        calls,
        finish,
        usage,
    } = collect(events);
    let mut message = json!({
        "role": "assistant",
        "content": if text.is_empty() && !calls.is_empty() { Value::Null } else { json!(text) },
        "refusal": null,
    });
    if !calls.is_empty() {
        message["tool_calls"] = calls
            .iter()
            .map(|c| {
                json!({"id": c.id, "type": "function", "function": {"name": c.name, "arguments": c.raw}})
            })
            .collect();
    }
    json!({
        "id": ctx.response_id,
        "object": "chat.completion",
        "created": ctx.created,
        "model": ctx.model,
        "system_fingerprint": "fp_homeagent_mock",
        "choices": [{"index": 0, "message": message, "logprobs": null, "finish_reason": finish}],
        "usage": {"prompt_tokens": usage.prompt_tokens, "completion_tokens": usage.completion_tokens, "total_tokens": usage.total_tokens},
    })
}

pub(crate) fn error_body(status: u16, message: &str) -> Value {
    let kind = if status >= 500 {
        "server_error"
    } else {
        "invalid_request_error"
    };
    json!({"error": {"message": message, "type": kind, "param": null, "code": null}})
}
