//! Fitting a session's history into the model's context budget.
//!
//! The history is cut into turns, each starting at a user message (a turn
//! holds that message, the assistant's calls and their results). Whole
//! turns are dropped, oldest first, until the rest fits; a call is never
//! sent without its result because a turn is never split. The newest turn
//! is always kept, even alone over budget: the model must see the input.
//! The store keeps everything; only the request is cut.

use homeagent_core::{IdReminter, Message, PairingError, check_pairing};

pub use crate::tokens::approx_tokens;

/// What is left of the history after fitting.
#[derive(Debug, Clone, PartialEq)]
pub struct Fitted {
    pub messages: Vec<Message>,
    /// How many messages were left out.
    pub elided: usize,
}

/// Keeps the newest whole turns of `history` within `budget` tokens
/// (`reserved` of which are already taken, by the system prompt).
pub fn fit_history(history: &[Message], budget: usize, reserved: usize) -> Fitted {
    let tokens: Vec<usize> = history.iter().map(approx_tokens).collect();
    fit_counted(history, &tokens, budget, reserved)
}

/// A history with each message's [`approx_tokens`], counted once when the
/// message joins it. The agent fits its history before every model
/// request; counting meant serializing every message each time, a cost
/// that grew with the session (a quarter of a turn's work in a
/// 60-message session).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct CountedHistory {
    messages: Vec<Message>,
    /// `tokens[i]` is `approx_tokens(&messages[i])`.
    tokens: Vec<usize>,
}

impl CountedHistory {
    pub fn new(messages: Vec<Message>) -> CountedHistory {
        let tokens = messages.iter().map(approx_tokens).collect();
        CountedHistory { messages, tokens }
    }

    /// `messages` with estimates counted earlier (`tokens[i]` must be
    /// `approx_tokens(&messages[i])`; the store keeps them with a
    /// remembered history). A length mismatch counts again rather than
    /// trust them.
    pub(crate) fn from_counted(messages: Vec<Message>, tokens: Vec<usize>) -> CountedHistory {
        if tokens.len() == messages.len() {
            CountedHistory { messages, tokens }
        } else {
            CountedHistory::new(messages)
        }
    }

    /// The token estimate of each message, in order.
    pub fn tokens(&self) -> &[usize] {
        &self.tokens
    }

    pub fn into_messages(self) -> Vec<Message> {
        self.messages
    }

    pub fn push(&mut self, message: Message) {
        self.tokens.push(approx_tokens(&message));
        self.messages.push(message);
    }

    /// Appends `more`, with the estimates counted for it.
    pub fn append(&mut self, more: CountedHistory) {
        self.messages.extend(more.messages);
        self.tokens.extend(more.tokens);
    }

    pub fn extend(&mut self, messages: impl IntoIterator<Item = Message>) {
        for message in messages {
            self.push(message);
        }
    }

    pub fn messages(&self) -> &[Message] {
        &self.messages
    }

    /// [`fit_history`] without counting again.
    pub fn fit(&self, budget: usize, reserved: usize) -> Fitted {
        fit_counted(&self.messages, &self.tokens, budget, reserved)
    }

    /// Where [`CountedHistory::fit`] would start the kept messages.
    pub fn fit_start(&self, budget: usize, reserved: usize) -> usize {
        fit_start(&self.messages, &self.tokens, budget, reserved)
    }
}

/// The messages of a model request, kept from one request of an input to
/// the next: the system prompt, then the history as far as it fits, with
/// reused call ids reminted
/// ([`remint_reused_ids`](homeagent_core::remint_reused_ids)) and the pairing
/// checked ([`check_pairing`]).
///
/// Building that afresh for every request cloned, reminted and checked the
/// whole history each time, a cost growing with the session. Between two
/// requests of one input the history only grows by the turn just run, so
/// while the fit keeps starting at the same message, only the new messages
/// are cloned, reminted and checked; when it moves (the history outgrew
/// the budget), the request is built afresh.
#[derive(Debug, Default)]
pub struct RequestMessages {
    /// Where the sent part of the history starts; `None` until built.
    keep_from: Option<usize>,
    /// History messages the request holds (after the system prompt).
    covered: usize,
    ids: IdReminter,
    full_builds: usize,
}

