//! Restart (thesis Fig. 17 and §4.3): throughput right after a clean restart
//! (uniform lookups of 8-byte keys and values), restart time, and the page
//! table rebuilt from a full PM tier.

use std::time::{Duration, Instant};

use ferrite_btree::Design;
use ferrite_kv::{KvResult, OrderedKv, WriteBatch};
use ferrite_report::chart::{LineChart, Series};
use ferrite_report::BenchResult;
use serde_json::Value;

use super::{Ctx, Loaded};
use crate::buffer::output::{num, Section};
use crate::index::workload::{scramble, Rng};
use crate::Result;

/// B+-tree bytes per 8-byte key/value pair (about 70% full leaves).
const PAIR_BYTES: u64 = 40;
const MIB: u64 = 1 << 20;

fn pair_key(id: u64) -> [u8; 8] {
    scramble(id).to_be_bytes()
}

fn load_pairs(kv: &dyn OrderedKv, n: u64, progress: &mut dyn FnMut(u64)) -> KvResult<()> {
    let mut b = WriteBatch::new();
    for id in 0..n {
        b.put(&pair_key(id), &id.to_le_bytes());
        if b.len() == 1024 || id + 1 == n {
            kv.write_batch(&b)?;
            b = WriteBatch::new();
            progress(id + 1);
        }
    }
    Ok(())
}

/// Overall Mops/s, (seconds, Mops/s) samples, wrong or missing values.
type Lookups = (f64, Vec<(f64, f64)>, u64);

/// Uniform lookups for `seconds`; throughput samples every `tick` (empty
/// when `tick` is zero). Returns (Mops/s overall, samples, wrong values).
fn lookups(
    kv: &dyn OrderedKv,
    n: u64,
    seconds: f64,
    tick: Duration,
    seed: u64,
) -> KvResult<Lookups> {
    let mut rng = Rng(seed);
    let mut out = Vec::with_capacity(8);
    let limit = Duration::from_secs_f64(seconds);
    let t0 = Instant::now();
    let (mut ops, mut wrong, mut last_ops) = (0u64, 0u64, 0u64);
    let mut last_t = Duration::ZERO;
    let mut samples = Vec::new();
    loop {
        let id = rng.below(n);
        if !kv.get_into(&pair_key(id), &mut out)? || out[..] != id.to_le_bytes() {
            wrong += 1;
        }
        ops += 1;
        if ops % 32 == 0 {
            let e = t0.elapsed();
            if !tick.is_zero() && e - last_t >= tick {
                samples.push((
                    e.as_secs_f64(),
                    (ops - last_ops) as f64 / (e - last_t).as_secs_f64() / 1e6,
                ));
                last_t = e;
                last_ops = ops;
            }
            if e >= limit {
                break;
            }
        }
    }
    Ok((
        ops as f64 / t0.elapsed().as_secs_f64() / 1e6,
        samples,
        wrong,
    ))
}

