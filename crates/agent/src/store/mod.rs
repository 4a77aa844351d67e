//! The embedded store: sessions, their messages and the tool-call event log,
//! in one SQLite file in the data directory.
//!
//! # Durability
//!
//! The database runs in WAL mode, by default with `synchronous = FULL`
//! ([`Durability::Full`]). The requirement is that *a crash at any point
//! loses no committed message*. WAL with `NORMAL` survives a process crash
//! (`kill -9`) but may lose the last transactions on power loss or an OS
//! crash, because the WAL is not synced at each commit. HomeAgent runs on
//! small home machines where power cuts happen, so `FULL` is the default
//! and "committed" means on disk. The price is one fsync per commit (group
//! commit shares it among concurrent writers, see below): 1–5 ms on the
//! virtual disks the benchmarks ran on, several times the agent's own work
//! per model turn. A user whose machine has a UPS or a battery, or who
//! accepts losing the last second of history on a power cut, can choose
//! [`Durability::Normal`] (`[store] sync = "normal"`).
//!
//! # Several processes
//!
//! `serve`, `seq create` and `mcp-serve` may open the same file at once. WAL
//! lets readers run beside the one writer; a busy timeout
//! ([`BUSY_TIMEOUT`]) makes a writer wait for the lock instead of failing
//! with "database is locked"; and every write transaction starts
//! `IMMEDIATE`, taking the write lock before it reads, so a read-then-write
//! (the next `seq`) can never deadlock against another writer (SQLite would
//! return `SQLITE_BUSY` at once for a deferred transaction upgrading its lock,
//! without waiting).
//!
//! # Atomicity and repair
//!
//! [`Store::append_messages`] writes a batch of messages in one transaction:
//! all or nothing, with `seq` continuing from the session's maximum, so the
//! sequence stays gap-free. The agent commits an assistant turn before its
//! tools run and the results after; a crash between leaves calls without
//! results. [`Store::load_session`] finds those and commits a `cancelled`
//! result for each, so the history it returns (and every later one) is
//! paired.
//!
//! Tool events are diagnostics, not history: the agent keeps a batch's
//! events in memory while it runs and writes them with the batch's results
//! in one transaction ([`Store::append_messages_with_events`]), so a batch
//! costs one commit whatever its size, not two per call. A crash mid-batch
//! loses that batch's events (its calls are still in the history and get
//! their `cancelled` results); it never loses a committed message.
//!
//! # Async callers and group commit
//!
//! The API is synchronous and `&self`: one connection behind a mutex. A
//! commit waits for the disk, so async code calls the store through
//! [`Store::call`], which runs the call on tokio's blocking pool, a few at
//! a time (`blocking.rs`), never on an async worker. Writers that wait for the connection at the same time are
//! committed together, one fsync for the whole group (`group.rs`); each is
//! answered only once its group is on disk. One exception: with
//! [`Durability::Normal`] a commit waits for no disk, so an async append
//! commits right on its worker when the connection and SQLite's write lock
//! are free at once (`Store::commit_inline`), saving the thread switches of
//! a trip to the pool; the WAL checkpoints such a commit would run are put
//! off to the pool (`checkpoint.rs`). A worker never waits for a lock or a
//! disk. An input's writes that nothing waits for yet (its user message,
//! a batch's results) are held for a moment so that its next write can
//! carry them in one commit (`held.rs`). The [`Store`] is
//! `Send + Sync`; share it with an `Arc`.
//!
//! # Secrets
//!
//! The store holds exactly what it is given: messages and tool events. The
//! caller never passes keys, and nothing here logs message bodies.

mod blocking;
mod checkpoint;
mod claim;
mod error;
mod event_text;
mod events;
mod group;
mod held;
mod history_cache;
#[cfg(test)]
mod inline_tests;
mod messages;
mod open;
mod repair;
mod schema;
mod sessions;
#[cfg(test)]
mod testing;

