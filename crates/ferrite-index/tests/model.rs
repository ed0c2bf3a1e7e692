//! Model-based tests against a `BTreeMap` oracle: random sequences of every
//! operation (insert, update, upsert, remove, get, scan, cursor moves in both
//! directions, batches, count), fixed 8-byte and variable-length keys, on the
//! durable code path (with a reopen at the end) and in volatile mode.

use std::collections::BTreeMap;

use ferrite_index::{FerriteIndex, OrderedKv, WriteBatch, MAX_KEY, MAX_VALUE};
use ferrite_pm::{Pool, PoolOptions};
use proptest::prelude::*;

#[derive(Debug, Clone)]
enum Op {
    Insert(u16, u16),
    Update(u16, u16),
    Upsert(u16, u16),
    Remove(u16),
    Get(u16),
    Scan(u16, u8),
    CursorFwd(u16, u8),
    CursorBack(Option<u16>, u8),
    Batch(Vec<(u16, Option<u16>)>),
}

fn key(k: u16, variable: bool) -> Vec<u8> {
    if !variable {
        return (k as u64 * 2654435761 % 1_000_003).to_be_bytes().to_vec();
    }
    match k % 7 {
        0 => vec![],
        1 => vec![(k >> 8) as u8, k as u8],
        2 => (k as u64).to_be_bytes().to_vec(),
        3 => format!("k{k:05}").into_bytes(),
        4 => format!("long-key-{k:07}-{}", "x".repeat((k % 50) as usize)).into_bytes(),
        // 17 to 28 bytes with the same first 16: long entries (up to 24
        // bytes) beside out-of-line keys they tie with on two words.
        5 => format!("0123456789abcdef{k:0w$}", w = 1 + (k % 12) as usize).into_bytes(),
        _ => vec![0; 1 + (k % 12) as usize],
    }
}

fn value(v: u16, variable: bool) -> Vec<u8> {
    if !variable {
        return (v as u64 * 977).to_le_bytes().to_vec();
    }
    let len = [0usize, 1, 7, 8, 9, 16, 100, 1000][(v % 8) as usize];
    (0..len).map(|i| (v as usize * 13 + i) as u8).collect()
}

fn op_strategy(keys: u16) -> impl Strategy<Value = Op> {
    let k = 0..keys;
    prop_oneof![
        4 => (k.clone(), any::<u16>()).prop_map(|(k, v)| Op::Insert(k, v)),
        2 => (k.clone(), any::<u16>()).prop_map(|(k, v)| Op::Update(k, v)),
        3 => (k.clone(), any::<u16>()).prop_map(|(k, v)| Op::Upsert(k, v)),
        3 => k.clone().prop_map(Op::Remove),
        2 => k.clone().prop_map(Op::Get),
        1 => (k.clone(), any::<u8>()).prop_map(|(k, n)| Op::Scan(k, n % 40)),
        1 => (k.clone(), any::<u8>()).prop_map(|(k, n)| Op::CursorFwd(k, n % 30)),
        1 => (proptest::option::of(k.clone()), any::<u8>()).prop_map(|(k, n)| Op::CursorBack(k, n % 30)),
        1 => proptest::collection::vec((k, proptest::option::of(any::<u16>())), 0..6).prop_map(Op::Batch),
    ]
}

type Model = BTreeMap<Vec<u8>, Vec<u8>>;

