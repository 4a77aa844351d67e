//! Output channels: where an agent's messages to people go, as tools.
//!
//! A channel is anything that can take a line of text: the console, a chat
//! bridge, a speaker on a device. Channels are kept in a [`ChannelRegistry`]
//! that other parts of the program add to (the server adds its push channel,
//! devices add theirs), and [`register_output_channels`] turns each one into
//! a tool named `output_send__<channel>` with one argument, `text`.
//!
//! Ordering: two messages to the same person must arrive in the order the
//! model wrote them, but a message to the console need not wait for one to a
//! phone. So every send tool is `parallel_safe` and carries
//! `OrderKey::Fixed(<channel>)`: the kernel runs a batch serially when two of
//! its calls share an order key, and in parallel otherwise.

use std::collections::BTreeMap;
use std::future::Future;
use std::io::Write;
use std::pin::Pin;
use std::sync::{Arc, Mutex, RwLock};

use homeagent_core::{
    ErrorReason, OrderKey, Registry, RegistryError, ToolContext, ToolDef, ToolError,
    check_tool_name,
};
use serde_json::{Value, json};

/// Prefix of every send tool's name.
pub const SEND_TOOL_PREFIX: &str = "output_send__";

/// What [`OutputChannel::send`] returns.
pub type SendFuture<'a> = Pin<Box<dyn Future<Output = Result<(), ChannelError>> + Send + 'a>>;

/// Why a channel could not be added or a message not delivered.
#[derive(Debug, thiserror::Error)]
pub enum ChannelError {
    #[error(
        "channel name `{name}` cannot be used: `{SEND_TOOL_PREFIX}{name}` must match ^[A-Za-z0-9_-]{{1,64}}$"
    )]
    BadName { name: String },
    #[error("a channel named `{0}` is already registered")]
    Duplicate(String),
    #[error("channel `{channel}` could not write: {source}")]
    Io {
        channel: String,
        #[source]
        source: std::io::Error,
    },
    #[error("channel `{channel}` is not available: {reason}")]
    Unavailable { channel: String, reason: String },
}

/// A place text can be sent to.
pub trait OutputChannel: Send + Sync + 'static {
    /// The channel's name; the tool is `output_send__<name>`.
    fn name(&self) -> &str;
    /// Delivers one message. Resolves once the channel has taken it.
    fn send<'a>(&'a self, text: &'a str) -> SendFuture<'a>;
}

/// The channels known to this process, by name.
#[derive(Default)]
pub struct ChannelRegistry {
    channels: RwLock<BTreeMap<String, Arc<dyn OutputChannel>>>,
}

impl ChannelRegistry {
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds a channel. Its name must make a valid tool name and be unique.
    pub fn add(&self, channel: Arc<dyn OutputChannel>) -> Result<(), ChannelError> {
        let name = channel.name().to_owned();
        if check_tool_name(&format!("{SEND_TOOL_PREFIX}{name}")).is_err() || name.is_empty() {
            return Err(ChannelError::BadName { name });
        }
        // A panic while the lock was held cannot leave the map half-written
        // (one insert), so poisoning is ignored.
        let mut channels = self.channels.write().unwrap_or_else(|e| e.into_inner());
        if channels.contains_key(&name) {
            return Err(ChannelError::Duplicate(name));
        }
        channels.insert(name, channel);
        Ok(())
    }

    /// The channel of this name.
    pub fn get(&self, name: &str) -> Option<Arc<dyn OutputChannel>> {
        self.read().get(name).cloned()
    }

    /// Every channel, sorted by name.
    pub fn list(&self) -> Vec<Arc<dyn OutputChannel>> {
        self.read().values().cloned().collect()
    }

    /// Every channel's name, sorted.
    pub fn names(&self) -> Vec<String> {
        self.read().keys().cloned().collect()
    }

    fn read(&self) -> std::sync::RwLockReadGuard<'_, BTreeMap<String, Arc<dyn OutputChannel>>> {
        self.channels.read().unwrap_or_else(|e| e.into_inner())
    }
}

/// The send tool's name for a channel.
pub fn send_tool_name(channel: &str) -> String {
    format!("{SEND_TOOL_PREFIX}{channel}")
}

