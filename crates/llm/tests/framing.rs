#![allow(clippy::unwrap_used, clippy::expect_used)] // a panic in a test is a test failure

//! The framer against the WHATWG event-stream rules and NDJSON, with every
//! body also fed split at every byte position and at random multi-splits.

use homeagent_llm::Frame;
use homeagent_llm::codec::Framing;
use homeagent_llm::framing::FrameReader;

fn frame(event: Option<&str>, data: &str) -> Frame {
    Frame {
        event: event.map(str::to_owned),
        data: data.to_owned(),
    }
}

/// Feeds `pieces` one after the other, then finishes.
fn read_pieces(framing: Framing, max: Option<usize>, pieces: &[&[u8]]) -> (Vec<Frame>, u64) {
    let mut reader = match max {
        Some(max) => FrameReader::with_max_frame_bytes(framing, max),
        None => FrameReader::new(framing),
    };
    let mut out = Vec::new();
    for piece in pieces {
        reader.feed(piece, &mut out);
    }
    reader.finish(&mut out);
    (out, reader.oversized_frames())
}

fn read(framing: Framing, body: &[u8]) -> Vec<Frame> {
    read_pieces(framing, None, &[body]).0
}

/// splitmix64: a tiny seeded generator, so failures reproduce.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
}

/// Asserts that `body` gives `expected` whole, split in two at every byte
/// position, byte by byte, and split at random points (seeded).
fn assert_split_invariant(framing: Framing, max: Option<usize>, body: &[u8], expected: &[Frame]) {
    let (whole, whole_oversized) = read_pieces(framing, max, &[body]);
    assert_eq!(whole, expected, "whole body");
    for cut in 0..=body.len() {
        let (a, b) = body.split_at(cut);
        let (got, oversized) = read_pieces(framing, max, &[a, b]);
        assert_eq!(got, expected, "split at byte {cut}");
        assert_eq!(
            oversized, whole_oversized,
            "oversized count, split at {cut}"
        );
    }
    let bytes: Vec<&[u8]> = body.chunks(1).collect();
    assert_eq!(
        read_pieces(framing, max, &bytes).0,
        expected,
        "byte by byte"
    );

    let mut rng = Rng(0x5EED_F4A3);
    for round in 0..300 {
        let mut cuts: Vec<usize> = (0..1 + rng.below(12))
            .map(|_| rng.below(body.len() + 1))
            .collect();
        cuts.sort_unstable();
        let mut pieces = Vec::new();
        let mut start = 0;
        for cut in cuts {
            pieces.push(&body[start..cut]);
            start = cut;
        }
        pieces.push(&body[start..]);
        let (got, oversized) = read_pieces(framing, max, &pieces);
        assert_eq!(got, expected, "random split round {round}: {pieces:?}");
        assert_eq!(oversized, whole_oversized, "random split round {round}");
    }
}

/// A realistic body: OpenRouter-style keep-alive comments, an Anthropic-style
/// named event, multi-byte text, a multi-line data field, ids and retries,
/// and both `\n` and `\r\n` line ends.
const REALISTIC_SSE: &str = concat!(
    ": OPENROUTER PROCESSING\n",
    "\n",
    "retry: 3000\n",
    "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"Grüß dich, 世界 🦀\"}}]}\n",
    "\n",
    "event: content_block_delta\r\n",
    "id: 42\r\n",
    "data: {\"type\":\"content_block_delta\",\"index\":1,\r\n",
    "data:\"delta\":{\"type\":\"input_json_delta\",\"partial_json\":\"{\\\"city\\\": \\\"Zürich\"}}\r\n",
    "\r\n",
    ": ping\n",
    "data:  leading space kept after the first\n",
    "\n",
    "data: [DONE]\n",
    "\n",
);

fn realistic_expected() -> Vec<Frame> {
    vec![
        frame(
            None,
            "{\"choices\":[{\"index\":0,\"delta\":{\"content\":\"Grüß dich, 世界 🦀\"}}]}",
        ),
        frame(
            Some("content_block_delta"),
            "{\"type\":\"content_block_delta\",\"index\":1,\n\"delta\":{\"type\":\"input_json_delta\",\"partial_json\":\"{\\\"city\\\": \\\"Zürich\"}}",
        ),
        frame(None, " leading space kept after the first"),
        frame(None, "[DONE]"),
    ]
}

