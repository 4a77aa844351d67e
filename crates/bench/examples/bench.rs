//! Runs the bench against a given binary without the `homeagent bench`
//! subcommand (for developing the bench itself):
//! `cargo run -p homeagent-bench --example bench -- BINARY [--quick] [--scale N] [--out DIR]`.

use std::path::PathBuf;
use std::process::ExitCode;

use homeagent_bench::{BenchOptions, render, run, write_outputs};

#[tokio::main]
async fn main() -> ExitCode {
    let mut args = std::env::args().skip(1);
    let Some(binary) = args.next() else {
        eprintln!("usage: bench BINARY [--quick] [--scale N] [--out DIR]");
        return ExitCode::FAILURE;
    };
    let (mut quick, mut scale, mut out) = (false, 1_u32, None);
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--quick" => quick = true,
            "--scale" => scale = args.next().and_then(|s| s.parse().ok()).unwrap_or(0),
            "--out" => out = args.next().map(PathBuf::from),
            other => {
                eprintln!("unknown argument {other}");
                return ExitCode::FAILURE;
            }
        }
    }
    let options = BenchOptions {
        scale,
        ..BenchOptions::new(PathBuf::from(binary), quick)
    };
    match run(&options).await {
        Ok(report) => {
            println!("{}", render(&report));
            if let Some(dir) = out
                && let Err(error) = write_outputs(&report, &dir)
            {
                eprintln!("error: {error}");
                return ExitCode::FAILURE;
            }
            if report.failures().is_empty() {
                ExitCode::SUCCESS
            } else {
                ExitCode::FAILURE
            }
        }
        Err(error) => {
            eprintln!("error: {error}");
            ExitCode::FAILURE
        }
    }
}
