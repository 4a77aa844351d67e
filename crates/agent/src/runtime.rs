//! The agent loop: one input in, one terminal frame out.
//!
//! For an input the loop
//! 1. loads the session from the store (calls a crash left without a
//!    result get `cancelled` results there) and commits the user message;
//! 2. builds the request: the system prompt with the kernel's
//!    execution-order section, the history fitted to the context budget,
//!    the tools this agent may see; the pairing check runs on it;
//! 3. streams the model's reply through the assembler, forwarding text;
//! 4. commits the assistant message with its calls, runs them as one batch
//!    through the kernel's executor over the gated tool source (forwarding
//!    each call's start and end), and commits every result in one
//!    transaction — so a crash mid-batch leaves calls the next load answers
//!    `cancelled`, never calls that silently vanish. The batch's tool events
//!    (diagnostics, not history) are kept in memory while it runs and go
//!    into that same transaction: one commit per batch instead of two per
//!    call, at the price of losing the events (never the calls) of a batch
//!    a crash interrupts;
//! 5. asks again, until a reply has no calls or `max_tool_turns` batches
//!    ran (then the reply says so).
//!
//! The user message and a batch's results are not waited for before the
//! next model request: they are held for a moment, and the input's next
//! write (the calls, the reply) carries them in its own commit when the
//! model answers within the hold (`store/held.rs`). Every write is still
//! committed before the one after it and before the reply is sent.
//!
//! Two tokens control a running input: `interrupt` cancels a model stream
//! in flight, and is checked again after a batch (a safe point: tools are
//! never preempted); `stop` cancels everything, running tools included.
//! Nothing half-streamed is stored, so the history stays paired either way.

// The loop's `Err` is the input's terminal frame: built once per input, so
// its size does not matter.
#![allow(clippy::result_large_err)]

use std::sync::{Arc, Mutex, PoisonError};

use homeagent_core::{
    BatchContext, CancellationToken, Executor, ExecutorOptions, Message, StreamAssembler,
    StreamEvent, ToolDef, ToolEvent, ToolSource, execution_order_section_for,
};
use homeagent_llm::{ChatRequest, FallbackError, Sources, ToolSpec};
use homeagent_tools::hooks::CommandHooks;
use homeagent_tools::{AGENT_EXTRA, Approval, GatedSource};
use serde_json::{Map, Value};

use crate::context::{CountedHistory, RequestMessages, approx_tokens};
use crate::frames::{Frame, Incomplete, UsageFrame};
use crate::kept_requests::{KeptRequest, KeptRequests};
use crate::request_base::{Built, RequestBase, RequestBases};
use crate::store::{
    EventRow, HeldWrite, KnownHistory, OpenedInput, SessionClaim, Store, StoreError,
};
use crate::tokens::definition_tokens;

/// The loop's knobs (from `[agent]` and `[tools]`).
#[derive(Debug, Clone)]
pub struct AgentSettings {
    pub max_tool_turns: u32,
    pub context_tokens: usize,
    pub max_tokens: u32,
    /// Appended to the built-in system prompt.
    pub system_prompt: Option<String>,
    pub executor: ExecutorOptions,
    /// Command hooks, attached to every executor the runtime makes — the
    /// model's batches, sequences (ToolApi) and `mcp-serve` alike.
    pub hooks: CommandHooks,
}

impl Default for AgentSettings {
    fn default() -> Self {
        AgentSettings {
            max_tool_turns: 10,
            context_tokens: 32_000,
            max_tokens: 4096,
            system_prompt: None,
            executor: ExecutorOptions::default(),
            hooks: CommandHooks::default(),
        }
    }
}

/// One input to run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TurnInput {
    pub session: String,
    pub agent: String,
    pub text: String,
}

/// How a running input is interrupted or stopped.
#[derive(Debug, Clone, Default)]
pub struct TurnControl {
    /// Cancels a model stream in flight; checked after each batch.
    pub interrupt: CancellationToken,
    /// Cancels the whole input, running tools included.
    pub stop: CancellationToken,
}

