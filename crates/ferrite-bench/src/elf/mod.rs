//! The Elf papers' experiments, as ratios on this machine (`ferrite bench elf`).
//!
//! Every measured cell becomes a [`BenchResult`] (`mops` = million queries, or
//! rows for builds, per second) with `ns_per_query` and the hardware-independent
//! costs `base_lines_per_q` (cache lines read from the base array: PM for a PM
//! Elf) and `dram_nodes_per_q`.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use ferrite_elf::build::build;
use ferrite_elf::query::{Query, QueryStats};
use ferrite_elf::store::{CreateOptions, ElfStore};
use ferrite_elf::table::{ColumnKind, CsvOptions, Table};
use ferrite_elf::{DynSpec, Elf, ElfError, Policy, Result, Variant};
use ferrite_pm::clock::{thread_cpu_ns, CpuTimer};
use ferrite_pm::rng::SplitMix;
use ferrite_pm::{persist, TempPool};
use ferrite_report::{chart, BenchResult, Report};
use serde_json::json;

use crate::env;

/// What to run and at which scale.
#[derive(Debug, Clone)]
pub struct BenchConfig {
    /// Rows of the uniform table.
    pub rows: usize,
    pub cols: usize,
    pub card: u32,
    /// Exact-match queries per measurement (range sets are smaller, see `sizes`).
    pub queries: usize,
    pub seed: u64,
    pub pool_dir: PathBuf,
    pub threads: usize,
    /// Modelled PM read latency per base cache line (0 = off; labelled in output).
    pub read_ns: u64,
    /// Experiments: build, overhead, static, dynamic, warmup, parallel, tpch.
    pub experiments: Vec<String>,
    /// lineitem CSV for the `tpch` experiment.
    pub tpch_csv: Option<PathBuf>,
    /// Python with duckdb to run `scripts/tpch/duckdb_baseline.py` (tpch only).
    pub duckdb_python: Option<PathBuf>,
    /// Where the baseline script is.
    pub duckdb_script: PathBuf,
    /// Rows per table of the parallel grid.
    pub grid_rows: usize,
    /// Directory for the query file handed to DuckDB.
    pub out: PathBuf,
}

/// Zipf(theta) over ranks 0..n: rank r has weight 1/(r+1)^theta.
pub struct Zipf {
    cdf: Vec<f64>,
}

impl Zipf {
    pub fn new(n: usize, theta: f64) -> Zipf {
        let mut cdf = Vec::with_capacity(n);
        let mut s = 0.0;
        for r in 0..n.max(1) {
            s += 1.0 / ((r + 1) as f64).powf(theta);
            cdf.push(s);
        }
        for c in &mut cdf {
            *c /= s;
        }
        Zipf { cdf }
    }
    pub fn sample(&self, rng: &mut SplitMix) -> usize {
        let u = (rng.next() >> 11) as f64 / (1u64 << 53) as f64;
        self.cdf.partition_point(|&c| c < u).min(self.cdf.len() - 1)
    }
}

/// Uniform random table: `cols` columns of values `0..card`.
pub fn uniform_table(rows: usize, cols: usize, card: u32, seed: u64) -> Vec<Vec<u32>> {
    (0..cols)
        .map(|c| {
            let mut rng = SplitMix(seed ^ (c as u64 + 1).wrapping_mul(0x9E37_79B9));
            (0..rows).map(|_| rng.below(card as u64) as u32).collect()
        })
        .collect()
}

/// Query kinds of the papers.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Kind {
    Exact,
    Range(f64),
    Partial(f64),
}

impl Kind {
    pub fn name(self) -> String {
        match self {
            Kind::Exact => "exact".into(),
            Kind::Range(s) => format!("range{}", (s * 100.0).round()),
            Kind::Partial(s) => format!("partial{}", (s * 100.0).round()),
        }
    }
}

