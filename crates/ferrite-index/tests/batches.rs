//! Write batches at the edge of a full pool (issue 9, defect 3): a batch that
//! cannot fit fails before anything of it is applied or committed, so readers,
//! later batches and a reopen never see part of it.

mod common;
use common::temp_pool;

use ferrite_index::{FerriteIndex, KvError, OrderedKv, WriteBatch};
use ferrite_pm::{PmError, Pool, PoolOptions};

fn opts() -> PoolOptions {
    PoolOptions {
        chunk_size: 16 * 1024,
        ..PoolOptions::default()
    }
}

fn is_full(e: &KvError) -> bool {
    e.storage_error()
        .and_then(|s| s.downcast_ref::<PmError>())
        .is_some_and(|p| matches!(p, PmError::PoolFull { .. }))
}

#[test]
fn a_batch_that_does_not_fit_applies_nothing() {
    let path = temp_pool("batch-full");
    let value = vec![0xabu8; 2000];
    let mut filled = 0u64;
    {
        let pool = Pool::create(&path.0, 1 << 20, &opts()).unwrap();
        let idx = FerriteIndex::open_or_create(&pool, "i").unwrap();
        loop {
            match idx.insert(&filled.to_be_bytes(), &value) {
                Ok(_) => filled += 1,
                Err(e) if is_full(&e) => break,
                Err(e) => panic!("{e}"),
            }
        }
        // Room for three chunks again (the first 24 values, 8 per 16 KiB
        // chunk, freed for good by the reopen): enough for the batch's log
        // (two chunks) and some of its values, not all of them.
        for k in 0..24u64 {
            assert!(idx.remove(&k.to_be_bytes()).unwrap());
        }
    }
    let pool = Pool::open(&path.0, &opts()).unwrap();
    let idx = FerriteIndex::open_or_create(&pool, "i").unwrap();
    let mut b = WriteBatch::new();
    for k in 0..10u64 {
        b.put(format!("batch-{k}").as_bytes(), &value);
    }
    let err = idx
        .write_batch(&b)
        .expect_err("the log and ten values cannot fit in three chunks");
    assert!(is_full(&err), "{err}");
    let none = |idx: &FerriteIndex| {
        (0..10u64).all(|k| idx.get(format!("batch-{k}").as_bytes()).unwrap().is_none())
    };
    assert!(none(&idx), "a failed batch left part of itself behind");
    assert_eq!(idx.count() as u64, filled - 24);
    // Make room (whole chunks, freed for good by a reopen); the next batch is
    // not blocked by a leftover log.
    for k in 24..100u64 {
        idx.remove(&k.to_be_bytes()).unwrap();
    }
    drop(idx);
    drop(pool);
    let pool = Pool::open(&path.0, &opts()).unwrap();
    let idx = FerriteIndex::open_or_create(&pool, "i").unwrap();
    assert!(none(&idx));
    let mut small = WriteBatch::new();
    small.put(b"x", b"1").put(b"y", b"2");
    idx.write_batch(&small).unwrap();
    drop(idx);
    drop(pool);
    let pool = Pool::open(&path.0, &opts()).unwrap();
    let idx = FerriteIndex::open_or_create(&pool, "i").unwrap();
    assert!(!idx.rebuild_stats().replayed_batch);
    assert!(none(&idx), "a reopen replayed part of the failed batch");
    assert_eq!(idx.get(b"y").unwrap().as_deref(), Some(&b"2"[..]));
}
