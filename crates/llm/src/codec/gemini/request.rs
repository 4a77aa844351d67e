//! Building the Gemini `generateContent` request.

use std::collections::HashMap;
use std::sync::Arc;

use homeagent_core::{AssistantMessage, Message, ToolCall, ToolMessage};
use serde::Serialize;
use serde_json::value::RawValue;
use serde_json::{Map, Value, json};

use super::{PROTOCOL, SignatureTarget, schema, signature_of};
use crate::codec::{Endpoint, OPENING_NOTE, WireRequest, encoded_body, temperature_json};
use crate::error::CodecError;
use crate::request::{ChatRequest, ToolSpec};

/// The `POST .../models/{model}:streamGenerateContent?alt=sse` (or
/// `:generateContent`) request for `request`. The key travels only in the
/// `x-goog-api-key` header: a `?key=` URL ends up in proxy and server logs.
pub(super) fn build(endpoint: &Endpoint, request: &ChatRequest) -> Result<WireRequest, CodecError> {
    let model = model_path(&request.model)?;
    let base = endpoint.base_url.trim_end_matches('/');
    let url = if request.stream {
        format!("{base}/v1beta/models/{model}:streamGenerateContent?alt=sse")
    } else {
        format!("{base}/v1beta/models/{model}:generateContent")
    };
    let mut headers = Vec::with_capacity(2);
    if let Some(key) = &endpoint.api_key {
        headers.push(("x-goog-api-key".to_owned(), key.clone()));
    }
    headers.push(("content-type".to_owned(), "application/json".to_owned()));

    let mut system: Vec<&str> = Vec::new();
    let mut contents: Vec<Value> = Vec::with_capacity(request.messages.len());
    // The calls of the latest assistant turn: tool results are sent in
    // their order, and take their names from them when they lack one.
    let mut calls: &[ToolCall] = &[];
    // The current turn: everything after the last user text.
    let current_from = request
        .messages
        .iter()
        .rposition(|m| matches!(m, Message::User { content } if !content.is_empty()))
        .map_or(0, |last_user| last_user + 1);
    let mut i = 0;
    while i < request.messages.len() {
        match &request.messages[i] {
            Message::System { content } => system.push(content),
            Message::User { content } => {
                // Gemini rejects a Content with an empty text part.
                if !content.is_empty() {
                    contents.push(json!({"role": "user", "parts": [{"text": content}]}));
                }
            }
            Message::Assistant(assistant) => {
                calls = &assistant.tool_calls;
                let parts = model_parts(assistant, i >= current_from);
                if !parts.is_empty() {
                    contents.push(json!({"role": "model", "parts": parts}));
                }
            }
            Message::Tool(_) => {
                let run: Vec<&ToolMessage> = request.messages[i..]
                    .iter()
                    .map_while(|m| match m {
                        Message::Tool(tool) => Some(tool),
                        _ => None,
                    })
                    .collect();
                i += run.len();
                contents.push(json!({"role": "user", "parts": response_parts(run, calls)}));
                continue;
            }
        }
        i += 1;
    }

    if contents
        .first()
        .is_some_and(|first| first["role"] == "model")
    {
        contents.insert(
            0,
            json!({"role": "user", "parts": [{"text": OPENING_NOTE}]}),
        );
    }

    // Each declaration, its schema fitted to Gemini's subset, is written
    // once per definition: fitting a schema walks all of it.
    let declarations: Vec<Arc<RawValue>> = request
        .tools
        .iter()
        .map(|tool| tool.rendered(TOOL_SHAPE, || declaration(tool)))
        .collect();
    let mut generation = Map::new();
    generation.insert("maxOutputTokens".into(), json!(request.max_tokens));
    if let Some(temperature) = temperature_json(PROTOCOL, request.temperature)? {
        generation.insert("temperature".into(), temperature);
    }
    let body = Body {
        contents,
        generation_config: generation,
        system_instruction: (!system.is_empty())
            .then(|| json!({"parts": [{"text": system.join("\n\n")}]})),
        tools: (!declarations.is_empty()).then(|| {
            [Declarations {
                function_declarations: declarations.iter().map(|d| &**d).collect(),
            }]
        }),
    };
    Ok(WireRequest {
        url,
        headers,
        body: encoded_body(PROTOCOL, &body, request)?,
    })
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct Body<'a> {
    contents: Vec<Value>,
    generation_config: Map<String, Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    system_instruction: Option<Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    tools: Option<[Declarations<'a>; 1]>,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct Declarations<'a> {
    function_declarations: Vec<&'a RawValue>,
}

/// The [`ToolSpec::rendered`] key of a tool's `functionDeclarations` entry.
const TOOL_SHAPE: &str = "gemini.declaration";

/// A tool's `functionDeclarations` entry; no `parameters` for a tool
/// without arguments.
fn declaration(tool: &ToolSpec) -> Value {
    let mut declaration = json!({
        "name": tool.name(),
        "description": tool.description(),
    });
    let parameters = schema::sanitize(&tool.parameters_value());
    if !schema::declares_nothing(&parameters)
        && let Value::Object(map) = &mut declaration
    {
        map.insert("parameters".into(), parameters);
    }
    declaration
}

/// The model name as a URL path segment (`models/` prefix allowed).
fn model_path(model: &str) -> Result<&str, CodecError> {
    let name = model.strip_prefix("models/").unwrap_or(model);
    let safe = !name.is_empty()
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'@'));
    if safe {
        Ok(name)
    } else {
        Err(CodecError::Unencodable {
            protocol: PROTOCOL,
            detail: format!("model name {model:?} cannot be used in a Gemini URL"),
        })
    }
}

