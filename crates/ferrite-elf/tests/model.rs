//! Every variant and caching policy against a brute-force scan, over random
//! tables (with duplicates, sparse and dense first columns) and random queries.

use ferrite_elf::build::build;
use ferrite_elf::store::{CreateOptions, ElfStore};
use ferrite_elf::{DynSpec, Elf, Policy, Query, Variant};
use ferrite_pm::{Pool, PoolOptions};
use proptest::prelude::*;

#[derive(Debug, Clone)]
struct Case {
    ncols: usize,
    rows: Vec<Vec<u32>>,
    queries: Vec<Vec<Option<(u32, u32)>>>,
}

fn case() -> impl Strategy<Value = Case> {
    (1usize..5, 0usize..70, prop::bool::ANY).prop_flat_map(|(ncols, nrows, sparse)| {
        let card: u32 = if sparse { 5_000 } else { 4 };
        let row = prop::collection::vec(0..card, ncols);
        let bound = prop::option::weighted(
            0.7,
            (0..card + 1, 0..card + 1).prop_map(|(a, b)| (a.min(b), a.max(b))),
        );
        let exact = prop::collection::vec(0..card, ncols)
            .prop_map(|v| v.into_iter().map(|x| Some((x, x))).collect::<Vec<_>>());
        let q = prop_oneof![prop::collection::vec(bound, ncols), exact];
        (
            Just(ncols),
            prop::collection::vec(row, nrows),
            prop::collection::vec(q, 1..8),
        )
            .prop_map(|(ncols, rows, queries)| Case {
                ncols,
                rows,
                queries,
            })
    })
}

fn columns(c: &Case) -> Vec<Vec<u32>> {
    (0..c.ncols)
        .map(|i| c.rows.iter().map(|r| r[i]).collect())
        .collect()
}

fn brute(c: &Case, q: &Query) -> Vec<u32> {
    c.rows
        .iter()
        .enumerate()
        .filter(|(_, r)| q.matches(r))
        .map(|(i, _)| i as u32)
        .collect()
}

fn variants(ncols: usize) -> Vec<Variant> {
    let mut v = vec![Variant::Dram, Variant::Pm, Variant::Hybrid];
    for x in 0..=ncols + 1 {
        v.push(Variant::Static(x));
    }
    for p in Policy::ALL {
        for (budget, parts) in [(300, 1), (4000, 3), (1 << 20, 2)] {
            let d = DynSpec {
                policy: p,
                budget_bytes: budget,
                partitions: parts,
            };
            v.push(Variant::Dynamic(d));
            v.push(Variant::StaticDynamic(1, d));
        }
    }
    v
}

fn check(elf: &Elf, c: &Case) -> Result<(), TestCaseError> {
    elf.verify()
        .map_err(|e| TestCaseError::fail(e.to_string()))?;
    for qb in &c.queries {
        let q = Query::partial(qb);
        let want = brute(c, &q);
        // Twice: the second run sees a warm dynamic cache.
        for _ in 0..2 {
            let mut got = elf.collect(&q).unwrap();
            got.sort_unstable();
            prop_assert_eq!(
                &got,
                &want,
                "variant {} query {:?}",
                elf.variant().name(),
                q
            );
        }
        let mut par = elf.collect_par(&q, 2).unwrap();
        par.sort_unstable();
        prop_assert_eq!(&par, &want, "parallel, variant {}", elf.variant().name());
        prop_assert_eq!(elf.count_auto(&q, 2).unwrap(), want.len() as u64);
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 128, ..ProptestConfig::default() })]

    #[test]
    fn every_variant_matches_brute_force(c in case()) {
        let cols = columns(&c);
        let slices: Vec<&[u32]> = cols.iter().map(Vec::as_slice).collect();
        if c.rows.is_empty() {
            // An Elf of no rows is still queryable.
        }
        let built = build(&slices).unwrap();
        let pool = Pool::create_volatile(8 << 20, &PoolOptions::default()).unwrap();
        let store = ElfStore::create(&pool, "t", &built, None, &CreateOptions::default(), Variant::Pm).unwrap();
        drop(store);
        for v in variants(c.ncols) {
            let s = ElfStore::open(&pool, "t", v, true).unwrap();
            let g = s.current();
            check(&g.elf, &c)?;
        }
        // The DRAM Elf straight from the build.
        check(&Elf::from_built(built), &c)?;
    }

    #[test]
    fn inserts_and_merges_match_brute_force(c in case(), extra in prop::collection::vec(prop::collection::vec(0u32..6, 4), 0..40), cap in 1u64..9) {
        let mut c = c;
        let cols = columns(&c);
        let slices: Vec<&[u32]> = cols.iter().map(Vec::as_slice).collect();
        let built = build(&slices).unwrap();
        let pool = Pool::create_volatile(16 << 20, &PoolOptions::default()).unwrap();
        let opts = CreateOptions { delta_capacity: cap, nonce: Some(1) };
        let store = ElfStore::create(&pool, "t", &built, None, &opts, Variant::Static(1)).unwrap();
        for (k, e) in extra.iter().enumerate() {
            let row: Vec<u32> = e[..c.ncols].to_vec();
            let tid = store.insert(&row).unwrap();
            prop_assert_eq!(tid as usize, c.rows.len());
            c.rows.push(row);
            if k % 7 == 3 {
                store.merge().unwrap();
            }
            if k % 5 == 0 {
                for qb in &c.queries {
                    let q = Query::partial(qb);
                    let mut got = store.collect(&q, 2).unwrap();
                    got.sort_unstable();
                    prop_assert_eq!(got, brute(&c, &q));
                }
            }
        }
        drop(store);
        // Reopen: delta and merged generations survive.
        let store = ElfStore::open(&pool, "t", Variant::Pm, true).unwrap();
        prop_assert_eq!(store.rows() as usize, c.rows.len());
        for qb in &c.queries {
            let q = Query::partial(qb);
            let mut got = Vec::new();
            store.query(&q, |t| got.push(t)).unwrap();
            got.sort_unstable();
            prop_assert_eq!(got, brute(&c, &q));
        }
    }
}

