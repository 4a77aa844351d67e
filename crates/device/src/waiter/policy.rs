//! What the waiter lets run: [`WaiterPolicy`], built in exactly one place
//! ([`WaiterPolicy::load`] / [`WaiterPolicy::from_config`]) for every path
//! that starts a waiter, and [`handle_cmd`], one `cmd` frame to one
//! `cmd_result` frame.
//!
//! The decision itself is `cmd_run`'s: [`check_command_async`] and
//! [`run_checked`] with a [`CmdRunPolicy`]. This module only adds the
//! device's own switch (`device_authorized`), the argv form, and messages
//! that tell the model (and the person behind it) which file on which
//! machine to change.

use std::path::Path;
use std::time::Duration;

use homeagent_core::ErrorReason;
use homeagent_tools::cmd_run::PolicyError;
use homeagent_tools::{CmdRefusal, CmdRunPolicy, check_command_async, run_checked};
use serde_json::Value;

use super::config::{MAX_OUTPUT_CAP_BYTES, WaiterConfig, WaiterConfigError};
use crate::protocol::{CmdStatus, DeviceFrame};

/// The device's policy: its own switch plus `cmd_run`'s policy.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WaiterPolicy {
    /// `device_authorized`: when false every command is refused.
    pub authorized: bool,
    /// Allowlist, write guard, limits: enforced by `cmd_run`'s code.
    pub cmd: CmdRunPolicy,
}

impl Default for WaiterPolicy {
    fn default() -> Self {
        WaiterPolicy {
            authorized: true,
            cmd: CmdRunPolicy::default(),
        }
    }
}

impl WaiterPolicy {
    /// Also refuses commands that read `paths` (or anything under them):
    /// HomeAgent's own files on this machine, which a waiter run by the
    /// server's user reaches as the server does. Each is taken as far as
    /// it exists, symlinks resolved, as `cmd_run`'s are.
    pub fn protecting(mut self, paths: impl IntoIterator<Item = std::path::PathBuf>) -> Self {
        for path in paths {
            let resolved = homeagent_tools::files::resolved_as_far_as_it_exists(&path);
            if !self.cmd.private_paths.contains(&resolved) {
                self.cmd.private_paths.push(resolved);
            }
        }
        self
    }

    /// The one way from a config file to a policy, used by every start
    /// path (foreground and `--daemon`). `path: None` means no file: the
    /// defaults. `authorized` is `--device-authorized`, which wins over
    /// the file.
    pub fn load(
        path: Option<&Path>,
        authorized: Option<bool>,
    ) -> Result<(WaiterConfig, WaiterPolicy), WaiterConfigError> {
        let (config, shown) = match path {
            Some(path) => (WaiterConfig::read(path)?, path),
            None => (WaiterConfig::default(), Path::new("(no waiter.toml)")),
        };
        let policy = WaiterPolicy::from_config(&config, shown, authorized)?;
        Ok((config, policy))
    }

