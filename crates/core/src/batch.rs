//! Batch execution: one assistant turn's calls in, one outcome per call out.
//!
//! A batch runs concurrently only when it has more than one call, every
//! call's tool declares itself parallel-safe (and not serial), and no two
//! calls share an order key. Otherwise the whole batch runs in index order:
//! there is no partial parallelism, because a model that mixes a write into a
//! batch of reads cannot know which reads would see it.
//!
//! Whatever happens inside (denial, bad arguments, timeout, panic, stop),
//! every call gets exactly one outcome and the results are finalized in index
//! order, so the next request always pairs every call id with one result.

use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures_util::FutureExt;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use tokio_util::sync::CancellationToken;

use crate::assemble::{ArgumentErrors, AssembledCall, AssembledTurn};
use crate::call_notes::CallNotes;
use crate::event::{EventSink, ToolEvent};
use crate::hooks::{CallInfo, HookFuture, PostToolHook, PreDecision, PreToolHook};
use crate::message::{AssistantMessage, Message, ToolCall, ToolMessage};
use crate::outcome::{
    ErrorReason, ToolError, ToolOutcome, append_warnings, cap_text, error_in_value,
};
use crate::registry::{ToolContext, ToolSource};
use crate::tool::{MissingOrderKey, OrderKey, ToolDef};
use crate::turnstile::{Ticket, Turnstile};
use crate::validate::require_object;

/// Knobs of the executor.
#[derive(Debug, Clone)]
pub struct ExecutorOptions {
    /// When false, every batch runs serially (and the prompt says so).
    pub parallel: bool,
    /// Timeout of a call whose tool declares none.
    pub default_timeout: Duration,
    /// Most bytes of one result's text sent to the model.
    pub result_text_cap: usize,
    /// How long a stopped handler gets to unwind before it is abandoned and
    /// reported (a handler that blocks its thread cannot be interrupted).
    pub abandon_grace: Duration,
}

impl Default for ExecutorOptions {
    fn default() -> Self {
        ExecutorOptions {
            parallel: true,
            default_timeout: Duration::from_secs(60),
            result_text_cap: 32 * 1024,
            abandon_grace: Duration::from_millis(250),
        }
    }
}

/// How a batch will run, and if serially, why.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "mode", rename_all = "snake_case")]
pub enum BatchMode {
    Parallel,
    Serial { reason: SerialReason },
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum SerialReason {
    /// Zero or one call that will run: nothing to overlap.
    SingleCall,
    /// Parallel execution is switched off.
    Disabled,
    UnknownTool {
        tool: String,
    },
    NotParallelSafe {
        tool: String,
    },
    SharedOrderKey {
        key: String,
    },
    /// The tool keys on an argument that this call did not supply.
    MissingOrderKey {
        tool: String,
    },
}

/// What a batch runs under: its id, the caller's extras and its stop switch.
#[derive(Debug, Clone, Default)]
pub struct BatchContext {
    pub batch_id: String,
    /// Shared by every call's context: one map for the whole batch.
    pub extras: Arc<Map<String, Value>>,
    /// Cancelling it stops running calls and answers unstarted ones with
    /// `cancelled` outcomes. A mere preemption should not cancel it.
    pub cancel: CancellationToken,
}

/// The finalized batch: the assistant message and one tool message per call,
/// in index order.
#[derive(Debug, Clone, PartialEq)]
pub struct BatchResult {
    pub mode: BatchMode,
    pub assistant: AssistantMessage,
    pub outcomes: Vec<ToolOutcome>,
    pub tool_messages: Vec<ToolMessage>,
}

impl BatchResult {
    /// The messages to append to the history, in order.
    pub fn messages(&self) -> Vec<Message> {
        std::iter::once(Message::Assistant(self.assistant.clone()))
            .chain(self.tool_messages.iter().cloned().map(Message::Tool))
            .collect()
    }
}

/// One call to run, borrowed from a turn or from the assistant message that
/// took the turn's calls, with the reason it must not run, if any.
#[derive(Debug, Clone, Copy)]
struct CallRef<'a> {
    call: &'a ToolCall,
    argument_error: Option<&'a ToolError>,
}

/// A batch's plan, and whether it must be made again once every call is
/// admitted (see `plan_runnable`).
struct Plan {
    mode: BatchMode,
    key_may_move: bool,
}

