//! OpenAI Chat Completions: `POST /v1/chat/completions`.
//!
//! Streamed as SSE `chat.completion.chunk`s: one per text piece and one per
//! tool-call fragment (`tool_calls[].index` = the call's position, `id`,
//! `type` and `function.name` only on a call's first fragment), then a chunk
//! with the `finish_reason`, a usage chunk with empty `choices` when the
//! request set `stream_options.include_usage`, and `data: [DONE]`.

use std::borrow::Cow;

use axum::body::Bytes;
use homeagent_core::{AssistantMessage, Message, StreamEvent, ToolCall, ToolMessage};
use serde::Serialize;
use serde_json::{Value, json};

use super::members::ToolsMemo;
use super::{Collected, Ctx, ParsedRequest, collect, is_error_payload, sse, str_field, text_of};

/// Reads a request body: typed when it has the usual shape (the hot path:
/// every request of a blast re-sends its session's whole history), else
/// as a `Value`, whose reading is the reference for every odd case.
pub(crate) fn parse_body(body: &[u8], tools: &ToolsMemo) -> Result<ParsedRequest, String> {
    if let Some(parsed) = parse_typed(body, tools) {
        return Ok(parsed);
    }
    let value = serde_json::from_slice::<Value>(body)
        .map_err(|err| format!("the request body is not JSON: {err}"))?;
    parse(&value)
}

pub(crate) fn parse(body: &Value) -> Result<ParsedRequest, String> {
    let items = body
        .get("messages")
        .and_then(Value::as_array)
        .ok_or("the body has no \"messages\" array")?;
    let mut messages = Vec::with_capacity(items.len());
    for item in items {
        let calls = item
            .get("tool_calls")
            .and_then(Value::as_array)
            .map(|calls| {
                calls
                    .iter()
                    .map(|call| {
                        let function = call.get("function").unwrap_or(&Value::Null);
                        WireCall {
                            id: str_field(call, "id"),
                            name: str_field(function, "name"),
                            arguments: Cow::Borrowed(str_field(function, "arguments")),
                        }
                    })
                    .collect()
            })
            .unwrap_or_default();
        let item = WireMessage {
            role: str_field(item, "role"),
            content: text_of(item.get("content")),
            calls,
            tool_call_id: str_field(item, "tool_call_id"),
        };
        if let Err(role) = item.push_to(&mut messages) {
            return Err(format!("unknown message role {role:?}"));
        }
    }
    Ok(ParsedRequest::new(
        str_field(body, "model").to_owned(),
        messages,
        body.get("stream").and_then(Value::as_bool).unwrap_or(false),
        body.pointer("/stream_options/include_usage")
            .and_then(Value::as_bool)
            .unwrap_or(false),
    ))
}

/// One message as either reading finds it, before it becomes a [`Message`].
struct WireMessage<'a> {
    role: &'a str,
    content: String,
    calls: Vec<WireCall<'a>>,
    tool_call_id: &'a str,
}

struct WireCall<'a> {
    id: &'a str,
    name: &'a str,
    arguments: Cow<'a, str>,
}

impl WireMessage<'_> {
    /// Appends the message; an unknown role is handed back.
    fn push_to(self, messages: &mut Vec<Message>) -> Result<(), String> {
        let content = self.content;
        match self.role {
            "system" | "developer" => messages.push(Message::System { content }),
            "user" => messages.push(Message::User { content }),
            "assistant" => messages.push(Message::Assistant(AssistantMessage {
                content,
                reasoning: Vec::new(),
                tool_calls: self.calls.into_iter().map(WireCall::into_call).collect(),
            })),
            "tool" => messages.push(Message::Tool(ToolMessage {
                name: name_of_call(messages, self.tool_call_id),
                tool_call_id: self.tool_call_id.to_owned(),
                success: !is_error_payload(&content),
                content,
            })),
            other => return Err(other.to_owned()),
        }
        Ok(())
    }
}

impl WireCall<'_> {
    fn into_call(self) -> ToolCall {
        ToolCall {
            id: self.id.to_owned(),
            name: self.name.to_owned(),
            arguments: object_or_empty(&self.arguments),
            // An unescaped (owned) text moves in; a borrowed one is copied once.
            raw_arguments: self.arguments.into_owned(),
        }
    }
}

