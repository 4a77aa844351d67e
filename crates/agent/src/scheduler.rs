//! The scheduler: one input at a time per session, in order; sessions side
//! by side.
//!
//! - Each session has a FIFO queue (bounded by `queue_capacity`) and at
//!   most one worker task; the worker takes a global permit per input, so
//!   at most `max_concurrent_sessions` inputs run at once.
//! - Every submitted input gets exactly one terminal frame: the runtime's
//!   `response` / `error`, or `skipped` (`empty_input`, `queue_full`,
//!   `duplicate` — the last only with a `dedup_window` — or `stopped` when
//!   a stop dropped it from the queue).
//! - An interrupt goes to the front of its session's queue and cancels the
//!   model stream in flight; tools already running finish (the runtime
//!   checks again only at a safe point, after the batch).
//! - A stop cancels the running input, tools included, and drops the
//!   session's queue, answering each dropped input.
//! - A cancel does that to one input only (by the [`InputId`] its submit
//!   returned): a server whose client hangs up must not stop the inputs
//!   other clients queued on the same session.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use serde::Serialize;
use tokio::sync::{Semaphore, mpsc};

use crate::frames::{Frame, SkipReason};
use crate::runtime::{FrameSink, Runtime, TurnControl, TurnInput};

/// Limits of the scheduler (`[scheduler]`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SchedulerOptions {
    pub max_concurrent_sessions: usize,
    /// Inputs waiting per session (the running one not counted).
    pub queue_capacity: usize,
    /// Skip an input identical to one submitted to the same session within
    /// this window. Off (`None`) by default.
    pub dedup_window: Option<Duration>,
}

impl Default for SchedulerOptions {
    fn default() -> Self {
        SchedulerOptions {
            max_concurrent_sessions: 16,
            queue_capacity: 256,
            dedup_window: None,
        }
    }
}

/// An input as submitted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Submission {
    pub session: String,
    pub agent: String,
    pub text: String,
    /// Cancel the session's model stream in flight and run next.
    pub interrupt: bool,
    /// Refuse it as a resend when the session had the same text within
    /// `dedup_window`. Off for an input known to be new: a stateless
    /// conversation's next request, whose transcript shows the answer to
    /// the same words before it.
    pub check_duplicate: bool,
}

/// The frames of one submitted input; the last one is terminal.
pub type Frames = mpsc::UnboundedReceiver<Frame>;

/// Counters, as exposed by the library and the status endpoint.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct SchedulerCounters {
    pub enqueued: u64,
    /// Inputs that ran to their terminal frame.
    pub executed: u64,
    /// Inputs skipped at submission (empty, queue full, duplicate).
    pub rejected: u64,
    /// Running inputs an interrupt cut short (they ended `preempted`).
    pub preempted: u64,
    /// Inputs a stop or a cancel took out of the queue, and running inputs
    /// that ended `stopped`: a stop that came once the reply was written
    /// stopped nothing, and is not counted.
    pub cancelled: u64,
    /// Inputs waiting, per session (sessions with none left out).
    pub queue_depth: HashMap<String, usize>,
    /// Sessions with an input running now.
    pub running_sessions: usize,
    /// Sessions the scheduler holds state for: running, queued, or
    /// remembered for the dedup window.
    pub remembered_sessions: usize,
}

/// Names one submitted input, for [`Scheduler::cancel`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct InputId(u64);

struct Pending {
    id: InputId,
    input: TurnInput,
    frames: Reply,
    /// Sent as an interrupt: it runs ahead of inputs queued normally.
    interrupt: bool,
}

/// An input the dedup window remembers.
struct Recent {
    id: InputId,
    text: String,
    /// When it was submitted.
    at: Instant,
}

/// Where one input's frames go: its own channel, and every observer.
#[derive(Clone)]
struct Reply {
    session: String,
    tx: mpsc::UnboundedSender<Frame>,
    inner: Arc<Inner>,
}

