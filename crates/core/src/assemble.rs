//! Stream assembly: normalized fragments in, one assistant turn out.
//!
//! The rules (each one answers a bug seen in another runtime):
//! - Fragments are bucketed by `stream_index`; within a bucket, the last
//!   non-empty id and name win and argument pieces concatenate.
//! - A fragment whose index already holds a *different* id starts a new call
//!   (OpenAI-compatible Gemini endpoints put every parallel call at index 0).
//! - A fragment with no index but an id joins the call with that id; one with
//!   neither continues the most recent call.
//! - A fragment that carries nothing creates no call (no phantom call from an
//!   empty leading index-0 chunk); a call that never got a name is dropped
//!   with a diagnostic.
//! - Calls come out in ascending index order (arrival order breaks ties), so
//!   the result does not depend on how the wire interleaved them.
//! - Nothing is final until [`StreamAssembler::finish`]: a `finish_reason` of
//!   `""` mid-stream flushes nothing.

use std::collections::{HashMap, HashSet};

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::message::{AssistantMessage, ReasoningPart, ToolCall};
use crate::outcome::{ErrorReason, ToolError};
use crate::stream::{FinishReason, StreamEvent, ToolCallFragment, Usage};
use crate::validate::json_type_name;

/// Room reserved for a call's argument text when its first piece arrives.
const ARGUMENT_BUFFER_HINT: usize = 256;

/// How many bytes of unparseable arguments an error message quotes.
const QUOTED_PREFIX_BYTES: usize = 80;

/// Something the assembler noticed and corrected or dropped.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Diagnostic {
    /// A call never received a name, so it cannot be run or replayed.
    NamelessCallDropped {
        stream_index: u32,
        argument_bytes: usize,
    },
    /// The raw argument text was blank or not JSON: a sign that a codec or
    /// adapter lost the argument pieces. Never raised for `{}`.
    ArgumentsLookDropped { call_id: String, tool: String },
    /// Bare unit values (`20s`) were quoted so the arguments parse.
    ArgumentsRepaired { call_id: String, tool: String },
    /// The call arrived without an id (or with one already used in this
    /// turn) and was given this one.
    IdAssigned { call_id: String, tool: String },
}

/// One call of an assembled turn, with the reason it must not run, if any.
#[derive(Debug, Clone, PartialEq)]
pub struct AssembledCall {
    pub call: ToolCall,
    /// Set when the arguments could not be turned into an object; such a
    /// call is answered with this error and never executed.
    pub argument_error: Option<ToolError>,
}

/// The result of one streamed model turn.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct AssembledTurn {
    pub text: String,
    pub reasoning: Vec<ReasoningPart>,
    pub calls: Vec<AssembledCall>,
    pub usage: Usage,
    pub finish_reason: Option<FinishReason>,
    pub diagnostics: Vec<Diagnostic>,
}

impl AssembledTurn {
    /// The assistant message to store and replay: text once, every call.
    pub fn message(&self) -> AssistantMessage {
        AssistantMessage {
            content: self.text.clone(),
            reasoning: self.reasoning.clone(),
            tool_calls: self.calls.iter().map(|c| c.call.clone()).collect(),
        }
    }

    /// The same message as [`AssembledTurn::message`], made by moving the
    /// turn's parts instead of copying them, and the argument errors its
    /// calls still need: run them with [`crate::Executor::run_message_calls`].
    /// For a caller that stores and replays the message and runs its calls,
    /// as the agent loop does, this saves a copy of every call.
    pub fn into_message(self) -> (AssistantMessage, ArgumentErrors) {
        let mut errors = Vec::new();
        let tool_calls = self
            .calls
            .into_iter()
            .enumerate()
            .map(|(position, call)| {
                if let Some(error) = call.argument_error {
                    errors.push((position, error));
                }
                call.call
            })
            .collect();
        let message = AssistantMessage {
            content: self.text,
            reasoning: self.reasoning,
            tool_calls,
        };
        (message, ArgumentErrors(errors))
    }
}

/// The argument errors of a turn's calls, by their position in the turn,
/// kept beside the assistant message that took the calls
/// ([`AssembledTurn::into_message`]). Usually empty.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ArgumentErrors(Vec<(usize, ToolError)>);

impl ArgumentErrors {
    /// The error of the call at `position`, which must not run, if any.
    pub fn get(&self, position: usize) -> Option<&ToolError> {
        // Pushed in ascending position by `into_message`.
        let found = self.0.binary_search_by_key(&position, |(at, _)| *at);
        found.ok().map(|index| &self.0[index].1)
    }
}

