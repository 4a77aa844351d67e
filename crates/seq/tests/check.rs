#![allow(clippy::unwrap_used, clippy::expect_used)] // a panic in a test is a test failure

use homeagent_core::Registry;
use homeagent_seq::{CheckError, Warning, check_sequence, parse_sequence_value};
use homeagent_tools::register_demo_tools;
use serde_json::{Value, json};

fn tools() -> Registry {
    let registry = Registry::new();
    register_demo_tools(&registry).unwrap();
    registry
}

/// Checks a one-group sequence against the demo tools.
fn check(group: Value) -> (Vec<CheckError>, Vec<Warning>) {
    check_groups(json!([group]))
}

fn check_groups(groups: Value) -> (Vec<CheckError>, Vec<Warning>) {
    let seq = parse_sequence_value(&json!({"name": "s", "groups": groups})).unwrap();
    let registry = tools();
    let report = check_sequence(&seq, Some(&registry));
    (report.errors, report.warnings)
}

#[test]
fn a_clean_group_passes_without_warnings() {
    let (errors, warnings) = check(
        json!({"name": "g", "in": {"host": "string"}, "out": {"r": "array"},
        "when": "$args.host != \"\"",
        "tools": "{\"tool\":\"demo_echo\",\"args\":{\"tag\":\"$args.host\"},\"as\":\"r\"} ; {\"tool\":\"demo_echo\",\"as\":\"r\"} ;"}),
    );
    assert_eq!(errors, []);
    assert_eq!(warnings, []);
}

#[test]
fn as_must_name_an_out_slot() {
    let (errors, _) = check(json!({"name": "g", "out": {"b": "string", "a": "string"},
        "tools": "{\"tool\":\"demo_echo\",\"as\":\"c\"} ;"}));
    assert_eq!(
        errors,
        [CheckError::UndeclaredSlot {
            group: "g".into(),
            index: 1,
            tool: "demo_echo".into(),
            slot: "c".into(),
            outputs: "a, b".into()
        }]
    );
}

#[test]
fn args_references_must_be_declared_inputs() {
    let (errors, _) = check(json!({"name": "g", "in": {"host": "string"},
        "tools": "{\"tool\":\"demo_echo\",\"args\":{\"tag\":\"$args.host on $args.port\"}} ;"}));
    assert_eq!(
        errors,
        [CheckError::UndeclaredArg {
            group: "g".into(),
            place: "tool #1 (demo_echo) args".into(),
            arg: "port".into(),
            inputs: "host".into()
        }]
    );
    let (errors, _) = check(json!({"name": "g", "when": "$args.flag",
        "tools": "{\"tool\":\"demo_echo\"} ;"}));
    assert!(
        matches!(&errors[..], [CheckError::UndeclaredArg { arg, place, inputs, .. }]
        if arg == "flag" && place == "`when`" && inputs == "(none)"),
        "{errors:?}"
    );
}

#[test]
fn a_scalar_slot_written_twice_is_an_error_but_an_array_slot_appends() {
    let tools = "{\"tool\":\"demo_echo\",\"as\":\"r\"} ; {\"tool\":\"demo_echo\",\"as\":\"r\"} ;";
    let (errors, _) = check(json!({"name": "g", "out": {"r": "string"}, "tools": tools}));
    assert_eq!(
        errors,
        [CheckError::SlotWrittenTwice {
            group: "g".into(),
            slot: "r".into(),
            writers: 2
        }]
    );
    let (errors, _) = check(json!({"name": "g", "out": {"r": "array<string>"}, "tools": tools}));
    assert_eq!(errors, []);
}

