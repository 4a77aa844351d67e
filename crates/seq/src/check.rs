//! The rules a sequence must pass before it is stored.
//!
//! Errors are mistakes that would make a run wrong or surprising: a result
//! written to an undeclared slot, an argument nobody provides, two calls
//! racing for one scalar slot, a group that claims to be parallel while it
//! holds a tool that must not overlap (serial execution is always a
//! declared choice: `"parallel": false, "unsafe_serial": true`), a
//! `seq_call` target that is not there, a tool that has no business inside
//! a sequence (messaging, sub-agents, reloading tools, running sequences by
//! the side door).
//!
//! Warnings are things that may be intended: an input never read, a slot
//! never written, a tool that is not registered right now (tools come and
//! go while the agent runs; the run-time `missing` policy decides).

use std::collections::BTreeMap;

use homeagent_core::ToolSource;
use serde_json::Value;

use crate::cond::{self, CondError};
use crate::model::{Group, MissingPolicy, OnError, Sequence, ToolStep};
use crate::store::find_cycle;
use crate::tools::{SEQ_TOOLS, SEQ_WHEN_CALL};

/// Tools that may not run inside a sequence: exact names.
pub const FORBIDDEN_TOOLS: &[&str] = &[
    "spawn_child",
    "seq_run",
    "seq_create",
    "seq_delete",
    "plgreload",
    "tools_reload",
];
/// Tools that may not run inside a sequence: name prefixes.
pub const FORBIDDEN_PREFIXES: &[&str] = &["output_send__"];

/// Whether `tool` is refused inside sequences.
pub fn is_forbidden(tool: &str) -> bool {
    FORBIDDEN_TOOLS.contains(&tool) || FORBIDDEN_PREFIXES.iter().any(|p| tool.starts_with(p))
}

/// A rule a sequence breaks; it is not stored.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum CheckError {
    #[error(
        "group \"{group}\" tool #{index} ({tool}) writes `as: \"{slot}\"`, which is not an out slot; declare it in `out` (out slots: {outputs})"
    )]
    UndeclaredSlot {
        group: String,
        index: usize,
        tool: String,
        slot: String,
        outputs: String,
    },
    #[error(
        "group \"{group}\" {place} uses $args.{arg}, which is not declared in `in`; add \"{arg}\": \"<type>\" to `in` (in keys: {inputs})"
    )]
    UndeclaredArg {
        group: String,
        place: String,
        arg: String,
        inputs: String,
    },
    #[error(
        "group \"{group}\" tool #{index} (seq_when_call) `when` uses $args.{arg}, but the call's `args` do not pass it (passed: {passed}); `when` reads the args given to the call, not the group's: add \"{arg}\": \"$args.{arg}\" to the call's `args`"
    )]
    WhenArgNotPassed {
        group: String,
        index: usize,
        arg: String,
        passed: String,
    },
    #[error(
        "group \"{group}\": slot `{slot}` is written by {writers} calls but is not an array; concurrent writers would race — declare it \"array\" (values append in declaration order) or use separate slots"
    )]
    SlotWrittenTwice {
        group: String,
        slot: String,
        writers: usize,
    },
    #[error(
        "group \"{group}\" is parallel (the default) but tool `{tool}` is not parallel-safe; set \"parallel\": false and \"unsafe_serial\": true to run the group serially, or move the tool to its own group"
    )]
    UnsafeInParallel { group: String, tool: String },
    #[error(
        "group \"{group}\" is serial and contains `{tool}`, which is not parallel-safe; say \"unsafe_serial\": true to declare that serial execution is intended"
    )]
    UndeclaredSerial { group: String, tool: String },
    #[error("group \"{group}\" tool #{index} ({tool}): {detail}")]
    BadTarget {
        group: String,
        index: usize,
        tool: String,
        detail: String,
    },
    #[error(
        "group \"{group}\" calls `{tool}`, which may not run inside a sequence (no messaging, sub-agents, tool reloads or seq_run; use seq_call \"#Name\" to run another sequence)"
    )]
    ForbiddenTool { group: String, tool: String },
    #[error("group \"{group}\" {place}: bad condition: {error}")]
    BadCondition {
        group: String,
        place: String,
        error: CondError,
    },
    #[error("group \"{group}\" has on_error \"retry\" but retries is 0; set \"retries\" (1 to 10)")]
    RetryWithoutRetries { group: String },
    #[error(
        "group \"{group}\" has retries {retries} but its on_error does not retry; set \"on_error\": \"retry\", or remove \"retries\""
    )]
    RetriesWithoutRetry { group: String, retries: u32 },
    #[error(
        "groups call each other round ({path}): such a chain could only end at the nesting limit, after running every tool on the way again; break the cycle"
    )]
    GroupCycle { path: String },
}

