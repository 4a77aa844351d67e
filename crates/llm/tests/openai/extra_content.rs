//! Per-call `extra_content`: Gemini's OpenAI-compatible endpoint puts each
//! call's thought signature in `tool_calls[].extra_content.google`, and
//! Gemini 3 answers the next request of the turn with HTTP 400 ("Function
//! call is missing a thought_signature in functionCall parts") unless it
//! comes back on the same call.

use homeagent_core::{AssistantMessage, Message, StreamAssembler, ToolCall, ToolMessage};
use homeagent_llm::WireCodec;
use homeagent_llm::codec::openai::OpenAiCodec;
use serde_json::{Value, json};

use super::{body_for, run, sse};

const GEMINI: &str = "https://generativelanguage.googleapis.com/v1beta/openai";
const OTHER: &str = "http://127.0.0.1:8000/v1";

/// A chunk as Gemini's compatible endpoint streams it: the `index` on the
/// delta, none on the calls, every call whole in one entry.
fn gemini_chunk(calls: &str, finish: &str) -> String {
    format!(
        r#"{{"choices":[{{"delta":{{"role":"assistant","tool_calls":{calls}}},"finish_reason":{finish},"index":0}}],"created":1764000000,"id":"x1","model":"gemini-3-flash-preview","object":"chat.completion.chunk"}}"#
    )
}

/// A chunk of a server that numbers its calls itself: `index` on every
/// entry of `calls`, the choice's own index 0.
fn chunk(calls: &str, finish: &str) -> String {
    format!(
        r#"{{"choices":[{{"index":0,"delta":{{"tool_calls":{calls}}},"finish_reason":{finish}}}]}}"#
    )
}

fn signed(signature: &str) -> Value {
    json!({"google": {"thought_signature": signature}})
}

/// The request of the current turn after `assistant` and its results.
fn replay(base_url: &str, history: Vec<Message>) -> Value {
    body_for(base_url, "gemini-3-flash-preview", history, true)
}

fn results_for(message: &AssistantMessage) -> Vec<Message> {
    message
        .tool_calls
        .iter()
        .map(|call| {
            Message::Tool(ToolMessage {
                tool_call_id: call.id.clone(),
                name: call.name.clone(),
                content: "{}".into(),
                success: true,
            })
        })
        .collect()
}

/// `extra_content` of every call of every assistant message sent.
fn sent_extras(body: &Value) -> Vec<Vec<Option<Value>>> {
    body["messages"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["role"] == "assistant")
        .map(|m| {
            m["tool_calls"]
                .as_array()
                .map(|calls| {
                    calls
                        .iter()
                        .map(|c| c.get("extra_content").cloned())
                        .collect()
                })
                .unwrap_or_default()
        })
        .collect()
}

fn foreign_call(id: &str) -> ToolCall {
    ToolCall {
        id: id.into(),
        name: "light_set".into(),
        arguments: json!({}),
        raw_arguments: "{}".into(),
    }
}

