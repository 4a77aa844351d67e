//! Cutting a streamed body into frames, incrementally.
//!
//! Bytes arrive from the network in arbitrary pieces: a piece may end in the
//! middle of a line, between the `\r` and `\n` of a line break, or inside a
//! multi-byte UTF-8 character. [`FrameReader`] buffers exactly what it must
//! and produces the same frames however the body was split.
//!
//! Two framings are supported:
//! - **SSE**, following the WHATWG `text/event-stream` parsing rules: lines
//!   end in `\n`, `\r\n` or a lone `\r`; `data:` lines (one optional space
//!   after the colon removed) are joined with `\n`; `event:` names the frame;
//!   lines starting with `:` are comments; `id:`, `retry:` and unknown fields
//!   are ignored; a blank line dispatches the frame if it has data; a UTF-8
//!   byte-order mark at the very start is dropped.
//! - **NDJSON**: one frame per non-blank `\n`-terminated line (a trailing
//!   `\r` is removed). A lone `\r` is *not* a line break here: JSON allows it
//!   as whitespace inside a value.
//!
//! Text is decoded lossily (invalid UTF-8 becomes U+FFFD), so a hostile or
//! broken server can never make the reader fail. Each frame is also bounded
//! in size ([`DEFAULT_MAX_FRAME_BYTES`]): a frame that grows past the bound is
//! dropped and counted in [`FrameReader::oversized_frames`], so a server that
//! never ends its event cannot grow memory without bound. The transport
//! ends a stream with an error once a frame was dropped: what follows it
//! cannot be read as a whole answer.

use crate::codec::{Frame, Framing};

/// The default bound on one frame (its data plus the line being read).
pub const DEFAULT_MAX_FRAME_BYTES: usize = 16 * 1024 * 1024;

const BOM: &[u8] = b"\xEF\xBB\xBF";

/// Incremental framer: feed it bytes as they arrive, get whole frames out.
#[derive(Debug)]
pub struct FrameReader {
    framing: Framing,
    max_frame_bytes: usize,
    /// The bytes of the line being read (no terminator yet).
    line: Vec<u8>,
    /// The previous piece ended in `\r`: a `\n` starting the next piece
    /// belongs to the same line break (SSE only).
    skip_lf: bool,
    /// No line has been completed yet: a BOM may still open the body.
    at_start: bool,
    /// The rest of the current line is thrown away (it overflowed).
    discard_line: bool,
    /// SSE: the current frame overflowed; its lines are ignored until the
    /// blank line that ends it.
    discard_frame: bool,
    /// SSE: the data lines of the current frame, joined with `\n`.
    data: String,
    has_data: bool,
    event: Option<String>,
    oversized: u64,
}

impl FrameReader {
    pub fn new(framing: Framing) -> Self {
        Self::with_max_frame_bytes(framing, DEFAULT_MAX_FRAME_BYTES)
    }

    /// A reader that drops frames larger than `max_frame_bytes`.
    pub fn with_max_frame_bytes(framing: Framing, max_frame_bytes: usize) -> Self {
        FrameReader {
            framing,
            max_frame_bytes,
            line: Vec::new(),
            skip_lf: false,
            at_start: true,
            discard_line: false,
            discard_frame: false,
            data: String::new(),
            has_data: false,
            event: None,
            oversized: 0,
        }
    }

    /// Frames dropped so far because they exceeded the size bound.
    /// The bound on one frame, in bytes.
    pub fn max_frame_bytes(&self) -> usize {
        self.max_frame_bytes
    }

    pub fn oversized_frames(&self) -> u64 {
        self.oversized
    }

    /// Bytes held for the frame being read (its data and the unfinished
    /// line). The bound counts the bytes as they arrive; each invalid
    /// UTF-8 byte is held as a three-byte U+FFFD, so a frame of nothing but
    /// invalid bytes may hold up to three times the bound.
    pub fn buffered_bytes(&self) -> usize {
        self.data.len() + self.line.len()
    }

