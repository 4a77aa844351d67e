//! The pre-tool command hook.

use std::collections::BTreeMap;
use std::time::Duration;

use homeagent_core::hooks::HookFuture;
use homeagent_core::{CallInfo, PreDecision, PreToolHook};
use serde_json::{Value, json};

use super::matcher::Matcher;
use super::process::{read_output, run_hook};
use super::{CommandHookSpec, HookSpecError, SESSION_EXTRA};
use crate::gate::{AGENT_EXTRA, Approval};

/// Runs a command before each matching call; see the module docs for the
/// protocol.
pub struct CommandPreHook {
    name: String,
    matcher: Matcher,
    command: String,
    timeout: Duration,
    env: BTreeMap<String, String>,
    approval: Approval,
}

impl CommandPreHook {
    /// `name` appears in the outcome when the hook itself fails.
    pub fn new(name: impl Into<String>, spec: &CommandHookSpec) -> Result<Self, HookSpecError> {
        if spec.command.trim().is_empty() {
            return Err(HookSpecError::EmptyCommand);
        }
        let name = name.into();
        Ok(CommandPreHook {
            matcher: Matcher::parse(&name, &spec.matcher)?,
            name,
            command: spec.command.clone(),
            timeout: spec.timeout,
            env: spec.env.clone(),
            // Nobody to ask unless the embedder says who.
            approval: Approval::Refused,
        })
    }

    /// Who answers a hook's `ask`.
    pub fn with_approval(mut self, approval: Approval) -> Self {
        self.approval = approval;
        self
    }
}

impl PreToolHook for CommandPreHook {
    fn name(&self) -> &str {
        &self.name
    }

    fn sees(&self, tool: &str) -> bool {
        self.matcher.matches(tool)
    }

    fn before(&self, call: &CallInfo) -> HookFuture<PreDecision> {
        if !self.sees(&call.tool) {
            return Box::pin(async { Ok(PreDecision::Allow) });
        }
        let session = extra(call, SESSION_EXTRA);
        let agent = extra(call, AGENT_EXTRA);
        let event = json!({
            "hook_event_name": "PreToolUse",
            "session_id": session,
            "tool_name": call.tool,
            "tool_input": call.arguments,
            "tool_use_id": call.call_id,
        });
        let command = self.command.clone();
        let env = self.env.clone();
        let timeout = self.timeout;
        let approval = self.approval.clone();
        let name = self.name.clone();
        let tool = call.tool.clone();
        let arguments = call.arguments.clone();
        Box::pin(async move {
            let run = run_hook(&command, &env, &session, &event, timeout).await?;
            match run.code {
                Some(0) => {}
                // The shell's own codes for a command it could not run
                // (126: not executable, 127: not found): a mistyped hook
                // path has no verdict, and allowing every call would be
                // failing open. It fails closed, like a hook that cannot
                // start.
                Some(code @ (126 | 127)) => {
                    return Err(format!(
                        "could not be run (the shell exited {code}: {}); fix the hook's `command`",
                        run.stderr.trim()
                    ));
                }
                // Killed by a signal (the OOM killer, a crash): no
                // verdict either, and a policy hook that crashes must not
                // become the way around it.
                None => {
                    return Err(format!(
                        "was killed by a signal before it gave a verdict{}",
                        match run.stderr.trim() {
                            "" => String::new(),
                            said => format!(" ({said})"),
                        }
                    ));
                }
                // 128 + N is how a shell reports a command it ran that a
                // signal killed (a policy script's checker, OOM-killed or
                // crashed): no verdict either.
                Some(code @ 129..=192) => {
                    return Err(format!(
                        "exited {code}, which is how a shell reports a command killed by signal \
                         {}, before it gave a verdict{}",
                        code - 128,
                        match run.stderr.trim() {
                            "" => String::new(),
                            said => format!(" ({said})"),
                        }
                    ));
                }
                Some(2) => {
                    let reason = run.stderr.trim();
                    return Ok(PreDecision::Deny {
                        reason: if reason.is_empty() {
                            format!("hook {name} refused the call (exit 2, no reason given)")
                        } else {
                            reason.to_owned()
                        },
                    });
                }
                Some(code) => {
                    // Non-blocking, as in the protocol people know: the
                    // call runs, and its outcome says what went wrong.
                    let warning = format!(
                        "pre-tool hook {name} exited with code {code} (only 0 allows and 2 denies): {}; the call ran anyway",
                        run.stderr.trim()
                    );
                    tracing::warn!("{warning}");
                    homeagent_core::call_notes::add_warning(warning);
                    return Ok(PreDecision::Allow);
                }
            }
            let Some(said) = read_output(&run.stdout)? else {
                return Ok(PreDecision::Allow);
            };
            if let Some(reason) = said.blocked {
                return Ok(PreDecision::Deny {
                    reason: reason.unwrap_or_else(|| format!("hook {name} blocked the call")),
                });
            }
            let specific = said.specific;
            let reason = specific
                .get("permissionDecisionReason")
                .and_then(Value::as_str)
                .map(str::to_owned);
            let decision = match specific.get("permissionDecision") {
                None | Some(Value::Null) => None,
                Some(Value::String(decision)) => Some(decision.as_str()),
                Some(other) => {
                    return Err(format!(
                        "answered permissionDecision {other}; expected \"allow\", \"deny\" or \"ask\""
                    ));
                }
            };
            match decision {
                None | Some("allow") => {}
                Some("deny") => {
                    return Ok(PreDecision::Deny {
                        reason: reason.unwrap_or_else(|| format!("hook {name} denied the call")),
                    });
                }
                Some("ask") => {
                    // About the call that will run: the hook's rewrite,
                    // when it gives one.
                    let asked_about = specific.get("updatedInput").unwrap_or(&arguments);
                    let approved = match &approval {
                        Approval::Granted => true,
                        Approval::Refused => false,
                        Approval::Ask(approver) => {
                            approver.approve(&agent, &tool, asked_about).await
                        }
                    };
                    if !approved {
                        return Ok(PreDecision::Deny {
                            reason: format!(
                                "hook {name} asked for approval and it was not given{}",
                                reason.map(|r| format!(" ({r})")).unwrap_or_default()
                            ),
                        });
                    }
                }
                Some(other) => {
                    // An unknown decision must not wave the call through.
                    return Err(format!(
                        "answered permissionDecision {other:?}; expected allow, deny or ask"
                    ));
                }
            }
            match specific.get("updatedInput") {
                Some(updated) => Ok(PreDecision::Rewrite {
                    arguments: updated.clone(),
                }),
                None => Ok(PreDecision::Allow),
            }
        })
    }
}

pub(super) fn extra(call: &CallInfo, key: &str) -> String {
    call.extras
        .get(key)
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_owned()
}
