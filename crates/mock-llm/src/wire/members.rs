//! A request body read member by member, so that its tool list can be
//! recognised instead of parsed.
//!
//! # Why
//!
//! Every request of an agent carries its whole tool list (11.5 kB for the
//! demo's tools), the same text request after request. The mock does not
//! use it, but serde still stepped over it byte by byte to check it:
//! about 8 instructions a byte, over a third of the mock's work per input
//! in a blast, CPU the agent it measures shares the machine with.
//!
//! # How
//!
//! [`members`] walks the top-level object and hands each member's value to
//! the caller, which says how long it is. The OpenAI reading parses the
//! members it reads with serde, one value at a time, and asks
//! [`ToolsMemo::known`] whether the tool list is the one it read whole
//! last time: an array that starts the rest of the text and is followed
//! by the end of the member is that array (an array ends where its
//! brackets balance), so it is valid JSON without a second look.
//!
//! Anything unusual (a key with an escape, text after the object) makes
//! the walk answer `None`, and the body goes the way that reads it whole.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, PoisonError};

use serde::Deserialize;

/// Calls `member(key, rest)` for each member of the one object `text`
/// holds, in order, `rest` being the text from the member's value on;
/// `member` answers how many bytes of `rest` the value takes. `None` when
/// `text` is not one object with plain keys (no escapes, which serde
/// would compare unescaped), or when `member` gives up.
pub(crate) fn members<'a>(
    text: &'a str,
    mut member: impl FnMut(&'a str, &'a str) -> Option<usize>,
) -> Option<()> {
    let bytes = text.as_bytes();
    let mut at = blanks(bytes, 0);
    if bytes.get(at) != Some(&b'{') {
        return None;
    }
    at = blanks(bytes, at + 1);
    if bytes.get(at) == Some(&b'}') {
        return (blanks(bytes, at + 1) == bytes.len()).then_some(());
    }
    loop {
        if bytes.get(at) != Some(&b'"') {
            return None;
        }
        let key_start = at + 1;
        let key_len = bytes
            .get(key_start..)?
            .iter()
            .position(|&b| b == b'"' || b == b'\\' || b < 0x20)?;
        let key_end = key_start + key_len;
        if bytes.get(key_end) != Some(&b'"') {
            return None;
        }
        let key = text.get(key_start..key_end)?;
        at = blanks(bytes, key_end + 1);
        if bytes.get(at) != Some(&b':') {
            return None;
        }
        at = blanks(bytes, at + 1);
        at += member(key, text.get(at..)?)?;
        at = blanks(bytes, at);
        match bytes.get(at) {
            Some(b',') => at = blanks(bytes, at + 1),
            Some(b'}') => return (blanks(bytes, at + 1) == bytes.len()).then_some(()),
            _ => return None,
        }
    }
}

/// The first position from `at` on that is not one of JSON's four blanks.
fn blanks(bytes: &[u8], mut at: usize) -> usize {
    while let Some(b' ' | b'\n' | b'\r' | b'\t') = bytes.get(at) {
        at += 1;
    }
    at
}

/// The value `rest` starts with, read by serde, and how many bytes it
/// took; `None` when it is not a `T`.
pub(crate) fn value<'a, T: Deserialize<'a>>(rest: &'a str) -> Option<(T, usize)> {
    let mut values = serde_json::Deserializer::from_str(rest).into_iter::<T>();
    let value = values.next()?.ok()?;
    Some((value, values.byte_offset()))
}

/// The last tool list read whole, to recognise the next one by.
#[derive(Debug, Default)]
pub(crate) struct ToolsMemo {
    last: Mutex<Option<Box<str>>>,
    hits: AtomicU64,
}

impl ToolsMemo {
    /// The length of the tool list `rest` starts with, when it is the
    /// last one [`ToolsMemo::keep`] was given. The caller must check that
    /// the member ends there: only then is it that list.
    pub fn known(&self, rest: &str) -> Option<usize> {
        let last = self.last.lock().unwrap_or_else(PoisonError::into_inner);
        let len = last
            .as_deref()
            .filter(|list| rest.starts_with(*list))?
            .len();
        self.hits.fetch_add(1, Ordering::Relaxed);
        Some(len)
    }

    /// Remembers `list`, read whole and valid, if it is an array (which
    /// ends where its brackets balance, so no longer text starts with it
    /// and is another array).
    pub fn keep(&self, list: &str) {
        if list.starts_with('[') {
            *self.last.lock().unwrap_or_else(PoisonError::into_inner) = Some(list.into());
        }
    }

    /// How many tool lists were recognised (tests).
    #[cfg(test)]
    pub fn hits(&self) -> u64 {
        self.hits.load(Ordering::Relaxed)
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)] // a panic in a test is a test failure

    use super::*;

    fn walk(text: &str) -> Option<Vec<(String, String)>> {
        let mut seen = Vec::new();
        members(text, |key, rest| {
            let (_, len) = value::<serde::de::IgnoredAny>(rest)?;
            seen.push((key.to_owned(), rest[..len].to_owned()));
            Some(len)
        })?;
        Some(seen)
    }

    #[test]
    fn members_are_walked_in_order_with_their_values() {
        let pairs = |list: &[(&str, &str)]| {
            list.iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                .collect::<Vec<_>>()
        };
        assert_eq!(
            walk(" {\"a\" : [1, {\"b\":2}] ,\n\"é\":\"x\\\"y\",\"n\":-1.5e3,\"t\":true} \n"),
            Some(pairs(&[
                ("a", "[1, {\"b\":2}]"),
                ("é", "\"x\\\"y\""),
                ("n", "-1.5e3"),
                ("t", "true")
            ]))
        );
        assert_eq!(walk("{ }"), Some(Vec::new()));
        // A space is plain text in a key; a control character is not JSON.
        assert_eq!(walk("{\"a b\":1}"), Some(pairs(&[("a b", "1")])));
        for odd in [
            "",
            "[]",
            "{\"a\":1",
            "{\"a\":1,}",
            "{\"a\" 1}",
            "{\"a\":1}x",
            "{\"a\":1 \"b\":2}",
            "{\"a\\u0062\":1}",
            "{\"a\u{1f}\":1}",
            "{a:1}",
            "{\"a\":}",
            "{} {}",
        ] {
            assert_eq!(walk(odd), None, "{odd:?}");
        }
    }

    #[test]
    fn only_the_array_kept_is_known() {
        let memo = ToolsMemo::default();
        assert_eq!(memo.known("[1]"), None);
        memo.keep("{\"a\":1}");
        assert_eq!(memo.known("{\"a\":1}"), None, "only arrays are kept");
        memo.keep("[1,[2]]");
        assert_eq!(memo.known("[1,[2]],\"b\":3}"), Some(7));
        assert_eq!(memo.known("[1,[2]]"), Some(7));
        assert_eq!(memo.known("[1,[3]]"), None);
        assert_eq!(memo.known("[1,"), None);
        assert_eq!(memo.hits(), 2);
    }
}
