//! Ferrite's hybrid persistent range index: unsorted 256-byte leaves in PM
//! (see [`crate::leaf`]), inner nodes in DRAM rebuilt from the leaf chain on
//! open (see [`crate::inner`]).
//!
//! Concurrency: readers traverse the inner nodes with optimistic lock coupling
//! and are optimistic on the leaf too (per-leaf version lock read before and
//! validated after, plus a validation of the level-0 inner node after the leaf's
//! version was taken, see [`inner::Route::still_valid`]); writers lock one leaf
//! (two for the removal of an empty leaf or a merge of two sparse ones: the
//! second is only ever try-locked, under the structure mutex), and structure
//! modifications lock the inner nodes they change. Freed leaves and out-of-line blocks, and replaced
//! long-separator arrays of inner nodes, are reclaimed through `crossbeam-epoch`,
//! so a pinned reader never sees them reused.

use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crossbeam_epoch::{self as epoch, Guard};
use ferrite_pm::{Heap, Marker, ObjectId, PmError, Pool, PoolOptions};

use crate::inner::{prefix_of, Inner, SearchKey, Sep, Smo};
use crate::leaf::*;
use crate::vlock;
use ferrite_kv::{check_sizes, BatchOp, KvCursor, KvError, KvResult, OrderedKv, WriteBatch};

/// Type name of index objects in the pool's root directory.
pub const INDEX_TYPE: &str = "ferrite.index";
/// Root word: offset of the first (head) leaf.
const R_HEAD: usize = 0;
/// Root word: offset of a committed, not yet completed batch log (0 = none).
const R_LOG: usize = 1;
/// Root word: [`FORMAT_TAG`].
const R_FORMAT: usize = 2;

/// A delete that leaves a leaf with at most this many slots in use tries to
/// merge it with a neighbour.
const MERGE_TRIGGER: usize = SLOTS / 4;
/// A merge happens only when the two leaves use at most this many slots
/// together (so the merged leaf does not split again soon).
const MERGE_MAX: usize = SLOTS * 3 / 4;

const LOG_MAGIC: u64 = 0x4645_4958_4c4f_4731; // "FEIXLOG1"
const LOG_HDR: usize = 32;

/// Options of [`FerriteIndex::open_with`].
#[derive(Debug, Clone, Default)]
pub struct IndexOptions {
    /// Skip every write-back and fence (the "PM index on DRAM" mode). Set by
    /// [`FerriteIndex::volatile`]; on a durable pool it gives up crash safety.
    pub no_persist: bool,
}

/// What the last open rebuilt from the PM leaves.
#[derive(Debug, Clone, Copy, Default)]
pub struct RebuildStats {
    pub leaves: u64,
    pub keys: u64,
    /// Recovery (leaf walk, tracing, repairs) plus inner-node build.
    pub duration: Duration,
    /// Leaves repaired by recovery (interrupted split or merge, or cross-line
    /// update).
    pub repaired_leaves: u64,
    /// Empty leaves unlinked by recovery.
    pub unlinked_leaves: u64,
    /// True when a committed write batch was replayed.
    pub replayed_batch: bool,
}

/// Memory in use, for the VLDB'22 Table 3 comparison.
#[derive(Debug, Clone, Copy, Default)]
pub struct MemoryUsage {
    /// Inner nodes (DRAM).
    pub dram_bytes: u64,
    /// Chunks the index object owns in the pool (leaves, out-of-line keys and
    /// values, allocator slack). In volatile mode this pool is DRAM too.
    pub pm_bytes: u64,
    /// Leaves in use.
    pub leaves: u64,
}

const STRIPES: usize = 16;

#[repr(align(64))]
#[derive(Default)]
struct Stripe(AtomicI64);

#[repr(align(64))]
#[derive(Default)]
struct BatchSeq(AtomicU64);

/// Optimistic attempts before a read holds batches off with the batch mutex.
const ISOLATION_RETRIES: usize = 8;

/// Marks a batch as being applied (odd sequence) until dropped, even when the
/// batch fails half-way.
struct BatchWindow<'a>(&'a AtomicU64);

impl<'a> BatchWindow<'a> {
    fn open(seq: &'a AtomicU64) -> BatchWindow<'a> {
        seq.fetch_add(1, Ordering::Relaxed);
        // Orders the odd sequence before the batch's stores (seqlock writer).
        std::sync::atomic::fence(Ordering::Release);
        BatchWindow(seq)
    }
}

impl Drop for BatchWindow<'_> {
    fn drop(&mut self) {
        self.0.fetch_add(1, Ordering::Release);
    }
}

/// Scan results waiting for their read to be validated: the records' bytes and
/// each record's (key length, value length).
type ScanBuf = (Vec<u8>, Vec<(u32, u32)>);

/// Appends `s`; 8-byte slices (the common key and value) as one word store
/// instead of a call to `memcpy`, which dominated buffered scans.
#[inline(always)]
fn put_bytes(buf: &mut Vec<u8>, s: &[u8]) {
    match <&[u8; 8]>::try_from(s) {
        Ok(w) => buf.extend_from_slice(w),
        Err(_) => buf.extend_from_slice(s),
    }
}

thread_local! {
    /// See `scan`.
    static SCAN_BUF: std::cell::Cell<ScanBuf> = const {
        std::cell::Cell::new((Vec::new(), Vec::new()))
    };
}

static NEXT_STRIPE: AtomicUsize = AtomicUsize::new(0);
thread_local! {
    static MY_STRIPE: usize = NEXT_STRIPE.fetch_add(1, Ordering::Relaxed) % STRIPES;
}

/// Blocks whose epoch has passed, freed by the next writer.
#[derive(Default)]
struct Reclaim {
    ready: Mutex<Vec<u64>>,
    n: AtomicUsize,
    /// Retired and not yet freed (accounting checks count them as live).
    retired: Mutex<HashSet<u64>>,
}

/// The index. See the module documentation.
pub struct FerriteIndex {
    pool: Pool,
    heap: Heap,
    id: ObjectId,
    base: *mut u8,
    durable: bool,
    head: u64,
    /// DRAM inner nodes (with the mutex that serialises their changes).
    inner: Inner,
    /// Serialises write batches (one log root word).
    batch: Mutex<()>,
    /// Odd while a write batch is being applied (a sequence lock): reads that
    /// overlap a batch retry, so no reader sees part of a batch.
    batch_seq: BatchSeq,
    counts: Box<[Stripe]>,
    splits: AtomicUsize,
    unlinks: AtomicUsize,
    merges: AtomicUsize,
    /// Whether deletes merge sparse leaves (see [`Self::set_leaf_merging`]).
    merging: AtomicBool,
    reclaim: Arc<Reclaim>,
    rebuild: RebuildStats,
}

// SAFETY: `base` points into the mapping that `pool` (and `heap`) keep alive for
// the index's lifetime; concurrent access to PM words goes through atomics under
// the leaf-lock protocol; inner nodes are `Sync` on their own (see `inner`).
unsafe impl Send for FerriteIndex {}
// SAFETY: see above.
unsafe impl Sync for FerriteIndex {}

/// Holds a leaf's version lock; releases it on drop (bumping the version when
/// the leaf changed).
struct Locked {
    lf: Leaf,
    v: u64,
    dirty: bool,
    obsolete: bool,
}

