#![allow(clippy::unwrap_used, clippy::expect_used)] // a panic in a test is a test failure
//! The device-side policy, end to end: a real waiter over a real WebSocket
//! on loopback, the test playing the server, real programs running.

use crate::waiter_support;

use std::time::{Duration, Instant};

use homeagent_device::CmdStatus;
use homeagent_device::waiter::{MAX_OUTPUT_CAP_BYTES, WaiterConfigError, WaiterPolicy};
use waiter_support::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_allowlist_means_the_built_in_list() {
    let (mut ws, waiter, _l) = bound_waiter(policy_from_toml("")).await;

    let ls = run(&mut ws, 1, "ls /", 10_000).await;
    assert!(ls.is_ok(), "{ls:?}");
    assert_eq!(ls.exit_code, Some(0));
    // Not in the built-in list: refused, and the detail says which list.
    let cp = run(&mut ws, 2, "cp /etc/hostname /tmp/x", 10_000).await;
    assert!(cp.is_refused(), "{cp:?}");
    assert!(cp.detail.contains("`cp`"), "{}", cp.detail);
    assert!(cp.detail.contains("built-in list"), "{}", cp.detail);
    waiter.abort();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_empty_allowlist_is_the_built_in_list_never_everything() {
    let (mut ws, waiter, _l) = bound_waiter(policy_from_toml("device_cmd_allowlist = []\n")).await;

    let ls = run(&mut ws, 1, "ls /", 10_000).await;
    assert!(ls.is_ok(), "{ls:?}");
    for (req_id, command) in [
        (2, "rm -f /tmp/nothing-here"),
        (3, "bash -c true"),
        (4, "python3 -V"),
    ] {
        let outcome = run(&mut ws, req_id, command, 10_000).await;
        assert!(outcome.is_refused(), "{command}: {outcome:?}");
    }
    waiter.abort();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_configured_allowlist_replaces_the_built_in_one() {
    let (mut ws, waiter, _l) =
        bound_waiter(policy_from_toml("device_cmd_allowlist = [\"echo\"]\n")).await;

    let echo = run(&mut ws, 1, "echo hi", 10_000).await;
    assert!(echo.is_ok(), "{echo:?}");
    assert_eq!(echo.stdout, "hi\n");
    assert_eq!(echo.exit_code, Some(0));

    // `ls` is in the built-in list, but the configured list replaced it.
    let ls = run(&mut ws, 2, "ls", 10_000).await;
    assert_eq!(ls.status, CmdStatus::Refused, "{ls:?}");
    assert_eq!(
        ls.detail,
        "`ls` is not in this device's command allowlist (device_cmd_allowlist in its \
         waiter.toml); allowed: echo"
    );
    assert!(
        ls.hint.contains("adds it to device_cmd_allowlist"),
        "{}",
        ls.hint
    );
    assert!(ls.hint.contains("waiter.toml"), "{}", ls.hint);
    waiter.abort();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn names_match_exactly_by_basename_after_assignments() {
    let (mut ws, waiter, _l) =
        bound_waiter(policy_from_toml("device_cmd_allowlist = [\"grep\"]\n")).await;

    // grep exits 1 when nothing matches: the program ran, status ok.
    let grep = run(&mut ws, 1, "grep -c x /dev/null", 10_000).await;
    assert!(grep.is_ok(), "{grep:?}");
    assert_eq!((grep.exit_code, grep.stdout.as_str()), (Some(1), "0\n"));
    let with_env = run(&mut ws, 2, "LC_ALL=C grep -c x /dev/null", 10_000).await;
    assert!(with_env.is_ok(), "{with_env:?}");
    assert_eq!(with_env.stdout, "0\n");

    for (req_id, command) in [(3, "grepXxx x /dev/null"), (4, "mygrep x /dev/null")] {
        let outcome = run(&mut ws, req_id, command, 10_000).await;
        assert!(outcome.is_refused(), "{command}: {outcome:?}");
    }

    // A file named grep that is not the grep on PATH.
    let dir = temp_dir("grep-copy");
    let fake = dir.join("grep");
    std::fs::copy(std::fs::canonicalize("/bin/grep").unwrap(), &fake).unwrap();
    let copy = run(
        &mut ws,
        5,
        &format!("{} -c x /dev/null", fake.display()),
        10_000,
    )
    .await;
    std::fs::remove_dir_all(&dir).unwrap();
    assert!(copy.is_refused(), "{copy:?}");
    assert!(copy.detail.contains("is not the `grep`"), "{}", copy.detail);

    // The argv form is quoted, then checked the same way: `a|b` is an
    // argument, not a pipe.
    let argv = run_argv(&mut ws, 6, &["grep", "-c", "a|b", "/dev/null"]).await;
    assert!(argv.is_ok(), "{argv:?}");
    assert_eq!(argv.stdout, "0\n");
    let argv_other = run_argv(&mut ws, 7, &["mygrep", "x"]).await;
    assert!(argv_other.is_refused(), "{argv_other:?}");
    // Text with a real pipe: no shell, refused.
    let pipe = run(&mut ws, 8, "grep x /dev/null | grep y", 10_000).await;
    assert!(pipe.is_refused(), "{pipe:?}");
    assert!(pipe.hint.contains("device_cmd_run"), "{}", pipe.hint);
    waiter.abort();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_write_guard_refuses_writes_unless_allowed_and_exec_always() {
    let dir = temp_dir("writes");
    let file = dir.join("f.txt");
    std::fs::write(&file, "b\na\n").unwrap();
    let d = dir.display();
    let f = file.display();
    let writes = [
        format!("find {d} -name nothing -delete"),
        format!("sed -i s/a/c/ {f}"),
        format!("sort -o {d}/sorted.txt {f}"),
    ];

    let (mut ws, waiter, _l) = bound_waiter(policy_from_toml(
        "device_cmd_allowlist = [\"find\", \"sed\", \"sort\"]\n",
    ))
    .await;
    for (i, command) in writes.iter().enumerate() {
        let outcome = run(&mut ws, i as u64, command, 10_000).await;
        assert!(outcome.is_refused(), "{command}: {outcome:?}");
        assert!(
            outcome.hint.contains("allow_writes = true"),
            "{}",
            outcome.hint
        );
    }
    let exec = run_argv(
        &mut ws,
        10,
        &["find", &d.to_string(), "-exec", "rm", "{}", ";"],
    )
    .await;
    assert!(exec.is_refused(), "{exec:?}");
    assert_eq!(std::fs::read_to_string(&file).unwrap(), "b\na\n");
    waiter.abort();

    let (mut ws, waiter, _l) = bound_waiter(policy_from_toml(
        "device_cmd_allowlist = [\"find\", \"sed\", \"sort\"]\nallow_writes = true\n",
    ))
    .await;
    for (i, command) in writes.iter().enumerate() {
        let outcome = run(&mut ws, i as u64, command, 10_000).await;
        assert!(outcome.is_ok(), "{command}: {outcome:?}");
        assert_eq!(outcome.exit_code, Some(0), "{command}: {outcome:?}");
    }
    // The writes really happened: sed changed the file, sort wrote one.
    assert_eq!(std::fs::read_to_string(&file).unwrap(), "b\nc\n");
    assert_eq!(
        std::fs::read_to_string(dir.join("sorted.txt")).unwrap(),
        "b\nc\n"
    );
    // Running another program is never a write permission.
    let exec = run_argv(
        &mut ws,
        10,
        &["find", &d.to_string(), "-exec", "rm", "{}", ";"],
    )
    .await;
    assert!(exec.is_refused(), "{exec:?}");
    assert!(file.exists());
    waiter.abort();
    std::fs::remove_dir_all(&dir).unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unauthorized_device_refuses_everything() {
    let (mut ws, waiter, _l) = bound_waiter(policy_from_toml("device_authorized = false\n")).await;
    for (req_id, command) in [(1, "echo hi"), (2, "ls /"), (3, "true")] {
        let outcome = run(&mut ws, req_id, command, 10_000).await;
        assert!(outcome.is_refused(), "{command}: {outcome:?}");
        assert!(
            outcome.detail.contains("device_authorized = false"),
            "{}",
            outcome.detail
        );
        assert!(
            outcome.hint.contains("device_authorized = true"),
            "{}",
            outcome.hint
        );
    }
    waiter.abort();
}

#[test]
fn the_command_line_switch_wins_over_the_file() {
    let dir = temp_dir("authorized");
    let path = dir.join("waiter.toml");
    std::fs::write(&path, "device_authorized = false\n").unwrap();
    assert!(
        WaiterPolicy::load(Some(&path), Some(true))
            .unwrap()
            .1
            .authorized
    );
    assert!(!WaiterPolicy::load(Some(&path), None).unwrap().1.authorized);
    std::fs::write(&path, "").unwrap();
    assert!(WaiterPolicy::load(Some(&path), None).unwrap().1.authorized);
    assert!(
        !WaiterPolicy::load(Some(&path), Some(false))
            .unwrap()
            .1
            .authorized
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_command_past_its_timeout_is_killed_and_reported() {
    let (mut ws, waiter, _l) = bound_waiter(policy_from_toml("")).await;
    let started = Instant::now();
    let sleep = run(&mut ws, 1, "sleep 30", 300).await;
    assert_eq!(sleep.status, CmdStatus::Timeout, "{sleep:?}");
    assert!(sleep.detail.contains("killed"), "{}", sleep.detail);
    assert!(started.elapsed() >= Duration::from_millis(300));
    waiter.abort();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn output_past_the_cap_is_cut_and_marked() {
    let (mut ws, waiter, _l) = bound_waiter(policy_from_toml("output_cap_bytes = 100\n")).await;
    let seq = run(&mut ws, 1, "seq 1 1000", 10_000).await;
    assert!(seq.is_ok(), "{seq:?}");
    assert!(seq.truncated);
    // "1\n".."9\n" is 18 bytes, "10\n".."36\n" 81 more: byte 100 is the
    // "3" of 37.
    let kept = &seq.stdout[..100];
    assert!(
        kept.starts_with("1\n2\n3\n") && kept.ends_with("35\n36\n3"),
        "{kept}"
    );
    assert!(
        seq.stdout.contains("output truncated after 100 bytes"),
        "{}",
        seq.stdout
    );
    waiter.abort();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn commands_run_concurrently_and_answer_as_they_finish() {
    let (mut ws, waiter, _l) = bound_waiter(policy_from_toml("")).await;
    for (req_id, command) in [(1, "sleep 1"), (2, "echo fast")] {
        send(
            &mut ws,
            &homeagent_device::ServerFrame::Cmd {
                req_id,
                argv: None,
                command: Some(command.into()),
                timeout_ms: 10_000,
            },
        )
        .await;
    }
    let first = recv(&mut ws).await;
    let second = recv(&mut ws).await;
    let fast = Outcome::from(first, 2);
    assert_eq!(fast.stdout, "fast\n");
    let slow = Outcome::from(second, 1);
    assert!(slow.is_ok(), "{slow:?}");
    waiter.abort();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_malformed_cmd_still_gets_its_one_result() {
    let (mut ws, waiter, _l) = bound_waiter(policy_from_toml("")).await;
    send(
        &mut ws,
        &homeagent_device::ServerFrame::Cmd {
            req_id: 9,
            argv: Some(vec!["echo".into()]),
            command: Some("echo".into()),
            timeout_ms: 1000,
        },
    )
    .await;
    let both = Outcome::from(recv(&mut ws).await, 9);
    assert_eq!(both.status, CmdStatus::Error);
    assert!(
        both.detail.contains("exactly one of `argv` and `command`"),
        "{}",
        both.detail
    );
    waiter.abort();
}

#[test]
fn config_problems_name_the_key() {
    let dir = temp_dir("config");
    let path = dir.join("waiter.toml");
    let missing = dir.join("no-such-dir");
    let a_file = path.display().to_string();
    let working_dir_missing = format!("working_dir = \"{}\"\n", missing.display());
    let working_dir_file = format!("working_dir = \"{a_file}\"\n");
    let cases: [(&str, &str); 6] = [
        // A typo in working_dir used to fail every command with "cannot
        // start `ls`", hinting at a missing program.
        (&working_dir_missing, "working_dir"),
        (&working_dir_file, "working_dir"),
        ("device_cmd_allowlst = [\"ls\"]\n", "device_cmd_allowlst"),
        ("allow_write = true\n", "allow_write"),
        (
            "device_cmd_allowlist = [\"ls\", \"bash\"]\n",
            "device_cmd_allowlist",
        ),
        ("output_cap_bytes = 10000000\n", "output_cap_bytes"),
    ];
    for (text, key) in cases {
        std::fs::write(&path, text).unwrap();
        let error = WaiterPolicy::load(Some(&path), None).unwrap_err();
        match &error {
            WaiterConfigError::Parse { message, .. } => assert!(message.contains(key), "{message}"),
            WaiterConfigError::Invalid { key: named, .. } => assert_eq!(*named, key),
            other => panic!("{text}: unexpected {other:?}"),
        }
        assert!(error.to_string().contains(key), "{error}");
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

/// The waiter's own config may hold its device token: its commands may
/// not read it.
#[test]
fn a_device_command_cannot_read_the_waiters_config() {
    let dir = temp_dir("private-config");
    let path = dir.join("waiter.toml");
    std::fs::write(&path, "").unwrap();
    let (_, policy) = WaiterPolicy::load(Some(&path), Some(true)).unwrap();
    let refused = homeagent_tools::check_command(&policy.cmd, &format!("cat {}", path.display()))
        .unwrap_err();
    assert!(
        matches!(refused, homeagent_tools::CmdRefusal::PrivatePath { .. }),
        "{refused:?}"
    );
}

/// A zero limit names the key the owner wrote (a zero duration is refused
/// as it is read, a zero cap by `cmd_run`'s policy check), and the output
/// cap may be exactly the most a result frame carries.
#[test]
fn limits_name_the_waiters_keys() {
    let dir = temp_dir("limits");
    let path = dir.join("waiter.toml");
    let load = |text: &str| {
        std::fs::write(&path, text).unwrap();
        WaiterPolicy::load(Some(&path), None)
    };
    for key in ["timeout", "max_timeout", "output_cap_bytes"] {
        let error = load(&format!("{key} = 0\n")).unwrap_err();
        assert!(
            matches!(&error, WaiterConfigError::Invalid { key: named, problem, .. }
                if *named == key && problem.contains("must be greater than zero")),
            "{key}: {error:?}"
        );
    }
    let at_cap = load(&format!("output_cap_bytes = {MAX_OUTPUT_CAP_BYTES}\n")).unwrap();
    assert_eq!(at_cap.1.cmd.output_cap_bytes, MAX_OUTPUT_CAP_BYTES);
    let above = load(&format!(
        "output_cap_bytes = {}\n",
        MAX_OUTPUT_CAP_BYTES + 1
    ))
    .unwrap_err();
    assert!(
        matches!(
            &above,
            WaiterConfigError::Invalid {
                key: "output_cap_bytes",
                ..
            }
        ),
        "{above:?}"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

/// The start-up line says what the device will run.
#[test]
fn the_summary_says_what_the_device_runs() {
    let configured = policy_from_toml(
        "device_cmd_allowlist = [\"echo\", \"ls\"]\ntimeout = \"1500ms\"\nmax_timeout = 60\n\
         output_cap_bytes = 100\n",
    );
    assert_eq!(
        configured.summary(),
        "commands allowed: device_cmd_allowlist (2 programs: echo, ls); writes refused; \
         timeout 1.5 s (at most 60 s); output cap 100 bytes per stream"
    );
    let writes = policy_from_toml("allow_writes = true\n");
    let summary = writes.summary();
    assert!(
        summary.starts_with("commands allowed: built-in list ("),
        "{summary}"
    );
    assert!(summary.contains("; writes allowed;"), "{summary}");

    let dir = temp_dir("summary");
    let path = dir.join("waiter.toml");
    std::fs::write(&path, "device_cmd_allowlist = [\"echo\"]\n").unwrap();
    let (_, refusing) = WaiterPolicy::load(Some(&path), Some(false)).unwrap();
    assert_eq!(
        refusing.summary(),
        "device_authorized = false: every command is refused"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

/// A program that a signal ends ran (status ok) and has no exit code; the
/// detail names the signal.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_program_killed_by_a_signal_says_so() {
    let (mut ws, waiter, _l) =
        bound_waiter(policy_from_toml("device_cmd_allowlist = [\"sleep\"]\n")).await;
    // A duration no other test uses, to find this very child in /proc.
    let killer = tokio::spawn(async {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            if let Some(pid) = process_with_cmdline(b"sleep\x0031.73\x00") {
                let killed = std::process::Command::new("kill")
                    .args(["-KILL", &pid.to_string()])
                    .status()
                    .unwrap();
                assert!(killed.success());
                return;
            }
            assert!(Instant::now() < deadline, "the waiter never started sleep");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    });
    let outcome = run(&mut ws, 1, "sleep 31.73", 60_000).await;
    killer.await.unwrap();
    assert!(outcome.is_ok(), "{outcome:?}");
    assert_eq!(outcome.exit_code, None);
    assert_eq!(outcome.detail, "the program was killed by signal 9");
    waiter.abort();
}

/// The pid of a process whose whole command line is `cmdline`.
fn process_with_cmdline(cmdline: &[u8]) -> Option<u32> {
    std::fs::read_dir("/proc")
        .ok()?
        .flatten()
        .find_map(|entry| {
            let pid: u32 = entry.file_name().to_str()?.parse().ok()?;
            (std::fs::read(entry.path().join("cmdline")).ok()? == cmdline).then_some(pid)
        })
}
