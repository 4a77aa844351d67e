#![allow(clippy::unwrap_used, clippy::expect_used)] // a panic in a test is a test failure

//! Lua adapters: the sandbox, the instruction limit, the strict chunk
//! contract, the helpers, and the bundled adapters passing the conformance
//! transcripts by themselves (the fallback to the standard decoder off).

use std::sync::Arc;

use homeagent_core::{
    AssembledTurn, FinishReason, Message, StreamAssembler, StreamEvent, ToolCall,
};
use homeagent_llm::codec::decode_stream_body;
use homeagent_llm::lua::ChunkResult;
use homeagent_llm::{
    AdapterError, ChatRequest, Endpoint, LuaAdapter, LuaCodec, ToolSpec, WireCodec,
};
use serde_json::json;

fn adapter(file: &str, source: &str) -> LuaAdapter {
    LuaAdapter::from_source(file, source).unwrap()
}

/// An adapter whose `transform_request` runs `body`.
fn request_adapter(file: &str, body: &str) -> LuaAdapter {
    adapter(
        file,
        &format!("return {{ transform_request = function(raw) {body} end }}"),
    )
}

/// An adapter whose every chunk becomes `output` (a Lua expression).
fn chunk_adapter(file: &str, output: &str) -> LuaAdapter {
    adapter(
        file,
        &format!(
            "return {{ transform_request = function(raw) return raw end,\n\
             transform_stream_chunk = function(raw) return {output} end }}"
        ),
    )
}

fn strict(adapter: LuaAdapter) -> LuaCodec {
    LuaCodec::new(Arc::new(adapter)).with_fallback(false)
}

fn bundled(name: &str) -> LuaAdapter {
    LuaAdapter::bundled(name).unwrap().unwrap()
}

fn assemble(events: Vec<StreamEvent>) -> AssembledTurn {
    let mut assembler = StreamAssembler::new();
    for event in events {
        assembler.push(event);
    }
    assembler.finish()
}

fn calls(turn: &AssembledTurn) -> Vec<ToolCall> {
    turn.calls.iter().map(|c| c.call.clone()).collect()
}

fn call(id: &str, name: &str, arguments: serde_json::Value, raw: &str) -> ToolCall {
    ToolCall {
        id: id.into(),
        name: name.into(),
        arguments,
        raw_arguments: raw.into(),
    }
}

fn eval(adapter: &LuaAdapter, code: &str) -> serde_json::Value {
    adapter.eval_json(code).unwrap()
}

// --- the sandbox ---------------------------------------------------------

#[test]
fn the_sandbox_refuses_os_io_require_and_load() {
    for (snippet, name) in [
        ("os.execute('echo pwned')", "os"),
        ("io.open('/etc/passwd')", "io"),
        ("require('socket')", "require"),
        ("load('return 1')", "load"),
        ("loadstring('return 1')", "loadstring"),
        ("dofile('/etc/passwd')", "dofile"),
        ("loadfile('/etc/passwd')", "loadfile"),
        ("string.dump(print)", "dump"),
        ("debug.getinfo(1)", "debug"),
        ("pcall(print)", "pcall"),
    ] {
        let adapter = request_adapter("sandbox.lua", &format!("{snippet}; return raw"));
        let err = adapter.transform_request("{}").unwrap_err();
        let message = err.to_string();
        assert!(
            matches!(
                err,
                AdapterError::Runtime {
                    function: "transform_request",
                    ..
                }
            ),
            "{snippet}: {err:?}"
        );
        assert!(message.contains("sandbox.lua"), "{snippet}: {message}");
        assert!(
            message.contains(&format!("'{name}'")),
            "{snippet}: {message}"
        );
    }
}

#[test]
fn only_string_table_math_and_utf8_are_loaded() {
    let adapter = request_adapter("libs.lua", "return raw");
    assert_eq!(
        eval(
            &adapter,
            "return {string.upper('a'), table.concat({'b','c'}), math.max(1, 4), utf8.char(72), \
             type(os), type(io), type(package), type(coroutine), type(debug)}"
        ),
        json!(["A", "bc", 4, "H", "nil", "nil", "nil", "nil", "nil"])
    );
}

#[test]
fn precompiled_bytecode_is_refused_at_load() {
    // "\27Lua" is the bytecode signature; text mode refuses it.
    let err = LuaAdapter::from_source("bytecode.lua", "\x1bLuaT\x00").unwrap_err();
    assert!(matches!(err, AdapterError::Load { .. }), "{err:?}");
    assert!(err.to_string().contains("bytecode.lua"), "{err}");
}

/// Running out of the sandbox's memory says so, naming the cap: "not
/// enough memory" read as the machine's, not the adapter's limit.
#[test]
fn running_out_of_the_sandbox_memory_names_the_cap() {
    let adapter = request_adapter("hog.lua", "local t = {} for i = 1, 1e8 do t[i] = i end");
    let err = adapter.transform_request("{}").unwrap_err();
    assert!(
        matches!(&err, AdapterError::MemoryLimit { file, function: "transform_request", .. } if file == "hog.lua"),
        "{err:?}"
    );
    assert!(err.to_string().contains("64 MiB"), "{err}");
}

/// The process's peak resident memory so far, in kB.
fn peak_rss_kb() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .unwrap()
        .lines()
        .find_map(|line| line.strip_prefix("VmHWM:"))
        .and_then(|rest| rest.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap()
}

/// `json.decode` builds its values in the adapter's own Lua state, under
/// its memory cap: 3,000,000 small objects (24 MB of text) end at the cap.
/// Read into Rust values first, they took about 2 GB of the agent's own
/// memory before the first Lua table was made.
#[test]
fn decoding_json_is_charged_to_the_adapter_s_memory() {
    let adapter = request_adapter(
        "big.lua",
        r#"local s = "[" .. string.rep('{"a":0}', 3000000, ",") .. "]"
           local t, err = json.decode(s)
           return err or "decoded""#,
    );
    let before = peak_rss_kb();
    let err = adapter.transform_request("{}").unwrap_err();
    let grew_mb = peak_rss_kb().saturating_sub(before) / 1024;
    assert!(matches!(err, AdapterError::MemoryLimit { .. }), "{err:?}");
    assert!(
        grew_mb < 600,
        "the decode took {grew_mb} MB of the process's memory"
    );
    // Encoding a million references to one small table is refused before
    // it builds the million maps it would write out (about 700 MB).
    let wide = request_adapter(
        "wide.lua",
        r#"local o = {a = 0}
           local t = {}
           for i = 1, 1000000 do t[i] = o end
           return json.encode(t)"#,
    );
    wide.set_instruction_limit(200_000_000);
    let before = peak_rss_kb();
    let err = wide.transform_request("{}").unwrap_err();
    let grew_mb = peak_rss_kb().saturating_sub(before) / 1024;
    assert!(err.to_string().contains("too large"), "{err}");
    assert!(
        grew_mb < 300,
        "the encode took {grew_mb} MB of the process's memory"
    );
    // A document that fits decodes as before.
    let small = request_adapter(
        "small.lua",
        r#"local t = json.decode('{"a":[1,null,{"b":true}],"n":null,"big":18446744073709551615}')
           return json.encode({a = t.a, n = t.n == nil, big = t.big > 1e19})"#,
    );
    assert_eq!(
        small.transform_request("{}").unwrap(),
        r#"{"a":[1,null,{"b":true}],"big":true,"n":true}"#
    );
}