impl Drop for Locked {
    fn drop(&mut self) {
        vlock::unlock(self.lf.lock_word(), self.v, self.dirty, self.obsolete);
    }
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum PutMode {
    Insert,
    Update,
    Upsert,
}

/// An encoded value: the slot word and its length code.
#[derive(Clone, Copy)]
struct Enc {
    word: u64,
    code: u8,
}

impl Enc {
    fn ool(&self) -> bool {
        self.code == CODE_OOL
    }
}

/// An entry as stored: narrow (key of at most 8 bytes, one slot) or wide (two
/// adjacent slots of one line, see [`KCODE_WIDE`]).
#[derive(Clone, Copy)]
struct Raw {
    /// First slot.
    slot: usize,
    /// Descriptor of the first slot (key code, value code).
    d: u8,
    fp: u8,
    /// Key bytes 0..8, big-endian, zero-padded.
    kw: u64,
    /// Wide keys: bytes 8..16, or the offset of the whole key when it is longer
    /// than 16 bytes.
    k2: u64,
    klen: u32,
    vw: u64,
}

impl Raw {
    #[inline]
    fn wide(&self) -> bool {
        kcode(self.d) == KCODE_WIDE
    }
    #[inline]
    fn key_ool(&self) -> bool {
        self.klen as usize > WIDE_INLINE_MAX
    }
    #[inline]
    fn val_ool(&self) -> bool {
        vcode(self.d) == CODE_OOL
    }
    /// Slot holding the value word.
    #[inline]
    fn vslot(&self) -> usize {
        if self.wide() {
            self.slot + 1
        } else {
            self.slot
        }
    }
    /// Comparison words: (bytes 0..8, bytes 8..16, length); equal words and both
    /// lengths above 16 need the full keys.
    #[inline]
    fn sort_words(&self, second: u64) -> (u64, u64, u32) {
        (self.kw, second, self.klen)
    }
}

/// The entry whose first slot is `slot` under headers `h`; None for a
/// continuation slot, a torn optimistic read or corruption.
#[inline]
fn read_raw(lf: Leaf, h: &[u64; LINES], slot: usize) -> Option<Raw> {
    let (l, s) = (slot / PER_LINE, slot % PER_LINE);
    let d = hdr_desc(h[l], s);
    let (kc, vc) = (kcode(d), vcode(d));
    if vc as usize > INLINE_MAX && vc != CODE_OOL {
        return None;
    }
    let fp = hdr_fp(h[l], s);
    if kc as usize <= INLINE_MAX {
        return Some(Raw {
            slot,
            d,
            fp,
            kw: lf.key_word(slot),
            k2: 0,
            klen: kc as u32,
            vw: lf.val_word(slot),
        });
    }
    if kc != KCODE_WIDE
        || s + 1 >= PER_LINE
        || hdr_valid(h[l]) & (2 << s) == 0
        || hdr_desc(h[l], s + 1) != DESC_CONT
    {
        return None;
    }
    let klen = lf.key_word(slot + 1);
    if klen <= INLINE_MAX as u64 || klen > MAX_KEY as u64 {
        return None;
    }
    Some(Raw {
        slot,
        d,
        fp,
        kw: lf.key_word(slot),
        k2: lf.val_word(slot),
        klen: klen as u32,
        vw: lf.val_word(slot + 1),
    })
}

/// Writes entry `r` at `slot` (its words, then its header bits into `h`; the
/// caller stores the header afterwards, so the line never shows the bits
/// without the words).
fn write_entry(lf: Leaf, h: &mut [u64; LINES], slot: usize, r: &Raw) {
    let (l, s) = (slot / PER_LINE, slot % PER_LINE);
    lf.set_key_word(slot, r.kw);
    if r.wide() {
        lf.set_val_word(slot, r.k2);
        lf.set_key_word(slot + 1, r.klen as u64);
        lf.set_val_word(slot + 1, r.vw);
        h[l] = hdr_set(hdr_set(h[l], s, r.d, r.fp), s + 1, DESC_CONT, r.fp);
    } else {
        lf.set_val_word(slot, r.vw);
        h[l] = hdr_set(h[l], s, r.d, r.fp);
    }
}

/// True when valid slot `slot` starts an entry (is not a continuation).
#[inline]
fn is_primary(h: &[u64; LINES], slot: usize) -> bool {
    let (l, s) = (slot / PER_LINE, slot % PER_LINE);
    hdr_valid(h[l]) & (1 << s) != 0 && hdr_desc(h[l], s) != DESC_CONT
}

/// Byte order of two keys given by their comparison words; `fa`, `fb` are the
/// full keys, read only when both are longer than 16 bytes.
#[inline]
fn cmp_words(a: (u64, u64, u32), b: (u64, u64, u32), fa: &[u8], fb: &[u8]) -> std::cmp::Ordering {
    (a.0, a.1).cmp(&(b.0, b.1)).then_with(|| {
        if a.2 as usize > WIDE_INLINE_MAX && b.2 as usize > WIDE_INLINE_MAX {
            fa.get(16..).unwrap_or(&[]).cmp(fb.get(16..).unwrap_or(&[]))
        } else {
            a.2.cmp(&b.2)
        }
    })
}

#[inline]
fn key_words(k: &[u8]) -> (u64, u64, u32) {
    (prefix_of(k), suffix_of(k), k.len() as u32)
}

/// Result of [`FerriteIndex::snapshot_narrow`].
enum Narrow {
    /// Every entry inline; the next leaf's offset.
    Done(u64),
    /// Some entry is wide or out of line: use the general snapshot.
    Mixed,
    /// Obsolete or changed meanwhile: restart.
    Retry,
}

enum UpdateOutcome {
    Done,
    NeedSplit,
}

/// Object name in corruption reports.
const OBJECT: &str = "ferrite index";

/// Corruption found by recovery, which runs inside the heap's tracer and so
/// reports in the PM layer's terms; [`pm`] turns it into [`KvError::Corrupt`].
fn corrupt(detail: String) -> PmError {
    PmError::CorruptObject {
        object: OBJECT.into(),
        detail,
    }
}

/// A PM-layer error as the index reports it: corruption (found by our
/// recovery, the heap's tracer or the pool) is [`KvError::Corrupt`], the one
/// spelling of corruption; everything else is [`KvError::Storage`].
fn pm(e: PmError) -> KvError {
    match e {
        PmError::CorruptObject { object, detail } => KvError::Corrupt { object, detail },
        PmError::BadPool(detail) => KvError::Corrupt {
            object: "pool".into(),
            detail,
        },
        e => KvError::storage(e),
    }
}

impl FerriteIndex {
    /// Opens the index object `name` in `pool` (creating it if absent); rebuilds
    /// DRAM inner nodes from the PM leaves.
    pub fn open_or_create(pool: &Pool, name: &str) -> KvResult<FerriteIndex> {
        Self::open_with(pool, name, &IndexOptions::default())
    }

    /// The same code in DRAM without write-backs or fences, on a volatile pool of
    /// `capacity` bytes.
    pub fn volatile(capacity: u64) -> KvResult<FerriteIndex> {
        let pool = Pool::create_volatile(
            capacity.max(ferrite_pm::layout::MIN_POOL),
            &PoolOptions::default(),
        )
        .map_err(pm)?;
        Self::open_with(&pool, "ferrite-dram", &IndexOptions { no_persist: true })
    }

    /// [`open_or_create`](Self::open_or_create) with options.
    pub fn open_with(pool: &Pool, name: &str, opts: &IndexOptions) -> KvResult<FerriteIndex> {
        let started = Instant::now();
        let (id, _) = pool.open_or_create_object(name, INDEX_TYPE).map_err(pm)?;
        let head = pool.root(id, R_HEAD);
        let log = pool.root(id, R_LOG);
        if head != 0 && pool.root(id, R_FORMAT) != FORMAT_TAG {
            return Err(KvError::Backend(format!(
                "index {name}: unsupported format tag {:#x} (this build reads {FORMAT_TAG:#x})",
                pool.root(id, R_FORMAT)
            )));
        }
        let durable = !opts.no_persist;
        let mut rec = Recovered::default();
        let (heap, _) = pool
            .open_heap(id, |m| recover(m, head, log, durable, &mut rec))
            .map_err(pm)?;
        let base = pool.base();
        let mut idx = FerriteIndex {
            pool: pool.clone(),
            heap,
            id,
            base,
            durable,
            head,
            inner: Inner::build(Vec::new()),
            batch: Mutex::new(()),
            batch_seq: BatchSeq::default(),
            counts: (0..STRIPES).map(|_| Stripe::default()).collect(),
            splits: AtomicUsize::new(0),
            unlinks: AtomicUsize::new(0),
            merges: AtomicUsize::new(0),
            merging: AtomicBool::new(true),
            reclaim: Arc::new(Reclaim::default()),
            rebuild: RebuildStats::default(),
        };
        if head == 0 {
            let off = idx.heap.alloc(LEAF_SIZE).map_err(pm)?;
            let lf = idx.leaf(off);
            init_leaf(lf, 0);
            lf.lock_word().store(0, Ordering::Relaxed);
            idx.flush(lf.line_ptr(0), LEAF_SIZE);
            idx.fence();
            pool.set_root(id, R_FORMAT, FORMAT_TAG).map_err(pm)?;
            pool.set_root(id, R_HEAD, off).map_err(pm)?;
            idx.head = off;
            rec.leaves = vec![(None, off)];
        }
        idx.counts[0].0.store(rec.keys as i64, Ordering::Relaxed);
        let nleaves = rec.leaves.len() as u64;
        idx.inner = Inner::build(std::mem::take(&mut rec.leaves));
        idx.rebuild = RebuildStats {
            leaves: nleaves,
            keys: rec.keys,
            duration: Duration::ZERO,
            repaired_leaves: rec.repaired,
            unlinked_leaves: rec.unlinked,
            replayed_batch: false,
        };
        if log != 0 {
            idx.replay_log(log)?;
            idx.rebuild.replayed_batch = true;
        }
        idx.rebuild.duration = started.elapsed();
        Ok(idx)
    }

    /// Leaves, keys and duration of the last open's rebuild.
    pub fn rebuild_stats(&self) -> RebuildStats {
        self.rebuild
    }

    /// DRAM and PM bytes in use.
    pub fn memory_usage(&self) -> MemoryUsage {
        let mut leaves = Vec::new();
        let dram = {
            // A consistent walk: no structure change while the mutex is held.
            let s = self.inner.lock();
            s.leaves(&mut leaves);
            s.bytes()
        };
        let cs = self.pool.header().chunk_size;
        let chunks = self
            .pool
            .chunks_by_owner()
            .into_iter()
            .find(|c| c.0 == self.id)
            .map_or(0, |c| c.1);
        MemoryUsage {
            dram_bytes: dram,
            pm_bytes: chunks * cs,
            leaves: leaves.len() as u64,
        }
    }

    /// Leaf splits, empty-leaf unlinks and leaf merges since this open.
    pub fn structure_stats(&self) -> (u64, u64, u64) {
        (
            self.splits.load(Ordering::Relaxed) as u64,
            self.unlinks.load(Ordering::Relaxed) as u64,
            self.merges.load(Ordering::Relaxed) as u64,
        )
    }

    /// Turns the merging of sparse leaves on (the default) or off (then only
    /// empty leaves are removed, as in FPTree): for tests and comparisons.
    pub fn set_leaf_merging(&self, on: bool) {
        self.merging.store(on, Ordering::Relaxed);
    }

    /// The pool the index lives in.
    pub fn pool(&self) -> &Pool {
        &self.pool
    }

    // ----- small helpers ---------------------------------------------------------

    #[inline]
    fn leaf(&self, off: u64) -> Leaf {
        Leaf {
            base: self.base,
            off,
        }
    }

    #[inline]
    fn flush(&self, p: *const u8, len: usize) {
        if self.durable {
            self.pool.flush(p, len);
        }
    }

    #[inline]
    fn flush_line(&self, lf: Leaf, line: usize) {
        self.flush(lf.line_ptr(line), 64);
    }

    #[inline]
    fn fence(&self) {
        if self.durable {
            self.pool.fence();
        }
    }

    fn count_add(&self, d: i64) {
        let s = MY_STRIPE.with(|s| *s);
        self.counts[s].0.fetch_add(d, Ordering::Relaxed);
    }

    /// An out-of-line block's bytes, bounds-checked (None when the offset or
    /// length is implausible: a torn optimistic read or corruption).
    #[inline]
    fn ool(&self, off: u64) -> Option<&[u8]> {
        ool_bytes(&self.pool, off)
    }

