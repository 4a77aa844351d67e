//! HTTP to the two children: inputs to the agent's OpenAI-compatible
//! endpoint, and the control reads (the mock's per-input log, the agent's
//! scheduler counters and a session's history).

use std::collections::HashMap;
use std::net::IpAddr;
use std::time::{Duration, Instant};

use serde::Deserialize;
use serde_json::{Value, json};

use crate::error::BenchError;
use crate::report::Counters;

/// Longest an input may take before it counts as lost.
const REPLY_TIMEOUT: Duration = Duration::from_secs(300);

/// One input's reply as the client saw it.
#[derive(Debug, Clone, PartialEq)]
pub struct Reply {
    pub elapsed_s: f64,
    /// `None` when the reply was a 200 with a completion; otherwise what
    /// went wrong (status and error code, or the transport error).
    pub problem: Option<String>,
    pub content: String,
}

/// The agent's HTTP API.
#[derive(Debug, Clone)]
pub struct AgentClient {
    http: reqwest::Client,
    base: String,
}

fn control_error(what: &str, detail: impl std::fmt::Display) -> BenchError {
    BenchError::Control {
        what: what.to_owned(),
        detail: detail.to_string(),
    }
}

/// A plain-http client. In the `homeagent` binary reqwest is built with
/// rustls (for the providers) and needs a crypto provider installed even
/// for plain http, so one is installed first (ring, as homeagent-llm does).
fn http_client(local: Option<IpAddr>) -> Result<reqwest::Client, BenchError> {
    if rustls::crypto::CryptoProvider::get_default().is_none() {
        let _ = rustls::crypto::ring::default_provider().install_default();
    }
    reqwest::Client::builder()
        .no_proxy()
        .local_address(local)
        .pool_max_idle_per_host(1024)
        .build()
        .map_err(|e| control_error("an HTTP client", e))
}

impl AgentClient {
    /// A client for `base`; `local` picks the source address (the agent
    /// limits turns per client address, so the blast spreads its sessions
    /// over 127.0.0.x).
    pub fn new(base: &str, local: Option<IpAddr>) -> Result<AgentClient, BenchError> {
        Ok(AgentClient {
            http: http_client(local)?,
            base: base.to_owned(),
        })
    }

    /// Sends `text` as one input, continuing `session` (or a fresh
    /// session), and waits for the whole reply.
    pub async fn send(&self, session: Option<&str>, text: &str) -> Reply {
        let body = json!({
            "model": "homeagent",
            "messages": [{"role": "user", "content": text}],
        });
        let mut request = self
            .http
            .post(format!("{}/v1/chat/completions", self.base))
            .timeout(REPLY_TIMEOUT)
            .header("content-type", "application/json")
            .body(body.to_string());
        if let Some(session) = session {
            request = request.header("x-session-id", session);
        }
        let started = Instant::now();
        let result = async {
            let response = request.send().await?;
            let status = response.status().as_u16();
            let bytes = response.bytes().await?;
            Ok::<_, reqwest::Error>((status, bytes))
        }
        .await;
        let elapsed_s = started.elapsed().as_secs_f64();
        match result {
            Err(error) => Reply {
                elapsed_s,
                problem: Some(format!("no reply: {error}")),
                content: String::new(),
            },
            Ok((status, bytes)) => {
                let value: Value = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
                if status != 200 {
                    let code = value["error"]["code"].as_str().unwrap_or("?");
                    let message = value["error"]["message"].as_str().unwrap_or("");
                    return Reply {
                        elapsed_s,
                        problem: Some(format!("HTTP {status} {code}: {message}")),
                        content: String::new(),
                    };
                }
                match value["choices"][0]["message"]["content"].as_str() {
                    Some(content) => Reply {
                        elapsed_s,
                        problem: None,
                        content: content.to_owned(),
                    },
                    None => Reply {
                        elapsed_s,
                        problem: Some("HTTP 200 without a completion".to_owned()),
                        content: String::new(),
                    },
                }
            }
        }
    }

    async fn get_json(&self, path: &str) -> Result<Value, BenchError> {
        let what = format!("GET {path} of homeagent serve");
        let response = self
            .http
            .get(format!("{}{path}", self.base))
            .timeout(Duration::from_secs(60))
            .send()
            .await
            .map_err(|e| control_error(&what, e))?;
        let status = response.status().as_u16();
        let bytes = response
            .bytes()
            .await
            .map_err(|e| control_error(&what, e))?;
        if status != 200 {
            return Err(control_error(
                &what,
                format!("HTTP {status}: {}", String::from_utf8_lossy(&bytes)),
            ));
        }
        serde_json::from_slice(&bytes).map_err(|e| control_error(&what, e))
    }

