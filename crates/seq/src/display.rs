//! Showing values to people and models: strings verbatim, structures as
//! compact JSON (never a debug form), long values cut on a character
//! boundary with an explicit marker saying how long the whole value is.
//!
//! Only the display is cut: slots keep their whole value for later groups.

use serde_json::Value;

/// Most characters of one slot value shown in a run report.
pub const SLOT_DISPLAY_LIMIT: usize = 1000;

/// The first `max_chars` characters of `text` (never splitting a character).
pub fn cut(text: &str, max_chars: usize) -> &str {
    match text.char_indices().nth(max_chars) {
        Some((byte, _)) => &text[..byte],
        None => text,
    }
}

/// A value as text: a string verbatim, anything else as compact JSON.
pub fn value_text(value: &Value) -> String {
    match value {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

/// A slot value for display: whole when short, otherwise the first
/// `limit` characters followed by `… [truncated: N chars total]`.
pub fn slot_display(value: &Value, limit: usize) -> Value {
    let text = value_text(value);
    let total = text.chars().count();
    if total <= limit {
        return value.clone();
    }
    Value::String(format!(
        "{}… [truncated: {total} chars total]",
        cut(&text, limit)
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn long_values_are_cut_on_a_character_boundary_with_a_marker() {
        let long = "é".repeat(1500);
        let shown = slot_display(&json!(long), 1000);
        let expected = format!("{}… [truncated: 1500 chars total]", "é".repeat(1000));
        assert_eq!(shown, json!(expected));
        assert_eq!(slot_display(&json!({"a": 1}), 1000), json!({"a": 1}));
        assert_eq!(cut("abc", 2), "ab");
        assert_eq!(cut("ab", 5), "ab");
    }
}