    fn free_later(&self, off: u64, g: &Guard) {
        self.reclaim
            .retired
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(off);
        let r = self.reclaim.clone();
        g.defer(move || {
            r.ready.lock().unwrap_or_else(|e| e.into_inner()).push(off);
            r.n.fetch_add(1, Ordering::Release);
        });
    }

    fn drain_reclaim(&self) {
        if self.reclaim.n.load(Ordering::Relaxed) == 0 {
            return;
        }
        let v = {
            let mut q = self.reclaim.ready.lock().unwrap_or_else(|e| e.into_inner());
            self.reclaim.n.store(0, Ordering::Relaxed);
            std::mem::take(&mut *q)
        };
        {
            let mut r = self
                .reclaim
                .retired
                .lock()
                .unwrap_or_else(|e| e.into_inner());
            for off in &v {
                r.remove(off);
            }
        }
        for off in v {
            // The unlinking store was flushed and fenced before the block was
            // retired, as Heap::free requires.
            let _ = self.heap.free(off);
        }
        if !self.durable {
            // The heap reuses a freed block after this thread's next fence;
            // volatile mode issues none otherwise.
            self.pool.fence();
        }
    }

    /// Frees what the epoch released and returns the blocks still retired.
    fn quiesce(&self) -> Vec<u64> {
        epoch::pin().flush();
        self.drain_reclaim();
        self.pool.fence();
        let r = self
            .reclaim
            .retired
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        r.iter().copied().collect()
    }

    /// Spins until `lf` is unlocked; its version, or None when it is obsolete.
    #[inline]
    fn read_begin(&self, lf: Leaf) -> Option<u64> {
        vlock::read_begin(lf.lock_word())
    }

    #[inline]
    fn validate(&self, lf: Leaf, v: u64) -> bool {
        vlock::validate(lf.lock_word(), v)
    }

    fn lock(&self, lf: Leaf) -> Option<Locked> {
        vlock::lock(lf.lock_word()).map(|v| Locked {
            lf,
            v,
            dirty: false,
            obsolete: false,
        })
    }

    fn try_lock(&self, lf: Leaf) -> Option<Locked> {
        vlock::try_lock(lf.lock_word()).map(|v| Locked {
            lf,
            v,
            dirty: false,
            obsolete: false,
        })
    }

    /// Locks the leaf whose range holds `sk`. Validating the route after the
    /// lock is taken makes the leaf the right one at that moment, and its range
    /// cannot change while it is locked (a split, removal or merge of it needs
    /// its lock, a removal or merge of its successor needs it as the locked
    /// predecessor).
    fn lock_for(&self, sk: &SearchKey<'_>, g: &Guard) -> Locked {
        loop {
            let rt = self.inner.route(sk, true, false, g);
            if let Some(l) = self.lock(self.leaf(rt.leaf)) {
                if rt.still_valid() {
                    return l;
                }
            }
        }
    }

    /// Whether entry `r` holds `sk`; the caller holds the leaf lock (or has
    /// validated the entry's words: an out-of-line key is dereferenced).
    #[inline]
    fn raw_eq(&self, r: &Raw, sk: &SearchKey<'_>) -> bool {
        if r.klen != sk.len || r.kw != sk.prefix {
            return false;
        }
        if !r.wide() {
            true
        } else if !r.key_ool() {
            r.k2 == suffix_of(sk.bytes)
        } else {
            self.ool(r.k2).is_some_and(|b| b == sk.bytes)
        }
    }

    /// The entry of `sk` in a leaf the caller has locked.
    fn find_locked(&self, lf: Leaf, sk: &SearchKey<'_>, fp: u8) -> Option<Raw> {
        let h = lf.hdrs();
        let mut m = match_leaf(&h, fp);
        while m != 0 {
            let slot = m.trailing_zeros() as usize;
            m &= m - 1;
            if let Some(r) = read_raw(lf, &h, slot) {
                if self.raw_eq(&r, sk) {
                    return Some(r);
                }
            }
        }
        None
    }

    /// Writes `bytes` to a new out-of-line block and flushes it (no fence).
    fn write_block(&self, bytes: &[u8]) -> KvResult<u64> {
        let off = self.heap.alloc(8 + bytes.len()).map_err(pm)?;
        let p = self.pool.at(off, 8 + bytes.len());
        // SAFETY: p..p+8+len is the freshly allocated block, unreachable by others.
        unsafe {
            std::ptr::write(p as *mut u64, bytes.len() as u64);
            std::ptr::copy_nonoverlapping(bytes.as_ptr(), p.add(8), bytes.len());
        }
        self.flush(p, 8 + bytes.len());
        Ok(off)
    }

    fn encode_value(&self, v: &[u8]) -> KvResult<Enc> {
        if v.len() <= INLINE_MAX {
            Ok(Enc {
                word: pack_inline(v),
                code: v.len() as u8,
            })
        } else {
            Ok(Enc {
                word: self.write_block(v)?,
                code: CODE_OOL,
            })
        }
    }

    /// A new entry for `key` and `value` (blocks written and flushed, not fenced).
    fn encode_entry(&self, key: &[u8], value: &[u8], fp: u8) -> KvResult<Raw> {
        let (kw, klen) = (prefix_of(key), key.len() as u32);
        let (kcode_, k2) = if key.len() <= INLINE_MAX {
            (key.len() as u8, 0)
        } else if key.len() <= WIDE_INLINE_MAX {
            (KCODE_WIDE, suffix_of(key))
        } else {
            (KCODE_WIDE, self.write_block(key)?)
        };
        let ve = match self.encode_value(value) {
            Ok(v) => v,
            Err(e) => {
                if key.len() > WIDE_INLINE_MAX {
                    self.discard(&[k2]);
                }
                return Err(e);
            }
        };
        Ok(Raw {
            slot: usize::MAX,
            d: desc(kcode_, ve.code),
            fp,
            kw,
            k2,
            klen,
            vw: ve.word,
        })
    }

    /// Frees blocks of an entry that was never published.
    fn discard_entry(&self, r: &Raw) {
        if r.key_ool() {
            self.discard(&[r.k2]);
        }
        if r.val_ool() {
            self.discard(&[r.vw]);
        }
    }

    /// Frees blocks that were never published.
    fn discard(&self, offs: &[u64]) {
        for &o in offs {
            let _ = self.heap.free(o);
        }
    }

    // ----- lookups ---------------------------------------------------------------

    fn lookup(&self, key: &[u8], out: &mut Vec<u8>) -> KvResult<bool> {
        check_sizes(key, None, MAX_KEY, MAX_VALUE)?;
        let sk = SearchKey::new(key);
        let fp = fingerprint(key);
        let g = epoch::pin();
        'retry: loop {
            let rt = self.inner.route(&sk, true, false, &g);
            let lf = self.leaf(rt.leaf);
            let Some(v) = self.read_begin(lf) else {
                continue;
            };
            let h = lf.hdrs();
            let mut m = match_leaf(&h, fp);
            let mut hit = None;
            while m != 0 {
                let slot = m.trailing_zeros() as usize;
                m &= m - 1;
                // A continuation slot or a torn read: skip (validated below).
                let Some(r) = read_raw(lf, &h, slot) else {
                    continue;
                };
                // The inline prefix is checked before any dereference.
                if r.klen != sk.len || r.kw != sk.prefix {
                    continue;
                }
                let eq = if !r.wide() {
                    true
                } else if !r.key_ool() {
                    r.k2 == suffix_of(key)
                } else {
                    // Dereference only words of a consistent version: the block
                    // is then live until our epoch ends.
                    if !self.validate(lf, v) {
                        continue 'retry;
                    }
                    self.ool(r.k2).is_some_and(|b| b == key)
                };
                if eq {
                    hit = Some(r);
                    break;
                }
            }
            // The leaf's version was taken before these checks: a validated
            // route means no split moved the key out of this leaf before we read
            // it (see `Route::still_valid`).
            let Some(r) = hit else {
                if self.validate(lf, v) && rt.still_valid() {
                    return Ok(false);
                }
                continue;
            };
            if !self.validate(lf, v) || !rt.still_valid() {
                continue;
            }
            out.clear();
            let vc = vcode(r.d) as usize;
            if vc <= INLINE_MAX {
                out.extend_from_slice(&r.vw.to_le_bytes()[..vc]);
            } else {
                match self.ool(r.vw) {
                    Some(b) => out.extend_from_slice(b),
                    None => continue,
                }
            }
            return Ok(true);
        }
    }

    /// Entries of a leaf at a consistent version when every key and value is
    /// inline (at most 8 bytes), as (sort word, value word): the sort word packs
    /// key word, key length, value length and slot, so sorting it sorts by key
    /// (keys of a leaf are distinct). Cheaper than [`Self::snapshot`] for the
    /// 8-byte keys scans see most.
    fn snapshot_narrow(&self, lf: Leaf, out: &mut Vec<(u128, u64)>) -> Narrow {
        let Some(v) = self.read_begin(lf) else {
            return Narrow::Retry;
        };
        out.clear();
        let h = lf.hdrs();
        for (l, &hl) in h.iter().enumerate() {
            let mut valid = hdr_valid(hl);
            while valid != 0 {
                let s = valid.trailing_zeros() as usize;
                valid &= valid - 1;
                let d = hdr_desc(hl, s);
                let (kc, vc) = (kcode(d), vcode(d));
                if kc as usize > INLINE_MAX || vc as usize > INLINE_MAX {
                    // Wide, out-of-line or torn: the general path decides.
                    return Narrow::Mixed;
                }
                let slot = l * PER_LINE + s;
                let w = (u128::from(lf.key_word(slot)) << 64)
                    | (u128::from(kc) << 16)
                    | (u128::from(vc) << 8)
                    | slot as u128;
                out.push((w, lf.val_word(slot)));
            }
        }
        let next = lf.next();
        if self.validate(lf, v) {
            Narrow::Done(next)
        } else {
            Narrow::Retry
        }
    }