/// Fig. 17: ramp-up after a clean restart.
pub(crate) fn run(cx: &mut Ctx<'_>) -> Result<()> {
    let cfg = cx.cfg;
    let mut rows = Vec::new();
    let mut series = Vec::new();
    for &mib in &cfg.restart_mib {
        let n = (mib * MIB / PAIR_BYTES).max(1000);
        for &d in &cfg.designs {
            let bytes = n * PAIR_BYTES;
            if (d == Design::MainMemory && bytes > cfg.tiers.dram * 95 / 100)
                || (d == Design::PmDirect && bytes > cfg.tiers.pm * 95 / 100)
            {
                continue;
            }
            let Some(l) = cx.load_store(
                d.name(),
                &cfg.design_config(d),
                "pairs",
                bytes,
                n,
                &mut |s, p| load_pairs(&s.tree, n, p),
            )?
            else {
                continue;
            };
            cx.progress.run_begin(d.name(), 1, "before restart");
            lookups(
                &l.store.tree,
                n,
                cfg.warmup_seconds,
                Duration::ZERO,
                cfg.seed ^ 1,
            )?;
            let (before, _, w0) = lookups(&l.store.tree, n, cfg.seconds, Duration::ZERO, cfg.seed)?;
            let Loaded {
                store,
                load_s,
                data_mib,
            } = l;
            let (store, rep, open_s) = store.reopen(cfg.design_config(d))?;
            cx.progress.run_begin(d.name(), 1, "after restart");
            let (after, samples, w1) = lookups(
                &store.tree,
                n,
                cfg.restart_seconds,
                Duration::from_millis(100),
                cfg.seed ^ 2,
            )?;
            if w0 + w1 > 0 {
                cx.problems.push(format!(
                    "restart: {} returned {} wrong or missing values",
                    d.name(),
                    w0 + w1
                ));
            }
            let to90 = samples
                .iter()
                .find(|s| s.1 >= 0.9 * before)
                .map(|s| s.0 + open_s);
            let first = samples.iter().take_while(|s| s.0 <= 1.0).map(|s| s.1);
            let first_n = samples.iter().take_while(|s| s.0 <= 1.0).count().max(1);
            let first_s = first.sum::<f64>() / first_n as f64;
            let pts: Vec<(f64, f64)> = std::iter::once((0.0, 0.0))
                .chain(std::iter::once((open_s, 0.0)))
                .chain(samples.iter().map(|&(t, m)| (t + open_s, m)))
                .collect();
            series.push(
                Series::new(
                    if cfg.restart_mib.len() > 1 {
                        format!("{} {mib} MiB", d.name())
                    } else {
                        d.name().to_string()
                    },
                    pts,
                )
                .keyed(d.name())
                .dashed(mib != cfg.restart_mib[0]),
            );
            rows.push(vec![
                format!("{mib}"),
                d.name().to_string(),
                format!("{:.1}", open_s * 1e3),
                format!("{:.1}", rep.page_table_rebuild.as_secs_f64() * 1e3),
                rep.pages_mapped.to_string(),
                rep.records_redone.to_string(),
                num(before),
                num(first_s),
                to90.map_or(format!(">{:.0}", cfg.restart_seconds), |t| {
                    format!("{t:.2}")
                }),
                num(after),
            ]);
            let b = BenchResult::new("restart", d.name(), Some(Value::from(mib)), 1, after)
                .with("experiment", "restart")
                .with("pairs", n)
                .with("data_mib", (data_mib * 10.0).round() / 10.0)
                .with("load_s", load_s)
                .with("open_ms", open_s * 1e3)
                .with("restart_total_ms", rep.total.as_secs_f64() * 1e3)
                .with(
                    "page_table_rebuild_ms",
                    rep.page_table_rebuild.as_secs_f64() * 1e3,
                )
                .with("pm_frames_scanned", rep.pm_frames_scanned)
                .with("pages_mapped", rep.pages_mapped)
                .with("records_redone", rep.records_redone)
                .with("before_mops", before)
                .with("first_second_mops", first_s)
                .with("seconds_to_90pct", to90.unwrap_or(-1.0))
                .with(
                    "timeline",
                    Value::from(
                        samples
                            .iter()
                            .map(|&(t, m)| Value::from(vec![t + open_s, m]))
                            .collect::<Vec<_>>(),
                    ),
                );
            cx.push(b);
        }
    }
    let mut c = LineChart::new(
        "Throughput after a clean restart (thesis Fig. 17)",
        "seconds since the open began",
        "Mops/s",
    );
    c.x_ticks = Some(
        (0..=cfg.restart_seconds.ceil() as u32)
            .map(|s| (s as f64, s.to_string()))
            .collect(),
    );
    cx.charts.push(("buffer-fig17".into(), c.draw(&series)));
    cx.sections.push(Section {
        experiment: "restart".into(),
        title: "Fig. 17: restart time and ramp-up of throughput (Mops/s) after a clean restart".into(),
        workload: format!(
            "uniform lookups of 8-byte keys and values; measured before the close ({} s after {} s of warm-up), then {} s from the open on; {}",
            cfg.seconds,
            cfg.warmup_seconds,
            cfg.restart_seconds,
            cx.tiers_line()
        ),
        head: ["data MiB", "design", "open ms", "table ms", "PM pages", "redone", "before", "1st s", "s to 90%", "after"]
            .iter()
            .map(|s| s.to_string())
            .collect(),
        rows,
        chart: Some("buffer-fig17".into()),
        notes: vec![
            "table ms: the page table rebuilt from the PM frame headers; PM pages: pages it mapped; redone: log records redone".into(),
            "before / 1st s / after: Mops/s before the close, in the first second after the open, over the whole run after it; s to 90%: seconds from the start of the open until a 100 ms sample reaches 90% of the throughput before the close".into(),
        ],
    });
    Ok(())
}

