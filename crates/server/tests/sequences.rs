#![allow(clippy::unwrap_used, clippy::expect_used)] // a panic in a test is a test failure

//! The sequences API: create (with the same checks as seq_create), list,
//! read back, delete; a bad sequence is a 400 naming the problem.

use crate::common;

use common::{Setup, body_json, start};
use serde_json::json;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sequences_are_created_listed_read_and_deleted() {
    let server = start(Setup::default()).await;
    let seq = json!({
        "name": "pair",
        "description": "two echoes",
        "groups": [{
            "name": "both",
            "description": "at once",
            "in": {},
            "out": {"said": "array<object>"},
            "tools": "{\"tool\":\"demo_echo\",\"args\":{\"n\":1},\"as\":\"said\"} ; {\"tool\":\"demo_echo\",\"args\":{\"n\":2},\"as\":\"said\"} ;"
        }]
    });
    let created = server
        .post_json("/api/v1/sequences", &seq)
        .send()
        .await
        .unwrap();
    assert_eq!(created.status(), 201);
    assert_eq!(body_json(created).await["name"], "pair");

    let listed = body_json(server.get("/api/v1/sequences").send().await.unwrap()).await;
    let names: Vec<&str> = listed["sequences"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["pair"]);
    let read = body_json(server.get("/api/v1/sequences/pair").send().await.unwrap()).await;
    assert_eq!(read["name"], "pair");
    assert_eq!(read["groups"][0]["name"], "both");
    // What a GET gives is what a POST takes: read, edited, sent back.
    assert!(read["groups"][0]["tools"].is_string(), "{read}");
    let mut edited = read.clone();
    edited["description"] = json!("two echoes, edited");
    let replaced = server
        .post_json("/api/v1/sequences", &edited)
        .send()
        .await
        .unwrap();
    assert_eq!(replaced.status(), 201, "{}", replaced.text().await.unwrap());
    let again = body_json(server.get("/api/v1/sequences/pair").send().await.unwrap()).await;
    assert_eq!(again, edited);

    // A typo is refused with the field named; nothing is stored.
    let mut typo = seq.clone();
    typo["name"] = json!("typo");
    typo["groups"][0]["paralell"] = json!(true);
    let refused = server
        .post_json("/api/v1/sequences", &typo)
        .send()
        .await
        .unwrap();
    assert_eq!(refused.status(), 400);
    let body = body_json(refused).await;
    assert_eq!(body["error"]["code"], "invalid_sequence");
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("paralell"),
        "{body}"
    );
    let missing = server.get("/api/v1/sequences/typo").send().await.unwrap();
    assert_eq!(missing.status(), 404);

    let deleted = server
        .client()
        .delete(format!("{}/api/v1/sequences/pair", server.url))
        .bearer_auth(common::KEY)
        .send()
        .await
        .unwrap();
    assert_eq!(deleted.status(), 204);
    let gone = server.get("/api/v1/sequences/pair").send().await.unwrap();
    assert_eq!(gone.status(), 404);
}

/// A sequence the store refuses for what it would make with the stored
/// ones (a cycle, a chain of calls deeper than the run-time bound) is the
/// client's to fix: 400 `invalid_sequence` naming the chain, never a 500.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cycle_or_a_chain_too_deep_is_a_400_naming_it() {
    let server = start(Setup::default()).await;
    let calling = |name: &str, target: &str| {
        json!({"name": name, "groups": [{"name": "g",
            "tools": format!("{{\"tool\":\"seq_call\",\"args\":{{\"target\":\"#{target}\"}}}} ;")}]})
    };
    let leaf =
        json!({"name": "E", "groups": [{"name": "g", "tools": "{\"tool\":\"demo_echo\"} ;"}]});
    let create = |seq: serde_json::Value| {
        let request = server.post_json("/api/v1/sequences", &seq);
        async move { request.send().await.unwrap() }
    };
    assert_eq!(create(leaf).await.status(), 201);
    for (name, next) in [("D", "E"), ("C", "D"), ("B", "C")] {
        assert_eq!(create(calling(name, next)).await.status(), 201, "{name}");
    }
    for (seq, needle) in [
        (calling("A", "B"), "#A → #B → #C → #D → #E"),
        (calling("S", "S"), "#S → #S"),
    ] {
        let refused = create(seq).await;
        assert_eq!(refused.status(), 400);
        let body = body_json(refused).await;
        assert_eq!(body["error"]["code"], "invalid_sequence", "{body}");
        let message = body["error"]["message"].as_str().unwrap();
        assert!(message.contains(needle), "{message}");
    }
}
