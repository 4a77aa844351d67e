//! Writes an input holds back for a moment, so that its next write can
//! carry them in the same commit.
//!
//! # Why
//!
//! An input writes four times when it runs one tool batch: its user
//! message, the model's calls (before they run), the batch's results, the
//! reply. Two of those are not waited for (the user message and the
//! results: the next model request goes out while they commit), but the
//! next write must wait for them, since the history is stored in order.
//! When the model answers faster than the disk syncs — a local model, the
//! offline demo, a cached answer — each of those waits is a whole fsync on
//! the input's path, and `sync = "full"` put four of them into every
//! batch input.
//!
//! # How
//!
//! [`Store::hold_append_creating`] and [`Store::hold_results`] do not
//! queue their write at once; nor does [`Store::hold_after`], for a batch's
//! calls when every one of them changes nothing (its write then rides with
//! the results, [`Store::hold_results_after`], and the reply). The input's next write
//! ([`Store::append_after`]) takes a write still held and commits both as
//! one append: one transaction, one fsync, all or nothing — a reply is
//! never stored without the results it answers, as before. A held write
//! that no write takes within [`HOLD`] is queued for the group commit on
//! its own, so a slow model (every remote one) finds it committed long
//! before it answers, as if it had never been held; the input then waits
//! for nothing. Ending the input ([`HeldWrite::committed`]) commits a
//! write still held at once.
//!
//! # Invariant
//!
//! A held write is committed exactly once: by the write that takes it, by
//! its hold running out, or by [`HeldWrite::committed`] — whichever takes
//! it from its slot first. Nothing is acknowledged to anyone before that
//! commit, so holding it moves no promise: a crash during the hold loses
//! what a crash during its fsync would.

use std::ops::RangeInclusive;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use homeagent_core::Message;

use super::blocking::QueuedAppend;
use super::group::WriteOp;
use super::messages::{append_creating_op, append_op, results_op};
use super::{Durability, EventRow, SessionClaim, Store, StoreError};

/// How long a held write waits for the input's next write before it is
/// committed on its own, unless the store says otherwise
/// ([`Store::set_write_hold`]). Long enough for a model that answers at once (a
/// local one, the demo: well under a millisecond) to let the next write
/// carry it; short against any remote model's first token, and against
/// anything a person or another process could see.
pub const HOLD: Duration = Duration::from_millis(5);

/// The largest write held with `sync = "normal"`, in bytes of stored JSON
/// (messages and events). Holding a write saves a commit, but puts the
/// write's own work after the model's answer instead of beside it. For a
/// write of a page or two that work is small next to the commit it saves;
/// a larger one (the results of a big batch: 64 calls' results, calls
/// and events are about 28 kB) costs SQLite more than a commit that waits
/// for no disk, and is queued at once, as if no hold existed (alternating pairs
/// at N = 64 ran slower held). A batch's calls are held whatever their
/// size ([`Store::hold_after`]): their results' write, which comes next
/// and carries them, is the one this limit applies to.
pub const HOLD_AT_MOST: usize = 8 * 1024;

/// The largest write held with `sync = "full"`, where the commit a hold
/// saves is an fsync: 0.14–0.3 ms on the benchmark machine's disk (more
/// on an SD card), against about 9 k instructions (2–3 µs there) of
/// SQLite's work per kB held, which holding moves behind the model's
/// answer. 64 calls' results with their calls and events (42 kB before
/// schema 6, 28 kB since), held, made every input at N = 64 faster in ten
/// alternating pairs (docs/BENCHMARKS.md); a write past this limit (files read whole) is
/// queued at once, beside the model's work.
pub const HOLD_AT_MOST_FULL: usize = 64 * 1024;

/// The largest write a store of this durability holds.
pub(super) fn hold_limit(durability: Durability) -> usize {
    match durability {
        Durability::Full => HOLD_AT_MOST_FULL,
        Durability::Normal => HOLD_AT_MOST,
    }
}

/// `op` made by the input that holds `claim`: it keeps the session
/// claimed until it has committed (see [`SessionClaim`]).
fn claimed(mut op: WriteOp, claim: &SessionClaim) -> WriteOp {
    if let WriteOp::Append { claim: slot, .. } = &mut op {
        *slot = Some(claim.for_write());
    }
    op
}

