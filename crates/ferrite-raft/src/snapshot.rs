//! Snapshot data as openraft carries it (`generic-snapshot-data`).
//!
//! On the sending side a snapshot is a *source*: a view of a store that
//! yields the state's `(key, value)` pairs in batches (for the PM stores, read
//! from the live structure at the snapshot's index while it is pinned; for the
//! WAL baseline, read from the snapshot file). The network streams the
//! batches; the receiving replica pushes them into a [`SnapshotSink`] of its
//! own store, which stages them (in PM pages not yet reachable, or in a file)
//! and yields the staged snapshot that `install_snapshot` switches to.

use std::any::Any;
use std::fmt;

use crate::error::{Result, StoreError};

/// A batch of the state's `(key, value)` pairs, in key order.
pub type Items = Vec<(Vec<u8>, Vec<u8>)>;

/// Yields a snapshot's pairs.
pub trait SnapshotSource: Send + 'static {
    /// The next pairs, about `max_bytes` of them (None: the end).
    fn next_batch(&mut self, max_bytes: usize) -> Result<Option<Items>>;
}

/// Receives a snapshot's pairs into a store.
pub trait SnapshotSink: Send + 'static {
    fn push(&mut self, items: Items) -> Result<()>;
    /// The staged snapshot, for `install_snapshot`.
    fn finish(self: Box<Self>) -> Result<SnapshotData>;
}

pub(crate) enum Inner {
    Source(Box<dyn SnapshotSource>),
    Items(Items),
    Staged(Box<dyn Any + Send>),
}

/// A snapshot's data. See the module documentation.
pub struct SnapshotData(pub(crate) Inner);

impl fmt::Debug for SnapshotData {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.0 {
            Inner::Source(_) => f.write_str("SnapshotData::Source"),
            Inner::Items(v) => write!(f, "SnapshotData::Items({})", v.len()),
            Inner::Staged(_) => f.write_str("SnapshotData::Staged"),
        }
    }
}

impl SnapshotData {
    /// Pairs held in memory.
    pub fn from_items(items: Items) -> SnapshotData {
        SnapshotData(Inner::Items(items))
    }

    pub(crate) fn source(s: impl SnapshotSource) -> SnapshotData {
        SnapshotData(Inner::Source(Box::new(s)))
    }

    pub(crate) fn staged(s: impl Any + Send) -> SnapshotData {
        SnapshotData(Inner::Staged(Box::new(s)))
    }

    /// The next batch of pairs (about `max_bytes`), None at the end. A staged
    /// snapshot cannot be read back.
    pub fn next_batch(&mut self, max_bytes: usize) -> Result<Option<Items>> {
        match &mut self.0 {
            Inner::Source(s) => s.next_batch(max_bytes),
            Inner::Items(v) => {
                if v.is_empty() {
                    return Ok(None);
                }
                let mut bytes = 0;
                let mut n = 0;
                while n < v.len() && (n == 0 || bytes < max_bytes) {
                    bytes += v[n].0.len() + v[n].1.len();
                    n += 1;
                }
                Ok(Some(v.drain(..n).collect()))
            }
            Inner::Staged(_) => Err(StoreError::Invalid(
                "a staged snapshot is installed, not read".into(),
            )),
        }
    }
}
