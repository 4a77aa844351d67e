//! The condition language of `when` and `seq_when_call`.
//!
//! ```text
//! expr    := or
//! or      := and ( "||" and )*
//! and     := unary ( "&&" unary )*
//! unary   := "!" unary | compare
//! compare := operand ( ("==" | "!=" | ">" | "<" | ">=" | "<=" | "contains") operand )?
//! operand := string | number | true | false | null | ref | "(" expr ")"
//! ref     := "$args." key ( "." key_or_index )*
//! ```
//!
//! A condition reads only the `$args` of its own group (the run's args
//! overlaid with the slots written so far). Why errors and never "false":
//! a typo in a reference, or `>` between a word and a number, is the
//! author's mistake, and answering it with "false" would silently skip work
//! the author expected to run. So an unknown reference, an ordering between
//! non-numbers or bad syntax is an [`CondError`] naming the problem.
//!
//! `&&` and `||` short-circuit (`$args.has_x && $args.x > 3` is a guard).
//! A value used as a truth value is false when it is `false`, `null`, `0`,
//! `""`, `"false"`, `[]` or `{}`, and true otherwise (so `$args.x` and
//! `$args.x == true` agree on a string that reads as a boolean).
//!
//! `==` compares numbers by value (integers exactly), a string against a
//! number or a boolean by what the string reads as (`"3" == 3`,
//! `"true" == true`), and everything else as JSON values: two strings as
//! text (`"1.10" != "1.1"`), `null` only with null. A string reads as a
//! number or a boolean, for `==` and for `<`/`>`, exactly as a tool's
//! argument does (`homeagent_core::lenient`: `" 3 "` is 3; `"+1"`, `".5"`
//! and `" true"` are text).

use serde_json::{Map, Value};

mod eval;
mod lex;

use eval::eval;
pub(crate) use eval::field;
pub use eval::truthy;
use lex::{Token, describe, tokenize};

/// Longest condition accepted, in bytes.
pub const MAX_CONDITION_LEN: usize = 4096;
/// Deepest nesting of parentheses and `!` accepted.
pub const MAX_NESTING: usize = 64;

/// Why a condition could not be parsed or evaluated.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum CondError {
    #[error("condition is {len} bytes long; at most {MAX_CONDITION_LEN} are accepted")]
    TooLong { len: usize },
    #[error("byte {position}: {message}")]
    Syntax { position: usize, message: String },
    #[error("condition nests deeper than {MAX_NESTING} levels")]
    TooDeep,
    #[error("unknown reference `{reference}`: {detail}")]
    UnknownReference { reference: String, detail: String },
    #[error("`{op}` compares numbers; got {left} and {right}")]
    NotNumbers {
        op: &'static str,
        left: String,
        right: String,
    },
    #[error("`contains` needs a string, an array or an object on its left; got {left}")]
    BadContains { left: String },
}

/// A comparison operator.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CmpOp {
    Eq,
    Ne,
    Gt,
    Lt,
    Ge,
    Le,
    Contains,
}

impl CmpOp {
    pub fn text(self) -> &'static str {
        match self {
            CmpOp::Eq => "==",
            CmpOp::Ne => "!=",
            CmpOp::Gt => ">",
            CmpOp::Lt => "<",
            CmpOp::Ge => ">=",
            CmpOp::Le => "<=",
            CmpOp::Contains => "contains",
        }
    }
}

/// A parsed condition.
#[derive(Debug, Clone, PartialEq)]
pub enum Expr {
    Literal(Value),
    /// `$args.a.b.0`: the path after `$args`.
    Ref {
        path: Vec<String>,
        text: String,
    },
    Not(Box<Expr>),
    And(Box<Expr>, Box<Expr>),
    Or(Box<Expr>, Box<Expr>),
    Compare(Box<Expr>, CmpOp, Box<Expr>),
}

/// Parses a condition. An empty (blank) condition is `true`.
pub fn parse(text: &str) -> Result<Expr, CondError> {
    if text.len() > MAX_CONDITION_LEN {
        return Err(CondError::TooLong { len: text.len() });
    }
    let tokens = tokenize(text)?;
    if tokens.is_empty() {
        return Ok(Expr::Literal(Value::Bool(true)));
    }
    let mut parser = Parser {
        tokens: &tokens,
        next: 0,
        depth: 0,
        end: text.len(),
    };
    let expr = parser.or()?;
    if let Some((position, token)) = parser.peek() {
        return Err(CondError::Syntax {
            position,
            message: format!("unexpected {} after a complete condition", describe(token)),
        });
    }
    Ok(expr)
}

