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
//!
//! Since schema 6 a row of kernel events is an object that names its
//! batch once, `{"batch_id", "batch_size", "parallel", "at_ms", "events":
//! [..]}`, each event keeping only its call, tool, outcome and its time
//! after the row's first (`event_text`): the batch's members in every
//! event were a third of every row. A write whose events come from
//! several batches stores a row per run of one batch; records that are no
//! kernel event are an array row of whole records, as in schema 3. Rows
//! of schemas 3 and 4 are still read.

use homeagent_core::{CallStatus, ToolError, ToolEvent};
use rusqlite::{Connection, TransactionBehavior};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::event_text::{self, BatchKey};
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
/// batch row that [`ToolEventRecord`] reads back. The agent makes one per
/// kernel event while a batch runs and stores them with the batch's
/// results ([`Store::append_messages_with_events`]), so the commit, which
/// holds the connection, only joins texts. Rendering straight from the
/// event, in one pass, also skips the `Value` tree a record holds and a
/// second serialization of the event's ids and body.
#[derive(Debug, Clone)]
pub struct EventRow {
    /// With `batch`, the open element of a schema-6 row (`event_text`);
    /// without, a whole element of an array row (schema 3).
    text: String,
    batch: Option<BatchKey>,
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

    /// The element of schema 6: the event without its batch.
    fn compact(event: &ToolEvent, at_ms: i64) -> Self {
        // Written by hand ([`event_text`]). Plain data (strings, numbers,
        // JSON values): rendering cannot fail; were it ever to, the
        // element keeps its columns and a null body, and failing that it
        // is empty and `insert_events` leaves it out.
        match event_text::open_element(event) {
            Some(text) => EventRow {
                text,
                batch: Some(BatchKey::of(event)),
                at_ms,
            },
            None => EventRow {
                text: serde_json::to_string(&StoredEvent::of(event, at_ms).columns())
                    .unwrap_or_default(),
                batch: None,
                at_ms,
            },
        }
    }

