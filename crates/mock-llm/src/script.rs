//! The scripted model: one request's messages in, one turn of normalized
//! stream events out.
//!
//! # What it answers
//!
//! The script looks at the last user message and at what follows it:
//!
//! - **No tool message after it**: the message is searched for a trigger
//!   (see [`Trigger`]) and the script emits the tool calls or text the
//!   trigger names. Without a trigger it replies with a short text listing
//!   them.
//! - **Tool messages after it**: the batch has run, and the script answers
//!   with a text containing `executed=<n> max_in_flight=<m>` (see
//!   [`Report`]). Earlier turns of a long session may hold tool results of
//!   their own; only what follows the last user message counts.
//!
//! # How calls are streamed
//!
//! Every call is split into at least two fragments: the first carries the
//! call's id, its name and the first piece of its arguments; the others carry
//! only the `stream_index` and more argument text. Fragments of different
//! calls interleave round-robin, as real providers send parallel calls, so a
//! consumer that loses `stream_index` merges the calls and is caught. The
//! turn ends with a [`StreamEvent::Finish`] (`tool_calls`, `length` or
//! `stop`) and a [`StreamEvent::Usage`].
//!
//! # Counting what really ran
//!
//! Every batch gets a fresh nonce, and the calls that can carry one get a
//! tag `done-<nonce>-<i>` in their arguments. The demo tools return their tag
//! in their result, so the report counts the distinct tags *of that batch*
//! found in the tool results: an independent count of what executed, which a
//! kernel cannot fake by answering every call with an error or by replaying
//! the results of an older batch.

use std::collections::BTreeSet;
use std::hash::BuildHasher;
use std::sync::OnceLock;
use std::sync::atomic::{AtomicU64, Ordering};

use homeagent_core::{Message, StreamEvent, ToolCallFragment, Usage};
use serde_json::{Value, json};

/// `S` of the triggers: how long the first `demo_sleep` call of a batch
/// sleeps, in milliseconds. Call `i` sleeps `S + 5·i`.
pub const DEFAULT_TOOL_SLEEP_MS: u64 = 150;

/// The largest `N` a batch trigger accepts (and the most calls `!calls` takes).
pub const MAX_BATCH: usize = 64;

/// The largest `S` (`ScriptOptions::tool_sleep_ms`) whose batches the demo
/// tools take whole: the last call of a batch of [`MAX_BATCH`] sleeps
/// `S + 5·63` ms, and `demo_sleep` refuses more than 60 s.
pub const MAX_TOOL_SLEEP_MS: u64 = 60_000 - 5 * (MAX_BATCH as u64 - 1);

/// The three demo tools the triggers call (registered by `homeagent-tools`).
const SLEEP_TOOL: &str = "demo_sleep";
const ECHO_TOOL: &str = "demo_echo";
const NOTE_TOOL: &str = "demo_note";

/// Knobs of the script.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ScriptOptions {
    /// `S`: the base sleep of `demo_sleep` calls, in milliseconds.
    pub tool_sleep_ms: u64,
    /// Emit every call the script makes up under this name instead of the
    /// demo tool's (to aim the triggers at another tool). The calls of
    /// `!calls` keep the names they were given.
    pub tool_name: Option<String>,
}

impl Default for ScriptOptions {
    fn default() -> Self {
        ScriptOptions {
            tool_sleep_ms: DEFAULT_TOOL_SLEEP_MS,
            tool_name: None,
        }
    }
}

/// One scripted model turn.
#[derive(Debug, Clone, PartialEq)]
pub struct ScriptedTurn {
    /// The normalized stream, in the order a provider would send it.
    pub events: Vec<StreamEvent>,
    /// What the script decided, for servers that keep statistics and tests
    /// that want the nonce without digging it out of the events.
    pub reply: Reply,
}

/// What kind of turn the script produced.
#[derive(Debug, Clone, PartialEq)]
pub enum Reply {
    /// Tool calls. `nonce` is in the tag of every call that carries one.
    Batch {
        trigger: Trigger,
        nonce: String,
        calls: usize,
    },
    /// The answer after the batch's tool results came back.
    Report(Report),
    /// `!text`: plain text in several chunks.
    Text,
    /// No trigger, or a malformed one (`problem` says what was wrong): a
    /// short text listing the triggers.
    Help { problem: Option<String> },
}

