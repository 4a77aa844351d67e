//! The token estimate the context budget is counted in: never below what
//! the models' tokenizers count, for every kind of text a session holds
//! (prose in many scripts, code, JSON, ids and numbers), and each part of
//! a message counted once.
//!
//! The expected counts come from the tokenizers themselves
//! (`tests/data/token_samples/counts.json`, written by
//! `scripts/token-samples/measure.py`), not from the estimate.

use std::collections::BTreeMap;
use std::path::Path;

use homeagent_agent::context::approx_tokens;
use homeagent_agent::tokens::text_tokens;
use homeagent_core::{AssistantMessage, Message, ReasoningPart, ToolCall, ToolMessage};
use serde::Deserialize;

/// What each tokenizer counted for one sample. `claude2` is Anthropic's
/// early published tokenizer: later models' are not public, so it is kept
/// for comparison, not held to.
#[derive(Debug, Deserialize)]
struct Counted {
    cl100k: usize,
    o200k: usize,
    deepseek: usize,
    #[allow(dead_code)]
    claude2: usize,
}

fn samples() -> Vec<(String, String, usize)> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/token_samples");
    let counts: BTreeMap<String, Counted> =
        serde_json::from_str(&std::fs::read_to_string(dir.join("counts.json")).unwrap()).unwrap();
    let mut samples = Vec::new();
    for entry in std::fs::read_dir(&dir).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|e| e == "txt") {
            let name = path.file_name().unwrap().to_string_lossy().into_owned();
            let counted = counts.get(&name).unwrap_or_else(|| {
                panic!("{name} has no counts: run scripts/token-samples/measure.py")
            });
            let most = counted.cl100k.max(counted.o200k).max(counted.deepseek);
            let text = std::fs::read_to_string(&path).unwrap().trim().to_owned();
            samples.push((name, text, most));
        }
    }
    assert!(
        samples.len() >= 30,
        "the samples are missing: {}",
        samples.len()
    );
    samples
}

/// An estimate below the real count sends a request over the model's
/// window (the provider refuses it); one far above drops history the
/// model had room for. Both bounds hold for every sample.
#[test]
fn the_estimate_is_never_below_the_tokenizers_nor_far_above() {
    let mut wrong = Vec::new();
    for (name, text, most) in samples() {
        let estimate = text_tokens(&text);
        // 7/4: the estimate is allowed 75 % over the largest count.
        if estimate < most || estimate * 4 > most * 7 {
            wrong.push(format!(
                "{name}: estimated {estimate}, the tokenizers counted up to {most}"
            ));
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

fn call(id: &str, arguments: &str) -> Message {
    Message::Assistant(AssistantMessage {
        tool_calls: vec![ToolCall {
            id: id.into(),
            name: "files_list".into(),
            arguments: serde_json::from_str(arguments).unwrap(),
            raw_arguments: arguments.into(),
        }],
        ..AssistantMessage::default()
    })
}

fn result(content: &str) -> Message {
    Message::Tool(ToolMessage {
        tool_call_id: "call_1".into(),
        name: "files_list".into(),
        content: content.into(),
        success: true,
    })
}

/// A call's arguments reach the model once (the wire sends them as one
/// string), though the message keeps them twice, parsed and as streamed:
/// they cost what the same text costs as a user's message.
#[test]
fn a_calls_arguments_count_once_as_their_text() {
    let (_, json, _) = samples()
        .into_iter()
        .find(|(name, ..)| name == "json.txt")
        .unwrap();
    let as_arguments = approx_tokens(&call("call_1", &json)) - approx_tokens(&call("call_1", "{}"));
    let as_text =
        approx_tokens(&Message::user(json.as_str())) - approx_tokens(&Message::user("{}"));
    assert!(
        as_arguments.abs_diff(as_text) <= 1,
        "arguments {as_arguments} against the same text {as_text}"
    );
}

/// A tool's result is its text, not its text escaped into JSON: a result
/// costs what the same text does in a user's message.
#[test]
fn a_result_counts_as_its_text() {
    for (name, text, most) in samples() {
        let as_result = approx_tokens(&result(&text)) - approx_tokens(&result(""));
        let as_text =
            approx_tokens(&Message::user(text.as_str())) - approx_tokens(&Message::user(""));
        assert!(
            as_result.abs_diff(as_text) <= 1,
            "{name}: {as_result} against {as_text}"
        );
        let whole = approx_tokens(&result(&text));
        assert!(
            whole >= most,
            "{name}: a result of {most} tokens estimated {whole}"
        );
    }
}

/// Reasoning sent back verbatim (a redacted thinking block's data, a
/// signature) is counted, though it has no text: a provider may count it
/// within a tool loop, and an estimate that skips it undercounts.
#[test]
fn opaque_reasoning_is_counted() {
    let data = "EmwKAhgBEgy3va3pzix/LafPsn4aDFIT2Xlxh0L5L8rLVyIwxtE3rAFBa8cr3qpP".repeat(10);
    let with = |metadata: Option<serde_json::Value>| {
        approx_tokens(&Message::Assistant(AssistantMessage {
            reasoning: vec![ReasoningPart {
                text: String::new(),
                metadata,
            }],
            ..AssistantMessage::default()
        }))
    };
    let added = with(Some(serde_json::json!({ "redacted_data": data }))) - with(None);
    assert!(
        added >= data.len() / 4,
        "{added} tokens for {} bytes",
        data.len()
    );
}
