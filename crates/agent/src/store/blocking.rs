//! Store calls from async code: on tokio's blocking pool, a few at a time.
//!
//! The store is synchronous. A call takes the one connection's lock, and a
//! write waits for its group's fsync, so async code must not make the call
//! on a runtime worker (on a 2-core machine two waits would stall every
//! session). It runs the call on tokio's blocking pool instead. But the
//! pool gives each call a thread of its own and grows to 512, and under
//! load every running session has a call waiting for the connection: in
//! the bench's blast (240 sessions at once) the agent ran 255 threads, all
//! but one waiting on the same lock. Each new thread also got an allocator
//! heap whose first pages the kernel had to zero, and waking and parking
//! them cost more: 14 % of the agent's CPU went to zeroing pages alone.
//!
//! [`Store::call`] lets [`CALLS_AT_ONCE`] calls onto the pool at a time; the
//! others wait as futures, first come first served (tokio's semaphore is
//! fair), and hold no thread.
//!
//! Appends from async code ([`Store::append_async`]) do not wait for a
//! place at all: they join the group-commit queue at once and wait for
//! their answer, while one leader task commits group after group. Had they
//! queued only once they held a place, no group could carry more than
//! [`CALLS_AT_ONCE`] writes: the blast committed 1.4 writes per fsync that
//! way, and 21 this way. With `sync = "normal"` an append commits on its
//! caller's worker when the connection and SQLite's write lock are free
//! (`Store::lead_inline`): no fsync to wait for, and no trip to the pool.
//!
//! The permit travels with the call onto its thread, so a caller that stops
//! waiting (a client hung up) does not let another call in while its own
//! still runs.

use std::ops::RangeInclusive;
use std::sync::Arc;

use homeagent_core::Message;

use super::group::{Job, WriteOp};
use super::messages::{append_creating_op, append_op, appended, results_op};
use super::{EventRow, Store, StoreError};

/// Store calls running on the blocking pool at once, per store. All of
/// them share one connection, so more would only wait; a few in flight
/// keep the next group of writes forming while one group commits. On the
/// 2-core bench machine 2 and 4 did best, 8 and 16 used more CPU
/// (docs/BENCHMARKS.md, scenario 2).
pub const CALLS_AT_ONCE: usize = 4;

impl Store {
    /// Runs `calls` on tokio's blocking pool once one of the
    /// [`CALLS_AT_ONCE`] places is free, and returns what it returned. Use
    /// this, not the store's methods directly, from async code.
    pub async fn call<T, F>(self: &Arc<Self>, calls: F) -> Result<T, StoreError>
    where
        T: Send + 'static,
        F: FnOnce(&Store) -> Result<T, StoreError> + Send + 'static,
    {
        let permit = Arc::clone(&self.calls_at_once)
            .acquire_owned()
            .await
            .map_err(|closed| StoreError::CallFailed {
                detail: closed.to_string(),
            })?;
        let store = Arc::clone(self);
        let ran = tokio::task::spawn_blocking(move || {
            let answer = calls(&store);
            drop(permit);
            answer
        })
        .await;
        ran.unwrap_or_else(|join| {
            Err(StoreError::CallFailed {
                detail: join.to_string(),
            })
        })
    }
}

impl Store {
    /// [`Store::append_messages_with_events`] for async code. The write
    /// joins the group-commit queue at once and the caller waits for its
    /// answer without holding a place or a thread; one leader task at a
    /// time (`Store::lead`) commits group after group on the blocking
    /// pool. While one group commits every session's write waits for the
    /// next, and that group carries them all with one fsync. With
    /// [`Durability::Normal`](super::Durability::Normal) the caller commits
    /// on its own worker instead when nothing there can wait (see
    /// `Store::lead_inline`). Once queued, the write is committed even if
    /// the caller stops waiting (unless the runtime shuts down first: then
    /// it is answered with an error).
    pub async fn append_async(
        self: &Arc<Self>,
        session: &str,
        messages: &[Message],
        events: Vec<EventRow>,
    ) -> Result<RangeInclusive<i64>, StoreError> {
        self.queue_append(session, messages, events)?
            .committed()
            .await
    }

