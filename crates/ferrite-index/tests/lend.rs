//! The reads the `ferrite` facade builds on: `get_with` (the value lent, not
//! copied) and `last_below` (the backward step of a reverse iteration),
//! against a `BTreeMap`, and `get_with` under a writer that keeps replacing
//! the value (every lent value is one that was written, whole).

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};

use ferrite_index::{FerriteIndex, OrderedKv, WriteBatch, MAX_KEY};

fn value(i: u64) -> Vec<u8> {
    // Inline (0..=8 bytes) and out-of-line lengths.
    let len = [0usize, 3, 8, 9, 64, 700][(i % 6) as usize];
    vec![(i % 251) as u8; len]
}

#[test]
fn get_with_lends_the_stored_value_and_last_below_steps_back() {
    let idx = FerriteIndex::volatile(64 << 20).unwrap();
    let mut model = BTreeMap::new();
    for i in 0..3000u64 {
        let k = (i * 7919 % 5003).to_be_bytes().to_vec();
        let v = value(i);
        idx.upsert(&k, &v).unwrap();
        model.insert(k, v);
    }
    for i in (0..3000u64).step_by(3) {
        let k = (i * 7919 % 5003).to_be_bytes().to_vec();
        idx.remove(&k).unwrap();
        model.remove(&k);
    }
    for probe in 0..5003u64 {
        let k = probe.to_be_bytes();
        let got = idx.get_with(&k, |v| v.to_vec()).unwrap();
        assert_eq!(got.as_ref(), model.get(&k[..]), "key {probe}");
    }
    // Walk the whole map backwards, from the end and from a bound.
    let mut back = Vec::new();
    let mut bound: Option<Vec<u8>> = None;
    while let Some((k, v)) = idx.last_below(bound.as_deref()).unwrap() {
        back.push((k.clone(), v));
        bound = Some(k);
    }
    let want: Vec<_> = model
        .iter()
        .rev()
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    assert_eq!(back, want);
    let b = 2500u64.to_be_bytes();
    let got = idx.last_below(Some(&b)).unwrap().map(|e| e.0);
    let want = model.range(..b.to_vec()).next_back().map(|e| e.0.clone());
    assert_eq!(got, want);
    // Below the smallest key there is nothing; oversized bounds are refused.
    assert_eq!(idx.last_below(Some(&[])).unwrap(), None);
    assert!(idx.last_below(Some(&vec![0; MAX_KEY + 1])).is_err());
    assert!(idx.get_with(&vec![0; MAX_KEY + 1], |_| ()).is_err());
}

#[test]
fn get_with_lends_whole_values_while_batches_replace_them() {
    let idx = FerriteIndex::volatile(256 << 20).unwrap();
    let (a, b) = (b"account-a".as_slice(), b"account-b".as_slice());
    idx.upsert(a, &value(4)).unwrap();
    idx.upsert(b, &value(4)).unwrap();
    let stop = AtomicBool::new(false);
    std::thread::scope(|s| {
        s.spawn(|| {
            for i in 0..20_000u64 {
                // Both keys get the same value in one batch.
                let v = value(i);
                let mut wb = WriteBatch::new();
                wb.put(a, &v).put(b, &v);
                idx.write_batch(&wb).unwrap();
            }
            stop.store(true, Ordering::Release);
        });
        let mut reads = 0u64;
        while !stop.load(Ordering::Acquire) || reads < 1000 {
            idx.get_with(a, |v| {
                // Whole: one length class, one fill byte.
                let ok = [0usize, 3, 8, 9, 64, 700].contains(&v.len())
                    && v.iter().all(|&x| Some(&x) == v.first());
                assert!(ok, "torn value of {} bytes", v.len());
            })
            .unwrap()
            .expect("the key is never removed");
            reads += 1;
        }
    });
    assert_eq!(idx.get(a).unwrap(), idx.get(b).unwrap());
}