    /// Valid entries of a leaf at a consistent version (None: retry).
    fn snapshot(&self, lf: Leaf, out: &mut Vec<Raw>) -> Option<u64> {
        let v = self.read_begin(lf)?;
        out.clear();
        let h = lf.hdrs();
        for slot in 0..SLOTS {
            if is_primary(&h, slot) {
                if let Some(r) = read_raw(lf, &h, slot) {
                    out.push(r);
                }
            }
        }
        let next = lf.next();
        self.validate(lf, v).then_some(next)
    }

    /// Key bytes of a validated entry; `buf` holds inline bytes.
    #[inline]
    fn raw_key<'a>(&'a self, r: &Raw, buf: &'a mut [u8; 16]) -> Option<&'a [u8]> {
        if r.key_ool() {
            let b = self.ool(r.k2)?;
            return (b.len() == r.klen as usize).then_some(b);
        }
        buf[..8].copy_from_slice(&r.kw.to_be_bytes());
        buf[8..].copy_from_slice(&r.k2.to_be_bytes());
        Some(&buf[..r.klen as usize])
    }

    fn raw_value<'a>(&'a self, r: &Raw, buf: &'a mut [u8; 8]) -> Option<&'a [u8]> {
        let vc = vcode(r.d) as usize;
        if vc <= INLINE_MAX {
            *buf = r.vw.to_le_bytes();
            Some(&buf[..vc])
        } else {
            self.ool(r.vw)
        }
    }

    /// Comparison words of a validated entry.
    #[inline]
    fn raw_words(&self, r: &Raw) -> Option<(u64, u64, u32)> {
        let second = if !r.wide() {
            0
        } else if !r.key_ool() {
            r.k2
        } else {
            suffix_of(self.ool(r.k2)?)
        };
        Some(r.sort_words(second))
    }

    /// Full key of an entry longer than 16 bytes (for ties of comparison words).
    #[inline]
    fn long_key(&self, r: &Raw) -> &[u8] {
        if r.key_ool() {
            self.ool(r.k2).unwrap_or(&[])
        } else {
            &[]
        }
    }

    /// Sorts validated raw entries by key into `order` as (words, index).
    fn sort_raw(&self, raws: &[Raw], order: &mut Vec<((u64, u64, u32), usize)>) -> Option<()> {
        order.clear();
        let mut any_long = false;
        for (i, r) in raws.iter().enumerate() {
            any_long |= r.key_ool();
            order.push((self.raw_words(r)?, i));
        }
        if !any_long {
            order.sort_unstable_by_key(|o| o.0);
            return Some(());
        }
        order.sort_unstable_by(|a, b| {
            cmp_words(
                a.0,
                b.0,
                self.long_key(&raws[a.1]),
                self.long_key(&raws[b.1]),
            )
        });
        Some(())
    }

    /// Runs the read `f` so that it sees each write batch entirely or not at
    /// all: it is retried when a batch was applied meanwhile (a sequence lock),
    /// and after [`ISOLATION_RETRIES`] attempts it holds batches off instead.
    fn isolated<T>(&self, mut f: impl FnMut() -> KvResult<T>) -> KvResult<T> {
        let seq = &self.batch_seq.0;
        for _ in 0..ISOLATION_RETRIES {
            let s = seq.load(Ordering::Acquire);
            if s & 1 == 1 {
                std::hint::spin_loop();
                continue;
            }
            let r = f()?;
            // Orders f's reads before the re-check (seqlock reader).
            std::sync::atomic::fence(Ordering::Acquire);
            if seq.load(Ordering::Relaxed) == s {
                return Ok(r);
            }
        }
        let _b = self.batch.lock().unwrap_or_else(|e| e.into_inner());
        f()
    }

