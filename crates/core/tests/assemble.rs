//! Stream assembly against the transcripts that broke other runtimes.

#![allow(clippy::unwrap_used, clippy::expect_used)] // a panic in a test is a test failure

use homeagent_core::assemble::{Diagnostic, StreamAssembler, parse_arguments};
use homeagent_core::{ErrorReason, FinishReason, StreamEvent, ToolCallFragment, Usage};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use serde_json::{Value, json};

fn frag(index: Option<u32>, id: Option<&str>, name: Option<&str>, args: &str) -> StreamEvent {
    StreamEvent::ToolCall(ToolCallFragment {
        stream_index: index,
        id: id.map(str::to_owned),
        name: name.map(str::to_owned),
        raw_arguments: args.to_owned(),
    })
}

/// The turn's calls as (id, name, arguments), for comparing with a literal.
fn calls_of(turn: &homeagent_core::AssembledTurn) -> Vec<(&str, &str, &Value)> {
    turn.calls
        .iter()
        .map(|c| (c.call.id.as_str(), c.call.name.as_str(), &c.call.arguments))
        .collect()
}

fn finish(reason: &str) -> StreamEvent {
    StreamEvent::Finish {
        reason: reason.to_owned(),
    }
}

fn assemble(events: impl IntoIterator<Item = StreamEvent>) -> homeagent_core::AssembledTurn {
    let mut asm = StreamAssembler::new();
    for e in events {
        asm.push(e);
    }
    asm.finish()
}

/// Splits `text` into `parts` pieces at char boundaries (some may be empty).
fn split_into(text: &str, rng: &mut SmallRng, parts: usize) -> Vec<String> {
    let chars: Vec<char> = text.chars().collect();
    let mut cuts: Vec<usize> = (0..parts - 1)
        .map(|_| rng.random_range(0..=chars.len()))
        .collect();
    cuts.sort_unstable();
    let mut out = Vec::new();
    let mut prev = 0;
    for cut in cuts.into_iter().chain([chars.len()]) {
        out.push(chars[prev..cut].iter().collect());
        prev = cut;
    }
    out
}

#[test]
fn eight_calls_over_200_shuffled_rounds_always_come_out_in_index_order() {
    let mut rng = SmallRng::seed_from_u64(0x5eed);
    for round in 0..200 {
        let expected: Vec<(String, String, Value)> = (0..8)
            .map(|i| {
                let args = json!({"round": round, "i": i, "path": format!("/tmp/f{i}"), "note": "naïve ✓"});
                (format!("call_{round}_{i}"), format!("tool_{i}"), args)
            })
            .collect();
        // Each call becomes a queue of fragments that must stay in order;
        // the queues are drained in a random interleaving.
        let mut queues: Vec<std::collections::VecDeque<StreamEvent>> = expected
            .iter()
            .enumerate()
            .map(|(i, (id, name, args))| {
                let text = args.to_string();
                let pieces = split_into(&text, &mut rng, 2 + i % 4);
                let mut q: std::collections::VecDeque<StreamEvent> = pieces
                    .iter()
                    .map(|p| frag(Some(i as u32), None, None, p))
                    .collect();
                q.push_front(frag(Some(i as u32), Some(id), Some(name), ""));
                q
            })
            .collect();
        let mut events = Vec::new();
        while queues.iter().any(|q| !q.is_empty()) {
            let live: Vec<usize> = (0..8).filter(|i| !queues[*i].is_empty()).collect();
            let pick = live[rng.random_range(0..live.len())];
            events.push(queues[pick].pop_front().unwrap());
        }
        events.push(finish("tool_calls"));
        let turn = assemble(events);
        let got: Vec<(String, String, Value)> = turn
            .calls
            .iter()
            .map(|c| {
                (
                    c.call.id.clone(),
                    c.call.name.clone(),
                    c.call.arguments.clone(),
                )
            })
            .collect();
        assert_eq!(got, expected, "round {round}");
        assert!(turn.calls.iter().all(|c| c.argument_error.is_none()));
    }
}

#[test]
fn interleaved_calls_with_non_ascii_and_empty_arguments_assemble_exactly() {
    let turn = assemble([
        StreamEvent::TextDelta {
            text: "Let me ".into(),
        },
        frag(Some(0), Some("a"), Some("files_read"), "{\"pa"),
        frag(Some(1), Some("b"), Some("note"), "{\"text\": \"你好，"),
        frag(Some(2), Some("c"), Some("get_tools"), "{}"),
        frag(Some(0), None, None, "th\": \"/etc/"),
        frag(Some(3), Some("d"), Some("cmd_run"), "{\"command\":"),
        frag(Some(1), None, None, "世界 🌍\"}"),
        StreamEvent::TextDelta {
            text: "check.".into(),
        },
        frag(Some(3), None, None, " \"date\"}"),
        frag(Some(0), None, None, "hosts\"}"),
        finish("tool_calls"),
    ]);
    assert_eq!(turn.text, "Let me check.");
    let calls = calls_of(&turn);
    assert_eq!(
        calls,
        vec![
            ("a", "files_read", &json!({"path": "/etc/hosts"})),
            ("b", "note", &json!({"text": "你好，世界 🌍"})),
            ("c", "get_tools", &json!({})),
            ("d", "cmd_run", &json!({"command": "date"})),
        ]
    );
    assert_eq!(
        turn.calls[1].call.raw_arguments,
        "{\"text\": \"你好，世界 🌍\"}"
    );
    // `{}` is a real answer, not lost arguments.
    assert!(turn.diagnostics.is_empty(), "{:?}", turn.diagnostics);
    assert_eq!(turn.finish_reason, Some(FinishReason::ToolCalls));
}

