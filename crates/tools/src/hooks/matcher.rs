//! Which tools a hook sees: a regular expression on the tool name, as in
//! the hook protocol people already use with coding agents.
//!
//! The expression must match the whole name, so `Bash` is that tool and not
//! `BashOutput`, `Edit|Write` is either of two tools, and `git__.*` is every
//! name with that prefix. An empty matcher, `*` (which people write though
//! it is not a regex) and `.*` match every tool. The syntax is `regex-lite`'s:
//! the usual Perl-like forms without Unicode classes, which tool names (ASCII
//! by the provider name rule) never need. An expression that does not
//! compile is refused when the config loads, naming the hook.

use super::HookSpecError;

/// A parsed matcher.
#[derive(Debug, Clone)]
pub struct Matcher {
    /// `None`: every tool.
    regex: Option<regex_lite::Regex>,
}

impl Matcher {
    /// Compiles `matcher` for the hook named `hook` (named in the error).
    pub fn parse(hook: &str, matcher: &str) -> Result<Self, HookSpecError> {
        let trimmed = matcher.trim();
        if trimmed.is_empty() || trimmed == "*" {
            return Ok(Matcher { regex: None });
        }
        // The group keeps `a|b` from anchoring only its first and last
        // alternatives.
        match regex_lite::Regex::new(&format!("^(?:{trimmed})$")) {
            Ok(regex) => Ok(Matcher { regex: Some(regex) }),
            Err(e) => Err(HookSpecError::InvalidMatcher {
                hook: hook.to_owned(),
                matcher: matcher.to_owned(),
                reason: e.to_string(),
            }),
        }
    }

    pub fn matches(&self, tool: &str) -> bool {
        self.regex.as_ref().is_none_or(|r| r.is_match(tool))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sees(matcher: &str, tool: &str) -> bool {
        Matcher::parse("h", matcher).unwrap().matches(tool)
    }

    #[test]
    fn the_forms_of_the_hook_protocol() {
        for all in ["", " ", "*", ".*"] {
            assert!(sees(all, "anything"), "{all:?}");
        }
        assert!(sees("Bash", "Bash"));
        assert!(!sees("Bash", "BashOutput"));
        assert!(!sees("Bash", "MyBash"));
        assert!(sees("Edit|Write", "Edit"));
        assert!(sees("Edit|Write", "Write"));
        assert!(!sees("Edit|Write", "EditWrite"));
        assert!(!sees("Edit|Write", "Editor"));
        assert!(sees("git__.*", "git__git_status"));
        assert!(!sees("git__.*", "cmd_run"));
        assert!(sees("files_(read|list)", "files_list"));
        assert!(!sees("files_(read|list)", "files_write"));
        assert!(sees("^cmd_run$", "cmd_run"));
    }

    #[test]
    fn an_invalid_expression_names_the_hook_and_the_matcher() {
        let error = Matcher::parse("pre_tool_use[2]", "files_(read").unwrap_err();
        let HookSpecError::InvalidMatcher {
            hook,
            matcher,
            reason,
        } = error
        else {
            panic!("{error:?}")
        };
        assert_eq!(hook, "pre_tool_use[2]");
        assert_eq!(matcher, "files_(read");
        assert!(!reason.is_empty());
    }
}