#[test]
fn realistic_sse_body_gives_the_same_frames_however_it_is_split() {
    assert_split_invariant(
        Framing::Sse,
        None,
        REALISTIC_SSE.as_bytes(),
        &realistic_expected(),
    );
}

#[test]
fn crlf_line_ends() {
    let body = b"event: message_start\r\ndata: {\"a\":1}\r\n\r\ndata: two\r\ndata: lines\r\n\r\n";
    let expected = [
        frame(Some("message_start"), "{\"a\":1}"),
        frame(None, "two\nlines"),
    ];
    assert_split_invariant(Framing::Sse, None, body, &expected);
}

#[test]
fn cr_only_line_ends() {
    let body = b"data: first\r\rdata: second\rdata: part\r\r";
    let expected = [frame(None, "first"), frame(None, "second\npart")];
    assert_split_invariant(Framing::Sse, None, body, &expected);
}

#[test]
fn crlf_split_between_feeds_is_one_line_break() {
    // Were the `\n` after the split taken as a second (blank) line, "a"
    // would be dispatched alone and "b" would become a frame of its own.
    let (frames, _) = read_pieces(Framing::Sse, None, &[b"data: a\r", b"\ndata: b\r\n\r\n"]);
    assert_eq!(frames, [frame(None, "a\nb")]);
    // An empty feed between the halves changes nothing.
    let (frames, _) = read_pieces(
        Framing::Sse,
        None,
        &[b"data: a\r", b"", b"\ndata: b\r\n\r\n"],
    );
    assert_eq!(frames, [frame(None, "a\nb")]);
}

#[test]
fn comments_and_ignored_fields_dispatch_nothing() {
    let body = b": hello\n:\nid: 7\nretry: 10\nfoo: bar\n\n: only a comment\n\ndata: x\n\n";
    assert_split_invariant(Framing::Sse, None, body, &[frame(None, "x")]);
}

#[test]
fn field_value_rules() {
    let body = concat!(
        "data:no space\n\n",
        "data:  two spaces\n\n",
        "data\n\n",             // no colon: a data field with an empty value
        "data:\ndata:\n\n",     // two empty data lines
        "data: a:b: c\n\n",     // only the first colon separates
        "DATA: wrong case\n\n", // field names are case-sensitive
    );
    let expected = [
        frame(None, "no space"),
        frame(None, " two spaces"),
        frame(None, ""),
        frame(None, "\n"),
        frame(None, "a:b: c"),
    ];
    assert_split_invariant(Framing::Sse, None, body.as_bytes(), &expected);
}

#[test]
fn event_without_data_is_not_dispatched_and_does_not_leak() {
    let body = b"event: ping\n\ndata: after\n\nevent: a\nevent: b\ndata: last wins\n\n";
    let expected = [frame(None, "after"), frame(Some("b"), "last wins")];
    assert_split_invariant(Framing::Sse, None, body, &expected);
}

#[test]
fn bom_at_the_very_start_is_dropped() {
    let body = b"\xEF\xBB\xBFdata: x\n\n";
    assert_split_invariant(Framing::Sse, None, body, &[frame(None, "x")]);
    // A BOM opening the first line would otherwise turn `data` into an
    // unknown field; anywhere else it is just a character.
    let body = b"\xEF\xBB\xBFevent: e\ndata: \xEF\xBB\xBFy\n\n\xEF\xBB\xBFdata: z\n\n";
    let expected = [frame(Some("e"), "\u{FEFF}y")];
    assert_split_invariant(Framing::Sse, None, body, &expected);
}

#[test]
fn missing_trailing_blank_line_is_flushed_by_finish() {
    assert_split_invariant(
        Framing::Sse,
        None,
        b"data: a\n\ndata: b\n",
        &[frame(None, "a"), frame(None, "b")],
    );
    // Not even a line break at the end.
    assert_split_invariant(
        Framing::Sse,
        None,
        b"event: x\ndata: tail",
        &[frame(Some("x"), "tail")],
    );
    // A pending event name alone is not a frame.
    assert_split_invariant(
        Framing::Sse,
        None,
        b"data: a\n\nevent: x\n",
        &[frame(None, "a")],
    );
}

