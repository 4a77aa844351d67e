#![allow(clippy::unwrap_used, clippy::expect_used)] // a panic in a test is a test failure
//! The embedded store against real SQLite files: round trips, atomicity,
//! ordering, concurrent writers (threads and a second process), `kill -9`
//! mid-write, repair on load and migrations.
//!
//! The multi-process tests re-run this test binary as the child
//! (`child_process_writer`, ignored unless asked for by name) with an
//! environment variable saying what to do.

use std::collections::BTreeSet;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Barrier};

use homeagent_agent::store::{EventPhase, SCHEMA_VERSION, Store, StoreError, ToolEventRecord};
use homeagent_core::{
    AssistantMessage, CallStatus, ErrorReason, Message, ReasoningPart, ToolCall, ToolError,
    ToolEvent, ToolMessage, check_pairing,
};
use serde_json::json;

// ---------------------------------------------------------------- helpers

/// A unique directory under the system temp dir, removed on drop.
struct TempDir(PathBuf);

impl TempDir {
    fn new(label: &str) -> TempDir {
        static COUNTER: AtomicUsize = AtomicUsize::new(0);
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos();
        let dir = std::env::temp_dir().join(format!(
            "homeagent-store-{label}-{}-{nanos}-{}",
            std::process::id(),
            COUNTER.fetch_add(1, Ordering::Relaxed)
        ));
        std::fs::create_dir_all(&dir).unwrap();
        TempDir(dir)
    }

