//! Finding, reading and checking the config file.
//!
//! Precedence is the usual one: a command-line flag, then an environment
//! variable, then the default location. The environment is passed in as a
//! function so tests (and embedders) never depend on the process
//! environment. A file missing at the default location means "use the
//! defaults"; a file that was named explicitly and is missing is an error,
//! because the person clearly meant a config that is not being read.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use homeagent_core::text_position::line_column;
use homeagent_llm::SourceProtocol;

use super::HumanDuration;
use super::secret::Secret;
use super::types::{
    AgentSection, CmdRunSection, Config, LlmSection, MAX_BLOCKING_THREADS, MAX_SERVE_THREADS,
    MAX_WORKER_THREADS, RuntimeSection, hook_default_timeout,
};
use crate::store::MAX_AGENT_NAME_BYTES;

/// The smallest `agent.context_tokens`: the built-in system prompt and a
/// few tool definitions take about this much before any conversation.
const MIN_CONTEXT_TOKENS: u32 = 1024;

/// Names the config file (overridden by `--config`).
pub const ENV_CONFIG: &str = "HOMEAGENT_CONFIG";
/// Names the data directory (overridden by `--data-dir`).
pub const ENV_DATA_DIR: &str = "HOMEAGENT_DATA_DIR";
/// The server's API key; wins over `server.api_key`.
pub const ENV_API_KEY: &str = "HOMEAGENT_API_KEY";
/// The device token; wins over `server.device_token`.
pub const ENV_DEVICE_TOKEN: &str = "HOMEAGENT_DEVICE_TOKEN";
/// The config file's name inside the data directory.
pub const CONFIG_FILE_NAME: &str = "homeagent.toml";

/// Where a path came from, for messages and `config check`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PathOrigin {
    /// A command-line flag (`--config`, `--data-dir`).
    Flag,
    /// An environment variable (`HOMEAGENT_CONFIG`, `HOMEAGENT_DATA_DIR`).
    Env,
    /// The default location.
    Default,
}

impl PathOrigin {
    fn describe(self, flag: &str, env: &str) -> String {
        match self {
            PathOrigin::Flag => format!("from {flag}"),
            PathOrigin::Env => format!("from ${env}"),
            PathOrigin::Default => "default".to_owned(),
        }
    }
}

/// The config file and data directory in use.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigPaths {
    pub config_file: PathBuf,
    pub config_origin: PathOrigin,
    pub data_dir: PathBuf,
    pub data_dir_origin: PathOrigin,
}

/// Why the config could not be used. Matched by variant.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The file exists (or was named) but could not be read.
    #[error("cannot read the config file {}", path.display())]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// Not valid TOML, or a key or value the format does not have.
    #[error("{}:{line}:{column}: {message}", path.display())]
    Parse {
        path: PathBuf,
        /// 1-based; 0 when the parser gave no position.
        line: usize,
        /// 1-based, in characters; 0 when the parser gave no position.
        column: usize,
        message: String,
    },
    /// Well-formed, but a value breaks a rule (duplicate names, a zero
    /// limit, a Lua source without its adapter...).
    #[error("{}: {key}: {message}", path.display())]
    Invalid {
        path: PathBuf,
        /// The dotted key at fault, e.g. `llm.sources[1].name`.
        key: String,
        message: String,
    },
    /// No data directory was given and the platform has none.
    #[error(
        "no data directory: this platform has no default one; pass --data-dir or set ${ENV_DATA_DIR}"
    )]
    NoDataDir,
}

/// The secrets in effect, after environment overrides.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Secrets {
    /// `$HOMEAGENT_API_KEY`, else `server.api_key`.
    pub api_key: Option<Secret>,
    /// `$HOMEAGENT_DEVICE_TOKEN`, else `server.device_token`.
    pub device_token: Option<Secret>,
    /// The tokens of the devices declared in `[[server.devices]]`.
    pub device_tokens: Vec<DeviceToken>,
}

