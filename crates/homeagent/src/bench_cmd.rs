//! `homeagent bench [--quick] [--json] [--scale N] [--out DIR]`: starts
//! `homeagent mock-llm` and `homeagent serve` from this same binary as
//! child processes on loopback and measures the agent (see
//! `homeagent-bench`). The table (or with `--json` the whole report) goes
//! to stdout, the progress bar to stderr.
//!
//! The exit status is non-zero only for a correctness failure (a batch
//! that did not execute exactly N tools by the mock's count, an input
//! answered zero or two times, an error reply) or a bench that could not
//! run; never for a timing, so CI can run `--quick` on a noisy machine.

use std::io::Write as _;
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context as _;
use homeagent_bench::{BenchOptions, render, write_outputs};

pub async fn run(
    quick: bool,
    json: bool,
    scale: u32,
    out: Option<PathBuf>,
) -> anyhow::Result<ExitCode> {
    let binary = std::env::current_exe()
        .context("cannot find this program's own path to start mock-llm and serve from it")?;
    let options = BenchOptions {
        binary,
        quick,
        scale,
        progress: true,
    };
    let report = homeagent_bench::run(&options).await?;
    let mut stdout = std::io::stdout().lock();
    if json {
        let text = serde_json::to_string_pretty(&report).context("cannot encode the report")?;
        writeln!(stdout, "{text}")?;
    } else {
        write!(stdout, "{}", render(&report))?;
    }
    stdout.flush()?;
    if let Some(dir) = &out {
        let written = write_outputs(&report, dir)?;
        for path in written {
            eprintln!("wrote {}", path.display());
        }
    }
    let failures = report.failures();
    if failures.is_empty() {
        return Ok(ExitCode::SUCCESS);
    }
    eprintln!(
        "bench: {} correctness failure(s); the first: {}",
        failures.len(),
        failures[0]
    );
    Ok(ExitCode::FAILURE)
}
