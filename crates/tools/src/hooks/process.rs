//! Running one hook command: `sh -c`, a clean environment, the event as
//! JSON on stdin, and its whole process group killed when it ends, times
//! out or is stopped.

use std::collections::BTreeMap;
use std::process::Stdio;
use std::time::Duration;

use serde_json::Value;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::process_group::ProcessGroup;

/// The most of a hook's stdout kept: one JSON object or a line of text,
/// with room for a rewritten input. A hook that prints more is refused.
pub const MAX_HOOK_STDOUT_BYTES: usize = 1024 * 1024;
/// The most of a hook's stderr kept: it becomes a refusal's reason or a
/// warning, which the model reads; the rest is cut, marked with `…`.
pub const MAX_HOOK_STDERR_BYTES: usize = 4 * 1024;

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
    let (stdout, stderr) = (child.stdout.take(), child.stderr.take());
    let work = async move {
        let ((), stdout, stderr, status) = tokio::join!(
            write_input,
            read_capped(stdout, MAX_HOOK_STDOUT_BYTES),
            read_capped(stderr, MAX_HOOK_STDERR_BYTES),
            child.wait()
        );
        Ok::<_, std::io::Error>((status?, stdout?, stderr?))
    };
    match tokio::time::timeout(timeout, work).await {
        Ok(Ok((status, (stdout, stdout_cut), (stderr, stderr_cut)))) => {
            if stdout_cut {
                return Err(format!(
                    "printed more than {MAX_HOOK_STDOUT_BYTES} bytes on stdout; a hook prints \
                     one JSON object or a line of text"
                ));
            }
            let mut stderr = String::from_utf8_lossy(&stderr).into_owned();
            if stderr_cut {
                stderr.push('…');
            }
            Ok(HookRun {
                code: status.code(),
                stdout: String::from_utf8_lossy(&stdout).into_owned(),
                stderr,
            })
        }
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

/// Reads `pipe` to its end, keeping its first `cap` bytes (whether more
/// came is the flag): the rest is read and dropped, so a hook that prints
/// on is not blocked on a full pipe until its timeout.
async fn read_capped(
    pipe: Option<impl tokio::io::AsyncRead + Unpin>,
    cap: usize,
) -> std::io::Result<(Vec<u8>, bool)> {
    let mut kept = Vec::new();
    let mut cut = false;
    let Some(mut pipe) = pipe else {
        return Ok((kept, cut));
    };
    let mut buffer = [0u8; 8192];
    loop {
        let read = pipe.read(&mut buffer).await?;
        if read == 0 {
            return Ok((kept, cut));
        }
        let room = cap.saturating_sub(kept.len());
        kept.extend_from_slice(&buffer[..read.min(room)]);
        cut |= read > room;
    }
}

/// The keys a hook's JSON may hold at its top level, and inside
/// `hookSpecificOutput`: the protocol's, whichever event. Inside
/// `hookSpecificOutput` any other key is a mistake; at the top level only
/// one that is a slip of these, or a `hookSpecificOutput` key put outside
/// it: a hook that passes its input through (`tee -a log`) prints the
/// event's own keys there, and that is not a decision.
const TOP_LEVEL_KEYS: &[&str] = &[
    "continue",
    "stopReason",
    "suppressOutput",
    "systemMessage",
    "decision",
    "reason",
    "hookSpecificOutput",
];
const SPECIFIC_KEYS: &[&str] = &[
    "hookEventName",
    "permissionDecision",
    "permissionDecisionReason",
    "updatedInput",
    "additionalContext",
];

/// What a hook printed as JSON.
#[derive(Debug, Default)]
pub(crate) struct HookJson {
    /// `hookSpecificOutput` (empty when absent).
    pub(crate) specific: serde_json::Map<String, Value>,
    /// The hook blocked by the protocol's top-level fields: `decision:
    /// "block"` (the older form of a deny) or `continue: false`; the
    /// reason it gave, if any.
    pub(crate) blocked: Option<Option<String>>,
}

/// A hook's stdout read as the protocol's JSON. Plain text is no output.
/// The rest is read strictly, since reading a mistake as "nothing to say"
/// would wave the call through: text that starts like a JSON object but
/// does not parse, a key in the wrong place or misspelled (see
/// [`TOP_LEVEL_KEYS`]), a `hookSpecificOutput` that is not an object, or a
/// `decision` other than `approve` or `block` is an error naming what was
/// wrong.
pub(crate) fn read_output(stdout: &str) -> Result<Option<HookJson>, String> {
    let trimmed = stdout.trim();
    if !trimmed.starts_with('{') {
        return Ok(None);
    }
    let mut top = match serde_json::from_str::<Value>(trimmed) {
        Ok(Value::Object(map)) => map,
        Ok(_) => return Ok(None),
        Err(err) => {
            return Err(format!(
                "printed output that starts with `{{` but is not valid JSON ({err}); print one \
                 JSON object, or plain text"
            ));
        }
    };
    misplaced_key(&top)?;
    let specific = match top.remove("hookSpecificOutput") {
        None | Some(Value::Null) => serde_json::Map::new(),
        Some(Value::Object(specific)) => specific,
        Some(other) => {
            return Err(format!(
                "printed `hookSpecificOutput` as {other}; it must be a JSON object"
            ));
        }
    };
    known_keys(&specific, SPECIFIC_KEYS, "hookSpecificOutput.")?;
    let text = |key: &str| top.get(key).and_then(Value::as_str).map(str::to_owned);
    let blocked = match top.get("decision") {
        None | Some(Value::Null) => None,
        Some(Value::String(decision)) if decision == "approve" => None,
        Some(Value::String(decision)) if decision == "block" => Some(text("reason")),
        Some(other) => {
            return Err(format!(
                "printed decision {other}; expected \"approve\" or \"block\" (or \
                 hookSpecificOutput.permissionDecision)"
            ));
        }
    };
    let blocked = match top.get("continue") {
        None | Some(Value::Null | Value::Bool(true)) => blocked,
        Some(Value::Bool(false)) => blocked.or_else(|| Some(text("stopReason"))),
        // `"false"` or `0` may be a stop the hook meant: never read as
        // "go on".
        Some(other) => {
            return Err(format!("printed continue {other}; expected true or false"));
        }
    };
    Ok(Some(HookJson { specific, blocked }))
}

/// An error naming a top-level key that is a `hookSpecificOutput` key or
/// a slip of a top-level one; other unknown keys are the event passed
/// through.
fn misplaced_key(top: &serde_json::Map<String, Value>) -> Result<(), String> {
    match top.keys().find(|key| {
        !TOP_LEVEL_KEYS.contains(&key.as_str())
            && (SPECIFIC_KEYS.contains(&key.as_str())
                || homeagent_core::registry::slip_of(key, TOP_LEVEL_KEYS).is_some())
    }) {
        Some(key) => Err(unknown_key(key, TOP_LEVEL_KEYS, "")),
        None => Ok(()),
    }
}

/// An error naming the first key of `map` not in `known`.
fn known_keys(
    map: &serde_json::Map<String, Value>,
    known: &[&str],
    prefix: &str,
) -> Result<(), String> {
    match map.keys().find(|key| !known.contains(&key.as_str())) {
        Some(key) => Err(unknown_key(key, known, prefix)),
        None => Ok(()),
    }
}

/// `unknown` named as a mistake, with where it belongs or the known key
/// it is a slip of.
fn unknown_key(unknown: &str, known: &[&str], prefix: &str) -> String {
    let closest = if prefix.is_empty() && SPECIFIC_KEYS.contains(&unknown) {
        " (it belongs inside hookSpecificOutput)".to_owned()
    } else {
        homeagent_core::registry::slip_of(unknown, known)
            .map(|candidate| format!(" (did you mean `{candidate}`?)"))
            .unwrap_or_default()
    };
    format!(
        "printed JSON with an unknown key `{prefix}{unknown}`{closest}; the keys it may print \
         are {}, and inside hookSpecificOutput {}",
        TOP_LEVEL_KEYS.join(", "),
        SPECIFIC_KEYS.join(", ")
    )
}
