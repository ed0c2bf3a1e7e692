//! Entries placed outside their home lines. A lookup reads only the two home
//! lines of its key unless the leaf's (volatile) spill mask says otherwise, so
//! this test crowds one leaf with keys that share both home lines: six fit at
//! home, the rest spill to other lines. Every such key must still be found,
//! updated (also across value-length classes, which moves entries) and
//! removed, before and after a reopen (which recomputes the mask from the line
//! headers), and `check_structure` verifies the mask covers every spilled
//! entry. Without the spill bit written by inserts, lookups of the spilled keys
//! fail here.

use ferrite_index::{FerriteIndex, OrderedKv};
use ferrite_pm::{Pool, PoolOptions};

mod common;
use common::temp_pool;

/// The index's key fingerprint (`docs/FORMAT.md`, "Fingerprint"); its low six
/// bits pick the two home lines.
fn fingerprint(key: &[u8]) -> u8 {
    const M: u64 = 0x9E37_79B9_7F4A_7C15;
    let mut h = (key.len() as u64).wrapping_mul(M) ^ 0x5bd1_e995;
    for c in key.chunks(8) {
        let mut b = [0u8; 8];
        b[..c.len()].copy_from_slice(c);
        h = (h ^ u64::from_le_bytes(b)).wrapping_mul(M);
        h ^= h >> 29;
    }
    (h.wrapping_mul(M) >> 56) as u8
}

/// `n` small 8-byte keys (so all in the first leaf) with the same home lines.
fn crowded(n: usize) -> Vec<[u8; 8]> {
    let want = fingerprint(&0u64.to_be_bytes()) % 64;
    (0u64..)
        .map(|i| i.to_be_bytes())
        .filter(|k| fingerprint(k) % 64 == want)
        .take(n)
        .collect()
}

fn check_all(idx: &FerriteIndex, keys: &[[u8; 8]], val: impl Fn(usize) -> Option<Vec<u8>>) {
    for (i, k) in keys.iter().enumerate() {
        assert_eq!(idx.get(k).unwrap(), val(i), "key {i}");
    }
    idx.check_structure().unwrap();
}

#[test]
fn spilled_entries_are_found_updated_and_removed() {
    let tp = temp_pool("placement");
    // 14 keys sharing two home lines (6 slots) in one leaf of 24: 8 spill.
    let keys = crowded(14);
    assert!(keys.iter().all(|k| k < &(1u64 << 40).to_be_bytes()));
    {
        let pool = Pool::create(&tp.0, 16 << 20, &PoolOptions::default()).unwrap();
        let idx = FerriteIndex::open_or_create(&pool, "p").unwrap();
        for (i, k) in keys.iter().enumerate() {
            assert!(idx.insert(k, &(i as u64).to_le_bytes()).unwrap());
        }
        assert_eq!(idx.structure_stats().0, 0, "one leaf, no split");
        check_all(&idx, &keys, |i| Some((i as u64).to_le_bytes().to_vec()));
        // Absent keys with the same homes take the spill path too.
        let absent = crowded(20)[14..].to_vec();
        for k in &absent {
            assert_eq!(idx.get(k).unwrap(), None);
        }
        // Updates in place, and across length classes (the entry moves).
        for (i, k) in keys.iter().enumerate() {
            let v = if i % 2 == 0 {
                vec![i as u8; 3]
            } else {
                vec![i as u8; 40]
            };
            assert!(idx.update(k, &v).unwrap());
        }
        check_all(&idx, &keys, |i| {
            Some(if i % 2 == 0 {
                vec![i as u8; 3]
            } else {
                vec![i as u8; 40]
            })
        });
        // Remove the ones inserted first (they sit at home): the spilled ones
        // remain and must still be found.
        for k in &keys[..6] {
            assert!(idx.remove(k).unwrap());
        }
        check_all(&idx, &keys, |i| {
            (i >= 6).then(|| {
                if i % 2 == 0 {
                    vec![i as u8; 3]
                } else {
                    vec![i as u8; 40]
                }
            })
        });
    }
    // Reopen: the lock words (and spill masks) are rebuilt from the headers.
    let pool = Pool::open(&tp.0, &PoolOptions::default()).unwrap();
    let idx = FerriteIndex::open_or_create(&pool, "p").unwrap();
    check_all(&idx, &keys, |i| {
        (i >= 6).then(|| {
            if i % 2 == 0 {
                vec![i as u8; 3]
            } else {
                vec![i as u8; 40]
            }
        })
    });
    // Refill: new entries go home again where there is room.
    for (i, k) in keys[..6].iter().enumerate() {
        assert!(idx.insert(k, &[i as u8]).unwrap());
    }
    check_all(&idx, &keys, |i| {
        Some(if i < 6 {
            vec![i as u8]
        } else if i % 2 == 0 {
            vec![i as u8; 3]
        } else {
            vec![i as u8; 40]
        })
    });
    let mut n = 0;
    idx.scan(&[], usize::MAX, &mut |_, _| n += 1).unwrap();
    assert_eq!(n, 14);
}
