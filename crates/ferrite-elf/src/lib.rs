//! Elf: a multi-dimensional index (a prefix tree over columns, linearized into
//! one word array) on persistent memory, with selective DRAM caching, parallel
//! queries, and inserts through a crash-safe delta merged in the background.
//!
//! * [`build`]: bulk build from column slices.
//! * [`Elf`]: queries (exact, range, partial match) over a DRAM or PM array, in
//!   the papers' variants ([`Variant`]).
//! * [`ElfStore`]: the Elf in a pool: atomic publication, reopen, delta inserts
//!   and merge.
//! * [`table`]: CSV loading with order-preserving dictionaries.

pub mod build;
pub mod cache;
pub mod elf;
pub mod error;
pub mod layout;
pub mod query;
pub mod store;
pub mod table;

pub use build::{Built, Meta};
pub use cache::Policy;
pub use elf::{DynSpec, Elf, ElfData, Variant};
pub use error::{ElfError, Result};
pub use query::{Query, QueryStats};
pub use store::ElfStore;
pub use table::{Schema, Table};