/// A write held back for the input's next write (see the module docs).
/// Dropped while still held, it is committed when its hold runs out.
#[must_use = "pass it to `Store::append_after`, or await `committed`"]
#[derive(Debug)]
pub struct HeldWrite {
    store: Arc<Store>,
    slot: Arc<Mutex<Slot>>,
}

#[derive(Debug)]
enum Slot {
    /// Not queued: the next write may carry it.
    Held(WriteOp),
    /// Queued for the group commit (its hold ran out).
    Queued(QueuedAppend),
    /// Taken by [`Store::append_after`] or [`HeldWrite::committed`].
    Taken,
}

/// What [`Store::append_after`] committed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Appended {
    /// The `seq` numbers of the messages it was given.
    pub seqs: RangeInclusive<i64>,
}

impl HeldWrite {
    /// Commits the write now if it is still held, and waits for its
    /// commit: for an input that ends, or writes nothing the held write
    /// could join.
    pub async fn committed(self) -> Result<RangeInclusive<i64>, StoreError> {
        match self.take() {
            Slot::Held(op) => self.store.start_commit(op).committed().await,
            Slot::Queued(queued) => queued.committed().await,
            Slot::Taken => Err(StoreError::WriteNotApplied),
        }
    }

    fn take(&self) -> Slot {
        std::mem::replace(
            &mut *self.slot.lock().unwrap_or_else(PoisonError::into_inner),
            Slot::Taken,
        )
    }
}

impl Store {
    /// [`Store::append_async_creating`], held (see the module docs): the
    /// input's first write, whose session may not exist yet; created for
    /// `agent` in the same transaction as `messages`.
    pub fn hold_append_creating(
        self: &Arc<Self>,
        claim: &SessionClaim,
        agent: &str,
        messages: &[Message],
    ) -> Result<HeldWrite, StoreError> {
        let op = append_creating_op(claim.session(), agent, messages)?;
        Ok(self.hold(claimed(op, claim)))
    }

    /// [`Store::queue_results`], held (see the module docs): a batch's
    /// results, and its events if SQLite takes them.
    pub fn hold_results(
        self: &Arc<Self>,
        claim: &SessionClaim,
        results: &[Message],
        events: Vec<EventRow>,
    ) -> Result<HeldWrite, StoreError> {
        let op = results_op(claim.session(), results, events)?;
        Ok(self.hold(claimed(op, claim)))
    }

    /// Appends `messages` to the claimed session after `held` (the input's write
    /// before, if any) and waits for the commit. A write still held joins
    /// this one: one commit, all or nothing. One already queued is waited
    /// for first, and its failure is this call's (nothing is appended after
    /// a write that failed).
    pub async fn append_after(
        self: &Arc<Self>,
        held: Option<HeldWrite>,
        claim: &SessionClaim,
        messages: &[Message],
    ) -> Result<Appended, StoreError> {
        let next = claimed(append_op(claim.session(), messages, Vec::new())?, claim);
        let op = self.behind(held, next).await?;
        let all = self.start_commit(op).committed().await?;
        let first = all.end() - messages.len() as i64 + 1;
        Ok(Appended {
            seqs: first..=*all.end(),
        })
    }

    /// [`Store::append_after`] without the wait: `messages` are held
    /// behind `held` (joining it while it is still held) for the input's
    /// next write to carry in turn. For calls that change nothing, which
    /// need not be stored before they run (see `Runtime::run_turns`): the
    /// calls, their results and the reply then take one commit.
    ///
    /// Held whatever their size: the write that comes next is their
    /// results, which the store's hold limit ([`HOLD_AT_MOST`],
    /// [`HOLD_AT_MOST_FULL`]) sends to the disk at once when the two are
    /// large, beside the model's work; calls committed on their
    /// own were one more commit for the results and the reply to wait for
    /// (with `sync = "full"`, an fsync: 64 calls made three commits an
    /// input instead of two).
    pub async fn hold_after(
        self: &Arc<Self>,
        held: Option<HeldWrite>,
        claim: &SessionClaim,
        messages: &[Message],
    ) -> Result<HeldWrite, StoreError> {
        let next = claimed(append_op(claim.session(), messages, Vec::new())?, claim);
        self.hold_behind(held, next, usize::MAX).await
    }

