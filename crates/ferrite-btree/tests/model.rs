//! Model-based tests: random operations through `OrderedKv` (and
//! transactions) against a `BTreeMap`, with working sets that force evictions
//! in DRAM and PM, in every design and with each technique switched off;
//! restarts from a process-crash image in between.

use std::collections::BTreeMap;
use std::sync::Arc;

use ferrite_btree::{BufferConfig, Database, Design, Techniques};
use ferrite_buffer::{MemBackend, SsdBackend};
use ferrite_kv::OrderedKv;
use ferrite_pm::rng::SplitMix;
use ferrite_pm::{Pool, PoolOptions};

fn small(design: Design) -> BufferConfig {
    let ps = 2048u64;
    let mut c = design.config_paged(2048, 12 * ps, 12 * (ps + 64), 4096 * ps);
    match design {
        Design::PmDirect => c.pm_frames = 1024,
        Design::MainMemory => c.dram_bytes = 2048 * ps,
        _ => {}
    }
    c.admission_set_size = 64;
    c.wal_segment_bytes = 256 << 10;
    c.pm_eviction_batch = 2;
    c
}

fn key(k: u64) -> Vec<u8> {
    match k % 4 {
        0 => k.to_be_bytes().to_vec(),
        1 => format!("k{k:06}").into_bytes(),
        2 => format!("a-longer-key-{k:08}-with-some-tail").into_bytes(),
        _ => vec![(k >> 8) as u8, k as u8],
    }
}

fn value(rng: &mut SplitMix, v: u64) -> Vec<u8> {
    let len = [0usize, 1, 8, 30, 100, 300][rng.below(6) as usize];
    (0..len).map(|i| (v as usize * 13 + i) as u8).collect()
}

struct Store {
    pool: Pool,
    ssd: Arc<MemBackend>,
    cfg: BufferConfig,
}

impl Store {
    fn new(cfg: BufferConfig) -> Store {
        let pool =
            Pool::create_volatile(cfg.pool_bytes() + (16 << 20), &PoolOptions::default()).unwrap();
        Store {
            pool,
            ssd: Arc::new(MemBackend::new()),
            cfg,
        }
    }
    fn open(&self) -> Database {
        let ssd: Option<Arc<dyn SsdBackend>> =
            (self.cfg.ssd_pages > 0).then(|| self.ssd.clone() as Arc<dyn SsdBackend>);
        Database::open(&self.pool, "m", ssd, self.cfg.clone()).unwrap()
    }
    /// A process crash: the pool image as the CPU saw it.
    fn crash(&mut self, db: Database) {
        let img = self.pool.snapshot();
        drop(db);
        self.pool = Pool::open_image(img, &PoolOptions::default()).unwrap();
    }
}

fn compare(t: &ferrite_btree::BTree, m: &BTreeMap<Vec<u8>, Vec<u8>>) {
    let mut got = BTreeMap::new();
    t.scan(&[], usize::MAX, &mut |k, v| {
        got.insert(k.to_vec(), v.to_vec());
    })
    .unwrap();
    if &got != m {
        let missing: Vec<_> = m.keys().filter(|k| !got.contains_key(*k)).take(3).collect();
        let extra: Vec<_> = got.keys().filter(|k| !m.contains_key(*k)).take(3).collect();
        panic!(
            "scan differs: {} vs {} keys; missing {missing:?}, extra {extra:?}",
            got.len(),
            m.len()
        );
    }
    assert_eq!(t.count(), m.len());
    for (k, v) in m.iter().step_by(7) {
        assert_eq!(t.get(k).unwrap().as_ref(), Some(v));
    }
    // Cursor both ways.
    let mut c = t.cursor().unwrap();
    let fwd: Vec<Vec<u8>> = std::iter::successors(c.first().unwrap(), |_| c.next().unwrap())
        .map(|e| e.0)
        .collect();
    assert_eq!(fwd, m.keys().cloned().collect::<Vec<_>>());
    let mut c = t.cursor().unwrap();
    let back: Vec<Vec<u8>> = std::iter::successors(c.last().unwrap(), |_| c.prev().unwrap())
        .map(|e| e.0)
        .collect();
    assert_eq!(back, m.keys().rev().cloned().collect::<Vec<_>>());
}

