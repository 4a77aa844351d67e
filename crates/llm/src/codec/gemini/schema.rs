//! Fitting a tool's JSON Schema into Gemini's `parameters` Schema.
//!
//! `functionDeclarations[].parameters` is not JSON Schema but a subset of
//! the OpenAPI 3.0 Schema object, parsed strictly: one unknown keyword
//! anywhere fails the whole request with `Invalid JSON payload received.
//! Unknown name "additionalProperties" ... Cannot find field` (the same for
//! `$schema`, `const`, `exclusiveMinimum`, `propertyNames`, `$ref`, ...).
//! MCP servers and schema generators emit those keywords all the time.
//!
//! Newer API versions also accept raw JSON Schema as `parametersJsonSchema`,
//! but not every model or Gemini-compatible server does; `parameters` with
//! the unsupported keywords removed works everywhere, at the cost of the
//! constraints the subset cannot express (they are still checked by the
//! kernel's own validation before a call runs).

use serde_json::{Map, Value};

/// Keywords of the Schema object that are copied as they are. The ones
/// holding sub-schemas (`properties`, `items`, `anyOf`) and the ones that
/// need translating (`type`, `enum`, `const`, `oneOf`) are handled apart.
const PLAIN_KEYWORDS: &[&str] = &[
    // Kept only where Gemini takes it: see `fit_enum_and_format`.
    "format",
    "title",
    "description",
    "nullable",
    "required",
    "minItems",
    "maxItems",
    "minProperties",
    "maxProperties",
    "minLength",
    "maxLength",
    "pattern",
    "minimum",
    "maximum",
    "example",
    "default",
    "propertyOrdering",
];

/// The Gemini form of one schema; keywords outside the subset are dropped.
pub(super) fn sanitize(schema: &Value) -> Value {
    let Value::Object(map) = schema else {
        return schema.clone();
    };
    let mut out = Map::new();
    for (key, value) in map {
        match key.as_str() {
            "type" => set_type(value, &mut out),
            "properties" => {
                if let Value::Object(properties) = value {
                    let properties = properties
                        .iter()
                        .filter_map(|(name, sub)| Some((name.clone(), sanitize_sub(sub)?)))
                        .collect();
                    out.insert(key.clone(), Value::Object(properties));
                }
            }
            "items" => {
                // Tuple-form `items: [..]` has no equivalent; keep the first.
                let items = match value {
                    Value::Array(list) => list.first(),
                    other => Some(other),
                };
                if let Some(items @ Value::Object(_)) = items {
                    out.insert(key.clone(), sanitize(items));
                }
            }
            // `oneOf` is stricter than `anyOf`, but closest in the subset.
            "anyOf" | "oneOf" => {
                if let Value::Array(list) = value
                    && !out.contains_key("anyOf")
                {
                    let choices: Vec<Value> = list.iter().filter_map(sanitize_sub).collect();
                    if !choices.is_empty() {
                        out.insert("anyOf".into(), Value::Array(choices));
                    }
                }
            }
            // Gemini enums are string lists; anything else would be rejected.
            "enum" => {
                if let Value::Array(list) = value
                    && list.iter().all(Value::is_string)
                {
                    out.insert(key.clone(), value.clone());
                }
            }
            "const" if value.is_string() && !map.contains_key("enum") => {
                out.insert("enum".into(), Value::Array(vec![value.clone()]));
            }
            other if PLAIN_KEYWORDS.contains(&other) => {
                out.insert(key.clone(), value.clone());
            }
            _ => {}
        }
    }
    fit_enum_and_format(&mut out);
    keep_required_that_exist(&mut out);
    // Every ARRAY must say its items ("items: missing field" fails the
    // whole request); JSON Schema may leave them out, or give `true` or a
    // tuple of non-objects. `{}` is any element, what those meant.
    if out.get("type").and_then(Value::as_str) == Some("ARRAY") && !out.contains_key("items") {
        out.insert("items".into(), Value::Object(Map::new()));
    }
    Value::Object(out)
}

/// A sub-schema in Gemini's form, or `None` for one nothing matches. A
/// declaration's property or choice must be a Schema object: JSON Schema's
/// `true` (anything; schemars writes it for a `serde_json::Value` field)
/// is `{}`, and `false` (nothing) is left out.
fn sanitize_sub(schema: &Value) -> Option<Value> {
    match schema {
        Value::Bool(true) => Some(Value::Object(Map::new())),
        Value::Bool(false) => None,
        other => Some(sanitize(other)),
    }
}

/// Gemini refuses a `required` that names a property the node does not
/// declare ("property is not defined"): one under `allOf` (dropped here),
/// or an item schema that lists `required` without `properties`. Only the
/// declared ones are kept, and `required` goes when none is.
fn keep_required_that_exist(out: &mut Map<String, Value>) {
    let Some(Value::Array(required)) = out.remove("required") else {
        return;
    };
    let declared = |name: &Value| {
        name.as_str().is_some_and(|name| {
            out.get("properties")
                .and_then(Value::as_object)
                .is_some_and(|properties| properties.contains_key(name))
        })
    };
    let kept: Vec<Value> = required.into_iter().filter(declared).collect();
    if !kept.is_empty() {
        out.insert("required".into(), Value::Array(kept));
    }
}

