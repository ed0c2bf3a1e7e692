//! `ferrite create`, `ferrite info`, `ferrite check`.

use std::path::PathBuf;

use anyhow::{Context, Result};
use clap::Args;
use ferrite_pm::{layout, AlignedBuf, ObjectInfo, Pool, PoolOptions};
use serde_json::json;

use crate::util::{human, parse_size, EXIT_BAD_POOL, EXIT_UNCHECKED};

#[derive(Args)]
pub struct CreateArgs {
    /// Path of the new pool file (e.g. /dev/shm/my.pool)
    pub pool: PathBuf,
    /// Size in bytes (suffixes K, M, G, T). Pools do not grow: oversize freely,
    /// untouched chunks cost no memory on tmpfs or DAX
    #[arg(long, value_parser = parse_size)]
    pub size: u64,
    /// Chunk size (power of two, 16K..64M)
    #[arg(long, value_parser = parse_size, default_value = "256K")]
    pub chunk_size: u64,
    /// Print JSON
    #[arg(long)]
    pub json: bool,
}

#[derive(Args)]
pub struct InfoArgs {
    /// Pool file
    pub pool: PathBuf,
    /// Print JSON
    #[arg(long)]
    pub json: bool,
}

#[derive(Args)]
pub struct CheckArgs {
    /// Pool file
    pub pool: PathBuf,
    /// Print JSON
    #[arg(long)]
    pub json: bool,
}

fn open_ro(path: &PathBuf) -> Result<Pool> {
    let opts = PoolOptions {
        read_only: true,
        ..PoolOptions::default()
    };
    Pool::open(path, &opts).with_context(|| format!("cannot open pool {}", path.display()))
}

pub fn create(a: CreateArgs) -> Result<i32> {
    let opts = PoolOptions {
        chunk_size: a.chunk_size,
        ..PoolOptions::default()
    };
    let pool = Pool::create(&a.pool, a.size, &opts)
        .with_context(|| format!("cannot create pool {}", a.pool.display()))?;
    if a.json {
        println!("{}", serde_json::to_string_pretty(&describe(&pool))?);
    } else {
        println!(
            "created {} ({}, {} chunks of {})",
            a.pool.display(),
            human(pool.size()),
            pool.header().chunk_count,
            human(pool.header().chunk_size)
        );
        println!("durability: {}", pool.durability().describe());
    }
    Ok(0)
}

/// Everything `info` says, as JSON.
fn describe(pool: &Pool) -> serde_json::Value {
    let h = pool.header();
    let (total, free) = pool.chunk_usage();
    let owners = pool.chunks_by_owner();
    let objects: Vec<_> = pool
        .objects()
        .into_iter()
        .map(|o| {
            let chunks = owners.iter().find(|c| c.0 == o.id).map_or(0, |c| c.1);
            let mut v = json!({"name": o.name, "type": o.type_name, "chunks": chunks, "bytes": chunks * h.chunk_size});
            // An index's own format version (root word 2, once initialised):
            // version 1 until a version-2 build writes its first long entry.
            if o.type_name == ferrite_index::INDEX_TYPE && o.roots[0] != 0 {
                let tag = o.roots[2];
                if tag >> 32 == ferrite_index::FORMAT_TAG >> 32 {
                    v["index_format_version"] = json!(tag & 0xffff_ffff);
                }
            }
            v
        })
        .collect();
    let (fence_ns, line_ns) = ferrite_pm::persist::latency_injection();
    json!({
        "path": pool.path().map(|p| p.display().to_string()),
        "format_version": h.version,
        "size": h.pool_size,
        "chunk_size": h.chunk_size,
        "chunks": total,
        "used_bytes": (total - free) * h.chunk_size,
        "free_bytes": free * h.chunk_size,
        "objects": objects,
        "durability": pool.durability().name(),
        "durability_description": pool.durability().describe(),
        "power_fail_safe": pool.durability().power_fail_safe(),
        "flush": pool.flush_kind().name(),
        "page_size": pool.page_size(),
        "latency_injection_ns": {"fence": fence_ns, "line": line_ns},
        "pool_uuid": format!("{:016x}", h.pool_uuid),
    })
}

/// The page size mapping the pool, in words.
fn page_text(p: Option<u64>) -> String {
    match p {
        Some(b) if b >= 2 << 20 => format!(
            "{} (huge pages: one TLB entry per {})",
            human(b),
            human(b)
        ),
        Some(b) => format!(
            "{} (no huge pages: tmpfs mounted huge=always, or DAX with 2 MiB-aligned extents, would give 2 MiB)",
            human(b)
        ),
        None => "unknown (no /proc/self/smaps)".into(),
    }
}

