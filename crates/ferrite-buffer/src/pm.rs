//! The PM tier: one block of the pool holds a region header, `frames` frame
//! headers of one cache line each and the frames' data (docs/FORMAT.md).
//!
//! A frame header names the page the frame holds (`pid + 1`, 0 when free), the
//! LSN of the last write-back, a version (a store-wide counter: which
//! admission this is) and flags (bit 0: the frame is newer than the page's
//! SSD copy). Admission writes the whole page, fences, and only then stores
//! the header with the page id last (one line: x86-TSO keeps the order), so a
//! frame names a page only once its data is durable. Write-back of dirty lines
//! goes in place; a torn write-back is repaired by redo (the log holds every
//! changed line). Restart rebuilds the page table from the headers alone.

use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::sync::Mutex;

use ferrite_pm::{store_u64, Heap, ObjectId, Pool};

use crate::config::LINE;
use crate::error::{BufferError, Result};
use crate::latch::Latch;
use crate::swip::MAX_PID;

/// Type name of a buffer manager's pool object.
pub const BUFFER_TYPE: &str = "ferrite.buffer";
/// On-PM format version of the frame region.
pub const REGION_VERSION: u32 = 1;
const REGION_MAGIC: u64 = 0x4645_5252_4255_4601;
/// Frame flag: the PM copy is newer than the SSD copy.
pub const FLAG_NEWER: u64 = 1;
/// No page.
pub const NO_PAGE: u64 = u64::MAX;

#[repr(C)]
#[derive(Debug, Clone, Copy)]
struct RegionHeader {
    magic: u64,
    version: u32,
    page_size: u32,
    frames: u64,
    store_id: u64,
    /// Offset of frame 0's data from the region start.
    data_off: u64,
    _reserved: [u64; 3],
}
const _: () = assert!(std::mem::size_of::<RegionHeader>() == 64);

/// The header of one PM frame (one cache line).
#[repr(C)]
pub(crate) struct FrameHeader {
    pub pid1: AtomicU64,
    pub lsn: AtomicU64,
    pub version: AtomicU64,
    pub flags: AtomicU64,
    _pad: [u64; 4],
}
const _: () = assert!(std::mem::size_of::<FrameHeader>() == 64);
const _: () = assert!(std::mem::offset_of!(FrameHeader, pid1) == 0);
const _: () = assert!(std::mem::offset_of!(FrameHeader, flags) == 24);

/// DRAM state of a PM frame.
pub(crate) struct PmDesc {
    pub latch: Latch,
    /// The page held, [`NO_PAGE`] when free.
    pub pid: AtomicU64,
    pub refbit: AtomicBool,
    /// The frame is newer than the page's SSD copy.
    pub newer: AtomicBool,
}

/// A valid frame found by the restart scan.
#[derive(Debug, Clone, Copy)]
pub(crate) struct FoundFrame {
    pub pid: u64,
    pub frame: u32,
}

/// Counters of the PM tier.
#[derive(Debug, Default)]
pub(crate) struct PmCounters {
    pub lines_written: AtomicU64,
    pub lines_read: AtomicU64,
    pub admissions: AtomicU64,
    pub evictions: AtomicU64,
}

pub(crate) struct PmTier {
    pool: Pool,
    _heap: Heap,
    pub id: ObjectId,
    region: u64,
    page_size: usize,
    frames: usize,
    hdrs: *mut FrameHeader,
    data: *mut u8,
    pub store_id: u64,
    pub descs: Box<[PmDesc]>,
    free: Mutex<Vec<u32>>,
    pub hand: AtomicUsize,
    version: AtomicU64,
    line_writes: Option<Box<[AtomicU32]>>,
    pub counters: PmCounters,
    read_model: Option<ReadModel>,
}

/// A model of PM's read latency for machines whose "PM" is DRAM (a file on
/// tmpfs): every read of frame data passes through a direct-mapped model of
/// the CPU cache ([`MODEL_CACHE_LINES`] lines); a line it does not hold costs
/// a busy wait, `ns` for the first line of a read and `ns / 8` for each
/// further line of the same read (sequential lines stream). Off unless
/// [`crate::BufferConfig::pm_read_ns`] is set; benchmarks label its results.
struct ReadModel {
    ns: u64,
    tags: Box<[AtomicU64]>,
    /// Lines charged, and nanoseconds waited.
    misses: AtomicU64,
    waited_ns: AtomicU64,
}

/// Lines of the modelled CPU cache (16 MiB: an L3 of the thesis's era).
pub const MODEL_CACHE_LINES: usize = 1 << 18;

