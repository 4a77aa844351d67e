//! The agent's cost of reading one streamed OpenAI tool call, for callgrind.
//!
//! The body is what `homeagent mock-llm` sends for a batch of 64 calls: a
//! role chunk, three chunks per call (the opening one with id, name and the
//! first argument piece, then two argument pieces), a finish chunk and
//! `[DONE]`, each chunk fed to the [`FrameReader`] as its own network read
//! (the mock writes one body piece per chunk), then decoded by the OpenAI
//! stream decoder, exactly as the transport's body reader does.
//!
//! Instruction counts do not depend on machine load, so the cost per call is
//! the difference between two runs, divided by the extra calls decoded:
//!
//! ```text
//! cargo build --release -p homeagent-llm --example openai_call_cost
//! valgrind --tool=callgrind --callgrind-out-file=/dev/null \
//!     target/release/examples/openai_call_cost 0     # setup only
//! valgrind --tool=callgrind --callgrind-out-file=/dev/null \
//!     target/release/examples/openai_call_cost 200   # 200 turns × 64 calls
//! ```
//!
//! (Ir(200) − Ir(0)) / (200 × 64) is the cost per call, the per-turn frames
//! (role, finish, `[DONE]`) spread over the 64 calls. Run without valgrind,
//! it prints the event count per turn, a check that every call decoded.
//!
//! With `FLOOR=1` in the environment it only parses each chunk with
//! serde_json into `IgnoredAny` (builds nothing): serde_json's own floor
//! for these bytes, the least any serde-based decoder could cost.

#![allow(clippy::unwrap_used, clippy::expect_used)] // a panic here is a failed measurement

use std::hint::black_box;

use homeagent_core::StreamEvent;
use homeagent_llm::codec::{Flow, Frame};
use homeagent_llm::framing::FrameReader;
use homeagent_llm::{Protocol, codec_for};

const CALLS: usize = 64;

// Measure with the allocator the `homeagent` binary ships with.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn chunk(delta: &str, finish: &str) -> String {
    format!(
        "data: {{\"choices\":[{{\"delta\":{delta},\"finish_reason\":{finish},\"index\":0,\"logprobs\":null}}],\
         \"created\":1796025153,\"id\":\"chatcmpl-mock1\",\"model\":\"m\",\
         \"object\":\"chat.completion.chunk\",\"system_fingerprint\":\"fp_homeagent_mock\"}}\n\n"
    )
}

/// The body pieces of one turn, as the mock writes them.
fn turn_pieces() -> Vec<String> {
    let mut pieces = vec![chunk(r#"{"content":"","role":"assistant"}"#, "null")];
    for i in 0..CALLS {
        let tag = format!("ffd{i:03}n1");
        pieces.push(chunk(
            &format!(
                r#"{{"tool_calls":[{{"function":{{"arguments":"{{\"tag\":\"","name":"demo_echo"}},"id":"call_{tag}_{i}","index":{i},"type":"function"}}]}}"#
            ),
            "null",
        ));
        pieces.push(chunk(
            &format!(
                r#"{{"tool_calls":[{{"function":{{"arguments":"done-{tag}"}},"index":{i}}}]}}"#
            ),
            "null",
        ));
        pieces.push(chunk(
            &format!(r#"{{"tool_calls":[{{"function":{{"arguments":"\"}}"}},"index":{i}}}]}}"#),
            "null",
        ));
    }
    pieces.push(chunk("{}", r#""tool_calls""#));
    pieces.push("data: [DONE]\n\n".to_owned());
    pieces
}

/// One turn through the framer and the decoder, as the body reader does it.
#[inline(never)]
fn decode_turn(pieces: &[String], events: &mut Vec<StreamEvent>) {
    let codec = codec_for(Protocol::Openai);
    let mut decoder = codec.stream_decoder();
    let mut reader = FrameReader::new(codec.framing());
    let mut frames: Vec<Frame> = Vec::new();
    'body: for piece in pieces {
        reader.feed(black_box(piece.as_bytes()), &mut frames);
        for frame in frames.drain(..) {
            if decoder.decode(&frame, events).expect("the body decodes") == Flow::Done {
                break 'body;
            }
        }
    }
}

fn main() {
    let turns: usize = std::env::args()
        .nth(1)
        .map(|n| n.parse().expect("the argument is a number of turns"))
        .unwrap_or(1);
    let pieces = turn_pieces();
    let mut events = Vec::new();
    let mut per_turn = 0;
    if std::env::var_os("FLOOR").is_some() {
        for _ in 0..turns {
            for piece in &pieces {
                let data = piece.trim().strip_prefix("data: ").unwrap();
                let _ = black_box(serde_json::from_str::<serde::de::IgnoredAny>(black_box(
                    data,
                )));
            }
        }
        return;
    }
    for _ in 0..turns {
        events.clear();
        decode_turn(&pieces, &mut events);
        per_turn = events.len();
    }
    let calls = events
        .iter()
        .filter(|e| matches!(e, StreamEvent::ToolCall(f) if f.id.is_some()))
        .count();
    println!("{turns} turns, {per_turn} events and {calls} opened calls in the last");
}
