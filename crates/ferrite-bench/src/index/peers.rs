//! Published PM indexes as benchmark variants: `pibench:PATH` loads a PiBench
//! wrapper library through [`ferrite_pibench_host`] and runs it in this
//! harness beside Ferrite's indexes.
//!
//! A spec is `pibench:PATH`, `pibench-ep2:PATH` or `pibench-optiql:PATH`
//! (the layout named rather than read from the vtable), optionally followed by
//! `?OPT&OPT…`:
//!
//! * `pool=dir`: `create_tree` gets a directory to create its pools in
//!   (PACTree) instead of a pool file path;
//! * `keys=u64|i64|bytes`: how 8-byte keys are handed over (default: native
//!   integers for the ep2 layout, as PiBench master passes them; bytes for
//!   optiql; `i64`: native with the sign bit flipped, for a wrapper that
//!   compares keys as signed integers, LB+-Tree);
//! * `env=NAME=VALUE`: set before the library is loaded (repeatable);
//! * `name=NAME`: the name in tables and charts (default: from the file name);
//! * `pool_size=SIZE`: the pool size passed to `create_tree` (default: the
//!   harness's estimate for the records, at least 1 GiB). PMDK allocates the
//!   whole pool when it creates it, on tmpfs in DRAM.
//! * `pool_per_record=SIZE`: the pool size grows with the records instead:
//!   at least SIZE for each record the run can hold (loaded and inserted),
//!   and never less than the default. For an index whose footprint per
//!   record is far above the estimate (ROART over PMDK touches 850 B per
//!   record at 10 M records, and dies of a null allocation in a smaller pool).
//!
//! Every peer gets a fresh directory `<pool dir>/ferrite-peer-NAME-PID/` for its
//! pool, removed afterwards. PMDK on tmpfs would flush with msync; the harness
//! sets `PMEM_IS_PMEM_FORCE=1` (unless already set) so it flushes with cache
//! line write-backs as on real PM. Peers run in a child process of their own
//! (see `suite`), so a crash of one is reported and the others still run.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use ferrite_pibench_host::{
    parse_spec, pmdk_flushes, short_name, KeyOrder, Layout, PiBenchTree, TreeOptions,
};

use crate::index::variants::{
    growth_since, heap_in_use_bytes, Instance, MemoryReport, VariantConfig,
};
use crate::{BenchError, Result};

/// A parsed `pibench:` spec.
#[derive(Debug, Clone, PartialEq)]
pub struct PeerSpec {
    pub lib: PathBuf,
    pub layout: Option<Layout>,
    pub pool_is_dir: bool,
    pub keys: Option<KeyOrder>,
    pub env: Vec<(String, String)>,
    pub name: String,
    /// `pool_size=` (bytes): overrides the size the harness computes.
    pub pool_size: Option<u64>,
    /// `pool_per_record=` (bytes): the pool holds at least this per record.
    pub pool_per_record: Option<u64>,
}

/// `4G`, `512M`, `65536`: bytes.
fn parse_bytes(s: &str) -> Option<u64> {
    let (num, mul) = match s.as_bytes().last()? {
        b'K' | b'k' => (&s[..s.len() - 1], 1u64 << 10),
        b'M' | b'm' => (&s[..s.len() - 1], 1 << 20),
        b'G' | b'g' => (&s[..s.len() - 1], 1 << 30),
        _ => (s, 1),
    };
    num.parse::<u64>().ok()?.checked_mul(mul)
}

/// True for a `pibench:`, `pibench-ep2:` or `pibench-optiql:` variant.
pub fn is_peer(v: &str) -> bool {
    v.starts_with("pibench:") || v.starts_with("pibench-ep2:") || v.starts_with("pibench-optiql:")
}

