//! The files tools: `files_read`, `files_list` and `files_write`, confined to
//! one root directory.
//!
//! Why a root: the model names paths, and a model can be talked into naming
//! `~/.ssh/id_ed25519`. Every path argument goes through [`Root::resolve`],
//! the single function that decides whether a path is inside the root
//! (see [`root`] for the rules), so no tool can forget a check.
//!
//! Scheduling, declared by each tool: reading and listing change nothing and
//! may run beside anything (`parallel_safe`, `read_only`); writing is
//! `serial`, so a batch that writes runs in call order and a read in the same
//! batch sees the write or not depending only on where the model put it.
//!
//! Writes replace a file atomically (a temporary file in the same directory,
//! then a rename), so a reader never sees half a file and a crash leaves the
//! old content or the new one, never a mix.

mod list;
mod read;
pub mod root;
mod write;

use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use homeagent_core::{ErrorReason, Registry, RegistryError, ToolError};
use serde_json::Value;

use crate::off_thread::{OffThreadError, ThreadBudget, Wanted, off_thread_watched};

pub use root::{
    Access, Expect, OpenRefusal, PathRefusal, Root, descriptor_path, resolved_as_far_as_it_exists,
};

/// Default cap on the bytes one `files_read` call returns.
pub const DEFAULT_MAX_READ_BYTES: u64 = 256 * 1024;
/// Default cap on the bytes one `files_write` call writes.
pub const DEFAULT_MAX_WRITE_BYTES: u64 = 1024 * 1024;
/// Most entries one `files_list` call returns.
pub const MAX_LIST_ENTRIES: usize = 1000;

/// Where the files tools may look and how much they may move at once.
#[derive(Debug, Clone)]
pub struct FilesPolicy {
    /// The directory every path is relative to; created when missing.
    pub root: PathBuf,
    /// Most bytes one read returns; a larger `max_bytes` argument is lowered
    /// to this.
    pub max_read_bytes: u64,
    /// Most bytes one write accepts; larger content is refused, not cut.
    pub max_write_bytes: u64,
    /// HomeAgent's own files (the config file, the data directory): never
    /// read, written or listed where they lie inside the root (see
    /// [`Root::with_private`]).
    pub private: Vec<PathBuf>,
}

impl FilesPolicy {
    /// A policy for `root` with the default limits.
    pub fn new(root: impl Into<PathBuf>) -> Self {
        FilesPolicy {
            root: root.into(),
            max_read_bytes: DEFAULT_MAX_READ_BYTES,
            max_write_bytes: DEFAULT_MAX_WRITE_BYTES,
            private: Vec::new(),
        }
    }
}

