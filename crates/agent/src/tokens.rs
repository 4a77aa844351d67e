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
/// also from their parsed copy. Reasoning metadata (signatures, redacted
/// thinking: opaque data sent back verbatim) counts a quarter token a byte
/// of its JSON: a provider may count what comes back within a tool loop.
pub fn approx_tokens(message: &Message) -> usize {
    let mut count = TokenCount::default();
    let mut framing = PER_MESSAGE;
    match message {
        Message::System { content } | Message::User { content } => count.text(content),
        Message::Assistant(assistant) => {
            count.text(&assistant.content);
            for part in &assistant.reasoning {
                count.text(&part.text);
                if let Some(metadata) = &part.metadata {
                    count.opaque(metadata);
                }
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
    /// What the bytes so far of the current text end in: its row of
    /// [`STEP`].
    row: u8,
}

impl TokenCount {
    /// Counts `text`, which starts a new word whatever came before.
    fn text(&mut self, text: &str) {
        self.row = row_of(OTHER);
        self.bytes(text.as_bytes());
    }

    /// Counts `value` as its compact JSON text, without building it.
    fn json(&mut self, value: &serde_json::Value) {
        self.row = row_of(OTHER);
        // Writing to this counter cannot fail; a value that could not be
        // written would only be counted short.
        let _ = serde_json::to_writer(&mut *self, value);
    }

    /// Counts `value` as opaque data: a quarter token a byte of its JSON.
    fn opaque(&mut self, value: &serde_json::Value) {
        let bytes = serde_json::to_vec(value).map_or(0, |json| json.len());
        self.eighths += 2 * bytes;
    }

    fn bytes(&mut self, bytes: &[u8]) {
        // Two table reads a byte, both indexed by a `u8` into 256 entries
        // (no bounds check): this runs over every message once, a batch's
        // calls and results included.
        let (mut row, mut eighths) = (self.row, self.eighths);
        for &byte in bytes {
            let entry = STEP[usize::from(row.wrapping_add(BYTE_CLASS[usize::from(byte)]))];
            eighths += usize::from(entry & 0xFF);
            row = (entry >> 8) as u8;
        }
        (self.row, self.eighths) = (row, eighths);
    }

    fn tokens(&self) -> usize {
        self.eighths.div_ceil(8)
    }
}

// What a byte is.
const LOWER_BYTE: u8 = 0;
const UPPER_BYTE: u8 = 1;
const DIGIT_BYTE: u8 = 2;
const SPACE_BYTE: u8 = 3;
const BREAK_BYTE: u8 = 4;
const MARK_BYTE: u8 = 5;
/// The second to fourth byte of a UTF-8 character.
const CONTINUATION_BYTE: u8 = 6;
/// The first byte of a two-, three- or four-byte character.
const LEAD2_BYTE: u8 = 7;
const LEAD3_BYTE: u8 = 8;
const LEAD4_BYTE: u8 = 9;
const BYTE_CLASSES: usize = 10;

const fn byte_class(byte: u8) -> u8 {
    match byte {
        b'a'..=b'z' => LOWER_BYTE,
        b'A'..=b'Z' => UPPER_BYTE,
        b'0'..=b'9' => DIGIT_BYTE,
        b' ' => SPACE_BYTE,
        b'\n' | b'\r' | b'\t' => BREAK_BYTE,
        0x00..=0x7F => MARK_BYTE,
        0x80..=0xBF => CONTINUATION_BYTE,
        0xC0..=0xDF => LEAD2_BYTE,
        0xE0..=0xEF => LEAD3_BYTE,
        0xF0..=0xFF => LEAD4_BYTE,
    }
}

static BYTE_CLASS: [u8; 256] = {
    let mut table = [0; 256];
    let mut byte = 0;
    while byte < 256 {
        table[byte] = byte_class(byte as u8);
        byte += 1;
    }
    table
};

// What the text so far ends in: its start, or anything none of the others
// is; a space; the k-th letter (1..=LONG_WORD_FROM, the last standing for
// every later one too) of a run whose last letter is lower or upper case;
// the k-th digit (1..=3) of a group of three.
const OTHER: u8 = 0;
const SPACE: u8 = 1;
const LOWER: u8 = 2;
const RUN: u8 = LONG_WORD_FROM as u8;
const UPPER: u8 = LOWER + RUN;
const DIGIT: u8 = UPPER + RUN;
const STATES: usize = DIGIT as usize + 3;

/// The state after a byte of `class` in `state`, and what the byte costs:
/// the counting rules, which [`STEP`] tabulates.
const fn step(state: u8, class: u8) -> (u8, u8) {
    let after_lower = state >= LOWER && state < UPPER;
    let after_upper = state >= UPPER && state < DIGIT;
    let after_letter = after_lower || after_upper;
    let after_digit = state >= DIGIT;
    // The letter this byte would be in its run, the run's length counted
    // up to RUN.
    let letter = if after_lower {
        state - LOWER + 2
    } else if after_upper {
        state - UPPER + 2
    } else {
        1
    };
    let letter = if letter > RUN { RUN } else { letter };
    let letter_cost = if letter >= RUN {
        LONG_WORD_LETTER
    } else {
        LETTER
    };
    match class {
        LOWER_BYTE => {
            let start = if after_letter { 0 } else { WORD };
            let glued = if after_digit { GLUED } else { 0 };
            (LOWER + letter - 1, (letter_cost + start + glued) as u8)
        }
        UPPER_BYTE => {
            // An upper-case letter after a lower-case one starts a word.
            let start = if after_upper { 0 } else { WORD };
            let glued = if after_lower || after_digit { GLUED } else { 0 };
            (UPPER + letter - 1, (letter_cost + start + glued) as u8)
        }
        DIGIT_BYTE => {
            // Tokenizers group digits by three.
            let place = if after_digit && state - DIGIT < 2 {
                state - DIGIT + 2
            } else {
                1
            };
            let group = if place == 1 { DIGIT_GROUP } else { 0 };
            let glued = if after_letter { GLUED } else { 0 };
            (DIGIT + place - 1, (group + glued) as u8)
        }
        // A space joins the word after it; a second one does not.
        SPACE_BYTE => (SPACE, if state == SPACE { BREAK as u8 } else { 0 }),
        BREAK_BYTE => (OTHER, BREAK as u8),
        MARK_BYTE => (OTHER, MARK as u8),
        // Its character was counted at its first byte.
        CONTINUATION_BYTE => (state, 0),
        LEAD2_BYTE => (OTHER, TWO_BYTE_CHAR as u8),
        LEAD3_BYTE => (OTHER, THREE_BYTE_CHAR as u8),
        _ => (OTHER, FOUR_BYTE_CHAR as u8),
    }
}

/// The first entry of `state`'s row in [`STEP`].
const fn row_of(state: u8) -> u8 {
    state * BYTE_CLASSES as u8
}

/// [`step`] for every state and byte class: the entry at `row_of(state) +
/// class` holds the cost in its low byte and the next state's row in its
/// high byte. 256 entries, the rest unused, so that a `u8` index needs no
/// bounds check.
static STEP: [u16; 256] = {
    assert!(STATES * BYTE_CLASSES <= 256);
    let mut table = [0; 256];
    let mut state = 0;
    while state < STATES {
        let mut class = 0;
        while class < BYTE_CLASSES {
            let (next, cost) = step(state as u8, class as u8);
            table[state * BYTE_CLASSES + class] = (row_of(next) as u16) << 8 | cost as u16;
            class += 1;
        }
        state += 1;
    }
    table
};

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
    /// inside the run) costs that plus a word start and the glue of an
    /// upper-case letter after a lower-case one.
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
