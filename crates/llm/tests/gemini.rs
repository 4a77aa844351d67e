#![allow(clippy::unwrap_used, clippy::expect_used)] // a panic in a test is a test failure

//! Gemini codec: request building (one Content per turn, signatures back on
//! their parts, sanitized schemas), SSE transcripts through the codec and
//! the kernel's assembler (the Gemini pain points), whole responses, errors.

use homeagent_core::{
    AssembledTurn, AssistantMessage, Diagnostic, FinishReason, Message, ReasoningPart,
    StreamAssembler, StreamEvent, ToolCall, ToolCallFragment, ToolMessage, Usage,
};
use homeagent_llm::codec::decode_stream_body;
use homeagent_llm::codec::gemini::GeminiCodec;
use homeagent_llm::{
    ChatRequest, CodecError, Endpoint, Frame, Protocol, ToolSpec, WireCodec, codec_for,
};
use serde_json::{Value, json};

/// Request building, schemas and HTTP error bodies.
mod request;

/// Splits a well-formed SSE transcript into frames (independent of the
/// real framer): blank-line separated `data:` lines.
fn frames(transcript: &str) -> Vec<Frame> {
    transcript
        .split("\n\n")
        .filter_map(|block| {
            let data: Vec<&str> = block
                .lines()
                .filter_map(|line| line.strip_prefix("data:"))
                .map(|v| v.strip_prefix(' ').unwrap_or(v))
                .collect();
            (!data.is_empty()).then(|| Frame {
                event: None,
                data: data.join("\n"),
            })
        })
        .collect()
}

fn decode(transcript: &str) -> Result<(Vec<StreamEvent>, u64), CodecError> {
    let mut decoder = GeminiCodec.stream_decoder();
    let mut out = Vec::new();
    for frame in frames(transcript) {
        decoder.decode(&frame, &mut out)?;
    }
    Ok((out, decoder.skipped_frames()))
}

fn assemble(events: Vec<StreamEvent>) -> AssembledTurn {
    let mut assembler = StreamAssembler::new();
    for event in events {
        assembler.push(event);
    }
    assembler.finish()
}

fn fragments(events: &[StreamEvent]) -> Vec<ToolCallFragment> {
    events
        .iter()
        .filter_map(|e| match e {
            StreamEvent::ToolCall(f) => Some(f.clone()),
            _ => None,
        })
        .collect()
}

