//! CPU time per process, from `/proc/<pid>/stat`: where the machine's
//! cores went during the blast.
//!
//! # Why measure it
//!
//! The blast's p99 is taken on whatever machine runs the bench, often a
//! small shared one. Whether a high p99 is HomeAgent's fault or simply the
//! machine being full can only be told from where the CPU went: the agent
//! (`homeagent serve`), the model (`homeagent mock-llm`) and the load
//! generator (the bench itself) all compete for the same cores. Their CPU
//! seconds over the blast, and their sum divided by the wall time (cores
//! busy), say so honestly: 1.9 cores busy on a 2-core machine means the
//! latency includes waiting for a core, whoever's fault that is.
//!
//! # How
//!
//! Fields 14 and 15 of `/proc/<pid>/stat` (`utime`, `stime`) are the CPU
//! time of every thread of the process, live or exited, in clock ticks.
//! The fields are counted after the *last* `)`: field 2 is the process
//! name in parentheses, and a name may itself hold spaces and `)`.
//!
//! The tick rate is what `sysconf(_SC_CLK_TCK)` returns; libc reads it from
//! the `AT_CLKTCK` entry the kernel puts in every process's auxiliary
//! vector, and so does [`clock_ticks_per_second`], from `/proc/self/auxv`,
//! with neither `libc` nor `unsafe`. Where that cannot be read it assumes
//! 100, the `USER_HZ` of every mainstream Linux architecture.
//!
//! Nothing here fails the bench: off Linux, or when `/proc` is unreadable,
//! a measurement is `None` and the table says "n/a".

use std::sync::OnceLock;

use serde::Serialize;

/// The auxiliary vector's key for the clock tick rate (`<elf.h>`).
const AT_CLKTCK: usize = 17;
/// The auxiliary vector's terminator.
const AT_NULL: usize = 0;
/// `USER_HZ` where the auxiliary vector cannot be read.
const FALLBACK_TICKS_PER_SECOND: u64 = 100;

/// The `AT_CLKTCK` value of an auxiliary vector (native-endian pairs of
/// machine words: key, value; ended by `AT_NULL`).
pub fn parse_auxv_clock_ticks(auxv: &[u8]) -> Option<u64> {
    const WORD: usize = std::mem::size_of::<usize>();
    let word =
        |bytes: &[u8]| -> Option<usize> { Some(usize::from_ne_bytes(bytes.try_into().ok()?)) };
    for pair in auxv.chunks_exact(2 * WORD) {
        let key = word(&pair[..WORD])?;
        let value = word(&pair[WORD..])?;
        match key {
            AT_NULL => return None,
            AT_CLKTCK if value > 0 => return u64::try_from(value).ok(),
            _ => {}
        }
    }
    None
}

/// Clock ticks per second of `/proc/<pid>/stat`'s times (read once).
pub fn clock_ticks_per_second() -> u64 {
    static TICKS: OnceLock<u64> = OnceLock::new();
    *TICKS.get_or_init(|| {
        std::fs::read("/proc/self/auxv")
            .ok()
            .and_then(|auxv| parse_auxv_clock_ticks(&auxv))
            .unwrap_or(FALLBACK_TICKS_PER_SECOND)
    })
}

/// `utime + stime` (fields 14 and 15) of a `/proc/<pid>/stat` line, in
/// clock ticks.
pub fn parse_stat_cpu_ticks(stat: &str) -> Option<u64> {
    // The name (field 2) is "(...)" and may contain ')' itself; the fields
    // after the last ')' start at field 3 (the state).
    let after_name = &stat[stat.rfind(')')? + 1..];
    let mut fields = after_name.split_whitespace().skip(14 - 3);
    let utime: u64 = fields.next()?.parse().ok()?;
    let stime: u64 = fields.next()?.parse().ok()?;
    utime.checked_add(stime)
}

/// The CPU seconds (user + system, all threads) `pid` has used so far;
/// `None` for the bench process itself. `None` when it cannot be read.
pub fn cpu_seconds(pid: Option<u32>) -> Option<f64> {
    let path = match pid {
        Some(pid) => format!("/proc/{pid}/stat"),
        None => "/proc/self/stat".to_owned(),
    };
    let stat = std::fs::read_to_string(path).ok()?;
    let ticks = parse_stat_cpu_ticks(&stat)?;
    Some(ticks as f64 / clock_ticks_per_second() as f64)
}

