//! The command line, as clap derive definitions. What each command does
//! lives in the module it names.

use clap::{Args, Parser, Subcommand};
use homeagent_mock_llm::DEFAULT_TOOL_SLEEP_MS;

/// HomeAgent: an agent kernel that runs the tool calls a language model asks
/// for, in parallel when that is safe, and always answers every call.
#[derive(Debug, Parser)]
#[command(name = "homeagent", version, arg_required_else_help = true)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Watch the kernel work: an offline scripted model sends a parallel
    /// batch, a serial batch and a cut-off call to the demo tools, and the
    /// output shows what ran at the same time, with timings.
    Demo(DemoArgs),
    /// List every registered tool with its source and how its calls are
    /// scheduled (parallel-safe or serial).
    Tools(ToolsArgs),
}

#[derive(Debug, Args)]
pub struct DemoArgs {
    /// How long the first demo_sleep call of a batch sleeps; call i sleeps
    /// this plus 5·i milliseconds.
    #[arg(
        long,
        value_name = "MS",
        default_value_t = DEFAULT_TOOL_SLEEP_MS,
        value_parser = clap::value_parser!(u64).range(0..=10_000)
    )]
    pub tool_sleep_ms: u64,
}

#[derive(Debug, Args)]
pub struct ToolsArgs {
    /// Print a JSON array of tool definitions (name, source, parallel_safe,
    /// serial, description, parameters, ...) instead of a table.
    #[arg(long)]
    pub json: bool,
}

#[cfg(test)]
mod tests {
    use clap::CommandFactory;

    use super::*;

    #[test]
    fn the_command_line_is_well_formed() {
        Cli::command().debug_assert();
    }

    #[test]
    fn demo_takes_a_bounded_sleep() {
        let cli = Cli::try_parse_from(["homeagent", "demo", "--tool-sleep-ms", "20"]).unwrap();
        assert!(matches!(
            cli.command,
            Command::Demo(DemoArgs { tool_sleep_ms: 20 })
        ));
        assert!(Cli::try_parse_from(["homeagent", "demo", "--tool-sleep-ms", "99999"]).is_err());
    }
}
