//! Throughput of the stream assembler on one turn of 64 interleaved tool calls.
//!
//! The stream looks like a real SSE turn from an OpenAI-style endpoint: each
//! call opens with a fragment carrying its index, id and name and no argument
//! text, then its argument JSON arrives in pieces of 4–16 bytes that carry only
//! the index. The 64 calls' fragments are interleaved at random (seeded, so
//! every run sees the same stream). The turn ends with a usage report and
//! `finish_reason: tool_calls`.
//!
//! What is timed: `StreamAssembler::new()`, one `push` per event (each event
//! moved in, as a codec hands it over) and `finish()` (ordering, id checks and
//! parsing the 64 argument objects with serde_json). The assembled turn is
//! dropped outside the timed region (`iter_batched`). Building the events is
//! not timed: each iteration gets a fresh clone of a prebuilt vector from the
//! untimed setup closure. `clone_events_only` times that clone by itself so
//! the report can show how it compares.
//!
//! Throughput is bytes of argument text across all fragments (ids, names and
//! the enum framing are not counted).
//!
//! Run: `cargo bench -p homeagent-core --bench assembler`

use std::hint::black_box;

use criterion::{BatchSize, Criterion, Throughput, criterion_group, criterion_main};
use homeagent_core::{StreamAssembler, StreamEvent, ToolCallFragment, Usage};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use serde_json::{Value, json};

const CALLS: usize = 64;
const SEED: u64 = 0x00A5_5E4B_1E25;

/// Realistic argument objects for the kinds of tools a home agent calls:
/// short lookups, shell commands, nested device state, and long file writes
/// with escapes and non-ASCII text.
fn arguments_for(i: usize, rng: &mut SmallRng) -> Value {
    match i % 6 {
        0 => json!({
            "path": format!("/home/user/projects/homeagent/crates/core/src/module_{i}.rs"),
            "offset": rng.random_range(0..2000),
            "limit": 200,
        }),
        1 => {
            let lines: Vec<String> = (0..rng.random_range(20..60))
                .map(|l| {
                    format!(
                        "    let value_{l} = compute(\"input {l}\", {l}); // naïve café ✓ {}",
                        "x".repeat(l % 7)
                    )
                })
                .collect();
            json!({
                "path": format!("/home/user/notes/draft_{i}.rs"),
                "content": format!("fn main() {{\n{}\n}}\n", lines.join("\n")),
                "create_dirs": true,
            })
        }
        2 => json!({
            "command": format!("cargo test -p homeagent-core --test batch_{i} -- --nocapture --test-threads=1"),
            "cwd": "/home/user/projects/homeagent",
            "timeout_ms": 120_000,
            "env": {"RUST_LOG": "homeagent_core=debug", "RUST_BACKTRACE": "1"},
        }),
        3 => json!({
            "query": format!("tokio select biased cancellation safety example {i}"),
            "max_results": rng.random_range(3..10),
            "sites": ["docs.rs", "github.com", "users.rust-lang.org"],
            "fresh": false,
        }),
        4 => json!({
            "device_id": format!("living_room_lamp_{i}"),
            "state": {
                "on": true,
                "brightness": rng.random_range(0..100) as f64 / 100.0,
                "color_temp_k": 2700,
                "transition": {"duration_ms": 400, "curve": "ease-in-out"},
            },
        }),
        _ => json!({
            "channel": "console",
            "text": format!(
                "Voilà — step {i} is done. Résumé: 3 files changed, 0 errors; \"quoted\" and \\ escaped text, tab\there, 日本語 too."
            ),
        }),
    }
}

/// Splits `text` into pieces of 4–16 bytes, moving a cut back to the
/// previous char boundary when it would split a character.
fn split_fragments(text: &str, rng: &mut SmallRng) -> Vec<String> {
    let mut out = Vec::new();
    let mut start = 0;
    while start < text.len() {
        let mut end = (start + rng.random_range(4..=16)).min(text.len());
        while !text.is_char_boundary(end) {
            end -= 1;
        }
        out.push(text[start..end].to_owned());
        start = end;
    }
    out
}

struct Stream {
    events: Vec<StreamEvent>,
    argument_bytes: usize,
    fragments: usize,
    expected: Vec<(String, String, Value)>,
}

