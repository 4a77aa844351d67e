//! `files_list {path?, recursive?}`: what a directory under the root holds.
//!
//! Entries are `{name, kind, size}` sorted by name, `kind` one of `file`,
//! `dir`, `symlink`; `size` is the length in bytes for files and `null`
//! otherwise. A recursive listing names entries by their path relative to
//! the listed directory and never descends into symlinks: a link may point
//! outside the root or back up the tree, and listing must neither leak nor
//! loop. At most [`MAX_LIST_ENTRIES`] entries come back, with `truncated`
//! saying whether more were left out. A subdirectory that cannot be read
//! (a `lost+found` the agent's user may not open) is listed, named again
//! under `unreadable` with why, and the walk goes on: one locked directory
//! must not hide everything else. The directory asked for is different:
//! failing to read it fails the call.

use std::collections::{BinaryHeap, VecDeque};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use homeagent_core::{Registry, RegistryError, ToolContext, ToolDef, ToolError};
use serde_json::{Value, json};

use super::{
    Access, Expect, MAX_LIST_ENTRIES, Shared, bool_arg, descriptor_path, on_own_thread, string_arg,
};

pub(super) fn register(registry: &Registry, shared: Arc<Shared>) -> Result<(), RegistryError> {
    registry.register(
        ToolDef::new(
            "files_list",
            format!(
                "Lists a directory under the files root (the root itself by default): entries with \
                 name, kind (file/dir/symlink) and size in bytes for files. recursive: true walks \
                 subdirectories (symlinks are listed, not followed; a subdirectory that cannot be \
                 read is named under unreadable, with why). At most {MAX_LIST_ENTRIES} \
                 entries. Read-only and parallel-safe."
            ),
        )
        .with_parameters(json!({
            "type": "object",
            "properties": {
                "path": {"type": "string", "description": "directory path, relative to the files root (default: the root)"},
                "recursive": {"type": "boolean", "description": "also list subdirectories (default false)"}
            },
            "additionalProperties": false
        }))
        .parallel_safe()
        .read_only(),
        move |ctx: ToolContext| {
            let shared = Arc::clone(&shared);
            on_own_thread("files_list", move |_| list(&shared, &ctx.arguments))
        },
    )
}

/// What a walk found.
struct Listing {
    entries: Vec<Entry>,
    /// More entries were left out.
    truncated: bool,
    /// Subdirectories that could not be read: their names and why.
    unreadable: Vec<(String, String)>,
}

/// Lists `dir` (and, when `recursive`, the directories below it), at most
/// [`MAX_LIST_ENTRIES`] entries.
///
/// Each directory is opened through [`super::Root::open_inside`] and listed
/// through its open descriptor, so a directory swapped for a symlink after
/// the check is caught, not listed.
fn walk(shared: &Shared, dir: PathBuf, recursive: bool) -> Result<Listing, ToolError> {
    let mut listing = Listing {
        entries: Vec::new(),
        truncated: false,
        unreadable: Vec::new(),
    };
    // (directory on disk, its name relative to the listed directory)
    let mut pending: VecDeque<(PathBuf, String)> = VecDeque::from([(dir, String::new())]);
    while let Some((current, prefix)) = pending.pop_front() {
        let kept = match read_names(
            shared,
            &current,
            &prefix,
            MAX_LIST_ENTRIES - listing.entries.len(),
        ) {
            Ok(kept) => kept,
            // The listed directory itself is the call's error.
            Err(error) if prefix.is_empty() => return Err(error),
            Err(error) => {
                let name = prefix.trim_end_matches('/').to_owned();
                listing.unreadable.push((name, error.detail));
                continue;
            }
        };
        let room = MAX_LIST_ENTRIES - listing.entries.len();
        let cut = kept.len() > room;
        for found in kept.into_sorted_vec().into_iter().take(room) {
            let Found {
                name,
                item,
                file_type,
            } = found;
            let (kind, size) = if file_type.is_symlink() {
                ("symlink", None)
            } else if file_type.is_dir() {
                ("dir", None)
            } else {
                // Not following a symlink either.
                ("file", item.metadata().ok().map(|m| m.len()))
            };
            // HomeAgent's own directory is named but not walked into.
            let below = current.join(item.file_name());
            if kind == "dir" && recursive && !shared.root.is_private(&below) {
                pending.push_back((below, format!("{name}/")));
            }
            listing.entries.push(Entry { name, kind, size });
        }
        if cut {
            listing.truncated = true;
            return Ok(listing);
        }
    }
    Ok(listing)
}

/// The entries of `current` with the smallest names, named `prefix` +
/// their name: at most `room + 1` (one more says the listing is cut).
fn read_names(
    shared: &Shared,
    current: &Path,
    prefix: &str,
    room: usize,
) -> Result<BinaryHeap<Found>, ToolError> {
    let (handle, _) = shared
        .root
        .open_inside(current, Access::Read, Expect::Directory)
        .map_err(|refusal| shared.refused("list", current, refusal))?;
    let reader = std::fs::read_dir(descriptor_path(&handle))
        .map_err(|e| shared.io_error("list", current, &e))?;
    // Only what can still be listed is kept: the smallest names, in a heap
    // of at most `room + 1`, and only those are measured. A directory of
    // millions of files costs a read of its names, not a vector and a stat
    // of each.
    let mut kept: BinaryHeap<Found> = BinaryHeap::with_capacity(room.min(1024) + 1);
    for item in reader {
        let item = item.map_err(|e| shared.io_error("list", current, &e))?;
        // Neither file_type() of an entry follows a symlink, which is the
        // point.
        let Ok(file_type) = item.file_type() else {
            continue;
        };
        let name = format!("{prefix}{}", item.file_name().to_string_lossy());
        if kept.len() > room && kept.peek().is_some_and(|last| name >= last.name) {
            continue;
        }
        kept.push(Found {
            name,
            item,
            file_type,
        });
        if kept.len() > room + 1 {
            kept.pop();
        }
    }
    Ok(kept)
}

struct Entry {
    name: String,
    kind: &'static str,
    size: Option<u64>,
}

/// A directory entry kept for the listing, ordered by its name.
struct Found {
    name: String,
    item: std::fs::DirEntry,
    file_type: std::fs::FileType,
}

impl PartialEq for Found {
    fn eq(&self, other: &Self) -> bool {
        self.name == other.name
    }
}

impl Eq for Found {}

impl PartialOrd for Found {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Found {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        self.name.cmp(&other.name)
    }
}

/// The call, blocking: on its own thread ([`on_own_thread`]).
fn list(shared: &Shared, arguments: &Value) -> Result<Value, ToolError> {
    let user_path = string_arg(arguments, "path", false)?.unwrap_or("");
    let recursive = bool_arg(arguments, "recursive")?;
    let dir = shared.resolve(user_path)?;
    let shown = shared.shown(&dir);
    let Listing {
        mut entries,
        truncated,
        unreadable,
    } = walk(shared, dir, recursive)?;
    entries.sort_by(|a, b| a.name.cmp(&b.name));
    let count = entries.len();
    let mut listing = json!({
        "path": shown,
        "entries": entries
            .into_iter()
            .map(|e| json!({"name": e.name, "kind": e.kind, "size": e.size}))
            .collect::<Vec<_>>(),
        "count": count,
        "truncated": truncated,
    });
    // Only when there are some: most listings have none, and each field
    // costs the model tokens.
    if !unreadable.is_empty() {
        listing["unreadable"] = unreadable
            .into_iter()
            .map(|(name, error)| json!({"name": name, "error": error}))
            .collect();
    }
    Ok(listing)
}
