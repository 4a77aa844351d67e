#![allow(clippy::unwrap_used, clippy::expect_used)] // a panic in a test is a test failure
//! One input at a time per session, across processes: a session whose
//! input runs in one process is refused to every other (its calls in flight
//! would look crashed to them, and a repair would answer them `cancelled`
//! while they still run), and a process that dies gives its sessions back.
//!
//! The crash test re-runs this test binary as the holder
//! (`child_claim_holder`, ignored unless asked for by name).

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::Arc;

use crate::common;

use common::{TempDir, local_runtime};
use homeagent_agent::store::{Store, StoreError};
use homeagent_agent::{AgentSettings, DemoModel, Frame, FrameSink, TurnControl, TurnInput};
use homeagent_core::Message;

fn busy(result: Result<impl std::fmt::Debug, StoreError>, session: &str) {
    match result {
        Err(StoreError::SessionBusy { id }) => assert_eq!(id, session),
        other => panic!("expected SessionBusy for {session}, got {other:?}"),
    }
}

#[test]
fn a_claimed_session_is_refused_until_its_claim_is_dropped() {
    let dir = TempDir::new("basic");
    let store = Store::open(&dir.db()).unwrap();
    // A second handle on the file stands for another process: the claim is
    // the operating system's, not this handle's.
    let other = Store::open(&dir.db()).unwrap();

    let claim = store.claim_session("s").unwrap();
    busy(other.claim_session("s"), "s");
    busy(store.claim_session("s"), "s");
    // Other sessions are free.
    let t = other.claim_session("t").unwrap();
    drop(claim);
    let again = other.claim_session("s").unwrap();
    drop((again, t));
    // Claims are locks on bytes of one empty file, not a file each: a
    // session opened costs no inode.
    let claims = store.claims_file();
    assert_eq!(std::fs::metadata(claims).unwrap().len(), 0);
    let beside: Vec<_> = std::fs::read_dir(dir.db().parent().unwrap())
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| {
            p.to_string_lossy().contains("claim") || p.extension().is_some_and(|e| e == "lock")
        })
        .collect();
    assert_eq!(beside, [claims.to_owned()]);
    // The session id rule applies, so no id can name a path elsewhere.
    assert!(matches!(
        store.claim_session("../x"),
        Err(StoreError::InvalidSessionId { .. })
    ));
}

#[test]
fn a_process_that_dies_holding_a_claim_gives_it_back() {
    let dir = TempDir::new("crash");
    let store = Store::open(&dir.db()).unwrap();
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            // libtest names it by its module path within tests/it.rs.
            &format!(
                "{}::child_claim_holder",
                module_path!().trim_start_matches("it::")
            ),
            "--ignored",
            "--nocapture",
        ])
        .env(CHILD_DB, dir.db())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap();
    let stdout = child.stdout.take().unwrap();
    let mut lines = BufReader::new(stdout).lines();
    loop {
        let line = lines
            .next()
            .expect("the child exited before claiming")
            .unwrap();
        if line.trim() == "CLAIMED" {
            break;
        }
    }
    busy(store.claim_session("held"), "held");
    child.kill().unwrap(); // SIGKILL: no destructor runs
    child.wait().unwrap();
    let _held = store.claim_session("held").unwrap();
}

const CHILD_DB: &str = "HOMEAGENT_CLAIM_TEST_DB";

/// The crash test's holder: claims "held" and waits to be killed.
#[test]
#[ignore = "run by a_process_that_dies_holding_a_claim_gives_it_back as a child process"]
fn child_claim_holder() {
    let Ok(db) = std::env::var(CHILD_DB) else {
        return;
    };
    let store = Store::open(Path::new(&db)).unwrap();
    let _claim = store.claim_session("held").unwrap();
    println!("CLAIMED");
    // Bounded so an orphaned child cannot run forever.
    std::thread::sleep(std::time::Duration::from_secs(60));
}

