#![allow(clippy::unwrap_used, clippy::expect_used)] // a panic in a test is a test failure
//! The files tools through the real registry and executor, on real files.

use std::os::unix::fs::symlink;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use homeagent_core::{
    AssembledCall, AssembledTurn, BatchContext, BatchMode, ErrorReason, Executor, Registry,
    SerialReason, ToolCall, ToolContext, ToolError, ToolSource,
};
use homeagent_tools::{
    Access, Expect, FilesPolicy, OpenRefusal, PathRefusal, Root, register_files_tools,
};
use serde_json::{Value, json};

/// A directory under the system temp dir, removed on drop.
struct TempDir(PathBuf);

impl TempDir {
    fn new(label: &str) -> Self {
        static N: AtomicUsize = AtomicUsize::new(0);
        let dir = std::env::temp_dir().join(format!(
            "homeagent-files-{label}-{}-{}",
            std::process::id(),
            N.fetch_add(1, Ordering::SeqCst)
        ));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        TempDir(dir)
    }
    fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A sandbox: `<tmp>/root` is the files root, `<tmp>/outside` is not.
struct Sandbox {
    tmp: TempDir,
    registry: Arc<Registry>,
}

impl Sandbox {
    fn new(label: &str) -> Self {
        Self::with(label, |_| {})
    }
    fn with(label: &str, tweak: impl FnOnce(&mut FilesPolicy)) -> Self {
        let tmp = TempDir::new(label);
        std::fs::create_dir_all(tmp.path().join("outside")).unwrap();
        std::fs::write(tmp.path().join("outside/secret.txt"), "top secret").unwrap();
        let registry = Registry::new();
        let mut policy = FilesPolicy::new(tmp.path().join("root"));
        tweak(&mut policy);
        register_files_tools(&registry, policy).unwrap();
        Sandbox {
            tmp,
            registry: Arc::new(registry),
        }
    }
    fn root(&self) -> PathBuf {
        self.tmp.path().join("root")
    }
    fn outside(&self) -> PathBuf {
        self.tmp.path().join("outside")
    }
    async fn call(&self, tool: &str, arguments: Value) -> Result<Value, ToolError> {
        let ctx = ToolContext {
            call_id: "c1".into(),
            tool: tool.into(),
            arguments,
            batch_id: "b1".into(),
            extras: serde_json::Map::new().into(),
            cancel: Default::default(),
        };
        self.registry.invoke(tool, ctx).await
    }
    async fn denied(&self, tool: &str, arguments: Value) -> ToolError {
        let error = self.call(tool, arguments.clone()).await.unwrap_err();
        assert_eq!(error.reason, ErrorReason::Denied, "{arguments}: {error:?}");
        assert_eq!(error.field.as_deref(), Some("path"));
        let hint = error.hint.clone().unwrap();
        assert!(
            hint.starts_with(&format!(
                "paths are relative to the files root {}",
                self.root().display()
            )),
            "{hint}"
        );
        error
    }
}

#[tokio::test]
async fn the_root_is_created_and_the_tools_declare_their_scheduling() {
    let sandbox = Sandbox::new("flags");
    assert!(sandbox.root().is_dir());
    let flags: Vec<(String, bool, bool, bool)> = sandbox
        .registry
        .definitions()
        .iter()
        .map(|d| (d.name.clone(), d.parallel_safe, d.serial, d.read_only))
        .collect();
    assert_eq!(
        flags,
        [
            ("files_list".to_owned(), true, false, true),
            ("files_read".to_owned(), true, false, true),
            ("files_write".to_owned(), false, true, false),
        ]
    );
}

#[tokio::test]
async fn write_then_read_returns_the_exact_content() {
    let sandbox = Sandbox::new("rw");
    let written = sandbox
        .call(
            "files_write",
            json!({"path": "notes.txt", "content": "héllo\nworld\n"}),
        )
        .await
        .unwrap();
    assert_eq!(
        written,
        json!({"path": "notes.txt", "bytes_written": 13, "appended": false, "created": true})
    );
    assert_eq!(
        std::fs::read_to_string(sandbox.root().join("notes.txt")).unwrap(),
        "héllo\nworld\n"
    );
    let read = sandbox
        .call("files_read", json!({"path": "notes.txt"}))
        .await
        .unwrap();
    assert_eq!(
        read,
        json!({"path": "notes.txt", "content": "héllo\nworld\n", "bytes": 13, "size": 13,
               "truncated": false, "next_offset": null})
    );
    // An absolute path inside the root is the same file.
    let absolute = sandbox.root().join("notes.txt");
    let read = sandbox
        .call("files_read", json!({"path": absolute.to_str().unwrap()}))
        .await
        .unwrap();
    assert_eq!(read["content"], "héllo\nworld\n");
    // `..` that stays inside the root is fine.
    let read = sandbox
        .call("files_read", json!({"path": "x/../notes.txt"}))
        .await
        .unwrap();
    assert_eq!(read["path"], "notes.txt");
}

#[tokio::test]
async fn replace_and_append() {
    let sandbox = Sandbox::new("append");
    std::fs::write(sandbox.root().join("log.txt"), "one\n").unwrap();
    let appended = sandbox
        .call(
            "files_write",
            json!({"path": "log.txt", "content": "two\n", "append": true}),
        )
        .await
        .unwrap();
    assert_eq!(
        appended,
        json!({"path": "log.txt", "bytes_written": 4, "appended": true, "created": false})
    );
    assert_eq!(
        std::fs::read_to_string(sandbox.root().join("log.txt")).unwrap(),
        "one\ntwo\n"
    );
    sandbox
        .call(
            "files_write",
            json!({"path": "log.txt", "content": "three"}),
        )
        .await
        .unwrap();
    assert_eq!(
        std::fs::read_to_string(sandbox.root().join("log.txt")).unwrap(),
        "three"
    );
}

#[tokio::test]
async fn an_atomic_write_leaves_no_temporary_files() {
    let sandbox = Sandbox::new("atomic");
    for i in 0..5 {
        sandbox
            .call(
                "files_write",
                json!({"path": "sub/f.txt", "content": format!("v{i}"), "create_dirs": true}),
            )
            .await
            .unwrap();
    }
    let names: Vec<String> = std::fs::read_dir(sandbox.root().join("sub"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(names, ["f.txt"]);
    assert_eq!(
        std::fs::read_to_string(sandbox.root().join("sub/f.txt")).unwrap(),
        "v4"
    );
}

#[tokio::test]
async fn missing_parent_directories_need_create_dirs() {
    let sandbox = Sandbox::new("dirs");
    let error = sandbox
        .call("files_write", json!({"path": "a/b/c.txt", "content": "x"}))
        .await
        .unwrap_err();
    assert_eq!(error.reason, ErrorReason::Execution);
    assert_eq!(
        error.detail,
        "cannot write a/b/c.txt: the directory a/b does not exist"
    );
    assert_eq!(
        error.hint.as_deref(),
        Some("pass create_dirs: true to create missing directories")
    );
    assert!(!sandbox.root().join("a").exists());
    sandbox
        .call(
            "files_write",
            json!({"path": "a/b/c.txt", "content": "x", "create_dirs": true}),
        )
        .await
        .unwrap();
    assert_eq!(
        std::fs::read_to_string(sandbox.root().join("a/b/c.txt")).unwrap(),
        "x"
    );
}

#[tokio::test]
async fn a_missing_file_is_a_clear_execution_error() {
    let sandbox = Sandbox::new("missing");
    let error = sandbox
        .call("files_read", json!({"path": "nope.txt"}))
        .await
        .unwrap_err();
    assert_eq!(error.reason, ErrorReason::Execution);
    assert_eq!(
        error.detail,
        "cannot read nope.txt: no such file or directory"
    );
    assert_eq!(error.field.as_deref(), Some("path"));
}

#[tokio::test]
async fn reads_are_capped_and_say_so() {
    let sandbox = Sandbox::with("trunc", |p| p.max_read_bytes = 4);
    std::fs::write(sandbox.root().join("abc.txt"), "abcdefghij").unwrap();
    let first = sandbox
        .call("files_read", json!({"path": "abc.txt"}))
        .await
        .unwrap();
    assert_eq!(
        first,
        json!({"path": "abc.txt", "content": "abcd", "bytes": 4, "size": 10,
               "truncated": true, "next_offset": 4})
    );
    // A larger max_bytes is lowered to the policy's cap.
    let second = sandbox
        .call(
            "files_read",
            json!({"path": "abc.txt", "offset": 4, "max_bytes": 100}),
        )
        .await
        .unwrap();
    assert_eq!(second["content"], "efgh");
    assert_eq!(second["next_offset"], 8);
    let last = sandbox
        .call("files_read", json!({"path": "abc.txt", "offset": 8}))
        .await
        .unwrap();
    assert_eq!(
        last,
        json!({"path": "abc.txt", "content": "ij", "bytes": 2, "size": 10,
               "truncated": false, "next_offset": null})
    );
}

#[tokio::test]
async fn a_window_never_cuts_a_character_in_two() {
    let sandbox = Sandbox::new("utf8");
    // "aé" is 61 C3 A9: a 2-byte window would end inside the é.
    std::fs::write(sandbox.root().join("u.txt"), "aéb").unwrap();
    let first = sandbox
        .call("files_read", json!({"path": "u.txt", "max_bytes": 2}))
        .await
        .unwrap();
    assert_eq!(first["content"], "a");
    assert_eq!(first["truncated"], true);
    assert_eq!(first["next_offset"], 1);
    let inside = sandbox
        .call("files_read", json!({"path": "u.txt", "offset": 2}))
        .await
        .unwrap_err();
    assert_eq!(inside.reason, ErrorReason::InvalidArguments);
    assert_eq!(inside.field.as_deref(), Some("offset"));
}

#[tokio::test]
async fn binary_files_are_refused_as_not_text() {
    let sandbox = Sandbox::new("binary");
    std::fs::write(sandbox.root().join("b.bin"), [b'o', b'k', 0xff, 0x00]).unwrap();
    let error = sandbox
        .call("files_read", json!({"path": "b.bin"}))
        .await
        .unwrap_err();
    assert_eq!(error.reason, ErrorReason::Execution);
    assert_eq!(
        error.detail,
        "b.bin is not UTF-8 text (invalid byte sequence at byte 2); files_read returns text only"
    );
}

#[tokio::test]
async fn lists_name_kind_and_size() {
    let sandbox = Sandbox::new("list");
    let root = sandbox.root();
    std::fs::write(root.join("b.txt"), "12345").unwrap();
    std::fs::create_dir(root.join("a")).unwrap();
    std::fs::write(root.join("a/inner.txt"), "xy").unwrap();
    symlink(root.join("b.txt"), root.join("link")).unwrap();

    let flat = sandbox.call("files_list", json!({})).await.unwrap();
    assert_eq!(
        flat,
        json!({"path": ".", "count": 3, "truncated": false, "entries": [
            {"name": "a", "kind": "dir", "size": null},
            {"name": "b.txt", "kind": "file", "size": 5},
            {"name": "link", "kind": "symlink", "size": null},
        ]})
    );
    let deep = sandbox
        .call("files_list", json!({"recursive": true}))
        .await
        .unwrap();
    assert_eq!(
        deep["entries"],
        json!([
            {"name": "a", "kind": "dir", "size": null},
            {"name": "a/inner.txt", "kind": "file", "size": 2},
            {"name": "b.txt", "kind": "file", "size": 5},
            {"name": "link", "kind": "symlink", "size": null},
        ])
    );
    let sub = sandbox
        .call("files_list", json!({"path": "a"}))
        .await
        .unwrap();
    assert_eq!(
        sub,
        json!({"path": "a", "count": 1, "truncated": false, "entries": [
            {"name": "inner.txt", "kind": "file", "size": 2},
        ]})
    );
}

/// Root reads every directory whatever its mode, so as root this test
/// runs itself again in a process without the capabilities that allow it
/// (`setpriv`, from util-linux), and that copy does the check.
#[tokio::test]
async fn an_unreadable_subdirectory_is_named_and_the_rest_listed() {
    const COPY: &str = "HOMEAGENT_TEST_WITHOUT_DAC_CAPABILITIES";
    let root_user =
        std::os::unix::fs::MetadataExt::uid(&std::fs::metadata("/proc/self").unwrap()) == 0;
    if root_user && std::env::var_os(COPY).is_none() {
        let status = std::process::Command::new("setpriv")
            .arg("--bounding-set=-dac_override,-dac_read_search")
            .arg(std::env::current_exe().unwrap())
            .args([
                "--exact",
                "files::an_unreadable_subdirectory_is_named_and_the_rest_listed",
                "--nocapture",
            ])
            .env(COPY, "1")
            .status()
            .expect("running this test as root needs setpriv (util-linux)");
        assert!(status.success(), "the copy without the capabilities failed");
        return;
    }
    use std::os::unix::fs::PermissionsExt;
    let sandbox = Sandbox::new("unreadable");
    let root = sandbox.root();
    std::fs::write(root.join("a.txt"), "1").unwrap();
    std::fs::create_dir(root.join("open")).unwrap();
    std::fs::write(root.join("open/b.txt"), "22").unwrap();
    std::fs::create_dir(root.join("locked")).unwrap();
    std::fs::write(root.join("locked/c.txt"), "333").unwrap();
    let mode = |mode| {
        std::fs::set_permissions(root.join("locked"), std::fs::Permissions::from_mode(mode))
            .unwrap()
    };
    mode(0o000);
    let deep = sandbox.call("files_list", json!({"recursive": true})).await;
    let itself = sandbox.call("files_list", json!({"path": "locked"})).await;
    mode(0o755);
    assert_eq!(
        deep.unwrap(),
        json!({"path": ".", "count": 4, "truncated": false, "entries": [
            {"name": "a.txt", "kind": "file", "size": 1},
            {"name": "locked", "kind": "dir", "size": null},
            {"name": "open", "kind": "dir", "size": null},
            {"name": "open/b.txt", "kind": "file", "size": 2},
        ], "unreadable": [
            {"name": "locked", "error": "cannot list locked: permission denied"},
        ]})
    );
    // The directory asked for is still an error of the call.
    assert_eq!(
        itself.unwrap_err().detail,
        "cannot list locked: permission denied"
    );
}

#[tokio::test]
async fn dot_dot_escapes_are_refused() {
    let sandbox = Sandbox::new("dotdot");
    for path in ["../outside/secret.txt", "a/../../outside/secret.txt", ".."] {
        let error = sandbox.denied("files_read", json!({"path": path})).await;
        assert_eq!(
            error.detail,
            format!("path `{path}` climbs above the files root with `..`")
        );
    }
    sandbox
        .denied(
            "files_write",
            json!({"path": "../outside/new.txt", "content": "x"}),
        )
        .await;
    sandbox
        .denied("files_list", json!({"path": "../outside"}))
        .await;
    assert!(!sandbox.outside().join("new.txt").exists());
}

#[tokio::test]
async fn absolute_paths_outside_the_root_are_refused() {
    let sandbox = Sandbox::new("abs");
    let error = sandbox
        .denied("files_read", json!({"path": "/etc/passwd"}))
        .await;
    assert_eq!(
        error.detail,
        "path `/etc/passwd` is absolute and outside the files root"
    );
    let sneaky = format!("{}/../outside/secret.txt", sandbox.root().display());
    sandbox.denied("files_read", json!({"path": sneaky})).await;
    let target = sandbox.outside().join("new.txt");
    sandbox
        .denied(
            "files_write",
            json!({"path": target.to_str().unwrap(), "content": "x"}),
        )
        .await;
    assert!(!target.exists());
}

#[tokio::test]
async fn a_symlinked_file_pointing_out_is_refused() {
    let sandbox = Sandbox::new("symfile");
    symlink("/etc/passwd", sandbox.root().join("passwd")).unwrap();
    let error = sandbox
        .denied("files_read", json!({"path": "passwd"}))
        .await;
    assert_eq!(
        error.detail,
        "path `passwd` goes through the symlink `passwd`, which leads to `/etc/passwd`, outside the files root"
    );
    symlink("/etc", sandbox.root().join("etc")).unwrap();
    sandbox
        .denied("files_read", json!({"path": "etc/passwd"}))
        .await;
    sandbox.denied("files_list", json!({"path": "etc"})).await;
}

#[tokio::test]
async fn a_symlinked_directory_pointing_out_is_refused_for_every_tool() {
    let sandbox = Sandbox::new("symdir");
    symlink(sandbox.outside(), sandbox.root().join("out")).unwrap();
    sandbox
        .denied("files_read", json!({"path": "out/secret.txt"}))
        .await;
    sandbox.denied("files_list", json!({"path": "out"})).await;
    sandbox
        .denied(
            "files_write",
            json!({"path": "out/new.txt", "content": "x"}),
        )
        .await;
    sandbox
        .denied(
            "files_write",
            json!({"path": "out/deep/new.txt", "content": "x", "create_dirs": true}),
        )
        .await;
    assert!(!sandbox.outside().join("new.txt").exists());
    assert!(!sandbox.outside().join("deep").exists());
    // Listing the root shows the link but does not follow it.
    let listed = sandbox
        .call("files_list", json!({"recursive": true}))
        .await
        .unwrap();
    assert_eq!(
        listed["entries"],
        json!([{"name": "out", "kind": "symlink", "size": null}])
    );
}

#[tokio::test]
async fn writing_through_a_symlink_that_points_out_is_refused() {
    let sandbox = Sandbox::new("symwrite");
    // An existing target outside, and one that does not exist yet: writing
    // through the dangling link would create it outside.
    symlink(
        sandbox.outside().join("secret.txt"),
        sandbox.root().join("existing"),
    )
    .unwrap();
    symlink(
        sandbox.outside().join("planted.txt"),
        sandbox.root().join("dangling"),
    )
    .unwrap();
    for append in [false, true] {
        sandbox
            .denied(
                "files_write",
                json!({"path": "existing", "content": "pwned", "append": append}),
            )
            .await;
        let error = sandbox
            .denied(
                "files_write",
                json!({"path": "dangling", "content": "pwned", "append": append}),
            )
            .await;
        assert_eq!(
            error.detail,
            "path `dangling` goes through the symlink `dangling`, whose target does not exist or cannot be resolved"
        );
    }
    assert_eq!(
        std::fs::read_to_string(sandbox.outside().join("secret.txt")).unwrap(),
        "top secret"
    );
    assert!(!sandbox.outside().join("planted.txt").exists());
}

#[tokio::test]
async fn symlinks_that_stay_inside_the_root_work() {
    let sandbox = Sandbox::new("symin");
    let root = sandbox.root();
    std::fs::create_dir(root.join("real")).unwrap();
    std::fs::write(root.join("real/f.txt"), "inside").unwrap();
    symlink(root.join("real"), root.join("alias")).unwrap();
    let read = sandbox
        .call("files_read", json!({"path": "alias/f.txt"}))
        .await
        .unwrap();
    assert_eq!(read["content"], "inside");
    assert_eq!(read["path"], "real/f.txt");
    // Writing through an inside link writes the link's target.
    symlink(root.join("real/f.txt"), root.join("f-link")).unwrap();
    sandbox
        .call(
            "files_write",
            json!({"path": "f-link", "content": "changed"}),
        )
        .await
        .unwrap();
    assert_eq!(
        std::fs::read_to_string(root.join("real/f.txt")).unwrap(),
        "changed"
    );
    assert!(
        std::fs::symlink_metadata(root.join("f-link"))
            .unwrap()
            .file_type()
            .is_symlink()
    );
}

#[tokio::test]
async fn a_root_reached_through_a_symlink_still_confines() {
    // The configured root is itself a symlink: absolute paths written either
    // way are inside, and the outside is still outside.
    let tmp = TempDir::new("symroot");
    std::fs::create_dir(tmp.path().join("real-root")).unwrap();
    std::fs::write(tmp.path().join("real-root/a.txt"), "A").unwrap();
    symlink(tmp.path().join("real-root"), tmp.path().join("root-link")).unwrap();
    let registry = Registry::new();
    register_files_tools(&registry, FilesPolicy::new(tmp.path().join("root-link"))).unwrap();
    for path in [
        tmp.path().join("root-link/a.txt"),
        tmp.path().join("real-root/a.txt"),
    ] {
        let ctx = ToolContext {
            call_id: "c".into(),
            tool: "files_read".into(),
            arguments: json!({"path": path.to_str().unwrap()}),
            batch_id: "b".into(),
            extras: serde_json::Map::new().into(),
            cancel: Default::default(),
        };
        let read = registry.invoke("files_read", ctx).await.unwrap();
        assert_eq!(read["content"], "A");
    }
}

#[tokio::test]
async fn oversized_writes_are_refused_not_cut() {
    let sandbox = Sandbox::with("bigwrite", |p| p.max_write_bytes = 3);
    let error = sandbox
        .call("files_write", json!({"path": "w.txt", "content": "abcd"}))
        .await
        .unwrap_err();
    assert_eq!(error.reason, ErrorReason::InvalidArguments);
    assert_eq!(error.field.as_deref(), Some("content"));
    assert!(!sandbox.root().join("w.txt").exists());
}

/// The cap is the most a write may hold: exactly that many bytes are
/// written whole.
#[tokio::test]
async fn a_write_of_exactly_the_cap_is_accepted() {
    let sandbox = Sandbox::with("capwrite", |p| p.max_write_bytes = 3);
    sandbox
        .call("files_write", json!({"path": "w.txt", "content": "abc"}))
        .await
        .unwrap();
    assert_eq!(
        std::fs::read_to_string(sandbox.root().join("w.txt")).unwrap(),
        "abc"
    );
}

/// A parent that is a file, or a path through one, is named as what it
/// is, not as a missing directory (which `create_dirs` would be the cure
/// for).
#[tokio::test]
async fn a_write_below_a_file_says_the_parent_is_one() {
    let sandbox = Sandbox::new("parent-file");
    std::fs::write(sandbox.root().join("a.txt"), "x").unwrap();
    let error = sandbox
        .call(
            "files_write",
            json!({"path": "a.txt/b.txt", "content": "y"}),
        )
        .await
        .unwrap_err();
    assert_eq!(
        error.detail,
        "cannot write a.txt/b.txt: its parent a.txt is a file"
    );
    let error = sandbox
        .call(
            "files_write",
            json!({"path": "a.txt/sub/b.txt", "content": "y"}),
        )
        .await
        .unwrap_err();
    assert_eq!(
        error.detail,
        "cannot write a.txt/sub/b.txt: a component of the path is a file, not a directory"
    );
    assert_eq!(
        std::fs::read_to_string(sandbox.root().join("a.txt")).unwrap(),
        "x"
    );
}

/// The edges of a read window: an offset at the very end reads nothing
/// (one past it is an error); a byte that is no UTF-8 is refused wherever
/// the window ends, and so is a character the file itself cuts short; a
/// window too small for the character at its offset says so.
#[tokio::test]
async fn a_read_window_at_its_edges() {
    let sandbox = Sandbox::new("read-edges");
    std::fs::write(sandbox.root().join("abc.txt"), "abc").unwrap();
    let at_end = sandbox
        .call("files_read", json!({"path": "abc.txt", "offset": 3}))
        .await
        .unwrap();
    assert_eq!(
        at_end,
        json!({"path": "abc.txt", "content": "", "bytes": 0, "size": 3,
               "truncated": false, "next_offset": null})
    );
    let past = sandbox
        .call("files_read", json!({"path": "abc.txt", "offset": 4}))
        .await
        .unwrap_err();
    assert_eq!(
        past.detail,
        "offset 4 is past the end of abc.txt, which has 3 bytes"
    );

    std::fs::write(sandbox.root().join("bad.bin"), b"ok\xffabc").unwrap();
    let error = sandbox
        .call("files_read", json!({"path": "bad.bin", "max_bytes": 4}))
        .await
        .unwrap_err();
    assert!(
        error.detail.contains("invalid byte sequence at byte 2"),
        "{}",
        error.detail
    );
    // A continuation byte first in the file is not text, not a window
    // that starts inside a character.
    std::fs::write(sandbox.root().join("cont.bin"), b"\xa9abc").unwrap();
    let error = sandbox
        .call("files_read", json!({"path": "cont.bin"}))
        .await
        .unwrap_err();
    assert!(
        error.detail.contains("invalid byte sequence at byte 0"),
        "{}",
        error.detail
    );
    // "a" then the first two of the three bytes of "€", and the file ends.
    std::fs::write(sandbox.root().join("cut.txt"), b"a\xe2\x82").unwrap();
    let error = sandbox
        .call("files_read", json!({"path": "cut.txt"}))
        .await
        .unwrap_err();
    assert!(
        error.detail.contains("invalid byte sequence at byte 1"),
        "{}",
        error.detail
    );

    std::fs::write(sandbox.root().join("euro.txt"), "€").unwrap();
    let small = sandbox
        .call("files_read", json!({"path": "euro.txt", "max_bytes": 2}))
        .await
        .unwrap_err();
    assert_eq!(small.field.as_deref(), Some("max_bytes"));
    assert_eq!(
        small.detail,
        "max_bytes 2 is too small to hold the character at offset 0 of euro.txt"
    );
}

/// A required argument that is missing (a handler called without the
/// kernel's validation, as the programmatic API may) is an error naming
/// it, never an empty value: a write without `content` would empty the
/// file.
#[tokio::test]
async fn a_missing_required_argument_is_named_not_taken_as_empty() {
    let sandbox = Sandbox::new("required");
    std::fs::write(sandbox.root().join("keep.txt"), "kept").unwrap();
    let error = sandbox
        .call("files_write", json!({"path": "keep.txt"}))
        .await
        .unwrap_err();
    assert_eq!(
        (error.reason, error.detail.as_str(), error.field.as_deref()),
        (
            ErrorReason::Required,
            "the argument content is missing",
            Some("content")
        )
    );
    assert_eq!(
        std::fs::read_to_string(sandbox.root().join("keep.txt")).unwrap(),
        "kept"
    );
    // A path the system cannot look at is a failure to run, not a refusal.
    let error = sandbox
        .call("files_read", json!({"path": "n".repeat(300)}))
        .await
        .unwrap_err();
    assert_eq!(error.reason, ErrorReason::Execution, "{error:?}");
}

/// The documented defaults: 256 KiB per read, 1 MiB per write.
#[tokio::test]
async fn the_default_caps_are_256_kib_read_and_1_mib_written() {
    let sandbox = Sandbox::new("default-caps");
    let mib = "x".repeat(1024 * 1024);
    sandbox
        .call("files_write", json!({"path": "big.txt", "content": mib}))
        .await
        .unwrap();
    let read = sandbox
        .call("files_read", json!({"path": "big.txt"}))
        .await
        .unwrap();
    assert_eq!(read["bytes"], json!(256 * 1024));
    assert_eq!(read["truncated"], json!(true));
    let error = sandbox
        .call(
            "files_write",
            json!({"path": "big.txt", "content": format!("{mib}x")}),
        )
        .await
        .unwrap_err();
    assert_eq!(error.field.as_deref(), Some("content"));
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

#[tokio::test]
async fn through_the_executor_reads_run_in_parallel_and_a_write_makes_the_batch_serial() {
    let sandbox = Sandbox::new("exec");
    std::fs::write(sandbox.root().join("a.txt"), "A").unwrap();
    let executor = Executor::new(sandbox.registry.clone());
    let reads = turn(&[
        ("files_read", json!({"path": "a.txt"})),
        ("files_list", json!({})),
    ]);
    assert_eq!(executor.plan(&reads.calls), BatchMode::Parallel);
    let mixed = turn(&[
        ("files_write", json!({"path": "a.txt", "content": "B"})),
        ("files_read", json!({"path": "a.txt"})),
    ]);
    assert_eq!(
        executor.plan(&mixed.calls),
        BatchMode::Serial {
            reason: SerialReason::NotParallelSafe {
                tool: "files_write".into()
            }
        }
    );
    let result = executor.run(&mixed, &BatchContext::default()).await;
    assert!(result.outcomes[0].success, "{}", result.outcomes[0].text);
    // The read comes after the write in call order, so it sees it.
    let read: Value = serde_json::from_str(&result.outcomes[1].text).unwrap();
    assert_eq!(read["content"], "B");
    // The schema keeps unknown arguments out before the handler runs.
    let bad = turn(&[("files_read", json!({"path": "a.txt", "mode": "rb"}))]);
    let result = executor.run(&bad, &BatchContext::default()).await;
    let error = result.outcomes[0].error.as_ref().unwrap();
    assert_eq!(error.reason, ErrorReason::InvalidArguments, "{error:?}");
}

/// A FIFO in the root would block a read forever (and one of the runtime's
/// blocking threads with it); only regular files are read.
#[tokio::test]
async fn a_fifo_is_refused_not_waited_on() {
    let sandbox = Sandbox::new("fifo");
    let fifo = sandbox.root().join("pipe");
    let made = std::process::Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .unwrap();
    assert!(made.success());
    // Were an open to wait for the other end, this opens it for a while,
    // so a regression fails the test instead of hanging the test run. A
    // write end opened without waiting means a reader was there: a read
    // that did not wait is gone again within microseconds, one that waits
    // stays until this opens the other end (`rescued`).
    let other_end = fifo.clone();
    let rescued = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let rescue = Arc::clone(&rescued);
    std::thread::spawn(move || {
        use std::os::unix::fs::OpenOptionsExt;
        for _ in 0..300 {
            std::thread::sleep(std::time::Duration::from_millis(100));
            for write in [false, true] {
                let opened = std::fs::OpenOptions::new()
                    .read(!write)
                    .write(write)
                    .custom_flags(nix::fcntl::OFlag::O_NONBLOCK.bits())
                    .open(&other_end);
                if write && opened.is_ok() {
                    rescue.store(true, Ordering::SeqCst);
                }
            }
        }
    });
    let read = tokio::time::timeout(
        std::time::Duration::from_secs(20),
        sandbox.call("files_read", json!({"path": "pipe"})),
    )
    .await
    .expect("files_read blocked on a FIFO");
    assert!(
        !rescued.load(Ordering::SeqCst),
        "files_read waited on the FIFO until its other end was opened"
    );
    let error = read.unwrap_err();
    assert!(
        error.detail.contains("not a regular file"),
        "{}",
        error.detail
    );
    let append = tokio::time::timeout(
        std::time::Duration::from_secs(20),
        sandbox.call(
            "files_write",
            json!({"path": "pipe", "content": "x", "append": true}),
        ),
    )
    .await
    .expect("files_write blocked on a FIFO");
    assert!(append.is_err());
}

/// A FIFO, a socket or a device at the path is not replaced by a regular
/// file (a live socket of another program would be destroyed), and an
/// append to a FIFO nobody reads says what the file is.
#[tokio::test]
async fn only_regular_files_are_replaced_or_appended_to() {
    let sandbox = Sandbox::new("not-regular");
    let socket = sandbox.root().join("agent.sock");
    let _listener = std::os::unix::net::UnixListener::bind(&socket).unwrap();
    let fifo = sandbox.root().join("pipe");
    let made = std::process::Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .unwrap();
    assert!(made.success());
    for path in ["agent.sock", "pipe"] {
        let error = sandbox
            .call("files_write", json!({"path": path, "content": "x"}))
            .await
            .unwrap_err();
        assert!(
            error.detail.contains("not a regular file"),
            "{path}: {}",
            error.detail
        );
    }
    use std::os::unix::fs::FileTypeExt;
    assert!(
        std::fs::symlink_metadata(&socket)
            .unwrap()
            .file_type()
            .is_socket()
    );
    assert!(
        std::fs::symlink_metadata(&fifo)
            .unwrap()
            .file_type()
            .is_fifo()
    );
    let error = sandbox
        .call(
            "files_write",
            json!({"path": "pipe", "content": "x", "append": true}),
        )
        .await
        .unwrap_err();
    assert!(
        error.detail.contains("not a regular file"),
        "{}",
        error.detail
    );
}

/// A listing holds at most 1000 entries: the first by name, in order,
/// each file with its size, and says more were left out; a recursive one
/// walks only into directories it lists.
#[tokio::test]
async fn a_listing_keeps_the_first_thousand_entries_by_name() {
    let sandbox = Sandbox::new("list-cap");
    let big = sandbox.root().join("big");
    std::fs::create_dir_all(&big).unwrap();
    // Written in an order unlike the names', sizes telling them apart.
    for i in (0..1500).rev() {
        std::fs::write(big.join(format!("f{i:04}")), "x".repeat(i % 7)).unwrap();
    }
    std::fs::create_dir_all(big.join("z_dir")).unwrap();
    std::fs::write(big.join("z_dir/inner"), "").unwrap();
    for recursive in [false, true] {
        let listed = sandbox
            .call("files_list", json!({"path": "big", "recursive": recursive}))
            .await
            .unwrap();
        assert_eq!(listed["truncated"], true);
        assert_eq!(listed["count"], 1000);
        let entries = listed["entries"].as_array().unwrap();
        for (i, entry) in entries.iter().enumerate() {
            assert_eq!(entry["name"], format!("f{i:04}"), "{recursive}");
            assert_eq!(entry["size"], i % 7, "{recursive}");
        }
    }
}

/// A hard link in the root to a file outside it is the outside file: an
/// append through it would write there. Files with other links are not
/// appended to.
#[tokio::test]
async fn appending_through_a_hard_link_is_refused() {
    let sandbox = Sandbox::new("hardlink");
    let outside = sandbox.outside().join("outside.txt");
    std::fs::create_dir_all(sandbox.outside()).unwrap();
    std::fs::write(&outside, "outside\n").unwrap();
    std::fs::hard_link(&outside, sandbox.root().join("inside.txt")).unwrap();
    let error = sandbox
        .call(
            "files_write",
            json!({"path": "inside.txt", "content": "appended\n", "append": true}),
        )
        .await
        .unwrap_err();
    assert!(error.detail.contains("hard link"), "{}", error.detail);
    assert_eq!(std::fs::read_to_string(&outside).unwrap(), "outside\n");
}

/// The race `resolve` cannot rule out: a directory on the checked path is
/// swapped for a symlink leading out before the open. The open itself must
/// notice, for a file and for a directory alike.
#[test]
fn a_directory_swapped_for_a_symlink_after_the_check_is_caught_at_the_open() {
    let sandbox = Sandbox::new("swap");
    let root = Root::open(sandbox.root()).unwrap();
    std::fs::create_dir_all(sandbox.root().join("docs/inner")).unwrap();
    std::fs::write(sandbox.root().join("docs/note.txt"), "inside").unwrap();
    std::fs::create_dir_all(sandbox.outside().join("inner")).unwrap();
    std::fs::write(sandbox.outside().join("note.txt"), "outside").unwrap();
    let file = root.resolve("docs/note.txt").unwrap();
    let dir = root.resolve("docs/inner").unwrap();
    let (_, meta) = root.open_inside(&file, Access::Read, Expect::File).unwrap();
    assert_eq!(meta.len(), "inside".len() as u64);

    // The swap, after both paths were resolved.
    std::fs::rename(sandbox.root().join("docs"), sandbox.root().join("old")).unwrap();
    symlink(sandbox.outside(), sandbox.root().join("docs")).unwrap();

    for (path, expect) in [(&file, Expect::File), (&dir, Expect::Directory)] {
        let refused = root.open_inside(path, Access::Read, expect).unwrap_err();
        assert!(
            matches!(&refused, OpenRefusal::Escaped { opened, .. } if opened.starts_with(sandbox.outside().canonicalize().unwrap())),
            "{refused}"
        );
    }
    // An append that would create the file creates nothing outside: the
    // file is made through the checked directory, not the swapped path.
    let new_file = file.with_file_name("new.txt");
    let refused = root
        .open_inside(&new_file, Access::Append, Expect::File)
        .unwrap_err();
    assert!(
        matches!(
            refused,
            OpenRefusal::Escaped { .. } | OpenRefusal::Io { .. }
        ),
        "{refused}"
    );
    assert!(
        !sandbox.outside().join("new.txt").exists(),
        "the append created a file outside the root"
    );
    // A directory open finds a directory or nothing.
    let refused = root
        .open_directory_inside(&sandbox.root().canonicalize().unwrap().join("old/note.txt"))
        .unwrap_err();
    assert!(matches!(refused, OpenRefusal::Io { .. }), "{refused}");
    // A symlink at the last component is never followed.
    symlink(sandbox.outside().join("inner"), sandbox.root().join("link")).unwrap();
    let link = sandbox.root().canonicalize().unwrap().join("link");
    let refused = root
        .open_inside(&link, Access::Read, Expect::Directory)
        .unwrap_err();
    assert!(matches!(refused, OpenRefusal::Io { .. }), "{refused}");
}

/// Below a regular file nothing can exist, so `resolve` takes such a path
/// as missing and the operation says what is wrong; any other failure to
/// look at a component is named, never taken for "missing". An absolute
/// path inside the root may climb with `..` and stay inside; a directory
/// asked for as a file is called one.
#[test]
fn resolve_and_open_name_what_a_path_really_is() {
    let sandbox = Sandbox::new("resolve-kinds");
    let root = Root::open(sandbox.root()).unwrap();
    let canonical = sandbox.root().canonicalize().unwrap();
    std::fs::write(sandbox.root().join("a.txt"), "x").unwrap();
    std::fs::create_dir_all(sandbox.root().join("docs")).unwrap();
    assert_eq!(
        root.resolve("a.txt/b/c").unwrap(),
        canonical.join("a.txt/b/c")
    );
    let too_long = "n".repeat(300);
    assert!(
        matches!(root.resolve(&too_long), Err(PathRefusal::Io { .. })),
        "{:?}",
        root.resolve(&too_long)
    );
    let climbing = format!("{}/docs/../a.txt", sandbox.root().display());
    assert_eq!(root.resolve(&climbing).unwrap(), canonical.join("a.txt"));
    let refused = root
        .open_inside(&canonical.join("docs"), Access::Read, Expect::File)
        .unwrap_err();
    assert!(
        matches!(refused, OpenRefusal::Directory { .. }),
        "{refused}"
    );
}

#[tokio::test]
async fn listing_a_file_says_it_is_one() {
    let sandbox = Sandbox::new("list-file");
    std::fs::write(sandbox.root().join("a.txt"), "x").unwrap();
    let error = sandbox
        .call("files_list", json!({"path": "a.txt"}))
        .await
        .unwrap_err();
    assert!(
        error.detail.contains("a.txt is a file, not a directory"),
        "{}",
        error.detail
    );
    assert_eq!(error.hint.as_deref(), Some("use files_read to read a file"));
}

/// A files root that holds the agent's own config file or data directory
/// (`root = "."` beside the config, or a home directory) must not hand
/// them to the model: the config holds keys and the hook commands, the
/// data directory the store. Reads, writes and lists of them (through a
/// symlink inside the root too) are refused; the rest of the root works.
#[tokio::test]
async fn the_agents_own_config_and_data_are_private_inside_the_root() {
    let tmp = TempDir::new("private");
    let root = tmp.path().join("home");
    let data = root.join(".local/homeagent");
    std::fs::create_dir_all(&data).unwrap();
    let config = root.join("homeagent.toml");
    std::fs::write(&config, "api_key = \"SECRET\"\n").unwrap();
    std::fs::write(data.join("homeagent.db"), "store").unwrap();
    std::fs::write(root.join("notes.txt"), "mine").unwrap();
    symlink(&data, root.join("shortcut")).unwrap();
    let registry = Registry::new();
    let mut policy = FilesPolicy::new(&root);
    policy.private = vec![config.clone(), data.clone()];
    register_files_tools(&registry, policy).unwrap();
    let call = |tool: &'static str, arguments: Value| {
        let registry = &registry;
        async move {
            let ctx = ToolContext {
                call_id: "c1".into(),
                tool: tool.into(),
                arguments,
                batch_id: "b1".into(),
                extras: serde_json::Map::new().into(),
                cancel: Default::default(),
            };
            registry.invoke(tool, ctx).await
        }
    };
    for (tool, arguments) in [
        ("files_read", json!({"path": "homeagent.toml"})),
        (
            "files_write",
            json!({"path": "homeagent.toml", "content": "x"}),
        ),
        (
            "files_read",
            json!({"path": ".local/homeagent/homeagent.db"}),
        ),
        (
            "files_write",
            json!({"path": ".local/homeagent/new", "content": "x"}),
        ),
        ("files_read", json!({"path": "shortcut/homeagent.db"})),
        ("files_list", json!({"path": ".local/homeagent"})),
        ("files_list", json!({"path": "shortcut"})),
    ] {
        let refused = call(tool, arguments.clone()).await.unwrap_err();
        assert_eq!(
            refused.reason,
            ErrorReason::Denied,
            "{tool} {arguments}: {refused:?}"
        );
        assert!(refused.detail.contains("HomeAgent's own"), "{refused:?}");
    }
    assert_eq!(
        std::fs::read_to_string(&config).unwrap(),
        "api_key = \"SECRET\"\n"
    );
    assert!(!data.join("new").exists());
    let read = call("files_read", json!({"path": "notes.txt"}))
        .await
        .unwrap();
    assert_eq!(read["content"], "mine");
    // A recursive list of the root names the data directory but does not
    // walk into it.
    let listed = call("files_list", json!({"recursive": true}))
        .await
        .unwrap();
    let names: Vec<&str> = listed["entries"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["name"].as_str().unwrap())
        .collect();
    assert!(names.contains(&".local/homeagent"), "{names:?}");
    assert!(
        !names.iter().any(|n| n.contains("homeagent.db")),
        "{names:?}"
    );
    call("files_write", json!({"path": "more.txt", "content": "ok"}))
        .await
        .unwrap();

    // A private directory that holds the root (the default root is inside
    // the data directory) leaves the root usable.
    let registry = Registry::new();
    let inner = data.join("files");
    let mut policy = FilesPolicy::new(&inner);
    policy.private = vec![config, data.clone()];
    register_files_tools(&registry, policy).unwrap();
    std::fs::write(inner.join("own.txt"), "own").unwrap();
    let ctx = ToolContext {
        call_id: "c2".into(),
        tool: "files_read".into(),
        arguments: json!({"path": "own.txt"}),
        batch_id: "b2".into(),
        extras: serde_json::Map::new().into(),
        cancel: Default::default(),
    };
    let read = registry.invoke("files_read", ctx).await.unwrap();
    assert_eq!(read["content"], "own");
}

/// On a first run the data directory does not exist yet when the files
/// tools are set up, and it may be named through a symlink (or, on the
/// command line, relative to the working directory). It is still private
/// once it is made: its path is resolved as far as it exists, and the rest
/// added, instead of being kept as written and missed.
#[tokio::test]
async fn a_data_directory_made_after_the_tools_is_still_private() {
    let tmp = TempDir::new("private-later");
    let root = tmp.path().join("home");
    std::fs::create_dir_all(&root).unwrap();
    // The data directory as the person named it: through a link to the
    // root, and not there yet.
    let link = tmp.path().join("linked-home");
    symlink(&root, &link).unwrap();
    let data = link.join("state/homeagent");
    let registry = Registry::new();
    let mut policy = FilesPolicy::new(&root);
    policy.private = vec![data.clone()];
    register_files_tools(&registry, policy).unwrap();
    // The store is created afterwards, as `build` does.
    std::fs::create_dir_all(&data).unwrap();
    std::fs::write(data.join("homeagent.db"), "store").unwrap();
    let ctx = ToolContext {
        call_id: "c1".into(),
        tool: "files_read".into(),
        arguments: json!({"path": "state/homeagent/homeagent.db"}),
        batch_id: "b1".into(),
        extras: serde_json::Map::new().into(),
        cancel: Default::default(),
    };
    let refused = registry.invoke("files_read", ctx).await.unwrap_err();
    assert_eq!(refused.reason, ErrorReason::Denied, "{refused:?}");
    assert!(refused.detail.contains("HomeAgent's own"), "{refused:?}");
}

/// The files tools never wait for tokio's blocking pool: a path on an
/// unresponsive mount (a hard NFS mount whose server is gone) blocks a
/// file system call in the kernel for as long as the mount is gone, and a
/// pool thread so blocked was lost for good; a few such calls took every
/// thread the store's reads and commits need. Here the pool's only thread
/// is taken for the whole test, and every tool still answers.
#[test]
fn the_tools_answer_while_the_blocking_pool_is_taken() {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .max_blocking_threads(1)
        .build()
        .unwrap();
    let sandbox = Sandbox::new("pool-taken");
    let (release, taken) = std::sync::mpsc::channel::<()>();
    let (started, pool_busy) = std::sync::mpsc::channel::<()>();
    let blocker = runtime.spawn_blocking(move || {
        started.send(()).unwrap();
        let _ = taken.recv();
    });
    pool_busy.recv().unwrap();
    let answered = runtime.block_on(async {
        let within = std::time::Duration::from_secs(20);
        let mut answered = Vec::new();
        for (tool, arguments) in [
            (
                "files_write",
                json!({"path": "a/b.txt", "content": "one", "create_dirs": true}),
            ),
            (
                "files_write",
                json!({"path": "a/b.txt", "content": " two", "append": true}),
            ),
            ("files_read", json!({"path": "a/b.txt"})),
            ("files_list", json!({"path": "a", "recursive": true})),
        ] {
            match tokio::time::timeout(within, sandbox.call(tool, arguments)).await {
                Ok(result) => answered.push(result.unwrap()),
                Err(_) => panic!("{tool} waited for the blocking pool"),
            }
        }
        answered
    });
    release.send(()).unwrap();
    runtime.block_on(blocker).unwrap();
    assert_eq!(answered[2]["content"], "one two");
    assert_eq!(answered[3]["entries"][0]["name"], "b.txt");
}
