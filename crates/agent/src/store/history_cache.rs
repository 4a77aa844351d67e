//! The parsed histories of recently loaded sessions, so that loading a
//! session for its next input parses only what was added since.
//!
//! # Why
//!
//! [`Store::load_session`](super::Store::load_session) runs once per input.
//! Reading and parsing the whole history each time made an input's cost
//! grow with the session's length: in a blast of 12-input sessions it was
//! a sixth of `serve`'s CPU, and a personal agent's sessions run to
//! hundreds of messages.
//!
//! # When a remembered history is still the stored one
//!
//! Messages are append-only except in three places, and each one is
//! covered:
//!
//! - **Appends** (any writer) only add rows after the session's highest
//!   `seq`. The load reads the rows after the remembered last `seq`, so it
//!   sees them.
//! - **Repair** renumbers and inserts in the middle. It happens inside
//!   `load_session`, which has taken the session's entry out of the cache
//!   and does not put it back on that path.
//! - **Deleting** a session (its messages go with it) through this handle
//!   forgets its entry.
//!
//! Writes through *another* connection (another process on the same file,
//! or a second `Store` in this one) could do any of these. SQLite's
//! `PRAGMA data_version` changes exactly when another connection has
//! committed, so the cache is emptied whenever it moved since the last
//! load. Such writes are rare; the cost is one full read per session.
//!
//! # Size
//!
//! The cache is bounded by the stored size of the messages it holds (their
//! JSON text, a fair measure of their parsed size). Past the bound, the
//! least recently loaded sessions are dropped until a quarter of it is
//! free again, so the scan for them is paid once per many loads; the one
//! just loaded stays, since it fits on its own. A single history larger
//! than the bound is not kept.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};

use homeagent_core::Message;

use crate::lru::evict_oldest;

/// Lineages are unique in the process, across caches and stores.
static NEXT_LINEAGE: AtomicU64 = AtomicU64::new(1);

/// The default bound: the JSON text of the messages held.
pub(super) const DEFAULT_CAPACITY_BYTES: usize = 32 << 20;

/// A history with the `seq` of each message, as `read_history` returns it.
pub(super) type SeqHistory = Vec<(i64, Message)>;

/// A remembered history: its messages, the bytes they were stored as, and
/// the token estimates of those counted so far (`tokens[i]` is
/// `context::approx_tokens` of `messages[i]`; the load counts the rest).
#[derive(Debug, Default)]
pub(super) struct Remembered {
    pub messages: SeqHistory,
    pub bytes: usize,
    pub tokens: Vec<usize>,
    /// Names this history from its full read on, in this process: every
    /// load that finds the same lineage finds the messages an earlier one
    /// found, in the same places, perhaps with more after them (see the
    /// module docs for why the cache can say so). What the agent keeps of
    /// a session's last request is reused only under the same lineage.
    pub lineage: u64,
}

#[derive(Debug)]
struct Entry {
    history: Remembered,
    /// The load count at the entry's last use.
    used: u64,
}

#[derive(Debug)]
pub(super) struct HistoryCache {
    entries: HashMap<String, Entry>,
    /// `PRAGMA data_version` at the last load (see the module docs).
    data_version: Option<i64>,
    bytes: usize,
    capacity: usize,
    loads: u64,
}

impl HistoryCache {
    pub fn new(capacity_bytes: usize) -> HistoryCache {
        HistoryCache {
            entries: HashMap::new(),
            data_version: None,
            bytes: 0,
            capacity: capacity_bytes,
            loads: 0,
        }
    }

    /// Empties the cache when another connection has committed since the
    /// last call (`version` is the connection's `PRAGMA data_version`).
    pub fn check_version(&mut self, version: i64) {
        if self.data_version != Some(version) {
            if !self.entries.is_empty() {
                tracing::debug!(
                    sessions = self.entries.len(),
                    "another connection wrote to the store: forgetting the remembered histories"
                );
            }
            self.clear();
            self.data_version = Some(version);
        }
    }

    /// Forgets every history.
    pub fn clear(&mut self) {
        self.entries.clear();
        self.bytes = 0;
    }