/// What Google documents as the thought signature of a function call
/// Gemini did not make: Gemini 3 refuses a step of the current turn whose
/// first call has no signature ("Function call is missing a
/// thought_signature"), and calls made by another provider (a fallback to a
/// Gemini source mid-input, a session moved over) have none.
const FOREIGN_CALL_SIGNATURE: &str = "skip_thought_signature_validator";

/// One assistant turn as ONE `model` Content: its text, then every call
/// (parallel calls split over several Contents are rejected or
/// misattributed), each part carrying back the thought signature it came
/// with (see [`super::SignatureTarget`]). In the `current` turn, a first
/// call without one gets [`FOREIGN_CALL_SIGNATURE`].
fn model_parts(message: &AssistantMessage, current: bool) -> Vec<Value> {
    let mut text_signature: Option<&str> = None;
    let mut call_signatures: HashMap<usize, &str> = HashMap::new();
    for part in &message.reasoning {
        match part.metadata.as_ref().and_then(signature_of) {
            Some((signature, SignatureTarget::Text)) => text_signature = Some(signature),
            Some((signature, SignatureTarget::FunctionCall(position))) => {
                call_signatures.insert(position, signature);
            }
            None => {}
        }
    }
    let mut parts = Vec::with_capacity(1 + message.tool_calls.len());
    if !message.content.is_empty() || text_signature.is_some() {
        let mut part = json!({"text": message.content});
        add_signature(&mut part, text_signature);
        parts.push(part);
    }
    for (position, call) in message.tool_calls.iter().enumerate() {
        let args = match &call.arguments {
            Value::Object(_) => call.arguments.clone(),
            _ => Value::Object(Map::new()),
        };
        let mut function_call = json!({"name": call.name, "args": args});
        if !call.id.is_empty()
            && let Value::Object(map) = &mut function_call
        {
            map.insert("id".into(), json!(call.id));
        }
        let mut part = json!({"functionCall": function_call});
        let signature = match call_signatures.get(&position) {
            Some(signature) => Some(*signature),
            None if current && position == 0 => Some(FOREIGN_CALL_SIGNATURE),
            None => None,
        };
        add_signature(&mut part, signature);
        parts.push(part);
    }
    parts
}

fn add_signature(part: &mut Value, signature: Option<&str>) {
    if let (Some(signature), Value::Object(map)) = (signature, part) {
        map.insert("thoughtSignature".into(), json!(signature));
    }
}

/// Consecutive tool results as the parts of ONE `user` Content, in the
/// order of the calls they answer (results arrive in completion order;
/// Gemini pairs them positionally when ids are absent).
fn response_parts(mut run: Vec<&ToolMessage>, calls: &[ToolCall]) -> Vec<Value> {
    let position = |tool: &ToolMessage| {
        calls
            .iter()
            .position(|c| c.id == tool.tool_call_id)
            .unwrap_or(usize::MAX)
    };
    run.sort_by_key(|tool| position(tool));
    run.into_iter()
        .map(|tool| {
            let name = if tool.name.is_empty() {
                calls
                    .iter()
                    .find(|c| c.id == tool.tool_call_id)
                    .map_or("", |c| c.name.as_str())
            } else {
                tool.name.as_str()
            };
            let mut response = json!({"name": name, "response": response_value(tool)});
            if !tool.tool_call_id.is_empty()
                && let Value::Object(map) = &mut response
            {
                map.insert("id".into(), json!(tool.tool_call_id));
            }
            json!({"functionResponse": response})
        })
        .collect()
}

/// `response` must be an object: a failure goes in `error`, a success is
/// the content itself when it is a JSON object, `{"result": content}` when
/// it is not.
fn response_value(tool: &ToolMessage) -> Value {
    if !tool.success {
        return json!({"error": tool.content});
    }
    match serde_json::from_str::<Value>(&tool.content) {
        Ok(object @ Value::Object(_)) => object,
        _ => json!({"result": tool.content}),
    }
}
