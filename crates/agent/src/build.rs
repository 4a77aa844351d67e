//! Turning a loaded config into a running agent: sources, tools, the gate,
//! the store, the runtime and the scheduler.
//!
//! Source selection: the config's `[[llm.sources]]` when it names any, else
//! the conventional environment variables, else the offline demo model
//! (with the demo tools it scripts calls to, and a notice saying how to
//! connect a real model).

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::sync::Arc;

use homeagent_core::{ExecutorOptions, Registry, RegistryError, ToolContext, ToolDef};
use homeagent_llm::source::environment_configs;
use homeagent_llm::{
    FallbackOptions, LocalModel, Options, SetupError, SourceConfig, SourceProtocol, SourceSetup,
    Sources,
};
use homeagent_seq::{
    BackendSlot, SeqBackend, SeqSetupError, SeqStore, SeqToolsOptions, register_seq_tools,
};
use homeagent_tools::{
    AGENT_EXTRA, AgentGrant, Approval, ChannelRegistry, CmdRunPolicy, ConsoleChannel, DEMO_TOOLS,
    DemoState, FilesPolicy, FilesSetupError, Gate, GatedSource, ListedTools, OutputChannel,
    ToolVisibility, register_cmd_run, register_demo_tools, register_files_tools,
    register_get_tools_listing, register_output_channels,
};

use homeagent_device::{
    DEVICE_CMD_RUN_TOOL, DEVICE_ID_ARG, DEVICE_TOOLS, DeviceHub, DeviceVisibility, HubOptions,
    register_device_tools,
};

use crate::config::LoadedConfig;
use crate::demo_model::DemoModel;
use crate::runtime::{AgentSettings, Runtime};
use crate::scheduler::{Scheduler, SchedulerOptions};
use crate::store::{Durability, Store, StoreError};

/// The store's file name inside the data directory.
pub const STORE_FILE: &str = "homeagent.db";

/// Where `seq_create {file}` may read sequence files from (inside the data
/// directory; the model cannot name a path outside it).
pub const SEQUENCE_SOURCES_DIR: &str = "sequence-sources";

/// What the front end adds to the config.
#[derive(Clone)]
pub struct BuildOptions {
    /// The `console` output channel (stdout unless replaced, e.g. in tests).
    pub console: Arc<dyn OutputChannel>,
    /// How tools listed in `require_approval` are approved.
    pub approval: Approval,
    /// The demo model's script knobs.
    pub demo: DemoModel,
    /// Register the device bridge's tools over a fresh hub (`serve` does:
    /// only a server can have devices bound).
    pub devices: bool,
    /// Start the configured MCP servers (on by default). A command that
    /// builds the agent only to check it (`config check`) turns it off:
    /// the servers' settings are still checked, but no server is started
    /// only to be closed when the command exits. (`seq create` starts
    /// them: a sequence is checked against their tools.)
    pub start_mcp_servers: bool,
    /// How long the store holds a write for the input's next one
    /// (`Store::set_write_hold`); `None` keeps the store's default. Tests
    /// that count commits hold for long, so a slow machine counts the same.
    pub write_hold: Option<std::time::Duration>,
}

impl Default for BuildOptions {
    fn default() -> Self {
        BuildOptions {
            console: Arc::new(ConsoleChannel::stdout()),
            approval: Approval::Refused,
            demo: DemoModel::default(),
            devices: false,
            start_mcp_servers: true,
            write_hold: None,
        }
    }
}

