//! The `buffer` crash-test target: a B-tree on the buffer manager in a
//! simulated pool whose SSD page files live in the pool too
//! ([`ferrite_buffer::SimBackend`]: writes durable at `fdatasync`, unsynced
//! ones torn), so every crash image holds a consistent PM + SSD state. The
//! workloads drive every path of the protocol with tiny tiers: DRAM and PM
//! eviction, admission, SSD writes and syncs, mini-page promotion, swizzling,
//! splits and emptied leaves, checkpoints that switch logs while a
//! transaction is open, transactions committed and aborted, and a
//! transaction left running (a loser at every crash after it began).
//!
//! The checker reopens the store through the normal open path (restart:
//! page table from PM headers, analysis, redo, undo), then uses the generic
//! [`ferrite_kv::oracle`]: every committed operation present, nothing
//! uncommitted, the operation in flight all-or-nothing; then the tree's
//! structure and page accounting ([`Database::check`]: every page used once,
//! none leaked) and the PM space (nothing leaked in the pool).

use std::sync::Arc;

use ferrite_btree::{kv_err, BTree, Database};
use ferrite_buffer::{BufferConfig, BufferStats, Design, SimBackend, SsdBackend};
use ferrite_kv::oracle::{self, apply, Model, Op, Recovery};
use ferrite_kv::{BatchOp, KvResult, OrderedKv};
use ferrite_pm::rng::SplitMix;
use ferrite_pm::{explore, CrashConfig, CrashReport, Journal, JournalHandle, Pool};

const NAME: &str = "crash";
const SSD: &str = "crash.ssd";
const PAGE: usize = 2048;
const SSD_PAGES: u64 = 160;
const PER_FILE: u64 = 40;

/// The configuration of a crash workload: tiny tiers so that a few hundred
/// operations evict from DRAM and PM and checkpoint several times.
pub fn crash_config(design: Design) -> BufferConfig {
    let ps = PAGE as u64;
    let mut c = design.config_paged(PAGE, 6 * ps, 4 * (ps + 64), SSD_PAGES * ps);
    match design {
        Design::PmDirect => c.pm_frames = 48,
        Design::MainMemory => c.dram_bytes = 64 * ps,
        _ => {}
    }
    c.pages_per_file = PER_FILE;
    c.ssd_pages = if c.ssd_pages > 0 { SSD_PAGES } else { 0 };
    c.admission_set_size = 6;
    c.pm_eviction_batch = 2;
    c.wal_segment_bytes = 48 << 10;
    c
}

fn open(pool: &Pool, cfg: &BufferConfig) -> KvResult<Database> {
    let ssd: Option<Arc<dyn SsdBackend>> = if cfg.ssd_pages > 0 {
        Some(Arc::new(
            SimBackend::open_or_create(
                pool,
                SSD,
                PER_FILE * PAGE as u64,
                SSD_PAGES.div_ceil(PER_FILE) as u32,
            )
            .map_err(kv_err)?,
        ))
    } else {
        None
    };
    Database::open(pool, NAME, ssd, cfg.clone())
}

fn key(k: u64) -> Vec<u8> {
    match k % 3 {
        0 => k.to_be_bytes().to_vec(),
        1 => format!("key-{k:05}").into_bytes(),
        _ => format!("a-rather-long-key-{k:06}-for-splits").into_bytes(),
    }
}

fn value(rng: &mut SplitMix, v: u64) -> Vec<u8> {
    let len = [0usize, 8, 40, 150, 300, 420][rng.below(6) as usize];
    (0..len).map(|i| (v * 31 + i as u64 * 7) as u8).collect()
}

/// Keys 0..SHARED are written by single operations and short transactions;
/// keys from LONG on by the long transaction only (it holds their locks).
const SHARED: u64 = 120;
const LONG: u64 = 1000;

/// Where the workload records its operations.
enum Recorder<'a> {
    Journal(&'a JournalHandle<Op>),
    /// Nowhere (the shape test runs without the simulator).
    None,
}

impl Recorder<'_> {
    fn begin(&self, op: Op) {
        if let Recorder::Journal(j) = self {
            j.begin(op);
        }
    }
    fn ack(&self) {
        if let Recorder::Journal(j) = self {
            j.ack();
        }
    }
}

