//! Configuration: the TOML file, where it is found, and what it means.
//!
//! - [`types`]: the model, one struct per table. It is the only definition
//!   of the format: the parser, the checks and the generated example all
//!   come from it, so they cannot drift apart.
//! - [`load`]: path resolution (flag, environment, default), reading,
//!   semantic checks and secret overrides from the environment.
//! - [`example`]: `homeagent config example` and docs/CONFIG.md, generated
//!   by walking the JSON schema of [`Config`].
//! - [`describe`](mod@describe): the report of `homeagent config check`.
//! - [`duration`], [`secret`]: the value types with their own rules.

pub mod describe;
pub mod duration;
pub mod example;
pub mod load;
pub mod secret;
pub mod types;

pub use describe::describe;
pub use duration::{DurationError, DurationUnit, HumanDuration};
pub use example::{config_schema, example_toml};
pub use load::{
    CONFIG_FILE_NAME, ConfigError, ConfigPaths, DeviceToken, ENV_API_KEY, ENV_CONFIG, ENV_DATA_DIR,
    ENV_DEVICE_TOKEN, LoadedConfig, PathOrigin, Secrets,
};
pub use secret::Secret;
pub use types::{
    AgentEntry, AgentSection, CmdRunSection, Config, DEFAULT_AGENT, DeviceEntry, FilesSection,
    HookEntry, HooksSection, LlmSection, MAX_BLOCKING_THREADS, MAX_SERVE_THREADS,
    MAX_WORKER_THREADS, McpSection, McpServerEntry, RuntimeSection, SchedulerSection,
    ServerSection, StoreSection, StoreSync, ToolsSection,
};
