//! HTTP transport: a codec on one side, a model's HTTP API on the other.
//!
//! [`HttpProvider`] sends a [`ChatRequest`] to an [`Endpoint`] in the wire
//! shape of its [`WireCodec`] and reads the answer back as normalized
//! [`StreamEvent`]s:
//!
//! - [`HttpProvider::stream`] returns an [`EventStream`] as soon as the
//!   response headers arrive. Body bytes go through a
//!   [`FrameReader`] and then the codec's
//!   [`StreamDecoder`] *as they arrive*, so the first event is available
//!   while the model is still writing.
//! - [`HttpProvider::complete`] asks for a whole (non-streamed) response and
//!   returns the same events, decoded with [`WireCodec::decode_response`].
//!
//! Every failure is a [`ProviderError`] variant that callers match on (retry,
//! fall back to another source, disable a source), never a message to parse.
//!
//! # What the transport guarantees
//!
//! - **A silent server cannot hang the agent.** No bytes for
//!   [`Options::stream_idle_timeout`] (waiting for the headers, or between
//!   two pieces of the body) ends the request with
//!   [`ProviderError::IdleTimeout`].
//! - **A cut stream is an error, not a short answer.** A streamed body that
//!   ends before its wire's end marker (`[DONE]`, `message_stop`, Ollama's
//!   `done: true`) is [`ProviderError::Cut`]. Gemini has no end marker — its
//!   body's end is the stream's end — so a Gemini body that ends without any
//!   `finishReason` is `Cut`. A response that ends before any content at all
//!   is `Cut` on every wire.
//! - **Cancelling stops the request.** Cancelling the token (or dropping the
//!   [`EventStream`]) stops reading and drops the connection, so the server
//!   sees its client go away.
//! - **The API key is never logged.** Headers (where the codecs put the key)
//!   are marked sensitive and never become `tracing` fields; `Debug` of the
//!   provider, its endpoint and the wire request redacts the key.
//!
//! # TLS
//!
//! HTTPS uses rustls with the *ring* crypto provider (the only one in the
//! workspace), which [`install_crypto_provider`] installs as the process
//! default before the first client is built. Server certificates are
//! checked by `rustls-platform-verifier`: the operating system's verifier on
//! macOS and Windows, and on Linux the system's CA bundle as found by
//! `rustls-native-certs`, which reads `SSL_CERT_FILE` / `SSL_CERT_DIR`
//! *instead of* the system bundle when they are set (as OpenSSL does). On
//! platforms where the verifier ignores `SSL_CERT_FILE`, this module loads
//! that file itself as extra roots. [`Options::extra_ca_pem`] adds custom CA
//! certificates on top, everywhere. The rustls config holding that
//! verifier is made once per provider and shared by its clients (one per
//! sending thread): making it reads the system's CA bundle, some 7 ms.

use std::borrow::Cow;
use std::collections::VecDeque;
use std::path::PathBuf;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::{Duration, SystemTime};

use bytes::Bytes;
use futures_util::Stream;
use homeagent_core::{CancellationToken, FinishReason, StreamEvent};
use reqwest::header::{CONTENT_TYPE, HeaderName, HeaderValue, LOCATION, RETRY_AFTER};

use crate::codec::{Endpoint, Flow, Frame, Protocol, StreamDecoder, WireCodec, codec_for};
use crate::error::CodecError;
use crate::framing::FrameReader;
use crate::request::ChatRequest;

mod body;
mod error;
mod thread_clients;
mod url_memo;

pub use body::EventStream;
use body::{BodyReader, BodyWatch};
pub use error::{ProviderError, SetupError};
use url_memo::UrlMemo;

/// How long a stream may stay silent before it is cut, by default.
pub const DEFAULT_STREAM_IDLE_TIMEOUT: Duration = Duration::from_secs(60);
/// How long establishing a connection (TCP and TLS) may take, by default.
pub const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(15);
/// See [`Options::request_timeout`].
pub const DEFAULT_REQUEST_TIMEOUT: Duration = Duration::from_secs(30 * 60);
/// The largest whole (non-streamed) response body read, by default.
pub const DEFAULT_MAX_BODY_BYTES: usize = 64 * 1024 * 1024;
/// Error bodies are read up to this size; the provider's message is at the
/// start, and a misbehaving server cannot make us buffer more.
const MAX_ERROR_BODY_BYTES: usize = 64 * 1024;