#[test]
fn same_index_with_a_new_id_starts_a_new_call() {
    // OpenAI-compatible Gemini endpoints send every parallel call at index 0.
    let turn = assemble([
        frag(Some(0), Some("g1"), Some("weather"), "{\"city\":"),
        frag(Some(0), None, None, "\"Paris\"}"),
        frag(Some(0), Some("g2"), Some("weather"), "{\"city\":\"Oslo\"}"),
        frag(Some(0), Some("g3"), Some("time"), ""),
        frag(Some(0), None, None, "{\"tz\":\"UTC\"}"),
        finish("stop"),
    ]);
    let calls = calls_of(&turn);
    assert_eq!(
        calls,
        vec![
            ("g1", "weather", &json!({"city": "Paris"})),
            ("g2", "weather", &json!({"city": "Oslo"})),
            ("g3", "time", &json!({"tz": "UTC"})),
        ]
    );
}

#[test]
fn the_same_id_repeated_at_its_index_stays_one_call() {
    let turn = assemble([
        frag(Some(0), Some("x"), Some("t"), "{\"a\":"),
        frag(Some(0), Some("x"), None, "1}"),
    ]);
    assert_eq!(turn.calls.len(), 1);
    assert_eq!(turn.calls[0].call.arguments, json!({"a": 1}));
}

#[test]
fn fragments_without_index_match_by_id_or_continue_the_last_call() {
    let turn = assemble([
        frag(None, Some("p"), Some("first"), "{\"n\":"),
        frag(None, Some("q"), Some("second"), "{\"m\":"),
        frag(None, Some("p"), None, "1}"),
        frag(None, Some("q"), None, "2"),
        // Neither index nor id: continues the most recent call (q).
        frag(None, None, None, "}"),
    ]);
    let calls = calls_of(&turn);
    assert_eq!(
        calls,
        vec![
            ("p", "first", &json!({"n": 1})),
            ("q", "second", &json!({"m": 2}))
        ]
    );
}

#[test]
fn later_deltas_without_id_are_keyed_by_index() {
    // codex keyed calls by id, which later deltas do not carry.
    let turn = assemble([
        frag(Some(0), Some("c0"), Some("a"), ""),
        frag(Some(1), Some("c1"), Some("b"), ""),
        frag(Some(1), None, None, "{\"y\":2}"),
        frag(Some(0), None, None, "{\"x\":1}"),
    ]);
    assert_eq!(turn.calls[0].call.arguments, json!({"x": 1}));
    assert_eq!(turn.calls[1].call.arguments, json!({"y": 2}));
}

#[test]
fn an_empty_leading_index_zero_fragment_makes_no_phantom_call() {
    let turn = assemble([
        frag(Some(0), None, None, ""),
        frag(Some(1), Some("only"), Some("t"), "{\"k\":true}"),
        finish("tool_calls"),
    ]);
    assert_eq!(turn.calls.len(), 1);
    assert_eq!(turn.calls[0].call.id, "only");
    assert!(turn.diagnostics.is_empty(), "{:?}", turn.diagnostics);
}

#[test]
fn a_call_that_never_gets_a_name_is_dropped_with_a_diagnostic() {
    let turn = assemble([
        frag(Some(0), Some("n0"), None, "{\"lost\":1}"),
        frag(Some(1), Some("n1"), Some("kept"), "{}"),
    ]);
    assert_eq!(turn.calls.len(), 1);
    assert_eq!(turn.calls[0].call.name, "kept");
    assert_eq!(
        turn.diagnostics,
        vec![Diagnostic::NamelessCallDropped {
            stream_index: 0,
            argument_bytes: 10
        }]
    );
}

