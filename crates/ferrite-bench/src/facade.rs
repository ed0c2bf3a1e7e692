//! `ferrite bench facade`: what the `ferrite` facade (the library programs
//! embed) costs over the index it wraps, and what the Python binding gives
//! against the stores a Python user would pick instead, in one run.
//!
//! Part 1 runs the index benchmark's driver on `ferrite` (the index called
//! directly) and `ferrite-facade` (the same index through `ferrite::Map`,
//! writer gate included) on identical workloads, `rounds` times with the order
//! alternating, and reports the median throughput of each and the median of
//! the per-round ratios (facade / index): the bar is at most 5% overhead on
//! lookups and inserts.
//!
//! Part 2 (when a Python interpreter with the `ferrite` package is given)
//! runs `python/bench/bench.py`: the binding's durable map against `dict`,
//! LMDB (the `lmdb` package) and `sqlite3`, all in one Python process.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

use ferrite_report::{chart, BenchResult};

use crate::index::suite::{self, IndexBenchConfig, Quiet};
use crate::{env, BenchError, BenchOutput, Result};

/// What `ferrite bench facade` takes.
#[derive(Debug, Clone)]
pub struct FacadeConfig {
    pub records: u64,
    pub operations: u64,
    pub rounds: usize,
    pub threads: usize,
    pub max_seconds: f64,
    pub pool_dir: PathBuf,
    /// A Python interpreter that imports `ferrite` (and `lmdb`): part 2.
    pub python: Option<PathBuf>,
    pub py_records: u64,
    /// The runs of part 1 (a subset of [`BENCHES`]).
    pub benches: Vec<String>,
    /// Slices of the paired measurement (0: skip it).
    pub slices: usize,
    /// Operations per slice and variant.
    pub slice_ops: u64,
}

impl Default for FacadeConfig {
    fn default() -> Self {
        FacadeConfig {
            records: 1_000_000,
            operations: 1_000_000,
            rounds: 3,
            threads: 1,
            max_seconds: 5.0,
            pool_dir: PathBuf::from("/dev/shm"),
            python: None,
            py_records: 200_000,
            benches: BENCHES.iter().map(|s| s.to_string()).collect(),
            slices: 40,
            slice_ops: 25_000,
        }
    }
}

/// The runs of part 1.
pub const BENCHES: &[&str] = &["lookup", "insert", "update", "scan"];

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    if v.is_empty() {
        return 0.0;
    }
    let m = v.len() / 2;
    if v.len() % 2 == 1 {
        v[m]
    } else {
        (v[m - 1] + v[m]) / 2.0
    }
}

