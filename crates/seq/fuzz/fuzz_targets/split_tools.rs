//! The `tools` splitter and the tool decoder must never panic, and every
//! piece must be the input's own text at its reported position.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    if let Ok(pieces) = homeagent_seq::split_tools(text) {
        for piece in pieces {
            assert_eq!(
                &text[piece.position..piece.position + piece.text.len()],
                piece.text
            );
        }
    }
    let _ = homeagent_seq::format::parse_tools(text, "fuzz");
});
