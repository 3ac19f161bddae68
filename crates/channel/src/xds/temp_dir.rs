//! The xDS unit tests' temporary directories (certificate files, sockets): fresh per call, removed with
//! everything in them when dropped.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

/// A directory under the system's temporary one, removed when dropped.
pub(super) struct TempDir(pub(super) PathBuf);

impl std::ops::Deref for TempDir {
    type Target = Path;
    fn deref(&self) -> &Path {
        &self.0
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A fresh `<prefix>-<tag>-<pid>-<n>` directory.
pub(super) fn temp_dir(prefix: &str, tag: &str) -> TempDir {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let dir = std::env::temp_dir().join(format!(
        "{prefix}-{tag}-{}-{}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    ));
    std::fs::create_dir_all(&dir).expect("test setup");
    TempDir(dir)
}
