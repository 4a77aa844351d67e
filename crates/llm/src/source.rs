//! Model sources and fallback between them.
//!
//! A [`Sources`] set holds the configured model servers in order (higher
//! `priority` first, then name) and sends each request to the first one
//! that answers:
//!
//! - A connect error, a 5xx, a 429, silence, a stream that ends before
//!   any content, or a provider's report of an overload or fault of its own
//!   before any content (Anthropic's `overloaded_error` event after
//!   `message_start`: usage is not content) is retried at the same source with a short backoff
//!   (honouring `Retry-After`, capped), then the next source is tried. The
//!   failed source cools down (30 s doubling to 30 min by default) and is
//!   skipped while another source can be tried; a single source, or a set
//!   whose sources all cool down, is still tried: never locked out.
//! - 401/403 disables the source, with a reason naming it and the
//!   environment variable holding its key; it is never retried.
//! - Any other 4xx (or a request the codec cannot encode) is the request's
//!   fault: it is returned at once, without fallback.
//! - A stream that has yielded content and then fails is not retried (the
//!   caller already has partial output): the error comes out of the stream.
//! - `max_concurrent` is a semaphore per source: a request waits for a
//!   permit, held until its stream ends or is dropped.
//!
//! API keys are read from the environment variable a source names and never
//! logged; `Debug` of every type here redacts them.

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use futures_util::Stream;
use homeagent_core::{CancellationToken, StreamEvent, is_env_var_name};
use serde::{Deserialize, Serialize};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use crate::CodecError;
use crate::codec::{Endpoint, Protocol};
use crate::lua::{LuaAdapter, LuaCodec};
use crate::request::ChatRequest;
use crate::transport::{EventStream, HttpProvider, Options, ProviderError, SetupError};

/// How a source is reached: one of the four native wires, a Lua adapter
/// over HTTP, or the in-process demo model.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum SourceProtocol {
    /// OpenAI Chat Completions and every server compatible with it.
    Openai,
    /// Anthropic Messages.
    Anthropic,
    /// Google Gemini.
    Gemini,
    /// Ollama's native `/api/chat`.
    Ollama,
    /// A Lua adapter (`adapter`) over HTTP.
    Lua,
    /// The offline demo model, answering in-process.
    Demo,
}

impl SourceProtocol {
    /// The native wire this protocol speaks, when it is one of the four.
    pub fn wire(self) -> Option<Protocol> {
        match self {
            SourceProtocol::Openai => Some(Protocol::Openai),
            SourceProtocol::Anthropic => Some(Protocol::Anthropic),
            SourceProtocol::Gemini => Some(Protocol::Gemini),
            SourceProtocol::Ollama => Some(Protocol::Ollama),
            SourceProtocol::Lua | SourceProtocol::Demo => None,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            SourceProtocol::Openai => "openai",
            SourceProtocol::Anthropic => "anthropic",
            SourceProtocol::Gemini => "gemini",
            SourceProtocol::Ollama => "ollama",
            SourceProtocol::Lua => "lua",
            SourceProtocol::Demo => "demo",
        }
    }
}

impl From<Protocol> for SourceProtocol {
    fn from(protocol: Protocol) -> Self {
        match protocol {
            Protocol::Openai => SourceProtocol::Openai,
            Protocol::Anthropic => SourceProtocol::Anthropic,
            Protocol::Gemini => SourceProtocol::Gemini,
            Protocol::Ollama => SourceProtocol::Ollama,
        }
    }
}

/// The model name a `demo` source sends when its config names none.
pub const DEMO_MODEL: &str = "demo";

/// One model source as configured (`[[llm.sources]]`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SourceConfig {
    /// A unique name; logs, status and errors use it.
    pub name: String,
    /// openai | anthropic | gemini | ollama | lua | demo
    pub protocol: SourceProtocol,
    /// Each provider's own SDK convention: OpenAI-compatible with `/v1`,
    /// Anthropic, Gemini and Ollama without a version path. Required except
    /// for `demo`. An http or https URL; without a query or fragment except
    /// for `lua` (the other protocols append their paths to it). Shown
    /// without user name, password or query.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub base_url: Option<String>,
    /// The model to ask for. Required except for `demo`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    /// The environment variable holding the API key (never the key itself).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub api_key_env: Option<String>,
    /// Sources are tried highest priority first, then by name.
    #[serde(default)]
    pub priority: i32,
    /// At most this many requests in flight at this source.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_concurrent: Option<usize>,
    /// For `protocol = "lua"`: an adapter name (looked up in the adapter
    /// directory, then among the bundled `openai` and `anthropic`) or the
    /// path of a `.lua` file.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub adapter: Option<String>,
}

impl SourceConfig {
    /// A source with only its name and protocol set; fill in the rest with
    /// struct update syntax.
    pub fn new(name: impl Into<String>, protocol: SourceProtocol) -> Self {
        SourceConfig {
            name: name.into(),
            protocol,
            base_url: None,
            model: None,
            api_key_env: None,
            priority: 0,
            max_concurrent: None,
            adapter: None,
        }
    }
}