/// Some OpenAI-compatible servers open a call at one index and send its
/// argument pieces under another, never opened (name at 0, arguments at
/// 1, or each piece at an index of its own). The pieces belong to the
/// call before them: dropped, they left it blank, and a blank call runs
/// with `{}` (its defaults), not with what the model asked.
#[test]
fn argument_pieces_under_an_index_nobody_opened_join_the_call_before_them() {
    let turn = assemble([
        frag(Some(0), Some("c1"), Some("files_list"), ""),
        frag(Some(1), None, None, "{\"dir\":"),
        frag(Some(2), None, None, "\"/etc\"}"),
        frag(Some(3), Some("c2"), Some("files_read"), ""),
        frag(Some(4), None, None, "{\"path\":\"a\"}"),
        finish("tool_calls"),
    ]);
    assert_eq!(
        calls_of(&turn),
        vec![
            ("c1", "files_list", &json!({"dir": "/etc"})),
            ("c2", "files_read", &json!({"path": "a"})),
        ]
    );
    assert!(turn.calls.iter().all(|c| c.argument_error.is_none()));
    assert!(
        !turn
            .diagnostics
            .iter()
            .any(|d| matches!(d, Diagnostic::NamelessCallDropped { .. })),
        "{:?}",
        turn.diagnostics
    );
}

/// Argument pieces that arrive before their call's name, at the call's own
/// index, stay that call's: only a call that never gets a name lends its
/// pieces, and only to a named call that had none of its own.
#[test]
fn pieces_at_their_own_index_before_the_name_stay_with_their_call() {
    let turn = assemble([
        frag(Some(0), Some("c1"), Some("a"), "{\"x\":1}"),
        frag(Some(1), None, None, "{\"y\":"),
        frag(Some(1), Some("c2"), Some("b"), "2}"),
        frag(Some(2), None, None, "{\"orphan\":true}"),
        finish("tool_calls"),
    ]);
    assert_eq!(
        calls_of(&turn),
        vec![("c1", "a", &json!({"x": 1})), ("c2", "b", &json!({"y": 2}))]
    );
    // The orphan found no blank call to join: dropped, and said so.
    assert_eq!(
        turn.diagnostics,
        vec![Diagnostic::NamelessCallDropped {
            stream_index: 2,
            argument_bytes: 15
        }]
    );
}

/// A fragment with another tool's name at a busy index, without an id, is
/// a new call: it used to rename the call there, which then ran the first
/// call's arguments as the second tool.
#[test]
fn another_name_at_a_busy_index_starts_a_new_call_instead_of_renaming() {
    let turn = assemble([
        frag(Some(0), None, Some("files_list"), "{\"dir\":\"/\"}"),
        frag(Some(0), None, Some("files_delete"), "{\"path\":\"/x\"}"),
        frag(Some(0), None, Some("files_delete"), ""),
        finish("tool_calls"),
    ]);
    let names: Vec<&str> = turn.calls.iter().map(|c| c.call.name.as_str()).collect();
    assert_eq!(names, ["files_list", "files_delete"], "{turn:?}");
    assert_eq!(turn.calls[0].call.arguments, json!({"dir": "/"}));
    assert_eq!(turn.calls[1].call.arguments, json!({"path": "/x"}));
    // Without an index either: another name is another call.
    let turn = assemble([
        frag(None, None, Some("files_list"), "{\"dir\":\"/\"}"),
        frag(None, None, Some("files_delete"), "{\"path\":\"/x\"}"),
        finish("tool_calls"),
    ]);
    let names: Vec<&str> = turn.calls.iter().map(|c| c.call.name.as_str()).collect();
    assert_eq!(names, ["files_list", "files_delete"], "{turn:?}");
    assert_eq!(turn.calls[1].call.arguments, json!({"path": "/x"}));
}

#[test]
fn an_empty_finish_reason_is_not_the_end() {
    let turn = assemble([
        frag(Some(0), Some("c"), Some("t"), "{\"a\""),
        finish(""),
        frag(Some(0), None, None, ":1}"),
        finish(""),
    ]);
    assert_eq!(turn.finish_reason, None);
    assert_eq!(turn.calls[0].call.arguments, json!({"a": 1}));
    assert!(turn.calls[0].argument_error.is_none());
}

/// Only the call opened last can have been cut: a zero-argument call
/// before it, whose arguments are blank, had ended (a later call began),
/// and runs with `{}`.
#[test]
fn in_a_truncated_turn_only_the_last_call_can_be_cut() {
    let turn = assemble([
        frag(Some(0), Some("a"), Some("clock_now"), ""),
        frag(Some(1), Some("b"), Some("files_write"), "{\"path\":\"a"),
        finish("length"),
    ]);
    assert_eq!(turn.calls[0].argument_error, None, "{:?}", turn.calls[0]);
    assert_eq!(turn.calls[0].call.arguments, json!({}));
    assert_eq!(
        turn.calls[1].argument_error.as_ref().map(|e| e.reason),
        Some(ErrorReason::Truncated)
    );
    // The last call blank: cut before its arguments.
    let turn = assemble([
        frag(Some(0), Some("a"), Some("files_list"), "{}"),
        frag(Some(1), Some("b"), Some("files_write"), ""),
        finish("length"),
    ]);
    assert_eq!(turn.calls[0].argument_error, None);
    assert_eq!(
        turn.calls[1].argument_error.as_ref().map(|e| e.reason),
        Some(ErrorReason::Truncated)
    );
}

