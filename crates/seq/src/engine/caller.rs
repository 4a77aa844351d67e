//! Who runs a sequence ([`Caller`]) and what it runs through ([`SeqBackend`]).

use std::sync::Arc;

use homeagent_core::{CancellationToken, Executor, ToolSource};
use homeagent_tools::ToolApi;
use serde_json::{Map, Value};

use super::MAX_DEPTH;

/// What the engine runs tools through: the tool API over the agent's gated
/// source, and that source for definitions.
#[derive(Clone)]
pub struct SeqBackend {
    pub(super) api: ToolApi,
    pub(super) source: Arc<dyn ToolSource>,
    pub(super) parallel: bool,
}

impl std::fmt::Debug for SeqBackend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SeqBackend")
            .field("parallel", &self.parallel)
            .finish_non_exhaustive()
    }
}

impl SeqBackend {
    /// `executor` must run over the agent's gated tool source (the
    /// runtime's `executor(None)`).
    pub fn new(executor: Arc<Executor>) -> Self {
        SeqBackend {
            source: Arc::clone(executor.source()),
            parallel: executor.options().parallel,
            api: ToolApi::new(executor),
        }
    }

    pub fn source(&self) -> &Arc<dyn ToolSource> {
        &self.source
    }
}

/// Who runs a sequence: the agent whose grants apply, the extras of its
/// call (session, channel), the frames above, and the stop switch.
#[derive(Debug, Clone)]
pub struct Caller {
    pub agent: String,
    pub extras: Map<String, Value>,
    pub stack: Vec<String>,
    pub cancel: CancellationToken,
}

impl Caller {
    /// A top-level caller (a person at the CLI, a test).
    pub fn new(agent: impl Into<String>) -> Self {
        Caller {
            agent: agent.into(),
            extras: Map::new(),
            stack: Vec::new(),
            cancel: CancellationToken::new(),
        }
    }

    /// This caller one frame deeper, or the depth error with the chain.
    pub(super) fn enter(&self, frame: String) -> Result<Caller, String> {
        let mut stack = self.stack.clone();
        stack.push(frame);
        if stack.len() > MAX_DEPTH {
            return Err(format!(
                "nesting depth bound {MAX_DEPTH} exceeded: {} (a chain of sequence calls may nest at most {MAX_DEPTH} levels)",
                stack.join(" → ")
            ));
        }
        Ok(Caller {
            stack,
            ..self.clone()
        })
    }
}
