//! Flush dispatch: the same `flush` / `fence` / `nt_copy` calls write back with
//! cache-line instructions, note pages for `msync`, or feed the crash simulator,
//! depending on the pool's mode; and the pool's health once a write-back failed.

use std::sync::MutexGuard;

use crate::error::{PmError, Result};
use crate::msync::WriteBack;
use crate::persist;
use crate::sim::{CrashHook, CrashPoint, Sim};
use crate::AlignedBuf;

use super::Pool;

/// How flushes and fences reach durability.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(super) enum Mode {
    /// Cache-line write-back instructions (or nothing but the fence in eADR mode).
    Direct,
    /// `msync` of the noted pages at every fence.
    Msync,
    /// The crash simulator.
    Sim,
}

/// `msync(MS_SYNC)` on the pool's mapping.
pub(super) struct Msync {
    pub base: *mut u8,
    pub size: usize,
}

impl WriteBack for Msync {
    fn write_back(&self, off: usize, len: usize) -> std::io::Result<()> {
        assert!(off.is_multiple_of(4096) && off + len <= self.size);
        // SAFETY: the range is page aligned and inside the mapping (asserted).
        let r = unsafe { libc::msync(self.base.add(off) as *mut libc::c_void, len, libc::MS_SYNC) };
        if r == 0 {
            Ok(())
        } else {
            Err(std::io::Error::last_os_error())
        }
    }
}

impl Pool {
    fn check_range(&self, p: *const u8, len: usize) -> usize {
        let off = (p as usize).wrapping_sub(self.inner.base as usize);
        assert!(
            off <= self.inner.size && len <= self.inner.size - off,
            "persist range outside the pool"
        );
        off
    }

    /// Writes back the cache lines of `[p, p+len)`, which must be inside the pool.
    // Safe despite the raw pointer: the range is checked against the mapping
    // before any instruction touches it, and write-back never changes contents.
    #[allow(clippy::not_unsafe_ptr_arg_deref)]
    #[inline]
    pub fn flush(&self, p: *const u8, len: usize) {
        let off = self.check_range(p, len);
        match self.inner.mode {
            // SAFETY: the range is inside the mapping (checked).
            Mode::Direct => unsafe { persist::flush_range(self.inner.flush_kind, p, len) },
            Mode::Sim => {
                persist::count_lines(p, len);
                self.sim().flush(self.inner.base, off, len);
            }
            Mode::Msync => {
                persist::count_lines(p, len);
                if len > 0 {
                    let page = 4096;
                    let start = off / page * page;
                    let end = (off + len).div_ceil(page) * page;
                    self.inner
                        .msync
                        .note(start, end.min(self.inner.size) - start);
                }
            }
        }
    }

    /// A persist barrier: this thread's earlier flushes are durable when it
    /// returns `Ok`. In msync mode it writes back every page noted so far (by
    /// any thread) and fails with the system call's error when a write-back
    /// fails; after that the pool is poisoned (see [`Pool::health`]). In the
    /// other modes it cannot fail.
    #[inline]
    pub fn fence(&self) -> Result<()> {
        match self.inner.mode {
            Mode::Direct => persist::fence(),
            Mode::Sim => {
                persist::fence();
                let base = self.inner.base;
                self.sim().fence(base);
            }
            Mode::Msync => {
                persist::fence();
                let wb = Msync {
                    base: self.inner.base,
                    size: self.inner.size,
                };
                return self
                    .inner
                    .msync
                    .fence(&wb)
                    .map_err(|e| PmError::io(self.inner.path.clone().unwrap_or_default(), e));
            }
        }
        Ok(())
    }

    /// `flush` then `fence`.
    #[inline]
    pub fn persist(&self, p: *const u8, len: usize) -> Result<()> {
        self.flush(p, len);
        self.fence()
    }

