#![allow(clippy::unwrap_used, clippy::expect_used)] // a panic in a test is a test failure

//! `homeagent bench --quick --json` end to end through the built binary:
//! it starts its own mock and agent, exits 0 (no correctness failure), and
//! its JSON rows carry the fields with the mock's executed count.

use std::process::Command;

use serde_json::Value;

#[test]
fn the_quick_bench_exits_zero_with_exact_counts() {
    let out = std::env::temp_dir().join(format!("homeagent-bench-cli-{}", std::process::id()));
    let output = Command::new(env!("CARGO_BIN_EXE_homeagent"))
        .args(["bench", "--quick", "--json", "--out"])
        .arg(&out)
        .env_remove("RUST_LOG")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        output.status.success(),
        "exit {:?}; stderr:\n{stderr}",
        output.status
    );
    let report: Value = serde_json::from_slice(&output.stdout).unwrap();
    let rows = report["batch"].as_array().unwrap();
    let sizes: Vec<u64> = rows.iter().map(|r| r["n"].as_u64().unwrap()).collect();
    assert_eq!(sizes, vec![2, 4]);
    for row in rows {
        for key in [
            "n",
            "executed",
            "parallel_s",
            "serial_s",
            "speedup",
            "ideal",
        ] {
            assert!(row.get(key).is_some(), "{key} missing: {row}");
        }
        assert_eq!(row["executed"], row["n"], "{row}");
        assert_eq!(row["status"], "OK", "{row}");
    }
    assert_eq!(report["blast"]["answered"], report["blast"]["inputs"]);
    assert_eq!(report["stability"]["ok"], report["stability"]["rounds"]);
    let overhead = report["overhead"].as_array().unwrap();
    let sizes: Vec<u64> = overhead.iter().map(|r| r["n"].as_u64().unwrap()).collect();
    assert_eq!(sizes, vec![1, 8]);
    // Every input waits for the model over the network, so serve's threads
    // park at least once per input.
    #[cfg(target_os = "linux")]
    for row in overhead {
        let switches = row["switches_per_input"].as_f64();
        assert!(switches.is_some_and(|s| s >= 1.0), "{row}");
        // Serving an input takes some CPU (at least 1 µs, far below any
        // real cost: this only pins that the count is read at all).
        let cpu = row["cpu_us_per_input"].as_f64();
        assert!(cpu.is_some_and(|us| us >= 1.0), "{row}");
    }
    for name in [
        "bench-results.json",
        "bench-speedup.svg",
        "bench-overhead.svg",
    ] {
        assert!(out.join(name).is_file(), "{name} not written");
    }
    std::fs::remove_dir_all(&out).unwrap();
}