fn run(cfg: BufferConfig, ops: u64, seed: u64) {
    let label = cfg.describe();
    let mut st = Store::new(cfg);
    let mut db = st.open();
    let mut t = db.tree("t").unwrap();
    let mut m = BTreeMap::new();
    let mut rng = SplitMix(seed);
    let nkeys = 1500;
    for i in 0..ops {
        let k = key(rng.below(nkeys));
        let v = value(&mut rng, i);
        match rng.below(20) {
            0..=5 => {
                let new = !m.contains_key(&k);
                assert_eq!(t.insert(&k, &v).unwrap(), new, "{label}");
                if new {
                    m.insert(k.clone(), v.clone());
                }
            }
            6..=8 if rng.below(2) == 0 => {
                // A patch of part of the value, in place.
                let vlen = m.get(&k).map_or(0, |v| v.len());
                let off = rng.below(vlen as u64 + 1) as usize;
                let len = rng.below((vlen - off) as u64 + 1) as usize;
                let bytes: Vec<u8> = (0..len).map(|x| (i as usize * 7 + x) as u8).collect();
                assert_eq!(t.update_part(&k, off, &bytes).unwrap(), m.contains_key(&k));
                if let Some(mv) = m.get_mut(&k) {
                    mv[off..off + len].copy_from_slice(&bytes);
                    // Past the end: refused, nothing changes.
                    let e = t.update_part(&k, vlen, b"x").unwrap_err();
                    assert!(e.to_string().contains("past the value"), "{e}");
                }
            }
            6..=8 => {
                let present = m.contains_key(&k);
                assert_eq!(t.update(&k, &v).unwrap(), present);
                if present {
                    m.insert(k.clone(), v.clone());
                }
            }
            9..=12 => assert_eq!(
                t.upsert(&k, &v).unwrap(),
                m.insert(k.clone(), v.clone()).is_none()
            ),
            13..=16 => assert_eq!(t.remove(&k).unwrap(), m.remove(&k).is_some()),
            17 => {
                // A transaction, committed or aborted.
                let tx = db.begin();
                let mut m2 = m.clone();
                for j in 0..1 + rng.below(6) {
                    let k2 = key(rng.below(nkeys));
                    if rng.below(3) == 0 {
                        tx.remove(&t, &k2).unwrap();
                        m2.remove(&k2);
                    } else if rng.below(3) == 0 {
                        let vlen = m2.get(&k2).map_or(0, |v| v.len());
                        let off = rng.below(vlen as u64 + 1) as usize;
                        let len = (vlen - off).min(1 + rng.below(40) as usize);
                        let bytes = vec![(i + j) as u8 ^ 0x5a; len];
                        assert_eq!(
                            tx.update_part(&t, &k2, off, &bytes).unwrap(),
                            m2.contains_key(&k2)
                        );
                        if let Some(mv) = m2.get_mut(&k2) {
                            mv[off..off + len].copy_from_slice(&bytes);
                        }
                    } else {
                        let v2 = value(&mut rng, i * 10 + j);
                        tx.upsert(&t, &k2, &v2).unwrap();
                        m2.insert(k2, v2);
                    }
                }
                if rng.below(2) == 0 {
                    tx.commit().unwrap();
                    m = m2;
                } else {
                    tx.abort().unwrap();
                }
                continue;
            }
            18 => {
                assert_eq!(t.get(&k).unwrap(), m.get(&k).cloned());
                let (off, len) = (rng.below(320) as usize, rng.below(120) as usize);
                let mut part = vec![1, 2, 3];
                let found = t.get_part(&k, off, len, &mut part).unwrap();
                assert_eq!(found, m.contains_key(&k));
                if let Some(mv) = m.get(&k) {
                    let (a, b) = (off.min(mv.len()), (off + len).min(mv.len()));
                    assert_eq!(part, mv[a..b], "{label}: part {off}+{len} of {k:?}");
                }
                continue;
            }
            _ => {
                let mut n = 0;
                let want: Vec<_> = m
                    .range(k.clone()..)
                    .take(10)
                    .map(|(k, v)| (k.clone(), v.clone()))
                    .collect();
                let mut got = Vec::new();
                t.scan(&k, 10, &mut |a, b| {
                    got.push((a.to_vec(), b.to_vec()));
                    n += 1;
                })
                .unwrap();
                assert_eq!(got, want);
                continue;
            }
        }
        assert_eq!(
            t.get(&k).unwrap(),
            m.get(&k).cloned(),
            "{label}: key {k:?} after op {i}"
        );
        if i % 2000 == 1999 {
            compare(&t, &m);
            db.check().unwrap_or_else(|e| panic!("{label}: {e}"));
            if i % 4000 == 1999 && i + 2000 < ops {
                st.crash(db);
                db = st.open();
                t = db.tree("t").unwrap();
                compare(&t, &m);
            }
        }
    }
    compare(&t, &m);
    db.check().unwrap();
    let s = db.buffer().stats();
    eprintln!("{label}: {s:?}");
    let c = db.buffer().config().clone();
    // The working set forces evictions in both caches.
    if c.evict_dram && c.dram_bytes > 0 {
        assert!(s.dram_evictions > 100, "{label}: {s:?}");
    }
    if c.pm_frames > 0 && c.ssd_pages > 0 {
        assert!(
            s.pm_evictions > 10 && s.pm_admissions > 10,
            "{label}: {s:?}"
        );
    }
    if c.techniques.cache_line_grained {
        assert!(s.dram_line_loads > 100, "{label}: {s:?}");
    }
    if c.techniques.mini_pages {
        assert!(s.mini_promotions > 0, "{label}: {s:?}");
    }
    if c.techniques.swizzling && c.dram_bytes > 0 {
        assert!(s.swizzles > 0, "{label}: {s:?}");
    }
}

