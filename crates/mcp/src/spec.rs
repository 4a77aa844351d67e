//! What the embedder tells this crate about each server (the agent's config
//! `[[mcp.servers]]` maps onto [`McpServerSpec`] one field to one field).

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

/// The variable a stdio MCP server is started with: how many HomeAgents
/// started it, one inside the other (its parent's own count plus one).
pub const NESTING_ENV: &str = "HOMEAGENT_MCP_NESTING";
/// From this nesting on a HomeAgent starts no MCP server of its own.
pub const MAX_NESTING: u32 = 3;

/// How many HomeAgents started this process as an MCP server, one inside
/// the other (0: none). A config that lists `homeagent mcp-serve` as a
/// server of itself would otherwise start copies of itself without end.
pub fn nesting() -> u32 {
    std::env::var(NESTING_ENV)
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(0)
}

/// One MCP server to connect to.
#[derive(Clone)]
pub struct McpServerSpec {
    /// Prefix of the server's tools (`<name>__<tool>`).
    pub name: String,
    pub transport: McpTransport,
    /// Act on the server's tool annotations (`readOnlyHint` makes a tool
    /// parallel-safe). Untrusted servers' annotations are ignored.
    pub trusted: bool,
    /// Tools (by the server's own names) that may run beside other calls.
    pub parallel_safe: Vec<String>,
    /// Tools that never run beside another call; wins over everything.
    pub serial: Vec<String>,
    /// Time allowed for `initialize`, and for each tool call to answer or
    /// report progress: every progress notification gives the call this
    /// long again, up to [`McpServerSpec::max_timeout`].
    pub timeout: Duration,
    /// The most a call may take however much progress it reports; `None`:
    /// ten times `timeout`.
    pub max_timeout: Option<Duration>,
}

/// How to reach a server.
#[derive(Clone)]
pub enum McpTransport {
    /// A child process speaking MCP on stdin/stdout. It gets `env`, and of
    /// HomeAgent's environment only HOME, LOGNAME, PATH, SHELL, TERM and
    /// USER (as the official SDKs pass them): never HomeAgent's keys.
    Stdio {
        command: String,
        args: Vec<String>,
        env: BTreeMap<String, String>,
        /// The directory it starts in; `None`: HomeAgent's own.
        cwd: Option<PathBuf>,
    },
    /// Streamable HTTP at `url`, with an optional bearer token.
    Http {
        url: String,
        bearer_token: Option<String>,
    },
}

// Hand-written so a bearer token or an env value (often a key) never
// reaches a log line.
impl std::fmt::Debug for McpTransport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            McpTransport::Stdio {
                command,
                args,
                env,
                cwd,
            } => f
                .debug_struct("Stdio")
                .field("command", command)
                .field("args", args)
                .field("env", &env.keys().collect::<Vec<_>>())
                .field("cwd", cwd)
                .finish(),
            McpTransport::Http { url, bearer_token } => f
                .debug_struct("Http")
                .field("url", &self.scrub(url))
                .field("bearer_token", &bearer_token.as_ref().map(|_| "<redacted>"))
                .finish(),
        }
    }
}

impl std::fmt::Debug for McpServerSpec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("McpServerSpec")
            .field("name", &self.name)
            .field("transport", &self.transport)
            .field("trusted", &self.trusted)
            .field("parallel_safe", &self.parallel_safe)
            .field("serial", &self.serial)
            .field("timeout", &self.timeout)
            .field("max_timeout", &self.max_timeout)
            .finish()
    }
}

impl McpTransport {
    /// `text` without the secrets an HTTP server's URL may carry (its
    /// `user:password@` and its query, where a key often sits), for error
    /// texts that quote the URL and for `Debug`.
    pub fn scrub(&self, text: &str) -> String {
        let McpTransport::Http { url, .. } = self else {
            return text.to_owned();
        };
        scrub_url_in(url, text)
    }
}

/// `url` without its user info and query: how a config's URL is shown
/// (an error about it, a `Debug` of the entry).
pub fn shown_url(url: &str) -> String {
    scrub_url_in(url, url)
}

