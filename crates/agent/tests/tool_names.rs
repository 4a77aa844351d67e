#![allow(clippy::unwrap_used, clippy::expect_used)] // a panic in a test is a test failure

//! Tool names and patterns in the config (`tools.require_approval`, each
//! agent's `allow_tools` and `deny_tools`) must name tools that exist: a
//! typo in a deny list used to deny nothing, silently. MCP tools are known
//! only once their server runs, so `<server>__<tool>` of a configured
//! server is taken on trust.

use crate::common;

use common::TempDir;
use homeagent_agent::config::{Config, ConfigPaths};
use homeagent_agent::{BuildError, BuildOptions, build};

const MCP: &str = "[[mcp.servers]]\nname = \"git\"\ncommand = \"/nonexistent/mcp-server-git\"\n";

fn built(toml: &str) -> Result<(), BuildError> {
    built_with(toml, BuildOptions::default()).map(|_| ())
}

fn built_with(toml: &str, options: BuildOptions) -> Result<homeagent_agent::Agent, BuildError> {
    let dir = TempDir::new("tool-names");
    let config = dir.path().join("homeagent.toml");
    std::fs::write(&config, format!("[tools]\ndemo = true\n{toml}")).unwrap();
    let env = |_: &str| None;
    let paths = ConfigPaths::resolve(Some(config), Some(dir.path().join("data")), &env).unwrap();
    let loaded = Config::load(&paths, &env).unwrap();
    build(&loaded, &env, options)
}

fn unknown(toml: &str) -> (String, String) {
    match built(toml) {
        Err(BuildError::UnknownTool { key, name, .. }) => (key, name),
        other => panic!("{toml}: expected an unknown tool, got {other:?}"),
    }
}

#[tokio::test]
async fn names_and_patterns_that_match_no_tool_fail_the_start() {
    assert_eq!(
        unknown("[[agents]]\nname = \"kid\"\ndeny_tools = [\"cmd-run\"]\n"),
        ("agents[0].deny_tools".to_owned(), "cmd-run".to_owned())
    );
    assert_eq!(
        unknown(
            "[[agents]]\nname = \"main\"\n[[agents]]\nname = \"kid\"\nallow_tools = [\"demo_echo\", \"file_*\"]\n"
        ),
        ("agents[1].allow_tools".to_owned(), "file_*".to_owned())
    );
    assert_eq!(
        unknown(&format!("require_approval = [\"gti__git_commit\"]\n{MCP}")),
        (
            "tools.require_approval".to_owned(),
            "gti__git_commit".to_owned()
        )
    );
}

/// A name under an MCP server's prefix must be one the model could see:
/// the gate compares names exactly, and an exposed name holds only
/// `[A-Za-z0-9_-]` and at most 64 characters, so `git__git.push` (the
/// server's own spelling; it is exposed as `git__git_push`) approved or
/// denied nothing.
#[tokio::test]
async fn an_mcp_name_no_tool_can_have_fails_the_start() {
    let long = format!("git__{}", "x".repeat(60));
    for name in ["git__git.push", "git__git push", long.as_str(), "git__é*"] {
        assert_eq!(
            unknown(&format!("require_approval = [\"{name}\"]\n{MCP}")),
            ("tools.require_approval".to_owned(), name.to_owned()),
            "{name}"
        );
    }
    built(&format!(
        "require_approval = [\"git__git_push\", \"git__git-*\"]\n{MCP}"
    ))
    .unwrap();
}

#[tokio::test]
async fn built_in_and_mcp_names_and_patterns_are_accepted() {
    built("[[agents]]\nname = \"kid\"\nallow_tools = [\"files_*\", \"demo_echo\", \"*\"]\ndeny_tools = [\"cmd_run\"]\n")
        .unwrap();
    built(&format!(
        "[[agents]]\nname = \"kid\"\ndeny_tools = [\"git__*\", \"git__git_push\", \"gi*\"]\n{MCP}"
    ))
    .unwrap();
}

/// `require_approval` may name an MCP tool: third-party tools that write
/// are the ones most worth a person's yes.
#[tokio::test]
async fn an_mcp_tool_may_require_approval() {
    built(&format!(
        "require_approval = [\"git__git_commit\", \"files_write\"]\n{MCP}"
    ))
    .unwrap();
}