/// Transport settings of one provider.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Options {
    /// A request that receives nothing for this long fails with
    /// [`ProviderError::IdleTimeout`]. Default 60 s.
    pub stream_idle_timeout: Duration,
    /// Time allowed to establish a connection. Default 15 s.
    pub connect_timeout: Duration,
    /// The longest a response's body is read, however steadily it comes
    /// ([`ProviderError::RequestTimeout`]). Default 30 min.
    pub request_timeout: Duration,
    /// PEM files of extra CA certificates (each may hold several), trusted
    /// in addition to the platform's roots.
    pub extra_ca_pem: Vec<PathBuf>,
    /// The largest whole response body [`HttpProvider::complete`] reads.
    /// Streamed bodies are bounded per frame by the framer instead.
    pub max_body_bytes: usize,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            stream_idle_timeout: DEFAULT_STREAM_IDLE_TIMEOUT,
            connect_timeout: DEFAULT_CONNECT_TIMEOUT,
            request_timeout: DEFAULT_REQUEST_TIMEOUT,
            extra_ca_pem: Vec::new(),
            max_body_bytes: DEFAULT_MAX_BODY_BYTES,
        }
    }
}

/// Installs rustls' *ring* crypto provider as the process default, unless a
/// default is already installed. Idempotent and cheap; [`HttpProvider::new`]
/// calls it, so callers only need it to build their own rustls clients.
pub fn install_crypto_provider() {
    if rustls::crypto::CryptoProvider::get_default().is_none() {
        // Losing a race with another thread installing one is fine.
        let _ = rustls::crypto::ring::default_provider().install_default();
    }
}

/// A model API over HTTP, speaking one wire protocol.
///
/// Cheap to share: requests take `&self`, and the underlying connection pool
/// is reused across them.
pub struct HttpProvider {
    codec: Box<dyn WireCodec>,
    endpoint: Endpoint,
    clients: thread_clients::ThreadClients,
    options: Options,
    url: UrlMemo,
}

impl std::fmt::Debug for HttpProvider {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HttpProvider")
            .field("protocol", &self.codec.protocol())
            // Endpoint's Debug redacts the key.
            .field("endpoint", &self.endpoint)
            .field("options", &self.options)
            .finish_non_exhaustive()
    }
}

impl HttpProvider {
    /// A provider for `protocol`'s native codec.
    pub fn new(
        protocol: Protocol,
        endpoint: Endpoint,
        options: Options,
    ) -> Result<Self, SetupError> {
        Self::with_codec(codec_for(protocol), endpoint, options)
    }

    /// A provider for any codec (a Lua adapter, a test double).
    pub fn with_codec(
        codec: Box<dyn WireCodec>,
        endpoint: Endpoint,
        options: Options,
    ) -> Result<Self, SetupError> {
        // One TLS config for all of the provider's clients: its verifier
        // reads the platform's CA roots when it is made (~19 M
        // instructions, some 7 ms, for the system bundle), which a
        // serving thread's first request would otherwise pay again.
        let tls = tls_config(&options)?;
        let first = build_client(&options, &tls)?;
        let again = options.clone();
        let clients =
            thread_clients::ThreadClients::new(first, move || build_client(&again, &tls).ok());
        Ok(HttpProvider {
            codec,
            endpoint,
            clients,
            options,
            url: UrlMemo::default(),
        })
    }

    pub fn protocol(&self) -> Protocol {
        self.codec.protocol()
    }

    pub fn endpoint(&self) -> &Endpoint {
        &self.endpoint
    }

    pub fn options(&self) -> &Options {
        &self.options
    }

