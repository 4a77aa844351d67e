//! Estimating how many tokens a text costs a model, without its tokenizer.
//!
//! The context budget (`agent.context_tokens`) is counted in these
//! estimates, for every provider, so the estimate must not fall below what
//! a model's tokenizer counts: a request over the model's window is
//! refused outright, while an estimate somewhat high only drops history a
//! little early. Bytes divided by four, the usual rule, holds for English
//! prose and nothing else: it counted Chinese at two thirds of its tokens,
//! a tool's JSON result at two thirds, ids, hashes and numbers at a third.
//!
//! Tokenizers split text into words of letters, groups of up to three
//! digits and single punctuation marks, and outside ASCII into one or more
//! tokens per character. So the estimate counts what it sees in eighths
//! of a token: a word's start, each letter (more from a word's eighth
//! on), a digit group, a mark, a line break or a second space, a letter or digit glued to another kind (as in
//! ids and hashes, which split into many short tokens), and each non-ASCII
//! character by its UTF-8 length (two bytes for Latin accents, Greek,
//! Cyrillic, Arabic; three for CJK, Indic and Thai; four for emoji). The
//! weights were fitted to samples of each kind of text against OpenAI's
//! cl100k and o200k and DeepSeek's tokenizers
//! (`tests/data/token_samples`, `scripts/token-samples/measure.py`): on
//! every sample the estimate is at or above the largest of the three
//! counts, by 20 % on average and at most 70 % (German compound words).

use homeagent_core::Message;
use homeagent_llm::ToolSpec;

/// What each thing counted costs, in eighths of a token.
const WORD: usize = 6;
const LETTER: usize = 1;
/// Each letter of a word after its seventh: words that long are mostly
/// random (keys, ids, base32) or compounds, split every few letters.
const LONG_WORD_LETTER: usize = 6;
const LONG_WORD_FROM: usize = 8;
const DIGIT_GROUP: usize = 14;
const MARK: usize = 4;
const BREAK: usize = 4;
const GLUED: usize = 2;
const TWO_BYTE_CHAR: usize = 7;
const THREE_BYTE_CHAR: usize = 11;
const FOUR_BYTE_CHAR: usize = 20;

/// A message's framing on the wire (its role, the separators around it).
const PER_MESSAGE: usize = 4;
/// A tool call's framing (its type, the function object's keys).
const PER_CALL: usize = 8;
/// A tool definition's framing in the request's tool list.
const PER_TOOL: usize = 8;

/// The estimated tokens of `text` alone.
pub fn text_tokens(text: &str) -> usize {
    let mut count = TokenCount::default();
    count.text(text);
    count.tokens()
}

/// The estimated tokens `message` takes in a model request: its texts,
/// each counted once, and its framing. A call's arguments are counted from
/// the text the model streamed (the wire sends them as one string), not
/// also from their parsed copy; reasoning metadata (signatures sent back
/// verbatim) is not counted, as providers do not count it against the
/// context.
pub fn approx_tokens(message: &Message) -> usize {
    let mut count = TokenCount::default();
    let mut framing = PER_MESSAGE;
    match message {
        Message::System { content } | Message::User { content } => count.text(content),
        Message::Assistant(assistant) => {
            count.text(&assistant.content);
            for part in &assistant.reasoning {
                count.text(&part.text);
            }
            for call in &assistant.tool_calls {
                framing += PER_CALL;
                count.text(&call.id);
                count.text(&call.name);
                if call.raw_arguments.is_empty() {
                    count.json(&call.arguments);
                } else {
                    count.text(&call.raw_arguments);
                }
            }
        }
        Message::Tool(result) => {
            count.text(&result.tool_call_id);
            count.text(&result.name);
            count.text(&result.content);
        }
    }
    count.tokens() + framing
}

/// The estimated tokens the tool list of a request takes: each tool's
/// name, description and parameter schema, and its framing.
pub fn definition_tokens(tools: &[ToolSpec]) -> usize {
    let mut count = TokenCount::default();
    for tool in tools {
        count.text(tool.name());
        count.text(tool.description());
        count.text(tool.parameters().get());
    }
    count.tokens() + tools.len() * PER_TOOL
}

/// A running estimate over several texts, in eighths of a token.
#[derive(Debug, Default)]
struct TokenCount {
    eighths: usize,
    /// The class of the last character seen in the current text.
    prev: Class,
    /// How many digits the current run of digits has had.
    digits: usize,
    /// How many letters the current word has had.
    letters: usize,
}

#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
enum Class {
    /// The start of a text.
    #[default]
    Start,
    Lower,
    Upper,
    Digit,
    Space,
    Other,
}

