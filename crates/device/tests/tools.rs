#![allow(clippy::unwrap_used, clippy::expect_used)] // a panic in a test is a test failure
//! `device_list` and `device_cmd_run` over a hub whose device is played by
//! the test (through the hub's own link, no network): what each answer of a
//! device becomes for the model.

use std::sync::Arc;
use std::time::Duration;

use homeagent_core::{
    CancellationToken, ErrorReason, Registry, ToolContext, ToolError, ToolSource,
};
use homeagent_device::protocol::PROTOCOL_VERSION;
use homeagent_device::{
    CmdStatus, DeviceFrame, DeviceHub, DeviceLink, Hello, HubOptions, ServerFrame,
    register_device_tools,
};
use serde_json::{Value, json};

fn setup() -> (Arc<Registry>, DeviceHub) {
    let registry = Arc::new(Registry::new());
    let hub = DeviceHub::new(HubOptions::default());
    register_device_tools(&registry, &hub, None).unwrap();
    (registry, hub)
}

fn bind(hub: &DeviceHub, id: &str) -> (DeviceLink, tokio::sync::mpsc::Receiver<ServerFrame>) {
    hub.attach(&Hello {
        device_id: id.into(),
        name: format!("{id} box"),
        capabilities: vec!["cmd".into()],
        version: PROTOCOL_VERSION,
    })
    .unwrap()
}

async fn invoke(registry: &Registry, tool: &str, arguments: Value) -> Result<Value, ToolError> {
    let ctx = ToolContext {
        call_id: "c1".into(),
        tool: tool.into(),
        arguments,
        batch_id: "b1".into(),
        extras: Default::default(),
        cancel: CancellationToken::new(),
    };
    registry.invoke(tool, ctx).await
}

/// Runs `command` on `nas` while the device answers with `answer(req_id)`.
async fn answered_with(
    answer: impl FnOnce(u64) -> DeviceFrame + Send + 'static,
    arguments: Value,
) -> (Result<Value, ToolError>, u64) {
    let (registry, hub) = setup();
    let (link, mut outbound) = bind(&hub, "nas");
    let device = tokio::spawn(async move {
        let Some(ServerFrame::Cmd {
            req_id, timeout_ms, ..
        }) = outbound.recv().await
        else {
            panic!("no cmd frame");
        };
        link.deliver(answer(req_id));
        (link, timeout_ms)
    });
    let result = invoke(&registry, "device_cmd_run", arguments).await;
    let (_link, timeout_ms) = device.await.unwrap();
    (result, timeout_ms)
}

fn result(req_id: u64, status: CmdStatus, detail: Option<&str>, hint: Option<&str>) -> DeviceFrame {
    DeviceFrame::CmdResult {
        req_id,
        status,
        exit_code: (status == CmdStatus::Ok).then_some(3),
        stdout: "out".into(),
        stderr: "err".into(),
        truncated: true,
        duration_ms: Some(12),
        detail: detail.map(str::to_owned),
        hint: hint.map(str::to_owned),
    }
}

/// A program killed by a signal has no exit code; the device says why in
/// `detail`, and the model reads it beside the null exit code (it used to
/// be dropped, and the run looked like a plain success).
#[tokio::test]
async fn a_program_killed_by_a_signal_says_so() {
    let (value, _) = answered_with(
        |id| {
            let mut frame = result(
                id,
                CmdStatus::Ok,
                Some("the program was killed by signal 9"),
                None,
            );
            if let DeviceFrame::CmdResult { exit_code, .. } = &mut frame {
                *exit_code = None;
            }
            frame
        },
        json!({"device_id": "nas", "command": "sleep 100"}),
    )
    .await;
    let value = value.unwrap();
    assert_eq!(value["exit_code"], Value::Null);
    assert_eq!(value["detail"], "the program was killed by signal 9");
}

#[tokio::test]
async fn a_result_becomes_the_value_and_the_timeout_travels_to_the_device() {
    let (value, timeout_ms) = answered_with(
        |id| result(id, CmdStatus::Ok, None, None),
        json!({"device_id": "nas", "command": "false", "timeout": "1500ms"}),
    )
    .await;
    assert_eq!(
        value.unwrap(),
        json!({"device_id": "nas", "exit_code": 3, "stdout": "out", "stderr": "err",
               "truncated": true, "duration_ms": 12})
    );
    assert_eq!(timeout_ms, 1500);
    // Without a timeout, the hub's default (30 s) is sent.
    let (_, timeout_ms) = answered_with(
        |id| result(id, CmdStatus::Ok, None, None),
        json!({"device_id": "nas", "command": "true"}),
    )
    .await;
    assert_eq!(timeout_ms, 30_000);
}

