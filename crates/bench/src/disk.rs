//! How long the disk under the agent's data directory takes to make a
//! write durable: the floor under every commit with `[store] sync = "full"`.
//!
//! The agent commits several times per input and each commit waits for an
//! fsync of SQLite's WAL, so the per-turn overhead of scenario 4 cannot be
//! read without knowing what one fsync costs on the machine that ran it.
//! This writes a small block and waits for `fdatasync` (what SQLite calls
//! on Linux) a number of times in the same temporary directory the stacks
//! use, and reports the median and the 99th percentile.

use std::fs::OpenOptions;
use std::io::Write;
use std::path::Path;
use std::time::Instant;

use serde::Serialize;

use crate::error::BenchError;
use crate::math;

/// The bytes written before each sync: one SQLite page.
const BLOCK: usize = 4096;

/// The disk's sync latency, in milliseconds.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct SyncLatency {
    pub rounds: usize,
    pub p50_ms: f64,
    pub p99_ms: f64,
}

/// Appends a block and syncs it `rounds` times in a file under `dir`
/// (removed afterwards).
pub fn sync_latency(dir: &Path, rounds: usize) -> Result<SyncLatency, BenchError> {
    let path = dir.join("fsync-probe");
    let io = |what: &str, source| BenchError::Io {
        what: format!("{what} {}", path.display()),
        source,
    };
    let mut file = OpenOptions::new()
        .create(true)
        .append(true)
        .open(&path)
        .map_err(|e| io("create", e))?;
    let block = vec![0x5a_u8; BLOCK];
    let mut times_ms = Vec::with_capacity(rounds);
    for _ in 0..rounds.max(1) {
        file.write_all(&block).map_err(|e| io("write", e))?;
        let started = Instant::now();
        file.sync_data().map_err(|e| io("sync", e))?;
        times_ms.push(started.elapsed().as_secs_f64() * 1000.0);
    }
    drop(file);
    let _ = std::fs::remove_file(&path);
    Ok(SyncLatency {
        rounds: times_ms.len(),
        p50_ms: math::median(&times_ms).unwrap_or(0.0),
        p99_ms: math::percentile(&times_ms, 99.0).unwrap_or(0.0),
    })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)] // a panic in a test is a test failure

    use super::*;
    use crate::procs::TempDir;

    #[test]
    fn measures_every_round_and_leaves_nothing_behind() {
        let dir = TempDir::new("disk-test").unwrap();
        let latency = sync_latency(dir.path(), 7).unwrap();
        assert_eq!(latency.rounds, 7);
        // A sync takes some time, and the 99th percentile is not below
        // the median (no upper bound: the machine is shared).
        assert!(latency.p50_ms > 0.0, "{latency:?}");
        assert!(latency.p99_ms >= latency.p50_ms, "{latency:?}");
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
    }
}
