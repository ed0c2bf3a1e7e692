//! `ferrite bench log|page|inplace|interleave` (PM I/O primitives).

use anyhow::{bail, Result};
use clap::Args;

#[derive(Args, Debug)]
pub struct PmioBenchArgs {
    /// Print one JSON object (the shared `results` shape)
    #[arg(long)]
    pub json: bool,
}

pub fn run_bench(which: &str, _a: PmioBenchArgs) -> Result<i32> {
    bail!("`ferrite bench {which}` is not built yet")
}
