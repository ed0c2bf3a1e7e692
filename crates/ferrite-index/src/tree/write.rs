//! The write path for one key: locate and lock its leaf, then insert (one
//! persist barrier, plus one when out-of-line blocks are written first),
//! update in place or across slots (`update_slot`), or delete (one barrier),
//! handing over to [`super::smo`] for splits, merges and unlinks.
//!
//! Invariants relied on: a writer holds the leaf's lock and validated the route
//! after taking it, so the key belongs to that leaf while it is locked; entry
//! words are written before the line header that validates them, in the same
//! cache line; out-of-line blocks are durable before the entry publishes them;
//! a cross-line update goes through the pending-move word, which recovery
//! completes; replaced and removed blocks are retired, never freed at once.

use std::sync::atomic::Ordering;

use crate::ebr::{self as epoch, Guard};
use ferrite_kv::{check_sizes, KvResult};

use super::smo::MERGE_TRIGGER;
use super::{FerriteIndex, Locked};
use crate::inner::SearchKey;
use crate::leaf::*;
use crate::{MAX_KEY, MAX_VALUE};

#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum PutMode {
    Insert,
    Update,
    Upsert,
}

pub(super) enum UpdateOutcome {
    Done,
    NeedSplit,
}

impl FerriteIndex {
    /// Locks the leaf whose range holds `sk`. Validating the route after the
    /// lock is taken makes the leaf the right one at that moment, and its range
    /// cannot change while it is locked (a split, removal or merge of it needs
    /// its lock, a removal or merge of its successor needs it as the locked
    /// predecessor).
    pub(super) fn lock_for(&self, sk: &SearchKey<'_>, g: &Guard) -> Locked {
        loop {
            let rt = self.inner.route(sk, true, false, g);
            if let Some(l) = self.lock(self.leaf(rt.leaf)) {
                if rt.still_valid() {
                    return l;
                }
            }
        }
    }

    /// Whether entry `r` holds `sk`; the caller holds the leaf lock (or has
    /// validated the entry's words: an out-of-line key is dereferenced).
    #[inline]
    pub(super) fn raw_eq(&self, r: &Raw, sk: &SearchKey<'_>) -> bool {
        if r.klen != sk.len || r.kw != sk.prefix {
            return false;
        }
        r.rest_eq(sk.bytes)
            .unwrap_or_else(|| self.ool(r.k2).is_some_and(|b| b == sk.bytes))
    }

    /// The entry of `sk` in a leaf the caller has locked.
    pub(super) fn find_locked(&self, lf: Leaf, sk: &SearchKey<'_>, fp: u8) -> Option<Raw> {
        let h = lf.hdrs();
        let mut m = match_leaf(&h, fp);
        while m != 0 {
            let slot = m.trailing_zeros() as usize;
            m &= m - 1;
            if let Some(r) = read_raw(lf, &h, slot) {
                if self.raw_eq(&r, sk) {
                    return Some(r);
                }
            }
        }
        None
    }

    pub(super) fn put(&self, key: &[u8], value: &[u8], mode: PutMode) -> KvResult<bool> {
        check_sizes(key, Some(value), MAX_KEY, MAX_VALUE)?;
        self.drain_reclaim();
        let sk = SearchKey::new(key);
        let fp = fingerprint(key);
        let g = epoch::pin();
        loop {
            let mut lk = self.lock_for(&sk, &g);
            let lf = lk.lf;
            match self.find_locked(lf, &sk, fp) {
                Some(r) => {
                    if mode == PutMode::Insert {
                        return Ok(false);
                    }
                    match self.update_slot(lf, r, value, &mut lk, &g)? {
                        UpdateOutcome::Done => return Ok(mode == PutMode::Update),
                        UpdateOutcome::NeedSplit => {
                            self.split(&mut lk, None, &g)?;
                        }
                    }
                }
                None => {
                    if mode == PutMode::Update {
                        return Ok(false);
                    }
                    if (WIDE_INLINE_MAX + 1..=LONG_INLINE_MAX).contains(&key.len()) {
                        self.allow_long_entries()?;
                    }
                    let e = self.blocks().encode_entry(key, value, fp)?;
                    if e.key_ool() || e.val_ool() {
                        // Blocks are durable before the entry that publishes them.
                        if let Err(err) = self.fence() {
                            self.blocks().discard_entry(&e);
                            return Err(err);
                        }
                    }
                    // Counted before the write: the count's atomic add would
                    // otherwise wait for the write-back just issued (an x86
                    // locked instruction waits for outstanding write-backs).
                    // Right after the lock was taken, nothing is outstanding.
                    self.count_add(1);
                    if let Err(err) = self.insert_entry(&mut lk, &e, &g) {
                        self.count_add(-1);
                        self.blocks().discard_entry(&e);
                        return Err(err);
                    }
                    return Ok(true);
                }
            }
        }
    }

    /// Makes sure the object's format tag says version 2 before a long entry
    /// (a key of 17 to 24 bytes inline, [`KCODE_LONG`]) is published: a
    /// build that reads only version 1 then refuses the pool instead of
    /// taking such an entry for corruption. Indexes created by this build are
    /// tagged version 2 from the start; a version-1 index keeps its tag until
    /// it is given such a key.
    fn allow_long_entries(&self) -> KvResult<()> {
        if !self.tagged_v2() {
            self.pool
                .set_root(self.id, super::R_FORMAT, FORMAT_TAG)
                .map_err(crate::error::pm)?;
        }
        Ok(())
    }