    /// Sends `request` as a streamed request (whatever its `stream` field
    /// says) and returns the events as they arrive.
    ///
    /// Returns once the response headers are in: an HTTP error status is an
    /// error here, with the provider's message read from the error body.
    /// Errors while the body streams (silence, a cut, a decoding error,
    /// cancellation) come out of the [`EventStream`] after the events that
    /// preceded them, and end it.
    pub async fn stream(
        &self,
        request: &ChatRequest,
        cancel: CancellationToken,
    ) -> Result<EventStream, ProviderError> {
        let request = with_stream(request, true);
        let response = self.send(&request, &cancel).await?;
        let reader = BodyReader {
            body: Some(reqwest::Body::from(response)),
            frames: FrameReader::new(self.codec.framing()),
            decoder: self.codec.stream_decoder(),
            // Gemini's body ends where its stream ends; the others say so.
            has_end_marker: self.codec.protocol() != Protocol::Gemini,
            protocol: self.codec.protocol(),
            watch: BodyWatch::new(
                cancel,
                self.options.stream_idle_timeout,
                self.options.request_timeout,
            ),
            frame_buf: Vec::new(),
            events: VecDeque::new(),
            error: None,
            ended: false,
            any_content: false,
            finished: false,
        };
        Ok(EventStream {
            inner: Box::pin(reader),
        })
    }

    /// Sends `request` as a non-streamed request (whatever its `stream`
    /// field says) and returns all of the response's events.
    ///
    /// The idle timeout applies between pieces of the body as when
    /// streaming, so a server that stalls mid-body is cut off too.
    pub async fn complete(
        &self,
        request: &ChatRequest,
        cancel: CancellationToken,
    ) -> Result<Vec<StreamEvent>, ProviderError> {
        let request = with_stream(request, false);
        let mut response = reqwest::Body::from(self.send(&request, &cancel).await?);
        let limit = self.options.max_body_bytes;
        let mut body = Vec::new();
        let mut watch = BodyWatch::new(
            cancel,
            self.options.stream_idle_timeout,
            self.options.request_timeout,
        );
        while let Some(chunk) = watch.next_chunk(&mut response).await? {
            if body.len() + chunk.len() > limit {
                return Err(ProviderError::Codec(CodecError::MalformedResponse {
                    protocol: self.codec.protocol().as_str(),
                    detail: format!("the response body exceeds {limit} bytes"),
                }));
            }
            body.extend_from_slice(&chunk);
        }
        drop(response);
        if body.iter().all(u8::is_ascii_whitespace) {
            return Err(ProviderError::Cut {
                detail: "the response body is empty".into(),
            });
        }
        let events = self.codec.decode_response(&body)?;
        if events.is_empty() {
            return Err(ProviderError::Cut {
                detail: "the response holds no content".into(),
            });
        }
        Ok(events)
    }

    /// Encodes and sends `request`; returns a response with a success
    /// status, or the error its status means.
    async fn send(
        &self,
        request: &ChatRequest,
        cancel: &CancellationToken,
    ) -> Result<reqwest::Response, ProviderError> {
        let protocol = self.codec.protocol();
        let wire = self.codec.build_request(&self.endpoint, request)?;
        let body = wire.body.into_bytes();
        let client = self.clients.here();
        let builder = match self.url.parse(&wire.url) {
            Some(url) => client.post(url),
            None => client.post(&wire.url),
        };
        // Every codec names the content type (a Lua adapter may name its
        // own); a header added here as well went out twice, and a server
        // that reads only one may read the wrong one.
        let mut builder = if wire.headers.iter().any(|(name, _)| name == "content-type") {
            builder
        } else {
            builder.header(CONTENT_TYPE, "application/json")
        };
        for (name, value) in &wire.headers {
            let name =
                HeaderName::from_bytes(name.as_bytes()).map_err(|_| CodecError::Unencodable {
                    protocol: protocol.as_str(),
                    detail: format!("invalid header name {name:?}"),
                })?;
            let mut value = HeaderValue::from_str(value).map_err(|_| {
                // Never echo the value: it may be the key.
                CodecError::Unencodable {
                    protocol: protocol.as_str(),
                    detail: format!("the value of header {name} is not valid in HTTP"),
                }
            })?;
            // Codec headers may carry the key: keep them out of any Debug
            // output of the HTTP stack.
            value.set_sensitive(true);
            builder = builder.header(name, value);
        }
        // Only the URL and the protocol: never headers (they hold the key).
        tracing::debug!(
            protocol = protocol.as_str(),
            url = %crate::base_url::shown_url(&wire.url),
            stream = request.stream,
            body_bytes = body.len(),
            "sending a model request"
        );
        let idle = self.options.stream_idle_timeout;
        let response = tokio::select! {
            biased;
            () = cancel.cancelled() => return Err(ProviderError::Cancelled),
            sent = tokio::time::timeout(idle, builder.body(body).send()) => match sent {
                Err(_) => return Err(ProviderError::IdleTimeout { after: idle }),
                Ok(Err(err)) => {
                    return Err(ProviderError::Connect {
                        detail: describe_request_error(err),
                    });
                }
                Ok(Ok(response)) => response,
            },
        };
        let status = response.status();
        if status.is_success() {
            return Ok(response);
        }
        Err(self.status_error(response, cancel).await)
    }

