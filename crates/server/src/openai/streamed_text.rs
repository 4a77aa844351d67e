//! What a streamed completion has sent of the answer's text, so that the
//! stream says what the whole answer says.
//!
//! The agent streams the text of every model turn of an input, while the
//! answer holds the last turn's text, plus (on this endpoint) the note of
//! an incompleteness no `finish_reason` can say ("[stopped after 10 tool
//! turns ...]"). Two
//! things follow for a streaming client:
//!
//! - text of a turn that went on to call tools ("Let me check.") would run
//!   into the next turn's ("Let me check.The light is on."); a blank line
//!   goes between them;
//! - whatever of the answer the last turn did not stream (the note) is
//!   sent before the stream ends, so it is not lost.

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

    /// What of `answer` the stream has not sent yet: the part after the
    /// last turn's streamed text. `None` when nothing is missing, or when
    /// the answer does not continue that text (then there is nothing sound
    /// to add).
    pub(super) fn missing_from<'a>(&self, answer: &'a str) -> Option<&'a str> {
        let last = if self.turn_ended {
            ""
        } else {
            self.current.as_str()
        };
        let rest = answer.strip_prefix(last)?;
        (!rest.is_empty()).then_some(rest)
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
        assert_eq!(text.missing_from("The light is on."), None);
    }

    #[test]
    fn a_turn_without_text_adds_no_separator() {
        let mut text = StreamedText::default();
        text.tool_call();
        assert_eq!(text.text("Done."), "Done.");
        assert_eq!(text.missing_from("Done."), None);
    }

    #[test]
    fn what_the_answer_adds_after_the_last_turn_is_missing() {
        let mut text = StreamedText::default();
        text.tool_call();
        // Stopped after its tool turns: the last turn streamed nothing.
        let note = "[stopped after 1 tool turns: the model kept calling tools]";
        assert_eq!(text.missing_from(note), Some(note));
        assert_eq!(text.text(note), note);

        // After an earlier turn's text, it is sent as a turn of its own.
        let mut text = StreamedText::default();
        text.text("Checking.");
        text.tool_call();
        assert_eq!(text.missing_from(note), Some(note));
        assert_eq!(text.text(note), format!("\n\n{note}"));

        let mut text = StreamedText::default();
        text.text("Partial");
        assert_eq!(text.missing_from("Partial answer"), Some(" answer"));
        assert_eq!(text.missing_from("Something else"), None);
    }
}
