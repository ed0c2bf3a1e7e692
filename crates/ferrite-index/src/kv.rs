//! The ordered key-value interface every Ferrite index (and every benchmark
//! baseline) implements. Thread-safe by contract: every method takes `&self`.

/// Longest key accepted by Ferrite indexes, in bytes.
pub const MAX_KEY: usize = 1024;
/// Longest value accepted by Ferrite indexes, in bytes.
pub const MAX_VALUE: usize = 64 * 1024;

/// Errors of key-value operations.
#[derive(Debug, thiserror::Error)]
pub enum KvError {
    #[error("key of {len} bytes exceeds the limit of {max} bytes")]
    KeyTooLarge { len: usize, max: usize },
    #[error("value of {len} bytes exceeds the limit of {max} bytes")]
    ValueTooLarge { len: usize, max: usize },
    #[error(transparent)]
    Pm(#[from] ferrite_pm::PmError),
    #[error("{0}")]
    Backend(String),
}

pub type KvResult<T> = Result<T, KvError>;

/// Checks key and value sizes against limits (helper for implementations).
pub fn check_sizes(
    key: &[u8],
    value: Option<&[u8]>,
    max_key: usize,
    max_value: usize,
) -> KvResult<()> {
    if key.len() > max_key {
        return Err(KvError::KeyTooLarge {
            len: key.len(),
            max: max_key,
        });
    }
    if let Some(v) = value {
        if v.len() > max_value {
            return Err(KvError::ValueTooLarge {
                len: v.len(),
                max: max_value,
            });
        }
    }
    Ok(())
}

/// One operation of an atomic write batch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BatchOp {
    Put { key: Vec<u8>, value: Vec<u8> },
    Delete { key: Vec<u8> },
}

/// Several writes applied all-or-nothing (also across a crash).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct WriteBatch {
    pub ops: Vec<BatchOp>,
}

impl WriteBatch {
    pub fn new() -> Self {
        Self::default()
    }
    pub fn put(&mut self, key: &[u8], value: &[u8]) -> &mut Self {
        self.ops.push(BatchOp::Put {
            key: key.to_vec(),
            value: value.to_vec(),
        });
        self
    }
    pub fn delete(&mut self, key: &[u8]) -> &mut Self {
        self.ops.push(BatchOp::Delete { key: key.to_vec() });
        self
    }
    pub fn len(&self) -> usize {
        self.ops.len()
    }
    pub fn is_empty(&self) -> bool {
        self.ops.is_empty()
    }
}

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
pub trait OrderedKv: Send + Sync {
    /// Short name used by benchmarks (`ferrite`, `ferrite-dram`, `btreemap`, …).
    fn name(&self) -> &str;
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