/// What every event of a batch says about it.
struct ShownBatch {
    id: Arc<str>,
    size: usize,
    parallel: bool,
    /// The finishing order of a parallel batch with post-hooks (see
    /// `turnstile`).
    finishing: Option<Arc<Turnstile>>,
}

impl ShownBatch {
    /// A call's ticket and its turn to finish, in a batch that has one.
    fn turn(&self, position: usize) -> (Option<Ticket>, Option<Turn<'_>>) {
        match &self.finishing {
            Some(turnstile) => (
                Some(turnstile.ticket(position)),
                Some(Turn {
                    turnstile,
                    position,
                }),
            ),
            None => (None, None),
        }
    }
}

/// Where a call of a parallel batch with post-hooks stands in its
/// finishing order.
#[derive(Clone, Copy)]
struct Turn<'a> {
    turnstile: &'a Turnstile,
    position: usize,
}

/// Runs batches of tool calls against a [`ToolSource`].
#[derive(Clone)]
pub struct Executor {
    inner: Arc<Inner>,
}

#[derive(Clone)]
struct Inner {
    source: Arc<dyn ToolSource>,
    pre_hooks: Vec<Arc<dyn PreToolHook>>,
    post_hooks: Vec<Arc<dyn PostToolHook>>,
    events: Option<Arc<dyn EventSink>>,
    options: ExecutorOptions,
}

impl Executor {
    pub fn new(source: Arc<dyn ToolSource>) -> Self {
        Executor {
            inner: Arc::new(Inner {
                source,
                pre_hooks: Vec::new(),
                post_hooks: Vec::new(),
                events: None,
                options: ExecutorOptions::default(),
            }),
        }
    }

    fn inner_mut(&mut self) -> &mut Inner {
        // Builders run before the executor is shared; after that a clone is
        // made on write so running batches keep their configuration.
        Arc::make_mut(&mut self.inner)
    }

    pub fn with_options(mut self, options: ExecutorOptions) -> Self {
        self.inner_mut().options = options;
        self
    }

    pub fn with_pre_hook(mut self, hook: Arc<dyn PreToolHook>) -> Self {
        self.inner_mut().pre_hooks.push(hook);
        self
    }

    pub fn with_post_hook(mut self, hook: Arc<dyn PostToolHook>) -> Self {
        self.inner_mut().post_hooks.push(hook);
        self
    }

    /// Whether a hook of this executor acts on calls to `tool`
    /// ([`PreToolHook::sees`], [`PostToolHook::sees`]).
    pub fn hooks_see(&self, tool: &str) -> bool {
        let inner = &self.inner;
        inner.pre_hooks.iter().any(|hook| hook.sees(tool))
            || inner.post_hooks.iter().any(|hook| hook.sees(tool))
    }

    pub fn with_events(mut self, sink: Arc<dyn EventSink>) -> Self {
        self.inner_mut().events = Some(sink);
        self
    }

    pub fn options(&self) -> &ExecutorOptions {
        &self.inner.options
    }

    pub fn source(&self) -> &Arc<dyn ToolSource> {
        &self.inner.source
    }

    /// Whether calls of this tool may run beside others, as the planner sees
    /// it. The prompt's list of parallel-safe tools is built from this.
    pub fn tool_runs_in_parallel(&self, def: &ToolDef) -> bool {
        self.inner.options.parallel && def.runs_in_parallel()
    }

    /// Decides how a turn's calls will run. Calls whose arguments failed to
    /// parse never run, so they do not constrain the others.
    pub fn plan(&self, calls: &[AssembledCall]) -> BatchMode {
        self.plan_runnable(
            calls
                .iter()
                .filter(|c| c.argument_error.is_none())
                .map(|c| (c.call.name.as_str(), &c.call.arguments)),
        )
        .mode
    }