/// Queries anchored at rows chosen by Zipf(0.5) over a random sample of rows:
/// exact = the anchor row; range = per column a window of `size` of the column's
/// domain starting at the anchor's value; partial = the same on about half the
/// columns (at least one), the others unconstrained.
pub fn make_queries(cols: &[Vec<u32>], kind: Kind, n: usize, seed: u64) -> Vec<Query> {
    let rows = cols.first().map_or(0, Vec::len);
    if rows == 0 {
        return Vec::new();
    }
    let maxes: Vec<u32> = cols
        .iter()
        .map(|c| c.iter().copied().max().unwrap_or(0))
        .collect();
    let mut rng = SplitMix(seed);
    let pool_n = rows.min(100_000);
    let anchors: Vec<usize> = (0..pool_n)
        .map(|_| rng.below(rows as u64) as usize)
        .collect();
    let zipf = Zipf::new(pool_n, 0.5);
    (0..n)
        .map(|_| {
            let r = anchors[zipf.sample(&mut rng)];
            let vals: Vec<u32> = cols.iter().map(|c| c[r]).collect();
            match kind {
                Kind::Exact => Query::exact(&vals),
                Kind::Range(s) | Kind::Partial(s) => {
                    let partial = matches!(kind, Kind::Partial(_));
                    let pick: Vec<bool> = if partial {
                        let mut p: Vec<bool> = (0..cols.len()).map(|_| rng.below(2) == 0).collect();
                        if !p.iter().any(|&b| b) {
                            p[rng.below(cols.len() as u64) as usize] = true;
                        }
                        p
                    } else {
                        vec![true; cols.len()]
                    };
                    let bounds = (0..cols.len())
                        .map(|c| {
                            if !pick[c] {
                                return None;
                            }
                            let card = maxes[c] as f64 + 1.0;
                            let w = ((card * s).round() as u32).max(1);
                            if w as f64 >= card {
                                return Some((0, maxes[c]));
                            }
                            let lo = vals[c].min(maxes[c] + 1 - w);
                            Some((lo, lo + w - 1))
                        })
                        .collect::<Vec<_>>();
                    Query::partial(&bounds)
                }
            }
        })
        .collect()
}

/// Time per query of a query set (after one warm-up pass), with costs.
pub struct Measured {
    /// Thread CPU time per query.
    pub ns_per_query: f64,
    /// Wall time per query.
    pub wall_ns_per_query: f64,
    pub stats: QueryStats,
    pub matches: u64,
    pub queries: usize,
}

pub fn measure(elf: &Elf, qs: &[Query]) -> Result<Measured> {
    let mut sink = 0u64;
    for q in qs {
        elf.query(q, |t| sink = sink.wrapping_add(t as u64))?;
    }
    let mut st = QueryStats::default();
    let mut matches = 0u64;
    let t = Instant::now();
    let c0 = thread_cpu_ns();
    for q in qs {
        let s = elf.query_with_stats(q, |_| matches += 1)?;
        st.add(&s);
    }
    let cpu = (thread_cpu_ns() - c0) as f64;
    let ns = t.elapsed().as_nanos() as f64;
    std::hint::black_box(sink);
    Ok(Measured {
        ns_per_query: cpu / qs.len().max(1) as f64,
        wall_ns_per_query: ns / qs.len().max(1) as f64,
        stats: st,
        matches,
        queries: qs.len(),
    })
}

/// Measures several Elfs on one query set in interleaved rounds and keeps each
/// one's fastest round: the machine is shared, and the minimum is the least
/// disturbed estimate (all contenders get the same chances).
pub fn measure_set(elfs: &[&Elf], qs: &[Query], rounds: usize) -> Result<Vec<Measured>> {
    let mut out: Vec<Measured> = Vec::with_capacity(elfs.len());
    for e in elfs {
        out.push(measure(e, qs)?);
    }
    for _ in 1..rounds.max(1) {
        for (i, e) in elfs.iter().enumerate() {
            let m = measure(e, qs)?;
            if m.ns_per_query < out[i].ns_per_query {
                out[i].ns_per_query = m.ns_per_query;
            }
            if m.wall_ns_per_query < out[i].wall_ns_per_query {
                out[i].wall_ns_per_query = m.wall_ns_per_query;
            }
        }
    }
    Ok(out)
}

fn cell(bench: &str, variant: &str, param: Option<serde_json::Value>, m: &Measured) -> BenchResult {
    let q = m.queries.max(1) as f64;
    BenchResult::new(bench, variant, param, 1, 1e3 / m.ns_per_query.max(1e-9))
        .with("ns_per_query", m.ns_per_query)
        .with("wall_ns_per_query", m.wall_ns_per_query)
        .with("base_lines_per_q", m.stats.base_lines as f64 / q)
        .with("dram_nodes_per_q", m.stats.dram_nodes as f64 / q)
        .with("matches_per_q", m.matches as f64 / q)
}

