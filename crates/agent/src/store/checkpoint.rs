//! WAL checkpoints, on a connection and a thread of their own.
//!
//! SQLite moves the WAL back into the database file (a *checkpoint*) from
//! inside the commit that finds the WAL past 1000 pages: it writes those
//! pages and syncs the database file, milliseconds on a small machine's
//! disk and far more on the SD card of a home server. Run there, it holds
//! the store's one connection the whole time: every commit and every load
//! of every session waits behind it, and a commit made on an async worker
//! (`Store::commit_inline`, [`Durability::Normal`] only) would stall every
//! session on that worker.
//!
//! So the store replaces SQLite's automatic checkpoint with its own WAL
//! hook. At the same size (a WAL of [`CHECKPOINT_PAGES`]) it only *asks*:
//! the checkpointer, a thread started on the first request with its own
//! connection to the file, runs a passive checkpoint (`PRAGMA
//! wal_checkpoint(PASSIVE)`), which takes no lock a writer or a reader of
//! the store's connection needs. WAL mode lets one connection checkpoint
//! while another commits: the checkpoint copies the pages committed before
//! it started, and once it has copied them all the next commit starts the
//! WAL over. A checkpoint on another connection is not a change to the
//! data (SQLite's `data_version` does not move), so the store's history
//! cache stays valid.
//!
//! The hook never reports a failed checkpoint as an error: SQLite would
//! pass it up as the *commit's* error although the commit is on disk, and
//! the group commit would retry writes that are already stored. A
//! checkpoint that fails (or is stopped half way by a reader of an old
//! snapshot) is asked for again by the next commit, as SQLite's own hook
//! would. The checkpointer syncs as the store does: with `FULL` or
//! `NORMAL` it syncs the WAL before it copies and the database after.
//!
//! [`Durability::Normal`]: super::Durability::Normal

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, Mutex, PoisonError};

use rusqlite::{Connection, OpenFlags};

use super::{Durability, Store};

/// WAL pages after which a commit asks for a checkpoint (SQLite's own
/// default for its automatic checkpoint).
pub const CHECKPOINT_PAGES: i32 = 1000;

/// The checkpointer thread's name, as `top -H` and debuggers show it.
const THREAD_NAME: &str = "homeagent-wal";

/// When and where the WAL of one store is checkpointed. The store's
/// connection's WAL hook asks ([`WalWatch::after_commit`]); dropped with
/// the store, it stops its thread and waits for it.
#[derive(Debug)]
pub(super) struct WalWatch {
    path: PathBuf,
    durability: Durability,
    counts: Arc<Counts>,
    /// The checkpointer, once asked for the first time.
    checkpointer: Mutex<Option<Checkpointer>>,
}

/// What the hook and the checkpointer share.
#[derive(Debug, Default)]
struct Counts {
    /// A checkpoint was asked for and has not started yet: later commits
    /// past the size do not ask again.
    due: AtomicBool,
    asked: AtomicU64,
    done: AtomicU64,
    /// Tests hold the checkpointer here ([`WalWatch::hold_checkpoints`]).
    #[cfg(test)]
    gate: Mutex<Option<TestGate>>,
}

#[derive(Debug)]
struct Checkpointer {
    wake: mpsc::Sender<()>,
    thread: std::thread::JoinHandle<()>,
}

impl WalWatch {
    pub(super) fn new(path: &Path, durability: Durability) -> WalWatch {
        WalWatch {
            path: path.to_owned(),
            durability,
            counts: Arc::default(),
            checkpointer: Mutex::new(None),
        }
    }

    /// The connection's WAL hook: SQLite calls it after each commit with the
    /// WAL's size in pages. It only asks (see the module docs).
    pub(super) fn after_commit(&self, pages: i32) {
        if pages < CHECKPOINT_PAGES || self.counts.due.swap(true, Ordering::SeqCst) {
            return;
        }
        self.counts.asked.fetch_add(1, Ordering::Relaxed);
        let mut checkpointer = self
            .checkpointer
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if let Some(running) = checkpointer.as_ref()
            && running.wake.send(()).is_ok()
        {
            return;
        }
        // Not started yet, or its thread is gone (it never ends on its own,
        // short of a panic): start one.
        match self.start() {
            Ok(started) => *checkpointer = Some(started),
            Err(error) => {
                // Asked again by the next commit past the size.
                self.counts.due.store(false, Ordering::SeqCst);
                tracing::warn!(%error, "could not start the WAL checkpointer thread");
            }
        }
    }

