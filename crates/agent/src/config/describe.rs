//! The report `homeagent config check` prints: what the config resolved
//! to, in the terms a person debugging their setup needs — which file was
//! read, which sources will be tried, which agents exist and what they may
//! use. Secrets are reported as "set" / "not set", never shown.

use std::fmt::Write as _;

use super::load::{ENV_API_KEY, ENV_DEVICE_TOKEN, LoadedConfig};
use super::types::{AgentEntry, DEFAULT_AGENT};

/// The `config check` report.
pub fn describe(loaded: &LoadedConfig) -> String {
    let config = &loaded.config;
    let mut out = String::new();
    out.push_str(&loaded.paths.describe());
    if !loaded.file_found {
        out.push_str("             (no file there: using the defaults)\n");
    }

    out.push_str("\nmodel sources (tried in this order):\n");
    let mut sources: Vec<_> = config.llm.sources.iter().collect();
    sources.sort_by(|a, b| b.priority.cmp(&a.priority).then(a.name.cmp(&b.name)));
    if sources.is_empty() {
        out.push_str(
            "  none configured: taken from OPENAI_API_KEY, ANTHROPIC_API_KEY, \
             GEMINI_API_KEY or OLLAMA_HOST when set\n",
        );
    }
    for source in sources {
        let _ = writeln!(
            out,
            "  {} protocol={} model={} base_url={} priority={}",
            source.name,
            source.protocol.as_str(),
            source.model.as_deref().unwrap_or("(default)"),
            source
                .base_url
                .as_deref()
                .map_or_else(|| "(none)".to_owned(), homeagent_llm::base_url::shown_url),
            source.priority,
        );
        if let Some(var) = &source.api_key_env {
            let state = if loaded.key_vars_set.contains(var) {
                "set"
            } else {
                "NOT SET: this source will be disabled"
            };
            let _ = writeln!(out, "    key: ${var} ({state})");
        }
        if let Some(adapter) = &source.adapter {
            let _ = writeln!(out, "    adapter: {adapter}");
        }
        if let Some(limit) = source.max_concurrent {
            let _ = writeln!(out, "    max_concurrent: {limit}");
        }
    }
    let _ = writeln!(
        out,
        "  stream idle timeout {}, connect timeout {}, request timeout {}, adapter dir {}",
        config.llm.stream_idle_timeout,
        config.llm.connect_timeout,
        config.llm.request_timeout,
        loaded.adapter_dir().display()
    );
    for certificate in loaded.ca_certificates() {
        let _ = writeln!(out, "  extra CA certificate: {}", certificate.display());
    }

    out.push_str("\nagents:\n");
    let mut agents = config.agents.clone();
    if !agents.iter().any(|agent| agent.name == DEFAULT_AGENT) {
        agents.insert(0, AgentEntry::main());
    }
    for agent in &agents {
        describe_agent(&mut out, agent);
    }

    let tools = &config.tools;
    let cmd_run = &tools.cmd_run;
    out.push_str("\ntools:\n");
    // The offline demo model registers the demo tools whatever this says.
    let demo = if tools.demo {
        "on"
    } else {
        "off (on anyway while the offline demo model answers)"
    };
    let _ = writeln!(
        out,
        "  parallel batches: {}\n  demo tools: {demo}",
        on_off(tools.parallel),
    );
    let _ = writeln!(
        out,
        "  require approval: {}",
        list_or(&tools.require_approval, "none")
    );
    if cmd_run.enabled {
        let _ = writeln!(
            out,
            "  cmd_run: on, allowlist {}, writes {}, timeout {}, extra env {}",
            list_or(&cmd_run.allowlist, "built-in"),
            if cmd_run.allow_writes {
                "allowed"
            } else {
                "refused"
            },
            cmd_run.timeout,
            list_or(&cmd_run.env, "none"),
        );
    } else {
        out.push_str("  cmd_run: off\n");
    }
    let _ = writeln!(out, "  files root: {}", loaded.files_root().display());

    let scheduler = &config.scheduler;
    let _ = writeln!(
        out,
        "\nagent loop: max_tool_turns {}, context_tokens {}, max_tokens {}, system_prompt {}",
        config.agent.max_tool_turns,
        config.agent.context_tokens,
        config.agent.max_tokens,
        if config.agent.system_prompt.is_some() {
            "extra text set"
        } else {
            "built-in"
        },
    );
    let _ = writeln!(
        out,
        "scheduler: {} concurrent sessions, queue {} per session, dedup {}",
        scheduler.max_concurrent_sessions,
        scheduler.queue_capacity,
        scheduler
            .dedup_window
            .map_or_else(|| "off".to_owned(), |window| window.to_string()),
    );
    let _ = writeln!(
        out,
        "runtime: {} worker thread(s), at most {} for blocking work; serve on {} thread(s)",
        config.runtime.worker_threads,
        config.runtime.blocking_threads,
        config.runtime.serve_threads
    );

    let secret_state = |secret: &Option<_>| if secret.is_some() { "set" } else { "not set" };
    let _ = writeln!(
        out,
        "\nserver: listen {}\n  api key: {} (${ENV_API_KEY} or server.api_key)\n  device token: {} (${ENV_DEVICE_TOKEN} or server.device_token)",
        config.server.listen,
        secret_state(&loaded.secrets.api_key),
        secret_state(&loaded.secrets.device_token),
    );
    out
}

fn describe_agent(out: &mut String, agent: &AgentEntry) {
    let _ = writeln!(
        out,
        "  {}: tools {}, denied {}, devices {}",
        agent.name,
        list_or(&agent.allow_tools, "all"),
        list_or(&agent.deny_tools, "none"),
        list_or(&agent.devices, "none"),
    );
}

fn on_off(flag: bool) -> &'static str {
    if flag { "on" } else { "off" }
}

fn list_or(items: &[String], empty: &str) -> String {
    if items.is_empty() {
        empty.to_owned()
    } else {
        items.join(", ")
    }
}
