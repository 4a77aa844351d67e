//! Showing frames to a person: text as it streams, tool calls grouped by
//! batch with a marker for batches that run in parallel.

use std::io::Write;

use homeagent_agent::Frame;
use homeagent_core::ToolEvent;

/// Remembers the batch being shown, to print its header once.
#[derive(Debug, Default)]
pub struct TextView {
    batch: Option<String>,
    /// The line holds streamed text not yet ended by a newline.
    open_text: bool,
}

impl TextView {
    pub fn show(&mut self, frame: &Frame, out: &mut dyn Write) -> std::io::Result<()> {
        match frame {
            Frame::ContentDelta { text } => {
                write!(out, "{text}")?;
                self.open_text = !text.ends_with('\n');
            }
            Frame::ToolCall(ToolEvent::Start {
                call_id: _,
                tool,
                args,
                batch_id,
                batch_size,
                parallel,
            }) => {
                self.end_text(out)?;
                if self.batch.as_deref() != Some(batch_id.as_str()) {
                    self.batch = Some(batch_id.clone());
                    let how = if *parallel {
                        "∥ parallel"
                    } else {
                        "→ serial"
                    };
                    writeln!(out, "[{how} batch of {batch_size}]")?;
                }
                writeln!(out, "  ▸ {tool} {}", compact(args))?;
            }
            Frame::ToolCall(ToolEvent::End {
                tool,
                status,
                duration_ms,
                error,
                ..
            }) => {
                let detail = error
                    .as_ref()
                    .map(|e| format!(": {}", e.detail))
                    .unwrap_or_default();
                writeln!(
                    out,
                    "  ◂ {tool} {} in {duration_ms} ms{detail}",
                    serde_json::to_value(status)
                        .ok()
                        .and_then(|v| v.as_str().map(str::to_owned))
                        .unwrap_or_default()
                )?;
            }
            Frame::Response { content, .. } => {
                // The content streamed already; only end the line.
                if self.open_text || content.is_empty() {
                    writeln!(out)?;
                }
                self.open_text = false;
                self.batch = None;
            }
            Frame::Skipped { reason } => {
                self.end_text(out)?;
                writeln!(out, "(skipped: {})", reason.as_str())?;
            }
            Frame::Error { message, .. } => {
                self.end_text(out)?;
                writeln!(out, "error: {message}")?;
                self.batch = None;
            }
        }
        Ok(())
    }

    fn end_text(&mut self, out: &mut dyn Write) -> std::io::Result<()> {
        if self.open_text {
            writeln!(out)?;
            self.open_text = false;
        }
        Ok(())
    }
}

fn compact(args: &serde_json::Value) -> String {
    let text = args.to_string();
    if text.chars().count() > 120 {
        let cut: String = text.chars().take(117).collect();
        format!("{cut}...")
    } else {
        text
    }
}
