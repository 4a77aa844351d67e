//! `files_write {path, content, append?, create_dirs?}`: writes a text file
//! under the root.
//!
//! Replacing is atomic: the content goes to a temporary file in the target's
//! own directory (same file system, so the rename cannot turn into a copy),
//! is flushed to disk, and is renamed over the target. A failure removes the
//! temporary file. All of it goes through one descriptor of that directory,
//! checked to be inside the root once opened: a parent swapped for a symlink
//! leading out after `resolve` checked the path is refused, and one swapped
//! after the check cannot redirect the rename. Appending opens the existing file in append mode, which
//! cannot be atomic for a partial failure but never loses what was there.
//!
//! The tool is `serial`: a batch that writes runs in call order.

use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use homeagent_core::{ErrorReason, Registry, RegistryError, ToolContext, ToolDef, ToolError};
use std::io::Write;

use serde_json::{Value, json};

use super::{Access, OpenRefusal, Root, Shared, bool_arg, on_own_thread, string_arg};
use crate::off_thread::Wanted;

/// Prefix of temporary files, so a leftover from a crash is recognisable.
pub const TEMP_PREFIX: &str = ".homeagent-write-";

pub(super) fn register(registry: &Registry, shared: Arc<Shared>) -> Result<(), RegistryError> {
    let max = shared.policy.max_write_bytes;
    registry.register(
        ToolDef::new(
            "files_write",
            format!(
                "Writes a UTF-8 text file under the files root (at most {max} bytes per call): \
                 replaces it atomically, or appends with append: true. Missing parent directories \
                 are created only with create_dirs: true. Serial: a batch that writes runs in order."
            ),
        )
        .with_parameters(json!({
            "type": "object",
            "properties": {
                "path": {"type": "string", "description": "file path, relative to the files root"},
                "content": {"type": "string", "description": "the text to write"},
                "append": {"type": "boolean", "description": "append instead of replacing (default false)"},
                "create_dirs": {"type": "boolean", "description": "create missing parent directories (default false)"}
            },
            "required": ["path", "content"],
            "additionalProperties": false
        }))
        .serial(),
        move |ctx: ToolContext| {
            let shared = Arc::clone(&shared);
            on_own_thread("files_write", move |wanted| {
                write(&shared, &ctx.arguments, wanted)
            })
        },
    )
}

