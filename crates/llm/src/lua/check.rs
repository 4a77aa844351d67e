//! `homeagent adapter check`: the adapter self-check.
//!
//! Feeds a standard stream of two interleaved parallel tool calls, and one of
//! text only, through an adapter with the OpenAI fallback switched off (so
//! every fragment must come from the Lua code), assembles the result with the
//! kernel's assembler, and says whether both calls came out intact — and if
//! not, what went wrong. The classic failure is an adapter that drops
//! `stream_index`: the two calls then collapse into one.

use std::sync::Arc;

use homeagent_core::{AssembledTurn, StreamAssembler};
use serde_json::{Value, json};

use super::{LuaAdapter, LuaCodec};
use crate::codec::decode_stream_body;

/// Which wire the standard streams are written in: the one the adapter reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CheckWire {
    /// OpenAI `chat.completion.chunk` frames (most adapters read these).
    Openai,
    /// Anthropic Messages events.
    Anthropic,
}

/// The outcome of one standard stream.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CheckOutcome {
    pub name: &'static str,
    /// `None` when it passed; otherwise what went wrong, for a person.
    pub problem: Option<String>,
}

/// Both outcomes of a check.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CheckReport {
    pub adapter: String,
    pub outcomes: Vec<CheckOutcome>,
}

impl CheckReport {
    pub fn passed(&self) -> bool {
        self.outcomes.iter().all(|o| o.problem.is_none())
    }
}

const TEXT: &str = "Hello from the adapter check.";

fn expected_calls() -> [(&'static str, &'static str, Value); 2] {
    [
        (
            "call_check_a",
            "files_read",
            json!({"path": "/etc/hostname"}),
        ),
        (
            "call_check_b",
            "cmd_run",
            json!({"command": "uptime", "timeout": "5s"}),
        ),
    ]
}

fn sse(event: Option<&str>, data: &Value) -> String {
    match event {
        Some(e) => format!("event: {e}\ndata: {data}\n\n"),
        None => format!("data: {data}\n\n"),
    }
}

