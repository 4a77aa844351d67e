//! Call notes: what the code serving one call attaches to that call's
//! outcome besides its value — warnings, and the text the model reads when
//! the tool renders its result itself.
//!
//! A handler returns `Result<Value, ToolError>`, and that stays the whole
//! contract for most tools. Some results need more: an MCP server's answer
//! that breaks the tool's `outputSchema` is still the answer, but the model
//! should be told; a command hook that exits with an unexpected code lets
//! the call run, but the outcome should say so; an MCP server that sends
//! both structured content and its own text wants the structure kept as the
//! value and its text shown to the model.
//!
//! The executor opens one scope per call around its pre-hooks, its handler
//! (on the handler's own task) and its post-hooks. [`add_warning`] and
//! [`set_text`] called from any of them write to that call's notes and no
//! other: sibling calls of a parallel batch each have their own scope, and
//! a call made through a nested executor (a sequence, `ToolApi`) gets a
//! scope of its own. The notes are a task-local rather than a field of
//! [`ToolContext`](crate::ToolContext) because hooks never see a context,
//! and layered sources (the gate, the MCP manager) pass one call through
//! several hands; every one of them runs inside the scope.
//!
//! Outside a scope — on a task the handler spawned itself, or with no
//! executor at all — the functions return `false` and the note is dropped
//! (and logged); a handler that works on other tasks brings its notes back
//! to its own task before returning.

use std::sync::{Arc, Mutex, MutexGuard};

tokio::task_local! {
    static CURRENT: CallNotes;
}

/// Attaches a warning to the outcome of the call being served. It is kept
/// in [`ToolOutcome::warnings`](crate::ToolOutcome::warnings) and shown to
/// the model after the result text, one `warning:` line each.
///
/// Returns `false` when called outside any call's scope (see the module
/// docs); the warning is then only logged.
pub fn add_warning(message: impl Into<String>) -> bool {
    let message = bounded(message.into());
    let noted = CURRENT
        .try_with(|notes| notes.lock().warnings.push(message.clone()))
        .is_ok();
    if !noted {
        tracing::warn!("a tool warning outside any call was dropped: {message}");
    }
    noted
}

/// The most of one warning kept, in bytes. A warning follows the result
/// in what the model reads, past the result's own cap, so it has a bound
/// of its own: a message that quotes a whole value (a schema check's, a
/// hook's stderr) is cut here, marked, whoever made it.
pub const MAX_WARNING_BYTES: usize = 2 * 1024;

/// `message`, cut to [`MAX_WARNING_BYTES`] on a character boundary with a
/// marker naming its whole length.
fn bounded(message: String) -> String {
    if message.len() <= MAX_WARNING_BYTES {
        return message;
    }
    format!(
        "{} [warning cut: {} bytes in all]",
        crate::excerpt(&message, MAX_WARNING_BYTES),
        message.len()
    )
}

/// Sets the text the model reads for the value the handler returns, when
/// the tool has its own rendering of it (an MCP server's text content next
/// to its structured content). The value stays the structured result.
///
/// Used only when the call succeeds; a failure is rendered from its error,
/// and a post-hook that replaces the value re-renders the text from the new
/// value. Returns `false` outside any call's scope.
pub fn set_text(text: impl Into<String>) -> bool {
    let text = text.into();
    CURRENT
        .try_with(|notes| notes.lock().text = Some(text))
        .is_ok()
}

/// Stops the current call's clock (its timeout) until the returned guard
/// is dropped: the time a person takes to approve a call is not the
/// tool's, and a call whose answer came late has not run too long. `None`
/// outside any call's scope, where there is no clock to stop.
pub fn pause_clock() -> Option<ClockPause> {
    CURRENT
        .try_with(|notes| {
            let mut locked = notes.lock();
            if locked.pauses == 0 {
                locked.paused_since = Some(tokio::time::Instant::now());
            }
            locked.pauses += 1;
            drop(locked);
            ClockPause(notes.clone())
        })
        .ok()
}

/// Keeps the call's clock stopped while it lives ([`pause_clock`]).
#[derive(Debug)]
#[must_use = "the clock runs again when this is dropped"]
pub struct ClockPause(CallNotes);

impl Drop for ClockPause {
    fn drop(&mut self) {
        let mut notes = self.0.lock();
        notes.pauses = notes.pauses.saturating_sub(1);
        if notes.pauses == 0
            && let Some(since) = notes.paused_since.take()
        {
            notes.paused_for += since.elapsed();
        }
    }
}

/// One call's notes, shared by everything that serves the call.
#[derive(Debug, Clone, Default)]
pub(crate) struct CallNotes(Arc<Mutex<Notes>>);

#[derive(Debug, Default)]
pub(crate) struct Notes {
    warnings: Vec<String>,
    text: Option<String>,
    /// Live [`ClockPause`]s, since when the first of them, and the time
    /// the clock was stopped before that.
    pauses: u32,
    paused_since: Option<tokio::time::Instant>,
    paused_for: std::time::Duration,
}

impl CallNotes {
    /// A poisoned lock still holds whole entries (each write is one push
    /// or one assignment), so it is read as is.
    fn lock(&self) -> MutexGuard<'_, Notes> {
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Runs `future` with these notes as the current call's.
    pub(crate) async fn scope<F: Future>(&self, future: F) -> F::Output {
        CURRENT.scope(self.clone(), future).await
    }

    /// Runs `f` (a source's synchronous `invoke`) with these notes current.
    pub(crate) fn sync_scope<R>(&self, f: impl FnOnce() -> R) -> R {
        CURRENT.sync_scope(self.clone(), f)
    }

    pub(crate) fn push_warning(&self, warning: String) {
        self.lock().warnings.push(bounded(warning));
    }

    pub(crate) fn take_warnings(&self) -> Vec<String> {
        std::mem::take(&mut self.lock().warnings)
    }

    pub(crate) fn take_text(&self) -> Option<String> {
        self.lock().text.take()
    }

    /// How long the call's clock has been stopped, up to `now`.
    pub(crate) fn paused_for(&self, now: tokio::time::Instant) -> std::time::Duration {
        let notes = self.lock();
        notes.paused_for
            + notes
                .paused_since
                .map_or(std::time::Duration::ZERO, |since| {
                    now.saturating_duration_since(since)
                })
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    /// The clock stops from the first pause to the last one's end, and
    /// the stopped time adds up over separate pauses.
    #[tokio::test(start_paused = true)]
    async fn paused_time_adds_up_from_the_first_pause_to_the_last_end() {
        let notes = CallNotes::default();
        let start = tokio::time::Instant::now();
        let step = |ms| tokio::time::advance(Duration::from_millis(ms));
        let outer = notes.sync_scope(pause_clock).unwrap();
        step(100).await;
        let inner = notes.sync_scope(pause_clock).unwrap();
        step(50).await;
        drop(outer);
        step(25).await;
        // Still stopped: one pause is live.
        assert_eq!(
            notes.paused_for(tokio::time::Instant::now()),
            Duration::from_millis(175)
        );
        drop(inner);
        step(1000).await;
        let _again = notes.sync_scope(pause_clock).unwrap();
        step(10).await;
        assert_eq!(
            notes.paused_for(tokio::time::Instant::now()),
            Duration::from_millis(185)
        );
        assert_eq!(start.elapsed(), Duration::from_millis(1185));
        // Outside a call there is no clock.
        assert!(pause_clock().is_none());
    }
}
