//! Running sequences.
//!
//! Groups run one after another. Inside a group, calls run concurrently
//! only when the group says `parallel`, the executor allows parallelism,
//! every tool is parallel-safe *now* (tools come and go, so definitions are
//! looked up at run time and never cached) and no two calls share an order
//! key; otherwise serially in declaration order. Either way results meet at
//! a barrier and merge in declaration order, whatever order they finished
//! in, so array slots append in declaration order.
//!
//! Every call goes through [`ToolApi`] as the *calling* agent, so the
//! authorization gate, the kernel's validation, timeouts and hooks apply
//! exactly as to a model's call: a sequence can never do what its caller
//! could not. A nested `seq_call "#Other"` is itself such a call, and the
//! stack of sequences travels in the call's extras so that the depth bound
//! ([`MAX_DEPTH`]) holds across the whole chain.

use std::sync::Arc;
use std::time::Duration;

use futures_util::future::join_all;
use homeagent_core::{CallInfo, CancellationToken, ErrorReason, MissingOrderKey, ToolSource};
use homeagent_tools::{AGENT_EXTRA, ToolApi};
use serde_json::{Map, Value};

mod caller;

pub use caller::{Caller, SeqBackend};

use crate::check::is_forbidden;
use crate::cond;
use crate::model::{Group, MissingPolicy, OnError, Sequence, ToolStep};
use crate::report::{CallReport, CallStatus, GroupReport, GroupStatus, RunReport, RunStatus};
use crate::store::SeqStore;
use crate::subst::substitute;
use crate::tools::SEQ_WHEN_CALL;

/// Most sequence levels (runs and `seq_call` entries) one chain may nest:
/// a chain `#A → #B → #C → #D` runs; a fifth level fails that branch.
pub const MAX_DEPTH: usize = 4;

/// Extras key: the chain of sequence frames above a call (`["#A", "#B/g"]`).
pub const STACK_EXTRA: &str = "seq_stack";
/// Extras key: the sequence a call is made from.
pub const CURRENT_EXTRA: &str = "seq_current";

/// First retry delay; doubles per attempt, up to [`MAX_BACKOFF`].
pub const FIRST_BACKOFF: Duration = Duration::from_millis(100);
pub const MAX_BACKOFF: Duration = Duration::from_secs(2);

/// Runs sequences and groups.
#[derive(Debug, Clone)]
pub struct Engine {
    backend: SeqBackend,
    store: Arc<SeqStore>,
}

impl Engine {
    pub fn new(backend: SeqBackend, store: Arc<SeqStore>) -> Self {
        Engine { backend, store }
    }

    pub fn store(&self) -> &Arc<SeqStore> {
        &self.store
    }

    /// Loads and runs the stored sequence `name`.
    pub async fn run_named(
        &self,
        name: &str,
        args: Map<String, Value>,
        caller: &Caller,
    ) -> RunReport {
        match self.store.load(name) {
            Ok(seq) => self.run_sequence(&seq, args, caller).await,
            Err(error) => RunReport::refused(name, error.to_string()),
        }
    }

    /// Runs every group of `seq` in order.
    pub async fn run_sequence(
        &self,
        seq: &Sequence,
        args: Map<String, Value>,
        caller: &Caller,
    ) -> RunReport {
        let caller = match caller.enter(format!("#{}", seq.name)) {
            Ok(caller) => caller,
            Err(error) => return RunReport::refused(&seq.name, error),
        };
        let mut slots: Map<String, Value> = Map::new();
        let mut groups = Vec::with_capacity(seq.groups.len());
        let mut status = RunStatus::Completed;
        let mut error = None;
        for group in &seq.groups {
            if status == RunStatus::Aborted {
                groups.push(GroupReport::new(&group.name, GroupStatus::NotRun));
                continue;
            }
            let mut group_args = args.clone();
            for (k, v) in &slots {
                group_args.insert(k.clone(), v.clone());
            }
            let report = self.run_group(seq, group, &group_args, &caller).await;
            merge_slots(&mut slots, group, &report.slots);
            if report.status == GroupStatus::Failed {
                if group.on_error == OnError::Continue {
                    status = RunStatus::CompletedWithErrors;
                } else {
                    status = RunStatus::Aborted;
                    error = Some(format!(
                        "group \"{}\" failed: {}",
                        group.name,
                        report.error.as_deref().unwrap_or("a call failed")
                    ));
                }
            }
            groups.push(report);
        }
        RunReport {
            sequence: seq.name.clone(),
            status,
            groups,
            slots,
            error,
        }
    }

