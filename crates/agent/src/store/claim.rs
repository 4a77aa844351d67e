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
//! So the agent claims a session for the whole of an input, without
//! waiting: a session claimed elsewhere is refused at once with
//! [`StoreError::SessionBusy`].
//!
//! # One lock file, one byte per session
//!
//! A claim is an exclusive lock on one byte of one file beside the store,
//! `<store file>-sessions.lock` ([`Store::claims_file`]): the byte at
//! [`claim_slot`]`(id)`, a 62-bit hash of the session id (locks may lie far
//! beyond the end of a file, which stays empty). On Linux it is an *open
//! file description* lock (`F_OFD_SETLK`): it belongs to the store handle's
//! descriptor, so two handles conflict even inside one process, and the
//! kernel drops it when its holder exits, however it exits, so a crash
//! never leaves a session stuck.
//!
//! An earlier design locked a file per session. Creating that file's inode
//! was the most expensive step of opening a session: on an ext4 without a
//! journal the kernel scans past every recently deleted inode to find a
//! free one (`recently_deleted`), 25–30 % of the agent's CPU in the bench's
//! kernel scenario, where every input opens a session.
//!
//! Inside one handle the claimed ids are kept in a table, so the same
//! handle refuses a session it holds; two ids that share a slot (a hash
//! collision) share the byte's lock, counted, and it is unlocked when the
//! last of them is released. Between processes such a collision refuses a
//! session that is not busy, with odds about `a·b / 2^62` for `a` and `b`
//! sessions running at once in the two processes.
//!
//! [`claim_slot`] is a protocol between processes on one data directory:
//! changing it would let two versions run one session at once.
//!
//! Elsewhere than Linux the lock is a POSIX record lock (`F_SETLK`), which
//! belongs to the process: two handles on one store in one process do not
//! exclude each other there, and closing either drops the other's locks.
//! The table still refuses what a handle holds itself.

use std::collections::HashMap;
use std::fs::{File, OpenOptions};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use nix::errno::Errno;
use nix::fcntl::{FcntlArg, fcntl};
use nix::libc;

use super::{Store, StoreError, validate_session_id};

/// A session held for one input; the session is released when the claim
/// and every clone of it are dropped.
///
/// The input's writes clone it (`Store::hold_append_creating` and the other
/// writes that take a claim) and keep the clone until they have committed:
/// an input that ends early — its task panics, or its future is dropped —
/// with a write still held or queued thus keeps the session until that
/// write is on disk, and the session's next input loads a history that
/// has it, instead of writing before it.
#[derive(Debug, Clone)]
#[must_use = "the session is released when the claim is dropped"]
pub struct SessionClaim {
    claimed: Arc<Claimed>,
    /// Set on the input's own handle and its clones, not on a write's
    /// ([`SessionClaim::for_write`]): while one is alive, the input runs.
    _input: Option<Arc<InputMark>>,
}

/// Marks a session's input as running in this process until dropped.
#[derive(Debug)]
struct InputMark(Arc<Claimed>);

impl Drop for InputMark {
    fn drop(&mut self) {
        self.0.table.input_ended(&self.0.session);
    }
}

#[derive(Debug)]
struct Claimed {
    table: Arc<ClaimTable>,
    session: String,
    slot: i64,
}

impl SessionClaim {
    /// The session claimed.
    pub fn session(&self) -> &str {
        &self.claimed.session
    }

    /// The claim a write of the input keeps until it has committed: it
    /// holds the session, but does not count as the input running
    /// ([`Store::own_claim_released`] waits for it, not for an input).
    pub(super) fn for_write(&self) -> SessionClaim {
        SessionClaim {
            claimed: Arc::clone(&self.claimed),
            _input: None,
        }
    }
}

impl Drop for Claimed {
    fn drop(&mut self) {
        self.table.release(&self.session, self.slot);
    }
}

/// One store handle's claims: the lock file (opened on the first claim)
/// and what this handle holds.
#[derive(Debug)]
pub(super) struct ClaimTable {
    path: PathBuf,
    state: Mutex<ClaimState>,
    /// Sessions held through this handle, readable without the lock: the
    /// inputs running in this process (see [`ClaimTable::held`]).
    held: AtomicUsize,
    /// Woken whenever a session is released.
    released: tokio::sync::Notify,
}

#[derive(Debug, Default)]
struct ClaimState {
    file: Option<File>,
    /// The sessions held, each with whether its input (not only its
    /// writes) still holds it.
    sessions: HashMap<String, bool>,
    /// Claims per locked byte (more than one only on a hash collision).
    slots: HashMap<i64, usize>,
}

