//! The one authorization gate.
//!
//! Every way a tool can be run — the model's calls through the kernel's
//! executor, the programmatic tool API that sequences and hooks use, a
//! future MCP server face — goes through [`ToolSource::invoke`]. The
//! agent's tool source is a [`GatedSource`], whose `invoke` asks
//! [`Gate::can_use`] first, so no path can skip the check: there is no
//! second function to forget to call.
//!
//! The gate decides from:
//! - the agent's grant: `allow_tools` (empty = every tool) and `deny_tools`
//!   (wins over allow), each a list of names where a trailing `*` matches a
//!   prefix (`files_*`; `git__*` for every tool of the MCP server named `git`);
//! - device scope: a tool registered as device-scoped (the device bridge's
//!   `device_cmd_run`) must carry a device id argument naming a device the
//!   agent was granted; a missing id is refused (fail closed);
//! - approval: a tool listed in `require_approval` runs only when the
//!   [`Approval`] policy says yes (a person in `chat`, `--yes` on `run`).
//!
//! The agent comes from the call's extras (`"agent"`), which the runtime
//! sets for every call it makes; a call without one is refused.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use homeagent_core::{ErrorReason, ToolContext, ToolDef, ToolError, ToolFuture, ToolSource};
use serde_json::{Map, Value};

/// The extras key holding the calling agent's name.
pub const AGENT_EXTRA: &str = "agent";

/// The agent every program starts with: all tools, no devices.
pub const DEFAULT_AGENT: &str = "main";

/// What one agent may use.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct AgentGrant {
    pub name: String,
    /// Tools the agent may use; empty means every tool. `*` at the end of a
    /// pattern matches any suffix.
    pub allow_tools: Vec<String>,
    /// Tools the agent may never use; wins over `allow_tools`.
    pub deny_tools: Vec<String>,
    /// Device ids the agent may run device tools on.
    pub devices: Vec<String>,
}

impl AgentGrant {
    /// The default agent: every tool, no device.
    pub fn main() -> Self {
        AgentGrant {
            name: DEFAULT_AGENT.to_owned(),
            ..AgentGrant::default()
        }
    }
}

/// Asks whether a call may run (a person at a terminal, a UI).
pub trait Approver: Send + Sync + 'static {
    fn approve(
        &self,
        agent: &str,
        tool: &str,
        args: &Value,
    ) -> Pin<Box<dyn Future<Output = bool> + Send + 'static>>;
}

/// How tools listed in `require_approval` are treated.
#[derive(Clone)]
pub enum Approval {
    /// Ask this approver for every such call.
    Ask(Arc<dyn Approver>),
    /// Approved in advance (`--yes`).
    Granted,
    /// Nobody can be asked: such calls are denied with a reason.
    Refused,
}

impl std::fmt::Debug for Approval {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Approval::Ask(_) => "Ask",
            Approval::Granted => "Granted",
            Approval::Refused => "Refused",
        })
    }
}

/// The authorization rules of one program.
#[derive(Debug, Clone)]
pub struct Gate {
    agents: BTreeMap<String, AgentGrant>,
    /// Device-scoped tool → the argument holding the device id.
    device_tools: HashMap<String, String>,
    require_approval: HashSet<String>,
}

impl Gate {
    /// A gate over these agents; `main` is added (every tool, no device)
    /// unless declared.
    pub fn new(agents: impl IntoIterator<Item = AgentGrant>) -> Self {
        let mut map: BTreeMap<String, AgentGrant> = agents
            .into_iter()
            .map(|grant| (grant.name.clone(), grant))
            .collect();
        map.entry(DEFAULT_AGENT.to_owned())
            .or_insert_with(AgentGrant::main);
        Gate {
            agents: map,
            device_tools: HashMap::new(),
            require_approval: HashSet::new(),
        }
    }

    /// Tools that run only after approval.
    pub fn with_approval_required(mut self, tools: impl IntoIterator<Item = String>) -> Self {
        self.require_approval.extend(tools);
        self
    }

    /// Marks `tool` as device-scoped, its device id in argument `arg`.
    pub fn with_device_tool(mut self, tool: impl Into<String>, arg: impl Into<String>) -> Self {
        self.device_tools.insert(tool.into(), arg.into());
        self
    }

    /// The declared agents (with `main`), by name.
    pub fn agents(&self) -> impl Iterator<Item = &AgentGrant> {
        self.agents.values()
    }

