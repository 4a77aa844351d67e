//! What a codec wrote of a request's messages and tools, kept for the next
//! request.
//!
//! # Why
//!
//! An agent sends its whole history with every model request, and the
//! history only grows: the next request repeats every message of this one
//! and adds a few. Writing each message's JSON again made a request's cost
//! grow with the session (in a blast of 12-input sessions, writing the
//! history was most of what building a request cost). A codec that writes
//! a message the same way wherever it sits in the list can keep the text
//! it wrote and write only the new messages next time.
//!
//! # The contract, and why forgetting it is safe
//!
//! The codec cannot see which messages changed, so the owner of the
//! [`ChatRequest`](super::ChatRequest) says so: before each build it calls
//! [`RenderCache::keep_first`] with how many leading messages it left
//! alone since the last build. That declaration is used by one build only.
//! A build without one writes every message again (and keeps the text for
//! a later, declared build), so a caller that never declares anything gets
//! what it would get without the cache. Only a wrong declaration can send
//! stale text; debug builds check every reused text against a fresh
//! writing, so the test suite holds the agent to it.
//!
//! A clone of a request starts with an empty cache: the clone's messages
//! may be changed apart from the original's.
//!
//! # The tool list
//!
//! The tool list's text is kept too ([`RenderCache::push_tools`]): every
//! request of a session carries the same list, and writing it took a
//! lookup of each tool's kept form and a copy (about 6 k instructions a
//! request for the demo's tools). It needs no declaration: the list is
//! reused only when it holds the very definitions it was written from.

use std::sync::{Mutex, PoisonError};

use super::ToolSpec;

/// Which writing the kept text is: a codec, and its options that change
/// how a message is written (see [`RenderCache`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum RenderShape {
    /// Chat Completions, to any server but Gemini's compatible endpoint.
    OpenAi,
    /// Chat Completions, to Gemini's compatible endpoint.
    OpenAiOnGemini,
}

/// The kept text of a request's leading messages and the caller's
/// declaration of how many of them are unchanged. See the module docs.
#[derive(Default)]
pub struct RenderCache {
    state: Mutex<State>,
}

#[derive(Default)]
struct State {
    written: Option<Written>,
    /// [`RenderCache::keep_first`]'s count, for the next build only.
    declared: Option<usize>,
    /// How many messages the last build took from the kept text.
    reused: usize,
    /// The text of the last tool list written, and its tools.
    tools: Option<KeptTools>,
    /// Whether the last build took its tool list from `tools`.
    tools_reused: bool,
}

/// A tool list's text and the definitions it was written from: clones,
/// so that none of them is freed and another allocated in its place while
/// kept (an identity must not be handed on).
struct KeptTools {
    specs: Vec<ToolSpec>,
    text: String,
}

/// The JSON of messages `0..ends.len()`, comma-separated, as one shape
/// writes them.
#[derive(Debug)]
pub(crate) struct Written {
    pub shape: RenderShape,
    pub text: String,
    /// `ends[i]`: the length of `text` through message `i`.
    pub ends: Vec<usize>,
}

impl Written {
    pub fn new(shape: RenderShape) -> Written {
        Written {
            shape,
            text: String::new(),
            ends: Vec::new(),
        }
    }

    /// Keeps the first `count` messages' text.
    pub fn truncate(&mut self, count: usize) {
        self.ends.truncate(count);
        self.text.truncate(self.ends.last().copied().unwrap_or(0));
    }

    /// Adds the next message's text.
    pub fn push(&mut self, message_text: &str) {
        if !self.ends.is_empty() {
            self.text.push(',');
        }
        self.text.push_str(message_text);
        self.ends.push(self.text.len());
    }
}

impl RenderCache {
    /// Declares that the request's first `count` messages are the ones the
    /// last build wrote, unchanged, for the next build only. Declaring
    /// twice keeps the smaller count.
    pub fn keep_first(&self, count: usize) {
        let mut state = self.lock();
        state.declared = Some(state.declared.map_or(count, |before| before.min(count)));
    }

    /// How many messages the last build took from the kept text instead
    /// of writing them (for tests and diagnostics).
    pub fn reused(&self) -> usize {
        self.lock().reused
    }