    fn db(&self) -> PathBuf {
        self.0.join("data").join("homeagent.db")
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn call(id: &str, name: &str, arguments: serde_json::Value) -> ToolCall {
    ToolCall {
        id: id.into(),
        name: name.into(),
        raw_arguments: arguments.to_string(),
        arguments,
    }
}

fn assistant_calling(content: &str, calls: Vec<ToolCall>) -> Message {
    Message::Assistant(AssistantMessage {
        content: content.into(),
        reasoning: Vec::new(),
        tool_calls: calls,
    })
}

fn answer(id: &str, name: &str, content: &str) -> Message {
    Message::Tool(ToolMessage {
        tool_call_id: id.into(),
        name: name.into(),
        content: content.into(),
        success: true,
    })
}

/// What a call cut off by a crash must read, written out by hand.
fn cancelled(id: &str, name: &str) -> Message {
    Message::Tool(ToolMessage {
        tool_call_id: id.into(),
        name: name.into(),
        content: format!(
            "tool {name} failed: cancelled — the agent stopped (crash or restart) before this call \
             finished; it may or may not have run, and its result is lost\n\
             hint: check whether it took effect before calling it again"
        ),
        success: false,
    })
}

fn raw(path: &Path) -> rusqlite::Connection {
    rusqlite::Connection::open(path).unwrap()
}

/// `(seq, role, messages held)` of every row of `session`, in order: a
/// row holding a write's messages (a JSON array) holds several.
fn rows(path: &Path, session: &str) -> Vec<(i64, String, usize)> {
    let conn = raw(path);
    let mut stmt = conn
        .prepare("SELECT seq, role, body FROM messages WHERE session_id = ?1 ORDER BY seq")
        .unwrap();
    stmt.query_map([session], |r| {
        let body: String = r.get(2)?;
        let held = match serde_json::from_str::<serde_json::Value>(&body).unwrap() {
            serde_json::Value::Array(messages) => messages.len(),
            _ => 1,
        };
        Ok((r.get(0)?, r.get(1)?, held))
    })
    .unwrap()
    .collect::<Result<Vec<_>, _>>()
    .unwrap()
}

/// The numbers of the session's stored messages, in row order, read from
/// the file: a row holding several messages (a JSON array) is numbered by
/// its last one.
fn seqs(path: &Path, session: &str) -> Vec<i64> {
    rows(path, session)
        .into_iter()
        .flat_map(|(seq, _, held)| seq - held as i64 + 1..=seq)
        .collect()
}

// ---------------------------------------------------------------- basics

#[test]
fn every_message_kind_round_trips_exactly_across_a_reopen() {
    let dir = TempDir::new("roundtrip");
    let messages = vec![
        Message::system("You are HomeAgent."),
        Message::user("list /tmp and echo «héllo» 🌍"),
        Message::Assistant(AssistantMessage {
            content: "Running two tools.".into(),
            reasoning: vec![
                ReasoningPart {
                    text: "two independent reads".into(),
                    metadata: Some(json!({"anthropic": {"signature": "c2lnbmF0dXJl"}})),
                },
                ReasoningPart {
                    text: String::new(),
                    metadata: None,
                },
            ],
            tool_calls: vec![
                call("call_1", "files_list", json!({"path": "/tmp", "depth": 2})),
                ToolCall {
                    id: "call_2".into(),
                    name: "demo_echo".into(),
                    arguments: json!({}),
                    raw_arguments: "{\"text\": \"cut".into(),
                },
            ],
        }),
        answer("call_1", "files_list", "[\"a.txt\",\"b\"]"),
        Message::Tool(ToolMessage {
            tool_call_id: "call_2".into(),
            name: "demo_echo".into(),
            content: "tool demo_echo failed: truncated — cut".into(),
            success: false,
        }),
        Message::Assistant(AssistantMessage::default()),
        Message::user(""),
    ];
    {
        let store = Store::open(&dir.db()).unwrap();
        store.ensure_session("s1", "main").unwrap();
        assert_eq!(store.append_messages("s1", &messages).unwrap(), 1..=7);
    }
    let store = Store::open(&dir.db()).unwrap();
    assert_eq!(store.history("s1").unwrap(), messages);
    assert_eq!(store.session("s1").unwrap().unwrap().message_count, 7);
    assert_eq!(seqs(&dir.db(), "s1"), vec![1, 2, 3, 4, 5, 6, 7]);
    // One write, one row, numbered by its last message.
    assert_eq!(rows(&dir.db(), "s1"), [(7, "user".to_owned(), 7)]);
}

/// The messages of one write are one row (a row per message was most of
/// what storing a write cost SQLite), numbered by its last message: the
/// messages keep their numbers 1, 2, 3, …, reads give them back one by
/// one, and the next message is numbered after them.
#[test]
fn a_writes_messages_are_one_row_and_read_back_as_messages() {
    let dir = TempDir::new("write-row");
    let messages = vec![
        Message::user("three reads"),
        assistant_calling(
            "",
            vec![
                call("a", "demo_echo", json!({"text": "1"})),
                call("b", "demo_echo", json!({"text": "2"})),
                call("c", "demo_echo", json!({"text": "3"})),
            ],
        ),
        answer("a", "demo_echo", "1"),
        answer("b", "demo_echo", "2"),
        answer("c", "demo_echo", "3"),
        assistant_calling("done", vec![]),
    ];
    {
        let store = Store::open(&dir.db()).unwrap();
        store.ensure_session("b", "main").unwrap();
        assert_eq!(store.append_messages("b", &messages).unwrap(), 1..=6);
        assert_eq!(store.load_session("b").unwrap(), messages);
        assert_eq!(
            store
                .append_messages("b", &[Message::user("next")])
                .unwrap(),
            7..=7
        );
        // The handle's remembered history takes the new row after the first.
        let mut all = messages.clone();
        all.push(Message::user("next"));
        assert_eq!(store.load_session("b").unwrap(), all);
    }
    assert_eq!(
        rows(&dir.db(), "b"),
        [(6, "assistant", 6), (7, "user", 1)].map(|(seq, role, held)| (seq, role.to_owned(), held))
    );
    assert_eq!(seqs(&dir.db(), "b"), (1..=7).collect::<Vec<_>>());
    let store = Store::open(&dir.db()).unwrap();
    let mut all = messages.clone();
    all.push(Message::user("next"));
    assert_eq!(store.history("b").unwrap(), all);
    assert_eq!(store.load_session("b").unwrap(), all);
    assert_eq!(store.session("b").unwrap().unwrap().message_count, 7);
    assert_eq!(store.list_sessions().unwrap()[0].message_count, 7);
}

/// Calls left unanswered inside a row (one write holds the turn and what
/// a process appended after it without loading the session): the load
/// answers them `cancelled` right after their turn and moves what came
/// after, numbered anew, the session written again as one row.
#[test]
fn a_gap_inside_a_row_is_repaired_in_order() {
    let dir = TempDir::new("row-repair");
    let before = vec![
        Message::user("one"),
        assistant_calling(
            "",
            vec![
                call("a", "demo_echo", json!({})),
                call("b", "demo_echo", json!({})),
            ],
        ),
        answer("a", "demo_echo", "1"),
        answer("b", "demo_echo", "2"),
        assistant_calling(
            "",
            vec![
                call("c", "demo_note", json!({})),
                call("d", "demo_note", json!({})),
            ],
        ),
        // The process restarted and went on without loading the session.
        Message::user("two"),
    ];
    let store = Store::open(&dir.db()).unwrap();
    store.ensure_session("r", "main").unwrap();
    store.append_messages("r", &before).unwrap();
    let mut expected = before[..5].to_vec();
    expected.extend([cancelled("c", "demo_note"), cancelled("d", "demo_note")]);
    expected.push(before[5].clone());
    assert_eq!(store.load_session("r").unwrap(), expected);
    check_pairing(&expected).unwrap();
    assert_eq!(store.history("r").unwrap(), expected);
    assert_eq!(rows(&dir.db(), "r"), [(8, "user".to_owned(), 8)]);
    assert_eq!(seqs(&dir.db(), "r"), (1..=8).collect::<Vec<_>>());
    assert_eq!(store.session("r").unwrap().unwrap().message_count, 8);
    assert_eq!(
        store
            .append_messages("r", &[Message::user("three")])
            .unwrap(),
        9..=9
    );
}

#[test]
fn open_creates_the_directory_and_sets_wal() {
    let dir = TempDir::new("open");
    let path = dir.0.join("a").join("b").join("store.db");
    let store = Store::open(&path).unwrap();
    assert!(path.is_file());
    assert_eq!(store.path(), path.as_path());
    assert_eq!(store.schema_version().unwrap(), SCHEMA_VERSION);
    // journal_mode is stored in the file, so another connection sees it.
    let mode: String = raw(&path)
        .pragma_query_value(None, "journal_mode", |r| r.get(0))
        .unwrap();
    assert_eq!(mode, "wal");
}

#[test]
fn appending_to_a_missing_session_fails_and_creates_nothing() {
    let dir = TempDir::new("missing");
    let store = Store::open(&dir.db()).unwrap();
    let err = store
        .append_messages("ghost", &[Message::user("hello")])
        .unwrap_err();
    assert!(
        matches!(&err, StoreError::SessionNotFound { id } if id == "ghost"),
        "{err:?}"
    );
    assert_eq!(store.session("ghost").unwrap(), None);
    assert!(store.list_sessions().unwrap().is_empty());
    assert!(matches!(
        store.history("ghost"),
        Err(StoreError::SessionNotFound { .. })
    ));
    let count: i64 = raw(&dir.db())
        .query_row("SELECT COUNT(*) FROM messages", [], |r| r.get(0))
        .unwrap();
    assert_eq!(count, 0);
}

#[test]
fn a_failing_append_stores_none_of_its_messages() {
    let dir = TempDir::new("atomic");
    let store = Store::open(&dir.db()).unwrap();
    store.ensure_session("s", "main").unwrap();
    store
        .append_messages("s", &[Message::user("before")])
        .unwrap();
    // An injected failure on the third row of the batch: a real SQLite error
    // in the middle of the transaction, after two rows were inserted.
    raw(&dir.db())
        .execute_batch(
            "CREATE TRIGGER poison BEFORE INSERT ON messages
             WHEN NEW.body LIKE '%POISON%'
             BEGIN SELECT RAISE(ABORT, 'injected failure'); END;",
        )
        .unwrap();
    let batch = [
        Message::user("one"),
        Message::user("two"),
        Message::user("POISON"),
    ];
    let err = store.append_messages("s", &batch).unwrap_err();
    assert!(matches!(err, StoreError::Sqlite(_)), "{err:?}");
    assert_eq!(store.history("s").unwrap(), vec![Message::user("before")]);
    // The next append continues the sequence without a hole.
    assert_eq!(
        store
            .append_messages("s", &[Message::user("after")])
            .unwrap(),
        2..=2
    );
    assert_eq!(seqs(&dir.db(), "s"), vec![1, 2]);
}

#[test]
fn many_appends_keep_their_order() {
    let dir = TempDir::new("order");
    let store = Store::open(&dir.db()).unwrap();
    store.ensure_session("order", "main").unwrap();
    let mut expected = Vec::new();
    let mut next_seq = 1;
    for i in 0..60 {
        // Batches of 0, 1, 2 and 3 messages.
        let batch: Vec<Message> = (0..i % 4)
            .map(|j| Message::user(format!("{i}.{j}")))
            .collect();
        let range = store.append_messages("order", &batch).unwrap();
        assert_eq!(range, next_seq..=next_seq + batch.len() as i64 - 1);
        next_seq += batch.len() as i64;
        expected.extend(batch);
    }
    assert_eq!(expected.len(), 90);
    assert_eq!(store.history("order").unwrap(), expected);
    assert_eq!(seqs(&dir.db(), "order"), (1..=90).collect::<Vec<_>>());
}

#[test]
fn session_ids_are_validated() {
    let dir = TempDir::new("ids");
    let store = Store::open(&dir.db()).unwrap();
    let too_long = "x".repeat(129);
    for bad in ["", "a b", "a/b", "../etc", "ü", "a\nb", too_long.as_str()] {
        let err = store.ensure_session(bad, "main").unwrap_err();
        assert!(
            matches!(err, StoreError::InvalidSessionId { .. }),
            "{bad:?}: {err:?}"
        );
        assert!(matches!(
            store.append_messages(bad, &[]),
            Err(StoreError::InvalidSessionId { .. })
        ));
    }
    let longest = "y".repeat(128);
    for good in ["a", "A.b_c:d-9", "telegram:12345", longest.as_str()] {
        assert_eq!(store.ensure_session(good, "main").unwrap().id, good);
    }
    assert!(matches!(
        store.ensure_session("ok", ""),
        Err(StoreError::InvalidAgentName { .. })
    ));
}

#[test]
fn sessions_are_created_once_listed_and_deleted_with_their_rows() {
    let dir = TempDir::new("sessions");
    let store = Store::open(&dir.db()).unwrap();
    let first = store.ensure_session("a", "main").unwrap();
    assert_eq!(first.agent, "main");
    assert_eq!(first.message_count, 0);
    assert_eq!(first.title, None);
    assert_eq!(store.ensure_session("a", "main").unwrap(), first);
    let err = store.ensure_session("a", "kitchen").unwrap_err();
    assert!(
        matches!(&err, StoreError::AgentMismatch { existing, requested, .. }
            if existing == "main" && requested == "kitchen"),
        "{err:?}"
    );

    store.ensure_session("b", "kitchen").unwrap();
    // Sleep past the millisecond clock so "b" is strictly more recent.
    std::thread::sleep(std::time::Duration::from_millis(5));
    store
        .append_messages("b", &[Message::user("1"), Message::user("2")])
        .unwrap();
    store.set_title("b", Some("Kitchen lights")).unwrap();
    let listed: Vec<(String, u64, Option<String>)> = store
        .list_sessions()
        .unwrap()
        .into_iter()
        .map(|s| (s.id, s.message_count, s.title))
        .collect();
    assert_eq!(
        listed,
        vec![
            ("b".to_owned(), 2, Some("Kitchen lights".to_owned())),
            ("a".to_owned(), 0, None),
        ]
    );

    store
        .record_tool_event(
            "b",
            &ToolEventRecord::from_event(&ToolEvent::Start {
                call_id: "c".into(),
                tool: "demo_echo".into(),
                args: json!({}),
                batch_id: "b1".into(),
                batch_size: 1,
                parallel: false,
            }),
        )
        .unwrap();
    assert!(store.delete_session("b").unwrap());
    assert!(!store.delete_session("b").unwrap());
    assert_eq!(store.session("b").unwrap(), None);
    let conn = raw(&dir.db());
    for table in ["messages", "tool_events", "tool_event_batches"] {
        let left: i64 = conn
            .query_row(
                &format!("SELECT COUNT(*) FROM {table} WHERE session_id = 'b'"),
                [],
                |r| r.get(0),
            )
            .unwrap();
        assert_eq!(left, 0, "{table}");
    }
    // A new session under the old id starts empty.
    store.ensure_session("b", "main").unwrap();
    assert!(store.history("b").unwrap().is_empty());
}

#[test]
fn tool_events_round_trip_in_order() {
    let dir = TempDir::new("events");
    let store = Store::open(&dir.db()).unwrap();
    store.ensure_session("ev", "main").unwrap();
    let start = ToolEvent::Start {
        call_id: "call_9".into(),
        tool: "demo_sleep".into(),
        args: json!({"ms": 20}),
        batch_id: "batch-1".into(),
        batch_size: 2,
        parallel: true,
    };
    let end = ToolEvent::End {
        call_id: "call_9".into(),
        tool: "demo_sleep".into(),
        batch_id: "batch-1".into(),
        batch_size: 2,
        parallel: true,
        status: CallStatus::Timeout,
        success: false,
        duration_ms: 1500,
        error: Some(ToolError::new(ErrorReason::Timeout, "too slow")),
        warnings: vec!["argument `ms`: coerced \"20\" to 20".into()],
    };
    store
        .record_tool_event("ev", &ToolEventRecord::from_event(&start))
        .unwrap();
    store
        .record_tool_event("ev", &ToolEventRecord::from_event(&end))
        .unwrap();
    let events = store.tool_events("ev").unwrap();
    assert_eq!(events.len(), 2);
    let summary: Vec<_> = events
        .iter()
        .map(|e| {
            (
                e.batch_id.as_str(),
                e.call_id.as_str(),
                e.tool.as_str(),
                e.phase,
                e.status,
                e.success,
                e.duration_ms,
            )
        })
        .collect();
    assert_eq!(
        summary,
        vec![
            (
                "batch-1",
                "call_9",
                "demo_sleep",
                EventPhase::Start,
                None,
                None,
                None
            ),
            (
                "batch-1",
                "call_9",
                "demo_sleep",
                EventPhase::End,
                Some(CallStatus::Timeout),
                Some(false),
                Some(1500)
            ),
        ]
    );
    assert_eq!(
        events[0].body,
        json!({"phase": "start", "call_id": "call_9", "tool": "demo_sleep", "args": {"ms": 20},
               "batch_id": "batch-1", "batch_size": 2, "parallel": true})
    );
    assert_eq!(
        events[1].body["error"],
        json!({"reason": "timeout", "detail": "too slow"})
    );
    assert_eq!(
        events[1].body["warnings"],
        json!(["argument `ms`: coerced \"20\" to 20"])
    );
    // Stored as the same words the JSON events use.
    let status: String = raw(&dir.db())
        .query_row(
            "SELECT json_extract(events, '$.events[0].status') FROM tool_event_batches
             ORDER BY id DESC LIMIT 1",
            [],
            |r| r.get(0),
        )
        .unwrap();
    assert_eq!(status, "timeout");
    assert!(matches!(
        store.record_tool_event("nobody", &events[0]),
        Err(StoreError::SessionNotFound { .. })
    ));
}

// ---------------------------------------------------------------- repair

#[test]
fn load_session_answers_calls_a_crash_left_open_and_commits_it() {
    let dir = TempDir::new("repair");
    let history = vec![
        Message::user("check both"),
        assistant_calling(
            "",
            vec![
                call("c1", "demo_echo", json!({"text": "x"})),
                call("c2", "demo_sleep", json!({"ms": 10})),
                call("c3", "demo_note", json!({})),
            ],
        ),
        answer("c2", "demo_sleep", "slept"),
    ];
    {
        let store = Store::open(&dir.db()).unwrap();
        store.ensure_session("r", "main").unwrap();
        store.append_messages("r", &history).unwrap();
    }
    let expected = vec![
        history[0].clone(),
        history[1].clone(),
        history[2].clone(),
        cancelled("c1", "demo_echo"),
        cancelled("c3", "demo_note"),
    ];
    let store = Store::open(&dir.db()).unwrap();
    assert_eq!(store.load_session("r").unwrap(), expected);
    check_pairing(&expected).unwrap();
    drop(store);
    // Committed: a fresh handle sees the repair without loading.
    let store = Store::open(&dir.db()).unwrap();
    assert_eq!(store.history("r").unwrap(), expected);
    // Idempotent.
    assert_eq!(store.load_session("r").unwrap(), expected);
    assert_eq!(seqs(&dir.db(), "r"), vec![1, 2, 3, 4, 5]);
}

#[test]
fn a_gap_in_the_middle_is_filled_before_the_next_turn() {
    let dir = TempDir::new("midgap");
    let store = Store::open(&dir.db()).unwrap();
    store.ensure_session("m", "main").unwrap();
    let before = vec![
        Message::user("one"),
        assistant_calling("", vec![call("a", "demo_echo", json!({}))]),
        // The process restarted and went on without loading the session.
        Message::user("two"),
        assistant_calling("done", vec![]),
    ];
    store.append_messages("m", &before).unwrap();
    let expected = vec![
        before[0].clone(),
        before[1].clone(),
        cancelled("a", "demo_echo"),
        before[2].clone(),
        before[3].clone(),
    ];
    assert_eq!(store.load_session("m").unwrap(), expected);
    assert_eq!(store.history("m").unwrap(), expected);
    assert_eq!(seqs(&dir.db(), "m"), vec![1, 2, 3, 4, 5]);
    assert_eq!(
        store
            .append_messages("m", &[Message::user("three")])
            .unwrap(),
        6..=6
    );
}

#[test]
fn a_history_broken_otherwise_is_refused_and_left_alone() {
    let dir = TempDir::new("orphan");
    let store = Store::open(&dir.db()).unwrap();
    store.ensure_session("o", "main").unwrap();
    let broken = vec![Message::user("hi"), answer("nobody", "demo_echo", "?")];
    store.append_messages("o", &broken).unwrap();
    let err = store.load_session("o").unwrap_err();
    assert!(matches!(err, StoreError::Unrepairable { .. }), "{err:?}");
    assert_eq!(store.history("o").unwrap(), broken);
}

// ---------------------------------------------------------------- history cache

/// A store in `dir` with session "c" holding ten user messages, and them.
fn session_of_ten_messages(dir: &TempDir) -> (Store, Vec<Message>) {
    let store = Store::open(&dir.db()).unwrap();
    store.ensure_session("c", "main").unwrap();
    let history: Vec<Message> = (0..10)
        .map(|i| Message::user(format!("message {i}")))
        .collect();
    store.append_messages("c", &history).unwrap();
    (store, history)
}

/// An assistant message with one piece of reasoning carrying `metadata`:
/// `null` metadata is stored as none, so it reads back different.
fn thought(metadata: Option<serde_json::Value>) -> Message {
    Message::Assistant(AssistantMessage {
        content: "thought".into(),
        reasoning: vec![ReasoningPart {
            text: "hm".into(),
            metadata,
        }],
        tool_calls: Vec::new(),
    })
}

/// A session's next load parses only the messages added since its last
/// one, and still returns the whole history.
#[test]
fn loading_a_session_again_parses_only_its_new_messages() {
    let dir = TempDir::new("cache");
    let (store, mut history) = session_of_ten_messages(&dir);
    let parsed = |store: &Store| store.read_stats().messages_parsed;

    assert_eq!(store.load_session("c").unwrap(), history);
    assert_eq!(parsed(&store), 10);

    // What this handle writes is remembered as it commits (see
    // `messages_this_handle_appends_are_not_read_back`), unless it would
    // read back different: a write holding reasoning metadata that is
    // `null` (stored as none) is read by the next load.
    let call_and_answer = [
        assistant_calling("", vec![call("k1", "demo_echo", json!({"text": "x"}))]),
        answer("k1", "demo_echo", "x"),
    ];
    let mut more = call_and_answer.to_vec();
    more.push(thought(Some(serde_json::Value::Null)));
    more.push(Message::user("again"));
    store.append_messages("c", &more).unwrap();
    history.extend(call_and_answer);
    history.push(thought(None));
    history.push(Message::user("again"));
    assert_eq!(store.load_session("c").unwrap(), history);
    assert_eq!(parsed(&store), 14, "only the 4 new messages are parsed");

    assert_eq!(store.load_session("c").unwrap(), history);
    assert_eq!(parsed(&store), 14, "nothing new, nothing parsed");
    // A viewer's read is not cached, and the cache does not change it.
    assert_eq!(store.history("c").unwrap(), history);
}

/// What this handle commits to a remembered session is remembered as it
/// commits: the next load reads none of it back, and returns what a fresh
/// read of the file returns.
#[test]
fn messages_this_handle_appends_are_not_read_back() {
    let dir = TempDir::new("cache-own");
    let (store, mut history) = session_of_ten_messages(&dir);
    let parsed = |store: &Store| store.read_stats().messages_parsed;
    assert_eq!(store.load_session("c").unwrap(), history);
    assert_eq!(parsed(&store), 10);

    let more = vec![
        assistant_calling(
            "",
            vec![call("k1", "demo_echo", json!({"x": 0.1, "n": -3}))],
        ),
        answer("k1", "demo_echo", "x"),
    ];
    store.append_messages("c", &more).unwrap();
    store
        .append_messages("c", &[Message::user("again")])
        .unwrap();
    history.extend(more);
    history.push(Message::user("again"));
    assert_eq!(store.load_session("c").unwrap(), history);
    assert_eq!(parsed(&store), 10, "nothing this handle wrote is parsed");
    assert_eq!(store.history("c").unwrap(), history);
}

/// A remembered session's load checks the messages added since its last
/// load for unanswered calls, from the last one before them that is not a
/// tool result (a turn may straddle the two), not the whole history again:
/// a load's cost does not grow with the session.
#[test]
fn a_remembered_session_is_checked_only_from_its_last_step() {
    let dir = TempDir::new("cache-check");
    let (store, mut history) = session_of_ten_messages(&dir);
    let checked = |store: &Store| store.read_stats().messages_checked;
    assert_eq!(store.load_session("c").unwrap(), history);
    assert_eq!(checked(&store), 10, "a first load checks everything");

    let more = vec![
        assistant_calling("", vec![call("k1", "demo_echo", json!({}))]),
        answer("k1", "demo_echo", "x"),
    ];
    store.append_messages("c", &more).unwrap();
    history.extend(more);
    assert_eq!(store.load_session("c").unwrap(), history);
    // "message 9", then the two new ones.
    assert_eq!(checked(&store), 10 + 3);

    // A turn left open among new messages is still found and answered.
    let open = assistant_calling("", vec![call("k2", "demo_echo", json!({}))]);
    store
        .append_messages("c", &[Message::user("more"), open.clone()])
        .unwrap();
    history.extend([Message::user("more"), open, cancelled("k2", "demo_echo")]);
    assert_eq!(store.load_session("c").unwrap(), history);
    assert_eq!(store.history("c").unwrap(), history);
}

/// A message whose stored form reads back different from it (reasoning
/// metadata that is `null` reads back as none) is not remembered as it
/// was written: the load returns what is stored.
#[test]
fn a_message_that_reads_back_different_is_remembered_as_stored() {
    let dir = TempDir::new("cache-lossy");
    let (store, mut history) = session_of_ten_messages(&dir);
    assert_eq!(store.load_session("c").unwrap(), history);

    let written = thought(Some(serde_json::Value::Null));
    store.append_messages("c", &[written]).unwrap();
    history.push(thought(None));
    assert_eq!(store.history("c").unwrap(), history, "as stored");
    assert_eq!(store.load_session("c").unwrap(), history);
}

/// A write that is remembered after one that was not (it reads back
/// different) leaves the remembered history with a hole: it is not
/// remembered either, and the next load reads both.
#[test]
fn a_write_after_one_not_remembered_is_read_with_it() {
    let dir = TempDir::new("cache-hole");
    let (store, _) = session_of_ten_messages(&dir);
    store.load_session("c").unwrap();
    let null_metadata = thought(Some(serde_json::Value::Null));
    store.append_messages("c", &[null_metadata]).unwrap();
    store
        .append_messages("c", &[Message::user("after")])
        .unwrap();
    let loaded = store.load_session("c").unwrap();
    assert_eq!(loaded.len(), 12);
    assert_eq!(loaded, store.history("c").unwrap());
}

/// The agent's load carries each message's token estimate too, counted
/// once per message while the session stays remembered: counting the
/// whole history again for every input made an input's cost grow with the
/// session's length.
#[test]
fn a_counted_load_counts_only_the_new_messages() {
    use homeagent_agent::context::approx_tokens;

    let dir = TempDir::new("cache-counted");
    let (store, mut history) = session_of_ten_messages(&dir);
    let counted = |store: &Store| store.read_stats().messages_counted;
    let estimates = |history: &[Message]| history.iter().map(approx_tokens).collect::<Vec<_>>();

    let loaded = store.load_counted("c").unwrap();
    assert_eq!(loaded.messages(), history);
    assert_eq!(loaded.tokens(), estimates(&history));
    assert_eq!(counted(&store), 10);

    let more = vec![
        assistant_calling("", vec![call("k1", "demo_echo", json!({"text": "x"}))]),
        answer("k1", "demo_echo", "a longer answer than the others"),
    ];
    store.append_messages("c", &more).unwrap();
    history.extend(more);
    let loaded = store.load_counted("c").unwrap();
    assert_eq!(loaded.messages(), history);
    assert_eq!(loaded.tokens(), estimates(&history));
    assert_eq!(counted(&store), 12, "only the 2 new messages are counted");
    // The plain load shares the cache and its counts.
    assert_eq!(store.load_session("c").unwrap(), history);
    assert_eq!(counted(&store), 12);
}

/// Another handle on the file (another process, or a second `Store` in
/// this one) may rewrite a session the cache holds: the next load must see
/// the file as it is, not the remembered history.
#[test]
fn a_session_rewritten_through_another_connection_loads_as_stored() {
    let dir = TempDir::new("cache-other");
    let mine = Store::open(&dir.db()).unwrap();
    let other = Store::open(&dir.db()).unwrap();
    mine.ensure_session("s", "main").unwrap();
    let first = vec![
        Message::user("old one"),
        assistant_calling("old two", vec![]),
    ];
    mine.append_messages("s", &first).unwrap();
    assert_eq!(mine.load_session("s").unwrap(), first);

    // Same length, same seq numbers, different messages.
    assert!(other.delete_session("s").unwrap());
    other.ensure_session("s", "main").unwrap();
    let second = vec![
        Message::user("new one"),
        assistant_calling("new two", vec![]),
    ];
    other.append_messages("s", &second).unwrap();

    assert_eq!(mine.load_session("s").unwrap(), second);
}

/// The same through this handle: a deleted session's remembered history
/// must not come back with a new session of the same id.
#[test]
fn a_deleted_and_recreated_session_loads_its_new_history() {
    let dir = TempDir::new("cache-delete");
    let store = Store::open(&dir.db()).unwrap();
    store.ensure_session("d", "main").unwrap();
    let first = vec![Message::user("before"), assistant_calling("a", vec![])];
    store.append_messages("d", &first).unwrap();
    assert_eq!(store.load_session("d").unwrap(), first);

    assert!(store.delete_session("d").unwrap());
    store.ensure_session("d", "main").unwrap();
    let second = vec![Message::user("after"), assistant_calling("b", vec![])];
    store.append_messages("d", &second).unwrap();
    assert_eq!(store.load_session("d").unwrap(), second);
}

/// A gap that appears after the session was loaded (and remembered) is
/// repaired in the middle, which renumbers later messages: the loads after
/// the repair return the repaired history, not the remembered one.
#[test]
fn a_repair_after_a_load_is_what_later_loads_return() {
    let dir = TempDir::new("cache-repair");
    let store = Store::open(&dir.db()).unwrap();
    store.ensure_session("r", "main").unwrap();
    let start = vec![Message::user("one"), assistant_calling("fine", vec![])];
    store.append_messages("r", &start).unwrap();
    assert_eq!(store.load_session("r").unwrap(), start);

    let crashed = vec![
        Message::user("two"),
        assistant_calling("", vec![call("g", "demo_echo", json!({}))]),
        // Restarted and went on without loading the session first.
        Message::user("three"),
    ];
    store.append_messages("r", &crashed).unwrap();
    let expected = vec![
        start[0].clone(),
        start[1].clone(),
        crashed[0].clone(),
        crashed[1].clone(),
        cancelled("g", "demo_echo"),
        crashed[2].clone(),
    ];
    assert_eq!(store.load_session("r").unwrap(), expected);
    assert_eq!(store.load_session("r").unwrap(), expected);
    // The repaired history is remembered again: nothing new, nothing parsed.
    let parsed = store.read_stats().messages_parsed;
    assert_eq!(store.load_session("r").unwrap(), expected);
    assert_eq!(store.read_stats().messages_parsed, parsed);
    store
        .append_messages("r", &[assistant_calling("four", vec![])])
        .unwrap();
    let mut longer = expected.clone();
    longer.push(assistant_calling("four", vec![]));
    assert_eq!(store.load_session("r").unwrap(), longer);
    assert_eq!(seqs(&dir.db(), "r"), vec![1, 2, 3, 4, 5, 6, 7]);
}

// ---------------------------------------------------------------- migrations

#[test]
fn a_version_1_database_is_migrated_and_keeps_its_rows() {
    let dir = TempDir::new("migrate");
    std::fs::create_dir_all(dir.db().parent().unwrap()).unwrap();
    {
        // What a build with only the first schema step wrote.
        let conn = raw(&dir.db());
        conn.execute_batch(
            r#"CREATE TABLE sessions (
                id TEXT PRIMARY KEY NOT NULL, agent TEXT NOT NULL, title TEXT,
                created_at INTEGER NOT NULL, updated_at INTEGER NOT NULL) STRICT;
            CREATE TABLE messages (
                session_id TEXT NOT NULL REFERENCES sessions(id) ON DELETE CASCADE,
                seq INTEGER NOT NULL, role TEXT NOT NULL, body TEXT NOT NULL,
                created_at INTEGER NOT NULL, PRIMARY KEY (session_id, seq)) STRICT, WITHOUT ROWID;
            INSERT INTO sessions VALUES ('old', 'main', 'Old one', 1000, 2000);
            INSERT INTO messages VALUES ('old', 1, 'user', '{"role":"user","content":"from v1"}', 1000);
            PRAGMA user_version = 1;"#,
        )
        .unwrap();
    }
    let store = Store::open(&dir.db()).unwrap();
    assert_eq!(store.schema_version().unwrap(), 6);
    assert_eq!(
        store.history("old").unwrap(),
        vec![Message::user("from v1")]
    );
    let info = store.session("old").unwrap().unwrap();
    assert_eq!(
        (
            info.title.as_deref(),
            info.created_at_ms,
            info.updated_at_ms
        ),
        (Some("Old one"), 1000, 2000)
    );
    // The table step 2 added works.
    store
        .record_tool_event(
            "old",
            &ToolEventRecord::from_event(&ToolEvent::Start {
                call_id: "c".into(),
                tool: "t".into(),
                args: json!({}),
                batch_id: "b".into(),
                batch_size: 1,
                parallel: false,
            }),
        )
        .unwrap();
    assert_eq!(store.tool_events("old").unwrap().len(), 1);
}

/// (call id, phase, status, success, duration, at) of a stored event.
type Summary<'a> = (
    &'a str,
    EventPhase,
    Option<CallStatus>,
    Option<bool>,
    Option<u64>,
    i64,
);

