//! The typed fast path and the `Value` path must agree on every event the
//! typed shape accepts, and the typed shape must refuse what only the
//! `Value` path knows how to read.

#![allow(clippy::unwrap_used, clippy::expect_used)] // a panic in a test is a test failure

use super::*;

fn frame(event: Option<&str>, data: &str) -> Frame {
    Frame {
        event: event.map(str::to_owned),
        data: data.to_owned(),
    }
}

#[test]
fn both_paths_give_the_same_events() {
    let events = [
        (
            None,
            r#"{"type":"message_start","message":{"id":"msg_1","type":"message","role":"assistant","content":[],"usage":{"input_tokens":25,"cache_read_input_tokens":5,"cache_creation_input_tokens":null,"output_tokens":1,"cache_creation":{"ephemeral_5m_input_tokens":0}}}}"#,
        ),
        (None, r#"{"type":"ping"}"#),
        (
            None,
            r#"{"type":"content_block_start","index":0,"content_block":{"type":"thinking","thinking":"First, ","signature":""}}"#,
        ),
        (
            None,
            r#"{"type":"content_block_delta","index":0,"delta":{"type":"thinking_delta","thinking":"Let me \"see\""}}"#,
        ),
        (
            None,
            r#"{"type":"content_block_delta","index":0,"delta":{"type":"signature_delta","signature":"EqQB"}}"#,
        ),
        (None, r#"{"type":"content_block_stop","index":0}"#),
        (
            None,
            r#"{"type":"content_block_start","index":1,"content_block":{"type":"redacted_thinking","data":""}}"#,
        ),
        (
            None,
            r#"{"type":"content_block_start","index":2,"content_block":{"type":"text","text":"Hi"}}"#,
        ),
        (
            None,
            r#"{"type":"content_block_delta","index":2,"delta":{"type":"text_delta","text":" there\n"}}"#,
        ),
        (
            None,
            r#"{"type":"content_block_start","index":3,"content_block":{"type":"tool_use","id":"toolu_1","name":"get","input":{}}}"#,
        ),
        (
            None,
            r#"{"type":"content_block_delta","index":3,"delta":{"type":"input_json_delta","partial_json":""}}"#,
        ),
        (
            None,
            r#"{"type":"content_block_delta","index":3,"delta":{"type":"input_json_delta","partial_json":"{\"a\": 1}"}}"#,
        ),
        (None, r#"{"type":"content_block_stop","index":3}"#),
        (
            None,
            r#"{"type":"content_block_start","index":4,"content_block":{"type":"tool_use","id":"","name":"whole","input":{"room":"hall","on":true}}}"#,
        ),
        (None, r#"{"type":"content_block_stop","index":4}"#),
        (
            None,
            r#"{"type":"content_block_start","index":5,"content_block":{"type":"tool_use","id":"toolu_3","name":"none","input":{ }}}"#,
        ),
        (None, r#"{"type":"content_block_stop","index":5}"#),
        (
            Some("content_block_start"),
            r#"{"index":6,"content_block":{"type":"tool_use","id":"toolu_4","name":"untyped"}}"#,
        ),
        (
            None,
            r#"{"type":"content_block_start","index":7,"content_block":null}"#,
        ),
        (
            None,
            r#"{"type":"content_block_delta","index":8,"delta":{"type":"future_delta"}}"#,
        ),
        (
            None,
            r#"{"type":"message_delta","delta":{"stop_reason":"tool_use","stop_sequence":null},"usage":{"output_tokens":89}}"#,
        ),
        (
            None,
            r#"{"type":"future_event","delta":{"stop_reason":"x"}}"#,
        ),
        (None, r#"{"type":"message_stop"}"#),
    ];
    let (mut typed, mut slow) = (Decoder::default(), Decoder::default());
    let (mut typed_out, mut slow_out) = (Vec::new(), Vec::new());
    for (event, data) in events {
        let frame = frame(event, data);
        let parsed = typed_frame::<wire::Event>(data)
            .unwrap_or_else(|| panic!("the typed shape should accept {data}"));
        let kind = parsed.kind.or(frame.event.as_deref()).unwrap_or("");
        let typed_flow = typed.decode_typed(kind, parsed, &mut typed_out);
        let slow_flow = slow.decode_value(&frame, &mut slow_out).unwrap();
        assert_eq!(typed_flow, slow_flow, "{data}");
    }
    // The thinking block's opening text is an event of its own.
    assert_eq!(typed_out.len(), 16, "{typed_out:?}");
    assert_eq!(typed_out, slow_out);
}

#[test]
fn the_typed_shape_refuses_what_only_the_value_path_reads() {
    for data in [
        r#"{"type":7}"#,
        r#"{"type":"content_block_stop","index":-1}"#,
        r#"{"type":"content_block_delta","index":0,"delta":"text"}"#,
        r#"{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":null,"text":"a"}}"#,
        r#"{"type":"message_start","message":{"usage":{"input_tokens":1.5}}}"#,
        "not json",
    ] {
        assert!(typed_frame::<wire::Event>(data).is_none(), "{data}");
    }
}
