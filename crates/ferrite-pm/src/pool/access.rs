//! Typed, bounds-checked access to PM: [`PmWord`] for an aligned 8-byte word,
//! [`PmSlice`] for a byte range. New code uses these instead of raw
//! [`Pool::at`] arithmetic: a bad offset (typically read from a corrupt pool)
//! is an error, never a panic or a stray write, and word stores go through the
//! crash simulator's store recording.

use std::sync::atomic::{AtomicU64, Ordering};

use crate::error::{PmError, Result};

use super::Pool;

/// An 8-byte aligned word of a pool.
#[derive(Clone, Copy)]
pub struct PmWord<'p> {
    pool: &'p Pool,
    off: u64,
}

/// A byte range of a pool.
#[derive(Clone, Copy)]
pub struct PmSlice<'p> {
    pool: &'p Pool,
    off: u64,
    len: usize,
}

impl Pool {
    fn check_access(&self, off: u64, len: usize) -> Result<()> {
        if self.contains(off, len) {
            Ok(())
        } else {
            Err(PmError::OutOfBounds {
                off,
                len,
                size: self.size(),
            })
        }
    }

    /// The word at `off` (must be 8-byte aligned and inside the pool).
    pub fn word(&self, off: u64) -> Result<PmWord<'_>> {
        self.check_access(off, 8)?;
        if !off.is_multiple_of(8) {
            return Err(PmError::OutOfBounds {
                off,
                len: 8,
                size: self.size(),
            });
        }
        Ok(PmWord { pool: self, off })
    }

    /// The bytes `[off, off+len)` (must be inside the pool).
    pub fn slice(&self, off: u64, len: usize) -> Result<PmSlice<'_>> {
        self.check_access(off, len)?;
        Ok(PmSlice {
            pool: self,
            off,
            len,
        })
    }
}

impl<'p> PmWord<'p> {
    /// The word as an atomic (for compare-and-swap and friends; plain stores
    /// should use [`PmWord::store`] so the simulator sees them).
    pub fn atomic(self) -> &'p AtomicU64 {
        // SAFETY: checked in bounds and 8-byte aligned at creation; the mapping
        // lives as long as the pool handle `'p` borrows.
        unsafe { &*(self.pool.inner.base.add(self.off as usize) as *const AtomicU64) }
    }

    pub fn load(self, order: Ordering) -> u64 {
        self.atomic().load(order)
    }

    /// Stores `v`, recorded in program order under the crash simulator.
    pub fn store(self, v: u64, order: Ordering) {
        crate::sim::store_u64(self.atomic(), v, order);
    }

    pub fn offset(self) -> u64 {
        self.off
    }

    /// Writes the word's cache line back (durable after the next fence).
    pub fn flush(self) {
        self.pool
            .flush(self.atomic() as *const AtomicU64 as *const u8, 8);
    }

    /// Flush then fence.
    pub fn persist(self) -> Result<()> {
        self.flush();
        self.pool.fence()
    }
}

impl<'p> PmSlice<'p> {
    fn ptr(self) -> *mut u8 {
        // SAFETY: checked in bounds at creation.
        unsafe { self.pool.inner.base.add(self.off as usize) }
    }

    pub fn offset(self) -> u64 {
        self.off
    }

    pub fn len(self) -> usize {
        self.len
    }

    pub fn is_empty(self) -> bool {
        self.len == 0
    }

    /// Hints the CPU to start loading the slice's first cache line (no
    /// effect on what is read: for walks that know their next address).
    #[inline]
    pub fn prefetch(self) {
        crate::prefetch::line(self.ptr());
    }

    /// Copies the bytes out.
    pub fn to_vec(self) -> Vec<u8> {
        let mut v = vec![0u8; self.len];
        // SAFETY: in bounds; a byte copy of shared memory (a concurrent writer
        // can only make the copy stale, structures validate what they read).
        unsafe { std::ptr::copy_nonoverlapping(self.ptr(), v.as_mut_ptr(), self.len) };
        v
    }

    /// Appends the bytes to `out` (one copy, no allocation beyond `out`'s).
    pub fn append_to(self, out: &mut Vec<u8>) {
        out.reserve(self.len);
        let at = out.len();
        // SAFETY: in bounds; `reserve` made room for `len` more bytes after
        // `at`, which the copy initialises before `set_len` exposes them; a
        // byte copy of shared memory, as in `to_vec`.
        unsafe {
            std::ptr::copy_nonoverlapping(self.ptr(), out.as_mut_ptr().add(at), self.len);
            out.set_len(at + self.len);
        }
    }

    /// The little-endian u64 at byte `at` of the slice (unaligned allowed).
    pub fn read_u64(self, at: usize) -> Result<u64> {
        if at.checked_add(8).is_none_or(|e| e > self.len) {
            return Err(PmError::OutOfBounds {
                off: self.off + at as u64,
                len: 8,
                size: self.pool.size(),
            });
        }
        // SAFETY: in bounds (checked); unaligned read of plain bytes.
        Ok(u64::from_le(unsafe {
            std::ptr::read_unaligned(self.ptr().add(at) as *const u64)
        }))
    }

    /// Copies `src` into the slice at byte `at` (plain stores: order within a
    /// line is not recorded, so publish what you write with a separate persist).
    pub fn write(self, at: usize, src: &[u8]) -> Result<()> {
        if self.pool.is_read_only() {
            return Err(PmError::ReadOnly);
        }
        if at.checked_add(src.len()).is_none_or(|e| e > self.len) {
            return Err(PmError::OutOfBounds {
                off: self.off + at as u64,
                len: src.len(),
                size: self.pool.size(),
            });
        }
        // SAFETY: in bounds (checked), writable mapping (checked), and the
        // source is a distinct Rust slice (copy handles overlap anyway).
        unsafe { std::ptr::copy(src.as_ptr(), self.ptr().add(at), src.len()) };
        Ok(())
    }

    /// Copies `src` into the slice with non-temporal stores (bypassing the
    /// cache, written back as they go): durable after this thread's next
    /// fence, with no flush. For large writes.
    pub fn write_nt(self, src: &[u8]) -> Result<()> {
        if self.pool.is_read_only() {
            return Err(PmError::ReadOnly);
        }
        if src.len() > self.len {
            return Err(PmError::OutOfBounds {
                off: self.off,
                len: src.len(),
                size: self.pool.size(),
            });
        }
        self.pool.nt_copy(self.ptr(), src);
        Ok(())
    }

    /// Writes the slice's cache lines back (durable after the next fence).
    pub fn flush(self) {
        self.pool.flush(self.ptr(), self.len);
    }

    /// Flush then fence.
    pub fn persist(self) -> Result<()> {
        self.flush();
        self.pool.fence()
    }
}
