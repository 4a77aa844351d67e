//! The config model: one struct per TOML table.
//!
//! These types are the single definition of the file format. The parser is
//! serde with `deny_unknown_fields` on every table (a misspelled key is an
//! error listing the allowed keys, never a silent default), and the
//! commented example (`homeagent config example`, docs/CONFIG.md) is
//! generated from their JSON schema: the doc comment of a field is the
//! comment above its line, so write them for the person editing the file.

use std::collections::BTreeMap;
use std::path::PathBuf;

use homeagent_llm::SourceConfig;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::duration::{DurationUnit, HumanDuration};
use super::secret::Secret;

/// The name of the agent used when none is given.
pub const DEFAULT_AGENT: &str = "main";

/// The whole config file.
#[derive(Debug, Clone, Default, PartialEq, Deserialize, Serialize, JsonSchema)]
#[serde(default, deny_unknown_fields)]
pub struct Config {
    /// The agent loop: turns, context budget, system prompt.
    pub agent: AgentSection,
    /// How inputs are queued and run.
    pub scheduler: SchedulerSection,
    /// The threads the program runs on.
    pub runtime: RuntimeSection,
    /// Model sources and how HomeAgent talks to them.
    pub llm: LlmSection,
    /// Built-in tools.
    pub tools: ToolsSection,
    /// Agents and what each may use. Without any, the agent `main` has
    /// every tool and no device.
    pub agents: Vec<AgentEntry>,
    /// The HTTP server (`homeagent serve`).
    pub server: ServerSection,
    /// MCP servers whose tools the agents may use.
    pub mcp: McpSection,
    /// Commands run before and after tool calls (your own policy scripts).
    pub hooks: HooksSection,
    /// The history database.
    pub store: StoreSection,
}

/// `[store]`
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
#[serde(default, deny_unknown_fields)]
pub struct StoreSection {
    /// When a commit counts as done. `full`: on disk, through a power cut
    /// (one fsync per commit, shared by concurrent writers). `normal`:
    /// survives the process crashing, but a power cut or OS crash may lose
    /// the last commits (the history stays consistent); no fsync per commit.
    pub sync: StoreSync,
}

/// `[store] sync`
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum StoreSync {
    /// Every commit on disk before it counts (the default).
    #[default]
    Full,
    /// Commits survive a process crash, not necessarily a power cut.
    Normal,
}

/// `[agent]`
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
#[serde(default, deny_unknown_fields)]
pub struct AgentSection {
    /// Batches of tool calls per input. After this many the input ends
    /// without asking the model again: the reply is the text it sent with
    /// its last calls and a note that the limit was reached (the last
    /// batch's results are stored, and the next input's request shows
    /// them). At least 1.
    pub max_tool_turns: u32,
    /// Approximate token budget of the history sent to the model; the
    /// oldest turns are dropped whole (the store keeps everything). At
    /// least 1024.
    pub context_tokens: u32,
    /// Most tokens the model may produce per reply (sent to the provider).
    /// At least 1.
    pub max_tokens: u32,
    /// Extra text appended to the built-in system prompt.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schemars(example = &"You answer briefly and in English.")]
    pub system_prompt: Option<String>,
}

impl Default for AgentSection {
    fn default() -> Self {
        AgentSection {
            max_tool_turns: 10,
            context_tokens: 32_000,
            max_tokens: 4096,
            system_prompt: None,
        }
    }
}

/// `[scheduler]`
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
#[serde(default, deny_unknown_fields)]
pub struct SchedulerSection {
    /// Sessions whose turns may run at the same time (one turn at a time
    /// per session).
    pub max_concurrent_sessions: u32,
    /// Inputs waiting per session; more are answered `skipped: queue_full`.
    pub queue_capacity: u32,
    /// Skip an input identical to one the same session received this
    /// recently (`skipped: duplicate`). For channels that may deliver a
    /// message twice; off when absent, so a repeated input is never skipped.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schemars(example = &"10s")]
    pub dedup_window: Option<HumanDuration>,
}

