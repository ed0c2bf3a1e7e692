//! Pools: a mapped file (or memory buffer) with a header, a root directory of
//! named objects, a chunk table and chunks of heap.
//!
//! * `mapping`: `MAP_SYNC` detection, the file lock, the backing memory;
//! * `header`: creating and validating the header;
//! * `directory`: named objects and their root words;
//! * `chunks`: the chunk table (claims, releases, validation at open);
//! * `flush`: flush / fence / nt-copy dispatch by mode, health, simulator control;
//! * `access`: typed, bounds-checked access to PM words and bytes;
//! * `warm`: faulting free chunks in ahead of a bulk writer.

mod access;
mod chunks;
mod directory;
mod flush;
mod header;
pub(crate) mod mapping;
pub mod warm;

pub use warm::Warmer;

use std::collections::{BTreeSet, HashSet};
use std::fs::OpenOptions;
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Mutex};

use crate::error::{PmError, Result};
use crate::layout::{self, PoolHeader};
use crate::msync::MsyncQueue;
use crate::persist::{self, FlushKind, CACHE_LINE};
use crate::sim::{self, CrashHook, Sim};
use crate::AlignedBuf;

pub use access::{PmSlice, PmWord};
use flush::Mode;
use header::{new_header, validate_header};
use mapping::{fs_is_tmpfs, lock_file, map_anon_huge, map_file, reserve, Backing, HUGE_PAGE};

/// How durable a pool's stores are once flushed and fenced: what the mapping
/// is *and* what the pool actually issues.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Durability {
    /// A DAX mapping made with `MAP_SYNC`, with cache-line write-backs issued:
    /// write-back + fence survives power loss.
    Pm,
    /// A DAX mapping made with `MAP_SYNC` on which no write-back instruction is
    /// issued (eADR mode, chosen with `FERRITE_FLUSH=eadr|none` or forced by a
    /// CPU without one): survives power loss only on an eADR platform, which
    /// Ferrite cannot detect.
    PmEadrAssumed,
    /// A tmpfs file (`/dev/shm`): survives a process crash, not power loss.
    EmulatedShm,
    /// An ordinary file mapped shared: survives a process crash; the page cache is
    /// lost on power failure.
    EmulatedFile,
    /// An ordinary file with `msync` at every fence: survives power loss, at
    /// block-device speed.
    FileMsync,
    /// Anonymous memory: gone with the process.
    Volatile,
    /// The crash simulator: durability tracked per cache line.
    Simulated,
}

impl Durability {
    /// Short machine-readable name.
    pub fn name(self) -> &'static str {
        match self {
            Durability::Pm => "pm",
            Durability::PmEadrAssumed => "pm-eadr-assumed",
            Durability::EmulatedShm => "emulated-pm-tmpfs",
            Durability::EmulatedFile => "emulated-pm-file",
            Durability::FileMsync => "file-msync",
            Durability::Volatile => "volatile",
            Durability::Simulated => "simulated",
        }
    }

    /// What survives what, in plain words.
    pub fn describe(self) -> &'static str {
        match self {
            Durability::Pm => "survives power loss: DAX device mapped with MAP_SYNC; cache-line write-back + fence persists",
            Durability::PmEadrAssumed => "survives power loss ONLY on an eADR platform: DAX device mapped with MAP_SYNC, but no cache-line write-back is issued (eADR mode: FERRITE_FLUSH=eadr|none, or no write-back instruction on this CPU); without eADR, data in CPU caches is lost on power failure",
            Durability::EmulatedShm => "survives a process crash; does NOT survive power loss or a kernel crash: tmpfs is DRAM, not a DAX device",
            Durability::EmulatedFile => "survives a process crash; does NOT survive power loss: not a DAX device (page cache); open with msync mode for power-fail durability",
            Durability::FileMsync => "survives power loss: msync at every fence (block-device speed, not the fast path)",
            Durability::Volatile => "does NOT survive the process: anonymous memory",
            Durability::Simulated => "crash simulator: durability tracked per cache line",
        }
    }

    /// True when a fenced write survives power loss (as far as Ferrite can know).
    pub fn power_fail_safe(self) -> bool {
        matches!(self, Durability::Pm | Durability::FileMsync)
    }

    /// The durability a mapping gets given what is issued on it: `map_sync`
    /// (the kernel granted `MAP_SYNC`), `msync` (msync mode asked for),
    /// `tmpfs` (the file is on tmpfs) and the write-back instruction in use.
    pub fn for_mapping(sync: bool, msync: bool, tmpfs: bool, flush: FlushKind) -> Durability {
        match (sync, msync) {
            (true, _) if flush == FlushKind::Eadr => Durability::PmEadrAssumed,
            (true, _) => Durability::Pm,
            (false, true) => Durability::FileMsync,
            (false, false) if tmpfs => Durability::EmulatedShm,
            (false, false) => Durability::EmulatedFile,
        }
    }
}