/// Parses and evaluates `text` against `args`.
pub fn evaluate(text: &str, args: &Map<String, Value>) -> Result<bool, CondError> {
    let expr = parse(text)?;
    Ok(truthy(&eval(&expr, args)?))
}

/// The `$args` keys a condition refers to (the first path segment), for
/// the create-time check.
pub fn referenced_keys(expr: &Expr) -> Vec<String> {
    let mut keys = Vec::new();
    collect_keys(expr, &mut keys);
    keys.sort();
    keys.dedup();
    keys
}

fn collect_keys(expr: &Expr, keys: &mut Vec<String>) {
    match expr {
        Expr::Literal(_) => {}
        Expr::Ref { path, .. } => keys.extend(path.first().cloned()),
        Expr::Not(e) => collect_keys(e, keys),
        Expr::And(a, b) | Expr::Or(a, b) | Expr::Compare(a, _, b) => {
            collect_keys(a, keys);
            collect_keys(b, keys);
        }
    }
}

struct Parser<'t> {
    tokens: &'t [(usize, Token)],
    next: usize,
    depth: usize,
    end: usize,
}

impl Parser<'_> {
    fn peek(&self) -> Option<(usize, &Token)> {
        self.tokens.get(self.next).map(|(p, t)| (*p, t))
    }

    fn or(&mut self) -> Result<Expr, CondError> {
        let mut left = self.and()?;
        while let Some((_, Token::Or)) = self.peek() {
            self.next += 1;
            let right = self.and()?;
            left = Expr::Or(Box::new(left), Box::new(right));
        }
        Ok(left)
    }

    fn and(&mut self) -> Result<Expr, CondError> {
        let mut left = self.unary()?;
        while let Some((_, Token::And)) = self.peek() {
            self.next += 1;
            let right = self.unary()?;
            left = Expr::And(Box::new(left), Box::new(right));
        }
        Ok(left)
    }

    fn unary(&mut self) -> Result<Expr, CondError> {
        if let Some((_, Token::Not)) = self.peek() {
            self.next += 1;
            self.enter()?;
            let inner = self.unary();
            self.depth -= 1;
            return Ok(Expr::Not(Box::new(inner?)));
        }
        self.compare()
    }

    fn compare(&mut self) -> Result<Expr, CondError> {
        let left = self.operand()?;
        if let Some((_, Token::Op(op))) = self.peek() {
            let op = *op;
            self.next += 1;
            let right = self.operand()?;
            if let Some((position, Token::Op(next))) = self.peek() {
                return Err(CondError::Syntax {
                    position,
                    message: format!(
                        "`{}` cannot follow a comparison; group with parentheses and && / ||",
                        next.text()
                    ),
                });
            }
            return Ok(Expr::Compare(Box::new(left), op, Box::new(right)));
        }
        Ok(left)
    }

    fn operand(&mut self) -> Result<Expr, CondError> {
        let Some((position, token)) = self.peek() else {
            return Err(CondError::Syntax {
                position: self.end,
                message: "the condition ends where a value was expected".into(),
            });
        };
        let token = token.clone();
        self.next += 1;
        match token {
            Token::Str(s) => Ok(Expr::Literal(Value::String(s))),
            Token::Num(n, text) => Ok(Expr::Literal(number_value(n, &text))),
            Token::Bool(b) => Ok(Expr::Literal(Value::Bool(b))),
            Token::Null => Ok(Expr::Literal(Value::Null)),
            Token::Ref(path, text) => Ok(Expr::Ref { path, text }),
            Token::Open => {
                self.enter()?;
                let inner = self.or();
                self.depth -= 1;
                let inner = inner?;
                match self.peek() {
                    Some((_, Token::Close)) => {
                        self.next += 1;
                        Ok(inner)
                    }
                    Some((p, t)) => Err(CondError::Syntax {
                        position: p,
                        message: format!("expected `)`, found {}", describe(t)),
                    }),
                    None => Err(CondError::Syntax {
                        position,
                        message: "`(` opened here is never closed".into(),
                    }),
                }
            }
            other => Err(CondError::Syntax {
                position,
                message: format!("expected a value, found {}", describe(&other)),
            }),
        }
    }

    fn enter(&mut self) -> Result<(), CondError> {
        self.depth += 1;
        if self.depth > MAX_NESTING {
            self.depth -= 1;
            return Err(CondError::TooDeep);
        }
        Ok(())
    }
}

fn number_value(n: f64, text: &str) -> Value {
    if let Ok(i) = text.parse::<i64>() {
        return Value::from(i);
    }
    serde_json::Number::from_f64(n).map_or(Value::Null, Value::Number)
}
