//! `ferrite bench`: the PiBench-compatible index benchmark, and the dispatcher
//! of the other benchmark families.
//!
//! With no subcommand it loads `-n` records into each index named by `--index`
//! or `--compare` and runs PiBench-style operations on identical workloads. The
//! flags keep PiBench's names so a PiBench command line carries over.

use std::io::IsTerminal;
use std::path::PathBuf;
use std::sync::atomic::AtomicU64;

use anyhow::{bail, Context, Result};
use clap::{Args, Subcommand};
use ferrite_bench::variants::DEFAULT_COMPARE;
use ferrite_bench::{
    load, open_variant, run as run_workload, Distribution, KeyCodec, Op, OpMix, RunSpec,
    VariantConfig,
};
use ferrite_pm::persist;
use ferrite_report::{chart, BenchResult, Report};
use indicatif::{ProgressBar, ProgressStyle};
use serde_json::json;

use super::{elf, pmio};
use crate::util::{human, parse_size};

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
    Persist(super::pmbench::PersistArgs),
    /// Allocate+publish on the PM heap against the system allocator
    Alloc(super::pmbench::AllocArgs),
    /// Latency floor: dependent and independent random reads, pool vs DRAM
    Memory(super::membench::MemoryArgs),
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
    /// One index: ferrite, ferrite-dram, btreemap, redb, redb-nosync
    #[arg(long, conflicts_with = "compare")]
    pub index: Option<String>,
    /// Several indexes on identical workloads (default: ferrite,ferrite-dram,btreemap,redb)
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

pub fn run(a: BenchArgs) -> Result<i32> {
    match a.what {
        Some(BenchWhat::Persist(a)) => super::pmbench::persist(a),
        Some(BenchWhat::Alloc(a)) => super::pmbench::alloc(a),
        Some(BenchWhat::Memory(a)) => super::membench::memory(a),
        Some(BenchWhat::Log(a)) => pmio::run_bench("log", a),
        Some(BenchWhat::Page(a)) => pmio::run_bench("page", a),
        Some(BenchWhat::Inplace(a)) => pmio::run_bench("inplace", a),
        Some(BenchWhat::Interleave(a)) => pmio::run_bench("interleave", a),
        Some(BenchWhat::Elf(a)) => elf::run_bench(a),
        None => index_bench(*a.index),
    }
}

/// One named run: its operation mix and key distribution.
struct Job {
    name: String,
    mix: OpMix,
    dist: Distribution,
}

fn jobs(a: &IndexBenchArgs, dist: Distribution) -> Result<Vec<Job>> {
    let given = [a.insert_ratio, a.update_ratio, a.remove_ratio, a.scan_ratio];
    if a.read_ratio.is_some() || given.iter().any(Option::is_some) {
        let others: f64 = given.iter().map(|r| r.unwrap_or(0.0)).sum();
        let mix = OpMix {
            read: a.read_ratio.unwrap_or((1.0 - others).max(0.0)),
            insert: a.insert_ratio.unwrap_or(0.0),
            update: a.update_ratio.unwrap_or(0.0),
            remove: a.remove_ratio.unwrap_or(0.0),
            scan: a.scan_ratio.unwrap_or(0.0),
        };
        mix.validate()?;
        let name = match mix.single() {
            Some(op) => op_name(op).to_string(),
            None => format!(
                "r{}i{}u{}d{}s{}",
                pct(mix.read),
                pct(mix.insert),
                pct(mix.update),
                pct(mix.remove),
                pct(mix.scan)
            ),
        };
        return Ok(vec![Job { name, mix, dist }]);
    }
    let mut out = Vec::new();
    for b in &a.benches {
        let (mix, d) = match b.as_str() {
            "lookup" => (OpMix::only(Op::Read), dist),
            "insert" => (OpMix::only(Op::Insert), dist),
            "update" => (OpMix::only(Op::Update), dist),
            "remove" => (OpMix::only(Op::Remove), dist),
            "scan" => (OpMix::only(Op::Scan), dist),
            "mixed" => {
                let mut m = OpMix::only(Op::Read);
                m.read = 0.5;
                m.update = 0.5;
                (m, Distribution::SelfSimilar(0.2))
            }
            other => bail!(
                "unknown bench {other:?} in --benches (lookup, insert, update, remove, scan, mixed)"
            ),
        };
        out.push(Job {
            name: b.clone(),
            mix,
            dist: d,
        });
    }
    Ok(out)
}

