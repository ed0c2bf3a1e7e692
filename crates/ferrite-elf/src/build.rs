//! Bulk build: sort the rows lexicographically, then linearize the prefix tree
//! depth-first into one word array (a DimensionList, then its children in order).

use crate::error::{ElfError, Result};
use crate::layout::*;

/// Where the level-0 node is and how it is stored; everything else is reached
/// from it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Meta {
    pub ncols: usize,
    pub nrows: u64,
    pub root_kind: u32,
    pub root_off: u32,
    pub card0: u32,
}

/// A built Elf in DRAM: the word array and its metadata.
#[derive(Debug, Clone)]
pub struct Built {
    pub meta: Meta,
    pub words: Vec<u32>,
}

/// Checks column slices: same length, values within 31 bits, a sane row count.
pub fn check_columns(cols: &[&[u32]]) -> Result<usize> {
    if cols.is_empty() || cols.len() > MAX_COLS {
        return Err(ElfError::InvalidTable(format!(
            "an Elf needs 1 to {MAX_COLS} columns, got {}",
            cols.len()
        )));
    }
    let nrows = cols[0].len();
    for (i, c) in cols.iter().enumerate() {
        if c.len() != nrows {
            return Err(ElfError::InvalidTable(format!(
                "column {i} has {} rows, column 0 has {nrows}",
                c.len()
            )));
        }
        if let Some(v) = c.iter().find(|&&v| v > MAX_VALUE) {
            return Err(ElfError::InvalidTable(format!(
                "column {i} holds {v}, above the largest value {MAX_VALUE}"
            )));
        }
    }
    if nrows as u64 > MAX_ROWS {
        return Err(ElfError::TooLarge(format!(
            "{nrows} rows (at most {MAX_ROWS})"
        )));
    }
    Ok(nrows)
}

/// Builds an Elf from column slices; row `i` gets TID `i`.
pub fn build(cols: &[&[u32]]) -> Result<Built> {
    build_with_tids(cols, None)
}

/// Builds an Elf whose row `i` has TID `tids[i]` (merges keep TIDs stable).
pub fn build_with_tids(cols: &[&[u32]], tids: Option<&[u32]>) -> Result<Built> {
    let nrows = check_columns(cols)?;
    let n = cols.len();
    if let Some(t) = tids {
        if t.len() != nrows || t.iter().any(|&x| x > PAYLOAD) {
            return Err(ElfError::InvalidTable(
                "TID list does not match the rows or holds a TID above 2^31-1".into(),
            ));
        }
    }
    // LSD sort: stable passes from the last column to the first, starting from
    // TID order, so equal rows keep ascending TIDs.
    let mut perm: Vec<u32> = (0..nrows as u32).collect();
    if let Some(t) = tids {
        perm.sort_by_key(|&r| t[r as usize]);
    }
    let mut scratch = vec![0u32; nrows];
    for c in (0..n).rev() {
        sort_pass(&mut perm, &mut scratch, cols[c]);
    }
    drop(scratch);
    let mut rows = Vec::with_capacity(nrows * n);
    for &r in &perm {
        for col in cols {
            rows.push(col[r as usize]);
        }
    }
    let stids: Vec<u32> = match tids {
        Some(t) => perm.iter().map(|&r| t[r as usize]).collect(),
        None => perm,
    };
    linearize(n, &rows, &stids)
}

/// One stable sort pass of `perm` by `col`.
fn sort_pass(perm: &mut [u32], scratch: &mut [u32], col: &[u32]) {
    let max = col.iter().copied().max().unwrap_or(0) as usize;
    if max < (1 << 22) && max <= perm.len().max(1 << 16) {
        let mut count = vec![0usize; max + 2];
        for &r in perm.iter() {
            count[col[r as usize] as usize + 1] += 1;
        }
        for i in 1..count.len() {
            count[i] += count[i - 1];
        }
        for &r in perm.iter() {
            let v = col[r as usize] as usize;
            scratch[count[v]] = r;
            count[v] += 1;
        }
        perm.copy_from_slice(scratch);
    } else {
        perm.sort_by_key(|&r| col[r as usize]);
    }
}

struct Lin<'a> {
    n: usize,
    rows: &'a [u32],
    tids: &'a [u32],
    out: Vec<u32>,
}

