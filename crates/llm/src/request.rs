//! The provider-neutral request every codec encodes.

use std::sync::{Arc, LazyLock};

use homeagent_core::{Message, ToolDef};
use serde_json::Value;
use serde_json::value::RawValue;

/// A tool as the model sees it: name, description, argument schema. The
/// scheduling declarations of [`ToolDef`] stay in the kernel.
///
/// The schema is held as JSON text: every request of every turn carries the
/// whole tool list, and copying, writing and dropping each schema as a
/// `Value` tree was a third of the agent's work per input.
#[derive(Debug, Clone)]
pub struct ToolSpec {
    pub name: String,
    pub description: String,
    parameters: Arc<RawValue>,
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
            name: name.into(),
            description: description.into(),
            parameters,
        }
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
            name: def.name.clone(),
            description: def.description.clone(),
            parameters,
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
}