/// Something worth knowing that does not stop the sequence being stored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Warning {
    UnusedInput {
        group: String,
        key: String,
    },
    UnwrittenOutput {
        group: String,
        slot: String,
    },
    UnknownTool {
        group: String,
        tool: String,
    },
    NoFallback {
        group: String,
        tool: String,
    },
    /// A `fallback` under a `missing` policy other than degrade: unused.
    UnusedFallback {
        group: String,
        tool: String,
        missing: String,
    },
    MissingSequence {
        sequence: String,
        target: String,
    },
}

impl std::fmt::Display for Warning {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Warning::UnusedInput { group, key } => {
                write!(
                    f,
                    "group \"{group}\": input `{key}` is declared but never used"
                )
            }
            Warning::UnwrittenOutput { group, slot } => {
                write!(
                    f,
                    "group \"{group}\": out slot `{slot}` is never written by an `as`"
                )
            }
            Warning::UnknownTool { group, tool } => write!(
                f,
                "group \"{group}\": tool `{tool}` is not registered right now; the group's `missing` policy decides at run time"
            ),
            Warning::NoFallback { group, tool } => write!(
                f,
                "group \"{group}\" degrades but `{tool}` has no `fallback`; its slot would get null"
            ),
            Warning::UnusedFallback {
                group,
                tool,
                missing,
            } => write!(
                f,
                "group \"{group}\": `{tool}` has a `fallback`, which only `missing: degrade` uses \
                 (this group's is {missing}); it is never used"
            ),
            Warning::MissingSequence { sequence, target } => write!(
                f,
                "sequence \"{sequence}\" calls #{target}, which does not exist yet; create it before running"
            ),
        }
    }
}

/// The result of checking one sequence.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct CheckReport {
    pub errors: Vec<CheckError>,
    pub warnings: Vec<Warning>,
}

/// Checks `seq`. `tools` answers which tools exist now and whether they
/// are parallel-safe; `None` treats every tool except the seq tools as
/// unknown (warnings only).
pub fn check_sequence(seq: &Sequence, tools: Option<&dyn ToolSource>) -> CheckReport {
    let mut report = CheckReport::default();
    for group in &seq.groups {
        check_group(seq, group, tools, &mut report);
    }
    check_group_cycles(seq, &mut report);
    report
}

/// Refuses groups that call each other round through `seq_call` /
/// `seq_when_call` (a group calling itself is refused with its step).
fn check_group_cycles(seq: &Sequence, report: &mut CheckReport) {
    let graph: BTreeMap<String, Vec<String>> = seq
        .groups
        .iter()
        .map(|group| {
            let called = group
                .tools
                .iter()
                .filter(|step| SEQ_TOOLS.contains(&step.tool.as_str()))
                .filter_map(|step| step.args.get("target")?.as_str())
                .filter(|target| !target.starts_with('#') && *target != group.name)
                .map(str::to_owned)
                .collect();
            (group.name.clone(), called)
        })
        .collect();
    // One report per cycle, from its first group in declaration order.
    let mut reported: Vec<String> = Vec::new();
    for group in &seq.groups {
        if reported.contains(&group.name) {
            continue;
        }
        if let Some(cycle) = find_cycle(&graph, &group.name) {
            reported.extend(cycle.iter().cloned());
            report.errors.push(CheckError::GroupCycle {
                path: cycle.join(" → "),
            });
        }
    }
}

