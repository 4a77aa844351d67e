#![allow(clippy::unwrap_used, clippy::expect_used)] // a panic in a test is a test failure
//! How many commits an input costs. With `[store] sync = "full"` every
//! commit waits for the disk, so each one is a share of every turn.
//!
//! An input that opens a session (every request of a client that names no
//! session) used to commit the new session on its own and then its first
//! message; the session is now created in the transaction that appends
//! that message. The user message and a batch's results are held for a
//! moment (`store::HOLD`): a model that answers within it lets the next
//! write (the calls, the reply) carry them in its commit. The counts below
//! come from the store's own group-commit counters, not from the runtime.

use crate::common;

use common::{TempDir, local_runtime, refuse_inserts, user_texts};
use std::sync::Arc;

use homeagent_agent::store::{Store, StoreError};
use homeagent_agent::{AgentSettings, DemoModel, Frame, Runtime, TurnControl, TurnInput};
use homeagent_core::Message;

fn runtime(store: Arc<Store>) -> Runtime {
    local_runtime(
        Arc::new(DemoModel::default()),
        store,
        AgentSettings::default(),
    )
}

/// Runs one input on `session` as `agent`; returns its terminal frame.
async fn run(runtime: &Runtime, session: &str, agent: &str, text: &str) -> Frame {
    let sink: homeagent_agent::FrameSink = Arc::new(|_| {});
    let input = TurnInput {
        session: session.into(),
        agent: agent.into(),
        text: text.into(),
    };
    runtime.run(&input, &TurnControl::default(), &sink).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_input_that_opens_a_session_commits_the_session_with_its_first_message() {
    let dir = TempDir::new("commits-open");
    let mut store = Store::open(&dir.db()).unwrap();
    // Held writes wait a minute here: the demo model answers within any
    // hold, but a busy machine may not run the test as fast.
    store.set_write_hold(std::time::Duration::from_secs(60));
    let store = Arc::new(store);
    let runtime = runtime(Arc::clone(&store));

    // A plain reply from a model that answers at once: the user message
    // (with the new session) and the reply, in one commit.
    let terminal = run(&runtime, "fresh", "main", "hello").await;
    assert!(matches!(terminal, Frame::Response { .. }), "{terminal:?}");
    assert_eq!(store.write_stats().commits, 1);
    assert_eq!(store.write_stats().writes, 1);
    assert_eq!(store.session("fresh").unwrap().unwrap().agent, "main");
    let history = store.history("fresh").unwrap();
    assert!(
        matches!(&history[..], [Message::User { content }, Message::Assistant(_)] if content == "hello"),
        "{history:#?}"
    );

    // The session exists now: the next input commits the same one.
    run(&runtime, "fresh", "main", "again").await;
    assert_eq!(store.write_stats().commits, 2);
    assert_eq!(store.history("fresh").unwrap().len(), 4);

    // A batch opening another session, with a tool that writes: the user
    // message (with the session) and the assistant message with its calls,
    // before the tools run; the results with their events, and the reply.
    let batch = r#"!calls [{"name":"demo_note","arguments":{"text":"one"}}]"#;
    let terminal = run(&runtime, "second", "main", batch).await;
    assert!(matches!(terminal, Frame::Response { .. }), "{terminal:?}");
    assert_eq!(store.write_stats().commits, 4);
    let history = store.history("second").unwrap();
    assert!(
        matches!(
            &history[..],
            [Message::User { .. }, Message::Assistant(calls), Message::Tool(_), Message::Assistant(reply)]
                if calls.tool_calls.len() == 1 && reply.tool_calls.is_empty()
        ),
        "{history:#?}"
    );
    assert_eq!(
        store.tool_events("second").unwrap().len(),
        2,
        "start and end"
    );

    // Calls that change nothing (every tool read-only) need not be stored
    // before they run: the user message, the calls, their results and the
    // reply are one commit.
    let batch = r#"!calls [{"name":"demo_echo","arguments":{"text":"one"}},{"name":"demo_sleep","arguments":{"ms":0}}]"#;
    let terminal = run(&runtime, "third", "main", batch).await;
    assert!(matches!(terminal, Frame::Response { .. }), "{terminal:?}");
    assert_eq!(store.write_stats().commits, 5);
    let history = store.history("third").unwrap();
    assert!(
        matches!(
            &history[..],
            [Message::User { .. }, Message::Assistant(calls), Message::Tool(_), Message::Tool(_), Message::Assistant(reply)]
                if calls.tool_calls.len() == 2 && reply.tool_calls.is_empty()
        ),
        "{history:#?}"
    );
    assert_eq!(store.tool_events("third").unwrap().len(), 4);

    // One call to a tool that writes among them: stored before they run.
    let batch = r#"!calls [{"name":"demo_echo","arguments":{}},{"name":"demo_note","arguments":{"text":"two"}}]"#;
    run(&runtime, "fourth", "main", batch).await;
    assert_eq!(store.write_stats().commits, 7);
    assert_eq!(store.history("fourth").unwrap().len(), 5);
}

/// A batch's results are held for the reply when the commit holding them
/// saves is worth more than the overlap it costs. With `sync = "full"` a
/// commit is an fsync, and a big batch's results (64 calls: about 28 kB
/// with their events and calls, under `store::HOLD_AT_MOST_FULL`) ride
/// with the reply too: one commit per input. With `normal` a commit is only SQLite's
/// work, and results above `store::HOLD_AT_MOST` (8 KiB) commit on their
/// own while the model works. Both batches call `demo_echo`, which changes
/// nothing, so their calls are not committed before they run: they are
/// held whatever their size and ride with the results (committed alone,
/// 64 calls were a third commit the results and the reply waited for).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn results_ride_with_the_reply_up_to_the_durabilitys_limit() {
    use homeagent_agent::store::Durability;
    for (durability, big_batch_commits) in [(Durability::Full, 1), (Durability::Normal, 2)] {
        let dir = TempDir::new(&format!("commits-batch-sizes-{durability:?}"));
        let mut store = Store::open_with(&dir.db(), durability).unwrap();
        store.set_write_hold(std::time::Duration::from_secs(60));
        let store = Arc::new(store);
        batches_commit(&store, &[(8, 1), (64, big_batch_commits)]).await;
    }
}