/// Where a running input's frames go.
pub type FrameSink = Arc<dyn Fn(Frame) + Send + Sync>;

/// The agent: model sources, gated tools, the store and the loop settings.
pub struct Runtime {
    sources: Arc<Sources>,
    tools: Arc<GatedSource>,
    store: Arc<Store>,
    settings: AgentSettings,
    /// Shared with the runtime's other-approval copies: approval changes
    /// neither the prompt nor the tool list.
    request_bases: Arc<RequestBases>,
    /// Each recent session's last request, for its next input (shared
    /// with the other-approval copies, like the bases).
    kept_requests: Arc<KeptRequests>,
}

impl std::fmt::Debug for Runtime {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Runtime")
            .field("sources", &self.sources.names())
            .field("settings", &self.settings)
            .finish_non_exhaustive()
    }
}

impl Runtime {
    pub fn new(
        sources: Arc<Sources>,
        tools: Arc<GatedSource>,
        store: Arc<Store>,
        settings: AgentSettings,
    ) -> Self {
        Runtime {
            sources,
            tools,
            store,
            settings,
            request_bases: Arc::default(),
            kept_requests: Arc::default(),
        }
    }

    /// The same agent with another approval policy for tools that need one.
    pub fn with_approval(&self, approval: Approval) -> Runtime {
        Runtime {
            sources: Arc::clone(&self.sources),
            tools: Arc::new(self.tools.with_approval(approval)),
            store: Arc::clone(&self.store),
            settings: self.settings.clone(),
            request_bases: Arc::clone(&self.request_bases),
            kept_requests: Arc::clone(&self.kept_requests),
        }
    }

    /// How many inputs started from their session's last request instead
    /// of building it afresh (see `kept_requests`; diagnostics).
    pub fn kept_request_reuses(&self) -> u64 {
        self.kept_requests.reuses()
    }

    pub fn sources(&self) -> &Arc<Sources> {
        &self.sources
    }

    pub fn store(&self) -> &Arc<Store> {
        &self.store
    }

    pub fn tools(&self) -> &Arc<GatedSource> {
        &self.tools
    }

    pub fn settings(&self) -> &AgentSettings {
        &self.settings
    }

    /// An executor over the gated tools whose events go to `events`.
    pub fn executor(&self, events: Option<Arc<dyn homeagent_core::EventSink>>) -> Executor {
        let executor = self.executor_with(self.settings.executor.clone());
        match events {
            Some(sink) => executor.with_events(sink),
            None => executor,
        }
    }

    /// [`Runtime::executor`] for a client that is not a model (the tools
    /// `mcp-serve` offers): a result's text is cut at `text_cap`, not at
    /// the cap that keeps a model's context small; such a client reads the
    /// result whole and sets its own limits.
    pub fn client_executor(&self, text_cap: usize) -> Executor {
        self.executor_with(ExecutorOptions {
            result_text_cap: text_cap,
            ..self.settings.executor.clone()
        })
    }

    fn executor_with(&self, options: ExecutorOptions) -> Executor {
        let source: Arc<dyn homeagent_core::ToolSource> = Arc::clone(&self.tools) as _;
        self.settings
            .hooks
            .attach(Executor::new(source).with_options(options))
    }

    /// The tokens `agent`'s system prompt and tool definitions take from
    /// `agent.context_tokens` in every request (estimated as the history's
    /// are), for the tools there are now.
    pub fn reserved_tokens(&self, agent: &str) -> usize {
        self.request_base(agent).reserved_tokens
    }

    /// The tools `agent` may see, as an input starting now would send them
    /// to the model.
    pub fn tool_specs(&self, agent: &str) -> Vec<ToolSpec> {
        self.request_base(agent).tools.clone()
    }

