#![allow(clippy::unwrap_used, clippy::expect_used)] // a panic in a test is a test failure

//! `homeagent chat` with its input piped: the offline demo model, batch
//! markers, the commands, and an approval answered on the next line.

use std::io::Write;
use std::process::{Command, Stdio};

/// `homeagent chat` with `config` and its data in `dir`, stdin and stdout
/// piped, no model key in its environment (the offline demo model).
fn chat_in(dir: &std::path::Path, config: &str) -> Command {
    let config_path = dir.join("homeagent.toml");
    std::fs::write(&config_path, config).unwrap();
    let mut command = Command::new(env!("CARGO_BIN_EXE_homeagent"));
    command
        .arg("--config")
        .arg(&config_path)
        .arg("--data-dir")
        .arg(dir)
        .arg("chat")
        .env_remove("OPENAI_API_KEY")
        .env_remove("ANTHROPIC_API_KEY")
        .env_remove("GEMINI_API_KEY")
        .env_remove("OLLAMA_HOST")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped());
    command
}

fn chat(config: &str, input: &str) -> (String, bool) {
    let dir = std::env::temp_dir().join(format!(
        "homeagent-chat-{}-{}",
        std::process::id(),
        input.len()
    ));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let mut child = chat_in(&dir, config)
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

/// `/tools` lists what the chatting agent can reach: its denied tools not.
#[test]
fn slash_tools_lists_the_agents_own_tools() {
    let config = "[[agents]]\nname = \"main\"\ndeny_tools = [\"demo_note\"]\n";
    let (out, ok) = chat(config, "/tools\n/quit\n");
    assert!(ok, "{out}");
    assert!(out.contains("demo_echo (parallel-safe)"), "{out}");
    assert!(!out.contains("demo_note"), "{out}");
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

/// A question a stopped turn left unanswered dies with the turn: the next
/// turn's question is asked, and the next line answers it (not the dead
/// one). Ctrl-C is SIGINT, sent as a terminal would.
#[test]
fn an_approval_left_by_a_stopped_turn_does_not_swallow_the_next_one() {
    use std::io::Read;
    use std::sync::mpsc;
    use std::time::{Duration, Instant};
    let dir = std::env::temp_dir().join(format!("homeagent-chat-stale-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let mut child = chat_in(&dir, "[tools]\nrequire_approval = [\"demo_echo\"]\n")
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let mut stdout = child.stdout.take().unwrap();
    let (tx, rx) = mpsc::channel::<String>();
    std::thread::spawn(move || {
        let mut buf = [0u8; 4096];
        while let Ok(n) = stdout.read(&mut buf) {
            if n == 0
                || tx
                    .send(String::from_utf8_lossy(&buf[..n]).into_owned())
                    .is_err()
            {
                return;
            }
        }
    });
    let mut seen = String::new();
    let mut wait_for = |needle: &str, count: usize| {
        let deadline = Instant::now() + Duration::from_secs(30);
        while seen.matches(needle).count() < count {
            let left = deadline.saturating_duration_since(Instant::now());
            match rx.recv_timeout(left) {
                Ok(piece) => seen.push_str(&piece),
                Err(_) => return Err(seen.clone()),
            }
        }
        Ok(seen.clone())
    };
    let echo = r#"!calls [{"name":"demo_echo","arguments":{"tag":"t1"}}]"#;
    writeln!(stdin, "{echo}").unwrap();
    wait_for("Allow?", 1).unwrap();
    let interrupted = Command::new("kill")
        .args(["-INT", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(interrupted.success());
    wait_for("Ctrl-C: stopping the turn", 1).unwrap();
    writeln!(stdin, "{echo}").unwrap();
    let asked = wait_for("Allow?", 2);
    writeln!(stdin, "y").unwrap();
    writeln!(stdin, "/quit").unwrap();
    drop(stdin);
    let ran = wait_for("demo_echo ok", 1);
    let _ = child.kill();
    let _ = child.wait();
    let _ = std::fs::remove_dir_all(&dir);
    let out = asked.unwrap_or_else(|out| panic!("the second question was not asked:\n{out}"));
    assert!(ran.is_ok(), "the second call did not run:\n{out}");
}
