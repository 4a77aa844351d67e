//! Mistral refuses any tool call id that is not exactly nine letters and
//! digits ("Tool call id was call_Yw3k... but must be a-z, A-Z, 0-9, with a
//! length of 9"), on its own API and in vLLM's Mistral mode alike. A
//! history made with another provider holds such ids, and every request of
//! the session that still holds one would fail.

use std::collections::HashSet;

use homeagent_core::{AssistantMessage, Message, ToolCall, ToolMessage};
use serde_json::{Value, json};

use super::body_for;

const MISTRAL: &str = "https://api.mistral.ai/v1";
const VLLM: &str = "http://127.0.0.1:8000/v1";

/// Ids as other providers write them, one Mistral id, and one call whose
/// id recurs in a later turn (providers without ids number every turn's
/// calls from `call_0`).
const IDS: [&str; 5] = [
    "call_Yw3kZ8pQ2mN7vB1xC4dF6gH9",
    "functions.ls:0",
    "D681PevKs",
    "call_0",
    "toolu_01A09q90qw90lq917835lq9",
];

fn is_mistral_id(id: &str) -> bool {
    id.len() == 9 && id.chars().all(|c| c.is_ascii_alphanumeric())
}

fn history() -> Vec<Message> {
    let mut messages = vec![Message::user("read everything")];
    let step = |ids: &[&str]| {
        let mut out = vec![Message::Assistant(AssistantMessage {
            content: String::new(),
            reasoning: vec![],
            tool_calls: ids
                .iter()
                .map(|id| ToolCall {
                    id: (*id).into(),
                    name: "file_read".into(),
                    arguments: json!({}),
                    raw_arguments: "{}".into(),
                })
                .collect(),
        })];
        out.extend(ids.iter().map(|id| {
            Message::Tool(ToolMessage {
                tool_call_id: (*id).into(),
                name: "file_read".into(),
                content: format!("content of {id}"),
                success: true,
            })
        }));
        out
    };
    messages.extend(step(&IDS));
    messages.push(Message::user("again"));
    messages.extend(step(&["call_0"]));
    messages
}

fn body(base_url: &str, model: &str) -> Value {
    body_for(base_url, model, history(), false)
}

/// `(call ids of each assistant message, tool_call_id of each result)`.
fn ids_sent(body: &Value) -> (Vec<Vec<String>>, Vec<String>) {
    let messages = body["messages"].as_array().unwrap();
    let calls = messages
        .iter()
        .filter(|m| m["role"] == "assistant" && m.get("tool_calls").is_some())
        .map(|m| {
            m["tool_calls"]
                .as_array()
                .unwrap()
                .iter()
                .map(|c| c["id"].as_str().unwrap().to_owned())
                .collect()
        })
        .collect();
    let results = messages
        .iter()
        .filter(|m| m["role"] == "tool")
        .map(|m| m["tool_call_id"].as_str().unwrap().to_owned())
        .collect();
    (calls, results)
}

#[test]
fn mistral_gets_nine_character_ids_alike_on_calls_and_results() {
    for (base_url, model) in [
        (MISTRAL, "mistral-small-latest"),
        (MISTRAL, "open-mixtral-8x22b"),
        (VLLM, "mistralai/Mistral-Small-3.2-24B-Instruct-2506"),
        (VLLM, "Devstral-Small-2507"),
    ] {
        let (calls, results) = ids_sent(&body(base_url, model));
        let flat: Vec<&String> = calls.iter().flatten().collect();
        assert!(
            flat.iter().all(|id| is_mistral_id(id)),
            "{base_url} {model}: {flat:?}"
        );
        // Each result answers its own call, as in the history.
        let expected_results: Vec<&String> = flat.clone();
        assert_eq!(results.iter().collect::<Vec<_>>(), expected_results);
        // Distinct ids stay distinct within a turn; the one id that recurs
        // across turns maps to one id.
        let first_turn: HashSet<&String> = calls[0].iter().collect();
        assert_eq!(first_turn.len(), IDS.len(), "{:?}", calls[0]);
        assert_eq!(calls[1][0], calls[0][3]);
        // Mistral's own id is sent as it is.
        assert_eq!(calls[0][2], "D681PevKs");
        // The same history gives the same ids on the next request.
        assert_eq!(ids_sent(&body(base_url, model)).0, calls);
    }
}

