//! [`BufferManager`]: the tiers, the page table, fixing pages (page table or
//! swizzled swip → latched frame, loading on a miss), cache-line loads, mini
//! pages and swizzling. Logging is in `op`, replacement in `evict`,
//! checkpoints and restart in their modules.

use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use ferrite_pm::Pool;

use crate::access::{is_mini, mini_pos, Loc, Overlay, PageGuard};
use crate::admission::AdmissionSet;
use crate::config::{BufferConfig, LINE, MINI_SLOTS};
use crate::error::{BufferError, Result};
use crate::frame::{DramTier, Fid, FullState, LineMask, LOADING, NO_FRAME, RESIDENT};
use crate::latch::{Latch, Mode};
use crate::pm::PmTier;
use crate::registry::Registry;
use crate::restart::RestartReport;
use crate::ssd::{SsdBackend, SsdTier};
use crate::swip::{Swip, SWIZZLED};
use crate::table::{Entry, PageTable};
use crate::txn::{KeyLocks, TxnTable};
use crate::wal::Wal;

/// How much of a page a fix needs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Hint {
    /// A leaf: lines may be loaded as touched (cache-line-grained, mini pages).
    Leaf,
    /// Every line (inner pages, scans, structure changes).
    Whole,
}

/// Counters of the manager itself.
#[derive(Debug, Default)]
pub(crate) struct Counters {
    pub checkpoints: AtomicU64,
    pub swizzles: AtomicU64,
    pub unswizzles: AtomicU64,
    pub fixes: AtomicU64,
    pub misses: AtomicU64,
}

/// See [`BufferManager::reader`].
pub struct ReadGuard<'a>(#[allow(dead_code)] parking_lot::RwLockReadGuard<'a, ()>);

/// The three-tier buffer manager. Open it with [`BufferManager::open`].
pub struct BufferManager {
    pub(crate) cfg: BufferConfig,
    pub(crate) name: String,
    pub(crate) pool: Pool,
    pub(crate) pm: PmTier,
    pub(crate) dram: Option<DramTier>,
    pub(crate) ssd: Option<SsdTier>,
    pub(crate) table: PageTable,
    pub(crate) admission: Option<AdmissionSet>,
    pub(crate) wal: Wal,
    pub(crate) txns: TxnTable,
    pub(crate) locks: KeyLocks,
    pub(crate) gate: parking_lot::RwLock<()>,
    pub(crate) ckpt_lock: Mutex<()>,
    pub(crate) registry: Arc<dyn Registry>,
    pub(crate) redoing: AtomicBool,
    pub(crate) meta_fid: AtomicU32,
    pub(crate) counters: Counters,
    pub(crate) restart: Mutex<Option<RestartReport>>,
}

fn lock(l: &Latch, mode: Mode) {
    match mode {
        Mode::Shared => l.lock_shared(),
        Mode::Exclusive => l.lock_exclusive(),
    }
}

/// Lines of a child's buffer a descent prefetches when it follows a swizzled
/// swip: the page header and the first slots (a B-tree node's header and,
/// for a 16-entry leaf, all its slots).
const FIX_PREFETCH_LINES: usize = 3;

/// # Safety
/// The caller holds `l` in `mode`.
unsafe fn unlock(l: &Latch, mode: Mode) {
    // SAFETY: forwarded caller guarantee.
    unsafe {
        match mode {
            Mode::Shared => l.unlock_shared(),
            Mode::Exclusive => l.unlock_exclusive(),
        }
    }
}

