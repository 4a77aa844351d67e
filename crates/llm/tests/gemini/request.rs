//! Gemini request building, schema sanitizing and HTTP error bodies.

use super::*;

#[test]
fn request_has_the_documented_shape() {
    let request = ChatRequest {
        model: "models/gemini-2.5-flash".into(),
        messages: vec![
            Message::system("You are HomeAgent."),
            Message::user("Switch off the kitchen light and list devices."),
            Message::Assistant(AssistantMessage {
                content: String::new(),
                reasoning: vec![
                    // Another protocol's signature: not Gemini's to replay.
                    ReasoningPart {
                        text: "plan".into(),
                        metadata: Some(json!({"anthropic": {"signature": "EqQBanthropic"}})),
                    },
                ],
                tool_calls: vec![
                    ToolCall {
                        id: "toolu_01Kitchen".into(),
                        name: "set_light".into(),
                        arguments: json!({"room": "kitchen", "on": false}),
                        raw_arguments: String::new(),
                    },
                    ToolCall {
                        id: "toolu_01List".into(),
                        name: "list_devices".into(),
                        arguments: json!({}),
                        raw_arguments: String::new(),
                    },
                ],
            }),
            Message::Tool(ToolMessage {
                tool_call_id: "toolu_01Kitchen".into(),
                name: "set_light".into(),
                content: "kitchen light is off".into(),
                success: true,
            }),
            Message::Tool(ToolMessage {
                tool_call_id: "toolu_01List".into(),
                // A name the kernel did not fill in comes from the call.
                name: String::new(),
                content: r#"["kitchen light", "hall light"]"#.into(),
                success: true,
            }),
            Message::system("Be brief."),
        ],
        tools: vec![
            ToolSpec::new(
                "set_light",
                "Switch a light",
                &json!({
                    "$schema": "http://json-schema.org/draft-07/schema#",
                    "type": "object",
                    "properties": {
                        "room": {"type": "string", "description": "Room name"},
                        "on": {"type": "boolean"},
                    },
                    "required": ["room", "on"],
                    "additionalProperties": false,
                }),
            ),
            ToolSpec::new(
                "list_devices",
                "List devices",
                &json!({"type": "object", "properties": {}}),
            ),
        ],
        max_tokens: 1024,
        temperature: Some(0.2),
        stream: true,
        rendered: Default::default(),
    };
    let wire = GeminiCodec.build_request(&endpoint(), &request).unwrap();
    assert_eq!(
        wire.url,
        "https://generativelanguage.googleapis.com/v1beta/models/gemini-2.5-flash:streamGenerateContent?alt=sse"
    );
    assert!(!wire.url.contains("AIza"), "the key never goes in the URL");
    assert_eq!(
        wire.headers,
        vec![
            ("x-goog-api-key".to_owned(), "AIzaSyTestKey".to_owned()),
            ("content-type".to_owned(), "application/json".to_owned()),
        ]
    );
    assert_eq!(
        wire.body_json().unwrap(),
        json!({
            "systemInstruction": {"parts": [{"text": "You are HomeAgent.\n\nBe brief."}]},
            "contents": [
                {"role": "user", "parts": [{"text": "Switch off the kitchen light and list devices."}]},
                // Calls another provider made, in the current turn: the
                // first carries the signature Google documents for them.
                {"role": "model", "parts": [
                    {"functionCall": {"name": "set_light", "args": {"room": "kitchen", "on": false}, "id": "toolu_01Kitchen"},
                     "thoughtSignature": "skip_thought_signature_validator"},
                    {"functionCall": {"name": "list_devices", "args": {}, "id": "toolu_01List"}},
                ]},
                {"role": "user", "parts": [
                    {"functionResponse": {"name": "set_light", "id": "toolu_01Kitchen",
                                          "response": {"result": "kitchen light is off"}}},
                    {"functionResponse": {"name": "list_devices", "id": "toolu_01List",
                                          "response": {"result": "[\"kitchen light\", \"hall light\"]"}}},
                ]},
            ],
            "tools": [{"functionDeclarations": [
                {"name": "set_light", "description": "Switch a light", "parameters": {
                    "type": "OBJECT",
                    "properties": {
                        "room": {"type": "STRING", "description": "Room name"},
                        "on": {"type": "BOOLEAN"},
                    },
                    "required": ["room", "on"],
                }},
                {"name": "list_devices", "description": "List devices"},
            ]}],
            "generationConfig": {"maxOutputTokens": 1024, "temperature": 0.2},
        })
    );

    let whole = GeminiCodec
        .build_request(
            &Endpoint {
                base_url: "http://127.0.0.1:9099".into(),
                api_key: None,
            },
            &ChatRequest {
                stream: false,
                ..request
            },
        )
        .unwrap();
    assert_eq!(
        whole.url,
        "http://127.0.0.1:9099/v1beta/models/gemini-2.5-flash:generateContent"
    );
    assert_eq!(
        whole.headers,
        vec![("content-type".to_owned(), "application/json".to_owned())]
    );
}

