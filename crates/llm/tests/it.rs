//! The integration tests of `homeagent-llm`, linked into one binary: each file
//! beside this one is a module of it, so the suite links once rather than
//! once per file (a test binary holds the whole dependency tree, and CI's
//! disk and link time went to dozens of copies of it). `transport_log` is
//! the exception: it needs a process of its own (see that file).

#![allow(clippy::unwrap_used, clippy::expect_used)] // a panic in a test is a test failure

mod adapter_check;
mod anthropic;
mod framing;
mod gemini;
mod lua;
mod ollama;
mod openai;
mod source;
mod source_setup;
mod transport;
mod transport_threads;
mod transport_tls;