/// Runs both parts. The second value is the Python chart (SVG), when part 2 ran.
pub fn facade(c: &FacadeConfig) -> Result<(BenchOutput, Option<String>)> {
    let mut r = env::report("facade", &c.pool_dir);
    // (bench, variant) -> per-round Mops/s (wall clock, and per on-CPU second
    // of the worker), and the last round's costs.
    let mut mops: BTreeMap<(String, String), Vec<f64>> = BTreeMap::new();
    let mut cpu: BTreeMap<(String, String), Vec<f64>> = BTreeMap::new();
    let mut costs: BTreeMap<(String, String), BenchResult> = BTreeMap::new();
    for round in 0..c.rounds.max(1) {
        let order = if round % 2 == 0 {
            ["ferrite", "ferrite-facade"]
        } else {
            ["ferrite-facade", "ferrite"]
        };
        let cfg = IndexBenchConfig {
            records: c.records,
            operations: c.operations,
            threads: vec![c.threads],
            compare: Some(order.iter().map(|s| s.to_string()).collect()),
            benches: c.benches.clone(),
            max_seconds: c.max_seconds,
            latency_sampling: 0.0,
            pool_dir: c.pool_dir.clone(),
            ..IndexBenchConfig::default()
        };
        let run = suite::run(&cfg, &Quiet)?;
        if run.wrong_values > 0 {
            return Err(BenchError::Check(format!(
                "{} lookups returned a value of another key",
                run.wrong_values
            )));
        }
        for x in run.report.results {
            let key = (x.bench.clone(), x.variant.clone());
            mops.entry(key.clone()).or_default().push(x.mops);
            if let Some(c) = x.extra.get("mops_cpu").and_then(|v| v.as_f64()) {
                cpu.entry(key.clone()).or_default().push(c);
            }
            costs.insert(key, x);
        }
    }
    for bench in &c.benches {
        let bench = bench.as_str();
        let get = |m: &BTreeMap<(String, String), Vec<f64>>, v: &str| {
            m.get(&(bench.to_string(), v.to_string())).cloned()
        };
        let (Some(mut idx), Some(mut fac)) = (get(&mops, "ferrite"), get(&mops, "ferrite-facade"))
        else {
            continue;
        };
        let ratio_of = |a: &[f64], b: &[f64]| {
            let mut r: Vec<f64> = a
                .iter()
                .zip(b)
                .filter(|(i, _)| **i > 0.0)
                .map(|(i, f)| f / i)
                .collect();
            median(&mut r)
        };
        let wall_ratio = ratio_of(&idx, &fac);
        let (idx_cpu, fac_cpu) = (
            get(&cpu, "ferrite").unwrap_or_default(),
            get(&cpu, "ferrite-facade").unwrap_or_default(),
        );
        // On-CPU throughput is what compares on a machine shared with other
        // work; the wall-clock ratio is reported beside it.
        let ratio = if idx_cpu.is_empty() {
            wall_ratio
        } else {
            ratio_of(&idx_cpu, &fac_cpu)
        };
        let mut cpu_of = [idx_cpu, fac_cpu];
        for (i, (variant, v)) in [("ferrite", &mut idx), ("ferrite-facade", &mut fac)]
            .into_iter()
            .enumerate()
        {
            let (lo, hi) = (
                v.iter().cloned().fold(f64::INFINITY, f64::min),
                v.iter().cloned().fold(0.0, f64::max),
            );
            let mut res = BenchResult::new(bench, variant, None, c.threads as u32, median(v))
                .with("rounds", v.len() as u64)
                .with("mops_cpu", median(&mut cpu_of[i]))
                .with("min_mops", lo)
                .with("max_mops", hi);
            if let Some(x) = costs.get(&(bench.to_string(), variant.to_string())) {
                for k in ["fences_per_op", "lines_per_op"] {
                    if let Some(val) = x.extra.get(k) {
                        res = res.with(k, val.clone());
                    }
                }
            }
            if variant == "ferrite-facade" {
                res = res
                    .with("vs_index", ratio)
                    .with("vs_index_wall", wall_ratio)
                    .with("overhead_pct", (1.0 - ratio) * 100.0);
            }
            r.results.push(res);
        }
    }
    if c.slices > 0 {
        r.notes.push(format!(
            "*-paired rows: the bar's measurement. Both variants loaded with {} records, then {} slices of {} operations on each, order alternating, timed on the worker's CPU clock; vs_index_paired = index CPU time / facade CPU time (Mops/s of these rows are per CPU second)",
            c.records, c.slices, c.slice_ops
        ));
    }
    r.notes.push(format!(
        "ferrite = FerriteIndex called directly; ferrite-facade = the same index through ferrite::Map (writer gate, typed errors); {} rounds, order alternating; vs_index = median of the per-round facade/index ratios of on-CPU throughput (mops_cpu: operations per on-CPU second of the worker, robust to the other load of this shared machine), vs_index_wall the same of wall-clock throughput",
        c.rounds
    ));
    let cats: Vec<String> = c.benches.clone();
    let series: Vec<(String, Vec<f64>)> = ["ferrite", "ferrite-facade"]
        .iter()
        .map(|v| {
            let vals = cats
                .iter()
                .map(|b| {
                    r.results
                        .iter()
                        .find(|x| &x.bench == b && x.variant == *v)
                        .map_or(0.0, |x| x.mops)
                })
                .collect();
            (v.to_string(), vals)
        })
        .collect();
    let svg = chart::bar_chart(
        &format!(
            "The facade over the index: {} records, {} thread(s), median of {} rounds",
            c.records, c.threads, c.rounds
        ),
        "Mops/s",
        &cats,
        &series,
    );
    if c.slices > 0 {
        for p in paired(c)? {
            r.results.push(p);
        }
    }
    let py_svg = match &c.python {
        Some(py) => Some(python_part(py, c, &mut r)?),
        None => {
            r.notes.push("Python comparison not run: pass --python PYTHON (an interpreter with the ferrite and lmdb packages)".into());
            None
        }
    };
    env::finish(&mut r);
    Ok((
        BenchOutput {
            report: r,
            svg,
            extra_cols: vec![
                "mops_cpu",
                "vs_index",
                "vs_index_wall",
                "vs_index_paired",
                "overhead_pct",
                "vs_dict",
                "min_mops",
                "max_mops",
                "fences_per_op",
            ],
        },
        py_svg,
    ))
}

