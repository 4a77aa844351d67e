#![allow(clippy::unwrap_used, clippy::expect_used)] // a panic in a test is a test failure

//! Transcript tests for the Ollama native codec: real-looking NDJSON bodies
//! (shapes from Ollama's API docs and the bug reports behind the pain
//! points) through the codec and `StreamAssembler`.

use homeagent_core::{
    AssembledTurn, AssistantMessage, FinishReason, Message, ReasoningPart, StreamAssembler,
    StreamEvent, ToolCall, ToolMessage, Usage,
};
use homeagent_llm::codec::ollama::{OllamaCodec, OllamaDecoder, looks_like_textual_tool_call};
use homeagent_llm::{
    ChatRequest, CodecError, Endpoint, Flow, Frame, StreamDecoder, ToolSpec, WireCodec,
};
use serde_json::json;

/// Feeds an NDJSON body line by line, as the framer would, stopping at the
/// wire's end. Returns the events and the decoder (for its counters).
fn decode_lines(body: &str) -> (Vec<StreamEvent>, OllamaDecoder) {
    let mut decoder = OllamaDecoder::new();
    let mut out = Vec::new();
    for line in body.lines() {
        let frame = Frame {
            event: None,
            data: line.to_owned(),
        };
        if decoder.decode(&frame, &mut out).unwrap() == Flow::Done {
            break;
        }
    }
    (out, decoder)
}

fn assemble(events: Vec<StreamEvent>) -> AssembledTurn {
    let mut assembler = StreamAssembler::new();
    for event in events {
        assembler.push(event);
    }
    assembler.finish()
}

/// (id, name, arguments) of every call, for compact assertions.
fn calls(turn: &AssembledTurn) -> Vec<(String, String, serde_json::Value)> {
    turn.calls
        .iter()
        .map(|c| {
            (
                c.call.id.clone(),
                c.call.name.clone(),
                c.call.arguments.clone(),
            )
        })
        .collect()
}

fn indexes(events: &[StreamEvent]) -> Vec<Option<u32>> {
    events
        .iter()
        .filter_map(|e| match e {
            StreamEvent::ToolCall(f) => Some(f.stream_index),
            _ => None,
        })
        .collect()
}

/// A thinking model's streamed turn: thinking, text, then two parallel
/// calls in a `done: false` line (Ollama ≥ 0.9 behaviour), then the done line.
const STREAM_WITH_CALLS: &str = r#"{"model":"qwen3","created_at":"2025-05-27T22:54:57.1Z","message":{"role":"assistant","content":"","thinking":"The user wants"},"done":false}
{"model":"qwen3","created_at":"2025-05-27T22:54:57.2Z","message":{"role":"assistant","content":"","thinking":" two cities."},"done":false}
{"model":"qwen3","created_at":"2025-05-27T22:54:57.3Z","message":{"role":"assistant","content":"Checking both."},"done":false}
{"model":"qwen3","created_at":"2025-05-27T22:54:57.6Z","message":{"role":"assistant","content":"","tool_calls":[{"function":{"name":"get_temperature","arguments":{"city":"New York"}}},{"function":{"name":"get_temperature","arguments":{"city":"London"}}}]},"done":false}
{"model":"qwen3","created_at":"2025-05-27T22:54:57.7Z","message":{"role":"assistant","content":""},"done_reason":"stop","done":true,"total_duration":885095291,"load_duration":3753500,"prompt_eval_count":122,"prompt_eval_duration":328493000,"eval_count":33,"eval_duration":552222000}
"#;

/// The same turn as one non-streamed response.
const WHOLE_WITH_CALLS: &str = r#"{"model":"qwen3","created_at":"2025-05-27T22:54:57.7Z","message":{"role":"assistant","content":"Checking both.","thinking":"The user wants two cities.","tool_calls":[{"function":{"name":"get_temperature","arguments":{"city":"New York"}}},{"function":{"name":"get_temperature","arguments":{"city":"London"}}}]},"done_reason":"stop","done":true,"total_duration":885095291,"prompt_eval_count":122,"eval_count":33}"#;

