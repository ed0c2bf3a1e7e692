//! Shared plumbing: a structure is a named pool object whose root word 0 points
//! at one heap block (its region); the tracer marks that block.

use ferrite_pm::{Heap, ObjectId, Pool};

use crate::error::{corrupt, Result};

/// Opens (or creates) object `name` of type `type_name` and its heap; the only
/// block the heap keeps is the region in root word 0 (`extra_root` names a second
/// root word holding another block, or `None`).
pub(crate) fn open_object(
    pool: &Pool,
    name: &str,
    type_name: &str,
    extra_root: Option<usize>,
) -> Result<(ObjectId, Heap)> {
    let (id, _) = pool.open_or_create_object(name, type_name)?;
    let (heap, _) = pool.open_heap(id, |m| {
        let r = pool.root(id, 0);
        if r != 0 {
            m.mark(r)?;
        }
        if let Some(i) = extra_root {
            let r = pool.root(id, i);
            if r != 0 {
                m.mark(r)?;
            }
        }
        Ok(())
    })?;
    Ok((id, heap))
}

/// A structure's 64-byte header, the first line of its region.
pub(crate) trait RegionHeader: Copy {}

/// Writes `h` at the start of the fresh region `off` and persists it (one barrier).
pub(crate) fn write_header<H: RegionHeader>(pool: &Pool, off: u64, h: H) -> ferrite_pm::Result<()> {
    const { assert!(std::mem::size_of::<H>() == 64) };
    let p = pool.at(off, 64);
    // SAFETY: `off` is a fresh, 64-aligned heap block of at least 64 bytes and
    // H is 64 bytes of plain data.
    unsafe { std::ptr::write(p as *mut H, h) };
    pool.persist(p, 64)
}

/// Reads the header of region `off` after checking the region is a block of
/// `heap` large enough to hold it; also returns the block's size.
pub(crate) fn read_header<H: RegionHeader>(
    pool: &Pool,
    heap: &Heap,
    off: u64,
    name: &str,
) -> Result<(H, usize)> {
    const { assert!(std::mem::size_of::<H>() == 64) };
    let size = heap.block_size(off).unwrap_or(0);
    if size < 64 {
        return Err(corrupt(name, "region is not a block"));
    }
    // SAFETY: the block has at least 64 bytes (checked); H is plain data valid
    // for every bit pattern.
    Ok((
        unsafe { std::ptr::read(pool.at(off, 64) as *const H) },
        size,
    ))
}

/// Reads an 8-byte word of PM.
///
/// # Safety
/// `p` must be 8-byte aligned and inside a live mapping.
#[inline(always)]
pub(crate) unsafe fn rd(p: *const u8) -> u64 {
    // SAFETY: forwarded caller guarantee.
    unsafe { std::ptr::read_volatile(p as *const u64) }
}

/// Writes an 8-byte word of PM (failure-atomic on PM when aligned). Stores to
/// one cache line reach PM in program order (x86-TSO); the store is recorded
/// with the crash simulator so its crash images respect that order.
///
/// # Safety
/// `p` must be 8-byte aligned and inside a live mapping.
#[inline(always)]
pub(crate) unsafe fn wr(p: *mut u8, v: u64) {
    // SAFETY: forwarded caller guarantee (aligned, mapped); PM words are only
    // accessed as whole words, so viewing this one as an atomic is sound.
    let w = unsafe { &*(p as *const std::sync::atomic::AtomicU64) };
    ferrite_pm::store_u64(w, v, std::sync::atomic::Ordering::Relaxed);
}

/// Zeroes every cache line of `[p, p+len)` that is not already zero and writes it
/// back (no fence). Reading first keeps clean space free of write traffic, so
/// zeroing a mostly clean segment costs a scan, not a rewrite.
/// Returns the number of lines written.
pub(crate) fn zero_dirty_lines(pool: &Pool, p: *mut u8, len: usize) -> usize {
    debug_assert!((p as usize).is_multiple_of(64) && len.is_multiple_of(64));
    let mut n = 0;
    let mut i = 0;
    while i < len {
        // SAFETY: the caller passes a line-aligned range of its region, so
        // q..q+64 is mapped, aligned and writable.
        let q = unsafe { p.add(i) };
        // SAFETY: as above.
        let line = unsafe { std::slice::from_raw_parts(q as *const u64, 8) };
        if line.iter().any(|&w| w != 0) {
            // SAFETY: as above.
            unsafe { std::ptr::write_bytes(q, 0, 64) };
            pool.flush(q, 64);
            n += 1;
        }
        i += 64;
    }
    n
}

pub(crate) fn round_up(x: usize, a: usize) -> usize {
    x.div_ceil(a) * a
}