/// Two whole calls of one tool at one index, without ids (or with the
/// same one), are two calls: text after a complete object can never
/// continue it. They were one call with `{..}{..}` as its arguments.
#[test]
fn two_whole_calls_of_one_tool_at_one_index_are_two_calls() {
    for id in [None, Some("call_0")] {
        let turn = assemble([
            frag(Some(0), id, Some("weather"), "{\"city\":\"Paris\"}"),
            frag(Some(0), id, Some("weather"), "{\"city\":\"Oslo\"}"),
            finish("tool_calls"),
        ]);
        let arguments: Vec<&Value> = turn.calls.iter().map(|c| &c.call.arguments).collect();
        assert_eq!(
            arguments,
            [&json!({"city": "Paris"}), &json!({"city": "Oslo"})],
            "{id:?}: {turn:?}"
        );
        assert!(turn.calls.iter().all(|c| c.argument_error.is_none()));
        assert_ne!(turn.calls[0].call.id, turn.calls[1].call.id);
    }
    // The second whole call after another index's piece came between.
    let turn = assemble([
        frag(Some(0), None, Some("weather"), "{\"city\":\"Paris\"}"),
        frag(Some(1), None, Some("clock_now"), "{}"),
        frag(Some(0), None, Some("weather"), "{\"city\":\"Oslo\"}"),
        finish("tool_calls"),
    ]);
    let named: Vec<(&str, &Value)> = turn
        .calls
        .iter()
        .map(|c| (c.call.name.as_str(), &c.call.arguments))
        .collect();
    assert_eq!(
        named,
        [
            ("weather", &json!({"city": "Paris"})),
            ("weather", &json!({"city": "Oslo"})),
            ("clock_now", &json!({})),
        ]
    );
    // The same whole call sent again, id and all, is one call.
    let turn = assemble([
        frag(Some(0), Some("x"), Some("files_read"), "{}"),
        frag(Some(0), Some("x"), Some("files_read"), "{}"),
        frag(Some(1), Some("y"), Some("clock_now"), "{}"),
        frag(Some(0), Some("x"), Some("files_read"), "{}"),
        finish("tool_calls"),
    ]);
    assert_eq!(
        calls_of(&turn),
        [
            ("x", "files_read", &json!({})),
            ("y", "clock_now", &json!({}))
        ],
        "{turn:?}"
    );
    assert_eq!(turn.calls[0].call.raw_arguments, "{}");
    assert!(turn.calls.iter().all(|c| c.argument_error.is_none()));
    // A string value holding `}{` is one call, its pieces however split.
    let turn = assemble([
        frag(Some(0), None, Some("note"), "{\"text\":\"a}"),
        frag(Some(0), None, Some("note"), "{b\"}"),
        finish("tool_calls"),
    ]);
    assert_eq!(calls_of(&turn).len(), 1, "{turn:?}");
    assert_eq!(turn.calls[0].call.arguments, json!({"text": "a}{b"}));
}

/// A piece without an index joins the call its id names, even when that
/// id reached its call through an indexed piece after the id map was made.
#[test]
fn an_unindexed_piece_finds_an_id_an_indexed_piece_gave_later() {
    let turn = assemble([
        frag(None, Some("a"), Some("f"), "{}"),
        frag(Some(1), None, Some("h"), "{\"x\":"),
        frag(Some(1), Some("c"), None, "1"),
        frag(None, Some("c"), None, "}"),
        finish("tool_calls"),
    ]);
    let calls = calls_of(&turn);
    assert_eq!(
        calls,
        [("a", "f", &json!({})), ("c", "h", &json!({"x": 1}))],
        "{turn:?}"
    );
}

#[test]
fn a_truncated_turn_marks_the_cut_call_and_keeps_the_complete_ones() {
    let turn = assemble([
        frag(Some(0), Some("ok"), Some("files_list"), "{\"dir\":\"/\"}"),
        frag(
            Some(1),
            Some("cut"),
            Some("files_write"),
            "{\"path\":\"a.txt\",\"content\":\"long te",
        ),
        finish("length"),
    ]);
    assert!(turn.calls[0].argument_error.is_none());
    let err = turn.calls[1]
        .argument_error
        .as_ref()
        .expect("cut call has an error");
    assert_eq!(err.reason, ErrorReason::Truncated);
    assert!(err.detail.contains("output token limit"), "{}", err.detail);
    let hint = err.hint.as_deref().unwrap_or_default();
    assert!(
        hint.contains("smaller calls") && hint.contains("do not repeat"),
        "{hint}"
    );
    // Replayed with an object, as providers require.
    assert_eq!(turn.calls[1].call.arguments, json!({}));
    assert_eq!(
        turn.calls[1].call.raw_arguments,
        "{\"path\":\"a.txt\",\"content\":\"long te"
    );
}

