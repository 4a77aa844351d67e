#![allow(clippy::unwrap_used, clippy::expect_used)] // a panic in a test is a test failure

//! `GET /api/v1/events`: numbered frames, exact `Last-Event-ID` replay, an
//! explicit gap for a client the ring no longer covers, and 1,000
//! subscribers at once.

use crate::common;

use std::collections::BTreeSet;

use common::{KEY, Setup, SseReader, body_json, json, start};
use homeagent_agent::Frame;
use homeagent_server::{EventHub, Read, ServerOptions};
use serde_json::json;

fn frame(n: usize) -> Frame {
    Frame::ContentDelta {
        text: format!("t{n}"),
    }
}

#[tokio::test]
async fn the_hub_replays_exactly_what_follows_an_id_and_reports_a_gap_first() {
    let hub = EventHub::starting_at(4, 1);
    for n in 1..=6 {
        assert_eq!(hub.publish("s", &frame(n)), n as u64);
    }
    // The ring holds 3..=6. After 4: exactly 5 and 6.
    let mut sub = hub.subscribe(Some(4));
    let mut ids = Vec::new();
    for _ in 0..2 {
        match sub.next().await.unwrap() {
            Read::Event(e) => ids.push(e.id),
            gap => panic!("unexpected {gap:?}"),
        }
    }
    assert_eq!(ids, [5, 6]);
    // After 1: 2 is gone, so a gap for 2..=2, then 3..=6.
    let mut sub = hub.subscribe(Some(1));
    assert_eq!(sub.next().await.unwrap(), Read::Gap { from: 2, to: 2 });
    let mut ids = Vec::new();
    for _ in 0..4 {
        if let Read::Event(e) = sub.next().await.unwrap() {
            ids.push(e.id);
            assert_eq!(
                json(&e.data),
                json!({"session": "s", "frame": {"type": "content_delta", "text": format!("t{}", e.id)}})
            );
        }
    }
    assert_eq!(ids, [3, 4, 5, 6]);
    // A live subscriber gets what is published next, and only that.
    let mut live = hub.subscribe(None);
    hub.publish("s", &frame(7));
    match live.next().await.unwrap() {
        Read::Event(e) => assert_eq!(e.id, 7),
        gap => panic!("unexpected {gap:?}"),
    }
    // An id from the future (a server whose clock was ahead): not one of
    // this run's, so the gap names the ones this run no longer keeps (1
    // to 3), then everything kept follows.
    let mut sub = hub.subscribe(Some(100));
    assert_eq!(sub.next().await.unwrap(), Read::Gap { from: 1, to: 3 });
    match sub.next().await.unwrap() {
        Read::Event(e) => assert_eq!(e.id, 4),
        gap => panic!("unexpected {gap:?}"),
    }
    // A run that still keeps all it sent: nothing of its own is missing,
    // so its events follow from its first, after an id from before it as
    // after one from beyond it.
    let fresh = EventHub::starting_at(4, 50);
    fresh.publish("s", &frame(1));
    for before_or_beyond in [7, 100] {
        let mut sub = fresh.subscribe(Some(before_or_beyond));
        match sub.next().await.unwrap() {
            Read::Event(e) => assert_eq!(e.id, 50),
            gap => panic!("unexpected {gap:?}"),
        }
    }
    // A subscriber that reads too slowly while the ring turns over is told.
    let mut slow = hub.subscribe(Some(7));
    for n in 8..=20 {
        hub.publish("s", &frame(n));
    }
    assert_eq!(slow.next().await.unwrap(), Read::Gap { from: 8, to: 16 });
    match slow.next().await.unwrap() {
        Read::Event(e) => assert_eq!(e.id, 17),
        gap => panic!("unexpected {gap:?}"),
    }
}

/// A client that saw some of the last run's events and reconnects after a
/// restart (the dashboard does, with `Last-Event-ID`) gets every event of
/// the new run, however many it sent before the client came back: the
/// ids of a run begin past every id an earlier run gave (they count from
/// the start's wall-clock time), so an old id is never read as one of the
/// new run's.
#[tokio::test]
async fn an_id_from_before_a_restart_resumes_at_the_new_runs_first_event() {
    let before = EventHub::new(64);
    for n in 1..=3 {
        before.publish("s", &frame(n));
    }
    let seen = before.latest();
    drop(before);
    // A restart takes at least this long.
    tokio::time::sleep(std::time::Duration::from_millis(2)).await;
    let after = EventHub::new(64);
    assert_eq!(after.latest(), 0, "no event yet");
    let ids: Vec<u64> = (1..=5).map(|n| after.publish("s", &frame(n))).collect();
    assert!(ids[0] > seen, "{ids:?} after {seen}");
    assert!(ids.windows(2).all(|w| w[1] == w[0] + 1), "{ids:?}");
    let mut sub = after.subscribe(Some(seen));
    let mut read = Vec::new();
    for _ in 0..5 {
        match sub.next().await.unwrap() {
            Read::Event(e) => read.push(e.id),
            gap => panic!("unexpected {gap:?}"),
        }
    }
    assert_eq!(read, ids);
}

