//! The command line, as clap derive definitions. What each command does
//! lives in the module it names.
// The doc comments below are the `--help` text, where `<data dir>` is the
// usual placeholder, not an HTML tag.
#![allow(rustdoc::invalid_html_tags)]

use clap::{Args, Parser, Subcommand};
use homeagent_mock_llm::DEFAULT_TOOL_SLEEP_MS;

/// HomeAgent: an agent kernel that runs the tool calls a language model asks
/// for, in parallel when that is safe, and always answers every call.
#[derive(Debug, Parser)]
#[command(name = "homeagent", version, arg_required_else_help = true)]
pub struct Cli {
    #[command(flatten)]
    pub global: GlobalArgs,
    #[command(subcommand)]
    pub command: Command,
}

/// Where the config and the data live (every subcommand accepts these).
#[derive(Debug, Clone, Default, Args)]
pub struct GlobalArgs {
    /// The config file [default: $HOMEAGENT_CONFIG, else
    /// <data dir>/homeagent.toml].
    #[arg(long, global = true, value_name = "PATH")]
    pub config: Option<std::path::PathBuf>,
    /// The data directory (store, files root, adapters) [default:
    /// $HOMEAGENT_DATA_DIR, else the platform data directory].
    #[arg(long, global = true, value_name = "DIR")]
    pub data_dir: Option<std::path::PathBuf>,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Watch the kernel work: an offline scripted model sends a parallel
    /// batch, a serial batch and a cut-off call to the demo tools, and the
    /// output shows what ran at the same time, with timings.
    Demo(DemoArgs),
    /// List every registered tool with its source and how its calls are
    /// scheduled (parallel-safe or serial).
    Tools(ToolsArgs),
    /// Run the scripted mock model as an HTTP server speaking the OpenAI,
    /// Anthropic, Gemini and Ollama wires (streamed and not), for tests,
    /// demos and benchmarks. Put a trigger such as !slowbatch4, !batch8,
    /// !truncate, !badjson, !text, !calls [...], !err or !hang in the user
    /// message; GET /stats shows the counters. Stops on Ctrl-C.
    MockLlm(MockLlmArgs),
    /// Work with Lua provider adapters.
    #[command(subcommand)]
    Adapter(AdapterCommand),
    /// Send one input to the agent and print its reply (streamed). Exits 0
    /// on a reply, non-zero on an error or a skipped input.
    Run(RunArgs),
    /// Talk with the agent interactively. Ctrl-C (or /stop) cancels the
    /// current turn; /stop, /tools, /new and /quit are commands; lines
    /// typed while a turn runs are the next inputs. An approval question
    /// is answered only by a line typed after it.
    Chat(ChatArgs),
    /// Check the config or print a complete, commented example.
    #[command(subcommand)]
    Config(ConfigCommand),
    /// Serve the agent over HTTP: an OpenAI-compatible endpoint (model
    /// `homeagent`), the sessions API, a live event stream, status, and a
    /// dashboard at `/`. Stops on Ctrl-C or SIGTERM.
    Serve(ServeArgs),
    /// Tool sequences: named groups of tool calls, saved once and run by
    /// name (by you here, or by the model through the seq_* tools).
    #[command(subcommand)]
    Seq(SeqCommand),
    /// Serve HomeAgent's own tools (cmd_run, files, sequences, get_tools,
    /// ...) to an MCP client over stdin/stdout, as the agent `main`.
    McpServe(McpServeArgs),
    /// Benchmark the agent end to end: starts mock-llm and serve as child
    /// processes over loopback and measures batch speed-up (against the
    /// mock's own count of executed tools), a blast of sessions,
    /// stability, kernel overhead and memory. Exits non-zero only on a
    /// correctness failure, never on a timing.
    Bench(BenchArgs),
    /// Run commands on this machine for an agent: connect to `homeagent
    /// serve`, bind with the device token and run the commands it sends,
    /// under this machine's own policy (waiter.toml: device_authorized,
    /// device_cmd_allowlist, allow_writes, timeout, max_timeout,
    /// output_cap_bytes, env). `--config` names the waiter.toml here
    /// [default: <data dir>/waiter.toml when it exists; $HOMEAGENT_CONFIG is
    /// not used]. Reconnects with backoff when the link drops; exits 78
    /// when the server refuses the token (no retry), 1 on a config error.
    Waiter(WaiterArgs),
}

