//! Scenario 4b: HomeAgent's cost per turn and per tool call as instruction
//! counts under callgrind, which (unlike wall-clock time) barely move on a
//! noisy shared machine.
//!
//! `homeagent serve` runs under `valgrind --tool=callgrind` against the
//! zero-delay mock, answers `W` warm-up inputs and then `K` measured
//! `!batchN` inputs one after another, and is stopped with SIGTERM so
//! callgrind writes its totals. That is done twice per batch size, with a
//! short and a long `K`, from a fresh data directory each time; the
//! difference of the two totals divided by the difference of the two `K`
//! is the cost of one input, start-up, warm-up and shut-down cancelling
//! out. Everything the serve process does counts (HTTP front, scheduler,
//! provider client, assembler, executor, SQLite store: every thread), the
//! mock and the bench do not: they are other processes.

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Serialize;
use tokio::process::Command;

use crate::client::{AgentClient, MockClient};
use crate::error::BenchError;
use crate::math;
use crate::procs::{StoreSync, TempDir, config_toml, spawn_and_wait};
use crate::report::{Status, status_of};
use crate::scenarios::outcome;

/// Warm-up inputs in every run (the same in both, so they cancel).
pub const WARMUP: usize = 3;
/// Measured inputs in the short and the long run.
pub const SHORT: usize = 5;
pub const LONG: usize = 25;

/// Starting under valgrind is slow (tens of seconds for a large binary).
const START_TIMEOUT: Duration = Duration::from_secs(600);
/// Shutting down includes writing the profile.
const EXIT_TIMEOUT: Duration = Duration::from_secs(300);

/// One batch size under callgrind.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CallgrindRow {
    pub n: usize,
    pub short_inputs: usize,
    pub long_inputs: usize,
    pub short_instructions: u64,
    pub long_instructions: u64,
    /// (long − short instructions) / (long − short inputs); `None` when
    /// the long run counted no more than the short one (see `note`).
    pub per_input: Option<f64>,
    /// Half of `per_input` (an input is two model turns).
    pub per_turn: Option<f64>,
    /// Marginal per call against the first size, as for the wall clock.
    pub per_call: Option<f64>,
    pub status: Status,
    /// What was wrong with the inputs themselves (correctness).
    pub problems: Vec<String>,
    /// Why a figure is missing: a measurement, not a failure.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
}

/// Scenario 4b's part of the report.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CallgrindReport {
    /// `valgrind --version`.
    pub valgrind: Option<String>,
    /// Why it did not run.
    pub skipped: Option<String>,
    pub rows: Vec<CallgrindRow>,
}

/// The instruction total of a callgrind output file: its `totals:` line,
/// else its `summary:` line (the first event is `Ir`).
pub fn parse_total(text: &str) -> Option<u64> {
    let find = |key: &str| {
        text.lines()
            .find_map(|l| l.strip_prefix(key))
            .and_then(|rest| rest.split_whitespace().next())
            .and_then(|n| n.parse::<u64>().ok())
    };
    find("totals:").or_else(|| find("summary:"))
}

/// Instructions per input from a short and a long run; `None` unless the
/// long run has more inputs and at least as many instructions.
pub fn per_input(short_k: usize, short_ir: u64, long_k: usize, long_ir: u64) -> Option<f64> {
    (long_k > short_k && long_ir >= short_ir)
        .then(|| (long_ir - short_ir) as f64 / (long_k - short_k) as f64)
}

/// Builds the rows from each size's two totals, per call against the first.
pub fn rows(measured: &[(usize, u64, u64, Vec<String>)]) -> Vec<CallgrindRow> {
    let mut rows: Vec<CallgrindRow> = Vec::new();
    for (n, short_ir, long_ir, problems) in measured {
        let problems = problems.clone();
        let per = per_input(SHORT, *short_ir, LONG, *long_ir);
        let note = per.is_none().then(|| {
            format!(
                "the long run counted {long_ir} instructions, no more than the short run's \
                 {short_ir}: no figure"
            )
        });
        let per_call = rows
            .first()
            .and_then(|first| math::per_call(first.n, first.per_input?, *n, per?));
        rows.push(CallgrindRow {
            n: *n,
            short_inputs: SHORT,
            long_inputs: LONG,
            short_instructions: *short_ir,
            long_instructions: *long_ir,
            per_input: per,
            per_turn: per.map(|per| per / 2.0),
            per_call,
            status: status_of(&problems),
            problems,
            note,
        });
    }
    rows
}

