//! DRAM frames: descriptors, line masks and the frame table with its byte
//! budget. A *full* frame holds a page with a residency and a dirty bit per
//! cache line (thesis Fig. 3); a *mini* frame holds up to 16 lines of a page
//! in line order with a slot array naming them (thesis Fig. 4). Frame buffers
//! lie in two anonymous mappings in huge pages (one for full frames, one for
//! minis) made with the tier and backed by the OS on first touch: a frame's
//! buffer address follows from its id, so a descent can start loading a
//! child's lines before it touches the child's descriptor.

use std::cell::UnsafeCell;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicU8, AtomicUsize, Ordering};
use std::sync::Mutex;

use ferrite_pm::anon::{huge_vec, HugeRegion};

use crate::config::{LINE, MINI_FRAME_BYTES, MINI_SLOTS};
use crate::latch::Latch;
use crate::pm::NO_PAGE;

/// Index of a DRAM frame; [`MINI_BIT`] marks a mini frame.
pub(crate) type Fid = u32;
/// Tag of mini-frame ids.
pub(crate) const MINI_BIT: u32 = 1 << 30;
/// No frame.
pub(crate) const NO_FRAME: u32 = u32::MAX;

/// Frame states.
pub(crate) const FREE: u8 = 0;
pub(crate) const LOADING: u8 = 1;
pub(crate) const RESIDENT: u8 = 2;

/// No parent (not swizzled, or the parent is a tree's root swip).
pub(crate) const NO_PARENT: u64 = u64::MAX;

/// One bit per cache line of a page (up to 1024 lines: 64 KiB pages).
#[derive(Clone, Copy, Default, PartialEq, Eq)]
pub struct LineMask(pub [u64; 16]);

impl std::fmt::Debug for LineMask {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list().entries(self.iter()).finish()
    }
}

impl LineMask {
    /// The first `lines` lines.
    pub fn all(lines: usize) -> LineMask {
        let mut m = LineMask::default();
        for (i, w) in m.0.iter_mut().enumerate() {
            let lo = i * 64;
            if lines >= lo + 64 {
                *w = u64::MAX;
            } else if lines > lo {
                *w = (1u64 << (lines - lo)) - 1;
            }
        }
        m
    }
    #[inline]
    pub fn set(&mut self, l: usize) {
        self.0[l / 64] |= 1 << (l % 64);
    }
    #[inline]
    pub fn get(&self, l: usize) -> bool {
        self.0[l / 64] >> (l % 64) & 1 != 0
    }
    /// Sets lines `a..=b`.
    pub fn set_range(&mut self, a: usize, b: usize) {
        for l in a..=b {
            self.set(l);
        }
    }
    /// Whether lines `a..=b` are all set.
    #[inline]
    pub fn has_range(&self, a: usize, b: usize) -> bool {
        (a..=b).all(|l| self.get(l))
    }
    pub fn is_empty(&self) -> bool {
        self.0.iter().all(|&w| w == 0)
    }
    pub fn count(&self) -> usize {
        self.0.iter().map(|w| w.count_ones() as usize).sum()
    }
    pub fn union(&mut self, o: &LineMask) {
        for (a, b) in self.0.iter_mut().zip(o.0.iter()) {
            *a |= b;
        }
    }
    pub fn clear(&mut self) {
        self.0 = [0; 16];
    }
    /// The set lines in ascending order.
    pub fn iter(&self) -> impl Iterator<Item = usize> + '_ {
        self.0.iter().enumerate().flat_map(|(i, &w)| {
            let mut w = w;
            std::iter::from_fn(move || {
                if w == 0 {
                    return None;
                }
                let b = w.trailing_zeros() as usize;
                w &= w - 1;
                Some(i * 64 + b)
            })
        })
    }
}

/// Lines `a..=b` a byte range touches.
#[inline]
pub(crate) fn line_span(off: usize, len: usize) -> (usize, usize) {
    (off / LINE, (off + len.max(1) - 1) / LINE)
}

/// State of a full frame, guarded by its latch. `repr(C)` with the flag a
/// reader checks first and the residency mask at the front, so they share the
/// descriptor's second cache line (see [`DramTier::prefetch`]).
#[derive(Default)]
#[repr(C)]
pub(crate) struct FullState {
    pub all_resident: bool,
    pub resident: LineMask,
    pub dirty: LineMask,
    /// The frame is newer than the page's SSD copy.
    pub newer: bool,
}