    fn scan_impl<F: FnMut(&[u8], &[u8]) + ?Sized>(
        &self,
        start: &[u8],
        inclusive: bool,
        n: usize,
        f: &mut F,
    ) -> KvResult<usize> {
        if n == 0 {
            return Ok(0);
        }
        let g = epoch::pin();
        let mut resume = start.to_vec();
        let mut incl = inclusive;
        let mut done = 0;
        let mut raws = Vec::with_capacity(SLOTS);
        let mut order = Vec::with_capacity(SLOTS);
        let mut packed: Vec<(u128, u64)> = Vec::with_capacity(SLOTS);
        'outer: loop {
            let sk = SearchKey::new(&resume);
            let sw = key_words(&resume);
            let rt = self.inner.route(&sk, true, false, &g);
            let mut off = rt.leaf;
            // The leaves that follow in the level-0 node are (almost always) the
            // next ones of the chain: start loading those the scan will need, so
            // their misses overlap instead of being paid one by one.
            for j in 1..=(n / (SLOTS / 2) + 1).min(8) {
                match rt.leaf_after(j) {
                    Some(o) if self.pool.contains(o, LEAF_SIZE) => self.leaf(o).prefetch(),
                    _ => break,
                }
            }
            // Only the first leaf of a pass holds keys below the start: the
            // chain is in key order.
            let mut filter = true;
            loop {
                let lf = self.leaf(off);
                let fast = match self.snapshot_narrow(lf, &mut packed) {
                    Narrow::Retry => continue 'outer,
                    Narrow::Done(next) => Some(next),
                    Narrow::Mixed => None,
                };
                let next = match fast {
                    Some(next) => next,
                    None => match self.snapshot(lf, &mut raws) {
                        Some(next) => next,
                        None => continue 'outer,
                    },
                };
                // The first leaf must be the one holding the start key: a split
                // that moved it right would otherwise let the unfiltered next
                // leaf emit keys below the start. Later leaves come from the
                // chain, which is always complete and in order.
                if filter && !rt.still_valid() {
                    continue 'outer;
                }
                if fast.is_some() {
                    // Every key and value inline (the common case of 8-byte
                    // keys): one packed word per entry is sorted.
                    let low = filter.then(|| {
                        let (p, _, l) = sw;
                        let bound = (u128::from(p) << 64) | (u128::from(l) << 16);
                        if incl {
                            bound
                        } else {
                            bound | 0xffff
                        }
                    });
                    packed.sort_unstable_by_key(|e| e.0);
                    let mut last = None;
                    for &(w, vw) in packed.iter() {
                        if low.is_some_and(|b| w < b) {
                            continue;
                        }
                        let (kw, klen, vlen) = ((w >> 64) as u64, (w >> 16) as u8, (w >> 8) as u8);
                        let kb = kw.to_be_bytes();
                        let vb = vw.to_le_bytes();
                        f(&kb[..klen as usize], &vb[..vlen as usize]);
                        done += 1;
                        last = Some((kw, klen));
                        if done == n {
                            return Ok(done);
                        }
                    }
                    if let Some((kw, klen)) = last {
                        resume.clear();
                        resume.extend_from_slice(&kw.to_be_bytes()[..klen as usize]);
                        incl = false;
                    }
                    filter = false;
                    if next == 0 {
                        return Ok(done);
                    }
                    off = next;
                    continue;
                }
                if self.sort_raw(&raws, &mut order).is_none() {
                    continue 'outer;
                }
                let mut last: Option<usize> = None;
                for &(w, i) in order.iter() {
                    let r = &raws[i];
                    let (mut kb, mut vb) = ([0u8; 16], [0u8; 8]);
                    let (Some(key), Some(val)) =
                        (self.raw_key(r, &mut kb), self.raw_value(r, &mut vb))
                    else {
                        continue 'outer;
                    };
                    if filter {
                        let c = cmp_words(w, sw, key, &resume);
                        if c == std::cmp::Ordering::Less
                            || (c == std::cmp::Ordering::Equal && !incl)
                        {
                            continue;
                        }
                    }
                    f(key, val);
                    done += 1;
                    last = Some(i);
                    if done == n {
                        return Ok(done);
                    }
                }
                if let Some(i) = last {
                    // Where a restarted pass resumes.
                    let mut kb = [0u8; 16];
                    if let Some(key) = self.raw_key(&raws[i], &mut kb) {
                        resume.clear();
                        resume.extend_from_slice(key);
                        incl = false;
                    }
                }
                filter = false;
                if next == 0 {
                    return Ok(done);
                }
                off = next;
            }
        }
    }

    /// The entry with the largest key < `bound` (or the largest of all).
    fn prev_entry(&self, bound: Option<&[u8]>) -> KvResult<Option<(Vec<u8>, Vec<u8>)>> {
        let g = epoch::pin();
        let top = [0xffu8; MAX_KEY + 1];
        let mut b: Vec<u8> = bound.map_or_else(|| top.to_vec(), |b| b.to_vec());
        let mut raws = Vec::with_capacity(SLOTS);
        let mut order = Vec::with_capacity(SLOTS);
        'outer: loop {
            let sk = SearchKey::new(&b);
            let mut rt = self.inner.route(&sk, false, true, &g);
            let low = rt.low.take();
            let lf = self.leaf(rt.leaf);
            if self.snapshot(lf, &mut raws).is_none() || !rt.still_valid() {
                continue;
            }
            if self.sort_raw(&raws, &mut order).is_none() {
                continue;
            }
            let bw = key_words(&b);
            for &(w, i) in order.iter().rev() {
                let r = &raws[i];
                let (mut kb, mut vb) = ([0u8; 16], [0u8; 8]);
                let (Some(key), Some(val)) = (self.raw_key(r, &mut kb), self.raw_value(r, &mut vb))
                else {
                    continue 'outer;
                };
                if cmp_words(w, bw, key, &b) == std::cmp::Ordering::Less {
                    return Ok(Some((key.to_vec(), val.to_vec())));
                }
            }
            match low {
                None => return Ok(None),
                Some(s) => b = s.to_vec(),
            }
        }
    }

    // ----- writes ------------------------------------------------------------------

    fn put(&self, key: &[u8], value: &[u8], mode: PutMode) -> KvResult<bool> {
        check_sizes(key, Some(value), MAX_KEY, MAX_VALUE)?;
        self.drain_reclaim();
        let sk = SearchKey::new(key);
        let fp = fingerprint(key);
        let g = epoch::pin();
        loop {
            let mut lk = self.lock_for(&sk, &g);
            let lf = lk.lf;
            match self.find_locked(lf, &sk, fp) {
                Some(r) => {
                    if mode == PutMode::Insert {
                        return Ok(false);
                    }
                    match self.update_slot(lf, r, value, &mut lk, &g)? {
                        UpdateOutcome::Done => return Ok(mode == PutMode::Update),
                        UpdateOutcome::NeedSplit => {
                            self.split(&mut lk, None, &g)?;
                        }
                    }
                }
                None => {
                    if mode == PutMode::Update {
                        return Ok(false);
                    }
                    let e = self.encode_entry(key, value, fp)?;
                    if e.key_ool() || e.val_ool() {
                        // Blocks are durable before the entry that publishes them.
                        self.fence();
                    }
                    if let Err(err) = self.insert_entry(&mut lk, &e, &g) {
                        self.discard_entry(&e);
                        return Err(err);
                    }
                    self.count_add(1);
                    return Ok(true);
                }
            }
        }
    }

    /// Inserts a new entry into the locked leaf (whose range holds its key),
    /// splitting it when there is no room.
    fn insert_entry(&self, lk: &mut Locked, e: &Raw, g: &Guard) -> KvResult<()> {
        let lf = lk.lf;
        loop {
            let mut h = lf.hdrs();
            if let Some(slot) = find_space(&h, e.wide()) {
                let l = slot / PER_LINE;
                write_entry(lf, &mut h, slot, e);
                lf.set_hdr(l, h[l]);
                self.flush_line(lf, l);
                self.fence();
                lk.dirty = true;
                return Ok(());
            }
            // The split places the entry unless it belongs in this leaf and no
            // room opened up for it here; then try again (still locked, the key
            // still belongs here).
            if self.split(lk, Some(*e), g)? {
                return Ok(());
            }
        }
    }

    /// Splits the locked leaf in two (LB+-Tree-style logless split with one
    /// sibling pointer; recovery drops the stale upper half if the split was
    /// interrupted) and inserts `new` into the proper half when there is room.
    /// Returns whether `new` (if any) was placed.
    fn split(&self, lk: &mut Locked, new: Option<Raw>, g: &Guard) -> KvResult<bool> {
        let lf = lk.lf;
        let bad = || KvError::corrupt(OBJECT, format!("leaf {:#x}: malformed entry", lf.off));
        let h = lf.hdrs();
        let mut raws = Vec::with_capacity(SLOTS);
        for slot in 0..SLOTS {
            if is_primary(&h, slot) {
                raws.push(read_raw(lf, &h, slot).ok_or_else(bad)?);
            }
        }
        if raws.len() < 2 {
            return Err(KvError::corrupt(
                OBJECT,
                format!("leaf {:#x}: split of a leaf with < 2 entries", lf.off),
            ));
        }
        let mut order = Vec::with_capacity(SLOTS);
        self.sort_raw(&raws, &mut order).ok_or_else(bad)?;
        // Move the upper half, or less when its wide entries (two slots of one
        // line each) would not fit an empty leaf.
        let fits = |mid: usize, extra: Option<&Raw>| {
            let rs = order[mid..].iter().map(|o| &raws[o.1]).chain(extra);
            let (mut wides, mut slots) = (0, 0);
            for r in rs {
                wides += r.wide() as usize;
                slots += 1 + r.wide() as usize;
            }
            wides <= LINES && slots <= SLOTS
        };
        let mut mid = raws.len() / 2;
        let (split_key, new_right) = loop {
            let split_key = {
                let mut kb = [0u8; 16];
                self.raw_key(&raws[order[mid].1], &mut kb)
                    .ok_or_else(bad)?
                    .to_vec()
            };
            let new_right = match &new {
                Some(n) => {
                    let mut kb = [0u8; 16];
                    let k = self.raw_key(n, &mut kb).ok_or_else(bad)?;
                    cmp_words(key_words(k), key_words(&split_key), k, &split_key)
                        != std::cmp::Ordering::Less
                }
                None => false,
            };
            if fits(mid, new.as_ref().filter(|_| new_right)) || mid + 1 >= raws.len() {
                break (split_key, new_right);
            }
            mid += 1;
        };
        let off = self.heap.alloc(LEAF_SIZE).map_err(pm)?;
        let nl = self.leaf(off);
        init_leaf(nl, lf.next());
        nl.lock_word().store(1, Ordering::Relaxed);
        let mut moved: Vec<Raw> = order[mid..].iter().map(|o| raws[o.1]).collect();
        if new_right {
            if let Some(n) = new {
                moved.push(n);
            }
        }
        // Wide entries first: each needs two slots of one line.
        moved.sort_by_key(|r| !r.wide());
        let mut nh = [0u64; LINES];
        for r in &moved {
            let slot = find_space(&nh, r.wide()).ok_or_else(|| {
                KvError::corrupt(
                    OBJECT,
                    format!("split of leaf {:#x}: entries do not fit a leaf", lf.off),
                )
            })?;
            write_entry(nl, &mut nh, slot, r);
        }
        for (l, &x) in nh.iter().enumerate() {
            nl.set_hdr(l, x);
        }
        self.flush(nl.line_ptr(0), LEAF_SIZE);
        self.fence();
        // Publish the new leaf: one 8-byte store.
        lf.w(W_NEXT).store(off, Ordering::Release);
        self.flush_line(lf, 0);
        self.fence();
        // Drop the moved entries here. Headers are stored before a freed slot is
        // reused, so no image of a line shows old bits over new words.
        let mut hh = h;
        for o in &order[mid..] {
            let r = &raws[o.1];
            clear_entry(&mut hh, r.slot, r.wide());
        }
        for l in 0..LINES {
            if hh[l] != h[l] {
                lf.set_hdr(l, hh[l]);
            }
        }
        let mut placed = new.is_none() || new_right;
        if !new_right {
            if let Some(n) = new {
                if let Some(slot) = find_space(&hh, n.wide()) {
                    let l = slot / PER_LINE;
                    write_entry(lf, &mut hh, slot, &n);
                    lf.set_hdr(l, hh[l]);
                    placed = true;
                }
            }
        }
        for l in 0..LINES {
            if hh[l] != h[l] {
                self.flush_line(lf, l);
            }
        }
        self.fence();
        lk.dirty = true;
        // The separator goes into the inner nodes while this leaf is still
        // locked (the caller unlocks it): that is what lets a reader's check of
        // the level-0 node after taking the leaf's version catch this split (see
        // `Route::still_valid`).
        self.inner.lock().insert(Sep::from_key(&split_key), off, g);
        nl.lock_word().store(4, Ordering::Release);
        self.splits.fetch_add(1, Ordering::Relaxed);
        Ok(placed)
    }

    /// Replaces the value of entry `r` in the locked leaf.
    fn update_slot(
        &self,
        lf: Leaf,
        r: Raw,
        value: &[u8],
        lk: &mut Locked,
        g: &Guard,
    ) -> KvResult<UpdateOutcome> {
        let l = r.slot / PER_LINE;
        let old_vc = vcode(r.d);
        let ne = self.encode_value(value)?;
        if ne.code == old_vc && !ne.ool() {
            // Same inline length: one atomic 8-byte store.
            lf.set_val_word(r.vslot(), ne.word);
            self.flush_line(lf, l);
            self.fence();
            lk.dirty = true;
            return Ok(UpdateOutcome::Done);
        }
        if ne.ool() {
            self.fence();
        }
        if ne.ool() && old_vc == CODE_OOL {
            lf.set_val_word(r.vslot(), ne.word);
            self.flush_line(lf, l);
            self.fence();
            lk.dirty = true;
            self.free_later(r.vw, g);
            return Ok(UpdateOutcome::Done);
        }
        // The length code changes: write the entry anew into free slots, then
        // switch validity.
        let mut nr = r;
        nr.d = desc(kcode(r.d), ne.code);
        nr.vw = ne.word;
        let mut h = lf.hdrs();
        let mut line_only = [u64::MAX; LINES];
        line_only[l] = h[l];
        if let Some(ns) = find_space(&line_only, r.wide()) {
            // Same line: one header store flips both entries.
            write_entry(lf, &mut h, ns, &nr);
            clear_entry(&mut h, r.slot, r.wide());
            lf.set_hdr(l, h[l]);
            self.flush_line(lf, l);
            self.fence();
        } else {
            // Another line: a pending-move word makes the switch recoverable.
            let Some(ns) = find_space(&h, r.wide()) else {
                if ne.ool() {
                    self.discard(&[ne.word]);
                }
                return Ok(UpdateOutcome::NeedSplit);
            };
            let nl_ = ns / PER_LINE;
            lf.w(W_PENDING).store(
                PENDING_MARK | r.slot as u64 | (ns as u64) << 8,
                Ordering::Release,
            );
            self.flush_line(lf, W_PENDING / LINE_WORDS);
            self.fence();
            write_entry(lf, &mut h, ns, &nr);
            lf.set_hdr(nl_, h[nl_]);
            self.flush_line(lf, nl_);
            self.fence();
            clear_entry(&mut h, r.slot, r.wide());
            lf.set_hdr(l, h[l]);
            self.flush_line(lf, l);
            self.fence();
            lf.w(W_PENDING).store(0, Ordering::Release);
            self.flush_line(lf, W_PENDING / LINE_WORDS);
            self.fence();
        }
        lk.dirty = true;
        if old_vc == CODE_OOL {
            self.free_later(r.vw, g);
        }
        Ok(UpdateOutcome::Done)
    }

    fn delete(&self, key: &[u8]) -> KvResult<bool> {
        check_sizes(key, None, MAX_KEY, MAX_VALUE)?;
        self.drain_reclaim();
        let sk = SearchKey::new(key);
        let fp = fingerprint(key);
        let g = epoch::pin();
        let mut lk = self.lock_for(&sk, &g);
        let lf = lk.lf;
        let Some(r) = self.find_locked(lf, &sk, fp) else {
            return Ok(false);
        };
        let l = r.slot / PER_LINE;
        let mut h = lf.hdrs();
        clear_entry(&mut h, r.slot, r.wide());
        lf.set_hdr(l, h[l]);
        self.flush_line(lf, l);
        self.fence();
        lk.dirty = true;
        self.count_add(-1);
        if r.key_ool() {
            self.free_later(r.k2, &g);
        }
        if r.val_ool() {
            self.free_later(r.vw, &g);
        }
        let used = lf.valid_mask().count_ones() as usize;
        if lf.off != self.head && used == 0 {
            self.unlink_empty(&mut lk, &sk, &g);
        } else if used != 0
            && used <= MERGE_TRIGGER
            && self.merging.load(Ordering::Relaxed)
            && !self.merge_right(&mut lk, &g)
        {
            self.merge_left(&mut lk, &sk, &g);
        }
        Ok(true)
    }

    /// Merges the locked, sparse leaf's successor into it (see [`Self::merge`]).
    fn merge_right(&self, lk: &mut Locked, g: &Guard) -> bool {
        let next = lk.lf.next();
        if next == 0 {
            return false;
        }
        let mut s = self.inner.lock();
        // The successor cannot change while `lk` is held (a split of this leaf,
        // an unlink or a merge of its successor all need this leaf's lock).
        let Some(mut rlk) = self.try_lock(self.leaf(next)) else {
            return false;
        };
        self.merge(lk, &mut rlk, &mut s, g)
    }

    /// Merges the locked, sparse leaf into its predecessor (see [`Self::merge`]).
    fn merge_left(&self, lk: &mut Locked, sk: &SearchKey<'_>, g: &Guard) -> bool {
        let mut s = self.inner.lock();
        let Some((mut plk, _)) = self.lock_predecessor(lk.lf, sk, g) else {
            return false;
        };
        self.merge(&mut plk, lk, &mut s, g)
    }

    /// The locked leaf `lf`'s predecessor, try-locked (never waited for), and
    /// `lf`'s low key, found by routing `sk` (a key of `lf`); None when `lf` is
    /// the first leaf, the lock is taken, or the chain does not match. The
    /// caller holds the structure mutex, so the routes are the current tree.
    fn lock_predecessor(
        &self,
        lf: Leaf,
        sk: &SearchKey<'_>,
        g: &Guard,
    ) -> Option<(Locked, Vec<u8>)> {
        let r = self.inner.route(sk, true, true, g);
        if r.leaf != lf.off {
            return None;
        }
        let low = r.low?.to_vec();
        let p = self
            .inner
            .route(&SearchKey::new(&low), false, false, g)
            .leaf;
        if p == lf.off {
            return None;
        }
        let plk = self.try_lock(self.leaf(p))?;
        (plk.lf.next() == lf.off).then_some((plk, low))
    }

    /// Drops `right` from the chain after `left` (both locked, `left.next ==
    /// right`, its separator already removed): one persisted 8-byte store,
    /// then `right` is marked obsolete and its block retired.
    fn drop_from_chain(&self, left: &mut Locked, right: &mut Locked, g: &Guard) {
        let lf = left.lf;
        lf.w(W_NEXT).store(right.lf.next(), Ordering::Release);
        self.flush_line(lf, 0);
        self.fence();
        left.dirty = true;
        right.obsolete = true;
        self.free_later(right.lf.off, g);
    }

    /// Moves every entry of `right` into `left` (both locked, `left.next ==
    /// right`, the structure mutex held) and removes `right`, when the entries
    /// fit comfortably and `right`'s separator is removable; false when nothing
    /// changed.
    ///
    /// Crash safety without a log: the entries are written into free slots of
    /// `left` (words, then the line header; every changed line flushed, one
    /// fence), then `left.next = right.next` is persisted (one 8-byte store,
    /// one fence). Before that store `right` still holds every moved key and
    /// recovery drops the copies from `left` (its keys must all lie below its
    /// successor's smallest key: the interrupted-split rule), rolling the merge
    /// back; after it `right` is unreachable and freed by the heap's tracing.
    /// Out-of-line blocks move with their entries (ownership moves: `right` is
    /// retired as a bare leaf, its blocks stay live through `left`).
    ///
    /// Both leaves stay locked until the copy, the chain store and the inner
    /// change are all done, so readers never see a key twice or miss one: a
    /// reader of `left` waits for (or fails to validate) the new version, one
    /// of `right` finds it obsolete and restarts from the root, whose route
    /// then leads to `left`.
    fn merge(&self, left: &mut Locked, right: &mut Locked, s: &mut Smo<'_>, g: &Guard) -> bool {
        let (lf, rl) = (left.lf, right.lf);
        debug_assert_eq!(lf.next(), rl.off);
        let rh = rl.hdrs();
        let mut raws = Vec::with_capacity(SLOTS);
        let mut rslots = 0;
        for slot in 0..SLOTS {
            if is_primary(&rh, slot) {
                let Some(r) = read_raw(rl, &rh, slot) else {
                    return false;
                };
                rslots += 1 + r.wide() as usize;
                raws.push(r);
            }
        }
        // An empty successor is left to the empty-leaf unlink.
        if raws.is_empty() || lf.valid_mask().count_ones() as usize + rslots > MERGE_MAX {
            return false;
        }
        // Plan the placement first (wide entries first: each needs two free
        // slots of one line), so nothing is written unless all of it fits.
        raws.sort_by_key(|r| !r.wide());
        let mut h = lf.hdrs();
        let before = h;
        let mut plan = h;
        let mut slots = Vec::with_capacity(raws.len());
        for r in &raws {
            let Some(slot) = find_space(&plan, r.wide()) else {
                return false;
            };
            let (l, x) = (slot / PER_LINE, slot % PER_LINE);
            plan[l] = hdr_set(plan[l], x, r.d, r.fp);
            if r.wide() {
                plan[l] = hdr_set(plan[l], x + 1, DESC_CONT, r.fp);
            }
            slots.push(slot);
        }
        // `right`'s separator: the low key on the route of any of its keys (the
        // tree cannot change while the mutex is held).
        let mut kb = [0u8; 16];
        let Some(k) = self.raw_key(&raws[0], &mut kb) else {
            return false;
        };
        let rt = self.inner.route(&SearchKey::new(k), true, true, g);
        if rt.leaf != rl.off {
            return false;
        }
        let Some(low) = rt.low else {
            return false;
        };
        // Inner change first: it is the step that may refuse (the separator
        // must sit in the level-0 node of both leaves), and while both leaves
        // are locked its order against the PM stores is invisible to readers.
        if !s.remove(&low.to_vec(), rl.off, g) {
            return false;
        }
        for (r, &slot) in raws.iter().zip(&slots) {
            write_entry(lf, &mut h, slot, r);
        }
        for l in 0..LINES {
            if h[l] != before[l] {
                lf.set_hdr(l, h[l]);
                self.flush_line(lf, l);
            }
        }
        self.fence();
        // Publish: one 8-byte store drops `right` from the chain.
        self.drop_from_chain(left, right, g);
        self.merges.fetch_add(1, Ordering::Relaxed);
        true
    }

    /// Unlinks the locked, empty leaf from the chain and the inner tree (when its
    /// predecessor can be locked without waiting and its separator is removable).
    fn unlink_empty(&self, lk: &mut Locked, sk: &SearchKey<'_>, g: &Guard) {
        let mut s = self.inner.lock();
        let Some((mut plk, low)) = self.lock_predecessor(lk.lf, sk, g) else {
            return;
        };
        // Both leaves stay locked until the end, so the order of the inner-node
        // change and the chain store is invisible to readers: one routed to this
        // leaf waits and then finds it obsolete, one routed to the predecessor
        // waits for the new `next`.
        if !s.remove(&low, lk.lf.off, g) {
            return;
        }
        self.drop_from_chain(&mut plk, lk, g);
        self.unlinks.fetch_add(1, Ordering::Relaxed);
    }

    // ----- batches -------------------------------------------------------------------

    fn apply_batch(&self, ops: &[BatchOp]) -> KvResult<()> {
        for op in ops {
            match op {
                BatchOp::Put { key, value } => {
                    self.put(key, value, PutMode::Upsert)?;
                }
                BatchOp::Delete { key } => {
                    self.delete(key)?;
                }
            }
        }
        Ok(())
    }

    fn batch_impl(&self, batch: &WriteBatch) -> KvResult<()> {
        for op in &batch.ops {
            match op {
                BatchOp::Put { key, value } => check_sizes(key, Some(value), MAX_KEY, MAX_VALUE)?,
                BatchOp::Delete { key } => check_sizes(key, None, MAX_KEY, MAX_VALUE)?,
            }
        }
        let _b = self.batch.lock().unwrap_or_else(|e| e.into_inner());
        if batch.ops.len() <= 1 {
            return self.apply_batch(&batch.ops);
        }
        let _w = BatchWindow::open(&self.batch_seq.0);
        if !self.durable {
            return self.apply_batch(&batch.ops);
        }
        // Redo log: persist the batch, commit it with one root word, apply,
        // retire the log. Recovery replays a committed log (idempotent).
        let bytes = encode_log(&batch.ops);
        let off = self.heap.alloc(bytes.len()).map_err(pm)?;
        let p = self.pool.at(off, bytes.len());
        self.pool.nt_copy(p, &bytes);
        self.fence();
        self.pool.set_root(self.id, R_LOG, off).map_err(pm)?;
        self.apply_batch(&batch.ops)?;
        self.pool.set_root(self.id, R_LOG, 0).map_err(pm)?;
        let _ = self.heap.free(off);
        Ok(())
    }

    fn replay_log(&mut self, off: u64) -> KvResult<()> {
        let ops = decode_log(&self.pool, off).ok_or_else(|| {
            KvError::corrupt(
                OBJECT,
                format!("committed batch log at {off:#x} is corrupt"),
            )
        })?;
        self.apply_batch(&ops)?;
        self.pool.set_root(self.id, R_LOG, 0).map_err(pm)?;
        let _ = self.heap.free(off);
        self.pool.fence();
        Ok(())
    }

    // ----- checks (tests and crash checker) ------------------------------------------

    /// Every block the index reaches (leaves, out-of-line keys and values) with
    /// its block size; verifies that the chain is sorted and matches the tree.
    pub fn check_structure(&self) -> Result<Vec<(u64, u64)>, String> {
        let _g = epoch::pin();
        let mut tree_leaves = Vec::new();
        self.inner.lock().leaves(&mut tree_leaves);
        let mut chain = Vec::new();
        let mut off = self.head;
        let mut blocks = Vec::new();
        let mut last: Option<Vec<u8>> = None;
        let mut raws = Vec::new();
        let mut order = Vec::new();
        let bs = |o: u64| self.heap.block_size(o).unwrap_or(0) as u64;
        while off != 0 {
            chain.push(off);
            blocks.push((off, bs(off)));
            let lf = self.leaf(off);
            let next = self
                .snapshot(lf, &mut raws)
                .ok_or("leaf locked during check")?;
            self.sort_raw(&raws, &mut order).ok_or("bad key block")?;
            for &(_, i) in &order {
                let r = raws[i];
                let mut kb = [0u8; 16];
                let k = self.raw_key(&r, &mut kb).ok_or("bad key")?;
                if let Some(prev) = &last {
                    if prev.as_slice() >= k {
                        return Err(format!("keys out of order at leaf {off:#x}"));
                    }
                }
                last = Some(k.to_vec());
                if r.key_ool() {
                    blocks.push((r.k2, bs(r.k2)));
                }
                if r.val_ool() {
                    blocks.push((r.vw, bs(r.vw)));
                }
            }
            off = next;
            if chain.len() > 1 << 24 {
                return Err("leaf chain has a cycle".into());
            }
        }
        if chain != tree_leaves {
            return Err(format!(
                "leaf chain ({} leaves) differs from the inner tree ({} leaves)",
                chain.len(),
                tree_leaves.len()
            ));
        }
        Ok(blocks)
    }

    /// Allocates everything left in the index's heap and checks that live +
    /// allocatable blocks cover its chunks exactly (no leak, no double use).
    /// Leaves the index unusable for inserts; for crash checkers.
    pub fn exhaust_and_account(&self) -> Result<(), String> {
        let retired = self.quiesce();
        let mut live = self.check_structure()?;
        for off in retired {
            live.push((off, self.heap.block_size(off).unwrap_or(0) as u64));
        }
        ferrite_pm::targets::exhaust_and_account(&self.pool, &self.heap, live)
    }
}