#[test]
fn other_servers_get_the_ids_as_they_are() {
    for (base_url, model) in [
        (VLLM, "Qwen/Qwen3-32B"),
        ("https://api.openai.com/v1", "gpt-4.1"),
    ] {
        let (calls, _) = ids_sent(&body(base_url, model));
        assert_eq!(calls[0], IDS);
        assert_eq!(calls[1], ["call_0"]);
    }
}

/// An id that maps to one already in the request must not collide with it.
#[test]
fn a_mapped_id_never_takes_an_id_already_in_the_request() {
    let (calls, _) = ids_sent(&body(MISTRAL, "mistral-large-latest"));
    let mapped_first = calls[0][0].clone();
    // Put that mapped id in the history as a real Mistral id next to the
    // original: the original must now map elsewhere.
    let mut messages = history();
    if let Message::Assistant(a) = &mut messages[1] {
        a.tool_calls[2].id = mapped_first.clone();
    }
    if let Message::Tool(t) = &mut messages[4] {
        t.tool_call_id = mapped_first.clone();
    }
    let sent = body_for(MISTRAL, "mistral-large-latest", messages, false);
    let (calls, results) = ids_sent(&sent);
    assert_eq!(calls[0][2], mapped_first);
    assert_ne!(calls[0][0], mapped_first);
    let distinct: HashSet<&String> = calls[0].iter().collect();
    assert_eq!(distinct.len(), IDS.len());
    assert_eq!(results[..IDS.len()], calls[0][..]);
}

/// Mistral (its API and its models elsewhere) refuses a user message right
/// after a tool result ("Unexpected role 'user' after role 'tool'"), which
/// a history holds whenever a turn ended at its tool results (a cap, an
/// interrupt). A short assistant message bridges the two; other servers get
/// the history as it is.
#[test]
fn mistral_gets_an_assistant_message_between_a_tool_result_and_a_user_message() {
    let roles = |body: &Value| -> Vec<String> {
        body["messages"]
            .as_array()
            .unwrap()
            .iter()
            .map(|m| m["role"].as_str().unwrap().to_owned())
            .collect()
    };
    let history_roles: Vec<String> = history().iter().map(|m| m.role().to_owned()).collect();
    let tool_then_user = history_roles
        .windows(2)
        .filter(|pair| pair[0] == "tool" && pair[1] == "user")
        .count();
    assert_eq!(tool_then_user, 1, "the history has one tool → user step");
    for (base_url, model) in [
        (MISTRAL, "mistral-small-latest"),
        (VLLM, "Devstral-Small-2507"),
    ] {
        let sent = body(base_url, model);
        let sent_roles = roles(&sent);
        assert_eq!(sent_roles.len(), history_roles.len() + 1, "{model}");
        assert!(
            !sent_roles
                .windows(2)
                .any(|pair| pair[0] == "tool" && pair[1] == "user"),
            "{model}: {sent_roles:?}"
        );
        let at = sent_roles.iter().position(|r| r == "user").unwrap();
        let again = sent_roles
            .iter()
            .skip(at + 1)
            .position(|r| r == "user")
            .unwrap()
            + at
            + 1;
        let bridge = &sent["messages"][again - 1];
        assert_eq!(bridge["role"], "assistant", "{model}");
        assert!(
            !bridge["content"].as_str().unwrap().is_empty(),
            "{model}: {bridge}"
        );
        assert!(bridge.get("tool_calls").is_none(), "{model}: {bridge}");
    }
    for (base_url, model) in [
        (VLLM, "Qwen/Qwen3-32B"),
        ("https://api.openai.com/v1", "gpt-4.1"),
    ] {
        assert_eq!(roles(&body(base_url, model)), history_roles, "{model}");
    }
}

/// Mistral's API refuses `stream_options` ("Extra inputs are not
/// permitted") and sends usage in its last chunk anyway; vLLM serving a
/// Mistral model takes it and needs it for usage.
#[test]
fn mistrals_api_gets_no_stream_options() {
    let streamed = |base_url: &str, model: &str| body_for(base_url, model, history(), true);
    let sent = streamed(MISTRAL, "mistral-small-latest");
    assert_eq!(sent["stream"], true);
    assert!(sent.get("stream_options").is_none(), "{sent}");
    for (base_url, model) in [
        (VLLM, "Devstral-Small-2507"),
        ("https://api.openai.com/v1", "gpt-4.1"),
    ] {
        let sent = streamed(base_url, model);
        assert_eq!(
            sent["stream_options"],
            json!({"include_usage": true}),
            "{model}"
        );
    }
}