    /// Builds and checks the policy `config` describes; `path` names the
    /// file in errors.
    pub fn from_config(
        config: &WaiterConfig,
        path: &Path,
        authorized: Option<bool>,
    ) -> Result<WaiterPolicy, WaiterConfigError> {
        let defaults = CmdRunPolicy::default();
        let max_timeout = config.max_timeout(path)?.unwrap_or(defaults.max_timeout);
        let timeout = config
            .timeout(path)?
            .unwrap_or(defaults.timeout.min(max_timeout));
        let output_cap_bytes = config.output_cap_bytes.unwrap_or(defaults.output_cap_bytes);
        let invalid = |key: &'static str, problem: String| WaiterConfigError::Invalid {
            path: path.to_owned(),
            key,
            problem,
        };
        if output_cap_bytes > MAX_OUTPUT_CAP_BYTES {
            return Err(invalid(
                "output_cap_bytes",
                format!(
                    "{output_cap_bytes} is more than {MAX_OUTPUT_CAP_BYTES}, the most a result \
                     frame can carry; lower it"
                ),
            ));
        }
        let cmd = CmdRunPolicy {
            allowlist: config.device_cmd_allowlist.clone(),
            allow_writes: config.allow_writes,
            timeout,
            max_timeout,
            env: config.env.clone(),
            output_cap_bytes,
            working_dir: config.working_dir.clone(),
            // The waiter's own config may hold its device token.
            private_paths: path.canonicalize().into_iter().collect(),
        };
        // cmd_run's own checks, reworded to name waiter.toml's keys.
        cmd.validate().map_err(|problem| match problem {
            PolicyError::ProgramRunner { program } => invalid(
                "device_cmd_allowlist",
                format!(
                    "`{program}` runs other programs (a shell, interpreter or wrapper) and is \
                     never allowed, because it would allow everything; remove it and list the \
                     programs it would run"
                ),
            ),
            PolicyError::BadProgramName { name } => invalid(
                "device_cmd_allowlist",
                format!("`{name}` is not a program name; list bare names like `ls`"),
            ),
            PolicyError::BadEnvName { name, why } => {
                invalid("env", format!("`{name}` {why}; remove it"))
            }
            PolicyError::TimeoutAboveMax { timeout, max } => invalid(
                "timeout",
                format!("{timeout:?} is longer than max_timeout ({max:?})"),
            ),
            // The keys that can be zero are spelled the same in both files.
            PolicyError::Zero { key } => invalid(key, "must be greater than zero".to_string()),
            PolicyError::WorkingDir { dir, problem } => invalid(
                "working_dir",
                format!(
                    "`{}` {problem}; give an existing directory on this machine, or leave it out",
                    dir.display()
                ),
            ),
        })?;
        Ok(WaiterPolicy {
            authorized: authorized.or(config.device_authorized).unwrap_or(true),
            cmd,
        })
    }

    /// One line for the start-up log: what this device will run.
    pub fn summary(&self) -> String {
        if !self.authorized {
            return "device_authorized = false: every command is refused".to_string();
        }
        let list = self.cmd.effective_allowlist();
        format!(
            "commands allowed: {} ({} programs: {}); writes {}; timeout {} s (at most {} s); \
             output cap {} bytes per stream",
            if self.cmd.allowlist.is_empty() {
                "built-in list"
            } else {
                "device_cmd_allowlist"
            },
            list.len(),
            list.join(", "),
            if self.cmd.allow_writes {
                "allowed"
            } else {
                "refused"
            },
            self.cmd.timeout.as_secs_f64(),
            self.cmd.max_timeout.as_secs_f64(),
            self.cmd.output_cap_bytes,
        )
    }
}

/// Runs one `cmd` under `policy` and answers it. Exactly one of `argv` and
/// `command` must be set; `timeout_ms` 0 means the policy's default, and
/// anything above `max_timeout` is capped to it. The timeout counts from
/// `arrived`, when the command reached the waiter, as the server counts it
/// from when it sent it: the time it waited for a command slot and its
/// check come out of it. Never fails: every problem is a result with a
/// status, a detail and (for refusals) a hint.
///
/// Dropping the returned future kills a running child (`kill_on_drop`),
/// which is how the client stops commands whose link went away.
pub async fn handle_cmd(
    policy: &WaiterPolicy,
    req_id: u64,
    argv: Option<Vec<String>>,
    command: Option<String>,
    timeout_ms: u64,
    arrived: std::time::Instant,
) -> DeviceFrame {
    if !policy.authorized {
        return refused(
            req_id,
            "this device refuses every command: its waiter runs with device_authorized = false"
                .into(),
            "the device's owner sets device_authorized = true in its waiter.toml (or starts \
             the waiter with --device-authorized true) and restarts the waiter"
                .into(),
        );
    }
    let command = match (argv, command) {
        (Some(argv), None) => shell_words::join(argv),
        (None, Some(command)) => command,
        _ => {
            return failed(
                req_id,
                CmdStatus::Error,
                "malformed cmd: exactly one of `argv` and `command` must be set".into(),
            );
        }
    };
    let timeout = match timeout_ms {
        0 => policy.cmd.timeout,
        ms => Duration::from_millis(ms).min(policy.cmd.max_timeout),
    };
    // cmd_run's own check, here to word a refusal for a device (which
    // file, on which machine). Off the waiter's one async worker: a path
    // on a dead mount blocks its check, and would stop every command.
    let left = || Some(timeout.saturating_sub(arrived.elapsed())).filter(|left| !left.is_zero());
    let did_not_run = |what: &str| {
        failed(
            req_id,
            CmdStatus::Timeout,
            format!(
                "the command {what} for {} ms, its whole timeout, and did not run; the device is \
                 busy, try again when fewer commands run there",
                arrived.elapsed().as_millis()
            ),
        )
    };
    let Some(check_within) = left() else {
        return did_not_run("waited for one of the device's command slots");
    };
    let checked = match check_command_async(&policy.cmd, &command, check_within).await {
        Ok(checked) => checked,
        // A check cut short because the wait for a slot left it too
        // little time says nothing of the machine's mounts.
        Err(CmdRefusal::Unchecked { .. }) if left().is_none() => {
            return did_not_run("waited for a command slot and its check");
        }
        Err(refusal) => {
            tracing::info!(%refusal, "waiter refused a command");
            let (detail, hint) = explain(policy, &refusal);
            return refused(req_id, detail, hint);
        }
    };
    let Some(run_within) = left() else {
        return did_not_run("waited for a command slot and its check");
    };
    match run_checked(&checked, &policy.cmd, run_within, std::future::pending()).await {
        Ok(value) => ran(req_id, &value),
        Err(error) => {
            let status = match error.reason {
                ErrorReason::Denied => CmdStatus::Refused,
                ErrorReason::Timeout => CmdStatus::Timeout,
                _ => CmdStatus::Error,
            };
            DeviceFrame::CmdResult {
                req_id,
                status,
                exit_code: None,
                stdout: String::new(),
                stderr: String::new(),
                truncated: false,
                duration_ms: None,
                detail: Some(error.detail),
                hint: error.hint,
            }
        }
    }
}

