//! Durability tracking for simulated pools: the crash simulator's memory model.
//!
//! A simulated pool lives in ordinary memory (the "CPU view"). Beside it the
//! simulator keeps the *durable image*: what PM holds. A cache line reaches the
//! durable image only when it was written back (flushed, or written
//! non-temporally) and a fence followed. At a crash point every line that differs
//! between the CPU view and the durable image, or that was written back and not
//! yet fenced, is *dirty*: the CPU cache may have evicted it at any moment, so
//! part of what was stored to it may have reached PM.
//!
//! # The model (documented in `docs/DURABILITY.md`)
//!
//! Stores reach PM at 8-byte granularity. For each dirty line independently:
//!
//! * **Recorded stores** (made through [`store_u64`], which PM structures use
//!   wherever they rely on the order of stores within a line, e.g. an index
//!   entry before the header word that validates it) follow x86-TSO per line:
//!   the line in PM holds its durable content plus a *prefix*, in program order,
//!   of the recorded stores to it since it was last made durable — never a later
//!   store without an earlier one.
//! * **Unrecorded changes** (plain stores, `memcpy`, non-temporal copies) are
//!   modelled pessimistically: each 8-byte word that differs may independently
//!   hold its durable value, its value at the line's last write-back, or its
//!   current value.
//!
//! Seed 0 of a crash point keeps only durable content, seed 1 lets every dirty
//! line reach PM whole, other seeds draw prefix lengths and word choices at
//! random. Values a word held between two recorded or snapshotted points are
//! not reproduced for unrecorded stores (the simulator does not intercept
//! them); that is the model's known gap.
//!
//! Workloads under simulation are single-threaded, or serialised by the
//! structure's own locks so that only one thread stores at a time.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Mutex, RwLock, Weak};

use crate::persist::CACHE_LINE;
use crate::rng::SplitMix;
use crate::AlignedBuf;

