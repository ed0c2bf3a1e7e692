//! The volatile sort order of leaves, kept in DRAM beside them for scans.
//!
//! A leaf's entries sit in hash order (their home lines, see
//! [`crate::leaf::homes`]), so a scan must sort every leaf it visits. The
//! order a scan computed is kept here, per leaf, and reused by the next scan of
//! that leaf while it holds exactly the same entries. The cache is advisory
//! and never trusted: a scan checks that the cached order lists every entry of
//! its (validated) snapshot exactly once, in strictly increasing key order —
//! which is then *the* sorted order — and sorts again otherwise. So writers
//! never touch it (a changed leaf simply fails the check once), racing scans
//! may overwrite each other's entries or tear them, and nothing is rebuilt on
//! open.
//!
//! Memory: one 16-byte entry per 256-byte block of the pool (a leaf is two
//! blocks and uses the first entry), in an anonymous mapping reserved without
//! backing: only entries of leaves that were scanned take memory (their pages),
//! counted in [`super::FerriteIndex::memory_usage`].

use std::sync::atomic::{AtomicU64, Ordering};

/// Slots per order word (5 bits each).
const PER_WORD: usize = 12;
/// Marks the end of a stored order.
const END: u64 = 31;
const _: () = assert!(crate::leaf::SLOTS <= 2 * PER_WORD && crate::leaf::SLOTS < END as usize);

pub(super) struct OrderCache {
    /// Two words per 256-byte block of the pool; null when the reservation
    /// failed (scans then always sort).
    words: *mut AtomicU64,
    blocks: usize,
    /// Entries ever written (their first write), for the memory estimate.
    touched: AtomicU64,
}

impl OrderCache {
    pub(super) fn new(pool_size: u64) -> OrderCache {
        let blocks = (pool_size / 256) as usize;
        let bytes = blocks * 16;
        // SAFETY: a fresh private anonymous mapping (zero pages until written);
        // no existing memory is affected.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                bytes.max(1),
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
                -1,
                0,
            )
        };
        OrderCache {
            words: if p == libc::MAP_FAILED {
                std::ptr::null_mut()
            } else {
                p.cast()
            },
            blocks,
            touched: AtomicU64::new(0),
        }
    }

    /// The two words of the leaf at pool offset `off` (None: no cache).
    #[inline]
    fn entry(&self, off: u64) -> Option<&[AtomicU64; 2]> {
        let b = (off / 256) as usize;
        if self.words.is_null() || b >= self.blocks {
            return None;
        }
        // SAFETY: b < blocks, so words[2b..2b+2] lies inside the mapping,
        // which lives as long as `self`; AtomicU64 has u64's layout and the
        // mapping is page-aligned.
        Some(unsafe { &*(self.words.add(2 * b) as *const [AtomicU64; 2]) })
    }

    /// Asks for the entry of the leaf at `off` (a scan about to visit it).
    #[inline]
    pub(super) fn prefetch(&self, off: u64) {
        if let Some(e) = self.entry(off) {
            crate::prefetch::lines(e.as_ptr() as usize, 16);
        }
    }

    /// Sorts a leaf's packed entries (see `FerriteIndex::snapshot_narrow`:
    /// the slot in bits 0..8, the key from bit 16 up) by key: in the cached
    /// order when it checks out, else by sorting, and then caches the order.
    pub(super) fn sort(&self, off: u64, packed: &mut [(u128, u64)]) {
        let n = packed.len();
        if n <= 1 {
            return;
        }
        let Some(e) = self.entry(off) else {
            crate::sort::sort_packed(packed);
            return;
        };
        let (w0, w1) = (e[0].load(Ordering::Relaxed), e[1].load(Ordering::Relaxed));
        if w0 != 0 && apply(w0, w1, packed) {
            return;
        }
        crate::sort::sort_packed(packed);
        let (mut n0, mut n1) = (0u64, 0u64);
        for j in 0..2 * PER_WORD {
            let s = packed.get(j).map_or(END, |p| p.0 as u8 as u64);
            if j < PER_WORD {
                n0 |= s << (5 * j);
            } else {
                n1 |= s << (5 * (j - PER_WORD));
            }
        }
        if w0 == 0 {
            self.touched.fetch_add(1, Ordering::Relaxed);
        }
        e[0].store(n0, Ordering::Relaxed);
        e[1].store(n1, Ordering::Relaxed);
    }

    /// DRAM the cache holds: the entries written so far.
    pub(super) fn bytes(&self) -> u64 {
        self.touched.load(Ordering::Relaxed) * 16
    }
}