fn expected_two_city_calls() -> Vec<(String, String, serde_json::Value)> {
    vec![
        (
            "call_0".into(),
            "get_temperature".into(),
            json!({"city": "New York"}),
        ),
        (
            "call_1".into(),
            "get_temperature".into(),
            json!({"city": "London"}),
        ),
    ]
}

#[test]
fn a_streamed_turn_with_thinking_text_and_parallel_calls() {
    let (events, decoder) = decode_lines(STREAM_WITH_CALLS);
    assert_eq!(decoder.skipped_frames(), 0);
    assert_eq!(decoder.suspected_textual_calls(), 0);
    let turn = assemble(events);
    assert_eq!(turn.text, "Checking both.");
    assert_eq!(
        turn.reasoning,
        vec![ReasoningPart {
            text: "The user wants two cities.".into(),
            metadata: None,
        }]
    );
    assert_eq!(calls(&turn), expected_two_city_calls());
    assert!(turn.calls.iter().all(|c| c.argument_error.is_none()));
    assert_eq!(turn.finish_reason, Some(FinishReason::Stop));
    assert_eq!(
        turn.usage,
        Usage {
            prompt_tokens: 122,
            completion_tokens: 33,
            total_tokens: 155,
        }
    );
}

#[test]
fn streamed_and_whole_responses_assemble_to_the_same_turn() {
    let (streamed, _) = decode_lines(STREAM_WITH_CALLS);
    let whole = OllamaCodec
        .decode_response(WHOLE_WITH_CALLS.as_bytes())
        .unwrap();
    let (streamed, whole) = (assemble(streamed), assemble(whole));
    assert_eq!(calls(&whole), expected_two_city_calls());
    assert_eq!(streamed, whole);
}

#[test]
fn two_calls_in_one_line_get_distinct_indexes_and_the_count_runs_across_lines() {
    let body = r#"{"model":"llama3.1","message":{"role":"assistant","content":"","tool_calls":[{"function":{"name":"get_temperature","arguments":{"city":"Paris"}}},{"function":{"name":"get_conditions","arguments":{"city":"Paris"}}}]},"done":false}
{"model":"llama3.1","message":{"role":"assistant","content":"","tool_calls":[{"function":{"name":"get_temperature","arguments":{"city":"Oslo"}}}]},"done":false}
{"model":"llama3.1","message":{"role":"assistant","content":""},"done":true,"done_reason":"stop"}
"#;
    let (events, _) = decode_lines(body);
    assert_eq!(indexes(&events), vec![Some(0), Some(1), Some(2)]);
    let turn = assemble(events);
    assert_eq!(
        calls(&turn),
        vec![
            (
                "call_0".into(),
                "get_temperature".into(),
                json!({"city": "Paris"})
            ),
            (
                "call_1".into(),
                "get_conditions".into(),
                json!({"city": "Paris"})
            ),
            (
                "call_2".into(),
                "get_temperature".into(),
                json!({"city": "Oslo"})
            ),
        ]
    );
}

#[test]
fn calls_in_the_final_done_line_are_not_lost() {
    // Older servers and some proxies (llama-swap before its fix) put the
    // calls in the `done: true` line itself.
    let body = r#"{"model":"llama3.2","message":{"role":"assistant","content":""},"done":false}
{"model":"llama3.2","created_at":"2024-07-22T20:33:28.123648Z","message":{"role":"assistant","content":"","tool_calls":[{"function":{"name":"get_current_weather","arguments":{"format":"celsius","location":"Paris, FR"}}}]},"done_reason":"stop","done":true,"prompt_eval_count":122,"eval_count":33}
"#;
    let (events, _) = decode_lines(body);
    let turn = assemble(events);
    assert_eq!(
        calls(&turn),
        vec![(
            "call_0".into(),
            "get_current_weather".into(),
            json!({"format": "celsius", "location": "Paris, FR"}),
        )]
    );
    assert_eq!(turn.finish_reason, Some(FinishReason::Stop));
    assert_eq!(turn.usage.completion_tokens, 33);
}

