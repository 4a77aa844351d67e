//! The one place where a user-supplied path becomes a path on disk.
//!
//! Confinement is by construction: every files tool turns its `path`
//! argument into a [`PathBuf`] only through [`Root::resolve`], and the path it
//! returns is built from the canonical root plus checked components, so the
//! operating system is never handed a `..` or an unchecked symlink.
//!
//! The rules:
//!
//! - a relative path is relative to the root; an absolute path is accepted
//!   only when it names something inside the root;
//! - `..` is applied lexically, and a `..` that would climb above the root is
//!   refused (`a/../b` is fine, `a/../../b` is not);
//! - every existing component is checked: a symlink is followed (canonicalized)
//!   and must land inside the canonical root, and a symlink whose target does
//!   not exist is refused (writing through it would create a file wherever
//!   it points);
//! - components that do not exist yet are appended as plain names, so a new
//!   file's parent has always been resolved inside the root.
//!
//! What a check of the path alone cannot rule out is a race: a process that
//! swaps a directory for a symlink between the check and the open. So every
//! open goes through [`Root::open_inside`], which reads the opened file's
//! own path back from the kernel and refuses one outside the root.

use std::io;
use std::path::{Component, Path, PathBuf};

/// Why a path was refused. Matched by variant; the message names the path
/// and the reason.
#[derive(Debug, thiserror::Error)]
pub enum PathRefusal {
    #[error("path `{path}` is absolute and outside the files root")]
    AbsoluteOutsideRoot { path: String },
    #[error("path `{path}` climbs above the files root with `..`")]
    ClimbsAboveRoot { path: String },
    #[error(
        "path `{path}` goes through the symlink `{link}`, which leads to `{target}`, outside the files root"
    )]
    SymlinkLeadsOut {
        path: String,
        link: String,
        target: PathBuf,
    },
    #[error(
        "path `{path}` goes through the symlink `{link}`, whose target does not exist or cannot be resolved"
    )]
    DanglingSymlink { path: String, link: String },
    #[error("path `{path}` contains a NUL byte")]
    NulByte { path: String },
    #[error(
        "path `{path}` is HomeAgent's own (its config file or data directory), which the files tools never read or write"
    )]
    Private { path: String },
    #[error("path `{path}` could not be checked: {source}")]
    Io {
        path: String,
        #[source]
        source: io::Error,
    },
}

/// Why [`Root::open_inside`] gave no file. Matched by variant; each message
/// names the path as the model sees it.
#[derive(Debug, thiserror::Error)]
pub enum OpenRefusal {
    #[error("cannot open {shown}: {source}")]
    Io {
        shown: String,
        #[source]
        source: io::Error,
    },
    #[error("{shown} is a directory, not a file")]
    Directory { shown: String },
    #[error("{shown} is a file, not a directory")]
    NotDirectory { shown: String },
    #[error("{shown} is not a regular file (a FIFO, socket or device)")]
    NotRegular { shown: String },
    #[error(
        "the file opened for {shown} is {}, outside the files root (the path changed while \
         it was being opened)",
        opened.display()
    )]
    Escaped { shown: String, opened: PathBuf },
    /// The opened file is HomeAgent's own (see [`Root::with_private`]).
    #[error("{shown} is HomeAgent's own (its config file or data directory)")]
    Private { shown: String },
}

/// How [`Root::open_inside`] opens the file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Access {
    /// For reading (a file, or a directory to list).
    Read,
    /// For appending, creating the file (mode 0666 less the umask) when it
    /// does not exist.
    Append,
}

/// What [`Root::open_inside`] must find at the path.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Expect {
    /// A regular file (never a FIFO, socket or device).
    File,
    /// A directory.
    Directory,
}

/// The directory the files tools are confined to, canonicalized once.
#[derive(Debug, Clone)]
pub struct Root {
    /// The root as configured, for messages and for accepting absolute paths
    /// written the way the person configured them.
    configured: PathBuf,
    /// The root with every symlink resolved: what resolved paths start with.
    canonical: PathBuf,
    /// HomeAgent's own files inside the root, canonical: never opened.
    private: Vec<PathBuf>,
}