/// Registers `output_send__<channel>` for every channel in `channels` now.
/// A channel added later is registered with [`register_output_channel`].
pub fn register_output_channels(
    registry: &Registry,
    channels: &ChannelRegistry,
) -> Result<(), RegistryError> {
    for channel in channels.list() {
        register_output_channel(registry, channel)?;
    }
    Ok(())
}

/// Registers the send tool of one channel.
pub fn register_output_channel(
    registry: &Registry,
    channel: Arc<dyn OutputChannel>,
) -> Result<(), RegistryError> {
    let name = channel.name().to_owned();
    registry.register(
        ToolDef::new(
            send_tool_name(&name),
            format!(
                "Sends a message to the {name} output channel. Parallel-safe; several sends \
                 to {name} in one reply are delivered in the order written."
            ),
        )
        .with_parameters(json!({
            "type": "object",
            "properties": {
                "text": {"type": "string", "description": "the message to send"}
            },
            "required": ["text"],
            "additionalProperties": false
        }))
        .parallel_safe()
        .with_order_key(OrderKey::Fixed(name)),
        move |ctx: ToolContext| send(channel.clone(), ctx),
    )
}

async fn send(channel: Arc<dyn OutputChannel>, ctx: ToolContext) -> Result<Value, ToolError> {
    let text = match ctx.arguments.get("text") {
        Some(Value::String(text)) => text.clone(),
        Some(other) => {
            return Err(ToolError::new(
                ErrorReason::Type,
                format!("the argument text must be a string, got {other}"),
            )
            .with_field("text"));
        }
        None => {
            return Err(
                ToolError::new(ErrorReason::Required, "the argument text is missing")
                    .with_field("text"),
            );
        }
    };
    let name = channel.name().to_owned();
    let delivered = tokio::select! {
        result = channel.send(&text) => result,
        () = ctx.cancel.cancelled() => {
            return Err(ToolError::new(
                ErrorReason::Cancelled,
                // A blocking write already handed to its thread cannot be
                // taken back: say what is known, not that it was not sent.
                format!(
                    "sending to {name} was stopped before the channel said it took the message; \
                     a write already under way may still deliver it"
                ),
            ));
        }
    };
    delivered.map_err(|e| ToolError::execution(e.to_string()))?;
    Ok(json!({"channel": name, "sent": true, "bytes": text.len()}))
}

/// A writer shared between the console channel and whoever reads it back.
pub type SharedWriter = Arc<Mutex<dyn Write + Send>>;

/// The `console` channel: each message on its own line of a writer (stdout
/// unless given another).
pub struct ConsoleChannel {
    name: String,
    writer: SharedWriter,
}

impl ConsoleChannel {
    /// `console`, writing to the process's standard output.
    pub fn stdout() -> Self {
        Self::with_writer(Arc::new(Mutex::new(std::io::stdout())))
    }

    /// `console`, writing to `writer` (a buffer in tests, a log file).
    pub fn with_writer(writer: SharedWriter) -> Self {
        ConsoleChannel {
            name: "console".to_owned(),
            writer,
        }
    }

    /// The same, under another channel name.
    pub fn named(mut self, name: impl Into<String>) -> Self {
        self.name = name.into();
        self
    }
}

impl Default for ConsoleChannel {
    fn default() -> Self {
        Self::stdout()
    }
}

impl OutputChannel for ConsoleChannel {
    fn name(&self) -> &str {
        &self.name
    }

    fn send<'a>(&'a self, text: &'a str) -> SendFuture<'a> {
        let writer = self.writer.clone();
        let mut line = text.to_owned();
        if !line.ends_with('\n') {
            line.push('\n');
        }
        let channel = self.name.clone();
        Box::pin(async move {
            // A terminal or a pipe can block; keep that off the runtime's
            // worker threads.
            let written = tokio::task::spawn_blocking(move || {
                // A writer poisoned by a panic mid-write still takes bytes.
                let mut writer = writer.lock().unwrap_or_else(|e| e.into_inner());
                writer.write_all(line.as_bytes())?;
                writer.flush()
            })
            .await;
            match written {
                Ok(Ok(())) => Ok(()),
                Ok(Err(source)) => Err(ChannelError::Io { channel, source }),
                Err(join) => Err(ChannelError::Unavailable {
                    channel,
                    reason: format!("the writer task failed: {join}"),
                }),
            }
        })
    }
}
