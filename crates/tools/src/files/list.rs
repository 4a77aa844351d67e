//! `files_list {path?, recursive?}`: what a directory under the root holds.
//!
//! Entries are `{name, kind, size}` sorted by name, `kind` one of `file`,
//! `dir`, `symlink`; `size` is the length in bytes for files and `null`
//! otherwise. A recursive listing names entries by their path relative to
//! the listed directory and never descends into symlinks: a link may point
//! outside the root or back up the tree, and listing must neither leak nor
//! loop. At most [`MAX_LIST_ENTRIES`] entries come back, with `truncated`
//! saying whether more were left out.

use std::collections::VecDeque;
use std::path::PathBuf;
use std::sync::Arc;

use homeagent_core::{Registry, RegistryError, ToolContext, ToolDef, ToolError};
use serde_json::{Value, json};

use super::{MAX_LIST_ENTRIES, Shared, bool_arg, string_arg};

pub(super) fn register(registry: &Registry, shared: Arc<Shared>) -> Result<(), RegistryError> {
    registry.register(
        ToolDef::new(
            "files_list",
            format!(
                "Lists a directory under the files root (the root itself by default): entries with \
                 name, kind (file/dir/symlink) and size in bytes for files. recursive: true walks \
                 subdirectories (symlinks are listed, not followed). At most {MAX_LIST_ENTRIES} \
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
        move |ctx: ToolContext| list(shared.clone(), ctx),
    )
}

struct Entry {
    name: String,
    kind: &'static str,
    size: Option<u64>,
}

async fn list(shared: Arc<Shared>, ctx: ToolContext) -> Result<Value, ToolError> {
    let user_path = string_arg(&ctx.arguments, "path", false)?.unwrap_or("");
    let recursive = bool_arg(&ctx.arguments, "recursive")?;
    let dir = shared.resolve(user_path)?;
    let shown = shared.shown(&dir);
    let meta = tokio::fs::metadata(&dir)
        .await
        .map_err(|e| shared.io_error("list", &dir, &e))?;
    if !meta.is_dir() {
        return Err(
            ToolError::execution(format!("{shown} is a file, not a directory"))
                .with_field("path")
                .with_hint("use files_read to read a file"),
        );
    }

    let mut entries: Vec<Entry> = Vec::new();
    let mut truncated = false;
    // (directory on disk, its name relative to the listed directory)
    let mut pending: VecDeque<(PathBuf, String)> = VecDeque::from([(dir.clone(), String::new())]);
    'walk: while let Some((current, prefix)) = pending.pop_front() {
        let mut reader = tokio::fs::read_dir(&current)
            .await
            .map_err(|e| shared.io_error("list", &current, &e))?;
        let mut here: Vec<Entry> = Vec::new();
        while let Some(item) = reader
            .next_entry()
            .await
            .map_err(|e| shared.io_error("list", &current, &e))?
        {
            let name = format!("{prefix}{}", item.file_name().to_string_lossy());
            // file_type() does not follow symlinks, which is the point.
            let Ok(file_type) = item.file_type().await else {
                continue;
            };
            let (kind, size) = if file_type.is_symlink() {
                ("symlink", None)
            } else if file_type.is_dir() {
                ("dir", None)
            } else {
                let size = item.metadata().await.ok().map(|m| m.len());
                ("file", size)
            };
            if kind == "dir" && recursive {
                pending.push_back((item.path(), format!("{name}/")));
            }
            here.push(Entry { name, kind, size });
        }
        here.sort_by(|a, b| a.name.cmp(&b.name));
        for entry in here {
            if entries.len() == MAX_LIST_ENTRIES {
                truncated = true;
                break 'walk;
            }
            entries.push(entry);
        }
    }
    entries.sort_by(|a, b| a.name.cmp(&b.name));
    let count = entries.len();
    Ok(json!({
        "path": shown,
        "entries": entries
            .into_iter()
            .map(|e| json!({"name": e.name, "kind": e.kind, "size": e.size}))
            .collect::<Vec<_>>(),
        "count": count,
        "truncated": truncated,
    }))
}
