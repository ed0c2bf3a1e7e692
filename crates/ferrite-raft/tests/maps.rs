//! Both PM maps against a `BTreeMap` oracle: random puts, deletes, floor and
//! range queries, commits, reopenings (which must recover exactly the last
//! commit), clean-up steps, snapshot record streams and snapshot
//! installations.

use std::collections::BTreeMap as Oracle;

use ferrite_pm::{Pool, PoolOptions};
use ferrite_raft::map::record;
use ferrite_raft::{BTreeMap, BTreeOptions, ListMap, ListOptions, PmMap};
use proptest::prelude::*;

#[derive(Debug, Clone)]
enum Op {
    Put(u8, u16, u8),
    Del(u8),
    Commit,
    Reopen,
    Clean,
    Floor(u8, u8),
    Range(u8, u8),
    Install(Vec<(u8, u16)>),
    /// Puts as a snapshot record stream (`PmMap::put_records`).
    Records(Vec<(u8, u16)>),
}

fn key(k: u8) -> Vec<u8> {
    match k % 4 {
        0 if k == 0 => Vec::new(),
        // The edges of the version keys' space and keys in it (a list
        // indexes those in the background after an open).
        0 if k == 4 => vec![1],
        0 if k == 8 => vec![2],
        0 if k.is_multiple_of(8) => vec![k],
        0 => vec![1, k, 0],
        1 => format!("k{k}").into_bytes(),
        2 => format!("key-{k:05}-with-a-longer-tail").into_bytes(),
        _ => vec![k, 0, k],
    }
}

fn value(len: u16, seed: u8) -> Vec<u8> {
    (0..len).map(|i| (i as u8).wrapping_mul(seed | 1)).collect()
}

fn op() -> impl Strategy<Value = Op> {
    let len = prop_oneof![0u16..16, 16u16..64, 64u16..3000];
    prop_oneof![
        40 => (0u8..48, len.clone(), any::<u8>()).prop_map(|(k, l, s)| Op::Put(k, l, s)),
        15 => (0u8..48).prop_map(Op::Del),
        10 => Just(Op::Commit),
        3 => Just(Op::Reopen),
        5 => Just(Op::Clean),
        5 => (0u8..48, 0u8..48).prop_map(|(a, b)| Op::Floor(a, b)),
        5 => (0u8..48, 0u8..48).prop_map(|(a, b)| Op::Range(a, b)),
        1 => prop::collection::vec((0u8..48, 0u16..200), 0..20).prop_map(Op::Install),
        3 => prop::collection::vec((0u8..48, 0u16..3000), 0..12).prop_map(Op::Records),
    ]
}

