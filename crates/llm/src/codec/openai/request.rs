//! Writing a Chat Completions request.
//!
//! The body is serialized straight from the borrowed [`ChatRequest`]: no
//! `serde_json::Value` tree is built, so a turn no longer copies the whole
//! history and every tool schema only to write them out and drop them (in a
//! blast of 12-input sessions, building the request that way was 16 % of
//! the agent's CPU samples; 4 % after).

use std::borrow::Cow;

use homeagent_core::{AssistantMessage, Message, ToolCall, ToolMessage};
use serde::Serialize;
use serde::ser::{Error as _, SerializeSeq, Serializer};
use serde_json::Value;
use serde_json::value::RawValue;

use super::PROTOCOL;
use super::decode::{is_reasoning_marker, recorded_extra};
use crate::codec::wire_ids::{MistralIds, WireIds};
use crate::codec::{Endpoint, WireRequest, encoded_body, temperature_json};
use crate::error::CodecError;
use crate::request::{ChatRequest, ToolSpec};

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
    let body = Body {
        model: &request.model,
        messages: Messages {
            messages: &request.messages,
            gemini: is_gemini_host(&host),
            ids: ids.as_ref(),
        },
        tools: Tools(&request.tools),
        max_tokens: (!openai_itself).then_some(request.max_tokens),
        max_completion_tokens: openai_itself.then_some(request.max_tokens),
        temperature: temperature_json(PROTOCOL, request.temperature)?,
        stream: request.stream,
        // Without it the stream carries no token counts at all; with it they
        // arrive in a last chunk whose `choices` is empty.
        stream_options: request.stream.then_some(StreamOptions {
            include_usage: true,
        }),
    };
    Ok(WireRequest {
        url,
        headers,
        body: encoded_body(PROTOCOL, &body, request)?,
    })
}

#[derive(Serialize)]
struct Body<'a> {
    model: &'a str,
    messages: Messages<'a>,
    #[serde(skip_serializing_if = "Tools::is_empty")]
    tools: Tools<'a>,
    #[serde(skip_serializing_if = "Option::is_none")]
    max_tokens: Option<u32>,
    /// OpenAI's name for the limit, instead of `max_tokens`: OpenAI's own
    /// API and Azure OpenAI refuse `max_tokens` for their reasoning models
    /// (gpt-5, the o-series: "Use 'max_completion_tokens' instead") and
    /// take this for every model; the other servers speaking the protocol
    /// (vLLM, llama.cpp, DeepSeek, Groq, ...) know `max_tokens`.
    #[serde(skip_serializing_if = "Option::is_none")]
    max_completion_tokens: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    temperature: Option<Value>,
    stream: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    stream_options: Option<StreamOptions>,
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

#[derive(Serialize)]
struct StreamOptions {
    include_usage: bool,
}

struct Messages<'a> {
    messages: &'a [Message],
    /// Whether the server is Gemini's (see [`CallExtra::SkipValidator`]).
    gemini: bool,
    /// The ids to send, where the wire restricts them (Mistral).
    ids: Option<&'a WireIds<'a>>,
}

impl Serialize for Messages<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut seq = serializer.serialize_seq(Some(self.messages.len()))?;
        // The current turn: what follows the last user message.
        let current_from = self
            .messages
            .iter()
            .rposition(|m| matches!(m, Message::User { .. }))
            .map_or(0, |last_user| last_user + 1);
        for (index, message) in self.messages.iter().enumerate() {
            match message {
                Message::System { content } => seq.serialize_element(&Plain {
                    role: "system",
                    content,
                })?,
                Message::User { content } => seq.serialize_element(&Plain {
                    role: "user",
                    content,
                })?,
                Message::Assistant(assistant) => {
                    let turn = match (index >= current_from, self.gemini) {
                        (false, _) => Turn::Earlier,
                        (true, false) => Turn::Current,
                        (true, true) => Turn::CurrentOnGemini,
                    };
                    seq.serialize_element(&Assistant::new(assistant, turn, self.ids))?;
                }
                Message::Tool(tool) => seq.serialize_element(&ToolResult::new(tool, self.ids))?,
            }
        }
        seq.end()
    }
}

#[derive(Serialize)]
struct Plain<'a> {
    role: &'static str,
    content: &'a str,
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

/// OpenAI has no input field for reasoning. DeepSeek's thinking mode wants
/// its own `reasoning_content` back on the current turn's messages (see
/// `decode::TurnMetadata`), so reasoning that came in that field is sent
/// there, in the current turn only; nothing else is. The same goes for a
/// call's `extra_content`.
#[derive(Serialize)]
struct Assistant<'a> {
    role: &'static str,
    /// `null` for a turn that only called tools: OpenAI's own shape for it.
    content: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    reasoning_content: Option<Cow<'a, str>>,
    #[serde(skip_serializing_if = "WireCalls::is_empty")]
    tool_calls: WireCalls<'a>,
}

