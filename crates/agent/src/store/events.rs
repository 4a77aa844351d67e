//! The tool-call event log: a start and an end event per call, next to the
//! history, for the dashboard and for post-mortems (which calls ran, for how
//! long, how they ended). The history stays the source of truth for what the
//! model saw; events add timing and status.
//!
//! Since schema 3 a batch's events are one row of `tool_event_batches` (a
//! JSON array, in emission order), written in the same transaction as the
//! batch's results: two indexed rows per call had been the largest part of
//! what a tool call cost the agent. Rows of the older one-per-event table
//! `tool_events` are still read, before the batch rows (they are older).
//!
//! Since schema 4 an element of a batch row is `{"event": <ToolEvent>,
//! "at_ms": ..}`: a record's columns (batch, call, tool, phase, status)
//! are all in the event, and storing them beside it again was 40 % of
//! every row. Elements of schema 3 (whole [`ToolEventRecord`]s) are still
//! read, and a record whose body is no kernel event is written that way.

use homeagent_core::{CallStatus, ToolEvent};
use rusqlite::{Connection, TransactionBehavior};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::{Store, StoreError, event_text, now_ms, require_session, validate_session_id};

/// Whether an event opens or closes a call.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum EventPhase {
    Start,
    End,
}

/// One stored tool event. `status`, `success` and `duration_ms` are set on
/// end events only; `body` is the whole event as JSON.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolEventRecord {
    pub batch_id: String,
    pub call_id: String,
    pub tool: String,
    pub phase: EventPhase,
    pub status: Option<CallStatus>,
    pub success: Option<bool>,
    pub duration_ms: Option<u64>,
    pub body: Value,
    /// Milliseconds since the Unix epoch.
    pub at_ms: i64,
}

impl ToolEventRecord {
    /// The record of a kernel event, stamped now.
    pub fn from_event(event: &ToolEvent) -> Self {
        Self::stamped(event, now_ms())
    }

    /// The record of a kernel event that happened at `at_ms`.
    fn stamped(event: &ToolEvent, at_ms: i64) -> Self {
        let stored = StoredEvent::of(event, at_ms);
        ToolEventRecord {
            batch_id: stored.batch_id.to_owned(),
            call_id: stored.call_id.to_owned(),
            tool: stored.tool.to_owned(),
            phase: stored.phase,
            status: stored.status,
            success: stored.success,
            duration_ms: stored.duration_ms,
            body: serde_json::to_value(event).unwrap_or(Value::Null),
            at_ms: stored.at_ms,
        }
    }
}

/// A tool event ready to insert: already rendered as the element of a
/// batch row's JSON array that [`ToolEventRecord`] reads back. The agent
/// makes one per kernel event while a batch runs and stores them with the
/// batch's results ([`Store::append_messages_with_events`]), so the commit,
/// which holds the connection, only joins texts. Rendering straight from
/// the event, in one pass, also skips the `Value` tree a record holds and
/// a second serialization of the event's ids and body.
#[derive(Debug, Clone)]
pub struct EventRow {
    text: String,
    /// Milliseconds since the Unix epoch.
    at_ms: i64,
}

impl EventRow {
    /// The length of the event's stored JSON.
    pub(super) fn json_bytes(&self) -> usize {
        self.text.len()
    }

    /// The row of a kernel event, stamped now.
    pub fn from_event(event: &ToolEvent) -> Self {
        EventRow::compact(event, now_ms())
    }

    /// The element of schema 4: the event and its time.
    fn compact(event: &ToolEvent, at_ms: i64) -> Self {
        // Written by hand ([`event_text`]), as serde would. Plain data
        // (strings, numbers, JSON values): serialising cannot fail; were it
        // ever to, the element keeps its columns and a null
        // body, and failing that it is empty and `insert_events` leaves it
        // out.
        let text = event_text::element(event, at_ms)
            .or_else(|| serde_json::to_string(&StoredEvent::of(event, at_ms).columns()).ok())
            .unwrap_or_default();
        EventRow { text, at_ms }
    }

    /// The element of schema 3: the whole record.
    fn whole<B: Serialize>(stored: &StoredEvent<'_, B>) -> Self {
        let text = serde_json::to_string(stored)
            .or_else(|_| serde_json::to_string(&stored.columns()))
            .unwrap_or_default();
        EventRow {
            text,
            at_ms: stored.at_ms,
        }
    }
}

