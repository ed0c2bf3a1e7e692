//! The indexes `ferrite bench` can compare, by name, each created fresh with its
//! files in the pool directory (removed when the [`Instance`] is dropped).

use std::path::{Path, PathBuf};
use std::sync::Arc;

use ferrite_index::OrderedKv;
use ferrite_pm::{Pool, PoolOptions};

use crate::index::baselines::{
    BTreeMapKv, RedbKv, SkipListKv, U64MapKv, BTREEMAP_LABEL, SKIPLIST_LABEL, U64_MAP_LABEL,
};
use crate::{BenchError, Result};

/// The baselines this harness brings (Ferrite's own structures come from
/// `ferrite_registry`).
pub const BASELINES: &[&str] = &[
    "btreemap",
    "btreemap-u64",
    "skiplist",
    "redb",
    "redb-nosync",
];

/// Every variant name `--index` / `--compare` accept: the registry's
/// key-value variants, then the baselines.
pub fn variants() -> Vec<&'static str> {
    ferrite_registry::kv_variants()
        .map(|v| v.name)
        .chain(BASELINES.iter().copied())
        .collect()
}

/// The default comparison of `ferrite bench` (see [`default_compare`]).
pub const DEFAULT_COMPARE: &[&str] = &["ferrite", "ferrite-dram", "btreemap", "redb"];

/// The default comparison for keys of `key_len` bytes and values of
/// `value_size`: [`DEFAULT_COMPARE`], with `btreemap-u64` beside `btreemap`
/// when both are 8 bytes.
pub fn default_compare(key_len: usize, value_size: usize) -> Vec<String> {
    let mut v: Vec<String> = DEFAULT_COMPARE.iter().map(|s| s.to_string()).collect();
    if key_len == 8 && value_size == 8 {
        let at = v
            .iter()
            .position(|x| x == "btreemap")
            .map_or(v.len(), |i| i + 1);
        v.insert(at, "btreemap-u64".into());
    }
    v
}

/// What a volatile variant's completed operation survives.
const VOLATILE: &str = "volatile, nothing survives the process";

/// A pool's durability as a one-line contract.
fn pool_contract(d: ferrite_pm::Durability) -> &'static str {
    use ferrite_pm::Durability as D;
    match d {
        D::Pm => "power-fail safe (DAX device mapped with MAP_SYNC)",
        D::PmEadrAssumed => {
            "power-fail safe only on an eADR platform (MAP_SYNC, no write-back issued)"
        }
        D::EmulatedShm => "survives a process crash, not power loss (tmpfs is DRAM)",
        D::EmulatedFile => "survives a process crash, not power loss (page cache, no DAX)",
        D::FileMsync => "power-fail safe (msync at every fence, block-device speed)",
        D::Volatile => VOLATILE,
        D::Simulated => "crash simulator",
    }
}

/// redb commit durability.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RedbMode {
    /// `Durability::Immediate`: fsync at every commit (variant `redb`).
    Immediate,
    /// `Durability::None`: no fsync (variant `redb-nosync`), not crash-safe.
    None,
}

/// Where and how big.
#[derive(Debug, Clone)]
pub struct VariantConfig {
    /// Directory for temporary pools and database files (`/dev/shm` by default).
    pub pool_dir: PathBuf,
    /// PiBench's `--pool_path`: a pool file to use (kept afterwards) instead of a
    /// temporary one.
    pub pool_path: Option<PathBuf>,
    /// PiBench's `--pool_size` (bytes); 0 = sized from the record count.
    pub pool_size: u64,
    /// Records that will be in the index at most (load + inserts), for sizing.
    pub max_records: u64,
    pub key_len: usize,
    pub value_size: usize,
    /// Open an existing pool at `pool_path` instead of creating one (`--skip_load`).
    pub reopen: bool,
    /// Records per write transaction while loading redb (1 = a commit per record).
    pub redb_load_batch: usize,
    /// The most worker threads any phase will use (PiBench's `num_threads`).
    pub threads: usize,
}

impl VariantConfig {
    /// A pool size generous enough for `max_records` records of this shape
    /// (tmpfs pages are only used when touched, so oversizing costs nothing).
    pub fn pool_bytes(&self) -> u64 {
        if self.pool_size > 0 {
            return self.pool_size;
        }
        let per = (self.key_len + self.value_size) as u64 * 2 + 96;
        (self.max_records * per * 2 + (256 << 20)).next_multiple_of(1 << 20)
    }
}

