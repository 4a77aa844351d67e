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

use homeagent_core::{CallStatus, ToolEvent};
use rusqlite::{Connection, TransactionBehavior};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use serde_json::value::RawValue;

use super::{Store, StoreError, now_ms, require_session, validate_session_id};

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
        let row = EventRow::from_event(event);
        ToolEventRecord {
            batch_id: row.batch_id,
            call_id: row.call_id,
            tool: row.tool,
            phase: row.phase,
            status: row.status,
            success: row.success,
            duration_ms: row.duration_ms,
            body: serde_json::to_value(event).unwrap_or(Value::Null),
            at_ms: row.at_ms,
        }
    }
}

/// A tool event ready to insert: its columns, with the body already
/// rendered as JSON text. The agent makes one per kernel event while a
/// batch runs and stores them with the batch's results
/// ([`Store::append_messages_with_events`]); rendering straight from the
/// event skips building and dropping the `Value` tree a
/// [`ToolEventRecord`] holds (about a third of the instructions spent on
/// each event under callgrind).
#[derive(Debug, Clone)]
pub struct EventRow {
    pub batch_id: String,
    pub call_id: String,
    pub tool: String,
    pub phase: EventPhase,
    pub status: Option<CallStatus>,
    pub success: Option<bool>,
    pub duration_ms: Option<u64>,
    /// The whole event as compact JSON, as [`ToolEventRecord::body`] reads
    /// it back; a `RawValue`, so storing it copies the text without parsing
    /// it again.
    pub body: Box<RawValue>,
    /// Milliseconds since the Unix epoch.
    pub at_ms: i64,
}

impl EventRow {
    /// The row of a kernel event, stamped now.
    pub fn from_event(event: &ToolEvent) -> Self {
        // A `ToolEvent` is plain data (strings, numbers, a JSON object), so
        // serialising it cannot fail; `null` keeps the row if it ever did.
        let body = serde_json::value::to_raw_value(event).unwrap_or_else(|_| null_body());
        let at_ms = now_ms();
        match event {
            ToolEvent::Start {
                call_id,
                tool,
                batch_id,
                ..
            } => EventRow {
                batch_id: batch_id.clone(),
                call_id: call_id.clone(),
                tool: tool.clone(),
                phase: EventPhase::Start,
                status: None,
                success: None,
                duration_ms: None,
                body,
                at_ms,
            },
            ToolEvent::End {
                call_id,
                tool,
                batch_id,
                status,
                success,
                duration_ms,
                ..
            } => EventRow {
                batch_id: batch_id.clone(),
                call_id: call_id.clone(),
                tool: tool.clone(),
                phase: EventPhase::End,
                status: Some(*status),
                success: Some(*success),
                duration_ms: Some(*duration_ms),
                body,
                at_ms,
            },
        }
    }
}

impl From<&ToolEventRecord> for EventRow {
    fn from(record: &ToolEventRecord) -> Self {
        EventRow {
            batch_id: record.batch_id.clone(),
            call_id: record.call_id.clone(),
            tool: record.tool.clone(),
            phase: record.phase,
            status: record.status,
            success: record.success,
            duration_ms: record.duration_ms,
            // `Value`'s Display is its compact JSON.
            body: serde_json::value::to_raw_value(&record.body).unwrap_or_else(|_| null_body()),
            at_ms: record.at_ms,
        }
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
            let batch: Vec<ToolEventRecord> =
                serde_json::from_str(&text).map_err(|source| StoreError::Corrupt {
                    session: session.to_owned(),
                    what: "tool event batch",
                    row: id,
                    source,
                })?;
            events.extend(batch);
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

/// `null`, the body of an event that could not be rendered (a `ToolEvent`
/// is plain data, so this does not happen; the row is kept if it ever did).
fn null_body() -> Box<RawValue> {
    RawValue::NULL.to_owned()
}

/// One stored event as it is written into a batch row: the fields of
/// [`ToolEventRecord`], with the body copied in as the JSON text it already
/// is instead of being parsed into a `Value` and printed again.
#[derive(Serialize)]
struct StoredEvent<'a> {
    batch_id: &'a str,
    call_id: &'a str,
    tool: &'a str,
    phase: EventPhase,
    status: Option<CallStatus>,
    success: Option<bool>,
    duration_ms: Option<u64>,
    body: &'a RawValue,
    at_ms: i64,
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
    let stored: Vec<StoredEvent<'_>> = events
        .iter()
        .map(|event| StoredEvent {
            batch_id: &event.batch_id,
            call_id: &event.call_id,
            tool: &event.tool,
            phase: event.phase,
            status: event.status,
            success: event.success,
            duration_ms: event.duration_ms,
            body: &event.body,
            at_ms: event.at_ms,
        })
        .collect();
    let text = serde_json::to_string(&stored).map_err(|source| StoreError::Corrupt {
        session: session.to_owned(),
        what: "tool event batch",
        row: 0,
        source,
    })?;
    conn.prepare_cached(
        "INSERT INTO tool_event_batches (session_id, events, at) VALUES (?1, ?2, ?3)",
    )?
    .execute(rusqlite::params![session, text, last.at_ms])?;
    Ok(())
}
