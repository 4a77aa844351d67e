//! Decode + assemble throughput per protocol: a streamed body of one turn
//! with 64 tool calls, framed, decoded by the protocol's codec and assembled
//! by the kernel, measured in bytes of body per second.
//!
//! The bodies are generated here in each wire's real shape (OpenAI chunks with
//! `index`, Anthropic `input_json_delta` events with block indexes, Gemini
//! and Ollama whole calls). Streaming wires carry each call's argument text in
//! pieces of 4–16 bytes, interleaved across calls as parallel calls arrive.
//!
//! A second group puts the Lua adapter path beside the native one, per
//! chunk: the bundled `openai.lua` and `anthropic.lua` decode the OpenAI and
//! Anthropic bodies through [`LuaCodec`] with the fallback to the native
//! decoder switched off, so every fragment comes from the Lua code. The
//! throughput there counts chunks (SSE frames), so criterion's time per
//! iteration divided by the chunk count is the cost per chunk.
//!
//! Run: `cargo bench -p homeagent-llm --bench decode`
//! (quicker, noisier: `... --bench decode -- --measurement-time 3 --warm-up-time 1`)

use std::hint::black_box;

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use homeagent_core::StreamAssembler;
use std::sync::Arc;

use homeagent_llm::codec::{Framing, decode_stream_body};
use homeagent_llm::framing::FrameReader;
use homeagent_llm::{LuaAdapter, LuaCodec, Protocol, WireCodec, codec_for};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use serde_json::{Value, json};

const CALLS: usize = 64;
const SEED: u64 = 0x0DEC_0DE5;

fn arguments(i: usize) -> Value {
    match i % 4 {
        0 => {
            json!({"path": format!("/home/user/projects/homeagent/src/module_{i}.rs"), "offset": i * 10, "limit": 200})
        }
        1 => {
            json!({"command": format!("grep -rn \"fn main\" crates/{i} --include=*.rs"), "timeout": "20s"})
        }
        2 => {
            json!({"device_id": format!("lamp_{i}"), "state": {"on": true, "brightness": 0.4, "note": "salle à manger ✓"}})
        }
        _ => {
            json!({"channel": "console", "text": format!("Step {i} done: \"quoted\", tab\there, 日本語. {}", "x".repeat(i % 40))})
        }
    }
}

/// Argument texts split into pieces, interleaved across calls.
fn interleaved_pieces(rng: &mut SmallRng) -> Vec<(usize, String)> {
    let mut queues: Vec<std::collections::VecDeque<String>> = (0..CALLS)
        .map(|i| {
            let text = arguments(i).to_string();
            let mut pieces = std::collections::VecDeque::new();
            let mut start = 0;
            while start < text.len() {
                let mut end = (start + rng.random_range(4..=16)).min(text.len());
                while !text.is_char_boundary(end) {
                    end -= 1;
                }
                pieces.push_back(text[start..end].to_owned());
                start = end;
            }
            pieces
        })
        .collect();
    let mut out = Vec::new();
    while queues.iter().any(|q| !q.is_empty()) {
        let live: Vec<usize> = (0..CALLS).filter(|i| !queues[*i].is_empty()).collect();
        let pick = live[rng.random_range(0..live.len())];
        if let Some(piece) = queues[pick].pop_front() {
            out.push((pick, piece));
        }
    }
    out
}

fn sse(event: Option<&str>, data: &Value) -> String {
    match event {
        Some(e) => format!("event: {e}\ndata: {data}\n\n"),
        None => format!("data: {data}\n\n"),
    }
}

