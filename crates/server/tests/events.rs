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
    let hub = EventHub::new(4);
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
    // An id from the future (a restarted server): this server's ids start
    // again at 1, so the gap names the ones it no longer keeps (1 to 3),
    // then everything kept follows.
    let mut sub = hub.subscribe(Some(100));
    assert_eq!(sub.next().await.unwrap(), Read::Gap { from: 1, to: 3 });
    match sub.next().await.unwrap() {
        Read::Event(e) => assert_eq!(e.id, 4),
        gap => panic!("unexpected {gap:?}"),
    }
    // A restarted server that still keeps all it sent: nothing of its own
    // is missing, so its events follow from 1.
    let fresh = EventHub::new(4);
    fresh.publish("s", &frame(1));
    let mut sub = fresh.subscribe(Some(100));
    match sub.next().await.unwrap() {
        Read::Event(e) => assert_eq!(e.id, 1),
        gap => panic!("unexpected {gap:?}"),
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
    let first = run_batch(&server, "a").await;
    let seen = server.state.events().latest();
    assert_eq!(seen as usize, first);
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

    // Push the first inputs out of the 16-event ring; resume from id 1.
    for i in 0..3 {
        run_batch(&server, &format!("d{i}")).await;
    }
    let latest = server.state.events().latest();
    let oldest = latest - 15;
    let mut overrun = SseReader::new(
        server
            .get("/api/v1/events")
            .header("last-event-id", "1")
            .send()
            .await
            .unwrap(),
    );
    let gap = overrun.next_within(30).await.unwrap();
    assert_eq!(gap.event.as_deref(), Some("gap"));
    assert_eq!(gap.id, None);
    let gap = json(&gap.data);
    assert_eq!(gap["missed_from"], 2);
    assert_eq!(gap["missed_to"], oldest - 1);
    assert_eq!(gap["missed"], oldest - 2);
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
