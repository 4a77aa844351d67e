//! A one-pass reader for [`Chunk`]: the decoder's fastest path.
//!
//! A streamed call costs three chunks of about 300 bytes, and reading them
//! was the largest single cost of a tool call in the kernel. serde_json
//! reads one of the mock's chunks into `Chunk` in 7.2 k instructions
//! (4.7 k of them just stepping over the text, token by token, as
//! `IgnoredAny` does); sonic-rs, through serde, took more. This reader
//! takes 5.0 k: it walks the text once, finds the end of each string eight
//! bytes at a time, unescapes only strings that have escapes, keeps the
//! members `Chunk` declares and steps over the rest (docs/BENCHMARKS.md).
//!
//! It is a shortcut, never the authority. It answers `Some` only for a
//! chunk serde would read to the same `Chunk`, and `None` for anything it
//! does not follow all the way (a key with an escape, an `error` or an
//! `extra_content` that is not `null`, a repeated member, a number or a
//! string that is not what the member holds, any text that is not JSON);
//! the caller then asks serde (`typed_frame`), which is always right. The
//! tests hold it to that on real chunks and on tens of thousands of random
//! edits of them.

use super::{CallEntry, Choice, Chunk, Delta, FunctionPart, UsageCounts};
use homeagent_core::json_text::plain_run;

/// How deep a member nobody reads may nest here. Stepping over one
/// recurses, so a deeper one is left to serde, which steps over members
/// without recursing.
const MAX_SKIP_DEPTH: u32 = 100;

/// `data` as a [`Chunk`], or `None`: leave it to serde.
#[cfg(test)]
pub(in super::super) fn scan(data: &str) -> Option<Chunk> {
    scan_with(data, &mut SkippedRun::default())
}

/// [`scan`], stepping over the members the last chunk had and nobody
/// reads (see [`SkippedRun`]), and remembering this chunk's.
pub(in super::super) fn scan_with(data: &str, skipped: &mut SkippedRun) -> Option<Chunk> {
    let mut reader = Reader {
        text: data,
        bytes: data.as_bytes(),
        at: 0,
    };
    let (chunk, run) = reader.chunk(skipped)?;
    reader.blanks();
    if reader.at != reader.bytes.len() {
        return None;
    }
    skipped.remember(data.get(run).unwrap_or_default());
    Some(chunk)
}

/// The longest run of top-level members nobody reads in the last chunk
/// read whole: from the opening quote of its first key to the end of its
/// last value.
///
/// Every chunk of a stream repeats the same envelope (`id`, `object`,
/// `created`, `model`, `system_fingerprint`, ...: some 130 bytes of the
/// mock's 300), and stepping over it member by member was about a third
/// of reading a chunk. Text that starts with the remembered run and goes
/// on with the end of a member (`,` or `}` after blanks) holds those very
/// members, already checked, so the reader jumps over it. Only members
/// the reader skips are in a run, so no member it reads, and no repeated
/// member it must refuse, can hide in one.
#[derive(Debug, Default)]
pub(in super::super) struct SkippedRun {
    text: String,
    /// Runs jumped over (tests).
    #[cfg(test)]
    pub(super) jumps: u64,
}

impl SkippedRun {
    /// The length of the remembered run `rest` starts with, if it does
    /// and the member ends there.
    fn known(&mut self, rest: &[u8]) -> Option<usize> {
        let len = self.text.len();
        if len == 0 || !rest.starts_with(self.text.as_bytes()) {
            return None;
        }
        let after = rest.get(len..)?;
        let next = after
            .iter()
            .find(|b| !matches!(b, b' ' | b'\n' | b'\r' | b'\t'))?;
        if !matches!(next, b',' | b'}') {
            return None;
        }
        #[cfg(test)]
        {
            self.jumps += 1;
        }
        Some(len)
    }

    fn remember(&mut self, run: &str) {
        if !run.is_empty() && run != self.text {
            run.clone_into(&mut self.text);
        }
    }
}