/// A call whose name came but whose arguments never did, in a turn the
/// output token limit ended, was cut before its arguments: it must not run
/// with an empty object (a delete with no path, a command with no args).
#[test]
fn a_call_cut_before_any_argument_text_is_truncated_not_run_with_nothing() {
    let turn = assemble([
        frag(Some(0), Some("ok"), Some("files_list"), "{\"dir\":\"/\"}"),
        frag(Some(1), Some("cut"), Some("files_delete"), ""),
        finish("length"),
    ]);
    assert!(turn.calls[0].argument_error.is_none());
    let err = turn.calls[1]
        .argument_error
        .as_ref()
        .expect("a call cut before its arguments has an error");
    assert_eq!(err.reason, ErrorReason::Truncated);
    assert!(err.detail.contains("output token limit"), "{}", err.detail);
    // A full context window cuts the output too (Anthropic, Mistral name
    // it so), though it is not the `length` the token limit gives.
    for reason in ["model_context_window_exceeded", "model_length"] {
        let turn = assemble([
            frag(Some(0), Some("cut"), Some("files_delete"), ""),
            finish(reason),
        ]);
        assert_eq!(
            turn.finish_reason,
            Some(FinishReason::Other(reason.to_owned()))
        );
        let error = turn.calls[0].argument_error.as_ref().map(|e| e.reason);
        assert_eq!(error, Some(ErrorReason::Truncated), "{reason}");
    }
    // Without the limit, blank arguments stay a call without arguments.
    for reason in ["tool_calls", "pause_turn"] {
        let turn = assemble([
            frag(Some(0), Some("c"), Some("clock_now"), ""),
            finish(reason),
        ]);
        assert!(turn.calls[0].argument_error.is_none(), "{reason}");
        assert_eq!(turn.calls[0].call.arguments, json!({}));
    }
}

#[test]
fn malformed_arguments_are_invalid_and_never_called_truncated() {
    let raw = "{\"path\": /etc/hosts}";
    let turn = assemble([
        frag(Some(0), Some("m"), Some("files_read"), raw),
        finish("tool_calls"),
    ]);
    let err = turn.calls[0]
        .argument_error
        .as_ref()
        .expect("malformed call has an error");
    assert_eq!(err.reason, ErrorReason::InvalidArguments);
    let text = err.render("files_read").to_lowercase();
    assert!(
        !text.contains("truncat") && !text.contains("token limit") && !text.contains("cut off"),
        "{text}"
    );
    assert!(text.contains(&format!("{} bytes", raw.len())), "{text}");
    assert!(
        text.contains("{\\\"path\\\": /etc/hosts}"),
        "quotes the first bytes: {text}"
    );
    assert_eq!(
        turn.diagnostics,
        vec![Diagnostic::ArgumentsLookDropped {
            call_id: "m".into(),
            tool: "files_read".into()
        }]
    );
}

#[test]
fn arguments_that_are_json_but_not_an_object_are_invalid() {
    for raw in ["[1,2]", "\"ls\"", "42", "null", "true"] {
        let parsed = parse_arguments("t", raw, false);
        assert_eq!(
            parsed.error.map(|e| e.reason),
            Some(ErrorReason::InvalidArguments),
            "{raw}"
        );
        assert_eq!(parsed.arguments, json!({}));
        // Parsed fine, just the wrong shape: nothing was lost on the way.
        assert!(!parsed.looks_dropped, "{raw}");
    }
}

#[test]
fn blank_arguments_are_an_empty_object_and_look_dropped() {
    for raw in ["", "   ", "\n\t"] {
        let parsed = parse_arguments("t", raw, false);
        assert_eq!(parsed.arguments, json!({}));
        assert!(parsed.error.is_none());
        assert!(parsed.looks_dropped, "{raw:?}");
    }
    for raw in ["{}", " { } ", "{\"a\":1}"] {
        assert!(!parse_arguments("t", raw, false).looks_dropped, "{raw:?}");
    }
}

#[test]
fn bare_unit_values_are_quoted_by_the_one_repair() {
    // Shapes seen in real logs.
    let cases = [
        (
            "{\"command\":\"sleep 1\",\"timeout\": 20s}",
            json!({"command":"sleep 1","timeout":"20s"}),
        ),
        (
            "{\"timeout\":5m,\"retries\":2}",
            json!({"timeout":"5m","retries":2}),
        ),
        ("{\"every\": 1.5h }", json!({"every":"1.5h"})),
        ("{\"delays\":[100ms, 2s]}", json!({"delays":["100ms","2s"]})),
        (
            "{\"note\":\"wait 20s, then 5m\",\"t\":30s}",
            json!({"note":"wait 20s, then 5m","t":"30s"}),
        ),
    ];
    for (raw, expected) in cases {
        let parsed = parse_arguments("t", raw, false);
        assert_eq!(parsed.arguments, expected, "{raw}");
        assert!(parsed.repaired && parsed.error.is_none(), "{raw}");
    }
}

