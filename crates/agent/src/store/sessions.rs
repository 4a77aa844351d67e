//! Sessions: one conversation each, owned by one agent.

use std::sync::atomic::Ordering;

use homeagent_core::Message;
use rusqlite::{Connection, OptionalExtension, Row};
use serde::Serialize;

use super::group::{WriteDone, WriteOp};
use super::messages::encode_messages;
use super::{Store, StoreError, now_ms, validate_session_id};

/// A session as listed: who owns it, when it was used, how long it is.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct SessionInfo {
    pub id: String,
    pub agent: String,
    pub title: Option<String>,
    /// Milliseconds since the Unix epoch.
    pub created_at_ms: i64,
    /// The last time a message was appended (or the creation time).
    pub updated_at_ms: i64,
    pub message_count: u64,
}

// The message count is the highest number: messages are numbered 1, 2, 3,
// … without gaps (appends take the next numbers, a repair numbers the
// session's messages anew, nothing deletes one), and a row may hold the
// several messages of one write (see `messages::insert_rows`).
const SELECT_INFO: &str = "SELECT s.id, s.agent, s.title, s.created_at, s.updated_at,
        (SELECT COALESCE(MAX(m.seq), 0) FROM messages m WHERE m.session_id = s.id)
    FROM sessions s";

const SELECT_ONE: &str = "SELECT s.id, s.agent, s.title, s.created_at, s.updated_at,
        (SELECT COALESCE(MAX(m.seq), 0) FROM messages m WHERE m.session_id = s.id)
    FROM sessions s WHERE s.id = ?1";

fn info_from_row(row: &Row<'_>) -> rusqlite::Result<SessionInfo> {
    Ok(SessionInfo {
        id: row.get(0)?,
        agent: row.get(1)?,
        title: row.get(2)?,
        created_at_ms: row.get(3)?,
        updated_at_ms: row.get(4)?,
        message_count: u64::try_from(row.get::<_, i64>(5)?).unwrap_or(0),
    })
}

/// Inserts session `id` unless it exists; whether it was inserted.
pub(super) fn insert_if_new(conn: &Connection, id: &str, agent: &str) -> Result<bool, StoreError> {
    let inserted = conn
        .prepare_cached(
            "INSERT INTO sessions (id, agent, created_at, updated_at) VALUES (?1, ?2, ?3, ?3)
             ON CONFLICT (id) DO NOTHING",
        )?
        .execute(rusqlite::params![id, agent, now_ms()])?;
    Ok(inserted == 1)
}

/// Stamps session `id` as used now; whether it exists (and, given `agent`,
/// is that agent's). Nothing is changed when it answers `false`.
pub(super) fn touch(conn: &Connection, id: &str, agent: Option<&str>) -> Result<bool, StoreError> {
    let changed = conn
        .prepare_cached(
            "UPDATE sessions SET updated_at = ?2 WHERE id = ?1 AND (?3 IS NULL OR agent = ?3)",
        )?
        .execute(rusqlite::params![id, now_ms(), agent])?;
    Ok(changed == 1)
}

/// Creates the session for `agent` unless it exists, and returns it; a
/// session of another agent is refused. The caller holds the (IMMEDIATE)
/// transaction, so another process creating the same id at the same moment
/// cannot slip between the insert-or-keep and the read.
pub(super) fn create_or_get(
    conn: &Connection,
    id: &str,
    agent: &str,
) -> Result<SessionInfo, StoreError> {
    insert_if_new(conn, id, agent)?;
    let info = conn
        .prepare_cached(SELECT_ONE)?
        .query_row([id], info_from_row)?;
    owned_by(info, agent)
}

/// The longest agent name the store keeps, in bytes.
pub const MAX_AGENT_NAME_BYTES: usize = 128;

/// An agent name the store keeps: 1 to [`MAX_AGENT_NAME_BYTES`] bytes.
pub(super) fn validate_agent_name(agent: &str) -> Result<(), StoreError> {
    if agent.is_empty() || agent.len() > MAX_AGENT_NAME_BYTES {
        return Err(StoreError::InvalidAgentName {
            name: agent.chars().take(136).collect(),
        });
    }
    Ok(())
}

/// `info`, if its session belongs to `agent`.
pub(super) fn owned_by(info: SessionInfo, agent: &str) -> Result<SessionInfo, StoreError> {
    is_agents(&info.id, &info.agent, agent)?;
    Ok(info)
}

/// `Ok` when a session `id` that belongs to `existing` is `agent`'s.
pub(super) fn is_agents(id: &str, existing: &str, agent: &str) -> Result<(), StoreError> {
    if existing != agent {
        return Err(StoreError::AgentMismatch {
            id: id.to_owned(),
            existing: existing.to_owned(),
            requested: agent.to_owned(),
        });
    }
    Ok(())
}

impl Store {
    /// [`read_agent`], counted in
    /// [`ReadStats::sessions_checked`](super::ReadStats::sessions_checked).
    pub(super) fn read_agent_checked(
        &self,
        conn: &Connection,
        id: &str,
    ) -> Result<Option<String>, StoreError> {
        self.sessions_checked.fetch_add(1, Ordering::Relaxed);
        read_agent(conn, id)
    }
}

/// The agent of session `id`, if it exists: all an input checks before it
/// runs ([`read_one`] also counts the session's messages).
pub(super) fn read_agent(conn: &Connection, id: &str) -> Result<Option<String>, StoreError> {
    Ok(conn
        .prepare_cached("SELECT agent FROM sessions WHERE id = ?1")?
        .query_row([id], |row| row.get(0))
        .optional()?)
}

