//! The request the codec writes.

use homeagent_core::{AssistantMessage, Message, ToolCall, ToolMessage};
use homeagent_llm::codec::openai::OpenAiCodec;
use homeagent_llm::{ChatRequest, Endpoint, ToolSpec, WireCodec};
use serde_json::{Value, json};

fn spec(name: &str, description: &str, parameters: Value) -> ToolSpec {
    ToolSpec::new(name, description, &parameters)
}

fn parallel_batch_history() -> ChatRequest {
    ChatRequest {
        model: "gpt-4o-mini".into(),
        messages: vec![
            Message::system("You are HomeAgent."),
            Message::user("Turn on the kitchen light and read the hallway temperature."),
            Message::Assistant(AssistantMessage {
                content: String::new(),
                reasoning: vec![],
                tool_calls: vec![
                    ToolCall {
                        id: "call_kL1x9QmZ".into(),
                        name: "light_set".into(),
                        arguments: json!({"entity": "light.kitchen", "on": true}),
                        raw_arguments: "{\"entity\": \"light.kitchen\", \"on\": true}".into(),
                    },
                    ToolCall {
                        id: "call_T2pWq7Rv".into(),
                        name: "sensor_read".into(),
                        arguments: json!({"entity": "sensor.hallway_temperature"}),
                        raw_arguments: "{\"entity\":\"sensor.hallway_temperature\"}".into(),
                    },
                ],
            }),
            Message::Tool(ToolMessage {
                tool_call_id: "call_kL1x9QmZ".into(),
                name: "light_set".into(),
                content: "light.kitchen is on".into(),
                success: true,
            }),
            Message::Tool(ToolMessage {
                tool_call_id: "call_T2pWq7Rv".into(),
                name: "sensor_read".into(),
                content: "sensor.hallway_temperature is unavailable".into(),
                success: false,
            }),
            Message::Assistant(AssistantMessage {
                content: "The light is on; the hallway sensor is unavailable.".into(),
                ..AssistantMessage::default()
            }),
            Message::user("Thanks."),
        ],
        tools: vec![
            spec(
                "light_set",
                "Switch a light.",
                json!({"type": "object", "properties": {"entity": {"type": "string"}, "on": {"type": "boolean"}}, "required": ["entity", "on"]}),
            ),
            spec(
                "sensor_read",
                "Read a sensor.",
                json!({"type": "object", "properties": {"entity": {"type": "string"}}}),
            ),
        ],
        max_tokens: 1024,
        temperature: Some(0.2),
        stream: true,
        rendered: Default::default(),
    }
}

#[test]
fn request_for_a_parallel_batch_history_is_exactly_the_openai_shape() {
    let endpoint = Endpoint {
        base_url: "https://api.openai.com/v1/".into(),
        api_key: Some("sk-test-123".into()),
    };
    let wire = OpenAiCodec
        .build_request(&endpoint, &parallel_batch_history())
        .unwrap();
    assert_eq!(wire.url, "https://api.openai.com/v1/chat/completions");
    let mut headers = wire.headers.clone();
    headers.sort();
    assert_eq!(
        headers,
        [
            ("authorization".to_owned(), "Bearer sk-test-123".to_owned()),
            ("content-type".to_owned(), "application/json".to_owned()),
        ]
    );
    let expected: Value = serde_json::from_str(
        r#"{
        "model": "gpt-4o-mini",
        "messages": [
            {"role": "system", "content": "You are HomeAgent."},
            {"role": "user", "content": "Turn on the kitchen light and read the hallway temperature."},
            {"role": "assistant", "content": null, "tool_calls": [
                {"id": "call_kL1x9QmZ", "type": "function",
                 "function": {"name": "light_set", "arguments": "{\"entity\":\"light.kitchen\",\"on\":true}"}},
                {"id": "call_T2pWq7Rv", "type": "function",
                 "function": {"name": "sensor_read", "arguments": "{\"entity\":\"sensor.hallway_temperature\"}"}}
            ]},
            {"role": "tool", "tool_call_id": "call_kL1x9QmZ", "content": "light.kitchen is on"},
            {"role": "tool", "tool_call_id": "call_T2pWq7Rv",
             "content": "{\"error\":\"sensor.hallway_temperature is unavailable\"}"},
            {"role": "assistant", "content": "The light is on; the hallway sensor is unavailable."},
            {"role": "user", "content": "Thanks."}
        ],
        "tools": [
            {"type": "function", "function": {"name": "light_set", "description": "Switch a light.",
              "parameters": {"type": "object", "properties": {"entity": {"type": "string"}, "on": {"type": "boolean"}}, "required": ["entity", "on"]}}},
            {"type": "function", "function": {"name": "sensor_read", "description": "Read a sensor.",
              "parameters": {"type": "object", "properties": {"entity": {"type": "string"}}}}}
        ],
        "max_completion_tokens": 1024,
        "temperature": 0.2,
        "stream": true,
        "stream_options": {"include_usage": true}
    }"#,
    )
    .unwrap();
    assert_eq!(wire.body_json().unwrap(), expected);
}