    fn start(&self) -> std::io::Result<Checkpointer> {
        let (wake, asked) = mpsc::channel();
        // The request that starts the thread is its first one.
        let _ = wake.send(());
        let counts = Arc::clone(&self.counts);
        let path = self.path.clone();
        let durability = self.durability;
        let thread = std::thread::Builder::new()
            .name(THREAD_NAME.into())
            .spawn(move || checkpoint_when_asked(&path, durability, &counts, &asked))?;
        Ok(Checkpointer { wake, thread })
    }

    /// Holds the checkpointer at the start of its next checkpoint, before
    /// it touches the file, until the test releases it.
    #[cfg(test)]
    pub(super) fn hold_checkpoints(&self) -> HeldCheckpoints {
        let (started_tx, started) = mpsc::channel();
        let (release, release_rx) = mpsc::channel();
        *self
            .counts
            .gate
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = Some(TestGate {
            started: started_tx,
            release: release_rx,
        });
        HeldCheckpoints { started, release }
    }
}

impl Drop for WalWatch {
    fn drop(&mut self) {
        let checkpointer = self
            .checkpointer
            .get_mut()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
        if let Some(Checkpointer { wake, thread }) = checkpointer {
            // Closing the channel ends the thread's loop after the
            // checkpoint it may be running.
            drop(wake);
            if thread.join().is_err() {
                tracing::warn!("the WAL checkpointer thread panicked");
            }
        }
    }
}

/// The checkpointer's loop: one passive checkpoint per wake-up (requests
/// that came meanwhile are one), until the store drops its end.
fn checkpoint_when_asked(
    path: &Path,
    durability: Durability,
    counts: &Counts,
    asked: &mpsc::Receiver<()>,
) {
    let mut conn: Option<Connection> = None;
    while asked.recv().is_ok() {
        while asked.try_recv().is_ok() {}
        #[cfg(test)]
        counts.pass_gate();
        checkpoint_once(path, durability, &mut conn, counts);
        // Commits during the checkpoint did not ask again; one that comes
        // after it and still finds the WAL long (it copied only what was
        // committed before it started) does.
        counts.due.store(false, Ordering::SeqCst);
    }
}

/// One passive checkpoint on `conn`, opened first if need be.
fn checkpoint_once(
    path: &Path,
    durability: Durability,
    conn: &mut Option<Connection>,
    counts: &Counts,
) {
    if conn.is_none() {
        match open_for_checkpoints(path, durability) {
            Ok(opened) => *conn = Some(opened),
            Err(error) => {
                tracing::warn!(
                    path = %path.display(),
                    %error,
                    "could not open the store for a WAL checkpoint; the next commit past the size asks again"
                );
                return;
            }
        }
    }
    let Some(conn) = conn.as_ref() else { return };
    match conn.query_row("PRAGMA wal_checkpoint(PASSIVE)", [], |_| Ok(())) {
        Ok(()) => {
            counts.done.fetch_add(1, Ordering::Relaxed);
        }
        Err(error) => tracing::debug!(%error, "a WAL checkpoint did not run"),
    }
}

/// A connection for checkpoints only: the file exists (the store opened
/// and migrated it), and it syncs as the store does.
fn open_for_checkpoints(path: &Path, durability: Durability) -> rusqlite::Result<Connection> {
    let conn = Connection::open_with_flags(
        path,
        OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_NO_MUTEX,
    )?;
    conn.pragma_update(None, "synchronous", durability.pragma())?;
    Ok(conn)
}

/// A test's hold on the checkpointer ([`WalWatch::hold_checkpoints`]).
#[cfg(test)]
#[derive(Debug)]
struct TestGate {
    started: mpsc::Sender<()>,
    release: mpsc::Receiver<()>,
}

/// The test's ends: `started` hears when a checkpoint is held, a send on
/// `release` lets it go (so does dropping it, or 20 s).
#[cfg(test)]
pub(super) struct HeldCheckpoints {
    pub started: mpsc::Receiver<()>,
    pub release: mpsc::Sender<()>,
}

#[cfg(test)]
impl Counts {
    fn pass_gate(&self) {
        let gate = self
            .gate
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
        if let Some(gate) = gate {
            let _ = gate.started.send(());
            let _ = gate
                .release
                .recv_timeout(std::time::Duration::from_secs(20));
        }
    }
}

/// How the store's commits and checkpoints ran since it was opened.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct CommitPlaces {
    /// Groups committed on an async worker, without a trip to the blocking
    /// pool ([`Durability::Normal`](super::Durability::Normal) only).
    pub inline_commits: u64,
    /// Checkpoints commits asked the checkpointer for.
    pub checkpoints_asked: u64,
    /// Checkpoints the checkpointer ran.
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
            checkpoints_asked: self.wal.counts.asked.load(Ordering::Relaxed),
            checkpoints: self.wal.counts.done.load(Ordering::Relaxed),
            inputs_opened_here: self.writes.opened_here.load(Ordering::Relaxed),
        }
    }
}
