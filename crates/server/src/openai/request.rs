//! Reading an OpenAI chat-completion request.
//!
//! OpenAI clients send more than the fields that matter here
//! (`temperature`, `user`, `stream_options`, …), so a blanket
//! `deny_unknown_fields` would break them. Instead every top-level field is
//! one of three kinds, checked by name before anything else:
//! - **used**: `model`, `messages`, `stream`, `stream_options`, `user`
//!   (the end user a front end names: part of a stateless conversation's
//!   fingerprint, so two users' same words never continue each other's
//!   session);
//! - **accepted and ignored**: documented sampling and bookkeeping knobs
//!   the agent's own model configuration governs (listed in [`IGNORED`]);
//! - **refused**: `tools`/`functions` (the agent runs its own tools), and
//!   settings that would change the answer's shape in a way the agent
//!   cannot honour (`n` other than 1, a non-text `response_format` or
//!   `modalities`, `logprobs` other than false, `audio`,
//!   `web_search_options`).
//!
//! Anything else is a 400 `unknown_field` naming the field and listing the
//! accepted ones, so a typo fails loudly.

use homeagent_core::{AssistantMessage, Message};
use serde::Deserialize;
use serde_json::{Map, Value};

use crate::error::ApiError;

/// The model name the agent answers as.
pub const MODEL_ID: &str = "homeagent";

const USED: &[&str] = &["model", "messages", "stream", "stream_options", "user"];

/// Documented request fields that are accepted and have no effect.
pub const IGNORED: &[&str] = &[
    "temperature",
    "top_p",
    "n",
    "max_tokens",
    "max_completion_tokens",
    "presence_penalty",
    "frequency_penalty",
    "seed",
    "stop",
    "logit_bias",
    "logprobs",
    "top_logprobs",
    "metadata",
    "store",
    "parallel_tool_calls",
    "service_tier",
    "reasoning_effort",
    "response_format",
    "tool_choice",
    "function_call",
    "safety_identifier",
    "prompt_cache_key",
    "prompt_cache_retention",
    "prompt_cache_options",
    "moderation",
    "verbosity",
    "prediction",
    // Checked in `check_shape_settings`: only their text-only forms pass.
    "modalities",
    "audio",
    "web_search_options",
    // Sampling knobs of other OpenAI-compatible servers (vLLM, llama.cpp,
    // OpenRouter) that Open WebUI and LibreChat pass through.
    "top_k",
    "min_p",
    "repetition_penalty",
    "typical_p",
];

const TOOL_FIELDS: &[&str] = &["tools", "functions"];

