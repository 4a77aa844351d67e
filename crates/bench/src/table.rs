//! The human-readable report printed at the end of a run.

use std::fmt::Write as _;

use crate::report::{BenchReport, BlastResult, OverheadRow, Status};

fn verdict(status: Status) -> &'static str {
    match status {
        Status::Ok => "ok",
        Status::Fail => "FAIL",
    }
}

/// The report as plain-text tables.
pub fn render(report: &BenchReport) -> String {
    let mut out = String::new();
    let s = &report.setup;
    let _ = writeln!(
        out,
        "homeagent bench{}: {} build, {} CPUs ({}), {}; mock delay {} ms, chunk delay {} ms, tool sleep S = {} ms (call i sleeps S + 5i)",
        if s.quick { " --quick" } else { "" },
        s.build,
        s.cpus,
        s.cpu_model.as_deref().unwrap_or("unknown CPU"),
        s.os,
        s.delay_ms,
        s.chunk_delay_ms,
        s.tool_sleep_ms
    );
    if !report.batch.is_empty() {
        let _ = writeln!(
            out,
            "\n1. Batch speed-up (!slowbatchN vs !serialbatchN, medians; executed = the mock's count)"
        );
        let _ = writeln!(
            out,
            "{:>4} {:>6} {:>9} {:>11} {:>10} {:>8} {:>7} {:>8} {:>9} {:>6}",
            "N",
            "rounds",
            "executed",
            "parallel s",
            "serial s",
            "speedup",
            "ideal",
            "ratio",
            "M par s",
            ""
        );
        for r in &report.batch {
            let _ = writeln!(
                out,
                "{:>4} {:>6} {:>9} {:>11.3} {:>10.3} {:>7.2}x {:>6.2}x {:>7.1}% {:>9.3} {:>6}",
                r.n,
                r.rounds,
                r.executed,
                r.parallel_s,
                r.serial_s,
                r.speedup,
                r.ideal,
                r.ratio * 100.0,
                r.m_parallel_s,
                verdict(r.status)
            );
        }
    }
    if let Some(b) = &report.blast {
        let _ = writeln!(
            out,
            "\n2. Blast: {} sessions x {} !batch2 = {} inputs, {} answered exactly once ({})\n   added latency (reply - mock time): p50 {:.2} ms, p95 {:.2} ms, p99 {:.2} ms; wall {:.2} s\n   scheduler before: executed {} rejected {} queued {}; after: executed {} rejected {} queued {} running {}",
            b.sessions,
            b.inputs_per_session,
            b.inputs,
            b.answered,
            verdict(b.status),
            b.p50_added_ms,
            b.p95_added_ms,
            b.p99_added_ms,
            b.wall_s,
            b.before.executed,
            b.before.rejected,
            b.before.queued,
            b.after.executed,
            b.after.rejected,
            b.after.queued,
            b.after.running_sessions
        );
        let _ = writeln!(out, "{}", blast_tail_line(&b.tail));
        let _ = writeln!(out, "{}", blast_cpu_line(b, s.cpus));
    }
    if let Some(st) = &report.stability {
        let _ = writeln!(
            out,
            "\n3. Stability: {}/{} rounds of !slowbatch4 on one session ok, median {:.3} s ({})",
            st.ok,
            st.rounds,
            st.median_s,
            verdict(st.status)
        );
    }
    if let Some(d) = &report.disk_sync {
        let _ = writeln!(
            out,
            "\nDisk: a 4 KiB append + fdatasync in the data directory takes {:.2} ms (median), {:.2} ms (p99) over {} syncs; \
             with [store] sync = \"full\" every commit waits for one",
            d.p50_ms, d.p99_ms, d.rounds
        );
    }
    render_overhead(
        &mut out,
        "\n4. Kernel overhead (zero-delay mock, instant tools; reply - mock time, medians; [store] sync = \"full\", the default)",
        &report.overhead,
    );
    render_overhead(
        &mut out,
        "\n4. Kernel overhead again with [store] sync = \"normal\" (no fsync per commit)",
        &report.overhead_sync_normal,
    );
    if let Some(m) = &report.memory {
        let _ = writeln!(
            out,
            "\n5. Memory (serve RSS): idle {} kB; with {} sessions {} kB; {:.1} kB per session ({})",
            m.idle_rss_kb,
            m.sessions,
            m.loaded_rss_kb,
            m.per_session_kb,
            verdict(m.status)
        );
    }
    render_callgrind(report, &mut out);
    render_peers(report, &mut out);
    for nd in &report.not_done {
        let _ = writeln!(out, "\nnot done: {}: {}", nd.what, nd.why);
    }
    let failures = report.failures();
    if failures.is_empty() {
        let _ = writeln!(
            out,
            "\ncorrectness: every input answered once, every batch ran all its tools"
        );
    } else {
        let _ = writeln!(out, "\ncorrectness FAILURES ({}):", failures.len());
        for f in failures.iter().take(50) {
            let _ = writeln!(out, "  {f}");
        }
        if failures.len() > 50 {
            let _ = writeln!(out, "  ... and {} more (see --json)", failures.len() - 50);
        }
    }
    out
}