impl Secrets {
    /// Each declared device's token must be its own: shared with another
    /// device, either could bind as the other; equal to the shared device
    /// token or the API key, it would bind every undeclared id too.
    fn check_device_tokens(&self, path: &Path) -> Result<(), ConfigError> {
        let shared = [
            ("the device token", &self.device_token),
            ("the API key", &self.api_key),
        ];
        for (index, device) in self.device_tokens.iter().enumerate() {
            let Some(token) = &device.token else { continue };
            let clash = self.device_tokens[..index]
                .iter()
                .find(|earlier| earlier.token.as_ref() == Some(token))
                .map(|earlier| format!("device {:?}'s", earlier.id))
                .or_else(|| {
                    shared
                        .iter()
                        .find(|(_, secret)| secret.as_ref() == Some(token))
                        .map(|(name, _)| (*name).to_owned())
                });
            if let Some(clash) = clash {
                let field = if device.from.contains("token_env") {
                    "token_env"
                } else {
                    "token"
                };
                return Err(ConfigError::Invalid {
                    path: path.to_owned(),
                    key: format!("server.devices[{index}].{field}"),
                    message: format!(
                        "device {:?} has the same token as {clash}; give every device a token \
                         of its own",
                        device.id
                    ),
                });
            }
        }
        Ok(())
    }
}

/// A declared device's own token, as found at load time.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeviceToken {
    pub id: String,
    /// `None` when its `token_env` variable is unset or empty (only
    /// `homeagent serve` needs it, and refuses to start without it).
    pub token: Option<Secret>,
    /// Where the token comes from, for messages.
    pub from: String,
}

/// A checked config with the paths it came from and its secrets resolved.
#[derive(Debug, Clone, PartialEq)]
pub struct LoadedConfig {
    pub config: Config,
    pub paths: ConfigPaths,
    /// Whether the file existed (false: defaults, default location).
    pub file_found: bool,
    pub secrets: Secrets,
    /// The sources' `api_key_env` variables that were set (non-empty) at
    /// load time: `config check` reports them without reading the keys
    /// again.
    pub key_vars_set: BTreeSet<String>,
}

fn non_empty(env: &impl Fn(&str) -> Option<String>, name: &str) -> Option<String> {
    env(name).filter(|value| !value.trim().is_empty())
}

impl ConfigPaths {
    /// Resolves the config file (`--config`, `$HOMEAGENT_CONFIG`, else
    /// `<data_dir>/homeagent.toml`) and the data directory (`--data-dir`,
    /// `$HOMEAGENT_DATA_DIR`, else the platform data directory +
    /// `homeagent`). Empty environment variables count as unset.
    pub fn resolve(
        cli_config: Option<PathBuf>,
        cli_data_dir: Option<PathBuf>,
        env: &impl Fn(&str) -> Option<String>,
    ) -> Result<ConfigPaths, ConfigError> {
        let (data_dir, data_dir_origin) = match (cli_data_dir, non_empty(env, ENV_DATA_DIR)) {
            (Some(dir), _) => (dir, PathOrigin::Flag),
            (None, Some(dir)) => (PathBuf::from(dir), PathOrigin::Env),
            (None, None) => (
                dirs::data_dir()
                    .ok_or(ConfigError::NoDataDir)?
                    .join("homeagent"),
                PathOrigin::Default,
            ),
        };
        let (config_file, config_origin) = match (cli_config, non_empty(env, ENV_CONFIG)) {
            (Some(file), _) => (file, PathOrigin::Flag),
            (None, Some(file)) => (PathBuf::from(file), PathOrigin::Env),
            (None, None) => (data_dir.join(CONFIG_FILE_NAME), PathOrigin::Default),
        };
        Ok(ConfigPaths {
            config_file,
            config_origin,
            data_dir,
            data_dir_origin,
        })
    }

    /// One line per path with its origin, for `config check`.
    pub fn describe(&self) -> String {
        format!(
            "config file: {} ({})\ndata dir:    {} ({})\n",
            self.config_file.display(),
            self.config_origin.describe("--config", ENV_CONFIG),
            self.data_dir.display(),
            self.data_dir_origin.describe("--data-dir", ENV_DATA_DIR),
        )
    }
}