/// A request, checked.
#[derive(Debug, Clone, PartialEq)]
pub struct CompletionRequest {
    pub stream: bool,
    pub include_usage: bool,
    /// Every message but the last, as the store keeps them.
    pub prior: Vec<Message>,
    /// The last message: the user's input.
    pub input: String,
    /// The end user the client names (`user`), if any.
    pub user: Option<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct StreamOptions {
    #[serde(default)]
    include_usage: Option<bool>,
    /// Newer clients send it; obfuscation padding does not apply here.
    #[serde(default, rename = "include_obfuscation")]
    _include_obfuscation: Option<bool>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct WireMessage {
    role: String,
    #[serde(default)]
    content: Option<Content>,
    #[serde(default, rename = "name")]
    _name: Option<String>,
    #[serde(default)]
    tool_calls: Option<Value>,
    #[serde(default)]
    tool_call_id: Option<Value>,
    #[serde(default)]
    function_call: Option<Value>,
    #[serde(default, rename = "refusal")]
    _refusal: Option<Value>,
    #[serde(default, rename = "audio")]
    _audio: Option<Value>,
    /// On assistant messages as OpenAI returns them (URL citations).
    #[serde(default, rename = "annotations")]
    _annotations: Option<Value>,
    /// On assistant messages as DeepSeek and OpenRouter clients keep them.
    #[serde(default, rename = "reasoning_content")]
    _reasoning_content: Option<Value>,
    #[serde(default, rename = "reasoning")]
    _reasoning: Option<Value>,
}

#[derive(Deserialize)]
#[serde(untagged)]
enum Content {
    Text(String),
    Parts(Vec<Part>),
}

#[derive(Deserialize)]
struct Part {
    #[serde(rename = "type")]
    kind: String,
    #[serde(default)]
    text: Option<String>,
    /// A `refusal` part's text (assistant messages only).
    #[serde(default)]
    refusal: Option<String>,
}

fn tools_refused(field: &str) -> ApiError {
    ApiError::bad_request(
        "tools_not_supported",
        format!(
            "`{field}` is not accepted: the agent runs its own tools and answers with the final \
             message; remove `{field}` from the request"
        ),
    )
}

fn unsupported(message: String) -> ApiError {
    ApiError::bad_request("unsupported_parameter", message)
}

/// Checks and reads a request body (already parsed as JSON).
pub fn parse(body: Value) -> Result<CompletionRequest, ApiError> {
    let Value::Object(fields) = body else {
        return Err(ApiError::bad_request(
            "invalid_request",
            "the request body must be a JSON object",
        ));
    };
    for (name, value) in &fields {
        if TOOL_FIELDS.contains(&name.as_str()) {
            if value.as_array().is_some_and(Vec::is_empty) || value.is_null() {
                continue;
            }
            return Err(tools_refused(name));
        }
        if !USED.contains(&name.as_str()) && !IGNORED.contains(&name.as_str()) {
            return Err(ApiError::bad_request(
                "unknown_field",
                format!(
                    "unknown field `{name}`; accepted: {}, {} (accepted and ignored)",
                    USED.join(", "),
                    IGNORED.join(", ")
                ),
            ));
        }
    }
    check_shape_settings(&fields)?;
    match fields.get("model").and_then(Value::as_str) {
        Some(MODEL_ID) => {}
        Some(other) => return Err(model_not_found(other)),
        None => {
            return Err(ApiError::bad_request(
                "invalid_request",
                format!("`model` is required (a string); use \"{MODEL_ID}\""),
            ));
        }
    }
    let stream = match fields.get("stream") {
        None | Some(Value::Null) => false,
        Some(Value::Bool(b)) => *b,
        Some(_) => {
            return Err(ApiError::bad_request(
                "invalid_request",
                "`stream` must be true or false",
            ));
        }
    };
    let include_usage = match fields.get("stream_options") {
        None | Some(Value::Null) => false,
        Some(value) => {
            let options: StreamOptions = serde_json::from_value(value.clone()).map_err(|e| {
                ApiError::bad_request("invalid_request", format!("`stream_options`: {e}"))
            })?;
            options.include_usage.unwrap_or(false)
        }
    };
    let Some(Value::Array(raw)) = fields.get("messages") else {
        return Err(ApiError::bad_request(
            "invalid_request",
            "`messages` is required: an array of {role, content} objects ending with the user's input",
        ));
    };
    let mut messages = Vec::with_capacity(raw.len());
    for (i, value) in raw.iter().enumerate() {
        messages.push(message(i, value)?);
    }
    let Some(Message::User { content: input }) = messages.pop() else {
        return Err(ApiError::bad_request(
            "invalid_request",
            "the last message must have role `user`: it is the input the agent answers",
        ));
    };
    let user = match fields.get("user") {
        None | Some(Value::Null) => None,
        Some(Value::String(user)) => Some(user.clone()),
        Some(_) => {
            return Err(ApiError::bad_request(
                "invalid_request",
                "`user` must be a string (an id for the end user)",
            ));
        }
    };
    Ok(CompletionRequest {
        stream,
        include_usage,
        prior: messages,
        input,
        user,
    })
}

/// The refusal of a model this server does not answer as.
pub(crate) fn model_not_found(model: &str) -> ApiError {
    ApiError::new(
        axum::http::StatusCode::NOT_FOUND,
        "model_not_found",
        format!("model `{model}` does not exist; this server answers as `{MODEL_ID}`"),
    )
}

fn check_shape_settings(fields: &Map<String, Value>) -> Result<(), ApiError> {
    // A value of the wrong type is refused too: `"n": "2"` asks for
    // something, and silence would hide it.
    if let Some(n) = fields.get("n")
        && !n.is_null()
        && n.as_u64() != Some(1)
    {
        return Err(unsupported(format!(
            "`n` is {n}: the agent gives one answer per request; leave `n` out or set it to 1"
        )));
    }
    if fields
        .get("logprobs")
        .is_some_and(|v| !v.is_null() && v.as_bool() != Some(false))
    {
        return Err(unsupported(
            "`logprobs` cannot be given: the answer is the agent's, not one model sample's; \
             leave it out"
                .to_owned(),
        ));
    }
    if let Some(format) = fields.get("response_format")
        && !format.is_null()
        && format.get("type").and_then(Value::as_str) != Some("text")
    {
        return Err(unsupported(
            "`response_format` other than {\"type\": \"text\"} cannot be honoured: the agent \
             answers in text; leave it out"
                .to_owned(),
        ));
    }
    if let Some(modalities) = fields.get("modalities")
        && !modalities.is_null()
        && modalities
            .as_array()
            .is_none_or(|modalities| modalities.iter().any(|m| m.as_str() != Some("text")))
    {
        return Err(unsupported(
            "`modalities` other than [\"text\"] cannot be honoured: the agent answers in \
             text; leave it out"
                .to_owned(),
        ));
    }
    for (field, what) in [
        ("audio", "audio output"),
        ("web_search_options", "a web search by the model"),
    ] {
        if fields.get(field).is_some_and(|v| !v.is_null()) {
            return Err(unsupported(format!(
                "`{field}` asks for {what}, which the agent cannot give; leave it out"
            )));
        }
    }
    for field in ["tool_choice", "function_call"] {
        if fields.get(field).is_some_and(Value::is_object) {
            return Err(tools_refused(field));
        }
    }
    Ok(())
}

fn message(index: usize, value: &Value) -> Result<Message, ApiError> {
    let wire: WireMessage = serde_json::from_value(value.clone())
        .map_err(|e| ApiError::bad_request("invalid_request", format!("messages[{index}]: {e}")))?;
    // `null` and `[]` both say "no calls".
    let no_calls = |v: &Value| v.is_null() || v.as_array().is_some_and(Vec::is_empty);
    if wire.tool_calls.as_ref().is_some_and(|v| !no_calls(v))
        || wire.function_call.as_ref().is_some_and(|v| !v.is_null())
        || wire.tool_call_id.is_some()
    {
        return Err(ApiError::bad_request(
            "tools_not_supported",
            format!(
                "messages[{index}] carries tool calls or a tool result: the agent runs its own \
                 tools, so send only system, user and assistant text"
            ),
        ));
    }
    let text = match wire.content {
        None => String::new(),
        Some(Content::Text(text)) => text,
        Some(Content::Parts(parts)) => {
            let mut text = String::new();
            for part in parts {
                match (part.kind.as_str(), part.text) {
                    ("text", Some(piece)) => text.push_str(&piece),
                    // What the model said instead of an answer: that
                    // turn's text, as OpenAI's schema has it.
                    ("refusal", _) if wire.role == "assistant" && part.refusal.is_some() => {
                        text.push_str(part.refusal.as_deref().unwrap_or_default());
                    }
                    ("text", None) => {
                        return Err(ApiError::bad_request(
                            "unsupported_content",
                            format!(
                                "messages[{index}] has a text part without its `text` string; \
                                 give each text part one"
                            ),
                        ));
                    }
                    (kind, _) => {
                        return Err(ApiError::bad_request(
                            "unsupported_content",
                            format!(
                                "messages[{index}] has a `{kind}` content part; only text parts \
                                 are accepted"
                            ),
                        ));
                    }
                }
            }
            text
        }
    };
    match wire.role.as_str() {
        "system" | "developer" => Ok(Message::system(text)),
        "user" => Ok(Message::user(text)),
        "assistant" => Ok(Message::Assistant(AssistantMessage {
            content: text,
            ..AssistantMessage::default()
        })),
        "tool" | "function" => Err(ApiError::bad_request(
            "tools_not_supported",
            format!(
                "messages[{index}] has role `{}`: the agent runs its own tools, so tool results \
                 cannot be sent",
                wire.role
            ),
        )),
        other => Err(ApiError::bad_request(
            "invalid_request",
            format!(
                "messages[{index}] has the unknown role `{other}`; use system, developer, user \
                 or assistant"
            ),
        )),
    }
}

#[cfg(test)]
mod tests;