    /// [`Store::append_async`] in two steps: the write is queued and its
    /// commit set going now, as `append_async` would, and waited for
    /// later.
    pub fn queue_append(
        self: &Arc<Self>,
        session: &str,
        messages: &[Message],
        events: Vec<EventRow>,
    ) -> Result<QueuedAppend, StoreError> {
        Ok(self.start_commit(append_op(session, messages, events)?))
    }

    /// [`Store::append_async`] for the first write of an input, whose
    /// session may not exist yet: it is created for `agent` in the same
    /// transaction as `messages`, so an input that opens a session (every
    /// request of a client that names none) waits for one commit there,
    /// not two. A session of another agent is refused
    /// ([`StoreError::AgentMismatch`]) and nothing is written.
    pub async fn append_async_creating(
        self: &Arc<Self>,
        session: &str,
        agent: &str,
        messages: &[Message],
    ) -> Result<RangeInclusive<i64>, StoreError> {
        self.commit_queued(append_creating_op(session, agent, messages)?)
            .await
    }

    /// A tool batch's `results` and its `events`, queued for the group
    /// commit now and awaited later ([`QueuedAppend::committed`]). With
    /// `sync = "normal"` and the caller alone, the commit runs on the async
    /// worker once the caller awaits something else (see
    /// `start_commit_after_yield`). The events are diagnostics: if SQLite
    /// refuses them, the results commit without them (and a warning is
    /// logged). The runtime holds its results instead, for its next write
    /// to carry ([`Store::hold_results`]).
    pub fn queue_results(
        self: &Arc<Self>,
        session: &str,
        results: &[Message],
        events: Vec<EventRow>,
    ) -> Result<QueuedAppend, StoreError> {
        Ok(self.start_commit_after_yield(results_op(session, results, events)?))
    }

    /// Queues `op` for the group commit, makes sure it is committed — here
    /// when that cannot block ([`Store::commit_inline`]), else by a leader
    /// task — and waits for its answer.
    async fn commit_queued(
        self: &Arc<Self>,
        op: WriteOp,
    ) -> Result<RangeInclusive<i64>, StoreError> {
        self.start_commit(op).committed().await
    }

    /// Queues `op` and makes sure something commits it: this caller, when
    /// that cannot block, or a leader task.
    pub(super) fn start_commit(self: &Arc<Self>, op: WriteOp) -> QueuedAppend {
        let queued = self.queue_only(op);
        self.ensure_leader();
        queued
    }

    /// Queues `op` for the next group without seeing to its commit: the
    /// caller calls [`Store::ensure_leader`] next.
    pub(super) fn queue_only(&self, op: WriteOp) -> QueuedAppend {
        QueuedAppend {
            job: self.queue(op),
        }
    }

    /// Makes sure the queued writes have a leader: this caller, when that
    /// cannot block, or a leader task.
    pub(super) fn ensure_leader(self: &Arc<Self>) {
        if self.writes.take_lead() && !self.lead_inline() {
            self.spawn_leader();
        }
    }

    /// [`Store::start_commit`] for a write the caller does not wait for
    /// yet: a commit on the async worker ([`Store::lead_inline`]) runs in
    /// a task of its own, once the caller has sent its model request and
    /// awaits the answer, so the request does not wait for the commit and
    /// the commit overlaps the model's work.
    pub(super) fn start_commit_after_yield(self: &Arc<Self>, op: WriteOp) -> QueuedAppend {
        let job = self.queue(op);
        if self.writes.take_lead() {
            if self.may_commit_inline() {
                // Dropped unpolled (the runtime shutting down), the task
                // still answers the write and frees the role.
                let stopped = LeaderStopped(Some(Arc::clone(self)));
                let store = Arc::clone(self);
                tokio::spawn(async move {
                    stopped.disarm();
                    if !store.lead_inline() {
                        store.spawn_leader();
                    }
                });
            } else {
                self.spawn_leader();
            }
        }
        QueuedAppend { job }
    }

