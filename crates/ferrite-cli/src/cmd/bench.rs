//! `ferrite bench`: the PiBench-compatible index benchmark, and the dispatcher
//! of the other benchmark families. Only arguments and printing live here; the
//! benchmarks are in the `ferrite-bench` crate.
//!
//! With no subcommand it loads `-n` records into each index named by `--index`
//! or `--compare` and runs PiBench-style operations on identical workloads. The
//! flags keep PiBench's names so a PiBench command line carries over.

use std::io::IsTerminal;
use std::path::PathBuf;
use std::sync::Mutex;

use anyhow::{bail, Result};
use clap::{Args, Subcommand};
use ferrite_bench::index::suite::{self, IndexBenchConfig, Progress};
use ferrite_bench::pm::{AllocConfig, CacheConfig, MemoryConfig, PersistConfig};
use ferrite_bench::{BenchError, BenchOutput};
use ferrite_pm::persist;
use indicatif::{ProgressBar, ProgressStyle};

use super::{buffer, elf, pmio};
use crate::util::parse_size;

#[derive(Args)]
#[command(args_conflicts_with_subcommands = true)]
pub struct BenchArgs {
    #[command(subcommand)]
    pub what: Option<BenchWhat>,
    #[command(flatten)]
    pub index: Box<IndexBenchArgs>,
}

#[derive(Subcommand)]
pub enum BenchWhat {
    /// Cost of persist barriers: same line, sequential, random; clwb/clflushopt/nt
    Persist(PersistArgs),
    /// Allocate+publish on the PM heap against the system allocator
    Alloc(AllocArgs),
    /// Latency floor: dependent and independent random reads, pool vs DRAM
    Memory(MemoryArgs),
    /// How much cache a dependent reader gets: read latency over region size
    Cache(CacheArgs),
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
    /// Replicated service: cluster latency, recovery, start-up; structures; group commit
    Raft(super::raft_bench::RaftBenchArgs),
    /// The ferrite facade's cost over the index; the Python binding vs dict, LMDB, sqlite3
    Facade(FacadeArgs),
    /// Buffer manager: the thesis's five designs on YCSB and TPC-C, its figures, LMDB/SQLite anchors
    Buffer(Box<buffer::BufferBenchArgs>),
    /// The buffer benchmark's anchor child process (internal)
    #[command(name = "buffer-anchor", hide = true)]
    BufferAnchor(buffer::AnchorChildArgs),
}

#[derive(Args, Debug)]
pub struct FacadeArgs {
    /// Records to load (part 1: facade vs index)
    #[arg(short = 'n', long = "records", default_value_t = 1_000_000)]
    pub records: u64,
    /// Operations per run
    #[arg(short = 'p', long = "operations", default_value_t = 1_000_000)]
    pub operations: u64,
    /// Rounds of both variants, order alternating (medians are reported)
    #[arg(long, default_value_t = 3)]
    pub rounds: usize,
    /// Worker threads
    #[arg(short = 't', long = "threads", default_value_t = 1)]
    pub threads: usize,
    /// Stop a run after this many seconds
    #[arg(long = "max-seconds", default_value_t = 5.0)]
    pub max_seconds: f64,
    /// A Python interpreter with the ferrite (pip install ./python) and lmdb packages: part 2
    #[arg(long)]
    pub python: Option<PathBuf>,
    /// Records of part 2
    #[arg(long = "py-records", default_value_t = 200_000)]
    pub py_records: u64,
    /// Runs of part 1
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "lookup,insert,update,scan"
    )]
    pub benches: Vec<String>,
    /// Slices of the paired lookup/insert measurement (the bar's number; 0 skips it)
    #[arg(long, default_value_t = 40)]
    pub slices: usize,
    /// Operations per slice and variant of the paired measurement
    #[arg(long = "slice-ops", default_value_t = 25_000)]
    pub slice_ops: u64,
    #[command(flatten)]
    pub io: BenchIo,
}