/// `text` without `url`'s secrets, as written or as a client re-encoded
/// them.
fn scrub_url_in(url: &str, text: &str) -> String {
    let text = url_secrets(url)
        .into_iter()
        .filter(|secret| !secret.is_empty())
        .fold(text.to_owned(), |text, secret| text.replace(secret, ""));
    scrub_spellings(&text, host_of(url))
}

/// The `host[:port]` of `url`, without user info.
fn host_of(url: &str) -> &str {
    let after_scheme = url.split_once("://").map_or(url, |(_, rest)| rest);
    let authority = after_scheme
        .split(['/', '?', '#'])
        .next()
        .unwrap_or_default();
    authority
        .rsplit_once('@')
        .map_or(authority, |(_, host)| host)
}

/// Cuts, from every URL in `text` that names `host`, its user info and its
/// query, however they are spelled: the HTTP client quotes the URL it
/// sent, re-encoded (`%20` for a space, `%22` for a quote), which the
/// configured spelling does not match.
fn scrub_spellings(text: &str, host: &str) -> String {
    if host.is_empty() {
        return text.to_owned();
    }
    // A URL ends at whitespace or at what usually closes a quoted one.
    let ends = |c: char| c.is_whitespace() || matches!(c, '"' | '\'' | '<' | '>' | ')' | '`');
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(at) = rest.find("://") {
        let (before, after) = rest.split_at(at + 3);
        out.push_str(before);
        let end = after.find(ends).unwrap_or(after.len());
        let (url, tail) = after.split_at(end);
        let authority_end = url.find(['/', '?', '#']).unwrap_or(url.len());
        let authority = &url[..authority_end];
        let named = authority.rsplit_once('@').map_or(authority, |(_, h)| h);
        if named == host {
            out.push_str(named);
            let path = &url[authority_end..];
            out.push_str(path.split(['?', '#']).next().unwrap_or_default());
        } else {
            out.push_str(url);
        }
        rest = tail;
    }
    out.push_str(rest);
    out
}

/// The parts of `url` that must not be shown, as they are spelled in it:
/// the user info with its `@`, and the query with its `?`.
fn url_secrets(url: &str) -> Vec<&str> {
    let mut secrets = Vec::new();
    let after_scheme = url.split_once("://").map_or(url, |(_, rest)| rest);
    let authority = after_scheme
        .split(['/', '?', '#'])
        .next()
        .unwrap_or_default();
    if let Some(at) = authority.rfind('@') {
        secrets.push(&authority[..=at]);
    }
    if let Some(start) = url.find('?') {
        let end = url[start..].find('#').map_or(url.len(), |len| start + len);
        secrets.push(&url[start..end]);
    }
    secrets
}

impl McpServerSpec {
    /// The longest a call may run while it reports progress: `max_timeout`,
    /// else ten times `timeout`, and never less than `timeout`.
    pub fn max_call_time(&self) -> Duration {
        self.max_timeout
            .unwrap_or_else(|| self.timeout.saturating_mul(10))
            .max(self.timeout)
    }

    /// A stdio server with the defaults: untrusted, every tool serial, 30 s.
    pub fn stdio(name: impl Into<String>, command: impl Into<String>, args: Vec<String>) -> Self {
        McpServerSpec {
            name: name.into(),
            transport: McpTransport::Stdio {
                command: command.into(),
                args,
                env: BTreeMap::new(),
                cwd: None,
            },
            trusted: false,
            parallel_safe: Vec::new(),
            serial: Vec::new(),
            timeout: Duration::from_secs(30),
            max_timeout: None,
        }
    }

    /// A Streamable HTTP server with the same defaults.
    pub fn http(name: impl Into<String>, url: impl Into<String>) -> Self {
        McpServerSpec {
            transport: McpTransport::Http {
                url: url.into(),
                bearer_token: None,
            },
            ..McpServerSpec::stdio(name, String::new(), Vec::new())
        }
    }
}

