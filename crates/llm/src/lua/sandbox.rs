//! The Lua state an adapter runs in.
//!
//! Only the `string`, `table`, `math` and `utf8` libraries are loaded (no
//! `os`, `io`, `package`, `coroutine`, `debug`). From the base library the
//! functions that reach files or compile code are removed (`dofile`,
//! `loadfile`, `load`, `loadstring`, `require`) along with `print` (stdout
//! belongs to the CLI), `collectgarbage` and `string.dump`. `pcall` and
//! `xpcall` are removed too: the instruction limit is raised as a Lua error,
//! and a script could otherwise catch it and loop on. Adapters do not need
//! them, since `json.decode` reports bad input as `nil, message`.
//!
//! The helpers are `json.encode`, `json.decode`, `json.null`, `log`,
//! `sha256_hex`, `hmac_sha256_hex` and `base64_encode`.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use base64::Engine as _;
use hmac::{Hmac, KeyInit, Mac};
use mlua::{HookTriggers, Lua, LuaOptions, StdLib, Table, Value, VmState};
use serde_json::{Map, Number};
use sha2::{Digest, Sha256};

/// How many VM instructions run between two checks of the budget.
const CHECK_EVERY: u32 = 1_000;

/// The default instruction budget of one call: a few tens of milliseconds
/// of pure Lua, far more than any chunk transform needs.
pub const DEFAULT_INSTRUCTION_LIMIT: u64 = 20_000_000;

/// The most memory one adapter's Lua state may hold.
pub(super) const MEMORY_LIMIT: usize = 64 * 1024 * 1024;

/// The registry name of the metatable that marks a table as an array.
const ARRAY_MT: &str = "homeagent.json.array_mt";
/// The metatable field that marks a table as an array.
const ARRAY_MARK: &str = "__jsontype";

/// How deeply `json.encode` follows nested tables (also stops cycles).
const MAX_JSON_DEPTH: usize = 128;

/// The instruction budget of the call in progress.
#[derive(Debug)]
pub(crate) struct Budget {
    used: AtomicU64,
    limit: AtomicU64,
    exceeded: AtomicBool,
}

impl Budget {
    fn new() -> Self {
        Budget {
            used: AtomicU64::new(0),
            limit: AtomicU64::new(DEFAULT_INSTRUCTION_LIMIT),
            exceeded: AtomicBool::new(false),
        }
    }

    /// Starts a new call with the whole budget.
    pub(crate) fn reset(&self) {
        self.used.store(0, Ordering::Relaxed);
        self.exceeded.store(false, Ordering::Relaxed);
    }

    /// Whether the call in progress ran out of instructions.
    pub(crate) fn exceeded(&self) -> bool {
        self.exceeded.load(Ordering::Relaxed)
    }

    pub(crate) fn limit(&self) -> u64 {
        self.limit.load(Ordering::Relaxed)
    }

    pub(crate) fn set_limit(&self, limit: u64) {
        self.limit.store(limit, Ordering::Relaxed);
    }

    /// Called by the hook every [`CHECK_EVERY`] instructions.
    fn charge(&self) -> mlua::Result<VmState> {
        let used = self
            .used
            .fetch_add(u64::from(CHECK_EVERY), Ordering::Relaxed)
            + u64::from(CHECK_EVERY);
        let limit = self.limit();
        if used > limit {
            self.exceeded.store(true, Ordering::Relaxed);
            return Err(mlua::Error::runtime(format!(
                "instruction limit of {limit} exceeded"
            )));
        }
        Ok(VmState::Continue)
    }
}

/// A fresh sandboxed state for the adapter called `adapter` (used in logs).
pub(crate) fn new_state(adapter: &str) -> mlua::Result<(Lua, Arc<Budget>)> {
    let lua = Lua::new_with(
        StdLib::STRING | StdLib::TABLE | StdLib::MATH | StdLib::UTF8,
        LuaOptions::default(),
    )?;
    lua.set_memory_limit(MEMORY_LIMIT)?;
    let globals = lua.globals();
    for name in [
        "dofile",
        "loadfile",
        "load",
        "loadstring",
        "require",
        "print",
        "collectgarbage",
        "pcall",
        "xpcall",
    ] {
        globals.raw_set(name, Value::Nil)?;
    }
    if let Value::Table(string) = globals.raw_get::<Value>("string")? {
        string.raw_set("dump", Value::Nil)?;
    }
    install_helpers(&lua, &globals, adapter)?;
    guard_setmetatable(&lua, &globals)?;
    bound_library_loops(&lua)?;

    let budget = Arc::new(Budget::new());
    let hook_budget = Arc::clone(&budget);
    lua.set_hook(
        HookTriggers::new().every_nth_instruction(CHECK_EVERY),
        move |_lua, _debug| hook_budget.charge(),
    )?;
    Ok((lua, budget))
}

