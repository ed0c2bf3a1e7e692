//! Ferrite's ordered key-value indexes.
//!
//! [`FerriteIndex`] is the hybrid persistent range index (PM leaves, DRAM inner
//! nodes); [`kv`] (the `ferrite-kv` crate, re-exported) is the interface every
//! index and benchmark baseline implements.
//!
//! Modules (all private; what users need is re-exported here):
//!
//! | module | holds |
//! | --- | --- |
//! | `tree` | the index: open, read and write paths, structure changes, batches, recovery, reclamation, checks |
//! | `leaf` | the PM leaf layout and the entries in its slots (the on-PM format) |
//! | `inner` | DRAM inner nodes under optimistic lock coupling |
//! | `vlock` | the version-lock protocol of leaves and inner nodes |
//! | `arena` | huge-page slabs for inner nodes |
//! | `ebr` | epoch-based reclamation with a pin that costs no locked instruction |
//! | `error` | how PM-layer errors and corruption become `KvError`s |

mod arena;
#[doc(hidden)]
pub mod ebr;
mod error;
mod inner;
mod leaf;
mod prefetch;
mod tree;
#[doc(hidden)]
pub mod vlock;

/// The ordered key-value interface, re-exported from `ferrite-kv` so that
/// `ferrite_index::kv::…` paths keep working.
pub use ferrite_kv as kv;
pub use ferrite_kv::{BatchOp, KvCursor, KvError, KvResult, OrderedKv, WriteBatch};
/// The key fingerprint is part of the format (`docs/FORMAT.md`); tests that need
/// keys of equal fingerprints use it.
pub use leaf::fingerprint;
pub use leaf::{FORMAT_TAG, FORMAT_TAG_V1, FORMAT_VERSION, MAX_KEY, MAX_VALUE};
pub use tree::{
    BatchOpHook, FerriteIndex, IndexOptions, MemoryUsage, RebuildStats, SettleHook, INDEX_TYPE,
};