pub(super) fn read_one(conn: &Connection, id: &str) -> Result<Option<SessionInfo>, StoreError> {
    Ok(conn
        .prepare_cached(SELECT_ONE)?
        .query_row([id], info_from_row)
        .optional()?)
}

impl Store {
    /// Returns the session, creating it for `agent` if it does not exist.
    /// A session that exists for another agent is refused
    /// ([`StoreError::AgentMismatch`]).
    pub fn ensure_session(&self, id: &str, agent: &str) -> Result<SessionInfo, StoreError> {
        validate_session_id(id)?;
        validate_agent_name(agent)?;
        // Nearly every call finds the session there (each input makes sure
        // of its session): a read answers those without a write transaction.
        if let Some(info) = read_one(&self.lock(), id)? {
            return owned_by(info, agent);
        }
        let op = WriteOp::EnsureSession {
            id: id.to_owned(),
            agent: agent.to_owned(),
        };
        match self.submit(op)? {
            WriteDone::Session(info) => Ok(info),
            WriteDone::Created(_) | WriteDone::Appended(_) => Err(StoreError::WriteNotApplied),
        }
    }

    /// Checks, by a read, that session `id` is `agent`'s or does not exist
    /// yet, and says whether it exists: the check before an input whose
    /// first write may create the session ([`Store::append_async_creating`]).
    /// A session of another agent is refused ([`StoreError::AgentMismatch`]).
    pub fn check_session_agent(&self, id: &str, agent: &str) -> Result<bool, StoreError> {
        validate_session_id(id)?;
        validate_agent_name(agent)?;
        match self.read_agent_checked(&self.lock(), id)? {
            Some(existing) => is_agents(id, &existing, agent).map(|()| true),
            None => Ok(false),
        }
    }

    /// How long [`Store::create_seeded_session`] waits for a session another
    /// writer holds to be stored: an input's first write is held for
    /// [`HOLD`](super::HOLD) at most, then committed.
    const SEED_WAIT: std::time::Duration = std::time::Duration::from_secs(1);

    /// Creates session `id` for `agent` with `messages` as its history, in
    /// one transaction, unless it exists already: then nothing is written
    /// (it must belong to `agent`). Returns whether it was created. Two
    /// callers racing to create one session (two first requests with the
    /// same new id) cannot both seed it, and a session an input has
    /// claimed is refused as [`StoreError::SessionBusy`].
    pub fn create_seeded_session(
        &self,
        id: &str,
        agent: &str,
        messages: &[Message],
    ) -> Result<bool, StoreError> {
        validate_session_id(id)?;
        validate_agent_name(agent)?;
        // Nearly every call names a session that exists (each request of a
        // conversation names it again): a read answers those without a
        // write transaction, as in `ensure_session`.
        if let Some(info) = read_one(&self.lock(), id)? {
            owned_by(info, agent)?;
            return Ok(false);
        }
        // Claimed while it is seeded: an input that holds the session may
        // not have stored it yet (its first write is held for a moment),
        // and a seed written then would land before the input's messages.
        // Another holder is waited for, briefly: once the session exists
        // it keeps its history, as above.
        let waited = std::time::Instant::now();
        let _held = loop {
            match self.claim_session(id) {
                Ok(claim) => break claim,
                Err(StoreError::SessionBusy { .. }) if waited.elapsed() < Self::SEED_WAIT => {
                    std::thread::sleep(std::time::Duration::from_millis(1));
                    if let Some(info) = read_one(&self.lock(), id)? {
                        owned_by(info, agent)?;
                        return Ok(false);
                    }
                }
                Err(other) => return Err(other),
            }
        };
        let op = WriteOp::CreateSeeded {
            id: id.to_owned(),
            agent: agent.to_owned(),
            rows: encode_messages(messages),
        };
        match self.submit(op)? {
            WriteDone::Created(created) => Ok(created),
            WriteDone::Session(_) | WriteDone::Appended(_) => Err(StoreError::WriteNotApplied),
        }
    }

    /// The session, or `None` when it does not exist.
    pub fn session(&self, id: &str) -> Result<Option<SessionInfo>, StoreError> {
        validate_session_id(id)?;
        read_one(&self.lock(), id)
    }

    /// Every session, most recently used first (then by id).
    pub fn list_sessions(&self) -> Result<Vec<SessionInfo>, StoreError> {
        let conn = self.lock();
        let mut stmt = conn.prepare(&format!(
            "{SELECT_INFO} ORDER BY s.updated_at DESC, s.id ASC"
        ))?;
        let rows = stmt.query_map([], info_from_row)?;
        Ok(rows.collect::<rusqlite::Result<Vec<_>>>()?)
    }

    /// Sets (or clears) a session's title.
    pub fn set_title(&self, id: &str, title: Option<&str>) -> Result<(), StoreError> {
        validate_session_id(id)?;
        let conn = self.lock();
        let changed = conn.execute(
            "UPDATE sessions SET title = ?2 WHERE id = ?1",
            rusqlite::params![id, title],
        )?;
        if changed == 0 {
            return Err(StoreError::SessionNotFound { id: id.to_owned() });
        }
        Ok(())
    }

    /// Deletes the session with its messages and events. Returns whether it
    /// existed. A session an input holds (in any process: see
    /// `claim_session`) is refused as [`StoreError::SessionBusy`], never
    /// waited for: deleted under it, the input's next write would fail on
    /// a session that vanished, and its reply be lost.
    pub fn delete_session(&self, id: &str) -> Result<bool, StoreError> {
        validate_session_id(id)?;
        let _held = self.claim_session(id)?;
        let conn = self.lock();
        // Messages and events go with it through ON DELETE CASCADE.
        let deleted = conn.execute("DELETE FROM sessions WHERE id = ?1", [id])?;
        self.histories().forget(id);
        Ok(deleted > 0)
    }
}
