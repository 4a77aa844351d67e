//! The demo tools: what the scripted model's batches call.
//!
//! They are built so that the kernel's behaviour can be *observed* rather
//! than claimed:
//!
//! - `demo_sleep {ms, tag}` (parallel-safe) sleeps and reports how many
//!   `demo_sleep` calls were in flight when it started and when it ended. If
//!   a batch of four reports `in_flight_at_end: 4`, four calls really
//!   overlapped; a kernel that runs them one by one cannot produce that.
//! - `demo_echo` (parallel-safe) returns its arguments, tag included, so the
//!   model can count which calls ran.
//! - `demo_note {text}` (serial) appends to a note list. It writes, so it is
//!   not parallel-safe, and one such call makes its whole batch serial.
//!
//! The gauge and the notes live in a [`DemoState`], one per registration, so
//! tests running side by side do not see each other's calls.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use homeagent_core::{ErrorReason, Registry, RegistryError, ToolContext, ToolDef, ToolError};
use serde_json::{Value, json};

/// Longest `demo_sleep` accepts, in milliseconds.
pub const MAX_SLEEP_MS: u64 = 60_000;

/// The observable state behind the demo tools. Cheap to clone; clones share
/// the same gauge and notes.
#[derive(Debug, Clone, Default)]
pub struct DemoState {
    inner: Arc<Inner>,
}

#[derive(Debug, Default)]
struct Inner {
    in_flight: AtomicUsize,
    peak: AtomicUsize,
    notes: Mutex<Vec<String>>,
}

impl DemoState {
    /// `demo_sleep` calls running right now.
    pub fn in_flight(&self) -> usize {
        self.inner.in_flight.load(Ordering::SeqCst)
    }

    /// The most `demo_sleep` calls ever in flight at once.
    pub fn peak_in_flight(&self) -> usize {
        self.inner.peak.load(Ordering::SeqCst)
    }

    /// Starts a new peak measurement (between two batches).
    pub fn reset_peak(&self) {
        self.inner.peak.store(self.in_flight(), Ordering::SeqCst);
    }

    /// The notes `demo_note` appended, oldest first.
    pub fn notes(&self) -> Vec<String> {
        self.lock_notes().clone()
    }

    fn lock_notes(&self) -> std::sync::MutexGuard<'_, Vec<String>> {
        // Every write is a single push, so a panic elsewhere cannot leave
        // the list half-updated: a poisoned lock is still usable.
        self.inner.notes.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Counts one `demo_sleep` call in; the guard counts it out when dropped,
    /// which also happens when the kernel drops a stopped or timed-out call.
    fn enter(&self) -> (usize, InFlight) {
        let now = self.inner.in_flight.fetch_add(1, Ordering::SeqCst) + 1;
        self.inner.peak.fetch_max(now, Ordering::SeqCst);
        (now, InFlight(self.clone()))
    }
}

struct InFlight(DemoState);

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.inner.in_flight.fetch_sub(1, Ordering::SeqCst);
    }
}

/// The names of the demo tools, for checking a config that names them in
/// a start that does not register them.
pub const DEMO_TOOLS: [&str; 3] = [DEMO_SLEEP, DEMO_ECHO, DEMO_NOTE];
const DEMO_SLEEP: &str = "demo_sleep";
const DEMO_ECHO: &str = "demo_echo";
const DEMO_NOTE: &str = "demo_note";

