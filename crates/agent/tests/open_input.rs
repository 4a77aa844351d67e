#![allow(clippy::unwrap_used, clippy::expect_used)] // a panic in a test is a test failure
//! Opening an input (`Store::open_input_async`): the session claimed and
//! its history loaded, on the caller's worker when nothing in it can wait
//! (a new session, a remembered history), on the blocking pool otherwise
//! (a history not in the cache, a repair; the connection in use is
//! `store/inline_tests.rs`), with the same answer either way.

use std::sync::Arc;

use crate::common;

use common::TempDir;
use homeagent_agent::context::approx_tokens;
use homeagent_agent::store::{KnownHistory, Store, StoreError, cancelled_result};
use homeagent_core::{AssistantMessage, Message, PairingError, ToolCall, ToolMessage};

fn opened_here(store: &Store) -> u64 {
    store.commit_places().inputs_opened_here
}

fn reply(text: &str) -> Message {
    Message::Assistant(AssistantMessage {
        content: text.into(),
        ..AssistantMessage::default()
    })
}

fn calling(id: &str) -> Message {
    Message::Assistant(AssistantMessage {
        content: String::new(),
        reasoning: Vec::new(),
        tool_calls: vec![ToolCall {
            id: id.into(),
            name: "demo_echo".into(),
            raw_arguments: "{}".into(),
            arguments: serde_json::json!({}),
        }],
    })
}

#[tokio::test]
async fn a_new_session_and_a_remembered_one_open_on_the_worker() {
    let dir = TempDir::new("open-here");
    let store = Arc::new(Store::open(&dir.db()).unwrap());

    let fresh = store.open_input_async("new", "main").await.unwrap();
    assert!(fresh.history.messages().is_empty());
    assert_eq!(opened_here(&store), 1);
    // Held: another open of it is refused, on whichever path.
    assert!(matches!(
        store.open_input_async("new", "main").await,
        Err(StoreError::SessionBusy { .. })
    ));
    drop(fresh);

    store.ensure_session("s", "main").unwrap();
    store
        .append_messages("s", &[Message::user("hi"), reply("hello")])
        .unwrap();
    store.load_counted("s").unwrap(); // now remembered
    store
        .append_messages("s", &[Message::user("again")])
        .unwrap();
    let before = opened_here(&store);
    let opened = store.open_input_async("s", "main").await.unwrap();
    assert_eq!(opened_here(&store), before + 1);
    assert_eq!(
        opened.history.messages(),
        [Message::user("hi"), reply("hello"), Message::user("again")]
    );
}

#[tokio::test]
async fn a_history_not_remembered_is_read_on_the_pool() {
    let dir = TempDir::new("open-cold");
    let writer = Store::open(&dir.db()).unwrap();
    writer.ensure_session("s", "main").unwrap();
    writer.append_messages("s", &[Message::user("hi")]).unwrap();
    // A fresh handle remembers nothing.
    let store = Arc::new(Store::open(&dir.db()).unwrap());
    let opened = store.open_input_async("s", "main").await.unwrap();
    assert_eq!(opened.history.messages(), [Message::user("hi")]);
    assert_eq!(opened_here(&store), 0);
}

/// A remembered session whose new messages leave a call without a result
/// (a crash mid-batch) is repaired, which writes: on the pool.
#[tokio::test]
async fn a_history_needing_a_repair_is_repaired_on_the_pool() {
    let dir = TempDir::new("open-repair");
    let store = Arc::new(Store::open(&dir.db()).unwrap());
    store.ensure_session("s", "main").unwrap();
    store.append_messages("s", &[Message::user("go")]).unwrap();
    store.load_counted("s").unwrap();
    let assistant = calling("c1");
    store
        .append_messages("s", std::slice::from_ref(&assistant))
        .unwrap();
    let opened = store.open_input_async("s", "main").await.unwrap();
    let Message::Assistant(turn) = &assistant else {
        unreachable!()
    };
    let cancelled = Message::Tool(cancelled_result(&turn.tool_calls[0]));
    assert_eq!(
        opened.history.messages(),
        [Message::user("go"), assistant.clone(), cancelled.clone()]
    );
    assert_eq!(opened_here(&store), 0);
    // Committed, and for every reader.
    drop(opened);
    let again = Store::open(&dir.db()).unwrap();
    assert_eq!(
        again.history("s").unwrap(),
        [Message::user("go"), assistant, cancelled]
    );
}

#[tokio::test]
async fn another_agents_session_is_refused_and_nothing_stays_held() {
    let dir = TempDir::new("open-agent");
    let store = Arc::new(Store::open(&dir.db()).unwrap());
    store.ensure_session("theirs", "other").unwrap();
    store.load_counted("theirs").unwrap();
    assert!(matches!(
        store.open_input_async("theirs", "main").await,
        Err(StoreError::AgentMismatch { .. })
    ));
    // The refused open let its claim go.
    drop(store.claim_session("theirs").unwrap());
    assert!(matches!(
        store.open_input_async("../x", "main").await,
        Err(StoreError::InvalidSessionId { .. })
    ));
}

