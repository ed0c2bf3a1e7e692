//! The two persistent ordered maps the thesis compares, behind one interface.
//!
//! * [`list::ListMap`]: the hybrid — an append-only singly linked list of PM
//!   pages (writes and deletes are appended records) indexed by a DRAM search
//!   tree, with a clean-up pass that drops superseded records.
//! * [`btree::BTreeMap`]: a copy-on-write persistent B+-tree of small fan-out.
//!
//! Both use the thesis's memory management: blocks come from the pool's heap
//! (pages of ~1 KiB for the list, exact-size nodes for the tree), nothing is
//! flushed while a group of modifications is being made, and [`PmMap::commit`]
//! flushes what was written since the last commit, issues one fence and then
//! publishes the new root (a second fence). A crash keeps exactly the
//! modifications of the committed groups; unreachable blocks are free at the
//! next open (the heap's reclamation is by reachability).

pub mod btree;
pub mod list;
mod list_index;
pub mod record;

use crate::error::{Result, StoreError};

/// An entry as [`PmMap::visit`] shows it.
pub enum Raw<'a> {
    /// The entry's whole record as it is in PM ([`record`] layout).
    Record(ferrite_pm::PmSlice<'a>),
    /// The entry's value (its record is built around it).
    Value(&'a [u8]),
}

impl Raw<'_> {
    /// Appends the entry `key` as a snapshot record ([`record`] layout).
    pub fn append_record(&self, key: &[u8], out: &mut Vec<u8>) {
        match self {
            Raw::Record(s) => s.append_to(out),
            Raw::Value(v) => record::push(out, key, v),
        }
    }
}

/// Hardware-independent counters of a map.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct MapStats {
    /// Entries in the map.
    pub entries: u64,
    /// Group commits so far.
    pub commits: u64,
    /// Bytes of PM the structure occupies (pages or nodes and value blocks).
    pub pm_bytes: u64,
    /// Bytes of those that hold live data.
    pub live_bytes: u64,
    /// Clean-up steps run (list) / nodes written (tree).
    pub maintenance: u64,
}

/// A persistent ordered map of byte strings with group commit.
///
/// Modifications are visible to readers of this handle at once and become
/// durable, all of a group or none, at the next [`PmMap::commit`]. Callers
/// serialise writers (`&mut self`).
pub trait PmMap: Send + Sync + Sized + 'static {
    /// Short name (`list`, `btree`).
    fn kind(&self) -> &'static str;
    /// The value of `key`.
    fn get(&self, key: &[u8]) -> Result<Option<Vec<u8>>>;
    /// The greatest entry whose key is in `[lower, upper]`.
    fn floor(&self, lower: &[u8], upper: &[u8]) -> Result<Option<(Vec<u8>, Vec<u8>)>>;
    /// Up to `limit` entries with keys in `[from, to)`, ascending.
    fn range(&self, from: &[u8], to: &[u8], limit: usize) -> Result<Vec<(Vec<u8>, Vec<u8>)>>;
    /// Visits the entries with keys in `[from, to)` in key order until `f`
    /// returns false, without copying them out (snapshot streams).
    fn visit(
        &self,
        from: &[u8],
        to: &[u8],
        f: &mut dyn FnMut(&[u8], Raw<'_>) -> Result<bool>,
    ) -> Result<()> {
        const BATCH: usize = 256;
        let mut cursor = from.to_vec();
        loop {
            let batch = self.range(&cursor, to, BATCH)?;
            for (k, v) in &batch {
                if !f(k, Raw::Value(v))? {
                    return Ok(());
                }
            }
            match batch.last() {
                Some((k, _)) if batch.len() == BATCH => {
                    cursor = k.clone();
                    cursor.push(0);
                }
                _ => return Ok(()),
            }
        }
    }
    /// Inserts or replaces every record of a snapshot stream ([`record`]
    /// layout, puts only); returns how many. A malformed stream is refused
    /// before anything is written.
    fn put_records(&mut self, bytes: &[u8]) -> Result<u64> {
        let recs = record::puts(bytes)
            .collect::<std::result::Result<Vec<_>, String>>()
            .map_err(StoreError::Invalid)?;
        for (_, k, v) in &recs {
            self.put(k, v)?;
        }
        Ok(recs.len() as u64)
    }
    /// Inserts or replaces.
    fn put(&mut self, key: &[u8], value: &[u8]) -> Result<()>;
    /// Removes; returns whether the key was present.
    fn delete(&mut self, key: &[u8]) -> Result<bool>;
    /// Makes every modification so far durable (no-op when there is none).
    fn commit(&mut self) -> Result<()>;
    /// Modifications since the last commit.
    fn uncommitted(&self) -> usize;
    /// Entries in the map.
    fn len(&self) -> usize;
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// An empty map in the same pool that is not published: filled with
    /// [`PmMap::put`] and made the map's whole contents by [`PmMap::install`]
    /// (snapshot installation). Dropping it unused leaks nothing (its blocks
    /// are unreachable and free at the next open; [`PmMap::discard`] frees
    /// them at once).
    fn staging(&self) -> Result<Self>;
    /// Atomically replaces this map's contents with `staged`'s (one root
    /// switch), then frees the old structure.
    fn install(&mut self, staged: Self) -> Result<()>;
    /// Frees a staging map's blocks.
    fn discard(staged: Self) -> Result<()>;
    /// One bounded step of background clean-up; returns whether more work
    /// is worth doing now.
    fn maintenance(&mut self) -> Result<bool> {
        Ok(false)
    }
    /// Counters.
    fn stats(&self) -> MapStats;
    /// The pool the map lives in.
    fn pool(&self) -> &ferrite_pm::Pool;
    /// Bytes of the pool's heap the map holds (whole blocks, as allocated).
    fn space_used(&self) -> u64 {
        self.stats().pm_bytes
    }
    /// Space is short (`on`) or no longer: a map that cleans up in the
    /// background reclaims dead space more eagerly while it is.
    fn set_space_pressure(&mut self, on: bool) {
        let _ = on;
    }
    /// Checks the persistent structure (order, bounds, accounting) and
    /// returns the number of entries.
    fn check(&self) -> std::result::Result<u64, String>;
    /// Whether every key is indexed (false while a list's background build
    /// after an open runs; see [`list::ListOptions::background_index`]).
    fn index_ready(&self) -> bool {
        true
    }
}

/// Sorts `(offset, len)` ranges and merges overlapping or adjacent ones.
pub(crate) fn coalesce(mut r: Vec<(u64, u64)>) -> Vec<(u64, u64)> {
    if r.len() < 2 {
        return r;
    }
    r.sort_unstable();
    let mut out: Vec<(u64, u64)> = Vec::with_capacity(r.len());
    for (off, len) in r {
        match out.last_mut() {
            Some((o, l)) if off <= *o + *l => *l = (*l).max(off + len - *o),
            _ => out.push((off, len)),
        }
    }
    out
}