fn build_stream() -> Stream {
    let mut rng = SmallRng::seed_from_u64(SEED);
    let mut expected = Vec::with_capacity(CALLS);
    let mut queues: Vec<std::collections::VecDeque<StreamEvent>> = Vec::with_capacity(CALLS);
    let mut argument_bytes = 0;
    let mut fragments = 0;
    for i in 0..CALLS {
        let args = arguments_for(i, &mut rng);
        let text = args.to_string();
        argument_bytes += text.len();
        let id = format!("call_{i:02}_{:08x}", rng.random::<u32>());
        let name = [
            "read_file",
            "write_file",
            "cmd_run",
            "web_search",
            "device_set",
            "output_send",
        ][i % 6];
        let index = Some(u32::try_from(i).unwrap_or(u32::MAX));
        let mut queue = std::collections::VecDeque::new();
        queue.push_back(StreamEvent::ToolCall(ToolCallFragment {
            stream_index: index,
            id: Some(id.clone()),
            name: Some(name.to_owned()),
            raw_arguments: String::new(),
        }));
        for piece in split_fragments(&text, &mut rng) {
            queue.push_back(StreamEvent::ToolCall(ToolCallFragment {
                stream_index: index,
                id: None,
                name: None,
                raw_arguments: piece,
            }));
        }
        fragments += queue.len();
        queues.push(queue);
        expected.push((id, name.to_owned(), args));
    }
    // Random interleaving that keeps each call's own fragments in order. The
    // first fragment of every call is still emitted before its argument
    // pieces, because it is at the front of that call's queue.
    let mut events = Vec::with_capacity(fragments + 2);
    let mut live: Vec<usize> = (0..CALLS).collect();
    while !live.is_empty() {
        let pick = rng.random_range(0..live.len());
        let q = live[pick];
        match queues[q].pop_front() {
            Some(event) => events.push(event),
            None => {
                live.swap_remove(pick);
            }
        }
    }
    events.push(StreamEvent::Usage(Usage {
        prompt_tokens: 12_000,
        completion_tokens: 9_000,
        total_tokens: 21_000,
    }));
    events.push(StreamEvent::Finish {
        reason: "tool_calls".to_owned(),
    });
    Stream {
        events,
        argument_bytes,
        fragments,
        expected,
    }
}

fn assemble(events: Vec<StreamEvent>) -> homeagent_core::AssembledTurn {
    let mut asm = StreamAssembler::new();
    for event in events {
        asm.push(event);
    }
    asm.finish()
}

/// The benchmark measures the real thing only if the stream assembles
/// correctly: check it once before timing.
fn check(stream: &Stream) {
    let turn = assemble(stream.events.clone());
    assert_eq!(turn.calls.len(), CALLS, "every call assembled");
    assert!(turn.diagnostics.is_empty(), "{:?}", turn.diagnostics);
    for (call, (id, name, args)) in turn.calls.iter().zip(&stream.expected) {
        assert!(call.argument_error.is_none(), "{:?}", call.argument_error);
        assert_eq!(&call.call.id, id);
        assert_eq!(&call.call.name, name);
        assert_eq!(&call.call.arguments, args);
    }
}

fn bench_assembler(c: &mut Criterion) {
    let stream = build_stream();
    check(&stream);
    eprintln!(
        "assembler stream: {CALLS} calls, {} events ({} tool-call fragments), {} argument bytes, {:.1} bytes per argument fragment",
        stream.events.len(),
        stream.fragments,
        stream.argument_bytes,
        stream.argument_bytes as f64 / (stream.fragments - CALLS) as f64,
    );

    let mut group = c.benchmark_group("assembler");
    group.throughput(Throughput::Bytes(stream.argument_bytes as u64));
    group.bench_function("push_finish_64_interleaved_calls", |b| {
        b.iter_batched(
            || stream.events.clone(),
            |events| assemble(black_box(events)),
            // One fresh clone right before each timed run: a codec pushes each
            // fragment just after decoding it, while it is still in cache.
            BatchSize::PerIteration,
        );
    });
    // The same work on inputs prepared long before (cold in cache), for
    // comparison: what a pipeline that buffers whole responses would see.
    group.bench_function("push_finish_64_interleaved_calls_cold_input", |b| {
        b.iter_batched(
            || stream.events.clone(),
            |events| assemble(black_box(events)),
            BatchSize::LargeInput,
        );
    });
    // Not the goal: what the untimed setup above costs, for comparison.
    group.bench_function("clone_events_only", |b| {
        b.iter(|| black_box(&stream.events).clone());
    });
    group.finish();
}

criterion_group!(benches, bench_assembler);
criterion_main!(benches);

// Measure with the allocator the `homeagent` binary ships with.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;
