//! Ferrite's ordered key-value indexes.

pub mod kv;
pub mod tree;

pub use kv::{BatchOp, KvCursor, KvError, KvResult, OrderedKv, WriteBatch, MAX_KEY, MAX_VALUE};
pub use tree::{FerriteIndex, IndexOptions, MemoryUsage, RebuildStats};

use ferrite_pm::CrashTarget;

/// Crash-test targets of this crate, for `ferrite crash-test`.
pub fn crash_targets() -> Vec<(&'static str, CrashTarget)> {
    Vec::new()
}
