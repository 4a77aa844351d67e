//! Translations between MCP's shapes and the kernel's: a listed tool becomes
//! a [`ToolDef`], a `tools/call` answer becomes the handler's result.
//!
//! These are pure functions so the contract (what is parallel-safe, what is
//! a failure) can be read and tested in one place.

use homeagent_core::validate::{Panicked, build_validator};
use homeagent_core::{ErrorReason, ToolDef, ToolError};
use rmcp::ServiceError;
use rmcp::model::{CallToolResult, Tool};
use serde_json::Value;

use crate::spec::McpServerSpec;

/// The most of one schema problem a warning repeats, in bytes.
const MAX_SCHEMA_PROBLEM_BYTES: usize = 300;

/// How far past a call's longest allowed time the executor stops it, when
/// the client's own timeout (which cancels the call at the server) has not.
pub const EXECUTOR_BACKSTOP: std::time::Duration = std::time::Duration::from_secs(2);

/// The kernel's definition of one MCP tool, exposed as `exposed`.
///
/// Scheduling: serial unless the config lists the tool in `parallel_safe`,
/// or the server is trusted and annotates it `readOnlyHint: true`; a tool
/// listed in `serial` is serial whatever else says. `read_only` (shown
/// again when HomeAgent serves MCP; a batch of such calls runs before it is
/// stored) is taken from a trusted server only.
///
/// The input schema must be an object schema, as every provider requires:
/// one without a `type` gets `"type": "object"`; one of another type is
/// refused with the reason (the tool is then not exposed).
pub fn tool_def(spec: &McpServerSpec, exposed: &str, tool: &Tool) -> Result<ToolDef, String> {
    let remote = tool.name.as_ref();
    let annotated_read_only = spec.trusted
        && tool
            .annotations
            .as_ref()
            .and_then(|a| a.read_only_hint)
            .unwrap_or(false);
    let mut schema = (*tool.input_schema).clone();
    match schema.get("type") {
        None => {
            schema.insert("type".into(), Value::String("object".into()));
        }
        Some(Value::String(kind)) if kind == "object" => {}
        Some(other) => {
            return Err(format!(
                "its input schema has type {other}; a tool's arguments must be an object \
                 schema, which every model provider requires"
            ));
        }
    }
    let description = tool.description.as_deref().unwrap_or("").to_owned();
    let mut def = ToolDef::new(exposed, description)
        .with_parameters(Value::Object(schema))
        // The server's own limits (an answer or progress every `timeout`,
        // at most `max_call_time` in all) are kept by the client, which
        // then tells the server to cancel; the executor's limit is the
        // backstop just past them.
        .with_timeout(spec.max_call_time() + EXECUTOR_BACKSTOP);
    if spec.parallel_safe.iter().any(|t| t == remote) || annotated_read_only {
        def = def.parallel_safe();
    }
    if spec.serial.iter().any(|t| t == remote) {
        def = def.serial();
    }
    if annotated_read_only {
        def = def.read_only();
    }
    Ok(def)
}

/// What a successful `tools/call` answer becomes.
#[derive(Debug, Clone, PartialEq)]
pub struct McpCallValue {
    /// The outcome's structured value.
    pub value: Value,
    /// The server's own text for a structured value, shown to the model
    /// instead of the value's JSON (`None`: render the value).
    pub text: Option<String>,
    /// Set when the structured value breaks the tool's `outputSchema`: the
    /// value is kept, and the outcome carries this warning.
    pub warning: Option<String>,
}

