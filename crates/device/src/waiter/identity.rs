//! Who the waiter says it is: `waiter-<hostname>` unless configured.
//!
//! The host name is read from the kernel (`/proc/sys/kernel/hostname`, then
//! `/etc/hostname`) rather than through libc, which would need unsafe code.
//! It is sanitized to the device-id rule (`[A-Za-z0-9._-]`, 1–64 characters)
//! so a host called `Büro PC` still yields a usable id.

use crate::protocol::is_valid_device_id;

/// The machine's host name, trimmed; `None` when neither file has one.
pub fn hostname() -> Option<String> {
    ["/proc/sys/kernel/hostname", "/etc/hostname"]
        .iter()
        .filter_map(|path| std::fs::read_to_string(path).ok())
        .map(|text| text.trim().to_string())
        .find(|name| !name.is_empty())
}

/// `waiter-<hostname>`, sanitized; `waiter` when there is no host name.
pub fn default_device_id() -> String {
    match hostname() {
        Some(host) => sanitize_device_id(&format!("waiter-{host}")),
        None => "waiter".to_string(),
    }
}

/// Maps every character outside `[A-Za-z0-9._-]` to `-` and cuts to 64
/// characters, so the result always passes [`is_valid_device_id`] (an empty
/// input becomes `waiter`).
pub fn sanitize_device_id(raw: &str) -> String {
    let mut id: String = raw
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-') {
                c
            } else {
                '-'
            }
        })
        .take(64)
        .collect();
    if id.is_empty() {
        id = "waiter".to_string();
    }
    debug_assert!(is_valid_device_id(&id));
    id
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    #[test]
    fn ids_are_sanitized_to_the_rule() {
        assert_eq!(sanitize_device_id("waiter-nas"), "waiter-nas");
        assert_eq!(sanitize_device_id("waiter-Büro PC"), "waiter-B-ro-PC");
        assert_eq!(sanitize_device_id(""), "waiter");
        assert_eq!(sanitize_device_id(&"x".repeat(80)).len(), 64);
    }

    #[test]
    fn the_default_id_is_waiter_dash_hostname() {
        let id = default_device_id();
        assert!(is_valid_device_id(&id), "{id}");
        match hostname() {
            Some(host) => assert_eq!(id, sanitize_device_id(&format!("waiter-{host}"))),
            None => assert_eq!(id, "waiter"),
        }
    }
}
