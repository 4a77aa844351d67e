//! Connections spread over several serving threads (`ServeThreads`): each
//! connection goes to the next thread, and everything it starts — here a
//! tool call in its turn — runs on that thread.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use homeagent_core::{ToolContext, ToolDef};
use serde_json::json;

use crate::common::{self, Setup, start};

/// Registers `thread_name`, a tool that records the name of the thread it
/// runs on.
fn record_threads(server: &common::TestServer) -> Arc<Mutex<Vec<String>>> {
    let seen = Arc::new(Mutex::new(Vec::new()));
    let record = Arc::clone(&seen);
    server
        .agent
        .registry
        .register(
            ToolDef::new("thread_name", "Records the thread it runs on.")
                .with_parameters(json!({"type": "object"})),
            move |_: ToolContext| {
                let record = Arc::clone(&record);
                async move {
                    let name = std::thread::current().name().unwrap_or("?").to_owned();
                    record.lock().unwrap().push(name);
                    Ok(json!({}))
                }
            },
        )
        .unwrap();
    seen
}

/// Sends one input calling `thread_name` over `client`'s connection and
/// returns the thread it ran on.
async fn thread_of_a_call(
    server: &common::TestServer,
    client: &reqwest::Client,
    seen: &Arc<Mutex<Vec<String>>>,
) -> String {
    let before = seen.lock().unwrap().len();
    let body = json!({
        "model": "homeagent",
        "messages": [{"role": "user", "content": r#"!calls [{"name": "thread_name", "arguments": {}}]"#}],
    });
    let response = client
        .post(format!("{}/v1/chat/completions", server.url))
        .bearer_auth(common::KEY)
        .header("content-type", "application/json")
        .body(body.to_string())
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200, "{}", response.text().await.unwrap());
    let seen = seen.lock().unwrap();
    assert_eq!(seen.len(), before + 1, "the tool ran once: {seen:?}");
    seen[before].clone()
}

#[tokio::test]
async fn each_connection_runs_its_turns_on_the_thread_it_was_handed_to() {
    let mut server = start(Setup {
        threads: 2,
        ..Setup::default()
    })
    .await;
    let seen = record_threads(&server);
    // One connection each: a client keeps its connection between requests.
    let first = server.client();
    let second = server.client();
    let a = thread_of_a_call(&server, &first, &seen).await;
    let b = thread_of_a_call(&server, &second, &seen).await;
    assert_ne!(a, b, "two connections, two threads");
    assert!(
        [&a, &b].contains(&&"homeagent-serve-1".to_owned()),
        "one of them the thread the server started: {a} {b}"
    );
    // Later inputs on a connection stay on its thread.
    for _ in 0..2 {
        assert_eq!(thread_of_a_call(&server, &first, &seen).await, a);
        assert_eq!(thread_of_a_call(&server, &second, &seen).await, b);
    }
    // Shutdown ends both threads' servers, with their idle connections
    // still open.
    tokio::time::timeout(Duration::from_secs(30), server.shutdown())
        .await
        .expect("both serving threads stop")
        .unwrap();
    assert!(first.get(&server.url).send().await.is_err());
    assert!(second.get(&server.url).send().await.is_err());
}

#[tokio::test]
async fn one_thread_serves_every_connection_on_the_callers_runtime() {
    let server = start(Setup::default()).await;
    let seen = record_threads(&server);
    let here = std::thread::current().name().unwrap_or("?").to_owned();
    for _ in 0..3 {
        let client = server.client();
        assert_eq!(thread_of_a_call(&server, &client, &seen).await, here);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 3)]
async fn status_reports_the_agents_runtime_from_any_serving_thread() {
    let server = start(Setup {
        threads: 2,
        ..Setup::default()
    })
    .await;
    // Two connections (`get` makes a client each time): one on each thread.
    for _ in 0..2 {
        let status = common::body_json(server.get("/api/v1/status").send().await.unwrap()).await;
        assert_eq!(
            status["runtime"],
            json!({"worker_threads": 3, "serve_threads": 2}),
            "{status}"
        );
    }
}
