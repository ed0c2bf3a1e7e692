//! The buffer manager without a data structure: pages allocated, written and
//! logged through operations, under every design, with working sets that
//! force DRAM and PM eviction; then a process-crash restart (the pool image as
//! the CPU saw it) and a clean close.

use std::sync::Arc;

use ferrite_buffer::{
    BufferConfig, BufferManager, Ctx, Design, Hint, MemBackend, Mode, NoStructures, SsdBackend,
};
use ferrite_pm::{Pool, PoolOptions};

const KIND: u8 = 16;

fn cfg(design: Design) -> BufferConfig {
    let ps = 4096u64;
    let mut c = design.config_paged(4096, 8 * ps, 8 * (ps + 64), 4096 * ps);
    if design == Design::PmDirect {
        c.pm_frames = 96;
    }
    if design == Design::MainMemory {
        c.dram_bytes = 128 * ps;
    }
    c.pm_frames = if c.pm_frames > 0 && design != Design::PmDirect {
        8
    } else {
        c.pm_frames
    };
    c.wal_segment_bytes = 1 << 20;
    c.pm_eviction_batch = 2;
    // Remember every denial: a page is admitted when evicted a second time.
    c.admission_set_size = 256;
    c
}

fn open(
    pool: &Pool,
    ssd: &Arc<MemBackend>,
    c: &BufferConfig,
) -> (Arc<BufferManager>, ferrite_buffer::RestartReport) {
    let backend: Option<Arc<dyn SsdBackend>> =
        (c.ssd_pages > 0).then(|| ssd.clone() as Arc<dyn SsdBackend>);
    BufferManager::open(pool, "bm", backend, c.clone(), Arc::new(NoStructures)).unwrap()
}

/// A process crash (the pool as the CPU saw it, the SSD files as written),
/// then a restart on the same configuration.
fn crash_reopen(
    bm: Arc<BufferManager>,
    pool: Pool,
    ssd: &Arc<MemBackend>,
    c: &BufferConfig,
) -> (Pool, Arc<BufferManager>, ferrite_buffer::RestartReport) {
    let img = pool.snapshot();
    drop(bm);
    drop(pool);
    let pool = Pool::open_image(img, &PoolOptions::default()).unwrap();
    let (bm, rep) = open(&pool, ssd, c);
    (pool, bm, rep)
}

fn pattern(pid: u64, version: u64) -> Vec<u8> {
    (0..200)
        .map(|i| (pid * 31 + version * 7 + i) as u8)
        .collect()
}

/// Allocates `n` pages and writes a pattern at two places of each.
fn fill(bm: &BufferManager, n: u64) -> Vec<u64> {
    let mut pids = Vec::new();
    for _ in 0..n {
        // A single operation: its record commits (and is forced at finish).
        let mut op = bm.begin_op(Ctx::Auto, 2, 0).unwrap();
        let mut meta = op.fix_meta(Mode::Exclusive).unwrap();
        let mut g = op.alloc_page(&mut meta, KIND).unwrap();
        let pid = g.pid();
        g.write(100, &pattern(pid, 1)).unwrap();
        g.write(3000, &pattern(pid, 2)).unwrap();
        op.log(&mut [&mut meta, &mut g], Some((0, b"x"))).unwrap();
        drop(g);
        drop(meta);
        op.finish().unwrap();
        pids.push(pid);
    }
    pids
}

fn update(bm: &BufferManager, pid: u64, version: u64) {
    let mut op = bm.begin_op(Ctx::Auto, 1, 0).unwrap();
    let mut g = op.fix(pid, Mode::Exclusive, Hint::Leaf).unwrap();
    g.write(3000, &pattern(pid, version)).unwrap();
    op.log(&mut [&mut g], Some((0, b"x"))).unwrap();
    drop(g);
    op.finish().unwrap();
}

fn check(bm: &BufferManager, pids: &[u64], v2: &dyn Fn(u64) -> u64) {
    for &pid in pids {
        // Readers start shared and retry exclusive on a line fault.
        let mut g = bm.fix(pid, Mode::Shared, Hint::Leaf).unwrap();
        let got = match g.read(100, 200) {
            Ok(b) => b.to_vec(),
            Err(e) if e.is_fault() => {
                drop(g);
                g = bm.fix(pid, Mode::Exclusive, Hint::Leaf).unwrap();
                g.read(100, 200).unwrap().to_vec()
            }
            Err(e) => panic!("{e}"),
        };
        assert_eq!(got, pattern(pid, 1), "page {pid} at 100");
        drop(g);
        let mut g = bm.fix(pid, Mode::Exclusive, Hint::Leaf).unwrap();
        assert_eq!(
            g.read(3000, 200).unwrap(),
            &pattern(pid, v2(pid))[..],
            "page {pid} at 3000"
        );
    }
}

