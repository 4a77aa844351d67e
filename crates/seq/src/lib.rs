//! Tool sequences: named, stored procedures of tool calls.
//!
//! A sequence is a list of groups run one after another; the calls of a
//! group run together (concurrently when every tool allows it) and write
//! named slots that later groups read as `$args.K`. A person or a model
//! saves one once (`seq_create`) and runs it by name (`seq_run`).
//!
//! - [`split`]: the `tools` string → one piece per tool, with byte positions.
//! - [`format`](mod@format): the strict JSON model with actionable errors → [`model`].
//! - [`check`]: the create-time rules (errors and warnings).
//! - [`cond`]: the condition language of `when` and `seq_when_call`.
//! - [`subst`]: `$args.K` substitution.
//! - [`store`]: atomic files under `<data_dir>/sequences`, name rules, cycles.
//! - [`engine`]: groups, barriers, slots, retries, timeouts, missing tools,
//!   nested calls — every call through the gated [`homeagent_tools::ToolApi`].
//! - [`tools`]: the seven `seq_*` tools and [`register_seq_tools`].
//! - [`help`]: the guide `seq_help` returns.

pub mod check;
pub mod cli;
pub mod cond;
pub mod create;
pub mod display;
pub mod engine;
pub mod format;
pub mod help;
pub mod model;
mod nesting;
pub mod report;
pub mod split;
pub mod store;
mod strict_json;
pub mod subst;
pub mod tools;

pub use check::{CheckError, CheckReport, Warning, check_sequence};
pub use cond::CondError;
pub use create::{CreateError, create_sequence};
pub use engine::{Caller, Engine, MAX_DEPTH, SeqBackend};
pub use format::{FormatError, parse_sequence, parse_sequence_value};
pub use model::{Group, MissingPolicy, OnError, Sequence, SlotType, ToolStep};
pub use report::{GroupReport, GroupStatus, RunReport, RunStatus};
pub use split::{Piece, SplitError, split_tools};
pub use store::{SeqStore, StoreError};
pub use tools::{BackendSlot, SEQ_TOOLS, SeqSetupError, SeqToolsOptions, register_seq_tools};
