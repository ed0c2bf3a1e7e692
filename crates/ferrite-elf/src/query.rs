//! Query evaluation over the linearized layout: exact, range and partial match are
//! one algorithm with inclusive per-column bounds (unconstrained = `0..=MAX`).

use crate::build::Meta;
use crate::cache::ListCache;
use crate::error::{ElfError, Result};
use crate::layout::*;

/// Inclusive bounds per column.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Query {
    pub bounds: Vec<(u32, u32)>,
}

impl Query {
    /// Every column equal to the given value.
    pub fn exact(values: &[u32]) -> Query {
        Query {
            bounds: values.iter().map(|&v| (v, v)).collect(),
        }
    }

    /// Inclusive bounds on every column.
    pub fn range(bounds: Vec<(u32, u32)>) -> Query {
        Query { bounds }
    }

    /// Bounds on some columns; `None` leaves a column unconstrained.
    pub fn partial(bounds: &[Option<(u32, u32)>]) -> Query {
        Query {
            bounds: bounds.iter().map(|b| b.unwrap_or((0, MAX_VALUE))).collect(),
        }
    }

    /// Matches every row.
    pub fn all(ncols: usize) -> Query {
        Query {
            bounds: vec![(0, MAX_VALUE); ncols],
        }
    }

    /// Brute-force predicate (the oracle of the tests, and the delta scan).
    pub fn matches(&self, row: &[u32]) -> bool {
        row.iter()
            .zip(&self.bounds)
            .all(|(&v, &(lo, hi))| lo <= v && v <= hi)
    }

    /// True when no row can match (some `lo > hi`).
    pub fn is_empty(&self) -> bool {
        self.bounds.iter().any(|&(lo, hi)| lo > hi)
    }

    pub(crate) fn check(&self, ncols: usize) -> Result<()> {
        if self.bounds.len() != ncols {
            return Err(ElfError::InvalidQuery(format!(
                "the query has {} columns, the Elf {ncols}",
                self.bounds.len()
            )));
        }
        Ok(())
    }
}

/// What a query touched: DimensionLists and cache lines read from the base array
/// (PM for a PM Elf), lists read from DRAM copies, and dynamic cache hits/misses.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct QueryStats {
    pub base_nodes: u64,
    pub base_lines: u64,
    pub dram_nodes: u64,
    pub cache_hits: u64,
    pub cache_misses: u64,
}

impl QueryStats {
    pub fn add(&mut self, o: &QueryStats) {
        self.base_nodes += o.base_nodes;
        self.base_lines += o.base_lines;
        self.dram_nodes += o.dram_nodes;
        self.cache_hits += o.cache_hits;
        self.cache_misses += o.cache_misses;
    }
}

/// The two address spaces of a (partly) cached Elf: nodes at levels below
/// `top_levels` are read from `top`, the others from `base`.
#[derive(Clone, Copy)]
pub(crate) struct Spaces<'a> {
    pub base: &'a [u32],
    pub top: &'a [u32],
    pub top_levels: usize,
    pub top_root: u32,
}

pub(crate) struct Walk<'a, C: ListCache, F: FnMut(u32)> {
    pub s: Spaces<'a>,
    pub meta: Meta,
    pub q: &'a [(u32, u32)],
    pub cache: &'a C,
    pub emit: F,
    pub st: QueryStats,
    /// Modelled PM read latency per base cache line (0 = off).
    pub read_ns: u64,
}

#[inline]
fn lower_bound(e: &[u32], len: usize, lo: u32) -> usize {
    let (mut a, mut b) = (0usize, len);
    while a < b {
        let m = (a + b) / 2;
        if e[2 * m] & PAYLOAD < lo {
            a = m + 1;
        } else {
            b = m;
        }
    }
    a
}

/// Busy-waits `ns` nanoseconds (the labelled PM read-latency model).
pub(crate) fn spin(ns: u64) {
    let t = std::time::Instant::now();
    while (t.elapsed().as_nanos() as u64) < ns {
        std::hint::spin_loop();
    }
}