    /// Runs one group of `seq` as its own entry (`seq_call` on a group).
    pub async fn run_group_entry(
        &self,
        seq: &Sequence,
        group_name: &str,
        args: Map<String, Value>,
        caller: &Caller,
    ) -> GroupReport {
        let Some(group) = seq.group(group_name) else {
            let names: Vec<&str> = seq.groups.iter().map(|g| g.name.as_str()).collect();
            let mut report = GroupReport::new(group_name, GroupStatus::Failed);
            report.error = Some(format!(
                "sequence \"{}\" has no group \"{group_name}\" (groups: {})",
                seq.name,
                names.join(", ")
            ));
            return report;
        };
        match caller.enter(format!("#{}/{}", seq.name, group.name)) {
            Ok(caller) => self.run_group(seq, group, &args, &caller).await,
            Err(error) => {
                let mut report = GroupReport::new(group_name, GroupStatus::Failed);
                report.error = Some(error);
                report
            }
        }
    }

    async fn run_group(
        &self,
        seq: &Sequence,
        group: &Group,
        args: &Map<String, Value>,
        caller: &Caller,
    ) -> GroupReport {
        let mut report = GroupReport::new(&group.name, GroupStatus::Ran);
        // The group's contract: what it declared it reads, of the kinds it
        // declared, before its condition or any call reads them.
        for (key, declared) in &group.inputs {
            if let Some(value) = args.get(key)
                && !declared.accepts(value)
            {
                report.status = GroupStatus::Failed;
                report.error = Some(format!(
                    "input `{key}` is declared {}, but its value is {}; pass a value of that type \
                     (or declare the type it is)",
                    declared.as_str(),
                    crate::display::cut(&crate::display::value_text(value), 80)
                ));
                return report;
            }
        }
        match cond::evaluate(&group.when, args) {
            Ok(true) => {}
            Ok(false) => {
                report.status = GroupStatus::Skipped;
                return report;
            }
            Err(error) => {
                report.status = GroupStatus::Failed;
                report.error = Some(format!(
                    "condition `{}` could not be evaluated: {error}",
                    group.when
                ));
                return report;
            }
        }

        // A tool no sequence may call is refused however it got in (a file
        // written by hand or by an older build): checked when saved, and
        // here again before anything runs.
        if let Some(step) = group.tools.iter().find(|step| is_forbidden(&step.tool)) {
            report.status = GroupStatus::Failed;
            report.error = Some(format!(
                "group `{}` calls the forbidden tool `{}`, which no sequence may call; remove \
                 it from the sequence",
                group.name, step.tool
            ));
            return report;
        }
        // Before anything runs: which tools exist now, and their arguments.
        let mut planned: Vec<Planned> = Vec::with_capacity(group.tools.len());
        let mut all_safe = true;
        let mut order_keys: Vec<String> = Vec::new();
        for step in &group.tools {
            let def = self.backend.source.definition(&step.tool);
            let Some(def) = def else {
                planned.push(Planned::Missing);
                continue;
            };
            match substitute_step(step, args) {
                Ok(call_args) => {
                    all_safe &= def.runs_in_parallel();
                    // Each step runs as its own batch, so nothing plans
                    // again after a pre-hook rewrote a key: a keyed tool a
                    // hook sees runs in order (`NAS` may become `nas`).
                    if def.order_key.is_some() && self.backend.api.hooks_see(&step.tool) {
                        all_safe = false;
                    }
                    // The kernel's rule for keys, so a sequence and a
                    // model's batch agree on which calls may overlap; read
                    // after coercion, as the handler will get them.
                    match def.order_key_for_prepared(&call_args) {
                        Ok(Some(key)) if order_keys.contains(&key) => all_safe = false,
                        Ok(Some(key)) => order_keys.push(key),
                        Ok(None) => {}
                        Err(MissingOrderKey) => all_safe = false,
                    }
                    planned.push(Planned::Call(call_args));
                }
                Err(error) => planned.push(Planned::BadArgs(error.to_string())),
            }
        }
        let runnable = planned
            .iter()
            .filter(|p| matches!(p, Planned::Call(_)))
            .count();
        let parallel = group.parallel && self.backend.parallel && all_safe && runnable > 1;
        report.mode = Some(if parallel { "parallel" } else { "serial" });

        let mut extras = caller.extras.clone();
        extras.insert(
            STACK_EXTRA.into(),
            Value::Array(caller.stack.iter().cloned().map(Value::String).collect()),
        );
        extras.insert(CURRENT_EXTRA.into(), Value::String(seq.name.clone()));
        let token = caller.cancel.child_token();
        let ctx = CallCtx {
            api: &self.backend.api,
            source: self.backend.source.as_ref(),
            agent: &caller.agent,
            written_by: seq
                .author
                .as_deref()
                .map(|author| (seq.name.as_str(), author)),
            extras: &extras,
            token: &token,
            group,
        };
        let work = async {
            if parallel {
                join_all(
                    group
                        .tools
                        .iter()
                        .zip(&planned)
                        .map(|(s, p)| ctx.run_step(s, p)),
                )
                .await
            } else {
                let mut done = Vec::with_capacity(planned.len());
                for (step, plan) in group.tools.iter().zip(&planned) {
                    done.push(ctx.run_step(step, plan).await);
                }
                done
            }
        };
        tokio::pin!(work);
        let mut timed_out = false;
        let calls = tokio::select! {
            calls = &mut work => calls,
            () = tokio::time::sleep(group.timeout) => {
                // Stop what is running (and what has not started), then
                // collect every call's outcome: each still gets one.
                timed_out = true;
                token.cancel();
                work.await
            }
        };

        // The barrier: merge in declaration order.
        let mut first_error: Option<String> = None;
        for (step, call) in group.tools.iter().zip(calls) {
            match call.status {
                CallStatus::Missing => report.missing.push(step.tool.clone()),
                CallStatus::Degraded => {
                    report.missing.push(step.tool.clone());
                    write_slot(
                        &mut report.slots,
                        group,
                        step,
                        call.value.clone().unwrap_or(Value::Null),
                    );
                }
                CallStatus::Ok => {
                    write_slot(
                        &mut report.slots,
                        group,
                        step,
                        call.value.clone().unwrap_or(Value::Null),
                    );
                }
                CallStatus::Skipped => {}
                CallStatus::Failed => {
                    if first_error.is_none() {
                        first_error = call.error.clone();
                    }
                }
            }
            report.calls.push(call);
        }
        if timed_out {
            report.status = GroupStatus::Failed;
            report.error = Some(format!(
                "the group did not finish within its timeout of {}; unfinished calls were stopped",
                crate::model::duration_text::format(&group.timeout)
            ));
        } else if let Some(error) = first_error {
            report.status = GroupStatus::Failed;
            report.error = Some(error);
        }
        report
    }
}

