//! `ferrite bench buffer`: the buffer manager's evaluation (thesis ch. 2 §5):
//! the five designs side by side, the figures' experiments, the LMDB and
//! SQLite anchors in memory cgroups. Only arguments and printing live here;
//! the experiments are in `ferrite_bench::buffer`.

use std::io::IsTerminal;
use std::path::PathBuf;
use std::sync::Mutex;

use anyhow::{bail, Result};
use clap::Args;
use ferrite_bench::buffer::designs::{Dirs, Tiers};
use ferrite_bench::buffer::ycsb::Workload;
use ferrite_bench::buffer::Design;
use ferrite_bench::buffer::{self, tpcc, BufferBenchConfig, EXPERIMENTS};
use ferrite_bench::index::suite::Quiet;
use indicatif::ProgressBar;

use super::bench::{lift, Bar};
use crate::util::parse_size;

#[derive(Args, Debug)]
pub struct BufferBenchArgs {
    /// Experiments, comma-separated: mix (the five designs side by side),
    /// ycsb (Fig. 8), tpcc (Fig. 9), drilldown (Fig. 10), updates (Fig. 15),
    /// wear (Fig. 16), restart (Fig. 17), rebuild (page table of a full PM
    /// tier), anchors (LMDB, SQLite in a memory cgroup), or all
    #[arg(long, value_delimiter = ',', default_value = "mix")]
    pub experiment: Vec<String>,
    /// DRAM budget (the thesis's 2 GB scaled by 1/8)
    #[arg(long, value_parser = parse_size, default_value = "256M")]
    pub dram: u64,
    /// PM capacity (frames; the thesis's 10 GB scaled by 1/8)
    #[arg(long, value_parser = parse_size, default_value = "1280M")]
    pub pm: u64,
    /// SSD capacity (the thesis's 50 GB scaled by 1/8)
    #[arg(long, value_parser = parse_size, default_value = "6400M")]
    pub ssd: u64,
    /// Designs: main-memory, pm-direct, basic-pm, ssd-bm, three-tier
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "main-memory,pm-direct,basic-pm,ssd-bm,three-tier"
    )]
    pub designs: Vec<String>,
    /// Data size of the side-by-side run, MiB (inside DRAM)
    #[arg(long, default_value_t = 128)]
    pub mix_mib: u64,
    /// YCSB workloads of the side-by-side run (ro, rwNN, scan)
    #[arg(long, value_delimiter = ',', default_value = "ro,rw50,scan")]
    pub mix_workloads: Vec<String>,
    /// Warehouses of the side-by-side TPC-C run
    #[arg(long, default_value_t = 1)]
    pub mix_warehouses: u16,
    /// Data sizes of the YCSB-RO sweep (Fig. 8), MiB
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "128,384,640,896,1152,1536,1920"
    )]
    pub sizes: Vec<u64>,
    /// Warehouse counts of the TPC-C sweep (Fig. 9)
    #[arg(long, value_delimiter = ',', default_value = "1,2,4,8,12,16")]
    pub warehouses: Vec<u16>,
    /// Data size between DRAM and PM for drilldown, updates and wear, MiB
    #[arg(long, default_value_t = 1024)]
    pub mid_mib: u64,
    /// Update percentages (Fig. 15)
    #[arg(long, value_delimiter = ',', default_value = "0,25,50,75,100")]
    pub updates: Vec<u8>,
    /// Updates of the wear run (Fig. 16)
    #[arg(long, default_value_t = 1_000_000)]
    pub wear_ops: u64,
    /// Data sizes of the restart run (Fig. 17), MiB of 8-byte pairs
    #[arg(long, value_delimiter = ',', default_value = "192,768")]
    pub restart_mib: Vec<u64>,
    /// Seconds of throughput samples after a restart
    #[arg(long, default_value_t = 10.0)]
    pub restart_seconds: f64,
    /// Data sizes the anchors run at, MiB (one inside DRAM, one beyond)
    #[arg(long, value_delimiter = ',', default_value = "128,1024")]
    pub anchor_mib: Vec<u64>,
    /// Workloads of the anchors
    #[arg(long, value_delimiter = ',', default_value = "ro,rw50")]
    pub anchor_workloads: Vec<String>,
    /// Rounds of the anchors run: every engine measured once per round, in
    /// turn; each cell reports its median round
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u64).range(1..))]
    pub anchor_rounds: u64,
    /// Slices of the YCSB and TPC-C sweeps: a cell's designs are loaded
    /// together and measured in turn, seconds/N at a time (1: one run each)
    #[arg(long, default_value_t = 5, value_parser = clap::value_parser!(u64).range(1..))]
    pub interleave: u64,
    /// Measured seconds per cell
    #[arg(long, default_value_t = 5.0)]
    pub seconds: f64,
    /// Warm-up seconds before each measurement
    #[arg(long, default_value_t = 5.0)]
    pub warmup_seconds: f64,
    /// Page size
    #[arg(long, value_parser = parse_size, default_value = "16K")]
    pub page_size: u64,
    /// Bytes per WAL segment (two logs of two segments each)
    #[arg(long, value_parser = parse_size, default_value = "16M")]
    pub wal_segment: u64,
    /// Modelled PM read latency in ns (0: none): reads of PM frame data
    /// that miss a modelled 16 MiB CPU cache busy-wait this long, for a
    /// machine whose PM is DRAM; every result of such a run says so
    #[arg(long, default_value_t = 0)]
    pub pm_read_ns: u64,
    /// Check TPC-C's consistency conditions after every TPC-C run (always
    /// after the side-by-side one)
    #[arg(long)]
    pub tpcc_check_all: bool,
    /// TPC-C rows per warehouse: spec, or tiny (1/50, for smoke tests)
    #[arg(long, default_value = "spec")]
    pub tpcc_scale: String,
    #[arg(long, default_value_t = 42)]
    pub seed: u64,
    /// Directory of the PM pools (emulated PM)
    #[arg(long, default_value = "/dev/shm")]
    pub pool_dir: PathBuf,
    /// Directory of the SSD page files and the anchors' files (a real disk)
    #[arg(long, default_value = "/tmp")]
    pub ssd_dir: PathBuf,
    /// Where the tables, JSON and charts go
    #[arg(long, default_value = "bench-out")]
    pub out: PathBuf,
    /// Print one JSON object instead of the tables
    #[arg(long)]
    pub json: bool,
    /// Print the tables as Markdown
    #[arg(long)]
    pub markdown: bool,
}

