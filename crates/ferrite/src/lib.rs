//! Ferrite as a library: durable ordered maps, volatile maps and Elf tables,
//! named, in one persistent-memory pool.
//!
//! Add `ferrite` to your `Cargo.toml`; everything starts at [`Db`].
//!
//! # Open, write, read
//!
//! A pool is one file. On a machine with persistent memory put it on a DAX
//! filesystem; anywhere else `/dev/shm` (tmpfs) emulates it (see
//! [Durability levels](#durability-levels)). Pools do not grow: create them
//! large, only the pages in use take memory.
//!
//! ```
//! # fn main() -> Result<(), ferrite::Error> {
//! # let path = format!("/dev/shm/ferrite-guide-{}.pool", std::process::id());
//! let db = ferrite::Db::open_or_create(&path, 256 << 20)?;
//! let users = db.map("users")?; // created on first use
//! users.insert("alice", "admin")?; // false if the key exists
//! users.upsert("bob", "viewer")?; // insert or replace
//! assert_eq!(users.get("alice")?, Some(b"admin".to_vec()));
//! // Zero-copy: the closure borrows the value in the pool.
//! let len = users.get_with("bob", |v| v.len())?;
//! assert_eq!(len, Some(6));
//! drop(users);
//! db.close()?; // the pool closes with its last handle
//! # std::fs::remove_file(&path).unwrap();
//! # Ok(())
//! # }
//! ```
//!
//! Keys and values are byte strings (`&str`, `&[u8]`, `Vec<u8>`, `[u8; N]`
//! all work); keys sort by byte, so encode integers big-endian. Keys are at
//! most [`MAX_KEY`] bytes and values at most [`MAX_VALUE`]; longer ones fail
//! with [`Error::KeyTooLarge`] / [`Error::ValueTooLarge`].
//!
//! # Iterate
//!
//! [`Map::range`] takes any Rust range of keys and returns a double-ended
//! iterator of `Result<(key, value)>`:
//!
//! ```
//! # fn main() -> Result<(), ferrite::Error> {
//! let db = ferrite::Db::volatile(64 << 20)?;
//! let events = db.map("events")?;
//! for t in 0u64..1000 {
//!     events.insert(t.to_be_bytes(), format!("event {t}"))?;
//! }
//! // The last three events before t = 500, newest first.
//! let recent: Vec<_> = events
//!     .range(..500u64.to_be_bytes())
//!     .rev()
//!     .take(3)
//!     .collect::<Result<_, _>>()?;
//! assert_eq!(recent[0].1, b"event 499");
//! assert_eq!(events.count_range(100u64.to_be_bytes()..200u64.to_be_bytes())?, 100);
//! # Ok(())
//! # }
//! ```
//!
//! # Atomic updates, batches, transactions
//!
//! * [`Map::compare_and_swap`] and [`Map::update_with`] (read-modify-write)
//!   are atomic with respect to every other writer.
//! * [`Map::apply`] applies a [`Batch`] of puts and removes all-or-nothing.
//! * [`Map::transaction`] reads and writes several keys; [`Transaction::commit`]
//!   makes its writes visible and durable at once.
//!
//! ```
//! # fn main() -> Result<(), ferrite::Error> {
//! let db = ferrite::Db::volatile(64 << 20)?;
//! let stock = db.map("stock")?;
//! stock.upsert("apples", 10u32.to_be_bytes())?;
//! let n = |v: &[u8]| u32::from_be_bytes(v.try_into().unwrap());
//!
//! let mut tx = stock.transaction()?;
//! let apples = n(&tx.get("apples")?.unwrap());
//! tx.upsert("apples", (apples - 3).to_be_bytes())?;
//! tx.upsert("basket", 3u32.to_be_bytes())?;
//! tx.commit()?; // both or neither, for readers and across a crash
//!
//! assert_eq!(n(&stock.get("apples")?.unwrap()), 7);
//! # Ok(())
//! # }
//! ```
//!
//! **Isolation.** Reads never wait, and every read sees committed data: a
//! batch or transaction whole or not at all. Transactions are
//! **serializable**: one holds its map's writer gate for its whole life (every
//! other writer of that map waits; readers do not), buffers its writes, and
//! commits them as one write batch. A transaction covers one map. Plain
//! writes of different keys run in parallel. A range iterator reads live data
//! a chunk at a time (see [`Range`]); iterate inside a transaction for one
//! consistent view of a large range.
//!
//! # Crash safety
//!
//! Every write is durable when its call returns; there is nothing to flush.
//! After a crash (`kill -9`, or power loss on a device that survives it),
//! reopening the pool finds every acknowledged write, and the write that was
//! in progress either complete or absent: never half a value, half a batch or
//! half a transaction. Recovery runs when a map is opened. This is tested by
//! cutting power at every persist barrier of a workload in a crash simulator
//! (`ferrite crash-test txn` for transactions, `index` for the map itself)
//! and by killing real processes.
//!
//! [`Db::close`] closes the pool and releases its lock once no other handle
//! of it is alive; it and [`Map::flush`] also report the one failure a write
//! cannot always report itself: a write-back that failed in msync mode.
//!
//! # Durability levels
//!
//! What an acknowledged write survives depends on where the pool lives
//! ([`Db::durability`], [`Durability::describe`]):
//!
//! | collection | where | survives |
//! | --- | --- | --- |
//! | [`Db::map`], [`Db::elf`] | pool on a DAX filesystem (real PM) | power loss ([`Durability::Pm`]) |
//! | [`Db::map`], [`Db::elf`] | pool in `/dev/shm` | a process crash, not power loss ([`Durability::EmulatedShm`]) |
//! | [`Db::map`], [`Db::elf`] | pool on an ordinary filesystem | a process crash, not power loss ([`Durability::EmulatedFile`]) |
//! | [`Db::volatile_map`], anything of [`Db::volatile`] | DRAM | nothing: gone with the process ([`Durability::Volatile`]) |
//!
//! # Concurrency and processes
//!
//! [`Db`], [`Map`] and [`ElfTable`] are `Send + Sync` handles: clone them
//! into threads. Plain writes of a map take no lock of the facade (they
//! announce themselves to its writer gate, see [`writer_barriers`]); a
//! compare-and-swap, `update_with` or transaction waits for the plain writes
//! it must exclude. One process at a time may open a pool; a second gets
//! [`Error::InUse`] (the pool file is locked).
//!
//! # Errors
//!
//! Every failure is an [`Error`] variant (`#[non_exhaustive]`): a full pool,
//! an oversized key or value, a name that belongs to another kind of object,
//! a pool from a newer Ferrite, a pool in use, a corrupt or foreign file.

