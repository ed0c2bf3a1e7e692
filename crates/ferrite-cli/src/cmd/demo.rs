//! `ferrite demo`: the PM layer and the index end to end on an embedded default
//! pool: create, write, reopen (recovery), verify, explain.

use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use clap::Args;
use ferrite_index::FerriteIndex;
use ferrite_kv::OrderedKv;
use ferrite_pm::{persist, Pool, PoolOptions};

use crate::util::{human, parse_size};

#[derive(Args)]
pub struct DemoArgs {
    /// Pool file to create (must not exist; default: a fresh file in /dev/shm).
    /// The demo removes the pool it created unless --keep is given; it never
    /// touches a file it did not create
    #[arg(long)]
    pub pool: Option<PathBuf>,
    /// Pool size
    #[arg(long, value_parser = parse_size, default_value = "64M")]
    pub size: u64,
    /// Key-value pairs to write
    #[arg(long, default_value_t = 100_000)]
    pub keys: u64,
    /// Keep the pool file
    #[arg(long)]
    pub keep: bool,
}

pub fn run(a: DemoArgs) -> Result<i32> {
    let path = a.pool.clone().unwrap_or_else(|| {
        PathBuf::from(format!("/dev/shm/ferrite-demo-{}.pool", std::process::id()))
    });
    if a.pool.is_some() && path.exists() {
        bail!(
            "{} already exists: `ferrite demo` writes to a pool it creates; pass a new path (the existing file is left as it was)",
            path.display()
        );
    }
    let mut created = false;
    let res = demo(&a, &path, &mut created);
    // Only a pool this run created is removed.
    if created && !a.keep {
        let _ = std::fs::remove_file(&path);
    }
    res
}

fn key(i: u64) -> [u8; 8] {
    i.wrapping_mul(0x9e37_79b9_7f4a_7c15).to_be_bytes()
}

fn demo(a: &DemoArgs, path: &Path, created: &mut bool) -> Result<i32> {
    let opts = PoolOptions::default();
    let pool = Pool::create(path, a.size, &opts)
        .with_context(|| format!("creating {}", path.display()))?;
    *created = true;
    println!("created   {} ({})", path.display(), human(a.size));
    println!("device    {}", pool.durability().describe());
    println!("flush     {} + sfence", pool.flush_kind().name());
    let idx = FerriteIndex::open_or_create(&pool, "demo")?;
    let bar = indicatif::ProgressBar::new(a.keys);
    let before = persist::thread_stats();
    let t0 = std::time::Instant::now();
    for i in 0..a.keys {
        idx.insert(&key(i), &i.to_le_bytes())?;
        if i % 1024 == 0 {
            bar.set_position(i);
        }
    }
    bar.finish_and_clear();
    let dt = t0.elapsed();
    let cost = persist::thread_stats().since(before);
    println!(
        "wrote     {} keys (8-byte keys and values) into the index in {:.1} ms: {:.2} persist barriers and {:.2} flushed lines per insert",
        a.keys,
        dt.as_secs_f64() * 1e3,
        cost.fences as f64 / a.keys.max(1) as f64,
        cost.flushed_lines as f64 / a.keys.max(1) as f64
    );
    drop(idx);
    drop(pool);
    let pool = Pool::open(path, &opts)?;
    let idx = FerriteIndex::open_or_create(&pool, "demo")?;
    let r = idx.rebuild_stats();
    println!(
        "reopened  the pool; recovery rebuilt the DRAM inner nodes over {} leaves and {} keys in {:.2} ms",
        r.leaves,
        r.keys,
        r.duration.as_secs_f64() * 1e3
    );
    let mut v = Vec::new();
    for i in 0..a.keys {
        if !idx.get_into(&key(i), &mut v)? || v != i.to_le_bytes() {
            bail!("key {i} did not survive the reopen");
        }
    }
    println!("verified  all {} keys read back with their values", a.keys);
    let (total, free) = pool.chunk_usage();
    println!(
        "usage     {} of {} in use",
        human((total - free) * pool.header().chunk_size),
        human(total * pool.header().chunk_size)
    );
    if a.keep {
        println!(
            "kept      {} (inspect it with `ferrite info` or `ferrite check`)",
            path.display()
        );
    } else {
        println!(
            "removed   {} (use --keep to inspect it with `ferrite info`)",
            path.display()
        );
    }
    Ok(0)
}