impl ClaimTable {
    /// The table of the store at `store`: its lock file is
    /// `<store>-sessions.lock`.
    pub(super) fn beside(store: &Path) -> ClaimTable {
        let mut name = store.as_os_str().to_owned();
        name.push("-sessions.lock");
        ClaimTable::new(PathBuf::from(name))
    }

    fn new(path: PathBuf) -> ClaimTable {
        ClaimTable {
            path,
            state: Mutex::new(ClaimState::default()),
            held: AtomicUsize::new(0),
            released: tokio::sync::Notify::new(),
        }
    }

    /// Claims `session` on the byte `slot`.
    fn claim(self: &Arc<Self>, session: &str, slot: i64) -> Result<SessionClaim, StoreError> {
        let busy = || StoreError::SessionBusy {
            id: session.to_owned(),
        };
        let mut state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        if state.sessions.contains_key(session) {
            return Err(busy());
        }
        if !state.slots.contains_key(&slot) {
            let file = match &state.file {
                Some(file) => file,
                None => {
                    state
                        .file
                        .insert(open(&self.path).map_err(|source| StoreError::Claim {
                            path: self.path.clone(),
                            source,
                        })?)
                }
            };
            match set_lock(file, slot, Lock::Exclusive) {
                Ok(()) => {}
                // POSIX allows either for "held by someone else".
                Err(Errno::EAGAIN | Errno::EACCES) => return Err(busy()),
                Err(errno) => {
                    return Err(StoreError::Claim {
                        path: self.path.clone(),
                        source: errno.into(),
                    });
                }
            }
        }
        *state.slots.entry(slot).or_insert(0) += 1;
        state.sessions.insert(session.to_owned(), true);
        self.held.fetch_add(1, Ordering::SeqCst);
        let claimed = Arc::new(Claimed {
            table: Arc::clone(self),
            session: session.to_owned(),
            slot,
        });
        Ok(SessionClaim {
            _input: Some(Arc::new(InputMark(Arc::clone(&claimed)))),
            claimed,
        })
    }

    /// How many sessions this handle holds: one per input running through
    /// it. The store commits on a worker only while the caller is alone
    /// (`Store::lead_inline`).
    pub(super) fn held(&self) -> usize {
        self.held.load(Ordering::SeqCst)
    }

    /// Whether this handle holds `session` through writes only, its
    /// input gone (see [`Store::own_claim_released`]).
    fn held_by_writes(&self, session: &str) -> bool {
        if self.held() == 0 {
            return false;
        }
        let state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        state.sessions.get(session) == Some(&false)
    }

    fn input_ended(&self, session: &str) {
        let mut state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(input_runs) = state.sessions.get_mut(session) {
            *input_runs = false;
        }
    }

    fn release(&self, session: &str, slot: i64) {
        let mut state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        if state.sessions.remove(session).is_some() {
            self.held.fetch_sub(1, Ordering::SeqCst);
            self.released.notify_waiters();
        }
        match state.slots.get_mut(&slot) {
            Some(held) if *held > 1 => {
                *held -= 1;
                return;
            }
            Some(_) => {
                state.slots.remove(&slot);
            }
            None => return,
        }
        if let Some(file) = &state.file
            && let Err(errno) = set_lock(file, slot, Lock::Unlocked)
        {
            // Only a broken descriptor fails here; the lock then goes when
            // the handle is closed, and other processes see the session
            // busy until then.
            tracing::warn!(path = %self.path.display(), %errno, "could not release a session claim");
        }
    }
}

impl Store {
    /// The file whose bytes are the session claims, beside the store file.
    pub fn claims_file(&self) -> &Path {
        &self.claims.path
    }

    /// Claims `session` for one input, or fails with
    /// [`StoreError::SessionBusy`] when it is claimed (by another process,
    /// another handle, or this one). Never waits. See the module docs.
    pub fn claim_session(&self, session: &str) -> Result<SessionClaim, StoreError> {
        validate_session_id(session)?;
        self.claims.claim(session, claim_slot(session))
    }

