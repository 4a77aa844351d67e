//! The peers' Python environment: a virtualenv created on first use under
//! the bench's cache directory, with pinned versions of the two frameworks
//! installed by pip, and reused on later runs.
//!
//! Nothing here may fail the bench: a machine without Python, without the
//! package index or with a pip that refuses is a machine where the peers are
//! skipped, and [`PeerSetupError`] says which of those it was and how to fix
//! it. The HomeAgent numbers do not depend on any of it.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use tokio::process::Command;

/// The pinned frameworks (and nothing else: pip resolves their
/// dependencies). A change here makes a fresh virtualenv, because the
/// directory name carries a hash of this text.
pub const REQUIREMENTS: &str =
    "openai-agents==0.24.0\nlanggraph==1.2.22\nlangchain-openai==1.7.4\n";

/// The driver both peers run, written next to the virtualenv on each run so
/// the bench binary works from wherever it is installed.
pub const DRIVER_PY: &str = include_str!("../../peers/driver.py");

/// Longest `python -m venv` may take.
const VENV_TIMEOUT: Duration = Duration::from_secs(180);
/// Longest the pip install may take (a first install downloads ~40 MB).
const PIP_TIMEOUT: Duration = Duration::from_secs(1200);

/// Why the peers cannot run on this machine.
#[derive(Debug, thiserror::Error)]
pub enum PeerSetupError {
    /// The interpreter could not be started at all.
    #[error(
        "cannot start the Python interpreter {interpreter}: {source} (install python3 with its venv module, or pass --python PATH)"
    )]
    NoPython {
        interpreter: String,
        #[source]
        source: std::io::Error,
    },
    /// `python -m venv` failed (Debian's python3 without python3-venv).
    #[error(
        "`{interpreter} -m venv {dir}` failed: {detail} (on Debian/Ubuntu install python3-venv)"
    )]
    Venv {
        interpreter: String,
        dir: String,
        detail: String,
    },
    /// pip could not install the pinned frameworks (no network, no index).
    #[error(
        "pip could not install {packages} into {dir}: {detail} (the peers need the package index once; the bench retries on its next run)"
    )]
    Pip {
        packages: String,
        dir: String,
        detail: String,
    },
    /// The cache directory could not be made.
    #[error("cannot create {dir}: {source}")]
    Dir {
        dir: String,
        #[source]
        source: std::io::Error,
    },
}

/// Where virtualenvs go by default: `$XDG_CACHE_HOME/homeagent/bench-peers`,
/// else `~/.cache/homeagent/bench-peers`, else under the temp directory.
pub fn default_peers_dir() -> PathBuf {
    let cache = std::env::var_os("XDG_CACHE_HOME")
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
        .or_else(|| {
            std::env::var_os("HOME")
                .filter(|v| !v.is_empty())
                .map(|h| PathBuf::from(h).join(".cache"))
        })
        .unwrap_or_else(std::env::temp_dir);
    cache.join("homeagent").join("bench-peers")
}

/// The virtualenv directory for [`REQUIREMENTS`] under `peers_dir`.
pub fn venv_dir(peers_dir: &Path) -> PathBuf {
    peers_dir.join(format!("venv-{:016x}", fnv1a(REQUIREMENTS.as_bytes())))
}

/// 64-bit FNV-1a: a stable name for a requirements text (std's hashers are
/// seeded per process).
pub fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |hash, &b| {
        (hash ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    })
}

/// The last `lines` lines of a command's output, for an error message.
pub fn tail(text: &str, lines: usize) -> String {
    let all: Vec<&str> = text.lines().filter(|l| !l.trim().is_empty()).collect();
    all[all.len().saturating_sub(lines)..].join(" | ")
}

/// The virtualenv's interpreter, creating the virtualenv and installing
/// [`REQUIREMENTS`] first when that has not been done; `note` hears what
/// is happening (a first install takes minutes).
pub async fn ensure_venv(
    interpreter: &Path,
    peers_dir: &Path,
    note: &dyn Fn(String),
) -> Result<PathBuf, PeerSetupError> {
    let dir = venv_dir(peers_dir);
    let python = dir.join("bin").join("python");
    let marker = dir.join("homeagent-installed.txt");
    if python.exists() && std::fs::read_to_string(&marker).is_ok_and(|text| text == REQUIREMENTS) {
        return Ok(python);
    }
    std::fs::create_dir_all(peers_dir).map_err(|source| PeerSetupError::Dir {
        dir: peers_dir.display().to_string(),
        source,
    })?;
    let shown = interpreter.display().to_string();
    note(format!("peers: creating a virtualenv in {}", dir.display()));
    let mut venv = Command::new(interpreter);
    venv.arg("-m").arg("venv").arg("--clear").arg(&dir);
    let venv_result = output_within(venv, VENV_TIMEOUT)
        .await
        .map_err(|e| match e {
            RunError::Start(source) => PeerSetupError::NoPython {
                interpreter: shown.clone(),
                source,
            },
            RunError::Failed(detail) => PeerSetupError::Venv {
                interpreter: shown.clone(),
                dir: dir.display().to_string(),
                detail,
            },
        });
    venv_result?;

    let requirements = dir.join("requirements.txt");
    std::fs::write(&requirements, REQUIREMENTS).map_err(|source| PeerSetupError::Dir {
        dir: requirements.display().to_string(),
        source,
    })?;
    let packages = REQUIREMENTS
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(", ");
    note(format!("peers: pip install {packages} (first run only)"));
    let mut pip = Command::new(&python);
    pip.args([
        "-m",
        "pip",
        "install",
        "--disable-pip-version-check",
        "--no-input",
        "--quiet",
        "--timeout",
        "30",
        "-r",
    ])
    .arg(&requirements);
    output_within(pip, PIP_TIMEOUT)
        .await
        .map_err(|e| PeerSetupError::Pip {
            packages,
            dir: dir.display().to_string(),
            detail: match e {
                RunError::Start(source) => format!("cannot start {}: {source}", python.display()),
                RunError::Failed(detail) => detail,
            },
        })?;
    std::fs::write(&marker, REQUIREMENTS).map_err(|source| PeerSetupError::Dir {
        dir: marker.display().to_string(),
        source,
    })?;
    Ok(python)
}

