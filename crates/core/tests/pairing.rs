//! The pairing check rejects broken histories; re-minting repairs reused ids.

#![allow(clippy::unwrap_used, clippy::expect_used)] // a panic in a test is a test failure

use homeagent_core::{
    AssistantMessage, Message, PairingError, ToolCall, ToolMessage, check_history_pairing,
    check_pairing, remint_reused_ids,
};
use serde_json::json;

fn assistant(ids: &[&str]) -> Message {
    Message::Assistant(AssistantMessage {
        content: "calling".into(),
        reasoning: vec![],
        tool_calls: ids
            .iter()
            .map(|id| ToolCall {
                id: (*id).into(),
                name: "t".into(),
                arguments: json!({}),
                raw_arguments: "{}".into(),
            })
            .collect(),
    })
}

fn result(id: &str) -> Message {
    Message::Tool(ToolMessage {
        tool_call_id: id.into(),
        name: "t".into(),
        content: format!("result of {id}"),
        success: true,
    })
}

#[test]
fn a_well_paired_history_passes() {
    let history = vec![
        Message::system("s"),
        Message::user("u"),
        assistant(&["a", "b"]),
        result("a"),
        result("b"),
        Message::Assistant(AssistantMessage {
            content: "done".into(),
            ..Default::default()
        }),
        Message::user("again"),
        assistant(&["c"]),
        result("c"),
    ];
    assert_eq!(check_pairing(&history), Ok(()));
}

#[test]
fn a_missing_result_is_rejected() {
    let history = vec![
        Message::user("u"),
        assistant(&["a", "b"]),
        result("a"),
        Message::user("next"),
    ];
    assert_eq!(
        check_pairing(&history),
        Err(PairingError::MissingResult {
            call_id: "b".into(),
            message: 1
        })
    );
    // Also at the end of the history.
    let history = vec![Message::user("u"), assistant(&["a"])];
    assert!(matches!(
        check_pairing(&history),
        Err(PairingError::MissingResult { .. })
    ));
}

#[test]
fn an_orphan_result_is_rejected() {
    let history = vec![Message::user("u"), result("zzz")];
    assert_eq!(
        check_pairing(&history),
        Err(PairingError::OrphanResult {
            call_id: "zzz".into(),
            message: 1
        })
    );
    // A result that arrives after another message closed its turn is an orphan too.
    let history = vec![
        Message::user("u"),
        assistant(&["a"]),
        result("a"),
        Message::user("x"),
        result("a"),
    ];
    assert!(matches!(
        check_pairing(&history),
        Err(PairingError::OrphanResult { .. })
    ));
}

#[test]
fn a_second_result_for_one_call_is_rejected() {
    let history = vec![
        Message::user("u"),
        assistant(&["a"]),
        result("a"),
        result("a"),
    ];
    assert_eq!(
        check_pairing(&history),
        Err(PairingError::DuplicateResult {
            call_id: "a".into(),
            message: 3
        })
    );
}

#[test]
fn an_id_reused_across_turns_is_rejected_until_reminted() {
    let mut history = vec![
        Message::user("u"),
        assistant(&["call_0", "call_1"]),
        result("call_0"),
        result("call_1"),
        Message::user("more"),
        assistant(&["call_0"]),
        result("call_0"),
    ];
    assert_eq!(
        check_pairing(&history),
        Err(PairingError::DuplicateCallId {
            call_id: "call_0".into(),
            first: 1,
            second: 5
        })
    );
    let renamed = remint_reused_ids(&mut history);
    assert_eq!(renamed, vec![("call_0".to_owned(), "call_0_2".to_owned())]);
    assert_eq!(check_pairing(&history), Ok(()));
    // The rename reached the call and its own result, and nothing earlier.
    let Message::Assistant(late) = &history[5] else {
        panic!()
    };
    assert_eq!(late.tool_calls[0].id, "call_0_2");
    let Message::Tool(late_result) = &history[6] else {
        panic!()
    };
    assert_eq!(late_result.tool_call_id, "call_0_2");
    assert_eq!(
        late_result.content, "result of call_0",
        "the right result follows the renamed call"
    );
    let Message::Tool(early_result) = &history[2] else {
        panic!()
    };
    assert_eq!(early_result.tool_call_id, "call_0");
}

