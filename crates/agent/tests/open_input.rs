#![allow(clippy::unwrap_used, clippy::expect_used)] // a panic in a test is a test failure
//! Opening an input (`Store::open_input_async`): the session claimed and
//! its history loaded, on the caller's worker when nothing in it can wait
//! (a new session, a remembered history), on the blocking pool otherwise
//! (a history not in the cache, a repair; the connection in use is
//! `store/inline_tests.rs`), with the same answer either way.

use std::sync::Arc;

mod common;

use common::TempDir;
use homeagent_agent::store::{Store, StoreError, cancelled_result};
use homeagent_core::{AssistantMessage, Message, ToolCall};

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
