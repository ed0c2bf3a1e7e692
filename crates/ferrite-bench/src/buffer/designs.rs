//! The thesis's five designs (`ferrite_btree::Design` presets of one buffer
//! manager and one B+-tree) as benchmark stores: where their files go, the
//! scaled capacities, opening, closing and reopening (restart), a
//! transactional view for TPC-C, and the buffer manager's counters.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use ferrite_btree::{
    BTree, BufferConfig, BufferStats, Database, Design, RestartReport, Transaction,
};
use ferrite_buffer::BufferError;
use ferrite_kv::{KvError, KvResult, OrderedKv};

use super::txn::{kv_range, Tx, TxStore};

const MIB: u64 = 1 << 20;

/// DRAM, PM and SSD capacities in bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Tiers {
    pub dram: u64,
    pub pm: u64,
    pub ssd: u64,
}

impl Tiers {
    /// The thesis's 2 / 10 / 50 GB scaled by 1/8 to this machine:
    /// 256 MiB / 1.25 GiB / 6.25 GiB.
    pub const DEFAULT: Tiers = Tiers {
        dram: 256 * MIB,
        pm: 1280 * MIB,
        ssd: 6400 * MIB,
    };

    /// One line: `DRAM 256 MiB / PM 1280 MiB / SSD 6400 MiB`.
    pub fn describe(&self) -> String {
        format!(
            "DRAM {} MiB / PM {} MiB / SSD {} MiB",
            self.dram / MIB,
            self.pm / MIB,
            self.ssd / MIB
        )
    }

    /// The design's configuration at these capacities.
    pub fn config(&self, d: Design) -> BufferConfig {
        d.config(self.dram, self.pm, self.ssd)
    }
}

/// Where stores put their files: the PM pool in `pool_dir` (emulated PM on
/// `/dev/shm`), SSD page files in `ssd_dir` (a real disk: O_DIRECT).
#[derive(Debug, Clone)]
pub struct Dirs {
    pub pool_dir: PathBuf,
    pub ssd_dir: PathBuf,
}

/// Whether `e` says the data does not fit the design (main-memory beyond
/// DRAM, PM-direct beyond PM, any design beyond SSD).
pub fn is_capacity(e: &KvError) -> bool {
    e.storage_error()
        .and_then(|s| s.downcast_ref::<BufferError>())
        .is_some_and(|b| matches!(b, BufferError::CapacityExceeded(_)))
}

/// Removes a store's files when dropped (after the database is closed).
struct Files {
    pool: PathBuf,
    ssd: PathBuf,
}

impl Files {
    fn remove(&self) {
        let _ = std::fs::remove_file(&self.pool);
        let _ = std::fs::remove_dir_all(&self.ssd);
    }
}

impl Drop for Files {
    fn drop(&mut self) {
        self.remove();
    }
}

/// An open store of one design with one tree.
pub struct Store {
    // Declared before `files`: the database is dropped before its files go.
    db: Database,
    pub tree: BTree,
    tree_name: String,
    /// `main-memory`, …, or a drill-down label.
    pub label: String,
    pub cfg: BufferConfig,
    files: Files,
}

static SEQ: AtomicU64 = AtomicU64::new(0);

impl Store {
    /// Creates an empty store (removing leftovers of the same name).
    pub fn create(dirs: &Dirs, label: &str, cfg: BufferConfig, tree: &str) -> KvResult<Store> {
        let tag = format!(
            "ferrite-bufbench-{}-{}-{label}",
            std::process::id(),
            SEQ.fetch_add(1, Ordering::Relaxed)
        );
        let files = Files {
            pool: dirs.pool_dir.join(format!("{tag}.pool")),
            ssd: dirs.ssd_dir.join(format!("{tag}-ssd")),
        };
        files.remove();
        std::fs::create_dir_all(&files.ssd).map_err(KvError::storage)?;
        let db = Database::open_files(&files.pool, Some(&files.ssd), cfg.clone())?;
        let t = db.tree(tree)?;
        Ok(Store {
            db,
            tree: t,
            tree_name: tree.to_string(),
            label: label.to_string(),
            cfg,
            files,
        })
    }

    pub fn database(&self) -> &Database {
        &self.db
    }

    /// Closes cleanly (a checkpoint) and opens again with `cfg` (the same
    /// PM geometry; DRAM budget and techniques may differ): the restart
    /// report, and the seconds from the start of the open to a usable tree.
    pub fn reopen(self, cfg: BufferConfig) -> KvResult<(Store, RestartReport, f64)> {
        let Store {
            db,
            tree,
            tree_name,
            label,
            files,
            ..
        } = self;
        db.close()?;
        drop(tree);
        drop(db);
        let t0 = Instant::now();
        let db = Database::open_files(&files.pool, Some(&files.ssd), cfg.clone())?;
        let t = db.tree(&tree_name)?;
        let secs = t0.elapsed().as_secs_f64();
        let report = db.restart_report().clone();
        Ok((
            Store {
                db,
                tree: t,
                tree_name,
                label,
                cfg,
                files,
            },
            report,
            secs,
        ))
    }

