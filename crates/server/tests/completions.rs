#![allow(clippy::unwrap_used, clippy::expect_used)] // a panic in a test is a test failure

//! `POST /v1/chat/completions`, whole and streamed, stateless and with
//! `X-Session-Id`; a client that disconnects mid-stream stops its turn.

use crate::common;

use std::time::Duration;

use common::{Setup, SseReader, body_json, json, start};
use serde_json::{Value, json};

/// The session as the sessions API returns it (messages included).
async fn stored(server: &common::TestServer, session: &str) -> Value {
    body_json(
        server
            .get(&format!("/api/v1/sessions/{session}"))
            .send()
            .await
            .unwrap(),
    )
    .await
}

fn request(messages: Value, stream: bool) -> Value {
    json!({"model": "homeagent", "messages": messages, "stream": stream,
           "stream_options": if stream { json!({"include_usage": true}) } else { Value::Null }})
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_whole_completion_runs_the_agents_tools_and_answers_the_final_message() {
    let server = start(Setup::default()).await;
    let response = server
        .post_json(
            "/v1/chat/completions",
            &request(json!([{"role": "user", "content": "!slowbatch4"}]), false),
        )
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    let session = common::session_of(&response);
    let body = body_json(response).await;
    assert_eq!(body["object"], "chat.completion");
    assert_eq!(body["model"], "homeagent");
    assert_eq!(body["choices"].as_array().unwrap().len(), 1);
    assert_eq!(body["choices"][0]["message"]["role"], "assistant");
    assert_eq!(body["choices"][0]["finish_reason"], "stop");
    let content = body["choices"][0]["message"]["content"].as_str().unwrap();
    assert!(content.contains("executed=4"), "{content}");
    let usage = &body["usage"];
    assert_eq!(
        usage["total_tokens"].as_u64().unwrap(),
        usage["prompt_tokens"].as_u64().unwrap() + usage["completion_tokens"].as_u64().unwrap()
    );
    // The turn is stored: user, assistant with 4 calls, 4 results, answer.
    let stored = stored(&server, &session).await;
    let roles: Vec<&str> = stored["messages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["role"].as_str().unwrap())
        .collect();
    assert_eq!(
        roles,
        [
            "user",
            "assistant",
            "tool",
            "tool",
            "tool",
            "tool",
            "assistant"
        ]
    );
    assert_eq!(
        stored["messages"][1]["tool_calls"]
            .as_array()
            .unwrap()
            .len(),
        4
    );
    assert_eq!(stored["tool_events"].as_array().unwrap().len(), 8);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_streamed_completion_sends_chunks_usage_last_and_done() {
    let server = start(Setup::default()).await;
    let response = server
        .post_json(
            "/v1/chat/completions",
            &request(json!([{"role": "user", "content": "!slowbatch4"}]), true),
        )
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    assert_eq!(response.headers()["content-type"], "text/event-stream");
    let events = SseReader::new(response).all().await;
    let (done, chunks) = events.split_last().unwrap();
    assert_eq!(done.data, "[DONE]");
    let chunks: Vec<Value> = chunks.iter().map(|e| json(&e.data)).collect();
    assert!(chunks.len() >= 4, "{chunks:#?}");
    let id = &chunks[0]["id"];
    for chunk in &chunks {
        assert_eq!(chunk["object"], "chat.completion.chunk");
        assert_eq!(&chunk["id"], id);
        assert_eq!(chunk["model"], "homeagent");
    }
    assert_eq!(chunks[0]["choices"][0]["delta"]["role"], "assistant");
    // With include_usage every other chunk says `"usage": null`, as OpenAI's.
    for chunk in &chunks[..chunks.len() - 1] {
        assert_eq!(chunk.get("usage"), Some(&Value::Null), "{chunk}");
    }
    // The usage chunk is last, with no choices; the one before ends the choice.
    let (usage, body) = chunks.split_last().unwrap();
    assert_eq!(usage["choices"], json!([]));
    assert!(usage["usage"]["total_tokens"].as_u64().unwrap() > 0);
    let (stop, deltas) = body.split_last().unwrap();
    assert_eq!(stop["choices"][0]["finish_reason"], "stop");
    assert_eq!(stop["choices"][0]["delta"], json!({}));
    let text: String = deltas
        .iter()
        .filter_map(|c| c["choices"][0]["delta"]["content"].as_str())
        .collect();
    assert!(text.contains("executed=4"), "{text}");
    for delta in deltas {
        assert_eq!(delta["choices"][0]["finish_reason"], Value::Null);
    }

    // Without include_usage there is no usage chunk.
    let response = server
        .post_json(
            "/v1/chat/completions",
            &json!({"model": "homeagent", "stream": true,
                    "messages": [{"role": "user", "content": "hello"}]}),
        )
        .send()
        .await
        .unwrap();
    let events = SseReader::new(response).all().await;
    assert_eq!(events.last().unwrap().data, "[DONE]");
    let before = json(&events[events.len() - 2].data);
    assert_eq!(before["choices"][0]["finish_reason"], "stop");
    assert!(events.iter().all(|e| !e.data.contains("\"usage\"")));
}

/// The text of a streamed completion, all deltas joined.
async fn streamed_text(server: &common::TestServer, content: &str) -> String {
    let response = server
        .post_json(
            "/v1/chat/completions",
            &request(json!([{"role": "user", "content": content}]), true),
        )
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    SseReader::new(response).completion_text().await
}

/// A streamed answer says what the whole answer says, including the note
/// the agent adds when it stops after its tool turns.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_streamed_answer_ends_with_the_same_text_as_the_whole_one() {
    let server = start(Setup {
        extra_toml: "[agent]\nmax_tool_turns = 1\n",
        ..Setup::default()
    })
    .await;
    for content in ["!batch2", "!text"] {
        let whole = body_json(
            server
                .post_json(
                    "/v1/chat/completions",
                    &request(json!([{"role": "user", "content": content}]), false),
                )
                .send()
                .await
                .unwrap(),
        )
        .await;
        let whole = whole["choices"][0]["message"]["content"]
            .as_str()
            .unwrap()
            .to_owned();
        assert!(!whole.is_empty());
        if content == "!batch2" {
            // OpenAI has no finish_reason for it: the text says it.
            assert!(whole.contains("agent.max_tool_turns"), "{whole}");
        }
        assert_eq!(streamed_text(&server, content).await, whole, "{content}");
    }
}

/// What the scheduler refuses at once keeps its HTTP status when the
/// client asked for a stream (nothing was streamed yet).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_streamed_request_refused_at_once_gets_its_status() {
    let server = start(Setup::default()).await;
    let response = server
        .post_json(
            "/v1/chat/completions",
            &request(json!([{"role": "user", "content": "  "}]), true),
        )
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 400);
    assert_eq!(body_json(response).await["error"]["code"], "empty_input");
}