#[test]
fn schemas_lose_the_keywords_gemini_rejects() {
    // The kind of schema MCP servers and zod-to-json-schema emit.
    let request = ChatRequest {
        model: "gemini-2.5-flash".into(),
        messages: vec![Message::user("go")],
        tools: vec![ToolSpec::new(
            "search",
            "Search files",
            &json!({
                "$schema": "https://json-schema.org/draft/2020-12/schema",
                "type": "object",
                "properties": {
                    "query": {"type": "string", "minLength": 1},
                    "limit": {"type": "integer", "exclusiveMinimum": 0, "maximum": 100},
                    "mode": {"const": "fast"},
                    "cursor": {"type": ["string", "null"]},
                    "filters": {
                        "type": "array",
                        "items": {
                            "type": "object",
                            "properties": {"field": {"type": "string", "enum": ["name", "size"]}},
                            "additionalProperties": false,
                            "propertyNames": {"pattern": "^[a-z]+$"},
                        },
                    },
                    "level": {"oneOf": [{"type": "integer", "enum": [1, 2]}, {"type": "string"}]},
                    "site": {"type": "string", "format": "uri"},
                    "when": {"type": "string", "format": "date-time"},
                    "count": {"type": "integer", "format": "int64"},
                    "ratio": {"type": "number", "format": "double"},
                    "bits": {"type": "integer", "format": "uint8"},
                    "color": {"enum": ["red", "blue"], "format": "enum"},
                    "size": {"type": "integer", "enum": ["1", "2"]},
                },
                "required": ["query"],
                "additionalProperties": false,
                "$defs": {"unused": {"type": "string"}},
            }),
        )],
        max_tokens: 100,
        temperature: None,
        stream: false,
        rendered: Default::default(),
    };
    let wire = GeminiCodec.build_request(&endpoint(), &request).unwrap();
    assert_eq!(
        wire.body_json().unwrap()["tools"][0]["functionDeclarations"][0]["parameters"],
        json!({
            "type": "OBJECT",
            "properties": {
                "query": {"type": "STRING", "minLength": 1},
                "limit": {"type": "INTEGER", "maximum": 100},
                "mode": {"type": "STRING", "enum": ["fast"]},
                "cursor": {"type": "STRING", "nullable": true},
                "filters": {
                    "type": "ARRAY",
                    "items": {
                        "type": "OBJECT",
                        "properties": {"field": {"type": "STRING", "enum": ["name", "size"]}},
                    },
                },
                "level": {"anyOf": [{"type": "INTEGER"}, {"type": "STRING"}]},
                // Gemini takes `format` only where it means something
                // ("only 'enum' and 'date-time' are supported for STRING
                // type"), and `enum` only on a STRING ("enum only allowed
                // for STRING type").
                "site": {"type": "STRING"},
                "when": {"type": "STRING", "format": "date-time"},
                "count": {"type": "INTEGER", "format": "int64"},
                "ratio": {"type": "NUMBER", "format": "double"},
                "bits": {"type": "INTEGER"},
                "color": {"type": "STRING", "enum": ["red", "blue"], "format": "enum"},
                "size": {"type": "INTEGER"},
            },
            "required": ["query"],
        })
    );
}