/// Reorders `packed` by the stored order `(w0, w1)` when that order lists
/// every entry exactly once with strictly increasing keys (then it is the
/// sorted order); false, with `packed` unchanged, otherwise.
fn apply(w0: u64, w1: u64, packed: &mut [(u128, u64)]) -> bool {
    let n = packed.len();
    let mut pos = [u8::MAX; 32];
    for (i, p) in packed.iter().enumerate() {
        pos[(p.0 as u8 & 31) as usize] = i as u8;
    }
    let mut out = [(0u128, 0u64); 2 * PER_WORD];
    let mut k = 0;
    for j in 0..2 * PER_WORD {
        let w = if j < PER_WORD { w0 } else { w1 };
        let s = (w >> (5 * (j % PER_WORD))) & 31;
        if s == END {
            break;
        }
        let i = pos[s as usize];
        if i == u8::MAX || k == n {
            return false;
        }
        pos[s as usize] = u8::MAX;
        let e = packed[i as usize];
        if k > 0 && out[k - 1].0 >> 16 >= e.0 >> 16 {
            return false;
        }
        out[k] = e;
        k += 1;
    }
    if k != n {
        return false;
    }
    packed.copy_from_slice(&out[..n]);
    true
}

impl Drop for OrderCache {
    fn drop(&mut self) {
        if !self.words.is_null() {
            // SAFETY: the mapping made in `new`, with its length; `&mut self`:
            // nothing borrows it any more.
            unsafe { libc::munmap(self.words.cast(), (self.blocks * 16).max(1)) };
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(key: u64, slot: u8) -> (u128, u64) {
        ((key as u128) << 64 | 8 << 16 | 8 << 8 | slot as u128, key)
    }

    #[test]
    fn cached_orders_are_used_only_when_they_sort_the_entries() {
        let c = OrderCache::new(1 << 20);
        let off = 512;
        let leaf = [entry(30, 4), entry(10, 0), entry(20, 23), entry(5, 7)];
        let sorted = [entry(5, 7), entry(10, 0), entry(20, 23), entry(30, 4)];
        let mut v = leaf;
        c.sort(off, &mut v);
        assert_eq!(v, sorted);
        assert_eq!(c.bytes(), 16);
        // Cached: the same entries in another slot order sort the same way.
        let mut v = [leaf[2], leaf[0], leaf[3], leaf[1]];
        c.sort(off, &mut v);
        assert_eq!(v, sorted);
        // A changed leaf (a key replaced in a slot, one added, one removed)
        // fails the check and is sorted again.
        for changed in [
            vec![entry(30, 4), entry(10, 0), entry(1, 23), entry(5, 7)],
            vec![
                entry(30, 4),
                entry(10, 0),
                entry(20, 23),
                entry(5, 7),
                entry(7, 9),
            ],
            vec![entry(30, 4), entry(10, 0), entry(5, 7)],
        ] {
            let mut want = changed.clone();
            want.sort_unstable_by_key(|e| e.0);
            let mut v = changed.clone();
            c.sort(off, &mut v);
            assert_eq!(v, want);
        }
        // A torn entry (words from two different orders) is never trusted.
        let e = c.entry(off).unwrap();
        e[0].store(e[0].load(Ordering::Relaxed) ^ 0b11111, Ordering::Relaxed);
        let mut v = leaf;
        c.sort(off, &mut v);
        assert_eq!(v, sorted);
        // Out of range offsets just sort.
        let mut v = leaf;
        c.sort(1 << 40, &mut v);
        assert_eq!(v, sorted);
    }
}