/// What the script found in the tool results after the last user message.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Report {
    /// The nonce of the batch being reported on, taken from the tags in the
    /// tool-call arguments after the last user message. `None` when those
    /// calls carried no tag (for example `!calls` without one).
    pub nonce: Option<String>,
    /// Distinct tags `done-<nonce>-<i>` of that batch found in the results.
    pub executed: usize,
    /// The largest `in_flight_at_start` / `in_flight_at_end` in the results.
    pub max_in_flight: u64,
    /// Tool calls after the last user message.
    pub calls: usize,
    /// Tool messages after the last user message.
    pub results: usize,
    /// How many of them report a failure.
    pub failed: usize,
}

/// A trigger word and what it asks for.
#[derive(Debug, Clone, PartialEq)]
pub enum Trigger {
    /// `!slowbatchN`: N `demo_sleep {"ms": S + 5·i, "tag": "done-<nonce>-<i>"}` calls.
    SlowBatch(usize),
    /// `!serialbatchN`: the slow batch plus one `demo_note` call (a tool
    /// that is not parallel-safe, so the whole batch runs serially) at
    /// position N/2.
    SerialBatch(usize),
    /// `!batchN`: N instant `demo_echo {"tag": "done-<nonce>-<i>"}` calls.
    Batch(usize),
    /// `!truncate`: one call cut off mid-arguments, finish reason `length`.
    Truncate,
    /// `!badjson`: one call whose arguments are not valid JSON.
    BadJson,
    /// `!text`: plain text in several chunks.
    Text,
    /// `!cut`: text that stops mid-sentence, finish reason `length` (the
    /// output token limit).
    CutText,
    /// `!calls [{"name": ..., "arguments": {...}}, ...]`: exactly these calls
    /// as one batch.
    Calls(Vec<ScriptedCall>),
}

/// One call of a `!calls` script.
#[derive(Debug, Clone, PartialEq)]
pub struct ScriptedCall {
    pub name: String,
    /// Sent as compact JSON. A JSON *string* is sent verbatim as the raw
    /// argument text instead, so a script can send malformed arguments.
    pub arguments: Value,
}

/// Trigger words, longest first where one is a prefix of another's tail.
const KEYWORDS: [&str; 8] = [
    "serialbatch",
    "slowbatch",
    "batch",
    "truncate",
    "badjson",
    "text",
    "calls",
    "cut",
];

/// Finds the first trigger in a user message.
///
/// Triggers may stand anywhere in the text and may be followed by other
/// text (load drivers append `-<idx>-<time>` to make inputs unique, so
/// `!slowbatch4-3-17000` is `!slowbatch4`). `Ok(None)` means no trigger;
/// `Err` describes a trigger that was recognised but malformed.
pub fn parse_trigger(text: &str) -> Result<Option<Trigger>, String> {
    for (bang, _) in text.match_indices('!') {
        let rest = &text[bang + 1..];
        let Some(keyword) = KEYWORDS.iter().find(|k| rest.starts_with(*k)) else {
            continue;
        };
        let after = &rest[keyword.len()..];
        let trigger = match *keyword {
            "serialbatch" => Trigger::SerialBatch(batch_size(keyword, after)?),
            "slowbatch" => Trigger::SlowBatch(batch_size(keyword, after)?),
            "batch" => Trigger::Batch(batch_size(keyword, after)?),
            "calls" => Trigger::Calls(scripted_calls(after)?),
            word => {
                // A word trigger ends at a word boundary: `!textual` is not `!text`.
                if after.starts_with(|c: char| c.is_alphanumeric() || c == '_') {
                    continue;
                }
                match word {
                    "truncate" => Trigger::Truncate,
                    "badjson" => Trigger::BadJson,
                    "cut" => Trigger::CutText,
                    _ => Trigger::Text,
                }
            }
        };
        return Ok(Some(trigger));
    }
    Ok(None)
}

