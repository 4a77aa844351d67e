#![allow(clippy::unwrap_used, clippy::expect_used)] // a panic in a test is a test failure

//! The OpenAI Chat Completions codec: the request it writes, and transcript
//! tests that feed real-looking SSE bodies through the codec *and* the
//! kernel's assembler, one per quirk of the compatible servers.

use homeagent_core::{AssembledTurn, Message, StreamAssembler};
use homeagent_llm::codec::Flow;
use homeagent_llm::codec::openai::OpenAiCodec;
use homeagent_llm::framing::FrameReader;
use homeagent_llm::{ChatRequest, Endpoint, WireCodec};
use serde_json::Value;

// Split by topic to keep files short.
mod extra_content;
mod mistral_ids;
mod rendered;
mod request;
mod stream;
mod whole;

/// The JSON body the codec writes for `messages` to `base_url` (no key,
/// no tools, 100 tokens).
pub fn body_for(base_url: &str, model: &str, messages: Vec<Message>, stream: bool) -> Value {
    let request = ChatRequest {
        model: model.into(),
        messages,
        tools: vec![],
        max_tokens: 100,
        temperature: None,
        stream,
        rendered: Default::default(),
    };
    encoded(base_url, &request)
}

/// The JSON body the OpenAI codec writes for `request` to `base_url`.
pub fn encoded(base_url: &str, request: &ChatRequest) -> Value {
    OpenAiCodec
        .build_request(
            &Endpoint {
                base_url: base_url.into(),
                api_key: None,
            },
            request,
        )
        .unwrap()
        .body_json()
        .unwrap()
}

/// One `chat.completion.chunk` as OpenAI writes it, around `choice`.
pub fn chunk(choice: &str) -> String {
    format!(
        "{{\"id\":\"chatcmpl-B9MHDbslfkBeAs8l4bebGdFOJ6PeG\",\"object\":\"chat.completion.chunk\",\"created\":1741569952,\"model\":\"gpt-4o-2024-08-06\",\"system_fingerprint\":\"fp_fc9f1d7035\",\"choices\":[{choice}],\"usage\":null}}"
    )
}

/// A choice-0 entry with this `delta` and `finish_reason` (JSON text).
pub fn delta(delta: &str, finish: &str) -> String {
    chunk(&format!(
        "{{\"index\":0,\"delta\":{delta},\"logprobs\":null,\"finish_reason\":{finish}}}"
    ))
}

/// The final usage chunk sent with `stream_options.include_usage`.
pub fn usage_chunk(prompt: u64, completion: u64) -> String {
    format!(
        "{{\"id\":\"chatcmpl-B9MHDbslfkBeAs8l4bebGdFOJ6PeG\",\"object\":\"chat.completion.chunk\",\"created\":1741569952,\"model\":\"gpt-4o-2024-08-06\",\"system_fingerprint\":\"fp_fc9f1d7035\",\"choices\":[],\"usage\":{{\"prompt_tokens\":{prompt},\"completion_tokens\":{completion},\"total_tokens\":{},\"prompt_tokens_details\":{{\"cached_tokens\":0}}}}}}",
        prompt + completion
    )
}

/// An SSE body: each chunk as a `data:` event, then `data: [DONE]`.
pub fn sse(chunks: &[String]) -> String {
    let mut body = String::new();
    for c in chunks {
        body.push_str("data: ");
        body.push_str(c);
        body.push_str("\n\n");
    }
    body.push_str("data: [DONE]\n\n");
    body
}

/// Frames, decodes and assembles a streamed body; returns the turn and the
/// decoder's count of skipped frames.
pub fn run(body: &str) -> (AssembledTurn, u64) {
    let codec = OpenAiCodec;
    let mut reader = FrameReader::new(codec.framing());
    let mut frames = Vec::new();
    reader.feed(body.as_bytes(), &mut frames);
    reader.finish(&mut frames);
    let mut decoder = codec.stream_decoder();
    let mut events = Vec::new();
    for frame in &frames {
        if decoder.decode(frame, &mut events).unwrap() == Flow::Done {
            break;
        }
    }
    let mut assembler = StreamAssembler::new();
    for event in events {
        assembler.push(event);
    }
    (assembler.finish(), decoder.skipped_frames())
}

/// `(id, name, arguments)` of every call, asserting each one may run.
pub fn runnable_calls(turn: &AssembledTurn) -> Vec<(String, String, Value)> {
    turn.calls
        .iter()
        .map(|c| {
            assert_eq!(
                c.argument_error, None,
                "call {} must be runnable",
                c.call.id
            );
            (
                c.call.id.clone(),
                c.call.name.clone(),
                c.call.arguments.clone(),
            )
        })
        .collect()
}

pub fn call(id: &str, name: &str, arguments: Value) -> (String, String, Value) {
    (id.to_owned(), name.to_owned(), arguments)
}
