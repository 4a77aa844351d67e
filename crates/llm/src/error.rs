//! Codec errors: what was wrong with a body or a request, precisely enough to
//! fix it.

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
    },
    /// The request cannot be expressed on this wire.
    #[error("cannot encode the request for {protocol}: {detail}")]
    Unencodable {
        protocol: &'static str,
        detail: String,
    },
}