    /// Appends every frame completed by `bytes` to `out`.
    pub fn feed(&mut self, bytes: &[u8], out: &mut Vec<Frame>) {
        let mut rest = bytes;
        if self.skip_lf && !rest.is_empty() {
            self.skip_lf = false;
            if rest[0] == b'\n' {
                rest = &rest[1..];
            }
        }
        while !rest.is_empty() {
            let Some(pos) = self.find_terminator(rest) else {
                self.extend_line(rest);
                return;
            };
            let (part, tail) = rest.split_at(pos);
            rest = &tail[1..];
            if tail[0] == b'\r' {
                // `\r\n` is one line break; when the `\n` has not arrived
                // yet, remember to swallow it.
                match rest.first() {
                    Some(b'\n') => rest = &rest[1..],
                    Some(_) => {}
                    None => self.skip_lf = true,
                }
            }
            self.end_line(part, out);
        }
    }

    /// Flushes a last frame that the body ended without terminating: a last
    /// unterminated line is read as a line, then a pending SSE frame with
    /// data is dispatched. The reader is then ready for a new body.
    pub fn finish(&mut self, out: &mut Vec<Frame>) {
        if self.discard_line {
            self.discard_line = false;
            self.line.clear();
        } else if !self.line.is_empty() {
            let line = std::mem::take(&mut self.line);
            self.process_line(&line, out);
            self.line = line;
            self.line.clear();
        }
        // Only an SSE data line outside a dropped frame sets `has_data`,
        // and `dispatch` emits a frame only when it is set.
        self.dispatch(out);
        self.data.clear();
        self.has_data = false;
        self.event = None;
        self.discard_frame = false;
        self.skip_lf = false;
        self.at_start = true;
    }

    fn find_terminator(&self, bytes: &[u8]) -> Option<usize> {
        find_line_break(bytes, self.framing == Framing::Sse)
    }

    /// Bytes of the current line, with no terminator among them yet.
    fn extend_line(&mut self, part: &[u8]) {
        if self.discard_line {
            return;
        }
        if self.data.len() + self.line.len() + part.len() > self.max_frame_bytes {
            let first = self.line.first().or(part.first()).copied();
            self.overflow(first);
            return;
        }
        self.line.extend_from_slice(part);
    }

    /// The current line ended; `part` is its last bytes.
    fn end_line(&mut self, part: &[u8], out: &mut Vec<Frame>) {
        if self.discard_line {
            self.discard_line = false;
            // The discarded line was not blank, so it ends no frame; it
            // was the body's first line all the same.
            self.at_start = false;
            return;
        }
        if self.data.len() + self.line.len() + part.len() > self.max_frame_bytes {
            let first = self.line.first().or(part.first()).copied();
            self.overflow(first);
            self.discard_line = false;
            self.at_start = false;
            self.line.clear();
            return;
        }
        if self.line.is_empty() {
            // The common case: the whole line arrived in one piece.
            self.process_line(part, out);
        } else {
            let mut line = std::mem::take(&mut self.line);
            line.extend_from_slice(part);
            self.process_line(&line, out);
            // Keep the allocation for the next split line.
            line.clear();
            self.line = line;
        }
    }

    /// The frame (or, for an SSE comment, just the line) grew past the bound.
    fn overflow(&mut self, first_byte: Option<u8>) {
        self.line.clear();
        self.discard_line = true;
        if self.framing == Framing::Sse && first_byte == Some(b':') {
            // An oversized comment carries nothing: skip the line, keep the
            // frame.
            return;
        }
        if !self.discard_frame {
            self.oversized += 1;
            tracing::warn!(
                max_frame_bytes = self.max_frame_bytes,
                "dropping a streamed frame that exceeds the size bound"
            );
        }
        if self.framing == Framing::Sse {
            self.discard_frame = true;
            self.data.clear();
            self.has_data = false;
            self.event = None;
        }
    }

