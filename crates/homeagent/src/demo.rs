//! `homeagent demo`: the kernel's whole loop, in process, against the
//! offline scripted model and the demo tools.
//!
//! For each input the loop does what an agent does with a real model:
//!
//! 1. append the user message and ask the model (the pairing check runs
//!    first: a history that breaks it is never sent);
//! 2. feed the model's stream through the [`StreamAssembler`];
//! 3. if the turn has calls, let the [`Executor`] run them (it decides
//!    parallel or serial) while an [`EventSink`] records when each call
//!    started and ended;
//! 4. append the assistant message and one tool message per call, and ask
//!    the model again for its final text.
//!
//! The scripted model's final text carries `executed=N max_in_flight=M`,
//! counted from the tool results, not from anything the kernel claims.

use std::collections::HashMap;
use std::io::Write;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::Context as _;
use homeagent_core::{
    AssembledTurn, BatchContext, BatchMode, CallStatus, ErrorReason, EventSink, Executor, Message,
    SerialReason, StreamAssembler, StreamEvent, ToolEvent, ToolOutcome, check_pairing,
    execution_order_section, remint_reused_ids,
};
use homeagent_mock_llm::script::{self, ScriptOptions};

use crate::catalog::Catalog;

/// Knobs of the demo.
#[derive(Debug, Clone)]
pub struct DemoOptions {
    /// `S` of the scripted model: call `i` of a batch sleeps `S + 5·i` ms.
    pub tool_sleep_ms: u64,
}

/// The inputs, in order, with what each one shows.
const STEPS: [(&str, &str); 4] = [
    (
        "!slowbatch4",
        "The model asks for four demo_sleep calls in one reply. demo_sleep is declared parallel-safe.",
    ),
    (
        "!serialbatch4",
        "The same four sleeps plus one demo_note call in the middle. demo_note writes, so it is not parallel-safe.",
    ),
    (
        "!truncate",
        "The model's reply is cut off by its output token limit in the middle of a call's arguments.",
    ),
    ("!text", "A plain text reply: no tools."),
];

/// Width of the timeline bars, in characters.
const TIMELINE_WIDTH: usize = 40;

/// Runs the demo, writing a report meant for a person to `out`.
pub async fn run(options: &DemoOptions, out: &mut dyn Write) -> anyhow::Result<()> {
    let (catalog, _demo) = Catalog::with_demo_tools()?;
    let recorder = Arc::new(Recorder::default());
    let executor = Executor::new(catalog.registry.clone()).with_events(recorder.clone());
    let script_options = ScriptOptions {
        tool_sleep_ms: options.tool_sleep_ms,
        ..ScriptOptions::default()
    };
    let mut model = Model {
        options: script_options,
        requests: 0,
        last_fragments: 0,
    };
    // The prompt section is generated from the executor's own rules; the
    // scripted model ignores it, a real model reads it.
    let mut history = vec![Message::system(format!(
        "You are HomeAgent's demo agent.\n\n{}",
        execution_order_section(&executor)
    ))];

    intro(out)?;
    for (step, (input, what)) in STEPS.iter().enumerate() {
        writeln!(out, "\n==> [{}/{}] user: {input}", step + 1, STEPS.len())?;
        say(out, "    ", what)?;
        history.push(Message::user(*input));
        let turn = model.ask(&mut history)?;
        if turn.calls.is_empty() {
            writeln!(
                out,
                "    model: no tool calls (finish_reason: {}); the text goes straight to the user:",
                finish_name(&turn)
            )?;
            say(out, "      | ", &turn.text)?;
            history.push(Message::Assistant(turn.message()));
            continue;
        }
        writeln!(
            out,
            "    model: {} tool call(s), streamed as {} interleaved fragments (finish_reason: {})",
            turn.calls.len(),
            model.last_fragments,
            finish_name(&turn)
        )?;

        let batch = BatchContext {
            batch_id: format!("demo-{}", step + 1),
            ..BatchContext::default()
        };
        let started = recorder.begin();
        let result = executor.run(&turn, &batch).await;
        let wall = started.elapsed();
        let events = recorder.take();

        say(
            out,
            "    kernel: ",
            &explain_mode(&result.mode, turn.calls.len()),
        )?;
        let rows = rows(&result.outcomes, &events);
        timeline(out, &rows, wall)?;
        timing_summary(out, &result.mode, &rows, wall)?;
        for (call, outcome) in turn.calls.iter().zip(&result.outcomes) {
            if call.argument_error.is_none() {
                continue;
            }
            say(
                out,
                "    ",
                &format!(
                    "Call {} ({}) was NOT executed: its arguments could not be used. \
                     Raw arguments as streamed:",
                    call.call.id, call.call.name
                ),
            )?;
            writeln!(out, "      {}", call.call.raw_arguments)?;
            say(
                out,
                "    ",
                "The model receives this tool result for it (and the call stays in the history \
                 with {} as its arguments, since providers require an object there):",
            )?;
            say(out, "      | ", &outcome.text)?;
        }

        history.extend(result.messages());
        let answer = model.ask(&mut history)?;
        writeln!(
            out,
            "    model, after reading the {} result(s):",
            result.outcomes.len()
        )?;
        say(out, "      | ", &answer.text)?;
        history.push(Message::Assistant(answer.message()));
    }

    writeln!(out)?;
    say(
        out,
        "",
        &format!(
            "Done: {} inputs, {} model requests; the pairing check passed before every request \
             (the history now holds {} messages).",
            STEPS.len(),
            model.requests,
            history.len()
        ),
    )?;
    // One line on purpose: it is the last thing a newcomer reads.
    writeln!(
        out,
        "Next: `homeagent chat` talks to the agent. To connect a real model, set OPENAI_API_KEY \
         (with OPENAI_BASE_URL for a compatible server), ANTHROPIC_API_KEY, GEMINI_API_KEY or \
         OLLAMA_HOST (HOMEAGENT_MODEL names the model), or add [[llm.sources]] to the config \
         (`homeagent config example`)."
    )?;
    Ok(())
}