#[derive(Debug)]
struct Bucket {
    index: u32,
    id: String,
    name: String,
    arguments: String,
    /// The call opened last in a turn the output limit cut: the only one
    /// that can have been cut (set by `finish`).
    may_be_cut: bool,
}

impl Bucket {
    /// Whether a fragment with this id and name opens another call rather
    /// than continuing this one: another id, or, without an id to go by,
    /// another tool's name (a call is never renamed, or it would run one
    /// tool's arguments as another tool).
    fn is_another_call(&self, id: Option<&str>, name: Option<&str>) -> bool {
        match id {
            Some(new) if !self.id.is_empty() => self.id != new,
            _ => name.is_some_and(|new| !self.name.is_empty() && self.name != new),
        }
    }

    /// Whether a fragment naming this call's own tool, with `piece` as its
    /// text, is a whole second call of that tool (sent at the same index,
    /// without an id or with the same one): this call already holds one
    /// complete object, which nothing can continue. Cheap first checks:
    /// the parse runs only when the call ends in `}` and the piece opens
    /// one, and a piece inside a string (`"a}` then `{b"`) fails it.
    fn is_whole_again(&self, name: Option<&str>, piece: &str) -> bool {
        name.is_some_and(|name| name == self.name)
            && piece.trim() != self.arguments.trim()
            && piece.trim_start().starts_with('{')
            && self.arguments.trim_end().ends_with('}')
            && serde_json::from_str::<serde::de::IgnoredAny>(&self.arguments).is_ok()
    }

    /// Whether a fragment is this whole call sent again (its id, its name
    /// and its whole text): one call, not two, and the repeat adds nothing.
    /// Two whole calls with one id and different texts are two calls
    /// ([`Bucket::is_whole_again`]); the same text without an id may be a
    /// second call (two `clock_now {}`) and is counted so.
    fn repeats(&self, id: Option<&str>, name: Option<&str>, piece: &str) -> bool {
        !self.id.is_empty()
            && id == Some(self.id.as_str())
            && name == Some(self.name.as_str())
            && !piece.trim().is_empty()
            && piece.trim() == self.arguments.trim()
    }

    fn absorb(&mut self, id: Option<String>, name: Option<String>, piece: String) {
        if let Some(id) = id {
            self.id = id;
        }
        if let Some(name) = name {
            self.name = name;
        }
        if self.arguments.is_empty() {
            // Take the codec's allocation instead of copying the first piece,
            // and make room for the pieces to come: argument text arrives a
            // few bytes at a time, and growing from a 10-byte buffer would
            // reallocate every few fragments.
            self.arguments = piece;
            self.arguments.reserve(ARGUMENT_BUFFER_HINT);
        } else {
            self.arguments.push_str(&piece);
        }
    }
}

/// Gives the argument text of calls that never got a name or an id to the
/// named call opened before them, if that call got no argument text of its
/// own; `buckets` in the order they were opened.
///
/// Some OpenAI-compatible servers send a call's name at one stream index
/// and its argument pieces at another (or each piece at a new one). Those
/// pieces open calls of their own that never get a name; dropped, they
/// left the named call blank, and a blank call runs with `{}`. A named
/// call that had argument text keeps it alone: pieces after it are another
/// call that lost its name, dropped with a diagnostic.
fn lend_orphan_pieces(buckets: Vec<Bucket>) -> Vec<Bucket> {
    let mut kept: Vec<Bucket> = Vec::with_capacity(buckets.len());
    let mut receiver: Option<usize> = None;
    for bucket in buckets {
        if !bucket.name.is_empty() {
            receiver = bucket.arguments.trim().is_empty().then_some(kept.len());
        } else if bucket.id.is_empty()
            && !bucket.arguments.is_empty()
            && let Some(to) = receiver
        {
            kept[to].arguments.push_str(&bucket.arguments);
            continue;
        }
        kept.push(bucket);
    }
    kept
}

/// Maps a stream index to the bucket receiving it. Indices are small in
/// practice, so a vector serves them; a hostile or odd server sending huge
/// indices gets a map instead of a huge allocation.
#[derive(Debug, Default)]
struct IndexTable {
    dense: Vec<Option<usize>>,
    sparse: HashMap<u32, usize>,
}

impl IndexTable {
    const DENSE_LIMIT: u32 = 1024;