/// Runs `!batchN` on a session of its own for each `(N, commits)` and
/// checks the commits it cost and what it stored.
async fn batches_commit(store: &Arc<Store>, expected: &[(usize, u64)]) {
    let runtime = runtime(Arc::clone(store));
    for &(n, commits) in expected {
        let session = format!("batch{n}");
        let before = store.write_stats().commits;
        let terminal = run(&runtime, &session, "main", &format!("!batch{n}")).await;
        assert!(matches!(terminal, Frame::Response { .. }), "{terminal:?}");
        assert_eq!(store.write_stats().commits - before, commits, "{session}");
        assert_eq!(store.history(&session).unwrap().len(), n + 3, "{session}");
        assert_eq!(
            store.tool_events(&session).unwrap().len(),
            2 * n,
            "{session}"
        );
    }
}

/// A model slower than the hold (every remote one) finds the user message
/// committed while it works: holding a write only lets a quick next write
/// carry it, and never keeps it from the disk while the model thinks.
/// Checked against the mock LLM server with a delay before its answer, for
/// both sync modes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_held_write_is_committed_on_its_own_while_a_slow_model_works() {
    use homeagent_agent::store::Durability;
    use homeagent_llm::{SourceConfig, SourceProtocol};
    use homeagent_mock_llm::{MockServer, ServerConfig};

    const MODEL_DELAY: std::time::Duration = std::time::Duration::from_millis(1500);
    let server = MockServer::start(
        "127.0.0.1:0",
        ServerConfig {
            delay_ms: MODEL_DELAY.as_millis() as u64,
            ..ServerConfig::default()
        },
    )
    .await
    .unwrap();
    for durability in [Durability::Full, Durability::Normal] {
        let dir = TempDir::new("commits-held-slow");
        let store = Arc::new(Store::open_with(&dir.db(), durability).unwrap());
        let mock = SourceConfig {
            base_url: Some(format!("{}/v1", server.url())),
            model: Some("mock".into()),
            ..SourceConfig::new("mock", SourceProtocol::Openai)
        };
        let runtime = Arc::new(common::runtime_over(
            vec![mock],
            Arc::new(DemoModel::default()),
            Arc::clone(&store),
            AgentSettings::default(),
        ));
        let started = std::time::Instant::now();
        let input = {
            let runtime = Arc::clone(&runtime);
            tokio::spawn(async move { run(&runtime, "s", "main", "!text slow answer").await })
        };
        // Polled until the user message is stored, whenever that is.
        let stored_after = loop {
            let stored = store.history("s").map_or(0, |h| h.len());
            if stored > 0 {
                break started.elapsed();
            }
            tokio::time::sleep(std::time::Duration::from_millis(1)).await;
        };
        assert_eq!(store.history("s").unwrap().len(), 1, "{durability:?}");
        let terminal = input.await.unwrap();
        let answered_after = started.elapsed();
        assert!(matches!(terminal, Frame::Response { .. }), "{terminal:?}");
        assert_eq!(store.history("s").unwrap().len(), 2, "{durability:?}");
        // The model took MODEL_DELAY after the input began; the message
        // was stored at least half of it before the reply.
        assert!(
            answered_after >= stored_after + MODEL_DELAY / 2,
            "{durability:?}: stored after {stored_after:?}, answered after {answered_after:?}"
        );
        assert_eq!(store.write_stats().commits, 2, "{durability:?}");
    }
    server.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_input_for_another_agents_session_is_refused_and_writes_nothing() {
    let dir = TempDir::new("commits-mismatch");
    let store = Arc::new(Store::open(&dir.db()).unwrap());
    store.ensure_session("kitchen-s", "kitchen").unwrap();
    let before = store.write_stats();
    let runtime = runtime(Arc::clone(&store));

    let terminal = run(&runtime, "kitchen-s", "main", "hello").await;
    assert!(matches!(terminal, Frame::Error { .. }), "{terminal:?}");
    assert_eq!(store.write_stats(), before);
    assert_eq!(store.history("kitchen-s").unwrap(), Vec::new());
    assert_eq!(
        store.session("kitchen-s").unwrap().unwrap().agent,
        "kitchen"
    );
    // The store names the mismatch the same way to a direct caller.
    assert!(matches!(
        store.ensure_session("kitchen-s", "main"),
        Err(StoreError::AgentMismatch { .. })
    ));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_creating_append_itself_refuses_another_agents_session() {
    let dir = TempDir::new("commits-append-mismatch");
    let store = Arc::new(Store::open(&dir.db()).unwrap());
    store.ensure_session("kitchen-s", "kitchen").unwrap();
    // The read the runtime makes first: whether the session exists, and
    // never for another agent.
    assert!(matches!(
        store.check_session_agent("kitchen-s", "main"),
        Err(StoreError::AgentMismatch { .. })
    ));
    assert!(store.check_session_agent("kitchen-s", "kitchen").unwrap());
    assert!(!store.check_session_agent("new-s", "main").unwrap());
    // No read before it this time: the write's own transaction checks.
    let refused = store
        .append_async_creating("kitchen-s", "main", &[Message::user("hello")])
        .await;
    assert!(
        matches!(refused, Err(StoreError::AgentMismatch { .. })),
        "{refused:?}"
    );
    assert_eq!(store.history("kitchen-s").unwrap(), Vec::new());
    // Its own agent appends, and a new id is created for the caller.
    store
        .append_async_creating("kitchen-s", "kitchen", &[Message::user("a")])
        .await
        .unwrap();
    store
        .append_async_creating("new-s", "main", &[Message::user("b")])
        .await
        .unwrap();
    assert_eq!(store.history("kitchen-s").unwrap().len(), 1);
    assert_eq!(store.session("new-s").unwrap().unwrap().agent, "main");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_stored_results_are_the_calls_outcomes_in_call_order() {
    let dir = TempDir::new("commits-results");
    let store = Arc::new(Store::open(&dir.db()).unwrap());
    let runtime = runtime(Arc::clone(&store));

    let batch = r#"!calls [{"name":"demo_echo","arguments":{"text":"first-text"}},{"name":"no_such_tool","arguments":{}}]"#;
    let terminal = run(&runtime, "results", "main", batch).await;
    assert!(matches!(terminal, Frame::Response { .. }), "{terminal:?}");
    let history = store.history("results").unwrap();
    let [
        Message::User { .. },
        Message::Assistant(asked),
        Message::Tool(ok),
        Message::Tool(failed),
        Message::Assistant(_),
    ] = &history[..]
    else {
        panic!("{history:#?}");
    };
    let ids: Vec<&str> = asked.tool_calls.iter().map(|c| c.id.as_str()).collect();
    assert_eq!(
        ids,
        [ok.tool_call_id.as_str(), failed.tool_call_id.as_str()]
    );
    assert_eq!((ok.name.as_str(), ok.success), ("demo_echo", true));
    assert!(ok.content.contains("first-text"), "{ok:?}");
    assert_eq!(
        (failed.name.as_str(), failed.success),
        ("no_such_tool", false)
    );
    assert!(failed.content.contains("no_such_tool"), "{failed:?}");
}

/// A model that refuses every request, as a provider answering 400 does.
struct Refusing;

impl homeagent_llm::LocalModel for Refusing {
    fn respond(
        &self,
        _: &homeagent_llm::ChatRequest,
    ) -> Result<Vec<homeagent_core::StreamEvent>, homeagent_llm::ProviderError> {
        Err(homeagent_llm::ProviderError::Status {
            status: 400,
            message: "HTTP 400: refused on purpose".into(),
            retry_after: None,
        })
    }
}

/// The user message is stored whatever becomes of the input: answered,
/// refused by the model, or stopped before its first request. (The first
/// request may be sent while the message's commit is still running; the
/// input waits for that commit before it ends or writes anything else.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_input_keeps_its_user_message_and_its_order() {
    let dir = TempDir::new("commits-user");
    let store = Arc::new(Store::open(&dir.db()).unwrap());
    let refusing = local_runtime(
        Arc::new(Refusing),
        Arc::clone(&store),
        AgentSettings::default(),
    );
    let terminal = run(&refusing, "kept", "main", "first").await;
    assert!(matches!(terminal, Frame::Error { .. }), "{terminal:?}");

    let sink: homeagent_agent::FrameSink = Arc::new(|_| {});
    let stopped = TurnControl::default();
    stopped.stop.cancel();
    let input = TurnInput {
        session: "kept".into(),
        agent: "main".into(),
        text: "second".into(),
    };
    let terminal = refusing.run(&input, &stopped, &sink).await;
    assert!(matches!(terminal, Frame::Error { .. }), "{terminal:?}");

    let answering = runtime(Arc::clone(&store));
    let terminal = run(&answering, "kept", "main", "!batch2").await;
    assert!(matches!(terminal, Frame::Response { .. }), "{terminal:?}");

    let history = store.history("kept").unwrap();
    let roles: Vec<&str> = history
        .iter()
        .map(|m| match m {
            Message::System { .. } => "system",
            Message::User { .. } => "user",
            Message::Assistant(a) if a.tool_calls.is_empty() => "reply",
            Message::Assistant(_) => "calls",
            Message::Tool(_) => "result",
        })
        .collect();
    assert_eq!(
        roles,
        ["user", "user", "user", "calls", "result", "result", "reply"],
        "{history:#?}"
    );
    let users = user_texts(&history);
    assert_eq!(users, ["first", "second", "!batch2"]);
}

/// An input whose user message cannot be committed fails with the store's
/// error and writes nothing after it, even though its first model request
/// went out while the commit ran. (The refusal is a trigger added from a
/// second connection, as a full disk or a broken file would refuse.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_input_whose_user_message_is_refused_fails_and_writes_nothing_after_it() {
    let dir = TempDir::new("commits-refused");
    let store = Arc::new(Store::open(&dir.db()).unwrap());
    let runtime = runtime(Arc::clone(&store));
    run(&runtime, "s", "main", "hello").await;
    let before = store.history("s").unwrap();
    assert_eq!(before.len(), 2, "{before:#?}");

    refuse_inserts(
        &dir.db(),
        "messages",
        "body",
        "poison",
        "refused by a trigger",
    );
    for text in ["poison", "!batch2 poison"] {
        let terminal = run(&runtime, "s", "main", text).await;
        let Frame::Error { code, message, .. } = &terminal else {
            panic!("{text}: {terminal:?}");
        };
        assert_eq!(code, "store", "{text}: {message}");
        assert!(
            message.contains("refused by a trigger"),
            "{text}: {message}"
        );
    }
    // Neither the refused messages nor any reply or call after them.
    assert_eq!(store.history("s").unwrap(), before);
}

