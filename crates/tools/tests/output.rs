#![allow(clippy::unwrap_used, clippy::expect_used)] // a panic in a test is a test failure
//! Output channels through the real registry and executor.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use homeagent_core::{
    AssembledCall, AssembledTurn, BatchContext, BatchMode, ErrorReason, Executor, OrderKey,
    Registry, SerialReason, ToolCall, ToolSource,
};
use homeagent_tools::output::{SendFuture, SharedWriter};
use homeagent_tools::{
    ChannelError, ChannelRegistry, ConsoleChannel, OutputChannel, register_demo_tools,
    register_output_channel, register_output_channels,
};
use serde_json::{Value, json};

fn turn(calls: &[(&str, Value)]) -> AssembledTurn {
    AssembledTurn {
        calls: calls
            .iter()
            .enumerate()
            .map(|(i, (name, arguments))| AssembledCall {
                call: ToolCall {
                    id: format!("call_{i}"),
                    name: (*name).to_owned(),
                    arguments: arguments.clone(),
                    raw_arguments: arguments.to_string(),
                },
                argument_error: None,
            })
            .collect(),
        ..AssembledTurn::default()
    }
}

/// A console writing into a buffer the test reads back.
fn captured(name: &str) -> (Arc<ConsoleChannel>, Arc<Mutex<Vec<u8>>>) {
    let buffer = Arc::new(Mutex::new(Vec::<u8>::new()));
    let writer: SharedWriter = buffer.clone();
    (
        Arc::new(ConsoleChannel::with_writer(writer).named(name)),
        buffer,
    )
}

fn text_of(buffer: &Mutex<Vec<u8>>) -> String {
    String::from_utf8(buffer.lock().unwrap().clone()).unwrap()
}

/// A channel that takes `delay` to deliver and logs what it got, so a test
/// can see whether two sends overlapped.
struct SlowChannel {
    name: String,
    delay: Duration,
    log: Arc<Mutex<Vec<String>>>,
}

impl OutputChannel for SlowChannel {
    fn name(&self) -> &str {
        &self.name
    }
    fn send<'a>(&'a self, text: &'a str) -> SendFuture<'a> {
        Box::pin(async move {
            self.log.lock().unwrap().push(format!("start {text}"));
            tokio::time::sleep(self.delay).await;
            self.log.lock().unwrap().push(format!("end {text}"));
            Ok(())
        })
    }
}

#[test]
fn each_channel_becomes_a_parallel_safe_tool_keyed_on_its_name() {
    let channels = ChannelRegistry::new();
    let (console, _) = captured("console");
    channels.add(console).unwrap();
    let (phone, _) = captured("phone");
    channels.add(phone).unwrap();
    let registry = Registry::new();
    register_output_channels(&registry, &channels).unwrap();
    let defs: Vec<(String, bool, bool, Option<OrderKey>)> = registry
        .definitions()
        .iter()
        .map(|d| {
            (
                d.name.clone(),
                d.parallel_safe,
                d.serial,
                d.order_key.clone(),
            )
        })
        .collect();
    assert_eq!(
        defs,
        [
            (
                "output_send__console".to_owned(),
                true,
                false,
                Some(OrderKey::Fixed("console".into()))
            ),
            (
                "output_send__phone".to_owned(),
                true,
                false,
                Some(OrderKey::Fixed("phone".into()))
            ),
        ]
    );
    assert_eq!(channels.names(), ["console", "phone"]);
    assert_eq!(
        channels.get("phone").map(|c| c.name().to_owned()),
        Some("phone".into())
    );
    assert!(channels.get("fax").is_none());
    // The console a program starts with writes to its standard output.
    assert_eq!(ConsoleChannel::stdout().name(), "console");
}

