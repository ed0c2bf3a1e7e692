//! One registry of Ferrite's structure types. Each entry says how to verify an
//! object of that type in a pool (`ferrite check`), which crash-test targets
//! exercise it and the tripwire each must catch (`ferrite crash-test`, the
//! crash suite), and how to open it as an ordered key-value store (benchmarks,
//! the PiBench adapter). Adding a structure is one entry here.
//!
//! This is a tools crate: it depends on every library crate and on the crash
//! targets; no library depends on it.

mod facade;

pub use facade::FacadeKv;

use ferrite_crash as crash;
use ferrite_kv::{KvResult, OrderedKv};
use ferrite_pm::tripwire::Tripwire;
use ferrite_pm::{CrashConfig, CrashReport, Pool};

/// Verifies object `name` of a pool (the pool is a private copy: recovery may
/// write to it). `Ok` holds a one-line verdict.
pub type VerifyFn = fn(&Pool, &str) -> Result<String, String>;

/// A crash-test target.
#[derive(Clone, Copy)]
pub struct CrashTest {
    /// `ferrite crash-test NAME`.
    pub name: &'static str,
    pub run: fn(&CrashConfig) -> ferrite_pm::Result<CrashReport>,
    /// Its default configuration.
    pub config: fn() -> CrashConfig,
    /// The deliberate breakage this target must catch (violations > 0).
    pub tripwire: Tripwire,
}

/// Where an ordered key-value variant lives.
pub struct KvSpec<'a> {
    /// The pool for persistent variants (volatile ones make their own memory).
    pub pool: Option<&'a Pool>,
    /// Object name in the pool.
    pub name: &'a str,
    /// Bytes a volatile variant may use.
    pub capacity: u64,
}

/// Bytes a structure uses (for VLDB'22 Table 3-style reports).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct MemoryUse {
    pub dram_bytes: u64,
    pub pm_bytes: u64,
}

/// An opened key-value variant and what a harness reports about it.
pub struct Opened {
    pub kv: std::sync::Arc<dyn OrderedKv>,
    /// Its DRAM and PM bytes now.
    pub memory: Box<dyn Fn() -> MemoryUse + Send + Sync>,
    /// What opening found (e.g. what recovery rebuilt), for the report.
    pub notes: Vec<String>,
}

