//! `ferrite bench memory`: the latency floor an index lookup or scan cannot go
//! below on this machine, measured on the pool's own mapping and on DRAM.
//!
//! A point lookup in a tree with PM leaves ends with at least one random read
//! of a leaf that is not in cache, and it cannot issue that read before it
//! knows the leaf's address: a *dependent* random read. A scan reads several
//! leaves whose addresses it knows up front: *independent* reads that overlap.
//! The numbers here bound what any index (Ferrite's or a peer's) can reach with
//! one thread: `1000 / ns` million dependent reads per second.
//!
//! A tree index also cannot find the leaf before it has read the inner node
//! that points to it: *route-then-leaf* chains one random read of a DRAM
//! region the size of a 10 M-record index's lowest inner level (16 MiB) and
//! one of the leaf region. Whether that first read is a cache hit depends on
//! how much cache the machine really gives a dependent reader, which
//! `ferrite bench cache` measures.

use std::path::PathBuf;
use std::time::Instant;

use ferrite_pm::rng::SplitMix;
use ferrite_pm::TempPool;
use ferrite_report::{chart, BenchResult};
use serde_json::json;

use crate::index::workload::{scramble, Distribution, IdGen, Rng};
use crate::{env, BenchError, BenchOutput, Result};

/// Bytes of the inner-node region of the route-then-leaf chain: about the
/// lowest inner level of a 10 M-record index (Ferrite's takes ~19 MiB).
pub const NODE_REGION: usize = 16 << 20;

/// What `memory` measures.
#[derive(Debug, Clone)]
pub struct MemoryConfig {
    /// Bytes read at random (the index's leaves take about 300 MiB for 10 M records).
    pub region: u64,
    /// Reads per cell.
    pub ops: u64,
    /// Directory for the pool (removed afterwards).
    pub pool_dir: PathBuf,
}

/// An anonymous mapping (DRAM), optionally advised to use huge pages.
pub(super) struct Anon {
    pub(super) ptr: *mut u8,
    len: usize,
}

impl Anon {
    pub(super) fn new(len: usize, huge: bool) -> Result<Anon> {
        // SAFETY: a fresh private anonymous mapping; no existing memory is affected.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(BenchError::Io {
                path: "mmap of the DRAM region".into(),
                source: std::io::Error::last_os_error(),
            });
        }
        let advice = if huge {
            libc::MADV_HUGEPAGE
        } else {
            libc::MADV_NOHUGEPAGE
        };
        // SAFETY: p..p+len is the mapping just created; madvise is a hint.
        unsafe { libc::madvise(p, len, advice) };
        Ok(Anon { ptr: p.cast(), len })
    }
}

impl Drop for Anon {
    fn drop(&mut self) {
        // SAFETY: unmaps exactly the mapping created in `new`, used by nobody else.
        unsafe { libc::munmap(self.ptr.cast(), self.len) };
    }
}

/// Times `ops` dependent reads of 64-byte lines of `base..base+len` (each
/// address is the next line of a precomputed sequence plus the value the
/// previous read returned, which is always 0: the CPU cannot start a read before
/// the previous one is back), with line ids drawn from `dist` and scattered over
/// the region as a hashed key's leaf would be. Returns ns per read (wall, on-CPU).
///
/// # Safety
/// `base..base+len` must be writable memory owned by the caller.
pub(super) unsafe fn dependent(
    base: *mut u8,
    len: usize,
    ops: u64,
    dist: Distribution,
) -> (f64, f64) {
    let lines = (len / 64) as u64;
    // SAFETY: the region is ours (caller); zero it so every read returns 0.
    unsafe { std::ptr::write_bytes(base, 0, len) };
    let ids = IdGen::new(lines, dist);
    let mut rng = Rng(0x5eed);
    let seq: Vec<u32> = (0..ops)
        .map(|_| (scramble(ids.next(&mut rng)) % lines) as u32)
        .collect();
    let mut v = 0u64;
    let t = Timer::start();
    for &l in &seq {
        let at = l as usize * 64 + v as usize;
        // SAFETY: l < lines and v == 0, so the word is inside the region.
        v = unsafe { (base.add(at) as *const u64).read_volatile() };
    }
    std::hint::black_box(v);
    t.per_op(ops)
}

