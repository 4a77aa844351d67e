#![allow(clippy::unwrap_used, clippy::expect_used)] // a panic in a test is a test failure
//! `homeagent waiter`, the built binary, foreground and `--daemon`, against a
//! scripted device server on a real loopback WebSocket. The key property
//! (the seed's bug): both start paths enforce the configured allowlist.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use futures_util::{SinkExt, StreamExt};
use homeagent_device::protocol::{CmdStatus, DeviceFrame, RefusalCode, ServerFrame};
use tokio::net::TcpListener;
use tokio_tungstenite::WebSocketStream;
use tokio_tungstenite::tungstenite::Message;

type Ws = WebSocketStream<tokio::net::TcpStream>;

const TOKEN: &str = "cli-test-device-token";

/// A fresh data directory with a waiter.toml allowing only `echo`.
fn setup(label: &str, toml: &str) -> (PathBuf, PathBuf) {
    let dir = std::env::temp_dir().join(format!("waiter-cli-{label}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let config = dir.join("waiter.toml");
    std::fs::write(&config, toml).unwrap();
    (dir, config)
}

fn waiter_command(data_dir: &Path, args: &[&str]) -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_homeagent"));
    command
        .arg("--data-dir")
        .arg(data_dir)
        .arg("waiter")
        .args(args)
        .env_remove("HOMEAGENT_DEVICE_TOKEN")
        .env_remove("HOMEAGENT_CONFIG")
        .env_remove("RUST_LOG")
        .stdin(Stdio::null());
    command
}

async fn listen() -> (TcpListener, String) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("ws://{}", listener.local_addr().unwrap());
    (listener, url)
}

async fn accept(listener: &TcpListener) -> Ws {
    let (tcp, _) = tokio::time::timeout(Duration::from_secs(30), listener.accept())
        .await
        .expect("the waiter did not connect within 30 s")
        .unwrap();
    tokio_tungstenite::accept_async(tcp).await.unwrap()
}

async fn recv(ws: &mut Ws) -> DeviceFrame {
    loop {
        let message = tokio::time::timeout(Duration::from_secs(20), ws.next())
            .await
            .expect("no frame within 20 s")
            .expect("the link closed")
            .unwrap();
        match message {
            Message::Text(body) => return serde_json::from_str(&body).unwrap(),
            Message::Ping(_) | Message::Pong(_) => continue,
            other => panic!("unexpected {other:?}"),
        }
    }
}

async fn send(ws: &mut Ws, frame: &ServerFrame) {
    ws.send(Message::text(serde_json::to_string(frame).unwrap()))
        .await
        .unwrap();
}

/// Accepts the waiter, checks hello and token, and binds it.
async fn bind(listener: &TcpListener, device_id: &str) -> Ws {
    let mut ws = accept(listener).await;
    let DeviceFrame::Hello(hello) = recv(&mut ws).await else {
        panic!("no hello");
    };
    assert_eq!(hello.device_id, device_id);
    let DeviceFrame::Bind { token } = recv(&mut ws).await else {
        panic!("no bind");
    };
    assert_eq!(token, TOKEN);
    send(
        &mut ws,
        &ServerFrame::Bound {
            device_id: device_id.into(),
        },
    )
    .await;
    ws
}

/// (status, stdout, detail) of one command.
async fn run(ws: &mut Ws, req_id: u64, command: &str) -> (CmdStatus, String, String) {
    send(
        ws,
        &ServerFrame::Cmd {
            req_id,
            argv: None,
            command: Some(command.into()),
            timeout_ms: 10_000,
        },
    )
    .await;
    match recv(ws).await {
        DeviceFrame::CmdResult {
            req_id: got,
            status,
            stdout,
            detail,
            ..
        } => {
            assert_eq!(got, req_id);
            (status, stdout, detail.unwrap_or_default())
        }
        other => panic!("not a result: {other:?}"),
    }
}

/// `echo hi` runs and `ls` (in the built-in list) is refused: the
/// configured list is in force.
async fn assert_only_echo_runs(ws: &mut Ws) {
    let (status, stdout, _) = run(ws, 1, "echo hi").await;
    assert_eq!((status, stdout.as_str()), (CmdStatus::Ok, "hi\n"));
    let (status, _, detail) = run(ws, 2, "ls").await;
    assert_eq!(status, CmdStatus::Refused, "{detail}");
    assert!(
        detail.contains("`ls`") && detail.contains("allowed: echo"),
        "{detail}"
    );
}

