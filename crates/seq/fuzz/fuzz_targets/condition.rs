//! The condition parser and evaluator must never panic.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let args = serde_json::json!({"n": 3, "s": "text", "o": {"a": [1, {"b": true}]}, "l": []});
    if let Some(args) = args.as_object() {
        let _ = homeagent_seq::cond::evaluate(text, args);
    }
});
