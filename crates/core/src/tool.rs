//! Tool definitions: what a tool is called, what it accepts, and how its calls
//! may be scheduled.

use std::sync::{Arc, Mutex, OnceLock, PoisonError};
use std::time::Duration;

use serde::{Deserialize, Serialize};
use serde_json::Value;
use serde_json::value::RawValue;

use crate::validate::CompiledSchema;

/// Longest tool name any provider accepts.
pub const MAX_TOOL_NAME_LEN: usize = 64;

/// Why a tool name was refused at registration.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ToolNameError {
    #[error("tool name is empty; names match ^[A-Za-z0-9_-]{{1,64}}$")]
    Empty,
    #[error(
        "tool name `{name}` is {len} characters long; providers accept at most {MAX_TOOL_NAME_LEN}"
    )]
    TooLong { name: String, len: usize },
    #[error(
        "tool name `{name}` contains {bad:?}; only ASCII letters, digits, `_` and `-` are accepted by every provider"
    )]
    BadCharacter { name: String, bad: char },
}

/// Checks a name against `^[A-Za-z0-9_-]{1,64}$`, the rule every provider enforces.
pub fn check_tool_name(name: &str) -> Result<(), ToolNameError> {
    if name.is_empty() {
        return Err(ToolNameError::Empty);
    }
    if let Some(bad) = name
        .chars()
        .find(|c| !(c.is_ascii_alphanumeric() || *c == '_' || *c == '-'))
    {
        return Err(ToolNameError::BadCharacter {
            name: name.to_owned(),
            bad,
        });
    }
    if name.len() > MAX_TOOL_NAME_LEN {
        return Err(ToolNameError::TooLong {
            name: name.to_owned(),
            len: name.len(),
        });
    }
    Ok(())
}

/// What calls of a tool must not overlap on.
///
/// Two calls with the same key keep their order: a batch that contains them
/// runs serially even when every tool in it is parallel-safe.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", content = "value", rename_all = "snake_case")]
pub enum OrderKey {
    /// Every call of the tool shares this key (an output channel's name).
    Fixed(String),
    /// The value of this argument is the key (a device tool's `device_id`).
    Argument(String),
}

/// A call to a tool keyed on an argument lacks a usable value for it
/// ([`ToolDef::order_key_for`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MissingOrderKey;

/// A tool's definition: its name, its argument schema, and its scheduling
/// declarations. Each tool declares these itself; the kernel keeps no table of
/// tool names.
#[derive(Clone, Serialize, Deserialize)]
pub struct ToolDef {
    pub name: String,
    #[serde(default)]
    pub description: String,
    /// JSON Schema of the arguments object. `null` or `{}` accepts anything.
    #[serde(default)]
    pub parameters: Value,
    /// The tool may run at the same time as other calls of the same batch.
    #[serde(default)]
    pub parallel_safe: bool,
    /// The tool never runs beside another call of its batch; wins over
    /// `parallel_safe`. (Batches of different sessions run side by side:
    /// a tool that must never overlap itself anywhere keeps its own lock.)
    #[serde(default)]
    pub serial: bool,
    /// The tool does not change anything. Used for MCP annotations, and by
    /// the agent to run a batch of such calls before they are stored (a
    /// crash then forgets only calls that did nothing) when no hook sees
    /// them; never as a reason to run in parallel.
    #[serde(default)]
    pub read_only: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub order_key: Option<OrderKey>,
    /// Per-tool override of the executor's default timeout.
    #[serde(default, with = "duration_ms", skip_serializing_if = "Option::is_none")]
    pub timeout: Option<Duration>,
    /// Compiled argument schema, built on first use and shared by clones.
    #[serde(skip)]
    compiled: Arc<OnceLock<CompiledSchema>>,
    /// `parameters` as JSON text, rendered on first use and shared by clones.
    #[serde(skip)]
    parameters_text: Arc<OnceLock<Arc<RawValue>>>,
    /// The definition in each provider's wire shape (see [`Renderings`]).
    #[serde(skip)]
    renderings: Arc<Renderings>,
}