/// How to create or open a pool.
#[derive(Debug, Clone)]
pub struct PoolOptions {
    /// Chunk size for new pools (power of two, 16 KiB..64 MiB).
    pub chunk_size: u64,
    /// Write-back instruction; `None` picks the best one by CPUID (or `FERRITE_FLUSH`).
    /// `Some(FlushKind::Eadr)` is eADR mode: fences only.
    pub flush: Option<FlushKind>,
    /// `msync` the flushed pages at every fence (ordinary filesystems).
    pub msync: bool,
    /// Map read-only; every mutating call fails. Takes a shared file lock, so
    /// any number of readers may open a pool no writer holds.
    pub read_only: bool,
}

impl Default for PoolOptions {
    fn default() -> Self {
        PoolOptions {
            chunk_size: layout::DEFAULT_CHUNK,
            flush: None,
            msync: false,
            read_only: false,
        }
    }
}

/// Leftovers of an interrupted operation found when the pool was opened.
#[derive(Debug, Clone, Default)]
pub struct OpenReport {
    /// Chunks owned by no object (freed at open unless read-only).
    pub orphan_chunks: u64,
    /// Large-block runs whose table entries were incomplete (freed at open).
    pub torn_runs: u64,
}

pub(crate) struct PoolInner {
    base: *mut u8,
    size: usize,
    backing: Backing,
    durability: Durability,
    flush_kind: FlushKind,
    mode: Mode,
    read_only: bool,
    sim: Option<Arc<Mutex<Sim>>>,
    msync: MsyncQueue,
    pub(crate) header: PoolHeader,
    path: Option<PathBuf>,
    pub(crate) free_chunks: Mutex<BTreeSet<u32>>,
    /// Chunks whose file blocks are known to exist (one bit per chunk):
    /// owned at open, or reserved by this process (`mapping::reserve`).
    pub(crate) reserved: Vec<AtomicU64>,
    pub(crate) open_heaps: Mutex<HashSet<u16>>,
    dir_lock: Mutex<()>,
    open_report: OpenReport,
}

// SAFETY: the mapping is shared memory whose concurrent use is governed by the
// structures built on it (atomics and locks); all other fields are Sync.
unsafe impl Send for PoolInner {}
// SAFETY: see above.
unsafe impl Sync for PoolInner {}

impl Drop for PoolInner {
    fn drop(&mut self) {
        if self.sim.is_some() {
            sim::unregister(self.base);
        }
        if let Backing::Mmap { len, .. } | Backing::Anon { len } = self.backing {
            // SAFETY: base/len are the mapping made at open; nothing borrows it any
            // more because every handle holds an Arc to this inner.
            unsafe { libc::munmap(self.base as *mut libc::c_void, len) };
        }
    }
}

/// Volatile pools from this size on are mapped for huge pages
/// ([`Pool::create_volatile`]).
pub const VOLATILE_HUGE_MIN: u64 = 32 << 20;

/// How the kernel maps a range of this process's address space, summed over
/// the `/proc/self/smaps` entries (VMAs) that overlap it.
#[derive(Debug, Default, PartialEq)]
struct Mapped {
    /// The first overlapping VMA's base page size.
    base_page: Option<u64>,
    /// Resident bytes.
    rss_bytes: u64,
    /// Resident bytes mapped with huge pages (anonymous, shmem or file).
    huge_bytes: u64,
}

