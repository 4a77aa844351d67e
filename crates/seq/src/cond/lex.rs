//! The condition tokenizer: text → tokens with their byte positions.

use super::{CmpOp, CondError};

#[derive(Debug, Clone, PartialEq)]
pub(super) enum Token {
    Str(String),
    Num(f64, String),
    Bool(bool),
    Null,
    Ref(Vec<String>, String),
    Op(CmpOp),
    And,
    Or,
    Not,
    Open,
    Close,
}

pub(super) fn tokenize(text: &str) -> Result<Vec<(usize, Token)>, CondError> {
    let bytes = text.as_bytes();
    let mut tokens = Vec::new();
    let mut i = 0;
    let syntax = |position: usize, message: String| CondError::Syntax { position, message };
    while i < bytes.len() {
        let b = bytes[i];
        let start = i;
        match b {
            b' ' | b'\t' | b'\n' | b'\r' => {
                i += 1;
                continue;
            }
            b'(' => {
                tokens.push((start, Token::Open));
                i += 1;
            }
            b')' => {
                tokens.push((start, Token::Close));
                i += 1;
            }
            b'"' | b'\'' => {
                let (value, end) = string_literal(text, i)?;
                tokens.push((start, Token::Str(value)));
                i = end;
            }
            b'=' | b'!' | b'<' | b'>' | b'&' | b'|' => {
                let two = text.get(i..i + 2).unwrap_or("");
                let (token, len) = match two {
                    "==" => (Token::Op(CmpOp::Eq), 2),
                    "!=" => (Token::Op(CmpOp::Ne), 2),
                    ">=" => (Token::Op(CmpOp::Ge), 2),
                    "<=" => (Token::Op(CmpOp::Le), 2),
                    "&&" => (Token::And, 2),
                    "||" => (Token::Or, 2),
                    _ => match b {
                        b'>' => (Token::Op(CmpOp::Gt), 1),
                        b'<' => (Token::Op(CmpOp::Lt), 1),
                        b'!' => (Token::Not, 1),
                        b'=' => {
                            return Err(syntax(start, "`=` is not an operator; use `==`".into()));
                        }
                        _ => {
                            return Err(syntax(
                                start,
                                format!(
                                    "`{}` alone is not an operator; use `&&` or `||`",
                                    b as char
                                ),
                            ));
                        }
                    },
                };
                tokens.push((start, token));
                i += len;
            }
            b'$' => {
                let end = word_end(bytes, i + 1, |c| {
                    c.is_ascii_alphanumeric() || c == b'_' || c == b'-' || c == b'.'
                });
                let word = &text[i..end];
                let Some(rest) = word.strip_prefix("$args.") else {
                    return Err(syntax(
                        start,
                        format!(
                            "`{word}` is not a reference; references look like $args.key or $args.key.field"
                        ),
                    ));
                };
                let path: Vec<String> = rest.split('.').map(str::to_owned).collect();
                if path.iter().any(String::is_empty) {
                    return Err(syntax(
                        start,
                        format!("`{word}` has an empty path segment; write $args.key.field"),
                    ));
                }
                tokens.push((start, Token::Ref(path, word.to_owned())));
                i = end;
            }
            b'-' | b'0'..=b'9' => {
                let end = word_end(bytes, i + 1, |c| {
                    c.is_ascii_digit()
                        || c == b'.'
                        || c == b'e'
                        || c == b'E'
                        || c == b'+'
                        || c == b'-'
                });
                let word = &text[i..end];
                let n: f64 = word
                    .parse()
                    .ok()
                    .filter(|n: &f64| n.is_finite())
                    .ok_or_else(|| syntax(start, format!("`{word}` is not a number")))?;
                tokens.push((start, Token::Num(n, word.to_owned())));
                i = end;
            }
            _ if b.is_ascii_alphabetic() => {
                let end = word_end(bytes, i, |c| c.is_ascii_alphanumeric() || c == b'_');
                let word = &text[i..end];
                let token = match word {
                    "true" => Token::Bool(true),
                    "false" => Token::Bool(false),
                    "null" => Token::Null,
                    "contains" => Token::Op(CmpOp::Contains),
                    "and" | "or" | "not" => {
                        return Err(syntax(
                            start,
                            format!("`{word}` is not an operator here; use && || !"),
                        ));
                    }
                    _ => {
                        return Err(syntax(
                            start,
                            format!(
                                "bare word `{word}`: quote strings (\"{word}\") and write references as $args.{word}"
                            ),
                        ));
                    }
                };
                tokens.push((start, token));
                i = end;
            }
            _ => {
                let ch = text[i..].chars().next().unwrap_or('?');
                return Err(syntax(start, format!("unexpected character `{ch}`")));
            }
        }
    }
    Ok(tokens)
}

fn word_end(bytes: &[u8], from: usize, accept: impl Fn(u8) -> bool) -> usize {
    let mut end = from;
    while end < bytes.len() && accept(bytes[end]) {
        end += 1;
    }
    end
}

/// A quoted string starting at `start`; returns it and the byte after it.
/// `\` escapes the next character (`\"`, `\'`, `\\`, `\n`, `\t`).
fn string_literal(text: &str, start: usize) -> Result<(String, usize), CondError> {
    let mut chars = text[start..].char_indices();
    let quote = chars.next().map(|(_, c)| c).unwrap_or('"');
    let mut out = String::new();
    let mut escaped = false;
    for (offset, c) in chars {
        if escaped {
            out.push(match c {
                'n' => '\n',
                't' => '\t',
                other => other,
            });
            escaped = false;
        } else if c == '\\' {
            escaped = true;
        } else if c == quote {
            return Ok((out, start + offset + c.len_utf8()));
        } else {
            out.push(c);
        }
    }
    Err(CondError::Syntax {
        position: start,
        message: format!("string opened here is never closed (missing {quote})"),
    })
}

pub(super) fn describe(token: &Token) -> String {
    match token {
        Token::Str(s) => format!("the string {s:?}"),
        Token::Num(_, text) => format!("the number {text}"),
        Token::Bool(b) => format!("`{b}`"),
        Token::Null => "`null`".into(),
        Token::Ref(_, text) => format!("`{text}`"),
        Token::Op(op) => format!("`{}`", op.text()),
        Token::And => "`&&`".into(),
        Token::Or => "`||`".into(),
        Token::Not => "`!`".into(),
        Token::Open => "`(`".into(),
        Token::Close => "`)`".into(),
    }
}