/// State of a mini frame, guarded by its latch.
#[derive(Default)]
pub(crate) struct MiniState {
    /// Line index held by each slot, ascending; `count` slots used.
    pub slots: [u16; MINI_SLOTS],
    pub count: u8,
    /// Dirty bit per slot.
    pub dirty: u16,
    pub newer: bool,
}

/// What every DRAM frame has, full or mini.
pub(crate) struct Common {
    pub latch: Latch,
    /// The page held ([`NO_PAGE`] when free).
    pub pid: AtomicU64,
    pub state: AtomicU8,
    pub refbit: AtomicBool,
    /// Never evicted (meta page, tree roots).
    pub pinned: AtomicBool,
    /// A parent swip names this frame.
    pub swizzled: AtomicBool,
    /// When swizzled: parent frame id << 32 | swip offset ([`NO_PARENT`]: a
    /// root swip outside any page).
    pub parent: AtomicU64,
    /// Swizzled swips in this page.
    pub children: AtomicU32,
    /// Backing PM frame (u32::MAX: none).
    pub pm: AtomicU32,
    /// LSN of the last record that changed the page in this frame.
    pub max_lsn: AtomicU64,
}

// The latch-side fields fit the descriptor's first line; the state follows.
const _: () = assert!(std::mem::size_of::<Common>() <= LINE);

impl Common {
    fn new() -> Common {
        Common {
            latch: Latch::new(),
            pid: AtomicU64::new(NO_PAGE),
            state: AtomicU8::new(FREE),
            refbit: AtomicBool::new(false),
            pinned: AtomicBool::new(false),
            swizzled: AtomicBool::new(false),
            parent: AtomicU64::new(NO_PARENT),
            children: AtomicU32::new(0),
            pm: AtomicU32::new(u32::MAX),
            max_lsn: AtomicU64::new(0),
        }
    }

    /// Whether the frame currently holds `pid` and is usable.
    #[inline]
    pub fn holds(&self, pid: u64) -> bool {
        self.state.load(Ordering::Acquire) == RESIDENT && self.pid.load(Ordering::Acquire) == pid
    }

    pub fn pm_frame(&self) -> Option<u32> {
        let p = self.pm.load(Ordering::Acquire);
        (p != u32::MAX).then_some(p)
    }
}

/// A frame descriptor: `repr(C)`, cache-line aligned, the latch-side fields
/// (`Common`) first and the latch-guarded state after them.
#[repr(C, align(64))]
pub(crate) struct Frame<S> {
    pub c: Common,
    st: UnsafeCell<S>,
}

impl<S> Frame<S> {
    /// The latch-guarded state.
    ///
    /// # Safety
    /// The caller holds the frame's latch: exclusive to mutate, shared to read;
    /// and no other reference obtained through this call is alive in a way that
    /// aliases a mutable one.
    #[allow(clippy::mut_from_ref)]
    #[inline]
    pub unsafe fn st(&self) -> &mut S {
        // SAFETY: forwarded caller guarantee.
        unsafe { &mut *self.st.get() }
    }
}

// SAFETY: the UnsafeCell state is only accessed under the frame's latch.
unsafe impl<S: Send> Sync for Frame<S> {}

/// Counters of the DRAM tier.
#[derive(Debug, Default)]
pub(crate) struct DramCounters {
    pub evictions: AtomicU64,
    pub promotions: AtomicU64,
    pub line_loads: AtomicU64,
    pub page_loads_pm: AtomicU64,
    pub page_loads_ssd: AtomicU64,
}

/// The DRAM frames and their budget.
pub(crate) struct DramTier {
    page_size: usize,
    pub budget: u64,
    /// Buffers of the full frames: frame i at `i * page_size`.
    full_bufs: Arena,
    /// Buffers of the mini frames: mini i at `i * MINI_SLOTS * LINE`.
    mini_bufs: Arena,
    pub full: Box<[Frame<FullState>]>,
    pub mini: Box<[Frame<MiniState>]>,
    free_full: Mutex<Vec<u32>>,
    free_mini: Mutex<Vec<u32>>,
    pub used: AtomicU64,
    pub hand: AtomicUsize,
    pub counters: DramCounters,
}

