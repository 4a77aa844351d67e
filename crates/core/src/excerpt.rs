//! Cutting a text to show a part of it.

use std::borrow::Cow;

/// `text` cut to at most `max_bytes` (at a character boundary), with `…`
/// when something was cut: for error messages that quote what they got.
pub fn excerpt(text: &str, max_bytes: usize) -> Cow<'_, str> {
    if text.len() <= max_bytes {
        return Cow::Borrowed(text);
    }
    Cow::Owned(format!("{}…", &text[..text.floor_char_boundary(max_bytes)]))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cut_is_marked_and_lands_on_a_character_boundary() {
        assert_eq!(excerpt("short", 5), "short");
        assert_eq!(excerpt("longer", 4), "long…");
        // `é` is two bytes: a cut inside it moves back before it.
        assert_eq!(excerpt("aé", 2), "a…");
    }
}