#[test]
fn events_written_one_per_row_before_version_3_are_read_before_later_batches() {
    let dir = TempDir::new("legacy-events");
    {
        // A version-2 file: events one per row in `tool_events`.
        let store = Store::open(&dir.db()).unwrap();
        store.ensure_session("s", "main").unwrap();
        let conn = raw(&dir.db());
        conn.execute_batch(
            r#"DROP TABLE tool_event_batches;
            PRAGMA user_version = 2;
            INSERT INTO tool_events
                (session_id, batch_id, call_id, tool, phase, status, success, duration_ms, body, at)
            VALUES
                ('s', 'b0', 'old1', 'demo_echo', 'start', NULL, NULL, NULL,
                 '{"kind":"start","note":"v2 start"}', 100),
                ('s', 'b0', 'old1', 'demo_echo', 'end', 'ok', 1, 7,
                 '{"kind":"end","note":"v2 end"}', 107);"#,
        )
        .unwrap();
    }
    let store = Store::open(&dir.db()).unwrap();
    assert_eq!(store.schema_version().unwrap(), 6);
    let new_start = ToolEvent::Start {
        call_id: "new1".into(),
        tool: "demo_sleep".into(),
        args: json!({"ms": 1}),
        batch_id: "b1".into(),
        batch_size: 1,
        parallel: true,
    };
    store
        .record_tool_events("s", &[ToolEventRecord::from_event(&new_start)])
        .unwrap();
    let events = store.tool_events("s").unwrap();
    let summary: Vec<Summary<'_>> = events
        .iter()
        .map(|e| {
            (
                e.call_id.as_str(),
                e.phase,
                e.status,
                e.success,
                e.duration_ms,
                e.at_ms,
            )
        })
        .collect();
    assert_eq!(
        summary[..2],
        [
            ("old1", EventPhase::Start, None, None, None, 100),
            (
                "old1",
                EventPhase::End,
                Some(CallStatus::Ok),
                Some(true),
                Some(7),
                107
            ),
        ]
    );
    assert_eq!(events[1].body, json!({"kind": "end", "note": "v2 end"}));
    assert_eq!(events.len(), 3);
    assert_eq!(
        (events[2].call_id.as_str(), events[2].phase),
        ("new1", EventPhase::Start)
    );
    assert_eq!(events[2].body, serde_json::to_value(&new_start).unwrap());
}

