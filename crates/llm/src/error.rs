//! Codec errors: what was wrong with a body or a request, precisely enough to
//! fix it.

/// Whether an error object a provider sends inside a 200 response or a
/// stream names a passing condition: a `type`, `code` or `status` that means
/// overload, rate limit or a server fault (Anthropic `overloaded_error`,
/// OpenAI-style `server_error` or a numeric 5xx/429 `code`, Gemini
/// `UNAVAILABLE`). Anything else (an invalid request, a refused key, an
/// unknown kind) is the request's fault and is not retried.
pub fn is_transient_report(error: &serde_json::Value) -> bool {
    const TRANSIENT_KINDS: &[&str] = &[
        "overloaded_error",
        "api_error",
        "rate_limit_error",
        "server_error",
        "rate_limit_exceeded",
        "timeout_error",
        "UNAVAILABLE",
        "RESOURCE_EXHAUSTED",
        "INTERNAL",
        "DEADLINE_EXCEEDED",
    ];
    let transient_code = |code: u64| code == 408 || code == 429 || (500..600).contains(&code);
    ["type", "code", "status"]
        .iter()
        .any(|key| match error.get(key) {
            Some(serde_json::Value::String(kind)) => {
                TRANSIENT_KINDS.contains(&kind.as_str())
                    || kind.parse::<u64>().is_ok_and(transient_code)
            }
            Some(serde_json::Value::Number(code)) => code.as_u64().is_some_and(transient_code),
            _ => false,
        })
}

/// A request that cannot be encoded, or a response that cannot be decoded.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CodecError {
    /// The response body (or one frame of it) is not the JSON the protocol
    /// promises, in a way that loses content. Frames that are merely not JSON
    /// are skipped and counted instead.
    #[error("{protocol} response is malformed: {detail}")]
    MalformedResponse {
        protocol: &'static str,
        detail: String,
    },
    /// The provider reported an error inside a 200 response or a stream.
    #[error("{protocol} reported an error: {message}")]
    ProviderReported {
        protocol: &'static str,
        message: String,
        /// The provider named a kind of error that trying again may cure
        /// (an overload, a rate limit, a fault of its own; see
        /// [`is_transient_report`]). Before any content such a report is
        /// retried like the HTTP status it stands for.
        transient: bool,
    },
    /// The request cannot be expressed on this wire.
    #[error("cannot encode the request for {protocol}: {detail}")]
    Unencodable {
        protocol: &'static str,
        detail: String,
    },
}