impl Config {
    /// Parses and checks TOML text; `path` only names the file in errors.
    pub fn from_toml(text: &str, path: &Path) -> Result<Config, ConfigError> {
        let config: Config = toml::from_str(text).map_err(|error| {
            let (line, column) = error
                .span()
                .map_or((0, 0), |span| line_column(text, span.start));
            ConfigError::Parse {
                path: path.to_owned(),
                line,
                column,
                message: error.message().trim_end().to_owned(),
            }
        })?;
        config.check(path)?;
        Ok(config)
    }

    /// Reads the file `paths` names (defaults when it is missing at the
    /// default location), checks it and resolves the secrets through `env`.
    pub fn load(
        paths: &ConfigPaths,
        env: &impl Fn(&str) -> Option<String>,
    ) -> Result<LoadedConfig, ConfigError> {
        let path = &paths.config_file;
        let (config, file_found) = match std::fs::read_to_string(path) {
            Ok(text) => (Config::from_toml(&text, path)?, true),
            Err(error)
                if error.kind() == std::io::ErrorKind::NotFound
                    && paths.config_origin == PathOrigin::Default =>
            {
                tracing::debug!(path = %path.display(), "no config file; using the defaults");
                (Config::default(), false)
            }
            Err(source) => {
                return Err(ConfigError::Read {
                    path: path.clone(),
                    source,
                });
            }
        };
        let secret = |var: &str, from_file: &Option<Secret>| {
            non_empty(env, var)
                .map(Secret::new)
                .or_else(|| from_file.clone())
        };
        let device_tokens = device_tokens(&config, env, path)?;
        let secrets = Secrets {
            api_key: secret(ENV_API_KEY, &config.server.api_key),
            device_token: secret(ENV_DEVICE_TOKEN, &config.server.device_token),
            device_tokens,
        };
        secrets.check_device_tokens(path)?;
        let key_vars_set = config
            .llm
            .sources
            .iter()
            .filter_map(|source| source.api_key_env.clone())
            .filter(|var| non_empty(env, var).is_some())
            .collect();
        Ok(LoadedConfig {
            config,
            paths: paths.clone(),
            file_found,
            secrets,
            key_vars_set,
        })
    }

