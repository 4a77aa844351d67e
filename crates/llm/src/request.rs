//! The provider-neutral request every codec encodes.

use std::sync::{Arc, LazyLock};

use homeagent_core::{Message, Renderings, ToolDef};
use serde::Serialize;
use serde_json::Value;
use serde_json::value::RawValue;

mod rendered;

pub use rendered::RenderCache;
pub(crate) use rendered::{RenderShape, Written};

/// A tool as the model sees it: name, description, argument schema. The
/// scheduling declarations of [`ToolDef`] stay in the kernel.
///
/// Every request of every turn carries the whole tool list, so nothing of
/// it is written per request that can be written once. The schema is held
/// as JSON text: copying, writing and dropping each schema as a `Value`
/// tree was a third of the agent's work per input. And each codec writes
/// the whole tool in its wire's shape once per definition (`rendered`),
/// shared with the [`ToolDef`] the spec came from. Escaping every
/// description again for every request was an eighth of the agent's work
/// per input with the demo tools; fitting every schema to Gemini's subset
/// again was more than half of it on that wire.
///
/// The parts are read-only, so a rendering can never disagree with them.
#[derive(Debug, Clone)]
pub struct ToolSpec {
    // Shared text: an agent's tool list is cloned into every request.
    name: Arc<str>,
    description: Arc<str>,
    parameters: Arc<RawValue>,
    renderings: Arc<Renderings>,
}

/// What providers get for a tool that declares no argument schema: they
/// require an object schema even then.
static NO_ARGUMENTS: LazyLock<Arc<RawValue>> = LazyLock::new(|| {
    let text = r#"{"type":"object","properties":{}}"#.to_owned();
    Arc::from(RawValue::from_string(text).unwrap_or_else(|_| RawValue::NULL.to_owned()))
});

impl ToolSpec {
    /// A tool with the schema `parameters` (`null` or `{}` for none).
    pub fn new(
        name: impl Into<String>,
        description: impl Into<String>,
        parameters: &Value,
    ) -> ToolSpec {
        let parameters = if declares_arguments(parameters) {
            serde_json::value::to_raw_value(parameters)
                .map(Arc::from)
                .unwrap_or_else(|_| Arc::clone(&NO_ARGUMENTS))
        } else {
            Arc::clone(&NO_ARGUMENTS)
        };
        ToolSpec {
            name: Arc::from(name.into()),
            description: Arc::from(description.into()),
            parameters,
            renderings: Arc::default(),
        }
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    pub fn description(&self) -> &str {
        &self.description
    }

    /// JSON Schema of the arguments, as the JSON text requests embed;
    /// `{"type":"object","properties":{}}` when the tool declares none.
    pub fn parameters(&self) -> &RawValue {
        &self.parameters
    }

    /// The schema parsed, for codecs that rewrite it (Gemini) or build
    /// their body as a `Value`.
    pub fn parameters_value(&self) -> Value {
        serde_json::from_str(self.parameters.get()).unwrap_or(Value::Null)
    }

    /// The tool in the wire shape `key` names, as `shape` writes it: made
    /// once per definition and reused by every later request. `shape` must
    /// be the same for every call with the same `key`.
    pub(crate) fn rendered<T: Serialize>(
        &self,
        key: &'static str,
        shape: impl FnOnce() -> T,
    ) -> Arc<RawValue> {
        self.renderings.get_or_render(key, || {
            // Strings and JSON text always serialize; the fallback is
            // unreachable.
            serde_json::value::to_raw_value(&shape())
                .map(Arc::from)
                .unwrap_or_else(|_| Arc::from(RawValue::NULL.to_owned()))
        })
    }
}

impl ToolSpec {
    /// Whether `other` is this definition or a clone of it (not merely
    /// equal): their texts, and so their renderings, are the same ones.
    pub(crate) fn is_same(&self, other: &ToolSpec) -> bool {
        Arc::ptr_eq(&self.name, &other.name)
            && Arc::ptr_eq(&self.description, &other.description)
            && Arc::ptr_eq(&self.parameters, &other.parameters)
            && Arc::ptr_eq(&self.renderings, &other.renderings)
    }
}

impl PartialEq for ToolSpec {
    fn eq(&self, other: &Self) -> bool {
        self.name == other.name
            && self.description == other.description
            && self.parameters.get() == other.parameters.get()
    }
}

fn declares_arguments(parameters: &Value) -> bool {
    matches!(parameters, Value::Object(map) if !map.is_empty())
}

impl From<&ToolDef> for ToolSpec {
    /// Shares the definition's rendered schema: no serialization per request.
    fn from(def: &ToolDef) -> Self {
        let parameters = if declares_arguments(&def.parameters) {
            def.parameters_text()
        } else {
            Arc::clone(&NO_ARGUMENTS)
        };
        ToolSpec {
            name: Arc::from(def.name.as_str()),
            description: Arc::from(def.description.as_str()),
            parameters,
            renderings: def.renderings(),
        }
    }
}

/// One chat request: the whole conversation, the tools, and the limits.
#[derive(Debug, Clone, PartialEq)]
pub struct ChatRequest {
    /// The provider's model name.
    pub model: String,
    /// System messages anywhere in the list are gathered by codecs whose wire
    /// keeps the system prompt apart (Anthropic, Gemini).
    pub messages: Vec<Message>,
    pub tools: Vec<ToolSpec>,
    /// Output token limit; every wire gets it (Anthropic requires it).
    pub max_tokens: u32,
    pub temperature: Option<f32>,
    /// Ask for a streamed response.
    pub stream: bool,
    /// What a codec wrote of `messages` last time, for a caller that keeps
    /// this request from one model request to the next and declares which
    /// messages it left alone ([`RenderCache::keep_first`]); otherwise
    /// `Default::default()`, which changes nothing.
    pub rendered: RenderCache,
}

impl ChatRequest {
    /// About how many bytes of JSON the request encodes to, on any wire:
    /// its texts, its tools' schemas and a little per element. A body
    /// buffer starts this large; being a little off costs one regrowth.
    pub fn encoded_size_hint(&self) -> usize {
        self.encoded_size_hint_from(0)
    }

