//! Structure modifications: the logless leaf split, the merge of sparse
//! leaves, and the unlink of empty ones (with the predecessor lookup and the
//! chain store they share).
//!
//! Invariants relied on: all of them run under the structure mutex
//! (`Inner::smo`); a second leaf is only try-locked, never waited for; both
//! leaves stay locked until the PM chain and the inner nodes both reflect the
//! change; the PM steps are ordered so that recovery's rule (a leaf keeps only
//! keys below its successor's smallest key) completes an interrupted split and
//! rolls back an interrupted merge; a leaf dropped from the chain is retired
//! through the epoch.

use std::sync::atomic::Ordering;

use crate::ebr::Guard;
use ferrite_kv::{KvError, KvResult};

use super::{FerriteIndex, Locked};
use crate::error::{pm, OBJECT};
use crate::inner::{SearchKey, Sep, Smo};
use crate::leaf::*;

/// A delete that leaves a leaf with at most this many slots in use tries to
/// merge it with a neighbour.
pub(super) const MERGE_TRIGGER: usize = SLOTS / 4;
/// A merge happens only when the two leaves use at most this many slots
/// together (so the merged leaf does not split again soon).
pub(super) const MERGE_MAX: usize = SLOTS * 3 / 4;

impl FerriteIndex {
    /// Splits the locked leaf in two (LB+-Tree-style logless split with one
    /// sibling pointer; recovery drops the stale upper half if the split was
    /// interrupted) and inserts `new` into the proper half when there is room.
    /// Returns whether `new` (if any) was placed.
    pub(super) fn split(&self, lk: &mut Locked, new: Option<Raw>, g: &Guard) -> KvResult<bool> {
        let lf = lk.lf;
        let bad = || KvError::corrupt(OBJECT, format!("leaf {:#x}: malformed entry", lf.off));
        let h = lf.hdrs();
        let mut raws = Vec::with_capacity(SLOTS);
        for slot in 0..SLOTS {
            if is_primary(&h, slot) {
                raws.push(read_raw(lf, &h, slot).ok_or_else(bad)?);
            }
        }
        if raws.len() < 2 {
            return Err(KvError::corrupt(
                OBJECT,
                format!("leaf {:#x}: split of a leaf with < 2 entries", lf.off),
            ));
        }
        let mut order = Vec::with_capacity(SLOTS);
        self.sort_raw(&raws, &mut order).ok_or_else(bad)?;
        // Move the upper half, or less when its wide and long entries (two or
        // three slots of one line each) would not fit an empty leaf.
        let fits = |mid: usize, extra: Option<&Raw>| {
            let rs = order[mid..].iter().map(|o| &raws[o.1]).chain(extra);
            let (mut wides, mut slots) = (0, 0);
            for r in rs {
                wides += r.wide() as usize;
                slots += r.span();
            }
            wides <= LINES && slots <= SLOTS
        };
        let mut mid = raws.len() / 2;
        let (split_key, new_right) = loop {
            let split_key = {
                let mut kb = KeyBuf::default();
                self.raw_key(&raws[order[mid].1], &mut kb)
                    .ok_or_else(bad)?
                    .to_vec()
            };
            let new_right = match &new {
                Some(n) => {
                    let mut kb = KeyBuf::default();
                    let k = self.raw_key(n, &mut kb).ok_or_else(bad)?;
                    cmp_words(key_words(k), key_words(&split_key), k, &split_key)
                        != std::cmp::Ordering::Less
                }
                None => false,
            };
            if fits(mid, new.as_ref().filter(|_| new_right)) || mid + 1 >= raws.len() {
                break (split_key, new_right);
            }
            mid += 1;
        };
        let off = super::reserve::alloc(&self.heap, LEAF_SIZE).map_err(pm)?;
        let nl = self.leaf(off);
        init_leaf(nl, lf.next());
        nl.lock_word().store(1, Ordering::Relaxed);
        let mut moved: Vec<Raw> = order[mid..].iter().map(|o| raws[o.1]).collect();
        if new_right {
            if let Some(n) = new {
                moved.push(n);
            }
        }
        // Long entries first, then wide ones: each needs a line, or two slots
        // of one.
        moved.sort_by_key(|r| std::cmp::Reverse(r.span()));
        let mut nh = [0u64; LINES];
        for r in &moved {
            let slot = find_space(&nh, r.span()).ok_or_else(|| {
                KvError::corrupt(
                    OBJECT,
                    format!("split of leaf {:#x}: entries do not fit a leaf", lf.off),
                )
            })?;
            write_entry(nl, &mut nh, slot, r);
        }
        for (l, &x) in nh.iter().enumerate() {
            nl.set_hdr(l, x);
        }
        self.flush(nl.line_ptr(0), LEAF_SIZE);
        if let Err(e) = self.fence() {
            // Not published: the new leaf goes back to the heap.
            let _ = self.heap.free(off);
            return Err(e);
        }
        // Publish the new leaf: one 8-byte store.
        let mut res = Ok(());
        lf.store(W_NEXT, off);
        self.flush_line(lf, 0);
        self.fence_step(&mut res);
        // Drop the moved entries here. Headers are stored before a freed slot is
        // reused, so no image of a line shows old bits over new words.
        let mut hh = h;
        for o in &order[mid..] {
            let r = &raws[o.1];
            clear_entry(&mut hh, r.slot, r.span());
        }
        for l in 0..LINES {
            if hh[l] != h[l] {
                lf.set_hdr(l, hh[l]);
            }
        }
        let mut placed = new.is_none() || new_right;
        // The new entry's line is written back even when its header reads as
        // before: the entry may take the very slot a moved entry with the same
        // fingerprint and lengths vacated, which leaves the header word as it
        // was (the crash test caught this under another placement policy).
        let mut new_line = None;
        if !new_right {
            if let Some(n) = new {
                if let Some(slot) = find_space(&hh, n.span()) {
                    let l = slot / PER_LINE;
                    write_entry(lf, &mut hh, slot, &n);
                    lf.set_hdr(l, hh[l]);
                    new_line = Some(l);
                    placed = true;
                }
            }
        }
        for l in 0..LINES {
            if hh[l] != h[l] || new_line == Some(l) {
                self.flush_line(lf, l);
            }
        }
        self.fence_step(&mut res);
        lk.dirty = true;
        // The separator goes into the inner nodes while this leaf is still
        // locked (the caller unlocks it): that is what lets a reader's check of
        // the level-0 node after taking the leaf's version catch this split (see
        // `Route::still_valid`).
        let sep = Sep::from_key(&split_key);
        self.inner.lock().insert(sep, off, g);
        nl.lock_word().store(4, Ordering::Release);
        self.splits.fetch_add(1, Ordering::Relaxed);
        res.map(|()| placed)
    }

