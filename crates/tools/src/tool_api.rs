//! The programmatic tool API: how sequences, hooks and other code (not the
//! model) run a tool.
//!
//! A call made here is a one-call batch through the same kernel
//! [`Executor`] the model's calls go through — argument validation, the
//! tool's timeout, panic isolation, the result cap — over the same
//! [`GatedSource`](crate::GatedSource), so the authorization gate sees both
//! paths alike. The calling agent is stamped into the call's extras; code
//! cannot call "as nobody".

use std::sync::Arc;

use homeagent_core::{
    AssembledCall, AssembledTurn, BatchContext, CancellationToken, Executor, ToolCall, ToolOutcome,
};
use serde_json::{Map, Value};

use crate::gate::AGENT_EXTRA;

/// Runs single tool calls on behalf of an agent.
#[derive(Clone)]
pub struct ToolApi {
    executor: Arc<Executor>,
}

impl std::fmt::Debug for ToolApi {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ToolApi").finish_non_exhaustive()
    }
}

impl ToolApi {
    /// `executor` must run over the agent's gated tool source.
    pub fn new(executor: Arc<Executor>) -> Self {
        ToolApi { executor }
    }

    /// Whether a hook of the executor sees calls to `tool` (and so may
    /// rewrite their arguments, order keys included, before they run).
    pub fn hooks_see(&self, tool: &str) -> bool {
        self.executor.hooks_see(tool)
    }

    /// Runs `tool` with `args` as `agent`; the outcome is what the model
    /// would have received for the same call.
    pub async fn call(
        &self,
        agent: &str,
        tool: &str,
        args: Value,
        extras: Map<String, Value>,
        cancel: CancellationToken,
    ) -> ToolOutcome {
        let call_id = format!("api_{}", next_id());
        let raw_arguments = args.to_string();
        let turn = AssembledTurn {
            calls: vec![AssembledCall {
                call: ToolCall {
                    id: call_id.clone(),
                    name: tool.to_owned(),
                    arguments: args,
                    raw_arguments,
                },
                argument_error: None,
            }],
            ..AssembledTurn::default()
        };
        let mut extras = extras;
        extras.insert(AGENT_EXTRA.to_owned(), Value::String(agent.to_owned()));
        let batch = BatchContext {
            batch_id: format!("api-batch-{call_id}"),
            extras: extras.into(),
            cancel,
        };
        let mut result = self.executor.run(&turn, &batch).await;
        match result.outcomes.pop() {
            Some(outcome) => outcome,
            // The executor answers every call; this is unreachable in practice.
            None => ToolOutcome::failure(
                call_id,
                tool,
                homeagent_core::ToolError::execution("the executor returned no outcome"),
            ),
        }
    }
}

fn next_id() -> u64 {
    use std::sync::atomic::{AtomicU64, Ordering};
    static NEXT: AtomicU64 = AtomicU64::new(1);
    NEXT.fetch_add(1, Ordering::Relaxed)
}
