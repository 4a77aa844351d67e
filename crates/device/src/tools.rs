//! The two tools that serve every bound device.
//!
//! - `device_list`: the bound devices the caller may use (parallel-safe,
//!   read-only).
//! - `device_cmd_run {device_id, command, timeout?}`: one command on one
//!   device. Parallel-safe with `device_id` as its **order key**: a batch
//!   with commands for different devices runs them at once; two commands
//!   for the same device make the executor run the batch in order, because
//!   the second may depend on the first's effect on that machine.
//!
//! Which agent may reach which device is not decided here: the program
//! registers `device_cmd_run` as device-scoped with the gate
//! (`Gate::with_device_tool(DEVICE_CMD_RUN_TOOL, DEVICE_ID_ARG)`), so a
//! call without a granted `device_id` never reaches this handler. Which
//! programs may run is not decided here either: the waiter applies its own
//! allowlist on its own machine.

use std::sync::Arc;
use std::time::Duration;

use homeagent_core::{
    ErrorReason, OrderKey, Registry, RegistryError, ToolContext, ToolDef, ToolError,
};
use homeagent_tools::cmd_run::parse_timeout;
use serde_json::{Value, json};

use crate::hub::{CmdAnswer, DeviceError, DeviceHub};
use crate::protocol::CmdStatus;

pub const DEVICE_LIST_TOOL: &str = "device_list";
pub const DEVICE_CMD_RUN_TOOL: &str = "device_cmd_run";
/// Every tool [`register_device_tools`] registers, for checking a config
/// that names them in a start without devices (`run`, `config check`).
pub const DEVICE_TOOLS: [&str; 2] = [DEVICE_LIST_TOOL, DEVICE_CMD_RUN_TOOL];
/// The argument of `device_cmd_run` naming the device (the gate's device
/// scope and the executor's order key).
pub const DEVICE_ID_ARG: &str = "device_id";
/// The longest command sent to a device, far below the frame limit: a
/// frame over the limit would close the link and fail every command on it.
pub const MAX_COMMAND_BYTES: usize = 64 * 1024;

/// Decides whether the caller of a tool (its context carries the agent)
/// may see device `id`: `device_list` shows only those devices, so an agent
/// does not learn about machines it cannot use.
pub type DeviceVisibility = Arc<dyn Fn(&ToolContext, &str) -> bool + Send + Sync>;

/// Registers `device_list` and `device_cmd_run` over `hub`. With
/// `visible`, `device_list` lists only the devices it allows the caller,
/// and a "not connected" refusal names only those.
pub fn register_device_tools(
    registry: &Registry,
    hub: &DeviceHub,
    visible: Option<DeviceVisibility>,
) -> Result<(), RegistryError> {
    let list = ToolDef::new(
        DEVICE_LIST_TOOL,
        "Lists the devices (other machines) connected to this agent: id, name, capabilities, \
         connected since (ms since the Unix epoch) and commands in flight. Use an id with \
         device_cmd_run.",
    )
    .with_parameters(json!({"type": "object", "properties": {}, "additionalProperties": false}))
    .parallel_safe()
    .read_only();
    {
        let hub = hub.clone();
        let visible = visible.clone();
        registry.register(list, move |ctx: ToolContext| {
            let mut devices = hub.list();
            if let Some(visible) = &visible {
                devices.retain(|device| visible(&ctx, &device.id));
            }
            async move { Ok(json!({ "devices": devices })) }
        })?;
    }

    let options = hub.options();
    let run = ToolDef::new(
        DEVICE_CMD_RUN_TOOL,
        "Runs one program on a connected device (see device_list), WITHOUT a shell: no pipes, \
         redirection, `;`, `&&`, `$(…)`, globbing or variables. The device decides which \
         programs it allows (its own allowlist and write guard); a refusal says why. Returns \
         device_id, exit_code, stdout, stderr, truncated and duration_ms; a non-zero exit_code \
         is a normal result. Commands for different devices run at the same time; several for \
         one device run in order.",
    )
    .with_parameters(json!({
        "type": "object",
        "properties": {
            DEVICE_ID_ARG: {
                "type": "string",
                "description": "the device's id, as device_list shows it"
            },
            "command": {
                "type": "string",
                "description": "one program and its arguments, quoted like in a shell, e.g. \
                                `df -h /`"
            },
            "timeout": {
                "type": ["string", "integer"],
                "description": format!(
                    "how long the program may run: \"10s\", \"500ms\", \"2m\" or whole seconds; \
                     default {} s, at most {} s",
                    options.default_timeout.as_secs(),
                    options.max_timeout.as_secs()
                )
            }
        },
        "required": [DEVICE_ID_ARG, "command"],
        "additionalProperties": false
    }))
    .parallel_safe()
    .with_order_key(OrderKey::Argument(DEVICE_ID_ARG.to_owned()))
    // The hub enforces the call's own timeout (plus the trip back) and says
    // so in its error; the executor's must not fire first.
    .with_timeout(options.max_timeout + options.answer_grace + Duration::from_secs(5));
    let hub = hub.clone();
    registry.register(run, move |ctx: ToolContext| {
        let hub = hub.clone();
        let visible = visible.clone();
        async move { call(&hub, ctx, visible.as_ref()).await }
    })
}

