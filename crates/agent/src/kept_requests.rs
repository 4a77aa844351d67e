//! Each recent session's last model request, kept for its next input.
//!
//! # Why
//!
//! Within an input, the request is kept from one model request to the next
//! ([`RequestMessages`]): only the new messages are cloned, checked and
//! written. Across inputs it was built afresh, which cloned, checked and
//! wrote the session's whole history again on every input's first
//! request: a cost growing with the session, about a fifth of an input's
//! instructions at twelve inputs of history.
//!
//! # When a kept request is still the right start
//!
//! The next input's history must begin with the messages the kept request
//! was built from. The store says so: a history it loads carries a
//! *lineage* ([`OpenedInput::lineage`](crate::store::OpenedInput::lineage)),
//! the same for every load that found the same messages in the same places
//! (with perhaps more after them), and new whenever the history was read
//! afresh, repaired or written by another connection. A kept request is
//! taken only under the lineage it was kept with, and only with the very
//! same request base (`Arc` identity: the same system prompt and tools);
//! anything else starts afresh. Only an input that ended with the model's
//! reply keeps its request; a failed or stopped one drops it. Debug builds
//! compare every request built from a kept one with one built afresh.
//!
//! # Size
//!
//! Bounded by an estimate of the bytes held (the messages, and the text a
//! codec kept of them): past the bound, the least recently kept go first,
//! until a quarter is free.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use homeagent_llm::ChatRequest;

use crate::context::{CountedHistory, RequestMessages};
use crate::lru::evict_oldest;
use crate::request_base::RequestBase;

/// The default bound on the estimated bytes held.
pub(crate) const DEFAULT_CAPACITY_BYTES: usize = 8 << 20;

/// A session's history at the end of an input, its last request and what
/// that request's messages were built from.
#[derive(Debug)]
pub(crate) struct KeptRequest {
    pub request: ChatRequest,
    pub sent: RequestMessages,
    pub history: CountedHistory,
}

#[derive(Debug)]
struct Entry {
    kept: KeptRequest,
    lineage: u64,
    base: Arc<RequestBase>,
    bytes: usize,
    /// The keep count at the entry's keeping.
    used: u64,
}

#[derive(Debug)]
pub(crate) struct KeptRequests {
    inner: Mutex<Inner>,
    /// How many takes found their request (diagnostics, tests).
    reuses: AtomicU64,
}

#[derive(Debug)]
struct Inner {
    entries: HashMap<String, Entry>,
    bytes: usize,
    capacity: usize,
    keeps: u64,
}

impl Default for KeptRequests {
    fn default() -> KeptRequests {
        KeptRequests::new(DEFAULT_CAPACITY_BYTES)
    }
}

impl KeptRequests {
    pub fn new(capacity_bytes: usize) -> KeptRequests {
        KeptRequests {
            inner: Mutex::new(Inner {
                entries: HashMap::new(),
                bytes: 0,
                capacity: capacity_bytes,
                keeps: 0,
            }),
            reuses: AtomicU64::new(0),
        }
    }

    /// Takes the session's kept request out, with the lineage it was kept
    /// under, if it was kept with `base`; drops it otherwise (it can never
    /// match again). The caller uses it only if the store finds the same
    /// lineage, and then says so ([`KeptRequests::reused`]).
    pub fn take(&self, session: &str, base: &Arc<RequestBase>) -> Option<(u64, KeptRequest)> {
        let mut inner = self.lock();
        let entry = inner.entries.remove(session)?;
        inner.bytes -= entry.bytes;
        Arc::ptr_eq(&entry.base, base).then_some((entry.lineage, entry.kept))
    }

    /// Counts an input that started from a kept request.
    pub fn reused(&self) {
        self.reuses.fetch_add(1, Ordering::Relaxed);
    }

    /// How many inputs started from a kept request.
    pub fn reuses(&self) -> u64 {
        self.reuses.load(Ordering::Relaxed)
    }

    /// Keeps `kept` as the session's request, built from a history of
    /// `lineage` (nothing is kept without one: the next load could not
    /// match it) and `base`.
    pub fn keep(
        &self,
        session: &str,
        lineage: Option<u64>,
        base: Arc<RequestBase>,
        kept: KeptRequest,
    ) {
        let Some(lineage) = lineage else {
            return;
        };
        let bytes = held_bytes(&kept);
        let mut inner = self.lock();
        if let Some(old) = inner.entries.remove(session) {
            inner.bytes -= old.bytes;
        }
        if bytes > inner.capacity {
            return;
        }
        inner.keeps += 1;
        inner.bytes += bytes;
        let used = inner.keeps;
        inner.entries.insert(
            session.to_owned(),
            Entry {
                kept,
                lineage,
                base,
                bytes,
                used,
            },
        );
        if inner.bytes > inner.capacity {
            let Inner {
                entries,
                bytes,
                capacity,
                ..
            } = &mut *inner;
            evict_oldest(
                entries,
                bytes,
                *capacity,
                session,
                |entry| entry.used,
                |entry| entry.bytes,
            );
        }
    }

