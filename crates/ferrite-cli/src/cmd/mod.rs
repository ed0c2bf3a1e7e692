//! One module per command family. `pool`, `crash` and `demo` belong to the PM
//! layer; `bench` is the PiBench-style index benchmark and dispatches the other
//! benchmark families; `pmio` and `elf` belong to their crates' commands.

pub mod bench;
pub mod crash;
pub mod demo;
pub mod elf;
pub mod membench;
pub mod pmbench;
pub mod pmio;
pub mod pool;
