//! msync mode against real failures and real concurrency.
//!
//! * A pool on a real failing device (ext4 on a loop device whose backing store
//!   runs out, `ferrite_testkit::FailingDisk`): the fence that waited for the
//!   failed write-back returns the kernel's error, the pool is poisoned, and
//!   every later fence and metadata write fails too.
//! * Many threads flushing and fencing on one queue: a fence returns only when
//!   every range it depends on has been written back (`loom_msync.rs` checks
//!   the same property exhaustively).

use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use ferrite_pm::msync::{MsyncQueue, StdLocks, WriteBack};
use ferrite_pm::{Durability, PmError, Pool, PoolOptions};
use ferrite_testkit::FailingDisk;
use ferrite_testkit::SlotTable;

fn msync_opts() -> PoolOptions {
    PoolOptions {
        msync: true,
        ..PoolOptions::default()
    }
}

#[test]
fn a_failed_write_back_on_a_real_device_fails_the_fence_and_poisons_the_pool() {
    // 64 MiB of filesystem on 8 MiB of real backing store.
    let Some(disk) = FailingDisk::new(64 << 20, 8 << 20) else {
        return;
    };
    let path = disk.path().join("p.pool");
    let pool = Pool::create(&path, 32 << 20, &msync_opts()).unwrap();
    assert_eq!(pool.durability(), Durability::FileMsync);
    let table = SlotTable::open_or_create(&pool, "t", 64).unwrap();
    // Publish blocks until the device's write-backs fail: more data than the
    // backing store can hold.
    let mut failure = None;
    for i in 0..64 {
        match table.publish(i, 1, 400 << 10) {
            Ok(()) => continue,
            Err(e) => {
                failure = Some(e);
                break;
            }
        }
    }
    let e = failure.expect("writing 25 MiB to an 8 MiB device never failed");
    let msg = e.to_string();
    assert!(
        matches!(e, PmError::Io { .. }),
        "the failure is an I/O error from the device: {msg}"
    );
    assert!(
        msg.contains("No space left") || msg.contains("Input/output error"),
        "the kernel's error reaches the caller: {msg}"
    );
    // Poisoned: every later fence and metadata write fails with it.
    assert!(pool.health().is_err());
    assert!(pool.fence().is_err());
    assert!(pool.create_object("later", "t").is_err());
    assert!(table.publish(0, 2, 64).is_err());
    let again = pool.fence().unwrap_err().to_string();
    assert!(again.contains("earlier write-back"), "{again}");
}

/// Records which ranges were written back; yields inside the write-back so
/// other threads run while it is "in flight".
#[derive(Default)]
struct Recorder {
    done: Mutex<HashSet<(usize, usize)>>,
}

impl WriteBack for Recorder {
    fn write_back(&self, off: usize, len: usize) -> std::io::Result<()> {
        std::thread::yield_now();
        self.done.lock().unwrap().insert((off, len));
        Ok(())
    }
}

impl Recorder {
    fn covered(&self, off: usize) -> bool {
        self.done
            .lock()
            .unwrap()
            .iter()
            .any(|&(o, l)| o <= off && off < o + l)
    }
}

#[test]
fn concurrent_fences_wait_for_every_range_they_depend_on() {
    const THREADS: usize = 4;
    const ROUNDS: usize = 2_000;
    let q = Arc::new(MsyncQueue::<StdLocks>::new());
    let wb = Arc::new(Recorder::default());
    let bad = Arc::new(AtomicBool::new(false));
    let ts: Vec<_> = (0..THREADS)
        .map(|t| {
            let (q, wb, bad) = (q.clone(), wb.clone(), bad.clone());
            std::thread::spawn(move || {
                for r in 0..ROUNDS {
                    // Every range is distinct and never adjacent to another,
                    // so coalescing cannot hide a missing write-back.
                    let off = ((r * THREADS + t) * 2) << 12;
                    q.note(off, 4096);
                    q.fence(&*wb).unwrap();
                    if !wb.covered(off) {
                        bad.store(true, Ordering::Relaxed);
                    }
                }
            })
        })
        .collect();
    for t in ts {
        t.join().unwrap();
    }
    assert!(
        !bad.load(Ordering::Relaxed),
        "a fence returned before a range noted before it was written back"
    );
}

#[test]
fn msync_pools_fence_from_many_threads() {
    let dir = std::env::temp_dir().join(format!("ferrite-msync-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("p.pool");
    let pool = Pool::create(&path, 8 << 20, &msync_opts()).unwrap();
    let t = Arc::new(SlotTable::open_or_create(&pool, "t", 64).unwrap());
    let hs: Vec<_> = (0..4)
        .map(|k| {
            let t = t.clone();
            std::thread::spawn(move || {
                for v in 1..=20u64 {
                    t.publish(k * 16 + (v as usize % 16), v, 300).unwrap();
                }
            })
        })
        .collect();
    for h in hs {
        h.join().unwrap();
    }
    drop(t);
    drop(pool);
    let pool = Pool::open(&path, &PoolOptions::default()).unwrap();
    let t = SlotTable::open_or_create(&pool, "t", 64).unwrap();
    for k in 0..4 {
        for s in 0..16 {
            assert!(t.read(k * 16 + s).unwrap().is_some());
        }
    }
    drop(t);
    drop(pool);
    std::fs::remove_dir_all(&dir).unwrap();
}
