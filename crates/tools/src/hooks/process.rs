//! Running one hook command: `sh -c`, a clean environment, the event as
//! JSON on stdin, and its whole process group killed when it ends, times
//! out or is stopped.

use std::collections::BTreeMap;
use std::process::Stdio;
use std::time::Duration;

use serde_json::Value;
use tokio::io::AsyncWriteExt;

use crate::process_group::ProcessGroup;

/// What a finished hook said.
pub(crate) struct HookRun {
    /// `None` when it was killed by a signal.
    pub(crate) code: Option<i32>,
    pub(crate) stdout: String,
    pub(crate) stderr: String,
}

/// Runs `command` with `event` on stdin. `Err` describes a hook that could
/// not be started or did not finish in time (it was killed).
pub(crate) async fn run_hook(
    command: &str,
    env: &BTreeMap<String, String>,
    session: &str,
    event: &Value,
    timeout: Duration,
) -> Result<HookRun, String> {
    let mut cmd = tokio::process::Command::new("sh");
    cmd.arg("-c")
        .arg(command)
        .env_clear()
        .env("HOMEAGENT_SESSION_ID", session)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    // PATH and HOME are not secrets, and without them `sh` finds nothing
    // the person expects (`~/bin/check`, `$HOME/.homeagent/audit.log`);
    // nothing else of HomeAgent's environment is passed.
    for name in ["PATH", "HOME"] {
        if let Some(value) = std::env::var_os(name) {
            cmd.env(name, value);
        }
    }
    cmd.envs(env);
    // Its own process group, so a timeout kills what the shell started too.
    #[cfg(unix)]
    cmd.process_group(0);
    let mut child = cmd
        .spawn()
        .map_err(|e| format!("could not start `sh -c {command}`: {e}"))?;
    // Killed as a whole when this returns or is dropped (a stopped batch):
    // nothing the hook started outlives it, whether it finished, timed out
    // or was stopped.
    let _group = ProcessGroup::of(child.id());
    let input = serde_json::to_vec(event).unwrap_or_default();
    let stdin = child.stdin.take();
    // The input is written while the output is read: a hook that echoes
    // what it reads (`cat`, `tee -a log`) fills its stdout pipe before it
    // has read all of a large input, and written first, both would wait.
    let write_input = async move {
        if let Some(mut stdin) = stdin {
            // A hook that does not read its input is fine: ignore EPIPE.
            let _ = stdin.write_all(&input).await;
            // Dropped here: the hook sees the end of its input.
        }
    };
    let work = async move {
        let ((), output) = tokio::join!(write_input, child.wait_with_output());
        output
    };
    match tokio::time::timeout(timeout, work).await {
        Ok(Ok(output)) => Ok(HookRun {
            code: output.status.code(),
            stdout: String::from_utf8_lossy(&output.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
        }),
        Ok(Err(e)) => Err(format!("could not run `sh -c {command}`: {e}")),
        Err(_) => {
            // `_group` kills what the shell started when this returns.
            Err(format!(
                "did not finish within {}ms and was killed",
                timeout.as_millis()
            ))
        }
    }
}

/// `hookSpecificOutput` of a hook's stdout, when stdout is such JSON.
/// Plain text is no output; text that starts like a JSON object but does
/// not parse is an error, since it may be a decision (a deny) with a typo,
/// and reading it as "nothing to say" would wave the call through.
pub(crate) fn specific_output(
    stdout: &str,
) -> Result<Option<serde_json::Map<String, Value>>, String> {
    let trimmed = stdout.trim();
    if !trimmed.starts_with('{') {
        return Ok(None);
    }
    match serde_json::from_str::<Value>(trimmed) {
        Ok(Value::Object(mut map)) => Ok(match map.remove("hookSpecificOutput") {
            Some(Value::Object(specific)) => Some(specific),
            _ => None,
        }),
        Ok(_) => Ok(None),
        Err(err) => Err(format!(
            "printed output that starts with `{{` but is not valid JSON ({err}); print one \
             JSON object, or plain text"
        )),
    }
}
