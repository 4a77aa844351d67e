#![allow(clippy::unwrap_used, clippy::expect_used)] // a panic in a test is a test failure

//! The sessions API: frames over SSE, history, stop, delete; and the load
//! test (24 clients × 12 requests, every one answered once).

use crate::common;

use std::collections::BTreeSet;

use common::{Setup, SseReader, body_json, json, start};
use serde_json::{Value, json};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn messages_stream_the_run_json_frames_and_the_history_can_be_read_and_deleted() {
    let server = start(Setup::default()).await;
    let response = server
        .post_json(
            "/api/v1/sessions/kitchen/messages",
            &json!({"text": "!slowbatch4"}),
        )
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    let frames: Vec<Value> = SseReader::new(response)
        .all()
        .await
        .iter()
        .map(|e| json(&e.data))
        .collect();
    let phase = |p: &str| {
        frames
            .iter()
            .filter(|f| f["type"] == "tool_call" && f["phase"] == p)
            .count()
    };
    assert_eq!(phase("start"), 4);
    assert_eq!(phase("end"), 4);
    assert!(
        frames
            .iter()
            .filter(|f| f["type"] == "tool_call")
            .all(|f| f["parallel"] == true && f["batch_size"] == 4)
    );
    let last = frames.last().unwrap();
    assert_eq!(last["type"], "response");
    assert!(last["content"].as_str().unwrap().contains("executed=4"));
    assert_eq!(last["turns"], 2);

    let listed = body_json(server.get("/api/v1/sessions").send().await.unwrap()).await;
    let ids: Vec<&str> = listed["sessions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, ["kitchen"]);
    let stored = body_json(server.get("/api/v1/sessions/kitchen").send().await.unwrap()).await;
    assert_eq!(stored["session"]["agent"], "main");
    assert_eq!(stored["session"]["message_count"], 7);
    assert_eq!(stored["messages"].as_array().unwrap().len(), 7);

    // Stop with nothing running cancels nothing.
    let stopped = body_json(
        server
            .post_json("/api/v1/sessions/kitchen/stop", &json!({}))
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(stopped, json!({"session": "kitchen", "cancelled": 0}));

    let client = server.client();
    let delete = || {
        client
            .delete(format!("{}/api/v1/sessions/kitchen", server.url))
            .bearer_auth(common::KEY)
            .send()
    };
    assert_eq!(delete().await.unwrap().status(), 204);
    assert_eq!(delete().await.unwrap().status(), 404);
    let gone = server.get("/api/v1/sessions/kitchen").send().await.unwrap();
    assert_eq!(gone.status(), 404);
    assert_eq!(body_json(gone).await["error"]["code"], "not_found");
}

/// Sends `!slowbatch2` to `session` and reads its frames until both of
/// its tools have started; the rest of the frames are the caller's.
async fn two_tools_running(server: &common::TestServer, session: &str) -> SseReader {
    let response = server
        .post_json(
            &format!("/api/v1/sessions/{session}/messages"),
            &json!({"text": "!slowbatch2"}),
        )
        .send()
        .await
        .unwrap();
    let mut frames = SseReader::new(response);
    let mut starts = 0;
    while starts < 2 {
        let frame = json(&frames.next_within(30).await.unwrap().data);
        if frame["phase"] == "start" {
            starts += 1;
        }
    }
    frames
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stop_cancels_a_running_input_and_an_unknown_agent_is_an_error_frame() {
    let server = start(Setup {
        tool_sleep_ms: 30_000,
        ..Setup::default()
    })
    .await;
    let frames = two_tools_running(&server, "s1").await;
    let stopped = body_json(
        server
            .post_json("/api/v1/sessions/s1/stop", &json!({}))
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(stopped["cancelled"], 1);
    let rest: Vec<Value> = frames.all().await.iter().map(|e| json(&e.data)).collect();
    let last = rest.last().unwrap();
    assert_eq!(last["type"], "error");
    assert_eq!(last["code"], "stopped");

    let response = server
        .post_json(
            "/api/v1/sessions/s2/messages",
            &json!({"text": "hi", "agent": "nobody"}),
        )
        .send()
        .await
        .unwrap();
    let frames = SseReader::new(response).all().await;
    assert_eq!(frames.len(), 1);
    let frame = json(&frames[0].data);
    assert_eq!(frame["type"], "error");
    assert_eq!(frame["code"], "agent");
}

/// Deleting a session whose input runs stops the input first and deletes
/// after it ended: its client is told `stopped` (not a failed turn), and
/// nothing it still commits brings the session back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deleting_a_running_session_stops_its_input_before_deleting() {
    let server = start(Setup {
        tool_sleep_ms: 30_000,
        ..Setup::default()
    })
    .await;
    let frames = two_tools_running(&server, "doomed").await;
    let deleted = server
        .client()
        .delete(format!("{}/api/v1/sessions/doomed", server.url))
        .bearer_auth(common::KEY)
        .send()
        .await
        .unwrap();
    assert_eq!(deleted.status(), 204);
    let rest: Vec<Value> = frames.all().await.iter().map(|e| json(&e.data)).collect();
    let last = rest.last().unwrap();
    assert_eq!(last["type"], "error", "{rest:?}");
    assert_eq!(last["code"], "stopped", "{rest:?}");
    let gone = server.get("/api/v1/sessions/doomed").send().await.unwrap();
    assert_eq!(gone.status(), 404);
    let listed = body_json(server.get("/api/v1/sessions").send().await.unwrap()).await;
    assert_eq!(listed["sessions"], json!([]), "{listed}");
}

/// A session another process is running an input on (its claim held on
/// the store's lock file) is not deleted under it: the DELETE is a 409
/// `session_busy` to send again, not a 500.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deleting_a_session_another_process_runs_is_a_busy_refusal() {
    let server = start(Setup::default()).await;
    let answered = server
        .post_json("/api/v1/sessions/shared/messages", &json!({"text": "hi"}))
        .send()
        .await
        .unwrap();
    assert_eq!(answered.status(), 200);
    SseReader::new(answered).all().await;
    let elsewhere = homeagent_agent::store::Store::open(&server.agent.store_path).unwrap();
    let claim = elsewhere.claim_session("shared").unwrap();
    let delete = || {
        server
            .client()
            .delete(format!("{}/api/v1/sessions/shared", server.url))
            .bearer_auth(common::KEY)
            .send()
    };
    let refused = delete().await.unwrap();
    assert_eq!(refused.status(), 409);
    assert!(refused.headers().get("x-should-retry").is_none());
    let body = body_json(refused).await;
    assert_eq!(body["error"]["code"], "session_busy", "{body}");
    let message = body["error"]["message"].as_str().unwrap();
    assert!(message.contains("shared"), "{message}");
    // Still there; and deleted once the other process lets go.
    let kept = server.get("/api/v1/sessions/shared").send().await.unwrap();
    assert_eq!(kept.status(), 200);
    drop(claim);
    assert_eq!(delete().await.unwrap().status(), 204);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn twenty_four_clients_times_twelve_requests_are_all_answered_once() {
    const CLIENTS: usize = 24;
    const REQUESTS: usize = 12;
    // Held writes wait a minute: the write count below does not depend on
    // how fast the machine runs the demo model.
    let server = start(Setup {
        write_hold: Some(std::time::Duration::from_secs(60)),
        ..Setup::default()
    })
    .await;
    let url = format!("{}/v1/chat/completions", server.url);
    let tasks: Vec<_> = (0..CLIENTS)
        .map(|c| {
            let url = url.clone();
            tokio::spawn(async move {
                let client = reqwest::Client::builder().no_proxy().build().unwrap();
                let mut answers = Vec::new();
                for r in 0..REQUESTS {
                    let tag = format!("c{c}r{r}");
                    let body = json!({"model": "homeagent", "stream": r % 2 == 1,
                        "messages": [{"role": "user", "content": format!("{tag} !batch1")}]});
                    let response = client
                        .post(&url)
                        .bearer_auth(common::KEY)
                        .body(body.to_string())
                        .send()
                        .await
                        .unwrap();
                    assert_eq!(response.status(), 200, "{tag}");
                    let session = common::session_of(&response);
                    let content = if r % 2 == 1 {
                        let events = SseReader::new(response).all().await;
                        assert_eq!(events.last().unwrap().data, "[DONE]");
                        events[..events.len() - 1]
                            .iter()
                            .filter_map(|e| {
                                json(&e.data)["choices"][0]["delta"]["content"]
                                    .as_str()
                                    .map(str::to_owned)
                            })
                            .collect::<String>()
                    } else {
                        body_json(response).await["choices"][0]["message"]["content"]
                            .as_str()
                            .unwrap()
                            .to_owned()
                    };
                    assert!(content.contains("executed=1"), "{tag}: {content}");
                    answers.push(session);
                }
                answers
            })
        })
        .collect();
    let mut sessions = BTreeSet::new();
    let mut answered = 0;
    for task in tasks {
        for session in task.await.unwrap() {
            answered += 1;
            assert!(sessions.insert(session), "a session answered twice");
        }
    }
    assert_eq!(answered, CLIENTS * REQUESTS);
    let status = body_json(server.get("/api/v1/status").send().await.unwrap()).await;
    assert_eq!(status["scheduler"]["executed"], CLIENTS * REQUESTS);
    assert_eq!(status["scheduler"]["enqueued"], CLIENTS * REQUESTS);
    assert_eq!(status["scheduler"]["rejected"], 0);
    // One write per input, however they were grouped into commits: the
    // user message (creating the session: a request without earlier
    // messages has nothing to seed), the call (to `demo_echo`, which
    // changes nothing, so it need not be stored before it runs) and its
    // result, all carried by the reply (the demo model answers within the
    // hold).
    assert_eq!(status["store"]["writes"], CLIENTS * REQUESTS);
    let commits = status["store"]["commits"].as_u64().unwrap();
    assert!(
        (1..=CLIENTS as u64 * REQUESTS as u64).contains(&commits),
        "{commits}"
    );
    // Each input ran its one tool exactly once: one user message per session.
    let listed = body_json(server.get("/api/v1/sessions").send().await.unwrap()).await;
    let listed = listed["sessions"].as_array().unwrap();
    assert_eq!(listed.len(), CLIENTS * REQUESTS);
    assert!(listed.iter().all(|s| s["message_count"] == 4));
}