/// Gemini takes `enum` only on a STRING ("function declaration enum only
/// allowed for STRING type"; JSON Schema may leave the type out, so a
/// string enum without one becomes a STRING), and `format` only where it
/// means something ("only 'enum' and 'date-time' are supported for STRING
/// type"): MCP servers write `uri`, `email`, `uint8`, ... all the time.
fn fit_enum_and_format(out: &mut Map<String, Value>) {
    if out.contains_key("enum") {
        match out.get("type").and_then(Value::as_str) {
            None => {
                out.insert("type".into(), Value::String("STRING".into()));
            }
            Some("STRING") => {}
            Some(_) => {
                out.remove("enum");
            }
        }
    }
    let kept = match (
        out.get("type").and_then(Value::as_str),
        out.get("format").and_then(Value::as_str),
    ) {
        (_, None) => return,
        (Some("STRING"), Some("date-time")) => true,
        (Some("STRING"), Some("enum")) => out.contains_key("enum"),
        (Some("INTEGER"), Some("int32" | "int64")) => true,
        (Some("NUMBER"), Some("float" | "double")) => true,
        _ => false,
    };
    if !kept {
        out.remove("format");
    }
}

/// `type` is a single upper-case enum value in the subset: `"string"`
/// becomes `"STRING"`, and `["string", "null"]` becomes `"STRING"` with
/// `nullable: true` (a list fails with "Proto field is not repeating").
fn set_type(value: &Value, out: &mut Map<String, Value>) {
    match value {
        Value::String(name) => {
            out.insert("type".into(), Value::String(name.to_ascii_uppercase()));
        }
        Value::Array(names) => {
            let names: Vec<&str> = names.iter().filter_map(Value::as_str).collect();
            if let Some(first) = names.iter().find(|n| **n != "null") {
                out.insert("type".into(), Value::String(first.to_ascii_uppercase()));
            }
            if names.contains(&"null") {
                out.insert("nullable".into(), Value::Bool(true));
            }
        }
        _ => {}
    }
}

/// Whether a sanitized root schema declares no parameters at all. Gemini
/// rejects an OBJECT schema with empty `properties` ("should be non-empty
/// for OBJECT type"); a function without parameters leaves `parameters`
/// out instead.
pub(super) fn declares_nothing(schema: &Value) -> bool {
    match schema {
        Value::Object(map) => match map.get("properties") {
            Some(Value::Object(properties)) => properties.is_empty(),
            Some(_) => true,
            None => !map.contains_key("anyOf"),
        },
        _ => true,
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::{declares_nothing, sanitize};

    /// Gemini's enums are string lists: a string `const` is a one-value
    /// enum, any other `const` has no form and is dropped, and an `enum`
    /// beside a `const` is the one kept.
    #[test]
    fn only_a_string_const_becomes_an_enum() {
        assert_eq!(
            sanitize(&json!({"const": "fast"})),
            json!({"type": "STRING", "enum": ["fast"]})
        );
        for other in [json!(5), json!(true), json!(null), json!({"a": 1})] {
            assert_eq!(sanitize(&json!({"const": other})), json!({}), "{other}");
        }
        assert_eq!(
            sanitize(&json!({"type": "string", "const": "a", "enum": ["a", "b"]})),
            json!({"type": "STRING", "enum": ["a", "b"]})
        );
    }

    /// A property or a choice given as `true` (anything) is `{}`; one given
    /// as `false` (nothing) is left out: Gemini wants a Schema object in
    /// each place.
    #[test]
    fn boolean_sub_schemas_become_objects_or_go() {
        assert_eq!(
            sanitize(&json!({
                "type": "object",
                "properties": {"payload": true, "never": false, "name": {"type": "string"}},
                "anyOf": [true, false, {"type": "string"}]
            })),
            json!({
                "type": "OBJECT",
                "properties": {"payload": {}, "name": {"type": "STRING"}},
                "anyOf": [{}, {"type": "STRING"}]
            })
        );
        assert_eq!(sanitize(&json!({"anyOf": [false]})), json!({}));
    }

    /// `required` names only properties the node declares: Gemini refuses
    /// one that is not defined (an item schema with `required` and no
    /// `properties`; properties under `allOf`, which is dropped).
    #[test]
    fn required_keeps_only_declared_properties() {
        assert_eq!(
            sanitize(&json!({
                "type": "object",
                "properties": {"fields": {"type": "array", "items": {"type": "object", "required": ["type"]}}}
            })),
            json!({
                "type": "OBJECT",
                "properties": {"fields": {"type": "ARRAY", "items": {"type": "OBJECT"}}}
            })
        );
        assert_eq!(
            sanitize(&json!({
                "type": "object",
                "allOf": [{"properties": {"a": {"type": "string"}}}],
                "properties": {"b": {"type": "string"}},
                "required": ["a", "b"]
            })),
            json!({"type": "OBJECT", "properties": {"b": {"type": "STRING"}}, "required": ["b"]})
        );
    }

    /// A root with no properties declares nothing (Gemini refuses an empty
    /// OBJECT), unless it is a choice of schemas.
    #[test]
    fn a_root_declares_nothing_without_properties_or_choices() {
        for nothing in [
            json!({"type": "OBJECT"}),
            json!({"type": "OBJECT", "properties": {}}),
            json!({"properties": true}),
            json!(true),
        ] {
            assert!(declares_nothing(&nothing), "{nothing}");
        }
        for something in [
            json!({"type": "OBJECT", "properties": {"q": {"type": "STRING"}}}),
            json!({"anyOf": [{"type": "OBJECT"}]}),
        ] {
            assert!(!declares_nothing(&something), "{something}");
        }
    }
}
