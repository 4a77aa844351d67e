//! Group commit: every write waiting for the connection is made durable by
//! one transaction and one fsync.
//!
//! # Why
//!
//! With `synchronous = FULL` each commit waits for the disk (an fsync of
//! the WAL). Under load — hundreds of sessions, each committing a few times
//! per input — a store that commits each write on its own spends its time
//! in a queue of fsyncs: one caller syncs while the others wait for the
//! connection, then the next syncs alone. Group commit turns that queue
//! into batches: whoever gets the connection takes *every* write queued so
//! far and commits them together, so the disk syncs once per group instead
//! of once per write, and the more callers wait, the more each sync carries.
//!
//! # How
//!
//! A write is a [`WriteOp`]: owned data, so it can wait in a queue and be
//! applied by another thread. [`Store::submit`] queues the op, then takes
//! the connection lock. When it gets the lock one of two things happened:
//!
//! - a *leader* (another caller that held the lock) already took the op
//!   with its group and committed it: its answer is waiting, return it;
//! - otherwise this caller is the leader: it drains the queue (its own op
//!   and everything queued behind it) and commits the group.
//!
//! Async callers (`Store::append_async`) queue their op the same way but
//! never take the lock themselves: they wait for the answer, and whoever
//! queues when no *leader task* runs starts one ([`Store::lead`]), which
//! commits group after group on the blocking pool until the queue is
//! empty. Threads that submit and the leader task share the one queue, so
//! either may carry the other's writes.
//!
//! Inside the group each op runs under its own `SAVEPOINT`, so an op that
//! fails (a missing session, a constraint) is rolled back alone and the
//! others commit. If the group cannot *start* because SQLite refuses the
//! write lock or the disk (another process held the lock past the busy
//! timeout, an I/O error), every op of the group gets that error at once:
//! retrying them one by one would make the last caller wait one busy
//! timeout per op ahead of it. If the group fails after it began (at a
//! savepoint or the commit), it is rolled back and every op is retried in a
//! transaction of its own, so each caller gets its own, real error.
//!
//! # Invariant
//!
//! A caller is answered only after the transaction holding its op has
//! committed (or failed): "written" always means "on disk".

use std::ops::RangeInclusive;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use homeagent_core::Message;
use rusqlite::Connection;

use super::events::{EventRow, insert_events};
use super::messages::{MessageRow, insert_rows, max_seq, stored_len};
use super::sessions::{SessionInfo, create_or_get, insert_if_new, touch};
use super::{SessionClaim, Store, StoreError, end_open_transaction};

/// A write waiting for the connection.
#[derive(Debug)]
pub(super) enum WriteOp {
    /// Insert-or-keep a session (see `Store::ensure_session`).
    EnsureSession { id: String, agent: String },
    /// Create a session seeded with messages, or leave an existing one
    /// alone (see `Store::create_seeded_session`).
    CreateSeeded {
        id: String,
        agent: String,
        rows: Vec<MessageRow>,
    },
    /// Append messages (and tool events) to a session: an existing one, or
    /// with `create_for`, one created for that agent in the same
    /// transaction if it does not exist yet (an input opening a session
    /// then costs one commit, not two).
    Append {
        session: String,
        create_for: Option<String>,
        rows: Vec<MessageRow>,
        /// The rows' messages, for the history cache once they commit;
        /// `None` when they are to be read back (see
        /// `messages::remembered_as_written`).
        remember: Option<Vec<Message>>,
        events: Vec<EventRow>,
        events_rule: EventsRule,
        /// The claim of the input that writes, kept until the write has
        /// committed (see [`SessionClaim`]); `None` for a write made
        /// outside an input.
        claim: Option<SessionClaim>,
    },
}

impl WriteOp {
    /// The bytes of JSON the write stores: its messages' and its events'.
    pub(super) fn stored_bytes(&self) -> usize {
        match self {
            WriteOp::EnsureSession { .. } => 0,
            WriteOp::CreateSeeded { rows, .. } => rows.iter().map(MessageRow::json_bytes).sum(),
            WriteOp::Append { rows, events, .. } => {
                rows.iter().map(MessageRow::json_bytes).sum::<usize>()
                    + events.iter().map(EventRow::json_bytes).sum::<usize>()
            }
        }
    }

    /// This append followed by `next`, as one append: `next` must append
    /// to the same session, and at most one of the two may carry events
    /// (the events and their rule are that one's). Both back when it
    /// cannot be.
    pub(super) fn carry(self, next: WriteOp) -> Result<WriteOp, Box<(WriteOp, WriteOp)>> {
        match (self, next) {
            (
                WriteOp::Append {
                    session,
                    create_for,
                    mut rows,
                    remember,
                    events,
                    events_rule,
                    claim,
                },
                WriteOp::Append {
                    session: next_session,
                    create_for: None,
                    rows: next_rows,
                    remember: next_remember,
                    events: next_events,
                    events_rule: next_rule,
                    claim: next_claim,
                },
            ) if session == next_session && (events.is_empty() || next_events.is_empty()) => {
                rows.extend(next_rows);
                let remember = remember.zip(next_remember).map(|(mut first, next)| {
                    first.extend(next);
                    first
                });
                let (events, events_rule) = if events.is_empty() {
                    (next_events, next_rule)
                } else {
                    (events, events_rule)
                };
                Ok(WriteOp::Append {
                    session,
                    create_for,
                    rows,
                    remember,
                    events,
                    events_rule,
                    claim: claim.or(next_claim),
                })
            }
            (op, next) => Err(Box::new((op, next))),
        }
    }
}