use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use rusqlite::config::DbConfig;
use rusqlite::{Connection, ErrorCode};

pub use blocking::{CALLS_AT_ONCE, QueuedAppend};
pub use checkpoint::{CHECKPOINT_PAGES, CommitPlaces};
pub use claim::{SessionClaim, claim_slot};
pub use error::StoreError;
pub use events::{EventPhase, EventRow, ToolEventRecord};
pub use group::WriteStats;
pub use held::{Appended, HOLD, HOLD_AT_MOST, HOLD_AT_MOST_FULL, HeldWrite};
pub use messages::ReadStats;
pub use open::OpenedInput;
pub use repair::{CANCELLED_DETAIL, KnownHistory, cancelled_result};
pub use schema::{MIGRATIONS, SCHEMA_VERSION};
pub use sessions::MAX_AGENT_NAME_BYTES;
pub use sessions::SessionInfo;

/// How long a writer waits for another process's write lock before failing.
pub const BUSY_TIMEOUT: Duration = Duration::from_secs(10);

/// Prepared statements kept per connection (more than the store uses).
const STATEMENT_CACHE: usize = 32;

/// The longest session id accepted.
pub const MAX_SESSION_ID_LEN: usize = 128;

/// How hard a commit waits for the disk; see the module docs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Durability {
    /// `synchronous = FULL`: a commit is on disk when it returns, through
    /// power loss.
    #[default]
    Full,
    /// `synchronous = NORMAL`: a commit survives the process crashing; the
    /// last commits may be lost on power loss or an OS crash (the database
    /// stays consistent).
    Normal,
}

impl Durability {
    fn pragma(self) -> &'static str {
        match self {
            Durability::Full => "FULL",
            Durability::Normal => "NORMAL",
        }
    }
}

/// A handle on the store file. Open one per process (or per thread that
/// wants its own connection); each handle serialises its own calls.
pub struct Store {
    conn: Mutex<Connection>,
    /// Writes waiting for `conn`, committed in groups (see `group.rs`).
    writes: group::WriteQueue,
    /// Parsed histories of recently loaded sessions (`history_cache.rs`).
    /// Locked only while `conn` is held, after it.
    histories: Mutex<history_cache::HistoryCache>,
    /// Messages parsed from stored rows, for [`Store::read_stats`].
    messages_parsed: AtomicU64,
    messages_counted: AtomicU64,
    messages_checked: AtomicU64,
    sessions_checked: AtomicU64,
    /// Places for [`Store::call`]s on the blocking pool (`blocking.rs`).
    calls_at_once: Arc<tokio::sync::Semaphore>,
    /// Sessions claimed through this handle (`claim.rs`).
    claims: Arc<claim::ClaimTable>,
    /// When the WAL is checkpointed (`checkpoint.rs`); the connection's
    /// WAL hook holds the other reference.
    wal: Arc<checkpoint::WalWatch>,
    /// Whether async callers' commits may run on their worker
    /// (`Store::commit_inline`): only when a commit waits for no disk.
    commits_inline: bool,
    /// How long a held write waits for the input's next write
    /// (`held.rs`).
    write_hold: std::time::Duration,
    /// The largest write held (`held::hold_limit`): larger when a commit
    /// waits for the disk.
    hold_at_most: usize,
    path: PathBuf,
}

impl std::fmt::Debug for Store {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Store").field("path", &self.path).finish()
    }
}

impl Store {
    /// Opens (creating the file and its parent directory if needed) and
    /// migrates the store at `path`, with [`Durability::Full`]. Refuses a
    /// file from a newer version.
    pub fn open(path: &Path) -> Result<Store, StoreError> {
        Store::open_with(path, Durability::Full)
    }

    /// Sets how long a held write waits for the input's next write before
    /// it commits on its own ([`HOLD`] unless set; see
    /// [`Store::hold_results`]). Zero still lets a write the input is
    /// already making carry it, if that write comes first.
    pub fn set_write_hold(&mut self, hold: std::time::Duration) {
        self.write_hold = hold;
    }