/// A model that answers in-process, for `protocol = "demo"` sources: the
/// offline demo model. It receives the request with the source's model
/// name filled in and returns the whole response as events.
pub trait LocalModel: Send + Sync + 'static {
    fn respond(&self, request: &ChatRequest) -> Result<Vec<StreamEvent>, ProviderError>;
}

/// What building sources needs besides their configs.
#[derive(Clone, Default)]
pub struct SourceSetup {
    /// Where user adapters live; `<dir>/<name>.lua` overrides the bundled
    /// adapter of that name.
    pub adapter_dir: Option<PathBuf>,
    /// The model that answers for `demo` sources.
    pub local_model: Option<Arc<dyn LocalModel>>,
}

impl std::fmt::Debug for SourceSetup {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SourceSetup")
            .field("adapter_dir", &self.adapter_dir)
            .field("local_model", &self.local_model.is_some())
            .finish()
    }
}

/// Retry, backoff and cooldown settings, plus the transport's [`Options`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FallbackOptions {
    /// Tries per source and request (at least 1). Default 2.
    pub attempts_per_source: u32,
    /// Wait before the second try at a source; doubles per try. Default 200 ms.
    pub backoff_base: Duration,
    /// The longest `Retry-After` waited out before a retry. A longer one is
    /// not cut short: the source is not asked again in this request (the
    /// next source is tried) and cools down at least that long. Default
    /// 10 s.
    pub max_retry_after: Duration,
    /// Cooldown after a source's first failure; doubles per failure.
    /// Default 30 s.
    pub cooldown_base: Duration,
    /// The longest cooldown. Default 30 min.
    pub cooldown_max: Duration,
    /// Transport settings of every source.
    pub transport: Options,
}

impl Default for FallbackOptions {
    fn default() -> Self {
        FallbackOptions {
            attempts_per_source: 2,
            backoff_base: Duration::from_millis(200),
            max_retry_after: Duration::from_secs(10),
            cooldown_base: Duration::from_secs(30),
            cooldown_max: Duration::from_secs(30 * 60),
            transport: Options::default(),
        }
    }
}

/// Why no stream came back.
///
/// (`Display` and `Error` are written out rather than derived: thiserror
/// would take the `source` fields, which name model sources, for error
/// sources.)
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FallbackError {
    /// Every source tried failed; each failure, in the order tried.
    AllFailed {
        attempts: Vec<(String, ProviderError)>,
    },
    /// The only usable source(s) refused the credentials (or have no key);
    /// the first is named, with the variable to fix.
    Disabled {
        source: String,
        env_var: Option<String>,
        /// What the provider said when it refused the key (401), `None`
        /// when no request was made (the key is missing).
        refusal: Option<String>,
    },
    /// The source rejected the request itself (a 4xx that says the request
    /// is wrong: not 401, 402, 403, 404, 408 or 429; or a request that
    /// cannot be encoded): no other source is tried.
    Rejected {
        source: String,
        error: ProviderError,
    },
    /// No source is configured.
    NoSources,
    /// The caller's cancellation token fired.
    Cancelled,
}

impl std::fmt::Display for FallbackError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            FallbackError::AllFailed { attempts } => {
                write!(
                    f,
                    "every model source failed: {}",
                    describe_attempts(attempts)
                )
            }
            FallbackError::Disabled {
                source,
                env_var,
                refusal,
            } => {
                match env_var {
                    Some(var) => write!(
                        f,
                        "model source {source} is disabled: its API key is missing or was \
                         refused; set a valid key in the environment variable {var}"
                    )?,
                    None => write!(
                        f,
                        "model source {source} is disabled: its credentials were refused; \
                         configure an API key for it (api_key_env)"
                    )?,
                }
                match refusal {
                    Some(refusal) => write!(f, " (the provider said: {refusal})"),
                    None => Ok(()),
                }
            }
            FallbackError::Rejected { source, error } => {
                write!(f, "model source {source} rejected the request: {error}")
            }
            FallbackError::NoSources => f.write_str("no model source is configured"),
            FallbackError::Cancelled => f.write_str("the model request was cancelled"),
        }
    }
}

impl std::error::Error for FallbackError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            FallbackError::Rejected { error, .. } => Some(error),
            _ => None,
        }
    }
}

fn describe_attempts(attempts: &[(String, ProviderError)]) -> String {
    attempts
        .iter()
        .map(|(source, error)| format!("{source}: {error}"))
        .collect::<Vec<_>>()
        .join("; ")
}

fn disabled_reason(source: &str, env_var: Option<&str>) -> String {
    match env_var {
        Some(var) => format!(
            "model source {source} is disabled: its credentials were refused; \
             fix the API key in the environment variable {var}"
        ),
        None => format!(
            "model source {source} is disabled: its credentials were refused; \
             configure an API key for it (api_key_env)"
        ),
    }
}