    /// [`Store::hold_results`] behind `held`, as [`Store::hold_after`]
    /// holds messages.
    pub async fn hold_results_after(
        self: &Arc<Self>,
        held: Option<HeldWrite>,
        claim: &SessionClaim,
        results: &[Message],
        events: Vec<EventRow>,
    ) -> Result<HeldWrite, StoreError> {
        let next = claimed(results_op(claim.session(), results, events)?, claim);
        self.hold_behind(held, next, self.hold_at_most).await
    }

    /// Holds `next` behind `held`, queued at once above `at_most` bytes.
    async fn hold_behind(
        self: &Arc<Self>,
        held: Option<HeldWrite>,
        next: WriteOp,
        at_most: usize,
    ) -> Result<HeldWrite, StoreError> {
        let op = self.behind(held, next).await?;
        Ok(self.hold_with(op, at_most))
    }

    /// `next` as the write to make after `held`: one write with it while
    /// it is still held, else alone once `held` has committed (its failure
    /// is this call's).
    async fn behind(
        self: &Arc<Self>,
        held: Option<HeldWrite>,
        next: WriteOp,
    ) -> Result<WriteOp, StoreError> {
        match held.as_ref().map(HeldWrite::take) {
            Some(Slot::Held(before)) => match before.carry(next) {
                Ok(both) => Ok(both),
                // Another session's: it goes first, on its own.
                Err(both) => {
                    let (before, next) = *both;
                    self.start_commit(before).committed().await?;
                    Ok(next)
                }
            },
            Some(Slot::Queued(queued)) => {
                queued.committed().await?;
                Ok(next)
            }
            Some(Slot::Taken) => Err(StoreError::WriteNotApplied),
            None => Ok(next),
        }
    }

    /// Holds `op`, and sets its hold running; queues it at once when it
    /// is larger than the store's hold limit.
    fn hold(self: &Arc<Self>, op: WriteOp) -> HeldWrite {
        self.hold_with(op, self.hold_at_most)
    }