/// The index benchmark's flags: PiBench's names (`-n -p -t -k -v -f -r -i -u -d
/// -s --scan_size --distribution --skew --seed --latency_sampling --sampling_ms
/// --pool_path --pool_size --skip_load`) plus Ferrite's comparison options.
#[derive(Args, Debug)]
pub struct IndexBenchArgs {
    /// Records to load
    #[arg(short = 'n', long = "records", default_value_t = 1_000_000)]
    pub records: u64,
    /// Operations per run
    #[arg(short = 'p', long = "operations", default_value_t = 1_000_000)]
    pub operations: u64,
    /// Worker threads; a comma list (e.g. 1,2) runs each count
    #[arg(
        short = 't',
        long = "threads",
        value_delimiter = ',',
        default_value = "1"
    )]
    pub threads: Vec<usize>,
    /// Key size in bytes (8 = big-endian integers; 16 and more = string keys)
    #[arg(short = 'k', long = "key_size", default_value_t = 8)]
    pub key_size: usize,
    /// Value size in bytes
    #[arg(short = 'v', long = "value_size", default_value_t = 8)]
    pub value_size: usize,
    /// Prefix of every key
    #[arg(short = 'f', long = "key_prefix", default_value = "")]
    pub key_prefix: String,
    /// Lookup ratio (default: 1 minus the other ratios)
    #[arg(short = 'r', long = "read_ratio")]
    pub read_ratio: Option<f64>,
    /// Insert ratio
    #[arg(short = 'i', long = "insert_ratio")]
    pub insert_ratio: Option<f64>,
    /// Update ratio
    #[arg(short = 'u', long = "update_ratio")]
    pub update_ratio: Option<f64>,
    /// Remove ratio
    #[arg(short = 'd', long = "remove_ratio")]
    pub remove_ratio: Option<f64>,
    /// Scan ratio
    #[arg(short = 's', long = "scan_ratio")]
    pub scan_ratio: Option<f64>,
    /// Records per scan
    #[arg(long = "scan_size", default_value_t = 100)]
    pub scan_size: usize,
    /// Key distribution: UNIFORM, ZIPFIAN or SELFSIMILAR
    #[arg(long = "distribution", default_value = "UNIFORM")]
    pub distribution: String,
    /// Skew (zipfian θ, default 0.99; selfsimilar h, default 0.2)
    #[arg(long = "skew")]
    pub skew: Option<f64>,
    /// Random seed
    #[arg(long = "seed", default_value_t = 1729)]
    pub seed: u64,
    /// Fraction of operations whose latency is timed (PiBench's default is 0;
    /// Ferrite's is 0.1 so the table has percentiles)
    #[arg(long = "latency_sampling", default_value_t = 0.1)]
    pub latency_sampling: f64,
    /// Throughput sample interval in milliseconds
    #[arg(long = "sampling_ms", default_value_t = 1000)]
    pub sampling_ms: u64,
    /// Pool file for `ferrite` (kept afterwards); default: a temporary pool in --pool-dir
    #[arg(long = "pool_path")]
    pub pool_path: Option<PathBuf>,
    /// Pool size (e.g. 4G); default: sized from -n and -p
    #[arg(long = "pool_size", value_parser = parse_size)]
    pub pool_size: Option<u64>,
    /// Skip the load: reopen the index in --pool_path and run on what it holds
    #[arg(long = "skip_load")]
    pub skip_load: bool,
    /// Load each index anew before any run that follows a run which inserted or
    /// removed keys (PiBench loads for every run): every thread count of an
    /// insert run then starts from the same index. Costs a load per such run
    #[arg(long)]
    pub reload: bool,
    /// One index: ferrite, ferrite-dram, btreemap, btreemap-u64, redb, redb-nosync
    #[arg(long, conflicts_with = "compare")]
    pub index: Option<String>,
    /// Several indexes on identical workloads (default: ferrite,ferrite-dram,btreemap,redb,
    /// and btreemap-u64 after btreemap when keys and values are 8 bytes). A published
    /// index's PiBench wrapper: pibench:PATH/libX.so[?pool=dir&pool_size=SIZE&pool_per_record=SIZE&keys=u64|i64|bytes&env=N=V&name=N]
    /// (pibench-ep2: / pibench-optiql: name the interface layout; scripts/peers builds them)
    #[arg(long, value_delimiter = ',')]
    pub compare: Option<Vec<String>>,
    /// Standard runs when no ratio is given: lookup, insert, update, remove, scan, mixed
    /// (mixed = 50% lookup / 50% update, selfsimilar 0.2)
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "lookup,scan,update,mixed,insert,remove"
    )]
    pub benches: Vec<String>,
    /// Stop a run after this many seconds (throughput = operations done / time)
    #[arg(long = "max-seconds", alias = "max_seconds", default_value_t = 5.0)]
    pub max_seconds: f64,
    /// Records per write transaction while loading redb
    #[arg(
        long = "redb-load-batch",
        alias = "redb_load_batch",
        default_value_t = 10_000
    )]
    pub redb_load_batch: usize,
    /// Directory for temporary pools and database files
    #[arg(long, default_value = "/dev/shm")]
    pub pool_dir: PathBuf,
    /// Run the whole comparison this many times, the indexes in a rotated
    /// order each time, and report each cell's median round (all rounds'
    /// Mops/s in the JSON): a shared machine drifts over minutes, and the
    /// indexes of one round are measured minutes apart
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u64).range(1..=99))]
    pub rounds: u64,
    /// Where the table, JSON and chart go
    #[arg(long, default_value = "bench-out")]
    pub out: PathBuf,
    /// File stem of the outputs in --out
    #[arg(long, default_value = "index")]
    pub stem: String,
    /// Print one JSON object instead of the table
    #[arg(long)]
    pub json: bool,
    /// Only redraw the charts of a saved report (its .json) into --out/--stem
    #[arg(long)]
    pub replot: Option<PathBuf>,
}

