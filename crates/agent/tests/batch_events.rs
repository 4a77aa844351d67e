#![allow(clippy::unwrap_used, clippy::expect_used)] // a panic in a test is a test failure
//! A batch's tool events are written in one transaction, with its results.
//!
//! The agent used to commit every start and end event on its own (two
//! fsyncs per call); now it keeps them in memory while the batch runs and
//! commits them with the results. These tests pin both halves: the store
//! writes a slice of events (and messages with events) all or nothing, and
//! the runtime ends a batch with every event stored — or, when storing
//! them fails, with none of them and the results still committed, because
//! events are diagnostics and results are history.
//!
//! Failures are real SQLite errors, injected with a trigger that aborts the
//! insert of one marked row in the middle of the transaction.

use crate::common;

use common::{TempDir, local_runtime, refuse_inserts};
use std::path::Path;
use std::sync::Arc;

use homeagent_agent::store::{EventPhase, EventRow, Store, StoreError, ToolEventRecord};
use homeagent_agent::{AgentSettings, DemoModel, Frame, Runtime, TurnControl, TurnInput};
use homeagent_core::{CallStatus, Message, ToolEvent, check_pairing};
use serde_json::json;

// ---------------------------------------------------------------- helpers

/// Makes every insert of a tool event whose JSON body contains `POISON`
/// fail, from a second connection (as another process could).
fn poison_events(db: &Path) {
    refuse_inserts(
        db,
        "tool_event_batches",
        "events",
        "POISON",
        "injected failure",
    );
}

fn start(call: &str, text: &str) -> ToolEventRecord {
    ToolEventRecord::from_event(&ToolEvent::Start {
        call_id: call.into(),
        tool: "demo_echo".into(),
        args: json!({"text": text}),
        batch_id: "b1".into(),
        batch_size: 3,
        parallel: true,
    })
}

fn end(call: &str) -> ToolEventRecord {
    ToolEventRecord::from_event(&ToolEvent::End {
        call_id: call.into(),
        tool: "demo_echo".into(),
        batch_id: "b1".into(),
        batch_size: 3,
        parallel: true,
        status: CallStatus::Ok,
        success: true,
        duration_ms: 0,
        error: None,
        warnings: Vec::new(),
    })
}

/// The rows the runtime would buffer for `records`.
fn rows(records: &[ToolEventRecord]) -> Vec<EventRow> {
    records.iter().map(EventRow::from).collect()
}

/// (call id, phase) of each stored event, in stored order.
fn phases(events: &[ToolEventRecord]) -> Vec<(String, EventPhase)> {
    events
        .iter()
        .map(|e| (e.call_id.clone(), e.phase))
        .collect()
}

fn owned(pairs: &[(&str, EventPhase)]) -> Vec<(String, EventPhase)> {
    pairs.iter().map(|(c, p)| ((*c).to_owned(), *p)).collect()
}

// ---------------------------------------------------------------- store

#[test]
fn record_tool_events_stores_all_in_order_or_none() {
    let dir = TempDir::new("all-or-none");
    let store = Store::open(&dir.db()).unwrap();
    store.ensure_session("s", "main").unwrap();
    store
        .record_tool_events("s", &[start("a", "x"), end("a"), start("b", "y")])
        .unwrap();
    assert_eq!(
        phases(&store.tool_events("s").unwrap()),
        owned(&[
            ("a", EventPhase::Start),
            ("a", EventPhase::End),
            ("b", EventPhase::Start),
        ])
    );

    poison_events(&dir.db());
    // The third row fails after two were inserted: none of the four stays.
    let err = store
        .record_tool_events(
            "s",
            &[end("b"), start("c", "z"), start("d", "POISON"), end("c")],
        )
        .unwrap_err();
    assert!(matches!(err, StoreError::Sqlite(_)), "{err:?}");
    assert_eq!(store.tool_events("s").unwrap().len(), 3);

    assert!(matches!(
        store.record_tool_events("nobody", &[end("b")]),
        Err(StoreError::SessionNotFound { .. })
    ));
}