async fn call(
    hub: &DeviceHub,
    ctx: ToolContext,
    visible: Option<&DeviceVisibility>,
) -> Result<Value, ToolError> {
    let text = |key: &str| ctx.arguments.get(key).and_then(Value::as_str);
    let device_id = text(DEVICE_ID_ARG).ok_or_else(|| {
        ToolError::new(ErrorReason::Required, "`device_id` (a string) is required")
            .with_field(DEVICE_ID_ARG)
            .with_hint("call device_list to see the connected devices")
    })?;
    let command = text("command").ok_or_else(|| {
        ToolError::new(ErrorReason::Required, "`command` (a string) is required")
            .with_field("command")
            .with_hint("pass e.g. {\"device_id\": \"nas\", \"command\": \"df -h /\"}")
    })?;
    if command.len() > MAX_COMMAND_BYTES {
        return Err(ToolError::new(
            ErrorReason::InvalidArguments,
            format!(
                "`command` is {} bytes; a device command may have at most {MAX_COMMAND_BYTES}",
                command.len()
            ),
        )
        .with_field("command")
        .with_hint("send one program with its arguments; put data in a file on the device"));
    }
    let timeout = match ctx.arguments.get("timeout") {
        None | Some(Value::Null) => hub.options().default_timeout,
        Some(value) => parse_timeout(value)?,
    };
    let answer = hub
        .run(device_id, command, timeout, &ctx.cancel)
        .await
        .map_err(|mut err| {
            // A refusal names only the devices the caller may see, as
            // `device_list` does.
            if let (DeviceError::NotConnected { connected, .. }, Some(visible)) =
                (&mut err, visible)
            {
                connected.retain(|id| visible(&ctx, id));
            }
            device_error(&err)
        })?;
    answer_value(device_id, answer)
}

fn device_error(err: &DeviceError) -> ToolError {
    let detail = err.to_string();
    match err {
        DeviceError::NotConnected { .. } => ToolError::new(ErrorReason::NotFound, detail)
            .with_field(DEVICE_ID_ARG)
            .with_hint("call device_list for the connected devices; a waiter reconnects by itself"),
        DeviceError::Disconnected { .. } => ToolError::execution(detail)
            .with_hint("check the device with device_list before running the command again"),
        DeviceError::NotSent { .. } => ToolError::execution(detail).with_hint(
            "its link was closing; check it with device_list and run the command again once it \
             is back",
        ),
        DeviceError::NoAnswer { .. } => ToolError::new(ErrorReason::Timeout, detail)
            .with_hint("the device may be overloaded or its link stalled; try device_list"),
        DeviceError::Cancelled { .. } => ToolError::new(ErrorReason::Cancelled, detail),
        DeviceError::Unreadable { .. } => ToolError::execution(detail).with_hint(
            "the device's waiter may be another version than this server: run `homeagent \
             --version` on both and update the older one",
        ),
    }
}

fn answer_value(device_id: &str, answer: CmdAnswer) -> Result<Value, ToolError> {
    let on_device = |what: &str| {
        let detail = answer.detail.clone().unwrap_or_else(|| what.to_owned());
        format!("device {device_id:?}: {detail}")
    };
    let with_hint = |err: ToolError| match &answer.hint {
        Some(hint) => err.with_hint(hint.clone()),
        None => err,
    };
    match answer.status {
        CmdStatus::Ok => {
            let mut value = json!({
                "device_id": device_id,
                "exit_code": answer.exit_code,
                "stdout": answer.stdout,
                "stderr": answer.stderr,
                "truncated": answer.truncated,
                "duration_ms": answer.duration_ms,
            });
            // Why a run has no exit code (a signal killed the program):
            // without it a null exit code reads like a plain success.
            if let (Some(detail), Some(map)) = (&answer.detail, value.as_object_mut()) {
                map.insert("detail".into(), json!(detail));
            }
            Ok(value)
        }
        CmdStatus::Refused => Err(with_hint(
            ToolError::new(ErrorReason::Denied, on_device("the command was refused"))
                .with_field("command"),
        )),
        CmdStatus::Timeout => Err(with_hint(ToolError::new(
            ErrorReason::Timeout,
            on_device("the command ran past its timeout and was killed"),
        ))),
        CmdStatus::Error => Err(with_hint(ToolError::execution(on_device(
            "the command could not be run",
        )))),
    }
}
