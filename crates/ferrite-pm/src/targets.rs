//! Crash-test targets of the PM layer, and [`SlotTable`], the small persistent
//! structure they (and the kill -9 test and `ferrite demo`) use to exercise the
//! allocator: a root block of slots, each holding a pointer to a published block.

use std::collections::BTreeMap;

use crate::crash::{explore, CrashConfig, CrashReport, Journal, JournalHandle};
use crate::error::{PmError, Result};
use crate::heap::{Heap, HeapStats};
use crate::layout::{self, chunk_kind, SIZE_CLASSES};
use crate::pool::{ObjectId, Pool};
use crate::sim::SplitMix;
use crate::CrashTarget;

/// The PM layer's crash-test targets.
pub fn crash_targets() -> Vec<(&'static str, CrashTarget)> {
    vec![
        ("allocator", allocator_target as CrashTarget),
        ("directory", directory_target as CrashTarget),
    ]
}

/// Type name of [`SlotTable`] objects in the root directory.
pub const SLOT_TABLE_TYPE: &str = "ferrite.slot-table";
const BLOCK_MAGIC: u64 = 0xB10C_B10C_0000_0001;
const HDR: usize = 32;

/// A persistent array of `n` slots, each null or pointing at a block whose
/// contents are a checkable function of (slot, version, length).
pub struct SlotTable {
    pool: Pool,
    heap: Heap,
    root: u64,
    slots: usize,
    pub open_stats: HeapStats,
}

/// What a slot holds: version and payload length of its block.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SlotValue {
    pub version: u64,
    pub len: usize,
}

fn payload_byte(slot: usize, version: u64, i: usize) -> u8 {
    (slot as u64 * 31 + version * 17 + i as u64 * 7) as u8
}

impl SlotTable {
    /// Traces a slot table read-only (for `ferrite check`).
    pub fn verify(pool: &Pool, id: ObjectId) -> Result<HeapStats> {
        pool.verify_heap(id, |m| Self::trace(pool, id, m))
    }

    fn trace(pool: &Pool, id: ObjectId, m: &mut crate::Marker<'_>) -> Result<()> {
        let root = pool.root(id, 0);
        if root != 0 {
            m.mark(root)?;
            let n = pool.root(id, 1) as usize;
            if n > 1 << 20 {
                return Err(PmError::CorruptObject {
                    object: "slot table".into(),
                    detail: format!("slot count {n} is implausible"),
                });
            }
            for i in 0..n {
                let off = read_u64(m.pool(), root + 8 * i as u64)?;
                if off != 0 {
                    m.mark(off)?;
                }
            }
        }
        Ok(())
    }

    /// Opens the table `name`, creating it with `slots` slots if absent.
    pub fn open_or_create(pool: &Pool, name: &str, slots: usize) -> Result<SlotTable> {
        let (id, _) = pool.open_or_create_object(name, SLOT_TABLE_TYPE)?;
        let root = pool.root(id, 0);
        let (heap, stats) = pool.open_heap(id, |m| Self::trace(pool, id, m))?;
        let mut t = SlotTable {
            pool: pool.clone(),
            heap,
            root,
            slots: pool.root(id, 1) as usize,
            open_stats: stats,
        };
        if root == 0 {
            t.init(id, slots)?;
        }
        Ok(t)
    }

    fn init(&mut self, id: ObjectId, slots: usize) -> Result<()> {
        let root = self.heap.alloc_zeroed(slots * 8)?;
        // Slot count first, then the root: a crash between leaves root 0, which
        // is an empty table again.
        self.pool.set_root(id, 1, slots as u64)?;
        self.pool.set_root(id, 0, root)?;
        self.root = root;
        self.slots = slots;
        Ok(())
    }

    pub fn slots(&self) -> usize {
        self.slots
    }

    pub fn heap(&self) -> &Heap {
        &self.heap
    }

    fn slot_ptr(&self, slot: usize) -> *mut u64 {
        assert!(slot < self.slots);
        self.pool.at(self.root + 8 * slot as u64, 8) as *mut u64
    }

    /// Offset stored in `slot` (0 = empty).
    pub fn slot(&self, slot: usize) -> u64 {
        // SAFETY: slot_ptr is in bounds and 8-byte aligned; single writer per slot.
        unsafe { std::ptr::read_volatile(self.slot_ptr(slot)) }
    }

