//! JSON written by hand, for the few texts the kernel writes per call.
//!
//! Every tool call is written as JSON three times: into the store's row
//! of its turn, into the event log, and into the next request's history.
//! Through serde_json each string goes through an escaper that looks at
//! one byte at a time and each key through a generic map serializer; for a
//! batch of 64 calls that was a fifth of what a call cost the agent. The
//! writers here produce exactly the text serde_json produces for the same
//! value (compact, keys in the same order, the same escapes: `\"`, `\\`,
//! `\b`, `\f`, `\n`, `\r`, `\t`, `\u00XX` for other control characters,
//! nothing else), which the tests hold side by side with serde's, so
//! readers keep using serde.

use std::fmt::Write;

use serde_json::Value;

use crate::message::{AssistantMessage, Message, ReasoningPart, ToolCall, ToolMessage};

/// Appends `text` as a JSON string.
pub fn push_string(out: &mut String, text: &str) {
    let bytes = text.as_bytes();
    out.reserve(bytes.len() + 2);
    out.push('"');
    let mut rest = text;
    loop {
        // `run` ends at an ASCII byte or at the end: a cut between
        // characters.
        let run = plain_run(rest.as_bytes());
        out.push_str(rest.get(..run).unwrap_or_default());
        let Some(&byte) = rest.as_bytes().get(run) else {
            break;
        };
        push_escape(out, byte);
        rest = rest.get(run + 1..).unwrap_or_default();
    }
    out.push('"');
}

/// How many bytes at the start of `bytes` a JSON string holds as they
/// stand: up to the first quote, backslash or control character (what
/// needs an escape when written, and ends a run when read). Eight bytes at
/// a time: most of a string is plain text.
pub fn plain_run(bytes: &[u8]) -> usize {
    let mut run = 0;
    while let Some(eight) = bytes.get(run..run + 8) {
        let mut word = [0; 8];
        word.copy_from_slice(eight);
        let stops = stop_bytes(u64::from_le_bytes(word));
        if stops != 0 {
            // Little-endian: the first byte in the text is the lowest.
            return run + (stops.trailing_zeros() / 8) as usize;
        }
        run += 8;
    }
    let rest = bytes.get(run..).unwrap_or_default();
    run + rest
        .iter()
        .take_while(|&&b| b >= 0x20 && b != b'"' && b != b'\\')
        .count()
}

/// `0x80` in the first byte of `word` (the lowest) that ends a plain run,
/// maybe in some after it, and `0` if none does ("Bit Twiddling Hacks":
/// `hasless` and `haszero`). A borrow can flag a byte after a real stop,
/// never one before: the lowest flag is exact.
fn stop_bytes(word: u64) -> u64 {
    const ONES: u64 = u64::from_ne_bytes([0x01; 8]);
    const HIGHS: u64 = u64::from_ne_bytes([0x80; 8]);
    let quote = word ^ u64::from_ne_bytes([b'"'; 8]);
    let backslash = word ^ u64::from_ne_bytes([b'\\'; 8]);
    // A byte below 0x20, a zero byte in `quote` or in `backslash`.
    ((word.wrapping_sub(ONES * 0x20) & !word)
        | (quote.wrapping_sub(ONES) & !quote)
        | (backslash.wrapping_sub(ONES) & !backslash))
        & HIGHS
}

/// The escape serde_json writes for `byte`.
fn push_escape(out: &mut String, byte: u8) {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    // Two pushes, not a `push_str`: a quote in JSON text inside a string
    // is the common case, and a copy of two bytes costs more than it does.
    out.push('\\');
    let letter = match byte {
        b'"' | b'\\' => byte,
        0x08 => b'b',
        0x0C => b'f',
        b'\n' => b'n',
        b'\r' => b'r',
        b'\t' => b't',
        _ => {
            out.push_str("u00");
            out.push(char::from(HEX[usize::from(byte >> 4)]));
            out.push(char::from(HEX[usize::from(byte & 0xF)]));
            return;
        }
    };
    out.push(char::from(letter));
}

/// Appends `value` as compact JSON.
pub fn push_value(out: &mut String, value: &Value) {
    match value {
        Value::Null => out.push_str("null"),
        Value::Bool(true) => out.push_str("true"),
        Value::Bool(false) => out.push_str("false"),
        // A number's `Display` is its JSON text (integers through itoa,
        // floats, always finite, through the same formatter serde uses).
        Value::Number(number) => {
            let _ = write!(out, "{number}");
        }
        Value::String(text) => push_string(out, text),
        Value::Array(items) => push_array(out, items, push_value),
        Value::Object(map) => {
            out.push('{');
            for (i, (key, item)) in map.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                push_string(out, key);
                out.push(':');
                push_value(out, item);
            }
            out.push('}');
        }
    }
}

/// Appends `items` as a JSON array, each written by `each`.
pub fn push_array<T>(
    out: &mut String,
    items: impl IntoIterator<Item = T>,
    mut each: impl FnMut(&mut String, T),
) {
    out.push('[');
    for (i, item) in items.into_iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        each(out, item);
    }
    out.push(']');
}

/// Appends `,"key":` (or `"key":` first in an object). `key` needs no escape.
fn push_key(out: &mut String, key: &str, first: bool) {
    if !first {
        out.push(',');
    }
    out.push('"');
    out.push_str(key);
    out.push_str("\":");
}

fn push_bool(out: &mut String, value: bool) {
    out.push_str(if value { "true" } else { "false" });
}

/// Appends `message` as serde writes it (`{"role": .., ..}`).
pub fn push_message(out: &mut String, message: &Message) {
    out.push_str("{\"role\":\"");
    out.push_str(message.role());
    out.push('"');
    match message {
        Message::System { content } | Message::User { content } => {
            push_key(out, "content", false);
            push_string(out, content);
        }
        Message::Assistant(AssistantMessage {
            content,
            reasoning,
            tool_calls,
        }) => {
            push_key(out, "content", false);
            push_string(out, content);
            if !reasoning.is_empty() {
                push_key(out, "reasoning", false);
                push_array(out, reasoning, |out, ReasoningPart { text, metadata }| {
                    out.push('{');
                    push_key(out, "text", true);
                    push_string(out, text);
                    if let Some(metadata) = metadata {
                        push_key(out, "metadata", false);
                        push_value(out, metadata);
                    }
                    out.push('}');
                });
            }
            if !tool_calls.is_empty() {
                push_key(out, "tool_calls", false);
                push_array(out, tool_calls, push_call);
            }
        }
        Message::Tool(ToolMessage {
            tool_call_id,
            name,
            content,
            success,
        }) => {
            push_key(out, "tool_call_id", false);
            push_string(out, tool_call_id);
            push_key(out, "name", false);
            push_string(out, name);
            push_key(out, "content", false);
            push_string(out, content);
            push_key(out, "success", false);
            push_bool(out, *success);
        }
    }
    out.push('}');
}

fn push_call(out: &mut String, call: &ToolCall) {
    let ToolCall {
        id,
        name,
        arguments,
        raw_arguments,
    } = call;
    out.push('{');
    push_key(out, "id", true);
    push_string(out, id);
    push_key(out, "name", false);
    push_string(out, name);
    push_key(out, "arguments", false);
    push_value(out, arguments);
    push_key(out, "raw_arguments", false);
    push_string(out, raw_arguments);
    out.push('}');
}

#[cfg(test)]
mod tests;
