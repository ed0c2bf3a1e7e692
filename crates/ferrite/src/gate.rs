//! The writer gate of one map: what makes compare-and-swap, `update_with` and
//! transactions atomic with respect to the map's other writers. Readers never
//! pass through it (they rely on the index's own isolation).
//!
//! 64 reader-writer stripes, chosen by a hash of the key:
//!
//! | operation | takes |
//! | --- | --- |
//! | insert / update / upsert / remove | its key's stripe, shared |
//! | write batch | the stripes of its keys, shared, in ascending order |
//! | compare-and-swap, `update_with` | its key's stripe, exclusive |
//! | transaction | every stripe, exclusive, in ascending order, until it ends |
//!
//! Plain writers of different keys never wait for each other (a shared stripe
//! is one uncontended atomic add); a compare-and-swap excludes only the
//! writers of keys in its stripe, for the length of one read and one write;
//! a transaction excludes every writer of the map. Stripes are always taken
//! in ascending order and a holder of an exclusive stripe waits for no other
//! stripe, so the gate cannot deadlock by itself.
//!
//! A thread that holds a transaction (or runs `update_with`'s closure) and
//! then writes through the map would wait for itself forever: the gate
//! notices (the transaction's owner token, a thread-local marker for
//! `update_with`) and the write fails with `TransactionActive` instead.

use std::cell::Cell;
use std::sync::atomic::{AtomicU64, Ordering};

use parking_lot::lock_api::RawRwLock as _;
use parking_lot::RawRwLock;

/// Number of stripes (a bit per stripe in a `u64` mask).
pub(crate) const STRIPES: usize = 64;

#[repr(align(64))]
struct Stripe(RawRwLock);

/// See the module documentation.
pub(crate) struct Gate {
    stripes: Box<[Stripe]>,
    /// Token of the thread that began the transaction holding every stripe
    /// (0: none).
    owner: AtomicU64,
}

static NEXT_TOKEN: AtomicU64 = AtomicU64::new(1);

thread_local! {
    static TOKEN: u64 = NEXT_TOKEN.fetch_add(1, Ordering::Relaxed);
    /// Address of the gate whose `update_with` closure this thread runs (0: none).
    static IN_UPDATE: Cell<usize> = const { Cell::new(0) };
}

fn token() -> u64 {
    TOKEN.with(|t| *t)
}

/// The stripe of `key`: a multiplicative hash of its 8-byte words and length.
#[inline]
pub(crate) fn stripe_of(key: &[u8]) -> usize {
    let mut h = (key.len() as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    let mut chunks = key.chunks_exact(8);
    for c in &mut chunks {
        let w = u64::from_le_bytes(c.try_into().unwrap_or([0; 8]));
        h = (h ^ w).wrapping_mul(0x100_0000_01B3).rotate_left(29);
    }
    let rest = chunks.remainder();
    if !rest.is_empty() {
        let mut w = [0u8; 8];
        w[..rest.len()].copy_from_slice(rest);
        h = (h ^ u64::from_le_bytes(w)).wrapping_mul(0x100_0000_01B3);
    }
    (h.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 58) as usize
}

/// One stripe held shared; released on drop.
pub(crate) struct Shared<'a> {
    gate: &'a Gate,
    i: usize,
}

impl Drop for Shared<'_> {
    fn drop(&mut self) {
        // SAFETY: this guard took the stripe shared and releases it once.
        unsafe { self.gate.stripes[self.i].0.unlock_shared() };
    }
}

/// Several stripes held shared (a bit per stripe); released on drop.
pub(crate) struct SharedSet<'a> {
    gate: &'a Gate,
    mask: u64,
}

impl Drop for SharedSet<'_> {
    fn drop(&mut self) {
        let mut m = self.mask;
        while m != 0 {
            let i = m.trailing_zeros() as usize;
            m &= m - 1;
            // SAFETY: this guard took stripe i shared and releases it once.
            unsafe { self.gate.stripes[i].0.unlock_shared() };
        }
    }
}

/// One stripe held exclusively; released on drop.
pub(crate) struct Exclusive<'a> {
    gate: &'a Gate,
    i: usize,
}

impl Drop for Exclusive<'_> {
    fn drop(&mut self) {
        // SAFETY: this guard took the stripe exclusively and releases it once.
        unsafe { self.gate.stripes[self.i].0.unlock_exclusive() };
    }
}

/// Marks this thread as running an `update_with` closure of a gate, until
/// dropped (also on unwinding); restores an outer marker.
pub(crate) struct UpdateMark {
    prev: usize,
}