/// Why the agent could not be built.
#[derive(Debug, thiserror::Error)]
pub enum BuildError {
    #[error(transparent)]
    Sources(#[from] SetupError),
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error(transparent)]
    Registry(#[from] RegistryError),
    #[error(transparent)]
    Files(#[from] FilesSetupError),
    #[error("cannot set up cmd_run: {0}")]
    CmdRun(String),
    #[error("cannot set up an output channel: {0}")]
    Channel(String),
    #[error(transparent)]
    Seq(#[from] SeqSetupError),
    #[error(transparent)]
    Hook(#[from] homeagent_tools::hooks::HookSpecError),
    #[error(transparent)]
    Mcp(#[from] homeagent_mcp::SpecError),
    #[error("MCP servers need a running Tokio runtime to start in (build the agent inside one)")]
    NoRuntime,
    #[error(
        "tools.files.root is the data directory {}, which holds the store and HomeAgent's own \
         files: give the files tools a directory of their own (the default is <data dir>/files)",
        root.display()
    )]
    FilesRootIsDataDir { root: PathBuf },
    #[error(
        "`{key}` names the tool `{name}`, which does not exist (a name ending in `*` matches \
         a prefix; MCP tools are named <server>__<tool>); known tools: {known}"
    )]
    UnknownTool {
        /// Where in the config (`tools.require_approval`, `agents[1].deny_tools`).
        key: String,
        name: String,
        known: String,
    },
    #[error(
        "`{key}` is `{matcher}`, which matches no tool, so the hook would never run (the \
         expression must match a whole tool name; MCP tools are named <server>__<tool>); \
         known tools: {known}"
    )]
    HookMatchesNoTool {
        /// Where in the config (`hooks.pre_tool_use[0].matcher`).
        key: String,
        matcher: String,
        known: String,
    },
}

/// A built agent.
pub struct Agent {
    pub runtime: Arc<Runtime>,
    pub scheduler: Scheduler,
    /// Every tool, ungated (for listings; calls go through the runtime).
    pub registry: Arc<Registry>,
    pub channels: ChannelRegistry,
    /// Present when the demo tools are registered.
    pub demo: Option<DemoState>,
    /// Things the person should know (e.g. the demo model is in use).
    pub notices: Vec<String>,
    pub store_path: PathBuf,
    /// Where each tool came from (`builtin`, `demo`, `output`, `seq`), by
    /// name; MCP tools are not listed here (they come and go).
    pub tool_sources: BTreeMap<String, &'static str>,
    /// The MCP servers' manager, when any is configured (status, shutdown).
    pub mcp: Option<homeagent_mcp::McpManager>,
    /// The device bridge's hub, when [`BuildOptions::devices`] asked for it.
    pub devices: Option<DeviceHub>,
}

impl Agent {
    /// Where the tool `name` comes from: its entry in
    /// [`Agent::tool_sources`], else `mcp` (the runtime's tools are the
    /// registry's and the MCP servers'; MCP tools come and go, so they are
    /// not listed there).
    pub fn tool_source(&self, name: &str) -> &'static str {
        tool_source_of(&self.tool_sources, &self.registry, name)
    }
}

/// [`Agent::tool_source`], for holders of the agent's parts.
pub fn tool_source_of(
    sources: &BTreeMap<String, &'static str>,
    registry: &Registry,
    name: &str,
) -> &'static str {
    match sources.get(name) {
        Some(source) => source,
        None if homeagent_core::ToolSource::definition(registry, name).is_none() => "mcp",
        None => "other",
    }
}

impl std::fmt::Debug for Agent {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Agent")
            .field("runtime", &self.runtime)
            .field("notices", &self.notices)
            .finish_non_exhaustive()
    }
}

/// The notice printed when no real model is configured.
pub const DEMO_NOTICE: &str = "no model source is configured: using the offline demo model. \
    To connect a real one, set OPENAI_API_KEY (and OPENAI_BASE_URL for a compatible server), \
    ANTHROPIC_API_KEY, GEMINI_API_KEY or OLLAMA_HOST (HOMEAGENT_MODEL names the model), or add \
    [[llm.sources]] to the config (`homeagent config example` shows how).";

