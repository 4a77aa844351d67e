//! Pre- and post-tool hooks: policy that sees every call.
//!
//! A pre-hook may let a call through, deny it with a reason, or rewrite its
//! arguments (which are then validated again). A post-hook may replace the
//! structured value of a call that ran; the text is re-rendered from it.
//!
//! Hooks fail closed before a call and open after it: a pre-hook that errors
//! or panics denies the call (a broken policy must not wave calls through),
//! while a post-hook that errors or panics leaves the result as it was and
//! adds a warning. Neither ever aborts the batch.

use std::future::Future;
use std::pin::Pin;

use serde_json::Value;

use crate::outcome::ToolOutcome;

/// What a pre-hook sees of a call.
#[derive(Debug, Clone)]
pub struct CallInfo {
    pub call_id: String,
    pub tool: String,
    pub arguments: Value,
    pub batch_id: String,
    /// The batch's extras, shared by its calls.
    pub extras: std::sync::Arc<serde_json::Map<String, Value>>,
}

/// A pre-hook's verdict.
#[derive(Debug, Clone, PartialEq)]
pub enum PreDecision {
    Allow,
    Deny {
        reason: String,
    },
    /// Run with these arguments instead (validated again before dispatch).
    Rewrite {
        arguments: Value,
    },
}

pub type HookFuture<T> = Pin<Box<dyn Future<Output = Result<T, String>> + Send + 'static>>;

pub trait PreToolHook: Send + Sync + 'static {
    /// A short name, used when reporting the hook's own failures.
    fn name(&self) -> &str;
    /// Whether the hook acts on calls to `tool`; `true` unless the hook
    /// knows better. The executor calls the hook only for tools it sees,
    /// and plans by the answer: a hook that sees a call may have effects of
    /// its own, so a batch such a hook sees is stored before it runs even
    /// when every tool is read-only (see
    /// [`Executor::hooks_see`](crate::Executor::hooks_see)), and only a hook
    /// that sees a tool can move its order key.
    fn sees(&self, tool: &str) -> bool {
        let _ = tool;
        true
    }
    fn before(&self, call: &CallInfo) -> HookFuture<PreDecision>;
}

pub trait PostToolHook: Send + Sync + 'static {
    fn name(&self) -> &str;
    /// As [`PreToolHook::sees`].
    fn sees(&self, tool: &str) -> bool {
        let _ = tool;
        true
    }
    /// `Ok(Some(value))` replaces the outcome's structured value.
    fn after(&self, call: &CallInfo, outcome: &ToolOutcome) -> HookFuture<Option<Value>>;
}