    /// The rules serde cannot express. Tool names (`require_approval`,
    /// `allow_tools`) are not checked here: the tools are only known once
    /// they are registered.
    fn check(&self, path: &Path) -> Result<(), ConfigError> {
        let invalid = |key: String, message: String| ConfigError::Invalid {
            path: path.to_owned(),
            key,
            message,
        };
        if self.agent.max_tool_turns == 0 {
            return Err(invalid(
                "agent.max_tool_turns".into(),
                "must be at least 1 (the default is 10)".into(),
            ));
        }
        self.check_limits(&invalid)?;
        if self.server.max_body_bytes < 1024 {
            return Err(invalid(
                "server.max_body_bytes".into(),
                "must be at least 1024 (the default is 1048576)".into(),
            ));
        }
        // HOST:PORT, as serve resolves it (a name or an address; IPv6 in
        // brackets): without a port it fails only when serve starts. A
        // host with a colon outside brackets is an IPv6 address whose last
        // group would be read as the port ("::1" as host ":", port 1).
        let has_port = self
            .server
            .listen
            .rsplit_once(':')
            .is_some_and(|(host, port)| {
                let bracketed = host.len() > 2 && host.starts_with('[') && host.ends_with(']');
                !host.is_empty()
                    && (bracketed || !host.contains(':'))
                    && port.parse::<u16>().is_ok()
            });
        if !has_port {
            return Err(invalid(
                "server.listen".into(),
                format!(
                    "{:?} is not HOST:PORT; write e.g. \"127.0.0.1:8080\" (or \"[::1]:8080\")",
                    self.server.listen
                ),
            ));
        }
        if self.scheduler.queue_capacity == 0 {
            return Err(invalid(
                "scheduler.queue_capacity".into(),
                "must be at least 1 (the default is 256)".into(),
            ));
        }
        if self.scheduler.max_concurrent_sessions == 0 {
            return Err(invalid(
                "scheduler.max_concurrent_sessions".into(),
                "must be at least 1 (the default is 16)".into(),
            ));
        }
        let threads = |key: &str, value: u16, max: u16, default: u16| {
            if (1..=max).contains(&value) {
                return Ok(());
            }
            Err(invalid(
                format!("runtime.{key}"),
                format!("must be between 1 and {max} (the default is {default}), not {value}"),
            ))
        };
        let defaults = RuntimeSection::default();
        threads(
            "worker_threads",
            self.runtime.worker_threads,
            MAX_WORKER_THREADS,
            defaults.worker_threads,
        )?;
        threads(
            "blocking_threads",
            self.runtime.blocking_threads,
            MAX_BLOCKING_THREADS,
            defaults.blocking_threads,
        )?;
        threads(
            "serve_threads",
            self.runtime.serve_threads,
            MAX_SERVE_THREADS,
            defaults.serve_threads,
        )?;
        for (index, source) in self.llm.sources.iter().enumerate() {
            if let Some(first) = self.llm.sources[..index]
                .iter()
                .position(|earlier| earlier.name == source.name)
            {
                return Err(invalid(
                    format!("llm.sources[{index}].name"),
                    format!(
                        "the source name {:?} is already used by llm.sources[{first}]; \
                         give each source its own name",
                        source.name
                    ),
                ));
            }
            let needs = |what: &str, example: &str| {
                invalid(
                    format!("llm.sources[{index}].{what}"),
                    format!(
                        "source {:?} (protocol = {:?}) needs {what}, e.g. {what} = {example:?}",
                        source.name,
                        source.protocol.as_str()
                    ),
                )
            };
            if source.protocol != SourceProtocol::Demo {
                if source.base_url.is_none() {
                    return Err(needs("base_url", "http://127.0.0.1:11434"));
                }
                if source.model.is_none() {
                    return Err(needs("model", "llama3.2"));
                }
            }
            if let Some(var) = &source.api_key_env
                && !homeagent_core::is_env_var_name(var)
            {
                return Err(invalid(
                    format!("llm.sources[{index}].api_key_env"),
                    homeagent_llm::API_KEY_ENV_HELP.to_owned(),
                ));
            }
            if source.protocol != SourceProtocol::Lua && source.adapter.is_some() {
                return Err(invalid(
                    format!("llm.sources[{index}].adapter"),
                    format!(
                        "source {:?} has protocol = {:?}, which uses no adapter; set protocol = \
                         \"lua\" to speak through the adapter, or remove adapter",
                        source.name,
                        source.protocol.as_str()
                    ),
                ));
            }
            if source.protocol == SourceProtocol::Lua && source.adapter.is_none() {
                return Err(invalid(
                    format!("llm.sources[{index}].adapter"),
                    format!(
                        "source {:?} has protocol = \"lua\" but no adapter; \
                         add adapter = \"path/to/adapter.lua\"",
                        source.name
                    ),
                ));
            }
        }
        for (index, agent) in self.agents.iter().enumerate() {
            if agent.name.trim().is_empty() {
                return Err(invalid(
                    format!("agents[{index}].name"),
                    "an agent needs a non-empty name".into(),
                ));
            }
            // "main " is another agent than `main`, which would keep
            // every tool the entry meant to take from it.
            if agent.name.trim() != agent.name || agent.name.chars().any(char::is_control) {
                return Err(invalid(
                    format!("agents[{index}].name"),
                    format!(
                        "{:?} begins or ends with a space or holds a control character; \
                         write the name without them (e.g. {:?})",
                        agent.name,
                        agent.name.trim().replace(char::is_control, "")
                    ),
                ));
            }
            if agent.name.len() > MAX_AGENT_NAME_BYTES {
                return Err(invalid(
                    format!("agents[{index}].name"),
                    format!(
                        "the agent name is {} bytes long; use at most {MAX_AGENT_NAME_BYTES} \
                         (sessions store it)",
                        agent.name.len()
                    ),
                ));
            }
            for (device_index, device) in agent.devices.iter().enumerate() {
                if !homeagent_device::protocol::is_valid_device_id(device) {
                    return Err(invalid(
                        format!("agents[{index}].devices[{device_index}]"),
                        format!(
                            "{device:?} is not a device id: use 1 to 64 letters, digits, `.`, \
                             `_` or `-`, as in [[server.devices]]"
                        ),
                    ));
                }
            }
            if let Some(first) = self.agents[..index]
                .iter()
                .position(|earlier| earlier.name == agent.name)
            {
                return Err(invalid(
                    format!("agents[{index}].name"),
                    format!(
                        "the agent name {:?} is already used by agents[{first}]; \
                         give each agent its own name",
                        agent.name
                    ),
                ));
            }
        }
        self.check_devices(&invalid)
    }

