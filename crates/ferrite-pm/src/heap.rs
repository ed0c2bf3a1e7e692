//! The crash-consistent allocator.
//!
//! Design (see `docs/ARCHITECTURE.md`, "Allocator"): the pool hands whole chunks
//! to objects and records each claim in the persistent chunk table (one barrier per
//! chunk, i.e. per 256 KiB by default). Inside its chunks an object's [`Heap`] keeps
//! block state in DRAM only: allocating and freeing blocks issue no barrier at all.
//! On open, the structure *traces* what it can reach from its roots through a
//! [`Marker`]; every unmarked block is free. So a block is allocated after a crash
//! exactly when the structure's own persisted pointers reach it: a crash cannot leak
//! a block (unreachable means free) nor hand one out twice (reachable means used).
//!
//! The contract for structures:
//! * publish a block only by persisting a pointer to it, after persisting its
//!   contents;
//! * flush the store that unlinks a block before calling [`Heap::free`]; the heap
//!   does not reuse the block until the freeing thread's next fence, so the unlink
//!   is durable before the block can be overwritten.

use std::cell::RefCell;
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};

use crate::error::{PmError, Result};
use crate::layout::{self, chunk_kind, SIZE_CLASSES};
use crate::persist;
use crate::pool::{ObjectId, Pool};

const NCLASSES: usize = SIZE_CLASSES.len();
/// Blocks moved between a thread cache and the shared lists at a time.
const BATCH: usize = 32;

static NEXT_HEAP_UID: AtomicU64 = AtomicU64::new(1);

#[derive(Default)]
struct ClassState {
    free: Vec<u64>,
    /// Uncarved tail of the newest chunk: (next offset, end offset).
    bump: Option<(u64, u64)>,
}

struct HeapShared {
    pool: Pool,
    owner: u16,
    name: String,
    uid: u64,
    classes: Vec<Mutex<ClassState>>,
}

impl Drop for HeapShared {
    fn drop(&mut self) {
        if let Ok(mut h) = self.pool.inner.open_heaps.lock() {
            h.remove(&self.owner);
        }
    }
}

/// Per-thread block cache of one heap.
struct ThreadCache {
    heap: Weak<HeapShared>,
    free: [Vec<u64>; NCLASSES],
    /// Blocks freed by this thread, reusable after its next fence.
    limbo: Vec<(u64, u8)>,
    limbo_fence: u64,
}

impl ThreadCache {
    fn new(heap: &Arc<HeapShared>) -> ThreadCache {
        ThreadCache {
            heap: Arc::downgrade(heap),
            free: std::array::from_fn(|_| Vec::new()),
            limbo: Vec::new(),
            limbo_fence: 0,
        }
    }

    fn settle_limbo(&mut self) {
        if !self.limbo.is_empty() && persist::thread_fence_count() > self.limbo_fence {
            for (off, c) in self.limbo.drain(..) {
                self.free[c as usize].push(off);
            }
        }
    }
}

impl Drop for ThreadCache {
    fn drop(&mut self) {
        let Some(heap) = self.heap.upgrade() else {
            return;
        };
        if !self.limbo.is_empty() {
            // Make this thread's unlinking stores durable before others reuse.
            // If that fails (msync mode, failing device), the blocks are never
            // reused: the pool is poisoned and the next open traces them anyway.
            if heap.pool.fence().is_ok() {
                self.limbo_fence = 0;
                self.settle_limbo();
            }
        }
        for (c, list) in self.free.iter_mut().enumerate() {
            if !list.is_empty() {
                heap.classes[c].lock().unwrap().free.append(list);
            }
        }
    }
}

/// Heap uids are unique counters, so they hash as themselves.
#[derive(Default, Clone, Copy)]
struct UidHasher(u64);

impl std::hash::Hasher for UidHasher {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = self.0.rotate_left(8) ^ b as u64;
        }
    }
    fn write_u64(&mut self, v: u64) {
        self.0 = v;
    }
}

type CacheMap = HashMap<u64, ThreadCache, std::hash::BuildHasherDefault<UidHasher>>;

