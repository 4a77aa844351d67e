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
    // `copied` is where the text not yet appended starts. Every byte that
    // needs an escape is ASCII, so each cut falls between characters.
    let mut copied = 0;
    // Eight bytes are looked at together (one word, no branch per byte),
    // and only a word holding an escape byte by byte: ids, names and most
    // text hold none, JSON text in a string a few.
    let words = bytes.chunks_exact(WORD);
    let tail = words.remainder();
    for (number, word) in words.enumerate() {
        let mut eight = [0u8; WORD];
        eight.copy_from_slice(word);
        if word_needs_escape(u64::from_le_bytes(eight)) {
            escape_each(out, text, number * WORD, word, &mut copied);
        }
    }
    escape_each(out, text, bytes.len() - tail.len(), tail, &mut copied);
    out.push_str(text.get(copied..).unwrap_or_default());
    out.push('"');
}

const WORD: usize = 8;

/// Whether any of the eight bytes of `word` is below 0x20, a quote or a
/// backslash: `hasless` and `haszero` of "Bit Twiddling Hacks". A byte's
/// top bit in `x - 0x01…01 & !x` is set where `x` has a zero byte (and a
/// borrow may set it above one too), never in a word without one, so the
/// answer is exact for the word.
fn word_needs_escape(word: u64) -> bool {
    const ONES: u64 = u64::MAX / 255;
    const TOPS: u64 = ONES << 7;
    let control = word.wrapping_sub(ONES * 0x20) & !word;
    let quote = word ^ (ONES * u64::from(b'"'));
    let quote = quote.wrapping_sub(ONES) & !quote;
    let backslash = word ^ (ONES * u64::from(b'\\'));
    let backslash = backslash.wrapping_sub(ONES) & !backslash;
    (control | quote | backslash) & TOPS != 0
}

/// Appends the text before each byte of `part` (which starts at `start`
/// in `text`) that needs an escape, and the escape; `copied` is where the
/// text not yet appended starts.
fn escape_each(out: &mut String, text: &str, start: usize, part: &[u8], copied: &mut usize) {
    for (offset, &byte) in part.iter().enumerate() {
        if needs_escape(byte) {
            let at = start + offset;
            out.push_str(text.get(*copied..at).unwrap_or_default());
            push_escape(out, byte);
            *copied = at + 1;
        }
    }
}

fn needs_escape(byte: u8) -> bool {
    byte < 0x20 || byte == b'"' || byte == b'\\'
}

/// The escape serde_json writes for `byte`.
fn push_escape(out: &mut String, byte: u8) {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    let short = match byte {
        b'"' => "\\\"",
        b'\\' => "\\\\",
        0x08 => "\\b",
        0x0C => "\\f",
        b'\n' => "\\n",
        b'\r' => "\\r",
        b'\t' => "\\t",
        _ => "",
    };
    if !short.is_empty() {
        out.push_str(short);
        return;
    }
    out.push_str("\\u00");
    out.push(char::from(HEX[usize::from(byte >> 4)]));
    out.push(char::from(HEX[usize::from(byte & 0xF)]));
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
        Value::Array(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                push_value(out, item);
            }
            out.push(']');
        }
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
                out.push('[');
                for (i, ReasoningPart { text, metadata }) in reasoning.iter().enumerate() {
                    if i > 0 {
                        out.push(',');
                    }
                    out.push('{');
                    push_key(out, "text", true);
                    push_string(out, text);
                    if let Some(metadata) = metadata {
                        push_key(out, "metadata", false);
                        push_value(out, metadata);
                    }
                    out.push('}');
                }
                out.push(']');
            }
            if !tool_calls.is_empty() {
                push_key(out, "tool_calls", false);
                out.push('[');
                for (i, call) in tool_calls.iter().enumerate() {
                    if i > 0 {
                        out.push(',');
                    }
                    push_call(out, call);
                }
                out.push(']');
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