    /// Limits where zero (or next to it) means "never works": a timeout
    /// that fires at once, a reply of no tokens, a context too small for
    /// the system prompt and the question. Such a value is a typo. (An MCP
    /// server's zero timeout is refused with its other mistakes, by
    /// `homeagent_mcp`'s spec check.)
    fn check_limits(
        &self,
        invalid: &dyn Fn(String, String) -> ConfigError,
    ) -> Result<(), ConfigError> {
        let defaults = AgentSection::default();
        if self.agent.max_tokens == 0 {
            return Err(invalid(
                "agent.max_tokens".into(),
                format!(
                    "must be at least 1 (the default is {})",
                    defaults.max_tokens
                ),
            ));
        }
        if self.agent.context_tokens < MIN_CONTEXT_TOKENS {
            return Err(invalid(
                "agent.context_tokens".into(),
                format!(
                    "must be at least {MIN_CONTEXT_TOKENS} (the default is {}): less holds not \
                     even the system prompt, the tools and the question",
                    defaults.context_tokens
                ),
            ));
        }
        let positive = |key: String, value: HumanDuration, default: HumanDuration| {
            if value.as_duration().is_zero() {
                return Err(invalid(
                    key,
                    format!("must be longer than 0 (the default is \"{default}\")"),
                ));
            }
            Ok(())
        };
        let llm = LlmSection::default();
        positive(
            "llm.stream_idle_timeout".into(),
            self.llm.stream_idle_timeout,
            llm.stream_idle_timeout,
        )?;
        positive(
            "llm.connect_timeout".into(),
            self.llm.connect_timeout,
            llm.connect_timeout,
        )?;
        positive(
            "llm.request_timeout".into(),
            self.llm.request_timeout,
            llm.request_timeout,
        )?;
        positive(
            "tools.cmd_run.timeout".into(),
            self.tools.cmd_run.timeout,
            CmdRunSection::default().timeout,
        )?;
        if let Some(window) = self.scheduler.dedup_window
            && window.as_duration().is_zero()
        {
            return Err(invalid(
                "scheduler.dedup_window".into(),
                "must be longer than 0: a window of nothing skips nothing (leave it out to \
                 turn duplicate skipping off, which is the default)"
                    .into(),
            ));
        }
        for (which, hooks) in [
            ("pre_tool_use", &self.hooks.pre_tool_use),
            ("post_tool_use", &self.hooks.post_tool_use),
        ] {
            for (index, hook) in hooks.iter().enumerate() {
                if hook.command.trim().is_empty() {
                    return Err(invalid(
                        format!("hooks.{which}[{index}].command"),
                        "must name the program to run (it has no default)".into(),
                    ));
                }
                positive(
                    format!("hooks.{which}[{index}].timeout"),
                    hook.timeout,
                    hook_default_timeout(),
                )?;
            }
        }
        Ok(())
    }