/// Every ARRAY must say its `items` to Gemini ("parameters.properties[x]
/// .items: missing field" fails the whole request); JSON Schema may leave
/// them out (our own seq_create does). An array without usable items gets
/// `items: {}`, any element, at every depth.
#[test]
fn an_array_without_items_gets_empty_items() {
    let request = ChatRequest {
        model: "gemini-2.5-flash".into(),
        messages: vec![Message::user("go")],
        tools: vec![ToolSpec::new(
            "bare",
            "Arrays without items",
            &json!({
                "type": "object",
                "properties": {
                    "groups": {"type": "array", "description": "any"},
                    "rows": {"type": "array", "items": {"type": "array"}},
                    "pair": {"type": "array", "items": [true]},
                    "maybe": {"type": ["array", "null"], "items": true},
                },
            }),
        )],
        max_tokens: 100,
        temperature: None,
        stream: false,
        rendered: Default::default(),
    };
    let wire = GeminiCodec.build_request(&endpoint(), &request).unwrap();
    assert_eq!(
        wire.body_json().unwrap()["tools"][0]["functionDeclarations"][0]["parameters"]["properties"],
        json!({
            "groups": {"type": "ARRAY", "description": "any", "items": {}},
            "rows": {"type": "ARRAY", "items": {"type": "ARRAY", "items": {}}},
            "pair": {"type": "ARRAY", "items": {}},
            "maybe": {"type": "ARRAY", "nullable": true, "items": {}},
        })
    );
}

#[test]
fn bad_model_names_are_refused() {
    let request = ChatRequest {
        model: "gemini-2.5-flash:generateContent?key=oops".into(),
        messages: vec![Message::user("hi")],
        tools: vec![],
        max_tokens: 10,
        temperature: None,
        stream: true,
        rendered: Default::default(),
    };
    assert!(matches!(
        GeminiCodec.build_request(&endpoint(), &request),
        Err(CodecError::Unencodable {
            protocol: "gemini",
            ..
        })
    ));
}

/// Gemini refuses a bad or expired key with a 400, its reason in an
/// `ErrorInfo` detail: that is the key refused (the source disabled, and
/// the next one tried), not a bad request. Another 400 is not.
#[test]
fn a_refused_key_is_told_by_its_reason() {
    let refused = br#"{"error": {"code": 400, "message": "API key not valid. Please pass a valid API key.",
      "status": "INVALID_ARGUMENT", "details": [{"@type": "type.googleapis.com/google.rpc.ErrorInfo",
      "reason": "API_KEY_INVALID", "domain": "googleapis.com"}]}}"#;
    assert!(GeminiCodec.refused_key(400, refused));
    let wrong = br#"{"error": {"code": 400, "message": "Invalid JSON payload", "status": "INVALID_ARGUMENT"}}"#;
    assert!(!GeminiCodec.refused_key(400, wrong));
    assert!(GeminiCodec.refused_key(401, b""));
}

/// A region Gemini does not serve (400 FAILED_PRECONDITION) is the
/// source's: another source may answer. Other 400s are the request's.
#[test]
fn an_unserved_region_is_the_source_s_fault() {
    let region = br#"{"error": {"code": 400, "message": "User location is not supported for the API use.", "status": "FAILED_PRECONDITION"}}"#;
    assert!(GeminiCodec.source_unavailable(400, region));
    let wrong = br#"{"error": {"code": 400, "message": "Invalid JSON payload", "status": "INVALID_ARGUMENT"}}"#;
    assert!(!GeminiCodec.source_unavailable(400, wrong));
    let unavailable = homeagent_llm::ProviderError::Unavailable {
        status: 400,
        message: "HTTP 400: FAILED_PRECONDITION: User location is not supported".into(),
    };
    assert!(unavailable.is_source_fault() && !unavailable.is_retryable());
}

#[test]
fn http_error_bodies_become_status_and_message() {
    let body = br#"{
  "error": {
    "code": 400,
    "message": "API key not valid. Please pass a valid API key.",
    "status": "INVALID_ARGUMENT"
  }
}"#;
    assert_eq!(
        GeminiCodec.error_message(400, body),
        "HTTP 400: INVALID_ARGUMENT: API key not valid. Please pass a valid API key."
    );
    let array = br#"[{"error": {"code": 429, "message": "Resource has been exhausted (e.g. check quota).", "status": "RESOURCE_EXHAUSTED"}}]"#;
    assert_eq!(
        GeminiCodec.error_message(429, array),
        "HTTP 429: RESOURCE_EXHAUSTED: Resource has been exhausted (e.g. check quota)."
    );
    assert_eq!(
        GeminiCodec.error_message(502, b"Bad Gateway"),
        "HTTP 502: Bad Gateway"
    );
    assert!(matches!(
        GeminiCodec.decode_response(b"not json"),
        Err(CodecError::MalformedResponse { .. })
    ));
}

