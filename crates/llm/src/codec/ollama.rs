//! The Ollama native wire: `POST {base_url}/api/chat`, NDJSON streaming.
//!
//! # The response
//!
//! Every line of a streamed body is one JSON object shaped like the whole
//! (non-streamed) response:
//!
//! ```json
//! {"model":"qwen3","created_at":"...","message":{"role":"assistant","content":"Hel","thinking":""},"done":false}
//! {"model":"qwen3","created_at":"...","message":{"role":"assistant","content":"","tool_calls":[{"function":{"name":"get_temperature","arguments":{"city":"Paris"}}}]},"done":false}
//! {"model":"qwen3","created_at":"...","message":{"role":"assistant","content":""},"done":true,"done_reason":"stop","prompt_eval_count":26,"eval_count":12}
//! ```
//!
//! Tool calls arrive *whole*: each call comes once, with its name and its
//! arguments as a JSON object, in a line that may or may not be the final
//! one (servers since mid-2025 send them in a `done: false` line; older ones
//! and some proxies put them in the `done: true` line). There is no index,
//! so the codec numbers the calls by their position in the turn, counting
//! across lines: two calls in one line and a third in the next get stream
//! indexes 0, 1 and 2. Newer servers send an `id` per call; older ones do
//! not, and the assembler then assigns one.
//!
//! # Tool calls written as text
//!
//! Before Ollama 0.4.6 a streamed turn carried its tool calls as JSON *text*
//! in `message.content` (ollama/ollama#5796, ollama/ollama-python#279), and
//! models without a tool template still do it. HomeAgent never turns text
//! into a tool call: a call is something the server marked as one, and text
//! that merely looks like JSON may be a quotation, an example, or a prompt
//! injection. The decoder only *notices* such text (see
//! [`looks_like_textual_tool_call`]): it logs a warning naming the likely
//! cause and counts it in [`OllamaDecoder::suspected_textual_calls`], and
//! the text stays text.
//!
//! # The request
//!
//! `{model, messages, tools?, stream, options: {num_predict, temperature?}}`.
//! Assistant messages carry `tool_calls: [{id, function: {index, name,
//! arguments: <object>}}]` and their reasoning as `thinking`; tool results go
//! back as `{role: "tool", content, tool_name, tool_call_id}` (Ollama's docs
//! name the field `tool_name`; servers that pair by id read `tool_call_id`,
//! older ones ignore it). A failed result's content is the JSON object text
//! `{"error": <content>}`, since the wire has no error flag.

use homeagent_core::{
    AssistantMessage, Message, StreamEvent, ToolCallFragment, ToolMessage, Usage,
};
use serde::Serialize;
use serde_json::{Map, Value, json};

use super::openai::Tools;
use super::{
    Endpoint, Flow, Frame, Framing, Protocol, StreamDecoder, WireCodec, WireRequest, encoded_body,
    frame_json, raw_argument_text, temperature_json, typed_frame,
};
use crate::error::CodecError;
use crate::request::ChatRequest;

mod wire;

const PROTOCOL: &str = "ollama";

#[derive(Serialize)]
struct OllamaBody<'a> {
    model: &'a str,
    messages: Vec<Value>,
    #[serde(skip_serializing_if = "Tools::is_empty")]
    tools: Tools<'a>,
    stream: bool,
    options: Map<String, Value>,
}

/// Finish reason of a `done: true` line without `done_reason` (servers
/// before 0.1.33 never sent one).
const DEFAULT_DONE_REASON: &str = "stop";

/// Text longer than this is not examined for a textual tool call: a call
/// written as text is short, and parsing megabytes of prose at the end of
/// every turn would cost more than the hint is worth.
const TEXTUAL_CALL_SCAN_LIMIT: usize = 64 * 1024;

/// How many bytes of an error body [`WireCodec::error_message`] quotes.
const ERROR_EXCERPT_BYTES: usize = 200;

/// The Ollama codec.
#[derive(Debug, Clone, Copy, Default)]
pub struct OllamaCodec;

impl WireCodec for OllamaCodec {
    fn protocol(&self) -> Protocol {
        Protocol::Ollama
    }