/// Called at every fence of a simulated pool, before the fence takes effect.
pub type CrashHook = Box<dyn FnMut(&CrashPoint<'_>) + Send>;

/// Words per cache line.
const WORDS: usize = CACHE_LINE / 8;

/// Recorded stores to one line since it was last made durable.
#[derive(Default, Clone)]
struct LineLog {
    /// (word index in the line, value), in program order.
    stores: Vec<(u8, u64)>,
    /// Stores covered by the line's last (not yet fenced) write-back.
    flushed: usize,
}

pub(crate) struct Sim {
    pub durable: AlignedBuf,
    /// Written back but not yet fenced lines, with their content at write-back.
    pub pending: HashMap<usize, [u8; CACHE_LINE]>,
    logs: HashMap<usize, LineLog>,
    pub fences: u64,
    pub hook: Option<CrashHook>,
}

impl Sim {
    pub fn new(durable: AlignedBuf) -> Sim {
        Sim {
            durable,
            pending: HashMap::new(),
            logs: HashMap::new(),
            fences: 0,
            hook: None,
        }
    }

    /// Records a write-back of the lines of `[off, off+len)` of `view`.
    pub fn flush(&mut self, view: *const u8, off: usize, len: usize) {
        if len == 0 {
            return;
        }
        let first = off / CACHE_LINE;
        let last = (off + len - 1) / CACHE_LINE;
        for line in first..=last {
            let mut snap = [0u8; CACHE_LINE];
            // SAFETY: the pool checked that the range lies inside the view, and the
            // view's length is a multiple of the line size.
            unsafe {
                std::ptr::copy_nonoverlapping(
                    view.add(line * CACHE_LINE),
                    snap.as_mut_ptr(),
                    CACHE_LINE,
                )
            };
            self.pending.insert(line, snap);
            if let Some(l) = self.logs.get_mut(&line) {
                l.flushed = l.stores.len();
            }
        }
    }

    /// Records an 8-byte store at pool offset `off` (8-byte aligned).
    fn record(&mut self, off: usize, value: u64) {
        let line = off / CACHE_LINE;
        let word = ((off % CACHE_LINE) / 8) as u8;
        self.logs
            .entry(line)
            .or_default()
            .stores
            .push((word, value));
    }

    /// A fence: offers the crash point to the hook, then makes pending lines durable.
    pub fn fence(&mut self, view: *const u8) {
        self.fences += 1;
        if let Some(mut hook) = self.hook.take() {
            hook(&CrashPoint {
                fence: self.fences,
                view,
                sim: self,
            });
            self.hook = Some(hook);
        }
        let durable = self.durable.as_mut_ptr();
        for (line, data) in self.pending.drain() {
            // SAFETY: `line` came from a checked flush of this pool, so it is in
            // bounds of the durable image, which has the view's size.
            unsafe {
                std::ptr::copy_nonoverlapping(
                    data.as_ptr(),
                    durable.add(line * CACHE_LINE),
                    CACHE_LINE,
                )
            };
            if let Some(l) = self.logs.get_mut(&line) {
                l.stores.drain(..l.flushed);
                l.flushed = 0;
                if l.stores.is_empty() {
                    self.logs.remove(&line);
                }
            }
        }
    }
}

// ----- recording stores ------------------------------------------------------------

/// Simulated pools alive in this process: (base address, length, simulator).
type Registry = Vec<(usize, usize, Weak<Mutex<Sim>>)>;

static LIVE_SIMS: AtomicUsize = AtomicUsize::new(0);
static REGISTRY: RwLock<Registry> = RwLock::new(Vec::new());

pub(crate) fn register(base: *const u8, len: usize, sim: Weak<Mutex<Sim>>) {
    let mut r = REGISTRY.write().unwrap_or_else(|e| e.into_inner());
    r.retain(|e| e.2.strong_count() > 0);
    r.push((base as usize, len, sim));
    LIVE_SIMS.store(r.len(), Ordering::Release);
}

pub(crate) fn unregister(base: *const u8) {
    let mut r = REGISTRY.write().unwrap_or_else(|e| e.into_inner());
    r.retain(|e| e.0 != base as usize && e.2.strong_count() > 0);
    LIVE_SIMS.store(r.len(), Ordering::Release);
}

#[cold]
fn record_slow(addr: usize, value: u64) {
    let r = REGISTRY.read().unwrap_or_else(|e| e.into_inner());
    for (base, len, sim) in r.iter() {
        if addr >= *base && addr < base + len {
            if let Some(sim) = sim.upgrade() {
                sim.lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .record(addr - base, value);
            }
            return;
        }
    }
}

/// Stores `value` to a PM word. Structures use this for every store whose order
/// within its cache line matters for crash consistency (x86 makes stores to
/// one line visible, and hence evictable, in program order). Under the crash
/// simulator the store is recorded so crash images respect that order; outside
/// it this is one atomic store and a predictable branch.
#[inline]
pub fn store_u64(word: &AtomicU64, value: u64, order: Ordering) {
    word.store(value, order);
    if LIVE_SIMS.load(Ordering::Relaxed) != 0 {
        record_slow(word as *const AtomicU64 as usize, value);
    }
}

// ----- crash points ------------------------------------------------------------------

/// The state of a simulated pool just before a fence: the material for crash images.
pub struct CrashPoint<'a> {
    /// 1-based number of the fence (counted from the hook's installation).
    pub fence: u64,
    view: *const u8,
    sim: &'a Sim,
}