/// The CPU seconds of the three processes at one moment.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct CpuSample {
    pub serve_s: Option<f64>,
    pub mock_s: Option<f64>,
    pub bench_s: Option<f64>,
}

impl CpuSample {
    pub fn take(serve_pid: u32, mock_pid: u32) -> CpuSample {
        CpuSample {
            serve_s: cpu_seconds(Some(serve_pid)),
            mock_s: cpu_seconds(Some(mock_pid)),
            bench_s: cpu_seconds(None),
        }
    }
}

/// Where the CPU went over a run of `inputs` inputs (the blast's fields).
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct CpuUse {
    pub cpu_s_serve: Option<f64>,
    pub cpu_s_mock: Option<f64>,
    pub cpu_s_bench: Option<f64>,
    pub cpu_ms_per_input_serve: Option<f64>,
    pub cpu_ms_per_input_mock: Option<f64>,
    pub cpu_ms_per_input_bench: Option<f64>,
    /// All three processes' CPU seconds over the wall time: how many cores
    /// they kept busy on average.
    pub cores_busy: Option<f64>,
}

impl CpuUse {
    /// The use between two samples of a run of `inputs` that took `wall_s`.
    /// A process whose time went backwards (not the same process any
    /// more) is `None`, and so is a sum that lacks one of the three.
    pub fn between(before: &CpuSample, after: &CpuSample, inputs: usize, wall_s: f64) -> CpuUse {
        let delta = |a: Option<f64>, b: Option<f64>| match (a, b) {
            (Some(a), Some(b)) if b >= a => Some(b - a),
            _ => None,
        };
        let per_input =
            |s: Option<f64>| s.filter(|_| inputs > 0).map(|s| s * 1000.0 / inputs as f64);
        let serve = delta(before.serve_s, after.serve_s);
        let mock = delta(before.mock_s, after.mock_s);
        let bench = delta(before.bench_s, after.bench_s);
        let cores_busy = match (serve, mock, bench) {
            (Some(s), Some(m), Some(b)) if wall_s > 0.0 => Some((s + m + b) / wall_s),
            _ => None,
        };
        CpuUse {
            cpu_s_serve: serve,
            cpu_s_mock: mock,
            cpu_s_bench: bench,
            cpu_ms_per_input_serve: per_input(serve),
            cpu_ms_per_input_mock: per_input(mock),
            cpu_ms_per_input_bench: per_input(bench),
            cores_busy,
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)] // a panic in a test is a test failure
mod tests {
    use std::time::{Duration, Instant};

    use super::*;

    #[test]
    fn cpu_ticks_are_fields_14_and_15_counted_after_the_last_paren() {
        // A real line of `cat /proc/self/stat`, with utime 53 and stime 1.
        let plain = "28143 (cat) R 28138 28138 26229 0 -1 4194304 99 0 0 0 53 1 0 0 20 0 1 0 \
                     2849238 3133440 394 18446744073709551615 94364380540928 94364380560809";
        assert_eq!(parse_stat_cpu_ticks(plain), Some(54));
        // A name with spaces and parentheses: "my (odd) proc) x".
        // Fields after the last ')': state S, ppid 1, pgrp 4242, session
        // 4242, tty 0, tpgid -1, flags 4194560, minflt 1200, cminflt 7,
        // majflt 3, cmajflt 9, utime 1234, stime 567.
        let odd = "4242 (my (odd) proc) x) S 1 4242 4242 0 -1 4194560 1200 7 3 9 1234 567 \
                   11 22 20 0 5 0 98765 123456789 2048";
        assert_eq!(parse_stat_cpu_ticks(odd), Some(1234 + 567));
        assert_eq!(parse_stat_cpu_ticks("12 (short) S 1 2 3"), None);
        assert_eq!(parse_stat_cpu_ticks("no parenthesis at all"), None);
        assert_eq!(
            parse_stat_cpu_ticks("1 (x) S 1 1 1 0 -1 0 0 0 0 0 abc 5"),
            None
        );
    }