/// Where the CPU went during the blast: per process, per input, and how
/// many of the machine's cores the three kept busy.
/// One scenario-4 table under `title`; nothing when there are no rows.
fn render_overhead(out: &mut String, title: &str, rows: &[OverheadRow]) {
    if rows.is_empty() {
        return;
    }
    let _ = writeln!(out, "{title}");
    let _ = writeln!(
        out,
        "{:>4} {:>6} {:>13} {:>12} {:>12} {:>12} {:>10} {:>15} {:>13} {:>6}",
        "N",
        "rounds",
        "per input us",
        "per turn us",
        "per call us",
        "reply us",
        "mock us",
        "switches/input",
        "CPU us/input",
        ""
    );
    for r in rows {
        let per_call = r
            .per_call_us
            .map_or_else(|| "-".to_owned(), |v| format!("{v:.1}"));
        let switches = r
            .switches_per_input
            .map_or_else(|| "-".to_owned(), |v| format!("{v:.1}"));
        let cpu = r
            .cpu_us_per_input
            .map_or_else(|| "-".to_owned(), |v| format!("{v:.0}"));
        let _ = writeln!(
            out,
            "{:>4} {:>6} {:>13.0} {:>12.0} {:>12} {:>12.0} {:>10.0} {:>15} {:>13} {:>6}",
            r.n,
            r.rounds,
            r.per_input_us,
            r.per_turn_us,
            per_call,
            r.median_reply_us,
            r.median_mock_us,
            switches,
            cpu,
            verdict(r.status)
        );
    }
}

/// Where the blast's slowest inputs were: its first round (every
/// session's first input, sent at once) or later.
fn blast_tail_line(t: &crate::report::BlastTail) -> String {
    let ms = |v: Option<f64>| v.map_or_else(|| "-".to_owned(), |v| format!("{v:.2} ms"));
    format!(
        "   slowest 1 %: {} inputs, {} of them a session's first; later inputs: p99 {}, max {}; first inputs: max {}",
        t.slowest_1pct,
        t.slowest_1pct_first_inputs,
        ms(t.p99_added_ms_later_inputs),
        ms(t.max_added_ms_later_inputs),
        ms(t.max_added_ms_first_inputs)
    )
}

fn blast_cpu_line(b: &BlastResult, cpus: usize) -> String {
    let c = &b.cpu;
    let process = |name: &str, s: Option<f64>, per_input: Option<f64>| match (s, per_input) {
        (Some(s), Some(ms)) => format!("{name} {s:.2} s ({ms:.2} ms/input)"),
        (Some(s), None) => format!("{name} {s:.2} s"),
        _ => format!("{name} n/a"),
    };
    let peak = match (b.serve_peak_rss_kb, b.serve_threads) {
        (Some(kb), Some(threads)) => format!(
            "\n   serve after the blast: peak RSS {:.1} MB, {threads} threads",
            kb as f64 / 1024.0
        ),
        _ => String::new(),
    };
    let overflows = match b.listen_overflows {
        Some(0) => "\n   listen-queue overflows on the machine: 0".to_owned(),
        Some(n) => format!(
            "\n   listen-queue overflows on the machine: {n} \
             (each of those clients waited a second to retry)"
        ),
        None => String::new(),
    };
    format!(
        "   CPU (user + system) over the blast: {}, {}, {}; {} cores busy of {cpus}{peak}{overflows}",
        process("serve", c.cpu_s_serve, c.cpu_ms_per_input_serve),
        process("mock", c.cpu_s_mock, c.cpu_ms_per_input_mock),
        process("bench", c.cpu_s_bench, c.cpu_ms_per_input_bench),
        c.cores_busy
            .map_or_else(|| "n/a".to_owned(), |c| format!("{c:.2}")),
    )
}

fn opt(value: Option<f64>, precision: usize, suffix: &str) -> String {
    value.map_or_else(|| "-".to_owned(), |v| format!("{v:.precision$}{suffix}"))
}

