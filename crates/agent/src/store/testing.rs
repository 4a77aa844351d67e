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

impl TempStore {
    /// Makes SQLite refuse every message whose body contains `marker`,
    /// with the error text `failure` (a trigger, as a full disk or a broken
    /// file would refuse the write).
    pub fn refuse_messages_containing(&self, marker: &str, failure: &str) {
        self.store
            .lock()
            .execute_batch(&format!(
                "CREATE TRIGGER refuse_{marker} BEFORE INSERT ON messages
                 WHEN NEW.body LIKE '%{marker}%'
                 BEGIN SELECT RAISE(ABORT, '{failure}'); END;"
            ))
            .unwrap();
    }
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
    let dir = temp_dir(label);
    let store = Arc::new(Store::open_with(&dir.join("store.db"), durability).unwrap());
    TempStore { dir, store }
}

/// [`temp_store_with`] whose held writes wait `hold` (`Store::set_write_hold`).
pub(super) fn temp_store_holding(
    label: &str,
    hold: std::time::Duration,
    durability: Durability,
) -> TempStore {
    let dir = temp_dir(label);
    let mut store = Store::open_with(&dir.join("store.db"), durability).unwrap();
    store.set_write_hold(hold);
    TempStore {
        dir,
        store: Arc::new(store),
    }
}

fn temp_dir(label: &str) -> PathBuf {
    std::env::temp_dir().join(format!(
        "homeagent-store-{label}-{}-{:?}",
        std::process::id(),
        std::time::SystemTime::now()
    ))
}
