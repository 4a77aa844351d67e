//! What the tests that run the built binary as child processes share: a
//! temporary directory and a child process, each cleaned up on drop.

#![allow(dead_code)] // each test binary uses its own part of it

use std::path::PathBuf;
use std::process::Child;
use std::sync::atomic::{AtomicUsize, Ordering};

/// A directory under the system temp dir, removed on drop.
pub struct Dir(pub PathBuf);

impl Drop for Dir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A fresh, empty directory named for `tag`, this process and a counter.
pub fn temp_dir(tag: &str) -> Dir {
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    let dir = std::env::temp_dir().join(format!(
        "homeagent-{tag}-{}-{}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::SeqCst)
    ));
    let _ = std::fs::remove_dir_all(&dir);
    #[allow(clippy::unwrap_used)] // a panic in a test is a test failure
    std::fs::create_dir_all(&dir).unwrap();
    Dir(dir)
}

/// A child process killed when the test ends, however it ends.
pub struct Proc(pub Child);

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}