/// DRAM and PM in use, and how each was measured.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct MemoryReport {
    pub dram_bytes: Option<u64>,
    pub pm_bytes: Option<u64>,
    /// `index` (the index's own accounting) or `malloc` (growth of the bytes
    /// the allocator has handed out since the instance was created).
    pub dram_source: &'static str,
    /// The measures `dram_bytes` was taken from when there are several (a
    /// peer's `rss_anon` and `malloc` growth), each in the JSON as
    /// `dram_<name>_bytes`.
    pub dram_parts: Vec<(&'static str, u64)>,
    /// `index`, `file` (database file size) or `-`.
    pub pm_source: &'static str,
    /// Of a Ferrite pool: the share of its resident bytes on huge pages
    /// ([`ferrite_pm::Pool::huge_page_share`]).
    pub pool_huge_share: Option<f64>,
}

/// Measures an instance's memory (see [`Instance::new`]).
pub type MemFn = Box<dyn Fn() -> MemoryReport + Send + Sync>;

/// Counts an instance's flushed cache lines (see [`Instance::flushed_lines`]).
pub type FlushFn = Box<dyn Fn() -> Option<u64> + Send + Sync>;

/// One opened index plus what it needs to stay alive and be cleaned up.
pub struct Instance {
    pub kv: Arc<dyn OrderedKv>,
    pub name: String,
    /// What a completed operation survives, in words, for the report.
    pub durability: String,
    /// What the variant is, in a few words (`RwLock<BTreeMap<u64, u64>>`, …).
    pub label: String,
    /// Its durability contract in one short line.
    pub contract: String,
    /// Records per batch while loading (1 = one insert per record).
    pub load_batch: usize,
    memory: MemFn,
    /// What opening found (e.g. the rebuild after a reopen).
    pub notes: Vec<String>,
    /// Cache lines flushed so far, for an index whose flushes the PM layer's
    /// counters do not see (a published peer in a counting build); None
    /// where they cannot be counted.
    pub flushed_lines: Option<FlushFn>,
    files: Vec<PathBuf>,
    /// Holds the pool (if any) until after the index is dropped.
    _keep: Option<Box<dyn std::any::Any + Send + Sync>>,
}

impl Instance {
    /// An instance of `kv`; `files` (files or directories) are removed when
    /// it is dropped.
    pub fn new(
        kv: Arc<dyn OrderedKv>,
        name: &str,
        durability: String,
        label: String,
        contract: String,
        memory: MemFn,
        files: Vec<PathBuf>,
    ) -> Instance {
        Instance {
            kv,
            name: name.into(),
            durability,
            label,
            contract,
            load_batch: 1,
            memory,
            notes: Vec::new(),
            flushed_lines: None,
            files,
            _keep: None,
        }
    }

    pub fn memory(&self) -> MemoryReport {
        (self.memory)()
    }

    /// Files this instance created and removes when dropped.
    pub fn files(&self) -> &[PathBuf] {
        &self.files
    }
}

impl Drop for Instance {
    fn drop(&mut self) {
        for f in &self.files {
            if f.is_dir() {
                let _ = std::fs::remove_dir_all(f);
            } else {
                let _ = std::fs::remove_file(f);
            }
        }
    }
}

/// Bytes the process's allocator has handed out and not taken back (glibc's
/// `mallinfo2`: small blocks plus mmapped ones, all arenas). Unlike resident
/// memory it drops when memory is freed, so one variant's leftovers do not
/// count against the next.
#[cfg(all(target_os = "linux", target_env = "gnu"))]
pub fn heap_in_use_bytes() -> Option<u64> {
    // SAFETY: mallinfo2 only reads allocator statistics (it takes the arena
    // locks itself) and returns a plain struct by value.
    let m = unsafe { libc::mallinfo2() };
    Some((m.uordblks + m.hblkhd) as u64)
}

/// Anonymous resident memory (`RssAnon` in `/proc/self/status`) where glibc's
/// allocator statistics are not available.
#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
pub fn heap_in_use_bytes() -> Option<u64> {
    let s = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = s.lines().find(|l| l.starts_with("RssAnon:"))?;
    let kb: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kb * 1024)
}

/// How much `read` has grown since now, each time the result is called.
pub(crate) fn growth_since(read: fn() -> Option<u64>) -> impl Fn() -> Option<u64> + Send + Sync {
    let base = read();
    move || Some(read()?.saturating_sub(base?))
}

fn heap_growth_since() -> impl Fn() -> Option<u64> + Send + Sync {
    growth_since(heap_in_use_bytes)
}

fn temp_path(dir: &Path, tag: &str, ext: &str) -> PathBuf {
    dir.join(format!("ferrite-bench-{tag}-{}.{ext}", std::process::id()))
}