impl Default for SchedulerSection {
    fn default() -> Self {
        SchedulerSection {
            max_concurrent_sessions: 16,
            queue_capacity: 256,
            dedup_window: None,
        }
    }
}

/// `[runtime]`
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
#[serde(default, deny_unknown_fields)]
pub struct RuntimeSection {
    /// Threads that run the agent's async work: sessions, model streams,
    /// tools, the HTTP server (1 to 256). The store and blocking work have
    /// a pool of their own. An agent waits on models and tools far more
    /// than it computes, and one thread needs no wake-ups between threads:
    /// on a 2-core machine it cut the context switches per input from
    /// about 50 to 20 and the time per turn by about a quarter
    /// (docs/BENCHMARKS.md). Raise it when many sessions run at once: on
    /// the same machine, 2 halved the p99 latency of a burst of 240
    /// sessions, while inputs that come one at a time cost more.
    pub worker_threads: u16,
    /// Threads for blocking work at most (1 to 512): the store's calls
    /// (four at a time), file tools, name lookups. With tokio's default of
    /// 512, a busy agent kept starting threads (20 to 49 under the bench's
    /// blast), each with its own allocator heap of half-used pages; 8 cut
    /// the agent's CPU per input by about a tenth and its memory by a
    /// quarter there (docs/BENCHMARKS.md). Work beyond the limit waits for
    /// a thread. Raise it for many file tools at once on slow storage.
    /// Each runtime has its own pool: with `serve_threads`, every serving
    /// thread's runtime has up to this many too.
    pub blocking_threads: u16,
    /// Threads that serve `homeagent serve`'s connections (1 to 64). One
    /// task accepts and hands each connection to one of them in turn; the
    /// first is the runtime above, each other one a runtime of one worker
    /// (and `blocking_threads`) of its own. Everything a connection starts
    /// stays on its thread, so an input that comes alone costs what it
    /// costs with one thread, while inputs on different connections run
    /// side by side: on a 2-core machine, 2 took the p99 latency of the
    /// bench's burst of 240 sessions from 66–118 ms to 55–69 ms, with
    /// inputs that come alone as fast as before (docs/BENCHMARKS.md).
    /// More than the machine's cores buys nothing; 1 serves every
    /// connection on the runtime above.
    pub serve_threads: u16,
}

/// Above this, a typo (an extra digit) is more likely than a machine.
pub const MAX_WORKER_THREADS: u16 = 256;

/// tokio's own default: more would only be a typo.
pub const MAX_BLOCKING_THREADS: u16 = 512;

/// More serving threads than this would be more than any machine that
/// runs a home agent has cores.
pub const MAX_SERVE_THREADS: u16 = 64;

impl Default for RuntimeSection {
    fn default() -> Self {
        RuntimeSection {
            worker_threads: 1,
            blocking_threads: 8,
            serve_threads: 2,
        }
    }
}

/// `[llm]`
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize, JsonSchema)]
#[serde(default, deny_unknown_fields)]
pub struct LlmSection {
    /// A stream that sends nothing for this long is cut and retried.
    pub stream_idle_timeout: HumanDuration,
    /// Time allowed to connect to a model server.
    pub connect_timeout: HumanDuration,
    /// The longest one model answer is read, however steadily it comes (a
    /// server sending keep-alives and nothing else is cut then).
    pub request_timeout: HumanDuration,
    /// Extra CA certificates (PEM files) trusted for model servers, e.g. a
    /// home lab's own CA. Relative paths are read from the config file's
    /// directory.
    pub ca_certificates: Vec<PathBuf>,
    /// Where Lua adapters are looked up. Default: `<data_dir>/adapters`.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schemars(example = &"/etc/homeagent/adapters")]
    pub adapter_dir: Option<PathBuf>,
    /// Model sources, tried by priority (higher first), then name. Without
    /// any, sources come from OPENAI_API_KEY, ANTHROPIC_API_KEY,
    /// GEMINI_API_KEY or OLLAMA_HOST.
    pub sources: Vec<SourceConfig>,
}

