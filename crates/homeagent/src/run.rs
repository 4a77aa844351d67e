//! `homeagent run "PROMPT"`: one input, its reply streamed; with `--json`,
//! one frame per line for programs.

use std::io::Write;
use std::process::ExitCode;

use homeagent_agent::{BuildOptions, Frame, Submission};
use homeagent_tools::Approval;

use crate::cli::{GlobalArgs, RunArgs};
use crate::interrupts::{INTERRUPTED, Interrupts};
use crate::setup;
use crate::view::TextView;

pub async fn run(args: RunArgs, global: &GlobalArgs) -> anyhow::Result<ExitCode> {
    let loaded = setup::load(global)?;
    let mut options = BuildOptions {
        approval: if args.yes {
            Approval::Granted
        } else {
            Approval::Refused
        },
        ..BuildOptions::default()
    };
    if args.json {
        // Stdout holds only the frames, a JSON value a line: what the agent
        // sends to the console goes to stderr.
        options.console = std::sync::Arc::new(homeagent_tools::ConsoleChannel::with_writer(
            std::sync::Arc::new(std::sync::Mutex::new(std::io::stderr())),
        ));
    }
    let agent = setup::agent(&loaded, options)?;
    setup::mcp_started(&agent).await;
    // On stderr, which never mixes with `--json`'s lines: a program reading
    // them must learn too that the answers are the offline demo's.
    for notice in &agent.notices {
        eprintln!("note: {notice}");
    }
    let mut interrupts = Interrupts::new()?;
    let answered = answer(&agent, args, &mut interrupts).await;
    if matches!(answered, Ok(Answered::Abandoned)) {
        // A second Ctrl-C: the person wants out now. MCP servers are
        // killed with the process (`kill_on_drop`), not closed.
        return Ok(ExitCode::from(INTERRUPTED));
    }
    tokio::select! {
        () = setup::mcp_stopped(&agent) => {}
        () = interrupts.next() => return Ok(ExitCode::from(INTERRUPTED)),
    }
    answered.map(|answered| match answered {
        Answered::Ended(code) => code,
        Answered::Abandoned => ExitCode::from(INTERRUPTED),
    })
}

/// How [`answer`] ended.
enum Answered {
    /// The input's terminal frame came, with this exit code.
    Ended(ExitCode),
    /// A second Ctrl-C came before it.
    Abandoned,
}

/// Submits the prompt and shows its frames until the terminal one.
async fn answer(
    agent: &homeagent_agent::Agent,
    args: RunArgs,
    interrupts: &mut Interrupts,
) -> anyhow::Result<Answered> {
    let session = args.session.unwrap_or_else(|| setup::new_session_id("run"));
    let mut frames = agent.scheduler.submit(Submission {
        session: session.clone(),
        agent: args.agent,
        text: args.prompt,
        interrupt: false,
        check_duplicate: true,
    });
    let mut view = TextView::default();
    let mut stdout = std::io::stdout();
    let mut stop_sent = false;
    loop {
        let frame = tokio::select! {
            frame = frames.recv() => frame,
            () = interrupts.next() => {
                if stop_sent {
                    return Ok(Answered::Abandoned);
                }
                // Ctrl-C stops the input (tools included); its terminal
                // frame still comes. Another press leaves at once.
                stop_sent = true;
                agent.scheduler.stop(&session);
                continue;
            }
        };
        let Some(frame) = frame else {
            anyhow::bail!("the scheduler ended without answering the input");
        };
        let terminal = frame.is_terminal();
        let code = match &frame {
            Frame::Response { .. } => ExitCode::SUCCESS,
            _ => ExitCode::FAILURE,
        };
        if args.json {
            writeln!(stdout, "{}", serde_json::to_string(&frame)?)?;
        } else {
            view.show(&frame, &mut stdout)?;
        }
        stdout.flush()?;
        if terminal {
            return Ok(Answered::Ended(code));
        }
    }
}
