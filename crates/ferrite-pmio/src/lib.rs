//! PM I/O primitives from the thesis's chapter 3 ("Building blocks for PMem"):
//!
//! * [`log`]: failure-atomic logs (Classic, Header, Header with dancing size
//!   fields, RAWL, PopLog) behind the [`log::Log`] trait, with group append.
//! * [`page`]: propagation of DRAM pages to PM by copy-on-write with page
//!   version numbers or by a micro log, chosen by a calibrated cost model.
//! * [`inplace`]: failure-atomic in-place updates of 8–64-byte values (CoW,
//!   log-based, Failure-Atomic Memory).
//! * [`interleave`]: many independent persists sharing one fence
//!   ([`interleave::PersistBatch`] and a tiny executor of async tasks).
//!
//! The benchmarks behind `ferrite bench log|page|inplace|interleave` live in
//! the `ferrite-bench` crate.

pub mod error;
pub mod inplace;
pub mod interleave;
pub mod log;
pub mod page;
mod region;

pub use error::{PmioError, Result};