/// The library functions that loop in C, where the instruction limit never
/// looks, are bounded: an adapter calling them with a huge count fails its
/// call (or gets its empty result) instead of hanging the agent's thread.
#[test]
fn library_loops_in_c_end() {
    let cases = [
        (
            "rep",
            r#"return string.rep("", math.maxinteger) .. "done""#,
            Some("done"),
        ),
        (
            "rep_sep",
            r#"return #string.rep("", 3, "") .. "done""#,
            Some("0done"),
        ),
        (
            "move",
            r#"table.move({}, 1, math.maxinteger - 1, 1, {}) return "moved""#,
            None,
        ),
        (
            "insert",
            r#"table.insert(setmetatable({}, {__len = function() return math.maxinteger - 1 end}), 1, 0) return "inserted""#,
            None,
        ),
        (
            "remove",
            r#"table.remove(setmetatable({}, {__len = function() return math.maxinteger - 1 end}), 1) return "removed""#,
            None,
        ),
    ];
    for (name, body, expected) in cases {
        let (done, answer) = std::sync::mpsc::channel();
        let source = format!("return {{ transform_request = function(raw) {body} end }}");
        std::thread::spawn(move || {
            let adapter = LuaAdapter::from_source(&format!("{name}.lua"), &source).unwrap();
            let _ = done.send(adapter.transform_request("{}"));
        });
        let result = answer
            .recv_timeout(std::time::Duration::from_secs(20))
            .unwrap_or_else(|_| panic!("{name}: the call never ended"));
        match expected {
            Some(text) => assert_eq!(result.as_deref(), Ok(text), "{name}"),
            None => assert!(
                matches!(&result, Err(AdapterError::Runtime { detail, .. }) if detail.contains("too many")),
                "{name}: {result:?}"
            ),
        }
    }
}

/// Static headers are a map from names to strings: a list (a header
/// written as one line) would send a header named `1`.
#[test]
fn static_headers_written_as_a_list_are_refused() {
    let err = LuaAdapter::from_source(
        "list.lua",
        "return { headers = { 'Authorization: Token abc' }, transform_request = function(r) return r end }",
    )
    .unwrap_err();
    assert!(
        matches!(&err, AdapterError::Load { detail, .. } if detail.contains("`headers`") && !detail.contains("Token abc")),
        "{err:?}"
    );
}