    pub fn agent(&self, name: &str) -> Option<&AgentGrant> {
        self.agents.get(name)
    }

    /// Whether `tool` must be approved before it runs: named exactly, or
    /// by a pattern ending in `*` (`files_*`), as the config accepts it.
    pub fn needs_approval(&self, tool: &str) -> bool {
        self.require_approval.contains(tool)
            || self
                .require_approval
                .iter()
                .any(|pattern| pattern.ends_with('*') && pattern_matches(pattern, tool))
    }

    /// Whether `agent` may see `tool` at all (its allow/deny lists). The
    /// tool list sent to the model and `get_tools` use this.
    pub fn visible(&self, agent: &str, tool: &str) -> bool {
        self.agents
            .get(agent)
            .is_some_and(|grant| grant_allows(grant, tool))
    }

    /// Decides whether `agent` may run `tool` with `args`. Approval is not
    /// part of this answer (see [`GatedSource`]); everything else is.
    pub fn can_use(&self, agent: &str, tool: &str, args: &Value) -> Result<(), ToolError> {
        let Some(grant) = self.agents.get(agent) else {
            let known: Vec<&str> = self.agents.keys().map(String::as_str).collect();
            return Err(ToolError::new(
                ErrorReason::Unauthorized,
                format!("unknown agent `{agent}`: no tool may run for it"),
            )
            .with_hint(format!("declared agents: {}", known.join(", "))));
        };
        if !grant_allows(grant, tool) {
            return Err(ToolError::new(
                ErrorReason::Unauthorized,
                format!("agent `{agent}` may not use the tool `{tool}`"),
            )
            .with_hint(format!(
                "grant it in the [[agents]] entry named {agent} (allow_tools / deny_tools)"
            )));
        }
        if let Some(arg) = self.device_tools.get(tool) {
            let device = args.get(arg).and_then(Value::as_str).unwrap_or("");
            if device.is_empty() {
                return Err(ToolError::new(
                    ErrorReason::Unauthorized,
                    format!("`{tool}` needs a device id in `{arg}`; without one it cannot run"),
                )
                .with_field(arg.clone())
                .with_hint("call device_list to see the devices you may use"));
            }
            if !grant.devices.iter().any(|granted| granted == device) {
                return Err(ToolError::new(
                    ErrorReason::Unauthorized,
                    format!("agent `{agent}` is not granted the device `{device}`"),
                )
                .with_field(arg.clone())
                .with_hint(format!(
                    "add \"{device}\" to `devices` in the [[agents]] entry named {agent}"
                )));
            }
        }
        Ok(())
    }
}

fn grant_allows(grant: &AgentGrant, tool: &str) -> bool {
    let allowed =
        grant.allow_tools.is_empty() || grant.allow_tools.iter().any(|p| pattern_matches(p, tool));
    allowed && !grant.deny_tools.iter().any(|p| pattern_matches(p, tool))
}

fn pattern_matches(pattern: &str, tool: &str) -> bool {
    match pattern.strip_suffix('*') {
        Some(prefix) => tool.starts_with(prefix),
        None => pattern == tool,
    }
}

/// A tool source whose every `invoke` passes the [`Gate`] first.
pub struct GatedSource {
    inner: Arc<dyn ToolSource>,
    gate: Arc<Gate>,
    approval: Approval,
}

impl GatedSource {
    pub fn new(inner: Arc<dyn ToolSource>, gate: Arc<Gate>, approval: Approval) -> Self {
        GatedSource {
            inner,
            gate,
            approval,
        }
    }

    pub fn gate(&self) -> &Arc<Gate> {
        &self.gate
    }

    /// The same source and gate under another approval policy (one per
    /// front end: `chat` asks, `run --yes` grants).
    pub fn with_approval(&self, approval: Approval) -> Self {
        GatedSource {
            inner: Arc::clone(&self.inner),
            gate: Arc::clone(&self.gate),
            approval,
        }
    }

    /// The agent a call to `tool` with `extras` and `arguments` is made
    /// for, if the gate lets it use the tool so: the one check every call
    /// passes, before its pre-hooks ([`ToolSource::refusal`]) and again
    /// when it is invoked.
    fn authorized(
        &self,
        tool: &str,
        extras: &Map<String, Value>,
        arguments: &Value,
    ) -> Result<String, ToolError> {
        let Some(agent) = extras.get(AGENT_EXTRA).and_then(Value::as_str) else {
            return Err(ToolError::new(
                ErrorReason::Unauthorized,
                format!("the call to `{tool}` names no agent; every call must say who makes it"),
            ));
        };
        self.gate.can_use(agent, tool, arguments)?;
        Ok(agent.to_owned())
    }
}