    /// The scheduler counters of `GET /api/v1/status`.
    pub async fn counters(&self) -> Result<Counters, BenchError> {
        let status = self.get_json("/api/v1/status").await?;
        Ok(counters_from_status(&status["scheduler"]))
    }

    /// The user messages stored for `session`, in order.
    pub async fn user_messages(&self, session: &str) -> Result<Vec<String>, BenchError> {
        let body = self
            .get_json(&format!("/api/v1/sessions/{session}"))
            .await?;
        Ok(body["messages"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|m| m["role"] == "user")
            .filter_map(|m| m["content"].as_str().map(str::to_owned))
            .collect())
    }
}

/// The counters the bench checks, from the status endpoint's `scheduler`.
pub fn counters_from_status(scheduler: &Value) -> Counters {
    let n = |key: &str| scheduler[key].as_u64().unwrap_or(0);
    Counters {
        enqueued: n("enqueued"),
        executed: n("executed"),
        rejected: n("rejected"),
        preempted: n("preempted"),
        cancelled: n("cancelled"),
        queued: scheduler["queue_depth"]
            .as_object()
            .map_or(0, |m| m.values().filter_map(Value::as_u64).sum()),
        running_sessions: n("running_sessions"),
    }
}

/// One record of the mock's per-input log (`GET /stats/inputs`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
pub struct MockInput {
    pub requests: u64,
    pub reports: u64,
    pub batch_calls: Option<u64>,
    pub executed: Option<u64>,
    /// Tool calls and tool results in the history the report read.
    pub report_calls: Option<u64>,
    pub report_results: Option<u64>,
    /// The nonce the report named, which the agent's answer repeats.
    pub nonce: Option<String>,
    pub own_us: u64,
    pub served: u64,
    pub served_us: u64,
}

/// The mock's control endpoints.
#[derive(Debug, Clone)]
pub struct MockClient {
    http: reqwest::Client,
    base: String,
}

#[derive(Deserialize)]
struct InputLogBody {
    inputs: HashMap<String, MockInput>,
    evicted: u64,
}

impl MockClient {
    pub fn new(base: &str) -> Result<MockClient, BenchError> {
        Ok(MockClient {
            http: http_client(None)?,
            base: base.to_owned(),
        })
    }

    async fn fetch(&self) -> Result<InputLogBody, BenchError> {
        let what = "GET /stats/inputs of homeagent mock-llm";
        let response = self
            .http
            .get(format!("{}/stats/inputs", self.base))
            .timeout(Duration::from_secs(60))
            .send()
            .await
            .map_err(|e| control_error(what, e))?;
        let bytes = response.bytes().await.map_err(|e| control_error(what, e))?;
        serde_json::from_slice(&bytes).map_err(|e| {
            control_error(
                what,
                format!("{e} (is the mock older than the per-input log?)"),
            )
        })
    }

    /// The per-input log, once every request in it has finished sending
    /// (the mock writes a request's served time just after its last byte,
    /// so a read right after the reply may be a moment early).
    pub async fn inputs(&self) -> Result<HashMap<String, MockInput>, BenchError> {
        let mut body = self.fetch().await?;
        for _ in 0..50 {
            if body.inputs.values().all(|r| r.served >= r.requests) {
                break;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
            body = self.fetch().await?;
        }
        if body.evicted > 0 {
            return Err(control_error(
                "the mock's per-input log",
                format!(
                    "{} inputs were evicted before the bench read them",
                    body.evicted
                ),
            ));
        }
        Ok(body.inputs)
    }

    /// Empties the log between scenarios.
    pub async fn clear(&self) -> Result<(), BenchError> {
        let what = "DELETE /stats/inputs of homeagent mock-llm";
        let response = self
            .http
            .delete(format!("{}/stats/inputs", self.base))
            .timeout(Duration::from_secs(60))
            .send()
            .await
            .map_err(|e| control_error(what, e))?;
        if !response.status().is_success() {
            return Err(control_error(what, format!("HTTP {}", response.status())));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counters_sum_the_queue_depths() {
        let scheduler = json!({"enqueued": 290, "executed": 288, "rejected": 0, "preempted": 0,
                               "cancelled": 1, "queue_depth": {"a": 2, "b": 3},
                               "running_sessions": 4});
        assert_eq!(
            counters_from_status(&scheduler),
            Counters {
                enqueued: 290,
                executed: 288,
                rejected: 0,
                preempted: 0,
                cancelled: 1,
                queued: 5,
                running_sessions: 4,
            }
        );
    }
}