#[test]
fn a_streamed_calls_extra_content_goes_back_on_that_call() {
    let body = sse(&[
        gemini_chunk(
            r#"[{"extra_content":{"google":{"thought_signature":"Eo4GCosG==="}},"function":{"arguments":"{\"room\":\"attic\"}","name":"sensor_read"},"id":"FL1tqiJ9","type":"function"}]"#,
            "null",
        ),
        gemini_chunk(
            r#"[{"function":{"arguments":"{\"room\":\"porch\"}","name":"sensor_read"},"id":"mX2p0aQe","type":"function"}]"#,
            r#""tool_calls""#,
        ),
    ]);
    let (turn, _) = run(&body);
    assert_eq!(turn.calls.len(), 2);
    let message = turn.message();
    assert_eq!(message.tool_calls[0].id, "FL1tqiJ9");

    let mut history = vec![Message::user("check the attic and the porch")];
    history.push(Message::Assistant(message.clone()));
    history.extend(results_for(&message));
    for base_url in [GEMINI, OTHER] {
        let sent = sent_extras(&replay(base_url, history.clone()));
        assert_eq!(
            sent,
            [vec![Some(signed("Eo4GCosG===")), None]],
            "to {base_url}"
        );
    }
    // Servers that refuse members they do not know (a fallback from Gemini
    // to them mid-input) never get it.
    for strict in ["https://api.openai.com/v1", "https://api.mistral.ai/v1"] {
        let sent = sent_extras(&replay(strict, history.clone()));
        assert_eq!(sent, [vec![None, None]], "to {strict}");
    }

    // In an earlier turn the signature stays home: only the current turn
    // is checked, and other servers never see a member they did not send.
    let mut later = history.clone();
    later.push(Message::Assistant(AssistantMessage {
        content: "Attic 19, porch 12.".into(),
        reasoning: vec![],
        tool_calls: vec![],
    }));
    later.push(Message::user("and now?"));
    later.push(Message::Assistant(message.clone()));
    later.extend(results_for(&message));
    let sent = sent_extras(&replay(OTHER, later));
    assert_eq!(
        sent,
        [
            vec![None, None],
            vec![],
            vec![Some(signed("Eo4GCosG===")), None]
        ]
    );
}

#[test]
fn extra_content_on_an_entry_without_an_id_follows_the_open_call() {
    // The opening entry has the id; the signature comes on a later entry
    // of the same index (a server that splits a call across chunks).
    // The indexes start at 1 (a quirk of some servers), so the call's
    // index is not its place in the message either.
    let body = sse(&[
        chunk(
            r#"[{"index":1,"id":"call_a","type":"function","function":{"name":"f","arguments":""}}]"#,
            "null",
        ),
        chunk(
            r#"[{"index":2,"id":"call_b","type":"function","function":{"name":"g","arguments":""}}]"#,
            "null",
        ),
        // Some servers repeat `"id": ""` on the later entries of a call.
        chunk(
            r#"[{"index":1,"id":"","function":{"arguments":"{}"},"extra_content":{"google":{"thought_signature":"empty-id"}}}]"#,
            "null",
        ),
        chunk(
            r#"[{"index":2,"function":{"arguments":"{}"},"extra_content":{"google":{"thought_signature":"late"}}}]"#,
            r#""tool_calls""#,
        ),
    ]);
    let (turn, _) = run(&body);
    let message = turn.message();
    let mut history = vec![Message::user("go")];
    history.push(Message::Assistant(message.clone()));
    history.extend(results_for(&message));
    assert_eq!(
        sent_extras(&replay(OTHER, history)),
        [vec![Some(signed("empty-id")), Some(signed("late"))]]
    );
}

#[test]
fn extra_content_follows_an_id_that_came_after_the_calls_opening() {
    // The call opens by name without an id; its id comes on the next
    // entry, the signature on a later one without an id. The signature
    // belongs to that id, not to the index (1 here: the second place).
    let body = sse(&[
        chunk(
            r#"[{"index":1,"type":"function","function":{"name":"f","arguments":""}}]"#,
            "null",
        ),
        chunk(
            r#"[{"index":1,"id":"call_a","function":{"arguments":"{}"}}]"#,
            "null",
        ),
        chunk(
            r#"[{"index":2,"id":"call_b","type":"function","function":{"name":"g","arguments":"{}"}}]"#,
            "null",
        ),
        chunk(
            r#"[{"index":1,"extra_content":{"google":{"thought_signature":"after-id"}}}]"#,
            r#""tool_calls""#,
        ),
    ]);
    let (turn, _) = run(&body);
    let message = turn.message();
    let ids: Vec<&str> = message.tool_calls.iter().map(|c| c.id.as_str()).collect();
    assert_eq!(ids, ["call_a", "call_b"]);
    let mut history = vec![Message::user("go")];
    history.push(Message::Assistant(message.clone()));
    history.extend(results_for(&message));
    assert_eq!(
        sent_extras(&replay(OTHER, history)),
        [vec![Some(signed("after-id")), None]]
    );
}