/// Builds the agent `loaded` describes; `env` reads the environment (API
/// keys, the conventional provider variables).
pub fn build(
    loaded: &LoadedConfig,
    env: &impl Fn(&str) -> Option<String>,
    options: BuildOptions,
) -> Result<Agent, BuildError> {
    let config = &loaded.config;
    let mut notices = Vec::new();
    if matches!(options.approval, Approval::Refused) && !config.tools.require_approval.is_empty() {
        notices.push(format!(
            "tools.require_approval lists {}, and nobody can be asked here: their calls are \
             refused (chat asks; run and mcp-serve approve them with --yes)",
            config.tools.require_approval.join(", ")
        ));
    }
    let mut source_configs = config.llm.sources.clone();
    if source_configs.is_empty() {
        source_configs = environment_configs(env);
    }
    if source_configs.is_empty() {
        notices.push(DEMO_NOTICE.to_owned());
        source_configs.push(SourceConfig::new("demo", SourceProtocol::Demo));
    }
    let uses_demo = source_configs
        .iter()
        .any(|s| s.protocol == SourceProtocol::Demo);
    let fallback = FallbackOptions {
        transport: Options {
            stream_idle_timeout: config.llm.stream_idle_timeout.as_duration(),
            connect_timeout: config.llm.connect_timeout.as_duration(),
            request_timeout: config.llm.request_timeout.as_duration(),
            extra_ca_pem: loaded.ca_certificates(),
            ..Options::default()
        },
        ..FallbackOptions::default()
    };
    let setup = SourceSetup {
        adapter_dir: Some(loaded.adapter_dir()),
        local_model: Some(Arc::new(options.demo.clone()) as Arc<dyn LocalModel>),
    };
    let sources = Arc::new(Sources::build(source_configs, env, fallback, &setup)?);

    let registry = Arc::new(Registry::new());
    let mut tool_sources = BTreeMap::new();
    let demo = if config.tools.demo || uses_demo {
        Some(register_demo_tools(&registry)?)
    } else {
        None
    };
    attribute(&registry, &mut tool_sources, "demo");
    let cmd = &config.tools.cmd_run;
    if cmd.enabled {
        let policy = CmdRunPolicy {
            allowlist: cmd.allowlist.clone(),
            allow_writes: cmd.allow_writes,
            timeout: cmd.timeout.as_duration(),
            max_timeout: cmd.max_timeout.as_duration(),
            env: cmd.env.clone(),
            // The config file may hold the server's key and device tokens,
            // the data directory every session's history and the
            // sequences; where each will be (neither may exist yet).
            private_paths: [&loaded.paths.config_file, &loaded.paths.data_dir]
                .into_iter()
                .map(|path| homeagent_tools::files::resolved_as_far_as_it_exists(path))
                .collect(),
            ..CmdRunPolicy::default()
        };
        // A policy that cannot be honoured as written (a shell in the
        // allowlist, a bad variable name) fails the start, loudly.
        policy
            .validate()
            .map_err(|e| BuildError::CmdRun(e.to_string()))?;
        for program in policy.unavailable_programs() {
            notices.push(format!(
                "tools.cmd_run.allowlist names `{program}`, which is not on the PATH commands \
                 run with ({}); every call to it will fail until it is installed there",
                homeagent_tools::cmd_run::CHILD_PATH
            ));
        }
        register_cmd_run(&registry, policy).map_err(|e| BuildError::CmdRun(e.to_string()))?;
    }
    let files_root = loaded.files_root();
    let data_dir = &loaded.paths.data_dir;
    // Where each will be once made: on a first run neither exists yet.
    let planned = homeagent_tools::files::resolved_as_far_as_it_exists;
    if planned(&files_root) == planned(data_dir) {
        return Err(BuildError::FilesRootIsDataDir { root: files_root });
    }
    // The config holds keys and the hook commands, the data directory the
    // store: never the files tools', wherever the root is.
    let mut files = FilesPolicy::new(files_root);
    files.private = vec![loaded.paths.config_file.clone(), data_dir.clone()];
    register_files_tools(&registry, files)?;
    attribute(&registry, &mut tool_sources, "builtin");
    let channels = ChannelRegistry::new();
    channels
        .add(Arc::clone(&options.console))
        .map_err(|e| BuildError::Channel(e.to_string()))?;
    register_output_channels(&registry, &channels)?;
    attribute(&registry, &mut tool_sources, "output");

    let gate = Arc::new(
        Gate::new(config.agents.iter().map(|a| AgentGrant {
            name: a.name.clone(),
            allow_tools: a.allow_tools.clone(),
            deny_tools: a.deny_tools.clone(),
            devices: a.devices.clone(),
        }))
        .with_approval_required(config.tools.require_approval.iter().cloned())
        // Device-scoped whether or not devices are enabled: no path, and no
        // same-named tool from elsewhere, may run it without a device grant.
        .with_device_tool(DEVICE_CMD_RUN_TOOL, DEVICE_ID_ARG),
    );
    let visible: ToolVisibility = {
        let gate = Arc::clone(&gate);
        Arc::new(move |ctx: &ToolContext, def: &ToolDef| {
            ctx.extras
                .get(AGENT_EXTRA)
                .and_then(serde_json::Value::as_str)
                .is_some_and(|agent| gate.visible(agent, &def.name))
        })
    };
    let listed_tools = ListedTools::default();
    register_get_tools_listing(&registry, Some(visible), listed_tools.clone())?;
    attribute(&registry, &mut tool_sources, "builtin");
    let devices = if options.devices {
        let hub = DeviceHub::new(HubOptions::default());
        // device_list shows an agent only the devices the gate lets it use.
        let visible: DeviceVisibility = {
            let gate = Arc::clone(&gate);
            Arc::new(move |ctx: &ToolContext, device: &str| {
                let args = serde_json::json!({ DEVICE_ID_ARG: device });
                ctx.extras
                    .get(AGENT_EXTRA)
                    .and_then(serde_json::Value::as_str)
                    .is_some_and(|agent| gate.can_use(agent, DEVICE_CMD_RUN_TOOL, &args).is_ok())
            })
        };
        register_device_tools(&registry, &hub, Some(visible))?;
        attribute(&registry, &mut tool_sources, "device");
        Some(hub)
    } else {
        None
    };
    // The sequence tools run their calls through the gated executor, which
    // exists only once the runtime does: they get a slot filled below.
    let seq_store = Arc::new(SeqStore::new(&loaded.paths.data_dir));
    let seq_backend = BackendSlot::default();
    register_seq_tools(
        &registry,
        Arc::clone(&seq_store),
        Arc::clone(&seq_backend),
        SeqToolsOptions {
            source_dir: Some(loaded.paths.data_dir.join(SEQUENCE_SOURCES_DIR)),
        },
    )?;
    attribute(&registry, &mut tool_sources, "seq");
    // One config serves every mode: a tool this start leaves out (devices
    // outside `serve`, a disabled cmd_run, the demo tools) may still be named.
    let other_modes = DEVICE_TOOLS
        .into_iter()
        .chain(DEMO_TOOLS)
        .chain([homeagent_tools::cmd_run::CMD_RUN_TOOL]);
    let names = ToolNames::new(&registry, other_modes, &config.mcp.servers);
    names.check("tools.require_approval", &config.tools.require_approval)?;
    for (i, agent) in config.agents.iter().enumerate() {
        names.check(&format!("agents[{i}].allow_tools"), &agent.allow_tools)?;
        names.check(&format!("agents[{i}].deny_tools"), &agent.deny_tools)?;
    }

    let store_path = loaded.paths.data_dir.join(STORE_FILE);
    let durability = match config.store.sync {
        crate::config::StoreSync::Full => Durability::Full,
        crate::config::StoreSync::Normal => Durability::Normal,
    };
    let mut store = Store::open_with(&store_path, durability)?;
    if let Some(hold) = options.write_hold {
        store.set_write_hold(hold);
    }
    let store = Arc::new(store);
    // MCP tools sit in front of the built-in registry; both behind the gate.
    let mcp_specs = mcp_specs(loaded)?;
    let nested = homeagent_mcp::nesting();
    let mcp = if !options.start_mcp_servers {
        None
    } else if !mcp_specs.is_empty() && nested >= homeagent_mcp::MAX_NESTING {
        // Started as an MCP server of a HomeAgent started as one of another
        // ...: most likely a config listing `homeagent mcp-serve` as its
        // own server, which would start copies of itself without end.
        notices.push(format!(
            "MCP servers not started: this HomeAgent is an MCP server {nested} levels deep \
             (${}); does [[mcp.servers]] list `homeagent mcp-serve` with this same config?",
            homeagent_mcp::NESTING_ENV
        ));
        None
    } else {
        start_mcp(mcp_specs, &registry)?
    };
    let inner: Arc<dyn homeagent_core::ToolSource> = match &mcp {
        Some(manager) => Arc::new(manager.clone()),
        None => Arc::clone(&registry) as _,
    };
    // get_tools lists what a call can reach: MCP tools included.
    listed_tools.list_from(&inner);
    let tools = Arc::new(GatedSource::new(inner, gate, options.approval.clone()));
    let hook_spec = |entry: &crate::config::HookEntry| homeagent_tools::hooks::CommandHookSpec {
        matcher: entry.matcher.clone(),
        command: entry.command.clone(),
        timeout: entry.timeout.as_duration(),
        env: entry.env.clone(),
    };
    for (kind, entries) in [
        ("pre_tool_use", &config.hooks.pre_tool_use),
        ("post_tool_use", &config.hooks.post_tool_use),
    ] {
        for (i, entry) in entries.iter().enumerate() {
            names.check_matcher(&format!("hooks.{kind}[{i}]"), &entry.matcher)?;
        }
    }
    let pre: Vec<_> = config.hooks.pre_tool_use.iter().map(hook_spec).collect();
    let post: Vec<_> = config.hooks.post_tool_use.iter().map(hook_spec).collect();
    let hooks = homeagent_tools::hooks::command_hooks(&pre, &post, options.approval.clone())?;
    let settings = AgentSettings {
        max_tool_turns: config.agent.max_tool_turns,
        context_tokens: config.agent.context_tokens as usize,
        max_tokens: config.agent.max_tokens,
        system_prompt: config.agent.system_prompt.clone(),
        executor: ExecutorOptions {
            parallel: config.tools.parallel,
            ..ExecutorOptions::default()
        },
        hooks,
    };
    let runtime = Arc::new(Runtime::new(sources, tools, store, settings));
    notices.extend(crowded_budgets(config, &runtime));
    // Filled exactly once, here, before anything can call a sequence tool.
    let _ = seq_backend.set(SeqBackend::new(Arc::new(runtime.executor(None))));
    let scheduler = Scheduler::new(
        Arc::clone(&runtime),
        SchedulerOptions {
            max_concurrent_sessions: config.scheduler.max_concurrent_sessions as usize,
            queue_capacity: config.scheduler.queue_capacity as usize,
            dedup_window: config.scheduler.dedup_window.map(|d| d.as_duration()),
        },
    );
    Ok(Agent {
        runtime,
        scheduler,
        registry,
        channels,
        demo,
        notices,
        store_path,
        tool_sources,
        mcp,
        devices,
    })
}

