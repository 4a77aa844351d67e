//! A request body: JSON text that is valid by construction.

use std::borrow::Cow;

use serde::Serialize;
use serde::de::IgnoredAny;

use crate::error::CodecError;

/// The exact JSON text a request sends. It is made only by serializing a
/// value (`JsonBody::encode`, what most codecs do), by writing it with
/// [`homeagent_core::json_text`] (`JsonBody::written`, the OpenAI
/// codec) or by checking text ([`JsonBody::parse`], what a Lua adapter's
/// body goes through), so it is always one well-formed JSON value; it is
/// sent byte for byte.
///
/// It keeps bytes, not a `String`: serde_json writes UTF-8 only, and
/// turning its output into a `String` checked every byte again (1.5 % of
/// the agent's instructions per input, for two 10 kB bodies). The text is
/// looked at only on the Lua path and in tests, through [`JsonBody::text`].
#[derive(Clone, PartialEq, Eq)]
pub struct JsonBody(Vec<u8>);

impl JsonBody {
    /// `value` serialized into a buffer of `capacity` bytes to start with
    /// (see [`crate::ChatRequest::encoded_size_hint`]): a body grown from a small
    /// buffer is copied again at every doubling.
    pub(crate) fn encode<T: Serialize + ?Sized>(
        protocol: &'static str,
        value: &T,
        capacity: usize,
    ) -> Result<JsonBody, CodecError> {
        let unencodable = |detail: String| CodecError::Unencodable { protocol, detail };
        let mut buffer = Vec::with_capacity(capacity);
        serde_json::to_writer(&mut buffer, value).map_err(|e| unencodable(e.to_string()))?;
        Ok(JsonBody(buffer))
    }

    /// Text a codec wrote with [`homeagent_core::json_text`]'s writers,
    /// which write only well-formed JSON (their tests hold it equal to
    /// serde_json's); checking it again would cost what writing it saved.
    pub(crate) fn written(text: String) -> JsonBody {
        JsonBody(text.into_bytes())
    }

    /// `text` if it is one JSON value (surrounding whitespace allowed), as
    /// it is; the parse error otherwise.
    pub fn parse(text: String) -> Result<JsonBody, serde_json::Error> {
        serde_json::from_str::<IgnoredAny>(&text)?;
        Ok(JsonBody(text.into_bytes()))
    }

    /// The JSON text. It is always UTF-8 (serde_json's output, or a checked
    /// `String`), so this borrows and replaces nothing; it checks the bytes
    /// again, which only the Lua path and tests need.
    pub fn text(&self) -> Cow<'_, str> {
        String::from_utf8_lossy(&self.0)
    }

    /// The bytes that are sent.
    pub fn as_bytes(&self) -> &[u8] {
        &self.0
    }

    /// The bytes, for sending.
    pub fn into_bytes(self) -> Vec<u8> {
        self.0
    }
}

impl std::fmt::Debug for JsonBody {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("JsonBody").field(&self.text()).finish()
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)] // a panic in a test is a test failure

    use super::*;

    #[test]
    fn a_body_is_made_only_of_json() {
        let body = JsonBody::encode("test", &serde_json::json!({"a": [1, "two"]}), 4).unwrap();
        assert_eq!(body.text(), r#"{"a":[1,"two"]}"#);
        assert_eq!(body.as_bytes(), br#"{"a":[1,"two"]}"#);
        assert_eq!(
            JsonBody::parse(" {\"a\": 1} ".into()).unwrap().text(),
            " {\"a\": 1} "
        );
        // Text outside ASCII is written as it is, and read back the same.
        let body = JsonBody::encode("test", &serde_json::json!({"k": "été ✓"}), 4).unwrap();
        assert_eq!(body.text(), "{\"k\":\"été ✓\"}");
        for not_json in ["", "{", "{\"a\": 1} {}", "nope"] {
            assert!(JsonBody::parse(not_json.into()).is_err(), "{not_json:?}");
        }
        // What is sent is the text, and debugging output shows it.
        let body = JsonBody::parse(r#"{"k":"v"}"#.into()).unwrap();
        assert_eq!(format!("{body:?}"), r#"JsonBody("{\"k\":\"v\"}")"#);
        assert_eq!(body.into_bytes(), br#"{"k":"v"}"#);
    }
}
