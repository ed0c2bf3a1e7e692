//! The level-0 directory: from a key's top [`DIR_BITS`] bits straight to the
//! level-0 node whose range holds it, skipping the levels above.
//!
//! A slot covers one *bucket* of first-8-byte prefixes (`2^48` of them). It
//! holds, in one word, the address of a level-0 node whose range held the
//! whole bucket when the slot was written, and the *window* of that node's
//! separators that fell inside the bucket (bits 48..56 and 56..64). Slots are
//! hints: nothing in them is trusted. A reader takes the node's version, then
//! checks the node's prefix fences (`Node::lo`/`hi`, which hold its range
//! exactly and change only under its lock) against the key, searches the
//! window (which [`Node::bound_in`] checks in turn), and validates the
//! version: a node's range only ever shrinks, and only when it splits, so a
//! node whose fences hold the key at a validated version is the level-0 node
//! a full route would reach at that version — the same guarantee
//! [`Route::still_valid`] then extends to the leaf. A stale slot (its node
//! split away from the bucket) fails the fence check and the reader routes
//! from the root, which writes the slot again; a stale window costs a search
//! of the whole node and is rewritten. Slots are single words, so a reader
//! never sees a torn one; they only ever name level-0 nodes of this tree,
//! which live as long as the tree.
//!
//! Buckets that straddle two level-0 nodes are never filled (their keys route
//! from the root; a slot whose bucket a split cut in two is emptied by the
//! next route from the root through it), nor is anything while the root is
//! itself at level 0 (a directory would only add a line to a one-node route).

use std::sync::atomic::{AtomicU64, Ordering as Mo};
use std::sync::OnceLock;

use super::{prefetch_node, vlock, Node, Route, SearchKey};

/// Bits of the prefix that select a slot: 65,536 slots of 8 bytes.
pub(super) const DIR_BITS: u32 = 16;
const SHIFT: u32 = 64 - DIR_BITS;
const ADDR: u64 = (1 << 48) - 1;
/// A split fills the slots of its new right node when it covers at most this
/// many buckets (more only in small trees; those fill as keys route there).
const FILL_AT_SPLIT: u64 = 64;

pub(super) struct Dir {
    /// Allocated once the tree has more than one level (never dropped
    /// before the tree: the root only grows), so that the many small trees
    /// (tests, crash states) cost nothing.
    slots: OnceLock<Box<[AtomicU64]>>,
}

const _: () = assert!(
    std::mem::size_of::<u64>() == std::mem::size_of::<AtomicU64>()
        && std::mem::align_of::<u64>() == std::mem::align_of::<AtomicU64>()
);

/// Zeroed slots from the allocator's zeroed memory (fresh pages: nothing
/// is touched until a slot is written).
fn zeroed_slots() -> Box<[AtomicU64]> {
    let words = vec![0u64; 1 << DIR_BITS].into_boxed_slice();
    // SAFETY: `AtomicU64` has the size and alignment of `u64` (asserted
    // above) and the same bit validity, so the allocation is a valid
    // `[AtomicU64]` of the same layout, which the box then frees as such.
    unsafe { Box::from_raw(Box::into_raw(words) as *mut [AtomicU64]) }
}

impl Dir {
    pub(super) fn new(on: bool) -> Dir {
        let d = Dir {
            slots: OnceLock::new(),
        };
        if on {
            d.turn_on();
        }
        d
    }

    /// Called when the tree gains its second level.
    pub(super) fn turn_on(&self) {
        self.slots.get_or_init(zeroed_slots);
    }

    pub(super) fn bytes(&self) -> u64 {
        self.slots
            .get()
            .map_or(0, |s| (s.len() * std::mem::size_of::<AtomicU64>()) as u64)
    }

