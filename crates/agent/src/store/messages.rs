//! The message history of a session: an append-only, gap-free sequence.

use std::ops::RangeInclusive;
use std::sync::atomic::Ordering;

use homeagent_core::Message;
use homeagent_core::json_text::push_message;
use rusqlite::Connection;

use super::events::EventRow;
use super::group::{EventsRule, WriteDone, WriteOp};
use super::history_cache::SeqHistory;
use super::sessions::validate_agent_name;
use super::{Store, StoreError, now_ms, require_session, validate_session_id};

impl Store {
    /// Appends `messages` to the session in one transaction: either all are
    /// stored or none. Their `seq` numbers continue from the session's
    /// highest (the first message of a session is 1), and the range assigned
    /// is returned; an empty slice stores nothing and returns an empty range.
    ///
    /// The session must exist ([`Store::ensure_session`]).
    pub fn append_messages(
        &self,
        session: &str,
        messages: &[Message],
    ) -> Result<RangeInclusive<i64>, StoreError> {
        self.append_messages_with_events(session, messages, &[])
    }

    /// Appends `messages` and `events` to the session in one transaction:
    /// everything is stored or nothing, and it is on disk when this returns
    /// (it may share its commit, and its fsync, with other writers: see
    /// `group.rs`). The agent writes a batch's results and the tool events
    /// recorded while it ran this way, instead of a commit per event.
    /// Returns the `seq` range of the messages, as
    /// [`Store::append_messages`] does.
    pub fn append_messages_with_events(
        &self,
        session: &str,
        messages: &[Message],
        events: &[EventRow],
    ) -> Result<RangeInclusive<i64>, StoreError> {
        appended(self.submit(append_op(session, messages, events.to_vec())?)?)
    }

    /// The session's messages in order, exactly as stored (no repair; see
    /// [`Store::load_session`] for the history to send to a model).
    pub fn history(&self, session: &str) -> Result<Vec<Message>, StoreError> {
        validate_session_id(session)?;
        let conn = self.lock();
        require_session(&conn, session)?;
        Ok(self
            .read_history(&conn, session)?
            .into_iter()
            .map(|(_, message)| message)
            .collect())
    }

    /// What reading histories has cost this handle so far.
    pub fn read_stats(&self) -> ReadStats {
        ReadStats {
            messages_parsed: self.messages_parsed.load(Ordering::Relaxed),
            messages_counted: self.messages_counted.load(Ordering::Relaxed),
            messages_checked: self.messages_checked.load(Ordering::Relaxed),
            sessions_checked: self.sessions_checked.load(Ordering::Relaxed),
        }
    }

    /// Records `n` messages scanned by a load's checks.
    pub(super) fn count_checked(&self, n: usize) {
        self.messages_checked.fetch_add(n as u64, Ordering::Relaxed);
    }

    /// Records `n` token estimates made by a load.
    pub(super) fn count_tokens(&self, n: usize) {
        self.messages_counted.fetch_add(n as u64, Ordering::Relaxed);
    }

    /// Every message of the session with its `seq`, in order.
    pub(super) fn read_history(
        &self,
        conn: &Connection,
        session: &str,
    ) -> Result<SeqHistory, StoreError> {
        let mut history = Vec::new();
        self.read_history_after(conn, session, 0, &mut history)?;
        Ok(history)
    }

