//! The `homeagent` program. Each subcommand lives in its own module; this
//! file only parses the command line and dispatches.

mod adapter;
mod bench_cmd;
mod catalog;
mod chat;
mod cli;
mod config_cmd;
mod demo;
mod interrupts;
mod mcp_serve;
mod mock_llm;
mod run;
mod seq_cmd;
mod serve;
mod setup;
mod view;
mod waiter_cmd;

use clap::Parser;

use homeagent_agent::config::RuntimeSection;

use crate::cli::{Cli, Command};

// The kernel is allocation-bound (fragments, JSON values); mimalloc halves
// the assembler's cost against the system allocator (docs/BENCHMARKS.md).
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> std::process::ExitCode {
    let hardened = keep_secrets_from_children();
    no_transparent_huge_pages();
    let cli = Cli::parse();
    // Logs go to stderr only when RUST_LOG asks for them (stdout carries
    // replies and `--json` frames). Nothing logged ever holds a key.
    if let Ok(filter) = tracing_subscriber::EnvFilter::try_from_default_env() {
        tracing_subscriber::fmt()
            .with_env_filter(filter)
            .with_writer(std::io::stderr)
            .with_ansi(false)
            .init();
    }
    if let Err(error) = hardened {
        eprintln!(
            "note: cannot make the process non-dumpable ({error}); programs it runs as the \
             same user can read its environment, API keys included"
        );
    }
    let threads = runtime_section(&cli);
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(usize::from(threads.worker_threads))
        .max_blocking_threads(usize::from(threads.blocking_threads))
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(error) => {
            eprintln!("error: cannot start the async runtime: {error}");
            return std::process::ExitCode::FAILURE;
        }
    };
    let signals = signals_ended_here(&cli.command);
    let ran = runtime.block_on(async {
        match signals {
            Some(interrupt) => ending_on_signals(interrupt, run(cli)).await,
            None => run(cli).await,
        }
    });
    // Dropped before the process exits, so that what the command's tasks
    // started (`cmd_run`'s programs, stdio MCP servers) is killed with them.
    drop(runtime);
    match ran {
        Ok(code) => code,
        Err(error) => {
            // One line with the whole cause chain ("cannot load the adapter
            // x.lua: cannot read adapter x.lua: No such file"), never a stack
            // trace: the message is for the person who typed the command.
            eprintln!("error: {}", one_line(&error));
            std::process::ExitCode::FAILURE
        }
    }
}

/// Which termination signals `command` is ended on by [`ending_on_signals`]
/// (`Some(true)`: SIGINT too), or `None` for a command that handles its own
/// (`serve`, `mock-llm` and `waiter` shut down gracefully; `bench` stops
/// what it started).
fn signals_ended_here(command: &Command) -> Option<bool> {
    match command {
        Command::Serve(_) | Command::MockLlm(_) | Command::Waiter(_) | Command::Bench(_) => None,
        // Their Ctrl-C stops the input first (`interrupts`).
        Command::Run(_) | Command::Chat(_) => Some(false),
        _ => Some(true),
    }
}

/// Runs `work` until it ends, or until SIGTERM, SIGHUP or (with
/// `interrupt`) SIGINT comes: then `work` is dropped and the exit code is
/// 128 + the signal's number. The programs a command's tools start lead
/// their own process groups, so the terminal's signal never reaches them,
/// and a process the signal itself ends runs no destructor: they were left
/// running (a `seq run` stopped with Ctrl-C, a `run` a job's timeout ended).
/// Ended here, everything the command held is dropped, and they with it.
async fn ending_on_signals(
    interrupt: bool,
    work: impl std::future::Future<Output = anyhow::Result<std::process::ExitCode>>,
) -> anyhow::Result<std::process::ExitCode> {
    use tokio::signal::unix::{SignalKind, signal};
    let mut terminate = signal(SignalKind::terminate())?;
    let mut hangup = signal(SignalKind::hangup())?;
    let mut interrupted = if interrupt {
        Some(signal(SignalKind::interrupt())?)
    } else {
        None
    };
    let interrupts = async {
        match interrupted.as_mut() {
            Some(signal) => {
                signal.recv().await;
            }
            None => std::future::pending::<()>().await,
        }
    };
    tokio::select! {
        done = work => done,
        _ = terminate.recv() => Ok(std::process::ExitCode::from(128 + 15)),
        _ = hangup.recv() => Ok(std::process::ExitCode::from(128 + 1)),
        () = interrupts => Ok(std::process::ExitCode::from(interrupts::INTERRUPTED)),
    }
}

