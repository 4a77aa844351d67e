//! `$args.K` substitution in a step's arguments.
//!
//! A string that is exactly `$args.K` becomes K's raw value, so an integer
//! stays an integer and an object stays an object (a tool's schema sees
//! the type it asked for). Anywhere else in a string, `$args.K` is replaced
//! by the value's text: strings verbatim, everything else compact JSON.
//! Keys are `[A-Za-z0-9_-]+`; a bare `$args.` is plain text.
//!
//! A reference to a key that is not provided is an error naming the key,
//! never a silently kept `$args.K` that a tool would then run with.

use serde_json::{Map, Value};

use crate::display::value_text;

const PREFIX: &str = "$args.";

/// A reference to an argument nobody provided.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "$args.{key} is not provided by the run's args or an earlier group's slots (provided: {provided})"
)]
pub struct MissingArg {
    pub key: String,
    pub provided: String,
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
pub fn substitute(value: &Value, args: &Map<String, Value>) -> Result<Value, MissingArg> {
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

fn lookup<'a>(key: &str, args: &'a Map<String, Value>) -> Result<&'a Value, MissingArg> {
    args.get(key).ok_or_else(|| {
        let mut keys: Vec<&str> = args.keys().map(String::as_str).collect();
        keys.sort_unstable();
        MissingArg {
            key: key.to_owned(),
            provided: if keys.is_empty() {
                "none".to_owned()
            } else {
                keys.join(", ")
            },
        }
    })
}

fn substitute_text(text: &str, args: &Map<String, Value>) -> Result<Value, MissingArg> {
    if let Some(key) = text.strip_prefix(PREFIX)
        && !key.is_empty()
        && key_len(key) == key.len()
    {
        return lookup(key, args).cloned();
    }
    if !text.contains(PREFIX) {
        return Ok(Value::String(text.to_owned()));
    }
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(at) = rest.find(PREFIX) {
        out.push_str(&rest[..at]);
        let after = &rest[at + PREFIX.len()..];
        let len = key_len(after);
        if len == 0 {
            out.push_str(PREFIX);
        } else {
            out.push_str(&value_text(lookup(&after[..len], args)?));
        }
        rest = &after[len..];
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

    #[test]
    fn an_unprovided_key_is_an_error_naming_it() {
        let err = substitute(&json!({"x": "a $args.nope b"}), &args());
        assert_eq!(
            err,
            Err(MissingArg {
                key: "nope".into(),
                provided: "host, n, o".into()
            })
        );
        let refs: Vec<&str> = references("$args.a-b and $args.c_1.d $args.").collect();
        assert_eq!(refs, ["a-b", "c_1"]);
    }
}
