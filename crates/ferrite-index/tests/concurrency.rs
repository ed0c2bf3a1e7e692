//! Multi-threaded stress: writers own interleaved keys (so they share leaves,
//! splits and empty-leaf removals), readers scan and look up concurrently; the
//! final state is checked key by key against each writer's model, and again
//! after a reopen, with heap accounting.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Barrier;

use ferrite_index::{FerriteIndex, OrderedKv, WriteBatch};
use ferrite_pm::rng::SplitMix;
use ferrite_pm::{Pool, PoolOptions};

const WRITERS: u64 = 3;
const KEYS: u64 = 6000;
const OPS: u64 = 100_000;

fn key(k: u64, var: bool) -> Vec<u8> {
    if var && k % 3 == 1 {
        format!("key-{k:010}-long-enough").into_bytes()
    } else if var && k % 3 == 2 {
        vec![(k >> 16) as u8, (k >> 8) as u8, k as u8]
    } else {
        k.to_be_bytes().to_vec()
    }
}

/// Values name their key, so readers can check they never see another key's value.
fn value(k: u64, ver: u64) -> Vec<u8> {
    let tag = (k << 24 | (ver & 0xff_ffff)).to_le_bytes();
    if matches!(ver % 3, 0) {
        tag.to_vec()
    } else {
        let mut v = tag.to_vec();
        v.extend_from_slice(&[ver as u8; 16]);
        v
    }
}

fn owner_of(v: &[u8]) -> u64 {
    u64::from_le_bytes(v[..8].try_into().unwrap()) >> 24
}

fn stress(idx: &FerriteIndex, var: bool) -> BTreeMap<Vec<u8>, Vec<u8>> {
    let stop = AtomicBool::new(false);
    let barrier = Barrier::new(WRITERS as usize + 1);
    let models: Vec<BTreeMap<Vec<u8>, Vec<u8>>> = std::thread::scope(|s| {
        let reader = s.spawn(|| {
            barrier.wait();
            let mut rng = SplitMix(99);
            let mut scans = 0u64;
            while !stop.load(Ordering::Relaxed) {
                let start = rng.below(KEYS);
                let mut last: Option<Vec<u8>> = None;
                idx.scan(&key(start, var), 50, &mut |k, v| {
                    if let Some(l) = &last {
                        assert!(l.as_slice() < k, "scan out of order");
                    }
                    last = Some(k.to_vec());
                    assert_eq!(key(owner_of(v), var), k, "value of another key");
                })
                .unwrap();
                let k = rng.below(KEYS);
                if let Some(v) = idx.get(&key(k, var)).unwrap() {
                    assert_eq!(owner_of(&v), k, "get returned another key's value");
                }
                scans += 1;
            }
            assert!(scans > 0);
        });
        let writers: Vec<_> = (0..WRITERS)
            .map(|t| {
                let barrier = &barrier;
                s.spawn(move || {
                    barrier.wait();
                    let mut m = BTreeMap::new();
                    let mut rng = SplitMix(t + 1);
                    for i in 0..OPS {
                        // Phases: grow, then churn, then shrink one key range.
                        let k = rng.below(KEYS / WRITERS) * WRITERS + t;
                        let kb = key(k, var);
                        let v = value(k, i);
                        match (i * 3 / OPS, rng.below(10)) {
                            (0, 0..=6) | (1, 0..=3) => {
                                let new = idx.insert(&kb, &v).unwrap();
                                assert_eq!(new, !m.contains_key(&kb));
                                m.entry(kb).or_insert(v);
                            }
                            (0, 7) | (1, 4..=5) => {
                                let had = idx.update(&kb, &v).unwrap();
                                assert_eq!(had, m.contains_key(&kb));
                                if had {
                                    m.insert(kb, v);
                                }
                            }
                            (1, 6) | (2, 0) => {
                                let new = idx.upsert(&kb, &v).unwrap();
                                assert_eq!(new, m.insert(kb, v).is_none());
                            }
                            (1, 7) => {
                                let mut b = WriteBatch::new();
                                for j in 0..3 {
                                    let k2 = (k + j * WRITERS) % KEYS;
                                    let k2 = k2 - k2 % WRITERS + t;
                                    let kb2 = key(k2, var);
                                    if j == 2 {
                                        b.delete(&kb2);
                                        m.remove(&kb2);
                                    } else {
                                        let v2 = value(k2, i);
                                        b.put(&kb2, &v2);
                                        m.insert(kb2, v2);
                                    }
                                }
                                idx.write_batch(&b).unwrap();
                            }
                            (2, _) if k < KEYS / 2 => {
                                let had = idx.remove(&kb).unwrap();
                                assert_eq!(had, m.remove(&kb).is_some());
                            }
                            _ => {
                                let had = idx.remove(&kb).unwrap();
                                assert_eq!(had, m.remove(&kb).is_some());
                            }
                        }
                    }
                    m
                })
            })
            .collect();
        let models = writers.into_iter().map(|w| w.join().unwrap()).collect();
        stop.store(true, Ordering::Relaxed);
        reader.join().unwrap();
        models
    });
    let mut all = BTreeMap::new();
    for m in models {
        all.extend(m);
    }
    all
}