/// Runs `!batch2` through the sessions API and returns how many frames it
/// produced (start ×2, end ×2, response, plus content deltas).
async fn run_batch(server: &common::TestServer, session: &str) -> usize {
    let response = server
        .post_json(
            &format!("/api/v1/sessions/{session}/messages"),
            &json!({"text": "!batch2"}),
        )
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    SseReader::new(response).all().await.len()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn last_event_id_over_http_replays_exactly_the_missed_events_and_an_overrun_gets_a_gap() {
    let server = start(Setup {
        options: ServerOptions {
            event_ring: 16,
            ..ServerOptions::default()
        },
        ..Setup::default()
    })
    .await;
    // This run's ids: from its first on.
    let before_first = server.state.events().first_id() - 1;
    let first = run_batch(&server, "a").await;
    let seen = server.state.events().latest();
    assert_eq!((seen - before_first) as usize, first);
    let second = run_batch(&server, "b").await;
    assert!(
        first + second <= 16,
        "the test needs both inputs in the ring"
    );
    let latest = server.state.events().latest();
    assert_eq!((latest - seen) as usize, second);

    let mut replay = SseReader::new(
        server
            .get("/api/v1/events")
            .header("last-event-id", seen.to_string())
            .send()
            .await
            .unwrap(),
    );
    let mut ids = Vec::new();
    for _ in 0..second {
        let event = replay.next_within(30).await.unwrap();
        assert_eq!(event.event, None);
        assert_eq!(json(&event.data)["session"], "b");
        ids.push(event.id.unwrap().parse::<u64>().unwrap());
    }
    assert_eq!(ids, ((seen + 1)..=latest).collect::<Vec<_>>());
    // Nothing else was replayed: the next event is a new one.
    run_batch(&server, "c").await;
    let next = replay.next_within(30).await.unwrap();
    assert_eq!(next.id.unwrap(), (latest + 1).to_string());

    // Push the first inputs out of the 16-event ring; resume from the
    // run's first id.
    for i in 0..3 {
        run_batch(&server, &format!("d{i}")).await;
    }
    let latest = server.state.events().latest();
    let oldest = latest - 15;
    let mut overrun = SseReader::new(
        server
            .get("/api/v1/events")
            .header("last-event-id", (before_first + 1).to_string())
            .send()
            .await
            .unwrap(),
    );
    let gap = overrun.next_within(30).await.unwrap();
    assert_eq!(gap.event.as_deref(), Some("gap"));
    assert_eq!(gap.id, None);
    let gap = json(&gap.data);
    assert_eq!(gap["missed_from"], before_first + 2);
    assert_eq!(gap["missed_to"], oldest - 1);
    assert_eq!(gap["missed"], oldest - before_first - 2);
    let after = overrun.next_within(30).await.unwrap();
    assert_eq!(after.id.unwrap(), oldest.to_string());

    let bad = server
        .get("/api/v1/events")
        .header("last-event-id", "abc")
        .send()
        .await
        .unwrap();
    assert_eq!(bad.status(), 400);
    assert_eq!(
        body_json(bad).await["error"]["code"],
        "invalid_last_event_id"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_thousand_subscribers_each_receive_an_event_published_after_all_connected() {
    const SUBSCRIBERS: usize = 1000;
    let server = start(Setup::default()).await;
    // One client per subscriber, so each holds its own connection.
    let mut readers = Vec::with_capacity(SUBSCRIBERS);
    for _ in 0..SUBSCRIBERS {
        let client = reqwest::Client::builder().no_proxy().build().unwrap();
        let response = client
            .get(format!("{}/api/v1/events", server.url))
            .header("cookie", format!("homeagent_token={KEY}"))
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), 200);
        readers.push((client, SseReader::new(response)));
    }
    let status = body_json(server.get("/api/v1/status").send().await.unwrap()).await;
    assert_eq!(status["events"]["subscribers"], SUBSCRIBERS);
    let id = server.state.events().publish("after-all", &frame(1));
    let tasks: Vec<_> = readers
        .into_iter()
        .map(|(client, mut reader)| {
            tokio::spawn(async move {
                let event = reader.next_within(120).await.unwrap();
                drop(client);
                (event.id, json(&event.data)["session"].clone())
            })
        })
        .collect();
    let mut got = BTreeSet::new();
    for (i, task) in tasks.into_iter().enumerate() {
        let (event_id, session) = task.await.unwrap();
        assert_eq!(event_id, Some(id.to_string()));
        assert_eq!(session, "after-all");
        got.insert(i);
    }
    assert_eq!(got.len(), SUBSCRIBERS);
}
