//! `homeagent adapter check`: the Lua adapter self-check, for people writing
//! an adapter for a provider with an odd wire format.

use std::io::Write;

use anyhow::{Context, bail};
use homeagent_llm::LuaAdapter;
use homeagent_llm::lua::check::{CheckWire, check_adapter};

use crate::cli::{AdapterCheckArgs, CheckWireArg};

pub fn check(args: &AdapterCheckArgs, out: &mut impl Write) -> anyhow::Result<()> {
    let adapter = LuaAdapter::load(&args.file)
        .with_context(|| format!("cannot load the adapter {}", args.file.display()))?;
    let wire = match args.wire {
        CheckWireArg::Openai => CheckWire::Openai,
        CheckWireArg::Anthropic => CheckWire::Anthropic,
    };
    let report = check_adapter(adapter, wire);
    writeln!(out, "adapter check: {}", report.adapter)?;
    for outcome in &report.outcomes {
        match &outcome.problem {
            None => writeln!(out, "  ok    {}: came out intact", outcome.name)?,
            Some(problem) => writeln!(out, "  FAIL  {}: {problem}", outcome.name)?,
        }
    }
    if !report.passed() {
        bail!(
            "the adapter {} failed its check (see above)",
            args.file.display()
        );
    }
    Ok(())
}
