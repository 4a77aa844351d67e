//! Gemini: `POST /v1beta/models/{model}:streamGenerateContent?alt=sse` and
//! `:generateContent`.
//!
//! Calls arrive whole as `functionCall` parts without an `id` (as most
//! Gemini models send them), two per chunk so that a client must number
//! them across chunks. The last chunk carries `finishReason` and
//! `usageMetadata`. Without `alt=sse` the stream is a JSON array of the
//! same objects, as Gemini sends it.

use axum::body::Bytes;
use homeagent_core::{
    AssistantMessage, Message, ReasoningPart, StreamEvent, ToolCall, ToolMessage,
};
use serde_json::{Value, json};

use super::{Collected, Ctx, ParsedRequest, arguments_value, collect, sse, str_field, text_of};

/// Calls per streamed chunk.
const CALLS_PER_CHUNK: usize = 2;

pub(crate) fn parse(body: &Value) -> Result<ParsedRequest, String> {
    let mut messages = Vec::new();
    let system = parts_text(body.pointer("/systemInstruction/parts"));
    if !system.is_empty() {
        messages.push(Message::System { content: system });
    }
    let contents = body
        .get("contents")
        .and_then(Value::as_array)
        .ok_or("the body has no \"contents\" array")?;
    // As the real API: contents that open with the model are refused.
    if contents
        .first()
        .is_some_and(|first| str_field(first, "role") == "model")
    {
        return Err(
            "Please ensure that multiturn requests alternate between user and model, \
             starting with user."
                .into(),
        );
    }
    let mut calls_seen = 0usize;
    for content in contents {
        let parts = content
            .get("parts")
            .and_then(Value::as_array)
            .map(Vec::as_slice)
            .unwrap_or_default();
        match str_field(content, "role") {
            "model" => {
                let mut out = AssistantMessage::default();
                for part in parts {
                    if let Some(call) = part.get("functionCall") {
                        let args = call.get("args").cloned().unwrap_or_else(|| json!({}));
                        let id = match str_field(call, "id") {
                            "" => format!("gemini_call_{calls_seen}"),
                            id => id.to_owned(),
                        };
                        calls_seen += 1;
                        out.tool_calls.push(ToolCall {
                            id,
                            name: str_field(call, "name").to_owned(),
                            raw_arguments: args.to_string(),
                            arguments: if args.is_object() { args } else { json!({}) },
                        });
                    } else if part.get("thought").and_then(Value::as_bool) == Some(true) {
                        out.reasoning.push(ReasoningPart {
                            text: str_field(part, "text").to_owned(),
                            metadata: None,
                        });
                    } else {
                        out.content.push_str(str_field(part, "text"));
                    }
                }
                messages.push(Message::Assistant(out));
            }
            // "user", "function" (older API versions) or absent.
            _ => {
                let mut text = String::new();
                for part in parts {
                    match part.get("functionResponse") {
                        Some(response) => messages.push(Message::Tool(tool_result(response))),
                        None => text.push_str(str_field(part, "text")),
                    }
                }
                if !text.is_empty() {
                    messages.push(Message::User { content: text });
                }
            }
        }
    }
    Ok(ParsedRequest::new(String::new(), messages, false, false))
}

fn parts_text(parts: Option<&Value>) -> String {
    text_of(parts)
}

/// `{"result": x}` → x; `{"error": x}` → a failure with text x; any other
/// object → its JSON text.
fn tool_result(response: &Value) -> ToolMessage {
    let name = str_field(response, "name").to_owned();
    let payload = response.get("response").cloned().unwrap_or(Value::Null);
    let as_text = |v: &Value| match v {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    };
    let (content, success) = match &payload {
        Value::Object(map) if map.len() == 1 && map.contains_key("result") => {
            (as_text(&map["result"]), true)
        }
        Value::Object(map) if map.len() == 1 && map.contains_key("error") => {
            (as_text(&map["error"]), false)
        }
        other => (as_text(other), true),
    };
    ToolMessage {
        tool_call_id: match str_field(response, "id") {
            "" => name.clone(),
            id => id.to_owned(),
        },
        name,
        content,
        success,
    }
}

fn finish_reason(finish: &str) -> &'static str {
    match finish {
        "length" => "MAX_TOKENS",
        _ => "STOP",
    }
}

fn chunk(ctx: &Ctx, parts: Vec<Value>) -> Value {
    json!({
        "candidates": [{"content": {"role": "model", "parts": parts}, "index": 0}],
        "modelVersion": ctx.model,
        "responseId": ctx.response_id,
    })
}

/// The streamed chunks as JSON objects (SSE or array framing is the caller's).
pub(crate) fn stream_objects(events: &[StreamEvent], ctx: &Ctx) -> Vec<Value> {
    let collected = collect(events);
    let mut chunks: Vec<Value> = events
        .iter()
        .filter_map(|e| match e {
            StreamEvent::TextDelta { text } => Some(chunk(ctx, vec![json!({"text": text})])),
            _ => None,
        })
        .collect();
    for group in collected.calls.chunks(CALLS_PER_CHUNK) {
        let parts = group
            .iter()
            .map(|c| json!({"functionCall": {"name": c.name, "args": arguments_value(&c.raw)}}))
            .collect();
        chunks.push(chunk(ctx, parts));
    }
    if chunks.is_empty() {
        chunks.push(chunk(ctx, vec![json!({"text": ""})]));
    }
    if let Some(last) = chunks.last_mut() {
        last["candidates"][0]["finishReason"] = json!(finish_reason(&collected.finish));
        last["usageMetadata"] = usage_metadata(&collected);
    }
    chunks
}

fn usage_metadata(collected: &Collected) -> Value {
    let u = collected.usage;
    json!({"promptTokenCount": u.prompt_tokens, "candidatesTokenCount": u.completion_tokens,
           "totalTokenCount": u.total_tokens})
}

pub(crate) fn stream_sse(events: &[StreamEvent], ctx: &Ctx) -> Vec<Bytes> {
    stream_objects(events, ctx)
        .iter()
        .map(|c| sse(None, c))
        .collect()
}

/// The stream without `alt=sse`: one JSON array, sent an element at a time.
pub(crate) fn stream_array(events: &[StreamEvent], ctx: &Ctx) -> Vec<Bytes> {
    let objects = stream_objects(events, ctx);
    let last = objects.len().saturating_sub(1);
    objects
        .iter()
        .enumerate()
        .map(|(i, o)| {
            let open = if i == 0 { "[" } else { "" };
            let close = if i == last { "]" } else { ",\r\n" };
            Bytes::from(format!("{open}{o}{close}"))
        })
        .collect()
}

pub(crate) fn whole(events: &[StreamEvent], ctx: &Ctx) -> Value {
    let collected = collect(events);
    let mut parts = Vec::new();
    if !collected.text.is_empty() {
        parts.push(json!({"text": collected.text}));
    }
    for c in &collected.calls {
        parts.push(json!({"functionCall": {"name": c.name, "args": arguments_value(&c.raw)}}));
    }
    let mut out = chunk(ctx, parts);
    out["candidates"][0]["finishReason"] = json!(finish_reason(&collected.finish));
    out["usageMetadata"] = usage_metadata(&collected);
    out
}

pub(crate) fn error_body(status: u16, message: &str) -> Value {
    let state = match status {
        400 => "INVALID_ARGUMENT",
        404 => "NOT_FOUND",
        429 => "RESOURCE_EXHAUSTED",
        503 => "UNAVAILABLE",
        _ => "INTERNAL",
    };
    json!({"error": {"code": status, "message": message, "status": state}})
}
