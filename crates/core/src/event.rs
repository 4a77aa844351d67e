//! Kernel events: a start and an end for every call, including calls that
//! never ran (bad arguments, not found, denied, cancelled).

use std::sync::Arc;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::outcome::{CallStatus, ToolError};

/// One tool-call event.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "phase", rename_all = "snake_case")]
pub enum ToolEvent {
    Start {
        call_id: String,
        tool: String,
        /// Always an object.
        args: Value,
        /// Shared by the batch's events.
        batch_id: Arc<str>,
        batch_size: usize,
        parallel: bool,
    },
    End {
        call_id: String,
        tool: String,
        /// Shared by the batch's events.
        batch_id: Arc<str>,
        batch_size: usize,
        parallel: bool,
        status: CallStatus,
        success: bool,
        duration_ms: u64,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        error: Option<ToolError>,
        /// The outcome's warnings (arguments coerced, a post-hook that
        /// failed open, a result off its output schema), first to last.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        warnings: Vec<String>,
    },
}

impl ToolEvent {
    pub fn call_id(&self) -> &str {
        match self {
            ToolEvent::Start { call_id, .. } | ToolEvent::End { call_id, .. } => call_id,
        }
    }
}

/// Where events go. Must not block: it is called from inside the batch.
pub trait EventSink: Send + Sync + 'static {
    fn emit(&self, event: ToolEvent);
}

impl<F: Fn(ToolEvent) + Send + Sync + 'static> EventSink for F {
    fn emit(&self, event: ToolEvent) {
        self(event)
    }
}
