//! `$args.K` substitution in a step's arguments.
//!
//! A string that is exactly `$args.K` becomes K's raw value, so an integer
//! stays an integer and an object stays an object (a tool's schema sees
//! the type it asked for). Anywhere else in a string, `$args.K` is replaced
//! by the value's text: strings verbatim, everything else compact JSON.
//! Keys are `[A-Za-z0-9_-]+`; a bare `$args.` is plain text. A reference
//! may go on into what it names, as in a condition: `$args.r.count`,
//! `$args.items.0.name` (fields of objects, indexes of arrays; a scalar
//! ends the path, so `$args.host.txt` is the host's text and `.txt`).
//!
//! A reference to a key that is not provided, or a path into it that leads
//! nowhere, is an error naming it, never a silently kept `$args.K` (or a
//! container's JSON with the path after it) that a tool would then run
//! with.

use serde_json::{Map, Value};

use crate::display::value_text;

const PREFIX: &str = "$args.";

/// A `$args` reference that leads nowhere.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SubstError {
    /// The key is neither a run argument nor an earlier slot.
    #[error(
        "$args.{key} is not provided by the run's args or an earlier group's slots (provided: {provided})"
    )]
    Missing { key: String, provided: String },
    /// A field or index after the key that is not there.
    #[error("$args.{reference}: {detail}")]
    BadPath { reference: String, detail: String },
    /// A null written into a longer text: it would read `null` (`ping
    /// null`). A null given whole (the text is only the reference) stays
    /// a JSON null.
    #[error(
        "$args.{reference} is null and cannot be written into the text {text:?}: give it a \
         value (a run argument, a tool's result, or a `fallback` for the call that left it \
         null)"
    )]
    NullInText { reference: String, text: String },
}

/// The keys `$args.K` references in `text`, in order.
pub fn references(text: &str) -> impl Iterator<Item = &str> {
    text.match_indices(PREFIX).filter_map(move |(at, _)| {
        let rest = &text[at + PREFIX.len()..];
        let len = key_len(rest);
        (len > 0).then(|| &rest[..len])
    })
}

fn key_len(text: &str) -> usize {
    text.bytes()
        .take_while(|b| b.is_ascii_alphanumeric() || *b == b'_' || *b == b'-')
        .count()
}

/// Substitutes every `$args.K` in `value` (recursively).
pub fn substitute(value: &Value, args: &Map<String, Value>) -> Result<Value, SubstError> {
    Ok(match value {
        Value::String(text) => substitute_text(text, args)?,
        Value::Array(items) => Value::Array(
            items
                .iter()
                .map(|v| substitute(v, args))
                .collect::<Result<_, _>>()?,
        ),
        Value::Object(map) => {
            let mut out = Map::with_capacity(map.len());
            for (k, v) in map {
                out.insert(k.clone(), substitute(v, args)?);
            }
            Value::Object(out)
        }
        other => other.clone(),
    })
}

fn lookup<'a>(key: &str, args: &'a Map<String, Value>) -> Result<&'a Value, SubstError> {
    args.get(key).ok_or_else(|| {
        let mut keys: Vec<&str> = args.keys().map(String::as_str).collect();
        keys.sort_unstable();
        SubstError::Missing {
            key: key.to_owned(),
            provided: if keys.is_empty() {
                "none".to_owned()
            } else {
                keys.join(", ")
            },
        }
    })
}

/// The value `text` (what follows `$args.`) refers to, and how many of its
/// bytes the reference takes: the key, then `.segment`s for as long as the
/// value reached is an object or an array (a scalar ends the path, so the
/// dot after `$args.host` in `$args.host.txt` is text). `None` when `text`
/// does not start with a key.
fn reference<'a>(
    text: &str,
    args: &'a Map<String, Value>,
) -> Option<Result<(&'a Value, usize), SubstError>> {
    let mut len = key_len(text);
    if len == 0 {
        return None;
    }
    let mut current = match lookup(&text[..len], args) {
        Ok(value) => value,
        Err(e) => return Some(Err(e)),
    };
    while matches!(current, Value::Object(_) | Value::Array(_))
        && let Some(after) = text[len..].strip_prefix('.')
    {
        let segment = &after[..key_len(after)];
        if segment.is_empty() {
            break;
        }
        current = match crate::cond::field(&text[..len], current, segment) {
            Ok(value) => value,
            Err(detail) => {
                return Some(Err(SubstError::BadPath {
                    reference: text[..len + 1 + segment.len()].to_owned(),
                    detail,
                }));
            }
        };
        len += 1 + segment.len();
    }
    Some(Ok((current, len)))
}

