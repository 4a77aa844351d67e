#![allow(clippy::unwrap_used, clippy::expect_used)] // a panic in a test is a test failure
//! The waiter's link: bind, refusals, reconnects, keepalive, frame limits,
//! against a scripted server on a real loopback WebSocket.

use crate::waiter_support;

use std::time::Duration;

use futures_util::SinkExt;
use homeagent_device::protocol::{MAX_FRAME_BYTES, RefusalCode, ServerFrame};
use homeagent_device::waiter::{Secret, WaiterError, WaiterPolicy};
use tokio_tungstenite::tungstenite::Message;
use waiter_support::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wrong_token_ends_the_waiter_without_retrying() {
    let (listener, url) = listen().await;
    let mut options = fast_options(&url);
    options.token = Secret::new("not-the-token");
    let waiter = start_waiter(options, WaiterPolicy::default());

    let mut ws = accept(&listener).await;
    let (_, token) = hello_and_bind(&mut ws).await;
    assert_eq!(token, "not-the-token");
    send(
        &mut ws,
        &ServerFrame::Refused {
            code: RefusalCode::BadToken,
            reason: "the device token does not match".into(),
            retry: false,
        },
    )
    .await;
    let _ = ws.close(None).await;

    let ended = tokio::time::timeout(Duration::from_secs(10), waiter)
        .await
        .expect("the waiter kept going after a bad_token refusal")
        .unwrap();
    let error = ended.unwrap_err();
    assert!(
        matches!(
            &error,
            WaiterError::Refused {
                code: RefusalCode::BadToken,
                ..
            }
        ),
        "{error:?}"
    );
    assert!(
        error.to_string().contains("device token is wrong"),
        "{error}"
    );
    // One connection in all: with a 50 ms backoff, a retrying waiter would
    // have come back many times in a second.
    assert!(!connects_within(&listener, Duration::from_secs(1)).await);
}

/// An address that answers the WebSocket handshake with a 4xx (a wrong
/// path, a proxy that wants its own login) will answer the same next
/// time: the waiter ends saying so, instead of retrying for ever while
/// `--daemon` reports it running. A 5xx (a server restarting behind its
/// proxy) is still retried.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_handshake_refused_with_a_4xx_ends_the_waiter_and_a_5xx_is_retried() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    async fn answer(listener: &tokio::net::TcpListener, status: &str) {
        let (mut tcp, _) = tokio::time::timeout(Duration::from_secs(10), listener.accept())
            .await
            .expect("the waiter did not connect")
            .unwrap();
        let mut head = [0u8; 4096];
        let _ = tcp.read(&mut head).await.unwrap();
        tcp.write_all(
            format!("HTTP/1.1 {status}\r\ncontent-length: 0\r\nconnection: close\r\n\r\n")
                .as_bytes(),
        )
        .await
        .unwrap();
    }
    let (listener, url) = listen().await;
    let waiter = start_waiter(fast_options(&url), WaiterPolicy::default());
    answer(&listener, "503 Service Unavailable").await;
    answer(&listener, "404 Not Found").await;
    let ended = tokio::time::timeout(Duration::from_secs(10), waiter)
        .await
        .expect("the waiter kept going after a 404")
        .unwrap();
    let error = ended.unwrap_err();
    assert!(
        matches!(&error, WaiterError::HandshakeRefused { status: 404, .. }),
        "{error:?}"
    );
    assert!(error.to_string().contains("/api/v1/device/ws"), "{error}");
    assert!(!connects_within(&listener, Duration::from_secs(1)).await);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dropped_link_reconnects_and_serves_again() {
    let (listener, url) = listen().await;
    let waiter = start_waiter(fast_options(&url), WaiterPolicy::default());

    let mut first = bind(&listener).await;
    let echo = run(&mut first, 1, "echo one", 10_000).await;
    assert_eq!(echo.stdout, "one\n");
    drop(first); // the server goes away without a close frame

    // The second hello: same id, same token, and commands work again.
    let mut second = bind(&listener).await;
    let echo = run(&mut second, 2, "echo two", 10_000).await;
    assert_eq!(echo.stdout, "two\n");
    waiter.abort();
}

