//! A B+-tree on Ferrite's three-tier buffer manager (`ferrite-buffer`): the
//! data structure of the thesis's chapter 2 evaluation, usable through the same
//! [`ferrite_kv::OrderedKv`] interface as the PM range index, with
//! multi-operation [`Transaction`]s and ARIES-style restart.
//!
//! ```no_run
//! use ferrite_btree::{Database, Design};
//! use ferrite_kv::OrderedKv;
//! # fn main() -> ferrite_kv::KvResult<()> {
//! let cfg = Design::ThreeTier.config(256 << 20, 1280 << 20, 6400 << 20);
//! let db = Database::open_files("/dev/shm/t.pool".as_ref(), Some("/tmp/t-ssd".as_ref()), cfg)?;
//! println!("{:?}", db.restart_report());
//! let t = db.tree("ycsb")?;
//! t.upsert(b"key", b"value")?;                  // durable when it returns
//! let tx = db.begin();
//! tx.insert(&t, b"a", b"1")?;
//! tx.remove(&t, b"key")?;
//! tx.commit()?;                                 // both or neither, also across a crash
//! db.close()?;                                  // clean: the next open redoes nothing
//! # Ok(()) }
//! ```
//!
//! Limits: keys up to `min(1024, page_size / 16)` bytes, values up to
//! `(page_size - 64 - max_key - 8) / 3 - 10 - max_key` bytes
//! ([`BTree::limits`](ferrite_kv::OrderedKv::limits); 1024 / 4062 for 16 KiB
//! pages); larger ones are refused with `KeyTooLarge` / `ValueTooLarge`.
//!
//! Modules: `node` (the page format), `tree` (descent, reads, writes,
//! structure changes, checks), `registry` (the buffer manager's callbacks:
//! swips and logical undo), `db` ([`Database`], [`Transaction`]), `kv`
//! ([`BTree`]: `OrderedKv`). The crash-test targets live in
//! `ferrite-crash` (`buffer`, `buffer-pm-direct`, `buffer-ssd-bm`).

mod db;
mod kv;
pub mod node;
mod registry;
mod tree;

pub use db::{Database, Transaction};
pub use ferrite_buffer::{BufferConfig, BufferStats, Design, RestartReport, Techniques};
pub use kv::BTree;
pub use tree::{Cursor, TreeShape};

use ferrite_buffer::BufferError;
use ferrite_kv::KvError;

/// A buffer-manager error as a [`KvError`]: corruption as `Corrupt`, the
/// rest as `Storage` (downcast to [`BufferError`] to tell them apart).
pub fn kv_err(e: BufferError) -> KvError {
    match e {
        BufferError::Corrupt { object, detail } => KvError::corrupt(object, detail),
        e if e.is_corrupt() => KvError::corrupt("buffer manager", e.to_string()),
        e => KvError::storage(e),
    }
}

/// Whether `e` is a write conflict (the key is locked by another transaction).
pub fn is_conflict(e: &KvError) -> bool {
    e.storage_error()
        .and_then(|s| s.downcast_ref::<BufferError>())
        .is_some_and(|b| matches!(b, BufferError::Conflict { .. }))
}