/// A blank input is refused before anything is stored: earlier messages
/// do not seed a session for an input that never runs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_blank_input_stores_no_session_even_with_earlier_messages() {
    let server = start(Setup::default()).await;
    for stream in [false, true] {
        let response = server
            .post_json(
                "/v1/chat/completions",
                &request(
                    json!([
                        {"role": "user", "content": "first"},
                        {"role": "assistant", "content": "ok"},
                        {"role": "user", "content": " \n\t"},
                    ]),
                    stream,
                ),
            )
            .header("x-session-id", "blank-seed")
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), 400, "stream {stream}");
        let answer = body_json(response).await;
        assert_eq!(answer["error"]["code"], "empty_input", "{answer}");
        let stored = server
            .get("/api/v1/sessions/blank-seed")
            .send()
            .await
            .unwrap();
        assert_eq!(stored.status(), 404, "stream {stream}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn earlier_messages_seed_a_fresh_session_and_x_session_id_continues_one() {
    let server = start(Setup::default()).await;
    let messages = json!([
        {"role": "system", "content": "be brief"},
        {"role": "user", "content": [{"type": "text", "text": "first"}]},
        {"role": "assistant", "content": "ok"},
        {"role": "user", "content": "!batch2"},
    ]);
    let response = server
        .post_json("/v1/chat/completions", &request(messages, false))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    let session = common::session_of(&response);
    assert!(
        body_json(response).await["choices"][0]["message"]["content"]
            .as_str()
            .unwrap()
            .contains("executed=2")
    );
    let history = |server: &common::TestServer, session: String| {
        let request = server.get(&format!("/api/v1/sessions/{session}"));
        async move { body_json(request.send().await.unwrap()).await["messages"].clone() }
    };
    let stored = history(&server, session.clone()).await;
    let first: Vec<(String, String)> = stored
        .as_array()
        .unwrap()
        .iter()
        .take(4)
        .map(|m| {
            (
                m["role"].as_str().unwrap().to_owned(),
                m["content"].as_str().unwrap().to_owned(),
            )
        })
        .collect();
    assert_eq!(
        first,
        [
            ("system".to_owned(), "be brief".to_owned()),
            ("user".to_owned(), "first".to_owned()),
            ("assistant".to_owned(), "ok".to_owned()),
            ("user".to_owned(), "!batch2".to_owned()),
        ]
    );
    let before = stored.as_array().unwrap().len();
    assert_eq!(before, 4 + 1 + 2 + 1);

    // Continuing: only the last user message is added; the rest of the
    // request's messages are not stored again.
    let response = server
        .post_json(
            "/v1/chat/completions",
            &request(
                json!([{"role": "user", "content": "ignored"}, {"role": "user", "content": "!batch3"}]),
                false,
            ),
        )
        .header("x-session-id", &session)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    assert_eq!(response.headers()["x-session-id"], session.as_str());
    let stored = history(&server, session.clone()).await;
    let stored = stored.as_array().unwrap();
    assert_eq!(stored.len(), before + 1 + 1 + 3 + 1);
    assert_eq!(stored[before]["content"], "!batch3");

    // Two stateless requests get two sessions.
    let a = server
        .post_json(
            "/v1/chat/completions",
            &request(json!([{"role": "user", "content": "hi"}]), false),
        )
        .send()
        .await
        .unwrap();
    let b = server
        .post_json(
            "/v1/chat/completions",
            &request(json!([{"role": "user", "content": "hi"}]), false),
        )
        .send()
        .await
        .unwrap();
    assert_ne!(a.headers()["x-session-id"], b.headers()["x-session-id"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_disconnects_mid_stream_stops_its_turn_and_the_history_stays_paired() {
    // Tools that would sleep 30 s: only a stop ends them early.
    let server = start(Setup {
        tool_sleep_ms: 30_000,
        ..Setup::default()
    })
    .await;
    let mut events = server.events().await;
    let response = server
        .post_json(
            "/v1/chat/completions",
            &request(json!([{"role": "user", "content": "!slowbatch4"}]), true),
        )
        .send()
        .await
        .unwrap();
    let session = common::session_of(&response);
    // Wait until all four tools are running, then hang up.
    let mut started = 0;
    while started < 4 {
        let event = json(&events.next_within(30).await.unwrap().data);
        if event["frame"]["type"] == "tool_call" && event["frame"]["phase"] == "start" {
            started += 1;
        }
    }
    drop(response);
    // The turn ends (stopped) and every call has its `cancelled` outcome.
    let mut ended = Vec::new();
    loop {
        let event = json(&events.next_within(30).await.unwrap().data);
        assert_eq!(event["session"], session.as_str());
        if event["frame"]["type"] == "tool_call" && event["frame"]["phase"] == "end" {
            ended.push(event["frame"]["status"].as_str().unwrap().to_owned());
        }
        if event["frame"]["type"] == "error" {
            assert_eq!(event["frame"]["code"], "stopped");
            break;
        }
    }
    assert_eq!(ended, ["cancelled"; 4]);
    let stored = stored(&server, &session).await;
    let messages = stored["messages"].as_array().unwrap();
    let calls: Vec<&str> = messages[1]["tool_calls"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["id"].as_str().unwrap())
        .collect();
    let results: Vec<&str> = messages[2..]
        .iter()
        .map(|m| m["tool_call_id"].as_str().unwrap())
        .collect();
    assert_eq!(calls, results);
    assert!(messages[2..].iter().all(|m| m["success"] == false));
    let status = body_json(server.get("/api/v1/status").send().await.unwrap()).await;
    assert_eq!(status["scheduler"]["cancelled"], 1);
    assert_eq!(status["scheduler"]["running_sessions"], 0);
    tokio::time::sleep(Duration::from_millis(10)).await;
}

/// Two clients on one session: the one whose input is queued hangs up.
/// Only its own input is cancelled; the other client's running turn ends
/// normally, and the cancelled input is never stored.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_hangs_up_cancels_only_its_own_input_on_a_shared_session() {
    let server = start(Setup {
        tool_sleep_ms: 3_000,
        ..Setup::default()
    })
    .await;
    let session = "shared-by-two-clients";
    let mut events = server.events().await;
    let first = {
        let send = server
            .post_json(
                "/v1/chat/completions",
                &request(json!([{"role": "user", "content": "!slowbatch2"}]), false),
            )
            .header("x-session-id", session);
        tokio::spawn(async move { send.send().await.unwrap() })
    };
    let mut started = 0;
    while started < 2 {
        let event = json(&events.next_within(30).await.unwrap().data);
        if event["frame"]["type"] == "tool_call" && event["frame"]["phase"] == "start" {
            started += 1;
        }
    }
    let second = server
        .post_json(
            "/v1/chat/completions",
            &request(
                json!([{"role": "user", "content": "!text from the second client"}]),
                true,
            ),
        )
        .header("x-session-id", session)
        .send()
        .await
        .unwrap();
    assert_eq!(second.status(), 200);
    // At least until its input has been queued behind the first one.
    tokio::time::sleep(Duration::from_millis(300)).await;
    drop(second);

    let first = first.await.unwrap();
    let status = first.status();
    let body = first.text().await.unwrap();
    assert_eq!(status, 200, "{body}");
    assert_eq!(json(&body)["choices"][0]["finish_reason"], "stop", "{body}");
    let stored = stored(&server, session).await;
    let inputs: Vec<&str> = stored["messages"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["role"] == "user")
        .map(|m| m["content"].as_str().unwrap())
        .collect();
    assert_eq!(inputs, ["!slowbatch2"]);
    let status = body_json(server.get("/api/v1/status").send().await.unwrap()).await;
    assert_eq!(status["scheduler"]["cancelled"], 1);
}

/// Pids of running processes whose command line is exactly `argv`.
fn processes_running(argv: &[&str]) -> Vec<u32> {
    let wanted: Vec<u8> = argv.iter().flat_map(|a| a.bytes().chain([0])).collect();
    std::fs::read_dir("/proc")
        .unwrap()
        .filter_map(|entry| entry.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| std::fs::read(format!("/proc/{pid}/cmdline")).is_ok_and(|c| c == wanted))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_disconnects_stops_the_child_process_of_its_running_tool() {
    let server = start(Setup::default()).await;
    // A duration no other test uses, so the child can be found in /proc.
    let argv = ["sleep", "41.731"];
    let input =
        r#"!calls [{"name":"cmd_run","arguments":{"command":"sleep 41.731","timeout":"60s"}}]"#;
    let mut events = server.events().await;
    let response = server
        .post_json(
            "/v1/chat/completions",
            &request(json!([{"role": "user", "content": input}]), true),
        )
        .send()
        .await
        .unwrap();
    loop {
        let event = json(&events.next_within(30).await.unwrap().data);
        if event["frame"]["type"] == "tool_call" && event["frame"]["phase"] == "start" {
            break;
        }
    }
    // The child is running (give the spawn a moment to exec).
    let mut found = Vec::new();
    for _ in 0..100 {
        found = processes_running(&argv);
        if !found.is_empty() {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    assert_eq!(found.len(), 1, "the tool's child never appeared");
    drop(response);
    loop {
        let event = json(&events.next_within(30).await.unwrap().data);
        if event["frame"]["type"] == "error" {
            assert_eq!(event["frame"]["code"], "stopped");
            break;
        }
    }
    // Gone (killed and reaped), long before its 41 s were up.
    let mut left = found.clone();
    for _ in 0..200 {
        left = processes_running(&argv);
        if left.is_empty() {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    assert!(
        left.is_empty(),
        "the child {left:?} outlived its stopped turn"
    );
}

/// A request refused because its client already runs as many turns as it
/// may (429) stores nothing: not even the new session it named.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_refused_for_the_client_limit_creates_no_session() {
    let server = start(Setup {
        tool_sleep_ms: 2_000,
        options: homeagent_server::ServerOptions {
            turns_per_client: 1,
            ..homeagent_server::ServerOptions::default()
        },
        ..Setup::default()
    })
    .await;
    let mut events = server.events().await;
    let first = {
        let send = server
            .post_json(
                "/v1/chat/completions",
                &request(json!([{"role": "user", "content": "!slowbatch2"}]), false),
            )
            .header("x-session-id", "the-running-one");
        tokio::spawn(async move { send.send().await.unwrap() })
    };
    loop {
        let event = json(&events.next_within(30).await.unwrap().data);
        if event["frame"]["type"] == "tool_call" {
            break;
        }
    }
    let refused = server
        .post_json(
            "/v1/chat/completions",
            &request(
                json!([
                    {"role": "user", "content": "earlier"},
                    {"role": "assistant", "content": "reply"},
                    {"role": "user", "content": "!text now"}
                ]),
                false,
            ),
        )
        .header("x-session-id", "never-made")
        .send()
        .await
        .unwrap();
    assert_eq!(refused.status(), 429);
    let missing = server
        .get("/api/v1/sessions/never-made")
        .send()
        .await
        .unwrap();
    assert_eq!(missing.status(), 404);
    assert_eq!(first.await.unwrap().status(), 200);
}

/// A request without earlier messages has nothing to seed: the input's
/// first commit creates the session with the user message, and a model
/// that answers within the store's hold (the demo) lets the reply carry
/// that message: one commit for a text answer, whether the request names
/// a new session or none. (The hold is a minute here, so a slow machine
/// counts the same.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_without_earlier_messages_costs_one_commit_for_a_quick_text_answer() {
    let server = start(Setup {
        write_hold: Some(std::time::Duration::from_secs(60)),
        ..Setup::default()
    })
    .await;
    let store = server.state.runtime().store();
    for named in [None, Some("named-new")] {
        let before = store.write_stats().commits;
        let mut post = server.post_json(
            "/v1/chat/completions",
            &request(json!([{"role": "user", "content": "hello"}]), false),
        );
        if let Some(session) = named {
            post = post.header("x-session-id", session);
        }
        let response = post.send().await.unwrap();
        assert_eq!(response.status(), 200);
        let session = common::session_of(&response);
        assert_eq!(store.write_stats().commits - before, 1, "{named:?}");
        let roles: Vec<String> = stored(&server, &session).await["messages"]
            .as_array()
            .unwrap()
            .iter()
            .map(|m| m["role"].as_str().unwrap().to_owned())
            .collect();
        assert_eq!(roles, ["user", "assistant"], "{named:?}");
    }
}

/// A session of another agent is refused before anything is stored,
/// streamed or not, with earlier messages or without.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_of_another_agent_is_refused_with_409_and_nothing_stored() {
    let server = start(Setup::default()).await;
    let store = server.state.runtime().store();
    store.ensure_session("theirs", "other-agent").unwrap();
    let before = store.write_stats().commits;
    for stream in [false, true] {
        for prior in [json!([]), json!([{"role": "user", "content": "earlier"}])] {
            let mut messages = prior.as_array().unwrap().clone();
            messages.push(json!({"role": "user", "content": "hello"}));
            let response = server
                .post_json(
                    "/v1/chat/completions",
                    &request(Value::Array(messages), stream),
                )
                .header("x-session-id", "theirs")
                .send()
                .await
                .unwrap();
            assert_eq!(response.status(), 409, "stream {stream}, prior {prior}");
            // OpenAI's SDKs retry a 409 unless told not to; sent again,
            // the same request meets the same conflict.
            assert_eq!(response.headers()["x-should-retry"], "false");
            assert_eq!(
                body_json(response).await["error"]["code"],
                "session_conflict",
                "stream {stream}, prior {prior}"
            );
        }
    }
    assert_eq!(store.write_stats().commits, before);
    assert!(store.history("theirs").unwrap().is_empty());
}

/// A session another process is running (its claim held through a second
/// handle on the same file) refuses the input with 409 `session_busy`, not
/// a server error, and stores nothing; once free, it answers.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_running_elsewhere_is_refused_with_409_session_busy() {
    let server = start(Setup::default()).await;
    let store = server.state.runtime().store();
    store.ensure_session("shared", "main").unwrap();
    let elsewhere = homeagent_agent::store::Store::open(store.path()).unwrap();
    let claim = elsewhere.claim_session("shared").unwrap();
    let send = || {
        server
            .post_json(
                "/v1/chat/completions",
                &request(json!([{"role": "user", "content": "!text hi"}]), false),
            )
            .header("x-session-id", "shared")
            .send()
    };
    let refused = send().await.unwrap();
    assert_eq!(refused.status(), 409);
    // Nothing ran: the SDK's own retry is welcome.
    assert!(refused.headers().get("x-should-retry").is_none());
    assert_eq!(body_json(refused).await["error"]["code"], "session_busy");
    assert!(store.history("shared").unwrap().is_empty());
    drop(claim);
    assert_eq!(send().await.unwrap().status(), 200);
    assert_eq!(store.history("shared").unwrap().len(), 2);
}

/// A whole (not streamed) answer to a session the request names reads
/// the session's agent once: the input's own load checks it under the
/// session's claim (and refuses another agent's with the same 409,
/// above). A streamed answer starts before the input runs, so it checks
/// first as well.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_a_streamed_answer_checks_a_named_sessions_agent_before_its_input() {
    let server = start(Setup::default()).await;
    let store = server.state.runtime().store();
    store.ensure_session("mine", "main").unwrap();
    // The first input reads the whole history on the blocking pool after
    // its quick path found it not remembered: a read more, once.
    for (stream, checks) in [
        (false, None),
        (false, Some(1)),
        (true, Some(2)),
        (false, Some(1)),
    ] {
        let before = store.read_stats().sessions_checked;
        let response = server
            .post_json(
                "/v1/chat/completions",
                &request(json!([{"role": "user", "content": "!text hi"}]), stream),
            )
            .header("x-session-id", "mine")
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), 200, "stream {stream}");
        let _ = response.text().await.unwrap();
        if let Some(checks) = checks {
            assert_eq!(
                store.read_stats().sessions_checked - before,
                checks,
                "stream {stream}"
            );
        }
    }
}

