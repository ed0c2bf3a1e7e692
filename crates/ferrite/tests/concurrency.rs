//! Stress tests of the facade's atomicity under threads: transactions move
//! money while readers check that the total never changes (in a one-chunk
//! range, in transactions, in batches of gets inside a transaction); counters
//! bumped with `update_with` and `compare_and_swap` from several threads lose
//! no increment; plain writers run beside transactions; a thread that holds
//! a transaction gets an error, not a deadlock, when it writes around it.
//!
//! These run with the gate's default barriers (`membarrier` on Linux);
//! `concurrency_fences.rs` runs the same cases with its fallback fences.

#[path = "common/concurrency_cases.rs"]
#[macro_use]
mod cases;

/// Nothing to set: the default barriers.
fn setup() {}

concurrency_tests!(setup, "membarrier");