/// A header `build_headers` gives that cannot be sent is the adapter's
/// error, naming the function and the header, never showing the value
/// (it may be the key).
#[test]
fn headers_that_cannot_be_sent_are_the_adapter_s_error_without_their_value() {
    for (returned, name) in [
        (
            r#"{authorization = {"Bearer", "sk-secret-1"}}"#,
            "authorization",
        ),
        (r#"{["x api key"] = "sk-secret-1"}"#, "x api key"),
        (
            r#"{authorization = "Bearer sk-secret-1\n"}"#,
            "authorization",
        ),
    ] {
        let adapter = LuaAdapter::from_source(
            "hdr.lua",
            &format!(
                "return {{ transform_request = function(r) return r end, \
                 build_headers = function(m) return json.encode({returned}) end }}"
            ),
        )
        .unwrap();
        let err = adapter.headers(&json!({})).unwrap_err();
        assert!(
            matches!(&err, AdapterError::BadOutput { function: "build_headers", detail, .. } if detail.contains(name)),
            "{returned}: {err:?}"
        );
        assert!(!err.to_string().contains("sk-secret-1"), "{err}");
    }
    let static_bad = LuaAdapter::from_source(
        "hdr.lua",
        "return { headers = { ['x-key'] = 'sk-static-2\\nvalue' }, transform_request = function(r) return r end }",
    )
    .unwrap_err();
    assert!(
        matches!(&static_bad, AdapterError::Load { detail, .. } if detail.contains("x-key") && !detail.contains("sk-static-2")),
        "{static_bad:?}"
    );
}

#[test]
fn an_endless_loop_fails_the_call_naming_the_file_and_function() {
    let adapter = request_adapter("spin.lua", "while true do end");
    adapter.set_instruction_limit(1_000_000);
    let err = adapter.transform_request("{}").unwrap_err();
    assert_eq!(
        err,
        AdapterError::InstructionLimit {
            file: "spin.lua".into(),
            function: "transform_request",
            limit: 1_000_000,
        }
    );
    let message = err.to_string();
    assert!(message.contains("spin.lua") && message.contains("transform_request"));
    assert!(message.contains("instruction limit"), "{message}");
    // The state is still usable, with a fresh budget, for the next call.
    assert_eq!(eval(&adapter, "return 1 + 1"), json!(2));
}

#[test]
fn an_endless_loop_at_load_fails_the_load() {
    let err = LuaAdapter::from_source("top.lua", "while true do end").unwrap_err();
    assert_eq!(
        err,
        AdapterError::Load {
            file: "top.lua".into(),
            detail: format!(
                "the script exceeded the instruction limit of {}",
                homeagent_llm::lua::DEFAULT_INSTRUCTION_LIMIT
            ),
        }
    );
    // Any other failure at load is Lua's own message, not the limit's.
    let err = LuaAdapter::from_source("boom.lua", "error('no table today')").unwrap_err();
    let AdapterError::Load { file, detail } = &err else {
        panic!("{err:?}");
    };
    assert_eq!(file, "boom.lua");
    assert!(
        detail.contains("no table today") && !detail.contains("instruction limit"),
        "{detail}"
    );
}

/// A spec with a path separator or ending in `.lua` is a path, read as
/// given (a missing one is a read error naming it); any other is a name,
/// looked up in the adapter directory and then among the bundled ones.
#[test]
fn resolve_tells_a_path_from_a_name() {
    for path in [
        "missing-adapter.lua",
        "adapters/missing",
        "adapters\\missing",
    ] {
        let err = LuaAdapter::resolve(path, None).unwrap_err();
        assert!(
            matches!(&err, AdapterError::Read { file, .. } if file == path),
            "{path}: {err:?}"
        );
    }
    let err = LuaAdapter::resolve("missing", None).unwrap_err();
    assert_eq!(
        err,
        AdapterError::NotFound {
            name: "missing".into(),
            searched: "no adapter directory (none configured)".into(),
            bundled: "openai, anthropic".into(),
        }
    );
    let adapter = LuaAdapter::resolve("anthropic", None).unwrap();
    assert_eq!(adapter.file(), "anthropic.lua");
    // Its Debug names the file and the endpoint, and nothing of the Lua state.
    assert_eq!(
        format!("{adapter:?}"),
        "LuaAdapter { file: \"anthropic.lua\", endpoint: \"/v1/messages\", .. }"
    );
}

#[test]
fn an_endless_loop_in_a_stream_chunk_fails_the_stream() {
    let adapter = chunk_adapter("spin_chunk.lua", "(function() while true do end end)()");
    adapter.set_instruction_limit(100_000);
    let err = decode_stream_body(&strict(adapter), b"data: {}\n\n").unwrap_err();
    let message = err.to_string();
    assert!(message.contains("spin_chunk.lua"), "{message}");
    assert!(message.contains("transform_stream_chunk"), "{message}");
    assert!(message.contains("instruction limit"), "{message}");
}

/// Lua runs finalizers with hooks off, so an endless `__gc` would escape
/// the instruction limit and hang the thread (when the collector ran it, or
/// when the state was dropped). A metatable with `__gc` is refused; other
/// metatables (the JSON array mark, `__index`) still work.
#[test]
fn a_finalizer_is_refused_because_it_would_run_outside_the_instruction_limit() {
    let adapter = request_adapter(
        "gc.lua",
        "setmetatable({}, {__gc = function() end}); return raw",
    );
    let err = adapter.transform_request("{}").unwrap_err();
    assert!(
        matches!(
            err,
            AdapterError::Runtime {
                function: "transform_request",
                ..
            }
        ),
        "{err:?}"
    );
    let message = err.to_string();
    assert!(
        message.contains("gc.lua") && message.contains("__gc"),
        "{message}"
    );
    // json.array_mt is the metatable Rust sets on decoded arrays, without
    // the guarded setmetatable: a __gc put on it is refused there too.
    let adapter = request_adapter(
        "array_gc.lua",
        "json.array_mt.__gc = function() while true do end end; \
         local decoded = json.decode('[1]'); return raw",
    );
    let err = adapter.transform_request("{}").unwrap_err();
    let message = err.to_string();
    assert!(
        message.contains("array_gc.lua") && message.contains("__gc"),
        "{message}"
    );
    let adapter = request_adapter("meta.lua", "return raw");
    assert_eq!(
        eval(
            &adapter,
            "local t = setmetatable({}, {__index = function(_, k) return k .. '!' end}); \
             local e = setmetatable({}, json.array_mt); \
             return {t.hi, json.encode(e), getmetatable(e) == json.array_mt}"
        ),
        json!(["hi!", "[]", true])
    );
    // A protected metatable stays protected.
    let err = adapter
        .eval_json(
            "local t = setmetatable({}, {__metatable = 'locked'}); setmetatable(t, {}); return 1",
        )
        .unwrap_err();
    assert!(err.to_string().contains("protected"), "{err}");
}

// --- loading -------------------------------------------------------------

#[test]
fn a_missing_transform_request_fails_at_load() {
    let err = LuaAdapter::from_source(
        "no_request.lua",
        "return { transform_stream_chunk = function(raw) return '' end }",
    )
    .unwrap_err();
    assert_eq!(
        err,
        AdapterError::MissingFunction {
            file: "no_request.lua".into(),
            function: "transform_request",
        }
    );
    let message = err.to_string();
    assert!(message.contains("transform_request") && message.contains("no_request.lua"));
}

#[test]
fn a_script_that_returns_no_table_or_a_non_function_fails_at_load() {
    let err = LuaAdapter::from_source("nothing.lua", "return 42").unwrap_err();
    assert!(err.to_string().contains("must return a table"), "{err}");
    let err = LuaAdapter::from_source(
        "field.lua",
        "return { transform_request = function(r) return r end, build_headers = 'x' }",
    )
    .unwrap_err();
    assert!(
        err.to_string()
            .contains("`build_headers` must be a function, it is a string"),
        "{err}"
    );
    let err = LuaAdapter::from_source("syntax.lua", "return {").unwrap_err();
    assert!(err.to_string().contains("syntax.lua"), "{err}");
}

/// A key the host does not know is a typo until shown otherwise: an adapter
/// whose `transfrom_response` was silently ignored would read every whole
/// body as OpenAI, and nobody would know why.
#[test]
fn an_unknown_key_in_the_adapter_table_fails_at_load_naming_the_closest_key() {
    let err = LuaAdapter::from_source(
        "typo.lua",
        "return { transform_request = function(r) return r end,\n\
         transfrom_response = function(r) return r end }",
    )
    .unwrap_err();
    assert_eq!(
        err,
        AdapterError::UnknownKey {
            file: "typo.lua".into(),
            key: "transfrom_response".into(),
            closest: Some("transform_response"),
        }
    );
    let message = err.to_string();
    for needle in [
        "typo.lua",
        "`transfrom_response`",
        "did you mean `transform_response`?",
        "build_headers",
        "local",
    ] {
        assert!(message.contains(needle), "{needle:?} not in {message}");
    }

    // A helper kept in the table, and a key that is no name at all.
    for (source, key, closest) in [
        (
            "return { transform_request = function(r) return r end, helper = function() end }",
            "helper",
            None,
        ),
        (
            "return { transform_request = function(r) return r end, 'stray' }",
            "1",
            None,
        ),
        (
            "return { transform_request = function(r) return r end, Endpoint = '/v1/x' }",
            "Endpoint",
            Some("endpoint"),
        ),
        // Two letters missing is still a slip; three changed is not.
        (
            "return { transform_request = function(r) return r end, buld_headrs = {} }",
            "buld_headrs",
            Some("build_headers"),
        ),
        (
            "return { transform_request = function(r) return r end, bild_hedrs = {} }",
            "bild_hedrs",
            None,
        ),
    ] {
        let err = LuaAdapter::from_source("extra.lua", source).unwrap_err();
        assert_eq!(
            err,
            AdapterError::UnknownKey {
                file: "extra.lua".into(),
                key: key.into(),
                closest,
            },
            "{source}"
        );
    }

    // The original's descriptive keys load, and must be strings.
    let adapter = LuaAdapter::from_source(
        "described.lua",
        "return { name = 'acme', version = '1.2', transform_request = function(r) return r end }",
    )
    .unwrap();
    assert_eq!(adapter.endpoint(), "/chat/completions");
    let err = LuaAdapter::from_source(
        "described.lua",
        "return { version = 2, transform_request = function(r) return r end }",
    )
    .unwrap_err();
    assert!(
        matches!(&err, AdapterError::Load { detail, .. } if detail == "`version` must be a string, it is an integer"),
        "{err:?}"
    );
}

/// The endpoint is a path on the base URL's host, where the API key goes:
/// one that does not start with `/` ran into the host's name
/// (`https://api.anthropic.com.attacker.example/v1`, or the real host made
/// a user name by `@attacker.example`), and the key went to another host.
#[test]
fn an_endpoint_must_be_a_path() {
    for endpoint in [
        ".attacker.example/v1/messages",
        "@attacker.example/x",
        "v1/messages",
        "/v1\nx",
        "/v1 x",
        "/v1#x",
        "",
    ] {
        let err = LuaAdapter::from_source(
            "ep.lua",
            &format!(
                "return {{ endpoint = {endpoint:?}, transform_request = function(r) return r end }}"
            ),
        )
        .unwrap_err();
        assert!(
            matches!(&err, AdapterError::Load { detail, .. } if detail.contains("`endpoint`") && detail.contains("start with `/`")),
            "{endpoint:?}: {err:?}"
        );
    }
    for endpoint in [
        "/v1/messages",
        "/openai/deployments/gpt/chat/completions",
        "/v1/messages?beta=true",
    ] {
        let adapter = LuaAdapter::from_source(
            "ep.lua",
            &format!(
                "return {{ endpoint = {endpoint:?}, transform_request = function(r) return r end }}"
            ),
        )
        .unwrap();
        assert_eq!(adapter.endpoint(), endpoint);
    }
}

#[test]
fn load_reads_a_file_and_names_it() {
    let dir = std::env::temp_dir().join(format!("homeagent-lua-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("disk.lua");
    std::fs::write(&path, "return { endpoint = '/v2/chat' }").unwrap();
    let err = LuaAdapter::load(&path).unwrap_err();
    assert!(err.to_string().contains("disk.lua"), "{err}");
    std::fs::write(
        &path,
        "return { endpoint = '/v2/chat', transform_request = function(r) return r end }",
    )
    .unwrap();
    let adapter = LuaAdapter::load(&path).unwrap();
    assert_eq!(adapter.endpoint(), "/v2/chat");
    std::fs::remove_dir_all(&dir).unwrap();
}

// --- the strict chunk contract -------------------------------------------

#[test]
fn index_instead_of_stream_index_is_an_error_naming_the_key_and_file() {
    let adapter = chunk_adapter(
        "bad_index.lua",
        r#"json.encode({tool_calls = {{id = "call_1", name = "a", raw_arguments = "{}", index = 1}}})"#,
    );
    let err = decode_stream_body(&strict(adapter), b"data: {}\n\n").unwrap_err();
    let message = err.to_string();
    assert!(message.contains("bad_index.lua"), "{message}");
    assert!(message.contains("unknown field `index`"), "{message}");
}

#[test]
fn a_nested_function_object_is_an_error_naming_function() {
    let adapter = chunk_adapter(
        "nested.lua",
        r#"json.encode({tool_calls = {{id = "call_1", stream_index = 0,
            ["function"] = {name = "a", arguments = "{}"}}}})"#,
    );
    let err = decode_stream_body(&strict(adapter), b"data: {}\n\n").unwrap_err();
    let message = err.to_string();
    assert!(message.contains("nested.lua"), "{message}");
    assert!(message.contains("unknown field `function`"), "{message}");
}