/// Waits for the waiter to exit on its own; kills it and fails after 30 s.
async fn wait_for_exit(child: &mut Child) -> (std::process::ExitStatus, String) {
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the waiter did not exit within 30 s"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    let mut stderr = String::new();
    std::io::Read::read_to_string(&mut child.stderr.take().unwrap(), &mut stderr).unwrap();
    (status, stderr)
}

/// Stops a waiter process (SIGTERM) when dropped, so a failed assertion
/// leaves nothing running.
struct KillOnDrop(u32);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = Command::new("kill").arg(self.0.to_string()).status();
    }
}

const ECHO_ONLY: &str = "device_cmd_allowlist = [\"echo\"]\n";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_foreground_waiter_enforces_the_configured_allowlist() {
    let (dir, config) = setup("fg", ECHO_ONLY);
    let (listener, url) = listen().await;
    let mut child = waiter_command(&dir, &["--server", &url, "--device-id", "cli-fg"])
        .arg("--config")
        .arg(&config)
        .env("HOMEAGENT_DEVICE_TOKEN", TOKEN)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let guard = KillOnDrop(child.id());
    let mut ws = bind(&listener, "cli-fg").await;
    assert_only_echo_runs(&mut ws).await;
    drop(guard);
    // SIGTERM is a clean stop.
    assert!(child.wait().unwrap().success());
    std::fs::remove_dir_all(&dir).unwrap();
}

/// A waiter on the server's own machine, run by the same user (the usual
/// one-box set-up), reaches the same data directory and config file as
/// the server: device commands may not read them, as `cmd_run` may not
/// (the config holds the API key and device tokens, the data directory
/// every session's history). Other files stay readable.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn device_commands_may_not_read_homeagents_data_or_config() {
    let (dir, config) = setup("private", "device_cmd_allowlist = [\"cat\"]\n");
    let elsewhere = dir.with_extension("elsewhere");
    let _ = std::fs::remove_dir_all(&elsewhere);
    std::fs::create_dir_all(&elsewhere).unwrap();
    std::fs::write(
        dir.join("homeagent.toml"),
        "[server]\napi_key = \"secret\"\n",
    )
    .unwrap();
    std::fs::write(
        elsewhere.join("named.toml"),
        "[server]\napi_key = \"secret\"\n",
    )
    .unwrap();
    std::fs::write(elsewhere.join("notes.txt"), "fine\n").unwrap();
    let (listener, url) = listen().await;
    let mut child = waiter_command(&dir, &["--server", &url, "--device-id", "cli-private"])
        .arg("--config")
        .arg(&config)
        .env("HOMEAGENT_DEVICE_TOKEN", TOKEN)
        .env("HOMEAGENT_CONFIG", elsewhere.join("named.toml"))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let guard = KillOnDrop(child.id());
    let mut ws = bind(&listener, "cli-private").await;
    let path = |p: PathBuf| p.display().to_string();
    let (status, stdout, detail) = run(
        &mut ws,
        1,
        &format!("cat {}", path(elsewhere.join("notes.txt"))),
    )
    .await;
    assert_eq!(
        (status, stdout.as_str()),
        (CmdStatus::Ok, "fine\n"),
        "{detail}"
    );
    for (req_id, private) in [
        (2, dir.join("homeagent.toml")),
        (3, dir.join("homeagent.db")),
        (4, elsewhere.join("named.toml")),
    ] {
        let (status, stdout, detail) =
            run(&mut ws, req_id, &format!("cat {}", path(private.clone()))).await;
        assert_eq!(
            status,
            CmdStatus::Refused,
            "{}: {stdout} {detail}",
            private.display()
        );
        assert!(!stdout.contains("secret"), "{stdout}");
    }
    drop(guard);
    assert!(child.wait().unwrap().success());
    std::fs::remove_dir_all(&dir).unwrap();
    std::fs::remove_dir_all(&elsewhere).unwrap();
}

