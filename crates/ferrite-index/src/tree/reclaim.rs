//! Epoch-based reclamation: retired leaves and out-of-line blocks are queued
//! when every thread pinned at retirement has unpinned (`crate::ebr`) and
//! handed back to the heap by the next writer (`drain_reclaim`).
//!
//! Invariants relied on: a block is retired only after the store that made it
//! unreachable was written back and fenced (as `Heap::free` requires); retired
//! blocks count as live for space accounting until they are freed.

use std::collections::HashSet;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;

use crate::ebr::{self as epoch, Guard};

use super::FerriteIndex;

/// Blocks whose epoch has passed, freed by the next writer.
#[derive(Default)]
pub(super) struct Reclaim {
    ready: Mutex<Vec<u64>>,
    n: AtomicUsize,
    /// Retired and not yet freed (accounting checks count them as live).
    retired: Mutex<HashSet<u64>>,
}

impl FerriteIndex {
    pub(super) fn free_later(&self, off: u64, g: &Guard) {
        self.reclaim
            .retired
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(off);
        let r = self.reclaim.clone();
        g.defer(move || {
            r.ready.lock().unwrap_or_else(|e| e.into_inner()).push(off);
            r.n.fetch_add(1, Ordering::Release);
        });
    }

    pub(super) fn drain_reclaim(&self) {
        if self.reclaim.n.load(Ordering::Relaxed) == 0 {
            return;
        }
        let v = {
            let mut q = self.reclaim.ready.lock().unwrap_or_else(|e| e.into_inner());
            self.reclaim.n.store(0, Ordering::Relaxed);
            std::mem::take(&mut *q)
        };
        {
            let mut r = self
                .reclaim
                .retired
                .lock()
                .unwrap_or_else(|e| e.into_inner());
            for off in &v {
                r.remove(off);
            }
        }
        for off in v {
            // The unlinking store was flushed and fenced before the block was
            // retired, as Heap::free requires.
            let _ = self.heap.free(off);
        }
        if !self.durable {
            // The heap reuses a freed block after this thread's next fence;
            // volatile mode issues none otherwise (and cannot fail).
            let _ = self.pool.fence();
        }
    }

    /// Frees what the epoch released and returns the blocks still retired.
    pub(super) fn quiesce(&self) -> Vec<u64> {
        epoch::pin().flush();
        self.drain_reclaim();
        let _ = self.pool.fence();
        let r = self
            .reclaim
            .retired
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        r.iter().copied().collect()
    }
}
