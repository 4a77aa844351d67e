//! `cmd_run {command, timeout?}`: runs one allowlisted program, **without a
//! shell**, and returns `{exit_code, stdout, stderr, truncated, duration_ms}`.
//!
//! Why no shell: a shell turns one allowed program into any program
//! (`ls; curl … | sh`). Here the command is split into an argv with
//! shell-words quoting rules and executed directly, so pipes, lists,
//! redirection and substitution simply do not exist, and the checker says so
//! instead of passing `|` to the program as an argument.
//!
//! The layers, each its own module:
//!
//! - `policy`: the allowlist (default: read-only inspection programs; a
//!   configured list replaces it; shells, interpreters and wrappers such as
//!   `env` or `xargs` are refused even when configured), `allow_writes`,
//!   limits, and the child's environment variables.
//! - `check`: [`check_command`], everything decidable before running:
//!   operators, `NAME=value` prefixes, the program (basename, exact match,
//!   path-qualified names must be the file `PATH` finds), and the write guard.
//! - `guard`, `options`, `sed`: the write guard reasons about each guarded
//!   program's options as GNU getopt parses them and about sed's script
//!   language. Writes pass with `allow_writes`; running another program
//!   (`find -exec`, sed `e`, `sort --compress-program`) never does.
//! - `private`: what no command reads whatever the allowlist says: other
//!   processes' `/proc` entries (an MCP server's environment holds its
//!   token), the config file, a recursive `grep` from above either, `ps e`,
//!   `--files0-from`; every argument is resolved both as spelled and with
//!   symlinks followed.
//! - `exec`: a clean environment (PATH, HOME, LANG, TZ and the configured
//!   names: never the agent's API keys), stdin closed, a timeout that kills
//!   and reaps the child, stdout and stderr read concurrently under a cap
//!   with an explicit truncation marker.
//!
//! A non-zero exit is a successful call carrying `exit_code`: the program
//! ran and answered. Refusals are `denied` errors whose hint says how to fix
//! them; a program that cannot start is an `execution` error with the OS
//! error.

mod check;
mod exec;
mod guard;
mod options;
mod policy;
mod private;
mod sed;

use std::sync::Arc;
use std::time::Duration;

use homeagent_core::{ErrorReason, Registry, RegistryError, ToolContext, ToolDef, ToolError};
use serde_json::{Value, json};

pub use check::{CheckedCommand, CmdRefusal, check_command, check_command_async};
pub use exec::{child_environment, truncation_marker};
pub use policy::{
    CHILD_PATH, CmdRunPolicy, DEFAULT_ALLOWLIST, INHERITED_ENV, PROGRAM_RUNNERS, PolicyError,
    WRITE_ONLY_PROGRAMS, is_program_runner, leads_to_program_runner,
};
pub use private::PROC_READABLE;

/// The tool's name.
pub const CMD_RUN_TOOL: &str = "cmd_run";

/// Registers `cmd_run` with `policy`. An invalid policy still registers and
/// fails closed (see [`CmdRunPolicy::validate`]).
pub fn register_cmd_run(registry: &Registry, policy: CmdRunPolicy) -> Result<(), RegistryError> {
    if let Err(problem) = policy.validate() {
        tracing::warn!(%problem, "cmd_run policy problem; running fail-closed");
    }
    let mut def = ToolDef::new(CMD_RUN_TOOL, description(&policy))
        .with_parameters(json!({
            "type": "object",
            "properties": {
                "command": {
                    "type": "string",
                    "description": "one program and its arguments, quoted like in a shell, \
                                    e.g. `grep -n 'a|b' /var/log/syslog`; no pipes, \
                                    redirection, `;`, `&&`, `$(…)`, globbing or $VARIABLES"
                },
                "timeout": {
                    "type": ["string", "integer"],
                    "description": format!(
                        "how long the program may run: \"10s\", \"500ms\", \"2m\" or whole \
                         seconds; default {} s, at most {} s",
                        policy.timeout.as_secs(),
                        policy.max_timeout.as_secs()
                    )
                }
            },
            "required": ["command"],
            "additionalProperties": false
        }))
        // The tool enforces the call's own timeout and says so in its error;
        // the executor's must not fire first.
        .with_timeout(policy.max_timeout + Duration::from_secs(5));
    // Only the default programs with writes refused change nothing; then
    // calls may run side by side. Otherwise one call may write what the
    // next reads, so they keep the model's order.
    if policy.changes_nothing() {
        def = def.read_only().parallel_safe();
    }
    let policy = Arc::new(policy);
    registry.register(def, move |ctx: ToolContext| {
        let policy = Arc::clone(&policy);
        async move { call(&policy, ctx).await }
    })
}

