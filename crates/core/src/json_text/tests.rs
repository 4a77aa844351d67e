#![allow(clippy::unwrap_used)] // a panic in a test is a test failure

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use serde_json::json;

use super::*;

/// Text that needs every kind of escape, and some that needs none.
const AWKWARD: &str = "quote \" back \\ tab \t nl \n cr \r bs \u{8} ff \u{c} bell \u{7} us \u{1f} del \u{7f} é 雪 🎉 / </script>";

fn string(text: &str) -> String {
    let mut out = String::new();
    push_string(&mut out, text);
    out
}

#[test]
fn a_string_is_escaped_exactly_where_json_needs_it() {
    for (text, expected) in [
        ("plain", r#""plain""#),
        ("", r#""""#),
        ("a\"b", r#""a\"b""#),
        ("a\\b", r#""a\\b""#),
        ("\n\r\t\u{8}\u{c}", r#""\n\r\t\b\f""#),
        ("\u{0}\u{1f}\u{1b}", r#""\u0000\u001f\u001b""#),
        ("\u{20}~\u{7f}é/", "\"\u{20}~\u{7f}é/\""),
        // Escapes on both sides of a 16-byte block, and inside one.
        (
            "\"0123456789abcdef\"0123456789abcde\\",
            r#""\"0123456789abcdef\"0123456789abcde\\""#,
        ),
        ("ééééééééé\"", "\"ééééééééé\\\"\""),
    ] {
        assert_eq!(string(text), expected, "{text:?}");
    }
}

#[test]
fn every_character_up_to_128_and_long_texts_read_as_serde_writes_them() {
    for byte in 0u8..128 {
        let one = char::from(byte).to_string();
        assert_eq!(string(&one), serde_json::to_string(&one).unwrap(), "{byte}");
        // The same byte at every place in and around a block.
        for at in 0..40 {
            let mut text = "x".repeat(40);
            text.replace_range(at..=at, &one);
            assert_eq!(string(&text), serde_json::to_string(&text).unwrap());
        }
    }
    let long = AWKWARD.repeat(50);
    assert_eq!(string(&long), serde_json::to_string(&long).unwrap());
}

#[test]
fn values_read_as_serde_writes_them() {
    for value in [
        json!(null),
        json!(true),
        json!(false),
        json!(0),
        json!(-3),
        json!(u64::MAX),
        json!(i64::MIN),
        json!(0.5),
        json!(-0.0),
        json!(1e300),
        json!(1.0),
        json!(f64::MIN_POSITIVE),
        json!([]),
        json!({}),
        json!({"b": 1, "a": [null, {"z": AWKWARD, AWKWARD: "k"}], "c": {"d": []}}),
    ] {
        let mut out = String::new();
        push_value(&mut out, &value);
        assert_eq!(out, serde_json::to_string(&value).unwrap(), "{value}");
    }
}

fn call(id: &str, arguments: Value) -> ToolCall {
    ToolCall {
        id: id.into(),
        name: "demo_echo".into(),
        raw_arguments: arguments.to_string(),
        arguments,
    }
}

#[test]
fn messages_read_as_serde_writes_them() {
    let messages = [
        Message::system(AWKWARD),
        Message::user(""),
        Message::user("!batch2"),
        Message::Assistant(AssistantMessage::default()),
        Message::Assistant(AssistantMessage {
            content: "done".into(),
            reasoning: Vec::new(),
            tool_calls: vec![
                call("call_0", json!({"tag": "done-0"})),
                call(AWKWARD, json!({"text": AWKWARD, "n": 2.5})),
            ],
        }),
        Message::Assistant(AssistantMessage {
            content: String::new(),
            reasoning: vec![
                ReasoningPart {
                    text: "thinking".into(),
                    metadata: Some(json!({"signature": "abc=="})),
                },
                ReasoningPart {
                    text: AWKWARD.into(),
                    metadata: None,
                },
            ],
            tool_calls: vec![call("c", json!({}))],
        }),
        Message::Tool(ToolMessage {
            tool_call_id: "call_0".into(),
            name: "demo_echo".into(),
            content: r#"{"tag":"done-0"}"#.into(),
            success: true,
        }),
        Message::Tool(ToolMessage {
            tool_call_id: AWKWARD.into(),
            name: AWKWARD.into(),
            content: AWKWARD.into(),
            success: false,
        }),
    ];
    for message in &messages {
        let mut out = String::new();
        push_message(&mut out, message);
        assert_eq!(out, serde_json::to_string(message).unwrap());
        let back: Message = serde_json::from_str(&out).unwrap();
        assert_eq!(&back, message);
    }
}

#[test]
fn plain_runs_end_at_the_first_quote_backslash_or_control_byte() {
    let naive = |bytes: &[u8]| {
        bytes
            .iter()
            .take_while(|&&b| b >= 0x20 && b != b'"' && b != b'\\')
            .count()
    };
    let mut rng = SmallRng::seed_from_u64(0x0E5C);
    for _ in 0..20_000 {
        let len = rng.random_range(0..40);
        let bytes: Vec<u8> = (0..len)
            .map(|_| match rng.random_range(0..8) {
                0 => b"{}[]:,\"\\ 0-1e.nu\t\x01x"[rng.random_range(0..19)],
                1 => rng.random_range(0x80..=0xFF),
                2 => rng.random_range(0..0x21),
                _ => rng.random_range(0x20..0x7F),
            })
            .collect();
        assert_eq!(plain_run(&bytes), naive(&bytes), "{bytes:?}");
    }
}