    /// [`Store::open`] with the given durability.
    pub fn open_with(path: &Path, durability: Durability) -> Result<Store, StoreError> {
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir).map_err(|source| StoreError::CreateDir {
                path: dir.to_owned(),
                source,
            })?;
        }
        let open_failed = |source| StoreError::Open {
            path: path.to_owned(),
            source,
        };
        let mut conn = Connection::open(path).map_err(open_failed)?;
        let wal = Arc::new(checkpoint::WalWatch::default());
        configure(&mut conn, durability, Arc::clone(&wal)).map_err(open_failed)?;
        schema::migrate(&mut conn, path)?;
        tracing::debug!(path = %path.display(), "store opened");
        Ok(Store {
            conn: Mutex::new(conn),
            writes: group::WriteQueue::default(),
            histories: Mutex::new(history_cache::HistoryCache::new(
                history_cache::DEFAULT_CAPACITY_BYTES,
            )),
            messages_parsed: AtomicU64::new(0),
            messages_counted: AtomicU64::new(0),
            messages_checked: AtomicU64::new(0),
            sessions_checked: AtomicU64::new(0),
            calls_at_once: Arc::new(tokio::sync::Semaphore::new(blocking::CALLS_AT_ONCE)),
            claims: Arc::new(claim::ClaimTable::beside(path)),
            wal,
            commits_inline: durability == Durability::Normal,
            write_hold: HOLD,
            hold_at_most: held::hold_limit(durability),
            path: path.to_owned(),
        })
    }

    /// The durability the connection runs with, read back from SQLite.
    pub fn durability(&self) -> Result<Durability, StoreError> {
        let level: i64 = self
            .lock()
            .pragma_query_value(None, "synchronous", |row| row.get(0))?;
        // 2 = FULL, 3 = EXTRA (stronger still); 1 = NORMAL, 0 = OFF.
        Ok(if level >= 2 {
            Durability::Full
        } else {
            Durability::Normal
        })
    }

    /// The file this store was opened on.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The schema version of the open file (always [`SCHEMA_VERSION`] once
    /// `open` succeeded).
    pub fn schema_version(&self) -> Result<i64, StoreError> {
        Ok(schema::schema_version(&self.lock())?)
    }

    /// The connection, outside any transaction. A poisoned lock is taken
    /// anyway: a panic while holding it either dropped a rusqlite
    /// `Transaction` (which rolled back) or left a group commit's raw
    /// `BEGIN` open, which is rolled back here. Nobody else can hold a
    /// transaction while the lock is free, so one found open is a leftover.
    fn lock(&self) -> MutexGuard<'_, Connection> {
        let conn = self.conn.lock().unwrap_or_else(PoisonError::into_inner);
        if end_open_transaction(&conn) {
            tracing::warn!("rolled back a transaction a failed store call left open");
        }
        conn
    }

    /// The history cache; the caller holds the connection (see the field).
    /// A panic while it was held may have left it half updated, so a
    /// poisoned cache is emptied, not trusted.
    fn histories(&self) -> MutexGuard<'_, history_cache::HistoryCache> {
        match self.histories.lock() {
            Ok(cache) => cache,
            Err(poisoned) => {
                let mut cache = poisoned.into_inner();
                cache.clear();
                self.histories.clear_poison();
                cache
            }
        }
    }
}

/// Rolls back the transaction open on `conn`, if any; whether there was
/// one. A failed rollback leaves nothing to do (SQLite has already ended
/// the transaction when ROLLBACK fails).
fn end_open_transaction(conn: &Connection) -> bool {
    if conn.is_autocommit() {
        return false;
    }
    let _ = conn
        .prepare_cached("ROLLBACK")
        .and_then(|mut stmt| stmt.execute([]));
    true
}