#[test]
fn parallel_with_an_unsafe_tool_is_an_error_naming_it() {
    let tools = "{\"tool\":\"demo_echo\"} ; {\"tool\":\"demo_note\",\"args\":{\"text\":\"x\"}} ;";
    let (errors, _) = check(json!({"name": "g", "tools": tools}));
    assert_eq!(
        errors,
        [CheckError::UnsafeInParallel {
            group: "g".into(),
            tool: "demo_note".into()
        }]
    );
    let message = errors[0].to_string();
    assert!(message.contains("\"unsafe_serial\": true"), "{message}");
    // Serial must be declared as such.
    let (errors, _) = check(json!({"name": "g", "parallel": false, "tools": tools}));
    assert_eq!(
        errors,
        [CheckError::UndeclaredSerial {
            group: "g".into(),
            tool: "demo_note".into()
        }]
    );
    assert!(
        errors[0]
            .to_string()
            .contains("say \"unsafe_serial\": true")
    );
    let (errors, _) =
        check(json!({"name": "g", "parallel": false, "unsafe_serial": true, "tools": tools}));
    assert_eq!(errors, []);
    // One call alone has nothing to overlap with.
    let (errors, _) = check(
        json!({"name": "g", "tools": "{\"tool\":\"demo_note\",\"args\":{\"text\":\"x\"}} ;"}),
    );
    assert_eq!(errors, []);
}

/// With several tools that may not overlap, the error names the first in
/// declaration order (the one to look at first).
#[test]
fn the_first_unsafe_tool_is_the_one_named() {
    use homeagent_core::{ToolContext, ToolDef};
    let registry = tools();
    registry
        .register(
            ToolDef::new("t_write", "writes; not parallel-safe"),
            |_ctx: ToolContext| async move { Ok(Value::Null) },
        )
        .unwrap();
    let seq = parse_sequence_value(&json!({"name": "s", "groups": [{"name": "g",
        "tools": "{\"tool\":\"demo_echo\"} ; {\"tool\":\"demo_note\",\"args\":{\"text\":\"x\"}} ; {\"tool\":\"t_write\"} ;"}]}))
    .unwrap();
    let report = check_sequence(&seq, Some(&registry));
    assert_eq!(
        report.errors,
        [CheckError::UnsafeInParallel {
            group: "g".into(),
            tool: "demo_note".into()
        }]
    );
}

/// `$args` references count wherever they sit in a step's arguments
/// (inside arrays and objects too); only a `seq_when_call`'s own `when`
/// is about the call's arguments, not the group's.
#[test]
fn args_references_are_found_at_every_depth() {
    use homeagent_seq::check::args_references;
    let step = |value: Value| {
        let seq = parse_sequence_value(&json!({"name": "s", "groups": [{"name": "g",
            "tools": format!("{value} ;")}]}))
        .unwrap();
        seq.groups[0].tools[0].clone()
    };
    assert_eq!(
        args_references(&step(json!({"tool": "demo_echo", "args": {
            "list": ["$args.a", {"deep": "$args.b and $args.a"}],
            "map": {"k": ["$args.c"]},
            "when": "$args.d"
        }}))),
        ["a", "b", "c", "d"]
    );
    assert_eq!(
        args_references(&step(json!({"tool": "seq_when_call", "args": {
            "when": "$args.inner == 1",
            "target": "#other",
            "args": {"inner": "$args.outer"}
        }}))),
        ["outer"]
    );
}

#[test]
fn seq_call_targets_must_be_a_group_here_or_another_sequence() {
    let (errors, warnings) = check_groups(json!([
        {"name": "a", "tools": "{\"tool\":\"seq_call\",\"args\":{\"target\":\"nope\"}} ;"},
        {"name": "b", "tools": "{\"tool\":\"seq_call\",\"args\":{\"target\":\"a\"}} ;"},
        {"name": "c", "tools": "{\"tool\":\"seq_call\",\"args\":{\"target\":\"#Other\"}} ;"},
        {"name": "d", "tools": "{\"tool\":\"seq_call\",\"args\":{\"target\":\"d\"}} ;"},
        {"name": "e", "tools": "{\"tool\":\"seq_call\",\"args\":{\"target\":\"a\",\"sequence\":\"x\"}} ;"},
        {"name": "f", "tools": "{\"tool\":\"seq_when_call\",\"args\":{\"target\":\"a\",\"when\":\"1 ==\"}} ;"}
    ]));
    let groups: Vec<&str> = errors
        .iter()
        .map(|e| match e {
            CheckError::BadTarget { group, .. } | CheckError::BadCondition { group, .. } => {
                group.as_str()
            }
            other => panic!("{other:?}"),
        })
        .collect();
    assert_eq!(groups, ["a", "d", "e", "f"], "{errors:#?}");
    assert!(
        errors[0]
            .to_string()
            .contains("not a group of this sequence (groups: a, b, c, d, e, f)")
    );
    assert_eq!(warnings, []);
}

