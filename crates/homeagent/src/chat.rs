//! `homeagent chat`: an interactive session.
//!
//! Lines typed are inputs; `/stop`, `/tools`, `/new`, `/quit` are commands.
//! Ctrl-C, or `/stop` typed while a turn runs, stops the current turn
//! (running tools included), not the program. Other lines typed while a
//! turn runs wait their turn as the next inputs (type-ahead), `/quit` and
//! the end of input included. Tools listed in `tools.require_approval` ask
//! here first: the first line typed *after* the question answers it (y/n);
//! a line typed before it was shown never does, so a "yes" meant for the
//! model cannot let a tool run unseen.

use std::collections::VecDeque;
use std::io::Write;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::{Duration, Instant};

use homeagent_agent::{BuildOptions, Frame, Submission};
use homeagent_core::{ToolEvent, ToolSource};
use homeagent_tools::{Approval, Approver};
use serde_json::Value;
use tokio::sync::{mpsc, oneshot};

use crate::cli::{ChatArgs, GlobalArgs};
use crate::interrupts::Interrupts;
use crate::setup;
use crate::view::TextView;

/// A question for the person, answered by the next line typed.
struct Question {
    prompt: String,
    answer: oneshot::Sender<bool>,
}

struct TerminalApprover {
    questions: mpsc::UnboundedSender<Question>,
}

impl Approver for TerminalApprover {
    fn approve(
        &self,
        agent: &str,
        tool: &str,
        args: &Value,
    ) -> std::pin::Pin<Box<dyn std::future::Future<Output = bool> + Send + 'static>> {
        let (answer, reply) = oneshot::channel();
        let prompt = format!("agent {agent} wants to run {tool} {args}. Allow? [y/N] ");
        let sent = self.questions.send(Question { prompt, answer }).is_ok();
        // No terminal to ask (the chat ended): the answer is no.
        Box::pin(async move { sent && reply.await.unwrap_or(false) })
    }
}

/// Reads stdin lines on a thread of its own (stdin has no async reader
/// that can be cancelled); `None` at end of input.
fn stdin_lines() -> mpsc::UnboundedReceiver<String> {
    let (tx, rx) = mpsc::unbounded_channel();
    std::thread::spawn(move || {
        use std::io::BufRead as _;
        let mut stdin = std::io::stdin().lock();
        let mut line = Vec::new();
        loop {
            line.clear();
            // Bytes, read as UTF-8 as well as they can be: a line from a
            // Latin-1 terminal is still a line (`read_line` failed on it,
            // and the chat ended there, every later line lost).
            match stdin.read_until(b'\n', &mut line) {
                Ok(0) | Err(_) => return,
                Ok(_) => {
                    let text = String::from_utf8_lossy(&line);
                    if tx
                        .send(text.trim_end_matches(['\n', '\r']).to_owned())
                        .is_err()
                    {
                        return;
                    }
                }
            }
        }
    });
    rx
}

const SPINNER: [char; 4] = ['|', '/', '-', '\\'];

