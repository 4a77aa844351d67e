//! `files_read {path, offset?, max_bytes?}`: a window of a text file.
//!
//! The result says how much came back (`bytes`), how big the file is
//! (`size`), and whether there is more (`truncated`, with `next_offset` to
//! continue from). A window never ends inside a UTF-8 character: the cut is
//! moved back to the last whole character, so `next_offset` always starts a
//! character. A file that is not UTF-8 text is an error that says so, rather
//! than a page of replacement characters.

use std::sync::Arc;

use homeagent_core::{ErrorReason, Registry, RegistryError, ToolContext, ToolDef, ToolError};
use std::io::{Read, Seek};

use serde_json::{Value, json};

use super::{Access, Shared, on_own_thread, string_arg, u64_arg};

pub(super) fn register(registry: &Registry, shared: Arc<Shared>) -> Result<(), RegistryError> {
    let max = shared.policy.max_read_bytes;
    registry.register(
        ToolDef::new(
            "files_read",
            format!(
                "Reads a UTF-8 text file under the files root, at most {max} bytes per call. \
                 Returns {{path, content, bytes, size, truncated, next_offset}}; when truncated, \
                 call again with offset = next_offset. Read-only and parallel-safe."
            ),
        )
        .with_parameters(json!({
            "type": "object",
            "properties": {
                "path": {"type": "string", "description": "file path, relative to the files root"},
                "offset": {"type": "integer", "minimum": 0, "description": "byte offset to start at (default 0)"},
                "max_bytes": {"type": "integer", "minimum": 1, "description": format!("most bytes to return (default and cap {max})")}
            },
            "required": ["path"],
            "additionalProperties": false
        }))
        .parallel_safe()
        .read_only(),
        move |ctx: ToolContext| {
            let shared = Arc::clone(&shared);
            on_own_thread("files_read", move |_| read(&shared, &ctx.arguments))
        },
    )
}

/// The call, blocking: on its own thread ([`on_own_thread`]).
fn read(shared: &Shared, arguments: &Value) -> Result<Value, ToolError> {
    let user_path = string_arg(arguments, "path", true)?.unwrap_or_default();
    let offset = u64_arg(arguments, "offset")?.unwrap_or(0);
    let cap = shared.policy.max_read_bytes;
    let limit = u64_arg(arguments, "max_bytes")?
        .unwrap_or(cap)
        .clamp(1, cap);
    let path = shared.resolve(user_path)?;
    let shown = shared.shown(&path);

    let mut file = shared.open_checked("read", &path, Access::Read)?;
    let meta = file
        .metadata()
        .map_err(|e| shared.io_error("read", &path, &e))?;
    let size = meta.len();
    if offset > size {
        return Err(ToolError::new(
            ErrorReason::InvalidArguments,
            format!("offset {offset} is past the end of {shown}, which has {size} bytes"),
        )
        .with_field("offset"));
    }
    file.seek(std::io::SeekFrom::Start(offset))
        .map_err(|e| shared.io_error("read", &path, &e))?;
    let mut buffer = Vec::new();
    (&mut file)
        .take(limit)
        .read_to_end(&mut buffer)
        .map_err(|e| shared.io_error("read", &path, &e))?;

    if offset > 0 && buffer.first().is_some_and(|b| is_continuation(*b)) {
        return Err(ToolError::new(
            ErrorReason::InvalidArguments,
            format!("offset {offset} falls inside a multi-byte UTF-8 character of {shown}"),
        )
        .with_field("offset")
        .with_hint("continue from the next_offset of the previous files_read result"));
    }
    let content = match std::str::from_utf8(&buffer) {
        Ok(text) => text.to_owned(),
        // The window cut a character in two: give back the whole characters.
        Err(e) if e.error_len().is_none() && offset + (buffer.len() as u64) < size => {
            let whole = e.valid_up_to();
            buffer.truncate(whole);
            String::from_utf8(buffer).map_err(|_| not_text(&shown, offset))?
        }
        Err(e) => {
            let at = offset + e.valid_up_to() as u64;
            return Err(not_text(&shown, at));
        }
    };
    if content.is_empty() && offset < size {
        return Err(ToolError::new(
            ErrorReason::InvalidArguments,
            format!(
                "max_bytes {limit} is too small to hold the character at offset {offset} of {shown}"
            ),
        )
        .with_field("max_bytes")
        .with_hint("ask for at least 4 bytes"));
    }
    let bytes = content.len() as u64;
    let end = offset + bytes;
    let truncated = end < size;
    Ok(json!({
        "path": shown,
        "content": content,
        "bytes": bytes,
        "size": size,
        "truncated": truncated,
        "next_offset": if truncated { Value::from(end) } else { Value::Null },
    }))
}

fn is_continuation(byte: u8) -> bool {
    byte & 0b1100_0000 == 0b1000_0000
}

fn not_text(shown: &str, at: u64) -> ToolError {
    ToolError::execution(format!(
        "{shown} is not UTF-8 text (invalid byte sequence at byte {at}); files_read returns text only"
    ))
    .with_field("path")
    .with_hint("this looks like a binary file; files_read cannot show it")
}