#[test]
fn pages_survive_eviction_restart_and_clean_close_in_every_design() {
    for design in Design::ALL {
        let c = cfg(design);
        let pool =
            Pool::create_volatile(c.pool_bytes() + (8 << 20), &PoolOptions::default()).unwrap();
        let ssd = Arc::new(MemBackend::new());
        let (bm, rep) = open(&pool, &ssd, &c);
        assert!(rep.created, "{}", design.name());
        let pids = fill(&bm, 60);
        for (i, &p) in pids.iter().enumerate() {
            if i % 3 == 0 {
                update(&bm, p, 10 + p);
            }
        }
        let v2 = |p: u64| {
            if pids.iter().position(|&x| x == p).unwrap() % 3 == 0 {
                10 + p
            } else {
                2
            }
        };
        check(&bm, &pids, &v2);
        let s = bm.stats();
        eprintln!("{}: {s:?}", design.name());
        if c.evict_dram && c.dram_bytes > 0 {
            assert!(s.dram_evictions > 0, "{}: no DRAM eviction", design.name());
        }
        if c.pm_frames > 0 && c.ssd_pages > 0 {
            assert!(s.pm_evictions > 0, "{}: no PM eviction", design.name());
        }
        // A process crash: the pool as the CPU saw it, the SSD files as written.
        let (pool, bm, rep) = crash_reopen(bm, pool, &ssd, &c);
        assert!(
            !rep.created && rep.records_redone > 0,
            "{}: {rep:?}",
            design.name()
        );
        check(&bm, &pids, &v2);
        // A clean close: the next open redoes nothing.
        bm.close().unwrap();
        let (_pool, bm, rep) = crash_reopen(bm, pool, &ssd, &c);
        assert_eq!(rep.records_redone, 0, "{}: {rep:?}", design.name());
        check(&bm, &pids, &v2);
    }
}

/// After pages were written through the three tiers, `write_pm_to_ssd`
/// settles the write-back PM owes SSD: a read phase that evicts PM pages
/// then writes nothing to SSD, across a process crash (the clean flags are
/// persistent), with every page intact. The same read phase without it
/// writes the pages PM evicts (the control: the count the test asserts can
/// be non-zero).
#[test]
fn pages_written_from_pm_to_ssd_leave_readers_no_write_back() {
    for settle in [false, true] {
        let c = cfg(Design::ThreeTier);
        let pool =
            Pool::create_volatile(c.pool_bytes() + (8 << 20), &PoolOptions::default()).unwrap();
        let ssd = Arc::new(MemBackend::new());
        let (bm, _) = open(&pool, &ssd, &c);
        let pids = fill(&bm, 60);
        // The last pages written are in DRAM and PM, newer than SSD.
        for &p in &pids[40..] {
            update(&bm, p, 10 + p);
        }
        let v2 = |p: u64| {
            if pids.iter().position(|&x| x == p).unwrap() >= 40 {
                10 + p
            } else {
                2
            }
        };
        if settle {
            let n = bm.write_pm_to_ssd().unwrap();
            assert!(n > 0, "nothing was newer in PM");
            assert_eq!(bm.write_pm_to_ssd().unwrap(), 0, "written twice");
        } else {
            bm.checkpoint().unwrap();
        }
        let (_pool, bm, rep) = crash_reopen(bm, pool, &ssd, &c);
        assert_eq!(rep.records_redone, 0, "{rep:?}");
        // Pages leaving DRAM are admitted to PM the second time: read
        // everything a few times so that PM evicts.
        for _ in 0..3 {
            check(&bm, &pids, &v2);
        }
        let s = bm.stats();
        assert!(s.pm_evictions > 0, "the reads evicted no PM page: {s:?}");
        if settle {
            assert_eq!(s.ssd_writes, 0, "{s:?}");
        } else {
            assert!(s.ssd_writes > 0, "{s:?}");
        }
    }
}

