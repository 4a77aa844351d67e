//! Runs scenario 4 (kernel overhead) alone, for measuring a change to the
//! agent's fixed costs without the whole bench:
//! `cargo run --release -p homeagent-bench --example kernel -- BINARY [full|normal] [ROUNDS]`.
//! Prints the rows (N = 1, 8, 64) as JSON.

use std::path::PathBuf;
use std::process::ExitCode;

use homeagent_bench::finish_example;
use homeagent_bench::procs::{MockSettings, Stack, StoreSync};
use homeagent_bench::progress::Progress;
use homeagent_bench::scenarios::kernel::overhead;

#[tokio::main]
async fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let Some(binary) = args.first().map(PathBuf::from) else {
        eprintln!("usage: kernel BINARY [full|normal] [ROUNDS]");
        return ExitCode::FAILURE;
    };
    let sync = match args.get(1).map(String::as_str) {
        None | Some("full") => StoreSync::Full,
        Some("normal") => StoreSync::Normal,
        Some(other) => {
            eprintln!("unknown sync {other}: full or normal");
            return ExitCode::FAILURE;
        }
    };
    let Ok(rounds) = args.get(2).map_or(Ok(30), |s| s.parse::<usize>()) else {
        eprintln!("ROUNDS must be a whole number");
        return ExitCode::FAILURE;
    };
    // The bench's own zero-delay settings (see `homeagent_bench::run`).
    let settings = MockSettings {
        delay_ms: 0,
        chunk_delay_ms: 0,
        tool_sleep_ms: 0,
    };
    let result = async {
        let stack = Stack::start(&binary, settings, 16, sync, "kernel").await?;
        let progress = Progress::new(1, false);
        overhead(&stack, &[1, 8, 64], rounds.max(1), "k", &progress).await
    }
    .await;
    finish_example(result.map(|rows| {
        let problems = rows.iter().any(|row| !row.problems.is_empty());
        (serde_json::json!({ "overhead": rows }), problems)
    }))
}