/// A source's state, for `/api/v1/status`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SourceHealth {
    pub name: String,
    pub protocol: SourceProtocol,
    pub model: String,
    pub base_url: String,
    /// Why the source is disabled, when it is.
    pub disabled: Option<String>,
    /// Time left in its cooldown, when cooling down.
    pub cooling_down_for: Option<Duration>,
    /// Consecutive failed requests (reset by a success).
    pub failures: u32,
    /// Requests holding the source now (streams not yet finished).
    pub in_flight: usize,
}

#[derive(Debug, Default)]
struct SourceState {
    disabled: Option<String>,
    /// The provider's refusal that disabled the source, for the error.
    refusal: Option<String>,
    failures: u32,
    cooldown_until: Option<Instant>,
    /// When the last failure set `cooldown_until`.
    cooled_at: Option<Instant>,
}

struct Source {
    name: String,
    model: String,
    api_key_env: Option<String>,
    priority: i32,
    protocol: SourceProtocol,
    backend: Backend,
    permits: Option<Arc<Semaphore>>,
    in_flight: Arc<AtomicUsize>,
    /// Shared with the streams the source gives, which report a failure
    /// after their opening (see [`SourceStream`]).
    state: Arc<Mutex<SourceState>>,
}

impl std::fmt::Debug for Source {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // HttpProvider's Debug redacts the key.
        f.debug_struct("Source")
            .field("name", &self.name)
            .field("model", &self.model)
            .field("api_key_env", &self.api_key_env)
            .field("priority", &self.priority)
            .field("backend", &self.backend)
            .finish_non_exhaustive()
    }
}

/// Where a source's answers come from.
enum Backend {
    Http(HttpProvider),
    Local(Arc<dyn LocalModel>),
}

impl std::fmt::Debug for Backend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            // HttpProvider's Debug redacts the key.
            Backend::Http(provider) => provider.fmt(f),
            Backend::Local(_) => f.write_str("LocalModel"),
        }
    }
}

impl Backend {
    async fn stream(
        &self,
        request: &ChatRequest,
        cancel: CancellationToken,
    ) -> Result<EventStream, ProviderError> {
        match self {
            Backend::Http(provider) => provider.stream(request, cancel).await,
            Backend::Local(model) => model.respond(request).map(EventStream::from_events),
        }
    }

    /// The wire's name, for errors about what it sent.
    fn protocol_name(&self) -> &'static str {
        match self {
            Backend::Http(provider) => provider.protocol().as_str(),
            Backend::Local(_) => "demo",
        }
    }

    /// Where requests go, fit to show (without credentials).
    fn shown_address(&self) -> String {
        match self {
            Backend::Http(provider) => crate::base_url::shown_url(&provider.endpoint().base_url),
            Backend::Local(_) => "in-process".to_owned(),
        }
    }
}

impl Source {
    fn state(&self) -> MutexGuard<'_, SourceState> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn cooling(&self, now: Instant) -> bool {
        self.state().cooldown_until.is_some_and(|until| until > now)
    }

    fn succeeded(&self) {
        let mut state = self.state();
        state.failures = 0;
        state.cooldown_until = None;
        state.cooled_at = None;
    }

    /// Counts a failure of a request asked at `asked` and cools the source
    /// down: the doubling cooldown, or the server's `Retry-After`
    /// (`at_least`) when that is longer. A request asked before the last
    /// failure cooled the source was in flight with it: the same outage,
    /// counted once (seven requests failing together doubled the cooldown
    /// seven times).
    fn failed(&self, options: &FallbackOptions, at_least: Option<Duration>, asked: Instant) {
        record_failure(&self.state, Cooldowns::of(options), at_least, asked);
    }

    fn disable(&self, reason: String) {
        tracing::warn!(source = %self.name, "{reason}");
        self.state().disabled = Some(reason);
    }
}

/// A source's cooldown settings (of its [`FallbackOptions`]): what a
/// stream carries to count a failure after its opening.
#[derive(Debug, Clone, Copy)]
struct Cooldowns {
    cooldown_base: Duration,
    cooldown_max: Duration,
}

impl Cooldowns {
    fn of(options: &FallbackOptions) -> Cooldowns {
        Cooldowns {
            cooldown_base: options.cooldown_base,
            cooldown_max: options.cooldown_max,
        }
    }
}

