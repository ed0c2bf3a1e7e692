//! The experiments of `ferrite bench buffer`, one module per figure group,
//! sharing the loading and measuring steps of `Ctx`.

mod anchors;
mod mid;
mod mix;
mod restart;
mod sweep;

use std::time::Instant;

use ferrite_btree::BufferConfig;
use ferrite_report::{BenchResult, Report};
use serde_json::Value;

use super::designs::{is_capacity, load_config, per_op, Store};
use super::output::Section;
use super::tpcc::{self, TpccRun};
use super::ycsb::{self, RunSpec, Workload};
use super::{BufferBenchConfig, TPCC_BYTES_PER_WAREHOUSE, YCSB_BYTES_PER_RECORD};
use crate::index::suite::Progress;
use crate::{env, BenchError, Result};

const MIB: f64 = (1u64 << 20) as f64;

/// A finished `ferrite bench buffer`: the report (every cell a result), the
/// tables per experiment and their charts (`(stem, svg)`).
pub struct BufferRun {
    pub report: Report,
    pub sections: Vec<Section>,
    pub charts: Vec<(String, String)>,
    /// Wrong or missing reads, TPC-C consistency violations: must be empty.
    pub problems: Vec<String>,
}

impl BufferRun {
    /// Every section as text.
    pub fn text(&self) -> String {
        self.sections
            .iter()
            .map(|s| s.text())
            .collect::<Vec<_>>()
            .join("\n")
    }

    /// Every section as Markdown.
    pub fn markdown(&self) -> String {
        self.sections
            .iter()
            .map(|s| s.markdown())
            .collect::<Vec<_>>()
            .join("\n")
    }
}

/// What experiments share: the configuration, the progress display, the
/// results so far.
pub(crate) struct Ctx<'a> {
    pub cfg: &'a BufferBenchConfig,
    pub progress: &'a dyn Progress,
    pub results: Vec<BenchResult>,
    pub sections: Vec<Section>,
    pub charts: Vec<(String, String)>,
    pub problems: Vec<String>,
}

/// Loads a store, reporting rows done to the progress callback.
pub(crate) type LoadFn<'a> =
    dyn FnMut(&Store, &mut dyn FnMut(u64)) -> ferrite_kv::KvResult<()> + 'a;

/// A loaded store and how long its load took.
pub(crate) struct Loaded {
    pub store: Store,
    pub load_s: f64,
    pub data_mib: f64,
}

