//! The post-tool command hook.

use std::collections::BTreeMap;
use std::time::Duration;

use homeagent_core::hooks::HookFuture;
use homeagent_core::{CallInfo, PostToolHook, ToolOutcome};
use serde_json::{Value, json};

use super::matcher::Matcher;
use super::pre::extra;
use super::process::{read_output, run_hook};
use super::{CommandHookSpec, HookSpecError, SESSION_EXTRA};

/// Runs a command after each matching call; see the module docs.
pub struct CommandPostHook {
    name: String,
    matcher: Matcher,
    command: String,
    timeout: Duration,
    env: BTreeMap<String, String>,
}

impl CommandPostHook {
    pub fn new(name: impl Into<String>, spec: &CommandHookSpec) -> Result<Self, HookSpecError> {
        if spec.command.trim().is_empty() {
            return Err(HookSpecError::EmptyCommand);
        }
        let name = name.into();
        Ok(CommandPostHook {
            matcher: Matcher::parse(&name, &spec.matcher)?,
            name,
            command: spec.command.clone(),
            timeout: spec.timeout,
            env: spec.env.clone(),
        })
    }
}

impl PostToolHook for CommandPostHook {
    fn name(&self) -> &str {
        &self.name
    }

    fn sees(&self, tool: &str) -> bool {
        self.matcher.matches(tool)
    }

    fn after(&self, call: &CallInfo, outcome: &ToolOutcome) -> HookFuture<Option<Value>> {
        if !self.sees(&call.tool) {
            return Box::pin(async { Ok(None) });
        }
        let session = extra(call, SESSION_EXTRA);
        let event = json!({
            "hook_event_name": "PostToolUse",
            "session_id": session,
            "tool_name": call.tool,
            "tool_input": call.arguments,
            "tool_use_id": call.call_id,
            "tool_response": outcome.value,
            "success": outcome.success,
        });
        let command = self.command.clone();
        let env = self.env.clone();
        let timeout = self.timeout;
        let value = outcome.value.clone();
        Box::pin(async move {
            let run = run_hook(&command, &env, &session, &event, timeout).await?;
            match run.code {
                Some(0) => {}
                // The kernel records a post-hook's error as a warning on
                // the outcome and keeps the result: that is the mark.
                Some(2) => return Err(format!("flagged the result: {}", run.stderr.trim())),
                other => {
                    return Err(format!(
                        "exited with {other:?} (not 0 or 2): {}",
                        run.stderr.trim()
                    ));
                }
            }
            let Some(said) = read_output(&run.stdout)? else {
                return Ok(None);
            };
            // The older form of exit 2: the result is flagged.
            if let Some(reason) = said.blocked {
                return Err(format!(
                    "flagged the result: {}",
                    reason.unwrap_or_else(|| "(no reason given)".to_owned())
                ));
            }
            let context = said
                .specific
                .get("additionalContext")
                .and_then(Value::as_str)
                .map(str::to_owned);
            Ok(context.map(|context| with_context(value, context)))
        })
    }
}

/// The value with the hook's context added where the model reads it.
fn with_context(value: Value, context: String) -> Value {
    match value {
        Value::Object(mut map) => {
            map.insert("additional_context".into(), Value::String(context));
            Value::Object(map)
        }
        Value::String(text) => Value::String(format!("{text}\n\n{context}")),
        Value::Null => Value::String(context),
        other => json!({"result": other, "additional_context": context}),
    }
}
