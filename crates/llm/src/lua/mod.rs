//! Lua adapters: a provider's odd wire format described in a `.lua` file.
//!
//! An adapter script returns a table:
//!
//! - `transform_request(json)` (required): the OpenAI-shaped request body
//!   in, the provider's body out;
//! - `transform_stream_chunk(json)`: one SSE `data:` payload in; out either
//!   `""` (parse the chunk with the standard OpenAI decoder, when that
//!   fallback is on) or an object with exactly the keys `content`,
//!   `reasoning_content`, `done`, `finish_reason`, `usage`
//!   (`{prompt_tokens, completion_tokens, total_tokens}`), `tool_calls`,
//!   each call exactly `{id, type, name, raw_arguments, stream_index}`, and
//!   `error`: an error the provider sent inside the stream, as it sent it
//!   (`{type, code, message}`), which the host classifies (an overload or
//!   a rate limit is retried and falls back like its HTTP status; an
//!   adapter's own `error()` is a malformed response, never retried).
//!   Any other key is an error naming it and the file;
//! - `transform_response(json)`: a whole response body in, one object of
//!   the same shape as a chunk out (without it, the body is read as OpenAI);
//! - `build_headers(meta)`: `{url, method, body, api_key, timestamp}` in, a
//!   header map out (without it, the table's static `headers`);
//! - `transform_error(status, body)`: a short reason string out.
//!
//! The table may also set `endpoint` (appended to the base URL; default
//! `/chat/completions`), `headers`, and the strings `name` and `version`
//! (descriptive only). Any other key fails the load, naming the key and
//! the known key it is a slip of: an ignored `transfrom_response` would
//! read every body as OpenAI without a word. Every function takes and returns a
//! string; every call runs in the sandbox (the `sandbox` module) under an
//! instruction limit, so a loop that never ends fails that call.

use std::path::Path;
use std::sync::{Arc, Mutex, PoisonError};

use homeagent_core::StreamEvent;
use mlua::chunk::ChunkMode;
use mlua::{Function, Lua, Table, Value};

pub mod check;
mod codec;
mod output;
mod sandbox;

pub use codec::LuaCodec;
pub use sandbox::DEFAULT_INSTRUCTION_LIMIT;

/// The adapters shipped with HomeAgent, by name.
pub const BUNDLED: &[(&str, &str)] = &[
    ("openai", include_str!("../../adapters/openai.lua")),
    ("anthropic", include_str!("../../adapters/anthropic.lua")),
];

/// The source of a bundled adapter.
pub fn bundled_source(name: &str) -> Option<&'static str> {
    BUNDLED
        .iter()
        .find(|(bundled, _)| *bundled == name)
        .map(|(_, source)| *source)
}

/// Something wrong with an adapter. Every variant names the adapter file.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AdapterError {
    #[error("cannot read adapter {file}: {detail}")]
    Read { file: String, detail: String },
    /// An adapter named (not given as a path) exists neither in the user's
    /// adapter directory nor among the bundled ones.
    #[error(
        "no adapter named `{name}`: looked for {searched} and among the bundled adapters \
         ({bundled}); give an adapter's path, or put {name}.lua in the adapter directory"
    )]
    NotFound {
        name: String,
        searched: String,
        bundled: String,
    },
    #[error("adapter {file} failed to load: {detail}")]
    Load { file: String, detail: String },
    /// The script's table holds a key no adapter sets: a typo (a
    /// `transfrom_response` would otherwise be ignored, and every body read
    /// as OpenAI) or a helper that belongs in a `local`.
    #[error(
        "adapter {file}: the table the script returns has an unknown key `{key}`{}; \
         an adapter's table holds only {} (keep helper functions in `local` variables)",
        closest.map(|known| format!(" (did you mean `{known}`?)")).unwrap_or_default(),
        TABLE_KEYS.join(", ")
    )]
    UnknownKey {
        file: String,
        key: String,
        /// The known key the unknown one most resembles, if any does.
        closest: Option<&'static str>,
    },
    #[error("adapter {file} has no `{function}` function (it is required)")]
    MissingFunction {
        file: String,
        function: &'static str,
    },
    #[error(
        "adapter {file}: `{function}` exceeded the instruction limit of {limit} (an endless loop?)"
    )]
    InstructionLimit {
        file: String,
        function: &'static str,
        limit: u64,
    },
    /// The call needed more memory than the adapter's Lua state may hold.
    #[error(
        "adapter {file}: `{function}` ran out of the adapter's memory (its Lua state is capped at \
         {limit_mib} MiB; an adapter that builds a table or string that large has a bug)"
    )]
    MemoryLimit {
        file: String,
        function: &'static str,
        limit_mib: usize,
    },
    #[error("adapter {file}: `{function}` failed: {detail}")]
    Runtime {
        file: String,
        function: &'static str,
        detail: String,
    },
    #[error("adapter {file}: `{function}` returned a bad value: {detail}")]
    BadOutput {
        file: String,
        function: &'static str,
        detail: String,
    },
    /// The adapter reported an error the provider sent (`error` in its
    /// output); `transient` when trying again may help.
    #[error("the provider reported an error (through adapter {file}): {message}")]
    ProviderReported {
        file: String,
        message: String,
        transient: bool,
    },
}

