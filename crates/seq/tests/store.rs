#![allow(clippy::unwrap_used, clippy::expect_used)] // a panic in a test is a test failure

use crate::common;

use common::{TempDir, seq};
use homeagent_seq::{SeqStore, StoreError, Warning};
use serde_json::json;

fn calling(name: &str, target: &str) -> homeagent_seq::Sequence {
    seq(json!({"name": name, "groups": [
        {"name": "g", "tools": format!("{{\"tool\":\"seq_call\",\"args\":{{\"target\":\"#{target}\"}}}} ;")}
    ]}))
}

#[test]
fn a_sequence_round_trips_as_its_parsed_tree() {
    let dir = TempDir::new("store");
    let store = SeqStore::new(dir.path());
    let original = seq(
        json!({"name": "s", "description": "d", "groups": [{"name": "g",
        "in": {"h": "string"}, "out": {"r": "array<string>"}, "when": "$args.h != \"\"",
        "parallel": false, "unsafe_serial": true, "missing": "degrade", "timeout": "1500ms",
        "on_error": "retry", "retries": 2,
        "tools": "{\"tool\":\"demo_echo\",\"args\":{\"tag\":\"$args.h\"},\"as\":\"r\",\"fallback\":\"none\"} ;"}]}),
    );
    assert_eq!(store.save(&original).unwrap(), []);
    let path = dir.path().join("sequences/s.json");
    let stored: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    // Stored as the tree: tools an array, defaults written out.
    assert_eq!(stored["groups"][0]["tools"][0]["tool"], "demo_echo");
    assert_eq!(stored["groups"][0]["timeout"], "1500ms");
    assert_eq!(store.load("s").unwrap(), original);
    // No temp file is left behind.
    let files: Vec<String> = std::fs::read_dir(dir.path().join("sequences"))
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    assert_eq!(files, ["s.json"]);
}

#[test]
fn list_and_delete_and_their_missing_errors() {
    let dir = TempDir::new("store");
    let store = SeqStore::new(dir.path());
    assert_eq!(store.names().unwrap(), Vec::<String>::new());
    for name in ["b", "a"] {
        store.save(&seq(json!({"name": name, "groups": [{"name": "g", "tools": "{\"tool\":\"demo_echo\"} ;"}]}))).unwrap();
    }
    assert_eq!(store.names().unwrap(), ["a", "b"]);
    assert_eq!(store.list().unwrap().len(), 2);
    store.delete("a").unwrap();
    assert_eq!(store.names().unwrap(), ["b"]);
    assert!(matches!(store.delete("a"), Err(StoreError::NotFound { name }) if name == "a"));
    assert!(matches!(store.load("a"), Err(StoreError::NotFound { .. })));
    // A damaged file is reported, not skipped silently.
    std::fs::write(
        dir.path().join("sequences/bad.json"),
        "{\"name\":\"bad\",\"groups\":[],\"x\":1}",
    )
    .unwrap();
    assert!(matches!(store.load("bad"), Err(StoreError::Corrupt { .. })));
    let listed = store.list().unwrap();
    let names: Vec<(&str, bool)> = listed
        .iter()
        .map(|(n, l)| (n.as_str(), l.is_ok()))
        .collect();
    assert_eq!(names, [("b", true), ("bad", false)]);
}

#[test]
fn names_that_could_escape_are_refused_and_nothing_outside_is_touched() {
    let dir = TempDir::new("store");
    let store = SeqStore::new(dir.path());
    let outside = dir.path().join("secret.json");
    std::fs::write(&outside, "keep").unwrap();
    std::fs::create_dir_all(dir.path().join("sequences")).unwrap();
    for name in [
        "../secret",
        "a/b",
        "a\\b",
        "..",
        ".hidden",
        "",
        "  ",
        "sub/../..",
        "../../etc/passwd",
        "a\0b",
    ] {
        assert!(
            matches!(store.load(name), Err(StoreError::BadName { .. })),
            "load {name:?}"
        );
        assert!(
            matches!(store.delete(name), Err(StoreError::BadName { .. })),
            "delete {name:?}"
        );
        let mut s = seq(
            json!({"name": "x", "groups": [{"name": "g", "tools": "{\"tool\":\"demo_echo\"} ;"}]}),
        );
        s.name = name.to_owned();
        assert!(
            matches!(store.save(&s), Err(StoreError::BadName { .. })),
            "save {name:?}"
        );
    }
    assert_eq!(std::fs::read_to_string(&outside).unwrap(), "keep");
    assert_eq!(
        std::fs::read_dir(dir.path().join("sequences"))
            .unwrap()
            .count(),
        0
    );
}

#[test]
fn a_cycle_is_refused_with_its_path_and_a_forward_reference_warns() {
    let dir = TempDir::new("store");
    let store = SeqStore::new(dir.path());
    assert_eq!(
        store.save(&calling("A", "B")).unwrap(),
        [Warning::MissingSequence {
            sequence: "A".into(),
            target: "B".into()
        }]
    );
    store.save(&calling("B", "C")).unwrap();
    match store.save(&calling("C", "A")) {
        Err(StoreError::Cycle { path }) => assert_eq!(path, "#C → #A → #B → #C"),
        other => panic!("{other:?}"),
    }
    assert!(
        matches!(store.load("C"), Err(StoreError::NotFound { .. })),
        "a refused sequence is not stored"
    );
    match store.save(&calling("S", "S")) {
        Err(StoreError::Cycle { path }) => assert_eq!(path, "#S → #S"),
        other => panic!("{other:?}"),
    }
    // Acyclic: C calls nothing.
    assert_eq!(store.save(&seq(json!({"name": "C", "groups": [{"name": "g", "tools": "{\"tool\":\"demo_echo\"} ;"}]}))).unwrap(), []);
}

/// Two stores of one directory in one process (the server makes one per
/// request) saving A → B and B → A at the same moment: each check used to
/// run under its own store's lock, so both could pass and store a cycle.
/// Exactly one may succeed.
#[test]
fn two_stores_saving_the_halves_of_a_cycle_at_once_store_one() {
    for round in 0..200 {
        let dir = TempDir::new(&format!("race-{round}"));
        let (a, b) = (SeqStore::new(dir.path()), SeqStore::new(dir.path()));
        let barrier = std::sync::Barrier::new(2);
        let (first, second) = std::thread::scope(|scope| {
            let one = scope.spawn(|| {
                barrier.wait();
                a.save(&calling("A", "B"))
            });
            let two = scope.spawn(|| {
                barrier.wait();
                b.save(&calling("B", "A"))
            });
            (one.join().unwrap(), two.join().unwrap())
        });
        assert!(
            first.is_ok() != second.is_ok(),
            "round {round}: {first:?} / {second:?}"
        );
        let refused = if first.is_ok() { second } else { first };
        assert!(
            matches!(refused, Err(StoreError::Cycle { .. })),
            "{refused:?}"
        );
    }
}
