//! Sequences on disk: `<data_dir>/sequences/<name>.json`, one parsed tree
//! per file.
//!
//! Writes are atomic (a temp file in the same directory, fsync, rename,
//! fsync of the directory), so a crash leaves either the old or the new
//! sequence, never half of one. Names are checked before any path is built
//! from them: non-empty, no `/`, `\`, `..`, leading `.`, control
//! characters — so no name can reach a file outside the directory.
//!
//! Cross-sequence calls (`seq_call "#Other"`) form a graph. Saving a
//! sequence that closes a cycle is refused with the cycle's path
//! (`#A → #B → #A`): a cycle could only ever end at the run-time depth
//! bound. So is a save that would make a chain of calls deeper than that
//! bound (`nesting`), naming the chain. A reference to a sequence that does
//! not exist yet is accepted
//! with a warning, so two sequences can be written in either order.

use std::collections::{BTreeMap, BTreeSet};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use crate::check::Warning;
use crate::model::{Sequence, ToolStep};

/// The directory under the data directory that holds sequences.
pub const SEQUENCES_DIR: &str = "sequences";

/// Why a store operation failed. Matched by variant.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("bad sequence name {name:?}: {reason}")]
    BadName { name: String, reason: &'static str },
    #[error(
        "sequence \"{name}\" does not exist (seq_list, or `homeagent seq list`, shows the sequences)"
    )]
    NotFound { name: String },
    #[error("sequence file {path} is damaged: {detail}")]
    Corrupt { path: PathBuf, detail: String },
    #[error("refused: cross-sequence calls would form a cycle: {path}")]
    Cycle { path: String },
    /// The save would make a chain of `seq_call` levels deeper than the
    /// run-time bound ([`crate::MAX_DEPTH`]), which fails every time it is
    /// reached.
    #[error(
        "refused: a chain of sequence calls would nest {levels} levels ({chain}), and at most {max} run (a sequence run and each seq_call entry into a sequence or a group is a level); the last level would fail every time it is reached: call the innermost tools from a shallower level, or move a called group's tools into its caller",
        max = crate::MAX_DEPTH
    )]
    TooDeep { chain: String, levels: usize },
    #[error("cannot {action} {path}: {source}")]
    Io {
        action: &'static str,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

/// Checks a sequence name; see the module docs for the rules.
pub fn check_name(name: &str) -> Result<(), StoreError> {
    let bad = |reason| {
        Err(StoreError::BadName {
            name: name.to_owned(),
            reason,
        })
    };
    if name.trim().is_empty() {
        return bad("names must not be empty");
    }
    if name.contains('/') || name.contains('\\') {
        return bad("names must not contain `/` or `\\`");
    }
    if name.contains("..") {
        return bad("names must not contain `..`");
    }
    if name.starts_with('.') {
        return bad("names must not start with `.`");
    }
    if name.chars().any(char::is_control) {
        return bad("names must not contain control characters");
    }
    if name.len() > 128 {
        return bad("names are at most 128 bytes long");
    }
    Ok(())
}

/// One stored sequence by name: loaded, or why it could not be.
pub type Listed = (String, Result<Sequence, StoreError>);

/// Serializes check-then-write across every store of this process (the
/// server makes one per request), so two saves cannot each pass the cycle
/// check and together close a cycle. Saves are rare; one lock for all
/// directories costs nothing.
static WRITING: Mutex<()> = Mutex::new(());

/// The sequences of one data directory.
#[derive(Debug)]
pub struct SeqStore {
    dir: PathBuf,
}

impl SeqStore {
    /// The store under `data_dir` (`<data_dir>/sequences`, created on the
    /// first write).
    pub fn new(data_dir: &Path) -> Self {
        Self::at(data_dir.join(SEQUENCES_DIR))
    }

    /// A store in exactly this directory.
    pub fn at(dir: PathBuf) -> Self {
        SeqStore { dir }
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    fn path_of(&self, name: &str) -> Result<PathBuf, StoreError> {
        check_name(name)?;
        Ok(self.dir.join(format!("{name}.json")))
    }

    /// Stores `seq` (replacing one of the same name). Returns warnings for
    /// `#Name` targets that do not exist yet.
    pub fn save(&self, seq: &Sequence) -> Result<Vec<Warning>, StoreError> {
        let path = self.path_of(&seq.name)?;
        let _guard = WRITING.lock().unwrap_or_else(|e| e.into_inner());
        // A sequence without seq_call steps cannot close a cycle and has no
        // missing targets; replacing one that is stored, it adds no level
        // to a caller's chain (it is one level either way): skip reading
        // every stored sequence (which made editing n sequences O(n²)). A
        // new one, or one in place of a damaged file (which could not
        // run), may be the missing end of a chain, which it makes one
        // deeper.
        let calls = seq
            .groups
            .iter()
            .flat_map(|g| &g.tools)
            .any(ToolStep::is_seq_call);
        let mut stored = if calls || self.load(&seq.name).is_err() {
            self.stored()?
        } else {
            BTreeMap::new()
        };
        stored.insert(seq.name.clone(), seq.clone());
        let graph: BTreeMap<String, Vec<String>> = stored
            .iter()
            .map(|(name, seq)| (name.clone(), seq.called_sequences()))
            .collect();
        if let Some(cycle) = find_cycle(&graph, &seq.name) {
            return Err(StoreError::Cycle {
                path: cycle
                    .iter()
                    .map(|n| format!("#{n}"))
                    .collect::<Vec<_>>()
                    .join(" → "),
            });
        }
        if let Some(chain) = crate::nesting::too_deep_through(&stored, &seq.name) {
            return Err(StoreError::TooDeep {
                levels: chain.len(),
                chain: chain.join(" → "),
            });
        }
        let warnings = seq
            .called_sequences()
            .into_iter()
            .filter(|target| !graph.contains_key(target))
            .map(|target| Warning::MissingSequence {
                sequence: seq.name.clone(),
                target,
            })
            .collect();
        let text = serde_json::to_string_pretty(seq).map_err(|e| StoreError::Corrupt {
            path: path.clone(),
            detail: e.to_string(),
        })?;
        write_atomically(&self.dir, &path, text.as_bytes())?;
        tracing::debug!(sequence = %seq.name, "sequence saved");
        Ok(warnings)
    }

    /// Loads one sequence.
    pub fn load(&self, name: &str) -> Result<Sequence, StoreError> {
        let path = self.path_of(name)?;
        let text = match std::fs::read_to_string(&path) {
            Ok(text) => text,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                return Err(StoreError::NotFound {
                    name: name.to_owned(),
                });
            }
            Err(source) => {
                return Err(StoreError::Io {
                    action: "read",
                    path,
                    source,
                });
            }
        };
        serde_json::from_str(&text).map_err(|e| StoreError::Corrupt {
            path,
            detail: e.to_string(),
        })
    }

    /// The stored names, sorted.
    pub fn names(&self) -> Result<Vec<String>, StoreError> {
        let entries = match std::fs::read_dir(&self.dir) {
            Ok(entries) => entries,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(source) => {
                return Err(StoreError::Io {
                    action: "list",
                    path: self.dir.clone(),
                    source,
                });
            }
        };
        let mut names: Vec<String> = entries
            .filter_map(Result::ok)
            .filter_map(|e| e.file_name().into_string().ok())
            .filter_map(|f| f.strip_suffix(".json").map(str::to_owned))
            .filter(|n| check_name(n).is_ok())
            .collect();
        names.sort();
        Ok(names)
    }

    /// Every stored sequence, by name; a damaged file is reported in place.
    pub fn list(&self) -> Result<Vec<Listed>, StoreError> {
        Ok(self
            .names()?
            .into_iter()
            .map(|name| {
                let loaded = self.load(&name);
                (name, loaded)
            })
            .collect())
    }

    /// Deletes one sequence.
    pub fn delete(&self, name: &str) -> Result<(), StoreError> {
        let path = self.path_of(name)?;
        let _guard = WRITING.lock().unwrap_or_else(|e| e.into_inner());
        match std::fs::remove_file(&path) {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Err(StoreError::NotFound {
                name: name.to_owned(),
            }),
            Err(source) => Err(StoreError::Io {
                action: "delete",
                path,
                source,
            }),
        }
    }

    /// Every stored sequence by name, for the checks a save makes. Damaged
    /// files are skipped (with a log line): they cannot run, so they can
    /// neither loop nor nest.
    fn stored(&self) -> Result<BTreeMap<String, Sequence>, StoreError> {
        let mut stored = BTreeMap::new();
        for name in self.names()? {
            match self.load(&name) {
                Ok(seq) => {
                    stored.insert(name, seq);
                }
                Err(error) => tracing::warn!(%error, "skipping a damaged sequence file"),
            }
        }
        Ok(stored)
    }
}

/// A path `start → … → start` in `graph`, if one exists.
pub(crate) fn find_cycle(
    graph: &BTreeMap<String, Vec<String>>,
    start: &str,
) -> Option<Vec<String>> {
    // Depth-first with an explicit stack, so a long chain cannot overflow.
    let mut visited: BTreeSet<&str> = BTreeSet::new();
    let mut path: Vec<&str> = vec![start];
    let mut stack: Vec<std::slice::Iter<'_, String>> =
        vec![graph.get(start).map(|v| v.iter()).unwrap_or_default()];
    while let Some(next) = stack.last_mut().map(Iterator::next) {
        match next {
            None => {
                stack.pop();
                path.pop();
            }
            Some(target) if target == start => {
                let mut cycle: Vec<String> = path.iter().map(|s| (*s).to_owned()).collect();
                cycle.push(start.to_owned());
                return Some(cycle);
            }
            Some(target) => {
                if visited.insert(target.as_str()) {
                    path.push(target);
                    stack.push(graph.get(target).map(|v| v.iter()).unwrap_or_default());
                }
            }
        }
    }
    None
}

/// Flushes a directory's entries to disk.
fn sync_directory(dir: &Path) -> std::io::Result<()> {
    std::fs::File::open(dir)?.sync_all()
}

fn write_atomically(dir: &Path, path: &Path, bytes: &[u8]) -> Result<(), StoreError> {
    let io = |action, path: &Path| {
        let path = path.to_owned();
        move |source| StoreError::Io {
            action,
            path,
            source,
        }
    };
    if !dir.is_dir() {
        std::fs::create_dir_all(dir).map_err(io("create", dir))?;
        // The new directory's own entry, so a crash cannot lose it with
        // the file saved in it.
        if let Some(parent) = dir.parent() {
            sync_directory(parent).map_err(io("sync", parent))?;
        }
    }
    let file_name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let tmp = dir.join(format!(
        ".{file_name}.{}.{}.tmp",
        std::process::id(),
        next_tmp_id()
    ));
    let result = (|| {
        let mut file = std::fs::File::create(&tmp).map_err(io("create", &tmp))?;
        file.write_all(bytes).map_err(io("write", &tmp))?;
        file.sync_all().map_err(io("sync", &tmp))?;
        drop(file);
        std::fs::rename(&tmp, path).map_err(io("rename into place", path))?;
        // The rename is durable only once the directory entry is: a save
        // that returns Ok survives a crash.
        sync_directory(dir).map_err(io("sync", dir))?;
        Ok(())
    })();
    if result.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    result
}

fn next_tmp_id() -> u64 {
    use std::sync::atomic::{AtomicU64, Ordering};
    static NEXT: AtomicU64 = AtomicU64::new(0);
    NEXT.fetch_add(1, Ordering::Relaxed)
}