impl PeerSpec {
    pub fn parse(spec: &str) -> Result<PeerSpec> {
        let (head, opts) = match spec.split_once('?') {
            Some((h, o)) => (h, o),
            None => (spec, ""),
        };
        let (layout, lib) = parse_spec(head).ok_or_else(|| {
            BenchError::Options(format!(
                "{spec:?}: a peer is pibench:PATH, pibench-ep2:PATH or pibench-optiql:PATH"
            ))
        })?;
        let mut p = PeerSpec {
            name: short_name(&lib),
            lib,
            layout,
            pool_is_dir: false,
            keys: None,
            env: Vec::new(),
            pool_size: None,
            pool_per_record: None,
        };
        for o in opts.split('&').filter(|o| !o.is_empty()) {
            let (k, v) = o.split_once('=').unwrap_or((o, ""));
            match (k, v) {
                ("pool", "dir") => p.pool_is_dir = true,
                ("pool", "file") => p.pool_is_dir = false,
                ("keys", "u64") => p.keys = Some(KeyOrder::NativeU64),
                ("keys", "i64") => p.keys = Some(KeyOrder::NativeI64),
                ("keys", "bytes") => p.keys = Some(KeyOrder::Bytes),
                ("name", n) if !n.is_empty() => p.name = n.to_string(),
                ("pool_size" | "pool_per_record", n) => {
                    let b = parse_bytes(n).ok_or_else(|| {
                        BenchError::Options(format!("{spec:?}: {k}={n:?} is not a size (4G, 512M, 1K, …)"))
                    })?;
                    if k == "pool_size" {
                        p.pool_size = Some(b);
                    } else {
                        p.pool_per_record = Some(b);
                    }
                }
                ("env", kv) => match kv.split_once('=') {
                    Some((n, val)) if !n.is_empty() => p.env.push((n.into(), val.into())),
                    _ => return Err(BenchError::Options(format!("{spec:?}: env=NAME=VALUE"))),
                },
                _ => {
                    return Err(BenchError::Options(format!(
                        "{spec:?}: unknown option {o:?} (pool=dir|file, pool_size=SIZE, pool_per_record=SIZE, keys=u64|i64|bytes, env=NAME=VALUE, name=NAME)"
                    )))
                }
            }
        }
        Ok(p)
    }

    /// The pool size `create_tree` gets for a run of `cfg`'s shape.
    pub fn pool_bytes(&self, cfg: &VariantConfig) -> u64 {
        // PACTree allocates a 512 MiB operation log in its own pool of this
        // size: fewer than 1 GiB fails ("!!! alloc error", then a segfault).
        self.pool_size.unwrap_or_else(|| {
            let per = self
                .pool_per_record
                .map_or(0, |b| cfg.max_records.saturating_mul(b));
            cfg.pool_bytes().max(per).max(1 << 30)
        })
    }
}

/// A peer's DRAM from the growth of two measures over its load: the bytes
/// glibc's allocator has handed out (`mallinfo2`), unless resident anonymous
/// memory (`RssAnon`) grew by more than twice that (and 16 MiB), which only
/// memory held outside glibc can explain.
///
/// The peers allocate through glibc: they link jemalloc, but a library loaded
/// with `dlopen` binds `malloc` to the one already in the process. glibc's
/// count is exact and the same on every load (10 M records: FPTree 2.07,
/// LB+-Tree 4.06, DPTree 11.73 B/record on every load of four invocations,
/// 2026-12-02). `RssAnon` is not: a peer's process is forked
/// from the harness, and glibc hands it the free space of the harness's old
/// arenas, already resident (`malloc_trim` returns only whole free pages),
/// while fresh arenas add pages of their own. The same LB+-Tree load grew
/// `RssAnon` by 1.49, 2.65, 4.59, 5.76 and 5.95 B/record in five invocations.
/// Both growths are in the report.
pub fn peer_dram(rss_growth: Option<u64>, malloc_growth: Option<u64>) -> Option<u64> {
    match (rss_growth, malloc_growth) {
        (Some(r), Some(h)) if r > h.saturating_mul(2) + (16 << 20) => Some(r),
        (_, Some(h)) => Some(h),
        (r, None) => r,
    }
}

