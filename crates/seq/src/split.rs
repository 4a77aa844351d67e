//! Splitting a group's `tools` string into one piece of text per tool.
//!
//! A group's tools are written as one string of JSON objects, each followed
//! by `;` (the last one too):
//!
//! ```text
//! {"tool":"cmd_run","args":{"command":"uptime"},"as":"up"} ; {"tool":"demo_echo"} ;
//! ```
//!
//! Why a string and not a JSON array: a person (or a model) writes a
//! sequence the way they would write a script, one step per line, and the
//! `;` makes a forgotten separator visible. The price is a scanner that must
//! never guess: `;` separates only at brace/bracket depth 0 outside strings,
//! so a command full of `;` inside a string stays one tool, and every way
//! the text can be malformed is an error with the byte position where it
//! went wrong. In particular a missing `;` between two tools is an error,
//! never a silently merged (or silently dropped) tool.

/// One tool's text and where it starts in the `tools` string.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Piece<'a> {
    /// The tool's JSON text, trimmed.
    pub text: &'a str,
    /// Byte offset of the text's first byte in the input.
    pub position: usize,
}

/// Why a `tools` string could not be split. Positions are 0-based byte
/// offsets into the string.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SplitError {
    #[error("byte {position}: extra `{closer}` closes nothing; remove it or add its opener")]
    ExtraCloser { position: usize, closer: char },
    #[error(
        "byte {position}: missing `;` after the tool that ends at byte {after}; \
         without it the next tool would be swallowed (write `{{...}} ; {{...}} ;`)"
    )]
    MissingSemicolon { position: usize, after: usize },
    #[error("byte {position}: empty tool (two `;` in a row, or a `;` with nothing before it)")]
    EmptyTool { position: usize },
    #[error("byte {position}: string opened here is never closed (missing `\"`)")]
    UnclosedString { position: usize },
    #[error("byte {position}: `{opener}` opened here is never closed ({depth} closer(s) missing)")]
    UnclosedStructure {
        position: usize,
        opener: char,
        depth: usize,
    },
    #[error("byte {position}: missing trailing `;` after the last tool (every tool ends with `;`)")]
    MissingTrailingSemicolon { position: usize },
    #[error(
        "no tools: write one or more JSON objects, each followed by `;`, e.g. {{\"tool\":\"demo_echo\"}} ;"
    )]
    Empty,
}

impl SplitError {
    /// The byte position the error points at, when it has one.
    pub fn position(&self) -> Option<usize> {
        match self {
            SplitError::ExtraCloser { position, .. }
            | SplitError::MissingSemicolon { position, .. }
            | SplitError::EmptyTool { position }
            | SplitError::UnclosedString { position }
            | SplitError::UnclosedStructure { position, .. }
            | SplitError::MissingTrailingSemicolon { position } => Some(*position),
            SplitError::Empty => None,
        }
    }
}

/// Splits `input` into tool pieces. See the module docs for the rules.
pub fn split_tools(input: &str) -> Result<Vec<Piece<'_>>, SplitError> {
    let bytes = input.as_bytes();
    let mut pieces = Vec::new();
    let mut piece_start = 0usize;
    // Openers still open, with their positions (for the unclosed error).
    let mut open: Vec<(usize, char)> = Vec::new();
    let mut string_start: Option<usize> = None;
    let mut escaped = false;
    // Set when a top-level structure just closed: the byte where it ended.
    let mut closed_at: Option<usize> = None;

    for (i, &b) in bytes.iter().enumerate() {
        if string_start.is_some() {
            if escaped {
                escaped = false;
            } else if b == b'\\' {
                escaped = true;
            } else if b == b'"' {
                string_start = None;
            }
            continue;
        }
        if b.is_ascii_whitespace() {
            continue;
        }
        if open.is_empty() {
            if b == b'}' || b == b']' {
                return Err(SplitError::ExtraCloser {
                    position: i,
                    closer: char::from(b),
                });
            }
            if let Some(after) = closed_at
                && b != b';'
            {
                return Err(SplitError::MissingSemicolon { position: i, after });
            }
            if b == b';' {
                let text = input[piece_start..i].trim();
                if text.is_empty() {
                    return Err(SplitError::EmptyTool { position: i });
                }
                pieces.push(Piece {
                    text,
                    position: piece_start + leading_space(&input[piece_start..i]),
                });
                piece_start = i + 1;
                closed_at = None;
                continue;
            }
        }
        match b {
            b'"' => string_start = Some(i),
            b'{' => open.push((i, '{')),
            b'[' => open.push((i, '[')),
            b'}' | b']' => {
                open.pop();
                if open.is_empty() {
                    closed_at = Some(i);
                }
            }
            _ => {}
        }
    }
    if let Some(position) = string_start {
        return Err(SplitError::UnclosedString { position });
    }
    if let Some(&(position, opener)) = open.first() {
        return Err(SplitError::UnclosedStructure {
            position,
            opener,
            depth: open.len(),
        });
    }
    let tail = &input[piece_start..];
    if !tail.trim().is_empty() {
        return Err(SplitError::MissingTrailingSemicolon {
            position: input.trim_end().len(),
        });
    }
    if pieces.is_empty() {
        return Err(SplitError::Empty);
    }
    Ok(pieces)
}

fn leading_space(text: &str) -> usize {
    text.len() - text.trim_start().len()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn positions_point_at_the_first_byte_of_each_tool() {
        let pieces = split_tools("  {\"a\":1} ;\n {\"b\":[2]};").unwrap_or_default();
        assert_eq!(
            pieces,
            [
                Piece {
                    text: "{\"a\":1}",
                    position: 2
                },
                Piece {
                    text: "{\"b\":[2]}",
                    position: 13
                },
            ]
        );
    }
}
