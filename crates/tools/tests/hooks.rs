#![allow(clippy::unwrap_used, clippy::expect_used)] // a panic in a test is a test failure

//! Command hooks with real shell scripts in temp dirs, attached to a real
//! executor: the model's path (a batch) and the programmatic path
//! ([`ToolApi`], which sequences and `mcp-serve` use).

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use homeagent_core::{
    AssembledCall, AssembledTurn, BatchContext, CancellationToken, ErrorReason, Executor, Registry,
    ToolCall, ToolContext, ToolDef, ToolError, ToolOutcome,
};
use homeagent_tools::hooks::{CommandHookSpec, HookSpecError, command_hooks};
use homeagent_tools::{Approval, ToolApi};
use serde_json::{Map, Value, json};

/// A temp dir with the hook scripts of one test; removed on drop.
struct Dir(PathBuf);

impl Dir {
    fn new(tag: &str) -> Self {
        static N: AtomicUsize = AtomicUsize::new(0);
        let dir = std::env::temp_dir().join(format!(
            "homeagent-hooks-{tag}-{}-{}",
            std::process::id(),
            N.fetch_add(1, Ordering::SeqCst)
        ));
        std::fs::create_dir_all(&dir).unwrap();
        Dir(dir)
    }

    fn path(&self, name: &str) -> PathBuf {
        self.0.join(name)
    }

    /// A hook script; the command runs it with `sh`.
    fn script(&self, name: &str, body: &str) -> String {
        let path = self.path(name);
        std::fs::write(&path, body).unwrap();
        format!("sh '{}'", path.display())
    }

    fn read_json(&self, name: &str) -> Value {
        serde_json::from_str(&std::fs::read_to_string(self.path(name)).unwrap()).unwrap()
    }
}

impl Drop for Dir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// What reached the handler of `note` (its `text`), and a tool that fails.
#[derive(Default)]
struct Seen(Mutex<Vec<String>>);

fn registry(seen: &Arc<Seen>) -> Arc<Registry> {
    let registry = Arc::new(Registry::new());
    let s = seen.clone();
    registry
        .register(
            ToolDef::new("note", "keeps a note").with_parameters(json!({
                "type": "object",
                "properties": {"text": {"type": "string"}},
                "required": ["text"]
            })),
            move |ctx: ToolContext| {
                let s = s.clone();
                async move {
                    let text = ctx.arguments["text"].as_str().unwrap_or("").to_owned();
                    s.0.lock().unwrap().push(text.clone());
                    Ok::<Value, ToolError>(json!({"noted": text}))
                }
            },
        )
        .unwrap();
    registry
        .register(
            ToolDef::new("broken", "always fails"),
            |_ctx: ToolContext| async {
                Err::<Value, ToolError>(ToolError::execution("the disk is full"))
            },
        )
        .unwrap();
    registry
}

fn spec(command: String) -> CommandHookSpec {
    CommandHookSpec::new(command)
}

fn executor(
    seen: &Arc<Seen>,
    pre: &[CommandHookSpec],
    post: &[CommandHookSpec],
    approval: Approval,
) -> Executor {
    let hooks = command_hooks(pre, post, approval).unwrap();
    hooks.attach(Executor::new(registry(seen)))
}

async fn run(executor: &Executor, tool: &str, args: Value) -> ToolOutcome {
    run_until(executor, tool, args, CancellationToken::new()).await
}

/// [`run`], stopped when `cancel` fires.
async fn run_until(
    executor: &Executor,
    tool: &str,
    args: Value,
    cancel: CancellationToken,
) -> ToolOutcome {
    let turn = AssembledTurn {
        calls: vec![AssembledCall {
            call: ToolCall {
                id: "call_7".into(),
                name: tool.into(),
                arguments: args.clone(),
                raw_arguments: args.to_string(),
            },
            argument_error: None,
        }],
        ..AssembledTurn::default()
    };
    let mut extras = Map::new();
    extras.insert("agent".into(), json!("main"));
    extras.insert("session".into(), json!("s1"));
    let batch = BatchContext {
        batch_id: "b1".into(),
        extras: extras.into(),
        cancel,
    };
    executor.run(&turn, &batch).await.outcomes.pop().unwrap()
}

