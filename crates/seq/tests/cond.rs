#![allow(clippy::unwrap_used, clippy::expect_used)] // a panic in a test is a test failure

use homeagent_seq::CondError;
use homeagent_seq::cond::{evaluate, parse};
use proptest::prelude::*;
use serde_json::{Map, Value, json};

fn args() -> Map<String, Value> {
    json!({
        "flag": true, "n": 3, "name": "node-a", "empty": "",
        "result": {"count": 12, "items": [{"name": "disk"}, {"name": "cpu"}]},
        "tags": ["a", "b"], "num_text": "7"
    })
    .as_object()
    .cloned()
    .unwrap()
}

fn eval(text: &str) -> Result<bool, CondError> {
    evaluate(text, &args())
}

#[test]
fn literals_references_and_comparisons() {
    for (text, expected) in [
        ("", true),
        ("true", true),
        ("false", false),
        ("$args.flag", true),
        ("$args.empty", false),
        ("$args.flag == true", true),
        ("$args.n == 3", true),
        ("$args.n != 3", false),
        ("$args.n > 2", true),
        ("$args.n >= 3", true),
        ("$args.n < 3", false),
        ("$args.n <= 2.5", false),
        ("$args.num_text > 6", true),
        ("$args.num_text == 7", true),
        ("$args.name == \"node-a\"", true),
        ("$args.name == 'node-b'", false),
        ("$args.name contains \"node\"", true),
        ("$args.tags contains \"b\"", true),
        ("$args.tags contains \"z\"", false),
        ("$args.result contains \"count\"", true),
        // Each comparison at its boundary and on both sides of it.
        ("$args.n > 3", false),
        ("$args.n > 2.9", true),
        ("$args.n < 3.1", true),
        ("$args.n < 4", true),
        ("$args.n < 2", false),
        ("$args.n >= 3.1", false),
        ("$args.n <= 3", true),
    ] {
        assert_eq!(eval(text), Ok(expected), "{text}");
    }
}

/// A value alone is true unless it is null, false, zero, `"false"` or
/// empty (text, list or object).
#[test]
fn a_value_alone_is_true_unless_it_is_empty_zero_or_false() {
    let truth = |value: Value| {
        let args = json!({ "v": value }).as_object().cloned().unwrap();
        evaluate("$args.v", &args).unwrap()
    };
    for falsy in [
        json!(null),
        json!(false),
        json!(0),
        json!(0.0),
        json!(""),
        json!("false"),
        json!([]),
        json!({}),
    ] {
        assert!(!truth(falsy.clone()), "{falsy}");
    }
    for truthy in [
        json!(true),
        json!(1),
        json!(-0.5),
        json!("x"),
        json!("0"),
        json!([0]),
        json!({"a": null}),
    ] {
        assert!(truth(truthy.clone()), "{truthy}");
    }
}

/// Equality reads a string as a number or a boolean only against a number
/// or a boolean: two strings are compared as text ("1.10" is not "1.1",
/// "007" is not "7"), `null` is only null, a list is not its JSON text, and
/// integers compare exactly (beyond f64's 2^53). A string that reads as a
/// boolean is that boolean as a truth value too, so `$args.a` and
/// `$args.a == true` agree.
#[test]
fn equality_compares_text_as_text_and_truth_agrees_with_it() {
    let args = |v: Value| v.as_object().cloned().unwrap();
    let check = |text: &str, values: Value, expected: bool| {
        assert_eq!(
            evaluate(text, &args(values.clone())),
            Ok(expected),
            "{text} with {values}"
        );
    };
    check(
        "$args.a == $args.b",
        json!({"a": "1.10", "b": "1.1"}),
        false,
    );
    check("$args.a == $args.b", json!({"a": "007", "b": "7"}), false);
    check(
        "$args.a == $args.b",
        json!({"a": "1e3", "b": "1000"}),
        false,
    );
    check("$args.a == $args.b", json!({"a": "null", "b": null}), false);
    check(
        "$args.a == $args.b",
        json!({"a": [1, 2], "b": "[1,2]"}),
        false,
    );
    check(
        "$args.a == $args.b",
        json!({"a": 9_007_199_254_740_993_u64, "b": 9_007_199_254_740_992_u64}),
        false,
    );
    // Still: text against a number or a boolean reads the text.
    check("$args.a == 7", json!({"a": "7"}), true);
    check("$args.a == 7", json!({"a": "7.0"}), true);
    check("$args.a == true", json!({"a": "true"}), true);
    check("$args.a == $args.b", json!({"a": 2, "b": 2.0}), true);
    // Past i64, as u64, exactly.
    check(
        "$args.a == $args.b",
        json!({"a": 18_446_744_073_709_551_615_u64, "b": 18_446_744_073_709_551_615_u64}),
        true,
    );
    check(
        "$args.a == $args.b",
        json!({"a": 18_446_744_073_709_551_615_u64, "b": 18_446_744_073_709_551_614_u64}),
        false,
    );
    check("$args.a == $args.b", json!({"a": null, "b": null}), true);
    check("$args.a == $args.b", json!({"a": "x", "b": "x"}), true);
    // Truth agrees with == true / == false.
    check("$args.a", json!({"a": "false"}), false);
    check("$args.a == false", json!({"a": "false"}), true);
    check("$args.a", json!({"a": "true"}), true);
    check("$args.a", json!({"a": "no"}), true);
}

