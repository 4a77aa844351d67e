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

/// A group with these steps (`;`-ended tool lines).
fn group(name: &str, steps: &[String]) -> serde_json::Value {
    json!({"name": name, "tools": steps.concat()})
}

/// A `seq_call` step to `target` (`#Name` or a group), with `sequence`
/// naming the group's sequence when given.
fn call(target: &str, sequence: Option<&str>) -> String {
    let mut args = json!({"target": target});
    if let Some(sequence) = sequence {
        args["sequence"] = json!(sequence);
    }
    format!("{} ;", json!({"tool": "seq_call", "args": args}))
}

fn leaf() -> String {
    "{\"tool\":\"demo_echo\"} ;".to_owned()
}

fn too_deep(result: Result<Vec<Warning>, StoreError>) -> (String, usize) {
    match result {
        Err(StoreError::TooDeep { chain, levels }) => (chain, levels),
        other => panic!("expected TooDeep, got {other:?}"),
    }
}

/// The run-time bound (`MAX_DEPTH` levels: a sequence run and every
/// `seq_call` entry into a sequence or a group is one) is checked when a
/// sequence is saved, over every chain the save would make, so a chain that
/// could only fail when it is reached is refused with its path.
#[test]
fn a_chain_deeper_than_the_run_time_bound_is_refused_when_saved() {
    assert_eq!(homeagent_seq::MAX_DEPTH, 4);
    let dir = TempDir::new("store");
    let store = SeqStore::new(dir.path());
    // Four levels run: E, D → E, C → D, B → C.
    store
        .save(&seq(
            json!({"name": "E", "groups": [group("g", &[leaf()])]}),
        ))
        .unwrap();
    for (name, next) in [("D", "E"), ("C", "D"), ("B", "C")] {
        assert_eq!(store.save(&calling(name, next)).unwrap(), [], "{name}");
    }
    let (chain, levels) = too_deep(store.save(&calling("A", "B")));
    assert_eq!((chain.as_str(), levels), ("#A → #B → #C → #D → #E", 5));
    assert!(
        matches!(store.load("A"), Err(StoreError::NotFound { .. })),
        "not stored"
    );

    // A group entered by seq_call is a level of its own, in this sequence
    // or (with `sequence`) in another.
    let dir = TempDir::new("store");
    let store = SeqStore::new(dir.path());
    store
        .save(&seq(
            json!({"name": "U", "groups": [group("g", &[leaf()])]}),
        ))
        .unwrap();
    store
        .save(&seq(json!({"name": "T", "groups": [
            group("g", &[call("k", None)]),
            group("k", &[leaf(), call("#U", None)]),
        ]})))
        .unwrap();
    let (chain, levels) = too_deep(store.save(&seq(json!({"name": "S", "groups": [
        group("main", &[leaf(), call("h", None)]),
        group("h", &[call("#T", None)]),
    ]}))));
    assert_eq!((chain.as_str(), levels), ("#S → #S/h → #T → #T/k → #U", 5));
    let (chain, _) = too_deep(store.save(&seq(json!({"name": "R", "groups": [
        group("main", &[call("k", Some("T")), call("h", None)]),
        group("h", &[call("i", None)]),
        group("i", &[call("k", Some("T"))]),
    ]}))));
    assert_eq!(chain, "#R → #R/h → #R/i → #T/k → #U");
    // Four levels with group entries run.
    assert_eq!(
        store
            .save(&seq(json!({"name": "Q", "groups": [
                group("main", &[call("h", None)]),
                group("h", &[call("k", Some("T"))]),
            ]})))
            .unwrap(),
        []
    );
}

