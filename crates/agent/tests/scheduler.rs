#![allow(clippy::unwrap_used, clippy::expect_used)] // a panic in a test is a test failure

//! The scheduler: exactly one terminal frame per input under load, the
//! skip reasons when provoked, interrupts and stops, and the history
//! staying paired through all of it.

use crate::common;

use common::{runtime_over, user_texts};
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use homeagent_agent::store::Store;
use homeagent_agent::{
    AgentSettings, DemoModel, Frame, Incomplete, Runtime, Scheduler, SchedulerOptions, SkipReason,
    Submission,
};
use homeagent_core::{Message, check_pairing};
use homeagent_llm::{SourceConfig, SourceProtocol};
use homeagent_mock_llm::{MockServer, ServerConfig};

fn temp_dir() -> PathBuf {
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    let dir = std::env::temp_dir().join(format!(
        "homeagent-scheduler-{}-{}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::SeqCst)
    ));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn runtime(sources: Vec<SourceConfig>, settings: AgentSettings) -> (Arc<Runtime>, PathBuf) {
    let dir = temp_dir();
    let store = Arc::new(Store::open(&dir.join("homeagent.db")).unwrap());
    let runtime = runtime_over(sources, Arc::new(DemoModel::default()), store, settings);
    (Arc::new(runtime), dir)
}

fn demo_sources() -> Vec<SourceConfig> {
    vec![SourceConfig::new("demo", SourceProtocol::Demo)]
}

/// The mock model, slowed by `config`, and a source that asks it.
async fn slow_mock(config: ServerConfig) -> (MockServer, SourceConfig) {
    let server = MockServer::start("127.0.0.1:0", config).await.unwrap();
    let slow = SourceConfig {
        base_url: Some(format!("{}/v1", server.url())),
        model: Some("mock".into()),
        ..SourceConfig::new("slow", SourceProtocol::Openai)
    };
    (server, slow)
}

fn submission(session: &str, text: &str) -> Submission {
    Submission {
        session: session.into(),
        agent: "main".into(),
        text: text.into(),
        interrupt: false,
        check_duplicate: true,
    }
}

/// Every frame of one input, up to and including its terminal frame; also
/// checks nothing follows the terminal frame.
async fn drain(mut frames: homeagent_agent::Frames) -> Vec<Frame> {
    let mut all = Vec::new();
    while let Some(frame) = frames.recv().await {
        all.push(frame);
    }
    let terminals = all.iter().filter(|f| f.is_terminal()).count();
    assert_eq!(terminals, 1, "{all:#?}");
    assert!(all.last().unwrap().is_terminal());
    all
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn many_sessions_each_input_gets_exactly_one_terminal_reply() {
    let (runtime, dir) = runtime(demo_sources(), AgentSettings::default());
    let scheduler = Scheduler::new(
        Arc::clone(&runtime),
        SchedulerOptions {
            max_concurrent_sessions: 8,
            ..SchedulerOptions::default()
        },
    );
    let mut waits = Vec::new();
    for s in 0..24 {
        for i in 0..12 {
            // The same text repeated: without a dedup window nothing is
            // ever skipped as a duplicate.
            let frames = scheduler.submit(submission(&format!("s{s}"), "!batch2"));
            waits.push(tokio::spawn(async move { (s, i, drain(frames).await) }));
        }
    }
    let mut responses = 0;
    for wait in waits {
        let (_, _, frames) = wait.await.unwrap();
        match frames.last().unwrap() {
            Frame::Response { content, .. } => {
                assert!(content.contains("executed=2"), "{content}");
                responses += 1;
            }
            other => panic!("not a response: {other:?}"),
        }
    }
    assert_eq!(responses, 288);
    let counters = scheduler.counters();
    assert_eq!(counters.enqueued, 288);
    assert_eq!(counters.executed, 288);
    assert_eq!(counters.rejected, 0);
    assert!(counters.queue_depth.is_empty(), "{counters:?}");
    assert_eq!(counters.running_sessions, 0);
    // FIFO per session and paired: 12 exchanges of user, assistant + 2
    // results, assistant.
    for s in 0..24 {
        let history = runtime.store().history(&format!("s{s}")).unwrap();
        check_pairing(&history).unwrap();
        let users = history
            .iter()
            .filter(|m| matches!(m, Message::User { .. }))
            .count();
        assert_eq!(users, 12);
        assert_eq!(history.len(), 12 * 5);
    }
    std::fs::remove_dir_all(dir).unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn empty_full_and_duplicate_inputs_are_skipped_with_their_reason() {
    let (server, slow) = slow_mock(ServerConfig {
        delay_ms: 300,
        ..ServerConfig::default()
    })
    .await;
    let (runtime, dir) = runtime(vec![slow], AgentSettings::default());
    let scheduler = Scheduler::new(
        runtime,
        SchedulerOptions {
            queue_capacity: 2,
            dedup_window: Some(Duration::from_secs(60)),
            ..SchedulerOptions::default()
        },
    );
    let reason = |frames: &[Frame]| match frames.last().unwrap() {
        Frame::Skipped { reason } => Some(*reason),
        _ => None,
    };
    let empty = drain(scheduler.submit(submission("a", "  \n"))).await;
    assert_eq!(reason(&empty), Some(SkipReason::EmptyInput));
    // One runs (slowly), two wait, the fourth finds the queue full.
    let first = scheduler.submit(submission("a", "!text one"));
    tokio::time::sleep(Duration::from_millis(100)).await;
    let second = scheduler.submit(submission("a", "!text two"));
    let third = scheduler.submit(submission("a", "!text three"));
    let full = drain(scheduler.submit(submission("a", "!text four"))).await;
    assert_eq!(reason(&full), Some(SkipReason::QueueFull));
    let duplicate = drain(scheduler.submit(submission("a", "!text two"))).await;
    assert_eq!(reason(&duplicate), Some(SkipReason::Duplicate));
    // Another session has a queue of its own.
    let other = scheduler.submit(submission("b", "!text four"));
    for frames in [first, second, third, other] {
        let frames = drain(frames).await;
        assert!(
            matches!(frames.last(), Some(Frame::Response { .. })),
            "{frames:?}"
        );
    }
    let counters = scheduler.counters();
    assert_eq!(counters.rejected, 3);
    assert_eq!(counters.executed, 4);
    server.shutdown().await.unwrap();
    std::fs::remove_dir_all(dir).unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_interrupt_cuts_the_stream_runs_next_and_keeps_the_history_paired() {
    // Slow chunks: the first input is still streaming when the interrupt
    // arrives.
    let (server, slow) = slow_mock(ServerConfig {
        chunk_delay_ms: 150,
        ..ServerConfig::default()
    })
    .await;
    let (runtime, dir) = runtime(vec![slow], AgentSettings::default());
    let scheduler = Scheduler::new(Arc::clone(&runtime), SchedulerOptions::default());
    let first = scheduler.submit(submission("s", "!slowbatch4"));
    let queued = scheduler.submit(submission("s", "!text queued"));
    tokio::time::sleep(Duration::from_millis(200)).await;
    let urgent = scheduler.submit(Submission {
        interrupt: true,
        ..submission("s", "!text urgent")
    });
    let first = drain(first).await;
    assert!(
        matches!(first.last(), Some(Frame::Error { code, .. }) if code == "preempted"),
        "{first:#?}"
    );
    // The cut stream ran no tool.
    assert!(!first.iter().any(|f| matches!(f, Frame::ToolCall(_))));
    let urgent = drain(urgent).await;
    assert!(matches!(urgent.last(), Some(Frame::Response { .. })));
    let queued = drain(queued).await;
    assert!(matches!(queued.last(), Some(Frame::Response { .. })));
    let history = runtime.store().history("s").unwrap();
    check_pairing(&history).unwrap();
    // The interrupt ran before the input queued ahead of it.
    let users = user_texts(&history);
    assert_eq!(users, ["!slowbatch4", "!text urgent", "!text queued"]);
    assert_eq!(scheduler.counters().preempted, 1);
    server.shutdown().await.unwrap();
    std::fs::remove_dir_all(dir).unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stop_cancels_running_tools_and_answers_every_queued_input() {
    let (runtime, dir) = runtime(demo_sources(), AgentSettings::default());
    let scheduler = Scheduler::new(Arc::clone(&runtime), SchedulerOptions::default());
    // Four sleeps of 2 s each: still running when the stop comes.
    let running = scheduler.submit(submission(
        "s",
        r#"!calls [{"name":"demo_sleep","arguments":{"ms":2000,"tag":"a"}},{"name":"demo_sleep","arguments":{"ms":2000,"tag":"b"}}]"#,
    ));
    let queued: Vec<_> = (0..3)
        .map(|i| scheduler.submit(submission("s", &format!("!text {i}"))))
        .collect();
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(scheduler.stop("s"), 4);
    let started = std::time::Instant::now();
    let running = drain(running).await;
    assert!(
        matches!(running.last(), Some(Frame::Error { code, .. }) if code == "stopped"),
        "{running:#?}"
    );
    // Both calls ended as cancelled, well before their 2 s were up is not
    // asserted (no upper bounds on time); their end frames say cancelled.
    let cancelled = running
        .iter()
        .filter(|f| matches!(f, Frame::ToolCall(event) if matches!(**event, homeagent_core::ToolEvent::End { status, .. } if status == homeagent_core::CallStatus::Cancelled)))
        .count();
    assert_eq!(cancelled, 2, "{running:#?}");
    let _ = started;
    for frames in queued {
        let frames = drain(frames).await;
        assert_eq!(
            frames,
            [Frame::Skipped {
                reason: SkipReason::Stopped
            }]
        );
    }
    check_pairing(&runtime.store().history("s").unwrap()).unwrap();
    assert_eq!(scheduler.counters().cancelled, 4);
    std::fs::remove_dir_all(dir).unwrap();
}

/// `busy_sessions` lists the sessions with an input running or waiting,
/// and forgets them once their inputs have ended (a server's shutdown
/// waits on it for inputs whose client went away).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn busy_sessions_are_those_with_an_input_running_or_waiting() {
    let (runtime, dir) = runtime(demo_sources(), AgentSettings::default());
    let scheduler = Scheduler::new(
        Arc::clone(&runtime),
        SchedulerOptions {
            max_concurrent_sessions: 1,
            ..SchedulerOptions::default()
        },
    );
    let done = drain(scheduler.submit(submission("done", "!text"))).await;
    assert!(
        matches!(done.last(), Some(Frame::Response { .. })),
        "{done:#?}"
    );
    let running = scheduler.submit(submission(
        "running",
        r#"!calls [{"name":"demo_sleep","arguments":{"ms":5000,"tag":"a"}}]"#,
    ));
    tokio::time::sleep(Duration::from_millis(300)).await;
    // One session at a time: this one waits behind the running one.
    let waiting = scheduler.submit(submission("waiting", "!text"));
    let mut busy = scheduler.busy_sessions();
    busy.sort();
    assert_eq!(busy, ["running", "waiting"]);
    scheduler.stop("running");
    drain(running).await;
    drain(waiting).await;
    assert_eq!(scheduler.busy_sessions(), Vec::<String>::new());
    std::fs::remove_dir_all(dir).unwrap();
}

/// Cancelling one input touches no other input of its session: a queued
/// one is dropped from the queue (and answered `stopped`), a running one is
/// stopped and the queue behind it runs on. This is what a server does when
/// one client hangs up while others use the same session.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancelling_one_input_leaves_the_others_of_its_session_alone() {
    let (runtime, dir) = runtime(demo_sources(), AgentSettings::default());
    let scheduler = Scheduler::new(Arc::clone(&runtime), SchedulerOptions::default());
    let sleep = r#"!calls [{"name":"demo_sleep","arguments":{"ms":800,"tag":"a"}}]"#;
    let (_, first) = scheduler.submit_tracked(submission("s", sleep));
    let (second_id, second) = scheduler.submit_tracked(submission("s", "!text second"));
    let (_, third) = scheduler.submit_tracked(submission("s", "!text third"));
    tokio::time::sleep(Duration::from_millis(200)).await;

    // The queued second input goes; the running first and the third stay.
    assert!(scheduler.cancel("s", second_id));
    assert!(!scheduler.cancel("s", second_id), "already cancelled");
    assert_eq!(
        drain(second).await,
        [Frame::Skipped {
            reason: SkipReason::Stopped
        }]
    );
    let first = drain(first).await;
    assert!(
        matches!(first.last(), Some(Frame::Response { .. })),
        "{first:#?}"
    );
    let third = drain(third).await;
    assert!(
        matches!(third.last(), Some(Frame::Response { .. })),
        "{third:#?}"
    );

    // A running input is stopped; the one queued behind it still runs.
    let (running_id, running) = scheduler.submit_tracked(submission("s", sleep));
    let (_, after) = scheduler.submit_tracked(submission("s", "!text after"));
    tokio::time::sleep(Duration::from_millis(200)).await;
    let depth: Vec<(String, usize)> = scheduler.counters().queue_depth.into_iter().collect();
    assert_eq!(depth, [("s".to_owned(), 1)], "one runs, one waits");
    assert!(scheduler.cancel("s", running_id));
    // Stopping already: a second cancel neither answers true nor counts.
    assert!(!scheduler.cancel("s", running_id), "already stopping");
    let running = drain(running).await;
    assert!(
        matches!(running.last(), Some(Frame::Error { code, .. }) if code == "stopped"),
        "{running:#?}"
    );
    let after = drain(after).await;
    assert!(
        matches!(after.last(), Some(Frame::Response { .. })),
        "{after:#?}"
    );
    // A finished input cannot be cancelled; other sessions are untouched.
    assert!(!scheduler.cancel("s", running_id));
    assert!(!scheduler.cancel("other", second_id));
    assert_eq!(scheduler.counters().cancelled, 2);
    assert!(scheduler.counters().queue_depth.is_empty());
    let history = runtime.store().history("s").unwrap();
    check_pairing(&history).unwrap();
    let inputs = user_texts(&history);
    assert_eq!(inputs, [sleep, "!text third", sleep, "!text after"]);
    std::fs::remove_dir_all(dir).unwrap();
}

/// The dedup window refuses an input that is running or ran, not one that
/// never did: a retry after `queue_full`, or after a stop skipped the
/// queued input, runs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_input_that_never_ran_is_not_a_duplicate() {
    let (server, slow) = slow_mock(ServerConfig {
        delay_ms: 300,
        ..ServerConfig::default()
    })
    .await;
    let (runtime, dir) = runtime(vec![slow], AgentSettings::default());
    let scheduler = Scheduler::new(
        runtime,
        SchedulerOptions {
            queue_capacity: 1,
            dedup_window: Some(Duration::from_secs(60)),
            ..SchedulerOptions::default()
        },
    );
    let last = |frames: &[Frame]| frames.last().cloned().unwrap();
    // Busy, one queued: "!text hi" finds the queue full.
    let running = scheduler.submit(submission("a", "!text one"));
    tokio::time::sleep(Duration::from_millis(100)).await;
    let queued = scheduler.submit(submission("a", "!text two"));
    let full = drain(scheduler.submit(submission("a", "!text hi"))).await;
    assert_eq!(
        last(&full),
        Frame::Skipped {
            reason: SkipReason::QueueFull
        }
    );
    drain(running).await;
    drain(queued).await;
    let retried = drain(scheduler.submit(submission("a", "!text hi"))).await;
    assert!(
        matches!(last(&retried), Frame::Response { .. }),
        "{retried:?}"
    );
    // Busy again; the queued input is skipped by a stop, then sent again.
    let running = scheduler.submit(submission("a", "!text three"));
    tokio::time::sleep(Duration::from_millis(100)).await;
    let queued = scheduler.submit(submission("a", "!text four"));
    scheduler.stop("a");
    drain(running).await;
    assert_eq!(
        last(&drain(queued).await),
        Frame::Skipped {
            reason: SkipReason::Stopped
        }
    );
    let again = drain(scheduler.submit(submission("a", "!text four"))).await;
    assert!(matches!(last(&again), Frame::Response { .. }), "{again:?}");
    // What ran is still a duplicate within the window.
    let twice = drain(scheduler.submit(submission("a", "!text four"))).await;
    assert_eq!(
        last(&twice),
        Frame::Skipped {
            reason: SkipReason::Duplicate
        }
    );
    server.shutdown().await.unwrap();
    std::fs::remove_dir_all(dir).unwrap();
}

/// An input that ended with an error (the model failed, the store was
/// busy, the session was another process's) got no answer: sent again,
/// it runs, instead of being refused as a duplicate of what never
/// answered (OpenAI's clients retry such errors on their own).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_input_that_failed_is_not_a_duplicate() {
    let (server, mock) = slow_mock(ServerConfig::default()).await;
    let (runtime, dir) = runtime(vec![mock], AgentSettings::default());
    let scheduler = deduping(runtime, Duration::from_secs(60));
    for attempt in 0..2 {
        let frames = drain(scheduler.submit(submission("a", "!err please"))).await;
        assert!(
            matches!(frames.last(), Some(Frame::Error { .. })),
            "attempt {attempt}: {frames:?}"
        );
    }
    server.shutdown().await.unwrap();
    std::fs::remove_dir_all(dir).unwrap();
}

/// A scheduler with only a dedup window of `window` set.
fn deduping(runtime: Arc<Runtime>, window: Duration) -> Scheduler {
    Scheduler::new(
        runtime,
        SchedulerOptions {
            dedup_window: Some(window),
            ..SchedulerOptions::default()
        },
    )
}

/// With a dedup window, a session is remembered for the window and then
/// forgotten, even when it never sends again (every stateless request of
/// the OpenAI endpoint is a session of its own).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sessions_are_forgotten_after_the_dedup_window() {
    let (runtime, dir) = runtime(demo_sources(), AgentSettings::default());
    // Wide enough that ten inputs on a slow machine all fall inside it.
    let window = Duration::from_secs(2);
    let scheduler = deduping(runtime, window);
    for i in 0..10 {
        drain(scheduler.submit(submission(&format!("once-{i}"), "!text hi"))).await;
    }
    assert_eq!(scheduler.counters().remembered_sessions, 10);
    tokio::time::sleep(window * 2).await;
    drain(scheduler.submit(submission("later", "!text hi"))).await;
    assert_eq!(scheduler.counters().remembered_sessions, 1);
    std::fs::remove_dir_all(dir).unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn past_max_tool_turns_the_reply_says_so() {
    let settings = AgentSettings {
        max_tool_turns: 1,
        ..AgentSettings::default()
    };
    let (runtime, dir) = runtime(demo_sources(), settings);
    let scheduler = Scheduler::new(runtime, SchedulerOptions::default());
    // The demo model answers a batch's results with text, so one turn is
    // enough for !batch2; a cap of 0 batches is not allowed, so check the
    // cap with a cap of 1 and a model that keeps calling: `!calls` replays
    // its calls only once, so use the counter of requests instead.
    let frames = drain(scheduler.submit(submission("s", "!batch2"))).await;
    match frames.last().unwrap() {
        Frame::Response {
            content,
            turns,
            incomplete,
            ..
        } => {
            assert_eq!(*turns, 1, "{content}");
            assert_eq!(
                incomplete,
                &Some(Incomplete::ToolTurns { max_tool_turns: 1 }),
                "{content}"
            );
            let note = incomplete.as_ref().unwrap().note();
            assert!(note.contains("agent.max_tool_turns"), "{note}");
        }
        other => panic!("{other:?}"),
    }
    std::fs::remove_dir_all(dir).unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn observers_see_every_frame_of_every_input_in_order() {
    let (runtime, dir) = runtime(demo_sources(), AgentSettings::default());
    let scheduler = Scheduler::new(runtime, SchedulerOptions::default());
    let seen: Arc<std::sync::Mutex<Vec<(String, Frame)>>> = Arc::default();
    let log = Arc::clone(&seen);
    scheduler.observe(Arc::new(move |session: &str, frame: &Frame| {
        log.lock()
            .unwrap()
            .push((session.to_owned(), frame.clone()));
    }));
    // A second observer sees the same frames: adding one keeps the first.
    let counted = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let count = Arc::clone(&counted);
    scheduler.observe(Arc::new(move |_: &str, _: &Frame| {
        count.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
    }));
    let a = drain(scheduler.submit(submission("a", "!batch2"))).await;
    let b = drain(scheduler.submit(submission("b", ""))).await;
    let seen = seen.lock().unwrap();
    assert_eq!(
        counted.load(std::sync::atomic::Ordering::SeqCst),
        seen.len()
    );
    let of = |session: &str| -> Vec<Frame> {
        seen.iter()
            .filter(|(s, _)| s == session)
            .map(|(_, f)| f.clone())
            .collect()
    };
    assert_eq!(of("a"), a);
    assert_eq!(of("b"), b);
    drop(seen);
    std::fs::remove_dir_all(dir).unwrap();
}

/// Panics on the text `!panic`, answers anything else.
struct PanicsOnCue;

impl homeagent_llm::LocalModel for PanicsOnCue {
    fn respond(
        &self,
        request: &homeagent_llm::ChatRequest,
    ) -> Result<Vec<homeagent_core::StreamEvent>, homeagent_llm::ProviderError> {
        let asked = request.messages.iter().rev().find_map(|m| match m {
            Message::User { content } => Some(content.clone()),
            _ => None,
        });
        if asked.as_deref() == Some("!panic") {
            panic!("a bug on cue");
        }
        Ok(vec![homeagent_core::StreamEvent::TextDelta {
            text: "fine".into(),
        }])
    }
}

/// A scheduler over [`PanicsOnCue`], its store in `dir`.
fn panicking_scheduler(dir: &std::path::Path) -> Scheduler {
    let store = Arc::new(Store::open(&dir.join("homeagent.db")).unwrap());
    let runtime = runtime_over(
        demo_sources(),
        Arc::new(PanicsOnCue),
        store,
        AgentSettings::default(),
    );
    Scheduler::new(Arc::new(runtime), SchedulerOptions::default())
}

/// A panic while an input runs (a bug) ends that input with an error and
/// leaves its session usable: the worker's task died with it, so the input
/// got no terminal frame and every later input of the session waited for
/// ever behind a worker that was gone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_panic_while_an_input_runs_ends_it_with_an_error_and_the_session_goes_on() {
    let dir = temp_dir();
    let scheduler = panicking_scheduler(&dir);
    let frames = drain(scheduler.submit(submission("p", "!panic"))).await;
    assert!(
        matches!(frames.last(), Some(Frame::Error { .. })),
        "{frames:?}"
    );
    let next = tokio::time::timeout(
        Duration::from_secs(60),
        drain(scheduler.submit(submission("p", "hello"))),
    )
    .await
    .expect("the session's next input never ran");
    assert!(
        matches!(next.last(), Some(Frame::Response { .. })),
        "{next:?}"
    );
    std::fs::remove_dir_all(dir).unwrap();
}

/// An input the dedup window remembered runs again once the window has
/// passed, while the session stays remembered for a later input: the
/// window forgets each input, it does not refuse one for ever.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_same_input_after_the_dedup_window_runs_again() {
    let (runtime, dir) = runtime(demo_sources(), AgentSettings::default());
    let window = Duration::from_millis(1000);
    let scheduler = deduping(runtime, window);
    let ran = |frames: &[Frame]| matches!(frames.last(), Some(Frame::Response { .. }));
    let started = std::time::Instant::now();
    let first = drain(scheduler.submit(submission("s", "!text one"))).await;
    assert!(ran(&first), "{first:?}");
    // A second input inside the window keeps the session remembered, so
    // only the first input's own age can let it through again.
    tokio::time::sleep(Duration::from_millis(700).saturating_sub(started.elapsed())).await;
    let second = drain(scheduler.submit(submission("s", "!text two"))).await;
    assert!(ran(&second), "{second:?}");
    tokio::time::sleep((window + Duration::from_millis(200)).saturating_sub(started.elapsed()))
        .await;
    let again = drain(scheduler.submit(submission("s", "!text one"))).await;
    assert!(ran(&again), "{again:?}");
    assert_eq!(scheduler.counters().rejected, 0);
    assert_eq!(scheduler.counters().executed, 3);
    std::fs::remove_dir_all(dir).unwrap();
}

