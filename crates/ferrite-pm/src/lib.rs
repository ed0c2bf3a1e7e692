//! Ferrite's persistent-memory layer.
//!
//! * [`Pool`]: a mapped file (or memory image) with a checksummed header, a root
//!   directory of named objects and a chunk table; it says honestly how durable it
//!   is ([`Durability`]).
//! * [`persist`]: cache-line write-back (clwb > clflushopt > clflush, chosen by
//!   CPUID), fences, non-temporal copies, per-thread cost counters and optional
//!   latency injection.
//! * [`Heap`]: the crash-consistent allocator (chunks claimed persistently, blocks
//!   recovered by tracing from the structure's roots).
//! * [`crash`]: the crash simulator's test driver, used by every persistent
//!   structure of Ferrite.
//! * [`clock`]: thread CPU time, for code that measures its own cost.

pub mod account;
pub mod anon;
pub mod barrier;
pub mod buf;
pub mod clock;
pub mod crash;
pub mod error;
pub mod heap;
pub mod layout;
pub mod msync;
pub mod persist;
pub mod pool;
pub mod prefetch;
pub mod rng;
pub mod sim;
pub mod temp;
pub mod tripwire;

pub use buf::AlignedBuf;
pub use crash::{
    explore, CrashConfig, CrashPoints, CrashReport, Journal, JournalHandle, Violation,
};
pub use error::{PmError, Result};
pub use heap::{Heap, HeapStats, Marker};
pub use persist::{FlushKind, PersistStats};
pub use pool::{
    Durability, ObjectId, ObjectInfo, OpenReport, PmSlice, PmWord, Pool, PoolOptions, Warmer,
};
pub use sim::store_u64;
pub use temp::TempPool;

/// A crash-test target runnable by `ferrite crash-test NAME`.
pub type CrashTarget = fn(&CrashConfig) -> Result<CrashReport>;