    fn get(&self, index: u32) -> Option<usize> {
        if index < Self::DENSE_LIMIT {
            self.dense.get(index as usize).copied().flatten()
        } else {
            self.sparse.get(&index).copied()
        }
    }

    fn insert(&mut self, index: u32, bucket: usize) {
        if index < Self::DENSE_LIMIT {
            let slot = index as usize;
            if self.dense.len() <= slot {
                self.dense.resize(slot + 1, None);
            }
            self.dense[slot] = Some(bucket);
        } else {
            self.sparse.insert(index, bucket);
        }
    }
}

/// Accumulates one turn's stream events. Feed it with [`push`](Self::push),
/// then call [`finish`](Self::finish) when the stream has ended.
#[derive(Debug, Default)]
pub struct StreamAssembler {
    text: String,
    reasoning: Vec<ReasoningPart>,
    /// The last reasoning part is still receiving deltas.
    reasoning_open: bool,
    /// Buckets in creation order; sorted by index only at the end.
    buckets: Vec<Bucket>,
    /// For each stream index, the bucket currently receiving its fragments.
    current_at_index: IndexTable,
    /// The newest bucket of each id, for fragments without an index: a
    /// scan of every bucket per fragment made a stream of many unindexed
    /// calls quadratic. Made on the first such fragment and kept from
    /// then on, so a stream whose every fragment has an index (nearly all)
    /// pays nothing for it.
    by_id: Option<HashMap<String, usize>>,
    /// One past the highest index opened: where an unindexed call goes.
    next_free: u32,
    last: Option<usize>,
    usage: Usage,
    finish_reason: Option<FinishReason>,
}

impl StreamAssembler {
    pub fn new() -> Self {
        Self::default()
    }

    pub fn push(&mut self, event: StreamEvent) {
        match event {
            StreamEvent::TextDelta { text } => self.text.push_str(&text),
            StreamEvent::ReasoningDelta { text } => {
                if !self.reasoning_open {
                    self.reasoning.push(ReasoningPart::default());
                    self.reasoning_open = true;
                }
                if let Some(part) = self.reasoning.last_mut() {
                    part.text.push_str(&text);
                }
            }
            StreamEvent::ReasoningMetadata { metadata } => {
                if !self.reasoning_open {
                    self.reasoning.push(ReasoningPart::default());
                }
                if let Some(part) = self.reasoning.last_mut() {
                    part.metadata = Some(metadata);
                }
                self.reasoning_open = false;
            }
            StreamEvent::ToolCall(fragment) => self.push_fragment(fragment),
            StreamEvent::Usage(usage) => self.usage.merge(usage),
            StreamEvent::Finish { reason } => {
                if let Some(reason) = FinishReason::parse(&reason) {
                    self.finish_reason = Some(reason);
                }
            }
        }
    }

    /// The text streamed so far (for display while the turn is running).
    pub fn text(&self) -> &str {
        &self.text
    }

    fn push_fragment(&mut self, fragment: ToolCallFragment) {
        let ToolCallFragment {
            stream_index,
            id,
            name,
            raw_arguments,
        } = fragment;
        let id = id.filter(|s| !s.is_empty());
        let name = name.filter(|s| !s.is_empty());
        let carries_nothing = id.is_none() && name.is_none() && raw_arguments.is_empty();

        // Fast path: most fragments continue the call the previous one fed.
        if let (Some(index), Some(last)) = (stream_index, self.last) {
            let current = self.current_at_index.get(index);
            let bucket = &mut self.buckets[last];
            if current == Some(last)
                && bucket.repeats(id.as_deref(), name.as_deref(), &raw_arguments)
            {
                return;
            }
            let same_call = !bucket.is_another_call(id.as_deref(), name.as_deref())
                && !bucket.is_whole_again(name.as_deref(), &raw_arguments);
            // `current == Some(last)`: the call fed last is the one open at
            // this index (the table only maps an index to a call opened at it).
            if same_call && current == Some(last) {
                if let (Some(by_id), Some(id)) = (self.by_id.as_mut(), &id)
                    && bucket.id != *id
                {
                    by_id.insert(id.clone(), last);
                }
                bucket.absorb(id, name, raw_arguments);
                return;
            }
        }
        let target = match stream_index {
            Some(index) => match self.current_at_index.get(index) {
                Some(pos)
                    if self.buckets[pos].repeats(
                        id.as_deref(),
                        name.as_deref(),
                        &raw_arguments,
                    ) =>
                {
                    None
                }
                Some(pos) if self.buckets[pos].is_whole_again(name.as_deref(), &raw_arguments) => {
                    Some(self.open_bucket(index))
                }
                Some(pos) => {
                    if !self.buckets[pos].is_another_call(id.as_deref(), name.as_deref()) {
                        Some(pos)
                    } else if let Some(earlier) = id
                        .as_deref()
                        .and_then(|id| self.bucket_of_id(id))
                        .filter(|&earlier| self.buckets[earlier].index == index)
                    {
                        // Calls opened at one index, their pieces then
                        // interleaved: a piece joins the call its id names.
                        self.current_at_index.insert(index, earlier);
                        Some(earlier)
                    } else {
                        Some(self.open_bucket(index))
                    }
                }
                None if carries_nothing => None,
                None => Some(self.open_bucket(index)),
            },
            None => match &id {
                Some(id) => match self.bucket_of_id(id) {
                    Some(pos) => Some(pos),
                    None => Some(self.open_bucket(self.next_free)),
                },
                None => match self.last {
                    Some(pos) if !self.buckets[pos].is_another_call(None, name.as_deref()) => {
                        Some(pos)
                    }
                    None if carries_nothing => None,
                    _ => Some(self.open_bucket(self.next_free)),
                },
            },
        };
        let Some(pos) = target else { return };
        if let (Some(by_id), Some(id)) = (self.by_id.as_mut(), &id)
            && self.buckets[pos].id != *id
        {
            by_id.insert(id.clone(), pos);
        }
        self.buckets[pos].absorb(id, name, raw_arguments);
        self.last = Some(pos);
    }