/// Times `ops` chains of two dependent reads: a random line of the node
/// region, then (its value added to the address, always 0) a random line of
/// `base..base+len`, whose value feeds the next chain's first address. The
/// route of a tree lookup followed by its leaf. ns per chain (wall, on-CPU).
///
/// # Safety
/// `base..base+len` and `node..node+node_len` must be writable memory owned by
/// the caller, not overlapping.
unsafe fn route_then_leaf(
    node: *mut u8,
    node_len: usize,
    base: *mut u8,
    len: usize,
    ops: u64,
) -> (f64, f64) {
    // SAFETY: both regions are ours (caller); zero them so every read returns 0.
    unsafe {
        std::ptr::write_bytes(node, 0, node_len);
        std::ptr::write_bytes(base, 0, len);
    }
    let (nl, ll) = ((node_len / 64) as u64, (len / 64) as u64);
    let mut rng = SplitMix(0x7007e);
    let seq: Vec<(u32, u32)> = (0..ops)
        .map(|_| (rng.below(nl) as u32, rng.below(ll) as u32))
        .collect();
    let mut v = 0u64;
    let t = Timer::start();
    for &(n, l) in &seq {
        // SAFETY: n < nl, l < ll and v == 0: both words are inside their regions.
        unsafe {
            v = (node.add(n as usize * 64 + v as usize) as *const u64).read_volatile();
            v = (base.add(l as usize * 64 + v as usize) as *const u64).read_volatile();
        }
    }
    std::hint::black_box(v);
    t.per_op(ops)
}

/// Wall-clock and on-CPU time of one measurement.
struct Timer(Instant, u64);

impl Timer {
    fn start() -> Timer {
        Timer(Instant::now(), ferrite_pm::clock::thread_cpu_ns())
    }

    /// (wall ns, on-CPU ns) per operation. On-CPU time leaves out the time
    /// this thread waited for a core on a shared machine.
    fn per_op(&self, ops: u64) -> (f64, f64) {
        let cpu = ferrite_pm::clock::thread_cpu_ns().saturating_sub(self.1) as f64;
        (
            self.0.elapsed().as_secs_f64() * 1e9 / ops as f64,
            cpu / ops as f64,
        )
    }
}

/// Times groups of `group` random leaves of `leaf_lines` lines read with
/// independent loads (a scan's pattern once it knows the leaves). ns per group
/// (wall, on-CPU).
///
/// # Safety
/// `base..base+len` must be readable memory owned by the caller.
unsafe fn leaf_groups(
    base: *mut u8,
    len: usize,
    ops: u64,
    group: usize,
    leaf_lines: usize,
) -> (f64, f64) {
    let leaf = 64 * leaf_lines;
    let leaves = (len / leaf) as u64;
    let groups = (ops / (group * leaf_lines) as u64).max(1);
    let mut rng = SplitMix(0x5eed);
    let mut sum = 0u64;
    let t = Timer::start();
    for _ in 0..groups {
        for _ in 0..group {
            let l = rng.below(leaves) as usize * leaf;
            for w in 0..leaf_lines {
                // SAFETY: l + 64*w + 8 <= leaves*leaf <= len.
                sum = sum
                    .wrapping_add(unsafe { (base.add(l + 64 * w) as *const u64).read_volatile() });
            }
        }
    }
    std::hint::black_box(sum);
    t.per_op(groups)
}

/// The four measurements on one region: (uniform, selfsimilar 0.2, leaf
/// groups, route then leaf through `node`).
///
/// # Safety
/// `base..base+len` must be writable memory owned by the caller, and `node`
/// a writable [`NODE_REGION`]-byte region apart from it.
unsafe fn measure(
    base: *mut u8,
    len: usize,
    node: *mut u8,
    ops: u64,
    group: usize,
    leaf_lines: usize,
) -> [(f64, f64); 4] {
    // SAFETY: forwarded contract.
    unsafe {
        [
            dependent(base, len, ops, Distribution::Uniform),
            dependent(base, len, ops, Distribution::SelfSimilar(0.2)),
            leaf_groups(base, len, ops, group, leaf_lines),
            route_then_leaf(node, NODE_REGION, base, len, ops),
        ]
    }
}