/// A position in the text. Every method that reads a value moves past it
/// and answers `None` when the text there is not what it reads.
struct Reader<'a> {
    text: &'a str,
    bytes: &'a [u8],
    at: usize,
}

/// The members an object has had so far: serde refuses a repeated one.
#[derive(Default)]
struct Seen(u8);

impl Seen {
    /// `Some` the first time `member` is seen.
    fn first(&mut self, member: u8) -> Option<()> {
        let bit = 1 << member;
        let repeated = self.0 & bit != 0;
        self.0 |= bit;
        (!repeated).then_some(())
    }
}

impl<'a> Reader<'a> {
    /// The chunk, and where its longest run of skipped members lies.
    fn chunk(&mut self, skipped: &mut SkippedRun) -> Option<(Chunk, std::ops::Range<usize>)> {
        let (mut choices, mut usage, mut seen) = (None, None, Seen::default());
        // The run being read, and the longest one so far.
        let (mut run, mut longest): (Option<std::ops::Range<usize>>, std::ops::Range<usize>) =
            (None, 0..0);
        self.expect(b'{')?;
        self.blanks();
        if self.peek()? == b'}' {
            self.at += 1;
        } else {
            loop {
                self.blanks();
                let start = self.at;
                if let Some(len) = skipped.known(self.bytes.get(start..)?) {
                    self.at += len;
                } else {
                    self.expect(b'"')?;
                    let key = self.plain_key()?;
                    self.expect(b':')?;
                    match key {
                        "choices" => {
                            self.field(&mut seen, 0, &mut choices, |r| r.array_of(Self::choice))?;
                        }
                        "usage" => self.field(&mut seen, 1, &mut usage, Self::usage)?,
                        // A chunk with an error goes the `Value` way, which words it.
                        "error" => self.null_only(&mut seen, 2)?,
                        _ => self.skip(0)?,
                    }
                    if matches!(key, "choices" | "usage" | "error") {
                        // A member read: the run, if any, ended before it.
                        if let Some(ended) = run.take()
                            && ended.len() > longest.len()
                        {
                            longest = ended;
                        }
                        match self.token()? {
                            b',' => continue,
                            b'}' => break,
                            _ => return None,
                        }
                    }
                }
                // A member skipped, by a jump or by reading it.
                let end = self.at;
                run = Some(run.map_or(start..end, |r| r.start..end));
                match self.token()? {
                    b',' => {}
                    b'}' => break,
                    _ => return None,
                }
            }
        }
        if let Some(ended) = run
            && ended.len() > longest.len()
        {
            longest = ended;
        }
        Some((
            Chunk {
                error: None,
                choices,
                usage,
            },
            longest,
        ))
    }

    fn choice(&mut self) -> Option<Choice> {
        let (mut index, mut delta, mut finish_reason) = (None, None, None);
        let mut seen = Seen::default();
        self.object(|r, key| match key {
            "index" => r.field(&mut seen, 0, &mut index, Self::whole_number),
            "delta" => r.field(&mut seen, 1, &mut delta, Self::delta),
            "finish_reason" => r.field(&mut seen, 2, &mut finish_reason, Self::string),
            _ => r.skip(0),
        })?;
        Some(Choice {
            index,
            delta,
            finish_reason,
        })
    }

    fn delta(&mut self) -> Option<Delta> {
        let (mut reasoning_content, mut reasoning, mut content) = (None, None, None);
        let (mut tool_calls, mut seen) = (None, Seen::default());
        self.object(|r, key| match key {
            "reasoning_content" => r.field(&mut seen, 0, &mut reasoning_content, Self::string),
            "reasoning" => r.field(&mut seen, 1, &mut reasoning, Self::string),
            "content" => r.field(&mut seen, 2, &mut content, Self::string),
            "tool_calls" => r.field(&mut seen, 3, &mut tool_calls, |r| {
                r.array_of(Self::call_entry)
            }),
            _ => r.skip(0),
        })?;
        Some(Delta {
            reasoning_content,
            reasoning,
            content,
            tool_calls,
        })
    }

