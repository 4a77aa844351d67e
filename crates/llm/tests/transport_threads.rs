//! A provider shared by several threads keeps a connection pool per thread
//! (see `transport/thread_clients.rs`): a request never reuses a
//! connection whose I/O another thread's runtime polls.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use axum::Router;
use axum::serve::ListenerExt;
use homeagent_core::{CancellationToken, Message};
use homeagent_llm::{ChatRequest, Endpoint, HttpProvider, Options, Protocol};

const STREAM: &str = concat!(
    r#"data: {"id":"c1","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"role":"assistant","content":"ok"},"finish_reason":"stop"}]}"#,
    "\n\ndata: [DONE]\n\n",
);

/// A server answering every request with [`STREAM`]; counts the
/// connections it accepted.
async fn counting_server() -> (String, Arc<AtomicUsize>) {
    let accepted = Arc::new(AtomicUsize::new(0));
    let count = Arc::clone(&accepted);
    let app = Router::new().fallback(|| async { STREAM });
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/v1", listener.local_addr().unwrap());
    let listener = listener.tap_io(move |_: &mut tokio::net::TcpStream| {
        count.fetch_add(1, Ordering::SeqCst);
    });
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    (url, accepted)
}

async fn ask(provider: &HttpProvider) {
    let request = ChatRequest {
        model: "m".into(),
        messages: vec![Message::user("hi")],
        tools: Vec::new(),
        max_tokens: 16,
        temperature: None,
        stream: true,
        rendered: Default::default(),
    };
    let mut stream = provider
        .stream(&request, CancellationToken::new())
        .await
        .unwrap();
    while let Some(event) = stream.next().await {
        event.unwrap();
    }
}

/// Sends one request from a thread of its own, with a runtime of its own
/// (the test's runtime goes on serving meanwhile).
async fn ask_from_another_thread(provider: &Arc<HttpProvider>) {
    let provider = Arc::clone(provider);
    tokio::task::spawn_blocking(move || {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap()
            .block_on(ask(&provider));
    })
    .await
    .unwrap();
}

#[tokio::test]
async fn each_thread_that_sends_opens_its_own_connection_and_reuses_it() {
    let (url, accepted) = counting_server().await;
    let endpoint = Endpoint {
        base_url: url,
        api_key: None,
    };
    let provider =
        Arc::new(HttpProvider::new(Protocol::Openai, endpoint, Options::default()).unwrap());
    ask(&provider).await;
    ask(&provider).await;
    assert_eq!(
        accepted.load(Ordering::SeqCst),
        1,
        "one thread, one connection"
    );
    // The first thread's connection is idle in the pool; another thread
    // opens its own instead of taking it.
    ask_from_another_thread(&provider).await;
    assert_eq!(accepted.load(Ordering::SeqCst), 2);
    // And this thread still has its own.
    ask(&provider).await;
    assert_eq!(accepted.load(Ordering::SeqCst), 2);
}