/// A server's name prefixes its tools' names, which providers restrict
/// (Gemini refuses a name that starts with a digit, and then the whole
/// request): a name that cannot serve fails the start, naming the server.
#[tokio::test]
async fn an_mcp_server_name_that_cannot_prefix_tool_names_fails_the_start() {
    for name in ["1password", "my server"] {
        let toml = format!("[[mcp.servers]]\nname = \"{name}\"\ncommand = \"/nonexistent/srv\"\n");
        match built(&toml) {
            Err(BuildError::Mcp(homeagent_mcp::SpecError::BadName(named))) => {
                assert_eq!(named, name);
            }
            other => panic!("{name}: expected BadName, got {other:?}"),
        }
    }
}

/// `max_timeout` below `timeout` is a mistake, not a request for less.
#[tokio::test]
async fn an_mcp_max_timeout_below_the_timeout_fails_the_start() {
    let toml = "[[mcp.servers]]\nname = \"git\"\ncommand = \"/nonexistent/srv\"\n\
                timeout = \"30s\"\nmax_timeout = \"10s\"\n";
    match built(toml) {
        Err(BuildError::Mcp(homeagent_mcp::SpecError::MaxTimeoutBelowTimeout(name))) => {
            assert_eq!(name, "git");
        }
        other => panic!("expected MaxTimeoutBelowTimeout, got {other:?}"),
    }
    built(
        "[[mcp.servers]]\nname = \"git\"\ncommand = \"/nonexistent/srv\"\nmax_timeout = \"30s\"\n",
    )
    .unwrap();
}

/// Every mistake the manager would refuse at start (and leave the server
/// out for, logged where nobody looks) fails the build, `config check`
/// included: a repeated name, an empty command, a url without its scheme,
/// a zero timeout (every start would time out).
#[tokio::test]
async fn every_mcp_server_mistake_fails_the_build_naming_the_server() {
    let checking = || BuildOptions {
        start_mcp_servers: false,
        ..BuildOptions::default()
    };
    let server = |name: &str, rest: &str| format!("[[mcp.servers]]\nname = \"{name}\"\n{rest}\n");
    let cases = [
        (
            format!(
                "{}{}",
                server("git", "command = \"/nonexistent/a\""),
                server("git", "command = \"/nonexistent/b\"")
            ),
            "two MCP servers are named `git`",
        ),
        (
            server("git", "command = \"\""),
            "MCP server `git` has an empty command",
        ),
        (
            server("web", "url = \"localhost:8931/mcp\""),
            "MCP server `web` has url `localhost:8931/mcp`",
        ),
        (
            server("git", "command = \"/nonexistent/a\"\ntimeout = \"0s\""),
            "MCP server `git` has timeout 0s",
        ),
    ];
    for (toml, expected) in cases {
        for options in [checking(), BuildOptions::default()] {
            match built_with(&toml, options) {
                Err(BuildError::Mcp(error)) => {
                    assert!(error.to_string().contains(expected), "{toml}: {error}");
                }
                Err(other) => panic!("{toml}: expected an MCP spec error, got {other}"),
                Ok(_) => panic!("{toml}: built"),
            }
        }
    }
}

/// `config check` builds the agent only to check it: with
/// `start_mcp_servers` off the servers' settings are still checked, but
/// none is started (they would be left running, or killed, at exit).
#[tokio::test]
async fn mcp_servers_are_checked_but_not_started_when_asked() {
    let checking = || BuildOptions {
        start_mcp_servers: false,
        ..BuildOptions::default()
    };
    let agent = built_with(MCP, checking()).unwrap();
    assert!(agent.mcp.is_none(), "an MCP server was started");
    let agent = built_with(MCP, BuildOptions::default()).unwrap();
    assert!(agent.mcp.is_some(), "the servers were not started");
    let bad = "[[mcp.servers]]\nname = \"git\"\ncommand = \"/nonexistent/srv\"\n\
               timeout = \"30s\"\nmax_timeout = \"10s\"\n";
    assert!(matches!(
        built_with(bad, checking()),
        Err(BuildError::Mcp(
            homeagent_mcp::SpecError::MaxTimeoutBelowTimeout(_)
        ))
    ));
    assert!(matches!(
        built_with(
            "[[mcp.servers]]\nname = \"1x\"\ncommand = \"/nonexistent/srv\"\n",
            checking()
        ),
        Err(BuildError::Mcp(homeagent_mcp::SpecError::BadName(_)))
    ));
}