impl<'a, C: ListCache, F: FnMut(u32)> Walk<'a, C, F> {
    #[inline]
    fn space(&self, level: usize) -> &'a [u32] {
        if level < self.s.top_levels {
            self.s.top
        } else {
            self.s.base
        }
    }

    #[inline]
    fn base_read(&mut self, level: usize, first_byte: usize, end_byte: usize) {
        if level >= self.s.top_levels {
            let lines =
                (end_byte.saturating_sub(1) / 64).saturating_sub(first_byte / 64) as u64 + 1;
            self.st.base_nodes += 1;
            self.st.base_lines += lines;
            if self.read_ns != 0 {
                spin(lines * self.read_ns);
            }
        } else {
            self.st.dram_nodes += 1;
        }
    }

    /// Evaluates the whole query from the root.
    pub fn run(&mut self) {
        match self.meta.root_kind {
            root_kind::DENSE => {
                let items = self.root_children();
                for c in items {
                    self.visit(1, c);
                }
            }
            root_kind::LIST => {
                let off = self.root_off();
                self.list(0, off);
            }
            _ => {}
        }
    }

    fn root_off(&self) -> u32 {
        if self.s.top_levels > 0 {
            self.s.top_root
        } else {
            self.meta.root_off
        }
    }

    /// Level-1 child words of the dense root within column 0's bounds.
    pub fn root_children(&mut self) -> Vec<u32> {
        let (lo, hi) = self.q[0];
        let card = self.meta.card0;
        if lo >= card || lo > hi {
            return Vec::new();
        }
        let hi = hi.min(card - 1);
        let off = self.root_off() as usize;
        self.base_read(0, (off + lo as usize) * 4, (off + hi as usize + 1) * 4);
        let dir = &self.space(0)[off + lo as usize..=off + hi as usize];
        dir.iter().copied().filter(|&c| c != EMPTY).collect()
    }

    /// The work items one level below node `c` at `level`: the matching children
    /// of a DimensionList, or the node itself when it is a MonoList or TIDs.
    pub fn expand(&mut self, level: usize, c: u32, out: &mut Vec<(usize, u32)>) {
        if level == self.meta.ncols || c & MONO_CHILD != 0 {
            out.push((level, c));
            return;
        }
        let w = self.space(level);
        let off = c as usize;
        let len = w[off] as usize;
        let e = &w[off + LIST_HEADER_WORDS..off + LIST_HEADER_WORDS + 2 * len];
        let (lo, hi) = self.q[level];
        let mut i = if lo == 0 { 0 } else { lower_bound(e, len, lo) };
        while i < len && e[2 * i] & PAYLOAD <= hi {
            out.push((level + 1, e[2 * i + 1]));
            i += 1;
        }
    }

    /// Visits the node `c` found in a list at `level - 1`.
    #[inline]
    pub fn visit(&mut self, level: usize, c: u32) {
        if level == self.meta.ncols {
            self.tids(c);
        } else if c & MONO_CHILD != 0 {
            self.mono(level, c & PAYLOAD);
        } else {
            self.list(level, c);
        }
    }

    fn tids(&mut self, c: u32) {
        if c & TID_LIST == 0 {
            (self.emit)(c);
            return;
        }
        let n = self.meta.ncols;
        let off = (c & PAYLOAD) as usize;
        let w = self.space(n);
        let k = w[off] as usize;
        let s: &'a [u32] = &w[off + 1..off + 1 + k];
        self.base_read(n, off * 4, (off + 1 + k) * 4);
        for &t in s {
            (self.emit)(t);
        }
    }

    fn mono(&mut self, level: usize, off: u32) {
        let n = self.meta.ncols;
        let off = off as usize;
        let w = self.space(level);
        let vals = &w[off..off + n - level];
        self.base_read(level, off * 4, (off + n - level + 1) * 4);
        for (j, &v) in vals.iter().enumerate() {
            let (lo, hi) = self.q[level + j];
            if v < lo || v > hi {
                return;
            }
        }
        let t = w[off + n - level];
        if t & DUP_TIDS == 0 {
            (self.emit)(t);
        } else {
            let k = (t & PAYLOAD) as usize;
            for &t in &w[off + n - level + 1..off + n - level + 1 + k] {
                (self.emit)(t);
            }
        }
    }

    fn list(&mut self, level: usize, off: u32) {
        if C::ENABLED && level >= self.s.top_levels {
            if let Some(l) = self.cache.get(off) {
                self.st.cache_hits += 1;
                self.st.dram_nodes += 1;
                self.scan(level, &l, 0, false);
                return;
            }
            self.st.cache_misses += 1;
            let base: &'a [u32] = self.s.base;
            let off = off as usize;
            let len = base[off] as usize;
            let whole = &base[off..off + LIST_HEADER_WORDS + 2 * len];
            self.scan(level, whole, 0, true);
            self.cache.admit(off as u32, whole, base[off + 1]);
            return;
        }
        let w = self.space(level);
        self.scan(level, w, off as usize, level >= self.s.top_levels);
    }

    #[inline]
    fn scan(&mut self, level: usize, w: &[u32], off: usize, count_base: bool) {
        let len = w[off] as usize;
        let e = &w[off + LIST_HEADER_WORDS..off + LIST_HEADER_WORDS + 2 * len];
        let (lo, hi) = self.q[level];
        let mut i = if lo == 0 { 0 } else { lower_bound(e, len, lo) };
        let start = i;
        while i < len {
            let v = e[2 * i] & PAYLOAD;
            if v > hi {
                break;
            }
            self.visit(level + 1, e[2 * i + 1]);
            i += 1;
        }
        if count_base {
            let first = if start == 0 {
                off
            } else {
                off + LIST_HEADER_WORDS + 2 * start
            };
            let end = off + LIST_HEADER_WORDS + 2 * (i + 1).min(len);
            self.base_read(level, first * 4, end * 4);
        } else {
            self.st.dram_nodes += 1;
        }
    }
}