impl Reply {
    fn send(&self, frame: Frame) {
        // A clone of the `Arc`, not of the list: this runs for every frame.
        let observers = Arc::clone(
            &self
                .inner
                .observers
                .lock()
                .unwrap_or_else(PoisonError::into_inner),
        );
        for observer in observers.iter() {
            observer(&self.session, &frame);
        }
        // The submitter may have gone away (a closed HTTP client): the
        // input still runs to its end and its frames still reach observers.
        let _ = self.tx.send(frame);
    }
}

#[derive(Default)]
struct SessionQueue {
    queue: VecDeque<Pending>,
    running: Option<TurnControl>,
    /// The input `running` controls.
    running_id: Option<InputId>,
    worker: bool,
    /// Recent inputs that were queued, for the dedup window: each one's
    /// own entry, so the one that leaves is the one forgotten.
    recent: VecDeque<Recent>,
}

impl SessionQueue {
    /// An input that left the queue without running, or ended without an
    /// answer, is no duplicate of a later one: it leaves the dedup window.
    /// Only its own entry does: a resend of the same text queued since
    /// is still remembered.
    fn forget_recent(&mut self, id: InputId) {
        if let Some(at) = self.recent.iter().position(|recent| recent.id == id) {
            self.recent.remove(at);
        }
    }

    /// Whether nothing keeps this session's entry: no worker, nothing
    /// queued or running, no input within the dedup window. `now` is read
    /// only when there is a remembered input to age.
    fn forgettable(&self, window: Option<Duration>, now: impl FnOnce() -> Instant) -> bool {
        !self.worker
            && self.running.is_none()
            && self.queue.is_empty()
            && self.recent.back().is_none_or(|recent| {
                window.is_none_or(|window| now().duration_since(recent.at) > window)
            })
    }
}

#[derive(Default)]
struct Counts {
    enqueued: AtomicU64,
    executed: AtomicU64,
    rejected: AtomicU64,
    preempted: AtomicU64,
    cancelled: AtomicU64,
}

/// Sees every frame of every input (session id, frame), terminal frames
/// included: the server's event stream and dashboard hang off this.
pub type FrameObserver = Arc<dyn Fn(&str, &Frame) + Send + Sync>;

struct Inner {
    runtime: Arc<Runtime>,
    /// Replaced whole when an observer is added (rare), so sending a frame
    /// (every frame of every input) copies one pointer.
    observers: Mutex<Arc<Vec<FrameObserver>>>,
    options: SchedulerOptions,
    sessions: Mutex<HashMap<String, SessionQueue>>,
    /// When idle sessions remembered only for the dedup window were last
    /// swept out (a session that never sends again is not visited else).
    last_sweep: Mutex<Instant>,
    permits: Arc<Semaphore>,
    counts: Counts,
    next_input: AtomicU64,
    /// Inputs that have ended, their session's `running` cleared, whose
    /// terminal frame is not sent yet: the scheduler is not idle while
    /// there are any ([`Scheduler::idle`]).
    ending: AtomicUsize,
}

/// Runs inputs through a [`Runtime`]. Cheap to clone.
#[derive(Clone)]
pub struct Scheduler {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for Scheduler {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Scheduler")
            .field("options", &self.inner.options)
            .finish_non_exhaustive()
    }
}

impl Scheduler {
    pub fn new(runtime: Arc<Runtime>, options: SchedulerOptions) -> Self {
        let permits = Arc::new(Semaphore::new(options.max_concurrent_sessions.max(1)));
        Scheduler {
            inner: Arc::new(Inner {
                runtime,
                observers: Mutex::new(Arc::new(Vec::new())),
                options,
                sessions: Mutex::new(HashMap::new()),
                last_sweep: Mutex::new(Instant::now()),
                permits,
                counts: Counts::default(),
                next_input: AtomicU64::new(0),
                ending: AtomicUsize::new(0),
            }),
        }
    }

    pub fn runtime(&self) -> &Arc<Runtime> {
        &self.inner.runtime
    }