    /// The bytes of every remembered history (tests only).
    #[cfg(test)]
    pub fn bytes(&self) -> usize {
        self.bytes
    }

    /// Whether the session's history is remembered.
    pub fn contains(&self, session: &str) -> bool {
        self.entries.contains_key(session)
    }

    /// Takes the session's remembered history out (empty when there is
    /// none); [`HistoryCache::keep`] puts it back once it is known good.
    pub fn take(&mut self, session: &str) -> Remembered {
        match self.entries.remove(session) {
            Some(entry) => {
                self.bytes -= entry.history.bytes;
                entry.history
            }
            None => Remembered {
                lineage: NEXT_LINEAGE.fetch_add(1, Ordering::Relaxed),
                ..Remembered::default()
            },
        }
    }

    /// Remembers `history` as the session's whole stored history.
    pub fn keep(&mut self, session: &str, history: Remembered) {
        self.forget(session);
        if history.bytes > self.capacity {
            return;
        }
        self.loads += 1;
        self.bytes += history.bytes;
        self.entries.insert(
            session.to_owned(),
            Entry {
                history,
                used: self.loads,
            },
        );
        self.evict_beyond_capacity(session);
    }

    /// Adds `messages`, just committed through this connection as the
    /// session's messages numbered from `first` in `bytes` of text, to its
    /// remembered history, when that ends right before them. Otherwise
    /// (not remembered, or a write in between that was not added) nothing
    /// changes: the next load reads whatever the history lacks, as it
    /// reads another connection's writes.
    ///
    /// Only with the connection held, so that no load, repair or deletion
    /// comes between the commit and this.
    pub fn extend_committed(
        &mut self,
        session: &str,
        first: i64,
        messages: Vec<Message>,
        bytes: usize,
    ) {
        let Some(entry) = self.entries.get_mut(session) else {
            return;
        };
        let last = entry.history.messages.last().map_or(0, |(seq, _)| *seq);
        if last != first - 1 {
            return;
        }
        entry.history.messages.extend((first..).zip(messages));
        entry.history.bytes += bytes;
        self.bytes += bytes;
        if entry.history.bytes > self.capacity {
            self.forget(session);
        } else {
            self.evict_beyond_capacity(session);
        }
    }

    /// Past the bound, drops the least recently loaded histories but
    /// `keep`'s (see the module docs).
    fn evict_beyond_capacity(&mut self, keep: &str) {
        if self.bytes > self.capacity {
            evict_oldest(
                &mut self.entries,
                &mut self.bytes,
                self.capacity,
                keep,
                |entry| entry.used,
                |entry| entry.history.bytes,
            );
        }
    }

    /// Drops the session's entry, if any.
    pub fn forget(&mut self, session: &str) {
        if let Some(entry) = self.entries.remove(session) {
            self.bytes -= entry.history.bytes;
        }
    }