    fn call_entry(&mut self) -> Option<CallEntry> {
        let (mut index, mut id, mut function) = (None, None, None);
        let (mut name, mut arguments, mut seen) = (None, None, Seen::default());
        self.object(|r, key| match key {
            "index" => r.field(&mut seen, 0, &mut index, Self::whole_number),
            "id" => r.field(&mut seen, 1, &mut id, Self::string),
            "function" => r.field(&mut seen, 2, &mut function, Self::function_part),
            "name" => r.field(&mut seen, 3, &mut name, Self::string),
            "arguments" => r.field(&mut seen, 4, &mut arguments, Self::string),
            // Kept as a `Value`, which serde builds.
            "extra_content" => r.null_only(&mut seen, 5),
            _ => r.skip(0),
        })?;
        Some(CallEntry {
            index,
            id,
            function,
            name,
            arguments,
            extra_content: None,
        })
    }

    fn function_part(&mut self) -> Option<FunctionPart> {
        let (mut name, mut arguments, mut seen) = (None, None, Seen::default());
        self.object(|r, key| match key {
            "name" => r.field(&mut seen, 0, &mut name, Self::string),
            "arguments" => r.field(&mut seen, 1, &mut arguments, Self::string),
            _ => r.skip(0),
        })?;
        Some(FunctionPart { name, arguments })
    }

    fn usage(&mut self) -> Option<UsageCounts> {
        let (mut prompt_tokens, mut completion_tokens, mut total_tokens) = (None, None, None);
        let mut seen = Seen::default();
        self.object(|r, key| match key {
            "prompt_tokens" => r.field(&mut seen, 0, &mut prompt_tokens, Self::whole_number),
            "completion_tokens" => {
                r.field(&mut seen, 1, &mut completion_tokens, Self::whole_number)
            }
            "total_tokens" => r.field(&mut seen, 2, &mut total_tokens, Self::whole_number),
            _ => r.skip(0),
        })?;
        Some(UsageCounts {
            prompt_tokens,
            completion_tokens,
            total_tokens,
        })
    }

    // ---- JSON ----

    fn peek(&self) -> Option<u8> {
        self.bytes.get(self.at).copied()
    }

    /// Steps over JSON's four blank bytes.
    fn blanks(&mut self) {
        while let Some(b' ' | b'\n' | b'\r' | b'\t') = self.peek() {
            self.at += 1;
        }
    }

    /// The next byte that is not blank, consumed.
    fn token(&mut self) -> Option<u8> {
        self.blanks();
        let byte = self.peek()?;
        self.at += 1;
        Some(byte)
    }

    fn expect(&mut self, byte: u8) -> Option<()> {
        (self.token()? == byte).then_some(())
    }

