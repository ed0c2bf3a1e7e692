//! `ferrite elf …` and `ferrite bench elf`: a thin layer over `ferrite-elf`.

use std::io::Write;
use std::path::PathBuf;
use std::time::Instant;

use anyhow::{bail, Context, Result};
use clap::{Args, Subcommand};
use ferrite_bench::elf::BenchConfig;
use ferrite_elf::store::{CreateOptions, ElfStore};
use ferrite_elf::table::{ColumnKind, CsvOptions};
use ferrite_elf::{ElfError, Table, Variant};
use ferrite_pm::{Pool, PoolOptions};

use crate::util::{human, parse_size};

#[derive(Subcommand)]
pub enum ElfCommand {
    /// Build an Elf from a CSV file (with a header row) into a pool, created if missing
    Build(BuildArgs),
    /// Print the TIDs (0-based CSV data row numbers) of the rows matching --where
    Query(QueryArgs),
    /// Show an Elf's columns, rows and sizes
    Info(InfoArgs),
    /// Append CSV rows (same column names) through the crash-safe delta
    Insert(InsertArgs),
    /// Merge the delta into a new Elf generation, published atomically
    Merge(InfoArgs),
}

#[derive(Args)]
pub struct InsertArgs {
    pub pool: PathBuf,
    /// CSV file with a header naming the Elf's columns
    #[arg(long)]
    pub csv: PathBuf,
    #[arg(long, default_value = "elf")]
    pub name: String,
    /// Merge the delta after inserting
    #[arg(long)]
    pub merge: bool,
}

#[derive(Args)]
pub struct BuildArgs {
    /// Pool file (created when it does not exist)
    pub pool: PathBuf,
    /// CSV file; the first row names the columns
    #[arg(long)]
    pub csv: PathBuf,
    /// Columns to index, by header name, comma-separated (default: all)
    #[arg(long, value_delimiter = ',')]
    pub columns: Option<Vec<String>>,
    /// Order the Elf's levels by ascending cardinality (queries still use names)
    #[arg(long)]
    pub reorder: bool,
    /// Field delimiter (default: guessed from the header among , | tab ;)
    #[arg(long)]
    pub delimiter: Option<char>,
    /// Load at most this many data rows
    #[arg(long)]
    pub limit: Option<u64>,
    /// Name of the Elf object in the pool
    #[arg(long, default_value = "elf")]
    pub name: String,
    /// Size of a new pool (default: enough for the Elf, with room for one merge)
    #[arg(long, value_parser = parse_size)]
    pub size: Option<u64>,
    /// Rows the insert delta holds before a merge
    #[arg(long, default_value_t = 65_536)]
    pub delta_capacity: u64,
    /// Print one JSON object
    #[arg(long)]
    pub json: bool,
}

#[derive(Args)]
pub struct QueryArgs {
    pub pool: PathBuf,
    /// Predicates: NAME=V (exact) or NAME=LO..HI (inclusive; either side may be
    /// empty), comma-separated; unnamed columns are unconstrained
    #[arg(long = "where", default_value = "")]
    pub where_: String,
    /// Print only the number of matching rows
    #[arg(long)]
    pub count: bool,
    #[arg(long, default_value = "elf")]
    pub name: String,
    /// dram | pm | hybrid | static:X | dyn:POLICY:BYTES[:PARTITIONS]
    #[arg(long, default_value = "pm")]
    pub variant: String,
    /// Threads for large queries (chosen automatically from a work estimate)
    #[arg(long, default_value_t = 2)]
    pub threads: usize,
}

#[derive(Args)]
pub struct InfoArgs {
    pub pool: PathBuf,
    #[arg(long, default_value = "elf")]
    pub name: String,
    #[arg(long)]
    pub json: bool,
}

