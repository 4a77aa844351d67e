//! Running a checked command: no shell, a clean environment, a timeout that
//! kills, and output read concurrently under a cap.
//!
//! Both pipes are drained to the end even past the cap (only counted), so a
//! chatty child never blocks on a full pipe and its exit code is the real
//! one; the timeout bounds how long that can take.

use std::os::unix::process::ExitStatusExt;
use std::process::Stdio;
use std::time::{Duration, Instant};

use homeagent_core::{ErrorReason, ToolError};
use serde_json::{Value, json};
use tokio::io::{AsyncRead, AsyncReadExt};
use tokio::process::Command;

use super::check::CheckedCommand;
use super::policy::{CHILD_PATH, CmdRunPolicy, INHERITED_ENV, is_dangerous_env_name};
use super::sed::has_sandbox;
use crate::process_group::ProcessGroup;

/// How one run ended when it did not produce a result value.
pub(crate) enum Stopped {
    TimedOut,
    Cancelled,
}

/// The environment a child starts with, before the command's own
/// assignments: PATH, then HOME/LANG/TZ and the policy's names when the
/// agent has them. Nothing else of the agent's environment (API keys!).
pub fn child_environment(policy: &CmdRunPolicy) -> Vec<(String, String)> {
    environment_from(policy, |name| std::env::var(name).ok())
}

/// [`child_environment`] with the agent's variables read through `lookup`.
fn environment_from(
    policy: &CmdRunPolicy,
    lookup: impl Fn(&str) -> Option<String>,
) -> Vec<(String, String)> {
    let mut env = vec![("PATH".to_string(), CHILD_PATH.to_string())];
    let extra = policy.env.iter().map(String::as_str);
    for name in INHERITED_ENV.iter().copied().chain(extra) {
        if is_dangerous_env_name(name) || env.iter().any(|(n, _)| n == name) {
            continue;
        }
        if let Some(value) = lookup(name) {
            env.push((name.to_string(), value));
        }
    }
    env
}

/// Runs `checked`; a non-zero exit is still `Ok`.
pub(crate) async fn run(
    checked: &CheckedCommand,
    policy: &CmdRunPolicy,
    timeout: Duration,
    cancelled: impl std::future::Future<Output = ()>,
) -> Result<Value, ToolError> {
    let mut command = Command::new(&checked.executable);
    command.arg0(&checked.argv0);
    if checked.sed_sandbox && has_sandbox(&checked.executable).await {
        command.arg("--sandbox");
    }
    command
        .args(&checked.args)
        .env_clear()
        .envs(child_environment(policy))
        .envs(checked.env.iter().cloned())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        // Its own process group, so whatever it starts ends with it.
        .process_group(0);
    if let Some(dir) = &policy.working_dir {
        command.current_dir(dir);
    }

    let started = Instant::now();
    let mut child = command.spawn().map_err(|err| {
        ToolError::execution(format!("cannot start `{}`: {err}", checked.argv0))
            .with_field("command")
            .with_hint("check the program is installed on this machine")
    })?;
    // Killed when the run ends however it ends (result, timeout, cancel,
    // or this future dropped).
    let _group = ProcessGroup::of(child.id());
    tracing::debug!(program = %checked.program, pid = child.id(), "cmd_run started");

    let cap = policy.output_cap_bytes;
    let stdout = child.stdout.take();
    let stderr = child.stderr.take();
    let outcome = {
        let work = async {
            tokio::join!(
                read_capped(stdout, cap),
                read_capped(stderr, cap),
                child.wait()
            )
        };
        tokio::select! {
            done = work => Ok(done),
            () = tokio::time::sleep(timeout) => Err(Stopped::TimedOut),
            () = cancelled => Err(Stopped::Cancelled),
        }
    };

    let (out, err, status) = match outcome {
        Ok(done) => done,
        Err(stopped) => {
            // Kill and reap, so the child is gone when the error is returned.
            if let Err(e) = child.kill().await {
                tracing::warn!(program = %checked.program, error = %e, "cmd_run kill failed");
            }
            return Err(match stopped {
                Stopped::TimedOut => ToolError::new(
                    ErrorReason::Timeout,
                    format!(
                        "`{}` did not finish within {} ms and was killed",
                        checked.argv0,
                        timeout.as_millis()
                    ),
                )
                .with_hint(format!(
                    "pass a longer `timeout` (at most {} s) or ask for less work per call",
                    policy.max_timeout.as_secs()
                )),
                Stopped::Cancelled => ToolError::new(
                    ErrorReason::Cancelled,
                    "the call was stopped; the child was killed",
                ),
            });
        }
    };
    let status = status.map_err(|e| {
        ToolError::execution(format!("waiting for `{}` failed: {e}", checked.argv0))
    })?;
    let duration_ms = started.elapsed().as_millis() as u64;
    tracing::debug!(program = %checked.program, code = ?status.code(), duration_ms, "cmd_run ended");

    let truncated = out.dropped > 0 || err.dropped > 0;
    let mut value = json!({
        "exit_code": status.code(),
        "stdout": out.render(cap),
        "stderr": err.render(cap),
        "truncated": truncated,
        "duration_ms": duration_ms,
    });
    if let (Some(signal), Some(map)) = (status.signal(), value.as_object_mut()) {
        map.insert("signal".into(), json!(signal));
    }
    Ok(value)
}

