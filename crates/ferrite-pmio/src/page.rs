//! Failure-atomic propagation of DRAM pages to PM (thesis §3.2).
//!
//! A [`PageStore`] keeps logical pages in physical *slots*. Each slot starts with
//! a header line holding `pid + 1` and the page version number `pvn`, pid first.
//!
//! * **Copy-on-write** writes the whole page with non-temporal stores into a free
//!   slot (barrier 1), then stores the pid, then (x86 keeps stores to one line in
//!   order, so no fence is needed between them) `pvn + 1` and persists the line
//!   (barrier 2). The old slot is never invalidated: recovery keeps, per pid, the
//!   slot with the highest pvn, so every intermediate state names either the old
//!   or the new copy.
//! * **Micro log** (uLog) copies only the dirty lines: invalidate the log
//!   (barrier 1), write line numbers and contents (barrier 2), validate (barrier 3),
//!   apply in place (barrier 4). Recovery re-applies a valid log whose target slot
//!   still holds the logged `(pid, pvn)` and is that page's newest copy.
//! * A [`CostModel`], calibrated by [`calibrate`] on this machine, picks the
//!   cheaper method per page ([`Method::Auto`]).
//!
//! One writer (`&mut self`); a buffer manager with several flushing threads gives
//! each its own store or serialises flushes per store.

use std::collections::HashMap;

use ferrite_pm::{Heap, ObjectId, Pool};

use crate::error::{corrupt, PmioError, Result};
use crate::region::{open_object, rd, round_up, wr};

/// Type name of page stores in the root directory.
pub const PAGE_STORE_TYPE: &str = "ferrite.pmio.pages";
/// On-PM format version of the page store region.
pub const PAGE_FORMAT_VERSION: u32 = 1;
const PAGE_MAGIC: u64 = 0x4645_5250_4147_4501;
/// Largest page: 256 cache lines (the dirty mask's width).
pub const MAX_PAGE: usize = 16 << 10;

/// Which cache lines of a page changed since its last propagation.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct DirtyMask(pub [u64; 4]);

impl DirtyMask {
    pub fn all(lines: usize) -> DirtyMask {
        let mut m = DirtyMask::default();
        for l in 0..lines.min(256) {
            m.set(l);
        }
        m
    }
    pub fn set(&mut self, line: usize) {
        self.0[line / 64] |= 1 << (line % 64);
    }
    pub fn get(&self, line: usize) -> bool {
        self.0[line / 64] >> (line % 64) & 1 != 0
    }
    /// Marks the lines a write of `len` bytes at `off` touches.
    pub fn mark(&mut self, off: usize, len: usize) {
        if len == 0 {
            return;
        }
        for l in off / 64..=(off + len - 1) / 64 {
            self.set(l);
        }
    }
    pub fn count(&self) -> usize {
        self.0.iter().map(|w| w.count_ones() as usize).sum()
    }
    pub fn lines(&self) -> impl Iterator<Item = usize> + '_ {
        (0..256).filter(|&l| self.get(l))
    }
}

/// How a page is written to PM.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Method {
    Cow,
    MicroLog,
    /// Whatever the store's [`CostModel`] says is cheaper.
    Auto,
}

/// Predicted cost of the two methods: `cow_ns` per page, `ulog_base_ns +
/// ulog_line_ns * dirty_lines` for the micro log.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct CostModel {
    pub cow_ns: f64,
    pub ulog_base_ns: f64,
    pub ulog_line_ns: f64,
}

impl Default for CostModel {
    /// The thesis's single-threaded crossover (~28 dirty lines of 256) until
    /// [`calibrate`] measures this machine.
    fn default() -> Self {
        CostModel {
            cow_ns: 1000.0,
            ulog_base_ns: 440.0,
            ulog_line_ns: 20.0,
        }
    }
}

impl CostModel {
    /// The method this model prefers for a page with `dirty` dirty lines.
    pub fn choose(&self, dirty: usize) -> Method {
        if self.ulog_base_ns + self.ulog_line_ns * (dirty as f64) < self.cow_ns {
            Method::MicroLog
        } else {
            Method::Cow
        }
    }

    /// Dirty-line count at and above which CoW wins.
    pub fn crossover(&self) -> f64 {
        ((self.cow_ns - self.ulog_base_ns) / self.ulog_line_ns.max(1e-9)).max(0.0)
    }
}

