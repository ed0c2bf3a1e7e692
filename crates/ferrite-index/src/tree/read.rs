//! The read path: point lookups, and the consistent snapshot of one leaf that
//! scans, cursors, splits and checks build on (with the decoding of its
//! entries' keys and values and their sorting by key).
//!
//! Invariants relied on: readers write no shared memory but a leaf's scan-order
//! hint, which no reader uses unchecked (`order_by_hint`); a leaf's words are
//! trusted only after its version lock validates (`vlock`), and an out-of-line
//! block is dereferenced only for words of a validated version, while the
//! reader's epoch keeps it from being freed; a negative lookup also validates
//! the route (`Route::still_valid`), so a concurrent split cannot hide a key.

use crate::ebr as epoch;
use ferrite_kv::{check_sizes, KvResult};

use super::FerriteIndex;
use crate::inner::SearchKey;
use crate::leaf::*;
use crate::{MAX_KEY, MAX_VALUE};

/// A value found by [`FerriteIndex::lookup_ref`]: an inline value (copied,
/// at most 8 bytes) or an out-of-line block in the pool.
pub(super) enum ValueRef<'g> {
    Inline([u8; 8], usize),
    Block(&'g [u8]),
}

impl ValueRef<'_> {
    #[inline]
    pub(super) fn bytes(&self) -> &[u8] {
        match self {
            ValueRef::Inline(b, n) => &b[..*n],
            ValueRef::Block(b) => b,
        }
    }
}

/// A leaf's entries as [`FerriteIndex::snapshot_narrow`] read them: for each
/// valid slot (bit of `mask`) its sort word (key word << 64, key length << 16,
/// value length << 8, slot: sorting these sorts by key, the keys of a leaf
/// being distinct) and value word; and the leaf's scan-order hint, unchecked.
pub(super) struct NarrowLeaf {
    pub words: [u128; SLOTS],
    /// By slot; 32 entries so that any 5-bit slot number indexes it without
    /// a bounds check.
    pub vals: [u64; 32],
    pub mask: u32,
    pub hint: [u64; 2],
}

impl Default for NarrowLeaf {
    fn default() -> Self {
        NarrowLeaf {
            words: [0; SLOTS],
            vals: [0; 32],
            mask: 0,
            hint: [0; 2],
        }
    }
}

/// Result of [`FerriteIndex::snapshot_narrow`].
pub(super) enum Narrow {
    /// Every entry inline; the next leaf's offset.
    Done(u64),
    /// Some entry is wide or out of line: use the general snapshot.
    Mixed,
    /// Obsolete or changed meanwhile: restart.
    Retry,
}

impl FerriteIndex {
    pub(super) fn lookup(&self, key: &[u8], out: &mut Vec<u8>) -> KvResult<bool> {
        let g = epoch::pin();
        Ok(match self.lookup_ref(key, &g)? {
            Some(v) => {
                out.clear();
                out.extend_from_slice(v.bytes());
                true
            }
            None => false,
        })
    }