/// Every key an adapter's table may hold: the functions, the settings and
/// the original's two descriptive strings (`name`, `version`).
pub const TABLE_KEYS: &[&str] = &[
    "name",
    "version",
    "endpoint",
    "headers",
    "transform_request",
    "transform_response",
    "transform_stream_chunk",
    "build_headers",
    "transform_error",
];

/// What `transform_stream_chunk` made of one chunk.
#[derive(Debug, Clone, PartialEq)]
pub enum ChunkResult {
    /// The adapter returned `""`: parse the chunk as standard OpenAI.
    Standard,
    /// The chunk's events, and whether the adapter said the stream is done.
    Events {
        events: Vec<StreamEvent>,
        done: bool,
    },
}

/// A loaded adapter: one sandboxed Lua state and its functions.
pub struct LuaAdapter {
    file: String,
    lua: Lua,
    budget: Arc<sandbox::Budget>,
    /// One call at a time: the budget belongs to the call in progress.
    calls: Mutex<()>,
    transform_request: Function,
    transform_response: Option<Function>,
    transform_stream_chunk: Option<Function>,
    build_headers: Option<Function>,
    transform_error: Option<Function>,
    endpoint: String,
    headers: Vec<(String, String)>,
}

impl std::fmt::Debug for LuaAdapter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LuaAdapter")
            .field("file", &self.file)
            .field("endpoint", &self.endpoint)
            .finish_non_exhaustive()
    }
}

impl LuaAdapter {
    /// Loads the adapter file at `path`.
    pub fn load(path: &Path) -> Result<Self, AdapterError> {
        let file = path.display().to_string();
        let source = std::fs::read_to_string(path).map_err(|e| AdapterError::Read {
            file: file.clone(),
            detail: e.to_string(),
        })?;
        Self::from_source(&file, &source)
    }

    /// Finds and loads the adapter a source names.
    ///
    /// `spec` is either a path (it contains a path separator or ends in
    /// `.lua`), loaded as given, or a name: `<adapter_dir>/<name>.lua` when
    /// that file exists — so a user's adapter overrides a bundled one of the
    /// same name — and otherwise the bundled adapter of that name.
    pub fn resolve(spec: &str, adapter_dir: Option<&Path>) -> Result<Self, AdapterError> {
        let is_path = spec.ends_with(".lua") || spec.contains('/') || spec.contains('\\');
        if is_path {
            return Self::load(Path::new(spec));
        }
        if let Some(dir) = adapter_dir {
            let candidate = dir.join(format!("{spec}.lua"));
            if candidate.is_file() {
                return Self::load(&candidate);
            }
        }
        match Self::bundled(spec) {
            Some(adapter) => adapter,
            None => Err(AdapterError::NotFound {
                name: spec.to_owned(),
                searched: match adapter_dir {
                    Some(dir) => dir.join(format!("{spec}.lua")).display().to_string(),
                    None => "no adapter directory (none configured)".to_owned(),
                },
                bundled: BUNDLED
                    .iter()
                    .map(|(name, _)| *name)
                    .collect::<Vec<_>>()
                    .join(", "),
            }),
        }
    }

    /// Loads a bundled adapter (`openai`, `anthropic`).
    pub fn bundled(name: &str) -> Option<Result<Self, AdapterError>> {
        bundled_source(name).map(|source| Self::from_source(&format!("{name}.lua"), source))
    }

