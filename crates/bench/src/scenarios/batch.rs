//! Scenario 1 (batch speed-up) and scenario 3 (stability).

use crate::client::{AgentClient, MockClient};
use crate::error::BenchError;
use crate::math;
use crate::procs::Stack;
use crate::report::{BatchRow, StabilityResult, status_of};

use super::{Progress, outcome};

/// `!slowbatchN` against `!serialbatchN`, alternating, `rounds` of each,
/// every input in a fresh session so history length does not drift.
pub async fn speedup(
    stack: &Stack,
    sizes: &[usize],
    rounds: usize,
    run: &str,
    progress: &Progress,
) -> Result<Vec<BatchRow>, BenchError> {
    let agent = AgentClient::new(&stack.serve_url, None)?;
    let mock = MockClient::new(&stack.mock_url)?;
    let mut rows = Vec::new();
    for &n in sizes {
        progress.message(format!("batch speed-up, N = {n}"));
        mock.clear().await?;
        let mut sent = Vec::new();
        for round in 1..=rounds {
            for kind in ["slowbatch", "serialbatch"] {
                let text = format!("!{kind}{n}-n{n}-r{round}-{run}");
                let reply = agent.send(None, &text).await;
                progress.inc();
                sent.push((kind, text, reply));
            }
        }
        let log = mock.inputs().await?;
        let pick = |wanted: &str| {
            sent.iter()
                .filter(|(kind, _, _)| *kind == wanted)
                .map(|(_, text, reply)| outcome(text, reply, &log))
                .collect::<Vec<_>>()
        };
        let row = BatchRow::from_rounds(
            n,
            stack.settings.tool_sleep_ms,
            &pick("slowbatch"),
            &pick("serialbatch"),
        );
        progress.println(format!(
            "  N={n:<3} parallel {:.3}s  serial {:.3}s  speed-up {:.2}x  ideal {:.2}x  executed {}  {:?}",
            row.parallel_s, row.serial_s, row.speedup, row.ideal, row.executed, row.status
        ));
        rows.push(row);
    }
    Ok(rows)
}

/// `rounds` consecutive `!slowbatch4` inputs on one session: each must be
/// answered, with four tools executed, and the session's history must hold
/// every input once, in order.
pub async fn stability(
    stack: &Stack,
    rounds: usize,
    run: &str,
    progress: &Progress,
) -> Result<StabilityResult, BenchError> {
    progress.message(format!("stability, {rounds} rounds on one session"));
    let agent = AgentClient::new(&stack.serve_url, None)?;
    let mock = MockClient::new(&stack.mock_url)?;
    mock.clear().await?;
    let session = format!("bench-stability-{run}");
    let mut sent = Vec::new();
    for round in 1..=rounds {
        let text = format!("!slowbatch4-stability-r{round}-{run}");
        let reply = agent.send(Some(&session), &text).await;
        progress.inc();
        sent.push((text, reply));
    }
    let log = mock.inputs().await?;
    let mut problems = Vec::new();
    let mut ok = 0;
    let mut times = Vec::new();
    for (round, (text, reply)) in sent.iter().enumerate() {
        let o = outcome(text, reply, &log);
        let found = o.problems(4);
        if found.is_empty() {
            ok += 1;
        }
        problems.extend(
            found
                .into_iter()
                .map(|p| format!("round {}: {p}", round + 1)),
        );
        times.push(o.reply_s);
    }
    let stored = agent.user_messages(&session).await?;
    let expected: Vec<&String> = sent.iter().map(|(text, _)| text).collect();
    if stored.iter().collect::<Vec<_>>() != expected {
        problems.push(format!(
            "the session stores {} user messages, expected the {} inputs once each in order",
            stored.len(),
            expected.len()
        ));
    }
    Ok(StabilityResult {
        rounds,
        ok,
        median_s: math::median(&times).unwrap_or(0.0),
        status: status_of(&problems),
        problems,
    })
}
