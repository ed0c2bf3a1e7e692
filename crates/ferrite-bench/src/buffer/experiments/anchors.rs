//! The outside anchors (LMDB, SQLite) on the same YCSB records as the
//! three-tier design (and the main-memory design where the data fits DRAM),
//! held to the DRAM budget by a memory cgroup.

use ferrite_btree::Design;
use ferrite_report::{chart, BenchResult};
use serde_json::Value;

use super::Ctx;
use crate::buffer::anchor::{self, Engine};
use crate::buffer::output::{num, ratio, Section};
use crate::buffer::YCSB_BYTES_PER_RECORD;
use crate::Result;

const MIB: f64 = (1u64 << 20) as f64;

pub(crate) fn run(cx: &mut Ctx<'_>) -> Result<()> {
    let cfg = cx.cfg;
    if cfg.anchor_child.is_empty() {
        cx.problems.push(
            "anchors: no child command to run LMDB and SQLite in (the CLI passes its own binary)"
                .into(),
        );
        return Ok(());
    }
    let mut rows = Vec::new();
    let mut cats = Vec::new();
    let mut bars: Vec<(String, Vec<f64>)> = ["main-memory", "three-tier", "lmdb", "sqlite"]
        .iter()
        .map(|s| (s.to_string(), Vec::new()))
        .collect();
    let rounds = cfg.anchor_rounds.max(1);
    for &mib in &cfg.anchor_mib {
        let records = cfg.ycsb_records(mib);
        let p = Value::from(mib);
        // Our stores stay loaded across the rounds; the anchors load afresh
        // in each round (a child process per engine and round).
        let mut loaded = Vec::new();
        for d in [Design::MainMemory, Design::ThreeTier] {
            if d == Design::MainMemory
                && records * YCSB_BYTES_PER_RECORD > cfg.tiers.dram * 95 / 100
            {
                continue;
            }
            if let Some(l) = cx.load_ycsb(d.name(), &cfg.design_config(d), records)? {
                loaded.push((d, l));
            }
        }
        let mut our_rounds: Vec<Vec<Vec<BenchResult>>> =
            vec![vec![Vec::new(); cfg.anchor_workloads.len()]; loaded.len()];
        let mut their_rounds: Vec<(Engine, Vec<Vec<anchor::AnchorResult>>)> =
            Engine::ALL.iter().map(|&e| (e, Vec::new())).collect();
        for _ in 0..rounds {
            for (k, (_, l)) in loaded.iter().enumerate() {
                for (i, &w) in cfg.anchor_workloads.iter().enumerate() {
                    let b = cx.measure_ycsb("anchors", l, w, records, p.clone())?;
                    our_rounds[k][i].push(b);
                }
            }
            for (e, rs) in their_rounds.iter_mut() {
                rs.push(measure_anchor(cx, *e, records)?);
            }
        }
        let mut ours: Vec<(Design, Vec<f64>)> = Vec::new();
        for ((d, _), per_w) in loaded.iter().zip(our_rounds) {
            let mut v = Vec::new();
            for rs in per_w {
                let all: Vec<f64> = rs.iter().map(|b| b.mops).collect();
                let b = median_of(rs, |b| b.mops);
                v.push(b.mops);
                cx.push(with_rounds(b, &all));
            }
            ours.push((*d, v));
        }
        drop(loaded);
        let mut theirs: Vec<(Engine, Vec<anchor::AnchorResult>)> = Vec::new();
        for (e, per_round) in their_rounds {
            let mut med = Vec::new();
            for i in 0..cfg.anchor_workloads.len() {
                let rs: Vec<anchor::AnchorResult> =
                    per_round.iter().filter_map(|r| r.get(i).cloned()).collect();
                if rs.is_empty() {
                    continue;
                }
                let all: Vec<f64> = rs.iter().map(|r| r.stats.mops).collect();
                let r = median_of(rs, |r| r.stats.mops);
                cx.push(with_rounds(anchor_result(e, &r, records, &p), &all));
                med.push(r);
            }
            theirs.push((e, med));
        }
        for (i, w) in cfg.anchor_workloads.iter().enumerate() {
            let get = |d: Design| ours.iter().find(|o| o.0 == d).map(|o| o.1[i]);
            let (mm, tt) = (get(Design::MainMemory), get(Design::ThreeTier));
            let anchor = |e: Engine| theirs.iter().find(|t| t.0 == e).and_then(|t| t.1.get(i));
            let (lm, sq) = (anchor(Engine::Lmdb), anchor(Engine::Sqlite));
            let m = |x: Option<f64>| x.map_or("-".into(), num);
            let peak = |a: Option<&anchor::AnchorResult>| {
                a.map_or("-".into(), |a| {
                    format!("{:.0}", a.usage.max_usage as f64 / MIB)
                })
            };
            rows.push(vec![
                format!("{mib}"),
                w.name(),
                m(mm),
                m(tt),
                m(lm.map(|a| a.stats.mops)),
                m(sq.map(|a| a.stats.mops)),
                ratio(tt.unwrap_or(0.0), lm.map_or(0.0, |a| a.stats.mops)),
                ratio(tt.unwrap_or(0.0), sq.map_or(0.0, |a| a.stats.mops)),
                peak(lm),
                peak(sq),
            ]);
            cats.push(format!("{} {mib} MiB", w.name()));
            for (j, v) in [mm, tt, lm.map(|a| a.stats.mops), sq.map(|a| a.stats.mops)]
                .into_iter()
                .enumerate()
            {
                bars[j].1.push(v.unwrap_or(0.0));
            }
        }
    }
    let svg = chart::bar_chart(
        "Outside anchors on the same YCSB records (cgroup-limited to the DRAM budget)",
        "Mops/s",
        &cats,
        &bars,
    );
    cx.charts.push(("buffer-anchors".into(), svg));
    cx.sections.push(Section {
        experiment: "anchors".into(),
        title: "Outside anchors: LMDB and SQLite held to the DRAM budget by a memory cgroup (Mops/s)".into(),
        workload: format!(
            "the same YCSB records and operations (Zipf z=1); anchors in a child process in a cgroup v1 memory cgroup of {} MiB (page cache included), files on {}; {}{}",
            cfg.tiers.dram >> 20,
            cfg.dirs.ssd_dir.display(),
            cx.timing(),
            if rounds > 1 {
                format!("; each cell the median of {rounds} rounds, every engine measured once per round in turn (all rounds in the JSON's mops_rounds)")
            } else {
                String::new()
            }
        ),
        head: ["data MiB", "workload", "main-memory", "three-tier", "lmdb", "sqlite", "3T/lmdb", "3T/sqlite", "lmdb peak MiB", "sqlite peak MiB"]
            .iter()
            .map(|s| s.to_string())
            .collect(),
        rows,
        chart: Some("buffer-anchors".into()),
        notes: vec![
            format!("lmdb: {}", Engine::Lmdb.durability()),
            format!("sqlite: {}", Engine::Sqlite.durability()),
            "main-memory, three-tier: every update its own commit, durable in the PM log when it returns (PM emulated: see the environment's durability)".into(),
            "peak MiB: the anchor cgroup's memory.max_usage_in_bytes (anonymous memory and page cache) during the run".into(),
        ],
    });
    Ok(())
}