fn check_group(
    seq: &Sequence,
    group: &Group,
    tools: Option<&dyn ToolSource>,
    report: &mut CheckReport,
) {
    let g = group.name.clone();
    let inputs = keys_or_none(group.inputs.keys());
    let outputs = keys_or_none(group.outputs.keys());
    let mut used_inputs: Vec<String> = Vec::new();
    let mut writers: BTreeMap<&str, usize> = BTreeMap::new();

    match cond::parse(&group.when) {
        Ok(expr) => {
            for key in cond::referenced_keys(&expr) {
                if !group.inputs.contains_key(&key) {
                    report.errors.push(CheckError::UndeclaredArg {
                        group: g.clone(),
                        place: "`when`".into(),
                        arg: key.clone(),
                        inputs: inputs.clone(),
                    });
                }
                used_inputs.push(key);
            }
        }
        Err(error) => report.errors.push(CheckError::BadCondition {
            group: g.clone(),
            place: "`when`".into(),
            error,
        }),
    }
    if group.on_error == OnError::Retry && group.retries == 0 {
        report
            .errors
            .push(CheckError::RetryWithoutRetries { group: g.clone() });
    }
    if group.on_error != OnError::Retry && group.retries > 0 {
        report.errors.push(CheckError::RetriesWithoutRetry {
            group: g.clone(),
            retries: group.retries,
        });
    }

    for (i, step) in group.tools.iter().enumerate() {
        let index = i + 1;
        if is_forbidden(&step.tool) {
            report.errors.push(CheckError::ForbiddenTool {
                group: g.clone(),
                tool: step.tool.clone(),
            });
        }
        if let Some(slot) = &step.slot {
            if group.outputs.contains_key(slot) {
                *writers.entry(slot.as_str()).or_default() += 1;
            } else {
                report.errors.push(CheckError::UndeclaredSlot {
                    group: g.clone(),
                    index,
                    tool: step.tool.clone(),
                    slot: slot.clone(),
                    outputs: outputs.clone(),
                });
            }
        }
        for arg in args_references(step) {
            if !group.inputs.contains_key(&arg) {
                report.errors.push(CheckError::UndeclaredArg {
                    group: g.clone(),
                    place: format!("tool #{index} ({}) args", step.tool),
                    arg: arg.clone(),
                    inputs: inputs.clone(),
                });
            }
            used_inputs.push(arg);
        }
        if step.is_seq_call() {
            check_target(seq, group, index, step, report);
        }
        if group.missing == MissingPolicy::Degrade && step.slot.is_some() && step.fallback.is_none()
        {
            report.warnings.push(Warning::NoFallback {
                group: g.clone(),
                tool: step.tool.clone(),
            });
        }
        if group.missing != MissingPolicy::Degrade && step.fallback.is_some() {
            report.warnings.push(Warning::UnusedFallback {
                group: g.clone(),
                tool: step.tool.clone(),
                missing: group.missing.as_str().to_owned(),
            });
        }
    }

    for (slot, count) in &writers {
        let is_array = group.outputs.get(*slot).is_some_and(|t| t.is_array());
        if *count > 1 && !is_array {
            report.errors.push(CheckError::SlotWrittenTwice {
                group: g.clone(),
                slot: (*slot).to_owned(),
                writers: *count,
            });
        }
    }

    check_parallel_safety(group, tools, report);

    for key in group.inputs.keys() {
        if !used_inputs.contains(key) {
            report.warnings.push(Warning::UnusedInput {
                group: g.clone(),
                key: key.clone(),
            });
        }
    }
    for slot in group.outputs.keys() {
        if !writers.contains_key(slot.as_str()) {
            report.warnings.push(Warning::UnwrittenOutput {
                group: g.clone(),
                slot: slot.clone(),
            });
        }
    }
}

fn check_parallel_safety(group: &Group, tools: Option<&dyn ToolSource>, report: &mut CheckReport) {
    let mut first_unsafe: Option<&str> = None;
    for step in &group.tools {
        let safe = if SEQ_TOOLS.contains(&step.tool.as_str()) {
            Some(false)
        } else {
            tools
                .and_then(|t| t.definition(&step.tool))
                .map(|def| def.runs_in_parallel())
        };
        match safe {
            None => {
                if !is_forbidden(&step.tool) {
                    report.warnings.push(Warning::UnknownTool {
                        group: group.name.clone(),
                        tool: step.tool.clone(),
                    });
                }
            }
            Some(false) if first_unsafe.is_none() => first_unsafe = Some(&step.tool),
            Some(_) => {}
        }
    }
    let Some(tool) = first_unsafe else { return };
    if group.tools.len() < 2 {
        return;
    }
    if group.parallel {
        report.errors.push(CheckError::UnsafeInParallel {
            group: group.name.clone(),
            tool: tool.to_owned(),
        });
    } else if !group.unsafe_serial {
        report.errors.push(CheckError::UndeclaredSerial {
            group: group.name.clone(),
            tool: tool.to_owned(),
        });
    }
}

