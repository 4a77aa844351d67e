//! Opening an input: the session claimed for it and its history loaded.
//!
//! Every input starts with this step, so from async code it is worth
//! doing without a trip to the blocking pool when nothing in it can wait
//! (`Store::open_input_here`): the claim is a lock taken without waiting,
//! a new session has nothing to load, and a remembered one only the
//! messages added since its last load. Anything else (a history not in the
//! cache, a repair, the connection in use, SQLite busy, an error) is done,
//! or done again, on the pool.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use crate::context::CountedHistory;

use super::claim::SessionClaim;
use super::repair::{KnownHistory, Loaded, Remembered};
use super::sessions::{is_agents, validate_agent_name};
use super::{BUSY_TIMEOUT, Store, StoreError, validate_session_id};

/// How long an input waits for a write its session's earlier input left
/// behind in this process ([`Store::own_claim_released`]): a commit takes
/// milliseconds, but a slow disk's fsync may take seconds. After it, the
/// input is refused ([`StoreError::SessionWriting`]).
const OWN_WRITE_PATIENCE: std::time::Duration = std::time::Duration::from_secs(10);

/// What an input starts from.
#[derive(Debug)]
pub struct OpenedInput {
    /// The session, held until the input ends (see `store/claim.rs`).
    pub claim: SessionClaim,
    /// Its history; empty for a session that does not exist yet (the
    /// input's first append creates it, `Store::append_async_creating`).
    pub history: CountedHistory,
    /// Names the stored history this was loaded from while it only grows:
    /// two inputs that open the same lineage saw the same messages, the
    /// later perhaps with more after them. `None` when the history is not
    /// remembered (a new session, one just repaired).
    pub lineage: Option<u64>,
    /// `history` holds the messages from this one on: the caller's
    /// [`KnownHistory`] when it named this lineage, else 0 (all of them).
    pub from: usize,
}

impl Store {
    /// Claims `session` for an input of `agent` and loads its history,
    /// repairing it if a crash left calls without results. A session of
    /// another agent is refused ([`StoreError::AgentMismatch`]), one
    /// claimed elsewhere too ([`StoreError::SessionBusy`]). Blocking: from
    /// async code use [`Store::open_input_async`].
    pub fn open_input(&self, session: &str, agent: &str) -> Result<OpenedInput, StoreError> {
        self.open_input_known(session, agent, None)
    }

    /// [`Store::open_input`] for an input that holds the start of the
    /// history already (its session's last input's): the history is then
    /// given from message `known.len` on (see [`OpenedInput::from`]).
    pub fn open_input_known(
        &self,
        session: &str,
        agent: &str,
        known: Option<KnownHistory>,
    ) -> Result<OpenedInput, StoreError> {
        let claim = self.claim_session(session)?;
        let loaded = if self.check_session_agent(session, agent)? {
            self.load_known(session, known)?
        } else {
            Loaded {
                history: CountedHistory::default(),
                lineage: None,
                from: 0,
            }
        };
        Ok(OpenedInput {
            claim,
            history: loaded.history,
            lineage: loaded.lineage,
            from: loaded.from,
        })
    }

    /// [`Store::open_input`] for async code: on the caller's worker when
    /// nothing in it can wait (see the module docs), else on the blocking
    /// pool.
    pub async fn open_input_async(
        self: &Arc<Self>,
        session: &str,
        agent: &str,
    ) -> Result<OpenedInput, StoreError> {
        self.open_input_after(session, agent, None).await
    }

    /// [`Store::open_input_known`] for async code, as
    /// [`Store::open_input_async`].
    pub async fn open_input_after(
        self: &Arc<Self>,
        session: &str,
        agent: &str,
        known: Option<KnownHistory>,
    ) -> Result<OpenedInput, StoreError> {
        self.own_claim_released(session, OWN_WRITE_PATIENCE).await?;
        if let Some(opened) = self.open_input_here(session, agent, known) {
            return Ok(opened);
        }
        let (session, agent) = (session.to_owned(), agent.to_owned());
        self.call(move |store| store.open_input_known(&session, &agent, known))
            .await
    }

    /// The fast path of [`Store::open_input_async`]: `None` (nothing held,
    /// nothing written) unless it could be done without waiting.
    /// Only when no other input runs through this handle: under load the
    /// pool reads in parallel with the worker the inputs share (see
    /// `Store::lead_inline`).
    fn open_input_here(
        &self,
        session: &str,
        agent: &str,
        known: Option<KnownHistory>,
    ) -> Option<OpenedInput> {
        if self.claims.held() > 0 {
            return None;
        }
        validate_session_id(session).ok()?;
        validate_agent_name(agent).ok()?;
        let conn = match self.conn.try_lock() {
            Ok(conn) if conn.is_autocommit() => conn,
            _ => return None,
        };
        // A read can meet a lock too (a WAL being recovered): fail, not wait.
        conn.busy_timeout(std::time::Duration::ZERO).ok()?;
        let opened = (|| {
            let claim = self.claim_session(session).ok()?;
            let loaded = match self.read_agent_checked(&conn, session).ok()? {
                None => Loaded {
                    history: CountedHistory::default(),
                    lineage: None,
                    from: 0,
                },
                Some(existing) => {
                    is_agents(session, &existing, agent).ok()?;
                    self.load_paired(&conn, session, Remembered::Only, known)
                        .ok()??
                }
            };
            Some(OpenedInput {
                claim,
                history: loaded.history,
                lineage: loaded.lineage,
                from: loaded.from,
            })
        })();
        if conn.busy_timeout(BUSY_TIMEOUT).is_err() {
            return None;
        }
        if opened.is_some() {
            self.writes.opened_here.fetch_add(1, Ordering::Relaxed);
        }
        opened
    }
}
