//! One HTTP client, and so one connection pool, per thread that sends.
//!
//! A pooled connection's I/O runs as a task on the runtime of the request
//! that opened it. When `homeagent serve` spreads connections over several
//! threads (each a runtime of its own), a turn on one thread would often
//! take a pooled connection opened by another: every chunk of the model's
//! stream would then be read on that thread and handed back, a wake-up
//! between threads per chunk. The bench saw up to five times the context
//! switches per input that way. With a pool per thread, a request always
//! uses connections its own thread polls. A process with one sending
//! thread (the default) has exactly one client, as before.

use std::sync::{Mutex, PoisonError};
use std::thread::ThreadId;

/// Clients by the thread that sends through them. The first is built when
/// the provider is, so a bad setting (a CA file) fails then; the others
/// are built the same way on a thread's first request.
pub(super) struct ThreadClients {
    build: Box<dyn Fn() -> Option<reqwest::Client> + Send + Sync>,
    first: reqwest::Client,
    by_thread: Mutex<Vec<(ThreadId, reqwest::Client)>>,
}

/// Threads beyond this share the first client: a pool per thread is worth
/// it for the few threads that serve connections, not for an unbounded
/// number of them.
const MAX_CLIENTS: usize = 16;

impl ThreadClients {
    /// `first`, and `build` for each further thread's client (`None` when
    /// it cannot be built; that thread then uses `first`).
    pub(super) fn new(
        first: reqwest::Client,
        build: impl Fn() -> Option<reqwest::Client> + Send + Sync + 'static,
    ) -> Self {
        ThreadClients {
            build: Box::new(build),
            first,
            by_thread: Mutex::new(Vec::new()),
        }
    }

    /// The calling thread's client (a cheap clone: clients share their
    /// pool through an `Arc`).
    pub(super) fn here(&self) -> reqwest::Client {
        let me = std::thread::current().id();
        let mut clients = self
            .by_thread
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if let Some((_, client)) = clients.iter().find(|(thread, _)| *thread == me) {
            return client.clone();
        }
        // The first thread to send takes the first client; a later one
        // gets its own.
        let client = if clients.is_empty() {
            self.first.clone()
        } else if clients.len() < MAX_CLIENTS {
            (self.build)().unwrap_or_else(|| self.first.clone())
        } else {
            return self.first.clone();
        };
        clients.push((me, client.clone()));
        client
    }

    /// How many clients threads have taken (for tests).
    #[cfg(test)]
    pub(super) fn taken(&self) -> usize {
        self.by_thread.lock().map_or(0, |clients| clients.len())
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};

    use super::*;

    fn counting() -> (ThreadClients, Arc<AtomicUsize>) {
        let built = Arc::new(AtomicUsize::new(0));
        let count = Arc::clone(&built);
        let clients = ThreadClients::new(reqwest::Client::new(), move || {
            count.fetch_add(1, Ordering::SeqCst);
            Some(reqwest::Client::new())
        });
        (clients, built)
    }

    #[test]
    fn one_thread_uses_the_first_client_and_builds_none() {
        let (clients, built) = counting();
        for _ in 0..3 {
            let _ = clients.here();
        }
        assert_eq!(built.load(Ordering::SeqCst), 0);
        assert_eq!(clients.taken(), 1);
    }

    #[test]
    fn each_further_thread_builds_its_own_client_once() {
        let (clients, built) = counting();
        let clients = Arc::new(clients);
        let _ = clients.here();
        for _ in 0..2 {
            let clients = Arc::clone(&clients);
            std::thread::spawn(move || {
                let _ = clients.here();
                let _ = clients.here();
            })
            .join()
            .unwrap();
        }
        assert_eq!(built.load(Ordering::SeqCst), 2);
        assert_eq!(clients.taken(), 3);
    }
}