impl Mapped {
    /// Sums `smaps` (the text of `/proc/self/smaps`) over the VMAs that overlap
    /// `[at, end)`: the pool may span several (a volatile pool inside a larger
    /// allocation, split by madvise).
    fn parse(smaps: &str, at: u64, end: u64) -> Mapped {
        let (mut m, mut inside) = (Mapped::default(), false);
        for line in smaps.lines() {
            let mut f = line.split_whitespace();
            let Some(first) = f.next() else { continue };
            if let Some((a, b)) = first.split_once('-') {
                if let (Ok(a), Ok(b)) = (u64::from_str_radix(a, 16), u64::from_str_radix(b, 16)) {
                    inside = a < end && b > at;
                    continue;
                }
            }
            if !inside {
                continue;
            }
            let bytes = f.next().and_then(|v| v.parse::<u64>().ok()).unwrap_or(0) * 1024;
            match first {
                "KernelPageSize:" => m.base_page = m.base_page.or(Some(bytes)),
                "Rss:" => m.rss_bytes += bytes,
                "AnonHugePages:" | "ShmemPmdMapped:" | "FilePmdMapped:" => m.huge_bytes += bytes,
                _ => {}
            }
        }
        m
    }
}

/// A handle to an open pool. Cheap to clone; the mapping (and the file lock)
/// lives until the last handle (including heaps) is dropped.
#[derive(Clone)]
pub struct Pool {
    pub(crate) inner: Arc<PoolInner>,
}

/// A named object of the root directory.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ObjectInfo {
    pub id: ObjectId,
    pub name: String,
    pub type_name: String,
    pub roots: [u64; layout::ROOT_WORDS],
}

/// Identifies an object of the root directory (directory index + 1).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ObjectId(pub(crate) u16);

impl ObjectId {
    pub fn index(self) -> usize {
        self.0 as usize - 1
    }
}

/// Everything [`Pool::assemble`] needs besides the options.
struct Parts {
    base: *mut u8,
    header: PoolHeader,
    backing: Backing,
    durability: Durability,
    mode: Mode,
    path: Option<PathBuf>,
    sim: Option<Sim>,
}

impl Pool {
    /// Creates a new pool file of `size` bytes and holds it open for writing
    /// (exclusive file lock). Fails if the file exists; on any later failure
    /// the file this call created is removed (and only that file).
    pub fn create(path: impl AsRef<Path>, size: u64, opts: &PoolOptions) -> Result<Pool> {
        let path = path.as_ref();
        let header = new_header(size, opts.chunk_size, 0)?;
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .mode(0o644)
            .open(path)
            .map_err(|e| PmError::io(path, e))?;
        // From here on the file is ours: remove it if creation fails.
        let res = (|| {
            lock_file(&file, path, true)?;
            file.set_len(size).map_err(|e| PmError::io(path, e))?;
            // The metadata's room now; each chunk's when it is claimed.
            reserve(&file, path, 0, header.heap_off)?;
            let pool = Pool::map(file, path, header, opts)?;
            pool.format()?;
            pool.load()
        })();
        if res.is_err() {
            let _ = std::fs::remove_file(path);
        }
        res
    }

    /// Opens an existing pool file, validating header, directory and chunk
    /// table. A writable open takes an exclusive file lock and a read-only open
    /// a shared one; a pool held by another writer gives [`PmError::InUse`].
    pub fn open(path: impl AsRef<Path>, opts: &PoolOptions) -> Result<Pool> {
        let path = path.as_ref();
        let file = OpenOptions::new()
            .read(true)
            .write(!opts.read_only)
            .open(path)
            .map_err(|e| PmError::io(path, e))?;
        lock_file(&file, path, !opts.read_only)?;
        let len = file.metadata().map_err(|e| PmError::io(path, e))?.len();
        let mut raw = vec![0u8; (len.min(layout::HEADER_BYTES)) as usize];
        file.read_exact_at(&mut raw, 0)
            .map_err(|e| PmError::io(path, e))?;
        let header = validate_header(&raw, len)?;
        Pool::map(file, path, header, opts)?.load()
    }

