//! The checker: from a command line to an argv that may run, or a refusal
//! that says why and how to fix it. Nothing here starts a process; it only
//! reads the file system to resolve program paths.
//!
//! The order of the checks matters for the messages, not for safety: every
//! command passes all of them.
//!
//! 1. Shell operators, found in the raw text *outside quotes*, because after
//!    splitting `grep 'a|b' f` and `grep a|b f` look alike and only the
//!    second one asks for a pipe.
//! 2. Splitting with shell-words rules.
//! 3. Leading `NAME=value` assignments, minus the names that change which
//!    code runs (`LD_PRELOAD`, `PATH`, …).
//! 4. The program: basename matched exactly against the allowlist; runners
//!    refused always; a path-qualified name must be the very file the
//!    child's `PATH` finds for that basename (so `./ls` cannot be a trojan).
//! 5. The write guard on the arguments (see `guard.rs`).

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use super::guard::{Hardening, guard_arguments};
use super::policy::{
    CHILD_PATH, CmdRunPolicy, WRITE_ONLY_PROGRAMS, dangerous_env_reason, is_program_runner,
    leads_to_program_runner,
};
use super::private::check_private_reads;
use crate::off_thread::{ThreadBudget, off_thread};

/// A command that passed every check, ready to run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CheckedCommand {
    /// The basename the allowlist matched.
    pub program: String,
    /// What to execute: the file found on the child's `PATH`, or the bare
    /// name when nothing was found (starting it then fails with the OS error).
    pub executable: PathBuf,
    /// `argv[0]` as the command wrote it.
    pub argv0: String,
    pub args: Vec<String>,
    /// Leading `NAME=value` assignments, in order.
    pub env: Vec<(String, String)>,
    /// Run as `sed --sandbox …` where the sed has it (every sed command;
    /// see `sed::has_sandbox`).
    pub sed_sandbox: bool,
}

/// Why a command may not run. Match on the variant, never on the text.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CmdRefusal {
    #[error("the command is empty{why}")]
    Empty { why: &'static str },
    #[error("the command cannot be split into arguments: {why}")]
    Unparseable { why: String },
    #[error(
        "no shell is used: `{operator}` is a shell operator (pipes, lists, redirection and \
         command substitution do not exist here); each call runs exactly one program"
    )]
    ShellOperator { operator: String },
    #[error("the assignment `{name}=…` is refused: `{name}` {why}")]
    BadEnvAssignment { name: String, why: &'static str },
    #[error("`{program}` is not in the cmd_run allowlist (allowed: {})", allowed.join(", "))]
    NotAllowed {
        program: String,
        allowed: Vec<String>,
    },
    #[error(
        "`{program}` runs other programs (a shell, interpreter or wrapper) and is never allowed"
    )]
    ProgramRunner { program: String },
    #[error(
        "`{given}` is not the `{program}` this tool runs ({}); a path must name the same file \
         as the program found on PATH",
        found.as_ref().map(|p| p.display().to_string()).unwrap_or_else(|| "none on PATH".into())
    )]
    QualifiedPathMismatch {
        given: String,
        program: String,
        found: Option<PathBuf>,
    },
    #[error("`{program}` only changes files and writes are not allowed")]
    WriteOnlyProgram { program: String },
    #[error("`{program} {option}` {why}, and writes are not allowed")]
    WriteGuard {
        program: String,
        option: String,
        why: &'static str,
    },
    #[error("`{program} {option}` {why}; that is never allowed")]
    NeverAllowed {
        program: String,
        option: String,
        why: String,
    },
    #[error("`{program} {argument}` is refused: {why}")]
    PrivatePath {
        program: String,
        argument: String,
        why: String,
    },
    #[error(
        "`{program}`: option `{option}` {why}, so the write guard cannot vouch for the command"
    )]
    UnknownOption {
        program: String,
        option: String,
        why: String,
    },
    /// The check itself did not finish: its paths could not be resolved
    /// within the command's timeout (see [`check_command_async`]).
    #[error("the command could not be checked: {why}")]
    Unchecked { why: String },
}

