//! The issue's large sequence benchmark: 1,000 sequences × 1,000 instant
//! tool calls (10⁶ calls), each sequence loaded from its file, through the
//! gate and the kernel's executor; then the same number of calls as plain
//! kernel batches (no sequence engine), for the per-call overhead.
//!
//! ```sh
//! cargo run --release -p homeagent-seq --example seq_million [SEQUENCES] [CALLS_PER_SEQUENCE]
//! ```
//!
//! Prints wall time, per-call time for both paths and the peak RSS
//! (VmHWM). Each sequence has 10 groups of 100 `demo_echo` calls that
//! append to one array slot.

use std::sync::Arc;
use std::time::Instant;

use homeagent_core::{
    AssembledCall, AssembledTurn, BatchContext, Executor, Registry, ToolCall, ToolSource,
};
use homeagent_seq::{Caller, Engine, SeqBackend, SeqStore, parse_sequence_value};
use homeagent_tools::{AGENT_EXTRA, Approval, Gate, GatedSource, register_demo_tools};
use serde_json::{Map, Value, json};

#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn peak_rss_kib() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
}

fn sequence(name: &str, calls: usize) -> Value {
    let groups = 10.min(calls.max(1));
    let per_group = calls / groups;
    let group = |g: usize| {
        let tools: String = (0..per_group)
            .map(|i| {
                format!(
                    "{{\"tool\":\"demo_echo\",\"args\":{{\"g\":{g},\"i\":{i}}},\"as\":\"out\"}} ;"
                )
            })
            .collect::<Vec<_>>()
            .join(" ");
        json!({"name": format!("g{g}"), "in": {}, "out": {"out": "array<object>"}, "tools": tools})
    };
    json!({"name": name, "description": "bench", "groups": (0..groups).map(group).collect::<Vec<_>>()})
}

#[tokio::main(flavor = "multi_thread")]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut argv = std::env::args().skip(1);
    let sequences: usize = argv.next().map_or(Ok(1000), |a| a.parse())?;
    let calls: usize = argv.next().map_or(Ok(1000), |a| a.parse())?;

    let registry = Arc::new(Registry::new());
    register_demo_tools(&registry)?;
    let source: Arc<dyn ToolSource> = Arc::new(GatedSource::new(
        Arc::clone(&registry) as _,
        Arc::new(Gate::new([])),
        Approval::Refused,
    ));
    let executor = Arc::new(Executor::new(Arc::clone(&source)));
    let dir = std::env::temp_dir().join(format!("homeagent-seq-million-{}", std::process::id()));
    let store = Arc::new(SeqStore::new(&dir));
    for s in 0..sequences {
        let seq = parse_sequence_value(&sequence(&format!("s{s}"), calls))?;
        store.save(&seq)?;
    }
    let engine = Engine::new(SeqBackend::new(Arc::clone(&executor)), Arc::clone(&store));
    let caller = Caller::new("main");

    let started = Instant::now();
    let mut ran = 0usize;
    for s in 0..sequences {
        let report = engine
            .run_named(&format!("s{s}"), Map::new(), &caller)
            .await;
        if report.failed() {
            return Err(format!("sequence s{s} failed: {}", report.render()).into());
        }
        ran += report
            .slots
            .get("out")
            .and_then(Value::as_array)
            .map_or(0, Vec::len);
    }
    let seq_time = started.elapsed();
    let total = sequences * (calls / 10.min(calls.max(1))) * 10.min(calls.max(1));
    if ran != total {
        return Err(format!("expected {total} results, got {ran}").into());
    }

    // The same calls as plain kernel batches of the same size as a group.
    let per_group = calls / 10.min(calls.max(1));
    let mut extras = Map::new();
    extras.insert(AGENT_EXTRA.into(), json!("main"));
    let extras = std::sync::Arc::new(extras);
    let started = Instant::now();
    for b in 0..total / per_group.max(1) {
        let turn = AssembledTurn {
            calls: (0..per_group)
                .map(|i| AssembledCall {
                    call: ToolCall {
                        id: format!("c{b}_{i}"),
                        name: "demo_echo".into(),
                        arguments: json!({"g": b, "i": i}),
                        raw_arguments: String::new(),
                    },
                    argument_error: None,
                })
                .collect(),
            ..AssembledTurn::default()
        };
        let batch = BatchContext {
            batch_id: format!("b{b}"),
            extras: std::sync::Arc::clone(&extras),
            ..BatchContext::default()
        };
        let result = executor.run(&turn, &batch).await;
        if result.outcomes.iter().any(|o| !o.success) {
            return Err("a direct call failed".into());
        }
    }
    let direct_time = started.elapsed();
    let _ = std::fs::remove_dir_all(&dir);

    let per_call = |d: std::time::Duration| d.as_secs_f64() * 1e6 / total as f64;
    println!("sequences: {sequences}, calls per sequence: {calls}, calls in all: {total}");
    println!(
        "through sequences: {:.2} s, {:.2} µs per call",
        seq_time.as_secs_f64(),
        per_call(seq_time)
    );
    println!(
        "direct kernel batches of {per_group}: {:.2} s, {:.2} µs per call",
        direct_time.as_secs_f64(),
        per_call(direct_time)
    );
    println!(
        "sequence overhead per call: {:.2} µs",
        per_call(seq_time) - per_call(direct_time)
    );
    if let Some(kib) = peak_rss_kib() {
        println!("peak RSS: {:.1} MiB", kib as f64 / 1024.0);
    }
    Ok(())
}
