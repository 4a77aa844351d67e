//! `waiter.toml`: what the device's owner configures.
//!
//! Every key is optional; a missing file is the defaults. Unknown keys are
//! an error naming the key (`deny_unknown_fields`): a misspelt
//! `device_cmd_allowlst` must not silently leave the default list in force,
//! which is exactly how the seed's configuration "did nothing".
//!
//! ```toml
//! server = "ws://192.168.1.10:8080"     # or --server
//! device_id = "nas"                      # default waiter-<hostname>
//! name = "The NAS"                       # default: the host name
//! device_authorized = true               # false refuses every command
//! device_cmd_allowlist = ["ls", "find", "grep", "sed"]  # replaces the default
//! allow_writes = false                   # sed -i, find -delete, sort -o, …
//! timeout = "30s"                        # when the server asks for none
//! max_timeout = "5m"
//! output_cap_bytes = 32768               # per stream (stdout, stderr)
//! env = ["LC_ALL"]                       # passed through besides PATH, HOME, LANG, TZ
//! ```
//!
//! `device_authorized` defaults to **true**: starting a waiter and giving it
//! the server's token is the owner's opt-in, and what it then allows is the
//! built-in list of read-only inspection programs behind the write guard.
//! `false` is the switch that keeps the device bound (visible in
//! `device_list`) while refusing every command.

use std::path::{Path, PathBuf};
use std::time::Duration;

use homeagent_core::text_position::line_column;
use serde::Deserialize;

/// The file looked for in the data directory when `--config` is not given.
pub const DEFAULT_CONFIG_FILE_NAME: &str = "waiter.toml";

/// The largest `output_cap_bytes`: stdout and stderr are each capped to it,
/// and a result (JSON-escaped, worst case six bytes per byte) must still fit
/// in one frame of [`MAX_FRAME_BYTES`](crate::protocol::MAX_FRAME_BYTES).
pub const MAX_OUTPUT_CAP_BYTES: usize = 64 * 1024;

/// A secret string whose `Debug` never shows it.
#[derive(Clone, PartialEq, Eq, Deserialize)]
#[serde(transparent)]
pub struct Secret(String);

impl Secret {
    pub fn new(value: impl Into<String>) -> Secret {
        Secret(value.into())
    }

    /// The secret itself, for the one place that sends it.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Secret(<hidden>)")
    }
}

/// A duration as the config writes it: `"30s"`, `"500ms"`, `"2m"` or whole
/// seconds (the same forms `cmd_run`'s `timeout` argument accepts).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(untagged)]
pub enum DurationSetting {
    Seconds(u64),
    Text(String),
}

impl DurationSetting {
    fn resolve(&self, key: &'static str, path: &Path) -> Result<Duration, WaiterConfigError> {
        let value = match self {
            DurationSetting::Seconds(n) => serde_json::Value::from(*n),
            DurationSetting::Text(s) => serde_json::Value::from(s.as_str()),
        };
        homeagent_tools::cmd_run::parse_timeout(&value).map_err(|e| WaiterConfigError::Invalid {
            path: path.to_owned(),
            key,
            problem: format!("{} ({})", e.detail, e.hint.unwrap_or_default()),
        })
    }
}

/// `waiter.toml`, as written. [`WaiterPolicy::load`](super::WaiterPolicy::load)
/// turns it into the policy the waiter enforces.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct WaiterConfig {
    /// `ws://HOST:PORT` or `wss://HOST:PORT` of `homeagent serve`.
    pub server: Option<String>,
    /// The device token. Prefer `HOMEAGENT_DEVICE_TOKEN`; if it is here,
    /// keep the file readable by the waiter's user only.
    pub token: Option<Secret>,
    /// `[A-Za-z0-9._-]`, 1–64 characters; default `waiter-<hostname>`.
    pub device_id: Option<String>,
    /// A human name; default the host name.
    pub name: Option<String>,
    /// When false, every command is refused (default true).
    pub device_authorized: Option<bool>,
    /// Program names that may run. A list replaces the built-in one; an
    /// empty list means the built-in one, never "everything".
    pub device_cmd_allowlist: Vec<String>,
    /// Let options that write files through (`sed -i`, `find -delete`,
    /// `sort -o`, …). Running another program (`find -exec`) stays refused.
    pub allow_writes: bool,
    /// Timeout when the server asks for none.
    pub timeout: Option<DurationSetting>,
    /// The longest a command may run, whatever the server asks.
    pub max_timeout: Option<DurationSetting>,
    /// Bytes kept per stream; the rest is counted and marked as truncated.
    pub output_cap_bytes: Option<usize>,
    /// Extra environment variable names passed to commands.
    pub env: Vec<String>,
    /// Where commands run; default the waiter's working directory.
    pub working_dir: Option<PathBuf>,
}