    /// The route of `k` (`le`: the leaf whose range holds it) through its
    /// bucket's slot, when the slot names a node that holds `k` at a
    /// validated version; None: route from the root.
    #[inline]
    pub(super) fn route<'a>(&'a self, k: &SearchKey<'_>) -> Option<Route<'a>> {
        let slot = &self.slots.get()?[(k.prefix >> SHIFT) as usize];
        // Acquire: pairs with the release store of `fill`, which read the
        // node after its own acquire of it (so its initialisation is visible).
        let w = slot.load(Mo::Acquire);
        let addr = (w & ADDR) as usize;
        if addr == 0 {
            return None;
        }
        let (a, z) = (((w >> 48) & 0xff) as usize, (w >> 56) as usize);
        prefetch_node(addr, 0, Some((a, z)));
        // SAFETY: a slot only ever holds 0 or the address of a level-0 node
        // of this tree (`fill`), and nodes live as long as the tree, which
        // owns the directory.
        let n: &'a Node = unsafe { &*(addr as *const Node) };
        let v = vlock::try_read(&n.lock)?;
        let kp = k.prefix;
        // Strict on both sides: a key whose prefix equals a fence's may lie
        // on either side of it (longer keys with equal first 8 bytes).
        if !(n.lo.load(Mo::Relaxed) < kp && kp < n.hi.load(Mo::Relaxed)) {
            return None;
        }
        let i = n.bound_in(k, true, a, z);
        let c = n.child(i);
        if !vlock::validate(&n.lock, v) {
            return None;
        }
        if i < a || i > z {
            // The window went stale (separators were added): write it anew.
            self.fill(kp, n, v, true);
        }
        Some(Route {
            leaf: c as u64,
            from: super::From::Node(n),
            v,
            idx: i,
            low: None,
        })
    }

    /// Writes the slot of `kp`'s bucket for level-0 node `n` read at version
    /// `v`, if `n`'s range holds the whole bucket and the version still
    /// validates once the window is computed. Unless `force`, a slot that
    /// already names `n` is left as it is (computing the window reads the
    /// whole node).
    pub(super) fn fill(&self, kp: u64, n: &Node, v: u64, force: bool) {
        let Some(slots) = self.slots.get() else {
            return;
        };
        if n.level != 0 {
            return;
        }
        let addr = n as *const Node as u64;
        if addr & !ADDR != 0 {
            return;
        }
        let b = kp >> SHIFT;
        let slot = &slots[b as usize];
        let bs = b << SHIFT;
        let be = bs | ((1 << SHIFT) - 1);
        if !(n.lo.load(Mo::Relaxed) < bs && be < n.hi.load(Mo::Relaxed)) {
            // The bucket straddles `n`'s range: no node holds all of it. A
            // slot left by a split inside it would send some of its keys to
            // a node that does not hold them, each time at the cost of that
            // node's header line: empty it, as if it had never been filled.
            if slot.load(Mo::Relaxed) != 0 && vlock::validate(&n.lock, v) {
                slot.store(0, Mo::Relaxed);
            }
            return;
        }
        if !force && slot.load(Mo::Relaxed) & ADDR == addr {
            return;
        }
        let cnt = n.count();
        // `be + 1` cannot overflow: `be < hi`.
        let (a, z) = (n.below(0..cnt, bs) as u64, n.below(0..cnt, be + 1) as u64);
        if !vlock::validate(&n.lock, v) {
            return;
        }
        let w = addr | a << 48 | z << 56;
        if slot.load(Mo::Relaxed) != w {
            slot.store(w, Mo::Release);
        }
    }

    /// Fills the slots of every bucket inside the range of level-0 node `n`
    /// (just split off, the structure mutex held, so `n` is unlocked and
    /// stays as it is), when there are at most [`FILL_AT_SPLIT`].
    pub(super) fn fill_node(&self, n: &Node) {
        let Some(v) = vlock::try_read(&n.lock) else {
            return;
        };
        let (lo, hi) = (n.lo.load(Mo::Relaxed), n.hi.load(Mo::Relaxed));
        // Buckets wholly inside (lo, hi): from the one after lo's to the one
        // before hi's.
        let (first, last) = ((lo >> SHIFT) + 1, (hi >> SHIFT).checked_sub(1));
        let Some(last) = last else {
            return;
        };
        if last < first || last - first >= FILL_AT_SPLIT {
            return;
        }
        for b in first..=last {
            self.fill(b << SHIFT, n, v, true);
        }
    }

    /// The level-0 nodes the slots name (tests and checks: every one must be
    /// a level-0 node of the tree).
    pub(super) fn named(&self) -> impl Iterator<Item = usize> + '_ {
        self.slots
            .get()
            .into_iter()
            .flat_map(|s| s.iter())
            .map(|s| (s.load(Mo::Relaxed) & ADDR) as usize)
            .filter(|&a| a != 0)
    }
}

#[cfg(test)]
mod tests {
    use super::super::{Inner, Sep};
    use super::*;
    use crate::ebr as epoch;

    const N: u64 = 20_000;
    const STEP: u64 = u64::MAX / N;

    fn k(x: u64) -> Vec<u8> {
        x.to_be_bytes().to_vec()
    }

