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

/// A chat driven line by line: what it printed so far, read on a thread.
struct Conversation {
    child: std::process::Child,
    stdin: Option<std::process::ChildStdin>,
    out: std::sync::mpsc::Receiver<String>,
    seen: String,
    dir: std::path::PathBuf,
}

impl Conversation {
    fn start(name: &str, config: &str) -> Self {
        use std::io::Read;
        let dir =
            std::env::temp_dir().join(format!("homeagent-chat-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let mut child = chat_in(&dir, config).stderr(Stdio::null()).spawn().unwrap();
        let stdin = child.stdin.take();
        let mut stdout = child.stdout.take().unwrap();
        let (tx, out) = std::sync::mpsc::channel::<String>();
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
        Conversation {
            child,
            stdin,
            out,
            seen: String::new(),
            dir,
        }
    }

    fn send(&mut self, line: &str) {
        writeln!(self.stdin.as_mut().unwrap(), "{line}").unwrap();
    }

    /// Everything printed once `needle` has been printed `count` times in
    /// all; `Err` with what was printed when it is not within 30 s.
    fn wait_for(&mut self, needle: &str, count: usize) -> Result<String, String> {
        use std::time::{Duration, Instant};
        let deadline = Instant::now() + Duration::from_secs(30);
        while self.seen.matches(needle).count() < count {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.out.recv_timeout(left) {
                Ok(piece) => self.seen.push_str(&piece),
                Err(_) => return Err(self.seen.clone()),
            }
        }
        Ok(self.seen.clone())
    }

    fn interrupt(&self) {
        let sent = Command::new("kill")
            .args(["-INT", &self.child.id().to_string()])
            .status()
            .unwrap();
        assert!(sent.success());
    }
}

impl Drop for Conversation {
    fn drop(&mut self) {
        drop(self.stdin.take());
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// The line typed after the question answers it.
#[test]
fn a_tool_that_needs_approval_asks_and_the_answer_decides() {
    let mut chat = Conversation::start("approve", "[tools]\nrequire_approval = [\"demo_echo\"]\n");
    let echo = r#"!calls [{"name":"demo_echo","arguments":{"tag":"t1"}}]"#;
    chat.send(echo);
    chat.wait_for("Allow?", 1).unwrap();
    chat.send("y");
    chat.wait_for("◂ demo_echo ok", 1).unwrap();
    chat.send(echo);
    chat.wait_for("Allow?", 2).unwrap();
    chat.send("n");
    let out = chat.wait_for("◂ demo_echo denied", 1).unwrap();
    assert!(out.contains("declined"), "{out}");
}

/// A line typed while the turn ran, before the question was shown, is the
/// next input, not the answer: a "yes" meant for the model must not let a
/// gated tool run unseen.
#[test]
fn a_line_typed_before_the_question_does_not_answer_it() {
    let mut chat = Conversation::start("ahead", "[tools]\nrequire_approval = [\"demo_note\"]\n");
    chat.send(
        r#"!calls [{"name":"demo_sleep","arguments":{"ms":1500}},{"name":"demo_note","arguments":{"text":"x"}}]"#,
    );
    chat.wait_for("▸ demo_sleep", 1).unwrap();
    chat.send("yes");
    let asked = chat.wait_for("Allow?", 1);
    let asked = asked.unwrap_or_else(|out| panic!("no question:\n{out}"));
    assert!(!asked.contains("◂ demo_note ok"), "{asked}");
    chat.send("n");
    let out = chat
        .wait_for("◂ demo_note denied", 1)
        .unwrap_or_else(|out| {
            panic!("the answer typed after the question was not the one used:\n{out}")
        });
    assert!(!out.contains("◂ demo_note ok"), "{out}");
    // The early line was kept: it is the next input, answered by the model.
    chat.wait_for("model request(s)", 2)
        .unwrap_or_else(|out| panic!("the line typed ahead was lost:\n{out}"));
}

/// `/stop` typed while a turn runs stops it then, not after it ends.
#[test]
fn slash_stop_during_a_turn_stops_it() {
    let mut chat = Conversation::start("stop", "");
    chat.send(r#"!calls [{"name":"demo_sleep","arguments":{"ms":60000}}]"#);
    chat.wait_for("▸ demo_sleep", 1).unwrap();
    chat.send("/stop");
    let out = chat
        .wait_for("(stopped 1 input(s))", 1)
        .unwrap_or_else(|out| panic!("the turn was not stopped:\n{out}"));
    assert!(!out.contains("◂ demo_sleep ok"), "{out}");
    chat.send("/quit");
}

/// A question a stopped turn left unanswered dies with the turn: the next
/// turn's question is asked, and the next line answers it (not the dead
/// one). Ctrl-C is SIGINT, sent as a terminal would.
#[test]
fn an_approval_left_by_a_stopped_turn_does_not_swallow_the_next_one() {
    let mut chat = Conversation::start("stale", "[tools]\nrequire_approval = [\"demo_echo\"]\n");
    let echo = r#"!calls [{"name":"demo_echo","arguments":{"tag":"t1"}}]"#;
    chat.send(echo);
    chat.wait_for("Allow?", 1).unwrap();
    chat.interrupt();
    chat.wait_for("Ctrl-C: stopping the turn", 1).unwrap();
    chat.send(echo);
    let asked = chat.wait_for("Allow?", 2);
    chat.send("y");
    chat.send("/quit");
    let ran = chat.wait_for("demo_echo ok", 1);
    let out = asked.unwrap_or_else(|out| panic!("the second question was not asked:\n{out}"));
    assert!(ran.is_ok(), "the second call did not run:\n{out}");
}

/// A chat with an agent that does not exist, or a session id the store
/// refuses, fails at once naming it (as `run` does), instead of starting
/// a conversation in which every input fails.
#[test]
fn an_unknown_agent_or_a_bad_session_id_ends_the_chat_at_start() {
    for (flag, value, named) in [
        ("--agent", "nope", "nope"),
        ("--session", "bad id!", "bad id!"),
    ] {
        let dir = std::env::temp_dir().join(format!(
            "homeagent-chat-start-{}-{}",
            std::process::id(),
            flag.trim_start_matches('-')
        ));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let mut command = chat_in(&dir, "");
        command.args([flag, value]).stderr(Stdio::piped());
        let mut child = command.spawn().unwrap();
        child.stdin.take().unwrap().write_all(b"hello\n").unwrap();
        let output = child.wait_with_output().unwrap();
        let _ = std::fs::remove_dir_all(&dir);
        let stderr = String::from_utf8(output.stderr).unwrap();
        assert!(!output.status.success(), "{flag}: {stderr}");
        assert!(stderr.contains(named), "{flag}: {stderr}");
    }
}

/// The dedup window is for channels that may deliver a message twice; a
/// person who types the same line again means it again (`continue`,
/// `again`). Both are answered.
#[test]
fn a_line_typed_twice_is_answered_twice_even_with_a_dedup_window() {
    let mut chat = Conversation::start("twice", "[scheduler]\ndedup_window = \"60s\"\n");
    chat.send("!text again");
    chat.wait_for("model request(s)", 1).unwrap();
    chat.send("!text again");
    let out = chat
        .wait_for("model request(s)", 2)
        .unwrap_or_else(|out| panic!("the repeated line was not answered:\n{out}"));
    assert!(!out.contains("duplicate"), "{out}");
    chat.send("/quit");
}

/// A line that is not UTF-8 (a Latin-1 terminal) is read as well as it
/// can be, and the chat goes on: it ended there, silently, with exit 0,
/// and every later line was lost.
#[test]
fn a_line_that_is_not_utf8_does_not_end_the_chat() {
    let dir = std::env::temp_dir().join(format!("homeagent-chat-latin1-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let mut child = chat_in(&dir, "").stderr(Stdio::piped()).spawn().unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(b"caf\xe9\n!text\n/quit\n")
        .unwrap();
    let output = child.wait_with_output().unwrap();
    let _ = std::fs::remove_dir_all(&dir);
    let out = String::from_utf8_lossy(&output.stdout);
    assert!(output.status.success(), "{out}");
    assert!(out.contains("plain text reply"), "the line after it: {out}");
}