    /// The kept text a build of `shape` may start from, cut to the
    /// declared count and to `limit` messages, and that count. Without a
    /// declaration, or for another shape, a fresh [`Written`]: the build
    /// keeps its own text for the next one.
    pub(crate) fn take(&self, shape: RenderShape, limit: usize) -> (Written, usize) {
        let mut state = self.lock();
        let declared = state.declared.take().unwrap_or(0);
        let mut written = match state.written.take() {
            Some(written) if written.shape == shape => written,
            _ => Written::new(shape),
        };
        let reuse = written.ends.len().min(declared).min(limit);
        written.truncate(reuse);
        state.reused = reuse;
        (written, reuse)
    }

    /// Appends the text of the tool list `tools` as `write` writes it: the
    /// text of the last build's list when it was the same definitions (the
    /// same [`ToolSpec`]s or clones of them, which never change), else
    /// what `write` writes, kept for the next build. Unlike the messages,
    /// this needs no declaration: a definition's identity says it all.
    /// Debug builds check a reused text against a fresh writing.
    pub(crate) fn push_tools(
        &self,
        tools: &[ToolSpec],
        out: &mut String,
        write: impl Fn(&mut String),
    ) {
        let mut state = self.lock();
        let same = state.tools.as_ref().is_some_and(|kept| {
            kept.specs.len() == tools.len()
                && kept.specs.iter().zip(tools).all(|(a, b)| a.is_same(b))
        });
        state.tools_reused = same;
        if let (true, Some(kept)) = (same, &state.tools) {
            out.push_str(&kept.text);
            #[cfg(debug_assertions)]
            {
                let mut fresh = String::new();
                write(&mut fresh);
                assert_eq!(
                    kept.text, fresh,
                    "a kept tool list differs from a fresh one"
                );
            }
            return;
        }
        let start = out.len();
        write(out);
        state.tools = Some(KeptTools {
            specs: tools.to_vec(),
            text: out.get(start..).unwrap_or_default().to_owned(),
        });
    }

    /// Whether the last build took its tool list from the one before (for
    /// tests and diagnostics).
    pub fn tools_reused(&self) -> bool {
        self.lock().tools_reused
    }

    /// Keeps `written` for the next build.
    pub(crate) fn put(&self, written: Written) {
        self.lock().written = Some(written);
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        // Nothing panics while holding it; if something ever did, the
        // state is still whole (every field is written in one step).
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// Empty: a clone's messages may change apart from the original's.
impl Clone for RenderCache {
    fn clone(&self) -> RenderCache {
        RenderCache::default()
    }
}

/// Always equal: the cache is not part of what a request asks.
impl PartialEq for RenderCache {
    fn eq(&self, _: &RenderCache) -> bool {
        true
    }
}

impl std::fmt::Debug for RenderCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let state = self.lock();
        f.debug_struct("RenderCache")
            .field(
                "messages",
                &state.written.as_ref().map_or(0, |w| w.ends.len()),
            )
            .field("declared", &state.declared)
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cache_with(messages: &[&str]) -> RenderCache {
        let cache = RenderCache::default();
        let mut written = Written::new(RenderShape::OpenAi);
        for text in messages {
            written.push(text);
        }
        cache.put(written);
        cache
    }

    /// A clone starts empty, and the cache never makes two requests
    /// unequal: it is not part of what a request asks.
    #[test]
    fn a_clone_is_empty_and_equal() {
        let cache = cache_with(&["{\"a\":1}", "{\"b\":2}"]);
        cache.keep_first(2);
        let copy = cache.clone();
        assert_eq!(
            format!("{copy:?}"),
            "RenderCache { messages: 0, declared: None }"
        );
        assert_eq!(
            format!("{cache:?}"),
            "RenderCache { messages: 2, declared: Some(2) }"
        );
        assert!(cache == copy);
        let (written, reused) = cache.take(RenderShape::OpenAi, 5);
        assert_eq!((written.text.as_str(), reused), ("{\"a\":1},{\"b\":2}", 2));
        let (written, reused) = copy.take(RenderShape::OpenAi, 5);
        assert_eq!((written.text.as_str(), reused), ("", 0));
    }
}