/// A config entry's transport fields, as the config file has them.
#[derive(Clone, Default)]
pub struct TransportFields {
    pub command: Option<String>,
    pub args: Vec<String>,
    pub env: BTreeMap<String, String>,
    pub cwd: Option<PathBuf>,
    pub url: Option<String>,
    pub bearer_token: Option<String>,
}

impl McpTransport {
    /// The transport of a config entry, which must give exactly one of
    /// `command` and `url`.
    pub fn from_fields(server: &str, fields: TransportFields) -> Result<Self, SpecError> {
        match (fields.command, fields.url) {
            (Some(command), None) => Ok(McpTransport::Stdio {
                command,
                args: fields.args,
                env: fields.env,
                cwd: fields.cwd,
            }),
            (None, Some(_)) if fields.cwd.is_some() => {
                Err(SpecError::CwdWithoutCommand(server.to_owned()))
            }
            (None, Some(url)) => Ok(McpTransport::Http {
                url,
                bearer_token: fields.bearer_token,
            }),
            (Some(_), Some(_)) => Err(SpecError::BothTransports(server.to_owned())),
            (None, None) => Err(SpecError::NoTransport(server.to_owned())),
        }
    }
}

/// Supervision knobs shared by every server.
#[derive(Debug, Clone)]
pub struct McpOptions {
    /// Wait before the first restart; doubled after each crash.
    pub restart_backoff: Duration,
    /// Longest wait between restarts.
    pub max_restart_backoff: Duration,
    /// Crashes (or failed starts) within `crash_window` after which the
    /// server is given up on for `rest_after_giving_up`.
    pub max_crashes: u32,
    pub crash_window: Duration,
    /// How long a server given up on rests before it is tried again (with
    /// its crash count and backoff starting over): a home server or a NAS
    /// that restarts takes longer than a few backoffs, and giving up for
    /// good left its tools gone until HomeAgent restarted.
    pub rest_after_giving_up: Duration,
    /// How often a Streamable HTTP server is pinged while idle. A stdio
    /// server's death closes its pipe; an HTTP server that went away is
    /// only noticed when a request to it fails, so one is made regularly
    /// (and at once after a call failed at the transport).
    pub http_ping_interval: Duration,
}

impl Default for McpOptions {
    fn default() -> Self {
        McpOptions {
            restart_backoff: Duration::from_millis(500),
            max_restart_backoff: Duration::from_secs(30),
            max_crashes: 5,
            crash_window: Duration::from_secs(300),
            rest_after_giving_up: Duration::from_secs(300),
            http_ping_interval: Duration::from_secs(15),
        }
    }
}

/// The longest server name: its tools' names (`<server>__<tool>`, at most
/// 64 characters) keep at least 30 characters for the tool's own name.
pub const MAX_SERVER_NAME_LEN: usize = 32;

/// Whether `name` can prefix tool names as it is: every provider accepts
/// `[A-Za-z0-9_-]`, and Gemini also wants a letter (or `_`) first. And
/// `<name>__` must begin no other server's tool names: a name ending in
/// `_` or holding `__` would let the pattern `<other>__*` (every tool of
/// the server `other`, in `allow_tools` or `deny_tools`) reach its tools,
/// or two servers expose one name.
pub fn valid_server_name(name: &str) -> bool {
    name.len() <= MAX_SERVER_NAME_LEN
        && name.starts_with(|c: char| c.is_ascii_alphabetic())
        && !name.ends_with('_')
        && !name.contains("__")
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
}

