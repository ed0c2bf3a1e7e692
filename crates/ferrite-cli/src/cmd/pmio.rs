//! `ferrite bench log|page|inplace|interleave` (PM I/O primitives). The
//! measurements live in `ferrite_bench::pmio`; this is the command-line layer.

use std::path::PathBuf;

use anyhow::{bail, Result};
use clap::Args;
use ferrite_bench::pmio::{self as bench, BenchOpts};
use ferrite_pm::persist;

#[derive(Args, Debug)]
pub struct PmioBenchArgs {
    /// Print one JSON object (the shared `results` shape)
    #[arg(long)]
    pub json: bool,
    /// Operations per cell (default: the family's own)
    #[arg(long)]
    pub ops: Option<u64>,
    /// Directory for the pool file (removed afterwards)
    #[arg(long, default_value = "/dev/shm")]
    pub pool_dir: PathBuf,
    /// Where the table, JSON and chart go
    #[arg(long, default_value = "bench-out")]
    pub out: PathBuf,
    /// Latency injection: ns added per fence and per flushed line (models slower PM)
    #[arg(long, num_args = 2, value_names = ["FENCE_NS", "LINE_NS"])]
    pub inject: Option<Vec<u64>>,
    /// Model Optane's penalty for persisting a line again while its previous
    /// write-back is in flight: ns added when a line is written back again
    /// within three persist barriers
    #[arg(long, value_name = "NS")]
    pub inject_repeat: Option<u64>,
    /// Fewer parameter points (smoke test)
    #[arg(long)]
    pub quick: bool,
    /// Repetitions per cell; the median is reported
    #[arg(long, default_value_t = 3)]
    pub reps: usize,
    /// `page` only: also run the propagation with this many threads (Fig. 7b)
    #[arg(long, default_value_t = 1)]
    pub threads: usize,
}

pub fn run_bench(which: &str, a: PmioBenchArgs) -> Result<i32> {
    if !["log", "page", "inplace", "interleave"].contains(&which) {
        bail!("unknown PM I/O benchmark {which:?}");
    }
    if a.ops == Some(0) {
        bail!("--ops must be at least 1");
    }
    if a.threads == 0 || a.threads > 64 {
        bail!("--threads takes 1 to 64");
    }
    let mut stem = match &a.inject {
        Some(v) => {
            persist::set_latency_injection(v[0], v[1]);
            format!("{which}-inject-{}-{}", v[0], v[1])
        }
        None => which.to_string(),
    };
    if let Some(ns) = a.inject_repeat {
        persist::set_repeat_line_injection(ns);
        stem.push_str(&format!("-repeat-{ns}"));
    }
    let opts = BenchOpts {
        ops: a.ops,
        pool_dir: a.pool_dir,
        quick: a.quick,
        reps: a.reps,
        threads: a.threads,
    };
    let out = bench::run(which, &opts).map_err(|e| super::bench::lift(e.into()))?;
    let path = out
        .report
        .write_outputs(&a.out, &stem, &out.extra_cols, &out.svg)?;
    if a.json {
        out.report.print(true, &out.extra_cols, Some(&path));
    } else {
        // The full table (with barriers and lines per op) is in the .md file;
        // the terminal gets the variants side by side.
        print!("{}", bench::pivot(&out.report));
        for n in &out.report.notes {
            println!("note: {n}");
        }
        println!(
            "table with fences/lines per op: {}",
            path.with_extension("md").display()
        );
        println!("chart: {}", path.display());
    }
    Ok(0)
}