/// The call, blocking: on its own thread ([`on_own_thread`]).
/// Before each effect it asks whether its caller still waits (`wanted`):
/// a call given up on (its timeout, a stop) while a mount hung does not
/// go on to write when the mount comes back.
fn write(shared: &Shared, arguments: &Value, wanted: &Wanted) -> Result<Value, ToolError> {
    let user_path = string_arg(arguments, "path", true)?.unwrap_or_default();
    let content = string_arg(arguments, "content", true)?.unwrap_or_default();
    let append = bool_arg(arguments, "append")?;
    let create_dirs = bool_arg(arguments, "create_dirs")?;
    let max = shared.policy.max_write_bytes;
    if content.len() as u64 > max {
        return Err(ToolError::new(
            ErrorReason::InvalidArguments,
            format!(
                "content is {} bytes; files_write accepts at most {max}",
                content.len()
            ),
        )
        .with_field("content")
        .with_hint(
            "write the file in parts: the first call without append, the rest with append: true",
        ));
    }
    let path = shared.resolve(user_path)?;
    let shown = shared.shown(&path);
    let Some(parent) = path.parent().filter(|_| path != shared.root.canonical()) else {
        return Err(
            ToolError::execution("cannot write to the files root itself; name a file")
                .with_field("path")
                .with_hint(shared.root_hint()),
        );
    };
    match std::fs::metadata(parent) {
        Ok(meta) if meta.is_dir() => {}
        Ok(_) => {
            return Err(ToolError::execution(format!(
                "cannot write {shown}: its parent {} is a file",
                shared.shown(parent)
            ))
            .with_field("path"));
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound && create_dirs => {
            given_up(wanted)?;
            match create_dirs_in_root(shared.root.canonical(), parent) {
                Ok(()) => {}
                Err(ReplaceError::NotRegular) => return Err(not_regular(&shown)),
                Err(ReplaceError::GivenUp) => return Err(given_up_error()),
                Err(ReplaceError::Io(e)) => {
                    return Err(shared.io_error("create the directories of", &path, &e));
                }
                Err(ReplaceError::Outside(opened)) => {
                    return Err(ToolError::new(
                        ErrorReason::Denied,
                        format!(
                            "cannot create the directories of {shown}: {} is not a directory \
                             inside the files root (the path changed while it was being written)",
                            opened.display()
                        ),
                    )
                    .with_field("path")
                    .with_hint(shared.root_hint()));
                }
            }
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Err(ToolError::execution(format!(
                "cannot write {shown}: the directory {} does not exist",
                shared.shown(parent)
            ))
            .with_field("path")
            .with_hint("pass create_dirs: true to create missing directories"));
        }
        Err(e) => return Err(shared.io_error("write", &path, &e)),
    }
    if std::fs::metadata(&path).is_ok_and(|m| m.is_dir()) {
        return Err(
            ToolError::execution(format!("cannot write {shown}: it is a directory"))
                .with_field("path"),
        );
    }

    let existed = std::fs::symlink_metadata(&path).is_ok();
    let length = content.len();
    if append {
        given_up(wanted)?;
        let mut file = shared.open_checked("append to", &path, Access::Append)?;
        given_up(wanted)?;
        append_to(&mut file, content.as_bytes())
            .map_err(|e| shared.io_error("append to", &path, &e))?;
    } else {
        let Some(name) = path.file_name().map(OsStr::to_owned) else {
            return Err(
                ToolError::execution(format!("cannot write {shown}: it names no file"))
                    .with_field("path"),
            );
        };
        match replace_in_dir(&shared.root, parent, &name, content.as_bytes(), wanted) {
            Ok(()) => {}
            Err(ReplaceError::NotRegular) => return Err(not_regular(&shown)),
            Err(ReplaceError::GivenUp) => return Err(given_up_error()),
            Err(ReplaceError::Io(e)) => return Err(shared.io_error("write", &path, &e)),
            Err(ReplaceError::Outside(opened)) => {
                return Err(ToolError::new(
                    ErrorReason::Denied,
                    format!(
                        "cannot write {shown}: its directory is {}, outside the files root \
                         (the path changed while it was being written)",
                        opened.display()
                    ),
                )
                .with_field("path")
                .with_hint(shared.root_hint()));
            }
        }
    }
    tracing::debug!(path = %shown, bytes = length, append, "files_write");
    Ok(json!({
        "path": shown,
        "bytes_written": length,
        "appended": append,
        "created": !existed,
    }))
}

fn append_to(file: &mut std::fs::File, bytes: &[u8]) -> std::io::Result<()> {
    file.write_all(bytes)?;
    file.sync_all()
}

/// Fails when the call's caller stopped waiting (see [`write`]).
fn given_up(wanted: &Wanted) -> Result<(), ToolError> {
    if wanted.still() {
        Ok(())
    } else {
        Err(given_up_error())
    }
}

/// Nobody reads it (the caller has gone); it ends the work before an
/// effect.
fn given_up_error() -> ToolError {
    ToolError::new(
        ErrorReason::Cancelled,
        "files_write was given up on before it wrote anything",
    )
}

/// The refusal of a path that names a FIFO, a socket or a device.
fn not_regular(shown: &str) -> ToolError {
    ToolError::execution(format!(
        "cannot write {shown}: it is not a regular file (a FIFO, socket or device), which \
         files_write never replaces or appends to"
    ))
    .with_field("path")
}

#[derive(Debug)]
enum ReplaceError {
    /// The directory opened is this one, outside the root: the path changed
    /// after it was checked.
    Outside(PathBuf),
    /// The path names a FIFO, a socket or a device: never replaced.
    NotRegular,
    /// The caller stopped waiting before the rename: nothing replaced.
    GivenUp,
    Io(std::io::Error),
}

impl From<std::io::Error> for ReplaceError {
    fn from(error: std::io::Error) -> Self {
        ReplaceError::Io(error)
    }
}

impl From<nix::Error> for ReplaceError {
    fn from(errno: nix::Error) -> Self {
        ReplaceError::Io(errno.into())
    }
}

/// Makes the missing directories of `dir` (under `root`, both as
/// `resolve` left them: canonical, no symlinks), one at a time, each made
/// and opened relative to its parent's descriptor, never following a
/// symlink: a component swapped for a symlink leading out after the check
/// is refused instead of followed, and nothing is made outside the root.
fn create_dirs_in_root(root: &Path, dir: &Path) -> Result<(), ReplaceError> {
    use nix::errno::Errno;
    use nix::fcntl::{OFlag, open, openat};
    use nix::sys::stat::{Mode, mkdirat};
    use std::path::Component;

    let Ok(relative) = dir.strip_prefix(root) else {
        return Err(ReplaceError::Outside(dir.to_owned()));
    };
    let flags = OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC;
    let mut current = open(root, flags, Mode::empty())?;
    let mut walked = root.to_owned();
    for component in relative.components() {
        let Component::Normal(name) = component else {
            return Err(ReplaceError::Outside(dir.to_owned()));
        };
        walked.push(name);
        match mkdirat(&current, name, Mode::from_bits_truncate(0o777)) {
            Ok(()) | Err(Errno::EEXIST) => {}
            Err(errno) => return Err(errno.into()),
        }
        current = match openat(&current, name, flags, Mode::empty()) {
            Ok(fd) => fd,
            // A symlink (ELOOP) or a file (ENOTDIR) where a directory was.
            Err(Errno::ELOOP | Errno::ENOTDIR) => return Err(ReplaceError::Outside(walked)),
            Err(errno) => return Err(errno.into()),
        };
    }
    Ok(())
}

/// Replaces the file `name` in the directory `dir` with `bytes`, through a
/// descriptor of `dir` opened by [`Root::open_directory_inside`]. Blocking:
/// run it off the async workers.
fn replace_in_dir(
    root: &Root,
    dir: &Path,
    name: &OsStr,
    bytes: &[u8],
    wanted: &Wanted,
) -> Result<(), ReplaceError> {
    use nix::fcntl::{AtFlags, renameat};
    use nix::sys::stat::{Mode, SFlag, fchmod, fstatat};
    use nix::unistd::{UnlinkatFlags, unlinkat};
    use std::io::Write;

    let dir_fd = root
        .open_directory_inside(dir)
        .map_err(|refusal| match refusal {
            OpenRefusal::Escaped { opened, .. } => ReplaceError::Outside(opened),
            OpenRefusal::Io { source, .. } => ReplaceError::Io(source),
            other => ReplaceError::Io(std::io::Error::other(other.to_string())),
        })?;
    // Keep the permissions of the file being replaced (an executable
    // script stays executable), but never setuid, setgid or sticky: the
    // content is new. A symlink at `name` is replaced, not followed.
    // A FIFO, a socket or a device is not replaced: another program's
    // live socket would be gone.
    let final_mode = match fstatat(&dir_fd, name, AtFlags::AT_SYMLINK_NOFOLLOW) {
        Ok(stat) => match SFlag::from_bits_truncate(stat.st_mode) & SFlag::S_IFMT {
            SFlag::S_IFREG => Mode::from_bits_truncate(stat.st_mode & 0o777),
            SFlag::S_IFLNK => Mode::from_bits_truncate(0o666 & !process_umask()),
            _ => return Err(ReplaceError::NotRegular),
        },
        Err(_) => Mode::from_bits_truncate(0o666 & !process_umask()),
    };
    let (temp_fd, temp) = create_temp(&dir_fd, (0..8).map(|_| temp_name()))?;
    let replaced = (|| -> Result<(), ReplaceError> {
        let mut file = std::fs::File::from(temp_fd);
        file.write_all(bytes)?;
        fchmod(&file, final_mode)?;
        file.sync_all()?;
        // The last moment to give up: a caller told its call timed out
        // must not find the file replaced after all.
        if !wanted.still() {
            return Err(ReplaceError::GivenUp);
        }
        renameat(&dir_fd, temp.as_str(), &dir_fd, name)?;
        Ok(())
    })();
    if replaced.is_err() {
        let _ = unlinkat(&dir_fd, temp.as_str(), UnlinkatFlags::NoRemoveDir);
    }
    replaced?;
    // The rename is on disk once the directory is. The file is replaced
    // either way, so a failure here is logged, not reported as a failed
    // write.
    if let Err(error) = std::fs::File::from(dir_fd).sync_all() {
        tracing::warn!(dir = %dir.display(), %error, "files_write: syncing the directory after the rename failed");
    }
    Ok(())
}

/// Mode a temporary file is created with: private from its first byte (it
/// holds the new content before it is renamed into place); its final mode
/// is set just before the rename.
const TEMP_CREATE_MODE: u32 = 0o600;

/// Creates the first of `names` that does not exist yet in `dir` (one left
/// by a crash is skipped, not an error).
fn create_temp(
    dir: &std::os::fd::OwnedFd,
    names: impl IntoIterator<Item = String>,
) -> Result<(std::os::fd::OwnedFd, String), ReplaceError> {
    use nix::errno::Errno;
    use nix::fcntl::{OFlag, openat};
    use nix::sys::stat::Mode;
    let flags =
        OFlag::O_WRONLY | OFlag::O_CREAT | OFlag::O_EXCL | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC;
    let mut last = Errno::EEXIST;
    for name in names {
        match openat(
            dir,
            name.as_str(),
            flags,
            Mode::from_bits_truncate(TEMP_CREATE_MODE),
        ) {
            Ok(fd) => return Ok((fd, name)),
            Err(Errno::EEXIST) => last = Errno::EEXIST,
            Err(errno) => return Err(errno.into()),
        }
    }
    Err(last.into())
}

/// The process's umask, read without changing it (`/proc/self/status`);
/// 022 where that cannot be read. Read once: HomeAgent never changes it,
/// and a status file per new file written is work for nothing.
fn process_umask() -> u32 {
    static UMASK: std::sync::OnceLock<u32> = std::sync::OnceLock::new();
    *UMASK.get_or_init(|| {
        std::fs::read_to_string("/proc/self/status")
            .ok()
            .and_then(|status| {
                let line = status.lines().find(|l| l.starts_with("Umask:"))?;
                u32::from_str_radix(line["Umask:".len()..].trim(), 8).ok()
            })
            .unwrap_or(0o022)
    })
}

/// A file name no other writer will pick: the pid and a counter tell this
/// process's writes apart, the clock's nanoseconds a restarted process
/// with the same pid (PID 1 in a container) from its crashed predecessor.
fn temp_name() -> String {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos());
    format!("{TEMP_PREFIX}{}-{nanos:08x}-{n}.tmp", std::process::id())
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    struct Dirs {
        base: PathBuf,
    }

    impl Drop for Dirs {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.base);
        }
    }

    /// `<base>/root` and `<base>/outside`, canonical.
    fn dirs(label: &str) -> (Dirs, PathBuf, PathBuf) {
        let base = std::env::temp_dir().join(format!(
            "homeagent-replace-{label}-{}-{:?}",
            std::process::id(),
            std::time::SystemTime::now()
        ));
        std::fs::create_dir_all(base.join("root")).unwrap();
        std::fs::create_dir_all(base.join("outside")).unwrap();
        let base = base.canonicalize().unwrap();
        let (root, outside) = (base.join("root"), base.join("outside"));
        (Dirs { base }, root, outside)
    }

    /// A write whose caller gave up (its timeout, while a mount hung)
    /// replaces nothing when it gets to the rename, and leaves no
    /// temporary file.
    #[test]
    fn a_write_given_up_on_replaces_nothing() {
        let (_dirs, root, _outside) = dirs("given-up");
        std::fs::write(root.join("a.txt"), "old").unwrap();
        let tree = Root::open(&root).unwrap();
        let given_up = replace_in_dir(
            &tree,
            &root,
            OsStr::new("a.txt"),
            b"new",
            &Wanted::for_test(false),
        );
        assert!(
            matches!(given_up, Err(ReplaceError::GivenUp)),
            "{given_up:?}"
        );
        assert_eq!(std::fs::read_to_string(root.join("a.txt")).unwrap(), "old");
        assert_eq!(
            std::fs::read_dir(&root).unwrap().count(),
            1,
            "a temporary file was left"
        );
        replace_in_dir(
            &tree,
            &root,
            OsStr::new("a.txt"),
            b"new",
            &Wanted::for_test(true),
        )
        .unwrap();
        assert_eq!(std::fs::read_to_string(root.join("a.txt")).unwrap(), "new");
    }

    #[test]
    fn a_directory_that_leads_out_of_the_root_when_opened_is_refused() {
        let (_dirs, root, outside) = dirs("out");
        // What `resolve` checked was a directory inside the root; by the
        // time the write runs it is a symlink to a directory outside.
        std::os::unix::fs::symlink(&outside, root.join("docs")).unwrap();

        let tree = Root::open(&root).unwrap();
        let refused = replace_in_dir(
            &tree,
            &root.join("docs"),
            OsStr::new("a.txt"),
            b"x",
            &Wanted::for_test(true),
        );

        // Refused at the open (the last component is never followed).
        match refused {
            // ENOTDIR: with O_DIRECTORY the kernel names the symlink not a
            // directory rather than a loop.
            Err(ReplaceError::Io(e)) => assert!(
                matches!(
                    e.raw_os_error(),
                    Some(nix::libc::ENOTDIR | nix::libc::ELOOP)
                ),
                "{e}"
            ),
            other => panic!("expected a refused open, got {other:?}"),
        }
        // A swapped directory higher up is followed by the open, and then
        // caught by where the descriptor really is.
        std::fs::create_dir(outside.join("sub")).unwrap();
        let refused = replace_in_dir(
            &tree,
            &root.join("docs/sub"),
            OsStr::new("a.txt"),
            b"x",
            &Wanted::for_test(true),
        );
        match refused {
            Err(ReplaceError::Outside(opened)) => assert_eq!(opened, outside.join("sub")),
            other => panic!("expected Outside, got {other:?}"),
        }
        assert_eq!(std::fs::read_dir(outside.join("sub")).unwrap().count(), 0);
    }

    #[test]
    fn a_replace_writes_the_bytes_keeps_the_mode_and_leaves_no_temporary_file() {
        use std::os::unix::fs::PermissionsExt;
        let (_dirs, root, _) = dirs("keep");
        let script = root.join("run.sh");
        std::fs::write(&script, "old").unwrap();
        std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o750)).unwrap();

        let tree = Root::open(&root).unwrap();
        replace_in_dir(
            &tree,
            &root,
            OsStr::new("run.sh"),
            b"new",
            &Wanted::for_test(true),
        )
        .unwrap();

        assert_eq!(std::fs::read_to_string(&script).unwrap(), "new");
        let mode = std::fs::metadata(&script).unwrap().permissions().mode() & 0o7777;
        assert_eq!(mode, 0o750);
        let names: Vec<_> = std::fs::read_dir(&root)
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names, vec![std::ffi::OsString::from("run.sh")]);
    }

    #[test]
    fn missing_directories_are_made_inside_the_root_and_never_through_a_swapped_one() {
        let (_dirs, root, outside) = dirs("mkdirs");
        create_dirs_in_root(&root, &root.join("a/b/c")).unwrap();
        assert!(root.join("a/b/c").is_dir());
        // Again: what exists is fine.
        create_dirs_in_root(&root, &root.join("a/b/c")).unwrap();

        // `resolve` saw `x` missing; by now it is a symlink leading out.
        std::os::unix::fs::symlink(&outside, root.join("x")).unwrap();
        let refused = create_dirs_in_root(&root, &root.join("x/made"));
        assert!(
            matches!(refused, Err(ReplaceError::Outside(_))),
            "{refused:?}"
        );
        assert_eq!(std::fs::read_dir(&outside).unwrap().count(), 0);

        // A file where a directory should be is a path that changed too.
        std::fs::write(root.join("f"), "file").unwrap();
        let refused = create_dirs_in_root(&root, &root.join("f/sub"));
        assert!(
            matches!(refused, Err(ReplaceError::Outside(_))),
            "{refused:?}"
        );

        // A directory outside the root is never a starting point.
        let refused = create_dirs_in_root(&root, &outside.join("y"));
        assert!(
            matches!(refused, Err(ReplaceError::Outside(_))),
            "{refused:?}"
        );
        assert!(!outside.join("y").exists());
    }

    /// The temporary file is private from its first byte (it holds the new
    /// content before the rename), the replaced file's mode is kept without
    /// setuid/setgid, and a new file gets the usual 0666 less the umask.
    #[test]
    fn the_temporary_file_is_private_and_modes_never_gain_setuid() {
        use std::os::unix::fs::PermissionsExt;
        let (_dirs, root, _) = dirs("modes");
        // A new file gets the mode any program's new file gets here (the
        // kernel applies the umask to this one).
        std::fs::write(root.join("by-std"), "x").unwrap();
        let usual = std::fs::metadata(root.join("by-std"))
            .unwrap()
            .permissions()
            .mode()
            & 0o7777;
        let tree = Root::open(&root).unwrap();
        replace_in_dir(
            &tree,
            &root,
            OsStr::new("new.txt"),
            b"x",
            &Wanted::for_test(true),
        )
        .unwrap();
        let mode = std::fs::metadata(root.join("new.txt"))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o7777, usual);
        // A symlink at the name is replaced by a new file, which does not
        // take the link's own mode (0777).
        std::os::unix::fs::symlink(root.join("by-std"), root.join("link")).unwrap();
        replace_in_dir(
            &tree,
            &root,
            OsStr::new("link"),
            b"y",
            &Wanted::for_test(true),
        )
        .unwrap();
        let meta = std::fs::symlink_metadata(root.join("link")).unwrap();
        assert!(meta.file_type().is_file());
        assert_eq!(meta.permissions().mode() & 0o7777, usual);
        // A setuid file replaced by the model keeps 0755, not 4755.
        let tool = root.join("tool");
        std::fs::write(&tool, "old").unwrap();
        std::fs::set_permissions(&tool, std::fs::Permissions::from_mode(0o4755)).unwrap();
        replace_in_dir(
            &tree,
            &root,
            OsStr::new("tool"),
            b"new",
            &Wanted::for_test(true),
        )
        .unwrap();
        let mode = std::fs::metadata(&tool).unwrap().permissions().mode();
        assert_eq!(mode & 0o7777, 0o755);
        // The temporary file's mode at creation, before anything is written.
        use nix::fcntl::{OFlag, open};
        use nix::sys::stat::Mode;
        let dir = open(&root, OFlag::O_RDONLY | OFlag::O_DIRECTORY, Mode::empty()).unwrap();
        let (_file, name) = create_temp(&dir, ["probe.tmp".to_owned()]).unwrap();
        let mode = std::fs::metadata(root.join(name))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o600);
    }

    /// A temporary file left by a crash under the same name (same pid after
    /// a restart, as PID 1 in a container always is) does not block the
    /// write: the next name is tried.
    #[test]
    fn a_leftover_temporary_file_does_not_block_a_write() {
        use nix::fcntl::{OFlag, open};
        use nix::sys::stat::Mode;
        let (_dirs, root, _) = dirs("leftover");
        std::fs::write(root.join("taken.tmp"), "crash").unwrap();
        let dir = open(&root, OFlag::O_RDONLY | OFlag::O_DIRECTORY, Mode::empty()).unwrap();
        let names = ["taken.tmp".to_owned(), "free.tmp".to_owned()];
        let (_file, name) = create_temp(&dir, names).unwrap();
        assert_eq!(name, "free.tmp");
        assert_eq!(
            std::fs::read_to_string(root.join("taken.tmp")).unwrap(),
            "crash"
        );
        // Names differ from call to call even in one process and one instant.
        assert_ne!(temp_name(), temp_name());
    }
}