#[derive(Args, Debug)]
pub struct PersistArgs {
    /// Persists per cell
    #[arg(long, default_value_t = 2_000_000)]
    pub ops: u64,
    /// Region the sequential and random patterns cover
    #[arg(long, value_parser = parse_size, default_value = "64M")]
    pub region: u64,
    #[command(flatten)]
    pub io: BenchIo,
    /// Latency injection: ns added per fence and per flushed line (models slower PM)
    #[arg(long, num_args = 2, value_names = ["FENCE_NS", "LINE_NS"])]
    pub inject: Option<Vec<u64>>,
}

#[derive(Args, Debug)]
pub struct AllocArgs {
    /// Operations per cell
    #[arg(long, default_value_t = 1_000_000)]
    pub ops: u64,
    /// Block size in bytes
    #[arg(long, default_value_t = 64)]
    pub size: usize,
    #[command(flatten)]
    pub io: BenchIo,
}

#[derive(Args, Debug)]
pub struct MemoryArgs {
    /// Region read at random (the index's leaves take about 300 MiB for 10 M records)
    #[arg(long, value_parser = parse_size, default_value = "256M")]
    pub region: u64,
    /// Reads per cell
    #[arg(long, default_value_t = 4_000_000)]
    pub ops: u64,
    #[command(flatten)]
    pub io: BenchIo,
}

#[derive(Args, Debug)]
pub struct CacheArgs {
    /// Largest region of the sweep (64K up to this size, a midpoint per doubling)
    #[arg(long, value_parser = parse_size, default_value = "64M")]
    pub max_region: u64,
    /// Reads per region
    #[arg(long, default_value_t = 2_000_000)]
    pub ops: u64,
    #[command(flatten)]
    pub io: BenchIo,
}

/// Where a benchmark puts its pool and its results (shared flags).
#[derive(Args, Debug)]
pub struct BenchIo {
    /// Directory for pools
    #[arg(long, default_value = "/dev/shm")]
    pub pool_dir: PathBuf,
    /// Where the table, JSON and chart go
    #[arg(long, default_value = "bench-out")]
    pub out: PathBuf,
    /// Print the report as JSON
    #[arg(long)]
    pub json: bool,
}

/// A benchmark error as an `anyhow` error, with a PM-layer error (a missing or
/// bad pool directory) kept on the chain so the exit status is 2.
pub fn lift(e: BenchError) -> anyhow::Error {
    use ferrite_elf::ElfError;
    use ferrite_pmio::PmioError;
    match e {
        BenchError::Pm(p)
        | BenchError::Pmio(PmioError::Pm(p))
        | BenchError::Elf(ElfError::Pm(p)) => anyhow::Error::from(p),
        e => anyhow::Error::from(e),
    }
}