    /// `agent`'s system prompt and tool list for the current tools (see
    /// [`crate::request_base`]).
    fn request_base(&self, agent: &str) -> Arc<RequestBase> {
        self.request_bases
            .get_or_build(agent, self.tools.definitions(), |definitions| {
                // The agent is offered, and told about, only the tools its
                // grant lets it see.
                let gate = self.tools.gate();
                let visible: Vec<Arc<ToolDef>> = definitions
                    .iter()
                    .filter(|def| gate.visible(agent, &def.name))
                    .cloned()
                    .collect();
                let prompt = self.system_prompt(&self.executor(None), &visible);
                let tools: Vec<ToolSpec> = visible
                    .iter()
                    .map(|def| ToolSpec::from(def.as_ref()))
                    .collect();
                // What the system prompt and the tools take from the context
                // budget.
                let reserved_tokens = approx_tokens(&Message::system(prompt.clone()))
                    + definition_tokens(&tools)
                    + 64;
                Built {
                    prompt,
                    tools,
                    reserved_tokens,
                }
            })
    }

    /// Runs one input to its end; returns its terminal frame (which is not
    /// also sent to `sink`).
    pub async fn run(&self, input: &TurnInput, control: &TurnControl, sink: &FrameSink) -> Frame {
        match self.run_inner(input, control, sink).await {
            Ok(frame) | Err(frame) => frame,
        }
    }

    async fn run_inner(
        &self,
        input: &TurnInput,
        control: &TurnControl,
        sink: &FrameSink,
    ) -> Result<Frame, Frame> {
        if self.tools.gate().agent(&input.agent).is_none() {
            return Err(Frame::error(
                "agent",
                format!(
                    "unknown agent `{}`; declare it in [[agents]] or use `main`",
                    input.agent
                ),
            ));
        }
        let user = Message::user(input.text.clone());
        // The prompt and the tool list as of this input's start: kept per
        // agent until the tools change, neither built nor measured again.
        let base = self.request_base(&input.agent);
        // The session's last input's history and request, if it kept them:
        // the store then gives only what was added since, and the first
        // request clones, checks and writes only that (see
        // `kept_requests`).
        let kept = self.kept_requests.take(&input.session, &base);
        let known = kept.as_ref().map(|(lineage, kept)| KnownHistory {
            lineage: *lineage,
            len: kept.history.messages().len(),
        });
        // The claim is held until this input ends, and each of its writes
        // holds it until that write has committed: no other input runs the
        // session meanwhile, here or in another process (see
        // `store::claim`). A new session is created
        // with the user message, in one commit (`hold_append_creating`);
        // opening refuses another agent's session first.
        let OpenedInput {
            claim,
            history: loaded,
            lineage,
            from,
        } = self
            .store
            .open_input_after(&input.session, &input.agent, known)
            .await
            .map_err(store_frame)?;
        let (mut history, kept) = match kept {
            Some((kept_lineage, kept))
                if from > 0
                    && lineage == Some(kept_lineage)
                    && from == kept.history.messages().len() =>
            {
                let KeptRequest {
                    request,
                    sent,
                    mut history,
                } = kept;
                history.append(loaded);
                self.kept_requests.reused();
                (history, Some((request, sent)))
            }
            // The store gives a part only of the lineage it was told.
            _ if from > 0 => {
                return Err(Frame::error(
                    "store",
                    "the store gave part of a history the agent did not hold; please report this",
                ));
            }
            _ => (loaded, None),
        };
        #[cfg(debug_assertions)]
        check_history(&self.store, &input.session, &history).await;
        // A model request does not wait for the write before it (the user
        // message, a batch's results; with `sync = "full"`, an fsync). That
        // write is held for a moment (`store::HOLD`) and then committed on
        // its own, or carried by the input's next write (the calls, the
        // reply) if the model answers first; either way it is committed
        // before the next write and before the input ends, whatever its
        // outcome, so the history is stored in order and always, and no
        // reply is sent before the messages it answers are committed.
        let held = self
            .store
            .hold_append_creating(&claim, &input.agent, std::slice::from_ref(&user))
            .map_err(store_frame)?;
        history.push(user);
        let mut pending = Some(held);
        let outcome = self
            .run_turns(
                input,
                control,
                sink,
                Start {
                    claim: &claim,
                    history,
                    lineage,
                    base,
                    kept,
                },
                &mut pending,
            )
            .await;
        settle(&mut pending).await?;
        outcome
    }