impl ReadModel {
    fn new(ns: u64) -> ReadModel {
        ReadModel {
            ns,
            tags: (0..MODEL_CACHE_LINES).map(|_| AtomicU64::new(0)).collect(),
            misses: AtomicU64::new(0),
            waited_ns: AtomicU64::new(0),
        }
    }

    /// Charges a read of global lines `first..=last`.
    fn charge(&self, first: u64, last: u64) {
        let mut wait = 0u64;
        let mut n = 0u64;
        for g in first..=last {
            let slot = (g.wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 40) as usize % MODEL_CACHE_LINES;
            let t = &self.tags[slot];
            if t.load(Ordering::Relaxed) != g + 1 {
                t.store(g + 1, Ordering::Relaxed);
                wait += if n == 0 { self.ns } else { self.ns / 8 };
                n += 1;
            }
        }
        if n > 0 {
            self.misses.fetch_add(n, Ordering::Relaxed);
            self.waited_ns.fetch_add(wait, Ordering::Relaxed);
            let t0 = std::time::Instant::now();
            while (t0.elapsed().as_nanos() as u64) < wait {
                std::hint::spin_loop();
            }
        }
    }

    /// A write puts the lines in the modelled cache (no wait).
    fn touch(&self, first: u64, last: u64) {
        for g in first..=last {
            let slot = (g.wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 40) as usize % MODEL_CACHE_LINES;
            self.tags[slot].store(g + 1, Ordering::Relaxed);
        }
    }
}

// SAFETY: the raw pointers point into the pool mapping, which `pool` keeps
// alive; frame data is accessed under the frame's (or its page's) latch, and
// headers through atomics.
unsafe impl Send for PmTier {}
// SAFETY: see above.
unsafe impl Sync for PmTier {}

fn new_store_id() -> u64 {
    let t = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(0);
    let mut z = t ^ ((std::process::id() as u64) << 32) ^ 0x9e37_79b9_7f4a_7c15;
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    (z ^ (z >> 31)) | 1
}

impl PmTier {
    /// Opens the buffer object `name`, creating its frame region with
    /// `frames` frames when absent. An existing region keeps its geometry;
    /// its page size must be `page_size`.
    pub fn open(
        pool: &Pool,
        name: &str,
        page_size: usize,
        frames: usize,
        track: bool,
        read_ns: u64,
    ) -> Result<PmTier> {
        let (id, _) = pool.open_or_create_object(name, BUFFER_TYPE)?;
        let (heap, _) = pool.open_heap(id, |m| {
            let r = pool.root(id, 0);
            if r != 0 {
                m.mark(r)?;
            }
            Ok(())
        })?;
        let mut region = pool.root(id, 0);
        if region == 0 {
            let data_off = (64 + frames as u64 * 64).div_ceil(4096) * 4096;
            let total = data_off + frames as u64 * page_size as u64;
            region = heap.alloc_zeroed(total as usize)?;
            let h = RegionHeader {
                magic: REGION_MAGIC,
                version: REGION_VERSION,
                page_size: page_size as u32,
                frames: frames as u64,
                store_id: new_store_id(),
                data_off,
                _reserved: [0; 3],
            };
            let p = pool.at(region, 64);
            // SAFETY: a fresh, 64-aligned block of at least 64 bytes; plain data.
            unsafe { std::ptr::write(p as *mut RegionHeader, h) };
            pool.persist(p, 64)?;
            pool.set_root(id, 0, region)?;
        }
        let size = heap.block_size(region).unwrap_or(0) as u64;
        if size < 64 || !pool.contains(region, 64) {
            return Err(BufferError::corrupt(
                name,
                format!("frame region {region:#x} is not a block"),
            ));
        }
        // SAFETY: the block has at least 64 bytes (checked); plain data.
        let h: RegionHeader = unsafe { std::ptr::read(pool.at(region, 64) as *const RegionHeader) };
        if h.magic != REGION_MAGIC {
            return Err(BufferError::corrupt(name, "frame region has a bad magic"));
        }
        if h.version != REGION_VERSION {
            return Err(BufferError::corrupt(
                name,
                format!(
                    "frame region version {} (this build reads {REGION_VERSION})",
                    h.version
                ),
            ));
        }
        if h.page_size as usize != page_size {
            return Err(BufferError::Config(format!(
                "the store was created with pages of {} bytes, not {page_size}",
                h.page_size
            )));
        }
        let n = h.frames;
        let need = n
            .checked_mul(page_size as u64)
            .and_then(|d| d.checked_add(h.data_off));
        if n > u32::MAX as u64 / 2
            || h.data_off < 64 + n * 64
            || need.is_none_or(|need| need > size)
        {
            return Err(BufferError::corrupt(
                name,
                "frame region geometry does not fit its block",
            ));
        }
        let n = n as usize;
        let descs: Box<[PmDesc]> = (0..n)
            .map(|_| PmDesc {
                latch: Latch::new(),
                pid: AtomicU64::new(NO_PAGE),
                refbit: AtomicBool::new(false),
                newer: AtomicBool::new(false),
            })
            .collect();
        Ok(PmTier {
            hdrs: pool.at(region + 64, n * 64) as *mut FrameHeader,
            data: pool.at(region + h.data_off, n * page_size),
            pool: pool.clone(),
            _heap: heap,
            id,
            region,
            page_size,
            frames: n,
            store_id: h.store_id,
            descs,
            free: Mutex::new(Vec::new()),
            hand: AtomicUsize::new(0),
            version: AtomicU64::new(1),
            line_writes: track.then(|| {
                (0..n * (page_size / LINE))
                    .map(|_| AtomicU32::new(0))
                    .collect()
            }),
            counters: PmCounters::default(),
            read_model: (read_ns > 0).then(|| ReadModel::new(read_ns)),
        })
    }

