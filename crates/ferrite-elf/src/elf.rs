//! A queryable Elf: its base word array (DRAM or PM) plus the DRAM caches of the
//! chosen variant, and the sequential, parallel and automatic query paths.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use crate::build::{Built, Meta};
use crate::cache::{static_top, DynCache, ListCache, NoCache, Policy, Top};
use crate::error::Result;
use crate::layout::*;
use crate::query::{Query, QueryStats, Spaces, Walk};

/// Where the base array lives.
pub enum Words {
    Dram(Vec<u32>),
    /// A word array inside a PM pool, kept alive by `keep`.
    Pm {
        ptr: *const u32,
        len: usize,
        keep: Arc<dyn std::any::Any + Send + Sync>,
    },
}

// SAFETY: the PM words are immutable while any `Words` refers to them (Elf blocks
// are written once before publication and freed only after the last reference
// drops), so sharing the raw pointer across threads is sound.
unsafe impl Send for Words {}
// SAFETY: as above; reads only.
unsafe impl Sync for Words {}

impl Words {
    pub fn as_slice(&self) -> &[u32] {
        match self {
            Words::Dram(v) => v,
            // SAFETY: ptr..ptr+len is a published, immutable block of a pool that
            // `keep` keeps mapped; the slice lives no longer than `self`.
            Words::Pm { ptr, len, .. } => unsafe { std::slice::from_raw_parts(*ptr, *len) },
        }
    }

    pub fn is_pm(&self) -> bool {
        matches!(self, Words::Pm { .. })
    }
}

/// An immutable Elf: metadata and its base words.
pub struct ElfData {
    pub meta: Meta,
    pub words: Words,
}

impl ElfData {
    pub fn dram(b: Built) -> ElfData {
        ElfData {
            meta: b.meta,
            words: Words::Dram(b.words),
        }
    }

    /// Maximum value of each column (stored at the start of the array).
    pub fn col_max(&self) -> &[u32] {
        &self.words.as_slice()[..self.meta.ncols]
    }
}

/// Dynamic cache settings.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DynSpec {
    pub policy: Policy,
    pub budget_bytes: usize,
    pub partitions: usize,
}

/// How an Elf is held and cached (the papers' variants).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Variant {
    /// The whole Elf in DRAM.
    Dram,
    /// Read everything from the pool.
    Pm,
    /// A full DRAM copy next to the PM one (queries read the copy).
    Hybrid,
    /// The first x levels copied to DRAM, the rest read from PM.
    Static(usize),
    /// DimensionLists cached on access within a byte budget.
    Dynamic(DynSpec),
    /// Static levels plus a dynamic cache below them.
    StaticDynamic(usize, DynSpec),
}

impl Variant {
    pub fn name(&self) -> String {
        match self {
            Variant::Dram => "dram".into(),
            Variant::Pm => "pm".into(),
            Variant::Hybrid => "hybrid".into(),
            Variant::Static(x) => format!("static{x}"),
            Variant::Dynamic(d) => format!("dyn-{}", d.policy.name()),
            Variant::StaticDynamic(x, d) => format!("static{x}+dyn-{}", d.policy.name()),
        }
    }

    /// Parses `dram`, `pm`, `hybrid`, `static:X`, `dyn:POLICY:BYTES[:PARTS]`.
    pub fn parse(s: &str) -> Option<Variant> {
        let parts: Vec<&str> = s.split(':').collect();
        match parts.as_slice() {
            ["dram"] => Some(Variant::Dram),
            ["pm"] => Some(Variant::Pm),
            ["hybrid"] => Some(Variant::Hybrid),
            ["static", x] => x.parse().ok().map(Variant::Static),
            ["dyn", p, b, rest @ ..] if rest.len() <= 1 => Some(Variant::Dynamic(DynSpec {
                policy: Policy::parse(p)?,
                budget_bytes: b.parse().ok()?,
                partitions: rest.first().map_or(Some(8), |r| r.parse().ok())?,
            })),
            _ => None,
        }
    }
}

