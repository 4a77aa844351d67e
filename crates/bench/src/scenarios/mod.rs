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
    // The agent's answer is the mock's report, which names its batch's
    // nonce and count: a reply that does not say them answered something
    // else (another session's input, nothing).
    let answer_problem = match (&reply.problem, &record.nonce, record.executed) {
        (None, Some(nonce), Some(executed)) => {
            let said = format!("Batch {nonce} reported back: executed={executed}");
            (!reply.content.contains(&said)).then(|| {
                format!(
                    "the reply is not the mock's answer to this input (it should say {said:?}): {:?}",
                    reply.content.chars().take(120).collect::<String>()
                )
            })
        }
        _ => None,
    };
    InputOutcome {
        reply_s: reply.elapsed_s,
        mock_s: record.served_us as f64 / 1e6,
        executed: record.executed,
        requests: record.requests,
        reports: record.reports,
        batch_calls: record.batch_calls,
        report_calls: record.report_calls,
        report_results: record.report_results,
        reply_problem: reply.problem.clone(),
        answer_problem,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The reply must be the mock's answer to its own input: the report's
    /// text names the batch's nonce and count.
    #[test]
    fn a_reply_that_is_not_the_mock_s_answer_to_its_input_is_a_problem() {
        let record = MockInput {
            requests: 2,
            reports: 1,
            batch_calls: Some(2),
            executed: Some(2),
            report_calls: Some(2),
            report_results: Some(2),
            nonce: Some("n7".into()),
            ..MockInput::default()
        };
        let log = HashMap::from([("!batch2-x".to_owned(), record)]);
        let reply = |content: &str| Reply {
            elapsed_s: 0.1,
            problem: None,
            content: content.to_owned(),
        };
        let right = outcome(
            "!batch2-x",
            &reply(
                "Batch n7 reported back: executed=2 max_in_flight=2 (2 tool results, 0 failed).",
            ),
            &log,
        );
        assert_eq!(right.problems(2), Vec::<String>::new());
        for wrong in [
            "Batch n8 reported back: executed=2 max_in_flight=2 (2 tool results, 0 failed).",
            "",
        ] {
            let problems = outcome("!batch2-x", &reply(wrong), &log).problems(2);
            assert_eq!(problems.len(), 1, "{wrong:?}: {problems:?}");
            assert!(
                problems[0].contains("not the mock's answer"),
                "{problems:?}"
            );
        }
    }
}
