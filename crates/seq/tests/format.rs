#![allow(clippy::unwrap_used, clippy::expect_used)] // a panic in a test is a test failure

use std::time::Duration;

use homeagent_seq::{
    FormatError, MissingPolicy, OnError, SplitError, parse_sequence, parse_sequence_value,
};
use serde_json::{Value, json};

fn group(extra: Value) -> Value {
    let mut g = json!({"name": "g", "tools": "{\"tool\":\"demo_echo\"} ;"});
    for (k, v) in extra.as_object().unwrap() {
        g[k] = v.clone();
    }
    json!({"name": "s", "groups": [g]})
}

fn err(doc: Value) -> FormatError {
    parse_sequence_value(&doc).unwrap_err()
}

#[test]
fn a_valid_sequence_gets_its_defaults_and_tools_as_an_array() {
    let seq = parse_sequence(
        r#"{"name":"s","description":"d","groups":[{"name":"g","in":{"host":"string"},"out":{"r":"array<object>"},
            "tools":"{\"tool\":\"demo_echo\",\"args\":{\"tag\":\"$args.host\"},\"as\":\"r\"} ; {\"tool\":\"demo_sleep\",\"args\":{\"ms\":1},\"as\":\"r\",\"fallback\":{\"x\":1}} ;"}]}"#,
    )
    .unwrap();
    let g = &seq.groups[0];
    assert_eq!(g.when, "true");
    assert!(g.parallel);
    assert!(!g.unsafe_serial);
    assert_eq!(g.missing, MissingPolicy::Fail);
    assert_eq!(g.on_error, OnError::Abort);
    assert_eq!(g.timeout, Duration::from_secs(30));
    assert_eq!(g.retries, 0);
    assert_eq!(g.tools.len(), 2);
    assert_eq!(g.tools[0].tool, "demo_echo");
    assert_eq!(g.tools[0].args["tag"], "$args.host");
    assert_eq!(g.tools[0].slot.as_deref(), Some("r"));
    assert_eq!(g.tools[1].fallback, Some(json!({"x": 1})));
    assert!(g.outputs["r"].is_array());
}