#[test]
fn field_access_into_structured_values() {
    assert_eq!(eval("$args.result.count > 10"), Ok(true));
    assert_eq!(eval("$args.result.items.1.name == \"cpu\""), Ok(true));
    assert_eq!(eval("$args.result.items.0.name contains \"is\""), Ok(true));
}

#[test]
fn logic_with_precedence_and_parentheses() {
    assert_eq!(
        eval("$args.flag && $args.n > 5 || $args.name == \"node-a\""),
        Ok(true)
    );
    assert_eq!(
        eval("$args.flag && ($args.n > 5 || $args.name == \"x\")"),
        Ok(false)
    );
    assert_eq!(eval("!$args.flag"), Ok(false));
    assert_eq!(eval("!($args.n > 5) && !$args.empty"), Ok(true));
    // Short-circuit: a guard keeps the second half from being evaluated.
    assert_eq!(eval("false && $args.missing"), Ok(false));
}

#[test]
fn evaluation_errors_name_the_problem_and_are_never_false() {
    assert_eq!(
        eval("$args.missing == 1"),
        Err(CondError::UnknownReference {
            reference: "$args.missing".into(),
            detail:
                "no argument `missing` (provided: empty, flag, n, name, num_text, result, tags)"
                    .into()
        })
    );
    assert!(matches!(eval("$args.result.cnt > 1"),
        Err(CondError::UnknownReference { detail, .. }) if detail == "`result` has no field `cnt` (fields: count, items)"));
    assert!(matches!(eval("$args.result.items.5.name == 1"),
        Err(CondError::UnknownReference { detail, .. }) if detail.contains("index 5 is out of range")));
    assert!(matches!(
        eval("$args.name.first == 1"),
        Err(CondError::UnknownReference { .. })
    ));
    assert_eq!(
        eval("$args.name > 3"),
        Err(CondError::NotNumbers {
            op: ">",
            left: "the string \"node-a\"".into(),
            right: "the number 3".into()
        })
    );
    assert!(matches!(
        eval("$args.n contains 3"),
        Err(CondError::BadContains { .. })
    ));
}

#[test]
fn syntax_errors_carry_the_byte_position() {
    for (text, position) in [
        ("1 ==", 4),
        ("$args.", 0),
        ("$args.n = 3", 8),
        ("($args.flag", 0),
        ("$args.flag)", 10),
        ("yes", 0),
        ("\"open", 0),
        ("$args.n > 1 > 0", 12),
        ("$args.n & 1", 8),
        ("@", 0),
    ] {
        match parse(text) {
            Err(CondError::Syntax { position: p, .. }) => assert_eq!(p, position, "{text}"),
            other => panic!("{text}: {other:?}"),
        }
    }
    assert_eq!(parse(&"(".repeat(100)), Err(CondError::TooDeep));
    assert!(matches!(
        parse(&"1".repeat(5000)),
        Err(CondError::TooLong { len: 5000 })
    ));
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 2000, ..ProptestConfig::default() })]

    #[test]
    fn the_condition_parser_never_panics_on_arbitrary_text(input in any::<String>()) {
        let _ = evaluate(&input, &args());
    }

    #[test]
    fn the_condition_parser_never_panics_on_condition_like_text(
        input in r#"(\$args\.(n|name|result|tags|x)(\.(0|1|count|items))*|[()!&|=<>"' ]|contains|true|-?[0-9.e]{1,4}){0,30}"#
    ) {
        let _ = evaluate(&input, &args());
    }
}