/// Why the files tools could not be registered.
#[derive(Debug, thiserror::Error)]
pub enum FilesSetupError {
    #[error("cannot use {root} as the files root: {source}")]
    Root {
        root: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error(transparent)]
    Registry(#[from] RegistryError),
}

/// Files tools' calls whose callers stopped waiting, still blocked: at
/// most this many threads are left to the kernel at once.
static FILE_CALLS: ThreadBudget = ThreadBudget::new(16);

/// Runs `work`, the whole of one files tool's call, on a thread of its own
/// (`off_thread`): resolving a path, opening it, reading, listing and
/// writing may each block in the kernel for ever on an unresponsive mount,
/// which must cost neither an async worker nor a thread of the blocking
/// pool the store needs. A call that times out leaves its thread behind;
/// once 16 are, calls are refused at once until some return. `work` is
/// told whether its caller still waits ([`Wanted`]), so a write given up
/// on does not happen later.
pub(crate) async fn on_own_thread(
    tool: &'static str,
    work: impl FnOnce(&Wanted) -> Result<Value, ToolError> + Send + 'static,
) -> Result<Value, ToolError> {
    match off_thread_watched(&FILE_CALLS, tool, work).await {
        Ok(answer) => answer,
        Err(error @ OffThreadError::TooManyStuck { .. }) => Err(ToolError::execution(format!(
            "{tool} could not run: {error}"
        ))
        .with_hint(
            "ask the machine's operator to check its mounts (a network mount whose server is \
             gone hangs every program that touches it)",
        )),
        Err(error) => Err(ToolError::execution(format!(
            "{tool} could not run: {error}"
        ))),
    }
}

/// What every handler shares: the root and the limits.
#[derive(Debug)]
pub(crate) struct Shared {
    pub(crate) root: Root,
    pub(crate) policy: FilesPolicy,
}

/// Registers `files_read`, `files_list` and `files_write`, creating the root
/// directory when it is missing.
pub fn register_files_tools(
    registry: &Registry,
    policy: FilesPolicy,
) -> Result<(), FilesSetupError> {
    let root = Root::open(&policy.root)
        .map_err(|source| FilesSetupError::Root {
            root: policy.root.clone(),
            source,
        })?
        .with_private(policy.private.iter().cloned());
    tracing::debug!(root = %root.canonical().display(), "files tools confined");
    let shared = Arc::new(Shared { root, policy });
    read::register(registry, shared.clone())?;
    list::register(registry, shared.clone())?;
    write::register(registry, shared)?;
    Ok(())
}

impl Shared {
    /// Resolves the `path` argument, mapping a refusal to the error the
    /// model reads.
    pub(crate) fn resolve(&self, user_path: &str) -> Result<PathBuf, ToolError> {
        self.root.resolve(user_path).map_err(|refusal| {
            let reason = match refusal {
                PathRefusal::Io { .. } => ErrorReason::Execution,
                _ => ErrorReason::Denied,
            };
            ToolError::new(reason, refusal.to_string())
                .with_field("path")
                .with_hint(self.root_hint())
        })
    }

    /// Opens `resolved` for the files tools through [`Root::open_inside`]
    /// (no symlink at the last component, no waiting on a FIFO, the opened
    /// file's own path still inside the root, only regular files), and
    /// refuses to append to a file with other hard links (which may be
    /// outside the root).
    pub(crate) fn open_checked(
        &self,
        action: &'static str,
        resolved: &Path,
        access: Access,
    ) -> Result<std::fs::File, ToolError> {
        let opened = self.root.open_inside(resolved, access, Expect::File);
        let (file, meta) = opened.map_err(|refusal| self.refused(action, resolved, refusal))?;
        if access == Access::Append {
            use std::os::unix::fs::MetadataExt;
            if meta.nlink() > 1 {
                return Err(ToolError::new(
                    ErrorReason::Denied,
                    format!(
                        "cannot {action} {}: it has {} hard links, and another may be \
                         outside the files root",
                        self.shown(resolved),
                        meta.nlink()
                    ),
                )
                .with_field("path")
                .with_hint(
                    "write a new file instead (files_write without append replaces the link)",
                ));
            }
        }
        Ok(file)
    }

    /// The error the model reads for a refused [`Root::open_inside`].
    pub(crate) fn refused(&self, action: &str, resolved: &Path, refusal: OpenRefusal) -> ToolError {
        let shown = self.shown(resolved);
        match refusal {
            OpenRefusal::Io { source, .. } => self.io_error(action, resolved, &source),
            OpenRefusal::Directory { .. } => {
                ToolError::execution(format!("{shown} is a directory, not a file"))
                    .with_field("path")
                    .with_hint("use files_list to see what a directory holds")
            }
            OpenRefusal::NotDirectory { .. } => {
                ToolError::execution(format!("{shown} is a file, not a directory"))
                    .with_field("path")
                    .with_hint("use files_read to read a file")
            }
            OpenRefusal::NotRegular { .. } => ToolError::execution(format!(
                "cannot {action} {shown}: it is not a regular file (a FIFO, socket or device)"
            ))
            .with_field("path"),
            private @ OpenRefusal::Private { .. } => ToolError::new(
                ErrorReason::Denied,
                format!("cannot {action} {private}, which the files tools never read or write"),
            )
            .with_field("path")
            .with_hint(self.root_hint()),
            escaped @ OpenRefusal::Escaped { .. } => ToolError::new(
                ErrorReason::Denied,
                format!("cannot {action} {shown}: {escaped}"),
            )
            .with_field("path")
            .with_hint(self.root_hint()),
        }
    }

