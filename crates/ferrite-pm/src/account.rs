//! Heap accounting for checkers: prove that no block leaked and none is handed
//! out twice, by allocating everything that is free.

use crate::error::PmError;
use crate::heap::Heap;
use crate::layout::{chunk_kind, SIZE_CLASSES};
use crate::pool::Pool;

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
