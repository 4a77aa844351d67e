//! Making room in a map bounded by the bytes its entries hold.

use std::collections::HashMap;

/// Drops the least recently used entries of `entries` until `bytes` is at
/// most three quarters of `capacity`, never `just_kept` (which fits on its
/// own): dropping a quarter at once pays the scan for the oldest once per
/// many insertions, not once per insertion. `used` reads an entry's last
/// use (higher is later) and `size` its bytes, taken off `bytes` as it
/// goes.
pub(crate) fn evict_oldest<E>(
    entries: &mut HashMap<String, E>,
    bytes: &mut usize,
    capacity: usize,
    just_kept: &str,
    used: impl Fn(&E) -> u64,
    size: impl Fn(&E) -> usize,
) {
    let target = capacity - capacity / 4;
    let mut by_age: Vec<(u64, String)> = entries
        .iter()
        .filter(|(key, _)| key.as_str() != just_kept)
        .map(|(key, entry)| (used(entry), key.clone()))
        .collect();
    by_age.sort_unstable();
    for (_, key) in by_age {
        if *bytes <= target {
            break;
        }
        if let Some(entry) = entries.remove(&key) {
            *bytes -= size(&entry);
        }
    }
}
