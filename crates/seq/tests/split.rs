#![allow(clippy::unwrap_used, clippy::expect_used)] // a panic in a test is a test failure

use homeagent_seq::{Piece, SplitError, split_tools};
use proptest::prelude::*;

fn texts(input: &str) -> Vec<&str> {
    split_tools(input).unwrap().iter().map(|p| p.text).collect()
}

#[test]
fn every_tool_ends_with_a_semicolon_and_keeps_its_position() {
    let input = r#"{"tool":"a"} ; {"tool":"b","args":{"x":[1,{"y":2}]}};"#;
    assert_eq!(
        split_tools(input).unwrap(),
        [
            Piece {
                text: r#"{"tool":"a"}"#,
                position: 0
            },
            Piece {
                text: r#"{"tool":"b","args":{"x":[1,{"y":2}]}}"#,
                position: 15
            },
        ]
    );
}

#[test]
fn a_command_with_five_semicolons_in_a_string_stays_one_tool() {
    // Built by double encoding, like a real author's escaped command.
    let command = r#"a; b; echo "x;y"; c; d"#;
    let tool = serde_json::json!({"tool": "cmd_run", "args": {"command": command}}).to_string();
    let input = format!("{tool} ;");
    let pieces = split_tools(&input).unwrap();
    assert_eq!(pieces.len(), 1);
    assert_eq!(pieces[0].text, tool, "byte-identical");
    let back: serde_json::Value = serde_json::from_str(pieces[0].text).unwrap();
    assert_eq!(back["args"]["command"], command);
}

#[test]
fn a_brace_inside_a_string_does_not_count() {
    assert_eq!(
        texts(r#"{"tool":"cmd_run","args":{"command":"grep -o '{' /etc/hosts"}} ;"#).len(),
        1
    );
    assert_eq!(texts(r#"{"a":"}]\"{"} ;"#), [r#"{"a":"}]\"{"}"#]);
}

#[test]
fn an_extra_closer_is_an_error_at_its_byte() {
    assert_eq!(
        split_tools(r#"{"a":1}} ;"#),
        Err(SplitError::ExtraCloser {
            position: 7,
            closer: '}'
        })
    );
    assert_eq!(
        split_tools("] ;"),
        Err(SplitError::ExtraCloser {
            position: 0,
            closer: ']'
        })
    );
}

#[test]
fn a_missing_semicolon_between_tools_is_an_error_not_a_swallowed_tool() {
    let input = r#"{"tool":"a"} {"tool":"b"} ;"#;
    assert_eq!(
        split_tools(input),
        Err(SplitError::MissingSemicolon {
            position: 13,
            after: 11
        })
    );
}

#[test]
fn an_empty_tool_is_an_error_at_its_semicolon() {
    assert_eq!(
        split_tools(r#"{"tool":"a"} ; ;"#),
        Err(SplitError::EmptyTool { position: 15 })
    );
    assert_eq!(
        split_tools(" ;"),
        Err(SplitError::EmptyTool { position: 1 })
    );
}

#[test]
fn unclosed_strings_and_structures_point_at_their_opener() {
    assert_eq!(
        split_tools(r#"{"tool":"a} ;"#),
        Err(SplitError::UnclosedString { position: 8 })
    );
    assert_eq!(
        split_tools(r#"{"tool":"a","args":{"x":[1] ;"#),
        Err(SplitError::UnclosedStructure {
            position: 0,
            opener: '{',
            depth: 2
        })
    );
}

#[test]
fn a_missing_trailing_semicolon_is_an_error_at_the_end() {
    let input = r#"{"tool":"a"} ; {"tool":"b"}  "#;
    assert_eq!(
        split_tools(input),
        Err(SplitError::MissingTrailingSemicolon { position: 27 })
    );
}

#[test]
fn an_empty_list_is_an_error() {
    assert_eq!(split_tools(""), Err(SplitError::Empty));
    assert_eq!(split_tools("  \n\t "), Err(SplitError::Empty));
    assert_eq!(SplitError::Empty.position(), None);
    // Messages carry the position for the author.
    let message = SplitError::MissingSemicolon {
        position: 13,
        after: 11,
    }
    .to_string();
    assert!(message.starts_with("byte 13:"), "{message}");
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 2000, ..ProptestConfig::default() })]

    #[test]
    fn the_splitter_never_panics_on_arbitrary_text(input in any::<String>()) {
        let _ = split_tools(&input);
    }

    #[test]
    fn the_splitter_never_panics_on_json_like_text(input in r#"[{}\[\]";\\a: ,é]{0,60}"#) {
        if let Ok(pieces) = split_tools(&input) {
            for piece in pieces {
                // Every piece is a real slice of the input at its position.
                prop_assert_eq!(&input[piece.position..piece.position + piece.text.len()], piece.text);
            }
        }
    }
}
