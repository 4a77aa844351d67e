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