#[test]
fn an_unknown_top_level_key_and_a_missing_stream_index_are_errors() {
    let adapter = chunk_adapter("top_key.lua", r#"json.encode({text = "hi"})"#);
    let err = adapter.transform_stream_chunk("{}").unwrap().unwrap_err();
    assert!(err.to_string().contains("unknown field `text`"), "{err}");
    assert!(err.to_string().contains("top_key.lua"), "{err}");

    let adapter = chunk_adapter(
        "no_index.lua",
        r#"json.encode({tool_calls = {{id = "c", raw_arguments = "{}"}}})"#,
    );
    let err = adapter.transform_stream_chunk("{}").unwrap().unwrap_err();
    assert!(
        err.to_string().contains("missing field `stream_index`"),
        "{err}"
    );
}

#[test]
fn a_chunk_maps_to_events_in_order() {
    let adapter = chunk_adapter(
        "all.lua",
        r#"json.encode({content = "hi", reasoning_content = "hmm", finish_reason = "stop",
            usage = {prompt_tokens = 3, completion_tokens = 4, total_tokens = 7},
            tool_calls = {{id = "c1", type = "function", name = "f", raw_arguments = "{", stream_index = 2}},
            done = true})"#,
    );
    let result = adapter.transform_stream_chunk("{}").unwrap().unwrap();
    assert_eq!(
        result,
        ChunkResult::Events {
            events: vec![
                StreamEvent::ReasoningDelta { text: "hmm".into() },
                StreamEvent::TextDelta { text: "hi".into() },
                StreamEvent::ToolCall(homeagent_core::ToolCallFragment {
                    stream_index: Some(2),
                    id: Some("c1".into()),
                    name: Some("f".into()),
                    raw_arguments: "{".into(),
                }),
                StreamEvent::Usage(homeagent_core::Usage {
                    prompt_tokens: 3,
                    completion_tokens: 4,
                    total_tokens: 7,
                }),
                StreamEvent::Finish {
                    reason: "stop".into()
                },
            ],
            done: true,
        }
    );
    // An empty Lua table for tool_calls encodes as {} and means no calls.
    let adapter = chunk_adapter("empty.lua", r#"json.encode({tool_calls = {}})"#);
    assert_eq!(
        adapter.transform_stream_chunk("{}").unwrap().unwrap(),
        ChunkResult::Events {
            events: vec![],
            done: false
        }
    );
}

#[test]
fn an_empty_string_falls_back_to_the_openai_decoder_only_when_allowed() {
    let body = b"data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"native\"}}]}\n\ndata: [DONE]\n\n";
    let codec = LuaCodec::new(Arc::new(chunk_adapter("passthrough.lua", "''")));
    assert_eq!(
        decode_stream_body(&codec, body).unwrap(),
        [StreamEvent::TextDelta {
            text: "native".into()
        }]
    );
    let err = decode_stream_body(&codec.with_fallback(false), body).unwrap_err();
    let message = err.to_string();
    assert!(
        message.contains("passthrough.lua") && message.contains("fallback"),
        "{message}"
    );
}

/// The frames the fallback decoder skipped (not JSON) are the Lua
/// decoder's count; without a fallback nothing is skipped.
#[test]
fn frames_the_fallback_skips_are_counted() {
    let codec = LuaCodec::new(Arc::new(chunk_adapter("passthrough.lua", "''")));
    let mut decoder = codec.stream_decoder();
    let mut out = Vec::new();
    for data in ["a proxy's banner", r#"{"choices":[]}"#, "another"] {
        let frame = homeagent_llm::codec::Frame {
            event: None,
            data: data.to_owned(),
        };
        decoder.decode(&frame, &mut out).unwrap();
    }
    assert_eq!(decoder.skipped_frames(), 2);
    let strict_decoder = strict(chunk_adapter("passthrough.lua", "''")).stream_decoder();
    assert_eq!(strict_decoder.skipped_frames(), 0);
}

#[test]
fn a_non_string_or_non_json_output_is_an_error() {
    let adapter = chunk_adapter("number.lua", "42");
    let err = adapter.transform_stream_chunk("{}").unwrap().unwrap_err();
    assert!(err.to_string().contains("expected a JSON string"), "{err}");
    let adapter = chunk_adapter("garbage.lua", "'not json'");
    let err = adapter.transform_stream_chunk("{}").unwrap().unwrap_err();
    assert!(err.to_string().contains("not JSON"), "{err}");
}

// --- helpers ---------------------------------------------------------------

/// `json.encode` works outside the Lua heap and its instruction count, so
/// it has a size budget of its own: one shared string repeated, or a table
/// holding itself twice at every level (2^n nodes), is an error, not
/// gigabytes of memory or an endless encode.
#[test]
fn json_encode_has_a_size_budget_for_shared_values() {
    let adapter = request_adapter("big.lua", "return raw");
    for (what, code) in [
        (
            "a repeated string",
            "local s = string.rep('x', 1000000); local t = {}; \
             for i = 1, 100 do t[i] = s end; return json.encode(t)",
        ),
        (
            "a doubling table",
            "local t = {'x'}; for i = 1, 60 do t = {t, t} end; return json.encode(t)",
        ),
    ] {
        let err = adapter.eval_json(code).unwrap_err();
        let message = err.to_string();
        assert!(
            message.contains("json.encode") && message.contains("too large"),
            "{what}: {message}"
        );
    }
    // Half the budget encodes.
    assert_eq!(
        eval(
            &adapter,
            "local s = string.rep('x', 1000000); local t = {}; \
             for i = 1, 30 do t[i] = s end; return #json.encode(t)"
        ),
        json!(30 * 1_000_002 + 29 + 2)
    );
}