impl From<&ToolEventRecord> for EventRow {
    /// Compact when the record is a kernel event's (it reads back the
    /// same), whole otherwise.
    fn from(record: &ToolEventRecord) -> Self {
        if let Ok(event) = ToolEvent::deserialize(&record.body)
            && ToolEventRecord::stamped(&event, record.at_ms) == *record
        {
            return EventRow::compact(&event, record.at_ms);
        }
        EventRow::whole(&StoredEvent {
            batch_id: &record.batch_id,
            call_id: &record.call_id,
            tool: &record.tool,
            phase: record.phase,
            status: record.status,
            success: record.success,
            duration_ms: record.duration_ms,
            body: &record.body,
            at_ms: record.at_ms,
        })
    }
}

impl Store {
    /// Appends one event to the session's log. The session must exist.
    ///
    /// One transaction, so one fsync: for the events of a whole batch use
    /// [`Store::record_tool_events`] or [`Store::append_messages_with_events`].
    pub fn record_tool_event(
        &self,
        session: &str,
        event: &ToolEventRecord,
    ) -> Result<(), StoreError> {
        self.record_tool_events(session, std::slice::from_ref(event))
    }

    /// Appends `events` to the session's log in one transaction: all are
    /// stored, in slice order, or none. The session must exist.
    pub fn record_tool_events(
        &self,
        session: &str,
        events: &[ToolEventRecord],
    ) -> Result<(), StoreError> {
        validate_session_id(session)?;
        let mut conn = self.lock();
        let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
        require_session(&tx, session)?;
        let rows: Vec<EventRow> = events.iter().map(EventRow::from).collect();
        insert_events(&tx, session, &rows)?;
        tx.commit()?;
        Ok(())
    }

    /// The session's events in the order they were recorded.
    pub fn tool_events(&self, session: &str) -> Result<Vec<ToolEventRecord>, StoreError> {
        validate_session_id(session)?;
        let conn = self.lock();
        require_session(&conn, session)?;
        // Rows from before schema 3 (one per event) are older than any
        // batch row, so they come first.
        let mut events = legacy_events(&conn, session)?;
        let mut stmt = conn.prepare_cached(
            "SELECT id, events FROM tool_event_batches WHERE session_id = ?1 ORDER BY id",
        )?;
        let rows = stmt.query_map([session], |row| {
            Ok((row.get::<_, i64>(0)?, row.get::<_, String>(1)?))
        })?;
        for row in rows {
            let (id, text) = row?;
            let batch: Vec<StoredElement> =
                serde_json::from_str(&text).map_err(|source| StoreError::Corrupt {
                    session: session.to_owned(),
                    what: "tool event batch",
                    row: id,
                    source,
                })?;
            events.extend(batch.into_iter().map(|element| match element {
                StoredElement::Compact { event, at_ms } => ToolEventRecord::stamped(&event, at_ms),
                StoredElement::Whole(record) => record,
            }));
        }
        Ok(events)
    }
}

/// The session's events in the one-row-per-event table of schema 2.
fn legacy_events(conn: &Connection, session: &str) -> Result<Vec<ToolEventRecord>, StoreError> {
    let mut stmt = conn.prepare_cached(
        "SELECT id, batch_id, call_id, tool, phase, status, success, duration_ms, body, at
         FROM tool_events WHERE session_id = ?1 ORDER BY id",
    )?;
    struct Raw {
        id: i64,
        batch_id: String,
        call_id: String,
        tool: String,
        phase: String,
        status: Option<String>,
        success: Option<bool>,
        duration_ms: Option<i64>,
        body: String,
        at_ms: i64,
    }
    let rows = stmt.query_map([session], |row| {
        Ok(Raw {
            id: row.get(0)?,
            batch_id: row.get(1)?,
            call_id: row.get(2)?,
            tool: row.get(3)?,
            phase: row.get(4)?,
            status: row.get(5)?,
            success: row.get(6)?,
            duration_ms: row.get(7)?,
            body: row.get(8)?,
            at_ms: row.get(9)?,
        })
    })?;
    let mut events = Vec::new();
    for raw in rows {
        let raw = raw?;
        let corrupt = |source| StoreError::Corrupt {
            session: session.to_owned(),
            what: "tool event",
            row: raw.id,
            source,
        };
        let phase = serde_json::from_value(Value::String(raw.phase)).map_err(corrupt)?;
        let status = raw
            .status
            .map(|s| serde_json::from_value(Value::String(s)))
            .transpose()
            .map_err(corrupt)?;
        events.push(ToolEventRecord {
            batch_id: raw.batch_id,
            call_id: raw.call_id,
            tool: raw.tool,
            phase,
            status,
            success: raw.success,
            duration_ms: raw.duration_ms.map(|d| u64::try_from(d).unwrap_or(0)),
            body: serde_json::from_str(&raw.body).map_err(corrupt)?,
            at_ms: raw.at_ms,
        });
    }
    Ok(events)
}