    fn build_request(
        &self,
        endpoint: &Endpoint,
        request: &ChatRequest,
    ) -> Result<WireRequest, CodecError> {
        let url = format!("{}/api/chat", endpoint.base_url.trim_end_matches('/'));
        let mut headers = vec![("content-type".to_owned(), "application/json".to_owned())];
        if let Some(key) = endpoint.api_key.as_deref().filter(|k| !k.is_empty()) {
            // A local Ollama needs no key; one behind a proxy or ollama.com does.
            headers.push(("authorization".to_owned(), format!("Bearer {key}")));
        }
        let mut options = Map::new();
        options.insert("num_predict".into(), json!(request.max_tokens));
        if let Some(temperature) = temperature_json(PROTOCOL, request.temperature)? {
            options.insert("temperature".into(), temperature);
        }
        let body = OllamaBody {
            model: &request.model,
            messages: request.messages.iter().map(encode_message).collect(),
            // Ollama takes OpenAI's tool shape.
            tools: Tools(&request.tools),
            // Always explicit: Ollama streams when `stream` is absent.
            stream: request.stream,
            options,
        };
        Ok(WireRequest {
            url,
            headers,
            body: encoded_body(PROTOCOL, &body, request)?,
        })
    }

    fn framing(&self) -> Framing {
        Framing::Ndjson
    }

    fn stream_decoder(&self) -> Box<dyn StreamDecoder> {
        Box::new(OllamaDecoder::new())
    }

    fn decode_response(&self, body: &[u8]) -> Result<Vec<StreamEvent>, CodecError> {
        // A whole response is the same object as a stream's lines, so it goes
        // through the same decoder (typed path first, as for a line):
        // streamed and whole turns cannot differ.
        let mut decoder = OllamaDecoder::new();
        let mut out = Vec::new();
        if let Ok(line) = serde_json::from_slice::<wire::Line>(body)
            && line.error.is_none()
        {
            decoder.decode_typed(line, &mut out);
            return Ok(out);
        }
        let value: Value =
            serde_json::from_slice(body).map_err(|err| CodecError::MalformedResponse {
                protocol: PROTOCOL,
                detail: format!("the response body is not JSON: {err}"),
            })?;
        decoder.decode_value(&value, &mut out)?;
        Ok(out)
    }

    fn error_message(&self, status: u16, body: &[u8]) -> String {
        // Ollama's error body is `{"error": "model \"x\" not found, try pulling it first"}`.
        if let Ok(value) = serde_json::from_slice::<Value>(body)
            && let Some(message) = error_text(&value)
        {
            return format!("HTTP {status}: {message}");
        }
        let text = String::from_utf8_lossy(body);
        let text = text.trim();
        if text.is_empty() {
            return format!("HTTP {status}");
        }
        let end = text.floor_char_boundary(ERROR_EXCERPT_BYTES);
        format!("HTTP {status}: {}", &text[..end])
    }
}

fn encode_message(message: &Message) -> Value {
    match message {
        Message::System { content } => json!({"role": "system", "content": content}),
        Message::User { content } => json!({"role": "user", "content": content}),
        Message::Assistant(assistant) => encode_assistant(assistant),
        Message::Tool(tool) => encode_tool_result(tool),
    }
}

fn encode_assistant(assistant: &AssistantMessage) -> Value {
    let mut out = Map::new();
    out.insert("role".into(), json!("assistant"));
    out.insert("content".into(), json!(assistant.content));
    // Ollama's thinking carries no signature. Reasoning that another
    // provider signed is that provider's to replay; sending its text here
    // would present a foreign trace as this model's own.
    let thinking: String = assistant
        .reasoning
        .iter()
        .filter(|part| part.metadata.as_ref().is_none_or(is_own_metadata))
        .map(|part| part.text.as_str())
        .collect();
    if !thinking.is_empty() {
        out.insert("thinking".into(), json!(thinking));
    }
    if !assistant.tool_calls.is_empty() {
        let calls = assistant
            .tool_calls
            .iter()
            .enumerate()
            .map(|(index, call)| {
                // Ollama wants the arguments as an object, never as text.
                let arguments = match &call.arguments {
                    Value::Object(_) => call.arguments.clone(),
                    _ => json!({}),
                };
                json!({"id": call.id, "function": {
                    "index": index, "name": call.name, "arguments": arguments,
                }})
            })
            .collect();
        out.insert("tool_calls".into(), Value::Array(calls));
    }
    Value::Object(out)
}

/// Metadata this codec could have written: none of another namespace.
fn is_own_metadata(metadata: &Value) -> bool {
    match metadata {
        Value::Object(map) => map.keys().all(|k| k == PROTOCOL),
        Value::Null => true,
        _ => false,
    }
}

