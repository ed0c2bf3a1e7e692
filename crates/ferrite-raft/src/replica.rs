//! Opening a replica's store of any kind, and what the service asks of it.

use std::path::{Path, PathBuf};

use ferrite_pm::{Pool, PoolOptions};

use crate::core::RaftCore;
use crate::error::Result;
use crate::map::btree::{BTreeMap, BTreeOptions};
use crate::map::list::{ListMap, ListOptions};
use crate::pm_store::{CommitPolicy, PmStore};
use crate::snapshot::SnapshotSink;
use crate::types::{LogId, SnapshotMeta, StoreKind, Vote};
use crate::wal::WalStore;

/// Name of the structure's object in a replica's pool.
pub const OBJECT: &str = "raft";

/// How to open a replica's store.
#[derive(Debug, Clone)]
pub struct StoreConfig {
    pub kind: StoreKind,
    /// The pool file (list, btree) or the directory (wal).
    pub path: PathBuf,
    /// Size of a pool created for a PM store.
    pub pool_size: u64,
    pub policy: CommitPolicy,
    pub list: ListOptions,
    pub btree: BTreeOptions,
    /// wal: log segments grow to about this size before the next starts
    /// (a purge deletes whole segments).
    pub wal_segment_bytes: u64,
}

impl StoreConfig {
    pub fn new(kind: StoreKind, path: impl Into<PathBuf>) -> StoreConfig {
        StoreConfig {
            kind,
            path: path.into(),
            pool_size: 1 << 30,
            policy: CommitPolicy::default(),
            list: ListOptions::default(),
            btree: BTreeOptions::default(),
            wal_segment_bytes: crate::wal::log::SEGMENT_BYTES,
        }
    }
}

/// A replica's store.
#[derive(Clone)]
pub enum Replica {
    List(PmStore<ListMap>),
    BTree(PmStore<BTreeMap>),
    Wal(WalStore),
}

/// Where a replica's log and state machine stand.
#[derive(Debug, Clone, Default)]
pub struct ReplicaStatus {
    pub last_log: Option<LogId>,
    pub purged: Option<LogId>,
    pub committed: Option<LogId>,
    pub applied: Option<LogId>,
    pub vote: Option<Vote>,
    /// Keys in the state machine.
    pub keys: u64,
}

/// How much room a replica's store occupies, and has.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Space {
    /// Bytes the store occupies: PM stores, the blocks of its structure
    /// (pages or nodes, dead records included until cleaned up); wal, its
    /// files.
    pub used: u64,
    /// Bytes of those that hold live data (list: records the index points
    /// at; btree: all of them; wal: the files).
    pub live: u64,
    /// Bytes the store can grow to (PM stores: the pool's heap; wal: none,
    /// it grows until the disk is full).
    pub capacity: Option<u64>,
    /// PM stores: heap bytes in chunks no structure has claimed yet.
    pub unclaimed: u64,
    /// PM stores: the heap's chunk size (a size class claims whole chunks).
    pub chunk: u64,
    /// PM stores: what holds dead space back for now (keys whose old
    /// versions wait for the log purge, snapshot reads in progress); zero
    /// when all dead space can be reclaimed now. See
    /// [`RaftCore::held_back`](crate::core::RaftCore::held_back).
    pub held_back: u64,
}

impl Space {
    /// The most the store should be allowed to fill: `pct` percent of the
    /// capacity, and never the last 32 chunks. The heap hands out blocks by
    /// size class, each class carving its own chunks, and threads cache
    /// blocks they freed: up to about a chunk per class in use plus the
    /// caches can be free yet unusable for another class. That slack does
    /// not grow with the pool; in a small pool it is most of the margin.
    pub fn write_limit(&self, pct: u8) -> Option<u64> {
        let cap = self.capacity?;
        let by_pct = cap / 100 * pct.min(100) as u64;
        Some(by_pct.min(cap.saturating_sub(32 * self.chunk)))
    }

    /// `used` as a share of `capacity` (0 without one).
    pub fn fraction(&self) -> f64 {
        match self.capacity {
            Some(c) if c > 0 => self.used as f64 / c as f64,
            _ => 0.0,
        }
    }
}

fn open_pool(path: &Path, size: u64) -> Result<Pool> {
    if path.exists() {
        Ok(Pool::open(path, &PoolOptions::default())?)
    } else {
        Ok(Pool::create(path, size, &PoolOptions::default())?)
    }
}