/// Per-connection settings; see the module docs for why each one.
fn configure(
    conn: &mut Connection,
    durability: Durability,
    wal: Arc<checkpoint::WalWatch>,
) -> rusqlite::Result<()> {
    conn.busy_timeout(BUSY_TIMEOUT)?;
    // Every hot statement (the transaction verbs included) is prepared once
    // and reused; parsing SQL was a fifth of the store's cost per input.
    conn.set_prepared_statement_cache_capacity(STATEMENT_CACHE);
    // Without a stable query planner, SQLite re-prepares a statement whose
    // plan could depend on a bound value after its bindings are cleared,
    // which rusqlite does each time a statement goes back to the cache: all
    // the `session_id = ?1` statements were parsed again on every use.
    conn.set_db_config(DbConfig::SQLITE_DBCONFIG_ENABLE_QPSG, true)?;
    // The journal mode is stored in the file; switching an existing WAL file
    // is a no-op. It reports the resulting mode, which is checked because a
    // file system without shared memory support silently keeps the old one.
    let mode = switch_to_wal(conn)?;
    if !mode.eq_ignore_ascii_case("wal") {
        tracing::warn!(
            mode,
            "the store could not switch to WAL; concurrent use will be slower"
        );
    }
    conn.pragma_update(None, "synchronous", durability.pragma())?;
    conn.pragma_update(None, "foreign_keys", true)?;
    // Replaces SQLite's automatic checkpoint, which would run inside a
    // commit made on an async worker (`checkpoint.rs`).
    conn.wal_hook(Some(move |log: &mut rusqlite::hooks::Wal, pages| {
        wal.after_commit(log, pages);
        Ok(())
    }))?;
    Ok(())
}

/// Sets the journal mode to WAL and returns the mode the file has then.
/// The switch takes the write lock while the connection already reads the
/// file, and SQLite refuses that at once, without its busy handler, when
/// another connection holds or wants the lock too (waiting could
/// deadlock): a fresh file opened by `serve` and `chat` together, or one
/// another program is writing. So a refused switch is tried again, for up
/// to [`BUSY_TIMEOUT`] like any other lock; once the other has made the
/// file WAL, the retry finds it so with no lock to take.
fn switch_to_wal(conn: &Connection) -> rusqlite::Result<String> {
    let deadline = Instant::now() + BUSY_TIMEOUT;
    loop {
        match conn.pragma_update_and_check(None, "journal_mode", "WAL", |row| row.get(0)) {
            Err(rusqlite::Error::SqliteFailure(e, _))
                if e.code == ErrorCode::DatabaseBusy && Instant::now() < deadline =>
            {
                std::thread::sleep(Duration::from_millis(5));
            }
            switched => return switched,
        }
    }
}

/// Checks a session id: 1 to 128 characters from `[A-Za-z0-9._:-]`.
pub fn validate_session_id(id: &str) -> Result<(), StoreError> {
    let problem = if id.is_empty() {
        Some("it is empty")
    } else if id.len() > MAX_SESSION_ID_LEN {
        Some("it is longer than 128 characters")
    } else if !id
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b':' | b'-'))
    {
        Some("it contains a character outside the allowed set")
    } else {
        None
    };
    match problem {
        Some(problem) => Err(StoreError::InvalidSessionId {
            // Bounded so a megabyte of garbage does not end up in a log line.
            id: id.chars().take(MAX_SESSION_ID_LEN + 8).collect(),
            problem,
        }),
        None => Ok(()),
    }
}

/// Milliseconds since the Unix epoch; the store's timestamp unit.
fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
        .unwrap_or(0)
}

/// Fails with `SessionNotFound` unless the session exists.
fn require_session(conn: &Connection, id: &str) -> Result<(), StoreError> {
    let exists: bool = conn
        .prepare_cached("SELECT EXISTS (SELECT 1 FROM sessions WHERE id = ?1)")?
        .query_row([id], |row| row.get(0))?;
    if exists {
        Ok(())
    } else {
        Err(StoreError::SessionNotFound { id: id.to_owned() })
    }
}
