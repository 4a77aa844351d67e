//! What a run produces: one serde type per scenario, gathered in
//! [`BenchReport`], which is also the `--json` document.
//!
//! Correctness and timing are kept apart on purpose: [`BenchReport::failures`]
//! lists only what is *wrong* (a row whose tools did not all execute, an
//! input answered zero or two times, an error reply), never what is slow.
//! CI runs the quick bench on a noisy shared machine and must fail on the
//! first kind only.

use serde::Serialize;

use crate::callgrind::CallgrindReport;
use crate::math;
use crate::peers::PeerReport;

/// A row's verdict.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "UPPERCASE")]
pub enum Status {
    Ok,
    Fail,
}

/// What the bench learned about one input from the reply and the mock.
#[derive(Debug, Clone, PartialEq)]
pub struct InputOutcome {
    /// Client-side wall time from sending the request to the whole reply.
    pub reply_s: f64,
    /// The mock's own time for the input (all its model requests).
    pub mock_s: f64,
    /// Tools that executed, counted by the mock from the done-tags.
    pub executed: Option<u64>,
    /// Model requests the mock saw for the input.
    pub requests: u64,
    /// Reports the mock wrote for the input (more than one: run twice).
    pub reports: u64,
    /// Calls the mock asked for in the input's batch.
    pub batch_calls: Option<u64>,
    /// Tool calls and tool results in the history the mock's report read:
    /// a batch run twice holds more calls than were asked for, a call run
    /// twice (or never answered) more (or fewer) results than calls. The
    /// executed count, distinct done-tags, sees neither.
    pub report_calls: Option<u64>,
    pub report_results: Option<u64>,
    /// What went wrong with the reply itself (HTTP status, error body).
    pub reply_problem: Option<String>,
    /// The reply is not the mock's answer to this input.
    pub answer_problem: Option<String>,
}

impl InputOutcome {
    /// Everything wrong with this input, given how many tools it had to
    /// run: empty means correct.
    pub fn problems(&self, expected_tools: u64) -> Vec<String> {
        let mut problems = Vec::new();
        if let Some(problem) = &self.reply_problem {
            problems.push(problem.clone());
        }
        if let Some(problem) = &self.answer_problem {
            problems.push(problem.clone());
        }
        if let (Some(asked), Some(calls)) = (self.batch_calls, self.report_calls)
            && asked != calls
        {
            problems.push(format!(
                "the model asked for {asked} calls, and the history it got back holds {calls} \
                 (a batch run twice?)"
            ));
        }
        if let (Some(calls), Some(results)) = (self.report_calls, self.report_results)
            && calls != results
        {
            problems.push(format!(
                "{results} tool results for {calls} calls (a call answered twice, or never)"
            ));
        }
        match self.executed {
            Some(n) if n == expected_tools => {}
            Some(n) => problems.push(format!("executed {n} of {expected_tools} tools")),
            None => problems.push(format!(
                "the mock saw no report, so none of {expected_tools} tools is known to have run"
            )),
        }
        if self.reports > 1 {
            problems.push(format!(
                "answered {} times (the mock wrote {} reports)",
                self.reports, self.reports
            ));
        }
        problems
    }
}

/// Scenario 1: one batch size, parallel against forced-serial.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct BatchRow {
    pub n: usize,
    pub rounds: usize,
    /// Tools executed per input by the mock's count: `n` when every round
    /// of both kinds agreed, otherwise the first count that was not `n`.
    pub executed: u64,
    /// Median reply time of `!slowbatchN`.
    pub parallel_s: f64,
    /// Median reply time of `!serialbatchN`.
    pub serial_s: f64,
    pub speedup: f64,
    pub ideal: f64,
    /// speedup / ideal.
    pub ratio: f64,
    /// Median mock time of the parallel and the serial input.
    pub m_parallel_s: f64,
    pub m_serial_s: f64,
    pub status: Status,
    pub problems: Vec<String>,
}

