//! `ferrite create`, `ferrite info`, `ferrite check`.

use std::path::PathBuf;

use anyhow::{Context, Result};
use clap::Args;
use ferrite_pm::targets::{SlotTable, SLOT_TABLE_TYPE};
use ferrite_pm::{layout, AlignedBuf, ObjectInfo, Pool, PoolOptions};
use serde_json::json;

use crate::util::{human, parse_size, EXIT_BAD_POOL};

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
            json!({"name": o.name, "type": o.type_name, "chunks": chunks, "bytes": chunks * h.chunk_size})
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
        "latency_injection_ns": {"fence": fence_ns, "line": line_ns},
        "pool_uuid": format!("{:016x}", h.pool_uuid),
    })
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
        println!(
            "  {:<24} {:<24} {}",
            o["name"].as_str().unwrap_or(""),
            o["type"].as_str().unwrap_or(""),
            human(o["bytes"].as_u64().unwrap_or(0))
        );
    }
    println!("durability:  {}", pool.durability().describe());
    println!("flush:       {} + sfence", pool.flush_kind().name());
    Ok(0)
}

/// Pools up to this size are checked by a dry run of every structure's
/// recovery on a private copy; larger ones get the metadata checks only.
const DRY_RUN_LIMIT: u64 = 8 << 30;

/// Opens `o` on the private copy through its structure's normal recovery and
/// runs the structure's own consistency check. `None`: type unknown to this build.
fn verify_object(copy: &Pool, o: &ObjectInfo) -> Option<Result<String, String>> {
    let e = |e: &dyn std::fmt::Display| e.to_string();
    Some(match o.type_name.as_str() {
        SLOT_TABLE_TYPE => SlotTable::open_or_create(copy, &o.name, 1)
            .map_err(|x| e(&x))
            .and_then(|t| {
                for i in 0..t.slots() {
                    t.read(i)?;
                }
                Ok(format!("ok: {} live blocks", t.open_stats.live_blocks))
            }),
        ferrite_elf::layout::OBJECT_TYPE => {
            ferrite_elf::ElfStore::open(copy, &o.name, ferrite_elf::Variant::Pm, true)
                .and_then(|s| {
                    s.current().elf.verify()?;
                    Ok(format!(
                        "ok: {} rows, checksum and structure verified",
                        s.rows()
                    ))
                })
                .map_err(|x| e(&x))
        }
        ferrite_index::INDEX_TYPE => ferrite_index::FerriteIndex::open_or_create(copy, &o.name)
            .map_err(|x| e(&x))
            .and_then(|ix| {
                ix.check_structure()?;
                Ok(format!(
                    "ok: {} keys, leaf chain sorted and consistent",
                    ferrite_index::OrderedKv::count(&ix)
                ))
            }),
        ferrite_pmio::log::LOG_TYPE => ferrite_pmio::log::PmLog::open(copy, &o.name)
            .map(|l| format!("ok: {} entries recovered", ferrite_pmio::log::Log::len(&l)))
            .map_err(|x| e(&x)),
        _ => return None,
    })
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
    for o in pool.objects() {
        let verdict = match copy.as_ref().and_then(|c| verify_object(c, &o)) {
            Some(Ok(v)) => v,
            Some(Err(err)) => {
                problems.push(format!("{}: {err}", o.name));
                format!("CORRUPT: {err}")
            }
            None if copy.is_none() => format!(
                "not traced: pools over {} are checked by their metadata only",
                human(DRY_RUN_LIMIT)
            ),
            None => {
                "type not traced by this build (directory entry and chunk ownership checked)".into()
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
        println!("{}", if healthy { "healthy" } else { "NOT healthy" });
    }
    if healthy {
        Ok(0)
    } else {
        for p in &problems {
            eprintln!("ferrite: {p}");
        }
        Ok(EXIT_BAD_POOL)
    }
}
