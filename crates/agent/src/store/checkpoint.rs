//! WAL checkpoints, kept off the async workers.
//!
//! SQLite moves the WAL back into the database file (a *checkpoint*) from
//! inside the commit that finds the WAL past 1000 pages: it writes those
//! pages and syncs the file, milliseconds on a small machine's disk. A
//! commit on the blocking pool may take that time. A commit made on an
//! async worker (`Store::commit_inline`, [`Durability::Normal`] only)
//! must not: every session on that worker would wait.
//!
//! So the store replaces SQLite's automatic checkpoint with its own WAL
//! hook, which does the same (a passive checkpoint at the same size) except
//! while a commit runs on a worker: then it only marks the checkpoint due,
//! and the worker hands it to the blocking pool
//! (`Store::checkpoint_if_due`).
//!
//! The hook never reports a failed checkpoint as an error: SQLite would
//! pass it up as the *commit's* error although the commit is on disk, and
//! the group commit would retry writes that are already stored.
//!
//! [`Durability::Normal`]: super::Durability::Normal

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use rusqlite::hooks::Wal;

use super::{Store, StoreError};

/// WAL pages after which a commit checkpoints (SQLite's own default).
pub const CHECKPOINT_PAGES: i32 = 1000;

/// When the WAL of one connection is checkpointed.
#[derive(Debug, Default)]
pub(super) struct WalWatch {
    /// Set while a commit runs on an async worker (see [`Deferring`]).
    deferring: AtomicBool,
    /// A checkpoint was put off and has not run yet.
    due: AtomicBool,
    checkpoints: AtomicU64,
    deferred: AtomicU64,
}

/// Checkpoints are put off while this lives (also when the commit it
/// covers panics).
pub(super) struct Deferring<'a>(&'a WalWatch);

impl Drop for Deferring<'_> {
    fn drop(&mut self) {
        self.0.deferring.store(false, Ordering::SeqCst);
    }
}

impl WalWatch {
    /// The connection's WAL hook: SQLite calls it after each commit with the
    /// WAL's size in pages.
    pub(super) fn after_commit(&self, wal: &mut Wal, pages: i32) {
        if pages < CHECKPOINT_PAGES {
            return;
        }
        if self.deferring.load(Ordering::SeqCst) {
            if !self.due.swap(true, Ordering::SeqCst) {
                self.deferred.fetch_add(1, Ordering::Relaxed);
            }
            return;
        }
        match wal.checkpoint() {
            Ok(()) => {
                self.checkpoints.fetch_add(1, Ordering::Relaxed);
            }
            // A reader or another process's checkpoint can be in the way;
            // the next commit tries again, as SQLite's own hook would.
            Err(error) => tracing::debug!(%error, "a WAL checkpoint did not run"),
        }
    }

    pub(super) fn defer(&self) -> Deferring<'_> {
        self.deferring.store(true, Ordering::SeqCst);
        Deferring(self)
    }

    /// Takes the due mark: true when a put-off checkpoint should run now.
    pub(super) fn take_due(&self) -> bool {
        self.due.swap(false, Ordering::SeqCst)
    }
}

/// How the store's commits and checkpoints ran since it was opened.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct CommitPlaces {
    /// Groups committed on an async worker, without a trip to the blocking
    /// pool ([`Durability::Normal`](super::Durability::Normal) only).
    pub inline_commits: u64,
    /// Checkpoints a commit on a worker put off to the blocking pool.
    pub checkpoints_deferred: u64,
    /// Checkpoints run (by a commit, or put off and run later).
    pub checkpoints: u64,
    /// Inputs opened (claimed and loaded) on the caller's worker
    /// ([`Store::open_input_async`](super::Store::open_input_async)).
    pub inputs_opened_here: u64,
}

impl Store {
    /// Counters of where commits and checkpoints ran (see
    /// `store/checkpoint.rs`).
    pub fn commit_places(&self) -> CommitPlaces {
        CommitPlaces {
            inline_commits: self.writes.inline_commits(),
            checkpoints_deferred: self.wal.deferred.load(Ordering::Relaxed),
            checkpoints: self.wal.checkpoints.load(Ordering::Relaxed),
            inputs_opened_here: self.writes.opened_here.load(Ordering::Relaxed),
        }
    }

    /// Runs a passive checkpoint of the WAL now (blocking: call it through
    /// [`Store::call`] from async code).
    pub fn checkpoint_wal(&self) -> Result<(), StoreError> {
        let conn = self.lock();
        conn.query_row("PRAGMA wal_checkpoint(PASSIVE)", [], |_| Ok(()))?;
        self.wal.checkpoints.fetch_add(1, Ordering::Relaxed);
        Ok(())
    }
}