    /// Adds an observer of every frame from now on (in the order each
    /// input produces them; inputs of different sessions interleave).
    pub fn observe(&self, observer: FrameObserver) {
        let mut observers = self
            .inner
            .observers
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        let mut added = Vec::clone(&observers);
        added.push(observer);
        *observers = Arc::new(added);
    }

    /// Queues an input; its frames arrive on the returned channel, ending
    /// with exactly one terminal frame. Must be called within a Tokio
    /// runtime (the session's worker is a task).
    pub fn submit(&self, submission: Submission) -> Frames {
        self.submit_tracked(submission).1
    }

    /// [`Scheduler::submit`], also naming the input for
    /// [`Scheduler::cancel`].
    pub fn submit_tracked(&self, submission: Submission) -> (InputId, Frames) {
        let id = InputId(self.inner.next_input.fetch_add(1, Ordering::Relaxed));
        (id, self.enqueue(id, submission))
    }

    fn enqueue(&self, id: InputId, submission: Submission) -> Frames {
        let (tx, rx) = mpsc::unbounded_channel();
        let tx = Reply {
            session: submission.session.clone(),
            tx,
            inner: Arc::clone(&self.inner),
        };
        let counts = &self.inner.counts;
        if submission.text.trim().is_empty() {
            counts.rejected.fetch_add(1, Ordering::SeqCst);
            tx.send(Frame::Skipped {
                reason: SkipReason::EmptyInput,
            });
            return rx;
        }
        let mut sessions = self.sessions();
        // The clock is read only with a dedup window: without one, submit
        // (every input) needs no time.
        let dedup = self
            .inner
            .options
            .dedup_window
            .map(|window| (window, Instant::now()));
        let check_duplicate = submission.check_duplicate;
        if let Some((window, now)) = dedup {
            // Once per window: each pass is one walk of the map.
            let mut last_sweep = self
                .inner
                .last_sweep
                .lock()
                .unwrap_or_else(PoisonError::into_inner);
            if now.duration_since(*last_sweep) > window {
                sessions.retain(|_, entry| !entry.forgettable(Some(window), || now));
                *last_sweep = now;
            }
        }
        let entry = sessions.entry(submission.session.clone()).or_default();
        if let Some((window, now)) = dedup {
            while entry
                .recent
                .front()
                .is_some_and(|recent| now.duration_since(recent.at) > window)
            {
                entry.recent.pop_front();
            }
            if check_duplicate
                && entry
                    .recent
                    .iter()
                    .any(|recent| recent.text == submission.text)
            {
                counts.rejected.fetch_add(1, Ordering::SeqCst);
                tx.send(Frame::Skipped {
                    reason: SkipReason::Duplicate,
                });
                return rx;
            }
        }
        if entry.queue.len() >= self.inner.options.queue_capacity {
            counts.rejected.fetch_add(1, Ordering::SeqCst);
            tx.send(Frame::Skipped {
                reason: SkipReason::QueueFull,
            });
            return rx;
        }
        // Remembered only once queued: a refused input may be sent again.
        if let Some((_, now)) = dedup {
            entry.recent.push_back(Recent {
                id,
                text: submission.text.clone(),
                at: now,
            });
        }
        let pending = Pending {
            id,
            input: TurnInput {
                session: submission.session.clone(),
                agent: submission.agent,
                text: submission.text,
            },
            frames: tx,
            interrupt: submission.interrupt,
        };
        if submission.interrupt {
            // Ahead of what was queued, behind earlier interrupts: two
            // sent one after the other run in the order sent.
            let behind = entry.queue.iter().take_while(|p| p.interrupt).count();
            entry.queue.insert(behind, pending);
            // Counted as preempted when the running input ends so (see
            // `work`): it may be past the point an interrupt can cut.
            if let Some(control) = &entry.running {
                control.interrupt.cancel();
            }
        } else {
            entry.queue.push_back(pending);
        }
        counts.enqueued.fetch_add(1, Ordering::SeqCst);
        if !entry.worker {
            entry.worker = true;
            let inner = Arc::clone(&self.inner);
            let session = submission.session;
            tokio::spawn(async move { work(inner, session).await });
        }
        rx
    }