    /// Loads an adapter from its source; `file` names it in errors.
    pub fn from_source(file: &str, source: &str) -> Result<Self, AdapterError> {
        let load_error = |detail: String| AdapterError::Load {
            file: file.to_owned(),
            detail,
        };
        let (lua, budget) = sandbox::new_state(file).map_err(|e| load_error(e.to_string()))?;
        budget.reset();
        let value = lua
            .load(source)
            .set_name(format!("@{file}"))
            .set_mode(ChunkMode::Text)
            .eval::<Value>();
        let table = match value {
            Ok(Value::Table(table)) => table,
            Ok(other) => {
                return Err(load_error(format!(
                    "the script must return a table, it returned {}",
                    with_article(&other)
                )));
            }
            Err(_) if budget.exceeded() => {
                return Err(load_error(format!(
                    "the script exceeded the instruction limit of {}",
                    budget.limit()
                )));
            }
            Err(e) => return Err(load_error(e.to_string())),
        };
        unknown_key(file, &table)?;
        for descriptive in ["name", "version"] {
            match table.raw_get::<Value>(descriptive) {
                Ok(Value::Nil | Value::String(_)) => {}
                Ok(other) => {
                    return Err(load_error(format!(
                        "`{descriptive}` must be a string, it is {}",
                        with_article(&other)
                    )));
                }
                Err(e) => return Err(load_error(e.to_string())),
            }
        }
        let function = |name: &'static str| -> Result<Option<Function>, AdapterError> {
            match table.raw_get::<Value>(name) {
                Ok(Value::Nil) => Ok(None),
                Ok(Value::Function(f)) => Ok(Some(f)),
                Ok(other) => Err(load_error(format!(
                    "`{name}` must be a function, it is {}",
                    with_article(&other)
                ))),
                Err(e) => Err(load_error(e.to_string())),
            }
        };
        let transform_request =
            function("transform_request")?.ok_or_else(|| AdapterError::MissingFunction {
                file: file.to_owned(),
                function: "transform_request",
            })?;
        let transform_response = function("transform_response")?;
        let transform_stream_chunk = function("transform_stream_chunk")?;
        let build_headers = function("build_headers")?;
        let transform_error = function("transform_error")?;
        let endpoint = match table.raw_get::<Value>("endpoint") {
            Ok(Value::String(s)) => s.to_string_lossy(),
            Ok(Value::Nil) => "/chat/completions".to_owned(),
            _ => return Err(load_error("`endpoint` must be a string".to_owned())),
        };
        // A path on the base URL's host, where the API key is sent: text
        // that does not start with `/` runs into the host's name.
        if !endpoint.starts_with('/')
            || endpoint
                .chars()
                .any(|c| c.is_control() || c.is_whitespace() || c == '#')
        {
            return Err(load_error(format!(
                "`endpoint` must be a path on the base URL's host: start with `/`, without \
                 spaces, control characters or `#` (e.g. endpoint = \"/v1/messages\"), not {:?}",
                endpoint.chars().take(80).collect::<String>()
            )));
        }
        let headers = static_headers(&table).map_err(load_error)?;
        Ok(LuaAdapter {
            file: file.to_owned(),
            lua,
            budget,
            calls: Mutex::new(()),
            transform_request,
            transform_response,
            transform_stream_chunk,
            build_headers,
            transform_error,
            endpoint,
            headers,
        })
    }

    /// The file the adapter came from (or the name it was given).
    pub fn file(&self) -> &str {
        &self.file
    }

    /// The path appended to the base URL.
    pub fn endpoint(&self) -> &str {
        &self.endpoint
    }

    /// The instruction budget of each call (default
    /// [`DEFAULT_INSTRUCTION_LIMIT`]).
    pub fn set_instruction_limit(&self, limit: u64) {
        self.budget.set_limit(limit);
    }

    /// `transform_request`: OpenAI-shaped request JSON in, provider JSON out.
    pub fn transform_request(&self, json: &str) -> Result<String, AdapterError> {
        self.call_string(&self.transform_request, "transform_request", json)
    }

    /// `transform_stream_chunk` on one `data:` payload. `None` when the
    /// adapter has no such function.
    pub fn transform_stream_chunk(&self, data: &str) -> Option<Result<ChunkResult, AdapterError>> {
        const NAME: &str = "transform_stream_chunk";
        let function = self.transform_stream_chunk.as_ref()?;
        Some(self.call_string(function, NAME, data).and_then(|text| {
            if text.trim().is_empty() {
                return Ok(ChunkResult::Standard);
            }
            let chunk = output::parse(&text).map_err(|detail| self.bad_output(NAME, detail))?;
            self.check_reported(&chunk)?;
            let done = chunk.done();
            let mut events = Vec::new();
            chunk.into_events(&mut events);
            Ok(ChunkResult::Events { events, done })
        }))
    }

    /// `transform_response` on a whole body: its events. `None` when the
    /// adapter has no such function.
    pub fn transform_response(&self, body: &str) -> Option<Result<Vec<StreamEvent>, AdapterError>> {
        const NAME: &str = "transform_response";
        let function = self.transform_response.as_ref()?;
        Some(self.call_string(function, NAME, body).and_then(|text| {
            let chunk = output::parse(&text).map_err(|detail| self.bad_output(NAME, detail))?;
            self.check_reported(&chunk)?;
            let mut events = Vec::new();
            chunk.into_events(&mut events);
            Ok(events)
        }))
    }

    /// The request headers: `build_headers(meta)` when the adapter has it,
    /// else its static `headers`. Names are lowercased.
    pub fn headers(&self, meta: &serde_json::Value) -> Result<Vec<(String, String)>, AdapterError> {
        const NAME: &str = "build_headers";
        let Some(function) = self.build_headers.as_ref() else {
            return Ok(self.headers.clone());
        };
        let text = self.call_string(function, NAME, &meta.to_string())?;
        let map: serde_json::Map<String, serde_json::Value> =
            serde_json::from_str(&text).map_err(|e| {
                self.bad_output(NAME, format!("expected a JSON object of strings ({e})"))
            })?;
        map.into_iter()
            .map(|(name, value)| {
                let value = match value {
                    serde_json::Value::String(value) => value,
                    // Never the value: it may be the key.
                    other => {
                        return Err(self.bad_output(
                            NAME,
                            format!(
                                "header `{}` must be a string, it is a JSON {}",
                                shown_name(&name),
                                homeagent_core::validate::json_type_name(&other)
                            ),
                        ));
                    }
                };
                sendable_header(name, value).map_err(|detail| self.bad_output(NAME, detail))
            })
            .collect()
    }

    /// `transform_error(status, body)`: the provider's reason, if the
    /// adapter has the function and it gave a non-empty string.
    pub fn transform_error(&self, status: u16, body: &str) -> Option<Result<String, AdapterError>> {
        const NAME: &str = "transform_error";
        let function = self.transform_error.as_ref()?;
        Some(self.guarded(NAME, || {
            function
                .call::<Value>((status, body))
                .map(|value| match value {
                    Value::String(s) => s.to_string_lossy(),
                    _ => String::new(),
                })
        }))
    }

    fn call_string(
        &self,
        function: &Function,
        name: &'static str,
        input: &str,
    ) -> Result<String, AdapterError> {
        let value = self.guarded(name, || function.call::<Value>(input))?;
        match value {
            Value::String(s) => s
                .to_str()
                .map(|s| s.to_owned())
                .map_err(|_| self.bad_output(name, "the string is not valid UTF-8".to_owned())),
            other => Err(self.bad_output(
                name,
                format!("expected a JSON string, got {}", with_article(&other)),
            )),
        }
    }

    /// Runs one call under a fresh instruction budget.
    fn guarded<R>(
        &self,
        name: &'static str,
        call: impl FnOnce() -> mlua::Result<R>,
    ) -> Result<R, AdapterError> {
        let _one_at_a_time = self.calls.lock().unwrap_or_else(PoisonError::into_inner);
        self.budget.reset();
        let result = call();
        result.map_err(|e| {
            if self.budget.exceeded() {
                AdapterError::InstructionLimit {
                    file: self.file.clone(),
                    function: name,
                    limit: self.budget.limit(),
                }
            } else if is_memory_error(&e) {
                AdapterError::MemoryLimit {
                    file: self.file.clone(),
                    function: name,
                    limit_mib: sandbox::MEMORY_LIMIT / (1024 * 1024),
                }
            } else {
                AdapterError::Runtime {
                    file: self.file.clone(),
                    function: name,
                    detail: e.to_string(),
                }
            }
        })
    }

    /// The provider's error an adapter reported, as an error.
    fn check_reported(&self, chunk: &output::ChunkOut) -> Result<(), AdapterError> {
        match chunk.reported_error() {
            Some((message, transient)) => Err(AdapterError::ProviderReported {
                file: self.file.clone(),
                message,
                transient,
            }),
            None => Ok(()),
        }
    }

    fn bad_output(&self, function: &'static str, detail: String) -> AdapterError {
        AdapterError::BadOutput {
            file: self.file.clone(),
            function,
            detail,
        }
    }

    /// Runs a snippet in the adapter's sandbox and returns its result as
    /// JSON (for tests and `adapter check`).
    pub fn eval_json(&self, code: &str) -> Result<serde_json::Value, AdapterError> {
        let value = self.guarded("eval", || {
            self.lua
                .load(code)
                .set_name("=eval")
                .set_mode(ChunkMode::Text)
                .eval::<Value>()
        })?;
        sandbox::lua_to_json(&value).map_err(|detail| self.bad_output("eval", detail))
    }
}

