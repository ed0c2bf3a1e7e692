//! Throughput over data size (thesis Figs. 8 and 9): YCSB-RO over data size
//! and TPC-C over warehouses, every design, DRAM and PM capacities marked.

use ferrite_btree::Design;
use ferrite_report::chart::{LineChart, Series};
use serde_json::Value;

use super::{Ctx, Loaded};
use crate::buffer::output::{num, Section};
use crate::buffer::ycsb::Workload;
use crate::buffer::{TPCC_BYTES_PER_WAREHOUSE, YCSB_BYTES_PER_RECORD};
use crate::Result;

const MIB: u64 = 1 << 20;

/// Whether a design can hold `bytes` of data at all (main-memory: DRAM;
/// PM-direct: PM); others always can (SSD is large).
fn may_fit(cx: &Ctx<'_>, d: Design, bytes: u64) -> bool {
    match d {
        Design::MainMemory => bytes <= cx.cfg.tiers.dram * 95 / 100,
        Design::PmDirect => bytes <= cx.cfg.tiers.pm * 95 / 100,
        _ => bytes <= cx.cfg.tiers.ssd * 8 / 10,
    }
}

fn area(cx: &Ctx<'_>, bytes: f64) -> &'static str {
    let t = &cx.cfg.tiers;
    if bytes <= t.dram as f64 {
        "DRAM"
    } else if bytes <= t.pm as f64 {
        "PM"
    } else {
        "SSD"
    }
}

fn section_rows(
    cx: &Ctx<'_>,
    experiment: &str,
    bench: &str,
    params: &[(Value, String)],
    unit: f64,
) -> (Vec<Vec<String>>, Vec<Series>) {
    let cfg = cx.cfg;
    let mut rows = Vec::new();
    let mut series: Vec<Series> = Vec::new();
    for (p, label) in params {
        let mut row = vec![label.clone()];
        let mut data = None;
        for d in &cfg.designs {
            let r = cx.find(experiment, d.name(), bench, p);
            if data.is_none() {
                data = r
                    .and_then(|r| r.extra.get("data_mib"))
                    .and_then(Value::as_f64);
            }
            row.push(r.map_or("-".into(), |r| num(r.mops * unit)));
        }
        let data = data.unwrap_or(0.0);
        row.insert(1, format!("{data:.0}"));
        row.insert(2, area(cx, data * MIB as f64).to_string());
        rows.push(row);
    }
    for d in &cfg.designs {
        let pts: Vec<(f64, f64)> = params
            .iter()
            .filter_map(|(p, _)| {
                let r = cx.find(experiment, d.name(), bench, p)?;
                let x = if experiment == "ycsb" {
                    r.extra.get("data_mib").and_then(Value::as_f64)?
                } else {
                    p.as_f64()?
                };
                Some((x, r.mops * unit))
            })
            .collect();
        if !pts.is_empty() {
            series.push(Series::new(d.name(), pts));
        }
    }
    (rows, series)
}

/// Fig. 8: YCSB-RO over data size.
pub(crate) fn ycsb(cx: &mut Ctx<'_>) -> Result<()> {
    let cfg = cx.cfg;
    let mut params = Vec::new();
    for &mib in &cfg.ycsb_sizes_mib {
        let records = cfg.ycsb_records(mib);
        let p = Value::from(mib);
        params.push((p.clone(), format!("{mib}")));
        let mut loaded = Vec::new();
        for &d in &cfg.designs {
            if !may_fit(cx, d, records * YCSB_BYTES_PER_RECORD) {
                continue;
            }
            loaded.extend(cx.load_ycsb(d.name(), &cfg.design_config(d), records)?);
        }
        let ls: Vec<&Loaded> = loaded.iter().collect();
        let rounds = cfg.interleave;
        for b in cx.measure_ycsb_rounds("ycsb", &ls, Workload::ReadOnly, records, p, rounds)? {
            cx.push(b);
        }
    }
    let (rows, series) = section_rows(cx, "ycsb", "ycsb-ro", &params, 1.0);
    let mut c = LineChart::new(
        "YCSB-RO over data size (thesis Fig. 8)",
        "data size (MiB of B+-tree pages)",
        "Mops/s",
    );
    c.log_y = true;
    let svg = c.draw(&with_capacity_marks(cx, series, false));
    cx.charts.push(("buffer-fig8".into(), svg));
    let mut head = vec!["target MiB".into(), "data MiB".into(), "fits".into()];
    head.extend(cfg.designs.iter().map(|d| d.name().to_string()));
    cx.sections.push(Section {
        experiment: "ycsb".into(),
        title: "Fig. 8: YCSB-RO throughput (Mops/s) over data size".into(),
        workload: format!(
            "YCSB-RO (lookups of one field), Zipf z=1; {}; {}; '-': the data does not fit the design",
            cx.tiers_line(),
            cx.sweep_timing()
        ),
        head,
        rows,
        chart: Some("buffer-fig8".into()),
        notes: Vec::new(),
    });
    Ok(())
}

/// Dashed vertical-ish marks at the DRAM and PM capacities (two-point series).
fn with_capacity_marks(cx: &Ctx<'_>, mut series: Vec<Series>, warehouses: bool) -> Vec<Series> {
    let ys: Vec<f64> = series
        .iter()
        .flat_map(|s| s.points.iter().map(|p| p.1))
        .filter(|y| *y > 0.0)
        .collect();
    if ys.is_empty() {
        return series;
    }
    let (lo, hi) = ys
        .iter()
        .fold((f64::INFINITY, 0.0f64), |(a, b), &y| (a.min(y), b.max(y)));
    let t = &cx.cfg.tiers;
    let per = if warehouses {
        TPCC_BYTES_PER_WAREHOUSE as f64
    } else {
        MIB as f64
    };
    for (name, cap) in [("DRAM capacity", t.dram), ("PM capacity", t.pm)] {
        let x = cap as f64 / per;
        series.push(Series::new(name, vec![(x, lo), (x, hi)]).dashed(true));
    }
    series
}

/// Fig. 9: TPC-C over warehouses.
pub(crate) fn tpcc(cx: &mut Ctx<'_>) -> Result<()> {
    let cfg = cx.cfg;
    let mut params = Vec::new();
    for &w in &cfg.warehouses {
        let p = Value::from(w);
        params.push((p.clone(), format!("{w}")));
        let est = w as u64 * TPCC_BYTES_PER_WAREHOUSE * cfg.tpcc_scale.items as u64
            / crate::buffer::tpcc::Scale::SPEC.items as u64;
        let mut loaded = Vec::new();
        for &d in &cfg.designs {
            if !may_fit(cx, d, est) {
                continue;
            }
            loaded.extend(cx.load_tpcc(d.name(), &cfg.design_config(d), w)?);
        }
        let ls: Vec<&Loaded> = loaded.iter().collect();
        let check = cfg.tpcc_check_all;
        for b in cx.measure_tpcc_rounds("tpcc", &ls, w, check, cfg.interleave)? {
            cx.push(b);
        }
    }
    let (rows, series) = section_rows(cx, "tpcc", "tpcc", &params, 1000.0);
    let mut c = LineChart::new(
        "TPC-C over warehouses (thesis Fig. 9)",
        "warehouses",
        "ktx/s",
    );
    c.log_y = true;
    let svg = c.draw(&with_capacity_marks(cx, series, true));
    cx.charts.push(("buffer-fig9".into(), svg));
    let mut head = vec!["warehouses".into(), "data MiB".into(), "fits".into()];
    head.extend(cfg.designs.iter().map(|d| d.name().to_string()));
    cx.sections.push(Section {
        experiment: "tpcc".into(),
        title: "Fig. 9: TPC-C throughput (ktx/s, all five transactions) over warehouses".into(),
        workload: format!(
            "TPC-C, spec mix (45/43/4/4/4), no think times, 1% New-Order rollbacks; {}; {}; '-': does not fit",
            cx.tiers_line(),
            cx.sweep_timing()
        ),
        head,
        rows,
        chart: Some("buffer-fig9".into()),
        notes: vec![format!(
            "dashed lines: the DRAM and PM capacities at about {} MiB per warehouse",
            TPCC_BYTES_PER_WAREHOUSE / MIB
        )],
    });
    Ok(())
}