/// Reads the waiter's hello and bind, and refuses it as a duplicate id
/// (which may pass later: `retry`).
async fn refuse_as_duplicate(ws: &mut Ws) {
    hello_and_bind(ws).await;
    send(
        ws,
        &ServerFrame::Refused {
            code: RefusalCode::DuplicateId,
            reason: "test-device is already connected".into(),
            retry: true,
        },
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refusal_that_may_pass_later_is_retried() {
    let (listener, url) = listen().await;
    let waiter = start_waiter(fast_options(&url), WaiterPolicy::default());

    let mut ws = accept(&listener).await;
    refuse_as_duplicate(&mut ws).await;
    drop(ws);
    let mut again = bind(&listener).await;
    assert_eq!(
        run(&mut again, 1, "echo back", 10_000).await.stdout,
        "back\n"
    );
    assert!(!waiter.is_finished());
    waiter.abort();
}

/// Another waiter holding the id for good (two machines with the same
/// hostname, so the same default id) is not waited out for ever: a waiter
/// refused as a duplicate retries for a while (the other link may be its
/// own stale one), then ends saying so, instead of taking the id over
/// whenever the other machine's link drops.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_duplicate_id_is_retried_for_a_while_then_ends_the_waiter() {
    let (listener, url) = listen().await;
    let mut options = fast_options(&url);
    let patience = Duration::from_millis(600);
    options.duplicate_patience = patience;
    let began = std::time::Instant::now();
    let mut waiter = start_waiter(options, WaiterPolicy::default());
    let mut refused = 0;
    let deadline = tokio::time::sleep(Duration::from_secs(30));
    tokio::pin!(deadline);
    let ended = loop {
        tokio::select! {
            ended = &mut waiter => break ended.unwrap(),
            accepted = listener.accept() => {
                let (tcp, _) = accepted.unwrap();
                let mut ws = tokio_tungstenite::accept_async(tcp).await.unwrap();
                refuse_as_duplicate(&mut ws).await;
                refused += 1;
            }
            () = &mut deadline => panic!("the waiter retried for ever"),
        }
    };
    let error = ended.unwrap_err();
    assert!(
        matches!(
            &error,
            WaiterError::Refused {
                code: RefusalCode::DuplicateId,
                ..
            }
        ),
        "{error:?}"
    );
    assert!(error.to_string().contains("device-id"), "{error}");
    assert!(refused >= 2, "retried {refused} time(s)");
    assert!(began.elapsed() >= patience);
}

/// A command's timeout counts from when it reaches the waiter, as the
/// server counts it from when it sent it: the time it waits for one of
/// the device's command slots comes out of it. (The server gives up five
/// seconds after the timeout and cancels the command; one that waited for
/// a slot and then got a whole timeout to run was cut off mid-run.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_command_s_timeout_counts_from_its_arrival() {
    let (listener, url) = listen().await;
    let mut options = fast_options(&url);
    options.max_concurrent_cmds = 1;
    let policy = policy_from_toml("device_cmd_allowlist = [\"sleep\"]\n");
    let waiter = start_waiter(options, policy);
    let mut ws = bind(&listener).await;
    let cmd = |req_id, command: &str, timeout_ms| ServerFrame::Cmd {
        req_id,
        argv: None,
        command: Some(command.into()),
        timeout_ms,
    };
    // 1 holds the one slot for 0.8 s (the pauses only let it take the
    // slot first); 2 arrives 0.2 s in with 1 s in all, so at most 0.4 s
    // are left to run a 0.5 s sleep; 3 arrives 0.3 s in with 0.3 s and
    // waits at least 0.5 s for the slot, so it never runs.
    send(&mut ws, &cmd(1, "sleep 0.8", 10_000)).await;
    tokio::time::sleep(Duration::from_millis(200)).await;
    send(&mut ws, &cmd(2, "sleep 0.5", 1_000)).await;
    tokio::time::sleep(Duration::from_millis(100)).await;
    send(&mut ws, &cmd(3, "sleep 0", 300)).await;
    let mut outcomes = std::collections::BTreeMap::new();
    for _ in 0..3 {
        let frame = recv(&mut ws).await;
        let homeagent_device::protocol::DeviceFrame::CmdResult { req_id, .. } = &frame else {
            panic!("not a result: {frame:?}");
        };
        let req_id = *req_id;
        outcomes.insert(req_id, Outcome::from(frame, req_id));
    }
    assert!(outcomes[&1].is_ok(), "{:?}", outcomes[&1]);
    for req_id in [2, 3] {
        assert_eq!(
            outcomes[&req_id].status,
            homeagent_device::CmdStatus::Timeout,
            "{req_id}: {:?}",
            outcomes[&req_id]
        );
    }
    assert!(
        outcomes[&3].detail.contains("did not run"),
        "{:?}",
        outcomes[&3]
    );
    waiter.abort();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_ping_before_bound_does_not_break_the_bind() {
    // The seed's old waiter closed the link on a ping that came before the
    // bind was acknowledged.
    let (listener, url) = listen().await;
    let waiter = start_waiter(fast_options(&url), WaiterPolicy::default());
    let mut ws = accept(&listener).await;
    hello_and_bind(&mut ws).await;
    ws.send(Message::Ping(vec![1, 2, 3].into())).await.unwrap();
    send(
        &mut ws,
        &ServerFrame::Bound {
            device_id: DEVICE_ID.into(),
        },
    )
    .await;
    assert_eq!(
        run(&mut ws, 1, "echo bound", 10_000).await.stdout,
        "bound\n"
    );
    assert!(!connects_within(&listener, Duration::from_millis(300)).await);
    waiter.abort();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_silent_server_is_declared_dead_and_the_waiter_reconnects() {
    let (listener, url) = listen().await;
    let mut options = fast_options(&url);
    options.ping_interval = Duration::from_millis(100);
    options.dead_after = Duration::from_millis(500);
    let waiter = start_waiter(options, WaiterPolicy::default());

    // Bound, then never read again: the waiter's pings go unanswered.
    let silent = bind(&listener).await;
    let mut second = bind(&listener).await;
    assert_eq!(
        run(&mut second, 1, "echo alive", 10_000).await.stdout,
        "alive\n"
    );
    drop(silent);
    waiter.abort();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_waiter_pings_a_bound_link() {
    let (listener, url) = listen().await;
    let waiter = start_waiter(fast_options(&url), WaiterPolicy::default());
    let mut ws = bind(&listener).await;
    let ping = tokio::time::timeout(Duration::from_secs(10), async {
        loop {
            match futures_util::StreamExt::next(&mut ws).await {
                Some(Ok(Message::Ping(_))) => return true,
                Some(Ok(_)) => continue,
                _ => return false,
            }
        }
    })
    .await
    .unwrap();
    assert!(ping);
    waiter.abort();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_frame_over_the_limit_drops_the_link() {
    let (listener, url) = listen().await;
    let waiter = start_waiter(fast_options(&url), WaiterPolicy::default());
    let mut ws = bind(&listener).await;
    let huge = format!(
        "{{\"type\":\"cmd\",\"req_id\":1,\"command\":\"echo {}\",\"timeout_ms\":1000}}",
        "x".repeat(MAX_FRAME_BYTES)
    );
    // The waiter may close while this is still being written.
    let _ = ws.send(Message::text(huge)).await;
    // It drops the link instead of running the command: no result comes.
    loop {
        match futures_util::StreamExt::next(&mut ws).await {
            Some(Ok(Message::Ping(_) | Message::Pong(_))) => continue,
            Some(Ok(Message::Text(body))) => panic!("the oversized frame was served: {body:.200}"),
            _ => break,
        }
    }
    // And comes back on a new link.
    let mut again = bind(&listener).await;
    assert_eq!(
        run(&mut again, 2, "echo small", 10_000).await.stdout,
        "small\n"
    );
    waiter.abort();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bad_server_address_or_device_id_fails_before_connecting() {
    let options = fast_options("http://127.0.0.1:1");
    let error = start_waiter(options, WaiterPolicy::default())
        .await
        .unwrap()
        .unwrap_err();
    assert!(
        matches!(error, WaiterError::BadServerUrl { .. }),
        "{error:?}"
    );

    let (_listener, url) = listen().await;
    let mut options = fast_options(&url);
    options.hello.device_id = "has space".into();
    let error = start_waiter(options, WaiterPolicy::default())
        .await
        .unwrap()
        .unwrap_err();
    assert!(
        matches!(error, WaiterError::BadDeviceId { .. }),
        "{error:?}"
    );

    // A name the server would refuse for good is refused here, before the
    // link, naming the setting.
    let mut options = fast_options(&url);
    options.hello.name = "n".repeat(200);
    let error = start_waiter(options, WaiterPolicy::default())
        .await
        .unwrap()
        .unwrap_err();
    assert!(matches!(error, WaiterError::BadHello { .. }), "{error:?}");
    assert!(error.to_string().contains("waiter.toml `name`"), "{error}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancelled_command_is_stopped_and_sends_no_result() {
    let (mut ws, waiter, _listener) = bound_waiter(WaiterPolicy::default()).await;
    let cmd = |req_id: u64, command: &str| ServerFrame::Cmd {
        req_id,
        argv: None,
        command: Some(command.into()),
        timeout_ms: 20_000,
    };
    send(&mut ws, &cmd(1, "sleep 2")).await;
    send(&mut ws, &ServerFrame::Cancel { req_id: 1 }).await;
    // A slower command after it: if the first still ran, its result (after
    // 2 s) would arrive before this one's (after 3 s).
    send(&mut ws, &cmd(2, "sleep 3")).await;
    let next = Outcome::from(recv(&mut ws).await, 2);
    assert!(next.is_ok(), "{next:?}");
    waiter.abort();
}

/// A `cmd` the waiter cannot read still gets its one result, and that
/// result fits in a frame: serde's message quotes the bad value whole (and
/// escaped twice over, it had been twice the frame limit), so it is cut
/// short. The link stays up and serves the next command.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_malformed_cmd_gets_a_short_error_result_and_the_link_stays_up() {
    let (mut ws, waiter, _listener) = bound_waiter(WaiterPolicy::default()).await;
    let quotes = "\\\"".repeat(400_000);
    let malformed = format!("{{\"type\":\"cmd\",\"req_id\":7,\"timeout_ms\":\"{quotes}\"}}");
    assert!(malformed.len() < MAX_FRAME_BYTES);
    ws.send(Message::text(malformed)).await.unwrap();
    let body = next_text(&mut ws).await;
    assert!(body.len() < 1_000, "a result of {} bytes", body.len());
    let answer = Outcome::from(serde_json::from_str(&body).unwrap(), 7);
    assert_eq!(answer.status, homeagent_device::CmdStatus::Error);
    assert!(
        answer
            .detail
            .starts_with("malformed cmd frame: invalid type: string")
            && answer.detail.ends_with('…'),
        "{}",
        answer.detail
    );
    assert_eq!(
        run(&mut ws, 8, "echo still", 10_000).await.stdout,
        "still\n"
    );
    waiter.abort();
}

/// A `req_id` already running is not run a second time: the server has
/// one call waiting under that id, and a second program would answer it
/// (or outlive the cancel meant for the first).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_repeated_req_id_is_not_run_and_the_cancel_stops_the_first() {
    let (mut ws, waiter, _listener) = bound_waiter(WaiterPolicy::default()).await;
    let cmd = |req_id: u64, command: &str| ServerFrame::Cmd {
        req_id,
        argv: None,
        command: Some(command.into()),
        timeout_ms: 20_000,
    };
    send(&mut ws, &cmd(1, "sleep 2")).await;
    send(&mut ws, &cmd(1, "echo again")).await;
    send(&mut ws, &ServerFrame::Cancel { req_id: 1 }).await;
    // Slower than the first: had it not been cancelled, its result would
    // come first; had the repeat run, its echo would.
    send(&mut ws, &cmd(2, "sleep 3")).await;
    let next = Outcome::from(recv(&mut ws).await, 2);
    assert!(next.is_ok(), "{next:?}");
    waiter.abort();
}

/// Commands past the ones running wait for a slot, but only so many: the
/// rest are answered at once as busy, instead of each holding a task and
/// its text until memory runs out.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn commands_past_the_waiting_limit_are_answered_busy_at_once() {
    let (listener, url) = listen().await;
    let mut options = fast_options(&url);
    options.max_concurrent_cmds = 1;
    let waiter = start_waiter(options, WaiterPolicy::default());
    let mut ws = bind(&listener).await;
    let cmd = |req_id: u64| ServerFrame::Cmd {
        req_id,
        argv: None,
        command: Some("sleep 5".into()),
        timeout_ms: 20_000,
    };
    // One running, MAX_WAITING_CMDS waiting: all of them take.
    let waiting = homeagent_device::waiter::MAX_WAITING_CMDS as u64;
    for req_id in 1..=1 + waiting {
        send(&mut ws, &cmd(req_id)).await;
    }
    let over = 2 + waiting;
    send(&mut ws, &cmd(over)).await;
    let busy = Outcome::from(recv(&mut ws).await, over);
    assert_eq!(busy.status, homeagent_device::CmdStatus::Error, "{busy:?}");
    assert_eq!(
        busy.detail,
        format!(
            "the device is busy: 1 command running and {waiting} waiting, the most it takes; \
             try again when some have finished"
        )
    );
    waiter.abort();
}

/// The next text message's body, skipping pings and pongs.
async fn next_text(ws: &mut Ws) -> String {
    loop {
        let message =
            tokio::time::timeout(Duration::from_secs(20), futures_util::StreamExt::next(ws))
                .await
                .expect("no frame from the waiter within 20 s")
                .expect("the waiter closed the link")
                .unwrap();
        if let Message::Text(body) = message {
            return body.as_str().to_owned();
        }
    }
}