impl Default for LlmSection {
    fn default() -> Self {
        LlmSection {
            stream_idle_timeout: HumanDuration::seconds(60),
            connect_timeout: HumanDuration::seconds(10),
            request_timeout: HumanDuration::new(30, DurationUnit::Minutes),
            ca_certificates: Vec::new(),
            adapter_dir: None,
            sources: Vec::new(),
        }
    }
}

/// `[tools]`
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
#[serde(default, deny_unknown_fields)]
pub struct ToolsSection {
    /// Run a batch of parallel-safe calls concurrently. When false every
    /// batch runs in order, and the system prompt says so.
    pub parallel: bool,
    /// Register the demo tools demo_sleep, demo_echo and demo_note.
    pub demo: bool,
    /// Tools that ask before they run: y/n in `chat`; `run` and
    /// `mcp-serve` approve them with `--yes`; elsewhere (`serve`, `run`
    /// without `--yes`) nobody can be asked and their calls are denied
    /// (the start says so).
    pub require_approval: Vec<String>,
    /// The `cmd_run` tool: runs allowlisted programs, without a shell.
    pub cmd_run: CmdRunSection,
    /// The `files_read`, `files_list` and `files_write` tools.
    pub files: FilesSection,
}

impl Default for ToolsSection {
    fn default() -> Self {
        ToolsSection {
            parallel: true,
            demo: false,
            require_approval: Vec::new(),
            cmd_run: CmdRunSection::default(),
            files: FilesSection::default(),
        }
    }
}

/// `[tools.cmd_run]`
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
#[serde(default, deny_unknown_fields)]
pub struct CmdRunSection {
    /// Register `cmd_run`.
    pub enabled: bool,
    /// Program names that may run. A list replaces the built-in one
    /// (read-only inspection programs); empty means the built-in list,
    /// never "everything". With a program outside the built-in list,
    /// `cmd_run` calls run one at a time, in the model's order.
    pub allowlist: Vec<String>,
    /// Allow programs and options that write files (sed -i, sort -o, rm,
    /// tee ...). Then `cmd_run` calls run one at a time, in the model's
    /// order.
    pub allow_writes: bool,
    /// A program still running after this long is killed.
    pub timeout: HumanDuration,
    /// The longest a call may ask for (its `timeout` argument is capped to
    /// this), and the most `timeout` may be.
    pub max_timeout: HumanDuration,
    /// Environment variables passed to programs besides PATH, HOME, LANG
    /// and TZ (names only; nothing else of HomeAgent's environment is
    /// passed).
    pub env: Vec<String>,
}

impl Default for CmdRunSection {
    fn default() -> Self {
        CmdRunSection {
            enabled: true,
            allowlist: Vec::new(),
            allow_writes: false,
            timeout: HumanDuration::seconds(30),
            max_timeout: HumanDuration::seconds(300),
            env: Vec::new(),
        }
    }
}

/// `[tools.files]`
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
#[serde(default, deny_unknown_fields)]
pub struct FilesSection {
    /// The directory the files tools are confined to. Default:
    /// `<data_dir>/files`. Relative paths are read from the config file's
    /// directory.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schemars(example = &"/srv/homeagent/files")]
    pub root: Option<PathBuf>,
}

/// `[[agents]]`: one agent and what it may use.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct AgentEntry {
    /// The agent's name (`--agent NAME`). Declaring `main` replaces the
    /// default agent.
    pub name: String,
    /// Tools this agent may use; empty means every tool.
    #[serde(default)]
    pub allow_tools: Vec<String>,
    /// Tools this agent may not use (wins over allow_tools).
    #[serde(default)]
    pub deny_tools: Vec<String>,
    /// Device ids whose tools this agent may use; device tools are refused
    /// for any other device.
    #[serde(default)]
    pub devices: Vec<String>,
}

