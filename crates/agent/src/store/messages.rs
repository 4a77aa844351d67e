//! The message history of a session: an append-only, gap-free sequence.

use std::ops::RangeInclusive;

use homeagent_core::Message;
use rusqlite::{Connection, TransactionBehavior};

use super::events::{EventRow, insert_events};
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
        validate_session_id(session)?;
        let mut conn = self.lock();
        let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
        require_session(&tx, session)?;
        let first = max_seq(&tx, session)? + 1;
        insert_messages(&tx, session, first, messages)?;
        tx.execute(
            "UPDATE sessions SET updated_at = ?2 WHERE id = ?1",
            rusqlite::params![session, now_ms()],
        )?;
        tx.commit()?;
        // `first..=first - 1` is empty, so "nothing appended" needs no special type.
        Ok(first..=first + messages.len() as i64 - 1)
    }

    /// Appends `messages` and `events` to the session in one transaction:
    /// everything is stored or nothing, with one commit (one fsync) for
    /// all of it. The agent writes a batch's results and the tool events
    /// recorded while it ran this way, instead of a commit per event.
    /// Returns the `seq` range of the messages, as
    /// [`Store::append_messages`] does.
    pub fn append_messages_with_events(
        &self,
        session: &str,
        messages: &[Message],
        events: &[EventRow],
    ) -> Result<RangeInclusive<i64>, StoreError> {
        validate_session_id(session)?;
        let mut conn = self.lock();
        let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
        require_session(&tx, session)?;
        let first = max_seq(&tx, session)? + 1;
        insert_messages(&tx, session, first, messages)?;
        insert_events(&tx, session, events)?;
        tx.execute(
            "UPDATE sessions SET updated_at = ?2 WHERE id = ?1",
            rusqlite::params![session, now_ms()],
        )?;
        tx.commit()?;
        Ok(first..=first + messages.len() as i64 - 1)
    }

    /// The session's messages in order, exactly as stored (no repair; see
    /// [`Store::load_session`] for the history to send to a model).
    pub fn history(&self, session: &str) -> Result<Vec<Message>, StoreError> {
        validate_session_id(session)?;
        let conn = self.lock();
        require_session(&conn, session)?;
        Ok(read_history(&conn, session)?
            .into_iter()
            .map(|(_, message)| message)
            .collect())
    }
}

/// The highest `seq` of the session, 0 when it has no messages.
pub(super) fn max_seq(conn: &Connection, session: &str) -> Result<i64, StoreError> {
    Ok(conn.query_row(
        "SELECT COALESCE(MAX(seq), 0) FROM messages WHERE session_id = ?1",
        [session],
        |row| row.get(0),
    )?)
}

/// Inserts `messages` at `first`, `first + 1`, …; the caller holds the
/// transaction.
pub(super) fn insert_messages(
    conn: &Connection,
    session: &str,
    first: i64,
    messages: &[Message],
) -> Result<(), StoreError> {
    let mut stmt = conn.prepare(
        "INSERT INTO messages (session_id, seq, role, body, created_at)
         VALUES (?1, ?2, ?3, ?4, ?5)",
    )?;
    let now = now_ms();
    for (seq, message) in (first..).zip(messages) {
        let body = serde_json::to_string(message).map_err(|source| StoreError::Corrupt {
            session: session.to_owned(),
            what: "message",
            row: seq,
            source,
        })?;
        stmt.execute(rusqlite::params![session, seq, message.role(), body, now])?;
    }
    Ok(())
}

/// Every message of the session with its `seq`, in order.
pub(super) fn read_history(
    conn: &Connection,
    session: &str,
) -> Result<Vec<(i64, Message)>, StoreError> {
    let mut stmt =
        conn.prepare("SELECT seq, body FROM messages WHERE session_id = ?1 ORDER BY seq")?;
    let rows = stmt.query_map([session], |row| {
        Ok((row.get::<_, i64>(0)?, row.get::<_, String>(1)?))
    })?;
    let mut history = Vec::new();
    for row in rows {
        let (seq, body) = row?;
        let message = serde_json::from_str(&body).map_err(|source| StoreError::Corrupt {
            session: session.to_owned(),
            what: "message",
            row: seq,
            source,
        })?;
        history.push((seq, message));
    }
    Ok(history)
}