/// The most elements `table.move`, `table.insert` and `table.remove` take
/// on at once in an adapter: far more than any request or chunk holds.
const MAX_TABLE_ELEMENTS: i64 = 1 << 24;

/// Bounds the library functions that loop in C, where the instruction
/// limit (a hook between Lua instructions) never looks: `string.rep` of an
/// empty string a `math.maxinteger` times, `table.move` over that many
/// slots, `table.insert`/`remove` on a table whose `__len` says so, each
/// looped for ever on the agent's thread. (Pattern matching can backtrack
/// for very long on a crafted pattern too; that is not bounded here.)
fn bound_library_loops(lua: &Lua) -> mlua::Result<()> {
    lua.load(format!(
        r#"
        local rep, move, insert, remove = string.rep, table.move, table.insert, table.remove
        local limit = {MAX_TABLE_ELEMENTS}
        local function too_many(name, n)
          error(name .. ": too many elements (" .. tostring(n) .. "; an adapter may move at most "
            .. limit .. ")", 3)
        end
        string.rep = function(s, n, sep)
          if type(n) == "number" and n > 1 and #tostring(s) == 0
             and (sep == nil or #tostring(sep) == 0) then
            return ""
          end
          return rep(s, n, sep)
        end
        table.move = function(a1, f, e, t, a2)
          if type(f) == "number" and type(e) == "number" and e >= f
             and (e - f >= limit or e - f < 0) then
            too_many("table.move", e - f + 1)
          end
          return move(a1, f, e, t, a2)
        end
        table.insert = function(t, ...)
          local n = #t
          if n > limit then too_many("table.insert", n) end
          return insert(t, ...)
        end
        table.remove = function(t, ...)
          local n = #t
          if n > limit then too_many("table.remove", n) end
          return remove(t, ...)
        end
        "#
    ))
    .set_name("=sandbox")
    .exec()
}

/// Where the standard `setmetatable` is kept for [`guard_setmetatable`]'s
/// wrapper (in the registry, not captured by the closure: a Lua value held
/// by a Rust closure the state owns would keep the state alive forever).
const RAW_SETMETATABLE: &str = "homeagent.setmetatable";

/// Replaces `setmetatable` with one that refuses a metatable with `__gc`.
///
/// Lua runs finalizers with hooks disabled, so the instruction limit does
/// not reach them: an endless `__gc` would hang the thread that happened to
/// collect (or drop) the state. Lua marks a table for finalization only if
/// its metatable has `__gc` when it is set, and the sandbox leaves no other
/// way to set one (no `debug`, no userdata) but Rust's own, on decoded
/// arrays (`decode_json`, which checks `json.array_mt` the same way).
fn guard_setmetatable(lua: &Lua, globals: &Table) -> mlua::Result<()> {
    let raw: mlua::Function = globals.raw_get("setmetatable")?;
    lua.set_named_registry_value(RAW_SETMETATABLE, raw)?;
    let guarded = lua.create_function(|lua, (table, meta): (Value, Value)| {
        if let Value::Table(meta) = &meta
            && !meta.raw_get::<Value>("__gc")?.is_nil()
        {
            return Err(mlua::Error::runtime(
                "setmetatable: a metatable with __gc is not allowed in an adapter (finalizers \
                 run outside the instruction limit); remove the __gc field",
            ));
        }
        let raw: mlua::Function = lua.named_registry_value(RAW_SETMETATABLE)?;
        raw.call::<Value>((table, meta))
    })?;
    globals.raw_set("setmetatable", guarded)
}

fn install_helpers(lua: &Lua, globals: &Table, adapter: &str) -> mlua::Result<()> {
    let json = lua.create_table()?;
    json.raw_set(
        "encode",
        lua.create_function(|_, value: Value| {
            let json = lua_to_json(&value).map_err(mlua::Error::runtime)?;
            serde_json::to_string(&json).map_err(mlua::Error::runtime)
        })?,
    )?;
    json.raw_set(
        "decode",
        lua.create_function(|lua, text: mlua::LuaString| {
            match decode_json(lua, &text.as_bytes())? {
                Ok(value) => Ok((value, Value::Nil)),
                Err(err) => Ok((Value::Nil, Value::String(lua.create_string(err)?))),
            }
        })?,
    )?;
    json.raw_set("null", Value::NULL)?;
    // Decoded arrays carry this metatable so that an empty one encodes back
    // as `[]`; adapters can set it on a table of their own.
    let array_mt = lua.create_table()?;
    array_mt.raw_set(ARRAY_MARK, "array")?;
    lua.set_named_registry_value(ARRAY_MT, &array_mt)?;
    json.raw_set("array_mt", array_mt)?;
    globals.raw_set("json", json)?;

    let name = adapter.to_owned();
    globals.raw_set(
        "log",
        lua.create_function(move |_, (level, message): (String, mlua::LuaString)| {
            let message = message.to_string_lossy();
            match level.to_ascii_lowercase().as_str() {
                "error" => tracing::error!(adapter = %name, "{message}"),
                "warn" | "warning" => tracing::warn!(adapter = %name, "{message}"),
                "debug" => tracing::debug!(adapter = %name, "{message}"),
                "trace" => tracing::trace!(adapter = %name, "{message}"),
                _ => tracing::info!(adapter = %name, "{message}"),
            }
            Ok(())
        })?,
    )?;
    globals.raw_set(
        "sha256_hex",
        lua.create_function(|_, data: mlua::LuaString| {
            Ok(hex(&Sha256::digest(&*data.as_bytes())))
        })?,
    )?;
    globals.raw_set(
        "hmac_sha256_hex",
        lua.create_function(|_, (key, data): (mlua::LuaString, mlua::LuaString)| {
            let mut mac = <Hmac<Sha256> as KeyInit>::new_from_slice(&key.as_bytes())
                .map_err(mlua::Error::runtime)?;
            mac.update(&data.as_bytes());
            Ok(hex(&mac.finalize().into_bytes()))
        })?,
    )?;
    globals.raw_set(
        "base64_encode",
        lua.create_function(|_, data: mlua::LuaString| {
            Ok(base64::engine::general_purpose::STANDARD.encode(&*data.as_bytes()))
        })?,
    )?;
    Ok(())
}

fn hex(bytes: &[u8]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut out = String::with_capacity(bytes.len() * 2);
    for byte in bytes {
        out.push(char::from(DIGITS[usize::from(byte >> 4)]));
        out.push(char::from(DIGITS[usize::from(byte & 0x0f)]));
    }
    out
}

/// The most memory one `json.encode` (or adapter output) may build: as much
/// as the Lua heap may hold. The encoder runs in Rust, outside both the heap
/// limit and the instruction count, and Lua values are shared: a string or
/// table referenced many times is encoded once per reference.
const MAX_ENCODED_BYTES: usize = MEMORY_LIMIT;

/// A Lua value as JSON. A table whose keys are exactly `1..n` (n > 0) is an
/// array, and so is an empty table carrying `json.array_mt` (as decoded
/// arrays do); any other table is an object (so `{}` is `{}`).
pub(crate) fn lua_to_json(value: &Value) -> Result<serde_json::Value, String> {
    Encoder {
        left: MAX_ENCODED_BYTES,
    }
    .value(value, 0)
}

/// One encode's remaining memory budget.
struct Encoder {
    left: usize,
}

impl Encoder {
    /// Takes `bytes` from the budget, or fails the encode.
    fn charge(&mut self, bytes: usize) -> Result<(), String> {
        self.left = self.left.checked_sub(bytes).ok_or_else(|| {
            format!(
                "json.encode: the value is too large (over {} MiB once every shared string \
                 and table is written out in full)",
                MAX_ENCODED_BYTES / (1024 * 1024)
            )
        })?;
        Ok(())
    }

    fn value(&mut self, value: &Value, depth: usize) -> Result<serde_json::Value, String> {
        if depth > MAX_JSON_DEPTH {
            return Err(format!(
                "json.encode: tables nested deeper than {MAX_JSON_DEPTH} (a cycle?)"
            ));
        }
        self.charge(std::mem::size_of::<serde_json::Value>())?;
        Ok(match value {
            Value::Nil => serde_json::Value::Null,
            Value::LightUserData(data) if data.0.is_null() => serde_json::Value::Null,
            Value::Boolean(b) => serde_json::Value::Bool(*b),
            Value::Integer(i) => serde_json::Value::from(*i),
            Value::Number(n) => number_json(*n)?,
            Value::String(s) => serde_json::Value::String(self.string(s, "a string")?),
            Value::Table(table) => self.table(table, depth)?,
            other => {
                return Err(format!(
                    "json.encode: cannot encode a {}",
                    other.type_name()
                ));
            }
        })
    }

    fn string(&mut self, s: &mlua::LuaString, what: &str) -> Result<String, String> {
        let bytes = s.as_bytes();
        self.charge(bytes.len())?;
        std::str::from_utf8(&bytes)
            .map(str::to_owned)
            .map_err(|_| format!("json.encode: {what} is not valid UTF-8"))
    }

    fn table(&mut self, table: &Table, depth: usize) -> Result<serde_json::Value, String> {
        let length = table.raw_len();
        let mut count = 0usize;
        let mut entries = Vec::new();
        for pair in table.pairs::<Value, Value>() {
            let (key, value) = pair.map_err(|e| e.to_string())?;
            count += 1;
            entries.push((key, value));
        }
        if count == 0 && is_marked_array(table) {
            return Ok(serde_json::Value::Array(Vec::new()));
        }
        if length > 0 && count == length {
            let mut items = Vec::with_capacity(length);
            for index in 1..=length {
                let item: Value = table.raw_get(index).map_err(|e| e.to_string())?;
                items.push(self.value(&item, depth + 1)?);
            }
            return Ok(serde_json::Value::Array(items));
        }
        // What a map costs beyond its values: a tree node (eleven slots)
        // for every few entries, a one-entry object included. Charged
        // as made, or a million references to one small table passed the
        // budget at 65 bytes each and took ten times that.
        self.charge(OBJECT_NODE_BYTES * (1 + entries.len() / 6))?;
        let mut object = Map::new();
        for (key, value) in entries {
            let key = match key {
                Value::String(s) => self.string(&s, "a key")?,
                Value::Integer(i) => i.to_string(),
                other => {
                    return Err(format!(
                        "json.encode: cannot use a {} as an object key",
                        other.type_name()
                    ));
                }
            };
            object.insert(key, self.value(&value, depth + 1)?);
        }
        Ok(serde_json::Value::Object(object))
    }
}

/// About what one node of a JSON object's map takes (`BTreeMap` leaf:
/// eleven keys and values).
const OBJECT_NODE_BYTES: usize =
    11 * (std::mem::size_of::<String>() + std::mem::size_of::<serde_json::Value>()) + 64;

fn number_json(n: f64) -> Result<serde_json::Value, String> {
    // Integral floats (`2^3`, `x / 1`) become integers, so a computed
    // `stream_index` still reads as one.
    if n.fract() == 0.0 && n.abs() < 9.0e15 {
        #[allow(clippy::cast_possible_truncation)] // integral and in range
        return Ok(serde_json::Value::from(n as i64));
    }
    Number::from_f64(n)
        .map(serde_json::Value::Number)
        .ok_or_else(|| format!("json.encode: {n} is not a finite number"))
}

fn is_marked_array(table: &Table) -> bool {
    table.metatable().is_some_and(
        |mt| matches!(mt.raw_get::<Value>(ARRAY_MARK), Ok(Value::String(s)) if s == "array"),
    )
}

/// JSON text as Lua values, built straight in the adapter's state: every
/// table and string is charged to its memory limit as it is made. (Read
/// into a `serde_json::Value` first, 20 MB of small objects took 1.7 GB
/// of the process's own heap, outside that limit, before one Lua value
/// existed.) Arrays carry `json.array_mt`; an object's `null` members are
/// left out, an array's are `json.null`. A Lua error met on the way (the
/// memory limit) is the call's error, not a "not JSON" answer.
pub(crate) fn decode_json(lua: &Lua, text: &[u8]) -> mlua::Result<Result<Value, String>> {
    let array_mt = lua.named_registry_value::<Table>(ARRAY_MT)?;
    // Set from Rust, past the guarded setmetatable: scripts can reach this
    // table as `json.array_mt`, so its `__gc` is checked here too (a
    // finalizer escapes the instruction limit).
    if !array_mt.raw_get::<Value>("__gc")?.is_nil() {
        return Err(mlua::Error::runtime(
            "json.decode: json.array_mt has a __gc field, which is not allowed in an \
             adapter (finalizers run outside the instruction limit); remove it",
        ));
    }
    let failed = std::cell::RefCell::new(None);
    let seed = LuaSeed {
        lua,
        array_mt: &array_mt,
        failed: &failed,
    };
    let mut deserializer = serde_json::Deserializer::from_slice(text);
    let decoded = serde::de::DeserializeSeed::deserialize(seed, &mut deserializer)
        .and_then(|value| deserializer.end().map(|()| value));
    if let Some(error) = failed.into_inner() {
        return Err(error);
    }
    Ok(decoded.map_err(|e| format!("invalid JSON: {e}")))
}

/// Builds one JSON value as a Lua value (see [`decode_json`]).
#[derive(Clone, Copy)]
struct LuaSeed<'a> {
    lua: &'a Lua,
    array_mt: &'a Table,
    /// The Lua error that ended the decode, if one did.
    failed: &'a std::cell::RefCell<Option<mlua::Error>>,
}

