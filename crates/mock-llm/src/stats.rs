//! The counters behind `GET /stats`.

use std::collections::BTreeMap;

use serde_json::{Value, json};

/// What the server has seen since it started.
#[derive(Debug, Default)]
pub(crate) struct Stats {
    /// Model requests (all four wires), including `!err` and `!hang`.
    pub requests: u64,
    pub by_protocol: BTreeMap<&'static str, u64>,
    /// Turns that were tool-call batches.
    pub batches: u64,
    /// Turns that reported on a batch's results.
    pub reports: u64,
    /// Sum of `executed=<n>` over all reports.
    pub executed_total: u64,
    pub last_executed: Option<u64>,
    /// The largest `max_in_flight=<m>` any report found.
    pub max_in_flight: u64,
    pub errors_injected: u64,
    pub hangs: u64,
    pub bad_requests: u64,
    /// The mock's own time per kind of input (`slowbatch4`, `report`, ...).
    pub per_input: BTreeMap<String, InputTiming>,
}

/// The mock's own time for one kind of input, in microseconds: parsing,
/// the script and encoding, without the configured delays.
#[derive(Debug, Default)]
pub(crate) struct InputTiming {
    pub count: u64,
    pub total_us: u64,
    pub max_us: u64,
    pub last_us: u64,
}

impl InputTiming {
    pub(crate) fn record(&mut self, us: u64) {
        self.count += 1;
        self.total_us = self.total_us.saturating_add(us);
        self.max_us = self.max_us.max(us);
        self.last_us = us;
    }
}

impl Stats {
    pub(crate) fn to_json(&self) -> Value {
        let mock_time: serde_json::Map<String, Value> = self
            .per_input
            .iter()
            .map(|(input, t)| {
                let mean = t.total_us.checked_div(t.count).unwrap_or(0);
                let timing = json!({"count": t.count, "mean_us": mean, "max_us": t.max_us,
                                    "last_us": t.last_us});
                (input.clone(), timing)
            })
            .collect();
        json!({
            "requests": self.requests,
            "by_protocol": self.by_protocol,
            "batches": self.batches,
            "reports": self.reports,
            "executed_total": self.executed_total,
            "last_executed": self.last_executed,
            "max_in_flight": self.max_in_flight,
            "errors_injected": self.errors_injected,
            "hangs": self.hangs,
            "bad_requests": self.bad_requests,
            "mock_time": mock_time,
        })
    }
}