fn hook(kind: &str, matcher: &str) -> String {
    format!("[[hooks.{kind}]]\nmatcher = \"{matcher}\"\ncommand = \"true\"\n")
}

/// A hook whose matcher matches no tool never runs: a matcher copied from
/// another agent's config (`Bash`, `Edit|Write`) or a typo (`cmd-run`)
/// used to be accepted and do nothing.
#[tokio::test]
async fn a_hook_matcher_that_matches_no_tool_fails_the_start() {
    for (toml, key, matcher) in [
        (
            hook("pre_tool_use", "Bash"),
            "hooks.pre_tool_use[0].matcher",
            "Bash",
        ),
        (
            format!(
                "{}{}",
                hook("post_tool_use", "cmd_run"),
                hook("post_tool_use", "Edit|Write")
            ),
            "hooks.post_tool_use[1].matcher",
            "Edit|Write",
        ),
    ] {
        match built(&toml) {
            Err(BuildError::HookMatchesNoTool {
                key: k, matcher: m, ..
            }) => assert_eq!((k.as_str(), m.as_str()), (key, matcher)),
            other => panic!("{toml}: expected a hook matching nothing, got {other:?}"),
        }
    }
    let message = built(&hook("pre_tool_use", "cmd-run"))
        .unwrap_err()
        .to_string();
    assert!(
        message.contains("cmd_run"),
        "the known tools are listed: {message}"
    );

    // Every-tool forms, built-in names and patterns, and MCP tools (known
    // only once their server runs) are accepted.
    for matcher in [
        "",
        "*",
        ".*",
        "cmd_run",
        "files_read|files_write",
        "files_.*",
    ] {
        built(&hook("pre_tool_use", matcher)).unwrap();
    }
    for matcher in ["git__.*", "git__git_commit", ".*__commit"] {
        built(&format!("{}{MCP}", hook("pre_tool_use", matcher))).unwrap();
    }
}

/// The same config serves `run`, `chat` and `serve`, but only `serve`
/// registers the device tools (and only an enabled `cmd_run` registers
/// that one): a name of a tool HomeAgent has, which this start does not
/// register, is not a typo and must not fail `run` or `config check`.
#[tokio::test]
async fn tools_another_mode_registers_may_be_named_in_every_mode() {
    let without_cmd_run = "[tools.cmd_run]\nenabled = false\n";
    for toml in [
        hook("pre_tool_use", "device_cmd_run"),
        hook("post_tool_use", "cmd_run|device_.*"),
        "require_approval = [\"device_cmd_run\", \"cmd_run\"]\n".to_owned(),
        "[[agents]]\nname = \"kid\"\nallow_tools = [\"device_*\", \"device_list\"]\n".to_owned(),
    ] {
        let agent = built_with(&format!("{toml}{without_cmd_run}"), BuildOptions::default());
        let agent = agent.unwrap_or_else(|e| panic!("{toml}: {e}"));
        assert!(
            agent.devices.is_none(),
            "this start registers no device tools"
        );
    }
    // A near miss of a tool no mode registers is still a typo.
    assert_eq!(
        unknown("require_approval = [\"device_cmd\"]\n"),
        ("tools.require_approval".to_owned(), "device_cmd".to_owned())
    );
}

/// A configured cmd_run program that is not on the PATH commands run with
/// is named at start, not found out call by call as "cannot start".
#[tokio::test]
async fn a_cmd_run_program_missing_from_the_child_path_is_a_notice() {
    let agent = built_with(
        "[tools.cmd_run]\nenabled = true\nallowlist = [\"ls\", \"no-such-program-here\"]\n",
        BuildOptions::default(),
    )
    .unwrap();
    let named: Vec<&String> = agent
        .notices
        .iter()
        .filter(|n| n.contains("tools.cmd_run.allowlist names"))
        .collect();
    assert_eq!(named.len(), 1, "{:?}", agent.notices);
    assert!(named[0].contains("`no-such-program-here`"), "{}", named[0]);
}