/// Gemini 3 refuses a request whose current turn (everything after the
/// last user text) has a step whose first function call carries no thought
/// signature: "Function call is missing a thought_signature". Calls made by
/// another provider have none (a fallback to a Gemini source mid-input, a
/// session that moved), so those get the value Google documents for calls
/// Gemini did not make. Earlier turns are not checked, and a signature
/// Gemini gave is always sent back as it was.
#[test]
fn foreign_calls_of_the_current_turn_get_the_documented_signature() {
    let step = |id: &str, signature: Option<&str>| -> Vec<Message> {
        let reasoning = signature
            .map(|s| {
                vec![ReasoningPart {
                    text: String::new(),
                    metadata: Some(json!({"gemini": {"thought_signature": s, "part": "function_call", "call_index": 0}})),
                }]
            })
            .unwrap_or_default();
        vec![
            Message::Assistant(AssistantMessage {
                content: String::new(),
                reasoning,
                tool_calls: vec![
                    ToolCall {
                        id: format!("{id}a"),
                        name: "ls".into(),
                        arguments: json!({}),
                        raw_arguments: String::new(),
                    },
                    ToolCall {
                        id: format!("{id}b"),
                        name: "ls".into(),
                        arguments: json!({}),
                        raw_arguments: String::new(),
                    },
                ],
            }),
            Message::Tool(ToolMessage {
                tool_call_id: format!("{id}a"),
                name: "ls".into(),
                content: "a".into(),
                success: true,
            }),
            Message::Tool(ToolMessage {
                tool_call_id: format!("{id}b"),
                name: "ls".into(),
                content: "b".into(),
                success: true,
            }),
        ]
    };
    let mut messages = vec![Message::user("earlier")];
    messages.extend(step("old", None));
    messages.push(Message::user("now"));
    messages.extend(step("foreign", None));
    messages.extend(step("ours", Some("EjQKMgsigned==")));
    let request = ChatRequest {
        model: "gemini-3-flash-preview".into(),
        messages,
        tools: vec![],
        max_tokens: 64,
        temperature: None,
        stream: true,
        rendered: Default::default(),
    };
    let body = GeminiCodec
        .build_request(&endpoint(), &request)
        .unwrap()
        .body_json()
        .unwrap();
    let signatures: Vec<Vec<Option<String>>> = body["contents"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|c| c["role"] == "model")
        .map(|c| {
            c["parts"]
                .as_array()
                .unwrap()
                .iter()
                .map(|p| p["thoughtSignature"].as_str().map(str::to_owned))
                .collect()
        })
        .collect();
    let skip = Some("skip_thought_signature_validator".to_owned());
    assert_eq!(
        signatures,
        vec![
            vec![None, None],
            vec![skip, None],
            vec![Some("EjQKMgsigned==".to_owned()), None],
        ]
    );
}

/// Gemini refuses contents that open with the model ("Please ensure that
/// multiturn requests alternate between user and model"): a chat UI's
/// greeting, or a first user text left out for being empty. A short user
/// note opens them instead, and the model's words are sent as they are.
#[test]
fn contents_that_open_with_the_model_get_an_opening_user_note() {
    let greeting = Message::Assistant(AssistantMessage {
        content: "Hello! How can I help?".into(),
        ..AssistantMessage::default()
    });
    let contents_of = |messages: Vec<Message>| {
        let request = ChatRequest {
            model: "gemini-2.5-flash".into(),
            messages,
            tools: vec![],
            max_tokens: 64,
            temperature: None,
            stream: false,
            rendered: Default::default(),
        };
        let wire = GeminiCodec.build_request(&endpoint(), &request).unwrap();
        wire.body_json().unwrap()["contents"].take()
    };
    let expected = json!([
        {"role": "user", "parts": [{"text": homeagent_llm::codec::OPENING_NOTE}]},
        {"role": "model", "parts": [{"text": "Hello! How can I help?"}]},
        {"role": "user", "parts": [{"text": "hi"}]},
    ]);
    for first in [
        vec![],
        vec![Message::system("Be brief.")],
        vec![Message::user("")],
    ] {
        let mut messages = first.clone();
        messages.extend([greeting.clone(), Message::user("hi")]);
        assert_eq!(contents_of(messages), expected, "{first:?}");
    }
    let sent = contents_of(vec![Message::user("hi"), greeting.clone()]);
    assert_eq!(sent.as_array().unwrap().len(), 2);
    assert_eq!(sent[0]["parts"][0]["text"], "hi");
}
