//! What a streamed completion has sent of the answer's text, so that the
//! stream says what the whole answer says.
//!
//! The agent streams the text of every model turn of an input, while the
//! answer holds one turn's text (the last one's; when the agent stopped
//! after its tool turns, the text of the turn that called tools), plus (on
//! this endpoint) the note of an incompleteness no `finish_reason` can say
//! ("[stopped after 10 tool turns ...]"). Two things follow for a
//! streaming client:
//!
//! - text of a turn that went on to call tools ("Let me check.") would run
//!   into the next turn's ("Let me check.The light is on."); a blank line
//!   goes between them;
//! - whatever of the answer was not streamed (the note) is sent before the
//!   stream ends, so it is not lost, and what was streamed is not sent
//!   twice.

/// The text streamed so far, by turn.
#[derive(Debug, Default)]
pub(super) struct StreamedText {
    /// Text was streamed before the current turn.
    earlier: bool,
    /// A tool call came since the last text: the next text opens a turn.
    turn_ended: bool,
    /// The current turn's text.
    current: String,
}

impl StreamedText {
    /// The delta to send for `text`, separated from an earlier turn's.
    pub(super) fn text(&mut self, text: &str) -> String {
        if self.turn_ended {
            self.turn_ended = false;
            self.earlier |= !self.current.is_empty();
            self.current.clear();
        }
        let delta = if self.earlier && self.current.is_empty() && !text.is_empty() {
            format!("\n\n{text}")
        } else {
            text.to_owned()
        };
        self.current.push_str(text);
        delta
    }

    /// A tool call of the current turn came.
    pub(super) fn tool_call(&mut self) {
        self.turn_ended = true;
    }

    /// The last delta of the stream, so that the stream ends with what the
    /// whole answer says: what of `content` was not streamed (the part
    /// after the text the turn it comes from streamed), then `note` (an
    /// incompleteness no `finish_reason` can say) as a paragraph of its
    /// own. `content` is the text of the turn that went on to call tools
    /// when `after_calls` (the agent stopped after its tool turns), else of
    /// the last turn. Content that does not continue the streamed text is
    /// not added (there is nothing sound to add).
    pub(super) fn ending(
        &mut self,
        content: &str,
        after_calls: bool,
        note: Option<&str>,
    ) -> Option<String> {
        let streamed = if self.turn_ended && !after_calls {
            // The last turn called tools; `content` is a later turn's,
            // which streamed nothing.
            ""
        } else {
            self.current.as_str()
        };
        let mut delta = match content.strip_prefix(streamed) {
            Some(rest) if !rest.is_empty() => self.text(rest),
            _ => String::new(),
        };
        if let Some(note) = note {
            let anything = self.earlier || !self.current.is_empty() || !delta.is_empty();
            if anything {
                delta.push_str("\n\n");
            }
            delta.push_str(note);
        }
        (!delta.is_empty()).then_some(delta)
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)] // a panic in a test is a test failure

    use super::*;

    #[test]
    fn turns_are_separated_by_a_blank_line() {
        let mut text = StreamedText::default();
        assert_eq!(text.text("Let me "), "Let me ");
        assert_eq!(text.text("check."), "check.");
        text.tool_call();
        text.tool_call();
        assert_eq!(text.text("The light"), "\n\nThe light");
        assert_eq!(text.text(" is on."), " is on.");
        // The answer is the last turn's text: nothing is missing.
        assert_eq!(text.ending("The light is on.", false, None), None);
    }

    #[test]
    fn a_turn_without_text_adds_no_separator() {
        let mut text = StreamedText::default();
        text.tool_call();
        assert_eq!(text.text("Done."), "Done.");
        assert_eq!(text.ending("Done.", false, None), None);
    }

    #[test]
    fn what_the_answer_adds_after_the_streamed_text_is_sent_last() {
        let note = "[stopped after 1 tool turn, the most agent.max_tool_turns allows]";
        // Stopped after its tool turns, none of which had text.
        let mut text = StreamedText::default();
        text.tool_call();
        assert_eq!(text.ending("", true, Some(note)).as_deref(), Some(note));

        // The turn that called tools said something: that text streamed
        // already, and only the note follows it.
        let mut text = StreamedText::default();
        text.text("Let me check.");
        text.tool_call();
        assert_eq!(
            text.ending("Let me check.", true, Some(note)),
            Some(format!("\n\n{note}"))
        );

        // A last turn that streamed part of its text; one that streamed
        // nothing after an earlier turn's text; one that says otherwise.
        let mut text = StreamedText::default();
        text.text("Partial");
        assert_eq!(
            text.ending("Partial answer", false, None).as_deref(),
            Some(" answer")
        );
        let mut text = StreamedText::default();
        text.text("Checking.");
        text.tool_call();
        assert_eq!(
            text.ending("The light is on.", false, None).as_deref(),
            Some("\n\nThe light is on.")
        );
        let mut text = StreamedText::default();
        text.text("Partial");
        assert_eq!(text.ending("Something else", false, None), None);
    }
}