    /// [`ChatRequest::encoded_size_hint`] counting the messages from
    /// `first` on only (a codec copies the text of those before).
    pub(crate) fn encoded_size_hint_from(&self, first: usize) -> usize {
        const PER_ELEMENT: usize = 64;
        let tools: usize = self
            .tools
            .iter()
            .map(|t| t.name().len() + t.description().len() + t.parameters().get().len())
            .sum::<usize>()
            + self.tools.len() * PER_ELEMENT;
        let messages: usize = self
            .messages
            .get(first..)
            .unwrap_or_default()
            .iter()
            .map(|message| {
                PER_ELEMENT
                    + match message {
                        Message::System { content } | Message::User { content } => content.len(),
                        Message::Assistant(assistant) => {
                            assistant.content.len()
                                + assistant
                                    .reasoning
                                    .iter()
                                    .map(|part| part.text.len() + PER_ELEMENT)
                                    .sum::<usize>()
                                + assistant
                                    .tool_calls
                                    .iter()
                                    .map(|call| {
                                        call.id.len()
                                            + call.name.len()
                                            + call.raw_arguments.len()
                                            + PER_ELEMENT
                                    })
                                    .sum::<usize>()
                        }
                        Message::Tool(tool) => {
                            tool.tool_call_id.len() + tool.name.len() + tool.content.len()
                        }
                    }
            })
            .sum();
        // Escapes make text longer on the wire; an eighth more covers
        // ordinary text.
        let text = tools + messages;
        text + text / 8 + 256
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)] // a panic in a test is a test failure

    use super::*;
    use serde_json::json;