/// The handler's result for a `tools/call` answer.
///
/// `isError: true` is a failed call with the server's text as detail.
/// Otherwise `structuredContent`, when present, is the value, and the text
/// blocks of `content` (joined by newlines) are kept as the text the model
/// reads; a structured value that breaks the tool's `outputSchema` comes
/// with a warning saying how. Without structured content the value is the
/// text content (one string when every block is text, the blocks as JSON
/// when not, binary payloads replaced by their size).
pub fn call_result_value(
    server: &str,
    tool: &str,
    result: CallToolResult,
    output_schema: Option<&jsonschema::Validator>,
) -> Result<McpCallValue, ToolError> {
    let mut result = result;
    // rmcp keeps `"structuredContent": null` as a value; a server that
    // writes it means it has none (else its text became `null`, checked
    // against its output schema).
    if result
        .structured_content
        .as_ref()
        .is_some_and(Value::is_null)
    {
        result.structured_content = None;
    }
    let texts: Vec<&str> = result
        .content
        .iter()
        .filter_map(|block| block.as_text().map(|t| t.text.as_str()))
        .collect();
    if result.is_error == Some(true) {
        // The text, then the structured content (a server may put its error
        // only there); a message is made only when the server sent neither.
        let structured = result
            .structured_content
            .as_ref()
            .map(homeagent_core::outcome::render_value);
        let parts: Vec<&str> = texts
            .iter()
            .copied()
            .chain(structured.as_deref())
            .filter(|part| !part.is_empty())
            .collect();
        let detail = if parts.is_empty() {
            format!("MCP server `{server}` reported an error from tool {tool} without a message")
        } else {
            parts.join("\n")
        };
        return Err(ToolError::execution(detail));
    }
    if let Some(structured) = result.structured_content {
        let warning = output_schema.and_then(|validator| {
            let problems: Vec<String> = validator
                .iter_errors(&structured)
                .take(3)
                // The validator quotes the value it refused, whole: a
                // result of megabytes would make a warning of megabytes,
                // logged and kept in the status.
                .map(|e| {
                    let problem = e.to_string();
                    format!(
                        "at `{}`: {}",
                        e.instance_path(),
                        homeagent_core::excerpt(&problem, MAX_SCHEMA_PROBLEM_BYTES)
                    )
                })
                .collect();
            (!problems.is_empty()).then(|| {
                format!(
                    "MCP tool {tool} of server `{server}` returned structured content that does not match its outputSchema: {}",
                    problems.join("; ")
                )
            })
        });
        return Ok(McpCallValue {
            value: structured,
            text: (!texts.is_empty()).then(|| texts.join("\n")),
            warning,
        });
    }
    let value = if texts.len() == result.content.len() {
        Value::String(texts.join("\n"))
    } else {
        let blocks = serde_json::to_value(&result.content).unwrap_or(Value::Null);
        match blocks {
            Value::Array(blocks) => Value::Array(blocks.into_iter().map(without_binary).collect()),
            other => other,
        }
    };
    Ok(McpCallValue {
        value,
        text: None,
        warning: None,
    })
}

/// A content block with its base64 payload (an image's or audio's `data`,
/// an embedded resource's `blob`) replaced by its size. The model reads
/// tool results as text: the base64 of a screenshot would fill its context,
/// be cut by the output cap, and still show it nothing. What the block is
/// (type, MIME type, URI) stays.
fn without_binary(mut block: Value) -> Value {
    fn summarise(object: &mut serde_json::Map<String, Value>, key: &str) {
        if let Some(Value::String(base64)) = object.remove(key) {
            let padding = base64.bytes().rev().take_while(|b| *b == b'=').count();
            // Every 4 characters carry 3 bytes; unpadded text ends early.
            let bytes = (base64.len() - padding) * 3 / 4;
            object.insert("bytes".into(), Value::from(bytes));
            object.insert(
                "note".into(),
                Value::from("binary content, not shown to the model"),
            );
        }
    }
    if let Value::Object(object) = &mut block {
        match object.get("type").and_then(Value::as_str) {
            Some("image" | "audio") => summarise(object, "data"),
            Some("resource") => {
                if let Some(Value::Object(resource)) = object.get_mut("resource") {
                    summarise(resource, "blob");
                }
            }
            _ => {}
        }
    }
    block
}

/// A failure to get an answer at all.
pub fn service_error(server: &str, tool: &str, error: ServiceError) -> ToolError {
    match error {
        ServiceError::McpError(data) => ToolError::execution(format!(
            "MCP server `{server}` refused tool {tool}: JSON-RPC error {}: {}",
            data.code.0, data.message
        )),
        ServiceError::TransportClosed | ServiceError::TransportSend(_) => ToolError::execution(
            format!("MCP server `{server}` disconnected while tool {tool} was running"),
        )
        .with_hint(
            "the server is being restarted; the call may or may not have taken effect, so check before repeating it",
        ),
        ServiceError::Timeout { timeout } => ToolError::new(
            ErrorReason::Timeout,
            format!(
                "MCP server `{server}` did not answer tool {tool} within {timeout:?}; the call \
                 was cancelled at the server"
            ),
        )
        .with_hint(
            "a call may run longer while its server reports progress, up to the server's \
             max_timeout; do less per call, or raise timeout / max_timeout in [[mcp.servers]]. \
             An answer over 16 MiB on one line is dropped by the MCP client and ends the same \
             way (ask for less output, not more time)",
        ),
        ServiceError::Cancelled { reason } => ToolError::new(
            ErrorReason::Cancelled,
            format!(
                "the call to MCP tool {tool} was cancelled: {}",
                reason.unwrap_or_else(|| "no reason given".into())
            ),
        ),
        other => ToolError::execution(format!(
            "MCP server `{server}` gave no usable answer for tool {tool}: {other}"
        )),
    }
}