enum Planned {
    Call(Value),
    Missing,
    BadArgs(String),
}

struct CallCtx<'a> {
    api: &'a ToolApi,
    /// For a second look when a call answers "not found".
    source: &'a dyn ToolSource,
    agent: &'a str,
    /// The sequence and the agent that wrote it, when an agent did: its
    /// steps run only tools that agent may use, whoever runs them.
    written_by: Option<(&'a str, &'a str)>,
    extras: &'a Map<String, Value>,
    token: &'a CancellationToken,
    group: &'a Group,
}

impl CallCtx<'_> {
    async fn run_step(&self, step: &ToolStep, plan: &Planned) -> CallReport {
        let mut report = CallReport {
            tool: step.tool.clone(),
            slot: step.slot.clone(),
            status: CallStatus::Failed,
            attempts: 0,
            reason: None,
            error: None,
            value: None,
        };
        let args = match plan {
            Planned::Call(args) => args,
            Planned::Missing => return self.missing(report, step),
            Planned::BadArgs(error) => {
                report.reason = Some(ErrorReason::InvalidArguments);
                report.error = Some(format!("tool {}: {error}", step.tool));
                return report;
            }
        };
        // The author's whole grant, as the gate decides a call (a device
        // the step names included), on the arguments the step will run
        // with; the runner's is the gate's own, when the call is made.
        if let Some((sequence, author)) = self.written_by {
            let mut as_author = Map::new();
            as_author.insert(AGENT_EXTRA.into(), Value::String(author.to_owned()));
            let info = CallInfo {
                call_id: String::new(),
                tool: step.tool.clone(),
                arguments: args.clone(),
                batch_id: String::new(),
                extras: Arc::new(as_author),
            };
            if let Some(refused) = self.source.refusal(&info) {
                report.reason = Some(ErrorReason::Denied);
                report.error = Some(format!(
                    "sequence `{sequence}` was written by agent `{author}`, and the call to `{}` \
                     is refused for that agent ({}); a sequence runs only what its author may",
                    step.tool, refused.detail
                ));
                return report;
            }
        }
        loop {
            report.attempts += 1;
            let outcome = self
                .api
                .call(
                    self.agent,
                    &step.tool,
                    args.clone(),
                    self.extras.clone(),
                    self.token.clone(),
                )
                .await;
            if outcome.success {
                // Read by its status, not compared whole: a post-hook may
                // have added to the value. A `seq_when_call` whose condition
                // is false and a called group skipped by its own `when`
                // (through either tool) ran nothing; another tool's value
                // that says "skipped" is just its value.
                let skipped =
                    outcome.value.get("status").and_then(Value::as_str) == Some("skipped");
                report.status = if step.is_seq_call() && skipped {
                    CallStatus::Skipped
                } else {
                    CallStatus::Ok
                };
                // Earlier tries' failure is not this call's.
                report.reason = None;
                report.error = None;
                report.value = Some(outcome.value);
                return report;
            }
            let reason = outcome
                .error
                .as_ref()
                .map_or(ErrorReason::Execution, |e| e.reason);
            // "Not found" is a missing tool only when the tool is gone (it
            // vanished between the lookup and the call); a tool that is
            // there may answer it about what it looks up (a device that is
            // not connected), and that is an ordinary failure.
            if reason == ErrorReason::NotFound && self.source.definition(&step.tool).is_none() {
                report.attempts -= 1;
                return self.missing(report, step);
            }
            report.reason = Some(reason);
            report.error = Some(outcome.text.clone());
            // A panic is the tool's fault, and the same arguments would
            // only make it panic again.
            let retryable = matches!(reason, ErrorReason::Execution | ErrorReason::Timeout);
            if self.group.on_error != OnError::Retry
                || !retryable
                || report.attempts > self.group.retries
                || self.token.is_cancelled()
            {
                return report;
            }
            let backoff = FIRST_BACKOFF
                .saturating_mul(1 << (report.attempts - 1).min(8))
                .min(MAX_BACKOFF);
            tracing::debug!(tool = %step.tool, attempt = report.attempts, ?backoff, "retrying a failed sequence call");
            tokio::select! {
                () = tokio::time::sleep(backoff) => {}
                () = self.token.cancelled() => return report,
            }
        }
    }

    fn missing(&self, mut report: CallReport, step: &ToolStep) -> CallReport {
        match self.group.missing {
            MissingPolicy::Fail => {
                report.status = CallStatus::Failed;
                report.reason = Some(ErrorReason::NotFound);
                report.error = Some(format!(
                    "tool {} does not exist (it may have been unloaded; use get_tools to see what exists)",
                    report.tool
                ));
            }
            MissingPolicy::Skip => report.status = CallStatus::Missing,
            MissingPolicy::Degrade => {
                report.status = CallStatus::Degraded;
                report.value = Some(step.fallback.clone().unwrap_or(Value::Null));
            }
        }
        report
    }
}