    fn map(
        file: std::fs::File,
        path: &Path,
        header: PoolHeader,
        opts: &PoolOptions,
    ) -> Result<Pool> {
        let len = header.pool_size as usize;
        let (base, sync) =
            map_file(&file, len, opts.read_only).map_err(|e| PmError::io(path, e))?;
        let flush = opts.flush.unwrap_or_else(persist::default_flush_kind);
        let durability = Durability::for_mapping(sync, opts.msync, fs_is_tmpfs(&file), flush);
        let mode = if opts.msync && !sync {
            Mode::Msync
        } else {
            Mode::Direct
        };
        Ok(Pool::assemble(
            Parts {
                base,
                header,
                backing: Backing::Mmap { _file: file, len },
                durability,
                mode,
                path: Some(path.to_path_buf()),
                sim: None,
            },
            opts,
        ))
    }

    fn assemble(p: Parts, opts: &PoolOptions) -> Pool {
        let sim = p.sim.map(|s| Arc::new(Mutex::new(s)));
        if let Some(s) = &sim {
            sim::register(p.base, p.header.pool_size as usize, Arc::downgrade(s));
        }
        Pool {
            inner: Arc::new(PoolInner {
                base: p.base,
                size: p.header.pool_size as usize,
                backing: p.backing,
                durability: p.durability,
                flush_kind: opts.flush.unwrap_or_else(persist::default_flush_kind),
                mode: p.mode,
                read_only: opts.read_only,
                sim,
                msync: MsyncQueue::new(),
                header: p.header,
                path: p.path,
                free_chunks: Mutex::new(BTreeSet::new()),
                reserved: Vec::new(),
                open_heaps: Mutex::new(HashSet::new()),
                dir_lock: Mutex::new(()),
                open_report: OpenReport::default(),
            }),
        }
    }

    /// A pool in memory of this process, with a fresh header and the given
    /// durability and mode.
    fn in_memory(size: u64, opts: &PoolOptions, flags: u64, simulated: bool) -> Result<Pool> {
        let header = new_header(size, opts.chunk_size, flags)?;
        // Large volatile pools (the DRAM mode of structures, benchmarks) get
        // memory that can use huge pages; small ones (tests, crash images) stay
        // in recycled buffers.
        let (base, backing) =
            match (!simulated && size >= VOLATILE_HUGE_MIN).then(|| map_anon_huge(size as usize)) {
                Some(Ok(p)) => (p, Backing::Anon { len: size as usize }),
                _ => {
                    let mut buf = AlignedBuf::zeroed(size as usize);
                    (buf.as_mut_ptr(), Backing::Memory(buf))
                }
            };
        let (durability, mode, sim) = if simulated {
            let sim = Sim::new(AlignedBuf::zeroed(size as usize));
            (Durability::Simulated, Mode::Sim, Some(sim))
        } else {
            (Durability::Volatile, Mode::Direct, None)
        };
        let pool = Pool::assemble(
            Parts {
                base,
                header,
                backing,
                durability,
                mode,
                path: None,
                sim,
            },
            opts,
        );
        pool.format()?;
        pool.load()
    }

    /// A pool in anonymous memory (nothing survives the process); from
    /// [`VOLATILE_HUGE_MIN`] bytes on, a mapping aligned to and advised for
    /// 2 MiB pages. For tests,
    /// volatile-mode indexes and benchmarks' DRAM baselines.
    pub fn create_volatile(size: u64, opts: &PoolOptions) -> Result<Pool> {
        Pool::in_memory(size, opts, 0, false)
    }

    /// A pool under the crash simulator (stores serialised: one thread at a time).
    pub fn create_simulated(size: u64, opts: &PoolOptions) -> Result<Pool> {
        Pool::in_memory(size, opts, layout::flags::SIMULATED, true)
    }

    /// Opens a pool from an image in memory (a crash image, or a copy of a file)
    /// through the same validation and recovery as [`Pool::open`]. The result is
    /// volatile.
    pub fn open_image(image: AlignedBuf, opts: &PoolOptions) -> Result<Pool> {
        Pool::from_image(image, opts, None)
    }

