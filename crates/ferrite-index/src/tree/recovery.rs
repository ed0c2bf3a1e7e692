//! Recovery at open: the walk of the leaf chain inside the heap's tracer that
//! validates every leaf, completes interrupted cross-line updates, splits and
//! (by rolling back) merges, unlinks empty leaves, marks every reachable block
//! and collects each leaf's smallest key as its separator for the inner tree.
//!
//! Invariants relied on: outside an interrupted split or merge every leaf's
//! keys lie below its successor's smallest key, so dropping from a leaf the
//! keys that do not is exactly the repair; anything malformed is corruption
//! (reported as `PmError::CorruptObject` here, `KvError::Corrupt` to users);
//! repairs are persisted line by line and are idempotent, so a crash during
//! recovery is recovered again.

use std::sync::atomic::Ordering;

use ferrite_pm::{Marker, PmError, Pool};

use crate::error::corrupt;
use crate::inner::Sep;
use crate::leaf::*;

#[derive(Default)]
pub(super) struct Recovered {
    pub(super) leaves: Vec<(Option<Sep>, u64)>,
    pub(super) keys: u64,
    pub(super) repaired: u64,
    pub(super) unlinked: u64,
}

/// A valid entry seen by recovery: its first slot, its slots ([`span_of`]),
/// its comparison words and (keys longer than 16 bytes) the whole key.
struct RecKey<'p> {
    slot: usize,
    span: usize,
    w: (u64, u64, u32),
    full: Full<'p>,
}

/// The whole key of an entry longer than 16 bytes: an out-of-line block, or a
/// long entry's bytes.
enum Full<'p> {
    None,
    Block(&'p [u8]),
    Inline(KeyBuf),
}

impl RecKey<'_> {
    fn full(&self) -> &[u8] {
        match &self.full {
            Full::None => &[],
            Full::Block(b) => b,
            Full::Inline(b) => &b[..self.w.2 as usize],
        }
    }

    fn cmp(&self, o: &RecKey<'_>) -> std::cmp::Ordering {
        cmp_words(self.w, o.w, self.full(), o.full())
    }

    fn to_vec(&self) -> Vec<u8> {
        if self.w.2 as usize > WIDE_INLINE_MAX {
            return self.full().to_vec();
        }
        let mut kb = [0u8; 16];
        kb[..8].copy_from_slice(&self.w.0.to_be_bytes());
        kb[8..].copy_from_slice(&self.w.1.to_be_bytes());
        kb[..self.w.2 as usize].to_vec()
    }
}

/// Valid entries of a leaf during recovery (validated: a malformed entry or a
/// bad out-of-line block is corruption).
fn leaf_keys(pool: &Pool, lf: Leaf) -> Result<Vec<RecKey<'_>>, PmError> {
    let h = lf.hdrs();
    let mut out = Vec::new();
    for slot in 0..SLOTS {
        if !is_primary(&h, slot) {
            continue;
        }
        let bad = || corrupt(format!("leaf {:#x} slot {slot}: malformed entry", lf.off));
        let r = read_raw(lf, &h, slot).ok_or_else(bad)?;
        let (second, full) = if r.key_ool() {
            let b = ool_bytes(pool, r.k2).ok_or_else(bad)?;
            if b.len() != r.klen as usize {
                return Err(bad());
            }
            (suffix_of(b), Full::Block(b))
        } else if r.span() == 3 {
            let mut kb = KeyBuf::default();
            r.inline_key(&mut kb).ok_or_else(bad)?;
            (r.k2, Full::Inline(kb))
        } else if r.wide() {
            (r.k2, Full::None)
        } else {
            (0, Full::None)
        };
        if r.val_ool() && ool_bytes(pool, r.vw).is_none() {
            return Err(bad());
        }
        out.push(RecKey {
            slot,
            span: r.span(),
            w: r.sort_words(second),
            full,
        });
    }
    // A continuation outside the entry whose first slot precedes it is
    // corrupt too.
    for slot in 0..SLOTS {
        let (l, s) = (slot / PER_LINE, slot % PER_LINE);
        if hdr_valid(h[l]) & (1 << s) != 0
            && hdr_desc(h[l], s) == DESC_CONT
            && !out
                .iter()
                .any(|e| e.slot < slot && slot < e.slot + e.span && e.slot / PER_LINE == l)
        {
            return Err(corrupt(format!(
                "leaf {:#x} slot {slot}: stray continuation",
                lf.off
            )));
        }
    }
    Ok(out)
}

fn persist_line(pool: &Pool, lf: Leaf, l: usize, durable: bool) -> Result<(), PmError> {
    if durable {
        pool.persist(lf.line_ptr(l), 64)?;
    }
    Ok(())
}