    /// Plans the calls that will run, each given as its tool's name and its
    /// arguments.
    fn plan_runnable<'a>(&self, runnable: impl Iterator<Item = (&'a str, &'a Value)>) -> Plan {
        let runnable: Vec<(&str, &Value)> = runnable.collect();
        let serial = |reason| Plan {
            mode: BatchMode::Serial { reason },
            key_may_move: false,
        };
        if runnable.len() <= 1 {
            return serial(SerialReason::SingleCall);
        }
        if !self.inner.options.parallel {
            return serial(SerialReason::Disabled);
        }
        let pre_hooks = &self.inner.pre_hooks;
        let mut keys = std::collections::HashSet::new();
        let mut argument_keyed = 0usize;
        let mut key_may_move = false;
        for (name, arguments) in runnable {
            let tool = || name.to_owned();
            let Some(def) = self.inner.source.definition(name) else {
                return serial(SerialReason::UnknownTool { tool: tool() });
            };
            if !self.tool_runs_in_parallel(&def) {
                return serial(SerialReason::NotParallelSafe { tool: tool() });
            }
            // The arguments a key is read from may change before the
            // handlers get them: a pre-hook may rewrite them (`"NAS"` →
            // `"nas"`), and the schema's coercion may (`"1.0"` → `1` for
            // an integer), so two calls keyed apart here may share a key.
            // Coercion needs two keyed calls to matter.
            if matches!(def.order_key, Some(OrderKey::Argument(_))) {
                argument_keyed += 1;
                key_may_move |= argument_keyed > 1 || pre_hooks.iter().any(|hook| hook.sees(name));
            }
            match def.order_key_for(arguments) {
                Err(MissingOrderKey) => {
                    return serial(SerialReason::MissingOrderKey { tool: tool() });
                }
                Ok(Some(key)) => {
                    if !keys.insert(key.clone()) {
                        return serial(SerialReason::SharedOrderKey { key });
                    }
                }
                Ok(None) => {}
            }
        }
        Plan {
            mode: BatchMode::Parallel,
            key_may_move,
        }
    }

    /// Runs one turn's calls and finalizes them in index order.
    pub async fn run(&self, turn: &AssembledTurn, batch: &BatchContext) -> BatchResult {
        let (mode, outcomes) = self.run_calls(turn, batch).await;
        let tool_messages = outcomes.iter().map(ToolOutcome::to_message).collect();
        BatchResult {
            mode,
            assistant: turn.message(),
            outcomes,
            tool_messages,
        }
    }

    /// Runs one turn's calls: how they ran, and their outcomes in index
    /// order. For a caller that already holds the turn's assistant message
    /// and wants the tool messages by value
    /// ([`ToolOutcome::into_message`]): [`Executor::run`] copies both.
    pub async fn run_calls(
        &self,
        turn: &AssembledTurn,
        batch: &BatchContext,
    ) -> (BatchMode, Vec<ToolOutcome>) {
        let calls = turn.calls.iter().map(|c| CallRef {
            call: &c.call,
            argument_error: c.argument_error.as_ref(),
        });
        self.plan_and_run(calls, batch).await
    }

    /// [`Executor::run_calls`] for a turn moved into its assistant message
    /// ([`AssembledTurn::into_message`]): `calls` are the message's, and
    /// `errors` the argument errors that came with it.
    pub async fn run_message_calls(
        &self,
        calls: &[ToolCall],
        errors: &ArgumentErrors,
        batch: &BatchContext,
    ) -> (BatchMode, Vec<ToolOutcome>) {
        let calls = calls.iter().enumerate().map(|(position, call)| CallRef {
            call,
            argument_error: errors.get(position),
        });
        self.plan_and_run(calls, batch).await
    }

    /// Plans `calls` (those with an argument error never run, so they do
    /// not constrain the others) and runs them as planned.
    async fn plan_and_run<'a>(
        &self,
        calls: impl ExactSizeIterator<Item = CallRef<'a>> + Clone,
        batch: &BatchContext,
    ) -> (BatchMode, Vec<ToolOutcome>) {
        let Plan { mode, key_may_move } = self.plan_runnable(
            calls
                .clone()
                .filter(|c| c.argument_error.is_none())
                .map(|c| (c.call.name.as_str(), &c.call.arguments)),
        );
        // One id for every event of the batch, not a copy per event.
        let parallel = mode == BatchMode::Parallel || key_may_move;
        let shown = ShownBatch {
            id: Arc::from(batch.batch_id.as_str()),
            size: calls.len(),
            parallel: mode == BatchMode::Parallel,
            finishing: (parallel && !self.inner.post_hooks.is_empty())
                .then(|| Turnstile::new(calls.len())),
        };
        if key_may_move {
            return self.run_hooked_parallel(calls, batch, &shown).await;
        }
        (mode, self.run_planned(calls, batch, &shown).await)
    }

    async fn run_planned<'a>(
        &self,
        calls: impl ExactSizeIterator<Item = CallRef<'a>>,
        batch: &BatchContext,
        shown: &ShownBatch,
    ) -> Vec<ToolOutcome> {
        if shown.parallel {
            futures_util::future::join_all(
                calls
                    .enumerate()
                    .map(|(position, c)| self.run_one(c, position, batch, shown)),
            )
            .await
        } else {
            let mut outcomes = Vec::with_capacity(shown.size);
            for (position, c) in calls.enumerate() {
                outcomes.push(self.run_one(c, position, batch, shown).await);
            }
            outcomes
        }
    }

    /// A parallel batch where a pre-hook or the schema's coercion may
    /// change the argument an order key is read from (`"NAS"` → `"nas"`,
    /// `"1.0"` → `1`; see `plan_runnable`), so the plan made from the
    /// model's arguments is checked again against the arguments the handlers
    /// will get: every call's pre-hooks run first (concurrently), then the
    /// handlers run together, or one after another in index order when the
    /// rewritten arguments put two calls on one key. A call's Start is
    /// reported once the plan is final (so its events agree on how the batch
    /// ran); its duration is its hooks' time plus the time from its Start,
    /// not the wait for other calls.
    async fn run_hooked_parallel<'a>(
        &self,
        calls: impl Iterator<Item = CallRef<'a>>,
        batch: &BatchContext,
        planned: &ShownBatch,
    ) -> (BatchMode, Vec<ToolOutcome>) {
        let staged: Vec<Staged<'a>> =
            futures_util::future::join_all(calls.map(|call| async move {
                let started = Instant::now();
                let notes = CallNotes::default();
                let admission = notes.scope(self.admit(call, batch, &notes)).await;
                (started.elapsed(), call, notes, admission)
            }))
            .await;
        let replanned = self
            .plan_runnable(
                staged
                    .iter()
                    .filter_map(|(_, _, _, admission)| match admission {
                        Admission::Admitted(a) => Some(a),
                        Admission::Settled(_) => None,
                    })
                    .map(|a| (a.call.call.name.as_str(), &a.info.arguments)),
            )
            .mode;
        // Tool names never change, so only a key can make the batch serial
        // now; fewer calls left to run is no reason to report one.
        let mode = match replanned {
            BatchMode::Serial {
                reason:
                    reason
                    @ (SerialReason::SharedOrderKey { .. } | SerialReason::MissingOrderKey { .. }),
            } => BatchMode::Serial { reason },
            _ => BatchMode::Parallel,
        };
        let shown = &ShownBatch {
            id: Arc::clone(&planned.id),
            size: planned.size,
            parallel: mode == BatchMode::Parallel,
            finishing: planned
                .finishing
                .as_ref()
                .filter(|_| mode == BatchMode::Parallel)
                .map(Arc::clone),
        };
        let finish = |(position, (hooks_took, call, notes, admission)): (usize, Staged<'a>)| async move {
            let (_ticket, turn) = shown.turn(position);
            // The call's own time: its hooks, then from its Start on; not
            // the wait for the other calls' hooks or handlers.
            let started = Instant::now()
                .checked_sub(hooks_took)
                .unwrap_or_else(Instant::now);
            self.emit_start(call, shown);
            let outcome = match admission {
                Admission::Admitted(admitted) => {
                    notes
                        .scope(self.complete(admitted, batch, &notes, turn))
                        .await
                }
                Admission::Settled(outcome) => outcome,
            };
            self.finished(with_notes(&notes, outcome), started, shown)
        };
        let outcomes = if shown.parallel {
            futures_util::future::join_all(staged.into_iter().enumerate().map(finish)).await
        } else {
            let mut outcomes = Vec::with_capacity(shown.size);
            for stage in staged.into_iter().enumerate() {
                outcomes.push(finish(stage).await);
            }
            outcomes
        };
        (mode, outcomes)
    }

    async fn run_one(
        &self,
        call: CallRef<'_>,
        position: usize,
        batch: &BatchContext,
        shown: &ShownBatch,
    ) -> ToolOutcome {
        // Held until the call's end is reported: the next call's post-hooks
        // wait for it (see `turnstile`).
        let (_ticket, turn) = shown.turn(position);
        let started = Instant::now();
        self.emit_start(call, shown);
        let outcome = self.execute(call, batch, turn).await;
        self.finished(outcome, started, shown)
    }

    fn emit_start(&self, call: CallRef<'_>, shown: &ShownBatch) {
        self.emit(|| ToolEvent::Start {
            call_id: call.call.id.clone(),
            tool: call.call.name.clone(),
            args: call.call.arguments.clone(),
            batch_id: Arc::clone(&shown.id),
            batch_size: shown.size,
            parallel: shown.parallel,
        });
    }

    /// Caps the outcome's text, appends its warnings and reports its end.
    fn finished(
        &self,
        mut outcome: ToolOutcome,
        started: Instant,
        shown: &ShownBatch,
    ) -> ToolOutcome {
        if let std::borrow::Cow::Owned(capped) =
            cap_text(&outcome.text, self.inner.options.result_text_cap)
        {
            outcome.text = capped;
        }
        // After the cap, so a long result cannot push its warnings out of
        // what the model reads.
        append_warnings(&mut outcome.text, &outcome.warnings);
        self.emit(|| ToolEvent::End {
            call_id: outcome.call_id.clone(),
            tool: outcome.tool.clone(),
            batch_id: Arc::clone(&shown.id),
            batch_size: shown.size,
            parallel: shown.parallel,
            status: outcome.status(),
            success: outcome.success,
            duration_ms: u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX),
            error: outcome.error.clone(),
            warnings: outcome.warnings.clone(),
        });
        outcome
    }

    /// Builds the event only when someone listens: the copies it takes are
    /// a measurable share of a no-op call's cost.
    fn emit(&self, event: impl FnOnce() -> ToolEvent) {
        if let Some(sink) = &self.inner.events {
            sink.emit(event());
        }
    }

    /// Runs one call inside its own notes scope (see [`crate::call_notes`])
    /// and moves the notes' warnings onto the outcome, first to last.
    async fn execute(
        &self,
        call: CallRef<'_>,
        batch: &BatchContext,
        turn: Option<Turn<'_>>,
    ) -> ToolOutcome {
        let notes = CallNotes::default();
        let outcome = notes
            .scope(async {
                match self.admit(call, batch, &notes).await {
                    Admission::Admitted(admitted) => {
                        self.complete(admitted, batch, &notes, turn).await
                    }
                    Admission::Settled(outcome) => outcome,
                }
            })
            .await;
        with_notes(&notes, outcome)
    }

    /// Everything before the handler: the argument error, the stop switch,
    /// the schema and the pre-hooks.
    async fn admit<'a>(
        &self,
        call: CallRef<'a>,
        batch: &BatchContext,
        notes: &CallNotes,
    ) -> Admission<'a> {
        let id = call.call.id.as_str();
        let name = call.call.name.as_str();
        let fail = |error: ToolError| Admission::Settled(ToolOutcome::failure(id, name, error));
        if let Some(error) = call.argument_error {
            return fail(error.clone());
        }
        if batch.cancel.is_cancelled() {
            return fail(not_started());
        }
        let inner = &self.inner;
        let def = inner.source.definition(name);
        let mut info = CallInfo {
            call_id: id.to_owned(),
            tool: name.to_owned(),
            arguments: call.call.arguments.clone(),
            batch_id: batch.batch_id.clone(),
            extras: Arc::clone(&batch.extras),
        };
        // The source's own refusal (the gate's) comes first: a hook never
        // acts on a call that cannot run, and an argument error would show
        // the schema of a tool the caller may not use.
        if let Some(error) = inner
            .source
            .refusal(&info)
            .or_else(|| inner.source.approval_refusal(&info))
        {
            return fail(error);
        }
        if let Some(def) = &def {
            match def.compiled_schema().prepare(name, &mut info.arguments) {
                Ok(w) => w.into_iter().for_each(|w| notes.push_warning(w)),
                Err(error) => return fail(error),
            }
        }
        for hook in inner.pre_hooks.iter().filter(|hook| hook.sees(name)) {
            let hook_name = hook.name().to_owned();
            // A stop drops the hook where it is (a command hook's process
            // group dies with it): the call has not started.
            let decided = tokio::select! {
                decided = guarded(|| hook.before(&info)) => decided,
                () = batch.cancel.cancelled() => return fail(not_started()),
            };
            match decided {
                Ok(PreDecision::Allow) => {}
                Ok(PreDecision::Deny { reason }) => {
                    return fail(ToolError::new(ErrorReason::Denied, reason));
                }
                Ok(PreDecision::Rewrite { arguments }) => {
                    info.arguments = arguments;
                    let checked = match &def {
                        Some(def) => def.compiled_schema().prepare(name, &mut info.arguments),
                        None => require_object(&info.arguments).map(|()| Vec::new()),
                    };
                    match checked {
                        Ok(w) => w.into_iter().for_each(|w| notes.push_warning(w)),
                        Err(mut error) => {
                            error.detail = format!(
                                "{} (after hook {hook_name} rewrote the arguments)",
                                error.detail
                            );
                            return fail(error);
                        }
                    }
                }
                Err(problem) => {
                    return fail(ToolError::new(
                        ErrorReason::Denied,
                        format!(
                            "pre-tool hook {hook_name} {problem}; the call was not run (hooks fail closed)"
                        ),
                    ));
                }
            }
        }

        Admission::Admitted(Admitted { call, def, info })
    }

    /// The handler and the post-hooks of an admitted call.
    async fn complete(
        &self,
        admitted: Admitted<'_>,
        batch: &BatchContext,
        notes: &CallNotes,
        turn: Option<Turn<'_>>,
    ) -> ToolOutcome {
        let Admitted { call, def, info } = admitted;
        let id = call.call.id.as_str();
        let name = call.call.name.as_str();
        let fail = |error: ToolError| ToolOutcome::failure(id, name, error);
        // A hooked parallel batch admits every call before it runs any.
        if batch.cancel.is_cancelled() {
            return fail(not_started());
        }
        let inner = &self.inner;
        // Checked without a definition (the tool was missing then): a tool
        // that has appeared since (an MCP server back from a restart)
        // would run arguments nobody validated. Said, not run.
        if def.is_none() && inner.source.definition(name).is_some() {
            return fail(ToolError::new(
                ErrorReason::NotFound,
                format!(
                    "tool {name} was not available when this call was checked (its server may \
                     have been restarting), so its arguments were never validated; it did not \
                     run, call it again"
                ),
            ));
        }
        let timeout = def
            .as_ref()
            .and_then(|d| d.timeout)
            .unwrap_or(inner.options.default_timeout);
        let call_cancel = batch.cancel.child_token();
        // The post-hooks read `info` after the call; without any, the
        // handler takes its fields instead of copies.
        let kept = (!inner.post_hooks.is_empty()).then(|| info.clone());
        let ctx = ToolContext::from_info(info, call_cancel.clone());
        let mut outcome = match self
            .dispatch(name, ctx, timeout, &call_cancel, &batch.cancel, notes)
            .await
        {
            Ok(value) => {
                let mut outcome = ToolOutcome::from_value(id, name, value);
                if let Some(text) = notes.take_text()
                    && outcome.success
                {
                    outcome.text = text;
                }
                outcome
            }
            Err(error) => fail(error),
        };
        let Some(info) = kept else {
            return outcome;
        };
        // A stopped batch runs no post-hook: a stopped call has no result
        // to show one, and a stop must not wait for hooks (deciding this
        // up front, not by racing each hook against the stop, makes it the
        // same every time).
        if batch.cancel.is_cancelled() {
            if inner.post_hooks.iter().any(|hook| hook.sees(name)) {
                notes.push_warning(
                    "the post-tool hooks did not run: the batch was stopped".to_owned(),
                );
            }
            return outcome;
        }
        // In a parallel batch, post-hooks run one call at a time, in index
        // order: this call's wait for the ones before it.
        if let Some(turn) = turn
            && inner.post_hooks.iter().any(|hook| hook.sees(name))
        {
            tokio::select! {
                () = turn.turnstile.earlier_finished(turn.position) => {}
                () = batch.cancel.cancelled() => {
                    notes.push_warning(
                        "the post-tool hooks did not run: the batch was stopped".to_owned(),
                    );
                    return outcome;
                }
            }
        }
        for hook in inner.post_hooks.iter().filter(|hook| hook.sees(name)) {
            let hook_name = hook.name().to_owned();
            // A stop drops a running post-hook (and the ones after it): the
            // call's result stands as the tool returned it.
            let replied = tokio::select! {
                replied = guarded(|| hook.after(&info, &outcome)) => replied,
                () = batch.cancel.cancelled() => {
                    notes.push_warning(format!(
                        "post-tool hook {hook_name} was stopped with the batch; the result was \
                         kept as the tool returned it"
                    ));
                    break;
                }
            };
            match replied {
                // A hook may reword a failure, never turn it into a
                // success: the model would be told a call worked.
                Ok(Some(value)) if !outcome.success && error_in_value(&value).is_none() => {
                    notes.push_warning(format!(
                        "post-tool hook {hook_name} replaced a failed call's result with one \
                         that reads as a success; the failure was kept"
                    ));
                }
                Ok(Some(value)) => outcome.replace_value(value),
                Ok(None) => {}
                Err(problem) => notes.push_warning(format!(
                    "post-tool hook {hook_name} {problem}; the result was kept as the tool returned it"
                )),
            }
        }
        outcome
    }

    /// Runs the handler on its own task, so that a panic stays inside it and
    /// a stop can drop it wherever it is.
    async fn dispatch(
        &self,
        name: &str,
        ctx: ToolContext,
        timeout: Duration,
        call_cancel: &CancellationToken,
        batch_cancel: &CancellationToken,
        notes: &CallNotes,
    ) -> Result<Value, ToolError> {
        let source = &self.inner.source;
        let invoked = notes
            .sync_scope(|| std::panic::catch_unwind(AssertUnwindSafe(|| source.invoke(name, ctx))));
        let future = match invoked {
            Ok(future) => future,
            Err(payload) => return Err(panic_error(name, &payload)),
        };
        // A task-local does not follow a spawn: the handler's task gets the
        // call's notes explicitly.
        let handler_notes = notes.clone();
        let mut handle = AbortOnDrop(tokio::spawn(
            async move { handler_notes.scope(future).await },
        ));
        enum Ended {
            Joined(Result<Result<Value, ToolError>, tokio::task::JoinError>),
            TimedOut,
            Stopped,
        }
        let ended = tokio::select! {
            biased;
            joined = &mut handle.0 => Ended::Joined(joined),
            () = batch_cancel.cancelled() => Ended::Stopped,
            () = run_out(timeout, notes) => Ended::TimedOut,
        };
        match ended {
            Ended::Joined(Ok(result)) => result,
            Ended::Joined(Err(join_error)) => match join_error.try_into_panic() {
                Ok(payload) => Err(panic_error(name, &payload)),
                Err(_) => Err(ToolError::new(
                    ErrorReason::Cancelled,
                    "the call's task was cancelled before it finished",
                )),
            },
            Ended::TimedOut => {
                call_cancel.cancel();
                let abandoned = match self.stop(handle).await {
                    // It finished as the timeout fired: its result stands.
                    Halted::Finished(result) => return result,
                    Halted::Stopped { abandoned } => abandoned,
                };
                Err(ToolError::new(
                    ErrorReason::Timeout,
                    format!(
                        "tool {name} did not finish within {}; it was stopped{}",
                        human_duration(timeout),
                        abandoned_note(abandoned)
                    ),
                )
                .with_hint("do less per call (a narrower query, a smaller file), or ask for a longer timeout if the tool takes one"))
            }
            Ended::Stopped => {
                call_cancel.cancel();
                let abandoned = match self.stop(handle).await {
                    // It finished as the stop came: what it did is done,
                    // and its result says so.
                    Halted::Finished(result) => return result,
                    Halted::Stopped { abandoned } => abandoned,
                };
                Err(ToolError::new(
                    ErrorReason::Cancelled,
                    format!(
                        "the call was stopped before it finished{}",
                        abandoned_note(abandoned)
                    ),
                ))
            }
        }
    }

    /// Drops a running handler. On a multi-threaded runtime it may have
    /// finished between the timeout or stop firing and the abort: then its
    /// result is returned, not thrown away (a call whose work is done must
    /// not be reported as not done).
    async fn stop<T>(&self, mut handle: AbortOnDrop<T>) -> Halted<T> {
        handle.0.abort();
        match tokio::time::timeout(self.inner.options.abandon_grace, &mut handle.0).await {
            Ok(Ok(result)) => Halted::Finished(result),
            Ok(Err(_)) => Halted::Stopped { abandoned: false },
            // It did not unwind within the grace period: it blocks its
            // thread, and is abandoned.
            Err(_) => Halted::Stopped { abandoned: true },
        }
    }
}