impl TokenCount {
    /// Counts `text`, which starts a new word whatever came before.
    fn text(&mut self, text: &str) {
        self.prev = Class::Start;
        self.bytes(text.as_bytes());
    }

    /// Counts `value` as its compact JSON text, without building it.
    fn json(&mut self, value: &serde_json::Value) {
        self.prev = Class::Start;
        // Writing to this counter cannot fail; a value that could not be
        // written would only be counted short.
        let _ = serde_json::to_writer(&mut *self, value);
    }

    fn bytes(&mut self, bytes: &[u8]) {
        for &byte in bytes {
            let (class, cost) = match byte {
                b'a'..=b'z' => {
                    let start = !matches!(self.prev, Class::Lower | Class::Upper);
                    let glued = self.prev == Class::Digit;
                    (Class::Lower, self.letter(start) + glue(glued))
                }
                b'A'..=b'Z' => {
                    let start = self.prev != Class::Upper;
                    let glued = matches!(self.prev, Class::Lower | Class::Digit);
                    (Class::Upper, self.letter(start) + glue(glued))
                }
                b'0'..=b'9' => {
                    self.digits = if self.prev == Class::Digit {
                        self.digits + 1
                    } else {
                        1
                    };
                    // Tokenizers group digits by three.
                    let group = if self.digits % 3 == 1 { DIGIT_GROUP } else { 0 };
                    let glued = matches!(self.prev, Class::Lower | Class::Upper);
                    (Class::Digit, group + glue(glued))
                }
                // A space joins the word after it; a second one does not.
                b' ' => (
                    Class::Space,
                    if self.prev == Class::Space { BREAK } else { 0 },
                ),
                b'\n' | b'\r' | b'\t' => (Class::Other, BREAK),
                0x00..=0x7F => (Class::Other, MARK),
                // A continuation byte: its character was counted at its
                // first byte.
                0x80..=0xBF => continue,
                0xC0..=0xDF => (Class::Other, TWO_BYTE_CHAR),
                0xE0..=0xEF => (Class::Other, THREE_BYTE_CHAR),
                0xF0..=0xFF => (Class::Other, FOUR_BYTE_CHAR),
            };
            self.eighths += cost;
            self.prev = class;
        }
    }

    /// A letter's cost, `start` when it begins a word. A letter after a
    /// letter of either case is part of the same run for its length
    /// (`wordWord` is one run of eight), though an upper-case one after a
    /// lower-case one starts another word.
    fn letter(&mut self, start: bool) -> usize {
        self.letters = if matches!(self.prev, Class::Lower | Class::Upper) {
            self.letters + 1
        } else {
            1
        };
        let letter = if self.letters >= LONG_WORD_FROM {
            LONG_WORD_LETTER
        } else {
            LETTER
        };
        letter + word(start)
    }

    fn tokens(&self) -> usize {
        self.eighths.div_ceil(8)
    }
}

fn word(start: bool) -> usize {
    if start { WORD } else { 0 }
}

fn glue(glued: bool) -> usize {
    if glued { GLUED } else { 0 }
}

impl std::io::Write for TokenCount {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.bytes(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Worked by hand from the weights: "Ab1 é" is a word start and two
    /// letters (6 + 1 + 1), a digit group glued to a letter (14 + 2), a
    /// space (0), a two-byte character (7): 31 eighths, 4 tokens.
    #[test]
    fn a_text_is_counted_by_its_parts() {
        let mut count = TokenCount::default();
        count.text("Ab1 é");
        assert_eq!(count.eighths, 31);
        assert_eq!(count.tokens(), 4);
    }

    /// A word's first seven letters cost one eighth each, the rest six:
    /// "abcdefghij" is 6 + 7 × 1 + 3 × 6; "abcDefghij" (a second word
    /// inside the run) adds a word start and no more.
    #[test]
    fn long_words_cost_more_per_letter() {
        let mut count = TokenCount::default();
        count.text("abcdefghij");
        assert_eq!(count.eighths, 31);
        count.text("abcDefghij");
        assert_eq!(count.eighths, 31 + 31 + WORD + GLUED);
    }

    /// Digits come in groups of three: "1234567" is three groups.
    #[test]
    fn digits_count_by_groups_of_three() {
        let mut count = TokenCount::default();
        count.text("1234567");
        assert_eq!(count.eighths, 3 * DIGIT_GROUP);
    }

    /// Each text starts a word: "ab" then "cd" are two words, "abcd" one.
    #[test]
    fn each_text_starts_a_word() {
        let mut two = TokenCount::default();
        two.text("ab");
        two.text("cd");
        let mut one = TokenCount::default();
        one.text("abcd");
        assert_eq!(two.eighths, one.eighths + WORD);
    }
}