/// [`Source::failed`] on a source's shared state.
fn record_failure(
    state: &Mutex<SourceState>,
    options: Cooldowns,
    at_least: Option<Duration>,
    asked: Instant,
) {
    // A server's wait is honoured up to a day: one header of years
    // would put a source behind every other for good (and one past
    // what the clock can add gave no cooldown at all).
    let at_least = at_least.map(|wait| wait.min(MAX_SERVER_COOLDOWN));
    let mut state = state.lock().unwrap_or_else(PoisonError::into_inner);
    if state.cooled_at.is_some_and(|cooled| asked < cooled) {
        if let Some(at_least) = at_least {
            let now = Instant::now();
            let until = now.checked_add(at_least).unwrap_or(now);
            state.cooldown_until = state.cooldown_until.max(Some(until));
        }
        return;
    }
    state.failures = state.failures.saturating_add(1);
    let doublings = state.failures.saturating_sub(1).min(20);
    let cooldown = options
        .cooldown_base
        .saturating_mul(1u32 << doublings)
        .min(options.cooldown_max)
        .max(at_least.unwrap_or_default());
    let now = Instant::now();
    state.cooldown_until = Some(now.checked_add(cooldown).unwrap_or(now));
    state.cooled_at = Some(now);
}

/// The configured model sources, in the order they are tried.
#[derive(Debug)]
pub struct Sources {
    sources: Vec<Source>,
    options: FallbackOptions,
}

/// What one source's tries came to.
enum Outcome {
    Stream(SourceStream),
    /// Retryable failures used up every try.
    Failed(ProviderError),
    Unauthorized(ProviderError),
    Rejected(ProviderError),
    Cancelled,
}

impl Sources {
    /// Sources from configuration; keys are read through `env` from each
    /// source's `api_key_env`. A source whose key variable is unset is kept
    /// but disabled, with a reason naming the variable. `lua` sources find
    /// their adapter through `setup.adapter_dir`; `demo` sources need
    /// `setup.local_model`.
    pub fn build(
        configs: Vec<SourceConfig>,
        env: &impl Fn(&str) -> Option<String>,
        options: FallbackOptions,
        setup: &SourceSetup,
    ) -> Result<Sources, SetupError> {
        let mut sources = Vec::with_capacity(configs.len());
        for config in configs {
            // Set but empty is missing too: `config check` says so, and an
            // empty key only earns a 401 later.
            // Trimmed: a key read from a CRLF file ends in `\r`, which no
            // header may hold (every request failed as unencodable).
            let api_key = config
                .api_key_env
                .as_deref()
                .and_then(env)
                .map(|key| key.trim().to_owned())
                .filter(|key| !key.is_empty());
            let missing = match (&config.api_key_env, &api_key) {
                (Some(var), None) => Some(format!(
                    "model source {} is disabled: the environment variable {var} \
                     (its API key) is not set",
                    config.name
                )),
                _ => None,
            };
            let (backend, model) = build_backend(&config, api_key, &options, setup)?;
            sources.push(Source {
                name: config.name,
                model,
                api_key_env: config.api_key_env,
                priority: config.priority,
                protocol: config.protocol,
                backend,
                permits: config.max_concurrent.map(|n| Arc::new(Semaphore::new(n))),
                in_flight: Arc::new(AtomicUsize::new(0)),
                state: Arc::new(Mutex::new(SourceState {
                    disabled: missing,
                    ..SourceState::default()
                })),
            });
        }
        sources.sort_by(|a, b| b.priority.cmp(&a.priority).then(a.name.cmp(&b.name)));
        Ok(Sources { sources, options })
    }

    /// [`Sources::build`] without an adapter directory or a local model.
    pub fn from_config(
        configs: Vec<SourceConfig>,
        env: &impl Fn(&str) -> Option<String>,
        options: FallbackOptions,
    ) -> Result<Sources, SetupError> {
        Self::build(configs, env, options, &SourceSetup::default())
    }

    /// Sources found through the conventional environment variables:
    /// `OPENAI_API_KEY` (with `OPENAI_BASE_URL`), `ANTHROPIC_API_KEY`,
    /// `GEMINI_API_KEY`, `OLLAMA_HOST`. Each uses its provider's default
    /// model unless `HOMEAGENT_MODEL` names one. Empty when none is set.
    pub fn from_environment(
        env: &impl Fn(&str) -> Option<String>,
        options: FallbackOptions,
    ) -> Result<Sources, SetupError> {
        Self::from_config(environment_configs(env), env, options)
    }

    /// Whether the set holds no source at all.
    pub fn is_empty(&self) -> bool {
        self.sources.is_empty()
    }

    /// The sources' names, in the order they are tried.
    pub fn names(&self) -> Vec<&str> {
        self.sources.iter().map(|s| s.name.as_str()).collect()
    }

    /// Every source's state, in order.
    pub fn health(&self) -> Vec<SourceHealth> {
        let now = Instant::now();
        self.sources
            .iter()
            .map(|source| {
                let state = source.state();
                SourceHealth {
                    name: source.name.clone(),
                    protocol: source.protocol,
                    model: source.model.clone(),
                    base_url: source.backend.shown_address(),
                    disabled: state.disabled.clone(),
                    cooling_down_for: state
                        .cooldown_until
                        .and_then(|until| until.checked_duration_since(now))
                        .filter(|left| !left.is_zero()),
                    failures: state.failures,
                    in_flight: source.in_flight.load(Ordering::SeqCst),
                }
            })
            .collect()
    }

