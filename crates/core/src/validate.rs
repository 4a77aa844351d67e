//! Argument pre-validation: catches the mistakes a model can fix (a missing
//! argument, a wrong type) before the handler runs, and says how to fix them.
//!
//! The rule throughout is "never stricter than the tool": a schema we cannot
//! use, or one that says nothing, lets every call through, because refusing a
//! call the tool would have accepted costs the user more than letting the tool
//! report its own error.

use std::borrow::Cow;
use std::panic::{AssertUnwindSafe, catch_unwind};

use jsonschema::Validator;
use jsonschema::error::{TypeKind, ValidationErrorKind};
use jsonschema::types::JsonType;
use serde_json::{Map, Value};

use crate::excerpt::excerpt;
use crate::lenient;
use crate::outcome::{ErrorReason, ToolError};

/// Bounds the schema/value walks so a hostile, deeply nested schema or value
/// cannot exhaust the stack.
const MAX_DEPTH: usize = 64;

/// Keeps details and hints readable when a schema carries a long description
/// or the offending value is large (jsonschema's messages quote the value).
const MAX_TEXT: usize = 300;

/// jsonschema panicked while compiling a schema (see [`build_validator`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Panicked;

/// Compiles a schema that comes from a third party (an MCP server's input
/// or output schema, a tool's definition): the one place HomeAgent builds
/// a jsonschema validator.
///
/// `offline()` keeps compilation from fetching remote or file `$ref`s even
/// if another crate turns jsonschema's resolver features back on. Formats
/// are annotations: tools routinely accept (and return) more than their
/// declared `format`. A panic inside jsonschema is caught, because this
/// runs third-party code on schemas from untrusted servers, in places (a
/// `OnceLock` init, an MCP server's supervisor) where unwinding would take
/// more down than one schema. The inner `Err` is jsonschema's message.
pub fn build_validator(schema: &Value) -> Result<Result<Validator, String>, Panicked> {
    catch_unwind(|| {
        jsonschema::options()
            .offline()
            .should_validate_formats(false)
            .build(schema)
            .map_err(|err| err.to_string())
    })
    .map_err(|_| Panicked)
}

/// `schema` with two common spellings of a type list said as one, or
/// `None` when nothing in it needs that:
///
/// - OpenAPI 3.0's `nullable: true` beside a `type` gets `"null"` added to
///   it. MCP servers ship schemas generated from OpenAPI or zod that way;
///   jsonschema knows no `nullable`, so it refused a null those schemas
///   allow, and the coercion dropped it as an absence.
/// - `anyOf` (or `oneOf`) whose branches are nothing but a `type` each (a
///   title or description aside) becomes that `type` list: pydantic and
///   FastMCP write `Optional[int]` so. The values accepted are the same
///   (a `oneOf` only when no two branches can both hold a value: not
///   `integer` beside `number`); the coercion and the error messages read
///   a type list, and did not look into the branches.
fn normalized(schema: &Value, depth: usize) -> Option<Value> {
    if depth > MAX_DEPTH {
        return None;
    }
    match schema {
        Value::Object(map) => {
            let mut changed: Option<Map<String, Value>> = None;
            for (key, value) in map {
                if let Some(inner) = normalized(value, depth + 1) {
                    changed
                        .get_or_insert_with(|| map.clone())
                        .insert(key.clone(), inner);
                }
            }
            let current = changed.as_ref().unwrap_or(map);
            if let Some(merged) = branch_types(current) {
                let out = changed.get_or_insert_with(|| map.clone());
                out.remove("anyOf");
                out.remove("oneOf");
                out.insert("type".into(), merged);
            }
            let current = changed.as_ref().unwrap_or(map);
            if current.get("nullable") == Some(&Value::Bool(true)) {
                let widened = match current.get("type") {
                    Some(Value::String(one)) if one != "null" => Some(Value::Array(vec![
                        Value::String(one.clone()),
                        "null".into(),
                    ])),
                    Some(Value::Array(types)) if !types.iter().any(|t| t == "null") => {
                        let mut types = types.clone();
                        types.push("null".into());
                        Some(Value::Array(types))
                    }
                    _ => None,
                };
                if let Some(types) = widened {
                    changed
                        .get_or_insert_with(|| map.clone())
                        .insert("type".into(), types);
                }
            }
            changed.map(Value::Object)
        }
        Value::Array(items) => {
            let mut changed: Option<Vec<Value>> = None;
            for (at, item) in items.iter().enumerate() {
                if let Some(inner) = normalized(item, depth + 1) {
                    changed.get_or_insert_with(|| items.clone())[at] = inner;
                }
            }
            changed.map(Value::Array)
        }
        _ => None,
    }
}

/// The `type` list an `anyOf`/`oneOf` of bare types stands for (see
/// [`normalized`]), when the object has one and no `type` of its own.
fn branch_types(map: &Map<String, Value>) -> Option<Value> {
    if map.contains_key("type") {
        return None;
    }
    let (keyword, branches) = match (map.get("anyOf"), map.get("oneOf")) {
        (Some(Value::Array(branches)), None) => ("anyOf", branches),
        (None, Some(Value::Array(branches))) => ("oneOf", branches),
        _ => return None,
    };
    let mut types: Vec<Value> = Vec::with_capacity(branches.len());
    for branch in branches {
        let Value::Object(branch) = branch else {
            return None;
        };
        let bare = branch
            .keys()
            .all(|k| matches!(k.as_str(), "type" | "title" | "description"));
        match branch.get("type") {
            Some(Value::String(t)) if bare && !types.iter().any(|have| have == t) => {
                types.push(Value::String(t.clone()));
            }
            _ => return None,
        }
    }
    let overlapping = types.iter().any(|t| t == "integer") && types.iter().any(|t| t == "number");
    if types.is_empty() || (keyword == "oneOf" && overlapping) {
        return None;
    }
    Some(Value::Array(types))
}

/// A tool's argument schema, compiled once and reused for every call.
pub struct CompiledSchema {
    /// The raw schema: coercion and hints read `properties`, `required`,
    /// `type` and `description` from it directly.
    schema: Value,
    /// `None` means "do not enforce": no schema, or one we could not use.
    validator: Option<Validator>,
    /// Why the schema is not enforced, for the caller to attach to outcomes.
    warning: Option<String>,
}

// `ToolDef` shares the compiled schema across threads in an `Arc<OnceLock<_>>`.
const _: () = {
    const fn assert_send_sync<T: Send + Sync>() {}
    assert_send_sync::<CompiledSchema>();
};