    /// An object; `member` reads each value, given its key.
    fn object(&mut self, mut member: impl FnMut(&mut Self, &'a str) -> Option<()>) -> Option<()> {
        self.items(b'{', b'}', |r| {
            r.expect(b'"')?;
            let key = r.plain_key()?;
            r.expect(b':')?;
            member(r, key)
        })
    }

    /// An array; `element` reads each element.
    fn array(&mut self, element: impl FnMut(&mut Self) -> Option<()>) -> Option<()> {
        self.items(b'[', b']', element)
    }

    /// `open`, `item`s separated by commas (none after the last), `close`.
    fn items(
        &mut self,
        open: u8,
        close: u8,
        mut item: impl FnMut(&mut Self) -> Option<()>,
    ) -> Option<()> {
        self.expect(open)?;
        self.blanks();
        if self.peek()? == close {
            self.at += 1;
            return Some(());
        }
        loop {
            item(self)?;
            match self.token()? {
                b',' => {}
                byte if byte == close => return Some(()),
                _ => return None,
            }
        }
    }

    fn array_of<T>(&mut self, mut read: impl FnMut(&mut Self) -> Option<T>) -> Option<Vec<T>> {
        let mut items = Vec::new();
        self.array(|r| {
            items.push(read(r)?);
            Some(())
        })?;
        Some(items)
    }

    /// A member's value into `slot` (`null` as `None`), the first time
    /// the object has member number `member`.
    fn field<T>(
        &mut self,
        seen: &mut Seen,
        member: u8,
        slot: &mut Option<T>,
        read: impl FnOnce(&mut Self) -> Option<T>,
    ) -> Option<()> {
        seen.first(member)?;
        *slot = self.nullable(read)?;
        Some(())
    }

    /// A member only `null` of which is read here (anything else is left
    /// to serde), the first time the object has member number `member`.
    fn null_only(&mut self, seen: &mut Seen, member: u8) -> Option<()> {
        seen.first(member)?;
        self.null().then_some(())
    }

    /// `null` as `None`, anything else read by `read` (serde's `Option`).
    fn nullable<T>(&mut self, read: impl FnOnce(&mut Self) -> Option<T>) -> Option<Option<T>> {
        if self.null() {
            Some(None)
        } else {
            read(self).map(Some)
        }
    }

    /// Consumes `null` if it comes next.
    fn null(&mut self) -> bool {
        self.blanks();
        let found = self
            .bytes
            .get(self.at..)
            .is_some_and(|rest| rest.starts_with(b"null"));
        if found {
            self.at += 4;
        }
        found
    }

    fn literal(&mut self, word: &[u8]) -> Option<()> {
        let found = self.bytes.get(self.at..)?.starts_with(word);
        self.at += word.len();
        found.then_some(())
    }

    /// A string's text.
    fn string(&mut self) -> Option<String> {
        self.expect(b'"')?;
        let open = self.at - 1;
        let escaped = self.past_string()?;
        let inside = self.text.get(open + 1..self.at - 1)?;
        if escaped {
            unescape(inside)
        } else {
            Some(inside.to_owned())
        }
    }

    /// A key, after its opening quote. A key with an escape is `None`:
    /// serde compares keys unescaped, and servers do not escape them.
    fn plain_key(&mut self) -> Option<&'a str> {
        let start = self.at;
        if self.past_string()? {
            return None;
        }
        self.text.get(start..self.at - 1)
    }

    /// Moves past the closing quote of a string whose opening quote is
    /// read; whether it had escapes. `None` for what JSON forbids in a
    /// string: a raw control character, an unknown escape, no end.
    fn past_string(&mut self) -> Option<bool> {
        let mut escaped = false;
        loop {
            self.at += plain_run(self.bytes.get(self.at..)?);
            let byte = *self.bytes.get(self.at)?;
            self.at += 1;
            match byte {
                b'"' => return Some(escaped),
                b'\\' => {
                    escaped = true;
                    self.escape()?;
                }
                0..=0x1F => return None,
                _ => {}
            }
        }
    }

    /// An escape, after its backslash. Like serde_json skipping a string,
    /// a `\u` needs four hex digits, not a valid code point.
    fn escape(&mut self) -> Option<()> {
        let byte = *self.bytes.get(self.at)?;
        self.at += 1;
        match byte {
            b'"' | b'\\' | b'/' | b'b' | b'f' | b'n' | b'r' | b't' => Some(()),
            b'u' => {
                let hex = self.bytes.get(self.at..self.at + 4)?;
                self.at += 4;
                hex.iter().all(u8::is_ascii_hexdigit).then_some(())
            }
            _ => None,
        }
    }

    /// A number serde reads into a `u64`: digits without a leading zero,
    /// fraction or exponent, that fit. (serde also takes `-0`; that is
    /// left to it.)
    fn whole_number(&mut self) -> Option<u64> {
        self.blanks();
        let start = self.at;
        let mut value: u64 = 0;
        while let Some(digit @ b'0'..=b'9') = self.peek() {
            value = value
                .checked_mul(10)?
                .checked_add(u64::from(digit - b'0'))?;
            self.at += 1;
        }
        let digits = self.at - start;
        let leading_zero = digits > 1 && self.bytes.get(start) == Some(&b'0');
        let float = matches!(self.peek(), Some(b'.' | b'e' | b'E'));
        (digits > 0 && !leading_zero && !float).then_some(value)
    }

