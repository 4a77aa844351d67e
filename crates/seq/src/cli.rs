//! What `homeagent seq …` does, as functions over a store, a tool source and
//! an engine, so the binary's module only builds those from the agent.
//!
//! The CLI's `--file` is the person's own path (no confinement: they can
//! read it anyway); the model's `seq_create {file}` is confined instead.

use std::io::Write;
use std::path::{Path, PathBuf};

use homeagent_core::ToolSource;
use serde_json::{Map, Value};

use crate::create::{CreateError, create_sequence, summary_text};
use crate::engine::{Caller, Engine};
use crate::format::{FormatError, parse_sequence};
use crate::report::RunReport;
use crate::store::{SeqStore, StoreError};

/// Why a `seq` command failed.
#[derive(Debug, thiserror::Error)]
pub enum CliError {
    #[error("cannot read {path}: {source}")]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{path} is not a valid sequence: {source}")]
    Format {
        path: PathBuf,
        #[source]
        source: FormatError,
    },
    #[error(transparent)]
    Create(#[from] CreateError),
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error("--args must be a JSON object like {{\"host\":\"nas\"}}: {0}")]
    Args(String),
    #[error(transparent)]
    Output(#[from] std::io::Error),
}

/// `seq create --file F`: warnings go to `err`, the summary to `out`.
pub fn create_from_file(
    store: &SeqStore,
    tools: Option<&dyn ToolSource>,
    file: &Path,
    out: &mut dyn Write,
    err: &mut dyn Write,
) -> Result<(), CliError> {
    let text = std::fs::read_to_string(file).map_err(|source| CliError::Read {
        path: file.to_owned(),
        source,
    })?;
    let seq = parse_sequence(&text).map_err(|source| CliError::Format {
        path: file.to_owned(),
        source,
    })?;
    let warnings = create_sequence(store, &seq, tools)?;
    for warning in &warnings {
        writeln!(err, "warning: {warning}")?;
    }
    write!(out, "saved {}", summary_text(&seq))?;
    Ok(())
}

/// `seq list`.
pub fn list(store: &SeqStore, out: &mut dyn Write) -> Result<(), CliError> {
    let listed = store.list()?;
    if listed.is_empty() {
        writeln!(
            out,
            "no sequences (create one with `homeagent seq create --file F`)"
        )?;
    }
    for (name, loaded) in listed {
        match loaded {
            Ok(seq) => write!(out, "{}", summary_text(&seq))?,
            Err(e) => writeln!(out, "{name}: DAMAGED: {e}")?,
        }
    }
    Ok(())
}

/// `seq show NAME`: the stored tree as JSON.
pub fn show(store: &SeqStore, name: &str, out: &mut dyn Write) -> Result<(), CliError> {
    let seq = store.load(name)?;
    let text = serde_json::to_string_pretty(&seq.to_author_value())
        .map_err(|e| CliError::Args(e.to_string()))?;
    writeln!(out, "{text}")?;
    Ok(())
}

/// `seq delete NAME`.
pub fn delete(store: &SeqStore, name: &str, out: &mut dyn Write) -> Result<(), CliError> {
    store.delete(name)?;
    writeln!(out, "deleted sequence \"{name}\"")?;
    Ok(())
}

/// `seq run NAME --args JSON` as `agent`: prints each group's status and
/// the final slots; returns the report (`failed()` → exit non-zero).
pub async fn run(
    engine: &Engine,
    name: &str,
    args_json: &str,
    agent: &str,
    out: &mut dyn Write,
) -> Result<RunReport, CliError> {
    let args: Map<String, Value> = match serde_json::from_str::<Value>(args_json) {
        Ok(Value::Object(map)) => map,
        Ok(other) => {
            return Err(CliError::Args(format!(
                "got {}",
                crate::format::kind(&other)
            )));
        }
        Err(e) => return Err(CliError::Args(e.to_string())),
    };
    let report = engine.run_named(name, args, &Caller::new(agent)).await;
    write!(out, "{}", report.render())?;
    Ok(report)
}