#[test]
fn messages_with_events_commit_together_or_not_at_all() {
    let dir = TempDir::new("together");
    let store = Store::open(&dir.db()).unwrap();
    store.ensure_session("s", "main").unwrap();
    store.append_messages("s", &[Message::user("go")]).unwrap();
    let range = store
        .append_messages_with_events(
            "s",
            &[Message::user("r1"), Message::user("r2")],
            &rows(&[start("a", "x"), end("a")]),
        )
        .unwrap();
    assert_eq!(range, 2..=3);
    assert_eq!(
        store.history("s").unwrap(),
        vec![
            Message::user("go"),
            Message::user("r1"),
            Message::user("r2")
        ]
    );
    assert_eq!(
        phases(&store.tool_events("s").unwrap()),
        owned(&[("a", EventPhase::Start), ("a", EventPhase::End)])
    );

    // An event failing after the messages were inserted takes them with it.
    poison_events(&dir.db());
    let err = store
        .append_messages_with_events(
            "s",
            &[Message::user("r3")],
            &rows(&[start("b", "y"), start("c", "POISON")]),
        )
        .unwrap_err();
    assert!(matches!(err, StoreError::Sqlite(_)), "{err:?}");
    assert_eq!(store.history("s").unwrap().len(), 3);
    assert_eq!(store.tool_events("s").unwrap().len(), 2);
    // The sequence continues without a hole; no events is fine too.
    assert_eq!(
        store
            .append_messages_with_events("s", &[Message::user("r4")], &[])
            .unwrap(),
        4..=4
    );
}

/// A batch's results, queued with their events (`Store::queue_results`):
/// the events are diagnostics, so when they cannot be stored the results
/// still commit, without them; when they can, both are stored together.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn queued_results_commit_without_events_that_cannot_be_stored() {
    let dir = TempDir::new("queued-results");
    let store = Arc::new(Store::open(&dir.db()).unwrap());
    store.ensure_session("s", "main").unwrap();
    store.append_messages("s", &[Message::user("go")]).unwrap();
    let range = store
        .queue_results(
            "s",
            &[Message::user("r1")],
            rows(&[start("a", "x"), end("a")]),
        )
        .unwrap()
        .committed()
        .await
        .unwrap();
    assert_eq!(range, 2..=2);
    assert_eq!(
        phases(&store.tool_events("s").unwrap()),
        owned(&[("a", EventPhase::Start), ("a", EventPhase::End)])
    );

    poison_events(&dir.db());
    let range = store
        .queue_results(
            "s",
            &[Message::user("r2"), Message::user("r3")],
            rows(&[start("b", "y"), start("c", "POISON")]),
        )
        .unwrap()
        .committed()
        .await
        .unwrap();
    assert_eq!(range, 3..=4);
    assert_eq!(
        store.history("s").unwrap(),
        vec![
            Message::user("go"),
            Message::user("r1"),
            Message::user("r2"),
            Message::user("r3"),
        ]
    );
    // None of the refused batch's events, the earlier ones untouched.
    assert_eq!(store.tool_events("s").unwrap().len(), 2);
}

/// Should refusing the events roll back the whole transaction (a trigger's
/// `RAISE(ROLLBACK)`, as some I/O errors do), the results went with it:
/// the queued write fails with SQLite's own error and stores nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn queued_results_fail_when_the_events_took_the_transaction_with_them() {
    let dir = TempDir::new("queued-results-rollback");
    let store = Arc::new(Store::open(&dir.db()).unwrap());
    store.ensure_session("s", "main").unwrap();
    store.append_messages("s", &[Message::user("go")]).unwrap();
    rusqlite::Connection::open(dir.db())
        .unwrap()
        .execute_batch(
            "CREATE TRIGGER roll_back_events BEFORE INSERT ON tool_event_batches
             WHEN NEW.events LIKE '%POISON%'
             BEGIN SELECT RAISE(ROLLBACK, 'events rolled back everything'); END;",
        )
        .unwrap();
    let err = store
        .queue_results("s", &[Message::user("r1")], rows(&[start("c", "POISON")]))
        .unwrap()
        .committed()
        .await
        .unwrap_err();
    assert!(
        err.to_string().contains("events rolled back everything"),
        "{err}"
    );
    assert_eq!(store.history("s").unwrap(), vec![Message::user("go")]);
    assert_eq!(store.tool_events("s").unwrap(), Vec::new());
}