/// Starts the MCP servers (in the background: a server that is slow or
/// down is reported in its status, and the agent starts anyway).
fn start_mcp(
    specs: Vec<homeagent_mcp::McpServerSpec>,
    registry: &Arc<Registry>,
) -> Result<Option<homeagent_mcp::McpManager>, BuildError> {
    if specs.is_empty() {
        return Ok(None);
    }
    let parent: Arc<dyn homeagent_core::ToolSource> = Arc::clone(registry) as _;
    homeagent_mcp::spawn_mcp_servers(specs, Some(parent), homeagent_mcp::McpOptions::default())
        .map(Some)
        .map_err(|_| BuildError::NoRuntime)
}

/// The configured MCP servers, checked: a name that cannot prefix tool
/// names, limits that contradict each other or transport fields that do
/// not fit are config errors.
fn mcp_specs(loaded: &LoadedConfig) -> Result<Vec<homeagent_mcp::McpServerSpec>, BuildError> {
    let config = &loaded.config;
    let mut specs = Vec::with_capacity(config.mcp.servers.len());
    for entry in &config.mcp.servers {
        let transport = homeagent_mcp::McpTransport::from_fields(
            &entry.name,
            homeagent_mcp::TransportFields {
                // A relative path to the program is taken from the config
                // file's directory, like `cwd` and every other path in the
                // file (a bare name is looked up on PATH).
                command: entry.command.as_deref().map(|command| {
                    if command.contains('/') {
                        loaded
                            .resolve_path(std::path::Path::new(command))
                            .display()
                            .to_string()
                    } else {
                        command.to_owned()
                    }
                }),
                args: entry.args.clone(),
                env: entry.env.clone(),
                cwd: entry.cwd.as_deref().map(|dir| loaded.resolve_path(dir)),
                url: entry.url.clone(),
                bearer_token: entry.bearer_token.as_ref().map(|s| s.expose().to_owned()),
            },
        )?;
        specs.push(homeagent_mcp::McpServerSpec {
            name: entry.name.clone(),
            transport,
            trusted: entry.trusted,
            parallel_safe: entry.parallel_safe.clone(),
            serial: entry.serial.clone(),
            timeout: entry.timeout.as_duration(),
            max_timeout: entry.max_timeout.map(|limit| limit.as_duration()),
        });
    }
    // Checked here with the manager's own rules, not only by the manager
    // (which would just leave the server out): a server that cannot work
    // is a config error.
    homeagent_mcp::check_specs(&specs)?;
    Ok(specs)
}