/// Geometry of a new page store.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PageStoreConfig {
    /// Bytes per page: a multiple of 64 up to [`MAX_PAGE`].
    pub page_size: usize,
    /// Physical slots; at most `slots - 1` pages can be stored (CoW needs a free one).
    pub slots: usize,
}

#[repr(C)]
#[derive(Debug, Clone, Copy)]
struct StoreHeader {
    magic: u64,
    version: u32,
    page_size: u32,
    slots: u64,
    _pad: [u64; 5],
}
const _: () = assert!(std::mem::size_of::<StoreHeader>() == 64);
impl crate::region::RegionHeader for StoreHeader {}

/// Header line of the micro log.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
struct ULogHeader {
    valid: u64,
    pid1: u64,
    pvn: u64,
    slot: u64,
    lines: u64,
    _pad: [u64; 3],
}
const _: () = assert!(std::mem::size_of::<ULogHeader>() == 64);

/// Pages of one size in PM, propagated failure-atomically.
pub struct PageStore {
    pool: Pool,
    _heap: Heap,
    _id: ObjectId,
    name: String,
    page_size: usize,
    slots: usize,
    ulog: *mut u8,
    slot_base: *mut u8,
    map: HashMap<u64, (usize, u64)>,
    free: Vec<usize>,
    model: CostModel,
    scratch_idx: Vec<u16>,
}

// SAFETY: the pointers point into the mapping `pool` keeps alive; all writes go
// through `&mut self`.
unsafe impl Send for PageStore {}

fn ulog_bytes(page_lines: usize) -> usize {
    64 + round_up(2 * page_lines, 64) + page_lines * 64
}

impl PageStore {
    /// Opens the store `name`, creating it with `cfg` if absent; runs recovery.
    pub fn open_or_create(pool: &Pool, name: &str, cfg: PageStoreConfig) -> Result<PageStore> {
        Self::open_inner(pool, name, Some(cfg))
    }

    /// Opens an existing page store with the geometry it was created with
    /// (for tools such as `ferrite check`).
    pub fn open(pool: &Pool, name: &str) -> Result<PageStore> {
        pool.object(name, PAGE_STORE_TYPE)?;
        Self::open_inner(pool, name, None)
    }

    fn open_inner(pool: &Pool, name: &str, cfg: Option<PageStoreConfig>) -> Result<PageStore> {
        if let Some(cfg) = &cfg {
            Self::check_config(cfg)?;
        }
        let (id, heap) = open_object(pool, name, PAGE_STORE_TYPE, None)?;
        let mut region = pool.root(id, 0);
        if region == 0 {
            // A creation that crashed before publishing its region left an
            // empty object: for `open` that is no page store at all.
            let cfg = cfg.ok_or_else(|| ferrite_pm::PmError::NoSuchObject(name.into()))?;
            region = Self::create_region(pool, id, &heap, &cfg)?;
        }
        Self::finish_open(pool, name, cfg, id, heap, region)
    }

    fn check_config(cfg: &PageStoreConfig) -> Result<()> {
        if cfg.page_size == 0 || !cfg.page_size.is_multiple_of(64) || cfg.page_size > MAX_PAGE {
            return Err(PmioError::Invalid(format!(
                "page size {} is not a multiple of 64 up to {MAX_PAGE}",
                cfg.page_size
            )));
        }
        if cfg.slots < 2 || cfg.slots > u32::MAX as usize {
            return Err(PmioError::Invalid(format!(
                "{} slots: need at least 2",
                cfg.slots
            )));
        }
        Ok(())
    }

    fn create_region(pool: &Pool, id: ObjectId, heap: &Heap, cfg: &PageStoreConfig) -> Result<u64> {
        {
            let lines = cfg.page_size / 64;
            let total = cfg
                .slots
                .checked_mul(64 + cfg.page_size)
                .and_then(|t| t.checked_add(64 + ulog_bytes(lines)))
                .ok_or_else(|| PmioError::Invalid(format!("{} slots overflow", cfg.slots)))?;
            let off = heap.alloc_zeroed(total)?;
            let h = StoreHeader {
                magic: PAGE_MAGIC,
                version: PAGE_FORMAT_VERSION,
                page_size: cfg.page_size as u32,
                slots: cfg.slots as u64,
                _pad: [0; 5],
            };
            crate::region::write_header(pool, off, h)?;
            pool.set_root(id, 0, off)?;
            Ok(off)
        }
    }