/// The demo model, counting the requests it answers.
#[derive(Default)]
struct CountingDemo {
    inner: DemoModel,
    requests: std::sync::atomic::AtomicUsize,
}

impl homeagent_llm::LocalModel for CountingDemo {
    fn respond(
        &self,
        request: &homeagent_llm::ChatRequest,
    ) -> Result<Vec<homeagent_core::StreamEvent>, homeagent_llm::ProviderError> {
        self.requests
            .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        self.inner.respond(request)
    }
}

/// A batch's results are committed while the next model request runs
/// (with `sync = "full"`, their fsync overlaps the model's wait), so the
/// model is asked again before the commit's answer is in. When that commit
/// fails, the input still ends with the store's error and writes nothing
/// after the calls: no reply is stored or sent.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_input_whose_results_are_refused_fails_with_the_store_error_and_stores_no_reply() {
    let dir = TempDir::new("commits-results-refused");
    let store = Arc::new(Store::open(&dir.db()).unwrap());
    let model = Arc::new(CountingDemo::default());
    let runtime = local_runtime(
        Arc::clone(&model) as _,
        Arc::clone(&store),
        AgentSettings::default(),
    );
    // Only a tool message's body names a `tool_call_id`.
    refuse_inserts(
        &dir.db(),
        "messages",
        "body",
        "tool_call_id",
        "results refused by a trigger",
    );
    // A tool that writes, so the calls are stored before they run.
    let batch = r#"!calls [{"name":"demo_note","arguments":{"text":"kept-call"}}]"#;
    let terminal = run(&runtime, "s", "main", batch).await;
    let Frame::Error { code, message, .. } = &terminal else {
        panic!("{terminal:?}");
    };
    assert_eq!(code, "store", "{message}");
    assert!(
        message.contains("results refused by a trigger"),
        "{message}"
    );
    assert_eq!(
        model.requests.load(std::sync::atomic::Ordering::SeqCst),
        2,
        "the request after the batch goes out while its results commit"
    );
    let history = store.history("s").unwrap();
    let [Message::User { .. }, Message::Assistant(asked)] = &history[..] else {
        panic!("{history:#?}");
    };
    assert_eq!(asked.tool_calls.len(), 1, "{history:#?}");
}

