//! What can go wrong with one model request, as types callers match on.

use std::path::PathBuf;
use std::time::Duration;

use crate::error::CodecError;

/// What can go wrong with one model request.
///
/// Match on the variant, never on the text: the variant says what to do
/// (retry, try the next source, disable the source, give up).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ProviderError {
    /// No HTTP response was obtained: DNS failure, connection refused or
    /// reset, TLS handshake or certificate failure, connect timeout.
    #[error("cannot reach the model server: {detail}")]
    Connect { detail: String },
    /// The server answered with an HTTP error status (other than 401/403).
    /// The message names the status already (`HTTP 400: ...`, see
    /// [`crate::codec::WireCodec::error_message`]); saying it twice read
    /// "answered HTTP 400: HTTP 400: ...".
    #[error("the model server answered {message}")]
    Status {
        status: u16,
        /// The provider's own error message (from [`crate::codec::WireCodec::error_message`]).
        message: String,
        /// The server's `Retry-After` (seconds or an HTTP date), when sent.
        retry_after: Option<Duration>,
    },
    /// The server says this source cannot answer, whatever the request
    /// (Gemini's 400 `FAILED_PRECONDITION`: the caller's region is not
    /// served): the next source is tried, as for a 403.
    #[error("the model server cannot answer for this source: {message}")]
    Unavailable { status: u16, message: String },
    /// HTTP 401 or 403: the credentials are missing, wrong or not allowed.
    /// Retrying will not help; the source should be disabled.
    #[error("the model server refused the credentials: {message}")]
    Unauthorized { status: u16, message: String },
    /// Nothing arrived for this long, while waiting for the headers or
    /// between two pieces of the body.
    #[error(
        "the model server sent nothing for {after:?}; a slow model (a large local one, a \
         long prompt) may need a longer `llm.stream_idle_timeout` in the configuration"
    )]
    IdleTimeout { after: Duration },
    /// The body was still coming after this long (a server that sends
    /// keep-alives and nothing else, an answer slower than anyone waits
    /// for): the whole of a request's body is bounded too.
    #[error(
        "the model's answer was still coming after {after:?}; a model that really needs longer \
         needs a longer `llm.request_timeout` in the configuration"
    )]
    RequestTimeout { after: Duration },
    /// The response ended early: before the wire's end marker, without a
    /// finish reason (Gemini), before any content, or the connection broke
    /// mid-body.
    #[error("the model's response was cut: {detail}")]
    Cut { detail: String },
    /// The request could not be encoded, or the response not decoded.
    #[error(transparent)]
    Codec(#[from] CodecError),
    /// The caller's cancellation token fired.
    #[error("the model request was cancelled")]
    Cancelled,
}

impl ProviderError {
    /// Whether trying the same request again (here or at another source)
    /// may succeed: connection failures, 5xx, 408, 429, silence, cut
    /// streams, and an error the provider reported in the stream that it
    /// marks as passing (overloaded, rate limited, unavailable).
    /// Credentials, other 4xx, other codec errors and cancellation are
    /// final.
    pub fn is_retryable(&self) -> bool {
        match self {
            ProviderError::Connect { .. }
            | ProviderError::IdleTimeout { .. }
            | ProviderError::Cut { .. } => true,
            ProviderError::Status { status, .. } => {
                *status >= 500 || *status == 429 || *status == 408
            }
            ProviderError::Codec(CodecError::ProviderReported { transient, .. }) => *transient,
            ProviderError::Unauthorized { .. }
            | ProviderError::Unavailable { .. }
            | ProviderError::Codec(_)
            | ProviderError::RequestTimeout { .. }
            | ProviderError::Cancelled => false,
        }
    }

    /// Whether the error says the source cannot answer (no credit, 402;
    /// refused for a reason of its own, 403: moderation, a region, an API
    /// not enabled; the model or endpoint gone, 404; moved, 3xx; an answer
    /// it cannot make readable) rather than that the request is wrong: not
    /// retried here, but the next source is tried.
    pub fn is_source_fault(&self) -> bool {
        matches!(
            self,
            ProviderError::Status {
                status: 402..=404 | 407,
                ..
            }
            // A redirect: the source's address moved (never followed,
            // since it would carry the key elsewhere).
            | ProviderError::Status {
                status: 300..=399,
                ..
            }
            // An answer the wire cannot read: the server's fault, which
            // another source need not share.
            | ProviderError::Codec(CodecError::MalformedResponse { .. })
            // Still coming after the longest anyone waits: asking it again
            // would wait as long.
            | ProviderError::RequestTimeout { .. }
            | ProviderError::Unavailable { .. }
        )
    }

    /// The server's `Retry-After`, when it sent one.
    pub fn retry_after(&self) -> Option<Duration> {
        match self {
            ProviderError::Status { retry_after, .. } => *retry_after,
            _ => None,
        }
    }
}

/// A provider could not be set up (before any request).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SetupError {
    /// A CA certificate file could not be read or holds no certificate.
    #[error("cannot use the CA certificate file {path}: {detail}")]
    CaFile { path: PathBuf, detail: String },
    /// The HTTP client could not be built (for example: no CA certificate
    /// could be found on the system and none was configured).
    #[error("cannot build the HTTP client: {detail}")]
    Client { detail: String },
    /// A source's configuration lacks a key its protocol needs, or holds a
    /// value it cannot use.
    #[error("model source {source_name}: `{key}` {detail}")]
    Invalid {
        source_name: String,
        key: &'static str,
        detail: String,
    },
    /// A `lua` source's adapter could not be found or loaded.
    #[error("model source {source_name}: {error}")]
    Adapter {
        source_name: String,
        #[source]
        error: crate::lua::AdapterError,
    },
    /// A `demo` source was configured, but no in-process model was given to
    /// answer for it (only the `homeagent` program provides one).
    #[error(
        "model source {source_name} uses protocol `demo`, but no offline demo model is \
         available here; use another protocol for this source"
    )]
    NoLocalModel { source_name: String },
}