    fn finish_open(
        pool: &Pool,
        name: &str,
        cfg: Option<PageStoreConfig>,
        id: ObjectId,
        heap: Heap,
        region: u64,
    ) -> Result<PageStore> {
        let (h, size): (StoreHeader, usize) =
            crate::region::read_header(pool, &heap, region, name)?;
        if h.magic != PAGE_MAGIC || h.version != PAGE_FORMAT_VERSION {
            return Err(corrupt(name, "bad page store magic or version"));
        }
        let page_size = h.page_size as usize;
        let slots = h.slots as usize;
        if page_size == 0 || !page_size.is_multiple_of(64) || page_size > MAX_PAGE || slots < 2 {
            return Err(corrupt(name, "bad page store geometry"));
        }
        let lines = page_size / 64;
        let total = 64u64
            .checked_add(ulog_bytes(lines) as u64)
            .and_then(|t| t.checked_add((slots as u64).checked_mul(64 + page_size as u64)?))
            .ok_or_else(|| corrupt(name, "geometry overflows"))?;
        if total > size as u64 {
            return Err(corrupt(name, "region smaller than its geometry"));
        }
        if let Some(cfg) = cfg.filter(|c| c.page_size != page_size) {
            return Err(PmioError::Mismatch {
                object: name.into(),
                found: format!("{page_size}-byte pages"),
                expected: format!("{}-byte pages", cfg.page_size),
            });
        }
        let base = pool.at(region, total as usize);
        let mut s = PageStore {
            pool: pool.clone(),
            _heap: heap,
            _id: id,
            name: name.into(),
            page_size,
            slots,
            // SAFETY: inside the checked region.
            ulog: unsafe { base.add(64) },
            // SAFETY: as above.
            slot_base: unsafe { base.add(64 + ulog_bytes(lines)) },
            map: HashMap::new(),
            free: Vec::new(),
            model: CostModel::default(),
            scratch_idx: Vec::with_capacity(lines),
        };
        s.recover()?;
        Ok(s)
    }

    fn slot_hdr(&self, slot: usize) -> *mut u8 {
        debug_assert!(slot < self.slots);
        // SAFETY: slot < slots keeps the line inside the region.
        unsafe { self.slot_base.add(slot * (64 + self.page_size)) }
    }

    fn slot_data(&self, slot: usize) -> *mut u8 {
        // SAFETY: the page follows its header line inside the region.
        unsafe { self.slot_hdr(slot).add(64) }
    }

    fn log_header(&self) -> ULogHeader {
        // SAFETY: the log header line is inside the region; plain data.
        unsafe { std::ptr::read(self.ulog as *const ULogHeader) }
    }

    /// Marks the micro log invalid, durably (it has been applied).
    fn retire_log(&self) -> Result<()> {
        // SAFETY: the valid word of the log header.
        unsafe { wr(self.ulog, 0) };
        self.pool.persist(self.ulog, 8)?;
        Ok(())
    }

    fn recover(&mut self) -> Result<()> {
        self.map.clear();
        for slot in 0..self.slots {
            let h = self.slot_hdr(slot);
            // SAFETY: aligned header words of an in-bounds slot.
            let (pid1, pvn) = unsafe { (rd(h), rd(h.add(8))) };
            if pid1 == 0 {
                continue;
            }
            let e = self.map.entry(pid1 - 1).or_insert((slot, pvn));
            if pvn > e.1 {
                *e = (slot, pvn);
            }
        }
        let live: std::collections::HashSet<usize> = self.map.values().map(|v| v.0).collect();
        self.free = (0..self.slots)
            .rev()
            .filter(|s| !live.contains(s))
            .collect();
        let lh = self.log_header();
        if lh.valid != 0 {
            let lines = self.page_size / 64;
            let target = lh.pid1.checked_sub(1).and_then(|p| self.map.get(&p));
            let slot = lh.slot as usize;
            let applies = target == Some(&(slot, lh.pvn)) && lh.lines as usize <= lines;
            if applies {
                for i in 0..lh.lines as usize {
                    // SAFETY: i < lines: index array and data lines are in the log.
                    let line = unsafe {
                        std::ptr::read_volatile((self.ulog.add(64) as *const u16).add(i))
                    } as usize;
                    if line >= lines {
                        return Err(corrupt(&self.name, "micro log names a line past the page"));
                    }
                    // SAFETY: source is log line i, destination line `line` of the slot.
                    unsafe {
                        let src = self.ulog.add(64 + round_up(2 * lines, 64) + i * 64);
                        let dst = self.slot_data(slot).add(line * 64);
                        std::ptr::copy_nonoverlapping(src, dst, 64);
                        self.pool.flush(dst, 64);
                    }
                }
                self.pool.fence()?;
            }
            self.retire_log()?;
        }
        Ok(())
    }