/// `ferrite bench buffer-anchor …` (hidden): the anchors' child process.
#[derive(Args, Debug)]
pub struct AnchorChildArgs {
    #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
    pub args: Vec<String>,
}

fn workloads(v: &[String]) -> Result<Vec<Workload>> {
    v.iter()
        .map(|s| {
            Workload::parse(s)
                .ok_or_else(|| anyhow::anyhow!("unknown YCSB workload {s:?} (ro, rwNN, scan)"))
        })
        .collect()
}

impl BufferBenchArgs {
    pub fn config(&self) -> Result<BufferBenchConfig> {
        let mut experiments = self.experiment.clone();
        if experiments.iter().any(|e| e == "all") {
            experiments = EXPERIMENTS.iter().map(|s| s.to_string()).collect();
        }
        let designs = self
            .designs
            .iter()
            .map(|s| {
                Design::parse(s).ok_or_else(|| {
                    anyhow::anyhow!(
                        "unknown design {s:?} (main-memory, pm-direct, basic-pm, ssd-bm, three-tier)"
                    )
                })
            })
            .collect::<Result<Vec<_>>>()?;
        let tpcc_scale = match self.tpcc_scale.as_str() {
            "spec" => tpcc::Scale::SPEC,
            "tiny" => tpcc::Scale::TINY,
            s => bail!("unknown TPC-C scale {s:?} (spec or tiny)"),
        };
        let exe = std::env::current_exe()?;
        Ok(BufferBenchConfig {
            experiments,
            tiers: Tiers {
                dram: self.dram,
                pm: self.pm,
                ssd: self.ssd,
            },
            designs,
            mix_mib: self.mix_mib,
            mix_workloads: workloads(&self.mix_workloads)?,
            mix_warehouses: self.mix_warehouses,
            ycsb_sizes_mib: self.sizes.clone(),
            warehouses: self.warehouses.clone(),
            mid_mib: self.mid_mib,
            update_pcts: self.updates.clone(),
            wear_ops: self.wear_ops,
            restart_mib: self.restart_mib.clone(),
            restart_seconds: self.restart_seconds,
            anchor_mib: self.anchor_mib.clone(),
            anchor_workloads: workloads(&self.anchor_workloads)?,
            anchor_rounds: self.anchor_rounds as usize,
            interleave: self.interleave as usize,
            anchor_child: vec![
                exe.display().to_string(),
                "bench".into(),
                "buffer-anchor".into(),
            ],
            seconds: self.seconds,
            warmup_seconds: self.warmup_seconds,
            tpcc_scale,
            tpcc_check_all: self.tpcc_check_all,
            page_size: self.page_size as usize,
            wal_segment_bytes: self.wal_segment as usize,
            pm_read_ns: self.pm_read_ns,
            dirs: Dirs {
                pool_dir: self.pool_dir.clone(),
                ssd_dir: self.ssd_dir.clone(),
            },
            seed: self.seed,
        })
    }
}

