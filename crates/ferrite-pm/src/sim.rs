//! Durability tracking for simulated pools.
//!
//! A simulated pool lives in ordinary memory (the "CPU view"). Beside it the
//! simulator keeps the *durable image*: what PM holds. A cache line reaches the
//! durable image only when it was flushed (or written non-temporally) and a fence
//! followed. Stores are not intercepted: at a crash point the lines that differ
//! between the CPU view and the durable image are exactly the dirty lines, and
//! any of them may have been evicted by the CPU cache on its own, so a crash image
//! is the durable image plus a seeded random subset of them.
//!
//! Model limits (documented in `docs/DURABILITY.md`): eviction is whole-line and
//! takes the line's content at the crash point (or at its last flush); workloads
//! under simulation are single-threaded.

use std::collections::HashMap;

use crate::persist::CACHE_LINE;
use crate::AlignedBuf;

/// Called at every fence of a simulated pool, before the fence takes effect.
pub type CrashHook = Box<dyn FnMut(&CrashPoint<'_>) + Send>;

pub(crate) struct Sim {
    pub durable: AlignedBuf,
    /// Flushed but not yet fenced lines, with their content at flush time.
    pub pending: HashMap<usize, [u8; CACHE_LINE]>,
    pub fences: u64,
    pub hook: Option<CrashHook>,
}

impl Sim {
    pub fn new(durable: AlignedBuf) -> Sim {
        Sim {
            durable,
            pending: HashMap::new(),
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
        }
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
        }
    }
}

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

    fn view_line(&self, line: usize) -> &[u8] {
        // SAFETY: `line` indexes a line of the view, which is as long as the
        // durable image; the workload is single-threaded and suspended in the fence.
        unsafe { std::slice::from_raw_parts(self.view.add(line * CACHE_LINE), CACHE_LINE) }
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

    /// The image a power failure here could leave. Seed 0: only what is durable.
    /// Seed 1: every dirty line reached PM. Other seeds: each dirty line keeps its
    /// durable content, its content when last flushed, or its current content, at
    /// random.
    pub fn image(&self, dirty: &[usize], seed: u64) -> AlignedBuf {
        let mut img = AlignedBuf::from_slice(self.sim.durable.as_slice());
        let mut rng = SplitMix(seed ^ 0x9e37_79b9_7f4a_7c15 ^ self.fence.rotate_left(32));
        for &line in dirty {
            let choice = match seed {
                0 => 0,
                1 => 1,
                _ => rng.next() % 3,
            };
            let src: &[u8] = match choice {
                0 => continue,
                1 => self.view_line(line),
                _ => match self.sim.pending.get(&line) {
                    Some(snap) => snap,
                    None => self.view_line(line),
                },
            };
            img.as_mut_slice()[line * CACHE_LINE..(line + 1) * CACHE_LINE].copy_from_slice(src);
        }
        img
    }
}

/// Small deterministic PRNG (SplitMix64) so crash images are reproducible from
/// their seed without a dependency.
#[derive(Clone, Debug)]
pub struct SplitMix(pub u64);

impl SplitMix {
    /// The next 64 random bits. (Not an `Iterator`: the stream never ends and
    /// callers want a plain `u64`.)
    #[allow(clippy::should_implement_trait)]
    #[inline]
    pub fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Uniform in `0..n` (n > 0).
    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}