    /// Ids of the pages the store holds, ascending.
    pub fn page_ids(&self) -> Vec<u64> {
        let mut v: Vec<u64> = self.map.keys().copied().collect();
        v.sort_unstable();
        v
    }

    pub fn page_size(&self) -> usize {
        self.page_size
    }

    /// Pages the store can hold.
    pub fn capacity(&self) -> usize {
        self.slots - 1
    }

    pub fn len(&self) -> usize {
        self.map.len()
    }

    pub fn is_empty(&self) -> bool {
        self.map.is_empty()
    }

    /// Stored page ids, unordered.
    pub fn pids(&self) -> Vec<u64> {
        self.map.keys().copied().collect()
    }

    pub fn cost_model(&self) -> CostModel {
        self.model
    }

    pub fn set_cost_model(&mut self, m: CostModel) {
        self.model = m;
    }

    /// Current version number of `pid`.
    pub fn pvn(&self, pid: u64) -> Option<u64> {
        self.map.get(&pid).map(|e| e.1)
    }

    /// Copies page `pid` into `out`; false if the page does not exist.
    pub fn read(&self, pid: u64, out: &mut [u8]) -> Result<bool> {
        if out.len() != self.page_size {
            return Err(PmioError::Invalid(format!(
                "buffer of {} bytes for {}-byte pages",
                out.len(),
                self.page_size
            )));
        }
        let Some(&(slot, _)) = self.map.get(&pid) else {
            return Ok(false);
        };
        // SAFETY: the slot's page is page_size bytes inside the region.
        unsafe { std::ptr::copy_nonoverlapping(self.slot_data(slot), out.as_mut_ptr(), out.len()) };
        Ok(true)
    }

    /// Propagates `page` (the whole DRAM copy) whose lines in `dirty` changed
    /// since the last propagation; returns the method used. A page's first write
    /// is always CoW.
    pub fn write(&mut self, pid: u64, page: &[u8], dirty: &DirtyMask, m: Method) -> Result<Method> {
        if page.len() != self.page_size {
            return Err(PmioError::Invalid(format!(
                "page of {} bytes for a {}-byte store",
                page.len(),
                self.page_size
            )));
        }
        if pid >= u64::MAX - 1 {
            return Err(PmioError::Invalid("page id too large".into()));
        }
        let lines = self.page_size / 64;
        let n = (0..lines).filter(|&l| dirty.get(l)).count();
        if n == 0 && self.map.contains_key(&pid) {
            // Nothing changed since the last propagation.
            return Ok(m);
        }
        let m = match m {
            _ if !self.map.contains_key(&pid) => Method::Cow,
            Method::Auto => self.model.choose(n),
            m => m,
        };
        match m {
            Method::MicroLog => self.write_ulog(pid, page, dirty)?,
            _ => self.write_cow(pid, page)?,
        }
        Ok(m)
    }

    /// Deletes page `pid` durably; false if it did not exist. Stale copies are
    /// unnamed first (barrier), then the newest (barrier), so a crash never
    /// brings an older version back.
    pub fn remove(&mut self, pid: u64) -> Result<bool> {
        let Some((live, _)) = self.map.get(&pid).copied() else {
            return Ok(false);
        };
        // A micro log stays valid after it is applied (replay is idempotent).
        // If it names this page, retire it first: a later page with the same
        // id could get the same slot and version, and recovery would replay the
        // old lines over it.
        let lh = self.log_header();
        if lh.valid != 0 && lh.pid1 == pid + 1 {
            self.retire_log()?;
        }
        let mut stale = false;
        for slot in 0..self.slots {
            let h = self.slot_hdr(slot);
            // SAFETY: the header word of an in-bounds slot.
            if slot != live && unsafe { rd(h) } == pid + 1 {
                // SAFETY: as above.
                unsafe { wr(h, 0) };
                self.pool.flush(h, 8);
                stale = true;
            }
        }
        if stale {
            self.pool.fence()?;
        }
        let h = self.slot_hdr(live);
        // SAFETY: as above.
        unsafe { wr(h, 0) };
        self.pool.persist(h, 8)?;
        self.map.remove(&pid);
        self.free.push(live);
        Ok(true)
    }