fn run(idx: &FerriteIndex, m: &mut Model, ops: &[Op], var: bool) -> Result<(), TestCaseError> {
    for op in ops {
        match op {
            Op::Insert(k, v) => {
                let (k, v) = (key(*k, var), value(*v, var));
                let new = !m.contains_key(&k);
                prop_assert_eq!(idx.insert(&k, &v).unwrap(), new);
                if new {
                    m.insert(k, v);
                }
            }
            Op::Update(k, v) => {
                let (k, v) = (key(*k, var), value(*v, var));
                let had = m.contains_key(&k);
                prop_assert_eq!(idx.update(&k, &v).unwrap(), had);
                if had {
                    m.insert(k, v);
                }
            }
            Op::Upsert(k, v) => {
                let (k, v) = (key(*k, var), value(*v, var));
                prop_assert_eq!(idx.upsert(&k, &v).unwrap(), m.insert(k, v).is_none());
            }
            Op::Remove(k) => {
                let k = key(*k, var);
                prop_assert_eq!(idx.remove(&k).unwrap(), m.remove(&k).is_some());
            }
            Op::Get(k) => {
                let k = key(*k, var);
                prop_assert_eq!(idx.get(&k).unwrap(), m.get(&k).cloned());
            }
            Op::Scan(k, n) => {
                let k = key(*k, var);
                let mut got = Vec::new();
                let c = idx
                    .scan(&k, *n as usize, &mut |a, b| {
                        got.push((a.to_vec(), b.to_vec()))
                    })
                    .unwrap();
                let want: Vec<_> = m
                    .range(k..)
                    .take(*n as usize)
                    .map(|(a, b)| (a.clone(), b.clone()))
                    .collect();
                prop_assert_eq!(c, want.len());
                prop_assert_eq!(got, want);
            }
            Op::CursorFwd(k, n) => {
                let k = key(*k, var);
                let mut c = idx.cursor().unwrap();
                let mut got = Vec::new();
                let mut e = c.seek(&k).unwrap();
                while let Some(x) = e {
                    got.push(x);
                    if got.len() >= *n as usize {
                        break;
                    }
                    e = c.next().unwrap();
                }
                let want: Vec<_> = m
                    .range(k..)
                    .take((*n as usize).max(1))
                    .map(|(a, b)| (a.clone(), b.clone()))
                    .collect();
                prop_assert_eq!(&got[..], &want[..got.len().min(want.len())]);
                prop_assert_eq!(got.len(), want.len().min((*n as usize).max(1)));
            }
            Op::CursorBack(k, n) => {
                let mut c = idx.cursor().unwrap();
                let (mut e, want): (_, Vec<_>) = match k {
                    None => (
                        c.last().unwrap(),
                        m.iter()
                            .rev()
                            .map(|(a, b)| (a.clone(), b.clone()))
                            .collect(),
                    ),
                    Some(k) => {
                        // Position at the first key >= k, then walk backwards.
                        let k = key(*k, var);
                        let first = c.seek(&k).unwrap();
                        let mut want: Vec<_> = m
                            .range(..k.clone())
                            .rev()
                            .map(|(a, b)| (a.clone(), b.clone()))
                            .collect();
                        if let Some(f) = first {
                            want.insert(0, f.clone());
                            (Some(f), want)
                        } else {
                            (c.prev().unwrap(), want)
                        }
                    }
                };
                let mut got = Vec::new();
                while let Some(x) = e {
                    got.push(x);
                    if got.len() >= (*n as usize).max(1) {
                        break;
                    }
                    e = c.prev().unwrap();
                }
                prop_assert_eq!(&got[..], &want[..got.len().min(want.len())]);
                prop_assert_eq!(got.len(), want.len().min((*n as usize).max(1)));
            }
            Op::Batch(ops) => {
                let mut b = WriteBatch::new();
                for (k, v) in ops {
                    let k = key(*k, var);
                    match v {
                        Some(v) => {
                            let v = value(*v, var);
                            b.put(&k, &v);
                            m.insert(k, v);
                        }
                        None => {
                            b.delete(&k);
                            m.remove(&k);
                        }
                    }
                }
                idx.write_batch(&b).unwrap();
            }
        }
    }
    prop_assert_eq!(idx.count(), m.len());
    Ok(())
}

fn full(idx: &FerriteIndex) -> Model {
    let mut got = Model::new();
    idx.scan(&[], usize::MAX, &mut |k, v| {
        got.insert(k.to_vec(), v.to_vec());
    })
    .unwrap();
    got
}

