#![allow(clippy::unwrap_used, clippy::expect_used)] // a panic in a test is a test failure

//! `adapter check`: good adapters pass, the classic mistakes are named.

use homeagent_llm::LuaAdapter;
use homeagent_llm::lua::bundled_source;
use homeagent_llm::lua::check::{CheckWire, check_adapter};

const STREAM_INDEX_LINE: &str = "stream_index = call.index or (position - 1),";

fn openai_variant(file: &str, replacement: &str) -> LuaAdapter {
    let source = bundled_source("openai").unwrap();
    assert!(
        source.contains(STREAM_INDEX_LINE),
        "the bundled adapter changed"
    );
    LuaAdapter::from_source(file, &source.replace(STREAM_INDEX_LINE, replacement)).unwrap()
}

#[test]
fn the_bundled_adapters_pass_their_own_check() {
    let openai = check_adapter(
        LuaAdapter::bundled("openai").unwrap().unwrap(),
        CheckWire::Openai,
    );
    assert!(openai.passed(), "{openai:?}");
    let anthropic = check_adapter(
        LuaAdapter::bundled("anthropic").unwrap().unwrap(),
        CheckWire::Anthropic,
    );
    assert!(anthropic.passed(), "{anthropic:?}");
    assert_eq!(anthropic.outcomes.len(), 2);
}

#[test]
fn an_adapter_that_drops_the_position_is_told_to_pass_stream_index() {
    let report = check_adapter(
        openai_variant("slot0.lua", "stream_index = 0,"),
        CheckWire::Openai,
    );
    assert!(!report.passed());
    let problem = report.outcomes[0].problem.as_deref().unwrap();
    // The ids still tell the calls apart, so the continuation pieces land in
    // the wrong call and its arguments are cut.
    assert!(
        problem.contains("unusable arguments") && problem.contains("`stream_index`"),
        "{problem}"
    );
    // Text does not depend on positions.
    assert_eq!(report.outcomes[1].problem, None);
}

#[test]
fn an_adapter_that_says_index_is_told_the_key_and_file() {
    let report = check_adapter(
        openai_variant("wrong_key.lua", "index = call.index or (position - 1),"),
        CheckWire::Openai,
    );
    let problem = report.outcomes[0].problem.as_deref().unwrap();
    assert!(
        problem.contains("wrong_key.lua") && problem.contains("`index`")
            || problem.contains("'index'"),
        "{problem}"
    );
    assert!(problem.contains("wrong_key.lua"), "{problem}");
}

#[test]
fn an_adapter_that_leaves_chunks_to_the_standard_parser_fails_the_check() {
    // Returning "" hands every chunk to the built-in OpenAI parser; the
    // check switches that fallback off, so such an adapter proves nothing.
    let source = r#"
        return {
            transform_request = function(json) return json end,
            transform_stream_chunk = function(chunk) return "" end,
        }
    "#;
    let report = check_adapter(
        LuaAdapter::from_source("lazy.lua", source).unwrap(),
        CheckWire::Openai,
    );
    assert!(
        report.outcomes.iter().all(|o| o.problem.is_some()),
        "{report:?}"
    );
}

/// Each classic mistake, made in a copy of the bundled OpenAI adapter, is
/// named by the check that catches it, and only by that one.
#[test]
fn each_mistake_is_named_by_its_own_check() {
    let source = bundled_source("openai").unwrap();
    let variant = |from: &str, to: &str| {
        assert!(source.contains(from), "the bundled adapter changed: {from}");
        LuaAdapter::from_source("mistake.lua", &source.replace(from, to)).unwrap()
    };
    const NAME: &str = "          name = text(fn.name),";
    let cases = [
        (
            // The second call's name dropped: its pieces join the first.
            variant(
                NAME,
                "          name = (text(fn.name) == 'files_read') and text(fn.name) or nil,",
            ),
            0,
            "expected 2 calls, got 1 — the two calls were merged into one: does the adapter \
             pass each call's position through as `stream_index`?",
        ),
        (
            variant("          id = text(call.id),\n", "          id = nil,\n"),
            0,
            "call files_read lost its id call_check_a (came out as call_0)",
        ),
        (
            variant(NAME, "          name = text(fn.name) and 'other',"),
            0,
            "call call_check_a came out as other {\"path\":\"/etc/hostname\"} — expected \
             files_read {\"path\":\"/etc/hostname\"}",
        ),
        (
            variant(
                "          raw_arguments = arguments(fn.arguments),",
                "          raw_arguments = arguments(fn.arguments) and \
                 arguments(fn.arguments):gsub('5', '6'),",
            ),
            0,
            "call call_check_b came out as cmd_run {\"command\":\"uptime\",\"timeout\":\"6s\"} \
             — expected cmd_run {\"command\":\"uptime\",\"timeout\":\"5s\"}",
        ),
        (
            variant(
                "      out.content = (out.content or \"\") .. (text(delta.content) or \"\")",
                "      out.content = (out.content or \"\") .. (text(delta.content) or \"\") .. \"!\"",
            ),
            1,
            "expected the text \"Hello from the adapter check.\" and no calls, got \"Hello \
             from! the adapter check.!!\" and 0 call(s)",
        ),
        (
            // The right text, and a call no chunk held.
            variant(
                "  out.usage = usage(chunk.usage)",
                "  if out.content ~= '' and not out.tool_calls then out.tool_calls = {{ id = \
                 'x', name = 'files_read', raw_arguments = '{}', stream_index = 0 }} end\n  \
                 out.usage = usage(chunk.usage)",
            ),
            1,
            "expected the text \"Hello from the adapter check.\" and no calls, got \"Hello \
             from the adapter check.\" and 1 call(s)",
        ),
    ];
    for (adapter, failing, problem) in cases {
        let report = check_adapter(adapter, CheckWire::Openai);
        assert!(!report.passed(), "{problem}");
        assert_eq!(report.outcomes[failing].problem.as_deref(), Some(problem));
        assert_eq!(report.outcomes[1 - failing].problem, None, "{problem}");
    }
}
