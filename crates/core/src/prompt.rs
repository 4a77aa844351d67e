//! The system-prompt section on execution order.
//!
//! It is generated from the same predicate the executor uses
//! ([`Executor::tool_runs_in_parallel`]), so the model is never told that a
//! tool runs in parallel when it does not, or the other way round.

use std::sync::Arc;

use crate::batch::Executor;
use crate::tool::ToolDef;

/// The heading the section starts with; other prompt builders look for it.
pub const EXECUTION_ORDER_HEADING: &str = "## Tool execution order";

/// Builds the section for the tools the executor currently sees.
pub fn execution_order_section(executor: &Executor) -> String {
    execution_order_section_for(executor, &executor.source().definitions())
}

/// Builds the section for `definitions` (the executor's tools, read once
/// by a caller that also needs them for something else).
pub fn execution_order_section_for(executor: &Executor, definitions: &[Arc<ToolDef>]) -> String {
    let mut out = String::from(EXECUTION_ORDER_HEADING);
    out.push('\n');
    if !executor.options().parallel {
        out.push_str(
            "Tool calls in one reply run one after another, in the order you list them. \
             A call that needs another call's result still belongs in a later reply, \
             after you have seen that result.\n",
        );
        return out;
    }
    out.push_str(
        "- Tool calls in one reply run at the same time when their tools are parallel-safe. \
         Do not depend on their order: a call that needs another call's result goes in your next reply, \
         after you have seen that result.\n\
         - Exception: calls that share an order key keep their order (several sends to the same output \
         channel, several commands for the same device run one after another, in the order you list them).\n\
         - Exception: a tool that is not declared parallel-safe (for example one that writes) makes the whole \
         reply's batch run serially, in the order you list the calls.\n",
    );
    let safe: Vec<&str> = definitions
        .iter()
        .filter(|def| executor.tool_runs_in_parallel(def))
        .map(|def| def.name.as_str())
        .collect();
    if safe.is_empty() {
        out.push_str("- No tool is currently declared parallel-safe.\n");
    } else {
        out.push_str("- Parallel-safe tools: ");
        out.push_str(&safe.join(", "));
        out.push('\n');
    }
    out
}