    /// Appends the session's messages numbered above `after` to `history`,
    /// in order; returns the bytes they were stored as.
    pub(super) fn read_history_after(
        &self,
        conn: &Connection,
        session: &str,
        after: i64,
        history: &mut SeqHistory,
    ) -> Result<usize, StoreError> {
        let mut stmt = conn.prepare_cached(READ_HISTORY_SQL)?;
        let mut rows = stmt.query(rusqlite::params![session, after])?;
        let mut bytes = 0;
        let mut parsed = 0;
        // The number of the row read before, whose messages a row may not
        // reach back to.
        let mut previous: Option<i64> = None;
        while let Some(row) = rows.next()? {
            let seq: i64 = row.get(0)?;
            // Borrowed from SQLite's row: the text is parsed, never kept.
            let body = row.get_ref(1)?.as_str().map_err(|e| {
                rusqlite::Error::FromSqlConversionFailure(
                    1,
                    rusqlite::types::Type::Text,
                    Box::new(e),
                )
            })?;
            let corrupt = |source| StoreError::Corrupt {
                session: session.to_owned(),
                what: "message",
                row: seq,
                source,
            };
            bytes += body.len();
            if body.starts_with('[') {
                // A write's messages, numbered up to `seq` (see `insert_rows`).
                let messages: Vec<Message> = serde_json::from_str(body).map_err(corrupt)?;
                if messages.is_empty() {
                    return Err(corrupt(serde::de::Error::custom(
                        "a row of messages holds none",
                    )));
                }
                let first = seq - (messages.len() as i64 - 1);
                if let Some(before) = previous.filter(|before| first <= *before) {
                    return Err(corrupt(serde::de::Error::custom(format!(
                        "its {} messages, numbered up to {seq}, overlap the row numbered {before}",
                        messages.len()
                    ))));
                }
                parsed += messages.len() as u64;
                history.extend((first..).zip(messages).filter(|(at, _)| *at > after));
            } else {
                history.push((seq, serde_json::from_str(body).map_err(corrupt)?));
                parsed += 1;
            }
            previous = Some(seq);
        }
        self.messages_parsed.fetch_add(parsed, Ordering::Relaxed);
        Ok(bytes)
    }
}

/// What reading histories has cost a [`Store`] handle: the cache of parsed
/// histories (see [`Store::load_session`]) shows here.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ReadStats {
    /// Stored messages parsed since the handle was opened.
    pub messages_parsed: u64,
    /// Token estimates made by [`Store::load_counted`] (and
    /// [`Store::load_session`]) since the handle was opened.
    pub messages_counted: u64,
    /// Messages loads scanned for calls left unanswered and for broken
    /// pairing since the handle was opened.
    pub messages_checked: u64,
    /// Sessions whose agent was read to check it, by
    /// [`Store::check_session_agent`] or by an input's load, since the
    /// handle was opened.
    pub sessions_checked: u64,
}

/// The highest `seq` of the session, 0 when it has no messages.
pub(super) const MAX_SEQ_SQL: &str =
    "SELECT COALESCE(MAX(seq), 0) FROM messages WHERE session_id = ?1";

pub(super) fn max_seq(conn: &Connection, session: &str) -> Result<i64, StoreError> {
    Ok(conn
        .prepare_cached(MAX_SEQ_SQL)?
        .query_row([session], |row| row.get(0))?)
}

/// A message ready to insert: its role and its JSON body, rendered before
/// the write waits for the connection.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct MessageRow {
    role: &'static str,
    body: String,
}

impl MessageRow {
    pub(super) fn json_bytes(&self) -> usize {
        self.body.len()
    }
}

/// The write that appends `messages` and `events` to `session`.
pub(super) fn append_op(
    session: &str,
    messages: &[Message],
    events: Vec<EventRow>,
) -> Result<WriteOp, StoreError> {
    validate_session_id(session)?;
    let rows = encode_messages(messages);
    Ok(WriteOp::Append {
        session: session.to_owned(),
        create_for: None,
        remember: remembered_as_written(messages, &rows),
        rows,
        events,
        events_rule: EventsRule::WithMessages,
        claim: None,
    })
}

/// `messages` as the history cache may remember them once they commit
/// (see `HistoryCache::extend_committed`), or `None` when one of them
/// would read back different from its row: the next load reads the write
/// then, as it reads another connection's.
///
/// The one such message is reasoning metadata that is `null`: it is
/// written as `null` and read as none. Numbers read back as written
/// (serde_json's `float_roundtrip`, asked for by the workspace). Debug
/// builds check every message remembered against its row.
fn remembered_as_written(messages: &[Message], rows: &[MessageRow]) -> Option<Vec<Message>> {
    let lossy = |message: &Message| match message {
        Message::Assistant(turn) => turn.reasoning.iter().any(|part| {
            part.metadata
                .as_ref()
                .is_some_and(serde_json::Value::is_null)
        }),
        _ => false,
    };
    if messages.iter().any(lossy) {
        return None;
    }
    #[cfg(debug_assertions)]
    for (message, row) in messages.iter().zip(rows) {
        let read_back: Result<Message, _> = serde_json::from_str(&row.body);
        assert!(
            read_back.as_ref().is_ok_and(|read| read == message),
            "a message the history cache would remember reads back different from its row:\n\
             written {message:?}\nread    {read_back:?}"
        );
    }
    #[cfg(not(debug_assertions))]
    let _ = rows;
    Some(messages.to_vec())
}