/// The demo model, noting how many messages the store holds for session
/// `s` when each request arrives.
struct StoreWatcher {
    inner: DemoModel,
    store: Arc<Store>,
    stored: std::sync::Mutex<Vec<usize>>,
}

impl homeagent_llm::LocalModel for StoreWatcher {
    fn respond(
        &self,
        request: &homeagent_llm::ChatRequest,
    ) -> Result<Vec<homeagent_core::StreamEvent>, homeagent_llm::ProviderError> {
        let stored = self.store.history("s").map_or(0, |h| h.len());
        self.stored.lock().unwrap().push(stored);
        self.inner.respond(request)
    }
}

/// With `sync = "normal"` an input alone commits on the async worker, and
/// a write it does not wait for yet (its user message, a batch's results)
/// is committed there only once the next model request is on its way: the
/// request does not wait for the commit. Each request finds the write
/// before it not yet stored, and the input still ends with everything
/// stored, in order.
#[tokio::test(flavor = "current_thread")]
async fn with_normal_sync_a_request_goes_out_before_the_write_before_it_commits() {
    let dir = TempDir::new("commits-after-yield");
    let store =
        Arc::new(Store::open_with(&dir.db(), homeagent_agent::store::Durability::Normal).unwrap());
    let model = Arc::new(StoreWatcher {
        inner: DemoModel::default(),
        store: Arc::clone(&store),
        stored: std::sync::Mutex::new(Vec::new()),
    });
    let runtime = local_runtime(
        Arc::clone(&model) as _,
        Arc::clone(&store),
        AgentSettings::default(),
    );
    let batch = r#"!calls [{"name":"demo_note","arguments":{"text":"a"}},{"name":"demo_note","arguments":{"text":"b"}}]"#;
    let terminal = run(&runtime, "s", "main", batch).await;
    assert!(matches!(terminal, Frame::Response { .. }), "{terminal:?}");
    // First request: no user message yet. Second: the user message and
    // the calls (committed before the tools ran: they write), not yet the
    // results.
    assert_eq!(*model.stored.lock().unwrap(), [0, 2]);
    assert_eq!(store.history("s").unwrap().len(), 5);
}