impl RequestMessages {
    /// Brings `messages`, the request's list, up to date with `history`;
    /// `budget` and `reserved` as for [`fit_history`]. Returns how many
    /// leading messages of the list it left as they were: all of them when
    /// it only appended, none when it built the list afresh (what a
    /// codec's kept text may be reused for,
    /// [`RenderCache::keep_first`](homeagent_llm::RenderCache::keep_first)).
    pub fn update(
        &mut self,
        messages: &mut Vec<Message>,
        system_prompt: &str,
        history: &CountedHistory,
        budget: usize,
        reserved: usize,
    ) -> Result<usize, PairingError> {
        let keep_from = history.fit_start(budget, reserved);
        let all = history.messages();
        let first_new = keep_from + self.covered;
        let extends = self.keep_from == Some(keep_from)
            && messages.len() == self.covered + 1
            && first_new <= all.len()
            // A turn's results never come without their calls.
            && !matches!(all.get(first_new), Some(Message::Tool(_)));
        self.keep_from = None;
        let unchanged = if extends { messages.len() } else { 0 };
        if extends {
            let start = messages.len();
            let mut renamed = Vec::new();
            for message in &all[first_new..] {
                let mut message = message.clone();
                self.ids.remint(&mut message, &mut renamed);
                messages.push(message);
            }
            check_pairing(&messages[start..])?;
        } else {
            let system = if keep_from > 0 {
                // The client's own system messages, kept (`fit_start`),
                // join the agent's prompt: the messages after it are the
                // history from `keep_from` on.
                let pinned = leading_system(all);
                let mut system = system_prompt.to_owned();
                for message in &all[..pinned] {
                    if let Message::System { content } = message {
                        system.push_str("\n\n");
                        system.push_str(content);
                    }
                }
                // Only the client's system messages may have been moved
                // up, with nothing left out: no note then.
                if keep_from > pinned {
                    system.push_str("\n\n");
                    system.push_str(&elision_note(keep_from - pinned));
                }
                system
            } else {
                system_prompt.to_owned()
            };
            self.full_builds += 1;
            messages.clear();
            messages.reserve(all.len() - keep_from + 1);
            messages.push(Message::system(system));
            messages.extend_from_slice(&all[keep_from..]);
            self.ids = IdReminter::default();
            self.ids.avoid(&messages[1..]);
            let mut renamed = Vec::new();
            for message in &mut messages[1..] {
                self.ids.remint(message, &mut renamed);
            }
            check_pairing(messages)?;
        }
        self.keep_from = Some(keep_from);
        self.covered = all.len() - keep_from;
        Ok(unchanged)
    }

    /// How many times the request was built afresh rather than extended.
    pub fn full_builds(&self) -> usize {
        self.full_builds
    }
}

fn fit_counted(history: &[Message], tokens: &[usize], budget: usize, reserved: usize) -> Fitted {
    let keep_from = fit_start(history, tokens, budget, reserved);
    if keep_from == 0 {
        return Fitted {
            messages: history.to_vec(),
            elided: 0,
        };
    }
    let pinned = leading_system(history);
    let mut messages = history[..pinned].to_vec();
    messages.extend_from_slice(&history[keep_from..]);
    Fitted {
        messages,
        elided: keep_from - pinned,
    }
}

/// How many system messages open `history`: a client's own (a persona, a
/// preset, what an OpenAI-compatible client sends first). They are kept
/// whatever is left out, as the agent's own prompt is.
fn leading_system(history: &[Message]) -> usize {
    history
        .iter()
        .take_while(|m| matches!(m, Message::System { .. }))
        .count()
}

/// Where the kept part of `history` starts (0: all of it); when it is not
/// 0, the leading system messages ([`leading_system`]) are kept besides.
fn fit_start(history: &[Message], tokens: &[usize], budget: usize, reserved: usize) -> usize {
    let available = budget.saturating_sub(reserved);
    // Nearly always the whole history fits: then every turn is kept, and
    // a sum over the estimates says so without finding the turns (this
    // runs before every model request, over the whole history).
    if tokens.iter().sum::<usize>() <= available {
        return 0;
    }
    let pinned = leading_system(history);
    let available = available.saturating_sub(tokens[..pinned].iter().sum::<usize>());
    let starts: Vec<usize> = history
        .iter()
        .enumerate()
        .filter(|(_, m)| matches!(m, Message::User { .. }))
        .map(|(i, _)| i)
        .collect();
    // Turn boundaries: messages before the first user message (after the
    // kept system messages) belong to the first turn.
    let mut bounds: Vec<usize> = starts.clone();
    if bounds.first().is_none_or(|first| *first != pinned) {
        bounds.insert(0, pinned);
    }
    let mut keep_from = history.len();
    let mut used = 0usize;
    for (n, &start) in bounds.iter().enumerate().rev() {
        let end = bounds.get(n + 1).copied().unwrap_or(history.len());
        let cost: usize = tokens[start..end].iter().sum();
        let newest = end == history.len();
        if !newest && used + cost > available {
            break;
        }
        used += cost;
        keep_from = start;
    }
    keep_from
}

/// The line the system prompt gets when history was elided.
pub fn elision_note(elided: usize) -> String {
    format!(
        "Note: the {elided} oldest messages of this conversation were left out to fit the \
         context budget; the conversation started earlier than what you see."
    )
}
