//! The typed fast path and the `Value` path must agree on every response
//! the typed shape accepts (arguments here are written compact with sorted
//! keys, the one form in which the wire's own text and the `Value` path's
//! re-serialised copy coincide), and the typed shape must refuse what only
//! the `Value` path knows how to read.

#![allow(clippy::unwrap_used, clippy::expect_used)] // a panic in a test is a test failure

use super::*;

#[test]
fn both_paths_give_the_same_events() {
    let responses = [
        r#"{"candidates":[{"content":{"role":"model","parts":[{"text":"Hi \"there\"\n","thoughtSignature":"sig_t"}]},"index":0}],"modelVersion":"g"}"#,
        r#"{"candidates":[{"content":{"parts":[{"text":"hmm","thought":true},{"text":"","thought":false}]}}]}"#,
        r#"{"candidates":[{"content":{"parts":[{"functionCall":{"name":"a","args":{"on":false,"room":"hall"}},"thoughtSignature":"sig_c"},{"functionCall":{"name":"b","id":"fc_1","args":{}}}]}}]}"#,
        r#"{"candidates":[{"content":{"parts":[{"functionCall":{"args":{"x":[1,{"y":null}]}}}]}}]}"#,
        r#"{"candidates":[{"content":{"parts":[{"functionCall":{"name":"c","args":null}},{"functionCall":{"name":"","id":""}}]}}]}"#,
        r#"{"candidates":[{"content":{"parts":[{"functionCall":{"name":"d"}},{"text":"after"}]}}]}"#,
        r#"{"candidates":[{"content":{"parts":[{"functionCall":{"name":"e","args":{}}}]},"finishReason":"STOP"}],"usageMetadata":{"promptTokenCount":0}}"#,
        r#"{"candidates":[],"usageMetadata":{"promptTokenCount":9,"totalTokenCount":9}}"#,
        r#"{"candidates":[{"content":null},{"content":{"parts":[{"text":"second candidate"}]}}],"promptFeedback":{"blockReason":null}}"#,
        r#"{"candidates":null,"usageMetadata":null}"#,
    ];
    let (mut typed, mut slow) = (Decoder::default(), Decoder::default());
    let (mut typed_out, mut slow_out) = (Vec::new(), Vec::new());
    for data in responses {
        let response = typed_frame::<wire::Response>(data)
            .unwrap_or_else(|| panic!("the typed shape should accept {data}"));
        assert!(response.error.is_none());
        typed.typed_chunk(response, &mut typed_out).unwrap();
        let value: Value = serde_json::from_str(data).unwrap();
        slow.chunk(&value, &mut slow_out).unwrap();
    }
    assert_eq!(typed_out.len(), 16, "{typed_out:?}");
    assert_eq!(typed_out, slow_out);
}

#[test]
fn a_blocked_prompt_is_the_same_error_on_both_paths() {
    let data = r#"{"promptFeedback":{"blockReason":"SAFETY"}}"#;
    let response = typed_frame::<wire::Response>(data).unwrap();
    let typed = Decoder::default().typed_chunk(response, &mut Vec::new());
    let value: Value = serde_json::from_str(data).unwrap();
    let slow = Decoder::default().chunk(&value, &mut Vec::new());
    assert_eq!(typed.unwrap_err(), slow.unwrap_err());
}

#[test]
fn the_typed_shape_refuses_what_only_the_value_path_reads() {
    for data in [
        // Any `functionCall` member is a call on the `Value` path, `null` too.
        r#"{"candidates":[{"content":{"parts":[{"functionCall":null}]}}]}"#,
        r#"{"candidates":[{"content":{"parts":[null]}}]}"#,
        r#"{"candidates":[{"content":{"parts":[{"text":7}]}}]}"#,
        r#"{"candidates":[{"finishReason":1}]}"#,
        r#"{"usageMetadata":{"promptTokenCount":-1}}"#,
        // The non-SSE stream endpoint's array of responses.
        r#"[{"candidates":[]}]"#,
        "not json",
    ] {
        assert!(typed_frame::<wire::Response>(data).is_none(), "{data}");
    }
    // An error member (even `null`) parses, and goes the `Value` way.
    for data in [r#"{"error":null}"#, r#"{"error":{"message":"m"}}"#] {
        assert!(typed_frame::<wire::Response>(data).unwrap().error.is_some());
    }
}