/// Why `waiter.toml` cannot be used. Match on the variant.
#[derive(Debug, thiserror::Error)]
pub enum WaiterConfigError {
    #[error("cannot read the waiter config {}: {source}", path.display())]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// Syntax errors, wrong types and unknown keys (the message names the key).
    #[error("{}:{line}:{column}: {message}", path.display())]
    Parse {
        path: PathBuf,
        line: usize,
        column: usize,
        message: String,
    },
    /// A key whose value cannot be honoured.
    #[error("{}: `{key}`: {problem}", path.display())]
    Invalid {
        path: PathBuf,
        key: &'static str,
        problem: String,
    },
}

impl WaiterConfig {
    /// Parses TOML text; `path` only names the file in errors.
    pub fn from_toml(text: &str, path: &Path) -> Result<WaiterConfig, WaiterConfigError> {
        toml::from_str(text).map_err(|error| {
            let (line, column) = error
                .span()
                .map_or((0, 0), |span| line_column(text, span.start));
            WaiterConfigError::Parse {
                path: path.to_owned(),
                line,
                column,
                message: error.message().trim_end().to_owned(),
            }
        })
    }

    /// Reads and parses `path`.
    pub fn read(path: &Path) -> Result<WaiterConfig, WaiterConfigError> {
        let text = std::fs::read_to_string(path).map_err(|source| WaiterConfigError::Read {
            path: path.to_owned(),
            source,
        })?;
        WaiterConfig::from_toml(&text, path)
    }

    pub(super) fn timeout(&self, path: &Path) -> Result<Option<Duration>, WaiterConfigError> {
        self.timeout
            .as_ref()
            .map(|d| d.resolve("timeout", path))
            .transpose()
    }

    pub(super) fn max_timeout(&self, path: &Path) -> Result<Option<Duration>, WaiterConfigError> {
        self.max_timeout
            .as_ref()
            .map(|d| d.resolve("max_timeout", path))
            .transpose()
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    #[test]
    fn a_typo_names_the_key_and_the_line() {
        let text = "allow_writes = false\ndevice_cmd_allowlst = [\"ls\"]\n";
        let err = WaiterConfig::from_toml(text, Path::new("w.toml")).unwrap_err();
        let WaiterConfigError::Parse { line, message, .. } = &err else {
            panic!("not a parse error: {err:?}");
        };
        assert_eq!(*line, 2);
        assert!(message.contains("device_cmd_allowlst"), "{message}");
        let WaiterConfigError::Parse { column, .. } =
            WaiterConfig::from_toml("allow_writes = nope\n", Path::new("w.toml")).unwrap_err()
        else {
            panic!("not a parse error");
        };
        assert_eq!(column, 16, "the value starts after `allow_writes = `");
    }

    #[test]
    fn the_token_never_shows_in_debug() {
        let config = WaiterConfig::from_toml("token = \"s3cret-value\"\n", Path::new("w")).unwrap();
        assert_eq!(
            config.token.as_ref().map(Secret::expose),
            Some("s3cret-value")
        );
        let shown = format!("{config:?}");
        assert!(!shown.contains("s3cret"), "{shown}");
        // It still says that a token is set.
        assert!(shown.contains("token: Some(Secret(<hidden>))"), "{shown}");
    }

    #[test]
    fn durations_take_the_cmd_run_forms() {
        let config =
            WaiterConfig::from_toml("timeout = \"500ms\"\nmax_timeout = 90\n", Path::new("w"))
                .unwrap();
        assert_eq!(
            config.timeout(Path::new("w")).unwrap(),
            Some(Duration::from_millis(500))
        );
        assert_eq!(
            config.max_timeout(Path::new("w")).unwrap(),
            Some(Duration::from_secs(90))
        );
        let bad = WaiterConfig::from_toml("timeout = \"soon\"\n", Path::new("w")).unwrap();
        assert!(matches!(
            bad.timeout(Path::new("w")),
            Err(WaiterConfigError::Invalid { key: "timeout", .. })
        ));
    }
}