// ---------------------------------------------------------------- row format

/// The text of every batch row of the store at `db`, oldest first.
fn stored_rows(db: &Path) -> Vec<String> {
    let conn = rusqlite::Connection::open(db).unwrap();
    let mut stmt = conn
        .prepare("SELECT events FROM tool_event_batches ORDER BY id")
        .unwrap();
    stmt.query_map([], |row| row.get(0))
        .unwrap()
        .map(Result::unwrap)
        .collect()
}

/// What schema 4 wrote for `records`: an array of `{"event", "at_ms"}`
/// elements, the event as serde writes it.
fn schema_4_row(records: &[ToolEventRecord]) -> String {
    let elements: Vec<serde_json::Value> = records
        .iter()
        .map(|r| json!({"event": r.body, "at_ms": r.at_ms}))
        .collect();
    serde_json::to_string(&elements).unwrap()
}

/// `n` calls of batch `batch`: each call's start, then each call's end,
/// a millisecond apart from `at_ms` on.
fn batch_of(batch: &str, n: usize, at_ms: i64) -> Vec<ToolEventRecord> {
    let mut records = Vec::new();
    for phase in ["start", "end"] {
        for i in 0..n {
            let call_id = format!("{batch}-call-{i}");
            let event = if phase == "start" {
                ToolEvent::Start {
                    call_id,
                    tool: "demo_echo".into(),
                    args: json!({"tag": format!("done-{i}")}),
                    batch_id: batch.into(),
                    batch_size: n,
                    parallel: true,
                }
            } else {
                ToolEvent::End {
                    call_id,
                    tool: "demo_echo".into(),
                    batch_id: batch.into(),
                    batch_size: n,
                    parallel: true,
                    status: CallStatus::Ok,
                    success: true,
                    duration_ms: 2,
                    error: None,
                    warnings: Vec::new(),
                }
            };
            let mut record = ToolEventRecord::from_event(&event);
            record.at_ms = at_ms + records.len() as i64;
            records.push(record);
        }
    }
    records
}

/// Since schema 6 a batch row names its batch once: the batch's id, size
/// and mode were in every event, with the event's own time, and were a
/// third of every row (here the row is under 60 % of schema 4's, with a
/// time of its own for every event). Each event keeps only its call, tool, outcome and
/// how long after the row's first event it came.
#[test]
fn a_batch_row_names_its_batch_once_and_reads_back_whole() {
    let dir = TempDir::new("compact");
    let store = Store::open(&dir.db()).unwrap();
    store.ensure_session("s", "main").unwrap();
    let records = batch_of("s-7-1", 8, 1_796_224_116_709);
    store.record_tool_events("s", &records).unwrap();
    assert_eq!(store.tool_events("s").unwrap(), records);

    let row = stored_rows(&dir.db()).remove(0);
    assert_eq!(row.matches("s-7-1\"").count(), 1, "{row}");
    let before = schema_4_row(&records);
    assert!(
        row.len() * 10 < before.len() * 6,
        "{} bytes stored, {} as schema 4 wrote them: {row}",
        row.len(),
        before.len()
    );
}

/// A write whose events come from two batches (or hold records that are
/// no kernel event) stores a row per run of one batch, and reads back in
/// the order given, times included (later or earlier than the first).
#[test]
fn events_of_several_batches_are_a_row_per_batch_in_order() {
    let dir = TempDir::new("several-batches");
    let store = Store::open(&dir.db()).unwrap();
    store.ensure_session("s", "main").unwrap();
    let mut odd = end("odd");
    odd.body = json!({"note": "imported from elsewhere"});
    let mut earlier = batch_of("s-1-2", 1, 5_000);
    earlier[1].at_ms = 4_000; // its end stamped before its start
    let records: Vec<ToolEventRecord> = batch_of("s-1-1", 2, 1_000)
        .into_iter()
        .chain(earlier)
        .chain([odd])
        .chain(batch_of("s-1-1", 1, 9_000))
        .collect();
    store.record_tool_events("s", &records).unwrap();
    assert_eq!(store.tool_events("s").unwrap(), records);
    assert_eq!(stored_rows(&dir.db()).len(), 4);
}

