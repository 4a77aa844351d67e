//! The typed shape of a `GenerateContentResponse`: the decoder's fast path.
//!
//! Only the members the decoder reads are declared (`modelVersion`,
//! `responseId`, `safetyRatings`, ... are skipped without allocating), and a
//! call's `args` object is kept as the wire's own text ([`RawValue`]), so it
//! reaches the assembler without being parsed and re-serialised here. The
//! types are strict on purpose: a response that does not fit (an `error`, a
//! JSON array of responses, a member of an unexpected type, a `null` part)
//! fails to parse and is read by the `Value` path in `decode`, which owns
//! those rules. Anything this shape accepts must mean what the `Value` path
//! would make of it.

use serde::Deserialize;
use serde::de::IgnoredAny;
use serde_json::value::RawValue;

use crate::codec::present;

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(super) struct Response<'a> {
    /// Present at all (even `null`): the `Value` path reports it.
    #[serde(default, deserialize_with = "present")]
    pub error: Option<IgnoredAny>,
    pub prompt_feedback: Option<PromptFeedback>,
    #[serde(borrow)]
    pub candidates: Option<Vec<Candidate<'a>>>,
    pub usage_metadata: Option<UsageCounts>,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(super) struct PromptFeedback {
    pub block_reason: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(super) struct Candidate<'a> {
    #[serde(borrow)]
    pub content: Option<Content<'a>>,
    pub finish_reason: Option<String>,
}

#[derive(Debug, Deserialize)]
pub(super) struct Content<'a> {
    #[serde(borrow)]
    pub parts: Option<Vec<Part<'a>>>,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(super) struct Part<'a> {
    pub thought_signature: Option<String>,
    /// Present even as `null` (which does not fit, so goes the `Value` way):
    /// the `Value` path treats any `functionCall` member as a call.
    #[serde(default, deserialize_with = "present", borrow)]
    pub function_call: Option<FunctionCall<'a>>,
    pub text: Option<String>,
    pub thought: Option<bool>,
}

#[derive(Debug, Deserialize)]
pub(super) struct FunctionCall<'a> {
    pub name: Option<String>,
    pub id: Option<String>,
    /// `null` reads as absent, as on the `Value` path.
    #[serde(borrow)]
    pub args: Option<&'a RawValue>,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(super) struct UsageCounts {
    prompt_token_count: Option<u64>,
    candidates_token_count: Option<u64>,
    thoughts_token_count: Option<u64>,
    total_token_count: Option<u64>,
}

impl UsageCounts {
    /// The same numbers `usage_of` reads from a `Value`.
    pub fn usage(&self) -> Option<homeagent_core::Usage> {
        let usage = homeagent_core::Usage {
            prompt_tokens: self.prompt_token_count.unwrap_or(0),
            completion_tokens: self
                .candidates_token_count
                .unwrap_or(0)
                .saturating_add(self.thoughts_token_count.unwrap_or(0)),
            total_tokens: self.total_token_count.unwrap_or(0),
        };
        (usage != homeagent_core::Usage::default()).then_some(usage)
    }
}