/// A token given with `--token` does not stay on the command line, where
/// `ps -ef` (which the waiter's own allowlist lets the agent run) would
/// show it: the waiter starts itself again with the token in its
/// environment, and binds with it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_token_given_on_the_command_line_leaves_it() {
    let (dir, config) = setup("argv", ECHO_ONLY);
    let (listener, url) = listen().await;
    let mut child = waiter_command(&dir, &["--server", &url, "--device-id", "cli-argv"])
        .arg("--config")
        .arg(&config)
        .args(["--token", TOKEN])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let guard = KillOnDrop(child.id());
    let mut ws = bind(&listener, "cli-argv").await;
    // Bound: the process is the one that runs (same pid), and its command
    // line holds the rest of the arguments but not the token.
    let cmdline = std::fs::read(format!("/proc/{}/cmdline", child.id())).unwrap();
    let cmdline = String::from_utf8_lossy(&cmdline).replace('\0', " ");
    assert!(cmdline.contains("--device-id cli-argv"), "{cmdline}");
    assert!(!cmdline.contains(TOKEN), "{cmdline}");
    assert!(!cmdline.contains("--token"), "{cmdline}");
    assert_only_echo_runs(&mut ws).await;
    drop(guard);
    assert!(child.wait().unwrap().success());
    std::fs::remove_dir_all(&dir).unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_daemon_enforces_the_configured_allowlist() {
    let (dir, config) = setup("daemon", ECHO_ONLY);
    let (listener, url) = listen().await;
    let output = waiter_command(
        &dir,
        &[
            "--server",
            &url,
            "--device-id",
            "cli-daemon",
            "--token",
            TOKEN,
            "--daemon",
        ],
    )
    .arg("--config")
    .arg(&config)
    .output()
    .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout).to_string();
    assert!(
        output.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let pid: u32 = stdout
        .split("pid ")
        .nth(1)
        .and_then(|rest| rest.split(|c: char| !c.is_ascii_digit()).next())
        .and_then(|digits| digits.parse().ok())
        .unwrap_or_else(|| panic!("no pid in {stdout:?}"));
    let daemon = KillOnDrop(pid);
    let log = dir.join("waiter.log");
    assert!(stdout.contains(&log.display().to_string()), "{stdout}");

    let mut ws = bind(&listener, "cli-daemon").await;
    assert_only_echo_runs(&mut ws).await;

    // The token went through the environment, not the command line.
    let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap();
    assert!(!String::from_utf8_lossy(&cmdline).contains(TOKEN));
    drop(daemon);
    let logged = std::fs::read_to_string(&log).unwrap();
    assert!(
        logged.contains("device_cmd_allowlist (1 programs: echo)"),
        "{logged}"
    );
    assert!(!logged.contains(TOKEN));
    std::fs::remove_dir_all(&dir).unwrap();
}

/// `--daemon` with a token the server refuses: the background waiter
/// stops at once, and the command that started it says so with its exit
/// code (78), instead of reporting a waiter that is already gone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_daemon_refused_at_once_exits_with_the_refusal_code() {
    let (dir, config) = setup("daemon-refused", ECHO_ONLY);
    let (listener, url) = listen().await;
    let mut parent = waiter_command(
        &dir,
        &["--server", &url, "--device-id", "cli-gone", "--daemon"],
    )
    .arg("--config")
    .arg(&config)
    .env("HOMEAGENT_DEVICE_TOKEN", "wrong")
    .stdout(Stdio::piped())
    .stderr(Stdio::piped())
    .spawn()
    .unwrap();
    refuse_the_token(&listener).await;
    let (status, stderr) = wait_for_exit(&mut parent).await;
    assert_eq!(status.code(), Some(78), "{stderr}");
    let log = dir.join("waiter.log");
    assert!(stderr.contains(&log.display().to_string()), "{stderr}");
}

