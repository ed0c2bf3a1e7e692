//! The page latch: parking_lot's raw reader-writer lock, used without guards
//! because a latch is taken in one function (fix) and released in another
//! (the page guard's drop). Evictors use the try-variants only, so they never
//! wait for a latch held by an operation (see the latching protocol in
//! docs/ARCHITECTURE.md).

use parking_lot::lock_api::{RawRwLock as _, RawRwLockDowngrade as _, RawRwLockRecursive as _};

/// A shared / exclusive latch.
pub(crate) struct Latch(parking_lot::RawRwLock);

impl Latch {
    pub const fn new() -> Latch {
        Latch(<parking_lot::RawRwLock as parking_lot::lock_api::RawRwLock>::INIT)
    }

    #[inline]
    pub fn lock_shared(&self) {
        self.0.lock_shared()
    }

    #[inline]
    pub fn lock_exclusive(&self) {
        self.0.lock_exclusive()
    }

    #[inline]
    pub fn try_lock_exclusive(&self) -> bool {
        self.0.try_lock_exclusive()
    }

    /// A shared hold even when a writer waits (never when one holds it):
    /// evictors use it on parents that running operations hold shared.
    #[inline]
    pub fn try_lock_shared(&self) -> bool {
        self.0.try_lock_shared_recursive()
    }

    /// # Safety
    /// The caller holds the latch shared.
    #[inline]
    pub unsafe fn unlock_shared(&self) {
        // SAFETY: forwarded caller guarantee.
        unsafe { self.0.unlock_shared() }
    }

    /// # Safety
    /// The caller holds the latch exclusive.
    #[inline]
    pub unsafe fn unlock_exclusive(&self) {
        // SAFETY: forwarded caller guarantee.
        unsafe { self.0.unlock_exclusive() }
    }

    /// Turns an exclusive hold into a shared one without letting a writer in.
    ///
    /// # Safety
    /// The caller holds the latch exclusive.
    #[inline]
    pub unsafe fn downgrade(&self) {
        // SAFETY: forwarded caller guarantee.
        unsafe { self.0.downgrade() }
    }
}

impl Default for Latch {
    fn default() -> Self {
        Latch::new()
    }
}

/// How a page is latched.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    Shared,
    Exclusive,
}

thread_local! {
    /// DRAM frames this thread holds latched exclusive through page guards.
    static HELD_X: std::cell::RefCell<Vec<u32>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// Records that this thread latched (`on`) or released DRAM frame `fid`
/// exclusive. An evictor uses it to recognise a parent it holds itself.
pub(crate) fn note_exclusive(fid: u32, on: bool) {
    HELD_X.with(|h| {
        let mut h = h.borrow_mut();
        if on {
            h.push(fid);
        } else if let Some(i) = h.iter().rposition(|&f| f == fid) {
            h.swap_remove(i);
        }
    });
}

/// Whether this thread holds DRAM frame `fid` exclusive.
pub(crate) fn holds_exclusive(fid: u32) -> bool {
    HELD_X.with(|h| h.borrow().contains(&fid))
}
