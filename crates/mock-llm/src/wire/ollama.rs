//! Ollama native: `POST /api/chat`, NDJSON.
//!
//! Text arrives as `message.content` lines; calls arrive whole in
//! `done: false` lines (two per line, with an `id` as Ollama ≥ 0.12 sends
//! it), then a `done: true` line with `done_reason` and the token counts.
//! Ollama reports `done_reason: "stop"` for a turn that ends in tool calls,
//! and so does the mock.

use axum::body::Bytes;
use homeagent_core::{
    AssistantMessage, Message, ReasoningPart, StreamEvent, ToolCall, ToolMessage,
};
use serde_json::{Value, json};

use super::{
    Collected, Ctx, ParsedRequest, arguments_value, collect, is_error_payload, str_field, text_of,
};

/// Calls per streamed line.
const CALLS_PER_LINE: usize = 2;

pub(crate) fn parse(body: &Value) -> Result<ParsedRequest, String> {
    let items = body
        .get("messages")
        .and_then(Value::as_array)
        .ok_or("the body has no \"messages\" array")?;
    let mut messages = Vec::with_capacity(items.len());
    let mut calls_seen = 0usize;
    for item in items {
        let content = text_of(item.get("content"));
        match str_field(item, "role") {
            "system" => messages.push(Message::System { content }),
            "user" => messages.push(Message::User { content }),
            "assistant" => {
                let mut out = AssistantMessage {
                    content,
                    ..AssistantMessage::default()
                };
                let thinking = str_field(item, "thinking");
                if !thinking.is_empty() {
                    out.reasoning.push(ReasoningPart {
                        text: thinking.to_owned(),
                        metadata: None,
                    });
                }
                for call in item
                    .get("tool_calls")
                    .and_then(Value::as_array)
                    .into_iter()
                    .flatten()
                {
                    let function = call.get("function").unwrap_or(&Value::Null);
                    let (raw, arguments) = match function.get("arguments") {
                        Some(Value::String(raw)) => {
                            (raw.clone(), super::openai::object_or_empty(raw))
                        }
                        Some(v @ Value::Object(_)) => (v.to_string(), v.clone()),
                        _ => (String::new(), json!({})),
                    };
                    let id = match str_field(call, "id") {
                        "" => format!("ollama_call_{calls_seen}"),
                        id => id.to_owned(),
                    };
                    calls_seen += 1;
                    out.tool_calls.push(ToolCall {
                        id,
                        name: str_field(function, "name").to_owned(),
                        arguments,
                        raw_arguments: raw,
                    });
                }
                messages.push(Message::Assistant(out));
            }
            "tool" => {
                let name = str_field(item, "tool_name").to_owned();
                messages.push(Message::Tool(ToolMessage {
                    tool_call_id: match str_field(item, "tool_call_id") {
                        "" => name.clone(),
                        id => id.to_owned(),
                    },
                    name,
                    success: !is_error_payload(&content),
                    content,
                }));
            }
            other => return Err(format!("unknown message role {other:?}")),
        }
    }
    Ok(ParsedRequest::new(
        str_field(body, "model").to_owned(),
        messages,
        // Ollama streams unless told not to.
        body.get("stream").and_then(Value::as_bool).unwrap_or(true),
        false,
    ))
}

fn done_reason(finish: &str) -> &'static str {
    match finish {
        "length" => "length",
        _ => "stop",
    }
}

fn line(ctx: &Ctx, message: Value, done: bool) -> Value {
    json!({"model": ctx.model, "created_at": created_at(ctx.created), "message": message, "done": done})
}

/// RFC 3339 UTC from Unix seconds (civil-from-days, no date crate needed).
fn created_at(unix: u64) -> String {
    let days = unix / 86_400;
    let secs = unix % 86_400;
    let z = days as i64 + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}Z",
        secs / 3600,
        secs / 60 % 60,
        secs % 60
    )
}

fn calls_json(calls: &[super::WholeCall]) -> Value {
    calls
        .iter()
        .map(|c| {
            json!({"id": c.id, "function": {"name": c.name, "arguments": arguments_value(&c.raw)}})
        })
        .collect()
}

fn finish_fields(out: &mut Value, collected: &Collected) {
    out["done_reason"] = json!(done_reason(&collected.finish));
    out["prompt_eval_count"] = json!(collected.usage.prompt_tokens);
    out["eval_count"] = json!(collected.usage.completion_tokens);
}

pub(crate) fn stream(events: &[StreamEvent], ctx: &Ctx) -> Vec<Bytes> {
    let collected = collect(events);
    let mut lines: Vec<Value> = events
        .iter()
        .filter_map(|e| match e {
            StreamEvent::TextDelta { text } => Some(line(
                ctx,
                json!({"role": "assistant", "content": text}),
                false,
            )),
            _ => None,
        })
        .collect();
    for group in collected.calls.chunks(CALLS_PER_LINE) {
        lines.push(line(
            ctx,
            json!({"role": "assistant", "content": "", "tool_calls": calls_json(group)}),
            false,
        ));
    }
    let mut done = line(ctx, json!({"role": "assistant", "content": ""}), true);
    finish_fields(&mut done, &collected);
    lines.push(done);
    lines
        .iter()
        .map(|l| Bytes::from(format!("{l}\n")))
        .collect()
}

pub(crate) fn whole(events: &[StreamEvent], ctx: &Ctx) -> Value {
    let collected = collect(events);
    let mut message = json!({"role": "assistant", "content": collected.text});
    if !collected.calls.is_empty() {
        message["tool_calls"] = calls_json(&collected.calls);
    }
    let mut out = line(ctx, message, true);
    finish_fields(&mut out, &collected);
    out
}

pub(crate) fn error_body(_status: u16, message: &str) -> Value {
    json!({"error": message})
}

#[cfg(test)]
mod tests {
    #[test]
    fn timestamps_are_rfc3339() {
        assert_eq!(super::created_at(0), "1970-01-01T00:00:00Z");
        assert_eq!(super::created_at(1_721_680_408), "2024-07-22T20:33:28Z");
    }
}
