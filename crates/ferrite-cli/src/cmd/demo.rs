//! `ferrite demo`: the PM layer end to end on an embedded default pool.

use std::path::PathBuf;

use anyhow::{bail, Context, Result};
use clap::Args;
use ferrite_pm::targets::SlotTable;
use ferrite_pm::{persist, Pool, PoolOptions};

use crate::util::{human, parse_size};

#[derive(Args)]
pub struct DemoArgs {
    /// Pool file (default: a fresh file in /dev/shm, removed afterwards)
    #[arg(long)]
    pub pool: Option<PathBuf>,
    /// Pool size
    #[arg(long, value_parser = parse_size, default_value = "64M")]
    pub size: u64,
    /// Blocks to write
    #[arg(long, default_value_t = 10_000)]
    pub blocks: usize,
    /// Keep the pool file
    #[arg(long)]
    pub keep: bool,
}

pub fn run(a: DemoArgs) -> Result<i32> {
    let path = a.pool.clone().unwrap_or_else(|| {
        PathBuf::from(format!("/dev/shm/ferrite-demo-{}.pool", std::process::id()))
    });
    let res = demo(&a, &path);
    if !a.keep {
        let _ = std::fs::remove_file(&path);
    }
    res
}

fn demo(a: &DemoArgs, path: &PathBuf) -> Result<i32> {
    let opts = PoolOptions::default();
    let pool = Pool::create(path, a.size, &opts)
        .with_context(|| format!("creating {}", path.display()))?;
    println!("created   {} ({})", path.display(), human(a.size));
    println!("device    {}", pool.durability().describe());
    println!("flush     {} + sfence", pool.flush_kind().name());
    let table = SlotTable::open_or_create(&pool, "demo", a.blocks)?;
    let bar = indicatif::ProgressBar::new(a.blocks as u64);
    let before = persist::thread_stats();
    let t0 = std::time::Instant::now();
    for i in 0..a.blocks {
        table.publish(i, i as u64 + 1, 64 + (i % 7) * 100)?;
        if i % 256 == 0 {
            bar.set_position(i as u64);
        }
    }
    bar.finish_and_clear();
    let dt = t0.elapsed();
    let cost = persist::thread_stats().since(before);
    println!(
        "wrote     {} blocks in {:.1} ms ({:.2} persist barriers and {:.2} flushed lines per block)",
        a.blocks,
        dt.as_secs_f64() * 1e3,
        cost.fences as f64 / a.blocks as f64,
        cost.flushed_lines as f64 / a.blocks as f64
    );
    drop(table);
    drop(pool);
    let t1 = std::time::Instant::now();
    let pool = Pool::open(path, &opts)?;
    let table = SlotTable::open_or_create(&pool, "demo", a.blocks)?;
    println!(
        "reopened  in {:.2} ms; recovery traced {} live blocks in {} chunks",
        t1.elapsed().as_secs_f64() * 1e3,
        table.open_stats.live_blocks,
        table.open_stats.chunks
    );
    for i in 0..a.blocks {
        match table.read(i) {
            Ok(Some(v)) if v.version == i as u64 + 1 => {}
            other => bail!("block {i} did not survive: {other:?}"),
        }
    }
    println!("verified  all {} blocks intact", a.blocks);
    let (total, free) = pool.chunk_usage();
    println!(
        "usage     {} of {} in use",
        human((total - free) * pool.header().chunk_size),
        human(total * pool.header().chunk_size)
    );
    if !a.keep {
        println!(
            "removed   {} (use --keep to inspect it with `ferrite info`)",
            path.display()
        );
    }
    Ok(0)
}
