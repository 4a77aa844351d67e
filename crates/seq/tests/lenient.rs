//! A string a model writes where a number or a boolean belongs reads the
//! same everywhere a sequence meets it: as a tool's argument (the kernel's
//! coercion), as a group's declared input (`SlotType::accepts`) and in a
//! condition's `==`. Each used to read it in its own words, and they
//! disagreed (`"+1"` was an integer input that no integer argument took;
//! `"20.0"` an integer argument but not an integer input).

use homeagent_core::validate::CompiledSchema;
use homeagent_seq::cond::evaluate;
use homeagent_seq::model::SlotType;
use serde_json::{Map, Value, json};

/// Strings at the edges of the forms models write.
const TEXTS: &[&str] = &[
    "3",
    " 3 ",
    "-7",
    "+1",
    ".5",
    "5.",
    "0.5",
    "20.0",
    "1e3",
    "1E-2",
    "0x10",
    "NaN",
    "inf",
    "-inf",
    "18446744073709551615",
    "18446744073709551616",
    "3.0000000000000001",
    "",
    "true",
    "false",
    " true",
    "True",
    "TRUE",
    "yes",
    "1",
    "0",
    "null",
];

/// Whether the kernel takes `text` for a `{"type": kind}` argument, and
/// what it makes of it.
fn argument(kind: &str, text: &str) -> Option<Value> {
    let schema = json!({"type": "object", "properties": {"x": {"type": kind}}});
    let mut args = json!({"x": text});
    CompiledSchema::compile(&schema)
        .prepare("t", &mut args)
        .ok()
        .map(|_| args["x"].clone())
}

#[test]
fn a_declared_input_takes_exactly_the_strings_a_tool_argument_of_its_type_takes() {
    for kind in ["integer", "number", "boolean"] {
        let slot = SlotType::parse(kind).unwrap();
        for text in TEXTS {
            assert_eq!(
                slot.accepts(&json!(text)),
                argument(kind, text).is_some(),
                "{kind} {text:?}"
            );
        }
    }
}

#[test]
fn equality_reads_a_string_as_the_argument_coercion_reads_it() {
    for kind in ["integer", "number", "boolean"] {
        for text in TEXTS {
            // What the kernel makes of it, compared with the same value
            // written as JSON: equal exactly when the kernel reads it.
            let mut args = Map::new();
            args.insert("x".into(), json!(text));
            match argument(kind, text) {
                Some(read) => {
                    args.insert("y".into(), read.clone());
                    assert_eq!(
                        evaluate("$args.x == $args.y", &args),
                        Ok(true),
                        "{kind} {text:?} read as {read}"
                    );
                }
                None if kind == "boolean" => {
                    for b in [true, false] {
                        args.insert("y".into(), json!(b));
                        assert_eq!(
                            evaluate("$args.x == $args.y", &args),
                            Ok(false),
                            "{text:?} {b}"
                        );
                    }
                }
                None => {}
            }
        }
    }
}

#[test]
fn ordering_reads_a_string_as_a_number_argument_reads_it() {
    for text in TEXTS {
        let mut args = Map::new();
        args.insert("x".into(), json!(text));
        args.insert("y".into(), json!(0));
        let ordered = evaluate("$args.x >= $args.y", &args);
        match argument("number", text) {
            Some(read) => {
                let expected = read.as_f64().unwrap() >= 0.0;
                assert_eq!(ordered, Ok(expected), "{text:?} read as {read}");
            }
            None => assert!(ordered.is_err(), "{text:?}: {ordered:?}"),
        }
    }
}

#[test]
fn values_that_are_already_json_scalars_are_taken_by_their_type() {
    let accepts = |kind: &str, value: Value| SlotType::parse(kind).unwrap().accepts(&value);
    assert!(accepts("number", json!(1.5)));
    assert!(accepts("number", json!(3)));
    assert!(accepts("integer", json!(3)));
    assert!(accepts("integer", json!(3.0)));
    // Whole however large, as a tool's `integer` schema takes it: a
    // sequence must not refuse what the tool it feeds accepts.
    assert!(accepts("integer", json!(1e19)));
    assert!(!accepts("integer", json!(3.5)));
    assert!(accepts("boolean", json!(false)));
    assert!(!accepts("boolean", json!(0)));
    assert!(!accepts("number", json!(true)));
    // A degraded slot without a fallback holds null, which every type
    // takes; an untyped array takes any array and nothing else.
    for kind in ["string", "integer", "number", "boolean", "object", "array"] {
        assert!(accepts(kind, Value::Null), "{kind}");
    }
    assert!(accepts("array", json!([1, "two"])));
    assert!(accepts("array", json!([])));
    assert!(!accepts("array", json!("[1]")));
    assert!(!accepts("array", json!({"0": 1})));
}