    fn process_line(&mut self, line: &[u8], out: &mut Vec<Frame>) {
        let mut line = line;
        if self.at_start {
            self.at_start = false;
            line = line.strip_prefix(BOM).unwrap_or(line);
        }
        match self.framing {
            Framing::Sse => self.process_sse_line(line, out),
            Framing::Ndjson => {
                let line = line.strip_suffix(b"\r").unwrap_or(line);
                if line.iter().all(u8::is_ascii_whitespace) {
                    return;
                }
                let mut data = String::with_capacity(line.len());
                push_lossy(&mut data, line);
                out.push(Frame { event: None, data });
            }
        }
    }

    fn process_sse_line(&mut self, line: &[u8], out: &mut Vec<Frame>) {
        if self.discard_frame {
            if line.is_empty() {
                // The blank line ends the dropped frame.
                self.discard_frame = false;
            }
            return;
        }
        if line.is_empty() {
            self.dispatch(out);
            return;
        }
        if line[0] == b':' {
            return;
        }
        let (field, value) = match line.iter().position(|&b| b == b':') {
            Some(colon) => {
                let value = &line[colon + 1..];
                (&line[..colon], value.strip_prefix(b" ").unwrap_or(value))
            }
            // A line without a colon is a field with an empty value.
            None => (line, &b""[..]),
        };
        match field {
            b"data" => {
                if self.has_data {
                    self.data.push('\n');
                }
                push_lossy(&mut self.data, value);
                self.has_data = true;
            }
            b"event" => {
                self.event = if value.is_empty() {
                    None
                } else {
                    Some(String::from_utf8_lossy(value).into_owned())
                };
            }
            _ => {}
        }
    }

    /// A blank line: emit the frame if it has data, and start a new one.
    fn dispatch(&mut self, out: &mut Vec<Frame>) {
        let event = self.event.take();
        if self.has_data {
            self.has_data = false;
            out.push(Frame {
                event,
                data: std::mem::take(&mut self.data),
            });
        }
    }
}

/// Appends `bytes` as text, invalid UTF-8 becoming U+FFFD.
///
/// Valid text (the norm) is checked by `str::from_utf8`, which skips ASCII a
/// word at a time; `String::from_utf8_lossy` walks it byte by byte, which
/// showed in the decode profile.
fn push_lossy(text: &mut String, bytes: &[u8]) {
    match std::str::from_utf8(bytes) {
        Ok(valid) => text.push_str(valid),
        Err(_) => text.push_str(&String::from_utf8_lossy(bytes)),
    }
}

/// The position of the first `\n` in `bytes` (or `\r`, when `also_cr`).
///
/// Lines of a streamed body are long (a whole JSON chunk each), and a
/// byte-by-byte search for their end was a tenth of the decode profile;
/// memchr searches a vector register's width at a time.
fn find_line_break(bytes: &[u8], also_cr: bool) -> Option<usize> {
    if also_cr {
        memchr::memchr2(b'\n', b'\r', bytes)
    } else {
        memchr::memchr(b'\n', bytes)
    }
}

#[cfg(test)]
mod tests {
    use super::find_line_break;

    /// The search finds exactly what a bytewise search finds, wherever the
    /// break sits, including among high bytes (UTF-8).
    #[test]
    fn line_break_search_matches_a_bytewise_search() {
        let fillers: [&[u8]; 3] = [
            b"abcdefgh",
            "é日本語✓".as_bytes(),
            &[0x8a, 0x8d, 0x0b, 0x0c, 0xff],
        ];
        for filler in fillers {
            for len in 0..40 {
                let base: Vec<u8> = filler.iter().copied().cycle().take(len).collect();
                for at in 0..=len {
                    for brk in [b'\n', b'\r'] {
                        let mut bytes = base.clone();
                        bytes.insert(at, brk);
                        for also_cr in [false, true] {
                            let expected = bytes
                                .iter()
                                .position(|&b| b == b'\n' || (also_cr && b == b'\r'));
                            assert_eq!(
                                find_line_break(&bytes, also_cr),
                                expected,
                                "{bytes:?} also_cr={also_cr}"
                            );
                        }
                    }
                }
                assert_eq!(find_line_break(&base, true), None);
            }
        }
    }
}