impl Drop for UpdateMark {
    fn drop(&mut self) {
        IN_UPDATE.with(|c| c.set(self.prev));
    }
}

impl Gate {
    pub(crate) fn new() -> Gate {
        Gate {
            stripes: (0..STRIPES).map(|_| Stripe(RawRwLock::INIT)).collect(),
            owner: AtomicU64::new(0),
        }
    }

    /// True when a write through the map by this thread would wait for this
    /// thread: it holds the map's transaction, or runs its `update_with`.
    #[inline]
    pub(crate) fn held_by_me(&self) -> bool {
        // The common case (no transaction, no update_with on this thread)
        // costs one load and one const thread-local read.
        let owner = self.owner.load(Ordering::Relaxed);
        let upd = IN_UPDATE.with(|c| c.get());
        (owner != 0 && owner == token()) || (upd != 0 && upd == self as *const Gate as usize)
    }

    /// The stripe of `key`, shared.
    #[inline]
    pub(crate) fn shared(&self, key: &[u8]) -> Shared<'_> {
        let i = stripe_of(key);
        self.stripes[i].0.lock_shared();
        Shared { gate: self, i }
    }

    /// The stripes of `keys`, shared, taken in ascending order.
    pub(crate) fn shared_set<'k>(&self, keys: impl Iterator<Item = &'k [u8]>) -> SharedSet<'_> {
        let mask = keys.fold(0u64, |m, k| m | 1 << stripe_of(k));
        let mut m = mask;
        while m != 0 {
            let i = m.trailing_zeros() as usize;
            m &= m - 1;
            self.stripes[i].0.lock_shared();
        }
        SharedSet { gate: self, mask }
    }

    /// The stripe of `key`, exclusively.
    pub(crate) fn exclusive(&self, key: &[u8]) -> Exclusive<'_> {
        let i = stripe_of(key);
        self.stripes[i].0.lock_exclusive();
        Exclusive { gate: self, i }
    }

    /// Marks this thread as inside an `update_with` closure of this gate.
    pub(crate) fn mark_update(&self) -> UpdateMark {
        let me = self as *const Gate as usize;
        UpdateMark {
            prev: IN_UPDATE.with(|c| c.replace(me)),
        }
    }

    /// Every stripe, exclusively, in ascending order (a transaction); this
    /// thread becomes the owner. Released with [`Gate::unlock_all`].
    pub(crate) fn lock_all(&self) {
        for s in self.stripes.iter() {
            s.0.lock_exclusive();
        }
        self.owner.store(token(), Ordering::Relaxed);
    }

    /// Releases what [`Gate::lock_all`] took.
    ///
    /// # Safety
    /// The caller holds every stripe through `lock_all` and releases it once.
    pub(crate) unsafe fn unlock_all(&self) {
        self.owner.store(0, Ordering::Relaxed);
        for s in self.stripes.iter().rev() {
            // SAFETY: the caller holds every stripe exclusively (contract).
            unsafe { s.0.unlock_exclusive() };
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stripes_spread_keys() {
        let mut seen = [0u32; STRIPES];
        for k in 0..64_000u64 {
            seen[stripe_of(&k.to_be_bytes())] += 1;
            seen[stripe_of(format!("user:{k}").as_bytes())] += 1;
        }
        // Every stripe gets between half and twice its share.
        for (i, &n) in seen.iter().enumerate() {
            assert!((1000..4000).contains(&n), "stripe {i}: {n}");
        }
        assert_ne!(stripe_of(b"a"), stripe_of(b"a\0\0\0\0\0\0\0\0"));
    }

    #[test]
    fn a_transaction_holder_is_recognised_and_blocks_others() {
        let g = Gate::new();
        assert!(!g.held_by_me());
        g.lock_all();
        assert!(g.held_by_me());
        std::thread::scope(|s| {
            s.spawn(|| {
                assert!(!g.held_by_me());
                // Every stripe is taken.
                for i in 0..STRIPES {
                    assert!(!g.stripes[i].0.try_lock_shared());
                }
            });
        });
        // SAFETY: taken by lock_all above.
        unsafe { g.unlock_all() };
        assert!(!g.held_by_me());
        let s = g.shared(b"k");
        assert!(!g.stripes[stripe_of(b"k")].0.try_lock_exclusive());
        drop(s);
        let _m = g.mark_update();
        assert!(g.held_by_me());
    }
}