#[test]
fn request_without_key_tools_or_streaming() {
    let endpoint = Endpoint {
        base_url: "http://127.0.0.1:8080/v1".into(),
        api_key: None,
    };
    let request = ChatRequest {
        model: "qwen3".into(),
        messages: vec![Message::user("hi")],
        tools: vec![],
        max_tokens: 256,
        temperature: None,
        stream: false,
        rendered: Default::default(),
    };
    let wire = OpenAiCodec.build_request(&endpoint, &request).unwrap();
    assert_eq!(wire.url, "http://127.0.0.1:8080/v1/chat/completions");
    assert_eq!(
        wire.headers,
        [("content-type".to_owned(), "application/json".to_owned())]
    );
    assert_eq!(
        wire.body_json().unwrap(),
        json!({
            "model": "qwen3",
            "messages": [{"role": "user", "content": "hi"}],
            "max_tokens": 256,
            "stream": false
        })
    );
}

#[test]
fn an_assistant_turn_with_text_and_calls_keeps_its_text() {
    let endpoint = Endpoint {
        base_url: "http://127.0.0.1:8080/v1".into(),
        api_key: None,
    };
    let request = ChatRequest {
        model: "m".into(),
        messages: vec![Message::Assistant(AssistantMessage {
            content: "Checking the light.".into(),
            reasoning: vec![],
            tool_calls: vec![ToolCall {
                id: "call_1".into(),
                name: "light_get".into(),
                arguments: json!({}),
                raw_arguments: "{}".into(),
            }],
        })],
        tools: vec![],
        max_tokens: 16,
        temperature: None,
        stream: false,
        rendered: Default::default(),
    };
    let body = OpenAiCodec
        .build_request(&endpoint, &request)
        .unwrap()
        .body_json()
        .unwrap();
    assert_eq!(
        body["messages"],
        json!([{"role": "assistant", "content": "Checking the light.", "tool_calls": [
            {"id": "call_1", "type": "function", "function": {"name": "light_get", "arguments": "{}"}}
        ]}])
    );
}