/// The workload: `ops` operations, journaled by effect; returns the buffer
/// manager's counters at the end.
fn workload(
    pool: &Pool,
    j: Recorder<'_>,
    cfg: &BufferConfig,
    ops: usize,
    seed: u64,
) -> Result<BufferStats, String> {
    let e = |e: ferrite_kv::KvError| e.to_string();
    j.begin(Op::Setup);
    let db = open(pool, cfg).map_err(e)?;
    let t = db.tree("t").map_err(e)?;
    j.ack();
    let mut m = Model::new();
    let mut rng = SplitMix(seed);
    // The long transaction: its writes, its model.
    let mut long: Option<(ferrite_btree::Transaction, Vec<BatchOp>)> = None;
    let mut long_next = LONG;
    for i in 0..ops as u64 {
        let phase = (i * 3 / ops as u64) % 3; // grow, churn, shrink
        let r = rng.below(100);
        let k = key(rng.below(SHARED));
        let v = value(&mut rng, i + 1);
        let present = m.contains_key(&k);
        let (put, del) = match phase {
            0 => (70, 80),
            1 => (45, 75),
            _ => (15, 85),
        };
        if r < put {
            let (eff, got, want) = match r % 3 {
                0 => {
                    let eff = if present {
                        Op::Nop
                    } else {
                        Op::Put(k.clone(), v.clone())
                    };
                    j.begin(eff.clone());
                    (eff, t.insert(&k, &v).map_err(e)?, !present)
                }
                1 if rng.below(2) == 0 => {
                    // A patch of part of the value, in place.
                    let old = m.get(&k).cloned().unwrap_or_default();
                    let off = rng.below(old.len() as u64 + 1) as usize;
                    let len = (old.len() - off).min(1 + rng.below(80) as usize);
                    let bytes = vec![i as u8 ^ 0xa5; len];
                    let eff = if present {
                        let mut nv = old.clone();
                        nv[off..off + len].copy_from_slice(&bytes);
                        Op::Put(k.clone(), nv)
                    } else {
                        Op::Nop
                    };
                    j.begin(eff.clone());
                    (eff, t.update_part(&k, off, &bytes).map_err(e)?, present)
                }
                1 => {
                    let eff = if present {
                        Op::Put(k.clone(), v.clone())
                    } else {
                        Op::Nop
                    };
                    j.begin(eff.clone());
                    (eff, t.update(&k, &v).map_err(e)?, present)
                }
                _ => {
                    let eff = Op::Put(k.clone(), v.clone());
                    j.begin(eff.clone());
                    (eff, t.upsert(&k, &v).map_err(e)?, !present)
                }
            };
            if got != want {
                return Err(format!("op {i}: returned {got}, expected {want}"));
            }
            j.ack();
            apply(&mut m, &eff);
        } else if r < del {
            let eff = if present { Op::Del(k.clone()) } else { Op::Nop };
            j.begin(eff.clone());
            if t.remove(&k).map_err(e)? != present {
                return Err(format!("op {i}: remove returned {}", !present));
            }
            j.ack();
            apply(&mut m, &eff);
        } else if r < 93 {
            // A short transaction over shared keys, committed or aborted.
            let tx = db.begin();
            let mut ops_ = Vec::new();
            // Mostly short; sometimes long enough to evict its own pages before
            // it commits (what the write-ahead rule is about).
            let n = if rng.below(4) == 0 {
                8 + rng.below(4)
            } else {
                2 + rng.below(3)
            };
            // The contents as this transaction sees them (for its patches).
            let mut seen = m.clone();
            for x in 0..n {
                let kk = key(rng.below(SHARED));
                if rng.below(3) == 0 {
                    tx.remove(&t, &kk).map_err(e)?;
                    seen.remove(&kk);
                    ops_.push(BatchOp::Delete { key: kk });
                } else if rng.below(4) == 0 {
                    // A patch: undone logically on abort or at restart.
                    let old = seen.get(&kk).cloned();
                    let ol = old.as_ref().map_or(0, Vec::len);
                    let off = rng.below(ol as u64 + 1) as usize;
                    let len = (ol - off).min(1 + rng.below(60) as usize);
                    let bytes = vec![(i + x) as u8 ^ 0x3c; len];
                    let got = tx.update_part(&t, &kk, off, &bytes).map_err(e)?;
                    if got != old.is_some() {
                        return Err(format!("op {i}: patch returned {got}"));
                    }
                    if let Some(mut nv) = old {
                        nv[off..off + len].copy_from_slice(&bytes);
                        seen.insert(kk.clone(), nv.clone());
                        ops_.push(BatchOp::Put { key: kk, value: nv });
                    }
                } else {
                    let vv = value(&mut rng, i * 8 + x + 1);
                    tx.upsert(&t, &kk, &vv).map_err(e)?;
                    seen.insert(kk.clone(), vv.clone());
                    ops_.push(BatchOp::Put { key: kk, value: vv });
                }
            }
            if rng.below(3) == 0 {
                j.begin(Op::Nop);
                tx.abort().map_err(e)?;
                j.ack();
            } else {
                let eff = Op::Batch(ops_);
                j.begin(eff.clone());
                tx.commit().map_err(e)?;
                j.ack();
                apply(&mut m, &eff);
            }
        } else if r < 98 {
            // The long transaction: start it, extend it, or end it.
            match long.take() {
                None => long = Some((db.begin(), Vec::new())),
                Some((tx, mut w)) if w.len() < 12 && rng.below(4) != 0 => {
                    let kk = key(long_next + rng.below(8));
                    long_next += 1;
                    let vv = value(&mut rng, i * 8 + 1);
                    tx.upsert(&t, &kk, &vv).map_err(e)?;
                    w.push(BatchOp::Put { key: kk, value: vv });
                    long = Some((tx, w));
                }
                Some((tx, w)) => {
                    if rng.below(2) == 0 {
                        j.begin(Op::Nop);
                        tx.abort().map_err(e)?;
                        j.ack();
                    } else {
                        let eff = Op::Batch(w);
                        j.begin(eff.clone());
                        tx.commit().map_err(e)?;
                        j.ack();
                        apply(&mut m, &eff);
                    }
                }
            }
        } else {
            j.begin(Op::Nop);
            // Every other checkpoint also writes PM's newer pages to SSD.
            if rng.below(2) == 0 {
                db.checkpoint().map_err(e)?;
            } else {
                db.write_pm_to_ssd().map_err(e)?;
            }
            j.ack();
        }
    }
    let stats = db.buffer().stats();
    // A transaction still running at the end is a loser at the last point.
    std::mem::forget(long);
    Ok(stats)
}

