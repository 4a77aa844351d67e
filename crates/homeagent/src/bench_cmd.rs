//! `homeagent bench [--quick] [--json] [--scale N] [--out DIR]`: starts
//! `homeagent mock-llm` and `homeagent serve` from this same binary as
//! child processes on loopback and measures the agent (see
//! `homeagent-bench`). The table (or with `--json` the whole report) goes
//! to stdout, the progress bar to stderr.
//!
//! A full run also drives the two peer frameworks (a Python virtualenv made
//! on first use) and counts instructions under callgrind; both are skipped
//! with a message when the machine cannot (no python3, no package index,
//! no valgrind), and neither runs with `--quick`. [`PeerFlags`] turns them
//! off or points them elsewhere.
//!
//! The exit status is non-zero only for a correctness failure (a batch
//! that did not execute exactly N tools by the mock's count, an input
//! answered zero or two times, an error reply) or a bench that could not
//! run; never for a timing, and never for a peer, so CI can run `--quick`
//! on a noisy machine.

use std::io::Write as _;
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context as _;
use clap::Args;
use homeagent_bench::{BenchOptions, PeerOptions, render, write_outputs};

use crate::interrupts::{INTERRUPTED, Interrupts};

/// The exit code of a program ended by SIGTERM, as shells report it.
const TERMINATED: u8 = 128 + 15;

/// The flags of scenario 6 (peers) and 4b (callgrind). To be flattened
/// into `BenchArgs` (`#[command(flatten)] pub extra: bench_cmd::PeerFlags`).
#[derive(Debug, Clone, Default, Args)]
pub struct PeerFlags {
    /// Do not run the peer frameworks (OpenAI Agents SDK, LangGraph).
    #[arg(long)]
    pub no_peers: bool,
    /// The Python that creates the peers' virtualenv.
    #[arg(long, value_name = "PATH", default_value = "python3")]
    pub python: PathBuf,
    /// Where the peers' virtualenv is kept (default: the user's cache
    /// directory, homeagent/bench-peers).
    #[arg(long, value_name = "DIR")]
    pub peers_dir: Option<PathBuf>,
    /// Do not count instructions under callgrind.
    #[arg(long)]
    pub no_callgrind: bool,
    /// The valgrind to run the agent under.
    #[arg(long, value_name = "PATH", default_value = "valgrind")]
    pub valgrind: PathBuf,
}

/// The subcommand with the peer and callgrind flags.
pub async fn run(
    quick: bool,
    json: bool,
    scale: u32,
    out: Option<PathBuf>,
    flags: PeerFlags,
) -> anyhow::Result<ExitCode> {
    let binary = std::env::current_exe()
        .context("cannot find this program's own path to start mock-llm and serve from it")?;
    let peers = (!flags.no_peers).then(|| PeerOptions {
        python: flags.python.clone(),
        dir: flags
            .peers_dir
            .clone()
            .unwrap_or_else(|| PeerOptions::default().dir),
    });
    let options = BenchOptions {
        scale,
        peers,
        valgrind: (!flags.no_callgrind).then(|| flags.valgrind.clone()),
        ..BenchOptions::new(binary, quick)
    };
    // A signal ends the run here, not the process: dropping the run
    // stops the mock and the agent it started (`kill_on_drop`) and removes
    // their directories; a process killed by the signal itself runs no
    // destructor, and left them running on their ports.
    let mut interrupts = Interrupts::new().context("cannot listen for Ctrl-C")?;
    let mut terminate = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        .context("cannot listen for SIGTERM")?;
    let report = tokio::select! {
        report = homeagent_bench::run(&options) => report?,
        () = interrupts.next() => {
            eprintln!("bench: interrupted; the processes it started are stopped");
            return Ok(ExitCode::from(INTERRUPTED));
        }
        _ = terminate.recv() => {
            eprintln!("bench: terminated; the processes it started are stopped");
            return Ok(ExitCode::from(TERMINATED));
        }
    };
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
