//! Sequence benchmarks (issue 5): parsing a 1,000-group sequence, and
//! running 200 groups × 5 instant tools through the gate and the executor.
//!
//! ```sh
//! cargo bench -p homeagent-seq --bench seq
//! ```

use std::sync::Arc;

use criterion::{Criterion, criterion_group, criterion_main};
use homeagent_core::{Executor, Registry, ToolSource};
use homeagent_seq::{Caller, Engine, SeqBackend, SeqStore, parse_sequence, parse_sequence_value};
use homeagent_tools::{Approval, Gate, GatedSource, register_demo_tools};
use serde_json::{Map, Value, json};

#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn sequence(groups: usize, tools_per_group: usize) -> Value {
    let group = |g: usize| {
        let tools: String = (0..tools_per_group)
            .map(|i| {
                format!(
                    "{{\"tool\":\"demo_echo\",\"args\":{{\"host\":\"$args.host\",\"i\":{i}}},\"as\":\"out{g}\"}} ;"
                )
            })
            .collect::<Vec<_>>()
            .join(" ");
        json!({
            "name": format!("g{g}"),
            "description": "five echoes",
            "in": {"host": "string"},
            "out": {format!("out{g}"): "array<object>"},
            "when": "$args.host != \"\"",
            "tools": tools,
        })
    };
    json!({"name": "bench", "description": "bench", "groups": (0..groups).map(group).collect::<Vec<_>>()})
}

fn parse(c: &mut Criterion) {
    let text = sequence(1_000, 5).to_string();
    c.bench_function("parse_1000_groups", |b| {
        b.iter(|| parse_sequence(std::hint::black_box(&text)).map(|s| s.groups.len()))
    });
}

fn run(c: &mut Criterion) {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap_or_else(|e| panic!("tokio runtime: {e}"));
    let registry = Arc::new(Registry::new());
    register_demo_tools(&registry).unwrap_or_else(|e| panic!("{e}"));
    let source: Arc<dyn ToolSource> = Arc::new(GatedSource::new(
        Arc::clone(&registry) as _,
        Arc::new(Gate::new([])),
        Approval::Refused,
    ));
    let dir = std::env::temp_dir().join(format!("homeagent-seq-bench-{}", std::process::id()));
    let store = Arc::new(SeqStore::new(&dir));
    let engine = Engine::new(SeqBackend::new(Arc::new(Executor::new(source))), store);
    let seq = parse_sequence_value(&sequence(200, 5)).unwrap_or_else(|e| panic!("{e}"));
    let caller = Caller::new("main");
    let mut args = Map::new();
    args.insert("host".into(), json!("nas"));
    c.bench_function("run_200_groups_x_5_tools", |b| {
        b.to_async(&runtime).iter(|| async {
            let report = engine.run_sequence(&seq, args.clone(), &caller).await;
            assert!(!report.failed());
            report.groups.len()
        })
    });
    let _ = std::fs::remove_dir_all(&dir);
}

criterion_group! {
    name = benches;
    config = Criterion::default().sample_size(20);
    targets = parse, run
}
criterion_main!(benches);
