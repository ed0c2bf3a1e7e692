//! Ferrite's ordered key-value indexes.
//!
//! [`FerriteIndex`] is the hybrid persistent range index (PM leaves, DRAM inner
//! nodes); [`kv`] is the interface every index and benchmark baseline implements.

pub mod arena;
pub mod crash;
pub mod inner;
pub mod leaf;
mod prefetch;
pub mod tree;
pub mod vlock;

/// The ordered key-value interface, re-exported from `ferrite-kv` so that
/// `ferrite_index::kv::…` paths keep working.
pub use ferrite_kv as kv;
pub use ferrite_kv::{BatchOp, KvCursor, KvError, KvResult, OrderedKv, WriteBatch};
pub use leaf::{MAX_KEY, MAX_VALUE};
pub use tree::{FerriteIndex, IndexOptions, MemoryUsage, RebuildStats, INDEX_TYPE};

use ferrite_pm::CrashTarget;

/// Crash-test targets of this crate, for `ferrite crash-test`.
pub fn crash_targets() -> Vec<(&'static str, CrashTarget)> {
    vec![("index", crash::index_target as CrashTarget)]
}