    pub(crate) fn root_hint(&self) -> String {
        format!(
            "paths are relative to the files root {}; call files_list to see what is there",
            self.root.configured().display()
        )
    }

    pub(crate) fn shown(&self, resolved: &Path) -> String {
        self.root.display_relative(resolved)
    }

    /// An I/O failure on `resolved`, with the path named and, for the common
    /// cases, what to do instead.
    pub(crate) fn io_error(&self, action: &str, resolved: &Path, error: &io::Error) -> ToolError {
        let shown = self.shown(resolved);
        let (detail, hint) = match error.kind() {
            io::ErrorKind::NotFound => (
                format!("cannot {action} {shown}: no such file or directory"),
                self.root_hint(),
            ),
            io::ErrorKind::PermissionDenied => (
                format!("cannot {action} {shown}: permission denied"),
                "the agent's process may not access this file".to_owned(),
            ),
            io::ErrorKind::IsADirectory => (
                format!("cannot {action} {shown}: it is a directory"),
                "use files_list for directories".to_owned(),
            ),
            io::ErrorKind::NotADirectory => (
                format!(
                    "cannot {action} {shown}: a component of the path is a file, not a directory"
                ),
                self.root_hint(),
            ),
            _ => (
                format!("cannot {action} {shown}: {error}"),
                self.root_hint(),
            ),
        };
        ToolError::execution(detail)
            .with_field("path")
            .with_hint(hint)
    }
}

/// A string argument, or the error naming it.
pub(crate) fn string_arg<'a>(
    arguments: &'a Value,
    field: &str,
    required: bool,
) -> Result<Option<&'a str>, ToolError> {
    match arguments.get(field) {
        None | Some(Value::Null) if !required => Ok(None),
        None | Some(Value::Null) => Err(ToolError::new(
            ErrorReason::Required,
            format!("the argument {field} is missing"),
        )
        .with_field(field)),
        Some(Value::String(s)) => Ok(Some(s)),
        Some(other) => Err(type_error(field, "a string", other)),
    }
}

/// An optional non-negative integer argument.
pub(crate) fn u64_arg(arguments: &Value, field: &str) -> Result<Option<u64>, ToolError> {
    match arguments.get(field) {
        None | Some(Value::Null) => Ok(None),
        Some(v) => v
            .as_u64()
            .map(Some)
            .ok_or_else(|| type_error(field, "a non-negative integer", v)),
    }
}

/// An optional boolean argument (absent means false).
pub(crate) fn bool_arg(arguments: &Value, field: &str) -> Result<bool, ToolError> {
    match arguments.get(field) {
        None | Some(Value::Null) => Ok(false),
        Some(Value::Bool(b)) => Ok(*b),
        Some(other) => Err(type_error(field, "true or false", other)),
    }
}

fn type_error(field: &str, expected: &str, got: &Value) -> ToolError {
    ToolError::new(
        ErrorReason::Type,
        format!("the argument {field} must be {expected}, got {got}"),
    )
    .with_field(field)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)] // a panic in a test is a test failure

    use super::*;

    /// What the model reads for the failures a test cannot cause on disk
    /// (a permission as root; a directory where every tool checks first):
    /// what happened, in words, and what to do.
    #[test]
    fn io_errors_name_what_happened_and_what_to_do() {
        let dir = std::env::temp_dir().join(format!("homeagent-io-words-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let shared = Shared {
            root: Root::open(&dir).unwrap(),
            policy: FilesPolicy::new(&dir),
        };
        let path = shared.root.canonical().join("a.txt");
        let said = |kind: io::ErrorKind| {
            let error = shared.io_error("read", &path, &io::Error::from(kind));
            (error.detail, error.hint.unwrap_or_default())
        };
        assert_eq!(
            said(io::ErrorKind::PermissionDenied),
            (
                "cannot read a.txt: permission denied".to_owned(),
                "the agent's process may not access this file".to_owned()
            )
        );
        assert_eq!(
            said(io::ErrorKind::IsADirectory),
            (
                "cannot read a.txt: it is a directory".to_owned(),
                "use files_list for directories".to_owned()
            )
        );
        let _ = std::fs::remove_dir_all(dir);
    }
}