/// Opens the variant called `name`.
pub fn open_variant(name: &str, cfg: &VariantConfig) -> Result<Instance> {
    match name {
        "btreemap" | "btreemap-u64" => {
            let u64_keys = name == "btreemap-u64";
            if u64_keys && (cfg.key_len != 8 || cfg.value_size != 8) {
                return Err(BenchError::Options(format!(
                    "btreemap-u64 takes 8-byte keys and values (-k 8 -v 8, no -f), not {}-byte keys and {}-byte values",
                    cfg.key_len, cfg.value_size
                )));
            }
            let growth = heap_growth_since();
            let (kv, label): (Arc<dyn OrderedKv>, _) = if u64_keys {
                (Arc::new(U64MapKv::new()), U64_MAP_LABEL)
            } else {
                (Arc::new(BTreeMapKv::new()), BTREEMAP_LABEL)
            };
            Ok(Instance {
                kv,
                name: name.into(),
                durability: "volatile (DRAM, gone with the process)".into(),
                label: label.into(),
                contract: VOLATILE.into(),
                load_batch: 1,
                memory: Box::new(move || MemoryReport {
                    dram_bytes: growth(),
                    pm_bytes: None,
                    dram_source: "malloc",
                    pm_source: "-",
                    pool_huge_share: None,
                    dram_parts: Vec::new(),
                }),
                notes: Vec::new(),
                flushed_lines: None,
                files: Vec::new(),
                _keep: None,
            })
        }
        "skiplist" => {
            let growth = heap_growth_since();
            Ok(Instance::new(
                Arc::new(SkipListKv::new()),
                name,
                "volatile (DRAM, gone with the process)".into(),
                SKIPLIST_LABEL.into(),
                VOLATILE.into(),
                Box::new(move || MemoryReport {
                    dram_bytes: growth(),
                    pm_bytes: None,
                    dram_source: "malloc",
                    pm_source: "-",
                    pool_huge_share: None,
                    dram_parts: Vec::new(),
                }),
                Vec::new(),
            ))
        }
        "redb" | "redb-nosync" => {
            let mode = if name == "redb" {
                RedbMode::Immediate
            } else {
                RedbMode::None
            };
            let path = temp_path(&cfg.pool_dir, name, "redb");
            let growth = heap_growth_since();
            let d = match mode {
                RedbMode::Immediate => redb::Durability::Immediate,
                RedbMode::None => redb::Durability::None,
            };
            let kv = Arc::new(RedbKv::create(&path, d, name)?);
            let durability = format!(
                "{}; file in {} (load: {} records per transaction)",
                kv.durability_text(),
                cfg.pool_dir.display(),
                cfg.redb_load_batch
            );
            let k2 = kv.clone();
            let contract = match mode {
                RedbMode::Immediate => format!(
                    "fsync per commit, power-fail safe on a real disk (here in {})",
                    cfg.pool_dir.display()
                ),
                RedbMode::None => "no fsync: not crash-safe until a later durable commit".into(),
            };
            Ok(Instance {
                kv,
                name: name.into(),
                durability,
                label: "redb 2, a transaction per write".into(),
                contract,
                load_batch: cfg.redb_load_batch.max(1),
                memory: Box::new(move || MemoryReport {
                    dram_bytes: growth(),
                    pm_bytes: Some(k2.file_bytes()),
                    dram_source: "malloc",
                    pm_source: "file",
                    pool_huge_share: None,
                    dram_parts: Vec::new(),
                }),
                notes: Vec::new(),
                flushed_lines: None,
                files: vec![path],
                _keep: None,
            })
        }
        peer if crate::index::peers::is_peer(peer) => crate::index::peers::open_peer(peer, cfg),
        other => open_registered(other, cfg),
    }
}

/// A registered structure's own memory accounting, as the harness reports it.
fn structure_memory(
    mem: Box<dyn Fn() -> ferrite_registry::MemoryUse + Send + Sync>,
    pool: Option<Pool>,
) -> MemFn {
    Box::new(move || {
        let m = mem();
        MemoryReport {
            dram_bytes: Some(m.dram_bytes),
            pm_bytes: Some(m.pm_bytes),
            dram_source: "index",
            pm_source: "index",
            pool_huge_share: pool.as_ref().and_then(Pool::huge_page_share),
            dram_parts: Vec::new(),
        }
    })
}

