//! Scenario 4 (kernel overhead) and scenario 5 (memory), on a stack whose
//! mock answers at once and whose tools return at once, so what is left of
//! a reply's time is HomeAgent's: the HTTP front, the scheduler, the
//! provider client, the assembler, the executor and the store.

use std::time::Duration;

use futures_util::StreamExt as _;

use crate::client::{AgentClient, MockClient};
use crate::error::BenchError;
use crate::math;
use crate::procs::{Stack, context_switches, cpu_ns, rss_kb};
use crate::report::{MemoryResult, OverheadRow, status_of};

use super::{Progress, outcome};

/// Unmeasured inputs per batch size first (connections, caches, the JIT of
/// nothing: mostly the allocator and SQLite's page cache).
pub const WARMUP: usize = 3;

/// Median overhead per input for each batch size; per call from the
/// difference to the first size. The sizes take turns round by round
/// (`schedule`); serve's CPU and context switches from one input's send to
/// the next one's are that input's (`charge`), summed per size, so work
/// serve does after a reply is counted too.
pub async fn overhead(
    stack: &Stack,
    sizes: &[usize],
    rounds: usize,
    run: &str,
    progress: &Progress,
) -> Result<Vec<OverheadRow>, BenchError> {
    let agent = AgentClient::new(&stack.serve_url, None)?;
    let mock = MockClient::new(&stack.mock_url)?;
    progress.message(format!("kernel overhead, N = {sizes:?} in turn"));
    for &n in sizes {
        for w in 0..WARMUP {
            agent.send(None, &format!("!batch{n}-warm{w}-{run}")).await;
            progress.inc();
        }
    }
    mock.clear().await?;
    let mut sent: Vec<Vec<(String, crate::client::Reply)>> = vec![Vec::new(); sizes.len()];
    let (mut switches, mut cpu) = (Vec::new(), Vec::new());
    for (round, slot) in schedule(sizes.len(), rounds) {
        let n = sizes[slot];
        let text = format!("!batch{n}-ov{n}-r{round}-{run}");
        switches.push((slot, context_switches(stack.serve_pid)));
        cpu.push((slot, cpu_ns(stack.serve_pid)));
        let reply = agent.send(None, &text).await;
        sent[slot].push((text, reply));
        progress.inc();
    }
    // After this round trip the last input's work is done too.
    let log = mock.inputs().await?;
    let switches = charge(sizes.len(), &switches, context_switches(stack.serve_pid));
    let cpu = charge(sizes.len(), &cpu, cpu_ns(stack.serve_pid));
    let mut rows: Vec<OverheadRow> = Vec::new();
    for (((&n, sent), switches), cpu_ns) in sizes.iter().zip(sent).zip(switches).zip(cpu) {
        let mut problems = Vec::new();
        let (mut overheads, mut replies, mut mocks) = (Vec::new(), Vec::new(), Vec::new());
        for (round, (text, reply)) in sent.iter().enumerate() {
            let o = outcome(text, reply, &log);
            problems.extend(
                o.problems(n as u64)
                    .into_iter()
                    .map(|p| format!("round {}: {p}", round + 1)),
            );
            overheads.push((o.reply_s - o.mock_s) * 1e6);
            replies.push(o.reply_s * 1e6);
            mocks.push(o.mock_s * 1e6);
        }
        let per_input_us = math::median(&overheads).unwrap_or(0.0);
        let per_call_us = rows
            .first()
            .and_then(|first| math::per_call(first.n, first.per_input_us, n, per_input_us));
        rows.push(OverheadRow {
            n,
            rounds,
            per_input_us,
            per_turn_us: per_input_us / 2.0,
            per_call_us,
            median_reply_us: math::median(&replies).unwrap_or(0.0),
            median_mock_us: math::median(&mocks).unwrap_or(0.0),
            switches_per_input: math::per_round(Some(0), switches, rounds),
            cpu_us_per_input: math::us_per_round(Some(0), cpu_ns, rounds),
            status: status_of(&problems),
            problems,
        });
    }
    Ok(rows)
}

/// Splits a counter among the sizes: each reading, taken as an input of
/// size `slot` was sent, charges that size with what the counter grew
/// until the next reading (`end` after the last). A size whose window
/// starts or ends at a reading `/proc` could not give is `None`.
fn charge(sizes: usize, readings: &[(usize, Option<u64>)], end: Option<u64>) -> Vec<Option<u64>> {
    let mut totals = vec![Some(0); sizes];
    let nexts = readings.iter().skip(1).map(|&(_, at)| at).chain([end]);
    for (&(slot, at), next) in readings.iter().zip(nexts) {
        if let Some(total) = totals.get_mut(slot) {
            *total = add_delta(*total, at, next);
        }
    }
    totals
}

