//! Selective caching: the static top-levels copy and the dynamic DimensionList
//! cache with its eviction policies (naive, LRU, LFU, 2Q, LLA), partitioned by
//! offset so parallel queries rarely contend on one lock.

use std::collections::{BTreeSet, HashMap, HashSet, VecDeque};
use std::hash::{BuildHasherDefault, Hasher};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use crate::build::Meta;
use crate::error::{ElfError, Result};
use crate::layout::*;

/// A cache of DimensionLists keyed by their offset in the base array.
pub trait ListCache: Sync {
    /// False for [`NoCache`], so the query loop compiles the lookups away.
    const ENABLED: bool;
    fn get(&self, off: u32) -> Option<Arc<[u32]>>;
    /// Offers the list just read from the base array (`tuples` below it).
    fn admit(&self, off: u32, list: &[u32], tuples: u32);
}

/// No dynamic cache.
pub struct NoCache;

impl ListCache for NoCache {
    const ENABLED: bool = false;
    fn get(&self, _: u32) -> Option<Arc<[u32]>> {
        None
    }
    fn admit(&self, _: u32, _: &[u32], _: u32) {}
}

/// Eviction policy of the dynamic cache.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Policy {
    /// Admit until full, never evict.
    Naive,
    Lru,
    Lfu,
    /// Johnson & Shasha's 2Q: new lists wait in a FIFO, re-referenced ones go to LRU.
    TwoQ,
    /// Least likely accessed: priority = tuples below the list / all tuples; a new
    /// list only replaces one with a lower priority.
    Lla,
}

impl Policy {
    pub const ALL: [Policy; 5] = [
        Policy::Naive,
        Policy::Lru,
        Policy::Lfu,
        Policy::TwoQ,
        Policy::Lla,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Policy::Naive => "naive",
            Policy::Lru => "lru",
            Policy::Lfu => "lfu",
            Policy::TwoQ => "2q",
            Policy::Lla => "lla",
        }
    }

    pub fn parse(s: &str) -> Option<Policy> {
        Policy::ALL.into_iter().find(|p| p.name() == s)
    }
}

/// Hashes u32 offsets by multiplication (SipHash would cost more than a PM read).
#[derive(Default)]
pub struct OffHasher(u64);

impl Hasher for OffHasher {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0 ^ b as u64).wrapping_mul(0x100_0000_01b3);
        }
    }
    fn write_u32(&mut self, v: u32) {
        self.0 = (v as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    }
}

type OffMap<V> = HashMap<u32, V, BuildHasherDefault<OffHasher>>;

/// Bookkeeping bytes charged per cached list besides its words.
const ENTRY_OVERHEAD: usize = 48;

struct Slot {
    data: Arc<[u32]>,
    /// Eviction key (meaning depends on the policy); smallest is evicted first.
    key: (u64, u64),
    /// 2Q: still in the A1in FIFO.
    in_a1: bool,
}

#[derive(Default)]
struct Part {
    budget: usize,
    bytes: usize,
    map: OffMap<Slot>,
    order: BTreeSet<(u64, u64, u32)>,
    tick: u64,
    a1in: VecDeque<u32>,
    a1in_bytes: usize,
    a1out: VecDeque<u32>,
    a1out_set: HashSet<u32, BuildHasherDefault<OffHasher>>,
}

fn cost(len: usize) -> usize {
    len * 4 + ENTRY_OVERHEAD
}

impl Part {
    fn remove(&mut self, off: u32) {
        if let Some(s) = self.map.remove(&off) {
            self.bytes -= cost(s.data.len());
            if s.in_a1 {
                self.a1in_bytes -= cost(s.data.len());
            } else {
                self.order.remove(&(s.key.0, s.key.1, off));
            }
        }
    }

    fn touch(&mut self, policy: Policy, off: u32) -> Option<Arc<[u32]>> {
        self.tick += 1;
        let tick = self.tick;
        let s = self.map.get_mut(&off)?;
        let data = s.data.clone();
        let old = s.key;
        let new = match policy {
            Policy::Lru => (tick, 0),
            Policy::Lfu => (old.0 + 1, tick),
            Policy::TwoQ if !s.in_a1 => (tick, 0),
            _ => return Some(data),
        };
        s.key = new;
        self.order.remove(&(old.0, old.1, off));
        self.order.insert((new.0, new.1, off));
        Some(data)
    }