/// Ends once a call has run for `timeout`, not counting the time its clock
/// was stopped ([`crate::call_notes::pause_clock`]: a person's answer
/// awaited). Without a pause it is one sleep.
async fn run_out(timeout: Duration, notes: &CallNotes) {
    let start = tokio::time::Instant::now();
    let mut until = start + timeout;
    loop {
        tokio::time::sleep_until(until).await;
        let now = tokio::time::Instant::now();
        let due = start + timeout + notes.paused_for(now);
        if due <= now {
            return;
        }
        until = due;
    }
}

/// How [`Executor::stop`] left a handler.
#[derive(Debug)]
enum Halted<T> {
    /// It had finished, with this result.
    Finished(T),
    Stopped {
        abandoned: bool,
    },
}

/// A handler's task, aborted when its call's future is dropped: a batch
/// dropped by its caller (an outer timeout, a nested batch whose calling
/// tool was stopped) must not leave handlers running on their own after
/// their calls were reported stopped, where a serial tool could overlap
/// the next call.
struct AbortOnDrop<T>(tokio::task::JoinHandle<T>);

impl<T> Drop for AbortOnDrop<T> {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// A call that passed its checks and its pre-hooks, ready for its handler.
struct Admitted<'a> {
    call: CallRef<'a>,
    def: Option<Arc<ToolDef>>,
    info: CallInfo,
}