    /// Allocates a block with a payload of `len` bytes for `version`, persists it,
    /// then publishes it in `slot` (persisting the pointer) and frees the block the
    /// slot held before. Two barriers (three with a freed block's reuse fence).
    pub fn publish(&self, slot: usize, version: u64, len: usize) -> Result<()> {
        let off = self.heap.alloc(HDR + len)?;
        let p = self.pool.at(off, HDR + len);
        let mut buf = Vec::with_capacity(HDR + len);
        for w in [BLOCK_MAGIC, slot as u64, version, len as u64] {
            buf.extend_from_slice(&w.to_le_bytes());
        }
        buf.extend((0..len).map(|i| payload_byte(slot, version, i)));
        // SAFETY: p..p+HDR+len is the freshly allocated block.
        unsafe { std::ptr::copy_nonoverlapping(buf.as_ptr(), p, buf.len()) };
        self.pool.persist(p, buf.len())?;
        let old = self.slot(slot);
        // SAFETY: aligned in-bounds slot; 8-byte stores are failure-atomic.
        unsafe { std::ptr::write_volatile(self.slot_ptr(slot), off) };
        self.pool.persist(self.slot_ptr(slot) as *const u8, 8)?;
        if old != 0 {
            self.heap.free(old)?;
        }
        Ok(())
    }

    /// Empties `slot` durably and frees its block.
    pub fn clear(&self, slot: usize) -> Result<()> {
        let old = self.slot(slot);
        if old == 0 {
            return Ok(());
        }
        // SAFETY: aligned in-bounds slot.
        unsafe { std::ptr::write_volatile(self.slot_ptr(slot), 0) };
        self.pool.persist(self.slot_ptr(slot) as *const u8, 8)?;
        self.heap.free(old)
    }

    /// Empties `clear` with a flushed but unfenced store, frees its block, then
    /// publishes a new block in `slot`; the publish's fences make the clear
    /// durable. Exercises the heap's promise not to reuse a freed block before
    /// the freeing thread's next fence.
    pub fn clear_then_publish(
        &self,
        clear: usize,
        slot: usize,
        version: u64,
        len: usize,
    ) -> Result<()> {
        let old = self.slot(clear);
        if old != 0 {
            // SAFETY: aligned in-bounds slot.
            unsafe { std::ptr::write_volatile(self.slot_ptr(clear), 0) };
            self.pool.flush(self.slot_ptr(clear) as *const u8, 8);
            self.heap.free(old)?;
        }
        self.publish(slot, version, len)
    }

    /// Reads and validates the block in `slot`.
    pub fn read(&self, slot: usize) -> std::result::Result<Option<SlotValue>, String> {
        let off = self.slot(slot);
        if off == 0 {
            return Ok(None);
        }
        let size = self
            .heap
            .block_size(off)
            .ok_or_else(|| format!("slot {slot}: {off:#x} is not a block"))?;
        let hdr = self.pool.at(off, HDR);
        // SAFETY: a block is at least 64 bytes (>= HDR) and in bounds.
        let w = |i: usize| unsafe { std::ptr::read_unaligned((hdr as *const u64).add(i)) };
        if w(0) != BLOCK_MAGIC || w(1) != slot as u64 {
            return Err(format!(
                "slot {slot}: block {off:#x} has a torn or foreign header"
            ));
        }
        let (version, len) = (w(2), w(3) as usize);
        if HDR + len > size {
            return Err(format!(
                "slot {slot}: length {len} exceeds block size {size}"
            ));
        }
        let p = self.pool.at(off + HDR as u64, len);
        // SAFETY: p..p+len is inside the block (checked above).
        let data = unsafe { std::slice::from_raw_parts(p, len) };
        if let Some(i) = (0..len).find(|&i| data[i] != payload_byte(slot, version, i)) {
            return Err(format!(
                "slot {slot}: payload byte {i} of version {version} is wrong"
            ));
        }
        Ok(Some(SlotValue { version, len }))
    }
}

fn read_u64(pool: &Pool, off: u64) -> Result<u64> {
    if !pool.contains(off, 8) || !off.is_multiple_of(8) {
        return Err(PmError::CorruptObject {
            object: "slot table".into(),
            detail: format!("slot offset {off:#x} out of bounds"),
        });
    }
    // SAFETY: checked in bounds and aligned.
    Ok(unsafe { std::ptr::read_volatile(pool.at(off, 8) as *const u64) })
}

/// Operations of the allocator workload.
#[derive(Debug, Clone)]
pub enum SlotOp {
    Setup,
    Publish {
        slot: usize,
        version: u64,
        len: usize,
    },
    Clear {
        slot: usize,
    },
    ClearThenPublish {
        clear: usize,
        slot: usize,
        version: u64,
        len: usize,
    },
}