/// The bar's operations (lookups and inserts) measured in interleaved
/// slices: both variants loaded with the same `records`, then `slices`
/// times `slice_ops` operations on one and the same operations on the
/// other (the order alternating), each slice timed on the worker's CPU
/// clock. Other load on the machine lands on both variants within
/// milliseconds of each other, so the ratio of the summed CPU times is far
/// steadier than that of whole runs seconds apart. Rows `lookup-paired` and
/// `insert-paired` of `ferrite-facade` carry `vs_index_paired` (index CPU
/// time / facade CPU time: the facade's throughput relative to the index).
fn paired(c: &FacadeConfig) -> Result<Vec<BenchResult>> {
    use crate::index::variants::{open_variant, VariantConfig};
    use crate::index::workload::{KeyCodec, Rng};
    use ferrite_pm::clock::thread_cpu_secs;

    let inserts = c.slices as u64 * c.slice_ops;
    let vc = VariantConfig {
        pool_dir: c.pool_dir.clone(),
        pool_path: None,
        pool_size: 0,
        max_records: c.records + inserts,
        key_len: 8,
        value_size: 8,
        reopen: false,
        redb_load_batch: 1,
        threads: 1,
    };
    let names = ["ferrite", "ferrite-facade"];
    let inst = [open_variant(names[0], &vc)?, open_variant(names[1], &vc)?];
    let codec = KeyCodec::new(8, 8, "")?;
    let (mut k, mut v, mut out) = (Vec::new(), Vec::new(), Vec::new());
    for id in 0..c.records {
        codec.key(id, &mut k);
        codec.value(id, 0, &mut v);
        for i in &inst {
            i.kv.insert(&k, &v)
                .map_err(|e| BenchError::Check(e.to_string()))?;
        }
    }
    let mut rows = Vec::new();
    for op in ["lookup", "insert"] {
        // Summed CPU seconds per variant, and each slice's ratio.
        let mut cpu = [0.0f64; 2];
        let mut ratios = Vec::with_capacity(c.slices);
        for s in 0..c.slices {
            let order = if s % 2 == 0 { [0, 1] } else { [1, 0] };
            let mut t = [0.0f64; 2];
            for &i in &order {
                let kv = &inst[i].kv;
                let mut rng = Rng(0x5EED ^ (s as u64) << 20);
                let t0 = thread_cpu_secs();
                for j in 0..c.slice_ops {
                    if op == "lookup" {
                        codec.key(rng.below(c.records), &mut k);
                        let found = kv
                            .get_into(&k, &mut out)
                            .map_err(|e| BenchError::Check(e.to_string()))?;
                        if !found {
                            return Err(BenchError::Check(format!(
                                "{}: a loaded key was not found",
                                names[i]
                            )));
                        }
                    } else {
                        let id = c.records + s as u64 * c.slice_ops + j;
                        codec.key(id, &mut k);
                        codec.value(id, 0, &mut v);
                        let fresh = kv
                            .insert(&k, &v)
                            .map_err(|e| BenchError::Check(e.to_string()))?;
                        if !fresh {
                            return Err(BenchError::Check(format!(
                                "{}: a fresh key was already present",
                                names[i]
                            )));
                        }
                    }
                }
                t[i] = thread_cpu_secs() - t0;
            }
            cpu[0] += t[0];
            cpu[1] += t[1];
            if t[1] > 0.0 {
                ratios.push(t[0] / t[1]);
            }
        }
        let ops = inserts as f64;
        for (i, name) in names.iter().enumerate() {
            let mops = if cpu[i] > 0.0 {
                ops / cpu[i] / 1e6
            } else {
                0.0
            };
            let mut res = BenchResult::new(&format!("{op}-paired"), name, None, 1, mops)
                .with("mops_cpu", mops);
            if i == 1 && cpu[1] > 0.0 {
                let ratio = cpu[0] / cpu[1];
                let lo = ratios.iter().cloned().fold(f64::INFINITY, f64::min);
                let hi = ratios.iter().cloned().fold(0.0, f64::max);
                res = res
                    .with("vs_index_paired", ratio)
                    .with("overhead_pct", (1.0 - ratio) * 100.0)
                    .with("slice_ratio_median", median(&mut ratios))
                    .with("slice_ratio_min", lo)
                    .with("slice_ratio_max", hi);
            }
            rows.push(res);
        }
    }
    Ok(rows)
}

/// The script of part 2, in the source tree.
fn script() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../python/bench/bench.py")
}