#[test]
fn an_empty_version_0_file_is_migrated_to_the_current_version() {
    let dir = TempDir::new("v0");
    std::fs::create_dir_all(dir.db().parent().unwrap()).unwrap();
    raw(&dir.db())
        .execute_batch("CREATE TABLE unrelated (x INTEGER);")
        .unwrap();
    let store = Store::open(&dir.db()).unwrap();
    assert_eq!(store.schema_version().unwrap(), 6);
    store.ensure_session("s", "main").unwrap();
}

#[test]
fn a_database_from_a_newer_version_is_refused_and_not_touched() {
    let dir = TempDir::new("newer");
    std::fs::create_dir_all(dir.db().parent().unwrap()).unwrap();
    raw(&dir.db())
        .execute_batch("CREATE TABLE future (x INTEGER); PRAGMA user_version = 99;")
        .unwrap();
    let err = Store::open(&dir.db()).unwrap_err();
    assert!(
        matches!(
            err,
            StoreError::NewerSchema {
                found: 99,
                supported: 6,
                ..
            }
        ),
        "{err:?}"
    );
    let version: i64 = raw(&dir.db())
        .pragma_query_value(None, "user_version", |r| r.get(0))
        .unwrap();
    assert_eq!(version, 99);
}

// ---------------------------------------------------------------- concurrency

