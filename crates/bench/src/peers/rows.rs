//! The peers' rows: the same arithmetic as HomeAgent's rows (medians, the
//! ideal, the mock's count), plus the ratio to HomeAgent's row of the same
//! N. Pure, so each is tested with numbers worked out by hand.

use serde::Serialize;

use crate::math;
use crate::report::{BatchRow, InputOutcome, OverheadRow, Status, status_of};

/// Scenario 1 for a peer, one batch size.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PeerBatchRow {
    pub n: usize,
    pub rounds: usize,
    /// The mock's count, as in HomeAgent's rows.
    pub executed: u64,
    /// The fewest `demo_sleep` calls in flight at once at the peak of a
    /// parallel round (N when every round overlapped all its calls).
    pub peak_in_flight: u64,
    pub parallel_s: f64,
    /// Forced-serial time; `None` where the framework has no such setting.
    pub serial_s: Option<f64>,
    pub speedup: Option<f64>,
    /// (M + Σt) / (M + max t), as for HomeAgent.
    pub ideal: f64,
    /// speedup / ideal.
    pub ratio: Option<f64>,
    /// HomeAgent's parallel time for the same N, and peer / HomeAgent.
    pub homeagent_parallel_s: Option<f64>,
    pub time_vs_homeagent: Option<f64>,
    pub status: Status,
    pub problems: Vec<String>,
}

/// Scenario 4 for a peer, one batch size.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PeerOverheadRow {
    pub n: usize,
    pub rounds: usize,
    pub per_input_us: f64,
    pub per_turn_us: f64,
    /// Marginal per call against the first size, as for HomeAgent.
    pub per_call_us: Option<f64>,
    /// peer / HomeAgent, per input and per call.
    pub per_input_vs_homeagent: Option<f64>,
    pub per_call_vs_homeagent: Option<f64>,
    pub status: Status,
    pub problems: Vec<String>,
}

pub fn ratio(a: f64, b: f64) -> Option<f64> {
    (b > 0.0).then(|| a / b)
}

/// Builds a peer's scenario-1 row from its rounds (medians, FAIL on any
/// wrong count), next to HomeAgent's row for the same N.
pub fn batch_row(
    n: usize,
    tool_sleep_ms: u64,
    parallel: &[(InputOutcome, u64)],
    serial: Option<&[InputOutcome]>,
    homeagent: Option<&BatchRow>,
) -> PeerBatchRow {
    let par: Vec<InputOutcome> = parallel.iter().map(|(o, _)| o.clone()).collect();
    let peak_in_flight = parallel.iter().map(|(_, p)| *p).min().unwrap_or(0);
    let (executed, parallel_s, serial_s, speedup, ideal, ratio_to_ideal, mut problems) =
        match serial {
            Some(ser) => {
                let row = BatchRow::from_rounds(n, tool_sleep_ms, &par, ser);
                (
                    row.executed,
                    row.parallel_s,
                    Some(row.serial_s),
                    Some(row.speedup),
                    row.ideal,
                    Some(row.ratio),
                    row.problems,
                )
            }
            None => {
                // The same as BatchRow::from_rounds without the serial half.
                let expected = n as u64;
                let mut problems = Vec::new();
                let mut executed = expected;
                for (round, o) in par.iter().enumerate() {
                    for p in o.problems(expected) {
                        problems.push(format!("parallel round {}: {p}", round + 1));
                    }
                    let got = o.executed.unwrap_or(0);
                    if got != expected && executed == expected {
                        executed = got;
                    }
                }
                if par.is_empty() {
                    problems.push("no rounds ran".to_owned());
                }
                let reply: Vec<f64> = par.iter().map(|o| o.reply_s).collect();
                let mock: Vec<f64> = par.iter().map(|o| o.mock_s).collect();
                let m = math::median(&mock).unwrap_or(0.0);
                let sleeps = math::slowbatch_sleeps(n, tool_sleep_ms);
                let ideal = math::ideal_speedup(m, m, &sleeps).unwrap_or(0.0);
                let parallel_s = math::median(&reply).unwrap_or(0.0);
                (executed, parallel_s, None, None, ideal, None, problems)
            }
        };
    if peak_in_flight < n as u64 && !par.is_empty() {
        // Not a failure (the tools did run), but the report must say it.
        problems.push(format!(
            "note: at most {peak_in_flight} of {n} sleeps overlapped in some round"
        ));
    }
    let homeagent_parallel_s = homeagent.map(|r| r.parallel_s);
    let failed = problems.iter().any(|p| !p.starts_with("note: "));
    PeerBatchRow {
        n,
        rounds: par.len(),
        executed,
        peak_in_flight,
        parallel_s,
        serial_s,
        speedup,
        ideal,
        ratio: ratio_to_ideal,
        homeagent_parallel_s,
        time_vs_homeagent: homeagent_parallel_s.and_then(|h| ratio(parallel_s, h)),
        status: if failed { Status::Fail } else { Status::Ok },
        problems,
    }
}