/// What becomes of an append whose tool events SQLite refuses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum EventsRule {
    /// The whole append fails (`Store::append_messages_with_events`).
    WithMessages,
    /// The events are left out and the messages commit: a batch's results
    /// are history, its events diagnostics (`Store::queue_results`).
    IfStorable,
}

/// What a committed [`WriteOp`] answers.
#[derive(Debug)]
pub(super) enum WriteDone {
    Session(SessionInfo),
    /// Whether `CreateSeeded` created the session.
    Created(bool),
    Appended(RangeInclusive<i64>),
}

/// One queued op and, once its group has committed, its answer.
#[derive(Debug)]
pub(super) struct Job {
    op: WriteOp,
    /// The append's messages for the history cache, taken out of `op`
    /// (the op stays shared with its caller while it commits).
    remember: Mutex<Option<Vec<Message>>>,
    /// The writing input's claim, taken out of `op` and let go once the
    /// job is answered: its session stays claimed until the write is on
    /// disk, however its input ended (see [`SessionClaim`]).
    claim: Mutex<Option<SessionClaim>>,
    answer: Mutex<Option<Result<WriteDone, StoreError>>>,
    /// Fired with the answer, for a caller waiting in async code.
    answered: tokio::sync::Notify,
}

impl Job {
    fn answer(&self, result: Result<WriteDone, StoreError>) {
        // Let go before the answer can be seen (a caller may read it
        // without waiting to be woken): an input that ends once its last
        // write is answered releases its session then, and the session's
        // next input must find it free.
        drop(
            self.claim
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .take(),
        );
        *self.answer.lock().unwrap_or_else(PoisonError::into_inner) = Some(result);
        self.answered.notify_one();
    }

    fn is_answered(&self) -> bool {
        self.answer
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .is_some()
    }

    /// Waits until the job has its answer, and takes it.
    pub(super) async fn answered(&self) -> Result<WriteDone, StoreError> {
        loop {
            if let Some(answer) = self.take_answer() {
                return answer;
            }
            self.answered.notified().await;
        }
    }

    /// Once the job's append has committed at `appended`, gives its
    /// messages to the history cache (see `Store::remember_committed`).
    fn remember(&self, store: &Store, answer: &Result<WriteDone, StoreError>) {
        if let (WriteOp::Append { session, rows, .. }, Ok(WriteDone::Appended(appended))) =
            (&self.op, answer)
            && let Some(messages) = self
                .remember
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .take()
        {
            store.remember_committed(session, *appended.start(), messages, stored_len(rows));
        }
    }

    fn take_answer(&self) -> Option<Result<WriteDone, StoreError>> {
        self.answer
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take()
    }
}

/// What [`WriteQueue::before_giving_up`] runs (tests only).
#[cfg(test)]
pub(super) struct GiveUpHook(pub Box<dyn FnOnce(&Store) + Send>);

#[cfg(test)]
impl std::fmt::Debug for GiveUpHook {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("GiveUpHook")
    }
}

/// The queue of writes waiting for the connection, and counters.
#[derive(Debug, Default)]
pub(super) struct WriteQueue {
    pending: Mutex<Vec<Arc<Job>>>,
    /// Whether a leader task is committing for async callers (see
    /// [`Store::lead`]).
    leading: AtomicBool,
    /// Runs once where a leader found the queue empty, before it gives up
    /// its role: where a writer can slip in (tests only).
    #[cfg(test)]
    pub(super) before_giving_up: Mutex<Option<GiveUpHook>>,
    commits: AtomicU64,
    writes: AtomicU64,
    /// Groups committed by `Store::commit_inline`.
    inline: AtomicU64,
    /// Inputs opened on the caller's worker (`Store::open_input_here`).
    pub(super) opened_here: AtomicU64,
    /// Transactions attempted (groups and lone retries), for the tests.
    #[cfg(test)]
    attempts: AtomicU64,
}

impl WriteQueue {
    fn push(&self, job: Arc<Job>) {
        self.pending
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(job);
    }

    fn drain(&self) -> Vec<Arc<Job>> {
        std::mem::take(&mut *self.pending.lock().unwrap_or_else(PoisonError::into_inner))
    }

    pub(super) fn is_empty(&self) -> bool {
        self.pending
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .is_empty()
    }

    /// Whether a leader holds the role (tests only).
    #[cfg(test)]
    pub(super) fn is_leading(&self) -> bool {
        self.leading.load(Ordering::SeqCst)
    }

    pub(super) fn inline_commits(&self) -> u64 {
        self.inline.load(Ordering::Relaxed)
    }

    /// Claims the leader's role; false when a leader is already running.
    pub(super) fn take_lead(&self) -> bool {
        !self.leading.swap(true, Ordering::SeqCst)
    }

    #[cfg(test)]
    pub(super) fn len(&self) -> usize {
        self.pending
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .len()
    }
}

