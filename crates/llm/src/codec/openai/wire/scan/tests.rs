//! The scanner must read every chunk it accepts exactly as serde does
//! (`typed_frame`), and accept the shapes real servers send, or the fast
//! path it exists for is never taken.

#![allow(clippy::unwrap_used, clippy::expect_used)] // a panic in a test is a test failure

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

use super::super::Chunk;
use super::{MAX_SKIP_DEPTH, SkippedRun, scan, scan_with};
use crate::codec::typed_frame;

/// Chunks as servers send them; the scanner must take every one.
const COMMON: &[&str] = &[
    // The mock LLM's three shapes (opening, argument piece, finish).
    r#"{"choices":[{"delta":{"content":"","role":"assistant"},"finish_reason":null,"index":0,"logprobs":null}],"created":1796140480,"id":"chatcmpl-mock1","model":"mock","object":"chat.completion.chunk","system_fingerprint":"fp_homeagent_mock"}"#,
    r#"{"choices":[{"delta":{"tool_calls":[{"function":{"arguments":"{\"tag\":\"","name":"demo_echo"},"id":"call_b304e1n1_0","index":0,"type":"function"}]},"finish_reason":null,"index":0,"logprobs":null}],"created":1796140480,"id":"chatcmpl-mock1","model":"mock","object":"chat.completion.chunk","system_fingerprint":"fp_homeagent_mock"}"#,
    r#"{"choices":[{"delta":{"tool_calls":[{"function":{"arguments":"4e1n1-0\"}"},"index":0}]},"finish_reason":null,"index":0,"logprobs":null}],"created":1796140480,"id":"chatcmpl-mock1","model":"mock","object":"chat.completion.chunk","system_fingerprint":"fp_homeagent_mock"}"#,
    r#"{"choices":[{"delta":{},"finish_reason":"tool_calls","index":0,"logprobs":null}],"created":1796140480,"id":"chatcmpl-mock1","model":"mock","object":"chat.completion.chunk","system_fingerprint":"fp_homeagent_mock"}"#,
    // OpenAI's own, with usage and the newer members.
    r#"{"id":"chatcmpl-B9MHDbslfkBeAs8l4bebGdFOJ6PeG","object":"chat.completion.chunk","created":1741570283,"model":"gpt-4o-2024-08-06","service_tier":"default","system_fingerprint":"fp_eb9dce56a8","choices":[{"index":0,"delta":{"tool_calls":[{"index":1,"id":"call_y3Tlb0RPCbf4bfLbcPUVvi0W","type":"function","function":{"name":"get_weather","arguments":""}}]},"logprobs":null,"finish_reason":null}],"usage":null,"obfuscation":"x9"}"#,
    r#"{"id":"c","object":"chat.completion.chunk","created":1,"model":"m","choices":[],"usage":{"prompt_tokens":19,"completion_tokens":10,"total_tokens":29,"prompt_tokens_details":{"cached_tokens":0,"audio_tokens":0},"completion_tokens_details":{"reasoning_tokens":0,"accepted_prediction_tokens":0}}}"#,
    // Text with escapes and non-ASCII, reasoning, whitespace between tokens.
    r#"{"choices":[{"index":0,"delta":{"content":"Hel\"lo\n\u00e9\ud83d\ude00 — 日本語 \\ \/"}}]}"#,
    r#"{"choices":[{"index":0,"delta":{"content":"\\u0041 \\\\ \u0041\\\ud83d\udE00\b\f\r\t\u0000"}}]}"#,
    r#"{"choices":[{"index":0,"delta":{"reasoning_content":"think","reasoning":"think"}}]}"#,
    " { \"choices\" : [ { \"index\" : 0 , \"delta\" : { \"content\" : \"a\" } } ] }\r\n",
    // Flat entries, null members, several entries, no index, empty lists.
    r#"{"choices":[{"index":0,"delta":{"tool_calls":[{"index":2,"id":"","function":null,"name":"h"}]}}]}"#,
    r#"{"choices":[{"index":0,"delta":{"tool_calls":[{"index":3,"function":{"name":null,"arguments":null},"name":"k","arguments":"{}"}]}}]}"#,
    r#"{"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":"{\"a\":"}},{"index":0,"function":{"arguments":"1}"}}]}}]}"#,
    r#"{"choices":[{"index":0,"delta":{"tool_calls":[{"function":{"arguments":"x"}}]}}]}"#,
    r#"{"choices":[{"index":4294967296,"delta":{"content":"not choice 0"}},{"delta":{"content":"no index"}}]}"#,
    r#"{"choices":[{"index":0,"delta":null,"finish_reason":""}],"error":null}"#,
    r#"{"choices":null,"usage":{}}"#,
    r#"{"choices":[{"index":0,"delta":{"tool_calls":[{"index":2,"extra_content":null}]}}]}"#,
    r#"{"skip":[1,-2.5e+3,0.0,1E9,true,false,null,{"a":[{}],"b":"\u12aB\n"},[]],"choices":[]}"#,
    "{}",
];