/// A chat UI often opens its history with the assistant's greeting.
/// Anthropic and Gemini refuse such a history as it is; a client of the
/// OpenAI-compatible endpoint must get its answer whichever wire the agent
/// speaks. (The mock refuses model-first histories as those APIs do.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_history_that_opens_with_a_greeting_is_answered_over_anthropic_and_gemini() {
    let mock = homeagent_mock_llm::MockServer::start(
        "127.0.0.1:0",
        homeagent_mock_llm::ServerConfig::default(),
    )
    .await
    .unwrap();
    for protocol in ["anthropic", "gemini"] {
        let source = format!(
            "[[llm.sources]]\nname = \"remote\"\nprotocol = \"{protocol}\"\n\
             base_url = \"{}\"\nmodel = \"mock\"\n",
            mock.url()
        );
        let server = start(Setup {
            extra_toml: source.leak(),
            ..Setup::default()
        })
        .await;
        let messages = json!([
            {"role": "assistant", "content": "Ahoy! What can I do for ye?"},
            {"role": "user", "content": "!batch2"},
        ]);
        let response = server
            .post_json("/v1/chat/completions", &request(messages, false))
            .send()
            .await
            .unwrap();
        let status = response.status();
        let body = body_json(response).await;
        assert_eq!(status, 200, "{protocol}: {body}");
        let content = body["choices"][0]["message"]["content"].as_str().unwrap();
        assert!(content.contains("executed=2"), "{protocol}: {content}");
    }
    let stats: Value = reqwest::get(format!("{}/stats", mock.url()))
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(stats["bad_requests"], 0, "{stats}");
    mock.shutdown().await.unwrap();
}