/// Anonymous resident memory of this process (`RssAnon`), in bytes. Pool
/// mappings are shared file pages and do not count.
pub fn rss_anon_bytes() -> Option<u64> {
    let s = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = s.lines().find(|l| l.starts_with("RssAnon:"))?;
    let kb: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kb * 1024)
}

/// Returns the allocator's free memory to the kernel, so that what a peer
/// allocates next shows in `RssAnon` instead of reusing resident free pages.
#[cfg(all(target_os = "linux", target_env = "gnu"))]
fn release_free_heap() {
    // SAFETY: malloc_trim only releases free memory of glibc's arenas (it
    // takes their locks itself); nothing allocated is touched.
    unsafe { libc::malloc_trim(0) };
}

#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
fn release_free_heap() {}

/// Resident bytes of this process's mappings of files under `dir`
/// (`/proc/self/smaps`): the pool pages the index has touched. PMDK and
/// `pmem_map_file` allocate a whole pool file when they create it, so the
/// file's allocated blocks say nothing about what the index uses; the pages
/// it faulted in do. None when smaps cannot be read.
pub fn mapped_rss_bytes(dir: &Path) -> Option<u64> {
    let smaps = std::fs::read_to_string("/proc/self/smaps").ok()?;
    let prefix = dir.to_string_lossy().into_owned();
    let mut total = 0u64;
    let mut inside = false;
    for line in smaps.lines() {
        let mut f = line.split_whitespace();
        let first = f.next().unwrap_or("");
        if first.contains('-') && first.chars().all(|c| c.is_ascii_hexdigit() || c == '-') {
            // A mapping's header: address perms offset dev inode [path].
            inside = line
                .split_whitespace()
                .nth(5)
                .is_some_and(|p| p.starts_with(&prefix));
        } else if inside && first == "Rss:" {
            total += f.next().and_then(|kb| kb.parse::<u64>().ok()).unwrap_or(0) * 1024;
        }
    }
    Some(total)
}

/// Bytes allocated to the files under `dir` (tmpfs pages), recursively.
pub fn allocated_bytes(dir: &Path) -> u64 {
    use std::os::unix::fs::MetadataExt;
    let mut total = 0;
    let Ok(rd) = std::fs::read_dir(dir) else {
        return 0;
    };
    for e in rd.flatten() {
        let Ok(m) = e.metadata() else { continue };
        if m.is_dir() {
            total += allocated_bytes(&e.path());
        } else {
            total += m.blocks() * 512;
        }
    }
    total
}

/// The pool directory a peer opened by process `pid` gets in `pool_dir`.
fn peer_dir(pool_dir: &Path, name: &str, pid: u32) -> PathBuf {
    pool_dir.join(format!("ferrite-peer-{name}-{pid}"))
}

/// Removes every peer pool directory of process `pid` in `pool_dir` (what a
/// peer's process left when it was killed or crashed).
pub fn remove_peer_dirs(pool_dir: &Path, pid: i32) {
    let Ok(rd) = std::fs::read_dir(pool_dir) else {
        return;
    };
    let suffix = format!("-{pid}");
    for e in rd.flatten() {
        let n = e.file_name();
        let n = n.to_string_lossy();
        if n.starts_with("ferrite-peer-") && n.ends_with(&suffix) {
            let _ = std::fs::remove_dir_all(e.path());
        }
    }
}

