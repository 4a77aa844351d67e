//! A store in a fresh temporary directory, for the store's unit tests.

#![allow(clippy::unwrap_used)] // a panic in a test is a test failure

use std::path::PathBuf;
use std::sync::Arc;

use super::{Durability, Store};

/// The store and its directory, removed on drop.
pub(super) struct TempStore {
    pub dir: PathBuf,
    pub store: Arc<Store>,
}

impl Drop for TempStore {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// A new store under the system temp dir; `label` names the test.
pub(super) fn temp_store(label: &str) -> TempStore {
    temp_store_with(label, Durability::Full)
}

/// [`temp_store`] with the given durability.
pub(super) fn temp_store_with(label: &str, durability: Durability) -> TempStore {
    let dir = std::env::temp_dir().join(format!(
        "homeagent-store-{label}-{}-{:?}",
        std::process::id(),
        std::time::SystemTime::now()
    ));
    let store = Arc::new(Store::open_with(&dir.join("store.db"), durability).unwrap());
    TempStore { dir, store }
}