fn run<M: PmMap>(ops: Vec<Op>, open: impl Fn(&Pool) -> M) {
    let pool = Pool::create_volatile(16 << 20, &PoolOptions::default()).unwrap();
    let mut m = Some(open(&pool));
    let mut now: Oracle<Vec<u8>, Vec<u8>> = Oracle::new();
    let mut committed = now.clone();
    for op in ops {
        let map = m.as_mut().unwrap();
        match op {
            Op::Put(k, l, s) => {
                map.put(&key(k), &value(l, s)).unwrap();
                now.insert(key(k), value(l, s));
            }
            Op::Del(k) => {
                assert_eq!(map.delete(&key(k)).unwrap(), now.remove(&key(k)).is_some());
            }
            Op::Commit => {
                map.commit().unwrap();
                committed = now.clone();
            }
            Op::Reopen => {
                drop(m.take());
                m = Some(open(&pool));
                now = committed.clone();
            }
            Op::Clean => {
                // A clean-up step commits what is pending with its copies.
                let before = map.stats().commits;
                map.maintenance().unwrap();
                if map.stats().commits != before {
                    committed = now.clone();
                }
            }
            Op::Floor(a, b) => {
                let (lo, hi) = (key(a), key(b));
                let want = if lo <= hi {
                    now.range(lo.clone()..=hi.clone())
                        .next_back()
                        .map(|(k, v)| (k.clone(), v.clone()))
                } else {
                    None
                };
                assert_eq!(map.floor(&lo, &hi).unwrap(), want);
            }
            Op::Range(a, b) => {
                let (lo, hi) = (key(a), key(b));
                let want: Vec<_> = if lo < hi {
                    now.range(lo.clone()..hi.clone())
                        .take(7)
                        .map(|(k, v)| (k.clone(), v.clone()))
                        .collect()
                } else {
                    Vec::new()
                };
                assert_eq!(map.range(&lo, &hi, 7).unwrap(), want);
            }
            Op::Records(items) => {
                let mut stream = Vec::new();
                for &(k, l) in &items {
                    record::push(&mut stream, &key(k), &value(l, k));
                    now.insert(key(k), value(l, k));
                }
                // A stream cut short is refused before anything is written.
                if !stream.is_empty() {
                    let before = (map.len(), map.uncommitted());
                    assert!(map.put_records(&stream[..stream.len() - 1]).is_err());
                    assert_eq!((map.len(), map.uncommitted()), before);
                }
                assert_eq!(map.put_records(&stream).unwrap(), items.len() as u64);
            }
            Op::Install(items) => {
                // Every third item put one by one, the runs between them as
                // record streams, in order.
                let mut s = map.staging().unwrap();
                let mut next = Oracle::new();
                let mut stream = Vec::new();
                for (i, (k, l)) in items.into_iter().enumerate() {
                    if i % 3 == 0 {
                        s.put_records(&std::mem::take(&mut stream)).unwrap();
                        s.put(&key(k), &value(l, k)).unwrap();
                    } else {
                        record::push(&mut stream, &key(k), &value(l, k));
                    }
                    next.insert(key(k), value(l, k));
                }
                s.put_records(&stream).unwrap();
                map.install(s).unwrap();
                now = next;
                committed = now.clone();
            }
        }
        let map = m.as_ref().unwrap();
        assert_eq!(map.len(), now.len());
    }
    let map = m.as_ref().unwrap();
    let all = map.range(&[], &[0xff; 8], usize::MAX).unwrap();
    let want: Vec<_> = now.iter().map(|(k, v)| (k.clone(), v.clone())).collect();
    assert_eq!(all, want);
    for (k, v) in &now {
        assert_eq!(map.get(k).unwrap().as_ref(), Some(v));
    }
    assert_eq!(map.check().unwrap(), now.len() as u64);
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    #[test]
    fn list_map_matches_a_btreemap(ops in prop::collection::vec(op(), 1..600)) {
        run(ops, |p| ListMap::open_or_create(p, "m", &ListOptions { page_size: 256, background_index: 1 }).unwrap());
    }

    #[test]
    fn btree_map_matches_a_btreemap(ops in prop::collection::vec(op(), 1..600)) {
        run(ops, |p| BTreeMap::open_or_create(p, "m", &BTreeOptions { fanout: 4 }).unwrap());
    }

    #[test]
    fn btree_map_with_fanout_7_matches_a_btreemap(ops in prop::collection::vec(op(), 1..600)) {
        run(ops, |p| BTreeMap::open_or_create(p, "m", &BTreeOptions { fanout: 7 }).unwrap());
    }
}

/// Many keys, deleted in an order that empties whole subtrees: the tree
/// shrinks back to an empty root and the list's clean-up frees its pages.
#[test]
fn both_maps_grow_and_shrink() {
    fn go<M: PmMap>(m: &mut M) {
        for i in 0..5000u32 {
            m.put(&i.to_be_bytes(), &[i as u8; 12]).unwrap();
            if i % 10 == 0 {
                m.commit().unwrap();
            }
        }
        m.commit().unwrap();
        assert_eq!(m.check().unwrap(), 5000);
        for i in (0..5000u32).rev() {
            assert!(m.delete(&i.to_be_bytes()).unwrap());
            if i % 10 == 0 {
                m.commit().unwrap();
                while m.maintenance().unwrap() {}
            }
        }
        m.commit().unwrap();
        assert_eq!(m.check().unwrap(), 0);
        assert!(m.is_empty());
    }
    let pool = Pool::create_volatile(64 << 20, &PoolOptions::default()).unwrap();
    let mut t = BTreeMap::open_or_create(&pool, "t", &BTreeOptions::default()).unwrap();
    go(&mut t);
    assert_eq!(t.stats().pm_bytes, 0, "an empty tree holds no blocks");
    let mut l = ListMap::open_or_create(&pool, "l", &ListOptions::default()).unwrap();
    go(&mut l);
    assert!(l.pages() <= 5, "{} pages left after clean-up", l.pages());
}
