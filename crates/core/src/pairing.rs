//! The pairing check that runs before every model request.
//!
//! Providers reject a history in which a tool call has no result, a result
//! answers no call, or an id is used twice; worse, some accept it and pair
//! results with the wrong calls. The rule checked here is the strictest any
//! provider applies: after an assistant message with calls comes a block of
//! tool messages answering each of its ids exactly once, and nothing else
//! until that block is complete.

use std::collections::{HashMap, HashSet};

/// The maps here hold call ids, built again for every request and turn:
/// SipHash (std's default) was most of what they cost.
type FastState = foldhash::fast::RandomState;

use crate::message::Message;

/// A history that must not be sent. Each variant names the message index.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PairingError {
    #[error(
        "tool call {call_id} (message {message}) has no tool result before the next non-tool message"
    )]
    MissingResult { call_id: String, message: usize },
    #[error(
        "tool message {message} answers {call_id}, which no preceding assistant message called"
    )]
    OrphanResult { call_id: String, message: usize },
    #[error("tool message {message} answers {call_id} a second time")]
    DuplicateResult { call_id: String, message: usize },
    #[error("tool call id {call_id} is used by message {first} and again by message {second}")]
    DuplicateCallId {
        call_id: String,
        first: usize,
        second: usize,
    },
    #[error("message {message} has a tool call with an empty id")]
    EmptyCallId { message: usize },
    #[error("tool call {call_id} (message {message}) has arguments that are not a JSON object")]
    ArgumentsNotObject { call_id: String, message: usize },
}

/// Checks that every call is answered exactly once, right after its turn,
/// and that no call id is used twice in the list: the rule for a request.
pub fn check_pairing(messages: &[Message]) -> Result<(), PairingError> {
    check(messages, IdScope::List)
}

/// [`check_pairing`] for a stored history, in which a call id may recur in
/// later turns (never within one): models reuse `call_0` every turn, and
/// providers that send no ids (Ollama, Gemini) get `call_0`, `call_1`, ...
/// from the assembler in every turn. A history is kept as the model wrote
/// it; [`remint_reused_ids`] makes the ids of a request unique before it is
/// sent.
pub fn check_history_pairing(messages: &[Message]) -> Result<(), PairingError> {
    check(messages, IdScope::Turn)
}

/// Where a call id must be unique.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum IdScope {
    List,
    Turn,
}

fn check(messages: &[Message], scope: IdScope) -> Result<(), PairingError> {
    let mut seen_ids: HashMap<&str, usize, FastState> = HashMap::default();
    let mut open = OpenCalls::default();
    for (i, message) in messages.iter().enumerate() {
        match message {
            Message::Tool(tool) => {
                let id = tool.tool_call_id.as_str();
                match open.answer(id) {
                    Answer::First => {}
                    Answer::NoSuchCall => {
                        return Err(PairingError::OrphanResult {
                            call_id: id.to_owned(),
                            message: i,
                        });
                    }
                    Answer::Again => {
                        return Err(PairingError::DuplicateResult {
                            call_id: id.to_owned(),
                            message: i,
                        });
                    }
                }
            }
            other => {
                open.close()?;
                if scope == IdScope::Turn {
                    seen_ids.clear();
                }
                if let Message::Assistant(assistant) = other {
                    // Grown once, not by doubling and hashing every id again.
                    seen_ids.reserve(assistant.tool_calls.len());
                    for call in &assistant.tool_calls {
                        if call.id.is_empty() {
                            return Err(PairingError::EmptyCallId { message: i });
                        }
                        if !call.arguments.is_object() {
                            return Err(PairingError::ArgumentsNotObject {
                                call_id: call.id.clone(),
                                message: i,
                            });
                        }
                        if let Some(first) = seen_ids.insert(call.id.as_str(), i) {
                            return Err(PairingError::DuplicateCallId {
                                call_id: call.id.clone(),
                                first,
                                second: i,
                            });
                        }
                        open.ids.push(call.id.as_str());
                    }
                    open.answered.resize(open.ids.len(), false);
                    open.since = i;
                }
            }
        }
    }
    open.close()
}

/// The calls of the most recent assistant turn, and which have a result.
#[derive(Default)]
struct OpenCalls<'a> {
    /// Unique (a repeated id is refused before it gets here).
    ids: Vec<&'a str>,
    answered: Vec<bool>,
    /// The message that opened them.
    since: usize,
    /// Where the next result is looked for first: results usually come in
    /// the calls' order, which makes a batch's check linear, not quadratic.
    next: usize,
}