impl Drop for FerriteIndex {
    fn drop(&mut self) {
        // The inner tree frees itself (`Inner`'s drop).
        self.drain_reclaim();
    }
}

fn init_leaf(lf: Leaf, next: u64) {
    for i in 0..LINES * LINE_WORDS {
        lf.w(i).store(0, Ordering::Relaxed);
    }
    lf.w(W_NEXT).store(next, Ordering::Relaxed);
    lf.w(W_MAGIC).store(LEAF_MAGIC, Ordering::Relaxed);
}

fn ool_bytes(pool: &Pool, off: u64) -> Option<&[u8]> {
    if off & 7 != 0 || !pool.contains(off, 8) {
        return None;
    }
    // SAFETY: in bounds and aligned (checked).
    let len = unsafe { std::ptr::read(pool.at(off, 8) as *const u64) };
    if len > MAX_VALUE.max(MAX_KEY) as u64 || !pool.contains(off + 8, len as usize) {
        return None;
    }
    // SAFETY: in bounds (checked); blocks are immutable while reachable, and the
    // epoch keeps retired ones intact while a reader can still see them.
    Some(unsafe { std::slice::from_raw_parts(pool.at(off + 8, len as usize), len as usize) })
}

fn encode_log(ops: &[BatchOp]) -> Vec<u8> {
    let mut payload = Vec::new();
    for op in ops {
        let (kind, k, v): (u8, &[u8], &[u8]) = match op {
            BatchOp::Put { key, value } => (1, key, value),
            BatchOp::Delete { key } => (2, key, &[]),
        };
        payload.push(kind);
        payload.extend_from_slice(&(k.len() as u32).to_le_bytes());
        payload.extend_from_slice(&(v.len() as u32).to_le_bytes());
        payload.extend_from_slice(k);
        payload.extend_from_slice(v);
    }
    let mut out = Vec::with_capacity(LOG_HDR + payload.len());
    out.extend_from_slice(&LOG_MAGIC.to_le_bytes());
    out.extend_from_slice(&(ops.len() as u64).to_le_bytes());
    out.extend_from_slice(&(payload.len() as u64).to_le_bytes());
    out.extend_from_slice(&(crc32(&payload) as u64).to_le_bytes());
    out.extend_from_slice(&payload);
    out
}