    /// The element of schema 3: the whole record.
    fn whole<B: Serialize>(stored: &StoredEvent<'_, B>) -> Self {
        let text = serde_json::to_string(stored)
            .or_else(|_| serde_json::to_string(&stored.columns()))
            .unwrap_or_default();
        EventRow {
            text,
            batch: None,
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
            let corrupt = |source| StoreError::Corrupt {
                session: session.to_owned(),
                what: "tool event batch",
                row: id,
                source,
            };
            if text.trim_start().starts_with('{') {
                let batch: BatchRow = serde_json::from_str(&text).map_err(corrupt)?;
                events.extend(batch.records());
                continue;
            }
            let batch: Vec<StoredElement> = serde_json::from_str(&text).map_err(corrupt)?;
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

/// A batch row of schema 6, as read (see the module docs).
#[derive(Deserialize)]
struct BatchRow {
    batch_id: String,
    batch_size: usize,
    parallel: bool,
    /// The first event's time; the others' are `after_ms` from it.
    at_ms: i64,
    events: Vec<BatchEvent>,
}

/// An event of a schema-6 row: which member names the call says which
/// kind it is.
#[derive(Deserialize)]
#[serde(untagged)]
enum BatchEvent {
    Start {
        start: String,
        tool: String,
        args: Value,
        #[serde(default)]
        after_ms: i64,
    },
    End {
        end: String,
        tool: String,
        status: CallStatus,
        success: bool,
        duration_ms: u64,
        #[serde(default)]
        error: Option<ToolError>,
        #[serde(default)]
        warnings: Vec<String>,
        #[serde(default)]
        after_ms: i64,
    },
}

impl BatchRow {
    /// The row's events as records, in order.
    fn records(self) -> impl Iterator<Item = ToolEventRecord> {
        let BatchRow {
            batch_id,
            batch_size,
            parallel,
            at_ms,
            events,
        } = self;
        let batch_id: std::sync::Arc<str> = batch_id.into();
        events.into_iter().map(move |event| {
            let batch_id = std::sync::Arc::clone(&batch_id);
            let (event, after_ms) = match event {
                BatchEvent::Start {
                    start,
                    tool,
                    args,
                    after_ms,
                } => (
                    ToolEvent::Start {
                        call_id: start,
                        tool,
                        args,
                        batch_id,
                        batch_size,
                        parallel,
                    },
                    after_ms,
                ),
                BatchEvent::End {
                    end,
                    tool,
                    status,
                    success,
                    duration_ms,
                    error,
                    warnings,
                    after_ms,
                } => (
                    ToolEvent::End {
                        call_id: end,
                        tool,
                        batch_id,
                        batch_size,
                        parallel,
                        status,
                        success,
                        duration_ms,
                        error,
                        warnings,
                    },
                    after_ms,
                ),
            };
            // Wrapping, as the writer took the difference: exact for
            // any two times.
            ToolEventRecord::stamped(&event, at_ms.wrapping_add(after_ms))
        })
    }
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

/// Stores `events` in slice order (nothing for an empty slice): a row per
/// run of events of one batch (schema 6), and an array row per run of
/// whole records. The caller holds the transaction.
pub(super) fn insert_events(
    conn: &Connection,
    session: &str,
    events: &[EventRow],
) -> Result<(), StoreError> {
    for run in events.chunk_by(|a, b| a.batch == b.batch) {
        // An event that could not be rendered at all (see
        // `EventRow::compact`) is left out: an empty element would make
        // the whole row unreadable.
        let mut rendered = run.iter().filter(|e| !e.text.is_empty()).peekable();
        let (Some(first), Some(last)) = (rendered.peek().copied(), run.last()) else {
            continue;
        };
        let length: usize = run.iter().map(|e| e.text.len() + 16).sum();
        let mut text = String::with_capacity(length + 128);
        match &first.batch {
            Some(batch) => {
                batch.push_head(&mut text);
                text.push_str(itoa::Buffer::new().format(first.at_ms));
                text.push_str(r#","events":["#);
                for (i, event) in rendered.enumerate() {
                    if i > 0 {
                        text.push(',');
                    }
                    text.push_str(&event.text);
                    // Wrapping, as the reader adds it back: exact for any
                    // two times.
                    event_text::close_element(&mut text, event.at_ms.wrapping_sub(first.at_ms));
                }
                text.push_str("]}");
            }
            None => {
                text.push('[');
                for (i, event) in rendered.enumerate() {
                    if i > 0 {
                        text.push(',');
                    }
                    text.push_str(&event.text);
                }
                text.push(']');
            }
        }
        conn.prepare_cached(
            "INSERT INTO tool_event_batches (session_id, events, at) VALUES (?1, ?2, ?3)",
        )?
        .execute(rusqlite::params![session, text, last.at_ms])?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)] // a panic in a test is a test failure

    use super::*;
    use crate::store::testing::temp_store;
    use homeagent_core::Message;

    /// Every kind of event, with text that needs escaping, errors and
    /// warnings, and times far apart (both ends of `i64`), reads back as
    /// it was recorded from a schema-6 row.
    #[test]
    fn every_event_reads_back_from_a_batch_row() {
        use homeagent_core::ErrorReason;
        let awkward = "quote \" back \\ tab \t nl \n bell \u{7} del \u{7f} é 雪 🎉 /";
        let mut detailed = ToolError::new(ErrorReason::InvalidArguments, awkward);
        detailed.field = Some("/tag".into());
        detailed.hint = Some("pass a \"tag\"".into());
        let end =
            |status: CallStatus, error: Option<ToolError>, warnings: &[&str]| ToolEvent::End {
                call_id: awkward.into(),
                tool: "tool\u{1}\"".into(),
                batch_id: awkward.into(),
                batch_size: 7,
                parallel: false,
                status,
                success: status == CallStatus::Ok,
                duration_ms: 1_234,
                error,
                warnings: warnings.iter().map(|w| (*w).to_owned()).collect(),
            };
        let events = [
            ToolEvent::Start {
                call_id: "call_0".into(),
                tool: "demo_echo".into(),
                args: serde_json::json!({"tag": "done-1", "n": -3, "x": 0.5, "deep": [null, true, {"k": awkward}]}),
                batch_id: awkward.into(),
                batch_size: 7,
                parallel: false,
            },
            end(CallStatus::Ok, None, &[]),
            end(CallStatus::Error, Some(ToolError::execution("boom")), &[]),
            end(CallStatus::Denied, None, &["coerced \"n\"", ""]),
            end(CallStatus::Cancelled, Some(detailed), &[awkward]),
            end(CallStatus::Timeout, None, &["one"]),
        ];
        let times = [
            0,
            1_796_171_026_607,
            -5,
            i64::MAX,
            i64::MIN,
            1_796_171_026_607,
        ];
        let records: Vec<ToolEventRecord> = events
            .iter()
            .zip(times)
            .map(|(event, at_ms)| ToolEventRecord::stamped(event, at_ms))
            .collect();
        let temp = temp_store("events-awkward");
        temp.store.ensure_session("s", "main").unwrap();
        temp.store.record_tool_events("s", &records).unwrap();
        assert_eq!(temp.store.tool_events("s").unwrap(), records);
        let rows: i64 = temp
            .store
            .lock()
            .query_row("SELECT count(*) FROM tool_event_batches", [], |r| r.get(0))
            .unwrap();
        assert_eq!(rows, 1, "one batch, one row");
    }

    /// An event rendered as nothing (which serde should never cause) is
    /// left out of its batch row; the others stay readable.
    #[test]
    fn an_unrendered_event_does_not_spoil_its_batch() {
        let temp = temp_store("events-unrendered");
        let store = &temp.store;
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
            batch: None,
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
    }
}