pub fn run(a: BufferBenchArgs) -> Result<i32> {
    let cfg = a.config()?;
    let show_progress = !a.json && std::io::stderr().is_terminal();
    let mut run = if show_progress {
        buffer::run(
            &cfg,
            &Bar {
                pb: Mutex::new(ProgressBar::hidden()),
            },
        )
    } else {
        buffer::run(&cfg, &Quiet)
    }
    .map_err(lift)?;
    run.report.command = std::env::args().collect::<Vec<_>>().join(" ");
    std::fs::create_dir_all(&a.out)?;
    for (stem, svg) in &run.charts {
        std::fs::write(a.out.join(format!("{stem}.svg")), svg)?;
    }
    let main_svg = run.charts.first().map_or("", |c| c.1.as_str());
    let extra = ["experiment", "data_mib"];
    let chart = run
        .report
        .write_outputs(&a.out, "buffer", &extra, main_svg)?;
    let md = format!(
        "Command: `{}`\n\nMachine: {}\n\nBuild: {}\n\n{}",
        run.report.command,
        run.report.environment.summary(),
        run.report.environment.build_line(),
        run.markdown()
    );
    std::fs::write(a.out.join("buffer.md"), md)?;
    if a.json {
        println!("{}", run.report.to_json());
    } else {
        if a.markdown {
            print!("{}", run.markdown());
        } else {
            print!("{}", run.text());
        }
        for n in &run.report.notes {
            println!("note: {n}");
        }
        println!("machine: {}", run.report.environment.summary());
        let mut charts: Vec<String> = run
            .charts
            .iter()
            .map(|(s, _)| a.out.join(format!("{s}.svg")).display().to_string())
            .collect();
        if charts.is_empty() {
            charts.push(chart.display().to_string());
        }
        println!("charts: {}", charts.join(", "));
    }
    if !run.problems.is_empty() {
        for p in &run.problems {
            eprintln!("problem: {p}");
        }
        bail!("{} problem(s) found (see above)", run.problems.len());
    }
    Ok(0)
}

/// The anchors' child process: prints one JSON line.
pub fn anchor_child(a: AnchorChildArgs) -> Result<i32> {
    let line = buffer::anchor::child_main(&a.args)?;
    println!("{line}");
    Ok(0)
}