/// Checks what concurrent writers produced in one session: every batch
/// present once, contiguous, each writer's batches in its own order, and
/// the seqs exactly 1..=total.
fn assert_interleaved_batches(path: &Path, session: &str, writers: &[&str], batches: usize) {
    let store = Store::open(path).unwrap();
    let history = store.history(session).unwrap();
    assert_eq!(history.len(), writers.len() * batches * 2);
    assert_eq!(
        seqs(path, session),
        (1..=history.len() as i64).collect::<Vec<_>>()
    );
    let texts: Vec<String> = history
        .iter()
        .map(|m| match m {
            Message::User { content } => content.clone(),
            other => panic!("unexpected {other:?}"),
        })
        .collect();
    for pair in texts.chunks(2) {
        let (a, b) = (&pair[0], &pair[1]);
        assert_eq!(
            a.strip_suffix(" a"),
            b.strip_suffix(" b"),
            "batch split: {pair:?}"
        );
    }
    for writer in writers {
        let own: Vec<&String> = texts
            .iter()
            .filter(|t| t.starts_with(&format!("{writer} ")))
            .collect();
        let expected: Vec<String> = (0..batches)
            .flat_map(|i| [format!("{writer} {i} a"), format!("{writer} {i} b")])
            .collect();
        assert_eq!(own, expected.iter().collect::<Vec<_>>(), "{writer}");
    }
}

