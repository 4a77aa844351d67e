//! Repair on load: answering the calls a crash left without results.
//!
//! The agent commits an assistant turn (with its calls) before the tools run
//! and commits their results afterwards. A crash, `kill -9` or power cut in
//! between leaves calls that no tool message answers, and every provider
//! rejects such a history. Nobody knows whether those calls ran, so each gets
//! the kernel's `cancelled` outcome saying exactly that, committed so the
//! repair happens once and the stored history is paired from then on.
//!
//! Where the gap is not at the end (a process appended after the crash
//! without loading the session first), the results go right after the
//! turn's last result and the later messages move down: providers want a
//! turn's results before the next non-tool message. The session's messages
//! are then written again, numbered anew, in one transaction.
//!
//! Only the process that runs a session's turns should load it: a session
//! whose tools are running *right now* in another process looks exactly like
//! a crashed one. Read-only viewers use [`Store::history`].

use std::collections::HashSet;

use homeagent_core::{
    ErrorReason, Message, ToolCall, ToolError, ToolMessage, ToolOutcome, check_history_pairing,
};
use rusqlite::{Connection, TransactionBehavior};

use super::history_cache::SeqHistory;
use super::messages::insert_messages;
use super::{Store, StoreError, require_session, validate_session_id};
use crate::context::{CountedHistory, approx_tokens};

/// What a call cut off by a crash is told, as the detail of its
/// `cancelled` error.
pub const CANCELLED_DETAIL: &str = "the agent stopped (crash or restart) before this call finished; \
     it may or may not have run, and its result is lost";

/// The tool message for a call whose result a crash lost: the kernel's
/// `cancelled` outcome, rendered and converted the way the executor does it.
pub fn cancelled_result(call: &ToolCall) -> ToolMessage {
    let error = ToolError::new(ErrorReason::Cancelled, CANCELLED_DETAIL)
        .with_hint("check whether it took effect before calling it again");
    let outcome = ToolOutcome::failure(call.id.as_str(), call.name.as_str(), error);
    ToolMessage {
        tool_call_id: outcome.call_id,
        name: outcome.tool,
        content: outcome.text,
        success: outcome.success,
    }
}

/// Results to insert right after the message numbered `after`.
#[derive(Debug)]
struct Gap {
    after: i64,
    results: Vec<Message>,
}

/// The turns of `history` with unanswered calls, in history order.
fn find_gaps(history: &[(i64, Message)]) -> Vec<Gap> {
    struct OpenTurn<'a> {
        calls: &'a [ToolCall],
        // Seeded foldhash, not SipHash: this runs over the whole history
        // on every input.
        answered: HashSet<&'a str, foldhash::fast::RandomState>,
        last_seq: i64,
    }
    fn close(turn: Option<OpenTurn<'_>>, gaps: &mut Vec<Gap>) {
        let Some(turn) = turn else { return };
        let results: Vec<Message> = turn
            .calls
            .iter()
            .filter(|call| !turn.answered.contains(call.id.as_str()))
            .map(|call| Message::Tool(cancelled_result(call)))
            .collect();
        if !results.is_empty() {
            gaps.push(Gap {
                after: turn.last_seq,
                results,
            });
        }
    }
    let mut gaps = Vec::new();
    let mut open: Option<OpenTurn<'_>> = None;
    for (seq, message) in history {
        match message {
            Message::Tool(result) => {
                // A result with no open turn is an orphan; no insertion fixes
                // it, and the pairing check after repair reports it.
                if let Some(turn) = open.as_mut() {
                    turn.answered.insert(result.tool_call_id.as_str());
                    turn.last_seq = *seq;
                }
            }
            other => {
                close(open.take(), &mut gaps);
                if let Message::Assistant(assistant) = other
                    && !assistant.tool_calls.is_empty()
                {
                    open = Some(OpenTurn {
                        calls: &assistant.tool_calls,
                        answered: HashSet::default(),
                        last_seq: *seq,
                    });
                }
            }
        }
    }
    close(open.take(), &mut gaps);
    gaps
}

/// SQLite's count of commits by *other* connections to the file, as seen
/// by `conn` (see `history_cache.rs`).
fn data_version(conn: &Connection) -> Result<i64, StoreError> {
    Ok(conn
        .prepare_cached("PRAGMA data_version")?
        .query_row([], |row| row.get(0))?)
}

/// `history` with each gap's results right after the message it names.
fn with_results(history: SeqHistory, gaps: &[Gap]) -> Vec<Message> {
    let added: usize = gaps.iter().map(|gap| gap.results.len()).sum();
    let mut repaired = Vec::with_capacity(history.len() + added);
    let mut gaps = gaps.iter().peekable();
    for (seq, message) in history {
        repaired.push(message);
        while let Some(gap) = gaps.next_if(|gap| gap.after == seq) {
            repaired.extend(gap.results.iter().cloned());
        }
    }
    repaired
}