fn substitute_text(text: &str, args: &Map<String, Value>) -> Result<Value, SubstError> {
    if let Some(after) = text.strip_prefix(PREFIX)
        && let Some(found) = reference(after, args)
    {
        let (value, len) = found?;
        if len == after.len() {
            return Ok(value.clone());
        }
    }
    if !text.contains(PREFIX) {
        return Ok(Value::String(text.to_owned()));
    }
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(at) = rest.find(PREFIX) {
        out.push_str(&rest[..at]);
        let after = &rest[at + PREFIX.len()..];
        match reference(after, args) {
            None => {
                out.push_str(PREFIX);
                rest = after;
            }
            Some(found) => {
                let (value, len) = found?;
                if value.is_null() {
                    return Err(SubstError::NullInText {
                        reference: after[..len].to_owned(),
                        text: crate::display::cut(text, 200).to_owned(),
                    });
                }
                out.push_str(&value_text(value));
                rest = &after[len..];
            }
        }
    }
    out.push_str(rest);
    Ok(Value::String(out))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn args() -> Map<String, Value> {
        json!({"host": "node-a", "n": 3, "o": {"k": [1, 2]}})
            .as_object()
            .cloned()
            .unwrap_or_default()
    }

    #[test]
    fn exact_references_keep_their_type_and_others_interpolate() {
        let out = substitute(
            &json!({"cmd": "ssh $args.host", "count": "$args.n", "obj": "$args.o",
                    "text": "o=$args.o n=$args.n", "bare": "cost $args. only", "list": ["$args.n"]}),
            &args(),
        );
        assert_eq!(
            out,
            Ok(
                json!({"cmd": "ssh node-a", "count": 3, "obj": {"k": [1, 2]},
                      "text": "o={\"k\":[1,2]} n=3", "bare": "cost $args. only", "list": [3]})
            )
        );
    }

    /// A null slot written into text would run `ping null`; whole, it is
    /// the JSON null the tool gave.
    #[test]
    fn a_null_is_kept_whole_but_never_written_into_text() {
        let args = json!({"host": null, "o": {"k": null}})
            .as_object()
            .cloned()
            .unwrap_or_default();
        assert_eq!(
            substitute(&json!({"h": "$args.host", "k": "$args.o.k"}), &args),
            Ok(json!({"h": null, "k": null}))
        );
        for (text, reference) in [("ping $args.host", "host"), ("k=$args.o.k!", "o.k")] {
            assert_eq!(
                substitute(&json!({"command": text}), &args),
                Err(SubstError::NullInText {
                    reference: reference.into(),
                    text: text.into()
                }),
                "{text}"
            );
        }
    }

    #[test]
    fn an_unprovided_key_is_an_error_naming_it() {
        let err = substitute(&json!({"x": "a $args.nope b"}), &args());
        assert_eq!(
            err,
            Err(SubstError::Missing {
                key: "nope".into(),
                provided: "host, n, o".into()
            })
        );
        let refs: Vec<&str> = references("$args.a-b and $args.c_1.d $args.").collect();
        assert_eq!(refs, ["a-b", "c_1"]);
    }

    /// `$args.K.field.0` follows the path into objects and arrays, as a
    /// condition does: exactly, it keeps the type; in text, it is the
    /// text of what it reaches. A scalar ends the path, so the dot after
    /// it is text (`$args.host.txt` is a file name).
    #[test]
    fn a_path_follows_fields_and_indexes_and_stops_at_a_scalar() {
        let out = substitute(
            &json!({"list": "$args.o.k", "second": "$args.o.k.1",
                    "text": "first=$args.o.k.0!", "file": "$args.host.txt",
                    "end": "on $args.host.", "n": "$args.n.5"}),
            &args(),
        );
        assert_eq!(
            out,
            Ok(json!({"list": [1, 2], "second": 2, "text": "first=1!",
                      "file": "node-a.txt", "end": "on node-a.", "n": "3.5"}))
        );
    }

    /// A path that leads nowhere is an error naming the reference and
    /// what is there, never the container's JSON with the path after it.
    #[test]
    fn a_path_that_leads_nowhere_is_an_error_naming_it() {
        let err = |v: Value| substitute(&v, &args()).err().map(|e| e.to_string());
        let no_field = err(json!("$args.o.count"));
        assert!(
            no_field
                .as_deref()
                .is_some_and(|e| e.contains("$args.o.count")
                    && e.contains("no field `count`")
                    && e.contains("fields: k")),
            "{no_field:?}"
        );
        let not_index = err(json!("n is $args.o.k.first"));
        assert!(
            not_index
                .as_deref()
                .is_some_and(|e| e.contains("$args.o.k.first") && e.contains("array")),
            "{not_index:?}"
        );
        let out_of_range = err(json!({"x": "$args.o.k.2"}));
        assert!(
            out_of_range
                .as_deref()
                .is_some_and(|e| e.contains("index 2 is out of range")),
            "{out_of_range:?}"
        );
    }
}