/// Compiles an output schema the way every third-party schema is compiled
/// ([`build_validator`]: offline, formats as annotations, a panic caught);
/// a schema that does not compile is not checked rather than failing every
/// call.
pub(crate) fn output_validator(
    schema: Option<&rmcp::model::JsonObject>,
) -> Option<jsonschema::Validator> {
    let schema = Value::Object(schema?.clone());
    match build_validator(&schema) {
        Ok(Ok(validator)) => Some(validator),
        Ok(Err(error)) => {
            tracing::warn!("an MCP output schema could not be compiled ({error}); not checked");
            None
        }
        Err(Panicked) => {
            tracing::warn!("an MCP output schema made the validator panic; not checked");
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn result(value: Value) -> CallToolResult {
        serde_json::from_value(value).unwrap()
    }

    /// Output schemas are compiled as every third-party schema is: a
    /// `format` is an annotation (a draft-07 schema's `email` used to be
    /// enforced, so a server's answer its own tool accepted drew a warning).
    #[test]
    fn output_schemas_compile_like_every_third_party_schema() {
        let schema = json!({
            "$schema": "http://json-schema.org/draft-07/schema#",
            "type": "object",
            "properties": {"to": {"type": "string", "format": "email"}}
        });
        let validator = output_validator(schema.as_object()).unwrap();
        assert!(validator.is_valid(&json!({"to": "the ops list"})));
        assert!(!validator.is_valid(&json!({"to": 7})));
        let broken = json!({"type": "object", "properties": {"n": {"type": "integr"}}});
        assert!(output_validator(broken.as_object()).is_none());
    }

    fn listed(schema: Value) -> Tool {
        serde_json::from_value(json!({"name": "t", "inputSchema": schema})).unwrap()
    }

    /// Providers take only an object schema for a tool's arguments: one
    /// without a `type` (common in servers' lists) is an object schema
    /// said short, and gets its `type`; one of another type cannot be
    /// offered at all, and says why.
    #[test]
    fn input_schemas_are_object_schemas_or_the_tool_is_not_exposed() {
        let spec = McpServerSpec::stdio("s", "server", Vec::new());
        let short = tool_def(
            &spec,
            "s__t",
            &listed(json!({"properties": {"q": {"type": "string"}}})),
        )
        .unwrap();
        let schema = short.parameters.clone();
        assert_eq!(
            schema,
            json!({"type": "object", "properties": {"q": {"type": "string"}}})
        );
        let full = json!({"type": "object", "properties": {}});
        let kept = tool_def(&spec, "s__t", &listed(full.clone())).unwrap();
        assert_eq!(kept.parameters, full);
        let array = tool_def(&spec, "s__t", &listed(json!({"type": "array"}))).unwrap_err();
        assert!(
            array.contains("\"array\"") && array.contains("object"),
            "{array}"
        );
    }

    /// Serial unless listed in `parallel_safe` or annotated read-only by a
    /// trusted server; `serial` wins over both; `read_only` only from a
    /// trusted server; the executor's limit just past the client's.
    #[test]
    fn scheduling_comes_from_the_config_and_trusted_annotations_only() {
        let annotated = |read_only: bool| -> Tool {
            serde_json::from_value(json!({
                "name": "t", "inputSchema": {"type": "object"},
                "annotations": {"readOnlyHint": read_only}
            }))
            .unwrap()
        };
        let plain = listed(json!({"type": "object"}));
        let spec = |trusted: bool, parallel_safe: &[&str], serial: &[&str]| McpServerSpec {
            trusted,
            parallel_safe: parallel_safe.iter().map(|t| t.to_string()).collect(),
            serial: serial.iter().map(|t| t.to_string()).collect(),
            ..McpServerSpec::stdio("s", "server", Vec::new())
        };
        let flags = |spec: &McpServerSpec, tool: &Tool| {
            let def = tool_def(spec, "s__t", tool).unwrap();
            (def.runs_in_parallel(), def.read_only)
        };
        for (case, spec, tool, expected) in [
            ("default", spec(false, &[], &[]), &plain, (false, false)),
            ("listed", spec(false, &["t"], &[]), &plain, (true, false)),
            (
                "another listed",
                spec(false, &["u"], &[]),
                &plain,
                (false, false),
            ),
            (
                "untrusted hint",
                spec(false, &[], &[]),
                &annotated(true),
                (false, false),
            ),
            (
                "trusted hint",
                spec(true, &[], &[]),
                &annotated(true),
                (true, true),
            ),
            (
                "trusted, hint false",
                spec(true, &[], &[]),
                &annotated(false),
                (false, false),
            ),
            (
                "trusted, no hint",
                spec(true, &[], &[]),
                &plain,
                (false, false),
            ),
            (
                "serial wins over listed",
                spec(false, &["t"], &["t"]),
                &plain,
                (false, false),
            ),
            (
                "serial wins over hint",
                spec(true, &[], &["t"]),
                &annotated(true),
                (false, true),
            ),
            (
                "another serial",
                spec(false, &["t"], &["u"]),
                &plain,
                (true, false),
            ),
        ] {
            assert_eq!(flags(&spec, tool), expected, "{case}");
        }
        let def = tool_def(&spec(false, &[], &[]), "s__t", &plain).unwrap();
        assert_eq!(
            def.timeout,
            Some(std::time::Duration::from_secs(300) + EXECUTOR_BACKSTOP)
        );
        assert_eq!(EXECUTOR_BACKSTOP, std::time::Duration::from_secs(2));
    }

    #[test]
    fn structured_content_that_is_null_is_none() {
        let schema = json!({"type": "object", "properties": {"n": {"type": "integer"}}});
        let validator = output_validator(schema.as_object()).unwrap();
        let done = call_result_value(
            "s",
            "t",
            result(
                json!({"content": [{"type": "text", "text": "done"}], "structuredContent": null}),
            ),
            Some(&validator),
        )
        .unwrap();
        assert_eq!(done.value, json!("done"));
        assert_eq!(done.warning, None);
        let failed = call_result_value(
            "s",
            "t",
            result(json!({"content": [{"type": "text", "text": "no"}], "structuredContent": null, "isError": true})),
            None,
        )
        .unwrap_err();
        assert_eq!(failed, ToolError::execution("no"));
    }

    #[test]
    fn results_map_onto_the_outcome_contract() {
        let failed = call_result_value(
            "s",
            "t",
            result(json!({"content": [{"type": "text", "text": "no such file"}], "isError": true})),
            None,
        )
        .unwrap_err();
        assert_eq!(failed, ToolError::execution("no such file"));
        // An error told only in structured content is told, not reported
        // as an error "without a message".
        let structured = call_result_value(
            "s",
            "t",
            result(json!({"content": [], "structuredContent": {"code": 404, "why": "no such repo"}, "isError": true})),
            None,
        )
        .unwrap_err();
        assert_eq!(
            structured,
            ToolError::execution(r#"{"code":404,"why":"no such repo"}"#)
        );
        let both = call_result_value(
            "s",
            "t",
            result(json!({"content": [{"type": "text", "text": "not found"}], "structuredContent": {"code": 404}, "isError": true})),
            None,
        )
        .unwrap_err();
        assert_eq!(both, ToolError::execution("not found\n{\"code\":404}"));

        let text = call_result_value(
            "s",
            "t",
            result(
                json!({"content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]}),
            ),
            None,
        )
        .unwrap();
        assert_eq!(
            text,
            McpCallValue {
                value: json!("a\nb"),
                text: None,
                warning: None
            }
        );

        let schema =
            json!({"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]});
        let validator = output_validator(schema.as_object()).unwrap();
        let good = call_result_value(
            "s",
            "t",
            result(json!({"content": [], "structuredContent": {"n": 1}})),
            Some(&validator),
        )
        .unwrap();
        assert_eq!(
            good,
            McpCallValue {
                value: json!({"n": 1}),
                text: None,
                warning: None
            }
        );
        // Text next to structured content is kept for the model to read.
        let both = call_result_value(
            "s",
            "t",
            result(json!({
                "content": [{"type": "text", "text": "n is"}, {"type": "text", "text": "one"}],
                "structuredContent": {"n": 1}
            })),
            Some(&validator),
        )
        .unwrap();
        assert_eq!(
            both,
            McpCallValue {
                value: json!({"n": 1}),
                text: Some("n is\none".into()),
                warning: None
            }
        );
        let McpCallValue { value, warning, .. } = call_result_value(
            "s",
            "t",
            result(json!({"content": [], "structuredContent": {"n": "one"}})),
            Some(&validator),
        )
        .unwrap();
        assert_eq!(value, json!({"n": "one"}));
        let warning = warning.unwrap();
        assert!(
            warning.starts_with("MCP tool t of server `s` returned structured content that does not match its outputSchema: at `/n`: "),
            "{warning}"
        );
        // A refused value of megabytes is named by its place and the start
        // of the validator's message, not quoted whole.
        let big = "x".repeat(5_000_000);
        let McpCallValue { warning, .. } = call_result_value(
            "s",
            "t",
            result(json!({"content": [], "structuredContent": {"n": big}})),
            Some(&validator),
        )
        .unwrap();
        let warning = warning.unwrap();
        assert!(warning.contains("at `/n`: "), "{warning:.200}");
        assert!(warning.len() < 500, "{} bytes", warning.len());
    }

    /// Binary payloads are replaced by their size; text, MIME types and
    /// URIs stay.
    #[test]
    fn binary_content_reaches_the_model_as_what_it_is_not_as_base64() {
        // 10 bytes -> "AAECAwQFBgcICQ==" (16 characters, two of padding).
        let base64 = "AAECAwQFBgcICQ==";
        let value = call_result_value(
            "s",
            "shot",
            result(json!({"content": [
                {"type": "text", "text": "Screenshot taken"},
                {"type": "image", "data": base64, "mimeType": "image/png"},
                {"type": "audio", "data": "AAEC", "mimeType": "audio/wav"},
                {"type": "resource", "resource": {"uri": "file:///a.bin", "mimeType": "application/octet-stream", "blob": base64}},
                {"type": "resource", "resource": {"uri": "file:///a.txt", "text": "kept"}}
            ]})),
            None,
        )
        .unwrap()
        .value;
        let note = "binary content, not shown to the model";
        assert_eq!(
            value,
            json!([
                {"type": "text", "text": "Screenshot taken"},
                {"type": "image", "mimeType": "image/png", "bytes": 10, "note": note},
                {"type": "audio", "mimeType": "audio/wav", "bytes": 3, "note": note},
                {"type": "resource", "resource": {"uri": "file:///a.bin", "mimeType": "application/octet-stream", "bytes": 10, "note": note}},
                {"type": "resource", "resource": {"uri": "file:///a.txt", "text": "kept"}}
            ])
        );
        assert!(!value.to_string().contains(base64));
    }

    /// The size is the decoded size, padded or not (MCP servers are not
    /// all strict about padding). Expected sizes from Python's base64.
    #[test]
    fn a_binary_size_is_the_decoded_size() {
        for (base64, bytes) in [
            ("", 0),
            ("QQ==", 1),
            ("QUI=", 2),
            ("QUJD", 3),
            ("QQ", 1),
            ("QUI", 2),
            ("AAECAwQFBgcICQ", 10),
            ("AAECAwQFBgcICQ==", 10),
        ] {
            let block = without_binary(json!({"type": "image", "data": base64}));
            assert_eq!(block["bytes"], json!(bytes), "{base64:?}");
        }
    }

    #[test]
    fn json_rpc_errors_are_execution_failures() {
        let error = service_error(
            "s",
            "t",
            ServiceError::McpError(rmcp::ErrorData::invalid_params("bad path", None)),
        );
        assert_eq!(error.reason, ErrorReason::Execution);
        assert_eq!(
            error.detail,
            "MCP server `s` refused tool t: JSON-RPC error -32602: bad path"
        );
    }
}
