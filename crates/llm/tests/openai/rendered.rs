//! A request kept from one model request to the next writes only the
//! messages its owner did not declare unchanged, and the same bytes as a
//! fresh request ([`homeagent_llm::RenderCache`]).

use homeagent_core::{AssistantMessage, Message, ReasoningPart, ToolCall, ToolMessage};
use homeagent_llm::codec::openai::OpenAiCodec;
use homeagent_llm::{ChatRequest, Endpoint, ToolSpec, WireCodec};
use serde_json::json;

fn endpoint(base_url: &str) -> Endpoint {
    Endpoint {
        base_url: base_url.into(),
        api_key: None,
    }
}

const LOCAL: &str = "http://127.0.0.1:8080/v1";

fn body(base_url: &str, request: &ChatRequest) -> Vec<u8> {
    OpenAiCodec
        .build_request(&endpoint(base_url), request)
        .unwrap()
        .body
        .as_bytes()
        .to_vec()
}

/// The body of a request built afresh (a clone's cache is empty).
fn fresh(base_url: &str, request: &ChatRequest) -> Vec<u8> {
    let copy = request.clone();
    let written = body(base_url, &copy);
    assert_eq!(
        copy.rendered.reused(),
        0,
        "a clone starts with nothing kept"
    );
    written
}

/// DeepSeek's marker: the current turn's reasoning goes back, earlier
/// turns' does not, so an assistant message is written differently once a
/// user message follows it.
fn marked(text: &str) -> ReasoningPart {
    ReasoningPart {
        text: text.into(),
        metadata: Some(json!({"openai": {"reasoning_field": "reasoning_content"}})),
    }
}

fn calls(tag: &str) -> Message {
    Message::Assistant(AssistantMessage {
        content: String::new(),
        reasoning: vec![marked("thinking \"hard\"")],
        tool_calls: (0..2)
            .map(|i| ToolCall {
                id: format!("call_{tag}_{i}"),
                name: "demo_echo".into(),
                arguments: json!({"tag": format!("{tag}-{i}"), "quote": "a \"b\"\n"}),
                raw_arguments: String::new(),
            })
            .collect(),
    })
}

fn results(tag: &str) -> Vec<Message> {
    (0..2)
        .map(|i| {
            Message::Tool(ToolMessage {
                tool_call_id: format!("call_{tag}_{i}"),
                name: "demo_echo".into(),
                content: format!("{{\"echo\":\"{tag}-{i}\"}}"),
                success: i == 0,
            })
        })
        .collect()
}

fn reply(text: &str) -> Message {
    Message::Assistant(AssistantMessage {
        content: text.into(),
        reasoning: vec![marked("done")],
        tool_calls: vec![],
    })
}

fn start() -> ChatRequest {
    ChatRequest {
        model: "deepseek-chat".into(),
        messages: vec![
            Message::system("You are HomeAgent."),
            Message::user("first"),
        ],
        tools: vec![],
        max_tokens: 64,
        temperature: None,
        stream: true,
        rendered: Default::default(),
    }
}

/// Builds `request` after declaring its first `kept` messages unchanged;
/// the body must be a fresh request's, and `reused` messages come from
/// the kept text.
fn step(request: &ChatRequest, kept: usize, reused: usize) {
    request.rendered.keep_first(kept);
    let expected = fresh(LOCAL, request);
    let written = body(LOCAL, request);
    assert_eq!(
        String::from_utf8_lossy(&written),
        String::from_utf8_lossy(&expected)
    );
    assert_eq!(
        request.rendered.reused(),
        reused,
        "messages taken from the kept text"
    );
}

#[test]
fn a_kept_request_writes_only_what_changed_and_the_same_bytes() {
    let mut request = start();
    // Nothing is kept yet.
    step(&request, 0, 0);
    // The input's batch: everything before the current turn (system and
    // user) was kept.
    let len = request.messages.len();
    request.messages.push(calls("a"));
    request.messages.extend(results("a"));
    step(&request, len, 2);
    // The next input: the last turn's messages were current, written with
    // their reasoning, so they were not kept; they are now, as earlier.
    let len = request.messages.len();
    request.messages.push(reply("first done"));
    request.messages.push(Message::user("second"));
    step(&request, len, 2);
    let len = request.messages.len();
    request.messages.push(calls("b"));
    request.messages.extend(results("b"));
    step(&request, len, 7);
    // A declaration covers only what it names: the owner cut the list back
    // to its first three messages.
    request.messages.truncate(3);
    request.messages.push(Message::user("third"));
    step(&request, 3, 3);
    // No declaration, no reuse (and still the same bytes).
    step_undeclared(&request);
    // Declared, but the list lost its last user message: the messages
    // after the one now last are the current turn's again.
    request.messages.truncate(3);
    step(&request, 3, 2);
}