    /// Inserts a new entry into the locked leaf (whose range holds its key),
    /// splitting it when there is no room.
    pub(super) fn insert_entry(&self, lk: &mut Locked, e: &Raw, g: &Guard) -> KvResult<()> {
        let lf = lk.lf;
        loop {
            let mut h = lf.hdrs();
            if let Some(slot) = find_space(&h, e.span()) {
                let l = slot / PER_LINE;
                write_entry(lf, &mut h, slot, e);
                if e.span() == 3
                    && ferrite_pm::tripwire::armed(
                        ferrite_pm::tripwire::Tripwire::IndexLongHeaderFirst,
                    )
                {
                    // Broken on purpose: the header before the third key word.
                    lf.set_key_word(slot + 2, 0);
                    lf.set_hdr(l, h[l]);
                    lf.set_key_word(slot + 2, e.k3);
                } else {
                    lf.set_hdr(l, h[l]);
                }
                if !ferrite_pm::tripwire::armed(
                    ferrite_pm::tripwire::Tripwire::IndexSkipInsertFlush,
                ) {
                    self.flush_line(lf, l);
                }
                lk.dirty = true;
                return self.fence();
            }
            // The split places the entry unless it belongs in this leaf and no
            // room opened up for it here; then try again (still locked, the key
            // still belongs here).
            if self.split(lk, Some(*e), g)? {
                return Ok(());
            }
        }
    }

    /// Replaces the value of entry `r` in the locked leaf.
    pub(super) fn update_slot(
        &self,
        lf: Leaf,
        r: Raw,
        value: &[u8],
        lk: &mut Locked,
        g: &Guard,
    ) -> KvResult<UpdateOutcome> {
        let l = r.slot / PER_LINE;
        let old_vc = vcode(r.d);
        let ne = self.blocks().encode_value(value)?;
        if ne.code == old_vc && !ne.ool() {
            // Same inline length: one atomic 8-byte store.
            lf.set_val_word(r.vslot(), ne.word);
            self.flush_line(lf, l);
            lk.dirty = true;
            self.fence()?;
            return Ok(UpdateOutcome::Done);
        }
        if ne.ool() {
            if let Err(e) = self.fence() {
                self.blocks().discard(&[ne.word]);
                return Err(e);
            }
        }
        if ne.ool() && old_vc == CODE_OOL {
            lf.set_val_word(r.vslot(), ne.word);
            self.flush_line(lf, l);
            lk.dirty = true;
            // The old block is freed only once its unlink is durable.
            self.fence()?;
            self.free_later(r.vw, g);
            return Ok(UpdateOutcome::Done);
        }
        let mut res = Ok(());
        // The length code changes: write the entry anew into free slots, then
        // switch validity.
        let mut nr = r;
        nr.d = desc(kcode(r.d), ne.code);
        nr.vw = ne.word;
        let mut h = lf.hdrs();
        let mut line_only = [u64::MAX; LINES];
        line_only[l] = h[l];
        if let Some(ns) = find_space(&line_only, r.span()) {
            // Same line: one header store flips both entries.
            write_entry(lf, &mut h, ns, &nr);
            clear_entry(&mut h, r.slot, r.span());
            lf.set_hdr(l, h[l]);
            self.flush_line(lf, l);
            self.fence_step(&mut res);
        } else {
            // Another line: a pending-move word makes the switch recoverable.
            let Some(ns) = find_space(&h, r.span()) else {
                if ne.ool() {
                    self.blocks().discard(&[ne.word]);
                }
                return Ok(UpdateOutcome::NeedSplit);
            };
            let nl_ = ns / PER_LINE;
            lf.store(W_PENDING, PENDING_MARK | r.slot as u64 | (ns as u64) << 8);
            self.flush_line(lf, W_PENDING / LINE_WORDS);
            self.fence_step(&mut res);
            write_entry(lf, &mut h, ns, &nr);
            lf.set_hdr(nl_, h[nl_]);
            self.flush_line(lf, nl_);
            self.fence_step(&mut res);
            clear_entry(&mut h, r.slot, r.span());
            lf.set_hdr(l, h[l]);
            self.flush_line(lf, l);
            self.fence_step(&mut res);
            lf.store(W_PENDING, 0);
            self.flush_line(lf, W_PENDING / LINE_WORDS);
            self.fence_step(&mut res);
        }
        lk.dirty = true;
        res?;
        if old_vc == CODE_OOL {
            self.free_later(r.vw, g);
        }
        Ok(UpdateOutcome::Done)
    }

    pub(super) fn delete(&self, key: &[u8]) -> KvResult<bool> {
        check_sizes(key, None, MAX_KEY, MAX_VALUE)?;
        self.drain_reclaim();
        let sk = SearchKey::new(key);
        let fp = fingerprint(key);
        let g = epoch::pin();
        let mut lk = self.lock_for(&sk, &g);
        let lf = lk.lf;
        let Some(r) = self.find_locked(lf, &sk, fp) else {
            return Ok(false);
        };
        let l = r.slot / PER_LINE;
        // Before the write-back, for the reason given in `put`.
        self.count_add(-1);
        let mut h = lf.hdrs();
        clear_entry(&mut h, r.slot, r.span());
        lf.set_hdr(l, h[l]);
        self.flush_line(lf, l);
        lk.dirty = true;
        self.fence()?;
        if r.key_ool() {
            self.free_later(r.k2, &g);
        }
        if r.val_ool() {
            self.free_later(r.vw, &g);
        }
        let used = lf.valid_mask().count_ones() as usize;
        if lf.off != self.head && used == 0 {
            self.unlink_empty(&mut lk, &sk, &g);
        } else if used != 0
            && used <= MERGE_TRIGGER
            && self.merging.load(Ordering::Relaxed)
            && !self.merge_right(&mut lk, &g)
        {
            self.merge_left(&mut lk, &sk, &g);
        }
        Ok(true)
    }
}