impl DramTier {
    pub fn new(page_size: usize, budget: u64, minis: bool) -> DramTier {
        let nfull = (budget / page_size as u64).max(4) as usize;
        let nmini = if minis {
            (budget / MINI_FRAME_BYTES) as usize
        } else {
            0
        };
        let full_bufs = Arena::new(nfull * page_size);
        let mini_bufs = Arena::new(nmini * MINI_SLOTS * LINE);
        DramTier {
            page_size,
            budget,
            full: {
                let mut v = huge_vec(nfull);
                v.extend((0..nfull).map(|_| Frame {
                    c: Common::new(),
                    st: UnsafeCell::new(FullState::default()),
                }));
                v.into_boxed_slice()
            },
            mini: {
                let mut v = huge_vec(nmini);
                v.extend((0..nmini).map(|_| Frame {
                    c: Common::new(),
                    st: UnsafeCell::new(MiniState::default()),
                }));
                v.into_boxed_slice()
            },
            full_bufs,
            mini_bufs,
            free_full: Mutex::new((0..nfull as u32).rev().collect()),
            free_mini: Mutex::new((0..nmini as u32).rev().map(|i| i | MINI_BIT).collect()),
            used: AtomicU64::new(0),
            hand: AtomicUsize::new(0),
            counters: DramCounters::default(),
        }
    }

    #[inline]
    pub fn common(&self, fid: Fid) -> &Common {
        if fid & MINI_BIT != 0 {
            &self.mini[(fid & !MINI_BIT) as usize].c
        } else {
            &self.full[fid as usize].c
        }
    }

    /// Buffer of frame `fid`, computed from the id without touching the
    /// descriptor (the frame's only record of its buffer).
    #[inline]
    pub fn buf(&self, fid: Fid) -> *mut u8 {
        if fid & MINI_BIT != 0 {
            self.mini_bufs
                .at((fid & !MINI_BIT) as usize * MINI_SLOTS * LINE)
        } else {
            self.full_bufs.at(fid as usize * self.page_size)
        }
    }

    /// Starts loading what fixing frame `fid` (a valid id) reads first: the
    /// descriptor's latch line and state line, and the first `lines` lines of
    /// its buffer (a node's header and the start of its slots). The loads then
    /// overlap instead of missing one after another.
    #[inline]
    pub fn prefetch(&self, fid: Fid, lines: usize) {
        let d = if fid & MINI_BIT != 0 {
            &self.mini[(fid & !MINI_BIT) as usize] as *const Frame<MiniState> as usize
        } else {
            &self.full[fid as usize] as *const Frame<FullState> as usize
        };
        ferrite_pm::prefetch::lines(d, 2 * LINE);
        ferrite_pm::prefetch::lines(self.buf(fid) as usize, lines * LINE);
    }

    pub fn full_frame(&self, fid: Fid) -> &Frame<FullState> {
        &self.full[fid as usize]
    }

    pub fn mini_frame(&self, fid: Fid) -> &Frame<MiniState> {
        &self.mini[(fid & !MINI_BIT) as usize]
    }

    /// Whether `fid` names a frame of this tier.
    pub fn valid(&self, fid: Fid) -> bool {
        if fid & MINI_BIT != 0 {
            ((fid & !MINI_BIT) as usize) < self.mini.len()
        } else {
            (fid as usize) < self.full.len()
        }
    }

    pub fn frame_bytes(&self, mini: bool) -> u64 {
        if mini {
            MINI_FRAME_BYTES
        } else {
            self.page_size as u64
        }
    }

    /// Frames in the clock's index space.
    pub fn slots(&self) -> usize {
        self.full.len() + self.mini.len()
    }

    /// The frame at clock position `i`.
    pub fn at_slot(&self, i: usize) -> Fid {
        if i < self.full.len() {
            i as u32
        } else {
            (i - self.full.len()) as u32 | MINI_BIT
        }
    }

