//! Writing a Chat Completions request.
//!
//! The body is written straight from the borrowed [`ChatRequest`]: no
//! `serde_json::Value` tree is built, so a turn does not copy the whole
//! history and every tool schema only to write them out and drop them (in a
//! blast of 12-input sessions, building the request that way was 16 % of
//! the agent's CPU samples; 4 % after). It is written by hand with
//! [`homeagent_core::json_text`] rather than through serde's serializer:
//! the history repeats every call's arguments and result as JSON text
//! inside a string, quotes and all, and serde_json escaped them one byte
//! at a time (~9 k instructions a call in a batch of 64).

use std::borrow::Cow;

use homeagent_core::json_text::{push_array, push_string, push_value};
use homeagent_core::{AssistantMessage, Message, ToolMessage};
use serde::Serialize;
use serde::ser::{SerializeSeq, Serializer};
use serde_json::Value;
use serde_json::value::RawValue;

use super::PROTOCOL;
use super::decode::{is_reasoning_marker, recorded_extra};
use crate::codec::wire_ids::{MistralIds, WireIds};
use crate::codec::{Endpoint, JsonBody, WireRequest, temperature_json};
use crate::error::CodecError;
use crate::request::{ChatRequest, RenderShape, ToolSpec, Written};

pub(super) fn build(endpoint: &Endpoint, request: &ChatRequest) -> Result<WireRequest, CodecError> {
    let url = format!(
        "{}/chat/completions",
        endpoint.base_url.trim_end_matches('/')
    );
    let mut headers = vec![("content-type".to_owned(), "application/json".to_owned())];
    // Local servers (llama.cpp, LM Studio, vLLM) usually need no key; an
    // empty `Bearer ` header would only confuse the ones that check it.
    if let Some(key) = endpoint.api_key.as_deref().filter(|k| !k.is_empty()) {
        headers.push(("authorization".to_owned(), format!("Bearer {key}")));
    }
    let host = host_of(&endpoint.base_url);
    let openai_itself = host == "api.openai.com" || host.ends_with(".openai.azure.com");
    let ids =
        is_mistral(&host, &request.model).then(|| WireIds::of(&request.messages, &MistralIds));
    let temperature = temperature_json(PROTOCOL, request.temperature)?;
    let server = Server {
        gemini: is_gemini_host(&host),
        openai_itself,
        // Mistral's API refuses `stream_options` ("Extra inputs are not
        // permitted") and puts usage in its last chunk unasked; vLLM serving
        // a Mistral model takes it (and sends usage only when asked).
        stream_options: !host.ends_with("mistral.ai"),
        foreign_members: !(openai_itself || host.ends_with("mistral.ai")),
    };
    let body = write_body(request, server, ids.as_ref(), temperature.as_ref());
    Ok(WireRequest {
        url,
        headers,
        body: JsonBody::written(body),
    })
}

/// The lowercased host of `base_url` (no scheme, user info or port).
fn host_of(base_url: &str) -> String {
    let rest = base_url
        .split_once("://")
        .map_or(base_url, |(_, rest)| rest);
    let authority = rest.split(['/', '?', '#']).next().unwrap_or_default();
    let host = authority
        .rsplit_once('@')
        .map_or(authority, |(_, host)| host);
    host.split(':')
        .next()
        .unwrap_or_default()
        .to_ascii_lowercase()
}

/// Mistral's API, or a Mistral model on another server (vLLM in Mistral
/// mode): both refuse call ids that are not nine letters and digits (see
/// [`MistralIds`]). Any server takes such ids, so guessing from the model's
/// name costs nothing where the guess is wrong.
fn is_mistral(host: &str, model: &str) -> bool {
    const FAMILY: [&str; 7] = [
        "mistral",
        "mixtral",
        "codestral",
        "devstral",
        "magistral",
        "ministral",
        "pixtral",
    ];
    let model = model.to_ascii_lowercase();
    host.ends_with("mistral.ai") || FAMILY.iter().any(|name| model.contains(name))
}

/// Gemini's OpenAI-compatible endpoint, on the Gemini API or Vertex AI.
fn is_gemini_host(host: &str) -> bool {
    host == "generativelanguage.googleapis.com" || host.ends_with("aiplatform.googleapis.com")
}

/// Where an assistant message sits, which decides what of its metadata
/// goes back: servers check the current turn (what follows the last user
/// message) only, so nothing beyond text and calls is sent for earlier ones.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Turn {
    Earlier,
    Current,
    /// The current turn, to Gemini's compatible endpoint.
    CurrentOnGemini,
}

