//! The per-input log behind `GET /stats/inputs`: what the mock did for
//! each input, keyed by the text of the last user message.
//!
//! A benchmark needs two numbers per input that only the mock can give
//! honestly: how many tools *really* executed for it (the script's count of
//! distinct done-tags, not the agent's own report) and how long the mock
//! itself spent serving it (so the agent's added latency is the reply time
//! minus this). The aggregate counters in `stats::Stats` cannot be
//! correlated with one input when many run at once, so the log keys every
//! record by the input's text, which load drivers already make unique
//! (`!batch2-<session>-<i>`). One input usually means two model requests
//! (the batch, then the report on its results); both land in one record.
//!
//! The log is bounded: past [`INPUT_LOG_CAPACITY`] keys the oldest are
//! dropped and counted in `evicted`, so a long-running mock cannot grow
//! without limit. `DELETE /stats/inputs` empties it between runs.

use std::collections::{HashMap, VecDeque};

use serde_json::{Value, json};

/// Most inputs remembered at once.
pub const INPUT_LOG_CAPACITY: usize = 100_000;

/// Longest key kept, in bytes (a longer text is cut at a char boundary).
pub const INPUT_KEY_MAX_BYTES: usize = 256;

/// What the mock did for one input.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct InputRecord {
    /// Model requests whose last user message was this input.
    pub requests: u64,
    /// Requests that were reports on a batch's results.
    pub reports: u64,
    /// Calls in the last batch the script emitted for this input.
    pub batch_calls: Option<u64>,
    /// Distinct done-tags of the batch found in the last report.
    pub executed: Option<u64>,
    /// Tool calls, and tool results, in the history the last report read:
    /// a call run twice, or a batch run twice, shows in them.
    pub report_calls: Option<u64>,
    pub report_results: Option<u64>,
    /// The nonce the last report named: the agent's answer to the input
    /// is the report's text, which says it.
    pub nonce: Option<String>,
    /// The mock's own work (parse, script, encode), summed over requests.
    pub own_us: u64,
    /// Requests whose body was handed over completely (a reader that sees
    /// fewer than `requests` asked too early, or a client went away).
    pub served: u64,
    /// Arrival of each request to its last byte handed to the connection,
    /// summed: the configured delays included.
    pub served_us: u64,
}

impl InputRecord {
    fn to_json(&self) -> Value {
        json!({
            "requests": self.requests,
            "reports": self.reports,
            "batch_calls": self.batch_calls,
            "executed": self.executed,
            "report_calls": self.report_calls,
            "report_results": self.report_results,
            "nonce": self.nonce,
            "own_us": self.own_us,
            "served": self.served,
            "served_us": self.served_us,
        })
    }
}

/// What one request contributed when its script ran.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum RequestKind {
    Batch {
        calls: u64,
    },
    Report {
        executed: u64,
        calls: u64,
        results: u64,
        nonce: Option<String>,
    },
    Other,
}

/// Records keyed by input text, oldest dropped first.
#[derive(Debug, Default)]
pub(crate) struct InputLog {
    records: HashMap<String, InputRecord>,
    order: VecDeque<String>,
    evicted: u64,
}

/// The log key for a user message: the text, cut to [`INPUT_KEY_MAX_BYTES`].
pub(crate) fn input_key(text: &str) -> String {
    let mut end = text.len().min(INPUT_KEY_MAX_BYTES);
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    text[..end].to_owned()
}

impl InputLog {
    fn entry(&mut self, key: &str) -> &mut InputRecord {
        if !self.records.contains_key(key) {
            if self.order.len() >= INPUT_LOG_CAPACITY
                && let Some(oldest) = self.order.pop_front()
            {
                self.records.remove(&oldest);
                self.evicted += 1;
            }
            self.order.push_back(key.to_owned());
        }
        self.records.entry(key.to_owned()).or_default()
    }

    /// A request for `key` whose script ran: counted with its own time.
    pub(crate) fn request(&mut self, key: &str, kind: RequestKind, own_us: u64) {
        let record = self.entry(key);
        record.requests += 1;
        record.own_us = record.own_us.saturating_add(own_us);
        match kind {
            RequestKind::Batch { calls } => record.batch_calls = Some(calls),
            RequestKind::Report {
                executed,
                calls,
                results,
                nonce,
            } => {
                record.reports += 1;
                record.executed = Some(executed);
                record.report_calls = Some(calls);
                record.report_results = Some(results);
                record.nonce = nonce;
            }
            RequestKind::Other => {}
        }
    }

    /// A request for `key` whose body was handed over completely.
    pub(crate) fn served(&mut self, key: &str, served_us: u64) {
        let record = self.entry(key);
        record.served += 1;
        record.served_us = record.served_us.saturating_add(served_us);
    }

    pub(crate) fn clear(&mut self) -> usize {
        let n = self.records.len();
        self.records.clear();
        self.order.clear();
        self.evicted = 0;
        n
    }

    pub(crate) fn to_json(&self) -> Value {
        let inputs: serde_json::Map<String, Value> = self
            .records
            .iter()
            .map(|(key, record)| (key.clone(), record.to_json()))
            .collect();
        json!({
            "capacity": INPUT_LOG_CAPACITY,
            "evicted": self.evicted,
            "inputs": inputs,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_batch_and_its_report_land_in_one_record() {
        let mut log = InputLog::default();
        log.request("!slowbatch4-a", RequestKind::Batch { calls: 4 }, 30);
        log.served("!slowbatch4-a", 1_000);
        log.request(
            "!slowbatch4-a",
            RequestKind::Report {
                executed: 4,
                calls: 4,
                results: 4,
                nonce: Some("n1".into()),
            },
            20,
        );
        log.served("!slowbatch4-a", 2_000);
        let json = log.to_json();
        assert_eq!(
            json["inputs"]["!slowbatch4-a"],
            json!({"requests": 2, "reports": 1, "batch_calls": 4, "executed": 4,
                   "report_calls": 4, "report_results": 4, "nonce": "n1",
                   "own_us": 50, "served": 2, "served_us": 3_000})
        );
        assert_eq!(json["evicted"], json!(0));
    }

    #[test]
    fn the_oldest_key_is_dropped_at_capacity_and_counted() {
        let mut log = InputLog::default();
        for i in 0..=INPUT_LOG_CAPACITY {
            log.request(&format!("k{i}"), RequestKind::Other, 1);
        }
        let json = log.to_json();
        assert_eq!(json["evicted"], json!(1));
        assert!(json["inputs"].get("k0").is_none());
        assert_eq!(json["inputs"]["k1"]["requests"], json!(1));
        assert_eq!(log.clear(), INPUT_LOG_CAPACITY);
        assert_eq!(log.to_json()["inputs"], json!({}));
    }

    #[test]
    fn keys_are_cut_at_a_char_boundary() {
        let long = "é".repeat(200); // 400 bytes, 2 per char
        let key = input_key(&long);
        assert_eq!(key.len(), 256);
        assert_eq!(input_key("short"), "short");
        let odd = format!("a{long}"); // boundary at 256 falls inside an 'é'
        assert_eq!(input_key(&odd).len(), 255);
    }
}