    #[test]
    fn a_tool_without_a_schema_gets_an_empty_object_schema() {
        let expected = json!({"type": "object", "properties": {}});
        for parameters in [Value::Null, json!({}), json!("not a schema")] {
            let def = ToolDef::new("t", "d").with_parameters(parameters.clone());
            assert_eq!(ToolSpec::from(&def).parameters_value(), expected);
            assert_eq!(
                ToolSpec::new("t", "d", &parameters).parameters_value(),
                expected
            );
        }
    }

    #[test]
    fn specs_of_one_definition_share_its_schema_text() {
        let schema = json!({"type": "object", "properties": {"ms": {"type": "integer"}}});
        let def = ToolDef::new("sleep", "Sleeps.").with_parameters(schema.clone());
        let first = ToolSpec::from(&def);
        let again = ToolSpec::from(&def.clone());
        // Rendered once for the definition, not once per request.
        assert!(std::ptr::eq(first.parameters(), again.parameters()));
        assert_eq!(first.parameters_value(), schema);
        assert_eq!(first, ToolSpec::new("sleep", "Sleeps.", &schema));
    }

    /// The `tools` member of the body `codec` writes for `tools`.
    fn tools_sent(codec: &dyn crate::WireCodec, tools: Vec<ToolSpec>) -> Value {
        let endpoint = crate::Endpoint {
            base_url: "http://127.0.0.1:9/v1".into(),
            api_key: None,
        };
        let request = ChatRequest {
            model: "m".into(),
            messages: vec![homeagent_core::Message::user("hi")],
            tools,
            max_tokens: 64,
            temperature: None,
            stream: true,
            rendered: Default::default(),
        };
        let wire = codec.build_request(&endpoint, &request).unwrap();
        serde_json::from_slice::<Value>(wire.body.as_bytes()).unwrap()["tools"].take()
    }

    /// The same definition is the same four texts: sharing some of them
    /// (as two conversions of one `ToolDef` share its schema and its
    /// renderings) is not enough.
    #[test]
    fn a_definition_is_the_same_only_with_all_its_texts() {
        let spec = ToolSpec::new(
            "t",
            "d",
            &json!({"type": "object", "properties": {"a": {}}}),
        );
        assert!(spec.is_same(&spec.clone()));
        let fresh = ToolSpec::new(
            "t",
            "d",
            &json!({"type": "object", "properties": {"a": {}}}),
        );
        // `base` with its `i`-th text taken from `from`.
        let with_text = |base: &ToolSpec, from: &ToolSpec, i: usize| {
            let mut spec = base.clone();
            match i {
                0 => spec.name = Arc::clone(&from.name),
                1 => spec.description = Arc::clone(&from.description),
                2 => spec.parameters = Arc::clone(&from.parameters),
                _ => spec.renderings = Arc::clone(&from.renderings),
            }
            spec
        };
        for shared in 0..4 {
            let only = with_text(&fresh, &spec, shared);
            assert!(!spec.is_same(&only), "only text {shared} shared");
            let all_but = with_text(&spec, &fresh, shared);
            assert!(!spec.is_same(&all_but), "all but text {shared} shared");
        }
    }