fn render_callgrind(report: &BenchReport, out: &mut String) {
    let Some(cg) = &report.callgrind else {
        return;
    };
    if cg.rows.is_empty() {
        return;
    }
    let _ = writeln!(
        out,
        "\n4b. Kernel overhead in instructions (serve under callgrind, {}; ({} - {} inputs) difference)",
        cg.valgrind.as_deref().unwrap_or("valgrind"),
        cg.rows[0].long_inputs,
        cg.rows[0].short_inputs
    );
    let _ = writeln!(
        out,
        "{:>4} {:>16} {:>16} {:>14} {:>14} {:>14} {:>6}",
        "N", "short total", "long total", "per input", "per turn", "per call", ""
    );
    for r in &cg.rows {
        let _ = writeln!(
            out,
            "{:>4} {:>16} {:>16} {:>14} {:>14} {:>14} {:>6}",
            r.n,
            r.short_instructions,
            r.long_instructions,
            opt(r.per_input, 0, ""),
            opt(r.per_turn, 0, ""),
            opt(r.per_call, 0, ""),
            verdict(r.status)
        );
        if let Some(note) = &r.note {
            let _ = writeln!(out, "     note: {note}");
        }
    }
}

fn render_peers(report: &BenchReport, out: &mut String) {
    for peer in &report.peers {
        let _ = writeln!(
            out,
            "\n6. Peer {} {} (Python {}): {}",
            peer.framework,
            peer.version.as_deref().unwrap_or("?"),
            peer.python.as_deref().unwrap_or("?"),
            peer.concurrency
        );
        for why in &peer.skipped {
            let _ = writeln!(out, "   not run: {why}");
        }
        if !peer.batch.is_empty() {
            let _ = writeln!(
                out,
                "   batch speed-up (!slowbatchN; executed = the mock's count; peak = sleeps in flight)"
            );
            let _ = writeln!(
                out,
                "{:>7} {:>9} {:>5} {:>11} {:>10} {:>8} {:>7} {:>8} {:>10} {:>9} {:>6}",
                "N",
                "executed",
                "peak",
                "parallel s",
                "serial s",
                "speedup",
                "ideal",
                "ratio",
                "HA par s",
                "peer/HA",
                ""
            );
            for r in &peer.batch {
                let _ = writeln!(
                    out,
                    "{:>7} {:>9} {:>5} {:>11.3} {:>10} {:>8} {:>6.2}x {:>8} {:>10} {:>9} {:>6}",
                    r.n,
                    r.executed,
                    r.peak_in_flight,
                    r.parallel_s,
                    opt(r.serial_s, 3, ""),
                    opt(r.speedup, 2, "x"),
                    r.ideal,
                    opt(r.ratio.map(|x| x * 100.0), 1, "%"),
                    opt(r.homeagent_parallel_s, 3, ""),
                    opt(r.time_vs_homeagent, 2, "x"),
                    verdict(r.status)
                );
            }
        }
        if !peer.overhead.is_empty() {
            let _ = writeln!(
                out,
                "   overhead (zero-delay mock, instant tools; reply - mock time, medians)"
            );
            let _ = writeln!(
                out,
                "{:>7} {:>13} {:>12} {:>12} {:>13} {:>12} {:>6}",
                "N",
                "per input us",
                "per turn us",
                "per call us",
                "input peer/HA",
                "call peer/HA",
                ""
            );
            for r in &peer.overhead {
                let _ = writeln!(
                    out,
                    "{:>7} {:>13.0} {:>12.0} {:>12} {:>13} {:>12} {:>6}",
                    r.n,
                    r.per_input_us,
                    r.per_turn_us,
                    opt(r.per_call_us, 1, ""),
                    opt(r.per_input_vs_homeagent, 2, "x"),
                    opt(r.per_call_vs_homeagent, 2, "x"),
                    verdict(r.status)
                );
            }
        }
        let notes: Vec<&String> = peer
            .batch
            .iter()
            .flat_map(|r| &r.problems)
            .chain(peer.overhead.iter().flat_map(|r| &r.problems))
            .collect();
        for note in notes.iter().take(10) {
            let _ = writeln!(out, "   {note}");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cpu::CpuUse;
    use crate::report::Counters;

    fn blast() -> BlastResult {
        BlastResult {
            sessions: 24,
            inputs_per_session: 12,
            inputs: 288,
            answered: 288,
            p50_added_ms: 1.0,
            p95_added_ms: 2.0,
            p99_added_ms: 3.0,
            tail: crate::report::BlastTail {
                slowest_1pct: 3,
                slowest_1pct_first_inputs: 2,
                p99_added_ms_later_inputs: Some(2.5),
                max_added_ms_later_inputs: Some(2.75),
                max_added_ms_first_inputs: None,
            },
            wall_s: 4.0,
            cpu: CpuUse {
                cpu_s_serve: Some(2.88),
                cpu_s_mock: Some(0.576),
                cpu_s_bench: Some(1.44),
                cpu_ms_per_input_serve: Some(10.0),
                cpu_ms_per_input_mock: Some(2.0),
                cpu_ms_per_input_bench: Some(5.0),
                cores_busy: Some(1.224),
            },
            serve_peak_rss_kb: Some(107_520),
            serve_threads: Some(15),
            listen_overflows: Some(0),
            before: Counters::default(),
            after: Counters::default(),
            status: Status::Ok,
            problems: Vec::new(),
        }
    }

    #[test]
    fn the_blast_shows_cpu_per_process_and_cores_busy() {
        assert_eq!(
            blast_cpu_line(&blast(), 2),
            "   CPU (user + system) over the blast: serve 2.88 s (10.00 ms/input), \
             mock 0.58 s (2.00 ms/input), bench 1.44 s (5.00 ms/input); 1.22 cores busy of 2\n   \
             serve after the blast: peak RSS 105.0 MB, 15 threads\n   \
             listen-queue overflows on the machine: 0"
        );
    }

    #[test]
    fn overflows_are_counted_with_what_they_cost_or_left_out() {
        let b = BlastResult {
            listen_overflows: Some(88),
            serve_peak_rss_kb: None,
            ..blast()
        };
        assert!(
            blast_cpu_line(&b, 2).ends_with(
                "2\n   listen-queue overflows on the machine: 88 \
                 (each of those clients waited a second to retry)"
            ),
            "{}",
            blast_cpu_line(&b, 2)
        );
        let b = BlastResult {
            listen_overflows: None,
            ..blast()
        };
        assert!(blast_cpu_line(&b, 2).ends_with("15 threads"));
    }

    #[test]
    fn the_blast_says_where_its_slowest_inputs_were() {
        assert_eq!(
            blast_tail_line(&blast().tail),
            "   slowest 1 %: 3 inputs, 2 of them a session's first; \
             later inputs: p99 2.50 ms, max 2.75 ms; first inputs: max -"
        );
        let value = serde_json::to_value(blast()).unwrap_or_default();
        assert_eq!(value["slowest_1pct_first_inputs"], serde_json::json!(2));
        assert_eq!(value["p99_added_ms_later_inputs"], serde_json::json!(2.5));
        assert!(value.get("tail").is_none(), "{value}");
    }

    #[test]
    fn the_cpu_fields_sit_beside_the_latencies_in_the_json() {
        let value = serde_json::to_value(blast()).unwrap_or_default();
        assert_eq!(value["p99_added_ms"], serde_json::json!(3.0));
        assert_eq!(value["cpu_s_serve"], serde_json::json!(2.88));
        assert_eq!(value["cpu_ms_per_input_mock"], serde_json::json!(2.0));
        assert_eq!(value["cores_busy"], serde_json::json!(1.224));
        assert!(value.get("cpu").is_none(), "{value}");
    }

    #[test]
    fn cpu_that_could_not_be_read_is_n_a() {
        let b = BlastResult {
            cpu: CpuUse::default(),
            serve_peak_rss_kb: None,
            listen_overflows: None,
            ..blast()
        };
        assert_eq!(
            blast_cpu_line(&b, 2),
            "   CPU (user + system) over the blast: serve n/a, mock n/a, bench n/a; n/a cores busy of 2"
        );
    }

    #[test]
    fn the_overhead_table_shows_switches_and_cpu_per_input_or_a_dash() {
        let row = |n: usize, switches: Option<f64>, cpu: Option<f64>| OverheadRow {
            n,
            rounds: 30,
            per_input_us: 1000.0,
            per_turn_us: 500.0,
            per_call_us: None,
            median_reply_us: 1200.0,
            median_mock_us: 200.0,
            switches_per_input: switches,
            cpu_us_per_input: cpu,
            status: Status::Ok,
            problems: Vec::new(),
        };
        let mut out = String::new();
        render_overhead(
            &mut out,
            "t",
            &[row(1, Some(26.48), Some(812.6)), row(8, None, None)],
        );
        let lines: Vec<&str> = out.lines().collect();
        assert!(lines[1].contains("switches/input"), "{out}");
        assert!(lines[1].contains("CPU us/input"), "{out}");
        let column = |line: &str, i: usize| line.split_whitespace().nth(i).map(str::to_owned);
        assert_eq!(column(lines[2], 7).as_deref(), Some("26.5"), "{out}");
        assert_eq!(column(lines[2], 8).as_deref(), Some("813"), "{out}");
        assert_eq!(column(lines[3], 7).as_deref(), Some("-"), "{out}");
        assert_eq!(column(lines[3], 8).as_deref(), Some("-"), "{out}");
    }
}
