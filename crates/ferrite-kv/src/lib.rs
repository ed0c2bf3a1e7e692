//! The ordered key-value interface every Ferrite index (and every benchmark
//! baseline) implements: [`OrderedKv`], its [`KvCursor`], atomic
//! [`WriteBatch`]es, the errors ([`KvError`]) and a crash-recovery [`oracle`]
//! that checks any implementation against a journal of acknowledged
//! operations.
//!
//! The crate is small on purpose and depends only on `std` and `thiserror`:
//! a persistent-memory index (`ferrite-index`), a buffer-manager B+-tree or a
//! replicated store implement the same trait without pulling in each other's
//! storage layers.
//!
//! # Errors: the decision
//!
//! [`KvError`] does **not** name `ferrite_pm::PmError` (nor any other storage
//! layer's error). A storage error travels as [`KvError::Storage`], a boxed
//! `std::error::Error + Send + Sync` that is displayed transparently (the text is
//! the storage error's own) and can be recovered by downcasting
//! ([`KvError::storage_error`]). The alternative, a dependency on `ferrite-pm`
//! with a `Pm(#[from] PmError)` variant, would make every other implementation
//! carry the PM layer. The price is that implementations convert explicitly
//! (`map_err(KvError::storage)`, or a helper of their own) instead of `?`
//! converting `PmError` implicitly.
//!
//! # One spelling of "corrupt"
//!
//! Persistent state that fails validation (a malformed entry, a bad pointer, a
//! cycle, a checksum mismatch of a committed log, …) is always reported as
//! [`KvError::Corrupt`] `{ object, detail }`, never as a storage error wrapping
//! the storage layer's own corruption variant and never as free text in
//! [`KvError::Backend`]. Implementations map their storage layer's corruption
//! errors to it at their boundary ([`KvError::is_corrupt`] tests for it).
//!
//! # Limits
//!
//! Every implementation has its own key and value size limits
//! ([`OrderedKv::limits`]); the default is [`MAX_KEY`] / [`MAX_VALUE`], which
//! the benchmark baselines share. Oversized keys or values are refused with
//! [`KvError::KeyTooLarge`] / [`KvError::ValueTooLarge`] ([`check_sizes`]).

mod batch;
mod error;
pub mod oracle;

pub use batch::{BatchOp, WriteBatch};
pub use error::{check_sizes, KvError, KvResult};

/// Default longest key, in bytes (see [`OrderedKv::limits`]).
pub const MAX_KEY: usize = 1024;
/// Default longest value, in bytes (see [`OrderedKv::limits`]).
pub const MAX_VALUE: usize = 64 * 1024;

/// A bidirectional cursor over keys in ascending byte order. A fresh cursor is
/// unpositioned; `seek` positions it at the first key >= the target.
pub trait KvCursor {
    /// Positions at the first key >= `key`; returns that entry, if any.
    fn seek(&mut self, key: &[u8]) -> KvResult<Option<(Vec<u8>, Vec<u8>)>>;
    /// Positions at the first key.
    fn first(&mut self) -> KvResult<Option<(Vec<u8>, Vec<u8>)>>;
    /// Positions at the last key.
    fn last(&mut self) -> KvResult<Option<(Vec<u8>, Vec<u8>)>>;
    /// Moves to the next key after the current position.
    fn next(&mut self) -> KvResult<Option<(Vec<u8>, Vec<u8>)>>;
    /// Moves to the previous key before the current position.
    fn prev(&mut self) -> KvResult<Option<(Vec<u8>, Vec<u8>)>>;
}

/// The ordered key-value interface. Keys and values are byte strings; keys
/// compare lexicographically (big-endian encoded integers sort numerically).
/// Thread-safe by contract: every method takes `&self`.
pub trait OrderedKv: Send + Sync {
    /// Short name used by benchmarks (`ferrite`, `ferrite-dram`, `btreemap`, …).
    fn name(&self) -> &str;
    /// The longest key and the longest value this implementation accepts, in
    /// bytes, as `(max_key, max_value)`; longer ones are refused with
    /// [`KvError::KeyTooLarge`] / [`KvError::ValueTooLarge`].
    fn limits(&self) -> (usize, usize) {
        (MAX_KEY, MAX_VALUE)
    }
    /// Copies the value of `key` into `out` (cleared first); false when absent.
    /// The allocation-free lookup the benchmarks use.
    fn get_into(&self, key: &[u8], out: &mut Vec<u8>) -> KvResult<bool>;
    /// The value of `key`.
    fn get(&self, key: &[u8]) -> KvResult<Option<Vec<u8>>> {
        let mut v = Vec::new();
        Ok(self.get_into(key, &mut v)?.then_some(v))
    }
    /// Inserts a new key; false (and no change) when it exists.
    fn insert(&self, key: &[u8], value: &[u8]) -> KvResult<bool>;
    /// Replaces the value of an existing key; false (and no change) when absent.
    fn update(&self, key: &[u8], value: &[u8]) -> KvResult<bool>;
    /// Inserts or replaces; true when the key was new.
    fn upsert(&self, key: &[u8], value: &[u8]) -> KvResult<bool>;
    /// Removes a key; false when absent.
    fn remove(&self, key: &[u8]) -> KvResult<bool>;
    /// Number of keys.
    fn count(&self) -> usize;
    /// Calls `f` for up to `n` entries with key >= `start`, ascending; returns
    /// how many were visited.
    fn scan(&self, start: &[u8], n: usize, f: &mut dyn FnMut(&[u8], &[u8])) -> KvResult<usize>;
    /// Applies every operation of `batch` atomically.
    fn write_batch(&self, batch: &WriteBatch) -> KvResult<()>;
    /// A cursor over a consistent view or over live data (documented per
    /// implementation).
    fn cursor(&self) -> KvResult<Box<dyn KvCursor + '_>>;
}
