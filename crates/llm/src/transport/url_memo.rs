//! The URL a provider last sent to, parsed once.
//!
//! A provider sends every request to the same URL (one per model on
//! Gemini), and parsing it costs more than the rest of the request's head.
//! The parse of the last URL is kept; a request to another URL replaces it.

use std::sync::{Mutex, PoisonError};

use reqwest::Url;

#[derive(Debug, Default)]
pub(super) struct UrlMemo {
    /// Boxed: a provider is kept in an enum beside small variants.
    last: Mutex<Option<Box<(String, Url)>>>,
}

impl UrlMemo {
    /// `url` parsed: the kept parse when the text is the same. `None` when
    /// it does not parse; the caller then hands reqwest the text, which
    /// reports the error as it always did.
    pub fn parse(&self, url: &str) -> Option<Url> {
        // A panic cannot leave the slot half-written: poisoning is moot.
        let mut last = self.last.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some((text, parsed)) = last.as_deref()
            && text == url
        {
            return Some(parsed.clone());
        }
        let parsed = Url::parse(url).ok()?;
        *last = Some(Box::new((url.to_owned(), parsed.clone())));
        Some(parsed)
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)] // a panic in a test is a test failure

    use super::*;

    #[test]
    fn the_kept_parse_is_used_only_for_the_same_text() {
        let memo = UrlMemo::default();
        let first = "http://127.0.0.1:9/v1/chat/completions";
        let other = "http://127.0.0.1:9/v1beta/models/m:streamGenerateContent?alt=sse";
        assert_eq!(memo.parse(first).unwrap().as_str(), first);
        assert_eq!(memo.parse(first).unwrap().as_str(), first);
        assert_eq!(memo.parse(other).unwrap().as_str(), other);
        assert_eq!(memo.parse(first).unwrap().as_str(), first);
        // Not a URL: no parse, and the kept one is not handed out for it.
        assert_eq!(memo.parse("not a url"), None);
        assert_eq!(memo.parse(first).unwrap().as_str(), first);
    }
}