/// Query kinds and the share of `--queries` each set gets (wide queries cost
/// far more per query).
fn kinds() -> Vec<(Kind, usize)> {
    vec![
        (Kind::Exact, 1),
        (Kind::Range(0.02), 10),
        (Kind::Range(1.0), 50_000),
        (Kind::Partial(0.02), 2_000),
        (Kind::Partial(1.0), 50_000),
    ]
}

/// Interleaved rounds per measurement.
const ROUNDS: usize = 3;

/// Charts produced by a run: (file stem, SVG).
pub type Charts = Vec<(String, String)>;

struct Uniform {
    cols: Vec<Vec<u32>>,
    _tp: TempPool,
    store: ElfStore,
}

fn pool_size_for(words: usize) -> u64 {
    ((words as u64 * 4) * 5 / 4 + (64 << 20)).next_multiple_of(1 << 20)
}

/// Runs the configured experiments.
pub fn run(cfg: &BenchConfig, log: &mut dyn FnMut(&str)) -> Result<(Report, Charts)> {
    let mut charts: Charts = Vec::new();
    persist::set_latency_injection(0, 0);
    let mut r = env::report("elf", &cfg.pool_dir);
    r.environment.latency_injection_ns.pm_read_line = cfg.read_ns;
    let suite = &mut r.environment.suite;
    suite.insert("rows".into(), json!(cfg.rows));
    suite.insert("cols".into(), json!(cfg.cols));
    suite.insert("card".into(), json!(cfg.card));
    suite.insert("zipf_theta".into(), json!(0.5));
    suite.insert("pm_read_ns_per_line".into(), json!(cfg.read_ns));
    if cfg.read_ns > 0 {
        r.notes.push(format!(
            "PM READ LATENCY MODEL ON: +{} ns per base-array cache line read by PM variants",
            cfg.read_ns
        ));
    }
    r.notes.push(
        "single-threaded times (builds, reopen, queries) are thread CPU time; \
         parallel and warm-up cells are wall time"
            .into(),
    );
    let want = |e: &str| cfg.experiments.iter().any(|x| x == e || x == "all");
    let uniform_needed = ["build", "overhead", "static", "dynamic", "warmup"]
        .iter()
        .any(|e| want(e));
    let mut uni: Option<Uniform> = None;
    if uniform_needed {
        log(&format!(
            "uniform table: {} rows x {} columns, cardinality {}",
            cfg.rows, cfg.cols, cfg.card
        ));
        let cols = uniform_table(cfg.rows, cfg.cols, cfg.card, cfg.seed);
        let slices: Vec<&[u32]> = cols.iter().map(Vec::as_slice).collect();
        // Build: DRAM only, then DRAM + copy into PM + publish.
        let t = CpuTimer::start();
        let built = build(&slices)?;
        let dram_s = t.secs();
        let words = built.words.len();
        let tp = TempPool::create(
            &cfg.pool_dir,
            "elf-bench-uniform",
            pool_size_for(words) + (256 << 20),
        )?;
        let t = CpuTimer::start();
        let built2 = build(&slices)?;
        let before = persist::thread_stats();
        let store = ElfStore::create(
            tp.pool(),
            "elf",
            &built2,
            None,
            &CreateOptions::default(),
            Variant::Pm,
        )?;
        let pm_s = t.secs();
        let ps = persist::thread_stats().since(before);
        drop(built2);
        drop(built);
        log(&format!(
            "build: DRAM {dram_s:.2}s, PM {pm_s:.2}s ({} words)",
            words
        ));
        if want("build") {
            let rows = cfg.rows as f64;
            r.results.push(
                BenchResult::new("build", "dram", None, 1, rows / dram_s / 1e6)
                    .with("seconds", dram_s)
                    .with("elf_bytes", words as u64 * 4),
            );
            r.results.push(
                BenchResult::new("build", "pm", None, 1, rows / pm_s / 1e6)
                    .with("seconds", pm_s)
                    .with("fences", ps.fences)
                    .with("nt_bytes", ps.nt_bytes)
                    .with("overhead_vs_dram", pm_s / dram_s - 1.0),
            );
            // Hybrid copy and reopen vs rebuild.
            let g = store.current();
            let t = CpuTimer::start();
            let h = Elf::new(g.elf.data().clone(), Variant::Hybrid)?;
            let copy_s = t.secs();
            drop(h);
            drop(g);
            // Reopen needs the heap: close the store first.
            let pool = tp.pool().clone();
            drop(store);
            let t_open = CpuTimer::start();
            let s = ElfStore::open(&pool, "elf", Variant::Pm, false)?;
            let open_s = t_open.secs();
            drop(s);
            let t_open = CpuTimer::start();
            let s = ElfStore::open(&pool, "elf", Variant::Pm, true)?;
            let open_crc_s = t_open.secs();
            drop(s);
            let t_open = CpuTimer::start();
            let s = ElfStore::open(&pool, "elf", Variant::Hybrid, false)?;
            let open_h_s = t_open.secs();
            drop(s);
            for (v, secs) in [
                ("hybrid-copy", copy_s),
                ("reopen-pm", open_s),
                ("reopen-pm-crc", open_crc_s),
                ("reopen-hybrid", open_h_s),
                ("rebuild-dram", dram_s),
            ] {
                r.results.push(
                    BenchResult::new("recovery", v, None, 1, 0.0)
                        .with("seconds", secs)
                        .with("vs_rebuild", secs / dram_s),
                );
            }
            log(&format!(
                "hybrid copy {copy_s:.3}s, reopen {open_s:.4}s (crc {open_crc_s:.3}s, hybrid {open_h_s:.3}s)"
            ));
            let store = ElfStore::open(&pool, "elf", Variant::Pm, false)?;
            uni = Some(Uniform {
                cols,
                _tp: tp,
                store,
            });
        } else {
            uni = Some(Uniform {
                cols,
                _tp: tp,
                store,
            });
        }
    }
    if let Some(u) = &uni {
        let base = u.store.current().elf.data().clone();
        let mk = |v: Variant| -> Result<Elf> {
            let mut e = Elf::new(base.clone(), v)?;
            e.read_ns = cfg.read_ns;
            Ok(e)
        };
        let sets: Vec<(Kind, Vec<Query>)> = kinds()
            .into_iter()
            .map(|(k, div)| {
                let n = (cfg.queries / div).max(2);
                (k, make_queries(&u.cols, k, n, cfg.seed ^ 0xABCD))
            })
            .collect();
        if want("overhead") {
            let dram = mk(Variant::Dram)?;
            let variants = [
                Variant::Pm,
                Variant::Hybrid,
                Variant::Static(2),
                Variant::Static(3),
                Variant::Static(4),
            ];
            let mut cats = Vec::new();
            let mut series: Vec<(String, Vec<f64>)> = Vec::new();
            let mut elfs = vec![(Variant::Dram, dram)];
            for v in variants {
                elfs.push((v, mk(v)?));
            }
            for (k, qs) in &sets {
                cats.push(k.name());
                let refs: Vec<&Elf> = elfs.iter().map(|(_, e)| e).collect();
                let ms = measure_set(&refs, qs, ROUNDS)?;
                let dram_ns = ms[0].ns_per_query;
                for (i, ((v, e), m)) in elfs.iter().zip(&ms).enumerate() {
                    let ratio = m.ns_per_query / dram_ns;
                    log(&format!(
                        "{} {}: {:.0} ns/query ({:.2}x DRAM)",
                        k.name(),
                        v.name(),
                        m.ns_per_query,
                        ratio
                    ));
                    r.results.push(
                        cell(&format!("query-{}", k.name()), &v.name(), None, m)
                            .with("vs_dram", ratio)
                            .with("dram_copy_bytes", e.cache_bytes() as u64),
                    );
                    if series.len() <= i {
                        series.push((v.name(), Vec::new()));
                    }
                    series[i].1.push(ratio);
                }
            }
            charts.push((
                "elf-overhead".into(),
                chart::bar_chart(
                    "Elf query time relative to DRAM Elf (uniform)",
                    "time / DRAM time",
                    &cats,
                    &series,
                ),
            ));
        }
        if want("static") {
            let mut series = Vec::new();
            for (k, qs) in sets
                .iter()
                .filter(|(k, _)| *k != Kind::Range(1.0) && *k != Kind::Partial(1.0))
            {
                let mut elfs = vec![mk(Variant::Dram)?];
                for x in 0..=cfg.cols {
                    elfs.push(mk(Variant::Static(x))?);
                }
                let refs: Vec<&Elf> = elfs.iter().collect();
                let ms = measure_set(&refs, qs, ROUNDS)?;
                let dram_ns = ms[0].ns_per_query;
                let mut pts = Vec::new();
                for x in 0..=cfg.cols {
                    let (e, m) = (&elfs[x + 1], &ms[x + 1]);
                    let ratio = m.ns_per_query / dram_ns;
                    r.results.push(
                        cell(&format!("static-{}", k.name()), "static", Some(json!(x)), m)
                            .with("vs_dram", ratio)
                            .with("dram_copy_bytes", e.cache_bytes() as u64)
                            .with(
                                "dram_copy_fraction",
                                e.cache_bytes() as f64 / e.base_bytes() as f64,
                            ),
                    );
                    pts.push((x as f64, ratio));
                }
                log(&format!("static levels done for {}", k.name()));
                series.push(chart::Series::new(k.name(), pts));
            }
            charts.push((
                "elf-static".into(),
                chart::line_chart(
                    "Static caching: query time / DRAM Elf by cached levels",
                    "levels cached in DRAM",
                    "time / DRAM time",
                    &series,
                    false,
                ),
            ));
        }
        if want("dynamic") {
            let total = base.words.as_slice().len() * 4;
            let budgets: Vec<usize> = [0.01, 0.04, 0.16]
                .iter()
                .map(|f| (total as f64 * f) as usize)
                .collect();
            for (k, qs) in sets.iter().filter(|(k, _)| {
                matches!(k, Kind::Exact | Kind::Range(_)) && *k != Kind::Range(1.0)
            }) {
                let mut elfs = vec![mk(Variant::Dram)?, mk(Variant::Pm)?];
                let mut labels = Vec::new();
                for p in Policy::ALL {
                    for &b in &budgets {
                        elfs.push(mk(Variant::Dynamic(DynSpec {
                            policy: p,
                            budget_bytes: b,
                            partitions: 8,
                        }))?);
                        labels.push((p, b));
                    }
                }
                let refs: Vec<&Elf> = elfs.iter().collect();
                let ms = measure_set(&refs, qs, ROUNDS)?;
                let dram_ns = ms[0].ns_per_query;
                let pm_ratio = ms[1].ns_per_query / dram_ns;
                r.results.push(
                    cell(&format!("dynamic-{}", k.name()), "pm-nocache", None, &ms[1])
                        .with("vs_dram", pm_ratio),
                );
                let mut series = vec![chart::Series::new(
                    "pm (no cache)",
                    budgets
                        .iter()
                        .map(|b| (*b as f64 / total as f64 * 100.0, pm_ratio))
                        .collect(),
                )];
                for p in Policy::ALL {
                    let mut pts = Vec::new();
                    for (i, &(lp, b)) in labels.iter().enumerate() {
                        if lp != p {
                            continue;
                        }
                        let (e, m) = (&elfs[i + 2], &ms[i + 2]);
                        let ratio = m.ns_per_query / dram_ns;
                        let pct = b as f64 / total as f64 * 100.0;
                        let (h, mi) = e.dyn_cache().map_or((0, 0), |c| c.hit_counts());
                        r.results.push(
                            cell(
                                &format!("dynamic-{}", k.name()),
                                p.name(),
                                Some(json!(pct)),
                                m,
                            )
                            .with("vs_dram", ratio)
                            .with("budget_bytes", b as u64)
                            .with("hit_rate", h as f64 / (h + mi).max(1) as f64),
                        );
                        pts.push((pct, ratio));
                    }
                    series.push(chart::Series::new(p.name(), pts));
                }
                log(&format!("dynamic policies done for {}", k.name()));
                charts.push((
                    format!("elf-dynamic-{}", k.name()),
                    chart::line_chart(
                        &format!("Dynamic caching ({}): time / DRAM Elf by budget", k.name()),
                        "budget (% of Elf size)",
                        "time / DRAM time",
                        &series,
                        false,
                    ),
                ));
            }
        }
        if want("warmup") {
            let qs = make_queries(&u.cols, Kind::Exact, cfg.queries * 4, cfg.seed ^ 0x3A);
            let slice = Duration::from_millis(100);
            let slices = 12;
            let total = base.words.as_slice().len() * 4;
            let mut series = Vec::new();
            let contenders = [
                Variant::Pm,
                Variant::Static(4),
                Variant::Dynamic(DynSpec {
                    policy: Policy::Lla,
                    budget_bytes: total / 25,
                    partitions: 8,
                }),
                Variant::Dynamic(DynSpec {
                    policy: Policy::Naive,
                    budget_bytes: total / 25,
                    partitions: 8,
                }),
                Variant::Hybrid,
            ];
            for v in contenders {
                // Cold start: the clock includes building the variant's DRAM copy.
                let t0 = Instant::now();
                let e = mk(v)?;
                let mut pts = Vec::new();
                let mut i = 0usize;
                let mut done = 0u64;
                let mut next = slice;
                while pts.len() < slices {
                    let q = &qs[i % qs.len()];
                    i += 1;
                    e.query(q, |_| {})?;
                    done += 1;
                    let el = t0.elapsed();
                    if el >= next {
                        pts.push((el.as_secs_f64(), done as f64 / slice.as_secs_f64() / 1e6));
                        r.results.push(BenchResult::new(
                            "warmup-exact",
                            &v.name(),
                            Some(json!(el.as_secs_f64())),
                            1,
                            done as f64 / slice.as_secs_f64() / 1e6,
                        ));
                        done = 0;
                        next += slice;
                    }
                }
                series.push(chart::Series::new(v.name(), pts));
            }
            log("warm-up curves done");
            charts.push((
                "elf-warmup".into(),
                chart::line_chart(
                    "Exact-match throughput from a cold start (100 ms slices)",
                    "seconds since open",
                    "Mqueries/s",
                    &series,
                    false,
                ),
            ));
        }
    }
    drop(uni);
    if want("parallel") {
        parallel_grid(cfg, &mut r, &mut charts, log)?;
    }
    if want("tpch") {
        tpch(cfg, &mut r, &mut charts, log)?;
    }
    env::finish(&mut r);
    Ok((r, charts))
}