    /// [`Store::hold`], queuing `op` at once when it is larger than
    /// `at_most` bytes.
    fn hold_with(self: &Arc<Self>, op: WriteOp, at_most: usize) -> HeldWrite {
        if op.stored_bytes() > at_most {
            return HeldWrite {
                store: Arc::clone(self),
                slot: Arc::new(Mutex::new(Slot::Queued(self.start_commit_after_yield(op)))),
            };
        }
        let slot = Arc::new(Mutex::new(Slot::Held(op)));
        let store = Arc::clone(self);
        let timer = Arc::clone(&slot);
        let hold = self.write_hold;
        tokio::spawn(async move {
            tokio::time::sleep(hold).await;
            let mut slot = timer.lock().unwrap_or_else(PoisonError::into_inner);
            if let Slot::Held(_) = &*slot
                && let Slot::Held(op) = std::mem::replace(&mut *slot, Slot::Taken)
            {
                // Queued under the slot's lock, so the input finds it
                // queued; committed once the lock is let go.
                *slot = Slot::Queued(store.queue_only(op));
                drop(slot);
                store.ensure_leader();
            }
        });
        HeldWrite {
            store: Arc::clone(self),
            slot,
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use std::time::{Duration, Instant};

    use homeagent_core::ToolEvent;

    use super::*;

    use crate::store::testing::{TempStore, temp_store, temp_store_holding, temp_store_with};

    /// A store whose held writes wait for a minute: whether the next
    /// write carries one does not depend on how fast the machine is.
    fn long_hold(label: &str) -> TempStore {
        long_hold_with(label, Durability::Full)
    }

    /// [`long_hold`] with the given durability.
    fn long_hold_with(label: &str, durability: Durability) -> TempStore {
        temp_store_holding(label, Duration::from_secs(60), durability)
    }

    fn commits(temp: &TempStore) -> u64 {
        temp.store.write_stats().commits
    }

    fn user(text: &str) -> Message {
        Message::user(text)
    }

    /// Polls until the store holds `n` messages for `session`; the time
    /// it took.
    async fn until_stored(temp: &TempStore, session: &str, n: usize) -> Duration {
        let started = Instant::now();
        loop {
            if temp.store.history(session).map_or(0, |h| h.len()) >= n {
                return started.elapsed();
            }
            assert!(started.elapsed() < Duration::from_secs(30), "never stored");
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn the_next_write_carries_a_held_write_in_its_commit() {
        let temp = long_hold("held-carried");
        let s = temp.store.claim_session("s").unwrap();
        let held = temp
            .store
            .hold_append_creating(&s, "main", &[user("first")])
            .unwrap();
        let next = [user("second"), user("third")];
        let appended = temp
            .store
            .append_after(Some(held), &s, &next)
            .await
            .unwrap();
        assert_eq!(appended.seqs, 2..=3);
        assert_eq!(commits(&temp), 1);
        assert_eq!(temp.store.write_stats().writes, 1);
        assert_eq!(
            temp.store.history("s").unwrap(),
            [user("first"), user("second"), user("third")]
        );
        assert_eq!(temp.store.session("s").unwrap().unwrap().agent, "main");
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_held_write_no_write_takes_is_committed_when_its_hold_runs_out() {
        let temp = temp_store("held-alone");
        let s = temp.store.claim_session("s").unwrap();
        let held = temp
            .store
            .hold_append_creating(&s, "main", &[user("first")])
            .unwrap();
        let waited = until_stored(&temp, "s", 1).await;
        assert!(waited >= HOLD, "stored after {waited:?}");
        assert_eq!(commits(&temp), 1);
        // The next write waits for it, and commits on its own.
        let appended = temp
            .store
            .append_after(Some(held), &s, &[user("second")])
            .await
            .unwrap();
        assert_eq!(appended.seqs, 2..=2);
        assert_eq!(commits(&temp), 2);
        assert_eq!(temp.store.history("s").unwrap().len(), 2);
    }

    /// Whichever comes first, the next write or the end of the hold, the
    /// held write is stored once.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_held_write_is_stored_once_whoever_takes_it() {
        let temp = temp_store("held-once");
        for round in 0..20 {
            let claim = temp.store.claim_session(&format!("s{round}")).unwrap();
            let held = temp
                .store
                .hold_append_creating(&claim, "main", &[user("first")])
                .unwrap();
            // From no wait to well past the hold.
            tokio::time::sleep(HOLD * round / 10).await;
            temp.store
                .append_after(Some(held), &claim, &[user("second")])
                .await
                .unwrap();
        }
        tokio::time::sleep(HOLD * 4).await;
        for round in 0..20 {
            assert_eq!(
                temp.store.history(&format!("s{round}")).unwrap(),
                [user("first"), user("second")],
                "round {round}"
            );
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_held_write_whose_input_is_dropped_is_still_committed() {
        let temp = temp_store("held-dropped");
        let s = temp.store.claim_session("s").unwrap();
        drop(
            temp.store
                .hold_append_creating(&s, "main", &[user("kept")])
                .unwrap(),
        );
        until_stored(&temp, "s", 1).await;
        assert_eq!(temp.store.history("s").unwrap(), [user("kept")]);
    }

    /// An input that ends without settling its writes (its task panicked,
    /// or its future was dropped) lets go of its claim, but the session
    /// stays claimed until the write it left held is on disk: the session's
    /// next input loads a history that has it, and writes after it.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_held_write_keeps_its_session_claimed_until_it_commits() {
        let hold = Duration::from_millis(50);
        let temp = temp_store_holding("held-claimed", hold, Durability::Full);
        let busy = |temp: &TempStore| {
            matches!(
                temp.store.claim_session("s"),
                Err(StoreError::SessionBusy { .. })
            )
        };
        let claim = temp.store.claim_session("s").unwrap();
        let held = temp
            .store
            .hold_append_creating(&claim, "main", &[user("left held")])
            .unwrap();
        drop((held, claim));
        assert!(busy(&temp), "released with its write still held");

        // Its hold runs out while another thread has the connection: the
        // write is queued, not committed, and the session still claimed.
        let (locked, release) = (std::sync::mpsc::channel(), std::sync::mpsc::channel());
        let store = Arc::clone(&temp.store);
        let holder = std::thread::spawn(move || {
            let _conn = store.lock();
            locked.0.send(()).unwrap();
            let _ = release.1.recv_timeout(Duration::from_secs(10));
        });
        locked.1.recv().unwrap();
        tokio::time::sleep(hold * 4).await;
        assert!(busy(&temp), "released with its write queued");
        release.0.send(()).unwrap();
        holder.join().unwrap();

        let started = Instant::now();
        while busy(&temp) {
            assert!(
                started.elapsed() < Duration::from_secs(30),
                "never released"
            );
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        assert_eq!(temp.store.history("s").unwrap(), [user("left held")]);
    }

    /// An input that ends with its write still held (its task panicked,
    /// or its future was dropped) keeps its session until that write
    /// commits; the session's next input in this process waits for it and
    /// loads a history that has it, instead of being refused as busy in
    /// another process.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn the_next_input_waits_for_a_write_its_session_left_held() {
        let hold = Duration::from_millis(300);
        let temp = temp_store_holding("held-left", hold, Durability::Full);
        let claim = temp.store.claim_session("s").unwrap();
        let held = temp
            .store
            .hold_append_creating(&claim, "main", &[user("left held")])
            .unwrap();
        let left = Instant::now();
        drop(held);
        drop(claim);
        // Woken by the release, not by its patience running out.
        tokio::time::timeout(
            Duration::from_secs(60),
            temp.store
                .own_claim_released("s", Duration::from_secs(24 * 3600)),
        )
        .await
        .expect("never woken by the release")
        .unwrap();
        assert!(left.elapsed() >= hold, "woken before the write committed");
        let opened = temp.store.open_input_async("s", "main").await.unwrap();
        assert_eq!(opened.history.messages(), [user("left held")]);
    }

    /// A write left behind that does not commit within the wait's
    /// patience (a stalled disk) is named for what it is, not as an input
    /// running in another process.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_write_left_behind_too_long_is_named_as_such() {
        let temp = long_hold("held-too-long");
        let claim = temp.store.claim_session("s").unwrap();
        let held = temp
            .store
            .hold_append_creating(&claim, "main", &[user("left held")])
            .unwrap();
        drop(claim);
        let waited = temp
            .store
            .own_claim_released("s", Duration::from_millis(50))
            .await;
        assert!(
            matches!(&waited, Err(StoreError::SessionWriting { id }) if id == "s"),
            "{waited:?}"
        );
        let text = waited.unwrap_err().to_string();
        assert!(text.contains("this process"), "{text}");
        held.committed().await.unwrap();
    }

    /// Once an input's last write is answered, the write holds its
    /// session no longer: the input that ends then releases it, and the
    /// session's next input claims it at once.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn an_answered_write_holds_its_session_no_longer() {
        let temp = temp_store_with("held-released", Durability::Full);
        for round in 0..300 {
            let claim = temp.store.claim_session("s").unwrap();
            let held = temp
                .store
                .hold_append_creating(&claim, "main", &[user("one")])
                .unwrap();
            temp.store
                .append_after(Some(held), &claim, &[user("two")])
                .await
                .unwrap();
            drop(claim);
            assert!(
                temp.store.claim_session("s").is_ok(),
                "round {round}: still claimed after its write was answered"
            );
        }
    }

    /// A session an input has claimed, and whose creating write it holds
    /// (so the file has no such session yet), is not seeded by another
    /// writer meanwhile: the seed would land before the input's messages.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_claimed_session_not_yet_stored_is_not_seeded_under_its_input() {
        let temp = long_hold("held-seeded");
        let claim = temp.store.claim_session("s").unwrap();
        let held = temp
            .store
            .hold_append_creating(&claim, "main", &[user("the input's")])
            .unwrap();
        let seeded = temp
            .store
            .create_seeded_session("s", "main", &[user("a seed")]);
        assert!(
            matches!(seeded, Err(StoreError::SessionBusy { .. })),
            "{seeded:?}"
        );
        held.committed().await.unwrap();
        drop(claim);
        assert_eq!(temp.store.history("s").unwrap(), [user("the input's")]);
        // Unclaimed, a new session is seeded as before.
        assert!(
            temp.store
                .create_seeded_session("t", "main", &[user("a seed")])
                .unwrap()
        );
        assert!(
            temp.store.claim_session("t").is_ok(),
            "the seed let go of it"
        );
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn committed_commits_a_write_still_held_at_once() {
        let temp = long_hold("held-ended");
        let s = temp.store.claim_session("s").unwrap();
        let held = temp
            .store
            .hold_append_creating(&s, "main", &[user("last")])
            .unwrap();
        assert_eq!(held.committed().await.unwrap(), 1..=1);
        assert_eq!(commits(&temp), 1);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_write_to_another_session_is_not_carried_with_a_held_one() {
        let temp = temp_store("held-other");
        let s = temp.store.claim_session("s").unwrap();
        let t = temp.store.claim_session("t").unwrap();
        temp.store.ensure_session("t", "main").unwrap();
        let before = commits(&temp);
        let held = temp
            .store
            .hold_append_creating(&s, "main", &[user("for s")])
            .unwrap();
        let appended = temp
            .store
            .append_after(Some(held), &t, &[user("for t")])
            .await
            .unwrap();
        assert_eq!(appended.seqs, 1..=1);
        assert_eq!(commits(&temp) - before, 2);
        assert_eq!(temp.store.history("s").unwrap(), [user("for s")]);
        assert_eq!(temp.store.history("t").unwrap(), [user("for t")]);
    }

    /// A large write (a big batch's results) is queued at once: its own
    /// work runs while the model works, instead of after its answer. The
    /// limit is larger when the commit a hold saves is an fsync.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_write_larger_than_the_limit_is_queued_at_once() {
        for (durability, limit) in [
            (Durability::Normal, 8 * 1024),
            (Durability::Full, 64 * 1024),
        ] {
            let temp = long_hold_with(&format!("held-large-{durability:?}"), durability);
            let s = temp.store.claim_session("s").unwrap();
            assert_eq!(temp.store.hold_at_most, limit, "{durability:?}");
            temp.store.ensure_session("s", "main").unwrap();
            let before = commits(&temp);
            let large = user(&"x".repeat(limit));
            let held = temp.store.hold_results(&s, &[large], Vec::new()).unwrap();
            let appended = temp
                .store
                .append_after(Some(held), &s, &[user("reply")])
                .await
                .unwrap();
            assert_eq!(appended.seqs, 2..=2);
            assert_eq!(commits(&temp) - before, 2, "{durability:?}");

            // Just under the limit (the JSON around the text counts): held.
            let wrapping = r#"{"role":"user","content":""}"#.len();
            let small = user(&"x".repeat(limit - wrapping));
            assert_eq!(serde_json::to_string(&small).unwrap().len(), limit);
            let held = temp.store.hold_results(&s, &[small], Vec::new()).unwrap();
            temp.store
                .append_after(Some(held), &s, &[user("reply")])
                .await
                .unwrap();
            assert_eq!(commits(&temp) - before, 3, "{durability:?}");
        }
    }

    /// A write's events count toward the limit: a batch's results are
    /// small, its events with their arguments may not be.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn events_count_toward_the_limit() {
        let temp = long_hold("held-events");
        let s = temp.store.claim_session("s").unwrap();
        temp.store.ensure_session("s", "main").unwrap();
        let before = commits(&temp);
        let start = ToolEvent::Start {
            call_id: "c1".into(),
            tool: "demo_echo".into(),
            args: serde_json::json!({ "text": "x".repeat(temp.store.hold_at_most) }),
            batch_id: "b1".into(),
            batch_size: 1,
            parallel: false,
        };
        let held = temp
            .store
            .hold_results(&s, &[user("result")], vec![EventRow::from_event(&start)])
            .unwrap();
        temp.store
            .append_after(Some(held), &s, &[user("reply")])
            .await
            .unwrap();
        assert_eq!(commits(&temp) - before, 2);
        assert_eq!(temp.store.tool_events("s").unwrap().len(), 1);
    }

    /// A store told to hold for a minute does: the write is not stored
    /// meanwhile (checked well past the default hold), and ending the
    /// input stores it.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_store_holds_for_as_long_as_it_is_told() {
        let temp = long_hold("held-told");
        let s = temp.store.claim_session("s").unwrap();
        let held = temp
            .store
            .hold_append_creating(&s, "main", &[user("waiting")])
            .unwrap();
        tokio::time::sleep(HOLD * 40).await;
        assert!(temp.store.history("s").is_err(), "no session yet");
        assert_eq!(commits(&temp), 0);
        held.committed().await.unwrap();
        assert_eq!(temp.store.history("s").unwrap(), [user("waiting")]);
    }

    /// The carried write and the one carrying it are one append: when the
    /// held one is refused, nothing after it is stored either.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_refused_held_write_takes_the_write_carrying_it_down() {
        let temp = long_hold("held-refused");
        let s = temp.store.claim_session("s").unwrap();
        temp.store.ensure_session("s", "main").unwrap();
        temp.refuse_messages_containing("poison", "refused by a trigger");
        let held = temp
            .store
            .hold_results(&s, &[user("poison")], Vec::new())
            .unwrap();
        let error = temp
            .store
            .append_after(Some(held), &s, &[user("reply")])
            .await
            .unwrap_err();
        assert!(
            error.to_string().contains("refused by a trigger"),
            "{error}"
        );
        assert_eq!(temp.store.history("s").unwrap(), []);
    }