#[tokio::test]
async fn exit_2_denies_with_stderr_as_the_reason_and_the_hook_sees_the_call() {
    let dir = Dir::new("exit2");
    let stdin = dir.path("stdin.json");
    let env = dir.path("env.txt");
    let command = dir.script(
        "deny.sh",
        &format!(
            "cat > '{}'\nenv > '{}'\necho 'no notes today' >&2\nexit 2\n",
            stdin.display(),
            env.display()
        ),
    );
    let mut hook = spec(command);
    hook.env.insert("HOOK_MARK".into(), "yes".into());
    let seen = Arc::new(Seen::default());
    let executor = executor(&seen, &[hook], &[], Approval::Refused);
    let outcome = run(&executor, "note", json!({"text": "hello"})).await;
    let error = outcome.error.unwrap();
    assert_eq!(error.reason, ErrorReason::Denied);
    assert_eq!(error.detail, "no notes today");
    assert!(outcome.text.contains("no notes today"));
    assert!(seen.0.lock().unwrap().is_empty(), "a denied call ran");
    assert_eq!(
        dir.read_json("stdin.json"),
        json!({
            "hook_event_name": "PreToolUse",
            "session_id": "s1",
            "tool_name": "note",
            "tool_input": {"text": "hello"},
            "tool_use_id": "call_7"
        })
    );
    let env = std::fs::read_to_string(&env).unwrap();
    let names: Vec<&str> = env
        .lines()
        .filter_map(|l| l.split_once('='))
        .map(|(k, _)| k)
        .collect();
    assert!(env.lines().any(|l| l == "HOMEAGENT_SESSION_ID=s1"), "{env}");
    assert!(env.lines().any(|l| l == "HOOK_MARK=yes"), "{env}");
    // Nothing of the test process's own environment but PATH and HOME (the
    // example configuration's hook lives under `$HOME`).
    assert!(!names.contains(&"CARGO_MANIFEST_DIR"), "{env}");
    let home = std::env::var("HOME").expect("the tests run with HOME set");
    assert!(env.lines().any(|l| l == format!("HOME={home}")), "{env}");
}

#[tokio::test]
async fn a_json_deny_refuses_and_other_exit_codes_do_not_block() {
    let dir = Dir::new("json");
    let deny = dir.script(
        "deny.sh",
        r#"echo '{"hookSpecificOutput":{"hookEventName":"PreToolUse","permissionDecision":"deny","permissionDecisionReason":"json says no"}}'"#,
    );
    let seen = Arc::new(Seen::default());
    let outcome = run(
        &executor(&seen, &[spec(deny)], &[], Approval::Refused),
        "note",
        json!({"text": "a"}),
    )
    .await;
    let error = outcome.error.unwrap();
    assert_eq!(error.reason, ErrorReason::Denied);
    assert_eq!(error.detail, "json says no");

    let broken = dir.script("broken.sh", "echo oops >&2\nexit 1\n");
    let outcome = run(
        &executor(&seen, &[spec(broken)], &[], Approval::Refused),
        "note",
        json!({"text": "b"}),
    )
    .await;
    assert!(outcome.success, "{}", outcome.text);
    assert_eq!(*seen.0.lock().unwrap(), vec!["b".to_owned()]);
    // Non-blocking, but on the outcome and in what the model reads.
    let warning = "pre-tool hook pre_tool_use[0] exited with code 1 (only 0 allows and 2 denies): oops; the call ran anyway";
    assert_eq!(outcome.warnings, vec![warning.to_owned()]);
    assert_eq!(
        outcome.text,
        format!("{}\n\nwarning: {warning}", json!({"noted": "b"}))
    );
}

/// A hook that cannot be run at all (a mistyped path: the shell exits 127;
/// a file that is not executable: 126) has no verdict to give. It fails
/// closed, like a hook that cannot start, instead of letting every call
/// through with a warning.
#[tokio::test]
async fn a_hook_that_cannot_be_run_denies() {
    let dir = Dir::new("missing");
    let plain = dir.path("plain.sh");
    std::fs::write(&plain, "exit 0\n").unwrap();
    let mut permissions = std::fs::metadata(&plain).unwrap().permissions();
    std::os::unix::fs::PermissionsExt::set_mode(&mut permissions, 0o644);
    std::fs::set_permissions(&plain, permissions).unwrap();
    let not_executable = format!("'{}'", plain.display());
    let seen = Arc::new(Seen::default());
    for (command, code) in [
        ("/nonexistent/policy-hook.sh".to_owned(), 127),
        (not_executable, 126),
    ] {
        let outcome = run(
            &executor(&seen, &[spec(command.clone())], &[], Approval::Refused),
            "note",
            json!({"text": "a"}),
        )
        .await;
        let error = outcome.error.expect("the call must be denied");
        assert_eq!(error.reason, ErrorReason::Denied, "{command}");
        assert!(
            error.detail.contains(&format!("exited {code}")),
            "{command}: {}",
            error.detail
        );
    }
    assert!(seen.0.lock().unwrap().is_empty(), "a call ran");
}

