//! The built binary, run as a user runs it.

// The helpers below are test code too: a failure to run the binary should
// fail the test loudly. (Clippy's test allowance covers only `#[test]` fns.)
#![allow(clippy::expect_used, clippy::unwrap_used)]

use std::process::{Command, Output};

use serde_json::Value;

fn homeagent(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_homeagent"))
        .args(args)
        .output()
        .expect("the homeagent binary runs")
}

fn stdout(output: &Output) -> String {
    String::from_utf8(output.stdout.clone()).expect("stdout is UTF-8")
}

/// The demo's section for one input: from its `==> [k/n] user: <input>`
/// header to the next header (or the closing lines).
fn section<'a>(text: &'a str, input: &str) -> &'a str {
    let header = format!("user: {input}\n");
    let start = text
        .find(&header)
        .unwrap_or_else(|| panic!("no section for {input} in:\n{text}"));
    let rest = &text[start..];
    let end = rest[header.len()..]
        .find("\n==> [")
        .or_else(|| rest.find("\nDone:"))
        .map_or(rest.len(), |e| e + header.len());
    &rest[..end]
}

#[test]
fn demo_shows_a_parallel_batch_a_serial_batch_and_a_cut_call() {
    let output = homeagent(&["demo"]);
    let text = stdout(&output);
    assert!(
        output.status.success(),
        "exit {:?}\nstdout:\n{text}\nstderr:\n{}",
        output.status,
        String::from_utf8_lossy(&output.stderr)
    );

    let slow = section(&text, "!slowbatch4");
    assert!(slow.contains("kernel: PARALLEL"), "{slow}");
    assert!(slow.contains("executed=4 "), "{slow}");
    assert!(slow.contains("max_in_flight=4 "), "{slow}");
    assert_eq!(slow.matches(" demo_sleep  ok ").count(), 4, "{slow}");

    let serial = section(&text, "!serialbatch4");
    assert!(
        serial.contains("kernel: SERIAL, reason not_parallel_safe demo_note"),
        "{serial}"
    );
    // The note call carries no tag: four sleeps are counted, not five.
    assert!(serial.contains("executed=4 "), "{serial}");
    assert!(serial.contains("max_in_flight=1 "), "{serial}");

    let cut = section(&text, "!truncate");
    assert!(cut.contains("finish_reason: length"), "{cut}");
    assert!(cut.contains("(not executed)"), "{cut}");
    assert!(cut.contains("was NOT executed"), "{cut}");
    assert!(
        cut.contains("failed: truncated —"),
        "the model is told why: {cut}"
    );
    assert!(cut.contains("executed=0 "), "{cut}");

    let plain = section(&text, "!text");
    assert!(plain.contains("no tool calls"), "{plain}");

    let last = text.trim_end().lines().last().unwrap_or_default();
    assert!(
        last.contains("To connect a real model, set OPENAI_API_KEY"),
        "{last}"
    );
}

/// Runs `homeagent` with a fresh data directory and no provider in the
/// environment (so the offline demo source and its tools are in use).
fn homeagent_fresh(args: &[&str]) -> Output {
    let dir = std::env::temp_dir().join(format!(
        "homeagent-cli-{}-{}",
        std::process::id(),
        args.join("-").replace(['/', ' '], "_")
    ));
    let _ = std::fs::remove_dir_all(&dir);
    let output = Command::new(env!("CARGO_BIN_EXE_homeagent"))
        .arg("--data-dir")
        .arg(&dir)
        .args(args)
        .env_remove("HOMEAGENT_CONFIG")
        .env_remove("OPENAI_API_KEY")
        .env_remove("ANTHROPIC_API_KEY")
        .env_remove("GEMINI_API_KEY")
        .env_remove("OLLAMA_HOST")
        .output()
        .expect("the homeagent binary runs");
    let _ = std::fs::remove_dir_all(&dir);
    output
}