    /// Bytes of pages allocated (the thesis's "data size": the tree after the
    /// load, inner nodes and free space included).
    pub fn data_bytes(&self) -> KvResult<u64> {
        let (next, _) = self
            .db
            .buffer()
            .allocation_state()
            .map_err(ferrite_btree::kv_err)?;
        Ok(next * self.cfg.page_size as u64)
    }

    pub fn stats(&self) -> BufferStats {
        self.db.buffer().stats()
    }

    /// Writes per PM cache line, when the configuration tracks them.
    pub fn pm_line_writes(&self) -> Option<Vec<u32>> {
        self.db.buffer().pm_line_writes()
    }

    /// The store as an [`OrderedKv`].
    pub fn kv(&self) -> &dyn OrderedKv {
        &self.tree
    }

    /// The store as a transactional store (TPC-C).
    pub fn txs(&self) -> BTreeTxs<'_> {
        BTreeTxs { store: self }
    }
}

/// A configuration for loading: designs that evict DRAM get a DRAM budget
/// that holds `data_estimate` bytes, so that the load runs at memory speed;
/// the store is then closed and reopened with the real budgets (the caller
/// warms it up before measuring). Others load as they are.
pub fn load_config(cfg: &BufferConfig, data_estimate: u64) -> BufferConfig {
    let mut c = cfg.clone();
    if c.dram_bytes > 0 && c.evict_dram {
        c.dram_bytes = c
            .dram_bytes
            .max(data_estimate + data_estimate / 4 + 64 * MIB);
    }
    c
}

/// Transactions of the store's B+-tree (its own: key locks, undo, commit
/// forces the log).
pub struct BTreeTxs<'a> {
    store: &'a Store,
}

impl TxStore for BTreeTxs<'_> {
    fn label(&self) -> String {
        self.store.label.clone()
    }
    fn begin(&self) -> KvResult<Box<dyn Tx + '_>> {
        Ok(Box::new(BTreeTx {
            tx: Some(self.store.db.begin()),
            tree: &self.store.tree,
        }))
    }
}

struct BTreeTx<'a> {
    tx: Option<Transaction>,
    tree: &'a BTree,
}

impl BTreeTx<'_> {
    fn t(&self) -> &Transaction {
        self.tx.as_ref().expect("live until commit or abort")
    }
}

impl Tx for BTreeTx<'_> {
    fn get(&mut self, key: &[u8], out: &mut Vec<u8>) -> KvResult<bool> {
        self.tree.get_into(key, out)
    }
    fn insert(&mut self, key: &[u8], value: &[u8]) -> KvResult<bool> {
        self.t().insert(self.tree, key, value)
    }
    fn update(&mut self, key: &[u8], value: &[u8]) -> KvResult<bool> {
        self.t().update(self.tree, key, value)
    }
    fn remove(&mut self, key: &[u8]) -> KvResult<bool> {
        self.t().remove(self.tree, key)
    }
    fn scan(
        &mut self,
        start: &[u8],
        end: &[u8],
        f: &mut dyn FnMut(&[u8], &[u8]) -> bool,
    ) -> KvResult<usize> {
        kv_range(self.tree, start, end, f)
    }
    fn commit(mut self: Box<Self>) -> KvResult<()> {
        match self.tx.take() {
            Some(t) if t.ops() > 0 => t.commit(),
            Some(t) => t.abort(),
            None => Ok(()),
        }
    }
    fn abort(mut self: Box<Self>) -> KvResult<()> {
        match self.tx.take() {
            Some(t) => t.abort(),
            None => Ok(()),
        }
    }
}

/// Counters of one measurement (the difference of two snapshots), per
/// operation: the hardware-independent costs beside the throughput.
pub fn per_op(before: &BufferStats, after: &BufferStats, ops: u64) -> Vec<(&'static str, f64)> {
    let n = ops.max(1) as f64;
    let d = |a: u64, b: u64| a.saturating_sub(b) as f64 / n;
    vec![
        (
            "dram_lines_loaded_per_op",
            d(after.dram_line_loads, before.dram_line_loads),
        ),
        (
            "pm_pages_loaded_per_op",
            d(after.dram_page_loads_pm, before.dram_page_loads_pm),
        ),
        ("ssd_reads_per_op", d(after.ssd_reads, before.ssd_reads)),
        ("ssd_writes_per_op", d(after.ssd_writes, before.ssd_writes)),
        (
            "pm_lines_written_per_op",
            d(after.pm_lines_written, before.pm_lines_written),
        ),
        ("wal_bytes_per_op", d(after.wal_bytes, before.wal_bytes)),
        ("misses_per_op", d(after.misses, before.misses)),
        (
            "pm_model_lines_per_op",
            d(after.pm_model_lines, before.pm_model_lines),
        ),
        (
            "pm_model_wait_ns_per_op",
            d(after.pm_model_wait_ns, before.pm_model_wait_ns),
        ),
    ]
}

