//! Streamed responses: one transcript test per quirk of the compatible
//! servers, through the codec and the kernel's assembler.

use homeagent_core::{ErrorReason, FinishReason, StreamEvent, Usage};
use homeagent_llm::codec::openai::OpenAiCodec;
use homeagent_llm::codec::{Flow, decode_stream_body};
use homeagent_llm::{CodecError, WireCodec};
use serde_json::json;

use super::{call, chunk, delta, run, runnable_calls, sse, usage_chunk};

#[test]
fn plain_openai_stream_with_text_two_calls_and_usage() {
    let body = sse(&[
        delta(
            r#"{"role":"assistant","content":"","refusal":null}"#,
            "null",
        ),
        delta(r#"{"content":"Checking "}"#, "null"),
        delta(r#"{"content":"both."}"#, "null"),
        delta(
            r#"{"tool_calls":[{"index":0,"id":"call_DdmO9pD3xa9XTPNJ32zg2hcA","type":"function","function":{"name":"light_set","arguments":""}}]}"#,
            "null",
        ),
        delta(
            r#"{"tool_calls":[{"index":0,"function":{"arguments":"{\"entity\": \"li"}}]}"#,
            "null",
        ),
        delta(
            r#"{"tool_calls":[{"index":1,"id":"call_ABTnZxp3mO3wCdeV8dXb1k7r","type":"function","function":{"name":"sensor_read","arguments":"{\"entity\""}}]}"#,
            "null",
        ),
        delta(
            r#"{"tool_calls":[{"index":0,"function":{"arguments":"ght.kitchen\", \"on\": true}"}}]}"#,
            "null",
        ),
        delta(
            r#"{"tool_calls":[{"index":1,"function":{"arguments":": \"sensor.hallway\"}"}}]}"#,
            "null",
        ),
        delta("{}", r#""tool_calls""#),
        usage_chunk(82, 41),
    ]);
    let (turn, skipped) = run(&body);
    assert_eq!(skipped, 0);
    assert_eq!(turn.text, "Checking both.");
    assert_eq!(
        runnable_calls(&turn),
        [
            call(
                "call_DdmO9pD3xa9XTPNJ32zg2hcA",
                "light_set",
                json!({"entity": "light.kitchen", "on": true})
            ),
            call(
                "call_ABTnZxp3mO3wCdeV8dXb1k7r",
                "sensor_read",
                json!({"entity": "sensor.hallway"})
            ),
        ]
    );
    assert_eq!(turn.finish_reason, Some(FinishReason::ToolCalls));
    assert_eq!(
        turn.usage,
        Usage {
            prompt_tokens: 82,
            completion_tokens: 41,
            total_tokens: 123
        }
    );
}

#[test]
fn quirk_missing_index() {
    // Ollama's and mistral.rs's compatible endpoints (ollama#7881,
    // mistral.rs#1507): no `index` at all. A call opens with its id; pieces
    // without id continue the latest call.
    let body = sse(&[
        delta(
            r#"{"tool_calls":[{"id":"call_x1","type":"function","function":{"name":"light_set","arguments":"{\"entity\":"}}]}"#,
            "null",
        ),
        delta(
            r#"{"tool_calls":[{"function":{"arguments":"\"light.porch\",\"on\":false}"}}]}"#,
            "null",
        ),
        delta(
            r#"{"tool_calls":[{"id":"call_x2","type":"function","function":{"name":"sensor_read","arguments":"{\"entity\":\"sensor.porch\"}"}}]}"#,
            "null",
        ),
        delta("{}", r#""tool_calls""#),
    ]);
    let (turn, _) = run(&body);
    assert_eq!(
        runnable_calls(&turn),
        [
            call(
                "call_x1",
                "light_set",
                json!({"entity": "light.porch", "on": false})
            ),
            call("call_x2", "sensor_read", json!({"entity": "sensor.porch"})),
        ]
    );
}

#[test]
fn quirk_missing_index_with_interleaved_calls_keyed_by_id() {
    // No index, ids on every piece, two calls interleaved: only the id tells
    // them apart. Defaulting the missing index to 0 would split call a.
    let body = sse(&[
        delta(
            r#"{"tool_calls":[{"id":"call_a","type":"function","function":{"name":"sensor_read","arguments":"{\"entity\":"}}]}"#,
            "null",
        ),
        delta(
            r#"{"tool_calls":[{"id":"call_b","type":"function","function":{"name":"sensor_read","arguments":"{\"entity\":\"sensor.b\"}"}}]}"#,
            "null",
        ),
        delta(
            r#"{"tool_calls":[{"id":"call_a","function":{"arguments":"\"sensor.a\"}"}}]}"#,
            "null",
        ),
        delta("{}", r#""tool_calls""#),
    ]);
    let (turn, _) = run(&body);
    assert_eq!(
        runnable_calls(&turn),
        [
            call("call_a", "sensor_read", json!({"entity": "sensor.a"})),
            call("call_b", "sensor_read", json!({"entity": "sensor.b"})),
        ]
    );
}

#[test]
fn quirk_same_index_with_a_new_id() {
    // Gemini's OpenAI-compatible endpoint puts every parallel call at index
    // 0, each whole and with its own id (litellm#11558, hermes-agent#62937).
    let body = sse(&[chunk(
        r#"{"delta":{"role":"assistant","tool_calls":[{"function":{"arguments":"{\"entity\":\"sensor.attic\"}","name":"sensor_read"},"id":"function-call-11837468937813390441","type":"function","index":0},{"function":{"arguments":"{\"entity\":\"sensor.cellar\"}","name":"sensor_read"},"id":"function-call-11837468937813390442","type":"function","index":0}]},"finish_reason":"tool_calls","index":0}"#,
    )]);
    let (turn, _) = run(&body);
    assert_eq!(
        runnable_calls(&turn),
        [
            call(
                "function-call-11837468937813390441",
                "sensor_read",
                json!({"entity": "sensor.attic"})
            ),
            call(
                "function-call-11837468937813390442",
                "sensor_read",
                json!({"entity": "sensor.cellar"})
            ),
        ]
    );
}

#[test]
fn quirk_first_call_at_index_1_makes_no_phantom_call() {
    // Bedrock gateways count a text block as index 0 (pipecat#5342,
    // bedrock-access-gateway#134): the only call arrives at index 1.
    let body = sse(&[
        delta(r#"{"role":"assistant","content":"Let me check."}"#, "null"),
        delta(
            r#"{"tool_calls":[{"index":1,"id":"tooluse_2ZNq3Kq8RCe0","type":"function","function":{"name":"sensor_read","arguments":""}}]}"#,
            "null",
        ),
        delta(
            r#"{"tool_calls":[{"index":1,"function":{"arguments":"{\"entity\":\"sensor.garage\"}"}}]}"#,
            "null",
        ),
        delta("{}", r#""tool_calls""#),
    ]);
    let (turn, _) = run(&body);
    assert_eq!(turn.text, "Let me check.");
    assert_eq!(
        runnable_calls(&turn),
        [call(
            "tooluse_2ZNq3Kq8RCe0",
            "sensor_read",
            json!({"entity": "sensor.garage"})
        )]
    );
    assert!(turn.diagnostics.is_empty(), "{:?}", turn.diagnostics);
}

#[test]
fn quirk_duplicate_index_in_the_first_chunk() {
    // openai-python#3201 (Kimi-style ids, vLLM with speculative decoding):
    // the first tool-call chunk holds the opening entry AND the first
    // argument piece, both at index 0. Reading the list by position loses
    // the ` {"` piece; every entry must be its own fragment.
    let body = sse(&[
        delta(r#"{"role":"assistant","content":""}"#, "null"),
        delta(
            r#"{"tool_calls":[{"index":0,"id":"functions.list_files:0","function":{"name":"list_files"},"type":"function"},{"index":0,"function":{"arguments":" {\""}}]}"#,
            "null",
        ),
        delta(
            r#"{"tool_calls":[{"index":0,"function":{"arguments":"path\": \".\"}"}}]}"#,
            "null",
        ),
        delta("{}", r#""tool_calls""#),
    ]);
    let (turn, _) = run(&body);
    assert_eq!(
        runnable_calls(&turn),
        [call(
            "functions.list_files:0",
            "list_files",
            json!({"path": "."})
        )]
    );
    assert_eq!(turn.calls[0].call.raw_arguments, " {\"path\": \".\"}");
}

#[test]
fn quirk_duplicate_choice_entries_in_one_chunk() {
    // Dynamo (GLM): an opener beside its first piece, and a last piece
    // beside a bare flush in a second `choices` entry with the same index.
    let body = sse(&[
        delta(
            r#"{"tool_calls":[{"index":0,"id":"call-4bfb0c1e","type":"function","function":{"name":"calculate","arguments":""}},{"index":0,"function":{"arguments":"{\"expression\": \""}}]}"#,
            "null",
        ),
        delta(
            r#"{"tool_calls":[{"index":0,"function":{"arguments":"123 * 45"}}]}"#,
            "null",
        ),
        chunk(
            r#"{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":"6\"}"}}]},"finish_reason":null},{"index":0,"delta":{"content":""},"finish_reason":null}"#,
        ),
        delta("{}", r#""tool_calls""#),
    ]);
    let (turn, _) = run(&body);
    assert_eq!(
        runnable_calls(&turn),
        [call(
            "call-4bfb0c1e",
            "calculate",
            json!({"expression": "123 * 456"})
        )]
    );
}

#[test]
fn every_entry_of_choice_0_in_one_chunk_is_read() {
    let body = sse(&[chunk(
        r#"{"index":0,"delta":{"content":"Hel"},"finish_reason":null},{"index":0,"delta":{"content":"lo"},"finish_reason":"stop"},{"index":1,"delta":{"content":"other choice"},"finish_reason":"stop"}"#,
    )]);
    let (turn, _) = run(&body);
    assert_eq!(turn.text, "Hello");
    assert_eq!(turn.finish_reason, Some(FinishReason::Stop));
}

#[test]
fn quirk_resent_first_chunk_is_not_doubled() {
    // A server that re-sends its first tool-call chunk verbatim: the exact
    // repeat of the opening fragment is dropped by the codec, so `{"ent`
    // is not doubled. An opener is known by its id, or by its name from a
    // server that sends no ids.
    for id in [r#""id":"call_r3s3nt","#, ""] {
        let opener = delta(
            &r#"{"tool_calls":[{"index":0,ID"type":"function","function":{"name":"sensor_read","arguments":"{\"ent"}}]}"#
                .replace("ID", id),
            "null",
        );
        let body = sse(&[
            opener.clone(),
            opener,
            delta(
                r#"{"tool_calls":[{"index":0,"function":{"arguments":"ity\":\"sensor.attic\"}"}}]}"#,
                "null",
            ),
            delta("{}", r#""tool_calls""#),
        ]);
        let (turn, _) = run(&body);
        assert_eq!(turn.calls.len(), 1, "{id}");
        assert_eq!(turn.calls[0].call.name, "sensor_read");
        assert_eq!(
            turn.calls[0].call.raw_arguments, r#"{"entity":"sensor.attic"}"#,
            "{id}"
        );
        if !id.is_empty() {
            assert_eq!(turn.calls[0].call.id, "call_r3s3nt");
        }
    }
}

#[test]
fn quirk_resent_opener_of_a_second_call_at_the_same_index_is_not_doubled() {
    // Every call at index 0, told apart by its id (as Gemini's compatible
    // endpoint numbers them), and the second call's opener re-sent: it is
    // the latest opening, so its repeat is dropped like the first call's.
    let second = delta(
        r#"{"tool_calls":[{"index":0,"id":"call_two","type":"function","function":{"name":"sensor_read","arguments":"{\"ent"}}]}"#,
        "null",
    );
    let body = sse(&[
        delta(
            r#"{"tool_calls":[{"index":0,"id":"call_one","type":"function","function":{"name":"light_set","arguments":"{}"}}]}"#,
            "null",
        ),
        second.clone(),
        second,
        delta(
            r#"{"tool_calls":[{"index":0,"function":{"arguments":"ity\":\"sensor.porch\"}"}}]}"#,
            "null",
        ),
        delta("{}", r#""tool_calls""#),
    ]);
    let (turn, _) = run(&body);
    assert_eq!(
        runnable_calls(&turn),
        [
            call("call_one", "light_set", json!({})),
            call("call_two", "sensor_read", json!({"entity": "sensor.porch"})),
        ]
    );
}

#[test]
fn quirk_content_as_a_list_of_typed_parts() {
    // Mistral streams `content` as a list of typed parts: the text parts
    // are the text, in order; other parts (and their `text`) are not.
    let body = sse(&[
        delta(
            r#"{"role":"assistant","content":[{"type":"text","text":"Hel"},{"type":"image_url","image_url":{"url":"https://example.invalid/a.png"}},{"type":"thinking","text":"not this"},{"type":"text","text":""}]}"#,
            "null",
        ),
        delta(r#"{"content":[{"type":"text","text":"lo"}]}"#, "null"),
        delta("{}", r#""stop""#),
    ]);
    let (turn, skipped) = run(&body);
    assert_eq!(skipped, 0);
    assert_eq!(turn.text, "Hello");
}

#[test]
fn quirk_reasoning_as_thinking_parts() {
    // Magistral streams its reasoning as `thinking` parts, each a list of
    // text parts (or, in some servers, a string): reasoning, never text.
    let body = sse(&[
        delta(
            r#"{"role":"assistant","content":[{"type":"thinking","thinking":[{"type":"text","text":"Let me "}]}]}"#,
            "null",
        ),
        delta(
            r#"{"content":[{"type":"thinking","thinking":"check."},{"type":"text","text":"Done."}]}"#,
            "null",
        ),
        delta("{}", r#""stop""#),
    ]);
    let (turn, skipped) = run(&body);
    assert_eq!(skipped, 0);
    assert_eq!(turn.text, "Done.");
    assert_eq!(turn.reasoning.len(), 1, "{:?}", turn.reasoning);
    assert_eq!(turn.reasoning[0].text, "Let me check.");
}

#[test]
fn repeated_identical_pieces_after_the_opening_are_kept() {
    // Some servers repeat id and name on every delta; two identical pieces
    // in a row ("0", "0") are real data and must both stay.
    let piece = |args: &str| {
        delta(
            &format!(
                r#"{{"tool_calls":[{{"index":0,"id":"call_rep","type":"function","function":{{"name":"light_dim","arguments":{args}}}}}]}}"#
            ),
            "null",
        )
    };
    let body = sse(&[
        piece(r#""{\"level\": 1""#),
        piece(r#""0""#),
        piece(r#""0""#),
        piece(r#""}""#),
        delta("{}", r#""tool_calls""#),
    ]);
    let (turn, _) = run(&body);
    assert_eq!(
        runnable_calls(&turn),
        [call("call_rep", "light_dim", json!({"level": 100}))]
    );
}

#[test]
fn quirk_empty_finish_reason_on_every_chunk() {
    // Some servers send `finish_reason: ""` instead of null on every chunk
    // (goose#10258, jcode#1326): it must end nothing.
    let body = sse(&[
        delta(
            r#"{"tool_calls":[{"index":0,"id":"call_e1","type":"function","function":{"name":"light_set","arguments":""}}]}"#,
            r#""""#,
        ),
        delta(
            r#"{"tool_calls":[{"index":0,"function":{"arguments":"{\"entity\":\"light.hall\","}}]}"#,
            r#""""#,
        ),
        delta(
            r#"{"tool_calls":[{"index":0,"function":{"arguments":"\"on\":true}"}}]}"#,
            r#""""#,
        ),
        delta("{}", r#""tool_calls""#),
    ]);
    let (turn, _) = run(&body);
    assert_eq!(
        runnable_calls(&turn),
        [call(
            "call_e1",
            "light_set",
            json!({"entity": "light.hall", "on": true})
        )]
    );
    assert_eq!(turn.finish_reason, Some(FinishReason::ToolCalls));
}

#[test]
fn quirk_usage_only_in_the_last_chunk() {
    let body = sse(&[
        delta(r#"{"role":"assistant","content":"Hello"}"#, "null"),
        delta(r#"{"content":"!"}"#, "null"),
        delta("{}", r#""stop""#),
        usage_chunk(12, 3),
    ]);
    let (turn, _) = run(&body);
    assert_eq!(turn.text, "Hello!");
    assert_eq!(turn.finish_reason, Some(FinishReason::Stop));
    assert_eq!(
        turn.usage,
        Usage {
            prompt_tokens: 12,
            completion_tokens: 3,
            total_tokens: 15
        }
    );
}

#[test]
fn quirk_data_line_that_is_not_json_is_skipped_and_counted() {
    let mut body = String::new();
    body.push_str(&format!(
        "data: {}\n\n",
        delta(r#"{"tool_calls":[{"index":0,"id":"call_nj","type":"function","function":{"name":"sensor_read","arguments":"{\"entity\":"}}]}"#, "null")
    ));
    // A proxy's banner and a half-written line, then the stream goes on.
    body.push_str("data: upstream slow, retrying\n\ndata: {\"choices\":[{\"ind\n\n");
    body.push_str(&format!(
        "data: {}\n\n",
        delta(
            r#"{"tool_calls":[{"index":0,"function":{"arguments":"\"sensor.attic\"}"}}]}"#,
            "null"
        )
    ));
    body.push_str(&format!(
        "data: {}\n\ndata: [DONE]\n\n",
        delta("{}", r#""tool_calls""#)
    ));
    let (turn, skipped) = run(&body);
    assert_eq!(skipped, 2);
    assert_eq!(
        runnable_calls(&turn),
        [call(
            "call_nj",
            "sensor_read",
            json!({"entity": "sensor.attic"})
        )]
    );
}

#[test]
fn quirk_per_chunk_stop_before_the_last_argument_piece() {
    // goose#10258: a `finish_reason: "stop"` mid-call flushed the half-built
    // call, which then ran with `{}`. Only `[DONE]` ends the stream here.
    let body = sse(&[
        delta(
            r#"{"tool_calls":[{"index":0,"id":"call_g1","type":"function","function":{"name":"light_set","arguments":"{\"entity\":\"light.desk\""}}]}"#,
            r#""stop""#,
        ),
        delta(
            r#"{"tool_calls":[{"index":0,"function":{"arguments":",\"on\":true}"}}]}"#,
            r#""stop""#,
        ),
    ]);
    let (turn, _) = run(&body);
    assert_eq!(
        runnable_calls(&turn),
        [call(
            "call_g1",
            "light_set",
            json!({"entity": "light.desk", "on": true})
        )]
    );
}

#[test]
fn quirk_ids_only_in_the_first_delta_of_each_call() {
    // codex#7634 keyed calls by id, which later deltas do not carry; here
    // two interleaved calls are told apart by index.
    let body = sse(&[
        delta(
            r#"{"tool_calls":[{"index":0,"id":"call_c0dex0","type":"function","function":{"name":"sensor_read","arguments":""}}]}"#,
            "null",
        ),
        delta(
            r#"{"tool_calls":[{"index":1,"id":"call_c0dex1","type":"function","function":{"name":"sensor_read","arguments":""}}]}"#,
            "null",
        ),
        delta(
            r#"{"tool_calls":[{"index":1,"function":{"arguments":"{\"entity\":\"sensor.b\"}"}}]}"#,
            "null",
        ),
        delta(
            r#"{"tool_calls":[{"index":0,"function":{"arguments":"{\"entity\":\"sensor.a\"}"}}]}"#,
            "null",
        ),
        delta("{}", r#""tool_calls""#),
    ]);
    let (turn, _) = run(&body);
    assert_eq!(
        runnable_calls(&turn),
        [
            call("call_c0dex0", "sensor_read", json!({"entity": "sensor.a"})),
            call("call_c0dex1", "sensor_read", json!({"entity": "sensor.b"})),
        ]
    );
}

#[test]
fn quirk_arguments_cut_by_length_are_never_runnable() {
    let body = sse(&[
        delta(
            r#"{"tool_calls":[{"index":0,"id":"call_w1","type":"function","function":{"name":"write_file","arguments":"{\"path\":\"notes.md\",\"content\":\"Line one\\nLine tw"}}]}"#,
            "null",
        ),
        delta("{}", r#""length""#),
        usage_chunk(40, 16),
    ]);
    let (turn, _) = run(&body);
    assert_eq!(turn.finish_reason, Some(FinishReason::Length));
    assert_eq!(turn.calls.len(), 1);
    let cut = &turn.calls[0];
    assert_eq!(cut.call.id, "call_w1");
    assert_eq!(cut.call.arguments, json!({}));
    let error = cut
        .argument_error
        .as_ref()
        .expect("the cut call must not run");
    assert_eq!(error.reason, ErrorReason::Truncated);
}

#[test]
fn flat_name_and_arguments_keys_are_accepted() {
    let body = sse(&[
        delta(
            r#"{"tool_calls":[{"index":0,"id":"call_flat","type":"function","name":"sensor_read","arguments":"{\"entity\":"}]}"#,
            "null",
        ),
        // A choice without its own `index` is choice 0.
        chunk(r#"{"delta":{"tool_calls":[{"index":0,"arguments":"\"sensor.flat\"}"}]}}"#),
    ]);
    let (turn, _) = run(&body);
    assert_eq!(
        runnable_calls(&turn),
        [call(
            "call_flat",
            "sensor_read",
            json!({"entity": "sensor.flat"})
        )]
    );
}

#[test]
fn reasoning_from_reasoning_content_or_reasoning_never_both() {
    let body = sse(&[
        // DeepSeek
        delta(
            r#"{"role":"assistant","content":null,"reasoning_content":"The user "}"#,
            "null",
        ),
        // OpenRouter / newer vLLM
        delta(r#"{"content":null,"reasoning":"wants "}"#, "null"),
        // vLLM versions that send both with the same text
        delta(
            r#"{"content":null,"reasoning_content":"a greeting.","reasoning":"a greeting."}"#,
            "null",
        ),
        delta(r#"{"content":"Hi!"}"#, r#""stop""#),
    ]);
    let (turn, _) = run(&body);
    assert_eq!(turn.reasoning.len(), 1);
    assert_eq!(turn.reasoning[0].text, "The user wants a greeting.");
    assert_eq!(turn.text, "Hi!");
}

#[test]
fn error_object_in_the_stream_is_provider_reported() {
    let codec = OpenAiCodec;
    let body = format!(
        "data: {}\n\ndata: {}\n\n",
        delta(r#"{"content":"Hel"}"#, "null"),
        r#"{"id":"gen-1741569952-x","object":"chat.completion.chunk","error":{"code":502,"message":"Provider returned error: upstream overloaded"},"choices":[{"index":0,"delta":{"content":""},"finish_reason":"error"}]}"#
    );
    assert_eq!(
        decode_stream_body(&codec, body.as_bytes()).unwrap_err(),
        CodecError::ProviderReported {
            protocol: "openai",
            message: "Provider returned error: upstream overloaded".into(),
            transient: true,
        }
    );
    let body = "event: error\ndata: {\"message\":\"model is loading\"}\n\n";
    assert_eq!(
        decode_stream_body(&codec, body.as_bytes()).unwrap_err(),
        CodecError::ProviderReported {
            protocol: "openai",
            message: "model is loading".into(),
            transient: false,
        }
    );
}

#[test]
fn done_ends_the_stream_and_later_frames_are_ignored() {
    let codec = OpenAiCodec;
    let mut decoder = codec.stream_decoder();
    let mut events = Vec::new();
    let frame = |data: &str| homeagent_llm::Frame {
        event: None,
        data: data.into(),
    };
    assert_eq!(
        decoder.decode(&frame(" [DONE] "), &mut events).unwrap(),
        Flow::Done
    );
    let body = format!(
        "{}data: {}\n\n",
        sse(&[delta(r#"{"content":"a"}"#, "null")]),
        delta(r#"{"content":"b"}"#, "null")
    );
    assert_eq!(
        decode_stream_body(&codec, body.as_bytes()).unwrap(),
        [StreamEvent::TextDelta { text: "a".into() }]
    );
    assert!(events.is_empty());
}

/// DeepSeek's thinking mode wants the `reasoning_content` of the current
/// turn's assistant messages back (a 400 "Missing `reasoning_content`
/// field" otherwise), even when it was empty. Reasoning that came in that
/// field is marked so the request builder knows to send it; reasoning from
/// the `reasoning` field (OpenRouter) is not.
#[test]
fn reasoning_from_reasoning_content_is_marked_for_replay() {
    let marked = Some(json!({"openai": {"reasoning_field": "reasoning_content"}}));
    let deepseek = sse(&[
        delta(
            r#"{"role":"assistant","content":null,"reasoning_content":"Read the "}"#,
            "null",
        ),
        delta(r#"{"content":null,"reasoning_content":"sensor."}"#, "null"),
        delta(
            r#"{"tool_calls":[{"index":0,"id":"call_00_x","type":"function","function":{"name":"sensor_read","arguments":"{}"}}]}"#,
            "null",
        ),
        delta("{}", r#""tool_calls""#),
    ]);
    let (turn, _) = run(&deepseek);
    assert_eq!(turn.reasoning.len(), 1, "{:?}", turn.reasoning);
    assert_eq!(turn.reasoning[0].text, "Read the sensor.");
    assert_eq!(turn.reasoning[0].metadata, marked);

    // Thinking that came back empty still has to be sent back (empty).
    let empty = sse(&[
        delta(
            r#"{"role":"assistant","content":"","reasoning_content":""}"#,
            "null",
        ),
        delta(r#"{"content":"Hi."}"#, r#""stop""#),
    ]);
    let (turn, _) = run(&empty);
    assert_eq!(turn.reasoning.len(), 1, "{:?}", turn.reasoning);
    assert_eq!(turn.reasoning[0].text, "");
    assert_eq!(turn.reasoning[0].metadata, marked);

    let openrouter = sse(&[
        delta(r#"{"content":null,"reasoning":"Thinking."}"#, "null"),
        delta(r#"{"content":"Hi."}"#, r#""stop""#),
    ]);
    let (turn, _) = run(&openrouter);
    assert_eq!(turn.reasoning.len(), 1);
    assert_eq!(turn.reasoning[0].metadata, None);
}