enum Answer {
    First,
    Again,
    NoSuchCall,
}

impl<'a> OpenCalls<'a> {
    fn answer(&mut self, id: &str) -> Answer {
        let at = if self.ids.get(self.next) == Some(&id) {
            Some(self.next)
        } else {
            self.ids.iter().position(|open| *open == id)
        };
        let Some(at) = at else {
            return Answer::NoSuchCall;
        };
        self.next = at + 1;
        match self.answered.get_mut(at) {
            Some(answered) if !*answered => {
                *answered = true;
                Answer::First
            }
            _ => Answer::Again,
        }
    }

    /// The turn is over: every call must have had its result.
    fn close(&mut self) -> Result<(), PairingError> {
        if let Some(missing) = self.answered.iter().position(|answered| !answered) {
            return Err(PairingError::MissingResult {
                call_id: self
                    .ids
                    .get(missing)
                    .copied()
                    .unwrap_or_default()
                    .to_owned(),
                message: self.since,
            });
        }
        self.ids.clear();
        self.answered.clear();
        self.next = 0;
        Ok(())
    }
}

/// Gives a fresh id to every call whose id an earlier turn already used, and
/// to the tool messages that answer it. Returns `(old, new)` pairs.
///
/// Models reuse ids across turns (`call_0` every turn); providers then pair
/// results with the wrong call or reject the request.
pub fn remint_reused_ids(messages: &mut [Message]) -> Vec<(String, String)> {
    let mut reminter = IdReminter::default();
    // Fresh ids avoid every id of the list, later turns' included.
    reminter.avoid(messages);
    let mut renamed = Vec::new();
    for message in messages.iter_mut() {
        reminter.remint(message, &mut renamed);
    }
    renamed
}

/// The state of [`remint_reused_ids`], kept to go on with a list that
/// grows: the agent appends a turn's messages to its request instead of
/// building the whole request again, and each appended message is reminted
/// against every id the list already holds. (A fresh id is then chosen
/// without knowing the ids of turns not appended yet; a later call that
/// happens to reuse it is itself reminted, so ids stay unique.)
#[derive(Debug, Default, Clone)]
pub struct IdReminter {
    /// Ids a fresh one must avoid.
    used: HashSet<String, FastState>,
    /// Ids of the calls processed so far (after renaming).
    seen: HashSet<String, FastState>,
    /// The renames of the current turn, for the tool messages after it.
    current: HashMap<String, String, FastState>,
}

impl IdReminter {
    /// Makes fresh ids avoid every call id of `messages` (which are
    /// reminted next, or later).
    pub fn avoid(&mut self, messages: &[Message]) {
        for message in messages {
            if let Message::Assistant(a) = message {
                self.used.extend(a.tool_calls.iter().map(|c| c.id.clone()));
            }
        }
    }

    /// Remints `message`, the next message of the list, and adds its
    /// renames to `renamed`.
    pub fn remint(&mut self, message: &mut Message, renamed: &mut Vec<(String, String)>) {
        match message {
            Message::Assistant(a) => {
                self.current.clear();
                // Grown once, not by doubling and hashing every id again.
                self.used.reserve(a.tool_calls.len());
                self.seen.reserve(a.tool_calls.len());
                self.used.extend(a.tool_calls.iter().map(|c| c.id.clone()));
                for call in &mut a.tool_calls {
                    if self.seen.insert(call.id.clone()) {
                        continue;
                    }
                    let fresh = fresh_id(&call.id, &self.used);
                    self.used.insert(fresh.clone());
                    self.seen.insert(fresh.clone());
                    renamed.push((call.id.clone(), fresh.clone()));
                    self.current.insert(call.id.clone(), fresh.clone());
                    call.id = fresh;
                }
            }
            Message::Tool(t) => {
                if let Some(fresh) = self.current.get(&t.tool_call_id) {
                    t.tool_call_id = fresh.clone();
                }
            }
            _ => self.current.clear(),
        }
    }
}

fn fresh_id(old: &str, used: &HashSet<String, FastState>) -> String {
    (2..)
        .map(|n| format!("{old}_{n}"))
        .find(|candidate| !used.contains(candidate))
        .unwrap_or_else(|| format!("{old}_x"))
}