/// A hook that notes how much of its session is stored when it sees a
/// call (before it as a pre-hook, after it as a post-hook), for the tool
/// `sees` names.
struct NotingHook {
    store: Arc<Store>,
    session: &'static str,
    tool: &'static str,
    stored: std::sync::Mutex<Vec<usize>>,
}

impl homeagent_core::PreToolHook for NotingHook {
    fn name(&self) -> &str {
        "noting"
    }

    fn sees(&self, tool: &str) -> bool {
        tool == self.tool
    }

    fn before(
        &self,
        call: &homeagent_core::CallInfo,
    ) -> homeagent_core::hooks::HookFuture<homeagent_core::PreDecision> {
        if homeagent_core::PreToolHook::sees(self, &call.tool) {
            let stored = self.store.history(self.session).map_or(0, |h| h.len());
            self.stored.lock().unwrap().push(stored);
        }
        Box::pin(async { Ok(homeagent_core::PreDecision::Allow) })
    }
}

impl homeagent_core::PostToolHook for NotingHook {
    fn name(&self) -> &str {
        "noting"
    }

    fn sees(&self, tool: &str) -> bool {
        tool == self.tool
    }

    fn after(
        &self,
        call: &homeagent_core::CallInfo,
        _: &homeagent_core::ToolOutcome,
    ) -> homeagent_core::hooks::HookFuture<Option<serde_json::Value>> {
        if homeagent_core::PostToolHook::sees(self, &call.tool) {
            let stored = self.store.history(self.session).map_or(0, |h| h.len());
            self.stored.lock().unwrap().push(stored);
        }
        Box::pin(async { Ok(None) })
    }
}

