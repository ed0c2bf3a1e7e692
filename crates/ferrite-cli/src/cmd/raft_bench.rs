//! `ferrite bench raft [cluster|structures|commit|all]`: the replicated
//! service's benchmarks (in `ferrite_bench::raft`); this is the command line.

use std::path::PathBuf;

use anyhow::{bail, Context, Result};
use clap::Args;
use ferrite_bench::raft::{self, ClusterOpts, StructOpts};
use ferrite_bench::BenchOutput;

use super::bench::{lift, BenchIo};

#[derive(Args, Debug)]
pub struct RaftBenchArgs {
    /// cluster (latency, throughput, recovery, start), structures (single
    /// node), commit (group-commit sweep) or all
    #[arg(default_value = "all")]
    pub what: String,
    /// Stores of the cluster runs
    #[arg(long, value_delimiter = ',', default_value = "list,btree,wal")]
    pub stores: Vec<String>,
    /// Keys preloaded before the latency runs (the thesis: 50,000)
    #[arg(long, default_value_t = 50_000)]
    pub keys: u64,
    /// Writes of each 1-client run
    #[arg(long, default_value_t = 2_000)]
    pub single_ops: u64,
    /// Writes of each many-client run (all clients together)
    #[arg(long, default_value_t = 20_000)]
    pub multi_ops: u64,
    /// Concurrent clients of the second run (the thesis: 20)
    #[arg(long, default_value_t = 20)]
    pub clients: usize,
    /// Writes while a replica is down (the thesis: 15,000)
    #[arg(long, default_value_t = 15_000)]
    pub recovery_writes: u64,
    /// Bytes per value of those writes ("a few KB")
    #[arg(long, default_value_t = 2048)]
    pub recovery_value: usize,
    /// Recoveries of the lagging replica measured per store, each further
    /// one on a fresh cluster with the same preload; the median is the
    /// result, and every trial's time is reported beside it [default: 5;
    /// 1 with --quick]
    #[arg(long, value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..))]
    pub recovery_trials: Option<usize>,
    /// Client port of replica 1 (peers use PORT+10000…)
    #[arg(long, default_value_t = 7380)]
    pub port: u16,
    /// Directory for the WAL store (must be a real disk)
    #[arg(long, default_value = "/var/tmp")]
    pub wal_dir: PathBuf,
    /// Extra arguments for every `ferrite serve`
    #[arg(long, default_value = "")]
    pub serve_args: String,
    /// Also run `redis-benchmark -t set,get -n N -c 20` against each cluster
    #[arg(long)]
    pub redis_benchmark: Option<u64>,
    /// Keys of the structure comparison (the thesis: 20,000)
    #[arg(long, default_value_t = 20_000)]
    pub struct_keys: u64,
    /// Commit every this many modifications in the structure comparison
    #[arg(long, default_value_t = 10)]
    pub commit_every: usize,
    /// Repetitions of the structure comparison (median reported)
    #[arg(long, default_value_t = 3)]
    pub reps: usize,
    /// Small sizes (a smoke test, minutes less)
    #[arg(long)]
    pub quick: bool,
    /// Only redraw the throughput chart (from DIR/raft-latency.json) and the
    /// group-commit chart (from DIR/raft-commit.json, when present) in DIR
    #[arg(long, value_name = "DIR")]
    pub replot: Option<PathBuf>,
    #[command(flatten)]
    pub io: BenchIo,
}

fn emit(out: BenchOutput, io: &BenchIo, stem: &str) -> Result<()> {
    let path = out
        .report
        .write_outputs(&io.out, stem, &out.extra_cols, &out.svg)?;
    out.report.print(io.json, &out.extra_cols, Some(&path));
    Ok(())
}

pub fn run(a: RaftBenchArgs) -> Result<i32> {
    if let Some(dir) = &a.replot {
        let path = dir.join("raft-latency.json");
        let text = std::fs::read_to_string(&path)
            .with_context(|| format!("reading {}", path.display()))?;
        let rep: ferrite_report::Report = serde_json::from_str(&text)
            .with_context(|| format!("{} is not a raft-latency report", path.display()))?;
        let out = dir.join("raft-throughput.svg");
        std::fs::write(&out, raft::throughput_chart(&rep))
            .with_context(|| format!("writing {}", out.display()))?;
        println!("chart: {}", out.display());
        let path = dir.join("raft-commit.json");
        if path.exists() {
            let text = std::fs::read_to_string(&path)
                .with_context(|| format!("reading {}", path.display()))?;
            let rep: ferrite_report::Report = serde_json::from_str(&text)
                .with_context(|| format!("{} is not a raft-commit report", path.display()))?;
            let out = dir.join("raft-commit.svg");
            std::fs::write(&out, raft::commit_chart(&rep))
                .with_context(|| format!("writing {}", out.display()))?;
            println!("chart: {}", out.display());
        }
        return Ok(0);
    }
    if !["cluster", "structures", "commit", "all"].contains(&a.what.as_str()) {
        bail!(
            "ferrite bench raft takes cluster, structures, commit or all, not {:?}",
            a.what
        );
    }
    for s in &a.stores {
        if ferrite_raft::StoreKind::parse(s).is_none() {
            bail!("--stores takes list, btree and wal, not {s:?}");
        }
    }
    let q = a.quick;
    let co = ClusterOpts {
        exe: std::env::current_exe()?,
        stores: a.stores.clone(),
        pm_dir: a.io.pool_dir.clone(),
        wal_dir: a.wal_dir.clone(),
        port: a.port,
        keys: if q { 2_000 } else { a.keys },
        single_ops: if q { 200 } else { a.single_ops },
        multi_ops: if q { 2_000 } else { a.multi_ops },
        clients: a.clients,
        recovery_writes: if q { 1_500 } else { a.recovery_writes },
        recovery_value: a.recovery_value,
        recovery_trials: a.recovery_trials.unwrap_or(if q { 1 } else { 5 }),
        serve_args: a
            .serve_args
            .split_whitespace()
            .map(str::to_string)
            .collect(),
        redis_benchmark: a.redis_benchmark,
    };
    if matches!(a.what.as_str(), "structures" | "all") {
        let so = StructOpts {
            pool_dir: a.io.pool_dir.clone(),
            keys: if q { 2_000 } else { a.struct_keys },
            commit_every: a.commit_every,
            reps: if q { 1 } else { a.reps },
        };
        emit(
            raft::structures(&so).map_err(lift)?,
            &a.io,
            "raft-structures",
        )?;
    }
    if matches!(a.what.as_str(), "cluster" | "all") {
        let (lat, rec) = raft::cluster(&co).map_err(lift)?;
        let thr = raft::throughput_chart(&lat.report);
        emit(lat, &a.io, "raft-latency")?;
        std::fs::write(a.io.out.join("raft-throughput.svg"), thr)?;
        emit(rec, &a.io, "raft-recovery")?;
    }
    if matches!(a.what.as_str(), "commit" | "all") {
        emit(raft::commit(&co).map_err(lift)?, &a.io, "raft-commit")?;
    }
    Ok(0)
}