/// The refusal reworded for a device: the detail says what was refused and
/// under which setting, the hint what the model or the owner can do.
fn explain(policy: &WaiterPolicy, refusal: &CmdRefusal) -> (String, String) {
    const RESTART: &str = "in the device's waiter.toml and restarts the waiter";
    match refusal {
        CmdRefusal::NotAllowed { program, allowed } => {
            let source = if policy.cmd.allowlist.is_empty() {
                "the built-in list; its waiter.toml sets no device_cmd_allowlist"
            } else {
                "device_cmd_allowlist in its waiter.toml"
            };
            (
                format!(
                    "`{program}` is not in this device's command allowlist ({source}); \
                     allowed: {}",
                    allowed.join(", ")
                ),
                format!(
                    "use one of the allowed programs; to allow `{program}`, the device's owner \
                     adds it to device_cmd_allowlist {RESTART} (a configured list replaces the \
                     built-in one)"
                ),
            )
        }
        CmdRefusal::WriteOnlyProgram { .. } | CmdRefusal::WriteGuard { .. } => (
            format!("{refusal} on this device"),
            format!(
                "drop the writing option; if the device's owner wants writes, they set \
                 allow_writes = true {RESTART}"
            ),
        ),
        CmdRefusal::ProgramRunner { .. } => (
            refusal.to_string(),
            "call the program you want to run directly, if this device allows it".into(),
        ),
        CmdRefusal::ShellOperator { .. } => (
            refusal.to_string(),
            "run each program in its own device_cmd_run call and combine the results yourself; \
             quote characters meant literally, e.g. `grep 'a|b' file`"
                .into(),
        ),
        CmdRefusal::NeverAllowed { .. } => (
            refusal.to_string(),
            "run the other program with its own device_cmd_run call".into(),
        ),
        other => (other.to_string(), other.hint()),
    }
}

fn ran(req_id: u64, value: &Value) -> DeviceFrame {
    let text = |key: &str| {
        value
            .get(key)
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_string()
    };
    let exit_code = value
        .get("exit_code")
        .and_then(Value::as_i64)
        .and_then(|code| i32::try_from(code).ok());
    let detail = match (exit_code, value.get("signal").and_then(Value::as_i64)) {
        (None, Some(signal)) => Some(format!("the program was killed by signal {signal}")),
        _ => None,
    };
    DeviceFrame::CmdResult {
        req_id,
        status: CmdStatus::Ok,
        exit_code,
        stdout: text("stdout"),
        stderr: text("stderr"),
        truncated: value
            .get("truncated")
            .and_then(Value::as_bool)
            .unwrap_or(false),
        duration_ms: value.get("duration_ms").and_then(Value::as_u64),
        detail,
        hint: None,
    }
}

fn refused(req_id: u64, detail: String, hint: String) -> DeviceFrame {
    DeviceFrame::CmdResult {
        req_id,
        status: CmdStatus::Refused,
        exit_code: None,
        stdout: String::new(),
        stderr: String::new(),
        truncated: false,
        duration_ms: None,
        detail: Some(detail),
        hint: Some(hint),
    }
}

/// A result with no output, for a command that did not run.
pub(super) fn failed(req_id: u64, status: CmdStatus, detail: String) -> DeviceFrame {
    DeviceFrame::CmdResult {
        req_id,
        status,
        exit_code: None,
        stdout: String::new(),
        stderr: String::new(),
        truncated: false,
        duration_ms: None,
        detail: Some(detail),
        hint: None,
    }
}
