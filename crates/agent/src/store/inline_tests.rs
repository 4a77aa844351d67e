//! Commits made on the async caller's worker (`Store::commit_inline`) and
//! the WAL checkpoints they put off (`checkpoint.rs`).
//!
//! Each test runs on a current-thread runtime: the one thread is the
//! worker, so anything that blocked it would stop every other task, and
//! a task spawned by a commit cannot run before the test yields.

#![allow(clippy::unwrap_used, clippy::expect_used)] // a panic in a test is a test failure

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use homeagent_core::Message;

use super::testing::{TempStore, temp_store_with};
use super::{CHECKPOINT_PAGES, CommitPlaces, Durability};

fn store(label: &str, durability: Durability) -> TempStore {
    let temp = temp_store_with(label, durability);
    temp.store.ensure_session("s", "main").unwrap();
    temp
}

async fn append(temp: &TempStore, text: &str) {
    temp.store
        .append_async("s", &[Message::user(text)], Vec::new())
        .await
        .unwrap();
}

fn stored(temp: &TempStore) -> Vec<Message> {
    temp.store.history("s").unwrap()
}

/// Another thread holding the store's connection until released (or for
/// at most 2 s, so a worker blocked on it fails the test, not hangs it).
struct ConnectionHolder {
    release: std::sync::mpsc::Sender<()>,
    thread: std::thread::JoinHandle<()>,
}

impl ConnectionHolder {
    /// Returns once the connection is held.
    fn start(temp: &TempStore) -> ConnectionHolder {
        let (held, release) = (
            std::sync::mpsc::channel::<()>(),
            std::sync::mpsc::channel::<()>(),
        );
        let store = Arc::clone(&temp.store);
        let thread = std::thread::spawn(move || {
            let _conn = store.lock();
            held.0.send(()).unwrap();
            let _ = release.1.recv_timeout(Duration::from_secs(2));
        });
        held.1.recv().unwrap();
        ConnectionHolder {
            release: release.0,
            thread,
        }
    }

    fn release(self) {
        let _ = self.release.send(());
        self.thread.join().unwrap();
    }
}

#[tokio::test]
async fn with_normal_sync_a_commit_runs_on_the_worker_and_with_full_on_the_pool() {
    let normal = store("inline-normal", Durability::Normal);
    append(&normal, "one").await;
    append(&normal, "two").await;
    assert_eq!(normal.store.commit_places().inline_commits, 2);
    assert_eq!(
        stored(&normal),
        [Message::user("one"), Message::user("two")]
    );

    let full = store("inline-full", Durability::Full);
    append(&full, "one").await;
    assert_eq!(full.store.commit_places().inline_commits, 0);
    assert_eq!(stored(&full), [Message::user("one")]);
}

/// A connection held by a call on the pool is not waited for on the
/// worker: the write goes to the leader task.
#[tokio::test]
async fn a_held_connection_sends_the_commit_to_the_pool() {
    let temp = store("inline-held", Durability::Normal);
    let holder = ConnectionHolder::start(&temp);
    let write = tokio::spawn({
        let store = Arc::clone(&temp.store);
        async move {
            store
                .append_async("s", &[Message::user("later")], Vec::new())
                .await
        }
    });
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert!(
        !write.is_finished(),
        "committed while the connection was held"
    );
    holder.release();
    write.await.unwrap().unwrap();
    assert_eq!(temp.store.commit_places().inline_commits, 0);
    assert_eq!(stored(&temp), [Message::user("later")]);
}

/// A queued write (`queue_results`) commits on the worker once its caller
/// yields, and only if the connection is free then: held, the commit task
/// hands the write to a leader on the pool, which commits it once the
/// connection is released.
#[tokio::test]
async fn a_queued_write_finding_the_connection_held_goes_to_the_pool() {
    let temp = store("queued-held", Durability::Normal);
    let holder = ConnectionHolder::start(&temp);
    let queued = temp
        .store
        .queue_results("s", &[Message::user("queued")], Vec::new())
        .unwrap();
    let write = tokio::spawn(queued.committed());
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert!(
        !write.is_finished(),
        "committed while the connection was held"
    );
    holder.release();
    let committed = tokio::time::timeout(Duration::from_secs(20), write)
        .await
        .expect("the queued write was never committed");
    assert_eq!(committed.unwrap().unwrap(), 1..=1);
    assert_eq!(temp.store.commit_places().inline_commits, 0);
    assert_eq!(stored(&temp), [Message::user("queued")]);
}