    /// Merges the locked, sparse leaf's successor into it (see [`Self::merge`]).
    pub(super) fn merge_right(&self, lk: &mut Locked, g: &Guard) -> bool {
        let next = lk.lf.next();
        if next == 0 {
            return false;
        }
        let mut s = self.inner.lock();
        // The successor cannot change while `lk` is held (a split of this leaf,
        // an unlink or a merge of its successor all need this leaf's lock).
        let Some(mut rlk) = self.try_lock(self.leaf(next)) else {
            return false;
        };
        self.merge(lk, &mut rlk, &mut s, g)
    }

    /// Merges the locked, sparse leaf into its predecessor (see [`Self::merge`]).
    pub(super) fn merge_left(&self, lk: &mut Locked, sk: &SearchKey<'_>, g: &Guard) -> bool {
        let mut s = self.inner.lock();
        let Some((mut plk, _)) = self.lock_predecessor(lk.lf, sk, g) else {
            return false;
        };
        self.merge(&mut plk, lk, &mut s, g)
    }

    /// The locked leaf `lf`'s predecessor, try-locked (never waited for), and
    /// `lf`'s low key, found by routing `sk` (a key of `lf`); None when `lf` is
    /// the first leaf, the lock is taken, or the chain does not match. The
    /// caller holds the structure mutex, so the routes are the current tree.
    pub(super) fn lock_predecessor(
        &self,
        lf: Leaf,
        sk: &SearchKey<'_>,
        g: &Guard,
    ) -> Option<(Locked, Vec<u8>)> {
        let r = self.inner.route(sk, true, true, g);
        if r.leaf != lf.off {
            return None;
        }
        let low = r.low?.to_vec();
        let p = self
            .inner
            .route(&SearchKey::new(&low), false, false, g)
            .leaf;
        if p == lf.off {
            return None;
        }
        let plk = self.try_lock(self.leaf(p))?;
        (plk.lf.next() == lf.off).then_some((plk, low))
    }

    /// Drops `right` from the chain after `left` (both locked, `left.next ==
    /// right`, its separator already removed): one persisted 8-byte store,
    /// then `right` is marked obsolete and its block retired.
    pub(super) fn drop_from_chain(&self, left: &mut Locked, right: &mut Locked, g: &Guard) {
        let lf = left.lf;
        lf.store(W_NEXT, right.lf.next());
        self.flush_line(lf, 0);
        left.dirty = true;
        right.obsolete = true;
        // A failed barrier poisons the pool (the operation that needs the
        // result reports it); the dropped leaf is then never reused.
        if self.fence().is_ok() {
            self.free_later(right.lf.off, g);
        }
    }