/// `error` and its causes joined by `: `, each cause said once: many of
/// our error types put their cause's text in their own message (so that a
/// log line that shows only the message still says it) and also name it
/// as their source, and a cause whose text the line already ends with is
/// left out.
fn one_line(error: &anyhow::Error) -> String {
    let mut line = String::new();
    for cause in error.chain() {
        let text = cause.to_string();
        if line.is_empty() {
            line = text;
        } else if !line.ends_with(&text) {
            line.push_str(": ");
            line.push_str(&text);
        }
    }
    line
}

/// The runtime's threads: `[runtime]` for a command that runs the agent
/// from the config, the defaults for the others (see `RuntimeSection` for
/// why one worker and at most eight blocking threads). The config is read here, before the
/// runtime exists, and again by the command; a config that does not load
/// gets the default here and its error from the command, which reports it
/// with the command's own context.
fn runtime_section(cli: &Cli) -> RuntimeSection {
    let runs_agent = matches!(
        cli.command,
        Command::Serve(_)
            | Command::Chat(_)
            | Command::Run(_)
            | Command::McpServe(_)
            | Command::Seq(cli::SeqCommand::Run { .. })
    );
    if runs_agent {
        setup::load(&cli.global).map_or_else(|_| RuntimeSection::default(), |l| l.config.runtime)
    } else {
        RuntimeSection::default()
    }
}

/// Makes the process non-dumpable. Programs it runs (`cmd_run`, hooks,
/// MCP servers) run as the same user, and a same-user process can read
/// `/proc/<pid>/environ` of a dumpable one, where the API keys are (`ps
/// eww` prints them too); clearing a variable does not remove it from
/// there. A non-dumpable process's `/proc` files belong to root, so only
/// root can read them. It also means no core dumps (which would hold the
/// keys too) and no same-user debugger attach.
fn keep_secrets_from_children() -> Result<(), String> {
    #[cfg(target_os = "linux")]
    {
        nix::sys::prctl::set_dumpable(false).map_err(|e| e.to_string())
    }
    #[cfg(not(target_os = "linux"))]
    {
        Ok(())
    }
}

/// Turns transparent huge pages off for this process (`PR_SET_THP_DISABLE`,
/// which since Linux 4.13 also covers the mappings made before it; Redis
/// and MongoDB advise against THP for the same reason). mimalloc asks the
/// kernel for huge pages on its arenas, and then every 2 MiB region it
/// touches fresh is a huge page the kernel zeroes whole, however little of
/// it is used: under a burst of sessions that zeroing was a third of
/// `serve`'s CPU and tripled its tail latency (docs/BENCHMARKS.md). The
/// agent's heap is small, and inputs that come one at a time ran no slower
/// without them. The flag is inherited by the programs it runs (tools,
/// hooks, MCP servers): they get ordinary pages too, the system default
/// for programs that do not ask for huge pages. Failing (an old kernel, a
/// seccomp filter) costs only that CPU, so it is not reported.
fn no_transparent_huge_pages() {
    #[cfg(target_os = "linux")]
    {
        let _ = nix::sys::prctl::set_thp_disable(true);
    }
}