impl CmdRefusal {
    /// How to fix it, for the model or for the person configuring the agent.
    pub fn hint(&self) -> String {
        match self {
            CmdRefusal::Empty { .. } | CmdRefusal::Unparseable { .. } => {
                "send one program and its arguments, e.g. `ls -l /var/log`".into()
            }
            CmdRefusal::ShellOperator { .. } => "run each program in its own cmd_run call and \
                combine the results yourself; quote characters meant literally, e.g. \
                `grep 'a|b' file`"
                .into(),
            CmdRefusal::BadEnvAssignment { .. } => {
                "drop the assignment; only plain variables like `LC_ALL=C` may be set".into()
            }
            CmdRefusal::NotAllowed { program, .. } => format!(
                "use one of the allowed programs, or ask the operator to add `{program}` to \
                 tools.cmd_run.allowlist"
            ),
            CmdRefusal::ProgramRunner { .. } => {
                "call the program you want to run directly, if it is allowed".into()
            }
            CmdRefusal::QualifiedPathMismatch { program, .. } => {
                format!("write the bare name `{program}` instead of a path")
            }
            CmdRefusal::WriteOnlyProgram { .. } | CmdRefusal::WriteGuard { .. } => {
                "drop the writing option, or ask the operator to set \
                 tools.cmd_run.allow_writes = true"
                    .into()
            }
            CmdRefusal::NeverAllowed { .. } => {
                "run the other program with its own cmd_run call, or pass the script inline".into()
            }
            CmdRefusal::PrivatePath { .. } => "read files outside /proc and outside \
                HomeAgent's own configuration; `ps` lists processes, and /proc/self/* and \
                system-wide files such as /proc/meminfo may be read"
                .into(),
            CmdRefusal::UnknownOption { .. } => {
                "spell the option out in full as the program's --help lists it, or drop it".into()
            }
            CmdRefusal::Unchecked { .. } => "name paths on another file system, or ask the \
                operator to check the machine's mounts (a network mount whose server is gone \
                hangs every program that touches it)"
                .into(),
        }
    }
}

/// Checks whose commands stopped waiting for them, still blocked: at most
/// this many threads are left to the kernel at once.
static CHECKS: ThreadBudget = ThreadBudget::new(16);

/// [`check_command`] on a thread of its own, given at most `within`.
///
/// The check resolves paths (each argument's `realpath`, the program on
/// PATH), and a path on an unresponsive mount — a hard NFS mount whose
/// server is gone, a dead sshfs — blocks that call in the kernel for as
/// long as the mount is gone. On an async worker it stopped every other
/// task of that worker with it (the waiter has one: every command, their
/// timeouts, the link's pings); on tokio's blocking pool it kept one of
/// its few threads for good, which the store and DNS lookups need
/// (`off_thread`). Here only the command waits, and only until `within`
/// (its timeout) has passed; the blocked thread is left to the kernel,
/// and once 16 are, commands are refused at once until some return.
pub async fn check_command_async(
    policy: &CmdRunPolicy,
    command: &str,
    within: std::time::Duration,
) -> Result<CheckedCommand, CmdRefusal> {
    let (policy, command) = (policy.clone(), command.to_owned());
    let check = off_thread(&CHECKS, "cmd-check", move || {
        check_command(&policy, &command)
    });
    match tokio::time::timeout(within, check).await {
        Ok(Ok(checked)) => checked,
        Ok(Err(failed)) => Err(CmdRefusal::Unchecked {
            why: format!("the check could not run: {failed}"),
        }),
        Err(_) => Err(CmdRefusal::Unchecked {
            why: format!(
                "resolving its paths took longer than its timeout of {} ms (a path on an \
                 unresponsive mount?)",
                within.as_millis()
            ),
        }),
    }
}

