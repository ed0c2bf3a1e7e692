//! Ferrite's hybrid persistent range index: unsorted 512-byte leaves in PM
//! (see [`crate::leaf`]), inner nodes in DRAM rebuilt from the leaf chain on
//! open (see [`crate::inner`]).
//!
//! Concurrency: readers traverse the inner nodes with optimistic lock coupling
//! and are optimistic on the leaf too (per-leaf version lock read before and
//! validated after, plus a validation of the level-0 inner node after the leaf's
//! version was taken, see [`crate::inner::Route::still_valid`]); writers lock
//! one leaf (two for the removal of an empty leaf or a merge of two sparse
//! ones: the second is only ever try-locked, under the structure mutex), and
//! structure modifications lock the inner nodes they change. Freed leaves and
//! out-of-line blocks, and replaced long-separator arrays of inner nodes, are
//! reclaimed through the epoch (`crate::ebr`), so a pinned reader never sees them
//! reused.
//!
//! This module holds the index itself (its fields, open, statistics, the leaf
//! lock guard and small helpers shared by every path); the paths live in:
//!
//! | module | concern |
//! | --- | --- |
//! | [`read`] | lookups; consistent snapshots of a leaf and their sorting |
//! | [`scan`] | range scans along the leaf chain; the "largest key below" step |
//! | [`cursor`] | the live cursor |
//! | [`kv`] | the `OrderedKv` implementation (dispatch, buffered scans) |
//! | [`write`] | insert / update / upsert / delete of one key |
//! | [`smo`] | structure modifications: split, merge, unlink |
//! | [`batch`] | write batches: redo log, apply, replay; readers' batch isolation |
//! | [`recovery`] | the leaf-chain walk at open: repairs, tracing, separators |
//! | [`reclaim`] | epoch-based retirement and freeing of blocks |
//! | [`check`] | structure and space checks for tests and crash checkers |
//!
//! Invariants every module relies on: the leaf chain from [`R_HEAD`] is in key
//! order and every leaf holds only keys below its successor's smallest key
//! (recovery restores this after an interrupted split or merge); a writer holds
//! the leaf's lock ([`Locked`]) for every change of it; a block that a reader
//! may still see is freed only through [`reclaim`]; PM stores become durable
//! only through [`FerriteIndex::flush`] / [`FerriteIndex::fence`] (no-ops in
//! volatile mode).

mod batch;
mod check;
mod cursor;
mod kv;
#[cfg(test)]
mod long_tests;
mod read;
mod reclaim;
mod recovery;
pub(crate) mod reserve;
mod scan;
mod smo;
mod write;