/// The page table rebuilt from a full PM tier: a store of more data than DRAM
/// and PM hold, PM filled by a full scan under the basic PM buffer manager
/// (it admits every evicted page), then reopened as the three-tier design.
pub(crate) fn rebuild(cx: &mut Ctx<'_>) -> Result<()> {
    let cfg = cx.cfg;
    let t = &cfg.tiers;
    let mib = (t.dram + t.pm) * 6 / 5 / MIB;
    let records = cfg.ycsb_records(mib);
    let Some(l) = cx.load_ycsb("basic-pm", &cfg.design_config(Design::BasicPm), records)? else {
        cx.problems.push(format!(
            "rebuild: {mib} MiB do not fit the basic PM buffer manager"
        ));
        return Ok(());
    };
    cx.progress.run_begin("basic-pm", 1, "full scan");
    let n = l.store.tree.count();
    if n as u64 != records {
        cx.problems
            .push(format!("rebuild: the scan found {n} of {records} records"));
    }
    let used = l.store.stats().pm_frames_used;
    let frames = l.store.cfg.pm_frames;
    let mut rows = Vec::new();
    let mut store = l.store;
    for i in 0..3 {
        let (s, rep, open_s) = store.reopen(cfg.design_config(Design::ThreeTier))?;
        store = s;
        rows.push(vec![
            format!("{}", i + 1),
            frames.to_string(),
            rep.pm_frames_scanned.to_string(),
            rep.pages_mapped.to_string(),
            format!("{:.1}", rep.page_table_rebuild.as_secs_f64() * 1e3),
            format!("{:.1}", rep.total.as_secs_f64() * 1e3),
            format!("{:.1}", open_s * 1e3),
        ]);
        let b = BenchResult::new("rebuild", "three-tier", Some(Value::from(i + 1)), 1, 0.0)
            .with("experiment", "rebuild")
            .with("pm_frames", frames as u64)
            .with("pm_frames_used_before_close", used)
            .with("pm_frames_scanned", rep.pm_frames_scanned)
            .with("pages_mapped", rep.pages_mapped)
            .with(
                "page_table_rebuild_ms",
                rep.page_table_rebuild.as_secs_f64() * 1e3,
            )
            .with("restart_total_ms", rep.total.as_secs_f64() * 1e3)
            .with("open_ms", open_s * 1e3)
            .with("data_mib", l.data_mib);
        cx.push(b);
    }
    cx.sections.push(Section {
        experiment: "rebuild".into(),
        title: format!(
            "Page-table rebuild from a full PM tier ({} MiB of data, {used} of {frames} PM frames valid)",
            l.data_mib.round()
        ),
        workload: format!(
            "store filled beyond DRAM + PM, PM filled by a full scan under basic-pm (every evicted page admitted), closed cleanly, reopened as three-tier three times; {}",
            cx.tiers_line()
        ),
        head: ["open", "PM frames", "scanned", "pages mapped", "page table ms", "restart ms", "open ms"]
            .iter()
            .map(|s| s.to_string())
            .collect(),
        rows,
        chart: None,
        notes: Vec::new(),
    });
    Ok(())
}