    #[test]
    fn a_definition_is_rendered_once_per_wire_shape_and_reused_by_later_requests() {
        use crate::codec::{
            anthropic::AnthropicCodec, gemini::GeminiCodec, ollama::OllamaCodec,
            openai::OpenAiCodec,
        };
        let description = "Adds a note: \"quoted\", tab\there,\nnew line, \\ é ✓ \u{1}.";
        let schema = json!({"type": "object", "properties": {"text": {"type": "string"}}});
        let def = ToolDef::new("note_add", description).with_parameters(schema.clone());
        let function =
            json!({"name": "note_add", "description": description, "parameters": schema});
        let openai_shape = json!([{"type": "function", "function": function}]);
        // Each input builds its specs from the registry's definitions anew.
        for _ in 0..2 {
            assert_eq!(
                tools_sent(&OpenAiCodec, vec![ToolSpec::from(&def)]),
                openai_shape
            );
        }
        assert_eq!(def.renderings().len(), 1, "one form for two requests");
        assert_eq!(
            tools_sent(&OllamaCodec, vec![ToolSpec::from(&def)]),
            openai_shape
        );
        assert_eq!(def.renderings().len(), 1, "Ollama takes OpenAI's shape");
        let anthropic_shape =
            json!([{"name": "note_add", "description": description, "input_schema": schema}]);
        for _ in 0..2 {
            assert_eq!(
                tools_sent(&AnthropicCodec, vec![ToolSpec::from(&def)]),
                anthropic_shape
            );
        }
        assert_eq!(def.renderings().len(), 2);
        let gemini_schema = json!({"type": "OBJECT", "properties": {"text": {"type": "STRING"}}});
        let gemini_shape = json!([{"functionDeclarations": [
            {"name": "note_add", "description": description, "parameters": gemini_schema}
        ]}]);
        for _ in 0..2 {
            assert_eq!(
                tools_sent(&GeminiCodec, vec![ToolSpec::from(&def)]),
                gemini_shape
            );
        }
        assert_eq!(def.renderings().len(), 3);
        // A spec made without a definition renders the same text.
        let alone = ToolSpec::new("note_add", description, &schema);
        assert_eq!(tools_sent(&OpenAiCodec, vec![alone.clone()]), openai_shape);
        assert_eq!(
            tools_sent(&AnthropicCodec, vec![alone.clone()]),
            anthropic_shape
        );
        assert_eq!(tools_sent(&GeminiCodec, vec![alone]), gemini_shape);
    }

    #[test]
    fn specs_differing_in_any_part_are_not_equal() {
        let schema = json!({"type": "object", "required": ["x"]});
        let base = ToolSpec::new("a", "d", &schema);
        assert_eq!(base, ToolSpec::new("a", "d", &schema));
        assert_ne!(base, ToolSpec::new("b", "d", &schema));
        assert_ne!(base, ToolSpec::new("a", "e", &schema));
        assert_ne!(base, ToolSpec::new("a", "d", &json!({"type": "object"})));
    }

    #[test]
    fn a_new_schema_is_rendered_again() {
        let def = ToolDef::new("t", "d").with_parameters(json!({"type": "object"}));
        let _ = ToolSpec::from(&def);
        let def = def.with_parameters(json!({"type": "object", "required": ["x"]}));
        assert_eq!(
            ToolSpec::from(&def).parameters_value(),
            json!({"type": "object", "required": ["x"]})
        );
    }