    /// The value of `key` at a validated version, without copying an
    /// out-of-line value: the block stays intact while `g` is pinned (it is
    /// only freed through epoch reclamation).
    pub(super) fn lookup_ref<'g>(
        &'g self,
        key: &[u8],
        g: &'g epoch::Guard,
    ) -> KvResult<Option<ValueRef<'g>>> {
        check_sizes(key, None, MAX_KEY, MAX_VALUE)?;
        let sk = SearchKey::new(key);
        let fp = fingerprint(key);
        'retry: loop {
            let rt = self.inner.route(&sk, true, false, g);
            let lf = self.leaf(rt.leaf);
            let Some(v) = self.read_begin(lf) else {
                continue;
            };
            let h = lf.hdrs();
            let mut m = match_leaf(&h, fp);
            let mut hit = None;
            while m != 0 {
                let slot = m.trailing_zeros() as usize;
                m &= m - 1;
                // A continuation slot or a torn read: skip (validated below).
                let Some(r) = read_raw(lf, &h, slot) else {
                    continue;
                };
                // The inline prefix is checked before any dereference.
                if r.klen != sk.len || r.kw != sk.prefix {
                    continue;
                }
                let eq = match r.rest_eq(key) {
                    Some(eq) => eq,
                    None => {
                        // Dereference only words of a consistent version: the
                        // block is then live until our epoch ends.
                        if !self.validate(lf, v) {
                            continue 'retry;
                        }
                        self.ool(r.k2).is_some_and(|b| b == key)
                    }
                };
                if eq {
                    hit = Some(r);
                    break;
                }
            }
            // The leaf's version was taken before these checks: a validated
            // route means no split moved the key out of this leaf before we read
            // it (see `Route::still_valid`).
            let Some(r) = hit else {
                if self.validate(lf, v) && rt.still_valid() {
                    return Ok(None);
                }
                continue;
            };
            if !self.validate(lf, v) || !rt.still_valid() {
                continue;
            }
            let vc = vcode(r.d) as usize;
            if vc <= INLINE_MAX {
                return Ok(Some(ValueRef::Inline(r.vw.to_le_bytes(), vc)));
            }
            match self.ool(r.vw) {
                Some(b) => return Ok(Some(ValueRef::Block(b))),
                None => continue,
            }
        }
    }

    /// Entries of a leaf at a consistent version when every key and value is
    /// inline (at most 8 bytes), by slot ([`NarrowLeaf`]). Cheaper than
    /// [`Self::snapshot`] for the 8-byte keys scans see most.
    pub(super) fn snapshot_narrow(&self, lf: Leaf, out: &mut NarrowLeaf) -> Narrow {
        let Some(v) = self.read_begin(lf) else {
            return Narrow::Retry;
        };
        // Every slot is read, valid or not, without a branch per entry: the
        // valid ones are in `mask` and nothing else is used.
        let h = lf.hdrs();
        let (mut mask, mut wide) = (0u32, false);
        for (l, &hl) in h.iter().enumerate() {
            let valid = hdr_valid(hl);
            mask |= valid << (l * PER_LINE);
            for s in 0..PER_LINE {
                let d = hdr_desc(hl, s);
                let (kc, vc) = (kcode(d), vcode(d));
                wide |=
                    valid >> s & 1 == 1 && (kc as usize > INLINE_MAX) | (vc as usize > INLINE_MAX);
                let slot = l * PER_LINE + s;
                out.words[slot] = (u128::from(lf.key_word(slot)) << 64)
                    | (u128::from(kc) << 16)
                    | (u128::from(vc) << 8)
                    | slot as u128;
                out.vals[slot] = lf.val_word(slot);
            }
        }
        out.mask = mask;
        if wide {
            // Wide, out-of-line or torn: the general path decides.
            return Narrow::Mixed;
        }
        out.hint = lf.order_hint();
        let next = lf.next();
        if self.validate(lf, v) {
            Narrow::Done(next)
        } else {
            Narrow::Retry
        }
    }

    /// Valid entries of a leaf at a consistent version (None: retry).
    pub(super) fn snapshot(&self, lf: Leaf, out: &mut Vec<Raw>) -> Option<u64> {
        let v = self.read_begin(lf)?;
        out.clear();
        let h = lf.hdrs();
        for slot in 0..SLOTS {
            if is_primary(&h, slot) {
                if let Some(r) = read_raw(lf, &h, slot) {
                    out.push(r);
                }
            }
        }
        let next = lf.next();
        self.validate(lf, v).then_some(next)
    }

    /// Key bytes of a validated entry; `buf` holds inline bytes.
    #[inline]
    pub(super) fn raw_key<'a>(&'a self, r: &Raw, buf: &'a mut KeyBuf) -> Option<&'a [u8]> {
        if r.key_ool() {
            let b = self.ool(r.k2)?;
            return (b.len() == r.klen as usize).then_some(b);
        }
        r.inline_key(buf)
    }

    pub(super) fn raw_value<'a>(&'a self, r: &Raw, buf: &'a mut [u8; 8]) -> Option<&'a [u8]> {
        let vc = vcode(r.d) as usize;
        if vc <= INLINE_MAX {
            *buf = r.vw.to_le_bytes();
            Some(&buf[..vc])
        } else {
            self.ool(r.vw)
        }
    }

    /// Comparison words of a validated entry.
    #[inline]
    pub(super) fn raw_words(&self, r: &Raw) -> Option<(u64, u64, u32)> {
        let second = if !r.wide() {
            0
        } else if !r.key_ool() {
            r.k2
        } else {
            suffix_of(self.ool(r.k2)?)
        };
        Some(r.sort_words(second))
    }

    /// Sorts validated raw entries by key into `order` as (words, index).
    pub(super) fn sort_raw(
        &self,
        raws: &[Raw],
        order: &mut Vec<((u64, u64, u32), usize)>,
    ) -> Option<()> {
        order.clear();
        let mut any_long = false;
        for (i, r) in raws.iter().enumerate() {
            any_long |= r.klen as usize > WIDE_INLINE_MAX;
            order.push((self.raw_words(r)?, i));
        }
        if !any_long {
            order.sort_unstable_by_key(|o| o.0);
            return Some(());
        }
        // Ties of the first two words between keys longer than 16 bytes need
        // the whole keys (a long entry's bytes, or an out-of-line copy).
        order.sort_unstable_by(|a, b| {
            (a.0 .0, a.0 .1).cmp(&(b.0 .0, b.0 .1)).then_with(|| {
                let (mut ba, mut bb) = (KeyBuf::default(), KeyBuf::default());
                cmp_words(
                    a.0,
                    b.0,
                    self.raw_key(&raws[a.1], &mut ba).unwrap_or(&[]),
                    self.raw_key(&raws[b.1], &mut bb).unwrap_or(&[]),
                )
            })
        });
        Some(())
    }
}