fn openai_body(rng: &mut SmallRng) -> String {
    let chunk = |delta: Value, finish: Value| {
        json!({"id": "chatcmpl-9x", "object": "chat.completion.chunk", "created": 1_764_460_800, "model": "gpt-4.1",
               "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]})
    };
    let mut body = String::new();
    for i in 0..CALLS {
        let open = json!({"tool_calls": [{"index": i, "id": format!("call_{i:04}"), "type": "function",
                                          "function": {"name": "files_read", "arguments": ""}}]});
        body.push_str(&sse(None, &chunk(open, Value::Null)));
    }
    for (i, piece) in interleaved_pieces(rng) {
        let delta = json!({"tool_calls": [{"index": i, "function": {"arguments": piece}}]});
        body.push_str(&sse(None, &chunk(delta, Value::Null)));
    }
    body.push_str(&sse(None, &chunk(json!({}), json!("tool_calls"))));
    body.push_str("data: [DONE]\n\n");
    body
}

fn anthropic_body(rng: &mut SmallRng) -> String {
    let mut body = sse(
        Some("message_start"),
        &json!({"type": "message_start", "message": {"id": "msg_01", "type": "message",
        "role": "assistant", "content": [], "model": "claude", "usage": {"input_tokens": 900, "output_tokens": 1}}}),
    );
    for i in 0..CALLS {
        body.push_str(&sse(Some("content_block_start"), &json!({"type": "content_block_start", "index": i,
            "content_block": {"type": "tool_use", "id": format!("toolu_{i:04}"), "name": "files_read", "input": {}}})));
    }
    for (i, piece) in interleaved_pieces(rng) {
        body.push_str(&sse(
            Some("content_block_delta"),
            &json!({"type": "content_block_delta", "index": i,
            "delta": {"type": "input_json_delta", "partial_json": piece}}),
        ));
    }
    for i in 0..CALLS {
        body.push_str(&sse(
            Some("content_block_stop"),
            &json!({"type": "content_block_stop", "index": i}),
        ));
    }
    body.push_str(&sse(Some("message_delta"), &json!({"type": "message_delta", "delta": {"stop_reason": "tool_use"}, "usage": {"output_tokens": 4000}})));
    body.push_str(&sse(Some("message_stop"), &json!({"type": "message_stop"})));
    body
}

fn gemini_body() -> String {
    let mut body = String::new();
    for pair in (0..CALLS).collect::<Vec<_>>().chunks(2) {
        let parts: Vec<Value> = pair
            .iter()
            .map(|i| json!({"functionCall": {"name": "files_read", "args": arguments(*i)}}))
            .collect();
        body.push_str(&sse(
            None,
            &json!({"candidates": [{"content": {"role": "model", "parts": parts}, "index": 0}]}),
        ));
    }
    body.push_str(&sse(None, &json!({"candidates": [{"content": {"role": "model", "parts": [{"text": ""}]}, "finishReason": "STOP", "index": 0}],
        "usageMetadata": {"promptTokenCount": 900, "candidatesTokenCount": 4000, "totalTokenCount": 4900}})));
    body
}

fn ollama_body() -> String {
    let mut body = String::new();
    for pair in (0..CALLS).collect::<Vec<_>>().chunks(2) {
        let calls: Vec<Value> = pair
            .iter()
            .map(|i| json!({"function": {"name": "files_read", "arguments": arguments(*i)}}))
            .collect();
        body.push_str(
            &json!({"model": "qwen3", "created_at": "2026-11-30T00:00:00Z",
            "message": {"role": "assistant", "content": "", "tool_calls": calls}, "done": false})
            .to_string(),
        );
        body.push('\n');
    }
    body.push_str(&json!({"model": "qwen3", "created_at": "2026-11-30T00:00:01Z", "message": {"role": "assistant", "content": ""},
        "done": true, "done_reason": "stop", "prompt_eval_count": 900, "eval_count": 4000}).to_string());
    body.push('\n');
    body
}

fn decode_and_assemble(protocol: Protocol, body: &[u8]) -> homeagent_core::AssembledTurn {
    decode_and_assemble_with(codec_for(protocol).as_ref(), body)
}

fn decode_and_assemble_with(codec: &dyn WireCodec, body: &[u8]) -> homeagent_core::AssembledTurn {
    let mut asm = StreamAssembler::new();
    match decode_stream_body(codec, body) {
        Ok(events) => {
            for event in events {
                asm.push(event);
            }
        }
        Err(e) => panic!("{:?} body did not decode: {e}", codec.protocol()),
    }
    asm.finish()
}

/// Every call must come out whole, with exactly the encoded arguments.
fn check_turn(label: &str, turn: &homeagent_core::AssembledTurn) {
    assert_eq!(turn.calls.len(), CALLS, "{label}");
    for (i, call) in turn.calls.iter().enumerate() {
        assert!(call.argument_error.is_none(), "{label} call {i}");
        assert_eq!(call.call.arguments, arguments(i), "{label} call {i}");
    }
}

/// How many SSE frames (chunks) a body holds.
fn sse_chunks(body: &str) -> u64 {
    let mut frames = Vec::new();
    let mut reader = FrameReader::new(Framing::Sse);
    reader.feed(body.as_bytes(), &mut frames);
    reader.finish(&mut frames);
    frames.len() as u64
}

/// A bundled adapter as a codec that never falls back to the native decoder.
fn strict_lua(name: &str) -> LuaCodec {
    let adapter = match LuaAdapter::bundled(name) {
        Some(Ok(adapter)) => adapter,
        Some(Err(e)) => panic!("bundled {name}.lua does not load: {e}"),
        None => panic!("no bundled adapter {name}"),
    };
    LuaCodec::new(Arc::new(adapter)).with_fallback(false)
}

/// Native and Lua decoding (plus assembly) of the same SSE bodies, per chunk.
fn bench_lua_per_chunk(c: &mut Criterion) {
    let mut rng = SmallRng::seed_from_u64(SEED);
    let bodies = [
        ("openai", Protocol::Openai, openai_body(&mut rng)),
        ("anthropic", Protocol::Anthropic, anthropic_body(&mut rng)),
    ];
    let mut group = c.benchmark_group("per_chunk_native_vs_lua");
    // The Lua path takes tens of milliseconds per body: fewer samples keep
    // the run short, at the price of a wider interval.
    group.sample_size(10);
    for (name, protocol, body) in &bodies {
        let chunks = sse_chunks(body);
        let lua = strict_lua(name);
        check_turn(
            &format!("{name}.lua"),
            &decode_and_assemble_with(&lua, body.as_bytes()),
        );
        eprintln!("{name}: {chunks} chunks, {} body bytes", body.len());
        group.throughput(Throughput::Elements(chunks));
        group.bench_function(format!("{name}/native"), |b| {
            b.iter(|| decode_and_assemble(*protocol, black_box(body.as_bytes())));
        });
        group.bench_function(format!("{name}/lua"), |b| {
            b.iter(|| decode_and_assemble_with(&lua, black_box(body.as_bytes())));
        });
    }
    group.finish();
}

fn bench_decode(c: &mut Criterion) {
    let mut rng = SmallRng::seed_from_u64(SEED);
    let bodies = [
        (Protocol::Openai, openai_body(&mut rng)),
        (Protocol::Anthropic, anthropic_body(&mut rng)),
        (Protocol::Gemini, gemini_body()),
        (Protocol::Ollama, ollama_body()),
    ];
    let mut group = c.benchmark_group("decode_assemble_64_calls");
    for (protocol, body) in &bodies {
        // Measure the real thing only: every call must come out whole.
        check_turn(
            protocol.as_str(),
            &decode_and_assemble(*protocol, body.as_bytes()),
        );
        eprintln!("{protocol:?}: {} body bytes", body.len());
        group.throughput(Throughput::Bytes(body.len() as u64));
        group.bench_function(protocol.as_str(), |b| {
            b.iter(|| decode_and_assemble(*protocol, black_box(body.as_bytes())));
        });
    }
    group.finish();
}

criterion_group!(benches, bench_decode, bench_lua_per_chunk);
criterion_main!(benches);

// Measure with the allocator the `homeagent` binary ships with.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;
