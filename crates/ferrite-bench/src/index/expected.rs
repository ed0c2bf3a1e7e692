//! What an index must hold: the key hashes (see [`KeyCodec::decode`]) of every
//! key the harness loaded or inserted and has not removed, sorted, so every
//! lookup, update and scan of a run can be checked against it.
//!
//! Keys of 8 bytes and more sort by their hash (big-endian bytes, or 16 fixed
//! hex digits, then filler), so the sorted hashes are the index's key order.
//! A bucket table over the top bits makes `lower_bound` two cache misses
//! rather than a binary search over millions of entries.
//!
//! [`KeyCodec::decode`]: crate::index::workload::KeyCodec::decode

use crate::index::workload::scramble;

/// The sorted key hashes an index must hold.
#[derive(Debug, Clone, Default)]
pub struct KeySet {
    hashes: Vec<u64>,
    /// `buckets[b]` = first position whose hash has top bits >= b.
    buckets: Vec<u32>,
    shift: u32,
}

impl KeySet {
    /// The keys of ids `0..n` (what [`crate::index::runner::load`] loads).
    pub fn loaded(n: u64) -> KeySet {
        let mut hashes: Vec<u64> = (0..n).map(scramble).collect();
        hashes.sort_unstable();
        hashes.dedup();
        KeySet::from_sorted(hashes)
    }

    fn from_sorted(hashes: Vec<u64>) -> KeySet {
        // About 8 entries per bucket.
        let bits = (64 - (hashes.len() as u64 / 8).max(1).leading_zeros()).clamp(1, 24);
        let shift = 64 - bits;
        let nb = 1usize << bits;
        let mut buckets = vec![0u32; nb + 1];
        let mut at = 0usize;
        for (b, slot) in buckets.iter_mut().enumerate().take(nb) {
            while at < hashes.len() && ((hashes[at] >> shift) as usize) < b {
                at += 1;
            }
            *slot = at as u32;
        }
        buckets[nb] = hashes.len() as u32;
        KeySet {
            hashes,
            buckets,
            shift,
        }
    }

    pub fn len(&self) -> usize {
        self.hashes.len()
    }

    pub fn is_empty(&self) -> bool {
        self.hashes.is_empty()
    }

    /// Position of the first hash >= `h`.
    #[inline]
    pub fn lower_bound(&self, h: u64) -> usize {
        if self.hashes.is_empty() {
            return 0;
        }
        let b = (h >> self.shift) as usize;
        let (lo, hi) = (self.buckets[b] as usize, self.buckets[b + 1] as usize);
        lo + self.hashes[lo..hi].partition_point(|&x| x < h)
    }

    #[inline]
    pub fn contains(&self, h: u64) -> bool {
        let i = self.lower_bound(h);
        i < self.hashes.len() && self.hashes[i] == h
    }

    /// The (up to) `n` hashes a scan from `h` must return, in order.
    #[inline]
    pub fn scan_from(&self, h: u64, n: usize) -> &[u64] {
        let i = self.lower_bound(h);
        &self.hashes[i..(i + n).min(self.hashes.len())]
    }

    /// Adds `inserted` and drops `removed` (each in any order).
    pub fn apply(&mut self, mut inserted: Vec<u64>, mut removed: Vec<u64>) {
        if inserted.is_empty() && removed.is_empty() {
            return;
        }
        inserted.sort_unstable();
        removed.sort_unstable();
        let old = std::mem::take(&mut self.hashes);
        let mut out = Vec::with_capacity(old.len() + inserted.len());
        let (mut i, mut j) = (0, 0);
        while i < old.len() || j < inserted.len() {
            let take_old = j >= inserted.len() || (i < old.len() && old[i] <= inserted[j]);
            let h = if take_old {
                i += 1;
                old[i - 1]
            } else {
                j += 1;
                inserted[j - 1]
            };
            if out.last() != Some(&h) && removed.binary_search(&h).is_err() {
                out.push(h);
            }
        }
        *self = KeySet::from_sorted(out);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn loaded_keys_are_found_in_order() {
        let s = KeySet::loaded(10_000);
        assert_eq!(s.len(), 10_000);
        for id in 0..10_000 {
            assert!(s.contains(scramble(id)));
        }
        assert!(!s.contains(scramble(10_000)));
        let w = s.scan_from(0, 5);
        assert_eq!(w.len(), 5);
        assert!(w.windows(2).all(|p| p[0] < p[1]));
        assert_eq!(s.scan_from(u64::MAX, 5).len(), 0);
    }

    proptest! {
        #[test]
        fn behaves_like_a_sorted_set(
            init in proptest::collection::vec(any::<u64>(), 0..300),
            ins in proptest::collection::vec(any::<u64>(), 0..100),
            rem in proptest::collection::vec(any::<u64>(), 0..100),
            probes in proptest::collection::vec(any::<u64>(), 1..50),
        ) {
            let mut model: std::collections::BTreeSet<u64> = init.iter().copied().collect();
            let mut s = KeySet::from_sorted(model.iter().copied().collect());
            // Removals may name present keys.
            let rem: Vec<u64> = rem.iter().chain(init.iter().take(20)).copied().collect();
            s.apply(ins.clone(), rem.clone());
            for h in &ins { model.insert(*h); }
            for h in &rem { model.remove(h); }
            prop_assert_eq!(s.len(), model.len());
            for p in probes.iter().chain(ins.iter()).chain(init.iter()) {
                prop_assert_eq!(s.contains(*p), model.contains(p));
                let want: Vec<u64> = model.range(*p..).take(7).copied().collect();
                prop_assert_eq!(s.scan_from(*p, 7), &want[..]);
            }
        }
    }
}