#[test]
fn the_repair_leaves_valid_arguments_and_strings_alone() {
    let raw = "{\"text\":\"wait 20s\",\"n\":20}";
    let parsed = parse_arguments("t", raw, false);
    assert!(!parsed.repaired);
    assert_eq!(parsed.arguments, json!({"text": "wait 20s", "n": 20}));
    // Not a unit value: still invalid.
    let parsed = parse_arguments("t", "{\"n\": 20abcd}", false);
    assert_eq!(
        parsed.error.map(|e| e.reason),
        Some(ErrorReason::InvalidArguments)
    );
}

#[test]
fn truncated_arguments_are_not_made_valid_by_the_repair() {
    let parsed = parse_arguments("t", "{\"timeout\": 20s, \"cmd\": \"ls", true);
    assert_eq!(parsed.error.map(|e| e.reason), Some(ErrorReason::Truncated));
    assert!(!parsed.repaired);
}

#[test]
fn calls_without_ids_get_unique_ones() {
    let turn = assemble([
        frag(Some(0), None, Some("a"), "{}"),
        frag(Some(1), Some("call_0"), Some("b"), "{}"),
        frag(Some(2), Some("dup"), Some("c"), "{}"),
        frag(Some(3), Some("dup"), Some("d"), "{}"),
    ]);
    let ids: Vec<&str> = turn.calls.iter().map(|c| c.call.id.as_str()).collect();
    let unique: std::collections::HashSet<&str> = ids.iter().copied().collect();
    assert_eq!(unique.len(), 4, "{ids:?}");
    // The model's own ids are kept: the call it named `call_0` keeps that
    // id (anything keyed by it, a thought signature, stays on it), and the
    // call without one gets an id nobody sent; a repeated id is renamed
    // only at its second use.
    assert_eq!(ids[1], "call_0", "{ids:?}");
    assert_ne!(ids[0], "call_0", "{ids:?}");
    assert_eq!(ids[2], "dup");
    assert_ne!(ids[3], "dup");
}

/// Many calls without an index each find their call (by id) or a fresh
/// index in constant time, and ids are handed out past those taken: the
/// result is the same as one call at a time would give.
#[test]
fn many_unindexed_calls_and_crafted_ids_assemble_in_order() {
    const N: usize = 2_000;
    let mut events = Vec::new();
    // Ids the model sent, crafted to sit where handed-out ids would go.
    for n in 0..N {
        events.push(frag(
            None,
            Some(&format!("call_{}", N + n)),
            Some("crafted"),
            "{}",
        ));
    }
    for n in 0..N {
        events.push(frag(None, None, Some(&format!("t{n}")), "{}"));
    }
    // A continuation by id, long after its call opened.
    events.push(frag(None, Some(&format!("call_{N}")), None, ""));
    let turn = assemble(events);
    assert_eq!(turn.calls.len(), 2 * N);
    let ids: std::collections::HashSet<&str> =
        turn.calls.iter().map(|c| c.call.id.as_str()).collect();
    assert_eq!(ids.len(), 2 * N, "every id unique");
    for (n, call) in turn.calls[..N].iter().enumerate() {
        assert_eq!(call.call.id, format!("call_{}", N + n));
        assert_eq!(call.call.name, "crafted");
    }
    for (n, call) in turn.calls[N..].iter().enumerate() {
        assert_eq!(call.call.name, format!("t{n}"));
    }
}

#[test]
fn reasoning_parts_keep_their_provider_metadata() {
    let turn = assemble([
        StreamEvent::ReasoningDelta {
            text: "think ".into(),
        },
        StreamEvent::ReasoningDelta {
            text: "hard".into(),
        },
        StreamEvent::ReasoningMetadata {
            metadata: json!({"signature": "sig-1"}),
        },
        StreamEvent::ReasoningDelta {
            text: "again".into(),
        },
        StreamEvent::ReasoningMetadata {
            metadata: json!({"signature": "sig-2"}),
        },
        StreamEvent::TextDelta {
            text: "done".into(),
        },
    ]);
    assert_eq!(turn.reasoning.len(), 2);
    assert_eq!(turn.reasoning[0].text, "think hard");
    assert_eq!(
        turn.reasoning[0].metadata,
        Some(json!({"signature": "sig-1"}))
    );
    assert_eq!(turn.reasoning[1].text, "again");
    assert_eq!(turn.message().content, "done");
}

