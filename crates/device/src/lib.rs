//! The device bridge: how a home agent reaches the machines around it.
//!
//! A small daemon on each machine, the **waiter** (`homeagent waiter`),
//! dials the agent's server over WebSocket (`/api/v1/device/ws`), introduces
//! itself and binds with a token. The server then offers two tools to every
//! agent: `device_list` and `device_cmd_run {device_id, command, timeout?}`.
//! A command travels server → waiter as a [`protocol::ServerFrame::Cmd`];
//! the waiter checks it against its **own** policy (the same allowlist and
//! write guard code as `cmd_run`, see [`homeagent_tools::run_command`]),
//! runs it without a shell and answers with a
//! [`protocol::DeviceFrame::CmdResult`].
//!
//! Two policies apply, on two machines, and neither trusts the other:
//! - the server's authorization gate decides which agent may reach which
//!   device (`[[agents]] devices = [...]`; `device_cmd_run` is registered
//!   as device-scoped, so a call without a granted `device_id` is refused
//!   before it leaves the server);
//! - the waiter decides which programs run on its machine
//!   (`device_authorized`, `device_cmd_allowlist`, `allow_writes`), on every
//!   path that starts it (foreground and `--daemon`).
//!
//! Modules:
//! - [`protocol`]: the frames both sides exchange, and their size limit.
//! - [`hub`]: the server side: bound devices, requests in flight, and what
//!   happens when a link drops (every pending command fails at once).
//! - [`tools`]: `device_list` and `device_cmd_run` over a [`hub::DeviceHub`].
//! - [`waiter`]: the device side (`homeagent waiter`): config, policy, the
//!   client that binds, runs commands and reconnects.

pub mod hub;
pub mod protocol;
pub mod tools;
pub mod waiter;

pub use hub::{
    BindRefusal, CmdAnswer, Delivery, DeviceError, DeviceHub, DeviceInfo, DeviceLink, HubOptions,
};
pub use protocol::{CmdStatus, DeviceFrame, Hello, MAX_FRAME_BYTES, RefusalCode, ServerFrame};
pub use tools::{
    DEVICE_CMD_RUN_TOOL, DEVICE_ID_ARG, DEVICE_LIST_TOOL, DEVICE_TOOLS, DeviceVisibility,
    register_device_tools,
};