/// Saving a sequence deepens the chains of the stored sequences that call
/// it: one that would take a caller past the bound is refused, naming the
/// caller's chain; a sequence that calls nothing at all deepens nobody's.
#[test]
fn a_save_that_takes_a_callers_chain_past_the_bound_is_refused() {
    let dir = TempDir::new("store");
    let store = SeqStore::new(dir.path());
    store.save(&calling("X", "Y")).unwrap();
    store.save(&calling("Y", "Z")).unwrap();
    let deep_z = seq(json!({"name": "Z", "groups": [
        group("g", &[call("h", None)]),
        group("h", &[call("i", None)]),
        group("i", &[leaf()]),
    ]}));
    let (chain, levels) = too_deep(store.save(&deep_z));
    assert_eq!((chain.as_str(), levels), ("#X → #Y → #Z → #Z/h → #Z/i", 5));
    assert_eq!(
        store.save(&seq(json!({"name": "Z", "groups": [group("g", &[call("h", None)]), group("h", &[leaf()])]}))).unwrap(),
        []
    );
    // A new sequence is the missing end of a chain: one level more.
    for (name, next) in [("A", "B"), ("B", "C"), ("C", "D"), ("D", "E")] {
        store.save(&calling(name, next)).unwrap();
    }
    let flat_e = seq(json!({"name": "E", "groups": [group("g", &[leaf()])]}));
    let (chain, _) = too_deep(store.save(&flat_e));
    assert_eq!(chain, "#A → #B → #C → #D → #E");
    // So is one that replaces a damaged file (which could not run).
    std::fs::write(dir.path().join("sequences/E.json"), "{\"name\":").unwrap();
    let (chain, _) = too_deep(store.save(&flat_e));
    assert_eq!(chain, "#A → #B → #C → #D → #E");
    // A chain already past the bound (written by an older build) does not
    // refuse an unrelated save.
    std::fs::write(
        dir.path().join("sequences/Old.json"),
        serde_json::to_string(&seq(json!({"name": "Old", "groups": [
            group("a", &[call("b", None)]), group("b", &[call("c", None)]),
            group("c", &[call("d", None)]), group("d", &[call("e", None)]), group("e", &[leaf()]),
        ]})))
        .unwrap(),
    )
    .unwrap();
    assert_eq!(store.save(&calling("W", "Y")).unwrap(), []);
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

/// A name may be 128 bytes long, not one more.
#[test]
fn a_name_is_at_most_128_bytes() {
    use homeagent_seq::store::check_name;
    assert!(check_name(&"a".repeat(128)).is_ok());
    assert!(check_name(&"é".repeat(64)).is_ok());
    for long in ["a".repeat(129), "é".repeat(65)] {
        assert!(
            matches!(
                check_name(&long),
                Err(StoreError::BadName { reason, .. }) if reason == "names are at most 128 bytes long"
            ),
            "{} bytes",
            long.len()
        );
    }
}

/// Only a file that is not there is "not found": anything else in the way
/// (a directory where a sequence's file belongs, a file where the store's
/// directory belongs) is an I/O error naming what was done and where, so
/// nobody recreates a sequence that exists or takes a broken store for an
/// empty one.
#[test]
fn what_stands_in_a_files_way_is_an_io_error_not_a_missing_sequence() {
    let dir = TempDir::new("store-in-the-way");
    let store = SeqStore::at(dir.path().join("sequences"));
    std::fs::create_dir_all(store.dir().join("blocked.json")).unwrap();
    assert!(
        matches!(
            store.load("blocked"),
            Err(StoreError::Io { action: "read", .. })
        ),
        "{:?}",
        store.load("blocked")
    );
    assert!(
        matches!(
            store.delete("blocked"),
            Err(StoreError::Io {
                action: "delete",
                ..
            })
        ),
        "{:?}",
        store.delete("blocked")
    );
    assert!(matches!(
        store.load("absent"),
        Err(StoreError::NotFound { .. })
    ));
    assert!(matches!(
        store.delete("absent"),
        Err(StoreError::NotFound { .. })
    ));

    let file_store = SeqStore::at(dir.path().join("a-file"));
    std::fs::write(file_store.dir(), "not a directory").unwrap();
    assert!(
        matches!(
            file_store.names(),
            Err(StoreError::Io { action: "list", .. })
        ),
        "{:?}",
        file_store.names()
    );
    let empty = SeqStore::at(dir.path().join("never-made"));
    assert_eq!(empty.names().unwrap(), Vec::<String>::new());
}