/// The text of the message's reasoning that came as `reasoning_content`,
/// if any did.
fn deepseek_reasoning(message: &AssistantMessage) -> Option<Cow<'_, str>> {
    let mut parts = message
        .reasoning
        .iter()
        .filter(|part| part.metadata.as_ref().is_some_and(is_reasoning_marker));
    let first = parts.next()?;
    let mut text = Cow::Borrowed(first.text.as_str());
    for part in parts {
        text.to_mut().push_str(&part.text);
    }
    Some(text)
}

/// The tool list in OpenAI's shape (Ollama takes the same), each schema
/// written from its text.
pub(crate) struct Tools<'a>(pub(crate) &'a [ToolSpec]);

impl Tools<'_> {
    pub(crate) fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

impl Serialize for Tools<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut seq = serializer.serialize_seq(Some(self.0.len()))?;
        for tool in self.0 {
            seq.serialize_element(&*tool.rendered(TOOL_SHAPE, || openai_tool(tool)))?;
        }
        seq.end()
    }
}

/// A tool in OpenAI's shape.
#[derive(Serialize)]
struct OpenaiTool<'a> {
    #[serde(rename = "type")]
    kind: &'static str,
    function: OpenaiFunction<'a>,
}

#[derive(Serialize)]
struct OpenaiFunction<'a> {
    name: &'a str,
    description: &'a str,
    parameters: &'a RawValue,
}

fn openai_tool(tool: &ToolSpec) -> OpenaiTool<'_> {
    OpenaiTool {
        kind: "function",
        function: OpenaiFunction {
            name: tool.name(),
            description: tool.description(),
            parameters: tool.parameters(),
        },
    }
}

/// The [`ToolSpec::rendered`] key of a tool in OpenAI's shape.
const TOOL_SHAPE: &str = "openai.tool";

/// What the request's server takes, as far as it differs between servers.
#[derive(Clone, Copy)]
struct Server {
    /// Gemini's OpenAI-compatible endpoint.
    gemini: bool,
    /// OpenAI's own API (or Azure's), which wants `max_completion_tokens`.
    openai_itself: bool,
    /// Whether `stream_options` may be sent.
    stream_options: bool,
    /// Whether members of other servers' making may go back on the
    /// current turn (DeepSeek's `reasoning_content`, Gemini's
    /// `extra_content`): not to servers that refuse members they do not
    /// know, which a fallback in the middle of an input would otherwise
    /// send them.
    foreign_members: bool,
}

/// The request body, written by hand ([`homeagent_core::json_text`]).
fn write_body(
    request: &ChatRequest,
    Server {
        gemini,
        openai_itself,
        stream_options,
        foreign_members,
    }: Server,
    ids: Option<&WireIds<'_>>,
    temperature: Option<&Value>,
) -> String {
    let messages = KeptMessages::take(request, gemini, ids);
    let mut out = String::with_capacity(
        messages.kept.text.len() + request.encoded_size_hint_from(messages.reused),
    );
    out.push_str("{\"model\":");
    push_string(&mut out, &request.model);
    out.push_str(",\"messages\":");
    write_messages(&mut out, request, gemini, foreign_members, ids, messages);
    if !request.tools.is_empty() {
        out.push_str(",\"tools\":");
        request
            .rendered
            .push_tools(&request.tools, &mut out, |out| {
                Tools(&request.tools).push_to(out);
            });
    }
    let limit = if openai_itself || is_openai_reasoning_model(&request.model) {
        ",\"max_completion_tokens\":"
    } else {
        ",\"max_tokens\":"
    };
    out.push_str(limit);
    out.push_str(itoa::Buffer::new().format(request.max_tokens));
    if let Some(temperature) = temperature {
        out.push_str(",\"temperature\":");
        push_value(&mut out, temperature);
    }
    out.push_str(match (request.stream, stream_options) {
        // Without it the stream carries no token counts at all; with it
        // they arrive in a last chunk whose `choices` is empty.
        (true, true) => ",\"stream\":true,\"stream_options\":{\"include_usage\":true}}",
        (true, false) => ",\"stream\":true}",
        (false, _) => ",\"stream\":false}",
    });
    out
}

