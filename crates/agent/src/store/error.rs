//! The store's error type. Callers match on the variants, never on the text.

use std::path::PathBuf;

use homeagent_core::PairingError;

/// Everything the store can refuse or fail at.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// The data directory holding the database could not be created.
    #[error("cannot create the store directory {path}: {source}")]
    CreateDir {
        path: PathBuf,
        source: std::io::Error,
    },
    /// SQLite could not open or configure the database file.
    #[error("cannot open the store {path}: {source}")]
    Open {
        path: PathBuf,
        source: rusqlite::Error,
    },
    /// The file was written by a newer HomeAgent. Downgrading could silently
    /// drop what the newer schema stores, so it is refused instead.
    #[error(
        "the store {path} has schema version {found}, but this build knows versions up to {supported}; \
         upgrade homeagent, or point --data-dir at another directory"
    )]
    NewerSchema {
        path: PathBuf,
        found: i64,
        supported: i64,
    },
    /// A migration step failed; the database stays at `from`.
    #[error(
        "cannot migrate the store {path} from schema version {from} to {to}: {source} (when it is \
         locked, another program is writing to it: let it finish, or stop it, and start again)"
    )]
    Migration {
        path: PathBuf,
        from: i64,
        to: i64,
        source: rusqlite::Error,
    },
    /// A session id breaks the naming rule.
    #[error(
        "invalid session id {id:?}: {problem}; use 1 to 128 characters from A-Z a-z 0-9 . _ : -"
    )]
    InvalidSessionId { id: String, problem: &'static str },
    /// An agent name is empty or too long.
    #[error("invalid agent name {name:?}: use 1 to 128 characters")]
    InvalidAgentName { name: String },
    /// The session has not been created (see `Store::ensure_session`).
    #[error(
        "session {id} does not exist (it was deleted, or never created); send the input again to start it afresh"
    )]
    SessionNotFound { id: String },
    /// The session exists but belongs to another agent. Continuing one
    /// agent's history as another could hand it results of tools it may not use.
    #[error(
        "session {id} belongs to agent {existing}, not {requested}; use another session id or agent {existing}"
    )]
    AgentMismatch {
        id: String,
        existing: String,
        requested: String,
    },
    /// A stored row could not be decoded (edited by hand, or a bug).
    #[error("session {session}: stored {what} #{row} is not valid: {source}")]
    Corrupt {
        session: String,
        what: &'static str,
        row: i64,
        source: serde_json::Error,
    },
    /// The history is broken in a way appending cancelled results cannot fix
    /// (a result without its call, a duplicate id).
    #[error("session {session} has a history that cannot be repaired: {source}")]
    Unrepairable {
        session: String,
        source: PairingError,
    },
    /// Another input is running on the session right now, in another
    /// process on the same data directory (see `Store::claim_session`).
    #[error(
        "session {id} is running an input in another HomeAgent process on this data directory; \
         wait for it to finish, or use another session id"
    )]
    SessionBusy { id: String },
    /// A write an earlier input of the session left behind in this
    /// process (it ended early) has not committed within the wait for it
    /// (see `Store::own_claim_released`).
    #[error(
        "session {id} still has a write of its previous input, in this process, that is not on \
         disk yet (a slow or stalled disk?); send the input again in a moment"
    )]
    SessionWriting { id: String },
    /// The session claims file (`Store::claims_file`) could not be opened
    /// or locked.
    #[error("cannot claim the session through {path}: {source}")]
    Claim {
        path: PathBuf,
        source: std::io::Error,
    },
    /// A queued write was never applied: the call that was committing its
    /// group panicked. Nothing of it is stored; retrying is safe.
    #[error(
        "the write was not applied (the store call committing it failed unexpectedly); retry it"
    )]
    WriteNotApplied,
    /// A store call made through `Store::call` ended without an answer
    /// (it panicked, or the runtime was shutting down). A write it made may
    /// or may not have committed; reload the session to see.
    #[error(
        "a store call failed unexpectedly ({detail}); reload the session to see what it stored"
    )]
    CallFailed { detail: String },
    /// Any other SQLite failure (disk full, I/O error, lock held longer than
    /// the busy timeout).
    #[error("store error: {0}")]
    Sqlite(#[from] rusqlite::Error),
}