/// Calls `f(values, tid)` for every row of an Elf (in key order): merges rebuild
/// from this, and `verify` checks the structure with it.
pub fn for_each_row(words: &[u32], meta: &Meta, mut f: impl FnMut(&[u32], u32)) -> Result<()> {
    let n = meta.ncols;
    let mut vals = vec![0u32; n];
    let bad = |d: String| ElfError::Corrupt(d);
    fn get(words: &[u32], i: usize) -> Result<u32> {
        words
            .get(i)
            .copied()
            .ok_or_else(|| ElfError::Corrupt(format!("offset {i} beyond the word array")))
    }
    #[allow(clippy::too_many_arguments)]
    fn node(
        words: &[u32],
        n: usize,
        level: usize,
        c: u32,
        vals: &mut [u32],
        f: &mut dyn FnMut(&[u32], u32),
        depth_budget: &mut u64,
    ) -> Result<()> {
        if *depth_budget == 0 {
            return Err(ElfError::Corrupt(
                "the tree has more nodes than words".into(),
            ));
        }
        *depth_budget -= 1;
        if level == n {
            if c & TID_LIST == 0 {
                f(vals, c);
            } else {
                let off = (c & PAYLOAD) as usize;
                let k = get(words, off)? as usize;
                for i in 0..k {
                    f(vals, get(words, off + 1 + i)?);
                }
            }
            return Ok(());
        }
        if c & MONO_CHILD != 0 {
            let off = (c & PAYLOAD) as usize;
            for (j, slot) in vals.iter_mut().enumerate().skip(level) {
                let v = get(words, off + j - level)?;
                if v > MAX_VALUE {
                    return Err(ElfError::Corrupt(format!("MonoList value {v} has a flag")));
                }
                *slot = v;
            }
            let t = get(words, off + n - level)?;
            if t & DUP_TIDS == 0 {
                f(vals, t);
            } else {
                for i in 0..(t & PAYLOAD) as usize {
                    f(vals, get(words, off + n - level + 1 + i)?);
                }
            }
            return Ok(());
        }
        list(words, n, level, c as usize, vals, f, depth_budget)
    }
    fn list(
        words: &[u32],
        n: usize,
        level: usize,
        off: usize,
        vals: &mut [u32],
        f: &mut dyn FnMut(&[u32], u32),
        budget: &mut u64,
    ) -> Result<()> {
        let len = get(words, off)? as usize;
        if len == 0 {
            return Err(ElfError::Corrupt(format!("empty DimensionList at {off}")));
        }
        let mut prev: Option<u32> = None;
        for k in 0..len {
            let raw = get(words, off + LIST_HEADER_WORDS + 2 * k)?;
            let last = raw & LAST_ENTRY != 0;
            if last != (k + 1 == len) {
                return Err(ElfError::Corrupt(format!(
                    "DimensionList at {off}: end flag on entry {k} of {len}"
                )));
            }
            let v = raw & PAYLOAD;
            if prev.is_some_and(|p| p >= v) {
                return Err(ElfError::Corrupt(format!(
                    "DimensionList at {off}: values out of order"
                )));
            }
            prev = Some(v);
            vals[level] = v;
            let c = get(words, off + LIST_HEADER_WORDS + 2 * k + 1)?;
            node(words, n, level + 1, c, vals, f, budget)?;
        }
        Ok(())
    }
    let mut budget = words.len() as u64 + 1;
    match meta.root_kind {
        root_kind::EMPTY => Ok(()),
        root_kind::DENSE => {
            for v in 0..meta.card0 {
                let c = get(words, meta.root_off as usize + v as usize)?;
                if c != EMPTY {
                    vals[0] = v;
                    node(words, n, 1, c, &mut vals, &mut f, &mut budget)?;
                }
            }
            Ok(())
        }
        root_kind::LIST => list(
            words,
            n,
            0,
            meta.root_off as usize,
            &mut vals,
            &mut f,
            &mut budget,
        ),
        k => Err(bad(format!("unknown root kind {k}"))),
    }
}

/// Checks the structure: every offset in bounds, lists sorted with one end flag,
/// the row count and every TID exactly once.
pub fn verify(words: &[u32], meta: &Meta) -> Result<()> {
    let mut seen = vec![false; meta.nrows as usize];
    let mut rows = 0u64;
    let mut err: Option<String> = None;
    for_each_row(words, meta, |_, t| {
        rows += 1;
        match seen.get_mut(t as usize) {
            Some(s) if !*s => *s = true,
            _ if err.is_none() => err = Some(format!("TID {t} is duplicated or out of range")),
            _ => {}
        }
    })?;
    if let Some(e) = err {
        return Err(ElfError::Corrupt(e));
    }
    if rows != meta.nrows {
        return Err(ElfError::Corrupt(format!(
            "{rows} rows reachable, the header says {}",
            meta.nrows
        )));
    }
    Ok(())
}
