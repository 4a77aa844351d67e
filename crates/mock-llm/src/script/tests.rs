//! Every trigger, checked through the kernel's own `StreamAssembler`, so the
//! calls the script means are the calls a consumer gets.

use std::collections::BTreeMap;

use homeagent_core::{
    AssembledTurn, AssistantMessage, ErrorReason, FinishReason, Message, StreamAssembler,
    StreamEvent, ToolCall, ToolMessage,
};
use serde_json::{Value, json};

use super::*;

fn user(text: &str) -> Vec<Message> {
    vec![Message::system("you are a test"), Message::user(text)]
}

fn run(text: &str) -> ScriptedTurn {
    respond(&user(text), &ScriptOptions::default())
}

fn assemble(events: &[StreamEvent]) -> AssembledTurn {
    let mut asm = StreamAssembler::new();
    for e in events {
        asm.push(e.clone());
    }
    asm.finish()
}

fn nonce_of(turn: &ScriptedTurn) -> String {
    match &turn.reply {
        Reply::Batch { nonce, .. } => nonce.clone(),
        other => panic!("expected a batch, got {other:?}"),
    }
}

fn fragments(events: &[StreamEvent]) -> Vec<&homeagent_core::ToolCallFragment> {
    events
        .iter()
        .filter_map(|e| match e {
            StreamEvent::ToolCall(f) => Some(f),
            _ => None,
        })
        .collect()
}

/// The stream shape every batch must have: each call in two or more
/// fragments, the first carrying id, name and some arguments, the rest
/// neither id nor name; fragments of different calls interleaved; the turn
/// closed by a finish reason and a usage report.
fn check_stream_shape(events: &[StreamEvent], calls: usize, finish: &str) {
    let frags = fragments(events);
    let mut per_call: BTreeMap<u32, Vec<usize>> = BTreeMap::new();
    for (pos, f) in frags.iter().enumerate() {
        let index = f.stream_index.expect("every fragment has a stream_index");
        per_call.entry(index).or_default().push(pos);
    }
    assert_eq!(per_call.len(), calls, "one stream_index per call");
    for (index, positions) in &per_call {
        assert!(
            positions.len() >= 2,
            "call {index} arrives in {} fragment(s)",
            positions.len()
        );
        let first = frags[positions[0]];
        assert!(
            first.id.as_deref().is_some_and(|id| !id.is_empty()),
            "first fragment of {index} has an id"
        );
        assert!(
            first.name.as_deref().is_some_and(|n| !n.is_empty()),
            "first fragment of {index} has a name"
        );
        assert!(
            !first.raw_arguments.is_empty(),
            "first fragment of {index} carries part of the arguments"
        );
        for &pos in &positions[1..] {
            assert!(frags[pos].id.is_none() && frags[pos].name.is_none());
        }
    }
    if calls >= 2 {
        // Interleaved: call 1 starts before call 0 has sent its last piece.
        assert!(
            per_call[&1][0] < *per_call[&0].last().unwrap(),
            "fragments of different calls must interleave"
        );
    }
    let n = events.len();
    assert_eq!(
        events[n - 2],
        StreamEvent::Finish {
            reason: finish.to_owned()
        }
    );
    match &events[n - 1] {
        StreamEvent::Usage(u) => {
            assert!(u.prompt_tokens > 0 && u.completion_tokens > 0);
            assert_eq!(u.total_tokens, u.prompt_tokens + u.completion_tokens);
        }
        other => panic!("expected usage last, got {other:?}"),
    }
}

#[test]
fn slowbatch_emits_n_sleep_calls_with_exact_arguments() {
    let turn = run("!slowbatch4");
    let nonce = nonce_of(&turn);
    check_stream_shape(&turn.events, 4, "tool_calls");
    let assembled = assemble(&turn.events);
    assert_eq!(assembled.finish_reason, Some(FinishReason::ToolCalls));
    assert_eq!(assembled.calls.len(), 4);
    for (i, c) in assembled.calls.iter().enumerate() {
        assert_eq!(c.argument_error, None);
        assert_eq!(c.call.name, "demo_sleep");
        assert_eq!(c.call.id, format!("call_{nonce}_{i}"));
        assert_eq!(
            c.call.arguments,
            json!({"ms": 150 + 5 * i as u64, "tag": format!("done-{nonce}-{i}")})
        );
    }
    assert!(
        assembled.diagnostics.is_empty(),
        "{:?}",
        assembled.diagnostics
    );
}