fn parallel_grid(
    cfg: &BenchConfig,
    r: &mut Report,
    charts: &mut Charts,
    log: &mut dyn FnMut(&str),
) -> Result<()> {
    let cards = [20u32, 50, 100];
    let sizes = [0.05, 0.25, 0.5, 1.0];
    let mut series: Vec<(String, Vec<f64>)> = cards
        .iter()
        .map(|c| (format!("card {c}"), Vec::new()))
        .collect();
    let cats: Vec<String> = sizes.iter().map(|s| format!("{}%", s * 100.0)).collect();
    for (ci, &card) in cards.iter().enumerate() {
        let cols = uniform_table(cfg.grid_rows, cfg.cols, card, cfg.seed ^ card as u64);
        let slices: Vec<&[u32]> = cols.iter().map(Vec::as_slice).collect();
        let elf = Elf::from_built(build(&slices)?);
        for &s in &sizes {
            let n = if s >= 0.5 { 3 } else { 20 };
            let qs = make_queries(&cols, Kind::Range(s), n, cfg.seed ^ 0x77);
            let time = |f: &dyn Fn(&Query) -> Result<u64>| -> Result<(f64, u64)> {
                for q in &qs {
                    f(q)?;
                }
                let mut best = f64::INFINITY;
                let mut m = 0;
                for _ in 0..ROUNDS {
                    let t = Instant::now();
                    m = 0;
                    for q in &qs {
                        m += f(q)?;
                    }
                    best = best.min(t.elapsed().as_nanos() as f64 / qs.len() as f64);
                }
                Ok((best, m))
            };
            let (seq, m1) = time(&|q| elf.count(q))?;
            let (par, m2) = time(&|q| elf.count_par(q, cfg.threads))?;
            let (auto, m3) = time(&|q| elf.count_auto(q, cfg.threads))?;
            if m1 != m2 || m1 != m3 {
                return Err(ElfError::InvalidQuery(
                    "parallel and sequential counts differ".into(),
                ));
            }
            let param = json!(format!("card{card}/{}%", s * 100.0));
            for (v, ns) in [("sequential", seq), ("parallel", par), ("auto", auto)] {
                r.results.push(
                    BenchResult::new(
                        "parallel-range",
                        v,
                        Some(param.clone()),
                        if v == "sequential" {
                            1
                        } else {
                            cfg.threads as u32
                        },
                        1e3 / ns,
                    )
                    .with("ns_per_query", ns)
                    .with("speedup_vs_seq", seq / ns)
                    .with("matches_per_q", m1 as f64 / qs.len() as f64),
                );
            }
            series[ci].1.push(seq / par);
            log(&format!(
                "parallel card {card} range {}%: speedup {:.2}",
                s * 100.0,
                seq / par
            ));
        }
        // A tiny range: where parallelism loses.
        let qs = make_queries(&cols, Kind::Exact, 200, cfg.seed ^ 0x78);
        let t = Instant::now();
        for q in &qs {
            elf.count(q)?;
        }
        let seq = t.elapsed().as_nanos() as f64 / qs.len() as f64;
        let t = Instant::now();
        for q in &qs {
            elf.count_par(q, cfg.threads)?;
        }
        let par = t.elapsed().as_nanos() as f64 / qs.len() as f64;
        let t = Instant::now();
        for q in &qs {
            elf.count_auto(q, cfg.threads)?;
        }
        let auto = t.elapsed().as_nanos() as f64 / qs.len() as f64;
        for (v, ns) in [("sequential", seq), ("parallel", par), ("auto", auto)] {
            r.results.push(
                BenchResult::new(
                    "parallel-exact",
                    v,
                    Some(json!(format!("card{card}"))),
                    1,
                    1e3 / ns,
                )
                .with("ns_per_query", ns)
                .with("speedup_vs_seq", seq / ns),
            );
        }
    }
    charts.push((
        "elf-parallel".into(),
        chart::bar_chart(
            &format!(
                "Parallel ({} threads) / sequential range queries",
                cfg.threads
            ),
            "speedup",
            &cats,
            &series,
        ),
    ));
    Ok(())
}