#[test]
fn tools_json_lists_every_tool_with_its_source_and_flags() {
    let output = homeagent_fresh(&["tools", "--json"]);
    assert!(output.status.success());
    // One JSON value on one line, as every `--json` output.
    assert_eq!(stdout(&output).lines().count(), 1, "{}", stdout(&output));
    let tools: Vec<Value> =
        serde_json::from_str(&stdout(&output)).expect("tools --json is a JSON array");
    let flags: Vec<(&str, &str, bool, bool)> = tools
        .iter()
        .map(|t| {
            assert!(
                t["description"].as_str().is_some_and(|d| !d.is_empty()),
                "{t}"
            );
            (
                t["name"].as_str().unwrap(),
                t["source"].as_str().unwrap(),
                t["parallel_safe"].as_bool().unwrap(),
                t["serial"].as_bool().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        flags,
        [
            ("cmd_run", "builtin", true, false),
            ("demo_echo", "demo", true, false),
            ("demo_note", "demo", false, true),
            ("demo_sleep", "demo", true, false),
            ("files_list", "builtin", true, false),
            ("files_read", "builtin", true, false),
            ("files_write", "builtin", false, true),
            ("get_tools", "builtin", true, false),
            ("output_send__console", "output", true, false),
            ("seq_call", "seq", false, false),
            ("seq_create", "seq", false, false),
            ("seq_delete", "seq", false, false),
            ("seq_help", "seq", false, false),
            ("seq_list", "seq", false, false),
            ("seq_run", "seq", false, false),
            ("seq_when_call", "seq", false, false),
        ]
    );
}

#[test]
fn tools_prints_a_table() {
    let output = homeagent_fresh(&["tools"]);
    assert!(output.status.success());
    let text = stdout(&output);
    assert!(text.starts_with("NAME"), "{text}");
    let note = text
        .lines()
        .find(|l| l.starts_with("demo_note"))
        .expect("a demo_note row");
    let cells: Vec<&str> = note.split_whitespace().collect();
    assert_eq!(&cells[..4], ["demo_note", "demo", "no", "yes"], "{note}");
}

#[test]
fn version_and_help_work_everywhere() {
    let version = homeagent(&["--version"]);
    assert!(version.status.success());
    assert_eq!(
        stdout(&version).trim(),
        format!("homeagent {}", env!("CARGO_PKG_VERSION"))
    );
    for args in [
        &["--help"][..],
        &["demo", "--help"],
        &["tools", "--help"],
        &["help", "demo"],
    ] {
        let output = homeagent(args);
        assert!(output.status.success(), "{args:?}");
        assert!(stdout(&output).contains("Usage: homeagent"), "{args:?}");
    }
    // No subcommand: help on stderr and a usage error, not a silent success.
    let bare = homeagent(&[]);
    assert!(!bare.status.success());
    assert!(String::from_utf8_lossy(&bare.stderr).contains("Usage: homeagent"));
}

/// `homeagent --config CONFIG --data-dir DIR config check`.
fn config_check(config: &std::path::Path, dir: &std::path::Path) -> Output {
    Command::new(env!("CARGO_BIN_EXE_homeagent"))
        .arg("--config")
        .arg(config)
        .arg("--data-dir")
        .arg(dir)
        .args(["config", "check"])
        .output()
        .unwrap()
}

#[test]
fn config_example_and_check_work_and_a_typo_is_named() {
    let example = homeagent(&["config", "example"]);
    assert!(example.status.success());
    assert!(stdout(&example).contains("[[llm.sources]]"));
    let check = homeagent_fresh(&["config", "check"]);
    assert!(check.status.success(), "{check:?}");
    let text = stdout(&check);
    assert!(text.contains("config OK"), "{text}");
    assert!(
        text.contains("demo (demo, model demo, in-process)"),
        "{text}"
    );

    let dir = std::env::temp_dir().join(format!("homeagent-cli-typo-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let config = dir.join("bad.toml");
    std::fs::write(&config, "[tools]\nparalell = true\n").unwrap();
    let bad = config_check(&config, &dir);
    assert!(!bad.status.success());
    let err = String::from_utf8(bad.stderr).unwrap();
    assert!(
        err.contains("paralell") && err.contains("parallel") && err.contains("require_approval"),
        "{err}"
    );
    assert_eq!(err.lines().count(), 1, "{err}");

    // MCP servers are checked and listed, not started: the server below
    // would make its marker file the moment it ran.
    let marker = dir.join("started");
    std::fs::write(
        &config,
        format!(
            "[[mcp.servers]]\nname = \"files\"\ncommand = \"touch\"\nargs = [\"{}\"]\n",
            marker.display()
        ),
    )
    .unwrap();
    let checked = config_check(&config, &dir);
    assert!(checked.status.success(), "{checked:?}");
    let text = stdout(&checked);
    assert!(
        text.contains("not started") && text.contains("  files\n"),
        "{text}"
    );
    std::thread::sleep(std::time::Duration::from_millis(300));
    assert!(!marker.exists(), "config check started the MCP server");
    // Their settings are still checked.
    std::fs::write(
        &config,
        "[[mcp.servers]]\nname = \"1files\"\ncommand = \"touch\"\n",
    )
    .unwrap();
    let bad = config_check(&config, &dir);
    assert!(!bad.status.success());
    let err = String::from_utf8(bad.stderr).unwrap();
    assert!(err.contains("1files"), "{err}");

    // A shell in the cmd_run allowlist is refused at start, not ignored.
    std::fs::write(&config, "[tools.cmd_run]\nallowlist = [\"ls\", \"bash\"]\n").unwrap();
    let bad = config_check(&config, &dir);
    assert!(!bad.status.success());
    let err = String::from_utf8(bad.stderr).unwrap();
    assert!(err.contains("bash") && err.contains("cmd_run"), "{err}");
    std::fs::remove_dir_all(&dir).unwrap();
}

/// The one `error:` line says each cause once: an error whose message
/// already ends with its cause's text (`cannot read nope.json: No such
/// file…`) used to be followed by that cause again.
#[test]
fn an_error_line_says_each_cause_once() {
    let missing =
        std::env::temp_dir().join(format!("homeagent-cli-nope-{}.json", std::process::id()));
    let output = homeagent_fresh(&["seq", "create", "--file", missing.to_str().unwrap()]);
    assert!(!output.status.success());
    let stderr = String::from_utf8(output.stderr).unwrap();
    assert_eq!(
        stderr.matches("No such file or directory").count(),
        1,
        "{stderr}"
    );
}

/// `seq create --help` points at a guide that exists: `homeagent seq
/// guide` prints the format (it pointed at its own help, which had none).
#[test]
fn seq_guide_prints_the_format_that_create_help_points_at() {
    let help = homeagent(&["seq", "create", "--help"]);
    assert!(
        stdout(&help).contains("homeagent seq guide"),
        "{}",
        stdout(&help)
    );
    let guide = homeagent_fresh(&["seq", "guide"]);
    assert!(guide.status.success(), "{guide:?}");
    assert_eq!(
        stdout(&guide).trim_end(),
        homeagent_seq::help::GUIDE.trim_end()
    );
    // Fixed text: a config with a typo does not stand in its way.
    let broken = std::env::temp_dir().join(format!("homeagent-guide-{}.toml", std::process::id()));
    std::fs::write(&broken, "[agent]\nmax_tokns = 5\n").unwrap();
    let guide = homeagent_fresh(&["--config", broken.to_str().unwrap(), "seq", "guide"]);
    let _ = std::fs::remove_file(&broken);
    assert!(guide.status.success(), "{guide:?}");
    assert_eq!(
        stdout(&guide).trim_end(),
        homeagent_seq::help::GUIDE.trim_end()
    );
}

/// `--scale` stops at ×100 (28,800 blast inputs): past about ×347 the
/// mock's per-input log dropped the oldest inputs and every run ended in
/// an error after minutes of work, instead of being refused at once.
#[test]
fn bench_scale_is_refused_past_a_hundred_before_anything_starts() {
    let output = homeagent(&["bench", "--scale", "101"]);
    assert_eq!(output.status.code(), Some(2), "{output:?}");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("--scale") && stderr.contains("1..=100"),
        "{stderr}"
    );
}

/// The processes `bench` starts (its mock and its agent) under this one.
pub(crate) fn children_of(pid: u32) -> Vec<u32> {
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return Vec::new();
    };
    tasks
        .flatten()
        .filter_map(|task| std::fs::read_to_string(task.path().join("children")).ok())
        .flat_map(|list| {
            list.split_whitespace()
                .filter_map(|p| p.parse().ok())
                .collect::<Vec<u32>>()
        })
        .collect()
}

/// Sends `signal` (`-TERM`, `-INT`) to `process`, waits for it to end (not
/// successfully), then for every one of `children` to be gone within
/// `within`; `what` names the case in failures.
pub(crate) fn signal_and_outlive_none(
    process: &mut std::process::Child,
    signal: &str,
    children: &[u32],
    within: std::time::Duration,
    what: &str,
) {
    let sent = Command::new("kill")
        .args([signal, &process.id().to_string()])
        .status()
        .unwrap();
    assert!(sent.success());
    let status = process.wait().unwrap();
    assert!(!status.success(), "{what} {signal}: {status:?}");
    let waited = std::time::Instant::now();
    while children.iter().any(|pid| alive(*pid)) {
        assert!(
            waited.elapsed() < within,
            "{what} {signal}: {children:?} outlived it"
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}

/// Whether `pid` still runs (a zombie, dead but not yet reaped, does not).
pub(crate) fn alive(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|stat| {
        stat.rsplit_once(") ")
            .is_some_and(|(_, rest)| !rest.starts_with('Z'))
    })
}

/// A bench stopped by SIGTERM (a CI job's timeout, `kill`) or SIGINT takes
/// the mock and the agent it started with it: they kept running on their
/// loopback ports, since a process killed by a signal runs no destructor.
#[test]
fn a_bench_stopped_by_a_signal_stops_the_processes_it_started() {
    let dir = std::env::temp_dir().join(format!("homeagent-bench-signal-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    for signal in ["-TERM", "-INT"] {
        let mut bench = Command::new(env!("CARGO_BIN_EXE_homeagent"))
            .args(["--data-dir"])
            .arg(&dir)
            .args(["bench", "--quick"])
            .env_remove("HOMEAGENT_CONFIG")
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap();
        let started = std::time::Instant::now();
        let children = loop {
            let children = children_of(bench.id());
            if children.len() >= 2 {
                break children;
            }
            assert!(
                started.elapsed() < std::time::Duration::from_secs(120),
                "{signal}: the bench started no mock and agent"
            );
            std::thread::sleep(std::time::Duration::from_millis(20));
        };
        signal_and_outlive_none(
            &mut bench,
            signal,
            &children,
            std::time::Duration::from_secs(30),
            "bench",
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// An address that cannot be listened on says how to give another.
#[test]
fn a_listen_address_that_cannot_be_used_says_how_to_fix_it() {
    let output = homeagent(&["mock-llm", "--listen", "9099"]);
    assert!(!output.status.success(), "{output:?}");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("9099") && stderr.contains("HOST:PORT") && stderr.contains("--listen"),
        "{stderr}"
    );
}