/// How many transactions committed writes, and how many writes they held;
/// `writes / commits` is the average group size.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct WriteStats {
    /// Transactions committed by the group-commit path.
    pub commits: u64,
    /// Writes those transactions committed.
    pub writes: u64,
}

impl Store {
    /// Queues `op`, then commits it — with every other write queued by then
    /// — or collects the answer a leader already committed for it.
    pub(super) fn submit(&self, op: WriteOp) -> Result<WriteDone, StoreError> {
        let job = self.queue(op);
        let mut conn = self.lock();
        if let Some(answer) = job.take_answer() {
            return answer;
        }
        let group = self.writes.drain();
        self.commit_group(&mut conn, &group, Begin::Now);
        drop(conn);
        // The drained group holds this job (it was queued before the lock
        // was taken, and a leader that drained it answered it before
        // letting the lock go), so it has its answer. One exception: a
        // failed leader task's `fail_queued` drains without the lock, and
        // may not have answered yet; the write was not applied either way.
        job.take_answer()
            .unwrap_or(Err(StoreError::WriteNotApplied))
    }

    /// Puts `op` in the queue for the next group, where the caller that
    /// leads next ([`Store::submit`]) or the leader task ([`Store::lead`])
    /// takes it. Queueing first, from async code too, lets a write join a
    /// group before its caller has a thread to wait on.
    pub(super) fn queue(&self, mut op: WriteOp) -> Arc<Job> {
        let (remember, claim) = match &mut op {
            WriteOp::Append {
                remember, claim, ..
            } => (remember.take(), claim.take()),
            _ => (None, None),
        };
        let job = Arc::new(Job {
            op,
            remember: Mutex::new(remember),
            claim: Mutex::new(claim),
            answer: Mutex::new(None),
            answered: tokio::sync::Notify::new(),
        });
        self.writes.push(Arc::clone(&job));
        job
    }

    /// Commits group after group until the queue is empty, letting the
    /// connection go between groups so reads get in. Run by one task at a
    /// time, for writes queued from async code (see
    /// `Store::append_async`); whoever queues a write when no leader runs
    /// starts one. The role is given up only after the queue was seen
    /// empty, and taken back if a write arrived meanwhile, so a queued
    /// write always has a leader.
    pub(super) fn lead(&self) {
        loop {
            let group = {
                let mut conn = self.lock();
                let group = self.writes.drain();
                self.commit_group(&mut conn, &group, Begin::Now);
                group
            };
            if !group.is_empty() {
                continue;
            }
            if !self.give_up_lead() {
                return;
            }
        }
    }

    /// Commits the queued writes on the calling thread, for a caller that
    /// holds the leader's role on an async worker, when that cannot block:
    /// the connection is free and SQLite's write lock is had at once
    /// (another process holding it would otherwise stall the worker for up
    /// to [`BUSY_TIMEOUT`](super::BUSY_TIMEOUT)). WAL checkpoints are put
    /// off meanwhile (`checkpoint.rs`). Only for
    /// [`Durability::Normal`](super::Durability::Normal), where a commit
    /// waits for no disk; see `Store::append_async`. False, with nothing
    /// taken from the queue, when it could not.
    pub(super) fn commit_inline(&self) -> bool {
        let mut conn = match self.conn.try_lock() {
            // A transaction left open (a panic) is for `lock` to clean up.
            Ok(conn) if conn.is_autocommit() => conn,
            _ => return false,
        };
        if conn.busy_timeout(std::time::Duration::ZERO).is_err() {
            return false;
        }
        let began = execute(&conn, "BEGIN IMMEDIATE");
        let restored = conn.busy_timeout(super::BUSY_TIMEOUT);
        if began.is_err() || restored.is_err() {
            end_open_transaction(&conn);
            return false;
        }
        let group = self.writes.drain();
        let _deferring = self.wal.defer();
        self.commit_group(&mut conn, &group, Begin::Done);
        self.writes.inline.fetch_add(1, Ordering::Relaxed);
        true
    }

    /// Gives up the leader's role after the queue was seen empty. A write
    /// queued meanwhile saw a leader and started none, so look again: true
    /// when one did arrive and the role was taken back (go on leading).
    pub(super) fn give_up_lead(&self) -> bool {
        #[cfg(test)]
        if let Some(hook) = self
            .writes
            .before_giving_up
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take()
        {
            (hook.0)(self);
        }
        self.writes.leading.store(false, Ordering::SeqCst);
        !self.writes.is_empty() && self.writes.take_lead()
    }

    /// Answers every queued write with `error` and gives up the leader's
    /// role: the leader task could not run, or was stopped (see
    /// `Store::append_async`). Writes that arrive while it gives up get
    /// the same answer, as [`Store::lead`] would carry them.
    pub(super) fn fail_queued(&self, error: impl Fn() -> StoreError) {
        loop {
            for job in self.writes.drain() {
                job.answer(Err(error()));
            }
            if !self.give_up_lead() {
                return;
            }
        }
    }

    /// Counters of the group-commit path since the store was opened.
    pub fn write_stats(&self) -> WriteStats {
        WriteStats {
            commits: self.writes.commits.load(Ordering::Relaxed),
            writes: self.writes.writes.load(Ordering::Relaxed),
        }
    }