/// The typed reading: `None` for any body it cannot read exactly as
/// [`parse`] would (a member of another type, a repeated key, an unknown
/// role), which then goes the `Value` way. Unknown members (`tools`, ...)
/// are skipped without being built (the tool list recognised when it is
/// the last one read, see [`ToolsMemo`]), and so are the messages before
/// the current turn: only their size is counted ([`ParsedRequest`]).
fn parse_typed(body: &[u8], tools: &ToolsMemo) -> Option<ParsedRequest> {
    // Checked once, whole: reading bytes, serde checks every borrowed
    // string again on its own.
    let text = std::str::from_utf8(body).ok()?;
    let body = typed::Body::read(text, tools)?;
    let start = body
        .messages
        .iter()
        .rposition(|item| typed::text(&item.role) == "user")
        .unwrap_or(0);
    let (earlier, current) = body.messages.split_at(start);
    let mut prompt_bytes = 0;
    for item in earlier {
        prompt_bytes += typed::size(item)?;
    }
    let mut messages = Vec::with_capacity(current.len());
    for item in current {
        let calls = item.tool_calls.as_deref().unwrap_or_default();
        let item = WireMessage {
            role: typed::text(&item.role),
            content: typed::content(item.content),
            calls: calls
                .iter()
                .map(typed::Call::fields)
                .collect::<Option<_>>()?,
            tool_call_id: typed::text(&item.tool_call_id),
        };
        item.push_to(&mut messages).ok()?;
    }
    prompt_bytes += crate::script::prompt_bytes(&messages);
    Some(ParsedRequest {
        model: typed::text(&body.model).to_owned(),
        messages,
        prompt_bytes,
        stream: body.stream.unwrap_or(false),
        include_usage: body
            .stream_options
            .and_then(|options| options.include_usage)
            .unwrap_or(false),
    })
}

/// The request's members [`parse_typed`] reads. Strings borrow from the
/// body unless they hold escapes.
mod typed {
    use std::borrow::Cow;

    use serde::Deserialize;
    use serde::de::IgnoredAny;
    use serde_json::Value;
    use serde_json::value::RawValue;

    use super::WireCall;
    use crate::wire::members::{ToolsMemo, members, value};
    use crate::wire::text_of;