/// The agent claims a session for the whole input: an input for a session
/// claimed elsewhere fails with `session_busy` and stores nothing.
#[tokio::test]
async fn an_input_for_a_session_running_elsewhere_is_refused_and_stores_nothing() {
    let dir = TempDir::new("runtime");
    let store = Arc::new(Store::open(&dir.db()).unwrap());
    let runtime = local_runtime(
        Arc::new(DemoModel::default()),
        Arc::clone(&store),
        AgentSettings::default(),
    );
    let sink: FrameSink = Arc::new(|_| {});
    let input = |text: &str| TurnInput {
        session: "shared".into(),
        agent: "main".into(),
        text: text.into(),
    };
    let first = runtime
        .run(&input("hello"), &TurnControl::default(), &sink)
        .await;
    assert!(matches!(first, Frame::Response { .. }), "{first:?}");
    let before = store.history("shared").unwrap();

    let elsewhere = Store::open(&dir.db()).unwrap();
    let claim = elsewhere.claim_session("shared").unwrap();
    let refused = runtime
        .run(&input("while busy"), &TurnControl::default(), &sink)
        .await;
    match &refused {
        Frame::Error { code, message } => {
            assert_eq!(code, "session_busy", "{message}");
            assert!(message.contains("shared"), "{message}");
        }
        other => panic!("expected an error frame, got {other:?}"),
    }
    assert_eq!(store.history("shared").unwrap(), before);

    drop(claim);
    let after = runtime
        .run(&input("free again"), &TurnControl::default(), &sink)
        .await;
    assert!(matches!(after, Frame::Response { .. }), "{after:?}");
    let history = store.history("shared").unwrap();
    assert_eq!(history.len(), before.len() + 2);
    assert_eq!(history[before.len()], Message::user("free again"));
}

/// Two handles in one process exclude each other as two processes do (the
/// lock belongs to the handle's open file, not to the process).
#[test]
fn two_handles_in_one_process_exclude_each_other() {
    let dir = TempDir::new("handles");
    let first = Store::open(&dir.db()).unwrap();
    let second = Store::open(&dir.db()).unwrap();
    let held = first.claim_session("x").unwrap();
    busy(second.claim_session("x"), "x");
    let y = second.claim_session("y").unwrap();
    busy(first.claim_session("y"), "y");
    drop(held);
    let _x = second.claim_session("x").unwrap();
    drop(y);
    let _y = first.claim_session("y").unwrap();
}

/// A session an input holds (in this process or another) is not deleted
/// under it: the delete is refused as busy, and the input's next write
/// does not fail on a session that vanished ("does not exist"), its
/// reply lost. Once the input ends, the delete goes through.
#[test]
fn a_claimed_session_is_not_deleted_under_its_input() {
    let dir = TempDir::new("delete-held");
    let store = Store::open(&dir.db()).unwrap();
    let other = Store::open(&dir.db()).unwrap();
    store.ensure_session("held", "main").unwrap();
    let claim = store.claim_session("held").unwrap();
    busy(other.delete_session("held"), "held");
    assert!(store.session("held").unwrap().is_some());
    drop(claim);
    assert!(other.delete_session("held").unwrap());
    drop(other.claim_session("held").unwrap());
}

/// An input for a session another agent owns fails with
/// `session_conflict` (which the HTTP API answers with 409), names the
/// session, and stores nothing.
#[tokio::test]
async fn an_input_for_another_agents_session_is_refused_as_a_conflict() {
    let dir = TempDir::new("runtime");
    let store = Arc::new(Store::open(&dir.db()).unwrap());
    store.ensure_session("theirs", "other").unwrap();
    let runtime = local_runtime(
        Arc::new(DemoModel::default()),
        Arc::clone(&store),
        AgentSettings::default(),
    );
    let sink: FrameSink = Arc::new(|_| {});
    let input = TurnInput {
        session: "theirs".into(),
        agent: "main".into(),
        text: "hello".into(),
    };
    match runtime.run(&input, &TurnControl::default(), &sink).await {
        Frame::Error { code, message } => {
            assert_eq!(code, "session_conflict", "{message}");
            assert!(message.contains("theirs"), "{message}");
        }
        other => panic!("expected an error frame, got {other:?}"),
    }
    assert!(store.history("theirs").unwrap().is_empty());
}