    fn commit_group(&self, conn: &mut Connection, group: &[Arc<Job>], begin: Begin) {
        if group.is_empty() {
            if begin == Begin::Done {
                end_open_transaction(conn);
            }
            return;
        }
        // A panic below must not leave an async caller waiting forever for
        // an answer no one will give.
        let _unanswered = AnswerLeft(group);
        #[cfg(test)]
        self.writes.attempts.fetch_add(1, Ordering::Relaxed);
        match run_group(conn, group, begin) {
            Ok(answers) => {
                self.count_commit(answers.iter().filter(|a| a.is_ok()).count());
                for (job, answer) in group.iter().zip(answers) {
                    job.remember(self, &answer);
                    job.answer(answer);
                }
                return;
            }
            // The write lock could not be had (another process held it past
            // the busy timeout) or the disk refused: every write of the group
            // would fail the same way, and retrying them one by one would make
            // the last caller wait one busy timeout per write ahead of it.
            Err(GroupFailure::NotStarted(StoreError::Sqlite(rusqlite::Error::SqliteFailure(
                code,
                message,
            )))) => {
                let failure =
                    || StoreError::Sqlite(rusqlite::Error::SqliteFailure(code, message.clone()));
                let error = failure();
                tracing::warn!(%error, writes = group.len(), "a group commit could not start");
                for job in group {
                    job.answer(Err(failure()));
                }
                return;
            }
            Err(GroupFailure::NotStarted(error) | GroupFailure::Aborted(error)) => {
                tracing::warn!(
                    %error,
                    writes = group.len(),
                    "a group commit failed; retrying its writes one by one"
                );
            }
        }
        for job in group {
            #[cfg(test)]
            self.writes.attempts.fetch_add(1, Ordering::Relaxed);
            let answer = run_alone(conn, &job.op);
            if answer.is_ok() {
                self.count_commit(1);
            }
            job.remember(self, &answer);
            job.answer(answer);
        }
    }

    fn count_commit(&self, writes: usize) {
        if writes > 0 {
            self.writes.commits.fetch_add(1, Ordering::Relaxed);
            self.writes
                .writes
                .fetch_add(writes as u64, Ordering::Relaxed);
        }
    }
}

/// Answers every job of a group that has no answer when it is dropped
/// (only if committing the group panicked).
struct AnswerLeft<'a>(&'a [Arc<Job>]);

impl Drop for AnswerLeft<'_> {
    fn drop(&mut self) {
        for job in self.0 {
            if !job.is_answered() {
                job.answer(Err(StoreError::WriteNotApplied));
            }
        }
    }
}

/// Why a group's transaction did not commit.
#[derive(Debug)]
enum GroupFailure {
    /// `BEGIN IMMEDIATE` failed: nothing ran.
    NotStarted(StoreError),
    /// It failed after it began (a savepoint, the commit); rolled back.
    Aborted(StoreError),
}

/// Whether a group's transaction is still to begin.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Begin {
    Now,
    /// The caller began it (`Store::commit_inline`).
    Done,
}

/// Every op of `group` in one transaction, each under a savepoint (a
/// group of one needs none: the transaction is its savepoint). `Err` when
/// the transaction itself failed (nothing of the group is stored).
fn run_group(
    conn: &Connection,
    group: &[Arc<Job>],
    begin: Begin,
) -> Result<Vec<Result<WriteDone, StoreError>>, GroupFailure> {
    if begin == Begin::Now {
        execute(conn, "BEGIN IMMEDIATE").map_err(GroupFailure::NotStarted)?;
    }
    let applied = (|| {
        if let [job] = group {
            // Most commits carry one write (an input alone, or the first
            // of a burst): two statements fewer. A failed write rolls the
            // transaction back, which is what its savepoint would undo.
            let answer = apply(conn, &job.op);
            if answer.is_ok() {
                execute(conn, "COMMIT")?;
            } else {
                end_open_transaction(conn);
            }
            return Ok(vec![answer]);
        }
        let mut answers = Vec::with_capacity(group.len());
        for job in group {
            execute(conn, "SAVEPOINT grouped_write")?;
            let answer = apply(conn, &job.op);
            if answer.is_err() {
                execute(conn, "ROLLBACK TO grouped_write")?;
            }
            execute(conn, "RELEASE grouped_write")?;
            answers.push(answer);
        }
        execute(conn, "COMMIT")?;
        Ok(answers)
    })();
    if applied.is_err() {
        end_open_transaction(conn);
    }
    applied.map_err(GroupFailure::Aborted)
}

/// One op in a transaction of its own.
fn run_alone(conn: &Connection, op: &WriteOp) -> Result<WriteDone, StoreError> {
    execute(conn, "BEGIN IMMEDIATE")?;
    let result = apply(conn, op).and_then(|done| {
        execute(conn, "COMMIT")?;
        Ok(done)
    });
    if result.is_err() {
        end_open_transaction(conn);
    }
    result
}

/// Runs a parameterless statement through the statement cache.
fn execute(conn: &Connection, sql: &str) -> Result<(), StoreError> {
    conn.prepare_cached(sql)?.execute([])?;
    Ok(())
}

