#![allow(clippy::unwrap_used, clippy::expect_used)] // a panic in a test is a test failure

//! A stateless client (Open WebUI, LibreChat, a script with the OpenAI
//! SDK) sends the whole conversation with every request. A request whose
//! earlier messages are exactly what an answer of this server left the
//! client with continues that answer's session: the conversation is one
//! session (not one per request, each holding the whole history again),
//! and the agent sees its own tool calls and results of the earlier
//! exchanges, which the client never had.

use crate::common;

use common::{Setup, SseReader, body_json, start};
use serde_json::{Value, json};

/// Sends `messages` statelessly; the session the answer ran in and the
/// answer's text as the client got it (a stream's deltas joined).
async fn complete(server: &common::TestServer, messages: &Value, stream: bool) -> (String, String) {
    let body = json!({"model": "homeagent", "messages": messages, "stream": stream});
    complete_with(server, &body).await
}

/// [`complete`] with the whole request body.
async fn complete_with(server: &common::TestServer, body: &Value) -> (String, String) {
    let stream = body["stream"] == true;
    let response = server
        .post_json("/v1/chat/completions", body)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    let session = common::session_of(&response);
    let text = if stream {
        SseReader::new(response).completion_text().await
    } else {
        body_json(response).await["choices"][0]["message"]["content"]
            .as_str()
            .unwrap()
            .to_owned()
    };
    (session, text)
}

/// The stored messages of `session`: (role, content).
async fn history(server: &common::TestServer, session: &str) -> Vec<(String, String)> {
    let stored = body_json(
        server
            .get(&format!("/api/v1/sessions/{session}"))
            .send()
            .await
            .unwrap(),
    )
    .await;
    stored["messages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| {
            (
                m["role"].as_str().unwrap().to_owned(),
                m["content"].as_str().unwrap_or_default().to_owned(),
            )
        })
        .collect()
}

/// `messages` as the client sends them next: with the `answer` it got,
/// then its next `input`.
fn then(messages: &Value, answer: &str, input: &str) -> Value {
    let mut next = messages.clone();
    if let Some(list) = next.as_array_mut() {
        list.push(json!({"role": "assistant", "content": answer}));
        list.push(json!({"role": "user", "content": input}));
    }
    next
}