#[test]
fn usage_reports_merge_with_non_zero_counts_winning() {
    let turn = assemble([
        StreamEvent::Usage(Usage {
            prompt_tokens: 100,
            completion_tokens: 0,
            total_tokens: 0,
        }),
        StreamEvent::Usage(Usage {
            prompt_tokens: 0,
            completion_tokens: 7,
            total_tokens: 0,
        }),
    ]);
    assert_eq!(
        turn.usage,
        Usage {
            prompt_tokens: 100,
            completion_tokens: 7,
            total_tokens: 107
        }
    );
}

#[test]
fn an_id_matched_fragment_does_not_divert_later_index_fragments() {
    // a and b share index 0; an index-less fragment for `a` arrives after b
    // opened; the next index-0 fragment without id belongs to b, the call
    // currently at that index.
    let turn = assemble([
        frag(Some(0), Some("a"), Some("first"), "{\"x\":"),
        frag(Some(0), Some("b"), Some("second"), "{\"y\":"),
        frag(None, Some("a"), None, "1}"),
        frag(Some(0), None, None, "2}"),
    ]);
    let args: Vec<&Value> = turn.calls.iter().map(|c| &c.call.arguments).collect();
    assert_eq!(args, vec![&json!({"x": 1}), &json!({"y": 2})]);
}

#[test]
fn a_new_call_without_index_takes_the_next_free_index() {
    // Calls at 0 and 1, then an index-less call with its own id: it must not
    // take over index 0, whose continuation arrives afterwards.
    let turn = assemble([
        frag(Some(0), Some("a"), Some("first"), "{\"x\":"),
        frag(Some(1), Some("b"), Some("second"), "{}"),
        frag(None, Some("c"), Some("third"), "{\"z\":3}"),
        frag(Some(0), None, None, "1}"),
    ]);
    let calls: Vec<(&str, &Value)> = turn
        .calls
        .iter()
        .map(|c| (c.call.id.as_str(), &c.call.arguments))
        .collect();
    assert_eq!(
        calls,
        vec![
            ("a", &json!({"x": 1})),
            ("b", &json!({})),
            ("c", &json!({"z": 3}))
        ]
    );
}

#[test]
fn a_first_fragment_without_index_or_id_starts_a_call_only_if_it_carries_something() {
    let empty_then_real = assemble([
        frag(None, None, None, ""),
        frag(None, None, Some("t"), "{\"a\":1}"),
    ]);
    assert_eq!(empty_then_real.calls.len(), 1);
    assert_eq!(empty_then_real.calls[0].call.arguments, json!({"a": 1}));
    assert!(
        empty_then_real
            .diagnostics
            .iter()
            .all(|d| !matches!(d, Diagnostic::NamelessCallDropped { .. }))
    ); // An empty keep-alive fragment alone opens nothing, so nothing is dropped.
    let lone = assemble([
        frag(None, None, None, ""),
        StreamEvent::TextDelta { text: "hi".into() },
    ]);
    assert!(lone.calls.is_empty());
    assert_eq!(lone.diagnostics, vec![]);
}

#[test]
fn streamed_text_is_visible_before_the_turn_ends() {
    let mut asm = StreamAssembler::new();
    asm.push(StreamEvent::TextDelta { text: "Hel".into() });
    asm.push(StreamEvent::TextDelta { text: "lo".into() });
    assert_eq!(asm.text(), "Hello");
}

#[test]
fn a_reported_total_above_prompt_plus_completion_is_kept() {
    // Reasoning tokens count in the total but in neither part on some wires.
    let turn = assemble([StreamEvent::Usage(Usage {
        prompt_tokens: 10,
        completion_tokens: 5,
        total_tokens: 40,
    })]);
    assert_eq!(turn.usage.total_tokens, 40);
}

/// Usage figures are the provider's: absurd ones saturate instead of
/// overflowing (a panic in a debug build, a wrong total in release).
#[test]
fn usage_figures_at_the_top_of_the_range_saturate() {
    let turn = assemble([
        StreamEvent::Usage(Usage {
            prompt_tokens: u64::MAX,
            completion_tokens: 1,
            total_tokens: 0,
        }),
        finish("stop"),
    ]);
    let usage = turn.usage;
    assert_eq!(usage.total_tokens, u64::MAX);
    assert_eq!(usage.prompt_tokens, u64::MAX);
}

/// Each provider spells its finish reasons its own way; a normal end read
/// as "other" would tell the person a finished answer stopped early, and
/// a withheld one read as "other" would not say why.
#[test]
fn finish_reasons_from_every_provider_are_read_by_meaning() {
    for (raw, meaning) in [
        // Text Generation Inference and Together end on the model's own
        // end-of-sequence token; Gemini may leave the reason unspecified.
        ("eos", FinishReason::Stop),
        ("eos_token", FinishReason::Stop),
        ("FINISH_REASON_UNSPECIFIED", FinishReason::Stop),
        ("end_turn", FinishReason::Stop),
        ("tool_use", FinishReason::ToolCalls),
        // Mistral's full context window is not the output limit the
        // length note tells the person to raise.
        (
            "model_length",
            FinishReason::Other("model_length".to_owned()),
        ),
        ("MAX_TOKENS", FinishReason::Length),
        // Gemini withholds for several policies besides SAFETY.
        ("PROHIBITED_CONTENT", FinishReason::ContentFilter),
        ("BLOCKLIST", FinishReason::ContentFilter),
        ("SPII", FinishReason::ContentFilter),
        ("RECITATION", FinishReason::ContentFilter),
        ("IMAGE_SAFETY", FinishReason::ContentFilter),
        ("refusal", FinishReason::ContentFilter),
        ("pause_turn", FinishReason::Other("pause_turn".to_owned())),
    ] {
        assert_eq!(FinishReason::parse(raw), Some(meaning), "{raw}");
    }
}

