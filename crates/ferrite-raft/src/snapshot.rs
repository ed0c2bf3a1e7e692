//! Snapshot data as openraft carries it (`generic-snapshot-data`).
//!
//! On the sending side a snapshot is a *source*: a view of a store that
//! yields the state in chunks. The PM stores' chunks are [`Chunk::Records`]:
//! the map's own records of the newest versions at the snapshot's index, in
//! the PM list's record layout ([`crate::map::record`]), copied as they are
//! from the live structure while it is pinned (the list itself is the
//! snapshot: no item is encoded, and a receiving list copies the records
//! into its pages as they are). The WAL baseline's are [`Chunk::Items`],
//! `(key, value)` pairs read from its snapshot file. The network streams the
//! chunks; the receiving replica pushes them into a [`SnapshotSink`] of its
//! own store, which stages them (in PM pages not yet reachable, or in a file)
//! and yields the staged snapshot that `install_snapshot` switches to. Either
//! kind of chunk goes into either kind of store.

use std::any::Any;
use std::fmt;

use crate::error::{Result, StoreError};

/// A batch of the state's `(key, value)` pairs, in key order.
pub type Items = Vec<(Vec<u8>, Vec<u8>)>;

/// A piece of a snapshot stream.
#[derive(Debug)]
pub enum Chunk {
    /// `(key, value)` pairs.
    Items(Items),
    /// Versions as a PM store keeps them, in the record layout of
    /// [`crate::map::record`]: key `(user key, index)`, version value.
    Records(Vec<u8>),
}

/// The checked records of a snapshot stream at index `at`: each record's
/// user key and value; a malformed record, or one that is not a version at
/// or below `at` holding a value, is an error.
pub fn version_records(bytes: &[u8], at: u64) -> impl Iterator<Item = Result<(&[u8], &[u8])>> + '_ {
    crate::map::record::puts(bytes).map(move |r| {
        let (_, k, v) = r.map_err(StoreError::Invalid)?;
        let key = match crate::keys::parse_data_key(k) {
            Some((key, idx)) if idx <= at => key,
            _ => {
                return Err(StoreError::Invalid(format!(
                    "a snapshot record at index {at} whose key is not a version at or below it"
                )))
            }
        };
        match crate::keys::parse_version(v) {
            Ok(Some(v)) => Ok((key, v)),
            _ => Err(StoreError::Invalid(
                "a snapshot record whose value is not a version's value".into(),
            )),
        }
    })
}

/// The `(key, value)` pairs of a stream of version records of a snapshot at
/// index `at` (see [`version_records`]).
pub fn records_to_items(bytes: &[u8], at: u64) -> Result<Items> {
    version_records(bytes, at)
        .map(|r| r.map(|(k, v)| (k.to_vec(), v.to_vec())))
        .collect()
}

/// Yields a snapshot's pairs.
pub trait SnapshotSource: Send + 'static {
    /// The next pairs, about `max_bytes` of them (None: the end).
    fn next_batch(&mut self, max_bytes: usize) -> Result<Option<Items>>;
    /// The next chunk for the network, about `max_bytes` (None: the end).
    /// `spare` is a buffer a chunk of records may reuse (a sender hands
    /// back the chunks it wrote, so a snapshot of tens of MB does not fault
    /// in fresh pages for every chunk); it may be empty.
    fn next_chunk(&mut self, max_bytes: usize, _spare: Vec<u8>) -> Result<Option<Chunk>> {
        Ok(self.next_batch(max_bytes)?.map(Chunk::Items))
    }
}

/// Receives a snapshot's pairs into a store.
pub trait SnapshotSink: Send + 'static {
    /// The index of the snapshot being received.
    fn at(&self) -> u64;
    fn push(&mut self, items: Items) -> Result<()>;
    /// Receives a chunk of version records; returns how many it held.
    fn push_records(&mut self, bytes: &[u8]) -> Result<u64> {
        let items = records_to_items(bytes, self.at())?;
        let n = items.len() as u64;
        self.push(items)?;
        Ok(n)
    }
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

    /// The next chunk for the network (about `max_bytes`), None at the end;
    /// a chunk of records may reuse `spare` (see
    /// [`SnapshotSource::next_chunk`]).
    pub fn next_chunk(&mut self, max_bytes: usize, spare: Vec<u8>) -> Result<Option<Chunk>> {
        match &mut self.0 {
            Inner::Source(s) => s.next_chunk(max_bytes, spare),
            _ => Ok(self.next_batch(max_bytes)?.map(Chunk::Items)),
        }
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
