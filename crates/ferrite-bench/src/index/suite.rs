//! The index benchmark as `ferrite bench` runs it: load `records` records into
//! each index, run PiBench-style operations on identical workloads, and build
//! the report, its charts and the text a newcomer reads.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicU64;

use ferrite_report::chart::{self, fmt_ns, fmt_ns_tick, LineChart, Series};
use ferrite_report::{BenchResult, Report};
use serde_json::json;

use crate::index::expected::KeySet;
use crate::index::isolate::{self, Event};
use crate::index::peers;
use crate::index::runner::{load, op_index, run as run_workload, RunSpec};
use crate::index::variants::{
    default_compare, open_variant, variants as known_variants, VariantConfig,
};
use crate::index::workload::{Distribution, KeyCodec, Op, OpMix};
use crate::{env, BenchError, Context, Result};

/// Everything `ferrite bench` (the index benchmark) takes, with PiBench's
/// meaning; [`IndexBenchConfig::default`] is the README's default run.
#[derive(Debug, Clone)]
pub struct IndexBenchConfig {
    pub records: u64,
    pub operations: u64,
    /// Each thread count runs every operation (the load uses the first).
    pub threads: Vec<usize>,
    pub key_size: usize,
    pub value_size: usize,
    pub key_prefix: String,
    pub read_ratio: Option<f64>,
    pub insert_ratio: Option<f64>,
    pub update_ratio: Option<f64>,
    pub remove_ratio: Option<f64>,
    pub scan_ratio: Option<f64>,
    pub scan_size: usize,
    /// `UNIFORM`, `ZIPFIAN` or `SELFSIMILAR` (any case).
    pub distribution: String,
    /// Zipfian θ (default 0.99) or selfsimilar h (default 0.2).
    pub skew: Option<f64>,
    pub seed: u64,
    pub latency_sampling: f64,
    pub sampling_ms: u64,
    pub pool_path: Option<PathBuf>,
    pub pool_size: Option<u64>,
    pub skip_load: bool,
    /// Load every index anew before a run that follows a run which inserted or
    /// removed keys since its load (PiBench loads for every run), so that
    /// every thread count of an insert run starts from the same index.
    pub reload: bool,
    /// One index (`--index`) or several (`--compare`); neither: the default comparison.
    pub index: Option<String>,
    pub compare: Option<Vec<String>>,
    /// Standard runs when no ratio is given.
    pub benches: Vec<String>,
    pub max_seconds: f64,
    pub redb_load_batch: usize,
    pub pool_dir: PathBuf,
    /// Times the whole comparison runs, the indexes in a rotated order each
    /// time; each cell reports the run with the median Mops/s (see
    /// [`median_of_rounds`]).
    pub rounds: usize,
}

impl Default for IndexBenchConfig {
    fn default() -> Self {
        IndexBenchConfig {
            records: 1_000_000,
            operations: 1_000_000,
            threads: vec![1],
            key_size: 8,
            value_size: 8,
            key_prefix: String::new(),
            read_ratio: None,
            insert_ratio: None,
            update_ratio: None,
            remove_ratio: None,
            scan_ratio: None,
            scan_size: 100,
            distribution: "UNIFORM".into(),
            skew: None,
            seed: 1729,
            latency_sampling: 0.1,
            sampling_ms: 1000,
            pool_path: None,
            pool_size: None,
            skip_load: false,
            reload: false,
            index: None,
            compare: None,
            benches: STANDARD_BENCHES.iter().map(|s| s.to_string()).collect(),
            max_seconds: 5.0,
            redb_load_batch: 10_000,
            pool_dir: PathBuf::from("/dev/shm"),
            rounds: 1,
        }
    }
}

/// The standard runs, in the order they run.
pub const STANDARD_BENCHES: &[&str] = &["lookup", "scan", "update", "mixed", "insert", "remove"];