fn sessions_in(list: &Value) -> usize {
    list["sessions"].as_array().unwrap().len()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stateless_conversation_continues_the_session_its_last_answer_came_from() {
    let server = start(Setup::default()).await;
    for stream in [false, true] {
        let opening = json!([
            {"role": "system", "content": "be brief"},
            {"role": "user", "content": "!batch2"},
        ]);
        let (first, answer) = complete(&server, &opening, stream).await;
        let after_first = history(&server, &first).await;

        // The client sends the conversation back with its next input.
        let messages = then(&opening, &answer, "!batch3");
        let (second, next_answer) = complete(&server, &messages, stream).await;
        assert_eq!(second, first, "stream {stream}: the same session");
        let after_second = history(&server, &second).await;
        // Only the new input and what it made were added: user, the call
        // turn, three results, the answer.
        assert_eq!(
            after_second.len(),
            after_first.len() + 6,
            "stream {stream}: {after_second:?}"
        );
        assert_eq!(after_second[..after_first.len()], after_first[..]);
        assert_eq!(
            after_second[after_first.len()],
            ("user".to_owned(), "!batch3".to_owned())
        );
        // The agent's own tool results of the first exchange stay in the
        // session (a seeded one would hold only the texts).
        let results = after_second.iter().filter(|(role, _)| role == "tool");
        assert_eq!(results.count(), 5);

        // A regenerated answer (the same earlier messages again) cannot
        // continue a session that has moved on: a new one, seeded.
        let (other, _) = complete(&server, &messages, stream).await;
        assert_ne!(other, first, "stream {stream}");
        let seeded = history(&server, &other).await;
        let roles: Vec<&str> = seeded[..4].iter().map(|(role, _)| role.as_str()).collect();
        assert_eq!(roles, ["system", "user", "assistant", "user"]);

        // The first session goes on from its newest answer...
        let (third, _) = complete(&server, &then(&messages, &next_answer, "!text"), stream).await;
        assert_eq!(third, first, "stream {stream}");

        // ...but not from an answer the client changed.
        let edited = then(&messages, &format!("{next_answer} (edited)"), "!text");
        let (fourth, _) = complete(&server, &edited, stream).await;
        assert_ne!(fourth, first, "stream {stream}");
    }
    // Two conversations, each one session, plus a regenerated and an
    // edited branch of each.
    let list = body_json(server.get("/api/v1/sessions").send().await.unwrap()).await;
    assert_eq!(sessions_in(&list), 6);
}

/// Sends `text` to `session` through the sessions API; the response, its
/// stream not yet read.
async fn send_to_session(
    server: &common::TestServer,
    session: &str,
    text: &str,
) -> reqwest::Response {
    let response = server
        .post_json(
            &format!("/api/v1/sessions/{session}/messages"),
            &json!({"text": text}),
        )
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    response
}

/// A conversation continued by another client (the same transcript sent
/// twice at once, or an input on the session through the API in between)
/// is not continued twice: the second request runs in a session of its
/// own, seeded with what the client sent.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_transcript_continues_its_session_once() {
    let server = start(Setup::default()).await;
    let opening = json!([{"role": "user", "content": "!text"}]);
    let (first, answer) = complete(&server, &opening, false).await;
    let messages = then(&opening, &answer, "!batch2");
    let (a, b) = tokio::join!(
        complete(&server, &messages, false),
        complete(&server, &messages, true)
    );
    let continued = [&a.0, &b.0].iter().filter(|s| ***s == first).count();
    assert_eq!(continued, 1, "{a:?} {b:?}");

    // An input through the sessions API moves the session on: the
    // transcript the client has no longer is the session's.
    let (second, answer) = complete(&server, &opening, false).await;
    assert_ne!(second, first);
    SseReader::new(send_to_session(&server, &second, "!text").await)
        .all()
        .await;
    let (third, _) = complete(&server, &then(&opening, &answer, "!text"), false).await;
    assert_ne!(third, second);

    // Nor is a session continued while an input runs on it, even before
    // the input has stored anything (its writes held here for a minute).
    let server = start(Setup {
        write_hold: Some(std::time::Duration::from_secs(60)),
        ..Setup::default()
    })
    .await;
    let (fourth, answer) = complete(&server, &opening, false).await;
    let running = send_to_session(&server, &fourth, "!slowbatch4").await;
    let (fifth, _) = complete(&server, &then(&opening, &answer, "!text"), false).await;
    assert_ne!(fifth, fourth);
    SseReader::new(running).all().await;

    // An answer after which another input waits on its session leaves
    // nothing to continue: that input moves the session past it.
    let (sixth, answer) = complete(&server, &opening, false).await;
    let messages = then(&opening, &answer, "!slowbatch4");
    let queue_behind = async {
        while !server.state.sessions_running().contains(&sixth) {
            tokio::time::sleep(std::time::Duration::from_millis(1)).await;
        }
        send_to_session(&server, &sixth, "!text").await
    };
    let ((continued, answer), waiting) =
        tokio::join!(complete(&server, &messages, false), queue_behind);
    assert_eq!(continued, sixth);
    SseReader::new(waiting).all().await;
    let (seventh, _) = complete(&server, &then(&messages, &answer, "!text"), false).await;
    assert_ne!(seventh, sixth);
}

