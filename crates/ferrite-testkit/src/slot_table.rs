//! [`SlotTable`]: the small persistent structure that exercises the allocator
//! in tests (crash targets, the kill -9 test, benchmarks): a root block of
//! slots, each null or holding a pointer to a published block whose contents
//! are a checkable function of (slot, version, length). A test structure, not
//! part of Ferrite's library.

use ferrite_pm::{Heap, HeapStats, ObjectId, PmError, Pool, Result};

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

    fn trace(pool: &Pool, id: ObjectId, m: &mut ferrite_pm::Marker<'_>) -> Result<()> {
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

    /// Offset of the table's root block (the slot array).
    pub fn root_block(&self) -> u64 {
        self.root
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