/// The length of the text `insert_rows` stores for `rows`, as
/// `Store::read_history_after` counts it.
pub(super) fn stored_len(rows: &[MessageRow]) -> usize {
    match rows {
        [only] => only.body.len(),
        rows => rows.iter().map(|row| row.body.len() + 1).sum::<usize>() + 1,
    }
}

/// The write that appends a tool batch's `results` to `session` with its
/// `events`, or without them if SQLite refuses them.
pub(super) fn results_op(
    session: &str,
    results: &[Message],
    events: Vec<EventRow>,
) -> Result<WriteOp, StoreError> {
    let mut op = append_op(session, results, events)?;
    if let WriteOp::Append { events_rule, .. } = &mut op {
        *events_rule = EventsRule::IfStorable;
    }
    Ok(op)
}

/// The write that appends `messages` to `session`, creating the session
/// for `agent` first if it does not exist.
pub(super) fn append_creating_op(
    session: &str,
    agent: &str,
    messages: &[Message],
) -> Result<WriteOp, StoreError> {
    validate_agent_name(agent)?;
    let mut op = append_op(session, messages, Vec::new())?;
    if let WriteOp::Append { create_for, .. } = &mut op {
        *create_for = Some(agent.to_owned());
    }
    Ok(op)
}

/// The range an append's answer carries.
pub(super) fn appended(done: WriteDone) -> Result<RangeInclusive<i64>, StoreError> {
    match done {
        WriteDone::Appended(range) => Ok(range),
        WriteDone::Session(_) | WriteDone::Created(_) => Err(StoreError::WriteNotApplied),
    }
}

/// The rows' texts of `messages`, written by hand as serde would
/// ([`push_message`]).
pub(super) fn encode_messages(messages: &[Message]) -> Vec<MessageRow> {
    messages
        .iter()
        .map(|message| {
            let mut body = String::with_capacity(128);
            push_message(&mut body, message);
            MessageRow {
                role: message.role(),
                body,
            }
        })
        .collect()
}

/// Inserts `messages` at `first`, `first + 1`, …; the caller holds the
/// transaction.
pub(super) fn insert_messages(
    conn: &Connection,
    session: &str,
    first: i64,
    messages: &[Message],
) -> Result<(), StoreError> {
    insert_rows(conn, session, first, &encode_messages(messages))
}

/// Inserts `rows` as the messages numbered `first`, `first + 1`, …; the
/// caller holds the transaction.
///
/// The messages of one write are one row (schema 5): a JSON array of them,
/// numbered by the last one, whose role the row's `role` column gives. A
/// row per message was most of what storing a write cost SQLite (~10 k of
/// a call's ~104 k instructions for the results of a batch of 64 calls; 3
/// of the 4 rows of a quick input with one call), as a row per event was
/// before events were stored a batch per row. The messages keep their
/// numbers: the next message is numbered after the whole row, and
/// [`Store::read_history_after`] gives them back one by one. A lone
/// message is a row of its own, as before.
pub(super) fn insert_rows(
    conn: &Connection,
    session: &str,
    first: i64,
    rows: &[MessageRow],
) -> Result<(), StoreError> {
    let Some(last) = rows.last() else {
        return Ok(());
    };
    let mut stmt = conn.prepare_cached(
        "INSERT INTO messages (session_id, seq, role, body, created_at)
         VALUES (?1, ?2, ?3, ?4, ?5)",
    )?;
    let seq = first + rows.len() as i64 - 1;
    let now = now_ms();
    if let [only] = rows {
        stmt.execute(rusqlite::params![session, seq, only.role, only.body, now])?;
        return Ok(());
    }
    let mut joined =
        String::with_capacity(rows.iter().map(|r| r.body.len() + 1).sum::<usize>() + 1);
    for (i, row) in rows.iter().enumerate() {
        joined.push(if i == 0 { '[' } else { ',' });
        joined.push_str(&row.body);
    }
    joined.push(']');
    stmt.execute(rusqlite::params![session, seq, last.role, joined, now])?;
    Ok(())
}