/// A hook killed by a signal (the OOM killer, a crash) gave no verdict:
/// it fails closed like one that cannot run, instead of letting the call
/// through with a warning (a policy hook that crashes must not be a way
/// around it).
#[tokio::test]
async fn a_hook_killed_by_a_signal_denies() {
    let seen = Arc::new(Seen::default());
    let outcome = run(
        &executor(
            &seen,
            &[spec("kill -KILL $$".to_owned())],
            &[],
            Approval::Refused,
        ),
        "note",
        json!({"text": "a"}),
    )
    .await;
    let error = outcome.error.expect("the call must be denied");
    assert_eq!(error.reason, ErrorReason::Denied);
    assert!(error.detail.contains("signal"), "{}", error.detail);
    assert!(seen.0.lock().unwrap().is_empty(), "the call ran");
}

/// Output that starts like JSON but is not (a missing brace, a stray
/// quote) may be a deny the hook meant to give: it fails closed, naming the
/// parse error, instead of reading as "no decision" and allowing.
#[tokio::test]
async fn a_pre_hook_printing_broken_json_denies() {
    let dir = Dir::new("broken-json");
    let broken = dir.script(
        "broken.sh",
        r#"echo '{"hookSpecificOutput":{"permissionDecision":"deny"}'"#,
    );
    let seen = Arc::new(Seen::default());
    let outcome = run(
        &executor(&seen, &[spec(broken)], &[], Approval::Refused),
        "note",
        json!({"text": "a"}),
    )
    .await;
    let error = outcome.error.expect("the call must be refused");
    assert_eq!(error.reason, ErrorReason::Denied);
    assert!(error.detail.contains("not valid JSON"), "{}", error.detail);
    assert!(seen.0.lock().unwrap().is_empty(), "the call ran");
    // Plain text is not a decision: the call runs.
    let plain = dir.script("plain.sh", "echo checked");
    let outcome = run(
        &executor(&seen, &[spec(plain)], &[], Approval::Refused),
        "note",
        json!({"text": "b"}),
    )
    .await;
    assert!(outcome.success, "{}", outcome.text);
}

