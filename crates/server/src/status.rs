//! `GET /api/v1/status` and `GET /api/v1/tools`: what the dashboard's
//! health panel and scripts read.

use axum::extract::State;
use axum::response::{IntoResponse, Response};

use crate::http::json_ok;
use serde_json::{Value, json};

use crate::state::ServerState;

/// Scheduler and store counters, every model source's health, tool counts, the event
/// stream, the runtime's threads and uptime.
pub async fn status(State(state): State<ServerState>) -> Response {
    let sources: Vec<Value> = state
        .runtime()
        .sources()
        .health()
        .into_iter()
        .map(|s| {
            json!({
                "name": s.name,
                "protocol": s.protocol,
                "model": s.model,
                "base_url": s.base_url,
                "disabled": s.disabled,
                "cooling_down_ms": s.cooling_down_for.map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX)),
                "failures": s.failures,
                "in_flight": s.in_flight,
                "healthy": s.disabled.is_none() && s.cooling_down_for.is_none(),
            })
        })
        .collect();
    let definitions = state.tools().definitions();
    let mut by_source = serde_json::Map::new();
    for def in &definitions {
        let entry = by_source
            .entry(state.tool_source(&def.name))
            .or_insert(json!(0));
        *entry = json!(entry.as_u64().unwrap_or(0) + 1);
    }
    let events = state.events();
    let store_writes = state.runtime().store().write_stats();
    json_ok(&json!({
        "uptime_ms": u64::try_from(state.uptime().as_millis()).unwrap_or(u64::MAX),
        // The threads the agent's async runtime really runs on (`[runtime]
        // worker_threads` for `homeagent serve`), read from that runtime,
        // and the threads serving connections (`serve_threads`).
        "runtime": {
            "worker_threads": state.worker_threads(),
            "serve_threads": state.serve_threads(),
        },
        "scheduler": state.scheduler().counters(),
        // Average group size = writes / commits (see the store's group commit).
        "store": {
            "commits": store_writes.commits,
            "writes": store_writes.writes,
        },
        "sources": sources,
        "tools": {"total": definitions.len(), "by_source": by_source},
        "events": {
            "latest_id": events.latest(),
            "ring_capacity": state.options().event_ring,
            "subscribers": events.subscribers(),
        },
        "devices": state.devices().map(|hub| json!({
            "enabled": state.devices_enabled(),
            "bound": hub.list(),
        })),
        "shutting_down": state.shutdown_token().is_cancelled(),
    }))
    .into_response()
}

/// Every tool with its scheduling declarations and where it came from.
pub async fn tools(State(state): State<ServerState>) -> Response {
    let tools: Vec<Value> = state
        .tools()
        .definitions()
        .iter()
        .map(|def| {
            json!({
                "name": def.name,
                "description": def.description,
                "parameters": def.parameters,
                "source": state.tool_source(&def.name),
                "parallel_safe": def.parallel_safe,
                "serial": def.serial,
                "read_only": def.read_only,
                "timeout_ms": def.timeout.map(|t| u64::try_from(t.as_millis()).unwrap_or(u64::MAX)),
            })
        })
        .collect();
    json_ok(&json!({"tools": tools}))
}