    /// The members of a body the mock reads.
    pub(super) struct Body<'a> {
        pub model: Option<Cow<'a, str>>,
        pub messages: Vec<Item<'a>>,
        pub stream: Option<bool>,
        pub stream_options: Option<StreamOptions>,
    }

    impl<'a> Body<'a> {
        /// `text` read as serde would read it into these members (a struct
        /// that ignores the others), member by member; `None` where serde
        /// would fail (a repeated member, no `messages`, a member of
        /// another type) or [`members`] gives up. The tool list is stepped
        /// over by comparison when it is the last one read whole.
        ///
        /// One difference from a whole-body parse: each member's value
        /// starts at depth 0 of serde_json's nesting limit (128), one level
        /// more than inside the body; only a member nested to the limit
        /// exactly reads here and fails there.
        pub(super) fn read(text: &'a str, tools: &ToolsMemo) -> Option<Body<'a>> {
            let (mut model, mut messages, mut stream, mut stream_options) =
                (None, None, None, None);
            members(text, |key, rest| {
                fn once<'a, T: Deserialize<'a>>(
                    slot: &mut Option<T>,
                    rest: &'a str,
                ) -> Option<usize> {
                    if slot.is_some() {
                        return None;
                    }
                    let (read, len) = value::<T>(rest)?;
                    *slot = Some(read);
                    Some(len)
                }
                match key {
                    "model" => once(&mut model, rest),
                    "messages" => once(&mut messages, rest),
                    "stream" => once(&mut stream, rest),
                    "stream_options" => once(&mut stream_options, rest),
                    "tools" => tools.known(rest).or_else(|| {
                        let (_, len) = value::<IgnoredAny>(rest)?;
                        tools.keep(rest.get(..len)?);
                        Some(len)
                    }),
                    _ => value::<IgnoredAny>(rest).map(|(_, len)| len),
                }
            })?;
            Some(Body {
                model: model.flatten(),
                messages: messages?,
                stream: stream.flatten(),
                stream_options: stream_options.flatten(),
            })
        }
    }

    #[derive(Deserialize)]
    pub(super) struct StreamOptions {
        pub include_usage: Option<bool>,
    }

    #[derive(Deserialize)]
    pub(super) struct Item<'a> {
        #[serde(borrow)]
        pub role: Option<Cow<'a, str>>,
        #[serde(borrow)]
        pub content: Option<&'a RawValue>,
        #[serde(borrow)]
        pub tool_calls: Option<Vec<Call<'a>>>,
        #[serde(borrow)]
        pub tool_call_id: Option<Cow<'a, str>>,
    }

    #[derive(Deserialize)]
    pub(super) struct Call<'a> {
        #[serde(borrow)]
        id: Option<Cow<'a, str>>,
        #[serde(borrow)]
        function: Option<Function<'a>>,
    }

    #[derive(Deserialize)]
    struct Function<'a> {
        #[serde(borrow)]
        name: Option<Cow<'a, str>>,
        /// Kept as text: a call before the current turn is only counted,
        /// and unescaping its arguments (JSON in a string, every quote
        /// escaped) was most of the cost of stepping over it. Anything
        /// but a string or `null` refuses the typed reading, as a
        /// `Cow<str>` would.
        #[serde(borrow)]
        arguments: Option<&'a RawValue>,
    }

    impl Call<'_> {
        /// The call's members; `None` when its arguments are not a string.
        pub(super) fn fields(&self) -> Option<WireCall<'_>> {
            let function = self.function.as_ref();
            let arguments = match function.and_then(|f| f.arguments) {
                Some(raw) => serde_json::from_str::<Cow<'_, str>>(raw.get()).ok()?,
                None => Cow::Borrowed(""),
            };
            Some(WireCall {
                id: text(&self.id),
                name: function.map_or("", |f| text(&f.name)),
                arguments,
            })
        }

        /// The length of the call's name and arguments as [`fields`]
        /// reads them, counted without unescaping where it can be.
        ///
        /// [`fields`]: Call::fields
        fn texts_len(&self) -> Option<usize> {
            let Some(function) = &self.function else {
                return Some(0);
            };
            let arguments = match function.arguments {
                Some(raw) => match unescaped_len(raw.get()) {
                    Some(len) => len,
                    None => self.fields()?.arguments.len(),
                },
                None => 0,
            };
            Some(text(&function.name).len() + arguments)
        }
    }

    /// The length of the text a JSON string literal (quotes included, as
    /// serde checked it) stands for, counted without building it; `None`
    /// when it holds a `\u` escape, whose length depends on the code
    /// point (and a lone surrogate makes the string unreadable).
    fn unescaped_len(literal: &str) -> Option<usize> {
        let inner = literal.strip_prefix('"')?.strip_suffix('"')?.as_bytes();
        let mut len = inner.len();
        let mut at = 0;
        while let Some(offset) = inner.get(at..)?.iter().position(|&b| b == b'\\') {
            let escape = at + offset;
            // Every other escape is two bytes for one.
            if *inner.get(escape + 1)? == b'u' {
                return None;
            }
            len -= 1;
            at = escape + 2;
        }
        Some(len)
    }

    /// What [`crate::script::message_bytes`] counts of the message `item`
    /// reads as, without building it; `None` for a role [`parse`](super::parse) refuses.
    pub(super) fn size(item: &Item<'_>) -> Option<usize> {
        let content = content_len(item.content);
        match text(&item.role) {
            "system" | "developer" | "user" | "tool" => Some(content),
            "assistant" => {
                let calls = item.tool_calls.as_deref().unwrap_or_default();
                let mut texts = 0;
                for call in calls {
                    texts += call.texts_len()?;
                }
                Some(content + texts)
            }
            _ => None,
        }
    }

    /// The length of [`content`]'s text, built only for `\u` escapes or
    /// parts.
    fn content_len(raw: Option<&RawValue>) -> usize {
        match raw.map(RawValue::get) {
            Some(text) if text.starts_with('"') => {
                unescaped_len(text).unwrap_or_else(|| content(raw).len())
            }
            _ => content(raw).len(),
        }
    }

    /// A string member, "" when absent (as `str_field` reads it).
    pub(super) fn text<'s>(member: &'s Option<Cow<'_, str>>) -> &'s str {
        member.as_deref().unwrap_or("")
    }

    /// `content` as `text_of` reads it: a string whole, a list of parts
    /// joined, anything else empty.
    pub(super) fn content(raw: Option<&RawValue>) -> String {
        let Some(raw) = raw else {
            return String::new();
        };
        match raw.get().as_bytes().first() {
            Some(b'"') => serde_json::from_str::<String>(raw.get()).unwrap_or_default(),
            Some(b'[') => text_of(serde_json::from_str::<Value>(raw.get()).ok().as_ref()),
            _ => String::new(),
        }
    }
}