/// Removes leftovers of earlier benchmark processes that died before
/// cleaning up (files named `ferrite-bufbench-<pid>-…` of a pid that is gone).
pub fn remove_stale(dir: &Path) {
    let Ok(rd) = std::fs::read_dir(dir) else {
        return;
    };
    for e in rd.flatten() {
        let name = e.file_name().to_string_lossy().to_string();
        let Some(rest) = name.strip_prefix("ferrite-bufbench-") else {
            continue;
        };
        let Some(pid) = rest.split('-').next().and_then(|p| p.parse::<u32>().ok()) else {
            continue;
        };
        if !Path::new(&format!("/proc/{pid}")).exists() {
            let p = e.path();
            if p.is_dir() {
                let _ = std::fs::remove_dir_all(&p);
            } else {
                let _ = std::fs::remove_file(&p);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::buffer::{tpcc, ycsb};

    fn dirs() -> Dirs {
        Dirs {
            pool_dir: PathBuf::from("/dev/shm"),
            ssd_dir: std::env::temp_dir(),
        }
    }

    /// Tiny tiers: 1 MiB DRAM, 8 MiB PM, 64 MiB SSD.
    fn tiny() -> Tiers {
        Tiers {
            dram: MIB,
            pm: 8 * MIB,
            ssd: 64 * MIB,
        }
    }

    fn small_cfg(d: Design) -> BufferConfig {
        let t = tiny();
        let mut c = d.config_paged(8192, t.dram, t.pm, t.ssd);
        c.wal_segment_bytes = 1 << 20;
        c
    }

    #[test]
    fn every_design_runs_ycsb_and_reopens_with_its_data() {
        for d in Design::ALL {
            let mut cfg = small_cfg(d);
            if d == Design::MainMemory {
                cfg.dram_bytes = 16 * MIB;
            }
            let s = Store::create(&dirs(), d.name(), cfg.clone(), "ycsb").unwrap();
            ycsb::load(s.kv(), 2000, &mut |_| {}).unwrap();
            let mut spec =
                ycsb::RunSpec::new(ycsb::Workload::ReadWrite { update_pct: 50 }, 2000, 60.0);
            spec.max_ops = 2000;
            // Through the B+-tree's field reads and in-place field updates.
            let r = ycsb::run(&s.tree, &spec).unwrap();
            assert_eq!((r.wrong, r.missing), (0, 0), "{}", d.name());
            // Every field of every record still belongs to it, and the
            // updated fields carry their new versions.
            let mut changed = 0;
            for id in 0..2000u32 {
                let v = s.kv().get(&ycsb::key(id)).unwrap().unwrap();
                assert_eq!(v.len(), ycsb::VALUE_LEN);
                let mut orig = Vec::new();
                ycsb::record(id, &mut orig);
                for f in 0..ycsb::FIELDS {
                    assert!(ycsb::field_ok(&v, id, f), "{}: {id}/{f}", d.name());
                }
                changed += (v != orig) as u32;
            }
            assert!(changed > 50, "{}: {changed} records updated", d.name());
            assert!(s.data_bytes().unwrap() >= 2000 * 1000, "{}", d.name());
            let (s, rep, _) = s.reopen(cfg).unwrap();
            assert_eq!(rep.records_redone, 0, "a clean close needs no redo");
            assert_eq!(s.kv().count(), 2000, "{}", d.name());
        }
    }

    #[test]
    fn data_beyond_a_design_without_eviction_is_a_capacity_error() {
        let s = Store::create(&dirs(), "mm", small_cfg(Design::MainMemory), "ycsb").unwrap();
        let e = ycsb::load(s.kv(), 5000, &mut |_| {}).unwrap_err();
        assert!(is_capacity(&e), "{e}");
    }

    #[test]
    fn tpcc_runs_consistently_on_the_btree_transactions() {
        let mut cfg = small_cfg(Design::ThreeTier);
        cfg.wal_segment_bytes = 4 << 20;
        let s = Store::create(&dirs(), "tt", cfg, "tpcc").unwrap();
        let st = s.txs();
        tpcc::load(&st, 1, tpcc::Scale::TINY, 1, &mut |_| {}).unwrap();
        let spec = tpcc::TpccRun {
            warehouses: 1,
            scale: tpcc::Scale::TINY,
            seconds: 60.0,
            max_txns: 500,
            warmup_txns: 0,
            warmup_seconds: 0.0,
            seed: 4,
        };
        let r = tpcc::run(&st, &spec).unwrap();
        assert_eq!(r.txns, 500);
        assert!(r.rollbacks < 20);
        assert_eq!(tpcc::check(&st, 1).unwrap(), Vec::<String>::new());
        assert!(s.stats().dram_evictions > 0, "the tiny DRAM budget evicts");
    }

    #[test]
    fn stores_remove_their_files() {
        let s = Store::create(&dirs(), "gone", small_cfg(Design::SsdBm), "t").unwrap();
        let (p, d) = (s.files.pool.clone(), s.files.ssd.clone());
        assert!(p.exists() && d.exists());
        drop(s);
        assert!(!p.exists() && !d.exists());
    }
}
