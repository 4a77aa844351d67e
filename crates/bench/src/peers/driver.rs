//! Running `peers/driver.py` in the virtualenv and reading what it prints.
//!
//! The driver prints one JSON object per line: a `ready` line naming the
//! framework and its version, one line per measured input with the time it
//! took as the driver saw it, and a `done` line. Parsing is kept apart from
//! the process so it can be tested on hand-written output; a driver that
//! died half-way is told apart from one that finished.

use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

use serde::Deserialize;
use serde_json::json;
use tokio::io::AsyncWriteExt as _;
use tokio::process::Command;

use crate::client::Reply;

/// Longest one driver run may take (the forced-serial N = 64 rounds of
/// scenario 1 alone take about two minutes).
const DRIVER_TIMEOUT: Duration = Duration::from_secs(1800);

/// What a driver run is asked to do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DriverSpec<'a> {
    /// `openai-agents` or `langgraph`.
    pub framework: &'a str,
    /// The mock's OpenAI base URL, `http://127.0.0.1:PORT/v1`.
    pub base_url: String,
    pub warmup: Vec<String>,
    pub inputs: Vec<String>,
    /// `Some(1)`: the framework's own knob to run one tool at a time.
    pub max_tool_concurrency: Option<u32>,
}

/// One measured input as the driver reported it.
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct DriverReply {
    pub text: String,
    pub elapsed_s: f64,
    pub error: Option<String>,
    #[serde(default)]
    pub output: String,
    /// The most `demo_sleep` calls in flight at once during the input.
    #[serde(default)]
    pub peak_in_flight: u64,
}

impl DriverReply {
    /// As the bench's own client would have recorded it.
    pub fn to_reply(&self) -> Reply {
        Reply {
            elapsed_s: self.elapsed_s,
            problem: self.error.clone(),
            content: self.output.clone(),
        }
    }
}

/// A whole driver run.
#[derive(Debug, Clone, PartialEq)]
pub struct DriverRun {
    pub version: String,
    pub python: String,
    pub replies: Vec<DriverReply>,
}

/// Why a driver run gave no usable result.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DriverError {
    #[error("the driver printed no ready line{0}")]
    NotReady(String),
    #[error("the driver stopped after {got} of {expected} inputs{detail}")]
    Stopped {
        got: usize,
        expected: usize,
        detail: String,
    },
    #[error("the driver printed a line the bench cannot read: {line} ({detail})")]
    BadLine { line: String, detail: String },
    #[error("the driver answered {got:?} where the bench sent {sent:?}")]
    OutOfOrder { sent: String, got: String },
    #[error("cannot run the driver: {0}")]
    Process(String),
}

#[derive(Deserialize)]
struct Ready {
    version: String,
    #[serde(default)]
    python: String,
}

/// Reads a driver's stdout given the inputs it was sent; `stderr_tail` is
/// added to the messages of a run that ended early.
pub fn parse_output(
    stdout: &str,
    inputs: &[String],
    stderr_tail: &str,
) -> Result<DriverRun, DriverError> {
    let detail = if stderr_tail.is_empty() {
        String::new()
    } else {
        format!("; its stderr ends: {stderr_tail}")
    };
    let mut lines = stdout.lines().filter(|l| l.trim_start().starts_with('{'));
    let ready: Ready = loop {
        let Some(line) = lines.next() else {
            return Err(DriverError::NotReady(detail));
        };
        let value: serde_json::Value =
            serde_json::from_str(line).map_err(|e| DriverError::BadLine {
                line: line.to_owned(),
                detail: e.to_string(),
            })?;
        if value["ready"] == json!(true) {
            break serde_json::from_value(value).map_err(|e| DriverError::BadLine {
                line: line.to_owned(),
                detail: e.to_string(),
            })?;
        }
    };
    let mut replies = Vec::new();
    let mut done = false;
    for line in lines {
        let value: serde_json::Value =
            serde_json::from_str(line).map_err(|e| DriverError::BadLine {
                line: line.to_owned(),
                detail: e.to_string(),
            })?;
        if value["done"] == json!(true) {
            done = true;
            break;
        }
        let reply: DriverReply =
            serde_json::from_value(value).map_err(|e| DriverError::BadLine {
                line: line.to_owned(),
                detail: e.to_string(),
            })?;
        let sent = inputs.get(replies.len()).cloned().unwrap_or_default();
        if reply.text != sent {
            return Err(DriverError::OutOfOrder {
                sent,
                got: reply.text,
            });
        }
        replies.push(reply);
    }
    if !done || replies.len() != inputs.len() {
        return Err(DriverError::Stopped {
            got: replies.len(),
            expected: inputs.len(),
            detail,
        });
    }
    Ok(DriverRun {
        version: ready.version,
        python: ready.python,
        replies,
    })
}