    /// The newest bucket holding `id`. The map is made from the buckets on
    /// first use and kept as ids arrive; an entry gone stale (its bucket
    /// took another id since) is checked, and then the buckets are
    /// searched.
    fn bucket_of_id(&mut self, id: &str) -> Option<usize> {
        let buckets = &self.buckets;
        let by_id = self.by_id.get_or_insert_with(|| {
            buckets
                .iter()
                .enumerate()
                .filter(|(_, b)| !b.id.is_empty())
                .map(|(pos, b)| (b.id.clone(), pos))
                .collect()
        });
        match by_id.get(id) {
            Some(&pos) if self.buckets[pos].id == id => Some(pos),
            Some(_) => self.buckets.iter().rposition(|b| b.id == id),
            None => None,
        }
    }

    fn open_bucket(&mut self, index: u32) -> usize {
        self.buckets.push(Bucket {
            index,
            id: String::new(),
            name: String::new(),
            arguments: String::new(),
            may_be_cut: false,
        });
        let pos = self.buckets.len() - 1;
        self.current_at_index.insert(index, pos);
        self.next_free = self.next_free.max(index.saturating_add(1));
        pos
    }

    /// Ends the turn: orders the calls, assigns missing ids and parses every
    /// call's arguments.
    pub fn finish(self) -> AssembledTurn {
        let StreamAssembler {
            text,
            reasoning,
            mut buckets,
            usage,
            finish_reason,
            ..
        } = self;
        if buckets.iter().any(|b| b.name.is_empty()) {
            buckets = lend_orphan_pieces(buckets);
        }
        let truncated_turn = finish_reason.as_ref().is_some_and(FinishReason::cut_output);
        // Only the call opened last can have been cut: one before it had
        // ended when the next began (a zero-argument call's blank text is
        // then `{}`, not a cut).
        if truncated_turn && let Some(last) = buckets.last_mut() {
            last.may_be_cut = true;
        }
        // Stable sort: calls sharing an index keep their arrival order.
        buckets.sort_by_key(|b| b.index);
        let mut diagnostics = Vec::new();
        let mut calls: Vec<AssembledCall> = Vec::with_capacity(buckets.len());
        let mut ids: HashSet<String> = HashSet::with_capacity(buckets.len());
        // Every id the model sent is its own: a call without one is never
        // given one of them (the model's `call_0` keeps that id, and what
        // is keyed by it, a thought signature, stays on it).
        let supplied: HashSet<String> = buckets
            .iter()
            .filter(|b| !b.id.is_empty())
            .map(|b| b.id.clone())
            .collect();
        let mut next_candidate = 0usize;
        for (position, bucket) in buckets.into_iter().enumerate() {
            if bucket.name.is_empty() {
                tracing::warn!(
                    stream_index = bucket.index,
                    "dropping a streamed tool call that never received a name"
                );
                diagnostics.push(Diagnostic::NamelessCallDropped {
                    stream_index: bucket.index,
                    argument_bytes: bucket.arguments.len(),
                });
                continue;
            }
            let mut id = bucket.id;
            if id.is_empty() || ids.contains(&id) {
                id = unused_id(&ids, &supplied, position, &mut next_candidate);
                diagnostics.push(Diagnostic::IdAssigned {
                    call_id: id.clone(),
                    tool: bucket.name.clone(),
                });
            }
            let parsed = parse_arguments(&bucket.name, &bucket.arguments, bucket.may_be_cut);
            if parsed.looks_dropped {
                diagnostics.push(Diagnostic::ArgumentsLookDropped {
                    call_id: id.clone(),
                    tool: bucket.name.clone(),
                });
            }
            if parsed.repaired {
                diagnostics.push(Diagnostic::ArgumentsRepaired {
                    call_id: id.clone(),
                    tool: bucket.name.clone(),
                });
            }
            ids.insert(id.clone());
            calls.push(AssembledCall {
                call: ToolCall {
                    id,
                    name: bucket.name,
                    arguments: parsed.arguments,
                    raw_arguments: bucket.arguments,
                },
                argument_error: parsed.error,
            });
        }
        AssembledTurn {
            text,
            reasoning,
            calls,
            usage,
            finish_reason,
            diagnostics,
        }
    }
}

