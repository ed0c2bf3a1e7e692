//! `ferrite bench alloc`: allocate (+ publish) on the PM heap against the
//! system allocator.

use std::path::PathBuf;
use std::time::Instant;

use ferrite_pm::{persist, TempPool};
use ferrite_report::{chart, BenchResult};
use ferrite_testkit::SlotTable;

use crate::{env, BenchOutput, Result};

/// What `alloc` measures.
#[derive(Debug, Clone)]
pub struct AllocConfig {
    /// Operations per cell.
    pub ops: u64,
    /// Block size in bytes.
    pub size: usize,
    /// Directory for the pool (removed afterwards).
    pub pool_dir: PathBuf,
}

/// Allocate(+publish) on the PM heap against the system allocator.
pub fn alloc(a: &AllocConfig) -> Result<BenchOutput> {
    let tp = TempPool::create(
        &a.pool_dir,
        "alloc",
        (a.ops * (a.size as u64 + 64)).max(64 << 20) * 2,
    )?;
    let pool = tp.pool();
    let mut r = env::report("alloc", &a.pool_dir);
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
        pool.fence()?; // lets the freed blocks be reused, as a structure's persist would
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
    env::finish(&mut r);
    Ok(BenchOutput {
        report: r,
        svg,
        extra_cols: vec!["fences_per_op", "lines_per_op"],
    })
}