/// Registers `demo_sleep`, `demo_echo` and `demo_note` and returns the state
/// they report on.
pub fn register_demo_tools(registry: &Registry) -> Result<DemoState, RegistryError> {
    let state = DemoState::default();

    let sleep_state = state.clone();
    registry.register(
        ToolDef::new(
            DEMO_SLEEP,
            "Sleeps for `ms` milliseconds and reports how many demo_sleep calls were running \
             when it started and when it ended. Parallel-safe: calls in one reply overlap.",
        )
        .with_parameters(json!({
            "type": "object",
            "properties": {
                "ms": {
                    "type": "integer",
                    "minimum": 0,
                    "maximum": MAX_SLEEP_MS,
                    "description": "how long to sleep, in milliseconds (0 to 60000)"
                },
                "tag": {
                    "type": "string",
                    "description": "returned unchanged, so the caller can tell which calls ran"
                }
            },
            "required": ["ms"]
        }))
        .parallel_safe()
        .read_only()
        // Longer than the longest sleep, so a valid call never hits the
        // executor's default 60 s timeout.
        .with_timeout(Duration::from_millis(MAX_SLEEP_MS + 5_000)),
        move |ctx: ToolContext| demo_sleep(sleep_state.clone(), ctx),
    )?;

    registry.register(
        ToolDef::new(
            DEMO_ECHO,
            "Returns its arguments unchanged. Parallel-safe and instant.",
        )
        .with_parameters(json!({
            "type": "object",
            "properties": {
                "tag": {
                    "type": "string",
                    "description": "returned unchanged, so the caller can tell which calls ran"
                }
            },
            "additionalProperties": true
        }))
        .parallel_safe()
        .read_only(),
        |ctx: ToolContext| async move { Ok(ctx.arguments) },
    )?;

    let note_state = state.clone();
    registry.register(
        ToolDef::new(
            DEMO_NOTE,
            "Appends a line to an in-memory note and returns how many lines it holds. \
             Serial: it writes, so a reply that calls it runs all its calls one after another.",
        )
        .with_parameters(json!({
            "type": "object",
            "properties": {
                "text": {"type": "string", "description": "the line to append"}
            },
            "required": ["text"]
        }))
        .serial(),
        move |ctx: ToolContext| {
            let state = note_state.clone();
            async move {
                let text = ctx
                    .arguments
                    .get("text")
                    .and_then(Value::as_str)
                    .ok_or_else(|| missing("text"))?;
                let mut notes = state.lock_notes();
                notes.push(text.to_owned());
                Ok(json!({"notes": notes.len()}))
            }
        },
    )?;

    Ok(state)
}

async fn demo_sleep(state: DemoState, ctx: ToolContext) -> Result<Value, ToolError> {
    // The schema has been checked by the executor; this guards direct calls.
    let ms = ctx
        .arguments
        .get("ms")
        .and_then(Value::as_u64)
        .ok_or_else(|| missing("ms"))?
        .min(MAX_SLEEP_MS);
    let tag = ctx.arguments.get("tag").cloned().unwrap_or(Value::Null);
    let started = Instant::now();
    let (at_start, guard) = state.enter();
    let stopped = tokio::select! {
        () = tokio::time::sleep(Duration::from_millis(ms)) => false,
        () = ctx.cancel.cancelled() => true,
    };
    // Read before the guard counts this call out: a call still running
    // counts itself, so a lone call reports 1, not 0.
    let at_end = state.in_flight();
    drop(guard);
    let slept_ms = u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX);
    if stopped {
        return Err(ToolError::new(
            ErrorReason::Cancelled,
            format!("demo_sleep was stopped after {slept_ms} of {ms} ms"),
        ));
    }
    Ok(json!({
        "tag": tag,
        "slept_ms": slept_ms,
        "in_flight_at_start": at_start,
        "in_flight_at_end": at_end,
    }))
}