/// Chunks serde reads but the scanner leaves to it.
const LEFT_TO_SERDE: &[&str] = &[
    r#"{"error":{"message":"boom"}}"#,
    r#"{"choices":[{"index":0,"delta":{"tool_calls":[{"index":1,"extra_content":{"google":{"thought_signature":"t"}}}]}}]}"#,
    r#"{"choi\u0063es":[]}"#,
];

/// Not chunks serde reads (so the `Value` path must see them).
const REFUSED: &[&str] = &[
    r#"{"choices":[{"index":0,"delta":{"content":[{"type":"text","text":"a"}]}}]}"#,
    r#"{"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":{"a":1}}}]}}]}"#,
    r#"{"choices":[{"index":"0","delta":{"content":"a"}}]}"#,
    r#"{"choices":[{"index":0.0,"delta":{"content":"a"}}]}"#,
    r#"{"choices":[{"index":1e0,"delta":{"content":"a"}}]}"#,
    r#"{"choices":[{"index":18446744073709551616}]}"#,
    r#"{"choices":[{"index":01}]}"#,
    r#"{"choices":[{"index":-0,"delta":{"content":"a"}}]}"#,
    r#"{"choices":[{"index":0,"delta":{"tool_calls":[{"index":-1}]}}]}"#,
    r#"{"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":"f"}]}}]}"#,
    r#"{"choices":[{"index":0,"delta":{"tool_calls":[7]}}]}"#,
    r#"{"choices":[],"choices":[]}"#,
    r#"{"choices":[{"index":0,"index":0}]}"#,
    r#"{"choices":[{"delta":{"content":"a","content":"b"}}]}"#,
    r#"{"choices":[]} x"#,
    r#"{"choices":[],}"#,
    r#"{"choices":[1,]}"#,
    r#"{"a":"tab	inside"}"#,
    r#"{"a":"\x"}"#,
    r#"{"a":"\u12G4"}"#,
    r#"{"a":01}"#,
    r#"{"a":1.}"#,
    r#"{"a":1e}"#,
    r#"{"a":.5}"#,
    r#"{"a":tru}"#,
    r#"{"a":nul}"#,
    r#"{"choices":[{"delta":{"content":"\ud800"}}]}"#,
    r#"{"choices":[{"delta":{"content":"\udc00"}}]}"#,
    r#"{"choices":[{"delta":{"content":"\ud83d\u0041"}}]}"#,
    r#"{"choices":[{"delta":{"content":"\ud83d\ud83d"}}]}"#,
    r#"{"choices":[{"delta":{"content":"\ud83dx\ude00"}}]}"#,
    r#"{"choices":[{"delta":{"content":"\ud83d\n"}}]}"#,
    r#"{"choices""#,
    r#"[1]"#,
    "not json",
    "",
];

fn serde(data: &str) -> Option<Chunk> {
    typed_frame::<Chunk>(data)
}

#[test]
fn the_scanner_reads_common_chunks_as_serde_does() {
    for data in COMMON {
        let expected = serde(data).unwrap_or_else(|| panic!("serde should read {data}"));
        assert_eq!(scan(data), Some(expected), "{data}");
    }
}

#[test]
fn the_scanner_leaves_rare_shapes_to_serde() {
    for data in LEFT_TO_SERDE {
        assert!(serde(data).is_some(), "serde should read {data}");
        assert_eq!(scan(data), None, "{data}");
    }
}

#[test]
fn the_scanner_refuses_what_serde_refuses() {
    for data in REFUSED {
        assert_eq!(serde(data), None, "serde should refuse {data}");
        assert_eq!(scan(data), None, "{data}");
    }
}