/// Checks one command line against `policy`.
pub fn check_command(policy: &CmdRunPolicy, command: &str) -> Result<CheckedCommand, CmdRefusal> {
    let command = command.trim_end();
    if let Some(operator) = find_shell_operator(command) {
        return Err(CmdRefusal::ShellOperator { operator });
    }
    if command.contains('\0') {
        return Err(CmdRefusal::Unparseable {
            why: "it holds a NUL character, which no argument of a program can hold".into(),
        });
    }
    let words =
        shell_words::split(command).map_err(|e| CmdRefusal::Unparseable { why: e.to_string() })?;
    if words.is_empty() {
        return Err(CmdRefusal::Empty { why: "" });
    }

    let mut env = Vec::new();
    let mut rest = words.as_slice();
    while let Some((word, tail)) = rest.split_first() {
        let Some((name, value)) = word.split_once('=') else {
            break;
        };
        if !homeagent_core::is_env_var_name(name) {
            return Err(CmdRefusal::BadEnvAssignment {
                name: name.to_string(),
                why: "is not a variable name (letters, digits and `_`, not starting with a digit)",
            });
        }
        if let Some(why) = dangerous_env_reason(name) {
            return Err(CmdRefusal::BadEnvAssignment {
                name: name.to_string(),
                why,
            });
        }
        env.push((name.to_string(), value.to_string()));
        rest = tail;
    }
    let Some((argv0, args)) = rest.split_first() else {
        return Err(CmdRefusal::Empty {
            why: ": only variable assignments, no program",
        });
    };

    let program = Path::new(argv0)
        .file_name()
        .and_then(|n| n.to_str())
        .unwrap_or("")
        .to_string();
    if is_program_runner(&program) {
        return Err(CmdRefusal::ProgramRunner { program });
    }
    let allowed = policy.effective_allowlist();
    if !allowed.contains(&program) {
        return Err(CmdRefusal::NotAllowed { program, allowed });
    }

    let found = find_on_child_path(&program);
    if argv0.contains('/') {
        check_same_file(policy, argv0, &program, found.as_deref())?;
    }
    // An allowed name that is a link to a runner (`editor` to vim) is one.
    if found.as_deref().is_some_and(leads_to_program_runner) {
        return Err(CmdRefusal::ProgramRunner { program });
    }
    if WRITE_ONLY_PROGRAMS.contains(&program.as_str()) && !policy.allow_writes {
        // The guard below still runs when writes are on: a write-only program
        // may have an option that runs another program.
        return Err(CmdRefusal::WriteOnlyProgram { program });
    }
    let hardening = guard_arguments(&program, args, policy.allow_writes)?;
    check_private_reads(policy, &program, args)?;

    Ok(CheckedCommand {
        executable: found.unwrap_or_else(|| PathBuf::from(&program)),
        program,
        argv0: argv0.clone(),
        args: args.to_vec(),
        env,
        sed_sandbox: hardening == Hardening::SedSandbox,
    })
}