fn batch_size(keyword: &str, after: &str) -> Result<usize, String> {
    let digits_end = after
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(after.len());
    let digits = &after[..digits_end];
    let usage = format!("!{keyword}N takes a count N from 1 to {MAX_BATCH}, e.g. !{keyword}4");
    if digits.is_empty() {
        return Err(format!("!{keyword} has no count; {usage}"));
    }
    match digits.parse::<usize>() {
        Ok(n) if (1..=MAX_BATCH).contains(&n) => Ok(n),
        _ => Err(format!("!{keyword}{digits} is out of range; {usage}")),
    }
}

fn scripted_calls(after: &str) -> Result<Vec<ScriptedCall>, String> {
    let usage = r#"write !calls [{"name": "demo_echo", "arguments": {"tag": "x"}}]"#;
    // Parse one JSON value and ignore whatever text follows it.
    let value = match serde_json::Deserializer::from_str(after)
        .into_iter::<Value>()
        .next()
    {
        Some(Ok(value)) => value,
        Some(Err(err)) => {
            return Err(format!(
                "!calls is not followed by valid JSON ({err}); {usage}"
            ));
        }
        None => return Err(format!("!calls is not followed by a JSON array; {usage}")),
    };
    let Value::Array(items) = value else {
        return Err(format!("!calls takes a JSON array; {usage}"));
    };
    if items.is_empty() || items.len() > MAX_BATCH {
        return Err(format!(
            "!calls takes 1 to {MAX_BATCH} calls, got {}",
            items.len()
        ));
    }
    items
        .into_iter()
        .enumerate()
        .map(|(i, item)| {
            let name = item
                .get("name")
                .and_then(Value::as_str)
                .filter(|n| !n.is_empty())
                .ok_or_else(|| format!("!calls item {i} has no \"name\" string; {usage}"))?;
            Ok(ScriptedCall {
                name: name.to_owned(),
                arguments: item.get("arguments").cloned().unwrap_or_else(|| json!({})),
            })
        })
        .collect()
}

/// Plays the model for one request.
///
/// Pure except for the nonce: every batch draws a fresh one, so two batches
/// never share tags.
pub fn respond(messages: &[Message], opts: &ScriptOptions) -> ScriptedTurn {
    respond_sized(messages, prompt_bytes(messages), opts)
}

/// The size of a prompt of `messages` that usage figures count: the texts
/// of its messages and calls.
pub fn prompt_bytes(messages: &[Message]) -> usize {
    messages.iter().map(message_bytes).sum()
}

/// [`respond`] to `messages` whose whole prompt (perhaps longer: the
/// messages before the current turn need not be given) is `prompt_bytes`.
pub fn respond_sized(
    messages: &[Message],
    prompt_bytes: usize,
    opts: &ScriptOptions,
) -> ScriptedTurn {
    let Some(last_user) = messages
        .iter()
        .rposition(|m| matches!(m, Message::User { .. }))
    else {
        return help(None, prompt_bytes);
    };
    let after = &messages[last_user + 1..];
    if after.iter().any(|m| matches!(m, Message::Tool(_))) {
        return report(after, prompt_bytes);
    }
    let Message::User { content } = &messages[last_user] else {
        return help(None, prompt_bytes);
    };
    match parse_trigger(content) {
        Ok(Some(Trigger::Text)) => text_turn(
            "This is a plain text reply from the scripted model. It arrives in several chunks, \
             the way a real model streams its words, and asks for no tool at all.",
            Reply::Text,
            prompt_bytes,
        ),
        Ok(Some(Trigger::CutText)) => {
            let mut turn = text_turn(
                "This reply runs into the output token limit and stops in the middle of a",
                Reply::Text,
                prompt_bytes,
            );
            for event in &mut turn.events {
                if let StreamEvent::Finish { reason } = event {
                    "length".clone_into(reason);
                }
            }
            turn
        }
        Ok(Some(trigger)) => batch(trigger, opts, prompt_bytes),
        Ok(None) => help(None, prompt_bytes),
        Err(problem) => help(Some(problem), prompt_bytes),
    }
}

