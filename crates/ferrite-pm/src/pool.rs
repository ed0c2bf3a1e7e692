//! Pools: a mapped file (or memory buffer) with a header, a root directory of
//! named objects, a chunk table and chunks of heap.

use std::collections::{BTreeSet, HashSet};
use std::fs::{File, OpenOptions};
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use crate::error::{PmError, Result};
use crate::layout::{self, chunk_kind, ChunkEntry, DirEntry, PoolHeader, FORMAT_VERSION, MAGIC};
use crate::persist::{self, FlushKind, CACHE_LINE};
use crate::sim::{CrashHook, CrashPoint, Sim};
use crate::AlignedBuf;

const MAP_SYNC: libc::c_int = 0x80000;
const TMPFS_MAGIC: i64 = 0x0102_1994;

/// How durable a pool's stores are once flushed and fenced.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Durability {
    /// A DAX mapping made with `MAP_SYNC`: write-back + fence survives power loss.
    Pm,
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
            Durability::EmulatedShm => "survives a process crash; does NOT survive power loss or a kernel crash: tmpfs is DRAM, not a DAX device",
            Durability::EmulatedFile => "survives a process crash; does NOT survive power loss: not a DAX device (page cache); open with msync mode for power-fail durability",
            Durability::FileMsync => "survives power loss: msync at every fence (block-device speed, not the fast path)",
            Durability::Volatile => "does NOT survive the process: anonymous memory",
            Durability::Simulated => "crash simulator: durability tracked per cache line",
        }
    }

    /// True when a fenced write survives power loss.
    pub fn power_fail_safe(self) -> bool {
        matches!(self, Durability::Pm | Durability::FileMsync)
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
    /// Map read-only; every mutating call fails.
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

enum Backing {
    Mmap { _file: File, len: usize },
    Memory(#[allow(dead_code)] AlignedBuf),
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Mode {
    Direct,
    Msync,
    Sim,
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
    sim: Option<Mutex<Sim>>,
    msync_ranges: Mutex<Vec<(usize, usize)>>,
    pub(crate) header: PoolHeader,
    path: Option<PathBuf>,
    pub(crate) free_chunks: Mutex<BTreeSet<u32>>,
    pub(crate) open_heaps: Mutex<HashSet<u16>>,
    dir_lock: Mutex<()>,
    open_report: OpenReport,
    /// First write-back failure (msync mode): once set, durability can no longer
    /// be promised and every metadata write fails with it.
    io_failure: Mutex<Option<String>>,
}

// SAFETY: the mapping is shared memory whose concurrent use is governed by the
// structures built on it (atomics and locks); all other fields are Sync.
unsafe impl Send for PoolInner {}
// SAFETY: see above.
unsafe impl Sync for PoolInner {}

impl Drop for PoolInner {
    fn drop(&mut self) {
        if let Backing::Mmap { len, .. } = self.backing {
            // SAFETY: base/len are the mapping made at open; nothing borrows it any
            // more because every handle holds an Arc to this inner.
            unsafe { libc::munmap(self.base as *mut libc::c_void, len) };
        }
    }
}

/// A handle to an open pool. Cheap to clone; the mapping lives until the last
/// handle (including heaps) is dropped.
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

fn bad(msg: impl Into<String>) -> PmError {
    PmError::BadPool(msg.into())
}

/// Reads the header from its bytes and checks everything that can be checked
/// without the rest of the pool. `avail` is how many bytes the file or image has.
fn validate_header(raw: &[u8], avail: u64) -> Result<PoolHeader> {
    if raw.len() < std::mem::size_of::<PoolHeader>() {
        return Err(bad(format!(
            "truncated: {avail} bytes, smaller than a pool header"
        )));
    }
    if raw.iter().all(|&b| b == 0) {
        return Err(bad(
            "not a Ferrite pool: the header is all zeros (never initialised, or wiped)",
        ));
    }
    // SAFETY: raw holds at least size_of::<PoolHeader>() bytes; read_unaligned
    // copes with any alignment and every bit pattern is a valid PoolHeader.
    let h: PoolHeader = unsafe { std::ptr::read_unaligned(raw.as_ptr() as *const PoolHeader) };
    if h.magic != MAGIC {
        return Err(bad("not a Ferrite pool (bad magic number)"));
    }
    if h.checksum != h.compute_checksum() {
        if h.version > FORMAT_VERSION {
            return Err(PmError::NewerVersion {
                found: h.version,
                supported: FORMAT_VERSION,
            });
        }
        return Err(bad(format!(
            "header checksum mismatch (stored {:#x}, computed {:#x}): the header is corrupt",
            h.checksum,
            h.compute_checksum()
        )));
    }
    if h.version > FORMAT_VERSION {
        return Err(PmError::NewerVersion {
            found: h.version,
            supported: FORMAT_VERSION,
        });
    }
    if h.version < FORMAT_VERSION {
        return Err(PmError::OlderVersion {
            found: h.version,
            supported: FORMAT_VERSION,
        });
    }
    if h.pool_size > avail {
        return Err(bad(format!(
            "truncated: the file has {avail} bytes but the header says {}",
            h.pool_size
        )));
    }
    let cs = h.chunk_size;
    if !cs.is_power_of_two() || !(layout::MIN_CHUNK..=layout::MAX_CHUNK).contains(&cs) {
        return Err(bad(format!("invalid chunk size {cs} in the header")));
    }
    match layout::plan(h.pool_size, cs) {
        Some((d, t, heap, n))
            if d == h.dir_off
                && t == h.chunk_table_off
                && heap == h.heap_off
                && n == h.chunk_count
                && h.dir_entries == layout::DIR_ENTRIES as u64
                && h.header_bytes as u64 == layout::HEADER_BYTES => {}
        _ => return Err(bad("the header's geometry is inconsistent")),
    }
    Ok(h)
}

fn new_header(size: u64, chunk_size: u64, flags: u64) -> Result<PoolHeader> {
    if !chunk_size.is_power_of_two()
        || !(layout::MIN_CHUNK..=layout::MAX_CHUNK).contains(&chunk_size)
    {
        return Err(PmError::Invalid(format!(
            "chunk size {chunk_size} must be a power of two between {} and {}",
            layout::MIN_CHUNK,
            layout::MAX_CHUNK
        )));
    }
    if size < layout::MIN_POOL {
        return Err(PmError::Invalid(format!(
            "pool size {size} is below the minimum of {} bytes",
            layout::MIN_POOL
        )));
    }
    let (dir_off, table_off, heap_off, count) =
        layout::plan(size, chunk_size).ok_or_else(|| {
            PmError::Invalid(format!("pool size {size} holds no {chunk_size}-byte chunk"))
        })?;
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    let mut h = PoolHeader {
        magic: MAGIC,
        version: FORMAT_VERSION,
        header_bytes: layout::HEADER_BYTES as u32,
        pool_size: size,
        chunk_size,
        chunk_count: count,
        dir_off,
        dir_entries: layout::DIR_ENTRIES as u64,
        chunk_table_off: table_off,
        heap_off,
        pool_uuid: random_u64(),
        created_unix: now,
        flags,
        checksum: 0,
    };
    h.checksum = h.compute_checksum();
    Ok(h)
}

fn random_u64() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u64(std::process::id() as u64);
    h.finish()
}

fn fs_is_tmpfs(file: &File) -> bool {
    use std::os::fd::AsRawFd;
    // SAFETY: fstatfs writes into the zeroed struct we pass; the fd is open.
    unsafe {
        let mut st: libc::statfs = std::mem::zeroed();
        libc::fstatfs(file.as_raw_fd(), &mut st) == 0 && st.f_type as i64 == TMPFS_MAGIC
    }
}

/// Maps `len` bytes of `file`, first trying `MAP_SHARED_VALIDATE | MAP_SYNC`
/// (accepted only on DAX), then plain `MAP_SHARED`. Returns the address and
/// whether `MAP_SYNC` was granted.
fn map_file(file: &File, len: usize, read_only: bool) -> std::io::Result<(*mut u8, bool)> {
    use std::os::fd::AsRawFd;
    let prot = if read_only {
        libc::PROT_READ
    } else {
        libc::PROT_READ | libc::PROT_WRITE
    };
    {
        // SAFETY: a fresh mapping of an open fd; the kernel validates the flags and
        // refuses MAP_SYNC (EOPNOTSUPP/EINVAL) unless the file is on DAX.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                prot,
                libc::MAP_SHARED_VALIDATE | MAP_SYNC,
                file.as_raw_fd(),
                0,
            )
        };
        if p != libc::MAP_FAILED {
            return Ok((p as *mut u8, true));
        }
    }
    // SAFETY: as above, without MAP_SYNC.
    let p = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            len,
            prot,
            libc::MAP_SHARED,
            file.as_raw_fd(),
            0,
        )
    };
    if p == libc::MAP_FAILED {
        return Err(std::io::Error::last_os_error());
    }
    Ok((p as *mut u8, false))
}