/// The `messages` array. Messages before the current turn are written the
/// same way in every request, so their text is kept in the request's
/// [`RenderCache`](crate::RenderCache) and, as far as its owner declares
/// them unchanged, copied instead of written again. Not with Mistral's
/// ids: those are renamed over the whole history.
fn write_messages(
    out: &mut String,
    request: &ChatRequest,
    gemini: bool,
    foreign_members: bool,
    ids: Option<&WireIds<'_>>,
    KeptMessages {
        mut kept,
        reused,
        current_from,
        keeps,
    }: KeptMessages,
) {
    let messages = &request.messages;
    #[cfg(debug_assertions)]
    check_kept(&kept.text, &messages[..reused], gemini, current_from);
    // One buffer for the JSON text that goes into a string (arguments, an
    // error's object), reused from call to call.
    let mut scratch = String::new();
    out.push('[');
    out.push_str(&kept.text);
    for (index, message) in messages.iter().enumerate().skip(reused) {
        if index > 0 {
            out.push(',');
        }
        // Mistral refuses "user after tool" (a turn that ended at its tool
        // results: a cap, an interrupt); an assistant message bridges them.
        // Mistral's requests keep no text (`keeps` is off with its ids), so
        // the bridge never enters the cache.
        if ids.is_some()
            && matches!(message, Message::User { .. })
            && matches!(
                index.checked_sub(1).and_then(|before| messages.get(before)),
                Some(Message::Tool(_))
            )
        {
            out.push_str(MISTRAL_BRIDGE);
            out.push(',');
        }
        let start = out.len();
        let current = index >= current_from && foreign_members;
        write_message(out, message, current, gemini, ids, &mut scratch);
        if keeps && index < current_from {
            kept.push(&out[start..]);
        }
    }
    out.push(']');
    if keeps {
        request.rendered.put(kept);
    }
}

/// The assistant message written between a tool result and a user message
/// for Mistral.
const MISTRAL_BRIDGE: &str = r#"{"role":"assistant","content":"(tool results received)"}"#;

/// What a request's [`RenderCache`](crate::RenderCache) gives the writer.
struct KeptMessages {
    kept: Written,
    /// How many messages `kept` holds the text of.
    reused: usize,
    /// The current turn: what follows the last user message.
    current_from: usize,
    /// Whether the text written now is kept (not with Mistral's ids).
    keeps: bool,
}

impl KeptMessages {
    fn take(request: &ChatRequest, gemini: bool, ids: Option<&WireIds<'_>>) -> KeptMessages {
        let current_from = request
            .messages
            .iter()
            .rposition(|m| matches!(m, Message::User { .. }))
            .map_or(0, |last_user| last_user + 1);
        let shape = if gemini {
            RenderShape::OpenAiOnGemini
        } else {
            RenderShape::OpenAi
        };
        let keeps = ids.is_none();
        let limit = if keeps { current_from } else { 0 };
        let (kept, reused) = request.rendered.take(shape, limit);
        KeptMessages {
            kept,
            reused,
            current_from,
            keeps,
        }
    }
}

/// One message of the array; `current`: it is in the current turn, and
/// the server takes what the current turn carries back.
fn write_message(
    out: &mut String,
    message: &Message,
    current: bool,
    gemini: bool,
    ids: Option<&WireIds<'_>>,
    scratch: &mut String,
) {
    match message {
        Message::System { content } | Message::User { content } => {
            out.push_str("{\"role\":\"");
            out.push_str(message.role());
            out.push_str("\",\"content\":");
            push_string(out, content);
            out.push('}');
        }
        Message::Assistant(assistant) => {
            let turn = match (current, gemini) {
                (false, _) => Turn::Earlier,
                (true, false) => Turn::Current,
                (true, true) => Turn::CurrentOnGemini,
            };
            write_assistant(out, assistant, turn, ids, scratch);
        }
        Message::Tool(tool) => write_tool_result(out, tool, ids, scratch),
    }
}

/// Debug builds hold every reuse to the contract: the kept text is what
/// writing those messages now gives. A wrong
/// [`RenderCache::keep_first`](crate::RenderCache::keep_first) would send
/// stale text.
#[cfg(debug_assertions)]
fn check_kept(kept: &str, messages: &[Message], gemini: bool, current_from: usize) {
    let mut fresh = String::new();
    let mut scratch = String::new();
    for (index, message) in messages.iter().enumerate() {
        if index > 0 {
            fresh.push(',');
        }
        write_message(
            &mut fresh,
            message,
            index >= current_from,
            gemini,
            None,
            &mut scratch,
        );
    }
    assert_eq!(
        kept, fresh,
        "RenderCache::keep_first declared messages unchanged that changed"
    );
}

