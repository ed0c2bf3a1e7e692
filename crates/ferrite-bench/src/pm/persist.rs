//! `ferrite bench persist`: the cost of one persist (store + write-back +
//! fence) for each write-back method and access pattern.

use std::path::PathBuf;
use std::time::Instant;

use ferrite_pm::rng::SplitMix;
use ferrite_pm::{persist, FlushKind, TempPool};
use ferrite_report::{chart, BenchResult};

use crate::{env, BenchOutput, Result};

/// What `persist` measures.
#[derive(Debug, Clone)]
pub struct PersistConfig {
    /// Persists per cell.
    pub ops: u64,
    /// Bytes the sequential and random patterns cover.
    pub region: u64,
    /// Directory for the pool (removed afterwards).
    pub pool_dir: PathBuf,
}

/// Persist barrier cost for each write-back method and access pattern.
pub fn persist(a: &PersistConfig) -> Result<BenchOutput> {
    let tp = TempPool::create(&a.pool_dir, "persist", a.region + (64 << 20))?;
    let pool = tp.pool();
    let heap_id = pool.create_object("persist-bench", "ferrite.bench")?;
    let (heap, _) = pool.open_heap(heap_id, |_| Ok(()))?;
    let region = heap.alloc(a.region as usize)?;
    let base = pool.at(region, a.region as usize);
    let lines = a.region / 64;
    let mut r = env::report("persist", &a.pool_dir);
    let mut methods: Vec<&str> = [FlushKind::Clwb, FlushKind::ClflushOpt, FlushKind::Clflush]
        .into_iter()
        .filter(|k| k.supported())
        .map(|k| k.name())
        .collect();
    methods.push("nt-store");
    methods.push("store-only");
    let patterns = ["same-line", "sequential", "random"];
    for pattern in patterns {
        for m in &methods {
            let mut rng = SplitMix(7);
            let before = persist::thread_stats();
            let (t0, c0) = (Instant::now(), ferrite_pm::clock::thread_cpu_ns());
            for i in 0..a.ops {
                let line = match pattern {
                    "same-line" => 0,
                    "sequential" => i % lines,
                    _ => rng.below(lines),
                };
                // SAFETY: line < lines, so the 64-byte line is inside the region.
                let p = unsafe { base.add((line * 64) as usize) };
                match *m {
                    "nt-store" => {
                        let v = [i as u8; 64];
                        // SAFETY: p..p+64 is inside the region and 64-byte aligned.
                        unsafe { persist::nt_copy(pool.flush_kind(), p, v.as_ptr(), 64) };
                        persist::fence();
                    }
                    "store-only" => {
                        // SAFETY: as above.
                        unsafe { std::ptr::write_volatile(p as *mut u64, i) };
                    }
                    k => {
                        // SAFETY: as above.
                        unsafe { std::ptr::write_volatile(p as *mut u64, i) };
                        let kind = FlushKind::parse(k).expect("listed kinds parse");
                        // SAFETY: the line is mapped.
                        unsafe { persist::flush_range(kind, p, 8) };
                        persist::fence();
                    }
                }
            }
            let dt = t0.elapsed().as_secs_f64();
            let cpu = ferrite_pm::clock::thread_cpu_ns().saturating_sub(c0) as f64;
            let c = persist::thread_stats().since(before);
            r.results.push(
                BenchResult::new(pattern, m, None, 1, a.ops as f64 / dt / 1e6)
                    .with("ns_per_op", dt * 1e9 / a.ops as f64)
                    // On-CPU: without the time this thread waited for a core.
                    .with("ns_per_op_cpu", cpu / a.ops as f64)
                    .with("fences_per_op", c.fences as f64 / a.ops as f64)
                    .with("lines_per_op", c.flushed_lines as f64 / a.ops as f64),
            );
        }
    }
    r.notes
        .push("store-only is the baseline: a store with no write-back and no fence".into());
    let cats: Vec<String> = patterns.iter().map(|s| s.to_string()).collect();
    let series: Vec<(String, Vec<f64>)> = methods
        .iter()
        .map(|m| {
            let v = patterns
                .iter()
                .map(|p| {
                    r.results
                        .iter()
                        .find(|x| x.bench == *p && x.variant == *m)
                        .and_then(|x| x.extra.get("ns_per_op").and_then(|v| v.as_f64()))
                        .unwrap_or(0.0)
                })
                .collect();
            (m.to_string(), v)
        })
        .collect();
    let svg = chart::bar_chart(
        "Cost of one persist (8-byte store + write-back + fence)",
        "ns per persist",
        &cats,
        &series,
    );
    env::finish(&mut r);
    Ok(BenchOutput {
        report: r,
        svg,
        extra_cols: vec![
            "ns_per_op",
            "ns_per_op_cpu",
            "fences_per_op",
            "lines_per_op",
        ],
    })
}