/// Calls without an id (empty or missing) get theirs from the assembler;
/// their `extra_content` goes back by their place in the message.
#[test]
fn a_whole_responses_calls_without_ids_keep_their_extra_content_by_place() {
    let completion = r#"{"choices":[{"finish_reason":"tool_calls","index":0,"message":{"role":"assistant","tool_calls":[
        {"function":{"arguments":"{}","name":"a"},"type":"function"},
        {"extra_content":{"google":{"thought_signature":"no-id"}},"function":{"arguments":"{}","name":"b"},"type":"function"},
        {"extra_content":{"google":{"thought_signature":"empty-id"}},"function":{"arguments":"{}","name":"c"},"id":"","type":"function"}]}}]}"#;
    let events = OpenAiCodec.decode_response(completion.as_bytes()).unwrap();
    let mut assembler = StreamAssembler::new();
    for event in events {
        assembler.push(event);
    }
    let message = assembler.finish().message();
    assert!(message.tool_calls.iter().all(|c| !c.id.is_empty()));
    let mut history = vec![Message::user("go")];
    history.push(Message::Assistant(message.clone()));
    history.extend(results_for(&message));
    assert_eq!(
        sent_extras(&replay(OTHER, history)),
        [vec![None, Some(signed("no-id")), Some(signed("empty-id"))]]
    );
}

#[test]
fn a_whole_responses_extra_content_goes_back_on_that_call() {
    let completion = r#"{"choices":[{"finish_reason":"tool_calls","index":0,"message":{"role":"assistant","tool_calls":[
        {"function":{"arguments":"{}","name":"a"},"id":"c1","type":"function"},
        {"extra_content":{"google":{"thought_signature":"second"}},"function":{"arguments":"{}","name":"b"},"id":"c2","type":"function"}]}}]}"#;
    let events = OpenAiCodec.decode_response(completion.as_bytes()).unwrap();
    let mut assembler = StreamAssembler::new();
    for event in events {
        assembler.push(event);
    }
    let message = assembler.finish().message();
    let mut history = vec![Message::user("go")];
    history.push(Message::Assistant(message.clone()));
    history.extend(results_for(&message));
    assert_eq!(
        sent_extras(&replay(OTHER, history)),
        [vec![None, Some(signed("second"))]]
    );
}

/// Calls another provider made (a fallback in the middle of an input) have
/// no signature. Gemini documents a value that skips the check; its
/// compatible endpoint gets it on the first call of each current-turn step,
/// and no other server does.
#[test]
fn gemini_gets_the_skip_value_on_the_first_foreign_call_of_each_current_step() {
    let step = |ids: [&str; 2]| AssistantMessage {
        content: String::new(),
        reasoning: vec![],
        tool_calls: ids.iter().map(|id| foreign_call(id)).collect(),
    };
    let (old, first, second) = (step(["o1", "o2"]), step(["c1", "c2"]), step(["d1", "d2"]));
    let mut history = vec![Message::user("earlier")];
    history.push(Message::Assistant(old.clone()));
    history.extend(results_for(&old));
    history.push(Message::user("now"));
    history.push(Message::Assistant(first.clone()));
    history.extend(results_for(&first));
    history.push(Message::Assistant(second.clone()));
    history.extend(results_for(&second));

    let skip = Some(signed("skip_thought_signature_validator"));
    assert_eq!(
        sent_extras(&replay(GEMINI, history.clone())),
        [
            vec![None, None],
            vec![skip.clone(), None],
            vec![skip.clone(), None]
        ]
    );
    assert_eq!(
        sent_extras(&replay(
            "https://us-central1-aiplatform.googleapis.com/v1/projects/p/locations/us-central1/endpoints/openapi",
            history.clone()
        )),
        [vec![None, None], vec![skip.clone(), None], vec![skip, None]]
    );
    assert_eq!(
        sent_extras(&replay(OTHER, history)),
        [vec![None, None], vec![None, None], vec![None, None]]
    );
}