    /// Streams `request` from the first source that answers; returns that
    /// source's name and the stream. Each source tried fills in its own
    /// model, in place: cloning the request for it cost a copy of the whole
    /// history and tool list per request.
    pub async fn stream(
        &self,
        request: &mut ChatRequest,
        cancel: CancellationToken,
    ) -> Result<(String, SourceStream), FallbackError> {
        if self.sources.is_empty() {
            return Err(FallbackError::NoSources);
        }
        let now = Instant::now();
        let enabled: Vec<&Source> = self
            .sources
            .iter()
            .filter(|s| s.state().disabled.is_none())
            .collect();
        // Sources cooling down come last: skipped while another can be
        // tried, still tried when every other one has failed.
        let (ready, cooling): (Vec<&Source>, Vec<&Source>) =
            enabled.into_iter().partition(|s| !s.cooling(now));
        let mut attempts = Vec::new();
        let mut unauthorized = BTreeSet::new();
        for source in ready.into_iter().chain(cooling) {
            let asked = Instant::now();
            match self.try_source(source, &mut *request, &cancel).await {
                Outcome::Stream(stream) => return Ok((source.name.clone(), stream)),
                Outcome::Failed(error) => {
                    source.failed(&self.options, error.retry_after(), asked);
                    tracing::warn!(source = %source.name, %error, "model source failed");
                    attempts.push((source.name.clone(), error));
                }
                Outcome::Unauthorized(error) => {
                    source.disable(disabled_reason(&source.name, source.api_key_env.as_deref()));
                    source.state().refusal = Some(error.to_string());
                    unauthorized.insert(attempts.len());
                    attempts.push((source.name.clone(), error));
                }
                Outcome::Rejected(error) => {
                    return Err(FallbackError::Rejected {
                        source: source.name.clone(),
                        error,
                    });
                }
                Outcome::Cancelled => return Err(FallbackError::Cancelled),
            }
        }
        if attempts.is_empty() || unauthorized.len() == attempts.len() {
            // Nothing usable was left, or every source tried refused the key.
            let first = self.sources.iter().find(|s| s.state().disabled.is_some());
            if let Some(source) = first {
                return Err(FallbackError::Disabled {
                    source: source.name.clone(),
                    env_var: source.api_key_env.clone(),
                    refusal: source.state().refusal.clone(),
                });
            }
        }
        Err(FallbackError::AllFailed { attempts })
    }

    async fn try_source(
        &self,
        source: &Source,
        request: &mut ChatRequest,
        cancel: &CancellationToken,
    ) -> Outcome {
        let permit = match &source.permits {
            None => None,
            Some(permits) => tokio::select! {
                biased;
                () = cancel.cancelled() => return Outcome::Cancelled,
                permit = Arc::clone(permits).acquire_owned() => match permit {
                    Ok(permit) => Some(permit),
                    // The semaphore is never closed.
                    Err(_) => return Outcome::Cancelled,
                },
            },
        };
        let guard = Hold {
            _permit: permit,
            in_flight: InFlight::new(&source.in_flight),
        };
        request.model.clone_from(&source.model);
        let request = &*request;
        let tries = self.options.attempts_per_source.max(1);
        let mut last = None;
        for attempt in 0..tries {
            if attempt > 0 {
                let backoff = jittered(
                    self.options
                        .backoff_base
                        .saturating_mul(1u32 << (attempt - 1).min(20)),
                );
                let wait = match last.as_ref().and_then(ProviderError::retry_after) {
                    // Longer than this side waits: asking before it would
                    // only be refused again. The next source, and the
                    // cooldown, take it from here.
                    Some(after) if after > self.options.max_retry_after => break,
                    Some(after) => after,
                    None => backoff,
                };
                tokio::select! {
                    biased;
                    () = cancel.cancelled() => return Outcome::Cancelled,
                    () = tokio::time::sleep(wait) => {}
                }
            }
            let error = match source.backend.stream(request, cancel.clone()).await {
                Ok(mut stream) => {
                    match opening(&mut stream, source.backend.protocol_name()).await {
                        Ok((early, first)) => {
                            source.succeeded();
                            return Outcome::Stream(SourceStream {
                                early: early.into_iter(),
                                first: Some(first),
                                inner: stream,
                                hold: Some(guard),
                                health: Some(StreamHealth {
                                    state: Arc::clone(&source.state),
                                    options: Cooldowns::of(&self.options),
                                    asked: Instant::now(),
                                }),
                            });
                        }
                        Err(error) => error,
                    }
                }
                Err(error) => error,
            };
            match error {
                ProviderError::Cancelled => return Outcome::Cancelled,
                ProviderError::Unauthorized { .. } => return Outcome::Unauthorized(error),
                _ if error.is_retryable() => {
                    tracing::debug!(source = %source.name, attempt, %error, "retrying");
                    last = Some(error);
                }
                _ if error.is_source_fault() => return Outcome::Failed(error),
                _ => return Outcome::Rejected(error),
            }
        }
        match last {
            Some(error) => Outcome::Failed(error),
            None => Outcome::Cancelled,
        }
    }
}