fn description(policy: &CmdRunPolicy) -> String {
    let writes = if policy.allow_writes {
        "Options that write files are allowed"
    } else {
        "Read-only: options that write files or change the system (sed -i, find -delete, \
         sort -o, …) are refused"
    };
    format!(
        "Runs one program directly, WITHOUT a shell: no pipes, redirection, `;`, `&&`, `$(…)`, \
         globbing or variable expansion (run one call per program and combine the results \
         yourself). Allowed programs: {}. {writes}; options that run other programs (find \
         -exec, sed's e command) are always refused. Returns exit_code, stdout, stderr, \
         truncated and duration_ms; a non-zero exit_code is a normal result.",
        policy.effective_allowlist().join(", ")
    )
}

async fn call(policy: &CmdRunPolicy, ctx: ToolContext) -> Result<Value, ToolError> {
    let command = ctx
        .arguments
        .get("command")
        .and_then(Value::as_str)
        .ok_or_else(|| {
            ToolError::new(ErrorReason::Required, "`command` (a string) is required")
                .with_field("command")
                .with_hint("pass e.g. {\"command\": \"ls -l /tmp\"}")
        })?;
    let timeout = match ctx.arguments.get("timeout") {
        None | Some(Value::Null) => policy.timeout,
        Some(value) => parse_timeout(value)?.min(policy.max_timeout),
    };
    let cancel = ctx.cancel.clone();
    run_command(
        policy,
        command,
        timeout,
        async move { cancel.cancelled().await },
    )
    .await
}

/// Checks `command` against `policy` and runs it: the whole of `cmd_run`
/// after argument parsing, shared with the device bridge's waiter so both
/// enforce one policy with one piece of code.
///
/// A refusal is a `denied` error whose hint says how to fix it; a non-zero
/// exit is `Ok` with `exit_code`; `cancelled` completing kills the child.
pub async fn run_command(
    policy: &CmdRunPolicy,
    command: &str,
    timeout: Duration,
    cancelled: impl std::future::Future<Output = ()>,
) -> Result<Value, ToolError> {
    let checked = check_command_async(policy, command, timeout)
        .await
        .map_err(|refusal| {
            tracing::info!(%refusal, "cmd_run refused a command");
            ToolError::new(ErrorReason::Denied, refusal.to_string())
                .with_field("command")
                .with_hint(refusal.hint())
        })?;
    run_checked(&checked, policy, timeout, cancelled).await
}

/// Runs a command [`check_command`] (or [`check_command_async`]) passed
/// under `policy`: for a caller that words refusals its own way (the
/// device bridge's waiter) and so checks first.
pub async fn run_checked(
    checked: &CheckedCommand,
    policy: &CmdRunPolicy,
    timeout: Duration,
    cancelled: impl std::future::Future<Output = ()>,
) -> Result<Value, ToolError> {
    exec::run(checked, policy, timeout, cancelled).await
}

/// `"10s"`, `"500ms"`, `"2m"`, `"1.5s"`, `"30"` or the integer `30`
/// (seconds). Zero and negative values are refused.
pub fn parse_timeout(value: &Value) -> Result<Duration, ToolError> {
    let bad = |what: String| {
        ToolError::new(ErrorReason::InvalidArguments, what)
            .with_field("timeout")
            .with_hint("use a duration like \"10s\", \"500ms\" or \"2m\", or whole seconds")
    };
    let seconds = match value {
        Value::Number(n) => n
            .as_f64()
            .ok_or_else(|| bad(format!("timeout {n} is not a number of seconds")))?,
        Value::String(s) => {
            let s = s.trim();
            let (number, scale) = if let Some(n) = s.strip_suffix("ms") {
                (n, 0.001)
            } else if let Some(n) = s.strip_suffix('s') {
                (n, 1.0)
            } else if let Some(n) = s.strip_suffix('m') {
                (n, 60.0)
            } else {
                (s, 1.0)
            };
            number
                .trim()
                .parse::<f64>()
                .map_err(|_| bad(format!("timeout {s:?} is not a duration")))?
                * scale
        }
        other => return Err(bad(format!("timeout {other} is not a duration"))),
    };
    if !seconds.is_finite() || seconds <= 0.0 {
        return Err(bad(format!("timeout {value} must be greater than zero")));
    }
    // Anything huge is capped to max_timeout by the caller anyway.
    Ok(Duration::from_secs_f64(seconds.min(1.0e9)))
}