#[test]
fn tools_forbidden_inside_sequences_are_errors() {
    for tool in [
        "output_send__console",
        "output_send__qq",
        "spawn_child",
        "seq_run",
        "seq_create",
        "plgreload",
    ] {
        let (errors, _) =
            check(json!({"name": "g", "tools": format!("{{\"tool\":\"{tool}\"}} ;")}));
        assert_eq!(
            errors,
            [CheckError::ForbiddenTool {
                group: "g".into(),
                tool: tool.into()
            }],
            "{tool}"
        );
    }
    for allowed in [
        "seq_call",
        "seq_when_call",
        "demo_echo",
        "cmd_run",
        "get_tools",
    ] {
        assert!(!homeagent_seq::check::is_forbidden(allowed), "{allowed}");
    }
}

#[test]
fn unused_inputs_unwritten_slots_and_unknown_tools_are_warnings() {
    let (errors, warnings) = check(
        json!({"name": "g", "in": {"unused": "string"}, "out": {"never": "string"},
        "tools": "{\"tool\":\"not_installed\"} ; {\"tool\":\"demo_echo\"} ;"}),
    );
    assert_eq!(errors, []);
    assert_eq!(
        warnings,
        [
            Warning::UnknownTool {
                group: "g".into(),
                tool: "not_installed".into()
            },
            Warning::UnusedInput {
                group: "g".into(),
                key: "unused".into()
            },
            Warning::UnwrittenOutput {
                group: "g".into(),
                slot: "never".into()
            },
        ]
    );
}

/// A `fallback` is used only by `missing: degrade`: given under another
/// policy it never is, and the author who wrote it expects it to be.
#[test]
fn a_fallback_without_degrade_is_a_warning_naming_the_policy() {
    let (errors, warnings) = check(json!({"name": "g", "out": {"r": "object"},
        "tools": "{\"tool\":\"demo_echo\",\"as\":\"r\",\"fallback\":{\"x\":1}} ;"}));
    assert_eq!(errors, []);
    assert_eq!(
        warnings,
        [Warning::UnusedFallback {
            group: "g".into(),
            tool: "demo_echo".into(),
            missing: "fail".into(),
        }]
    );
    assert!(
        warnings[0].to_string().contains("missing: degrade"),
        "{}",
        warnings[0]
    );
    let (_, warnings) = check(
        json!({"name": "g", "out": {"r": "object"}, "missing": "degrade",
        "tools": "{\"tool\":\"demo_echo\",\"as\":\"r\",\"fallback\":{\"x\":1}} ;"}),
    );
    assert_eq!(warnings, []);
}

/// A `seq_when_call`'s `when` reads the args the call passes, not the
/// group's: a key the call's `args` do not pass is refused at create time
/// (it used to be saved and then fail every run with "unknown reference").
#[test]
fn a_seq_when_call_condition_may_read_only_what_the_call_passes() {
    let (errors, _) = check_groups(json!([
        {"name": "sub", "in": {"go": "boolean"}, "tools": "{\"tool\":\"demo_echo\"} ;"},
        {"name": "main", "in": {"verbose": "boolean"},
         "tools": "{\"tool\":\"seq_when_call\",\"args\":{\"target\":\"sub\",\"when\":\"$args.verbose\",\"args\":{\"go\":true}}} ;"}
    ]));
    assert_eq!(
        errors,
        [CheckError::WhenArgNotPassed {
            group: "main".into(),
            index: 1,
            arg: "verbose".into(),
            passed: "go".into(),
        }]
    );
    let text = errors[0].to_string();
    assert!(text.contains("\"verbose\": \"$args.verbose\""), "{text}");
    let (errors, _) = check_groups(json!([
        {"name": "sub", "in": {"go": "boolean"}, "tools": "{\"tool\":\"demo_echo\"} ;"},
        {"name": "main", "in": {"verbose": "boolean"},
         "tools": "{\"tool\":\"seq_when_call\",\"args\":{\"target\":\"sub\",\"when\":\"$args.go\",\"args\":{\"go\":\"$args.verbose\"}}} ;"}
    ]));
    assert_eq!(errors, []);
}

