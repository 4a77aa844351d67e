#![allow(clippy::unwrap_used, clippy::expect_used)] // a panic in a test is a test failure

//! `homeagent chat` with its input piped: the offline demo model, batch
//! markers, the commands, and an approval answered on the next line.

use std::io::Write;
use std::process::{Command, Stdio};

fn chat(config: &str, input: &str) -> (String, bool) {
    let dir = std::env::temp_dir().join(format!(
        "homeagent-chat-{}-{}",
        std::process::id(),
        input.len()
    ));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let config_path = dir.join("homeagent.toml");
    std::fs::write(&config_path, config).unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_homeagent"))
        .arg("--config")
        .arg(&config_path)
        .arg("--data-dir")
        .arg(&dir)
        .arg("chat")
        .env_remove("OPENAI_API_KEY")
        .env_remove("ANTHROPIC_API_KEY")
        .env_remove("GEMINI_API_KEY")
        .env_remove("OLLAMA_HOST")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(input.as_bytes())
        .unwrap();
    let output = child.wait_with_output().unwrap();
    let _ = std::fs::remove_dir_all(&dir);
    (
        String::from_utf8(output.stdout).unwrap(),
        output.status.success(),
    )
}

#[test]
fn a_chat_shows_batches_answers_commands_and_leaves_on_quit() {
    let (out, ok) = chat("", "!slowbatch4\n!serialbatch2\n/tools\n/new\n/quit\n");
    assert!(ok, "{out}");
    assert!(out.contains("offline demo model"), "{out}");
    assert!(out.contains("[∥ parallel batch of 4]"), "{out}");
    assert!(out.contains("[→ serial batch of 3]"), "{out}");
    assert!(out.contains("executed=4"), "{out}");
    assert!(out.contains("executed=2"), "{out}");
    assert!(out.contains("cmd_run (parallel-safe)"), "{out}");
    assert!(out.contains("demo_note (serial)"), "{out}");
    assert!(out.contains("(new session chat-"), "{out}");
}

#[test]
fn a_tool_that_needs_approval_asks_and_the_answer_decides() {
    let config = "[tools]\nrequire_approval = [\"demo_echo\"]\n";
    let echo = r#"!calls [{"name":"demo_echo","arguments":{"tag":"t1"}}]"#;
    let (out, ok) = chat(config, &format!("{echo}\ny\n{echo}\nn\n/quit\n"));
    assert!(ok, "{out}");
    let asks = out.matches("wants to run demo_echo").count();
    assert_eq!(asks, 2, "{out}");
    // The first call ran, the second was declined.
    assert!(out.contains("◂ demo_echo ok"), "{out}");
    assert!(out.contains("◂ demo_echo denied"), "{out}");
    assert!(out.contains("declined"), "{out}");
}
