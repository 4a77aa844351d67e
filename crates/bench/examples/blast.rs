//! Runs scenario 2 (the blast) alone, for measuring a change to the
//! agent's hot path without the whole bench:
//! `cargo run --release -p homeagent-bench --example blast -- BINARY [SCALE] [full|normal]`.
//! Prints the blast's result and the agent's store counters (writes per
//! commit = group size) as JSON.

use std::path::PathBuf;
use std::process::ExitCode;

use homeagent_bench::finish_example;
use homeagent_bench::procs::{MockSettings, Stack, StoreSync};
use homeagent_bench::progress::Progress;
use homeagent_bench::scenarios::blast::blast;

#[tokio::main]
async fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let Some(binary) = args.first().map(PathBuf::from) else {
        eprintln!("usage: blast BINARY [SCALE] [full|normal]");
        return ExitCode::FAILURE;
    };
    let Ok(scale) = args.get(1).map_or(Ok(1), |s| s.parse::<usize>()) else {
        eprintln!("SCALE must be a whole number");
        return ExitCode::FAILURE;
    };
    let sync = match args.get(2).map(String::as_str) {
        None | Some("full") => StoreSync::Full,
        Some("normal") => StoreSync::Normal,
        Some(other) => {
            eprintln!("unknown sync {other}: full or normal");
            return ExitCode::FAILURE;
        }
    };
    // The bench's own blast settings (see `scenarios::blast`).
    let settings = MockSettings {
        delay_ms: 20,
        chunk_delay_ms: 0,
        tool_sleep_ms: 150,
    };
    let sessions = 24 * scale.max(1);
    let result = async {
        let stack = Stack::start(&binary, settings, sessions, sync, "blast").await?;
        let progress = Progress::new(1, false);
        let result = blast(&stack, sessions, 12, "x", &progress).await?;
        let status = match reqwest::get(format!("{}/api/v1/status", stack.serve_url)).await {
            Ok(response) => response.text().await.ok(),
            Err(_) => None,
        };
        Ok::<_, homeagent_bench::BenchError>((result, status))
    }
    .await;
    finish_example(result.map(|(result, status)| {
        let store = status
            .and_then(|text| serde_json::from_str::<serde_json::Value>(&text).ok())
            .and_then(|v| v.get("store").cloned());
        let problems = !result.problems.is_empty();
        (
            serde_json::json!({"blast": result, "store": store}),
            problems,
        )
    }))
}
