//! `homeagent mock-llm` as a user runs it: flags from the environment, a
//! real listener, and a clean stop on Ctrl-C (SIGINT).

#![allow(clippy::expect_used, clippy::unwrap_used)] // a panic in a test is a test failure

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

#[test]
fn help_names_every_flag() {
    let output = Command::new(env!("CARGO_BIN_EXE_homeagent"))
        .args(["mock-llm", "--help"])
        .output()
        .unwrap();
    assert!(output.status.success());
    let text = String::from_utf8(output.stdout).unwrap();
    for flag in [
        "--listen",
        "--delay-ms",
        "--chunk-delay-ms",
        "--tool-sleep-ms",
        "--tool",
        "HOMEAGENT_MOCK_LISTEN",
        "HOMEAGENT_MOCK_TOOL_SLEEP_MS",
    ] {
        assert!(text.contains(flag), "{flag} missing from:\n{text}");
    }
}

/// A base sleep the demo tools would refuse (or that overflows `S + 5·i`)
/// is refused at start, naming the flag and its range, instead of every
/// `demo_sleep` call failing later.
#[test]
fn a_tool_sleep_the_demo_tools_would_refuse_is_refused_at_start() {
    let max = homeagent_mock_llm::MAX_TOOL_SLEEP_MS;
    for bad in [(max + 1).to_string(), u64::MAX.to_string()] {
        let output = Command::new(env!("CARGO_BIN_EXE_homeagent"))
            .args([
                "mock-llm",
                "--listen",
                "127.0.0.1:0",
                "--tool-sleep-ms",
                &bad,
            ])
            .output()
            .unwrap();
        assert!(!output.status.success(), "{bad}");
        let stderr = String::from_utf8(output.stderr).unwrap();
        assert!(
            stderr.contains("--tool-sleep-ms") && stderr.contains(&format!("0..={max}")),
            "{bad}: {stderr}"
        );
    }
    // The longest call of the largest batch stays within what demo_sleep takes.
    assert!(
        max + 5 * (homeagent_mock_llm::script::MAX_BATCH as u64 - 1)
            <= homeagent_tools::demo::MAX_SLEEP_MS
    );
}

#[cfg(unix)]
#[test]
fn serves_until_ctrl_c_then_exits_cleanly() {
    let mut child = Command::new(env!("CARGO_BIN_EXE_homeagent"))
        .arg("mock-llm")
        .env("HOMEAGENT_MOCK_LISTEN", "127.0.0.1:0")
        .env("HOMEAGENT_MOCK_TOOL_SLEEP_MS", "42")
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdout = BufReader::new(child.stdout.take().unwrap());
    let mut first = String::new();
    stdout.read_line(&mut first).unwrap();
    let addr = first
        .trim()
        .strip_prefix("HomeAgent mock LLM listening on http://")
        .unwrap_or_else(|| panic!("unexpected first line {first:?}"))
        .to_owned();

    let mut conn = TcpStream::connect(&addr).unwrap();
    conn.write_all(b"GET /stats HTTP/1.0\r\nHost: mock\r\n\r\n")
        .unwrap();
    let mut reply = String::new();
    conn.read_to_string(&mut reply).unwrap();
    assert!(
        reply.starts_with("HTTP/1.0 200") || reply.starts_with("HTTP/1.1 200"),
        "{reply}"
    );
    assert!(reply.contains("\"tool_sleep_ms\":42"), "{reply}");

    let killed = Command::new("kill")
        .args(["-INT", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(killed.success());
    let deadline = Instant::now() + Duration::from_secs(10);
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        assert!(Instant::now() < deadline, "still running 10 s after Ctrl-C");
        std::thread::sleep(Duration::from_millis(20));
    };
    assert!(status.success(), "{status:?}");
    let mut rest = String::new();
    stdout.read_to_string(&mut rest).unwrap();
    assert!(rest.contains("stopping"), "{rest}");
}