#[test]
fn bad_and_duplicate_channel_names_are_refused() {
    let channels = ChannelRegistry::new();
    let (console, _) = captured("console");
    channels.add(console).unwrap();
    let (again, _) = captured("console");
    assert!(matches!(channels.add(again), Err(ChannelError::Duplicate(n)) if n == "console"));
    for bad in ["", "has space", "x".repeat(52).as_str()] {
        let (channel, _) = captured(bad);
        assert!(
            matches!(channels.add(channel), Err(ChannelError::BadName { name }) if name == bad),
            "{bad:?}"
        );
    }
    // 13 + 51 = 64 characters: the longest name a provider accepts.
    let (longest, _) = captured(&"x".repeat(51));
    channels.add(longest).unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_sends_to_the_console_run_serially_and_keep_their_order() {
    let channels = ChannelRegistry::new();
    let (console, buffer) = captured("console");
    channels.add(console).unwrap();
    let registry = Registry::new();
    register_output_channels(&registry, &channels).unwrap();
    register_demo_tools(&registry).unwrap();
    let executor = Executor::new(Arc::new(registry));

    let calls = turn(&[
        ("output_send__console", json!({"text": "first"})),
        ("demo_sleep", json!({"ms": 20})),
        ("output_send__console", json!({"text": "second"})),
        ("output_send__console", json!({"text": "third\n"})),
    ]);
    assert_eq!(
        executor.plan(&calls.calls),
        BatchMode::Serial {
            reason: SerialReason::SharedOrderKey {
                key: "fixed:console".into()
            }
        }
    );
    let result = executor.run(&calls, &BatchContext::default()).await;
    for outcome in &result.outcomes {
        assert!(outcome.success, "{}", outcome.text);
    }
    assert_eq!(
        serde_json::from_str::<Value>(&result.outcomes[0].text).unwrap(),
        json!({"channel": "console", "sent": true, "bytes": 5})
    );
    assert_eq!(text_of(&buffer), "first\nsecond\nthird\n");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sends_to_different_channels_run_in_parallel() {
    let log = Arc::new(Mutex::new(Vec::new()));
    let channels = ChannelRegistry::new();
    for name in ["a", "b"] {
        channels
            .add(Arc::new(SlowChannel {
                name: name.into(),
                delay: Duration::from_millis(200),
                log: log.clone(),
            }))
            .unwrap();
    }
    let (console, buffer) = captured("console");
    channels.add(console).unwrap();
    let registry = Registry::new();
    register_output_channels(&registry, &channels).unwrap();
    register_demo_tools(&registry).unwrap();
    let executor = Executor::new(Arc::new(registry));

    let calls = turn(&[
        ("output_send__a", json!({"text": "to a"})),
        ("output_send__b", json!({"text": "to b"})),
        ("output_send__console", json!({"text": "to console"})),
        ("demo_sleep", json!({"ms": 10})),
    ]);
    assert_eq!(executor.plan(&calls.calls), BatchMode::Parallel);
    let result = executor.run(&calls, &BatchContext::default()).await;
    for outcome in &result.outcomes {
        assert!(outcome.success, "{}", outcome.text);
    }
    // Both slow sends started before either ended: they overlapped.
    let log = log.lock().unwrap().clone();
    assert_eq!(log.len(), 4);
    let mut starts: Vec<&str> = log[..2].iter().map(String::as_str).collect();
    starts.sort_unstable();
    assert_eq!(starts, ["start to a", "start to b"], "{log:?}");
    assert_eq!(text_of(&buffer), "to console\n");

    // The same two channels, each twice: shared keys make it serial, and
    // each channel receives in call order.
    let calls = turn(&[
        ("output_send__a", json!({"text": "a1"})),
        ("output_send__b", json!({"text": "b1"})),
        ("output_send__a", json!({"text": "a2"})),
    ]);
    assert_eq!(
        executor.plan(&calls.calls),
        BatchMode::Serial {
            reason: SerialReason::SharedOrderKey {
                key: "fixed:a".into()
            }
        }
    );
}

#[tokio::test]
async fn a_channel_added_later_is_registered_on_its_own() {
    let channels = ChannelRegistry::new();
    let registry = Registry::new();
    register_output_channels(&registry, &channels).unwrap();
    assert!(registry.definitions().is_empty());
    let (device, buffer) = captured("kitchen");
    channels.add(device.clone()).unwrap();
    register_output_channel(&registry, device).unwrap();
    let executor = Executor::new(Arc::new(registry));
    let result = executor
        .run(
            &turn(&[("output_send__kitchen", json!({"text": "dinner"}))]),
            &BatchContext::default(),
        )
        .await;
    assert!(result.outcomes[0].success, "{}", result.outcomes[0].text);
    assert_eq!(text_of(&buffer), "dinner\n");
}

#[tokio::test]
async fn a_send_without_text_never_reaches_the_channel() {
    let channels = ChannelRegistry::new();
    let (console, buffer) = captured("console");
    channels.add(console).unwrap();
    let registry = Registry::new();
    register_output_channels(&registry, &channels).unwrap();
    let executor = Executor::new(Arc::new(registry));
    let result = executor
        .run(
            &turn(&[
                ("output_send__console", json!({})),
                ("output_send__console", json!({"text": 5})),
            ]),
            &BatchContext::default(),
        )
        .await;
    let reasons: Vec<Option<ErrorReason>> = result
        .outcomes
        .iter()
        .map(|o| o.error.as_ref().map(|e| e.reason))
        .collect();
    assert_eq!(
        reasons,
        [Some(ErrorReason::Required), Some(ErrorReason::Type)]
    );
    assert_eq!(text_of(&buffer), "");
}

/// A writer that always fails, to see the error reach the model.
struct BrokenPipe;

impl std::io::Write for BrokenPipe {
    fn write(&mut self, _: &[u8]) -> std::io::Result<usize> {
        Err(std::io::Error::new(
            std::io::ErrorKind::BrokenPipe,
            "pipe closed",
        ))
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

#[tokio::test]
async fn a_failing_channel_is_an_execution_error_naming_it() {
    let channels = ChannelRegistry::new();
    let writer: SharedWriter = Arc::new(Mutex::new(BrokenPipe));
    channels
        .add(Arc::new(ConsoleChannel::with_writer(writer)))
        .unwrap();
    let registry = Registry::new();
    register_output_channels(&registry, &channels).unwrap();
    let executor = Executor::new(Arc::new(registry));
    let result = executor
        .run(
            &turn(&[("output_send__console", json!({"text": "hi"}))]),
            &BatchContext::default(),
        )
        .await;
    let error = result.outcomes[0].error.as_ref().unwrap();
    assert_eq!(error.reason, ErrorReason::Execution);
    assert_eq!(
        error.detail,
        "channel `console` could not write: pipe closed"
    );
}

/// A writer that holds every write until it is let go (a pipe into a
/// paused pager).
struct HeldPipe {
    go: std::sync::mpsc::Receiver<()>,
    written: Arc<Mutex<Vec<u8>>>,
}

impl std::io::Write for HeldPipe {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        let _ = self.go.recv();
        self.written.lock().unwrap().extend_from_slice(bytes);
        Ok(bytes.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// A send stopped while the console is blocked cannot take its write
/// back: the message comes out once the console moves. The stopped call
/// says it may still be delivered, not that it was not.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stopped_send_says_it_may_still_be_delivered() {
    let (go, held) = std::sync::mpsc::channel();
    let written = Arc::new(Mutex::new(Vec::new()));
    let writer: SharedWriter = Arc::new(Mutex::new(HeldPipe {
        go: held,
        written: Arc::clone(&written),
    }));
    let channels = ChannelRegistry::new();
    channels
        .add(Arc::new(ConsoleChannel::with_writer(writer)))
        .unwrap();
    let registry = Registry::new();
    register_output_channels(&registry, &channels).unwrap();
    let executor = Executor::new(Arc::new(registry));
    let batch = BatchContext::default();
    let cancel = batch.cancel.clone();
    let stopper = tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(100)).await;
        cancel.cancel();
    });
    let result = executor
        .run(
            &turn(&[("output_send__console", json!({"text": "late"}))]),
            &batch,
        )
        .await;
    stopper.await.unwrap();
    let error = result.outcomes[0].error.as_ref().unwrap();
    assert_eq!(error.reason, ErrorReason::Cancelled);
    assert_eq!(
        error.detail,
        "sending to console was stopped before the channel said it took the message; a \
         write already under way may still deliver it"
    );
    go.send(()).unwrap();
    for _ in 0..200 {
        if !written.lock().unwrap().is_empty() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(*written.lock().unwrap(), b"late\n");
}