/// Where a call stands after its pre-hooks.
enum Admission<'a> {
    /// Ready for its handler.
    Admitted(Admitted<'a>),
    /// Settled without running: its final outcome.
    Settled(ToolOutcome),
}

/// A call of a hooked parallel batch between its pre-hooks and its handler:
/// how long its pre-hooks took, the call, its notes, and its admission.
type Staged<'a> = (Duration, CallRef<'a>, CallNotes, Admission<'a>);

/// Moves the notes' warnings onto the outcome, first to last.
fn with_notes(notes: &CallNotes, mut outcome: ToolOutcome) -> ToolOutcome {
    let mut warnings = notes.take_warnings();
    warnings.append(&mut outcome.warnings);
    outcome.warnings = warnings;
    outcome
}

fn not_started() -> ToolError {
    ToolError::new(
        ErrorReason::Cancelled,
        "the batch was stopped before this call started; it did not run",
    )
}

/// Runs a hook, turning its error or panic into a description.
async fn guarded<T>(make: impl FnOnce() -> HookFuture<T>) -> Result<T, String> {
    let future = match std::panic::catch_unwind(AssertUnwindSafe(make)) {
        Ok(future) => future,
        Err(payload) => return Err(format!("panicked: {}", panic_message(&payload))),
    };
    match AssertUnwindSafe(future).catch_unwind().await {
        Ok(Ok(value)) => Ok(value),
        Ok(Err(message)) => Err(format!("failed: {message}")),
        Err(payload) => Err(format!("panicked: {}", panic_message(&payload))),
    }
}