/// The op's writes; the caller holds the transaction.
fn apply(conn: &Connection, op: &WriteOp) -> Result<WriteDone, StoreError> {
    match op {
        WriteOp::EnsureSession { id, agent } => {
            Ok(WriteDone::Session(create_or_get(conn, id, agent)?))
        }
        WriteOp::CreateSeeded { id, agent, rows } => {
            let created = insert_if_new(conn, id, agent)?;
            if created {
                insert_rows(conn, id, 1, rows)?;
            } else {
                // An existing session keeps its history; it must be the
                // same agent's.
                create_or_get(conn, id, agent)?;
            }
            Ok(WriteDone::Created(created))
        }
        WriteOp::Append {
            session,
            create_for,
            rows,
            events,
            events_rule,
            ..
        } => {
            // One statement checks and stamps the session in the common
            // case (it exists and is the agent's); only a miss pays for
            // the create-or-refuse or the not-found answer.
            let created = if touch(conn, session, create_for.as_deref())? {
                false
            } else {
                match create_for {
                    Some(agent) if insert_if_new(conn, session, agent)? => true,
                    // Another agent's (refused), or created since by
                    // another process.
                    Some(agent) => {
                        create_or_get(conn, session, agent)?;
                        false
                    }
                    None => {
                        return Err(StoreError::SessionNotFound {
                            id: session.clone(),
                        });
                    }
                }
            };
            // A session created here has no messages yet (they cannot
            // outlive their session: foreign keys are on).
            let first = if created {
                1
            } else {
                max_seq(conn, session)? + 1
            };
            insert_rows(conn, session, first, rows)?;
            match events_rule {
                EventsRule::WithMessages => insert_events(conn, session, events)?,
                EventsRule::IfStorable => insert_events_if_storable(conn, session, events)?,
            }
            // `first..=first - 1` is empty: "nothing appended" needs no special type.
            Ok(WriteDone::Appended(first..=first + rows.len() as i64 - 1))
        }
    }
}