/// `tools.cmd_run.timeout` may be raised past the five-minute cap only by
/// raising the cap, which is a key of its own; the refusal names both.
#[tokio::test]
async fn a_cmd_run_timeout_past_its_cap_names_the_key_that_raises_it() {
    let error = built("[tools.cmd_run]\ntimeout = \"10m\"\n").unwrap_err();
    assert_eq!(
        error.to_string(),
        "cannot set up cmd_run: tools.cmd_run.timeout (600s) is longer than \
         tools.cmd_run.max_timeout (300s); raise max_timeout or lower timeout"
    );
    let agent = built_with(
        "[tools.cmd_run]\ntimeout = \"10m\"\nmax_timeout = \"15m\"\n",
        BuildOptions::default(),
    );
    assert!(agent.is_ok(), "{:?}", agent.err());
}

/// `tools.files.root` set to the data directory is refused on a first
/// run too, when neither exists yet (the data directory named through a
/// symlink here): the root would be made, and the store inside it.
#[tokio::test]
async fn a_files_root_that_is_the_data_directory_is_refused_on_a_first_run() {
    let dir = TempDir::new("root-is-data");
    let config = dir.path().join("homeagent.toml");
    let data = dir.path().join("state");
    std::fs::write(
        &config,
        format!("[tools.files]\nroot = \"{}\"\n", data.display()),
    )
    .unwrap();
    std::os::unix::fs::symlink(dir.path(), dir.path().join("here")).unwrap();
    let env = |_: &str| None;
    let paths =
        ConfigPaths::resolve(Some(config), Some(dir.path().join("here/state")), &env).unwrap();
    let loaded = Config::load(&paths, &env).unwrap();
    let built = build(&loaded, &env, BuildOptions::default());
    assert!(
        matches!(&built, Err(BuildError::FilesRootIsDataDir { .. })),
        "{:?}",
        built.err()
    );
    assert!(!data.join("homeagent.db").exists());
}

/// A root that names the data directory through a `..` after a directory
/// that does not exist yet (`<data>/x/..`) is the data directory too: the
/// root is made (`x` with it), and the store, the sequences and the
/// adapters would be the files tools' to read and write.
#[tokio::test]
async fn a_files_root_that_climbs_back_into_the_data_directory_is_refused() {
    let dir = TempDir::new("root-climbs-back");
    let data = dir.path().join("state");
    std::fs::create_dir_all(&data).unwrap();
    let config = data.join("homeagent.toml");
    std::fs::write(&config, "[tools.files]\nroot = \"x/..\"\n").unwrap();
    let env = |_: &str| None;
    let paths = ConfigPaths::resolve(Some(config), Some(data.clone()), &env).unwrap();
    let loaded = Config::load(&paths, &env).unwrap();
    let built = build(&loaded, &env, BuildOptions::default());
    assert!(
        matches!(&built, Err(BuildError::FilesRootIsDataDir { .. })),
        "{:?}",
        built.err()
    );
}

/// The system prompt and the tool definitions go out with every request
/// and come out of `agent.context_tokens` before any history: a budget
/// they take most of leaves a conversation of one turn, which nothing
/// said. The start says so, naming the agent and the numbers; a budget
/// they leave room in says nothing.
#[tokio::test]
async fn a_context_budget_the_tools_take_most_of_is_a_notice() {
    let tight = built_with("[agent]\ncontext_tokens = 1024\n", BuildOptions::default()).unwrap();
    let named: Vec<&String> = tight
        .notices
        .iter()
        .filter(|n| n.contains("agent.context_tokens"))
        .collect();
    assert_eq!(named.len(), 1, "{:?}", tight.notices);
    let reserved = tight.runtime.reserved_tokens("main");
    assert!(reserved > 512, "{reserved}");
    assert!(
        named[0].contains("`main`")
            && named[0].contains(&format!("about {reserved} of agent.context_tokens = 1024")),
        "{}",
        named[0]
    );
    let roomy = built_with("", BuildOptions::default()).unwrap();
    assert!(
        !roomy
            .notices
            .iter()
            .any(|n| n.contains("agent.context_tokens")),
        "{:?}",
        roomy.notices
    );
}
