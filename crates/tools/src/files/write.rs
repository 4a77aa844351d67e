//! `files_write {path, content, append?, create_dirs?}`: writes a text file
//! under the root.
//!
//! Replacing is atomic: the content goes to a temporary file in the target's
//! own directory (same file system, so the rename cannot turn into a copy),
//! is flushed to disk, and is renamed over the target. A failure removes the
//! temporary file. Appending opens the existing file in append mode, which
//! cannot be atomic for a partial failure but never loses what was there.
//!
//! The tool is `serial`: a batch that writes runs in call order.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use homeagent_core::{ErrorReason, Registry, RegistryError, ToolContext, ToolDef, ToolError};
use serde_json::{Value, json};
use tokio::io::AsyncWriteExt;

use super::{Shared, bool_arg, string_arg};

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
        move |ctx: ToolContext| write(shared.clone(), ctx),
    )
}

async fn write(shared: Arc<Shared>, ctx: ToolContext) -> Result<Value, ToolError> {
    let user_path = string_arg(&ctx.arguments, "path", true)?.unwrap_or_default();
    let content = string_arg(&ctx.arguments, "content", true)?.unwrap_or_default();
    let append = bool_arg(&ctx.arguments, "append")?;
    let create_dirs = bool_arg(&ctx.arguments, "create_dirs")?;
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
    match tokio::fs::metadata(parent).await {
        Ok(meta) if meta.is_dir() => {}
        Ok(_) => {
            return Err(ToolError::execution(format!(
                "cannot write {shown}: its parent {} is a file",
                shared.shown(parent)
            ))
            .with_field("path"));
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound && create_dirs => {
            tokio::fs::create_dir_all(parent)
                .await
                .map_err(|e| shared.io_error("create the directories of", &path, &e))?;
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
    if tokio::fs::metadata(&path).await.is_ok_and(|m| m.is_dir()) {
        return Err(
            ToolError::execution(format!("cannot write {shown}: it is a directory"))
                .with_field("path"),
        );
    }

    let existed = tokio::fs::symlink_metadata(&path).await.is_ok();
    if append {
        let mut options = tokio::fs::OpenOptions::new();
        options.append(true).create(true);
        let mut file = shared
            .open_checked("append to", &path, &mut options)
            .await?;
        append_to(&mut file, content.as_bytes())
            .await
            .map_err(|e| shared.io_error("append to", &path, &e))?;
    } else {
        replace_atomically(parent, &path, content.as_bytes())
            .await
            .map_err(|e| shared.io_error("write", &path, &e))?;
    }
    tracing::debug!(path = %shown, bytes = content.len(), append, "files_write");
    Ok(json!({
        "path": shown,
        "bytes_written": content.len(),
        "appended": append,
        "created": !existed,
    }))
}

async fn append_to(file: &mut tokio::fs::File, bytes: &[u8]) -> std::io::Result<()> {
    file.write_all(bytes).await?;
    file.sync_all().await
}

async fn replace_atomically(dir: &Path, path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let temp = temp_path(dir);
    let result = async {
        let mut file = tokio::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&temp)
            .await?;
        file.write_all(bytes).await?;
        // Keep the permissions of the file being replaced (an executable
        // script stays executable).
        if let Ok(meta) = tokio::fs::metadata(path).await {
            file.set_permissions(meta.permissions()).await?;
        }
        file.sync_all().await?;
        drop(file);
        tokio::fs::rename(&temp, path).await
    }
    .await;
    if result.is_err() {
        let _ = tokio::fs::remove_file(&temp).await;
    }
    result
}

/// A name no other writer in this process or another one will pick.
fn temp_path(dir: &Path) -> PathBuf {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    dir.join(format!("{TEMP_PREFIX}{}-{n}.tmp", std::process::id()))
}