enum RunError {
    Start(std::io::Error),
    Failed(String),
}

/// Runs `cmd` to the end within `limit`; `Failed` carries the exit status
/// and the tail of its output.
async fn output_within(mut cmd: Command, limit: Duration) -> Result<(), RunError> {
    cmd.stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    let child = cmd.spawn().map_err(RunError::Start)?;
    match tokio::time::timeout(limit, child.wait_with_output()).await {
        Err(_) => Err(RunError::Failed(format!(
            "no result within {} s",
            limit.as_secs()
        ))),
        Ok(Err(error)) => Err(RunError::Failed(error.to_string())),
        Ok(Ok(output)) if output.status.success() => Ok(()),
        Ok(Ok(output)) => {
            let text = format!(
                "{}\n{}",
                String::from_utf8_lossy(&output.stdout),
                String::from_utf8_lossy(&output.stderr)
            );
            Err(RunError::Failed(format!(
                "{}: {}",
                output.status,
                tail(&text, 4)
            )))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fnv1a_matches_the_published_vectors() {
        // From the FNV reference test suite: "" and "a".
        assert_eq!(fnv1a(b""), 0xcbf2_9ce4_8422_2325);
        assert_eq!(fnv1a(b"a"), 0xaf63_dc4c_8601_ec8c);
        assert_eq!(fnv1a(b"foobar"), 0x8594_4171_f739_67e8);
    }

    #[test]
    fn the_venv_name_follows_the_pins() {
        let dir = venv_dir(Path::new("/cache"));
        let name = dir.file_name().unwrap().to_str().unwrap().to_owned();
        assert_eq!(
            name,
            format!("venv-{:016x}", fnv1a(REQUIREMENTS.as_bytes()))
        );
        assert_eq!(dir.parent(), Some(Path::new("/cache")));
    }

    #[test]
    fn tail_keeps_the_last_non_empty_lines() {
        assert_eq!(tail("a\n\nb\nc\n\n", 2), "b | c");
        assert_eq!(tail("only", 4), "only");
        assert_eq!(tail("", 4), "");
    }

    #[tokio::test]
    async fn a_missing_interpreter_is_a_skip_that_says_how_to_fix_it() {
        let dir = std::env::temp_dir().join(format!(
            "homeagent-bench-venv-test-{}-{}",
            std::process::id(),
            line!()
        ));
        let missing = Path::new("/nonexistent/python3-for-the-bench");
        let result = ensure_venv(missing, &dir, &|_| {}).await;
        let _ = std::fs::remove_dir_all(&dir);
        let Err(error) = result else {
            panic!("a missing interpreter must not give a virtualenv");
        };
        assert!(
            matches!(error, PeerSetupError::NoPython { .. }),
            "{error:?}"
        );
        let message = error.to_string();
        assert!(
            message.starts_with(
                "cannot start the Python interpreter /nonexistent/python3-for-the-bench: "
            ),
            "{message}"
        );
        assert!(
            message.ends_with("(install python3 with its venv module, or pass --python PATH)"),
            "{message}"
        );
    }

    #[tokio::test]
    async fn an_interpreter_that_fails_is_a_venv_error_with_its_output() {
        // `false` starts and exits 1 without output: what a python3 without
        // the venv module looks like from here.
        let Some(false_bin) = ["/usr/bin/false", "/bin/false"]
            .into_iter()
            .map(Path::new)
            .find(|p| p.exists())
        else {
            return;
        };
        let dir = std::env::temp_dir().join(format!(
            "homeagent-bench-venv-test-{}-{}",
            std::process::id(),
            line!()
        ));
        let result = ensure_venv(false_bin, &dir, &|_| {}).await;
        let _ = std::fs::remove_dir_all(&dir);
        match result {
            Err(PeerSetupError::Venv { detail, .. }) => {
                assert!(detail.starts_with("exit status: 1"), "{detail}");
            }
            other => panic!("expected a venv error, got {other:?}"),
        }
    }
}