/// The first (in sorted order) key of an adapter's table that is not one of
/// [`TABLE_KEYS`], as an error.
fn unknown_key(file: &str, table: &Table) -> Result<(), AdapterError> {
    let mut unknown: Vec<String> = table
        .pairs::<Value, Value>()
        .filter_map(|pair| {
            let key = match pair {
                Ok((key, _)) => key,
                // A key the iteration could not produce is reported as such.
                Err(e) => return Some(e.to_string()),
            };
            match &key {
                Value::String(name)
                    if TABLE_KEYS
                        .iter()
                        .any(|known| name.as_bytes() == known.as_bytes()) =>
                {
                    None
                }
                Value::String(name) => Some(name.to_string_lossy()),
                Value::Integer(i) => Some(i.to_string()),
                Value::Number(n) => Some(n.to_string()),
                other => Some(format!("<{}>", other.type_name())),
            }
        })
        .collect();
    unknown.sort();
    let Some(key) = unknown.into_iter().next() else {
        return Ok(());
    };
    let closest = homeagent_core::registry::slip_of(&key, TABLE_KEYS);
    Err(AdapterError::UnknownKey {
        file: file.to_owned(),
        key,
        closest,
    })
}

/// A Lua value's type with its article, for messages: "a table", "an integer".
fn with_article(value: &Value) -> String {
    let name = value.type_name();
    let article = if name.starts_with(['a', 'e', 'i', 'o', 'u']) {
        "an"
    } else {
        "a"
    };
    format!("{article} {name}")
}