#[tokio::test]
async fn refusals_timeouts_and_errors_keep_the_devices_reason_and_hint() {
    let cases = [
        (CmdStatus::Refused, ErrorReason::Denied),
        (CmdStatus::Timeout, ErrorReason::Timeout),
        (CmdStatus::Error, ErrorReason::Execution),
    ];
    for (status, reason) in cases {
        let (outcome, _) = answered_with(
            move |id| {
                result(
                    id,
                    status,
                    Some("`rm` is not allowed here"),
                    Some("edit waiter.toml"),
                )
            },
            json!({"device_id": "nas", "command": "rm x"}),
        )
        .await;
        let err = outcome.unwrap_err();
        assert_eq!(err.reason, reason, "{status:?}");
        assert_eq!(err.detail, "device \"nas\": `rm` is not allowed here");
        assert_eq!(err.hint.as_deref(), Some("edit waiter.toml"));
    }
    // Without a detail from the device, the status says what happened.
    let (outcome, _) = answered_with(
        |id| result(id, CmdStatus::Timeout, None, None),
        json!({"device_id": "nas", "command": "sleep 99"}),
    )
    .await;
    assert_eq!(
        outcome.unwrap_err().detail,
        "device \"nas\": the command ran past its timeout and was killed"
    );
}

#[tokio::test]
async fn an_unknown_device_is_not_found_naming_the_connected_ones() {
    let (registry, hub) = setup();
    let err = invoke(
        &registry,
        "device_cmd_run",
        json!({"device_id": "nas", "command": "ls"}),
    )
    .await
    .unwrap_err();
    assert_eq!(err.reason, ErrorReason::NotFound);
    assert_eq!(
        err.detail,
        "device \"nas\" is not connected (connected: none)"
    );
    let (_pi, _rx1) = bind(&hub, "pi");
    let (_tv, _rx2) = bind(&hub, "tv");
    let err = invoke(
        &registry,
        "device_cmd_run",
        json!({"device_id": "nas", "command": "ls"}),
    )
    .await
    .unwrap_err();
    assert_eq!(
        err.detail,
        "device \"nas\" is not connected (connected: pi, tv)"
    );
    assert_eq!(err.field.as_deref(), Some("device_id"));
    let huge = "x".repeat(64 * 1024 + 1);
    let err = invoke(
        &registry,
        "device_cmd_run",
        json!({"device_id": "pi", "command": huge}),
    )
    .await
    .unwrap_err();
    assert_eq!(err.reason, ErrorReason::InvalidArguments);
    assert_eq!(hub.list().iter().map(|d| d.in_flight).sum::<usize>(), 0);
    let missing = invoke(&registry, "device_cmd_run", json!({"command": "ls"}))
        .await
        .unwrap_err();
    assert_eq!(missing.reason, ErrorReason::Required);
}

#[tokio::test]
async fn device_list_lists_the_bound_devices() {
    let (registry, hub) = setup();
    assert_eq!(
        invoke(&registry, "device_list", json!({})).await.unwrap(),
        json!({"devices": []})
    );
    let (link, _rx) = bind(&hub, "nas");
    assert_eq!(link.device_id(), "nas");
    let listed = invoke(&registry, "device_list", json!({})).await.unwrap();
    let device = &listed["devices"][0];
    assert_eq!(device["id"], "nas");
    assert_eq!(device["name"], "nas box");
    assert_eq!(device["capabilities"], json!(["cmd"]));
    assert!(device["connected_since_ms"].as_u64().unwrap() > 1_700_000_000_000);
    assert!(format!("{hub:?}").contains("nas box"));
}

#[test]
fn the_tools_declare_their_scheduling() {
    let (registry, hub) = setup();
    let list = registry.definition("device_list").unwrap();
    assert!(list.parallel_safe && list.read_only);
    let run = registry.definition("device_cmd_run").unwrap();
    assert!(run.parallel_safe && !run.read_only);
    // Longer than the longest command plus the trip back, so the hub's own
    // timeout (which says what happened) fires first.
    let options = hub.options();
    assert_eq!(options.max_timeout, Duration::from_secs(300));
    assert_eq!(run.timeout, Some(Duration::from_secs(300 + 5 + 5)));
}

/// An agent limited to some devices learns nothing of the others from a
/// refusal either: `device_list` hides them, and so does the list of
/// connected devices in a "not connected" error.
#[tokio::test]
async fn a_not_connected_error_names_only_devices_the_caller_may_see() {
    let registry = Arc::new(Registry::new());
    let hub = DeviceHub::new(HubOptions::default());
    let only_pi_and_tv: homeagent_device::DeviceVisibility =
        Arc::new(|_ctx: &ToolContext, id: &str| id == "pi" || id == "tv");
    register_device_tools(&registry, &hub, Some(only_pi_and_tv)).unwrap();
    let (_nas, _rx0) = bind(&hub, "nas");
    let (_tv, _rx1) = bind(&hub, "tv");
    let err = invoke(
        &registry,
        "device_cmd_run",
        json!({"device_id": "pi", "command": "ls"}),
    )
    .await
    .unwrap_err();
    assert_eq!(err.reason, ErrorReason::NotFound);
    assert_eq!(err.detail, "device \"pi\" is not connected (connected: tv)");
}