/// `path` made absolute, with its longest existing start resolved
/// (symlinks, `..`) and the rest, which does not exist yet, added as
/// written: where the path will be once it is made.
pub fn resolved_as_far_as_it_exists(path: &Path) -> PathBuf {
    let absolute = match std::env::current_dir() {
        Ok(here) if path.is_relative() => here.join(path),
        _ => path.to_path_buf(),
    };
    let mut missing = Vec::new();
    let mut existing = absolute.as_path();
    loop {
        if let Ok(mut resolved) = std::fs::canonicalize(existing) {
            // What does not exist yet holds no symlink: its `..` climbs
            // lexically, as it will once it is made (`x/..` is where `x`
            // will be made).
            for part in missing.iter().rev() {
                match part {
                    Component::ParentDir => {
                        resolved.pop();
                    }
                    Component::Normal(name) => resolved.push(name),
                    _ => {}
                }
            }
            return resolved;
        }
        match (existing.parent(), existing.components().next_back()) {
            (Some(parent), Some(last)) => {
                missing.push(last);
                existing = parent;
            }
            // The very top: as written.
            _ => return absolute,
        }
    }
}

impl Root {
    /// Opens (and creates, when missing) the root directory.
    pub fn open(configured: impl Into<PathBuf>) -> io::Result<Self> {
        let configured = configured.into();
        std::fs::create_dir_all(&configured)?;
        let canonical = std::fs::canonicalize(&configured)?;
        if !canonical.is_dir() {
            return Err(io::Error::new(
                io::ErrorKind::NotADirectory,
                format!("files root {} is not a directory", configured.display()),
            ));
        }
        Ok(Root {
            configured,
            canonical,
            private: Vec::new(),
        })
    }

    /// Marks HomeAgent's own files (the config file, the data directory)
    /// as never to be opened, where they lie inside the root: a root set
    /// to `.` beside the config, or to a home directory, holds them, and
    /// the config holds keys and the hook commands, which run unasked.
    /// A path outside the root, or one that holds the root (the default
    /// root is inside the data directory), needs nothing: nothing there
    /// can be reached. One that does not exist yet (the data directory on a
    /// first run) is resolved as far as it exists, the rest added, so it is
    /// private once it is made.
    pub fn with_private(mut self, paths: impl IntoIterator<Item = PathBuf>) -> Self {
        for path in paths {
            let path = resolved_as_far_as_it_exists(&path);
            if path.starts_with(&self.canonical) && path != self.canonical {
                self.private.push(path);
            }
        }
        self
    }

    /// Whether `path` (canonical) is one of HomeAgent's own.
    pub fn is_private(&self, path: &Path) -> bool {
        self.private.iter().any(|p| path.starts_with(p))
    }

    /// The root with symlinks resolved.
    pub fn canonical(&self) -> &Path {
        &self.canonical
    }

    /// The root as configured.
    pub fn configured(&self) -> &Path {
        &self.configured
    }