    /// Steps over any value, checking it is JSON as serde_json does when it
    /// skips one.
    fn skip(&mut self, depth: u32) -> Option<()> {
        self.blanks();
        match self.peek()? {
            b'"' => {
                self.at += 1;
                self.past_string().map(drop)
            }
            b'{' if depth < MAX_SKIP_DEPTH => self.object(|r, _| r.skip(depth + 1)),
            b'[' if depth < MAX_SKIP_DEPTH => self.array(|r| r.skip(depth + 1)),
            b't' => self.literal(b"true"),
            b'f' => self.literal(b"false"),
            b'n' => self.literal(b"null"),
            b'-' | b'0'..=b'9' => self.skip_number(),
            _ => None,
        }
    }

    /// `-? (0 | [1-9][0-9]*) (. [0-9]+)? ([eE] [+-]? [0-9]+)?`
    fn skip_number(&mut self) -> Option<()> {
        if self.peek() == Some(b'-') {
            self.at += 1;
        }
        match self.peek()? {
            b'0' => self.at += 1,
            b'1'..=b'9' => {
                self.digits();
            }
            _ => return None,
        }
        if self.peek() == Some(b'.') {
            self.at += 1;
            if self.digits() == 0 {
                return None;
            }
        }
        if let Some(b'e' | b'E') = self.peek() {
            self.at += 1;
            if let Some(b'+' | b'-') = self.peek() {
                self.at += 1;
            }
            if self.digits() == 0 {
                return None;
            }
        }
        Some(())
    }

    /// Steps over digits; how many.
    fn digits(&mut self) -> usize {
        let start = self.at;
        while let Some(b'0'..=b'9') = self.peek() {
            self.at += 1;
        }
        self.at - start
    }
}

/// The text of a string's inside whose escapes [`Reader::past_string`]
/// has checked. `None` for a `\\u` escape that is half of a surrogate pair
/// without the other half, which serde refuses too.
fn unescape(inside: &str) -> Option<String> {
    let mut text = String::with_capacity(inside.len());
    let mut rest = inside;
    let mut pending_high: Option<u16> = None;
    while let Some(at) = rest.find('\\') {
        let plain = rest.get(..at)?;
        if pending_high.is_some() && !plain.is_empty() {
            return None;
        }
        text.push_str(plain);
        let kind = *rest.as_bytes().get(at + 1)?;
        rest = rest.get(at + 2..)?;
        if kind == b'u' {
            let unit = u16::from_str_radix(rest.get(..4)?, 16).ok()?;
            rest = rest.get(4..)?;
            match (pending_high.take(), unit) {
                (None, 0xD800..=0xDBFF) => pending_high = Some(unit),
                (Some(high), 0xDC00..=0xDFFF) => {
                    let code =
                        0x10000 + ((u32::from(high) - 0xD800) << 10) + (u32::from(unit) - 0xDC00);
                    text.push(char::from_u32(code)?);
                }
                (None, _) => text.push(char::from_u32(u32::from(unit))?),
                (Some(_), _) => return None,
            }
            continue;
        }
        if pending_high.is_some() {
            return None;
        }
        text.push(match kind {
            b'"' => '"',
            b'\\' => '\\',
            b'/' => '/',
            b'b' => '\u{8}',
            b'f' => '\u{c}',
            b'n' => '\n',
            b'r' => '\r',
            b't' => '\t',
            _ => return None,
        });
    }
    if pending_high.is_some() && !rest.is_empty() {
        return None;
    }
    text.push_str(rest);
    pending_high.is_none().then_some(text)
}

#[cfg(test)]
mod tests;
