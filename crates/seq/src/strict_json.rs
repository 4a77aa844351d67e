//! JSON text read with every object's keys unique.
//!
//! `serde_json::Value` keeps the last of two equal keys without a word, so
//! `{"args":{"command":"ls"},"args":{"command":"rm -rf /tmp/x"}}` read as
//! the second, and `"on_error":"abort", … "on_error":"continue"` as the
//! last: an author's slip silently changed what a sequence does. Here a
//! repeated key is an error that names it.

use serde::de::{DeserializeSeed, Deserializer, Error as _, MapAccess, SeqAccess, Visitor};
use serde_json::{Map, Value};

/// `text` as a JSON value; an object with a key twice is an error.
pub fn from_str(text: &str) -> Result<Value, serde_json::Error> {
    let mut deserializer = serde_json::Deserializer::from_str(text);
    let value = Unique.deserialize(&mut deserializer)?;
    deserializer.end()?;
    Ok(value)
}

/// Builds a [`Value`], refusing a repeated key.
#[derive(Clone, Copy)]
struct Unique;

impl<'de> DeserializeSeed<'de> for Unique {
    type Value = Value;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<Value, D::Error> {
        deserializer.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Unique {
    type Value = Value;

    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("a JSON value")
    }

    fn visit_unit<E: serde::de::Error>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }

    fn visit_bool<E: serde::de::Error>(self, b: bool) -> Result<Value, E> {
        Ok(Value::Bool(b))
    }

    fn visit_i64<E: serde::de::Error>(self, i: i64) -> Result<Value, E> {
        Ok(Value::from(i))
    }

    fn visit_u64<E: serde::de::Error>(self, u: u64) -> Result<Value, E> {
        Ok(Value::from(u))
    }

    fn visit_f64<E: serde::de::Error>(self, n: f64) -> Result<Value, E> {
        Ok(serde_json::Number::from_f64(n).map_or(Value::Null, Value::Number))
    }

    fn visit_str<E: serde::de::Error>(self, s: &str) -> Result<Value, E> {
        Ok(Value::String(s.to_owned()))
    }

    fn visit_string<E: serde::de::Error>(self, s: String) -> Result<Value, E> {
        Ok(Value::String(s))
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Value, A::Error> {
        let mut items = Vec::new();
        while let Some(item) = seq.next_element_seed(Unique)? {
            items.push(item);
        }
        Ok(Value::Array(items))
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Value, A::Error> {
        let mut object = Map::new();
        while let Some(key) = map.next_key::<String>()? {
            if object.contains_key(&key) {
                return Err(A::Error::custom(format!(
                    "the key `{key}` is given twice in one object; keep one"
                )));
            }
            let value = map.next_value_seed(Unique)?;
            object.insert(key, value);
        }
        Ok(Value::Object(object))
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn a_repeated_key_is_named_and_the_rest_reads_as_serde_json_does() {
        let twice = r#"{"tool":"cmd_run","args":{"command":"ls"},"args":{"command":"rm"}}"#;
        let error = from_str(twice).unwrap_err().to_string();
        assert!(error.contains("`args` is given twice"), "{error}");
        let nested = r#"{"a":[{"x":1,"x":2}]}"#;
        assert!(from_str(nested).is_err());
        let text = r#"{"a":[1,-2,3.5,true,null,"s",{"b":{}}],"big":18446744073709551615}"#;
        assert_eq!(
            from_str(text).unwrap(),
            serde_json::from_str::<Value>(text).unwrap()
        );
        assert!(from_str("{} {}").is_err(), "trailing text");
    }
}