    /// Stops the session: cancels its running input (tools included) and
    /// answers every queued one with `skipped: stopped`. Returns how many
    /// inputs it stopped or asked to stop: a running input whose reply is
    /// already written still answers, and only one that ends `stopped`
    /// is counted in [`SchedulerCounters::cancelled`].
    pub fn stop(&self, session: &str) -> usize {
        let mut sessions = self.sessions();
        let Some(entry) = sessions.get_mut(session) else {
            return 0;
        };
        let mut asked = 0;
        if let Some(control) = &entry.running
            && !control.stop.is_cancelled()
        {
            control.stop.cancel();
            asked += 1;
        }
        let queued = std::mem::take(&mut entry.queue);
        self.inner
            .counts
            .cancelled
            .fetch_add(queued.len() as u64, Ordering::SeqCst);
        for pending in queued {
            entry.forget_recent(pending.id);
            pending.frames.send(Frame::Skipped {
                reason: SkipReason::Stopped,
            });
            asked += 1;
        }
        asked
    }

    /// Cancels one input of `session`: a queued one leaves the queue and is
    /// answered `skipped: stopped`; a running one is stopped (tools
    /// included) and the queue behind it runs on. Returns whether the input
    /// was still queued or running.
    pub fn cancel(&self, session: &str, id: InputId) -> bool {
        let mut sessions = self.sessions();
        let Some(entry) = sessions.get_mut(session) else {
            return false;
        };
        // A running input is counted when it ends `stopped` (see `work`).
        if entry.running_id == Some(id) {
            match &entry.running {
                Some(control) if !control.stop.is_cancelled() => {
                    control.stop.cancel();
                    true
                }
                _ => false,
            }
        } else if let Some(at) = entry.queue.iter().position(|p| p.id == id) {
            if let Some(pending) = entry.queue.remove(at) {
                entry.forget_recent(pending.id);
                pending.frames.send(Frame::Skipped {
                    reason: SkipReason::Stopped,
                });
            }
            self.inner.counts.cancelled.fetch_add(1, Ordering::SeqCst);
            true
        } else {
            false
        }
    }

    /// Whether nothing runs or waits: no input queued or running, and
    /// every ended input's terminal frame sent.
    pub fn idle(&self) -> bool {
        // `ending` counts up before `running` is cleared and down after
        // the frame is sent, so one of the two always shows the input.
        self.busy_sessions().is_empty() && self.inner.ending.load(Ordering::SeqCst) == 0
    }

    /// The sessions with an input running or queued, whoever submitted
    /// it (a server's client may have gone away while its input runs on).
    pub fn busy_sessions(&self) -> Vec<String> {
        self.sessions()
            .iter()
            .filter(|(_, s)| s.running.is_some() || !s.queue.is_empty())
            .map(|(id, _)| id.clone())
            .collect()
    }

    pub fn counters(&self) -> SchedulerCounters {
        let counts = &self.inner.counts;
        let sessions = self.sessions();
        SchedulerCounters {
            enqueued: counts.enqueued.load(Ordering::SeqCst),
            executed: counts.executed.load(Ordering::SeqCst),
            rejected: counts.rejected.load(Ordering::SeqCst),
            preempted: counts.preempted.load(Ordering::SeqCst),
            cancelled: counts.cancelled.load(Ordering::SeqCst),
            queue_depth: sessions
                .iter()
                .filter(|(_, s)| !s.queue.is_empty())
                .map(|(id, s)| (id.clone(), s.queue.len()))
                .collect(),
            running_sessions: sessions.values().filter(|s| s.running.is_some()).count(),
            remembered_sessions: sessions.len(),
        }
    }