/// JSON that a hook printed is read strictly: a decision in another shape
/// than the one read (the older `decision: block`, a top-level
/// `permissionDecision`, a misspelled `hookSpecificOutput`, a decision
/// that is not a string) was taken as no decision, and the call ran. Now
/// the older `block` denies with its reason, and every other mistake
/// denies naming the key, as broken JSON does.
#[tokio::test]
async fn a_pre_hooks_json_is_read_strictly_and_a_misplaced_decision_denies() {
    let dir = Dir::new("strict-json");
    let seen = Arc::new(Seen::default());
    let denied = |printed: &str| {
        let script = dir.script(
            &format!("hook{}.sh", printed.len()),
            &format!("cat > /dev/null\necho '{printed}'"),
        );
        let executor = executor(&seen, &[spec(script)], &[], Approval::Refused);
        async move {
            let outcome = run(&executor, "note", json!({"text": "x"})).await;
            let error = outcome.error.expect("the call must be refused");
            assert_eq!(error.reason, ErrorReason::Denied);
            error.detail
        }
    };
    assert_eq!(
        denied(r#"{"decision":"block","reason":"not on weekends"}"#).await,
        "not on weekends"
    );
    assert_eq!(
        denied(r#"{"continue":false,"stopReason":"maintenance"}"#).await,
        "maintenance"
    );
    for (printed, named) in [
        (
            r#"{"permissionDecision":"deny"}"#,
            "`permissionDecision` (it belongs inside hookSpecificOutput)",
        ),
        (
            r#"{"hookSpecificOuput":{"permissionDecision":"deny"}}"#,
            "`hookSpecificOuput` (did you mean `hookSpecificOutput`?)",
        ),
        (
            r#"{"hookSpecificOutput":{"permisionDecision":"deny"}}"#,
            "`hookSpecificOutput.permisionDecision` (did you mean `permissionDecision`?)",
        ),
        (
            r#"{"hookSpecificOutput":{"permissionDecision":1}}"#,
            "permissionDecision 1",
        ),
        (r#"{"hookSpecificOutput":"deny"}"#, "`hookSpecificOutput`"),
        (r#"{"decision":"deny"}"#, "decision \"deny\""),
    ] {
        let detail = denied(printed).await;
        assert!(detail.contains(named), "{printed}: {detail}");
    }
    assert!(seen.0.lock().unwrap().is_empty(), "a call ran");
    // What the protocol says besides a decision is fine.
    let allowed = dir.script(
        "allowed.sh",
        r#"echo '{"continue":true,"suppressOutput":true,"systemMessage":"checked","decision":"approve","hookSpecificOutput":{"hookEventName":"PreToolUse","permissionDecision":"allow"}}'"#,
    );
    let outcome = run(
        &executor(&seen, &[spec(allowed)], &[], Approval::Refused),
        "note",
        json!({"text": "ok"}),
    )
    .await;
    assert!(outcome.success, "{}", outcome.text);
}

#[tokio::test]
async fn updated_input_is_validated_again() {
    let dir = Dir::new("rewrite");
    let good = dir.script(
        "good.sh",
        r#"echo '{"hookSpecificOutput":{"permissionDecision":"allow","updatedInput":{"text":"rewritten"}}}'"#,
    );
    let bad = dir.script(
        "bad.sh",
        r#"echo '{"hookSpecificOutput":{"updatedInput":{"note":"no text key"}}}'"#,
    );
    let seen = Arc::new(Seen::default());
    let outcome = run(
        &executor(&seen, &[spec(good)], &[], Approval::Refused),
        "note",
        json!({"text": "original"}),
    )
    .await;
    assert_eq!(outcome.value, json!({"noted": "rewritten"}));
    let outcome = run(
        &executor(&seen, &[spec(bad)], &[], Approval::Refused),
        "note",
        json!({"text": "original"}),
    )
    .await;
    let error = outcome.error.unwrap();
    assert_eq!(error.reason, ErrorReason::Required);
    assert!(
        error.detail.contains("after hook pre_tool_use[0] rewrote"),
        "{}",
        error.detail
    );
    assert_eq!(*seen.0.lock().unwrap(), vec!["rewritten".to_owned()]);
}

#[tokio::test]
async fn ask_goes_through_the_approval_policy() {
    let dir = Dir::new("ask");
    let ask = dir.script(
        "ask.sh",
        r#"echo '{"hookSpecificOutput":{"permissionDecision":"ask","permissionDecisionReason":"writes a note"}}'"#,
    );
    let seen = Arc::new(Seen::default());
    let refused = run(
        &executor(&seen, &[spec(ask.clone())], &[], Approval::Refused),
        "note",
        json!({"text": "a"}),
    )
    .await;
    let error = refused.error.unwrap();
    assert_eq!(error.reason, ErrorReason::Denied);
    assert!(error.detail.contains("(writes a note)"), "{}", error.detail);
    let granted = run(
        &executor(&seen, &[spec(ask)], &[], Approval::Granted),
        "note",
        json!({"text": "b"}),
    )
    .await;
    assert!(granted.success);
    assert_eq!(*seen.0.lock().unwrap(), vec!["b".to_owned()]);
}

/// Remembers what it was asked about, and says yes.
#[derive(Default)]
struct Asked(Mutex<Vec<Value>>);

impl homeagent_tools::Approver for Asked {
    fn approve(
        &self,
        _agent: &str,
        _tool: &str,
        args: &Value,
    ) -> std::pin::Pin<Box<dyn std::future::Future<Output = bool> + Send + 'static>> {
        self.0.lock().unwrap().push(args.clone());
        Box::pin(async { true })
    }
}

/// An `ask` that also rewrites the call asks about the call that will run,
/// not the one the model made: the person approved `a` and `rewritten` ran.
#[tokio::test]
async fn an_ask_with_updated_input_asks_about_what_will_run() {
    let dir = Dir::new("ask-rewrite");
    let ask = dir.script(
        "ask.sh",
        r#"echo '{"hookSpecificOutput":{"permissionDecision":"ask","updatedInput":{"text":"rewritten"}}}'"#,
    );
    let seen = Arc::new(Seen::default());
    let asked = Arc::new(Asked::default());
    let outcome = run(
        &executor(
            &seen,
            &[spec(ask)],
            &[],
            Approval::Ask(Arc::clone(&asked) as _),
        ),
        "note",
        json!({"text": "a"}),
    )
    .await;
    assert!(outcome.success, "{}", outcome.text);
    assert_eq!(*asked.0.lock().unwrap(), vec![json!({"text": "rewritten"})]);
    assert_eq!(*seen.0.lock().unwrap(), vec!["rewritten".to_owned()]);
}

/// A policy script whose checker died of a signal exits 128 + the
/// signal's number (the shell's way to say so): no verdict, so the call
/// is refused, as when the hook itself is killed. A `continue` that is
/// not a boolean may be a stop the hook meant: refused too, naming it.
#[tokio::test]
async fn a_signal_death_reported_by_the_shell_or_a_bad_continue_denies() {
    let dir = Dir::new("signal-exit");
    let seen = Arc::new(Seen::default());
    let crashed = dir.script("crashed.sh", "sh -c 'kill -KILL $$'\nexit $?\n");
    let said_stop = dir.script(
        "said-stop.sh",
        r#"echo '{"continue":"false","stopReason":"maintenance"}'"#,
    );
    for (hook, expected) in [(crashed, "signal"), (said_stop, "continue")] {
        let outcome = run(
            &executor(&seen, &[spec(hook.clone())], &[], Approval::Refused),
            "note",
            json!({"text": "a"}),
        )
        .await;
        let error = outcome
            .error
            .unwrap_or_else(|| panic!("{hook}: the call ran"));
        assert_eq!(error.reason, ErrorReason::Denied, "{hook}");
        assert!(error.detail.contains(expected), "{hook}: {}", error.detail);
    }
    assert!(seen.0.lock().unwrap().is_empty(), "a call ran");
}

#[tokio::test]
async fn a_hanging_hook_is_killed_with_what_it_started_and_the_call_refused() {
    let dir = Dir::new("hang");
    let pid_file = dir.path("sleep.pid");
    let command = dir.script(
        "hang.sh",
        &format!("sleep 30 &\necho $! > '{}'\nwait\n", pid_file.display()),
    );
    let mut hook = spec(command);
    hook.timeout = Duration::from_millis(500);
    let seen = Arc::new(Seen::default());
    let started = Instant::now();
    let outcome = run(
        &executor(&seen, &[hook], &[], Approval::Refused),
        "note",
        json!({"text": "a"}),
    )
    .await;
    assert!(started.elapsed() >= Duration::from_millis(500));
    let error = outcome.error.unwrap();
    assert_eq!(error.reason, ErrorReason::Denied);
    assert!(
        error
            .detail
            .contains("did not finish within 500ms and was killed"),
        "{}",
        error.detail
    );
    assert!(seen.0.lock().unwrap().is_empty());
    let pid = std::fs::read_to_string(&pid_file)
        .unwrap()
        .trim()
        .to_owned();
    assert!(
        process_gone(&pid).await,
        "the hook's child {pid} still runs"
    );
}

/// Nothing a hook started outlives it: a hook that exits leaving a
/// program in the background takes it along (invariant 9), pre and post.
#[tokio::test]
async fn what_a_finished_hook_left_running_is_killed() {
    let dir = Dir::new("left");
    for post in [false, true] {
        let pid_file = dir.path(&format!("left-{post}.pid"));
        let command = dir.script(
            &format!("left-{post}.sh"),
            &format!(
                "sleep 30 >/dev/null 2>&1 &\necho $! > '{}'\nexit 0\n",
                pid_file.display()
            ),
        );
        let seen = Arc::new(Seen::default());
        let hooks = [spec(command)];
        let (pre, post_hooks): (&[CommandHookSpec], &[CommandHookSpec]) =
            if post { (&[], &hooks) } else { (&hooks, &[]) };
        let outcome = run(
            &executor(&seen, pre, post_hooks, Approval::Refused),
            "note",
            json!({"text": "a"}),
        )
        .await;
        assert!(outcome.success, "post {post}: {outcome:?}");
        let pid = std::fs::read_to_string(&pid_file)
            .unwrap()
            .trim()
            .to_owned();
        assert!(
            process_gone(&pid).await,
            "post {post}: the hook's child {pid} still runs"
        );
    }
}

/// A stopped batch stops the hook it is waiting on at once, with what the
/// hook started, not only the shell: a pre-hook's call is `cancelled`, a
/// post-hook's result is kept with a warning. (Were the stop not heard,
/// the hook's 60 s timeout would end it: `Denied`, or a timeout warning.)
#[tokio::test]
async fn a_stop_kills_a_running_hook_and_what_it_started() {
    let dir = Dir::new("stopped");
    for post in [false, true] {
        let pid_file = dir.path(&format!("sleep-{post}.pid"));
        let command = dir.script(
            &format!("slow-{post}.sh"),
            &format!("sleep 600 &\necho $! > '{}'\nwait\n", pid_file.display()),
        );
        let mut hook = spec(command);
        hook.timeout = Duration::from_secs(60);
        let hooks = [hook];
        let (pre, post_hooks): (&[CommandHookSpec], &[CommandHookSpec]) =
            if post { (&[], &hooks) } else { (&hooks, &[]) };
        let seen = Arc::new(Seen::default());
        let executor = executor(&seen, pre, post_hooks, Approval::Refused);
        let cancel = CancellationToken::new();
        let stopper = async {
            for _ in 0..400 {
                if std::fs::read_to_string(&pid_file).is_ok_and(|t| t.ends_with('\n')) {
                    break;
                }
                tokio::time::sleep(Duration::from_millis(25)).await;
            }
            cancel.cancel();
        };
        let (outcome, ()) = tokio::join!(
            run_until(&executor, "note", json!({"text": "x"}), cancel.clone()),
            stopper
        );
        if post {
            assert!(outcome.success, "{outcome:?}");
            assert_eq!(*seen.0.lock().unwrap(), vec!["x".to_owned()]);
            assert!(
                outcome
                    .warnings
                    .iter()
                    .any(|w| w.contains("stopped with the batch")),
                "{outcome:?}"
            );
        } else {
            let reason = outcome.error.as_ref().map(|e| e.reason);
            assert_eq!(reason, Some(ErrorReason::Cancelled), "{outcome:?}");
            assert!(seen.0.lock().unwrap().is_empty());
        }
        let pid = std::fs::read_to_string(&pid_file)
            .unwrap()
            .trim()
            .to_owned();
        assert!(
            process_gone(&pid).await,
            "post {post}: the stopped hook's child {pid} still runs"
        );
    }
}

/// The older `decision: "block"` of a post-hook flags the result as exit
/// 2 does; a misspelled key in its JSON is named on the outcome.
#[tokio::test]
async fn a_post_hooks_block_flags_the_result_and_a_typo_is_named() {
    let dir = Dir::new("post-json");
    let seen = Arc::new(Seen::default());
    for (printed, mark) in [
        (
            r#"{"decision":"block","reason":"secrets in the output"}"#,
            "flagged the result: secrets in the output",
        ),
        (
            r#"{"hookSpecificOutput":{"additionalContxt":"x"}}"#,
            "printed JSON with an unknown key `hookSpecificOutput.additionalContxt` (did you \
             mean `additionalContext`?)",
        ),
    ] {
        let command = dir.script(
            &format!("post{}.sh", printed.len()),
            &format!("cat > /dev/null\necho '{printed}'"),
        );
        let outcome = run(
            &executor(&seen, &[], &[spec(command)], Approval::Refused),
            "note",
            json!({"text": "x"}),
        )
        .await;
        assert!(outcome.success, "{}", outcome.text);
        assert_eq!(outcome.warnings.len(), 1, "{:?}", outcome.warnings);
        assert!(
            outcome.warnings[0]
                .starts_with(&format!("post-tool hook post_tool_use[0] failed: {mark}")),
            "{}",
            outcome.warnings[0]
        );
    }
}

/// What a hook prints is kept only up to a bound: a hook that echoes a
/// large result to stderr, or runs away printing, must not bring all of it
/// into memory, the refusal, the warning and what the model reads.
#[tokio::test]
async fn a_hooks_output_is_bounded() {
    let dir = Dir::new("bounded");
    let seen = Arc::new(Seen::default());
    let loud_deny = dir.script(
        "loud.sh",
        "cat > /dev/null\nhead -c 3000000 /dev/zero | tr '\\0' 'e' >&2\nexit 2\n",
    );
    let outcome = run(
        &executor(&seen, &[spec(loud_deny)], &[], Approval::Refused),
        "note",
        json!({"text": "x"}),
    )
    .await;
    let error = outcome.error.expect("refused");
    assert_eq!(error.reason, ErrorReason::Denied);
    assert_eq!(
        error.detail,
        format!(
            "{}…",
            "e".repeat(homeagent_tools::hooks::MAX_HOOK_STDERR_BYTES)
        )
    );
    let flood = dir.script(
        "flood.sh",
        "cat > /dev/null\nhead -c 3000000 /dev/zero | tr '\\0' '{'\n",
    );
    let outcome = run(
        &executor(&seen, &[spec(flood)], &[], Approval::Refused),
        "note",
        json!({"text": "y"}),
    )
    .await;
    let error = outcome.error.expect("refused");
    assert_eq!(
        error.detail,
        format!(
            "pre-tool hook pre_tool_use[0] failed: printed more than {} bytes on stdout; a \
             hook prints one JSON object or a line of text; the call was not run (hooks fail \
             closed)",
            homeagent_tools::hooks::MAX_HOOK_STDOUT_BYTES
        )
    );
    assert!(seen.0.lock().unwrap().is_empty());
}

#[tokio::test]
async fn a_post_hook_sees_a_failed_call_and_its_exit_2_marks_the_outcome() {
    let dir = Dir::new("post");
    let stdin = dir.path("post.json");
    let command = dir.script(
        "post.sh",
        &format!(
            "cat > '{}'\necho 'looked wrong' >&2\nexit 2\n",
            stdin.display()
        ),
    );
    let seen = Arc::new(Seen::default());
    let outcome = run(
        &executor(&seen, &[], &[spec(command)], Approval::Refused),
        "broken",
        json!({}),
    )
    .await;
    assert!(!outcome.success);
    assert_eq!(
        dir.read_json("post.json"),
        json!({
            "hook_event_name": "PostToolUse",
            "session_id": "s1",
            "tool_name": "broken",
            "tool_input": {},
            "tool_use_id": "call_7",
            "tool_response": {"reason": "execution", "detail": "the disk is full"},
            "success": false
        })
    );
    let mark = "post-tool hook post_tool_use[0] failed: flagged the result: looked wrong; the result was kept as the tool returned it";
    assert_eq!(outcome.warnings, vec![mark.to_owned()]);
    // The model reads the mark after the failure.
    assert!(
        outcome.text.ends_with(&format!("\n\nwarning: {mark}")),
        "{}",
        outcome.text
    );
}

#[tokio::test]
async fn a_hanging_post_hook_is_killed_and_recorded_on_the_outcome() {
    let dir = Dir::new("posthang");
    let mut hook = spec(dir.script("hang.sh", "sleep 30\n"));
    hook.timeout = Duration::from_millis(300);
    let seen = Arc::new(Seen::default());
    let outcome = run(
        &executor(&seen, &[], &[hook], Approval::Refused),
        "note",
        json!({"text": "a"}),
    )
    .await;
    assert!(outcome.success, "{}", outcome.text);
    assert_eq!(
        outcome.warnings,
        vec!["post-tool hook post_tool_use[0] failed: did not finish within 300ms and was killed; the result was kept as the tool returned it".to_owned()]
    );
}

#[tokio::test]
async fn a_post_hook_adds_context_and_matchers_pick_tools() {
    let dir = Dir::new("context");
    let context = dir.script(
        "ctx.sh",
        r#"echo '{"hookSpecificOutput":{"hookEventName":"PostToolUse","additionalContext":"remember to tidy up"}}'"#,
    );
    let marker = dir.path("ran");
    let other = dir.script("other.sh", &format!("touch '{}'\n", marker.display()));
    let mut post = spec(context);
    post.matcher = "note|files_.*".into();
    let mut pre = spec(other);
    pre.matcher = "broken".into();
    let seen = Arc::new(Seen::default());
    let outcome = run(
        &executor(&seen, &[pre], &[post], Approval::Refused),
        "note",
        json!({"text": "x"}),
    )
    .await;
    assert_eq!(
        outcome.value,
        json!({"noted": "x", "additional_context": "remember to tidy up"})
    );
    assert!(
        !marker.exists(),
        "a hook ran for a tool its matcher excludes"
    );
}

/// The main agent's call to `note` through the programmatic path.
async fn note_through(api: &ToolApi) -> ToolOutcome {
    api.call(
        "main",
        "note",
        json!({"text": "x"}),
        Map::new(),
        CancellationToken::new(),
    )
    .await
}

#[tokio::test]
async fn a_pre_hook_fires_for_calls_through_the_tool_api() {
    let dir = Dir::new("api");
    let deny = dir.script("deny.sh", "echo 'not from code either' >&2\nexit 2\n");
    let seen = Arc::new(Seen::default());
    let api = ToolApi::new(Arc::new(executor(
        &seen,
        &[spec(deny)],
        &[],
        Approval::Refused,
    )));
    let outcome = note_through(&api).await;
    let error = outcome.error.unwrap();
    assert_eq!(error.reason, ErrorReason::Denied);
    assert_eq!(error.detail, "not from code either");
    assert!(seen.0.lock().unwrap().is_empty());
}

#[tokio::test]
async fn matchers_are_regular_expressions_on_the_whole_tool_name() {
    let dir = Dir::new("regex");
    let marker = dir.path("ran");
    let touch = dir.script("touch.sh", &format!("echo x >> '{}'\n", marker.display()));
    let seen = Arc::new(Seen::default());
    // Which of `note` and `broken` each matcher's hook sees.
    let cases: [(&str, [bool; 2]); 8] = [
        ("", [true, true]),
        ("*", [true, true]),
        (".*", [true, true]),
        ("note", [true, false]),
        ("not", [false, false]),
        ("note|broken", [true, true]),
        ("no(te|pe)", [true, false]),
        ("b.*n", [false, true]),
    ];
    for (matcher, expected) in cases {
        for (tool, want) in ["note", "broken"].into_iter().zip(expected) {
            let _ = std::fs::remove_file(&marker);
            let mut hook = spec(touch.clone());
            hook.matcher = matcher.into();
            let pre = executor(&seen, std::slice::from_ref(&hook), &[], Approval::Refused);
            run(&pre, tool, json!({"text": "x"})).await;
            assert_eq!(marker.exists(), want, "matcher {matcher:?} on {tool}");
            // What the runtime asks before holding read-only calls: the
            // hook says it sees exactly the calls it acts on.
            assert_eq!(pre.hooks_see(tool), want, "pre {matcher:?} on {tool}");
            let post = executor(&seen, &[], &[hook], Approval::Refused);
            assert_eq!(post.hooks_see(tool), want, "post {matcher:?} on {tool}");
        }
    }
}

#[test]
fn bad_entries_are_refused_at_load() {
    let mut fine = spec("true".into());
    fine.matcher = "note".into();
    let mut bad = spec("true".into());
    bad.matcher = "note(s".into();
    let error = command_hooks(&[fine], &[bad], Approval::Refused)
        .err()
        .unwrap();
    let HookSpecError::InvalidMatcher {
        hook,
        matcher,
        reason,
    } = &error
    else {
        panic!("{error:?}")
    };
    assert_eq!(hook, "post_tool_use[0]");
    assert_eq!(matcher, "note(s");
    assert!(!reason.is_empty());
    let message = error.to_string();
    assert!(
        message.starts_with("hook post_tool_use[0] has an invalid matcher `note(s`: "),
        "{message}"
    );
    assert_eq!(
        command_hooks(&[], &[spec(" ".into())], Approval::Refused)
            .err()
            .unwrap(),
        HookSpecError::EmptyCommand
    );
}

/// Whether `pid` is gone (polled: the kill is asynchronous).
async fn process_gone(pid: &str) -> bool {
    for _ in 0..100 {
        let alive = Path::new(&format!("/proc/{pid}")).exists()
            && !std::fs::read_to_string(format!("/proc/{pid}/stat"))
                .unwrap_or_default()
                .contains(") Z ");
        if !alive {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    false
}

/// A hook that echoes what it reads (`cat`, `tee -a calls.log`, the usual
/// logging hook) fills its stdout pipe while its input is still being
/// written: the input must be written while the output is read, or both
/// sides wait until the timeout and the call is refused.
#[tokio::test]
async fn a_hook_that_echoes_a_large_input_is_not_deadlocked() {
    let seen = Arc::new(Seen::default());
    let mut hook = spec("cat".into());
    // Far longer than the hook needs, short enough to fail fast.
    hook.timeout = Duration::from_secs(10);
    let exec = executor(&seen, &[hook], &[], Approval::Refused);
    let text = "x".repeat(300 * 1024);
    let outcome = run(&exec, "note", json!({"text": text})).await;
    assert!(outcome.success, "{}", outcome.text);
    assert_eq!(seen.0.lock().unwrap().len(), 1);
}

/// Hooks show up in logs and `config check` by the names errors use.
#[test]
fn hooks_show_their_names_in_config_order() {
    let hooks = command_hooks(
        &[spec("true".into()), spec("true".into())],
        &[spec("true".into())],
        Approval::Refused,
    )
    .unwrap();
    assert_eq!(
        format!("{hooks:?}"),
        r#"CommandHooks { pre: "pre_tool_use[0], pre_tool_use[1]", post: "post_tool_use[0]" }"#
    );
}

/// The programmatic path says which tools a hook sees (the sequence
/// engine runs a keyed call a hook may rewrite in order), and names each
/// call it makes apart from every other.
#[tokio::test]
async fn the_tool_api_knows_its_hooks_and_names_each_call_apart() {
    let mut watching = spec("true".into());
    watching.matcher = "note".into();
    let seen = Arc::new(Seen::default());
    let api = ToolApi::new(Arc::new(executor(
        &seen,
        &[watching],
        &[],
        Approval::Refused,
    )));
    assert!(api.hooks_see("note"));
    assert!(!api.hooks_see("notes_other"));
    let mut ids = Vec::new();
    for _ in 0..2 {
        let outcome = note_through(&api).await;
        assert!(outcome.success, "{}", outcome.text);
        ids.push(outcome.call_id);
    }
    assert_ne!(ids[0], ids[1]);
    assert_eq!(format!("{api:?}"), "ToolApi { .. }");
}
