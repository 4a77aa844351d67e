//! The typed fast path and the `Value` path must agree on every line the
//! typed shape accepts (object arguments here are written compact with
//! sorted keys, the one form in which the wire's own text and the `Value`
//! path's re-serialised copy coincide), and the typed shape must refuse what
//! only the `Value` path knows how to read.

#![allow(clippy::unwrap_used, clippy::expect_used)] // a panic in a test is a test failure

use super::*;

#[test]
fn both_paths_give_the_same_events() {
    let lines = [
        r#"{"model":"qwen3","created_at":"t","message":{"role":"assistant","content":"","thinking":"plan \"a\""},"done":false}"#,
        r#"{"message":{"role":"assistant","content":"Hel\nlo"},"done":false}"#,
        r#"{"message":{"role":"assistant","content":"","tool_calls":[{"id":"call_1","function":{"index":0,"name":"a","arguments":{"city":"Paris","n":[1,2]}}},{"function":{"name":"b","arguments":"{\"path\":\"/etc/hosts\"}"}}]},"done":false}"#,
        r#"{"message":{"tool_calls":[{"id":"","function":{"name":"","arguments":null}},{"function":null},{"function":{"name":"c","arguments":{}}}]}}"#,
        r#"{"message":null,"done":null,"error":null}"#,
        r#"{"message":{"role":"assistant","content":""},"done":true,"done_reason":"","prompt_eval_count":26,"eval_count":12,"total_duration":5}"#,
    ];
    let (mut typed, mut slow) = (OllamaDecoder::new(), OllamaDecoder::new());
    let (mut typed_out, mut slow_out) = (Vec::new(), Vec::new());
    for data in lines {
        let line = typed_frame::<wire::Line>(data)
            .unwrap_or_else(|| panic!("the typed shape should accept {data}"));
        assert!(line.error.is_none());
        let typed_flow = typed.decode_typed(line, &mut typed_out);
        let value: Value = serde_json::from_str(data).unwrap();
        let slow_flow = slow.decode_value(&value, &mut slow_out).unwrap();
        assert_eq!(typed_flow, slow_flow, "{data}");
    }
    assert_eq!(typed_out.len(), 9, "{typed_out:?}");
    assert_eq!(typed_out, slow_out);
}

#[test]
fn the_typed_shape_refuses_what_only_the_value_path_reads() {
    for data in [
        r#"{"message":"text"}"#,
        r#"{"message":{"content":["a"]}}"#,
        r#"{"message":{"tool_calls":[1]}}"#,
        r#"{"done":"true"}"#,
        r#"{"done":true,"done_reason":7}"#,
        r#"{"done":true,"eval_count":-1}"#,
        "not json",
    ] {
        assert!(typed_frame::<wire::Line>(data).is_none(), "{data}");
    }
    let line = typed_frame::<wire::Line>(r#"{"error":"model \"x\" not found"}"#).unwrap();
    assert!(line.error.is_some());
}