impl Replica {
    /// Opens the store `cfg` names, creating it when absent.
    pub fn open(cfg: &StoreConfig) -> Result<Replica> {
        match cfg.kind {
            StoreKind::List => {
                let pool = open_pool(&cfg.path, cfg.pool_size)?;
                let map = ListMap::open_or_create(&pool, OBJECT, &cfg.list)?;
                let d = pool.durability().name().to_string();
                Ok(Replica::List(PmStore::new(
                    RaftCore::open(map)?,
                    cfg.policy,
                    d,
                )))
            }
            StoreKind::BTree => {
                let pool = open_pool(&cfg.path, cfg.pool_size)?;
                let map = BTreeMap::open_or_create(&pool, OBJECT, &cfg.btree)?;
                let d = pool.durability().name().to_string();
                Ok(Replica::BTree(PmStore::new(
                    RaftCore::open(map)?,
                    cfg.policy,
                    d,
                )))
            }
            StoreKind::Wal => Ok(Replica::Wal(WalStore::open_with(
                &cfg.path,
                cfg.wal_segment_bytes,
            )?)),
        }
    }

    pub fn kind(&self) -> StoreKind {
        match self {
            Replica::List(_) => StoreKind::List,
            Replica::BTree(_) => StoreKind::BTree,
            Replica::Wal(_) => StoreKind::Wal,
        }
    }

    /// A probe that turns true once every handle of the store is gone (its
    /// pool or files closed): what a restart in the same process waits for.
    pub fn closed_probe(&self) -> Box<dyn Fn() -> bool + Send + Sync> {
        match self {
            Replica::List(s) => s.closed_probe(),
            Replica::BTree(s) => s.closed_probe(),
            Replica::Wal(s) => s.closed_probe(),
        }
    }

    /// What an acknowledged write survives, in a word.
    pub fn durability(&self) -> String {
        match self {
            Replica::List(s) => s.durability().to_string(),
            Replica::BTree(s) => s.durability().to_string(),
            Replica::Wal(_) => "disk-fdatasync".to_string(),
        }
    }

    /// Whether the store's index is whole (a list builds most of it in the
    /// background after an open; reads of versions wait for it).
    pub fn index_ready(&self) -> bool {
        match self {
            Replica::List(s) => s.with_map(crate::map::PmMap::index_ready),
            Replica::BTree(_) | Replica::Wal(_) => true,
        }
    }

    /// The value of `key` in the state machine (at the applied index).
    pub fn get(&self, key: &[u8]) -> Result<Option<Vec<u8>>> {
        match self {
            Replica::List(s) => s.get(key),
            Replica::BTree(s) => s.get(key),
            Replica::Wal(s) => Ok(s.get(key)),
        }
    }

    pub fn status(&self) -> ReplicaStatus {
        match self {
            Replica::List(s) => pm_status(s.status()),
            Replica::BTree(s) => pm_status(s.status()),
            Replica::Wal(s) => {
                let w = s.status();
                ReplicaStatus {
                    last_log: w.last_log,
                    purged: w.purged,
                    committed: w.committed,
                    applied: w.applied,
                    vote: w.vote,
                    keys: w.keys,
                }
            }
        }
    }

    /// How much room the store occupies (and has).
    pub fn space(&self) -> Space {
        match self {
            Replica::List(s) => s.space(),
            Replica::BTree(s) => s.space(),
            Replica::Wal(s) => {
                let b = s.disk_bytes();
                Space {
                    used: b,
                    live: b,
                    capacity: None,
                    unclaimed: 0,
                    chunk: 0,
                    held_back: 0,
                }
            }
        }
    }

    /// Space is short (or no longer): PM stores reclaim dead space more
    /// eagerly while it is (nothing for wal).
    pub fn set_space_pressure(&self, on: bool) {
        match self {
            Replica::List(s) => s.set_space_pressure(on),
            Replica::BTree(s) => s.set_space_pressure(on),
            Replica::Wal(_) => {}
        }
    }

    /// Runs up to `steps` clean-up steps of a PM store now; returns the
    /// bytes of the pool they gave back (wal: nothing to do).
    pub fn reclaim(&self, steps: usize) -> Result<u64> {
        match self {
            Replica::List(s) => s.reclaim(steps),
            Replica::BTree(s) => s.reclaim(steps),
            Replica::Wal(_) => Ok(0),
        }
    }

    /// Where a snapshot received from the leader goes.
    pub fn sink(&self, meta: &SnapshotMeta) -> Result<Box<dyn SnapshotSink>> {
        let at = meta.last_log_id.map_or(0, |l| l.index);
        match self {
            Replica::List(s) => s.sink(at),
            Replica::BTree(s) => s.sink(at),
            Replica::Wal(s) => s.sink(meta),
        }
    }
}

fn pm_status(c: crate::core::CoreStatus) -> ReplicaStatus {
    ReplicaStatus {
        last_log: c.last_log,
        purged: c.purged,
        committed: c.committed,
        applied: c.applied,
        vote: c.vote,
        keys: c.live_keys,
    }
}