/// The session's messages numbered above `?2`, in order.
pub(super) const READ_HISTORY_SQL: &str =
    "SELECT seq, body FROM messages WHERE session_id = ?1 AND seq > ?2 ORDER BY seq";

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use homeagent_core::ToolMessage;

    use super::*;
    use crate::store::testing::temp_store;

    fn result(id: &str) -> Message {
        Message::Tool(ToolMessage {
            tool_call_id: id.into(),
            name: "demo_echo".into(),
            content: id.into(),
            success: true,
        })
    }

    /// `error` says the message row numbered `row` is corrupt, and `says`.
    fn assert_corrupt_row(error: &StoreError, row: i64, says: &str) {
        assert!(
            matches!(error, StoreError::Corrupt { row: r, what: "message", .. } if *r == row),
            "{error:?}"
        );
        assert!(error.to_string().contains(says), "{error}");
    }

    /// The messages of a row are numbered up to the row's own number, and
    /// a read from inside the row gives only those after.
    #[test]
    fn a_row_of_messages_is_read_back_numbered_message_by_message() {
        let temp = temp_store("result-row-numbers");
        temp.store.ensure_session("s", "main").unwrap();
        let messages = [
            Message::user("u"),
            result("a"),
            result("b"),
            result("c"),
            Message::user("v"),
        ];
        temp.store.append_messages("s", &messages).unwrap();
        let conn = temp.store.lock();
        let numbered = |after: i64| {
            let mut history = Vec::new();
            temp.store
                .read_history_after(&conn, "s", after, &mut history)
                .unwrap();
            history
        };
        let all: Vec<(i64, Message)> = (1..).zip(messages.iter().cloned()).collect();
        assert_eq!(numbered(0), all);
        // One row, five messages parsed.
        assert_eq!(temp.store.read_stats().messages_parsed, 5);
        assert_eq!(numbered(2), all[2..]);
        assert_eq!(numbered(4), all[4..]);
    }

    /// A row holding more messages than its number leaves room for after
    /// the row before it (an edited file) is refused as corrupt, naming it:
    /// two messages would share a number.
    #[test]
    fn a_row_that_overlaps_the_one_before_is_corrupt() {
        let temp = temp_store("row-overlap");
        temp.store.ensure_session("s", "main").unwrap();
        let conn = temp.store.lock();
        conn.execute_batch(
            r#"INSERT INTO messages (session_id, seq, role, body, created_at)
               VALUES ('s', 1, 'user', '{"role":"user","content":"a"}', 0),
                      ('s', 2, 'user', '[{"role":"user","content":"b"},{"role":"user","content":"c"}]', 0);"#,
        )
        .unwrap();
        let error = temp
            .store
            .read_history_after(&conn, "s", 0, &mut Vec::new())
            .unwrap_err();
        assert_corrupt_row(&error, 2, "overlap the row numbered 1");
        // Read from inside it, the row is the first one read: nothing before
        // it to overlap.
        let mut history = Vec::new();
        temp.store
            .read_history_after(&conn, "s", 1, &mut history)
            .unwrap();
        assert_eq!(history, [(2, Message::user("c"))]);
    }

    /// A row of messages that holds none is refused as corrupt, naming it.
    #[test]
    fn an_empty_row_of_messages_is_corrupt() {
        let temp = temp_store("result-row-empty");
        temp.store.ensure_session("s", "main").unwrap();
        let conn = temp.store.lock();
        conn.execute(
            "INSERT INTO messages (session_id, seq, role, body, created_at)
             VALUES ('s', 1, 'tool', '[]', 0)",
            [],
        )
        .unwrap();
        let error = temp
            .store
            .read_history_after(&conn, "s", 0, &mut Vec::new())
            .unwrap_err();
        assert_corrupt_row(&error, 1, "holds none");
    }
}
