//! MCP for HomeAgent: other people's MCP servers as tool sources, and
//! HomeAgent's own tools served to MCP clients.
//!
//! Most tools people already have are MCP servers. This crate plugs them into
//! the kernel without weakening its contract:
//!
//! - [`start_mcp_servers`] connects to every configured server (a child
//!   process over stdio with a clean environment, or Streamable HTTP) and
//!   returns an [`McpManager`], a [`homeagent_core::ToolSource`] that shows
//!   each server's tools as `<server>__<tool>` and falls back to a parent
//!   source (the built-in tools). A tool's `inputSchema` becomes its
//!   parameters, so the kernel validates arguments before the server sees
//!   them; a tool is serial unless the config lists it as parallel-safe or
//!   a *trusted* server annotates it `readOnlyHint` (untrusted annotations are
//!   never acted on, as the MCP spec requires).
//! - Servers are supervised: a crash fails the calls in flight, hides the
//!   server's tools behind a typed not-found naming the server, and restarts
//!   it with backoff until it crashes too often ([`McpManager::status`]).
//! - [`serve`] is the other direction: an MCP server over stdio whose tools
//!   are HomeAgent's, every call going through [`homeagent_tools::ToolApi`]
//!   so the gate, validation and hooks apply.

mod client;
pub mod naming;
pub mod serve;
pub mod spec;

pub use client::convert::{McpCallValue, call_result_value, tool_def};
pub use client::manager::{
    Collision, McpManager, McpServerStatus, NoRuntime, ServerPhase, check_specs, spawn_mcp_servers,
    start_mcp_servers,
};
pub use naming::{NameError, exposed_name, is_exposed_form};
pub use serve::{ServeError, ToolServer, mcp_tool, outcome_result, serve_stdio};
pub use spec::{
    MAX_NESTING, MAX_SERVER_NAME_LEN, McpOptions, McpServerSpec, McpTransport, NESTING_ENV,
    SpecError, TransportFields, nesting, valid_server_name,
};