#[derive(Debug, Args)]
pub struct WaiterArgs {
    /// The server, ws://HOST:PORT or wss://HOST:PORT (the device path
    /// /api/v1/device/ws is added when the URL has none) [default: server
    /// in waiter.toml].
    #[arg(long, value_name = "URL")]
    pub server: Option<String>,
    /// The device token the server expects (its server.device_token, or its
    /// API key when that is unset) [default: token in waiter.toml]. Never
    /// printed or logged; given here, it is moved off the command line
    /// (where `ps` shows it) into the environment at start.
    #[arg(
        long,
        value_name = "TOKEN",
        env = "HOMEAGENT_DEVICE_TOKEN",
        hide_env_values = true
    )]
    pub token: Option<String>,
    /// This device's id, [A-Za-z0-9._-]{1,64} [default: device_id in
    /// waiter.toml, else waiter-<hostname>].
    #[arg(long, value_name = "ID")]
    pub device_id: Option<String>,
    /// Refuse (false) or allow (true) commands, overriding
    /// device_authorized in waiter.toml [default: the file's, else true].
    #[arg(long, value_name = "BOOL")]
    pub device_authorized: Option<bool>,
    /// Detach: start the waiter in the background with the same arguments,
    /// print its pid and log file, and exit.
    #[arg(long)]
    pub daemon: bool,
    /// Where the background waiter writes its log [default: <data
    /// dir>/waiter.log]. Only with --daemon.
    #[arg(long, value_name = "PATH", requires = "daemon")]
    pub log_file: Option<std::path::PathBuf>,
    /// Extra CA certificates (PEM) to trust for wss://, besides the
    /// system's.
    #[arg(long, value_name = "PEM")]
    pub ca_file: Option<std::path::PathBuf>,
    /// Set by --daemon on the process it starts (logs to its stderr, which
    /// is the log file).
    #[arg(long, hide = true)]
    pub daemon_child: bool,
}

#[derive(Debug, Args)]
pub struct McpServeArgs {
    /// Approve tools listed in tools.require_approval without asking
    /// (nobody can be asked over stdio; without this they are refused).
    #[arg(long)]
    pub yes: bool,
}

#[derive(Debug, Args)]
pub struct BenchArgs {
    /// Small N (2, 4), 2 rounds, a small blast, no peers (for CI).
    #[arg(long)]
    pub quick: bool,
    /// Print the whole report as JSON on stdout instead of the tables.
    #[arg(long)]
    pub json: bool,
    /// Blast sessions = 24 × N (up to ×100: 28,800 inputs, well inside the
    /// mock's per-input log).
    #[arg(long, value_name = "N", default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=100))]
    pub scale: u32,
    /// Also write bench-results.json, bench-speedup.svg and
    /// bench-overhead.svg into this directory.
    #[arg(long, value_name = "DIR")]
    pub out: Option<std::path::PathBuf>,
    #[command(flatten)]
    pub peers: crate::bench_cmd::PeerFlags,
}

#[derive(Debug, Subcommand)]
pub enum SeqCommand {
    /// Save a sequence from a JSON file (checked first; warnings on
    /// stderr, any error exits non-zero). `homeagent seq guide` (and the
    /// model's seq_help tool) describes the format, with an example.
    Create {
        /// The sequence, as JSON: {"name", "description", "groups": [...]}.
        #[arg(long, value_name = "FILE")]
        file: std::path::PathBuf,
    },
    /// Print the sequence format guide, with a complete example to copy.
    Guide,
    /// List saved sequences.
    List,
    /// Print a saved sequence, in the form `seq create --file` takes.
    Show { name: String },
    /// Run a saved sequence; prints each group's status and the final
    /// slots, and exits non-zero when the run failed.
    Run {
        name: String,
        /// The run's arguments, a JSON object.
        #[arg(long, value_name = "JSON", default_value = "{}")]
        args: String,
        /// The agent the calls are made as (its tool grants apply).
        #[arg(long, value_name = "NAME", default_value = "main")]
        agent: String,
    },
    /// Delete a saved sequence.
    Delete { name: String },
}

#[derive(Debug, Args)]
pub struct ServeArgs {
    /// Address to listen on [default: server.listen from the config,
    /// 127.0.0.1:8080]. A non-loopback address needs an API key
    /// (server.api_key or HOMEAGENT_API_KEY).
    #[arg(long, value_name = "ADDR")]
    pub listen: Option<String>,
}

#[derive(Debug, Subcommand)]
pub enum ConfigCommand {
    /// Validate the config and print the resolved paths, sources, agents
    /// and tools (secrets are shown only as set / not set).
    Check,
    /// Print a complete, commented config with every key and its default.
    Example,
}

#[derive(Debug, Args)]
pub struct RunArgs {
    /// The input.
    pub prompt: String,
    /// Continue this stored session [default: a new one].
    #[arg(long, value_name = "ID")]
    pub session: Option<String>,
    /// The agent to run as.
    #[arg(long, value_name = "NAME", default_value = "main")]
    pub agent: String,
    /// One JSON object per line on stdout (content_delta, tool_call,
    /// response / skipped / error), for programs.
    #[arg(long)]
    pub json: bool,
    /// Approve tools listed in tools.require_approval without asking.
    #[arg(long)]
    pub yes: bool,
}