    #[cfg(test)]
    fn sessions(&self) -> Vec<&str> {
        let mut sessions: Vec<&str> = self.entries.keys().map(String::as_str).collect();
        sessions.sort_unstable();
        sessions
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn history(bytes: usize) -> Remembered {
        Remembered {
            messages: vec![(1, Message::user("x"))],
            bytes,
            tokens: Vec::new(),
            lineage: 0,
        }
    }

    #[test]
    fn the_least_recently_kept_go_first_until_a_quarter_is_free() {
        let mut cache = HistoryCache::new(100);
        cache.check_version(1);
        for session in ["a", "b", "c", "d"] {
            cache.keep(session, history(25));
        }
        assert_eq!(cache.sessions(), ["a", "b", "c", "d"]);
        // "a" is used again: "b" is now the oldest.
        let a = cache.take("a");
        cache.keep("a", a);
        cache.keep("e", history(10));
        // 110 bytes > 100: drop "b" (85 left), then "c" (60 <= 75).
        assert_eq!(cache.sessions(), ["a", "d", "e"]);
        assert_eq!(cache.bytes, 60);
    }

    #[test]
    fn a_history_larger_than_the_whole_cache_is_not_kept() {
        let mut cache = HistoryCache::new(100);
        cache.check_version(1);
        cache.keep("small", history(40));
        cache.keep("huge", history(101));
        assert_eq!(cache.sessions(), ["small"]);
        assert_eq!(cache.bytes, 40);
        // Exactly the capacity fits (and pushes the rest out).
        cache.keep("exact", history(100));
        assert_eq!(cache.sessions(), ["exact"]);
        assert_eq!(cache.bytes, 100);
    }

    #[test]
    fn taking_and_forgetting_give_the_bytes_back() {
        let mut cache = HistoryCache::new(100);
        cache.check_version(1);
        cache.keep("a", history(30));
        cache.keep("b", history(20));
        assert_eq!(cache.take("a").bytes, 30);
        assert_eq!(cache.take("a").bytes, 0, "taken once");
        cache.forget("b");
        assert_eq!(cache.bytes, 0);
        // Keeping twice replaces, it does not count twice.
        cache.keep("c", history(10));
        cache.keep("c", history(15));
        assert_eq!(cache.bytes, 15);
    }

    /// A lineage names one remembered history from its full read on: kept
    /// and taken again, it stays; read afresh (never remembered,
    /// forgotten, dropped with the cache), it is a new one.
    #[test]
    fn a_history_keeps_its_lineage_until_it_is_read_afresh() {
        let mut cache = HistoryCache::new(100);
        cache.check_version(1);
        let first = cache.take("a");
        let lineage = first.lineage;
        cache.keep("a", first);
        let again = cache.take("a");
        assert_eq!(again.lineage, lineage);
        cache.keep("a", again);
        cache.forget("a");
        let after_forget = cache.take("a").lineage;
        assert_ne!(after_forget, lineage);
        assert_ne!(
            cache.take("b").lineage,
            cache.take("b").lineage,
            "not kept in between"
        );
        let kept = cache.take("c");
        let lineage = kept.lineage;
        cache.keep("c", kept);
        cache.check_version(2);
        assert_ne!(cache.take("c").lineage, lineage, "another connection wrote");
    }

    /// Committed messages join a remembered history that ends right
    /// before them, charged their bytes, under the cache's bound.
    #[test]
    fn committed_messages_extend_a_history_that_ends_before_them() {
        let mut cache = HistoryCache::new(100);
        cache.check_version(1);
        cache.keep("a", history(10)); // message 1
        cache.extend_committed("a", 2, vec![Message::user("y"), Message::user("z")], 20);
        cache.extend_committed("a", 5, vec![Message::user("after a hole")], 7);
        cache.extend_committed("unknown", 1, vec![Message::user("w")], 5);
        assert_eq!(cache.sessions(), ["a"]);
        assert_eq!(cache.bytes, 30);
        let a = cache.take("a");
        assert_eq!(a.bytes, 30);
        let seqs: Vec<i64> = a.messages.iter().map(|(seq, _)| *seq).collect();
        assert_eq!(seqs, [1, 2, 3]);
        assert_eq!(a.messages[2].1, Message::user("z"));
        assert_eq!(cache.bytes, 0);

        // Past the bound the others go, least recently kept first ...
        cache.keep("b", history(40));
        cache.keep("c", history(40));
        cache.extend_committed("c", 2, vec![Message::user("y")], 21);
        assert_eq!(cache.sessions(), ["c"]);
        assert_eq!(cache.bytes, 61);
        // ... exactly the bound is kept, and one that outgrows it alone goes.
        cache.extend_committed("c", 3, vec![Message::user("y")], 39);
        assert_eq!(cache.sessions(), ["c"]);
        assert_eq!(cache.bytes, 100);
        cache.extend_committed("c", 4, vec![Message::user("y")], 1);
        assert!(cache.sessions().is_empty());
        assert_eq!(cache.bytes, 0);
    }

    #[test]
    fn another_connection_s_commit_empties_it() {
        let mut cache = HistoryCache::new(100);
        cache.check_version(7);
        cache.keep("a", history(10));
        cache.check_version(7);
        assert_eq!(cache.sessions(), ["a"]);
        cache.check_version(8);
        assert!(cache.sessions().is_empty());
        assert_eq!(cache.bytes, 0);
    }
}