    /// Opens a crash image under the crash simulator, with `hook` installed
    /// before recovery starts: every fence of recovery (the pool's own clean-up
    /// at open, then the structure's) is a crash point. The image is the
    /// durable state; nothing else is dirty at the start.
    pub fn open_image_simulated(image: AlignedBuf, hook: Option<CrashHook>) -> Result<Pool> {
        let durable = AlignedBuf::from_slice(image.as_slice());
        let mut sim = Sim::new(durable);
        sim.hook = hook;
        Pool::from_image(image, &PoolOptions::default(), Some(sim))
    }

    fn from_image(image: AlignedBuf, opts: &PoolOptions, sim: Option<Sim>) -> Result<Pool> {
        let avail = image.len() as u64;
        let n = image.len().min(layout::HEADER_BYTES as usize);
        let header = validate_header(&image.as_slice()[..n], avail)?;
        let mut image = image;
        let base = image.as_mut_ptr();
        let (durability, mode) = if sim.is_some() {
            (Durability::Simulated, Mode::Sim)
        } else {
            (Durability::Volatile, Mode::Direct)
        };
        Pool::assemble(
            Parts {
                base,
                header,
                backing: Backing::Memory(image),
                durability,
                mode,
                path: None,
                sim,
            },
            opts,
        )
        .load()
    }

    /// Validates the directory and chunk table and builds the volatile chunk index.
    fn load(mut self) -> Result<Pool> {
        let valid = self.validate_directory()?;
        let (free, report) = self.scan_chunk_table(&valid)?;
        let inner = Arc::get_mut(&mut self.inner).expect("pool is not shared during load");
        // Every chunk counts as reserved but a file's free ones: only a
        // file's blocks can be missing, and a chunk owned at open got them
        // when it was claimed. (Bits past the last chunk are never read.)
        let words = (inner.header.chunk_count as usize).div_ceil(64);
        inner.reserved = (0..words).map(|_| AtomicU64::new(u64::MAX)).collect();
        if matches!(inner.backing, Backing::Mmap { .. }) {
            for &c in &free {
                *inner.reserved[c as usize / 64].get_mut() &= !(1 << (c % 64));
            }
        }
        *inner.free_chunks.get_mut().unwrap() = free;
        inner.open_report = report;
        Ok(self)
    }

    // ----- geometry and access -------------------------------------------------

    /// Base address of the mapping (changes between runs: store offsets, not this).
    pub fn base(&self) -> *mut u8 {
        self.inner.base
    }

    /// Pool size in bytes.
    pub fn size(&self) -> u64 {
        self.inner.size as u64
    }

    /// The validated header.
    pub fn header(&self) -> &PoolHeader {
        &self.inner.header
    }

    pub fn path(&self) -> Option<&Path> {
        self.inner.path.as_deref()
    }

    /// What survives what on this pool, given its device *and* what is issued.
    pub fn durability(&self) -> Durability {
        self.inner.durability
    }

    pub fn flush_kind(&self) -> FlushKind {
        self.inner.flush_kind
    }

    /// The page size the kernel maps the pool with, as far as it has mapped it:
    /// `HUGE_PAGE` (2 MiB) when any part of the pool is mapped with huge pages
    /// (tmpfs mounted `huge=always`, DAX with aligned extents, a large volatile
    /// pool that got transparent huge pages), else the mapping's base page size
    /// (4 KiB); `None` where `/proc/self/smaps` cannot tell (not Linux). Pages
    /// not yet touched are not mapped at all, so ask after the pool was used.
    pub fn page_size(&self) -> Option<u64> {
        let m = self.mapped()?;
        if m.huge_bytes > 0 {
            Some(HUGE_PAGE as u64)
        } else {
            m.base_page
        }
    }

    /// The share of the pool's resident bytes that the kernel maps with huge
    /// pages (0.0 to 1.0), as `/proc/self/smaps` counts them now; `None` when
    /// nothing of the pool is resident yet or smaps cannot tell. Where
    /// [`Self::page_size`] says 2 MiB as soon as any part is on huge pages, this
    /// shows a pool that got only some (a fragmented tmpfs falls back to 4 KiB
    /// pages silently).
    pub fn huge_page_share(&self) -> Option<f64> {
        let m = self.mapped()?;
        (m.rss_bytes > 0).then(|| (m.huge_bytes as f64 / m.rss_bytes as f64).min(1.0))
    }