#[test]
fn feed_alone_holds_back_an_unterminated_frame() {
    let mut reader = FrameReader::new(Framing::Sse);
    let mut out = Vec::new();
    reader.feed(b"data: a\n\ndata: b\n", &mut out);
    assert_eq!(out, [frame(None, "a")]);
    reader.finish(&mut out);
    assert_eq!(out, [frame(None, "a"), frame(None, "b")]);
}

#[test]
fn invalid_utf8_is_replaced_not_fatal() {
    let body = b"data: ok \xFF\xFE end\n\ndata: cut \xE4\xB8\n\n";
    let expected = [
        frame(None, "ok \u{FFFD}\u{FFFD} end"),
        frame(None, "cut \u{FFFD}"),
    ];
    assert_split_invariant(Framing::Sse, None, body, &expected);
}

#[test]
fn oversized_frame_is_dropped_and_counted() {
    let big = "x".repeat(100);
    let body = format!("data: small\n\ndata: {big}\ndata: more\n\ndata: after\n\n");
    let (frames, oversized) = read_pieces(Framing::Sse, Some(64), &[body.as_bytes()]);
    assert_eq!(frames, [frame(None, "small"), frame(None, "after")]);
    assert_eq!(oversized, 1);
    // An unterminated line is held only up to the bound.
    let mut reader = FrameReader::with_max_frame_bytes(Framing::Ndjson, 64);
    let mut out = Vec::new();
    reader.feed(&[b'z'; 60], &mut out);
    assert_eq!(reader.buffered_bytes(), 60);
    reader.feed(&[b'z'; 60], &mut out);
    assert_eq!(reader.buffered_bytes(), 0);
    assert_split_invariant(
        Framing::Sse,
        Some(64),
        body.as_bytes(),
        &[frame(None, "small"), frame(None, "after")],
    );
}

/// The bound counts a frame's bytes exactly: a line of exactly the bound
/// is read, one byte more is dropped and counted, however the body is cut
/// (whole, the line held unterminated before its end arrives, byte by
/// byte).
#[test]
fn a_frame_of_exactly_the_bound_is_read_and_one_byte_more_is_not() {
    const MAX: usize = 64;
    for (framing, prefix, end) in [
        (Framing::Ndjson, "", "\n"),
        (Framing::Sse, "data: ", "\n\n"),
    ] {
        let value = "v".repeat(MAX - prefix.len());
        let at_bound = format!("{prefix}{value}{end}{prefix}next{end}");
        let kept = [frame(None, &value), frame(None, "next")];
        assert_split_invariant(framing, Some(MAX), at_bound.as_bytes(), &kept);
        assert_eq!(
            read_pieces(framing, Some(MAX), &[at_bound.as_bytes()]).1,
            0,
            "{framing:?}"
        );

        let over = format!("{prefix}{value}v{end}{prefix}next{end}");
        let dropped = [frame(None, "next")];
        assert_split_invariant(framing, Some(MAX), over.as_bytes(), &dropped);
        assert_eq!(
            read_pieces(framing, Some(MAX), &[over.as_bytes()]).1,
            1,
            "{framing:?}"
        );
    }
}

/// A first piece past the bound, with no line end yet, is dropped as it
/// arrives: nothing of it is held while the reader waits for the end.
#[test]
fn an_unterminated_first_piece_past_the_bound_is_not_held() {
    let mut reader = FrameReader::with_max_frame_bytes(Framing::Ndjson, 64);
    let mut out = Vec::new();
    reader.feed(&[b'z'; 65], &mut out);
    assert_eq!(reader.buffered_bytes(), 0);
    assert_eq!(reader.oversized_frames(), 1);
    reader.feed(b"zz\n{}\n", &mut out);
    assert_eq!(out, [frame(None, "{}")]);
}