impl<'a> Assistant<'a> {
    fn new(message: &'a AssistantMessage, turn: Turn, ids: Option<&'a WireIds<'a>>) -> Self {
        let only_calls = message.content.is_empty() && !message.tool_calls.is_empty();
        let current = turn != Turn::Earlier;
        Assistant {
            role: "assistant",
            content: (!only_calls).then_some(message.content.as_str()),
            reasoning_content: current.then(|| deepseek_reasoning(message)).flatten(),
            tool_calls: WireCalls { message, turn, ids },
        }
    }
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

/// A message's calls, each with the `extra_content` it came with when the
/// message is in the current turn.
struct WireCalls<'a> {
    message: &'a AssistantMessage,
    turn: Turn,
    ids: Option<&'a WireIds<'a>>,
}

impl WireCalls<'_> {
    fn is_empty(&self) -> bool {
        self.message.tool_calls.is_empty()
    }
}

impl Serialize for WireCalls<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let calls = &self.message.tool_calls;
        let mut seq = serializer.serialize_seq(Some(calls.len()))?;
        for (position, call) in calls.iter().enumerate() {
            let recorded = match self.turn {
                Turn::Earlier => None,
                Turn::Current | Turn::CurrentOnGemini => {
                    recorded_extra(&self.message.reasoning, &call.id, position)
                }
            };
            let extra = match recorded {
                Some(value) => Some(CallExtra::Recorded(value)),
                // Gemini's own first call of a step always has its
                // signature; without one the call was another provider's.
                None if position == 0 && self.turn == Turn::CurrentOnGemini => {
                    Some(CallExtra::SkipValidator)
                }
                None => None,
            };
            let id = self.ids.map_or(call.id.as_str(), |ids| ids.get(&call.id));
            seq.serialize_element(&WireCall { call, id, extra })?;
        }
        seq.end()
    }
}

/// A call's `extra_content` on the wire.
enum CallExtra<'a> {
    /// What the call came with, verbatim.
    Recorded(&'a Value),
    /// Gemini 3 refuses a current-turn step whose first call has no thought
    /// signature ("Function call is missing a thought_signature"), which is
    /// every call another provider made (a fallback in the middle of an
    /// input). Google documents this value for such calls; the native
    /// Gemini codec sends the same one.
    SkipValidator,
}

impl Serialize for CallExtra<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        #[derive(Serialize)]
        struct Google {
            google: Signature,
        }
        #[derive(Serialize)]
        struct Signature {
            thought_signature: &'static str,
        }
        match self {
            CallExtra::Recorded(value) => value.serialize(serializer),
            CallExtra::SkipValidator => Google {
                google: Signature {
                    thought_signature: "skip_thought_signature_validator",
                },
            }
            .serialize(serializer),
        }
    }
}

struct WireCall<'a> {
    call: &'a ToolCall,
    /// The id sent, the call's own unless the wire restricts ids.
    id: &'a str,
    extra: Option<CallExtra<'a>>,
}

impl Serialize for WireCall<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        #[derive(Serialize)]
        struct Call<'a> {
            id: &'a str,
            #[serde(rename = "type")]
            kind: &'static str,
            function: Function<'a>,
            #[serde(skip_serializing_if = "Option::is_none")]
            extra_content: Option<&'a CallExtra<'a>>,
        }
        #[derive(Serialize)]
        struct Function<'a> {
            name: &'a str,
            /// The wire wants the arguments as a JSON *string*.
            arguments: String,
        }
        let call = self.call;
        let arguments = serde_json::to_string(&call.arguments)
            .map_err(|e| S::Error::custom(format!("arguments of tool call {}: {e}", call.id)))?;
        Call {
            id: self.id,
            kind: "function",
            function: Function {
                name: &call.name,
                arguments,
            },
            extra_content: self.extra.as_ref(),
        }
        .serialize(serializer)
    }
}

/// OpenAI has no error flag on tool messages, so a failure is framed as a
/// JSON error object the model cannot mistake for a result.
#[derive(Serialize)]
struct ToolResult<'a> {
    role: &'static str,
    tool_call_id: &'a str,
    content: Cow<'a, str>,
}

impl<'a> ToolResult<'a> {
    fn new(tool: &'a ToolMessage, ids: Option<&'a WireIds<'a>>) -> Self {
        let content = if tool.success {
            Cow::Borrowed(tool.content.as_str())
        } else {
            Cow::Owned(serde_json::json!({"error": tool.content}).to_string())
        };
        ToolResult {
            role: "tool",
            tool_call_id: ids.map_or(tool.tool_call_id.as_str(), |ids| {
                ids.get(&tool.tool_call_id)
            }),
            content,
        }
    }
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
        #[derive(Serialize)]
        struct Tool<'a> {
            #[serde(rename = "type")]
            kind: &'static str,
            function: Function<'a>,
        }
        #[derive(Serialize)]
        struct Function<'a> {
            name: &'a str,
            description: &'a str,
            parameters: &'a RawValue,
        }
        let mut seq = serializer.serialize_seq(Some(self.0.len()))?;
        for tool in self.0 {
            let rendered = tool.rendered(TOOL_SHAPE, || Tool {
                kind: "function",
                function: Function {
                    name: tool.name(),
                    description: tool.description(),
                    parameters: tool.parameters(),
                },
            });
            seq.serialize_element(&*rendered)?;
        }
        seq.end()
    }
}

/// The [`ToolSpec::rendered`] key of a tool in OpenAI's shape.
const TOOL_SHAPE: &str = "openai.tool";