const SLOTS: usize = 48;
const LENS: [usize; 10] = [8, 32, 100, 200, 224, 700, 2000, 4000, 9000, 40000];

/// The allocator workload: publish, replace and clear blocks of many sizes
/// (small classes and multi-chunk large blocks).
pub fn slot_workload(
    cfg: &CrashConfig,
    pool: &Pool,
    j: &JournalHandle<SlotOp>,
) -> std::result::Result<(), String> {
    let e = |e: PmError| e.to_string();
    j.begin(SlotOp::Setup);
    let t = SlotTable::open_or_create(pool, "alloc-test", SLOTS).map_err(e)?;
    j.ack();
    let mut rng = SplitMix(cfg.seed);
    let mut full = [false; SLOTS];
    for version in 1..=cfg.ops as u64 {
        let slot = rng.below(SLOTS as u64) as usize;
        let other = rng.below(SLOTS as u64) as usize;
        if full[slot] && rng.below(3) == 0 {
            j.begin(SlotOp::Clear { slot });
            t.clear(slot).map_err(e)?;
            full[slot] = false;
        } else if full[other] && other != slot && rng.below(3) == 0 {
            let len = LENS[rng.below(LENS.len() as u64) as usize];
            j.begin(SlotOp::ClearThenPublish {
                clear: other,
                slot,
                version,
                len,
            });
            match t.clear_then_publish(other, slot, version, len) {
                Ok(()) => {
                    full[other] = false;
                    full[slot] = true;
                }
                Err(PmError::PoolFull { .. }) => {
                    // The clear happened; record it as such.
                    full[other] = false;
                    j.abandon();
                    j.begin(SlotOp::Clear { slot: other });
                }
                Err(err) => return Err(err.to_string()),
            }
        } else {
            let len = LENS[rng.below(LENS.len() as u64) as usize];
            j.begin(SlotOp::Publish { slot, version, len });
            match t.publish(slot, version, len) {
                Ok(()) => full[slot] = true,
                Err(PmError::PoolFull { .. }) => {
                    j.abandon();
                    continue;
                }
                Err(err) => return Err(err.to_string()),
            }
        }
        j.ack();
    }
    Ok(())
}

/// Checks a recovered slot table against the journal, then exhausts the pool to
/// prove that no block leaked and none is handed out twice.
pub fn slot_check(
    pool: Pool,
    j: &Journal<SlotOp>,
) -> std::result::Result<Vec<Option<SlotValue>>, String> {
    let setup_acked = !j.acked.is_empty();
    let mut expect: BTreeMap<usize, Option<SlotValue>> = BTreeMap::new();
    for op in &j.acked {
        match *op {
            SlotOp::Setup => {}
            SlotOp::Publish { slot, version, len } => {
                expect.insert(slot, Some(SlotValue { version, len }));
            }
            SlotOp::Clear { slot } => {
                expect.insert(slot, None);
            }
            SlotOp::ClearThenPublish {
                clear,
                slot,
                version,
                len,
            } => {
                expect.insert(clear, None);
                expect.insert(slot, Some(SlotValue { version, len }));
            }
        }
    }
    let exists = pool.object("alloc-test", SLOT_TABLE_TYPE).is_ok();
    if !exists {
        crate::crash::recovered(&pool);
        return if setup_acked {
            Err("acknowledged table is missing".into())
        } else {
            Ok(Vec::new())
        };
    }
    let id = pool
        .object("alloc-test", SLOT_TABLE_TYPE)
        .map_err(|e| e.to_string())?;
    if setup_acked && pool.root(id, 0) == 0 {
        return Err("acknowledged table has no root block".into());
    }
    let t = SlotTable::open_or_create(&pool, "alloc-test", SLOTS)
        .map_err(|e| format!("reopen: {e}"))?;
    crate::crash::recovered(&pool);
    let mut live: Vec<(u64, u64)> = vec![(t.root, t.heap.block_size(t.root).unwrap_or(0) as u64)];
    let mut found = Vec::with_capacity(t.slots());
    for slot in 0..t.slots() {
        let got = t.read(slot)?;
        found.push(got);
        let want = expect.get(&slot).copied().flatten();
        let in_flight_ok = match &j.in_flight {
            Some(SlotOp::Publish {
                slot: s,
                version,
                len,
            }) if *s == slot => {
                got == Some(SlotValue {
                    version: *version,
                    len: *len,
                })
            }
            Some(SlotOp::Clear { slot: s }) if *s == slot => got.is_none(),
            Some(SlotOp::ClearThenPublish { clear, .. }) if *clear == slot => got.is_none(),
            Some(SlotOp::ClearThenPublish {
                slot: s,
                version,
                len,
                ..
            }) if *s == slot => {
                got == Some(SlotValue {
                    version: *version,
                    len: *len,
                })
            }
            _ => false,
        };
        if got != want && !in_flight_ok {
            return Err(format!("slot {slot}: found {got:?}, acknowledged {want:?}"));
        }
        let off = t.slot(slot);
        if off != 0 {
            live.push((off, t.heap.block_size(off).unwrap_or(0) as u64));
        }
    }
    exhaust_and_account(&pool, &t.heap, live)?;
    Ok(found)
}