    /// How many sessions have a kept request (tests).
    #[cfg(test)]
    fn len(&self) -> usize {
        self.lock().entries.len()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        // Every change to the map is made in one step under the lock.
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// About what a kept request holds: its messages and as much again for the
/// codec's text, and the whole history it continues, which is longer than
/// the request once older turns are left out of it (its stored JSON,
/// counted as the token estimate was, twice for the values it is read
/// into).
fn held_bytes(kept: &KeptRequest) -> usize {
    let history: usize = kept
        .history
        .tokens()
        .iter()
        .map(|tokens| tokens.saturating_sub(4) * 4)
        .sum();
    kept.request.encoded_size_hint() * 2 + history * 2
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)] // a panic in a test is a test failure
    use homeagent_core::Message;

    use super::*;

    fn kept(text: &str) -> KeptRequest {
        KeptRequest {
            request: ChatRequest {
                model: String::new(),
                messages: vec![Message::system("p"), Message::user(text)],
                tools: Vec::new(),
                max_tokens: 64,
                temperature: None,
                stream: true,
                rendered: Default::default(),
            },
            sent: RequestMessages::default(),
            history: CountedHistory::new(vec![Message::user(text)]),
        }
    }

    fn text(kept: &KeptRequest) -> &str {
        match &kept.request.messages[1] {
            Message::User { content } => content,
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn a_request_is_taken_back_with_its_lineage_under_its_base_only() {
        let requests = KeptRequests::default();
        let base = RequestBase::bare("p");
        requests.keep("s", Some(7), Arc::clone(&base), kept("one"));
        let (lineage, one) = requests.take("s", &base).unwrap();
        assert_eq!((lineage, text(&one)), (7, "one"));
        assert!(requests.take("s", &base).is_none(), "taken once");
        // Another base (the tools or the prompt changed), even an equal
        // one: dropped for good.
        requests.keep("s", Some(7), Arc::clone(&base), kept("two"));
        assert!(requests.take("s", &RequestBase::bare("p")).is_none());
        assert!(requests.take("s", &base).is_none());
        assert_eq!(requests.len(), 0);
        // No lineage (a new session): nothing to match later, not kept.
        requests.keep("s", None, Arc::clone(&base), kept("three"));
        assert_eq!(requests.len(), 0);
        // Other sessions are left alone.
        requests.keep("a", Some(1), Arc::clone(&base), kept("a"));
        requests.keep("b", Some(2), Arc::clone(&base), kept("b"));
        let (lineage, b) = requests.take("b", &base).unwrap();
        assert_eq!((lineage, text(&b)), (2, "b"));
        assert_eq!(requests.len(), 1);
        // Counted only when the caller says it used one.
        assert_eq!(requests.reuses(), 0);
        requests.reused();
        assert_eq!(requests.reuses(), 1);
    }

    /// A session whose history is far longer than the request sent from
    /// it (older turns left out) counts its history: 20 such sessions of
    /// 10 MB each were kept as about 400 kB each.
    #[test]
    fn a_long_history_counts_toward_the_bound() {
        let base = RequestBase::bare("p");
        let mut long = kept("x");
        long.history = CountedHistory::new(
            (0..2_000)
                .map(|n| Message::user(format!("an old message {n:04} {}", "y".repeat(100))))
                .collect(),
        );
        let request_only = long.request.encoded_size_hint() * 3;
        assert!(
            held_bytes(&long) > 100 * request_only,
            "{}",
            held_bytes(&long)
        );
        let requests = KeptRequests::new(request_only * 10);
        requests.keep("s", Some(1), Arc::clone(&base), long);
        assert_eq!(requests.len(), 0, "past the bound on its own");
    }

    #[test]
    fn past_the_bound_the_least_recently_kept_go_first() {
        let base = RequestBase::bare("p");
        let size = held_bytes(&kept("x"));
        let requests = KeptRequests::new(size * 4);
        for session in ["a", "b", "c", "d"] {
            requests.keep(session, Some(1), Arc::clone(&base), kept("x"));
        }
        assert_eq!(requests.len(), 4);
        // "a" again: "b" is now the oldest. A fifth is over the bound:
        // "b" and then "c" go, leaving three quarters.
        let (_, a) = requests.take("a", &base).unwrap();
        requests.keep("a", Some(1), Arc::clone(&base), a);
        requests.keep("e", Some(1), Arc::clone(&base), kept("x"));
        assert_eq!(requests.len(), 3);
        assert!(requests.take("b", &base).is_none());
        assert!(requests.take("c", &base).is_none());
        for session in ["a", "d", "e"] {
            assert!(requests.take(session, &base).is_some(), "{session}");
        }
        // Keeping a session again replaces it: counted once.
        let two = KeptRequests::new(size * 2);
        for session in ["a", "a", "a", "b"] {
            two.keep(session, Some(1), Arc::clone(&base), kept("x"));
        }
        assert_eq!(two.len(), 2);
        // One larger than the bound is not kept; one exactly as large is.
        let small = KeptRequests::new(size - 1);
        small.keep("a", Some(1), Arc::clone(&base), kept("x"));
        assert_eq!(small.len(), 0);
        let exact = KeptRequests::new(size);
        exact.keep("a", Some(1), Arc::clone(&base), kept("x"));
        assert_eq!(exact.len(), 1);
    }
}
