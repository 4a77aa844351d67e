//! Runs scenario 1 (batch speed-up) alone, against the bench's own delays,
//! for looking at one row's spread without the whole bench:
//! `cargo run --release -p homeagent-bench --example speedup -- BINARY [ROUNDS] [N...]`.
//! Prints the rows as JSON.

use std::path::PathBuf;
use std::process::ExitCode;

use homeagent_bench::procs::{Stack, StoreSync};
use homeagent_bench::progress::Progress;
use homeagent_bench::scenarios::batch::speedup;
use homeagent_bench::{Plan, finish_example};

#[tokio::main]
async fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let Some(binary) = args.first().map(PathBuf::from) else {
        eprintln!("usage: speedup BINARY [ROUNDS] [N...]");
        return ExitCode::FAILURE;
    };
    let numbers: Result<Vec<usize>, _> = args[1..].iter().map(|s| s.parse::<usize>()).collect();
    let Ok(numbers) = numbers else {
        eprintln!("ROUNDS and N must be whole numbers");
        return ExitCode::FAILURE;
    };
    let rounds = numbers.first().copied().unwrap_or(5).max(1);
    let sizes = if numbers.len() > 1 {
        numbers[1..].to_vec()
    } else {
        vec![2, 4, 8]
    };
    let result = async {
        let plan = Plan::new(false, 1)?;
        let stack = Stack::start(&binary, plan.settings, 16, StoreSync::Full, "speedup").await?;
        let progress = Progress::new(1, false);
        speedup(&stack, &sizes, rounds, "s", &progress).await
    }
    .await;
    finish_example(result.map(|rows| {
        let problems = rows.iter().any(|row| !row.problems.is_empty());
        (serde_json::json!({ "batch": rows }), problems)
    }))
}
