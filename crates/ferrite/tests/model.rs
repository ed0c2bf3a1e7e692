//! Model-based test of the facade against a `BTreeMap`: random sequences of
//! every map operation (insert, update, upsert, remove, get, get_into,
//! get_with, contains, len, compare-and-swap, update_with, batches), range
//! iterators with random bounds consumed from both ends in random
//! interleavings, count_range, and transactions (reads, writes, their own
//! range view, commit or rollback), on a pool file that is reopened at the
//! end and on a volatile map.

use std::collections::BTreeMap;
use std::ops::Bound;

use ferrite::{Batch, Db, Map};
use ferrite_pm::rng::SplitMix;

type Model = BTreeMap<Vec<u8>, Vec<u8>>;

fn key(rng: &mut SplitMix) -> Vec<u8> {
    let k = rng.below(400);
    match k % 5 {
        0 if k == 0 => Vec::new(),
        0 => vec![(k >> 8) as u8, k as u8],
        1 => (k * 7919).to_be_bytes().to_vec(),
        2 => format!("user:{k:04}").into_bytes(),
        3 => format!("a-long-key-{k:06}-{}", "z".repeat((k % 30) as usize)).into_bytes(),
        _ => vec![0xff; 1 + (k % 9) as usize],
    }
}

fn value(rng: &mut SplitMix) -> Vec<u8> {
    let len = [0usize, 1, 8, 9, 40, 300, 2000][rng.below(7) as usize];
    let b = rng.below(256) as u8;
    (0..len).map(|i| b.wrapping_add(i as u8)).collect()
}

fn bound(rng: &mut SplitMix) -> Bound<Vec<u8>> {
    match rng.below(3) {
        0 => Bound::Unbounded,
        1 => Bound::Included(key(rng)),
        _ => Bound::Excluded(key(rng)),
    }
}

/// Whether `BTreeMap::range` accepts the bounds (it panics on inverted ones);
/// the facade returns nothing for those.
fn valid(lo: &Bound<Vec<u8>>, hi: &Bound<Vec<u8>>) -> bool {
    match (lo, hi) {
        (Bound::Included(l), Bound::Included(h)) => l <= h,
        (Bound::Included(l) | Bound::Excluded(l), Bound::Excluded(h))
        | (Bound::Excluded(l), Bound::Included(h)) => l < h,
        _ => true,
    }
}

/// Consumes a facade iterator and the model's in the same random pattern of
/// `next` / `next_back`, comparing every step.
fn compare_iter<I, J>(rng: &mut SplitMix, mut got: I, mut want: J, what: &str)
where
    I: DoubleEndedIterator<Item = ferrite::Result<(Vec<u8>, Vec<u8>)>>,
    J: DoubleEndedIterator<Item = (Vec<u8>, Vec<u8>)>,
{
    let pattern = rng.below(4);
    let limit = rng.below(80) as usize + 1;
    for step in 0..limit + 400 {
        let back = match pattern {
            0 => false,
            1 => true,
            2 => step % 2 == 1,
            _ => rng.below(2) == 0,
        };
        let (g, w) = if back {
            (got.next_back(), want.next_back())
        } else {
            (got.next(), want.next())
        };
        let g = g.map(|r| r.expect("iterator error"));
        assert_eq!(g, w, "{what}: step {step} back={back} pattern {pattern}");
        if w.is_none() {
            // Both ends are exhausted and stay so.
            assert!(
                got.next().is_none() && got.next_back().is_none(),
                "{what}: not fused"
            );
            return;
        }
        if step >= limit && pattern != 3 {
            return;
        }
    }
}

fn check_all(m: &Map, model: &Model) {
    let got: Vec<_> = m.iter().collect::<Result<_, _>>().unwrap();
    let want: Vec<_> = model.iter().map(|(k, v)| (k.clone(), v.clone())).collect();
    assert_eq!(got.len(), want.len());
    assert!(got == want, "contents differ");
    assert_eq!(m.len(), model.len());
}