    /// Calls that change nothing need not be stored before they run: held
    /// behind the user message, they and their results (with the results'
    /// events) ride with the reply, and the whole input is one commit.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn held_calls_and_their_results_ride_with_the_reply() {
        let temp = long_hold("held-chain");
        let s = temp.store.claim_session("s").unwrap();
        let first = temp
            .store
            .hold_append_creating(&s, "main", &[user("question")])
            .unwrap();
        let calls = temp
            .store
            .hold_after(Some(first), &s, &[user("calls")])
            .await
            .unwrap();
        let start = ToolEvent::Start {
            call_id: "c1".into(),
            tool: "demo_echo".into(),
            args: serde_json::json!({}),
            batch_id: "b1".into(),
            batch_size: 1,
            parallel: false,
        };
        let results = temp
            .store
            .hold_results_after(
                Some(calls),
                &s,
                &[user("result")],
                vec![EventRow::from_event(&start)],
            )
            .await
            .unwrap();
        assert_eq!(commits(&temp), 0, "nothing committed before the reply");
        let appended = temp
            .store
            .append_after(Some(results), &s, &[user("reply")])
            .await
            .unwrap();
        assert_eq!(appended.seqs, 4..=4);
        assert_eq!(commits(&temp), 1);
        assert_eq!(
            temp.store.history("s").unwrap(),
            [
                user("question"),
                user("calls"),
                user("result"),
                user("reply")
            ]
        );
        assert_eq!(temp.store.tool_events("s").unwrap().len(), 1);
    }

    /// Calls held behind the user message stay held whatever their size:
    /// the next write (their results) takes them, and the size limit
    /// applies to that write, which carries them.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn held_calls_above_the_limit_wait_for_their_results() {
        let temp = long_hold("held-big-calls");
        let s = temp.store.claim_session("s").unwrap();
        let first = temp
            .store
            .hold_append_creating(&s, "main", &[user("question")])
            .unwrap();
        let big = user(&"c".repeat(temp.store.hold_at_most));
        let calls = temp
            .store
            .hold_after(Some(first), &s, std::slice::from_ref(&big))
            .await
            .unwrap();
        assert_eq!(commits(&temp), 0, "calls above the limit still held");
        // The results with the calls carried are above the limit: queued at
        // once, one commit for all three writes.
        let results = temp
            .store
            .hold_results_after(Some(calls), &s, &[user("result")], Vec::new())
            .await
            .unwrap();
        let stored = results.committed().await.unwrap();
        assert_eq!(stored, 1..=3);
        assert_eq!(commits(&temp), 1);
        assert_eq!(
            temp.store.history("s").unwrap(),
            [user("question"), big, user("result")]
        );
    }

    /// A write behind one already queued waits for its commit, and fails
    /// with it: nothing is stored after a write that failed.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_write_held_behind_a_queued_one_that_fails_fails_with_it() {
        let temp = long_hold("held-behind-failed");
        let s = temp.store.claim_session("s").unwrap();
        temp.store.ensure_session("s", "main").unwrap();
        temp.refuse_messages_containing("poison", "refused by a trigger");
        // Larger than a write is held: queued at once, and refused.
        let large = user(&format!("poison {}", "x".repeat(temp.store.hold_at_most)));
        let poisoned = temp.store.hold_results(&s, &[large], Vec::new()).unwrap();
        let error = temp
            .store
            .hold_after(Some(poisoned), &s, &[user("calls")])
            .await
            .unwrap_err();
        assert!(
            error.to_string().contains("refused by a trigger"),
            "{error}"
        );
        assert_eq!(temp.store.history("s").unwrap(), []);
    }
}