#[test]
fn calls_at_stream_indices_on_both_sides_of_the_dense_table_assemble_whole() {
    // Indices below 1024 live in a table, the rest in a map: a call must
    // be found again wherever it lives, its pieces interleaved with others.
    let indices = [1023, 1024, 1025, 70_000, u32::MAX];
    let mut events = Vec::new();
    for (i, index) in indices.iter().enumerate() {
        let id = format!("c{i}");
        events.push(frag(Some(*index), Some(&id), Some("t"), "{\"n\":"));
    }
    for (i, index) in indices.iter().enumerate() {
        events.push(frag(Some(*index), None, None, &format!("{i}}}")));
    }
    let turn = assemble(events);
    let expected: Vec<(String, Value)> = (0..indices.len())
        .map(|i| (format!("c{i}"), json!({"n": i})))
        .collect();
    let got: Vec<(String, Value)> = turn
        .calls
        .iter()
        .map(|c| (c.call.id.clone(), c.call.arguments.clone()))
        .collect();
    assert_eq!(got, expected);
    assert_eq!(turn.diagnostics, vec![]);
}

#[test]
fn an_index_less_call_after_a_high_index_comes_after_it() {
    // The next free index is past the highest one seen, not merely unused:
    // the calls stay in the order the model sent them.
    let turn = assemble([
        frag(Some(5), Some("a"), Some("first"), "{}"),
        frag(None, Some("b"), Some("second"), "{}"),
        frag(None, Some("c"), Some("third"), "{}"),
    ]);
    let ids: Vec<&str> = turn.calls.iter().map(|c| c.call.id.as_str()).collect();
    assert_eq!(ids, ["a", "b", "c"]);
}

#[test]
fn the_repair_reads_strings_whole_and_units_strictly() {
    // Repaired: text in strings is never a value, however it looks; a
    // negative duration is a unit value too.
    let repaired = [
        (
            "{\"note\":\"a,5m,b\",\"t\":30s}",
            json!({"note": "a,5m,b", "t": "30s"}),
        ),
        (
            "{\"note\":\"say \\\",5m, ok\",\"t\":[1s,-2m]}",
            json!({"note": "say \",5m, ok", "t": ["1s", "-2m"]}),
        ),
        ("{\"t\":-3m}", json!({"t": "-3m"})),
        // A number with an exponent is a number, not a unit value.
        (
            "{\"t\":20s,\"n\":1e3,\"m\":-2.5E-1}",
            json!({"t": "20s", "n": 1000.0, "m": -0.25}),
        ),
    ];
    for (raw, expected) in repaired {
        let parsed = parse_arguments("t", raw, false);
        assert_eq!(parsed.arguments, expected, "{raw}");
        assert!(parsed.repaired && parsed.error.is_none(), "{raw}");
    }
    // Not a number with a unit (letters only after the number): left
    // alone, so still invalid.
    for raw in [
        "{\"t\":5-3m}",
        "{\"t\":5m3}",
        "{\"t\":2.5.1s}",
        "{\"t\":1h30m}",
    ] {
        let parsed = parse_arguments("t", raw, false);
        assert!(!parsed.repaired, "{raw}");
        assert_eq!(
            parsed.error.map(|e| e.reason),
            Some(ErrorReason::InvalidArguments),
            "{raw}"
        );
    }
}

/// Two calls opened at one index, their pieces then interleaved by id: a
/// piece joins the call its id names, wherever that call opened, instead
/// of opening a nameless call that is dropped (and leaving both calls to
/// run with `{}`).
#[test]
fn pieces_interleaved_at_one_index_join_the_calls_their_ids_name() {
    let turn = assemble([
        frag(Some(0), Some("a"), Some("f"), ""),
        frag(Some(0), Some("b"), Some("g"), ""),
        frag(Some(0), Some("a"), None, "{\"path\":\"x\"}"),
        frag(Some(0), Some("b"), None, "{\"q\":1}"),
    ]);
    assert_eq!(
        calls_of(&turn),
        [
            ("a", "f", &json!({"path": "x"})),
            ("b", "g", &json!({"q": 1}))
        ]
    );
}