use std::sync::atomic::{AtomicBool, AtomicI64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use ferrite_kv::{KvError, KvResult};
use ferrite_pm::{Heap, ObjectId, Pool, PoolOptions};

use crate::error::pm;
use crate::inner::Inner;
use crate::leaf::*;
use crate::vlock;
use batch::BatchSeq;
use reclaim::Reclaim;
use recovery::{recover, Recovered};

/// Type name of index objects in the pool's root directory.
pub const INDEX_TYPE: &str = "ferrite.index";
/// Root word: offset of the first (head) leaf.
const R_HEAD: usize = 0;
/// Root word: offset of a committed, not yet completed batch log (0 = none).
const R_LOG: usize = 1;
/// Root word: [`FORMAT_TAG`].
const R_FORMAT: usize = 2;

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

static NEXT_STRIPE: AtomicUsize = AtomicUsize::new(0);
thread_local! {
    /// This thread's count stripe; `usize::MAX` until first used (a constant
    /// initialiser: no lazy-initialisation check on every access).
    static MY_STRIPE: std::cell::Cell<usize> = const { std::cell::Cell::new(usize::MAX) };
}

/// The index. See the module documentation.
pub struct FerriteIndex {
    pool: Pool,
    heap: Heap,
    id: ObjectId,
    base: *mut u8,
    durable: bool,
    /// Whether scans store leaves' order hints (not in a read-only mapping).
    order_hints: bool,
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
    hooks: TestHooks,
}

/// Called after each operation a write batch applies (with its index).
pub type BatchOpHook = Arc<dyn Fn(usize) + Send + Sync>;
/// Called when a single-key write starts waiting for a batch to end.
pub type SettleHook = Box<dyn Fn() + Send + Sync>;

/// Hooks that let a test force an interleaving of a write batch with
/// single-key writes (see `ferrite-crash`'s batch-race target). Unset in
/// normal use; checked only on batch paths.
#[derive(Default)]
struct TestHooks {
    batch_op: Mutex<Option<BatchOpHook>>,
    settle: Mutex<Option<SettleHook>>,
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

impl FerriteIndex {
    /// Opens the index object `name` in `pool` (creating it if absent); rebuilds
    /// DRAM inner nodes from the PM leaves.
    pub fn open_or_create(pool: &Pool, name: &str) -> KvResult<FerriteIndex> {
        Self::open_with(pool, name, &IndexOptions::default())
    }

    /// Whether the object's format tag in the pool says version 2 (what long
    /// entries need: [`Self::allow_long_entries`], [`Self::check_structure`]).
    pub(super) fn tagged_v2(&self) -> bool {
        self.pool.root(self.id, R_FORMAT) == FORMAT_TAG
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
        let tag = pool.root(id, R_FORMAT);
        if head != 0 && tag != FORMAT_TAG && tag != FORMAT_TAG_V1 {
            return Err(KvError::Backend(format!(
                "index {name}: unsupported format tag {tag:#x} (this build reads {FORMAT_TAG_V1:#x} and {FORMAT_TAG:#x})"
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
            order_hints: !pool.is_read_only(),
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
            hooks: TestHooks::default(),
        };
        if head == 0 {
            let off = idx.heap.alloc(LEAF_SIZE).map_err(pm)?;
            let lf = idx.leaf(off);
            init_leaf(lf, 0);
            lf.lock_word().store(0, Ordering::Relaxed);
            idx.flush(lf.line_ptr(0), LEAF_SIZE);
            idx.fence()?;
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

    /// Test hook: builds the DRAM bucket table (which routes lookups and
    /// writes straight to their leaves) from this many leaves instead of the
    /// default 131,072, now if the index already has that many.
    #[doc(hidden)]
    pub fn set_bucket_table_min_leaves(&self, leaves: usize) {
        self.inner.set_bucket_table_min_leaves(leaves);
    }

    /// Test hook: `hook(i)` runs after a write batch applied its operation `i`
    /// (with the batch mutex held and the batch's log committed).
    #[doc(hidden)]
    pub fn set_batch_op_hook(&self, hook: Option<BatchOpHook>) {
        *self
            .hooks
            .batch_op
            .lock()
            .unwrap_or_else(|e| e.into_inner()) = hook;
    }

    /// Test hook: runs when a single-key write that overlapped a batch starts
    /// waiting for it.
    #[doc(hidden)]
    pub fn set_settle_hook(&self, hook: Option<SettleHook>) {
        *self.hooks.settle.lock().unwrap_or_else(|e| e.into_inner()) = hook;
    }

    /// The pool the index lives in.
    pub fn pool(&self) -> &Pool {
        &self.pool
    }

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

    /// A persist barrier (none in volatile mode). It fails only in msync mode
    /// when a write-back failed; the pool is then poisoned, so every later
    /// fence fails too. Multi-step protocols therefore finish their in-memory
    /// steps and report the failure once, at the end ([`Self::fence_step`]).
    #[inline]
    fn fence(&self) -> KvResult<()> {
        if self.durable {
            self.pool.fence().map_err(pm)?;
        }
        Ok(())
    }

    /// A barrier inside a multi-step protocol: a failure is remembered in
    /// `res` (the first one wins) and the protocol carries on, so DRAM never
    /// shows a half-done step; the operation returns `res` at its end.
    #[inline]
    fn fence_step(&self, res: &mut KvResult<()>) {
        if let Err(e) = self.fence() {
            if res.is_ok() {
                *res = Err(e);
            }
        }
    }

    fn count_add(&self, d: i64) {
        let s = MY_STRIPE.with(|c| {
            if c.get() == usize::MAX {
                c.set(NEXT_STRIPE.fetch_add(1, Ordering::Relaxed) % STRIPES);
            }
            c.get()
        });
        self.counts[s].0.fetch_add(d, Ordering::Relaxed);
    }

    /// The index's out-of-line blocks (allocation, encoding of entries).
    #[inline]
    fn blocks(&self) -> Blocks<'_> {
        Blocks {
            pool: &self.pool,
            heap: &self.heap,
            durable: self.durable,
        }
    }

    /// An out-of-line block's bytes, bounds-checked (None when the offset or
    /// length is implausible: a torn optimistic read or corruption).
    #[inline]
    fn ool(&self, off: u64) -> Option<&[u8]> {
        ool_bytes(&self.pool, off)
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
}

impl Drop for FerriteIndex {
    fn drop(&mut self) {
        // The inner tree frees itself (`Inner`'s drop).
        self.drain_reclaim();
    }
}
