//! Concurrent allocation: threads allocate, stamp, verify and free blocks (also
//! blocks allocated by other threads); any block handed out twice would show up
//! as a stamp overwritten by another owner.

use std::sync::mpsc;

use ferrite_pm::rng::SplitMix;
use ferrite_pm::{Heap, Pool, PoolOptions};

const SIZES: [usize; 6] = [16, 64, 200, 256, 1000, 5000];

fn stamp(pool: &Pool, off: u64, len: usize, tag: u64) {
    let p = pool.at(off, len) as *mut u64;
    for i in 0..len / 8 {
        // SAFETY: the block is at least `len` bytes and owned by this thread.
        unsafe { p.add(i).write_volatile(tag ^ i as u64) };
    }
}

fn verify(pool: &Pool, off: u64, len: usize, tag: u64) {
    let p = pool.at(off, len) as *const u64;
    for i in 0..len / 8 {
        // SAFETY: as in `stamp`.
        let v = unsafe { p.add(i).read_volatile() };
        assert_eq!(v, tag ^ i as u64, "block {off:#x} was handed out twice");
    }
}

fn worker(
    heap: Heap,
    seed: u64,
    ops: usize,
    give: mpsc::Sender<(u64, usize, u64)>,
    take: mpsc::Receiver<(u64, usize, u64)>,
) {
    let pool = heap.pool().clone();
    let mut rng = SplitMix(seed);
    let mut mine: Vec<(u64, usize, u64)> = Vec::new();
    for op in 0..ops {
        // Adopt blocks other threads handed over, then verify and free them here.
        while let Ok((off, len, tag)) = take.try_recv() {
            verify(&pool, off, len, tag);
            heap.free(off).unwrap();
        }
        match rng.below(10) {
            0..=4 => {
                let len = SIZES[rng.below(SIZES.len() as u64) as usize];
                let off = heap.alloc(len).unwrap();
                let tag = seed << 40 | op as u64;
                stamp(&pool, off, len, tag);
                mine.push((off, len, tag));
            }
            5..=7 if !mine.is_empty() => {
                let i = rng.below(mine.len() as u64) as usize;
                let (off, len, tag) = mine.swap_remove(i);
                verify(&pool, off, len, tag);
                heap.free(off).unwrap();
            }
            8 if !mine.is_empty() => {
                let i = rng.below(mine.len() as u64) as usize;
                let _ = give.send(mine.swap_remove(i));
            }
            _ => pool.fence().unwrap(), // lets freed blocks be reused
        }
    }
    for (off, len, tag) in mine {
        verify(&pool, off, len, tag);
    }
}

#[test]
fn threads_never_share_a_block() {
    let pool = Pool::create_volatile(256 << 20, &PoolOptions::default()).unwrap();
    let id = pool.create_object("stress", "t").unwrap();
    let (heap, _) = pool.open_heap(id, |_| Ok(())).unwrap();
    let (tx_a, rx_b) = mpsc::channel();
    let (tx_b, rx_a) = mpsc::channel();
    let threads = [(1, tx_a, rx_a), (2, tx_b, rx_b)].map(|(seed, give, take)| {
        let h = heap.clone();
        std::thread::spawn(move || worker(h, seed, 200_000, give, take))
    });
    for t in threads {
        t.join().unwrap();
    }
}

/// A thread that frees blocks and never allocates (a structure's clean-up
/// thread) must not keep them from the threads that allocate: the freed
/// blocks become reusable once the freeing thread has fenced, whoever
/// allocates next. Here one thread allocates ten times the pool's heap, in
/// batches another thread frees (and fences) before the next batch; without
/// that, the freed blocks would stay in the freeing thread's cache and the
/// pool would fill.
#[test]
fn blocks_freed_by_a_thread_that_never_allocates_are_reused() {
    let pool = Pool::create_volatile(4 << 20, &PoolOptions::default()).unwrap();
    let id = pool.create_object("churn", "t").unwrap();
    let (heap, _) = pool.open_heap(id, |_| Ok(())).unwrap();
    let (chunks, _) = pool.chunk_usage();
    let heap_bytes = chunks * pool.header().chunk_size;
    let (tx, rx) = mpsc::channel::<Vec<u64>>();
    let (done_tx, done_rx) = mpsc::channel::<()>();
    let h = heap.clone();
    let freer = std::thread::spawn(move || {
        let pool = h.pool().clone();
        let mut n = 0u64;
        for batch in rx {
            for off in batch {
                h.free(off).unwrap();
                n += 1;
            }
            pool.fence().unwrap();
            done_tx.send(()).unwrap();
        }
        n
    });
    let block = 6000;
    let batches = 10 * heap_bytes / block as u64 / 32;
    for b in 0..batches {
        let batch: Vec<u64> = (0..32)
            .map(|i| {
                heap.alloc(block).unwrap_or_else(|e| {
                    panic!("allocation {} of {}: {e}", b * 32 + i, batches * 32)
                })
            })
            .collect();
        tx.send(batch).unwrap();
        done_rx.recv().unwrap();
    }
    drop(tx);
    assert_eq!(freer.join().unwrap(), batches * 32);
}