fn append_batches(store: &Store, session: &str, writer: &str, batches: usize) -> Vec<(i64, i64)> {
    (0..batches)
        .map(|i| {
            let range = store
                .append_messages(
                    session,
                    &[
                        Message::user(format!("{writer} {i} a")),
                        Message::user(format!("{writer} {i} b")),
                    ],
                )
                .unwrap();
            (*range.start(), *range.end())
        })
        .collect()
}

fn assert_ranges_partition(mut ranges: Vec<(i64, i64)>, total: i64) {
    ranges.sort();
    let mut next = 1;
    for (start, end) in ranges {
        assert_eq!((start, end), (next, next + 1));
        next = end + 1;
    }
    assert_eq!(next, total + 1);
}

#[test]
fn two_handles_in_two_threads_append_to_one_file() {
    let dir = TempDir::new("threads");
    let path = dir.db();
    const BATCHES: usize = 60;
    // Both open a fresh file at the same moment: the migration races too.
    let barrier = Arc::new(Barrier::new(2));
    let handles: Vec<_> = ["left", "right"]
        .into_iter()
        .map(|writer| {
            let path = path.clone();
            let barrier = barrier.clone();
            std::thread::spawn(move || {
                barrier.wait();
                let own = format!("own-{writer}");
                let opened = Store::open(&path).and_then(|store| {
                    store.ensure_session("shared", "main")?;
                    store.ensure_session(&own, "main")?;
                    Ok(store)
                });
                // Both reach the second barrier whatever happened, so that
                // a failure fails the test instead of leaving the other
                // thread waiting forever.
                barrier.wait();
                let store = opened.unwrap_or_else(|e| panic!("{writer}: {e}"));
                let ranges = append_batches(&store, "shared", writer, BATCHES);
                append_batches(&store, &own, writer, BATCHES);
                ranges
            })
        })
        .collect();
    let ranges: Vec<(i64, i64)> = handles
        .into_iter()
        .flat_map(|h| h.join().unwrap())
        .collect();
    assert_ranges_partition(ranges, 2 * 2 * BATCHES as i64);
    assert_interleaved_batches(&path, "shared", &["left", "right"], BATCHES);
    assert_interleaved_batches(&path, "own-left", &["left"], BATCHES);
    assert_interleaved_batches(&path, "own-right", &["right"], BATCHES);
}