impl Store {
    /// The session's history, ready to send to a model: calls a crash left
    /// without results are answered with `cancelled` results, which are
    /// committed before this returns. Fails with
    /// [`StoreError::Unrepairable`] (and changes nothing) when the history
    /// is broken in another way.
    pub fn load_session(&self, session: &str) -> Result<Vec<Message>, StoreError> {
        self.load_counted(session)
            .map(CountedHistory::into_messages)
    }

    /// [`Store::load_session`] with each message's token estimate
    /// ([`approx_tokens`]), as the agent fits histories with. A remembered
    /// session's estimates are kept with it, so each message is counted
    /// once, not once per input.
    pub fn load_counted(&self, session: &str) -> Result<CountedHistory, StoreError> {
        self.load_known(session, None).map(|loaded| loaded.history)
    }

    /// [`Store::load_counted`], from message `known.len` on when `known`
    /// names the remembered history (see [`Loaded`]).
    pub(super) fn load_known(
        &self,
        session: &str,
        known: Option<KnownHistory>,
    ) -> Result<Loaded, StoreError> {
        validate_session_id(session)?;
        let mut conn = self.lock();
        // The common case, a paired history, needs no write lock: a plain
        // read, of only the messages added since the last load when the
        // session is remembered (`history_cache.rs`).
        require_session(&conn, session)?;
        if let Some(loaded) = self.load_paired(&conn, session, Remembered::Any, known)? {
            return Ok(loaded);
        }
        // IMMEDIATE: no other writer may append between the check and the
        // repair; the history is read again under the lock for that reason.
        let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
        let history = self.read_history(&tx, session)?;
        let gaps = self.find_gaps(&history);
        if gaps.is_empty() {
            return Ok(Loaded::whole(self.counted(paired(session, &history)?)));
        }
        let repaired = with_results(history, &gaps);
        check_history_pairing(&repaired).map_err(|source| StoreError::Unrepairable {
            session: session.to_owned(),
            source,
        })?;
        // A row may hold several messages (`messages::insert_rows`), so a
        // gap can fall inside one: the session's messages are written
        // again, repaired. Rare (after a crash), and all or nothing.
        tx.execute("DELETE FROM messages WHERE session_id = ?1", [session])?;
        insert_messages(&tx, session, 1, &repaired)?;
        tx.commit()?;
        let calls: usize = gaps.iter().map(|g| g.results.len()).sum();
        tracing::warn!(
            session,
            calls,
            "answered tool calls left without results by an earlier crash with `cancelled`"
        );
        Ok(Loaded::whole(self.counted(repaired)))
    }

    /// The history of `session` (which exists) by a plain read, when it is
    /// paired; `None` when it needs a repair (or, with
    /// [`Remembered::Only`], when it is not remembered: reading a whole
    /// history may take long). Of a remembered session only the messages
    /// added since its last load are read, and checked for pairing from
    /// the last step before them (the rest passed at an earlier load); of
    /// a `known` one, only the messages after the known ones are cloned.
    pub(super) fn load_paired(
        &self,
        conn: &Connection,
        session: &str,
        remembered: Remembered,
        known: Option<KnownHistory>,
    ) -> Result<Option<Loaded>, StoreError> {
        let mut histories = self.histories();
        histories.check_version(data_version(conn)?);
        if remembered == Remembered::Only && !histories.contains(session) {
            return Ok(None);
        }
        let mut history = histories.take(session);
        // Every message counted so far passed the check at an earlier load.
        let checked = history.tokens.len();
        let after = history.messages.last().map_or(0, |(seq, _)| *seq);
        history.bytes += self.read_history_after(conn, session, after, &mut history.messages)?;
        // Both checks start afresh at every message that is not a result,
        // so from the last such one before the new messages they find what
        // a check of the whole history would: a load's cost stays the same
        // however long the session grows.
        let check_from = history
            .messages
            .get(..checked)
            .unwrap_or_default()
            .iter()
            .rposition(|(_, m)| !matches!(m, Message::Tool(_)))
            .unwrap_or(0);
        let to_check = history.messages.get(check_from..).unwrap_or_default();
        if !self.find_gaps(to_check).is_empty() {
            // Not kept: a repair renumbers the messages.
            return Ok(None);
        }
        let from = known
            .filter(|k| k.lineage == history.lineage && k.len <= history.messages.len())
            .map_or(0, |k| k.len);
        let start = check_from.min(from);
        let mut messages: Vec<Message> = history
            .messages
            .get(start..)
            .unwrap_or_default()
            .iter()
            .map(|(_, m)| m.clone())
            .collect();
        if check_history_pairing(messages.get(check_from - start..).unwrap_or_default()).is_err() {
            // Numbered as in the whole history.
            paired(session, &history.messages)?;
        }
        messages.drain(..from - start);
        history.tokens.extend(
            history
                .messages
                .get(checked..)
                .unwrap_or_default()
                .iter()
                .map(|(_, m)| approx_tokens(m)),
        );
        self.count_tokens(history.messages.len().saturating_sub(checked));
        let tokens = history.tokens.get(from..).unwrap_or_default().to_vec();
        let loaded = Loaded {
            history: CountedHistory::from_counted(messages, tokens),
            lineage: Some(history.lineage),
            from,
        };
        histories.keep(session, history);
        Ok(Some(loaded))
    }