impl CompiledSchema {
    /// Compile once per tool definition (cached by the caller in ToolDef).
    ///
    /// Never fails: a schema that cannot be compiled is recorded as a warning
    /// and the tool's calls pass unchecked.
    pub fn compile(schema: &Value) -> Self {
        let unenforced = |warning: Option<String>| CompiledSchema {
            schema: Value::Null,
            validator: None,
            warning,
        };
        match schema {
            Value::Null | Value::Bool(true) => return unenforced(None),
            Value::Object(map) if map.is_empty() => return unenforced(None),
            // `false` would refuse every call, which no working tool means.
            Value::Bool(false) => {
                return unenforced(Some(
                    "argument schema is `false` (rejects everything); not enforced".into(),
                ));
            }
            _ => {}
        }
        let rewritten = normalized(schema, 0);
        let schema = rewritten.as_ref().unwrap_or(schema);
        match build_validator(schema) {
            Ok(Ok(_)) if !root_may_be_object(schema) => unenforced(Some(format!(
                "argument schema's root type is {} rather than object; not enforced",
                plain_types(schema).unwrap_or_default().join(" or ")
            ))),
            Ok(Ok(validator)) => CompiledSchema {
                schema: schema.clone(),
                validator: Some(validator),
                warning: None,
            },
            Ok(Err(err)) => unenforced(Some(format!(
                "argument schema could not be compiled ({}); not enforced",
                excerpt(&err, MAX_TEXT)
            ))),
            Err(Panicked) => unenforced(Some(
                "argument schema could not be compiled (the validator panicked); not enforced"
                    .into(),
            )),
        }
    }

    /// Coerce lenient forms in place, then validate. Ok(warnings) or the ToolError.
    ///
    /// Coercion happens first and in place so the handler receives the same
    /// values the validator accepted.
    pub fn prepare(&self, tool: &str, arguments: &mut Value) -> Result<Vec<String>, ToolError> {
        require_object(arguments)?;
        let Some(validator) = &self.validator else {
            return Ok(self.warning.iter().cloned().collect());
        };
        coerce(&self.schema, arguments, 0);
        let arguments: &Value = arguments;
        match catch_unwind(AssertUnwindSafe(|| {
            first_error(validator, &self.schema, arguments)
        })) {
            Ok(None) => Ok(Vec::new()),
            Ok(Some(err)) => Err(err),
            // A validator bug must not block the tool; say so instead.
            Err(_) => Ok(vec![format!(
                "argument validation for tool {tool} panicked; arguments passed unchecked"
            )]),
        }
    }
}

/// Picks the error the model can act on best: a missing argument first, then
/// a wrong type, then anything else, each the first jsonschema reports.
fn first_error(validator: &Validator, schema: &Value, arguments: &Value) -> Option<ToolError> {
    let mut type_error = None;
    let mut other = None;
    for error in validator.iter_errors(arguments) {
        match error.kind() {
            ValidationErrorKind::Required { property } => {
                return Some(required_error(
                    schema,
                    arguments,
                    error.instance_path().as_str(),
                    property,
                ));
            }
            ValidationErrorKind::Type { kind } => {
                if type_error.is_none() {
                    type_error = Some(type_mismatch(
                        schema,
                        arguments,
                        error.instance_path().as_str(),
                        kind,
                        error.instance(),
                    ));
                }
            }
            kind => {
                if other.is_none() {
                    other = Some(other_error(
                        schema,
                        arguments,
                        error.instance_path().as_str(),
                        kind,
                        &error.to_string(),
                    ));
                }
            }
        }
    }
    type_error.or(other)
}

fn required_error(schema: &Value, arguments: &Value, pointer: &str, property: &Value) -> ToolError {
    let name = match property {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    };
    let (parent, parent_schema) = locate(pointer, arguments, schema);
    let field = join_field(&parent, &name);
    let description = parent_schema
        .and_then(|s| s.get("properties"))
        .and_then(|p| p.get(&name))
        .and_then(description_of);
    let hint = match description {
        Some(d) => format!("add the `{field}` argument ({d}; required) and call the tool again"),
        None => format!("add the `{field}` argument (required) and call the tool again"),
    };
    ToolError::new(
        ErrorReason::Required,
        format!("missing required argument `{field}`"),
    )
    .with_field(field)
    .with_hint(hint)
}

fn type_mismatch(
    schema: &Value,
    arguments: &Value,
    pointer: &str,
    kind: &TypeKind,
    instance: &Value,
) -> ToolError {
    let expected: Vec<JsonType> = match kind {
        TypeKind::Single(t) => vec![*t],
        TypeKind::Multiple(set) => set.iter().collect(),
    };
    let names: Vec<&str> = expected.iter().map(|t| t.as_str()).collect();
    let (field, _) = locate(pointer, arguments, schema);
    let got = json_type_name(instance);
    let how: Vec<&str> = expected.iter().map(|t| how_to_send(*t)).collect();
    if field.is_empty() {
        return ToolError::new(
            ErrorReason::Type,
            format!("arguments must be {}, got {got}", names.join(" or ")),
        )
        .with_hint(format!("send the arguments as {}", how.join(" or ")));
    }
    ToolError::new(
        ErrorReason::Type,
        format!(
            "argument `{field}` must be {}, got {got}",
            names.join(" or ")
        ),
    )
    .with_hint(format!(
        "send `{field}` as {} and call the tool again",
        how.join(" or ")
    ))
    .with_field(field)
}

fn other_error(
    schema: &Value,
    arguments: &Value,
    pointer: &str,
    kind: &ValidationErrorKind,
    message: &str,
) -> ToolError {
    let (mut field, located) = locate(pointer, arguments, schema);
    let message = excerpt(message, MAX_TEXT);
    let detail = if field.is_empty() {
        format!("arguments: {message}")
    } else {
        format!("argument `{field}`: {message}")
    };
    let hint = match kind {
        ValidationErrorKind::AdditionalProperties { unexpected } => {
            if let Some(extra) = unexpected.first() {
                field = join_field(&field, extra);
            }
            let known: Vec<&str> = located
                .and_then(|s| s.get("properties"))
                .and_then(Value::as_object)
                .map(|p| p.keys().map(String::as_str).collect())
                .unwrap_or_default();
            let extra = unexpected.join("`, `");
            if known.is_empty() {
                format!("remove `{extra}` (the tool does not take it) and call the tool again")
            } else {
                excerpt(
                    &format!(
                        "remove `{extra}` (the tool does not take it; it takes: {}) and call the tool again",
                        known.join(", ")
                    ),
                    MAX_TEXT,
                )
                .into_owned()
            }
        }
        ValidationErrorKind::Enum { options } => excerpt(
            &format!(
                "use one of the allowed values for `{field}`: {options} and call the tool again"
            ),
            MAX_TEXT,
        )
        .into_owned(),
        _ if field.is_empty() => {
            "fix the arguments to match the tool's schema and call the tool again".into()
        }
        _ => format!("change `{field}` to satisfy the tool's schema and call the tool again"),
    };
    let err = ToolError::new(ErrorReason::InvalidArguments, detail).with_hint(hint);
    if field.is_empty() {
        err
    } else {
        err.with_field(field)
    }
}