/// A call to `tool`, which needs approval, where nobody can be asked.
fn approval_refused(tool: &str) -> ToolError {
    ToolError::new(
        ErrorReason::Denied,
        format!("`{tool}` requires approval and nobody could be asked"),
    )
    .with_hint(
        "approve it in `homeagent chat`, pass --yes to `homeagent run` or \
         `homeagent mcp-serve`, or remove it from tools.require_approval",
    )
}

impl ToolSource for GatedSource {
    fn definition(&self, name: &str) -> Option<Arc<ToolDef>> {
        self.inner.definition(name)
    }

    fn definitions(&self) -> Vec<Arc<ToolDef>> {
        self.inner.definitions()
    }

    fn visible_to(&self, agent: &str, tool: &str) -> bool {
        self.gate.visible(agent, tool)
    }

    fn refusal(&self, call: &homeagent_core::CallInfo) -> Option<ToolError> {
        self.authorized(&call.tool, &call.extras, &call.arguments)
            .err()
    }

    fn approval_refusal(&self, call: &homeagent_core::CallInfo) -> Option<ToolError> {
        match self.approval {
            Approval::Refused if self.gate.needs_approval(&call.tool) => {
                Some(approval_refused(&call.tool))
            }
            _ => None,
        }
    }

    fn invoke(&self, name: &str, ctx: ToolContext) -> ToolFuture {
        let agent = match self.authorized(name, &ctx.extras, &ctx.arguments) {
            Ok(agent) => agent,
            Err(error) => return Box::pin(async move { Err(error) }),
        };
        // A name that is no tool: the hint suggests only tools this agent
        // may use (the source's own would name any).
        if self.inner.definition(name).is_none() {
            let usable: Vec<String> = self
                .inner
                .definitions()
                .iter()
                .filter(|def| self.gate.visible(&agent, &def.name))
                .map(|def| def.name.clone())
                .collect();
            let error = homeagent_core::registry::not_found(name, &usable);
            return Box::pin(async move { Err(error) });
        }
        if !self.gate.needs_approval(name) {
            return self.inner.invoke(name, ctx);
        }
        let tool = name.to_owned();
        match &self.approval {
            Approval::Granted => self.inner.invoke(name, ctx),
            Approval::Refused => Box::pin(async move { Err(approval_refused(&tool)) }),
            Approval::Ask(approver) => {
                // The handler is not even created before the answer, and
                // the person's time is not the tool's: the call's clock
                // (its timeout) stops until they answer.
                let paused = homeagent_core::call_notes::pause_clock();
                let asked = approver.approve(&agent, name, &ctx.arguments);
                let inner = Arc::clone(&self.inner);
                Box::pin(async move {
                    let yes = asked.await;
                    drop(paused);
                    if yes {
                        inner.invoke(&tool, ctx).await
                    } else {
                        Err(ToolError::new(
                            ErrorReason::Denied,
                            format!("the person declined the call to `{tool}`"),
                        ))
                    }
                })
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The config accepts `files_*` in `require_approval`; a pattern that
    /// matched nothing here would silently let every such tool run unasked.
    #[test]
    fn an_approval_pattern_covers_every_tool_it_names() {
        let gate =
            Gate::new([]).with_approval_required(["files_*".to_owned(), "cmd_run".to_owned()]);
        assert!(gate.needs_approval("files_write"));
        assert!(gate.needs_approval("files_delete"));
        assert!(gate.needs_approval("cmd_run"));
        assert!(!gate.needs_approval("clock_now"));
        assert!(!gate.needs_approval("cmd_run_x"));
    }

    /// The policy's name, never the approver behind it (a UI's handle).
    #[test]
    fn an_approval_policy_shows_its_name() {
        struct Nobody;
        impl Approver for Nobody {
            fn approve(
                &self,
                _: &str,
                _: &str,
                _: &Value,
            ) -> Pin<Box<dyn Future<Output = bool> + Send + 'static>> {
                Box::pin(async { false })
            }
        }
        let shown: Vec<String> = [
            Approval::Ask(Arc::new(Nobody)),
            Approval::Granted,
            Approval::Refused,
        ]
        .iter()
        .map(|approval| format!("{approval:?}"))
        .collect();
        assert_eq!(shown, ["Ask", "Granted", "Refused"]);
    }
}