#[test]
fn json_helpers_round_trip_and_report_bad_input() {
    let adapter = request_adapter("json.lua", "return raw");
    assert_eq!(
        eval(
            &adapter,
            r#"local v = json.decode('{"a":[1,2.5,"x",true],"b":{"c":null},"e":[],"f":{}}')
               return {v.a[1], v.a[2], v.a[3], v.a[4], v.b.c == nil, json.encode(v.e), json.encode(v.f)}"#
        ),
        json!([1, 2.5, "x", true, true, "[]", "{}"])
    );
    assert_eq!(
        eval(
            &adapter,
            r#"local v, err = json.decode('{"a":') return {v == nil, type(err), string.find(err, "invalid JSON") ~= nil}"#
        ),
        json!([true, "string", true])
    );
    assert_eq!(
        eval(&adapter, r#"return json.encode({1, 2, json.null})"#),
        json!("[1,2,null]")
    );
    assert_eq!(
        eval(
            &adapter,
            r#"return json.encode(setmetatable({}, json.array_mt))"#
        ),
        json!("[]")
    );
    let err = adapter
        .eval_json("return json.encode({f = function() end})")
        .unwrap_err();
    assert!(
        err.to_string().contains("cannot encode a function"),
        "{err}"
    );
    let err = adapter
        .eval_json("local t = {} t.t = t return json.encode(t)")
        .unwrap_err();
    assert!(err.to_string().contains("nested deeper"), "{err}");
    // Integral floats are written as integers (a computed `stream_index`
    // still reads as one), up to 9e15, where a float stops holding every
    // integer exactly; past it they stay floats.
    let numbers = eval(
        &adapter,
        "return {json.encode(2^3), json.encode(-4/2), json.encode(8999999999999999.0), \
         json.encode(9e15), json.encode(0.5)}",
    );
    let written: Vec<&str> = numbers
        .as_array()
        .unwrap()
        .iter()
        .map(|n| n.as_str().unwrap())
        .collect();
    assert_eq!(written[..3], ["8", "-2", "8999999999999999"]);
    assert_ne!(written[3], "9000000000000000", "9e15 stays a float");
    assert_eq!(written[3].parse::<f64>().unwrap(), 9e15);
    assert_eq!(written[4], "0.5");
    // The bound is exact, for lists and objects alike: a value under 128
    // tables encodes, under 129 it does not.
    for (wrap, opening) in [("{t}", "["), ("{k = t}", "{\"k\":")] {
        let nested = |levels: usize| {
            adapter.eval_json(&format!(
                "local t = 1 for _ = 1, {levels} do t = {wrap} end return json.encode(t)"
            ))
        };
        let encoded = nested(128).unwrap();
        assert!(
            encoded
                .as_str()
                .is_some_and(|text| text.starts_with(&opening.repeat(128))),
            "{encoded}"
        );
        let err = nested(129).unwrap_err();
        assert!(err.to_string().contains("nested deeper than 128"), "{err}");
    }
}

#[test]
fn hash_and_encoding_helpers_give_the_standard_answers() {
    let adapter = request_adapter("crypto.lua", "return raw");
    // FIPS 180-2 "abc"; RFC 4231 test case 1; RFC 4648 examples.
    assert_eq!(
        eval(
            &adapter,
            r#"return {sha256_hex("abc"), sha256_hex(""),
                hmac_sha256_hex(string.rep("\11", 20), "Hi There"),
                base64_encode("foobar"), base64_encode("fo"), base64_encode("")}"#
        ),
        json!([
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad",
            "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
            "b0344c61d8db38535ca8afceaf0bf12b881dc200c9833da726e9376c2e32cff7",
            "Zm9vYmFy",
            "Zm8=",
            ""
        ])
    );
    // log goes to tracing and returns nothing.
    assert_eq!(
        eval(&adapter, r#"return log("info", "hello")"#),
        json!(null)
    );
}

// --- the bundled adapters, by themselves ---------------------------------

/// An OpenAI chunk with one delta.
fn delta(delta: &str) -> String {
    format!(
        r#"{{"id":"chatcmpl-1","object":"chat.completion.chunk","created":1,"model":"m","choices":[{{"index":0,"delta":{delta},"finish_reason":null}}]}}"#
    )
}

fn sse(chunks: &[String]) -> Vec<u8> {
    let mut body = String::new();
    for chunk in chunks {
        body.push_str("data: ");
        body.push_str(chunk);
        body.push_str("\n\n");
    }
    body.into_bytes()
}

#[test]
fn openai_lua_assembles_two_interleaved_parallel_calls_by_itself() {
    let body = sse(&[
        delta(r#"{"role":"assistant","content":""}"#),
        delta(r#"{"content":"Checking both."}"#),
        delta(
            r#"{"tool_calls":[{"index":0,"id":"call_A","type":"function","function":{"name":"light_set","arguments":""}}]}"#,
        ),
        delta(r#"{"tool_calls":[{"index":0,"function":{"arguments":"{\"entity\": \"li"}}]}"#),
        delta(
            r#"{"tool_calls":[{"index":1,"id":"call_B","type":"function","function":{"name":"sensor_read","arguments":"{\"entity\""}}]}"#,
        ),
        delta(r#"{"tool_calls":[{"index":0,"function":{"arguments":"ght.kitchen\", \"on\": true}"}}]}"#),
        delta(r#"{"tool_calls":[{"index":1,"function":{"arguments":": \"sensor.hallway\"}"}}]}"#),
        r#"{"id":"chatcmpl-1","choices":[{"index":0,"delta":{},"finish_reason":"tool_calls"}]}"#.to_owned(),
        r#"{"id":"chatcmpl-1","choices":[],"usage":{"prompt_tokens":82,"completion_tokens":41,"total_tokens":123}}"#.to_owned(),
        "[DONE]".to_owned(),
        // After [DONE]: never read.
        delta(r#"{"content":" IGNORED"}"#),
    ]);
    let codec = strict(bundled("openai"));
    let turn = assemble(decode_stream_body(&codec, &body).unwrap());
    assert_eq!(turn.text, "Checking both.");
    assert_eq!(
        calls(&turn),
        [
            call(
                "call_A",
                "light_set",
                json!({"entity": "light.kitchen", "on": true}),
                r#"{"entity": "light.kitchen", "on": true}"#
            ),
            call(
                "call_B",
                "sensor_read",
                json!({"entity": "sensor.hallway"}),
                r#"{"entity": "sensor.hallway"}"#
            ),
        ]
    );
    assert_eq!(turn.finish_reason, Some(FinishReason::ToolCalls));
    assert_eq!(turn.usage.total_tokens, 123);
    assert!(turn.diagnostics.is_empty(), "{:?}", turn.diagnostics);
}

#[test]
fn openai_lua_text_only_and_done() {
    let body = sse(&[
        delta(r#"{"role":"assistant","content":"Hello"}"#),
        delta(r#"{"content":", world"}"#),
        r#"{"id":"c","choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}"#.to_owned(),
        "[DONE]".to_owned(),
        delta(r#"{"content":"!!"}"#),
    ]);
    let turn = assemble(decode_stream_body(&strict(bundled("openai")), &body).unwrap());
    assert_eq!(turn.text, "Hello, world");
    assert!(turn.calls.is_empty());
    assert_eq!(turn.finish_reason, Some(FinishReason::Stop));
}

#[test]
fn openai_lua_matches_the_native_codec_on_a_whole_response() {
    let body = json!({
        "id": "x", "object": "chat.completion",
        "choices": [{"index": 0, "finish_reason": "tool_calls", "message": {
            "role": "assistant", "content": null,
            "tool_calls": [
                {"id": "c0", "type": "function", "function": {"name": "a", "arguments": "{\"x\":1}"}},
                {"id": "c1", "type": "function", "function": {"name": "b", "arguments": "{}"}}
            ]}}],
        "usage": {"prompt_tokens": 5, "completion_tokens": 6, "total_tokens": 11}
    })
    .to_string();
    let lua = assemble(
        strict(bundled("openai"))
            .decode_response(body.as_bytes())
            .unwrap(),
    );
    let native = assemble(
        homeagent_llm::codec::openai::OpenAiCodec
            .decode_response(body.as_bytes())
            .unwrap(),
    );
    assert_eq!(calls(&lua), calls(&native));
    assert_eq!(lua.calls.len(), 2);
    assert_eq!(lua.usage, native.usage);
    assert_eq!(lua.finish_reason, native.finish_reason);
}

fn chat_request() -> ChatRequest {
    ChatRequest {
        model: "m".into(),
        messages: vec![Message::system("be brief"), Message::user("hi")],
        tools: vec![ToolSpec::new(
            "light_set",
            "Set a light",
            &json!({"type": "object", "properties": {}, "required": []}),
        )],
        max_tokens: 100,
        temperature: None,
        stream: true,
        rendered: Default::default(),
    }
}

#[test]
fn openai_lua_builds_the_native_request() {
    let endpoint = Endpoint {
        base_url: "http://localhost:9099/v1/".into(),
        api_key: Some("sk-test".into()),
    };
    let lua = strict(bundled("openai"))
        .build_request(&endpoint, &chat_request())
        .unwrap();
    let native = homeagent_llm::codec::openai::OpenAiCodec
        .build_request(&endpoint, &chat_request())
        .unwrap();
    assert_eq!(lua.url, "http://localhost:9099/v1/chat/completions");
    assert_eq!(lua.url, native.url);
    assert_eq!(lua.body_json().unwrap(), native.body_json().unwrap());
    let mut lua_headers = lua.headers.clone();
    let mut native_headers = native.headers.clone();
    lua_headers.sort();
    native_headers.sort();
    assert_eq!(lua_headers, native_headers);
}

/// A base URL with a query (an Azure deployment's `?api-version=`) keeps
/// it at the end: the adapter's endpoint goes into the path, before the
/// query (it was appended after it, `?api-version=...//chat/completions`).
#[test]
fn the_endpoint_goes_before_the_base_urls_query() {
    let endpoint = Endpoint {
        base_url: "https://res.example.net/openai/deployments/gpt4o/?api-version=2024-10-21".into(),
        api_key: None,
    };
    let wire = strict(bundled("openai"))
        .build_request(&endpoint, &chat_request())
        .unwrap();
    assert_eq!(
        wire.url,
        "https://res.example.net/openai/deployments/gpt4o/chat/completions?api-version=2024-10-21"
    );
}

/// The Anthropic docs' tool-use stream with a second call (the same
/// transcript as the native codec's test).
const ANTHROPIC_TWO_CALLS: &str = r#"event: message_start
data: {"type":"message_start","message":{"id":"msg_1","type":"message","role":"assistant","model":"claude-sonnet-4-5","stop_sequence":null,"usage":{"input_tokens":472,"output_tokens":2},"content":[],"stop_reason":null}}

event: content_block_start
data: {"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}

event: ping
data: {"type": "ping"}

event: content_block_delta
data: {"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"Okay"}}

event: content_block_delta
data: {"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":", let's check the weather and the time:"}}

event: content_block_stop
data: {"type":"content_block_stop","index":0}

event: content_block_start
data: {"type":"content_block_start","index":1,"content_block":{"type":"tool_use","id":"toolu_01T1x1fJ34qAmk2tNTrN7Up6","name":"get_weather","input":{}}}

event: content_block_delta
data: {"type":"content_block_delta","index":1,"delta":{"type":"input_json_delta","partial_json":""}}

event: content_block_delta
data: {"type":"content_block_delta","index":1,"delta":{"type":"input_json_delta","partial_json":"{\"location\":"}}

event: content_block_start
data: {"type":"content_block_start","index":2,"content_block":{"type":"tool_use","id":"toolu_01VZ8SpSMqHg1b4zQWRkTjy9","name":"get_time","input":{}}}

event: content_block_delta
data: {"type":"content_block_delta","index":1,"delta":{"type":"input_json_delta","partial_json":" \"San Francisco, CA\""}}

event: content_block_delta
data: {"type":"content_block_delta","index":2,"delta":{"type":"input_json_delta","partial_json":"{\"timezone\": "}}

event: content_block_delta
data: {"type":"content_block_delta","index":1,"delta":{"type":"input_json_delta","partial_json":", \"unit\": \"fahrenheit\"}"}}

event: content_block_delta
data: {"type":"content_block_delta","index":2,"delta":{"type":"input_json_delta","partial_json":"\"America/Los_Angeles\"}"}}

event: content_block_stop
data: {"type":"content_block_stop","index":1}

event: content_block_stop
data: {"type":"content_block_stop","index":2}

event: message_delta
data: {"type":"message_delta","delta":{"stop_reason":"tool_use","stop_sequence":null},"usage":{"output_tokens":89}}

event: message_stop
data: {"type":"message_stop"}

event: content_block_delta
data: {"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":" AFTER STOP"}}

"#;

#[test]
fn anthropic_lua_assembles_two_interleaved_calls_by_itself() {
    let events = decode_stream_body(
        &strict(bundled("anthropic")),
        ANTHROPIC_TWO_CALLS.as_bytes(),
    )
    .unwrap();
    let native = decode_stream_body(
        &homeagent_llm::codec::anthropic::AnthropicCodec,
        ANTHROPIC_TWO_CALLS.as_bytes(),
    )
    .unwrap();
    let turn = assemble(events);
    assert_eq!(turn.text, "Okay, let's check the weather and the time:");
    assert_eq!(
        calls(&turn),
        [
            call(
                "toolu_01T1x1fJ34qAmk2tNTrN7Up6",
                "get_weather",
                json!({"location": "San Francisco, CA", "unit": "fahrenheit"}),
                r#"{"location": "San Francisco, CA", "unit": "fahrenheit"}"#
            ),
            call(
                "toolu_01VZ8SpSMqHg1b4zQWRkTjy9",
                "get_time",
                json!({"timezone": "America/Los_Angeles"}),
                r#"{"timezone": "America/Los_Angeles"}"#
            ),
        ]
    );
    assert_eq!(turn.finish_reason, Some(FinishReason::ToolCalls));
    assert_eq!(turn.usage.prompt_tokens, 472);
    assert_eq!(turn.usage.completion_tokens, 89);
    let native = assemble(native);
    assert_eq!(calls(&turn), calls(&native));
    assert_eq!(turn.text, native.text);
    assert_eq!(turn.usage, native.usage);
}

/// A whole response cut at a limit: the adapter leaves an empty input
/// blank, as the native codec does, so the call is truncated, not run with
/// `{}`; a message that ended on its own runs it with `{}` on both.
#[test]
fn anthropic_lua_whole_response_keeps_a_cut_call_unrunnable() {
    for (reason, cut) in [
        ("max_tokens", true),
        ("model_context_window_exceeded", true),
        ("tool_use", false),
    ] {
        let body = format!(
            r#"{{"id":"m","type":"message","role":"assistant","content":[{{"type":"tool_use","id":"toolu_1","name":"rm","input":{{}}}}],"stop_reason":"{reason}"}}"#
        );
        let lua = assemble(
            strict(bundled("anthropic"))
                .decode_response(body.as_bytes())
                .unwrap(),
        );
        let native = assemble(
            homeagent_llm::codec::anthropic::AnthropicCodec
                .decode_response(body.as_bytes())
                .unwrap(),
        );
        for (who, turn) in [("lua", &lua), ("native", &native)] {
            let error = turn.calls[0].argument_error.as_ref().map(|e| e.reason);
            let expected = cut.then_some(homeagent_core::ErrorReason::Truncated);
            assert_eq!(error, expected, "{who} {reason}: {:?}", turn.calls[0]);
        }
    }
}

/// Streamed text keeps its whitespace-only pieces: a paragraph break sent
/// on its own is part of the reply (the rule against whitespace-only text
/// is for the blocks of a request). The native codec is the reference.
#[test]
fn anthropic_lua_keeps_whitespace_only_text_deltas() {
    let transcript = r#"event: content_block_start
data: {"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}

event: content_block_delta
data: {"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"Step one."}}

event: content_block_delta
data: {"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"\n\n"}}

event: content_block_delta
data: {"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"Step two."}}

event: content_block_stop
data: {"type":"content_block_stop","index":0}

event: message_delta
data: {"type":"message_delta","delta":{"stop_reason":"end_turn","stop_sequence":null},"usage":{"output_tokens":9}}

event: message_stop
data: {"type":"message_stop"}

"#;
    let events = decode_stream_body(&strict(bundled("anthropic")), transcript.as_bytes()).unwrap();
    let native = decode_stream_body(
        &homeagent_llm::codec::anthropic::AnthropicCodec,
        transcript.as_bytes(),
    )
    .unwrap();
    assert_eq!(assemble(events).text, "Step one.\n\nStep two.");
    assert_eq!(assemble(native).text, "Step one.\n\nStep two.");
}

#[test]
fn anthropic_lua_builds_a_messages_request() {
    let endpoint = Endpoint {
        base_url: "https://api.anthropic.com".into(),
        api_key: Some("sk-ant".into()),
    };
    let request = strict(bundled("anthropic"))
        .build_request(&endpoint, &chat_request())
        .unwrap();
    assert_eq!(request.url, "https://api.anthropic.com/v1/messages");
    let mut headers = request.headers.clone();
    headers.sort();
    assert_eq!(
        headers,
        [
            ("anthropic-version".to_owned(), "2023-06-01".to_owned()),
            ("content-type".to_owned(), "application/json".to_owned()),
            ("x-api-key".to_owned(), "sk-ant".to_owned()),
        ]
    );
    assert_eq!(
        request.body_json().unwrap(),
        json!({
            "model": "m",
            "max_tokens": 100,
            "stream": true,
            "system": "be brief",
            "messages": [{"role": "user", "content": [{"type": "text", "text": "hi"}]}],
            "tools": [{
                "name": "light_set",
                "description": "Set a light",
                "input_schema": {"type": "object", "properties": {}, "required": []}
            }]
        })
    );
}

/// As the native codec: no text block without non-whitespace text.
#[test]
fn anthropic_lua_sends_no_whitespace_only_text_blocks() {
    let endpoint = Endpoint {
        base_url: "https://api.anthropic.com".into(),
        api_key: None,
    };
    let mut request = chat_request();
    request.messages = vec![
        Message::user("turn the light on"),
        Message::Assistant(homeagent_core::AssistantMessage {
            content: "\n\n".into(),
            reasoning: vec![],
            tool_calls: vec![call("toolu_1", "light_set", json!({}), "{}")],
        }),
        Message::Tool(homeagent_core::ToolMessage {
            tool_call_id: "toolu_1".into(),
            name: "light_set".into(),
            content: "on".into(),
            success: true,
        }),
        Message::user(" "),
        Message::user("thanks"),
    ];
    let wire = strict(bundled("anthropic"))
        .build_request(&endpoint, &request)
        .unwrap();
    assert_eq!(
        wire.body_json().unwrap()["messages"],
        json!([
            {"role": "user", "content": [{"type": "text", "text": "turn the light on"}]},
            {"role": "assistant", "content": [
                {"type": "tool_use", "id": "toolu_1", "name": "light_set", "input": {}},
            ]},
            {"role": "user", "content": [
                {"type": "tool_result", "tool_use_id": "toolu_1", "content": "on"},
                {"type": "text", "text": "thanks"},
            ]},
        ])
    );
}

/// As the native codec: call ids in the form Anthropic accepts, alike on
/// the call and its result.
#[test]
fn anthropic_lua_sends_call_ids_anthropic_accepts() {
    let endpoint = Endpoint {
        base_url: "https://api.anthropic.com".into(),
        api_key: None,
    };
    let mut request = chat_request();
    request.messages = vec![
        Message::user("list"),
        Message::Assistant(homeagent_core::AssistantMessage {
            content: String::new(),
            reasoning: vec![],
            tool_calls: vec![call("functions.ls:0", "ls", json!({}), "{}")],
        }),
        Message::Tool(homeagent_core::ToolMessage {
            tool_call_id: "functions.ls:0".into(),
            name: "ls".into(),
            content: "a".into(),
            success: true,
        }),
    ];
    let body = strict(bundled("anthropic"))
        .build_request(&endpoint, &request)
        .unwrap()
        .body_json()
        .unwrap();
    assert_eq!(body["messages"][1]["content"][0]["id"], "functions_ls_0");
    assert_eq!(
        body["messages"][2]["content"][0]["tool_use_id"],
        "functions_ls_0"
    );
}

/// A history that opens with the assistant, and ids that map onto each
/// other (`a.b`, `a:b` and `a_b` are all `a_b` in Anthropic's alphabet):
/// the adapter sends what the native codec sends, an opening user note
/// and one distinct id per call, alike on each call and its result.
#[test]
fn anthropic_lua_matches_the_native_codec_on_greetings_and_colliding_ids() {
    let endpoint = Endpoint {
        base_url: "https://api.anthropic.com".into(),
        api_key: None,
    };
    let ids = ["a.b", "a:b", "a_b"];
    let mut request = chat_request();
    request.messages = vec![
        Message::Assistant(homeagent_core::AssistantMessage {
            content: "Ahoy! What can I do for ye?".into(),
            ..Default::default()
        }),
        Message::user("list three ways"),
        Message::Assistant(homeagent_core::AssistantMessage {
            content: String::new(),
            reasoning: vec![],
            tool_calls: ids
                .iter()
                .map(|id| call(id, "ls", json!({}), "{}"))
                .collect(),
        }),
    ];
    for id in ids {
        request
            .messages
            .push(Message::Tool(homeagent_core::ToolMessage {
                tool_call_id: id.into(),
                name: "ls".into(),
                content: format!("from {id}"),
                success: true,
            }));
    }
    let lua = strict(bundled("anthropic"))
        .build_request(&endpoint, &request)
        .unwrap()
        .body_json()
        .unwrap();
    let native = homeagent_llm::codec::anthropic::AnthropicCodec
        .build_request(&endpoint, &request)
        .unwrap()
        .body_json()
        .unwrap();
    assert_eq!(lua["messages"], native["messages"]);
    assert_eq!(
        lua["messages"][0]["content"][0]["text"],
        homeagent_llm::codec::OPENING_NOTE
    );
    let sent: std::collections::BTreeSet<&str> = lua["messages"][3]["content"]
        .as_array()
        .unwrap()
        .iter()
        .map(|block| block["id"].as_str().unwrap())
        .collect();
    assert_eq!(sent.len(), 3, "{lua}");
}

#[test]
fn transform_error_gives_the_providers_message() {
    let codec = strict(bundled("anthropic"));
    assert_eq!(
        codec.error_message(
            529,
            br#"{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}"#
        ),
        "HTTP 529: Overloaded"
    );
    let codec = strict(bundled("openai"));
    assert_eq!(
        codec.error_message(401, br#"{"error":{"message":"Incorrect API key"}}"#),
        "HTTP 401: Incorrect API key"
    );
}

/// An adapter reports an error the provider sent inside a stream (or a
/// whole response) with `error`, as the provider sent it: the host tells a
/// passing one (an overload, a rate limit) from the request's fault, so
/// the first is retried and falls back like the HTTP status it stands for.
/// It used to be `error()`, a malformed response, never retried.
#[test]
fn an_adapter_reports_a_providers_error_and_the_host_classifies_it() {
    let transient = |codec: &LuaCodec, body: &[u8]| match decode_stream_body(codec, body) {
        Err(homeagent_llm::CodecError::ProviderReported {
            message, transient, ..
        }) => (message, transient),
        other => panic!("expected a provider report, got {other:?}"),
    };
    let overloaded = chunk_adapter(
        "report.lua",
        r#"json.encode({error = {type = "overloaded_error", message = "Overloaded"}})"#,
    );
    assert_eq!(
        transient(&strict(overloaded), b"data: {}\n\n"),
        ("Overloaded".to_owned(), true)
    );
    let invalid = chunk_adapter(
        "report.lua",
        r#"json.encode({error = {type = "invalid_request_error", message = "bad"}})"#,
    );
    assert_eq!(
        transient(&strict(invalid), b"data: {}\n\n"),
        ("bad".to_owned(), false)
    );
    // The bundled adapters report that way: Anthropic's overload after a
    // 200, OpenRouter's mid-stream error through openai.lua.
    let anthropic = strict(bundled("anthropic"));
    let (message, retry) = transient(
        &anthropic,
        b"event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"id\":\"m\",\"usage\":{\"input_tokens\":1,\"output_tokens\":0}}}\n\n\
          event: error\ndata: {\"type\":\"error\",\"error\":{\"type\":\"overloaded_error\",\"message\":\"Overloaded\"}}\n\n",
    );
    assert!(retry && message.contains("Overloaded"), "{message}");
    let openai = strict(bundled("openai"));
    let (message, retry) = transient(
        &openai,
        b"data: {\"error\":{\"code\":502,\"message\":\"upstream failed\"}}\n\n",
    );
    assert!(retry && message.contains("upstream failed"), "{message}");
}

/// Without an `authorization` header of its own an adapter's request
/// carries the key as a bearer token; an adapter that sets the header
/// (even to "", which is then not sent) keeps its own scheme; no key or an
/// empty one sends none.
#[test]
fn the_bearer_key_is_added_unless_the_adapter_sets_authorization() {
    let authorization = |adapter: LuaAdapter, api_key: Option<&str>| {
        let endpoint = Endpoint {
            base_url: "http://localhost:9099/v1/".into(),
            api_key: api_key.map(str::to_owned),
        };
        let request = strict(adapter)
            .build_request(&endpoint, &chat_request())
            .unwrap();
        let found: Vec<String> = request
            .headers
            .iter()
            .filter(|(name, _)| name == "authorization")
            .map(|(_, value)| value.clone())
            .collect();
        assert!(
            request.headers.iter().all(|(_, value)| !value.is_empty()),
            "{:?}",
            request.headers
        );
        found
    };
    let plain = || request_adapter("plain.lua", "return raw");
    let with_headers = |headers: &str| {
        adapter(
            "own.lua",
            &format!(
                "return {{ transform_request = function(raw) return raw end, headers = {headers} }}"
            ),
        )
    };
    assert_eq!(authorization(plain(), Some("sk-1")), ["Bearer sk-1"]);
    assert!(authorization(plain(), Some("")).is_empty());
    assert!(authorization(plain(), None).is_empty());
    // Other headers of the adapter's own do not count as setting it.
    assert_eq!(
        authorization(with_headers("{ [\"x-extra\"] = \"1\" }"), Some("sk-1")),
        ["Bearer sk-1"]
    );
    assert_eq!(
        authorization(
            with_headers("{ Authorization = \"Token t\" }"),
            Some("sk-1")
        ),
        ["Token t"]
    );
    assert!(authorization(with_headers("{ authorization = \"\" }"), Some("sk-1")).is_empty());
}

/// `transform_error`'s reason, trimmed, when it gives one; the standard
/// OpenAI reading of the body when it gives a blank one or fails.
#[test]
fn transform_error_falls_back_on_a_blank_reason_or_a_failure() {
    let body = br#"{"error":{"message":"Incorrect API key"}}"#;
    let with = |function_body: &str| {
        strict(adapter(
            "err.lua",
            &format!(
                "return {{ transform_request = function(raw) return raw end,\n\
                 transform_error = function(status, body) {function_body} end }}"
            ),
        ))
        .error_message(401, body)
    };
    let standard = homeagent_llm::codec::openai::OpenAiCodec.error_message(401, body);
    assert_eq!(standard, "HTTP 401: Incorrect API key");
    assert_eq!(with("return '  key refused \\n'"), "HTTP 401: key refused");
    assert_eq!(with("return '  '"), standard);
    assert_eq!(with("error('broken')"), standard);
}
