#![allow(clippy::unwrap_used, clippy::expect_used)] // a panic in a test is a test failure

//! `homeagent adapter check` as a person runs it.

use std::path::PathBuf;
use std::process::Command;

fn bundled(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(format!("../llm/adapters/{name}.lua"))
}

fn homeagent(args: &[&str]) -> (i32, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_homeagent"))
        .args(args)
        // Users may have it set; they must still get one clear line.
        .env("RUST_BACKTRACE", "1")
        .output()
        .unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn a_good_adapter_passes_both_checks() {
    let openai = bundled("openai");
    let (code, stdout, _) = homeagent(&["adapter", "check", openai.to_str().unwrap()]);
    assert_eq!(code, 0, "{stdout}");
    assert_eq!(stdout.matches("came out intact").count(), 2, "{stdout}");
    let anthropic = bundled("anthropic");
    let (code, stdout, _) = homeagent(&[
        "adapter",
        "check",
        anthropic.to_str().unwrap(),
        "--wire",
        "anthropic",
    ]);
    assert_eq!(code, 0, "{stdout}");
}

#[test]
fn a_wrong_key_is_named_and_the_command_fails() {
    let source = std::fs::read_to_string(bundled("openai")).unwrap();
    let bad = source.replace("stream_index = call.index", "index = call.index");
    assert_ne!(bad, source);
    let dir = std::env::temp_dir().join(format!("homeagent-adapter-check-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("bad_index.lua");
    std::fs::write(&file, bad).unwrap();
    let (code, stdout, stderr) = homeagent(&["adapter", "check", file.to_str().unwrap()]);
    std::fs::remove_dir_all(&dir).unwrap();
    assert_eq!(code, 1);
    assert!(
        stdout.contains("FAIL  two interleaved tool calls") && stdout.contains("`index`"),
        "{stdout}"
    );
    assert!(stdout.contains("bad_index.lua"), "{stdout}");
    assert!(stderr.starts_with("error: the adapter"), "{stderr}");
    assert!(!stderr.contains("backtrace"), "{stderr}");
}

#[test]
fn a_missing_file_is_one_clear_error() {
    let (code, _, stderr) = homeagent(&["adapter", "check", "/nonexistent/x.lua"]);
    assert_eq!(code, 1);
    assert!(
        stderr.contains("cannot load the adapter /nonexistent/x.lua")
            && stderr.contains("No such file"),
        "{stderr}"
    );
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
}