#[derive(Debug, Args)]
pub struct ChatArgs {
    /// Continue this stored session [default: a new one].
    #[arg(long, value_name = "ID")]
    pub session: Option<String>,
    /// The agent to talk to.
    #[arg(long, value_name = "NAME", default_value = "main")]
    pub agent: String,
}

#[derive(Debug, Subcommand)]
pub enum AdapterCommand {
    /// Feed a standard stream of two interleaved tool calls, and one of text
    /// only, through an adapter (with the OpenAI fallback switched off) and
    /// say whether both calls come out intact, naming the problem otherwise.
    /// Exits non-zero when a check fails.
    Check(AdapterCheckArgs),
}

#[derive(Debug, Args)]
pub struct AdapterCheckArgs {
    /// The adapter file, e.g. adapters/myprovider.lua.
    pub file: std::path::PathBuf,
    /// The wire the adapter reads: the standard streams are written in it.
    #[arg(long, value_enum, default_value_t = CheckWireArg::Openai)]
    pub wire: CheckWireArg,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum CheckWireArg {
    Openai,
    Anthropic,
}

#[derive(Debug, Args)]
pub struct DemoArgs {
    /// How long the first demo_sleep call of a batch sleeps; call i sleeps
    /// this plus 5·i milliseconds.
    #[arg(
        long,
        value_name = "MS",
        default_value_t = DEFAULT_TOOL_SLEEP_MS,
        value_parser = clap::value_parser!(u64).range(0..=10_000)
    )]
    pub tool_sleep_ms: u64,
}

#[derive(Debug, Args)]
pub struct MockLlmArgs {
    /// Address to listen on (port 0 picks a free port).
    #[arg(
        long,
        value_name = "ADDR",
        default_value = "127.0.0.1:9099",
        env = "HOMEAGENT_MOCK_LISTEN"
    )]
    pub listen: String,
    /// Time before the first byte of every model response, in milliseconds.
    #[arg(
        long,
        value_name = "MS",
        default_value_t = 0,
        env = "HOMEAGENT_MOCK_DELAY_MS"
    )]
    pub delay_ms: u64,
    /// Time between the chunks of a streamed response, in milliseconds.
    #[arg(
        long,
        value_name = "MS",
        default_value_t = 0,
        env = "HOMEAGENT_MOCK_CHUNK_DELAY_MS"
    )]
    pub chunk_delay_ms: u64,
    /// S: how long the first demo_sleep call of a batch sleeps; call i
    /// sleeps S + 5·i milliseconds.
    #[arg(
        long,
        value_name = "MS",
        default_value_t = DEFAULT_TOOL_SLEEP_MS,
        env = "HOMEAGENT_MOCK_TOOL_SLEEP_MS",
        value_parser = clap::value_parser!(u64).range(0..=homeagent_mock_llm::MAX_TOOL_SLEEP_MS)
    )]
    pub tool_sleep_ms: u64,
    /// Emit this tool name instead of the demo tools' names (the calls of
    /// !calls keep the names they were given).
    #[arg(long, value_name = "NAME", env = "HOMEAGENT_MOCK_TOOL")]
    pub tool: Option<String>,
}

#[derive(Debug, Args)]
pub struct ToolsArgs {
    /// Print a JSON array of tool definitions (name, source, parallel_safe,
    /// serial, description, parameters, ...) instead of a table.
    #[arg(long)]
    pub json: bool,
}

#[cfg(test)]
mod tests {
    use clap::CommandFactory;

    use super::*;

    #[test]
    fn the_command_line_is_well_formed() {
        Cli::command().debug_assert();
    }

    #[test]
    fn demo_takes_a_bounded_sleep() {
        let cli = Cli::try_parse_from(["homeagent", "demo", "--tool-sleep-ms", "20"]).unwrap();
        assert!(matches!(
            cli.command,
            Command::Demo(DemoArgs { tool_sleep_ms: 20 })
        ));
        assert!(Cli::try_parse_from(["homeagent", "demo", "--tool-sleep-ms", "99999"]).is_err());
    }

    #[test]
    fn mock_llm_takes_its_flags() {
        let cli = Cli::try_parse_from([
            "homeagent",
            "mock-llm",
            "--listen",
            "127.0.0.1:0",
            "--delay-ms",
            "5",
            "--chunk-delay-ms",
            "2",
            "--tool-sleep-ms",
            "40",
            "--tool",
            "other_tool",
        ])
        .unwrap();
        let Command::MockLlm(args) = cli.command else {
            panic!("not mock-llm: {:?}", cli.command);
        };
        assert_eq!(args.listen, "127.0.0.1:0");
        assert_eq!(
            (args.delay_ms, args.chunk_delay_ms, args.tool_sleep_ms),
            (5, 2, 40)
        );
        assert_eq!(args.tool.as_deref(), Some("other_tool"));
    }
}
