//! The integration tests of `homeagent-seq`, linked into one binary: each file
//! beside this one is a module of it, so the suite links once rather than
//! once per file (a test binary holds the whole dependency tree, and CI's
//! disk and link time went to dozens of copies of it).

#![allow(clippy::unwrap_used, clippy::expect_used)] // a panic in a test is a test failure

mod common;

mod check;
mod cli;
mod cond;
mod engine;
mod format;
mod lenient;
mod split;
mod store;
mod tools;
