//! One module per command family. `pool`, `crash` and `demo` belong to the PM
//! layer; `bench` parses the benchmark commands (the PiBench-style index
//! benchmark and the PM-layer ones) and dispatches the others to `pmio` and
//! `elf`; every measurement is in the `ferrite-bench` crate.

pub mod bench;
pub mod buffer;
pub mod crash;
pub mod demo;
pub mod elf;
pub mod pmio;
pub mod pool;