/// `call_<n>` for the first `n` from `position` (and past every id handed
/// out before, `next`) that neither the turn nor the model uses. Handed
/// out in rising order, so the search never goes over the same ids twice:
/// crafted ids in the way cost their own count once, not once per call.
fn unused_id(
    emitted: &HashSet<String>,
    supplied: &HashSet<String>,
    position: usize,
    next: &mut usize,
) -> String {
    let start = position.max(*next);
    let found = (start..)
        .take(emitted.len() + supplied.len() + 1)
        .map(|n| (n, format!("call_{n}")))
        .find(|(_, candidate)| !emitted.contains(candidate) && !supplied.contains(candidate));
    match found {
        Some((n, id)) => {
            *next = n + 1;
            id
        }
        None => format!("call_{position}_x"),
    }
}

/// The arguments of one call, parsed.
#[derive(Debug, Clone, PartialEq)]
pub struct ParsedArguments {
    /// Always an object: `{}` when the text could not be used.
    pub arguments: Value,
    pub error: Option<ToolError>,
    pub repaired: bool,
    /// Blank or unparseable text: the diagnostic for lost argument pieces.
    pub looks_dropped: bool,
}

/// Parses a call's raw argument text.
///
/// Blank → `{}`, unless the turn hit the output token limit: then the
/// call was cut before its arguments, and the error is `truncated`. A JSON
/// object → itself. Other JSON → `invalid_arguments`.
/// Invalid JSON gets one conservative repair (bare unit values such as `20s`
/// in value position are quoted), kept only if the result parses; otherwise
/// the error is `truncated` when the turn hit the output token limit and
/// `invalid_arguments` (which never mentions truncation) when it did not.
pub fn parse_arguments(tool: &str, raw: &str, turn_hit_length_limit: bool) -> ParsedArguments {
    let empty = || Value::Object(serde_json::Map::new());
    if raw.trim().is_empty() && turn_hit_length_limit {
        // The name came and the arguments never did: the limit cut the
        // call before them. Run with `{}`, a delete or a command would get
        // none of what the model meant to send.
        return ParsedArguments {
            arguments: empty(),
            error: Some(
                ToolError::new(
                    ErrorReason::Truncated,
                    format!(
                        "the arguments of {tool} were cut off by the output token limit (or a full context window) before any of them arrived; the call was not run"
                    ),
                )
                .with_hint(
                    "split the work into several smaller calls, or keep text before the call short; do not repeat the same call unchanged",
                ),
            ),
            repaired: false,
            looks_dropped: false,
        };
    }
    if raw.trim().is_empty() {
        return ParsedArguments {
            arguments: empty(),
            error: None,
            repaired: false,
            looks_dropped: true,
        };
    }
    let fail = |error: ToolError| ParsedArguments {
        arguments: empty(),
        error: Some(error),
        repaired: false,
        looks_dropped: true,
    };
    match serde_json::from_str::<Value>(raw) {
        Ok(value @ Value::Object(_)) => ParsedArguments {
            arguments: value,
            error: None,
            repaired: false,
            looks_dropped: false,
        },
        Ok(other) => ParsedArguments {
            looks_dropped: false,
            ..fail(
                ToolError::new(
                    ErrorReason::InvalidArguments,
                    format!(
                        "arguments of {tool} must be a JSON object, got {}; the call was not run",
                        json_type_name(&other)
                    ),
                )
                .with_hint("send the arguments as an object, for example {\"key\": \"value\"}"),
            )
        },
        Err(_) => {
            if let Some(repaired) = quote_bare_unit_values(raw)
                && let Ok(value @ Value::Object(_)) = serde_json::from_str::<Value>(&repaired)
            {
                return ParsedArguments {
                    arguments: value,
                    error: None,
                    repaired: true,
                    looks_dropped: false,
                };
            }
            if turn_hit_length_limit {
                fail(
                    ToolError::new(
                        ErrorReason::Truncated,
                        format!(
                            "the arguments of {tool} were cut off by the output token limit (or a full context window) after {} bytes; the call was not run",
                            raw.len()
                        ),
                    )
                    .with_hint(
                        "split the work into several smaller calls (for example write a large file in parts); do not repeat the same call unchanged",
                    ),
                )
            } else {
                fail(
                    ToolError::new(
                        ErrorReason::InvalidArguments,
                        format!(
                            "the arguments of {tool} are not valid JSON ({} bytes, starting with {:?}); the call was not run",
                            raw.len(),
                            prefix(raw, QUOTED_PREFIX_BYTES)
                        ),
                    )
                    .with_hint(
                        "send one JSON object with every string quoted, e.g. {\"timeout\": \"20s\"}",
                    ),
                )
            }
        }
    }
}