/// (id, name, arguments) of every call.
fn calls(turn: &AssembledTurn) -> Vec<(String, String, Value)> {
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

fn triple(id: &str, name: &str, arguments: Value) -> (String, String, Value) {
    (id.to_owned(), name.to_owned(), arguments)
}

fn endpoint() -> Endpoint {
    Endpoint {
        base_url: "https://generativelanguage.googleapis.com/".into(),
        api_key: Some("AIzaSyTestKey".into()),
    }
}

/// Two parallel calls in one chunk, as Gemini 2.5/3 streams them: whole
/// `functionCall` parts, no ids, the signature only on the first, and
/// `finishReason: STOP` (there is no "tool_calls" finish reason).
const PARALLEL_STOP: &str = r#"data: {"candidates": [{"content": {"parts": [{"functionCall": {"name": "get_weather","args": {"city": "Paris"}},"thoughtSignature": "CiQB0e2Kb3dRh+BYdbZvmulSN2Pwwt2cmT2ZFy0IjSVv4aVtb0E="},{"functionCall": {"name": "get_weather","args": {"city": "Rome"}}}],"role": "model"},"finishReason": "STOP","index": 0}],"usageMetadata": {"promptTokenCount": 74,"candidatesTokenCount": 30,"totalTokenCount": 180,"thoughtsTokenCount": 76},"modelVersion": "gemini-2.5-flash","responseId": "2yXgaOa7Dc2SvdIPw9Kp6Qs"}

"#;

#[test]
fn stop_with_parallel_calls_still_yields_every_call_with_unique_ids() {
    let (events, skipped) = decode(PARALLEL_STOP).unwrap();
    assert_eq!(skipped, 0);
    let turn = assemble(events);
    assert_eq!(turn.finish_reason, Some(FinishReason::Stop));
    // No ids on the wire: the assembler gives each call its own.
    assert_eq!(
        calls(&turn),
        vec![
            triple("call_0", "get_weather", json!({"city": "Paris"})),
            triple("call_1", "get_weather", json!({"city": "Rome"})),
        ]
    );
    // Thinking is output too, billed as such: 30 candidate tokens plus 76
    // thought tokens, as OpenAI's and Anthropic's output counts include
    // reasoning (and 74 + 106 is the total Gemini reports).
    assert_eq!(
        turn.usage,
        Usage {
            prompt_tokens: 74,
            completion_tokens: 106,
            total_tokens: 180
        }
    );
    assert_eq!(
        turn.reasoning,
        vec![ReasoningPart {
            text: String::new(),
            metadata: Some(json!({"gemini": {
                "thought_signature": "CiQB0e2Kb3dRh+BYdbZvmulSN2Pwwt2cmT2ZFy0IjSVv4aVtb0E=",
                "part": "function_call",
                "call_index": 0,
            }})),
        }]
    );
}

/// Text, then three calls spread over three chunks, then the finish.
const CALLS_ACROSS_CHUNKS: &str = r#"data: {"candidates": [{"content": {"parts": [{"text": "I'll turn off the lights "}],"role": "model"},"index": 0}],"usageMetadata": {"promptTokenCount": 210,"totalTokenCount": 210},"modelVersion": "gemini-2.5-flash","responseId": "mK3gaLqbJ9iOvdIP_5uQ4Qk"}

data: {"candidates": [{"content": {"parts": [{"text": "in all three rooms."},{"functionCall": {"name": "set_light","args": {"room": "kitchen","on": false}}}],"role": "model"},"index": 0}],"usageMetadata": {"promptTokenCount": 210,"totalTokenCount": 210},"modelVersion": "gemini-2.5-flash","responseId": "mK3gaLqbJ9iOvdIP_5uQ4Qk"}

data: {"candidates": [{"content": {"parts": [{"functionCall": {"name": "set_light","args": {"room": "hall","on": false}}}],"role": "model"},"index": 0}],"usageMetadata": {"promptTokenCount": 210,"totalTokenCount": 210},"modelVersion": "gemini-2.5-flash","responseId": "mK3gaLqbJ9iOvdIP_5uQ4Qk"}

data: {"candidates": [{"content": {"parts": [{"functionCall": {"name": "set_light","args": {"room": "bedroom","on": false}}}],"role": "model"},"finishReason": "STOP","index": 0}],"usageMetadata": {"promptTokenCount": 210,"candidatesTokenCount": 41,"totalTokenCount": 251},"modelVersion": "gemini-2.5-flash","responseId": "mK3gaLqbJ9iOvdIP_5uQ4Qk"}

"#;

#[test]
fn calls_across_chunks_get_distinct_stream_indexes() {
    let (events, _) = decode(CALLS_ACROSS_CHUNKS).unwrap();
    // Gemini sends `args` as an object, not text: the codec passes the
    // wire's own text of that object through (key order and spacing kept).
    assert_eq!(
        fragments(&events),
        vec![
            ToolCallFragment {
                stream_index: Some(0),
                id: None,
                name: Some("set_light".into()),
                raw_arguments: r#"{"room": "kitchen","on": false}"#.into(),
            },
            ToolCallFragment {
                stream_index: Some(1),
                id: None,
                name: Some("set_light".into()),
                raw_arguments: r#"{"room": "hall","on": false}"#.into(),
            },
            ToolCallFragment {
                stream_index: Some(2),
                id: None,
                name: Some("set_light".into()),
                raw_arguments: r#"{"room": "bedroom","on": false}"#.into(),
            },
        ]
    );
    let turn = assemble(events);
    assert_eq!(turn.text, "I'll turn off the lights in all three rooms.");
    assert_eq!(
        calls(&turn),
        vec![
            triple(
                "call_0",
                "set_light",
                json!({"room": "kitchen", "on": false})
            ),
            triple("call_1", "set_light", json!({"room": "hall", "on": false})),
            triple(
                "call_2",
                "set_light",
                json!({"room": "bedroom", "on": false})
            ),
        ]
    );
    assert_eq!(turn.usage.completion_tokens, 41);
    assert_eq!(turn.usage.total_tokens, 251);
}

#[test]
fn name_and_args_in_separate_chunks_make_one_call_each() {
    // Seen behind some Gemini proxies: the name arrives with empty args,
    // the args in a later nameless functionCall part.
    let transcript = r#"data: {"candidates": [{"content": {"parts": [{"functionCall": {"name": "write_file","args": {}}}],"role": "model"},"index": 0}]}

data: {"candidates": [{"content": {"parts": [{"functionCall": {"args": {"path": "notes.md","content": "eggs, milk"}}}],"role": "model"},"index": 0}]}

data: {"candidates": [{"content": {"parts": [{"functionCall": {"name": "read_file","args": {}}}],"role": "model"},"index": 0}]}

data: {"candidates": [{"content": {"parts": [{"functionCall": {"args": {"path": "todo.md"}}}],"role": "model"},"index": 0}]}

data: {"candidates": [{"content": {"parts": [{"text": ""}],"role": "model"},"finishReason": "STOP","index": 0}],"usageMetadata": {"promptTokenCount": 90,"candidatesTokenCount": 22,"totalTokenCount": 112}}

"#;
    let turn = assemble(decode(transcript).unwrap().0);
    assert_eq!(
        calls(&turn),
        vec![
            triple(
                "call_0",
                "write_file",
                json!({"path": "notes.md", "content": "eggs, milk"})
            ),
            triple("call_1", "read_file", json!({"path": "todo.md"})),
        ]
    );
    assert!(turn.calls.iter().all(|c| c.argument_error.is_none()));
    assert!(
        !turn
            .diagnostics
            .iter()
            .any(|d| matches!(d, Diagnostic::NamelessCallDropped { .. })),
        "{:?}",
        turn.diagnostics
    );
}

#[test]
fn wire_ids_are_kept_and_missing_ones_assigned() {
    let transcript = r#"data: {"candidates": [{"content": {"parts": [{"functionCall": {"id": "7q1vkvzp","name": "get_time","args": {"timezone": "Europe/Paris"}}},{"functionCall": {"name": "get_time","args": {"timezone": "Asia/Tokyo"}}}],"role": "model"},"finishReason": "STOP","index": 0}]}

"#;
    let turn = assemble(decode(transcript).unwrap().0);
    assert_eq!(
        calls(&turn),
        vec![
            triple("7q1vkvzp", "get_time", json!({"timezone": "Europe/Paris"})),
            triple("call_1", "get_time", json!({"timezone": "Asia/Tokyo"})),
        ]
    );
}

#[test]
fn a_call_without_args_gets_an_empty_object() {
    let transcript = r#"data: {"candidates": [{"content": {"parts": [{"functionCall": {"name": "list_devices"}}],"role": "model"},"finishReason": "STOP","index": 0}]}

"#;
    let turn = assemble(decode(transcript).unwrap().0);
    assert_eq!(turn.calls.len(), 1);
    assert_eq!(turn.calls[0].call.arguments, json!({}));
    assert_eq!(turn.calls[0].call.raw_arguments, "{}");
    assert!(
        !turn
            .diagnostics
            .iter()
            .any(|d| matches!(d, Diagnostic::ArgumentsLookDropped { .. }))
    );
}

/// A call the token limit ended before any arguments came is cut, not a
/// call without arguments: it must not run with `{}` (invariant 11), in a
/// stream (value and typed chunk readers alike) or a whole response.
#[test]
fn a_call_cut_by_max_tokens_before_its_args_is_truncated_not_run_with_nothing() {
    use homeagent_core::ErrorReason;
    let check = |turn: AssembledTurn, what: &str| {
        assert_eq!(turn.finish_reason, Some(FinishReason::Length), "{what}");
        assert_eq!(turn.calls.len(), 1, "{what}");
        let error = turn.calls[0].argument_error.as_ref();
        assert_eq!(
            error.map(|e| e.reason),
            Some(ErrorReason::Truncated),
            "{what}: {:?}",
            turn.calls[0]
        );
    };
    // The same chunk, once in the typed reader's shape and once with a
    // part it cannot read (`thought` as a string), which sends it the
    // `Value` way.
    let chunk = r#"{"candidates": [{"content": {"parts": [{"functionCall": {"name": "list_devices"}}],"role": "model"},"finishReason": "MAX_TOKENS","index": 0}]}"#;
    let odd = chunk.replace(
        r#""parts": ["#,
        r#""parts": [{"text": "", "thought": "no"}, "#,
    );
    for body in [chunk.to_owned(), odd] {
        check(
            assemble(decode(&format!("data: {body}\n\n")).unwrap().0),
            &format!("stream {body}"),
        );
        check(
            assemble(GeminiCodec.decode_response(body.as_bytes()).unwrap()),
            &format!("whole {body}"),
        );
    }
    // Name first, limit in the next chunk.
    let split = "data: {\"candidates\": [{\"content\": {\"parts\": [{\"functionCall\": {\"name\": \"list_devices\"}}]},\"index\": 0}]}\n\n\
                 data: {\"candidates\": [{\"content\": {\"parts\": []},\"finishReason\": \"MAX_TOKENS\",\"index\": 0}]}\n\n";
    check(assemble(decode(split).unwrap().0), "split stream");
}

/// A thinking turn: thought summary parts, a visible sentence, then two
/// parallel calls with the signature on the first.
const THINKING_CALLS: &str = r#"data: {"candidates": [{"content": {"parts": [{"text": "**Checking both cities**\nThe user wants Paris and Rome.","thought": true}],"role": "model"},"index": 0}],"modelVersion": "gemini-3-flash-preview"}

data: {"candidates": [{"content": {"parts": [{"text": "Let me look both up."}],"role": "model"},"index": 0}],"modelVersion": "gemini-3-flash-preview"}

data: {"candidates": [{"content": {"parts": [{"functionCall": {"name": "get_weather","args": {"city": "Paris"}},"thoughtSignature": "EjQKMgG+Pvb7sigParis=="},{"functionCall": {"name": "get_weather","args": {"city": "Rome"}}}],"role": "model"},"finishReason": "STOP","index": 0}],"usageMetadata": {"promptTokenCount": 61,"candidatesTokenCount": 36,"totalTokenCount": 219,"thoughtsTokenCount": 122},"modelVersion": "gemini-3-flash-preview"}

"#;

#[test]
fn thought_signature_is_replayed_on_its_part_and_parallel_calls_stay_in_one_content() {
    let turn = assemble(decode(THINKING_CALLS).unwrap().0);
    assert_eq!(turn.text, "Let me look both up.");
    assert_eq!(
        turn.reasoning,
        vec![ReasoningPart {
            text: "**Checking both cities**\nThe user wants Paris and Rome.".into(),
            metadata: Some(json!({"gemini": {
                "thought_signature": "EjQKMgG+Pvb7sigParis==",
                "part": "function_call",
                "call_index": 0,
            }})),
        }]
    );
    let request = ChatRequest {
        model: "gemini-3-flash-preview".into(),
        messages: vec![
            Message::user("Weather in Paris and Rome?"),
            Message::Assistant(turn.message()),
            // Results in completion order: Rome finished first.
            Message::Tool(ToolMessage {
                tool_call_id: "call_1".into(),
                name: "get_weather".into(),
                content: r#"{"temp_c": 24, "sky": "clear"}"#.into(),
                success: true,
            }),
            Message::Tool(ToolMessage {
                tool_call_id: "call_0".into(),
                name: "get_weather".into(),
                content: "weather service timed out".into(),
                success: false,
            }),
        ],
        tools: vec![],
        max_tokens: 1024,
        temperature: None,
        stream: true,
        rendered: Default::default(),
    };
    let wire = GeminiCodec.build_request(&endpoint(), &request).unwrap();
    assert_eq!(
        wire.body_json().unwrap()["contents"],
        json!([
            {"role": "user", "parts": [{"text": "Weather in Paris and Rome?"}]},
            {"role": "model", "parts": [
                {"text": "Let me look both up."},
                {"functionCall": {"name": "get_weather", "args": {"city": "Paris"}, "id": "call_0"},
                 "thoughtSignature": "EjQKMgG+Pvb7sigParis=="},
                {"functionCall": {"name": "get_weather", "args": {"city": "Rome"}, "id": "call_1"}},
            ]},
            {"role": "user", "parts": [
                {"functionResponse": {"name": "get_weather", "id": "call_0",
                                      "response": {"error": "weather service timed out"}}},
                {"functionResponse": {"name": "get_weather", "id": "call_1",
                                      "response": {"temp_c": 24, "sky": "clear"}}},
            ]},
        ])
    );
}

#[test]
fn a_text_signature_goes_back_on_the_text_part() {
    // Without calls, the signature comes on the last part, often an empty
    // text part of its own.
    let transcript = r#"data: {"candidates": [{"content": {"parts": [{"text": "The porch light is on."}],"role": "model"},"index": 0}]}

data: {"candidates": [{"content": {"parts": [{"text": "","thoughtSignature": "Ci8BVKhc7textsig"}],"role": "model"},"finishReason": "STOP","index": 0}],"usageMetadata": {"promptTokenCount": 30,"candidatesTokenCount": 7,"totalTokenCount": 37}}

"#;
    let turn = assemble(decode(transcript).unwrap().0);
    assert_eq!(turn.text, "The porch light is on.");
    let request = ChatRequest {
        model: "gemini-3-pro-preview".into(),
        messages: vec![
            Message::user("Is the porch light on?"),
            Message::Assistant(turn.message()),
            Message::user("Thanks"),
        ],
        tools: vec![],
        max_tokens: 256,
        temperature: None,
        stream: false,
        rendered: Default::default(),
    };
    let wire = GeminiCodec.build_request(&endpoint(), &request).unwrap();
    assert_eq!(
        wire.body_json().unwrap()["contents"][1],
        json!({"role": "model", "parts": [
            {"text": "The porch light is on.", "thoughtSignature": "Ci8BVKhc7textsig"}
        ]})
    );
}

/// The same answer as `CALLS_ACROSS_CHUNKS`, not streamed.
const CALLS_WHOLE: &str = r#"{
  "candidates": [
    {
      "content": {
        "parts": [
          {"text": "I'll turn off the lights in all three rooms."},
          {"functionCall": {"name": "set_light", "args": {"room": "kitchen", "on": false}}},
          {"functionCall": {"name": "set_light", "args": {"room": "hall", "on": false}}},
          {"functionCall": {"name": "set_light", "args": {"room": "bedroom", "on": false}}}
        ],
        "role": "model"
      },
      "finishReason": "STOP",
      "index": 0
    }
  ],
  "usageMetadata": {"promptTokenCount": 210, "candidatesTokenCount": 41, "totalTokenCount": 251},
  "modelVersion": "gemini-2.5-flash",
  "responseId": "mK3gaLqbJ9iOvdIP_5uQ4Qk"
}"#;

