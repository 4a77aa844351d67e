//! Where a byte offset falls in a text, as people count: the line and the
//! column a config file's parse error names.

/// 1-based line and column (in characters, not bytes) of byte `offset` in
/// `text`. An offset past the end is the end; one inside a character is
/// that character's start.
pub fn line_column(text: &str, offset: usize) -> (usize, usize) {
    let mut end = offset.min(text.len());
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    let before = &text[..end];
    let line_start = before.rfind('\n').map_or(0, |newline| newline + 1);
    let line = before.matches('\n').count() + 1;
    let column = before[line_start..].chars().count() + 1;
    (line, column)
}

#[cfg(test)]
mod tests {
    use super::line_column;

    #[test]
    fn lines_and_columns_count_from_one_in_characters() {
        let text = "ab\ncdé\n\nfg";
        // Offsets written out by hand: a=0 b=1 \n=2 c=3 d=4 é=5..7 \n=7
        // \n=8 f=9 g=10.
        let cases = [
            (0, (1, 1)),
            (1, (1, 2)),
            (2, (1, 3)),
            (3, (2, 1)),
            (5, (2, 3)),
            (6, (2, 3)),
            (7, (2, 4)),
            (8, (3, 1)),
            (9, (4, 1)),
            (10, (4, 2)),
            (11, (4, 3)),
            (99, (4, 3)),
        ];
        for (offset, expected) in cases {
            assert_eq!(line_column(text, offset), expected, "offset {offset}");
        }
        assert_eq!(line_column("", 0), (1, 1));
    }
}