#[derive(Args, Debug)]
pub struct ElfBenchArgs {
    /// Experiments, comma-separated: build, overhead, static, dynamic, warmup,
    /// parallel, tpch, or all (all but tpch unless --tpch-csv is given)
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "build,overhead,static,dynamic,warmup,parallel"
    )]
    pub experiment: Vec<String>,
    /// Rows of the uniform table (10 integer columns of cardinality 100)
    #[arg(long, default_value_t = 10_000_000)]
    pub rows: usize,
    #[arg(long, default_value_t = 10)]
    pub cols: usize,
    #[arg(long, default_value_t = 100)]
    pub card: u32,
    /// Exact-match queries per cell (range sets use a tenth, 100% ranges 1/5000)
    #[arg(long, default_value_t = 100_000)]
    pub queries: usize,
    /// Rows of each table in the parallel grid
    #[arg(long, default_value_t = 2_000_000)]
    pub grid_rows: usize,
    #[arg(long, default_value_t = 42)]
    pub seed: u64,
    #[arg(long, default_value_t = 2)]
    pub threads: usize,
    /// Model PM read latency: ns added per cache line read from the PM array
    #[arg(long, default_value_t = 0)]
    pub read_ns: u64,
    /// TPC-H lineitem CSV (scripts/tpch/gen_lineitem.py)
    #[arg(long)]
    pub tpch_csv: Option<PathBuf>,
    /// Python interpreter with duckdb, to run the DuckDB baseline on the same predicates
    #[arg(long)]
    pub duckdb_python: Option<PathBuf>,
    #[arg(long, default_value = "scripts/tpch/duckdb_baseline.py")]
    pub duckdb_script: PathBuf,
    #[command(flatten)]
    pub io: super::bench::BenchIo,
}

/// Keeps a pool error visible to the exit-code logic (2 = missing/bad pool).
fn lift(e: ElfError) -> anyhow::Error {
    match e {
        ElfError::Pm(p) => anyhow::Error::from(p),
        e => anyhow::Error::from(e),
    }
}

pub fn run(c: ElfCommand) -> Result<i32> {
    match c {
        ElfCommand::Build(a) => build(a),
        ElfCommand::Query(a) => query(a),
        ElfCommand::Info(a) => info(a),
        ElfCommand::Insert(a) => insert(a),
        ElfCommand::Merge(a) => merge(a),
    }
}

fn insert(a: InsertArgs) -> Result<i32> {
    let store = open_store(&a.pool, &a.name, Variant::Pm, true)?;
    let Some(schema) = store.schema() else {
        bail!("the Elf has no schema (it was built through the API)");
    };
    let f = std::fs::File::open(&a.csv).with_context(|| format!("reading {}", a.csv.display()))?;
    let rows = ferrite_elf::table::encode_csv_rows(f, &a.csv.display().to_string(), schema)
        .map_err(lift)?;
    let mut first = None;
    let mut last = 0;
    for r in &rows {
        let t = store.insert(r).map_err(lift)?;
        first.get_or_insert(t);
        last = t;
    }
    if a.merge {
        store.merge().map_err(lift)?;
    }
    match first {
        Some(f) => println!("inserted {} rows (TIDs {f}..={last})", rows.len()),
        None => println!("no rows to insert"),
    }
    Ok(0)
}

fn merge(a: InfoArgs) -> Result<i32> {
    let store = open_store(&a.pool, &a.name, Variant::Pm, true)?;
    let before = store.current().generation;
    store.merge().map_err(lift)?;
    let g = store.current();
    println!(
        "generation {before} -> {}: {} rows in the Elf, {} in the delta",
        g.generation,
        g.base_rows(),
        g.delta_rows()
    );
    Ok(0)
}