pub async fn run(args: ChatArgs, global: &GlobalArgs) -> anyhow::Result<ExitCode> {
    let loaded = setup::load(global)?;
    let (questions_tx, mut questions) = mpsc::unbounded_channel();
    let approver = Arc::new(TerminalApprover {
        questions: questions_tx,
    });
    let agent = setup::agent(
        &loaded,
        BuildOptions {
            approval: Approval::Ask(approver),
            ..BuildOptions::default()
        },
    )?;
    // Refused up front, as `run` refuses them: a conversation whose every
    // input fails is no use. The MCP servers the build started are closed
    // on the way out, as on every other.
    let refused = if agent.runtime.tools().gate().agent(&args.agent).is_none() {
        Some(anyhow::anyhow!(
            "unknown agent `{}`; declare it in [[agents]] or use `main`",
            args.agent
        ))
    } else {
        args.session
            .as_deref()
            .and_then(|session| homeagent_agent::store::validate_session_id(session).err())
            .map(anyhow::Error::from)
    };
    if let Some(refused) = refused {
        setup::mcp_stopped(&agent).await;
        return Err(refused);
    }
    setup::mcp_started(&agent).await;
    // Every way out of the conversation passes here, so the MCP servers
    // are closed gracefully whichever it was.
    let talked: anyhow::Result<ExitCode> = async {
        let mut out = std::io::stdout();
        for notice in &agent.notices {
            writeln!(out, "note: {notice}")?;
        }
        let mut session = args
            .session
            .unwrap_or_else(|| setup::new_session_id("chat"));
        writeln!(
            out,
            "HomeAgent chat (session {session}). /stop /tools /new /quit; Ctrl-C stops a turn."
        )?;
        let mut lines = stdin_lines();
        let mut interrupts = Interrupts::new()?;
        // Lines typed while a turn ran: the next inputs, in order.
        let mut typed_ahead: VecDeque<String> = VecDeque::new();
        let mut input_ended = false;
        let mut pending_question: Option<Question> = None;
        loop {
            write!(out, "> ")?;
            out.flush()?;
            let line = if let Some(line) = typed_ahead.pop_front() {
                writeln!(out, "{line}")?;
                Some(line)
            } else if input_ended {
                None
            } else {
                tokio::select! {
                    line = lines.recv() => line,
                    () = interrupts.next() => {
                        // Ctrl-C belongs to turns; at the prompt it only explains.
                        writeln!(out, "\n(nothing is running; /quit or Ctrl-D leaves)")?;
                        continue;
                    }
                }
            };
            let Some(line) = line else {
                return Ok(ExitCode::SUCCESS);
            };
            let input = line.trim();
            match input {
                "" => continue,
                "/quit" | "/exit" => return Ok(ExitCode::SUCCESS),
                "/stop" => {
                    let n = agent.scheduler.stop(&session);
                    writeln!(out, "(stopped {n} input(s))")?;
                    continue;
                }
                "/new" => {
                    session = setup::new_session_id("chat");
                    writeln!(out, "(new session {session})")?;
                    continue;
                }
                "/tools" => {
                    // What this agent can reach: MCP tools too, its denied
                    // ones not.
                    let tools = agent.runtime.tools();
                    let visible = tools
                        .definitions()
                        .into_iter()
                        .filter(|def| tools.gate().visible(&args.agent, &def.name));
                    for def in visible {
                        let how = if def.runs_in_parallel() {
                            "parallel-safe"
                        } else {
                            "serial"
                        };
                        writeln!(
                            out,
                            "  {} ({how}): {}",
                            def.name,
                            first_line(&def.description)
                        )?;
                    }
                    continue;
                }
                _ => {}
            }
            let mut frames = agent.scheduler.submit(Submission {
                session: session.clone(),
                agent: args.agent.clone(),
                text: input.to_owned(),
                interrupt: false,
                // A person typing the same line again means it again; the
                // dedup window is for channels that deliver twice.
                check_duplicate: false,
            });
            let mut view = TextView::default();
            let mut tools_running = 0usize;
            let mut spin = 0usize;
            let mut ticker = tokio::time::interval(Duration::from_millis(120));
            let started = Instant::now();
            loop {
                tokio::select! {
                    frame = frames.recv() => {
                        let Some(frame) = frame else { break };
                        if tools_running > 0 {
                            // Clear the spinner before printing over it.
                            write!(out, "\r   \r")?;
                        }
                        match &frame {
                            Frame::ToolCall(event) if matches!(**event, ToolEvent::Start { .. }) => tools_running += 1,
                            Frame::ToolCall(event) if matches!(**event, ToolEvent::End { .. }) => {
                                tools_running = tools_running.saturating_sub(1);
                            }
                            _ => {}
                        }
                        view.show(&frame, &mut out)?;
                        out.flush()?;
                        if frame.is_terminal() {
                            if let Frame::Response { turns, usage, .. } = &frame {
                                writeln!(
                                    out,
                                    "({} model request(s), {} tokens, {:.1} s)",
                                    turns,
                                    usage.total_tokens,
                                    started.elapsed().as_secs_f64()
                                )?;
                            }
                            break;
                        }
                    }
                    question = questions.recv(), if pending_question.is_none() => {
                        // A call stopped while its question waited in the
                        // queue no longer wants an answer.
                        if let Some(question) = question.filter(|q| !q.answer.is_closed()) {
                            // Whatever was typed before the question is on
                            // the screen was not typed as its answer.
                            while let Ok(line) = lines.try_recv() {
                                typed_ahead.push_back(line);
                            }
                            if input_ended || lines.is_closed() && lines.is_empty() {
                                input_ended = true;
                                writeln!(out, "\r   \r{}(no more input to answer with: no)", question.prompt)?;
                                let _ = question.answer.send(false);
                            } else {
                                write!(out, "\r   \r{}", question.prompt)?;
                                pending_question = Some(question);
                            }
                            out.flush()?;
                        }
                    }
                    line = lines.recv(), if !input_ended => {
                        let asked = pending_question.take().filter(|q| !q.answer.is_closed());
                        match (line, asked) {
                            (Some(line), Some(question)) => {
                                let yes = matches!(line.trim().to_ascii_lowercase().as_str(), "y" | "yes");
                                let _ = question.answer.send(yes);
                            }
                            (Some(line), None) if line.trim() == "/stop" => {
                                let n = agent.scheduler.stop(&session);
                                writeln!(out, "\n(stopped {n} input(s))")?;
                            }
                            (Some(line), None) => typed_ahead.push_back(line),
                            (None, asked) => {
                                // Input ended: nobody can answer any more,
                                // and the chat ends once what was typed ran.
                                input_ended = true;
                                if let Some(question) = asked {
                                    let _ = question.answer.send(false);
                                }
                            }
                        }
                    }
                    () = interrupts.next() => {
                        // The stop ends the call that asked: what is typed
                        // next is not its answer.
                        pending_question = None;
                        let n = agent.scheduler.stop(&session);
                        writeln!(out, "\n(Ctrl-C: stopping the turn; {n} input(s) cancelled)")?;
                    }
                    _ = ticker.tick(), if tools_running > 0 && pending_question.is_none() => {
                        spin = (spin + 1) % SPINNER.len();
                        write!(out, "\r {} ", SPINNER[spin])?;
                        out.flush()?;
                    }
                }
            }
            // The turn is over: a question it left (stopped while asking)
            // is dead, and the next line is a new input, not its answer.
            pending_question = None;
            while questions.try_recv().is_ok() {}
        }
    }
    .await;
    setup::mcp_stopped(&agent).await;
    talked
}

fn first_line(text: &str) -> &str {
    text.lines().next().unwrap_or("")
}
