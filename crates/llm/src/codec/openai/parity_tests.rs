//! The typed fast path and the `Value` path must agree on every chunk the
//! typed shape accepts, and the typed shape must refuse what only the
//! `Value` path knows how to read.

#![allow(clippy::unwrap_used, clippy::expect_used)] // a panic in a test is a test failure

use super::*;

fn frame(data: &str) -> Frame {
    Frame {
        event: None,
        data: data.to_owned(),
    }
}

/// The events of `chunks` read through each path by its own decoder.
fn both_paths(chunks: &[&str]) -> (Vec<StreamEvent>, Vec<StreamEvent>) {
    let (mut typed, mut slow) = (ChunkDecoder::default(), ChunkDecoder::default());
    let (mut typed_out, mut slow_out) = (Vec::new(), Vec::new());
    for data in chunks {
        let chunk = typed_frame::<wire::Chunk>(data)
            .unwrap_or_else(|| panic!("the typed shape should accept {data}"));
        assert!(chunk.error.is_none());
        typed.decode_typed(chunk, &mut typed_out);
        slow.decode_value(&frame(data), data, &mut slow_out)
            .unwrap();
    }
    (typed_out, slow_out)
}

#[test]
fn both_paths_give_the_same_events() {
    let chunks = [
        r#"{"id":"chatcmpl-1","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"role":"assistant","content":""},"finish_reason":null}]}"#,
        r#"{"choices":[{"index":0,"delta":{"reasoning_content":"think","reasoning":"think"}}]}"#,
        r#"{"choices":[{"index":0,"delta":{"reasoning_content":"","reasoning":"other"}}]}"#,
        r#"{"choices":[{"index":0,"delta":{"content":"Hel\"lo\n"},"logprobs":null}]}"#,
        r#"{"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"id":"call_a","type":"function","function":{"name":"f","arguments":""}}]}}]}"#,
        r#"{"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"id":"call_a","type":"function","function":{"name":"f","arguments":""}}]}}]}"#,
        r#"{"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":"{\"a\":"}},{"index":0,"function":{"arguments":"1}"}}]}}]}"#,
        r#"{"choices":[{"index":0,"delta":{"tool_calls":[{"index":1,"id":"call_b","name":"g","arguments":"{}","extra_content":{"google":{"thought_signature":"s"}}}]}}]}"#,
        r#"{"choices":[{"index":0,"delta":{"tool_calls":[{"index":1,"extra_content":{"google":{"thought_signature":"t"}}},{"index":2,"extra_content":null}]}}]}"#,
        r#"{"choices":[{"index":0,"delta":{"tool_calls":[{"index":2,"id":"","function":null,"name":"h"}]}}]}"#,
        r#"{"choices":[{"index":0,"delta":{"tool_calls":[{"index":3,"function":{"name":null,"arguments":null},"name":"k","arguments":"{}"}]}}]}"#,
        r#"{"choices":[{"index":0,"delta":{"tool_calls":[{"function":{"arguments":"x"}}]}}]}"#,
        r#"{"choices":[{"index":4294967296,"delta":{"content":"not choice 0"}},{"delta":{"content":"no index"}}]}"#,
        r#"{"choices":[{"index":1,"delta":{"content":"choice 1"},"finish_reason":"stop"}]}"#,
        r#"{"choices":[{"index":0,"delta":null,"finish_reason":""}]}"#,
        r#"{"choices":[{"index":0,"delta":{},"finish_reason":"tool_calls"}],"usage":null}"#,
        r#"{"choices":[],"usage":{"prompt_tokens":7,"completion_tokens":3}}"#,
        r#"{"choices":null,"usage":{}, "error": null}"#,
    ];
    let (typed, slow) = both_paths(&chunks);
    // 17 events, and the marker of the `reasoning_content` seen, which also
    // holds the last `extra_content` of call_b.
    assert_eq!(typed.len(), 18, "{typed:?}");
    assert_eq!(typed, slow);
    let marker = serde_json::json!({"openai": {
        "reasoning_field": "reasoning_content",
        "tool_call_extra_content": [{"id": "call_b", "extra_content": {"google": {"thought_signature": "t"}}}],
    }});
    assert!(
        typed.contains(&StreamEvent::ReasoningMetadata { metadata: marker }),
        "{typed:?}"
    );
}

#[test]
fn the_typed_shape_refuses_what_only_the_value_path_reads() {
    for data in [
        // Mistral's content parts.
        r#"{"choices":[{"index":0,"delta":{"content":[{"type":"text","text":"a"}]}}]}"#,
        // Arguments sent as an object.
        r#"{"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":{"a":1}}}]}}]}"#,
        r#"{"choices":[{"index":"0","delta":{"content":"a"}}]}"#,
        r#"{"choices":[{"index":0,"delta":{"tool_calls":[{"index":-1}]}}]}"#,
        r#"{"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":"f"}]}}]}"#,
        r#"{"choices":[{"index":0,"delta":{"tool_calls":[7]}}]}"#,
        r#"{"choices":[],"choices":[]}"#,
        r#"[1]"#,
        "not json",
    ] {
        assert!(typed_frame::<wire::Chunk>(data).is_none(), "{data}");
    }
    // An error member parses, and is handed to the `Value` path.
    let chunk = typed_frame::<wire::Chunk>(r#"{"error":{"message":"boom"}}"#).unwrap();
    assert!(chunk.error.is_some());
}
