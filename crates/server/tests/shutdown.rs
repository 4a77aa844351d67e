#![allow(clippy::unwrap_used, clippy::expect_used)] // a panic in a test is a test failure

//! Graceful shutdown: a running turn gets the grace period, then is
//! stopped with its outcomes stored; event streams end; `serve` returns.

use crate::common;

use std::time::{Duration, Instant};

use common::{Setup, SseReader, json, start};
use homeagent_agent::store::Store;
use homeagent_core::Message;
use homeagent_server::ServerOptions;
use serde_json::json;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_stops_a_turn_after_the_grace_period_and_the_history_stays_paired() {
    stops_a_turn_after_the_grace_period(1).await;
}

/// The same with two serving threads: the event stream's connection is
/// served on the first, the turn's on the second.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_stops_a_turn_on_another_serving_thread_the_same_way() {
    stops_a_turn_after_the_grace_period(2).await;
}

async fn stops_a_turn_after_the_grace_period(threads: usize) {
    let grace = Duration::from_millis(600);
    let mut server = start(Setup {
        threads,
        tool_sleep_ms: 60_000,
        options: ServerOptions {
            shutdown_grace: grace,
            ..ServerOptions::default()
        },
        ..Setup::default()
    })
    .await;
    let events = SseReader::new(server.get("/api/v1/events").send().await.unwrap());
    let response = server
        .post_json(
            "/api/v1/sessions/long/messages",
            &json!({"text": "!slowbatch3"}),
        )
        .send()
        .await
        .unwrap();
    let mut frames = SseReader::new(response);
    let mut starts = 0;
    while starts < 3 {
        if json(&frames.next_within(30).await.unwrap().data)["phase"] == "start" {
            starts += 1;
        }
    }
    let began = Instant::now();
    let reader = tokio::spawn(async move { frames.all().await });
    server.shutdown().await.unwrap();
    // The turn was given its grace period before being stopped.
    assert!(began.elapsed() >= grace);
    let rest = reader.await.unwrap();
    let last = json(&rest.last().unwrap().data);
    assert_eq!(last["type"], "error");
    assert_eq!(last["code"], "stopped");
    // The event stream ended with the server, after the frames the turn
    // sent while it was being stopped: the calls' ends and the turn's own.
    let (all, cut) = tokio::time::timeout(Duration::from_secs(30), events.all_and_end())
        .await
        .expect("the event stream did not end");
    // Ended by the server, not cut off when it went away.
    assert_eq!(cut, None);
    let frames: Vec<serde_json::Value> =
        all.iter().map(|e| json(&e.data)["frame"].clone()).collect();
    let ended: Vec<&serde_json::Value> = frames
        .iter()
        .filter(|f| f["type"] == "tool_call" && f["phase"] == "end")
        .collect();
    // Every call ends in the stream; the one still sleeping (the others'
    // sleeps are over demo_sleep's maximum) as stopped.
    assert_eq!(ended.len(), 3, "{frames:#?}");
    let cancelled = ended.iter().filter(|f| f["status"] == "cancelled").count();
    assert_eq!(cancelled, 1, "{ended:#?}");
    let last = frames.last().unwrap();
    assert_eq!(
        (&last["type"], &last["code"]),
        (&json!("error"), &json!("stopped"))
    );
    // New connections are refused.
    assert!(server.get("/api/v1/status").send().await.is_err());
    // The store on disk has the turn, paired: 3 calls, 3 cancelled results.
    let store = Store::open(&server.agent.store_path).unwrap();
    let history = store.history("long").unwrap();
    let Message::Assistant(assistant) = &history[1] else {
        panic!("{history:?}")
    };
    let calls: Vec<&str> = assistant.tool_calls.iter().map(|c| c.id.as_str()).collect();
    let results: Vec<&str> = history[2..]
        .iter()
        .map(|m| match m {
            Message::Tool(t) => t.tool_call_id.as_str(),
            other => panic!("{other:?}"),
        })
        .collect();
    assert_eq!(calls.len(), 3);
    assert_eq!(calls, results);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_turn_that_finishes_within_the_grace_period_is_answered_normally() {
    let mut server = start(Setup {
        tool_sleep_ms: 300,
        options: ServerOptions {
            shutdown_grace: Duration::from_secs(60),
            ..ServerOptions::default()
        },
        ..Setup::default()
    })
    .await;
    let response = server
        .post_json(
            "/api/v1/sessions/short/messages",
            &json!({"text": "!slowbatch2"}),
        )
        .send()
        .await
        .unwrap();
    let mut frames = SseReader::new(response);
    while json(&frames.next_within(30).await.unwrap().data)["phase"] != "start" {}
    let reader = tokio::spawn(async move { frames.all().await });
    server.shutdown().await.unwrap();
    let rest = reader.await.unwrap();
    let last = json(&rest.last().unwrap().data);
    assert_eq!(last["type"], "response", "{last}");
    assert!(last["content"].as_str().unwrap().contains("executed=2"));
}

/// A turn whose client went away is stopped, and shutdown waits until its
/// outcomes are stored, even when that commit waits for another writer,
/// on whichever serving thread it runs (a serving thread's runtime
/// outlives its connections until the server has shut down).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_turn_whose_client_left_is_stopped_and_stored_on_any_serving_thread() {
    for threads in [1, 2] {
        let mut server = start(Setup {
            threads,
            tool_sleep_ms: 50_000,
            options: ServerOptions {
                shutdown_grace: Duration::from_millis(300),
                ..ServerOptions::default()
            },
            ..Setup::default()
        })
        .await;
        // The first connection (the first thread) only watches the events.
        let mut events = SseReader::new(server.get("/api/v1/events").send().await.unwrap());
        let response = server
            .post_json(
                "/api/v1/sessions/left/messages",
                &json!({"text": "!slowbatch2"}),
            )
            .send()
            .await
            .unwrap();
        let mut starts = 0;
        while starts < 2 {
            let event = events.next_within(30).await.unwrap();
            if json(&event.data)["frame"]["phase"] == "start" {
                starts += 1;
            }
        }
        // Another connection holds SQLite's write lock for a while, so the
        // stopped turn's commit has to wait for it: shutdown must wait too.
        let lock = rusqlite::Connection::open(&server.agent.store_path).unwrap();
        lock.busy_timeout(Duration::from_secs(10)).unwrap();
        lock.execute_batch("BEGIN IMMEDIATE").unwrap();
        drop(response);
        drop(events);
        let release = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(500));
            lock.execute_batch("COMMIT").unwrap();
        });
        server.shutdown().await.unwrap();
        // Read at once (a reader does not wait for the lock): the input was
        // committed before `serve` returned.
        let reader = rusqlite::Connection::open(&server.agent.store_path).unwrap();
        let stored: i64 = reader
            .query_row("SELECT count(*) FROM sessions WHERE id = 'left'", [], |r| {
                r.get(0)
            })
            .unwrap();
        assert_eq!(
            stored, 1,
            "threads {threads}: not committed when serve returned"
        );
        release.join().unwrap();
        let store = Store::open(&server.agent.store_path).unwrap();
        let history = store
            .history("left")
            .unwrap_or_else(|e| panic!("threads {threads}: {e}"));
        let results: Vec<String> = history
            .iter()
            .filter_map(|m| match m {
                Message::Tool(t) => Some(t.content.to_string()),
                _ => None,
            })
            .collect();
        assert_eq!(results.len(), 2, "threads {threads}: {history:?}");
        assert!(
            results
                .iter()
                .all(|r| r.contains("cancelled") || r.contains("stopped")),
            "threads {threads}: {results:?}"
        );
    }
}