fn intro(out: &mut dyn Write) -> anyhow::Result<()> {
    writeln!(
        out,
        "HomeAgent demo: the tool-call kernel against an offline scripted model.\n"
    )?;
    say(
        out,
        "",
        "Each input goes to the scripted model, which answers with tool calls streamed in \
         interleaved fragments, as real providers do. The kernel assembles the calls, decides \
         whether the batch may run in parallel, runs it against the demo tools (demo_sleep, \
         demo_echo, demo_note) and sends exactly one result per call back to the model. The \
         model then checks what really ran: executed=N counts the distinct done-tags of that \
         batch found in the results, and max_in_flight=M is the most demo_sleep calls the \
         tools themselves saw running at once.",
    )?;
    Ok(())
}

/// The scripted model behind the same checks a real provider gets.
struct Model {
    options: ScriptOptions,
    requests: usize,
    last_fragments: usize,
}

impl Model {
    /// One model request: check the history, get the stream, assemble it.
    fn ask(&mut self, history: &mut [Message]) -> anyhow::Result<AssembledTurn> {
        // Models reuse call ids across turns; a real loop re-mints them
        // before checking. The scripted model's ids are unique, so this is
        // a no-op here.
        remint_reused_ids(history);
        check_pairing(history).context(
            "internal error: the history breaks the tool-call pairing rule, so it was not sent \
             to the model (every call needs exactly one result, right after its turn)",
        )?;
        self.requests += 1;
        let scripted = script::respond(history, &self.options);
        self.last_fragments = scripted
            .events
            .iter()
            .filter(|e| matches!(e, StreamEvent::ToolCall(_)))
            .count();
        let mut assembler = StreamAssembler::new();
        for event in scripted.events {
            assembler.push(event);
        }
        Ok(assembler.finish())
    }
}

/// Records every tool event with its time since the batch started.
#[derive(Default)]
struct Recorder {
    state: Mutex<Recording>,
}

#[derive(Default)]
struct Recording {
    since: Option<Instant>,
    events: Vec<(Duration, ToolEvent)>,
}

impl Recorder {
    fn lock(&self) -> std::sync::MutexGuard<'_, Recording> {
        // A panic while recording cannot leave a half-pushed event.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Starts a batch: clears the events and returns the time zero.
    fn begin(&self) -> Instant {
        let mut state = self.lock();
        let now = Instant::now();
        state.since = Some(now);
        state.events.clear();
        now
    }

    fn take(&self) -> Vec<(Duration, ToolEvent)> {
        std::mem::take(&mut self.lock().events)
    }
}

impl EventSink for Recorder {
    fn emit(&self, event: ToolEvent) {
        let now = Instant::now();
        let mut state = self.lock();
        let at = state
            .since
            .map_or(Duration::ZERO, |since| now.saturating_duration_since(since));
        state.events.push((at, event));
    }
}

/// One call as the timeline shows it.
struct Row {
    index: usize,
    tool: String,
    status: String,
    start: Duration,
    end: Duration,
    duration_ms: u64,
    /// The handler was invoked (the call was not stopped at its arguments,
    /// its name or a hook).
    ran: bool,
}