/// One call as the script will stream it.
struct PlannedCall {
    name: String,
    raw_arguments: String,
}

fn batch(trigger: Trigger, opts: &ScriptOptions, prompt_bytes: usize) -> ScriptedTurn {
    let nonce = fresh_nonce();
    let s = opts.tool_sleep_ms;
    let named = |default: &str| opts.tool_name.clone().unwrap_or_else(|| default.to_owned());
    let compact = |v: Value| v.to_string();
    let tag = |i: usize| format!("done-{nonce}-{i}");
    let sleeps = |n: usize| -> Vec<PlannedCall> {
        (0..n)
            .map(|i| PlannedCall {
                name: named(SLEEP_TOOL),
                raw_arguments: compact(
                    json!({"ms": s.saturating_add(5 * i as u64), "tag": tag(i)}),
                ),
            })
            .collect()
    };
    let mut finish = "tool_calls";
    let calls: Vec<PlannedCall> = match &trigger {
        Trigger::SlowBatch(n) => sleeps(*n),
        Trigger::SerialBatch(n) => {
            let mut calls = sleeps(*n);
            // No tag: the note is not one of the N counted calls.
            calls.insert(
                n / 2,
                PlannedCall {
                    name: named(NOTE_TOOL),
                    raw_arguments: compact(json!({"text": format!("note from batch {nonce}")})),
                },
            );
            calls
        }
        Trigger::Batch(n) => (0..*n)
            .map(|i| PlannedCall {
                name: named(ECHO_TOOL),
                raw_arguments: compact(json!({"tag": tag(i)})),
            })
            .collect(),
        Trigger::Truncate => {
            finish = "length";
            // Cut inside the tag string: no repair can make this parse, and
            // the prefix holds no complete tag that could be counted.
            let whole = compact(json!({"ms": s, "tag": tag(0)}));
            let cut = whole.rfind('-').unwrap_or(whole.len() / 2);
            vec![PlannedCall {
                name: named(SLEEP_TOOL),
                raw_arguments: whole[..cut].to_owned(),
            }]
        }
        Trigger::BadJson => vec![PlannedCall {
            name: named(SLEEP_TOOL),
            // Single quotes: a classic model mistake that is not JSON.
            raw_arguments: format!("{{\"ms\": {s}, \"tag\": '{}'}}", tag(0)),
        }],
        Trigger::Calls(calls) => calls
            .iter()
            .map(|c| PlannedCall {
                name: c.name.clone(),
                raw_arguments: match &c.arguments {
                    Value::String(raw) => raw.clone(),
                    other => other.to_string(),
                },
            })
            .collect(),
        Trigger::Text | Trigger::CutText => Vec::new(),
    };
    let mut events = fragments(&calls, &nonce);
    let completion_bytes = calls
        .iter()
        .map(|c| c.name.len() + c.raw_arguments.len())
        .sum();
    finish_turn(&mut events, finish, prompt_bytes, completion_bytes);
    ScriptedTurn {
        events,
        reply: Reply::Batch {
            trigger,
            nonce,
            calls: calls.len(),
        },
    }
}

/// Streams the calls: each split into two or more pieces, the pieces of
/// different calls interleaved round-robin.
fn fragments(calls: &[PlannedCall], nonce: &str) -> Vec<StreamEvent> {
    let pieces: Vec<Vec<&str>> = calls.iter().map(|c| split(&c.raw_arguments)).collect();
    let rounds = pieces.iter().map(Vec::len).max().unwrap_or(0);
    let mut events = Vec::new();
    for round in 0..rounds {
        for (i, (call, pieces)) in calls.iter().zip(&pieces).enumerate() {
            let Some(piece) = pieces.get(round) else {
                continue;
            };
            let first = round == 0;
            events.push(StreamEvent::ToolCall(ToolCallFragment {
                stream_index: u32::try_from(i).ok(),
                id: first.then(|| format!("call_{nonce}_{i}")),
                name: first.then(|| call.name.clone()),
                raw_arguments: (*piece).to_owned(),
            }));
        }
    }
    events
}