/// Inserts `events`, or leaves them out (with a warning) when SQLite
/// refuses them, and the rest of the write goes on. Their insert is one
/// statement, and SQLite undoes a failed statement whole; an error that
/// rolled back the transaction itself (`RAISE(ROLLBACK)`, some I/O
/// errors) fails the write, since the rows before it went with it.
fn insert_events_if_storable(
    conn: &Connection,
    session: &str,
    events: &[EventRow],
) -> Result<(), StoreError> {
    match insert_events(conn, session, events) {
        Err(error) if conn.is_autocommit() => Err(error),
        Err(error) => {
            tracing::warn!(
                %session,
                %error,
                events = events.len(),
                "could not record a batch's tool events; committing its results without them"
            );
            Ok(())
        }
        Ok(()) => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)] // a panic in a test is a test failure

    use std::time::Duration;

    use homeagent_core::Message;

    use super::*;

    use crate::store::testing::{TempStore, temp_store};

    /// rusqlite clears a statement's bindings when it returns to the cache.
    /// Unless the query planner is held stable (QPSG), SQLite then marks
    /// every statement whose plan could depend on a bound value (all the
    /// `WHERE session_id = ?1` ones) for a fresh prepare on its next step,
    /// and the cache saves nothing.
    #[test]
    fn cached_statements_are_not_prepared_again_for_new_bindings() {
        use rusqlite::StatementStatus;

        let temp = temp_store("reprepare");
        for i in 0..4 {
            let session = format!("s{i}");
            temp.store.ensure_session(&session, "main").unwrap();
            temp.store
                .append_messages(&session, &[Message::user("hi")])
                .unwrap();
            assert_eq!(temp.store.load_session(&session).unwrap().len(), 1);
        }
        let conn = temp.store.lock();
        for sql in [
            super::super::messages::MAX_SEQ_SQL,
            super::super::messages::READ_HISTORY_SQL,
        ] {
            let stmt = conn.prepare_cached(sql).unwrap();
            assert_eq!(stmt.get_status(StatementStatus::RePrepare), 0, "{sql}");
            // Each ran once per session: the counter above is about reuse.
            assert_eq!(stmt.get_status(StatementStatus::Run), 4, "{sql}");
        }
    }

    /// An append that creates its session knows the session is empty: it
    /// does not look for the highest `seq` (an input of a client that names
    /// no session does this every time). Appending to an existing one does.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn an_append_that_creates_its_session_does_not_look_up_its_last_seq() {
        use rusqlite::StatementStatus;

        let temp = temp_store("created-seq");
        for session in ["n1", "n2", "n3"] {
            let range = temp
                .store
                .append_async_creating(session, "main", &[Message::user("first")])
                .await
                .unwrap();
            assert_eq!(range, 1..=1);
        }
        let range = temp
            .store
            .append_async_creating("n2", "main", &[Message::user("second")])
            .await
            .unwrap();
        assert_eq!(range, 2..=2);
        let conn = temp.store.lock();
        let stmt = conn
            .prepare_cached(super::super::messages::MAX_SEQ_SQL)
            .unwrap();
        assert_eq!(stmt.get_status(StatementStatus::Run), 1);
    }

    /// Starts one appending thread per session while the test holds the
    /// connection, waits until all their writes are queued, then lets go:
    /// the first thread to get the connection must commit all of them.
    fn append_while_held(
        store: &Arc<Store>,
        sessions: &[&str],
    ) -> Vec<Result<RangeInclusive<i64>, StoreError>> {
        let texts: Vec<String> = sessions.iter().map(|s| format!("to {s}")).collect();
        let writes: Vec<(&str, Vec<&str>)> = sessions
            .iter()
            .zip(&texts)
            .map(|(session, text)| (*session, vec![text.as_str()]))
            .collect();
        let writes: Vec<(&str, &[&str])> = writes.iter().map(|(s, t)| (*s, t.as_slice())).collect();
        append_while_held_texts(store, &writes)
    }

    /// Appends each write's user messages from a thread of its own, all
    /// queued while the connection is held, so that they form one group.
    fn append_while_held_texts(
        store: &Arc<Store>,
        writes: &[(&str, &[&str])],
    ) -> Vec<Result<RangeInclusive<i64>, StoreError>> {
        let held = store.lock();
        let threads: Vec<_> = writes
            .iter()
            .map(|(session, texts)| {
                let store = Arc::clone(store);
                let session = (*session).to_owned();
                let messages: Vec<Message> = texts.iter().map(|t| Message::user(*t)).collect();
                std::thread::spawn(move || store.append_messages(&session, &messages))
            })
            .collect();
        while store.writes.len() < writes.len() {
            std::thread::sleep(Duration::from_millis(2));
        }
        drop(held);
        threads.into_iter().map(|t| t.join().unwrap()).collect()
    }

    #[test]
    fn writes_waiting_for_the_connection_share_one_commit() {
        let temp = temp_store("share");
        let sessions = ["s1", "s2", "s3", "s4", "s5", "s6", "s7", "s8"];
        for session in sessions {
            temp.store.ensure_session(session, "main").unwrap();
        }
        let before = temp.store.write_stats();
        assert_eq!(
            before,
            WriteStats {
                commits: 8,
                writes: 8
            }
        );

        let answers = append_while_held(&temp.store, &sessions);

        for answer in answers {
            assert_eq!(answer.unwrap(), 1..=1);
        }
        assert_eq!(
            temp.store.write_stats(),
            WriteStats {
                commits: 9,
                writes: 16
            }
        );
        for session in sessions {
            assert_eq!(
                temp.store.history(session).unwrap(),
                vec![Message::user(format!("to {session}"))]
            );
        }
    }

    #[test]
    fn a_failing_write_is_rolled_back_alone_and_the_others_commit() {
        let temp = temp_store("isolate");
        for session in ["a", "b", "c"] {
            temp.store.ensure_session(session, "main").unwrap();
        }
        // A write that fails halfway: its first row goes in, its second
        // trips this trigger. Its savepoint must take the first row back out.
        temp.refuse_messages_containing("poison", "poisoned row");
        let held = temp.store.lock();
        let spawn = |session: &'static str, texts: &'static [&'static str]| {
            let store = Arc::clone(&temp.store);
            std::thread::spawn(move || {
                let messages: Vec<Message> = texts.iter().map(|t| Message::user(*t)).collect();
                store.append_messages(session, &messages)
            })
        };
        let threads = [
            spawn("a", &["first"]),
            spawn("b", &["fine", "poison"]),
            spawn("missing", &["lost"]),
            spawn("c", &["third"]),
        ];
        while temp.store.writes.len() < threads.len() {
            std::thread::sleep(Duration::from_millis(2));
        }
        drop(held);
        let answers: Vec<_> = threads.into_iter().map(|t| t.join().unwrap()).collect();

        assert_eq!(answers[0].as_ref().unwrap(), &(1..=1));
        assert!(
            matches!(&answers[1], Err(StoreError::Sqlite(_))),
            "{:?}",
            answers[1]
        );
        assert!(
            matches!(&answers[2], Err(StoreError::SessionNotFound { id }) if id == "missing"),
            "{:?}",
            answers[2]
        );
        assert_eq!(answers[3].as_ref().unwrap(), &(1..=1));
        // The two good writes in one commit, after the three sessions' own.
        assert_eq!(
            temp.store.write_stats(),
            WriteStats {
                commits: 4,
                writes: 5
            }
        );
        assert_eq!(
            temp.store.history("a").unwrap(),
            vec![Message::user("first")]
        );
        assert_eq!(temp.store.history("b").unwrap(), vec![]);
        assert_eq!(
            temp.store.history("c").unwrap(),
            vec![Message::user("third")]
        );
        assert!(temp.store.session("missing").unwrap().is_none());
    }

    /// A store with sessions "a", "b" and "c" of one message each, loaded
    /// so that the history cache holds them, and how many messages it has
    /// parsed by then.
    fn three_remembered_sessions(label: &str) -> (TempStore, u64) {
        let temp = temp_store(label);
        for session in ["a", "b", "c"] {
            temp.store.ensure_session(session, "main").unwrap();
            temp.store
                .append_messages(session, &[Message::user("before")])
                .unwrap();
            temp.store.load_session(session).unwrap();
        }
        let parsed = temp.store.read_stats().messages_parsed;
        (temp, parsed)
    }

    /// The writes of a group are remembered as they commit, and only the
    /// ones that commit: a later load reads nothing back, and returns
    /// what is stored.
    #[test]
    fn a_groups_committed_writes_are_remembered_and_its_failed_one_is_not() {
        let (temp, parsed) = three_remembered_sessions("isolate-cache");
        temp.refuse_messages_containing("poison", "poisoned row");
        let answers = append_while_held_texts(
            &temp.store,
            &[
                ("a", &["first"]),
                ("b", &["fine", "poison"]),
                ("c", &["third"]),
            ],
        );
        assert!(answers[1].is_err(), "{answers:?}");
        let loaded: Vec<Vec<Message>> = ["a", "b", "c"]
            .iter()
            .map(|session| temp.store.load_session(session).unwrap())
            .collect();
        assert_eq!(temp.store.read_stats().messages_parsed, parsed);
        let stored: Vec<Vec<Message>> = ["a", "b", "c"]
            .iter()
            .map(|session| temp.store.history(session).unwrap())
            .collect();
        assert_eq!(loaded, stored);
        assert_eq!(loaded[1], [Message::user("before")]);
    }

    /// The same when the group's transaction fails and each write is
    /// retried alone (a trigger that rolls back the whole transaction).
    #[test]
    fn writes_retried_alone_are_remembered_as_they_commit() {
        let (temp, parsed) = three_remembered_sessions("retry-cache");
        temp.store
            .lock()
            .execute_batch(
                "CREATE TRIGGER roll_back BEFORE INSERT ON messages
                 WHEN NEW.body LIKE '%poison%'
                 BEGIN SELECT RAISE(ROLLBACK, 'everything rolled back'); END;",
            )
            .unwrap();
        let attempts = temp.store.writes.attempts.load(Ordering::Relaxed);
        let answers = append_while_held_texts(
            &temp.store,
            &[("a", &["first"]), ("b", &["poison"]), ("c", &["third"])],
        );
        // The group, then each write alone.
        assert_eq!(
            temp.store.writes.attempts.load(Ordering::Relaxed),
            attempts + 4
        );
        assert!(
            answers[0].is_ok() && answers[1].is_err() && answers[2].is_ok(),
            "{answers:?}"
        );
        let loaded: Vec<Vec<Message>> = ["a", "b", "c"]
            .iter()
            .map(|session| temp.store.load_session(session).unwrap())
            .collect();
        assert_eq!(temp.store.read_stats().messages_parsed, parsed);
        for ((session, after), loaded) in [("a", "first"), ("b", ""), ("c", "third")]
            .into_iter()
            .zip(loaded)
        {
            let mut expected = vec![Message::user("before")];
            if !after.is_empty() {
                expected.push(Message::user(after));
            }
            assert_eq!(temp.store.history(session).unwrap(), expected);
            assert_eq!(loaded, expected);
        }
    }

    #[test]
    fn a_group_whose_every_write_fails_counts_no_commit() {
        let temp = temp_store("all-fail");
        let answers = append_while_held(&temp.store, &["gone1", "gone2"]);
        assert!(
            answers
                .iter()
                .all(|a| matches!(a, Err(StoreError::SessionNotFound { .. }))),
            "{answers:?}"
        );
        assert_eq!(temp.store.write_stats(), WriteStats::default());
    }

    #[test]
    fn a_group_that_cannot_get_the_write_lock_fails_every_write_at_once() {
        let temp = temp_store("busy");
        for session in ["p", "q", "r"] {
            temp.store.ensure_session(session, "main").unwrap();
        }
        temp.store
            .lock()
            .busy_timeout(Duration::from_millis(50))
            .unwrap();
        // Another process holds the write lock past the busy timeout.
        let other = Connection::open(temp.store.path()).unwrap();
        other.execute_batch("BEGIN IMMEDIATE").unwrap();
        let attempts = temp.store.writes.attempts.load(Ordering::Relaxed);

        let answers = append_while_held(&temp.store, &["p", "q", "r"]);

        for answer in &answers {
            assert!(
                matches!(
                    answer,
                    Err(StoreError::Sqlite(rusqlite::Error::SqliteFailure(e, _)))
                        if e.code == rusqlite::ErrorCode::DatabaseBusy
                ),
                "{answer:?}"
            );
        }
        // One attempt for the group, not one more per write.
        assert_eq!(
            temp.store.writes.attempts.load(Ordering::Relaxed) - attempts,
            1
        );
        other.execute_batch("ROLLBACK").unwrap();
        assert_eq!(
            temp.store
                .append_messages("p", &[Message::user("x")])
                .unwrap(),
            1..=1
        );
    }

    #[test]
    fn an_inline_commit_that_finds_no_write_ends_the_transaction_it_began() {
        let temp = temp_store("inline-empty");
        assert!(temp.store.writes.is_empty());
        assert!(temp.store.commit_inline());
        assert!(temp.store.conn.lock().unwrap().is_autocommit());
        // Nor is SQLite's write lock still held: another process gets it
        // without waiting.
        let other = Connection::open(temp.store.path()).unwrap();
        other.busy_timeout(Duration::ZERO).unwrap();
        other.execute_batch("BEGIN IMMEDIATE; ROLLBACK").unwrap();
        assert_eq!(temp.store.write_stats(), WriteStats::default());
    }

    #[test]
    fn a_transaction_left_open_on_the_connection_is_rolled_back_first() {
        let temp = temp_store("left-open");
        temp.store.ensure_session("s", "main").unwrap();
        // What a leader that panicked after BEGIN leaves behind (through
        // the mutex itself: `lock()` is what cleans up).
        temp.store
            .conn
            .lock()
            .unwrap()
            .execute_batch(
                "BEGIN IMMEDIATE;
                 INSERT INTO messages (session_id, seq, role, body, created_at)
                 VALUES ('s', 1, 'user', '{\"role\":\"user\",\"content\":\"half\"}', 0);",
            )
            .unwrap();
        assert_eq!(
            temp.store
                .append_messages("s", &[Message::user("whole")])
                .unwrap(),
            1..=1
        );
        assert_eq!(
            temp.store.history("s").unwrap(),
            vec![Message::user("whole")]
        );
    }

    #[test]
    fn a_lone_write_commits_on_its_own() {
        let temp = temp_store("alone");
        temp.store.ensure_session("x", "main").unwrap();
        assert_eq!(
            temp.store
                .append_messages("x", &[Message::user("1"), Message::user("2")])
                .unwrap(),
            1..=2
        );
        let empty = temp.store.append_messages("x", &[]).unwrap();
        assert_eq!((*empty.start(), *empty.end()), (3, 2));
        assert_eq!(
            temp.store.write_stats(),
            WriteStats {
                commits: 3,
                writes: 3
            }
        );
    }

    /// Arms the hook where a leader gives up its role: a write for "s" is
    /// queued there, and its writer, seeing a leader, starts none (what
    /// `append_async` does). Returns where the write's job is put.
    fn queue_a_write_as_the_leader_gives_up(store: &Store) -> Arc<Mutex<Option<Arc<Job>>>> {
        let late = Arc::new(Mutex::new(None));
        let slot = Arc::clone(&late);
        *store.writes.before_giving_up.lock().unwrap() =
            Some(GiveUpHook(Box::new(move |store: &Store| {
                let op =
                    super::super::messages::append_op("s", &[Message::user("late")], Vec::new())
                        .unwrap();
                let job = store.queue(op);
                assert!(!store.writes.take_lead());
                *slot.lock().unwrap() = Some(job);
            })));
        late
    }

    /// A write queued just as the leader finds the queue empty (its
    /// writer saw a leader running, so it started none) is still
    /// committed: the leader looks again after giving up its role.
    #[test]
    fn a_write_queued_as_the_leader_gives_up_is_still_committed() {
        let temp = temp_store("handoff");
        temp.store.ensure_session("s", "main").unwrap();
        let late = queue_a_write_as_the_leader_gives_up(&temp.store);
        assert!(temp.store.writes.take_lead());
        temp.store.lead();
        let job = late.lock().unwrap().take().unwrap();
        assert!(job.is_answered(), "the late write was left in the queue");
        assert_eq!(
            temp.store.history("s").unwrap(),
            vec![Message::user("late")]
        );
        // And the role was given up at the end.
        assert!(temp.store.writes.take_lead());
    }

    /// The same with a commit made on the caller's worker: the write that
    /// arrived as it gave up the role goes to a leader task.
    #[tokio::test]
    async fn a_write_queued_as_an_inline_commit_gives_up_goes_to_a_leader_task() {
        let temp = crate::store::testing::temp_store_with(
            "inline-handoff",
            crate::store::Durability::Normal,
        );
        temp.store.ensure_session("s", "main").unwrap();
        let late = queue_a_write_as_the_leader_gives_up(&temp.store);
        temp.store
            .append_async("s", &[Message::user("first")], Vec::new())
            .await
            .unwrap();
        assert_eq!(temp.store.commit_places().inline_commits, 1);
        let job = late.lock().unwrap().take().unwrap();
        tokio::time::timeout(Duration::from_secs(20), job.answered())
            .await
            .expect("the late write was left without a leader")
            .unwrap();
        assert_eq!(
            temp.store.history("s").unwrap(),
            vec![Message::user("first"), Message::user("late")]
        );
    }

    /// If committing a group panics, its callers still get an answer
    /// (async ones would otherwise wait forever); answers already given
    /// stand.
    #[test]
    fn a_group_dropped_unanswered_answers_every_caller() {
        let temp = temp_store("answer-left");
        let op =
            || super::super::messages::append_op("s", &[Message::user("x")], Vec::new()).unwrap();
        let (answered, left) = (temp.store.queue(op()), temp.store.queue(op()));
        answered.answer(Ok(WriteDone::Appended(1..=1)));
        let group = temp.store.writes.drain();
        drop(AnswerLeft(&group));
        assert!(matches!(answered.take_answer(), Some(Ok(WriteDone::Appended(r))) if r == (1..=1)));
        assert!(matches!(
            left.take_answer(),
            Some(Err(StoreError::WriteNotApplied))
        ));
    }

    /// The same look-again when the leader task failed: a write queued
    /// while its queue is failed is answered too, not stranded.
    #[test]
    fn a_write_queued_as_a_failed_leader_gives_up_is_answered() {
        let temp = temp_store("handoff-failed");
        let late = queue_a_write_as_the_leader_gives_up(&temp.store);
        assert!(temp.store.writes.take_lead());
        temp.store.fail_queued(|| StoreError::WriteNotApplied);
        let job = late.lock().unwrap().take().unwrap();
        assert!(
            matches!(job.take_answer(), Some(Err(StoreError::WriteNotApplied))),
            "the late write was left in the queue"
        );
        assert!(temp.store.writes.take_lead(), "the leader role was kept");
    }
}