fn pct(r: f64) -> u32 {
    (r * 100.0).round() as u32
}

fn op_name(op: Op) -> &'static str {
    match op {
        Op::Read => "lookup",
        Op::Insert => "insert",
        Op::Update => "update",
        Op::Remove => "remove",
        Op::Scan => "scan",
    }
}

fn replot(a: &IndexBenchArgs, path: &std::path::Path) -> Result<i32> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    let r: Report = serde_json::from_str(&text)
        .with_context(|| format!("{} is not a ferrite bench report", path.display()))?;
    if r.results.is_empty() || !r.environment.contains_key("workload") {
        bail!("{} holds no index benchmark results", path.display());
    }
    std::fs::create_dir_all(&a.out).with_context(|| format!("creating {}", a.out.display()))?;
    let mut written = Vec::new();
    for (name, svg) in [
        (format!("{}.svg", a.stem), Some(throughput_chart(&r, false))),
        (
            format!("{}-cpu.svg", a.stem),
            Some(throughput_chart(&r, true)),
        ),
        (
            format!("{}-latency.svg", a.stem),
            latency_chart(&r, r.results[0].threads as usize),
        ),
    ] {
        if let Some(svg) = svg {
            let p = a.out.join(name);
            std::fs::write(&p, svg).with_context(|| format!("writing {}", p.display()))?;
            written.push(p.display().to_string());
        }
    }
    println!("charts: {}", written.join(", "));
    Ok(0)
}

