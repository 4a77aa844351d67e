//! Finishing a parallel batch's calls one at a time, in index order.
//!
//! The seed's plan for a parallel batch: fan out, join, then finish
//! serially by index (the original ran `after_toolcall` there). The
//! handlers here still run together, and a call nothing has to finish (no
//! post-hook sees it) still reports its end as soon as it ends; a call whose
//! post-hooks must run waits, before them, until every call before it in
//! the batch has finished. So post-hooks never overlap, and see the calls in
//! the order the model made them.

use std::sync::{Arc, Mutex, PoisonError};

use tokio::sync::Notify;

/// One batch's finishing order.
#[derive(Debug)]
pub(crate) struct Turnstile {
    state: Mutex<State>,
    moved: Notify,
}

#[derive(Debug)]
struct State {
    /// Which calls have finished, by position.
    done: Vec<bool>,
    /// Every call before this position has finished.
    frontier: usize,
}

impl Turnstile {
    pub(crate) fn new(size: usize) -> Arc<Turnstile> {
        Arc::new(Turnstile {
            state: Mutex::new(State {
                done: vec![false; size],
                frontier: 0,
            }),
            moved: Notify::new(),
        })
    }

    /// The call at `position`'s ticket: the call has finished when it is
    /// dropped, however it ended (a refusal, a stop, a panic in a hook).
    pub(crate) fn ticket(self: &Arc<Self>, position: usize) -> Ticket {
        Ticket {
            turnstile: Arc::clone(self),
            position,
        }
    }

    /// Waits until every call before `position` has finished.
    pub(crate) async fn earlier_finished(&self, position: usize) {
        loop {
            // Registered before the check, so a ticket dropped between the
            // two still wakes this.
            let moved = self.moved.notified();
            tokio::pin!(moved);
            moved.as_mut().enable();
            if self.lock().frontier >= position {
                return;
            }
            moved.await;
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// See [`Turnstile::ticket`].
#[derive(Debug)]
pub(crate) struct Ticket {
    turnstile: Arc<Turnstile>,
    position: usize,
}

impl Drop for Ticket {
    fn drop(&mut self) {
        let mut state = self.turnstile.lock();
        if let Some(done) = state.done.get_mut(self.position) {
            *done = true;
        }
        while state.done.get(state.frontier).copied() == Some(true) {
            state.frontier += 1;
        }
        drop(state);
        self.turnstile.moved.notify_waiters();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_position_waits_for_every_one_before_it_in_any_order() {
        let turnstile = Turnstile::new(3);
        let (zero, one) = (turnstile.ticket(0), turnstile.ticket(1));
        // The first position waits for nothing.
        turnstile.earlier_finished(0).await;
        let waiting = {
            let turnstile = Arc::clone(&turnstile);
            tokio::spawn(async move { turnstile.earlier_finished(2).await })
        };
        drop(one);
        tokio::task::yield_now().await;
        assert!(!waiting.is_finished(), "position 0 has not finished");
        drop(zero);
        waiting.await.unwrap();
    }
}
