//! Range scans and the backward step of cursors. A scan routes to the leaf of
//! its start key and follows the PM `next` chain, emitting each leaf's entries
//! in key order (a packed fast path when every key and value is inline); the
//! backward step finds the largest key below a bound, stepping to the
//! predecessor leaf through the inner tree.
//!
//! Invariants relied on: the chain is complete and in key order, so only the
//! first leaf of a pass needs filtering, and that leaf's route is validated
//! like a lookup's; a failed validation restarts the pass after the last key
//! emitted, so no key is emitted twice.

use crossbeam_epoch as epoch;
use ferrite_kv::KvResult;

use super::read::Narrow;
use super::FerriteIndex;
use crate::inner::SearchKey;
use crate::leaf::*;

impl FerriteIndex {
    pub(super) fn scan_impl<F: FnMut(&[u8], &[u8]) + ?Sized>(
        &self,
        start: &[u8],
        inclusive: bool,
        n: usize,
        f: &mut F,
    ) -> KvResult<usize> {
        if n == 0 {
            return Ok(0);
        }
        let g = epoch::pin();
        let mut resume = start.to_vec();
        let mut incl = inclusive;
        let mut done = 0;
        let mut raws = Vec::with_capacity(SLOTS);
        let mut order = Vec::with_capacity(SLOTS);
        let mut packed: Vec<(u128, u64)> = Vec::with_capacity(SLOTS);
        'outer: loop {
            let sk = SearchKey::new(&resume);
            let sw = key_words(&resume);
            let rt = self.inner.route(&sk, true, false, &g);
            let mut off = rt.leaf;
            // The leaves that follow in the level-0 node are (almost always) the
            // next ones of the chain: start loading those the scan will need, so
            // their misses overlap instead of being paid one by one.
            for j in 1..=(n / (SLOTS / 2) + 1).min(8) {
                match rt.leaf_after(j) {
                    Some(o) if self.pool.contains(o, LEAF_SIZE) => self.leaf(o).prefetch(),
                    _ => break,
                }
            }
            // Only the first leaf of a pass holds keys below the start: the
            // chain is in key order.
            let mut filter = true;
            loop {
                let lf = self.leaf(off);
                let fast = match self.snapshot_narrow(lf, &mut packed) {
                    Narrow::Retry => continue 'outer,
                    Narrow::Done(next) => Some(next),
                    Narrow::Mixed => None,
                };
                let next = match fast {
                    Some(next) => next,
                    None => match self.snapshot(lf, &mut raws) {
                        Some(next) => next,
                        None => continue 'outer,
                    },
                };
                // The first leaf must be the one holding the start key: a split
                // that moved it right would otherwise let the unfiltered next
                // leaf emit keys below the start. Later leaves come from the
                // chain, which is always complete and in order.
                if filter && !rt.still_valid() {
                    continue 'outer;
                }
                if fast.is_some() {
                    // Every key and value inline (the common case of 8-byte
                    // keys): one packed word per entry is sorted.
                    let low = filter.then(|| {
                        let (p, _, l) = sw;
                        let bound = (u128::from(p) << 64) | (u128::from(l) << 16);
                        if incl {
                            bound
                        } else {
                            bound | 0xffff
                        }
                    });
                    packed.sort_unstable_by_key(|e| e.0);
                    let mut last = None;
                    for &(w, vw) in packed.iter() {
                        if low.is_some_and(|b| w < b) {
                            continue;
                        }
                        let (kw, klen, vlen) = ((w >> 64) as u64, (w >> 16) as u8, (w >> 8) as u8);
                        let kb = kw.to_be_bytes();
                        let vb = vw.to_le_bytes();
                        f(&kb[..klen as usize], &vb[..vlen as usize]);
                        done += 1;
                        last = Some((kw, klen));
                        if done == n {
                            return Ok(done);
                        }
                    }
                    if let Some((kw, klen)) = last {
                        resume.clear();
                        resume.extend_from_slice(&kw.to_be_bytes()[..klen as usize]);
                        incl = false;
                    }
                    filter = false;
                    if next == 0 {
                        return Ok(done);
                    }
                    off = next;
                    continue;
                }
                if self.sort_raw(&raws, &mut order).is_none() {
                    continue 'outer;
                }
                let mut last: Option<usize> = None;
                for &(w, i) in order.iter() {
                    let r = &raws[i];
                    let (mut kb, mut vb) = ([0u8; 16], [0u8; 8]);
                    let (Some(key), Some(val)) =
                        (self.raw_key(r, &mut kb), self.raw_value(r, &mut vb))
                    else {
                        continue 'outer;
                    };
                    if filter {
                        let c = cmp_words(w, sw, key, &resume);
                        if c == std::cmp::Ordering::Less
                            || (c == std::cmp::Ordering::Equal && !incl)
                        {
                            continue;
                        }
                    }
                    f(key, val);
                    done += 1;
                    last = Some(i);
                    if done == n {
                        return Ok(done);
                    }
                }
                if let Some(i) = last {
                    // Where a restarted pass resumes.
                    let mut kb = [0u8; 16];
                    if let Some(key) = self.raw_key(&raws[i], &mut kb) {
                        resume.clear();
                        resume.extend_from_slice(key);
                        incl = false;
                    }
                }
                filter = false;
                if next == 0 {
                    return Ok(done);
                }
                off = next;
            }
        }
    }

    /// The entry with the largest key < `bound` (or the largest of all).
    pub(super) fn prev_entry(&self, bound: Option<&[u8]>) -> KvResult<Option<(Vec<u8>, Vec<u8>)>> {
        let g = epoch::pin();
        let top = [0xffu8; MAX_KEY + 1];
        let mut b: Vec<u8> = bound.map_or_else(|| top.to_vec(), |b| b.to_vec());
        let mut raws = Vec::with_capacity(SLOTS);
        let mut order = Vec::with_capacity(SLOTS);
        'outer: loop {
            let sk = SearchKey::new(&b);
            let mut rt = self.inner.route(&sk, false, true, &g);
            let low = rt.low.take();
            let lf = self.leaf(rt.leaf);
            if self.snapshot(lf, &mut raws).is_none() || !rt.still_valid() {
                continue;
            }
            if self.sort_raw(&raws, &mut order).is_none() {
                continue;
            }
            let bw = key_words(&b);
            for &(w, i) in order.iter().rev() {
                let r = &raws[i];
                let (mut kb, mut vb) = ([0u8; 16], [0u8; 8]);
                let (Some(key), Some(val)) = (self.raw_key(r, &mut kb), self.raw_value(r, &mut vb))
                else {
                    continue 'outer;
                };
                if cmp_words(w, bw, key, &b) == std::cmp::Ordering::Less {
                    return Ok(Some((key.to_vec(), val.to_vec())));
                }
            }
            match low {
                None => return Ok(None),
                Some(s) => b = s.to_vec(),
            }
        }
    }
}
