//! HomeAgent's built-in tools.
//!
//! Each tool declares its own scheduling (parallel-safe or serial) in its
//! [`homeagent_core::ToolDef`]; the kernel keeps no list of tool names.
//!
//! - [`cmd_run`]: `cmd_run`, one allowlisted program run without a shell.
//! - [`demo`]: `demo_sleep`, `demo_echo` and `demo_note`, the tools the
//!   scripted model's batches call, built to make parallelism observable.
//! - [`files`]: `files_read`, `files_list`, `files_write`, confined to a root.
//! - [`output`]: `output_send__<channel>` for every registered output channel.
//! - [`get_tools`]: `get_tools`, the list of tools the caller may use.
//! - [`gate`]: the one authorization gate ([`GatedSource`]) every call passes.
//! - [`tool_api`]: running a tool from code, through the same kernel path.
//! - [`hooks`]: the person's command hooks (`sh -c`), run before and after calls.

pub mod cmd_run;
pub mod demo;
pub mod files;
pub mod gate;
pub mod get_tools;
pub mod hooks;
mod off_thread;
pub mod output;
mod process_group;
pub mod tool_api;

pub use cmd_run::{
    CmdRefusal, CmdRunPolicy, check_command, check_command_async, register_cmd_run, run_checked,
    run_command,
};
pub use demo::{DEMO_TOOLS, DemoState, register_demo_tools};
pub use files::{
    Access, Expect, FilesPolicy, FilesSetupError, OpenRefusal, PathRefusal, Root,
    register_files_tools,
};
pub use gate::{AGENT_EXTRA, AgentGrant, Approval, Approver, DEFAULT_AGENT, Gate, GatedSource};
pub use get_tools::{ListedTools, ToolVisibility, register_get_tools, register_get_tools_listing};
pub use output::{
    ChannelError, ChannelRegistry, ConsoleChannel, OutputChannel, register_output_channel,
    register_output_channels,
};
pub use process_group::ProcessGroup;
pub use tool_api::ToolApi;