fn check_target(
    seq: &Sequence,
    group: &Group,
    index: usize,
    step: &ToolStep,
    report: &mut CheckReport,
) {
    let bad = |detail: String| CheckError::BadTarget {
        group: group.name.clone(),
        index,
        tool: step.tool.clone(),
        detail,
    };
    if step.args.contains_key("sequence") {
        report.errors.push(bad(
            "inside a sequence `sequence` is not used: target a group of this sequence by name, or another sequence as \"#Name\"".into(),
        ));
    }
    match step.args.get("target") {
        // Filled in only at run time, where no cycle check can see it.
        Some(Value::String(target)) if target.contains("$args.") => report.errors.push(bad(format!(
            "target \"{target}\" is computed from $args; targets must be written out (a group of this sequence, or \"#Name\") so calls can be checked for cycles; use seq_when_call with a condition to choose between written-out targets"
        ))),
        Some(Value::String(target)) if target.starts_with('#') => {
            if target.len() == 1 {
                report
                    .errors
                    .push(bad("target \"#\" names no sequence; write \"#Name\"".into()));
            } else if let Err(error) = crate::store::check_name(&target[1..]) {
                // No sequence can ever have that name: every run would fail.
                report.errors.push(bad(format!("target \"{target}\": {error}")));
            }
        }
        Some(Value::String(target)) => {
            if target == &group.name {
                report.errors.push(bad(format!(
                    "target \"{target}\" is this group itself; a group cannot call itself"
                )));
            } else if seq.group(target).is_none() {
                let names: Vec<&str> = seq.groups.iter().map(|g| g.name.as_str()).collect();
                report.errors.push(bad(format!(
                    "target \"{target}\" is not a group of this sequence (groups: {}); to run another sequence write \"#{target}\"",
                    names.join(", ")
                )));
            }
        }
        _ => report.errors.push(bad(
            "needs a string `target`: a group of this sequence, or \"#Name\" for another sequence"
                .into(),
        )),
    }
    if step.tool == SEQ_WHEN_CALL {
        match step.args.get("when") {
            Some(Value::String(when)) => match cond::parse(when) {
                Ok(expr) => {
                    // The call's args are known here when written out as
                    // an object (none given = none passed).
                    let passed = match step.args.get("args") {
                        None | Some(Value::Null) => Some(Vec::new()),
                        Some(Value::Object(map)) => Some(map.keys().cloned().collect()),
                        Some(_) => None,
                    };
                    for arg in cond::referenced_keys(&expr) {
                        if let Some(passed) = passed.as_ref().filter(|p| !p.contains(&arg)) {
                            report.errors.push(CheckError::WhenArgNotPassed {
                                group: group.name.clone(),
                                index,
                                arg,
                                passed: keys_or_none(passed.iter()),
                            });
                        }
                    }
                }
                Err(error) => report.errors.push(CheckError::BadCondition {
                    group: group.name.clone(),
                    place: format!("tool #{index} (seq_when_call) `when`"),
                    error,
                }),
            },
            _ => report
                .errors
                .push(bad("needs a string `when` condition".into())),
        }
    }
}

/// The `$args.K` keys a step's arguments use (a `seq_when_call`'s own
/// `when` is about the call's args, not the group's, and is left out).
pub fn args_references(step: &ToolStep) -> Vec<String> {
    let mut keys = Vec::new();
    for (name, value) in &step.args {
        if step.tool == SEQ_WHEN_CALL && name == "when" {
            continue;
        }
        collect_refs(value, &mut keys);
    }
    keys.sort();
    keys.dedup();
    keys
}

fn collect_refs(value: &Value, keys: &mut Vec<String>) {
    match value {
        Value::String(s) => keys.extend(crate::subst::references(s).map(str::to_owned)),
        Value::Array(items) => items.iter().for_each(|v| collect_refs(v, keys)),
        Value::Object(map) => map.values().for_each(|v| collect_refs(v, keys)),
        _ => {}
    }
}

fn keys_or_none<'a>(keys: impl Iterator<Item = &'a String>) -> String {
    let keys: Vec<&str> = keys.map(String::as_str).collect();
    if keys.is_empty() {
        "(none)".to_owned()
    } else {
        keys.join(", ")
    }
}