const CHILD_MODE: &str = "HOMEAGENT_STORE_TEST_CHILD";
const CHILD_DB: &str = "HOMEAGENT_STORE_TEST_DB";
const CHILD_TEST: &str = "child_process_writer";
const CHILD_BATCHES: usize = 50;

fn spawn_child(mode: &str, db: &Path) -> std::process::Child {
    Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            // libtest names it by its module path within tests/it.rs.
            &format!(
                "{}::{CHILD_TEST}",
                module_path!().trim_start_matches("it::")
            ),
            "--ignored",
            "--nocapture",
        ])
        .env(CHILD_MODE, mode)
        .env(CHILD_DB, db)
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap()
}

/// The child's half of the multi-process tests; does nothing unless a parent
/// test set the mode.
#[test]
#[ignore = "run by the multi-process tests as a child process"]
fn child_process_writer() {
    let Ok(mode) = std::env::var(CHILD_MODE) else {
        return;
    };
    let db = PathBuf::from(std::env::var(CHILD_DB).unwrap());
    let store = Store::open(&db).unwrap();
    match mode.as_str() {
        "append" => {
            println!("READY");
            for (start, end) in append_batches(&store, "shared", "child", CHILD_BATCHES) {
                println!("RANGE {start} {end}");
            }
        }
        "loop" => {
            let started = std::time::Instant::now();
            // Bounded so an orphaned child cannot run forever.
            for i in 0..1_000_000u64 {
                if started.elapsed() > std::time::Duration::from_secs(120) {
                    break;
                }
                let id = format!("c{i}");
                let turn = [
                    Message::user(format!("turn {i}")),
                    assistant_calling("", vec![call(&id, "demo_echo", json!({"i": i}))]),
                ];
                report_committed(&store, "busy", &turn);
                report_committed(&store, "busy", &[answer(&id, "demo_echo", &i.to_string())]);
                if i == 5 {
                    store
                        .append_messages(
                            "pending",
                            &[
                                Message::user("do two things"),
                                assistant_calling(
                                    "on it",
                                    vec![
                                        call("p1", "demo_sleep", json!({"ms": 60000})),
                                        call("p2", "demo_echo", json!({"text": "later"})),
                                    ],
                                ),
                            ],
                        )
                        .unwrap();
                    println!("PENDING");
                }
            }
        }
        other => panic!("unknown child mode {other}"),
    }
}

/// Appends and then reports each message with its seq; only what was
/// committed is ever reported.
fn report_committed(store: &Store, session: &str, messages: &[Message]) {
    let range = store.append_messages(session, messages).unwrap();
    for (seq, message) in range.zip(messages) {
        println!(
            "COMMITTED {seq} {}",
            serde_json::to_string(message).unwrap()
        );
    }
}

/// The payload after `marker` on a line of the child's output. The test
/// harness may print its own text on the same line, so this searches.
fn after_marker<'a>(line: &'a str, marker: &str) -> Option<&'a str> {
    line.find(marker).map(|at| &line[at + marker.len()..])
}

#[test]
fn a_second_process_appends_to_the_same_file_concurrently() {
    let dir = TempDir::new("process");
    let path = dir.db();
    let store = Store::open(&path).unwrap();
    store.ensure_session("shared", "main").unwrap();
    let mut child = spawn_child("append", &path);
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    // Start writing once the child is about to, so the two overlap.
    for line in lines.by_ref() {
        if line.unwrap().contains("READY") {
            break;
        }
    }
    let mut ranges = append_batches(&store, "shared", "parent", CHILD_BATCHES);
    for line in lines {
        let line = line.unwrap();
        if let Some(rest) = after_marker(&line, "RANGE ") {
            let (start, end) = rest.trim().split_once(' ').unwrap();
            ranges.push((start.parse().unwrap(), end.parse().unwrap()));
        }
    }
    assert!(child.wait().unwrap().success());
    assert_eq!(ranges.len(), 2 * CHILD_BATCHES);
    assert_ranges_partition(ranges, 4 * CHILD_BATCHES as i64);
    drop(store);
    assert_interleaved_batches(&path, "shared", &["parent", "child"], CHILD_BATCHES);
}

#[test]
fn kill_9_mid_append_loses_no_committed_message_and_load_repairs() {
    let dir = TempDir::new("kill");
    let path = dir.db();
    {
        let store = Store::open(&path).unwrap();
        store.ensure_session("busy", "main").unwrap();
        store.ensure_session("pending", "main").unwrap();
    }
    let mut child = spawn_child("loop", &path);
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let mut committed: Vec<(i64, Message)> = Vec::new();
    let mut pending_seen = false;
    let record = |line: &str, committed: &mut Vec<(i64, Message)>| {
        if let Some(rest) = after_marker(line, "COMMITTED ") {
            let (seq, body) = rest.split_once(' ').unwrap();
            committed.push((seq.parse().unwrap(), serde_json::from_str(body).unwrap()));
        }
    };
    for line in lines.by_ref() {
        let line = line.unwrap();
        record(&line, &mut committed);
        pending_seen |= line.contains("PENDING");
        // Kill well after the pending turn, in the middle of the busy loop.
        if pending_seen && committed.len() >= 60 {
            break;
        }
    }
    assert!(pending_seen, "the child ended early");
    child.kill().unwrap(); // SIGKILL
    // Lines the child wrote before it died are still in the pipe.
    for line in lines {
        record(&line.unwrap(), &mut committed);
    }
    let status = child.wait().unwrap();
    assert!(!status.success());

    let store = Store::open(&path).unwrap();
    let busy = store.history("busy").unwrap();
    assert!(busy.len() >= committed.len());
    let reported: BTreeSet<i64> = committed.iter().map(|(seq, _)| *seq).collect();
    assert_eq!(reported.len(), committed.len(), "a seq was reported twice");
    for (seq, message) in &committed {
        assert_eq!(&busy[(*seq - 1) as usize], message, "seq {seq}");
    }
    assert_eq!(
        seqs(&path, "busy"),
        (1..=busy.len() as i64).collect::<Vec<_>>()
    );

    // The busy session may or may not have been cut between a turn and its
    // result; either way the loaded history is paired and keeps every message.
    let loaded = store.load_session("busy").unwrap();
    check_pairing(&loaded).unwrap();
    assert_eq!(&loaded[..busy.len()], &busy[..]);

    // The pending session certainly was: its calls never got results.
    let pending = store.load_session("pending").unwrap();
    check_pairing(&pending).unwrap();
    assert_eq!(
        pending,
        vec![
            Message::user("do two things"),
            assistant_calling(
                "on it",
                vec![
                    call("p1", "demo_sleep", json!({"ms": 60000})),
                    call("p2", "demo_echo", json!({"text": "later"})),
                ],
            ),
            cancelled("p1", "demo_sleep"),
            cancelled("p2", "demo_echo"),
        ]
    );
    drop(store);
    assert_eq!(
        Store::open(&path).unwrap().history("pending").unwrap(),
        pending
    );
}

