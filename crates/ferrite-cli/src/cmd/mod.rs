//! One module per command family. `pool`, `crash` and `demo` belong to the PM
//! layer; `serve` and `cluster` run the replicated service; `bench` parses the benchmark commands (the PiBench-style index
//! benchmark and the PM-layer ones) and dispatches the others to `pmio` and
//! `elf`; every measurement is in the `ferrite-bench` crate.

pub mod bench;
pub mod buffer;
pub mod cluster;
pub mod crash;
pub mod demo;
pub mod elf;
pub mod pmio;
pub mod pool;
pub mod raft_bench;
pub mod serve;