/// Reads a response up to its first content: the usage reports and
/// reasoning that came before it (Anthropic's `message_start` carries
/// usage; a reasoning model thinks first, for a long while), held up to
/// [`MAX_OPENING_BYTES`], and the content event itself; empty finishes
/// are passed over. None of those is content the user sees (the agent
/// shows text and calls): an error after them has still given the caller
/// nothing, so it is retried or falls back like an error before the first
/// byte.
async fn opening(
    stream: &mut EventStream,
    protocol: &'static str,
) -> Result<(Vec<StreamEvent>, StreamEvent), ProviderError> {
    let mut early = Vec::new();
    let mut held = 0usize;
    loop {
        let event = match futures_util::StreamExt::next(stream).await {
            Some(Ok(
                event @ (StreamEvent::Usage(_)
                | StreamEvent::ReasoningDelta { .. }
                | StreamEvent::ReasoningMetadata { .. }),
            )) => event,
            // Not the end and not content, and it carries nothing: not
            // kept (the assembler ignores it anyway).
            Some(Ok(event @ StreamEvent::Finish { .. })) if event_is_empty_finish(&event) => {
                continue;
            }
            Some(Ok(first)) => return Ok((early, first)),
            Some(Err(error)) => return Err(error),
            None => {
                return Err(ProviderError::Cut {
                    detail: "the response ended before any content".into(),
                });
            }
        };
        held = held.saturating_add(held_size(&event));
        if held > MAX_OPENING_BYTES {
            return Err(ProviderError::Codec(CodecError::MalformedResponse {
                protocol,
                detail: format!(
                    "the server sent more than {MAX_OPENING_BYTES} bytes before any content \
                     (reasoning or usage reports that never end)"
                ),
            }));
        }
        early.push(event);
    }
}

/// The most of what comes before a response's first content (reasoning,
/// usage reports) held until it comes, in bytes of their texts (and a
/// flat charge per event): a server that reasons for ever is cut off
/// there, instead of growing memory for as long as it sends. Real
/// reasoning is a few hundred kilobytes at most.
pub const MAX_OPENING_BYTES: usize = 16 * 1024 * 1024;

/// What holding `event` costs against [`MAX_OPENING_BYTES`].
fn held_size(event: &StreamEvent) -> usize {
    const PER_EVENT: usize = 64;
    PER_EVENT
        + match event {
            StreamEvent::ReasoningDelta { text } => text.len(),
            StreamEvent::ReasoningMetadata { metadata } => metadata.to_string().len(),
            _ => 0,
        }
}

/// A finish with no reason (some servers send `finish_reason: ""` on
/// every chunk): not the end, and not content.
fn event_is_empty_finish(event: &StreamEvent) -> bool {
    matches!(event, StreamEvent::Finish { reason } if reason.trim().is_empty())
}

/// Counts a request in a source's `in_flight` while alive.
struct InFlight(Arc<AtomicUsize>);

impl InFlight {
    fn new(counter: &Arc<AtomicUsize>) -> Self {
        counter.fetch_add(1, Ordering::SeqCst);
        InFlight(Arc::clone(counter))
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

/// What a stream holds of its source until it ends.
struct Hold {
    _permit: Option<OwnedSemaphorePermit>,
    #[allow(dead_code)] // held for its Drop
    in_flight: InFlight,
}

/// The events of a response from one source: an [`EventStream`] that also
/// holds the source's concurrency permit until it ends or is dropped.
///
/// Errors after content (a cut, silence) come out of it and end it; they
/// are never retried behind the caller's back.
pub struct SourceStream {
    /// Usage reported before the first content, replayed first.
    early: std::vec::IntoIter<StreamEvent>,
    first: Option<StreamEvent>,
    inner: EventStream,
    hold: Option<Hold>,
    /// Where a failure after the opening is counted against the source.
    health: Option<StreamHealth>,
}

/// A stream's way back to its source's health: a source whose streams
/// break after their first content (a proxy that cuts them, an idle
/// timeout mid-answer) cools down like one that fails before, instead of
/// staying first, every turn failing and the backup never asked.
struct StreamHealth {
    state: Arc<Mutex<SourceState>>,
    options: Cooldowns,
    asked: Instant,
}

impl std::fmt::Debug for SourceStream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SourceStream").finish_non_exhaustive()
    }
}

impl SourceStream {
    /// The next event, the error that ended the stream, or `None` at its end.
    pub async fn next(&mut self) -> Option<Result<StreamEvent, ProviderError>> {
        futures_util::StreamExt::next(self).await
    }

