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
//! fair), and hold no thread. Group commit still groups: while one call
//! commits, the others in flight queue their writes for the next group.
//!
//! The permit travels with the call onto its thread, so a caller that stops
//! waiting (a client hung up) does not let another call in while its own
//! still runs.

use std::sync::Arc;

use super::{Store, StoreError};

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

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
    use std::time::Duration;

    use super::*;

    use crate::store::testing::temp_store;

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

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_caller_that_stops_waiting_keeps_its_place_until_its_call_ends() {
        let temp = temp_store("abandon");
        let released = Arc::new(AtomicBool::new(false));
        let started = Arc::new(AtomicUsize::new(0));
        let mut waiting = Vec::new();
        for _ in 0..CALLS_AT_ONCE {
            let (store, released, started) = (
                Arc::clone(&temp.store),
                Arc::clone(&released),
                Arc::clone(&started),
            );
            waiting.push(tokio::spawn(async move {
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
}