#[test]
fn deep_members_are_left_to_serde() {
    // serde steps over an unread member however deep it nests (without
    // recursion); the scanner recurses, so it stops at `MAX_SKIP_DEPTH`.
    for deep in [
        format!("{{\"a\":{}1{}}}", "[".repeat(200), "]".repeat(200)),
        format!("{}1{}", "{\"a\":".repeat(200), "}".repeat(200)),
    ] {
        assert!(serde(&deep).is_some());
        assert_eq!(scan(&deep), None);
    }
    let nested = format!("{{\"a\":{}1{}}}", "[".repeat(60), "]".repeat(60));
    assert_eq!(scan(&nested), serde(&nested));
    assert!(scan(&nested).is_some());
}

#[test]
fn the_skip_depth_bound_is_exact() {
    // The unread member's value opens `levels` lists (or objects) around
    // a number: the outermost is stepped over at depth 0, so `levels`
    // containers need depths 0 ..= levels - 1 below `MAX_SKIP_DEPTH`.
    let max = usize::try_from(MAX_SKIP_DEPTH).unwrap();
    let lists = |levels: usize| format!("{{\"a\":{}1{}}}", "[".repeat(levels), "]".repeat(levels));
    let objects = |levels: usize| {
        format!(
            "{{\"a\":{}1{}}}",
            "{\"b\":".repeat(levels),
            "}".repeat(levels)
        )
    };
    for deep in [lists as fn(usize) -> String, objects] {
        let at_the_bound = deep(max);
        assert!(serde(&at_the_bound).is_some());
        assert_eq!(scan(&at_the_bound), serde(&at_the_bound), "{max} levels");
        assert_eq!(scan(&deep(max + 1)), None, "{} levels", max + 1);
    }
}

/// Bytes that change a chunk's structure when they land somewhere new.
const SIGNIFICANT: &[u8] = b"{}[]:,\"\\ 0-1e.nu\t\x01x";

/// One random edit of `data`: a byte removed, inserted or replaced, or the
/// text cut short.
fn mutate(data: &str, rng: &mut SmallRng) -> String {
    let mut bytes = data.as_bytes().to_vec();
    let at = rng.random_range(0..=bytes.len());
    match rng.random_range(0..4) {
        0 if at < bytes.len() => {
            bytes.remove(at);
        }
        1 => bytes.insert(at, SIGNIFICANT[rng.random_range(0..SIGNIFICANT.len())]),
        2 if at < bytes.len() => bytes[at] = SIGNIFICANT[rng.random_range(0..SIGNIFICANT.len())],
        _ => bytes.truncate(at),
    }
    // Only ASCII is ever inserted; an edit inside a multi-byte character is
    // not text any more, and frames are text.
    String::from_utf8(bytes).unwrap_or_default()
}

#[test]
fn edited_chunks_are_read_as_serde_reads_them_or_left_to_it() {
    let mut rng = SmallRng::seed_from_u64(0x5CA7);
    let (mut both, mut left, mut neither) = (0, 0, 0);
    for round in 0..40_000 {
        let base = COMMON[round % COMMON.len()];
        let mut data = mutate(base, &mut rng);
        if round % 3 == 0 {
            data = mutate(&data, &mut rng);
        }
        let expected = serde(&data);
        // With the original's skipped members remembered, too.
        let mut primed = SkippedRun::default();
        scan_with(base, &mut primed);
        match scan_with(&data, &mut primed) {
            Some(chunk) => assert_eq!(Some(chunk), expected, "{data}"),
            None => assert!(scan(&data).is_none() || expected.is_some(), "{data}"),
        }
        match scan(&data) {
            Some(chunk) => {
                assert_eq!(Some(chunk), expected, "{data}");
                both += 1;
            }
            None if expected.is_some() => left += 1,
            None => neither += 1,
        }
    }
    // Most edits still parse, many do not: both sides of the check ran.
    assert!(both > 10_000 && neither > 10_000, "{both} {left} {neither}");
    // Leaving a chunk to serde is allowed, but should be rare.
    assert!(left < both / 20, "{both} {left} {neither}");
}