    /// Turns a user path into a path inside the root, or says why not.
    /// An empty path (or `.`) is the root itself.
    pub fn resolve(&self, user_path: &str) -> Result<PathBuf, PathRefusal> {
        if user_path.contains('\0') {
            return Err(PathRefusal::NulByte {
                path: user_path.to_owned(),
            });
        }
        let requested = Path::new(user_path);
        let relative = if requested.is_absolute() {
            self.strip_root(requested)
                .ok_or_else(|| PathRefusal::AbsoluteOutsideRoot {
                    path: user_path.to_owned(),
                })?
        } else {
            requested.to_path_buf()
        };

        let mut names: Vec<&std::ffi::OsStr> = Vec::new();
        for component in relative.components() {
            match component {
                Component::Normal(name) => names.push(name),
                Component::CurDir => {}
                Component::ParentDir => {
                    if names.pop().is_none() {
                        return Err(PathRefusal::ClimbsAboveRoot {
                            path: user_path.to_owned(),
                        });
                    }
                }
                // strip_root removed these from absolute paths already.
                Component::RootDir | Component::Prefix(_) => {
                    return Err(PathRefusal::AbsoluteOutsideRoot {
                        path: user_path.to_owned(),
                    });
                }
            }
        }

        let mut resolved = self.canonical.clone();
        let mut exists = true;
        for name in names {
            let next = resolved.join(name);
            if !exists {
                resolved = next;
                continue;
            }
            match std::fs::symlink_metadata(&next) {
                Ok(meta) if meta.file_type().is_symlink() => {
                    let link = self.display_relative(&next);
                    let target =
                        std::fs::canonicalize(&next).map_err(|_| PathRefusal::DanglingSymlink {
                            path: user_path.to_owned(),
                            link: link.clone(),
                        })?;
                    if !target.starts_with(&self.canonical) {
                        return Err(PathRefusal::SymlinkLeadsOut {
                            path: user_path.to_owned(),
                            link,
                            target,
                        });
                    }
                    resolved = target;
                }
                Ok(_) => resolved = next,
                Err(e) if e.kind() == io::ErrorKind::NotFound => {
                    exists = false;
                    resolved = next;
                }
                // A component below a regular file (NotADirectory) cannot
                // exist either; the operation itself reports that clearly.
                Err(e) if e.kind() == io::ErrorKind::NotADirectory => {
                    exists = false;
                    resolved = next;
                }
                Err(source) => {
                    return Err(PathRefusal::Io {
                        path: user_path.to_owned(),
                        source,
                    });
                }
            }
        }
        if self.is_private(&resolved) {
            return Err(PathRefusal::Private {
                path: user_path.to_owned(),
            });
        }
        Ok(resolved)
    }

    /// Opens a path [`Root::resolve`] returned, and checks what was opened.
    ///
    /// `resolve` checked the path; between that check and the open a
    /// component could have become a symlink leading out. So the open never
    /// follows a symlink at the last component and never waits (a FIFO
    /// would block the thread until something writes to it), and the path
    /// of the open descriptor, read back from the kernel, must still be
    /// inside the root. An [`Access::Append`] may create the file, so it is
    /// created through a descriptor of its directory that was checked
    /// first ([`Root::open_directory_inside`]): a swapped directory cannot
    /// make it create a file outside.
    /// Blocking: call it off the async workers.
    pub fn open_inside(
        &self,
        resolved: &Path,
        access: Access,
        expect: Expect,
    ) -> Result<(std::fs::File, std::fs::Metadata), OpenRefusal> {
        use nix::fcntl::OFlag;
        let shown = || self.display_relative(resolved);
        let io = |source| OpenRefusal::Io {
            shown: shown(),
            source,
        };
        // No O_DIRECTORY: listing a file then says "a file, not a
        // directory" rather than the kernel's ambiguous ENOTDIR.
        let flags = OFlag::O_NOFOLLOW | OFlag::O_NONBLOCK | OFlag::O_CLOEXEC;
        let file = match access {
            Access::Read => {
                use std::os::unix::fs::OpenOptionsExt;
                std::fs::OpenOptions::new()
                    .read(true)
                    .custom_flags(flags.bits())
                    .open(resolved)
                    .map_err(io)?
            }
            Access::Append => {
                let (Some(dir), Some(name)) = (resolved.parent(), resolved.file_name()) else {
                    return Err(OpenRefusal::Directory { shown: shown() });
                };
                if resolved == self.canonical {
                    return Err(OpenRefusal::Directory { shown: shown() });
                }
                let dir = self.open_directory_inside(dir)?;
                let fd = nix::fcntl::openat(
                    &dir,
                    name,
                    flags | OFlag::O_WRONLY | OFlag::O_APPEND | OFlag::O_CREAT,
                    nix::sys::stat::Mode::from_bits_truncate(0o666),
                )
                .map_err(|errno| match errno {
                    // A FIFO nobody reads (opened without waiting), a
                    // socket: not "no such device".
                    nix::errno::Errno::ENXIO => OpenRefusal::NotRegular { shown: shown() },
                    other => io(other.into()),
                })?;
                std::fs::File::from(fd)
            }
        };
        let meta = file.metadata().map_err(io)?;
        match expect {
            Expect::File if meta.is_dir() => return Err(OpenRefusal::Directory { shown: shown() }),
            Expect::File if !meta.is_file() => {
                return Err(OpenRefusal::NotRegular { shown: shown() });
            }
            Expect::Directory if !meta.is_dir() => {
                return Err(OpenRefusal::NotDirectory { shown: shown() });
            }
            _ => {}
        }
        #[cfg(target_os = "linux")]
        {
            let opened = std::fs::read_link(descriptor_path(&file)).map_err(io)?;
            if !opened.starts_with(&self.canonical) {
                return Err(OpenRefusal::Escaped {
                    shown: shown(),
                    opened,
                });
            }
            if self.is_private(&opened) {
                return Err(OpenRefusal::Private { shown: shown() });
            }
        }
        Ok((file, meta))
    }

