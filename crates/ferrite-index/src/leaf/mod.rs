//! PM leaves: the byte layout of a leaf and its line headers ([`layout`]) and
//! the entries stored in its slots, with their out-of-line blocks ([`entry`]).
//! Both are part of the on-PM format (`docs/FORMAT.md`); the tree code reads
//! and writes leaves only through these two modules.

mod entry;
mod layout;

pub(crate) use entry::*;
pub use layout::*;