#[test]
fn batch_sizes_are_bounded() {
    assert_eq!(assemble(&run("!slowbatch1").events).calls.len(), 1);
    check_stream_shape(&run("!slowbatch64").events, 64, "tool_calls");
    assert_eq!(assemble(&run("!slowbatch64").events).calls.len(), 64);
    for bad in [
        "!slowbatch0",
        "!slowbatch65",
        "!slowbatch",
        "!batch999999999999999999999",
    ] {
        let turn = run(bad);
        assert!(
            matches!(&turn.reply, Reply::Help { problem: Some(_) }),
            "{bad}: {:?}",
            turn.reply
        );
        assert!(assemble(&turn.events).calls.is_empty(), "{bad}");
    }
}

#[test]
fn options_set_the_sleep_and_the_tool_name() {
    let opts = ScriptOptions {
        tool_sleep_ms: 7,
        tool_name: Some("cmd_run".into()),
    };
    let turn = respond(&user("!slowbatch2"), &opts);
    let nonce = nonce_of(&turn);
    let calls = assemble(&turn.events).calls;
    assert_eq!(calls[1].call.name, "cmd_run");
    assert_eq!(
        calls[1].call.arguments,
        json!({"ms": 12, "tag": format!("done-{nonce}-1")})
    );
    // !calls keeps the names it was given.
    let turn = respond(
        &user(r#"!calls [{"name": "x_tool", "arguments": {}}]"#),
        &opts,
    );
    assert_eq!(assemble(&turn.events).calls[0].call.name, "x_tool");
}

#[test]
fn serialbatch_inserts_one_untagged_note_at_half() {
    for (n, note_at) in [(4, 2), (5, 2), (1, 0)] {
        let turn = run(&format!("!serialbatch{n}"));
        let nonce = nonce_of(&turn);
        check_stream_shape(&turn.events, n + 1, "tool_calls");
        let calls = assemble(&turn.events).calls;
        assert_eq!(calls.len(), n + 1);
        let note = &calls[note_at].call;
        assert_eq!(note.name, "demo_note");
        assert_eq!(
            note.arguments,
            json!({"text": format!("note from batch {nonce}")})
        );
        let sleeps: Vec<&Value> = calls
            .iter()
            .filter(|c| c.call.name == "demo_sleep")
            .map(|c| &c.call.arguments)
            .collect();
        let expected: Vec<Value> = (0..n as u64)
            .map(|i| json!({"ms": 150 + 5 * i, "tag": format!("done-{nonce}-{i}")}))
            .collect();
        assert_eq!(sleeps, expected.iter().collect::<Vec<_>>());
    }
}

#[test]
fn batch_emits_tagged_echo_calls() {
    let turn = run("!batch3");
    let nonce = nonce_of(&turn);
    check_stream_shape(&turn.events, 3, "tool_calls");
    let calls = assemble(&turn.events).calls;
    assert_eq!(calls.len(), 3);
    for (i, c) in calls.iter().enumerate() {
        assert_eq!(c.call.name, "demo_echo");
        assert_eq!(
            c.call.arguments,
            json!({"tag": format!("done-{nonce}-{i}")})
        );
    }
}

#[test]
fn truncate_cuts_one_call_and_finishes_with_length() {
    let turn = run("!truncate");
    let nonce = nonce_of(&turn);
    check_stream_shape(&turn.events, 1, "length");
    let assembled = assemble(&turn.events);
    assert_eq!(assembled.finish_reason, Some(FinishReason::Length));
    let call = &assembled.calls[0];
    assert_eq!(call.call.name, "demo_sleep");
    assert_eq!(
        call.call.arguments,
        json!({}),
        "cut arguments are replayed as {{}}"
    );
    let whole = json!({"ms": 150, "tag": format!("done-{nonce}-0")}).to_string();
    assert!(whole.starts_with(&call.call.raw_arguments) && whole != call.call.raw_arguments);
    assert!(
        !call.call.raw_arguments.contains(&format!("done-{nonce}-0")),
        "no countable tag"
    );
    assert_eq!(
        call.argument_error.as_ref().map(|e| e.reason),
        Some(ErrorReason::Truncated)
    );
}

#[test]
fn badjson_is_invalid_not_truncated() {
    let turn = run("!badjson");
    check_stream_shape(&turn.events, 1, "tool_calls");
    let assembled = assemble(&turn.events);
    let error = assembled.calls[0]
        .argument_error
        .as_ref()
        .expect("an argument error");
    assert_eq!(error.reason, ErrorReason::InvalidArguments);
    assert!(!error.detail.contains("truncat"), "{}", error.detail);
}

#[test]
fn text_arrives_in_several_chunks() {
    let turn = run("!text");
    assert_eq!(turn.reply, Reply::Text);
    let chunks = turn
        .events
        .iter()
        .filter(|e| matches!(e, StreamEvent::TextDelta { .. }))
        .count();
    assert!(chunks >= 3, "{chunks} chunks");
    assert!(fragments(&turn.events).is_empty());
    let assembled = assemble(&turn.events);
    assert_eq!(assembled.finish_reason, Some(FinishReason::Stop));
    assert!(
        assembled.text.starts_with("This is a plain text reply"),
        "{}",
        assembled.text
    );
    assert!(assembled.usage.total_tokens > 0);
}

#[test]
fn calls_emits_exactly_the_scripted_calls() {
    let script = r#"please !calls [
        {"name": "device_cmd", "arguments": {"device_id": "nas", "text": "naïve ✓ 東京"}},
        {"name": "noop"},
        {"name": "raw", "arguments": "{\"a\": 1"}
    ] and nothing else"#;
    let turn = run(script);
    check_stream_shape(&turn.events, 3, "tool_calls");
    let calls = assemble(&turn.events).calls;
    assert_eq!(calls.len(), 3);
    assert_eq!(calls[0].call.name, "device_cmd");
    assert_eq!(
        calls[0].call.arguments,
        json!({"device_id": "nas", "text": "naïve ✓ 東京"})
    );
    assert_eq!(
        (calls[1].call.name.as_str(), &calls[1].call.arguments),
        ("noop", &json!({}))
    );
    assert_eq!(calls[1].call.raw_arguments, "{}");
    // A string is sent verbatim, so a script can send broken arguments.
    assert_eq!(calls[2].call.raw_arguments, "{\"a\": 1");
    assert_eq!(
        calls[2].argument_error.as_ref().map(|e| e.reason),
        Some(ErrorReason::InvalidArguments)
    );
    for bad in [
        "!calls",
        "!calls {}",
        "!calls []",
        r#"!calls [{"arguments": {}}]"#,
        "!calls [1,",
    ] {
        assert!(
            matches!(run(bad).reply, Reply::Help { problem: Some(_) }),
            "{bad}"
        );
    }
}