/// The default bound is 16 MiB: a frame of that size is read whole, one
/// byte more is dropped.
#[test]
fn the_default_bound_is_sixteen_mebibytes() {
    const SIXTEEN_MIB: usize = 16 << 20;
    for (len, read_whole) in [(SIXTEEN_MIB, true), (SIXTEEN_MIB + 1, false)] {
        let mut reader = FrameReader::new(Framing::Ndjson);
        let mut out = Vec::new();
        let mut body = vec![b'q'; len];
        body.push(b'\n');
        reader.feed(&body, &mut out);
        assert_eq!(out.len(), usize::from(read_whole), "a line of {len} bytes");
        assert_eq!(reader.oversized_frames(), u64::from(!read_whole));
        if let Some(frame) = out.first() {
            assert_eq!(frame.data.len(), len);
        }
    }
}

#[test]
fn frame_growing_past_the_bound_over_many_lines_is_dropped() {
    // No single line is large; together they are.
    let body = format!("{}\ndata: after\n\n", "data: 0123456789\n".repeat(10));
    assert_split_invariant(
        Framing::Sse,
        Some(64),
        body.as_bytes(),
        &[frame(None, "after")],
    );
    assert_eq!(read_pieces(Framing::Sse, Some(64), &[body.as_bytes()]).1, 1);
}

#[test]
fn oversized_comment_is_skipped_without_dropping_the_frame() {
    let body = format!("data: kept\n: {}\ndata: too\n\n", "p".repeat(200));
    let (frames, oversized) = read_pieces(Framing::Sse, Some(64), &[body.as_bytes()]);
    assert_eq!(frames, [frame(None, "kept\ntoo")]);
    assert_eq!(oversized, 0);
}

#[test]
fn endless_line_from_a_hostile_server_does_not_accumulate() {
    // 64 MiB of one data line, in 64 KiB pieces, against the default 16 MiB
    // bound: dropped and counted, and the stream recovers at the blank line.
    let mut reader = FrameReader::new(Framing::Sse);
    let mut out = Vec::new();
    reader.feed(b"data: ", &mut out);
    let piece = vec![b'a'; 64 * 1024];
    for _ in 0..1024 {
        reader.feed(&piece, &mut out);
        assert!(reader.buffered_bytes() <= 16 * 1024 * 1024);
    }
    assert_eq!(
        reader.buffered_bytes(),
        0,
        "the overflowing line is not kept"
    );
    reader.feed(b"\n\ndata: next\n\n", &mut out);
    reader.finish(&mut out);
    assert_eq!(out, [frame(None, "next")]);
    assert_eq!(reader.oversized_frames(), 1);
}

#[test]
fn ndjson_lines_become_frames() {
    let body = concat!(
        "{\"message\":{\"content\":\"Grüß\"},\"done\":false}\n",
        "\n",
        "   \n",
        "{\"message\":{\"content\":\" 世界\"},\"done\":false}\r\n",
        "{\"done\":true}",
    );
    let expected = [
        frame(None, "{\"message\":{\"content\":\"Grüß\"},\"done\":false}"),
        frame(None, "{\"message\":{\"content\":\" 世界\"},\"done\":false}"),
        frame(None, "{\"done\":true}"),
    ];
    assert_split_invariant(Framing::Ndjson, None, body.as_bytes(), &expected);
}

#[test]
fn ndjson_lone_cr_is_not_a_line_break_and_bom_is_dropped() {
    let body = b"\xEF\xBB\xBF{\"a\":1,\r\"b\":2}\n";
    assert_split_invariant(
        Framing::Ndjson,
        None,
        body,
        &[frame(None, "{\"a\":1,\r\"b\":2}")],
    );
}

#[test]
fn ndjson_oversized_line_is_dropped_and_counted() {
    let body = format!(
        "{{\"a\":1}}\n{{\"big\":\"{}\"}}\n{{\"b\":2}}\n",
        "z".repeat(100)
    );
    let expected = [frame(None, "{\"a\":1}"), frame(None, "{\"b\":2}")];
    assert_split_invariant(Framing::Ndjson, Some(64), body.as_bytes(), &expected);
    assert_eq!(
        read_pieces(Framing::Ndjson, Some(64), &[body.as_bytes()]).1,
        1
    );
}

#[test]
fn reading_sse_text_as_ndjson_and_back_is_not_confused() {
    // Sanity: the two framings really differ.
    assert_eq!(
        read(Framing::Ndjson, b"data: a\n\n"),
        [frame(None, "data: a")]
    );
    assert_eq!(read(Framing::Sse, b"{\"a\":1}\n"), Vec::<Frame>::new());
}