/// The metrics of the markdown table (`<stem>.md`) beyond the shared columns.
pub const TABLE_COLS: [&str; 11] = [
    "mops_cpu",
    "wrong",
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

/// One named run: its operation mix and key distribution.
#[derive(Debug, Clone)]
pub struct Job {
    pub name: String,
    pub mix: OpMix,
    pub dist: Distribution,
}

impl IndexBenchConfig {
    /// The key distribution `--distribution` and `--skew` name.
    pub fn dist(&self) -> Result<Distribution> {
        let skew = self
            .skew
            .unwrap_or(if self.distribution.eq_ignore_ascii_case("ZIPFIAN") {
                0.99
            } else {
                0.2
            });
        Distribution::parse(&self.distribution, skew)
    }

    /// The runs: one mix when a ratio is given, else the standard runs named by
    /// `benches` (`mixed` = 50% lookup / 50% update under selfsimilar 0.2).
    pub fn jobs(&self, dist: Distribution) -> Result<Vec<Job>> {
        let given = [
            self.insert_ratio,
            self.update_ratio,
            self.remove_ratio,
            self.scan_ratio,
        ];
        if self.read_ratio.is_some() || given.iter().any(Option::is_some) {
            let others: f64 = given.iter().map(|r| r.unwrap_or(0.0)).sum();
            let mix = OpMix {
                read: self.read_ratio.unwrap_or((1.0 - others).max(0.0)),
                insert: self.insert_ratio.unwrap_or(0.0),
                update: self.update_ratio.unwrap_or(0.0),
                remove: self.remove_ratio.unwrap_or(0.0),
                scan: self.scan_ratio.unwrap_or(0.0),
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
        for b in &self.benches {
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
                other if lookup_insert_mix(other).is_some() => {
                    (lookup_insert_mix(other).unwrap_or(OpMix::only(Op::Read)), dist)
                }
                other => {
                    return Err(BenchError::Options(format!(
                        "unknown bench {other:?} in --benches (lookup, insert, update, remove, scan, mixed, rXiY = X% lookups and Y% inserts)"
                    )))
                }
            };
            out.push(Job {
                name: b.clone(),
                mix,
                dist: d,
            });
        }
        Ok(out)
    }
}

/// `r90i10` = 90% lookups, 10% inserts (VLDB'22 Fig. 5's mixes).
fn lookup_insert_mix(name: &str) -> Option<OpMix> {
    let rest = name.strip_prefix('r')?;
    let (r, i) = rest.split_once('i')?;
    let (r, i): (u32, u32) = (r.parse().ok()?, i.parse().ok()?);
    if r + i != 100 {
        return None;
    }
    let mut m = OpMix::only(Op::Read);
    m.read = r as f64 / 100.0;
    m.insert = i as f64 / 100.0;
    Some(m)
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

/// Progress of a run, for a progress bar (every method defaults to nothing).
pub trait Progress: Sync {
    /// Loading `total` records into `variant` with `threads` threads begins.
    fn load_begin(&self, _variant: &str, _threads: usize, _total: u64) {}
    /// `done` records are loaded (called from a loading thread now and then).
    fn load_progress(&self, _done: u64) {}
    fn load_end(&self) {}
    /// Run `job` on `variant` with `threads` threads begins.
    fn run_begin(&self, _variant: &str, _threads: usize, _job: &str) {}
    /// Everything is measured.
    fn finished(&self) {}
}

/// No progress output.
pub struct Quiet;

impl Progress for Quiet {}

/// An index of the comparison: its name, what it is, what it promises.
#[derive(Debug, Clone)]
pub struct IndexInfo {
    pub name: String,
    pub label: String,
    pub contract: String,
}

/// A finished index benchmark.
pub struct IndexRun {
    pub report: Report,
    pub indexes: Vec<IndexInfo>,
    pub jobs: Vec<Job>,
    pub config: IndexBenchConfig,
    /// Lookups that returned another key's value (must be 0).
    pub wrong_values: u64,
    /// Wrong answers of Ferrite's own indexes and the baselines (not of
    /// published peers, whose wrong answers are reported, not fatal).
    pub wrong_ours: u64,
    /// Notes worth a newcomer's attention (errors, collisions, reopens).
    pub warnings: Vec<String>,
}

/// Runs the benchmark: every index, every job, every thread count.
pub fn run(c: &IndexBenchConfig, progress: &dyn Progress) -> Result<IndexRun> {
    let dist = c.dist()?;
    let codec = KeyCodec::new(c.key_size, c.value_size, &c.key_prefix)?;
    let jobs = c.jobs(dist)?;
    if c.threads.is_empty() || c.threads.contains(&0) {
        return Err(BenchError::Options("-t must be at least 1".into()));
    }
    let variants: Vec<String> = match (&c.index, &c.compare) {
        (Some(i), _) => vec![i.clone()],
        (None, Some(v)) => v.clone(),
        (None, None) => default_compare(codec.key_len(), c.value_size),
    };
    if let Some(bad) = variants
        .iter()
        .find(|v| !known_variants().contains(&v.as_str()) && !peers::is_peer(v))
    {
        return Err(BenchError::UnknownVariant(bad.clone()));
    }
    // A malformed peer spec is the user's to fix before anything runs (a
    // peer that is well named but cannot be opened is reported at its turn).
    for v in variants.iter().filter(|v| peers::is_peer(v)) {
        peers::PeerSpec::parse(v)?;
    }
    if c.scan_size == 0 && jobs.iter().any(|j| j.mix.scan > 0.0) {
        return Err(BenchError::Options("--scan_size must be at least 1".into()));
    }
    if c.skip_load && c.pool_path.is_none() {
        return Err(BenchError::Options(
            "--skip_load needs --pool_path (the pool holding the loaded index)".into(),
        ));
    }
    if c.reload && (c.skip_load || c.pool_path.is_some()) {
        return Err(BenchError::Options(
            "--reload loads into a fresh pool for each group of runs: it cannot be combined with --pool_path or --skip_load".into(),
        ));
    }
    if c.skip_load && variants.iter().any(|v| v != "ferrite") {
        return Err(BenchError::Options(
            "--skip_load works only with --index ferrite (the others do not persist)".into(),
        ));
    }
    let inserts_per_run = jobs
        .iter()
        .map(|j| (j.mix.insert * c.operations as f64) as u64)
        .sum::<u64>()
        * c.threads.len() as u64;
    let cfg = VariantConfig {
        pool_dir: c.pool_dir.clone(),
        pool_path: c.pool_path.clone(),
        pool_size: c.pool_size.unwrap_or(0),
        max_records: c.records + inserts_per_run,
        key_len: codec.key_len(),
        value_size: c.value_size,
        reopen: c.skip_load,
        redb_load_batch: c.redb_load_batch,
        threads: c.threads.iter().copied().max().unwrap_or(1),
    };
    let param = (c.key_size != 8 || c.value_size != 8).then(|| {
        if c.value_size == 8 {
            json!(c.key_size)
        } else {
            json!(format!("k{}v{}", c.key_size, c.value_size))
        }
    });

    // The ferrite variant's pool goes to --pool_path's directory when given.
    let pool_dir = c
        .pool_path
        .as_ref()
        .and_then(|p| p.parent())
        .filter(|p| !p.as_os_str().is_empty())
        .map_or(c.pool_dir.clone(), Path::to_path_buf);
    let mut r = env::report("index", &pool_dir);
    r.environment.suite.insert(
        "workload".into(),
        json!({
            "records": c.records, "operations": c.operations, "key_size": c.key_size,
            "value_size": c.value_size, "key_prefix": c.key_prefix, "distribution": dist.name(),
            "scan_size": c.scan_size, "seed": c.seed, "latency_sampling": c.latency_sampling,
            "max_seconds": c.max_seconds,
            "description": workload_lines(c, &jobs, dist).join(" "),
        }),
    );
    let mut indexes = Vec::new();
    let mut warnings = Vec::new();
    let mut wrong = 0u64;
    let mut wrong_ours = 0u64;
    let rounds = c.rounds.max(1);
    for round in 0..rounds {
        // Which run of its cell each result is, within this round (see
        // `repeat_of`).
        let mut runs_of_cell = std::collections::HashMap::new();
        // Round r starts with the r-th index: each index is measured at a
        // different point of the machine's drift in every round.
        for v in variants
            .iter()
            .cycle()
            .skip(round % variants.len().max(1))
            .take(variants.len())
        {
            let peer = peers::is_peer(v);
            let mut sink = |e: Event| match e {
                Event::Info {
                    name,
                    label,
                    contract,
                } => indexes.push(IndexInfo {
                    name,
                    label,
                    contract,
                }),
                Event::Note(n) => r.notes.push(n),
                // A warning is also a note of the report (once).
                Event::Warning(w) => {
                    r.notes.push(w.clone());
                    warnings.push(w);
                }
                Event::Running(_) => {}
                Event::Result(b) => {
                    let mut b = *b;
                    let n = runs_of_cell.entry(cell_key(&b)).or_insert(0u64);
                    if *n > 0 {
                        b.extra.insert("repeat".into(), json!(*n));
                    }
                    *n += 1;
                    r.results.push(b)
                }
                Event::Wrong { values, total } => {
                    wrong += values;
                    if !peer {
                        wrong_ours += total;
                    }
                }
            };
            let groups = load_groups(&jobs, &c.threads, c.reload);
            for (gi, runs) in groups.iter().enumerate() {
                let part = |emit: &mut dyn FnMut(Event)| {
                    let what = RunsOf {
                        jobs: &jobs,
                        runs,
                        first: round == 0 && gi == 0,
                    };
                    run_index(v, c, &cfg, &codec, &what, param.clone(), progress, emit)
                };
                if peer {
                    // A published index runs in a process of its own (one per
                    // load): if it crashes, what it measured is kept and the
                    // others still run. A child that was killed or crashed did
                    // not remove its pool directory (PMDK pools are allocated in
                    // full: gigabytes of /dev/shm): remove it here.
                    let mut measured = false;
                    let mut full = None;
                    let ok = isolate::in_child(
                        v,
                        part,
                        &|step| step_budget(c, step),
                        &mut |e| {
                            measured |= matches!(e, Event::Result(_));
                            sink(e)
                        },
                        &mut |pid| {
                            // Before its pool is removed: a full filesystem
                            // is the likely cause of a SIGBUS.
                            full = peers::full_filesystem_note(&cfg.pool_dir);
                            peers::remove_peer_dirs(&cfg.pool_dir, pid)
                        },
                    )?;
                    if let (false, Some(why)) = (ok, full) {
                        sink(Event::Warning(format!("{v}: {why}")));
                    }
                    // A peer that died before measuring anything (while opening or
                    // loading) would die the same way on every reload.
                    if !ok && !measured && gi + 1 < groups.len() {
                        sink(Event::Warning(format!(
                        "{v}: its later runs were not attempted (its process ended before measuring anything)"
                    )));
                        break;
                    }
                } else {
                    part(&mut sink)?;
                }
            }
        }
    }
    // Before the rounds are reduced to their medians: a round whose pool got
    // fewer huge pages is likely the slow one, not the median.
    if let Some(n) = partly_huge_note(&r) {
        r.notes.push(n);
    }
    if rounds > 1 {
        r.results = median_of_rounds(std::mem::take(&mut r.results));
        let mut seen = std::collections::HashSet::new();
        r.notes.retain(|n| seen.insert(n.clone()));
        let mut seen = std::collections::HashSet::new();
        warnings.retain(|w| seen.insert(w.clone()));
        r.notes.push(format!(
            "--rounds {rounds}: the whole comparison ran {rounds} times, the indexes in a rotated order (round r starts with the r-th); each cell is the run with the median Mops/s (the lower of the middle two for an even count), mops_rounds lists every round's, and the wrong-answer counts are summed over the rounds"
        ));
    }
    progress.finished();
    env::finish(&mut r);
    r.notes.push(
        "mops_cpu = operations per on-CPU second of a worker (as if each had a core to itself): compare it with Mops/s when the load average is above the core count".into(),
    );
    if c.latency_sampling > 0.0 {
        r.notes.push(format!(
            "latency: {:.0}% of operations timed (nearest-rank percentiles)",
            c.latency_sampling * 100.0
        ));
    }
    r.notes.push(if c.reload {
        "--reload: each index is loaded (with the first -t) before its first run and again before every run that follows a run which inserted or removed keys, so every such run starts from the loaded index; other runs follow each other in the order shown, every thread count in turn; dram/pm bytes are measured after each load".into()
    } else {
        "each index is loaded once (with the first -t); runs then follow each other in the order shown, every thread count in turn (inserts add fresh keys, removes delete loaded ones: a later run sees the index they left, pass --reload to load anew after them); dram/pm bytes are measured after the load".into()
    });
    Ok(IndexRun {
        report: r,
        indexes,
        jobs,
        config: c.clone(),
        wrong_values: wrong,
        wrong_ours,
        warnings,
    })
}

/// A result's cell within one round: bench, index, parameter, threads.
fn cell_key(b: &BenchResult) -> String {
    format!(
        "{}\u{0}{}\u{0}{}\u{0}{}",
        b.bench,
        b.variant,
        b.param.as_ref().map_or(String::new(), |p| p.to_string()),
        b.threads
    )
}

/// Which run of its cell a result is: 0 for the first run of a bench on an
/// index at a thread count in a round, 1 for the second, and so on, when the
/// same run is asked for again (`--benches lookup,lookup`, `-t 1,2,1`). The
/// JSON carries it as `repeat` from the second run on; the table, the charts
/// and the medians of `--rounds` keep the runs apart by it.
pub fn repeat_of(b: &BenchResult) -> u64 {
    b.extra.get("repeat").and_then(|v| v.as_u64()).unwrap_or(0)
}

/// " #2" for a cell's second run (see [`repeat_of`]), "" for its first.
fn repeat_suffix(k: u64) -> String {
    if k == 0 {
        String::new()
    } else {
        format!(" #{}", k + 1)
    }
}

/// One result per cell (bench, index, parameter, threads, repeat) from several rounds
/// of the same comparison, in the order the cells first appear: the round
/// with the median Mops/s (the lower middle one for an even count), with
/// every round's Mops/s (`mops_rounds`, in round order), their range, the
/// number of rounds, and every wrong-answer count summed over the rounds (a
/// wrong answer in any round stays visible).
pub fn median_of_rounds(results: Vec<BenchResult>) -> Vec<BenchResult> {
    const SUMMED: [&str; 6] = [
        "wrong",
        "wrong_values",
        "lost_keys",
        "phantom_keys",
        "failed_inserts",
        "wrong_scans",
    ];
    let mut cells: Vec<(String, Vec<BenchResult>)> = Vec::new();
    for b in results {
        let key = format!("{}\u{0}{}", cell_key(&b), repeat_of(&b));
        match cells.iter_mut().find(|(k, _)| *k == key) {
            Some((_, v)) => v.push(b),
            None => cells.push((key, vec![b])),
        }
    }
    cells
        .into_iter()
        .map(|(_, runs)| {
            let mops: Vec<f64> = runs.iter().map(|b| b.mops).collect();
            let mut order: Vec<usize> = (0..runs.len()).collect();
            order.sort_by(|&a, &b| mops[a].total_cmp(&mops[b]));
            let mid = order[(runs.len() - 1) / 2];
            let mut out = runs[mid].clone();
            for key in SUMMED {
                let vals: Vec<u64> = runs
                    .iter()
                    .filter_map(|b| b.extra.get(key).and_then(|v| v.as_u64()))
                    .collect();
                if !vals.is_empty() {
                    out.extra
                        .insert(key.into(), json!(vals.iter().sum::<u64>()));
                }
            }
            let (lo, hi) = mops
                .iter()
                .fold((f64::INFINITY, f64::NEG_INFINITY), |(l, h), &m| {
                    (l.min(m), h.max(m))
                });
            out.with("rounds", runs.len())
                .with("mops_rounds", mops)
                .with("mops_min", lo)
                .with("mops_max", hi)
        })
        .collect()
}

/// How long a published index may take for one step before it is killed:
/// loading at 10,000 records per second at least, a run at 3 x --max-seconds
/// (or 10,000 operations per second), a minute for anything else, and a
/// minute more for each.
fn step_budget(c: &IndexBenchConfig, step: &str) -> std::time::Duration {
    let secs = if step.starts_with("loading") {
        c.records as f64 / 10_000.0
    } else if step.contains(" thread(s)") {
        if c.max_seconds > 0.0 {
            c.max_seconds * 3.0
        } else {
            c.operations as f64 / 10_000.0
        }
    } else {
        0.0
    };
    std::time::Duration::from_secs_f64(secs.max(0.0) + 60.0)
}

/// The runs of one index that share a load: `(job, thread count)` pairs, in
/// order. Without `reload` that is every job at every thread count after one
/// load (PiBench loads for every run; the default keeps runs short). With it,
/// a new load begins before any run that follows a run which inserted or
/// removed keys since the last load.
fn load_groups(jobs: &[Job], threads: &[usize], reload: bool) -> Vec<Vec<(usize, usize)>> {
    let mut groups = vec![Vec::new()];
    let mut changed = false;
    for (ji, j) in jobs.iter().enumerate() {
        for &t in threads {
            if reload && changed {
                groups.push(Vec::new());
                changed = false;
            }
            if let Some(g) = groups.last_mut() {
                g.push((ji, t));
            }
            changed |= j.mix.insert > 0.0 || j.mix.remove > 0.0;
        }
    }
    groups
}

/// What one load of an index runs (see [`load_groups`]).
struct RunsOf<'a> {
    jobs: &'a [Job],
    runs: &'a [(usize, usize)],
    /// The index's first load: it reports what the index is.
    first: bool,
}

/// One index's part of [`run`] for one load: open it, load it, run its runs,
/// checking every answer against the keys it must hold, and report through
/// `emit`.
#[allow(clippy::too_many_arguments)]
fn run_index(
    v: &str,
    c: &IndexBenchConfig,
    cfg: &VariantConfig,
    codec: &KeyCodec,
    what: &RunsOf<'_>,
    param: Option<serde_json::Value>,
    progress: &dyn Progress,
    emit: &mut dyn FnMut(Event),
) -> Result<()> {
    let lt = c.threads[0];
    emit(Event::Running("opening it".into()));
    let inst = match open_variant(v, cfg) {
        Ok(i) => i,
        Err(e @ BenchError::Unavailable { .. }) if peers::is_peer(v) => {
            emit(Event::Warning(format!(
                "{v}: not run: {}",
                isolate::chain(&e)
            )));
            return Ok(());
        }
        Err(e) => return Err(e).context_with(|| format!("opening index {v}")),
    };
    let name = inst.name.clone();
    if what.first {
        emit(Event::Note(format!("{name}: {}", inst.durability)));
        for n in &inst.notes {
            emit(Event::Warning(n.clone()));
        }
        emit(Event::Info {
            name: name.clone(),
            label: inst.label.clone(),
            contract: inst.contract.clone(),
        });
    }
    let kv = inst.kv.as_ref();
    let (load_s, load_mops, load_f, load_l, load_cpu) = if c.skip_load {
        (0.0, 0.0, 0.0, 0.0, 0.0)
    } else {
        emit(Event::Running(format!("loading {} records", c.records)));
        let flushed0 = inst.flushed_lines.as_ref().and_then(|f| f());
        progress.load_begin(&name, lt, c.records);
        let ls = load(kv, codec, c.records, lt, inst.load_batch, &|d| {
            progress.load_progress(d)
        })
        .context_with(|| format!("loading {name}"))?;
        progress.load_end();
        if ls.inserted != c.records {
            // Keys of 8 bytes and more are distinct (the ids are scrambled by
            // a bijection): a refused insert is the index's.
            let n = if codec.decodable() {
                format!(
                    "{name}: refused {} of the {} loaded keys (insert returned false for distinct keys)",
                    c.records - ls.inserted,
                    c.records
                )
            } else {
                format!(
                    "{name}: {} of {} loaded keys were distinct (keys of {} bytes collide)",
                    ls.inserted, c.records, c.key_size
                )
            };
            emit(Event::Warning(n));
        }
        let n = c.records.max(1) as f64;
        let counted = inst.flushed_lines.as_ref().and_then(|f| f());
        (
            ls.secs,
            c.records as f64 / ls.secs.max(1e-9) / 1e6,
            ls.persist.fences as f64 / n,
            match (flushed0, counted) {
                (Some(a), Some(b)) => b.saturating_sub(a) as f64 / n,
                _ => ls.persist.flushed_lines as f64 / n,
            },
            ls.cpu_secs,
        )
    };
    let key_space = if c.skip_load {
        kv.count() as u64
    } else {
        c.records
    };
    let mem = inst.memory();
    let per_rec = |b: Option<u64>| b.map(|x| x as f64 / key_space.max(1) as f64);
    let next_fresh = AtomicU64::new(c.records.max(key_space) + (1 << 40));
    // What the index must hold: checked after every answer (not with
    // --skip_load, where the harness did not load it).
    let mut expected = (!c.skip_load && codec.decodable()).then(|| KeySet::loaded(c.records));
    let (mut wrong_values, mut wrong_total) = (0u64, 0u64);
    // Records the index holds when a run begins (the load's, plus what the
    // runs since it inserted, minus what they removed).
    let mut held = key_space;
    for &(ji, t) in what.runs {
        let j = &what.jobs[ji];
        let spec = RunSpec {
            mix: j.mix,
            dist: j.dist,
            ops: c.operations,
            threads: t,
            scan_size: c.scan_size,
            latency_sampling: c.latency_sampling,
            sampling_ms: c.sampling_ms,
            seed: c.seed,
            max_seconds: (c.max_seconds > 0.0).then_some(c.max_seconds),
            check_every: RunSpec::CHECK_EVERY,
        };
        progress.run_begin(&name, t, &j.name);
        emit(Event::Running(format!("{} at {t} thread(s)", j.name)));
        let flushed0 = inst.flushed_lines.as_ref().and_then(|f| f());
        let st = run_workload(kv, codec, key_space, &next_fresh, &spec, expected.as_mut())
            .context_with(|| format!("{} on {name}", j.name))?;
        wrong_values += st.wrong_values;
        wrong_total += st.wrong_answers();
        let held_before = held;
        held = (held + st.succeeded[op_index(Op::Insert)])
            .saturating_sub(st.succeeded[op_index(Op::Remove)]);
        let flushed = flushed0
            .zip(inst.flushed_lines.as_ref().and_then(|f| f()))
            .map(|(a, b)| b.saturating_sub(a));
        let ops = st.ops.max(1) as f64;
        let mut b = BenchResult::new(&j.name, &name, param.clone(), t as u32, st.mops())
            .with("ops", st.ops)
            .with("run_s", st.secs)
            .with("cpu_s", st.cpu_secs)
            .with("mops_cpu", st.mops_cpu(t))
            .with("load_s", load_s)
            .with("records_at_start", held_before)
            .with("load_threads", lt)
            .with("load_cpu_s", load_cpu)
            .with("load_mops", load_mops)
            .with("distribution", j.dist.name())
            .with("hit_rate", st.succeeded.iter().sum::<u64>() as f64 / ops)
            .with("wrong", st.wrong_answers())
            .with("checked", expected.is_some())
            .with("samples_mops", st.samples.clone())
            .with("worker_ops", st.worker_ops.clone());
        if st.wrong_answers() > 0 {
            b = b
                .with("wrong_values", st.wrong_values)
                .with("lost_keys", st.wrong.lost)
                .with("phantom_keys", st.wrong.phantom)
                .with("failed_inserts", st.wrong.failed_inserts)
                .with("wrong_scans", st.wrong.scans);
        }
        // Ferrite's persist barriers and lines are counted by its PM
        // layer; a published index's flushes are not seen (not 0).
        if !peers::is_peer(v) {
            b = b
                .with("fences_per_op", st.persist.fences as f64 / ops)
                .with("lines_per_op", st.persist.flushed_lines as f64 / ops)
                .with("load_fences_per_insert", load_f)
                .with("load_lines_per_insert", load_l)
                .with("flush_source", "ferrite-pm counters");
        } else if let Some(lines) = flushed {
            // A counting build: its own flush instructions plus PMDK's.
            b = b
                .with("lines_per_op", lines as f64 / ops)
                .with("load_lines_per_insert", load_l)
                .with("flush_source", "counting build + libpmem interposition");
        }
        if let Some(x) = mem.dram_bytes {
            b = b.with("dram_bytes", x);
        }
        for (part, x) in &mem.dram_parts {
            b = b.with(&format!("dram_{part}_bytes"), *x);
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
        if let Some(x) = mem.pool_huge_share {
            b = b.with("pool_huge_share", x);
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
            emit(Event::Note(format!(
                "{} on {name} {t}t stopped after --max-seconds {}: {} of {} operations",
                j.name, c.max_seconds, st.ops, c.operations
            )));
        }
        if st.wrong_answers() > 0 {
            let w = st.wrong;
            let n = format!(
                "WRONG ANSWERS: {} on {name} at {t} thread(s): {} lookups returned another key's value, {} loaded keys not found, {} keys found that were never inserted or were removed, {} inserts of new keys refused, {} scans returned other records than the index holds",
                j.name, st.wrong_values, w.lost, w.phantom, w.failed_inserts, w.scans
            );
            let n = match &st.wrong_example {
                Some(x) => format!("{n}; the first: {x}"),
                None => n,
            };
            emit(Event::Warning(n));
        }
        emit(Event::Result(Box::new(b)));
    }
    emit(Event::Wrong {
        values: wrong_values,
        total: wrong_total,
    });
    emit(Event::Running("closing it".into()));
    drop(inst);
    Ok(())
}

/// Where [`write_outputs`] put the files.
#[derive(Debug, Clone)]
pub struct OutputPaths {
    pub json: PathBuf,
    pub markdown: PathBuf,
    pub chart: PathBuf,
    pub chart_cpu: PathBuf,
    pub chart_latency: Option<PathBuf>,
}

fn io_err(path: &Path) -> impl FnOnce(std::io::Error) -> BenchError + '_ {
    move |source| BenchError::Io {
        path: path.display().to_string(),
        source,
    }
}

/// Writes `<stem>.json`, `.md` (every column), `.svg` (throughput),
/// `-cpu.svg` (on-CPU throughput) and `-latency.svg` into `out`, noting the
/// extra charts in the report.
pub fn write_outputs(run: &mut IndexRun, out: &Path, stem: &str) -> Result<OutputPaths> {
    let r = &mut run.report;
    std::fs::create_dir_all(out).map_err(io_err(out))?;
    let svg = throughput_chart(r, false);
    let chart_cpu = out.join(format!("{stem}-cpu.svg"));
    std::fs::write(&chart_cpu, throughput_chart(r, true)).map_err(io_err(&chart_cpu))?;
    r.notes
        .push(format!("on-CPU throughput chart: {}", chart_cpu.display()));
    let mut chart_latency = None;
    if let Some(lat) = latency_chart(r, run.config.threads[0]) {
        let p = out.join(format!("{stem}-latency.svg"));
        std::fs::write(&p, lat).map_err(io_err(&p))?;
        r.notes
            .push(format!("latency chart (p50..p99.99): {}", p.display()));
        chart_latency = Some(p);
    }
    // A repeated run (`repeat_of`) gets a column saying which run it is.
    let mut cols = TABLE_COLS.to_vec();
    if r.results.iter().any(|x| repeat_of(x) > 0) {
        cols.insert(0, "repeat");
    }
    let chart = r
        .write_outputs(out, stem, &cols, &svg)
        .map_err(io_err(out))?;
    Ok(OutputPaths {
        json: out.join(format!("{stem}.json")),
        markdown: out.join(format!("{stem}.md")),
        chart,
        chart_cpu,
        chart_latency,
    })
}

/// Redraws the charts of a saved report into `out` (`--replot`).
pub fn replot(json_path: &Path, out: &Path, stem: &str) -> Result<Vec<PathBuf>> {
    let text = std::fs::read_to_string(json_path).map_err(io_err(json_path))?;
    let r: Report = serde_json::from_str(&text).map_err(|e| {
        BenchError::Check(format!(
            "{} is not a ferrite bench report: {e}",
            json_path.display()
        ))
    })?;
    if r.results.is_empty() || !r.environment.suite.contains_key("workload") {
        return Err(BenchError::Check(format!(
            "{} holds no index benchmark results",
            json_path.display()
        )));
    }
    std::fs::create_dir_all(out).map_err(io_err(out))?;
    let mut written = Vec::new();
    for (name, svg) in [
        (format!("{stem}.svg"), Some(throughput_chart(&r, false))),
        (format!("{stem}-cpu.svg"), Some(throughput_chart(&r, true))),
        (
            format!("{stem}-latency.svg"),
            latency_chart(&r, r.results[0].threads as usize),
        ),
    ] {
        if let Some(svg) = svg {
            let p = out.join(name);
            std::fs::write(&p, svg).map_err(io_err(&p))?;
            written.push(p);
        }
    }
    Ok(written)
}

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

/// 1000000 -> "1,000,000".
fn grouped(n: u64) -> String {
    let s = n.to_string();
    let mut out = String::new();
    for (i, ch) in s.chars().enumerate() {
        if i > 0 && (s.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(ch);
    }
    out
}

/// Tail latency of lookups (solid) and inserts (dashed) at one thread count,
/// like VLDB'22 Fig. 6: x is the percentile spaced by its nines, y is latency
/// on a log axis fitted to the data (preemption spikes would flatten a linear
/// one). An index has the same colour as in every other chart.
pub fn latency_chart(r: &Report, threads: usize) -> Option<String> {
    let keys = [
        ("p50_ns", 0.5f64, "p50"),
        ("p90_ns", 0.9, "p90"),
        ("p99_ns", 0.99, "p99"),
        ("p999_ns", 0.999, "p99.9"),
        ("p9999_ns", 0.9999, "p99.99"),
    ];
    let nines = |q: f64| -(1.0 - q).log10();
    let mut series = Vec::new();
    for x in r
        .results
        .iter()
        .filter(|x| x.threads as usize == threads && (x.bench == "lookup" || x.bench == "insert"))
    {
        let pts: Vec<(f64, f64)> = keys
            .iter()
            .filter_map(|(k, q, _)| {
                let v = match *k {
                    "p50_ns" => x.p50_ns,
                    "p99_ns" => x.p99_ns,
                    _ => x.extra.get(*k).and_then(|v| v.as_f64()),
                }?;
                Some((nines(*q), v.max(1.0)))
            })
            .collect();
        if !pts.is_empty() {
            series.push(
                Series::new(
                    format!("{} {}{}", x.variant, x.bench, repeat_suffix(repeat_of(x))),
                    pts,
                )
                .keyed(x.variant.clone())
                .dashed(x.bench == "insert"),
            );
        }
    }
    if series.is_empty() {
        return None;
    }
    let title = format!(
        "Latency percentiles, {threads} thread{}: lookup solid, insert dashed",
        if threads == 1 { "" } else { "s" }
    );
    let mut c = LineChart::new(&title, "percentile", "latency (log scale)");
    c.log_y = true;
    c.y_format = Some(&fmt_ns_tick);
    c.x_ticks = Some(
        keys.iter()
            .map(|(_, q, l)| (nines(*q), l.to_string()))
            .collect(),
    );
    Some(c.draw(&series))
}

/// Mops/s per run (and thread count), one bar per index; `on_cpu` charts
/// operations per on-CPU second instead of wall-clock Mops/s.
pub fn throughput_chart(r: &Report, on_cpu: bool) -> String {
    let w = r.environment.suite.get("workload");
    let workload_num = |k: &str| {
        w.and_then(|w| w.get(k))
            .and_then(|v| v.as_u64())
            .unwrap_or(0)
    };
    let mut cats: Vec<(String, u32, u64)> = Vec::new();
    for x in &r.results {
        let c = (x.bench.clone(), x.threads, repeat_of(x));
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
        .map(|(b, t, k)| {
            let label = if multi_t {
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
            };
            label + &repeat_suffix(*k)
        })
        .collect();
    // A run that did not happen (the index died, or was left out) is marked
    // as such, and so is one with wrong answers: never a plain bar.
    let series: Vec<(String, Vec<chart::Cell>)> = variants
        .iter()
        .map(|v| {
            let vals = cats
                .iter()
                .map(|(b, t, k)| {
                    r.results
                        .iter()
                        .find(|x| {
                            &x.bench == b
                                && x.threads == *t
                                && &x.variant == v
                                && repeat_of(x) == *k
                        })
                        .map_or(chart::Cell::MISSING, |x| chart::Cell {
                            value: if on_cpu {
                                x.extra.get("mops_cpu").and_then(|m| m.as_f64())
                            } else {
                                Some(x.mops)
                            },
                            wrong: num(x, "wrong").map_or(0, |w| w as u64),
                        })
                })
                .collect();
            (v.clone(), vals)
        })
        .collect();
    chart::bar_chart_cells(
        &format!(
            "Throughput{}: {} records, {} B keys, {} B values",
            if on_cpu { " per on-CPU second" } else { "" },
            count_text(workload_num("records")),
            workload_num("key_size"),
            workload_num("value_size")
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

// ----- the text a newcomer reads ---------------------------------------------------

/// Widest line of the text output.
pub const TEXT_WIDTH: usize = 120;

fn dist_text(d: Distribution) -> String {
    match d {
        Distribution::Uniform => "uniformly".into(),
        Distribution::Zipfian(t) => format!("zipfian (theta {t}; the hottest keys scattered)"),
        Distribution::SelfSimilar(h) => format!(
            "selfsimilar {h} ({:.0}% of the operations on {:.0}% of the keys)",
            (1.0 - h) * 100.0,
            h * 100.0
        ),
    }
}

fn keys_text(c: &IndexBenchConfig) -> String {
    let k = c.key_size;
    let mut s = if k == 8 {
        "8-byte integer keys (big-endian)".to_string()
    } else if k < 8 {
        format!("{k}-byte keys (the low bytes of an integer; duplicates possible)")
    } else if k < 16 {
        format!("{k}-byte keys (an 8-byte integer and filler)")
    } else {
        format!("{k}-byte string keys (16 hex digits and letters)")
    };
    if !c.key_prefix.is_empty() {
        let _ = write!(s, " after the prefix {:?}", c.key_prefix);
    }
    s
}

fn job_text(j: &Job, c: &IndexBenchConfig, dist: Distribution) -> String {
    let mix = j.mix;
    let mut s = match (j.name.as_str(), mix.single()) {
        (_, Some(Op::Scan)) => format!("{} ({} records from a random key)", j.name, c.scan_size),
        (_, Some(Op::Insert)) => format!("{} (new keys)", j.name),
        (_, Some(Op::Remove)) => format!("{} (loaded keys)", j.name),
        (_, Some(_)) => j.name.clone(),
        (name, None) => {
            let parts: Vec<String> = [
                (mix.read, "lookup"),
                (mix.insert, "insert"),
                (mix.update, "update"),
                (mix.remove, "remove"),
                (mix.scan, "scan"),
            ]
            .iter()
            .filter(|(r, _)| *r > 0.0)
            .map(|(r, n)| format!("{}% {n}", pct(*r)))
            .collect();
            format!("{name} ({})", parts.join(" / "))
        }
    };
    if j.dist != dist {
        let _ = write!(s, ", keys picked {}", dist_text(j.dist));
    }
    s
}

/// The workload in words.
fn workload_lines(c: &IndexBenchConfig, jobs: &[Job], dist: Distribution) -> Vec<String> {
    let threads: Vec<String> = c.threads.iter().map(|t| t.to_string()).collect();
    let th = |n: &str| if n == "1" { "thread" } else { "threads" };
    let mut v = vec![
        if c.skip_load {
            format!(
                "the index already in {} (--skip_load), then runs of {} operations each on {} {}",
                c.pool_path
                    .as_ref()
                    .map_or(String::new(), |p| p.display().to_string()),
                grouped(c.operations),
                threads.join(" and "),
                th(&threads.join(","))
            )
        } else {
            format!(
                "{} records loaded with {} {}, then runs of {} operations each on {} {}{}",
                grouped(c.records),
                c.threads[0],
                th(&c.threads[0].to_string()),
                grouped(c.operations),
                threads.join(" and then "),
                th(&threads.join(",")),
                if c.reload {
                    " (--reload: loaded anew before every run that follows inserts or removes)"
                } else {
                    ""
                }
            )
        },
        format!(
            "{}, {}-byte values; keys picked {}",
            keys_text(c),
            c.value_size,
            dist_text(dist)
        ),
        format!(
            "runs, in this order: {}",
            jobs.iter()
                .map(|j| job_text(j, c, dist))
                .collect::<Vec<_>>()
                .join("; ")
        ),
    ];
    let mut last = String::new();
    if c.max_seconds > 0.0 {
        let _ = write!(
            last,
            "a run stops after {} s (--max-seconds)",
            c.max_seconds
        );
    }
    if c.latency_sampling > 0.0 {
        if !last.is_empty() {
            last.push_str("; ");
        }
        let _ = write!(
            last,
            "the latency of {:.0}% of the operations is timed",
            c.latency_sampling * 100.0
        );
    }
    if !last.is_empty() {
        v.push(last);
    }
    if c.rounds > 1 {
        v.push(format!(
            "all of it {} times (--rounds), the indexes in a rotated order; each cell is the round with the median Mops/s",
            c.rounds
        ));
    }
    v
}

/// Wraps `text` to `width` columns, every line indented by `indent` and
/// continuation lines by two more.
fn wrap(text: &str, indent: usize, width: usize) -> Vec<String> {
    wrap_hanging(text, indent, indent + 2, width)
}

/// Wraps `text` to `width` columns: the first line indented by `first`, the
/// others by `rest`.
fn wrap_hanging(text: &str, first: usize, rest: usize, width: usize) -> Vec<String> {
    let mut out = Vec::new();
    let mut line = " ".repeat(first);
    let mut empty = true;
    for w in text.split(' ') {
        if !empty && line.chars().count() + 1 + w.chars().count() > width {
            out.push(line);
            line = " ".repeat(rest);
            empty = true;
        }
        if !empty {
            line.push(' ');
        }
        line.push_str(w);
        empty = false;
    }
    out.push(line);
    out
}

/// Left-aligned first column(s), right-aligned numbers; `left` = how many
/// leading columns are text.
fn table(head: &[&str], rows: &[Vec<String>], left: usize) -> String {
    let mut w: Vec<usize> = head.iter().map(|h| h.chars().count()).collect();
    for r in rows {
        for (i, c) in r.iter().enumerate() {
            w[i] = w[i].max(c.chars().count());
        }
    }
    let mut out = String::new();
    let mut line = |cells: &[String]| {
        let mut l = String::new();
        for (i, c) in cells.iter().enumerate() {
            if i > 0 {
                l.push_str("  ");
            }
            let pad = w[i] - c.chars().count();
            if i < left {
                l.push_str(c);
                l.push_str(&" ".repeat(pad));
            } else {
                l.push_str(&" ".repeat(pad));
                l.push_str(c);
            }
        }
        out.push_str(l.trim_end());
        out.push('\n');
    };
    line(&head.iter().map(|s| s.to_string()).collect::<Vec<_>>());
    line(&w.iter().map(|&n| "-".repeat(n)).collect::<Vec<_>>());
    for r in rows {
        line(r);
    }
    out
}

fn num(x: &BenchResult, k: &str) -> Option<f64> {
    x.extra.get(k).and_then(|v| v.as_f64())
}

fn mops_text(v: f64) -> String {
    if v >= 10.0 {
        format!("{v:.1}")
    } else if v >= 0.1 {
        format!("{v:.2}")
    } else {
        format!("{v:.3}")
    }
}

fn count_cell(v: f64) -> String {
    if v == 0.0 {
        "0".into()
    } else {
        format!("{v:.2}")
    }
}

/// The terminal output: the workload and the indexes in words, then one row
/// per operation and index (details are in the markdown and JSON files).
pub fn text(run: &IndexRun, paths: Option<&OutputPaths>) -> String {
    let r = &run.report;
    let c = &run.config;
    let dist = c.dist().unwrap_or(Distribution::Uniform);
    let mut out = String::new();
    out.push_str(
        "Ferrite index benchmark, PiBench methodology (`ferrite bench --help` lists the flags)\n\n",
    );
    out.push_str("Workload\n");
    for l in workload_lines(c, &run.jobs, dist) {
        for w in wrap(&l, 2, TEXT_WIDTH) {
            out.push_str(&w);
            out.push('\n');
        }
    }
    out.push_str("\nIndexes, and what a completed operation survives\n");
    let nw = run.indexes.iter().map(|i| i.name.len()).max().unwrap_or(0);
    for i in &run.indexes {
        let l = format!("{:<nw$}  {} — {}", i.name, i.label, i.contract);
        // Continuation lines line up with the description.
        for w in wrap_hanging(&l, 2, nw + 4, TEXT_WIDTH) {
            out.push_str(&w);
            out.push('\n');
        }
    }

    let multi_t = c.threads.len() > 1;
    let mut head = vec!["op", "index"];
    if multi_t {
        head.push("threads");
    }
    head.extend_from_slice(&["Mops/s", "on-CPU", "p50", "p99", "p99.9", "fences/op"]);
    // Wrong answers get a column as soon as one run has any (the notes below
    // the table say which and show the first).
    let any_wrong = r
        .results
        .iter()
        .any(|x| num(x, "wrong").is_some_and(|w| w > 0.0));
    if any_wrong {
        head.push("wrong");
    }
    let mut rows = Vec::new();
    let mut stopped = false;
    // How often each (bench, threads) was run before: a repeated run is
    // the result with that repeat number, not the first one again.
    let mut before = std::collections::HashMap::new();
    for j in &run.jobs {
        let mut first = true;
        for &t in &c.threads {
            let n = before.entry((j.name.as_str(), t)).or_insert(0u64);
            let k = *n;
            *n += 1;
            for i in &run.indexes {
                let Some(x) = r.results.iter().find(|x| {
                    x.bench == j.name
                        && x.variant == i.name
                        && x.threads as usize == t
                        && repeat_of(x) == k
                }) else {
                    continue;
                };
                let early = x.extra.contains_key("stopped_early");
                stopped |= early;
                let lat = |v: Option<f64>| v.map_or("-".to_string(), fmt_ns);
                let mut row = vec![
                    if first {
                        format!(
                            "{}{}",
                            j.name,
                            if multi_t {
                                String::new()
                            } else {
                                repeat_suffix(k)
                            }
                        )
                    } else {
                        String::new()
                    },
                    i.name.clone(),
                ];
                first = false;
                if multi_t {
                    row.push(format!("{t}{}", repeat_suffix(k)));
                }
                row.extend([
                    format!("{}{}", mops_text(x.mops), if early { "*" } else { "" }),
                    num(x, "mops_cpu").map_or("-".into(), mops_text),
                    lat(x.p50_ns),
                    lat(x.p99_ns),
                    lat(num(x, "p999_ns")),
                    num(x, "fences_per_op").map_or("-".into(), count_cell),
                ]);
                if any_wrong {
                    row.push(num(x, "wrong").map_or("-".into(), |w| format!("{w:.0}")));
                }
                rows.push(row);
            }
        }
    }
    out.push_str(
        "\nResults (Mops/s = million operations per second, wall clock; on-CPU = per second a worker was\n",
    );
    out.push_str(
        "running; p50, p99, p99.9 = latency percentiles; fences/op = persist barriers per operation)\n",
    );
    out.push_str(&table(&head, &rows, 2));
    if stopped {
        out.push_str("* stopped by --max-seconds: throughput over the operations done\n");
    }

    if !c.skip_load {
        let head = [
            "index",
            "load s",
            "Mops/s",
            "fences/insert",
            "DRAM B/record",
            "PM B/record",
        ];
        let mut rows = Vec::new();
        for i in &run.indexes {
            let Some(x) = r.results.iter().find(|x| x.variant == i.name) else {
                continue;
            };
            let b = |k: &str| num(x, k).map_or("-".into(), |v| format!("{v:.1}"));
            rows.push(vec![
                i.name.clone(),
                num(x, "load_s").map_or("-".into(), |v| format!("{v:.2}")),
                num(x, "load_mops").map_or("-".into(), mops_text),
                num(x, "load_fences_per_insert").map_or("-".into(), count_cell),
                b("dram_B_per_rec"),
                b("pm_B_per_rec"),
            ]);
        }
        let _ = writeln!(
            out,
            "\nLoad of {} records with {} {}, and memory after it",
            grouped(c.records),
            c.threads[0],
            if c.threads[0] == 1 {
                "thread"
            } else {
                "threads"
            }
        );
        out.push_str(&table(&head, &rows, 1));
    }

    for w in &run.warnings {
        for l in wrap(&format!("note: {w}"), 0, TEXT_WIDTH) {
            out.push_str(&l);
            out.push('\n');
        }
    }
    out.push('\n');
    let e = &r.environment;
    let machine = format!(
        "machine: {}{}",
        e.summary(),
        e.loadavg_after
            .map_or(String::new(), |l| format!(" -> {l:.2} after"))
    );
    for l in wrap(&machine, 0, TEXT_WIDTH) {
        out.push_str(&l);
        out.push('\n');
    }
    if let Some(p) = paths {
        let name = |f: &Path| {
            f.file_name()
                .map_or(String::new(), |n| n.to_string_lossy().into_owned())
        };
        let dir = p
            .json
            .parent()
            .map_or(String::new(), |d| d.display().to_string());
        let mut l = format!(
            "charts in {dir}/: {} (throughput), {} (on-CPU)",
            name(&p.chart),
            name(&p.chart_cpu)
        );
        if let Some(lat) = &p.chart_latency {
            let _ = write!(l, ", {} (latency)", name(lat));
        }
        let _ = write!(
            l,
            "; every metric: {} (table), {} (JSON)",
            name(&p.markdown),
            name(&p.json)
        );
        for w in wrap(&l, 0, TEXT_WIDTH) {
            out.push_str(&w);
            out.push('\n');
        }
    }
    out
}

/// A note when the pool directory maps pools with 2 MiB pages (its probe pool
/// got them) but a measured pool did not get them all: a fragmented tmpfs
/// falls back to 4 KiB pages silently, and those runs are slower for it.
fn partly_huge_note(r: &ferrite_report::Report) -> Option<String> {
    let huge_dir = r
        .environment
        .suite
        .get("pool_page_bytes")
        .and_then(|v| v.as_u64())
        == Some(2 << 20);
    let short: Vec<String> = r
        .results
        .iter()
        .filter_map(|x| {
            let share = x.extra.get("pool_huge_share")?.as_f64()?;
            (share < 0.99).then(|| {
                format!(
                    "{} {} ({} thread{}): {:.0} %",
                    x.variant,
                    x.bench,
                    x.threads,
                    if x.threads == 1 { "" } else { "s" },
                    share * 100.0
                )
            })
        })
        .collect();
    (huge_dir && !short.is_empty()).then(|| {
        format!(
            "pools on 2 MiB pages: this directory maps pools with 2 MiB pages, but these runs' pools had only part of their resident pages on them (pool_huge_share; the rest on 4 KiB pages, which makes them slower): {}",
            short.join(", ")
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The note names exactly the runs whose pool got part of its pages on
    /// 2 MiB pages, and only where the directory gives pools 2 MiB pages.
    #[test]
    fn runs_whose_pool_got_only_some_huge_pages_are_named() {
        use ferrite_report::{BenchResult, Report};
        let mut r = Report::new("index");
        r.results = vec![
            BenchResult::new("scan", "ferrite", None, 2, 0.6).with("pool_huge_share", 0.62),
            BenchResult::new("scan", "ferrite", None, 1, 0.4).with("pool_huge_share", 1.0),
            BenchResult::new("lookup", "btreemap", None, 1, 1.0),
        ];
        assert_eq!(partly_huge_note(&r), None, "no page size known");
        r.environment
            .suite
            .insert("pool_page_bytes".into(), serde_json::json!(4096));
        assert_eq!(partly_huge_note(&r), None, "a directory of 4 KiB pages");
        r.environment
            .suite
            .insert("pool_page_bytes".into(), serde_json::json!(2 << 20));
        let n = partly_huge_note(&r).expect("a note");
        assert!(n.ends_with(": ferrite scan (2 threads): 62 %"), "{n}");
        r.results.remove(0);
        assert_eq!(partly_huge_note(&r), None, "every pool fully on huge pages");
    }

    fn cfg(f: impl FnOnce(&mut IndexBenchConfig)) -> IndexBenchConfig {
        let mut c = IndexBenchConfig::default();
        f(&mut c);
        c
    }

    #[test]
    fn ratios_make_one_mix_and_the_read_ratio_is_the_rest() {
        let c = cfg(|c| {
            c.read_ratio = Some(0.5);
            c.update_ratio = Some(0.5);
        });
        let j = c.jobs(Distribution::Uniform).unwrap();
        assert_eq!(j.len(), 1);
        assert_eq!(j[0].name, "r50i0u50d0s0");
        assert_eq!(j[0].mix.read, 0.5);
        let c = cfg(|c| c.insert_ratio = Some(1.0));
        assert_eq!(c.jobs(Distribution::Uniform).unwrap()[0].name, "insert");
        let c = cfg(|c| {
            c.read_ratio = Some(0.9);
            c.insert_ratio = Some(0.5);
        });
        assert!(c.jobs(Distribution::Uniform).is_err());
    }

    #[test]
    fn standard_runs_and_mixed_use_selfsimilar() {
        let c = cfg(|c| c.benches = vec!["lookup".into(), "mixed".into()]);
        let j = c.jobs(Distribution::Uniform).unwrap();
        assert_eq!(j.len(), 2);
        assert_eq!(j[1].dist, Distribution::SelfSimilar(0.2));
        let c = cfg(|c| c.benches = vec!["nope".into()]);
        assert!(c.jobs(Distribution::Uniform).is_err());
        let c = cfg(|c| c.benches = vec!["r90i10".into(), "r10i90".into()]);
        let j = c.jobs(Distribution::Uniform).unwrap();
        assert_eq!((j[0].mix.read, j[0].mix.insert), (0.9, 0.1));
        assert_eq!((j[1].mix.read, j[1].mix.insert), (0.1, 0.9));
        let c = cfg(|c| c.benches = vec!["r90i20".into()]);
        assert!(c.jobs(Distribution::Uniform).is_err());
    }

    #[test]
    fn reload_starts_a_load_after_each_run_that_changed_the_keys() {
        let c = cfg(|c| {
            c.benches = ["lookup", "update", "mixed", "insert", "scan"]
                .map(String::from)
                .to_vec()
        });
        let jobs = c.jobs(Distribution::Uniform).unwrap();
        let names = |g: &Vec<(usize, usize)>| -> Vec<String> {
            g.iter()
                .map(|&(j, t)| format!("{}{t}", jobs[j].name))
                .collect()
        };
        let groups = load_groups(&jobs, &[1, 2], true);
        let got: Vec<Vec<String>> = groups.iter().map(names).collect();
        assert_eq!(
            got,
            [
                vec!["lookup1", "lookup2", "update1", "update2", "mixed1", "mixed2", "insert1"],
                vec!["insert2"],
                vec!["scan1", "scan2"],
            ]
        );
        let once = load_groups(&jobs, &[1, 2], false);
        assert_eq!(once.len(), 1);
        assert_eq!(once[0].len(), 10);
        // A lookup/insert mix changes the keys too; one thread count: a load per run.
        let c = cfg(|c| c.benches = vec!["r50i50".into(), "r90i10".into()]);
        let jobs = c.jobs(Distribution::Uniform).unwrap();
        assert_eq!(load_groups(&jobs, &[1], true).len(), 2);
        assert_eq!(load_groups(&jobs, &[1, 2], true).len(), 4);
    }

    /// Every thread count of a reloaded insert run starts from the loaded
    /// index; without --reload the second starts from what the first left.
    #[test]
    fn reloaded_insert_runs_start_from_the_loaded_index() {
        for reload in [false, true] {
            let c = cfg(|c| {
                c.records = 3000;
                c.operations = 1000;
                c.threads = vec![1, 2];
                c.benches = vec!["insert".into(), "lookup".into()];
                c.compare = Some(vec!["btreemap".into(), "ferrite".into()]);
                c.reload = reload;
                c.latency_sampling = 0.0;
            });
            let run = run(&c, &Quiet).unwrap();
            assert_eq!(run.wrong_values, 0);
            assert_eq!(run.indexes.len(), 2, "each index reported once");
            for v in ["btreemap", "ferrite"] {
                let at = |bench: &str, t: u32| {
                    let r = run
                        .report
                        .results
                        .iter()
                        .find(|r| r.variant == v && r.bench == bench && r.threads == t)
                        .unwrap_or_else(|| panic!("{v} {bench} {t}"));
                    assert_eq!(r.extra["wrong"], 0, "{v} {bench} {t}");
                    r.extra["records_at_start"].as_u64().unwrap()
                };
                assert_eq!(at("insert", 1), 3000);
                assert_eq!(at("insert", 2), if reload { 3000 } else { 4000 });
                assert_eq!(at("lookup", 1), if reload { 3000 } else { 5000 });
                assert_eq!(at("lookup", 2), at("lookup", 1));
            }
        }
        assert!(run(
            &cfg(|c| {
                c.reload = true;
                c.pool_path = Some("/dev/shm/x".into());
            }),
            &Quiet
        )
        .is_err());
    }

    /// The median round's result per cell, every round's Mops/s beside it,
    /// and wrong answers of any round kept.
    #[test]
    fn rounds_reduce_to_the_median_run_with_every_wrong_answer() {
        let r = |v: &str, mops: f64, wrong: u64| {
            BenchResult::new("lookup", v, None, 1, mops)
                .with("wrong", wrong)
                .with("run_s", mops * 10.0)
        };
        let out = median_of_rounds(vec![
            r("a", 1.0, 0),
            r("b", 5.0, 0),
            r("a", 3.0, 2),
            r("b", 4.0, 0),
            r("a", 2.0, 0),
            r("b", 6.0, 1),
            BenchResult::new("lookup", "a", None, 2, 9.0),
        ]);
        assert_eq!(out.len(), 3);
        let (a, b, a2) = (&out[0], &out[1], &out[2]);
        assert_eq!((a.variant.as_str(), a.mops), ("a", 2.0));
        // The median run's own fields, not a mix of runs.
        assert_eq!(a.extra["run_s"], 20.0);
        assert_eq!(a.extra["wrong"], 2);
        assert_eq!(a.extra["mops_rounds"], json!([1.0, 3.0, 2.0]));
        assert_eq!(
            (a.extra["mops_min"].as_f64(), a.extra["mops_max"].as_f64()),
            (Some(1.0), Some(3.0))
        );
        assert_eq!(b.mops, 5.0);
        assert_eq!(b.extra["wrong"], 1);
        assert_eq!(b.extra["rounds"], 3);
        assert_eq!(
            (a2.threads, a2.mops, &a2.extra["rounds"]),
            (2, 9.0, &json!(1))
        );
        // An even count takes the lower middle run.
        let even = median_of_rounds(vec![
            r("a", 4.0, 0),
            r("a", 1.0, 0),
            r("a", 3.0, 0),
            r("a", 2.0, 0),
        ]);
        assert_eq!(even[0].mops, 2.0);
    }

    /// Several rounds: each index is reported once, each cell once, with as
    /// many rounds as asked.
    #[test]
    fn a_comparison_in_rounds_reports_each_cell_once() {
        let c = cfg(|c| {
            c.records = 2000;
            c.operations = 1000;
            c.benches = vec!["lookup".into(), "insert".into()];
            c.compare = Some(vec!["btreemap".into(), "ferrite-dram".into()]);
            c.latency_sampling = 0.0;
            c.rounds = 3;
        });
        let run = run(&c, &Quiet).unwrap();
        assert_eq!(run.wrong_values, 0);
        assert_eq!(run.indexes.len(), 2);
        assert_eq!(run.indexes[0].name, "btreemap");
        assert_eq!(run.report.results.len(), 2 * 2);
        for r in &run.report.results {
            assert_eq!(r.extra["rounds"], 3, "{} {}", r.variant, r.bench);
            let all: Vec<f64> = r.extra["mops_rounds"]
                .as_array()
                .unwrap()
                .iter()
                .map(|m| m.as_f64().unwrap())
                .collect();
            assert_eq!(all.len(), 3);
            assert!(all.iter().all(|&m| m > 0.0));
            assert!(all.contains(&r.mops));
            assert_eq!(r.extra["records_at_start"], 2000);
        }
        assert!(run
            .report
            .notes
            .iter()
            .any(|n| n.starts_with("--rounds 3:")));
        let unique: std::collections::HashSet<_> = run.report.notes.iter().collect();
        assert_eq!(unique.len(), run.report.notes.len(), "notes once each");
    }

    #[test]
    fn a_repeated_run_is_shown_with_its_own_numbers() {
        // `--benches lookup,lookup -t 1,2,1`: the 1-thread lookup runs four
        // times, the 2-thread one twice. Each run must keep its own numbers in
        // the JSON, the table and the chart (they showed the first run's for
        // every repeat).
        let c = cfg(|c| {
            c.records = 2000;
            c.operations = 2000;
            c.threads = vec![1, 2, 1];
            c.benches = vec!["lookup".into(), "lookup".into()];
            c.compare = Some(vec!["btreemap-u64".into()]);
        });
        let mut run = run(&c, &Quiet).unwrap();
        let res = &run.report.results;
        let cells: Vec<(u32, u64)> = res.iter().map(|x| (x.threads, repeat_of(x))).collect();
        assert_eq!(cells, [(1, 0), (2, 0), (1, 1), (1, 2), (2, 1), (1, 3)]);
        // Distinct numbers, so that a table showing one run twice is caught.
        for (i, x) in run.report.results.iter_mut().enumerate() {
            x.mops = 1.0 + i as f64;
        }
        let t = text(&run, None);
        // The results table: the rows after its header and rule, up to the
        // blank line; from each, the threads cell and the Mops/s.
        let shown: Vec<String> = t
            .lines()
            .skip_while(|l| !(l.starts_with("op ") && l.contains("threads")))
            .skip(2)
            .take_while(|l| !l.trim().is_empty())
            .map(|l| {
                let f: Vec<&str> = l.split_whitespace().collect();
                let at = f.iter().position(|w| *w == "btreemap-u64").unwrap();
                let n = if f[at + 2].starts_with('#') { 3 } else { 2 };
                f[at + 1..at + 1 + n].join(" ")
            })
            .collect();
        assert_eq!(
            shown,
            [
                "1 1.00",
                "2 2.00",
                "1 #2 3.00",
                "1 #3 4.00",
                "2 #2 5.00",
                "1 #4 6.00"
            ],
            "{t}"
        );
        let svg = throughput_chart(&run.report, false);
        assert!(
            svg.contains("get 1t #4") && svg.contains("get 2t #2"),
            "{svg}"
        );
        // The markdown table gets a repeat column (- for a first run).
        let out = std::env::temp_dir().join(format!("ferrite-bench-repeat-{}", std::process::id()));
        let paths = write_outputs(&mut run, &out, "index").unwrap();
        let md = std::fs::read_to_string(&paths.markdown).unwrap();
        let _ = std::fs::remove_dir_all(&out);
        let head = md.lines().find(|l| l.starts_with("| bench")).unwrap();
        let col = head
            .split('|')
            .position(|c| c.trim() == "repeat")
            .expect(head);
        let reps: Vec<String> = md
            .lines()
            .filter(|l| l.starts_with("| lookup"))
            .map(|l| l.split('|').nth(col).unwrap().trim().to_string())
            .collect();
        assert_eq!(reps, ["-", "-", "1", "2", "1", "3"], "{md}");
        // Rounds: a cell's repeats stay apart, each the median of its own.
        let mut two = run.report.results.clone();
        two.extend(run.report.results.iter().cloned().map(|mut x| {
            x.mops += 0.5;
            x
        }));
        let med = median_of_rounds(two);
        assert_eq!(med.len(), 6);
        assert!(med.iter().all(|x| x.extra["rounds"] == 2));
    }

    #[test]
    fn a_small_comparison_writes_table_json_and_charts() {
        let out = std::env::temp_dir().join(format!("ferrite-bench-suite-{}", std::process::id()));
        let c = cfg(|c| {
            c.records = 2000;
            c.operations = 2000;
            c.threads = vec![1, 2];
            c.compare = Some(vec![
                "btreemap".into(),
                "btreemap-u64".into(),
                "redb-nosync".into(),
            ]);
            c.pool_dir = std::env::temp_dir();
        });
        let mut run = run(&c, &Quiet).unwrap();
        assert_eq!(run.wrong_values, 0);
        let paths = write_outputs(&mut run, &out, "index").unwrap();
        let json = std::fs::read_to_string(&paths.json).unwrap();
        let v: serde_json::Value = serde_json::from_str(&json).unwrap();
        let results = v["results"].as_array().unwrap();
        assert_eq!(results.len(), 3 * 2 * 6);
        for r in results {
            for f in [
                "bench", "variant", "param", "threads", "mops", "p50_ns", "p99_ns",
            ] {
                assert!(r.get(f).is_some(), "missing {f} in {r}");
            }
        }
        for name in ["btreemap", "btreemap-u64"] {
            let lookup = results
                .iter()
                .find(|r| r["bench"] == "lookup" && r["variant"] == name)
                .unwrap();
            assert_eq!(lookup["hit_rate"], 1.0, "{name}");
        }
        let env = &v["environment"];
        for k in [
            "cpu_model",
            "cpus",
            "flush",
            "durability",
            "git_commit",
            "date",
        ] {
            assert!(env.get(k).is_some(), "environment lacks {k}");
        }
        assert_eq!(env["workload"]["records"], 2000);
        assert!(std::fs::read_to_string(&paths.chart)
            .unwrap()
            .starts_with("<svg"));
        assert!(paths.markdown.exists());
        let lat = std::fs::read_to_string(paths.chart_latency.as_ref().unwrap()).unwrap();
        assert!(lat.contains(chart::index_color("btreemap-u64").unwrap()));
        let t = text(&run, Some(&paths));
        for l in t.lines() {
            assert!(
                l.chars().count() <= TEXT_WIDTH,
                "{} columns: {l}",
                l.chars().count()
            );
        }
        assert!(t.contains("RwLock<BTreeMap<Vec<u8>, Vec<u8>>>"));
        assert!(t.contains("RwLock<BTreeMap<u64, u64>>"));
        let replotted = replot(&paths.json, &out, "again").unwrap();
        assert_eq!(replotted.len(), 3);
        let _ = std::fs::remove_dir_all(&out);
    }

    /// With --reload a peer whose process dies while loading is tried once,
    /// not once per load; the other indexes still run every run.
    #[test]
    fn a_peer_that_dies_while_loading_is_not_reloaded() {
        use ferrite_pibench_host::probes;
        let c = cfg(|c| {
            c.records = 3000;
            c.operations = 1000;
            c.threads = vec![1, 2];
            c.benches = vec!["insert".into(), "lookup".into()];
            c.reload = true;
            c.latency_sampling = 0.0;
            c.compare = Some(vec![
                format!(
                    "pibench:{}?name=dies&env=PROBE_ABORT_AFTER_INSERTS=100",
                    probes::EP2
                ),
                "btreemap".into(),
            ]);
            c.pool_dir = std::env::temp_dir();
        });
        let run = run(&c, &Quiet).unwrap();
        let died = run
            .warnings
            .iter()
            .filter(|w| w.contains("died of signal 6"))
            .count();
        assert_eq!(died, 1, "{:?}", run.warnings);
        assert!(
            run.warnings
                .iter()
                .any(|w| w.contains("later runs were not attempted")),
            "{:?}",
            run.warnings
        );
        assert!(run.report.results.iter().all(|r| r.variant != "dies"));
        // btreemap: three loads, four runs.
        let ours: Vec<_> = run
            .report
            .results
            .iter()
            .filter(|r| r.variant == "btreemap")
            .collect();
        assert_eq!(ours.len(), 4);
        assert!(ours.iter().all(|r| r.extra["wrong"] == 0));
    }

    /// 1-thread lookups on the ep2 probe wrapper alone, loaded with `records`,
    /// its spec options `opts`, its pool in `dir`.
    fn one_peer_lookups(records: u64, opts: &str, dir: &std::path::Path) -> IndexRun {
        let c = cfg(|c| {
            c.records = records;
            c.operations = 1000;
            c.threads = vec![1];
            c.benches = vec!["lookup".into()];
            c.latency_sampling = 0.0;
            c.compare = Some(vec![format!(
                "pibench:{}?{opts}",
                ferrite_pibench_host::probes::EP2
            )]);
            c.pool_dir = dir.to_path_buf();
        });
        run(&c, &Quiet).unwrap()
    }

    /// A peer's DRAM is glibc's count of what it allocated, both measures are
    /// in the report, and resident memory counts only when it is far above
    /// the count. The probe is a `std::map<std::string, std::string>`: glibc
    /// hands it at least a node of three words plus two 32-byte strings per
    /// record.
    #[test]
    fn a_peers_dram_is_what_glibc_handed_it_unless_resident_memory_is_far_above() {
        let run = one_peer_lookups(20_000, "name=map", &std::env::temp_dir());
        let r = run
            .report
            .results
            .iter()
            .find(|r| r.variant == "map")
            .expect("the probe ran");
        let get = |k: &str| {
            r.extra[k]
                .as_u64()
                .unwrap_or_else(|| panic!("{k}: {:?}", r.extra))
        };
        let (dram, rss, heap) = (
            get("dram_bytes"),
            get("dram_rss_anon_bytes"),
            get("dram_malloc_bytes"),
        );
        assert_eq!(Some(dram), peers::peer_dram(Some(rss), Some(heap)));
        assert!(heap >= 20_000 * 88, "{heap} B for 20,000 map nodes");
        assert!(dram >= heap);
        assert_eq!(r.extra["dram_source"], "malloc growth (RssAnon if over 2x)");
        // Reused pages (RSS below the count) and fresh ones (a little above)
        // do not move it; memory held outside glibc (far above) does.
        assert_eq!(peers::peer_dram(Some(5), Some(7)), Some(7));
        assert_eq!(
            peers::peer_dram(Some(60 << 20), Some(40 << 20)),
            Some(40 << 20)
        );
        assert_eq!(
            peers::peer_dram(Some(200 << 20), Some(40 << 20)),
            Some(200 << 20)
        );
        assert_eq!(peers::peer_dram(Some(9), None), Some(9));
        assert_eq!(peers::peer_dram(None, None), None);
    }

    /// A peer that maps a sparse pool (as ROART's DCMM allocator does) dies of
    /// SIGBUS on a full tmpfs: the report says the filesystem was full, not
    /// only which signal. On a real full tmpfs; with room, no such note.
    #[test]
    fn a_malformed_peer_spec_is_refused_before_anything_runs() {
        let c = cfg(|c| {
            c.records = 100;
            c.compare = Some(vec![
                "btreemap".into(),
                "pibench:/nonexistent/libx.so?pool_per_record=lots".into(),
            ]);
        });
        match run(&c, &Quiet) {
            Err(BenchError::Options(m)) => assert!(m.contains("pool_per_record=\"lots\""), "{m}"),
            other => panic!("{:?}", other.map(|r| r.warnings)),
        }
    }

    #[test]
    fn a_peer_killed_by_a_full_filesystem_is_told_so() {
        let Some(fs) = ferrite_testkit::FullFs::new(16 << 20) else {
            return;
        };
        // 32 KiB of pool per insert: 64 MiB for the load.
        let run_in = |dir: &std::path::Path| {
            one_peer_lookups(
                2000,
                "name=sparse&env=PROBE_POOL_BYTES_PER_INSERT=32768",
                dir,
            )
        };
        let full = run_in(fs.path());
        assert!(
            full.warnings.iter().any(|w| w.contains("died of signal 7")),
            "{:?}",
            full.warnings
        );
        assert!(
            full.warnings
                .iter()
                .any(|w| w.contains(": the filesystem of its pool directory")
                    && w.contains("was full")),
            "{:?}",
            full.warnings
        );
        // Its pool was removed, so the filesystem has room again.
        assert!(peers::full_filesystem_note(fs.path()).is_none());
        let roomy = run_in(&std::env::temp_dir());
        assert!(roomy.warnings.is_empty(), "{:?}", roomy.warnings);
        assert!(roomy.report.results.iter().any(|r| r.variant == "sparse"));
    }

    #[test]
    fn published_wrappers_run_beside_ours_and_their_wrong_answers_are_counted() {
        use ferrite_pibench_host::probes;
        let out = std::env::temp_dir().join(format!("ferrite-bench-peers-{}", std::process::id()));
        let c = cfg(|c| {
            c.records = 3000;
            c.operations = 3000;
            c.threads = vec![1, 2];
            c.benches = vec!["lookup".into(), "scan".into(), "insert".into()];
            c.compare = Some(vec![
                "btreemap".into(),
                format!("pibench:{}", probes::EP2),
                format!("pibench:{}", probes::OPTIQL),
                format!("pibench:{}?name=wrong", probes::EP2_WRONG),
                "pibench:/nonexistent/libnothing.so".into(),
            ]);
            c.pool_dir = std::env::temp_dir();
        });
        let mut run = run(&c, &Quiet).unwrap();
        assert_eq!(run.wrong_ours, 0);
        let cell = |v: &str, b: &str, t: u32| {
            run.report
                .results
                .iter()
                .find(|x| x.variant == v && x.bench == b && x.threads == t)
                .unwrap_or_else(|| panic!("no {b} {t}t for {v}"))
                .clone()
        };
        for v in ["btreemap", "probe_ep2", "probe_optiql"] {
            for b in ["lookup", "scan", "insert"] {
                for t in [1, 2] {
                    let x = cell(v, b, t);
                    assert_eq!(x.extra["wrong"], 0, "{v} {b} {t}t: {x:?}");
                    assert_eq!(x.extra["checked"], true);
                }
            }
            assert_eq!(cell(v, "lookup", 1).extra["hit_rate"], 1.0, "{v}");
        }
        // The wrong wrapper: a seventh of lookups miss, every scan is reversed.
        let l = cell("wrong", "lookup", 1);
        let lost = l.extra["lost_keys"].as_u64().unwrap();
        assert!((300..=500).contains(&lost), "{lost} of 3000 lookups lost");
        // Every scan of two records or more is wrong; a scan that starts at
        // the last key returns one record, which reversed is right (about one
        // scan in 3,000 here: which ones depends on how the workers share the
        // run's operations).
        let s = cell("wrong", "scan", 2);
        let (wrong, ops) = (
            s.extra["wrong_scans"].as_u64().unwrap(),
            s.extra["ops"].as_u64().unwrap(),
        );
        assert!(
            wrong <= ops && wrong * 100 >= ops * 99,
            "{wrong} of {ops} scans wrong"
        );
        assert!(run
            .warnings
            .iter()
            .any(|w| w.contains("WRONG ANSWERS") && w.contains("wrong")));
        // A library that is not there is a note; the others still ran.
        assert!(run
            .warnings
            .iter()
            .any(|w| w.contains("libnothing.so") && w.contains("not run")));
        let paths = write_outputs(&mut run, &out, "peers").unwrap();
        assert!(paths.chart.exists());
        // The chart marks every cell with wrong answers (and only those)
        // instead of drawing it as a plain bar.
        let svg = std::fs::read_to_string(&paths.chart).unwrap();
        let wrong_cells = run
            .report
            .results
            .iter()
            .filter(|x| x.extra["wrong"].as_u64().unwrap_or(0) > 0)
            .count();
        assert!(wrong_cells >= 4, "{wrong_cells}");
        assert_eq!(svg.matches("fill-opacity=\"0.35\"").count(), wrong_cells);
        assert!(svg.contains("wrong answers (not comparable)"));
        // The wrong answers are in the table, row by row, and in the markdown.
        let t = text(&run, Some(&paths));
        assert!(
            t.lines()
                .any(|l| l.starts_with("op ") && l.ends_with("wrong")),
            "{t}"
        );
        let lost = lost.to_string();
        assert!(
            t.lines().any(|l| {
                let f: Vec<&str> = l.split_whitespace().collect();
                f.first() == Some(&"wrong")
                    && f.get(1) == Some(&"1")
                    && f.last() == Some(&lost.as_str())
            }),
            "{t}"
        );
        assert!(t.lines().all(|l| l.chars().count() <= TEXT_WIDTH), "{t}");
        let md = std::fs::read_to_string(&paths.markdown).unwrap();
        assert!(md.contains("wrong"), "{md}");
        let _ = std::fs::remove_dir_all(&out);
    }

    #[test]
    fn the_default_text_fits_and_says_what_was_run() {
        // A report with the default shape, without running anything.
        let c = IndexBenchConfig::default();
        let jobs = c.jobs(c.dist().unwrap()).unwrap();
        let mut report = Report::new("index");
        let names = [
            "ferrite",
            "ferrite-dram",
            "btreemap",
            "btreemap-u64",
            "redb",
        ];
        for j in &jobs {
            for n in names {
                let mut b = BenchResult::new(&j.name, n, None, 1, 1.234)
                    .with("mops_cpu", 2.5)
                    .with("p999_ns", 12_345_678.0)
                    .with("fences_per_op", 1.125)
                    .with("load_s", 12.5)
                    .with("load_mops", 0.08)
                    .with("load_fences_per_insert", 1.12)
                    .with("dram_B_per_rec", 137.9)
                    .with("pm_B_per_rec", 135.2);
                b.p50_ns = Some(50_104.0);
                b.p99_ns = Some(4_120_687.0);
                if n == "redb" {
                    b = b.with("stopped_early", true);
                }
                report.results.push(b);
            }
        }
        let indexes = names
            .iter()
            .map(|n| IndexInfo {
                name: n.to_string(),
                label: "a label long enough to need most of a line for what it is".into(),
                contract: "fsync per commit, power-fail safe on a real disk (here the file is in /dev/shm)".into(),
            })
            .collect();
        let run = IndexRun {
            report,
            indexes,
            jobs,
            config: c,
            wrong_values: 0,
            wrong_ours: 0,
            warnings: vec![],
        };
        let t = text(&run, None);
        for l in t.lines() {
            assert!(
                l.chars().count() <= TEXT_WIDTH,
                "{} columns: {l}",
                l.chars().count()
            );
        }
        assert!(t.contains("1,000,000 records"));
        assert!(t.contains("8-byte integer keys"));
        assert!(t.contains("mixed (50% lookup / 50% update"));
        assert!(t.contains("80% of the operations on 20% of the keys"));
        assert!(t.contains("* stopped by --max-seconds"));
    }

    #[test]
    fn counts_read_well() {
        assert_eq!(grouped(1_000_000), "1,000,000");
        assert_eq!(grouped(999), "999");
        assert_eq!(count_text(10_000_000), "10M");
        assert_eq!(count_text(250_000), "250K");
    }
}