#[test]
fn triggers_are_found_inside_other_text() {
    assert_eq!(
        parse_trigger("!slowbatch4-3-1700000"),
        Ok(Some(Trigger::SlowBatch(4)))
    );
    assert_eq!(
        parse_trigger("run !serialbatch8 now"),
        Ok(Some(Trigger::SerialBatch(8)))
    );
    assert_eq!(parse_trigger("hi! !batch2"), Ok(Some(Trigger::Batch(2))));
    assert_eq!(
        parse_trigger("!textual !truncate"),
        Ok(Some(Trigger::Truncate))
    );
    assert_eq!(parse_trigger("!text."), Ok(Some(Trigger::Text)));
    assert_eq!(parse_trigger("!badjson"), Ok(Some(Trigger::BadJson)));
    assert_eq!(parse_trigger("hello there!"), Ok(None));
}

#[test]
fn anything_else_gets_the_list_of_triggers() {
    let turn = run("hello");
    assert_eq!(turn.reply, Reply::Help { problem: None });
    let text = assemble(&turn.events).text;
    for trigger in [
        "!slowbatchN",
        "!serialbatchN",
        "!batchN",
        "!truncate",
        "!badjson",
        "!text",
        "!calls",
    ] {
        assert!(text.contains(trigger), "{trigger} missing from {text}");
    }
    assert!(matches!(
        respond(&[], &ScriptOptions::default()).reply,
        Reply::Help { .. }
    ));
}

#[test]
fn every_batch_gets_a_fresh_nonce() {
    let a = run("!slowbatch2");
    let b = run("!slowbatch2");
    assert_ne!(nonce_of(&a), nonce_of(&b));
    let ids = |t: &ScriptedTurn| -> Vec<String> {
        assemble(&t.events)
            .calls
            .into_iter()
            .map(|c| c.call.id)
            .collect()
    };
    assert!(
        ids(&a).iter().all(|id| !ids(&b).contains(id)),
        "call ids differ too"
    );
    assert!(
        !nonce_of(&a).contains('-'),
        "a nonce never contains the tag delimiter"
    );
}

// ---- the report after the tool results -------------------------------------

fn assistant_with(turn: &ScriptedTurn) -> Message {
    Message::Assistant(assemble(&turn.events).message())
}

fn result(id: &str, content: Value, success: bool) -> Message {
    Message::Tool(ToolMessage {
        tool_call_id: id.to_owned(),
        name: "demo_sleep".to_owned(),
        content: content.to_string(),
        success,
    })
}

fn report_of(history: &[Message]) -> Report {
    match respond(history, &ScriptOptions::default()).reply {
        Reply::Report(report) => report,
        other => panic!("expected a report, got {other:?}"),
    }
}