/// An input that still holds the start of the session's history (its
/// last input's) names it by lineage and length, and gets only what was
/// added since; anything else gets the whole history.
#[tokio::test]
async fn an_input_that_knows_the_start_gets_only_what_was_added() {
    let dir = TempDir::new("open-known");
    let store = Arc::new(Store::open(&dir.db()).unwrap());
    store.ensure_session("s", "main").unwrap();
    store
        .append_messages("s", &[Message::user("hi"), reply("hello")])
        .unwrap();
    let first = store.open_input_async("s", "main").await.unwrap();
    let lineage = first.lineage.expect("remembered from its full read");
    assert_eq!(first.from, 0);
    drop(first);
    store
        .append_messages("s", &[Message::user("again"), reply("and again")])
        .unwrap();
    let known = |len| Some(KnownHistory { lineage, len });

    let opened = store.open_input_after("s", "main", known(2)).await.unwrap();
    assert_eq!((opened.from, opened.lineage), (2, Some(lineage)));
    assert_eq!(
        opened.history.messages(),
        [Message::user("again"), reply("and again")]
    );
    let counted: Vec<usize> = opened
        .history
        .messages()
        .iter()
        .map(approx_tokens)
        .collect();
    assert_eq!(opened.history.tokens(), counted);
    drop(opened);

    // Knowing less is fine: from there on.
    let opened = store.open_input_after("s", "main", known(1)).await.unwrap();
    assert_eq!(opened.from, 1);
    assert_eq!(opened.history.messages().len(), 3);
    drop(opened);

    // Another lineage, or more than there is: the whole history.
    let whole = [
        Message::user("hi"),
        reply("hello"),
        Message::user("again"),
        reply("and again"),
    ];
    for other in [
        Some(KnownHistory {
            lineage: lineage + 1,
            len: 2,
        }),
        known(5),
        None,
    ] {
        let opened = store.open_input_after("s", "main", other).await.unwrap();
        assert_eq!(opened.from, 0, "{other:?}");
        assert_eq!(opened.history.messages(), whole, "{other:?}");
    }
}

fn result(id: &str) -> Message {
    Message::Tool(ToolMessage {
        tool_call_id: id.into(),
        name: "demo_echo".into(),
        content: "ok".into(),
        success: true,
    })
}

/// Only the messages added since the last load are checked for pairing,
/// from the last step before them: a result that answers no call among
/// them is still refused.
#[tokio::test]
async fn added_messages_are_still_checked_for_pairing() {
    let dir = TempDir::new("open-known-check");
    let store = Arc::new(Store::open(&dir.db()).unwrap());
    store.ensure_session("s", "main").unwrap();
    store
        .append_messages(
            "s",
            &[Message::user("hi"), calling("call_1"), result("call_1")],
        )
        .unwrap();
    let first = store.open_input_async("s", "main").await.unwrap();
    let lineage = first.lineage.unwrap();
    drop(first);
    // A second result for the call of the last step: the check must look
    // back to that step, not start at the new message.
    store.append_messages("s", &[result("call_1")]).unwrap();
    let known = Some(KnownHistory { lineage, len: 3 });
    let refused = store.open_input_after("s", "main", known).await;
    assert!(
        matches!(
            &refused,
            Err(StoreError::Unrepairable {
                source: PairingError::DuplicateResult { message: 3, .. },
                ..
            })
        ),
        "{refused:?}"
    );
}

/// The check looks back to the last step before the added messages, and
/// no further forward: a duplicate result right after a step that closed
/// at the last load is refused even when more follows it.
#[tokio::test]
async fn a_duplicate_result_after_the_last_step_is_refused() {
    let dir = TempDir::new("open-known-check-late");
    let store = Arc::new(Store::open(&dir.db()).unwrap());
    store.ensure_session("s", "main").unwrap();
    store
        .append_messages(
            "s",
            &[
                Message::user("hi"),
                reply("hello"),
                calling("call_1"),
                result("call_1"),
            ],
        )
        .unwrap();
    let first = store.open_input_async("s", "main").await.unwrap();
    let lineage = first.lineage.unwrap();
    drop(first);
    store
        .append_messages("s", &[result("call_1"), reply("after")])
        .unwrap();
    let known = Some(KnownHistory { lineage, len: 4 });
    let refused = store.open_input_after("s", "main", known).await;
    assert!(
        matches!(
            &refused,
            Err(StoreError::Unrepairable {
                source: PairingError::DuplicateResult { message: 4, .. },
                ..
            })
        ),
        "{refused:?}"
    );
}