#[test]
fn server_ids_are_kept_and_string_arguments_pass_through_as_is() {
    let body = r#"{"model":"gpt-oss:20b","message":{"role":"assistant","content":"","tool_calls":[{"id":"call_k2v0xq8c","function":{"index":0,"name":"read_file","arguments":"{\"path\":\"/etc/hosts\"}"}},{"id":"call_7fbx1n2m","function":{"index":1,"name":"list_dir","arguments":{}}}]},"done":false}
{"model":"gpt-oss:20b","message":{"role":"assistant","content":""},"done":true,"done_reason":"stop"}
"#;
    let (events, _) = decode_lines(body);
    let raw: Vec<(Option<String>, String)> = events
        .iter()
        .filter_map(|e| match e {
            StreamEvent::ToolCall(f) => Some((f.id.clone(), f.raw_arguments.clone())),
            _ => None,
        })
        .collect();
    assert_eq!(
        raw,
        vec![
            (
                Some("call_k2v0xq8c".into()),
                r#"{"path":"/etc/hosts"}"#.into()
            ),
            (Some("call_7fbx1n2m".into()), "{}".into()),
        ]
    );
    let turn = assemble(events);
    assert_eq!(
        calls(&turn),
        vec![
            (
                "call_k2v0xq8c".into(),
                "read_file".into(),
                json!({"path": "/etc/hosts"})
            ),
            ("call_7fbx1n2m".into(), "list_dir".into(), json!({})),
        ]
    );
}