/// Splits argument text into three pieces at character boundaries (two when
/// it is shorter than three characters; pieces may then be empty).
fn split(raw: &str) -> Vec<&str> {
    let boundaries: Vec<usize> = raw
        .char_indices()
        .map(|(i, _)| i)
        .chain([raw.len()])
        .collect();
    let chars = boundaries.len() - 1;
    let parts = if chars >= 3 { 3 } else { 2 };
    let mut out = Vec::with_capacity(parts);
    let mut start = 0;
    for k in 1..=parts {
        let end = boundaries[chars * k / parts];
        out.push(&raw[start..end]);
        start = end;
    }
    out
}

fn report(after_last_user: &[Message], prompt_bytes: usize) -> ScriptedTurn {
    let report = count_results(after_last_user);
    let text = match &report.nonce {
        Some(nonce) => format!(
            "Batch {nonce} reported back: executed={} max_in_flight={} ({} tool results, {} failed).",
            report.executed, report.max_in_flight, report.results, report.failed
        ),
        None => format!(
            "The calls carried no done-tag to count: executed=0 max_in_flight={} ({} tool results, {} failed).",
            report.max_in_flight, report.results, report.failed
        ),
    };
    text_turn(&text, Reply::Report(report), prompt_bytes)
}

/// Counts what the batch after the last user message really did: a call
/// counts as executed when a successful result answering it (by its id)
/// carries the call's own tag. A failure that quotes the tag ran nothing,
/// and a result naming other calls' tags speaks only for its own call.
fn count_results(after_last_user: &[Message]) -> Report {
    let calls: Vec<&homeagent_core::ToolCall> = after_last_user
        .iter()
        .filter_map(|m| match m {
            Message::Assistant(a) => Some(a),
            _ => None,
        })
        .flat_map(|a| &a.tool_calls)
        .collect();
    let nonce = calls.iter().find_map(|call| find_nonce(&call.arguments));
    let mut report = Report {
        nonce,
        calls: calls.len(),
        ..Report::default()
    };
    // Each call's own tag, by the call's id.
    let tag_of: std::collections::HashMap<&str, String> = match &report.nonce {
        Some(nonce) => calls
            .iter()
            .filter_map(|call| {
                tag_index(&call.arguments, nonce)
                    .map(|i| (call.id.as_str(), format!("done-{nonce}-{i}")))
            })
            .collect(),
        None => Default::default(),
    };
    let mut seen = BTreeSet::new();
    for message in after_last_user {
        let Message::Tool(tool) = message else {
            continue;
        };
        report.results += 1;
        if !tool.success {
            report.failed += 1;
        } else if let Some(tag) = tag_of.get(tool.tool_call_id.as_str())
            && carries(&tool.content, tag)
        {
            seen.insert(tag.clone());
        }
        if let Ok(Value::Object(map)) = serde_json::from_str::<Value>(&tool.content) {
            for key in ["in_flight_at_start", "in_flight_at_end"] {
                if let Some(n) = map.get(key).and_then(Value::as_u64) {
                    report.max_in_flight = report.max_in_flight.max(n);
                }
            }
        }
    }
    report.executed = seen.len();
    report
}

/// The index `i` of the first `done-<nonce>-<i>` tag in the value.
fn tag_index(value: &Value, nonce: &str) -> Option<u64> {
    match value {
        Value::String(s) => s
            .strip_prefix("done-")?
            .strip_prefix(nonce)?
            .strip_prefix('-')
            .filter(|i| !i.is_empty() && i.bytes().all(|b| b.is_ascii_digit()))?
            .parse()
            .ok(),
        Value::Array(items) => items.iter().find_map(|item| tag_index(item, nonce)),
        Value::Object(map) => map.values().find_map(|item| tag_index(item, nonce)),
        _ => None,
    }
}