impl BatchRow {
    /// Builds the row from every round's outcome: medians for the times,
    /// FAIL when any round of either kind is not correct.
    pub fn from_rounds(
        n: usize,
        tool_sleep_ms: u64,
        parallel: &[InputOutcome],
        serial: &[InputOutcome],
    ) -> BatchRow {
        let expected = n as u64;
        let mut problems = Vec::new();
        let mut executed = expected;
        for (kind, outcomes) in [("parallel", parallel), ("serial", serial)] {
            for (round, outcome) in outcomes.iter().enumerate() {
                for problem in outcome.problems(expected) {
                    problems.push(format!("{kind} round {}: {problem}", round + 1));
                }
                let got = outcome.executed.unwrap_or(0);
                if got != expected && executed == expected {
                    executed = got;
                }
            }
        }
        if parallel.is_empty() || serial.is_empty() {
            problems.push("no rounds ran".to_owned());
        }
        let med = |xs: &[InputOutcome], f: fn(&InputOutcome) -> f64| {
            math::median(&xs.iter().map(f).collect::<Vec<_>>()).unwrap_or(0.0)
        };
        let parallel_s = med(parallel, |o| o.reply_s);
        let serial_s = med(serial, |o| o.reply_s);
        let m_parallel_s = med(parallel, |o| o.mock_s);
        let m_serial_s = med(serial, |o| o.mock_s);
        let speedup = if parallel_s > 0.0 {
            serial_s / parallel_s
        } else {
            0.0
        };
        let sleeps = math::slowbatch_sleeps(n, tool_sleep_ms);
        let ideal = math::ideal_speedup(m_serial_s, m_parallel_s, &sleeps).unwrap_or(0.0);
        let ratio = if ideal > 0.0 { speedup / ideal } else { 0.0 };
        BatchRow {
            n,
            rounds: parallel.len().min(serial.len()),
            executed,
            parallel_s,
            serial_s,
            speedup,
            ideal,
            ratio,
            m_parallel_s,
            m_serial_s,
            status: if problems.is_empty() {
                Status::Ok
            } else {
                Status::Fail
            },
            problems,
        }
    }
}

/// Scheduler counters from `GET /api/v1/status`, the ones the blast checks.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Counters {
    pub enqueued: u64,
    pub executed: u64,
    pub rejected: u64,
    pub preempted: u64,
    pub cancelled: u64,
    /// Inputs still waiting, over all sessions.
    pub queued: u64,
    pub running_sessions: u64,
}

/// Scenario 2.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct BlastResult {
    pub sessions: usize,
    pub inputs_per_session: usize,
    pub inputs: usize,
    /// Inputs answered exactly once, correctly.
    pub answered: usize,
    pub p50_added_ms: f64,
    pub p95_added_ms: f64,
    pub p99_added_ms: f64,
    /// Where the slowest inputs were: sessions' first inputs (all sent at
    /// once) or later ones. Flattened beside the latencies.
    #[serde(flatten)]
    pub tail: BlastTail,
    pub wall_s: f64,
    /// CPU each process used over the blast ([`crate::cpu`]): whether the
    /// latency is the agent's or a full machine's. Flattened, so the JSON
    /// fields sit beside the latencies.
    #[serde(flatten)]
    pub cpu: crate::cpu::CpuUse,
    /// The agent's peak resident set (kB) and its threads just after the
    /// blast (`procs::process_peak`); `None` where `/proc` cannot tell.
    pub serve_peak_rss_kb: Option<u64>,
    pub serve_threads: Option<u64>,
    /// Handshakes the machine's listeners dropped during the blast, their
    /// accept queue full (`TcpExt: ListenOverflows`, machine-wide, see
    /// [`crate::netstat`]); each such client waited a second to retry.
    /// `None` where the counter cannot be read.
    pub listen_overflows: Option<u64>,
    pub before: Counters,
    pub after: Counters,
    pub status: Status,
    pub problems: Vec<String>,
}