fn missing(field: &str) -> ToolError {
    ToolError::new(
        ErrorReason::Required,
        format!("the argument {field} is missing"),
    )
    .with_field(field)
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use homeagent_core::{
        AssembledCall, AssembledTurn, BatchContext, BatchMode, ErrorReason, Executor, Registry,
        SerialReason, ToolCall, ToolSource,
    };
    use serde_json::{Value, json};

    use super::*;

    /// The longest sleep a call may ask for finishes inside the tool's own
    /// timeout, which is not far above it (the executor's default is 60 s).
    #[test]
    fn the_longest_sleep_fits_its_timeout() {
        let registry = Registry::new();
        register_demo_tools(&registry).unwrap_or_else(|e| panic!("{e}"));
        let timeout = registry
            .definition(DEMO_SLEEP)
            .and_then(|def| def.timeout)
            .unwrap_or_default();
        let longest = Duration::from_millis(MAX_SLEEP_MS);
        assert!(
            timeout > longest && timeout <= longest + Duration::from_secs(60),
            "{timeout:?}"
        );
    }

    fn turn(calls: &[(&str, Value)]) -> AssembledTurn {
        AssembledTurn {
            calls: calls
                .iter()
                .enumerate()
                .map(|(i, (name, arguments))| AssembledCall {
                    call: ToolCall {
                        id: format!("call_{i}"),
                        name: (*name).to_owned(),
                        arguments: arguments.clone(),
                        raw_arguments: arguments.to_string(),
                    },
                    argument_error: None,
                })
                .collect(),
            ..AssembledTurn::default()
        }
    }

    fn setup() -> (Executor, DemoState) {
        let registry = Registry::new();
        let state = register_demo_tools(&registry).unwrap();
        (Executor::new(Arc::new(registry)), state)
    }

    fn value(text: &str) -> Value {
        serde_json::from_str(text).unwrap()
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn parallel_sleeps_overlap_and_the_gauge_sees_it() {
        let (executor, state) = setup();
        // Staggered like the scripted model's batches: the shortest call
        // ends while the other three are still sleeping.
        let calls: Vec<(&str, Value)> = (0..4)
            .map(|i| {
                (
                    "demo_sleep",
                    json!({"ms": 200 + 20 * i, "tag": format!("t{i}")}),
                )
            })
            .collect();
        let result = executor.run(&turn(&calls), &BatchContext::default()).await;
        assert_eq!(result.mode, BatchMode::Parallel);
        assert_eq!(state.peak_in_flight(), 4);
        assert_eq!(state.in_flight(), 0, "every call counted itself out");
        let mut max_at_end = 0;
        for (i, o) in result.outcomes.iter().enumerate() {
            assert!(o.success, "{}", o.text);
            let v = value(&o.text);
            assert_eq!(v["tag"], format!("t{i}"));
            assert!(
                v["slept_ms"].as_u64().unwrap() >= 200 + 20 * i as u64,
                "{v}"
            );
            let at_end = v["in_flight_at_end"].as_u64().unwrap();
            assert!(
                (1..=4).contains(&at_end),
                "a running call counts itself: {v}"
            );
            max_at_end = max_at_end.max(at_end);
        }
        assert_eq!(max_at_end, 4, "the first call to end saw all four running");
    }

    #[tokio::test]
    async fn a_note_makes_the_batch_serial_and_the_gauge_shows_one_at_a_time() {
        let (executor, state) = setup();
        let calls = [
            ("demo_sleep", json!({"ms": 30, "tag": "a"})),
            ("demo_note", json!({"text": "first"})),
            ("demo_sleep", json!({"ms": 30, "tag": "b"})),
            ("demo_note", json!({"text": "second"})),
            ("demo_echo", json!({"tag": "c", "n": 1})),
        ];
        let result = executor.run(&turn(&calls), &BatchContext::default()).await;
        assert_eq!(
            result.mode,
            BatchMode::Serial {
                reason: SerialReason::NotParallelSafe {
                    tool: "demo_note".into()
                }
            }
        );
        assert_eq!(state.peak_in_flight(), 1);
        assert_eq!(
            state.notes(),
            ["first", "second"],
            "notes append in call order"
        );
        assert_eq!(value(&result.outcomes[1].text), json!({"notes": 1}));
        assert_eq!(value(&result.outcomes[3].text), json!({"notes": 2}));
        assert_eq!(value(&result.outcomes[4].text), json!({"tag": "c", "n": 1}));
    }

    #[tokio::test]
    async fn schemas_reject_missing_required_arguments_before_the_handler() {
        let (executor, state) = setup();
        let calls = [
            ("demo_sleep", json!({"tag": "no-ms"})),
            ("demo_note", json!({})),
            ("demo_sleep", json!({"ms": "25"})),
            ("demo_sleep", json!({"ms": 60_001})),
        ];
        let result = executor.run(&turn(&calls), &BatchContext::default()).await;
        let reasons: Vec<Option<ErrorReason>> = result
            .outcomes
            .iter()
            .map(|o| o.error.as_ref().map(|e| e.reason))
            .collect();
        assert_eq!(reasons[0], Some(ErrorReason::Required));
        let error = result.outcomes[0].error.as_ref().unwrap();
        assert_eq!(error.field.as_deref(), Some("ms"));
        // The schema's hint quotes the field's description: the kernel
        // refused the call, not the handler's own fallback check.
        assert!(
            error
                .hint
                .as_deref()
                .is_some_and(|h| h.contains("how long to sleep")),
            "{error:?}"
        );
        assert_eq!(reasons[1], Some(ErrorReason::Required));
        assert_eq!(
            result.outcomes[1].error.as_ref().unwrap().field.as_deref(),
            Some("text")
        );
        // A numeric string is one of the lenient forms models send.
        assert_eq!(reasons[2], None, "{}", result.outcomes[2].text);
        assert!(
            reasons[3].is_some(),
            "over the maximum: {}",
            result.outcomes[3].text
        );
        assert!(state.notes().is_empty(), "the note handler never ran");
        assert_eq!(state.peak_in_flight(), 1, "only the valid sleep ran");
    }

    #[tokio::test]
    async fn a_stopped_sleep_ends_early_and_counts_itself_out() {
        let (executor, state) = setup();
        let batch = BatchContext::default();
        let stop = batch.cancel.clone();
        let started = Instant::now();
        let calls = [
            ("demo_sleep", json!({"ms": 10_000})),
            ("demo_sleep", json!({"ms": 10_000})),
        ];
        let turn = turn(&calls);
        let run = executor.run(&turn, &batch);
        let stopper = async {
            tokio::time::sleep(Duration::from_millis(50)).await;
            stop.cancel();
        };
        let (result, ()) = tokio::join!(run, stopper);
        assert!(started.elapsed() < Duration::from_secs(5));
        for o in &result.outcomes {
            assert_eq!(
                o.error.as_ref().map(|e| e.reason),
                Some(ErrorReason::Cancelled),
                "{}",
                o.text
            );
        }
        assert_eq!(state.in_flight(), 0);
        assert_eq!(state.peak_in_flight(), 2);
    }

    #[tokio::test]
    async fn the_sleep_itself_watches_its_cancel_token() {
        // Called directly, not through the executor (which would also drop
        // the future): the handler must notice the token on its own, for
        // hosts that signal a stop before they drop anything.
        let registry = Registry::new();
        let state = register_demo_tools(&registry).unwrap();
        let cancel = BatchContext::default().cancel;
        let ctx = ToolContext {
            call_id: "c".into(),
            tool: "demo_sleep".into(),
            arguments: json!({"ms": 10_000}),
            batch_id: "b".into(),
            extras: serde_json::Map::new().into(),
            cancel: cancel.clone(),
        };
        let started = Instant::now();
        let call = registry.invoke("demo_sleep", ctx);
        let stopper = async {
            tokio::time::sleep(Duration::from_millis(30)).await;
            cancel.cancel();
        };
        let (result, ()) = tokio::join!(call, stopper);
        assert!(started.elapsed() < Duration::from_secs(5));
        assert_eq!(result.map_err(|e| e.reason), Err(ErrorReason::Cancelled));
        assert_eq!(state.in_flight(), 0);
    }

    #[test]
    fn definitions_declare_their_scheduling() {
        let registry = Registry::new();
        register_demo_tools(&registry).unwrap();
        let flags: Vec<(String, bool, bool)> = registry
            .definitions()
            .iter()
            .map(|d| (d.name.clone(), d.parallel_safe, d.serial))
            .collect();
        assert_eq!(
            flags,
            [
                ("demo_echo".to_owned(), true, false),
                ("demo_note".to_owned(), false, true),
                ("demo_sleep".to_owned(), true, false),
            ]
        );
        assert!(matches!(
            register_demo_tools(&registry),
            Err(RegistryError::Duplicate(name)) if name == "demo_sleep"
        ));
    }

    #[test]
    fn the_peak_can_be_reset_between_batches() {
        let state = DemoState::default();
        let (_, a) = state.enter();
        let (n, b) = state.enter();
        assert_eq!((n, state.peak_in_flight()), (2, 2));
        drop(b);
        state.reset_peak();
        assert_eq!(state.peak_in_flight(), 1);
        drop(a);
        assert_eq!(state.in_flight(), 0);
    }
}
