//! Ferrite's three-tier buffer manager (thesis ch. 2, "Managing Non-Volatile
//! Memory in Database Systems"): pages live on SSD, PM and DRAM are caches, a
//! write-ahead log in PM makes commits durable, and an ARIES-style restart
//! brings the pages back. The design is in `docs/ARCHITECTURE.md` ("Buffer
//! manager"), the formats in `docs/FORMAT.md`, the guarantees in
//! `docs/DURABILITY.md`.
//!
//! * [`BufferConfig`], [`Design`] (the five designs of the thesis's
//!   evaluation as presets), [`Techniques`] (each technique a switch);
//! * [`BufferManager::open`] runs restart and returns a [`RestartReport`];
//! * data structures (`ferrite-btree`) work in [`Op`]s: [`Op::fix`] /
//!   [`Op::fix_child`] latch pages, [`PageGuard`] reads and writes their
//!   bytes, [`Op::log`] logs the changed lines; they register their callbacks
//!   in a [`Registry`];
//! * SSD page files behind an [`SsdBackend`]: [`DirectFiles`] (`O_DIRECT`),
//!   [`SimBackend`] (inside a simulated pool, for crash tests),
//!   [`FaultyBackend`] (fault injection), [`MemBackend`].
//!
//! Modules by concern: `config`, `latch`, `swip`, `frame` (DRAM frames),
//! `access` (page guards), `table` (page table), `pm` (PM frames), `ssd`,
//! `admission`, `evict` (replacement), `wal` (records, group commit), `txn`,
//! `op` (operations, allocation, catalog, commit/abort), `checkpoint`,
//! `restart`, `registry`, `stats`.

mod access;
mod admission;
mod checkpoint;
mod config;
mod error;
mod evict;
mod frame;
mod latch;
mod manager;
mod op;
pub mod page;
mod pm;
mod registry;
mod restart;
pub mod ssd;
mod stats;
mod swip;
mod table;
mod txn;
mod verify;
mod wal;

pub use access::PageGuard;
pub use config::{
    BufferConfig, Design, Techniques, DEFAULT_PAGE_SIZE, LINE, MAX_PAGE_SIZE, MINI_FRAME_BYTES,
    MINI_SLOTS, MIN_PAGE_SIZE,
};
pub use error::{BufferError, Result};
pub use frame::LineMask;
pub use latch::Mode;
pub use manager::{BufferManager, Hint, ReadGuard};
pub use op::{CatalogEntry, Ctx, Op};
pub use pm::{BUFFER_TYPE, REGION_VERSION};
pub use registry::{Compensation, NoStructures, Registry};
pub use restart::RestartReport;
pub use ssd::{
    DirectFiles, Fault, FaultControl, FaultyBackend, MemBackend, SimBackend, SsdBackend,
};
pub use stats::BufferStats;
pub use swip::{Swip, MAX_PID, SWIZZLED};
pub use txn::Txn;
pub use verify::verify_pm;
pub use wal::record::{UndoEntry, KIND_CHECKPOINT, KIND_COMMIT, KIND_END, KIND_UPDATE};
pub use wal::WAL_KIND;