/// An element of a batch row as read: schema 4's, or schema 3's whole
/// record (which has no `event` member).
#[derive(Deserialize)]
#[serde(untagged)]
enum StoredElement {
    Compact { event: ToolEvent, at_ms: i64 },
    Whole(ToolEventRecord),
}

/// One stored event as schema 3 wrote it into a batch row: the fields of
/// [`ToolEventRecord`], the whole event as the body.
#[derive(Serialize)]
struct StoredEvent<'a, B> {
    batch_id: &'a str,
    call_id: &'a str,
    tool: &'a str,
    phase: EventPhase,
    status: Option<CallStatus>,
    success: Option<bool>,
    duration_ms: Option<u64>,
    body: &'a B,
    at_ms: i64,
}

impl<'a> StoredEvent<'a, ToolEvent> {
    /// The columns of a kernel event, and the event as its body.
    fn of(event: &'a ToolEvent, at_ms: i64) -> Self {
        let (batch_id, call_id, tool, phase, status, success, duration_ms) = match event {
            ToolEvent::Start {
                call_id,
                tool,
                batch_id,
                ..
            } => (batch_id, call_id, tool, EventPhase::Start, None, None, None),
            ToolEvent::End {
                call_id,
                tool,
                batch_id,
                status,
                success,
                duration_ms,
                ..
            } => (
                batch_id,
                call_id,
                tool,
                EventPhase::End,
                Some(*status),
                Some(*success),
                Some(*duration_ms),
            ),
        };
        StoredEvent {
            batch_id,
            call_id,
            tool,
            phase,
            status,
            success,
            duration_ms,
            body: event,
            at_ms,
        }
    }
}

impl<'a, B> StoredEvent<'a, B> {
    /// The columns, with a null body.
    fn columns(&self) -> StoredEvent<'a, ()> {
        StoredEvent {
            batch_id: self.batch_id,
            call_id: self.call_id,
            tool: self.tool,
            phase: self.phase,
            status: self.status,
            success: self.success,
            duration_ms: self.duration_ms,
            body: &(),
            at_ms: self.at_ms,
        }
    }
}

/// Stores `events` as one batch row, in slice order (nothing for an empty
/// slice); the caller holds the transaction.
pub(super) fn insert_events(
    conn: &Connection,
    session: &str,
    events: &[EventRow],
) -> Result<(), StoreError> {
    let Some(last) = events.last() else {
        return Ok(());
    };
    let length: usize = events.iter().map(|e| e.text.len() + 1).sum();
    let mut text = String::with_capacity(length + 1);
    text.push('[');
    // An event that could not be rendered at all (see `EventRow::render`)
    // is left out: an empty element would make the whole row unreadable.
    for (i, event) in events.iter().filter(|e| !e.text.is_empty()).enumerate() {
        if i > 0 {
            text.push(',');
        }
        text.push_str(&event.text);
    }
    text.push(']');
    conn.prepare_cached(
        "INSERT INTO tool_event_batches (session_id, events, at) VALUES (?1, ?2, ?3)",
    )?
    .execute(rusqlite::params![session, text, last.at_ms])?;
    Ok(())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)] // a panic in a test is a test failure

    use super::*;
    use homeagent_core::Message;

    /// An event rendered as nothing (which serde should never cause) is
    /// left out of its batch row; the others stay readable.
    #[test]
    fn an_unrendered_event_does_not_spoil_its_batch() {
        let dir = std::env::temp_dir().join(format!(
            "homeagent-events-{}-{:?}",
            std::process::id(),
            std::time::SystemTime::now()
        ));
        let store = Store::open(&dir.join("store.db")).unwrap();
        store.ensure_session("s", "main").unwrap();
        let event = |call: &str| {
            EventRow::from_event(&ToolEvent::Start {
                call_id: call.into(),
                tool: "demo_echo".into(),
                args: serde_json::json!({}),
                batch_id: "b".into(),
                batch_size: 2,
                parallel: true,
            })
        };
        let empty = EventRow {
            text: String::new(),
            at_ms: 0,
        };
        store
            .append_messages_with_events(
                "s",
                &[Message::user("hi")],
                &[event("a"), empty, event("b")],
            )
            .unwrap();
        let calls: Vec<String> = store
            .tool_events("s")
            .unwrap()
            .into_iter()
            .map(|e| e.call_id)
            .collect();
        assert_eq!(calls, ["a", "b"]);
        drop(store);
        let _ = std::fs::remove_dir_all(dir);
    }
}
