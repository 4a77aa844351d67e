//! The one rule for an environment variable's name, shared by every place
//! that takes one from a config or a command (a source's `api_key_env`,
//! `cmd_run`'s `NAME=value` and its policy's `env`).

/// `[A-Za-z_][A-Za-z0-9_]*`: the names a shell accepts as a variable.
pub fn is_env_var_name(name: &str) -> bool {
    let mut bytes = name.bytes();
    bytes
        .next()
        .is_some_and(|first| first.is_ascii_alphabetic() || first == b'_')
        && bytes.all(|b| b.is_ascii_alphanumeric() || b == b'_')
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_a_shell_takes_and_no_others() {
        for name in ["PATH", "_x", "OPENAI_API_KEY", "a1"] {
            assert!(is_env_var_name(name), "{name}");
        }
        for name in ["", "1X", "A-B", "A B", "sk-proj-123", "É"] {
            assert!(!is_env_var_name(name), "{name}");
        }
    }
}