/// Work estimate (expected matching tuples) above which queries run in parallel;
/// below it thread start-up costs more than it saves (the papers saw 100x losses
/// on tiny ranges).
pub const PAR_THRESHOLD: f64 = 20_000.0;

/// A queryable Elf.
pub struct Elf {
    data: Arc<ElfData>,
    top: Option<Top>,
    cache: Option<DynCache>,
    variant: Variant,
    /// Modelled PM read latency per cache line of the base array (0 = off).
    pub read_ns: u64,
}

impl Elf {
    /// An Elf over `data` held as `variant` (copies what the variant puts in DRAM).
    pub fn new(data: Arc<ElfData>, variant: Variant) -> Result<Elf> {
        let meta = data.meta;
        let (data, top, cache) = match variant {
            Variant::Dram if data.words.is_pm() => {
                let copy = data.words.as_slice().to_vec();
                (
                    Arc::new(ElfData {
                        meta,
                        words: Words::Dram(copy),
                    }),
                    None,
                    None,
                )
            }
            Variant::Dram | Variant::Pm => (data, None, None),
            Variant::Hybrid => {
                let t = static_top(data.words.as_slice(), &meta, meta.ncols + 1)?;
                (data, Some(t), None)
            }
            Variant::Static(x) => {
                let t = static_top(data.words.as_slice(), &meta, x.min(meta.ncols))?;
                (data, Some(t), None)
            }
            Variant::Dynamic(d) => (
                data,
                None,
                Some(DynCache::new(d.policy, d.budget_bytes, d.partitions)),
            ),
            Variant::StaticDynamic(x, d) => {
                let t = static_top(data.words.as_slice(), &meta, x.min(meta.ncols))?;
                (
                    data,
                    Some(t),
                    Some(DynCache::new(d.policy, d.budget_bytes, d.partitions)),
                )
            }
        };
        Ok(Elf {
            data,
            top,
            cache,
            variant,
            read_ns: 0,
        })
    }

    /// A DRAM Elf from a freshly built array.
    pub fn from_built(b: Built) -> Elf {
        Elf {
            data: Arc::new(ElfData::dram(b)),
            top: None,
            cache: None,
            variant: Variant::Dram,
            read_ns: 0,
        }
    }

    pub fn meta(&self) -> &Meta {
        &self.data.meta
    }

    pub fn data(&self) -> &Arc<ElfData> {
        &self.data
    }

    pub fn variant(&self) -> Variant {
        self.variant
    }

    pub fn ncols(&self) -> usize {
        self.data.meta.ncols
    }

    pub fn nrows(&self) -> u64 {
        self.data.meta.nrows
    }

    /// Bytes of the base word array.
    pub fn base_bytes(&self) -> usize {
        self.data.words.as_slice().len() * 4
    }

    /// Extra DRAM the variant uses (static copy and dynamic cache).
    pub fn cache_bytes(&self) -> usize {
        self.top.as_ref().map_or(0, |t| t.words.len() * 4)
            + self.cache.as_ref().map_or(0, |c| c.bytes())
    }

    pub fn dyn_cache(&self) -> Option<&DynCache> {
        self.cache.as_ref()
    }