    #[test]
    fn the_tick_rate_comes_from_at_clktck_in_the_auxiliary_vector() {
        let pairs: [(usize, usize); 4] = [(6, 4096), (17, 250), (25, 12345), (0, 0)];
        let auxv: Vec<u8> = pairs
            .iter()
            .flat_map(|&(k, v)| [k.to_ne_bytes(), v.to_ne_bytes()])
            .flatten()
            .collect();
        assert_eq!(parse_auxv_clock_ticks(&auxv), Some(250));
        // Ended by AT_NULL before AT_CLKTCK, or cut short: not found.
        assert_eq!(
            parse_auxv_clock_ticks(&auxv[..2 * size_of::<usize>()]),
            None
        );
        let ended: Vec<u8> = [(6usize, 4096usize), (0, 0), (17, 250)]
            .iter()
            .flat_map(|&(k, v)| [k.to_ne_bytes(), v.to_ne_bytes()])
            .flatten()
            .collect();
        assert_eq!(parse_auxv_clock_ticks(&ended), None);
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn the_tick_rate_agrees_with_getconf() {
        // getconf asks sysconf(_SC_CLK_TCK): an independent reading.
        let Ok(output) = std::process::Command::new("getconf")
            .arg("CLK_TCK")
            .output()
        else {
            return;
        };
        let text = String::from_utf8_lossy(&output.stdout);
        let expected: u64 = text.trim().parse().unwrap();
        assert_eq!(clock_ticks_per_second(), expected);
    }

    /// The burning thread's own on-CPU time in seconds, as the scheduler
    /// counts it in nanoseconds (`/proc/thread-self/schedstat`, field 1):
    /// independent of the stat fields and of the tick rate.
    fn thread_on_cpu_s() -> Option<f64> {
        let text = std::fs::read_to_string("/proc/thread-self/schedstat").ok()?;
        let ns: u64 = text.split_whitespace().next()?.parse().ok()?;
        Some(ns as f64 / 1e9)
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn cpu_burnt_in_a_thread_shows_in_the_process_time() {
        const BURN_S: f64 = 0.3;
        let before = cpu_seconds(None).unwrap();
        let burnt = std::thread::spawn(|| {
            let start = thread_on_cpu_s();
            let wall = Instant::now();
            let mut x = 0u64;
            loop {
                for i in 0..100_000u64 {
                    x = std::hint::black_box(x.wrapping_mul(31).wrapping_add(i));
                }
                match (start, thread_on_cpu_s()) {
                    (Some(a), Some(b)) if b - a >= BURN_S => return b - a,
                    // No schedstat: burn for wall time, count nothing.
                    (None, _) | (_, None) if wall.elapsed() >= Duration::from_secs(1) => {
                        return 0.0;
                    }
                    _ => {}
                }
            }
        })
        .join()
        .unwrap();
        let after = cpu_seconds(None).unwrap();
        // The process time is in ticks (10 ms at 100 Hz): allow two of
        // them for the rounding at either end.
        let slack = 2.0 / clock_ticks_per_second() as f64;
        assert!(
            after - before >= burnt - slack,
            "the thread burnt {burnt:.3} s, the process time rose by {:.3} s",
            after - before
        );
        assert!(after > before, "the process time did not rise at all");
    }

    #[test]
    fn use_between_samples_is_per_process_per_input_and_cores_busy() {
        let before = CpuSample {
            serve_s: Some(1.0),
            mock_s: Some(0.5),
            bench_s: Some(2.0),
        };
        let after = CpuSample {
            serve_s: Some(4.0),
            mock_s: Some(1.5),
            bench_s: Some(4.0),
        };
        // serve 3 s, mock 1 s, bench 2 s over 4 s of wall for 200 inputs.
        let used = CpuUse::between(&before, &after, 200, 4.0);
        assert_eq!(
            used,
            CpuUse {
                cpu_s_serve: Some(3.0),
                cpu_s_mock: Some(1.0),
                cpu_s_bench: Some(2.0),
                cpu_ms_per_input_serve: Some(15.0),
                cpu_ms_per_input_mock: Some(5.0),
                cpu_ms_per_input_bench: Some(10.0),
                cores_busy: Some(1.5),
            }
        );
        // Unreadable mock: its fields and the sum are n/a, the rest stand.
        let blind = CpuSample {
            mock_s: None,
            ..after
        };
        let used = CpuUse::between(&before, &blind, 200, 4.0);
        assert_eq!(used.cpu_s_mock, None);
        assert_eq!(used.cpu_ms_per_input_mock, None);
        assert_eq!(used.cores_busy, None);
        assert_eq!(used.cpu_s_serve, Some(3.0));
        // Time going backwards (another process) and no inputs: None.
        let used = CpuUse::between(&after, &before, 0, 4.0);
        assert_eq!(used, CpuUse::default());
    }
}
