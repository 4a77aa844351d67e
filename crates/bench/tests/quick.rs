#![allow(clippy::unwrap_used, clippy::expect_used)] // a panic in a test is a test failure

//! The quick bench end to end against a real `homeagent` binary: two child
//! processes over loopback, every scenario, no correctness failure, and
//! the JSON and SVG files written.
//!
//! The binary comes from `HOMEAGENT_BIN`, else `target/debug/homeagent`
//! (build it first: `cargo build -p homeagent`). This crate cannot see
//! `CARGO_BIN_EXE_homeagent`; crates/homeagent/tests/bench.rs runs the same
//! through the wired subcommand.

use std::path::PathBuf;

use homeagent_bench::{BenchOptions, Status, run, write_outputs};

fn binary() -> Option<PathBuf> {
    if let Ok(path) = std::env::var("HOMEAGENT_BIN") {
        return Some(PathBuf::from(path));
    }
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../target/debug/homeagent");
    path.exists().then_some(path)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_quick_bench_runs_every_scenario_with_no_failure() {
    let Some(binary) = binary() else {
        eprintln!("skipped: no homeagent binary (cargo build -p homeagent, or set HOMEAGENT_BIN)");
        return;
    };
    let report = run(&BenchOptions {
        progress: false,
        ..BenchOptions::new(binary, true)
    })
    .await
    .unwrap();
    assert_eq!(report.failures(), Vec::<String>::new());

    // Scenario 1: N = 2 and 4, each row executed exactly N per the mock.
    let rows: Vec<(usize, u64, Status)> = report
        .batch
        .iter()
        .map(|r| (r.n, r.executed, r.status))
        .collect();
    assert_eq!(rows, vec![(2, 2, Status::Ok), (4, 4, Status::Ok)]);
    for row in &report.batch {
        assert_eq!(row.rounds, 2);
        // Lower bounds only: the serial batch sleeps at least Σ tᵢ.
        let sum: f64 = (0..row.n).map(|i| (50 + 5 * i) as f64 / 1000.0).sum();
        assert!(row.serial_s >= sum, "{row:?}");
        assert!(row.ideal > 1.0 && row.speedup > 0.0, "{row:?}");
        assert!(row.m_parallel_s > 0.0, "the mock reported no time: {row:?}");
    }
    let blast = report.blast.as_ref().unwrap();
    assert_eq!((blast.inputs, blast.answered), (12, 12));
    assert_eq!(blast.after.executed - blast.before.executed, 12);
    assert_eq!(blast.after.rejected, 0);
    assert_eq!(blast.after.queued, 0);
    if cfg!(target_os = "linux") {
        assert!(blast.listen_overflows.is_some(), "{blast:?}");
    }
    let stability = report.stability.as_ref().unwrap();
    assert_eq!((stability.rounds, stability.ok), (5, 5));
    let sizes: Vec<usize> = report.overhead.iter().map(|r| r.n).collect();
    assert_eq!(sizes, vec![1, 8]);
    assert!(report.overhead[1].per_call_us.is_some());
    let memory = report.memory.as_ref().unwrap();
    assert_eq!(memory.sessions, 100);
    assert!(memory.idle_rss_kb > 0 && memory.loaded_rss_kb > 0);

    // --quick runs no peers and no callgrind, and says so.
    assert!(report.peers.is_empty());
    assert_eq!(report.callgrind, None);
    let skipped: Vec<(&str, &str)> = report
        .not_done
        .iter()
        .map(|n| (n.what.as_str(), n.why.as_str()))
        .collect();
    assert_eq!(
        skipped,
        vec![
            (
                "6. peers (OpenAI Agents SDK, LangGraph)",
                "--quick never runs the peers"
            ),
            (
                "4b. kernel overhead as instruction counts under callgrind",
                "--quick never runs callgrind"
            ),
        ]
    );

    let dir = std::env::temp_dir().join(format!("homeagent-bench-test-{}", std::process::id()));
    let written = write_outputs(&report, &dir).unwrap();
    assert_eq!(written.len(), 3);
    let json: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("bench-results.json")).unwrap())
            .unwrap();
    assert_eq!(json["batch"][0]["n"], 2);
    assert_eq!(json["batch"][0]["executed"], 2);
    let svg = std::fs::read_to_string(dir.join("bench-speedup.svg")).unwrap();
    assert!(svg.starts_with("<svg") && svg.contains("ideal"), "{svg}");
    std::fs::remove_dir_all(&dir).unwrap();
    eprintln!("{}", homeagent_bench::render(&report));
}
