#![allow(clippy::unwrap_used, clippy::expect_used)] // a panic in a test is a test failure
//! The config file: defaults, every section, errors that name the bad key
//! and list the allowed ones, secrets from the environment, path
//! precedence, and the generated example (docs/CONFIG.md).

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use homeagent_agent::config::{
    AgentEntry, Config, ConfigError, ConfigPaths, HumanDuration, LoadedConfig, PathOrigin,
    describe, example_toml,
};
use homeagent_llm::{SourceConfig, SourceProtocol};

/// A fake environment: never the process's own.
fn env_of(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> + use<> {
    let map: HashMap<String, String> = pairs
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect();
    move |name: &str| map.get(name).cloned()
}

fn no_env() -> impl Fn(&str) -> Option<String> {
    env_of(&[])
}

fn parse(text: &str) -> Result<Config, ConfigError> {
    Config::from_toml(text, Path::new("test.toml"))
}

/// A directory under the system temp dir, removed on drop.
struct TempDir(PathBuf);

impl TempDir {
    fn new(tag: &str) -> Self {
        static COUNTER: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
        let n = COUNTER.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        let dir = std::env::temp_dir().join(format!(
            "homeagent-config-test-{}-{tag}-{n}",
            std::process::id()
        ));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        TempDir(dir)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn parse_error(text: &str) -> (usize, usize, String) {
    match parse(text) {
        Err(ConfigError::Parse {
            line,
            column,
            message,
            ..
        }) => (line, column, message),
        other => panic!("expected a parse error, got {other:?}"),
    }
}

fn invalid_key(text: &str) -> (String, String) {
    match parse(text) {
        Err(ConfigError::Invalid { key, message, .. }) => (key, message),
        other => panic!("expected an invalid-config error, got {other:?}"),
    }
}

fn assert_lists(message: &str, words: &[&str]) {
    for word in words {
        assert!(
            message.contains(&format!("`{word}`")),
            "{word:?} not listed in: {message}"
        );
    }
}

// ---------------------------------------------------------------- defaults

#[test]
fn an_empty_file_gives_the_documented_defaults() {
    let config = parse("").unwrap();
    assert_eq!(config, Config::default());
    assert_eq!(config.agent.max_tool_turns, 10);
    assert_eq!(config.agent.context_tokens, 32_000);
    assert_eq!(config.agent.max_tokens, 4096);
    assert_eq!(config.agent.system_prompt, None);
    assert_eq!(config.scheduler.max_concurrent_sessions, 16);
    assert_eq!(config.scheduler.queue_capacity, 256);
    assert_eq!(config.scheduler.dedup_window, None);
    assert_eq!(config.runtime.worker_threads, 1);
    assert_eq!(
        config.llm.stream_idle_timeout.as_duration(),
        Duration::from_secs(60)
    );
    assert_eq!(
        config.llm.connect_timeout.as_duration(),
        Duration::from_secs(10)
    );
    assert!(config.llm.sources.is_empty());
    assert!(config.llm.ca_certificates.is_empty());
    assert_eq!(config.llm.adapter_dir, None);
    assert!(config.tools.parallel);
    assert!(!config.tools.demo);
    assert!(config.tools.require_approval.is_empty());
    assert!(config.tools.cmd_run.enabled);
    assert!(config.tools.cmd_run.allowlist.is_empty());
    assert!(!config.tools.cmd_run.allow_writes);
    assert_eq!(
        config.tools.cmd_run.timeout.as_duration(),
        Duration::from_secs(30)
    );
    assert!(config.tools.cmd_run.env.is_empty());
    assert_eq!(config.tools.files.root, None);
    assert!(config.agents.is_empty());
    assert_eq!(config.server.listen, "127.0.0.1:8080");
    assert!(config.server.api_key.is_none());
    assert!(config.server.device_token.is_none());
}

#[test]
fn the_main_agent_exists_without_being_declared() {
    let config = parse("").unwrap();
    assert_eq!(
        config.agent("main"),
        Some(AgentEntry {
            name: "main".into(),
            allow_tools: vec![],
            deny_tools: vec![],
            devices: vec![],
        })
    );
    assert_eq!(config.agent("kitchen"), None);

    let config = parse("[[agents]]\nname = \"main\"\ndeny_tools = [\"cmd_run\"]\n").unwrap();
    assert_eq!(config.agent("main").unwrap().deny_tools, vec!["cmd_run"]);
}

// ----------------------------------------------------------- every section

const FULL: &str = r#"
[agent]
max_tool_turns = 3
context_tokens = 8000
max_tokens = 512
system_prompt = "Be brief."

[scheduler]
max_concurrent_sessions = 2
queue_capacity = 5
dedup_window = "1500ms"

[runtime]
worker_threads = 3
serve_threads = 4

[llm]
stream_idle_timeout = "2m"
connect_timeout = "5s"
ca_certificates = ["ca/home.pem"]
adapter_dir = "my-adapters"

[[llm.sources]]
name = "local"
protocol = "openai"
base_url = "http://127.0.0.1:9099/v1"
model = "mock"
api_key_env = "OPENAI_API_KEY"
priority = 10
max_concurrent = 4

[[llm.sources]]
name = "scripted"
protocol = "lua"
base_url = "http://127.0.0.1:9100"
model = "m"
adapter = "openai"

[tools]
parallel = false
demo = true
require_approval = ["files_write"]

[tools.cmd_run]
enabled = false
allowlist = ["ls", "cat"]
allow_writes = true
timeout = "1h"
env = ["TERM"]

[tools.files]
root = "/srv/files"

[[agents]]
name = "kitchen"
allow_tools = ["files_read"]
deny_tools = ["cmd_run"]
devices = ["kitchen-light"]

[server]
listen = "0.0.0.0:9000"
api_key = "file-key"
device_token = "file-token"
"#;

#[test]
fn every_section_is_read() {
    let config = parse(FULL).unwrap();
    assert_eq!(config.agent.max_tool_turns, 3);
    assert_eq!(config.agent.context_tokens, 8000);
    assert_eq!(config.agent.max_tokens, 512);
    assert_eq!(config.agent.system_prompt.as_deref(), Some("Be brief."));
    assert_eq!(config.scheduler.max_concurrent_sessions, 2);
    assert_eq!(config.scheduler.queue_capacity, 5);
    assert_eq!(config.runtime.worker_threads, 3);
    assert_eq!(config.runtime.serve_threads, 4);
    assert_eq!(
        config
            .scheduler
            .dedup_window
            .map(HumanDuration::as_duration),
        Some(Duration::from_millis(1500))
    );
    assert_eq!(
        config.llm.stream_idle_timeout.as_duration(),
        Duration::from_secs(120)
    );
    assert_eq!(
        config.llm.connect_timeout.as_duration(),
        Duration::from_secs(5)
    );
    assert_eq!(
        config.llm.ca_certificates,
        vec![PathBuf::from("ca/home.pem")]
    );
    assert_eq!(config.llm.adapter_dir, Some(PathBuf::from("my-adapters")));
    assert_eq!(
        config.llm.sources,
        vec![
            SourceConfig {
                base_url: Some("http://127.0.0.1:9099/v1".into()),
                model: Some("mock".into()),
                api_key_env: Some("OPENAI_API_KEY".into()),
                priority: 10,
                max_concurrent: Some(4),
                ..SourceConfig::new("local", SourceProtocol::Openai)
            },
            SourceConfig {
                base_url: Some("http://127.0.0.1:9100".into()),
                model: Some("m".into()),
                adapter: Some("openai".into()),
                ..SourceConfig::new("scripted", SourceProtocol::Lua)
            },
        ]
    );
    assert!(!config.tools.parallel);
    assert!(config.tools.demo);
    assert_eq!(config.tools.require_approval, vec!["files_write"]);
    assert!(!config.tools.cmd_run.enabled);
    assert_eq!(config.tools.cmd_run.allowlist, vec!["ls", "cat"]);
    assert!(config.tools.cmd_run.allow_writes);
    assert_eq!(
        config.tools.cmd_run.timeout.as_duration(),
        Duration::from_secs(3600)
    );
    assert_eq!(config.tools.cmd_run.env, vec!["TERM"]);
    assert_eq!(config.tools.files.root, Some(PathBuf::from("/srv/files")));
    assert_eq!(
        config.agents,
        vec![AgentEntry {
            name: "kitchen".into(),
            allow_tools: vec!["files_read".into()],
            deny_tools: vec!["cmd_run".into()],
            devices: vec!["kitchen-light".into()],
        }]
    );
    assert_eq!(config.agent("kitchen"), Some(config.agents[0].clone()));
    assert_eq!(config.agent("main"), Some(AgentEntry::main()));
    assert_eq!(config.server.listen, "0.0.0.0:9000");
    assert_eq!(
        config.server.api_key.as_ref().map(|s| s.expose()),
        Some("file-key")
    );
    assert_eq!(
        config.server.device_token.as_ref().map(|s| s.expose()),
        Some("file-token")
    );
}

// ------------------------------------------------- errors naming the key

#[test]
fn a_misspelled_top_level_key_lists_the_top_level_keys() {
    let (line, column, message) = parse_error("\n[agnet]\nmax_tool_turns = 3\n");
    assert!(message.contains("`agnet`"), "{message}");
    assert_lists(
        &message,
        &["agent", "scheduler", "llm", "tools", "agents", "server"],
    );
    assert_eq!((line, column), (2, 2));
}

#[test]
fn a_misspelled_tools_key_lists_the_tools_keys() {
    let (line, column, message) = parse_error("[tools]\ndemo = true\nparalell = false\n");
    assert!(message.contains("unknown field `paralell`"), "{message}");
    assert_lists(
        &message,
        &["parallel", "demo", "require_approval", "cmd_run", "files"],
    );
    assert_eq!((line, column), (3, 1));
}

#[test]
fn a_misspelled_cmd_run_key_lists_the_cmd_run_keys() {
    let (line, column, message) =
        parse_error("[tools.cmd_run]\nenabled = true\n  alow_writes = true\n");
    assert!(message.contains("unknown field `alow_writes`"), "{message}");
    assert_lists(
        &message,
        &[
            "enabled",
            "allowlist",
            "allow_writes",
            "timeout",
            "max_timeout",
            "env",
        ],
    );
    assert_eq!((line, column), (3, 3));
}

#[test]
fn a_misspelled_source_key_lists_the_source_keys() {
    let (line, _, message) =
        parse_error("[[llm.sources]]\nname = \"a\"\nprotocol = \"demo\"\nmodle = \"x\"\n");
    assert!(message.contains("`modle`"), "{message}");
    assert_lists(&message, &["name", "protocol", "base_url", "model"]);
    assert_eq!(line, 4);
}

#[test]
fn a_bad_protocol_lists_the_legal_ones() {
    let (line, _, message) = parse_error("[[llm.sources]]\nname = \"a\"\nprotocol = \"opneai\"\n");
    assert!(message.contains("opneai"), "{message}");
    assert_lists(
        &message,
        &["openai", "anthropic", "gemini", "ollama", "lua", "demo"],
    );
    assert_eq!(line, 3);
}

#[test]
fn a_bad_duration_says_what_is_accepted() {
    for (text, shown) in [
        ("[tools.cmd_run]\ntimeout = \"30 sec\"\n", "\"30 sec\""),
        ("[tools.cmd_run]\ntimeout = 30\n", "30"),
        ("[tools.cmd_run]\ntimeout = \"1.5s\"\n", "\"1.5s\""),
    ] {
        let (line, _, message) = parse_error(text);
        assert_eq!(line, 2, "{message}");
        assert!(message.contains(shown), "{message}");
        assert!(
            message.contains("\"500ms\", \"30s\", \"2m\" or \"1h\""),
            "{message}"
        );
    }
}

#[test]
fn durations_parse_strictly_and_print_as_written() {
    for (text, millis) in [
        ("500ms", 500),
        ("30s", 30_000),
        ("2m", 120_000),
        ("1h", 3_600_000),
        ("0s", 0),
    ] {
        let duration: HumanDuration = text.parse().unwrap();
        assert_eq!(duration.as_duration(), Duration::from_millis(millis));
        assert_eq!(duration.to_string(), text);
    }
    for bad in [
        "", "s", "30", "30 s", " 30s", "-5s", "1.5s", "30sec", "2d", "ms",
    ] {
        let error = bad.parse::<HumanDuration>().unwrap_err();
        assert_eq!(error.text, bad);
    }
    assert_eq!(
        "60s".parse::<HumanDuration>().unwrap(),
        "1m".parse::<HumanDuration>().unwrap()
    );
}

#[test]
fn semantic_errors_name_the_key() {
    let source = |name: &str| {
        format!(
            "[[llm.sources]]\nname = \"{name}\"\nprotocol = \"openai\"\nbase_url = \"http://x/v1\"\nmodel = \"m\"\n"
        )
    };
    let (key, message) = invalid_key(&format!("{}{}{}", source("a"), source("b"), source("a")));
    assert_eq!(key, "llm.sources[2].name");
    assert!(message.contains("llm.sources[0]"), "{message}");

    let (key, message) = invalid_key(
        "[[llm.sources]]\nname = \"l\"\nprotocol = \"lua\"\nbase_url = \"http://x\"\nmodel = \"m\"\n",
    );
    assert_eq!(key, "llm.sources[0].adapter");
    assert!(message.contains("adapter = "), "{message}");
    // An adapter on another protocol would be ignored: the source would
    // speak its own wire, and the person would not know why.
    let (key, message) = invalid_key(
        "[[llm.sources]]\nname = \"o\"\nprotocol = \"openai\"\nbase_url = \"http://x\"\n\
         model = \"m\"\nadapter = \"anthropic\"\n",
    );
    assert_eq!(key, "llm.sources[0].adapter");
    assert_eq!(
        message,
        "source \"o\" has protocol = \"openai\", which uses no adapter; set protocol = \"lua\" \
         to speak through the adapter, or remove adapter"
    );

    let (key, _) =
        invalid_key("[[llm.sources]]\nname = \"o\"\nprotocol = \"ollama\"\nmodel = \"m\"\n");
    assert_eq!(key, "llm.sources[0].base_url");
    let (key, _) = invalid_key(
        "[[llm.sources]]\nname = \"o\"\nprotocol = \"ollama\"\nbase_url = \"http://x\"\n",
    );
    assert_eq!(key, "llm.sources[0].model");
    // The demo model needs neither.
    parse("[[llm.sources]]\nname = \"d\"\nprotocol = \"demo\"\n").unwrap();

    let (key, _) = invalid_key(
        "[[agents]]\nname = \"a\"\n[[agents]]\nname = \"b\"\n[[agents]]\nname = \"b\"\n",
    );
    assert_eq!(key, "agents[2].name");
    let (key, message) = invalid_key("[agent]\nmax_tool_turns = 0\n");
    assert_eq!(key, "agent.max_tool_turns");
    assert!(message.contains("at least 1"), "{message}");
    let (key, _) = invalid_key("[scheduler]\nqueue_capacity = 0\n");
    assert_eq!(key, "scheduler.queue_capacity");
    let (key, _) = invalid_key("[scheduler]\nmax_concurrent_sessions = 0\n");
    assert_eq!(key, "scheduler.max_concurrent_sessions");
}

/// `server.listen` must say HOST:PORT: `config check` said OK to
/// `listen = "localhost"`, and `serve` then failed to resolve it.
#[test]
fn a_listen_address_without_a_port_is_refused_at_load() {
    for listen in [
        "localhost",
        "127.0.0.1",
        "[::1]",
        "host:",
        "host:http",
        "host:70000",
        // IPv6 without brackets: `rsplit_once(':')` read "::1" as host
        // ":" and port 1.
        "::1",
        "fe80::1",
        "::1:8080",
    ] {
        let (key, message) = invalid_key(&format!("[server]\nlisten = \"{listen}\"\n"));
        assert_eq!(key, "server.listen", "{listen}");
        assert!(message.contains("HOST:PORT"), "{listen}: {message}");
    }
    for listen in ["localhost:8080", "0.0.0.0:80", "[::1]:8080", "nas.local:0"] {
        let parsed = parse(&format!("[server]\nlisten = \"{listen}\"\n"));
        assert!(parsed.is_ok(), "{listen}: {parsed:?}");
    }
}

/// A zero where zero means "never works" (a timeout that fires at once, a
/// reply of no tokens, a context that holds not even the question) is a
/// typo: refused naming the key and the default, never run as written.
#[test]
fn zero_limits_are_refused_naming_the_key() {
    let hook = "command = \"true\"\ntimeout = \"0s\"\n";
    for (text, expected) in [
        ("[agent]\nmax_tokens = 0\n".to_owned(), "agent.max_tokens"),
        (
            "[agent]\ncontext_tokens = 0\n".to_owned(),
            "agent.context_tokens",
        ),
        (
            "[agent]\ncontext_tokens = 200\n".to_owned(),
            "agent.context_tokens",
        ),
        (
            "[llm]\nstream_idle_timeout = \"0s\"\n".to_owned(),
            "llm.stream_idle_timeout",
        ),
        (
            "[llm]\nconnect_timeout = \"0ms\"\n".to_owned(),
            "llm.connect_timeout",
        ),
        (
            "[tools.cmd_run]\ntimeout = \"0s\"\n".to_owned(),
            "tools.cmd_run.timeout",
        ),
        (
            "[server]\nmax_body_bytes = 0\n".to_owned(),
            "server.max_body_bytes",
        ),
        (
            format!("[[hooks.pre_tool_use]]\n{hook}"),
            "hooks.pre_tool_use[0].timeout",
        ),
        (
            format!("[[hooks.post_tool_use]]\ncommand = \"true\"\n[[hooks.post_tool_use]]\n{hook}"),
            "hooks.post_tool_use[1].timeout",
        ),
        // A window of nothing skips nothing: the person asked for dedup.
        (
            "[scheduler]\ndedup_window = \"0s\"\n".to_owned(),
            "scheduler.dedup_window",
        ),
        // A hook with nothing to run, named by its place.
        (
            "[[hooks.pre_tool_use]]\ncommand = \"true\"\n[[hooks.pre_tool_use]]\ncommand = \"  \"\n"
                .to_owned(),
            "hooks.pre_tool_use[1].command",
        ),
    ] {
        let (key, message) = invalid_key(&text);
        assert_eq!(key, expected, "{text}");
        assert!(message.contains("default"), "{text}: {message}");
    }
    // The smallest values that make sense are taken.
    parse("[agent]\nmax_tokens = 1\ncontext_tokens = 1024\n[llm]\nstream_idle_timeout = \"1ms\"\n")
        .unwrap();
}

/// `api_key_env` holding a pasted key instead of a variable's name is
/// refused without the value in the message (which is printed and logged).
#[test]
fn an_api_key_env_that_is_not_a_variable_name_is_refused_without_echoing_it() {
    let (key, message) = invalid_key(
        "[[llm.sources]]\nname = \"o\"\nprotocol = \"openai\"\nbase_url = \"http://x\"\n\
         model = \"m\"\napi_key_env = \"sk-live-pasted-secret\"\n",
    );
    assert_eq!(key, "llm.sources[0].api_key_env");
    assert!(!message.contains("pasted"), "{message}");
    assert!(message.contains("OPENAI_API_KEY"), "{message}");
}

/// Names and ids the rest of the program refuses later (the store takes
/// agent names of 1 to 128 bytes; device ids are 1 to 64 letters, digits,
/// `.`, `_`, `-`) are refused when the configuration is read.
#[test]
fn agent_names_and_device_ids_the_program_cannot_use_are_refused() {
    // "main " was a second agent beside `main`, which kept every tool
    // the entry meant to take away from it.
    for name in ["main ", " main", "ma\\tin", "tab\\t"] {
        let (key, message) = invalid_key(&format!(
            "[[agents]]\nname = \"{name}\"\ndeny_tools = [\"cmd_run\"]\n"
        ));
        assert_eq!(key, "agents[0].name", "{name}: {message}");
        assert!(
            message.contains("space") && message.contains("control"),
            "{name}: {message}"
        );
    }
    let long = "a".repeat(129);
    let (key, message) = invalid_key(&format!("[[agents]]\nname = \"{long}\"\n"));
    assert_eq!(key, "agents[0].name");
    assert!(message.contains("128"), "{message}");
    parse(&format!("[[agents]]\nname = \"{}\"\n", "a".repeat(128))).unwrap();
    let (key, message) =
        invalid_key("[[agents]]\nname = \"a\"\ndevices = [\"kitchen-pi\", \"bad id\"]\n");
    assert_eq!(key, "agents[0].devices[1]");
    assert!(message.contains("\"bad id\""), "{message}");
}

/// A `[runtime]` thread count: `max` and a few values inside are read,
/// 0 and values above `max` are refused naming the key and the range, and
/// the key misspelt (a letter short) is refused by name.
fn thread_count_is_bounded(key: &str, max: u16, read: fn(&Config) -> u16) {
    for bad in [0, u32::from(max) + 1, 10 * u32::from(max)] {
        let (found, message) = invalid_key(&format!("[runtime]\n{key} = {bad}\n"));
        assert_eq!(found, format!("runtime.{key}"), "{bad}");
        assert!(
            message.contains(&format!("between 1 and {max}")),
            "{bad}: {message}"
        );
    }
    for good in [1, 2, max] {
        let config = parse(&format!("[runtime]\n{key} = {good}\n")).unwrap();
        assert_eq!(read(&config), good, "{key}");
    }
    let misspelt = &key[..key.len() - 1];
    let (_, _, message) = parse_error(&format!("[runtime]\n{misspelt} = 2\n"));
    assert!(message.contains(key), "{message}");
}

#[test]
fn blocking_threads_default_to_8_and_outside_1_to_512_are_refused_by_name() {
    assert_eq!(parse("").unwrap().runtime.blocking_threads, 8);
    thread_count_is_bounded("blocking_threads", 512, |c| c.runtime.blocking_threads);
}

#[test]
fn worker_threads_outside_1_to_256_is_refused_by_name() {
    thread_count_is_bounded("worker_threads", 256, |c| c.runtime.worker_threads);
}

#[test]
fn serve_threads_default_to_2_and_outside_1_to_64_are_refused_by_name() {
    assert_eq!(parse("").unwrap().runtime.serve_threads, 2);
    thread_count_is_bounded("serve_threads", 64, |c| c.runtime.serve_threads);
}

#[test]
fn an_agent_without_a_name_is_a_parse_error() {
    let (line, _, message) = parse_error("[[agents]]\ndevices = [\"x\"]\n");
    assert!(message.contains("missing field `name`"), "{message}");
    assert_eq!(line, 1);
}

// ------------------------------------------------------------------ paths

#[test]
fn paths_follow_flag_then_environment_then_default() {
    let env = env_of(&[
        ("HOMEAGENT_CONFIG", "/env/c.toml"),
        ("HOMEAGENT_DATA_DIR", "/env/data"),
    ]);
    let flags =
        ConfigPaths::resolve(Some("/flag/c.toml".into()), Some("/flag/data".into()), &env).unwrap();
    assert_eq!(
        flags,
        ConfigPaths {
            config_file: "/flag/c.toml".into(),
            config_origin: PathOrigin::Flag,
            data_dir: "/flag/data".into(),
            data_dir_origin: PathOrigin::Flag,
        }
    );

    let from_env = ConfigPaths::resolve(None, None, &env).unwrap();
    assert_eq!(
        from_env,
        ConfigPaths {
            config_file: "/env/c.toml".into(),
            config_origin: PathOrigin::Env,
            data_dir: "/env/data".into(),
            data_dir_origin: PathOrigin::Env,
        }
    );

    // The config file defaults to the data dir chosen by the flag.
    let only_data_env = env_of(&[
        ("HOMEAGENT_DATA_DIR", "/env/data"),
        ("HOMEAGENT_CONFIG", ""),
    ]);
    let mixed = ConfigPaths::resolve(None, Some("/flag/data".into()), &only_data_env).unwrap();
    assert_eq!(
        mixed.config_file,
        PathBuf::from("/flag/data/homeagent.toml")
    );
    assert_eq!(mixed.config_origin, PathOrigin::Default);

    let defaults = ConfigPaths::resolve(None, None, &no_env()).unwrap();
    let platform = dirs::data_dir().unwrap().join("homeagent");
    assert_eq!(defaults.data_dir, platform);
    assert_eq!(defaults.data_dir_origin, PathOrigin::Default);
    assert_eq!(defaults.config_file, platform.join("homeagent.toml"));
}

fn paths_in(dir: &Path, config_origin: PathOrigin) -> ConfigPaths {
    ConfigPaths {
        config_file: dir.join("homeagent.toml"),
        config_origin,
        data_dir: dir.join("data"),
        data_dir_origin: PathOrigin::Flag,
    }
}

#[test]
fn a_missing_file_at_the_default_location_means_defaults() {
    let dir = TempDir::new("missing-default");
    let loaded = Config::load(&paths_in(&dir.0, PathOrigin::Default), &no_env()).unwrap();
    assert!(!loaded.file_found);
    assert_eq!(loaded.config, Config::default());
    assert_eq!(loaded.files_root(), dir.0.join("data").join("files"));
    assert_eq!(loaded.adapter_dir(), dir.0.join("data").join("adapters"));
}

#[test]
fn a_missing_file_that_was_named_is_an_error() {
    let dir = TempDir::new("missing-named");
    for origin in [PathOrigin::Flag, PathOrigin::Env] {
        match Config::load(&paths_in(&dir.0, origin), &no_env()) {
            Err(ConfigError::Read { path, source }) => {
                assert_eq!(path, dir.0.join("homeagent.toml"));
                assert_eq!(source.kind(), std::io::ErrorKind::NotFound);
            }
            other => panic!("expected a read error, got {other:?}"),
        }
    }
}

#[test]
fn a_real_file_is_read_and_relative_paths_follow_it() {
    let dir = TempDir::new("real");
    std::fs::write(
        dir.0.join("homeagent.toml"),
        "[tools.files]\nroot = \"shared\"\n[llm]\nadapter_dir = \"/abs/adapters\"\nca_certificates = [\"ca.pem\"]\n",
    )
    .unwrap();
    let loaded = Config::load(&paths_in(&dir.0, PathOrigin::Flag), &no_env()).unwrap();
    assert!(loaded.file_found);
    assert_eq!(loaded.files_root(), dir.0.join("shared"));
    assert_eq!(loaded.adapter_dir(), PathBuf::from("/abs/adapters"));
    assert_eq!(loaded.ca_certificates(), vec![dir.0.join("ca.pem")]);
}

#[test]
fn a_parse_error_in_a_file_names_the_file() {
    let dir = TempDir::new("bad-file");
    let file = dir.0.join("homeagent.toml");
    std::fs::write(&file, "[tools]\nparalell = true\n").unwrap();
    let error = Config::load(&paths_in(&dir.0, PathOrigin::Flag), &no_env()).unwrap_err();
    assert!(matches!(&error, ConfigError::Parse { path, line: 2, column: 1, .. } if *path == file));
    let shown = error.to_string();
    assert!(
        shown.starts_with(&format!("{}:2:1: unknown field `paralell`", file.display())),
        "{shown}"
    );
}

// ---------------------------------------------------------------- secrets

fn load_text(dir: &TempDir, text: &str, env: &impl Fn(&str) -> Option<String>) -> LoadedConfig {
    std::fs::write(dir.0.join("homeagent.toml"), text).unwrap();
    Config::load(&paths_in(&dir.0, PathOrigin::Flag), env).unwrap()
}

#[test]
fn secrets_come_from_the_environment_first_and_are_never_shown() {
    let dir = TempDir::new("secrets");
    let file = "[server]\napi_key = \"file-key-123\"\ndevice_token = \"file-token-456\"\n";

    let loaded = load_text(&dir, file, &no_env());
    assert_eq!(
        loaded.secrets.api_key.as_ref().unwrap().expose(),
        "file-key-123"
    );
    assert_eq!(
        loaded.secrets.device_token.as_ref().unwrap().expose(),
        "file-token-456"
    );

    let env = env_of(&[
        ("HOMEAGENT_API_KEY", "env-key-789"),
        ("HOMEAGENT_DEVICE_TOKEN", "env-token-000"),
    ]);
    let loaded = load_text(&dir, file, &env);
    assert_eq!(
        loaded.secrets.api_key.as_ref().unwrap().expose(),
        "env-key-789"
    );
    assert_eq!(
        loaded.secrets.device_token.as_ref().unwrap().expose(),
        "env-token-000"
    );
    for shown in [
        format!("{loaded:?}"),
        describe(&loaded),
        serde_json::to_string(&loaded.config).unwrap(),
    ] {
        for secret in [
            "file-key-123",
            "file-token-456",
            "env-key-789",
            "env-token-000",
        ] {
            assert!(!shown.contains(secret), "{secret} shown in {shown}");
        }
    }
    assert!(describe(&loaded).contains("api key: set"));

    // An empty variable does not blank out the file's value.
    let loaded = load_text(&dir, file, &env_of(&[("HOMEAGENT_API_KEY", "")]));
    assert_eq!(
        loaded.secrets.api_key.as_ref().unwrap().expose(),
        "file-key-123"
    );

    let loaded = load_text(&dir, "", &no_env());
    assert_eq!(loaded.secrets.api_key, None);
    assert!(describe(&loaded).contains("api key: not set"));
    assert!(describe(&loaded).contains("device token: not set"));
    // The demo tools are off in the config, but the offline demo model
    // (no source configured) registers them: the line says so, as the
    // tool list below it shows them.
    assert!(
        describe(&loaded)
            .contains("demo tools: off (on anyway while the offline demo model answers)"),
        "{}",
        describe(&loaded)
    );
}

/// `[[server.devices]]`: each device's own token comes from its variable
/// or the file, is never shown, and a declaration that cannot work is an
/// error naming its key.
#[test]
fn declared_devices_have_their_own_tokens_and_bad_declarations_fail() {
    let dir = TempDir::new("devices");
    let file = "[[server.devices]]\nid = \"nas\"\ntoken_env = \"NAS_TOKEN\"\n\
                [[server.devices]]\nid = \"pi\"\ntoken = \"pi-file-token\"\n";
    let loaded = load_text(&dir, file, &env_of(&[("NAS_TOKEN", "nas-env-token")]));
    let tokens: Vec<(&str, Option<&str>)> = loaded
        .secrets
        .device_tokens
        .iter()
        .map(|d| (d.id.as_str(), d.token.as_ref().map(|t| t.expose())))
        .collect();
    assert_eq!(
        tokens,
        [
            ("nas", Some("nas-env-token")),
            ("pi", Some("pi-file-token"))
        ]
    );
    for shown in [format!("{loaded:?}"), describe(&loaded)] {
        for secret in ["nas-env-token", "pi-file-token"] {
            assert!(!shown.contains(secret), "{secret} shown in {shown}");
        }
    }
    // An unset variable is found at load; `serve` refuses to start on it.
    let unset = load_text(&dir, file, &no_env());
    assert_eq!(unset.secrets.device_tokens[0].token, None);
    assert!(unset.secrets.device_tokens[0].from.contains("$NAS_TOKEN"));

    // Ids are checked with the other rules; the token fields when the
    // secrets are resolved (the commented example, all switched on, shows
    // both token and token_env, and still parses).
    let checked = [
        ("id = \"no spaces\"\ntoken = \"t\"", "server.devices[0].id"),
        (
            "id = \"nas\"\ntoken = \"t\"\n[[server.devices]]\nid = \"nas\"\ntoken = \"u\"",
            "server.devices[1].id",
        ),
    ];
    for (entry, expected_key) in checked {
        let (key, message) = invalid_key(&format!("[[server.devices]]\n{entry}\n"));
        assert_eq!(key, expected_key, "{entry}: {message}");
    }
    let resolved = [
        ("id = \"nas\"", "server.devices[0].token_env"),
        (
            "id = \"nas\"\ntoken = \"t\"\ntoken_env = \"V\"",
            "server.devices[0].token",
        ),
        ("id = \"nas\"\ntoken = \"\"", "server.devices[0].token"),
        (
            "id = \"nas\"\ntoken_env = \" \"",
            "server.devices[0].token_env",
        ),
        ("id = \"nas\"\ntoken = \"  \"", "server.devices[0].token"),
        // A token pasted where its variable's name goes.
        (
            "id = \"nas\"\ntoken_env = \"k1tch3n-S3cret\"",
            "server.devices[0].token_env",
        ),
        // One token for two devices: each could bind as the other.
        (
            "id = \"nas\"\ntoken = \"same\"\n[[server.devices]]\nid = \"pi\"\ntoken = \"same\"",
            "server.devices[1].token",
        ),
        // A device's own token that is also the API key (or the shared
        // device token) would bind as any device the other binds as.
        (
            "id = \"nas\"\ntoken = \"file-key-123\"\n[server]\napi_key = \"file-key-123\"",
            "server.devices[0].token",
        ),
    ];
    for (entry, expected_key) in resolved {
        std::fs::write(
            dir.0.join("homeagent.toml"),
            format!("[[server.devices]]\n{entry}\n"),
        )
        .unwrap();
        match Config::load(&paths_in(&dir.0, PathOrigin::Flag), &no_env()) {
            Err(ConfigError::Invalid { key, message, .. }) => {
                assert_eq!(key, expected_key, "{entry}");
                assert!(!message.contains("S3cret"), "the token shown: {message}");
            }
            other => panic!("{entry}: expected an invalid-config error, got {other:?}"),
        }
    }
}

// --------------------------------------------------------------- describe

#[test]
fn describe_reports_sources_agents_and_tools_without_keys() {
    let dir = TempDir::new("describe");
    let env = env_of(&[("OPENAI_API_KEY", "sk-secret-value")]);
    // FULL, with a second key variable (unset) and the default files root.
    let text = FULL
        .replace(
            "adapter = \"openai\"",
            "adapter = \"openai\"\napi_key_env = \"SCRIPTED_KEY\"",
        )
        .replace("[tools.files]\nroot = \"/srv/files\"\n", "")
        // Credentials in a URL are shown no more than keys.
        .replace(
            "\"http://127.0.0.1:9100\"",
            "\"http://me:pwsecret@127.0.0.1:9100?key=querysecret\"",
        );
    let loaded = load_text(&dir, &text, &env);
    let report = describe(&loaded);
    assert!(!report.contains("secret"), "{report}");
    let expected_lines = [
        format!(
            "config file: {} (from --config)",
            dir.0.join("homeagent.toml").display()
        ),
        "  local protocol=openai model=mock base_url=http://127.0.0.1:9099/v1 priority=10"
            .to_owned(),
        "    key: $OPENAI_API_KEY (set)".to_owned(),
        "    max_concurrent: 4".to_owned(),
        "  scripted protocol=lua model=m base_url=http://127.0.0.1:9100 priority=0".to_owned(),
        "    key: $SCRIPTED_KEY (NOT SET: this source will be disabled)".to_owned(),
        "    adapter: openai".to_owned(),
        "  main: tools all, denied none, devices none".to_owned(),
        "  kitchen: tools files_read, denied cmd_run, devices kitchen-light".to_owned(),
        "  parallel batches: off".to_owned(),
        "  demo tools: on".to_owned(),
        "  require approval: files_write".to_owned(),
        "  cmd_run: off".to_owned(),
        format!(
            "  files root: {}",
            dir.0.join("data").join("files").display()
        ),
        "scheduler: 2 concurrent sessions, queue 5 per session, dedup 1500ms".to_owned(),
        "runtime: 3 worker thread(s), at most 8 for blocking work; serve on 4 thread(s)".to_owned(),
        "server: listen 0.0.0.0:9000".to_owned(),
        "  api key: set ($HOMEAGENT_API_KEY or server.api_key)".to_owned(),
    ];
    for line in &expected_lines {
        assert!(
            report.lines().any(|l| l == line),
            "missing line {line:?} in:\n{report}"
        );
    }
    // Sources in the order they are tried: local (priority 10) first.
    let local = report.find("  local ").unwrap();
    let scripted = report.find("  scripted ").unwrap();
    assert!(local < scripted);
    assert!(!report.contains("sk-secret-value"));
    assert!(!report.contains("file-key"));
}

// ---------------------------------------------------------------- example

/// Every key path the schema defines (`tools.cmd_run.timeout`,
/// `llm.sources.name`), walked independently of the generator.
fn schema_paths(schema: &serde_json::Value) -> Vec<String> {
    fn walk(
        node: &serde_json::Value,
        defs: &serde_json::Value,
        prefix: &str,
        out: &mut Vec<String>,
    ) {
        let node = match node.get("$ref").and_then(|r| r.as_str()) {
            Some(r) => &defs[r.trim_start_matches("#/$defs/")],
            None => node,
        };
        let node = match node.get("items") {
            Some(items) if node.get("type") == Some(&serde_json::json!("array")) => {
                match items.get("$ref").and_then(|r| r.as_str()) {
                    Some(r) => &defs[r.trim_start_matches("#/$defs/")],
                    None => items,
                }
            }
            _ => node,
        };
        if let Some(props) = node.get("properties").and_then(|p| p.as_object()) {
            for (key, value) in props {
                let path = if prefix.is_empty() {
                    key.clone()
                } else {
                    format!("{prefix}.{key}")
                };
                out.push(path.clone());
                walk(value, defs, &path, out);
            }
        }
    }
    let mut out = Vec::new();
    walk(schema, &schema["$defs"], "", &mut out);
    out
}

/// Key paths present in a parsed TOML document (array entries flattened).
fn toml_paths(value: &toml::Value, prefix: &str, out: &mut Vec<String>) {
    match value {
        toml::Value::Table(table) => {
            for (key, value) in table {
                let path = if prefix.is_empty() {
                    key.clone()
                } else {
                    format!("{prefix}.{key}")
                };
                out.push(path.clone());
                toml_paths(value, &path, out);
            }
        }
        toml::Value::Array(items) => {
            for item in items {
                if item.is_table() {
                    toml_paths(item, prefix, out);
                }
            }
        }
        _ => {}
    }
}

/// The example with its commented-out `# key = value` lines and `# [[...]]`
/// entries switched on.
fn uncommented(example: &str) -> String {
    example
        .lines()
        .map(|line| match line.strip_prefix("# ") {
            Some(rest)
                if rest.starts_with('[')
                    || rest.split_once(" = ").is_some_and(|(key, _)| {
                        !key.is_empty() && key.chars().all(|c| c.is_ascii_lowercase() || c == '_')
                    }) =>
            {
                rest
            }
            _ => line,
        })
        .collect::<Vec<_>>()
        .join("\n")
}

#[test]
fn the_example_parses_and_shows_every_key() {
    let example = example_toml();
    // Copied as it is, the example is the defaults: its example entries
    // (a demo source, an MCP server, hooks, a device) are commented out,
    // or they would start, shadow the environment's model, or deny tools.
    let config = parse(&example).unwrap_or_else(|e| panic!("{e}\n{example}"));
    assert_eq!(config, Config::default(), "{example}");
    assert!(example.contains("\n# [[llm.sources]]\n"), "{example}");
    assert!(example.contains("\n# name = \"demo\"\n"), "{example}");
    assert!(example.contains("\n# [[mcp.servers]]\n"), "{example}");

    // Every key of the source on: `adapter` with it, which only a Lua
    // source takes (on another it is refused, not ignored).
    let all_on = uncommented(&example).replace("protocol = \"demo\"", "protocol = \"lua\"");
    assert_ne!(all_on, example, "no commented-out keys found");
    let config = parse(&all_on).unwrap_or_else(|e| panic!("{e}\n{all_on}"));
    assert_eq!(config.scheduler.dedup_window.unwrap().to_string(), "10s");
    // Switched on, each entry is the example shown.
    assert_eq!(config.llm.sources.len(), 1);
    assert_eq!(config.llm.sources[0].name, "demo");
    assert_eq!(config.agents.len(), 1);
    assert_eq!(config.agents[0].name, "main");
    assert_eq!(config.mcp.servers.len(), 1);
    assert_eq!(config.mcp.servers[0].name, "git");
    assert_eq!(config.server.devices.len(), 1);
    assert_eq!(config.hooks.pre_tool_use.len(), 1);
    assert_eq!(config.hooks.post_tool_use.len(), 1);

    let document: toml::Value = toml::from_str(&all_on).unwrap();
    let mut present = Vec::new();
    toml_paths(&document, "", &mut present);
    let wanted = schema_paths(&homeagent_agent::config::config_schema());
    // Spot-check the walker itself against keys written out by hand.
    for key in [
        "agent.max_tool_turns",
        "scheduler.dedup_window",
        "llm.sources.protocol",
        "llm.sources.adapter",
        "tools.cmd_run.allow_writes",
        "tools.files.root",
        "agents.devices",
        "server.device_token",
    ] {
        assert!(wanted.iter().any(|w| w == key), "schema walk misses {key}");
    }
    let missing: Vec<&String> = wanted.iter().filter(|w| !present.contains(w)).collect();
    assert!(
        missing.is_empty(),
        "not in the example: {missing:?}\n{example}"
    );
}

#[test]
fn the_example_documents_keys_and_legal_values() {
    let example = example_toml();
    assert!(example.contains("[tools.cmd_run]\n"));
    assert!(example.contains("[[llm.sources]]\n"));
    assert!(example.contains("[[agents]]\n"));
    assert!(example.contains("\ntimeout = \"30s\"\n"));
    assert!(example.contains("\nlisten = \"127.0.0.1:8080\"\n"));
    assert!(example.contains("\n# api_key = \"change-me\"\n"));
    assert!(example.contains("openai | anthropic | gemini | ollama | lua | demo"));
    // A doc comment of the types is the comment above its key.
    assert!(example.contains(
        "# Register the demo tools demo_sleep, demo_echo and demo_note.\ndemo = false\n"
    ));
}

const DOC_HEADER: &str = "\
# Configuration

HomeAgent reads one TOML file: `--config PATH`, else `$HOMEAGENT_CONFIG`, else
`<data_dir>/homeagent.toml`, where the data directory is `--data-dir`, else
`$HOMEAGENT_DATA_DIR`, else the platform's data directory + `homeagent`. A
missing file at the default location means the defaults; a file named by
`--config` or `$HOMEAGENT_CONFIG` must exist. Unknown keys are errors that list
the allowed keys. Secrets come from the environment: `HOMEAGENT_API_KEY` and
`HOMEAGENT_DEVICE_TOKEN` win over `server.api_key` and `server.device_token`,
and each model source names the variable holding its key (`api_key_env`).

`homeagent config check` shows what a config resolves to (secrets as set/not
set); `homeagent config example` prints the example below. This file is
generated from the same definitions the parser uses: regenerate it with
`HOMEAGENT_UPDATE_DOCS=1 cargo test -p homeagent-agent --test it config::`.

";

#[test]
fn docs_config_md_is_the_generated_example() {
    let expected = format!("{DOC_HEADER}```toml\n{}```\n", example_toml());
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/CONFIG.md");
    if std::env::var_os("HOMEAGENT_UPDATE_DOCS").is_some() {
        std::fs::write(&path, &expected).unwrap();
    }
    let actual = std::fs::read_to_string(&path).unwrap_or_default();
    assert!(
        actual == expected,
        "docs/CONFIG.md is out of date with the config types; regenerate it with \
         `HOMEAGENT_UPDATE_DOCS=1 cargo test -p homeagent-agent --test it config::`"
    );
}

#[test]
fn store_sync_is_full_unless_set_and_a_typo_lists_the_forms() {
    use homeagent_agent::config::StoreSync;
    assert_eq!(parse("").unwrap().store.sync, StoreSync::Full);
    assert_eq!(
        parse("[store]\nsync = \"normal\"\n").unwrap().store.sync,
        StoreSync::Normal
    );
    let (line, _, message) = parse_error("[store]\nsync = \"fast\"\n");
    assert!(message.contains("fast"), "{message}");
    assert_lists(&message, &["full", "normal"]);
    assert_eq!(line, 2);
    let (_, _, message) = parse_error("[store]\nsnyc = \"full\"\n");
    assert_lists(&message, &["sync"]);
}

/// An MCP server's `env` often holds a key (`GITHUB_TOKEN`): the config's
/// `Debug` (in logs, panics, test failures) shows its names only.
#[test]
fn debug_output_of_the_config_shows_no_mcp_env_values() {
    let config = parse(
        "[[mcp.servers]]\nname = \"gh\"\ncommand = \"/usr/bin/github-mcp\"\nenv = { GITHUB_TOKEN = \"ghp_never_shown\" }\n",
    )
    .unwrap();
    let shown = format!("{config:?}");
    assert!(shown.contains("GITHUB_TOKEN"), "{shown}");
    assert!(!shown.contains("ghp_never_shown"), "{shown}");
}

/// An MCP entry's `Debug` (what a log line of the config would show) keeps
/// the URL's password and query out, as it keeps the token and the env
/// values out.
#[test]
fn an_mcp_entrys_debug_shows_no_secret_of_its_url() {
    let config = parse(
        "[[mcp.servers]]\nname = \"nas\"\nurl = \"https://me:pw@nas:8123/mcp?api_key=SECRET\"\n\
         bearer_token = \"TOKEN\"\n",
    )
    .unwrap();
    let shown = format!("{:?}", config.mcp.servers[0]);
    assert!(shown.contains("\"https://nas:8123/mcp\""), "{shown}");
    for secret in ["pw", "SECRET", "TOKEN"] {
        assert!(!shown.contains(secret), "{secret} in {shown}");
    }
}

/// `llm.request_timeout` bounds one model answer's whole body; 30 minutes
/// unless set, and 0 is refused as every other timeout is.
#[test]
fn the_request_timeout_is_half_an_hour_unless_set_and_never_zero() {
    assert_eq!(
        parse("").unwrap().llm.request_timeout.as_duration(),
        std::time::Duration::from_secs(30 * 60)
    );
    assert_eq!(
        parse("[llm]\nrequest_timeout = \"2h\"\n")
            .unwrap()
            .llm
            .request_timeout
            .as_duration(),
        std::time::Duration::from_secs(2 * 3600)
    );
    let (key, message) = invalid_key("[llm]\nrequest_timeout = \"0s\"\n");
    assert_eq!(key, "llm.request_timeout");
    assert!(message.contains("30m"), "{message}");
}