/// Reasoning marked as DeepSeek's `reasoning_content` goes back on the
/// current turn's assistant messages (after the last user message), empty
/// included; earlier turns and other reasoning are not sent (OpenAI has no
/// such input field).
#[test]
fn reasoning_content_goes_back_in_the_current_turn_only() {
    use homeagent_core::ReasoningPart;
    let marked = |text: &str| ReasoningPart {
        text: text.into(),
        metadata: Some(json!({"openai": {"reasoning_field": "reasoning_content"}})),
    };
    let call = ToolCall {
        id: "call_00_x".into(),
        name: "sensor_read".into(),
        arguments: json!({}),
        raw_arguments: "{}".into(),
    };
    let request = ChatRequest {
        model: "deepseek-reasoner".into(),
        messages: vec![
            Message::user("hi"),
            Message::Assistant(AssistantMessage {
                content: "Hello.".into(),
                reasoning: vec![marked("old thoughts")],
                tool_calls: vec![],
            }),
            Message::user("read the sensor"),
            Message::Assistant(AssistantMessage {
                content: String::new(),
                reasoning: vec![marked("Read "), marked("it.")],
                tool_calls: vec![call],
            }),
            Message::Tool(ToolMessage {
                tool_call_id: "call_00_x".into(),
                name: "sensor_read".into(),
                content: "21".into(),
                success: true,
            }),
            Message::Assistant(AssistantMessage {
                content: "Still thinking.".into(),
                reasoning: vec![marked("")],
                tool_calls: vec![],
            }),
            Message::Assistant(AssistantMessage {
                content: "From elsewhere.".into(),
                reasoning: vec![ReasoningPart {
                    text: "anthropic's".into(),
                    metadata: Some(json!({"anthropic": {"signature": "sig"}})),
                }],
                tool_calls: vec![],
            }),
        ],
        tools: vec![],
        max_tokens: 64,
        temperature: None,
        stream: false,
        rendered: Default::default(),
    };
    let sent_to = |base_url: &str| {
        let body = OpenAiCodec
            .build_request(
                &Endpoint {
                    base_url: base_url.into(),
                    api_key: None,
                },
                &request,
            )
            .unwrap()
            .body_json()
            .unwrap();
        body["messages"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|m| m["role"] == "assistant")
            .map(|m| {
                m.get("reasoning_content")
                    .and_then(Value::as_str)
                    .map(str::to_owned)
            })
            .collect::<Vec<_>>()
    };
    assert_eq!(
        sent_to("https://api.deepseek.com"),
        [None, Some("Read it.".into()), Some(String::new()), None]
    );
    // A fallback to a server that refuses members it does not know
    // (OpenAI's own API, Mistral's) sends the text and calls only.
    for strict in ["https://api.openai.com/v1", "https://api.mistral.ai/v1"] {
        assert_eq!(sent_to(strict), [None, None, None, None], "to {strict}");
    }
}

/// OpenAI's own API refuses `max_tokens` for its reasoning models (gpt-5,
/// the o-series: "Unsupported parameter: 'max_tokens' is not supported
/// with this model. Use 'max_completion_tokens' instead.") and takes
/// `max_completion_tokens` for every model; so does Azure OpenAI. Other
/// servers speaking the protocol (vLLM, llama.cpp, DeepSeek, ...) know
/// `max_tokens`. OpenAI's reasoning models go by their name too: a
/// gateway that passes the body through (Cloudflare's, Helicone, a
/// company proxy) reaches the same refusal.
#[test]
fn openai_itself_gets_max_completion_tokens_other_servers_max_tokens() {
    let request = ChatRequest {
        model: "gpt-4.1-mini".into(),
        messages: vec![Message::user("hi")],
        tools: vec![],
        max_tokens: 300,
        temperature: None,
        stream: false,
        rendered: Default::default(),
    };
    let limits = |base_url: &str| {
        let body = super::encoded(base_url, &request);
        (
            body.get("max_tokens").cloned(),
            body.get("max_completion_tokens").cloned(),
        )
    };
    let completion = (None, Some(json!(300)));
    let classic = (Some(json!(300)), None);
    assert_eq!(limits("https://api.openai.com/v1"), completion);
    assert_eq!(limits("https://API.OpenAI.com:443/v1/"), completion);
    assert_eq!(
        limits("https://my-res.openai.azure.com/openai/v1"),
        completion
    );
    assert_eq!(limits("http://127.0.0.1:8000/v1"), classic);
    assert_eq!(limits("https://api.deepseek.com"), classic);
    // Not OpenAI's host, whatever the path or a look-alike name says.
    assert_eq!(limits("https://api.openai.com.example.net/v1"), classic);
    assert_eq!(
        limits("https://proxy.example.net/api.openai.com/v1"),
        classic
    );
    for model in [
        "gpt-5-mini",
        "o3",
        "o4-mini",
        "o1-preview",
        "openai/gpt-5",
        "GPT-5",
    ] {
        let request = ChatRequest {
            model: model.into(),
            ..request.clone()
        };
        let body = super::encoded("https://gateway.example.net/v1", &request);
        assert_eq!(
            body.get("max_completion_tokens"),
            Some(&json!(300)),
            "{model}"
        );
        assert_eq!(body.get("max_tokens"), None, "{model}");
    }
    for model in ["gpt-oss-20b", "o3x-local", "llama3.2", "olmo-2"] {
        let request = ChatRequest {
            model: model.into(),
            ..request.clone()
        };
        let body = super::encoded("http://127.0.0.1:8000/v1", &request);
        assert_eq!(body.get("max_tokens"), Some(&json!(300)), "{model}");
    }
}
