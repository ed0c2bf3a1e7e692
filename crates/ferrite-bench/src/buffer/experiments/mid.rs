//! Data between DRAM and PM capacity (the thesis's 10 GB at 2 GB DRAM and 10
//! GB PM): the drill-down that switches the techniques on one by one (Fig. 10,
//! and the scan overheads of §5.4.2), update-heavy runs (Fig. 15) and PM
//! writes per cache line (Fig. 16). One three-tier store (reopened with each
//! technique set: the PM geometry is the same) and one PM-direct store.

use ferrite_btree::{BufferConfig, Design, Techniques};
use ferrite_report::chart::{self, LineChart, Series};
use serde_json::Value;

use super::{Ctx, Loaded};
use crate::buffer::output::{num, rank_curve, ratio, Section};
use crate::buffer::ycsb::{self, RunSpec, Workload};
use crate::Result;

/// The drill-down steps: a basic PM buffer manager, then each technique on.
fn steps(cx: &Ctx<'_>) -> Vec<(String, BufferConfig)> {
    let basic = cx.cfg.design_config(Design::BasicPm);
    let mut t = Techniques::NONE;
    let mut v = vec![("basic-pm".to_string(), basic.clone())];
    let mut add = |name: &str, f: &dyn Fn(&mut Techniques)| {
        f(&mut t);
        let mut c = basic.clone();
        c.techniques = t;
        if t == Techniques::ALL {
            c.design = Design::ThreeTier;
        }
        v.push((name.to_string(), c));
    };
    add("+cache-line-grained", &|t| t.cache_line_grained = true);
    add("+mini-pages", &|t| t.mini_pages = true);
    add("+swizzling", &|t| t.swizzling = true);
    add("+combined-table", &|t| t.combined_table = true);
    add("+admission-set", &|t| t.admission_set = true);
    v
}

/// Reopens `l` with `cfg` under `label`.
fn reopen(l: Loaded, cfg: BufferConfig, label: &str) -> Result<Loaded> {
    let (mut s, _, _) = l.store.reopen(cfg)?;
    s.label = label.to_string();
    Ok(Loaded {
        store: s,
        load_s: l.load_s,
        data_mib: l.data_mib,
    })
}