/// Walks the leaf chain: finishes interrupted splits, rolls back interrupted
/// merges, finishes cross-line updates, unlinks empty leaves, marks every
/// reachable block and collects the leaves' low keys for the inner tree.
pub(super) fn recover(
    m: &mut Marker<'_>,
    head: u64,
    log: u64,
    durable: bool,
    rec: &mut Recovered,
) -> Result<(), PmError> {
    let pool = m.pool().clone();
    if log != 0 {
        m.mark(log)?;
    }
    if head == 0 {
        return Ok(());
    }
    let base = pool.base();
    let max_leaves = pool.size() / LEAF_SIZE as u64;
    // Ownership first: recovery writes into leaves (lock word, repairs), so a
    // pointer must name a leaf-sized block of *this* object before anything
    // else is read or written through it.
    let check_leaf = |m: &Marker<'_>, off: u64| -> Result<Leaf, PmError> {
        if off & 255 != 0 || !pool.contains(off, LEAF_SIZE) {
            return Err(corrupt(format!("leaf pointer {off:#x} is invalid")));
        }
        m.check_block(off, LEAF_SIZE as u64)?;
        let lf = Leaf { base, off };
        if lf.w(W_MAGIC).load(Ordering::Relaxed) != LEAF_MAGIC {
            return Err(corrupt(format!("block {off:#x} is not an index leaf")));
        }
        Ok(lf)
    };
    // Per leaf: fix a pending cross-line move, reset the lock.
    let prepare = |lf: Leaf, rec: &mut Recovered| -> Result<Vec<RecKey<'_>>, PmError> {
        lf.lock_word().store(0, Ordering::Relaxed);
        let pend = lf.w(W_PENDING).load(Ordering::Relaxed);
        if pend & PENDING_MARK != 0 {
            let (o, n) = ((pend & 0xff) as usize, ((pend >> 8) & 0xff) as usize);
            let mut h = lf.hdrs();
            if o < SLOTS && n < SLOTS && is_primary(&h, o) && is_primary(&h, n) {
                // Both copies are complete: keep the new one.
                let span = span_of(hdr_desc(h[o / PER_LINE], o % PER_LINE));
                let l = o / PER_LINE;
                clear_entry(&mut h, o, span);
                lf.set_hdr(l, h[l]);
                persist_line(&pool, lf, l, durable)?;
            }
            lf.store(W_PENDING, 0);
            persist_line(&pool, lf, W_PENDING / LINE_WORDS, durable)?;
            rec.repaired += 1;
        }
        leaf_keys(&pool, lf)
    };
    // Entries were validated by `leaf_keys`.
    let mark_entries = |m: &mut Marker<'_>, lf: Leaf| -> Result<u64, PmError> {
        let h = lf.hdrs();
        let mut n = 0;
        for slot in 0..SLOTS {
            if !is_primary(&h, slot) {
                continue;
            }
            let r = read_raw(lf, &h, slot)
                .ok_or_else(|| corrupt(format!("leaf {:#x}: malformed entry", lf.off)))?;
            if r.key_ool() {
                m.mark(r.k2)?;
            }
            if r.val_ool() {
                m.mark(r.vw)?;
            }
            n += 1;
        }
        Ok(n)
    };

    // `prev`: the last leaf kept, not yet finalised (marked), with its keys.
    let head_lf = check_leaf(m, head)?;
    let mut prev = (head_lf, prepare(head_lf, rec)?);
    let mut prev_low: Option<Sep> = None;
    let mut steps = 0u64;
    loop {
        let next = prev.0.next();
        if next == 0 {
            break;
        }
        steps += 1;
        if steps > max_leaves {
            return Err(corrupt("leaf chain has a cycle".into()));
        }
        let cur = check_leaf(m, next)?;
        let keys = prepare(cur, rec)?;
        if keys.is_empty() {
            // An empty leaf (other than the head): unlink it; it stays unmarked
            // and so becomes free.
            prev.0.store(W_NEXT, cur.next());
            persist_line(&pool, prev.0, 0, durable)?;
            rec.unlinked += 1;
            continue;
        }
        let min = keys.iter().min_by(|a, b| a.cmp(b)).expect("non-empty");
        // An interrupted split leaves the upper half in both leaves, an
        // interrupted merge (copy persisted, unlink not) the successor's keys
        // in both: every key of `prev` is below every key of its successor
        // otherwise. Dropping them from `prev` completes the split and rolls
        // the merge back (the successor still holds them all, with their
        // out-of-line blocks, which are therefore marked once, from there).
        let mut hdrs = prev.0.hdrs();
        let before = hdrs;
        prev.1.retain(|k| {
            if k.cmp(min) != std::cmp::Ordering::Less {
                clear_entry(&mut hdrs, k.slot, k.span);
                false
            } else {
                true
            }
        });
        if hdrs != before {
            for l in 0..LINES {
                if hdrs[l] != before[l] {
                    prev.0.set_hdr(l, hdrs[l]);
                    persist_line(&pool, prev.0, l, durable)?;
                }
            }
            rec.repaired += 1;
        }
        m.mark(prev.0.off)?;
        rec.keys += mark_entries(m, prev.0)?;
        rec.leaves.push((prev_low.take(), prev.0.off));
        prev_low = Some(Sep::from_key(&min.to_vec()));
        prev = (cur, keys);
    }
    m.mark(prev.0.off)?;
    rec.keys += mark_entries(m, prev.0)?;
    rec.leaves.push((prev_low, prev.0.off));
    Ok(())
}