/// OpenAI has no input field for reasoning. DeepSeek's thinking mode wants
/// its own `reasoning_content` back on the current turn's messages (see
/// `decode::TurnMetadata`), so reasoning that came in that field is sent
/// there, in the current turn only; nothing else is. The same goes for a
/// call's `extra_content`.
fn write_assistant(
    out: &mut String,
    message: &AssistantMessage,
    turn: Turn,
    ids: Option<&WireIds<'_>>,
    scratch: &mut String,
) {
    out.push_str("{\"role\":\"assistant\",\"content\":");
    // `null` for a turn that only called tools: OpenAI's own shape for it.
    if message.content.is_empty() && !message.tool_calls.is_empty() {
        out.push_str("null");
    } else {
        push_string(out, &message.content);
    }
    if turn != Turn::Earlier
        && let Some(reasoning) = deepseek_reasoning(message)
    {
        out.push_str(",\"reasoning_content\":");
        push_string(out, &reasoning);
    }
    if !message.tool_calls.is_empty() {
        out.push_str(",\"tool_calls\":");
        let calls = message.tool_calls.iter().enumerate();
        push_array(out, calls, |out, (position, call)| {
            let recorded = match turn {
                Turn::Earlier => None,
                Turn::Current | Turn::CurrentOnGemini => {
                    recorded_extra(&message.reasoning, &call.id, position)
                }
            };
            out.push_str("{\"id\":");
            push_string(out, ids.map_or(call.id.as_str(), |ids| ids.get(&call.id)));
            out.push_str(",\"type\":\"function\",\"function\":{\"name\":");
            push_string(out, &call.name);
            // The wire wants the arguments as a JSON *string*.
            out.push_str(",\"arguments\":");
            scratch.clear();
            push_value(scratch, &call.arguments);
            push_string(out, scratch);
            out.push('}');
            match recorded {
                Some(value) => {
                    out.push_str(",\"extra_content\":");
                    push_value(out, value);
                }
                // Gemini's own first call of a step always has its
                // signature; without one the call was another provider's.
                // Gemini 3 refuses a current-turn step whose first call has
                // no thought signature ("Function call is missing a
                // thought_signature"), which is every call another provider
                // made (a fallback in the middle of an input). Google
                // documents this value for such calls; the native Gemini
                // codec sends the same one.
                None if position == 0 && turn == Turn::CurrentOnGemini => out.push_str(
                    ",\"extra_content\":{\"google\":{\"thought_signature\":\"skip_thought_signature_validator\"}}",
                ),
                None => {}
            }
            out.push('}');
        });
    }
    out.push('}');
}

fn write_tool_result(
    out: &mut String,
    tool: &ToolMessage,
    ids: Option<&WireIds<'_>>,
    scratch: &mut String,
) {
    out.push_str("{\"role\":\"tool\",\"tool_call_id\":");
    push_string(
        out,
        ids.map_or(tool.tool_call_id.as_str(), |ids| {
            ids.get(&tool.tool_call_id)
        }),
    );
    out.push_str(",\"content\":");
    if tool.success {
        push_string(out, &tool.content);
    } else {
        // OpenAI has no error flag on tool messages, so a failure is
        // framed as a JSON error object the model cannot mistake for a
        // result.
        scratch.clear();
        scratch.push_str("{\"error\":");
        push_string(scratch, &tool.content);
        scratch.push('}');
        push_string(out, scratch);
    }
    out.push('}');
}

impl Tools<'_> {
    /// Appends the list as [`Tools`]'s `Serialize` writes it.
    fn push_to(&self, out: &mut String) {
        push_array(out, self.0, |out, tool| {
            out.push_str(tool.rendered(TOOL_SHAPE, || openai_tool(tool)).get());
        });
    }
}

/// OpenAI's reasoning models (the o-series, gpt-5), by name: they refuse
/// `max_tokens` wherever the request reaches them, a gateway that passes
/// the body through included. A provider prefix (`openai/gpt-5`) is
/// allowed; `gpt-oss` and look-alikes (`o3x`) are other models.
fn is_openai_reasoning_model(model: &str) -> bool {
    let model = model.to_ascii_lowercase();
    let name = model.strip_prefix("openai/").unwrap_or(&model);
    let family = |prefix: &str| {
        name.strip_prefix(prefix)
            .is_some_and(|rest| rest.is_empty() || rest.starts_with(['-', '.', ':']))
    };
    ["o1", "o3", "o4", "gpt-5"].into_iter().any(family)
}