impl LuaSeed<'_> {
    /// `result`'s value, or a decode error that keeps the Lua error aside.
    fn lua<T, E: serde::de::Error>(&self, result: mlua::Result<T>) -> Result<T, E> {
        result.map_err(|error| {
            let shown = error.to_string();
            *self.failed.borrow_mut() = Some(error);
            E::custom(shown)
        })
    }
}

impl<'de> serde::de::DeserializeSeed<'de> for LuaSeed<'_> {
    type Value = Value;

    fn deserialize<D: serde::Deserializer<'de>>(self, deserializer: D) -> Result<Value, D::Error> {
        deserializer.deserialize_any(self)
    }
}

impl<'de> serde::de::Visitor<'de> for LuaSeed<'_> {
    type Value = Value;

    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("a JSON value")
    }

    fn visit_unit<E: serde::de::Error>(self) -> Result<Value, E> {
        Ok(Value::NULL)
    }

    fn visit_bool<E: serde::de::Error>(self, b: bool) -> Result<Value, E> {
        Ok(Value::Boolean(b))
    }

    fn visit_i64<E: serde::de::Error>(self, i: i64) -> Result<Value, E> {
        Ok(Value::Integer(i))
    }

    fn visit_u64<E: serde::de::Error>(self, u: u64) -> Result<Value, E> {
        Ok(match i64::try_from(u) {
            Ok(i) => Value::Integer(i),
            Err(_) => Value::Number(u as f64),
        })
    }

    fn visit_f64<E: serde::de::Error>(self, n: f64) -> Result<Value, E> {
        Ok(Value::Number(n))
    }

    fn visit_str<E: serde::de::Error>(self, s: &str) -> Result<Value, E> {
        self.lua(self.lua.create_string(s)).map(Value::String)
    }

    fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut seq: A) -> Result<Value, A::Error> {
        let table = self.lua(self.lua.create_table())?;
        self.lua(table.set_metatable(Some(self.array_mt.clone())))?;
        let mut index = 0i64;
        while let Some(item) = seq.next_element_seed(self)? {
            index += 1;
            self.lua(table.raw_set(index, item))?;
        }
        Ok(Value::Table(table))
    }

    fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> Result<Value, A::Error> {
        let table = self.lua(self.lua.create_table())?;
        while let Some(key) = map.next_key::<std::borrow::Cow<'de, str>>()? {
            let item = map.next_value_seed(self)?;
            if !item.is_null() {
                self.lua(table.raw_set(key.as_ref(), item))?;
            }
        }
        Ok(Value::Table(table))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The hook charges [`CHECK_EVERY`] instructions per call: a budget of
    /// five of those lasts five calls, the sixth ends the call, and the
    /// next call starts with the whole budget again. (Through Lua the
    /// count cannot be read this exactly: the hook's counter runs on
    /// across calls.)
    #[test]
    fn a_budget_lasts_exactly_its_limit_and_each_call_gets_it_whole() {
        let budget = Budget::new();
        budget.set_limit(5 * u64::from(CHECK_EVERY));
        for _ in 0..5 {
            assert!(budget.charge().is_ok());
            assert!(!budget.exceeded());
        }
        let error = budget.charge().err().map(|e| e.to_string());
        assert!(
            error
                .as_deref()
                .is_some_and(|e| e.contains("instruction limit of 5000 exceeded")),
            "{error:?}"
        );
        assert!(budget.exceeded());
        budget.reset();
        assert!(!budget.exceeded());
        for _ in 0..5 {
            assert!(budget.charge().is_ok());
        }
        assert!(budget.charge().is_err());
    }
}