async fn run(cli: Cli) -> anyhow::Result<std::process::ExitCode> {
    let global = cli.global;
    match cli.command {
        Command::Run(args) => return run::run(args, &global).await,
        Command::Chat(args) => return chat::run(args, &global).await,
        Command::Bench(args) => {
            return bench_cmd::run(args.quick, args.json, args.scale, args.out, args.peers).await;
        }
        Command::McpServe(args) => {
            let loaded = setup::load(&global)?;
            // Stdin is the MCP stream: nobody can be asked to approve.
            let approval = if args.yes {
                homeagent_tools::Approval::Granted
            } else {
                homeagent_tools::Approval::Refused
            };
            let options = homeagent_agent::BuildOptions {
                approval,
                // Stdout belongs to the protocol: the console channel
                // writes to stderr instead.
                console: std::sync::Arc::new(homeagent_tools::ConsoleChannel::with_writer(
                    std::sync::Arc::new(std::sync::Mutex::new(std::io::stderr())),
                )),
                ..homeagent_agent::BuildOptions::default()
            };
            let agent = setup::agent(&loaded, options)?;
            setup::mcp_started(&agent).await;
            for notice in &agent.notices {
                eprintln!("note: {notice}");
            }
            let served = mcp_serve::run(&agent).await;
            setup::mcp_stopped(&agent).await;
            served?;
            return Ok(std::process::ExitCode::SUCCESS);
        }
        Command::Serve(args) => {
            let loaded = setup::load(&global)?;
            let options = homeagent_agent::BuildOptions {
                // Only a server can have devices bound.
                devices: true,
                ..homeagent_agent::BuildOptions::default()
            };
            let agent = setup::agent(&loaded, options)?;
            let served = serve::run(&agent, &loaded, args.listen).await;
            setup::mcp_stopped(&agent).await;
            served?;
            return Ok(std::process::ExitCode::SUCCESS);
        }
        Command::Waiter(args) => return waiter_cmd::run(args, &global).await,
        Command::Seq(cli::SeqCommand::Create { file }) => {
            // Checked against every tool a run would see, the MCP servers'
            // included: a parallel group holding one of their tools that
            // must not overlap is refused here, not found out at run time.
            let loaded = setup::load(&global)?;
            let built = setup::agent(&loaded, homeagent_agent::BuildOptions::default())?;
            setup::mcp_started(&built).await;
            let created = {
                let mut out = std::io::stdout().lock();
                seq_cmd::create(&built, &file, &mut out)
            };
            setup::mcp_stopped(&built).await;
            created?;
            return Ok(std::process::ExitCode::SUCCESS);
        }
        Command::Seq(cli::SeqCommand::Run { name, args, agent }) => {
            let loaded = setup::load(&global)?;
            let built = setup::agent(&loaded, homeagent_agent::BuildOptions::default())?;
            setup::mcp_started(&built).await;
            let ran = {
                let mut out = std::io::stdout().lock();
                seq_cmd::run(&built, &name, &args, &agent, &mut out).await
            };
            setup::mcp_stopped(&built).await;
            return ran;
        }
        _ => {}
    }
    let mut out = std::io::stdout().lock();
    match cli.command {
        Command::Demo(args) => {
            let options = demo::DemoOptions {
                tool_sleep_ms: args.tool_sleep_ms,
            };
            demo::run(&options, &mut out).await
        }
        Command::Tools(args) => catalog::print_tools(args.json, &global, &mut out).await,
        Command::MockLlm(args) => mock_llm::run(args, &mut out).await,
        Command::Adapter(cli::AdapterCommand::Check(args)) => adapter::check(&args, &mut out),
        Command::Config(cli::ConfigCommand::Check) => config_cmd::check(&global, &mut out),
        Command::Config(cli::ConfigCommand::Example) => config_cmd::example(&mut out),
        Command::Seq(command) => seq(command, &global, &mut out),
        Command::Run(_)
        | Command::Chat(_)
        | Command::Serve(_)
        | Command::McpServe(_)
        | Command::Bench(_)
        | Command::Waiter(_) => Ok(()),
    }
    .map(|()| std::process::ExitCode::SUCCESS)
}

fn seq(
    command: cli::SeqCommand,
    global: &cli::GlobalArgs,
    out: &mut dyn std::io::Write,
) -> anyhow::Result<()> {
    // The guide is fixed text: no config (or a broken one) stands in its way.
    if let cli::SeqCommand::Guide = command {
        return Ok(writeln!(out, "{}", homeagent_seq::help::GUIDE)?);
    }
    let loaded = setup::load(global)?;
    let data_dir = loaded.paths.data_dir.clone();
    match command {
        cli::SeqCommand::List => seq_cmd::list(&data_dir, out),
        cli::SeqCommand::Show { name } => seq_cmd::show(&data_dir, &name, out),
        cli::SeqCommand::Delete { name } => seq_cmd::delete(&data_dir, &name, out),
        // Handled before this match (the guide without the config; create
        // and run async, with the MCP servers started).
        cli::SeqCommand::Guide | cli::SeqCommand::Create { .. } | cli::SeqCommand::Run { .. } => {
            Ok(())
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)] // a panic in a test is a test failure

    #[cfg(target_os = "linux")]
    #[test]
    fn the_process_is_made_non_dumpable() {
        super::keep_secrets_from_children().unwrap();
        assert!(!nix::sys::prctl::get_dumpable().unwrap());
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn transparent_huge_pages_are_turned_off() {
        super::no_transparent_huge_pages();
        assert!(nix::sys::prctl::get_thp_disable().unwrap());
    }
}
