//! The integration tests of `homeagent-agent`, linked into one binary: each file
//! beside this one is a module of it, so the suite links once rather than
//! once per file (a test binary holds the whole dependency tree, and CI's
//! disk and link time went to dozens of copies of it).

#![allow(clippy::unwrap_used, clippy::expect_used)] // a panic in a test is a test failure

mod common;

mod batch_events;
mod commits;
mod config;
mod context;
mod kept_request;
mod open_input;
mod scheduler;
mod session_claim;
mod store;
mod tokens;
mod tool_list;
mod tool_names;