/// Dependent and independent random reads on the pool mapping and on DRAM.
pub fn memory(a: &MemoryConfig) -> Result<BenchOutput> {
    let len = a.region as usize & !4095;
    ensure(len >= 1 << 20, || "--region must be at least 1M".into())?;
    // The region is touched twice over (pool and DRAM copies exist one after
    // the other) and the read sequence takes 4 bytes per read: keep both well
    // inside physical memory rather than let the OOM killer answer.
    within_memory("--region", a.region)?;
    ensure((1..=1 << 28).contains(&a.ops), || {
        format!("--ops must be between 1 and {}", 1u64 << 28)
    })?;
    let (group, leaf_lines) = (7, 8);
    let mut r = env::report("memory", &a.pool_dir);
    let tp = TempPool::create(&a.pool_dir, "memory", a.region + (64 << 20))?;
    let pool = tp.pool();
    r.environment
        .suite
        .insert("region_bytes".into(), json!(len));
    let heap_id = pool.create_object("memory-bench", "ferrite.bench")?;
    let (heap, _) = pool.open_heap(heap_id, |_| Ok(()))?;
    let off = heap.alloc(len)?;
    // Inner nodes live in DRAM on huge pages (`ferrite_index::arena`).
    let nodes = Anon::new(NODE_REGION, true)?;
    let mut cells: Vec<(String, [(f64, f64); 4])> = Vec::new();
    // SAFETY: the block is ours, `len` bytes long and mapped; the node region
    // is a separate mapping of NODE_REGION bytes.
    let m = unsafe { measure(pool.at(off, len), len, nodes.ptr, a.ops, group, leaf_lines) };
    cells.push((format!("pool ({})", pool.durability().name()), m));
    for (name, huge) in [("dram-4k-pages", false), ("dram-huge-pages", true)] {
        let anon = Anon::new(len, huge)?;
        // SAFETY: the mapping is ours and `len` bytes long; so is the node region.
        let m = unsafe { measure(anon.ptr, len, nodes.ptr, a.ops, group, leaf_lines) };
        cells.push((name.to_string(), m));
    }
    let node_mib = NODE_REGION >> 20;
    for (name, m) in &cells {
        for (bench, param, ns) in [
            ("dependent-read", json!("uniform"), m[0]),
            ("dependent-read", json!("selfsimilar-0.2"), m[1]),
            ("scan-leaves", json!(group), m[2]),
            ("route-then-leaf", json!(format!("{node_mib}M-nodes")), m[3]),
        ] {
            r.results.push(
                BenchResult::new(bench, name, Some(param), 1, 1e3 / ns.0)
                    .with("ns_per_op", ns.0)
                    .with("ns_per_op_cpu", ns.1),
            );
        }
    }
    r.notes.push(format!(
        "dependent-read: one random 64-byte read whose address depends on the previous read, over {} MiB, \
         lines drawn uniformly or selfsimilar(0.2) (80% of reads on 20% of lines, as PiBench's mixed run); \
         Mops/s = 1000/ns is the single-thread ceiling of any lookup that reads one leaf",
        len >> 20
    ));
    r.notes.push(format!(
        "scan-leaves: {group} random {}-byte leaves read with independent loads (a 100-record scan); Mops/s counts groups",
        64 * leaf_lines
    ));
    r.notes.push(format!(
        "route-then-leaf: a random read of {node_mib} MiB of DRAM on huge pages (an inner node; a \
         10 M-record index's lowest inner level takes about that), then a dependent random read of \
         the region (its leaf): the two misses a tree lookup cannot avoid when its inner nodes do \
         not fit the cache a dependent reader gets (`ferrite bench cache`)"
    ));
    let cats = vec![
        "dependent read, uniform".to_string(),
        "dependent read, selfsimilar 0.2".to_string(),
        format!("{group} leaves, independent"),
        format!("route ({node_mib} MiB DRAM), then leaf"),
    ];
    let series: Vec<(String, Vec<f64>)> = cells
        .iter()
        .map(|(n, m)| (n.clone(), m.iter().map(|x| x.1).collect()))
        .collect();
    let svg = chart::bar_chart("Memory latency floor (on-CPU)", "ns", &cats, &series);
    env::finish(&mut r);
    Ok(BenchOutput {
        report: r,
        svg,
        extra_cols: vec!["ns_per_op", "ns_per_op_cpu"],
    })
}

/// Refuses a region of more than a quarter of physical memory (`flag` names
/// it in the message): better an error than the OOM killer.
pub(super) fn within_memory(flag: &str, bytes: u64) -> Result<()> {
    // SAFETY: sysconf has no memory effects.
    let phys = unsafe {
        libc::sysconf(libc::_SC_PHYS_PAGES) as u64 * libc::sysconf(libc::_SC_PAGESIZE) as u64
    };
    ensure(phys == 0 || bytes <= phys / 4, || {
        format!(
            "{flag} {} is more than a quarter of this machine's {} of memory",
            human(bytes),
            human(phys)
        )
    })
}

fn ensure(ok: bool, why: impl FnOnce() -> String) -> Result<()> {
    if ok {
        Ok(())
    } else {
        Err(BenchError::Options(why()))
    }
}

/// Bytes for a message: `256.0 MiB`.
pub(crate) fn human(bytes: u64) -> String {
    const U: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut v = bytes as f64;
    let mut i = 0;
    while v >= 1024.0 && i + 1 < U.len() {
        v /= 1024.0;
        i += 1;
    }
    if i == 0 {
        format!("{bytes} B")
    } else {
        format!("{v:.1} {}", U[i])
    }
}