fn rows(outcomes: &[ToolOutcome], events: &[(Duration, ToolEvent)]) -> Vec<Row> {
    let mut starts: HashMap<&str, Duration> = HashMap::new();
    let mut ends: HashMap<&str, (Duration, u64)> = HashMap::new();
    for (at, event) in events {
        match event {
            ToolEvent::Start { call_id, .. } => {
                starts.insert(call_id, *at);
            }
            ToolEvent::End {
                call_id,
                duration_ms,
                ..
            } => {
                ends.insert(call_id, (*at, *duration_ms));
            }
        }
    }
    outcomes
        .iter()
        .enumerate()
        .map(|(index, outcome)| {
            let id = outcome.call_id.as_str();
            let start = starts.get(id).copied().unwrap_or_default();
            let (end, duration_ms) = ends.get(id).copied().unwrap_or((start, 0));
            Row {
                index,
                tool: outcome.tool.clone(),
                status: status_label(outcome),
                start,
                end,
                duration_ms,
                ran: handler_ran(outcome),
            }
        })
        .collect()
}

fn status_label(outcome: &ToolOutcome) -> String {
    let status = match outcome.status() {
        CallStatus::Ok => "ok",
        CallStatus::Error => "error",
        CallStatus::Denied => "denied",
        CallStatus::Cancelled => "cancelled",
        CallStatus::Timeout => "timeout",
    };
    match &outcome.error {
        Some(error) if outcome.status() == CallStatus::Error => {
            format!("{status} ({})", error.reason)
        }
        _ => status.to_owned(),
    }
}

fn handler_ran(outcome: &ToolOutcome) -> bool {
    !matches!(
        outcome.error.as_ref().map(|e| e.reason),
        Some(
            ErrorReason::Required
                | ErrorReason::Type
                | ErrorReason::InvalidArguments
                | ErrorReason::Truncated
                | ErrorReason::NotFound
                | ErrorReason::Unauthorized
                | ErrorReason::Denied
        )
    )
}

/// Draws one bar per call on a shared time axis: bars that stand side by
/// side ran at the same time.
fn timeline(out: &mut dyn Write, rows: &[Row], wall: Duration) -> anyhow::Result<()> {
    let total = rows.iter().map(|r| r.end).fold(wall, Duration::max);
    let axis_end = format!("{} ms", ms(total));
    let axis = format!(
        "0 ms{axis_end:>width$}",
        width = TIMELINE_WIDTH.saturating_sub(4)
    );
    let tool_width = rows.iter().map(|r| r.tool.len()).max().unwrap_or(4).max(4);
    let status_width = rows
        .iter()
        .map(|r| r.status.len())
        .max()
        .unwrap_or(6)
        .max(6);
    writeln!(
        out,
        "      {:>2}  {:<tool_width$}  {:<status_width$}  {:>7}  {:>7}  |{axis}|",
        "#", "tool", "status", "start", "end"
    )?;
    for row in rows {
        let bar = if row.ran {
            bar(row.start, row.end, total)
        } else {
            format!("{:^TIMELINE_WIDTH$}", "(not executed)")
        };
        writeln!(
            out,
            "      {:>2}  {:<tool_width$}  {:<status_width$}  {:>4} ms  {:>4} ms  |{bar}|",
            row.index,
            row.tool,
            row.status,
            ms(row.start),
            ms(row.end),
        )?;
    }
    Ok(())
}

fn bar(start: Duration, end: Duration, total: Duration) -> String {
    let column = |t: Duration| -> usize {
        if total.is_zero() {
            return 0;
        }
        let fraction = t.as_secs_f64() / total.as_secs_f64();
        ((fraction * TIMELINE_WIDTH as f64).round() as usize).min(TIMELINE_WIDTH)
    };
    let from = column(start).min(TIMELINE_WIDTH - 1);
    // Every call that ran gets at least one mark, however short.
    let to = column(end).max(from + 1);
    format!(
        "{}{}{}",
        " ".repeat(from),
        "#".repeat(to - from),
        " ".repeat(TIMELINE_WIDTH - to)
    )
}