fn static_headers(table: &Table) -> Result<Vec<(String, String)>, String> {
    match table.raw_get::<Value>("headers") {
        Ok(Value::Nil) => Ok(Vec::new()),
        Ok(Value::Table(headers)) => headers
            .pairs::<Value, Value>()
            .map(|pair| {
                let (name, value) = pair.map_err(|e| format!("`headers` cannot be read ({e})"))?;
                // Not `String` conversions: they turn a list's index 1
                // into a header named "1", and a number into text.
                let (Value::String(name), Value::String(value)) = (&name, &value) else {
                    return Err(format!(
                        "`headers` must map header names to strings, e.g. headers = {{ \
                         [\"x-api-version\"] = \"2\" }}; it has {} key holding {}",
                        with_article(&name),
                        with_article(&value)
                    ));
                };
                let (Ok(name), Ok(value)) = (name.to_str(), value.to_str()) else {
                    return Err("`headers` names and values must be UTF-8 text".to_owned());
                };
                sendable_header(name.to_owned(), value.to_owned())
                    .map_err(|detail| format!("`headers`: {detail}"))
            })
            .collect(),
        _ => Err("`headers` must be a table".to_owned()),
    }
}

/// A header as it will be sent (its name lowercased), or why it cannot be:
/// checked here, so the error names the adapter, not the transport.
fn sendable_header(name: String, value: String) -> Result<(String, String), String> {
    let name = name.to_ascii_lowercase();
    if reqwest::header::HeaderName::from_bytes(name.as_bytes()).is_err() {
        return Err(format!(
            "`{}` is not a header name (letters, digits and `-`, no spaces)",
            shown_name(&name)
        ));
    }
    if reqwest::header::HeaderValue::from_str(&value).is_err() {
        // Never the value: it may be the key.
        return Err(format!(
            "the value of header `{name}` holds a character a header cannot (a line break, a \
             control character)"
        ));
    }
    Ok((name, value))
}

/// A header name as an error shows it: cut short, control characters
/// escaped.
fn shown_name(name: &str) -> String {
    name.chars()
        .take(64)
        .flat_map(char::escape_default)
        .collect()
}

/// Whether `error` is (or was caused by) the Lua state running out of its
/// memory limit.
fn is_memory_error(error: &mlua::Error) -> bool {
    match error {
        mlua::Error::MemoryError(_) => true,
        mlua::Error::CallbackError { cause, .. } | mlua::Error::WithContext { cause, .. } => {
            is_memory_error(cause)
        }
        _ => false,
    }
}