#[test]
fn streamed_and_whole_forms_assemble_to_the_same_turn() {
    let streamed = assemble(decode(CALLS_ACROSS_CHUNKS).unwrap().0);
    let whole = assemble(GeminiCodec.decode_response(CALLS_WHOLE.as_bytes()).unwrap());
    // The same calls; each form keeps its own wire text as raw arguments.
    let calls = |turn: &homeagent_core::AssembledTurn| {
        turn.calls
            .iter()
            .map(|c| {
                (
                    c.call.id.clone(),
                    c.call.name.clone(),
                    c.call.arguments.clone(),
                )
            })
            .collect::<Vec<_>>()
    };
    assert_eq!(calls(&whole), calls(&streamed));
    assert_eq!(whole.text, streamed.text);
    assert_eq!(
        whole.calls[1].call.raw_arguments,
        r#"{"room": "hall", "on": false}"#
    );
    assert_eq!(whole.usage, streamed.usage);
    assert_eq!(whole.finish_reason, streamed.finish_reason);
    assert_eq!(whole.calls.len(), 3);
}

#[test]
fn whole_response_with_an_argless_call_and_no_finish_reason() {
    let body = r#"{"candidates": [{"content": {"parts": [{"functionCall": {"name": "list_devices"}}], "role": "model"}}]}"#;
    let turn = assemble(GeminiCodec.decode_response(body.as_bytes()).unwrap());
    assert_eq!(turn.calls[0].call.raw_arguments, "{}");
}

