//! The `homeagent` program. Each subcommand lives in its own module; this
//! file only parses the command line and dispatches.

mod adapter;
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
async fn main() -> std::process::ExitCode {
    let cli = Cli::parse();
    match run(cli).await {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(error) => {
            // One line with the whole cause chain ("cannot load the adapter
            // x.lua: cannot read adapter x.lua: No such file"), never a stack
            // trace: the message is for the person who typed the command.
            eprintln!("error: {error:#}");
            std::process::ExitCode::FAILURE
        }
    }
}

async fn run(cli: Cli) -> anyhow::Result<()> {
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
        Command::Adapter(cli::AdapterCommand::Check(args)) => adapter::check(&args, &mut out),
    }
}
