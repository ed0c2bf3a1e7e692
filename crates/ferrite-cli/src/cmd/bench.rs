//! `ferrite bench`: the PiBench-compatible index benchmark, and the dispatcher
//! of the other benchmark families.

use anyhow::{bail, Result};
use clap::{Args, Subcommand};

use super::{elf, pmio};

#[derive(Args)]
#[command(args_conflicts_with_subcommands = true)]
pub struct BenchArgs {
    #[command(subcommand)]
    pub what: Option<BenchWhat>,
}

#[derive(Subcommand)]
pub enum BenchWhat {
    /// Cost of persist barriers: same line, sequential, random; clwb/clflushopt/nt
    Persist(super::pmbench::PersistArgs),
    /// Allocate+publish on the PM heap against the system allocator
    Alloc(super::pmbench::AllocArgs),
    /// Failure-atomic logs over entry size (thesis Fig. 8)
    Log(pmio::PmioBenchArgs),
    /// Page propagation: CoW vs micro log over dirty lines (thesis Fig. 7)
    Page(pmio::PmioBenchArgs),
    /// Small in-place updates: CoW, log, FAM (thesis Fig. 10)
    Inplace(pmio::PmioBenchArgs),
    /// Interleaved persists over group size (thesis Fig. 12)
    Interleave(pmio::PmioBenchArgs),
    /// Elf experiments (Elf papers)
    Elf(elf::ElfBenchArgs),
}

pub fn run(a: BenchArgs) -> Result<i32> {
    match a.what {
        Some(BenchWhat::Persist(a)) => super::pmbench::persist(a),
        Some(BenchWhat::Alloc(a)) => super::pmbench::alloc(a),
        Some(BenchWhat::Log(a)) => pmio::run_bench("log", a),
        Some(BenchWhat::Page(a)) => pmio::run_bench("page", a),
        Some(BenchWhat::Inplace(a)) => pmio::run_bench("inplace", a),
        Some(BenchWhat::Interleave(a)) => pmio::run_bench("interleave", a),
        Some(BenchWhat::Elf(a)) => elf::run_bench(a),
        None => bail!("the index benchmark is not built yet; try `ferrite bench persist`"),
    }
}