/// A hook is the user's command and may have effects of its own (a log, a
/// notification): calls a hook sees are stored before they run, even when
/// every tool is read-only, so that a crash never forgets a call its hook
/// acted on. A hook that does not see a batch's tools leaves its calls
/// held, as without hooks.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn read_only_calls_a_hook_sees_are_stored_before_the_hook_runs() {
    let echo = r#"!calls [{"name":"demo_echo","arguments":{"text":"one"}},{"name":"demo_echo","arguments":{"text":"two"}}]"#;
    let cases = [
        ("pre", "demo_echo", vec![2, 2], 2),
        ("pre", "demo_note", vec![], 1),
        ("post", "demo_echo", vec![2, 2], 2),
        ("post", "demo_note", vec![], 1),
    ];
    for (kind, tool, stored_when_seen, commits) in cases {
        let dir = TempDir::new("commits-hooked");
        let mut store = Store::open(&dir.db()).unwrap();
        store.set_write_hold(std::time::Duration::from_secs(60));
        let store = Arc::new(store);
        let hook = Arc::new(NotingHook {
            store: Arc::clone(&store),
            session: "hooked",
            tool,
            stored: std::sync::Mutex::new(Vec::new()),
        });
        let mut settings = AgentSettings::default();
        match kind {
            "pre" => settings.hooks.pre.push(Arc::clone(&hook) as _),
            _ => settings.hooks.post.push(Arc::clone(&hook) as _),
        }
        let runtime = local_runtime(Arc::new(DemoModel::default()), Arc::clone(&store), settings);
        let terminal = run(&runtime, "hooked", "main", echo).await;
        assert!(matches!(terminal, Frame::Response { .. }), "{terminal:?}");
        // The user message and the calls, stored when the hook saw each call.
        assert_eq!(
            *hook.stored.lock().unwrap(),
            stored_when_seen,
            "{kind} {tool}"
        );
        assert_eq!(store.write_stats().commits, commits, "{kind} {tool}");
        assert_eq!(store.history("hooked").unwrap().len(), 5, "{kind} {tool}");
    }
}