    /// The error for a response with an error status, with the provider's
    /// message from its body (read best-effort: a body that stalls or
    /// breaks still gives the status).
    async fn status_error(
        &self,
        response: reqwest::Response,
        cancel: &CancellationToken,
    ) -> ProviderError {
        let status = response.status().as_u16();
        if response.status().is_redirection() {
            return redirect_error(status, response.headers().get(LOCATION));
        }
        let retry_after = response
            .headers()
            .get(RETRY_AFTER)
            .and_then(|value| value.to_str().ok())
            .and_then(|value| parse_retry_after(value, SystemTime::now()));
        let mut response = reqwest::Body::from(response);
        let mut body = Vec::new();
        let mut watch = BodyWatch::new(
            cancel.clone(),
            self.options.stream_idle_timeout,
            self.options.request_timeout,
        );
        loop {
            match watch.next_chunk(&mut response).await {
                Ok(Some(chunk)) => {
                    let room = MAX_ERROR_BODY_BYTES.saturating_sub(body.len());
                    body.extend_from_slice(&chunk[..chunk.len().min(room)]);
                    if body.len() >= MAX_ERROR_BODY_BYTES {
                        break;
                    }
                }
                Ok(None) => break,
                Err(ProviderError::Cancelled) => return ProviderError::Cancelled,
                Err(_) => break,
            }
        }
        let retry_after = retry_after.or_else(|| self.codec.retry_delay(&body));
        let message = self.codec.error_message(status, &body);
        tracing::debug!(
            protocol = self.codec.protocol().as_str(),
            status,
            "the model server answered with an error status"
        );
        // Only 401 says the key was refused (or what the protocol says
        // instead: `Codec::refused_key`). A 403 is as often moderation, a
        // region or an API not enabled: the source cannot answer now
        // (`is_source_fault`), which does not disable it for good.
        if self.codec.refused_key(status, &body) {
            ProviderError::Unauthorized { status, message }
        } else if self.codec.source_unavailable(status, &body) {
            ProviderError::Unavailable { status, message }
        } else {
            ProviderError::Status {
                status,
                message,
                retry_after,
            }
        }
    }
}

/// The error for a redirect, which is never followed (see `build_client`):
/// names where the server points, minus any query (it may carry a token).
fn redirect_error(status: u16, location: Option<&HeaderValue>) -> ProviderError {
    let message = match location.and_then(|value| value.to_str().ok()) {
        Some(location) => {
            let location = location.split(['?', '#']).next().unwrap_or_default();
            format!(
                "HTTP {status}: a redirect to {location}; HomeAgent does not follow redirects \
                 (they would carry the API key to another address): set the source's \
                 `base_url` to the new address"
            )
        }
        None => {
            format!("HTTP {status}: a redirect without a Location; check the source's `base_url`")
        }
    };
    ProviderError::Status {
        status,
        message,
        retry_after: None,
    }
}

/// `request` with its `stream` flag set to `stream`, cloned only if needed.
fn with_stream(request: &ChatRequest, stream: bool) -> Cow<'_, ChatRequest> {
    if request.stream == stream {
        Cow::Borrowed(request)
    } else {
        let mut owned = request.clone();
        owned.stream = stream;
        Cow::Owned(owned)
    }
}

/// Parses a `Retry-After` value: delay-seconds, or an HTTP date (a date in
/// the past means "now": zero).
pub fn parse_retry_after(value: &str, now: SystemTime) -> Option<Duration> {
    let value = value.trim();
    if let Ok(seconds) = value.parse::<u64>() {
        return Some(Duration::from_secs(seconds));
    }
    let when = httpdate::parse_http_date(value).ok()?;
    Some(when.duration_since(now).unwrap_or(Duration::ZERO))
}