impl BufferManager {
    /// Opens the buffer manager `name` in `pool` (creating it when absent)
    /// with SSD page files behind `ssd` (required when the configuration has an
    /// SSD tier), and runs restart: page table from the PM frame headers,
    /// analysis, redo, and undo of loser transactions through `registry`.
    pub fn open(
        pool: &Pool,
        name: &str,
        ssd: Option<Arc<dyn SsdBackend>>,
        cfg: BufferConfig,
        registry: Arc<dyn Registry>,
    ) -> Result<(Arc<BufferManager>, RestartReport)> {
        cfg.validate()?;
        if cfg.ssd_pages > 0 && ssd.is_none() {
            return Err(BufferError::Config(
                "the configuration has an SSD tier but no SSD backend was given".into(),
            ));
        }
        let started = std::time::Instant::now();
        let pm = PmTier::open(
            pool,
            name,
            cfg.page_size,
            cfg.pm_frames,
            cfg.track_pm_line_writes,
            cfg.pm_read_ns,
        )?;
        let wal = Wal::open(pool, pm.id, name, cfg.wal_segment_bytes)?;
        let dram = (cfg.dram_bytes > 0)
            .then(|| DramTier::new(cfg.page_size, cfg.dram_bytes, cfg.techniques.mini_pages));
        let ssd = match (cfg.ssd_pages, ssd) {
            (0, _) | (_, None) => None,
            (n, Some(b)) => Some(SsdTier::new(b, cfg.page_size, cfg.pages_per_file, n)),
        };
        let admission = (cfg.techniques.admission_set && pm.frames() > 0)
            .then(|| AdmissionSet::new(cfg.admission_set_size));
        let bm = Arc::new(BufferManager {
            table: PageTable::new(cfg.techniques.combined_table),
            name: name.to_string(),
            pool: pool.clone(),
            pm,
            dram,
            ssd,
            admission,
            wal,
            txns: TxnTable::new(),
            locks: KeyLocks::new(),
            gate: parking_lot::RwLock::new(()),
            ckpt_lock: Mutex::new(()),
            registry,
            redoing: AtomicBool::new(false),
            meta_fid: AtomicU32::new(NO_FRAME),
            counters: Counters::default(),
            restart: Mutex::new(None),
            cfg,
        });
        let report = crate::restart::restart(&bm, started)?;
        *bm.restart.lock().unwrap() = Some(report.clone());
        Ok((bm, report))
    }

    pub fn config(&self) -> &BufferConfig {
        &self.cfg
    }

    pub fn page_size(&self) -> usize {
        self.cfg.page_size
    }

    pub fn pool(&self) -> &Pool {
        &self.pool
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    /// Holds off checkpoints while pages are read outside an operation (every
    /// reader of pages takes it; operations hold it through [`crate::Op`]).
    /// Do not take it while holding an operation or another reader guard.
    pub fn reader(&self) -> ReadGuard<'_> {
        ReadGuard(self.gate.read())
    }

    /// The report of the restart this manager ran when it was opened.
    pub fn restart_report(&self) -> Option<RestartReport> {
        self.restart.lock().unwrap().clone()
    }

    pub(crate) fn dram(&self) -> &DramTier {
        self.dram.as_ref().expect("a DRAM tier")
    }

    pub(crate) fn pm(&self) -> &PmTier {
        &self.pm
    }

    /// Capacity of the page-id space (SSD pages, or PM frames without SSD).
    pub fn capacity_pages(&self) -> u64 {
        match &self.ssd {
            Some(s) => s.capacity(),
            None => self.pm.frames() as u64,
        }
    }

    /// The page id a DRAM frame holds.
    pub(crate) fn frame_pid(&self, fid: Fid) -> Result<u64> {
        match &self.dram {
            Some(d) if d.valid(fid) => Ok(d.common(fid).pid.load(Ordering::Acquire)),
            _ => Err(BufferError::corrupt(
                "page",
                format!("swizzled reference to frame {fid:#x}, which does not exist"),
            )),
        }
    }

    pub(crate) fn unlatch(&self, loc: Loc, mode: Mode) {
        if let (Loc::Full(f) | Loc::Mini(f), Mode::Exclusive) = (loc, mode) {
            crate::latch::note_exclusive(f, false);
        }
        let l = match loc {
            Loc::Full(f) | Loc::Mini(f) => &self.dram().common(f).latch,
            Loc::Pm(f) => &self.pm.descs[f as usize].latch,
        };
        // SAFETY: a guard holds its latch in its mode until this call.
        unsafe { unlock(l, mode) };
    }