/// `valgrind --version`, or why valgrind cannot be used.
pub async fn valgrind_version(valgrind: &Path) -> Result<String, String> {
    let output = Command::new(valgrind)
        .arg("--version")
        .kill_on_drop(true)
        .output()
        .await
        .map_err(|e| {
            format!(
                "cannot start {}: {e} (install valgrind, e.g. apt-get install valgrind)",
                valgrind.display()
            )
        })?;
    if !output.status.success() {
        return Err(format!(
            "{} --version failed: {}",
            valgrind.display(),
            output.status
        ));
    }
    Ok(String::from_utf8_lossy(&output.stdout).trim().to_owned())
}

/// Runs every size twice under callgrind against the mock at `mock_url`.
pub async fn measure(
    binary: &Path,
    valgrind: &Path,
    mock_url: &str,
    sizes: &[usize],
    run: &str,
    note: &dyn Fn(String),
) -> Result<CallgrindReport, BenchError> {
    let version = match valgrind_version(valgrind).await {
        Ok(v) => v,
        Err(why) => {
            return Ok(CallgrindReport {
                valgrind: None,
                skipped: Some(why),
                rows: Vec::new(),
            });
        }
    };
    let mut measured = Vec::new();
    for &n in sizes {
        let mut totals = [0_u64; 2];
        let mut problems = Vec::new();
        for (slot, k) in [SHORT, LONG].into_iter().enumerate() {
            note(format!("callgrind, N = {n}, {k} inputs"));
            let (total, found) = one_run(binary, valgrind, mock_url, n, k, run).await?;
            totals[slot] = total;
            problems.extend(found.into_iter().map(|p| format!("{k}-input run: {p}")));
        }
        measured.push((n, totals[0], totals[1], problems));
    }
    Ok(CallgrindReport {
        valgrind: Some(version),
        skipped: None,
        rows: rows(&measured),
    })
}

/// One serve process under callgrind: warm-up, `k` inputs of `!batchN`,
/// SIGTERM, and the total it wrote; with every correctness problem seen.
async fn one_run(
    binary: &Path,
    valgrind: &Path,
    mock_url: &str,
    n: usize,
    k: usize,
    run: &str,
) -> Result<(u64, Vec<String>), BenchError> {
    let dir = TempDir::new(&format!("callgrind-n{n}-k{k}"))?;
    let config = dir.path().join("homeagent.toml");
    std::fs::write(&config, config_toml(mock_url, 16, StoreSync::Full)).map_err(|source| {
        BenchError::Io {
            what: format!("write {}", config.display()),
            source,
        }
    })?;
    let out_file: PathBuf = dir.path().join("callgrind.out");
    let mut cmd = Command::new(valgrind);
    cmd.arg("--tool=callgrind")
        .arg(format!("--callgrind-out-file={}", out_file.display()))
        .args(["--dump-line=no", "--dump-instr=no", "--trace-children=no"])
        .arg(binary)
        .arg("--config")
        .arg(&config)
        .arg("--data-dir")
        .arg(dir.path())
        .args(["serve", "--listen", "127.0.0.1:0"])
        // One async worker: with two, which worker polls what (and how
        // often an idle one spins before parking) depends on timing, and
        // the counts moved by up to 1.7x between runs of the same input.
        .env("TOKIO_WORKER_THREADS", "1");
    let (mut child, url) = spawn_and_wait(
        cmd,
        &dir.path().join("serve.log"),
        "HomeAgent listening on ",
        "homeagent serve under callgrind",
        START_TIMEOUT,
    )
    .await?;
    let agent = AgentClient::new(&url, None)?;
    let mock = MockClient::new(mock_url)?;
    for w in 0..WARMUP {
        agent
            .send(None, &format!("!batch{n}-cg-k{k}-warm{w}-{run}"))
            .await;
    }
    let mut sent = Vec::new();
    for i in 0..k {
        let text = format!("!batch{n}-cg-k{k}-i{i}-{run}");
        let reply = agent.send(None, &text).await;
        sent.push((text, reply));
    }
    let log = mock.inputs().await?;
    let mut problems = Vec::new();
    for (text, reply) in &sent {
        let o = outcome(text, reply, &log);
        problems.extend(
            o.problems(n as u64)
                .into_iter()
                .map(|p| format!("{text}: {p}")),
        );
    }
    let pid = child.id().ok_or_else(|| BenchError::Start {
        what: "homeagent serve under callgrind".into(),
        detail: "it exited before the inputs were done".into(),
    })?;
    terminate(pid)?;
    let status = tokio::time::timeout(EXIT_TIMEOUT, child.wait())
        .await
        .map_err(|_| BenchError::Start {
            what: "homeagent serve under callgrind".into(),
            detail: format!(
                "it did not exit within {} s of SIGTERM",
                EXIT_TIMEOUT.as_secs()
            ),
        })?
        .map_err(|source| BenchError::Io {
            what: "wait for homeagent serve under callgrind".into(),
            source,
        })?;
    let text = std::fs::read_to_string(&out_file).map_err(|source| BenchError::Io {
        what: format!(
            "read {} (serve exited with {status}; its log is {})",
            out_file.display(),
            dir.path().join("serve.log").display()
        ),
        source,
    })?;
    let total = parse_total(&text).ok_or_else(|| BenchError::Output {
        what: "the callgrind total".into(),
        detail: format!("{} has no totals: or summary: line", out_file.display()),
    })?;
    Ok((total, problems))
}

