//! HomeAgent as an MCP server: `homeagent mcp-serve`.
//!
//! Every call arriving here runs through [`ToolApi`] as one agent, so it
//! passes the same gate, argument validation, timeout and hooks as the
//! model's calls; nothing here runs a handler directly. Annotations come from
//! the tool definitions: `readOnlyHint` from `read_only`, never from
//! `parallel_safe` (a tool can be safe to overlap and still write).
//! The outcome contract maps one to one: the outcome's text is the text
//! content, an object value is `structuredContent`, and a failed outcome is
//! `isError: true` with the rendered error (its hint included) as text.

use std::sync::Arc;

use homeagent_core::{ToolDef, ToolOutcome, ToolSource};
use homeagent_tools::{Gate, ToolApi};
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, Implementation,
    ListToolsResult, PaginatedRequestParams, ServerCapabilities, ServerConfig, Tool,
    ToolAnnotations,
};
use rmcp::service::RequestContext;
use rmcp::{ErrorData, RoleServer, ServerHandler, ServiceExt};
use serde_json::{Map, Value};

/// An MCP server over an agent's tools.
#[derive(Clone)]
pub struct ToolServer {
    api: ToolApi,
    tools: Arc<dyn ToolSource>,
    gate: Option<Arc<Gate>>,
    agent: String,
}

impl ToolServer {
    /// `tools` lists the definitions (the agent's gated source); `api` runs
    /// the calls as `agent`.
    pub fn new(api: ToolApi, tools: Arc<dyn ToolSource>, agent: impl Into<String>) -> Self {
        ToolServer {
            api,
            tools,
            gate: None,
            agent: agent.into(),
        }
    }

    /// Lists only the tools `gate` lets the agent see (calls are gated
    /// either way; this keeps the list honest).
    pub fn with_gate(mut self, gate: Arc<Gate>) -> Self {
        self.gate = Some(gate);
        self
    }

    /// The tools as MCP announces them.
    pub fn mcp_tools(&self) -> Vec<Tool> {
        self.tools
            .definitions()
            .iter()
            .filter(|def| {
                self.gate
                    .as_ref()
                    .is_none_or(|gate| gate.visible(&self.agent, &def.name))
            })
            .map(|def| mcp_tool(def))
            .collect()
    }

    /// Runs one call; `cancel` is the request's (a client's
    /// `notifications/cancelled` fires it).
    pub async fn call(
        &self,
        name: &str,
        arguments: Option<Map<String, Value>>,
        cancel: homeagent_core::CancellationToken,
    ) -> CallToolResult {
        let args = Value::Object(arguments.unwrap_or_default());
        let outcome = self
            .api
            .call(&self.agent, name, args, Map::new(), cancel)
            .await;
        outcome_result(&outcome)
    }
}

/// The MCP description of one tool.
pub fn mcp_tool(def: &ToolDef) -> Tool {
    let schema = match &def.parameters {
        Value::Object(map) if !map.is_empty() => map.clone(),
        _ => {
            let mut map = Map::new();
            map.insert("type".into(), Value::String("object".into()));
            map
        }
    };
    let mut tool = Tool::new(def.name.clone(), def.description.clone(), Arc::new(schema));
    tool.annotations = Some(ToolAnnotations::new().read_only(def.read_only));
    tool
}

/// The MCP result of one outcome.
pub fn outcome_result(outcome: &ToolOutcome) -> CallToolResult {
    let content = vec![ContentBlock::text(outcome.text.clone())];
    let mut result = if outcome.success {
        CallToolResult::success(content)
    } else {
        CallToolResult::error(content)
    };
    // structuredContent is an object in MCP; other values stay text only.
    if outcome.value.is_object() {
        result.structured_content = Some(outcome.value.clone());
    }
    result
}

impl ServerHandler for ToolServer {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
            .with_server_info(Implementation::new("homeagent", env!("CARGO_PKG_VERSION")))
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        Ok(ListToolsResult::with_all_items(self.mcp_tools()))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let result = self
            .call(&request.name, request.arguments, context.ct.clone())
            .await;
        Ok(CallToolResponse::Complete(result))
    }
}

/// Why serving stopped.
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    #[error("the MCP client did not complete the handshake: {0}")]
    Handshake(String),
    #[error("the MCP session ended abnormally: {0}")]
    Session(String),
}

/// Serves `server` on this process's stdin/stdout until the client closes
/// the connection. Nothing else may write to stdout meanwhile.
pub async fn serve_stdio(server: ToolServer) -> Result<(), ServeError> {
    let running = server
        .serve(rmcp::transport::io::stdio())
        .await
        .map_err(|e| ServeError::Handshake(e.to_string()))?;
    running
        .waiting()
        .await
        .map_err(|e| ServeError::Session(e.to_string()))?;
    Ok(())
}
