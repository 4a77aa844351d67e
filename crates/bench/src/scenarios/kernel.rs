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
/// difference to the first size.
pub async fn overhead(
    stack: &Stack,
    sizes: &[usize],
    rounds: usize,
    run: &str,
    progress: &Progress,
) -> Result<Vec<OverheadRow>, BenchError> {
    let agent = AgentClient::new(&stack.serve_url, None)?;
    let mock = MockClient::new(&stack.mock_url)?;
    let mut rows: Vec<OverheadRow> = Vec::new();
    for &n in sizes {
        progress.message(format!("kernel overhead, N = {n}"));
        for w in 0..WARMUP {
            agent.send(None, &format!("!batch{n}-warm{w}-{run}")).await;
            progress.inc();
        }
        mock.clear().await?;
        let mut sent = Vec::new();
        let switches_before = context_switches(stack.serve_pid);
        let cpu_before = cpu_ns(stack.serve_pid);
        for round in 1..=rounds {
            let text = format!("!batch{n}-ov{n}-r{round}-{run}");
            let reply = agent.send(None, &text).await;
            progress.inc();
            sent.push((text, reply));
        }
        let switches_after = context_switches(stack.serve_pid);
        let cpu_after = cpu_ns(stack.serve_pid);
        let log = mock.inputs().await?;
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
            switches_per_input: math::per_round(switches_before, switches_after, rounds),
            cpu_us_per_input: math::us_per_round(cpu_before, cpu_after, rounds),
            status: status_of(&problems),
            problems,
        });
    }
    Ok(rows)
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