#[test]
fn unknown_fields_fail_at_every_level() {
    match err(group(json!({"paralell": false}))) {
        FormatError::UnknownField { at, field, allowed } => {
            assert_eq!(at, "group #1 \"g\"");
            assert_eq!(field, "paralell");
            assert!(allowed.contains("parallel"), "{allowed}");
        }
        other => panic!("{other:?}"),
    }
    assert!(matches!(
        err(json!({"name": "s", "groups": [], "extra": 1})),
        FormatError::UnknownField { field, .. } if field == "extra"
    ));
    match err(group(json!({"tools": "{\"tool\":\"a\",\"arg\":{}} ;"}))) {
        FormatError::BadTool {
            index,
            position,
            message,
            ..
        } => {
            assert_eq!((index, position), (1, 0));
            assert!(message.contains("unknown field `arg`"), "{message}");
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn bad_enum_values_list_the_legal_ones() {
    match err(group(json!({"missing": "ignore"}))) {
        FormatError::BadEnum {
            field,
            value,
            legal,
            ..
        } => {
            assert_eq!((field.as_str(), value.as_str()), ("missing", "ignore"));
            assert_eq!(legal, "fail / skip / degrade");
        }
        other => panic!("{other:?}"),
    }
    match err(group(json!({"on_error": "explode"}))) {
        FormatError::BadEnum { legal, .. } => assert_eq!(legal, "abort / continue / retry"),
        other => panic!("{other:?}"),
    }
}

#[test]
fn json_type_mistakes_get_actionable_messages() {
    let e = err(group(json!({"in": ["host"]})));
    assert!(
        matches!(&e, FormatError::WrongType { field, .. } if field == "in"),
        "{e:?}"
    );
    assert_eq!(
        e.to_string(),
        "group #1 \"g\": `in` must be an object {\"key\":\"type\"}, got an array; no inputs = {}"
    );
    let e = err(group(json!({"tools": [{"tool": "demo_echo"}]})));
    assert!(
        matches!(&e, FormatError::WrongType { field, .. } if field == "tools"),
        "{e:?}"
    );
    assert!(
        e.to_string()
            .contains("must be a string of ';'-separated JSON objects, got an array"),
        "{e}"
    );
    let e = err(json!({"name": "s", "groups": {"name": "g"}}));
    assert!(
        e.to_string()
            .contains("`groups` must be an array of group objects, got an object"),
        "{e}"
    );
    let e = err(group(json!({"parallel": "yes"})));
    assert!(
        e.to_string()
            .contains("`parallel` should be true or false, got a string"),
        "{e}"
    );
    let e = err(group(json!({"out": {"x": "strnig"}})));
    assert!(
        matches!(&e, FormatError::BadValue { field, .. } if field == "out"),
        "{e:?}"
    );
    assert!(e.to_string().contains("types: string, integer"), "{e}");
    let e = err(group(json!({"timeout": "30 seconds"})));
    assert!(e.to_string().contains("not a duration"), "{e}");
    // Zero is a duration, just not one a group can run in.
    for zero in ["0s", "0ms", "0m"] {
        let e = err(group(json!({"timeout": zero})));
        let message = e.to_string();
        assert!(message.contains("more than zero"), "{message}");
        assert!(!message.contains("not a duration"), "{message}");
    }
    assert!(
        matches!(err(json!({"name": "s", "groups": []})), FormatError::BadValue { field, .. } if field == "groups")
    );
    assert!(
        matches!(err(json!({"groups": []})), FormatError::Missing { field, .. } if field == "name")
    );
    assert!(matches!(
        parse_sequence("{nope"),
        Err(FormatError::Json { .. })
    ));
}

/// A key given twice is an author's slip that would silently change what
/// runs (the second `args`, the last `on_error`): refused, naming the key,
/// in a tool's text and in a sequence's own JSON.
#[test]
fn a_key_given_twice_is_refused() {
    let twice =
        r#"{"tool":"cmd_run","args":{"command":"ls"},"args":{"command":"rm -rf /tmp/x"}} ;"#;
    match err(group(json!({ "tools": twice }))) {
        FormatError::BadTool { message, .. } => {
            assert!(message.contains("`args` is given twice"), "{message}")
        }
        other => panic!("{other:?}"),
    }
    let file = r#"{"name":"s","groups":[{"name":"g","on_error":"abort","on_error":"continue",
        "tools":"{\"tool\":\"demo_echo\",\"args\":{}} ;"}]}"#;
    match parse_sequence(file) {
        Err(FormatError::Json { detail }) => {
            assert!(detail.contains("`on_error` is given twice"), "{detail}")
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn splitting_errors_surface_with_the_group_and_position() {
    match err(group(
        json!({"tools": "{\"tool\":\"a\"} {\"tool\":\"b\"} ;"}),
    )) {
        FormatError::Split { at, source } => {
            assert_eq!(at, "group #1 \"g\"");
            assert_eq!(
                source,
                SplitError::MissingSemicolon {
                    position: 13,
                    after: 11
                }
            );
        }
        other => panic!("{other:?}"),
    }
    match err(group(
        json!({"tools": "{\"tool\":\"a\"} ; {\"args\":{}} ;"}),
    )) {
        FormatError::BadTool {
            index,
            position,
            message,
            ..
        } => {
            assert_eq!((index, position), (2, 15));
            assert!(message.contains("`tool` is required"), "{message}");
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn duplicate_group_names_are_refused() {
    let doc = json!({"name": "s", "groups": [
        {"name": "g", "tools": "{\"tool\":\"a\"} ;"},
        {"name": "g", "tools": "{\"tool\":\"b\"} ;"}
    ]});
    assert!(matches!(err(doc), FormatError::DuplicateGroup { name, .. } if name == "g"));
}

/// A slot type is read without recursing: a sequence posted to the server
/// with a type nested a hundred thousand `array<` deep (well inside its
/// body limit) overflowed the stack and took the process down.
#[test]
fn a_deeply_nested_slot_type_is_read_without_overflowing_the_stack() {
    use homeagent_seq::model::SlotType;
    let depth = 200_000;
    let deep = format!("{}string{}", "array<".repeat(depth), ">".repeat(depth));
    assert!(SlotType::parse(&deep).is_some());
    let unclosed = format!("{}string{}", "array<".repeat(depth), ">".repeat(depth - 1));
    assert!(SlotType::parse(&unclosed).is_none());
    // Blanks inside the brackets are allowed at every level, as before.
    assert!(SlotType::parse(" array< array< string > > ").is_some());
    for bad in [
        "array<>",
        "array<strin>",
        "array<string",
        "arraystring>",
        "array<array<x>>",
    ] {
        assert!(SlotType::parse(bad).is_none(), "{bad}");
    }
    let doc = group(json!({"out": {"r": deep}}));
    assert!(parse_sequence_value(&doc).is_ok());
}

/// Every unit a duration may take, in seconds as `timeout` reads them.
#[test]
fn durations_take_every_unit_they_name() {
    use homeagent_seq::model::duration_text::{parse, parse_any};
    for (text, expected) in [
        ("250ms", Duration::from_millis(250)),
        ("30s", Duration::from_secs(30)),
        ("2m", Duration::from_secs(120)),
        ("2h", Duration::from_secs(7200)),
        (" 1h ", Duration::from_secs(3600)),
    ] {
        assert_eq!(parse(text), Some(expected), "{text:?}");
    }
    assert_eq!(parse_any("0s"), Some(Duration::ZERO));
    assert_eq!(parse("0s"), None);
    for bad in ["2d", "h", "2", "1.5h", "-1s"] {
        assert_eq!(parse_any(bad), None, "{bad:?}");
    }
}

/// `seq_call` reads a target starting with `#` as a whole sequence: a
/// group so named could never be called (its caller would run a sequence
/// instead), so the name is refused.
#[test]
fn a_group_name_may_not_start_with_a_hash() {
    assert_eq!(
        err(group(json!({"name": "#x"}))).to_string(),
        FormatError::BadValue {
            at: "group #1".into(),
            field: "name".into(),
            message: "must not start with `#`, which marks a sequence in a seq_call target".into(),
        }
        .to_string()
    );
    assert!(parse_sequence_value(&group(json!({"name": "x#"}))).is_ok());
}