/// Writes a benchmark's table, JSON and chart to `io.out` as `stem.*` and
/// prints the table (or the JSON).
fn finish(out: BenchOutput, io: &BenchIo, stem: &str) -> Result<i32> {
    let path = out
        .report
        .write_outputs(&io.out, stem, &out.extra_cols, &out.svg)?;
    out.report.print(io.json, &out.extra_cols, Some(&path));
    Ok(0)
}

pub fn run(a: BenchArgs) -> Result<i32> {
    match a.what {
        Some(BenchWhat::Persist(a)) => {
            if let Some(v) = &a.inject {
                persist::set_latency_injection(v[0], v[1]);
            }
            let c = PersistConfig {
                ops: a.ops,
                region: a.region,
                pool_dir: a.io.pool_dir.clone(),
            };
            finish(
                ferrite_bench::pm::persist(&c).map_err(lift)?,
                &a.io,
                "persist",
            )
        }
        Some(BenchWhat::Alloc(a)) => {
            let c = AllocConfig {
                ops: a.ops,
                size: a.size,
                pool_dir: a.io.pool_dir.clone(),
            };
            finish(ferrite_bench::pm::alloc(&c).map_err(lift)?, &a.io, "alloc")
        }
        Some(BenchWhat::Memory(a)) => {
            let c = MemoryConfig {
                region: a.region,
                ops: a.ops,
                pool_dir: a.io.pool_dir.clone(),
            };
            finish(
                ferrite_bench::pm::memory(&c).map_err(lift)?,
                &a.io,
                "memory",
            )
        }
        Some(BenchWhat::Cache(a)) => {
            let c = CacheConfig {
                max_region: a.max_region,
                ops: a.ops,
                pool_dir: a.io.pool_dir.clone(),
            };
            finish(ferrite_bench::pm::cache(&c).map_err(lift)?, &a.io, "cache")
        }
        Some(BenchWhat::Log(a)) => pmio::run_bench("log", a),
        Some(BenchWhat::Page(a)) => pmio::run_bench("page", a),
        Some(BenchWhat::Inplace(a)) => pmio::run_bench("inplace", a),
        Some(BenchWhat::Interleave(a)) => pmio::run_bench("interleave", a),
        Some(BenchWhat::Elf(a)) => elf::run_bench(a),
        Some(BenchWhat::Raft(a)) => super::raft_bench::run(a),
        Some(BenchWhat::Facade(a)) => {
            let c = ferrite_bench::facade::FacadeConfig {
                records: a.records,
                operations: a.operations,
                rounds: a.rounds,
                threads: a.threads,
                max_seconds: a.max_seconds,
                pool_dir: a.io.pool_dir.clone(),
                python: a.python.clone(),
                py_records: a.py_records,
                benches: a.benches.clone(),
                slices: a.slices,
                slice_ops: a.slice_ops,
            };
            let (out, py_svg) = ferrite_bench::facade::facade(&c).map_err(lift)?;
            if let Some(svg) = py_svg {
                std::fs::create_dir_all(&a.io.out)?;
                let p = a.io.out.join("facade-python.svg");
                std::fs::write(&p, svg)?;
                if !a.io.json {
                    println!("python chart: {}", p.display());
                }
            }
            finish(out, &a.io, "facade")
        }
        Some(BenchWhat::Buffer(a)) => buffer::run(*a),
        Some(BenchWhat::BufferAnchor(a)) => buffer::anchor_child(a),
        None => index_bench(*a.index),
    }
}

impl IndexBenchArgs {
    fn config(&self) -> IndexBenchConfig {
        IndexBenchConfig {
            records: self.records,
            operations: self.operations,
            threads: self.threads.clone(),
            key_size: self.key_size,
            value_size: self.value_size,
            key_prefix: self.key_prefix.clone(),
            read_ratio: self.read_ratio,
            insert_ratio: self.insert_ratio,
            update_ratio: self.update_ratio,
            remove_ratio: self.remove_ratio,
            scan_ratio: self.scan_ratio,
            scan_size: self.scan_size,
            distribution: self.distribution.clone(),
            skew: self.skew,
            seed: self.seed,
            latency_sampling: self.latency_sampling,
            sampling_ms: self.sampling_ms,
            pool_path: self.pool_path.clone(),
            pool_size: self.pool_size,
            skip_load: self.skip_load,
            reload: self.reload,
            index: self.index.clone(),
            compare: self.compare.clone(),
            benches: self.benches.clone(),
            max_seconds: self.max_seconds,
            redb_load_batch: self.redb_load_batch,
            pool_dir: self.pool_dir.clone(),
            rounds: self.rounds as usize,
        }
    }
}