/// An answer the output token limit cut off says so, whole and streamed,
/// the way OpenAI's endpoint does: a client that checks `finish_reason`
/// can ask for the rest.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_answer_cut_off_by_the_token_limit_finishes_with_length() {
    let server = start(Setup::default()).await;
    let whole = body_json(
        server
            .post_json(
                "/v1/chat/completions",
                &request(json!([{"role": "user", "content": "!cut"}]), false),
            )
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(whole["choices"][0]["finish_reason"], "length", "{whole}");
    let content = whole["choices"][0]["message"]["content"].as_str().unwrap();
    assert!(content.ends_with("in the middle of a"), "{content}");

    let response = server
        .post_json(
            "/v1/chat/completions",
            &request(json!([{"role": "user", "content": "!cut"}]), true),
        )
        .send()
        .await
        .unwrap();
    let events = SseReader::new(response).all().await;
    let finishes: Vec<Value> = events
        .iter()
        .filter(|e| e.data != "[DONE]")
        .map(|e| json(&e.data)["choices"][0]["finish_reason"].clone())
        .filter(|f| !f.is_null())
        .collect();
    assert_eq!(finishes, vec![json!("length")]);
}

/// A whole (not streamed) completion that fails after its input began
/// still names its session: a stateless request with earlier messages
/// seeded one, and the input's message and calls are stored there. The
/// error said nothing, so the client could neither look at the session
/// nor resume it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_whole_completion_that_fails_after_it_began_names_its_session() {
    let server = start(Setup {
        tool_sleep_ms: 30_000,
        ..Setup::default()
    })
    .await;
    let mut events = server.events().await;
    let messages = json!([
        {"role": "user", "content": "a"},
        {"role": "assistant", "content": "b"},
        {"role": "user", "content": "!slowbatch4"},
    ]);
    let completion = server
        .post_json("/v1/chat/completions", &request(messages, false))
        .send();
    let completion = tokio::spawn(completion);
    let session = loop {
        let event = json(&events.next_within(30).await.unwrap().data);
        if event["frame"]["type"] == "tool_call" && event["frame"]["phase"] == "start" {
            break event["session"].as_str().unwrap().to_owned();
        }
    };
    let stop = server
        .post_json(&format!("/api/v1/sessions/{session}/stop"), &json!({}))
        .send()
        .await
        .unwrap();
    assert_eq!(stop.status(), 200);
    let response = completion.await.unwrap().unwrap();
    assert_eq!(response.status(), 409);
    assert_eq!(common::session_of(&response), session);
    assert_eq!(body_json(response).await["error"]["code"], "stopped");
}