fn timing_summary(
    out: &mut dyn Write,
    mode: &BatchMode,
    rows: &[Row],
    wall: Duration,
) -> anyhow::Result<()> {
    let ran: Vec<&Row> = rows.iter().filter(|r| r.ran).collect();
    let sum: u64 = ran.iter().map(|r| r.duration_ms).sum();
    let wall_ms = ms(wall);
    let text = if ran.is_empty() {
        format!("Batch wall time {wall_ms} ms; no call ran, so there was nothing to wait for.")
    } else if *mode == BatchMode::Parallel {
        let speedup = sum as f64 / wall.as_secs_f64().max(0.001) / 1000.0;
        format!(
            "Batch wall time {wall_ms} ms for {sum} ms of tool time added up: the calls overlapped, \
             {speedup:.1}x faster than running them one after another."
        )
    } else {
        format!(
            "Batch wall time {wall_ms} ms for {sum} ms of tool time added up: one call after \
             another, so the wall time is the sum."
        )
    };
    say(out, "    ", &text)
}

/// Why the batch ran the way it did, in words, with the kernel's own reason.
fn explain_mode(mode: &BatchMode, calls: usize) -> String {
    let reason = match mode {
        BatchMode::Parallel => {
            return format!(
                "PARALLEL. Every tool in this batch is parallel-safe and no two calls share an \
                 order key, so all {calls} calls run at the same time."
            );
        }
        BatchMode::Serial { reason } => reason,
    };
    let why = match reason {
        SerialReason::SingleCall => {
            "single_call: at most one call of this batch can run, so there is nothing to overlap."
                .to_owned()
        }
        SerialReason::Disabled => "disabled: parallel execution is switched off.".to_owned(),
        SerialReason::UnknownTool { tool } => format!(
            "unknown_tool {tool}: no tool of that name is registered, and unknown tools count as unsafe."
        ),
        SerialReason::NotParallelSafe { tool } => format!(
            "not_parallel_safe {tool}: {tool} is not declared parallel-safe, so the whole batch \
             runs one call at a time, in the order the model listed the calls (there is no \
             partial parallelism)."
        ),
        SerialReason::SharedOrderKey { key } => format!(
            "shared_order_key {key}: two calls share that order key, so they keep their order."
        ),
        SerialReason::MissingOrderKey { tool } => format!(
            "missing_order_key {tool}: {tool} orders its calls by an argument a call did not supply."
        ),
    };
    format!("SERIAL, reason {why}")
}

fn finish_name(turn: &AssembledTurn) -> String {
    use homeagent_core::FinishReason;
    match &turn.finish_reason {
        None => "none".to_owned(),
        Some(FinishReason::Stop) => "stop".to_owned(),
        Some(FinishReason::ToolCalls) => "tool_calls".to_owned(),
        Some(FinishReason::Length) => "length".to_owned(),
        Some(FinishReason::ContentFilter) => "content_filter".to_owned(),
        Some(FinishReason::Other(other)) => other.clone(),
    }
}

fn ms(d: Duration) -> u128 {
    d.as_millis()
}

/// Writes `text` wrapped at about 96 columns, each line starting with
/// `prefix` (later lines indented to match). Existing line breaks are kept.
fn say(out: &mut dyn Write, prefix: &str, text: &str) -> anyhow::Result<()> {
    const WIDTH: usize = 96;
    let indent = if prefix.trim().is_empty() || prefix.ends_with("| ") {
        prefix.to_owned()
    } else {
        " ".repeat(prefix.chars().count())
    };
    let mut first = true;
    for paragraph in text.lines() {
        let mut line = String::new();
        for word in paragraph.split_whitespace() {
            let lead = if first { prefix } else { indent.as_str() };
            if !line.is_empty() && lead.len() + line.len() + 1 + word.len() > WIDTH {
                writeln!(out, "{lead}{line}")?;
                first = false;
                line.clear();
            }
            if !line.is_empty() {
                line.push(' ');
            }
            line.push_str(word);
        }
        let lead = if first { prefix } else { indent.as_str() };
        writeln!(out, "{lead}{line}")?;
        first = false;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bars_share_one_axis() {
        let total = Duration::from_millis(400);
        let b = bar(Duration::ZERO, Duration::from_millis(200), total);
        assert_eq!(b.len(), TIMELINE_WIDTH);
        assert_eq!(b.trim_end(), "#".repeat(TIMELINE_WIDTH / 2));
        let late = bar(Duration::from_millis(200), total, total);
        assert_eq!(late.trim_start(), "#".repeat(TIMELINE_WIDTH / 2));
        // A call that took no time still shows one mark.
        assert_eq!(bar(total, total, total).trim(), "#");
    }

    #[test]
    fn wrapping_keeps_the_prefix() {
        let mut out = Vec::new();
        say(&mut out, "  | ", &"word ".repeat(40)).unwrap();
        let text = String::from_utf8(out).unwrap();
        assert!(text.lines().count() > 1);
        assert!(
            text.lines().all(|l| l.starts_with("  | ") && l.len() <= 96),
            "{text}"
        );
    }
}