/// Forms of a tool definition that a consumer derives once and reuses for
/// as long as the definition lives: a provider codec's JSON for the tool,
/// which every request of every turn carries. Keyed by a name the deriving
/// code picks.
///
/// Shared by clones of the definition, like its compiled schema. A
/// definition is not changed in place once in use: the builder methods
/// that change what a rendering shows ([`ToolDef::with_parameters`]) start
/// a new, empty set.
#[derive(Debug, Default)]
pub struct Renderings {
    forms: Mutex<Vec<(&'static str, Arc<RawValue>)>>,
}

impl Renderings {
    /// The form stored under `key`, rendered by `render` the first time.
    ///
    /// `render` runs without the lock held; were two callers to race on a
    /// new key, both render and the first stored form wins, so every
    /// caller gets the same text.
    pub fn get_or_render(
        &self,
        key: &'static str,
        render: impl FnOnce() -> Arc<RawValue>,
    ) -> Arc<RawValue> {
        if let Some(form) = self.get(key) {
            return form;
        }
        let rendered = render();
        let mut forms = self.forms.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some((_, form)) = forms.iter().find(|(k, _)| *k == key) {
            return Arc::clone(form);
        }
        forms.push((key, Arc::clone(&rendered)));
        rendered
    }

    fn get(&self, key: &str) -> Option<Arc<RawValue>> {
        let forms = self.forms.lock().unwrap_or_else(PoisonError::into_inner);
        forms
            .iter()
            .find(|(k, _)| *k == key)
            .map(|(_, form)| Arc::clone(form))
    }