pub(crate) fn object_or_empty(raw: &str) -> Value {
    match serde_json::from_str::<Value>(raw) {
        Ok(value @ Value::Object(_)) => value,
        _ => json!({}),
    }
}

/// The tool name of the earlier call with this id (the wire does not repeat it).
pub(crate) fn name_of_call(messages: &[Message], id: &str) -> String {
    messages
        .iter()
        .rev()
        .filter_map(|m| match m {
            Message::Assistant(a) => Some(a),
            _ => None,
        })
        .flat_map(|a| &a.tool_calls)
        .find(|c| c.id == id)
        .map(|c| c.name.clone())
        .unwrap_or_default()
}

/// Writes the `chat.completion.chunk`s of one response.
///
/// Every chunk repeats the response's envelope (`created`, `id`, `model`,
/// `object`, `system_fingerprint`: some 120 bytes of a tool call's 300),
/// and serde_json escapes each of its strings byte by byte: writing it for
/// every chunk was the largest part of the mock's CPU in the bench's blast,
/// CPU the agent under test shares two cores with. So the envelope is
/// written once per response, and each chunk is its choice followed by
/// those bytes. Members are in the order a `Value` writes them, so the
/// bytes are what the `Value` encoding sent.
struct ChunkWriter {
    /// `"created":...,"system_fingerprint":"..."}`: the chunk's members
    /// after `choices`, and its closing brace.
    envelope: Vec<u8>,
}

/// The members of a chunk after `choices`, serialized once.
#[derive(Serialize)]
struct Envelope<'a> {
    created: u64,
    id: &'a str,
    model: &'a str,
    object: &'static str,
    system_fingerprint: &'static str,
}

impl ChunkWriter {
    fn new(ctx: &Ctx) -> Self {
        let envelope = Envelope {
            created: ctx.created,
            id: &ctx.response_id,
            model: &ctx.model,
            object: "chat.completion.chunk",
            system_fingerprint: "fp_homeagent_mock",
        };
        // `{"created":...}` without its opening brace: it follows `choices`.
        // Borrowed strings and a number always serialize.
        let mut envelope = serde_json::to_vec(&envelope).unwrap_or_default();
        envelope.remove(0);
        ChunkWriter { envelope }
    }

    fn chunk<D: Serialize>(&self, delta: D, finish: Option<&str>) -> Bytes {
        let choice = ChunkChoice {
            delta,
            finish_reason: finish,
            index: 0,
            logprobs: None,
        };
        let mut out = Vec::with_capacity(128 + self.envelope.len());
        out.extend_from_slice(b"data: {\"choices\":[");
        // Plain data always serializes; were it ever not to, the chunk goes
        // out with an empty choice.
        let _ = serde_json::to_writer(&mut out, &choice);
        out.extend_from_slice(b"],");
        out.extend_from_slice(&self.envelope);
        out.extend_from_slice(b"\n\n");
        Bytes::from(out)
    }
}

#[derive(Serialize)]
struct ChunkChoice<'a, D> {
    delta: D,
    finish_reason: Option<&'a str>,
    index: u32,
    /// Always `null`.
    logprobs: Option<()>,
}

#[derive(Serialize)]
struct OpeningDelta {
    content: &'static str,
    role: &'static str,
}

