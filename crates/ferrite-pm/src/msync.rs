//! The write-back queue of msync-mode pools.
//!
//! In msync mode a flush only notes the pages it covers; a fence writes them
//! back (`msync(MS_SYNC)`) before it returns. Two rules make that a real
//! persist barrier when several threads fence at once:
//!
//! 1. **A fence waits for every range it depends on.** Ranges are taken from the
//!    queue and written back under one lock, so a fence that finds the queue
//!    empty because another thread took its ranges waits until that thread's
//!    write-back has finished (and sees its outcome) instead of returning early.
//! 2. **A failed write-back poisons the queue.** The fence that saw the error
//!    returns it; every later fence returns "an earlier write-back failed",
//!    because pages whose write-back failed may be clean in the page cache and
//!    never be written again (the kernel reports such an error once).
//!
//! The queue is generic over its locks ([`Locks`]) so that `tests/loom_msync.rs`
//! model-checks this exact code with loom's mutexes; production uses std's.

use std::io;

/// The system call that writes a range of the mapping back (`msync` in
/// production; tests substitute a recording or failing one).
pub trait WriteBack {
    /// Writes back `len` bytes at pool offset `off` (page aligned).
    fn write_back(&self, off: usize, len: usize) -> io::Result<()>;
}

/// The mutex the queue uses.
pub trait Locks: 'static {
    type Mutex<T: Send>: Send + Sync;
    fn new_mutex<T: Send>(v: T) -> Self::Mutex<T>;
    fn with<T: Send, R>(m: &Self::Mutex<T>, f: impl FnOnce(&mut T) -> R) -> R;
}

/// `std::sync::Mutex` (a poisoned mutex is still used: its data stays valid).
pub struct StdLocks;

impl Locks for StdLocks {
    type Mutex<T: Send> = std::sync::Mutex<T>;
    fn new_mutex<T: Send>(v: T) -> Self::Mutex<T> {
        std::sync::Mutex::new(v)
    }
    fn with<T: Send, R>(m: &Self::Mutex<T>, f: impl FnOnce(&mut T) -> R) -> R {
        f(&mut m.lock().unwrap_or_else(|e| e.into_inner()))
    }
}

/// Pages noted by flushes, written back by fences.
pub struct MsyncQueue<L: Locks = StdLocks> {
    pending: L::Mutex<Vec<(usize, usize)>>,
    /// Held while ranges are taken and written back; holds the first failure.
    syncing: L::Mutex<Option<String>>,
    unordered: bool,
}

impl<L: Locks> Default for MsyncQueue<L> {
    fn default() -> Self {
        Self::new()
    }
}

impl<L: Locks> MsyncQueue<L> {
    pub fn new() -> Self {
        MsyncQueue {
            pending: L::new_mutex(Vec::new()),
            syncing: L::new_mutex(None),
            unordered: false,
        }
    }

    /// Tripwire: the pre-fix behaviour (ranges written back outside the lock,
    /// so a concurrent fence can return before they are durable). Only for the
    /// test that shows the model checker catches it.
    #[doc(hidden)]
    pub fn new_unordered_for_tests() -> Self {
        MsyncQueue {
            unordered: true,
            ..Self::new()
        }
    }

    /// Notes `[off, off+len)` (page aligned) for the next fence.
    pub fn note(&self, off: usize, len: usize) {
        L::with(&self.pending, |p| {
            // Consecutive flushes of one page are common (a log append, then
            // its header): skip an exact repeat of the last range.
            if p.last() != Some(&(off, len)) {
                p.push((off, len));
            }
        });
    }

    /// The first write-back failure, if any.
    pub fn failure(&self) -> Option<String> {
        L::with(&self.syncing, |f| f.clone())
    }

    /// A persist barrier: every range noted before this call (by any thread) is
    /// written back when it returns `Ok`.
    pub fn fence(&self, wb: &impl WriteBack) -> io::Result<()> {
        if self.unordered {
            let ranges = L::with(&self.pending, std::mem::take);
            for (off, len) in coalesce(ranges) {
                wb.write_back(off, len)?;
            }
            return Ok(());
        }
        L::with(&self.syncing, |failed| {
            if let Some(m) = failed {
                return Err(io::Error::other(format!(
                    "an earlier write-back of this pool failed ({m}); its data may not be durable"
                )));
            }
            let ranges = L::with(&self.pending, std::mem::take);
            for (off, len) in coalesce(ranges) {
                if let Err(e) = wb.write_back(off, len) {
                    *failed = Some(e.to_string());
                    return Err(e);
                }
            }
            Ok(())
        })
    }
}

/// Sorts ranges and merges overlapping or adjacent ones.
fn coalesce(mut r: Vec<(usize, usize)>) -> Vec<(usize, usize)> {
    if r.len() < 2 {
        return r;
    }
    r.sort_unstable();
    let mut out: Vec<(usize, usize)> = Vec::with_capacity(r.len());
    for (off, len) in r {
        match out.last_mut() {
            Some((o, l)) if off <= *o + *l => *l = (*l).max(off + len - *o),
            _ => out.push((off, len)),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::coalesce;

    #[test]
    fn coalesce_merges_overlapping_and_adjacent_ranges() {
        let r = coalesce(vec![
            (8192, 4096),
            (0, 4096),
            (4096, 4096),
            (20480, 8192),
            (24576, 4096),
        ]);
        assert_eq!(r, vec![(0, 12288), (20480, 8192)]);
        assert_eq!(coalesce(vec![(4096, 4096)]), vec![(4096, 4096)]);
    }
}
