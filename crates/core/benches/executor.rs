//! Batch executor benchmarks.
//!
//! `executor_overhead/*`: batches of 1, 8 and 64 calls of no-op parallel-safe
//! tools (each handler returns `Ok({})` at once), so the time is the kernel's:
//! planning, per-call context and hook-info copies, schema preparation, the
//! spawned task per call with its timeout and stop watch, outcome rendering,
//! events, and finalizing the assistant and tool messages. Two variants: tools
//! with no argument schema (`noop`) and tools with a small object schema that
//! the call satisfies (`noop_schema`), so argument validation is included.
//! Throughput is in calls, so criterion prints calls per second; time per call
//! is the batch time divided by the batch size. `noop_in_task` runs the same
//! no-op batches from inside a spawned runtime task, for comparison.
//!
//! `executor_sleep_batch/*`: batches of 1, 8 and 64 calls of a tool that
//! sleeps 100 ms (`tokio::time::sleep`), all measured the same way. A batch
//! of N parallel sleeps should take as long as a batch of one; the difference
//! of the medians is the cost of running N at once.
//!
//! Everything runs on a tokio multi-thread runtime with one worker per core
//! (`b.to_async(&rt)`: the batch future is driven by `block_on` on the bench
//! thread, the handlers are spawned onto the workers, as the executor does).
//!
//! Run: `cargo bench -p homeagent-core --bench executor`

use std::hint::black_box;
use std::sync::Arc;
use std::time::Duration;

use criterion::{Criterion, SamplingMode, Throughput, criterion_group, criterion_main};
use homeagent_core::assemble::AssembledCall;
use homeagent_core::{
    AssembledTurn, BatchContext, BatchMode, Executor, Registry, SerialReason, ToolCall,
    ToolContext, ToolDef,
};
use serde_json::{Map, Value, json};

const SLEEP: Duration = Duration::from_millis(100);

fn runtime() -> tokio::runtime::Runtime {
    match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(err) => panic!("cannot build the tokio runtime: {err}"),
    }
}

fn register(registry: &Registry, def: ToolDef, handler: impl homeagent_core::ToolHandler) {
    if let Err(err) = registry.register(def, handler) {
        panic!("cannot register a bench tool: {err}");
    }
}

/// A turn of `n` calls to `n` distinct tools named `{prefix}_{i}`.
fn turn(prefix: &str, n: usize, arguments: &Value) -> AssembledTurn {
    AssembledTurn {
        text: "Running the batch.".to_owned(),
        calls: (0..n)
            .map(|i| AssembledCall {
                call: ToolCall {
                    id: format!("call_{i}"),
                    name: format!("{prefix}_{i}"),
                    arguments: arguments.clone(),
                    raw_arguments: arguments.to_string(),
                },
                argument_error: None,
            })
            .collect(),
        ..AssembledTurn::default()
    }
}

fn batch_context() -> BatchContext {
    let mut extras = Map::new();
    extras.insert("agent".to_owned(), json!("bench"));
    extras.insert("channel".to_owned(), json!("console"));
    BatchContext {
        batch_id: "batch_bench".to_owned(),
        extras: extras.into(),
        ..BatchContext::default()
    }
}

/// Runs the turn once outside timing and checks that it is the batch the
/// benchmark claims to measure: the expected mode, and every call succeeded.
fn check(rt: &tokio::runtime::Runtime, executor: &Executor, turn: &AssembledTurn) {
    let result = rt.block_on(executor.run(turn, &batch_context()));
    let expected = if turn.calls.len() > 1 {
        BatchMode::Parallel
    } else {
        BatchMode::Serial {
            reason: SerialReason::SingleCall,
        }
    };
    assert_eq!(result.mode, expected, "batch mode");
    assert_eq!(result.outcomes.len(), turn.calls.len());
    for outcome in &result.outcomes {
        assert!(outcome.success, "{outcome:?}");
        assert!(outcome.warnings.is_empty(), "{outcome:?}");
    }
}

fn bench_overhead(c: &mut Criterion) {
    let rt = runtime();
    let registry = Registry::new();
    let schema = json!({
        "type": "object",
        "properties": {
            "path": {"type": "string", "description": "file to look at"},
            "limit": {"type": "integer", "minimum": 1},
            "follow": {"type": "boolean"},
        },
        "required": ["path"],
    });
    for i in 0..64 {
        register(
            &registry,
            ToolDef::new(format!("noop_{i}"), "does nothing").parallel_safe(),
            |_ctx: ToolContext| async { Ok(json!({})) },
        );
        register(
            &registry,
            ToolDef::new(format!("noop_schema_{i}"), "does nothing, with a schema")
                .with_parameters(schema.clone())
                .parallel_safe(),
            |_ctx: ToolContext| async { Ok(json!({})) },
        );
    }
    let executor = Executor::new(Arc::new(registry));
    let batch = batch_context();

    let mut group = c.benchmark_group("executor_overhead");
    for (prefix, arguments) in [
        ("noop", json!({})),
        (
            "noop_schema",
            json!({"path": "/etc/hostname", "limit": 10, "follow": true}),
        ),
    ] {
        for n in [1usize, 8, 64] {
            let turn = turn(prefix, n, &arguments);
            check(&rt, &executor, &turn);
            group.throughput(Throughput::Elements(n as u64));
            group.bench_function(format!("{prefix}/{n}"), |b| {
                b.to_async(&rt)
                    .iter(|| async { black_box(executor.run(black_box(&turn), &batch).await) });
            });
        }
    }
    // For comparison, not the goal: the same batches driven from inside a
    // runtime task, as an agent loop would run them, so the handlers are
    // spawned from a worker thread instead of from the `block_on` thread.
    let executor_in_task = executor.clone();
    let batch = Arc::new(batch);
    for n in [8usize, 64] {
        let turn = Arc::new(turn("noop", n, &json!({})));
        group.throughput(Throughput::Elements(n as u64));
        group.bench_function(format!("noop_in_task/{n}"), |b| {
            b.to_async(&rt).iter(|| {
                let (executor, turn, batch) =
                    (executor_in_task.clone(), turn.clone(), batch.clone());
                async move {
                    match tokio::spawn(async move { executor.run(&turn, &batch).await }).await {
                        Ok(result) => black_box(result),
                        Err(err) => panic!("the batch task failed: {err}"),
                    }
                }
            });
        });
    }
    group.finish();
}

fn bench_sleep(c: &mut Criterion) {
    let rt = runtime();
    let registry = Registry::new();
    for i in 0..64 {
        register(
            &registry,
            ToolDef::new(format!("sleep_{i}"), "sleeps 100 ms").parallel_safe(),
            |_ctx: ToolContext| async {
                tokio::time::sleep(SLEEP).await;
                Ok(json!({"slept_ms": 100}))
            },
        );
    }
    let executor = Executor::new(Arc::new(registry));
    let batch = batch_context();

    let mut group = c.benchmark_group("executor_sleep_batch");
    // Each iteration takes ~100 ms: few samples, flat sampling (the same
    // number of iterations per sample), so the group stays near 15 s.
    group
        .sample_size(10)
        .sampling_mode(SamplingMode::Flat)
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(3));
    for n in [1usize, 8, 64] {
        let turn = turn("sleep", n, &json!({}));
        check(&rt, &executor, &turn);
        group.bench_function(format!("{n}"), |b| {
            b.to_async(&rt)
                .iter(|| async { black_box(executor.run(black_box(&turn), &batch).await) });
        });
    }
    group.finish();
}

criterion_group!(benches, bench_overhead, bench_sleep);
criterion_main!(benches);

// Measure with the allocator the `homeagent` binary ships with.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;