    /// The model requests and tool batches of one input, until a reply.
    /// `pending` is the input's last write, still held or committing: the
    /// next write carries it or waits for it.
    async fn run_turns(
        &self,
        input: &TurnInput,
        control: &TurnControl,
        sink: &FrameSink,
        start: Start<'_>,
        pending: &mut Option<HeldWrite>,
    ) -> Result<Frame, Frame> {
        let Start {
            claim,
            mut history,
            lineage,
            base,
            kept,
        } = start;
        let recorded = EventBuffer::default();
        let executor = self.executor(Some(self.event_sink(&recorded, sink)));
        let base_prompt = &base.prompt;
        let reserved = base.reserved_tokens;
        let (mut request, mut sent) = kept.unwrap_or_else(|| {
            let request = ChatRequest {
                model: String::new(),
                messages: Vec::new(),
                tools: base.tools.clone(),
                max_tokens: self.settings.max_tokens,
                temperature: None,
                stream: true,
                rendered: Default::default(),
            };
            (request, RequestMessages::default())
        });
        request.max_tokens = self.settings.max_tokens;
        let mut usage = UsageFrame::default();
        let mut requests = 0u32;
        let mut batches = 0u32;
        let mut last_text = String::new();
        loop {
            if control.stop.is_cancelled() {
                return Err(Frame::error("stopped", "the input was stopped"));
            }
            if control.interrupt.is_cancelled() {
                return Err(Frame::error(
                    "preempted",
                    if requests == 0 {
                        "interrupted by a newer input before it asked the model anything"
                    } else {
                        "interrupted by a newer input after its tools finished"
                    },
                ));
            }
            if batches >= self.settings.max_tool_turns {
                return Ok(Frame::Response {
                    content: last_text,
                    turns: requests,
                    usage,
                    incomplete: Some(Incomplete::ToolTurns {
                        max_tool_turns: self.settings.max_tool_turns,
                    }),
                });
            }
            let unchanged = sent
                .update(
                    &mut request.messages,
                    base_prompt,
                    &history,
                    self.settings.context_tokens,
                    reserved,
                )
                .map_err(|e| {
                    Frame::error(
                        "pairing",
                        format!("the history breaks the call/result pairing: {e}"),
                    )
                })?;
            #[cfg(debug_assertions)]
            check_request(
                &request.messages,
                base_prompt,
                &history,
                &self.settings,
                reserved,
            );
            // The codec copies what it wrote of those for the last request.
            request.rendered.keep_first(unchanged);
            requests += 1;
            let turn = self
                .stream_turn(&mut request, control, sink, &mut usage)
                .await?;
            if turn.calls.is_empty() {
                let incomplete = Incomplete::of_turn(&turn, self.settings.max_tokens);
                let message = Message::Assistant(turn.message());
                self.store
                    .append_after(pending.take(), claim, std::slice::from_ref(&message))
                    .await
                    .map_err(store_frame)?;
                // Committed, carrying every earlier write of the input: the
                // history as the store now holds it.
                history.push(message);
                self.kept_requests.keep(
                    &input.session,
                    lineage,
                    Arc::clone(&base),
                    KeptRequest {
                        request,
                        sent,
                        history,
                    },
                );
                return Ok(Frame::Response {
                    content: turn.text,
                    turns: requests,
                    usage,
                    incomplete,
                });
            }
            let (message, argument_errors) = turn.into_message();
            last_text.clone_from(&message.content);
            batches += 1;
            let mut extras = Map::new();
            extras.insert(AGENT_EXTRA.into(), Value::String(input.agent.clone()));
            extras.insert("session".into(), Value::String(input.session.clone()));
            let batch = BatchContext {
                batch_id: format!(
                    "{}-{}{}-{batches}",
                    input.session,
                    process_tag(),
                    next_batch()
                ),
                extras: extras.into(),
                cancel: control.stop.clone(),
            };
            // The calls are committed before they run: if the process dies
            // mid-batch, the store knows they were started (and answers
            // them `cancelled` on the next load) instead of forgetting
            // tools that may have had effects. Calls that change nothing
            // (every tool read-only) are held instead, and ride with their
            // results: a crash forgets only calls that did nothing, and a
            // quick batch saves a commit (with `sync = "full"`, an fsync)
            // before it runs. A slow one finds them committed by the hold.
            let changes_nothing = self.changes_nothing(&executor, &message.tool_calls);
            let assistant = Message::Assistant(message);
            let calls = std::slice::from_ref(&assistant);
            let held_calls = if changes_nothing {
                let held = self
                    .store
                    .hold_after(pending.take(), claim, calls)
                    .await
                    .map_err(store_frame)?;
                Some(held)
            } else {
                self.store
                    .append_after(pending.take(), claim, calls)
                    .await
                    .map_err(store_frame)?;
                None
            };
            // The calls run from the message that took them, which then
            // joins the history: only the outcomes are wanted, and their
            // strings move into the results.
            let tool_calls = match &assistant {
                Message::Assistant(message) => message.tool_calls.as_slice(),
                _ => &[],
            };
            let (_, outcomes) = executor
                .run_message_calls(tool_calls, &argument_errors, &batch)
                .await;
            history.push(assistant);
            let results: Vec<Message> = outcomes
                .into_iter()
                .map(|outcome| Message::Tool(outcome.into_message()))
                .collect();
            // Committed even when stopped: every call has its outcome. The
            // next request goes out while it commits (see `run_inner`).
            let held = self
                .store
                .hold_results_after(held_calls, claim, &results, recorded.take())
                .await
                .map_err(store_frame)?;
            history.extend(results);
            *pending = Some(held);
        }
    }

