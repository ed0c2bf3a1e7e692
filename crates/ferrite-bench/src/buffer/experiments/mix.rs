//! The five designs side by side on every workload, data well inside DRAM.

use ferrite_report::chart;
use serde_json::Value;

use super::Ctx;
use crate::buffer::output::{num, Section};
use crate::Result;

pub(crate) fn run(cx: &mut Ctx<'_>) -> Result<()> {
    let cfg = cx.cfg;
    let records = cfg.ycsb_records(cfg.mix_mib);
    let w = cfg.mix_warehouses;
    let param = Value::from(cfg.mix_mib);
    let mut unfit = Vec::new();
    for &d in &cfg.designs {
        let bc = cfg.design_config(d);
        match cx.load_ycsb(d.name(), &bc, records)? {
            Some(l) => {
                for &wl in &cfg.mix_workloads {
                    let b = cx.measure_ycsb("mix", &l, wl, records, param.clone())?;
                    cx.push(b);
                }
            }
            None => unfit.push(format!("{}: {records} YCSB records", d.name())),
        }
        match cx.load_tpcc(d.name(), &bc, w)? {
            Some(l) => {
                let b = cx.measure_tpcc("mix", &l, w, true)?;
                cx.push(b);
            }
            None => unfit.push(format!("{}: TPC-C {w} warehouse(s)", d.name())),
        }
    }
    let mut head = vec!["workload".to_string()];
    head.extend(cfg.designs.iter().map(|d| d.name().to_string()));
    let mut rows = Vec::new();
    let mut cats = Vec::new();
    let mut rel: Vec<(String, Vec<f64>)> = cfg
        .designs
        .iter()
        .map(|d| (d.name().to_string(), Vec::new()))
        .collect();
    let mut benches: Vec<(String, String, Value, f64)> = cfg
        .mix_workloads
        .iter()
        .map(|wl| {
            (
                wl.name(),
                format!("{} (Mops/s)", wl.name()),
                param.clone(),
                1.0,
            )
        })
        .collect();
    benches.push((
        "tpcc".into(),
        format!("tpcc {w} wh (ktx/s)"),
        Value::from(w),
        1000.0,
    ));
    for (bench, label, p, unit) in &benches {
        let vals: Vec<Option<f64>> = cfg
            .designs
            .iter()
            .map(|d| cx.find("mix", d.name(), bench, p).map(|r| r.mops * unit))
            .collect();
        let mut row = vec![label.clone()];
        row.extend(vals.iter().map(|v| v.map_or("-".into(), num)));
        rows.push(row);
        let base = vals.iter().flatten().cloned().fold(0.0, f64::max);
        let mm = vals[0].filter(|_| cfg.designs[0] == ferrite_btree::Design::MainMemory);
        let base = mm.unwrap_or(base);
        cats.push(bench.clone());
        for (i, v) in vals.iter().enumerate() {
            rel[i]
                .1
                .push(v.map_or(0.0, |v| if base > 0.0 { v / base } else { 0.0 }));
        }
    }
    let svg = chart::bar_chart(
        "Designs side by side, data inside DRAM (relative to main-memory)",
        "throughput / main-memory",
        &cats,
        &rel,
    );
    cx.charts.push(("buffer-mix".into(), svg));
    let mut notes = Vec::new();
    if !unfit.is_empty() {
        notes.push(format!("does not fit: {}", unfit.join("; ")));
    }
    cx.sections.push(Section {
        experiment: "mix".into(),
        title: format!(
            "All five designs side by side: YCSB at {} MiB ({records} records) and TPC-C at {w} warehouse(s)",
            cfg.mix_mib
        ),
        workload: format!(
            "YCSB: 4-byte keys, 10 x 100-byte fields, Zipf z=1; RO = lookups of one field, rw50 = 50% updates, scan = 1-100 records; TPC-C: all five transactions, spec mix, no think times; {}; {}",
            cx.tiers_line(),
            cx.timing()
        ),
        head,
        rows,
        chart: Some("buffer-mix".into()),
        notes,
    });
    Ok(())
}
