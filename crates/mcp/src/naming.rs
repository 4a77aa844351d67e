//! How an MCP tool is named to the model: `<server>__<tool>`, reduced to the
//! rule every provider enforces (`^[A-Za-z0-9_-]{1,64}$`).
//!
//! Sanitising can make two tools look alike (`a.b` and `a_b`, or two long
//! names cut at the same place); the manager reports such collisions instead
//! of letting one tool silently replace another.

use homeagent_core::tool::MAX_TOOL_NAME_LEN;

/// Why no name could be made.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NameError {
    #[error("MCP server `{server}` announced a tool with an empty name; it was skipped")]
    EmptyTool { server: String },
}

/// The name the model sees for `tool` of `server`.
pub fn exposed_name(server: &str, tool: &str) -> Result<String, NameError> {
    if tool.is_empty() {
        return Err(NameError::EmptyTool {
            server: server.to_owned(),
        });
    }
    let mut name = format!("{}__{}", sanitize(server), sanitize(tool));
    // Only ASCII is left, so any byte index is a char boundary.
    name.truncate(MAX_TOOL_NAME_LEN);
    Ok(name)
}

/// Whether `name` (or a prefix of one) could be an exposed name as it is:
/// at most 64 characters, each allowed in tool names.
pub fn is_exposed_form(name: &str) -> bool {
    name.len() <= MAX_TOOL_NAME_LEN && name.chars().all(allowed)
}

/// A character every provider allows in a tool name.
fn allowed(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_' || c == '-'
}

fn sanitize(part: &str) -> String {
    part.chars()
        .map(|c| if allowed(c) { c } else { '_' })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_prefixed_and_sanitised() {
        assert_eq!(exposed_name("fs", "read").unwrap(), "fs__read");
        assert_eq!(
            exposed_name("my server", "a.b/c").unwrap(),
            "my_server__a_b_c"
        );
        assert_eq!(exposed_name("s", "é").unwrap(), "s___");
        let long = "x".repeat(100);
        let name = exposed_name("srv", &long).unwrap();
        assert_eq!(name.len(), 64);
        assert_eq!(&name[..5], "srv__");
        assert!(matches!(
            exposed_name("s", ""),
            Err(NameError::EmptyTool { .. })
        ));
    }

    #[test]
    fn the_exposed_form_is_64_allowed_characters_at_most() {
        for name in ["fs__read", "a-b_C9", "", &"x".repeat(64)] {
            assert!(is_exposed_form(name), "{name:?}");
        }
        for name in ["a.b", "my server", "é", "a/b", &"x".repeat(65)] {
            assert!(!is_exposed_form(name), "{name:?}");
        }
    }
}
