//! Ferrite's replicated state machine: a map of byte strings with `GET`,
//! `SET` (conditional: `NX`, `XX`, `IFEQ`) and `DEL`, replicated with
//! [openraft](https://docs.rs/openraft) (its 0.9 release line, storage-v2
//! traits), whose log and state live in persistent memory without a separate
//! write-ahead log — the design of the Raft-on-NVRAM thesis (see
//! `docs/ARCHITECTURE.md`, "Replicated service").
//!
//! | module | holds |
//! | --- | --- |
//! | [`map`] | the two PM structures: the hybrid list ([`map::list`]) and the B+-tree ([`map::btree`]) |
//! | [`keys`] | the multi-version layout: versions, log (rollback) records, metadata |
//! | [`core`] | the Raft operations on a map: append, truncate, apply, purge, vote, snapshots |
//! | [`pm_store`] | openraft's storage traits for the PM stores, with group commit |
//! | [`wal`] | the baseline: WAL and snapshot files on disk, state in DRAM |
//! | [`snapshot`] | snapshot data as openraft carries it (views, staged snapshots) |
//! | [`replica`] | opening a replica's store of any kind |
//! | [`types`] | the openraft type configuration, commands and replies |
//!
//! The crash-test targets `raft-list` and `raft-btree` are in `ferrite-crash`
//! (`ferrite crash-test raft-list`).
//!
//! Why openraft and not tikv's `raft`: openraft's log storage acknowledges
//! durability through a callback (`LogFlushed`) instead of requiring it on
//! return, which is exactly the thesis's group commit (append now, commit
//! every k modifications or t µs, acknowledge then); it drives storage,
//! snapshots and the network through traits with a conformance suite
//! (`openraft::testing::Suite`, run on every store here), and it has
//! read-index linearizable reads built in (`ensure_linearizable`). tikv's
//! `raft` leaves the ready-loop, persistence ordering and snapshot transfer
//! to the application, which is more code of our own to get wrong.

pub mod core;
pub mod error;
pub mod keys;
pub mod map;
pub mod pm_store;
pub mod replica;
pub mod snapshot;
pub mod types;
pub mod wal;
pub mod wire;

pub use error::{Result, StoreError};
pub use map::btree::{BTreeMap, BTreeOptions};
pub use map::list::{ListMap, ListOptions};
pub use map::{MapStats, PmMap};
pub use pm_store::{CommitPolicy, PmStore};
pub use replica::{Replica, ReplicaStatus, Space, StoreConfig};
pub use snapshot::{SnapshotData, SnapshotSink};
pub use types::{Command, Cond, Reply, StoreKind, TypeConfig};
pub use wal::WalStore;