/// Two calls whose argument pieces alternate, as parallel calls arrive.
fn two_calls_stream(wire: CheckWire) -> String {
    let [(id_a, name_a, args_a), (id_b, name_b, args_b)] = expected_calls();
    let (a, b) = (args_a.to_string(), args_b.to_string());
    let (a1, a2) = a.split_at(a.len() / 2);
    let (b1, b2) = b.split_at(b.len() / 2);
    match wire {
        CheckWire::Openai => {
            let chunk = |delta: Value, finish: Value| {
                sse(
                    None,
                    &json!({"id": "chatcmpl-check", "object": "chat.completion.chunk", "created": 0, "model": "check",
                    "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}),
                )
            };
            let call = |index: u32, id: Option<&str>, name: Option<&str>, args: &str| {
                let mut function = json!({"arguments": args});
                if let Some(name) = name {
                    function["name"] = json!(name);
                }
                let mut entry = json!({"index": index, "function": function});
                if let Some(id) = id {
                    entry["id"] = json!(id);
                    entry["type"] = json!("function");
                }
                chunk(json!({"tool_calls": [entry]}), Value::Null)
            };
            [
                call(0, Some(id_a), Some(name_a), a1),
                call(1, Some(id_b), Some(name_b), b1),
                call(0, None, None, a2),
                call(1, None, None, b2),
                chunk(json!({}), json!("tool_calls")),
                "data: [DONE]\n\n".to_owned(),
            ]
            .concat()
        }
        CheckWire::Anthropic => {
            let start = |index: u32, id: &str, name: &str| {
                sse(
                    Some("content_block_start"),
                    &json!({"type": "content_block_start", "index": index,
                    "content_block": {"type": "tool_use", "id": id, "name": name, "input": {}}}),
                )
            };
            let delta = |index: u32, piece: &str| {
                sse(
                    Some("content_block_delta"),
                    &json!({"type": "content_block_delta", "index": index,
                    "delta": {"type": "input_json_delta", "partial_json": piece}}),
                )
            };
            [
                sse(Some("message_start"), &json!({"type": "message_start", "message": {"id": "msg_check", "type": "message",
                    "role": "assistant", "content": [], "model": "check", "usage": {"input_tokens": 10, "output_tokens": 1}}})),
                start(0, id_a, name_a),
                start(1, id_b, name_b),
                delta(0, a1),
                delta(1, b1),
                delta(0, a2),
                delta(1, b2),
                sse(Some("content_block_stop"), &json!({"type": "content_block_stop", "index": 0})),
                sse(Some("content_block_stop"), &json!({"type": "content_block_stop", "index": 1})),
                sse(Some("message_delta"), &json!({"type": "message_delta", "delta": {"stop_reason": "tool_use"}, "usage": {"output_tokens": 30}})),
                sse(Some("message_stop"), &json!({"type": "message_stop"})),
            ]
            .concat()
        }
    }
}

fn text_stream(wire: CheckWire) -> String {
    let (first, second) = TEXT.split_at(10);
    match wire {
        CheckWire::Openai => {
            let chunk = |delta: Value, finish: Value| {
                sse(
                    None,
                    &json!({"id": "chatcmpl-check", "object": "chat.completion.chunk", "created": 0, "model": "check",
                    "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}),
                )
            };
            [
                chunk(json!({"role": "assistant", "content": first}), Value::Null),
                chunk(json!({"content": second}), Value::Null),
                chunk(json!({}), json!("stop")),
                "data: [DONE]\n\n".to_owned(),
            ]
            .concat()
        }
        CheckWire::Anthropic => {
            let delta = |piece: &str| {
                sse(
                    Some("content_block_delta"),
                    &json!({"type": "content_block_delta", "index": 0,
                    "delta": {"type": "text_delta", "text": piece}}),
                )
            };
            [
                sse(Some("message_start"), &json!({"type": "message_start", "message": {"id": "msg_check", "type": "message",
                    "role": "assistant", "content": [], "model": "check", "usage": {"input_tokens": 10, "output_tokens": 1}}})),
                sse(Some("content_block_start"), &json!({"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}})),
                delta(first),
                delta(second),
                sse(Some("content_block_stop"), &json!({"type": "content_block_stop", "index": 0})),
                sse(Some("message_delta"), &json!({"type": "message_delta", "delta": {"stop_reason": "end_turn"}, "usage": {"output_tokens": 8}})),
                sse(Some("message_stop"), &json!({"type": "message_stop"})),
            ]
            .concat()
        }
    }
}

fn assemble(codec: &LuaCodec, body: &str) -> Result<AssembledTurn, String> {
    let events = decode_stream_body(codec, body.as_bytes()).map_err(|e| e.to_string())?;
    let mut assembler = StreamAssembler::new();
    for event in events {
        assembler.push(event);
    }
    Ok(assembler.finish())
}

fn two_calls_problem(turn: &AssembledTurn) -> Option<String> {
    let expected = expected_calls();
    if turn.calls.len() != expected.len() {
        let hint = if turn.calls.len() == 1 {
            " — the two calls were merged into one: does the adapter pass each call's position through as `stream_index`?"
        } else {
            ""
        };
        return Some(format!("expected 2 calls, got {}{hint}", turn.calls.len()));
    }
    for (got, (id, name, args)) in turn.calls.iter().zip(expected.iter()) {
        if let Some(error) = &got.argument_error {
            return Some(format!(
                "call {} ({}) came out with unusable arguments: {} — argument pieces of the two \
                 calls were mixed up: does the adapter pass each call's position through as \
                 `stream_index`?",
                got.call.id, got.call.name, error.detail
            ));
        }
        if got.call.name != *name || got.call.arguments != *args {
            return Some(format!(
                "call {} came out as {} {} — expected {name} {args}",
                got.call.id, got.call.name, got.call.arguments
            ));
        }
        if got.call.id != *id {
            return Some(format!(
                "call {name} lost its id {id} (came out as {})",
                got.call.id
            ));
        }
    }
    None
}

/// Runs both standard streams through `adapter` (fallback off).
pub fn check_adapter(adapter: LuaAdapter, wire: CheckWire) -> CheckReport {
    let name = adapter.file().to_owned();
    let codec = LuaCodec::new(Arc::new(adapter)).with_fallback(false);
    let calls = match assemble(&codec, &two_calls_stream(wire)) {
        Ok(turn) => two_calls_problem(&turn),
        Err(error) => Some(error),
    };
    let text = match assemble(&codec, &text_stream(wire)) {
        Ok(turn) if turn.text == TEXT && turn.calls.is_empty() => None,
        Ok(turn) => Some(format!(
            "expected the text {TEXT:?} and no calls, got {:?} and {} call(s)",
            turn.text,
            turn.calls.len()
        )),
        Err(error) => Some(error),
    };
    CheckReport {
        adapter: name,
        outcomes: vec![
            CheckOutcome {
                name: "two interleaved tool calls",
                problem: calls,
            },
            CheckOutcome {
                name: "text only",
                problem: text,
            },
        ],
    }
}
