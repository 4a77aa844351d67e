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
    fn show_event(&mut self, event: &ToolEvent, out: &mut dyn Write) -> std::io::Result<()> {
        match event {
            ToolEvent::Start {
                call_id: _,
                tool,
                args,
                batch_id,
                batch_size,
                parallel,
            } => {
                self.end_text(out)?;
                if self.batch.as_deref() != Some(&**batch_id) {
                    self.batch = Some(batch_id.to_string());
                    let how = if *parallel {
                        "∥ parallel"
                    } else {
                        "→ serial"
                    };
                    writeln!(out, "[{how} batch of {batch_size}]")?;
                }
                writeln!(out, "  ▸ {tool} {}", compact(args))?;
            }
            ToolEvent::End {
                tool,
                status,
                duration_ms,
                error,
                warnings,
                ..
            } => {
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
                for warning in warnings {
                    writeln!(out, "    warning: {warning}")?;
                }
            }
        }
        Ok(())
    }

    pub fn show(&mut self, frame: &Frame, out: &mut dyn Write) -> std::io::Result<()> {
        match frame {
            Frame::ContentDelta { text } => {
                write!(out, "{text}")?;
                self.open_text = !text.ends_with('\n');
            }
            Frame::ToolCall(event) => self.show_event(event, out)?,
            Frame::Response {
                content,
                incomplete,
                ..
            } => {
                // The content streamed already; only end the line.
                if self.open_text || content.is_empty() {
                    writeln!(out)?;
                }
                if let Some(incomplete) = incomplete {
                    writeln!(out, "{}", incomplete.note())?;
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

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)] // a panic in a test is a test failure

    use homeagent_core::CallStatus;

    use super::*;

    /// A call's warnings are shown under its end line, one per line.
    #[test]
    fn warnings_follow_the_end_line() {
        let end = ToolEvent::End {
            call_id: "c1".into(),
            tool: "files_read".into(),
            batch_id: "b1".into(),
            batch_size: 1,
            parallel: false,
            status: CallStatus::Ok,
            success: true,
            duration_ms: 3,
            error: None,
            warnings: vec!["first".into(), "second".into()],
        };
        let mut out = Vec::new();
        TextView::default()
            .show(&Frame::ToolCall(end.into()), &mut out)
            .unwrap();
        assert_eq!(
            String::from_utf8(out).unwrap(),
            "  ◂ files_read ok in 3 ms\n    warning: first\n    warning: second\n"
        );
    }
}
