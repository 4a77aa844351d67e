//! Command hooks: the person's own policy scripts, run before and after
//! tool calls, speaking the JSON protocol people already use with coding
//! agents.
//!
//! A hook entry names a command, a matcher on tool names and a timeout. The
//! command runs with `sh -c` — the one place HomeAgent uses a shell, because
//! the command is written by the person in their own config, exactly as in
//! the tools they already use (the model's `cmd_run` never uses a shell).
//! It gets a clean environment (`PATH`, `HOME`, `HOMEAGENT_SESSION_ID` and what the
//! entry lists) and the call as JSON on stdin:
//! `hook_event_name`, `session_id`, `tool_name`, `tool_input`, `tool_use_id`,
//! and after the call also `tool_response` and `success`.
//!
//! Before a call ([`CommandPreHook`]): exit 0 lets it run, unless stdout is
//! JSON whose `hookSpecificOutput.permissionDecision` is `deny` (refused with
//! `permissionDecisionReason`) or `ask` (the approval policy decides);
//! `hookSpecificOutput.updatedInput` replaces the arguments, which the
//! kernel validates again. The older top-level `decision: "block"` (with
//! `reason`) and `continue: false` (with `stopReason`) refuse it too.
//! JSON is read strictly where a mistake could hide a deny, and refuses
//! the call naming it: output that starts with `{` but is not JSON, a
//! `hookSpecificOutput` key put at the top level or misspelled there, an
//! unknown key inside `hookSpecificOutput`, a decision that is not one of
//! the protocol's strings (the event's own keys, printed by a hook that
//! passes its input through, are not a decision and are ignored). Exit 2
//! refuses the call with stderr as the reason
//! the model reads. Any other exit is a non-blocking error: the call runs,
//! and its outcome carries a warning saying so (the model reads it too). A
//! hook still running at its timeout is killed and the call is refused (the
//! kernel's pre-hooks fail closed), the kill recorded in the refusal.
//!
//! After a call ([`CommandPostHook`]): exit 0 may add
//! `hookSpecificOutput.additionalContext` for the model; exit 2 or
//! `decision: "block"` (and any
//! failure, a kill at the timeout included) marks the outcome with a
//! warning carrying the hook's message.
//!
//! What a hook prints is bounded: stdout to [`MAX_HOOK_STDOUT_BYTES`]
//! (more refuses the call), stderr to [`MAX_HOOK_STDERR_BYTES`] (cut,
//! marked `…`), the rest read and dropped so the hook never blocks on a
//! full pipe.
//!
//! Matchers are regular expressions on the whole tool name ([`Matcher`]).
//!
//! The hooks implement the kernel's [`PreToolHook`]
//! and [`PostToolHook`], so attached to the
//! runtime's executor they see every path that runs a tool: the model's
//! calls and [`ToolApi`](crate::ToolApi) calls (sequences, `mcp-serve`).

mod matcher;
mod post;
mod pre;
mod process;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use homeagent_core::{PostToolHook, PreToolHook};

pub use matcher::Matcher;
pub use post::CommandPostHook;
pub use pre::CommandPreHook;
pub use process::{MAX_HOOK_STDERR_BYTES, MAX_HOOK_STDOUT_BYTES};

use crate::gate::Approval;

/// The extras key the runtime puts the session id in.
pub const SESSION_EXTRA: &str = "session";

/// One hook entry of the config.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CommandHookSpec {
    /// Which tools the hook sees: a regex on the whole tool name (see
    /// [`Matcher`]); empty means all.
    pub matcher: String,
    /// Run with `sh -c`.
    pub command: String,
    /// Killed after this long.
    pub timeout: Duration,
    /// Extra environment for the command (names and values).
    pub env: BTreeMap<String, String>,
}

impl CommandHookSpec {
    /// A hook for every tool with the default 60 s timeout.
    pub fn new(command: impl Into<String>) -> Self {
        CommandHookSpec {
            matcher: String::new(),
            command: command.into(),
            timeout: Duration::from_secs(60),
            env: BTreeMap::new(),
        }
    }
}

/// A hook entry that cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum HookSpecError {
    #[error("a hook has an empty `command`; give the shell command to run")]
    EmptyCommand,
    #[error(
        "hook {hook} has an invalid matcher `{matcher}`: {reason}; a matcher is a regular expression matched against the whole tool name (`cmd_run`, `files_read|files_write`, `git__.*`), or empty for every tool"
    )]
    InvalidMatcher {
        /// The hook's name: `pre_tool_use[i]` or `post_tool_use[i]`, its
        /// place among the config's entries.
        hook: String,
        matcher: String,
        /// What the regex compiler said.
        reason: String,
    },
}

/// The hooks of a config, ready for `Executor::with_pre_hook` /
/// `with_post_hook`, in config order.
#[derive(Clone, Default)]
pub struct CommandHooks {
    pub pre: Vec<Arc<dyn PreToolHook>>,
    pub post: Vec<Arc<dyn PostToolHook>>,
}

impl std::fmt::Debug for CommandHooks {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let names = |hooks: Vec<&str>| hooks.join(", ");
        f.debug_struct("CommandHooks")
            .field("pre", &names(self.pre.iter().map(|h| h.name()).collect()))
            .field("post", &names(self.post.iter().map(|h| h.name()).collect()))
            .finish()
    }
}

impl CommandHooks {
    /// `executor` with every hook attached, pre-hooks and post-hooks in
    /// config order.
    pub fn attach(&self, executor: homeagent_core::Executor) -> homeagent_core::Executor {
        let executor = self
            .pre
            .iter()
            .fold(executor, |e, hook| e.with_pre_hook(hook.clone()));
        self.post
            .iter()
            .fold(executor, |e, hook| e.with_post_hook(hook.clone()))
    }
}

/// Builds the command hooks of a config, in order.
///
/// `approval` is what a pre-hook's `ask` goes through: the same policy the
/// gate uses for `require_approval` tools.
pub fn command_hooks(
    pre: &[CommandHookSpec],
    post: &[CommandHookSpec],
    approval: Approval,
) -> Result<CommandHooks, HookSpecError> {
    let mut pres: Vec<Arc<dyn PreToolHook>> = Vec::new();
    for (i, spec) in pre.iter().enumerate() {
        pres.push(Arc::new(
            CommandPreHook::new(format!("pre_tool_use[{i}]"), spec)?
                .with_approval(approval.clone()),
        ));
    }
    let mut posts: Vec<Arc<dyn PostToolHook>> = Vec::new();
    for (i, spec) in post.iter().enumerate() {
        posts.push(Arc::new(CommandPostHook::new(
            format!("post_tool_use[{i}]"),
            spec,
        )?));
    }
    Ok(CommandHooks {
        pre: pres,
        post: posts,
    })
}