/// One stream: the first `cap` bytes, and how many more there were.
struct Captured {
    kept: Vec<u8>,
    dropped: u64,
}

impl Captured {
    /// The kept bytes as text, with an explicit marker when some were dropped.
    fn render(&self, cap: usize) -> String {
        let mut kept = self.kept.as_slice();
        if self.dropped > 0 {
            // Do not let the cut turn half a UTF-8 character into U+FFFD.
            if let Err(e) = std::str::from_utf8(kept)
                && e.error_len().is_none()
            {
                kept = &kept[..e.valid_up_to()];
            }
        }
        let mut text = String::from_utf8_lossy(kept).into_owned();
        if self.dropped > 0 {
            text.push_str(&truncation_marker(cap, self.dropped));
        }
        text
    }
}

/// The line appended to a stream that was cut.
pub fn truncation_marker(cap: usize, dropped: u64) -> String {
    format!("\n[cmd_run: output truncated after {cap} bytes; {dropped} more bytes not shown]\n")
}

async fn read_capped<R: AsyncRead + Unpin>(reader: Option<R>, cap: usize) -> Captured {
    let mut captured = Captured {
        kept: Vec::new(),
        dropped: 0,
    };
    let Some(mut reader) = reader else {
        return captured;
    };
    let mut buf = vec![0u8; 16 * 1024];
    loop {
        let n = match reader.read(&mut buf).await {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        let room = cap.saturating_sub(captured.kept.len()).min(n);
        captured.kept.extend_from_slice(&buf[..room]);
        captured.dropped += (n - room) as u64;
    }
    captured
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)] // a panic in a test is a test failure

    use super::*;

    /// A policy that names a variable which changes what a program loads
    /// (config validation refuses it, but `cmd_run` runs with an invalid
    /// policy too) never passes it on, nor a second copy of `PATH`; the
    /// rest is passed in order, once each, when the agent has it.
    #[test]
    fn the_child_gets_only_safe_variables_the_agent_has() {
        let policy = CmdRunPolicy {
            env: [
                "LD_PRELOAD",
                "MY_TOKEN_DIR",
                "TMPDIR",
                "PATH",
                "TZ",
                "UNSET",
            ]
            .map(String::from)
            .to_vec(),
            ..CmdRunPolicy::default()
        };
        let env = environment_from(&policy, |name| {
            (name != "UNSET").then(|| format!("value of {name}"))
        });
        let names: Vec<&str> = env.iter().map(|(name, _)| name.as_str()).collect();
        assert_eq!(names, ["PATH", "HOME", "LANG", "TZ", "MY_TOKEN_DIR"]);
        assert_eq!(env[0].1, CHILD_PATH);
        assert_eq!(env[4].1, "value of MY_TOKEN_DIR");
    }

    /// A cut that falls inside a UTF-8 character drops the character's
    /// first bytes rather than showing U+FFFD; output that was not cut is
    /// shown as it came, a broken last character included.
    #[test]
    fn a_cut_never_shows_half_a_character() {
        let captured = |kept: &[u8], dropped: u64| Captured {
            kept: kept.to_vec(),
            dropped,
        };
        assert_eq!(
            captured(b"a\xc3", 5).render(2),
            format!("a{}", truncation_marker(2, 5))
        );
        assert_eq!(captured(b"a\xc3", 0).render(2), "a\u{FFFD}");
        assert_eq!(captured("aé".as_bytes(), 0).render(3), "aé");
    }

    /// Whether `pid` still runs (a zombie waiting for its reaper does not).
    fn running(pid: i32) -> bool {
        std::fs::read_to_string(format!("/proc/{pid}/stat"))
            .ok()
            .and_then(|stat| {
                let state = stat.rsplit_once(')')?.1.trim_start().chars().next()?;
                Some(state != 'Z' && state != 'X')
            })
            .unwrap_or(false)
    }

    /// A child that started a grandchild and timed out: both are gone when
    /// the timeout error comes back.
    #[tokio::test]
    async fn a_timeout_kills_what_the_child_started() {
        let dir = std::env::temp_dir().join(format!("homeagent-pgroup-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let pid_file = dir.join("grandchild.pid");
        let checked = CheckedCommand {
            program: "sh".into(),
            executable: "/bin/sh".into(),
            argv0: "sh".into(),
            args: vec![
                "-c".into(),
                format!("sleep 30 & echo $! > {}; wait", pid_file.display()),
            ],
            env: vec![],
            sed_sandbox: false,
        };
        let policy = CmdRunPolicy::default();
        let outcome = run(
            &checked,
            &policy,
            Duration::from_millis(500),
            std::future::pending(),
        )
        .await;
        assert!(outcome.is_err(), "{outcome:?}");
        let grandchild: i32 = std::fs::read_to_string(&pid_file)
            .unwrap()
            .trim()
            .parse()
            .unwrap();
        // SIGKILL is delivered at once; give the kernel a moment to act.
        for _ in 0..50 {
            if !running(grandchild) {
                break;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        assert!(!running(grandchild), "grandchild {grandchild} still runs");
        let _ = std::fs::remove_dir_all(dir);
    }

    fn sed_command(script: &str, sandbox: bool) -> CheckedCommand {
        CheckedCommand {
            program: "sed".into(),
            executable: "/usr/bin/sed".into(),
            argv0: "sed".into(),
            args: vec!["-n".into(), script.into()],
            env: vec![],
            sed_sandbox: sandbox,
        }
    }

    /// Plays a guard that missed an `e` command (one did before: GNU sed
    /// ends labels at a blank): with the sandbox, sed itself refuses the
    /// script and nothing runs; without it, the command runs. Needs GNU
    /// sed at /usr/bin/sed (Debian's, which CI installs).
    #[tokio::test]
    async fn the_sandbox_stops_a_sed_script_the_guard_let_through() {
        let version = std::process::Command::new("/usr/bin/sed")
            .arg("--version")
            .output()
            .unwrap();
        assert!(
            String::from_utf8_lossy(&version.stdout).contains("GNU sed"),
            "this test needs GNU sed at /usr/bin/sed"
        );
        assert!(has_sandbox(std::path::Path::new("/usr/bin/sed")).await);
        // `true` exits 0 whatever it is given: not taken for a GNU sed.
        assert!(!has_sandbox(std::path::Path::new("/bin/true")).await);

        let dir = std::env::temp_dir().join(format!("homeagent-sandbox-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let marker = dir.join("ran");
        let script = format!("1e touch {}", marker.display());
        let policy = CmdRunPolicy::default();
        let sandboxed = run(
            &sed_command(&script, true),
            &policy,
            Duration::from_secs(10),
            std::future::pending(),
        )
        .await
        .unwrap();
        assert_ne!(sandboxed["exit_code"], 0, "{sandboxed}");
        assert!(
            sandboxed["stderr"]
                .as_str()
                .unwrap_or("")
                .contains("sandbox"),
            "{sandboxed}"
        );
        assert!(!marker.exists(), "the e command ran inside the sandbox");

        // The same script without the sandbox does run its command (with
        // no input line 1 never comes, so give it /etc/hostname).
        let mut unsandboxed = sed_command(&script, false);
        unsandboxed.args.push("/etc/hostname".into());
        run(
            &unsandboxed,
            &policy,
            Duration::from_secs(10),
            std::future::pending(),
        )
        .await
        .unwrap();
        assert!(marker.exists(), "the control run did not run its command");
        let _ = std::fs::remove_dir_all(dir);
    }
}