/// An error and its causes on one line (reqwest's own message is terse:
/// "error sending request"; the cause says "connection refused").
/// A reqwest error's text, with the URL it names shown without
/// credentials (reqwest prints the URL it was sending to).
fn describe_request_error(mut error: reqwest::Error) -> String {
    if let Some(url) = error.url_mut() {
        crate::base_url::redact(url);
    }
    describe(&error)
}

fn describe(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        let cause_text = cause.to_string();
        if !text.contains(&cause_text) {
            text.push_str(": ");
            text.push_str(&cause_text);
        }
        source = cause.source();
    }
    text
}

/// The rustls settings of a provider's clients: what reqwest builds for
/// its rustls backend by default (the platform verifier, with the
/// configured CA files as extra roots; TLS 1.2 and 1.3; HTTP/1.1 by ALPN),
/// made once and handed to every client.
fn tls_config(options: &Options) -> Result<rustls::ClientConfig, SetupError> {
    install_crypto_provider();
    #[cfg(test)]
    tests::TLS_CONFIGS_MADE.with(|made| made.set(made.get() + 1));
    let mut roots = Vec::new();
    for path in &options.extra_ca_pem {
        roots.extend(load_ca_file(path)?);
    }
    // Where the platform verifier reads SSL_CERT_FILE itself (through
    // rustls-native-certs), loading it here too would be redundant.
    #[cfg(not(all(
        unix,
        not(target_os = "android"),
        not(target_vendor = "apple"),
        not(target_arch = "wasm32"),
    )))]
    if let Some(path) = std::env::var_os("SSL_CERT_FILE") {
        roots.extend(load_ca_file(std::path::Path::new(&path))?);
    }
    let provider = rustls::crypto::CryptoProvider::get_default()
        .cloned()
        .unwrap_or_else(|| std::sync::Arc::new(rustls::crypto::ring::default_provider()));
    let client_error = |detail: String| SetupError::Client { detail };
    let verifier = if roots.is_empty() {
        rustls_platform_verifier::Verifier::new(provider.clone())
    } else {
        extra_roots_verifier(roots, provider.clone())
    }
    .map_err(|err| client_error(format!("cannot set up certificate verification: {err}")))?;
    let mut config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|err| client_error(format!("no TLS version to offer: {err}")))?
        .dangerous()
        .with_custom_certificate_verifier(std::sync::Arc::new(verifier))
        .with_no_client_auth();
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(config)
}

/// The platform verifier with `roots` trusted as well, where it can take
/// extra roots.
#[cfg(any(all(unix, not(target_os = "android")), target_os = "windows"))]
fn extra_roots_verifier(
    roots: Vec<rustls::pki_types::CertificateDer<'static>>,
    provider: std::sync::Arc<rustls::crypto::CryptoProvider>,
) -> Result<rustls_platform_verifier::Verifier, rustls::Error> {
    rustls_platform_verifier::Verifier::new_with_extra_roots(roots, provider)
}

#[cfg(not(any(all(unix, not(target_os = "android")), target_os = "windows")))]
fn extra_roots_verifier(
    _roots: Vec<rustls::pki_types::CertificateDer<'static>>,
    _provider: std::sync::Arc<rustls::crypto::CryptoProvider>,
) -> Result<rustls_platform_verifier::Verifier, rustls::Error> {
    Err(rustls::Error::General(
        "this platform's verifier cannot trust extra CA certificates".into(),
    ))
}

/// A client with `tls` (cheap: the config's parts are shared) and a pool
/// of its own.
fn build_client(
    options: &Options,
    tls: &rustls::ClientConfig,
) -> Result<reqwest::Client, SetupError> {
    reqwest::Client::builder()
        .connect_timeout(options.connect_timeout)
        // A redirect is an error, not a detour: the client would re-send
        // the request, API key headers included, to whatever host (and
        // scheme) the Location names. `status_error` names the new address
        // so the user can move `base_url` there deliberately.
        .redirect(reqwest::redirect::Policy::none())
        .tls_backend_preconfigured(tls.clone())
        .build()
        .map_err(|err| SetupError::Client {
            detail: describe(&err),
        })
}