    /// For a caller holding the leader's role: with
    /// [`Durability::Normal`](super::Durability::Normal) a commit waits for
    /// no disk, so the queued writes are committed right here on the async
    /// worker, when the connection and SQLite's write lock are free. A trip
    /// to the blocking pool and back costs several thread switches, which
    /// on a small VM cost more than the commit (docs/BENCHMARKS.md). Gives
    /// the role up after, or hands it to a leader task when a write
    /// arrived meanwhile; a checkpoint the commit put off goes to the pool.
    /// False, still leading, when it did not commit.
    ///
    /// Only while the caller is alone: with other inputs running, the pool
    /// commits in parallel with the worker they all share and groups their
    /// writes, which under load beats saving a few switches (the blast of
    /// docs/BENCHMARKS.md ran slower with every commit on the worker).
    fn lead_inline(self: &Arc<Self>) -> bool {
        if !self.may_commit_inline() {
            return false;
        }
        // Should the commit panic, the queue is answered and the role freed.
        let stopped = LeaderStopped(Some(Arc::clone(self)));
        let committed = self.commit_inline();
        stopped.disarm();
        if !committed {
            return false;
        }
        if self.give_up_lead() {
            self.spawn_leader();
        }
        if self.wal.take_due() {
            let store = Arc::clone(self);
            tokio::spawn(async move {
                if let Err(error) = store.call(Store::checkpoint_wal).await {
                    tracing::debug!(%error, "a WAL checkpoint put off by a commit did not run");
                }
            });
        }
        true
    }

    /// Whether a commit may run on the caller's async worker: it waits
    /// for no disk (`sync = "normal"`) and the caller's input is the only
    /// one running through this handle (see [`Store::lead_inline`]).
    fn may_commit_inline(&self) -> bool {
        self.commits_inline && self.claims.held() <= 1
    }

    /// Starts the leader task ([`Store::lead`] on the blocking pool); the
    /// caller holds the role.
    fn spawn_leader(self: &Arc<Self>) {
        let store = Arc::clone(self);
        tokio::spawn(async move {
            let stopped = LeaderStopped(Some(Arc::clone(&store)));
            let led = store
                .call(|store| {
                    store.lead();
                    Ok(())
                })
                .await;
            if let Err(error) = led {
                let detail = error.to_string();
                store.fail_queued(|| StoreError::CallFailed {
                    detail: detail.clone(),
                });
            }
            stopped.disarm();
        });
    }
}

/// An append queued for the group commit ([`Store::queue_append`]).
/// It is committed whether or not anyone waits for it (unless the runtime
/// shuts down first).
#[must_use = "await `committed`: the write may have failed"]
#[derive(Debug)]
pub struct QueuedAppend {
    job: Arc<Job>,
}

impl QueuedAppend {
    /// Waits for the commit; the sequence numbers the messages got.
    pub async fn committed(self) -> Result<RangeInclusive<i64>, StoreError> {
        appended(self.job.answered().await?)
    }
}

/// Held by the leader (task, or inline commit): dropped before the leader
/// ends (the runtime is shutting down, or a commit panicked), it answers
/// the queued writes and frees the leader's role, so no later write waits
/// on a leader that will never run.
struct LeaderStopped(Option<Arc<Store>>);

impl LeaderStopped {
    fn disarm(mut self) {
        self.0 = None;
    }
}

