//! The pairing check that runs before every model request.
//!
//! Providers reject a history in which a tool call has no result, a result
//! answers no call, or an id is used twice; worse, some accept it and pair
//! results with the wrong calls. The rule checked here is the strictest any
//! provider applies: after an assistant message with calls comes a block of
//! tool messages answering each of its ids exactly once, and nothing else
//! until that block is complete.

use std::collections::{HashMap, HashSet};

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

/// Checks that every call is answered exactly once, right after its turn.
pub fn check_pairing(messages: &[Message]) -> Result<(), PairingError> {
    let mut seen_ids: HashMap<&str, usize> = HashMap::new();
    // Ids of the most recent assistant turn still waiting for results.
    let mut open: Vec<&str> = Vec::new();
    let mut open_since = 0;
    let mut answered: HashSet<&str> = HashSet::new();
    for (i, message) in messages.iter().enumerate() {
        match message {
            Message::Tool(tool) => {
                let id = tool.tool_call_id.as_str();
                if !open.contains(&id) {
                    return Err(PairingError::OrphanResult {
                        call_id: id.to_owned(),
                        message: i,
                    });
                }
                if !answered.insert(id) {
                    return Err(PairingError::DuplicateResult {
                        call_id: id.to_owned(),
                        message: i,
                    });
                }
            }
            other => {
                if let Some(missing) = open.iter().find(|id| !answered.contains(*id)) {
                    return Err(PairingError::MissingResult {
                        call_id: (*missing).to_owned(),
                        message: open_since,
                    });
                }
                open.clear();
                answered.clear();
                if let Message::Assistant(assistant) = other {
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
                        open.push(call.id.as_str());
                    }
                    open_since = i;
                }
            }
        }
    }
    if let Some(missing) = open.iter().find(|id| !answered.contains(*id)) {
        return Err(PairingError::MissingResult {
            call_id: (*missing).to_owned(),
            message: open_since,
        });
    }
    Ok(())
}

/// Gives a fresh id to every call whose id an earlier turn already used, and
/// to the tool messages that answer it. Returns `(old, new)` pairs.
///
/// Models reuse ids across turns (`call_0` every turn); providers then pair
/// results with the wrong call or reject the request.
pub fn remint_reused_ids(messages: &mut [Message]) -> Vec<(String, String)> {
    let mut used: HashSet<String> = HashSet::new();
    for message in messages.iter() {
        if let Message::Assistant(a) = message {
            used.extend(a.tool_calls.iter().map(|c| c.id.clone()));
        }
    }
    let mut seen: HashSet<String> = HashSet::new();
    let mut renamed = Vec::new();
    // The renames of the current turn apply to the tool messages that follow it.
    let mut current: HashMap<String, String> = HashMap::new();
    for message in messages.iter_mut() {
        match message {
            Message::Assistant(a) => {
                current.clear();
                for call in &mut a.tool_calls {
                    if seen.insert(call.id.clone()) {
                        continue;
                    }
                    let fresh = fresh_id(&call.id, &used);
                    used.insert(fresh.clone());
                    seen.insert(fresh.clone());
                    renamed.push((call.id.clone(), fresh.clone()));
                    current.insert(call.id.clone(), fresh.clone());
                    call.id = fresh;
                }
            }
            Message::Tool(t) => {
                if let Some(fresh) = current.get(&t.tool_call_id) {
                    t.tool_call_id = fresh.clone();
                }
            }
            _ => current.clear(),
        }
    }
    renamed
}

fn fresh_id(old: &str, used: &HashSet<String>) -> String {
    (2..)
        .map(|n| format!("{old}_{n}"))
        .find(|candidate| !used.contains(candidate))
        .unwrap_or_else(|| format!("{old}_x"))
}