#[test]
fn errors_inside_a_stream_and_blocked_prompts_are_reported() {
    let transcript = r#"data: {"candidates": [{"content": {"parts": [{"text": "Sure"}],"role": "model"},"index": 0}]}

data: {"error": {"code": 503, "message": "The model is overloaded. Please try again later.", "status": "UNAVAILABLE"}}

"#;
    assert_eq!(
        decode(transcript).unwrap_err(),
        CodecError::ProviderReported {
            protocol: "gemini",
            message: "UNAVAILABLE: The model is overloaded. Please try again later.".into(),
            transient: true,
        }
    );
    // No status (empty or missing): the message alone; no message: the
    // error object as it came.
    for (error, expected) in [
        (
            r#"{"code": 500, "message": "Internal error", "status": ""}"#,
            "Internal error",
        ),
        (
            r#"{"code": 500, "message": "Internal error"}"#,
            "Internal error",
        ),
        (
            r#"{"code": 500, "status": "INTERNAL"}"#,
            r#"INTERNAL: {"code":500,"status":"INTERNAL"}"#,
        ),
    ] {
        match decode(&format!("data: {{\"error\": {error}}}\n\n")) {
            Err(CodecError::ProviderReported { message, .. }) => assert_eq!(message, expected),
            other => panic!("{error}: {other:?}"),
        }
    }
    let blocked = r#"data: {"promptFeedback": {"blockReason": "SAFETY","safetyRatings": []},"usageMetadata": {"promptTokenCount": 12,"totalTokenCount": 12}}

"#;
    assert_eq!(
        decode(blocked).unwrap_err(),
        CodecError::ProviderReported {
            protocol: "gemini",
            message: "the prompt was blocked: SAFETY".into(),
            transient: false,
        }
    );
}