fn check(idx: &FerriteIndex, want: &BTreeMap<Vec<u8>, Vec<u8>>, var: bool) {
    for k in 0..KEYS {
        let kb = key(k, var);
        assert_eq!(idx.get(&kb).unwrap().as_ref(), want.get(&kb), "key {k}");
    }
    let mut got = BTreeMap::new();
    idx.scan(&[], usize::MAX, &mut |k, v| {
        got.insert(k.to_vec(), v.to_vec());
    })
    .unwrap();
    assert_eq!(&got, want);
    assert_eq!(idx.count(), want.len());
    idx.check_structure().unwrap();
}

fn run(var: bool) {
    let pool = Pool::create_volatile(64 << 20, &PoolOptions::default()).unwrap();
    let want = {
        let idx = FerriteIndex::open_or_create(&pool, "stress").unwrap();
        let want = stress(&idx, var);
        check(&idx, &want, var);
        want
    };
    let idx = FerriteIndex::open_or_create(&pool, "stress").unwrap();
    check(&idx, &want, var);
    idx.exhaust_and_account().unwrap();
}

#[test]
fn stress_fixed_keys() {
    run(false);
}

#[test]
fn stress_variable_keys() {
    run(true);
}

#[test]
fn stress_volatile_mode() {
    let idx = FerriteIndex::volatile(64 << 20).unwrap();
    let want = stress(&idx, false);
    check(&idx, &want, false);
}

/// A reader never sees part of a write batch: one writer sets keys spread over
/// many leaves to the same version in each batch while another splits and
/// empties leaves around them; every concurrent scan must see one version.
fn whole_batches(idx: &FerriteIndex) {
    const FILL: u64 = 4000;
    const BATCHES: u64 = 1500;
    let batch_keys: Vec<u64> = (0..FILL).step_by(500).collect();
    for k in (0..FILL).step_by(2) {
        idx.insert(&k.to_be_bytes(), &0u64.to_le_bytes()).unwrap();
    }
    let done = AtomicBool::new(false);
    let scanned = std::sync::atomic::AtomicU64::new(0);
    let mut ver = 0;
    let (scans, torn) = std::thread::scope(|s| {
        s.spawn(|| {
            let mut rng = SplitMix(5);
            while !done.load(Ordering::Relaxed) {
                let k = rng.below(FILL / 2) * 2 + 1;
                if rng.below(2) == 0 {
                    idx.upsert(&k.to_be_bytes(), &[1]).unwrap();
                } else {
                    idx.remove(&k.to_be_bytes()).unwrap();
                }
            }
        });
        let reader = s.spawn(|| {
            let (mut scans, mut torn) = (0u64, 0u64);
            while !done.load(Ordering::Relaxed) {
                let mut seen = Vec::new();
                idx.scan(&[], usize::MAX, &mut |k, v| {
                    let k = u64::from_be_bytes(k.try_into().unwrap());
                    if k % 500 == 0 {
                        seen.push(u64::from_le_bytes(v.try_into().unwrap()));
                    }
                })
                .unwrap();
                assert_eq!(seen.len(), batch_keys.len());
                torn += u64::from(seen.iter().any(|&v| v != seen[0]));
                scans += 1;
                scanned.store(scans, Ordering::Relaxed);
            }
            (scans, torn)
        });
        // Until the reader has scanned enough times (awaited, not timed).
        while ver < BATCHES || scanned.load(Ordering::Relaxed) < 200 {
            ver += 1;
            let mut b = WriteBatch::new();
            for k in &batch_keys {
                b.put(&k.to_be_bytes(), &ver.to_le_bytes());
            }
            idx.write_batch(&b).unwrap();
        }
        done.store(true, Ordering::Relaxed);
        reader.join().unwrap()
    });
    assert!(scans > 0);
    assert_eq!(torn, 0, "{torn} of {scans} scans saw part of a batch");
    for k in &batch_keys {
        assert_eq!(
            idx.get(&k.to_be_bytes()).unwrap().unwrap(),
            ver.to_le_bytes()
        );
    }
    idx.check_structure().unwrap();
}

#[test]
fn readers_see_whole_batches() {
    let pool = Pool::create_volatile(64 << 20, &PoolOptions::default()).unwrap();
    whole_batches(&FerriteIndex::open_or_create(&pool, "batches").unwrap());
    whole_batches(&FerriteIndex::volatile(64 << 20).unwrap());
}
