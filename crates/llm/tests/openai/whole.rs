//! Whole (non-streamed) responses and HTTP error bodies.

use homeagent_core::{FinishReason, StreamAssembler, Usage};
use homeagent_llm::codec::openai::OpenAiCodec;
use homeagent_llm::{CodecError, WireCodec};
use serde_json::json;

use super::{call, delta, run, runnable_calls, sse, usage_chunk};

const COMPLETION: &str = r#"{
  "id": "chatcmpl-B9MBs8CjcvOU2jLn4n570S5qMJKcT",
  "object": "chat.completion",
  "created": 1741569952,
  "model": "deepseek-chat",
  "choices": [{
    "index": 0,
    "message": {
      "role": "assistant",
      "content": "Checking both.",
      "reasoning_content": "Two independent reads.",
      "tool_calls": [
        {"id": "call_9aXq", "type": "function",
         "function": {"name": "sensor_read", "arguments": "{\"entity\":\"sensor.attic\"}"}},
        {"id": "call_9aXr", "type": "function",
         "function": {"name": "light_set", "arguments": "{\"entity\":\"light.attic\",\"on\":true}"}}
      ],
      "refusal": null
    },
    "logprobs": null,
    "finish_reason": "tool_calls"
  }],
  "usage": {"prompt_tokens": 90, "completion_tokens": 33, "total_tokens": 123}
}"#;

#[test]
fn whole_response_decodes_to_the_same_turn_as_its_stream() {
    let events = OpenAiCodec.decode_response(COMPLETION.as_bytes()).unwrap();
    let mut assembler = StreamAssembler::new();
    for event in events {
        assembler.push(event);
    }
    let whole = assembler.finish();

    let streamed_body = sse(&[
        delta(
            r#"{"role":"assistant","content":null,"reasoning_content":"Two independent "}"#,
            "null",
        ),
        delta(r#"{"content":null,"reasoning_content":"reads."}"#, "null"),
        delta(r#"{"content":"Checking"}"#, "null"),
        delta(r#"{"content":" both."}"#, "null"),
        delta(
            r#"{"tool_calls":[{"index":0,"id":"call_9aXq","type":"function","function":{"name":"sensor_read","arguments":"{\"entity\":"}}]}"#,
            "null",
        ),
        delta(
            r#"{"tool_calls":[{"index":1,"id":"call_9aXr","type":"function","function":{"name":"light_set","arguments":"{\"entity\":\"light.attic\","}}]}"#,
            "null",
        ),
        delta(
            r#"{"tool_calls":[{"index":0,"function":{"arguments":"\"sensor.attic\"}"}}]}"#,
            "null",
        ),
        delta(
            r#"{"tool_calls":[{"index":1,"function":{"arguments":"\"on\":true}"}}]}"#,
            "null",
        ),
        delta("{}", r#""tool_calls""#),
        usage_chunk(90, 33),
    ]);
    let (streamed, _) = run(&streamed_body);
    assert_eq!(streamed, whole);

    // And the turn is what the body says, written out by hand.
    assert_eq!(whole.text, "Checking both.");
    assert_eq!(whole.reasoning[0].text, "Two independent reads.");
    assert_eq!(
        runnable_calls(&whole),
        [
            call(
                "call_9aXq",
                "sensor_read",
                json!({"entity": "sensor.attic"})
            ),
            call(
                "call_9aXr",
                "light_set",
                json!({"entity": "light.attic", "on": true})
            ),
        ]
    );
    assert_eq!(whole.finish_reason, Some(FinishReason::ToolCalls));
    assert_eq!(
        whole.usage,
        Usage {
            prompt_tokens: 90,
            completion_tokens: 33,
            total_tokens: 123
        }
    );
}

#[test]
fn whole_response_calls_without_ids_stay_apart_by_position() {
    // Some local servers omit tool-call ids in whole responses; the call's
    // place in the list is its stream index, and the assembler names them.
    let body = br#"{"id":"chatcmpl-local","object":"chat.completion","created":1741569952,"model":"qwen3",
      "choices":[{"index":0,"message":{"role":"assistant","content":null,"tool_calls":[
        {"type":"function","function":{"name":"sensor_read","arguments":"{\"entity\":\"sensor.a\"}"}},
        {"type":"function","function":{"name":"sensor_read","arguments":{"entity":"sensor.b"}}}]},
        "finish_reason":"tool_calls"}]}"#;
    let mut assembler = StreamAssembler::new();
    for event in OpenAiCodec.decode_response(body).unwrap() {
        assembler.push(event);
    }
    let turn = assembler.finish();
    assert_eq!(
        runnable_calls(&turn),
        [
            call("call_0", "sensor_read", json!({"entity": "sensor.a"})),
            call("call_1", "sensor_read", json!({"entity": "sensor.b"})),
        ]
    );
    assert_eq!(turn.usage, Usage::default());
}

#[test]
fn whole_response_errors() {
    assert_eq!(
        OpenAiCodec
            .decode_response(br#"{"error":{"message":"Rate limit reached","type":"requests"}}"#)
            .unwrap_err(),
        CodecError::ProviderReported {
            protocol: "openai",
            message: "Rate limit reached".into(),
            transient: false,
        }
    );
    assert!(matches!(
        OpenAiCodec
            .decode_response(b"<html>502 Bad Gateway</html>")
            .unwrap_err(),
        CodecError::MalformedResponse { .. }
    ));
    assert!(matches!(
        OpenAiCodec
            .decode_response(br#"{"id":"x","object":"chat.completion"}"#)
            .unwrap_err(),
        CodecError::MalformedResponse { .. }
    ));
}

#[test]
fn error_message_prefers_the_providers_words() {
    let codec = OpenAiCodec;
    assert_eq!(
        codec.error_message(
            401,
            br#"{"error":{"message":"Incorrect API key provided: sk-test***123.","type":"invalid_request_error","param":null,"code":"invalid_api_key"}}"#
        ),
        "HTTP 401: Incorrect API key provided: sk-test***123."
    );
    assert_eq!(
        codec.error_message(400, br#"{"error":"model 'llama9' not found"}"#),
        "HTTP 400: model 'llama9' not found"
    );
    assert_eq!(
        codec.error_message(502, b"<html><body>502 Bad Gateway</body></html>\n"),
        "HTTP 502: <html><body>502 Bad Gateway</body></html>"
    );
    assert_eq!(codec.error_message(503, b""), "HTTP 503");
    // Long bodies are cut at 200 bytes, never inside a character: 199 ASCII
    // bytes then a 3-byte character straddling the cut.
    let mut body = "a".repeat(199).into_bytes();
    body.extend_from_slice("€ and more".as_bytes());
    assert_eq!(
        codec.error_message(500, &body),
        format!("HTTP 500: {}", "a".repeat(199))
    );
    let body = "b".repeat(300);
    assert_eq!(
        codec.error_message(500, body.as_bytes()),
        format!("HTTP 500: {}", "b".repeat(200))
    );
}