#[test]
fn calls_must_carry_ids_and_object_arguments() {
    let history = vec![Message::user("u"), assistant(&[""]), result("")];
    assert_eq!(
        check_pairing(&history),
        Err(PairingError::EmptyCallId { message: 1 })
    );
    let Message::Assistant(mut a) = assistant(&["x"]) else {
        panic!()
    };
    a.tool_calls[0].arguments = json!("not an object");
    let history = vec![Message::user("u"), Message::Assistant(a), result("x")];
    assert!(matches!(
        check_pairing(&history),
        Err(PairingError::ArgumentsNotObject { .. })
    ));
}

#[test]
fn roles_are_named_as_providers_spell_them() {
    let roles: Vec<&str> = [
        Message::system("s"),
        Message::user("u"),
        assistant(&[]),
        result("x"),
    ]
    .iter()
    .map(Message::role)
    .collect();
    assert_eq!(roles, vec!["system", "user", "assistant", "tool"]);
}

/// A stored history keeps the ids the model gave, so an id may come back
/// in a later turn; within one turn, and for results, the rule is the
/// request's.
#[test]
fn a_stored_history_may_reuse_an_id_in_a_later_turn_only() {
    let reused = vec![
        Message::user("u"),
        assistant(&["call_0", "call_1"]),
        result("call_0"),
        result("call_1"),
        Message::user("more"),
        assistant(&["call_0"]),
        result("call_0"),
    ];
    assert_eq!(check_history_pairing(&reused), Ok(()));
    assert!(check_pairing(&reused).is_err());

    let twice_in_a_turn = vec![
        Message::user("u"),
        assistant(&["call_0", "call_0"]),
        result("call_0"),
        result("call_0"),
    ];
    assert_eq!(
        check_history_pairing(&twice_in_a_turn),
        Err(PairingError::DuplicateCallId {
            call_id: "call_0".into(),
            first: 1,
            second: 1
        })
    );
    // A result for an earlier turn's call, after another message: an orphan.
    let late = vec![
        Message::user("u"),
        assistant(&["call_0"]),
        result("call_0"),
        Message::user("more"),
        result("call_0"),
    ];
    assert_eq!(
        check_history_pairing(&late),
        Err(PairingError::OrphanResult {
            call_id: "call_0".into(),
            message: 4
        })
    );
}

/// A fresh id avoids every id of the list, a later turn's included: the
/// later call keeps the id the model gave it.
#[test]
fn a_fresh_id_avoids_the_ids_of_later_turns() {
    let mut history = vec![
        Message::user("u"),
        assistant(&["call_0"]),
        result("call_0"),
        Message::user("more"),
        assistant(&["call_0"]),
        result("call_0"),
        Message::user("again"),
        assistant(&["call_0_2"]),
        result("call_0_2"),
    ];
    let renamed = remint_reused_ids(&mut history);
    assert_eq!(renamed, vec![("call_0".to_owned(), "call_0_3".to_owned())]);
    assert_eq!(check_pairing(&history), Ok(()));
}

#[test]
fn results_in_any_order_are_paired_by_id() {
    let ok = vec![
        Message::user("u"),
        assistant(&["a", "b", "c"]),
        result("c"),
        result("a"),
        result("b"),
    ];
    assert_eq!(check_pairing(&ok), Ok(()));
    // An unknown id among a batch's results, where the next call in order
    // is still waiting.
    let orphan = vec![
        Message::user("u"),
        assistant(&["a", "b"]),
        result("a"),
        result("x"),
        result("b"),
    ];
    assert_eq!(
        check_pairing(&orphan),
        Err(PairingError::OrphanResult {
            call_id: "x".into(),
            message: 3,
        })
    );
    // A second result for the first call, after the last one.
    let again = vec![
        Message::user("u"),
        assistant(&["a", "b"]),
        result("b"),
        result("a"),
        result("a"),
    ];
    assert_eq!(
        check_pairing(&again),
        Err(PairingError::DuplicateResult {
            call_id: "a".into(),
            message: 4,
        })
    );
    // The first call left without a result, the others answered.
    let missing = vec![
        Message::user("u"),
        assistant(&["a", "b", "c"]),
        result("b"),
        result("c"),
        Message::user("next"),
    ];
    assert_eq!(
        check_pairing(&missing),
        Err(PairingError::MissingResult {
            call_id: "a".into(),
            message: 1,
        })
    );
}