    /// Whether every call is to a tool declared read-only and seen by no
    /// hook of `executor`: one the agent does not know (a misspelled name)
    /// might be anything, and a hook is the user's command, which may have
    /// effects of its own.
    fn changes_nothing(&self, executor: &Executor, calls: &[homeagent_core::ToolCall]) -> bool {
        calls.iter().all(|call| {
            let name = &call.name;
            !executor.hooks_see(name)
                && self.tools.definition(name).is_some_and(|def| def.read_only)
        })
    }

    fn system_prompt(&self, executor: &Executor, definitions: &[Arc<ToolDef>]) -> String {
        let mut prompt = format!(
            "You are HomeAgent, a personal agent that acts through tools.\n\n{}",
            execution_order_section_for(executor, definitions)
        );
        if let Some(extra) = &self.settings.system_prompt {
            prompt.push_str("\n\n");
            prompt.push_str(extra);
        }
        prompt
    }

    /// One model request, streamed: text is forwarded as it comes.
    async fn stream_turn(
        &self,
        request: &mut ChatRequest,
        control: &TurnControl,
        sink: &FrameSink,
        usage: &mut UsageFrame,
    ) -> Result<homeagent_core::AssembledTurn, Frame> {
        // Either token ends the stream; which one decides the reply.
        let cancel = CancellationToken::new();
        let guard = cancel.clone().drop_guard();
        let watch = {
            let cancel = cancel.clone();
            let control = control.clone();
            tokio::spawn(async move {
                tokio::select! {
                    () = control.interrupt.cancelled() => cancel.cancel(),
                    () = control.stop.cancelled() => cancel.cancel(),
                    () = cancel.cancelled() => {}
                }
            })
        };
        let result = self.stream_with(request, cancel, sink).await;
        drop(guard);
        let _ = watch.await;
        let ended_by_control = || {
            if control.stop.is_cancelled() {
                Some(Frame::error("stopped", "the input was stopped"))
            } else if control.interrupt.is_cancelled() {
                Some(Frame::error(
                    "preempted",
                    "interrupted by a newer input; the partial reply was dropped",
                ))
            } else {
                None
            }
        };
        match result {
            Ok(turn) => {
                usage.add(&turn.usage);
                // A stream cut by a token is not a reply, even if it ended
                // cleanly at the same moment.
                match ended_by_control() {
                    Some(frame) => Err(frame),
                    None => Ok(turn),
                }
            }
            Err(message) => Err(ended_by_control().unwrap_or(Frame::error("model", message))),
        }
    }