/// The first shell operator outside quotes, following shell-words' own
/// quoting states. Inside double quotes `$(` and backticks still count: a
/// shell would substitute there too, so the model meant substitution.
fn find_shell_operator(text: &str) -> Option<String> {
    #[derive(Clone, Copy, PartialEq)]
    enum State {
        Plain,
        Single,
        Double,
        Comment,
    }
    let chars: Vec<char> = text.chars().collect();
    let mut state = State::Plain;
    let mut at_word_start = true;
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        let next = chars.get(i + 1).copied();
        match state {
            State::Plain => match c {
                '\\' => i += 1,
                '\'' => state = State::Single,
                '"' => state = State::Double,
                '#' if at_word_start => state = State::Comment,
                '\n' => return Some("newline".into()),
                ';' | '|' | '&' | '>' | '<' | '`' => {
                    let double = next == Some(c) && c != '`';
                    return Some(if double {
                        format!("{c}{c}")
                    } else {
                        c.to_string()
                    });
                }
                '$' if next == Some('(') => return Some("$(".into()),
                _ => {}
            },
            State::Single => {
                if c == '\'' {
                    state = State::Plain;
                }
            }
            State::Double => match c {
                '\\' => i += 1,
                '"' => state = State::Plain,
                '`' => return Some("`".into()),
                '$' if next == Some('(') => return Some("$(".into()),
                _ => {}
            },
            State::Comment => {
                // A newline ends the comment and starts another command line.
                if c == '\n' {
                    return Some("newline".into());
                }
            }
        }
        if state == State::Plain {
            at_word_start = c == ' ' || c == '\t';
        } else {
            at_word_start = false;
        }
        i += 1;
    }
    None
}

/// The first executable file named `program` in [`CHILD_PATH`].
pub(super) fn find_on_child_path(program: &str) -> Option<PathBuf> {
    find_on(CHILD_PATH, program)
}

/// The first executable file named `program` in the directories of
/// `search_path` (`:`-separated): a directory, or a file nobody may run,
/// is passed over as a shell's lookup passes it.
fn find_on(search_path: &str, program: &str) -> Option<PathBuf> {
    search_path
        .split(':')
        .map(|dir| Path::new(dir).join(program))
        .find(|candidate| {
            std::fs::metadata(candidate)
                .map(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
                .unwrap_or(false)
        })
}

/// A path-qualified program must resolve to the file `PATH` finds.
fn check_same_file(
    policy: &CmdRunPolicy,
    given: &str,
    program: &str,
    found: Option<&Path>,
) -> Result<(), CmdRefusal> {
    let mismatch = || CmdRefusal::QualifiedPathMismatch {
        given: given.to_string(),
        program: program.to_string(),
        found: found.map(Path::to_path_buf),
    };
    let given_path = match &policy.working_dir {
        Some(dir) if Path::new(given).is_relative() => dir.join(given),
        _ => PathBuf::from(given),
    };
    let found = found.ok_or_else(mismatch)?;
    let same = match (given_path.canonicalize(), found.canonicalize()) {
        (Ok(a), Ok(b)) => a == b,
        _ => false,
    };
    if same { Ok(()) } else { Err(mismatch()) }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)] // a panic in a test is a test failure

    use std::os::unix::fs::PermissionsExt;

    use super::*;

    #[test]
    fn the_lookup_takes_only_an_executable_file() {
        let root = std::env::temp_dir().join(format!("homeagent-lookup-{}", std::process::id()));
        let (first, second) = (root.join("first"), root.join("second"));
        for dir in [&first, &second] {
            std::fs::create_dir_all(dir).unwrap();
        }
        let mode = |path: &Path, mode: u32| {
            std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).unwrap();
        };
        // In the first directory: a plain file, a directory (its search
        // bit set) and a file only its group may run.
        std::fs::write(first.join("tool"), "text").unwrap();
        mode(&first.join("tool"), 0o644);
        std::fs::create_dir_all(first.join("dir")).unwrap();
        std::fs::write(first.join("grouped"), "#!/bin/sh\n").unwrap();
        mode(&first.join("grouped"), 0o610);
        for name in ["tool", "dir"] {
            std::fs::write(second.join(name), "#!/bin/sh\n").unwrap();
            mode(&second.join(name), 0o755);
        }
        let search = format!("{}:{}", first.display(), second.display());
        assert_eq!(find_on(&search, "tool"), Some(second.join("tool")));
        assert_eq!(find_on(&search, "dir"), Some(second.join("dir")));
        assert_eq!(find_on(&search, "grouped"), Some(first.join("grouped")));
        assert_eq!(find_on(&search, "missing"), None);
        let _ = std::fs::remove_dir_all(root);
    }
}