impl Ctx<'_> {
    /// "5 s per cell after 5 s warm-up".
    pub fn timing(&self) -> String {
        format!(
            "{} s per cell after {} s of warm-up, 1 thread",
            self.cfg.seconds, self.cfg.warmup_seconds
        )
    }

    /// The timing of a sweep cell, whose designs are measured interleaved.
    pub fn sweep_timing(&self) -> String {
        let n = self.cfg.interleave;
        if n > 1 {
            format!(
                "{} s per cell after {} s of warm-up, 1 thread; the designs of a cell are loaded together and measured in {n} alternating slices of {} s each",
                self.cfg.seconds,
                self.cfg.warmup_seconds,
                self.cfg.seconds / n as f64
            )
        } else {
            self.timing()
        }
    }

    pub fn tiers_line(&self) -> String {
        let model = if self.cfg.pm_read_ns > 0 {
            format!(
                ", MODELLED PM read latency {} ns per missed line",
                self.cfg.pm_read_ns
            )
        } else {
            String::new()
        };
        format!(
            "tiers {}, {} KiB pages{model}",
            self.cfg.tiers.describe(),
            self.cfg.page_size / 1024
        )
    }

    /// Creates a store of `cfg`, loads it through `load` (which reports
    /// progress as rows done out of `total`) with a DRAM budget that holds
    /// `estimate` bytes, and reopens it with `cfg` when that differs. None
    /// (and a note) when the data does not fit the design.
    pub fn load_store(
        &mut self,
        label: &str,
        cfg: &BufferConfig,
        tree: &str,
        estimate: u64,
        total: u64,
        load: &mut LoadFn<'_>,
    ) -> Result<Option<Loaded>> {
        let lc = load_config(cfg, estimate);
        let store = Store::create(&self.cfg.dirs, label, lc.clone(), tree)?;
        self.progress.load_begin(label, 1, total);
        let t0 = Instant::now();
        let p = self.progress;
        let r = load(&store, &mut |d| p.load_progress(d));
        self.progress.load_end();
        match r {
            Err(e) if is_capacity(&e) => return Ok(None),
            Err(e) => {
                return Err(BenchError::Context {
                    what: format!("loading {label}"),
                    source: Box::new(e.into()),
                })
            }
            Ok(()) => {}
        }
        let load_s = t0.elapsed().as_secs_f64();
        let data_mib = store.data_bytes()? as f64 / MIB;
        let store = if lc != *cfg {
            store.reopen(cfg.clone())?.0
        } else {
            store
        };
        // The close left PM holding pages SSD never received: write them
        // now, so that a measured phase does not pay the load's write-back
        // (every design then starts with its data on its lowest tier).
        store
            .database()
            .write_pm_to_ssd()
            .map_err(|e| BenchError::Context {
                what: format!("writing {label}'s PM pages to SSD after the load"),
                source: Box::new(e.into()),
            })?;
        Ok(Some(Loaded {
            store,
            load_s,
            data_mib,
        }))
    }

    /// A YCSB store of `records` records for `cfg`.
    pub fn load_ycsb(
        &mut self,
        label: &str,
        cfg: &BufferConfig,
        records: u64,
    ) -> Result<Option<Loaded>> {
        self.load_store(
            label,
            cfg,
            "ycsb",
            records * YCSB_BYTES_PER_RECORD,
            records,
            &mut |s, p| ycsb::load(&s.tree, records, p).map(|_| ()),
        )
    }

    /// A TPC-C store of `w` warehouses for `cfg`.
    pub fn load_tpcc(&mut self, label: &str, cfg: &BufferConfig, w: u16) -> Result<Option<Loaded>> {
        let scale = self.cfg.tpcc_scale;
        let seed = self.cfg.seed;
        let est = w as u64 * TPCC_BYTES_PER_WAREHOUSE * scale.items as u64
            / tpcc::Scale::SPEC.items as u64;
        self.load_store(label, cfg, "tpcc", est, scale.rows(w), &mut |s, p| {
            tpcc::load(&s.txs(), w, scale, seed, p).map(|_| ())
        })
    }

    /// Warms `store` up with `workload`, then measures it: one result.
    pub fn measure_ycsb(
        &mut self,
        experiment: &str,
        l: &Loaded,
        workload: Workload,
        records: u64,
        param: Value,
    ) -> Result<BenchResult> {
        let mut v = self.measure_ycsb_rounds(experiment, &[l], workload, records, param, 1)?;
        Ok(v.remove(0))
    }

    /// Warms every store up with `workload`, then measures them in `rounds`
    /// alternating slices of `seconds / rounds` each: one result per store.
    pub fn measure_ycsb_rounds(
        &mut self,
        experiment: &str,
        ls: &[&Loaded],
        workload: Workload,
        records: u64,
        param: Value,
        rounds: usize,
    ) -> Result<Vec<BenchResult>> {
        for l in ls {
            self.progress
                .run_begin(&l.store.label, 1, &format!("{} warm-up", workload.name()));
            if self.cfg.warmup_seconds > 0.0 {
                let mut w = RunSpec::new(workload, records, self.cfg.warmup_seconds);
                w.seed = self.cfg.seed ^ 0x77;
                ycsb::run(&l.store.tree, &w)?;
            }
        }
        let before: Vec<_> = ls.iter().map(|l| l.store.stats()).collect();
        let load0 = env::loadavg();
        let mut parts: Vec<Vec<ycsb::RunStats>> = ls.iter().map(|_| Vec::new()).collect();
        for (r, i) in slice_order(ls.len(), rounds) {
            let s = &ls[i].store;
            self.progress
                .run_begin(&s.label, 1, &slice_name(&workload.name(), r, rounds));
            let mut spec = RunSpec::new(workload, records, self.cfg.seconds / rounds as f64);
            // Round 0 keeps the seed of a single run; later slices draw on.
            spec.seed = self.cfg.seed.wrapping_add(r as u64 * 0x9e37_79b9);
            parts[i].push(ycsb::run(&s.tree, &spec)?);
        }
        let slice_mops: Vec<Vec<f64>> = parts
            .iter()
            .map(|p| p.iter().map(|r| r.mops).collect())
            .collect();
        let mut out = Vec::new();
        for (((l, before), parts), slices) in ls.iter().zip(&before).zip(parts).zip(slice_mops) {
            let s = &l.store;
            let r = ycsb::RunStats::merge(parts);
            let after = s.stats();
            if r.wrong > 0 || r.missing > 0 {
                self.problems.push(format!(
                    "{experiment}: {} {}: {} reads of another record, {} of missing records",
                    s.label,
                    workload.name(),
                    r.wrong,
                    r.missing
                ));
            }
            let mut b =
                BenchResult::new(&workload.name(), &s.label, Some(param.clone()), 1, r.mops);
            b.p50_ns = Some(r.p50_ns);
            b.p99_ns = Some(r.p99_ns);
            let b = with_cpu(b, r.ops, r.secs, r.cpu_secs, r.rq_wait_secs);
            let b = with_slices(b, &slices, ls.len());
            out.push(self.common(b, experiment, l, records, r.ops, before, &after, load0));
        }
        Ok(out)
    }

    /// Warms up and measures TPC-C on a loaded store (`mops` is million
    /// transactions per second; `tps`, `tpmc` beside it).
    pub fn measure_tpcc(
        &mut self,
        experiment: &str,
        l: &Loaded,
        w: u16,
        check: bool,
    ) -> Result<BenchResult> {
        let mut v = self.measure_tpcc_rounds(experiment, &[l], w, check, 1)?;
        Ok(v.remove(0))
    }

    /// Warms every store up with TPC-C, then measures them in `rounds`
    /// alternating slices of `seconds / rounds` each, every store's driver
    /// going on where its last slice stopped: one result per store.
    pub fn measure_tpcc_rounds(
        &mut self,
        experiment: &str,
        ls: &[&Loaded],
        w: u16,
        check: bool,
        rounds: usize,
    ) -> Result<Vec<BenchResult>> {
        let mut spec = TpccRun {
            warehouses: w,
            scale: self.cfg.tpcc_scale,
            seconds: self.cfg.warmup_seconds,
            max_txns: 0,
            warmup_txns: 0,
            warmup_seconds: 0.0,
            seed: self.cfg.seed ^ 0x77,
        };
        for l in ls {
            self.progress.run_begin(&l.store.label, 1, "tpcc warm-up");
            if self.cfg.warmup_seconds > 0.0 {
                tpcc::run(&l.store.txs(), &spec)?;
            }
        }
        spec.seconds = self.cfg.seconds / rounds as f64;
        let mut drivers: Vec<_> = ls
            .iter()
            .map(|_| tpcc::Driver::new(w, self.cfg.tpcc_scale, self.cfg.seed))
            .collect();
        let mut sums = vec![tpcc::TpccStats::default(); ls.len()];
        let mut slices = vec![Vec::new(); ls.len()];
        let before: Vec<_> = ls.iter().map(|l| l.store.stats()).collect();
        let load0 = env::loadavg();
        for (r, i) in slice_order(ls.len(), rounds) {
            let s = &ls[i].store;
            self.progress
                .run_begin(&s.label, 1, &slice_name("tpcc", r, rounds));
            let part = tpcc::run_with(&mut drivers[i], &s.txs(), &spec)?;
            sums[i].add(&part);
            slices[i].push(part.tps / 1e6);
        }
        let mut out = Vec::new();
        for (((l, before), r), slices) in ls.iter().zip(&before).zip(sums).zip(slices) {
            let s = &l.store;
            let after = s.stats();
            let b = BenchResult::new("tpcc", &s.label, Some(Value::from(w)), 1, r.tps / 1e6)
                .with("tps", r.tps)
                .with("tpmc", r.tpmc)
                .with("rollbacks", r.rollbacks)
                .with("new_order", r.per_kind[0])
                .with("payment", r.per_kind[1])
                .with("order_status", r.per_kind[2])
                .with("delivery", r.per_kind[3])
                .with("stock_level", r.per_kind[4]);
            let b = with_cpu(b, r.txns, r.secs, r.cpu_secs, r.rq_wait_secs);
            let mut b = with_slices(b, &slices, ls.len());
            if check {
                let v = tpcc::check(&s.txs(), w)?;
                b = b.with("consistency_violations", v.len() as u64);
                for m in v.into_iter().take(10) {
                    self.problems
                        .push(format!("{experiment}: {} TPC-C: {m}", s.label));
                }
            }
            out.push(self.common(b, experiment, l, 0, r.txns, before, &after, load0));
        }
        Ok(out)
    }

    #[allow(clippy::too_many_arguments)]
    fn common(
        &self,
        mut b: BenchResult,
        experiment: &str,
        l: &Loaded,
        records: u64,
        ops: u64,
        before: &ferrite_btree::BufferStats,
        after: &ferrite_btree::BufferStats,
        load0: Option<f64>,
    ) -> BenchResult {
        b = b
            .with("experiment", experiment)
            .with("data_mib", (l.data_mib * 10.0).round() / 10.0)
            .with("load_s", (l.load_s * 100.0).round() / 100.0)
            .with("ops", ops)
            .with("pm_frames_used", after.pm_frames_used)
            .with(
                "dram_used_mib",
                (after.dram_used_bytes as f64 / MIB * 10.0).round() / 10.0,
            );
        if records > 0 {
            b = b.with("records", records);
        }
        for (k, v) in per_op(before, after, ops) {
            if k.starts_with("pm_model") && self.cfg.pm_read_ns == 0 {
                continue;
            }
            b = b.with(k, (v * 1000.0).round() / 1000.0);
        }
        if self.cfg.pm_read_ns > 0 {
            b = b.with("pm_read_ns_model", self.cfg.pm_read_ns);
        }
        if let Some(la) = load0 {
            b = b.with("loadavg", la);
        }
        b
    }

    pub fn push(&mut self, b: BenchResult) {
        self.results.push(b);
    }

    /// The result of `(experiment, variant, bench)` at `param`, if measured.
    pub fn find(
        &self,
        experiment: &str,
        variant: &str,
        bench: &str,
        param: &Value,
    ) -> Option<&BenchResult> {
        self.results.iter().find(|r| {
            r.variant == variant
                && r.bench == bench
                && r.param.as_ref() == Some(param)
                && r.extra.get("experiment").and_then(Value::as_str) == Some(experiment)
        })
    }
}