fn run(m: &Map, seed: u64, steps: usize) -> Model {
    let mut rng = SplitMix(seed);
    let mut model = Model::new();
    for step in 0..steps {
        let k = key(&mut rng);
        let v = value(&mut rng);
        let present = model.get(&k).cloned();
        match rng.below(100) {
            0..=14 => {
                assert_eq!(m.insert(&k, &v).unwrap(), present.is_none());
                model.entry(k).or_insert(v);
            }
            15..=21 => {
                assert_eq!(m.update(&k, &v).unwrap(), present.is_some());
                if present.is_some() {
                    model.insert(k, v);
                }
            }
            22..=31 => {
                assert_eq!(m.upsert(&k, &v).unwrap(), present.is_none());
                model.insert(k, v);
            }
            32..=41 => {
                assert_eq!(m.remove(&k).unwrap(), present.is_some());
                model.remove(&k);
            }
            42..=49 => {
                assert_eq!(m.get(&k).unwrap(), present);
                let mut buf = vec![1, 2, 3];
                assert_eq!(m.get_into(&k, &mut buf).unwrap(), present.is_some());
                if let Some(p) = &present {
                    assert_eq!(&buf, p);
                }
                assert_eq!(m.get_with(&k, |b| b.to_vec()).unwrap(), present);
                assert_eq!(m.contains(&k).unwrap(), present.is_some());
            }
            50..=55 => {
                // Right or wrong expectation, then a removal or a new value.
                let expected = if rng.below(2) == 0 {
                    present.clone()
                } else {
                    Some(value(&mut rng))
                };
                let new = (rng.below(4) != 0).then(|| v.clone());
                let r = m
                    .compare_and_swap(&k, expected.clone(), new.clone())
                    .unwrap();
                if expected == present {
                    assert!(r.is_ok());
                    match new {
                        Some(n) => model.insert(k, n),
                        None => model.remove(&k),
                    };
                } else {
                    assert_eq!(r.unwrap_err().current, present);
                }
            }
            56..=60 => {
                let got = m
                    .update_with(&k, |old| {
                        assert_eq!(old.map(<[u8]>::to_vec), present);
                        match old {
                            Some(o) if o.len() % 3 == 0 => None,
                            Some(o) => Some([o, b"+"].concat()),
                            None => Some(b"fresh".to_vec()),
                        }
                    })
                    .unwrap();
                match &got {
                    Some(n) => model.insert(k, n.clone()),
                    None => model.remove(&k),
                };
            }
            61..=66 => {
                let mut b = Batch::new();
                for _ in 0..rng.below(8) {
                    let bk = key(&mut rng);
                    if rng.below(3) == 0 {
                        b.remove(&bk);
                        model.remove(&bk);
                    } else {
                        let bv = value(&mut rng);
                        b.put(&bk, &bv);
                        model.insert(bk, bv);
                    }
                }
                m.apply(&b).unwrap();
            }
            67..=80 => {
                let (lo, hi) = (bound(&mut rng), bound(&mut rng));
                let what = format!("step {step}: range {lo:?}..{hi:?}");
                if valid(&lo, &hi) {
                    let want = model
                        .range((lo.clone(), hi.clone()))
                        .map(|(k, v)| (k.clone(), v.clone()));
                    compare_iter(&mut rng, m.range((lo.clone(), hi.clone())), want, &what);
                    let n = model.range((lo.clone(), hi.clone())).count();
                    assert_eq!(m.count_range((lo, hi)).unwrap(), n, "{what}");
                } else {
                    assert_eq!(m.range((lo.clone(), hi.clone())).count(), 0, "{what}");
                    assert_eq!(m.count_range((lo, hi)).unwrap(), 0, "{what}");
                }
            }
            81..=95 => model = transaction(m, &mut rng, model, step),
            _ => {
                assert_eq!(m.len(), model.len());
                assert_eq!(m.is_empty(), model.is_empty());
            }
        }
    }
    check_all(m, &model);
    model
}