/// Rows of schema 4 (`{"event", "at_ms"}` elements) are still read, in
/// order with the rows written after.
#[test]
fn batch_rows_of_schema_4_still_read() {
    let dir = TempDir::new("schema-4-rows");
    let store = Store::open(&dir.db()).unwrap();
    store.ensure_session("s", "main").unwrap();
    let old = batch_of("s-1-1", 2, 1_000);
    rusqlite::Connection::open(dir.db())
        .unwrap()
        .execute(
            "INSERT INTO tool_event_batches (session_id, events, at) VALUES ('s', ?1, 0)",
            [schema_4_row(&old)],
        )
        .unwrap();
    let new = batch_of("s-2-1", 2, 2_000);
    store.record_tool_events("s", &new).unwrap();
    let all: Vec<ToolEventRecord> = old.into_iter().chain(new).collect();
    assert_eq!(store.tool_events("s").unwrap(), all);
}

/// Rows written before schema 4 (every element a whole record) are still
/// read, in order with the rows written after.
#[test]
fn batch_rows_of_schema_3_still_read() {
    let dir = TempDir::new("schema-3-rows");
    let store = Store::open(&dir.db()).unwrap();
    store.ensure_session("s", "main").unwrap();
    let old = vec![start("a", "x"), end("a")];
    rusqlite::Connection::open(dir.db())
        .unwrap()
        .execute(
            "INSERT INTO tool_event_batches (session_id, events, at) VALUES ('s', ?1, 0)",
            [serde_json::to_string(&old).unwrap()],
        )
        .unwrap();
    let new = vec![start("b", "y"), end("b")];
    store.record_tool_events("s", &new).unwrap();
    let all: Vec<ToolEventRecord> = old.into_iter().chain(new).collect();
    assert_eq!(store.tool_events("s").unwrap(), all);
}

/// A record whose body is not a kernel event, or whose columns differ
/// from its event (imported, or written by something else), is kept as it
/// is.
#[test]
fn a_record_whose_body_is_no_event_is_kept_whole() {
    let dir = TempDir::new("odd-body");
    let store = Store::open(&dir.db()).unwrap();
    store.ensure_session("s", "main").unwrap();
    let mut odd = end("a");
    odd.body = json!({"note": "imported from elsewhere"});
    // A kernel event's body, but columns that say otherwise.
    let mut relabelled = start("b", "y");
    relabelled.tool = "renamed".into();
    let records = vec![start("a", "x"), odd, relabelled];
    store.record_tool_events("s", &records).unwrap();
    assert_eq!(store.tool_events("s").unwrap(), records);
}

// ---------------------------------------------------------------- runtime

fn runtime(dir: &TempDir) -> Runtime {
    local_runtime(
        Arc::new(DemoModel::default()),
        Arc::new(Store::open(&dir.db()).unwrap()),
        AgentSettings::default(),
    )
}

/// Three `demo_echo` calls in one reply; the second one's arguments say
/// `second_text`.
fn three_echoes(second_text: &str) -> String {
    format!(
        r#"!calls [{{"name":"demo_echo","arguments":{{"text":"one"}}}},{{"name":"demo_echo","arguments":{{"text":"{second_text}"}}}},{{"name":"demo_echo","arguments":{{"text":"three"}}}}]"#
    )
}

/// Runs one input on session `s`; returns its frames (the terminal last).
async fn run(runtime: &Runtime, text: &str) -> Vec<Frame> {
    let frames = Arc::new(std::sync::Mutex::new(Vec::new()));
    let sink: homeagent_agent::FrameSink = {
        let frames = Arc::clone(&frames);
        Arc::new(move |frame| frames.lock().unwrap().push(frame))
    };
    let input = TurnInput {
        session: "s".into(),
        agent: "main".into(),
        text: text.into(),
    };
    let terminal = runtime.run(&input, &TurnControl::default(), &sink).await;
    let mut all = frames.lock().unwrap().clone();
    all.push(terminal);
    all
}