fn index_bench(a: IndexBenchArgs) -> Result<i32> {
    if let Some(p) = &a.replot {
        return replot(&a, p);
    }
    let skew = a
        .skew
        .unwrap_or(if a.distribution.eq_ignore_ascii_case("ZIPFIAN") {
            0.99
        } else {
            0.2
        });
    let dist = Distribution::parse(&a.distribution, skew)?;
    let codec = KeyCodec::new(a.key_size, a.value_size, &a.key_prefix)?;
    let jobs = jobs(&a, dist)?;
    if a.threads.contains(&0) {
        bail!("-t must be at least 1");
    }
    let variants: Vec<String> = match (&a.index, &a.compare) {
        (Some(i), _) => vec![i.clone()],
        (None, Some(c)) => c.clone(),
        (None, None) => DEFAULT_COMPARE.iter().map(|s| s.to_string()).collect(),
    };
    if let Some(bad) = variants
        .iter()
        .find(|v| !ferrite_bench::VARIANTS.contains(&v.as_str()))
    {
        bail!(
            "unknown index {bad:?} (known: {})",
            ferrite_bench::VARIANTS.join(", ")
        );
    }
    if a.scan_size == 0 && jobs.iter().any(|j| j.mix.scan > 0.0) {
        bail!("--scan_size must be at least 1");
    }
    if a.skip_load && a.pool_path.is_none() {
        bail!("--skip_load needs --pool_path (the pool holding the loaded index)");
    }
    if a.skip_load && variants.iter().any(|v| v != "ferrite") {
        bail!("--skip_load works only with --index ferrite (the others do not persist)");
    }
    let inserts_per_run = jobs
        .iter()
        .map(|j| (j.mix.insert * a.operations as f64) as u64)
        .sum::<u64>();
    let cfg = VariantConfig {
        pool_dir: a.pool_dir.clone(),
        pool_path: a.pool_path.clone(),
        pool_size: a.pool_size.unwrap_or(0),
        max_records: a.records + inserts_per_run,
        key_len: codec.key_len(),
        value_size: a.value_size,
        reopen: a.skip_load,
        redb_load_batch: a.redb_load_batch,
    };
    let param = (a.key_size != 8 || a.value_size != 8).then(|| {
        if a.value_size == 8 {
            json!(a.key_size)
        } else {
            json!(format!("k{}v{}", a.key_size, a.value_size))
        }
    });

    let mut r = Report::new("index");
    r.environment.insert(
        "best_flush".into(),
        json!(persist::best_flush_kind().name()),
    );
    let (fi, li) = persist::latency_injection();
    r.environment.insert(
        "latency_injection_ns".into(),
        json!({"fence": fi, "line": li}),
    );
    r.environment.insert(
        "workload".into(),
        json!({
            "records": a.records, "operations": a.operations, "key_size": a.key_size,
            "value_size": a.value_size, "key_prefix": a.key_prefix, "distribution": dist.name(),
            "scan_size": a.scan_size, "seed": a.seed, "latency_sampling": a.latency_sampling,
            "max_seconds": a.max_seconds,
        }),
    );
    r.environment
        .insert("loadavg_before".into(), json!(loadavg()));
    r.environment.insert(
        "cpus".into(),
        json!(std::thread::available_parallelism().map_or(0, |n| n.get())),
    );
    let show_progress = !a.json && std::io::stderr().is_terminal();
    let mut wrong = 0u64;
    for v in &variants {
        {
            // One load per index (with the first thread count), then every run at
            // every thread count: PiBench reloads per run; we keep the default short.
            let lt = a.threads[0];
            let inst = open_variant(v, &cfg).with_context(|| format!("opening index {v}"))?;
            r.notes.push(format!("{v}: {}", inst.durability));
            r.notes.extend(inst.notes.iter().cloned());
            let kv = inst.kv.as_ref();
            let (load_s, load_mops, load_f, load_l, load_cpu) = if a.skip_load {
                (0.0, 0.0, 0.0, 0.0, 0.0)
            } else {
                let pb = if !show_progress {
                    ProgressBar::hidden()
                } else {
                    ProgressBar::new(a.records)
                };
                pb.set_style(
                    ProgressStyle::with_template(
                        "{prefix:>14} load [{bar:40}] {pos}/{len} {per_sec} eta {eta}",
                    )
                    .unwrap_or_else(|_| ProgressStyle::default_bar())
                    .progress_chars("=> "),
                );
                pb.set_prefix(format!("{v} {lt}t"));
                let ls = load(kv, &codec, a.records, lt, inst.load_batch, &|d| {
                    pb.set_position(d)
                })
                .with_context(|| format!("loading {v}"))?;
                pb.finish_and_clear();
                if ls.inserted != a.records {
                    r.notes.push(format!(
                        "{v}: {} of {} loaded keys were distinct (keys of {} bytes collide)",
                        ls.inserted, a.records, a.key_size
                    ));
                }
                let n = a.records.max(1) as f64;
                (
                    ls.secs,
                    a.records as f64 / ls.secs.max(1e-9) / 1e6,
                    ls.persist.fences as f64 / n,
                    ls.persist.flushed_lines as f64 / n,
                    ls.cpu_secs,
                )
            };
            let key_space = if a.skip_load {
                kv.count() as u64
            } else {
                a.records
            };
            let mem = inst.memory();
            let per_rec = |b: Option<u64>| b.map(|x| x as f64 / key_space.max(1) as f64);
            let next_fresh = AtomicU64::new(a.records.max(key_space) + (1 << 40));
            for j in &jobs {
                for &t in &a.threads {
                    let spec = RunSpec {
                        mix: j.mix,
                        dist: j.dist,
                        ops: a.operations,
                        threads: t,
                        scan_size: a.scan_size,
                        latency_sampling: a.latency_sampling,
                        sampling_ms: a.sampling_ms,
                        seed: a.seed,
                        max_seconds: (a.max_seconds > 0.0).then_some(a.max_seconds),
                    };
                    if show_progress {
                        eprint!("\r{v} {t}t {} ...          ", j.name);
                    }
                    let st = run_workload(kv, &codec, key_space, &next_fresh, &spec)
                        .with_context(|| format!("{} on {v}", j.name))?;
                    wrong += st.wrong_values;
                    let ops = st.ops.max(1) as f64;
                    let mut b = BenchResult::new(&j.name, v, param.clone(), t as u32, st.mops())
                        .with("ops", st.ops)
                        .with("run_s", st.secs)
                        .with("cpu_s", st.cpu_secs)
                        .with("mops_cpu", st.mops_cpu(t))
                        .with("fences_per_op", st.persist.fences as f64 / ops)
                        .with("lines_per_op", st.persist.flushed_lines as f64 / ops)
                        .with("load_s", load_s)
                        .with("load_threads", lt)
                        .with("load_cpu_s", load_cpu)
                        .with("load_mops", load_mops)
                        .with("load_fences_per_insert", load_f)
                        .with("load_lines_per_insert", load_l)
                        .with("distribution", j.dist.name())
                        .with("hit_rate", st.succeeded.iter().sum::<u64>() as f64 / ops)
                        .with("samples_mops", st.samples.clone());
                    if let Some(x) = mem.dram_bytes {
                        b = b.with("dram_bytes", x);
                    }
                    if let Some(x) = mem.pm_bytes {
                        b = b.with("pm_bytes", x);
                    }
                    if let Some(x) = per_rec(mem.dram_bytes) {
                        b = b
                            .with("dram_B_per_rec", x)
                            .with("dram_source", mem.dram_source);
                    }
                    if let Some(x) = per_rec(mem.pm_bytes) {
                        b = b.with("pm_B_per_rec", x).with("pm_source", mem.pm_source);
                    }
                    if j.mix.scan > 0.0 {
                        b = b.with("scanned", st.scanned);
                    }
                    if let Some(l) = st.latency {
                        b.p50_ns = Some(l.p50);
                        b.p99_ns = Some(l.p99);
                        b = b
                            .with("p90_ns", l.p90)
                            .with("p999_ns", l.p999)
                            .with("p9999_ns", l.p9999)
                            .with("p99999_ns", l.p99999)
                            .with("max_ns", l.max)
                            .with("latency_samples", l.samples);
                    }
                    if st.stopped_early {
                        b = b.with("stopped_early", true);
                        r.notes.push(format!(
                            "{} on {v} {t}t stopped after --max-seconds {}: {} of {} operations",
                            j.name, a.max_seconds, st.ops, a.operations
                        ));
                    }
                    if st.wrong_values > 0 {
                        r.notes.push(format!(
                            "ERROR: {} on {v}: {} lookups returned another key's value",
                            j.name, st.wrong_values
                        ));
                    }
                    r.results.push(b);
                }
            }
            drop(inst);
        }
    }
    if show_progress {
        eprint!("\r{:60}\r", "");
    }
    r.environment
        .insert("loadavg_after".into(), json!(loadavg()));
    r.notes.push(
        "mops_cpu = operations per on-CPU second of a worker (as if each had a core to itself): compare it with Mops/s when the load average is above the core count".into(),
    );
    if a.latency_sampling > 0.0 {
        r.notes.push(format!(
            "latency: {:.0}% of operations timed (nearest-rank percentiles)",
            a.latency_sampling * 100.0
        ));
    }
    r.notes.push(
        "each index is loaded once (with the first -t); runs then follow each other in the order shown, every thread count in turn (inserts add fresh keys, removes delete loaded ones); dram/pm bytes are measured after the load".into(),
    );
    let cols = [
        "mops_cpu",
        "p90_ns",
        "p999_ns",
        "p99999_ns",
        "max_ns",
        "fences_per_op",
        "lines_per_op",
        "load_s",
        "dram_B_per_rec",
        "pm_B_per_rec",
    ];
    let svg = throughput_chart(&r, false);
    {
        let p = a.out.join(format!("{}-cpu.svg", a.stem));
        std::fs::create_dir_all(&a.out)
            .and_then(|_| std::fs::write(&p, throughput_chart(&r, true)))
            .with_context(|| format!("writing {}", p.display()))?;
        r.notes
            .push(format!("on-CPU throughput chart: {}", p.display()));
    }
    if let Some(lat) = latency_chart(&r, a.threads[0]) {
        let p = a.out.join(format!("{}-latency.svg", a.stem));
        std::fs::create_dir_all(&a.out)
            .and_then(|_| std::fs::write(&p, lat))
            .with_context(|| format!("writing {}", p.display()))?;
        r.notes
            .push(format!("latency chart (p50..p99.99): {}", p.display()));
    }
    let path = r
        .write_outputs(&a.out, &a.stem, &cols, &svg)
        .with_context(|| format!("writing results to {}", a.out.display()))?;
    r.print(a.json, &cols, Some(&path));
    if !a.json {
        if let Some(first) = r.results.first() {
            if let (Some(d), Some(p)) = (
                first.extra.get("dram_bytes").and_then(|v| v.as_u64()),
                first.extra.get("pm_bytes").and_then(|v| v.as_u64()),
            ) {
                println!(
                    "{} after load: {} DRAM, {} PM",
                    first.variant,
                    human(d),
                    human(p)
                );
            }
        }
        println!(
            "results: {} and {}",
            a.out.join(format!("{}.json", a.stem)).display(),
            a.out.join(format!("{}.md", a.stem)).display()
        );
    }
    if wrong > 0 {
        bail!("{wrong} lookups returned a value of another key");
    }
    Ok(0)
}