    async fn stream_with(
        &self,
        request: &mut ChatRequest,
        cancel: CancellationToken,
        sink: &FrameSink,
    ) -> Result<homeagent_core::AssembledTurn, String> {
        let (source, mut stream) = match self.sources.stream(request, cancel).await {
            Ok(found) => found,
            Err(FallbackError::Cancelled) => return Err("cancelled".into()),
            Err(error) => return Err(error.to_string()),
        };
        let mut assembler = StreamAssembler::new();
        while let Some(item) = stream.next().await {
            match item {
                Ok(event) => {
                    if let StreamEvent::TextDelta { text } = &event {
                        sink(Frame::ContentDelta { text: text.clone() });
                    }
                    assembler.push(event);
                }
                Err(error) => return Err(format!("model source {source}: {error}")),
            }
        }
        Ok(assembler.finish())
    }

    /// Forwards kernel events as frames at once and keeps their records
    /// (stamped now) in `recorded` for [`Store::hold_results`].
    fn event_sink(
        &self,
        recorded: &EventBuffer,
        sink: &FrameSink,
    ) -> Arc<dyn homeagent_core::EventSink> {
        let recorded = recorded.clone();
        let sink = Arc::clone(sink);
        Arc::new(move |event: ToolEvent| {
            recorded.push(EventRow::from_event(&event));
            sink(Frame::ToolCall(Arc::new(event)));
        })
    }
}

/// A store failure as the input's error frame.
/// What an input's model requests start from.
struct Start<'a> {
    /// The input's claim on its session, which its writes carry.
    claim: &'a SessionClaim,
    /// The session's history, loaded under `lineage`.
    history: CountedHistory,
    lineage: Option<u64>,
    base: Arc<RequestBase>,
    /// The session's last input's request and its state, when its history
    /// continues `history`.
    kept: Option<(ChatRequest, RequestMessages)>,
}

/// Debug builds hold the history an input starts from (its last input's,
/// kept, and what the store added) to the stored one.
#[cfg(debug_assertions)]
async fn check_history(store: &Arc<Store>, session: &str, history: &CountedHistory) {
    let owned = session.to_owned();
    if let Ok(stored) = store.call(move |store| store.history(&owned)).await {
        assert_eq!(
            history.messages(),
            stored,
            "the history of {session} strayed from the store's"
        );
    }
}

/// Debug builds hold every request, kept from an earlier request or input
/// or not, to the one built afresh from the same history: a kept request
/// that strayed from the history would send the model another
/// conversation.
#[cfg(debug_assertions)]
fn check_request(
    messages: &[Message],
    prompt: &str,
    history: &CountedHistory,
    settings: &AgentSettings,
    reserved: usize,
) {
    let mut fresh = Vec::new();
    let built = RequestMessages::default().update(
        &mut fresh,
        prompt,
        history,
        settings.context_tokens,
        reserved,
    );
    if built.is_ok() {
        // The same up to the fresh ids chosen for reused ones: a kept list
        // remints a reused id without knowing the turns to come, and a
        // later call may come with the id it chose (`X`, `X` → `X_2`, then
        // the model's own `X_2`), which a build afresh, knowing every turn,
        // names otherwise. Both lists are valid; only their ids differ.
        assert_eq!(
            with_ids_numbered(messages),
            with_ids_numbered(&fresh),
            "a kept request strayed from the history"
        );
    }
}

