//! Scenario 2: many sessions at once, each sending its inputs one after
//! another (`!batch2`, two instant tools), every input answered exactly
//! once.
//!
//! The agent limits the turns one client address may run at once (32), so
//! sessions are spread over source addresses 127.0.0.2, .3, ... (24 per
//! address; all of 127/8 is loopback on Linux).

use std::net::{IpAddr, Ipv4Addr};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::task::JoinSet;

use crate::client::{AgentClient, MockClient, Reply};
use crate::cpu::{CpuSample, CpuUse};
use crate::error::BenchError;
use crate::math;
use crate::netstat;
use crate::procs::{Stack, process_peak};
use crate::report::{BlastResult, BlastTail, Counters, status_of};

use super::{Progress, outcome};

/// Sessions per client source address (below the agent's 32 per client).
const SESSIONS_PER_ADDRESS: usize = 24;

/// The source address of session `index` when there are `sessions`.
pub fn source_address(index: usize, sessions: usize) -> Option<IpAddr> {
    if sessions <= SESSIONS_PER_ADDRESS {
        return None;
    }
    // 127.0.0.2 ..= 127.0.0.254, then 127.0.1.1 ..= 127.0.1.254, ...: no
    // .0 or .255 host byte, and 127.0.0.1 left to the control requests.
    let idx = index / SESSIONS_PER_ADDRESS + 1;
    let third = u8::try_from(idx / 254).unwrap_or(u8::MAX);
    let fourth = u8::try_from(idx % 254 + 1).unwrap_or(u8::MAX);
    Some(IpAddr::V4(Ipv4Addr::new(127, 0, third, fourth)))
}

pub async fn blast(
    stack: &Stack,
    sessions: usize,
    per_session: usize,
    run: &str,
    progress: &Progress,
) -> Result<BlastResult, BenchError> {
    progress.message(format!("blast, {sessions} sessions x {per_session} inputs"));
    let mock = MockClient::new(&stack.mock_url)?;
    mock.clear().await?;
    let control = AgentClient::new(&stack.serve_url, None)?;
    let before = control.counters().await?;

    let mut clients: Vec<Arc<AgentClient>> = Vec::new();
    let mut tasks = JoinSet::new();
    let cpu_before = CpuSample::take(stack.serve_pid, stack.mock_pid);
    let overflows_before = netstat::read_listen_overflows();
    let started = Instant::now();
    for s in 0..sessions {
        let group = s / SESSIONS_PER_ADDRESS;
        if clients.len() <= group {
            let local = source_address(s, sessions);
            clients.push(Arc::new(AgentClient::new(&stack.serve_url, local)?));
        }
        let client = Arc::clone(&clients[group]);
        let progress = progress.clone();
        let session = format!("bench-blast-{run}-s{s}");
        let run = run.to_owned();
        tasks.spawn(async move {
            let mut sent: Vec<(String, Reply)> = Vec::new();
            for i in 1..=per_session {
                let text = format!("!batch2-s{s}-i{i}-{run}");
                let reply = client.send(Some(&session), &text).await;
                progress.inc();
                sent.push((text, reply));
            }
            (session, sent)
        });
    }
    let mut results = Vec::new();
    while let Some(joined) = tasks.join_next().await {
        match joined {
            Ok(result) => results.push(result),
            Err(error) => {
                return Err(BenchError::Control {
                    what: "a blast session".into(),
                    detail: error.to_string(),
                });
            }
        }
    }
    let wall_s = started.elapsed().as_secs_f64();
    let cpu_after = CpuSample::take(stack.serve_pid, stack.mock_pid);
    let peak = process_peak(stack.serve_pid);
    let listen_overflows = netstat::read_listen_overflows()
        .zip(overflows_before)
        .map(|(after, before)| after.saturating_sub(before));

    let log = mock.inputs().await?;
    let after = settled_counters(&control).await?;
    let inputs = sessions * per_session;
    let mut problems = Vec::new();
    let mut answered = 0;
    let mut added_ms = Vec::new();
    // (input number in its session, from 1; added ms)
    let mut numbered = Vec::new();
    for (session, sent) in &results {
        for (number, (text, reply)) in (1..).zip(sent) {
            let o = outcome(text, reply, &log);
            let found = o.problems(2);
            if found.is_empty() {
                answered += 1;
                let added = (o.reply_s - o.mock_s) * 1000.0;
                added_ms.push(added);
                numbered.push((number, added));
            }
            problems.extend(found.into_iter().map(|p| format!("{text}: {p}")));
        }
        let stored = control.user_messages(session).await?;
        let expected: Vec<&String> = sent.iter().map(|(text, _)| text).collect();
        if stored.iter().collect::<Vec<_>>() != expected {
            problems.push(format!(
                "session {session} stores {} user messages, expected its {} inputs once each in order",
                stored.len(),
                expected.len()
            ));
        }
    }
    problems.extend(counter_problems(&before, &after, inputs as u64));
    Ok(BlastResult {
        sessions,
        inputs_per_session: per_session,
        inputs,
        answered,
        p50_added_ms: math::percentile(&added_ms, 50.0).unwrap_or(0.0),
        p95_added_ms: math::percentile(&added_ms, 95.0).unwrap_or(0.0),
        p99_added_ms: math::percentile(&added_ms, 99.0).unwrap_or(0.0),
        tail: tail(&numbered),
        wall_s,
        cpu: CpuUse::between(&cpu_before, &cpu_after, inputs, wall_s),
        serve_peak_rss_kb: peak.map(|p| p.peak_rss_kb),
        serve_threads: peak.map(|p| p.threads),
        listen_overflows,
        before,
        after,
        status: status_of(&problems),
        problems,
    })
}