    /// Moves every entry of `right` into `left` (both locked, `left.next ==
    /// right`, the structure mutex held) and removes `right`, when the entries
    /// fit comfortably and `right`'s separator is removable; false when nothing
    /// changed.
    ///
    /// Crash safety without a log: the entries are written into free slots of
    /// `left` (words, then the line header; every changed line flushed, one
    /// fence), then `left.next = right.next` is persisted (one 8-byte store,
    /// one fence). Before that store `right` still holds every moved key and
    /// recovery drops the copies from `left` (its keys must all lie below its
    /// successor's smallest key: the interrupted-split rule), rolling the merge
    /// back; after it `right` is unreachable and freed by the heap's tracing.
    /// Out-of-line blocks move with their entries (ownership moves: `right` is
    /// retired as a bare leaf, its blocks stay live through `left`).
    ///
    /// Both leaves stay locked until the copy, the chain store and the inner
    /// change are all done, so readers never see a key twice or miss one: a
    /// reader of `left` waits for (or fails to validate) the new version, one
    /// of `right` finds it obsolete and restarts from the root, whose route
    /// then leads to `left`.
    pub(super) fn merge(
        &self,
        left: &mut Locked,
        right: &mut Locked,
        s: &mut Smo<'_>,
        g: &Guard,
    ) -> bool {
        let (lf, rl) = (left.lf, right.lf);
        debug_assert_eq!(lf.next(), rl.off);
        let rh = rl.hdrs();
        let mut raws = Vec::with_capacity(SLOTS);
        let mut rslots = 0;
        for slot in 0..SLOTS {
            if is_primary(&rh, slot) {
                let Some(r) = read_raw(rl, &rh, slot) else {
                    return false;
                };
                rslots += r.span();
                raws.push(r);
            }
        }
        // An empty successor is left to the empty-leaf unlink.
        if raws.is_empty() || lf.valid_mask().count_ones() as usize + rslots > MERGE_MAX {
            return false;
        }
        // Plan the placement first (long and wide entries first: each needs
        // a free line, or two free slots of one), so nothing is written unless
        // all of it fits.
        raws.sort_by_key(|r| std::cmp::Reverse(r.span()));
        let mut h = lf.hdrs();
        let before = h;
        let mut plan = h;
        let mut slots = Vec::with_capacity(raws.len());
        for r in &raws {
            let Some(slot) = find_space(&plan, r.span()) else {
                return false;
            };
            let (l, x) = (slot / PER_LINE, slot % PER_LINE);
            plan[l] = hdr_set(plan[l], x, r.d, r.fp);
            for i in 1..r.span() {
                plan[l] = hdr_set(plan[l], x + i, DESC_CONT, r.fp);
            }
            slots.push(slot);
        }
        // `right`'s separator: the low key on the route of any of its keys (the
        // tree cannot change while the mutex is held).
        let mut kb = KeyBuf::default();
        let Some(k) = self.raw_key(&raws[0], &mut kb) else {
            return false;
        };
        let rt = self.inner.route(&SearchKey::new(k), true, true, g);
        if rt.leaf != rl.off {
            return false;
        }
        let Some(low) = rt.low else {
            return false;
        };
        // Inner change first: it is the step that may refuse (the separator
        // must sit in the level-0 node of both leaves), and while both leaves
        // are locked its order against the PM stores is invisible to readers.
        if !s.remove(&low.to_vec(), rl.off) {
            return false;
        }
        for (r, &slot) in raws.iter().zip(&slots) {
            write_entry(lf, &mut h, slot, r);
        }
        for l in 0..LINES {
            if h[l] != before[l] {
                lf.set_hdr(l, h[l]);
                self.flush_line(lf, l);
            }
        }
        // A failed barrier poisons the pool; the caller's own barrier or the
        // next one reports it.
        let _ = self.fence();
        // Publish: one 8-byte store drops `right` from the chain.
        self.drop_from_chain(left, right, g);
        self.merges.fetch_add(1, Ordering::Relaxed);
        true
    }

    /// Unlinks the locked, empty leaf from the chain and the inner tree (when its
    /// predecessor can be locked without waiting and its separator is removable).
    pub(super) fn unlink_empty(&self, lk: &mut Locked, sk: &SearchKey<'_>, g: &Guard) {
        let mut s = self.inner.lock();
        let Some((mut plk, low)) = self.lock_predecessor(lk.lf, sk, g) else {
            return;
        };
        // Both leaves stay locked until the end, so the order of the inner-node
        // change and the chain store is invisible to readers: one routed to this
        // leaf waits and then finds it obsolete, one routed to the predecessor
        // waits for the new `next`.
        if !s.remove(&low, lk.lf.off) {
            return;
        }
        self.drop_from_chain(&mut plk, lk, g);
        self.unlinks.fetch_add(1, Ordering::Relaxed);
    }
}