/// The blast's slowest inputs, split by whether each was its session's
/// first. Every session sends its first input at the start, so the first
/// round is the blast's burst; later inputs come as answers do.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct BlastTail {
    /// How many inputs the slowest 1 % is: ⌈answered / 100⌉.
    pub slowest_1pct: usize,
    /// How many of those were a session's first input.
    pub slowest_1pct_first_inputs: usize,
    /// The added latency's p99 and maximum over every session's inputs
    /// after its first, and the maximum over first inputs (ms).
    pub p99_added_ms_later_inputs: Option<f64>,
    pub max_added_ms_later_inputs: Option<f64>,
    pub max_added_ms_first_inputs: Option<f64>,
}

/// Scenario 3.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct StabilityResult {
    pub rounds: usize,
    pub ok: usize,
    pub median_s: f64,
    pub status: Status,
    pub problems: Vec<String>,
}

/// Scenario 4: one batch size with a mock that answers at once and tools
/// that return at once.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct OverheadRow {
    pub n: usize,
    pub rounds: usize,
    /// Median reply time minus the mock's time, per input (one input is
    /// two model turns: the batch and the report).
    pub per_input_us: f64,
    /// Half of `per_input_us`: per model turn.
    pub per_turn_us: f64,
    /// `(overhead(n) − overhead(1)) / (n − 1)`; `None` for n = 1.
    pub per_call_us: Option<f64>,
    pub median_reply_us: f64,
    pub median_mock_us: f64,
    /// Context switches of every `serve` thread per measured input (see
    /// `procs::context_switches`); `None` where `/proc` cannot tell. On a
    /// small VM a switch costs more than the agent's own work per input.
    pub switches_per_input: Option<f64>,
    /// CPU time of every `serve` thread per measured input, in µs (see
    /// `procs::cpu_ns`): steadier than the wall clock on a shared machine,
    /// and it counts what switches cost, which instruction counts miss.
    pub cpu_us_per_input: Option<f64>,
    pub status: Status,
    pub problems: Vec<String>,
}

/// Scenario 5.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct MemoryResult {
    pub idle_rss_kb: u64,
    pub sessions: usize,
    pub loaded_rss_kb: u64,
    pub per_session_kb: f64,
    pub status: Status,
    pub problems: Vec<String>,
}

/// A scenario that did not run, and why.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct NotDone {
    pub what: String,
    pub why: String,
}

/// Where and how the numbers were taken.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Setup {
    pub quick: bool,
    pub scale: u32,
    pub binary: String,
    pub build: &'static str,
    pub cpus: usize,
    pub cpu_model: Option<String>,
    pub os: String,
    /// The mock's knobs for scenarios 1–3.
    pub delay_ms: u64,
    pub chunk_delay_ms: u64,
    pub tool_sleep_ms: u64,
}

/// The whole run; `--json` prints it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct BenchReport {
    pub setup: Setup,
    pub batch: Vec<BatchRow>,
    pub blast: Option<BlastResult>,
    pub stability: Option<StabilityResult>,
    /// Scenario 4 with the default `[store] sync = "full"`.
    pub overhead: Vec<OverheadRow>,
    /// Scenario 4 again with `[store] sync = "normal"` (no fsync per commit).
    pub overhead_sync_normal: Vec<OverheadRow>,
    /// The disk's sync latency where the stacks keep their data.
    pub disk_sync: Option<crate::disk::SyncLatency>,
    pub memory: Option<MemoryResult>,
    /// Scenario 6, one per framework that was tried. A peer's FAIL rows
    /// are not in [`BenchReport::failures`]: the exit status is about
    /// HomeAgent.
    pub peers: Vec<PeerReport>,
    /// Scenario 4b.
    pub callgrind: Option<CallgrindReport>,
    pub not_done: Vec<NotDone>,
}

