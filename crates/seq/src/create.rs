//! Creating a sequence: the static checks, then the store (which refuses
//! cycles). Shared by `seq_create` and `homeagent seq create`.

use homeagent_core::ToolSource;
use serde_json::{Value, json};

use crate::check::{CheckError, Warning, check_sequence};
use crate::model::Sequence;
use crate::store::{SeqStore, StoreError};

/// Why a sequence was not created.
#[derive(Debug, thiserror::Error)]
pub enum CreateError {
    #[error("sequence \"{name}\" breaks {} rule(s):\n- {}", errors.len(), errors.iter().map(ToString::to_string).collect::<Vec<_>>().join("\n- "))]
    Check {
        name: String,
        errors: Vec<CheckError>,
    },
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// Checks `seq` against the tools `tools` knows and stores it. Returns the
/// warnings (static ones, then missing `#targets`).
pub fn create_sequence(
    store: &SeqStore,
    seq: &Sequence,
    tools: Option<&dyn ToolSource>,
) -> Result<Vec<Warning>, CreateError> {
    crate::store::check_name(&seq.name)?;
    let report = check_sequence(seq, tools);
    if !report.errors.is_empty() {
        return Err(CreateError::Check {
            name: seq.name.clone(),
            errors: report.errors,
        });
    }
    let mut warnings = report.warnings;
    warnings.extend(store.save(seq)?);
    Ok(warnings)
}

/// A sequence's outline: its groups with inputs, outputs and tool counts,
/// and the agent that wrote it, if one did.
pub fn summary(seq: &Sequence) -> Value {
    let mut summary = json!({
        "name": seq.name,
        "description": seq.description,
        "groups": seq.groups.iter().map(|g| json!({
            "name": g.name,
            "in": g.inputs.keys().collect::<Vec<_>>(),
            "out": g.outputs.keys().collect::<Vec<_>>(),
            "tools": g.tools.len(),
        })).collect::<Vec<_>>(),
    });
    // Whose grants bound it; a person's sequences carry no author.
    if let Some(author) = &seq.author {
        summary["author"] = Value::String(author.clone());
    }
    summary
}

/// The outline as text lines (the CLI's `seq list`).
pub fn summary_text(seq: &Sequence) -> String {
    let mut out = format!(
        "{}: {} ({} group{})\n",
        seq.name,
        if seq.description.is_empty() {
            "(no description)"
        } else {
            &seq.description
        },
        seq.groups.len(),
        if seq.groups.len() == 1 { "" } else { "s" }
    );
    for g in &seq.groups {
        let keys = |m: &std::collections::BTreeMap<String, crate::model::SlotType>| {
            m.keys().map(String::as_str).collect::<Vec<_>>().join(", ")
        };
        out.push_str(&format!(
            "  · {} in [{}] out [{}] {} tool(s)\n",
            g.name,
            keys(&g.inputs),
            keys(&g.outputs),
            g.tools.len()
        ));
    }
    out
}