/// A transaction of random reads and writes, checked against a copy of the
/// model (its own view), committed or rolled back.
fn transaction(m: &Map, rng: &mut SplitMix, model: Model, step: usize) -> Model {
    let mut view = model.clone();
    let mut tx = m.transaction().unwrap();
    for _ in 0..rng.below(12) {
        let k = key(rng);
        let v = value(rng);
        let present = view.get(&k).cloned();
        match rng.below(7) {
            0 => {
                assert_eq!(tx.insert(&k, &v).unwrap(), present.is_none());
                view.entry(k).or_insert(v);
            }
            1 => {
                assert_eq!(tx.update(&k, &v).unwrap(), present.is_some());
                if present.is_some() {
                    view.insert(k, v);
                }
            }
            2 => {
                assert_eq!(tx.upsert(&k, &v).unwrap(), present.is_none());
                view.insert(k, v);
            }
            3 => {
                assert_eq!(tx.remove(&k).unwrap(), present.is_some());
                view.remove(&k);
            }
            4 => {
                assert_eq!(tx.get(&k).unwrap(), present);
                assert_eq!(tx.contains(&k).unwrap(), present.is_some());
            }
            _ => {
                let (lo, hi) = (bound(rng), bound(rng));
                let what = format!("step {step}: tx range {lo:?}..{hi:?}");
                if valid(&lo, &hi) {
                    let want = view
                        .range((lo.clone(), hi.clone()))
                        .map(|(k, v)| (k.clone(), v.clone()));
                    compare_iter(rng, tx.range((lo, hi)), want, &what);
                } else {
                    assert_eq!(tx.range((lo, hi)).count(), 0, "{what}");
                }
            }
        }
        // Outside the transaction nothing changed yet.
        if rng.below(4) == 0 {
            let probe = key(rng);
            assert_eq!(m.get(&probe).unwrap(), model.get(&probe).cloned());
        }
    }
    if rng.below(4) == 0 {
        tx.rollback();
        model
    } else {
        tx.commit().unwrap();
        view
    }
}

#[test]
fn the_facade_behaves_like_a_btreemap_and_survives_a_reopen() {
    let path = format!("/dev/shm/ferrite-facade-model-{}.pool", std::process::id());
    let _ = std::fs::remove_file(&path);
    let mut models = Vec::new();
    {
        let db = Db::create(&path, 512 << 20).unwrap();
        for seed in 0..3u64 {
            let m = db.map(&format!("model-{seed}")).unwrap();
            models.push(run(&m, 17 + seed, 4000));
        }
        db.close().unwrap();
    }
    let db = Db::open(&path).unwrap();
    for (seed, model) in models.iter().enumerate() {
        check_all(&db.map(&format!("model-{seed}")).unwrap(), model);
    }
    drop(db);
    std::fs::remove_file(&path).unwrap();
}

#[test]
fn a_volatile_map_behaves_like_a_btreemap() {
    let db = Db::volatile(64 << 20).unwrap();
    let m = db.volatile_map().unwrap();
    run(&m, 99, 4000);
}

#[test]
fn iterators_on_a_large_map_cross_many_chunks_and_leaves() {
    let db = Db::volatile(256 << 20).unwrap();
    let m = db.map("big").unwrap();
    let mut model = Model::new();
    for i in 0..20_000u64 {
        let k = (i * 2654435761 % 100_003).to_be_bytes().to_vec();
        let v = i.to_le_bytes().to_vec();
        m.upsert(&k, &v).unwrap();
        model.insert(k, v);
    }
    let mut rng = SplitMix(5);
    for round in 0..40 {
        let lo = Bound::Included((rng.below(100_003)).to_be_bytes().to_vec());
        let hi = Bound::Excluded((rng.below(100_003) + 50_000).to_be_bytes().to_vec());
        if !valid(&lo, &hi) {
            continue;
        }
        let want = model
            .range((lo.clone(), hi.clone()))
            .map(|(k, v)| (k.clone(), v.clone()));
        compare_iter(&mut rng, m.range((lo, hi)), want, &format!("round {round}"));
    }
    // Meeting in the middle: alternate ends over the whole map.
    let mut it = m.iter();
    let mut want = model.iter();
    let mut n = 0;
    loop {
        let (g, w) = if n % 3 == 0 {
            (it.next_back(), want.next_back())
        } else {
            (it.next(), want.next())
        };
        let w = w.map(|(k, v)| (k.clone(), v.clone()));
        assert_eq!(g.map(Result::unwrap), w);
        if w.is_none() {
            break;
        }
        n += 1;
    }
    assert_eq!(n, model.len());
}