pub fn info(a: InfoArgs) -> Result<i32> {
    let pool = open_ro(&a.pool)?;
    let d = describe(&pool);
    if a.json {
        println!("{}", serde_json::to_string_pretty(&d)?);
        return Ok(0);
    }
    let h = pool.header();
    let (total, free) = pool.chunk_usage();
    println!("pool:        {}", a.pool.display());
    println!(
        "format:      version {} (this build reads {})",
        h.version,
        layout::FORMAT_VERSION
    );
    println!(
        "size:        {} ({} bytes)",
        human(h.pool_size),
        h.pool_size
    );
    println!(
        "heap:        {} chunks of {}: {} used, {} free",
        total,
        human(h.chunk_size),
        human((total - free) * h.chunk_size),
        human(free * h.chunk_size)
    );
    let objs = d["objects"].as_array().cloned().unwrap_or_default();
    println!("objects:     {}", objs.len());
    for o in &objs {
        let format = o["index_format_version"]
            .as_u64()
            .map(|v| format!(" (index format version {v})"))
            .unwrap_or_default();
        println!(
            "  {:<24} {:<24} {}{format}",
            o["name"].as_str().unwrap_or(""),
            o["type"].as_str().unwrap_or(""),
            human(o["bytes"].as_u64().unwrap_or(0))
        );
    }
    println!("durability:  {}", pool.durability().describe());
    println!("flush:       {} + sfence", pool.flush_kind().name());
    println!("pages:       {}", page_text(pool.page_size()));
    Ok(0)
}

/// Pools up to this size are checked by a dry run of every structure's
/// recovery on a private copy; larger ones get the metadata checks only.
const DRY_RUN_LIMIT: u64 = 8 << 30;

/// What `check` found for one object.
enum Verdict {
    Ok(String),
    Corrupt(String),
    /// Not verified (unknown type, or the pool is too large for a dry run).
    Unchecked(String),
}

/// Opens `o` on the private copy through its structure's normal recovery and
/// runs the structure's own consistency check (from the registry).
fn verify_object(copy: Option<&Pool>, o: &ObjectInfo) -> Verdict {
    let Some(s) = ferrite_registry::by_object_type(&o.type_name) else {
        return Verdict::Unchecked(format!(
            "UNKNOWN type {:?}: this build cannot check it (directory entry and chunk ownership only)",
            o.type_name
        ));
    };
    let Some(verify) = s.verify else {
        return Verdict::Unchecked(format!("{} objects have no check", s.name));
    };
    let Some(copy) = copy else {
        return Verdict::Unchecked(format!(
            "not verified: pools over {} are checked by their metadata only",
            human(DRY_RUN_LIMIT)
        ));
    };
    match verify(copy, &o.name) {
        Ok(v) => Verdict::Ok(v),
        Err(e) => Verdict::Corrupt(e),
    }
}

fn read_copy(path: &PathBuf, size: u64) -> Result<Pool> {
    use std::io::Read;
    let mut buf = AlignedBuf::zeroed(size as usize);
    let mut f = std::fs::File::open(path)?;
    f.read_exact(buf.as_mut_slice())?;
    Ok(Pool::open_image(buf, &PoolOptions::default())?)
}

pub fn check(a: CheckArgs) -> Result<i32> {
    let pool = open_ro(&a.pool)?;
    let rep = pool.open_report().clone();
    let mut problems: Vec<String> = Vec::new();
    let mut objects = Vec::new();
    let copy = if pool.size() <= DRY_RUN_LIMIT {
        Some(read_copy(&a.pool, pool.size()).context("reading the pool for a dry run")?)
    } else {
        None
    };
    let mut unchecked = 0usize;
    for o in pool.objects() {
        let verdict = match verify_object(copy.as_ref(), &o) {
            Verdict::Ok(v) => v,
            Verdict::Corrupt(err) => {
                problems.push(format!("{}: {err}", o.name));
                format!("CORRUPT: {err}")
            }
            Verdict::Unchecked(why) => {
                unchecked += 1;
                why
            }
        };
        objects.push(json!({"name": o.name, "type": o.type_name, "verdict": verdict}));
    }
    let healthy = problems.is_empty();
    if a.json {
        println!(
            "{}",
            serde_json::to_string_pretty(&json!({
                "healthy": healthy,
                "unchecked_objects": unchecked,
                "orphan_chunks": rep.orphan_chunks,
                "torn_runs": rep.torn_runs,
                "objects": objects,
                "problems": problems,
            }))?
        );
    } else {
        println!(
            "header:      ok (format version {}, checksum valid)",
            pool.header().version
        );
        println!("directory:   ok ({} objects)", objects.len());
        println!(
            "chunk table: ok ({} orphaned chunks and {} torn large-block claims from interrupted operations; the next writable open frees them)",
            rep.orphan_chunks, rep.torn_runs
        );
        for o in &objects {
            println!(
                "  {:<24} {}",
                o["name"].as_str().unwrap_or(""),
                o["verdict"].as_str().unwrap_or("")
            );
        }
        println!(
            "{}",
            match (healthy, unchecked) {
                (false, _) => "NOT healthy".to_string(),
                (true, 0) => "healthy".to_string(),
                (true, n) => format!("no problem found, but {n} object(s) were NOT checked"),
            }
        );
    }
    if healthy && unchecked > 0 {
        Ok(EXIT_UNCHECKED)
    } else if healthy {
        Ok(0)
    } else {
        for p in &problems {
            eprintln!("ferrite: {p}");
        }
        Ok(EXIT_BAD_POOL)
    }
}
