//! The replicated service's benchmarks (`ferrite bench raft …`), reproducing
//! the Raft-on-NVRAM thesis's measurements (chapter 4) on this machine:
//!
//! * [`cluster`](mod@cluster): write latency (SET and compare-and-set, 1 and 20 clients),
//!   throughput, lagging-replica recovery and start-up time, on a 3-replica
//!   cluster of `ferrite serve` processes, for the list, B+-tree and WAL stores;
//! * [`structures`](mod@structures): the single-node comparison of the structures (20,000
//!   10-byte keys) beside Ferrite's PM range index;
//! * [`commit`](mod@commit): the group-commit parameters (k, t) the defaults rest on.

pub mod client;
pub mod cluster;
pub mod commit;
pub mod procs;
pub mod structures;

pub use cluster::{cluster, throughput_chart, ClusterOpts};
pub use commit::{commit, commit_chart};
pub use structures::{structures, StructOpts};