/// Another process's write transaction would make SQLite wait out its busy
/// timeout; on the worker that wait would stall every task. The write goes
/// to the pool instead, and the worker keeps running.
#[tokio::test]
async fn another_writer_holding_sqlites_lock_does_not_stall_the_worker() {
    let temp = store("inline-busy", Durability::Normal);
    let path = temp.store.path().to_owned();
    let (locked, release) = (
        std::sync::mpsc::channel::<()>(),
        std::sync::mpsc::channel::<()>(),
    );
    let other = std::thread::spawn(move || {
        let conn = rusqlite::Connection::open(path).unwrap();
        conn.execute_batch("BEGIN IMMEDIATE").unwrap();
        locked.0.send(()).unwrap();
        // Bounded, so a worker blocked on this fails the test, not hangs it.
        let _ = release.1.recv_timeout(Duration::from_secs(2));
        conn.execute_batch("COMMIT").unwrap();
    });
    locked.1.recv().unwrap();

    let ticks = Arc::new(AtomicUsize::new(0));
    let ticker = tokio::spawn({
        let ticks = Arc::clone(&ticks);
        async move {
            loop {
                tokio::time::sleep(Duration::from_millis(5)).await;
                ticks.fetch_add(1, Ordering::SeqCst);
            }
        }
    });
    let write = tokio::spawn({
        let store = Arc::clone(&temp.store);
        async move {
            store
                .append_async("s", &[Message::user("behind")], Vec::new())
                .await
        }
    });
    // The ticker runs while the write waits for the other transaction.
    let started = Instant::now();
    while ticks.load(Ordering::SeqCst) < 3 && started.elapsed() < Duration::from_secs(20) {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    assert!(ticks.load(Ordering::SeqCst) >= 3, "the worker was stalled");
    assert!(!write.is_finished(), "committed past another writer's lock");
    release.0.send(()).unwrap();
    other.join().unwrap();
    write.await.unwrap().unwrap();
    ticker.abort();
    assert_eq!(temp.store.commit_places().inline_commits, 0);
    assert_eq!(stored(&temp), [Message::user("behind")]);
}

/// Text large enough that one message takes the WAL past the checkpoint
/// size.
fn past_checkpoint_size() -> String {
    "x".repeat(CHECKPOINT_PAGES as usize * 4096 + 4096)
}

#[tokio::test]
async fn a_checkpoint_due_after_a_commit_on_the_worker_runs_on_the_pool() {
    let temp = store("inline-checkpoint", Durability::Normal);
    append(&temp, &past_checkpoint_size()).await;
    // Nothing ran on the worker: the checkpoint only waits for the pool,
    // and this task has not yielded since.
    assert_eq!(
        temp.store.commit_places(),
        CommitPlaces {
            inline_commits: 1,
            checkpoints_deferred: 1,
            checkpoints: 0,
            inputs_opened_here: 0,
        }
    );
    let started = Instant::now();
    while temp.store.commit_places().checkpoints == 0 && started.elapsed() < Duration::from_secs(20)
    {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(temp.store.commit_places().checkpoints, 1);
    assert_eq!(stored(&temp).len(), 1);
}

#[tokio::test]
async fn a_commit_on_the_pool_checkpoints_as_sqlite_would() {
    let temp = store("pool-checkpoint", Durability::Full);
    append(&temp, "small").await;
    assert_eq!(temp.store.commit_places().checkpoints, 0);
    append(&temp, &past_checkpoint_size()).await;
    assert_eq!(
        temp.store.commit_places(),
        CommitPlaces {
            inline_commits: 0,
            checkpoints_deferred: 0,
            checkpoints: 1,
            inputs_opened_here: 0,
        }
    );
}

/// The connection held by another thread: opening an input does not wait
/// for it on the worker, it goes to the pool and answers once it is free.
#[tokio::test]
async fn a_held_connection_sends_the_open_to_the_pool() {
    let temp = temp_store_with("open-held", Durability::Normal);
    let holder = ConnectionHolder::start(&temp);
    let open = tokio::spawn({
        let store = Arc::clone(&temp.store);
        async move { store.open_input_async("new", "main").await }
    });
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert!(!open.is_finished(), "opened while the connection was held");
    holder.release();
    let opened = open.await.unwrap().unwrap();
    assert!(opened.history.messages().is_empty());
    assert_eq!(temp.store.commit_places().inputs_opened_here, 0);
}

/// With other inputs running through the store, commits and opens go to
/// the pool: it works beside the worker they share, and groups writes.
#[tokio::test]
async fn with_other_inputs_running_commits_and_opens_go_to_the_pool() {
    let temp = store("inline-busy-inputs", Durability::Normal);
    let mine = temp.store.claim_session("s").unwrap();
    // The caller's own claim alone: on the worker.
    append(&temp, "alone").await;
    assert_eq!(temp.store.commit_places().inline_commits, 1);

    let other = temp.store.claim_session("other").unwrap();
    append(&temp, "beside another").await;
    assert_eq!(temp.store.commit_places().inline_commits, 1);
    // The leader task answers before it lets the connection go: wait for
    // it to give up its role, so the open below finds the connection free.
    let started = Instant::now();
    while !temp.store.writes.take_lead() {
        assert!(
            started.elapsed() < Duration::from_secs(20),
            "no leader ended"
        );
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    assert!(!temp.store.give_up_lead());
    drop(mine);
    let opened = temp.store.open_input_async("new", "main").await.unwrap();
    assert_eq!(temp.store.commit_places().inputs_opened_here, 0);
    drop(opened);

    drop(other);
    let opened = temp.store.open_input_async("new", "main").await.unwrap();
    assert_eq!(temp.store.commit_places().inputs_opened_here, 1);
    drop(opened);
    assert_eq!(
        stored(&temp),
        [Message::user("alone"), Message::user("beside another")]
    );
}

/// Checkpoints are put off only during a commit on the worker: none is
/// handed to the pool when none was due, and a later commit on the pool
/// checkpoints in the commit again.
#[tokio::test]
async fn after_a_commit_on_the_worker_the_pool_checkpoints_in_its_commit_again() {
    let temp = store("inline-then-pool", Durability::Normal);
    append(&temp, "small").await;
    // Time for a checkpoint task, had one been started, to run.
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_eq!(
        temp.store.commit_places(),
        CommitPlaces {
            inline_commits: 1,
            checkpoints_deferred: 0,
            checkpoints: 0,
            inputs_opened_here: 0,
        }
    );
    // Two inputs running: the next commit goes to the pool.
    let _running = (
        temp.store.claim_session("a").unwrap(),
        temp.store.claim_session("b").unwrap(),
    );
    append(&temp, &past_checkpoint_size()).await;
    assert_eq!(
        temp.store.commit_places(),
        CommitPlaces {
            inline_commits: 1,
            checkpoints_deferred: 0,
            checkpoints: 1,
            inputs_opened_here: 0,
        }
    );
}

/// A remembered history is charged its stored bytes, the messages read
/// since its last load included, so the cache's bound holds.
#[tokio::test]
async fn a_remembered_history_is_charged_its_bytes() {
    let temp = store("open-bytes", Durability::Normal);
    temp.store
        .append_messages("s", &[Message::user("x".repeat(1000))])
        .unwrap();
    temp.store.load_counted("s").unwrap();
    let first = temp.store.histories().bytes();
    assert!(first >= 1000, "{first}");
    temp.store
        .append_messages("s", &[Message::user("y".repeat(500))])
        .unwrap();
    let opened = temp.store.open_input_async("s", "main").await.unwrap();
    assert_eq!(opened.history.messages().len(), 2);
    assert_eq!(temp.store.commit_places().inputs_opened_here, 1);
    let second = temp.store.histories().bytes();
    assert!(second >= first + 500, "{first} -> {second}");
    // Remembered as they commit: charged the text they are stored as, a
    // write of several messages one row.
    temp.store
        .append_messages("s", &[Message::user("z"), Message::user("zz")])
        .unwrap();
    let stored_text: usize = temp
        .store
        .conn
        .lock()
        .unwrap()
        .query_row("SELECT SUM(length(body)) FROM messages", [], |row| {
            row.get::<_, i64>(0)
        })
        .unwrap() as usize;
    assert_eq!(temp.store.histories().bytes(), stored_text);
}

/// A transaction a panic left open on the connection is not read through
/// on the worker (it holds uncommitted rows): the open goes to the pool,
/// whose lock rolls it back first.
#[tokio::test]
async fn a_transaction_left_open_sends_the_open_to_the_pool() {
    let temp = store("open-leftover", Durability::Normal);
    temp.store.load_counted("s").unwrap(); // remembered, empty
    {
        let conn = temp.store.conn.lock().unwrap();
        conn.execute_batch("BEGIN").unwrap();
        super::messages::insert_messages(&conn, "s", 1, &[Message::user("uncommitted")]).unwrap();
    }
    let opened = temp.store.open_input_async("s", "main").await.unwrap();
    assert_eq!(temp.store.commit_places().inputs_opened_here, 0);
    assert!(opened.history.messages().is_empty());
    assert!(stored(&temp).is_empty());
}