    /// Copies `src` to pool address `dst` with non-temporal stores (large writes);
    /// a [`fence`](Self::fence) makes it durable.
    // Safe despite the raw pointer: the destination range is checked against the
    // mapping first, and pool memory is shared memory the caller owns by contract.
    #[allow(clippy::not_unsafe_ptr_arg_deref)]
    pub fn nt_copy(&self, dst: *mut u8, src: &[u8]) {
        let off = self.check_range(dst, src.len());
        match self.inner.mode {
            // SAFETY: the dst range is inside the mapping (checked) and does not
            // overlap src (checked by `overlaps`; overlapping copies take the
            // memmove path below).
            Mode::Direct if !self.overlaps(src) => unsafe {
                persist::nt_copy(self.inner.flush_kind, dst, src.as_ptr(), src.len())
            },
            _ => {
                // SAFETY: dst range is inside the mapping; copy handles overlap.
                unsafe { std::ptr::copy(src.as_ptr(), dst, src.len()) };
                if self.inner.mode == Mode::Sim {
                    persist::count_nt(src.len());
                    self.sim().flush(self.inner.base, off, src.len());
                } else {
                    self.flush(dst, src.len());
                }
            }
        }
    }

    fn overlaps(&self, s: &[u8]) -> bool {
        let b = self.inner.base as usize;
        let p = s.as_ptr() as usize;
        p < b + self.inner.size && b < p + s.len()
    }

    // ----- health ----------------------------------------------------------------------

    pub(crate) fn writable(&self) -> Result<()> {
        if self.inner.read_only {
            return Err(PmError::ReadOnly);
        }
        self.health()
    }

    /// `Err` once a write-back to the device has failed (msync mode): data
    /// written since may not be durable, so the pool refuses further metadata
    /// writes (object creation, root updates, chunk claims) and every later
    /// fence with this error.
    pub fn health(&self) -> Result<()> {
        match self.inner.msync.failure() {
            None => Ok(()),
            Some(m) => Err(PmError::io(
                self.inner.path.clone().unwrap_or_default(),
                std::io::Error::other(format!("an earlier write-back failed: {m}")),
            )),
        }
    }

    // ----- crash simulator control -----------------------------------------------

    fn sim(&self) -> MutexGuard<'_, Sim> {
        self.inner
            .sim
            .as_ref()
            .expect("simulated mode without simulator")
            .lock()
            .unwrap_or_else(|e| e.into_inner())
    }

    /// Installs the hook called at every fence of a simulated pool (before the
    /// fence takes effect) and restarts the fence count. Errors on other pools.
    pub fn set_crash_hook(&self, hook: Option<CrashHook>) -> Result<()> {
        if self.inner.mode != Mode::Sim {
            return Err(PmError::Invalid("not a simulated pool".into()));
        }
        let mut s = self.sim();
        s.hook = hook;
        s.fences = 0;
        Ok(())
    }

    /// Removes the crash hook without resetting the fence count (no-op on other
    /// pools).
    pub fn clear_crash_hook(&self) {
        if self.inner.mode == Mode::Sim {
            self.sim().hook = None;
        }
    }

    /// Calls `f` with the crash point "now" (after the last fence), without fencing.
    pub fn with_crash_point<R>(&self, f: impl FnOnce(&CrashPoint<'_>) -> R) -> Result<R> {
        if self.inner.mode != Mode::Sim {
            return Err(PmError::Invalid("not a simulated pool".into()));
        }
        let s = self.sim();
        Ok(f(&CrashPoint::at_end(&s, self.inner.base)))
    }

    /// Fences issued since the hook was installed (simulated pools).
    pub fn sim_fences(&self) -> Option<u64> {
        self.inner.sim.as_ref().map(|_| self.sim().fences)
    }

    /// A copy of the pool's bytes as the CPU sees them (tests, image tools).
    pub fn snapshot(&self) -> AlignedBuf {
        let mut b = AlignedBuf::zeroed(self.inner.size);
        // SAFETY: the mapping has `size` readable bytes.
        unsafe { std::ptr::copy_nonoverlapping(self.inner.base, b.as_mut_ptr(), self.inner.size) };
        b
    }
}