/// `messages` with every call id replaced by the order it first appears
/// in (for [`check_request`]).
#[cfg(debug_assertions)]
fn with_ids_numbered(messages: &[Message]) -> Vec<Message> {
    let mut seen: std::collections::HashMap<String, String> = std::collections::HashMap::new();
    let mut number = |id: &mut String| {
        let next = format!("#{}", seen.len());
        *id = seen.entry(std::mem::take(id)).or_insert(next).clone();
    };
    let mut numbered = messages.to_vec();
    for message in &mut numbered {
        match message {
            Message::Assistant(turn) => turn.tool_calls.iter_mut().for_each(|c| number(&mut c.id)),
            Message::Tool(result) => number(&mut result.tool_call_id),
            _ => {}
        }
    }
    numbered
}

fn store_frame(error: StoreError) -> Frame {
    let code = match error {
        StoreError::SessionBusy { .. } | StoreError::SessionWriting { .. } => "session_busy",
        StoreError::AgentMismatch { .. } => "session_conflict",
        _ => "store",
    };
    Frame::error(code, error.to_string())
}

/// Commits the input's last write if it is still held, and waits, once,
/// for its commit.
async fn settle(pending: &mut Option<HeldWrite>) -> Result<(), Frame> {
    match pending.take() {
        Some(held) => held.committed().await.map(|_| ()).map_err(store_frame),
        None => Ok(()),
    }
}

/// The tool events of the batch in flight, in the order the executor
/// emitted them. A plain mutex: pushes are a few nanoseconds and never
/// held across an await.
#[derive(Debug, Clone, Default)]
struct EventBuffer(Arc<Mutex<Vec<EventRow>>>);

impl EventBuffer {
    fn push(&self, record: EventRow) {
        self.0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(record);
    }

    /// Everything recorded so far; the buffer is left empty for the next batch.
    fn take(&self) -> Vec<EventRow> {
        std::mem::take(&mut *self.0.lock().unwrap_or_else(PoisonError::into_inner))
    }
}

/// A tag for this process, put before its batch counter: the counter
/// starts at 1 in every process, and a session continued after a restart
/// (or by another process) must not get an earlier batch's id again (the
/// dashboard draws the calls of one id as one batch). The start second
/// and the pid: two processes share both only if a pid is reused within
/// a second.
fn process_tag() -> &'static str {
    static TAG: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    TAG.get_or_init(|| {
        let secs = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs());
        format!("{secs:x}.{:x}.", std::process::id())
    })
}

fn next_batch() -> u64 {
    use std::sync::atomic::{AtomicU64, Ordering};
    static NEXT: AtomicU64 = AtomicU64::new(1);
    NEXT.fetch_add(1, Ordering::Relaxed)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use homeagent_core::{AssistantMessage, ToolCall, ToolMessage};

    use super::*;
    use crate::context::{CountedHistory, RequestMessages};

    fn calls(id: &str) -> [Message; 2] {
        [
            Message::Assistant(AssistantMessage {
                tool_calls: vec![ToolCall {
                    id: id.into(),
                    name: "t".into(),
                    arguments: serde_json::json!({}),
                    raw_arguments: "{}".into(),
                }],
                ..AssistantMessage::default()
            }),
            Message::Tool(ToolMessage {
                tool_call_id: id.into(),
                name: "t".into(),
                content: "ok".into(),
                success: true,
            }),
        ]
    }

    /// The model reuses `X`, which the kept list remints `X_2`; it then
    /// sends `X_2` itself, which the kept list remints again while a build
    /// afresh (knowing every turn) names the earlier one otherwise. The
    /// debug check takes both as the same request; it panicked.
    #[test]
    fn a_kept_request_whose_reminted_id_the_model_reused_passes_the_check() {
        let settings = AgentSettings::default();
        let mut history = CountedHistory::default();
        let mut sent = RequestMessages::default();
        let mut request = Vec::new();
        history.push(Message::user("go"));
        for id in ["X", "X", "X_2"] {
            sent.update(&mut request, "prompt", &history, settings.context_tokens, 0)
                .unwrap();
            check_request(&request, "prompt", &history, &settings, 0);
            history.extend(calls(id));
        }
        sent.update(&mut request, "prompt", &history, settings.context_tokens, 0)
            .unwrap();
        check_request(&request, "prompt", &history, &settings, 0);
    }
}
