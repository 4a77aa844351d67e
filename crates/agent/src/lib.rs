//! HomeAgent's runtime: configuration, the embedded store, the agent loop
//! and the scheduler.
//!
//! - [`config`]: the TOML model, loader and generated example.
//! - [`store`]: SQLite sessions, messages and tool events.
//! - [`runtime`]: the agent loop ([`Runtime::run`]: one input → frames →
//!   one terminal frame).
//! - [`scheduler`]: per-session FIFO queues, interrupts, stop, counters.
//! - [`frames`]: what an input reports (`run --json`, the sessions API).
//! - [`context`]: fitting history into the context budget.
//! - [`demo_model`]: the offline demo model for `demo` sources.

pub mod build;
pub mod config;
pub mod context;
pub mod demo_model;
pub mod frames;
mod kept_requests;
mod lru;
mod request_base;
pub mod runtime;
pub mod scheduler;
pub mod store;
pub mod tokens;

pub use build::{Agent, BuildError, BuildOptions, DEMO_NOTICE, build, tool_source_of};
pub use demo_model::DemoModel;
pub use frames::{Frame, Incomplete, SkipReason, UsageFrame};
pub use runtime::{AgentSettings, FrameSink, Runtime, TurnControl, TurnInput};
pub use scheduler::{
    FrameObserver, Frames, InputId, Scheduler, SchedulerCounters, SchedulerOptions, Submission,
};