#[test]
fn bad_conditions_and_retry_without_retries_are_errors() {
    let (errors, _) =
        check(json!({"name": "g", "when": "$args.", "tools": "{\"tool\":\"demo_echo\"} ;"}));
    assert!(
        matches!(&errors[..], [CheckError::BadCondition { .. }]),
        "{errors:?}"
    );
    let (errors, _) =
        check(json!({"name": "g", "on_error": "retry", "tools": "{\"tool\":\"demo_echo\"} ;"}));
    assert_eq!(
        errors,
        [CheckError::RetryWithoutRetries { group: "g".into() }]
    );
    // The other way round: retries that never happen (on_error is abort
    // or continue) is the same mistake, and it was silently ignored.
    for on_error in [None, Some("abort"), Some("continue")] {
        let mut group = json!({"name": "g", "retries": 3, "tools": "{\"tool\":\"demo_echo\"} ;"});
        if let Some(on_error) = on_error {
            group["on_error"] = json!(on_error);
        }
        let (errors, _) = check(group);
        assert_eq!(
            errors,
            [CheckError::RetriesWithoutRetry {
                group: "g".into(),
                retries: 3
            }],
            "{on_error:?}"
        );
        let message = errors[0].to_string();
        assert!(message.contains("\"on_error\": \"retry\""), "{message}");
    }
}

/// Groups of one sequence that call each other round (g1 → g2 → g1) could
/// only end at the run-time depth limit, after running every tool on the
/// way several times; and a computed target (`#$args.t`) cannot be checked
/// for cycles at all. Both are refused when the sequence is saved.
#[test]
fn group_call_cycles_and_computed_targets_are_errors() {
    let call =
        |target: &str| format!("{{\"tool\":\"seq_call\",\"args\":{{\"target\":\"{target}\"}}}} ;");
    let (errors, _) = check_groups(json!([
        {"name": "g1", "tools": call("g2")},
        {"name": "g2", "tools": call("g3")},
        {"name": "g3", "tools": call("g1")},
    ]));
    assert_eq!(
        errors,
        [CheckError::GroupCycle {
            path: "g1 → g2 → g3 → g1".into()
        }],
        "{errors:?}"
    );
    // A chain that ends is fine.
    let (errors, _) = check_groups(json!([
        {"name": "g1", "tools": call("g2")},
        {"name": "g2", "tools": call("g3")},
        {"name": "g3", "tools": "{\"tool\":\"demo_echo\"} ;"},
    ]));
    assert_eq!(errors, [], "{errors:?}");
    for target in ["#$args.t", "$args.t", "#Seq_$args.t"] {
        let (errors, _) = check_groups(json!([
            {"name": "g1", "in": {"t": "string"}, "tools": call(target)},
        ]));
        assert!(
            matches!(&errors[..], [CheckError::BadTarget { detail, .. }] if detail.contains("written out")),
            "{target}: {errors:?}"
        );
    }
}

/// A `#` target whose name no sequence can ever have fails every run:
/// refused when the caller is created, with the name's rule.
#[test]
fn a_sequence_target_no_sequence_can_be_named_is_refused() {
    for (target, rule) in [
        ("#a/b", "names must not contain `/` or `\\`"),
        ("#..x", "names must not contain `..`"),
        ("#.hidden", "names must not start with `.`"),
    ] {
        let step = format!("{{\"tool\":\"seq_call\",\"args\":{{\"target\":\"{target}\"}}}} ;");
        let (errors, _) = check(json!({"name": "g", "tools": step}));
        let texts: Vec<String> = errors.iter().map(ToString::to_string).collect();
        assert_eq!(texts.len(), 1, "{target}: {texts:?}");
        assert!(
            texts[0].contains(&format!("target \"{target}\": bad sequence name"))
                && texts[0].contains(rule),
            "{target}: {}",
            texts[0]
        );
    }
    // A name that may exist later is no error here (the store warns of it).
    let (errors, _) = check(json!({"name": "g",
        "tools": "{\"tool\":\"seq_call\",\"args\":{\"target\":\"#later\"}} ;"}));
    assert!(errors.is_empty(), "{errors:?}");
}