#[test]
fn durability_is_full_by_default_and_normal_when_asked() {
    use homeagent_agent::store::Durability;
    let dir = TempDir::new("durability");
    let full = Store::open(&dir.0.join("full.db")).unwrap();
    assert_eq!(full.durability().unwrap(), Durability::Full);
    let normal = Store::open_with(&dir.0.join("normal.db"), Durability::Normal).unwrap();
    assert_eq!(normal.durability().unwrap(), Durability::Normal);
}

#[test]
fn the_config_store_sync_reaches_the_store_the_agent_opens() {
    use homeagent_agent::config::{Config, ConfigPaths};
    use homeagent_agent::store::Durability;
    use homeagent_agent::{BuildOptions, build};
    for (toml, expected) in [
        ("", Durability::Full),
        ("[store]\nsync = \"full\"\n", Durability::Full),
        ("[store]\nsync = \"normal\"\n", Durability::Normal),
    ] {
        let dir = TempDir::new("build-sync");
        let config = dir.0.join("homeagent.toml");
        std::fs::write(&config, toml).unwrap();
        let env = |_: &str| None;
        let paths = ConfigPaths::resolve(Some(config), Some(dir.0.join("data")), &env).unwrap();
        let loaded = Config::load(&paths, &env).unwrap();
        let agent = build(&loaded, &env, BuildOptions::default()).unwrap();
        assert_eq!(
            agent.runtime.store().durability().unwrap(),
            expected,
            "{toml:?}"
        );
    }
}

/// The store's path in `dir`, with its directory made and no file yet.
fn directory_without_store(dir: &TempDir) -> PathBuf {
    let path = dir.db();
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    path
}

/// Opens the store at `path` and reads a setting back through it.
fn opens_usable(path: &Path) -> Result<bool, StoreError> {
    Store::open(path).map(|store| store.durability().is_ok())
}

/// Handles opening one new file at the same moment (`serve` and `chat`
/// started together on a fresh data dir) all open it: switching the file
/// to WAL takes an exclusive lock that SQLite refuses at once, without
/// waiting, to all but one of several readers asking together.
#[test]
fn handles_opening_one_new_file_at_once_all_open_it() {
    let racers = 6;
    for round in 0..10 {
        let dir = TempDir::new(&format!("open-race-{round}"));
        let barrier = Arc::new(Barrier::new(racers));
        let handles: Vec<_> = (0..racers)
            .map(|_| {
                let (path, barrier) = (dir.db(), Arc::clone(&barrier));
                std::thread::spawn(move || {
                    barrier.wait();
                    opens_usable(&path)
                })
            })
            .collect();
        for handle in handles {
            let opened = handle.join().unwrap();
            assert!(matches!(opened, Ok(true)), "round {round}: {opened:?}");
        }
    }
}

/// The same, made certain: while another connection holds the write lock
/// of the new file, the switch to WAL is refused at once (the opening
/// connection already reads the file, so SQLite does not wait); the store
/// opens once the other commits.
#[test]
fn a_store_opens_while_another_connection_writes_its_new_file() {
    let dir = TempDir::new("open-busy");
    let path = directory_without_store(&dir);
    let writer = rusqlite::Connection::open(&path).unwrap();
    writer
        .execute_batch("BEGIN IMMEDIATE; CREATE TABLE elsewhere (x);")
        .unwrap();
    let opening = std::thread::spawn(move || opens_usable(&path));
    // Long enough for the open to meet the lock (were it later, it would
    // meet none, and pass without showing anything).
    std::thread::sleep(std::time::Duration::from_millis(300));
    writer.execute_batch("COMMIT").unwrap();
    let opened = opening.join().unwrap();
    assert!(matches!(opened, Ok(true)), "{opened:?}");
}

/// A file that is not a database is refused with SQLite's reason and
/// left as it was; only a lock is waited for.
#[test]
fn a_file_that_is_not_a_database_is_refused_and_kept() {
    let dir = TempDir::new("not-a-db");
    let path = directory_without_store(&dir);
    let text = "notes, not a database\n".repeat(200);
    std::fs::write(&path, &text).unwrap();
    let Err(err) = Store::open(&path) else {
        panic!("a text file must not open as the store");
    };
    assert!(
        matches!(
            &err,
            StoreError::Open { source: rusqlite::Error::SqliteFailure(e, _), .. }
                if e.code == rusqlite::ErrorCode::NotADatabase
        ),
        "{err:?}"
    );
    assert!(
        err.to_string().contains(&path.display().to_string()),
        "{err}"
    );
    assert_eq!(std::fs::read_to_string(&path).unwrap(), text);
}

/// Two first requests naming the same new session, each with the earlier
/// messages of its own client: one creates and seeds it, the other finds it
/// and writes nothing; the history holds one seed, never both.
#[test]
fn a_session_is_created_and_seeded_once_however_many_race_for_it() {
    let dir = TempDir::new("seed-race");
    let store = Arc::new(Store::open(&dir.db()).unwrap());
    let racers = 8;
    let barrier = Arc::new(Barrier::new(racers));
    let handles: Vec<_> = (0..racers)
        .map(|i| {
            let (store, barrier) = (Arc::clone(&store), Arc::clone(&barrier));
            std::thread::spawn(move || {
                barrier.wait();
                let seed = [
                    Message::user(format!("question {i}")),
                    Message::Assistant(AssistantMessage {
                        content: format!("answer {i}"),
                        ..AssistantMessage::default()
                    }),
                ];
                store
                    .create_seeded_session("shared", "main", &seed)
                    .unwrap()
            })
        })
        .collect();
    let created: usize = handles
        .into_iter()
        .map(|h| usize::from(h.join().unwrap()))
        .sum();
    assert_eq!(created, 1);
    let history = store.history("shared").unwrap();
    assert_eq!(history.len(), 2, "{history:#?}");
    let Message::User { content } = &history[0] else {
        panic!("{history:#?}")
    };
    let winner = content.strip_prefix("question ").unwrap();
    assert!(
        matches!(&history[1], Message::Assistant(a) if a.content == format!("answer {winner}")),
        "{history:#?}"
    );
    // Another agent's name is refused, and nothing is written.
    assert!(matches!(
        store.create_seeded_session("shared", "other", &[Message::user("x")]),
        Err(StoreError::AgentMismatch { .. })
    ));
    assert_eq!(store.history("shared").unwrap().len(), 2);
    // Naming a session that exists (every later request of a conversation)
    // is answered by a read: no write transaction, no fsync.
    let before = store.write_stats().writes;
    assert!(!store.create_seeded_session("shared", "main", &[]).unwrap());
    assert_eq!(store.write_stats().writes, before);
}

/// Opening a store whose schema is current takes no write lock: another
/// program holding one (a long write, `sqlite3` with BEGIN IMMEDIATE)
/// used to make every open wait for it once per migration step and then
/// fail with "cannot migrate ... from schema version 0 to 1".
#[test]
fn opening_a_current_store_waits_for_no_writer() {
    let dir = TempDir::new("open-locked");
    drop(Store::open(&dir.db()).unwrap());
    let holder = raw(&dir.db());
    holder.execute_batch("BEGIN IMMEDIATE").unwrap();
    let opened = Store::open(&dir.db());
    holder.execute_batch("ROLLBACK").unwrap();
    assert!(opened.is_ok(), "{:?}", opened.err());
}