impl BenchReport {
    /// Every correctness failure, one line each; empty when all is well.
    /// Timing never appears here.
    pub fn failures(&self) -> Vec<String> {
        let mut out = Vec::new();
        for row in &self.batch {
            out.extend(
                row.problems
                    .iter()
                    .map(|p| format!("batch N={}: {p}", row.n)),
            );
        }
        if let Some(blast) = &self.blast {
            out.extend(blast.problems.iter().map(|p| format!("blast: {p}")));
        }
        if let Some(stability) = &self.stability {
            out.extend(stability.problems.iter().map(|p| format!("stability: {p}")));
        }
        for row in &self.overhead {
            out.extend(
                row.problems
                    .iter()
                    .map(|p| format!("overhead N={}: {p}", row.n)),
            );
        }
        for row in &self.overhead_sync_normal {
            out.extend(
                row.problems
                    .iter()
                    .map(|p| format!("overhead (sync normal) N={}: {p}", row.n)),
            );
        }
        if let Some(memory) = &self.memory {
            out.extend(memory.problems.iter().map(|p| format!("memory: {p}")));
        }
        if let Some(callgrind) = &self.callgrind {
            for row in &callgrind.rows {
                out.extend(
                    row.problems
                        .iter()
                        .map(|p| format!("callgrind N={}: {p}", row.n)),
                );
            }
        }
        out
    }
}

/// `Ok` when there are no problems.
pub fn status_of(problems: &[String]) -> Status {
    if problems.is_empty() {
        Status::Ok
    } else {
        Status::Fail
    }
}