#[test]
fn duplicates_keep_every_tid() {
    let a = [1u32, 1, 1, 2, 1, 1];
    let b = [5u32, 5, 5, 6, 5, 5];
    let elf = Elf::from_built(build(&[&a, &b]).unwrap());
    let mut t = elf.collect(&Query::exact(&[1, 5])).unwrap();
    t.sort_unstable();
    assert_eq!(t, vec![0, 1, 2, 4, 5]);
    assert_eq!(elf.count(&Query::exact(&[2, 6])).unwrap(), 1);
    assert_eq!(elf.count(&Query::exact(&[2, 5])).unwrap(), 0);
}

#[test]
fn background_merge_keeps_queries_and_inserts_going() {
    let n = 2000u32;
    let a: Vec<u32> = (0..n).map(|i| i % 10).collect();
    let b: Vec<u32> = (0..n).map(|i| i % 7).collect();
    let pool = Pool::create_volatile(32 << 20, &PoolOptions::default()).unwrap();
    let built = build(&[&a, &b]).unwrap();
    let opts = CreateOptions {
        delta_capacity: 500,
        nonce: None,
    };
    let store = std::sync::Arc::new(
        ElfStore::create(&pool, "t", &built, None, &opts, Variant::Pm).unwrap(),
    );
    for i in 0..300 {
        store.insert(&[i % 10, i % 7]).unwrap();
    }
    let h = store.start_merge();
    for i in 300..450 {
        store.insert(&[i % 10, i % 7]).unwrap();
    }
    h.join().unwrap().unwrap();
    assert_eq!(store.rows(), 2450);
    let q = Query::exact(&[3, 3]);
    let want = (0..2000u32).filter(|i| i % 10 == 3 && i % 7 == 3).count()
        + (0..450u32).filter(|i| i % 10 == 3 && i % 7 == 3).count();
    assert_eq!(store.count(&q, 2).unwrap() as usize, want);
    let g = store.current();
    assert_eq!(g.generation, 2);
    // The merge took whatever the delta held when it started (>= 300 rows).
    assert!(g.base_rows() >= 2300, "{}", g.base_rows());
    assert_eq!(g.base_rows() + g.delta_rows(), 2450);
}

#[test]
fn rejects_bad_tables_and_queries() {
    assert!(build(&[]).is_err());
    assert!(build(&[&[1u32, 2], &[1u32]]).is_err());
    assert!(build(&[&[u32::MAX]]).is_err());
    let elf = Elf::from_built(build(&[&[1u32, 2]]).unwrap());
    assert!(elf.count(&Query::exact(&[1, 2])).is_err());
}

#[test]
fn missing_elf_is_a_clear_error() {
    let pool = Pool::create_volatile(4 << 20, &PoolOptions::default()).unwrap();
    let Err(e) = ElfStore::open(&pool, "nope", Variant::Pm, true) else {
        panic!("opened a missing Elf");
    };
    assert!(e.to_string().contains("no Elf"), "{e}");
}