/// A step's arguments with `$args` substituted (a `seq_when_call`'s own
/// `when` is evaluated later against the call's args, so it is left as is).
fn substitute_step(
    step: &ToolStep,
    args: &Map<String, Value>,
) -> Result<Value, crate::subst::SubstError> {
    let mut out = Map::with_capacity(step.args.len());
    for (key, value) in &step.args {
        let value = if step.tool == SEQ_WHEN_CALL && key == "when" {
            value.clone()
        } else {
            substitute(value, args)?
        };
        out.insert(key.clone(), value);
    }
    Ok(Value::Object(out))
}

fn write_slot(slots: &mut Map<String, Value>, group: &Group, step: &ToolStep, value: Value) {
    let Some(slot) = &step.slot else { return };
    let is_array = group.outputs.get(slot).is_some_and(|t| t.is_array());
    if is_array {
        match slots.get_mut(slot) {
            Some(Value::Array(items)) => items.push(value),
            _ => {
                slots.insert(slot.clone(), Value::Array(vec![value]));
            }
        }
    } else {
        slots.insert(slot.clone(), value);
    }
}

/// A group's slots into the run's: array slots keep appending across
/// groups, other slots are replaced.
fn merge_slots(run: &mut Map<String, Value>, group: &Group, written: &Map<String, Value>) {
    for (key, value) in written {
        let is_array = group.outputs.get(key).is_some_and(|t| t.is_array());
        match (is_array, run.get_mut(key), value) {
            (true, Some(Value::Array(existing)), Value::Array(new)) => {
                existing.extend(new.iter().cloned())
            }
            _ => {
                run.insert(key.clone(), value.clone());
            }
        }
    }
}