    /// Takes a free frame of the kind within the budget, latched exclusive; `None` when the budget or the frames are used up.
    pub fn alloc(&self, mini: bool) -> Option<Fid> {
        let size = self.frame_bytes(mini);
        let mut cur = self.used.load(Ordering::Relaxed);
        loop {
            if cur + size > self.budget {
                return None;
            }
            match self.used.compare_exchange_weak(
                cur,
                cur + size,
                Ordering::AcqRel,
                Ordering::Relaxed,
            ) {
                Ok(_) => break,
                Err(c) => cur = c,
            }
        }
        let fid = if mini {
            self.free_mini.lock().unwrap().pop()
        } else {
            self.free_full.lock().unwrap().pop()
        };
        let Some(fid) = fid else {
            self.used.fetch_sub(size, Ordering::AcqRel);
            return None;
        };
        let c = self.common(fid);
        c.latch.lock_exclusive();
        c.refbit.store(true, Ordering::Relaxed);
        c.pinned.store(false, Ordering::Relaxed);
        c.swizzled.store(false, Ordering::Relaxed);
        c.parent.store(NO_PARENT, Ordering::Relaxed);
        c.children.store(0, Ordering::Relaxed);
        c.pm.store(u32::MAX, Ordering::Relaxed);
        c.max_lsn.store(0, Ordering::Relaxed);
        // SAFETY: the frame is latched exclusive and free.
        unsafe {
            if mini {
                *self.mini_frame(fid).st() = MiniState::default();
            } else {
                *self.full_frame(fid).st() = FullState::default();
            }
        }
        Some(fid)
    }

    /// Returns frame `fid` (latched exclusive by the caller, no longer in the
    /// page table) to the free list and unlatches it.
    pub fn release(&self, fid: Fid) {
        let c = self.common(fid);
        c.pid.store(NO_PAGE, Ordering::Release);
        c.state.store(FREE, Ordering::Release);
        // SAFETY: the caller holds the exclusive latch.
        unsafe { c.latch.unlock_exclusive() };
        let mini = fid & MINI_BIT != 0;
        if mini {
            self.free_mini.lock().unwrap().push(fid);
        } else {
            self.free_full.lock().unwrap().push(fid);
        }
        self.used
            .fetch_sub(self.frame_bytes(mini), Ordering::AcqRel);
    }

    /// Resident frames (diagnostics and checkpoints).
    pub fn resident(&self) -> impl Iterator<Item = Fid> + '_ {
        (0..self.slots())
            .map(|i| self.at_slot(i))
            .filter(|&f| self.common(f).state.load(Ordering::Acquire) == RESIDENT)
    }
}

/// Frame buffers in one [`HugeRegion`].
struct Arena(HugeRegion);

impl Arena {
    fn new(len: usize) -> Arena {
        match HugeRegion::new(len) {
            Ok(r) => Arena(r),
            Err(_) => std::alloc::handle_alloc_error(
                std::alloc::Layout::from_size_align(len, 4096).expect("layout"),
            ),
        }
    }

    /// Address of byte `off`, which must lie in the arena (a frame id out of
    /// range panics here, as indexing the descriptors would).
    #[inline]
    fn at(&self, off: usize) -> *mut u8 {
        assert!(off < self.0.len(), "frame buffer offset {off} out of range");
        self.0.as_ptr().wrapping_add(off)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn masks_set_count_and_iterate() {
        let mut m = LineMask::default();
        m.set_range(3, 5);
        m.set(700);
        assert_eq!(m.iter().collect::<Vec<_>>(), vec![3, 4, 5, 700]);
        assert!(m.has_range(3, 5) && !m.has_range(3, 6));
        assert_eq!(LineMask::all(256).count(), 256);
        assert_eq!(LineMask::all(70).count(), 70);
        assert_eq!(line_span(60, 8), (0, 1));
        assert_eq!(line_span(64, 64), (1, 1));
    }

    #[test]
    fn the_budget_bounds_frames() {
        let d = DramTier::new(4096, 4 * 4096 + 2 * MINI_FRAME_BYTES, true);
        let mut got = Vec::new();
        while let Some(f) = d.alloc(false) {
            got.push(f);
        }
        assert_eq!(got.len(), 4);
        let m = d.alloc(true).expect("minis fit the rest");
        assert!(d.alloc(true).is_some() && d.alloc(true).is_none());
        d.release(got.pop().unwrap());
        assert!(d.alloc(false).is_some());
        d.release(m);
    }
}