impl Pool {
    /// Creates a new pool file of `size` bytes. Fails if the file exists.
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
        let res = (|| {
            file.set_len(size).map_err(|e| PmError::io(path, e))?;
            let pool = Pool::map(file, path, header, opts)?;
            pool.format();
            pool.load()
        })();
        if res.is_err() {
            let _ = std::fs::remove_file(path);
        }
        res
    }

    /// Opens an existing pool file, validating header, directory and chunk table.
    pub fn open(path: impl AsRef<Path>, opts: &PoolOptions) -> Result<Pool> {
        let path = path.as_ref();
        let file = OpenOptions::new()
            .read(true)
            .write(!opts.read_only)
            .open(path)
            .map_err(|e| PmError::io(path, e))?;
        let len = file.metadata().map_err(|e| PmError::io(path, e))?.len();
        let mut raw = vec![0u8; (len.min(layout::HEADER_BYTES)) as usize];
        file.read_exact_at(&mut raw, 0)
            .map_err(|e| PmError::io(path, e))?;
        let header = validate_header(&raw, len)?;
        Pool::map(file, path, header, opts)?.load()
    }

    fn map(file: File, path: &Path, header: PoolHeader, opts: &PoolOptions) -> Result<Pool> {
        let len = header.pool_size as usize;
        let (base, sync) =
            map_file(&file, len, opts.read_only).map_err(|e| PmError::io(path, e))?;
        let durability = if sync {
            Durability::Pm
        } else if opts.msync {
            Durability::FileMsync
        } else if fs_is_tmpfs(&file) {
            Durability::EmulatedShm
        } else {
            Durability::EmulatedFile
        };
        let mode = if opts.msync && !sync {
            Mode::Msync
        } else {
            Mode::Direct
        };
        Ok(Pool::assemble(
            base,
            header,
            Backing::Mmap { _file: file, len },
            durability,
            mode,
            opts,
            Some(path.to_path_buf()),
            None,
        ))
    }

    #[allow(clippy::too_many_arguments)]
    fn assemble(
        base: *mut u8,
        header: PoolHeader,
        backing: Backing,
        durability: Durability,
        mode: Mode,
        opts: &PoolOptions,
        path: Option<PathBuf>,
        sim: Option<Sim>,
    ) -> Pool {
        Pool {
            inner: Arc::new(PoolInner {
                base,
                size: header.pool_size as usize,
                backing,
                durability,
                flush_kind: opts.flush.unwrap_or_else(persist::default_flush_kind),
                mode,
                read_only: opts.read_only,
                sim: sim.map(Mutex::new),
                msync_ranges: Mutex::new(Vec::new()),
                header,
                path,
                free_chunks: Mutex::new(BTreeSet::new()),
                open_heaps: Mutex::new(HashSet::new()),
                dir_lock: Mutex::new(()),
                open_report: OpenReport::default(),
                io_failure: Mutex::new(None),
            }),
        }
    }

    /// A pool in anonymous memory (nothing survives the process). For tests,
    /// volatile-mode indexes and benchmarks' DRAM baselines.
    pub fn create_volatile(size: u64, opts: &PoolOptions) -> Result<Pool> {
        let header = new_header(size, opts.chunk_size, 0)?;
        let mut buf = AlignedBuf::zeroed(size as usize);
        let base = buf.as_mut_ptr();
        let pool = Pool::assemble(
            base,
            header,
            Backing::Memory(buf),
            Durability::Volatile,
            Mode::Direct,
            opts,
            None,
            None,
        );
        pool.format();
        pool.load()
    }

    /// A pool under the crash simulator (single-threaded use).
    pub fn create_simulated(size: u64, opts: &PoolOptions) -> Result<Pool> {
        let header = new_header(size, opts.chunk_size, layout::flags::SIMULATED)?;
        let mut buf = AlignedBuf::zeroed(size as usize);
        let base = buf.as_mut_ptr();
        let sim = Sim::new(AlignedBuf::zeroed(size as usize));
        let pool = Pool::assemble(
            base,
            header,
            Backing::Memory(buf),
            Durability::Simulated,
            Mode::Sim,
            opts,
            None,
            Some(sim),
        );
        pool.format();
        pool.load()
    }

    /// Opens a pool from an image in memory (a crash image, or a copy of a file)
    /// through the same validation and recovery as [`Pool::open`]. The result is
    /// volatile.
    pub fn open_image(image: AlignedBuf, opts: &PoolOptions) -> Result<Pool> {
        let avail = image.len() as u64;
        let n = image.len().min(layout::HEADER_BYTES as usize);
        let header = validate_header(&image.as_slice()[..n], avail)?;
        let mut image = image;
        let base = image.as_mut_ptr();
        Pool::assemble(
            base,
            header,
            Backing::Memory(image),
            Durability::Volatile,
            Mode::Direct,
            opts,
            None,
            None,
        )
        .load()
    }

    /// Writes the header and an empty directory and chunk table (the backing is
    /// fresh and zeroed). The magic goes last so a torn creation is "not a pool".
    fn format(&self) {
        let h = self.inner.header;
        let hp = self.inner.base as *mut PoolHeader;
        let mut without_magic = h;
        without_magic.magic = [0; 8];
        // SAFETY: the mapping is at least HEADER_BYTES long and page aligned.
        unsafe { hp.write(without_magic) };
        self.persist(hp as *const u8, std::mem::size_of::<PoolHeader>());
        // SAFETY: as above; the magic is the first field.
        unsafe { (*hp).magic = MAGIC };
        self.persist(hp as *const u8, 8);
    }

    /// Validates the directory and chunk table and builds the volatile chunk index.
    fn load(mut self) -> Result<Pool> {
        let h = self.inner.header;
        let mut valid = [false; layout::DIR_ENTRIES];
        let mut names = HashSet::new();
        for (i, slot) in valid.iter_mut().enumerate() {
            let e = self.entry_copy(i);
            match e.state {
                0 => {}
                layout::ENTRY_VALID => {
                    if e.crc != e.compute_crc()
                        || e.type_len as usize > layout::MAX_TYPE_NAME
                        || e.name_len as usize > layout::MAX_NAME
                    {
                        return Err(bad(format!(
                            "root directory entry {i} is corrupt (checksum mismatch)"
                        )));
                    }
                    if !names.insert(e.name_str()) {
                        return Err(bad(format!(
                            "root directory holds the name {:?} twice",
                            e.name_str()
                        )));
                    }
                    *slot = true;
                }
                s => {
                    return Err(bad(format!(
                        "root directory entry {i} has an invalid state word {s:#x}"
                    )))
                }
            }
        }
        let n = h.chunk_count as usize;
        let mut free = BTreeSet::new();
        let mut report = OpenReport::default();
        let mut release = Vec::new();
        let mut i = 0;
        while i < n {
            let e = ChunkEntry::decode(self.chunk_word(i).load(Ordering::Acquire));
            let owner_ok = e.owner >= 1
                && (e.owner as usize) <= layout::DIR_ENTRIES
                && valid[e.owner as usize - 1];
            match e.kind {
                chunk_kind::FREE => {
                    if e != ChunkEntry::FREE {
                        return Err(bad(format!("chunk table entry {i} is invalid")));
                    }
                    free.insert(i as u32);
                }
                chunk_kind::SMALL => {
                    if e.class as usize >= layout::SIZE_CLASSES.len()
                        || layout::SIZE_CLASSES[e.class as usize] as u64 > h.chunk_size / 4
                    {
                        return Err(bad(format!(
                            "chunk table entry {i} has an invalid size class"
                        )));
                    }
                    if !owner_ok {
                        report.orphan_chunks += 1;
                        release.push((i, 1));
                    }
                }
                chunk_kind::LARGE_HEAD => {
                    let run = e.run as usize;
                    let complete = run >= 1
                        && i + run <= n
                        && (1..run).all(|k| {
                            let t =
                                ChunkEntry::decode(self.chunk_word(i + k).load(Ordering::Acquire));
                            t.kind == chunk_kind::LARGE_TAIL && t.owner == e.owner
                        });
                    if !complete {
                        // A crash before the run's claim was fenced: no one can
                        // reference it yet. Free the head; its tails are freed below.
                        report.torn_runs += 1;
                        release.push((i, 1));
                    } else {
                        if !owner_ok {
                            report.orphan_chunks += run as u64;
                            release.push((i, run));
                        }
                        i += run;
                        continue;
                    }
                }
                chunk_kind::LARGE_TAIL => {
                    // A tail not covered by a complete head (complete runs are
                    // skipped above): left by an interrupted claim.
                    report.torn_runs += 1;
                    release.push((i, 1));
                }
                _ => return Err(bad(format!("chunk table entry {i} has an invalid kind"))),
            }
            i += 1;
        }
        if !self.inner.read_only {
            for &(start, len) in &release {
                for k in start..start + len {
                    self.chunk_word(k).store(0, Ordering::Release);
                    free.insert(k as u32);
                }
                let w = self.chunk_word(start) as *const AtomicU64 as *const u8;
                self.flush(w, len * 8);
            }
            if !release.is_empty() {
                self.fence();
            }
        }
        let inner = Arc::get_mut(&mut self.inner).expect("pool is not shared during load");
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

    pub fn durability(&self) -> Durability {
        self.inner.durability
    }

    pub fn flush_kind(&self) -> FlushKind {
        self.inner.flush_kind
    }

    pub fn is_read_only(&self) -> bool {
        self.inner.read_only
    }

    /// What recovery found and cleaned up when the pool was opened.
    pub fn open_report(&self) -> &OpenReport {
        &self.inner.open_report
    }

    /// Address of pool offset `off`. Panics if `off + len` is outside the pool
    /// (a programming error; recovery validates offsets read from PM first).
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

    fn check_range(&self, p: *const u8, len: usize) -> usize {
        let off = (p as usize).wrapping_sub(self.inner.base as usize);
        assert!(
            off <= self.inner.size && len <= self.inner.size - off,
            "persist range outside the pool"
        );
        off
    }

    // ----- persistence ---------------------------------------------------------

    /// Writes back the cache lines of `[p, p+len)`, which must be inside the pool.
    // Safe despite the raw pointer: the range is checked against the mapping
    // before any instruction touches it, and write-back never changes contents.
    #[allow(clippy::not_unsafe_ptr_arg_deref)]
    #[inline]
    pub fn flush(&self, p: *const u8, len: usize) {
        let off = self.check_range(p, len);
        match self.inner.mode {
            // SAFETY: the range is inside the mapping (checked).
            Mode::Direct => unsafe { persist::flush_range(self.inner.flush_kind, p, len) },
            Mode::Sim => {
                persist::count_lines(p, len);
                self.sim().flush(self.inner.base, off, len);
            }
            Mode::Msync => {
                persist::count_lines(p, len);
                if len > 0 {
                    let page = 4096;
                    let start = off / page * page;
                    let end = (off + len).div_ceil(page) * page;
                    self.inner
                        .msync_ranges
                        .lock()
                        .unwrap()
                        .push((start, end.min(self.inner.size) - start));
                }
            }
        }
    }

    /// A persist barrier: earlier flushes of this thread are durable after it.
    #[inline]
    pub fn fence(&self) {
        match self.inner.mode {
            Mode::Direct => persist::fence(),
            Mode::Sim => {
                persist::fence();
                let base = self.inner.base;
                self.sim().fence(base);
            }
            Mode::Msync => {
                persist::fence();
                let ranges = std::mem::take(&mut *self.inner.msync_ranges.lock().unwrap());
                for (off, len) in ranges {
                    // SAFETY: the range is page aligned and inside the mapping.
                    unsafe {
                        libc::msync(
                            self.inner.base.add(off) as *mut libc::c_void,
                            len,
                            libc::MS_SYNC,
                        )
                    };
                }
            }
        }
    }

    /// `flush` then `fence`.
    #[inline]
    pub fn persist(&self, p: *const u8, len: usize) {
        self.flush(p, len);
        self.fence();
    }

    /// Copies `src` to pool address `dst` with non-temporal stores (large writes);
    /// a [`fence`](Self::fence) makes it durable.
    // Safe despite the raw pointer: the destination range is checked against the
    // mapping first, and pool memory is shared memory the caller owns by contract.
    #[allow(clippy::not_unsafe_ptr_arg_deref)]
    pub fn nt_copy(&self, dst: *mut u8, src: &[u8]) {
        let off = self.check_range(dst, src.len());
        match self.inner.mode {
            // SAFETY: the dst range is inside the mapping (checked) and does not
            // overlap src (checked by `overlaps`; overlapping copies take the
            // memmove path below).
            Mode::Direct if !self.overlaps(src) => unsafe {
                persist::nt_copy(self.inner.flush_kind, dst, src.as_ptr(), src.len())
            },
            _ => {
                // SAFETY: dst range is inside the mapping; copy handles overlap.
                unsafe { std::ptr::copy(src.as_ptr(), dst, src.len()) };
                if self.inner.mode == Mode::Sim {
                    persist::count_nt(src.len());
                    self.sim().flush(self.inner.base, off, src.len());
                } else {
                    self.flush(dst, src.len());
                }
            }
        }
    }

    fn overlaps(&self, s: &[u8]) -> bool {
        let b = self.inner.base as usize;
        let p = s.as_ptr() as usize;
        p < b + self.inner.size && b < p + s.len()
    }

    fn sim(&self) -> MutexGuard<'_, Sim> {
        self.inner
            .sim
            .as_ref()
            .expect("simulated mode without simulator")
            .lock()
            .unwrap_or_else(|e| e.into_inner())
    }

    // ----- crash simulator control -----------------------------------------------

    /// Installs the hook called at every fence of a simulated pool (before the
    /// fence takes effect) and restarts the fence count. Errors on other pools.
    pub fn set_crash_hook(&self, hook: Option<CrashHook>) -> Result<()> {
        if self.inner.mode != Mode::Sim {
            return Err(PmError::Invalid("not a simulated pool".into()));
        }
        let mut s = self.sim();
        s.hook = hook;
        s.fences = 0;
        Ok(())
    }

    /// Calls `f` with the crash point "now" (after the last fence), without fencing.
    pub fn with_crash_point<R>(&self, f: impl FnOnce(&CrashPoint<'_>) -> R) -> Result<R> {
        if self.inner.mode != Mode::Sim {
            return Err(PmError::Invalid("not a simulated pool".into()));
        }
        let s = self.sim();
        Ok(f(&CrashPoint::at_end(&s, self.inner.base)))
    }

    /// Fences issued since the hook was installed (simulated pools).
    pub fn sim_fences(&self) -> Option<u64> {
        self.inner.sim.as_ref().map(|_| self.sim().fences)
    }

    /// A copy of the pool's bytes as the CPU sees them (tests, image tools).
    pub fn snapshot(&self) -> AlignedBuf {
        let mut b = AlignedBuf::zeroed(self.inner.size);
        // SAFETY: the mapping has `size` readable bytes.
        unsafe { std::ptr::copy_nonoverlapping(self.inner.base, b.as_mut_ptr(), self.inner.size) };
        b
    }

    // ----- root directory ----------------------------------------------------------

    fn entry_ptr(&self, i: usize) -> *mut DirEntry {
        assert!(i < layout::DIR_ENTRIES);
        let off = self.inner.header.dir_off + (i as u64) * 128;
        // SAFETY: the directory lies inside the pool (validated geometry).
        unsafe { self.inner.base.add(off as usize) as *mut DirEntry }
    }

    fn entry_copy(&self, i: usize) -> DirEntry {
        // SAFETY: entry_ptr is in bounds and aligned; DirEntry is plain data. Root
        // words may change concurrently; a torn copy of them is only used for
        // display (readers use `root`).
        unsafe { std::ptr::read_volatile(self.entry_ptr(i)) }
    }

    fn state_word(&self, i: usize) -> &AtomicU64 {
        // SAFETY: `state` is the first, 8-byte aligned field of an in-bounds entry;
        // the reference lives no longer than the pool.
        unsafe { &*(self.entry_ptr(i) as *const AtomicU64) }
    }

    /// Root word `i` of an object, as an atomic in PM.
    pub fn root_word(&self, id: ObjectId, i: usize) -> &AtomicU64 {
        assert!(i < layout::ROOT_WORDS);
        // SAFETY: roots[i] is an 8-byte aligned u64 inside an in-bounds entry.
        unsafe { &*((self.entry_ptr(id.index()) as *const u64).add(1 + i) as *const AtomicU64) }
    }

    /// Reads root word `i` of an object.
    pub fn root(&self, id: ObjectId, i: usize) -> u64 {
        self.root_word(id, i).load(Ordering::Acquire)
    }

    /// Atomically replaces root word `i` and persists it (one barrier).
    pub fn set_root(&self, id: ObjectId, i: usize, value: u64) -> Result<()> {
        self.writable()?;
        let w = self.root_word(id, i);
        w.store(value, Ordering::Release);
        self.persist(w as *const AtomicU64 as *const u8, 8);
        Ok(())
    }

    pub(crate) fn writable(&self) -> Result<()> {
        if self.inner.read_only {
            return Err(PmError::Invalid("the pool is open read-only".into()));
        }
        self.health()
    }

    fn record_io_failure(&self, msg: String) {
        let mut f = self
            .inner
            .io_failure
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        if f.is_none() {
            *f = Some(msg);
        }
    }

    /// `Err` once a write-back to the device has failed (msync mode): data
    /// written since may not be durable, so the pool refuses further metadata
    /// writes (object creation, root updates, chunk claims) with this error.
    pub fn health(&self) -> Result<()> {
        match &*self
            .inner
            .io_failure
            .lock()
            .unwrap_or_else(|e| e.into_inner())
        {
            None => Ok(()),
            Some(m) => Err(PmError::io(
                self.inner.path.clone().unwrap_or_default(),
                std::io::Error::other(m.clone()),
            )),
        }
    }

    /// Simulates a device failure (tests of the failure path).
    #[doc(hidden)]
    pub fn inject_io_failure(&self, msg: &str) {
        self.record_io_failure(msg.to_string());
    }

    /// All objects of the root directory.
    pub fn objects(&self) -> Vec<ObjectInfo> {
        (0..layout::DIR_ENTRIES)
            .filter_map(|i| {
                let e = self.entry_copy(i);
                (e.state == layout::ENTRY_VALID).then(|| ObjectInfo {
                    id: ObjectId(i as u16 + 1),
                    name: e.name_str(),
                    type_name: e.type_str(),
                    roots: e.roots,
                })
            })
            .collect()
    }

    /// Finds an object by name and checks its type.
    pub fn object(&self, name: &str, type_name: &str) -> Result<ObjectId> {
        let o = self
            .objects()
            .into_iter()
            .find(|o| o.name == name)
            .ok_or_else(|| PmError::NoSuchObject(name.into()))?;
        if o.type_name != type_name {
            return Err(PmError::WrongType {
                name: name.into(),
                found: o.type_name,
                expected: type_name.into(),
            });
        }
        Ok(o.id)
    }

    /// Creates an object with all root words zero. Crash-atomic: the entry becomes
    /// visible only when its state word is persisted.
    pub fn create_object(&self, name: &str, type_name: &str) -> Result<ObjectId> {
        self.writable()?;
        if name.is_empty() || name.len() > layout::MAX_NAME {
            return Err(PmError::Invalid(format!(
                "object names are 1 to {} bytes",
                layout::MAX_NAME
            )));
        }
        if type_name.is_empty() || type_name.len() > layout::MAX_TYPE_NAME {
            return Err(PmError::Invalid(format!(
                "type names are 1 to {} bytes",
                layout::MAX_TYPE_NAME
            )));
        }
        let _g = self.inner.dir_lock.lock().unwrap();
        let objs = self.objects();
        if objs.iter().any(|o| o.name == name) {
            return Err(PmError::ObjectExists(name.into()));
        }
        let i = (0..layout::DIR_ENTRIES)
            .find(|&i| self.state_word(i).load(Ordering::Acquire) == 0)
            .ok_or(PmError::DirectoryFull(layout::DIR_ENTRIES))?;
        let mut e = DirEntry {
            state: 0,
            roots: [0; layout::ROOT_WORDS],
            type_len: type_name.len() as u8,
            name_len: name.len() as u8,
            _pad: [0; 2],
            crc: 0,
            type_name: [0; layout::MAX_TYPE_NAME],
            name: [0; layout::MAX_NAME],
        };
        e.type_name[..type_name.len()].copy_from_slice(type_name.as_bytes());
        e.name[..name.len()].copy_from_slice(name.as_bytes());
        e.crc = e.compute_crc();
        let p = self.entry_ptr(i);
        // SAFETY: in-bounds, aligned entry that no one else uses (state 0, and the
        // directory lock is held).
        unsafe { p.write(e) };
        self.persist(p as *const u8, 128);
        self.state_word(i)
            .store(layout::ENTRY_VALID, Ordering::Release);
        self.persist(p as *const u8, 8);
        Ok(ObjectId(i as u16 + 1))
    }

    /// Finds the object or creates it; `true` when it was created.
    pub fn open_or_create_object(&self, name: &str, type_name: &str) -> Result<(ObjectId, bool)> {
        match self.object(name, type_name) {
            Ok(id) => Ok((id, false)),
            Err(PmError::NoSuchObject(_)) => Ok((self.create_object(name, type_name)?, true)),
            Err(e) => Err(e),
        }
    }

    /// Deletes an object and frees its chunks. Its heap must not be open.
    pub fn delete_object(&self, name: &str) -> Result<()> {
        self.writable()?;
        let _g = self.inner.dir_lock.lock().unwrap();
        let o = self
            .objects()
            .into_iter()
            .find(|o| o.name == name)
            .ok_or_else(|| PmError::NoSuchObject(name.into()))?;
        if self.inner.open_heaps.lock().unwrap().contains(&o.id.0) {
            return Err(PmError::HeapBusy(name.into()));
        }
        let i = o.id.index();
        self.state_word(i).store(0, Ordering::Release);
        self.persist(self.entry_ptr(i) as *const u8, 8);
        // The entry is gone durably; its chunks are now orphans. Free them now
        // (a crash here leaves orphans that the next open frees).
        let mut free = self.inner.free_chunks.lock().unwrap();
        for c in 0..self.inner.header.chunk_count as usize {
            let w = self.chunk_word(c);
            let e = ChunkEntry::decode(w.load(Ordering::Acquire));
            if e.kind != chunk_kind::FREE && e.owner == o.id.0 {
                w.store(0, Ordering::Release);
                self.flush(w as *const AtomicU64 as *const u8, 8);
                free.insert(c as u32);
            }
        }
        self.fence();
        Ok(())
    }

    // ----- chunks --------------------------------------------------------------------

    pub(crate) fn chunk_word(&self, i: usize) -> &AtomicU64 {
        assert!(i < self.inner.header.chunk_count as usize);
        let off = self.inner.header.chunk_table_off as usize + i * 8;
        // SAFETY: the chunk table lies inside the pool; entries are 8-byte aligned.
        unsafe { &*(self.inner.base.add(off) as *const AtomicU64) }
    }

    pub(crate) fn chunk_entry(&self, i: usize) -> ChunkEntry {
        ChunkEntry::decode(self.chunk_word(i).load(Ordering::Acquire))
    }

    /// Offset of chunk `i`'s first byte.
    pub(crate) fn chunk_off(&self, i: usize) -> u64 {
        self.inner.header.heap_off + i as u64 * self.inner.header.chunk_size
    }

    /// Chunk index holding pool offset `off`, if it is in the heap.
    pub(crate) fn chunk_of(&self, off: u64) -> Option<usize> {
        let h = &self.inner.header;
        if off < h.heap_off {
            return None;
        }
        let i = (off - h.heap_off) / h.chunk_size;
        (i < h.chunk_count).then_some(i as usize)
    }

    /// Claims `run` contiguous free chunks for `owner` and persists the claim.
    pub(crate) fn claim_chunks(
        &self,
        owner: u16,
        class: u8,
        run: usize,
        size_hint: usize,
    ) -> Result<usize> {
        self.writable()?;
        let mut free = self.inner.free_chunks.lock().unwrap();
        let start = if run == 1 {
            free.iter().next().copied()
        } else {
            let mut found = None;
            let mut cur_start = u32::MAX;
            let mut cur_len = 0usize;
            for &c in free.iter() {
                if cur_len > 0 && c == cur_start + cur_len as u32 {
                    cur_len += 1;
                } else {
                    cur_start = c;
                    cur_len = 1;
                }
                if cur_len == run {
                    found = Some(cur_start);
                    break;
                }
            }
            found
        };
        let Some(start) = start else {
            let total = self.inner.header.chunk_count * self.inner.header.chunk_size;
            let used =
                (self.inner.header.chunk_count - free.len() as u64) * self.inner.header.chunk_size;
            return Err(PmError::PoolFull {
                requested: size_hint,
                used,
                total,
            });
        };
        let start = start as usize;
        for k in 0..run {
            free.remove(&((start + k) as u32));
        }
        drop(free);
        let e = if run == 1 && class != u8::MAX {
            ChunkEntry {
                kind: chunk_kind::SMALL,
                class,
                owner,
                run: 0,
            }
        } else {
            ChunkEntry {
                kind: chunk_kind::LARGE_HEAD,
                class: 0,
                owner,
                run: run as u32,
            }
        };
        for k in 1..run {
            let tail = ChunkEntry {
                kind: chunk_kind::LARGE_TAIL,
                class: 0,
                owner,
                run: 0,
            };
            self.chunk_word(start + k)
                .store(tail.encode(), Ordering::Release);
        }
        self.chunk_word(start).store(e.encode(), Ordering::Release);
        self.flush(
            self.chunk_word(start) as *const AtomicU64 as *const u8,
            run * 8,
        );
        self.fence();
        Ok(start)
    }

    /// Returns chunks to the pool. No fence: if the release is lost in a crash,
    /// the chunks are unreachable and the next heap open frees them again.
    pub(crate) fn release_chunks(&self, start: usize, run: usize) {
        for k in (0..run).rev() {
            self.chunk_word(start + k).store(0, Ordering::Release);
        }
        self.flush(
            self.chunk_word(start) as *const AtomicU64 as *const u8,
            run * 8,
        );
        let mut free = self.inner.free_chunks.lock().unwrap();
        for k in 0..run {
            free.insert((start + k) as u32);
        }
    }

    /// Chunk usage: `(total, free)` chunk counts.
    pub fn chunk_usage(&self) -> (u64, u64) {
        (
            self.inner.header.chunk_count,
            self.inner.free_chunks.lock().unwrap().len() as u64,
        )
    }

    /// Chunks owned by each object, by directory index.
    pub fn chunks_by_owner(&self) -> Vec<(ObjectId, u64)> {
        let mut counts = vec![0u64; layout::DIR_ENTRIES + 1];
        for c in 0..self.inner.header.chunk_count as usize {
            let e = self.chunk_entry(c);
            if e.kind != chunk_kind::FREE && (e.owner as usize) <= layout::DIR_ENTRIES {
                counts[e.owner as usize] += 1;
            }
        }
        counts
            .iter()
            .enumerate()
            .skip(1)
            .filter(|(_, &n)| n > 0)
            .map(|(i, &n)| (ObjectId(i as u16), n))
            .collect()
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