impl Drop for LeaderStopped {
    fn drop(&mut self) {
        if let Some(store) = self.0.take() {
            store.fail_queued(|| StoreError::CallFailed {
                detail: "the store's writer task was stopped (the runtime is shutting down)".into(),
            });
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
    use std::time::Duration;

    use super::*;

    use crate::store::group::GiveUpHook;
    use crate::store::testing::{temp_store, temp_store_with};
    use crate::store::{Durability, WriteStats};

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn at_most_calls_at_once_run_together_and_every_call_is_answered() {
        let temp = temp_store("peak");
        let running = Arc::new(AtomicUsize::new(0));
        let peak = Arc::new(AtomicUsize::new(0));
        let calls = CALLS_AT_ONCE * 8;
        let mut tasks = tokio::task::JoinSet::new();
        for i in 0..calls {
            let (store, running, peak) = (
                Arc::clone(&temp.store),
                Arc::clone(&running),
                Arc::clone(&peak),
            );
            tasks.spawn(async move {
                store
                    .call(move |_| {
                        let now = running.fetch_add(1, Ordering::SeqCst) + 1;
                        peak.fetch_max(now, Ordering::SeqCst);
                        std::thread::sleep(Duration::from_millis(10));
                        running.fetch_sub(1, Ordering::SeqCst);
                        Ok(i)
                    })
                    .await
            });
        }
        let mut answers = Vec::new();
        while let Some(joined) = tasks.join_next().await {
            answers.push(joined.unwrap().unwrap());
        }
        answers.sort_unstable();
        assert_eq!(answers, (0..calls).collect::<Vec<_>>());
        // Reaching the limit shows calls do run side by side (a group of
        // writes can form); never passing it is the point.
        assert_eq!(peak.load(Ordering::SeqCst), CALLS_AT_ONCE);
    }

    /// Fills every place with a call that runs (writing nothing) until the
    /// returned flag is set; returns once all of them are running.
    async fn take_every_place(
        store: &Arc<Store>,
    ) -> (
        Arc<AtomicBool>,
        Vec<tokio::task::JoinHandle<Result<(), StoreError>>>,
    ) {
        let released = Arc::new(AtomicBool::new(false));
        let started = Arc::new(AtomicUsize::new(0));
        let mut calls = Vec::new();
        for _ in 0..CALLS_AT_ONCE {
            let (store, released, started) = (
                Arc::clone(store),
                Arc::clone(&released),
                Arc::clone(&started),
            );
            calls.push(tokio::spawn(async move {
                store
                    .call(move |_| {
                        started.fetch_add(1, Ordering::SeqCst);
                        while !released.load(Ordering::SeqCst) {
                            std::thread::sleep(Duration::from_millis(1));
                        }
                        Ok(())
                    })
                    .await
            }));
        }
        while started.load(Ordering::SeqCst) < CALLS_AT_ONCE {
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        (released, calls)
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_caller_that_stops_waiting_keeps_its_place_until_its_call_ends() {
        let temp = temp_store("abandon");
        let (released, waiting) = take_every_place(&temp.store).await;
        // Every caller gives up; their calls still run.
        for task in &waiting {
            task.abort();
        }
        let later = {
            let (store, released) = (Arc::clone(&temp.store), Arc::clone(&released));
            tokio::spawn(async move {
                store
                    .call(move |_| Ok(released.load(Ordering::SeqCst)))
                    .await
            })
        };
        // Time enough for the later call to run, were a place free.
        tokio::time::sleep(Duration::from_millis(50)).await;
        released.store(true, Ordering::SeqCst);
        let ran_after_release = later.await.unwrap().unwrap();
        assert!(
            ran_after_release,
            "a call ran while the abandoned calls still held every place"
        );
    }

    /// Appends from async code join the write queue at once, not when a
    /// place is free: while one group commits, every session's write waits
    /// for the next, and that group carries all of them with one fsync.
    /// With only the callers holding a place queued, groups could never be
    /// larger than `CALLS_AT_ONCE` (the blast saw 1.4 writes per commit).
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn async_appends_queue_at_once_and_share_one_commit() {
        let temp = temp_store("queued");
        let writers = CALLS_AT_ONCE * 10;
        let sessions: Vec<String> = (0..writers).map(|i| format!("s{i}")).collect();
        for session in &sessions {
            temp.store.ensure_session(session, "main").unwrap();
        }
        let before = temp.store.write_stats();
        let held = temp.store.lock();
        let mut tasks = tokio::task::JoinSet::new();
        for session in &sessions {
            let (store, session) = (Arc::clone(&temp.store), session.clone());
            tasks.spawn(async move {
                let message = Message::user(format!("to {session}"));
                store.append_async(&session, &[message], Vec::new()).await
            });
        }
        let deadline = std::time::Instant::now() + Duration::from_secs(20);
        while temp.store.writes.len() < writers {
            assert!(
                std::time::Instant::now() < deadline,
                "only {} of {writers} writes were queued while the connection was held",
                temp.store.writes.len()
            );
            // The tasks run on the runtime's workers; this thread only
            // holds the connection.
            std::thread::sleep(Duration::from_millis(2));
        }
        drop(held);
        while let Some(joined) = tasks.join_next().await {
            assert_eq!(joined.unwrap().unwrap(), 1..=1);
        }
        assert_eq!(
            temp.store.write_stats(),
            WriteStats {
                commits: before.commits + 1,
                writes: before.writes + writers as u64,
            }
        );
        for session in &sessions {
            assert_eq!(
                temp.store.history(session).unwrap(),
                vec![Message::user(format!("to {session}"))]
            );
        }
    }

    /// Once queued, a write is committed even if its caller stops waiting
    /// for a place: it is not left in the queue for whichever write comes
    /// next.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_queued_append_is_committed_after_its_caller_gives_up() {
        let temp = temp_store("queued-abandon");
        temp.store.ensure_session("s", "main").unwrap();
        // Every place taken by a call that writes nothing.
        let (released, places) = take_every_place(&temp.store).await;
        let store = Arc::clone(&temp.store);
        let caller = tokio::spawn(async move {
            store
                .append_async("s", &[Message::user("kept")], Vec::new())
                .await
        });
        while temp.store.writes.is_empty() {
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        caller.abort();
        assert!(caller.await.unwrap_err().is_cancelled());
        released.store(true, Ordering::SeqCst);
        for place in places {
            place.await.unwrap().unwrap();
        }
        let deadline = std::time::Instant::now() + Duration::from_secs(20);
        loop {
            let history = temp.store.history("s").unwrap();
            if !history.is_empty() {
                assert_eq!(history, vec![Message::user("kept")]);
                break;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "the abandoned write was never committed"
            );
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }

    /// Writers keep arriving while the leader finishes: each must find a
    /// leader (the one running, or one it starts), or it waits forever.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn every_async_append_is_answered_while_leaders_come_and_go() {
        let temp = temp_store("queued-stress");
        let (sessions, each) = (16, 60);
        for s in 0..sessions {
            temp.store.ensure_session(&format!("s{s}"), "main").unwrap();
        }
        let mut tasks = tokio::task::JoinSet::new();
        for s in 0..sessions {
            let store = Arc::clone(&temp.store);
            tasks.spawn(async move {
                let session = format!("s{s}");
                for i in 0..each {
                    let message = Message::user(format!("{i}"));
                    let answer = tokio::time::timeout(
                        Duration::from_secs(20),
                        store.append_async(&session, &[message], Vec::new()),
                    )
                    .await
                    .unwrap_or_else(|_| panic!("append {i} of {session} was never answered"));
                    assert_eq!(answer.unwrap(), i + 1..=i + 1);
                    // A pause now and then lets the leader see the queue
                    // empty and give up its role.
                    if i % 7 == s % 7 {
                        tokio::time::sleep(Duration::from_millis(1)).await;
                    }
                }
            });
        }
        while let Some(joined) = tasks.join_next().await {
            joined.unwrap();
        }
        for s in 0..sessions {
            let history = temp.store.history(&format!("s{s}")).unwrap();
            let expected: Vec<Message> = (0..each).map(|i| Message::user(format!("{i}"))).collect();
            assert_eq!(history, expected);
        }
    }

    /// When the leader task cannot run (its store call fails), the writes
    /// it would have carried get that failure instead of waiting forever,
    /// and the next write may start a leader again.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn writes_get_an_error_when_no_leader_can_run() {
        let temp = temp_store("no-leader");
        temp.store.ensure_session("s", "main").unwrap();
        temp.store.calls_at_once.close();
        let answer = tokio::time::timeout(
            Duration::from_secs(20),
            temp.store
                .append_async("s", &[Message::user("lost")], Vec::new()),
        )
        .await
        .expect("the write was never answered");
        assert!(
            matches!(answer, Err(StoreError::CallFailed { .. })),
            "{answer:?}"
        );
        assert!(temp.store.writes.is_empty());
        // The task answers the queue, then gives up the role: on another
        // worker, a moment after the answer arrives here.
        let deadline = std::time::Instant::now() + Duration::from_secs(20);
        while !temp.store.writes.take_lead() {
            assert!(
                std::time::Instant::now() < deadline,
                "the leader role was kept"
            );
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
    }

    /// A leader task dropped before it ran (its runtime shut down while it
    /// waited for a place) answers the queue and frees the role: a later
    /// write on another runtime starts a leader of its own.
    #[test]
    fn a_leader_stopped_by_its_runtime_frees_the_role() {
        let temp = temp_store("leader-shutdown");
        temp.store.ensure_session("s", "main").unwrap();
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .unwrap();
        // The stopped leader answers its queue, then gives up its role: a
        // pause between the two (where a slow machine may pause it) must
        // not let the next write in before the role is free.
        *temp.store.writes.before_giving_up.lock().unwrap() =
            Some(GiveUpHook(Box::new(|_: &Store| {
                std::thread::sleep(Duration::from_millis(200));
            })));
        let released = runtime.block_on(async {
            let (released, _places) = take_every_place(&temp.store).await;
            let store = Arc::clone(&temp.store);
            tokio::spawn(async move {
                store
                    .append_async("s", &[Message::user("never")], Vec::new())
                    .await
            });
            while temp.store.writes.is_empty() {
                tokio::time::sleep(Duration::from_millis(1)).await;
            }
            released
        });
        // The workers drop their tasks as they stop, after this returns.
        runtime.shutdown_background();
        // Answered, then the role given up: both, before the next write.
        let deadline = std::time::Instant::now() + Duration::from_secs(20);
        while !temp.store.writes.is_empty() || temp.store.writes.is_leading() {
            assert!(
                std::time::Instant::now() < deadline,
                "the queued write was left, or the role kept"
            );
            std::thread::sleep(Duration::from_millis(2));
        }
        released.store(true, Ordering::SeqCst);
        // With the role kept, this write would start no leader and hang.
        let again = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let appended = again.block_on(async {
            tokio::time::timeout(
                Duration::from_secs(20),
                temp.store
                    .append_async("s", &[Message::user("later")], Vec::new()),
            )
            .await
        });
        assert_eq!(appended.unwrap().unwrap(), 1..=1);
    }

    /// A write queued to commit after the caller's next await
    /// (`queue_results`, `sync = "normal"`) whose commit task is dropped
    /// unpolled, as a runtime shutting down drops it, is answered with an
    /// error, and the leader's role is free for the next write.
    #[test]
    fn a_commit_task_dropped_before_it_ran_answers_its_write() {
        let temp = temp_store_with("after-yield-dropped", Durability::Normal);
        temp.store.ensure_session("s", "main").unwrap();
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let queued = runtime.block_on(async {
            temp.store
                .queue_results("s", &[Message::user("dropped")], Vec::new())
                .unwrap()
        });
        drop(runtime);
        let again = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let (answer, later) = again.block_on(async {
            let answer = tokio::time::timeout(Duration::from_secs(20), queued.committed()).await;
            let later = tokio::time::timeout(
                Duration::from_secs(20),
                temp.store
                    .append_async("s", &[Message::user("later")], Vec::new()),
            )
            .await;
            (answer, later)
        });
        let answer = answer.expect("the dropped commit's write was never answered");
        assert!(
            matches!(answer, Err(StoreError::CallFailed { .. })),
            "{answer:?}"
        );
        assert_eq!(later.unwrap().unwrap(), 1..=1);
    }
}