#[test]
fn escaped_strings_read_as_serde_reads_them() {
    let mut rng = SmallRng::seed_from_u64(0x00E5_CA9E);
    let (mut read, mut refused) = (0, 0);
    for _ in 0..20_000 {
        let mut inside = String::new();
        for _ in 0..rng.random_range(1..6) {
            match rng.random_range(0..6) {
                0 => inside.push_str("ab"),
                1 => inside.push('é'),
                2 => inside.push_str(
                    ["\\\"", "\\\\", "\\/", "\\b", "\\f", "\\n", "\\r", "\\t"]
                        [rng.random_range(0..8)],
                ),
                // Any code unit, surrogates too: pairs, halves, reversed.
                3 => inside.push_str(&format!("\\u{:04x}", rng.random_range(0xD7F0..0xE010_u32))),
                4 => inside.push_str(&format!("\\u{:04X}", rng.random_range(0..0x1_0000_u32))),
                _ => inside.push_str("\\ud83d\\ude00"),
            }
        }
        let expected: Option<String> = serde_json::from_str(&format!("\"{inside}\"")).ok();
        assert_eq!(super::unescape(&inside), expected, "{inside}");
        if expected.is_some() {
            read += 1
        } else {
            refused += 1
        }
    }
    assert!(read > 5_000 && refused > 1_000, "{read} {refused}");
}

/// The members a chunk has and nobody reads are stepped over in the next
/// chunk when they are the same text; every chunk still reads as serde
/// reads it.
#[test]
fn the_last_chunks_skipped_members_are_jumped() {
    let mut skipped = SkippedRun::default();
    for data in &COMMON[..4] {
        assert_eq!(scan_with(data, &mut skipped), serde(data), "{data}");
    }
    assert_eq!(
        skipped.jumps, 3,
        "the mock's envelope, after the first chunk"
    );
    // OpenAI's envelope comes first, and `usage` after the choices.
    let openai = COMMON[4];
    for _ in 0..2 {
        assert_eq!(scan_with(openai, &mut skipped), serde(openai));
    }
    assert_eq!(skipped.jumps, 4);

    let base = r#"{"choices":[],"created":17,"id":"x"}"#;
    let mut skipped = SkippedRun::default();
    assert!(scan_with(base, &mut skipped).is_some());
    for (data, jumped) in [
        // The same members, then another: jumped, and the rest read.
        (r#"{"choices":[],"created":17,"id":"x","model":"m"}"#, true),
        // A number that goes on, a string that does not end there.
        (r#"{"choices":[],"created":17,"id":"x"1}"#, false),
        (r#"{"choices":[],"created":170,"id":"x"}"#, false),
        // A member read after the jump, twice: refused as serde refuses it.
        (r#"{"choices":[],"created":17,"id":"x","choices":[]}"#, true),
        (r#"{"created":17,"id":"x","choices":[{"index":0}]}"#, true),
        (r#"{"created":17,"id":"x"}"#, true),
        (r#"{"created":17,"id":"x","usage":{}}"#, true),
    ] {
        let before = skipped.jumps;
        assert_eq!(scan_with(data, &mut skipped), serde(data), "{data}");
        assert_eq!(skipped.jumps > before, jumped, "{data}");
        // Back to the base's run for the next case.
        assert!(scan_with(base, &mut skipped).is_some());
    }
    // A chunk without a run keeps the one remembered for the next.
    let mut skipped = SkippedRun::default();
    let bare = r#"{"choices":[]}"#;
    for data in [base, bare, base] {
        assert_eq!(scan_with(data, &mut skipped), serde(data));
    }
    assert_eq!(skipped.jumps, 1);
    // The longest run is remembered, the first of equally long ones.
    let mut skipped = SkippedRun::default();
    assert!(scan_with(openai, &mut skipped).is_some());
    assert!(skipped.text.starts_with(r#""id":"#), "{}", skipped.text);
    assert!(
        skipped
            .text
            .ends_with(r#""system_fingerprint":"fp_eb9dce56a8""#)
    );
    assert!(scan_with(r#"{"a":1,"choices":[],"b":2}"#, &mut skipped).is_some());
    assert_eq!(skipped.text, r#""a":1"#);
    let mut skipped = SkippedRun::default();
    assert!(scan_with(r#"{"c":1,"choices":[],"d":2,"usage":null}"#, &mut skipped).is_some());
    assert_eq!(skipped.text, r#""c":1"#);
    assert!(scan_with(r#"{"a":1,"choices":[],"bb":2}"#, &mut skipped).is_some());
    assert_eq!(skipped.text, r#""bb":2"#);
    // A run that ends with a number is that run only where the number ends.
    let mut skipped = SkippedRun::default();
    assert!(scan_with(r#"{"choices":[],"id":"x","created":17}"#, &mut skipped).is_some());
    let longer = r#"{"choices":[],"id":"x","created":170}"#;
    assert_eq!(scan_with(longer, &mut skipped), serde(longer));
    assert!(serde(longer).is_some());
    assert_eq!(skipped.jumps, 0);
}
