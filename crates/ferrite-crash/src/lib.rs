//! Crash-test targets: for every persistent structure, a small workload that
//! journals what it acknowledges and a checker that recovers a crash image and
//! compares it with the journal (see `ferrite_pm::crash` for the driver and
//! `ferrite_pm::sim` for the model). `ferrite crash-test NAME` runs them, via
//! `ferrite-registry`; the tests in `tests/` run each in the default suite and
//! show that each target's tripwire makes it fail.
//!
//! This crate is a tool: no library crate depends on it.

pub mod buffer;
pub mod elf;
pub mod index;
pub mod index_race;
pub mod pm;
pub mod pmio;

use ferrite_pm::tripwire::{self, Tripwire};
use ferrite_pm::{CrashConfig, CrashReport, Result};

/// Runs `target` with `wire` armed on this thread (the simulator runs the
/// workload here), for tripwire tests and `ferrite crash-test --tripwire`.
pub fn with_tripwire(
    wire: Tripwire,
    target: fn(&CrashConfig) -> Result<CrashReport>,
    cfg: &CrashConfig,
) -> Result<CrashReport> {
    tripwire::with(wire, || target(cfg))
}
