//! Multi-threaded stress: writer threads own interleaved key sets (keys of all
//! threads share leaves, so splits, evictions and swizzling race), each with a
//! private model; some writes go through transactions (committed or aborted);
//! reader threads check every value they see encodes its own key. At the end
//! every key is checked against its owner's model, and the tree's structure
//! and page accounting are checked. Then a process-crash restart and the same
//! per-key check.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use ferrite_btree::{BufferConfig, Database, Design};
use ferrite_buffer::{MemBackend, SsdBackend};
use ferrite_kv::OrderedKv;
use ferrite_pm::rng::SplitMix;
use ferrite_pm::{Pool, PoolOptions};

const WRITERS: u64 = 4;
const KEYS_PER_WRITER: u64 = 1500;

fn key(k: u64) -> Vec<u8> {
    format!("key{:07}", k.wrapping_mul(2654435761) % 10_000_000).into_bytes()
}

fn value(k: u64, v: u64, len: usize) -> Vec<u8> {
    let mut out = format!("{k}:{v}:").into_bytes();
    out.resize(len.max(out.len()), b'.');
    out
}

/// The key id a value belongs to (readers check it matches).
fn owner_of(v: &[u8]) -> Option<u64> {
    std::str::from_utf8(v).ok()?.split(':').next()?.parse().ok()
}

fn run(cfg: BufferConfig, ops: u64) {
    let label = cfg.describe();
    let pool =
        Pool::create_volatile(cfg.pool_bytes() + (32 << 20), &PoolOptions::default()).unwrap();
    let mem = Arc::new(MemBackend::new());
    let ssd = |c: &BufferConfig| (c.ssd_pages > 0).then(|| mem.clone() as Arc<dyn SsdBackend>);
    let db = Database::open(&pool, "s", ssd(&cfg), cfg.clone()).unwrap();
    let t = db.tree("t").unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let models: Vec<BTreeMap<u64, Vec<u8>>> = std::thread::scope(|s| {
        let readers: Vec<_> = (0..2)
            .map(|r| {
                let (t, stop) = (t.clone(), stop.clone());
                s.spawn(move || {
                    let mut rng = SplitMix(900 + r);
                    let mut seen = 0u64;
                    while !stop.load(Ordering::Relaxed) {
                        let k = rng.below(WRITERS * KEYS_PER_WRITER);
                        if let Some(v) = t.get(&key(k)).unwrap() {
                            assert_eq!(owner_of(&v), Some(k), "value {v:?} under key {k}");
                            seen += 1;
                        }
                        let mut last: Option<Vec<u8>> = None;
                        t.scan(&key(k), 20, &mut |kk, v| {
                            assert!(last.as_deref().is_none_or(|l| l < kk), "scan out of order");
                            let o = owner_of(v).expect("well-formed value");
                            assert_eq!(key(o), kk, "scan: value of another key");
                            last = Some(kk.to_vec());
                        })
                        .unwrap();
                    }
                    seen
                })
            })
            .collect();
        let writers: Vec<_> = (0..WRITERS)
            .map(|w| {
                let (t, db) = (t.clone(), db.clone());
                s.spawn(move || {
                    let mut rng = SplitMix(w + 1);
                    let mut m: BTreeMap<u64, Vec<u8>> = BTreeMap::new();
                    for i in 0..ops {
                        let id = rng.below(KEYS_PER_WRITER) * WRITERS + w;
                        let k = key(id);
                        let v = value(id, i, [8usize, 40, 200][rng.below(3) as usize]);
                        match rng.below(10) {
                            0..=3 => {
                                t.upsert(&k, &v).unwrap();
                                m.insert(id, v);
                            }
                            4 => {
                                if t.insert(&k, &v).unwrap() {
                                    assert!(m.insert(id, v).is_none());
                                } else {
                                    assert!(m.contains_key(&id));
                                }
                            }
                            5 => {
                                assert_eq!(t.update(&k, &v).unwrap(), m.contains_key(&id));
                                if let Some(x) = m.get_mut(&id) {
                                    *x = v;
                                }
                            }
                            6..=7 => assert_eq!(t.remove(&k).unwrap(), m.remove(&id).is_some()),
                            _ => {
                                let tx = db.begin();
                                let mut m2 = m.clone();
                                for j in 0..3 {
                                    let id2 = rng.below(KEYS_PER_WRITER) * WRITERS + w;
                                    if j == 1 {
                                        tx.remove(&t, &key(id2)).unwrap();
                                        m2.remove(&id2);
                                    } else {
                                        let v2 = value(id2, i * 4 + j, 30);
                                        tx.upsert(&t, &key(id2), &v2).unwrap();
                                        m2.insert(id2, v2);
                                    }
                                }
                                if rng.below(3) == 0 {
                                    tx.abort().unwrap();
                                } else {
                                    tx.commit().unwrap();
                                    m = m2;
                                }
                            }
                        }
                    }
                    m
                })
            })
            .collect();
        let models = writers.into_iter().map(|h| h.join().unwrap()).collect();
        stop.store(true, Ordering::Relaxed);
        for r in readers {
            r.join().unwrap();
        }
        models
    });
    let check = |t: &ferrite_btree::BTree| {
        let mut n = 0;
        for k in 0..WRITERS * KEYS_PER_WRITER {
            let want = models[(k % WRITERS) as usize].get(&k);
            assert_eq!(t.get(&key(k)).unwrap().as_ref(), want, "{label}: key {k}");
            n += want.is_some() as usize;
        }
        assert_eq!(t.count(), n, "{label}");
    };
    check(&t);
    db.check().unwrap_or_else(|e| panic!("{label}: {e}"));
    let s = db.buffer().stats();
    eprintln!("{label}: {s:?}");
    if cfg.evict_dram && cfg.dram_bytes > 0 {
        assert!(s.dram_evictions > 0, "{label}");
    }
    // A process crash, restart, the same check.
    let img = pool.snapshot();
    drop((t, db));
    let pool = Pool::open_image(img, &PoolOptions::default()).unwrap();
    let db = Database::open(&pool, "s", ssd(&cfg), cfg.clone()).unwrap();
    let t = db.tree("t").unwrap();
    check(&t);
    db.check().unwrap();
}

fn cfg(d: Design) -> BufferConfig {
    let ps = 4096u64;
    let mut c = d.config_paged(4096, 48 * ps, 48 * (ps + 64), 1 << 30);
    match d {
        Design::PmDirect => c.pm_frames = 4096,
        Design::MainMemory => c.dram_bytes = 4096 * ps,
        _ => {}
    }
    c.wal_segment_bytes = 1 << 20;
    c.admission_set_size = 64;
    c
}

#[test]
fn three_tier_under_concurrency() {
    run(cfg(Design::ThreeTier), 8000);
}

#[test]
fn pm_direct_under_concurrency() {
    run(cfg(Design::PmDirect), 5000);
}

#[test]
fn ssd_bm_under_concurrency() {
    run(cfg(Design::SsdBm), 5000);
}
