//! Which tools a hook sees.
//!
//! The matchers people write are tool names (`cmd_run`), alternatives
//! (`files_write|cmd_run`) and prefixes (`mcp__.*`, `files_*`). Those are
//! what is accepted; anything else with regex syntax is refused at load
//! with the accepted forms, rather than matched differently from how it was
//! meant.

use super::HookSpecError;

#[derive(Debug, Clone, PartialEq, Eq)]
enum Alternative {
    Exact(String),
    Prefix(String),
}

/// A parsed matcher.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Matcher {
    /// Empty: every tool.
    alternatives: Vec<Alternative>,
}

impl Matcher {
    pub fn parse(matcher: &str) -> Result<Self, HookSpecError> {
        let trimmed = matcher.trim();
        if trimmed.is_empty() || trimmed == "*" || trimmed == ".*" {
            return Ok(Matcher {
                alternatives: Vec::new(),
            });
        }
        let unsupported = |reason: String| HookSpecError::UnsupportedMatcher {
            matcher: matcher.to_owned(),
            reason,
        };
        let mut alternatives = Vec::new();
        for part in trimmed
            .trim_start_matches('^')
            .trim_end_matches('$')
            .split('|')
        {
            let part = part.trim();
            let (literal, prefix) = if let Some(p) = part.strip_suffix(".*") {
                (p, true)
            } else if let Some(p) = part.strip_suffix('*') {
                (p, true)
            } else {
                (part, false)
            };
            if literal.is_empty() && !prefix {
                return Err(unsupported("it has an empty alternative".into()));
            }
            if let Some(bad) = literal
                .chars()
                .find(|c| !(c.is_ascii_alphanumeric() || *c == '_' || *c == '-'))
            {
                return Err(unsupported(format!("it contains {bad:?}")));
            }
            alternatives.push(if prefix {
                Alternative::Prefix(literal.to_owned())
            } else {
                Alternative::Exact(literal.to_owned())
            });
        }
        Ok(Matcher { alternatives })
    }

    pub fn matches(&self, tool: &str) -> bool {
        self.alternatives.is_empty()
            || self.alternatives.iter().any(|a| match a {
                Alternative::Exact(name) => name == tool,
                Alternative::Prefix(prefix) => tool.starts_with(prefix.as_str()),
            })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn forms() {
        let all = Matcher::parse("").unwrap();
        assert!(all.matches("anything"));
        let alt = Matcher::parse("files_write|cmd_run").unwrap();
        assert!(alt.matches("cmd_run"));
        assert!(alt.matches("files_write"));
        assert!(!alt.matches("files_read"));
        assert!(!alt.matches("cmd_run2"));
        let prefix = Matcher::parse("mcp__.*|files_*").unwrap();
        assert!(prefix.matches("mcp__x"));
        assert!(prefix.matches("files_read"));
        assert!(!prefix.matches("cmd_run"));
        assert!(Matcher::parse("^cmd_run$").unwrap().matches("cmd_run"));
        assert!(matches!(
            Matcher::parse("cmd_(run|x)"),
            Err(HookSpecError::UnsupportedMatcher { .. })
        ));
    }
}