    /// How many forms are stored.
    pub fn len(&self) -> usize {
        self.forms
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl ToolDef {
    /// A serial tool with no argument schema; refine it with the builder methods.
    pub fn new(name: impl Into<String>, description: impl Into<String>) -> Self {
        ToolDef {
            name: name.into(),
            description: description.into(),
            parameters: Value::Null,
            parallel_safe: false,
            serial: false,
            read_only: false,
            order_key: None,
            timeout: None,
            compiled: Arc::default(),
            parameters_text: Arc::default(),
            renderings: Arc::default(),
        }
    }

    pub fn with_parameters(mut self, schema: Value) -> Self {
        self.parameters = schema;
        self.compiled = Arc::default();
        self.parameters_text = Arc::default();
        self.renderings = Arc::default();
        self
    }

    pub fn parallel_safe(mut self) -> Self {
        self.parallel_safe = true;
        self
    }

    pub fn serial(mut self) -> Self {
        self.serial = true;
        self
    }

    pub fn read_only(mut self) -> Self {
        self.read_only = true;
        self
    }

    pub fn with_order_key(mut self, key: OrderKey) -> Self {
        self.order_key = Some(key);
        self
    }

    pub fn with_timeout(mut self, timeout: Duration) -> Self {
        self.timeout = Some(timeout);
        self
    }

    /// The single predicate behind both the executor's batch decision and the
    /// prompt's list of parallel-safe tools: declared safe and not serial.
    pub fn runs_in_parallel(&self) -> bool {
        self.parallel_safe && !self.serial
    }

    /// The order key of one call of this tool, if the tool declares one:
    /// two calls with the same key never overlap. The executor's planner
    /// and the sequence engine both ask this, so they agree on what a key
    /// is.
    ///
    /// [`MissingOrderKey`] means the tool keys on an argument the call did
    /// not supply as a non-empty string or a number; a planner treats such
    /// a call as conflicting with every other.
    pub fn order_key_for(&self, arguments: &Value) -> Result<Option<String>, MissingOrderKey> {
        match &self.order_key {
            None => Ok(None),
            Some(OrderKey::Fixed(key)) => Ok(Some(format!("fixed:{key}"))),
            Some(OrderKey::Argument(arg)) => match arguments.get(arg) {
                Some(Value::String(s)) if !s.is_empty() => Ok(Some(format!("{arg}={s}"))),
                Some(Value::Number(n)) => Ok(Some(format!("{arg}={n}"))),
                _ => Err(MissingOrderKey),
            },
        }
    }

    /// [`order_key_for`](Self::order_key_for) the arguments as the handler
    /// will get them: a key read from an argument is read after the
    /// schema's coercion (`"1.0"` → `1` for an integer), so two calls the
    /// text keys apart but the handler sees as one do not overlap.
    /// Arguments the schema refuses keep the key of their text (such a
    /// call does not run). For a planner that cannot plan again after
    /// admission, as the executor does (the sequence engine runs each step
    /// as its own batch).
    pub fn order_key_for_prepared(
        &self,
        arguments: &Value,
    ) -> Result<Option<String>, MissingOrderKey> {
        if !matches!(self.order_key, Some(OrderKey::Argument(_))) {
            return self.order_key_for(arguments);
        }
        let mut prepared = arguments.clone();
        match self.compiled_schema().prepare(&self.name, &mut prepared) {
            Ok(_) => self.order_key_for(&prepared),
            Err(_) => self.order_key_for(arguments),
        }
    }

    /// The argument schema as JSON text. Model requests embed it as is, so
    /// a schema is serialized once per tool, not once per request.
    pub fn parameters_text(&self) -> Arc<RawValue> {
        Arc::clone(self.parameters_text.get_or_init(|| {
            // A `Value` always serializes; the fallback is unreachable.
            serde_json::value::to_raw_value(&self.parameters)
                .map(Arc::from)
                .unwrap_or_else(|_| Arc::from(RawValue::NULL.to_owned()))
        }))
    }

    /// The definition's shared [`Renderings`].
    pub fn renderings(&self) -> Arc<Renderings> {
        Arc::clone(&self.renderings)
    }

    pub(crate) fn compiled_schema(&self) -> &CompiledSchema {
        self.compiled
            .get_or_init(|| CompiledSchema::compile(&self.parameters))
    }
}

impl std::fmt::Debug for ToolDef {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ToolDef")
            .field("name", &self.name)
            .field("parallel_safe", &self.parallel_safe)
            .field("serial", &self.serial)
            .field("read_only", &self.read_only)
            .field("order_key", &self.order_key)
            .field("timeout", &self.timeout)
            .finish_non_exhaustive()
    }
}

impl PartialEq for ToolDef {
    fn eq(&self, other: &Self) -> bool {
        self.name == other.name
            && self.description == other.description
            && self.parameters == other.parameters
            && self.parallel_safe == other.parallel_safe
            && self.serial == other.serial
            && self.read_only == other.read_only
            && self.order_key == other.order_key
            && self.timeout == other.timeout
    }
}

mod duration_ms {
    use std::time::Duration;

    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(d: &Option<Duration>, s: S) -> Result<S::Ok, S::Error> {
        match d {
            Some(d) => s.serialize_u64(u64::try_from(d.as_millis()).unwrap_or(u64::MAX)),
            None => s.serialize_none(),
        }
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Duration>, D::Error> {
        Ok(Option::<u64>::deserialize(d)?.map(Duration::from_millis))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;
    use std::sync::atomic::{AtomicUsize, Ordering};

    fn raw(text: &str) -> Arc<RawValue> {
        Arc::from(
            RawValue::from_string(text.to_owned()).unwrap_or_else(|_| RawValue::NULL.to_owned()),
        )
    }

    #[test]
    fn a_rendering_is_made_once_per_key_and_shared_by_clones() {
        let def = ToolDef::new("t", "d");
        let renders = AtomicUsize::new(0);
        let render = |text: &'static str| {
            renders.fetch_add(1, Ordering::SeqCst);
            raw(text)
        };
        let first = def.renderings().get_or_render("wire-a", || render("1"));
        let clone = def.clone();
        let again = clone.renderings().get_or_render("wire-a", || render("2"));
        let other = def.renderings().get_or_render("wire-b", || render("3"));
        assert_eq!((first.get(), again.get(), other.get()), ("1", "1", "3"));
        assert_eq!(renders.load(Ordering::SeqCst), 2, "wire-a rendered once");
        assert_eq!(def.renderings().len(), 2);
    }

    #[test]
    fn a_new_schema_drops_the_renderings() {
        let def = ToolDef::new("t", "d");
        def.renderings().get_or_render("wire-a", || raw("1"));
        assert!(!def.renderings().is_empty());
        let changed = def.with_parameters(json!({"type": "object"}));
        assert!(changed.renderings().is_empty());
        let again = changed.renderings().get_or_render("wire-a", || raw("2"));
        assert_eq!(again.get(), "2");
    }

    #[test]
    fn tool_names_follow_the_provider_rule() {
        for good in [
            "a",
            "cmd_run",
            "output_send__console",
            "A-9_z",
            &"x".repeat(64),
        ] {
            assert_eq!(check_tool_name(good), Ok(()), "{good}");
        }
        assert_eq!(check_tool_name(""), Err(ToolNameError::Empty));
        assert!(matches!(
            check_tool_name(&"x".repeat(65)),
            Err(ToolNameError::TooLong { len: 65, .. })
        ));
        for (bad, ch) in [
            ("a.b", '.'),
            ("a b", ' '),
            ("é", 'é'),
            ("a/b", '/'),
            ("a:b", ':'),
        ] {
            assert!(
                matches!(check_tool_name(bad), Err(ToolNameError::BadCharacter { bad, .. }) if bad == ch),
                "{bad}"
            );
        }
    }

    #[test]
    fn serial_wins_over_parallel_safe() {
        assert!(ToolDef::new("t", "").parallel_safe().runs_in_parallel());
        assert!(
            !ToolDef::new("t", "")
                .parallel_safe()
                .serial()
                .runs_in_parallel()
        );
        assert!(!ToolDef::new("t", "").runs_in_parallel());
        // read_only is advisory and never makes a tool parallel.
        assert!(!ToolDef::new("t", "").read_only().runs_in_parallel());
    }

    #[test]
    fn order_keys_come_from_the_definition_or_the_argument() {
        let fixed = ToolDef::new("s", "").with_order_key(OrderKey::Fixed("console".into()));
        assert_eq!(
            fixed.order_key_for(&json!({})),
            Ok(Some("fixed:console".into()))
        );
        let by_arg = ToolDef::new("d", "").with_order_key(OrderKey::Argument("device_id".into()));
        assert_eq!(
            by_arg.order_key_for(&json!({"device_id": "nas"})),
            Ok(Some("device_id=nas".into()))
        );
        assert_eq!(by_arg.order_key_for(&json!({})), Err(MissingOrderKey));
        // Numeric ids are keys too; an empty id is no id.
        assert_eq!(
            by_arg.order_key_for(&json!({"device_id": 7})),
            Ok(Some("device_id=7".into()))
        );
        assert_eq!(
            by_arg.order_key_for(&json!({"device_id": ""})),
            Err(MissingOrderKey)
        );
        assert_eq!(
            by_arg.order_key_for(&json!({"device_id": ["x"]})),
            Err(MissingOrderKey)
        );
        assert_eq!(
            ToolDef::new("x", "").order_key_for(&json!({"device_id": "nas"})),
            Ok(None)
        );
    }

    #[test]
    fn definitions_differing_in_any_declared_field_are_not_equal() {
        let base = ToolDef::new("t", "d").with_parameters(json!({"type": "object"}));
        let variants = [
            ToolDef::new("u", "d").with_parameters(json!({"type": "object"})),
            ToolDef::new("t", "other").with_parameters(json!({"type": "object"})),
            ToolDef::new("t", "d"),
            base.clone().parallel_safe(),
            base.clone().serial(),
            base.clone().read_only(),
            base.clone().with_order_key(OrderKey::Fixed("c".into())),
            base.clone().with_timeout(Duration::from_secs(1)),
        ];
        assert_eq!(base, base.clone());
        for v in &variants {
            assert_ne!(&base, v, "{v:?}");
        }
        let shown = format!("{:?}", base.clone().parallel_safe());
        assert!(
            shown.contains("\"t\"") && shown.contains("parallel_safe: true"),
            "{shown}"
        );
    }

    #[test]
    fn definitions_round_trip_through_json() {
        let def = ToolDef::new("d", "desc")
            .with_parameters(json!({"type": "object"}))
            .parallel_safe()
            .with_order_key(OrderKey::Argument("device_id".into()))
            .with_timeout(Duration::from_millis(1500));
        let text = serde_json::to_string(&def).unwrap();
        let back: ToolDef = serde_json::from_str(&text).unwrap();
        assert_eq!(back, def);
        assert!(text.contains("\"timeout\":1500"), "{text}");
    }
}
