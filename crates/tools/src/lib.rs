//! HomeAgent's built-in tools.
//!
//! Each tool declares its own scheduling (parallel-safe or serial) in its
//! [`homeagent_core::ToolDef`]; the kernel keeps no list of tool names.
//!
//! - [`demo`]: `demo_sleep`, `demo_echo` and `demo_note`, the tools the
//!   scripted model's batches call, built to make parallelism observable.

pub mod demo;

pub use demo::{DemoState, register_demo_tools};