/// What a client of the OpenAI endpoint is told when the server shuts
/// down under its request. One still waiting in its session's queue never
/// ran: 503 `shutting_down`, which the official clients retry, against the
/// next instance. One stopped while it ran may have run tools: 503 as well
/// (the server went away, not the client's input), but a code of its own
/// and `x-should-retry: false`, since sending it again may run them again.
/// Neither is the 409 `stopped` a client's own stop gets.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_shutdown_tells_queued_and_running_requests_what_happened() {
    let mut server = start(Setup {
        tool_sleep_ms: 60_000,
        options: ServerOptions {
            shutdown_grace: Duration::from_millis(300),
            ..ServerOptions::default()
        },
        ..Setup::default()
    })
    .await;
    let ask = |text: &str| {
        server
            .post_json(
                "/v1/chat/completions",
                &json!({"model": "homeagent", "messages": [{"role": "user", "content": text}]}),
            )
            .header("x-session-id", "held")
            .send()
    };
    let mut events = server.events().await;
    let running = tokio::spawn(ask("!slowbatch2"));
    // The first input is running (its tools have started) before the
    // second is sent, so the second waits behind it.
    loop {
        let event = events.next_within(30).await.unwrap();
        if json(&event.data)["frame"]["phase"] == "start" {
            break;
        }
    }
    let queued = tokio::spawn(ask("hello"));
    // And a streamed one behind both: its 200 goes out first, so what
    // happened comes as the stream's error chunk.
    let streamed = server
        .post_json(
            "/v1/chat/completions",
            &json!({"model": "homeagent", "stream": true,
                    "messages": [{"role": "user", "content": "hello again"}]}),
        )
        .header("x-session-id", "held")
        .send()
        .await
        .unwrap();
    assert_eq!(streamed.status(), 200);
    let streamed = tokio::spawn(SseReader::new(streamed).all());
    let status = loop {
        let status = common::body_json(server.get("/api/v1/status").send().await.unwrap()).await;
        if status["scheduler"]["queue_depth"]["held"]
            .as_u64()
            .unwrap_or(0)
            >= 2
        {
            break status;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    assert_eq!(status["scheduler"]["queue_depth"]["held"], 2, "{status}");
    server.shutdown().await.unwrap();

    let running = running.await.unwrap().unwrap();
    assert_eq!(running.status(), 503);
    assert_eq!(running.headers()["x-should-retry"], "false");
    let body = common::body_json(running).await;
    assert_eq!(body["error"]["code"], "stopped_by_shutdown", "{body}");

    let queued = queued.await.unwrap().unwrap();
    assert_eq!(queued.status(), 503);
    assert!(queued.headers().get("x-should-retry").is_none());
    let body = common::body_json(queued).await;
    assert_eq!(body["error"]["code"], "shutting_down", "{body}");

    let chunks = streamed.await.unwrap();
    let error = chunks
        .iter()
        .map(|chunk| chunk.data.as_str())
        .find(|data| data.contains("\"error\""))
        .map(json);
    assert_eq!(
        error.as_ref().map(|error| &error["error"]["code"]),
        Some(&json!("shutting_down")),
        "{chunks:?}"
    );
}