#[test]
fn main_memory_matches_a_btreemap() {
    run(small(Design::MainMemory), 8000, 11);
}

#[test]
fn pm_direct_matches_a_btreemap() {
    run(small(Design::PmDirect), 8000, 12);
}

#[test]
fn basic_pm_matches_a_btreemap() {
    run(small(Design::BasicPm), 8000, 13);
}

#[test]
fn ssd_bm_matches_a_btreemap() {
    run(small(Design::SsdBm), 8000, 14);
}

#[test]
fn three_tier_matches_a_btreemap() {
    run(small(Design::ThreeTier), 8000, 15);
}

#[test]
fn each_technique_off_matches_a_btreemap() {
    let all = Techniques::ALL;
    let variants = [
        Techniques {
            mini_pages: false,
            ..all
        },
        Techniques {
            cache_line_grained: false,
            mini_pages: false,
            ..all
        },
        Techniques {
            swizzling: false,
            ..all
        },
        Techniques {
            combined_table: false,
            ..all
        },
        Techniques {
            admission_set: false,
            ..all
        },
    ];
    for (i, t) in variants.into_iter().enumerate() {
        let mut c = small(Design::ThreeTier);
        c.techniques = t;
        run(c, 6000, 100 + i as u64);
    }
}

/// A clean close is a checkpoint: the next open redoes and undoes nothing
/// and finds every record.
#[test]
fn a_clean_close_needs_no_redo() {
    for d in Design::ALL {
        let mut st = Store::new(small(d));
        let db = st.open();
        let t = db.tree("t").unwrap();
        let mut m = BTreeMap::new();
        for i in 0..3000u64 {
            let (k, v) = (key(i), i.to_le_bytes().to_vec());
            t.upsert(&k, &v).unwrap();
            m.insert(k, v);
        }
        db.close().unwrap();
        drop(t);
        st.crash(db);
        let db = st.open();
        let r = db.restart_report().clone();
        assert_eq!(
            (r.records_redone, r.lines_redone, r.losers, r.log_records),
            (0, 0, 0, 1),
            "{}: {r:?}",
            d.name()
        );
        compare(&db.tree("t").unwrap(), &m);
    }
}

#[test]
fn the_pm_read_model_charges_lines_that_miss_its_cache_only() {
    for d in [Design::PmDirect, Design::ThreeTier] {
        let mut cfg = small(d);
        cfg.pm_read_ns = 200;
        let st = Store::new(cfg);
        let db = st.open();
        let t = db.tree("t").unwrap();
        for k in 0..400u64 {
            t.upsert(&key(k), &[k as u8; 100]).unwrap();
        }
        // Writes put their lines in the modelled cache; a reopen starts cold.
        db.close().unwrap();
        drop((t, db));
        let db = st.open();
        let t = db.tree("t").unwrap();
        let s0 = db.buffer().stats();
        let mut v = Vec::new();
        for k in 0..400u64 {
            assert!(t.get_part(&key(k), 10, 20, &mut v).unwrap());
            assert_eq!(v, [k as u8; 20]);
        }
        let s1 = db.buffer().stats();
        let lines = s1.pm_model_lines - s0.pm_model_lines;
        let waited = s1.pm_model_wait_ns - s0.pm_model_wait_ns;
        assert!(lines > 0, "{}: {s1:?}", d.name());
        // Each charged read waits the full latency for its first line and an
        // eighth for each further one.
        assert!(
            waited >= lines * 25 && waited <= lines * 200,
            "{lines} {waited}"
        );
        if d == Design::PmDirect {
            // The same reads again hit the modelled cache (16 MiB >> this
            // tree): nothing more is charged.
            for k in 0..400u64 {
                t.get_part(&key(k), 10, 20, &mut v).unwrap();
            }
            assert_eq!(db.buffer().stats().pm_model_lines, s1.pm_model_lines);
        }
    }
    // Off by default: nothing is charged.
    let st = Store::new(small(Design::PmDirect));
    let db = st.open();
    let t = db.tree("t").unwrap();
    t.upsert(b"k", b"v").unwrap();
    t.get(b"k").unwrap();
    assert_eq!(db.buffer().stats().pm_model_lines, 0);
}
