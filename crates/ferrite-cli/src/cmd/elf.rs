//! `ferrite elf …` and `ferrite bench elf`.

use anyhow::{bail, Result};
use clap::{Args, Subcommand};

#[derive(Subcommand)]
pub enum ElfCommand {
    /// Build an Elf from a CSV file
    Build(BuildArgs),
}

#[derive(Args)]
pub struct BuildArgs {
    pub pool: std::path::PathBuf,
}

#[derive(Args, Debug)]
pub struct ElfBenchArgs {
    #[arg(long)]
    pub json: bool,
}

pub fn run(_c: ElfCommand) -> Result<i32> {
    bail!("`ferrite elf` is not built yet")
}

pub fn run_bench(_a: ElfBenchArgs) -> Result<i32> {
    bail!("`ferrite bench elf` is not built yet")
}