    /// Charges the modelled PM read latency (if on) for reading lines
    /// `a..=b` of frame `f`'s data.
    #[inline]
    pub fn model_read(&self, f: u32, a: usize, b: usize) {
        if let Some(m) = &self.read_model {
            let per = (self.page_size / LINE) as u64;
            m.charge(f as u64 * per + a as u64, f as u64 * per + b as u64);
        }
    }

    /// Whether the PM read latency is modelled.
    pub fn models_reads(&self) -> bool {
        self.read_model.is_some()
    }

    /// Lines charged by the read model and the nanoseconds it waited.
    pub fn model_stats(&self) -> (u64, u64) {
        self.read_model.as_ref().map_or((0, 0), |m| {
            (
                m.misses.load(Ordering::Relaxed),
                m.waited_ns.load(Ordering::Relaxed),
            )
        })
    }

    pub fn frames(&self) -> usize {
        self.frames
    }

    pub fn region(&self) -> (u64, u64) {
        let size = self._heap.block_size(self.region).unwrap_or(0) as u64;
        (self.region, size)
    }

    pub fn heap(&self) -> &Heap {
        &self._heap
    }

    pub fn hdr(&self, f: u32) -> &FrameHeader {
        debug_assert!((f as usize) < self.frames);
        // SAFETY: f is a frame of the region; headers are atomics.
        unsafe { &*self.hdrs.add(f as usize) }
    }

    /// The data of frame `f`.
    pub fn data(&self, f: u32) -> *mut u8 {
        debug_assert!((f as usize) < self.frames);
        // SAFETY: f is a frame of the region.
        unsafe { self.data.add(f as usize * self.page_size) }
    }

    /// Scans the frame headers: the valid frames, and the free ones onto the
    /// free list. Two frames naming one page are corruption.
    pub fn scan(&self) -> Result<Vec<FoundFrame>> {
        let mut found = Vec::new();
        let mut free = Vec::new();
        let mut maxv = 0;
        let mut seen = std::collections::HashMap::new();
        for f in 0..self.frames as u32 {
            let h = self.hdr(f);
            let pid1 = h.pid1.load(Ordering::Acquire);
            maxv = maxv.max(h.version.load(Ordering::Relaxed));
            if pid1 == 0 {
                free.push(f);
                continue;
            }
            let pid = pid1 - 1;
            if pid > MAX_PID {
                return Err(BufferError::corrupt(
                    "PM frames",
                    format!("frame {f} names page {pid}"),
                ));
            }
            if let Some(g) = seen.insert(pid, f) {
                return Err(BufferError::corrupt(
                    "PM frames",
                    format!("frames {g} and {f} both hold page {pid}"),
                ));
            }
            let d = &self.descs[f as usize];
            d.pid.store(pid, Ordering::Relaxed);
            d.newer.store(
                h.flags.load(Ordering::Relaxed) & FLAG_NEWER != 0,
                Ordering::Relaxed,
            );
            found.push(FoundFrame { pid, frame: f });
        }
        free.reverse();
        *self.free.lock().unwrap() = free;
        self.version.store(maxv + 1, Ordering::Relaxed);
        Ok(found)
    }

    /// A free frame, if any.
    pub fn take_free(&self) -> Option<u32> {
        self.free.lock().unwrap().pop()
    }

    /// Returns frame `f` to the free list (its header is already cleared).
    pub fn put_free(&self, f: u32) {
        self.descs[f as usize].pid.store(NO_PAGE, Ordering::Release);
        self.free.lock().unwrap().push(f);
    }

