//! Checks for tests, `ferrite check` and crash checkers: the structure (leaf
//! chain sorted, matching the inner tree) and the space accounting (every
//! block of the heap is live exactly once or allocatable).
//!
//! Invariant relied on: no concurrent writer (a locked leaf fails the check);
//! `exhaust_and_account` leaves the index unusable for inserts.

use crate::ebr as epoch;

use super::FerriteIndex;

impl FerriteIndex {
    /// Every block the index reaches (leaves, out-of-line keys and values) with
    /// its block size; verifies that the chain is sorted and matches the tree.
    pub fn check_structure(&self) -> Result<Vec<(u64, u64)>, String> {
        let _g = epoch::pin();
        let mut tree_leaves = Vec::new();
        {
            let smo = self.inner.lock();
            smo.check()?;
            smo.leaves(&mut tree_leaves);
        }
        let mut chain = Vec::new();
        let mut off = self.head;
        let mut blocks = Vec::new();
        let mut last: Option<Vec<u8>> = None;
        let mut raws = Vec::new();
        let mut order = Vec::new();
        let bs = |o: u64| self.heap.block_size(o).unwrap_or(0) as u64;
        while off != 0 {
            chain.push(off);
            blocks.push((off, bs(off)));
            let lf = self.leaf(off);
            let next = self
                .snapshot(lf, &mut raws)
                .ok_or("leaf locked during check")?;
            self.sort_raw(&raws, &mut order).ok_or("bad key block")?;
            for &(_, i) in &order {
                let r = raws[i];
                let mut kb = crate::leaf::KeyBuf::default();
                let k = self.raw_key(&r, &mut kb).ok_or("bad key")?;
                if let Some(prev) = &last {
                    if prev.as_slice() >= k {
                        return Err(format!("keys out of order at leaf {off:#x}"));
                    }
                }
                last = Some(k.to_vec());
                if r.span() == 3 && !self.tagged_v2() {
                    return Err(format!(
                        "leaf {off:#x} holds a long entry but the index is tagged format version 1"
                    ));
                }
                if r.key_ool() {
                    blocks.push((r.k2, bs(r.k2)));
                }
                if r.val_ool() {
                    blocks.push((r.vw, bs(r.vw)));
                }
            }
            off = next;
            if chain.len() > 1 << 24 {
                return Err("leaf chain has a cycle".into());
            }
        }
        if chain != tree_leaves {
            return Err(format!(
                "leaf chain ({} leaves) differs from the inner tree ({} leaves)",
                chain.len(),
                tree_leaves.len()
            ));
        }
        Ok(blocks)
    }

    /// Allocates everything left in the index's heap and checks that live +
    /// allocatable blocks cover its chunks exactly (no leak, no double use).
    /// Leaves the index unusable for inserts; for crash checkers.
    pub fn exhaust_and_account(&self) -> Result<(), String> {
        let retired = self.quiesce();
        let mut live = self.check_structure()?;
        for off in retired {
            live.push((off, self.heap.block_size(off).unwrap_or(0) as u64));
        }
        ferrite_pm::account::exhaust_and_account(&self.pool, &self.heap, live)
    }
}