/// Allocates every free block of every class, checks that nothing handed out
/// overlaps a live block or another handed-out block, and that live + handed-out
/// bytes cover every owned chunk (no leak).
pub fn exhaust_and_account(
    pool: &Pool,
    heap: &Heap,
    live: Vec<(u64, u64)>,
) -> std::result::Result<(), String> {
    let cs = pool.header().chunk_size;
    let mut all = live;
    let n_live = all.len();
    // Largest class first: it takes the free chunks with few blocks each; the
    // smaller classes then only drain their own partly used chunks.
    for &class in SIZE_CLASSES.iter().rev().filter(|&&c| c as u64 <= cs / 4) {
        loop {
            match heap.alloc(class as usize) {
                Ok(off) => all.push((off, class as u64)),
                Err(PmError::PoolFull { .. }) => break,
                Err(e) => return Err(format!("exhaustion: {e}")),
            }
        }
    }
    match heap.alloc(cs as usize) {
        Err(PmError::PoolFull { .. }) => {}
        Ok(off) => return Err(format!("a free chunk at {off:#x} survived exhaustion")),
        Err(e) => return Err(format!("exhaustion: {e}")),
    }
    let mut sorted = all.clone();
    sorted.sort_unstable();
    for w in sorted.windows(2) {
        if w[0].0 + w[0].1 > w[1].0 {
            let live_one = all[..n_live].iter().any(|x| *x == w[0] || *x == w[1]);
            return Err(format!(
                "block {:#x}+{} overlaps {:#x}{}: handed out twice",
                w[0].0,
                w[0].1,
                w[1].0,
                if live_one { " (a live block)" } else { "" }
            ));
        }
    }
    let owner = heap_owner_chunks(pool, heap);
    let capacity: u64 = owner
        .iter()
        .map(|&(kind, class, run)| match kind {
            chunk_kind::SMALL => {
                let s = SIZE_CLASSES[class as usize] as u64;
                cs / s * s
            }
            _ => run as u64 * cs,
        })
        .sum();
    let covered: u64 = sorted.iter().map(|b| b.1).sum();
    if covered != capacity {
        return Err(format!(
            "leak: owned chunks hold {capacity} block bytes but live + allocatable = {covered}"
        ));
    }
    let (_, free) = pool.chunk_usage();
    if free != 0 {
        return Err(format!("{free} chunks still free after exhaustion"));
    }
    Ok(())
}

fn heap_owner_chunks(pool: &Pool, heap: &Heap) -> Vec<(u64, u8, u32)> {
    let id = pool
        .objects()
        .into_iter()
        .find(|o| o.name == heap.object_name())
        .map(|o| o.id)
        .expect("heap's object exists");
    let mut out = Vec::new();
    for c in 0..pool.header().chunk_count as usize {
        let e = pool.chunk_entry(c);
        if e.owner == id.0 && (e.kind == chunk_kind::SMALL || e.kind == chunk_kind::LARGE_HEAD) {
            out.push((e.kind, e.class, e.run));
        }
    }
    out
}

fn allocator_target(cfg: &CrashConfig) -> Result<CrashReport> {
    let c = cfg.clone();
    explore(
        "allocator",
        cfg,
        move |p, j| slot_workload(&c, p, j),
        slot_check,
    )
}

/// Default configuration of the allocator crash test: every fence, 4 images per
/// point, a 1 MiB pool of 16 KiB chunks so large blocks and exhaustion are exercised.
pub fn allocator_default_config() -> CrashConfig {
    CrashConfig {
        pool_size: 1 << 20,
        chunk_size: layout::MIN_CHUNK,
        ops: 1400,
        ..CrashConfig::default()
    }
}

/// Operations of the directory workload.
#[derive(Debug, Clone)]
pub enum DirOp {
    /// Create table `name` (if absent) and publish `version` in slot 0.
    Publish { name: usize, version: u64 },
    /// Delete table `name` and free its chunks.
    Delete { name: usize },
}

const DIR_NAMES: usize = 6;