fn durable_case(ops: &[Op], var: bool) -> Result<(), TestCaseError> {
    let pool = Pool::create_volatile(8 << 20, &PoolOptions::default()).unwrap();
    let mut m = Model::new();
    {
        let idx = FerriteIndex::open_or_create(&pool, "t").unwrap();
        run(&idx, &mut m, ops, var)?;
        prop_assert_eq!(full(&idx), m.clone());
        idx.check_structure().map_err(TestCaseError::fail)?;
    }
    let idx = FerriteIndex::open_or_create(&pool, "t").unwrap();
    prop_assert_eq!(idx.rebuild_stats().keys as usize, m.len());
    prop_assert_eq!(full(&idx), m.clone());
    prop_assert_eq!(idx.count(), m.len());
    idx.exhaust_and_account().map_err(TestCaseError::fail)?;
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    #[test]
    fn fixed_keys_durable(ops in proptest::collection::vec(op_strategy(300), 1..600)) {
        durable_case(&ops, false)?;
    }

    #[test]
    fn variable_keys_durable(ops in proptest::collection::vec(op_strategy(200), 1..500)) {
        durable_case(&ops, true)?;
    }

    #[test]
    fn volatile_mode(ops in proptest::collection::vec(op_strategy(300), 1..500), var in any::<bool>()) {
        let idx = FerriteIndex::volatile(8 << 20).unwrap();
        prop_assert_eq!(idx.name(), "ferrite-dram");
        let mut m = Model::new();
        run(&idx, &mut m, &ops, var)?;
        prop_assert_eq!(full(&idx), m);
    }
}

#[test]
fn oversized_keys_and_values_are_errors() {
    let idx = FerriteIndex::volatile(4 << 20).unwrap();
    let big_key = vec![1u8; MAX_KEY + 1];
    let big_val = vec![1u8; MAX_VALUE + 1];
    assert!(idx.insert(&big_key, b"v").is_err());
    assert!(idx.upsert(b"k", &big_val).is_err());
    assert!(idx.get(&big_key).is_err());
    assert!(idx.remove(&big_key).is_err());
    let mut b = WriteBatch::new();
    b.put(b"ok", b"v").put(b"k", &big_val);
    assert!(idx.write_batch(&b).is_err());
    assert_eq!(
        idx.get(b"ok").unwrap(),
        None,
        "a rejected batch applies nothing"
    );
    // Largest allowed sizes work.
    let k = vec![7u8; MAX_KEY];
    let v = vec![9u8; MAX_VALUE];
    assert!(idx.insert(&k, &v).unwrap());
    assert_eq!(idx.get(&k).unwrap(), Some(v));
}

#[test]
fn zero_and_empty_keys_are_ordinary() {
    let idx = FerriteIndex::volatile(4 << 20).unwrap();
    assert!(idx.insert(&0u64.to_be_bytes(), b"zero").unwrap());
    assert!(idx.insert(b"", b"empty").unwrap());
    assert!(idx.insert(&[0u8; 3], b"three").unwrap());
    assert_eq!(idx.get(&0u64.to_be_bytes()).unwrap().unwrap(), b"zero");
    assert_eq!(idx.get(b"").unwrap().unwrap(), b"empty");
    let mut keys = Vec::new();
    idx.scan(b"", 10, &mut |k, _| keys.push(k.to_vec()))
        .unwrap();
    assert_eq!(keys, vec![vec![], vec![0; 3], vec![0; 8]]);
}

#[test]
fn pool_full_is_an_error_not_a_panic() {
    let pool = Pool::create_volatile(
        1 << 20,
        &PoolOptions {
            chunk_size: 16 * 1024,
            ..Default::default()
        },
    )
    .unwrap();
    let idx = FerriteIndex::open_or_create(&pool, "full").unwrap();
    let mut n = 0u64;
    let err = loop {
        match idx.insert(&n.to_be_bytes(), &[5u8; 200]) {
            Ok(_) => n += 1,
            Err(e) => break e,
        }
        assert!(n < 1_000_000);
    };
    assert!(err.to_string().contains("full"), "{err}");
    for i in 0..n {
        assert_eq!(idx.get(&i.to_be_bytes()).unwrap().unwrap(), vec![5u8; 200]);
    }
    assert_eq!(idx.count() as u64, n);
}