#[derive(Serialize)]
struct TextDelta<'a> {
    content: &'a str,
}

#[derive(Serialize)]
struct CallsDelta<'a> {
    tool_calls: [CallDelta<'a>; 1],
}

/// A call's fragment: `id`, `type` and `function.name` on its first only.
#[derive(Serialize)]
struct CallDelta<'a> {
    function: FunctionDelta<'a>,
    #[serde(skip_serializing_if = "Option::is_none")]
    id: Option<&'a str>,
    index: u32,
    #[serde(rename = "type", skip_serializing_if = "Option::is_none")]
    kind: Option<&'static str>,
}

#[derive(Serialize)]
struct FunctionDelta<'a> {
    arguments: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    name: Option<&'a str>,
}

/// The finishing chunk's delta: `{}`.
#[derive(Serialize)]
struct EmptyDelta {}

pub(crate) fn stream(events: &[StreamEvent], ctx: &Ctx) -> Vec<Bytes> {
    let opening = OpeningDelta {
        content: "",
        role: "assistant",
    };
    let writer = ChunkWriter::new(ctx);
    let mut out = Vec::with_capacity(events.len() + 3);
    out.push(writer.chunk(opening, None));
    let mut usage = None;
    for event in events {
        match event {
            StreamEvent::TextDelta { text } => {
                out.push(writer.chunk(TextDelta { content: text }, None));
            }
            StreamEvent::ToolCall(fragment) => {
                let call = CallDelta {
                    function: FunctionDelta {
                        arguments: &fragment.raw_arguments,
                        name: fragment.name.as_deref(),
                    },
                    id: fragment.id.as_deref(),
                    index: fragment.stream_index.unwrap_or(0),
                    kind: fragment.id.as_ref().map(|_| "function"),
                };
                let delta = CallsDelta { tool_calls: [call] };
                out.push(writer.chunk(delta, None));
            }
            StreamEvent::Finish { reason } => {
                out.push(writer.chunk(EmptyDelta {}, Some(reason)));
            }
            StreamEvent::Usage(u) => usage = Some(*u),
            StreamEvent::ReasoningDelta { .. } | StreamEvent::ReasoningMetadata { .. } => {}
        }
    }
    if let (true, Some(u)) = (ctx.include_usage, usage) {
        out.push(sse(
            None,
            &json!({
                "id": ctx.response_id,
                "object": "chat.completion.chunk",
                "created": ctx.created,
                "model": ctx.model,
                "choices": [],
                "usage": {"prompt_tokens": u.prompt_tokens, "completion_tokens": u.completion_tokens, "total_tokens": u.total_tokens},
            }),
        ));
    }
    out.push(Bytes::from_static(b"data: [DONE]\n\n"));
    out
}

pub(crate) fn whole(events: &[StreamEvent], ctx: &Ctx) -> Value {
    let Collected {
        text,
        calls,
        finish,
        usage,
    } = collect(events);
    let mut message = json!({
        "role": "assistant",
        "content": if text.is_empty() && !calls.is_empty() { Value::Null } else { json!(text) },
        "refusal": null,
    });
    if !calls.is_empty() {
        message["tool_calls"] = calls
            .iter()
            .map(|c| {
                json!({"id": c.id, "type": "function", "function": {"name": c.name, "arguments": c.raw}})
            })
            .collect();
    }
    json!({
        "id": ctx.response_id,
        "object": "chat.completion",
        "created": ctx.created,
        "model": ctx.model,
        "system_fingerprint": "fp_homeagent_mock",
        "choices": [{"index": 0, "message": message, "logprobs": null, "finish_reason": finish}],
        "usage": {"prompt_tokens": usage.prompt_tokens, "completion_tokens": usage.completion_tokens, "total_tokens": usage.total_tokens},
    })
}