fn encode_tool_result(tool: &ToolMessage) -> Value {
    let content = if tool.success {
        tool.content.clone()
    } else {
        json!({"error": tool.content}).to_string()
    };
    json!({
        "role": "tool",
        "content": content,
        "tool_name": tool.name,
        "tool_call_id": tool.tool_call_id,
    })
}

/// The provider's message from an `error` field: a string, or an object
/// with a `message`.
fn error_text(value: &Value) -> Option<String> {
    match value.get("error")? {
        Value::String(s) => Some(s.clone()),
        Value::Object(map) => map
            .get("message")
            .and_then(Value::as_str)
            .map(str::to_owned)
            .or_else(|| Some(Value::Object(map.clone()).to_string())),
        Value::Null => None,
        other => Some(other.to_string()),
    }
}

/// Decodes one streamed Ollama response, line by line.
#[derive(Debug, Default)]
pub struct OllamaDecoder {
    /// Position of the next tool call in the turn, across lines.
    next_index: u32,
    skipped: u64,
    saw_calls: bool,
    /// The turn's text so far, kept (up to the scan limit) only to notice a
    /// tool call written as text when the turn ends.
    text: String,
    text_overflowed: bool,
    suspected_textual_calls: u64,
}

impl OllamaDecoder {
    pub fn new() -> Self {
        Self::default()
    }

    /// Turns that ended with text that looks like a tool call and no real
    /// call: 0 or 1 per decoder. Such text is never executed.
    pub fn suspected_textual_calls(&self) -> u64 {
        self.suspected_textual_calls
    }

    /// The fast path: a line that fits [`wire::Line`]. Same events, in the
    /// same order, as [`OllamaDecoder::decode_value`] gives for it, except
    /// that an object of arguments is the wire's own text rather than a
    /// re-serialised copy (same JSON, possibly other key order and spacing).
    fn decode_typed(&mut self, line: wire::Line, out: &mut Vec<StreamEvent>) -> Flow {
        if let Some(message) = line.message {
            self.message_text(message.thinking, message.content, out);
            for call in message.tool_calls.into_iter().flatten() {
                let (name, arguments) = match call.function {
                    Some(function) => (function.name, function.arguments),
                    None => (None, None),
                };
                let raw_arguments = arguments.map(raw_argument_text).unwrap_or_default();
                self.push_call(call.id, name, raw_arguments, out);
            }
        }
        if line.done != Some(true) {
            return Flow::Continue;
        }
        let counts = (line.prompt_eval_count, line.eval_count);
        self.finish(line.done_reason.as_deref(), counts, out)
    }

    fn decode_value(
        &mut self,
        value: &Value,
        out: &mut Vec<StreamEvent>,
    ) -> Result<Flow, CodecError> {
        if let Some(message) = error_text(value) {
            // Ollama's errors are bare strings with no kind to go by.
            return Err(CodecError::ProviderReported {
                protocol: PROTOCOL,
                message,
                transient: false,
            });
        }
        if let Some(message) = value.get("message") {
            self.decode_message(message, out);
        }
        if value.get("done").and_then(Value::as_bool) != Some(true) {
            return Ok(Flow::Continue);
        }
        let reason = value.get("done_reason").and_then(Value::as_str);
        let count = |key: &str| value.get(key).and_then(Value::as_u64);
        let counts = (count("prompt_eval_count"), count("eval_count"));
        Ok(self.finish(reason, counts, out))
    }

    /// The `done: true` line: finish reason, usage, and the end-of-turn check.
    fn finish(
        &mut self,
        reason: Option<&str>,
        (prompt, completion): (Option<u64>, Option<u64>),
        out: &mut Vec<StreamEvent>,
    ) -> Flow {
        let reason = reason
            .filter(|r| !r.is_empty())
            .unwrap_or(DEFAULT_DONE_REASON);
        out.push(StreamEvent::Finish {
            reason: reason.to_owned(),
        });
        if prompt.is_some() || completion.is_some() {
            let (prompt_tokens, completion_tokens) = (prompt.unwrap_or(0), completion.unwrap_or(0));
            out.push(StreamEvent::Usage(Usage {
                prompt_tokens,
                completion_tokens,
                total_tokens: prompt_tokens.saturating_add(completion_tokens),
            }));
        }
        self.check_textual_call();
        Flow::Done
    }