fn panic_error(tool: &str, payload: &Box<dyn std::any::Any + Send>) -> ToolError {
    ToolError::new(
        ErrorReason::Panic,
        format!("tool {tool} crashed (panic: {})", panic_message(payload)),
    )
    .with_hint(
        "this is a fault in the tool, not in your arguments; do not retry the same call as-is",
    )
}

fn panic_message(payload: &Box<dyn std::any::Any + Send>) -> String {
    if let Some(s) = payload.downcast_ref::<&str>() {
        (*s).to_owned()
    } else if let Some(s) = payload.downcast_ref::<String>() {
        s.clone()
    } else {
        "no message".to_owned()
    }
}

fn abandoned_note(abandoned: bool) -> &'static str {
    if abandoned {
        " (its handler blocks its thread and did not stop; it was abandoned and may still be running)"
    } else {
        ""
    }
}

fn human_duration(d: Duration) -> String {
    if d.subsec_millis() == 0 {
        format!("{}s", d.as_secs())
    } else {
        format!("{}ms", d.as_millis())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A handler that finished just as its timeout or stop fired (the
    /// abort comes too late) keeps its result; one still running is
    /// stopped.
    #[tokio::test]
    async fn stopping_a_handler_that_already_finished_keeps_its_result() {
        let executor = Executor::new(Arc::new(crate::Registry::new()));
        let done = AbortOnDrop(tokio::spawn(async { 7 }));
        while !done.0.is_finished() {
            tokio::task::yield_now().await;
        }
        assert!(matches!(executor.stop(done).await, Halted::Finished(7)));
        let running = AbortOnDrop(tokio::spawn(std::future::pending::<u8>()));
        assert!(matches!(
            executor.stop(running).await,
            Halted::Stopped { abandoned: false }
        ));
    }
}