/// A server spec that cannot be started.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SpecError {
    #[error("an MCP server has an empty name; give every [[mcp.servers]] entry a name")]
    EmptyName,
    #[error(
        "MCP server name `{0}` cannot prefix tool names: use 1 to {MAX_SERVER_NAME_LEN} letters, digits, `_` or `-`, starting with a letter, not ending with `_` and without `__` (the model sees `<server>__<tool>`, and providers refuse other tool names)"
    )]
    BadName(String),
    #[error("two MCP servers are named `{0}`; server names must be unique")]
    DuplicateName(String),
    #[error(
        "MCP server `{0}` has both `command` and `url`; give `command` to start a program, or `url` for a Streamable HTTP server"
    )]
    BothTransports(String),
    #[error(
        "MCP server `{0}` has neither `command` nor `url`; give `command` to start a program, or `url` for a Streamable HTTP server"
    )]
    NoTransport(String),
    #[error(
        "MCP server `{0}` has `cwd` but no `command`: a working directory is for a program HomeAgent starts; remove `cwd` for a `url` server"
    )]
    CwdWithoutCommand(String),
    #[error(
        "MCP server `{0}` has max_timeout below its timeout; max_timeout is the most a call may take while it reports progress, so make it at least timeout (or leave it out: ten times timeout)"
    )]
    MaxTimeoutBelowTimeout(String),
    #[error(
        "MCP server `{0}` has timeout 0s, so every start and every call would time out at once; give it a few seconds, or leave it out (30s)"
    )]
    ZeroTimeout(String),
    #[error("MCP server `{0}` has an empty command; set `command` (stdio) or `url` (HTTP)")]
    EmptyCommand(String),
    #[error(
        "MCP server `{server}` has url `{url}`, which is not http:// or https://; give the server's full Streamable HTTP address"
    )]
    BadUrl { server: String, url: String },
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A URL that is not http(s) is refused without repeating its
    /// password or query (the message is printed and logged); a scheme in
    /// capitals is still http(s).
    #[test]
    fn a_bad_url_is_refused_without_its_secrets_and_the_scheme_ignores_case() {
        for url in [
            "ftp://me:pw@nas/mcp?key=abc",
            "nas.local/mcp?key=abc",
            "me:pw@nas.local/mcp",
        ] {
            let error = crate::check_specs(&[McpServerSpec::http("nas", url)]).unwrap_err();
            let message = error.to_string();
            assert!(
                matches!(error, SpecError::BadUrl { .. }),
                "{url}: {error:?}"
            );
            assert!(
                !message.contains("pw") && !message.contains("key=abc"),
                "{url}: {message}"
            );
            assert!(message.contains("nas"), "{url}: {message}");
        }
        for url in ["HTTPS://nas/mcp", "Http://nas/mcp", "https://nas/mcp"] {
            assert_eq!(
                crate::check_specs(&[McpServerSpec::http("nas", url)]),
                Ok(()),
                "{url}"
            );
        }
        assert_eq!(
            shown_url("https://me:pw@nas:8123/mcp?api_key=SECRET#top"),
            "https://nas:8123/mcp"
        );
    }

    /// The client quotes the URL as it sent it, re-encoded (a space is
    /// `%20`, a quote `%22`): a query or a password in that spelling is
    /// cut too, not only the one the config wrote.
    #[test]
    fn a_re_encoded_spelling_of_the_urls_secrets_is_scrubbed() {
        let transport = McpTransport::Http {
            url: "http://me:p w@nas.local:8123/mcp?api_key=TOP SECRET&x=\"q\"".into(),
            bearer_token: None,
        };
        let text = "error sending request for url (http://me:p%20w@nas.local:8123/mcp?api_key=TOP%20SECRET&x=%22q%22): \
                    connection refused; url: \"http://nas.local:8123/mcp?api_key=TOP%20SECRET\", \
                    and as written: http://me:p w@nas.local:8123/mcp?api_key=TOP SECRET&x=\"q\"";
        let scrubbed = transport.scrub(text);
        assert!(!scrubbed.contains("TOP"), "{scrubbed}");
        assert!(
            !scrubbed.contains("p%20w") && !scrubbed.contains("p w@"),
            "{scrubbed}"
        );
        assert!(scrubbed.contains("nas.local:8123/mcp"), "{scrubbed}");
        assert!(scrubbed.contains("connection refused"), "{scrubbed}");
        // Other URLs keep their queries.
        assert_eq!(
            transport.scrub("see http://example.net/doc?page=2"),
            "see http://example.net/doc?page=2"
        );
    }

    #[test]
    fn server_names_must_be_usable_as_tool_name_prefixes() {
        for good in [
            "git",
            "fs-2",
            "my_server",
            "G",
            &"a".repeat(MAX_SERVER_NAME_LEN),
        ] {
            assert!(valid_server_name(good), "{good}");
        }
        let too_long = "a".repeat(MAX_SERVER_NAME_LEN + 1);
        for bad in [
            "",
            "1password",
            "_x",
            "-x",
            "my server",
            "a.b",
            "é",
            too_long.as_str(),
            // `nas_`'s tools would be `nas___…`, which the pattern
            // `nas__*` (every tool of `nas`) matches; `a__b`'s tool `c`
            // and `a`'s tool `b__c` would both be `a__b__c`.
            "nas_",
            "a__b",
        ] {
            assert!(!valid_server_name(bad), "{bad}");
        }
    }

    #[test]
    fn exactly_one_transport() {
        let both = TransportFields {
            command: Some("x".into()),
            url: Some("http://h/mcp".into()),
            ..TransportFields::default()
        };
        assert_eq!(
            McpTransport::from_fields("s", both).unwrap_err(),
            SpecError::BothTransports("s".into())
        );
        assert_eq!(
            McpTransport::from_fields("s", TransportFields::default()).unwrap_err(),
            SpecError::NoTransport("s".into())
        );
        let http = TransportFields {
            url: Some("http://h/mcp".into()),
            bearer_token: Some("t".into()),
            ..TransportFields::default()
        };
        let transport = McpTransport::from_fields("s", http.clone()).unwrap();
        let http_with_cwd = TransportFields {
            cwd: Some(PathBuf::from("/srv")),
            ..http
        };
        assert_eq!(
            McpTransport::from_fields("s", http_with_cwd).unwrap_err(),
            SpecError::CwdWithoutCommand("s".into())
        );
        // The token is never printed.
        assert_eq!(
            format!("{transport:?}"),
            r#"Http { url: "http://h/mcp", bearer_token: Some("<redacted>") }"#
        );
    }

    #[test]
    fn a_query_ends_at_the_fragment() {
        assert_eq!(
            url_secrets("https://u:p@h/p?token=abc#part"),
            ["u:p@", "?token=abc"]
        );
        assert_eq!(url_secrets("https://h/p?token=abc"), ["?token=abc"]);
        assert!(url_secrets("https://h/p#part").is_empty());
    }

    #[test]
    fn a_spec_shows_everything_but_its_secrets() {
        let mut spec = McpServerSpec::http("nas", "https://me:pw@nas.local/mcp?key=abc");
        spec.serial = vec!["write".into()];
        let shown = format!("{spec:?}");
        assert!(
            shown.starts_with("McpServerSpec { name: \"nas\", transport: Http"),
            "{shown}"
        );
        assert!(shown.contains("nas.local/mcp"), "{shown}");
        assert!(shown.contains("serial: [\"write\"]"), "{shown}");
        assert!(!shown.contains("pw") && !shown.contains("abc"), "{shown}");
    }

    #[test]
    fn a_call_may_run_to_max_timeout_else_ten_timeouts_never_less_than_one() {
        let mut spec = McpServerSpec::stdio("s", "server", Vec::new());
        assert_eq!(spec.max_call_time(), Duration::from_secs(300));
        spec.max_timeout = Some(Duration::from_secs(60));
        assert_eq!(spec.max_call_time(), Duration::from_secs(60));
        spec.max_timeout = Some(Duration::from_secs(10));
        assert_eq!(spec.max_call_time(), Duration::from_secs(30));
    }

    #[test]
    fn an_http_spec_has_the_stdio_defaults_and_its_url() {
        let spec = McpServerSpec::http("nas", "http://h/mcp");
        assert_eq!(
            format!("{:?}", spec.transport),
            r#"Http { url: "http://h/mcp", bearer_token: None }"#
        );
        assert_eq!(spec.name, "nas");
        assert!(!spec.trusted && spec.parallel_safe.is_empty() && spec.serial.is_empty());
        assert_eq!(
            (spec.timeout, spec.max_timeout),
            (Duration::from_secs(30), None)
        );
    }
}