fn build(a: BuildArgs) -> Result<i32> {
    let total = std::fs::metadata(&a.csv)
        .with_context(|| format!("reading {}", a.csv.display()))?
        .len();
    let bar = indicatif::ProgressBar::new(total);
    if !a.json {
        bar.set_style(
            indicatif::ProgressStyle::with_template(
                "loading {bar:40} {bytes}/{total_bytes} ({bytes_per_sec}, {eta})",
            )
            .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
        );
    } else {
        bar.set_draw_target(indicatif::ProgressDrawTarget::hidden());
    }
    let t0 = Instant::now();
    let opts = CsvOptions {
        delimiter: a.delimiter,
        columns: a.columns.clone(),
        limit: a.limit,
    };
    let mut table = Table::from_csv(&a.csv, &opts, |b| bar.set_position(b)).map_err(lift)?;
    bar.finish_and_clear();
    let load_s = t0.elapsed().as_secs_f64();
    if a.reorder {
        table.reorder_by_cardinality();
    }
    let t1 = Instant::now();
    let built = ferrite_elf::build::build(&table.slices()).map_err(lift)?;
    let build_s = t1.elapsed().as_secs_f64();
    let elf_bytes = built.words.len() as u64 * 4;
    let pool = if a.pool.exists() {
        Pool::open(&a.pool, &PoolOptions::default())
            .with_context(|| format!("opening {}", a.pool.display()))?
    } else {
        let delta = a.delta_capacity * (table.cols.len() as u64 + 1) * 4;
        let need = (2 * elf_bytes + 2 * delta + (table.nrows() as u64 * 16) + (64 << 20))
            .next_multiple_of(1 << 20);
        let size = a.size.unwrap_or(need);
        Pool::create(&a.pool, size, &PoolOptions::default())
            .with_context(|| format!("creating {}", a.pool.display()))?
    };
    let t2 = Instant::now();
    let store = ElfStore::create(
        &pool,
        &a.name,
        &built,
        Some(&table.schema),
        &CreateOptions {
            delta_capacity: a.delta_capacity,
            nonce: None,
        },
        Variant::Pm,
    )
    .map_err(lift)
    .with_context(|| format!("storing the Elf in {}", a.pool.display()))?;
    let publish_s = t2.elapsed().as_secs_f64();
    let rows = store.rows();
    let names: Vec<String> = table
        .schema
        .columns
        .iter()
        .map(|c| c.name.clone())
        .collect();
    if a.json {
        println!(
            "{}",
            serde_json::json!({
                "pool": a.pool, "name": a.name, "rows": rows, "columns": names,
                "elf_bytes": elf_bytes, "load_s": load_s, "build_s": build_s,
                "publish_s": publish_s, "durability": pool.durability().name(),
            })
        );
    } else {
        println!(
            "built Elf {:?} in {}: {rows} rows x {} columns ({}), {}",
            a.name,
            a.pool.display(),
            names.len(),
            names.join(", "),
            human(elf_bytes)
        );
        println!(
            "load {load_s:.2}s, build {build_s:.2}s, copy to PM + publish {publish_s:.2}s; durability: {}",
            pool.durability().describe()
        );
    }
    Ok(0)
}

/// Opens the Elf. Commands that only read open the pool read-only (a shared
/// lock, so they run beside other readers and never modify the file); `insert`
/// and `merge` open it for writing (an exclusive lock).
fn open_store(pool: &PathBuf, name: &str, variant: Variant, write: bool) -> Result<ElfStore> {
    let opts = PoolOptions {
        read_only: !write,
        ..PoolOptions::default()
    };
    let p = Pool::open(pool, &opts).with_context(|| format!("opening {}", pool.display()))?;
    ElfStore::open(&p, name, variant, true)
        .map_err(lift)
        .with_context(|| format!("opening the Elf in {}", pool.display()))
}

fn query(a: QueryArgs) -> Result<i32> {
    let Some(variant) = Variant::parse(&a.variant) else {
        bail!(
            "unknown variant {:?} (dram, pm, hybrid, static:X, dyn:POLICY:BYTES[:PARTS])",
            a.variant
        );
    };
    let store = open_store(&a.pool, &a.name, variant, false)?;
    let Some(schema) = store.schema() else {
        bail!("the Elf has no schema (it was built through the API); query it through the API");
    };
    let q = schema.parse_where(&a.where_).map_err(lift)?;
    if a.count {
        println!("{}", store.count(&q, a.threads).map_err(lift)?);
        return Ok(0);
    }
    let mut tids = store.collect(&q, a.threads).map_err(lift)?;
    tids.sort_unstable();
    let out = std::io::stdout();
    let mut w = std::io::BufWriter::new(out.lock());
    for t in tids {
        if writeln!(w, "{t}").is_err() {
            break; // e.g. a closed pipe (| head)
        }
    }
    let _ = w.flush();
    Ok(0)
}

