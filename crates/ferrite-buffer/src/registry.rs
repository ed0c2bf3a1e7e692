//! Per-data-structure callbacks (after LeanStore's `DTRegistry.hpp`): what
//! the buffer manager must know about pages whose layout it does not
//! interpret. A store is opened with one registry that serves every kind of
//! page and structure it holds.

use crate::error::Result;
use crate::manager::BufferManager;

/// Identifies the operation a compensation undoes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Compensation {
    pub txn: u64,
    /// The undone operation's sequence number in its transaction.
    pub seq: u64,
}

/// The callbacks of the data structures a store holds.
pub trait Registry: Send + Sync {
    /// Appends to `out` the byte offsets of every child swip in `page` (a page
    /// of kind `kind`, every line resident). Offsets must be 8-aligned and
    /// inside the page; the buffer manager checks and ignores others.
    fn swips(&self, kind: u8, page: &[u8], out: &mut Vec<usize>);

    /// Undoes one operation of structure `tree` from its logged `payload`
    /// (logical undo), by running the structure's own operations with
    /// [`crate::Ctx::Compensation`]`(comp)`, so that they are logged as a
    /// compensation record. Must be idempotent: the operation's effect may
    /// already be gone (a crash between the compensation and its record).
    fn undo(&self, bm: &BufferManager, comp: Compensation, tree: u32, payload: &[u8])
        -> Result<()>;
}

/// A registry for stores without structures (tests of the buffer manager).
pub struct NoStructures;

impl Registry for NoStructures {
    fn swips(&self, _: u8, _: &[u8], _: &mut Vec<usize>) {}
    fn undo(&self, _: &BufferManager, _: Compensation, tree: u32, _: &[u8]) -> Result<()> {
        Err(crate::BufferError::Invalid(format!(
            "no structure registered to undo an operation of structure {tree}"
        )))
    }
}
