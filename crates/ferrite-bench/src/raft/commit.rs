//! Group-commit parameters of the PM list store (k modifications, t µs),
//! measured on the cluster: the write latency with 1 client and with many,
//! and the throughput, for each (k, t). This is what the defaults rest on.

use std::time::Duration;

use ferrite_report::{chart, Report};

use super::cluster::{preload, result, run_set, ClusterOpts};
use super::procs::Procs;
use crate::{env, BenchOutput, Result};

/// The (k, t µs) pairs tried.
pub const GRID: &[(usize, u64)] = &[
    (1, 0),
    (4, 20),
    (10, 0),
    (10, 20),
    (10, 100),
    (10, 1000),
    (100, 20),
    (100, 1000),
];

/// The sweep's chart: SET p50 per (k, t) setting, 1 client and the most
/// clients of the report.
pub fn commit_chart(rep: &Report) -> String {
    let mut settings: Vec<String> = Vec::new();
    let mut clients: Vec<usize> = Vec::new();
    for r in &rep.results {
        if !settings.contains(&r.variant) {
            settings.push(r.variant.clone());
        }
        if !clients.contains(&(r.threads as usize)) {
            clients.push(r.threads as usize);
        }
    }
    clients.sort_unstable();
    let series: Vec<(String, Vec<f64>)> = clients
        .iter()
        .map(|&c| {
            (
                format!("{c} client{}", if c == 1 { "" } else { "s" }),
                settings
                    .iter()
                    .map(|v| {
                        rep.results
                            .iter()
                            .find(|r| &r.variant == v && r.threads as usize == c)
                            .and_then(|r| r.p50_ns)
                            .unwrap_or(0.0)
                            / 1e3
                    })
                    .collect(),
            )
        })
        .collect();
    let cats: Vec<String> = settings.iter().map(|v| v.replace("us", " µs")).collect();
    chart::bar_chart(
        "List store: SET p50 per group-commit setting (k modifications, t)",
        "p50 µs",
        &cats,
        &series,
    )
}

/// Runs the sweep with the list store (options as for the cluster runs; the
/// stores, recovery and redis-benchmark options are ignored).
pub fn commit(o: &ClusterOpts) -> Result<BenchOutput> {
    let mut rep = env::report("raft-commit", &o.pm_dir);
    for &(k, t) in GRID {
        let variant = format!("k={k} t={t}us");
        eprintln!("raft commit sweep: {variant}");
        let mut args = o.serve_args.clone();
        args.extend([
            "--commit-every".into(),
            k.to_string(),
            "--commit-interval-us".into(),
            t.to_string(),
        ]);
        let dir = o
            .pm_dir
            .join(format!("ferrite-bench-raft-commit-{}", std::process::id()));
        let mut p = Procs::start(&o.exe, "list", 3, &dir, o.port, &args)?;
        let leader = p.wait_leader(Duration::from_secs(30))?;
        let addr = p.addr(leader);
        preload(addr, o.keys, o.clients.max(1))?;
        for clients in [1, o.clients] {
            let per = if clients == 1 {
                o.single_ops
            } else {
                o.multi_ops.div_ceil(clients as u64)
            };
            let run = run_set(addr, clients, per, o.keys)?;
            rep.results.push(result("set", &variant, clients, &run));
        }
        drop(p);
    }
    env::finish(&mut rep);
    let svg = commit_chart(&rep);
    Ok(BenchOutput {
        report: rep,
        svg,
        extra_cols: vec!["p90_ns", "mean_ns", "ops", "errors"],
    })
}