impl AgentEntry {
    /// The default agent: every tool, no device.
    pub fn main() -> Self {
        AgentEntry {
            name: DEFAULT_AGENT.to_owned(),
            ..AgentEntry::default()
        }
    }
}

/// `[server]`
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
#[serde(default, deny_unknown_fields)]
pub struct ServerSection {
    /// Address and port the HTTP server listens on.
    pub listen: String,
    /// Key HTTP clients must send. Prefer the environment variable
    /// HOMEAGENT_API_KEY, which wins over this.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schemars(example = &"change-me")]
    pub api_key: Option<Secret>,
    /// Token devices must send to connect. Prefer the environment variable
    /// HOMEAGENT_DEVICE_TOKEN, which wins over this.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schemars(example = &"change-me-too")]
    pub device_token: Option<Secret>,
    /// Devices with a token of their own. A device declared here binds only
    /// with its own token, never with the shared device token, so whoever
    /// holds the shared token (or another device's) cannot pose as it.
    /// Devices not declared here bind with the shared token, if one is set.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub devices: Vec<DeviceEntry>,
    /// The largest request body the server takes, in bytes (at least
    /// 1024). An OpenAI-compatible client without a session sends the
    /// whole conversation with every request.
    pub max_body_bytes: u64,
}

impl Default for ServerSection {
    fn default() -> Self {
        ServerSection {
            listen: "127.0.0.1:8080".to_owned(),
            api_key: None,
            device_token: None,
            devices: Vec::new(),
            max_body_bytes: 1024 * 1024,
        }
    }
}

/// `[[server.devices]]`: a device and its own token.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct DeviceEntry {
    /// The id its waiter announces (`homeagent waiter --device-id`): 1 to 64
    /// letters, digits, `.`, `_` or `-`.
    pub id: String,
    /// The environment variable holding its token (where `homeagent serve`
    /// runs). Give this or `token`, not both.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub token_env: Option<String>,
    /// Its token, in this file. Prefer `token_env`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(example = &"change-me-kitchen")]
    pub token: Option<Secret>,
}

impl Config {
    /// The agent called `name`: a declared one, or the synthesized `main`
    /// (every tool, no device) when `main` is not declared. `None` for any
    /// other unknown name.
    pub fn agent(&self, name: &str) -> Option<AgentEntry> {
        match self.agents.iter().find(|agent| agent.name == name) {
            Some(agent) => Some(agent.clone()),
            None if name == DEFAULT_AGENT => Some(AgentEntry::main()),
            None => None,
        }
    }
}

/// `[mcp]`
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
#[serde(default, deny_unknown_fields)]
pub struct McpSection {
    /// MCP servers; their tools appear as `<name>__<tool>`.
    pub servers: Vec<McpServerEntry>,
}