/// `total` plus `after - before`; `None` from the first unknown on.
fn add_delta(total: Option<u64>, before: Option<u64>, after: Option<u64>) -> Option<u64> {
    Some(total? + after?.saturating_sub(before?))
}

/// The order of the measured inputs: `(round, size's index)`, every one
/// of `sizes` sizes once per round, in order. The peers' drivers send
/// theirs in the same order (`peers::overhead`).
pub(crate) fn schedule(sizes: usize, rounds: usize) -> Vec<(usize, usize)> {
    (1..=rounds)
        .flat_map(|round| (0..sizes).map(move |slot| (round, slot)))
        .collect()
}

/// The agent's RSS idle, then after `sessions` sessions with one finished
/// exchange each (a plain input the mock answers with text).
pub async fn memory(
    stack: &Stack,
    sessions: usize,
    run: &str,
    progress: &Progress,
) -> Result<MemoryResult, BenchError> {
    progress.message(format!("memory, {sessions} sessions"));
    let agent = AgentClient::new(&stack.serve_url, None)?;
    let mock = MockClient::new(&stack.mock_url)?;
    tokio::time::sleep(Duration::from_millis(300)).await;
    let idle_rss_kb = rss_kb(stack.serve_pid)?;
    let before = agent.counters().await?;
    mock.clear().await?;
    let texts: Vec<String> = (0..sessions).map(|i| format!("hello {i} {run}")).collect();
    // Eight at a time: enough to keep both cores busy, few enough that the
    // per-client turn limit never answers 429.
    let replies: Vec<_> = futures_util::stream::iter(texts.iter().map(|text| {
        let agent = &agent;
        async move {
            let reply = agent.send(None, text).await;
            progress.inc();
            (text, reply)
        }
    }))
    .buffer_unordered(8)
    .collect()
    .await;
    let log = mock.inputs().await?;
    let mut problems = Vec::new();
    for (text, reply) in &replies {
        if let Some(problem) = &reply.problem {
            problems.push(format!("{text}: {problem}"));
        }
        match log.get(*text).map_or(0, |r| r.requests) {
            1 => {}
            n => problems.push(format!(
                "{text}: the mock saw {n} model requests, expected 1"
            )),
        }
    }
    let after = agent.counters().await?;
    let executed = after.executed.saturating_sub(before.executed);
    if executed != sessions as u64 {
        problems.push(format!(
            "the scheduler executed {executed} inputs, expected {sessions}"
        ));
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    let loaded_rss_kb = rss_kb(stack.serve_pid)?;
    let per_session_kb = if sessions == 0 {
        0.0
    } else {
        loaded_rss_kb.saturating_sub(idle_rss_kb) as f64 / sessions as f64
    };
    Ok(MemoryResult {
        idle_rss_kb,
        sessions,
        loaded_rss_kb,
        per_session_kb,
        status: status_of(&problems),
        problems,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every round sends one input of each size before the next round
    /// starts: a slow spell of the machine falls on all sizes alike
    /// instead of on one size's block, and the per-call figure (a
    /// difference of two sizes' medians) does not swing with it.
    #[test]
    fn the_rounds_take_the_sizes_in_turn() {
        let order = schedule(3, 3);
        assert_eq!(
            order,
            [
                (1, 0),
                (1, 1),
                (1, 2),
                (2, 0),
                (2, 1),
                (2, 2),
                (3, 0),
                (3, 1),
                (3, 2)
            ]
        );
        assert!(schedule(2, 0).is_empty());
    }

    /// Each input is charged with what serve did from its send to the
    /// next send (its reply, and any work after it), the last one up to
    /// the end.
    #[test]
    fn each_input_is_charged_until_the_next_one_is_sent() {
        let readings = [(0, Some(10)), (1, Some(15)), (0, Some(30)), (1, Some(32))];
        assert_eq!(charge(2, &readings, Some(40)), [Some(5 + 2), Some(15 + 8)]);
        // A missing reading leaves both windows it bounds unknown.
        let lost = [(0, Some(10)), (1, None), (0, Some(30)), (1, Some(33))];
        assert_eq!(charge(2, &lost, Some(40)), [None, None]);
        let last_lost = [(0, Some(10)), (1, Some(12))];
        assert_eq!(charge(2, &last_lost, None), [Some(2), None]);
        assert_eq!(charge(2, &[], Some(5)), [Some(0), Some(0)]);
    }

    #[test]
    fn a_count_is_summed_over_the_inputs_until_proc_cannot_tell() {
        let total = add_delta(Some(0), Some(10), Some(15));
        assert_eq!(total, Some(5));
        assert_eq!(add_delta(total, Some(100), Some(103)), Some(8));
        let lost = add_delta(Some(8), None, Some(3));
        assert_eq!(lost, None);
        assert_eq!(add_delta(lost, Some(1), Some(2)), None, "stays unknown");
    }
}
