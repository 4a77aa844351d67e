#![allow(clippy::unwrap_used, clippy::expect_used)] // a panic in a test is a test failure

//! Anthropic Messages codec: request building, SSE transcripts through the
//! codec and the kernel's assembler, whole responses, errors.

use homeagent_core::{
    AssembledTurn, AssistantMessage, Diagnostic, ErrorReason, FinishReason, Message, ReasoningPart,
    StreamAssembler, StreamEvent, ToolCall, ToolCallFragment, ToolMessage, Usage,
};
use homeagent_llm::codec::anthropic::AnthropicCodec;
use homeagent_llm::codec::decode_stream_body;
use homeagent_llm::{
    ChatRequest, CodecError, Endpoint, Flow, Frame, Protocol, ToolSpec, WireCodec, codec_for,
};
use serde_json::json;

/// Request building and HTTP error bodies.
mod request;

/// Splits a well-formed SSE transcript into frames: blank-line separated
/// events of `event:` / `data:` lines. (Independent of the real framer.)
fn frames(transcript: &str) -> Vec<Frame> {
    transcript
        .split("\n\n")
        .filter_map(|block| {
            let mut event = None;
            let mut data = Vec::new();
            for line in block.lines() {
                if let Some(name) = line.strip_prefix("event:") {
                    event = Some(name.trim().to_owned());
                } else if let Some(value) = line.strip_prefix("data:") {
                    data.push(value.strip_prefix(' ').unwrap_or(value));
                }
            }
            (!data.is_empty()).then(|| Frame {
                event,
                data: data.join("\n"),
            })
        })
        .collect()
}

/// Feeds a transcript frame by frame; returns the events, whether the wire
/// said Done, and the skipped-frame count.
fn decode(transcript: &str) -> Result<(Vec<StreamEvent>, bool, u64), CodecError> {
    let mut decoder = AnthropicCodec.stream_decoder();
    let mut out = Vec::new();
    let mut done = false;
    for frame in frames(transcript) {
        if decoder.decode(&frame, &mut out)? == Flow::Done {
            done = true;
            break;
        }
    }
    Ok((out, done, decoder.skipped_frames()))
}

fn assemble(events: Vec<StreamEvent>) -> AssembledTurn {
    let mut assembler = StreamAssembler::new();
    for event in events {
        assembler.push(event);
    }
    assembler.finish()
}

fn call(id: &str, name: &str, arguments: serde_json::Value, raw: &str) -> ToolCall {
    ToolCall {
        id: id.into(),
        name: name.into(),
        arguments,
        raw_arguments: raw.into(),
    }
}

/// The docs' tool-use stream, with a second call: text block 0, then two
/// `tool_use` blocks whose input arrives as `input_json_delta` pieces.
const TWO_CALLS: &str = r#"event: message_start
data: {"type":"message_start","message":{"id":"msg_014p7gG3wDgGV9EUtLvnow3U","type":"message","role":"assistant","model":"claude-sonnet-4-5","stop_sequence":null,"usage":{"input_tokens":472,"output_tokens":2},"content":[],"stop_reason":null}}