    /// Opens the directory `dir` (a path [`Root::resolve`] returned, or
    /// the parent of one) for working inside it through the descriptor
    /// (`openat`, `renameat`, `fsync`): never through a symlink at its
    /// last component, and only if the descriptor's own path is still
    /// inside the root and not removed (a file made in a removed directory
    /// is one nobody can reach). Blocking.
    pub fn open_directory_inside(&self, dir: &Path) -> Result<std::os::fd::OwnedFd, OpenRefusal> {
        use nix::fcntl::OFlag;
        let shown = || self.display_relative(dir);
        let io = |source| OpenRefusal::Io {
            shown: shown(),
            source,
        };
        let fd = nix::fcntl::open(
            dir,
            OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC,
            nix::sys::stat::Mode::empty(),
        )
        .map_err(|errno| io(errno.into()))?;
        #[cfg(target_os = "linux")]
        {
            let opened = std::fs::read_link(descriptor_path(&fd)).map_err(io)?;
            if opened.to_string_lossy().ends_with(" (deleted)") {
                return Err(io(io::Error::new(
                    io::ErrorKind::NotFound,
                    "the directory was removed",
                )));
            }
            if !opened.starts_with(&self.canonical) {
                return Err(OpenRefusal::Escaped {
                    shown: shown(),
                    opened,
                });
            }
            if self.is_private(&opened) {
                return Err(OpenRefusal::Private { shown: shown() });
            }
        }
        Ok(fd)
    }

    /// A resolved path as the model should see it: relative to the root,
    /// with `/` separators; the root itself is `.`.
    pub fn display_relative(&self, resolved: &Path) -> String {
        match resolved.strip_prefix(&self.canonical) {
            Ok(rel) if rel.as_os_str().is_empty() => ".".to_owned(),
            Ok(rel) => rel
                .components()
                .map(|c| c.as_os_str().to_string_lossy())
                .collect::<Vec<_>>()
                .join("/"),
            Err(_) => resolved.display().to_string(),
        }
    }

    /// The part of an absolute path below the root, if it is below either
    /// spelling of the root.
    fn strip_root(&self, absolute: &Path) -> Option<PathBuf> {
        let lexical = lexically_normal(absolute)?;
        [&self.canonical, &self.configured]
            .into_iter()
            .find_map(|root| lexical.strip_prefix(root).ok().map(Path::to_path_buf))
    }
}

/// The path naming an open descriptor itself. Opening it (or listing it,
/// for a directory) reaches the very file that was opened, whatever has
/// been renamed or swapped for a symlink since.
#[cfg(target_os = "linux")]
pub fn descriptor_path(file: &impl std::os::fd::AsRawFd) -> PathBuf {
    PathBuf::from(format!("/proc/self/fd/{}", file.as_raw_fd()))
}

/// `absolute` with `.` and `..` applied, without touching the disk; `None`
/// when `..` climbs above `/`.
fn lexically_normal(absolute: &Path) -> Option<PathBuf> {
    let mut out = PathBuf::new();
    for component in absolute.components() {
        match component {
            Component::ParentDir => {
                if !out.pop() {
                    return None;
                }
            }
            Component::CurDir => {}
            other => out.push(other.as_os_str()),
        }
    }
    Some(out)
}