/// Builds a peer's scenario-4 rows (one per size, in order) from the
/// outcomes of each size, next to HomeAgent's rows.
pub fn overhead_rows(
    sizes: &[(usize, Vec<InputOutcome>)],
    homeagent: &[OverheadRow],
) -> Vec<PeerOverheadRow> {
    let mut rows: Vec<PeerOverheadRow> = Vec::new();
    for (n, outcomes) in sizes {
        let mut problems = Vec::new();
        let mut overheads = Vec::new();
        for (round, o) in outcomes.iter().enumerate() {
            problems.extend(
                o.problems(*n as u64)
                    .into_iter()
                    .map(|p| format!("round {}: {p}", round + 1)),
            );
            overheads.push((o.reply_s - o.mock_s) * 1e6);
        }
        let per_input_us = math::median(&overheads).unwrap_or(0.0);
        let per_call_us = rows
            .first()
            .and_then(|first| math::per_call(first.n, first.per_input_us, *n, per_input_us));
        let ha = homeagent.iter().find(|r| r.n == *n);
        rows.push(PeerOverheadRow {
            n: *n,
            rounds: outcomes.len(),
            per_input_us,
            per_turn_us: per_input_us / 2.0,
            per_call_us,
            per_input_vs_homeagent: ha.and_then(|h| ratio(per_input_us, h.per_input_us)),
            per_call_vs_homeagent: ha
                .and_then(|h| h.per_call_us)
                .zip(per_call_us)
                .and_then(|(h, p)| ratio(p, h)),
            status: status_of(&problems),
            problems,
        });
    }
    rows
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::test_outcome as outcome;

    fn homeagent_batch(n: usize, parallel_s: f64) -> BatchRow {
        let o = outcome(parallel_s, 0.1, Some(n as u64));
        BatchRow::from_rounds(n, 100, std::slice::from_ref(&o), std::slice::from_ref(&o))
    }

    #[test]
    fn a_peer_with_a_serial_baseline_gets_the_same_speedup_as_homeagent_rows() {
        // N = 2, S = 100: sleeps 0.100 + 0.105 = 0.205, max 0.105; M = 0.1.
        let parallel = [
            (outcome(0.30, 0.1, Some(2)), 2),
            (outcome(0.40, 0.1, Some(2)), 2),
            (outcome(0.50, 0.1, Some(2)), 2),
        ];
        let serial = [
            outcome(0.60, 0.1, Some(2)),
            outcome(0.70, 0.1, Some(2)),
            outcome(0.80, 0.1, Some(2)),
        ];
        let ha = homeagent_batch(2, 0.2);
        let row = batch_row(2, 100, &parallel, Some(&serial), Some(&ha));
        assert_eq!(row.status, Status::Ok, "{:?}", row.problems);
        assert_eq!((row.executed, row.peak_in_flight, row.rounds), (2, 2, 3));
        assert!((row.parallel_s - 0.40).abs() < 1e-12);
        assert_eq!(row.serial_s, Some(0.70));
        // 0.70 / 0.40 = 1.75; ideal (0.1 + 0.205) / (0.1 + 0.105) = 0.305 / 0.205.
        assert!((row.speedup.unwrap() - 1.75).abs() < 1e-12);
        assert!((row.ideal - 0.305 / 0.205).abs() < 1e-12);
        assert!((row.ratio.unwrap() - 1.75 / (0.305 / 0.205)).abs() < 1e-12);
        // Peer 0.40 s against HomeAgent's 0.20 s: 2× the time.
        assert_eq!(row.homeagent_parallel_s, Some(0.2));
        assert!((row.time_vs_homeagent.unwrap() - 2.0).abs() < 1e-12);
    }

    #[test]
    fn a_peer_without_a_serial_setting_has_times_and_the_ideal_only() {
        let parallel = [
            (outcome(0.30, 0.1, Some(4)), 4),
            (outcome(0.50, 0.1, Some(4)), 3),
        ];
        let row = batch_row(4, 150, &parallel, None, None);
        assert_eq!(row.status, Status::Ok);
        assert_eq!((row.serial_s, row.speedup, row.ratio), (None, None, None));
        assert!((row.parallel_s - 0.40).abs() < 1e-12);
        // Sleeps 0.150 .. 0.165: Σ 0.630, max 0.165; M 0.1 → 0.73 / 0.265.
        assert!((row.ideal - 0.73 / 0.265).abs() < 1e-12);
        // The fewest overlapping sleeps of any round, said but not a failure.
        assert_eq!(row.peak_in_flight, 3);
        assert_eq!(
            row.problems,
            vec!["note: at most 3 of 4 sleeps overlapped in some round"]
        );
        assert_eq!(row.time_vs_homeagent, None);
    }

    #[test]
    fn a_short_count_from_the_mock_fails_the_peer_row() {
        let parallel = [
            (outcome(0.3, 0.1, Some(4)), 4),
            (outcome(0.3, 0.1, Some(2)), 4),
        ];
        let row = batch_row(4, 150, &parallel, None, None);
        assert_eq!(row.status, Status::Fail);
        assert_eq!(row.executed, 2);
        assert_eq!(
            row.problems,
            vec!["parallel round 2: executed 2 of 4 tools"]
        );
    }

    #[test]
    fn overhead_rows_are_marginal_per_call_and_compared_with_homeagent() {
        // N = 1: medians of (0.05 − 0.01, 0.07 − 0.01, 0.06 − 0.01) = 50,000 µs.
        // N = 8: (0.12 − 0.01) → 110,000 µs; per call (110,000 − 50,000) / 7.
        let sizes = vec![
            (
                1,
                vec![
                    outcome(0.05, 0.01, Some(1)),
                    outcome(0.07, 0.01, Some(1)),
                    outcome(0.06, 0.01, Some(1)),
                ],
            ),
            (8, vec![outcome(0.12, 0.01, Some(8))]),
        ];
        let ha = |n: usize, per_input_us: f64, per_call_us: Option<f64>| OverheadRow {
            n,
            rounds: 1,
            per_input_us,
            per_turn_us: per_input_us / 2.0,
            per_call_us,
            median_reply_us: 0.0,
            median_mock_us: 0.0,
            switches_per_input: None,
            cpu_us_per_input: None,
            status: Status::Ok,
            problems: Vec::new(),
        };
        let homeagent = [ha(1, 5_000.0, None), ha(8, 6_000.0, Some(1_000.0 / 7.0))];
        let rows = overhead_rows(&sizes, &homeagent);
        assert!((rows[0].per_input_us - 50_000.0).abs() < 1e-6);
        assert!((rows[0].per_turn_us - 25_000.0).abs() < 1e-6);
        assert_eq!(rows[0].per_call_us, None);
        assert!((rows[0].per_input_vs_homeagent.unwrap() - 10.0).abs() < 1e-9);
        assert!((rows[1].per_input_us - 110_000.0).abs() < 1e-6);
        assert!((rows[1].per_call_us.unwrap() - 60_000.0 / 7.0).abs() < 1e-6);
        // (60,000 / 7) / (1,000 / 7) = 60.
        assert!((rows[1].per_call_vs_homeagent.unwrap() - 60.0).abs() < 1e-9);
        assert_eq!(rows[1].status, Status::Ok);
    }
}