fn load_ca_file(
    path: &std::path::Path,
) -> Result<Vec<rustls::pki_types::CertificateDer<'static>>, SetupError> {
    use rustls::pki_types::CertificateDer;
    use rustls::pki_types::pem::PemObject;
    let ca_error = |detail: String| SetupError::CaFile {
        path: path.to_owned(),
        detail,
    };
    let pem = std::fs::read(path).map_err(|err| ca_error(err.to_string()))?;
    let certs = CertificateDer::pem_slice_iter(&pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|err| ca_error(format!("not a PEM certificate bundle: {err}")))?;
    if certs.is_empty() {
        return Err(ca_error("no PEM certificate in the file".into()));
    }
    Ok(certs)
}

#[cfg(test)]
mod tests {
    use super::*;

    thread_local! {
        /// The TLS configs [`tls_config`] made on this thread.
        pub(super) static TLS_CONFIGS_MADE: std::cell::Cell<usize> =
            const { std::cell::Cell::new(0) };
    }

    /// A provider reads the platform's CA roots once: a thread's first
    /// request builds that thread's client with the provider's TLS config
    /// instead of making another.
    #[test]
    fn a_provider_makes_its_tls_config_once_for_every_thread() {
        let provider = HttpProvider::new(
            Protocol::Openai,
            Endpoint {
                base_url: "http://127.0.0.1:9/v1".into(),
                api_key: None,
            },
            Options::default(),
        )
        .unwrap_or_else(|err| panic!("{err}"));
        assert_eq!(TLS_CONFIGS_MADE.with(std::cell::Cell::get), 1);
        let provider = std::sync::Arc::new(provider);
        let _ = provider.clients.here();
        for _ in 0..2 {
            let provider = std::sync::Arc::clone(&provider);
            let made = std::thread::spawn(move || {
                let _ = provider.clients.here();
                TLS_CONFIGS_MADE.with(std::cell::Cell::get)
            })
            .join()
            .unwrap_or_else(|_| panic!("the thread panicked"));
            assert_eq!(made, 0, "a thread's client made a TLS config of its own");
        }
        assert_eq!(provider.clients.taken(), 3);
        assert_eq!(TLS_CONFIGS_MADE.with(std::cell::Cell::get), 1);
    }

    #[test]
    fn retry_after_reads_seconds_and_http_dates() {
        let now = httpdate::parse_http_date("Sun, 06 Nov 1994 08:49:37 GMT")
            .unwrap_or(SystemTime::UNIX_EPOCH);
        assert_eq!(
            parse_retry_after("120", now),
            Some(Duration::from_secs(120))
        );
        assert_eq!(parse_retry_after(" 0 ", now), Some(Duration::ZERO));
        assert_eq!(
            parse_retry_after("Sun, 06 Nov 1994 08:50:07 GMT", now),
            Some(Duration::from_secs(30))
        );
        // In the past: retry now.
        assert_eq!(
            parse_retry_after("Sun, 06 Nov 1994 08:00:00 GMT", now),
            Some(Duration::ZERO)
        );
        assert_eq!(parse_retry_after("soon", now), None);
        assert_eq!(parse_retry_after("-5", now), None);
    }

    #[test]
    fn retryable_errors_are_the_transient_ones() {
        let status = |status| ProviderError::Status {
            status,
            message: String::new(),
            retry_after: None,
        };
        assert!(status(500).is_retryable());
        assert!(status(503).is_retryable());
        assert!(status(429).is_retryable());
        assert!(!status(400).is_retryable());
        assert!(!status(404).is_retryable());
        assert!(
            !ProviderError::Unauthorized {
                status: 401,
                message: String::new()
            }
            .is_retryable()
        );
        assert!(
            ProviderError::Connect {
                detail: String::new()
            }
            .is_retryable()
        );
        assert!(
            ProviderError::IdleTimeout {
                after: Duration::ZERO
            }
            .is_retryable()
        );
        assert!(
            ProviderError::Cut {
                detail: String::new()
            }
            .is_retryable()
        );
        assert!(!ProviderError::Cancelled.is_retryable());
    }

    #[test]
    fn a_missing_ca_file_is_a_setup_error_naming_it() {
        let options = Options {
            extra_ca_pem: vec![PathBuf::from("/nonexistent/homeagent-ca.pem")],
            ..Options::default()
        };
        let err = tls_config(&options).err();
        assert!(
            matches!(&err, Some(SetupError::CaFile { path, .. }) if path.ends_with("homeagent-ca.pem")),
            "{err:?}"
        );
    }
}