    fn mapped(&self) -> Option<Mapped> {
        let smaps = std::fs::read_to_string("/proc/self/smaps").ok()?;
        let at = self.inner.base as u64;
        Some(Mapped::parse(&smaps, at, at + self.inner.size as u64))
    }

    pub fn is_read_only(&self) -> bool {
        self.inner.read_only
    }

    /// What recovery found and cleaned up when the pool was opened.
    pub fn open_report(&self) -> &OpenReport {
        &self.inner.open_report
    }

    /// Address of pool offset `off`. Panics if `off + len` is outside the pool
    /// (a programming error; recovery validates offsets read from PM first, or
    /// uses the checked [`Pool::word`] / [`Pool::slice`]).
    #[inline]
    pub fn at(&self, off: u64, len: usize) -> *mut u8 {
        assert!(
            self.contains(off, len),
            "pool offset {off:#x}+{len} out of bounds"
        );
        // SAFETY: in bounds of the mapping (checked above).
        unsafe { self.inner.base.add(off as usize) }
    }

    /// True when `[off, off+len)` lies inside the pool.
    #[inline]
    pub fn contains(&self, off: u64, len: usize) -> bool {
        off.checked_add(len as u64)
            .is_some_and(|end| end <= self.inner.size as u64)
    }

    /// Offset of an address inside the pool.
    #[inline]
    pub fn offset_of(&self, p: *const u8) -> u64 {
        let off = (p as usize).wrapping_sub(self.inner.base as usize);
        assert!(off < self.inner.size, "address is not inside the pool");
        off as u64
    }

    /// Whole-line granularity helper: rounds `len` up to cache lines.
    pub fn lines(len: usize) -> usize {
        len.div_ceil(CACHE_LINE)
    }
}

impl std::fmt::Debug for Pool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Pool")
            .field("path", &self.inner.path)
            .field("size", &self.inner.size)
            .field("durability", &self.inner.durability)
            .finish()
    }
}

#[cfg(test)]
mod mapped_tests {
    use super::Mapped;

    const SMAPS: &str = "\
00400000-00600000 r-xp 00000000 08:01 1 /bin/x
Size:               2048 kB
KernelPageSize:        4 kB
Rss:                1024 kB
7f0000000000-7f0000400000 rw-s 00000000 00:1a 7 /mnt/pmhuge/p.pool
Size:               4096 kB
KernelPageSize:        4 kB
Rss:                4096 kB
ShmemPmdMapped:     2048 kB
7f0000400000-7f0000800000 rw-s 00400000 00:1a 7 /mnt/pmhuge/p.pool
Size:               4096 kB
KernelPageSize:        4 kB
Rss:                2048 kB
ShmemPmdMapped:        0 kB
7f0000800000-7f0000a00000 rw-p 00000000 00:00 0
Rss:                2048 kB
AnonHugePages:      2048 kB
";

    /// Only the VMAs overlapping the range count, each of them, and every
    /// kind of huge mapping is counted as huge.
    #[test]
    fn sums_the_vmas_of_the_range() {
        let pool = Mapped::parse(SMAPS, 0x7f00_0000_0000, 0x7f00_0080_0000);
        assert_eq!(
            pool,
            Mapped {
                base_page: Some(4096),
                rss_bytes: 6 << 20,
                huge_bytes: 2 << 20,
            }
        );
        let first = Mapped::parse(SMAPS, 0x7f00_0010_0000, 0x7f00_0020_0000);
        assert_eq!((first.rss_bytes, first.huge_bytes), (4 << 20, 2 << 20));
        let anon = Mapped::parse(SMAPS, 0x7f00_0080_0000, 0x7f00_0090_0000);
        assert_eq!((anon.rss_bytes, anon.huge_bytes), (2 << 20, 2 << 20));
        assert_eq!(Mapped::parse(SMAPS, 0x1000, 0x2000), Mapped::default());
    }
}