    fn write_cow(&mut self, pid: u64, page: &[u8]) -> Result<()> {
        let old = self.map.get(&pid).copied();
        if old.is_none() && self.map.len() >= self.capacity() {
            return Err(PmioError::Invalid(format!(
                "page store {:?} is full ({} pages)",
                self.name,
                self.capacity()
            )));
        }
        let slot = self
            .free
            .pop()
            .ok_or_else(|| corrupt(&self.name, "no free slot"))?;
        self.pool.nt_copy(self.slot_data(slot), page);
        if !ferrite_pm::tripwire::armed(ferrite_pm::tripwire::Tripwire::PageCowNoDataFence) {
            self.pool.fence()?;
        }
        let pvn = old.map_or(1, |o| o.1 + 1);
        let h = self.slot_hdr(slot);
        // SAFETY: aligned header words of the slot. The pid store precedes the
        // pvn store (x86-TSO keeps them in order within the line).
        unsafe {
            wr(h, pid + 1);
            std::sync::atomic::compiler_fence(std::sync::atomic::Ordering::Release);
            wr(h.add(8), pvn);
        }
        self.pool.persist(h, 16)?;
        self.map.insert(pid, (slot, pvn));
        if let Some((o, _)) = old {
            self.free.push(o);
        }
        Ok(())
    }

    fn write_ulog(&mut self, pid: u64, page: &[u8], dirty: &DirtyMask) -> Result<()> {
        let (slot, pvn) = self.map[&pid];
        let lines = self.page_size / 64;
        let log = self.ulog;
        // 1. invalidate
        // SAFETY: the log's valid word.
        unsafe { wr(log, 0) };
        self.pool.persist(log, 8)?;
        // 2. write line numbers and contents
        self.scratch_idx.clear();
        self.scratch_idx
            .extend((0..lines).filter(|&l| dirty.get(l)).map(|l| l as u16));
        let n = self.scratch_idx.len();
        let data = round_up(2 * lines, 64);
        // SAFETY: header words, n <= lines indices and n data lines are inside
        // the log area.
        unsafe {
            wr(log.add(8), pid + 1);
            wr(log.add(16), pvn);
            wr(log.add(24), slot as u64);
            wr(log.add(32), n as u64);
            std::ptr::copy_nonoverlapping(
                self.scratch_idx.as_ptr() as *const u8,
                log.add(64),
                2 * n,
            );
            for (i, &l) in self.scratch_idx.iter().enumerate() {
                std::ptr::copy_nonoverlapping(
                    page.as_ptr().add(l as usize * 64),
                    log.add(64 + data + i * 64),
                    64,
                );
            }
        }
        self.pool.flush(log, 64);
        // SAFETY: as above.
        unsafe {
            self.pool.flush(log.add(64), 2 * n.max(1));
            self.pool.flush(log.add(64 + data), 64 * n);
        }
        self.pool.fence()?;
        // 3. validate
        // SAFETY: the valid word.
        unsafe { wr(log, 1) };
        self.pool.persist(log, 8)?;
        // 4. apply in place
        let dst = self.slot_data(slot);
        for &l in &self.scratch_idx {
            let l = l as usize * 64;
            // SAFETY: line l of the page and of the slot.
            unsafe {
                std::ptr::copy_nonoverlapping(page.as_ptr().add(l), dst.add(l), 64);
                self.pool.flush(dst.add(l), 64);
            }
        }
        self.pool.fence()?;
        Ok(())
    }
}