fn sql_literal(kind: &ColumnKind, text: &str) -> String {
    match kind {
        ColumnKind::Str(_) => format!("'{}'", text.replace('\'', "''")),
        _ => text.to_string(),
    }
}

fn tpch(
    cfg: &BenchConfig,
    r: &mut Report,
    charts: &mut Charts,
    log: &mut dyn FnMut(&str),
) -> Result<()> {
    let Some(csv) = &cfg.tpch_csv else {
        return Err(ElfError::InvalidQuery(
            "the tpch experiment needs --tpch-csv (generate it with scripts/tpch/gen_lineitem.py)"
                .into(),
        ));
    };
    let names = [
        "l_orderkey",
        "l_partkey",
        "l_suppkey",
        "l_linenumber",
        "l_quantity",
        "l_extendedprice",
        "l_discount",
        "l_tax",
        "l_returnflag",
        "l_linestatus",
        "l_shipdate",
        "l_commitdate",
        "l_receiptdate",
        "l_shipinstruct",
        "l_shipmode",
    ];
    let t = Instant::now();
    let mut table = Table::from_csv(
        csv,
        &CsvOptions {
            columns: Some(names.iter().map(|s| s.to_string()).collect()),
            ..CsvOptions::default()
        },
        |_| {},
    )?;
    let load_s = t.elapsed().as_secs_f64();
    table.reorder_by_cardinality();
    let rows = table.nrows();
    log(&format!("lineitem: {rows} rows loaded in {load_s:.1}s"));
    let t = Instant::now();
    let built = build(&table.slices())?;
    let build_s = t.elapsed().as_secs_f64();
    let tp = TempPool::create(
        &cfg.pool_dir,
        "elf-bench-tpch",
        pool_size_for(built.words.len()) + (256 << 20),
    )?;
    let store = ElfStore::create(
        tp.pool(),
        "lineitem",
        &built,
        Some(&table.schema),
        &CreateOptions::default(),
        Variant::Pm,
    )?;
    drop(built);
    r.results.push(
        BenchResult::new("tpch-build", "elf", None, 1, rows as f64 / build_s / 1e6)
            .with("seconds", build_s)
            .with("csv_load_seconds", load_s),
    );
    let base = store.current().elf.data().clone();
    let dram = Elf::new(base.clone(), Variant::Dram)?;
    let pm = Elf::new(base.clone(), Variant::Pm)?;
    let mut st4 = Elf::new(base, Variant::Static(4))?;
    st4.read_ns = cfg.read_ns;
    let sets = [
        (Kind::Exact, cfg.queries.min(20_000)),
        (Kind::Range(0.02), 200),
        (Kind::Partial(0.02), 200),
    ];
    let mut qfile = Vec::new();
    for (k, n) in sets {
        let qs = make_queries(&table.cols, k, n, cfg.seed ^ 0x7C);
        let ms = measure_set(&[&dram, &pm, &st4], &qs, ROUNDS)?;
        for (v, m) in ["elf-dram", "elf-pm", "elf-pm-static4"].iter().zip(&ms) {
            r.results.push(
                cell(&format!("tpch-{}", k.name()), v, None, m)
                    .with("vs_dram", m.ns_per_query / ms[0].ns_per_query),
            );
        }
        // Predicates for DuckDB, with per-query Elf counts and times (PM Elf).
        let take = if k == Kind::Exact { 200 } else { 50 };
        for q in qs.iter().take(take) {
            let t = Instant::now();
            let c = pm.count(q)?;
            let ns = t.elapsed().as_nanos() as u64;
            let mut preds = Vec::new();
            for (i, &(lo, hi)) in q.bounds.iter().enumerate() {
                let col = &table.schema.columns[i];
                let maxc = table.cols[i].iter().copied().max().unwrap_or(0);
                if lo == 0 && hi >= maxc {
                    continue;
                }
                let (a, b) = (col.decode(lo), col.decode(hi.min(maxc)));
                if lo == hi {
                    preds.push(format!("{} = {}", col.name, sql_literal(&col.kind, &a)));
                } else {
                    preds.push(format!(
                        "{} BETWEEN {} AND {}",
                        col.name,
                        sql_literal(&col.kind, &a),
                        sql_literal(&col.kind, &b)
                    ));
                }
            }
            let w = if preds.is_empty() {
                "TRUE".to_string()
            } else {
                preds.join(" AND ")
            };
            qfile.push(json!({"kind": k.name(), "where_sql": w, "elf_count": c, "elf_ns": ns}));
        }
        log(&format!("tpch {} done", k.name()));
    }
    std::fs::create_dir_all(&cfg.out)?;
    let qpath = cfg.out.join("elf-tpch-queries.json");
    let abs = std::fs::canonicalize(csv).unwrap_or_else(|_| csv.clone());
    std::fs::write(
        &qpath,
        serde_json::to_string(&json!({"csv": abs, "queries": qfile})).unwrap_or_default(),
    )?;
    log(&format!("DuckDB predicates written to {}", qpath.display()));
    if let Some(py) = &cfg.duckdb_python {
        log("running the DuckDB baseline ...");
        let out = std::process::Command::new(py)
            .arg(&cfg.duckdb_script)
            .arg(&qpath)
            .arg("--threads")
            .arg(cfg.threads.to_string())
            .output()?;
        let text = String::from_utf8_lossy(&out.stdout);
        let v: serde_json::Value = serde_json::from_str(&text).map_err(|e| {
            ElfError::InvalidQuery(format!(
                "DuckDB baseline failed ({e}): {}",
                String::from_utf8_lossy(&out.stderr)
            ))
        })?;
        let mut cats = Vec::new();
        let mut elf_s = Vec::new();
        let mut duck_s = Vec::new();
        if let Some(kinds) = v["kinds"].as_object() {
            for (k, d) in kinds {
                let duck = d["duckdb_ns_per_query"].as_f64().unwrap_or(0.0);
                let elf = d["elf_ns_per_query"].as_f64().unwrap_or(0.0);
                let agree = d["counts_agree"].as_bool().unwrap_or(false);
                r.results.push(
                    BenchResult::new(
                        &format!("tpch-{k}"),
                        "duckdb",
                        None,
                        cfg.threads as u32,
                        1e3 / duck.max(1.0),
                    )
                    .with("ns_per_query", duck)
                    .with("elf_pm_ns_per_query", elf)
                    .with("elf_speedup", duck / elf.max(1.0))
                    .with("counts_agree", agree),
                );
                cats.push(k.clone());
                elf_s.push(elf / 1e3);
                duck_s.push(duck / 1e3);
                log(&format!(
                    "tpch {k}: DuckDB {:.0} us/query, Elf {:.1} us/query, speedup {:.0}x, counts agree: {agree}",
                    duck / 1e3,
                    elf / 1e3,
                    duck / elf.max(1.0)
                ));
            }
        }
        if let Some(m) = v["mismatches"].as_array() {
            if !m.is_empty() {
                r.notes.push(format!(
                    "DuckDB count mismatches: {}",
                    serde_json::to_string(m).unwrap_or_default()
                ));
            }
        }
        charts.push((
            "elf-tpch".into(),
            chart::bar_chart(
                "TPC-H lineitem: time per query (us), PM Elf vs DuckDB",
                "us per query",
                &cats,
                &[("elf-pm".into(), elf_s), ("duckdb".into(), duck_s)],
            ),
        ));
    }
    drop(store);
    drop(tp);
    Ok(())
}