#[test]
fn executed_counts_distinct_tags_of_this_batch_only() {
    // An earlier turn with its own batch and results.
    let old = run("!slowbatch3");
    let old_nonce = nonce_of(&old);
    let mut history = user("!slowbatch3");
    history.push(assistant_with(&old));
    for i in 0..3 {
        history.push(result(
            &format!("call_{old_nonce}_{i}"),
            json!({"tag": format!("done-{old_nonce}-{i}"), "in_flight_at_start": 9, "in_flight_at_end": 9}),
            true,
        ));
    }
    history.push(Message::user("done?"));
    history.push(Message::Assistant(AssistantMessage {
        content: "yes".into(),
        ..AssistantMessage::default()
    }));

    // The current turn: a batch of 3, of which only tags 0 and 2 come back
    // (2 twice), plus a result that quotes the old batch's tags.
    history.push(Message::user("!slowbatch3"));
    let new = respond(&history, &ScriptOptions::default());
    let nonce = nonce_of(&new);
    assert_ne!(nonce, old_nonce);
    history.push(assistant_with(&new));
    history.push(result(
        &format!("call_{nonce}_0"),
        json!({"tag": format!("done-{nonce}-0"), "in_flight_at_start": 2, "in_flight_at_end": 3}),
        true,
    ));
    history.push(result(
        &format!("call_{nonce}_1"),
        json!({"error": format!("stale: done-{old_nonce}-1 done-{old_nonce}-2")}),
        false,
    ));
    history.push(result(
        &format!("call_{nonce}_2"),
        json!({"tag": format!("done-{nonce}-2"), "again": format!("done-{nonce}-2"), "in_flight_at_start": 1, "in_flight_at_end": 1}),
        true,
    ));

    let report = report_of(&history);
    assert_eq!(report.nonce.as_deref(), Some(nonce.as_str()));
    assert_eq!(report.executed, 2, "old tags and duplicates do not count");
    assert_eq!(
        report.max_in_flight, 3,
        "the old batch's in-flight values do not count"
    );
    assert_eq!((report.results, report.failed), (3, 1));
    let text = assemble(&respond(&history, &ScriptOptions::default()).events).text;
    assert!(
        text.contains("executed=2") && text.contains("max_in_flight=3"),
        "{text}"
    );
}

/// A failed result that quotes its call's tag did not execute; nor does a
/// tag past the batch's calls count: a kernel that answers with errors, or
/// with one result naming every index, cannot pass for one that ran them.
#[test]
fn failed_results_and_tags_past_the_batch_do_not_count() {
    let mut history = user("!slowbatch2");
    let turn = respond(&history, &ScriptOptions::default());
    let nonce = nonce_of(&turn);
    history.push(assistant_with(&turn));
    history.push(result(
        &format!("call_{nonce}_0"),
        json!({"error": format!("could not run {{\"tag\":\"done-{nonce}-0\"}}")}),
        false,
    ));
    let every: Vec<String> = (0..64).map(|i| format!("done-{nonce}-{i}")).collect();
    history.push(result(
        &format!("call_{nonce}_1"),
        json!({"tag": format!("done-{nonce}-1"), "also": every}),
        true,
    ));
    let report = report_of(&history);
    assert_eq!(report.executed, 1, "{report:?}");
    assert_eq!((report.results, report.failed), (2, 1));
}

#[test]
fn a_nonce_that_prefixes_another_does_not_match_it() {
    let mut history = user("!batch1");
    history.push(Message::Assistant(AssistantMessage {
        tool_calls: vec![ToolCall {
            id: "c".into(),
            name: "demo_echo".into(),
            arguments: json!({"tag": "done-ab1-0"}),
            raw_arguments: String::new(),
        }],
        ..AssistantMessage::default()
    }));
    history.push(result("c", json!({"tag": "done-ab12-0"}), true));
    assert_eq!(report_of(&history).executed, 0);
}

#[test]
fn results_without_tags_report_zero() {
    let mut history = user(r#"!calls [{"name": "demo_echo", "arguments": {"x": 1}}]"#);
    let turn = respond(&history, &ScriptOptions::default());
    history.push(assistant_with(&turn));
    let id = assemble(&turn.events).calls[0].call.id.clone();
    history.push(result(&id, json!({"x": 1}), true));
    let report = report_of(&history);
    assert_eq!(
        (report.nonce, report.executed, report.results),
        (None, 0, 1)
    );
}

#[test]
fn old_tool_results_do_not_stop_a_new_trigger() {
    let old = run("!batch1");
    let mut history = user("!batch1");
    history.push(assistant_with(&old));
    history.push(result(
        &format!("call_{}_0", nonce_of(&old)),
        json!({}),
        true,
    ));
    history.push(Message::user("!batch2"));
    let turn = respond(&history, &ScriptOptions::default());
    assert!(
        matches!(turn.reply, Reply::Batch { calls: 2, .. }),
        "{:?}",
        turn.reply
    );
}