    /// Requests each dominated by one part of the hint: many tools, long
    /// texts, many calls, a long result.
    fn sized_requests() -> Vec<(&'static str, ChatRequest)> {
        use homeagent_core::{AssistantMessage, ToolCall, ToolMessage};
        let request = |messages: Vec<Message>, tools: Vec<ToolSpec>| ChatRequest {
            model: "m".into(),
            messages,
            tools,
            max_tokens: 64,
            temperature: None,
            stream: true,
            rendered: Default::default(),
        };
        let call = |i: usize, text: &str| ToolCall {
            id: format!("call_{i}"),
            name: "demo_echo".into(),
            arguments: serde_json::json!({"tag": text}),
            raw_arguments: serde_json::json!({"tag": text}).to_string(),
        };
        let result = |call: &ToolCall, content: String| {
            Message::Tool(ToolMessage {
                tool_call_id: call.id.clone(),
                name: call.name.clone(),
                content,
                success: true,
            })
        };
        let asking = |calls: Vec<ToolCall>| {
            Message::Assistant(AssistantMessage {
                content: String::new(),
                reasoning: Vec::new(),
                tool_calls: calls,
            })
        };
        let properties: serde_json::Map<String, Value> = (0..12)
            .map(|i| {
                (
                    format!("field_{i}"),
                    serde_json::json!({"type": "string", "description": "one of the fields"}),
                )
            })
            .collect();
        let schema = serde_json::json!({"type": "object", "properties": properties});
        let tools = (0..40)
            .map(|i| {
                ToolSpec::new(
                    format!("tool_{i}"),
                    "Does a thing with its fields.",
                    &schema,
                )
            })
            .collect();
        let text = "A \"quoted\" line of text, then a newline.\n".repeat(400);
        let calls: Vec<ToolCall> = (0..100).map(|i| call(i, &"x".repeat(200))).collect();
        let mut many_calls = vec![Message::user("go"), asking(calls.clone())];
        many_calls.extend(calls.iter().map(|c| result(c, "ok".into())));
        let one = call(0, "t");
        let long_result = vec![
            Message::user("go"),
            asking(vec![one.clone()]),
            result(&one, "r".repeat(20_000)),
        ];
        // Anthropic sends signed thinking back; the other wires drop it
        // (see the test).
        let thinking = Message::Assistant(AssistantMessage {
            content: String::new(),
            reasoning: (0..10)
                .map(|i| homeagent_core::ReasoningPart {
                    text: format!("step {i}: ").repeat(200),
                    metadata: Some(
                        serde_json::json!({"anthropic": {"signature": "s".repeat(100)}}),
                    ),
                })
                .collect(),
            tool_calls: vec![one.clone()],
        });
        let tiny_schema =
            serde_json::json!({"type": "object", "properties": {"a": {"type": "string"}}});
        let tiny_tools = (0..200)
            .map(|i| ToolSpec::new(format!("t{i}"), "d", &tiny_schema))
            .collect();
        vec![
            ("tools", request(vec![Message::user("hi")], tools)),
            ("tiny tools", request(vec![Message::user("hi")], tiny_tools)),
            (
                "thinking",
                request(
                    vec![Message::user("go"), thinking, result(&one, "ok".into())],
                    Vec::new(),
                ),
            ),
            (
                "texts",
                request(
                    vec![Message::system(text.clone()), Message::user(text)],
                    Vec::new(),
                ),
            ),
            ("calls", request(many_calls, Vec::new())),
            ("result", request(long_result, Vec::new())),
        ]
    }

    /// The hint from a message on counts that message and those after it
    /// only: from the first it is the whole hint, past the last it is a
    /// request without messages.
    #[test]
    fn the_size_hint_from_a_message_leaves_out_those_before() {
        for (shape, request) in sized_requests() {
            let len = request.messages.len();
            assert_eq!(
                request.encoded_size_hint_from(0),
                request.encoded_size_hint()
            );
            let mut bare = request.clone();
            bare.messages.clear();
            assert_eq!(
                request.encoded_size_hint_from(len),
                bare.encoded_size_hint(),
                "{shape}"
            );
            let mut tail = request.clone();
            tail.messages.drain(..len / 2);
            assert_eq!(
                request.encoded_size_hint_from(len / 2),
                tail.encoded_size_hint(),
                "{shape}"
            );
        }
    }

    /// The body buffer starts large enough: no codec's body outgrows the
    /// hint (the whole point of it), and the hint is at most half as large again, whichever
    /// part of the request dominates.
    #[test]
    fn the_size_hint_covers_every_codecs_body_and_not_much_more() {
        let endpoint = crate::Endpoint {
            base_url: "http://127.0.0.1:9/v1".into(),
            api_key: None,
        };
        for (shape, request) in sized_requests() {
            let hint = request.encoded_size_hint();
            for protocol in [
                crate::Protocol::Openai,
                crate::Protocol::Anthropic,
                crate::Protocol::Gemini,
                crate::Protocol::Ollama,
            ] {
                let wire = crate::codec_for(protocol)
                    .build_request(&endpoint, &request)
                    .unwrap();
                let sent = wire.body.as_bytes().len();
                if shape == "thinking" && protocol != crate::Protocol::Anthropic {
                    continue;
                }
                assert!(
                    sent <= hint,
                    "{shape}, {protocol:?}: {sent} bytes, hint {hint}"
                );
                assert!(
                    2 * hint <= 3 * sent + 1024,
                    "{shape}, {protocol:?}: {sent} bytes, hint {hint}"
                );
            }
        }
    }
}