/// Adds the measuring thread's CPU time: `cpu_s`, `cpu_share` (of the
/// wall-clock time: below 1 when other processes took the CPU, or while the
/// thread waited for I/O) and `cpu_mops` (operations per CPU second, which
/// the machine's other load affects far less than `mops`; not a throughput
/// for designs that wait for the SSD).
///
/// And the run-queue delay (`rq_wait_s`: the thread was runnable but another
/// process had the CPU) with `mops_rq_free`, operations per second of
/// wall-clock time less that delay: an estimate of the throughput on an
/// unshared machine that, unlike `cpu_mops`, keeps the time spent waiting
/// for the SSD.
pub(crate) fn with_cpu(
    b: BenchResult,
    ops: u64,
    secs: f64,
    cpu_secs: f64,
    rq_wait_secs: f64,
) -> BenchResult {
    if cpu_secs <= 0.0 || secs <= 0.0 {
        return b;
    }
    let b = if rq_wait_secs > 0.0 && secs > rq_wait_secs {
        b.with("rq_wait_s", (rq_wait_secs * 1000.0).round() / 1000.0)
            .with(
                "mops_rq_free",
                (ops as f64 / (secs - rq_wait_secs) / 1e6 * 1e5).round() / 1e5,
            )
    } else {
        b
    };
    b.with("cpu_s", (cpu_secs * 1000.0).round() / 1000.0)
        .with("cpu_share", (cpu_secs / secs * 1000.0).round() / 1000.0)
        .with(
            "cpu_mops",
            (ops as f64 / cpu_secs / 1e6 * 1e4).round() / 1e4,
        )
}

