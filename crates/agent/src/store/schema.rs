//! The schema and its migrations.
//!
//! The version lives in SQLite's own `PRAGMA user_version` (0 for a fresh
//! file). Step `n` of [`MIGRATIONS`] takes the database from version `n` to
//! `n + 1`; each step runs in one transaction together with the version bump,
//! so a crash mid-migration leaves the previous version, never half a schema.
//! Released steps are never edited; a change to the schema is a new step at
//! the end.
//!
//! Several processes may open the same file at once (`serve` beside
//! `seq create`), so the version is read again *inside* each step's write
//! transaction: whoever takes the lock second sees the step done and skips it.

use std::path::Path;

use rusqlite::{Connection, TransactionBehavior};

use super::StoreError;

/// The ordered migration steps; the schema version after all of them is
/// `MIGRATIONS.len()`.
pub const MIGRATIONS: &[&str] = &[
    // 0 → 1: sessions and their messages.
    "CREATE TABLE sessions (
        id         TEXT PRIMARY KEY NOT NULL,
        agent      TEXT NOT NULL,
        title      TEXT,
        created_at INTEGER NOT NULL,
        updated_at INTEGER NOT NULL
    ) STRICT;
    CREATE TABLE messages (
        session_id TEXT NOT NULL REFERENCES sessions(id) ON DELETE CASCADE,
        seq        INTEGER NOT NULL,
        role       TEXT NOT NULL,
        body       TEXT NOT NULL,
        created_at INTEGER NOT NULL,
        PRIMARY KEY (session_id, seq)
    ) STRICT, WITHOUT ROWID;",
    // 1 → 2: the tool-call event log next to the history.
    "CREATE TABLE tool_events (
        id          INTEGER PRIMARY KEY AUTOINCREMENT,
        session_id  TEXT NOT NULL REFERENCES sessions(id) ON DELETE CASCADE,
        batch_id    TEXT NOT NULL,
        call_id     TEXT NOT NULL,
        tool        TEXT NOT NULL,
        phase       TEXT NOT NULL CHECK (phase IN ('start', 'end')),
        status      TEXT,
        success     INTEGER,
        duration_ms INTEGER,
        body        TEXT NOT NULL,
        at          INTEGER NOT NULL
    ) STRICT;
    CREATE INDEX tool_events_by_session ON tool_events (session_id, id);",
    // 2 → 3: tool events stored a batch per row (a JSON array in `events`,
    // in emission order). Two indexed rows per call were the largest part
    // of a call's cost in the agent (~30 k of ~148 k instructions under
    // callgrind); one row per batch costs a JSON array. Rows written
    // before stay in `tool_events` and are read first (they are older).
    "CREATE TABLE tool_event_batches (
        id         INTEGER PRIMARY KEY,
        session_id TEXT NOT NULL REFERENCES sessions(id) ON DELETE CASCADE,
        events     TEXT NOT NULL,
        at         INTEGER NOT NULL
    ) STRICT;
    CREATE INDEX tool_event_batches_by_session ON tool_event_batches (session_id, id);",
    // 3 → 4: an element of a batch row may be `{"event", "at_ms"}` (see
    // `events.rs`). No table changes; the version tells an older build,
    // which could not read such rows, to refuse the file instead.
    "",
    // 4 → 5: the messages of one write may be one row of `messages`, a
    // JSON array numbered by its last message (see `messages::insert_rows`).
    // No table changes, as for 4.
    "",
    // 5 → 6: a row of `tool_event_batches` may be an object that names
    // its batch once (see `events.rs`). No table changes, as for 4.
    "",
];

/// The schema version this build writes.
pub const SCHEMA_VERSION: i64 = MIGRATIONS.len() as i64;

/// Reads `PRAGMA user_version`.
pub fn schema_version(conn: &Connection) -> rusqlite::Result<i64> {
    conn.pragma_query_value(None, "user_version", |row| row.get(0))
}

/// Brings the database up to [`SCHEMA_VERSION`], or refuses a newer one.
pub fn migrate(conn: &mut Connection, path: &Path) -> Result<(), StoreError> {
    let refuse_newer = |found: i64| StoreError::NewerSchema {
        path: path.to_owned(),
        found,
        supported: SCHEMA_VERSION,
    };
    let found = schema_version(conn)?;
    if found > SCHEMA_VERSION {
        return Err(refuse_newer(found));
    }
    // Current (every open but the first): no write lock to wait for, which
    // another program's long write would otherwise make each open do.
    if found == SCHEMA_VERSION {
        return Ok(());
    }
    let first = usize::try_from(found).unwrap_or(0);
    for (step, sql) in MIGRATIONS.iter().enumerate().skip(first) {
        let from = step as i64;
        let to = from + 1;
        let failed = |source| StoreError::Migration {
            path: path.to_owned(),
            from,
            to,
            source,
        };
        let tx = conn
            .transaction_with_behavior(TransactionBehavior::Immediate)
            .map_err(failed)?;
        let current = schema_version(&tx).map_err(failed)?;
        if current > SCHEMA_VERSION {
            return Err(refuse_newer(current));
        }
        if current >= to {
            // Done earlier, or by another process that migrated while we waited.
            continue;
        }
        tx.execute_batch(sql).map_err(failed)?;
        tx.pragma_update(None, "user_version", to).map_err(failed)?;
        tx.commit().map_err(failed)?;
        tracing::info!(path = %path.display(), from, to, "store schema migrated");
    }
    Ok(())
}
