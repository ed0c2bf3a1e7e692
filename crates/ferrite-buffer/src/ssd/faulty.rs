//! Fault injection at the system-call layer: a backend wrapper that fails a
//! chosen `pwrite` or `fdatasync`, or tears a write (writes a prefix, then
//! fails), as a dying device or a full filesystem would.

use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use super::SsdBackend;

/// A fault to inject.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    /// `pwrite` fails with EIO and writes nothing.
    FailWrite,
    /// `pwrite` writes only the first `bytes` bytes, then fails with EIO.
    TornWrite { bytes: usize },
    /// `fdatasync` fails with EIO.
    FailSync,
}

/// Shared control of a [`FaultyBackend`]: arm faults, read counters.
#[derive(Default)]
pub struct FaultControl {
    /// (fault, calls of its kind to let through first); fired faults are removed.
    armed: Mutex<Vec<(Fault, u64)>>,
    /// Faults that stay on once fired (a dead device).
    sticky: Mutex<bool>,
    pub writes: AtomicU64,
    pub syncs: AtomicU64,
    pub reads: AtomicU64,
    pub injected: AtomicU64,
}

impl FaultControl {
    pub fn new() -> Arc<FaultControl> {
        Arc::new(FaultControl::default())
    }

    /// Fires `fault` on the call of its kind after `skip` more calls succeed.
    pub fn arm(&self, fault: Fault, skip: u64) {
        self.armed.lock().unwrap().push((fault, skip));
    }

    /// Once a fault fired, every later write and sync fails too.
    pub fn set_sticky(&self, on: bool) {
        *self.sticky.lock().unwrap() = on;
    }

    /// Removes armed faults and the sticky failure.
    pub fn clear(&self) {
        self.armed.lock().unwrap().clear();
        *self.sticky.lock().unwrap() = false;
        self.injected.store(0, Ordering::Relaxed);
    }

    fn take(&self, write: bool) -> Option<Fault> {
        if *self.sticky.lock().unwrap() && self.injected.load(Ordering::Relaxed) > 0 {
            return Some(if write {
                Fault::FailWrite
            } else {
                Fault::FailSync
            });
        }
        let mut armed = self.armed.lock().unwrap();
        let i = armed
            .iter()
            .position(|(f, _)| (*f == Fault::FailSync) != write)?;
        if armed[i].1 > 0 {
            armed[i].1 -= 1;
            return None;
        }
        let (f, _) = armed.remove(i);
        self.injected.fetch_add(1, Ordering::Relaxed);
        Some(f)
    }
}

fn eio(what: &str) -> std::io::Error {
    std::io::Error::other(format!("injected {what} failure (EIO)"))
}

/// Wraps a backend and injects the faults armed in its [`FaultControl`].
pub struct FaultyBackend<B: SsdBackend> {
    inner: B,
    ctl: Arc<FaultControl>,
}

impl<B: SsdBackend> FaultyBackend<B> {
    pub fn new(inner: B, ctl: Arc<FaultControl>) -> FaultyBackend<B> {
        FaultyBackend { inner, ctl }
    }
}

impl<B: SsdBackend> SsdBackend for FaultyBackend<B> {
    fn pread(&self, file: u32, off: u64, buf: &mut [u8]) -> std::io::Result<usize> {
        self.ctl.reads.fetch_add(1, Ordering::Relaxed);
        self.inner.pread(file, off, buf)
    }

    fn pwrite(&self, file: u32, off: u64, buf: &[u8]) -> std::io::Result<usize> {
        self.ctl.writes.fetch_add(1, Ordering::Relaxed);
        match self.ctl.take(true) {
            None => self.inner.pwrite(file, off, buf),
            Some(Fault::TornWrite { bytes }) => {
                let n = bytes.min(buf.len());
                if n > 0 {
                    self.inner.pwrite(file, off, &buf[..n])?;
                }
                Err(eio("torn write"))
            }
            Some(_) => Err(eio("write")),
        }
    }

    fn fdatasync(&self, file: u32) -> std::io::Result<()> {
        self.ctl.syncs.fetch_add(1, Ordering::Relaxed);
        match self.ctl.take(false) {
            None => self.inner.fdatasync(file),
            Some(_) => Err(eio("fdatasync")),
        }
    }

    fn path(&self, file: u32) -> PathBuf {
        self.inner.path(file)
    }

    fn describe(&self) -> String {
        format!("{} (with fault injection)", self.inner.describe())
    }
}