impl CrashPoint<'_> {
    pub(crate) fn at_end(sim: &Sim, view: *const u8) -> CrashPoint<'_> {
        CrashPoint {
            fence: sim.fences + 1,
            view,
            sim,
        }
    }

    fn view_line(&self, line: usize) -> [u8; CACHE_LINE] {
        let mut out = [0u8; CACHE_LINE];
        // SAFETY: `line` indexes a line of the view, which is as long as the
        // durable image; the workload is suspended in the fence.
        unsafe {
            std::ptr::copy_nonoverlapping(
                self.view.add(line * CACHE_LINE),
                out.as_mut_ptr(),
                CACHE_LINE,
            )
        };
        out
    }

    /// Lines whose content is not (or not certainly) durable.
    pub fn dirty_lines(&self) -> Vec<usize> {
        const PAGE: usize = 4096;
        let d = self.sim.durable.as_slice();
        // SAFETY: the view is as long as the durable image; see `view_line`.
        let v = unsafe { std::slice::from_raw_parts(self.view, d.len()) };
        let mut out: Vec<usize> = self.sim.pending.keys().copied().collect();
        // Compare page by page first: most pages are clean.
        for (pi, (vp, dp)) in v.chunks(PAGE).zip(d.chunks(PAGE)).enumerate() {
            if vp == dp {
                continue;
            }
            for (li, (vl, dl)) in vp.chunks(CACHE_LINE).zip(dp.chunks(CACHE_LINE)).enumerate() {
                if vl != dl {
                    out.push(pi * (PAGE / CACHE_LINE) + li);
                }
            }
        }
        out.sort_unstable();
        out.dedup();
        out
    }

    /// Recorded stores to `line` not yet durable (program order).
    pub fn recorded_stores(&self, line: usize) -> usize {
        self.sim.logs.get(&line).map_or(0, |l| l.stores.len())
    }

    /// The image a power failure here could leave (see the module docs for the
    /// model). Seed 0: only what is durable. Seed 1: every dirty line reached PM
    /// whole. Other seeds: per dirty line a random prefix of its recorded stores
    /// and a random choice per unrecorded 8-byte word.
    pub fn image(&self, dirty: &[usize], seed: u64) -> AlignedBuf {
        let mut img = AlignedBuf::from_slice(self.sim.durable.as_slice());
        let mut rng = SplitMix(seed ^ 0x9e37_79b9_7f4a_7c15 ^ self.fence.rotate_left(32));
        for &line in dirty {
            let dst = &mut img.as_mut_slice()[line * CACHE_LINE..(line + 1) * CACHE_LINE];
            match seed {
                0 => {}
                1 => dst.copy_from_slice(&self.view_line(line)),
                _ => self.torn_line(line, dst, &mut rng),
            }
        }
        img
    }

    /// One random state of a dirty line under the model; `dst` holds its durable
    /// content on entry.
    fn torn_line(&self, line: usize, dst: &mut [u8], rng: &mut SplitMix) {
        let word = |b: &[u8], w: usize| u64::from_ne_bytes(b[w * 8..w * 8 + 8].try_into().unwrap());
        let set =
            |b: &mut [u8], w: usize, v: u64| b[w * 8..w * 8 + 8].copy_from_slice(&v.to_ne_bytes());
        let view = self.view_line(line);
        let snap = self.sim.pending.get(&line);
        // `all`: durable content plus every recorded store; `at_flush`: plus the
        // stores the last write-back covered.
        let mut all = [0u8; CACHE_LINE];
        all.copy_from_slice(dst);
        let log = self.sim.logs.get(&line);
        let stores: &[(u8, u64)] = log.map_or(&[], |l| &l.stores);
        let flushed = log.map_or(0, |l| l.flushed);
        let mut at_flush = all;
        // A prefix of the recorded stores (biased towards the ends, where the
        // interesting states are: nothing, everything, one short of everything).
        let k = match rng.below(4) {
            0 => 0,
            1 => stores.len(),
            2 => stores.len().saturating_sub(1),
            _ => rng.below(stores.len() as u64 + 1) as usize,
        };
        for (i, &(w, v)) in stores.iter().enumerate() {
            if i < k {
                set(dst, w as usize, v);
            }
            if i < flushed {
                set(&mut at_flush, w as usize, v);
            }
            set(&mut all, w as usize, v);
        }
        // Words changed outside the recorded stores: each independently.
        for w in 0..WORDS {
            let cur = word(&view, w);
            if cur == word(&all, w) && snap.is_none_or(|s| word(s, w) == word(&at_flush, w)) {
                continue;
            }
            match rng.below(3) {
                0 => {}
                1 => set(dst, w, cur),
                _ => {
                    if let Some(s) = snap {
                        set(dst, w, word(s, w));
                    }
                }
            }
        }
    }
}