    fn spaces(&self) -> Spaces<'_> {
        let base = self.data.words.as_slice();
        match &self.top {
            Some(t) => Spaces {
                base,
                top: &t.words,
                top_levels: t.levels,
                top_root: t.root_off,
            },
            None => Spaces {
                base,
                top: &[],
                top_levels: 0,
                top_root: 0,
            },
        }
    }

    fn read_ns(&self) -> u64 {
        if self.data.words.is_pm() {
            self.read_ns
        } else {
            0
        }
    }

    fn walk<C: ListCache, F: FnMut(u32)>(&self, q: &Query, cache: &C, f: F) -> QueryStats {
        let mut w = Walk {
            s: self.spaces(),
            meta: self.data.meta,
            q: &q.bounds,
            cache,
            emit: f,
            st: QueryStats::default(),
            read_ns: self.read_ns(),
        };
        w.run();
        w.st
    }

    /// Calls `f` with the TID of every matching row (sequentially).
    pub fn query_with_stats(&self, q: &Query, f: impl FnMut(u32)) -> Result<QueryStats> {
        q.check(self.ncols())?;
        if q.is_empty() {
            return Ok(QueryStats::default());
        }
        Ok(match &self.cache {
            Some(c) => self.walk(q, c, f),
            None => self.walk(q, &NoCache, f),
        })
    }

    /// Calls `f` with the TID of every matching row.
    pub fn query(&self, q: &Query, f: impl FnMut(u32)) -> Result<()> {
        self.query_with_stats(q, f).map(|_| ())
    }

    /// TIDs of the matching rows (unordered).
    pub fn collect(&self, q: &Query) -> Result<Vec<u32>> {
        let mut v = Vec::new();
        self.query(q, |t| v.push(t))?;
        Ok(v)
    }

    /// Number of matching rows.
    pub fn count(&self, q: &Query) -> Result<u64> {
        let mut n = 0u64;
        self.query(q, |_| n += 1)?;
        Ok(n)
    }

    /// Expected matching tuples under uniform, independent columns.
    pub fn estimate(&self, q: &Query) -> f64 {
        let mut est = self.nrows() as f64;
        for (&(lo, hi), &m) in q.bounds.iter().zip(self.data.col_max()) {
            let card = m as f64 + 1.0;
            let hi = hi.min(m);
            if lo > hi {
                return 0.0;
            }
            est *= ((hi - lo) as f64 + 1.0) / card;
        }
        est
    }

    /// Runs the query on `threads` threads: the subtrees of the first
    /// DimensionList's matching entries are handed out one at a time to whichever
    /// thread is free (the papers' interleaved per-subtree distribution).
    /// Each thread folds its TIDs into its own state, returned in thread order.
    pub fn query_par<S: Send>(
        &self,
        q: &Query,
        threads: usize,
        init: impl Fn() -> S + Sync,
        step: impl Fn(&mut S, u32) + Sync,
    ) -> Result<Vec<S>> {
        q.check(self.ncols())?;
        if q.is_empty() {
            return Ok(vec![init()]);
        }
        match &self.cache {
            Some(c) => Ok(self.par_inner(q, threads, c, &init, &step)),
            None => Ok(self.par_inner(q, threads, &NoCache, &init, &step)),
        }
    }

    fn par_inner<C: ListCache, S: Send>(
        &self,
        q: &Query,
        threads: usize,
        cache: &C,
        init: &(dyn Fn() -> S + Sync),
        step: &(dyn Fn(&mut S, u32) + Sync),
    ) -> Vec<S> {
        let meta = self.data.meta;
        // First-level work items: (level, child word).
        let items: Vec<(usize, u32)> = {
            let mut w = Walk {
                s: self.spaces(),
                meta,
                q: &q.bounds,
                cache,
                emit: |_| {},
                st: QueryStats::default(),
                read_ns: self.read_ns(),
            };
            match meta.root_kind {
                root_kind::DENSE => w.root_children().into_iter().map(|c| (1, c)).collect(),
                root_kind::LIST => {
                    let sp = self.spaces();
                    let (w0, off) = if sp.top_levels > 0 {
                        (sp.top, sp.top_root as usize)
                    } else {
                        (sp.base, meta.root_off as usize)
                    };
                    let len = w0[off] as usize;
                    let (lo, hi) = q.bounds[0];
                    (0..len)
                        .map(|k| {
                            let e = off + LIST_HEADER_WORDS + 2 * k;
                            (w0[e] & PAYLOAD, w0[e + 1])
                        })
                        .filter(|&(v, _)| lo <= v && v <= hi)
                        .map(|(_, c)| (1, c))
                        .collect()
                }
                _ => Vec::new(),
            }
        };
        // Few first-level subtrees (e.g. column 0 fixed): split one level deeper,
        // twice at most, so that every thread gets work.
        let mut items = items;
        for _ in 0..2 {
            if items.len() >= 4 * threads || items.iter().all(|&(l, _)| l + 1 >= meta.ncols) {
                break;
            }
            let mut w = Walk {
                s: self.spaces(),
                meta,
                q: &q.bounds,
                cache,
                emit: |_| {},
                st: QueryStats::default(),
                read_ns: self.read_ns(),
            };
            let mut next = Vec::with_capacity(items.len() * 8);
            for &(l, c) in &items {
                w.expand(l, c, &mut next);
            }
            items = next;
        }
        let threads = threads.clamp(1, items.len().max(1));
        let next = AtomicUsize::new(0);
        std::thread::scope(|s| {
            let handles: Vec<_> = (0..threads)
                .map(|_| {
                    let items = &items;
                    let next = &next;
                    s.spawn(move || {
                        let mut state = init();
                        let mut w = Walk {
                            s: self.spaces(),
                            meta,
                            q: &q.bounds,
                            cache,
                            emit: |t| step(&mut state, t),
                            st: QueryStats::default(),
                            read_ns: self.read_ns(),
                        };
                        loop {
                            let i = next.fetch_add(1, Ordering::Relaxed);
                            let Some(&(level, c)) = items.get(i) else {
                                break;
                            };
                            w.visit(level, c);
                        }
                        let _ = w.st;
                        state
                    })
                })
                .collect();
            handles
                .into_iter()
                .map(|h| h.join().unwrap_or_else(|p| std::panic::resume_unwind(p)))
                .collect()
        })
    }

    /// Counts matches on `threads` threads.
    pub fn count_par(&self, q: &Query, threads: usize) -> Result<u64> {
        Ok(self
            .query_par(q, threads, || 0u64, |n, _| *n += 1)?
            .into_iter()
            .sum())
    }

    /// Collects matches on `threads` threads.
    pub fn collect_par(&self, q: &Query, threads: usize) -> Result<Vec<u32>> {
        let parts = self.query_par(q, threads, Vec::new, |v, t| v.push(t))?;
        Ok(parts.concat())
    }

    /// True when the automatic mode would run `q` in parallel.
    pub fn prefers_parallel(&self, q: &Query, threads: usize) -> bool {
        threads > 1 && self.estimate(q) >= PAR_THRESHOLD
    }

    /// Counts matches, in parallel only when the work estimate is large.
    pub fn count_auto(&self, q: &Query, threads: usize) -> Result<u64> {
        if self.prefers_parallel(q, threads) {
            self.count_par(q, threads)
        } else {
            self.count(q)
        }
    }

    /// Collects matches, in parallel only when the work estimate is large.
    pub fn collect_auto(&self, q: &Query, threads: usize) -> Result<Vec<u32>> {
        if self.prefers_parallel(q, threads) {
            self.collect_par(q, threads)
        } else {
            self.collect(q)
        }
    }

    /// Every row as (values, TID), in key order.
    pub fn for_each_row(&self, f: impl FnMut(&[u32], u32)) -> Result<()> {
        crate::query::for_each_row(self.data.words.as_slice(), &self.data.meta, f)
    }

    /// Full structural check.
    pub fn verify(&self) -> Result<()> {
        crate::query::verify(self.data.words.as_slice(), &self.data.meta)
    }
}

impl std::fmt::Debug for Elf {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Elf")
            .field("meta", &self.data.meta)
            .field("variant", &self.variant)
            .finish()
    }
}

/// Builds a DRAM Elf from column slices (row `i` = TID `i`).
pub fn build_dram(cols: &[&[u32]]) -> Result<Elf> {
    Ok(Elf::from_built(crate::build::build(cols)?))
}