/// Mini pages (three-tier: a leaf fixed from PM gets a 16-line mini frame):
/// lines loaded one to three at a time in a random order land in line order
/// in the mini frame, lines written meanwhile keep their dirty bit when they
/// move, and the 17th line promotes the page to a full frame in the middle
/// of the operation; every read is checked against the page's bytes as the
/// test wrote them, and after the pages were evicted and the process crashed,
/// every page is read back whole. A mini frame that put a line in the wrong
/// slot, lost a dirty bit or copied the wrong PM line fails it.
#[test]
fn mini_pages_hold_lines_loaded_in_any_order() {
    let ps = 4096usize;
    let lines = ps / 64;
    let mut c =
        Design::ThreeTier.config_paged(ps, 8 * ps as u64, 64 * (ps as u64 + 64), 4096 * ps as u64);
    c.wal_segment_bytes = 1 << 20;
    // Every page evicted from DRAM goes to PM, so the next fix loads lines.
    c.techniques.admission_set = false;
    let pool = Pool::create_volatile(c.pool_bytes() + (8 << 20), &PoolOptions::default()).unwrap();
    let ssd = Arc::new(MemBackend::new());
    let (bm, _) = open(&pool, &ssd, &c);
    let mut rng = 0x9e37_79b9_7f4a_7c15u64;
    let mut next = move || {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        rng
    };
    // Pages with every byte after the first line set, 24 of them (DRAM holds 8).
    let mut pages: Vec<(u64, Vec<u8>)> = Vec::new();
    for _ in 0..24 {
        let mut op = bm.begin_op(Ctx::Auto, 2, 0).unwrap();
        let mut meta = op.fix_meta(Mode::Exclusive).unwrap();
        let mut g = op.alloc_page(&mut meta, KIND).unwrap();
        let body: Vec<u8> = (64..ps).map(|_| next() as u8).collect();
        g.write(64, &body).unwrap();
        op.log(&mut [&mut meta, &mut g], Some((0, b"x"))).unwrap();
        let pid = g.pid();
        drop(g);
        drop(meta);
        op.finish().unwrap();
        pages.push((pid, body));
    }
    let before = bm.stats();
    for round in 0..8 {
        for (pid, body) in pages.iter_mut() {
            let mut op = bm.begin_op(Ctx::Auto, 1, 0).unwrap();
            let mut g = op.fix(*pid, Mode::Exclusive, Hint::Leaf).unwrap();
            // One to four line ranges per operation, so a mini frame holds
            // dirty lines when later operations load lines below them; past
            // 16 lines the page is promoted.
            for _ in 0..(1 + next() % 4) {
                let first = 1 + (next() as usize) % (lines - 1);
                let n = (1 + (next() as usize) % 3).min(lines - first);
                let off = first * 64 + (next() as usize) % 16;
                let len = n * 64 - (off - first * 64);
                if next() % 4 == 0 {
                    let bytes: Vec<u8> = (0..len).map(|_| next() as u8).collect();
                    g.write(off, &bytes).unwrap();
                    body[off - 64..off - 64 + len].copy_from_slice(&bytes);
                } else {
                    assert_eq!(
                        g.read(off, len).unwrap(),
                        &body[off - 64..off - 64 + len],
                        "round {round}, page {pid}, bytes {off}+{len}"
                    );
                }
            }
            op.log(&mut [&mut g], Some((0, b"x"))).unwrap();
            drop(g);
            op.finish().unwrap();
        }
    }
    let s = bm.stats();
    assert!(
        s.dram_line_loads > before.dram_line_loads,
        "no line loads: {s:?}"
    );
    assert!(
        s.mini_promotions > before.mini_promotions,
        "no promotion: {s:?}"
    );
    // A crash and restart (redo from the log), then a clean close (the
    // frames' dirty lines written back, nothing to redo): every page whole
    // after each.
    let check = |bm: &BufferManager, when: &str| {
        for (pid, body) in &pages {
            let mut g = bm.fix(*pid, Mode::Exclusive, Hint::Whole).unwrap();
            assert_eq!(g.read(64, ps - 64).unwrap(), &body[..], "page {pid} {when}");
        }
    };
    let (pool, bm, _) = crash_reopen(bm, pool, &ssd, &c);
    check(&bm, "after a crash");
    bm.close().unwrap();
    let (_pool, bm, rep) = crash_reopen(bm, pool, &ssd, &c);
    assert_eq!(rep.records_redone, 0, "{rep:?}");
    check(&bm, "after a clean close");
}