/// A progress bar on stderr while loading, and the current run's name.
pub(crate) struct Bar {
    pub(crate) pb: Mutex<ProgressBar>,
}

impl Progress for Bar {
    fn load_begin(&self, variant: &str, threads: usize, total: u64) {
        let pb = ProgressBar::new(total);
        pb.set_style(
            ProgressStyle::with_template(
                "{prefix:>14} load [{bar:40}] {pos}/{len} {per_sec} eta {eta}",
            )
            .unwrap_or_else(|_| ProgressStyle::default_bar())
            .progress_chars("=> "),
        );
        pb.set_prefix(format!("{variant} {threads}t"));
        *self.pb.lock().unwrap_or_else(|e| e.into_inner()) = pb;
    }
    fn load_progress(&self, done: u64) {
        self.pb
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .set_position(done);
    }
    fn load_end(&self) {
        self.pb
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .finish_and_clear();
    }
    fn run_begin(&self, variant: &str, threads: usize, job: &str) {
        eprint!("\r{variant} {threads}t {job} ...          ");
    }
    fn finished(&self) {
        eprint!("\r{:60}\r", "");
    }
}

/// The published indexes link jemalloc, whose initial-exec TLS does not fit
/// the static TLS space glibc keeps for libraries loaded later ("cannot
/// allocate memory in static TLS block"). The space is fixed when the process
/// starts, so a benchmark with a `pibench:` peer re-executes itself once with
/// `GLIBC_TUNABLES=glibc.rtld.optional_static_tls=` raised.
fn reexec_for_peers(a: &IndexBenchArgs) -> Result<()> {
    use std::os::unix::process::CommandExt;
    const TUNABLE: &str = "glibc.rtld.optional_static_tls";
    let peers = a
        .compare
        .iter()
        .flatten()
        .chain(a.index.iter())
        .any(|v| ferrite_bench::index::peers::is_peer(v));
    let current = std::env::var("GLIBC_TUNABLES").unwrap_or_default();
    if !peers || current.contains(TUNABLE) {
        return Ok(());
    }
    let tunables = if current.is_empty() {
        format!("{TUNABLE}=65536")
    } else {
        format!("{current}:{TUNABLE}=65536")
    };
    let exe = std::env::current_exe()?;
    let err = std::process::Command::new(exe)
        .args(std::env::args_os().skip(1))
        .env("GLIBC_TUNABLES", tunables)
        .exec();
    bail!("re-executing with GLIBC_TUNABLES for the PiBench peers: {err}")
}

