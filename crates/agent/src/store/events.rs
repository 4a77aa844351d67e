//! The tool-call event log: a start and an end row per call, next to the
//! history, for the dashboard and for post-mortems (which calls ran, for how
//! long, how they ended). The history stays the source of truth for what the
//! model saw; events add timing and status.

use homeagent_core::{CallStatus, ToolEvent};
use rusqlite::TransactionBehavior;
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
        let body = serde_json::to_value(event).unwrap_or(Value::Null);
        let at_ms = now_ms();
        match event {
            ToolEvent::Start {
                call_id,
                tool,
                batch_id,
                ..
            } => ToolEventRecord {
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
            } => ToolEventRecord {
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
    pub fn record_tool_event(
        &self,
        session: &str,
        event: &ToolEventRecord,
    ) -> Result<(), StoreError> {
        validate_session_id(session)?;
        let mut conn = self.lock();
        let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
        require_session(&tx, session)?;
        // `Value`'s Display is its compact JSON.
        let body = event.body.to_string();
        tx.execute(
            "INSERT INTO tool_events
                (session_id, batch_id, call_id, tool, phase, status, success, duration_ms, body, at)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10)",
            rusqlite::params![
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
                body,
                event.at_ms,
            ],
        )?;
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
