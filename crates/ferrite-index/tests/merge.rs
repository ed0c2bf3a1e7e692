//! Merging of sparse leaves: after deleting 90% of the keys, spread evenly,
//! no leaf is empty, so the empty-leaf unlink alone would keep every leaf;
//! merges must compact them, without losing, duplicating or leaking anything,
//! and the result must survive a reopen.

use std::collections::BTreeMap;

use ferrite_index::{FerriteIndex, OrderedKv};
use ferrite_pm::rng::SplitMix;
use ferrite_pm::{Pool, PoolOptions};

mod common;
use common::temp_pool;

/// 8-byte keys, or a mix of narrow, wide inline and wide out-of-line keys.
fn key(i: u64, variable: bool) -> Vec<u8> {
    if !variable {
        return (i * 7919).to_be_bytes().to_vec();
    }
    match i % 3 {
        0 => (i * 7919).to_be_bytes().to_vec(),
        1 => format!("k-{:012}", i * 7919).into_bytes(),
        _ => format!("a-long-key-{:012}-with-an-out-of-line-tail", i * 7919).into_bytes(),
    }
}

/// Inline values, and every fourth one out of line.
fn val(i: u64) -> Vec<u8> {
    if i.is_multiple_of(4) {
        format!("value-{i}-stored-out-of-line").into_bytes()
    } else {
        (i * 3).to_le_bytes().to_vec()
    }
}

fn contents(idx: &FerriteIndex) -> BTreeMap<Vec<u8>, Vec<u8>> {
    let mut m = BTreeMap::new();
    idx.scan(&[], usize::MAX, &mut |k, v| {
        m.insert(k.to_vec(), v.to_vec());
    })
    .unwrap();
    m
}

fn check(idx: &FerriteIndex, want: &BTreeMap<Vec<u8>, Vec<u8>>) {
    assert_eq!(&contents(idx), want);
    for (k, v) in want {
        assert_eq!(idx.get(k).unwrap().as_ref(), Some(v));
    }
    assert_eq!(idx.count(), want.len());
    idx.check_structure().unwrap();
}

/// Leaves left by the same inserts and deletes with merging off (only empty
/// leaves removed, as in FPTree).
fn leaves_without_merges(order: &[u64], variable: bool) -> u64 {
    let idx = FerriteIndex::volatile(64 << 20).unwrap();
    idx.set_leaf_merging(false);
    for &i in order {
        assert!(idx.insert(&key(i, variable), &val(i)).unwrap());
    }
    for &i in order {
        if i % 10 != 0 {
            assert!(idx.remove(&key(i, variable)).unwrap());
        }
    }
    assert_eq!(idx.structure_stats().2, 0);
    idx.memory_usage().leaves
}

fn sparse_leaves_merge(variable: bool) {
    let tp = temp_pool(if variable { "merge-var" } else { "merge-fixed" });
    let n = 5_000u64;
    let mut rng = SplitMix(42);
    let mut order: Vec<u64> = (0..n).collect();
    for i in (1..order.len()).rev() {
        order.swap(i, rng.below(i as u64 + 1) as usize);
    }
    let mut want = BTreeMap::new();
    let leaves;
    {
        let pool = Pool::create(&tp.0, 64 << 20, &PoolOptions::default()).unwrap();
        let idx = FerriteIndex::open_or_create(&pool, "idx").unwrap();
        for &i in &order {
            assert!(idx.insert(&key(i, variable), &val(i)).unwrap());
        }
        let before = idx.memory_usage().leaves;
        // Delete 90%, spread evenly (every key but each tenth), in random order.
        for &i in &order {
            if i % 10 != 0 {
                assert!(idx.remove(&key(i, variable)).unwrap());
            } else {
                want.insert(key(i, variable), val(i));
            }
        }
        let (splits, unlinks, merges) = idx.structure_stats();
        leaves = idx.memory_usage().leaves;
        let baseline = leaves_without_merges(&order, variable);
        eprintln!(
            "variable={variable}: {before} leaves before the deletes, {leaves} after \
             ({splits} splits, {unlinks} unlinks, {merges} merges); \
             {baseline} without merges"
        );
        // Most leaves keep some of their keys, so empty-leaf removal alone
        // keeps most of them.
        assert!(baseline > before / 2, "{baseline} of {before}");
        assert!(
            leaves * 3 < baseline,
            "{leaves} leaves, {baseline} without merges"
        );
        assert!(merges * 2 > before, "{merges} merges");
        check(&idx, &want);
        idx.exhaust_and_account().unwrap();
    }
    let pool = Pool::open(&tp.0, &PoolOptions::default()).unwrap();
    let idx = FerriteIndex::open_or_create(&pool, "idx").unwrap();
    let rs = idx.rebuild_stats();
    assert_eq!(rs.leaves, leaves);
    assert_eq!(rs.repaired_leaves + rs.unlinked_leaves, 0);
    check(&idx, &want);
    // Still fully usable after the reopen: refill, then account.
    for i in (0..n).filter(|i| i % 10 == 5) {
        assert!(idx.insert(&key(i, variable), &val(i)).unwrap());
        want.insert(key(i, variable), val(i));
    }
    check(&idx, &want);
    idx.exhaust_and_account().unwrap();
}

#[test]
fn sparse_fixed_key_leaves_merge() {
    sparse_leaves_merge(false);
}

#[test]
fn sparse_variable_key_leaves_merge() {
    sparse_leaves_merge(true);
}