/// The 1-minute load average: other work on this shared machine skews results.
fn loadavg() -> Option<f64> {
    std::fs::read_to_string("/proc/loadavg")
        .ok()?
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

/// Tail latency of lookups and inserts at one thread count, like VLDB'22 Fig. 6:
/// x is the number of nines of the percentile (p50 = 0.3, p90 = 1, p99 = 2, ...),
/// y is log10 of nanoseconds (preemption spikes would flatten a linear axis).
fn latency_chart(r: &Report, threads: usize) -> Option<String> {
    let keys = [
        ("p50_ns", 0.5f64),
        ("p90_ns", 0.9),
        ("p99_ns", 0.99),
        ("p999_ns", 0.999),
        ("p9999_ns", 0.9999),
    ];
    let mut series = Vec::new();
    for x in r
        .results
        .iter()
        .filter(|x| x.threads as usize == threads && (x.bench == "lookup" || x.bench == "insert"))
    {
        let pts: Vec<(f64, f64)> = keys
            .iter()
            .filter_map(|(k, q)| {
                let v = match *k {
                    "p50_ns" => x.p50_ns,
                    "p99_ns" => x.p99_ns,
                    _ => x.extra.get(*k).and_then(|v| v.as_f64()),
                }?;
                Some((-(1.0 - q).log10(), v.max(1.0).log10()))
            })
            .collect();
        if !pts.is_empty() {
            series.push(chart::Series {
                name: format!("{} {}", x.variant, x.bench),
                points: pts,
            });
        }
    }
    (!series.is_empty()).then(|| {
        chart::line_chart(
            &format!("Tail latency, {threads} thread(s)"),
            "percentile, in nines (0.3 = p50, 1 = p90, 2 = p99, 3 = p99.9, 4 = p99.99)",
            "latency, log10 ns (2 = 100 ns, 3 = 1 us, 4 = 10 us, 6 = 1 ms)",
            &series,
            false,
        )
    })
}

/// Mops/s per run (and thread count), one bar per index.
/// 10000000 -> "10M", 250000 -> "250K".
fn count_text(n: u64) -> String {
    if n >= 1_000_000 && n.is_multiple_of(1_000_000) {
        format!("{}M", n / 1_000_000)
    } else if n >= 1000 && n.is_multiple_of(1000) {
        format!("{}K", n / 1000)
    } else {
        n.to_string()
    }
}

/// `on_cpu` charts operations per on-CPU second instead of wall-clock Mops/s.
fn throughput_chart(r: &Report, on_cpu: bool) -> String {
    let w = r.environment.get("workload");
    let num = |k: &str| {
        w.and_then(|w| w.get(k))
            .and_then(|v| v.as_u64())
            .unwrap_or(0)
    };
    let mut cats: Vec<(String, u32)> = Vec::new();
    for x in &r.results {
        let c = (x.bench.clone(), x.threads);
        if !cats.contains(&c) {
            cats.push(c);
        }
    }
    let mut variants: Vec<String> = Vec::new();
    for x in &r.results {
        if !variants.contains(&x.variant) {
            variants.push(x.variant.clone());
        }
    }
    let multi_t = r.results.iter().any(|x| x.threads != r.results[0].threads);
    let labels: Vec<String> = cats
        .iter()
        .map(|(b, t)| {
            if multi_t {
                // Short names: twelve groups share the chart's width.
                let short = match b.as_str() {
                    "lookup" => "get",
                    "update" => "upd",
                    "insert" => "ins",
                    "remove" => "del",
                    "mixed" => "mix",
                    other => other,
                };
                format!("{short} {t}t")
            } else {
                b.clone()
            }
        })
        .collect();
    let series: Vec<(String, Vec<f64>)> = variants
        .iter()
        .map(|v| {
            let vals = cats
                .iter()
                .map(|(b, t)| {
                    r.results
                        .iter()
                        .find(|x| &x.bench == b && x.threads == *t && &x.variant == v)
                        .map_or(0.0, |x| {
                            if on_cpu {
                                x.extra
                                    .get("mops_cpu")
                                    .and_then(|m| m.as_f64())
                                    .unwrap_or(0.0)
                            } else {
                                x.mops
                            }
                        })
                })
                .collect();
            (v.clone(), vals)
        })
        .collect();
    chart::bar_chart(
        &format!(
            "Throughput{}: {} records, {} B keys, {} B values",
            if on_cpu { " per on-CPU second" } else { "" },
            count_text(num("records")),
            num("key_size"),
            num("value_size")
        ),
        if on_cpu {
            "Mops per on-CPU second of a worker"
        } else {
            "Mops/s"
        },
        &labels,
        &series,
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

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
        let d = Distribution::parse(&a.distribution, a.skew.unwrap()).unwrap();
        let j = jobs(&a, d).unwrap();
        assert_eq!(j.len(), 1);
        assert_eq!(j[0].name, "r50i0u50d0s0");
        assert_eq!(j[0].mix.read, 0.5);
    }

    #[test]
    fn read_ratio_defaults_to_the_rest_and_bad_sums_fail() {
        let a = parse("-i 1");
        let j = jobs(&a, Distribution::Uniform).unwrap();
        assert_eq!(j[0].name, "insert");
        let a = parse("-r 0.9 -i 0.5");
        assert!(jobs(&a, Distribution::Uniform).is_err());
    }

    #[test]
    fn standard_runs_and_mixed_use_selfsimilar() {
        let a = parse("--benches lookup,mixed");
        let j = jobs(&a, Distribution::Uniform).unwrap();
        assert_eq!(j.len(), 2);
        assert_eq!(j[1].dist, Distribution::SelfSimilar(0.2));
        assert!(jobs(&parse("--benches nope"), Distribution::Uniform).is_err());
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