fn index_bench(a: IndexBenchArgs) -> Result<i32> {
    reexec_for_peers(&a)?;
    if let Some(p) = &a.replot {
        let written = suite::replot(p, &a.out, &a.stem)?;
        let names: Vec<String> = written.iter().map(|p| p.display().to_string()).collect();
        println!("charts: {}", names.join(", "));
        return Ok(0);
    }
    let c = a.config();
    let show_progress = !a.json && std::io::stderr().is_terminal();
    let mut run = if show_progress {
        suite::run(
            &c,
            &Bar {
                pb: Mutex::new(ProgressBar::hidden()),
            },
        )?
    } else {
        suite::run(&c, &suite::Quiet)?
    };
    let paths = suite::write_outputs(&mut run, &a.out, &a.stem)?;
    if a.json {
        println!("{}", run.report.to_json());
    } else {
        print!("{}", suite::text(&run, Some(&paths)));
    }
    if run.wrong_ours > 0 {
        bail!(
            "{} wrong answers from Ferrite's indexes or the baselines (see the notes)",
            run.wrong_ours
        );
    }
    Ok(0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;
    use ferrite_bench::Distribution;

    #[derive(Parser)]
    struct T {
        #[command(flatten)]
        a: IndexBenchArgs,
    }

    fn parse(args: &str) -> IndexBenchArgs {
        T::try_parse_from(std::iter::once("bench").chain(args.split_whitespace()))
            .expect("parses")
            .a
    }

    #[test]
    fn a_pibench_command_line_carries_over() {
        let a = parse(
            "-n 1000 -p 500 -t 2 -k 16 -v 32 -f pre -r 0.5 -u 0.5 --scan_size 50 \
             --distribution SELFSIMILAR --skew 0.2 --seed 9 --latency_sampling 0.2 \
             --sampling_ms 100 --pool_path /dev/shm/x --pool_size 64M",
        );
        assert_eq!(
            (a.records, a.operations, a.threads.clone()),
            (1000, 500, vec![2])
        );
        assert_eq!(
            (a.key_size, a.value_size, a.key_prefix.as_str()),
            (16, 32, "pre")
        );
        assert_eq!(a.pool_size, Some(64 << 20));
        let c = a.config();
        let d = c.dist().unwrap();
        assert_eq!(d, Distribution::SelfSimilar(0.2));
        let j = c.jobs(d).unwrap();
        assert_eq!(j.len(), 1);
        assert_eq!(j[0].name, "r50i0u50d0s0");
        assert_eq!(j[0].mix.read, 0.5);
        assert_eq!(
            (c.scan_size, c.seed, c.latency_sampling, c.sampling_ms),
            (50, 9, 0.2, 100)
        );
    }

    #[test]
    fn read_ratio_defaults_to_the_rest_and_bad_sums_fail() {
        let a = parse("-i 1");
        let j = a.config().jobs(Distribution::Uniform).unwrap();
        assert_eq!(j[0].name, "insert");
        let a = parse("-r 0.9 -i 0.5");
        assert!(a.config().jobs(Distribution::Uniform).is_err());
    }

    #[test]
    fn standard_runs_and_mixed_use_selfsimilar() {
        let a = parse("--benches lookup,mixed");
        let j = a.config().jobs(Distribution::Uniform).unwrap();
        assert_eq!(j.len(), 2);
        assert_eq!(j[1].dist, Distribution::SelfSimilar(0.2));
        assert!(parse("--benches nope")
            .config()
            .jobs(Distribution::Uniform)
            .is_err());
    }

    #[test]
    fn the_defaults_are_the_suites_defaults() {
        let c = parse("").config();
        let d = IndexBenchConfig::default();
        assert_eq!(
            (
                c.records,
                c.operations,
                c.threads.clone(),
                c.key_size,
                c.value_size
            ),
            (
                d.records,
                d.operations,
                d.threads.clone(),
                d.key_size,
                d.value_size
            )
        );
        assert_eq!(
            (c.scan_size, c.seed, c.max_seconds),
            (d.scan_size, d.seed, d.max_seconds)
        );
        assert_eq!(c.benches, d.benches);
        assert_eq!(c.pool_dir, d.pool_dir);
    }

    #[test]
    fn a_small_comparison_writes_table_json_and_chart() {
        let out = std::env::temp_dir().join(format!("ferrite-bench-cli-{}", std::process::id()));
        let dir = std::env::temp_dir();
        let a = parse(&format!(
            "-n 2000 -p 2000 -t 1,2 --compare btreemap,redb-nosync --json --out {} --pool-dir {}",
            out.display(),
            dir.display()
        ));
        assert_eq!(index_bench(a).unwrap(), 0);
        let text = std::fs::read_to_string(out.join("index.json")).unwrap();
        let v: serde_json::Value = serde_json::from_str(&text).unwrap();
        let results = v["results"].as_array().unwrap();
        assert_eq!(results.len(), 2 * 2 * 6);
        for r in results {
            for f in [
                "bench", "variant", "param", "threads", "mops", "p50_ns", "p99_ns",
            ] {
                assert!(r.get(f).is_some(), "missing {f} in {r}");
            }
        }
        let lookup = results
            .iter()
            .find(|r| r["bench"] == "lookup" && r["variant"] == "btreemap")
            .unwrap();
        assert_eq!(lookup["hit_rate"], 1.0);
        assert!(std::fs::read_to_string(out.join("index.svg"))
            .unwrap()
            .starts_with("<svg"));
        assert!(out.join("index.md").exists());
        let _ = std::fs::remove_dir_all(&out);
    }
}