/// The ids of the calls of the one assistant message that has calls.
fn call_ids(history: &[Message]) -> Vec<String> {
    let calls: Vec<Vec<String>> = history
        .iter()
        .filter_map(|m| match m {
            Message::Assistant(a) if !a.tool_calls.is_empty() => {
                Some(a.tool_calls.iter().map(|c| c.id.clone()).collect())
            }
            _ => None,
        })
        .collect();
    assert_eq!(calls.len(), 1, "{history:#?}");
    calls.into_iter().next().unwrap()
}

/// The results in the history, as (call id, success, content).
fn results(history: &[Message]) -> Vec<(String, bool, String)> {
    history
        .iter()
        .filter_map(|m| match m {
            Message::Tool(t) => Some((t.tool_call_id.clone(), t.success, t.content.clone())),
            _ => None,
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_a_batch_every_call_has_its_start_and_end_event_stored() {
    let dir = TempDir::new("runtime-ok");
    let runtime = runtime(&dir);
    let frames = run(&runtime, &three_echoes("two")).await;
    assert!(
        matches!(frames.last(), Some(Frame::Response { .. })),
        "{frames:#?}"
    );
    let history = runtime.store().history("s").unwrap();
    check_pairing(&history).unwrap();
    let ids = call_ids(&history);
    assert_eq!(ids.len(), 3);
    assert_eq!(
        results(&history),
        vec![
            (ids[0].clone(), true, r#"{"text":"one"}"#.to_owned()),
            (ids[1].clone(), true, r#"{"text":"two"}"#.to_owned()),
            (ids[2].clone(), true, r#"{"text":"three"}"#.to_owned()),
        ]
    );

    let events = runtime.store().tool_events("s").unwrap();
    assert_eq!(events.len(), 6, "{events:#?}");
    // One batch id for all six, and the stored order is the order the
    // executor emitted them: each call's start before its end.
    let batch = &events[0].batch_id;
    assert!(events.iter().all(|e| &e.batch_id == batch), "{events:#?}");
    for id in &ids {
        let at = |phase| {
            events
                .iter()
                .position(|e| &e.call_id == id && e.phase == phase)
                .unwrap()
        };
        assert!(at(EventPhase::Start) < at(EventPhase::End), "{events:#?}");
        let end = &events[at(EventPhase::End)];
        assert_eq!(
            (end.status, end.success),
            (Some(CallStatus::Ok), Some(true))
        );
    }
    // The body is the event's JSON, rendered once without a `Value`.
    let second_start = events
        .iter()
        .find(|e| e.call_id == ids[1] && e.phase == EventPhase::Start)
        .unwrap();
    assert_eq!(
        second_start.body,
        json!({"phase": "start", "call_id": ids[1], "tool": "demo_echo",
               "args": {"text": "two"}, "batch_id": batch, "batch_size": 3, "parallel": true})
    );
    // The frames went out live, one start and one end per call, as before.
    let live = frames
        .iter()
        .filter(|f| matches!(f, Frame::ToolCall(_)))
        .count();
    assert_eq!(live, 6);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn events_that_cannot_be_stored_are_dropped_together_and_results_kept() {
    let dir = TempDir::new("runtime-poison");
    let runtime = runtime(&dir);
    // The second call's start event carries POISON in its arguments, so
    // the batch's event write fails in the middle; with a transaction per
    // event (or per call) the first call's events would stay behind.
    poison_events(&dir.db());
    let frames = run(&runtime, &three_echoes("POISON")).await;
    assert!(
        matches!(frames.last(), Some(Frame::Response { .. })),
        "{frames:#?}"
    );
    let history = runtime.store().history("s").unwrap();
    check_pairing(&history).unwrap();
    let ids = call_ids(&history);
    assert_eq!(
        results(&history),
        vec![
            (ids[0].clone(), true, r#"{"text":"one"}"#.to_owned()),
            (ids[1].clone(), true, r#"{"text":"POISON"}"#.to_owned()),
            (ids[2].clone(), true, r#"{"text":"three"}"#.to_owned()),
        ]
    );
    assert_eq!(runtime.store().tool_events("s").unwrap(), Vec::new());
}