/// Turns jsonschema's JSON Pointer into the dotted path a model reads
/// (`options.depth`, `files[1].name`) and finds the subschema at that place.
///
/// The pointer alone cannot tell the key `"0"` from index 0, so the walk
/// follows the arguments themselves to decide.
fn locate<'s>(pointer: &str, arguments: &Value, schema: &'s Value) -> (String, Option<&'s Value>) {
    let mut path = String::new();
    let mut value = Some(arguments);
    let mut sub = Some(schema);
    for raw in pointer.split('/').skip(1) {
        let segment = unescape_pointer(raw);
        let index = match value {
            Some(Value::Array(_)) => segment.parse::<usize>().ok(),
            _ => None,
        };
        match index {
            Some(i) => {
                path.push_str(&format!("[{i}]"));
                value = value.and_then(|v| v.get(i));
                sub = sub.and_then(|s| s.get("items")).filter(|s| s.is_object());
            }
            None => {
                path = join_field(&path, &segment);
                value = value.and_then(|v| v.get(segment.as_ref()));
                sub = sub
                    .and_then(|s| s.get("properties"))
                    .and_then(|p| p.get(segment.as_ref()));
            }
        }
    }
    (path, sub)
}

fn unescape_pointer(raw: &str) -> Cow<'_, str> {
    if raw.contains('~') {
        Cow::Owned(raw.replace("~1", "/").replace("~0", "~"))
    } else {
        Cow::Borrowed(raw)
    }
}

fn join_field(parent: &str, name: &str) -> String {
    if parent.is_empty() {
        name.to_owned()
    } else {
        format!("{parent}.{name}")
    }
}

fn description_of(schema: &Value) -> Option<String> {
    let text = schema
        .get("description")?
        .as_str()?
        .trim()
        .trim_end_matches('.')
        .trim_end();
    (!text.is_empty()).then(|| excerpt(text, MAX_TEXT / 2).into_owned())
}

/// How to write a value of the type, in words a model follows.
fn how_to_send(t: JsonType) -> &'static str {
    match t {
        JsonType::Integer => "an integer (a whole number without quotes, e.g. 20)",
        JsonType::Number => "a number without quotes (e.g. 1.5)",
        JsonType::Boolean => "a boolean (true or false, without quotes)",
        JsonType::String => "a string (in double quotes)",
        JsonType::Array => "a JSON array ([...])",
        JsonType::Object => "a JSON object ({...})",
        JsonType::Null => "null",
    }
}