/// Runs one engine's anchor child once: one result per workload.
fn measure_anchor(cx: &mut Ctx<'_>, e: Engine, records: u64) -> Result<Vec<anchor::AnchorResult>> {
    let cfg = cx.cfg;
    cx.progress
        .run_begin(e.name(), 1, &format!("{records} records in a cgroup"));
    let dir = cfg.dirs.ssd_dir.join(format!(
        "ferrite-bufbench-{}-anchor-{}",
        std::process::id(),
        e.name()
    ));
    let rs = anchor::measure(
        &cfg.anchor_child,
        e,
        &dir,
        records,
        &cfg.anchor_workloads,
        cfg.tiers.dram,
        cfg.seconds,
        cfg.warmup_seconds,
        cfg.seed,
    )?;
    for r in &rs {
        if r.stats.wrong > 0 || r.stats.missing > 0 {
            cx.problems.push(format!(
                "anchors: {} {}: {} wrong, {} missing reads",
                e.name(),
                r.workload.name(),
                r.stats.wrong,
                r.stats.missing
            ));
        }
    }
    Ok(rs)
}

/// The result row of one anchor measurement.
fn anchor_result(e: Engine, r: &anchor::AnchorResult, records: u64, p: &Value) -> BenchResult {
    let mut b = BenchResult::new(
        &r.workload.name(),
        e.name(),
        Some(p.clone()),
        1,
        r.stats.mops,
    )
    .with("experiment", "anchors")
    .with("records", records)
    .with("durability", e.durability())
    .with("file_mib", (r.file_bytes as f64 / MIB).round())
    .with("load_s", (r.load_s * 100.0).round() / 100.0)
    .with("cgroup_limit_mib", (r.limit as f64 / MIB).round())
    .with(
        "cgroup_peak_mib",
        (r.usage.max_usage as f64 / MIB * 10.0).round() / 10.0,
    )
    .with(
        "cgroup_cache_mib",
        (r.usage.cache as f64 / MIB * 10.0).round() / 10.0,
    )
    .with("cgroup_failcnt", r.usage.failcnt)
    .with("ops", r.stats.ops);
    b.p50_ns = Some(r.stats.p50_ns);
    b.p99_ns = Some(r.stats.p99_ns);
    let mut b = super::with_cpu(
        b,
        r.stats.ops,
        r.stats.secs,
        r.stats.cpu_secs,
        r.stats.rq_wait_secs,
    );
    if let Some(la) = crate::env::loadavg() {
        b = b.with("loadavg", la);
    }
    b
}

/// The median element by `key` (the lower middle one of an even count).
fn median_of<T>(mut v: Vec<T>, key: impl Fn(&T) -> f64) -> T {
    v.sort_by(|a, b| key(a).total_cmp(&key(b)));
    let m = (v.len() - 1) / 2;
    v.swap_remove(m)
}

/// Adds the rounds' throughputs to a median result.
fn with_rounds(b: BenchResult, all: &[f64]) -> BenchResult {
    b.with("rounds", all.len()).with(
        "mops_rounds",
        all.iter()
            .map(|m| (m * 1e4).round() / 1e4)
            .collect::<Vec<_>>(),
    )
}

#[cfg(test)]
mod tests {
    use super::median_of;

    #[test]
    fn the_median_is_the_middle_round() {
        assert_eq!(median_of(vec![3.0, 1.0, 2.0], |x| *x), 2.0);
        assert_eq!(median_of(vec![4.0, 1.0, 3.0, 2.0], |x| *x), 2.0);
        assert_eq!(median_of(vec![5.0], |x| *x), 5.0);
    }
}