impl Lin<'_> {
    fn row(&self, i: usize) -> &[u32] {
        &self.rows[i * self.n..(i + 1) * self.n]
    }

    fn here(&self) -> Result<u32> {
        let len = self.out.len() as u64;
        if len >= MAX_WORDS {
            return Err(ElfError::TooLarge(format!(
                "the Elf needs more than {MAX_WORDS} words"
            )));
        }
        Ok(len as u32)
    }

    /// Child word for the rows `lo..hi`, which share columns `< level`.
    fn child(&mut self, level: usize, lo: usize, hi: usize) -> Result<u32> {
        if level == self.n {
            if hi - lo == 1 {
                return Ok(self.tids[lo]);
            }
            let off = self.here()?;
            self.out.push((hi - lo) as u32);
            self.out.extend_from_slice(&self.tids[lo..hi]);
            return Ok(TID_LIST | off);
        }
        if self.row(lo)[level..] == self.row(hi - 1)[level..] {
            let off = self.here()?;
            let vals = self.rows[lo * self.n + level..(lo + 1) * self.n].to_vec();
            self.out.extend_from_slice(&vals);
            if hi - lo == 1 {
                self.out.push(self.tids[lo]);
            } else {
                self.out.push(DUP_TIDS | (hi - lo) as u32);
                self.out.extend_from_slice(&self.tids[lo..hi]);
            }
            return Ok(MONO_CHILD | off);
        }
        self.list(level, lo, hi)
    }

    /// Runs of equal values of column `level` in rows `lo..hi`.
    fn groups(&self, level: usize, lo: usize, hi: usize) -> Vec<(u32, usize, usize)> {
        let mut g = Vec::new();
        let mut i = lo;
        while i < hi {
            let v = self.rows[i * self.n + level];
            let mut j = i + 1;
            while j < hi && self.rows[j * self.n + level] == v {
                j += 1;
            }
            g.push((v, i, j));
            i = j;
        }
        g
    }

    fn list(&mut self, level: usize, lo: usize, hi: usize) -> Result<u32> {
        let groups = self.groups(level, lo, hi);
        let off = self.here()?;
        self.out.push(groups.len() as u32);
        self.out.push((hi - lo) as u32);
        for (k, &(v, _, _)) in groups.iter().enumerate() {
            let last = if k + 1 == groups.len() { LAST_ENTRY } else { 0 };
            self.out.push(v | last);
            self.out.push(0);
        }
        for (k, &(_, a, b)) in groups.iter().enumerate() {
            let c = self.child(level + 1, a, b)?;
            self.out[off as usize + LIST_HEADER_WORDS + 2 * k + 1] = c;
        }
        Ok(off)
    }
}

/// Linearizes sorted row-major `rows` (with their TIDs) into an Elf. The array
/// starts with the maximum value of every column (for work estimates).
pub fn linearize(n: usize, rows: &[u32], tids: &[u32]) -> Result<Built> {
    let nrows = tids.len();
    let mut lin = Lin {
        n,
        rows,
        tids,
        out: Vec::with_capacity(nrows * (n / 2 + 3) + 64),
    };
    let mut maxes = vec![0u32; n];
    for r in 0..nrows {
        for (c, m) in maxes.iter_mut().enumerate() {
            *m = (*m).max(rows[r * n + c]);
        }
    }
    lin.out.extend_from_slice(&maxes);
    let mut meta = Meta {
        ncols: n,
        nrows: nrows as u64,
        root_kind: root_kind::EMPTY,
        root_off: 0,
        card0: 0,
    };
    if nrows > 0 {
        let card0 = maxes[0] as u64 + 1;
        if card0 <= (2 * nrows as u64).max(1024) {
            let off = lin.here()?;
            lin.out.resize(off as usize + card0 as usize, EMPTY);
            for (v, a, b) in lin.groups(0, 0, nrows) {
                let c = lin.child(1, a, b)?;
                lin.out[off as usize + v as usize] = c;
            }
            meta.root_kind = root_kind::DENSE;
            meta.root_off = off;
            meta.card0 = card0 as u32;
        } else {
            meta.root_off = lin.list(0, 0, nrows)?;
            meta.root_kind = root_kind::LIST;
        }
    }
    Ok(Built {
        meta,
        words: lin.out,
    })
}