    fn guard(&self, loc: Loc, pid: u64, mode: Mode) -> PageGuard<'_> {
        if let (Loc::Full(f) | Loc::Mini(f), Mode::Exclusive) = (loc, mode) {
            crate::latch::note_exclusive(f, true);
        }
        let whole = match loc {
            Loc::Full(f) => {
                let dram = self.dram();
                // SAFETY: the caller holds the frame's latch.
                let all = unsafe { dram.full_frame(f).st() }.all_resident;
                all.then(|| std::ptr::NonNull::new(dram.buf(f))).flatten()
            }
            _ => None,
        };
        PageGuard {
            bm: self,
            loc,
            pid,
            mode,
            touched: Default::default(),
            fresh: false,
            overlay: None,
            whole,
        }
    }

    /// Latches page `pid` in `mode`, loading it when it is not in DRAM.
    pub fn fix(&self, pid: u64, mode: Mode, hint: Hint) -> Result<PageGuard<'_>> {
        self.counters.fixes.fetch_add(1, Ordering::Relaxed);
        if pid > crate::swip::MAX_PID {
            return Err(BufferError::corrupt(
                "page",
                format!("page id {pid:#x} is out of range"),
            ));
        }
        if self.dram.is_none() {
            return self.fix_pm(pid, mode);
        }
        loop {
            let e = self.table.shard(pid).lookup(pid);
            if let Some(fid) = e.dram() {
                let c = self.dram().common(fid);
                lock(&c.latch, mode);
                if !c.holds(pid) {
                    // SAFETY: locked just above.
                    unsafe { unlock(&c.latch, mode) };
                    continue;
                }
                c.refbit.store(true, Ordering::Relaxed);
                let loc = if is_mini(fid) {
                    Loc::Mini(fid)
                } else {
                    Loc::Full(fid)
                };
                let g = self.guard(loc, pid, mode);
                if hint == Hint::Whole && !g.is_full() {
                    if let Some(g) = self.make_whole(g)? {
                        return Ok(g);
                    }
                    continue;
                }
                return Ok(g);
            }
            if e.evicting {
                std::thread::yield_now();
                continue;
            }
            if let Some(g) = self.load(pid, e, mode, hint, false)? {
                return Ok(g);
            }
        }
    }

    /// [`BufferManager::fix`] for a pinned page (a tree's root) whose DRAM
    /// frame the caller caches in `hint`: the frame is latched directly when it
    /// still holds the page, which saves the page-table lookup.
    pub fn fix_pinned(&self, hint: &AtomicU32, pid: u64, mode: Mode) -> Result<PageGuard<'_>> {
        if let Some(d) = &self.dram {
            let fid = hint.load(Ordering::Relaxed);
            if fid != NO_FRAME && d.valid(fid) && !is_mini(fid) {
                let c = d.common(fid);
                lock(&c.latch, mode);
                if c.holds(pid) && c.pinned.load(Ordering::Relaxed) {
                    // SAFETY: latched above; a pinned full frame is whole (roots
                    // are fixed whole when pinned).
                    if unsafe { d.full_frame(fid).st() }.all_resident {
                        return Ok(self.guard(Loc::Full(fid), pid, mode));
                    }
                }
                // SAFETY: locked above.
                unsafe { unlock(&c.latch, mode) };
            }
        }
        let g = self.fix(pid, mode, Hint::Whole)?;
        hint.store(g.fid().unwrap_or(NO_FRAME), Ordering::Relaxed);
        Ok(g)
    }

    /// Turns a guard on a partly resident page into one on a whole page;
    /// `None` when the page moved meanwhile (fix again).
    fn make_whole<'a>(&'a self, mut g: PageGuard<'a>) -> Result<Option<PageGuard<'a>>> {
        if g.mode == Mode::Exclusive {
            g.make_full()?;
            return Ok(Some(g));
        }
        let (pid, loc) = (g.pid, g.loc);
        drop(g);
        let fid = match loc {
            Loc::Full(f) | Loc::Mini(f) => f,
            Loc::Pm(_) => unreachable!("PM-direct pages are always whole"),
        };
        let c = self.dram().common(fid);
        c.latch.lock_exclusive();
        if !c.holds(pid) {
            // SAFETY: locked above.
            unsafe { c.latch.unlock_exclusive() };
            return Ok(None);
        }
        let loc = if is_mini(fid) {
            Loc::Mini(fid)
        } else {
            Loc::Full(fid)
        };
        let mut g = self.guard(loc, pid, Mode::Exclusive);
        g.make_full()?;
        let fid = g.fid().expect("DRAM");
        std::mem::forget(g);
        crate::latch::note_exclusive(fid, false);
        // SAFETY: the forgotten guard held this frame exclusive.
        unsafe { self.dram().common(fid).latch.downgrade() };
        Ok(Some(self.guard(Loc::Full(fid), pid, Mode::Shared)))
    }

    /// A miss: takes a frame, installs it, loads the page. `None` when the page
    /// table changed meanwhile (look again).
    pub(crate) fn load_fresh(&self, pid: u64) -> Result<Option<PageGuard<'_>>> {
        self.load(pid, Entry::NONE, Mode::Exclusive, Hint::Whole, true)
    }

    fn load(
        &self,
        pid: u64,
        e: Entry,
        mode: Mode,
        hint: Hint,
        fresh: bool,
    ) -> Result<Option<PageGuard<'_>>> {
        self.counters.misses.fetch_add(1, Ordering::Relaxed);
        let t = self.cfg.techniques;
        let lazy = e.pm().is_some() && t.cache_line_grained && hint == Hint::Leaf;
        let mini = lazy && t.mini_pages;
        let fid = self.alloc_dram(mini)?;
        let dram = self.dram();
        let c = dram.common(fid);
        c.pid.store(pid, Ordering::Release);
        c.state.store(LOADING, Ordering::Release);
        {
            let mut s = self.table.shard(pid);
            let cur = s.get(pid);
            if cur.dram().is_some() || cur.evicting || cur.pm != e.pm {
                drop(s);
                dram.release(fid);
                return Ok(None);
            }
            s.put(pid, Entry { dram: fid, ..cur });
        }
        let r = self.fill(fid, pid, e.pm(), lazy, mini, fresh);
        if let Err(err) = r {
            let mut s = self.table.shard(pid);
            let cur = s.get(pid);
            s.put(
                pid,
                Entry {
                    dram: NO_FRAME,
                    ..cur
                },
            );
            drop(s);
            dram.release(fid);
            return Err(err);
        }
        c.state.store(RESIDENT, Ordering::Release);
        let loc = if mini { Loc::Mini(fid) } else { Loc::Full(fid) };
        if mode == Mode::Shared {
            // SAFETY: alloc_dram returned the frame latched exclusive.
            unsafe { c.latch.downgrade() };
        }
        Ok(Some(self.guard(loc, pid, mode)))
    }

    /// Fills a fresh frame: from PM (lazily: only the header line), SSD, or zeros.
    fn fill(
        &self,
        fid: Fid,
        pid: u64,
        pmf: Option<u32>,
        lazy: bool,
        mini: bool,
        fresh: bool,
    ) -> Result<()> {
        let dram = self.dram();
        let c = dram.common(fid);
        let ps = self.cfg.page_size;
        if let Some(f) = pmf {
            c.pm.store(f, Ordering::Release);
            let d = &self.pm.descs[f as usize];
            d.refbit.store(true, Ordering::Relaxed);
            let newer = d.newer.load(Ordering::Relaxed);
            let src = self.pm.data(f);
            if mini {
                // SAFETY: the frame is latched exclusive.
                let st = unsafe { dram.mini_frame(fid).st() };
                // SAFETY: line 0 of the PM frame into slot 0 of the mini buffer.
                unsafe { std::ptr::copy_nonoverlapping(src, dram.buf(fid), LINE) };
                st.slots[0] = 0;
                st.count = 1;
                st.newer = newer;
                dram.counters.line_loads.fetch_add(1, Ordering::Relaxed);
            } else {
                // SAFETY: as above.
                let st = unsafe { dram.full_frame(fid).st() };
                st.newer = newer;
                if lazy {
                    // SAFETY: line 0 of the PM frame into line 0 of the frame.
                    unsafe { std::ptr::copy_nonoverlapping(src, dram.buf(fid), LINE) };
                    st.resident.set(0);
                    dram.counters.line_loads.fetch_add(1, Ordering::Relaxed);
                } else {
                    // SAFETY: whole page from the PM frame.
                    unsafe { std::ptr::copy_nonoverlapping(src, dram.buf(fid), ps) };
                    st.all_resident = true;
                    dram.counters.page_loads_pm.fetch_add(1, Ordering::Relaxed);
                }
            }
            self.pm
                .counters
                .lines_read
                .fetch_add(if lazy { 1 } else { (ps / LINE) as u64 }, Ordering::Relaxed);
            self.pm
                .model_read(f, 0, if lazy { 0 } else { ps / LINE - 1 });
            return Ok(());
        }
        // SAFETY: the frame is latched exclusive; a full frame (minis only for PM pages).
        let st = unsafe { dram.full_frame(fid).st() };
        // SAFETY: the frame's buffer is a page.
        let buf = unsafe { std::slice::from_raw_parts_mut(dram.buf(fid), ps) };
        match &self.ssd {
            Some(_) if fresh => buf.fill(0),
            Some(s) => {
                s.read_page(pid, buf, !self.redoing.load(Ordering::Relaxed))?;
                dram.counters.page_loads_ssd.fetch_add(1, Ordering::Relaxed);
            }
            None => buf.fill(0),
        }
        st.all_resident = true;
        st.newer = false;
        Ok(())
    }

    /// PM-direct: latches the PM frame of `pid` (a free frame for a new page).
    fn fix_pm(&self, pid: u64, mode: Mode) -> Result<PageGuard<'_>> {
        loop {
            let e = self.table.shard(pid).lookup(pid);
            if let Some(f) = e.pm() {
                let d = &self.pm.descs[f as usize];
                lock(&d.latch, mode);
                if d.pid.load(Ordering::Acquire) != pid {
                    // SAFETY: locked above.
                    unsafe { unlock(&d.latch, mode) };
                    continue;
                }
                let mut g = self.guard(Loc::Pm(f), pid, mode);
                if self.pm.hdr(f).pid1.load(Ordering::Acquire) == 0 {
                    // Never written: the page reads as zeros.
                    g.overlay = Some(zero_overlay(self.cfg.page_size));
                }
                return Ok(g);
            }
            let f = self.pm.take_free().ok_or_else(|| {
                BufferError::CapacityExceeded(format!(
                    "every one of the {} PM frames holds a page (PM-direct has no SSD to evict to)",
                    self.pm.frames()
                ))
            })?;
            let d = &self.pm.descs[f as usize];
            d.latch.lock_exclusive();
            {
                let mut s = self.table.shard(pid);
                if s.get(pid) != Entry::NONE {
                    drop(s);
                    // SAFETY: locked above.
                    unsafe { d.latch.unlock_exclusive() };
                    self.pm.put_free(f);
                    continue;
                }
                s.put(
                    pid,
                    Entry {
                        pm: f,
                        ..Entry::NONE
                    },
                );
            }
            d.pid.store(pid, Ordering::Release);
            if mode == Mode::Shared {
                // A shared reader of a page that does not exist yet: it reads
                // zeros through the frame, which only a writer publishes.
                // SAFETY: locked above.
                unsafe { d.latch.unlock_exclusive() };
                continue;
            }
            let mut g = self.guard(Loc::Pm(f), pid, Mode::Exclusive);
            g.overlay = Some(zero_overlay(self.cfg.page_size));
            return Ok(g);
        }
    }

    /// Latches the child at swip `off` of `parent` (latched), swizzling the
    /// swip when the technique is on.
    pub fn fix_child(
        &self,
        parent: &PageGuard<'_>,
        off: usize,
        mode: Mode,
        hint: Hint,
    ) -> Result<PageGuard<'_>> {
        loop {
            let w = parent.swip(off)?;
            let v = w.load(Ordering::Acquire);
            match Swip::decode(v) {
                Swip::Frame(fid) => {
                    let dram = match &self.dram {
                        Some(d) if d.valid(fid) => d,
                        _ => {
                            return Err(BufferError::corrupt(
                                format!("page {}", parent.pid),
                                format!("swizzled child {fid:#x} is not a frame"),
                            ))
                        }
                    };
                    dram.prefetch(fid, FIX_PREFETCH_LINES);
                    let c = dram.common(fid);
                    lock(&c.latch, mode);
                    if c.state.load(Ordering::Acquire) != RESIDENT || w.load(Ordering::Acquire) != v
                    {
                        // Promoted (mini → full) meanwhile: read the swip again.
                        // SAFETY: locked above.
                        unsafe { unlock(&c.latch, mode) };
                        continue;
                    }
                    c.refbit.store(true, Ordering::Relaxed);
                    let pid = c.pid.load(Ordering::Acquire);
                    let loc = if is_mini(fid) {
                        Loc::Mini(fid)
                    } else {
                        Loc::Full(fid)
                    };
                    let g = self.guard(loc, pid, mode);
                    if hint == Hint::Whole && !g.is_full() {
                        match self.make_whole(g)? {
                            Some(g) => return Ok(g),
                            None => continue,
                        }
                    }
                    return Ok(g);
                }
                Swip::Pid(pid) => {
                    let g = self.fix(pid, mode, hint)?;
                    if self.cfg.techniques.swizzling {
                        self.swizzle(parent, off, w, &g);
                    }
                    return Ok(g);
                }
            }
        }
    }

    fn swizzle(
        &self,
        parent: &PageGuard<'_>,
        off: usize,
        w: &std::sync::atomic::AtomicU64,
        child: &PageGuard<'_>,
    ) {
        let (Some(pf), Some(cf)) = (parent.fid(), child.fid()) else {
            return;
        };
        let dram = self.dram();
        let c = dram.common(cf);
        if c.pinned.load(Ordering::Relaxed) || c.swizzled.load(Ordering::Acquire) {
            return;
        }
        if w.compare_exchange(
            child.pid,
            SWIZZLED | cf as u64,
            Ordering::AcqRel,
            Ordering::Relaxed,
        )
        .is_ok()
        {
            c.parent.store(parent.parent_code(off), Ordering::Release);
            c.swizzled.store(true, Ordering::Release);
            dram.common(pf).children.fetch_add(1, Ordering::AcqRel);
            self.counters.swizzles.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Unswizzles swip `off` of `parent` (latched exclusive, or holding the
    /// evictor's exclusive latch).
    pub(crate) fn unswizzle_at(&self, parent: &PageGuard<'_>, off: usize) -> Result<()> {
        let w = parent.swip(off)?;
        loop {
            let v = w.load(Ordering::Acquire);
            let Swip::Frame(fid) = Swip::decode(v) else {
                return Ok(());
            };
            let pid = self.frame_pid(fid)?;
            // An evictor may unswizzle it concurrently, or a promotion redirect
            // it to a full frame: one compare-and-swap wins, then look again.
            if w.compare_exchange(v, pid, Ordering::AcqRel, Ordering::Acquire)
                .is_ok()
            {
                let c = self.dram().common(fid);
                c.swizzled.store(false, Ordering::Release);
                c.parent.store(crate::frame::NO_PARENT, Ordering::Release);
                if let Some(pf) = parent.fid() {
                    self.dram()
                        .common(pf)
                        .children
                        .fetch_sub(1, Ordering::AcqRel);
                }
                self.counters.unswizzles.fetch_add(1, Ordering::Relaxed);
                return Ok(());
            }
        }
    }

    /// The checked swip offsets of a (whole) page.
    pub(crate) fn swip_offsets(&self, g: &PageGuard<'_>) -> Result<Vec<usize>> {
        let page = g.full()?;
        let mut v = Vec::new();
        self.registry
            .swips(page[crate::page::OFF_KIND], page, &mut v);
        let ps = self.cfg.page_size;
        v.retain(|&o| o % 8 == 0 && o + 8 <= ps && o >= crate::page::DS_HEADER);
        Ok(v)
    }

    /// Loads lines `a..=b` of full frame `fid` from its PM frame.
    pub(crate) fn load_lines(&self, fid: Fid, a: usize, b: usize) -> Result<()> {
        let dram = self.dram();
        let c = dram.common(fid);
        // SAFETY: the caller's guard holds the frame exclusive.
        let st: &mut FullState = unsafe { dram.full_frame(fid).st() };
        let Some(f) = c.pm_frame() else {
            return Err(BufferError::corrupt(
                format!("page {}", c.pid.load(Ordering::Relaxed)),
                "lines missing from a frame without a PM copy",
            ));
        };
        let src = self.pm.data(f);
        let mut n = 0;
        let (mut lo, mut hi) = (usize::MAX, 0);
        for l in a..=b {
            if !st.resident.get(l) {
                (lo, hi) = (lo.min(l), l);
                // SAFETY: line l lies inside both the PM frame and the DRAM frame.
                unsafe {
                    std::ptr::copy_nonoverlapping(
                        src.add(l * LINE),
                        dram.buf(fid).add(l * LINE),
                        LINE,
                    )
                };
                st.resident.set(l);
                n += 1;
            }
        }
        if st.resident.count() == self.cfg.lines() {
            st.all_resident = true;
        }
        if n > 0 {
            self.pm.model_read(f, lo, hi);
        }
        dram.counters.line_loads.fetch_add(n, Ordering::Relaxed);
        self.pm.counters.lines_read.fetch_add(n, Ordering::Relaxed);
        Ok(())
    }

    /// Adds lines `a..=b` to mini frame `fid` in line order; false when they do
    /// not fit its 16 slots (promote).
    pub(crate) fn mini_extend(&self, fid: Fid, a: usize, b: usize) -> bool {
        let dram = self.dram();
        let c = dram.common(fid);
        // SAFETY: the caller's guard holds the frame exclusive.
        let st = unsafe { dram.mini_frame(fid).st() };
        let have = &st.slots[..st.count as usize];
        if mini_pos(have, a, b).is_some() {
            return true;
        }
        // The sorted union of the held lines and a..=b, on the stack: for each
        // slot of it, its line and the slot it comes from (`FROM_PM`: a new line).
        const FROM_PM: u8 = u8::MAX;
        let mut merged = [(0u16, FROM_PM); MINI_SLOTS];
        let (mut m, mut i, mut l) = (0, 0, a);
        while i < have.len() || l <= b {
            let next = match have.get(i) {
                // A held line comes first (the range's line, when equal, is it).
                Some(&h) if l > b || h as usize <= l => {
                    if h as usize == l {
                        l += 1;
                    }
                    let from = i as u8;
                    i += 1;
                    (h, from)
                }
                _ => {
                    let line = l as u16;
                    l += 1;
                    (line, FROM_PM)
                }
            };
            if m == MINI_SLOTS {
                return false;
            }
            merged[m] = next;
            m += 1;
        }
        let merged = &merged[..m];
        let Some(f) = c.pm_frame() else {
            return false;
        };
        let buf = dram.buf(fid);
        let mut dirty = 0u16;
        // Existing lines only move right: place them from the end.
        for (newp, &(_, oldp)) in merged.iter().enumerate().rev() {
            if oldp == FROM_PM {
                continue;
            }
            let oldp = oldp as usize;
            if oldp != newp {
                // SAFETY: both slots are inside the 16-line buffer.
                unsafe { std::ptr::copy(buf.add(oldp * LINE), buf.add(newp * LINE), LINE) };
            }
            if st.dirty >> oldp & 1 != 0 {
                dirty |= 1 << newp;
            }
        }
        let src = self.pm.data(f);
        let (mut n, mut lo, mut hi) = (0, usize::MAX, 0);
        for (newp, &(l, oldp)) in merged.iter().enumerate() {
            if oldp == FROM_PM {
                // SAFETY: line l of the PM frame into slot newp.
                unsafe {
                    std::ptr::copy_nonoverlapping(
                        src.add(l as usize * LINE),
                        buf.add(newp * LINE),
                        LINE,
                    )
                };
                n += 1;
                (lo, hi) = (lo.min(l as usize), hi.max(l as usize));
            }
        }
        // The new lines all lie in a..=b (one contiguous read).
        if n > 0 {
            self.pm.model_read(f, lo, hi);
        }
        for (slot, &(l, _)) in st.slots.iter_mut().zip(merged) {
            *slot = l;
        }
        st.count = m as u8;
        st.dirty = dirty;
        dram.counters.line_loads.fetch_add(n, Ordering::Relaxed);
        self.pm.counters.lines_read.fetch_add(n, Ordering::Relaxed);
        true
    }

    /// Promotes mini frame `mini` (latched exclusive, holding `pid`) to a full
    /// frame, returned latched exclusive; the mini frame is freed. A swizzled
    /// mini frame's parent must be latched by the caller (leaf operations keep
    /// their parent latched).
    pub(crate) fn promote(&self, mini: Fid, pid: u64) -> Result<Fid> {
        let full = self.alloc_dram(false)?;
        let dram = self.dram();
        let (m, f) = (dram.mini_frame(mini), dram.full_frame(full));
        // SAFETY: both frames are latched exclusive by this thread.
        let (ms, fs) = unsafe { (m.st(), f.st()) };
        let (mb, fb) = (dram.buf(mini), dram.buf(full));
        for (p, &l) in ms.slots[..ms.count as usize].iter().enumerate() {
            // SAFETY: slot p of the mini buffer to line l of the full buffer.
            unsafe {
                std::ptr::copy_nonoverlapping(mb.add(p * LINE), fb.add(l as usize * LINE), LINE)
            };
            fs.resident.set(l as usize);
            if ms.dirty >> p & 1 != 0 {
                fs.dirty.set(l as usize);
            }
        }
        fs.newer = ms.newer;
        fs.all_resident = fs.resident.count() == self.cfg.lines();
        f.c.pid.store(pid, Ordering::Release);
        f.c.pm
            .store(m.c.pm.load(Ordering::Acquire), Ordering::Release);
        f.c.max_lsn
            .store(m.c.max_lsn.load(Ordering::Acquire), Ordering::Release);
        f.c.state.store(RESIDENT, Ordering::Release);
        {
            let mut s = self.table.shard(pid);
            let cur = s.get(pid);
            s.put(pid, Entry { dram: full, ..cur });
        }
        if m.c.swizzled.load(Ordering::Acquire) {
            let code = m.c.parent.load(Ordering::Acquire);
            let (pf, off) = ((code >> 32) as u32, (code & 0xffff_ffff) as usize);
            // SAFETY: the parent is latched by the caller; off is the 8-aligned
            // swip this frame was swizzled through.
            let w = unsafe { &*(dram.buf(pf).add(off) as *const std::sync::atomic::AtomicU64) };
            if w.compare_exchange(
                SWIZZLED | mini as u64,
                SWIZZLED | full as u64,
                Ordering::AcqRel,
                Ordering::Relaxed,
            )
            .is_ok()
            {
                f.c.parent.store(code, Ordering::Release);
                f.c.swizzled.store(true, Ordering::Release);
            }
            // Otherwise the swip was unswizzled meanwhile: the page is simply
            // not swizzled any more.
        }
        dram.counters.promotions.fetch_add(1, Ordering::Relaxed);
        crate::latch::note_exclusive(mini, false);
        crate::latch::note_exclusive(full, true);
        dram.release(mini);
        Ok(full)
    }

    /// One line of text per tier: what it is and how durable.
    pub fn describe(&self) -> Vec<String> {
        let mut v = vec![self.cfg.describe()];
        v.push(format!(
            "PM: {} frames in pool object {:?} ({})",
            self.pm.frames(),
            self.name,
            self.pool.durability().describe()
        ));
        v.push(match &self.ssd {
            Some(s) => format!("SSD: {}", s.backend().describe()),
            None => "SSD: none".into(),
        });
        v.push(format!(
            "WAL: {} (padded), two logs of two {}-byte segments",
            crate::wal::WAL_KIND.name(),
            self.wal.segment_bytes()
        ));
        v
    }
}

fn zero_overlay(page_size: usize) -> Box<Overlay> {
    Box::new(Overlay {
        buf: ferrite_pm::AlignedBuf::zeroed(page_size),
        have: LineMask::all(page_size / LINE),
    })
}