/// A structure from `ferrite_registry` (Ferrite's own indexes; anything
/// registered there is benchmarkable by name).
fn open_registered(name: &str, cfg: &VariantConfig) -> Result<Instance> {
    let variant = ferrite_registry::kv_variant(name)
        .ok_or_else(|| BenchError::UnknownVariant(name.into()))?;
    if !variant.needs_pool {
        let o = (variant.open)(&ferrite_registry::KvSpec {
            pool: None,
            name,
            capacity: cfg.pool_bytes(),
        })?;
        let mem = o.memory;
        return Ok(Instance {
            kv: o.kv,
            name: name.into(),
            durability: "volatile: the same index in DRAM, no write-back or fences".into(),
            label: variant.about.to_string(),
            contract: VOLATILE.into(),
            load_batch: 1,
            memory: structure_memory(mem, None),
            notes: o.notes,
            flushed_lines: None,
            files: Vec::new(),
            _keep: None,
        });
    }
    let (path, temporary) = match &cfg.pool_path {
        Some(p) => (p.clone(), false),
        None => (temp_path(&cfg.pool_dir, name, "pool"), true),
    };
    let opts = PoolOptions::default();
    let pool = if cfg.reopen {
        Pool::open(&path, &opts)?
    } else {
        if temporary {
            let _ = std::fs::remove_file(&path);
        } else if path.exists() {
            return Err(BenchError::Options(format!(
                "{} exists: pass --skip_load to benchmark the index in it, or remove it",
                path.display()
            )));
        }
        Pool::create(&path, cfg.pool_bytes(), &opts)?
    };
    let o = (variant.open)(&ferrite_registry::KvSpec {
        pool: Some(&pool),
        name: "pibench",
        capacity: cfg.pool_bytes(),
    })?;
    let notes = if cfg.reopen { o.notes } else { Vec::new() };
    let durability = format!(
        "pool {} ({}): {}",
        path.display(),
        pool.durability().name(),
        pool.durability().describe()
    );
    let mem = o.memory;
    let where_ = if temporary {
        format!("pool in {}", cfg.pool_dir.display())
    } else {
        format!("pool {}", path.display())
    };
    Ok(Instance {
        kv: o.kv,
        name: name.into(),
        durability,
        label: format!("{}, {where_}", variant.about),
        contract: pool_contract(pool.durability()).into(),
        load_batch: 1,
        memory: structure_memory(mem, Some(pool.clone())),
        notes,
        flushed_lines: None,
        files: if temporary { vec![path] } else { Vec::new() },
        _keep: Some(Box::new(pool)),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg() -> VariantConfig {
        VariantConfig {
            pool_dir: std::env::temp_dir(),
            pool_path: None,
            pool_size: 0,
            max_records: 1000,
            key_len: 8,
            value_size: 8,
            reopen: false,
            redb_load_batch: 100,
            threads: 1,
        }
    }

    #[test]
    fn unknown_names_are_errors() {
        assert!(matches!(
            open_variant("nope", &cfg()),
            Err(BenchError::UnknownVariant(_))
        ));
    }

    #[test]
    fn redb_files_are_removed_on_drop() {
        let inst = open_variant("redb-nosync", &cfg()).unwrap();
        inst.kv.insert(b"k", b"v").unwrap();
        let f = inst.files()[0].clone();
        assert!(f.exists());
        assert!(inst.memory().pm_bytes.unwrap() > 0);
        drop(inst);
        assert!(!f.exists());
    }

    #[test]
    fn every_variant_opens_and_works() {
        for name in variants() {
            let inst = open_variant(name, &cfg()).unwrap();
            // 8-byte values: btreemap-u64 takes nothing else.
            assert!(inst.kv.insert(&0u64.to_be_bytes(), b"zerozero").unwrap());
            assert_eq!(
                inst.kv.get(&[0u8; 8]).unwrap().as_deref(),
                Some(&b"zerozero"[..])
            );
            assert!(!inst.durability.is_empty());
            assert!(!inst.label.is_empty() && !inst.contract.is_empty());
            let files = inst.files().to_vec();
            drop(inst);
            assert!(files.iter().all(|f| !f.exists()), "{name} left files");
        }
    }

    #[test]
    fn the_u64_map_is_offered_for_8_byte_keys_only() {
        assert!(default_compare(8, 8).contains(&"btreemap-u64".to_string()));
        assert_eq!(default_compare(16, 8), DEFAULT_COMPARE);
        let mut c = cfg();
        c.key_len = 16;
        assert!(matches!(
            open_variant("btreemap-u64", &c),
            Err(BenchError::Options(_))
        ));
    }

    #[test]
    fn pool_size_grows_with_records() {
        let mut c = cfg();
        let small = c.pool_bytes();
        c.max_records = 10_000_000;
        assert!(c.pool_bytes() > small);
        c.pool_size = 1 << 30;
        assert_eq!(c.pool_bytes(), 1 << 30);
    }
}
