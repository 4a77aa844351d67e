//! The tool-call event log: a start and an end row per call, next to the
//! history, for the dashboard and for post-mortems (which calls ran, for how
//! long, how they ended). The history stays the source of truth for what the
//! model saw; events add timing and status.

use homeagent_core::{CallStatus, ToolEvent};
use rusqlite::{Connection, TransactionBehavior};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::{Store, StoreError, now_ms, require_session, validate_session_id};

/// Whether an event opens or closes a call.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum EventPhase {
    Start,
    End,
}

impl EventPhase {
    fn as_str(self) -> &'static str {
        match self {
            EventPhase::Start => "start",
            EventPhase::End => "end",
        }
    }
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
#[derive(Debug, Clone, PartialEq)]
pub struct EventRow {
    pub batch_id: String,
    pub call_id: String,
    pub tool: String,
    pub phase: EventPhase,
    pub status: Option<CallStatus>,
    pub success: Option<bool>,
    pub duration_ms: Option<u64>,
    /// The whole event as compact JSON, as [`ToolEventRecord::body`] reads
    /// it back.
    pub body_json: String,
    /// Milliseconds since the Unix epoch.
    pub at_ms: i64,
}

impl EventRow {
    /// The row of a kernel event, stamped now.
    pub fn from_event(event: &ToolEvent) -> Self {
        // A `ToolEvent` is plain data (strings, numbers, a JSON object), so
        // serialising it cannot fail; `null` keeps the row if it ever did.
        let body_json = serde_json::to_string(event).unwrap_or_else(|_| "null".to_owned());
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
                body_json,
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
                body_json,
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
            body_json: record.body.to_string(),
            at_ms: record.at_ms,
        }
    }
}

/// `CallStatus` as its serde name (`ok`, `cancelled`, …), so the column reads
/// the same as the JSON events.
fn status_text(status: CallStatus) -> Option<String> {
    match serde_json::to_value(status) {
        Ok(Value::String(s)) => Some(s),
        _ => None,
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
        let mut stmt = conn.prepare(
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
}

/// Inserts `events` in slice order; the caller holds the transaction.
pub(super) fn insert_events(
    conn: &Connection,
    session: &str,
    events: &[EventRow],
) -> Result<(), StoreError> {
    // Parsed once per connection (the statement cache), not per batch or row.
    let mut stmt = conn.prepare_cached(
        "INSERT INTO tool_events
            (session_id, batch_id, call_id, tool, phase, status, success, duration_ms, body, at)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10)",
    )?;
    for event in events {
        stmt.execute(rusqlite::params![
            session,
            event.batch_id,
            event.call_id,
            event.tool,
            event.phase.as_str(),
            event.status.and_then(status_text),
            event.success,
            event
                .duration_ms
                .map(|d| i64::try_from(d).unwrap_or(i64::MAX)),
            event.body_json,
            event.at_ms,
        ])?;
    }
    Ok(())
}