/// A continuation the server refuses before its input runs (the client
/// is at its limit of turns: 429, which invites a retry) leaves the
/// conversation where it was: the retry continues the session.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_continuation_refused_before_it_ran_is_continued_by_the_retry() {
    let server = start(Setup {
        options: homeagent_server::ServerOptions {
            turns_per_client: 1,
            ..homeagent_server::ServerOptions::default()
        },
        // The busy turn's tools sleep long enough that it surely still
        // runs when the refused request comes (40 ms ones had ended on a
        // loaded machine, and that request was answered).
        tool_sleep_ms: 1_000,
        ..Setup::default()
    })
    .await;
    let opening = json!([{"role": "user", "content": "!text"}]);
    let (first, answer) = complete(&server, &opening, false).await;
    let next = then(&opening, &answer, "!text again");
    let refused = {
        // Another turn of this client runs meanwhile.
        let busy = send_to_session(&server, "elsewhere", "!slowbatch4").await;
        let refused = server
            .post_json(
                "/v1/chat/completions",
                &json!({"model": "homeagent", "messages": next}),
            )
            .send()
            .await
            .unwrap();
        SseReader::new(busy).all().await;
        refused
    };
    assert_eq!(refused.status(), 429);
    let (retried, _) = complete(&server, &next, false).await;
    assert_eq!(retried, first);
}

/// An input on the session that stores nothing (blank, so the scheduler
/// skips it; for an agent that does not exist) does not move the session
/// past the answer the client holds: the conversation still continues it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_input_that_stored_nothing_leaves_the_conversation_continuable() {
    let server = start(Setup::default()).await;
    let opening = json!([{"role": "user", "content": "!text"}]);
    let (first, answer) = complete(&server, &opening, false).await;
    let before = history(&server, &first).await;
    let skipped = SseReader::new(send_to_session(&server, &first, "   ").await)
        .all()
        .await;
    assert!(
        skipped.last().unwrap().data.contains("empty_input"),
        "{skipped:?}"
    );
    let unknown = server
        .post_json(
            &format!("/api/v1/sessions/{first}/messages"),
            &json!({"text": "!text", "agent": "nobody"}),
        )
        .send()
        .await
        .unwrap();
    let unknown = SseReader::new(unknown).all().await;
    assert!(
        unknown.last().unwrap().data.contains("unknown agent"),
        "{unknown:?}"
    );
    assert_eq!(history(&server, &first).await, before, "nothing stored");
    let (next, _) = complete(&server, &then(&opening, &answer, "!text again"), false).await;
    assert_eq!(next, first);
}

/// With a dedup window, a conversation that says the same thing twice in
/// a row is not refused as a resend: the client has seen the answer in
/// between (its transcript says so), so it is a new input.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_continuation_repeating_the_last_input_is_not_a_duplicate() {
    let server = start(Setup {
        // Appended to the [scheduler] table the test config ends with.
        extra_toml: "dedup_window = \"10m\"\n",
        ..Setup::default()
    })
    .await;
    let opening = json!([{"role": "user", "content": "!text"}]);
    let (first, answer) = complete(&server, &opening, false).await;
    let (second, _) = complete(&server, &then(&opening, &answer, "!text"), false).await;
    assert_eq!(second, first);
    // A resend with X-Session-Id is still refused within the window.
    let resend = server
        .post_json(
            "/v1/chat/completions",
            &json!({"model": "homeagent", "messages": [{"role": "user", "content": "!text"}]}),
        )
        .header("x-session-id", &first)
        .send()
        .await
        .unwrap();
    assert_eq!(resend.status(), 409);
}

/// Two end users a front end names (`user`) who say the same words and
/// get the same answer hold one transcript each: each continues their
/// own session, never the other's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_same_words_of_two_named_users_continue_two_sessions() {
    let server = start(Setup::default()).await;
    let opening = json!([{"role": "user", "content": "!text"}]);
    let server = &server;
    let say = |user: &str, messages: &Value| {
        let body = json!({"model": "homeagent", "messages": messages, "user": user});
        async move { complete_with(server, &body).await }
    };
    let (ann, ann_answer) = say("ann", &opening).await;
    let (bob, bob_answer) = say("bob", &opening).await;
    assert_eq!(ann_answer, bob_answer, "the test needs the same answer");
    assert_ne!(ann, bob);
    let next = then(&opening, &ann_answer, "!text again");
    assert_eq!(say("ann", &next).await.0, ann);
    assert_eq!(say("bob", &next).await.0, bob);
}