/// An input that ends unanswered leaves the dedup window, and only it: a
/// resend of the same text queued meanwhile (after the first one's window
/// had passed) stays remembered, so a third copy is still refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unanswered_input_forgets_only_its_own_place_in_the_dedup_window() {
    let (runtime, dir) = runtime(demo_sources(), AgentSettings::default());
    let window = Duration::from_millis(300);
    let scheduler = deduping(runtime, window);
    let sleep = r#"!calls [{"name":"demo_sleep","arguments":{"ms":3000}}]"#;
    let (first_id, first) = scheduler.submit_tracked(submission("s", sleep));
    tokio::time::sleep(window + Duration::from_millis(100)).await;
    // The first is past the window: the resend is queued behind it.
    let (_, resend) = scheduler.submit_tracked(submission("s", sleep));
    assert!(scheduler.cancel("s", first_id));
    let first = drain(first).await;
    assert!(
        matches!(first.last(), Some(Frame::Error { code, .. }) if code == "stopped"),
        "{first:#?}"
    );
    // The resend is within its window (it was queued well under 300 ms
    // ago unless this machine stalled, which the check below notices).
    let third = scheduler.submit(submission("s", sleep));
    let third = drain(third).await;
    assert_eq!(
        third,
        [Frame::Skipped {
            reason: SkipReason::Duplicate
        }]
    );
    scheduler.stop("s");
    drain(resend).await;
    std::fs::remove_dir_all(dir).unwrap();
}

