//! The per-leaf version lock (optimistic reads, exclusive writers), written
//! against a small [`Word`] trait so that the same protocol code runs on the
//! leaf's `AtomicU64` in production and on loom's atomics in `tests/loom_vlock.rs`.
//!
//! Word layout: bit 0 locked, bit 1 obsolete (the leaf was unlinked), bits 2..
//! the version, bumped by 4 on every unlock that changed the leaf.

use std::sync::atomic::Ordering;

/// The operations the protocol needs from an atomic 64-bit word.
pub trait Word {
    fn load(&self, o: Ordering) -> u64;
    fn store(&self, v: u64, o: Ordering);
    fn compare_exchange_weak(
        &self,
        cur: u64,
        new: u64,
        ok: Ordering,
        fail: Ordering,
    ) -> Result<u64, u64>;
    fn compare_exchange(
        &self,
        cur: u64,
        new: u64,
        ok: Ordering,
        fail: Ordering,
    ) -> Result<u64, u64>;
    /// An acquire fence of the same memory model as the word.
    fn fence_acquire(&self);
    /// A release fence of the same memory model as the word.
    fn fence_release(&self);
    /// Called in spin loops (loom needs to schedule another thread there).
    fn spin(&self) {
        std::hint::spin_loop();
    }
}

impl Word for std::sync::atomic::AtomicU64 {
    #[inline]
    fn load(&self, o: Ordering) -> u64 {
        std::sync::atomic::AtomicU64::load(self, o)
    }
    #[inline]
    fn store(&self, v: u64, o: Ordering) {
        std::sync::atomic::AtomicU64::store(self, v, o)
    }
    #[inline]
    fn compare_exchange_weak(
        &self,
        cur: u64,
        new: u64,
        ok: Ordering,
        fail: Ordering,
    ) -> Result<u64, u64> {
        std::sync::atomic::AtomicU64::compare_exchange_weak(self, cur, new, ok, fail)
    }
    #[inline]
    fn compare_exchange(
        &self,
        cur: u64,
        new: u64,
        ok: Ordering,
        fail: Ordering,
    ) -> Result<u64, u64> {
        std::sync::atomic::AtomicU64::compare_exchange(self, cur, new, ok, fail)
    }
    #[inline]
    fn fence_acquire(&self) {
        std::sync::atomic::fence(Ordering::Acquire)
    }
    #[inline]
    fn fence_release(&self) {
        std::sync::atomic::fence(Ordering::Release)
    }
}

pub const LOCKED: u64 = 1;
pub const OBSOLETE: u64 = 2;
pub const STEP: u64 = 4;

/// Waits until the word is unlocked; its version, or `None` when obsolete.
#[inline]
pub fn read_begin<W: Word + ?Sized>(w: &W) -> Option<u64> {
    loop {
        let v = w.load(Ordering::Acquire);
        if v & OBSOLETE != 0 {
            return None;
        }
        if v & LOCKED == 0 {
            return Some(v);
        }
        w.spin();
    }
}

/// The version if the word is unlocked and not obsolete right now.
#[inline]
pub fn try_read<W: Word + ?Sized>(w: &W) -> Option<u64> {
    let v = w.load(Ordering::Acquire);
    (v & (LOCKED | OBSOLETE) == 0).then_some(v)
}

/// True when nothing changed since `read_begin` returned `v`. The acquire fence
/// orders the caller's (relaxed) data loads before the version check, so a
/// reader that validates cannot have seen a writer's stores torn.
#[inline]
pub fn validate<W: Word + ?Sized>(w: &W, v: u64) -> bool {
    w.fence_acquire();
    w.load(Ordering::Relaxed) == v
}

/// Takes the lock; `None` when the leaf is obsolete. Returns the version held.
///
/// The release fence after taking the lock keeps the holder's data stores from
/// becoming visible before the lock bit: a reader that sees any of them then
/// sees the lock word changed and fails validation (found by the loom test;
/// free on x86, where it is only a compiler barrier).
#[inline]
pub fn lock<W: Word + ?Sized>(w: &W) -> Option<u64> {
    loop {
        let v = w.load(Ordering::Relaxed);
        if v & OBSOLETE != 0 {
            return None;
        }
        if v & LOCKED == 0
            && w.compare_exchange_weak(v, v | LOCKED, Ordering::Acquire, Ordering::Relaxed)
                .is_ok()
        {
            w.fence_release();
            return Some(v);
        }
        w.spin();
    }
}

/// Takes the lock only if it is free right now.
#[inline]
pub fn try_lock<W: Word + ?Sized>(w: &W) -> Option<u64> {
    let v = w.load(Ordering::Relaxed);
    if v & (LOCKED | OBSOLETE) != 0 {
        return None;
    }
    let held = w
        .compare_exchange(v, v | LOCKED, Ordering::Acquire, Ordering::Relaxed)
        .ok();
    if held.is_some() {
        w.fence_release();
    }
    held
}

/// Releases a lock taken at version `v`: a new version when the holder changed
/// the leaf, and the obsolete mark when it unlinked it.
#[inline]
pub fn unlock<W: Word + ?Sized>(w: &W, v: u64, dirty: bool, obsolete: bool) {
    let mut nv = if dirty { v + STEP } else { v };
    if obsolete {
        nv |= OBSOLETE;
    }
    w.store(nv, Ordering::Release);
}
