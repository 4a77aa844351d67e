//! Claiming a session: one input at a time per session, across processes.
//!
//! Within a process the scheduler runs a session's inputs one after
//! another. But `serve`, `chat` and `run` may share a data directory, and
//! an input run by a second process on a session whose tools are running in
//! the first would see calls without results, exactly what a crash leaves:
//! its load would answer them `cancelled` while they still run, and the
//! first process's real results would then follow as duplicates, leaving a
//! history no provider accepts.
//!
//! So the agent claims a session for the whole of an input. A claim is an
//! exclusive `flock` on `<store file>-claims/<session id>.lock`, taken
//! without waiting: a session claimed elsewhere is refused at once with
//! [`StoreError::SessionBusy`]. The operating system drops the lock when
//! its holder exits, however it exits, so a crash never leaves a session
//! stuck.
//!
//! A released claim keeps its file: the session's next input opens it
//! again. Creating and removing an inode per input cost the blast benchmark
//! a tenth of the agent's CPU (`ext4_create` scans for recently deleted
//! inodes). The file goes when the session is deleted
//! ([`Store::delete_session`]), removed while locked; a claimant that
//! opened it just before would lock a file nobody else can reach, so after
//! locking it checks that the path still names the file it locked, and
//! tries again if not. A session deleted while an input holds it keeps its
//! file, so that input's claim stays the one claimants meet.
//!
//! Session ids are checked first ([`validate_session_id`]): no `/`, so an
//! id is always a plain file name inside the claims directory.

use std::fs::{File, OpenOptions, TryLockError};
use std::path::{Path, PathBuf};

use super::{Store, StoreError, validate_session_id};

/// How often a claim is retried when the file it locked was removed under
/// it (each retry means another process released the session meanwhile).
const ATTEMPTS: usize = 8;

/// A session held for one input; dropping it releases the session.
#[derive(Debug)]
#[must_use = "the session is released when the claim is dropped"]
pub struct SessionClaim {
    /// Held open: the lock lives as long as this descriptor.
    _file: File,
}

impl Store {
    /// The directory of the session claim files, beside the store file.
    pub fn claims_dir(&self) -> PathBuf {
        let mut name = self.path().as_os_str().to_owned();
        name.push("-claims");
        PathBuf::from(name)
    }

    /// Claims `session` for one input, or fails with
    /// [`StoreError::SessionBusy`] when it is claimed (by another process,
    /// or another claim in this one). See the module docs.
    pub fn claim_session(&self, session: &str) -> Result<SessionClaim, StoreError> {
        validate_session_id(session)?;
        let dir = self.claims_dir();
        let path = dir.join(format!("{session}.lock"));
        let failed = |source| StoreError::Claim {
            path: path.clone(),
            source,
        };
        for _ in 0..ATTEMPTS {
            let file = match open(&path) {
                Err(error) if error.kind() == std::io::ErrorKind::NotFound => {
                    std::fs::create_dir_all(&dir).map_err(failed)?;
                    open(&path).map_err(failed)?
                }
                other => other.map_err(failed)?,
            };
            match file.try_lock() {
                Ok(()) => {}
                Err(TryLockError::WouldBlock) => {
                    return Err(StoreError::SessionBusy {
                        id: session.to_owned(),
                    });
                }
                Err(TryLockError::Error(error)) => return Err(failed(error)),
            }
            if still_named(&file, &path).map_err(failed)? {
                return Ok(SessionClaim { _file: file });
            }
        }
        Err(StoreError::SessionBusy {
            id: session.to_owned(),
        })
    }
}

impl Store {
    /// Removes the claim file of `session` (being deleted) unless an input
    /// holds it: under the lock, so no claimant can be left holding a file
    /// that is no longer named (see the module docs). Best effort: a file
    /// left behind only costs an empty inode, and is used again if the id
    /// comes back.
    pub(super) fn remove_claim_file(&self, session: &str) {
        let path = self.claims_dir().join(format!("{session}.lock"));
        let file = match OpenOptions::new().read(true).write(true).open(&path) {
            Ok(file) => file,
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => return,
            Err(error) => {
                tracing::debug!(path = %path.display(), %error, "could not open a session claim file to remove it");
                return;
            }
        };
        remove_if_still_named(&file, &path);
    }
}

/// Removes `path` if `file` (opened from it) can be locked and the path
/// still names it. Another delete may have removed that file after it was
/// opened here, and a claimant made and locked a new one since: its lock
/// is the session's claim, and removing the path would let a third
/// claimant make another file beside it.
fn remove_if_still_named(file: &File, path: &Path) {
    match file.try_lock() {
        Ok(()) => {}
        Err(TryLockError::WouldBlock) => return,
        Err(TryLockError::Error(error)) => {
            tracing::debug!(path = %path.display(), %error, "could not lock a session claim file to remove it");
            return;
        }
    }
    match still_named(file, path) {
        Ok(true) => {}
        Ok(false) => return,
        Err(error) => {
            tracing::debug!(path = %path.display(), %error, "could not check a session claim file before removing it");
            return;
        }
    }
    if let Err(error) = std::fs::remove_file(path) {
        tracing::debug!(path = %path.display(), %error, "could not remove a session claim file");
    }
}

fn open(path: &Path) -> std::io::Result<File> {
    OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(path)
}

/// Whether `path` still names the file `file` has open.
#[cfg(unix)]
fn still_named(file: &File, path: &Path) -> std::io::Result<bool> {
    use std::os::unix::fs::MetadataExt;
    let held = file.metadata()?;
    match std::fs::metadata(path) {
        Ok(named) => Ok(named.dev() == held.dev() && named.ino() == held.ino()),
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => Ok(false),
        Err(error) => Err(error),
    }
}

/// Elsewhere an open file cannot be removed, so the name cannot move.
#[cfg(not(unix))]
fn still_named(_file: &File, _path: &Path) -> std::io::Result<bool> {
    Ok(true)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)] // a panic in a test is a test failure

    use super::*;
    use crate::store::testing::temp_store;

    /// Two deletes race: the second opened the old file, the first removed
    /// it, and a claimant then made and locked a new one. The second delete
    /// must leave the claimant's file alone, or a third claimant would
    /// hold the session beside it.
    #[test]
    fn a_late_delete_leaves_a_newer_claim_file_alone() {
        let temp = temp_store("claim-race");
        let path = temp.store.claims_dir().join("s.lock");
        drop(temp.store.claim_session("s").unwrap());
        let opened_before = open(&path).unwrap();
        temp.store.remove_claim_file("s");
        assert!(!path.exists());
        let holder = temp.store.claim_session("s").unwrap();
        remove_if_still_named(&opened_before, &path);
        assert!(path.exists(), "the claimant's file was removed");
        assert!(matches!(
            temp.store.claim_session("s"),
            Err(StoreError::SessionBusy { .. })
        ));
        drop(holder);
    }
}