fn crc32(b: &[u8]) -> u32 {
    let mut c = 0xffff_ffffu32;
    for &x in b {
        c ^= x as u32;
        for _ in 0..8 {
            c = (c >> 1) ^ (0xEDB8_8320 & (c & 1).wrapping_neg());
        }
    }
    !c
}

fn decode_log(pool: &Pool, off: u64) -> Option<Vec<BatchOp>> {
    if !pool.contains(off, LOG_HDR) {
        return None;
    }
    let rd = |o: u64| -> u64 {
        // SAFETY: callers check bounds first.
        unsafe { std::ptr::read_unaligned(pool.at(o, 8) as *const u64) }
    };
    if rd(off) != LOG_MAGIC {
        return None;
    }
    let (count, len, crc) = (rd(off + 8), rd(off + 16) as usize, rd(off + 24));
    if !pool.contains(off + LOG_HDR as u64, len) {
        return None;
    }
    // SAFETY: in bounds (checked); the log is not modified while replayed.
    let p = unsafe { std::slice::from_raw_parts(pool.at(off + LOG_HDR as u64, len), len) };
    if crc32(p) as u64 != crc {
        return None;
    }
    let mut ops = Vec::new();
    let mut i = 0;
    while i < p.len() {
        if i + 9 > p.len() {
            return None;
        }
        let kind = p[i];
        let kl = u32::from_le_bytes(p[i + 1..i + 5].try_into().ok()?) as usize;
        let vl = u32::from_le_bytes(p[i + 5..i + 9].try_into().ok()?) as usize;
        i += 9;
        if kl > MAX_KEY || vl > MAX_VALUE || i + kl + vl > p.len() {
            return None;
        }
        let key = p[i..i + kl].to_vec();
        let value = p[i + kl..i + kl + vl].to_vec();
        i += kl + vl;
        ops.push(match kind {
            1 => BatchOp::Put { key, value },
            2 => BatchOp::Delete { key },
            _ => return None,
        });
    }
    (ops.len() as u64 == count).then_some(ops)
}

#[derive(Default)]
struct Recovered {
    leaves: Vec<(Option<Sep>, u64)>,
    keys: u64,
    repaired: u64,
    unlinked: u64,
}

/// A valid entry seen by recovery: its first slot, whether it is wide, its
/// comparison words and (keys longer than 16 bytes) the whole key.
struct RecKey<'p> {
    slot: usize,
    wide: bool,
    w: (u64, u64, u32),
    full: &'p [u8],
}

impl RecKey<'_> {
    fn cmp(&self, o: &RecKey<'_>) -> std::cmp::Ordering {
        cmp_words(self.w, o.w, self.full, o.full)
    }

    fn to_vec(&self) -> Vec<u8> {
        if self.w.2 as usize > WIDE_INLINE_MAX {
            return self.full.to_vec();
        }
        let mut kb = [0u8; 16];
        kb[..8].copy_from_slice(&self.w.0.to_be_bytes());
        kb[8..].copy_from_slice(&self.w.1.to_be_bytes());
        kb[..self.w.2 as usize].to_vec()
    }
}

/// Valid entries of a leaf during recovery (validated: a malformed entry or a
/// bad out-of-line block is corruption).
fn leaf_keys(pool: &Pool, lf: Leaf) -> Result<Vec<RecKey<'_>>, PmError> {
    let h = lf.hdrs();
    let mut out = Vec::new();
    for slot in 0..SLOTS {
        if !is_primary(&h, slot) {
            continue;
        }
        let bad = || corrupt(format!("leaf {:#x} slot {slot}: malformed entry", lf.off));
        let r = read_raw(lf, &h, slot).ok_or_else(bad)?;
        let (second, full) = if r.key_ool() {
            let b = ool_bytes(pool, r.k2).ok_or_else(bad)?;
            if b.len() != r.klen as usize {
                return Err(bad());
            }
            (suffix_of(b), b)
        } else if r.wide() {
            (r.k2, &[][..])
        } else {
            (0, &[][..])
        };
        if r.val_ool() && ool_bytes(pool, r.vw).is_none() {
            return Err(bad());
        }
        out.push(RecKey {
            slot,
            wide: r.wide(),
            w: r.sort_words(second),
            full,
        });
    }
    // A continuation without its first slot is corrupt too.
    for slot in 0..SLOTS {
        let (l, s) = (slot / PER_LINE, slot % PER_LINE);
        if hdr_valid(h[l]) & (1 << s) != 0
            && hdr_desc(h[l], s) == DESC_CONT
            && (s == 0 || !out.iter().any(|e| e.slot == slot - 1 && e.wide))
        {
            return Err(corrupt(format!(
                "leaf {:#x} slot {slot}: stray continuation",
                lf.off
            )));
        }
    }
    Ok(out)
}

fn persist_line(pool: &Pool, lf: Leaf, l: usize, durable: bool) {
    if durable {
        pool.persist(lf.line_ptr(l), 64);
    }
}