fn dir_name(i: usize) -> String {
    format!("table-{i}")
}

/// Creates, fills and deletes objects: crash points fall inside object creation
/// and deletion as well as chunk claims and releases.
pub fn directory_workload(
    cfg: &CrashConfig,
    pool: &Pool,
    j: &JournalHandle<DirOp>,
) -> std::result::Result<(), String> {
    let mut rng = SplitMix(cfg.seed ^ 0xd1);
    let mut exists = [false; DIR_NAMES];
    for version in 1..=cfg.ops as u64 {
        let name = rng.below(DIR_NAMES as u64) as usize;
        if exists[name] && rng.below(3) == 0 {
            j.begin(DirOp::Delete { name });
            pool.delete_object(&dir_name(name))
                .map_err(|e| e.to_string())?;
            exists[name] = false;
        } else {
            j.begin(DirOp::Publish { name, version });
            let t =
                SlotTable::open_or_create(pool, &dir_name(name), 4).map_err(|e| e.to_string())?;
            let len = LENS[rng.below(LENS.len() as u64) as usize];
            match t.publish(0, version, len) {
                Ok(()) => exists[name] = true,
                Err(PmError::PoolFull { .. }) => {
                    j.abandon();
                    continue;
                }
                Err(e) => return Err(e.to_string()),
            }
        }
        j.ack();
    }
    Ok(())
}

/// Every acknowledged table exists with its last version, every acknowledged
/// deletion is gone, and the pool's chunks are all accounted for.
pub fn directory_check(
    pool: Pool,
    j: &Journal<DirOp>,
) -> std::result::Result<Vec<Option<Option<u64>>>, String> {
    let mut want: [Option<u64>; DIR_NAMES] = [None; DIR_NAMES];
    for op in &j.acked {
        match *op {
            DirOp::Publish { name, version } => want[name] = Some(version),
            DirOp::Delete { name } => want[name] = None,
        }
    }
    let mut tables = Vec::new();
    let mut digest = Vec::with_capacity(DIR_NAMES);
    for (name, w) in want.iter().enumerate() {
        let in_flight = match &j.in_flight {
            Some(DirOp::Publish { name: n, version }) if *n == name => Some(Some(*version)),
            Some(DirOp::Delete { name: n }) if *n == name => Some(None),
            _ => None,
        };
        let found = match pool.object(&dir_name(name), SLOT_TABLE_TYPE) {
            Err(PmError::NoSuchObject(_)) => None,
            Err(e) => return Err(e.to_string()),
            Ok(_) => {
                let t = SlotTable::open_or_create(&pool, &dir_name(name), 4)
                    .map_err(|e| e.to_string())?;
                let v = t.read(0)?.map(|v| v.version);
                tables.push(t);
                // A table created by the in-flight op may exist without a block yet.
                Some(v)
            }
        };
        digest.push(found);
        let ok = match (found, w) {
            (None, None) => true,
            (Some(Some(v)), Some(x)) if v == *x => true,
            _ => false,
        };
        let ok_in_flight = match (found, in_flight) {
            (Some(Some(v)), Some(Some(x))) => v == x,
            (Some(None), Some(Some(_))) => true, // created, block not yet published
            (Some(v), Some(None)) => v == *w,    // deletion had not happened
            (None, Some(None)) => true,
            (None, Some(Some(_))) => w.is_none(),
            _ => false,
        };
        if !ok && !ok_in_flight {
            return Err(format!(
                "{}: found {found:?}, acknowledged {w:?}",
                dir_name(name)
            ));
        }
    }
    crate::crash::recovered(&pool);
    let owners = pool.chunks_by_owner();
    let objects = pool.objects();
    if let Some((id, _)) = owners
        .iter()
        .find(|(id, _)| !objects.iter().any(|o| o.id == *id))
    {
        return Err(format!("chunks of deleted object {id:?} survived recovery"));
    }
    if let Some(t) = tables.first() {
        let mut live = Vec::new();
        for off in [t.root, t.slot(0)] {
            if off != 0 {
                live.push((off, t.heap.block_size(off).unwrap_or(0) as u64));
            }
        }
        exhaust_and_account(&pool, &t.heap, live)?;
    }
    Ok(digest)
}

fn directory_target(cfg: &CrashConfig) -> Result<CrashReport> {
    let mut c = cfg.clone();
    if c.ops == CrashConfig::default().ops {
        c.ops = 620;
    }
    c.chunk_size = layout::MIN_CHUNK;
    let w = c.clone();
    explore(
        "directory",
        &c,
        move |p, j| directory_workload(&w, p, j),
        directory_check,
    )
}