fn python_part(py: &Path, c: &FacadeConfig, r: &mut ferrite_report::Report) -> Result<String> {
    let out = Command::new(py)
        .arg(script())
        .args(["--json", "--records", &c.py_records.to_string(), "--dir"])
        .arg(&c.pool_dir)
        .output()
        .map_err(|e| BenchError::Io {
            path: py.display().to_string(),
            source: e,
        })?;
    if !out.status.success() {
        return Err(BenchError::Check(format!(
            "{} {}: {}",
            py.display(),
            script().display(),
            String::from_utf8_lossy(&out.stderr)
        )));
    }
    let v: serde_json::Value = serde_json::from_slice(&out.stdout)
        .map_err(|e| BenchError::Check(format!("bench.py printed no JSON: {e}")))?;
    let results = v["results"].as_array().cloned().unwrap_or_default();
    let dict = |bench: &str| {
        results
            .iter()
            .find(|x| x["bench"] == bench && x["variant"] == "dict")
            .and_then(|x| x["mops_cpu"].as_f64())
    };
    let mut variants: Vec<String> = Vec::new();
    let mut benches: Vec<String> = Vec::new();
    for x in &results {
        let (bench, variant) = (
            x["bench"].as_str().unwrap_or_default(),
            x["variant"].as_str().unwrap_or_default(),
        );
        let m = x["mops"].as_f64().unwrap_or(0.0);
        let m_cpu = x["mops_cpu"].as_f64();
        let mut res =
            BenchResult::new(&format!("py-{bench}"), &format!("py-{variant}"), None, 1, m)
                .with("records", c.py_records);
        if let Some(c) = m_cpu {
            res = res.with("mops_cpu", c);
        }
        if let (Some(d), Some(c)) = (dict(bench).filter(|d| *d > 0.0), m_cpu) {
            res = res.with("vs_dict", c / d);
        }
        r.results.push(res);
        if !variants.iter().any(|v| v == variant) {
            variants.push(variant.to_string());
        }
        if !benches.iter().any(|b| b == bench) {
            benches.push(bench.to_string());
        }
    }
    for n in v["notes"].as_array().into_iter().flatten() {
        r.notes
            .push(format!("python: {}", n.as_str().unwrap_or_default()));
    }
    r.notes.push(format!(
        "python {}: py-* rows are python/bench/bench.py (one call per operation; set = durable write where the store is durable)",
        v["python"].as_str().unwrap_or("?")
    ));
    let series: Vec<(String, Vec<f64>)> = variants
        .iter()
        .map(|var| {
            let vals = benches
                .iter()
                .map(|b| {
                    results
                        .iter()
                        .find(|x| x["bench"] == b.as_str() && x["variant"] == var.as_str())
                        .and_then(|x| x["mops_cpu"].as_f64())
                        .unwrap_or(0.0)
                })
                .collect();
            (var.clone(), vals)
        })
        .collect();
    Ok(chart::bar_chart(
        &format!(
            "Python: ferrite vs dict, LMDB, sqlite3 ({} records)",
            c.py_records
        ),
        "Mops/s",
        &benches,
        &series,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_small_run_reports_both_variants_and_their_ratio() {
        let c = FacadeConfig {
            records: 3000,
            operations: 3000,
            rounds: 2,
            // Long enough that a starved worker on a loaded machine still runs.
            max_seconds: 60.0,
            pool_dir: std::env::temp_dir(),
            slices: 4,
            slice_ops: 500,
            ..FacadeConfig::default()
        };
        let (out, py) = facade(&c).unwrap();
        assert!(py.is_none());
        for b in BENCHES {
            let fac = out
                .report
                .results
                .iter()
                .find(|x| x.bench == *b && x.variant == "ferrite-facade")
                .unwrap_or_else(|| panic!("no facade row for {b}"));
            assert!(fac.mops > 0.0);
            assert!(fac.extra["vs_index"].as_f64().unwrap() > 0.0);
            assert!(out
                .report
                .results
                .iter()
                .any(|x| x.bench == *b && x.variant == "ferrite"));
        }
        for b in ["lookup-paired", "insert-paired"] {
            let fac = out
                .report
                .results
                .iter()
                .find(|x| x.bench == b && x.variant == "ferrite-facade")
                .unwrap_or_else(|| panic!("no facade row for {b}"));
            let r = fac.extra["vs_index_paired"].as_f64().unwrap();
            assert!(r > 0.0 && r.is_finite(), "{b}: {r}");
        }
        assert!(out.svg.starts_with("<svg"));
        assert_eq!(median(&mut [3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(&mut [4.0, 1.0, 2.0, 3.0]), 2.5);
    }
}