    fn decode_message(&mut self, message: &Value, out: &mut Vec<StreamEvent>) {
        let text_of = |key: &str| message.get(key).and_then(Value::as_str).map(str::to_owned);
        self.message_text(text_of("thinking"), text_of("content"), out);
        let Some(calls) = message.get("tool_calls").and_then(Value::as_array) else {
            return;
        };
        for call in calls {
            let function = call.get("function").unwrap_or(&Value::Null);
            let raw_arguments = match function.get("arguments") {
                Some(Value::String(text)) => text.clone(),
                None | Some(Value::Null) => String::new(),
                Some(other) => other.to_string(),
            };
            let string = |v: Option<&Value>| v.and_then(Value::as_str).map(str::to_owned);
            let (id, name) = (string(call.get("id")), string(function.get("name")));
            self.push_call(id, name, raw_arguments, out);
        }
    }

    /// A message's reasoning, then its text (kept for the end-of-turn check).
    fn message_text(
        &mut self,
        thinking: Option<String>,
        content: Option<String>,
        out: &mut Vec<StreamEvent>,
    ) {
        if let Some(text) = thinking.filter(|s| !s.is_empty()) {
            out.push(StreamEvent::ReasoningDelta { text });
        }
        if let Some(content) = content.filter(|s| !s.is_empty()) {
            if !self.text_overflowed {
                if self.text.len() + content.len() > TEXTUAL_CALL_SCAN_LIMIT {
                    self.text_overflowed = true;
                    self.text = String::new();
                } else {
                    self.text.push_str(&content);
                }
            }
            out.push(StreamEvent::TextDelta { text: content });
        }
    }

    /// One whole call, at the next position of the turn.
    fn push_call(
        &mut self,
        id: Option<String>,
        name: Option<String>,
        raw_arguments: String,
        out: &mut Vec<StreamEvent>,
    ) {
        out.push(StreamEvent::ToolCall(ToolCallFragment {
            stream_index: Some(self.next_index),
            id: id.filter(|s| !s.is_empty()),
            name: name.filter(|s| !s.is_empty()),
            raw_arguments,
        }));
        self.next_index = self.next_index.saturating_add(1);
        self.saw_calls = true;
    }

    fn check_textual_call(&mut self) {
        if self.saw_calls || self.text_overflowed || !looks_like_textual_tool_call(&self.text) {
            return;
        }
        self.suspected_textual_calls += 1;
        tracing::warn!(
            text_bytes = self.text.len(),
            "the Ollama reply is a tool call written as text, not a tool call; it is shown as text and \
             not executed. The model's template may lack tool support, or the server predates \
             Ollama 0.4.6 (streamed tool calls)"
        );
    }
}

impl StreamDecoder for OllamaDecoder {
    fn decode(&mut self, frame: &Frame, out: &mut Vec<StreamEvent>) -> Result<Flow, CodecError> {
        if let Some(line) = typed_frame::<wire::Line>(frame.data.trim())
            && line.error.is_none()
        {
            return Ok(self.decode_typed(line, out));
        }
        // An error line, a member of an odd type, or not JSON at all.
        match frame_json(frame, &mut self.skipped) {
            Some(value) => self.decode_value(&value, out),
            None => Ok(Flow::Continue),
        }
    }

    fn skipped_frames(&self) -> u64 {
        self.skipped
    }
}

/// Whether a turn's whole text is a tool call written out as JSON:
/// `{"name": "...", "arguments"|"parameters": {...}}`, an array of those, or
/// either inside a Markdown code fence. Used for a diagnostic only.
pub fn looks_like_textual_tool_call(text: &str) -> bool {
    let mut body = text.trim();
    if let Some(fenced) = body.strip_prefix("```") {
        let fenced = fenced.strip_prefix("json").unwrap_or(fenced);
        body = fenced
            .trim_end()
            .strip_suffix("```")
            .unwrap_or(fenced)
            .trim();
    }
    if !(body.starts_with('{') || body.starts_with('[')) {
        return false;
    }
    let is_call = |v: &Value| {
        v.get("name").and_then(Value::as_str).is_some()
            && ["arguments", "parameters"]
                .iter()
                .any(|k| v.get(*k).is_some_and(Value::is_object))
    };
    match serde_json::from_str::<Value>(body) {
        Ok(Value::Array(items)) => !items.is_empty() && items.iter().all(is_call),
        Ok(value) => is_call(&value),
        Err(_) => false,
    }
}

#[cfg(test)]
#[path = "ollama/parity_tests.rs"]
mod parity_tests;