    /// Leaves with separators spread over the whole prefix space (~420
    /// level-0 nodes, ~160 buckets each): what a directory route answers is
    /// what a route from the root answers, before and after every level-0
    /// node splits; slots a split left naming the wrong node are refused by
    /// the fence check (without it, this test routes keys to a leaf of the
    /// node on their left).
    #[test]
    fn directory_routes_agree_with_the_root_and_stale_slots_are_refused() {
        let t = Inner::build(
            (0..N)
                .map(|i| ((i > 0).then(|| Sep::from_key(&k(i * STEP))), i + 1))
                .collect(),
        );
        assert!(t.dir.slots.get().is_some());
        let g = epoch::pin();
        // Through the directory, then from the root (a route that wants the
        // low key skips the directory; it fills the slot, so it goes second).
        let probe = |key: &[u8]| {
            let sk = SearchKey::new(key);
            let dir = t.dir.route(&sk).map(|r| r.leaf);
            (t.route(&sk, true, true, &g).leaf, dir)
        };
        let keys: Vec<Vec<u8>> = (0..N).map(|i| k(i * STEP + 12_345)).collect();
        for key in &keys {
            let (root, dir) = probe(key);
            assert!(dir.is_none() || dir == Some(root));
            // A route that may use the directory fills its slot.
            assert_eq!(t.route(&SearchKey::new(key), true, false, &g).leaf, root);
        }
        let hits = keys.iter().filter(|key| probe(key).1.is_some()).count() as u64;
        assert!(
            hits > N * 9 / 10,
            "{hits} of {N} keys routed through the directory"
        );
        for key in &keys {
            let (root, dir) = probe(key);
            assert_eq!(dir.unwrap_or(root), root);
        }
        // A new leaf in every leaf's range: every level-0 node splits (some
        // twice), their right halves covering more buckets than a split fills.
        for i in 0..N {
            t.lock()
                .insert(Sep::from_key(&k(i * STEP + 1_000_000)), N + 1 + i, &g);
        }
        let mut refused = 0;
        for key in &keys {
            let kp = SearchKey::new(key).prefix;
            let named = t.dir.slots.get().unwrap()[(kp >> SHIFT) as usize].load(Mo::Relaxed) & ADDR;
            let stale = named != 0 && {
                // SAFETY: slots name level-0 nodes of `t`, alive while it is.
                let n = unsafe { &*(named as *const Node) };
                !(n.lo.load(Mo::Relaxed) < kp && kp < n.hi.load(Mo::Relaxed))
            };
            let (root, dir) = probe(key);
            assert_eq!(dir.unwrap_or(root), root);
            refused += u64::from(stale && dir.is_none());
        }
        assert!(refused > 100, "{refused} stale slots refused");
        t.lock().check().unwrap();
        // Every key routed from the root since: its slot names a node that
        // holds its whole bucket, or nothing (the bucket straddles two).
        for key in &keys {
            let kp = SearchKey::new(key).prefix;
            let named = t.dir.slots.get().unwrap()[(kp >> SHIFT) as usize].load(Mo::Relaxed) & ADDR;
            if named != 0 {
                // SAFETY: as above.
                let n = unsafe { &*(named as *const Node) };
                let bs = kp >> SHIFT << SHIFT;
                assert!(
                    n.lo.load(Mo::Relaxed) < bs && bs | ((1 << SHIFT) - 1) < n.hi.load(Mo::Relaxed),
                    "a slot names a node that holds only part of its bucket"
                );
            }
        }
        // Routing refilled them.
        let hits = keys.iter().filter(|key| probe(key).1.is_some()).count() as u64;
        assert!(
            hits > N * 8 / 10,
            "{hits} of {N} keys routed through the directory"
        );
    }

    /// A tree whose root is a level-0 node has the directory off; the root
    /// split that adds a level turns it on.
    #[test]
    fn the_directory_starts_with_the_second_level() {
        let t = Inner::build(vec![(None, 1)]);
        let g = epoch::pin();
        assert!(t.dir.slots.get().is_none());
        {
            let s = t.lock();
            assert_eq!(s.bytes(), s.bytes_of_nodes());
        }
        let mut i = 0;
        while t.dir.slots.get().is_none() {
            i += 1;
            t.lock().insert(Sep::from_key(&k(i * STEP)), 1 + i, &g);
        }
        assert_eq!(t.lock().root().level, 1);
        assert!(t.dir.named().next().is_none());
        assert_eq!(
            t.route(&SearchKey::new(&k(STEP + 7)), true, false, &g).leaf,
            2
        );
        assert!(t.dir.named().next().is_some());
        let s = t.lock();
        assert_eq!(s.bytes(), s.bytes_of_nodes() + (8 << DIR_BITS));
        s.check().unwrap();
    }
}
