//! The typed shape of a Messages stream event: the decoder's fast path.
//!
//! One struct covers every event type (`message_start`, `content_block_*`,
//! `message_delta`, ...): each declares a few of these members and the rest
//! are skipped without allocating. The types are strict on purpose: an
//! event that does not fit (a member of an unexpected type, a type name with
//! escapes) fails to parse and is read by the `Value` path in `decode`,
//! which owns those rules. Anything this shape accepts must mean what the
//! `Value` path would make of it.

use serde::Deserialize;
use serde_json::value::RawValue;

#[derive(Debug, Deserialize)]
pub(super) struct Event<'a> {
    /// Type names never carry escapes, so they are borrowed.
    #[serde(rename = "type", borrow)]
    pub kind: Option<&'a str>,
    pub index: Option<u64>,
    pub message: Option<MessageHead>,
    #[serde(borrow)]
    pub content_block: Option<Block<'a>>,
    #[serde(borrow)]
    pub delta: Option<Delta<'a>>,
    pub usage: Option<UsageCounts>,
}

impl Event<'_> {
    /// The block index as a `stream_index` (see `block_index`).
    pub fn block_index(&self) -> Option<u32> {
        self.index.and_then(|i| u32::try_from(i).ok())
    }
}

/// `message_start`'s `message`: only its usage is read.
#[derive(Debug, Deserialize)]
pub(super) struct MessageHead {
    pub usage: Option<UsageCounts>,
}

/// A `content_block` of `content_block_start`.
#[derive(Debug, Deserialize)]
pub(super) struct Block<'a> {
    #[serde(rename = "type", borrow)]
    pub kind: Option<&'a str>,
    pub text: Option<String>,
    pub thinking: Option<String>,
    pub signature: Option<String>,
    pub data: Option<String>,
    pub id: Option<String>,
    pub name: Option<String>,
    /// Kept raw: it is almost always the `{}` placeholder, which is only
    /// looked at, never parsed.
    #[serde(borrow)]
    pub input: Option<&'a RawValue>,
}

/// The `delta` of `content_block_delta` and of `message_delta`.
#[derive(Debug, Deserialize)]
pub(super) struct Delta<'a> {
    #[serde(rename = "type", borrow)]
    pub kind: Option<&'a str>,
    pub text: Option<String>,
    pub thinking: Option<String>,
    pub signature: Option<String>,
    pub partial_json: Option<String>,
    pub stop_reason: Option<String>,
}

/// Token counts (see `usage_of`).
#[derive(Debug, Deserialize)]
pub(super) struct UsageCounts {
    input_tokens: Option<u64>,
    cache_read_input_tokens: Option<u64>,
    cache_creation_input_tokens: Option<u64>,
    output_tokens: Option<u64>,
}

impl UsageCounts {
    /// The same numbers `usage_of` reads from a `Value`.
    pub fn usage(&self) -> Option<homeagent_core::Usage> {
        let count = |n: Option<u64>| n.unwrap_or(0);
        super::decode::usage_from_counts(
            [
                count(self.input_tokens),
                count(self.cache_read_input_tokens),
                count(self.cache_creation_input_tokens),
            ],
            count(self.output_tokens),
        )
    }
}
