//! Pool files that remove themselves: benchmarks and tests create pools in
//! `/dev/shm` and must not leave them behind.

use std::path::{Path, PathBuf};

use crate::error::Result;
use crate::pool::{Pool, PoolOptions};

/// A freshly created pool file, unmapped and deleted on drop.
pub struct TempPool {
    pool: Option<Pool>,
    path: PathBuf,
}

impl TempPool {
    /// Creates `<dir>/ferrite-<tag>-<pid>.pool` (replacing a stale one).
    pub fn create(dir: &Path, tag: &str, size: u64) -> Result<TempPool> {
        let path = dir.join(format!("ferrite-{tag}-{}.pool", std::process::id()));
        let _ = std::fs::remove_file(&path);
        let pool = Pool::create(&path, size, &PoolOptions::default())?;
        Ok(TempPool {
            pool: Some(pool),
            path,
        })
    }

    pub fn pool(&self) -> &Pool {
        self.pool.as_ref().expect("the pool lives until drop")
    }

    pub fn path(&self) -> &Path {
        &self.path
    }
}

impl Drop for TempPool {
    fn drop(&mut self) {
        self.pool.take();
        let _ = std::fs::remove_file(&self.path);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_file_goes_away_with_the_handle() {
        let t = TempPool::create(Path::new("/dev/shm"), "temp-test", 1 << 20).unwrap();
        let p = t.path().to_path_buf();
        assert!(p.exists());
        assert_eq!(t.pool().size(), 1 << 20);
        drop(t);
        assert!(!p.exists());
    }
}