thread_local! {
    static CACHES: RefCell<CacheMap> = RefCell::new(CacheMap::default());
}

/// Where an object's blocks come from. Cloning shares the same heap.
#[derive(Clone)]
pub struct Heap {
    shared: Arc<HeapShared>,
}

/// What tracing found when a heap was opened.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct HeapStats {
    /// Chunks the object owns (after releasing empty ones).
    pub chunks: u64,
    /// Reachable blocks and their bytes (block sizes, not requested sizes).
    pub live_blocks: u64,
    pub live_bytes: u64,
    /// Chunks released to the pool because nothing in them was reachable.
    pub released_chunks: u64,
}

/// Marks reachable blocks while a heap is being opened.
pub struct Marker<'p> {
    pool: &'p Pool,
    owner: u16,
    name: String,
    /// Per chunk: mark bits (one per block; large heads use bit 0).
    marks: HashMap<usize, Vec<u64>>,
    live_blocks: u64,
    live_bytes: u64,
}

impl<'p> Marker<'p> {
    fn new(pool: &'p Pool, id: ObjectId, name: String) -> Marker<'p> {
        Marker {
            pool,
            owner: id.0,
            name,
            marks: HashMap::new(),
            live_blocks: 0,
            live_bytes: 0,
        }
    }

    /// Marks the block starting at `off`. Returns `Ok(true)` when newly marked,
    /// `Ok(false)` when it was already marked (so tracers of shared or cyclic
    /// structures can stop), and an error when `off` is not the start of a block
    /// of this object (a corrupt pointer).
    pub fn mark(&mut self, off: u64) -> Result<bool> {
        let (c, bit, bytes) = self.locate(off)?;
        let words = (self.pool.header().chunk_size / 64).div_ceil(64) as usize;
        let m = self.marks.entry(c).or_insert_with(|| vec![0; words]);
        let (w, b) = (bit / 64, bit % 64);
        if m[w] & (1 << b) != 0 {
            return Ok(false);
        }
        m[w] |= 1 << b;
        self.live_blocks += 1;
        self.live_bytes += bytes;
        Ok(true)
    }

    /// Checks, without marking, that `[off, off+len)` lies inside one block of
    /// this object that starts at `off`. Recovery calls it before it writes to
    /// a block it reached through a pointer read from PM, so a corrupt pointer
    /// can never make it write into another object's memory.
    pub fn check_block(&self, off: u64, len: u64) -> Result<()> {
        let (_, _, bytes) = self.locate(off)?;
        if len > bytes {
            return Err(PmError::CorruptObject {
                object: self.name.clone(),
                detail: format!("pointer {off:#x} names a {bytes}-byte block, expected {len}"),
            });
        }
        Ok(())
    }

    /// The chunk, block index and block size of the block starting at `off`.
    fn locate(&self, off: u64) -> Result<(usize, usize, u64)> {
        let corrupt = |detail: String| PmError::CorruptObject {
            object: self.name.clone(),
            detail,
        };
        let c = self
            .pool
            .chunk_of(off)
            .ok_or_else(|| corrupt(format!("pointer {off:#x} is outside the heap")))?;
        let e = self.pool.chunk_entry(c);
        if e.owner != self.owner || e.kind == chunk_kind::FREE {
            return Err(corrupt(format!(
                "pointer {off:#x} points into a chunk the object does not own"
            )));
        }
        let rel = off - self.pool.chunk_off(c);
        let (bit, bytes) = match e.kind {
            chunk_kind::SMALL => {
                let size = SIZE_CLASSES[e.class as usize] as u64;
                let per = self.pool.header().chunk_size / size;
                if !rel.is_multiple_of(size) || rel / size >= per {
                    return Err(corrupt(format!("pointer {off:#x} is not a block boundary")));
                }
                ((rel / size) as usize, size)
            }
            chunk_kind::LARGE_HEAD if rel == 0 => (0, e.run as u64 * self.pool.header().chunk_size),
            _ => return Err(corrupt(format!("pointer {off:#x} is not a block boundary"))),
        };
        Ok((c, bit, bytes))
    }

    /// The pool being traced (to read the structure's blocks).
    pub fn pool(&self) -> &Pool {
        self.pool
    }
}

impl Pool {
    fn object_info(&self, id: ObjectId) -> Result<crate::pool::ObjectInfo> {
        self.objects()
            .into_iter()
            .find(|o| o.id == id)
            .ok_or_else(|| PmError::Invalid(format!("object id {} does not exist", id.0)))
    }