/// `[[mcp.servers]]`: one MCP server, started as a program (`command`) or
/// reached over Streamable HTTP (`url`); give exactly one of the two.
/// `Debug` shows the names of `env`, not the values (often keys).
#[derive(Clone, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct McpServerEntry {
    /// Prefix of the server's tools (`<name>__<tool>`); unique. 1 to 32 letters,
    /// digits, `_` or `-`, starting with a letter (providers restrict tool names).
    pub name: String,
    /// The program to start; it speaks MCP on stdin/stdout. A bare name is
    /// looked up on PATH; a relative path is taken from this file's
    /// directory.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(example = &"/usr/local/bin/mcp-server-git")]
    pub command: Option<String>,
    /// Arguments of `command`.
    #[serde(default)]
    pub args: Vec<String>,
    /// Environment variables for the program. Besides these it gets only
    /// HOME, LOGNAME, PATH, SHELL, TERM and USER of HomeAgent's own (what
    /// launchers such as npx, uvx and docker need), never its API keys.
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    /// The directory `command` starts in (relative: to this file's
    /// directory); HomeAgent's own when unset. Relative paths in `args` are
    /// the program's business, so they are taken from here.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(example = &"/srv/repo")]
    pub cwd: Option<PathBuf>,
    /// Streamable HTTP address of the server.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(example = &"http://127.0.0.1:8931/mcp")]
    pub url: Option<String>,
    /// Bearer token sent to `url`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(example = &"change-me")]
    pub bearer_token: Option<Secret>,
    /// Act on the server's tool annotations: a tool it marks `readOnlyHint`
    /// may run beside other calls. Annotations of untrusted servers are
    /// ignored.
    #[serde(default)]
    pub trusted: bool,
    /// Tools (by the server's own names) that may run beside other calls.
    /// Every other MCP tool runs alone.
    #[serde(default)]
    pub parallel_safe: Vec<String>,
    /// Tools that always run alone (wins over everything else).
    #[serde(default)]
    pub serial: Vec<String>,
    /// Time allowed to start (`initialize`), and for each call to answer or
    /// report progress: each progress notification gives a call this long
    /// again, up to `max_timeout`.
    #[serde(default = "mcp_default_timeout")]
    pub timeout: HumanDuration,
    /// The most a call may take however much progress it reports; at least
    /// `timeout` (less is an error), ten times `timeout` when unset.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(example = &"10m")]
    pub max_timeout: Option<HumanDuration>,
}

fn mcp_default_timeout() -> HumanDuration {
    HumanDuration::seconds(30)
}

impl std::fmt::Debug for McpServerEntry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("McpServerEntry")
            .field("name", &self.name)
            .field("command", &self.command)
            .field("args", &self.args)
            .field("env", &self.env.keys().collect::<Vec<_>>())
            .field("cwd", &self.cwd)
            // Its user info and query may be credentials.
            .field(
                "url",
                &self.url.as_deref().map(homeagent_mcp::spec::shown_url),
            )
            .field("bearer_token", &self.bearer_token)
            .field("trusted", &self.trusted)
            .field("parallel_safe", &self.parallel_safe)
            .field("serial", &self.serial)
            .field("timeout", &self.timeout)
            .field("max_timeout", &self.max_timeout)
            .finish()
    }
}

/// `[hooks]`
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
#[serde(default, deny_unknown_fields)]
pub struct HooksSection {
    /// Run before matching tool calls; they may allow, deny or rewrite.
    pub pre_tool_use: Vec<HookEntry>,
    /// Run after matching tool calls; they see the result.
    pub post_tool_use: Vec<HookEntry>,
}

/// `[[hooks.pre_tool_use]]` / `[[hooks.post_tool_use]]`: a command run with
/// `sh -c` (unlike the model's `cmd_run`, which never uses a shell). It
/// reads the call as JSON on stdin. A pre hook's exit 0 lets the call run,
/// exit 2 refuses it with stderr as the reason, and so does a command the
/// shell cannot run (126, 127: fix the path); other codes let it run with
/// a warning.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct HookEntry {
    /// A regular expression matched against the whole tool name
    /// (`cmd_run`, `files_read|files_write`, `git__.*`); empty means every
    /// tool. One that is invalid, or matches no tool (a `git__` name counts
    /// once an MCP server is configured), fails the start, naming the hook.
    #[serde(default)]
    pub matcher: String,
    /// The shell command.
    pub command: String,
    /// A hook still running after this long is killed (and a pre hook's
    /// call refused).
    #[serde(default = "hook_default_timeout")]
    pub timeout: HumanDuration,
    /// Environment besides PATH, HOME and HOMEAGENT_SESSION_ID (nothing else of
    /// HomeAgent's environment is passed).
    #[serde(default)]
    pub env: BTreeMap<String, String>,
}

pub(super) fn hook_default_timeout() -> HumanDuration {
    HumanDuration::seconds(60)
}
