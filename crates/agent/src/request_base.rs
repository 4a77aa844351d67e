//! What every request of an input starts from: the system prompt, the tools
//! the agent may see, and the share of the context budget those two take.
//!
//! They depend only on the agent and on the tool definitions, which change
//! rarely (an MCP server announcing tools), so they are built once and kept
//! per agent. A kept base is used while the source lists the very same
//! definition objects (`Arc` identity, in order): registering or removing a
//! tool makes a new list, and the next input builds a new base. Building it
//! on every input cost two walks over the registry, a tool list and a
//! prompt each time: about a twentieth of a plain input's instructions.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};

use homeagent_core::ToolDef;
use homeagent_llm::ToolSpec;

/// One agent's request base.
#[derive(Debug)]
pub(crate) struct RequestBase {
    /// The definitions it was built from.
    definitions: Vec<Arc<ToolDef>>,
    /// The system prompt, execution-order section included.
    pub prompt: String,
    /// The tools the agent may see, as sent to the model.
    pub tools: Vec<ToolSpec>,
    /// What the prompt and the tools take from the context budget.
    pub reserved_tokens: usize,
}

impl RequestBase {
    /// A base with no tools (tests of what is kept beside one).
    #[cfg(test)]
    pub(crate) fn bare(prompt: &str) -> Arc<RequestBase> {
        Arc::new(RequestBase {
            definitions: Vec::new(),
            prompt: prompt.to_owned(),
            tools: Vec::new(),
            reserved_tokens: 0,
        })
    }
}

/// The bases of the agents that ran an input, kept until the tools change.
#[derive(Debug, Default)]
pub(crate) struct RequestBases {
    by_agent: Mutex<HashMap<String, Arc<RequestBase>>>,
}

/// What [`RequestBases::get_or_build`] asks its builder for.
pub(crate) struct Built {
    pub prompt: String,
    pub tools: Vec<ToolSpec>,
    pub reserved_tokens: usize,
}

impl RequestBases {
    /// `agent`'s base for `definitions` (the source's current list): the
    /// kept one if it was built from the same definitions, else the one
    /// `build` makes from them, which is then kept.
    pub fn get_or_build(
        &self,
        agent: &str,
        definitions: Vec<Arc<ToolDef>>,
        build: impl FnOnce(&[Arc<ToolDef>]) -> Built,
    ) -> Arc<RequestBase> {
        if let Some(kept) = self.lock().get(agent)
            && same_definitions(&kept.definitions, &definitions)
        {
            return Arc::clone(kept);
        }
        // Built without the lock: other agents' inputs need not wait.
        let built = build(&definitions);
        let base = Arc::new(RequestBase {
            definitions,
            prompt: built.prompt,
            tools: built.tools,
            reserved_tokens: built.reserved_tokens,
        });
        self.lock().insert(agent.to_owned(), Arc::clone(&base));
        base
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Arc<RequestBase>>> {
        // A panic while holding the map leaves it whole (inserts are
        // single calls), so a poisoned lock is still usable.
        self.by_agent.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// The same definition objects in the same order. A kept base holds its
/// definitions, so an address in it cannot be reused by a new definition.
fn same_definitions(kept: &[Arc<ToolDef>], current: &[Arc<ToolDef>]) -> bool {
    kept.len() == current.len() && kept.iter().zip(current).all(|(a, b)| Arc::ptr_eq(a, b))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)] // a panic in a test is a test failure

    use std::cell::Cell;

    use super::*;

    fn built(prompt: &str) -> Built {
        Built {
            prompt: prompt.into(),
            tools: Vec::new(),
            reserved_tokens: prompt.len(),
        }
    }

    #[test]
    fn a_base_is_rebuilt_only_when_the_definitions_are_other_objects() {
        let bases = RequestBases::default();
        let a = Arc::new(ToolDef::new("a", "first"));
        let b = Arc::new(ToolDef::new("b", "second"));
        let builds = Cell::new(0);
        let get = |agent: &str, defs: Vec<Arc<ToolDef>>, prompt: &str| {
            bases.get_or_build(agent, defs, |_| {
                builds.set(builds.get() + 1);
                built(prompt)
            })
        };

        assert_eq!(get("main", vec![a.clone(), b.clone()], "one").prompt, "one");
        // The same objects: kept.
        assert_eq!(get("main", vec![a.clone(), b.clone()], "two").prompt, "one");
        assert_eq!(builds.get(), 1);
        // An equal definition that is another object (re-registered): new.
        let a_again = Arc::new(ToolDef::new("a", "first"));
        assert_eq!(
            get("main", vec![a_again.clone(), b.clone()], "three").prompt,
            "three"
        );
        // One fewer, or another order: new each time.
        assert_eq!(get("main", vec![a_again.clone()], "four").prompt, "four");
        assert_eq!(
            get("main", vec![b.clone(), a_again.clone()], "five").prompt,
            "five"
        );
        assert_eq!(builds.get(), 4);
        // Each agent has its own.
        assert_eq!(
            get("kitchen", vec![b.clone(), a_again.clone()], "six").prompt,
            "six"
        );
        assert_eq!(get("main", vec![b, a_again], "seven").prompt, "five");
        assert_eq!(builds.get(), 5);
    }
}
