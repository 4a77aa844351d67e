//! The request checks, field by field, without a server.

#![allow(clippy::unwrap_used, clippy::expect_used)] // a panic in a test is a test failure

use serde_json::{Value, json};

use super::parse;

/// `extra`'s fields added to a minimal valid request.
fn request(extra: Value) -> Value {
    let mut body = json!({"model": "homeagent", "messages": [{"role": "user", "content": "hi"}]});
    for (key, value) in extra.as_object().unwrap() {
        body[key] = value.clone();
    }
    body
}

/// The error code and message of a refused request.
fn refusal(extra: Value) -> (String, String) {
    let error = parse(request(extra.clone())).expect_err(&extra.to_string());
    (error.code.to_owned(), error.message)
}

#[test]
fn n_is_one_or_absent() {
    for accepted in [json!({"n": 1}), json!({"n": null}), json!({})] {
        assert!(parse(request(accepted.clone())).is_ok(), "{accepted}");
    }
    for (n, shown) in [
        (json!(2), "2"),
        (json!(0), "0"),
        (json!("2"), "\"2\""),
        (json!(1.5), "1.5"),
        (json!(-1), "-1"),
    ] {
        let (code, message) = refusal(json!({ "n": n }));
        assert_eq!(code, "unsupported_parameter", "{n}");
        assert!(
            message.starts_with(&format!("`n` is {shown}:")),
            "{message}"
        );
    }
}

#[test]
fn logprobs_may_only_be_off() {
    for accepted in [json!({"logprobs": false}), json!({"logprobs": null})] {
        assert!(parse(request(accepted.clone())).is_ok(), "{accepted}");
    }
    for value in [json!(true), json!("yes"), json!(1)] {
        let (code, message) = refusal(json!({ "logprobs": value }));
        assert_eq!(code, "unsupported_parameter", "{value}");
        assert!(
            message.starts_with("`logprobs` cannot be given"),
            "{message}"
        );
    }
}

#[test]
fn text_only_shapes_pass_and_others_are_named() {
    for accepted in [
        json!({"response_format": {"type": "text"}}),
        json!({"response_format": null}),
        json!({"modalities": ["text"]}),
        json!({"modalities": []}),
        json!({"audio": null, "web_search_options": null}),
        json!({"tools": [], "functions": null}),
        json!({"tool_choice": "auto", "function_call": "none"}),
    ] {
        assert!(parse(request(accepted.clone())).is_ok(), "{accepted}");
    }
    for (extra, code, named) in [
        (
            json!({"response_format": {"type": "json_object"}}),
            "unsupported_parameter",
            "`response_format`",
        ),
        (
            json!({"response_format": {}}),
            "unsupported_parameter",
            "`response_format`",
        ),
        (
            json!({"modalities": ["text", "audio"]}),
            "unsupported_parameter",
            "`modalities`",
        ),
        // Not a list at all: it asks for something, and silence hides it.
        (
            json!({"modalities": "audio"}),
            "unsupported_parameter",
            "`modalities`",
        ),
        (
            json!({"modalities": {"text": true}}),
            "unsupported_parameter",
            "`modalities`",
        ),
        (json!({"audio": {}}), "unsupported_parameter", "`audio`"),
        (
            json!({"web_search_options": {}}),
            "unsupported_parameter",
            "`web_search_options`",
        ),
        (
            json!({"tools": [{"type": "function"}]}),
            "tools_not_supported",
            "`tools`",
        ),
        (
            json!({"functions": {}}),
            "tools_not_supported",
            "`functions`",
        ),
        (
            json!({"tool_choice": {"type": "function"}}),
            "tools_not_supported",
            "`tool_choice`",
        ),
        (
            json!({"function_call": {"name": "f"}}),
            "tools_not_supported",
            "`function_call`",
        ),
    ] {
        let (got, message) = refusal(extra.clone());
        assert_eq!(got, code, "{extra}");
        assert!(message.starts_with(named), "{extra}: {message}");
    }
}

#[test]
fn a_message_with_any_sign_of_a_tool_call_is_refused() {
    let with = |extra: Value| {
        let mut message = json!({"role": "assistant", "content": "x"});
        for (key, value) in extra.as_object().unwrap() {
            message[key] = value.clone();
        }
        parse(
            json!({"model": "homeagent", "messages": [message, {"role": "user", "content": "hi"}]}),
        )
    };
    // `null` and `[]` say "no calls" (and a null id no result).
    for empty in [
        json!({"tool_calls": null}),
        json!({"tool_calls": []}),
        json!({"function_call": null}),
        json!({"tool_call_id": null}),
    ] {
        assert!(with(empty.clone()).is_ok(), "{empty}");
    }
    // Each sign alone is enough.
    for sign in [
        json!({"tool_calls": [{"id": "c1", "type": "function"}]}),
        json!({"function_call": {"name": "f", "arguments": "{}"}}),
        json!({"tool_call_id": "c1"}),
    ] {
        let error = with(sign.clone()).expect_err(&sign.to_string());
        assert_eq!(error.code, "tools_not_supported", "{sign}");
        assert!(
            error.message.starts_with("messages[0] carries tool calls"),
            "{}",
            error.message
        );
    }
}

/// A content part is refused naming what is wrong with it: a kind other
/// than text, or a text part without its text.
#[test]
fn a_content_part_is_refused_naming_its_fault() {
    let with = |part: Value| {
        parse(json!({"model": "homeagent", "messages": [{"role": "user", "content": [part]}]}))
    };
    assert!(with(json!({"type": "text", "text": "hi"})).is_ok());
    for (part, expected) in [
        (
            json!({"type": "image_url", "image_url": {"url": "x"}}),
            "messages[0] has a `image_url` content part; only text parts are accepted",
        ),
        (
            json!({"type": "text"}),
            "messages[0] has a text part without its `text` string; give each text part one",
        ),
        (
            json!({"type": "text", "text": null}),
            "messages[0] has a text part without its `text` string; give each text part one",
        ),
    ] {
        let error = with(part.clone()).expect_err(&part.to_string());
        assert_eq!(error.code, "unsupported_content", "{part}");
        assert_eq!(error.message, expected, "{part}");
    }
}

/// An assistant message may hold a `refusal` part (OpenAI's schema allows
/// text and refusal parts there, and its SDKs type them so): the refusal
/// is that turn's text. A user's refusal part is no such thing.
#[test]
fn an_assistant_refusal_part_is_its_text() {
    let parsed = parse(json!({"model": "homeagent", "messages": [
        {"role": "user", "content": "x"},
        {"role": "assistant", "content": [{"type": "refusal", "refusal": "I can't help with that."}]},
        {"role": "user", "content": "ok, something else"}
    ]}))
    .unwrap();
    let homeagent_core::Message::Assistant(answer) = &parsed.prior[1] else {
        panic!("{:?}", parsed.prior)
    };
    assert_eq!(answer.content, "I can't help with that.");
    for (role, part) in [
        ("user", json!({"type": "refusal", "refusal": "no"})),
        ("assistant", json!({"type": "refusal"})),
    ] {
        let error = parse(json!({"model": "homeagent", "messages": [
            {"role": role, "content": [part]}, {"role": "user", "content": "hi"}
        ]}))
        .expect_err(&part.to_string());
        assert_eq!(error.code, "unsupported_content", "{role} {part}");
    }
}
