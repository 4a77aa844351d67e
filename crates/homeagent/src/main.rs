//! The `homeagent` program. Each subcommand lives in its own module; this
//! file only parses the command line and dispatches.

mod catalog;
mod cli;
mod demo;
mod mock_llm;

use clap::Parser;

use crate::cli::{Cli, Command};

// The kernel is allocation-bound (fragments, JSON values); mimalloc halves
// the assembler's cost against the system allocator (docs/BENCHMARKS.md).
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    let mut out = std::io::stdout().lock();
    match cli.command {
        Command::Demo(args) => {
            let options = demo::DemoOptions {
                tool_sleep_ms: args.tool_sleep_ms,
            };
            demo::run(&options, &mut out).await
        }
        Command::Tools(args) => catalog::print_tools(args.json, &mut out),
        Command::MockLlm(args) => mock_llm::run(args, &mut out).await,
    }
}
