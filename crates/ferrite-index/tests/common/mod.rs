//! Helpers shared by the integration tests.

/// A pool file path that is removed when dropped (the pool itself is created
/// by the test).
pub struct TempPool(pub std::path::PathBuf);

impl Drop for TempPool {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

/// A fresh path in /dev/shm (emulated PM), or the temp dir where there is none.
pub fn temp_pool(tag: &str) -> TempPool {
    let dir = if std::path::Path::new("/dev/shm").is_dir() {
        std::path::PathBuf::from("/dev/shm")
    } else {
        std::env::temp_dir()
    };
    TempPool(dir.join(format!("ferrite-index-{tag}-{}.pool", std::process::id())))
}