fn prefix(text: &str, max: usize) -> &str {
    &text[..text.floor_char_boundary(max)]
}

/// Quotes bare values like `20s`, `1.5h` or `100ms` that stand where a JSON
/// value belongs (after `:`, `[` or `,`) and end before `,`, `}` or `]`.
/// Returns `None` when there was nothing to quote. Text inside strings is
/// never touched. Scanning bytes is safe for UTF-8 input because every byte
/// this looks for is ASCII, and ASCII bytes never occur inside a multi-byte
/// character.
fn quote_bare_unit_values(raw: &str) -> Option<String> {
    let bytes = raw.as_bytes();
    let mut spans: Vec<(usize, usize)> = Vec::new();
    let mut in_string = false;
    let mut escaped = false;
    let mut prev_significant = b'\0';
    let mut i = 0;
    while i < bytes.len() {
        let c = bytes[i];
        if in_string {
            if escaped {
                escaped = false;
            } else if c == b'\\' {
                escaped = true;
            } else if c == b'"' {
                in_string = false;
                prev_significant = c;
            }
            i += 1;
            continue;
        }
        if c == b'"' {
            in_string = true;
            i += 1;
            continue;
        }
        if matches!(prev_significant, b':' | b'[' | b',') && (c.is_ascii_digit() || c == b'-') {
            let end = bytes[i..]
                .iter()
                .position(|b| matches!(b, b',' | b'}' | b']') || b.is_ascii_whitespace())
                .map_or(bytes.len(), |p| i + p);
            let closes = raw[end..].trim_start().starts_with([',', '}', ']']);
            if closes && is_number_with_unit(&raw[i..end]) {
                spans.push((i, end));
                prev_significant = b'"';
                i = end;
                continue;
            }
        }
        if !c.is_ascii_whitespace() {
            prev_significant = c;
        }
        i += 1;
    }
    if spans.is_empty() {
        return None;
    }
    let mut out = String::with_capacity(raw.len() + 2 * spans.len());
    let mut copied = 0;
    for (start, end) in spans {
        out.push_str(&raw[copied..start]);
        out.push('"');
        out.push_str(&raw[start..end]);
        out.push('"');
        copied = end;
    }
    out.push_str(&raw[copied..]);
    Some(out)
}

/// `20s`, `-3m`, `1.5h`, `100ms`: digits, at most one dot, then letters only.
fn is_number_with_unit(token: &str) -> bool {
    let digits_end = token
        .char_indices()
        .find(|(i, c)| !(c.is_ascii_digit() || *c == '.' || (*i == 0 && *c == '-')))
        .map_or(token.len(), |(i, _)| i);
    let (number, unit) = token.split_at(digits_end);
    let number = number.strip_prefix('-').unwrap_or(number);
    !number.is_empty()
        && number.starts_with(|c: char| c.is_ascii_digit())
        && number.matches('.').count() <= 1
        && !unit.is_empty()
        && unit.len() <= 3
        && unit.chars().all(|c| c.is_ascii_alphabetic())
}
