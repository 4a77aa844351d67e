//! Anthropic request building and HTTP error bodies.

use super::*;

#[test]
fn request_has_the_documented_shape() {
    let request = ChatRequest {
        model: "claude-sonnet-4-5".into(),
        messages: vec![
            Message::system("You are HomeAgent."),
            Message::user("Weather in Paris and Rome?"),
            Message::Assistant(AssistantMessage {
                content: "Checking both.".into(),
                reasoning: vec![
                    // Another provider's reasoning: never sent to Anthropic.
                    ReasoningPart {
                        text: "think".into(),
                        metadata: Some(
                            json!({"gemini": {"thought_signature": "sig", "part": "text"}}),
                        ),
                    },
                    ReasoningPart {
                        text: "unsigned".into(),
                        metadata: None,
                    },
                ],
                tool_calls: vec![
                    call("toolu_01Paris", "get_weather", json!({"city": "Paris"}), ""),
                    call("toolu_01Rome", "get_weather", json!({"city": "Rome"}), ""),
                ],
            }),
            Message::Tool(ToolMessage {
                tool_call_id: "toolu_01Paris".into(),
                name: "get_weather".into(),
                content: "18°C, cloudy".into(),
                success: true,
            }),
            Message::Tool(ToolMessage {
                tool_call_id: "toolu_01Rome".into(),
                name: "get_weather".into(),
                content: "weather service timed out after 10s".into(),
                success: false,
            }),
            Message::user("Also, keep it short."),
            Message::system("Answer in English."),
        ],
        tools: vec![ToolSpec::new(
            "get_weather",
            "Current weather for a city",
            &json!({"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}),
        )],
        max_tokens: 2048,
        temperature: Some(0.7),
        stream: true,
        rendered: Default::default(),
    };
    let wire = AnthropicCodec
        .build_request(&endpoint(Some("sk-ant-test")), &request)
        .unwrap();
    assert_eq!(wire.url, "https://api.anthropic.com/v1/messages");
    assert_eq!(
        wire.headers,
        vec![
            ("x-api-key".to_owned(), "sk-ant-test".to_owned()),
            ("anthropic-version".to_owned(), "2023-06-01".to_owned()),
            ("content-type".to_owned(), "application/json".to_owned()),
        ]
    );
    assert_eq!(
        wire.body_json().unwrap(),
        json!({
            "model": "claude-sonnet-4-5",
            "max_tokens": 2048,
            "system": "You are HomeAgent.\n\nAnswer in English.",
            "messages": [
                {"role": "user", "content": [{"type": "text", "text": "Weather in Paris and Rome?"}]},
                {"role": "assistant", "content": [
                    {"type": "text", "text": "Checking both."},
                    {"type": "tool_use", "id": "toolu_01Paris", "name": "get_weather", "input": {"city": "Paris"}},
                    {"type": "tool_use", "id": "toolu_01Rome", "name": "get_weather", "input": {"city": "Rome"}},
                ]},
                {"role": "user", "content": [
                    {"type": "tool_result", "tool_use_id": "toolu_01Paris", "content": "18°C, cloudy"},
                    {"type": "tool_result", "tool_use_id": "toolu_01Rome", "content": "weather service timed out after 10s", "is_error": true},
                    {"type": "text", "text": "Also, keep it short."},
                ]},
            ],
            "tools": [{
                "name": "get_weather",
                "description": "Current weather for a city",
                "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
            }],
            "stream": true,
            "temperature": 0.7,
        })
    );
}

#[test]
fn minimal_request_omits_optional_fields_and_the_key_header() {
    let request = ChatRequest {
        model: "claude-haiku-4-5".into(),
        messages: vec![Message::user("hi")],
        tools: vec![],
        max_tokens: 64,
        temperature: None,
        stream: false,
        rendered: Default::default(),
    };
    let wire = AnthropicCodec
        .build_request(&endpoint(None), &request)
        .unwrap();
    assert!(wire.headers.iter().all(|(k, _)| k != "x-api-key"));
    assert_eq!(
        wire.body_json().unwrap(),
        json!({
            "model": "claude-haiku-4-5",
            "max_tokens": 64,
            "messages": [{"role": "user", "content": [{"type": "text", "text": "hi"}]}],
            "stream": false,
        })
    );
}

#[test]
fn a_request_with_only_system_messages_cannot_be_encoded() {
    let request = ChatRequest {
        model: "claude-haiku-4-5".into(),
        messages: vec![Message::system("only a system prompt")],
        tools: vec![],
        max_tokens: 64,
        temperature: None,
        stream: false,
        rendered: Default::default(),
    };
    let err = AnthropicCodec
        .build_request(&endpoint(None), &request)
        .unwrap_err();
    assert!(matches!(
        err,
        CodecError::Unencodable {
            protocol: "anthropic",
            ..
        }
    ));
}

#[test]
fn http_error_bodies_become_status_type_and_message() {
    let body = br#"{"type":"error","error":{"type":"authentication_error","message":"invalid x-api-key"},"request_id":"req_011CSHoEeqs5C35K2UUqR7Fy"}"#;
    assert_eq!(
        AnthropicCodec.error_message(401, body),
        "HTTP 401: authentication_error: invalid x-api-key"
    );
    assert_eq!(
        AnthropicCodec.error_message(502, b"<html>Bad Gateway</html>\n"),
        "HTTP 502: <html>Bad Gateway</html>"
    );
    assert_eq!(AnthropicCodec.error_message(503, b""), "HTTP 503");
    let long = "x".repeat(1000);
    let message = AnthropicCodec.error_message(500, long.as_bytes());
    assert!(message.len() < 300, "{message}");
}

/// The `messages` Anthropic is sent for `messages` (no tools, not streamed).
fn messages_sent(messages: Vec<Message>) -> serde_json::Value {
    let request = ChatRequest {
        model: "claude-haiku-4-5".into(),
        messages,
        tools: vec![],
        max_tokens: 64,
        temperature: None,
        stream: false,
        rendered: Default::default(),
    };
    let wire = AnthropicCodec
        .build_request(&endpoint(None), &request)
        .unwrap();
    wire.body_json().unwrap()["messages"].take()
}

/// Anthropic refuses a text block without non-whitespace text ("text
/// content blocks must contain non-whitespace text"), and the turn stays in
/// the history: sent as is, every later request of the session would fail.
/// Models often put "\n\n" before their calls.
#[test]
fn whitespace_only_text_is_not_sent_as_a_block() {
    let messages = vec![
        Message::user("turn the light on"),
        Message::Assistant(AssistantMessage {
            content: "\n\n".into(),
            reasoning: vec![],
            tool_calls: vec![call("toolu_1", "light_set", json!({"on": true}), "")],
        }),
        Message::Tool(ToolMessage {
            tool_call_id: "toolu_1".into(),
            name: "light_set".into(),
            content: "on".into(),
            success: true,
        }),
        Message::user(" \t"),
        Message::Assistant(AssistantMessage {
            content: " ".into(),
            ..AssistantMessage::default()
        }),
        Message::user("thanks"),
    ];
    assert_eq!(
        messages_sent(messages),
        json!([
            {"role": "user", "content": [{"type": "text", "text": "turn the light on"}]},
            {"role": "assistant", "content": [
                {"type": "tool_use", "id": "toolu_1", "name": "light_set", "input": {"on": true}},
            ]},
            {"role": "user", "content": [
                {"type": "tool_result", "tool_use_id": "toolu_1", "content": "on"},
                {"type": "text", "text": "thanks"},
            ]},
        ])
    );
}

/// Anthropic accepts call ids matching `^[a-zA-Z0-9_-]+$` only; a history
/// made with another provider may hold others (Kimi writes
/// `functions.ls:0`). Each is sent in a form Anthropic accepts, the same on
/// the call and on its result, and never equal to another id of the
/// request.
#[test]
fn call_ids_are_sent_in_a_form_anthropic_accepts() {
    let turn = |id: &str, other: &str| {
        vec![
            Message::Assistant(AssistantMessage {
                content: String::new(),
                reasoning: vec![],
                tool_calls: vec![
                    call(id, "ls", json!({}), ""),
                    call(other, "ls", json!({}), ""),
                ],
            }),
            Message::Tool(ToolMessage {
                tool_call_id: id.into(),
                name: "ls".into(),
                content: "a".into(),
                success: true,
            }),
            Message::Tool(ToolMessage {
                tool_call_id: other.into(),
                name: "ls".into(),
                content: "b".into(),
                success: true,
            }),
        ]
    };
    let mut messages = vec![Message::user("list")];
    // The second id is what the first would become: it keeps its name, the
    // first gets another.
    messages.extend(turn("functions.ls:0", "functions_ls_0"));
    messages.push(Message::user("again"));
    messages.extend(turn("call_1", "ünïcode id"));
    let request = ChatRequest {
        model: "claude-haiku-4-5".into(),
        messages,
        tools: vec![],
        max_tokens: 64,
        temperature: None,
        stream: false,
        rendered: Default::default(),
    };
    let body = AnthropicCodec
        .build_request(&endpoint(None), &request)
        .unwrap()
        .body_json()
        .unwrap();
    let ids = |role: &str, kind: &str, field: &str| -> Vec<String> {
        body["messages"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|m| m["role"] == role)
            .flat_map(|m| m["content"].as_array().unwrap().clone())
            .filter(|b| b["type"] == kind)
            .map(|b| b[field].as_str().unwrap().to_owned())
            .collect()
    };
    let calls = ids("assistant", "tool_use", "id");
    assert_eq!(
        calls,
        ["functions_ls_0_2", "functions_ls_0", "call_1", "_n_code_id"]
    );
    assert_eq!(ids("user", "tool_result", "tool_use_id"), calls);
}

/// `input` must be an object. The kernel only ever stores object
/// arguments, but a history built by hand (or by an older store) may hold
/// something else; it is sent as an empty object rather than refused.
#[test]
fn a_call_whose_arguments_are_not_an_object_is_sent_with_an_empty_input() {
    let messages = vec![
        Message::user("go"),
        Message::Assistant(AssistantMessage {
            content: String::new(),
            reasoning: vec![],
            tool_calls: vec![call("toolu_1", "light_set", json!("on"), "\"on\"")],
        }),
    ];
    assert_eq!(
        messages_sent(messages)[1]["content"],
        json!([{"type": "tool_use", "id": "toolu_1", "name": "light_set", "input": {}}])
    );
}

/// Anthropic refuses a history that opens with the assistant ("messages:
/// first message must use the \"user\" role"): a chat UI's greeting, or a
/// first user text left out for being blank. A short user note opens it
/// instead, and the assistant's words are sent as they are.
#[test]
fn a_history_that_opens_with_the_assistant_gets_an_opening_user_note() {
    let greeting = Message::Assistant(AssistantMessage {
        content: "Ahoy! What can I do for ye?".into(),
        ..AssistantMessage::default()
    });
    let opened = json!({"role": "user", "content": [
        {"type": "text", "text": homeagent_llm::codec::OPENING_NOTE},
    ]});
    let expected = json!([
        opened,
        {"role": "assistant", "content": [{"type": "text", "text": "Ahoy! What can I do for ye?"}]},
        {"role": "user", "content": [{"type": "text", "text": "hello"}]},
    ]);
    for first in [
        vec![],
        vec![Message::system("Be a pirate.")],
        vec![Message::user(" ")],
    ] {
        let mut messages = first.clone();
        messages.extend([greeting.clone(), Message::user("hello")]);
        assert_eq!(messages_sent(messages), expected, "{first:?}");
    }
    // A history that opens with the user gets no note.
    let sent = messages_sent(vec![Message::user("hello"), greeting.clone()]);
    assert_eq!(sent.as_array().unwrap().len(), 2);
    assert_eq!(sent[0]["content"][0]["text"], "hello");
}