pub(crate) fn run(cx: &mut Ctx<'_>) -> Result<()> {
    let cfg = cx.cfg;
    let records = cfg.ycsb_records(cfg.mid_mib);
    let p = Value::from(cfg.mid_mib);
    let tt_cfg = cfg.design_config(Design::ThreeTier);
    let Some(mut tt) = cx.load_ycsb("three-tier", &tt_cfg, records)? else {
        cx.problems.push(format!(
            "{} MiB do not fit the three-tier design",
            cfg.mid_mib
        ));
        return Ok(());
    };
    let mut pd = cx.load_ycsb("pm-direct", &cfg.design_config(Design::PmDirect), records)?;
    if cfg.wants("drilldown") {
        let mut rows = Vec::new();
        let (mut base_ro, mut base_scan) = (0.0, 0.0);
        let mut rel_ro = Vec::new();
        let mut rel_scan = Vec::new();
        let mut cats = Vec::new();
        for (name, c) in steps(cx) {
            tt = reopen(tt, c, &name)?;
            let ro = cx.measure_ycsb("drilldown", &tt, Workload::ReadOnly, records, p.clone())?;
            let sc = cx.measure_ycsb("drilldown", &tt, Workload::Scan, records, p.clone())?;
            if base_ro == 0.0 {
                base_ro = ro.mops;
                base_scan = sc.mops;
            }
            let lines = ro
                .extra
                .get("dram_lines_loaded_per_op")
                .and_then(Value::as_f64)
                .unwrap_or(0.0)
                + ro.extra
                    .get("pm_pages_loaded_per_op")
                    .and_then(Value::as_f64)
                    .unwrap_or(0.0)
                    * (cfg.page_size / 64) as f64;
            rows.push(vec![
                name.clone(),
                num(ro.mops),
                ratio(ro.mops, base_ro),
                format!("{lines:.1}"),
                num(sc.mops * 1e6),
                ratio(sc.mops, base_scan),
            ]);
            cats.push(name.clone());
            rel_ro.push(ro.mops / base_ro);
            rel_scan.push(sc.mops / base_scan);
            cx.push(ro.with("pm_lines_to_dram_per_op", (lines * 100.0).round() / 100.0));
            cx.push(sc);
        }
        if let Some(l) = &pd {
            let ro = cx.measure_ycsb("drilldown", l, Workload::ReadOnly, records, p.clone())?;
            let sc = cx.measure_ycsb("drilldown", l, Workload::Scan, records, p.clone())?;
            rows.push(vec![
                "pm-direct".into(),
                num(ro.mops),
                ratio(ro.mops, base_ro),
                "0 (in place)".into(),
                num(sc.mops * 1e6),
                ratio(sc.mops, base_scan),
            ]);
            cats.push("pm-direct".into());
            rel_ro.push(ro.mops / base_ro);
            rel_scan.push(sc.mops / base_scan);
            cx.push(ro);
            cx.push(sc);
        }
        let svg = chart::bar_chart(
            "Drill-down: techniques on one by one (thesis Fig. 10)",
            "throughput / basic-pm",
            &cats,
            &[("ycsb-ro".into(), rel_ro), ("ycsb-scan".into(), rel_scan)],
        );
        cx.charts.push(("buffer-fig10".into(), svg));
        cx.sections.push(Section {
            experiment: "drilldown".into(),
            title: format!(
                "Fig. 10: drill-down at {} MiB of data ({records} records), techniques switched on cumulatively",
                cfg.mid_mib
            ),
            workload: format!(
                "YCSB-RO and YCSB-SCAN (1-100 records), Zipf z=1; one store reopened with each technique set; {}; {}",
                cx.tiers_line(),
                cx.timing()
            ),
            head: ["configuration", "RO Mops/s", "RO vs basic", "PM lines->DRAM/op", "scans/s", "scan vs basic"]
                .iter()
                .map(|s| s.to_string())
                .collect(),
            rows,
            chart: Some("buffer-fig10".into()),
            notes: vec!["PM lines->DRAM/op: cache lines copied from PM frames into DRAM per lookup (whole-page loads count 256 lines)".into()],
        });
    }
    // The three-tier store with every technique from here on.
    tt = reopen(tt, tt_cfg.clone(), "three-tier")?;
    if cfg.wants("updates") {
        let mut series: Vec<Series> = Vec::new();
        let mut rows = Vec::new();
        let mut cols: Vec<(String, Vec<Option<f64>>)> = Vec::new();
        let mut run_all = |cx: &mut Ctx<'_>, l: &Loaded| -> Result<()> {
            let mut pts = Vec::new();
            let mut vals = Vec::new();
            for &u in &cfg.update_pcts {
                let b = cx.measure_ycsb(
                    "updates",
                    l,
                    Workload::ReadWrite { update_pct: u },
                    records,
                    Value::from(u),
                )?;
                pts.push((u as f64, b.mops));
                vals.push(Some(b.mops));
                cx.push(b);
            }
            series.push(Series::new(l.store.label.clone(), pts));
            cols.push((l.store.label.clone(), vals));
            Ok(())
        };
        run_all(cx, &tt)?;
        if let Some(l) = &pd {
            run_all(cx, l)?;
        }
        tt = reopen(tt, cfg.design_config(Design::BasicPm), "basic-pm")?;
        run_all(cx, &tt)?;
        tt = reopen(tt, tt_cfg.clone(), "three-tier")?;
        for (i, &u) in cfg.update_pcts.iter().enumerate() {
            let mut row = vec![format!("{u}%")];
            row.extend(cols.iter().map(|(_, v)| v[i].map_or("-".into(), num)));
            rows.push(row);
        }
        let mut head = vec!["updates".to_string()];
        head.extend(cols.iter().map(|(n, _)| n.clone()));
        let svg = LineChart::new(
            "YCSB-R/W over the update share (thesis Fig. 15)",
            "updates (%)",
            "Mops/s",
        )
        .draw(&series);
        cx.charts.push(("buffer-fig15".into(), svg));
        cx.sections.push(Section {
            experiment: "updates".into(),
            title: format!(
                "Fig. 15: YCSB-R/W throughput (Mops/s) over the share of updates, {} MiB of data",
                cfg.mid_mib
            ),
            workload: format!(
                "YCSB-R/W: x% updates of one field (the B+-tree overwrites the 100 bytes in place and logs their lines), Zipf z=1; every update its own durable commit; {}; {}",
                cx.tiers_line(),
                cx.timing()
            ),
            head,
            rows,
            chart: Some("buffer-fig15".into()),
            notes: Vec::new(),
        });
    }
    if cfg.wants("wear") {
        wear(cx, tt, pd.take(), records)?;
    }
    Ok(())
}