/// Credits every tool not yet attributed to `source`.
fn attribute(
    registry: &Registry,
    sources: &mut BTreeMap<String, &'static str>,
    source: &'static str,
) {
    use homeagent_core::ToolSource;
    let names: BTreeSet<String> = registry
        .definitions()
        .iter()
        .map(|d| d.name.clone())
        .collect();
    for name in names {
        sources.entry(name).or_insert(source);
    }
}

/// The tools a config may name: every registered tool, and every tool of
/// a configured MCP server (`<server>__<tool>`; which tools a server has is
/// known only once it runs, so any name under its prefix is taken).
/// Checking the names is what makes a typo fail the start: `deny_tools =
/// ["cmd-run"]` denied nothing, silently.
struct ToolNames {
    tools: Vec<String>,
    mcp_prefixes: Vec<String>,
}

impl ToolNames {
    fn new<'a>(
        registry: &Registry,
        unregistered: impl IntoIterator<Item = &'a str>,
        servers: &[crate::config::McpServerEntry],
    ) -> Self {
        use homeagent_core::ToolSource;
        let mut tools: Vec<String> = registry
            .definitions()
            .iter()
            .map(|d| d.name.clone())
            .collect();
        for name in unregistered {
            if !tools.iter().any(|t| t == name) {
                tools.push(name.to_owned());
            }
        }
        ToolNames {
            tools,
            mcp_prefixes: servers
                .iter()
                .filter_map(|server| {
                    let name = homeagent_mcp::exposed_name(&server.name, "t").ok()?;
                    Some(name.strip_suffix('t')?.to_owned())
                })
                .collect(),
        }
    }

    /// Whether `pattern` (a name, or a prefix ending in `*`, as the gate
    /// reads them) can match a tool.
    fn matches_some(&self, pattern: &str) -> bool {
        // MCP tools are known only once their servers run, so a name under
        // a server's prefix is taken on trust, but only if an exposed name
        // could be spelled so (`[A-Za-z0-9_-]`, at most 64): the gate
        // compares exactly, and `git__git.push` would match nothing.
        let exposable = homeagent_mcp::is_exposed_form;
        match pattern.strip_suffix('*') {
            Some(prefix) => {
                self.tools.iter().any(|t| t.starts_with(prefix))
                    || (exposable(prefix)
                        && self
                            .mcp_prefixes
                            .iter()
                            .any(|p| p.starts_with(prefix) || prefix.starts_with(p.as_str())))
            }
            None => {
                self.tools.iter().any(|t| t == pattern)
                    || (exposable(pattern)
                        && self
                            .mcp_prefixes
                            .iter()
                            .any(|p| pattern.len() > p.len() && pattern.starts_with(p.as_str())))
            }
        }
    }

    fn check(&self, key: &str, patterns: &[String]) -> Result<(), BuildError> {
        match patterns.iter().find(|p| !self.matches_some(p)) {
            None => Ok(()),
            Some(name) => Err(BuildError::UnknownTool {
                key: key.to_owned(),
                name: name.clone(),
                known: self.known(),
            }),
        }
    }

    /// A hook's matcher (a regular expression on the whole name) must match
    /// a tool. MCP tools are known only once their servers run, so with a
    /// server configured an expression that names a tool the MCP way
    /// (`__`, or a server's prefix) is taken on trust. `hook` is where the
    /// hook sits (`hooks.pre_tool_use[0]`); an expression that does not
    /// compile is left to the hooks' own check, which names it.
    fn check_matcher(&self, hook: &str, matcher: &str) -> Result<(), BuildError> {
        let Ok(parsed) = homeagent_tools::hooks::Matcher::parse(hook, matcher) else {
            return Ok(());
        };
        let mcp_named = !self.mcp_prefixes.is_empty()
            && (matcher.contains("__")
                || self
                    .mcp_prefixes
                    .iter()
                    .any(|p| matcher.contains(p.as_str())));
        if mcp_named || self.tools.iter().any(|t| parsed.matches(t)) {
            return Ok(());
        }
        Err(BuildError::HookMatchesNoTool {
            key: format!("{hook}.matcher"),
            matcher: matcher.to_owned(),
            known: self.known(),
        })
    }

    /// The known tools and MCP prefixes, for an error message.
    fn known(&self) -> String {
        let mut known = self.tools.clone();
        known.sort();
        known.extend(self.mcp_prefixes.iter().map(|p| format!("{p}*")));
        known.join(", ")
    }
}

/// A notice for each agent whose system prompt and tool definitions (the
/// built-in tools; an MCP server's come later) take half of
/// `agent.context_tokens` or more: they go out with every request, and
/// what they leave is all the history there is room for, often only the
/// current turn.
fn crowded_budgets(config: &crate::config::Config, runtime: &Runtime) -> Vec<String> {
    let budget = config.agent.context_tokens as usize;
    let mut names: Vec<&str> = config.agents.iter().map(|a| a.name.as_str()).collect();
    if names.is_empty() {
        names.push(homeagent_tools::DEFAULT_AGENT);
    }
    names
        .into_iter()
        .filter_map(|name| {
            let reserved = runtime.reserved_tokens(name);
            (reserved.saturating_mul(2) >= budget).then(|| {
                format!(
                    "agent `{name}`: the system prompt and the tool definitions take about \
                     {reserved} of agent.context_tokens = {budget} tokens in every request, \
                     leaving {} for the conversation; raise agent.context_tokens toward the \
                     model's window, or give the agent fewer tools (allow_tools, deny_tools)",
                    budget.saturating_sub(reserved)
                )
            })
        })
        .collect()
}