pub(crate) fn error_body(status: u16, message: &str) -> Value {
    let kind = if status >= 500 {
        "server_error"
    } else {
        "invalid_request_error"
    };
    json!({"error": {"message": message, "type": kind, "param": null, "code": null}})
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)] // a panic in a test is a test failure

    use super::*;

    /// The `Value` path: the reference the typed path must agree with.
    fn by_value(body: &str) -> Result<ParsedRequest, String> {
        parse(&serde_json::from_str::<Value>(body).unwrap())
    }

    /// Bodies the typed path reads, each with something its rules must get
    /// right; the `Value` path's reading of each is the expected one.
    const TYPED: &[&str] = &[
        r#"{"model":"gpt-x","stream":true,"stream_options":{"include_usage":true},"tools":[{"type":"function","function":{"name":"t","parameters":{"type":"object"}}}],
            "messages":[{"role":"system","content":"You are \"here\".\n"},{"role":"user","content":"!batch2 \u00e9"},
            {"role":"assistant","content":null,"tool_calls":[{"id":"c1","type":"function","function":{"name":"demo_echo","arguments":"{\"tag\":\"done-1\"}"}},
                                                             {"id":"c2","type":"function","function":{"name":"demo_note","arguments":"not json"}}]},
            {"role":"tool","tool_call_id":"c1","content":"done-1"},
            {"role":"tool","tool_call_id":"c2","content":"{\"error\":{\"reason\":\"denied\"}}"},
            {"role":"tool","tool_call_id":"c9","content":" {\"error\": 1, \"more\": 2}"},
            {"role":"developer","content":[{"type":"text","text":"a"},"b",{"type":"image_url"}]},
            {"role":"assistant","content":"done","tool_calls":null}]}"#,
        r#"{"messages":[{"role":"user","content":"hi"}],"stream":null,"stream_options":null,"model":"m","max_tokens":64}"#,
        r#"{"messages":[{"role":"user","content":"x","name":"me"},{"role":"assistant","tool_calls":[{"function":{"arguments":"{}"}},{}]},{"role":"tool","content":"[]"}],"stream":false,"stream_options":{}}"#,
    ];

    #[test]
    fn the_typed_path_reads_a_body_as_the_value_path_does() {
        for body in TYPED {
            let typed = parse_typed(body.as_bytes(), &ToolsMemo::default());
            assert!(typed.is_some(), "not read typed: {body}");
            assert_eq!(typed, Some(by_value(body).unwrap()), "{body}");
            assert_eq!(
                parse_body(body.as_bytes(), &ToolsMemo::default()),
                by_value(body)
            );
        }
    }

    #[test]
    fn a_streamed_turn_is_written_chunk_by_chunk_in_openais_shape() {
        use homeagent_core::{ToolCallFragment, Usage};
        let fragment = |id: Option<&str>, name: Option<&str>, raw: &str| {
            StreamEvent::ToolCall(ToolCallFragment {
                stream_index: Some(1),
                id: id.map(str::to_owned),
                name: name.map(str::to_owned),
                raw_arguments: raw.to_owned(),
            })
        };
        let events = [
            StreamEvent::TextDelta {
                text: "Say \"hi\"\n".into(),
            },
            fragment(Some("call_1"), Some("demo_echo"), "{\"tag\":\""),
            fragment(None, None, "x\"}"),
            StreamEvent::Finish {
                reason: "tool_calls".into(),
            },
            StreamEvent::Usage(Usage {
                prompt_tokens: 7,
                completion_tokens: 3,
                total_tokens: 10,
            }),
        ];
        let ctx = Ctx {
            // A model name that needs escapes: the envelope is written once, by
            // serde, and must still read back as this very name.
            model: "gpt-\"m\\".into(),
            response_id: "chatcmpl-9".into(),
            created: 1_700_000_000,
            include_usage: true,
        };
        let chunk = |delta: Value, finish: Value| {
            json!({"id": "chatcmpl-9", "object": "chat.completion.chunk", "created": 1_700_000_000,
                   "model": "gpt-\"m\\", "system_fingerprint": "fp_homeagent_mock",
                   "choices": [{"index": 0, "delta": delta, "logprobs": null, "finish_reason": finish}]})
        };
        let expected = [
            chunk(json!({"role": "assistant", "content": ""}), Value::Null),
            chunk(json!({"content": "Say \"hi\"\n"}), Value::Null),
            chunk(
                json!({"tool_calls": [{"index": 1, "id": "call_1", "type": "function",
                                       "function": {"name": "demo_echo", "arguments": "{\"tag\":\""}}]}),
                Value::Null,
            ),
            chunk(
                json!({"tool_calls": [{"index": 1, "function": {"arguments": "x\"}"}}]}),
                Value::Null,
            ),
            chunk(json!({}), json!("tool_calls")),
            json!({"id": "chatcmpl-9", "object": "chat.completion.chunk", "created": 1_700_000_000,
                   "model": "gpt-\"m\\", "choices": [],
                   "usage": {"prompt_tokens": 7, "completion_tokens": 3, "total_tokens": 10}}),
        ];
        // Byte for byte: members in the order a `Value` writes them.
        let mut expected: Vec<String> = expected
            .iter()
            .map(|chunk| format!("data: {chunk}\n\n"))
            .collect();
        expected.push("data: [DONE]\n\n".into());
        let written: Vec<String> = stream(&events, &ctx)
            .iter()
            .map(|bytes| String::from_utf8(bytes.to_vec()).unwrap())
            .collect();
        assert_eq!(written, expected);
    }

    #[test]
    fn a_tool_result_failed_only_when_it_is_an_error_payload() {
        let parsed = parse_body(TYPED[0].as_bytes(), &ToolsMemo::default()).unwrap();
        let results: Vec<(&str, &str, bool)> = parsed
            .messages
            .iter()
            .filter_map(|m| match m {
                Message::Tool(t) => Some((t.tool_call_id.as_str(), t.name.as_str(), t.success)),
                _ => None,
            })
            .collect();
        assert_eq!(
            results,
            [
                ("c1", "demo_echo", true),
                ("c2", "demo_note", false),
                ("c9", "", true)
            ]
        );
    }

    /// Only the current turn is built; the messages before it count
    /// toward the prompt's size by their texts, unescaped, as if built.
    #[test]
    fn earlier_messages_are_counted_not_built() {
        let body = r#"{"model":"m","messages":[
            {"role":"system","content":"abc"},
            {"role":"user","content":"hi"},
            {"role":"assistant","content":null,"tool_calls":[{"id":"c1","type":"function","function":{"name":"demo_echo","arguments":"{\"a\":1}"}}]},
            {"role":"tool","tool_call_id":"c1","content":"x\"y\u00e9"},
            {"role":"developer","content":[{"type":"text","text":"ab"},"c"]},
            {"role":"assistant","content":"ok"},
            {"role":"assistant","content":"a\\\"b\n\/","tool_calls":[{"id":"c2","function":{"name":"n\"","arguments":"{\"b\":\"\\\\\"}"}},{"id":"c3","function":{"arguments":null}}]},
            {"role":"tool","tool_call_id":"c2","content":"\t\u0041\\"},
            {"role":"user","content":"next"}]}"#;
        // abc, hi, demo_echo + {"a":1}, x"yé (é is two bytes), abc, ok,
        // a\"b<newline>/ + n" + {"b":"\\"}, <tab>A\, next
        let expected = 3 + 2 + (9 + 7) + 5 + 3 + 2 + (6 + 2 + 10) + 3 + 4;
        for parsed in [
            parse_typed(body.as_bytes(), &ToolsMemo::default()).unwrap(),
            by_value(body).unwrap(),
        ] {
            assert_eq!(parsed.prompt_bytes, expected);
            assert_eq!(parsed.messages, [Message::user("next")]);
        }
    }

    #[test]
    fn an_unusual_body_goes_the_value_path() {
        for body in [
            r#"{"messages":[{"role":5,"content":"x"}]}"#,
            r#"{"messages":[{"role":"user","content":"x"}],"model":7}"#,
            r#"{"messages":[{"role":"user","content":"x"}],"stream":"yes"}"#,
            r#"{"messages":[{"role":"assistant","tool_calls":{"id":"c"}}]}"#,
            r#"{"messages":[{"role":"assistant","tool_calls":[{"function":{"name":1}}]}]}"#,
            // Arguments as an object, before the current turn and in it.
            r#"{"messages":[{"role":"assistant","tool_calls":[{"function":{"arguments":{"a":1}}}]},{"role":"user","content":"x"}]}"#,
            r#"{"messages":[{"role":"user","content":"x"},{"role":"assistant","tool_calls":[{"function":{"arguments":[]}}]}]}"#,
            r#"{"messages":[{"role":"assistant","tool_calls":[{"function":{"arguments":7}}]},{"role":"user","content":"x"}]}"#,
            r#"{"messages":[{"role":"user","content":"x"}],"stream_options":{"include_usage":"yes"}}"#,
            r#"{"model":"a","model":"b","messages":[{"role":"user","content":"x"}]}"#,
            r#"{"messages":[{"role":"robot","content":"x"}]}"#,
            r#"{"messages":[{"role":"robot","content":"x"},{"role":"user","content":"y"}]}"#,
            r#"{"model":"m"}"#,
        ] {
            assert_eq!(
                parse_typed(body.as_bytes(), &ToolsMemo::default()),
                None,
                "{body}"
            );
            assert_eq!(
                parse_body(body.as_bytes(), &ToolsMemo::default()),
                by_value(body),
                "{body}"
            );
        }
        assert!(parse_body(b"[1]", &ToolsMemo::default()).is_err());
        assert!(parse_body(br#"{"model": "m","#, &ToolsMemo::default()).is_err());
    }

    /// `parse_body`'s reading without the typed path: the reference.
    fn reference(body: &[u8]) -> Result<ParsedRequest, String> {
        let value = serde_json::from_slice::<Value>(body)
            .map_err(|err| format!("the request body is not JSON: {err}"))?;
        parse(&value)
    }

    /// A tool list read whole is recognised in the next body (not parsed
    /// again), and only when it is the very same text up to the end of
    /// its member: a changed list, or one that goes on, is read anew.
    #[test]
    fn the_last_tool_list_is_recognised_not_parsed() {
        let memo = ToolsMemo::default();
        let body = TYPED[0];
        assert_eq!(
            parse_body(body.as_bytes(), &memo),
            reference(body.as_bytes())
        );
        assert_eq!(memo.hits(), 0);
        assert_eq!(
            parse_body(body.as_bytes(), &memo),
            reference(body.as_bytes())
        );
        assert_eq!(memo.hits(), 1);
        let tools =
            r#"[{"type":"function","function":{"name":"t","parameters":{"type":"object"}}}]"#;
        assert!(body.contains(tools));
        for changed in [
            // Another list: read whole, and kept instead.
            body.replace(tools, r#"[{"type":"function","function":{"name":"u"}}]"#),
            // The same list and more: not that list.
            body.replace(tools, &format!("{tools}[]")),
            body.replace(tools, &format!("{tools} 1")),
            body.replace(tools, &tools[..tools.len() - 1]),
        ] {
            assert_eq!(
                parse_body(changed.as_bytes(), &memo),
                reference(changed.as_bytes()),
                "{changed}"
            );
        }
    }

    /// Random edits of a body (bytes dropped, doubled or replaced by JSON's
    /// structural characters) read as the reference reads them, with the
    /// original's tool list remembered.
    #[test]
    fn an_edited_body_reads_as_the_reference_reads_it() {
        let body = TYPED[0].as_bytes();
        let memo = ToolsMemo::default();
        assert!(parse_body(body, &memo).is_ok());
        let mut state: u64 = 0x9E37_79B9_7F4A_7C15;
        let mut next = |bound: usize| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            (state % bound as u64) as usize
        };
        let marks = b"{}[],:\" 0a\n";
        let mut typed = 0;
        for _ in 0..4000 {
            let mut edited = body.to_vec();
            for _ in 0..1 + next(2) {
                let at = next(edited.len());
                match next(3) {
                    0 => {
                        edited.remove(at);
                    }
                    1 => edited.insert(at, edited[at]),
                    _ => edited[at] = marks[next(marks.len())],
                }
            }
            let read = parse_body(&edited, &memo);
            assert_eq!(
                read,
                reference(&edited),
                "{}",
                String::from_utf8_lossy(&edited)
            );
            typed += usize::from(read.is_ok());
            // Keep the original list remembered for the next edit.
            assert!(parse_body(body, &memo).is_ok());
        }
        assert!(typed > 100, "only {typed} edits were still bodies");
        assert!(memo.hits() > 1000, "{}", memo.hits());
    }
}
