//! Evaluating a parsed condition against a group's args.

use homeagent_core::lenient;
use serde_json::{Map, Value};

use super::{CmpOp, CondError, Expr};

pub(super) fn eval(expr: &Expr, args: &Map<String, Value>) -> Result<Value, CondError> {
    Ok(match expr {
        Expr::Literal(v) => v.clone(),
        Expr::Ref { path, text } => resolve(path, text, args)?.clone(),
        Expr::Not(e) => Value::Bool(!truthy(&eval(e, args)?)),
        Expr::And(a, b) => Value::Bool(truthy(&eval(a, args)?) && truthy(&eval(b, args)?)),
        Expr::Or(a, b) => Value::Bool(truthy(&eval(a, args)?) || truthy(&eval(b, args)?)),
        Expr::Compare(a, op, b) => Value::Bool(compare(&eval(a, args)?, *op, &eval(b, args)?)?),
    })
}

/// Follows `$args.a.b.0` into `args`.
fn resolve<'v>(
    path: &[String],
    text: &str,
    args: &'v Map<String, Value>,
) -> Result<&'v Value, CondError> {
    let unknown = |detail: String| CondError::UnknownReference {
        reference: text.to_owned(),
        detail,
    };
    let (first, rest) = path
        .split_first()
        .ok_or_else(|| unknown("empty reference".into()))?;
    let mut current = args.get(first).ok_or_else(|| {
        let mut keys: Vec<&str> = args.keys().map(String::as_str).collect();
        keys.sort_unstable();
        unknown(format!(
            "no argument `{first}` (provided: {})",
            if keys.is_empty() {
                "none".to_owned()
            } else {
                keys.join(", ")
            }
        ))
    })?;
    let mut walked = first.clone();
    for segment in rest {
        current = field(&walked, current, segment).map_err(unknown)?;
        walked.push('.');
        walked.push_str(segment);
    }
    Ok(current)
}

/// One step of a `$args` path: `segment` of `current` (a field of an
/// object, an index into an array), or why there is none. `walked` is the
/// path so far, for the message. Conditions and argument substitution
/// both walk paths with it.
pub(crate) fn field<'v>(
    walked: &str,
    current: &'v Value,
    segment: &str,
) -> Result<&'v Value, String> {
    match current {
        Value::Object(map) => map.get(segment).ok_or_else(|| {
            let fields: Vec<&str> = map.keys().map(String::as_str).collect();
            format!(
                "`{walked}` has no field `{segment}` (fields: {})",
                if fields.is_empty() {
                    "none".to_owned()
                } else {
                    fields.join(", ")
                }
            )
        }),
        Value::Array(items) => {
            let index: usize = segment.parse().map_err(|_| {
                format!("`{walked}` is an array; index it with a number, not `{segment}`")
            })?;
            items.get(index).ok_or_else(|| {
                format!(
                    "`{walked}` has {} items; index {index} is out of range",
                    items.len()
                )
            })
        }
        other => Err(format!(
            "`{walked}` is {}, which has no field `{segment}`",
            crate::format::kind(other)
        )),
    }
}

/// The truth value of a value; see the module docs.
pub fn truthy(value: &Value) -> bool {
    match value {
        Value::Null => false,
        Value::Bool(b) => *b,
        Value::Number(n) => n.as_f64().is_some_and(|f| f != 0.0),
        // As `== true` / `== false` read it.
        Value::String(s) if s == "false" => false,
        Value::String(s) => !s.is_empty(),
        Value::Array(a) => !a.is_empty(),
        Value::Object(o) => !o.is_empty(),
    }
}

fn compare(left: &Value, op: CmpOp, right: &Value) -> Result<bool, CondError> {
    match op {
        CmpOp::Eq => Ok(equal(left, right)),
        CmpOp::Ne => Ok(!equal(left, right)),
        CmpOp::Contains => match left {
            Value::String(s) => Ok(s.contains(&text_of(right))),
            Value::Array(items) => Ok(items.iter().any(|item| equal(item, right))),
            Value::Object(map) => Ok(map.contains_key(&text_of(right))),
            other => Err(CondError::BadContains { left: shown(other) }),
        },
        CmpOp::Gt | CmpOp::Lt | CmpOp::Ge | CmpOp::Le => {
            let (Some(a), Some(b)) = (number(left), number(right)) else {
                return Err(CondError::NotNumbers {
                    op: op.text(),
                    left: shown(left),
                    right: shown(right),
                });
            };
            Ok(match op {
                CmpOp::Gt => a > b,
                CmpOp::Lt => a < b,
                CmpOp::Ge => a >= b,
                _ => a <= b,
            })
        }
    }
}

/// Equality: numbers by value (integers exactly); a string against a
/// number or a boolean by what the string reads as to the kernel's
/// argument coercion (`homeagent_core::lenient`), so `"3" == 3` and
/// `"true" == true` hold; everything else as JSON values, so two strings
/// are compared as text ("1.10" is not "1.1"), `null` is only null, and a
/// list is not its JSON text.
fn equal(left: &Value, right: &Value) -> bool {
    match (left, right) {
        (Value::Number(a), Value::Number(b)) => numbers_equal(a, b),
        (Value::String(s), Value::Number(n)) | (Value::Number(n), Value::String(s)) => {
            lenient::number(s).is_some_and(|read| numbers_equal(&read, n))
        }
        (Value::String(s), Value::Bool(b)) | (Value::Bool(b), Value::String(s)) => {
            lenient::boolean(s) == Some(*b)
        }
        _ => left == right,
    }
}

/// Two JSON numbers by value: integers exactly (f64 loses them past
/// 2^53), anything with a fraction as f64.
fn numbers_equal(a: &serde_json::Number, b: &serde_json::Number) -> bool {
    if let (Some(x), Some(y)) = (a.as_i64(), b.as_i64()) {
        return x == y;
    }
    if let (Some(x), Some(y)) = (a.as_u64(), b.as_u64()) {
        return x == y;
    }
    matches!((a.as_f64(), b.as_f64()), (Some(x), Some(y)) if x == y)
}

fn number(value: &Value) -> Option<f64> {
    match value {
        Value::Number(n) => n.as_f64(),
        Value::String(s) => lenient::number(s).and_then(|n| n.as_f64()),
        _ => None,
    }
}

fn text_of(value: &Value) -> String {
    match value {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

fn shown(value: &Value) -> String {
    match value {
        Value::String(s) => format!("the string {:?}", crate::display::cut(s, 60)),
        other => crate::format::kind(other),
    }
}