    /// Reads the stream to its end: all its events, or its error.
    pub async fn collect(mut self) -> Result<Vec<StreamEvent>, ProviderError> {
        let mut events = Vec::new();
        while let Some(item) = self.next().await {
            events.push(item?);
        }
        Ok(events)
    }
}

impl Stream for SourceStream {
    type Item = Result<StreamEvent, ProviderError>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        if let Some(usage) = self.early.next() {
            return Poll::Ready(Some(Ok(usage)));
        }
        if let Some(first) = self.first.take() {
            return Poll::Ready(Some(Ok(first)));
        }
        if self.hold.is_none() {
            return Poll::Ready(None);
        }
        let item = Pin::new(&mut self.inner).poll_next(cx);
        if matches!(item, Poll::Ready(None | Some(Err(_)))) {
            // Ended: give the permit back now, not when the caller drops us.
            self.hold = None;
            if let (Poll::Ready(Some(Err(error))), Some(health)) = (&item, self.health.take())
                && (error.is_retryable() || error.is_source_fault())
            {
                record_failure(
                    &health.state,
                    health.options,
                    error.retry_after(),
                    health.asked,
                );
            }
        }
        item
    }
}

/// Default models of sources found through environment variables.
pub const DEFAULT_OPENAI_MODEL: &str = "gpt-4.1-mini";
pub const DEFAULT_ANTHROPIC_MODEL: &str = "claude-sonnet-4-5";
pub const DEFAULT_GEMINI_MODEL: &str = "gemini-2.5-flash";
pub const DEFAULT_OLLAMA_MODEL: &str = "llama3.2";

/// The URL `OLLAMA_HOST` names, read as Ollama's own clients read it:
/// `http` unless a scheme is given, Ollama's port 11434 (443 for `https`)
/// unless a port is given, not the scheme's 80; and `0.0.0.0` (or `::`),
/// the address a server binds to listen everywhere and the most common
/// setting of the variable, is reached on loopback.
fn ollama_base_url(host: &str) -> String {
    let host = host.trim().trim_end_matches('/');
    let (scheme, rest) = host.split_once("://").unwrap_or(("http", host));
    let (authority, path) = rest.find('/').map_or((rest, ""), |at| rest.split_at(at));
    let (name, port) = match authority.strip_prefix('[') {
        Some(inside) => match inside.split_once(']') {
            Some((address, after)) => (format!("[{address}]"), after.strip_prefix(':')),
            None => (authority.to_owned(), None),
        },
        None => match authority.rsplit_once(':') {
            Some((name, port)) if !name.contains(':') => (name.to_owned(), Some(port)),
            // More than one colon and no brackets: an IPv6 address alone.
            Some(_) => (format!("[{authority}]"), None),
            None => (authority.to_owned(), None),
        },
    };
    let name = match name.as_str() {
        "" | "0.0.0.0" => "127.0.0.1".to_owned(),
        "[::]" => "[::1]".to_owned(),
        _ => name,
    };
    let default_port = if scheme.eq_ignore_ascii_case("https") {
        "443"
    } else {
        "11434"
    };
    let port = port.filter(|p| !p.is_empty()).unwrap_or(default_port);
    format!("{scheme}://{name}:{port}{path}")
}

/// The sources the conventional environment variables describe (see
/// [`Sources::from_environment`]); empty when none is set.
pub fn environment_configs(env: &impl Fn(&str) -> Option<String>) -> Vec<SourceConfig> {
    let set = |name: &str| env(name).filter(|v| !v.trim().is_empty());
    let chosen = set("HOMEAGENT_MODEL");
    let model = |default: &str| chosen.clone().unwrap_or_else(|| default.to_owned());
    let mut configs = Vec::new();
    let mut keyed = |name: &str, protocol, base_url: String, default_model: &str, var: &str| {
        if set(var).is_some() {
            configs.push(SourceConfig {
                base_url: Some(base_url),
                model: Some(model(default_model)),
                api_key_env: Some(var.into()),
                ..SourceConfig::new(name, protocol)
            });
        }
    };
    keyed(
        "openai",
        SourceProtocol::Openai,
        set("OPENAI_BASE_URL").unwrap_or_else(|| "https://api.openai.com/v1".into()),
        DEFAULT_OPENAI_MODEL,
        "OPENAI_API_KEY",
    );
    keyed(
        "anthropic",
        SourceProtocol::Anthropic,
        "https://api.anthropic.com".into(),
        DEFAULT_ANTHROPIC_MODEL,
        "ANTHROPIC_API_KEY",
    );
    keyed(
        "gemini",
        SourceProtocol::Gemini,
        "https://generativelanguage.googleapis.com".into(),
        DEFAULT_GEMINI_MODEL,
        "GEMINI_API_KEY",
    );
    if let Some(host) = set("OLLAMA_HOST") {
        configs.push(SourceConfig {
            base_url: Some(ollama_base_url(&host)),
            model: Some(model(DEFAULT_OLLAMA_MODEL)),
            ..SourceConfig::new("ollama", SourceProtocol::Ollama)
        });
    }
    configs
}