    /// Waits, at most `patience`, while this handle holds `session`
    /// through the writes of an input that has ended, and fails with
    /// [`StoreError::SessionWriting`] if it still does then. Such a write
    /// was left held or queued by an input that ended early (it panicked,
    /// or its future was dropped) and lets go once committed: the next
    /// input then loads a history that has it. Refused at once instead, it
    /// was told the session was busy in another process. A session whose
    /// input is still running here, or held by another handle or process,
    /// is not waited for (see the module docs).
    pub(super) async fn own_claim_released(
        &self,
        session: &str,
        patience: Duration,
    ) -> Result<(), StoreError> {
        // The usual case, asked without registering a waiter: every input
        // opens through here.
        if !self.claims.held_by_writes(session) {
            return Ok(());
        }
        let deadline = tokio::time::Instant::now() + patience;
        loop {
            let released = self.claims.released.notified();
            tokio::pin!(released);
            // Registered before the check, so a release between the two
            // still wakes it.
            released.as_mut().enable();
            if !self.claims.held_by_writes(session) {
                return Ok(());
            }
            if tokio::time::timeout_at(deadline, released).await.is_err() {
                return Err(StoreError::SessionWriting {
                    id: session.to_owned(),
                });
            }
        }
    }
}

/// The byte of the lock file that stands for `session`: FNV-1a (64-bit) of
/// the id's bytes, shifted down to 62 bits so the byte and its end fit in
/// a file offset. Stable across versions (see the module docs).
pub fn claim_slot(session: &str) -> i64 {
    const OFFSET_BASIS: u64 = 0xcbf2_9ce4_8422_2325;
    const PRIME: u64 = 0x0000_0100_0000_01b3;
    let hash = session.bytes().fold(OFFSET_BASIS, |hash, byte| {
        (hash ^ u64::from(byte)).wrapping_mul(PRIME)
    });
    // Fits: 62 bits.
    (hash >> 2) as i64
}

#[derive(Debug, Clone, Copy)]
enum Lock {
    Exclusive,
    Unlocked,
}

/// Sets or clears the lock on byte `slot` of `file`, without waiting.
fn set_lock(file: &File, slot: i64, lock: Lock) -> Result<(), Errno> {
    let kind = match lock {
        Lock::Exclusive => libc::F_WRLCK,
        Lock::Unlocked => libc::F_UNLCK,
    };
    let request = libc::flock {
        l_type: kind as libc::c_short,
        l_whence: libc::SEEK_SET as libc::c_short,
        l_start: slot,
        l_len: 1,
        // Must be 0 for an open file description lock.
        l_pid: 0,
    };
    #[cfg(any(target_os = "linux", target_os = "android"))]
    let arg = FcntlArg::F_OFD_SETLK(&request);
    #[cfg(not(any(target_os = "linux", target_os = "android")))]
    let arg = FcntlArg::F_SETLK(&request);
    fcntl(file, arg).map(drop)
}

fn open(path: &Path) -> std::io::Result<File> {
    // Read and write: an exclusive record lock needs a descriptor open for
    // writing. Nothing is ever written.
    OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(path)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)] // a panic in a test is a test failure

    use super::*;
    use crate::store::testing::temp_store;

    fn busy<T: std::fmt::Debug>(result: Result<T, StoreError>) -> bool {
        matches!(result, Err(StoreError::SessionBusy { .. }))
    }

    /// Published FNV-1a 64 test vectors, shifted as `claim_slot` does.
    #[test]
    fn the_slot_is_fnv_1a_of_the_id_in_62_bits() {
        assert_eq!(claim_slot(""), (0xcbf2_9ce4_8422_2325_u64 >> 2) as i64);
        assert_eq!(claim_slot("a"), (0xaf63_dc4c_8601_ec8c_u64 >> 2) as i64);
        assert_eq!(
            claim_slot("foobar"),
            (0x8594_4171_f739_67e8_u64 >> 2) as i64
        );
        assert!(claim_slot("session-with-a-long-id-0123456789") >= 0);
    }

    /// Two ids on one byte (a hash collision) share its lock: another
    /// handle stays refused until both are released.
    #[test]
    fn ids_that_share_a_slot_hold_it_until_the_last_is_released() {
        let temp = temp_store("claim-collision");
        let mine = Arc::new(ClaimTable::new(temp.store.claims_file().to_owned()));
        let other = Arc::new(ClaimTable::new(temp.store.claims_file().to_owned()));
        let a = mine.claim("a", 7).unwrap();
        let b = mine.claim("b", 7).unwrap();
        assert!(busy(mine.claim("a", 7)), "the same id twice");
        assert!(busy(other.claim("c", 7)));
        drop(a);
        assert!(busy(other.claim("c", 7)), "released with the first id");
        drop(b);
        let c = other.claim("c", 7).unwrap();
        assert!(busy(mine.claim("a", 7)));
        // Other bytes are independent.
        drop(mine.claim("d", 8).unwrap());
        drop(c);
    }
}
