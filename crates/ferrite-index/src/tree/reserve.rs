//! Space reservations of write batches. Before a batch's log is committed,
//! every block its application could need (an out-of-line key and value per
//! put, and a leaf for a split) is allocated up front; while the batch applies,
//! allocations on that thread for that index come from the reservation. So a
//! committed batch can no longer fail half-way for want of space: a full pool
//! fails the batch before anything is applied. Unused blocks go back to the
//! heap when the batch ends (they were never reachable, so a crash frees them
//! too).

use std::cell::RefCell;

use ferrite_kv::{BatchOp, KvResult};
use ferrite_pm::Heap;

use crate::error::pm;
use crate::leaf::{INLINE_MAX, LEAF_SIZE, LONG_INLINE_MAX};

struct Reservation {
    /// Which heap the blocks belong to (its address: the index's field).
    heap: usize,
    /// (requested size, block offset)
    blocks: Vec<(usize, u64)>,
}

thread_local! {
    static ACTIVE: RefCell<Option<Reservation>> = const { RefCell::new(None) };
}

/// Allocates `size` bytes from `heap`, from the current batch's reservation
/// when one is active for this heap on this thread.
pub(crate) fn alloc(heap: &Heap, size: usize) -> ferrite_pm::Result<u64> {
    let key = heap as *const Heap as usize;
    let reserved = ACTIVE.with(|a| {
        let mut a = a.borrow_mut();
        let r = a.as_mut().filter(|r| r.heap == key)?;
        let i = r
            .blocks
            .iter()
            .position(|&(s, _)| s == size)
            .or_else(|| r.blocks.iter().position(|&(s, _)| s >= size))?;
        Some(r.blocks.swap_remove(i).1)
    });
    match reserved {
        Some(off) => Ok(off),
        None => heap.alloc(size),
    }
}

/// Sizes of the blocks applying `ops` may allocate, at most.
fn needs(ops: &[BatchOp]) -> Vec<usize> {
    let mut v = Vec::new();
    for op in ops {
        if let BatchOp::Put { key, value } = op {
            if key.len() > LONG_INLINE_MAX {
                v.push(8 + key.len());
            }
            if value.len() > INLINE_MAX {
                v.push(8 + value.len());
            }
            v.push(LEAF_SIZE);
        }
    }
    v
}

/// The active reservation of one batch; returns what it did not use on drop.
pub(crate) struct Reserved<'h> {
    heap: &'h Heap,
}

/// Reserves everything `ops` may need from `heap` and makes it the current
/// thread's reservation. Fails (having freed what it got) when the pool cannot
/// hold it.
pub(crate) fn reserve<'h>(heap: &'h Heap, ops: &[BatchOp]) -> KvResult<Reserved<'h>> {
    let mut blocks = Vec::new();
    for size in needs(ops) {
        match heap.alloc(size) {
            Ok(off) => blocks.push((size, off)),
            Err(e) => {
                for (_, off) in blocks {
                    let _ = heap.free(off);
                }
                return Err(pm(e));
            }
        }
    }
    ACTIVE.with(|a| {
        *a.borrow_mut() = Some(Reservation {
            heap: heap as *const Heap as usize,
            blocks,
        })
    });
    Ok(Reserved { heap })
}

impl Drop for Reserved<'_> {
    fn drop(&mut self) {
        if let Some(r) = ACTIVE.with(|a| a.borrow_mut().take()) {
            for (_, off) in r.blocks {
                // Never reachable: no unlink to wait for.
                let _ = self.heap.free(off);
            }
        }
    }
}