mod db;
mod elf;
mod error;
mod gate;
mod map;
mod range;
mod txn;

pub use db::{Db, VOLATILE_MAP_CAPACITY};
pub use elf::{ElfQuery, ElfTable, ELF_MAX_VALUE};
pub use error::{Error, Result};
pub use ferrite_pm::Durability;
pub use map::{Batch, Conflict, Map};
pub use range::Range;
pub use txn::{Transaction, TxRange};

/// How this process's writer gates order a plain write against
/// compare-and-swap, `update_with` and transactions (see the crate guide's
/// concurrency section): `"membarrier"` (Linux's `membarrier`: a plain write
/// pays no locked instruction) or `"fences"` (a full fence per write; set
/// `FERRITE_FENCES=1` to choose it). Decided when the first map opens (or
/// the first index pins), for the whole process.
///
/// ```
/// let _db = ferrite::Db::volatile(16 << 20)?;
/// assert!(["membarrier", "fences"].contains(&ferrite::writer_barriers()));
/// # Ok::<(), ferrite::Error>(())
/// ```
pub fn writer_barriers() -> &'static str {
    gate::barriers()
}

/// The longest key a map accepts, in bytes.
///
/// ```
/// assert_eq!(ferrite::MAX_KEY, 1024);
/// ```
pub const MAX_KEY: usize = ferrite_index::MAX_KEY;

/// The longest value a map accepts, in bytes.
///
/// ```
/// assert_eq!(ferrite::MAX_VALUE, 64 * 1024);
/// ```
pub const MAX_VALUE: usize = ferrite_index::MAX_VALUE;