/// Why an `api_key_env` that is not a variable name is refused. The value
/// is not shown: it is often the key itself, pasted in the wrong place,
/// and this message is printed and logged.
pub const API_KEY_ENV_HELP: &str = "is not an environment variable name (letters, digits and \
     `_`; the value is not shown, in case it is the key itself): write the variable's name, \
     e.g. api_key_env = \"OPENAI_API_KEY\", and put the key in that variable";

/// `backoff` and up to half of it again, spread by the clock's nanoseconds:
/// requests that failed together (a 503 to all of them) do not all come
/// back at the same instant. Never shorter than `backoff`.
fn jittered(backoff: Duration) -> Duration {
    let spread = backoff / 2;
    let nanos = u64::from(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default()
            .subsec_nanos(),
    );
    // A cheap mix, so consecutive calls do not move in step with the clock.
    let mixed = nanos.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 11;
    let max = u64::try_from(spread.as_nanos()).unwrap_or(u64::MAX);
    backoff + Duration::from_nanos(if max == 0 { 0 } else { mixed % max })
}

/// The longest a server's `Retry-After` cools its source.
const MAX_SERVER_COOLDOWN: Duration = Duration::from_secs(86_400);

/// The largest `max_concurrent` a source accepts: far more requests than
/// any provider serves one client at once, and far below what the
/// semaphore can hold.
const MAX_CONCURRENT_LIMIT: usize = 65_536;

/// The backend of one configured source, and the model name it sends.
fn build_backend(
    config: &SourceConfig,
    api_key: Option<String>,
    options: &FallbackOptions,
    setup: &SourceSetup,
) -> Result<(Backend, String), SetupError> {
    let invalid = |key: &'static str, detail: &str| SetupError::Invalid {
        source_name: config.name.clone(),
        key,
        detail: detail.to_owned(),
    };
    if let Some(limit) = config.max_concurrent
        && !(1..=MAX_CONCURRENT_LIMIT).contains(&limit)
    {
        return Err(invalid(
            "max_concurrent",
            &format!(
                "is {limit}; it must be from 1 to {MAX_CONCURRENT_LIMIT} (requests to this source at once), or left out for no limit"
            ),
        ));
    }
    if let Some(var) = &config.api_key_env
        && !is_env_var_name(var)
    {
        return Err(invalid("api_key_env", API_KEY_ENV_HELP));
    }
    if config.protocol == SourceProtocol::Demo {
        let model = setup
            .local_model
            .clone()
            .ok_or_else(|| SetupError::NoLocalModel {
                source_name: config.name.clone(),
            })?;
        let name = config
            .model
            .clone()
            .unwrap_or_else(|| DEMO_MODEL.to_owned());
        return Ok((Backend::Local(model), name));
    }
    let base_url = config
        .base_url
        .clone()
        .filter(|url| !url.trim().is_empty())
        .ok_or_else(|| {
            invalid(
                "base_url",
                "is required for this protocol (the server's URL)",
            )
        })?;
    let model = config
        .model
        .clone()
        .filter(|model| !model.trim().is_empty())
        .ok_or_else(|| {
            invalid(
                "model",
                "is required for this protocol (the model to ask for)",
            )
        })?;
    let paths_appended = config.protocol.wire().is_some();
    crate::base_url::check_base_url(&base_url, paths_appended)
        .map_err(|problem| invalid("base_url", &problem))?;
    let endpoint = Endpoint { base_url, api_key };
    let provider = match config.protocol.wire() {
        Some(wire) => HttpProvider::new(wire, endpoint, options.transport.clone())?,
        None => {
            let spec = config.adapter.as_deref().ok_or_else(|| {
                invalid(
                    "adapter",
                    "is required for protocol `lua` (an adapter name or a .lua file's path)",
                )
            })?;
            let adapter =
                LuaAdapter::resolve(spec, setup.adapter_dir.as_deref()).map_err(|error| {
                    SetupError::Adapter {
                        source_name: config.name.clone(),
                        error,
                    }
                })?;
            HttpProvider::with_codec(
                Box::new(LuaCodec::new(Arc::new(adapter))),
                endpoint,
                options.transport.clone(),
            )?
        }
    };
    Ok((Backend::Http(provider), model))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A backoff waits at least itself and at most half as long again, and
    /// not the same every time.
    #[test]
    fn a_backoff_is_spread_above_itself() {
        let base = Duration::from_millis(200);
        let waits: Vec<Duration> = (0..64)
            .map(|_| {
                std::thread::sleep(Duration::from_micros(37));
                jittered(base)
            })
            .collect();
        assert!(
            waits.iter().all(|w| *w >= base && *w < base * 3 / 2),
            "{waits:?}"
        );
        assert!(waits.iter().any(|w| *w != waits[0]), "{waits:?}");
        assert_eq!(jittered(Duration::ZERO), Duration::ZERO);
    }
}