/// Why a peer's process may have died, when the filesystem of `pool_dir` is
/// full (checked once the process has ended, before its pool is removed):
/// a published index that maps a sparse pool file (ROART's DCMM allocator
/// maps 256 GiB of one) dies of SIGBUS at the first store to a page tmpfs
/// cannot supply. `None` while it has room.
pub fn full_filesystem_note(pool_dir: &Path) -> Option<String> {
    let c = std::ffi::CString::new(pool_dir.as_os_str().as_encoded_bytes()).ok()?;
    // SAFETY: statvfs is plain data; the call fills it or fails.
    let mut st: libc::statvfs = unsafe { std::mem::zeroed() };
    // SAFETY: c is a NUL-terminated path and st a valid statvfs to fill.
    if unsafe { libc::statvfs(c.as_ptr(), &mut st) } != 0 {
        return None;
    }
    let unit = st.f_frsize as u64;
    let (total, avail) = (st.f_blocks as u64 * unit, st.f_bavail as u64 * unit);
    // Full: less room than one 2 MiB page (a huge=always tmpfs), or 1 %.
    if total == 0 || avail >= (2u64 << 20).max(total / 100) {
        return None;
    }
    Some(format!(
        "the filesystem of its pool directory {} was full when its process ended ({} free of {}): a store to a pool page the filesystem cannot supply is a SIGBUS; give it a larger one (--pool-dir, or a larger tmpfs size=)",
        pool_dir.display(),
        crate::pm::memory::human(avail),
        crate::pm::memory::human(total)
    ))
}

