#![allow(clippy::unwrap_used, clippy::expect_used)] // a panic in a test is a test failure
//! The seq tools called the way the model calls them: through the gated
//! ToolApi, as an agent.

use crate::common;

use common::{LIMITED, OPS, harness};
use homeagent_core::{ErrorReason, ToolSource};
use homeagent_seq::help::example;
use homeagent_seq::{MAX_DEPTH, SEQ_TOOLS, parse_sequence};
use serde_json::{Value, json};

fn one_group(name: &str, tools: &str) -> Value {
    json!({"name": name, "groups": [{"name": "g", "tools": tools}]})
}

fn call_seq(target: &str) -> String {
    format!("{{\"tool\":\"seq_call\",\"args\":{{\"target\":\"#{target}\"}}}} ;")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn seven_tools_none_parallel_safe_all_with_object_schemas() {
    let h = harness();
    for name in SEQ_TOOLS {
        let def = h.registry.definition(name).unwrap();
        assert!(!def.parallel_safe, "{name}");
        assert_eq!(def.parameters["type"], "object", "{name}");
        assert!(!def.description.is_empty());
    }
    assert_eq!(SEQ_TOOLS.len(), 7);
    let create = h.registry.definition("seq_create").unwrap();
    assert_eq!(create.parameters["required"], json!(["name"]));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_help_example_parses_creates_and_runs() {
    let h = harness();
    let help = h.call("main", "seq_help", json!({})).await;
    assert!(help.success);
    for needle in [
        ";",
        "object",
        "out",
        "file",
        "parallel",
        "when",
        "unsafe_serial",
    ] {
        assert!(help.text.contains(needle), "{needle}");
    }
    let line = example().unwrap();
    assert!(help.text.contains(line));
    let parsed = parse_sequence(line).unwrap();
    let doc: Value = serde_json::from_str(line).unwrap();
    let created = h.call("main", "seq_create", json!({"name": parsed.name, "description": doc["description"], "groups": doc["groups"]})).await;
    assert!(created.success, "{}", created.text);
    assert_eq!(created.value["warnings"], json!([]), "{}", created.text);
    let run = h
        .call(
            "main",
            "seq_run",
            json!({"name": "host_report", "args": {"host": "nas", "verbose": true}}),
        )
        .await;
    assert!(run.success, "{}", run.text);
    assert_eq!(run.value["status"], "completed");
    assert_eq!(
        run.value["slots"]["facts"][0],
        json!({"tag": "uptime on nas"})
    );
    assert_eq!(run.value["slots"]["facts"][1]["tag"], "nas");
    assert_eq!(run.value["slots"]["count"], json!({"notes": 1}));
    assert_eq!(h.demo.notes().len(), 1);
    assert!(
        h.demo.notes()[0].starts_with("facts: [{\"tag\":\"uptime on nas\"}"),
        "{:?}",
        h.demo.notes()
    );
    assert!(!run.text.contains("map["));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn create_list_call_when_call_delete() {
    let h = harness();
    let groups = json!([
        {"name": "echo", "in": {"x": "string"}, "out": {"r": "object"},
         "tools": "{\"tool\":\"demo_echo\",\"args\":{\"x\":\"$args.x\"},\"as\":\"r\"} ;"}
    ]);
    let both = h
        .call(
            "main",
            "seq_create",
            json!({"name": "s", "groups": groups, "file": "s.json"}),
        )
        .await;
    assert_eq!(
        both.error.map(|e| e.reason),
        Some(ErrorReason::InvalidArguments)
    );
    // Models send null for the optional argument they do not use: that is
    // not "both".
    let null_groups = h
        .call(
            "main",
            "seq_create",
            json!({"name": "s", "groups": null, "file": "missing.json"}),
        )
        .await;
    assert!(!null_groups.success);
    assert!(
        !null_groups.text.contains("not both"),
        "{}",
        null_groups.text
    );
    assert!(
        null_groups.text.contains("missing.json"),
        "{}",
        null_groups.text
    );
    // A misspelt argument is refused by name, not dropped.
    let typo = h
        .call(
            "main",
            "seq_create",
            json!({"name": "s", "descripton": "d", "groups": groups.clone()}),
        )
        .await;
    assert!(!typo.success);
    assert!(typo.text.contains("descripton"), "{}", typo.text);
    let neither = h.call("main", "seq_create", json!({"name": "s"})).await;
    assert!(
        !neither.success && neither.text.contains("give one of"),
        "{}",
        neither.text
    );
    let created = h
        .call("main", "seq_create", json!({"name": "s", "groups": groups}))
        .await;
    assert!(created.success, "{}", created.text);
    let list = h.call("main", "seq_list", json!({})).await;
    assert_eq!(list.value["sequences"][0]["groups"][0]["out"], json!(["r"]));

    let called = h
        .call(
            "main",
            "seq_call",
            json!({"target": "echo", "sequence": "s", "args": {"x": "hi"}}),
        )
        .await;
    assert!(called.success, "{}", called.text);
    assert_eq!(called.value["slots"]["r"], json!({"x": "hi"}));
    let no_seq = h.call("main", "seq_call", json!({"target": "echo"})).await;
    assert_eq!(no_seq.error.map(|e| e.reason), Some(ErrorReason::Required));

    let skipped = h.call("main", "seq_when_call", json!({"target": "echo", "sequence": "s", "when": "$args.x == \"no\"", "args": {"x": "hi"}})).await;
    assert!(skipped.success);
    assert_eq!(skipped.value["status"], "skipped");
    let bad = h
        .call(
            "main",
            "seq_when_call",
            json!({"target": "echo", "sequence": "s", "when": "$args.y > 1", "args": {"x": "hi"}}),
        )
        .await;
    assert_eq!(
        bad.error.as_ref().map(|e| e.reason),
        Some(ErrorReason::InvalidArguments)
    );
    assert!(
        bad.text.contains("condition evaluation failed"),
        "{}",
        bad.text
    );

    let deleted = h.call("main", "seq_delete", json!({"name": "s"})).await;
    assert!(deleted.success);
    let again = h.call("main", "seq_delete", json!({"name": "s"})).await;
    assert!(
        !again.success && again.text.contains("does not exist"),
        "{}",
        again.text
    );
    let escape = h
        .call("main", "seq_delete", json!({"name": "../secret"}))
        .await;
    assert!(
        !escape.success && escape.text.contains("bad sequence name"),
        "{}",
        escape.text
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn file_inputs_are_read_only_from_the_sources_directory() {
    let h = harness();
    let sources = h.dir.path().join("sources");
    let doc = one_group("from_file", "{\"tool\":\"demo_echo\"} ;");
    std::fs::write(sources.join("f.json"), doc.to_string()).unwrap();
    std::fs::write(h.dir.path().join("outside.json"), doc.to_string()).unwrap();
    let ok = h
        .call(
            "main",
            "seq_create",
            json!({"name": "from_file", "file": "f.json"}),
        )
        .await;
    assert!(ok.success, "{}", ok.text);
    for bad in [
        "../outside.json",
        h.dir.path().join("outside.json").to_str().unwrap(),
    ] {
        let refused = h
            .call(
                "main",
                "seq_create",
                json!({"name": "from_file", "file": bad}),
            )
            .await;
        assert!(!refused.success, "{bad}");
        assert_eq!(refused.error.unwrap().field.as_deref(), Some("file"));
    }
    // A FIFO would block the worker until something writes to it: only a
    // regular file is read. Were the open to wait, this opens the other end
    // after a second, so a regression fails instead of hanging the run.
    let fifo = sources.join("pipe.json");
    let made = std::process::Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .unwrap();
    assert!(made.success());
    std::thread::spawn(move || {
        std::thread::sleep(std::time::Duration::from_secs(1));
        let _ = std::fs::OpenOptions::new().write(true).open(&fifo);
    });
    let piped = h
        .call(
            "main",
            "seq_create",
            json!({"name": "from_file", "file": "pipe.json"}),
        )
        .await;
    assert!(!piped.success);
    assert!(piped.text.contains("not a regular file"), "{}", piped.text);
    // A file that is not there: the error says where files are read from
    // (the sources directory, not the store's `sequences`).
    let missing = h
        .call(
            "main",
            "seq_create",
            json!({"name": "from_file", "file": "nope.json"}),
        )
        .await;
    assert!(!missing.success);
    assert!(
        missing.text.contains(&sources.display().to_string()),
        "{}",
        missing.text
    );
    let mismatch = h
        .call(
            "main",
            "seq_create",
            json!({"name": "other", "file": "f.json"}),
        )
        .await;
    assert!(
        mismatch.text.contains("make them agree"),
        "{}",
        mismatch.text
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cycle_is_refused_by_seq_create() {
    let h = harness();
    let a = h
        .call("main", "seq_create", one_group("A", &call_seq("B")))
        .await;
    assert!(a.success);
    assert_eq!(
        a.value["warnings"][0],
        "sequence \"A\" calls #B, which does not exist yet; create it before running"
    );
    let b = h
        .call("main", "seq_create", one_group("B", &call_seq("A")))
        .await;
    assert!(!b.success);
    assert!(b.text.contains("#B → #A → #B"), "{}", b.text);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_chain_of_three_runs_and_a_chain_of_five_hits_the_depth_bound() {
    let h = harness();
    assert_eq!(MAX_DEPTH, 4);
    // E ends the long chain; created last to first, so no forward references.
    let names = ["A", "B", "C", "D", "E"];
    for (i, name) in names.iter().enumerate().rev() {
        let tools = match names.get(i + 1) {
            Some(next) => call_seq(next),
            None => "{\"tool\":\"t_delay\",\"args\":{\"ms\":0,\"tag\":\"e\"}} ;".to_owned(),
        };
        let created = h.call("main", "seq_create", one_group(name, &tools)).await;
        if *name != "A" {
            assert!(created.success, "{name}: {}", created.text);
            continue;
        }
        // The fifth level is refused when the chain is made...
        assert!(!created.success, "{}", created.text);
        assert!(
            created
                .text
                .contains("would nest 5 levels (#A → #B → #C → #D → #E)"),
            "{}",
            created.text
        );
        // ...and a chain written past the check (by hand, by an older
        // build) still meets the bound at run time.
        let stored = parse_sequence(&one_group(name, &tools).to_string()).unwrap();
        std::fs::write(
            h.dir.path().join("sequences/A.json"),
            serde_json::to_string(&stored).unwrap(),
        )
        .unwrap();
    }
    let short = h
        .call("main", "seq_create", one_group("X", &call_seq("Y")))
        .await;
    assert!(short.success);
    let y = h
        .call("main", "seq_create", one_group("Y", &call_seq("Z")))
        .await;
    assert!(y.success);
    let z = h
        .call(
            "main",
            "seq_create",
            one_group(
                "Z",
                "{\"tool\":\"t_delay\",\"args\":{\"ms\":0,\"tag\":\"z\"}} ;",
            ),
        )
        .await;
    assert!(z.success);
    let three = h.call("main", "seq_run", json!({"name": "X"})).await;
    assert!(three.success, "{}", three.text);
    assert_eq!(
        *h.finished.lock().unwrap(),
        ["z"],
        "the end of the chain ran"
    );

    let five = h.call("main", "seq_run", json!({"name": "A"})).await;
    assert!(!five.success, "{}", five.text);
    assert!(
        five.text
            .contains("nesting depth bound 4 exceeded: #A → #B → #C → #D → #E"),
        "{}",
        five.text
    );
    assert_eq!(
        *h.finished.lock().unwrap(),
        ["z"],
        "the fifth level never ran"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sequence_cannot_run_a_tool_its_caller_may_not_use() {
    let h = harness();
    let note = "{\"tool\":\"demo_note\",\"args\":{\"text\":\"hello\"}} ;";
    assert!(
        h.call("main", "seq_create", one_group("direct", note))
            .await
            .success
    );
    assert!(
        h.call(
            "main",
            "seq_create",
            one_group("outer", &call_seq("direct"))
        )
        .await
        .success
    );

    for name in ["direct", "outer"] {
        let run = h.call(LIMITED, "seq_run", json!({"name": name})).await;
        assert!(!run.success, "{name}: {}", run.text);
        assert!(
            run.text
                .contains("agent `limited` may not use the tool `demo_note`"),
            "{name}: {}",
            run.text
        );
    }
    assert!(
        h.demo.notes().is_empty(),
        "demo_note never ran for the limited agent"
    );
    let run = h.call("main", "seq_run", json!({"name": "outer"})).await;
    assert!(run.success, "{}", run.text);
    assert_eq!(h.demo.notes(), ["hello"]);
}

/// A sequence never lends its runner's grants to its author: an agent
/// cannot write into a sequence a tool it may not use (another agent, or
/// a person, would later run it with theirs), nor replace or delete a
/// sequence another agent wrote; a sequence whose author may no longer use
/// a tool does not run it, whoever runs the sequence.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sequence_never_runs_a_tool_its_author_may_not_use() {
    let h = harness();
    let note = "{\"tool\":\"demo_note\",\"args\":{\"text\":\"planted\"}} ;";
    let created = h
        .call(LIMITED, "seq_create", one_group("nightly", note))
        .await;
    assert!(!created.success, "{}", created.text);
    let error = created.error.unwrap();
    assert_eq!(error.reason, ErrorReason::Denied);
    assert_eq!(
        error.detail,
        "agent `limited` may not use the tool `demo_note`, so it cannot put it in a sequence"
    );
    assert!(h.store.load("nightly").is_err(), "nothing was saved");

    // main's own sequence: the limited agent can neither replace nor delete it.
    assert!(
        h.call("main", "seq_create", one_group("nightly", note))
            .await
            .success
    );
    let echo = "{\"tool\":\"demo_echo\",\"args\":{\"text\":\"x\"}} ;";
    for (tool, args) in [
        ("seq_create", one_group("nightly", echo)),
        ("seq_delete", json!({"name": "nightly"})),
    ] {
        let refused = h.call(LIMITED, tool, args).await;
        let error = refused
            .error
            .unwrap_or_else(|| panic!("{tool}: {}", refused.text));
        assert_eq!(error.reason, ErrorReason::Denied, "{tool}");
        assert_eq!(
            error.detail,
            "sequence `nightly` was written by agent `main`; only that agent (or a person, \
             through `homeagent seq` or the HTTP API) may replace or delete it",
            "{tool}"
        );
    }
    assert_eq!(
        h.store.load("nightly").unwrap().author.as_deref(),
        Some("main")
    );
    let listed = h.call(LIMITED, "seq_list", json!({})).await;
    assert_eq!(
        listed.value["sequences"][0]["author"], "main",
        "{}",
        listed.text
    );

    // A sequence the limited agent wrote (with what it may use) runs its
    // tools, but never one its author may not use, even run by main: a
    // planted file (or a grant taken away since) changes nothing.
    assert!(
        h.call(LIMITED, "seq_create", one_group("mine", echo))
            .await
            .success
    );
    let mut planted = h.store.load("mine").unwrap();
    planted.groups = homeagent_seq::parse_sequence_value(&one_group("mine", note))
        .unwrap()
        .groups;
    h.store.save(&planted).unwrap();
    let run = h.call("main", "seq_run", json!({"name": "mine"})).await;
    assert!(!run.success, "{}", run.text);
    assert!(
        run.text.contains(
            "sequence `mine` was written by agent `limited`, and the call to `demo_note` is \
             refused for that agent (agent `limited` may not use the tool `demo_note`)"
        ),
        "{}",
        run.text
    );
    assert!(h.demo.notes().is_empty(), "demo_note never ran");
    // Its own may be replaced and deleted by it.
    assert!(
        h.call(LIMITED, "seq_create", one_group("mine", echo))
            .await
            .success
    );
    assert!(
        h.call(LIMITED, "seq_delete", json!({"name": "mine"}))
            .await
            .success
    );
}

/// The author's grant is checked whole at run time, the device the step
/// names included: a sequence written by an agent no device is granted to
/// does not run a device tool on `nas` for the agent that runs it, who may.
/// And a tool no sequence may call (written in by hand, or by an older
/// build) is refused when the sequence runs, not only when it is saved.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sequence_runs_a_step_only_as_its_author_may_device_and_list_included() {
    let h = harness();
    let on_nas = "{\"tool\":\"t_remote\",\"args\":{\"device_id\":\"nas\"}} ;";
    // ops may run it itself.
    assert!(
        h.call(OPS, "seq_create", one_group("mine", on_nas))
            .await
            .success
    );
    let run = h.call(OPS, "seq_run", json!({"name": "mine"})).await;
    assert!(run.success, "{}", run.text);
    // Written by main, whose grant holds no device: run by ops, refused.
    let created = h
        .call("main", "seq_create", one_group("theirs", on_nas))
        .await;
    assert!(created.success, "{}", created.text);
    let run = h.call(OPS, "seq_run", json!({"name": "theirs"})).await;
    assert!(!run.success, "{}", run.text);
    assert!(
        run.text
            .contains("sequence `theirs` was written by agent `main`")
            && run.text.contains("nas"),
        "{}",
        run.text
    );

    // A forbidden tool planted in a stored sequence.
    let echo = "{\"tool\":\"demo_echo\",\"args\":{\"text\":\"x\"}} ;";
    assert!(
        h.call("main", "seq_create", one_group("planted", echo))
            .await
            .success
    );
    let mut planted = h.store.load("planted").unwrap();
    planted.groups[0].tools[0].tool = "seq_delete".into();
    planted.groups[0].tools[0].args = json!({"name": "mine"}).as_object().unwrap().clone();
    h.store.save(&planted).unwrap();
    let run = h.call("main", "seq_run", json!({"name": "planted"})).await;
    assert!(!run.success, "{}", run.text);
    assert!(run.text.contains("forbidden"), "{}", run.text);
    assert!(
        h.store.load("mine").is_ok(),
        "the planted seq_delete never ran"
    );
}

/// `sequence` names the sequence of a group target; with a `#` target it
/// would be dropped without a word, so the pair is refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn seq_call_refuses_a_sequence_beside_a_whole_sequence_target() {
    let h = harness();
    let echo = "{\"tool\":\"demo_echo\",\"args\":{\"text\":\"x\"}} ;";
    assert!(
        h.call("main", "seq_create", one_group("b", echo))
            .await
            .success
    );
    let refused = h
        .call("main", "seq_call", json!({"target": "#b", "sequence": "a"}))
        .await;
    let error = refused.error.expect("refused");
    assert_eq!(error.reason, ErrorReason::InvalidArguments);
    assert_eq!(error.field.as_deref(), Some("sequence"));
    assert!(
        error
            .detail
            .starts_with("target \"#b\" is a whole sequence"),
        "{}",
        error.detail
    );
    let ran = h
        .call(
            "main",
            "seq_call",
            json!({"target": "#b", "sequence": null}),
        )
        .await;
    assert!(ran.success, "{}", ran.text);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn long_slots_are_shown_cut_with_an_explicit_marker() {
    let h = harness();
    let long = "x".repeat(5000);
    let doc = json!({"name": "big", "groups": [{"name": "g", "in": {"v": "string"}, "out": {"r": "string"},
        "tools": "{\"tool\":\"t_unsafe\",\"args\":{\"tag\":\"$args.v\"},\"as\":\"r\"} ;"}]});
    assert!(h.call("main", "seq_create", doc).await.success);
    let run = h
        .call(
            "main",
            "seq_run",
            json!({"name": "big", "args": {"v": long}}),
        )
        .await;
    assert!(run.success);
    let shown = run.value["slots"]["r"].as_str().unwrap();
    assert!(
        shown.ends_with("… [truncated: 5000 chars total]"),
        "{}",
        &shown[shown.len() - 60..]
    );
    assert!(shown.starts_with(&"x".repeat(1000)));
}