    fn insert(&mut self, policy: Policy, off: u32, list: &[u32], tuples: u32) {
        if self.map.contains_key(&off) {
            return;
        }
        let c = cost(list.len());
        if c > self.budget {
            return;
        }
        self.tick += 1;
        let tick = self.tick;
        match policy {
            Policy::Naive => {
                if self.bytes + c > self.budget {
                    return;
                }
            }
            Policy::Lla => {
                while self.bytes + c > self.budget {
                    match self.order.first().copied() {
                        Some((p, _, victim)) if p < tuples as u64 => self.remove(victim),
                        _ => return,
                    }
                }
            }
            Policy::Lru | Policy::Lfu => {
                while self.bytes + c > self.budget {
                    match self.order.first().copied() {
                        Some((_, _, victim)) => self.remove(victim),
                        None => return,
                    }
                }
            }
            Policy::TwoQ => {
                let to_am = self.a1out_set.remove(&off);
                while self.bytes + c > self.budget {
                    if self.a1in_bytes > self.budget / 4 || self.order.is_empty() {
                        let Some(victim) = self.a1in.pop_front() else {
                            break;
                        };
                        if self.map.get(&victim).is_some_and(|s| s.in_a1) {
                            self.remove(victim);
                            self.a1out.push_back(victim);
                            self.a1out_set.insert(victim);
                            let ghost_cap = (self.map.len() / 2).max(64);
                            while self.a1out.len() > ghost_cap {
                                if let Some(g) = self.a1out.pop_front() {
                                    self.a1out_set.remove(&g);
                                }
                            }
                        }
                    } else if let Some((_, _, victim)) = self.order.first().copied() {
                        self.remove(victim);
                    }
                }
                if self.bytes + c > self.budget {
                    return;
                }
                let slot = Slot {
                    data: Arc::from(list),
                    key: (tick, 0),
                    in_a1: !to_am,
                };
                if to_am {
                    self.order.insert((tick, 0, off));
                } else {
                    self.a1in.push_back(off);
                    self.a1in_bytes += c;
                }
                self.map.insert(off, slot);
                self.bytes += c;
                return;
            }
        }
        let key = match policy {
            Policy::Lla => (tuples as u64, 0),
            Policy::Lfu => (1, tick),
            _ => (tick, 0),
        };
        if policy != Policy::Naive {
            self.order.insert((key.0, key.1, off));
        }
        self.map.insert(
            off,
            Slot {
                data: Arc::from(list),
                key,
                in_a1: false,
            },
        );
        self.bytes += c;
    }
}

/// The dynamic DimensionList cache: `partitions` maps, each with its own lock and
/// an equal share of the byte budget.
pub struct DynCache {
    policy: Policy,
    parts: Vec<Mutex<Part>>,
    hits: AtomicU64,
    misses: AtomicU64,
}

impl DynCache {
    pub fn new(policy: Policy, budget_bytes: usize, partitions: usize) -> DynCache {
        let p = partitions.clamp(1, 1024);
        DynCache {
            policy,
            parts: (0..p)
                .map(|_| {
                    Mutex::new(Part {
                        budget: budget_bytes / p,
                        ..Part::default()
                    })
                })
                .collect(),
            hits: AtomicU64::new(0),
            misses: AtomicU64::new(0),
        }
    }

