//! Work that may block in the kernel for ever, on a thread of its own.
//!
//! A file system call on an unresponsive mount (a hard NFS mount whose
//! server is gone, a dead sshfs) blocks for as long as the mount is gone;
//! nothing can interrupt it. `cmd_run`'s checks resolve paths and the files
//! tools read, list and write them. On an async worker such a call stopped
//! every other task of that worker with it; on tokio's blocking pool it
//! kept one of the pool's few threads (8 in the agent and the waiter) for
//! good, so a handful of retried calls took every thread, and with them
//! everything else the pool serves: the store's reads and commits, a
//! reconnecting waiter's DNS lookup.
//!
//! Here each piece of work gets a thread of its own, so the pool never
//! holds one. A caller that stops waiting (its timeout) leaves the thread
//! to the kernel, and the thread is counted as stuck until its call
//! returns; past [`ThreadBudget::max_stuck`] such threads, new work is
//! refused at once instead of leaving one more behind. Each kind of work
//! has its own budget, so blocked file calls do not refuse commands.

use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::sync::atomic::{AtomicU8, AtomicUsize, Ordering};

/// How many threads of abandoned work may be blocked at once.
#[derive(Debug)]
pub(crate) struct ThreadBudget {
    stuck: AtomicUsize,
    max_stuck: usize,
}

impl ThreadBudget {
    pub(crate) const fn new(max_stuck: usize) -> Self {
        ThreadBudget {
            stuck: AtomicUsize::new(0),
            max_stuck,
        }
    }

    /// Threads whose caller stopped waiting and whose work has not
    /// returned yet.
    pub(crate) fn stuck(&self) -> usize {
        self.stuck.load(Ordering::SeqCst)
    }
}

/// Why work run by [`off_thread`] gave no answer.
#[derive(Debug, thiserror::Error)]
pub(crate) enum OffThreadError {
    #[error(
        "{stuck} earlier calls of its kind are still blocked in the kernel (a path on an \
         unresponsive mount?), the most left waiting at once"
    )]
    TooManyStuck { stuck: usize },
    #[error("no thread could be started for it: {0}")]
    NoThread(std::io::Error),
    #[error("it panicked")]
    Panicked,
}

const RUNNING: u8 = 0;
const DONE: u8 = 1;
const ABANDONED: u8 = 2;

/// Runs `work` on a new thread named `name` and waits for its result.
/// Dropping the returned future before then abandons the thread, which
/// `budget` counts as stuck until `work` returns.
pub(crate) async fn off_thread<T: Send + 'static>(
    budget: &'static ThreadBudget,
    name: &str,
    work: impl FnOnce() -> T + Send + 'static,
) -> Result<T, OffThreadError> {
    off_thread_watched(budget, name, move |_| work()).await
}

/// Whether the caller of [`off_thread_watched`] still waits for the work:
/// work with effects asks before each, so that a call its caller gave up
/// on (its timeout, a stop) does not go on to write once the mount comes
/// back, after the caller was told it did not finish.
#[derive(Debug, Clone)]
pub(crate) struct Wanted(Arc<AtomicU8>);

impl Wanted {
    pub(crate) fn still(&self) -> bool {
        self.0.load(Ordering::SeqCst) != ABANDONED
    }

    /// A caller that waits, or (`false`) one that gave up.
    #[cfg(test)]
    pub(crate) fn for_test(waiting: bool) -> Wanted {
        Wanted(Arc::new(AtomicU8::new(if waiting {
            RUNNING
        } else {
            ABANDONED
        })))
    }
}

/// [`off_thread`] for work that asks whether it is still [`Wanted`].
pub(crate) async fn off_thread_watched<T: Send + 'static>(
    budget: &'static ThreadBudget,
    name: &str,
    work: impl FnOnce(&Wanted) -> T + Send + 'static,
) -> Result<T, OffThreadError> {
    let stuck = budget.stuck();
    if stuck >= budget.max_stuck {
        return Err(OffThreadError::TooManyStuck { stuck });
    }
    let state = Arc::new(AtomicU8::new(RUNNING));
    let (sender, receiver) = tokio::sync::oneshot::channel();
    let thread_state = Arc::clone(&state);
    let wanted = Wanted(Arc::clone(&state));
    std::thread::Builder::new()
        .name(name.to_owned())
        .spawn(move || {
            let result = std::panic::catch_unwind(AssertUnwindSafe(|| work(&wanted)));
            if thread_state.swap(DONE, Ordering::SeqCst) == ABANDONED {
                budget.stuck.fetch_sub(1, Ordering::SeqCst);
            }
            let _ = sender.send(result);
        })
        .map_err(OffThreadError::NoThread)?;
    let _abandon = AbandonOnDrop { state, budget };
    match receiver.await {
        Ok(Ok(value)) => Ok(value),
        // A panic, or (never) a thread gone without sending.
        Ok(Err(_)) | Err(_) => Err(OffThreadError::Panicked),
    }
}

