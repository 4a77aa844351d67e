//! What a run reports: per group its status (ran, skipped, failed, not
//! run), its calls and missing tools; the final slots; and, for an aborted
//! run, the error — so that a failed run is an honest failure outcome, not
//! success text.

use homeagent_core::ErrorReason;
use serde::Serialize;
use serde_json::{Map, Value, json};

use crate::display::{SLOT_DISPLAY_LIMIT, slot_display, value_text};

/// How a group ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum GroupStatus {
    /// Its calls ran (some may be missing under skip/degrade).
    Ran,
    /// Its `when` was false: no calls, no slots.
    Skipped,
    /// A call failed (after retries), it timed out, or its condition could
    /// not be evaluated.
    Failed,
    /// An earlier group aborted the run.
    NotRun,
}

impl GroupStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            GroupStatus::Ran => "ran",
            GroupStatus::Skipped => "skipped",
            GroupStatus::Failed => "failed",
            GroupStatus::NotRun => "not run",
        }
    }
}

/// How one call ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum CallStatus {
    Ok,
    Failed,
    /// The tool does not exist and the group skips it.
    Missing,
    /// The tool does not exist and its slot got the fallback.
    Degraded,
    /// A `seq_when_call` whose condition was false, or a called group
    /// whose own `when` was false: nothing ran, and its slot is not
    /// written.
    Skipped,
}

/// One call of a group.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CallReport {
    pub tool: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub slot: Option<String>,
    pub status: CallStatus,
    /// Times the tool was called (0 when it was missing).
    pub attempts: u32,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<ErrorReason>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// The call's value (kept whole; slots are displayed cut).
    #[serde(skip)]
    pub value: Option<Value>,
}

/// One group of a run.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct GroupReport {
    pub name: String,
    pub status: GroupStatus,
    /// `parallel` or `serial` (absent when nothing ran).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub mode: Option<&'static str>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub calls: Vec<CallReport>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub missing: Vec<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// The slots this group wrote, whole.
    #[serde(skip)]
    pub slots: Map<String, Value>,
}

impl GroupReport {
    pub fn new(name: &str, status: GroupStatus) -> Self {
        GroupReport {
            name: name.to_owned(),
            status,
            mode: None,
            calls: Vec::new(),
            missing: Vec::new(),
            error: None,
            slots: Map::new(),
        }
    }

    /// The group's report as a tool result (`seq_call` on a group): an
    /// error shape when it failed. Slots cut for display.
    pub fn to_value(&self) -> Value {
        with_slots(self, display_slots(&self.slots))
    }

    /// [`to_value`](Self::to_value) with every slot whole: what a calling
    /// sequence's step stores.
    pub fn to_whole_value(&self) -> Value {
        with_slots(self, Value::Object(self.slots.clone()))
    }
}

/// `report` serialized, with `slots` in place of its own.
fn with_slots(report: &impl Serialize, slots: Value) -> Value {
    let mut value = serde_json::to_value(report).unwrap_or(Value::Null);
    if let Value::Object(map) = &mut value {
        map.insert("slots".into(), slots);
    }
    value
}

/// How a run ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum RunStatus {
    /// Every group ran or was skipped.
    Completed,
    /// Some group failed under `on_error: continue`.
    CompletedWithErrors,
    /// A group failed and stopped the run (or the run could not start).
    Aborted,
}

/// A whole run.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RunReport {
    pub sequence: String,
    pub status: RunStatus,
    pub groups: Vec<GroupReport>,
    /// The final slots, whole.
    #[serde(skip)]
    pub slots: Map<String, Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

impl RunReport {
    /// A run that failed before any group started.
    pub fn refused(sequence: &str, error: String) -> Self {
        RunReport {
            sequence: sequence.to_owned(),
            status: RunStatus::Aborted,
            groups: Vec::new(),
            slots: Map::new(),
            error: Some(error),
        }
    }

    pub fn failed(&self) -> bool {
        self.status == RunStatus::Aborted
    }

    /// The report as a tool result: slots cut for display; an aborted run
    /// carries `error`, which makes the outcome a failure.
    pub fn to_value(&self) -> Value {
        with_slots(self, display_slots(&self.slots))
    }

    /// [`to_value`](Self::to_value) with every slot whole: what a calling
    /// sequence's step stores.
    pub fn to_whole_value(&self) -> Value {
        with_slots(self, Value::Object(self.slots.clone()))
    }

    /// The report for people: one line per group, then the slots.
    pub fn render(&self) -> String {
        let done = self
            .groups
            .iter()
            .filter(|g| matches!(g.status, GroupStatus::Ran | GroupStatus::Skipped))
            .count();
        let mut out = format!(
            "sequence \"{}\": {} ({done}/{} groups done)\n",
            self.sequence,
            match self.status {
                RunStatus::Completed => "completed",
                RunStatus::CompletedWithErrors => "completed with errors",
                RunStatus::Aborted => "FAILED",
            },
            self.groups.len()
        );
        for group in &self.groups {
            out.push_str(&format!("  {}: {}", group.name, group.status.as_str()));
            if let Some(mode) = group.mode {
                out.push_str(&format!(" ({mode}, {} calls)", group.calls.len()));
            }
            if !group.missing.is_empty() {
                out.push_str(&format!("; missing tools: {}", group.missing.join(", ")));
            }
            if let Some(error) = &group.error {
                out.push_str(&format!("; {error}"));
            }
            out.push('\n');
        }
        if let Some(error) = &self.error {
            out.push_str(&format!("error: {error}\n"));
        }
        out.push_str("slots:\n");
        if self.slots.is_empty() {
            out.push_str("  (none)\n");
        }
        for (key, value) in &self.slots {
            let shown = value_text(&slot_display(value, SLOT_DISPLAY_LIMIT));
            out.push_str(&format!("  {key} = {shown}\n"));
        }
        out
    }
}

fn display_slots(slots: &Map<String, Value>) -> Value {
    Value::Object(
        slots
            .iter()
            .map(|(k, v)| (k.clone(), slot_display(v, SLOT_DISPLAY_LIMIT)))
            .collect(),
    )
}

/// The result of `seq_when_call` when its condition is false.
pub fn skipped_value(target: &str) -> Value {
    json!({"target": target, "status": "skipped", "reason": "the condition is false; nothing ran and no slots were written"})
}
