//! The crash simulator's durability model: a line is durable only when flushed
//! and fenced; dirty lines may or may not survive.

use std::sync::{Arc, Mutex};

use ferrite_pm::sim::CrashPoint;
use ferrite_pm::{Pool, PoolOptions};

fn sim_pool() -> (Pool, u64) {
    let pool = Pool::create_simulated(1 << 20, &PoolOptions::default()).unwrap();
    let id = pool.create_object("x", "t").unwrap();
    let (heap, _) = pool.open_heap(id, |_| Ok(())).unwrap();
    let off = heap.alloc(256).unwrap();
    std::mem::forget(heap);
    (pool, off)
}

fn read(img: &ferrite_pm::AlignedBuf, off: u64) -> u64 {
    u64::from_le_bytes(
        img.as_slice()[off as usize..off as usize + 8]
            .try_into()
            .unwrap(),
    )
}

fn write(pool: &Pool, off: u64, v: u64) {
    // SAFETY: off is a 256-byte block of the pool.
    unsafe { std::ptr::write_volatile(pool.at(off, 8) as *mut u64, v) };
}

/// Captures images at seeds 0 and 1 for every fence.
/// (fence, value in the durable image, value with every dirty line evicted, dirty lines)
type Captured = Arc<Mutex<Vec<(u64, u64, u64, usize)>>>;

fn capture(pool: &Pool, off: u64) -> Captured {
    let log = Arc::new(Mutex::new(Vec::new()));
    let l = log.clone();
    pool.set_crash_hook(Some(Box::new(move |p: &CrashPoint<'_>| {
        let d = p.dirty_lines();
        let durable = read(&p.image(&d, 0), off);
        let evicted = read(&p.image(&d, 1), off);
        l.lock().unwrap().push((p.fence, durable, evicted, d.len()));
    })))
    .unwrap();
    log
}

#[test]
fn unflushed_stores_are_not_durable_but_may_be_evicted() {
    let (pool, off) = sim_pool();
    let log = capture(&pool, off);
    write(&pool, off, 7);
    pool.fence().unwrap(); // no flush: 7 is dirty, not durable
    let (fence, durable, evicted, dirty) = log.lock().unwrap()[0];
    assert_eq!((fence, durable, evicted, dirty), (1, 0, 7, 1));
    // After the fence it is still not durable (never flushed).
    pool.with_crash_point(|p| {
        let d = p.dirty_lines();
        assert_eq!(read(&p.image(&d, 0), off), 0);
    })
    .unwrap();
}

#[test]
fn flushed_lines_become_durable_at_the_next_fence() {
    let (pool, off) = sim_pool();
    let log = capture(&pool, off);
    write(&pool, off, 5);
    pool.flush(pool.at(off, 8), 8);
    pool.fence().unwrap(); // crash point 1: before this fence, 5 is pending
    write(&pool, off, 6);
    pool.fence().unwrap(); // crash point 2: 5 durable, 6 dirty
    let l = log.lock().unwrap().clone();
    assert_eq!(l[0].1, 0, "pending flush is not durable before its fence");
    assert_eq!(l[0].2, 5);
    assert_eq!((l[1].1, l[1].2), (5, 6));
    pool.with_crash_point(|p| assert_eq!(p.dirty_lines().len(), 1))
        .unwrap();
}

#[test]
fn random_seeds_choose_per_line() {
    let (pool, off) = sim_pool();
    for i in 0..4u64 {
        write(&pool, off + 64 * i, i + 1);
    }
    let seen = pool
        .with_crash_point(|p| {
            let d = p.dirty_lines();
            assert_eq!(d.len(), 4);
            let mut patterns = std::collections::HashSet::new();
            for seed in 2..200 {
                let img = p.image(&d, seed);
                let pat: Vec<bool> = (0..4u64).map(|i| read(&img, off + 64 * i) != 0).collect();
                patterns.insert(pat);
            }
            patterns.len()
        })
        .unwrap();
    assert!(seen >= 12, "only {seen} of 16 eviction patterns appeared");
}

#[test]
fn nt_copies_are_pending_until_a_fence() {
    let (pool, off) = sim_pool();
    let log = capture(&pool, off);
    pool.nt_copy(pool.at(off, 8), &9u64.to_le_bytes());
    pool.fence().unwrap();
    pool.fence().unwrap();
    let l = log.lock().unwrap().clone();
    assert_eq!(l[0].1, 0);
    assert_eq!(l[1].1, 9);
}

#[test]
fn non_simulated_pools_refuse_hooks() {
    let pool = Pool::create_volatile(1 << 20, &PoolOptions::default()).unwrap();
    assert!(pool.set_crash_hook(None).is_err());
    assert!(pool.sim_fences().is_none());
}