    /// Gives the history cache the messages of an append that has just
    /// committed at `first` (see `HistoryCache::extend_committed`); the
    /// caller holds the connection.
    pub(super) fn remember_committed(
        &self,
        session: &str,
        first: i64,
        messages: Vec<Message>,
        bytes: usize,
    ) {
        self.histories()
            .extend_committed(session, first, messages, bytes);
    }

    /// [`find_gaps`], counted in [`Store::read_stats`].
    fn find_gaps(&self, history: &[(i64, Message)]) -> Vec<Gap> {
        self.count_checked(history.len());
        find_gaps(history)
    }

    /// `messages` with their token estimates, counted now.
    fn counted(&self, messages: Vec<Message>) -> CountedHistory {
        self.count_tokens(messages.len());
        CountedHistory::new(messages)
    }
}

/// What an input knows of a session's history: the first `len` messages
/// of the one loaded under `lineage` (see [`OpenedInput::lineage`](super::OpenedInput::lineage)).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KnownHistory {
    pub lineage: u64,
    pub len: usize,
}

/// A loaded history: its messages from `from` on (the ones before are the
/// caller's [`KnownHistory`]), and its lineage when it is remembered
/// (`None` after a repair, which rewrites it).
#[derive(Debug)]
pub(super) struct Loaded {
    pub history: CountedHistory,
    pub lineage: Option<u64>,
    pub from: usize,
}

impl Loaded {
    fn whole(history: CountedHistory) -> Loaded {
        Loaded {
            history,
            lineage: None,
            from: 0,
        }
    }
}

/// Which sessions [`Store::load_paired`] reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Remembered {
    Any,
    /// Only one whose history is remembered.
    Only,
}

/// The messages of a history without gaps, checked for pairing.
fn paired(session: &str, history: &[(i64, Message)]) -> Result<Vec<Message>, StoreError> {
    let messages: Vec<Message> = history.iter().map(|(_, m)| m.clone()).collect();
    check_history_pairing(&messages).map_err(|source| StoreError::Unrepairable {
        session: session.to_owned(),
        source,
    })?;
    Ok(messages)
}

#[cfg(test)]
mod tests {
    use super::*;
    use homeagent_core::AssistantMessage;
    use serde_json::json;

    fn call(id: &str) -> ToolCall {
        ToolCall {
            id: id.into(),
            name: "demo_echo".into(),
            arguments: json!({}),
            raw_arguments: "{}".into(),
        }
    }

    fn turn(ids: &[&str]) -> Message {
        Message::Assistant(AssistantMessage {
            tool_calls: ids.iter().map(|id| call(id)).collect(),
            ..AssistantMessage::default()
        })
    }

    fn answer(id: &str) -> Message {
        Message::Tool(ToolMessage {
            tool_call_id: id.into(),
            name: "demo_echo".into(),
            content: "ok".into(),
            success: true,
        })
    }

    #[test]
    fn gaps_are_found_after_the_last_result_of_each_turn() {
        let history: Vec<(i64, Message)> = vec![
            Message::user("hi"),
            turn(&["a", "b", "c"]),
            answer("b"),
            Message::user("again"),
            turn(&["d"]),
            answer("d"),
            turn(&["e"]),
        ]
        .into_iter()
        .zip(1..)
        .map(|(m, seq)| (seq, m))
        .collect();
        let gaps = find_gaps(&history);
        let summary: Vec<(i64, Vec<String>)> = gaps
            .iter()
            .map(|g| {
                let ids = g
                    .results
                    .iter()
                    .map(|m| match m {
                        Message::Tool(t) => t.tool_call_id.clone(),
                        other => format!("not a tool message: {other:?}"),
                    })
                    .collect();
                (g.after, ids)
            })
            .collect();
        assert_eq!(
            summary,
            vec![
                (3, vec!["a".to_owned(), "c".to_owned()]),
                (7, vec!["e".to_owned()]),
            ]
        );
    }
}