fn info(a: InfoArgs) -> Result<i32> {
    let store = open_store(&a.pool, &a.name, Variant::Pm, false)?;
    let g = store.current();
    let cols: Vec<serde_json::Value> = store
        .schema()
        .map(|s| {
            s.columns
                .iter()
                .map(|c| {
                    let (kind, distinct) = match &c.kind {
                        ColumnKind::Int { .. } => ("integer", None),
                        ColumnKind::Num(d) => ("number (dictionary)", Some(d.len())),
                        ColumnKind::Str(d) => ("text (dictionary)", Some(d.len())),
                    };
                    serde_json::json!({"name": c.name, "kind": kind, "dictionary": distinct})
                })
                .collect()
        })
        .unwrap_or_default();
    let v = serde_json::json!({
        "name": a.name,
        "generation": g.generation,
        "rows": g.base_rows() + g.delta_rows(),
        "elf_rows": g.base_rows(),
        "delta_rows": g.delta_rows(),
        "elf_bytes": g.elf.base_bytes(),
        "columns": cols,
    });
    let mut out = String::new();
    if a.json {
        out.push_str(&format!("{v}\n"));
    } else {
        out.push_str(&format!(
            "Elf {:?}: generation {}, {} rows ({} in the Elf, {} in the delta), {}\n",
            a.name,
            g.generation,
            g.base_rows() + g.delta_rows(),
            g.base_rows(),
            g.delta_rows(),
            human(g.elf.base_bytes() as u64)
        ));
        for c in cols {
            out.push_str(&format!(
                "  {:<20} {}{}\n",
                c["name"].as_str().unwrap_or(""),
                c["kind"].as_str().unwrap_or(""),
                c["dictionary"]
                    .as_u64()
                    .map(|d| format!(", {d} distinct"))
                    .unwrap_or_default()
            ));
        }
    }
    // A closed pipe (`| head`) is not an error.
    let _ = std::io::stdout().lock().write_all(out.as_bytes());
    Ok(0)
}

pub fn run_bench(a: ElfBenchArgs) -> Result<i32> {
    let mut experiments = a.experiment.clone();
    if experiments.iter().any(|e| e == "all") {
        experiments = [
            "build", "overhead", "static", "dynamic", "warmup", "parallel",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        if a.tpch_csv.is_some() {
            experiments.push("tpch".into());
        }
    }
    let cfg = BenchConfig {
        rows: a.rows,
        cols: a.cols,
        card: a.card,
        queries: a.queries,
        seed: a.seed,
        pool_dir: a.io.pool_dir.clone(),
        threads: a.threads,
        read_ns: a.read_ns,
        experiments,
        tpch_csv: a.tpch_csv.clone(),
        duckdb_python: a.duckdb_python.clone(),
        duckdb_script: a.duckdb_script.clone(),
        grid_rows: a.grid_rows,
        out: a.io.out.clone(),
    };
    let quiet = a.io.json;
    let (mut report, charts) = ferrite_bench::elf::run(&cfg, &mut |m| {
        if !quiet {
            eprintln!("[elf] {m}");
        }
    })
    .map_err(lift)?;
    report.command = std::env::args().collect::<Vec<_>>().join(" ");
    std::fs::create_dir_all(&a.io.out)?;
    let mut first_chart = None;
    for (stem, svg) in &charts {
        let p = a.io.out.join(format!("{stem}.svg"));
        std::fs::write(&p, svg)?;
        first_chart.get_or_insert(p);
    }
    let extra = [
        "ns_per_query",
        "vs_dram",
        "base_lines_per_q",
        "seconds",
        "speedup_vs_seq",
    ];
    let main_svg = charts.first().map_or("", |c| c.1.as_str());
    let main = report.write_outputs(&a.io.out, "elf", &extra, main_svg)?;
    report.print(a.io.json, &extra, first_chart.as_deref().or(Some(&main)));
    Ok(0)
}