    #[inline]
    fn part(&self, off: u32) -> &Mutex<Part> {
        let h = (off as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 32;
        &self.parts[(h as usize) % self.parts.len()]
    }

    pub fn policy(&self) -> Policy {
        self.policy
    }

    /// Bytes held (list words plus bookkeeping).
    pub fn bytes(&self) -> usize {
        self.parts
            .iter()
            .map(|p| p.lock().map(|p| p.bytes).unwrap_or(0))
            .sum()
    }

    /// Lists held.
    pub fn len(&self) -> usize {
        self.parts
            .iter()
            .map(|p| p.lock().map(|p| p.map.len()).unwrap_or(0))
            .sum()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// (hits, misses) since creation.
    pub fn hit_counts(&self) -> (u64, u64) {
        (
            self.hits.load(Ordering::Relaxed),
            self.misses.load(Ordering::Relaxed),
        )
    }
}

impl ListCache for DynCache {
    const ENABLED: bool = true;

    fn get(&self, off: u32) -> Option<Arc<[u32]>> {
        let mut p = self.part(off).lock().unwrap_or_else(|e| e.into_inner());
        let r = p.touch(self.policy, off);
        drop(p);
        if r.is_some() {
            self.hits.fetch_add(1, Ordering::Relaxed);
        } else {
            self.misses.fetch_add(1, Ordering::Relaxed);
        }
        r
    }

    fn admit(&self, off: u32, list: &[u32], tuples: u32) {
        let mut p = self.part(off).lock().unwrap_or_else(|e| e.into_inner());
        p.insert(self.policy, off, list, tuples);
    }
}

/// A DRAM copy of the nodes at levels `< levels`, re-linearized so that child
/// words of nodes at level `levels - 1` keep pointing into the base array.
pub struct Top {
    pub words: Vec<u32>,
    pub levels: usize,
    pub root_off: u32,
}

/// Copies the first `levels` levels of `base` into DRAM (`levels > ncols` copies
/// everything including the TID lists: a full hybrid copy).
pub fn static_top(base: &[u32], meta: &Meta, levels: usize) -> Result<Top> {
    let n = meta.ncols;
    if levels > n {
        return Ok(Top {
            words: base.to_vec(),
            levels: n + 1,
            root_off: meta.root_off,
        });
    }
    let mut out: Vec<u32> = Vec::new();
    if levels == 0 || meta.root_kind == root_kind::EMPTY {
        return Ok(Top {
            words: out,
            levels,
            root_off: 0,
        });
    }
    let get = |i: usize| -> Result<u32> {
        base.get(i)
            .copied()
            .ok_or_else(|| ElfError::Corrupt(format!("offset {i} beyond the word array")))
    };
    // Copies the node `c` at `level` (< levels) and returns its new child word.
    fn copy(
        base: &[u32],
        get: &dyn Fn(usize) -> Result<u32>,
        out: &mut Vec<u32>,
        n: usize,
        levels: usize,
        level: usize,
        c: u32,
    ) -> Result<u32> {
        let off = (c & PAYLOAD) as usize;
        let new = out.len() as u32;
        if level == n {
            // TID list (levels == n cannot reach here: level < levels <= n).
            let k = get(off)? as usize;
            out.extend_from_slice(&base[off..off + 1 + k]);
            return Ok(TID_LIST | new);
        }
        if c & MONO_CHILD != 0 {
            let t = get(off + n - level)?;
            let extra = if t & DUP_TIDS != 0 {
                (t & PAYLOAD) as usize
            } else {
                0
            };
            let end = off + n - level + 1 + extra;
            if end > base.len() {
                return Err(ElfError::Corrupt("MonoList beyond the array".into()));
            }
            out.extend_from_slice(&base[off..end]);
            return Ok(MONO_CHILD | new);
        }
        let len = get(off)? as usize;
        let end = off + LIST_HEADER_WORDS + 2 * len;
        if end > base.len() {
            return Err(ElfError::Corrupt("DimensionList beyond the array".into()));
        }
        out.extend_from_slice(&base[off..end]);
        if level + 1 < levels {
            for k in 0..len {
                let i = LIST_HEADER_WORDS + 2 * k + 1;
                let child = base[off + i];
                let nc = copy(base, get, out, n, levels, level + 1, child)?;
                out[new as usize + i] = nc;
            }
        }
        Ok(new)
    }
    let root_off = match meta.root_kind {
        root_kind::DENSE => {
            let r = meta.root_off as usize;
            let card = meta.card0 as usize;
            if r + card > base.len() {
                return Err(ElfError::Corrupt("root directory beyond the array".into()));
            }
            out.extend_from_slice(&base[r..r + card]);
            if levels > 1 {
                for v in 0..card {
                    let c = base[r + v];
                    if c != EMPTY {
                        let nc = copy(base, &get, &mut out, n, levels, 1, c)?;
                        out[v] = nc;
                    }
                }
            }
            0
        }
        _ => copy(base, &get, &mut out, n, levels, 0, meta.root_off)?,
    };
    Ok(Top {
        words: out,
        levels,
        root_off,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn list(n: usize, seed: u32) -> Vec<u32> {
        (0..n as u32).map(|i| i ^ seed).collect()
    }

    #[test]
    fn every_policy_stays_within_its_budget() {
        for p in Policy::ALL {
            let c = DynCache::new(p, 4096, 2);
            for off in 0..500u32 {
                let l = list(10 + (off as usize % 20), off);
                if c.get(off % 37).is_none() {
                    c.admit(off, &l, off);
                }
                assert!(c.bytes() <= 4096, "{p:?}: {} bytes", c.bytes());
            }
            assert!(!c.is_empty(), "{p:?} cached nothing");
            // What a hit returns is what was admitted.
            for off in 0..500u32 {
                if let Some(l) = c.get(off) {
                    assert_eq!(&*l, &list(l.len(), off)[..], "{p:?} offset {off}");
                }
            }
        }
    }

    #[test]
    fn naive_never_evicts_and_lla_keeps_the_likeliest() {
        let c = DynCache::new(Policy::Naive, 1000, 1);
        for off in 0..100u32 {
            c.admit(off, &list(20, off), 1);
        }
        let kept: Vec<u32> = (0..100).filter(|&o| c.get(o).is_some()).collect();
        assert_eq!(kept, (0..kept.len() as u32).collect::<Vec<_>>());

        let c = DynCache::new(Policy::Lla, 1000, 1);
        for off in 0..100u32 {
            c.admit(off, &list(20, off), off);
        }
        let kept: Vec<u32> = (0..100).filter(|&o| c.get(o).is_some()).collect();
        assert!(!kept.is_empty());
        let lowest = kept[0];
        assert!(kept.iter().all(|&o| o >= lowest));
        assert_eq!(*kept.last().unwrap(), 99, "the most likely list is cached");
    }

    #[test]
    fn lru_evicts_the_least_recently_used() {
        let c = DynCache::new(Policy::Lru, 3 * cost(10), 1);
        for off in 0..3u32 {
            c.admit(off, &list(10, off), 0);
        }
        assert!(c.get(0).is_some()); // 1 is now the oldest
        c.admit(3, &list(10, 3), 0);
        assert!(c.get(1).is_none());
        assert!(c.get(0).is_some() && c.get(2).is_some() && c.get(3).is_some());
    }
}