/// SIGTERM: serve shuts down cleanly, and valgrind writes its profile (it
/// would not on the SIGKILL of `kill_on_drop`).
fn terminate(pid: u32) -> Result<(), BenchError> {
    let raw = i32::try_from(pid).map_err(|_| BenchError::Start {
        what: "homeagent serve under callgrind".into(),
        detail: format!("pid {pid} out of range"),
    })?;
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(raw),
        nix::sys::signal::Signal::SIGTERM,
    )
    .map_err(|e| BenchError::Io {
        what: format!("send SIGTERM to {pid}"),
        source: std::io::Error::from(e),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_total_comes_from_totals_else_summary() {
        let file = "# callgrind format\nversion: 1\ncreator: callgrind-3.22.0\n\
                    events: Ir\nsummary: 123456789\n\nfn=(1) main\n5 100\n\ntotals: 123456790\n";
        assert_eq!(parse_total(file), Some(123_456_790));
        assert_eq!(parse_total("events: Ir\nsummary: 42\n"), Some(42));
        assert_eq!(parse_total("events: Ir\n"), None);
        assert_eq!(parse_total("totals: lots\n"), None);
    }

    #[test]
    fn per_input_is_the_difference_over_the_extra_inputs() {
        // 20 more inputs cost 3,000,000 more instructions: 150,000 each.
        assert_eq!(per_input(5, 10_000_000, 25, 13_000_000), Some(150_000.0));
        assert_eq!(per_input(5, 10, 5, 20), None);
        assert_eq!(per_input(5, 20, 25, 10), None);
    }

    #[test]
    fn rows_give_per_turn_and_the_marginal_per_call() {
        // N = 1: (13.0 M − 10.0 M) / 20 = 150,000 per input, 75,000 per turn.
        // N = 8: (17.2 M − 10.4 M) / 20 = 340,000 per input;
        //        per call (340,000 − 150,000) / 7 = 27,142.857...
        let rows = rows(&[
            (1, 10_000_000, 13_000_000, Vec::new()),
            (8, 10_400_000, 17_200_000, Vec::new()),
            (64, 9_000_000, 8_000_000, Vec::new()),
        ]);
        assert_eq!(rows[0].per_input, Some(150_000.0));
        assert_eq!(rows[0].per_turn, Some(75_000.0));
        assert_eq!(rows[0].per_call, None);
        assert_eq!(rows[1].per_input, Some(340_000.0));
        assert!((rows[1].per_call.unwrap() - 190_000.0 / 7.0).abs() < 1e-6);
        assert_eq!(rows[1].status, Status::Ok);
        // A long run that counted fewer instructions is a measurement
        // quirk: no figure, a note, not a correctness failure.
        assert_eq!(rows[2].status, Status::Ok);
        assert!(rows[2].problems.is_empty());
        assert_eq!((rows[2].per_input, rows[2].per_call), (None, None));
        assert_eq!(
            rows[2].note.as_deref(),
            Some(
                "the long run counted 8000000 instructions, no more than the short run's 9000000: no figure"
            )
        );
        // Nor is any later size measured against a first row without one.
        let rows = super::rows(&[
            (1, 9_000_000, 8_000_000, Vec::new()),
            (8, 10_400_000, 17_200_000, Vec::new()),
        ]);
        assert_eq!(rows[1].per_call, None);
    }

    #[tokio::test]
    async fn a_missing_valgrind_is_a_skip_with_the_fix() {
        let why = valgrind_version(Path::new("/nonexistent/valgrind"))
            .await
            .unwrap_err();
        assert!(
            why.starts_with("cannot start /nonexistent/valgrind: "),
            "{why}"
        );
        assert!(
            why.ends_with("(install valgrind, e.g. apt-get install valgrind)"),
            "{why}"
        );
    }
}