/// The buffer manager's part of the recovery check.
struct BufferRecovery {
    pool: Pool,
    cfg: BufferConfig,
    db: Option<Database>,
}

impl Recovery for BufferRecovery {
    type Store = BTree;

    fn open(&mut self) -> KvResult<BTree> {
        let db = open(&self.pool, &self.cfg)?;
        // What follows (creating the tree if the crash came before it, the
        // checks) is not recovery.
        ferrite_pm::crash::recovered(&self.pool);
        let t = db.tree("t")?;
        self.db = Some(db);
        Ok(t)
    }

    fn check_structure(&mut self, _: &BTree) -> Result<(), String> {
        let db = self.db.as_ref().expect("opened");
        db.check()?;
        // PM evicts a frame marked clean without writing it: SSD must
        // hold the same page.
        db.buffer().check_clean_frames()?;
        Ok(())
    }

    fn check_space(&mut self, _: &BTree) -> Result<(), String> {
        self.db
            .as_ref()
            .expect("opened")
            .buffer()
            .exhaust_and_account()
    }
}

/// Checks a recovered image against the journal; returns its contents.
pub fn check(pool: Pool, j: &Journal<Op>, cfg: &BufferConfig) -> Result<Model, String> {
    oracle::check_recovered(
        BufferRecovery {
            pool,
            cfg: cfg.clone(),
            db: None,
        },
        &j.acked,
        j.in_flight.as_ref(),
    )
}

/// Runs the workload of `design` (`ops` operations) without the crash
/// simulator and returns the buffer manager's counters: what the workload
/// exercises.
pub fn workload_stats(design: Design, ops: usize) -> Result<BufferStats, String> {
    let cfg = crash_config(design);
    let pool = Pool::create_volatile(2 << 20, &Default::default()).map_err(|e| e.to_string())?;
    workload(&pool, Recorder::None, &cfg, ops, 1)
}

/// Runs the workload of `design` under the crash simulator.
pub fn explore_design(
    cfg: &CrashConfig,
    design: Design,
    ops: usize,
) -> ferrite_pm::Result<CrashReport> {
    let bc = crash_config(design);
    let mut c = cfg.clone();
    c.pool_size = c.pool_size.max(2 << 20);
    let (b1, b2) = (bc.clone(), bc);
    let seed = cfg.seed;
    explore(
        "buffer",
        &c,
        move |p, j| workload(p, Recorder::Journal(j), &b1, ops, seed).map(|_| ()),
        move |p, j| check(p, j, &b2),
    )
}

/// Operations of the three-tier and SSD-BM workloads when the caller passes
/// the generic default; the PM-direct workload runs a third of it.
pub const DEFAULT_OPS: usize = 220;

fn ops(cfg: &CrashConfig, default: usize) -> usize {
    if cfg.ops == CrashConfig::default().ops {
        default
    } else {
        cfg.ops
    }
}

/// The `buffer` target: the three-tier design (>= 10,000 crash states).
pub fn buffer_target(cfg: &CrashConfig) -> ferrite_pm::Result<CrashReport> {
    explore_design(cfg, Design::ThreeTier, ops(cfg, DEFAULT_OPS))
}

/// The `buffer-pm-direct` target: pages updated in place in PM after the log force.
pub fn pm_direct_target(cfg: &CrashConfig) -> ferrite_pm::Result<CrashReport> {
    explore_design(cfg, Design::PmDirect, ops(cfg, DEFAULT_OPS / 3))
}

/// The `buffer-ssd-bm` target: DRAM over SSD. Its workload fences less per
/// operation than the three-tier one (no PM tier), so it runs a sixth more
/// operations to stay above 10,000 crash states.
pub fn ssd_bm_target(cfg: &CrashConfig) -> ferrite_pm::Result<CrashReport> {
    explore_design(cfg, Design::SsdBm, ops(cfg, DEFAULT_OPS + DEFAULT_OPS / 6))
}