/// Opens the peer of `spec` with a fresh pool directory in `cfg.pool_dir`.
pub fn open_peer(spec: &str, cfg: &VariantConfig) -> Result<Instance> {
    let p = PeerSpec::parse(spec)?;
    if !p.lib.is_file() {
        return Err(BenchError::Unavailable {
            name: p.name.clone(),
            why: format!(
                "{} not found (build the peers with scripts/peers/build.sh)",
                p.lib.display()
            ),
        });
    }
    if std::env::var_os("PMEM_IS_PMEM_FORCE").is_none() {
        std::env::set_var("PMEM_IS_PMEM_FORCE", "1");
    }
    for (n, v) in &p.env {
        std::env::set_var(n, v);
    }
    let dir = peer_dir(&cfg.pool_dir, &p.name, std::process::id());
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).map_err(|source| BenchError::Io {
        path: dir.display().to_string(),
        source,
    })?;
    let pool_path = if p.pool_is_dir {
        dir.clone()
    } else {
        dir.join("pool")
    };
    // This process was forked from the harness (`isolate`): the heap memory
    // the harness had freed is resident here, and a peer allocating through
    // glibc reuses it without growing RssAnon (10 M-record FPTrees measured 0.08
    // B/record in a run with reloads, 1.33 in one without). Handed back first.
    release_free_heap();
    let rss_growth = growth_since(rss_anon_bytes);
    let heap_growth = growth_since(heap_in_use_bytes);
    let opts = TreeOptions {
        key_size: cfg.key_len,
        value_size: cfg.value_size,
        pool_path: pool_path.clone(),
        pool_size: p.pool_bytes(cfg),
        num_threads: cfg.threads.max(1),
    };
    let mut tree = match PiBenchTree::open(&p.lib, p.layout, &opts, &p.name) {
        Ok(t) => t,
        Err(e) => {
            let _ = std::fs::remove_dir_all(&dir);
            return Err(BenchError::Unavailable {
                name: p.name.clone(),
                why: e.to_string(),
            });
        }
    };
    if let Some(k) = p.keys {
        tree.set_key_order(k);
    }
    let layout = tree.layout();
    let slots = tree
        .vtable_slots()
        .map_or("named".to_string(), |s| format!("{s} slots"));
    let keys = match tree.key_order() {
        KeyOrder::NativeU64 => "8-byte keys as native integers",
        KeyOrder::NativeI64 => "8-byte keys as native signed integers (sign bit flipped)",
        KeyOrder::Bytes => "keys as bytes",
    };
    let label = format!(
        "PiBench wrapper {} ({} layout, vtable {}; {keys})",
        p.lib.display(),
        layout.name(),
        slots
    );
    let d2 = dir.clone();
    let tree = Arc::new(tree);
    let counted = tree.clone();
    let mut inst = Instance::new(
        tree,
        &p.name,
        format!(
            "pool in {} (PMDK: PMEM_IS_PMEM_FORCE={}): survives a process crash if the index is correct, not power loss (tmpfs is DRAM)",
            pool_path.display(),
            std::env::var("PMEM_IS_PMEM_FORCE").unwrap_or_default()
        ),
        label,
        "the published index's own guarantees; pool on tmpfs".into(),
        Box::new(move || {
            let (rss, heap) = (rss_growth(), heap_growth());
            MemoryReport {
                dram_bytes: peer_dram(rss, heap),
                pm_bytes: Some(mapped_rss_bytes(&d2).unwrap_or_else(|| allocated_bytes(&d2))),
                dram_source: "malloc growth (RssAnon if over 2x)",
                pm_source: "pool pages touched",
                pool_huge_share: None,
                dram_parts: [("rss_anon", rss), ("malloc", heap)]
                    .into_iter()
                    .filter_map(|(n, v)| Some((n, v?)))
                    .collect(),
            }
        }),
        vec![dir],
    );
    // A counting build (scripts/peers: lib*_count.so) counts the flush
    // instructions of its own code; PMDK's flushes for it are counted by the
    // ferrite binary's libpmem interposers. Both, or nothing.
    if counted.own_flushes().is_some() {
        inst.flushed_lines = Some(Box::new(move || {
            let own = counted.own_flushes()?;
            Some(own + pmdk_flushes().map_or(0, |(lines, _)| lines))
        }));
    }
    Ok(inst)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What the harness freed is handed back before a peer's DRAM is
    /// measured: freed heap blocks stop counting as resident.
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    #[test]
    fn freed_heap_is_handed_back_before_a_peer_is_measured() {
        // A thread of its own: its arena holds only these blocks.
        std::thread::spawn(|| {
            let blocks: Vec<Box<[u8; 4000]>> =
                (0..20_000).map(|i| Box::new([i as u8; 4000])).collect();
            // One block in 64 kept: the freed ones between them cannot be
            // trimmed off the top of the heap by free() itself.
            let keep: Vec<_> = blocks.into_iter().step_by(64).collect();
            let before = rss_anon_bytes().unwrap();
            release_free_heap();
            let after = rss_anon_bytes().unwrap();
            // About 78 MB were freed.
            assert!(
                before.saturating_sub(after) >= 40 << 20,
                "RssAnon {before} -> {after}"
            );
            assert_eq!(keep.len(), 20_000usize.div_ceil(64));
        })
        .join()
        .unwrap();
    }

    #[test]
    fn specs_parse_with_options() {
        let p = PeerSpec::parse("pibench:/w/libpactree_pmem.so?pool=dir&env=A=1&name=pac").unwrap();
        assert_eq!(p.lib, PathBuf::from("/w/libpactree_pmem.so"));
        assert!(p.pool_is_dir);
        assert_eq!(p.env, vec![("A".to_string(), "1".to_string())]);
        assert_eq!(p.name, "pac");
        assert_eq!(p.pool_size, None);
        let p = PeerSpec::parse("pibench:/w/libroart_dcmm.so?pool_size=6G").unwrap();
        assert_eq!(p.pool_size, Some(6 << 30));
        assert!(PeerSpec::parse("pibench:/w/x.so?pool_size=lots").is_err());
        assert_eq!(p.layout, None);
        let p = PeerSpec::parse("pibench-ep2:/w/libfptree_pmem.so?keys=bytes").unwrap();
        assert_eq!(p.layout, Some(Layout::Ep2));
        assert_eq!(p.keys, Some(KeyOrder::Bytes));
        assert_eq!(p.name, "fptree_pmem");
        assert!(PeerSpec::parse("pibench:/w/x.so?frobnicate").is_err());
        assert!(PeerSpec::parse("pibench:").is_err());
        assert!(is_peer("pibench-optiql:/x.so") && !is_peer("ferrite"));
    }

    #[test]
    fn a_pool_per_record_grows_with_the_run_and_never_below_the_default() {
        let mut cfg = VariantConfig {
            pool_dir: std::env::temp_dir(),
            pool_path: None,
            pool_size: 0,
            max_records: 12_000_000,
            key_len: 8,
            value_size: 8,
            reopen: false,
            redb_load_batch: 1,
            threads: 1,
        };
        let p =
            PeerSpec::parse("pibench:/w/libroart_pmdk.so?keys=bytes&pool_per_record=1K").unwrap();
        assert_eq!(p.pool_per_record, Some(1024));
        // 12 M records of 1 KiB: above the harness's estimate.
        assert_eq!(p.pool_bytes(&cfg), 12_000_000 * 1024);
        assert!(cfg.pool_bytes() < 12_000_000 * 1024);
        // Few records: the 1 GiB minimum.
        cfg.max_records = 1000;
        assert_eq!(p.pool_bytes(&cfg), 1 << 30);
        // Without the option, the estimate (at least 1 GiB); pool_size wins.
        cfg.max_records = 100_000_000;
        let plain = PeerSpec::parse("pibench:/w/x.so").unwrap();
        assert_eq!(plain.pool_bytes(&cfg), cfg.pool_bytes());
        let fixed = PeerSpec::parse("pibench:/w/x.so?pool_size=2G&pool_per_record=1K").unwrap();
        assert_eq!(fixed.pool_bytes(&cfg), 2 << 30);
        assert!(PeerSpec::parse("pibench:/w/x.so?pool_per_record=much").is_err());
    }

    #[test]
    fn touched_pool_pages_are_counted() {
        let dir = std::env::temp_dir().join(format!("ferrite-peers-rss-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let f = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .open(dir.join("pool"))
            .unwrap();
        f.set_len(64 << 20).unwrap();
        use std::os::fd::AsRawFd;
        // SAFETY: a fresh shared mapping of a 64 MiB file, unmapped below.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                64 << 20,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                f.as_raw_fd(),
                0,
            )
        };
        assert_ne!(p, libc::MAP_FAILED);
        let before = mapped_rss_bytes(&dir).unwrap();
        // Touch 1 MiB of it.
        // SAFETY: within the mapping.
        unsafe { std::ptr::write_bytes(p as *mut u8, 1, 1 << 20) };
        let after = mapped_rss_bytes(&dir).unwrap();
        // SAFETY: the mapping made above.
        unsafe { libc::munmap(p, 64 << 20) };
        assert!(
            after - before >= 1 << 20 && after < 8 << 20,
            "{before} -> {after}"
        );
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn a_dead_peers_pool_directories_are_removed_and_no_others() {
        let d = std::env::temp_dir().join(format!("ferrite-peers-rm-{}", std::process::id()));
        std::fs::create_dir_all(&d).unwrap();
        let mine = peer_dir(&d, "utree", 4242);
        let other = peer_dir(&d, "utree", 42424);
        let foreign = d.join("ferrite-bufbench-4242");
        for p in [&mine, &other, &foreign] {
            std::fs::create_dir_all(p).unwrap();
            std::fs::write(p.join("pool"), b"x").unwrap();
        }
        remove_peer_dirs(&d, 4242);
        assert!(!mine.exists());
        assert!(other.exists() && foreign.exists());
        let _ = std::fs::remove_dir_all(&d);
    }

    #[test]
    fn a_missing_library_is_unavailable_not_a_crash() {
        let cfg = VariantConfig {
            pool_dir: std::env::temp_dir(),
            pool_path: None,
            pool_size: 0,
            max_records: 10,
            key_len: 8,
            value_size: 8,
            reopen: false,
            redb_load_batch: 1,
            threads: 1,
        };
        assert!(matches!(
            open_peer("pibench:/nonexistent/libx.so", &cfg),
            Err(BenchError::Unavailable { .. })
        ));
    }
}