/// Measures CoW and micro-log propagation of `page_size`-byte pages on `pool`
/// (a scratch store named `name`, left in the pool for reuse) and fits the cost
/// model: CoW is flat, the micro log linear in dirty lines.
pub fn calibrate(pool: &Pool, name: &str, page_size: usize, rounds: usize) -> Result<CostModel> {
    let lines = page_size / 64;
    let pages = 64usize;
    let mut s = PageStore::open_or_create(
        pool,
        name,
        PageStoreConfig {
            page_size,
            slots: pages + 1,
        },
    )?;
    let page = vec![0x5au8; page_size];
    let all = DirtyMask::all(lines);
    for pid in 0..pages as u64 {
        s.write(pid, &page, &all, Method::Cow)?;
    }
    let time = |m: Method, d: usize, s: &mut PageStore| -> Result<f64> {
        let mut mask = DirtyMask::default();
        for l in 0..d {
            mask.set(l * lines / d.max(1));
        }
        let t = ferrite_pm::clock::CpuTimer::start();
        for i in 0..rounds {
            s.write((i % pages) as u64, &page, &mask, m)?;
        }
        Ok(t.secs() * 1e9 / rounds as f64)
    };
    let cow = time(Method::Cow, lines, &mut s)?;
    let (d1, d2) = (1usize, (lines / 2).max(2));
    let u1 = time(Method::MicroLog, d1, &mut s)?;
    let u2 = time(Method::MicroLog, d2, &mut s)?;
    let slope = ((u2 - u1) / (d2 - d1) as f64).max(0.1);
    Ok(CostModel {
        cow_ns: cow,
        ulog_base_ns: (u1 - slope * d1 as f64).max(0.0),
        ulog_line_ns: slope,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use ferrite_pm::PoolOptions;
    use proptest::prelude::*;

    fn pool() -> Pool {
        Pool::create_volatile(4 << 20, &PoolOptions::default()).unwrap()
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(24))]
        /// Model test against a HashMap of pages over CoW / uLog / auto writes and
        /// reopens.
        #[test]
        fn store_matches_a_map(ops in proptest::collection::vec((0u64..6, 0u8..5, any::<u64>()), 1..80)) {
            let pool = pool();
            let cfg = PageStoreConfig { page_size: 1024, slots: 7 };
            let mut s = PageStore::open_or_create(&pool, "p", cfg).unwrap();
            let mut model: HashMap<u64, Vec<u8>> = HashMap::new();
            for (i, (pid, m, bits)) in ops.into_iter().enumerate() {
                if m == 3 {
                    drop(s);
                    s = PageStore::open_or_create(&pool, "p", cfg).unwrap();
                    continue;
                }
                if m == 4 {
                    prop_assert_eq!(s.remove(pid).unwrap(), model.remove(&pid).is_some());
                    continue;
                }
                let mut page = model.get(&pid).cloned().unwrap_or(vec![0; 1024]);
                let mut mask = DirtyMask::default();
                for l in 0..16 {
                    if bits >> (l * 4) & 3 == 0 {
                        page[l * 64..(l + 1) * 64].fill(i as u8);
                        mask.set(l);
                    }
                }
                let method = [Method::Cow, Method::MicroLog, Method::Auto][m as usize];
                s.write(pid, &page, &mask, method).unwrap();
                model.insert(pid, page);
            }
            prop_assert_eq!(s.len(), model.len());
            let mut buf = vec![0; 1024];
            for (pid, want) in &model {
                prop_assert!(s.read(*pid, &mut buf).unwrap());
                prop_assert_eq!(&buf, want);
            }
        }
    }

    #[test]
    fn cost_model_and_errors() {
        let m = CostModel {
            cow_ns: 1000.0,
            ulog_base_ns: 200.0,
            ulog_line_ns: 20.0,
        };
        assert_eq!(m.crossover(), 40.0);
        assert_eq!(m.choose(10), Method::MicroLog);
        assert_eq!(m.choose(50), Method::Cow);
        let pool = pool();
        let cfg = PageStoreConfig {
            page_size: 256,
            slots: 3,
        };
        let mut s = PageStore::open_or_create(&pool, "e", cfg).unwrap();
        let page = vec![1u8; 256];
        let all = DirtyMask::all(4);
        s.write(1, &page, &all, Method::Cow).unwrap();
        s.write(2, &page, &all, Method::Cow).unwrap();
        assert!(s.write(3, &page, &all, Method::Cow).is_err(), "full");
        assert!(
            s.write(1, &page[..64], &all, Method::Cow).is_err(),
            "short page"
        );
        assert!(PageStore::open_or_create(
            &pool,
            "e",
            PageStoreConfig {
                page_size: 512,
                slots: 3
            }
        )
        .is_err());
        assert!(PageStore::open_or_create(
            &pool,
            "x",
            PageStoreConfig {
                page_size: 100,
                slots: 3
            }
        )
        .is_err());
        let m = calibrate(&pool, "cal", 1024, 50).unwrap();
        assert!(m.cow_ns > 0.0 && m.ulog_line_ns > 0.0);
    }
}
