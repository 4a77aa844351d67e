//! HomeAgent's tool-call kernel.
//!
//! Everything between "the model emitted tool calls" and "the next request to
//! the model", with no network I/O:
//!
//! 1. [`assemble`] turns a provider's normalized [`stream`] into one assistant
//!    turn with its calls in stream-index order and their arguments parsed.
//! 2. [`validate`] checks each call's arguments against its tool's schema.
//! 3. [`batch`] runs the turn's calls, in parallel when every tool declares
//!    it safe and no two calls share an order key, and answers every call with
//!    exactly one [`outcome::ToolOutcome`].
//! 4. [`pairing`] checks a history before it is sent to a provider.
//! 5. [`prompt`] tells the model the execution-order rules the executor follows.
//!
//! See ARCHITECTURE.md at the repository root for the invariants.

pub mod assemble;
pub mod batch;
pub mod call_notes;
pub mod env_name;
pub mod event;
pub mod excerpt;
pub mod hooks;
pub mod json_text;
pub mod lenient;
pub mod message;
pub mod outcome;
pub mod pairing;
pub mod prompt;
pub mod registry;
pub mod stream;
pub mod text_position;
pub mod tool;
mod turnstile;
pub mod validate;

pub use assemble::{ArgumentErrors, AssembledCall, AssembledTurn, Diagnostic, StreamAssembler};
pub use batch::{BatchContext, BatchMode, BatchResult, Executor, ExecutorOptions, SerialReason};
pub use env_name::is_env_var_name;
pub use event::{EventSink, ToolEvent};
pub use excerpt::excerpt;
pub use hooks::{CallInfo, PostToolHook, PreDecision, PreToolHook};
pub use message::{AssistantMessage, Message, ReasoningPart, ToolCall, ToolMessage};
pub use outcome::{CallStatus, ErrorReason, ToolError, ToolOutcome};
pub use pairing::{
    IdReminter, PairingError, check_history_pairing, check_pairing, remint_reused_ids,
};
pub use prompt::{execution_order_section, execution_order_section_for};
pub use registry::{Registry, RegistryError, ToolContext, ToolFuture, ToolHandler, ToolSource};
pub use stream::{FinishReason, StreamEvent, ToolCallFragment, Usage};
/// Re-exported so tool authors need not depend on tokio-util for the stop
/// switch (and its owned waiter, which a long-lived reader keeps).
pub use tokio_util::sync::{CancellationToken, WaitForCancellationFutureOwned};
pub use tool::{MissingOrderKey, OrderKey, Renderings, ToolDef, ToolNameError, check_tool_name};