/// Fig. 16: PM writes per cache line over `wear_ops` updates (100%).
fn wear(cx: &mut Ctx<'_>, tt: Loaded, pd: Option<Loaded>, records: u64) -> Result<()> {
    let cfg = cx.cfg;
    let mut rows = Vec::new();
    let mut series = Vec::new();
    let mut pd_max = None;
    let mut stores = Vec::new();
    let mut c = cfg.design_config(Design::ThreeTier);
    c.track_pm_line_writes = true;
    stores.push(reopen(tt, c, "three-tier")?);
    if let Some(l) = pd {
        let mut c = cfg.design_config(Design::PmDirect);
        c.track_pm_line_writes = true;
        stores.push(reopen(l, c, "pm-direct")?);
    }
    let mut measured = Vec::new();
    for l in &stores {
        cx.progress.run_begin(&l.store.label, 1, "wear");
        let mut spec = RunSpec::new(Workload::ReadWrite { update_pct: 100 }, records, 1e9);
        spec.max_ops = cfg.wear_ops;
        spec.seed = cfg.seed;
        let r = ycsb::run(&l.store.tree, &spec)?;
        // Everything the run made durable in PM: write dirty DRAM pages back.
        l.store.database().checkpoint()?;
        let mut counts = l.store.pm_line_writes().unwrap_or_default();
        counts.sort_unstable_by(|a, b| b.cmp(a));
        let total: u64 = counts.iter().map(|&c| c as u64).sum();
        let max = counts.first().copied().unwrap_or(0);
        let lines = counts.iter().take_while(|&&c| c > 0).count();
        if l.store.label == "pm-direct" {
            pd_max = Some(max);
        }
        series.push(Series::new(l.store.label.clone(), rank_curve(&counts, 300)));
        measured.push((l.store.label.clone(), r.ops, total, max, lines, r.mops));
    }
    for (label, ops, total, max, lines, mops) in &measured {
        rows.push(vec![
            label.clone(),
            ops.to_string(),
            total.to_string(),
            format!("{:.2}", *total as f64 / *ops as f64),
            max.to_string(),
            lines.to_string(),
            pd_max.map_or("-".into(), |m| {
                if *max > 0 && (*max as f64) < m as f64 / 100.0 {
                    format!("1/{:.0}", m as f64 / *max as f64)
                } else {
                    ratio(*max as f64, m as f64)
                }
            }),
            num(*mops),
        ]);
        let b = ferrite_report::BenchResult::new(
            "ycsb-rw100",
            label,
            Some(Value::from(*ops)),
            1,
            *mops,
        )
        .with("experiment", "wear")
        .with("pm_line_writes_total", *total)
        .with("pm_line_writes_max", *max)
        .with("pm_lines_written", *lines as u64)
        .with("records", records);
        cx.push(b);
    }
    let mut c = LineChart::new(
        "PM writes per cache line, sorted (thesis Fig. 16)",
        "cache lines (rank)",
        "writes",
    );
    c.log_x = true;
    c.log_y = true;
    let max_rank = series
        .iter()
        .flat_map(|s| s.points.iter().map(|p| p.0))
        .fold(1.0f64, f64::max);
    c.x_ticks = Some(
        (0..=max_rank.log10().ceil() as i32)
            .map(|e| (10f64.powi(e), format!("{}", 10u64.pow(e as u32))))
            .collect(),
    );
    cx.charts.push(("buffer-fig16".into(), c.draw(&series)));
    cx.sections.push(Section {
        experiment: "wear".into(),
        title: format!(
            "Fig. 16: PM writes per cache line after {} updates, {} MiB of data",
            cfg.wear_ops, cfg.mid_mib
        ),
        workload: format!(
            "YCSB-R/W 100% updates, Zipf z=1; counted per cache line of PM frame data (not the WAL) up to a checkpoint after the run; {}",
            cx.tiers_line()
        ),
        head: ["design", "updates", "PM line writes", "per update", "max per line", "lines written", "max vs pm-direct", "Mops/s"]
            .iter()
            .map(|s| s.to_string())
            .collect(),
        rows,
        chart: Some("buffer-fig16".into()),
        notes: vec!["throughput with per-line counting on (slower than the other experiments)".into()],
    });
    Ok(())
}