/// Whether `text` holds `tag` whole (not as the start of a longer index).
fn carries(text: &str, tag: &str) -> bool {
    text.match_indices(tag).any(|(at, _)| {
        !text[at + tag.len()..]
            .bytes()
            .next()
            .is_some_and(|b| b.is_ascii_digit())
    })
}

/// The nonce of the first `done-<nonce>-<i>` tag anywhere in the value.
fn find_nonce(value: &Value) -> Option<String> {
    match value {
        Value::String(s) => {
            let (nonce, index) = s.strip_prefix("done-")?.rsplit_once('-')?;
            let valid =
                !nonce.is_empty() && !index.is_empty() && index.bytes().all(|b| b.is_ascii_digit());
            valid.then(|| nonce.to_owned())
        }
        Value::Array(items) => items.iter().find_map(find_nonce),
        Value::Object(map) => map.values().find_map(find_nonce),
        _ => None,
    }
}

fn help(problem: Option<String>, prompt_bytes: usize) -> ScriptedTurn {
    let mut text = String::new();
    if let Some(problem) = &problem {
        text.push_str(problem);
        text.push_str(". ");
    }
    text.push_str(
        "I am HomeAgent's scripted mock model. Send one of: \
         !slowbatchN (N demo_sleep calls, N from 1 to 64), \
         !serialbatchN (the same plus one serial demo_note call), \
         !batchN (N demo_echo calls), \
         !truncate (a call cut off by the token limit), \
         !badjson (a call with malformed arguments), \
         !text (plain text), \
         !cut (text cut off by the token limit), \
         !calls [{\"name\": ..., \"arguments\": {...}}] (exactly those calls).",
    );
    text_turn(&text, Reply::Help { problem }, prompt_bytes)
}

/// A text-only turn, streamed a few words per chunk.
fn text_turn(text: &str, reply: Reply, prompt_bytes: usize) -> ScriptedTurn {
    let mut events = Vec::new();
    let words: Vec<&str> = text.split_inclusive(' ').collect();
    for chunk in words.chunks(4) {
        events.push(StreamEvent::TextDelta {
            text: chunk.concat(),
        });
    }
    finish_turn(&mut events, "stop", prompt_bytes, text.len());
    ScriptedTurn { events, reply }
}

fn finish_turn(
    events: &mut Vec<StreamEvent>,
    reason: &str,
    prompt_bytes: usize,
    completion_bytes: usize,
) {
    events.push(StreamEvent::Finish {
        reason: reason.to_owned(),
    });
    // Roughly four bytes per token; the numbers only need to be plausible
    // and non-zero so usage accounting can be tested.
    let tokens = |bytes: usize| u64::try_from(bytes.div_ceil(4).max(1)).unwrap_or(u64::MAX);
    let (prompt_tokens, completion_tokens) = (tokens(prompt_bytes), tokens(completion_bytes));
    events.push(StreamEvent::Usage(Usage {
        prompt_tokens,
        completion_tokens,
        total_tokens: prompt_tokens + completion_tokens,
    }));
}

pub(crate) fn message_bytes(message: &Message) -> usize {
    match message {
        Message::System { content } | Message::User { content } => content.len(),
        Message::Assistant(a) => {
            a.content.len()
                + a.tool_calls
                    .iter()
                    .map(|c| c.name.len() + c.raw_arguments.len())
                    .sum::<usize>()
        }
        Message::Tool(t) => t.content.len(),
    }
}

/// A nonce unique within the process (a counter) and, with high
/// probability, across processes (a random per-process prefix), so a
/// restarted mock never reuses the tags of a batch still in a history.
/// Hex digits and `n` only: it never contains the `-` that delimits tags.
fn fresh_nonce() -> String {
    static PREFIX: OnceLock<u64> = OnceLock::new();
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    // std's `RandomState` is seeded randomly per process: randomness without
    // a dependency.
    let prefix = *PREFIX.get_or_init(|| {
        std::collections::hash_map::RandomState::new().hash_one(std::process::id()) & 0xff_ffff
    });
    let n = COUNTER.fetch_add(1, Ordering::Relaxed) + 1;
    format!("{prefix:06x}n{n}")
}

#[cfg(test)]
mod tests;