    /// Traces object `id` without opening its heap (read-only pools too): checks
    /// that every pointer the tracer follows is a block of the object.
    pub fn verify_heap(
        &self,
        id: ObjectId,
        trace: impl FnOnce(&mut Marker<'_>) -> Result<()>,
    ) -> Result<HeapStats> {
        let info = self.object_info(id)?;
        let mut marker = Marker::new(self, id, info.name);
        trace(&mut marker)?;
        let chunks = self
            .chunks_by_owner()
            .into_iter()
            .find(|c| c.0 == id)
            .map_or(0, |c| c.1);
        Ok(HeapStats {
            chunks,
            live_blocks: marker.live_blocks,
            live_bytes: marker.live_bytes,
            released_chunks: 0,
        })
    }

    /// Opens the heap of object `id`: `trace` must mark every block the object
    /// reaches from its roots; everything else in its chunks becomes free. A heap
    /// can be open once at a time per object. On a read-only pool the trace
    /// validates the structure's pointers but nothing is released, and the
    /// heap refuses to allocate ([`PmError::ReadOnly`]).
    pub fn open_heap(
        &self,
        id: ObjectId,
        trace: impl FnOnce(&mut Marker<'_>) -> Result<()>,
    ) -> Result<(Heap, HeapStats)> {
        if !self.is_read_only() {
            self.writable()?;
        }
        let info = self.object_info(id)?;
        if !self.inner.open_heaps.lock().unwrap().insert(id.0) {
            return Err(PmError::HeapBusy(info.name));
        }
        let shared = Arc::new(HeapShared {
            pool: self.clone(),
            owner: id.0,
            name: info.name.clone(),
            uid: NEXT_HEAP_UID.fetch_add(1, Ordering::Relaxed),
            classes: (0..NCLASSES)
                .map(|_| Mutex::new(ClassState::default()))
                .collect(),
        });
        let mut marker = Marker::new(self, id, info.name);
        trace(&mut marker)?;
        let mut stats = HeapStats {
            live_blocks: marker.live_blocks,
            live_bytes: marker.live_bytes,
            ..HeapStats::default()
        };
        let cs = self.header().chunk_size;
        let mut c = 0;
        let n = self.header().chunk_count as usize;
        while c < n {
            let e = self.chunk_entry(c);
            if e.owner != id.0 || e.kind == chunk_kind::FREE {
                c += 1;
                continue;
            }
            let marks = marker.marks.get(&c);
            match e.kind {
                chunk_kind::SMALL => {
                    let size = SIZE_CLASSES[e.class as usize] as u64;
                    let per = (cs / size) as usize;
                    let marked = |b: usize| marks.is_some_and(|m| m[b / 64] & (1 << (b % 64)) != 0);
                    if (0..per).any(marked) {
                        stats.chunks += 1;
                        let base = self.chunk_off(c);
                        let mut cls = shared.classes[e.class as usize].lock().unwrap();
                        // Push in reverse so blocks are handed out in address order.
                        for b in (0..per).rev().filter(|&b| !marked(b)) {
                            cls.free.push(base + b as u64 * size);
                        }
                    } else {
                        if !self.is_read_only() {
                            self.release_chunks(c, 1);
                        }
                        stats.released_chunks += 1;
                    }
                    c += 1;
                }
                chunk_kind::LARGE_HEAD => {
                    let run = e.run as usize;
                    if marks.is_some() {
                        stats.chunks += run as u64;
                    } else {
                        if !self.is_read_only() {
                            self.release_chunks(c, run);
                        }
                        stats.released_chunks += run as u64;
                    }
                    c += run;
                }
                _ => c += 1, // tails of complete runs are skipped with their head
            }
        }
        Ok((Heap { shared }, stats))
    }
}

impl Heap {
    /// The pool this heap allocates from.
    pub fn pool(&self) -> &Pool {
        &self.shared.pool
    }

    /// Largest block this heap can hand out.
    pub fn max_alloc(&self) -> usize {
        let h = self.pool().header();
        (h.chunk_count * h.chunk_size) as usize
    }

    /// Allocates a block of at least `size` bytes and returns its pool offset.
    /// Blocks below 256 B are 64-byte aligned, larger ones 256-byte aligned.
    /// The contents are unspecified (previously freed data may remain). No
    /// persist barrier is issued except when a new chunk is claimed.
    pub fn alloc(&self, size: usize) -> Result<u64> {
        if self.pool().is_read_only() {
            return Err(PmError::ReadOnly);
        }
        if size == 0 {
            return Err(PmError::Invalid("zero-sized allocation".into()));
        }
        let cs = self.pool().header().chunk_size;
        match layout::class_for(size, cs) {
            Some(c) => self.alloc_small(c),
            None => {
                if size > self.max_alloc() {
                    return Err(PmError::TooLarge {
                        requested: size,
                        max: self.max_alloc(),
                    });
                }
                let run = (size as u64).div_ceil(cs) as usize;
                let start = self
                    .pool()
                    .claim_chunks(self.shared.owner, u8::MAX, run, size)?;
                Ok(self.pool().chunk_off(start))
            }
        }
    }

    /// Allocates a zero-filled block and persists the zeroes (one barrier), for
    /// structures that rely on zeroed memory (e.g. RAWL and PopLog logs).
    pub fn alloc_zeroed(&self, size: usize) -> Result<u64> {
        let off = self.alloc(size)?;
        let p = self.pool().at(off, size);
        let zeros = vec![0u8; size.min(1 << 20)];
        let mut done = 0;
        while done < size {
            let n = zeros.len().min(size - done);
            // SAFETY: off..off+size is a block of this heap (at checked bounds).
            self.pool().nt_copy(unsafe { p.add(done) }, &zeros[..n]);
            done += n;
        }
        self.pool().fence()?;
        Ok(off)
    }

    fn with_cache<R>(&self, f: impl FnOnce(&mut ThreadCache) -> R) -> R {
        CACHES.with(|m| {
            let mut m = m.borrow_mut();
            let uid = self.shared.uid;
            if m.len() >= 64 && !m.contains_key(&uid) {
                m.retain(|_, c| c.heap.strong_count() > 0);
            }
            f(m.entry(uid)
                .or_insert_with(|| ThreadCache::new(&self.shared)))
        })
    }

    fn alloc_small(&self, class: usize) -> Result<u64> {
        if let Some(off) = self.with_cache(|tc| {
            tc.settle_limbo();
            tc.free[class].pop()
        }) {
            return Ok(off);
        }
        let mut batch = [0u64; BATCH];
        let n = self.refill(class, &mut batch)?;
        self.with_cache(|tc| {
            tc.free[class].extend_from_slice(&batch[..n]);
            Ok(tc.free[class]
                .pop()
                .expect("refill returns at least one block"))
        })
    }

    /// Takes up to BATCH blocks from the shared list, carving or claiming
    /// chunks, into `out`; returns how many (at least one). Allocates nothing
    /// from the system allocator while the class lock is held: a writer
    /// blocked there in the allocator's own lock would hold up every writer
    /// of the class.
    fn refill(&self, class: usize, out: &mut [u64; BATCH]) -> Result<usize> {
        let size = SIZE_CLASSES[class] as u64;
        let mut cls = self.shared.classes[class].lock().unwrap();
        let take = cls.free.len().min(BATCH);
        let mut fresh = 0;
        while fresh + take < BATCH {
            match cls.bump {
                Some((next, end)) if next + size <= end => {
                    out[fresh] = next;
                    fresh += 1;
                    cls.bump = Some((next + size, end));
                }
                _ => {
                    if fresh + take > 0 {
                        break;
                    }
                    let c = self.pool().claim_chunks(
                        self.shared.owner,
                        class as u8,
                        1,
                        size as usize,
                    )?;
                    let start = self.pool().chunk_off(c);
                    cls.bump = Some((start, start + self.pool().header().chunk_size));
                }
            }
        }
        // Fresh blocks highest address first, the taken ones behind them: the
        // taken ones are popped first, then the fresh ones in address order.
        out[..fresh].reverse();
        let at = cls.free.len() - take;
        out[fresh..fresh + take].copy_from_slice(&cls.free[at..]);
        cls.free.truncate(at);
        Ok(fresh + take)
    }

    /// Frees the block at `off`. The caller must already have flushed the store
    /// that made the block unreachable; the block is reused only after this
    /// thread's next fence. Freeing a block twice or one that is still reachable
    /// is a bug in the caller that the heap cannot always detect.
    pub fn free(&self, off: u64) -> Result<()> {
        let pool = self.pool();
        if pool.is_read_only() {
            return Err(PmError::ReadOnly);
        }
        let bad = |d: &str| PmError::Invalid(format!("free({off:#x}): {d}"));
        let c = pool.chunk_of(off).ok_or_else(|| bad("not a heap offset"))?;
        let e = pool.chunk_entry(c);
        if e.owner != self.shared.owner {
            return Err(bad("block belongs to another object"));
        }
        let rel = off - pool.chunk_off(c);
        match e.kind {
            chunk_kind::SMALL => {
                if !rel.is_multiple_of(SIZE_CLASSES[e.class as usize] as u64) {
                    return Err(bad("not a block boundary"));
                }
                self.with_cache(|tc| {
                    if crate::tripwire::armed(crate::tripwire::Tripwire::HeapNoLimbo) {
                        tc.free[e.class as usize].push(off);
                        return;
                    }
                    // Blocks this thread freed before its last fence are
                    // reusable now: settle them here too, not only when this
                    // thread allocates — a thread that frees and seldom
                    // allocates (a clean-up thread) would otherwise hoard
                    // them in its limbo, out of every other thread's reach,
                    // and the pool would fill.
                    tc.settle_limbo();
                    tc.limbo.push((off, e.class));
                    tc.limbo_fence = persist::thread_fence_count();
                    for class in 0..NCLASSES {
                        if tc.free[class].len() > 4 * BATCH {
                            let list = &mut tc.free[class];
                            let rest = list.split_off(list.len() - 2 * BATCH);
                            let back = std::mem::replace(list, rest);
                            self.shared.classes[class].lock().unwrap().free.extend(back);
                        }
                    }
                });
                Ok(())
            }
            chunk_kind::LARGE_HEAD if rel == 0 => {
                // Chunks go back to the pool at once, so the caller's unlinking
                // store must be durable first: one fence. The release itself needs
                // none: if it is lost, the run is unreachable and the next open
                // frees it again.
                pool.fence()?;
                pool.release_chunks(c, e.run as usize);
                Ok(())
            }
            _ => Err(bad("not a block boundary")),
        }
    }

    /// Usable size of the block at `off` (its class or run size).
    pub fn block_size(&self, off: u64) -> Option<usize> {
        let pool = self.pool();
        let c = pool.chunk_of(off)?;
        let e = pool.chunk_entry(c);
        match e.kind {
            chunk_kind::SMALL => Some(SIZE_CLASSES[e.class as usize] as usize),
            chunk_kind::LARGE_HEAD => Some(e.run as usize * pool.header().chunk_size as usize),
            _ => None,
        }
    }

    /// Name of the object this heap belongs to.
    pub fn object_name(&self) -> &str {
        &self.shared.name
    }
}

impl Drop for Heap {
    fn drop(&mut self) {
        // Drop this thread's cache eagerly when the last handle goes, so that
        // opening many heaps in one thread (crash tests) does not accumulate caches.
        if Arc::strong_count(&self.shared) == 1 {
            let uid = self.shared.uid;
            let _ = CACHES.try_with(|m| {
                if let Ok(mut m) = m.try_borrow_mut() {
                    if let Some(mut tc) = m.remove(&uid) {
                        tc.heap = Weak::new();
                    }
                }
            });
        }
    }
}