/// The type a model would call the value: whole numbers are integers.
pub fn json_type_name(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(n) if n.is_i64() || n.is_u64() => "integer",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

/// Arguments are always an object, so a schema whose root cannot be one
/// would make the tool uncallable.
fn root_may_be_object(schema: &Value) -> bool {
    plain_types(schema).is_none_or(|types| types.contains(&"object"))
}

/// The `type` keyword when it is plain: a name or a list of names.
fn plain_types(schema: &Value) -> Option<Vec<&str>> {
    match schema.get("type")? {
        Value::String(t) => Some(vec![t.as_str()]),
        Value::Array(list) => list.iter().map(Value::as_str).collect(),
        _ => None,
    }
}

/// Rewrites the forms models really send into what the schema asks for.
///
/// Only unambiguous cases are touched, and only where the schema states a
/// plain `type`: a value the schema already accepts is never changed.
fn coerce(schema: &Value, value: &mut Value, depth: usize) {
    if depth > MAX_DEPTH || !schema.is_object() {
        return;
    }
    match value {
        Value::Object(map) => coerce_object(schema, map, depth),
        Value::Array(items) => {
            if let Some(item_schema) = schema.get("items").filter(|s| s.is_object()) {
                for item in items {
                    coerce(item_schema, item, depth + 1);
                }
            }
        }
        Value::String(s) => {
            if let Some(coerced) = coerce_string(schema, s) {
                *value = coerced;
            }
        }
        // `100.0` passes an `integer` schema (JSON Schema counts it as
        // one), and a tool reading an integer would refuse it.
        Value::Number(n) if n.is_f64() => {
            if let Some(types) = plain_types(schema)
                && types.contains(&"integer")
                && !types.contains(&"number")
                && let Some(whole) = lenient::integral(n)
            {
                *value = whole;
            }
        }
        _ => {}
    }
}

/// Arguments are a JSON object on every wire and in MCP, whatever the
/// tool's schema (or lack of one) says; anything else is refused.
pub(crate) fn require_object(arguments: &Value) -> Result<(), ToolError> {
    if arguments.is_object() {
        return Ok(());
    }
    Err(ToolError::new(
        ErrorReason::InvalidArguments,
        format!(
            "arguments must be a JSON object, got {}",
            json_type_name(arguments)
        ),
    )
    .with_hint("send the arguments as a JSON object of named arguments, e.g. {\"name\": value}"))
}

/// Drops `null`s the model sent to mean "no value", then coerces each
/// declared property.
fn coerce_object(schema: &Value, map: &mut Map<String, Value>, depth: usize) {
    let properties = schema.get("properties").and_then(Value::as_object);
    // Nearly every call sends no null: skip the lists built to drop them
    // (this runs before every call, and its cost grew with the schema).
    if map.values().any(Value::is_null) {
        drop_meaningless_nulls(properties, map, depth);
    }
    if let Some(properties) = properties {
        for (key, sub) in properties {
            if let Some(v) = map.get_mut(key) {
                coerce(sub, v, depth + 1);
            }
        }
    }
}

/// The null-dropping half of [`coerce_object`].
fn drop_meaningless_nulls(
    properties: Option<&Map<String, Value>>,
    map: &mut Map<String, Value>,
    depth: usize,
) {
    let property = |key: &str| properties.and_then(|p| p.get(key));
    // A null the property's schema cannot hold means "no value": dropped,
    // so an optional argument takes its default and a required one is
    // reported missing (the model is told to supply it). A null the schema
    // allows, or one for an undeclared property, is a value and stays.
    let drop: Vec<String> = map
        .iter()
        .filter(|(key, v)| v.is_null() && property(key).is_some_and(|s| !allows_null(s, depth)))
        .map(|(key, _)| key.clone())
        .collect();
    for key in drop {
        map.remove(&key);
    }
}

/// Whether the schema accepts `null`, judged from its own keywords; a
/// `$ref`, `allOf` or `not` is not followed and counts as "no".
fn allows_null(schema: &Value, depth: usize) -> bool {
    let Value::Object(map) = schema else {
        return schema == &Value::Bool(true);
    };
    if depth > MAX_DEPTH {
        return false;
    }
    if let Some(types) = plain_types(schema) {
        return types.contains(&"null");
    }
    if map.get("nullable") == Some(&Value::Bool(true)) || map.get("const") == Some(&Value::Null) {
        return true;
    }
    if let Some(Value::Array(options)) = map.get("enum") {
        return options.contains(&Value::Null);
    }
    for key in ["anyOf", "oneOf"] {
        if let Some(Value::Array(branches)) = map.get(key) {
            return branches.iter().any(|b| allows_null(b, depth + 1));
        }
    }
    // No constraint on the value at all: null is valid.
    ![
        "type", "enum", "const", "anyOf", "oneOf", "allOf", "not", "$ref",
    ]
    .iter()
    .any(|k| map.contains_key(*k))
}

/// `"true"`/`"false"` for booleans and numeric strings for numbers, only when
/// the schema does not also accept a string.
fn coerce_string(schema: &Value, s: &str) -> Option<Value> {
    // Most strings are declared strings: answered without listing the types.
    if let Some(Value::String(only)) = schema.get("type")
        && only == "string"
    {
        return None;
    }
    let types = plain_types(schema)?;
    if types.contains(&"string") {
        return None;
    }
    if types.contains(&"boolean")
        && let Some(b) = lenient::boolean(s)
    {
        return Some(Value::Bool(b));
    }
    let wants_integer = types.contains(&"integer");
    let wants_number = types.contains(&"number");
    if !wants_integer && !wants_number {
        return None;
    }
    if let Some(whole) = lenient::integer(s) {
        return Some(whole);
    }
    wants_number
        .then(|| lenient::number(s).map(Value::Number))
        .flatten()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn prepare(schema: Value, mut args: Value) -> (Result<Vec<String>, ToolError>, Value) {
        let compiled = CompiledSchema::compile(&schema);
        let result = compiled.prepare("t", &mut args);
        (result, args)
    }

    fn fail(schema: Value, args: Value) -> ToolError {
        match prepare(schema, args.clone()).0 {
            Err(err) => err,
            Ok(w) => panic!("expected an error for {args}, passed with warnings {w:?}"),
        }
    }

    fn pass(schema: Value, args: Value) -> (Vec<String>, Value) {
        let (result, coerced) = prepare(schema, args.clone());
        match result {
            Ok(w) => (w, coerced),
            Err(err) => panic!("expected {args} to pass, got {err:?}"),
        }
    }

    fn read_file_schema() -> Value {
        json!({
            "type": "object",
            "properties": {
                "path": {"type": "string", "description": "The file to read."},
                "count": {"type": "integer"},
                "ratio": {"type": "number"},
                "verbose": {"type": "boolean"},
                "mode": {"type": "string", "enum": ["text", "binary"]},
                "options": {
                    "type": "object",
                    "properties": {
                        "depth": {"type": "integer", "description": "how deep to recurse"},
                        "follow": {"type": "boolean"}
                    },
                    "required": ["depth"]
                },
                "files": {
                    "type": "array",
                    "items": {
                        "type": "object",
                        "properties": {"name": {"type": "string"}, "size": {"type": "integer"}},
                        "required": ["name"]
                    }
                },
                "limits": {"type": "array", "items": {"type": "integer"}}
            },
            "required": ["path"]
        })
    }

    #[test]
    fn compiled_schema_is_send_and_sync() {
        fn assert_send_sync<T: Send + Sync>() {}
        assert_send_sync::<CompiledSchema>();
    }

    #[test]
    fn missing_required_with_empty_arguments() {
        let err = fail(read_file_schema(), json!({}));
        assert_eq!(err.reason, ErrorReason::Required);
        assert_eq!(err.field.as_deref(), Some("path"));
        assert_eq!(err.detail, "missing required argument `path`");
        assert_eq!(
            err.hint.as_deref(),
            Some("add the `path` argument (The file to read; required) and call the tool again")
        );
    }

    #[test]
    fn missing_required_among_other_arguments() {
        let err = fail(read_file_schema(), json!({"count": 3, "verbose": true}));
        assert_eq!(err.reason, ErrorReason::Required);
        assert_eq!(err.field.as_deref(), Some("path"));
    }

    #[test]
    fn missing_nested_required_names_dotted_path_and_description() {
        let err = fail(
            read_file_schema(),
            json!({"path": "a", "options": {"follow": true}}),
        );
        assert_eq!(err.reason, ErrorReason::Required);
        assert_eq!(err.field.as_deref(), Some("options.depth"));
        assert_eq!(err.detail, "missing required argument `options.depth`");
        let hint = err.hint.unwrap_or_default();
        assert!(hint.contains("`options.depth`"), "{hint}");
        assert!(hint.contains("how deep to recurse"), "{hint}");
    }

    #[test]
    fn missing_required_inside_array_item() {
        let err = fail(
            read_file_schema(),
            json!({"path": "a", "files": [{"name": "x"}, {"size": 1}]}),
        );
        assert_eq!(err.reason, ErrorReason::Required);
        assert_eq!(err.field.as_deref(), Some("files[1].name"));
    }

    #[test]
    fn required_without_description_still_hints_the_field() {
        let schema =
            json!({"type": "object", "properties": {"q": {"type": "string"}}, "required": ["q"]});
        let err = fail(schema, json!({}));
        assert_eq!(
            err.hint.as_deref(),
            Some("add the `q` argument (required) and call the tool again")
        );
    }

    #[test]
    fn required_listed_without_properties_is_reported() {
        let schema = json!({"type": "object", "required": ["q"]});
        let err = fail(schema, json!({}));
        assert_eq!(err.reason, ErrorReason::Required);
        assert_eq!(err.field.as_deref(), Some("q"));
    }

    #[test]
    fn several_missing_report_the_same_first_one_every_time() {
        let schema = json!({
            "type": "object",
            "properties": {"b": {"type": "string"}, "a": {"type": "string"}},
            "required": ["b", "a"]
        });
        let first = fail(schema.clone(), json!({}));
        assert_eq!(first.field.as_deref(), Some("b"));
        for _ in 0..5 {
            assert_eq!(fail(schema.clone(), json!({})), first);
        }
    }

    #[test]
    fn required_null_is_treated_as_missing() {
        let err = fail(read_file_schema(), json!({"path": null}));
        assert_eq!(err.reason, ErrorReason::Required);
        assert_eq!(err.field.as_deref(), Some("path"));
    }

    #[test]
    fn required_null_is_kept_when_the_schema_allows_null() {
        let schema = json!({
            "type": "object",
            "properties": {
                "a": {"type": ["string", "null"]},
                "b": {"anyOf": [{"type": "integer"}, {"type": "null"}]}
            },
            "required": ["a", "b"]
        });
        let (_, args) = pass(schema, json!({"a": null, "b": null}));
        assert_eq!(args, json!({"a": null, "b": null}));
    }

    #[test]
    fn an_optional_null_the_schema_allows_is_a_value_not_an_absence() {
        // `null` can mean "clear the due date"; dropping it would turn the
        // call into "leave it as it is".
        let schema = json!({
            "type": "object",
            "properties": {
                "due": {"type": ["string", "null"]},
                "note": {"type": "string"}
            }
        });
        let (_, args) = pass(schema, json!({"due": null, "note": null}));
        assert_eq!(
            args,
            json!({"due": null}),
            "the null `note` cannot hold is dropped"
        );
    }

    /// OpenAPI 3.0's `nullable: true` (schemas that MCP servers generate
    /// from OpenAPI or zod) lets a typed property hold null: the null is a
    /// value ("clear the due date"), kept and accepted, not dropped as an
    /// absence. jsonschema alone knows no `nullable` and refused it.
    #[test]
    fn an_openapi_nullable_property_keeps_its_null() {
        let schema = json!({
            "type": "object",
            "properties": {
                "due": {"type": "string", "nullable": true},
                "tags": {"type": "array", "items": {"type": "integer", "nullable": true}},
                "note": {"type": "string"}
            },
            "required": ["due"]
        });
        let (_, args) = pass(
            schema.clone(),
            json!({"due": null, "tags": [1, null], "note": null}),
        );
        assert_eq!(args, json!({"due": null, "tags": [1, null]}));
        // Still typed: nullable adds null, nothing else.
        let err = fail(schema, json!({"due": 5}));
        assert_eq!(err.reason, ErrorReason::Type, "{err:?}");
        assert!(err.detail.contains("null or string"), "{err:?}");
    }

    /// `Optional[int] = None` as pydantic and FastMCP write it: `anyOf` of
    /// plain types. A numeric string is coerced as for a plain `integer`,
    /// and a wrong value is told the types it may be, not "not valid under
    /// any of the schemas listed in the 'anyOf' keyword".
    #[test]
    fn an_any_of_plain_types_is_coerced_and_explained_like_a_type_list() {
        let schema = json!({
            "type": "object",
            "properties": {
                "limit": {"anyOf": [{"type": "integer"}, {"type": "null"}], "default": null},
                "tag": {"oneOf": [{"type": "string"}, {"type": "null"}]}
            }
        });
        let (_, args) = pass(schema.clone(), json!({"limit": "10", "tag": null}));
        assert_eq!(args, json!({"limit": 10, "tag": null}));
        let err = fail(schema, json!({"limit": "many"}));
        assert_eq!(err.reason, ErrorReason::Type, "{err:?}");
        assert!(err.detail.contains("must be null or integer"), "{err:?}");
        // A oneOf whose branches overlap keeps its meaning: 3 is an integer
        // and a number, so it matches both and is refused.
        let overlapping = json!({
            "type": "object",
            "properties": {"n": {"oneOf": [{"type": "integer"}, {"type": "number"}]}}
        });
        pass(overlapping.clone(), json!({"n": 2.5}));
        fail(overlapping, json!({"n": 3}));
    }

    #[test]
    fn a_required_null_with_no_declared_schema_is_accepted() {
        // Nothing constrains `x`, so null is as valid as any value.
        let schema = json!({"type": "object", "required": ["x"]});
        let (_, args) = pass(schema, json!({"x": null}));
        assert_eq!(args, json!({"x": null}));
    }

    #[test]
    fn required_error_wins_over_type_and_other_errors() {
        let err = fail(
            read_file_schema(),
            json!({"count": "many", "mode": "weird"}),
        );
        assert_eq!(err.reason, ErrorReason::Required);
        assert_eq!(err.field.as_deref(), Some("path"));
        // jsonschema reports `count` (type) and `mode` (enum) before the
        // nested required error; the required one must still be chosen.
        let err = fail(
            read_file_schema(),
            json!({"path": "a", "count": "many", "mode": "weird", "options": {}}),
        );
        assert_eq!(err.reason, ErrorReason::Required);
        assert_eq!(err.field.as_deref(), Some("options.depth"));
    }

    #[test]
    fn type_error_wins_over_other_errors() {
        let err = fail(
            read_file_schema(),
            json!({"path": "a", "mode": "weird", "count": "many"}),
        );
        assert_eq!(err.reason, ErrorReason::Type);
        assert_eq!(err.field.as_deref(), Some("count"));
    }

    /// Coercion walks schema and arguments together by recursion, so it
    /// stops at `MAX_DEPTH` levels: what lies deeper is left as sent (and
    /// validated as sent).
    #[test]
    fn coercion_stops_at_the_depth_limit() {
        fn nested(levels: usize, leaf_schema: Value, leaf: Value) -> (Value, Value) {
            let mut schema = json!({"type": "object", "properties": {"n": leaf_schema}});
            let mut args = json!({"n": leaf});
            for _ in 0..levels {
                schema = json!({"type": "object", "properties": {"a": schema}});
                args = json!({"a": args});
            }
            (schema, args)
        }
        let leaf = |args: &Value, levels: usize| {
            let mut at = args;
            for _ in 0..levels {
                at = &at["a"];
            }
            at["n"].clone()
        };
        let (schema, mut shallow) = nested(10, json!({"type": "integer"}), json!("5"));
        coerce(&schema, &mut shallow, 0);
        assert_eq!(leaf(&shallow, 10), json!(5));
        let (schema, mut deep) = nested(MAX_DEPTH + 5, json!({"type": "integer"}), json!("5"));
        coerce(&schema, &mut deep, 0);
        assert_eq!(leaf(&deep, MAX_DEPTH + 5), json!("5"));
    }

    #[test]
    fn lenient_forms_are_coerced_in_place() {
        let (warnings, args) = pass(
            read_file_schema(),
            json!({
                "path": "a",
                "verbose": "true",
                "count": "20",
                "ratio": "1.5",
                "mode": null,
                "options": {"depth": " 7 ", "follow": "false"},
                "files": [{"name": "x", "size": "20.0"}],
                "limits": ["1", 2, "3"]
            }),
        );
        assert!(warnings.is_empty());
        assert_eq!(
            args,
            json!({
                "path": "a",
                "verbose": true,
                "count": 20,
                "ratio": 1.5,
                "options": {"depth": 7, "follow": false},
                "files": [{"name": "x", "size": 20}],
                "limits": [1, 2, 3]
            })
        );
        assert!(args["count"].is_i64());
        assert!(args.get("mode").is_none());
    }

    #[test]
    fn integral_string_for_a_number_becomes_a_number() {
        let (_, args) = pass(read_file_schema(), json!({"path": "a", "ratio": "2"}));
        assert_eq!(args["ratio"], json!(2));
    }

    #[test]
    fn fractional_string_for_an_integer_fails_as_type() {
        let err = fail(read_file_schema(), json!({"path": "a", "count": "1.5"}));
        assert_eq!(err.reason, ErrorReason::Type);
        assert_eq!(err.field.as_deref(), Some("count"));
        assert_eq!(err.detail, "argument `count` must be integer, got string");
        assert!(err.hint.unwrap_or_default().contains("whole number"));
    }

    #[test]
    fn nothing_else_is_coerced() {
        // A string the schema also accepts stays a string.
        let schema =
            json!({"type": "object", "properties": {"v": {"type": ["string", "integer"]}}});
        let (_, args) = pass(schema, json!({"v": "20"}));
        assert_eq!(args, json!({"v": "20"}));
        // Nearly-boolean and non-JSON numeric spellings are not guessed at.
        for bad in ["True", "yes", "1", " true"] {
            let err = fail(read_file_schema(), json!({"path": "a", "verbose": bad}));
            assert_eq!(err.reason, ErrorReason::Type, "{bad}");
        }
        for bad in ["NaN", "inf", "+1", "1e999", "", "0x10"] {
            let err = fail(read_file_schema(), json!({"path": "a", "ratio": bad}));
            assert_eq!(err.reason, ErrorReason::Type, "{bad}");
        }
        // A number is not turned into a string, and an undeclared null stays.
        let schema = json!({"type": "object", "properties": {"s": {"type": "string"}}});
        let err = fail(schema.clone(), json!({"s": 5}));
        assert_eq!(err.reason, ErrorReason::Type);
        let (_, args) = pass(schema, json!({"other": null}));
        assert_eq!(args, json!({"other": null}));
    }

    #[test]
    fn wrong_types_name_field_expected_and_received() {
        let err = fail(read_file_schema(), json!({"path": {"p": 1}}));
        assert_eq!(err.reason, ErrorReason::Type);
        assert_eq!(err.field.as_deref(), Some("path"));
        assert_eq!(err.detail, "argument `path` must be string, got object");
        assert!(
            err.hint
                .unwrap_or_default()
                .contains("send `path` as a string")
        );

        let err = fail(read_file_schema(), json!({"path": "a", "count": "abc"}));
        assert_eq!(err.reason, ErrorReason::Type);
        assert_eq!(err.detail, "argument `count` must be integer, got string");

        let err = fail(read_file_schema(), json!({"path": "a", "options": [1, 2]}));
        assert_eq!(err.reason, ErrorReason::Type);
        assert_eq!(err.field.as_deref(), Some("options"));
        assert_eq!(err.detail, "argument `options` must be object, got array");

        let err = fail(
            read_file_schema(),
            json!({"path": "a", "files": [{"name": "x", "size": true}]}),
        );
        assert_eq!(err.field.as_deref(), Some("files[0].size"));
        assert_eq!(
            err.detail,
            "argument `files[0].size` must be integer, got boolean"
        );
    }

    #[test]
    fn several_allowed_types_are_all_named() {
        let schema = json!({"type": "object", "properties": {"v": {"type": ["integer", "null"]}}});
        let err = fail(schema, json!({"v": [1]}));
        assert_eq!(err.reason, ErrorReason::Type);
        assert_eq!(
            err.detail,
            "argument `v` must be null or integer, got array"
        );
    }

    #[test]
    fn numeric_looking_object_keys_are_keys_not_indices() {
        let schema = json!({
            "type": "object",
            "properties": {"m": {"type": "object", "properties": {"0": {"type": "string"}}}}
        });
        let err = fail(schema, json!({"m": {"0": 1}}));
        assert_eq!(err.field.as_deref(), Some("m.0"));
    }

    #[test]
    fn non_object_arguments_are_invalid() {
        for args in [json!("path=a"), json!([1]), json!(null), json!(3)] {
            let err = fail(read_file_schema(), args.clone());
            assert_eq!(err.reason, ErrorReason::InvalidArguments, "{args}");
            assert!(
                err.detail.contains("must be a JSON object"),
                "{}",
                err.detail
            );
        }
    }

    #[test]
    fn schema_less_tools_pass_anything() {
        for schema in [json!(null), json!({}), json!(true)] {
            for args in [json!({}), json!({"x": "1", "y": null})] {
                let (warnings, after) = pass(schema.clone(), args.clone());
                assert!(warnings.is_empty(), "{schema}");
                assert_eq!(after, args, "schema-less arguments are left untouched");
            }
            // Every wire and MCP sends arguments as an object; a hook's
            // rewrite or a direct call to anything else is refused.
            for args in [json!("ls -la"), json!(null), json!([1])] {
                let err = fail(schema.clone(), args.clone());
                assert_eq!(err.reason, ErrorReason::InvalidArguments, "{schema} {args}");
            }
        }
    }

    #[test]
    fn object_schema_without_properties_passes_any_object() {
        let (warnings, args) = pass(
            json!({"type": "object"}),
            json!({"a": 1, "b": [null], "c": "x"}),
        );
        assert!(warnings.is_empty());
        assert_eq!(args, json!({"a": 1, "b": [null], "c": "x"}));
    }

    #[test]
    fn invalid_schemas_pass_with_a_warning() {
        let cases = [
            (json!({"type": "not-a-type"}), "could not be compiled"),
            (
                json!({"type": "object", "properties": {"a": {"pattern": "(unclosed"}}}),
                "could not be compiled",
            ),
            (
                json!({"type": "object", "required": "path"}),
                "could not be compiled",
            ),
            (json!(false), "`false`"),
            (json!({"type": "string"}), "root type is string"),
            (json!("a string"), "could not be compiled"),
        ];
        for (schema, expected) in cases {
            let (warnings, args) = pass(schema.clone(), json!({"anything": [1, "2"]}));
            assert_eq!(warnings.len(), 1, "{schema}");
            assert!(warnings[0].contains(expected), "{schema}: {}", warnings[0]);
            assert_eq!(args, json!({"anything": [1, "2"]}));
        }
    }

    #[test]
    fn enum_violation_is_invalid_arguments_with_field() {
        let err = fail(read_file_schema(), json!({"path": "a", "mode": "hex"}));
        assert_eq!(err.reason, ErrorReason::InvalidArguments);
        assert_eq!(err.field.as_deref(), Some("mode"));
        assert!(
            err.detail.starts_with("argument `mode`: "),
            "{}",
            err.detail
        );
        assert!(err.detail.contains("is not one of"), "{}", err.detail);
        assert!(err.hint.unwrap_or_default().contains("\"text\""));
    }

    #[test]
    fn other_violations_are_invalid_arguments() {
        let schema = json!({
            "type": "object",
            "properties": {
                "n": {"type": "integer", "minimum": 1},
                "id": {"type": "string", "pattern": "^[a-z]+$"}
            },
            "additionalProperties": false
        });
        let err = fail(schema.clone(), json!({"n": "0"}));
        assert_eq!(err.reason, ErrorReason::InvalidArguments);
        assert_eq!(err.field.as_deref(), Some("n"));
        assert!(
            err.detail.contains("less than the minimum"),
            "{}",
            err.detail
        );

        let err = fail(schema.clone(), json!({"id": "ABC"}));
        assert_eq!(err.reason, ErrorReason::InvalidArguments);
        assert_eq!(err.field.as_deref(), Some("id"));

        let err = fail(schema, json!({"n": 2, "extra": 1}));
        assert_eq!(err.reason, ErrorReason::InvalidArguments);
        assert_eq!(err.field.as_deref(), Some("extra"));
        assert!(
            err.detail.contains("Additional properties are not allowed"),
            "{}",
            err.detail
        );
        let hint = err.hint.unwrap_or_default();
        assert!(hint.contains("`extra`") && hint.contains("id, n"), "{hint}");
    }

    #[test]
    fn formats_are_not_enforced() {
        let schema = json!({
            "$schema": "http://json-schema.org/draft-07/schema#",
            "type": "object",
            "properties": {"url": {"type": "string", "format": "uri"}}
        });
        pass(schema, json!({"url": "./relative/path"}));
    }

    #[test]
    fn remote_ref_is_never_fetched_and_passes_with_a_warning() {
        let (warnings, _) = pass(
            json!({"$ref": "https://example.com/s.json"}),
            json!({"a": 1}),
        );
        assert_eq!(warnings.len(), 1);
        assert!(
            warnings[0].contains("https://example.com/s.json"),
            "{}",
            warnings[0]
        );

        // A listener the schema points at must see no connection attempt.
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        listener.set_nonblocking(true).unwrap();
        let port = listener.local_addr().unwrap().port();
        let schema = json!({
            "type": "object",
            "properties": {"a": {"$ref": format!("http://127.0.0.1:{port}/s.json")}}
        });
        let (warnings, _) = pass(schema, json!({"a": 1}));
        assert_eq!(warnings.len(), 1);
        assert!(warnings[0].contains("not enforced"), "{}", warnings[0]);
        match listener.accept() {
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
            other => panic!("the schema's $ref was fetched: {other:?}"),
        }
    }

    #[test]
    fn local_refs_still_validate() {
        let schema = json!({
            "type": "object",
            "properties": {"p": {"$ref": "#/$defs/point"}},
            "$defs": {"point": {"type": "object", "required": ["x"]}}
        });
        let err = fail(schema, json!({"p": {}}));
        assert_eq!(err.reason, ErrorReason::Required);
        assert_eq!(err.field.as_deref(), Some("p.x"));
    }

    #[test]
    fn odd_schemas_and_arguments_do_not_panic() {
        let mut deep = json!({"type": "integer"});
        let mut deep_args = json!("1");
        for _ in 0..100 {
            deep = json!({"type": "object", "properties": {"a": deep}, "required": ["a"]});
            deep_args = json!({"a": deep_args});
        }
        let schemas = [
            json!({"properties": "nope"}),
            json!({"properties": {"a": 5}, "required": [1, null]}),
            json!({"type": "object", "properties": {"a": {"type": []}}}),
            json!({"items": [{"type": "integer"}], "properties": {"a": {"items": true}}}),
            json!({"type": "object", "properties": {"a": {"type": "integer", "maximum": 1e308}}}),
            json!({"type": "object", "properties": {"a~/b": {"type": "integer"}}, "required": ["a~/b"]}),
            deep,
        ];
        let args = [
            json!({}),
            json!({"a": null}),
            json!({"a": "9".repeat(400)}),
            json!({"a": "-0"}),
            json!({"a": ["1", {"b": null}]}),
            json!({"a~/b": "x"}),
            deep_args,
        ];
        for schema in &schemas {
            let compiled = CompiledSchema::compile(schema);
            for a in &args {
                let _ = compiled.prepare("t", &mut a.clone());
            }
        }
        let err = fail(schemas[5].clone(), json!({"a~/b": "x"}));
        assert_eq!(err.field.as_deref(), Some("a~/b"));
    }

    /// A number no float holds exactly, or a fraction the float rounds
    /// away, is not made an integer: the tool would get another number
    /// than the model wrote.
    #[test]
    fn a_string_no_integer_stands_for_exactly_fails_as_type() {
        let schema = json!({"type": "object", "properties": {"n": {"type": "integer"}}});
        for changed in ["1e20", "12345678901234567890123", "0.99999999999999999"] {
            let err = fail(schema.clone(), json!({"n": changed}));
            assert_eq!(err.reason, ErrorReason::Type, "{changed}");
        }
    }

    /// A whole number sent as a float (`100.0`) passes an `integer` schema
    /// (JSON Schema counts it as one), so it is made the integer the
    /// tools read, as `"100.0"` is; a `number` keeps its float.
    #[test]
    fn a_whole_float_for_an_integer_becomes_an_integer() {
        let (_, args) = pass(
            read_file_schema(),
            json!({"path": "a", "count": 100.0, "ratio": 2.0, "files": [{"name": "x", "size": 3.0}]}),
        );
        assert_eq!(args["count"].as_u64(), Some(100));
        assert!(args["count"].is_i64());
        assert_eq!(args["files"][0]["size"].as_u64(), Some(3));
        assert!(args["ratio"].is_f64());
        // Past 2^53 it stays as sent (a float no longer holds every integer).
        let (_, args) = pass(read_file_schema(), json!({"path": "a", "count": 1e19}));
        assert!(args["count"].is_f64());
    }

    /// `normalized` on its own: each spelling it rewrites, each it must
    /// leave alone, and its depth bound, through objects and arrays.
    #[test]
    fn normalized_rewrites_exactly_the_type_list_spellings() {
        let rewritten = [
            // nullable widens a type or a type list, wherever it stands.
            (
                json!({"type": "string", "nullable": true}),
                json!({"type": ["string", "null"], "nullable": true}),
            ),
            (
                json!({"type": ["string"], "nullable": true}),
                json!({"type": ["string", "null"], "nullable": true}),
            ),
            (
                json!({"properties": {"a": {"items": [{"type": "integer", "nullable": true}]}}}),
                json!({"properties": {"a": {"items": [{"type": ["integer", "null"], "nullable": true}]}}}),
            ),
            // anyOf / oneOf of bare types become the type list.
            (
                json!({"anyOf": [{"type": "integer"}, {"type": "null", "title": "None"}]}),
                json!({"type": ["integer", "null"]}),
            ),
            (
                json!({"oneOf": [{"type": "string"}, {"type": "null"}], "default": null}),
                json!({"type": ["string", "null"], "default": null}),
            ),
            (
                json!({"anyOf": [{"type": "integer"}, {"type": "number"}]}),
                json!({"type": ["integer", "number"]}),
            ),
            (
                json!({"oneOf": [{"type": "integer"}, {"type": "string"}]}),
                json!({"type": ["integer", "string"]}),
            ),
            (
                json!({"oneOf": [{"type": "string"}, {"type": "number"}]}),
                json!({"type": ["string", "number"]}),
            ),
            (
                json!({"oneOf": [{"type": "number"}]}),
                json!({"type": ["number"]}),
            ),
            // A branch's own nullable is read before the branches merge.
            (
                json!({"anyOf": [{"type": "string", "nullable": true}]}),
                json!({"anyOf": [{"type": ["string", "null"], "nullable": true}]}),
            ),
        ];
        for (schema, expected) in rewritten {
            assert_eq!(normalized(&schema, 0), Some(expected), "{schema}");
        }
        let untouched = [
            json!({"type": "null", "nullable": true}),
            json!({"type": ["string", "null"], "nullable": true}),
            json!({"type": "string", "nullable": false}),
            json!({"nullable": true}),
            // Not bare, repeated, or overlapping under oneOf: the branches stay.
            json!({"anyOf": [{"type": "string", "minLength": 3}, {"type": "null"}]}),
            json!({"anyOf": [{"type": "string"}, {"type": "string"}]}),
            json!({"oneOf": [{"type": "integer"}, {"type": "number"}]}),
            json!({"anyOf": [{"type": "string"}, true]}),
            json!({"anyOf": []}),
            json!({"type": "object", "anyOf": [{"type": "string"}]}),
            json!({"anyOf": [{"type": "string"}], "oneOf": [{"type": "null"}]}),
            json!([1, "x", null]),
        ];
        for schema in untouched {
            assert_eq!(normalized(&schema, 0), None, "{schema}");
        }
        // Depth: the deepest level read is MAX_DEPTH, counted through
        // object members and array items alike.
        let nullable = json!({"type": "string", "nullable": true});
        let widened = json!({"type": ["string", "null"], "nullable": true});
        let nest = |levels: usize, inner: &Value| {
            (0..levels).fold(inner.clone(), |inner, level| {
                if level % 2 == 0 {
                    json!([inner])
                } else {
                    json!({"a": inner})
                }
            })
        };
        assert_eq!(
            normalized(&nest(MAX_DEPTH, &nullable), 0),
            Some(nest(MAX_DEPTH, &widened))
        );
        assert_eq!(normalized(&nest(MAX_DEPTH + 1, &nullable), 0), None);
        assert_eq!(normalized(&nest(MAX_DEPTH + 2, &nullable), 0), None);
    }

    /// The type a value is said to have is the one a model would name.
    #[test]
    fn a_type_error_names_whole_numbers_integers_and_others_numbers() {
        let schema = json!({"type": "object", "properties": {"s": {"type": "string"}}});
        let err = fail(schema.clone(), json!({"s": 3}));
        assert_eq!(err.detail, "argument `s` must be string, got integer");
        let err = fail(schema.clone(), json!({"s": 2.5}));
        assert_eq!(err.detail, "argument `s` must be string, got number");
        let err = fail(schema, json!({"s": u64::MAX}));
        assert_eq!(err.detail, "argument `s` must be string, got integer");
    }

    /// A schema error on a field names it and says what to change; one on
    /// the arguments as a whole names none.
    #[test]
    fn a_schema_error_hints_at_its_field_or_at_the_whole() {
        let schema =
            json!({"type": "object", "properties": {"s": {"type": "string", "minLength": 3}}});
        let err = fail(schema, json!({"s": "a"}));
        assert_eq!(err.field.as_deref(), Some("s"));
        assert_eq!(
            err.hint.as_deref(),
            Some("change `s` to satisfy the tool's schema and call the tool again")
        );
        let err = fail(json!({"type": "object", "minProperties": 1}), json!({}));
        assert_eq!(err.field, None);
        assert_eq!(
            err.hint.as_deref(),
            Some("fix the arguments to match the tool's schema and call the tool again")
        );
    }

    /// A long property description is cut to half the text budget in a
    /// missing argument's hint.
    #[test]
    fn a_long_description_is_cut_in_the_hint() {
        let long = "x".repeat(5 * MAX_TEXT);
        let schema = json!({
            "type": "object",
            "properties": {"p": {"type": "string", "description": long}},
            "required": ["p"]
        });
        let err = fail(schema, json!({}));
        let hint = err.hint.unwrap_or_default();
        let kept = hint.matches('x').count();
        assert!(
            kept > MAX_TEXT / 4 && kept <= MAX_TEXT / 2,
            "{kept}: {hint}"
        );
    }

    /// Which nulls are "no value" (dropped) and which are values (kept),
    /// by each keyword that can allow one.
    #[test]
    fn a_null_is_kept_exactly_where_the_property_schema_allows_it() {
        let schema = json!({
            "type": "object",
            "properties": {
                "any": true,
                "described": {"description": "anything at all"},
                "constant": {"const": null},
                "listed": {"enum": ["a", null]},
                "branch": {"anyOf": [{"type": "string", "minLength": 2}, {"const": null}]},
                "never": false,
                "choice": {"enum": ["a"]},
                "text": {"type": "string"},
                "branches": {"anyOf": [{"type": "string", "minLength": 2}, {"type": "integer"}]}
            }
        });
        let all_null: Map<String, Value> = schema["properties"]
            .as_object()
            .map(|p| p.keys().map(|k| (k.clone(), Value::Null)).collect())
            .unwrap_or_default();
        let (_, args) = pass(schema, Value::Object(all_null));
        assert_eq!(
            args,
            json!({"any": null, "described": null, "constant": null, "listed": null, "branch": null})
        );
    }

    /// Coercion and the null check follow a schema to MAX_DEPTH levels and
    /// no deeper.
    #[test]
    fn coercion_and_the_null_check_stop_at_the_depth_bound() {
        // A numeric string in nested arrays: the property is level 1, each
        // array one more.
        let nested = |levels: usize| {
            let schema = (1..levels).fold(
                json!({"type": "integer"}),
                |inner, _| json!({"type": "array", "items": inner}),
            );
            let value = (1..levels).fold(json!("5"), |inner, _| json!([inner]));
            let coerced = (1..levels).fold(json!(5), |inner, _| json!([inner]));
            let schema = json!({"type": "object", "properties": {"n": schema}});
            (schema, json!({"n": value}), json!({"n": coerced}))
        };
        let (schema, args, coerced) = nested(MAX_DEPTH);
        assert_eq!(pass(schema, args).1, coerced);
        let (schema, args, _) = nested(MAX_DEPTH + 1);
        assert_eq!(fail(schema, args).reason, ErrorReason::Type);
        // A null allowed only in an anyOf nested k deep is seen up to
        // MAX_DEPTH and dropped below it.
        let null_at = |levels: usize| {
            let inner = (0..levels).fold(
                json!({"const": null}),
                |inner, _| json!({"anyOf": [{"type": "string", "minLength": 2}, inner]}),
            );
            json!({"type": "object", "properties": {"x": inner}})
        };
        assert_eq!(
            pass(null_at(MAX_DEPTH), json!({"x": null})).1,
            json!({"x": null})
        );
        assert_eq!(
            pass(null_at(MAX_DEPTH + 1), json!({"x": null})).1,
            json!({})
        );
    }
}