/// A way to open a structure as an [`OrderedKv`].
#[derive(Clone, Copy)]
pub struct KvVariant {
    /// The name benchmarks and adapters use (`ferrite`, `ferrite-dram`, ...).
    pub name: &'static str,
    /// What it is and what its completed operations survive.
    pub about: &'static str,
    /// Whether it needs a pool (persistent) or makes its own memory.
    pub needs_pool: bool,
    pub open: fn(&KvSpec<'_>) -> KvResult<Opened>,
}

/// A structure type.
pub struct Structure {
    /// Short name.
    pub name: &'static str,
    /// Type name of its objects in a pool's root directory (None: not an
    /// object, e.g. the pool's own metadata).
    pub object_type: Option<&'static str>,
    pub about: &'static str,
    pub verify: Option<VerifyFn>,
    pub crash_tests: &'static [CrashTest],
    pub kv: &'static [KvVariant],
}

fn default_config() -> CrashConfig {
    CrashConfig::default()
}

fn e<E: std::fmt::Display>(x: E) -> String {
    x.to_string()
}

// ----- verification of each object type ---------------------------------------------

fn verify_slot_table(pool: &Pool, name: &str) -> Result<String, String> {
    let t = ferrite_testkit::SlotTable::open_or_create(pool, name, 1).map_err(e)?;
    for i in 0..t.slots() {
        t.read(i).map_err(e)?;
    }
    Ok(format!("ok: {} live blocks", t.open_stats.live_blocks))
}

fn verify_elf(pool: &Pool, name: &str) -> Result<String, String> {
    let s = ferrite_elf::ElfStore::open(pool, name, ferrite_elf::Variant::Pm, true).map_err(e)?;
    s.current().elf.verify().map_err(e)?;
    Ok(format!(
        "ok: {} rows, checksum and structure verified",
        s.rows()
    ))
}

fn verify_index(pool: &Pool, name: &str) -> Result<String, String> {
    let ix = ferrite_index::FerriteIndex::open_or_create(pool, name).map_err(e)?;
    ix.check_structure()?;
    let mut n = 0usize;
    ix.scan(&[], usize::MAX, &mut |_, _| n += 1).map_err(e)?;
    if n != ix.count() {
        return Err(format!(
            "a scan sees {n} keys, the count says {}",
            ix.count()
        ));
    }
    Ok(format!(
        "ok: {n} keys, leaf chain sorted and consistent, every entry readable"
    ))
}

fn verify_log(pool: &Pool, name: &str) -> Result<String, String> {
    use ferrite_pmio::log::Log;
    let l = ferrite_pmio::log::PmLog::open(pool, name).map_err(e)?;
    let n = l.entries().map_err(e)?.len();
    Ok(format!("ok: {n} entries recovered and read back"))
}

fn verify_pages(pool: &Pool, name: &str) -> Result<String, String> {
    let s = ferrite_pmio::page::PageStore::open(pool, name).map_err(e)?;
    let mut buf = vec![0u8; s.page_size()];
    let mut present = 0;
    for pid in s.page_ids() {
        if s.read(pid, &mut buf).map_err(e)? {
            present += 1;
        }
    }
    Ok(format!(
        "ok: {present} pages of {} bytes recovered and read back ({} slots)",
        s.page_size(),
        s.capacity()
    ))
}

fn verify_inplace(pool: &Pool, name: &str) -> Result<String, String> {
    let a = ferrite_pmio::inplace::InplaceArray::open(pool, name).map_err(e)?;
    let mut out = vec![0u8; a.value_size()];
    for i in 0..a.len() {
        a.read(i, &mut out).map_err(e)?;
    }
    Ok(format!(
        "ok: {} values of {} bytes recovered and read back",
        a.len(),
        a.value_size()
    ))
}

fn verify_raft<M: ferrite_raft::PmMap>(map: M) -> Result<String, String> {
    let n = map.check()?;
    let stats = map.stats();
    let core = ferrite_raft::core::RaftCore::open(map).map_err(e)?;
    let st = core.status();
    let idx =
        |l: Option<ferrite_raft::types::LogId>| l.map_or("-".to_string(), |l| l.index.to_string());
    Ok(format!(
        "ok: {n} entries in {} PM bytes; log after {} up to {}, applied {}, {} keys, vote {}",
        stats.pm_bytes,
        idx(st.purged),
        idx(st.last_log),
        idx(st.applied),
        st.live_keys,
        st.vote.map_or("-".to_string(), |v| v.to_string())
    ))
}

fn verify_raft_list(pool: &Pool, name: &str) -> Result<String, String> {
    verify_raft(ferrite_raft::ListMap::open_or_create(pool, name, &Default::default()).map_err(e)?)
}

fn verify_raft_btree(pool: &Pool, name: &str) -> Result<String, String> {
    verify_raft(ferrite_raft::BTreeMap::open_or_create(pool, name, &Default::default()).map_err(e)?)
}

// ----- key-value variants ---------------------------------------------------------------

fn open_index(s: &KvSpec<'_>) -> KvResult<Opened> {
    let pool = s
        .pool
        .ok_or_else(|| ferrite_kv::KvError::Backend("the persistent index needs a pool".into()))?;
    let idx = std::sync::Arc::new(ferrite_index::FerriteIndex::open_or_create(pool, s.name)?);
    let r = idx.rebuild_stats();
    let notes = if r.keys > 0 {
        vec![format!(
            "ferrite: opened {} keys in {} leaves, inner nodes rebuilt in {:.1} ms",
            r.keys,
            r.leaves,
            r.duration.as_secs_f64() * 1e3
        )]
    } else {
        Vec::new()
    };
    let i2 = idx.clone();
    Ok(Opened {
        kv: idx,
        memory: Box::new(move || {
            let m = i2.memory_usage();
            MemoryUse {
                dram_bytes: m.dram_bytes,
                pm_bytes: m.pm_bytes,
            }
        }),
        notes,
    })
}

fn open_index_dram(s: &KvSpec<'_>) -> KvResult<Opened> {
    let idx = std::sync::Arc::new(ferrite_index::FerriteIndex::volatile(s.capacity)?);
    let i2 = idx.clone();
    Ok(Opened {
        kv: idx,
        // Leaves live in DRAM too in volatile mode.
        memory: Box::new(move || {
            let m = i2.memory_usage();
            MemoryUse {
                dram_bytes: m.dram_bytes + m.pm_bytes,
                pm_bytes: 0,
            }
        }),
        notes: Vec::new(),
    })
}

fn verify_buffer(pool: &Pool, name: &str) -> Result<String, String> {
    ferrite_buffer::verify_pm(pool, name).map_err(e)
}

/// Removes a temporary directory of SSD page files when dropped.
struct TempDir(std::path::PathBuf);

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A buffer-manager B-tree of `design` in the harness's pool: PM frames take
/// half the pool, DRAM a fifth of that (the thesis's 2 : 10 GB), SSD page
/// files (in a temporary directory on the disk under `$TMPDIR`, removed
/// afterwards) five times the PM tier.
fn open_btree(s: &KvSpec<'_>, design: ferrite_buffer::Design) -> KvResult<Opened> {
    use ferrite_buffer::Design;
    let pool = s
        .pool
        .ok_or_else(|| ferrite_kv::KvError::Backend("the buffer manager needs a pool".into()))?;
    let pm = pool.size() / 2;
    let (dram, ssd) = match design {
        Design::MainMemory => (pool.size(), 4 * pool.size()),
        _ => (pm / 5, 5 * pm),
    };
    let mut cfg = design.config(dram.max(1 << 20), pm, ssd);
    cfg.wal_segment_bytes = 8 << 20;
    let dir = std::env::temp_dir().join(format!("ferrite-{}-{}-ssd", s.name, std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let guard = TempDir(dir.clone());
    let backend: Option<std::sync::Arc<dyn ferrite_buffer::SsdBackend>> = if cfg.ssd_pages > 0 {
        let d = ferrite_buffer::DirectFiles::open(&dir, cfg.page_size)
            .map_err(|x| ferrite_kv::KvError::Backend(format!("{}: {x}", dir.display())))?;
        Some(std::sync::Arc::new(d))
    } else {
        None
    };
    let db = ferrite_btree::Database::open(pool, s.name, backend, cfg)?;
    let tree = db.tree("kv")?;
    let r = db.restart_report().clone();
    let mut notes = db.buffer().describe();
    if !r.created {
        notes.push(format!(
            "restart: page table from {} PM frames in {:.1} ms, {} records redone in {:.1} ms, {} losers undone",
            r.pm_frames_scanned,
            r.page_table_rebuild.as_secs_f64() * 1e3,
            r.records_redone,
            r.redo.as_secs_f64() * 1e3,
            r.losers
        ));
    }
    let bm = db.buffer().clone();
    Ok(Opened {
        kv: std::sync::Arc::new(tree),
        memory: Box::new(move || {
            let _keep = &guard;
            let st = bm.stats();
            let c = bm.config();
            MemoryUse {
                dram_bytes: st.dram_used_bytes,
                pm_bytes: st.pm_frames_used * (c.page_size as u64 + 64),
            }
        }),
        notes,
    })
}

fn open_btree_three_tier(s: &KvSpec<'_>) -> KvResult<Opened> {
    open_btree(s, ferrite_buffer::Design::ThreeTier)
}
fn open_btree_main_memory(s: &KvSpec<'_>) -> KvResult<Opened> {
    open_btree(s, ferrite_buffer::Design::MainMemory)
}
fn open_btree_pm_direct(s: &KvSpec<'_>) -> KvResult<Opened> {
    open_btree(s, ferrite_buffer::Design::PmDirect)
}
fn open_btree_basic_pm(s: &KvSpec<'_>) -> KvResult<Opened> {
    open_btree(s, ferrite_buffer::Design::BasicPm)
}
fn open_btree_ssd_bm(s: &KvSpec<'_>) -> KvResult<Opened> {
    open_btree(s, ferrite_buffer::Design::SsdBm)
}

fn open_facade(s: &KvSpec<'_>) -> KvResult<Opened> {
    let pool = s
        .pool
        .ok_or_else(|| ferrite_kv::KvError::Backend("a facade map needs a pool".into()))?;
    let map = ferrite::Db::from_pool(pool.clone())
        .map(s.name)
        .map_err(|e| ferrite_kv::KvError::Backend(e.to_string()))?;
    let m2 = map.clone();
    Ok(Opened {
        kv: std::sync::Arc::new(FacadeKv(map)),
        memory: Box::new(move || {
            let m = m2.index().memory_usage();
            MemoryUse {
                dram_bytes: m.dram_bytes,
                pm_bytes: m.pm_bytes,
            }
        }),
        notes: Vec::new(),
    })
}

// ----- the registry ----------------------------------------------------------------------

static STRUCTURES: &[Structure] = &[
    Structure {
        name: "pool",
        object_type: None,
        about: "the pool's header, root directory, chunk table and allocator",
        verify: None,
        crash_tests: &[
            CrashTest {
                name: "allocator",
                run: crash::pm::allocator_target,
                config: crash::pm::allocator_default_config,
                tripwire: Tripwire::HeapNoLimbo,
            },
            CrashTest {
                name: "directory",
                run: crash::pm::directory_target,
                config: default_config,
                tripwire: Tripwire::DirectoryStateFirst,
            },
        ],
        kv: &[],
    },
    Structure {
        name: "slot-table",
        object_type: Some(ferrite_testkit::SLOT_TABLE_TYPE),
        about: "test structure exercising the allocator (slots of published blocks)",
        verify: Some(verify_slot_table),
        crash_tests: &[],
        kv: &[],
    },
    Structure {
        name: "log",
        object_type: Some(ferrite_pmio::log::LOG_TYPE),
        about: "failure-atomic PM log (classic, header, dancing, RAWL, PopLog)",
        verify: Some(verify_log),
        crash_tests: &[CrashTest {
            name: "log",
            run: crash::pmio::log_target,
            config: default_config,
            tripwire: Tripwire::LogSkipPayloadFlush,
        }],
        kv: &[],
    },
    Structure {
        name: "page-store",
        object_type: Some(ferrite_pmio::page::PAGE_STORE_TYPE),
        about: "failure-atomic page propagation (copy-on-write with pvn, micro log)",
        verify: Some(verify_pages),
        crash_tests: &[CrashTest {
            name: "page",
            run: crash::pmio::page_target,
            config: default_config,
            tripwire: Tripwire::PageCowNoDataFence,
        }],
        kv: &[],
    },
    Structure {
        name: "inplace",
        object_type: Some(ferrite_pmio::inplace::INPLACE_TYPE),
        about: "failure-atomic in-place updates (CoW, log-based, FAM)",
        verify: Some(verify_inplace),
        crash_tests: &[CrashTest {
            name: "inplace",
            run: crash::pmio::inplace_target,
            config: default_config,
            tripwire: Tripwire::InplaceSkipFlush,
        }],
        kv: &[],
    },
    Structure {
        name: "elf",
        object_type: Some(ferrite_elf::layout::OBJECT_TYPE),
        about: "Elf multi-dimensional index with a crash-safe delta",
        verify: Some(verify_elf),
        crash_tests: &[CrashTest {
            name: "elf",
            run: crash::elf::elf_target,
            config: default_config,
            tripwire: Tripwire::ElfPublishBeforeFence,
        }],
        kv: &[],
    },
    Structure {
        name: "index",
        object_type: Some(ferrite_index::INDEX_TYPE),
        about: "hybrid DRAM/PM range index (PM leaves, DRAM inner nodes)",
        verify: Some(verify_index),
        crash_tests: &[
            CrashTest {
                name: "index",
                run: crash::index::index_target,
                config: default_config,
                tripwire: Tripwire::IndexSkipInsertFlush,
            },
            CrashTest {
                name: "index-long",
                run: crash::index::long_target,
                config: default_config,
                tripwire: Tripwire::IndexLongHeaderFirst,
            },
            CrashTest {
                name: "index-batch-race",
                run: crash::index_race::target,
                config: default_config,
                tripwire: Tripwire::IndexBatchNoWait,
            },
        ],
        kv: &[
            KvVariant {
                name: "ferrite",
                about: "Ferrite's persistent index in a pool",
                needs_pool: true,
                open: open_index,
            },
            KvVariant {
                name: "ferrite-dram",
                about: "Ferrite's index in DRAM, no write-back or fences",
                needs_pool: false,
                open: open_index_dram,
            },
        ],
    },
    Structure {
        name: "raft-list",
        object_type: Some(ferrite_raft::map::list::LIST_TYPE),
        about: "replicated service, hybrid store: the Raft log and multi-version state in an append-only PM list with a DRAM index",
        verify: Some(verify_raft_list),
        crash_tests: &[CrashTest {
            name: "raft-list",
            run: crash::raft::raft_list_target,
            config: default_config,
            tripwire: Tripwire::RaftListCleanBeforeCommit,
        }],
        kv: &[],
    },
    Structure {
        name: "raft-btree",
        object_type: Some(ferrite_raft::map::btree::BTREE_TYPE),
        about: "replicated service, B+-tree store: the Raft log and multi-version state in a copy-on-write PM B+-tree",
        verify: Some(verify_raft_btree),
        crash_tests: &[CrashTest {
            name: "raft-btree",
            run: crash::raft::raft_btree_target,
            config: default_config,
            tripwire: Tripwire::RaftBtreeSkipFlush,
        }],
        kv: &[],
    },
    Structure {
        name: "buffer",
        object_type: Some(ferrite_buffer::BUFFER_TYPE),
        about: "three-tier DRAM/PM/SSD buffer manager with a B+-tree, WAL in PM, ARIES restart",
        verify: Some(verify_buffer),
        crash_tests: &[
            CrashTest {
                name: "buffer",
                run: crash::buffer::buffer_target,
                config: default_config,
                tripwire: Tripwire::BufferSkipUndo,
            },
            CrashTest {
                name: "buffer-pm-direct",
                run: crash::buffer::pm_direct_target,
                config: default_config,
                tripwire: Tripwire::BufferSkipWalRule,
            },
            CrashTest {
                name: "buffer-ssd-bm",
                run: crash::buffer::ssd_bm_target,
                config: default_config,
                tripwire: Tripwire::BufferSkipCommitForce,
            },
        ],
        kv: &[
            KvVariant {
                name: "btree-three-tier",
                about: "B+-tree on the three-tier buffer manager (DRAM, PM, SSD; every technique)",
                needs_pool: true,
                open: open_btree_three_tier,
            },
            KvVariant {
                name: "btree-main-memory",
                about: "the same B+-tree with every page in DRAM (SSD for checkpoints)",
                needs_pool: true,
                open: open_btree_main_memory,
            },
            KvVariant {
                name: "btree-pm-direct",
                about: "the same B+-tree updated in place in PM after the log force",
                needs_pool: true,
                open: open_btree_pm_direct,
            },
            KvVariant {
                name: "btree-basic-pm",
                about: "the same B+-tree on a page-grained DRAM/PM buffer manager over SSD",
                needs_pool: true,
                open: open_btree_basic_pm,
            },
            KvVariant {
                name: "btree-ssd-bm",
                about: "the same B+-tree on a DRAM/SSD buffer manager",
                needs_pool: true,
                open: open_btree_ssd_bm,
            },
        ],
    },
    Structure {
        name: "map",
        // Its objects are index objects (checked as such).
        object_type: None,
        about: "the ferrite facade's named map: the index behind a writer gate, with compare-and-swap and transactions",
        verify: None,
        crash_tests: &[CrashTest {
            name: "txn",
            run: crash::txn::txn_target,
            config: default_config,
            tripwire: Tripwire::TxnUnbatchedCommit,
        }],
        kv: &[KvVariant {
            name: "ferrite-facade",
            about: "the ferrite facade's Map (Db::map) over the persistent index",
            needs_pool: true,
            open: open_facade,
        }],
    },
];

/// Every structure type this build knows.
pub fn structures() -> &'static [Structure] {
    STRUCTURES
}

/// The structure whose objects have directory type `object_type`.
pub fn by_object_type(object_type: &str) -> Option<&'static Structure> {
    STRUCTURES
        .iter()
        .find(|s| s.object_type == Some(object_type))
}

/// Every crash-test target, in registry order.
pub fn crash_tests() -> impl Iterator<Item = &'static CrashTest> {
    STRUCTURES.iter().flat_map(|s| s.crash_tests.iter())
}

/// The crash-test target called `name`.
pub fn crash_test(name: &str) -> Option<&'static CrashTest> {
    crash_tests().find(|t| t.name == name)
}

/// Every key-value variant.
pub fn kv_variants() -> impl Iterator<Item = &'static KvVariant> {
    STRUCTURES.iter().flat_map(|s| s.kv.iter())
}

/// The key-value variant called `name`.
pub fn kv_variant(name: &str) -> Option<&'static KvVariant> {
    kv_variants().find(|v| v.name == name)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_unique() {
        let mut seen = std::collections::HashSet::new();
        for t in crash_tests() {
            assert!(seen.insert(t.name), "crash test {} twice", t.name);
        }
        let mut seen = std::collections::HashSet::new();
        for v in kv_variants() {
            assert!(seen.insert(v.name), "kv variant {} twice", v.name);
        }
        let mut seen = std::collections::HashSet::new();
        for s in structures() {
            if let Some(t) = s.object_type {
                assert!(seen.insert(t), "object type {t} twice");
            }
        }
    }

    #[test]
    fn every_object_type_can_be_verified() {
        for s in structures() {
            if s.object_type.is_some() {
                assert!(s.verify.is_some(), "{} objects cannot be checked", s.name);
            }
        }
    }
}