/// Where the slowest 1 % of `added` (each input's number in its session,
/// from 1, and its added ms) were, and the later inputs' own tail.
pub fn tail(added: &[(usize, f64)]) -> BlastTail {
    let mut by_latency: Vec<&(usize, f64)> = added.iter().collect();
    by_latency.sort_by(|a, b| b.1.total_cmp(&a.1));
    let slowest_1pct = added.len().div_ceil(100);
    let of_inputs = |first: bool| {
        added
            .iter()
            .filter(move |(number, _)| (*number == 1) == first)
            .map(|(_, ms)| *ms)
    };
    let later: Vec<f64> = of_inputs(false).collect();
    BlastTail {
        slowest_1pct,
        slowest_1pct_first_inputs: by_latency
            .iter()
            .take(slowest_1pct)
            .filter(|(number, _)| *number == 1)
            .count(),
        p99_added_ms_later_inputs: math::percentile(&later, 99.0),
        max_added_ms_later_inputs: later.iter().copied().reduce(f64::max),
        max_added_ms_first_inputs: of_inputs(true).reduce(f64::max),
    }
}

/// The counters once no session is running any more (a worker gives its
/// permit back just after the terminal frame, so allow it a moment).
async fn settled_counters(control: &AgentClient) -> Result<Counters, BenchError> {
    let mut counters = control.counters().await?;
    for _ in 0..100 {
        if counters.running_sessions == 0 && counters.queued == 0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
        counters = control.counters().await?;
    }
    Ok(counters)
}

/// What the scheduler counters say went wrong over a run of `inputs`.
pub fn counter_problems(before: &Counters, after: &Counters, inputs: u64) -> Vec<String> {
    let mut problems = Vec::new();
    let delta = |a: u64, b: u64| b.saturating_sub(a);
    let executed = delta(before.executed, after.executed);
    if executed != inputs {
        problems.push(format!(
            "the scheduler executed {executed} inputs, expected {inputs}"
        ));
    }
    for (name, a, b) in [
        ("rejected", before.rejected, after.rejected),
        ("preempted", before.preempted, after.preempted),
        ("cancelled", before.cancelled, after.cancelled),
    ] {
        if b > a {
            problems.push(format!("the scheduler {name} {} inputs", b - a));
        }
    }
    if after.queued > 0 {
        problems.push(format!("{} inputs left queued", after.queued));
    }
    if after.running_sessions > 0 {
        problems.push(format!("{} sessions still running", after.running_sessions));
    }
    problems
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sessions_spread_over_loopback_addresses_past_24() {
        assert_eq!(source_address(23, 24), None);
        assert_eq!(
            source_address(0, 240),
            Some(IpAddr::V4(Ipv4Addr::new(127, 0, 0, 2)))
        );
        assert_eq!(
            source_address(23, 240),
            Some(IpAddr::V4(Ipv4Addr::new(127, 0, 0, 2)))
        );
        assert_eq!(
            source_address(24, 240),
            Some(IpAddr::V4(Ipv4Addr::new(127, 0, 0, 3)))
        );
        // Group 252 is host 254, group 253 would be .255: skipped to 127.0.1.1.
        assert_eq!(
            source_address(252 * 24, 2400 * 10),
            Some(IpAddr::V4(Ipv4Addr::new(127, 0, 0, 254)))
        );
        assert_eq!(
            source_address(253 * 24, 2400 * 10),
            Some(IpAddr::V4(Ipv4Addr::new(127, 0, 1, 1)))
        );
    }

    /// The slowest 1 % is ⌈n/100⌉ inputs; which of them were first
    /// inputs, and the later inputs' own p99 and maximum.
    #[test]
    fn the_tail_says_how_many_of_the_slowest_were_first_inputs() {
        // 250 inputs: ⌈2.5⌉ = 3 slowest. Sessions' first inputs (number 1)
        // at 90, 80 and 70 ms (the fourth slowest); later ones 0.1..=24.6
        // ms, and one at 85.
        let mut added: Vec<(usize, f64)> = vec![(1, 90.0), (1, 80.0), (1, 70.0), (4, 85.0)];
        added.extend((1..=246_u32).map(|i| (2 + (i % 11) as usize, f64::from(i) / 10.0)));
        let found = tail(&added);
        assert_eq!(found.slowest_1pct, 3);
        // 90 (first), 85 (later), 80 (first).
        assert_eq!(found.slowest_1pct_first_inputs, 2);
        // Later inputs: 247 of them, the 85 and 0.1..=24.6; rank ⌈0.99 × 247⌉
        // = 245 of the sorted values 0.1, 0.2, ..., 24.6, 85 is 24.5.
        assert_eq!(found.p99_added_ms_later_inputs, Some(24.5));
        assert_eq!(found.max_added_ms_later_inputs, Some(85.0));
        assert_eq!(found.max_added_ms_first_inputs, Some(90.0));

        let none = tail(&[]);
        assert_eq!((none.slowest_1pct, none.slowest_1pct_first_inputs), (0, 0));
        assert_eq!(none.p99_added_ms_later_inputs, None);
    }

    #[test]
    fn counters_must_show_every_input_run_and_nothing_left() {
        let before = Counters {
            enqueued: 10,
            executed: 10,
            ..Counters::default()
        };
        let good = Counters {
            enqueued: 298,
            executed: 298,
            ..Counters::default()
        };
        assert!(counter_problems(&before, &good, 288).is_empty());
        let bad = Counters {
            enqueued: 298,
            executed: 297,
            rejected: 1,
            queued: 2,
            ..Counters::default()
        };
        assert_eq!(
            counter_problems(&before, &bad, 288),
            vec![
                "the scheduler executed 287 inputs, expected 288",
                "the scheduler rejected 1 inputs",
                "2 inputs left queued",
            ]
        );
    }
}