/// The slices of an interleaved measurement of `n` stores in `rounds`
/// rounds, as (round, store): every round measures each store once, and
/// round `r` starts at store `r mod n`, so that each store leads as often as
/// the others and a slow spell of the machine falls on all of them alike.
pub(crate) fn slice_order(n: usize, rounds: usize) -> impl Iterator<Item = (usize, usize)> {
    (0..rounds).flat_map(move |r| (0..n).map(move |k| (r, (r + k) % n)))
}

fn slice_name(job: &str, r: usize, rounds: usize) -> String {
    if rounds > 1 {
        format!("{job} slice {}/{rounds}", r + 1)
    } else {
        job.to_string()
    }
}

/// Records how the cell was measured: in alternating slices (their count and
/// each one's Mops/s) beside `designs - 1` other designs; nothing for a
/// single run of its own.
fn with_slices(b: BenchResult, slices: &[f64], designs: usize) -> BenchResult {
    if slices.len() > 1 && designs > 1 {
        let each: Vec<f64> = slices.iter().map(|m| (m * 1e6).round() / 1e6).collect();
        b.with("slices", slices.len() as u64)
            .with("slice_mops", each)
            .with("interleaved_with", designs as u64 - 1)
    } else {
        b
    }
}

/// Runs every configured experiment.
pub(crate) fn run(cfg: &BufferBenchConfig, progress: &dyn Progress) -> Result<BufferRun> {
    super::designs::remove_stale(&cfg.dirs.pool_dir);
    super::designs::remove_stale(&cfg.dirs.ssd_dir);
    let mut report = env::report("buffer", &cfg.dirs.pool_dir);
    report.environment.suite.insert(
        "tiers".into(),
        serde_json::json!({
            "dram_bytes": cfg.tiers.dram, "pm_bytes": cfg.tiers.pm, "ssd_bytes": cfg.tiers.ssd,
            "page_size": cfg.page_size, "wal_segment_bytes": cfg.wal_segment_bytes,
            "pm_read_ns_model": cfg.pm_read_ns,
            "pm_dir": cfg.dirs.pool_dir.display().to_string(),
            "ssd_dir": cfg.dirs.ssd_dir.display().to_string(),
        }),
    );
    report.environment.suite.insert(
        "measure".into(),
        serde_json::json!({"seconds": cfg.seconds, "warmup_seconds": cfg.warmup_seconds, "seed": cfg.seed}),
    );
    let mut cx = Ctx {
        cfg,
        progress,
        results: Vec::new(),
        sections: Vec::new(),
        charts: Vec::new(),
        problems: Vec::new(),
    };
    if cfg.wants("mix") {
        mix::run(&mut cx)?;
    }
    if cfg.wants("ycsb") {
        sweep::ycsb(&mut cx)?;
    }
    if cfg.wants("tpcc") {
        sweep::tpcc(&mut cx)?;
    }
    if cfg.wants("drilldown") || cfg.wants("updates") || cfg.wants("wear") {
        mid::run(&mut cx)?;
    }
    if cfg.wants("restart") {
        restart::run(&mut cx)?;
    }
    if cfg.wants("rebuild") {
        restart::rebuild(&mut cx)?;
    }
    if cfg.wants("anchors") {
        anchors::run(&mut cx)?;
    }
    progress.finished();
    report.results = cx.results;
    report.notes.push(format!(
        "{}; PM is emulated ({}), SSD page files in {} (O_DIRECT where the filesystem allows it)",
        cfg.tiers.describe(),
        report.environment.durability,
        cfg.dirs.ssd_dir.display()
    ));
    if cfg.pm_read_ns > 0 {
        report.notes.push(format!(
            "MODELLED PM read latency: every read of PM frame data that misses a modelled 16 MiB CPU cache busy-waits {} ns (further lines of the same read {} ns each); PM here is DRAM",
            cfg.pm_read_ns,
            cfg.pm_read_ns / 8
        ));
    }
    report.notes.push(
        "loads run with a DRAM budget that holds the data; the store is then closed cleanly, reopened with the design's budgets, and the pages PM holds newer than SSD are written to SSD (so no measured phase pays the load's write-back); every cell is measured after a warm-up"
            .into(),
    );
    env::finish(&mut report);
    Ok(BufferRun {
        report,
        sections: cx.sections,
        charts: cx.charts,
        problems: cx.problems,
    })
}

#[cfg(test)]
mod tests {
    use super::slice_order;

    #[test]
    fn every_round_measures_each_store_once_and_the_lead_rotates() {
        let v: Vec<_> = slice_order(3, 4).collect();
        assert_eq!(v.len(), 12);
        for r in 0..4 {
            let mut round: Vec<usize> = v[r * 3..r * 3 + 3].iter().map(|&(_, i)| i).collect();
            assert!(v[r * 3..r * 3 + 3].iter().all(|&(rr, _)| rr == r));
            assert_eq!(round[0], r % 3);
            round.sort_unstable();
            assert_eq!(round, [0, 1, 2]);
        }
        assert_eq!(slice_order(1, 1).collect::<Vec<_>>(), [(0, 0)]);
    }
}