event: content_block_start
data: {"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}

event: ping
data: {"type": "ping"}

event: content_block_delta
data: {"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"Okay"}}

event: content_block_delta
data: {"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":", let's check the weather and the time:"}}

event: content_block_stop
data: {"type":"content_block_stop","index":0}

event: content_block_start
data: {"type":"content_block_start","index":1,"content_block":{"type":"tool_use","id":"toolu_01T1x1fJ34qAmk2tNTrN7Up6","name":"get_weather","input":{}}}

event: content_block_delta
data: {"type":"content_block_delta","index":1,"delta":{"type":"input_json_delta","partial_json":""}}

event: content_block_delta
data: {"type":"content_block_delta","index":1,"delta":{"type":"input_json_delta","partial_json":"{\"location\":"}}

event: content_block_delta
data: {"type":"content_block_delta","index":1,"delta":{"type":"input_json_delta","partial_json":" \"San Francisco, CA\""}}

event: content_block_delta
data: {"type":"content_block_delta","index":1,"delta":{"type":"input_json_delta","partial_json":", \"unit\": \"fahrenheit\"}"}}

event: content_block_stop
data: {"type":"content_block_stop","index":1}

event: content_block_start
data: {"type":"content_block_start","index":2,"content_block":{"type":"tool_use","id":"toolu_01VZ8SpSMqHg1b4zQWRkTjy9","name":"get_time","input":{}}}

event: content_block_delta
data: {"type":"content_block_delta","index":2,"delta":{"type":"input_json_delta","partial_json":"{\"timezone\": \"America/Los_Angeles\"}"}}

event: content_block_stop
data: {"type":"content_block_stop","index":2}

event: message_delta
data: {"type":"message_delta","delta":{"stop_reason":"tool_use","stop_sequence":null},"usage":{"output_tokens":89}}

event: message_stop
data: {"type":"message_stop"}

"#;

#[test]
fn two_tool_use_blocks_assemble_with_their_ids_and_arguments() {
    let (events, done, skipped) = decode(TWO_CALLS).unwrap();
    assert!(done, "message_stop ends the stream");
    assert_eq!(skipped, 0);
    let turn = assemble(events);
    assert_eq!(turn.text, "Okay, let's check the weather and the time:");
    assert_eq!(
        turn.message().tool_calls,
        vec![
            call(
                "toolu_01T1x1fJ34qAmk2tNTrN7Up6",
                "get_weather",
                json!({"location": "San Francisco, CA", "unit": "fahrenheit"}),
                r#"{"location": "San Francisco, CA", "unit": "fahrenheit"}"#,
            ),
            call(
                "toolu_01VZ8SpSMqHg1b4zQWRkTjy9",
                "get_time",
                json!({"timezone": "America/Los_Angeles"}),
                r#"{"timezone": "America/Los_Angeles"}"#,
            ),
        ]
    );
    assert_eq!(turn.finish_reason, Some(FinishReason::ToolCalls));
    assert_eq!(
        turn.usage,
        Usage {
            prompt_tokens: 472,
            completion_tokens: 89,
            total_tokens: 561
        }
    );
    assert!(turn.diagnostics.is_empty(), "{:?}", turn.diagnostics);
}

#[test]
fn block_index_is_the_stream_index() {
    let (events, _, _) = decode(TWO_CALLS).unwrap();
    let fragments: Vec<ToolCallFragment> = events
        .into_iter()
        .filter_map(|e| match e {
            StreamEvent::ToolCall(f) => Some(f),
            _ => None,
        })
        .collect();
    assert_eq!(
        fragments,
        vec![
            ToolCallFragment {
                stream_index: Some(1),
                id: Some("toolu_01T1x1fJ34qAmk2tNTrN7Up6".into()),
                name: Some("get_weather".into()),
                raw_arguments: String::new(),
            },
            ToolCallFragment {
                stream_index: Some(1),
                raw_arguments: "{\"location\":".into(),
                ..Default::default()
            },
            ToolCallFragment {
                stream_index: Some(1),
                raw_arguments: " \"San Francisco, CA\"".into(),
                ..Default::default()
            },
            ToolCallFragment {
                stream_index: Some(1),
                raw_arguments: ", \"unit\": \"fahrenheit\"}".into(),
                ..Default::default()
            },
            ToolCallFragment {
                stream_index: Some(2),
                id: Some("toolu_01VZ8SpSMqHg1b4zQWRkTjy9".into()),
                name: Some("get_time".into()),
                raw_arguments: String::new(),
            },
            ToolCallFragment {
                stream_index: Some(2),
                raw_arguments: "{\"timezone\": \"America/Los_Angeles\"}".into(),
                ..Default::default()
            },
        ]
    );
}

#[test]
fn interleaved_blocks_stay_apart() {
    // Blocks whose deltas interleave (as a proxy merging streams may send)
    // are kept apart by their index, not by arrival order.
    let transcript = r#"event: content_block_start
data: {"type":"content_block_start","index":0,"content_block":{"type":"tool_use","id":"toolu_01A","name":"read_file","input":{}}}

event: content_block_start
data: {"type":"content_block_start","index":1,"content_block":{"type":"tool_use","id":"toolu_01B","name":"read_file","input":{}}}

event: content_block_delta
data: {"type":"content_block_delta","index":1,"delta":{"type":"input_json_delta","partial_json":"{\"path\": \"b"}}

event: content_block_delta
data: {"type":"content_block_delta","index":0,"delta":{"type":"input_json_delta","partial_json":"{\"path\": \"a"}}

event: content_block_delta
data: {"type":"content_block_delta","index":0,"delta":{"type":"input_json_delta","partial_json":".txt\"}"}}

event: content_block_delta
data: {"type":"content_block_delta","index":1,"delta":{"type":"input_json_delta","partial_json":".txt\"}"}}

event: content_block_stop
data: {"type":"content_block_stop","index":1}

event: content_block_stop
data: {"type":"content_block_stop","index":0}

event: message_delta
data: {"type":"message_delta","delta":{"stop_reason":"tool_use","stop_sequence":null},"usage":{"output_tokens":40}}

event: message_stop
data: {"type":"message_stop"}
"#;
    let turn = assemble(decode(transcript).unwrap().0);
    assert_eq!(
        turn.message().tool_calls,
        vec![
            call(
                "toolu_01A",
                "read_file",
                json!({"path": "a.txt"}),
                r#"{"path": "a.txt"}"#
            ),
            call(
                "toolu_01B",
                "read_file",
                json!({"path": "b.txt"}),
                r#"{"path": "b.txt"}"#
            ),
        ]
    );
}

#[test]
fn a_call_without_input_gets_an_empty_object_not_a_dropped_warning() {
    let transcript = r#"event: content_block_start
data: {"type":"content_block_start","index":0,"content_block":{"type":"tool_use","id":"toolu_01NoArgs","name":"list_devices","input":{}}}

event: content_block_delta
data: {"type":"content_block_delta","index":0,"delta":{"type":"input_json_delta","partial_json":""}}

event: content_block_stop
data: {"type":"content_block_stop","index":0}

event: message_delta
data: {"type":"message_delta","delta":{"stop_reason":"tool_use","stop_sequence":null},"usage":{"output_tokens":12}}

event: message_stop
data: {"type":"message_stop"}
"#;
    let turn = assemble(decode(transcript).unwrap().0);
    assert_eq!(
        turn.message().tool_calls,
        vec![call("toolu_01NoArgs", "list_devices", json!({}), "{}")]
    );
    assert!(turn.diagnostics.is_empty(), "{:?}", turn.diagnostics);
}

#[test]
fn input_given_whole_in_the_block_start_is_used() {
    // Some Anthropic-compatible proxies put the whole input in the start
    // event and send no deltas.
    let transcript = r#"event: content_block_start
data: {"type":"content_block_start","index":0,"content_block":{"type":"tool_use","id":"toolu_01Whole","name":"set_light","input":{"room":"kitchen","on":true}}}

event: content_block_stop
data: {"type":"content_block_stop","index":0}

event: message_stop
data: {"type":"message_stop"}
"#;
    let turn = assemble(decode(transcript).unwrap().0);
    assert_eq!(turn.calls.len(), 1);
    assert_eq!(turn.calls[0].call.id, "toolu_01Whole");
    assert_eq!(
        turn.calls[0].call.arguments,
        json!({"room": "kitchen", "on": true})
    );
}

#[test]
fn a_call_cut_by_max_tokens_is_marked_truncated_and_not_run() {
    let transcript = r##"event: message_start
data: {"type":"message_start","message":{"id":"msg_01Trunc","type":"message","role":"assistant","model":"claude-sonnet-4-5","content":[],"stop_reason":null,"stop_sequence":null,"usage":{"input_tokens":120,"output_tokens":1}}}

event: content_block_start
data: {"type":"content_block_start","index":0,"content_block":{"type":"tool_use","id":"toolu_01Write","name":"write_file","input":{}}}

event: content_block_delta
data: {"type":"content_block_delta","index":0,"delta":{"type":"input_json_delta","partial_json":"{\"path\": \"notes.md\", \"content\": \"# Shopping\\n- eggs\\n- mi"}}

event: content_block_stop
data: {"type":"content_block_stop","index":0}

event: message_delta
data: {"type":"message_delta","delta":{"stop_reason":"max_tokens","stop_sequence":null},"usage":{"output_tokens":4096}}

event: message_stop
data: {"type":"message_stop"}
"##;
    let turn = assemble(decode(transcript).unwrap().0);
    assert_eq!(turn.finish_reason, Some(FinishReason::Length));
    assert_eq!(turn.calls.len(), 1);
    assert_eq!(turn.calls[0].call.arguments, json!({}));
    let error = turn.calls[0].argument_error.as_ref().expect("not runnable");
    assert_eq!(error.reason, ErrorReason::Truncated);
}

/// A `tool_use` block closed before any input came, in a message the
/// token limit ended: the input was cut, not empty. The block's `{}` is
/// only a placeholder, so the call must not run with it.
#[test]
fn a_call_cut_by_max_tokens_before_its_input_is_truncated_not_run_with_nothing() {
    let transcript = r##"event: message_start
data: {"type":"message_start","message":{"id":"msg_01Cut0","type":"message","role":"assistant","model":"claude-sonnet-4-5","content":[],"stop_reason":null,"stop_sequence":null,"usage":{"input_tokens":120,"output_tokens":1}}}

event: content_block_start
data: {"type":"content_block_start","index":0,"content_block":{"type":"tool_use","id":"toolu_01Del","name":"files_delete","input":{}}}

event: content_block_stop
data: {"type":"content_block_stop","index":0}

event: message_delta
data: {"type":"message_delta","delta":{"stop_reason":"max_tokens","stop_sequence":null},"usage":{"output_tokens":4096}}

event: message_stop
data: {"type":"message_stop"}
"##;
    let turn = assemble(decode(transcript).unwrap().0);
    assert_eq!(turn.finish_reason, Some(FinishReason::Length));
    assert_eq!(turn.calls.len(), 1);
    let error = turn.calls[0].argument_error.as_ref().expect("not runnable");
    assert_eq!(error.reason, ErrorReason::Truncated);
    // The same block in a message that ended on its own is a call without
    // arguments, and runs.
    let finished = transcript.replace("max_tokens", "tool_use");
    let turn = assemble(decode(&finished).unwrap().0);
    assert_eq!(turn.calls[0].call.arguments, json!({}));
    assert!(turn.calls[0].argument_error.is_none());
    assert!(turn.diagnostics.is_empty(), "{:?}", turn.diagnostics);
}

/// A full context window cuts the output as the token limit does: a
/// `tool_use` block that stopped without input is cut, not a call without
/// arguments; and a whole response's `{}` input on a cut message is the
/// same cut call, as the stream's is.
#[test]
fn a_call_cut_by_a_full_context_window_or_in_a_whole_response_is_not_run() {
    let stream = |reason: &str| {
        format!(
            "event: message_start\ndata: {{\"type\":\"message_start\",\"message\":{{\"id\":\"m\",\"type\":\"message\",\"role\":\"assistant\",\"content\":[]}}}}\n\n\
             event: content_block_start\ndata: {{\"type\":\"content_block_start\",\"index\":0,\"content_block\":{{\"type\":\"tool_use\",\"id\":\"toolu_1\",\"name\":\"rm\",\"input\":{{}}}}}}\n\n\
             event: content_block_stop\ndata: {{\"type\":\"content_block_stop\",\"index\":0}}\n\n\
             event: message_delta\ndata: {{\"type\":\"message_delta\",\"usage\":{{\"output_tokens\":3}}}}\n\n\
             event: message_delta\ndata: {{\"type\":\"message_delta\",\"delta\":{{\"stop_reason\":\"{reason}\"}}}}\n\n\
             event: message_stop\ndata: {{\"type\":\"message_stop\"}}\n"
        )
    };
    let whole = |reason: &str| {
        format!(
            r#"{{"id":"m","type":"message","role":"assistant","content":[{{"type":"tool_use","id":"toolu_1","name":"rm","input":{{}}}}],"stop_reason":"{reason}"}}"#
        )
    };
    for reason in ["max_tokens", "model_context_window_exceeded"] {
        let turns = [
            ("stream", assemble(decode(&stream(reason)).unwrap().0)),
            (
                "whole",
                assemble(
                    AnthropicCodec
                        .decode_response(whole(reason).as_bytes())
                        .unwrap(),
                ),
            ),
        ];
        for (how, turn) in turns {
            assert_eq!(turn.calls.len(), 1, "{how} {reason}");
            let error = turn.calls[0].argument_error.as_ref();
            assert_eq!(
                error.map(|e| e.reason),
                Some(ErrorReason::Truncated),
                "{how} {reason}: {:?}",
                turn.calls[0]
            );
        }
    }
    // A whole input on a cut message came complete: it runs as sent.
    let complete = whole("max_tokens").replace(r#""input":{}"#, r#""input":{"path":"/x"}"#);
    let turn = assemble(AnthropicCodec.decode_response(complete.as_bytes()).unwrap());
    assert!(
        turn.calls[0].argument_error.is_none(),
        "{:?}",
        turn.calls[0]
    );
    assert_eq!(turn.calls[0].call.arguments, json!({"path": "/x"}));
    // Ended on its own, the same call has no arguments and runs.
    for turn in [
        assemble(decode(&stream("tool_use")).unwrap().0),
        assemble(
            AnthropicCodec
                .decode_response(whole("tool_use").as_bytes())
                .unwrap(),
        ),
    ] {
        assert!(
            turn.calls[0].argument_error.is_none(),
            "{:?}",
            turn.calls[0]
        );
        assert_eq!(turn.calls[0].call.arguments, json!({}));
    }
}

/// Extended thinking: a signed thinking block, a redacted one, then a call.
const THINKING: &str = r#"event: message_start
data: {"type":"message_start","message":{"id":"msg_01Think","type":"message","role":"assistant","model":"claude-sonnet-4-5","content":[],"stop_reason":null,"stop_sequence":null,"usage":{"input_tokens":50,"cache_read_input_tokens":2000,"cache_creation_input_tokens":300,"output_tokens":1}}}

event: content_block_start
data: {"type":"content_block_start","index":0,"content_block":{"type":"thinking","thinking":""}}

event: content_block_delta
data: {"type":"content_block_delta","index":0,"delta":{"type":"thinking_delta","thinking":"The user wants the porch light. "}}

event: content_block_delta
data: {"type":"content_block_delta","index":0,"delta":{"type":"thinking_delta","thinking":"I should call set_light."}}

event: content_block_delta
data: {"type":"content_block_delta","index":0,"delta":{"type":"signature_delta","signature":"EqQBCgIYAhIM1gbcDa9GJwZA2b3hGgxBdjrkzLoky3dl1pkiMOYds"}}

event: content_block_stop
data: {"type":"content_block_stop","index":0}

event: content_block_start
data: {"type":"content_block_start","index":1,"content_block":{"type":"redacted_thinking","data":"EmwKAhgBEgy3va3pzix/LafPsn4aDFIT2Xlxh0L5L8rLVyIwxtE3rAFBa8cr3qpP"}}

event: content_block_stop
data: {"type":"content_block_stop","index":1}

event: content_block_start
data: {"type":"content_block_start","index":2,"content_block":{"type":"tool_use","id":"toolu_01Porch","name":"set_light","input":{}}}

event: content_block_delta
data: {"type":"content_block_delta","index":2,"delta":{"type":"input_json_delta","partial_json":"{\"room\": \"porch\", \"on\": true}"}}

event: content_block_stop
data: {"type":"content_block_stop","index":2}

event: message_delta
data: {"type":"message_delta","delta":{"stop_reason":"tool_use","stop_sequence":null},"usage":{"output_tokens":210}}

event: message_stop
data: {"type":"message_stop"}
"#;

#[test]
fn thinking_signatures_are_kept_and_replayed_verbatim() {
    let turn = assemble(decode(THINKING).unwrap().0);
    assert_eq!(
        turn.reasoning,
        vec![
            ReasoningPart {
                text: "The user wants the porch light. I should call set_light.".into(),
                metadata: Some(
                    json!({"anthropic": {"signature": "EqQBCgIYAhIM1gbcDa9GJwZA2b3hGgxBdjrkzLoky3dl1pkiMOYds"}})
                ),
            },
            ReasoningPart {
                text: String::new(),
                metadata: Some(
                    json!({"anthropic": {"redacted_data": "EmwKAhgBEgy3va3pzix/LafPsn4aDFIT2Xlxh0L5L8rLVyIwxtE3rAFBa8cr3qpP"}})
                ),
            },
        ]
    );
    // Cached input counts as prompt: 50 + 2000 + 300.
    assert_eq!(turn.usage.prompt_tokens, 2350);
    assert_eq!(turn.usage.completion_tokens, 210);

    let request = ChatRequest {
        model: "claude-sonnet-4-5".into(),
        messages: vec![
            Message::user("Turn on the porch light"),
            Message::Assistant(turn.message()),
            Message::Tool(ToolMessage {
                tool_call_id: "toolu_01Porch".into(),
                name: "set_light".into(),
                content: "porch light is on".into(),
                success: true,
            }),
        ],
        tools: vec![],
        max_tokens: 1024,
        temperature: None,
        stream: true,
        rendered: Default::default(),
    };
    let wire = AnthropicCodec
        .build_request(&endpoint(None), &request)
        .unwrap();
    assert_eq!(
        wire.body_json().unwrap()["messages"][1],
        json!({"role": "assistant", "content": [
            {"type": "thinking", "thinking": "The user wants the porch light. I should call set_light.",
             "signature": "EqQBCgIYAhIM1gbcDa9GJwZA2b3hGgxBdjrkzLoky3dl1pkiMOYds"},
            {"type": "redacted_thinking", "data": "EmwKAhgBEgy3va3pzix/LafPsn4aDFIT2Xlxh0L5L8rLVyIwxtE3rAFBa8cr3qpP"},
            {"type": "tool_use", "id": "toolu_01Porch", "name": "set_light", "input": {"room": "porch", "on": true}},
        ]})
    );
}

fn endpoint(key: Option<&str>) -> Endpoint {
    Endpoint {
        base_url: "https://api.anthropic.com/".into(),
        api_key: key.map(str::to_owned),
    }
}

#[test]
fn error_event_is_reported_with_its_message() {
    let transcript = r#"event: message_start
data: {"type":"message_start","message":{"id":"msg_01Err","type":"message","role":"assistant","model":"claude-sonnet-4-5","content":[],"stop_reason":null,"stop_sequence":null,"usage":{"input_tokens":9,"output_tokens":1}}}

event: error
data: {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}
"#;
    let err = decode(transcript).unwrap_err();
    assert_eq!(
        err,
        CodecError::ProviderReported {
            protocol: "anthropic",
            message: "overloaded_error: Overloaded".into(),
            transient: true,
        }
    );
}

#[test]
fn a_frame_that_is_not_json_is_skipped_and_counted() {
    let transcript = r#"event: content_block_start
data: {"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}

event: content_block_delta
data: {"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"Hel"}}

event: content_block_delta
data: <!-- proxy heartbeat -->

event: content_block_delta
data: {"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"lo"}}

event: message_stop
data: {"type":"message_stop"}
"#;
    let (events, done, skipped) = decode(transcript).unwrap();
    assert!(done);
    assert_eq!(skipped, 1);
    assert_eq!(assemble(events).text, "Hello");
}

#[test]
fn frames_after_message_stop_are_not_read() {
    let transcript = format!(
        "{TWO_CALLS}event: content_block_delta\ndata: {{\"type\":\"content_block_delta\",\"index\":0,\"delta\":{{\"type\":\"text_delta\",\"text\":\"late\"}}}}\n\n"
    );
    let events = decode_stream_body(&AnthropicCodec, transcript.as_bytes()).unwrap();
    assert_eq!(
        assemble(events).text,
        "Okay, let's check the weather and the time:"
    );
}

#[test]
fn whole_body_through_the_real_framer_matches_the_naive_one() {
    let codec = codec_for(Protocol::Anthropic);
    assert_eq!(codec.protocol(), Protocol::Anthropic);
    // CRLF line ends, as some servers send them.
    let crlf = THINKING.replace('\n', "\r\n");
    let through_framer = decode_stream_body(codec.as_ref(), crlf.as_bytes()).unwrap();
    let naive = decode(THINKING).unwrap().0;
    assert_eq!(through_framer, naive);
    let turn = assemble(through_framer);
    assert_eq!(turn.calls.len(), 1);
    assert_eq!(
        turn.calls[0].call.arguments,
        json!({"room": "porch", "on": true})
    );
}

/// The same answer as `TWO_CALLS`, not streamed.
const TWO_CALLS_WHOLE: &str = r#"{
  "id": "msg_014p7gG3wDgGV9EUtLvnow3U",
  "type": "message",
  "role": "assistant",
  "model": "claude-sonnet-4-5",
  "content": [
    {"type": "text", "text": "Okay, let's check the weather and the time:"},
    {"type": "tool_use", "id": "toolu_01T1x1fJ34qAmk2tNTrN7Up6", "name": "get_weather", "input": {"location": "San Francisco, CA", "unit": "fahrenheit"}},
    {"type": "tool_use", "id": "toolu_01VZ8SpSMqHg1b4zQWRkTjy9", "name": "get_time", "input": {"timezone": "America/Los_Angeles"}}
  ],
  "stop_reason": "tool_use",
  "stop_sequence": null,
  "usage": {"input_tokens": 472, "output_tokens": 89}
}"#;

#[test]
fn whole_response_assembles_like_the_stream() {
    let whole = assemble(
        AnthropicCodec
            .decode_response(TWO_CALLS_WHOLE.as_bytes())
            .unwrap(),
    );
    let streamed = assemble(decode(TWO_CALLS).unwrap().0);
    // The same calls; only the whitespace of the raw argument text differs.
    let semantic = |turn: &AssembledTurn| {
        let message = turn.message();
        let calls: Vec<_> = message
            .tool_calls
            .iter()
            .map(|c| (c.id.clone(), c.name.clone(), c.arguments.clone()))
            .collect();
        (message.content, message.reasoning, calls)
    };
    assert_eq!(semantic(&whole), semantic(&streamed));
    assert_eq!(whole.finish_reason, Some(FinishReason::ToolCalls));
    assert_eq!(whole.usage, streamed.usage);
    assert_eq!(
        whole.message().tool_calls[0],
        call(
            "toolu_01T1x1fJ34qAmk2tNTrN7Up6",
            "get_weather",
            json!({"location": "San Francisco, CA", "unit": "fahrenheit"}),
            r#"{"location":"San Francisco, CA","unit":"fahrenheit"}"#,
        )
    );
}

#[test]
fn whole_response_with_thinking_keeps_the_signature_and_the_redacted_data() {
    let body = r#"{"id":"msg_01","type":"message","role":"assistant","model":"claude-sonnet-4-5",
      "content":[{"type":"thinking","thinking":"Short plan.","signature":"EqQBsig"},{"type":"redacted_thinking","data":"EmwKAhgB"},{"type":"text","text":"Done."}],
      "stop_reason":"end_turn","usage":{"input_tokens":10,"output_tokens":5}}"#;
    let turn = assemble(AnthropicCodec.decode_response(body.as_bytes()).unwrap());
    assert_eq!(turn.text, "Done.");
    assert_eq!(
        turn.reasoning,
        vec![
            ReasoningPart {
                text: "Short plan.".into(),
                metadata: Some(json!({"anthropic": {"signature": "EqQBsig"}})),
            },
            ReasoningPart {
                text: String::new(),
                metadata: Some(json!({"anthropic": {"redacted_data": "EmwKAhgB"}})),
            },
        ]
    );
    assert_eq!(turn.finish_reason, Some(FinishReason::Stop));
}

#[test]
fn whole_response_errors() {
    let err = AnthropicCodec
        .decode_response(
            br#"{"type":"error","error":{"type":"api_error","message":"Internal server error"}}"#,
        )
        .unwrap_err();
    assert_eq!(
        err,
        CodecError::ProviderReported {
            protocol: "anthropic",
            message: "api_error: Internal server error".into(),
            transient: true,
        }
    );
    assert!(matches!(
        AnthropicCodec.decode_response(b"<html>bad gateway</html>"),
        Err(CodecError::MalformedResponse { .. })
    ));
    // No kind (empty or missing): the message alone, with no `: ` before
    // it; no message at all: said so.
    for (body, expected) in [
        (
            r#"{"type":"error","error":{"type":"","message":"Try again"}}"#,
            "Try again",
        ),
        (
            r#"{"type":"error","error":{"message":"Try again"}}"#,
            "Try again",
        ),
        (
            r#"{"type":"error","error":{"type":"api_error"}}"#,
            "api_error: unspecified error",
        ),
    ] {
        match AnthropicCodec.decode_response(body.as_bytes()) {
            Err(CodecError::ProviderReported { message, .. }) => assert_eq!(message, expected),
            other => panic!("{body}: {other:?}"),
        }
    }
}

#[test]
fn a_stream_cut_inside_a_call_leaves_its_arguments_suspect() {
    // No content_block_stop: the call's text ends mid-object.
    let transcript = r#"event: content_block_start
data: {"type":"content_block_start","index":0,"content_block":{"type":"tool_use","id":"toolu_01Cut","name":"write_file","input":{}}}

event: content_block_delta
data: {"type":"content_block_delta","index":0,"delta":{"type":"input_json_delta","partial_json":"{\"path\": \"a"}}
"#;
    let turn = assemble(decode(transcript).unwrap().0);
    assert!(turn.calls[0].argument_error.is_some());
    assert!(
        turn.diagnostics
            .contains(&Diagnostic::ArgumentsLookDropped {
                call_id: "toolu_01Cut".into(),
                tool: "write_file".into()
            })
    );
}

#[test]
fn whole_response_inputs_that_are_not_objects_never_run_as_empty_objects() {
    let codec = AnthropicCodec;
    let body = |input: serde_json::Value, stop: &str| {
        json!({
            "id": "msg_01", "type": "message", "role": "assistant", "model": "claude",
            "content": [{"type": "tool_use", "id": "toolu_01", "name": "files_write", "input": input}],
            "stop_reason": stop,
            "usage": {"input_tokens": 10, "output_tokens": 5}
        })
        .to_string()
    };
    let reason_of = |input, stop| {
        let events = codec.decode_response(body(input, stop).as_bytes()).unwrap();
        let turn = assemble(events);
        turn.calls[0].argument_error.as_ref().map(|e| e.reason)
    };
    // A cut input handed over as text: truncated, not `{}`.
    assert_eq!(
        reason_of(
            json!("{\"path\": \"a.txt\", \"content\": \"lo"),
            "max_tokens"
        ),
        Some(ErrorReason::Truncated)
    );
    assert_eq!(
        reason_of(json!([1, 2]), "tool_use"),
        Some(ErrorReason::InvalidArguments)
    );
    assert_eq!(reason_of(json!({"path": "a.txt"}), "tool_use"), None);
}

/// Token counts come from the provider: a sum of them saturates instead of
/// overflowing (a panic in a debug build, a wrapped count in release).
#[test]
fn absurd_token_counts_saturate_instead_of_overflowing() {
    let huge = u64::MAX;
    let stream = format!(
        "event: message_start\ndata: {{\"type\":\"message_start\",\"message\":{{\"id\":\"m\",\"type\":\"message\",\"role\":\"assistant\",\"content\":[],\"usage\":{{\"input_tokens\":{huge},\"cache_read_input_tokens\":7,\"cache_creation_input_tokens\":{huge},\"output_tokens\":1}}}}}}\n\n\
         event: message_delta\ndata: {{\"type\":\"message_delta\",\"delta\":{{\"stop_reason\":\"end_turn\"}},\"usage\":{{\"output_tokens\":3}}}}\n\n\
         event: message_stop\ndata: {{\"type\":\"message_stop\"}}\n"
    );
    let streamed = assemble(decode(&stream).unwrap().0);
    assert_eq!(streamed.usage.prompt_tokens, u64::MAX);
    assert_eq!(streamed.usage.completion_tokens, 3);
    assert_eq!(streamed.usage.total_tokens, u64::MAX);

    let body = format!(
        r#"{{"id":"m","type":"message","role":"assistant","content":[{{"type":"text","text":"ok"}}],
          "stop_reason":"end_turn","usage":{{"input_tokens":{huge},"cache_read_input_tokens":{huge},"output_tokens":2}}}}"#
    );
    let whole = assemble(AnthropicCodec.decode_response(body.as_bytes()).unwrap());
    assert_eq!(whole.usage.prompt_tokens, u64::MAX);
    assert_eq!(whole.usage.completion_tokens, 2);
    // Input counted, no output yet (a message_start): still a usage.
    let body = r#"{"id":"m","type":"message","role":"assistant","content":[{"type":"text","text":"ok"}],
        "stop_reason":"end_turn","usage":{"input_tokens":25,"output_tokens":0}}"#;
    let whole = assemble(AnthropicCodec.decode_response(body.as_bytes()).unwrap());
    assert_eq!(whole.usage.prompt_tokens, 25);
}