#[test]
fn a_length_stop_and_a_missing_done_reason() {
    let (events, _) = decode_lines(
        r#"{"model":"m","message":{"role":"assistant","content":"cut"},"done":true,"done_reason":"length"}"#,
    );
    assert_eq!(assemble(events).finish_reason, Some(FinishReason::Length));
    // Servers before 0.1.33 sent no done_reason at all.
    let (events, _) =
        decode_lines(r#"{"model":"m","message":{"role":"assistant","content":"ok"},"done":true}"#);
    assert!(events.contains(&StreamEvent::Finish {
        reason: "stop".into()
    }));
}

#[test]
fn lines_after_done_and_non_json_lines() {
    let body = "{\"model\":\"m\",\"message\":{\"role\":\"assistant\",\"content\":\"a\"},\"done\":false}\n\
                garbage from a proxy\n\
                \n\
                {\"model\":\"m\",\"message\":{\"role\":\"assistant\",\"content\":\"b\"},\"done\":true}\n\
                {\"model\":\"m\",\"message\":{\"role\":\"assistant\",\"content\":\"after\"},\"done\":false}\n";
    let (events, decoder) = decode_lines(body);
    assert_eq!(decoder.skipped_frames(), 1);
    assert_eq!(assemble(events).text, "ab");
}

#[test]
fn an_error_line_is_a_provider_error() {
    let mut decoder = OllamaDecoder::new();
    let frame = Frame {
        event: None,
        data: r#"{"error":"an error was encountered while running the model: unexpected EOF"}"#
            .into(),
    };
    let err = decoder.decode(&frame, &mut Vec::new()).unwrap_err();
    assert_eq!(
        err,
        CodecError::ProviderReported {
            protocol: "ollama",
            message: "an error was encountered while running the model: unexpected EOF".into(),
            transient: false,
        }
    );
    let whole = OllamaCodec
        .decode_response(br#"{"error":"model \"llama9\" not found, try pulling it first"}"#)
        .unwrap_err();
    assert!(
        matches!(whole, CodecError::ProviderReported { ref message, .. }
        if message == "model \"llama9\" not found, try pulling it first")
    );
    assert!(matches!(
        OllamaCodec.decode_response(b"<html>502</html>"),
        Err(CodecError::MalformedResponse { .. })
    ));
}

#[test]
fn error_bodies_give_the_provider_message() {
    assert_eq!(
        OllamaCodec.error_message(
            404,
            br#"{"error":"model \"qwen9\" not found, try pulling it first"}"#
        ),
        "HTTP 404: model \"qwen9\" not found, try pulling it first"
    );
    assert_eq!(
        OllamaCodec.error_message(502, b"Bad Gateway"),
        "HTTP 502: Bad Gateway"
    );
    assert_eq!(OllamaCodec.error_message(500, b""), "HTTP 500");
}

/// Pain point (ollama/ollama#5796, ollama-python#279): before 0.4.6 a
/// streamed turn carried its call as JSON text in `content`, split over
/// many lines. HomeAgent keeps it as text and never executes it; the
/// decoder only counts it for a diagnostic.
#[test]
fn a_tool_call_written_as_text_stays_text_and_is_never_executed() {
    let body = r#"{"model":"mistral","created_at":"2024-09-27T15:55:56.521147Z","message":{"role":"assistant","content":"[{\""},"done":false}
{"model":"mistral","created_at":"2024-09-27T15:55:56.551562Z","message":{"role":"assistant","content":"name"},"done":false}
{"model":"mistral","created_at":"2024-09-27T15:55:56.583256Z","message":{"role":"assistant","content":"\":\""},"done":false}
{"model":"mistral","created_at":"2024-09-27T15:55:56.61Z","message":{"role":"assistant","content":"get_current_location\", \"arguments\": {}}]"},"done":false}
{"model":"mistral","created_at":"2024-09-27T15:55:56.7Z","message":{"role":"assistant","content":""},"done":true,"done_reason":"stop"}
"#;
    let (events, decoder) = decode_lines(body);
    assert_eq!(decoder.suspected_textual_calls(), 1);
    let turn = assemble(events);
    assert!(turn.calls.is_empty(), "text must never become a call");
    assert_eq!(
        turn.text,
        r#"[{"name":"get_current_location", "arguments": {}}]"#
    );
    assert_eq!(turn.finish_reason, Some(FinishReason::Stop));
}

#[test]
fn the_textual_call_check_is_narrow() {
    assert!(looks_like_textual_tool_call(
        r#"{"name": "get_current_location", "parameters": {}}"#
    ));
    assert!(looks_like_textual_tool_call(
        "```json\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Oslo\"}}\n```"
    ));
    assert!(!looks_like_textual_tool_call("The weather in Oslo is 4°C."));
    assert!(!looks_like_textual_tool_call(
        r#"{"age": 22, "available": false}"#
    ));
    assert!(!looks_like_textual_tool_call(
        r#"{"name": "Ollama", "arguments": "none"}"#
    ));
    assert!(!looks_like_textual_tool_call("[]"));
    // A turn with a real call and JSON-looking text is not flagged.
    let body = r#"{"model":"m","message":{"role":"assistant","content":"{\"name\":\"x\",\"arguments\":{}}","tool_calls":[{"function":{"name":"x","arguments":{}}}]},"done":true}"#;
    let (_, decoder) = decode_lines(body);
    assert_eq!(decoder.suspected_textual_calls(), 0);
}

/// The end-of-turn check reads at most 64 KiB of text: a call written as
/// text of exactly that size is found, one byte more is not examined.
#[test]
fn the_textual_call_check_reads_up_to_64_kib() {
    const LIMIT: usize = 64 * 1024;
    let call_of = |len: usize| {
        let frame = r#"{"name": "get_weather", "arguments": {"city": ""}}"#;
        let city = "x".repeat(len - frame.len());
        format!(r#"{{"name": "get_weather", "arguments": {{"city": "{city}"}}}}"#)
    };
    for (len, pieces, found) in [
        (LIMIT, 1, 1),
        (LIMIT, 2, 1),
        (LIMIT + 1, 1, 0),
        (LIMIT + 1, 2, 0),
    ] {
        let text = call_of(len);
        assert_eq!(text.len(), len);
        assert!(looks_like_textual_tool_call(&text));
        let cut = text.len() / 2;
        let parts: Vec<&str> = if pieces == 1 {
            vec![&text]
        } else {
            vec![&text[..cut], &text[cut..]]
        };
        let mut body = String::new();
        for part in parts {
            let line = json!({"model": "m", "message": {"role": "assistant", "content": part}, "done": false});
            body.push_str(&format!("{line}\n"));
        }
        body.push_str(r#"{"model":"m","message":{"role":"assistant","content":""},"done":true}"#);
        let (events, decoder) = decode_lines(&body);
        assert_eq!(
            decoder.suspected_textual_calls(),
            found,
            "{len} bytes in {pieces} piece(s)"
        );
        assert_eq!(assemble(events).text, text, "the text is passed on whole");
    }
    // Plain text, however short, is no call.
    let (_, decoder) = decode_lines(
        r#"{"model":"m","message":{"role":"assistant","content":"It is 4°C in Oslo."},"done":true}"#,
    );
    assert_eq!(decoder.suspected_textual_calls(), 0);
}

#[test]
fn usage_is_reported_when_either_count_is() {
    for (counts, expected) in [
        (
            r#""prompt_eval_count":26,"eval_count":290"#,
            Some((26, 290)),
        ),
        (r#""eval_count":290"#, Some((0, 290))),
        (r#""prompt_eval_count":26"#, Some((26, 0))),
        ("", None),
    ] {
        let comma = if counts.is_empty() { "" } else { "," };
        let (events, _) = decode_lines(&format!(
            r#"{{"model":"m","message":{{"role":"assistant","content":"ok"}},"done":true{comma}{counts}}}"#
        ));
        let usage: Vec<&Usage> = events
            .iter()
            .filter_map(|e| match e {
                StreamEvent::Usage(usage) => Some(usage),
                _ => None,
            })
            .collect();
        let expected: Vec<Usage> = expected
            .map(|(prompt_tokens, completion_tokens)| Usage {
                prompt_tokens,
                completion_tokens,
                total_tokens: prompt_tokens + completion_tokens,
            })
            .into_iter()
            .collect();
        assert_eq!(usage, expected.iter().collect::<Vec<_>>(), "{counts}");
    }
}

/// Reasoning goes back as `thinking` only when this codec could have
/// written it: no metadata, or metadata of its own namespace alone.
#[test]
fn only_reasoning_this_codec_could_have_written_is_replayed() {
    let part = |text: &str, metadata: Option<serde_json::Value>| ReasoningPart {
        text: text.into(),
        metadata,
    };
    let mut chat = conversation();
    let Message::Assistant(assistant) = &mut chat.messages[2] else {
        panic!("the conversation's third message is the assistant's");
    };
    assistant.reasoning = vec![
        part("none. ", None),
        part("null. ", Some(serde_json::Value::Null)),
        part("own. ", Some(json!({"ollama": {"note": 1}}))),
        part("mixed. ", Some(json!({"ollama": {}, "anthropic": {}}))),
        part("foreign. ", Some(json!({"gemini": {}}))),
        part("odd. ", Some(json!("a string"))),
    ];
    let body = OllamaCodec
        .build_request(&endpoint(None), &chat)
        .unwrap()
        .body_json()
        .unwrap();
    assert_eq!(body["messages"][2]["thinking"], "none. null. own. ");
}

fn endpoint(key: Option<&str>) -> Endpoint {
    Endpoint {
        base_url: "http://localhost:11434/".into(),
        api_key: key.map(str::to_owned),
    }
}

fn conversation() -> ChatRequest {
    ChatRequest {
        model: "qwen3".into(),
        messages: vec![
            Message::system("You are terse."),
            Message::user("Temperature in New York and London?"),
            Message::Assistant(AssistantMessage {
                content: String::new(),
                reasoning: vec![
                    ReasoningPart {
                        text: "Two cities, two calls.".into(),
                        metadata: None,
                    },
                    ReasoningPart {
                        text: "signed by another provider".into(),
                        metadata: Some(json!({"anthropic": {"signature": "EqQBCgIYAhIM"}})),
                    },
                ],
                tool_calls: vec![
                    ToolCall {
                        id: "call_0".into(),
                        name: "get_temperature".into(),
                        arguments: json!({"city": "New York"}),
                        raw_arguments: r#"{"city":"New York"}"#.into(),
                    },
                    ToolCall {
                        id: "call_1".into(),
                        name: "get_temperature".into(),
                        arguments: json!({"city": "London"}),
                        raw_arguments: r#"{"city":"London"}"#.into(),
                    },
                ],
            }),
            Message::Tool(ToolMessage {
                tool_call_id: "call_0".into(),
                name: "get_temperature".into(),
                content: "22°C".into(),
                success: true,
            }),
            Message::Tool(ToolMessage {
                tool_call_id: "call_1".into(),
                name: "get_temperature".into(),
                content: "weather service timed out".into(),
                success: false,
            }),
        ],
        tools: vec![ToolSpec::new(
            "get_temperature",
            "Get the current temperature for a city",
            &json!({"type": "object", "required": ["city"], "properties": {"city": {"type": "string"}}}),
        )],
        max_tokens: 1024,
        temperature: Some(0.5),
        stream: true,
        rendered: Default::default(),
    }
}

#[test]
fn the_request_has_ollamas_shape() {
    let request = OllamaCodec
        .build_request(&endpoint(None), &conversation())
        .unwrap();
    assert_eq!(request.url, "http://localhost:11434/api/chat");
    assert_eq!(
        request.headers,
        vec![("content-type".to_owned(), "application/json".to_owned())]
    );
    assert_eq!(
        request.body_json().unwrap(),
        json!({
            "model": "qwen3",
            "messages": [
                {"role": "system", "content": "You are terse."},
                {"role": "user", "content": "Temperature in New York and London?"},
                {"role": "assistant", "content": "", "thinking": "Two cities, two calls.", "tool_calls": [
                    {"id": "call_0", "function": {"index": 0, "name": "get_temperature", "arguments": {"city": "New York"}}},
                    {"id": "call_1", "function": {"index": 1, "name": "get_temperature", "arguments": {"city": "London"}}}
                ]},
                {"role": "tool", "content": "22°C", "tool_name": "get_temperature", "tool_call_id": "call_0"},
                {"role": "tool", "content": "{\"error\":\"weather service timed out\"}", "tool_name": "get_temperature", "tool_call_id": "call_1"}
            ],
            "tools": [{"type": "function", "function": {
                "name": "get_temperature",
                "description": "Get the current temperature for a city",
                "parameters": {"type": "object", "required": ["city"], "properties": {"city": {"type": "string"}}}
            }}],
            "stream": true,
            "options": {"num_predict": 1024, "temperature": 0.5}
        })
    );
}

#[test]
fn a_key_becomes_a_bearer_header_and_no_tools_means_no_tools_field() {
    let mut chat = conversation();
    chat.tools.clear();
    chat.temperature = None;
    chat.stream = false;
    let request = OllamaCodec
        .build_request(&endpoint(Some("sk-ollama-cloud")), &chat)
        .unwrap();
    assert!(request.headers.contains(&(
        "authorization".to_owned(),
        "Bearer sk-ollama-cloud".to_owned()
    )));
    assert!(request.body_json().unwrap().get("tools").is_none());
    assert_eq!(request.body_json().unwrap()["stream"], json!(false));
    assert_eq!(
        request.body_json().unwrap()["options"],
        json!({"num_predict": 1024})
    );
    // The key never shows in Debug output.
    assert!(!format!("{request:?}").contains("sk-ollama-cloud"));
}

#[test]
fn the_codec_asks_for_ndjson_framing_and_decodes_a_whole_body() {
    assert_eq!(OllamaCodec.framing(), homeagent_llm::codec::Framing::Ndjson);
    let events =
        homeagent_llm::codec::decode_stream_body(&OllamaCodec, STREAM_WITH_CALLS.as_bytes())
            .unwrap();
    let (by_lines, _) = decode_lines(STREAM_WITH_CALLS);
    assert_eq!(events, by_lines);
    assert_eq!(calls(&assemble(events)), expected_two_city_calls());
}

#[test]
fn temperatures_are_sent_as_written_and_non_finite_ones_refused() {
    let codec = OllamaCodec;
    let mut request = conversation();
    request.temperature = Some(0.7);
    let wire = codec.build_request(&endpoint(None), &request).unwrap();
    // 0.7f32 widened to f64 would be 0.699999988079071.
    assert_eq!(
        wire.body_json().unwrap()["options"]["temperature"],
        json!(0.7)
    );
    request.temperature = Some(f32::NAN);
    assert!(matches!(
        codec.build_request(&endpoint(None), &request),
        Err(CodecError::Unencodable { .. })
    ));
}
