//! `ferrite bench persist` and `ferrite bench alloc`: the PM layer's own costs.

use std::path::PathBuf;
use std::time::Instant;

use anyhow::Result;
use clap::Args;
use ferrite_pm::sim::SplitMix;
use ferrite_pm::targets::SlotTable;
use ferrite_pm::{persist, FlushKind, Pool, TempPool};
use ferrite_report::{chart, BenchResult, Report};
use serde_json::json;

use crate::util::parse_size;

#[derive(Args, Debug)]
pub struct PersistArgs {
    /// Persists per cell
    #[arg(long, default_value_t = 2_000_000)]
    pub ops: u64,
    /// Region the sequential and random patterns cover
    #[arg(long, value_parser = parse_size, default_value = "64M")]
    pub region: u64,
    #[command(flatten)]
    pub io: BenchIo,
    /// Latency injection: ns added per fence and per flushed line (models slower PM)
    #[arg(long, num_args = 2, value_names = ["FENCE_NS", "LINE_NS"])]
    pub inject: Option<Vec<u64>>,
}

#[derive(Args, Debug)]
pub struct AllocArgs {
    /// Operations per cell
    #[arg(long, default_value_t = 1_000_000)]
    pub ops: u64,
    /// Block size in bytes
    #[arg(long, default_value_t = 64)]
    pub size: usize,
    #[command(flatten)]
    pub io: BenchIo,
}

/// Where a PM-layer benchmark puts its pool and its results (shared flags).
#[derive(Args, Debug)]
pub struct BenchIo {
    /// Directory for pools
    #[arg(long, default_value = "/dev/shm")]
    pub pool_dir: PathBuf,
    /// Where the table, JSON and chart go
    #[arg(long, default_value = "bench-out")]
    pub out: PathBuf,
    /// Print the report as JSON
    #[arg(long)]
    pub json: bool,
}

fn environment(r: &mut Report, pool: &Pool) {
    let (f, l) = persist::latency_injection();
    r.environment
        .insert("durability".into(), json!(pool.durability().name()));
    r.environment.insert(
        "best_flush".into(),
        json!(persist::best_flush_kind().name()),
    );
    r.environment.insert(
        "latency_injection_ns".into(),
        json!({"fence": f, "line": l}),
    );
    if f != 0 || l != 0 {
        r.notes.push(format!(
            "LATENCY INJECTION ON: +{f} ns per fence, +{l} ns per flushed line"
        ));
    }
}

/// Persist barrier cost for each write-back method and access pattern.
pub fn persist(a: PersistArgs) -> Result<i32> {
    if let Some(v) = &a.inject {
        persist::set_latency_injection(v[0], v[1]);
    }
    let tp = TempPool::create(&a.io.pool_dir, "persist", a.region + (64 << 20))?;
    let pool = tp.pool();
    let heap_id = pool.create_object("persist-bench", "ferrite.bench")?;
    let (heap, _) = pool.open_heap(heap_id, |_| Ok(()))?;
    let region = heap.alloc(a.region as usize)?;
    let base = pool.at(region, a.region as usize);
    let lines = a.region / 64;
    let mut r = Report::new("persist");
    environment(&mut r, pool);
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
            let t0 = Instant::now();
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
            let c = persist::thread_stats().since(before);
            r.results.push(
                BenchResult::new(pattern, m, None, 1, a.ops as f64 / dt / 1e6)
                    .with("ns_per_op", dt * 1e9 / a.ops as f64)
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
    let cols = ["ns_per_op", "fences_per_op", "lines_per_op"];
    let path = r.write_outputs(&a.io.out, "persist", &cols, &svg)?;
    r.print(a.io.json, &cols, Some(&path));
    Ok(0)
}

/// Allocate(+publish) on the PM heap against the system allocator.
pub fn alloc(a: AllocArgs) -> Result<i32> {
    let tp = TempPool::create(
        &a.io.pool_dir,
        "alloc",
        (a.ops * (a.size as u64 + 64)).max(64 << 20) * 2,
    )?;
    let pool = tp.pool();
    let mut r = Report::new("alloc");
    environment(&mut r, pool);
    let n = a.ops as usize;
    let batch = 1000usize;

    // alloc + free pairs in batches (steady state of a cache).
    let id = pool.create_object("alloc-free", "ferrite.bench")?;
    let (heap, _) = pool.open_heap(id, |_| Ok(()))?;
    let mut offs = Vec::with_capacity(batch);
    let t0 = Instant::now();
    for _ in 0..n / batch {
        for _ in 0..batch {
            offs.push(heap.alloc(a.size)?);
        }
        for o in offs.drain(..) {
            heap.free(o)?;
        }
        pool.fence(); // lets the freed blocks be reused, as a structure's persist would
    }
    let ferrite_af = n as f64 / t0.elapsed().as_secs_f64() / 1e6;
    let mut boxes: Vec<Box<[u8]>> = Vec::with_capacity(batch);
    let t0 = Instant::now();
    for _ in 0..n / batch {
        for _ in 0..batch {
            boxes.push(vec![0u8; a.size].into_boxed_slice());
        }
        boxes.clear();
    }
    let system_af = n as f64 / t0.elapsed().as_secs_f64() / 1e6;
    r.results.push(BenchResult::new(
        "alloc-free",
        "ferrite-heap",
        Some(a.size.into()),
        1,
        ferrite_af,
    ));
    r.results.push(BenchResult::new(
        "alloc-free",
        "system",
        Some(a.size.into()),
        1,
        system_af,
    ));

    // allocate, fill, persist, publish (the full crash-safe path).
    let table = SlotTable::open_or_create(pool, "publish", n)?;
    let before = persist::thread_stats();
    let t0 = Instant::now();
    for i in 0..n {
        table.publish(i, i as u64, a.size.saturating_sub(32).max(1))?;
    }
    let dt = t0.elapsed().as_secs_f64();
    let c = persist::thread_stats().since(before);
    r.results.push(
        BenchResult::new(
            "alloc-publish",
            "ferrite-heap",
            Some(a.size.into()),
            1,
            n as f64 / dt / 1e6,
        )
        .with("fences_per_op", c.fences as f64 / n as f64)
        .with("lines_per_op", c.flushed_lines as f64 / n as f64),
    );
    let mut ptrs: Vec<Box<[u8]>> = Vec::with_capacity(n);
    let t0 = Instant::now();
    for i in 0..n {
        let mut b = vec![0u8; a.size].into_boxed_slice();
        b[0] = i as u8;
        ptrs.push(b);
    }
    let dt = t0.elapsed().as_secs_f64();
    drop(ptrs);
    r.results.push(
        BenchResult::new(
            "alloc-publish",
            "system",
            Some(a.size.into()),
            1,
            n as f64 / dt / 1e6,
        )
        .with("fences_per_op", 0.0)
        .with("lines_per_op", 0.0),
    );
    r.notes.push("system = Rust's global allocator in DRAM, no durability; ferrite-heap alloc-publish persists the block and the pointer (2 barriers)".into());
    let cats = vec!["alloc-free".to_string(), "alloc-publish".to_string()];
    let series = ["ferrite-heap", "system"]
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
        .collect::<Vec<_>>();
    let svg = chart::bar_chart(
        &format!("Allocation, {}-byte blocks", a.size),
        "Mops/s",
        &cats,
        &series,
    );
    let cols = ["fences_per_op", "lines_per_op"];
    let path = r.write_outputs(&a.io.out, "alloc", &cols, &svg)?;
    r.print(a.io.json, &cols, Some(&path));
    Ok(0)
}