    fn sessions(&self) -> MutexGuard<'_, HashMap<String, SessionQueue>> {
        lock(&self.inner.sessions)
    }
}

fn lock(
    sessions: &Mutex<HashMap<String, SessionQueue>>,
) -> MutexGuard<'_, HashMap<String, SessionQueue>> {
    // Every critical section leaves the map consistent: a panic elsewhere
    // cannot leave it half-updated.
    sessions.lock().unwrap_or_else(PoisonError::into_inner)
}

/// An ended input counted in [`Inner::ending`] until dropped, after its
/// terminal frame is sent (however the worker gets there).
struct Ending<'a>(&'a Inner);

impl<'a> Ending<'a> {
    fn start(inner: &'a Inner) -> Self {
        inner.ending.fetch_add(1, Ordering::SeqCst);
        Ending(inner)
    }
}

impl Drop for Ending<'_> {
    fn drop(&mut self) {
        self.0.ending.fetch_sub(1, Ordering::SeqCst);
    }
}

/// A session's worker: runs its queue to empty, one input at a time.
async fn work(inner: Arc<Inner>, session: String) {
    loop {
        let Ok(permit) = Arc::clone(&inner.permits).acquire_owned().await else {
            return;
        };
        let (pending, control) = {
            let mut sessions = lock(&inner.sessions);
            let Some(entry) = sessions.get_mut(&session) else {
                return;
            };
            match entry.queue.pop_front() {
                Some(pending) => {
                    let control = TurnControl::default();
                    entry.running = Some(control.clone());
                    entry.running_id = Some(pending.id);
                    (pending, control)
                }
                None => {
                    // Cleared under the lock, so a submit either sees a
                    // worker that will still look at the queue, or none.
                    entry.worker = false;
                    if entry.forgettable(inner.options.dedup_window, Instant::now) {
                        sessions.remove(&session);
                    }
                    return;
                }
            }
        };
        let frames = pending.frames.clone();
        let sink: FrameSink = Arc::new(move |frame| frames.send(frame));
        // A panic (a bug) ends this input with an error, not the worker:
        // a dead worker left the input without its terminal frame and the
        // session's later inputs waiting for ever.
        let running =
            std::panic::AssertUnwindSafe(inner.runtime.run(&pending.input, &control, &sink));
        let terminal = match futures_util::FutureExt::catch_unwind(running).await {
            Ok(terminal) => terminal,
            Err(payload) => {
                let what = payload
                    .downcast_ref::<&str>()
                    .map(|s| (*s).to_owned())
                    .or_else(|| payload.downcast_ref::<String>().cloned())
                    .unwrap_or_else(|| "a panic".to_owned());
                tracing::error!(session = %session, "an input panicked: {what}");
                Frame::error(
                    "internal",
                    format!(
                        "the agent failed while running this input (a bug: {what}); the session \
                         goes on, and what the input stored before the failure is kept"
                    ),
                )
            }
        };
        let ending = Ending::start(&inner);
        {
            let mut sessions = lock(&inner.sessions);
            if let Some(entry) = sessions.get_mut(&session) {
                entry.running = None;
                entry.running_id = None;
                // Only an answered input is a duplicate of a later one: an
                // error (the model, the store, a busy session) answered
                // nothing, and sending it again must run it.
                if inner.options.dedup_window.is_some()
                    && !matches!(terminal, Frame::Response { .. })
                {
                    entry.forget_recent(pending.id);
                }
            }
        }
        // What the input's end says, not what was asked of it: a stop or
        // an interrupt that came once the reply was written cut nothing.
        if let Frame::Error { code, .. } = &terminal {
            match code.as_str() {
                "stopped" => inner.counts.cancelled.fetch_add(1, Ordering::SeqCst),
                "preempted" => inner.counts.preempted.fetch_add(1, Ordering::SeqCst),
                _ => 0,
            };
        }
        inner.counts.executed.fetch_add(1, Ordering::SeqCst);
        pending.frames.send(terminal);
        drop(ending);
        drop(permit);
    }
}