/// Walks the leaf chain: finishes interrupted splits, rolls back interrupted
/// merges, finishes cross-line updates, unlinks empty leaves, marks every
/// reachable block and collects the leaves' low keys for the inner tree.
fn recover(
    m: &mut Marker<'_>,
    head: u64,
    log: u64,
    durable: bool,
    rec: &mut Recovered,
) -> Result<(), PmError> {
    let pool = m.pool().clone();
    if log != 0 {
        m.mark(log)?;
    }
    if head == 0 {
        return Ok(());
    }
    let base = pool.base();
    let max_leaves = pool.size() / LEAF_SIZE as u64;
    let check_leaf = |off: u64| -> Result<Leaf, PmError> {
        if off & 255 != 0 || !pool.contains(off, LEAF_SIZE) {
            return Err(corrupt(format!("leaf pointer {off:#x} is invalid")));
        }
        let lf = Leaf { base, off };
        if lf.w(W_MAGIC).load(Ordering::Relaxed) != LEAF_MAGIC {
            return Err(corrupt(format!("block {off:#x} is not an index leaf")));
        }
        Ok(lf)
    };
    // Per leaf: fix a pending cross-line move, reset the lock.
    let prepare = |lf: Leaf, rec: &mut Recovered| -> Result<Vec<RecKey<'_>>, PmError> {
        lf.lock_word().store(0, Ordering::Relaxed);
        let pend = lf.w(W_PENDING).load(Ordering::Relaxed);
        if pend & PENDING_MARK != 0 {
            let (o, n) = ((pend & 0xff) as usize, ((pend >> 8) & 0xff) as usize);
            let mut h = lf.hdrs();
            if o < SLOTS && n < SLOTS && is_primary(&h, o) && is_primary(&h, n) {
                // Both copies are complete: keep the new one.
                let wide = kcode(hdr_desc(h[o / PER_LINE], o % PER_LINE)) == KCODE_WIDE;
                let l = o / PER_LINE;
                clear_entry(&mut h, o, wide);
                lf.set_hdr(l, h[l]);
                persist_line(&pool, lf, l, durable);
            }
            lf.w(W_PENDING).store(0, Ordering::Relaxed);
            persist_line(&pool, lf, W_PENDING / LINE_WORDS, durable);
            rec.repaired += 1;
        }
        leaf_keys(&pool, lf)
    };
    // Entries were validated by `leaf_keys`.
    let mark_entries = |m: &mut Marker<'_>, lf: Leaf| -> Result<u64, PmError> {
        let h = lf.hdrs();
        let mut n = 0;
        for slot in 0..SLOTS {
            if !is_primary(&h, slot) {
                continue;
            }
            let r = read_raw(lf, &h, slot)
                .ok_or_else(|| corrupt(format!("leaf {:#x}: malformed entry", lf.off)))?;
            if r.key_ool() {
                m.mark(r.k2)?;
            }
            if r.val_ool() {
                m.mark(r.vw)?;
            }
            n += 1;
        }
        Ok(n)
    };

    // `prev`: the last leaf kept, not yet finalised (marked), with its keys.
    let head_lf = check_leaf(head)?;
    let mut prev = (head_lf, prepare(head_lf, rec)?);
    let mut prev_low: Option<Sep> = None;
    let mut steps = 0u64;
    loop {
        let next = prev.0.next();
        if next == 0 {
            break;
        }
        steps += 1;
        if steps > max_leaves {
            return Err(corrupt("leaf chain has a cycle".into()));
        }
        let cur = check_leaf(next)?;
        let keys = prepare(cur, rec)?;
        if keys.is_empty() {
            // An empty leaf (other than the head): unlink it; it stays unmarked
            // and so becomes free.
            prev.0.w(W_NEXT).store(cur.next(), Ordering::Release);
            persist_line(&pool, prev.0, 0, durable);
            rec.unlinked += 1;
            continue;
        }
        let min = keys.iter().min_by(|a, b| a.cmp(b)).expect("non-empty");
        // An interrupted split leaves the upper half in both leaves, an
        // interrupted merge (copy persisted, unlink not) the successor's keys
        // in both: every key of `prev` is below every key of its successor
        // otherwise. Dropping them from `prev` completes the split and rolls
        // the merge back (the successor still holds them all, with their
        // out-of-line blocks, which are therefore marked once, from there).
        let mut hdrs = prev.0.hdrs();
        let before = hdrs;
        prev.1.retain(|k| {
            if k.cmp(min) != std::cmp::Ordering::Less {
                clear_entry(&mut hdrs, k.slot, k.wide);
                false
            } else {
                true
            }
        });
        if hdrs != before {
            for l in 0..LINES {
                if hdrs[l] != before[l] {
                    prev.0.set_hdr(l, hdrs[l]);
                    persist_line(&pool, prev.0, l, durable);
                }
            }
            rec.repaired += 1;
        }
        m.mark(prev.0.off)?;
        rec.keys += mark_entries(m, prev.0)?;
        rec.leaves.push((prev_low.take(), prev.0.off));
        prev_low = Some(Sep::from_key(&min.to_vec()));
        prev = (cur, keys);
    }
    m.mark(prev.0.off)?;
    rec.keys += mark_entries(m, prev.0)?;
    rec.leaves.push((prev_low, prev.0.off));
    Ok(())
}

impl OrderedKv for FerriteIndex {
    fn name(&self) -> &str {
        if self.durable {
            "ferrite"
        } else {
            "ferrite-dram"
        }
    }

    fn limits(&self) -> (usize, usize) {
        (MAX_KEY, MAX_VALUE)
    }

    fn get_into(&self, key: &[u8], out: &mut Vec<u8>) -> KvResult<bool> {
        self.isolated(|| self.lookup(key, out))
    }

    fn insert(&self, key: &[u8], value: &[u8]) -> KvResult<bool> {
        self.put(key, value, PutMode::Insert)
    }

    fn update(&self, key: &[u8], value: &[u8]) -> KvResult<bool> {
        self.put(key, value, PutMode::Update)
    }

    fn upsert(&self, key: &[u8], value: &[u8]) -> KvResult<bool> {
        self.put(key, value, PutMode::Upsert)
    }

    fn remove(&self, key: &[u8]) -> KvResult<bool> {
        self.delete(key)
    }

    fn count(&self) -> usize {
        let n: i64 = self
            .counts
            .iter()
            .map(|s| s.0.load(Ordering::Relaxed))
            .sum();
        n.max(0) as usize
    }

    fn scan(&self, start: &[u8], n: usize, f: &mut dyn FnMut(&[u8], &[u8])) -> KvResult<usize> {
        check_sizes(start, None, MAX_KEY, MAX_VALUE)?;
        // Records are buffered until the read is known not to overlap a batch
        // (a retried scan must not call `f` twice). The buffer is taken out of
        // its slot, so an `f` that scans again gets a fresh one.
        let (mut bytes, mut lens) = SCAN_BUF.take();
        let got = self.isolated(|| {
            bytes.clear();
            lens.clear();
            self.scan_impl(start, true, n, &mut |k, v| {
                put_bytes(&mut bytes, k);
                put_bytes(&mut bytes, v);
                lens.push((k.len() as u32, v.len() as u32));
            })
        });
        let mut at = 0;
        for &(kl, vl) in &lens {
            let (kl, vl) = (kl as usize, vl as usize);
            f(&bytes[at..at + kl], &bytes[at + kl..at + kl + vl]);
            at += kl + vl;
        }
        if bytes.capacity() <= 1 << 20 {
            SCAN_BUF.set((bytes, lens));
        }
        got
    }

    fn write_batch(&self, batch: &WriteBatch) -> KvResult<()> {
        self.batch_impl(batch)
    }

    fn cursor(&self) -> KvResult<Box<dyn KvCursor + '_>> {
        Ok(Box::new(Cursor {
            idx: self,
            pos: Pos::Unpositioned,
        }))
    }
}

enum Pos {
    Unpositioned,
    At(Vec<u8>),
    BeforeFirst,
    AfterLast,
}

/// A cursor over live data: each move reads the index as it is at that moment
/// (no snapshot isolation); it never returns a key twice in one direction.
struct Cursor<'a> {
    idx: &'a FerriteIndex,
    pos: Pos,
}

type Entry = Option<(Vec<u8>, Vec<u8>)>;

impl Cursor<'_> {
    fn forward(&mut self, start: &[u8], inclusive: bool) -> KvResult<Entry> {
        let mut got = None;
        self.idx.isolated(|| {
            got = None;
            self.idx.scan_impl(start, inclusive, 1, &mut |k, v| {
                got = Some((k.to_vec(), v.to_vec()))
            })
        })?;
        self.pos = match &got {
            Some((k, _)) => Pos::At(k.clone()),
            None => Pos::AfterLast,
        };
        Ok(got)
    }

    fn backward(&mut self, bound: Option<&[u8]>) -> KvResult<Entry> {
        let got = self.idx.isolated(|| self.idx.prev_entry(bound))?;
        self.pos = match &got {
            Some((k, _)) => Pos::At(k.clone()),
            None => Pos::BeforeFirst,
        };
        Ok(got)
    }
}

impl KvCursor for Cursor<'_> {
    fn seek(&mut self, key: &[u8]) -> KvResult<Entry> {
        check_sizes(key, None, MAX_KEY, MAX_VALUE)?;
        self.forward(key, true)
    }

    fn first(&mut self) -> KvResult<Entry> {
        self.forward(&[], true)
    }

    fn last(&mut self) -> KvResult<Entry> {
        self.backward(None)
    }

    fn next(&mut self) -> KvResult<Entry> {
        match std::mem::replace(&mut self.pos, Pos::Unpositioned) {
            Pos::At(k) => self.forward(&k, false),
            Pos::Unpositioned | Pos::BeforeFirst => self.first(),
            Pos::AfterLast => {
                self.pos = Pos::AfterLast;
                Ok(None)
            }
        }
    }

    fn prev(&mut self) -> KvResult<Entry> {
        match std::mem::replace(&mut self.pos, Pos::Unpositioned) {
            Pos::At(k) => self.backward(Some(&k)),
            Pos::Unpositioned | Pos::AfterLast => self.last(),
            Pos::BeforeFirst => {
                self.pos = Pos::BeforeFirst;
                Ok(None)
            }
        }
    }
}