/// Plays a server that refuses the next waiter's token for good: accepts
/// it, reads its hello and bind, answers `bad_token`, closes. Returns the
/// token the waiter sent.
async fn refuse_the_token(listener: &TcpListener) -> String {
    let mut ws = accept(listener).await;
    assert!(matches!(recv(&mut ws).await, DeviceFrame::Hello(_)));
    let DeviceFrame::Bind { token } = recv(&mut ws).await else {
        panic!("the second frame is not a bind");
    };
    send(
        &mut ws,
        &ServerFrame::Refused {
            code: RefusalCode::BadToken,
            reason: "the device token does not match".into(),
            retry: false,
        },
    )
    .await;
    let _ = ws.close(None).await;
    token
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wrong_token_exits_naming_the_token_without_retrying() {
    let (dir, config) = setup("badtoken", ECHO_ONLY);
    let (listener, url) = listen().await;
    let mut child = waiter_command(&dir, &["--server", &url, "--device-id", "cli-bad"])
        .arg("--config")
        .arg(&config)
        .env("HOMEAGENT_DEVICE_TOKEN", "wrong")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let guard = KillOnDrop(child.id());
    let token = refuse_the_token(&listener).await;
    assert_eq!(token, "wrong");
    let (status, stderr) = wait_for_exit(&mut child).await;
    // It exited by itself; its pid must not be signalled any more.
    std::mem::forget(guard);
    assert_eq!(status.code(), Some(78), "{stderr}");
    assert!(stderr.contains("device token is wrong"), "{stderr}");
    assert!(
        !stderr.contains("wrong\n") && !stderr.contains("`wrong`"),
        "{stderr}"
    );
    // No second attempt.
    assert!(
        tokio::time::timeout(Duration::from_secs(1), listener.accept())
            .await
            .is_err()
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_config_typo_stops_both_paths_naming_the_key() {
    let (dir, config) = setup("typo", "device_cmd_allowlst = [\"echo\"]\n");
    for daemon in [false, true] {
        let mut command = waiter_command(&dir, &["--server", "ws://127.0.0.1:9", "--token", TOKEN]);
        command.arg("--config").arg(&config);
        if daemon {
            command.arg("--daemon");
        }
        let mut child = command
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let guard = KillOnDrop(child.id());
        let (status, stderr) = wait_for_exit(&mut child).await;
        std::mem::forget(guard);
        if status.success() {
            // A daemon that started anyway: stop it before failing.
            let mut stdout = String::new();
            std::io::Read::read_to_string(&mut child.stdout.take().unwrap(), &mut stdout).unwrap();
            if let Some(pid) = stdout
                .split("pid ")
                .nth(1)
                .and_then(|r| r.split(',').next())
            {
                let _ = Command::new("kill").arg(pid).status();
            }
            panic!("daemon={daemon}: the waiter started with a misspelt key: {stdout}");
        }
        assert!(
            stderr.contains("device_cmd_allowlst"),
            "daemon={daemon}: {stderr}"
        );
        assert!(stderr.contains("waiter.toml"), "daemon={daemon}: {stderr}");
    }
    // The daemon was never started, so it wrote no log.
    assert!(!dir.join("waiter.log").exists());
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn a_missing_token_is_named() {
    let (dir, config) = setup("notoken", ECHO_ONLY);
    let output = waiter_command(&dir, &["--server", "ws://127.0.0.1:9"])
        .arg("--config")
        .arg(&config)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(!output.status.success());
    assert!(stderr.contains("no device token"), "{stderr}");
    assert!(stderr.contains("HOMEAGENT_DEVICE_TOKEN"), "{stderr}");
    std::fs::remove_dir_all(&dir).unwrap();
}

/// An empty `HOMEAGENT_DEVICE_TOKEN` (an `Environment=` line left blank in
/// a unit file) is not a token: the one in waiter.toml is used, as an
/// empty variable is unset everywhere else in HomeAgent.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_empty_token_variable_leaves_the_files_token_in_charge() {
    let (dir, config) = setup("empty-env", &format!("{ECHO_ONLY}token = \"{TOKEN}\"\n"));
    let (listener, url) = listen().await;
    let mut child = waiter_command(&dir, &["--server", &url, "--device-id", "cli-empty"])
        .arg("--config")
        .arg(&config)
        .env("HOMEAGENT_DEVICE_TOKEN", "")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let guard = KillOnDrop(child.id());
    // `bind` checks the token the waiter sent is the file's.
    let _ws = bind(&listener, "cli-empty").await;
    drop(guard);
    let _ = child.wait();
    std::fs::remove_dir_all(&dir).unwrap();
}