/// Interrupts sent one after another run in the order they were sent,
/// both ahead of what was queued before them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_interrupts_run_in_the_order_they_were_sent() {
    let (runtime, dir) = runtime(demo_sources(), AgentSettings::default());
    let scheduler = Scheduler::new(Arc::clone(&runtime), SchedulerOptions::default());
    let sleep = r#"!calls [{"name":"demo_sleep","arguments":{"ms":3000}}]"#;
    let running = scheduler.submit(submission("s", sleep));
    let queued = scheduler.submit(submission("s", "!text queued"));
    tokio::time::sleep(Duration::from_millis(200)).await;
    let interrupt = |text: &str| {
        scheduler.submit(Submission {
            interrupt: true,
            ..submission("s", text)
        })
    };
    let one = interrupt("!text one");
    let two = interrupt("!text two");
    for frames in [running, one, two, queued] {
        drain(frames).await;
    }
    let history = runtime.store().history("s").unwrap();
    check_pairing(&history).unwrap();
    assert_eq!(
        user_texts(&history),
        [sleep, "!text one", "!text two", "!text queued"]
    );
    std::fs::remove_dir_all(dir).unwrap();
}

/// A stop that comes once the reply has streamed, while it commits, cuts
/// nothing short: the input answers, and the counters do not count it
/// cancelled. (Another connection holds SQLite's write lock, so the
/// input's commit waits until the stop has come.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stop_that_comes_too_late_to_stop_anything_is_not_counted() {
    let (runtime, dir) = runtime(demo_sources(), AgentSettings::default());
    let scheduler = Scheduler::new(Arc::clone(&runtime), SchedulerOptions::default());
    let blocker = rusqlite::Connection::open(dir.join("homeagent.db")).unwrap();
    blocker.execute_batch("BEGIN IMMEDIATE").unwrap();
    let mut frames = scheduler.submit(submission("s", "!text the whole reply"));
    let mut seen = Vec::new();
    // The demo's reply ends with "at all."; then the input waits for its
    // commit (given half a second to get there).
    while !seen
        .iter()
        .any(|f| matches!(f, Frame::ContentDelta { text } if text.ends_with("at all.")))
    {
        let frame = frames.recv().await.unwrap();
        assert!(!frame.is_terminal(), "{frame:?}");
        seen.push(frame);
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(scheduler.stop("s"), 1, "asked to stop the running input");
    blocker.execute_batch("COMMIT").unwrap();
    while let Some(frame) = frames.recv().await {
        seen.push(frame);
    }
    assert!(
        matches!(seen.last(), Some(Frame::Response { .. })),
        "{seen:#?}"
    );
    assert_eq!(scheduler.counters().cancelled, 0);
    assert_eq!(scheduler.counters().executed, 1);
    std::fs::remove_dir_all(dir).unwrap();
}

/// Until an input's terminal frame has gone out, the scheduler is not
/// idle: a server shutting down ends its event streams once the scheduler
/// is idle, and a terminal frame sent after that would never reach them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_scheduler_is_not_idle_until_the_terminal_frame_is_out() {
    let dir = temp_dir();
    let scheduler = panicking_scheduler(&dir);
    let idle_at_terminal = Arc::new(std::sync::Mutex::new(Vec::new()));
    let (watched, seen) = (scheduler.clone(), Arc::clone(&idle_at_terminal));
    scheduler.observe(Arc::new(move |_, frame| {
        if frame.is_terminal() {
            seen.lock().unwrap().push(watched.idle());
        }
    }));
    for text in ["hello", "!panic"] {
        let frames = drain(scheduler.submit(submission("s", text))).await;
        assert!(frames.last().is_some_and(Frame::is_terminal), "{frames:?}");
    }
    assert_eq!(*idle_at_terminal.lock().unwrap(), [false, false]);
    assert!(scheduler.idle());
    std::fs::remove_dir_all(dir).unwrap();
}