fn step_undeclared(request: &ChatRequest) {
    let expected = fresh(LOCAL, request);
    assert_eq!(body(LOCAL, request), expected);
    assert_eq!(request.rendered.reused(), 0);
}

/// A declaration is used by one build only: the next build without one
/// writes every message again.
#[test]
fn a_declaration_serves_one_build() {
    let mut request = start();
    request.messages.push(reply("ok"));
    request.messages.push(Message::user("again"));
    step(&request, 0, 0);
    step(&request, 4, 4);
    step_undeclared(&request);
    // Two declarations before one build: the smaller counts.
    request.rendered.keep_first(4);
    request.rendered.keep_first(1);
    body(LOCAL, &request);
    assert_eq!(request.rendered.reused(), 1);
}

/// The text kept for one server is not reused for another that writes
/// messages otherwise (Gemini's endpoint; Mistral's, whose call ids are
/// renamed over the whole history).
#[test]
fn text_written_for_another_shape_is_not_reused() {
    let mut request = start();
    request.messages.push(calls("a"));
    request.messages.extend(results("a"));
    request.messages.push(reply("done"));
    request.messages.push(Message::user("next"));
    let len = request.messages.len();
    body(LOCAL, &request);
    request.rendered.keep_first(len);
    let gemini = "https://generativelanguage.googleapis.com/v1beta/openai";
    assert_eq!(body(gemini, &request), fresh(gemini, &request));
    assert_eq!(request.rendered.reused(), 0);
    request.rendered.keep_first(len);
    assert_eq!(body(gemini, &request), fresh(gemini, &request));
    assert_eq!(request.rendered.reused(), len);

    let mistral = "https://api.mistral.ai/v1";
    request.rendered.keep_first(len);
    assert_eq!(body(mistral, &request), fresh(mistral, &request));
    assert_eq!(request.rendered.reused(), 0);
    request.rendered.keep_first(len);
    assert_eq!(body(mistral, &request), fresh(mistral, &request));
    assert_eq!(request.rendered.reused(), 0);
}

fn tool(name: &str, description: &str) -> ToolSpec {
    ToolSpec::new(
        name,
        description,
        &json!({"type": "object", "properties": {"tag": {"type": "string"}}}),
    )
}

/// The tool list is written once for a request built again with the same
/// tools (the same `ToolSpec`s or clones of them); another list, even of
/// equal tools, is written afresh, and every body is a fresh request's.
#[test]
fn the_tool_list_is_written_once_for_the_same_tools() {
    let mut request = start();
    request.tools = vec![tool("demo_echo", "Echoes."), tool("demo_sleep", "Sleeps.")];
    let check = |request: &ChatRequest, reused: bool| {
        let expected = fresh(LOCAL, request);
        let written = body(LOCAL, request);
        assert_eq!(
            String::from_utf8_lossy(&written),
            String::from_utf8_lossy(&expected)
        );
        assert_eq!(request.rendered.tools_reused(), reused);
    };
    check(&request, false);
    check(&request, true);
    // Clones are the same definitions.
    request.tools = request.tools.clone();
    check(&request, true);
    // Equal, but other definitions: written afresh (and right).
    request.tools[1] = tool("demo_sleep", "Sleeps.");
    check(&request, false);
    check(&request, true);
    request.tools[1] = tool("demo_sleep", "Sleeps for a while.");
    check(&request, false);
    request.tools.pop();
    check(&request, false);
    request.tools.clear();
    check(&request, false);
}

/// Debug builds check every reuse: a message declared unchanged that did
/// change is caught before its stale text is sent.
#[cfg(debug_assertions)]
#[test]
#[should_panic(expected = "declared messages unchanged that changed")]
fn a_false_declaration_is_caught_in_debug_builds() {
    let mut request = start();
    request.messages.push(reply("ok"));
    step(&request, 0, 0);
    request.messages[1] = Message::user("edited");
    request.rendered.keep_first(request.messages.len());
    body(LOCAL, &request);
}