#[test]
fn a_frame_that_is_not_json_is_skipped_and_counted() {
    let transcript = r#"data: {"candidates": [{"content": {"parts": [{"text": "Hel"}],"role": "model"},"index": 0}]}

data: [DONE]

data: {"candidates": [{"content": {"parts": [{"text": "lo"}],"role": "model"},"finishReason": "STOP","index": 0}]}

"#;
    let (events, skipped) = decode(transcript).unwrap();
    assert_eq!(skipped, 1);
    assert_eq!(assemble(events).text, "Hello");
}

#[test]
fn whole_body_through_the_real_framer() {
    let codec = codec_for(Protocol::Gemini);
    assert_eq!(codec.protocol(), Protocol::Gemini);
    let crlf = THINKING_CALLS.replace('\n', "\r\n");
    let events = decode_stream_body(codec.as_ref(), crlf.as_bytes()).unwrap();
    assert_eq!(events, decode(THINKING_CALLS).unwrap().0);
    let turn = assemble(events);
    assert_eq!(
        calls(&turn),
        vec![
            triple("call_0", "get_weather", json!({"city": "Paris"})),
            triple("call_1", "get_weather", json!({"city": "Rome"})),
        ]
    );
    // A body cut before its last chunk: no end marker needed, the calls of
    // the chunks that did arrive are there.
    let cut = &CALLS_ACROSS_CHUNKS[..CALLS_ACROSS_CHUNKS.find("\"bedroom\"").unwrap()];
    let partial = assemble(decode_stream_body(&GeminiCodec, cut.as_bytes()).unwrap());
    assert_eq!(partial.calls.len(), 2);
    assert_eq!(partial.finish_reason, None);
}
