//! The scenarios of issue 8, each a function from a running [`Stack`](crate::procs::Stack) to
//! its part of the report. Every input carries a unique text
//! (`!slowbatch4-p4-r2-<run>`), which is how the bench finds the mock's own
//! record of it: the tools that really ran and the mock's time.

pub mod batch;
pub mod blast;
pub mod kernel;

use std::collections::HashMap;

use crate::client::{MockInput, Reply};
use crate::report::InputOutcome;

pub use crate::progress::Progress;

/// Joins what the client saw with what the mock recorded for `text`.
pub fn outcome(text: &str, reply: &Reply, log: &HashMap<String, MockInput>) -> InputOutcome {
    let record = log.get(text).cloned().unwrap_or_default();
    InputOutcome {
        reply_s: reply.elapsed_s,
        mock_s: record.served_us as f64 / 1e6,
        executed: record.executed,
        requests: record.requests,
        reports: record.reports,
        reply_problem: reply.problem.clone(),
    }
}