/// Counts the thread as stuck when its caller stops waiting before it
/// returned.
struct AbandonOnDrop {
    state: Arc<AtomicU8>,
    budget: &'static ThreadBudget,
}

impl Drop for AbandonOnDrop {
    fn drop(&mut self) {
        // The usual end: the work returned (its result was read).
        if self.state.load(Ordering::SeqCst) == DONE {
            return;
        }
        // Counted first, so the thread's own decrement (when it returns
        // right now) never comes before it.
        self.budget.stuck.fetch_add(1, Ordering::SeqCst);
        let abandoned = self
            .state
            .compare_exchange(RUNNING, ABANDONED, Ordering::SeqCst, Ordering::SeqCst)
            .is_ok();
        if !abandoned {
            self.budget.stuck.fetch_sub(1, Ordering::SeqCst);
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use std::sync::atomic::AtomicBool;
    use std::sync::mpsc;
    use std::time::Duration;

    use super::*;

    /// Waits (for at most 10 s) until `budget` counts `stuck`.
    async fn stuck_becomes(budget: &ThreadBudget, stuck: usize) {
        for _ in 0..200 {
            if budget.stuck() == stuck {
                return;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        panic!("stuck stayed {}, not {stuck}", budget.stuck());
    }

    #[tokio::test]
    async fn abandoned_threads_are_counted_until_they_return_and_bounded() {
        static BUDGET: ThreadBudget = ThreadBudget::new(2);
        assert_eq!(off_thread(&BUDGET, "t", || 7).await.unwrap(), 7);
        assert_eq!(BUDGET.stuck(), 0);
        // Two pieces of work blocked until released, given up on.
        let mut releases = Vec::new();
        for _ in 0..2 {
            let (release, blocked) = mpsc::channel::<()>();
            releases.push(release);
            let gave_up = tokio::time::timeout(
                Duration::from_millis(50),
                off_thread(&BUDGET, "t", move || blocked.recv()),
            )
            .await;
            assert!(gave_up.is_err());
        }
        assert_eq!(BUDGET.stuck(), 2);
        // The third is refused without running.
        let ran = Arc::new(AtomicBool::new(false));
        let flag = Arc::clone(&ran);
        let refused = off_thread(&BUDGET, "t", move || flag.store(true, Ordering::SeqCst)).await;
        assert!(
            matches!(refused, Err(OffThreadError::TooManyStuck { stuck: 2 })),
            "{refused:?}"
        );
        assert!(!ran.load(Ordering::SeqCst));
        // Released, they return and are no longer counted.
        for release in releases {
            release.send(()).unwrap();
        }
        stuck_becomes(&BUDGET, 0).await;
        assert_eq!(off_thread(&BUDGET, "t", || 8).await.unwrap(), 8);
        assert_eq!(BUDGET.stuck(), 0);
    }

    /// Work learns when its caller stopped waiting: wanted while awaited,
    /// not once the caller gave up.
    #[tokio::test]
    async fn work_knows_whether_it_is_still_wanted() {
        static BUDGET: ThreadBudget = ThreadBudget::new(2);
        assert!(
            off_thread_watched(&BUDGET, "t", |wanted| wanted.still())
                .await
                .unwrap()
        );
        let (release, blocked) = mpsc::channel::<()>();
        let (answer, asked) = mpsc::channel::<bool>();
        let gave_up = tokio::time::timeout(
            Duration::from_millis(50),
            off_thread_watched(&BUDGET, "t", move |wanted| {
                let _ = blocked.recv();
                let _ = answer.send(wanted.still());
            }),
        )
        .await;
        assert!(gave_up.is_err());
        release.send(()).unwrap();
        assert!(
            !asked.recv().unwrap(),
            "still wanted after its caller gave up"
        );
        stuck_becomes(&BUDGET, 0).await;
    }

    #[tokio::test]
    async fn a_panic_is_an_error_and_leaves_nothing_counted() {
        static BUDGET: ThreadBudget = ThreadBudget::new(1);
        let panicked = off_thread(&BUDGET, "t", || -> u8 { panic!("boom") }).await;
        assert!(
            matches!(panicked, Err(OffThreadError::Panicked)),
            "{panicked:?}"
        );
        assert_eq!(BUDGET.stuck(), 0);
    }
}