/// One input's outcome with two requests and one report, for the unit
/// tests of the modules that aggregate outcomes into rows.
#[cfg(test)]
pub(crate) fn test_outcome(reply_s: f64, mock_s: f64, executed: Option<u64>) -> InputOutcome {
    InputOutcome {
        reply_s,
        mock_s,
        executed,
        requests: 2,
        reports: 1,
        batch_calls: executed,
        report_calls: executed,
        report_results: executed,
        reply_problem: None,
        answer_problem: None,
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::test_outcome as outcome;
    use super::*;

    #[test]
    fn a_correct_row_has_medians_and_the_ideal() {
        // N = 2, S = 100: sleeps 0.100 and 0.105 → Σ 0.205, max 0.105.
        let parallel = [
            outcome(0.30, 0.10, Some(2)),
            outcome(0.20, 0.10, Some(2)),
            outcome(0.25, 0.10, Some(2)),
        ];
        let serial = [
            outcome(0.40, 0.10, Some(2)),
            outcome(0.30, 0.10, Some(2)),
            outcome(0.35, 0.10, Some(2)),
        ];
        let row = BatchRow::from_rounds(2, 100, &parallel, &serial);
        assert_eq!(row.status, Status::Ok);
        assert_eq!(row.executed, 2);
        assert_eq!(row.rounds, 3);
        assert!((row.parallel_s - 0.25).abs() < 1e-12);
        assert!((row.serial_s - 0.35).abs() < 1e-12);
        // 0.35 / 0.25 = 1.4; ideal (0.1 + 0.205) / (0.1 + 0.105) = 0.305 / 0.205.
        assert!((row.speedup - 1.4).abs() < 1e-12);
        assert!((row.ideal - 1.487_804_878_048_780_5).abs() < 1e-12);
        assert!((row.ratio - 1.4 / 1.487_804_878_048_780_5).abs() < 1e-12);
    }

    #[test]
    fn a_row_with_a_short_count_is_fail_and_says_which_round() {
        let good = outcome(0.2, 0.1, Some(4));
        let parallel = [good.clone(), outcome(0.2, 0.1, Some(3))];
        let serial = [good.clone(), good];
        let row = BatchRow::from_rounds(4, 100, &parallel, &serial);
        assert_eq!(row.status, Status::Fail);
        assert_eq!(row.executed, 3);
        assert_eq!(
            row.problems,
            vec!["parallel round 2: executed 3 of 4 tools"]
        );
    }

    /// The executed count is distinct done-tags: a call run twice, or a
    /// whole batch run twice, keeps it at N. The calls and results the
    /// report read do not.
    #[test]
    fn a_call_or_a_batch_run_twice_is_a_failure_though_the_count_is_n() {
        let twice = InputOutcome {
            report_results: Some(8),
            ..outcome(0.2, 0.1, Some(4))
        };
        assert_eq!(
            twice.problems(4),
            ["8 tool results for 4 calls (a call answered twice, or never)"]
        );
        let batch_twice = InputOutcome {
            report_calls: Some(8),
            report_results: Some(8),
            ..outcome(0.2, 0.1, Some(4))
        };
        assert_eq!(
            batch_twice.problems(4),
            [
                "the model asked for 4 calls, and the history it got back holds 8 (a batch run twice?)"
            ]
        );
        let wrong_answer = InputOutcome {
            answer_problem: Some("not the answer".into()),
            ..outcome(0.2, 0.1, Some(4))
        };
        assert_eq!(wrong_answer.problems(4), ["not the answer"]);
    }

    #[test]
    fn no_report_or_two_reports_or_an_error_reply_are_failures() {
        let mut silent = outcome(0.1, 0.1, None);
        silent.reports = 0;
        assert_eq!(
            silent.problems(2),
            vec!["the mock saw no report, so none of 2 tools is known to have run"]
        );
        let mut twice = outcome(0.1, 0.1, Some(2));
        twice.reports = 2;
        assert_eq!(
            twice.problems(2),
            vec!["answered 2 times (the mock wrote 2 reports)"]
        );
        let mut refused = outcome(0.1, 0.1, Some(2));
        refused.reply_problem = Some("HTTP 429: queue_full".into());
        assert_eq!(refused.problems(2), vec!["HTTP 429: queue_full"]);
        assert!(outcome(0.1, 0.1, Some(2)).problems(2).is_empty());
    }

    #[test]
    fn the_json_row_carries_the_issue_fields() {
        let good = outcome(0.2, 0.0, Some(1));
        let row = BatchRow::from_rounds(
            1,
            100,
            std::slice::from_ref(&good),
            std::slice::from_ref(&good),
        );
        let value = serde_json::to_value(&row).unwrap();
        for key in [
            "n",
            "executed",
            "parallel_s",
            "serial_s",
            "speedup",
            "ideal",
        ] {
            assert!(value.get(key).is_some(), "{key} missing from {value}");
        }
        assert_eq!(value["n"], json!(1));
        assert_eq!(value["executed"], json!(1));
        assert_eq!(value["status"], json!("OK"));
        // One sleep: ideal (0 + 0.1) / (0 + 0.1) = 1.
        assert_eq!(value["ideal"], json!(1.0));
        assert_eq!(value["speedup"], json!(1.0));
    }

    #[test]
    fn failures_list_correctness_only() {
        let good = outcome(0.2, 0.1, Some(2));
        let slow = outcome(50.0, 0.1, Some(2));
        let report = BenchReport {
            setup: Setup {
                quick: true,
                scale: 1,
                binary: String::new(),
                build: "debug",
                cpus: 2,
                cpu_model: None,
                os: String::new(),
                delay_ms: 0,
                chunk_delay_ms: 0,
                tool_sleep_ms: 0,
            },
            // A very slow but correct row is not a failure.
            batch: vec![BatchRow::from_rounds(2, 100, &[slow], &[good])],
            blast: None,
            stability: Some(StabilityResult {
                rounds: 2,
                ok: 1,
                median_s: 0.1,
                status: Status::Fail,
                problems: vec!["round 2: HTTP 500".into()],
            }),
            overhead: Vec::new(),
            overhead_sync_normal: vec![OverheadRow {
                n: 8,
                rounds: 3,
                per_input_us: 900.0,
                per_turn_us: 450.0,
                per_call_us: Some(20.0),
                median_reply_us: 1000.0,
                median_mock_us: 100.0,
                switches_per_input: Some(26.5),
                cpu_us_per_input: Some(640.0),
                status: Status::Fail,
                problems: vec!["round 3: executed 7 of 8".into()],
            }],
            disk_sync: None,
            memory: None,
            peers: Vec::new(),
            callgrind: None,
            not_done: Vec::new(),
        };
        assert_eq!(
            report.failures(),
            vec![
                "stability: round 2: HTTP 500",
                "overhead (sync normal) N=8: round 3: executed 7 of 8"
            ]
        );
    }
}