    fn check_devices(
        &self,
        invalid: &dyn Fn(String, String) -> ConfigError,
    ) -> Result<(), ConfigError> {
        for (index, device) in self.server.devices.iter().enumerate() {
            let key = |field: &str| format!("server.devices[{index}].{field}");
            if !homeagent_device::protocol::is_valid_device_id(&device.id) {
                return Err(invalid(
                    key("id"),
                    format!(
                        "{:?} is not a device id: use 1 to 64 letters, digits, `.`, `_` or `-`",
                        device.id
                    ),
                ));
            }
            if let Some(first) = self.server.devices[..index]
                .iter()
                .position(|earlier| earlier.id == device.id)
            {
                return Err(invalid(
                    key("id"),
                    format!(
                        "device {:?} is already declared by server.devices[{first}]; \
                         declare each device once",
                        device.id
                    ),
                ));
            }
        }
        Ok(())
    }
}

/// The declared devices' own tokens. Checked here rather than with the
/// other rules: the commented example shows both `token` and `token_env`,
/// and must still parse with every line switched on.
fn device_tokens(
    config: &Config,
    env: &impl Fn(&str) -> Option<String>,
    path: &Path,
) -> Result<Vec<DeviceToken>, ConfigError> {
    let mut tokens = Vec::with_capacity(config.server.devices.len());
    for (index, device) in config.server.devices.iter().enumerate() {
        let invalid = |field: &str, message: String| ConfigError::Invalid {
            path: path.to_owned(),
            key: format!("server.devices[{index}].{field}"),
            message,
        };
        let id = &device.id;
        let token = match (&device.token, &device.token_env) {
            (Some(_), Some(_)) => {
                return Err(invalid(
                    "token",
                    format!(
                        "device {id:?} has both token and token_env; keep one (token_env keeps \
                         the token out of this file)"
                    ),
                ));
            }
            (None, None) => {
                return Err(invalid(
                    "token_env",
                    format!("device {id:?} has no token: add token_env = \"VARIABLE\" (or token)"),
                ));
            }
            (Some(token), None) if token.expose().trim().is_empty() => {
                return Err(invalid(
                    "token",
                    format!("device {id:?} has an empty token"),
                ));
            }
            (Some(token), None) => DeviceToken {
                id: id.clone(),
                token: Some(token.clone()),
                from: format!("server.devices[{index}].token"),
            },
            (None, Some(var)) if var.trim().is_empty() => {
                return Err(invalid(
                    "token_env",
                    format!("device {id:?} has an empty token_env"),
                ));
            }
            (None, Some(var)) if !homeagent_core::is_env_var_name(var) => {
                return Err(invalid(
                    "token_env",
                    format!(
                        "device {id:?}: token_env is not an environment variable name \
                         (letters, digits and `_`; the value is not shown, in case it is the \
                         token itself): write the variable's name, e.g. token_env = \
                         \"NAS_TOKEN\", and put the token in that variable"
                    ),
                ));
            }
            (None, Some(var)) => DeviceToken {
                id: id.clone(),
                token: non_empty(env, var).map(Secret::new),
                from: format!("${var} (server.devices[{index}].token_env)"),
            },
        };
        tokens.push(token);
    }
    Ok(tokens)
}

impl LoadedConfig {
    /// A path from the config, relative ones taken from the config file's
    /// directory (so a config can be moved with the files it names).
    pub fn resolve_path(&self, path: &Path) -> PathBuf {
        match self.paths.config_file.parent() {
            Some(dir) if path.is_relative() => dir.join(path),
            _ => path.to_owned(),
        }
    }

    /// The files tools' root: `tools.files.root`, else `<data_dir>/files`.
    pub fn files_root(&self) -> PathBuf {
        match &self.config.tools.files.root {
            Some(root) => self.resolve_path(root),
            None => self.paths.data_dir.join("files"),
        }
    }

    /// Where Lua adapters are looked up: `llm.adapter_dir`, else
    /// `<data_dir>/adapters`.
    pub fn adapter_dir(&self) -> PathBuf {
        match &self.config.llm.adapter_dir {
            Some(dir) => self.resolve_path(dir),
            None => self.paths.data_dir.join("adapters"),
        }
    }

    /// The CA certificate files, resolved.
    pub fn ca_certificates(&self) -> Vec<PathBuf> {
        self.config
            .llm
            .ca_certificates
            .iter()
            .map(|path| self.resolve_path(path))
            .collect()
    }
}