    fn count_lines(&self, f: u32, lines: impl Iterator<Item = usize>) {
        let mut n = 0;
        match &self.line_writes {
            Some(w) => {
                let per = self.page_size / LINE;
                for l in lines {
                    w[f as usize * per + l].fetch_add(1, Ordering::Relaxed);
                    n += 1;
                }
            }
            None => n = lines.count(),
        }
        self.counters
            .lines_written
            .fetch_add(n as u64, Ordering::Relaxed);
    }

    fn write_header(&self, f: u32, pid: Option<u64>, lsn: u64, newer: bool) {
        let h = self.hdr(f);
        store_u64(&h.lsn, lsn, Ordering::Release);
        store_u64(
            &h.flags,
            if newer { FLAG_NEWER } else { 0 },
            Ordering::Release,
        );
        if let Some(pid) = pid {
            let v = self.version.fetch_add(1, Ordering::Relaxed);
            store_u64(&h.version, v, Ordering::Release);
            store_u64(&h.pid1, pid + 1, Ordering::Release);
        }
        self.pool.flush(h as *const FrameHeader as *const u8, 64);
    }

    /// Admits page `pid` into free frame `f`: the whole page, a fence, then the
    /// header naming it, a fence (2 barriers).
    pub fn admit(&self, f: u32, pid: u64, page: &[u8], lsn: u64, newer: bool) -> Result<()> {
        debug_assert_eq!(page.len(), self.page_size);
        self.pool.nt_copy(self.data(f), page);
        self.pool.fence()?;
        self.write_header(f, Some(pid), lsn, newer);
        self.pool.fence()?;
        let d = &self.descs[f as usize];
        d.pid.store(pid, Ordering::Release);
        d.newer.store(newer, Ordering::Relaxed);
        d.refbit.store(true, Ordering::Relaxed);
        self.count_lines(f, 0..self.page_size / LINE);
        self.counters.admissions.fetch_add(1, Ordering::Relaxed);
        Ok(())
    }

    /// Writes the given lines of `page` into frame `f` in place and updates the
    /// header's LSN and flags; one barrier (none with `fence: false`: restart's
    /// redo fences once at its end). `publish` names the page in the header
    /// too (PM-direct pages written for the first time).
    pub fn write_lines(
        &self,
        f: u32,
        page: &[u8],
        lines: &[u16],
        lsn: u64,
        publish: Option<u64>,
        fence: bool,
    ) -> Result<()> {
        let base = self.data(f);
        if let Some(m) = &self.read_model {
            let per = (self.page_size / LINE) as u64;
            for &l in lines {
                let g = f as u64 * per + l as u64;
                m.touch(g, g);
            }
        }
        for &l in lines {
            let off = l as usize * LINE;
            // SAFETY: off..off+64 is inside frame f's data (l < lines per page).
            unsafe { std::ptr::copy_nonoverlapping(page.as_ptr().add(off), base.add(off), LINE) };
            // SAFETY: as above.
            self.pool.flush(unsafe { base.add(off) }, LINE);
        }
        self.write_header(f, publish, lsn, true);
        if fence {
            self.pool.fence()?;
        }
        let d = &self.descs[f as usize];
        d.newer.store(true, Ordering::Relaxed);
        if let Some(pid) = publish {
            d.pid.store(pid, Ordering::Release);
        }
        self.count_lines(f, lines.iter().map(|&l| l as usize));
        Ok(())
    }

    /// Marks frame `f` no newer than its SSD copy (which the caller has
    /// written and synced): the header's flag cleared and written back, not
    /// fenced (the caller fences once for a batch).
    pub fn mark_clean(&self, f: u32) {
        let h = self.hdr(f);
        store_u64(&h.flags, 0, Ordering::Release);
        self.pool.flush(h as *const FrameHeader as *const u8, 64);
        self.descs[f as usize].newer.store(false, Ordering::Relaxed);
    }

    /// Clears frame `f`'s header (written back, not fenced: the caller fences
    /// once for a batch).
    pub fn invalidate(&self, f: u32) {
        let h = self.hdr(f);
        store_u64(&h.pid1, 0, Ordering::Release);
        self.pool.flush(h as *const FrameHeader as *const u8, 64);
    }

    pub fn fence(&self) -> Result<()> {
        Ok(self.pool.fence()?)
    }

    /// Writes per cache line of frame data since open (when tracked).
    pub fn line_write_counts(&self) -> Option<Vec<u32>> {
        self.line_writes
            .as_ref()
            .map(|w| w.iter().map(|c| c.load(Ordering::Relaxed)).collect())
    }
}