/// Runs `driver` with `python` on `spec` and parses its output.
pub async fn run_driver(
    python: &Path,
    driver: &Path,
    spec: &DriverSpec<'_>,
) -> Result<DriverRun, DriverError> {
    let body = json!({
        "framework": spec.framework,
        "base_url": spec.base_url,
        "warmup": spec.warmup,
        "inputs": spec.inputs,
        "max_tool_concurrency": spec.max_tool_concurrency,
    });
    let mut cmd = Command::new(python);
    cmd.arg(driver)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    // The frameworks must reach the mock only: no key, no proxy, no trace
    // export (the driver also turns tracing off).
    for var in [
        "OPENAI_API_KEY",
        "OPENAI_BASE_URL",
        "LANGSMITH_TRACING",
        "LANGCHAIN_TRACING_V2",
        "HTTP_PROXY",
        "HTTPS_PROXY",
        "ALL_PROXY",
        "http_proxy",
        "https_proxy",
        "all_proxy",
    ] {
        cmd.env_remove(var);
    }
    cmd.env("NO_PROXY", "127.0.0.1,localhost")
        .env("OPENAI_AGENTS_DISABLE_TRACING", "1");
    let mut child = cmd
        .spawn()
        .map_err(|e| DriverError::Process(format!("start {}: {e}", python.display())))?;
    if let Some(mut stdin) = child.stdin.take() {
        stdin
            .write_all(body.to_string().as_bytes())
            .await
            .map_err(|e| DriverError::Process(format!("write the spec: {e}")))?;
        // Dropping stdin closes it: the driver reads to the end.
    }
    let output = tokio::time::timeout(DRIVER_TIMEOUT, child.wait_with_output())
        .await
        .map_err(|_| {
            DriverError::Process(format!("no result within {} s", DRIVER_TIMEOUT.as_secs()))
        })?
        .map_err(|e| DriverError::Process(e.to_string()))?;
    let stderr = String::from_utf8_lossy(&output.stderr);
    parse_output(
        &String::from_utf8_lossy(&output.stdout),
        &spec.inputs,
        &super::venv::tail(&stderr, 3),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn inputs() -> Vec<String> {
        vec!["!slowbatch2-a".to_owned(), "!slowbatch2-b".to_owned()]
    }

    #[test]
    fn a_whole_run_is_read_in_order() {
        let stdout = "some library noise\n\
            {\"ready\": true, \"framework\": \"langgraph\", \"version\": \"1.2.22\", \"python\": \"3.11.7\"}\n\
            {\"text\": \"!slowbatch2-a\", \"elapsed_s\": 0.25, \"error\": null, \"output\": \"executed=2\", \"peak_in_flight\": 2}\n\
            {\"text\": \"!slowbatch2-b\", \"elapsed_s\": 0.5, \"error\": \"APIConnectionError: refused\", \"output\": \"\", \"peak_in_flight\": 0}\n\
            {\"done\": true}\n";
        let run = parse_output(stdout, &inputs(), "").unwrap();
        assert_eq!(run.version, "1.2.22");
        assert_eq!(run.python, "3.11.7");
        assert_eq!(run.replies.len(), 2);
        assert_eq!(run.replies[0].elapsed_s, 0.25);
        assert_eq!(run.replies[0].peak_in_flight, 2);
        assert_eq!(
            run.replies[1].to_reply(),
            Reply {
                elapsed_s: 0.5,
                problem: Some("APIConnectionError: refused".to_owned()),
                content: String::new(),
            }
        );
    }

    #[test]
    fn a_driver_that_died_half_way_says_so_with_its_stderr() {
        let stdout = "{\"ready\": true, \"version\": \"0.24.0\"}\n\
            {\"text\": \"!slowbatch2-a\", \"elapsed_s\": 0.25, \"error\": null}\n";
        assert_eq!(
            parse_output(stdout, &inputs(), "Traceback | KeyError: 'x'"),
            Err(DriverError::Stopped {
                got: 1,
                expected: 2,
                detail: "; its stderr ends: Traceback | KeyError: 'x'".to_owned(),
            })
        );
        assert_eq!(
            parse_output(
                "",
                &inputs(),
                "ModuleNotFoundError: No module named 'agents'"
            )
            .unwrap_err()
            .to_string(),
            "the driver printed no ready line; its stderr ends: ModuleNotFoundError: No module named 'agents'"
        );
    }

    #[test]
    fn replies_out_of_order_or_unreadable_are_errors() {
        let swapped = "{\"ready\": true, \"version\": \"1\"}\n\
            {\"text\": \"!slowbatch2-b\", \"elapsed_s\": 0.25, \"error\": null}\n";
        assert_eq!(
            parse_output(swapped, &inputs(), ""),
            Err(DriverError::OutOfOrder {
                sent: "!slowbatch2-a".to_owned(),
                got: "!slowbatch2-b".to_owned(),
            })
        );
        let bad = "{\"ready\": true, \"version\": \"1\"}\n{\"text\": 3}\n";
        assert!(matches!(
            parse_output(bad, &inputs(), ""),
            Err(DriverError::BadLine { .. })
        ));
    }
}
