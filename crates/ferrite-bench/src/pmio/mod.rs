//! PM I/O benchmarks (`ferrite bench log|page|inplace|interleave`), reproducing
//! the thesis's figures as ratios on this machine: `log` (Fig. 8), `page`
//! (Fig. 7), `inplace` (Fig. 10), `interleave` (Fig. 12).
//!
//! Every cell runs single-threaded on a pool file (normally in `/dev/shm`) and
//! reports Mops/s beside the hardware-independent costs: persist barriers and
//! flushed cache lines per operation, from the thread's persist counters.

use std::cell::Cell;
use std::path::PathBuf;

use ferrite_pm::clock::CpuTimer;
use ferrite_pm::rng::SplitMix;
use ferrite_pm::{persist, Pool, TempPool};
use ferrite_pmio::inplace::{InplaceArray, InplaceConfig, InplaceMethod};
use ferrite_pmio::interleave::{prefetch, Interleaver};
use ferrite_pmio::log::{Log, LogConfig, LogKind, PmLog};
use ferrite_pmio::page::{calibrate, DirtyMask, Method, PageStore, PageStoreConfig};
use ferrite_pmio::{PmioError, Result};
use ferrite_report::chart::{self, Series};
use ferrite_report::{BenchResult, Report};

use crate::{env, BenchOutput};

/// Settings shared by the benchmark families.
#[derive(Debug, Clone)]
pub struct BenchOpts {
    /// Operations per cell (`None`: the family's default).
    pub ops: Option<u64>,
    /// Directory for the pool file.
    pub pool_dir: PathBuf,
    /// Fewer parameter points (smoke tests).
    pub quick: bool,
    /// Repetitions per cell; the median is reported (the machine is shared).
    pub reps: usize,
    /// Threads for the multi-threaded page propagation cells (1 = none).
    pub threads: usize,
}

/// The results side by side: one row per (bench, param), one Mops/s column per
/// variant, in first-seen order.
pub fn pivot(r: &Report) -> String {
    use std::fmt::Write as _;
    let param = |x: &BenchResult| x.param.as_ref().map_or("-".into(), |p| p.to_string());
    let mut variants: Vec<&str> = Vec::new();
    let mut rows: Vec<(&str, String, u32)> = Vec::new();
    for x in &r.results {
        if !variants.contains(&x.variant.as_str()) {
            variants.push(&x.variant);
        }
        let key = (x.bench.as_str(), param(x), x.threads);
        if !rows.contains(&key) {
            rows.push(key);
        }
    }
    let w = variants.iter().map(|v| v.len().max(8)).collect::<Vec<_>>();
    let mut out = String::new();
    let _ = write!(out, "{:<16} {:>6} {:>3}", "bench", "param", "thr");
    for (v, w) in variants.iter().zip(&w) {
        let _ = write!(out, "  {v:>w$}");
    }
    out.push_str("   (Mops/s)\n");
    for (bench, p, thr) in &rows {
        let _ = write!(out, "{bench:<16} {p:>6} {thr:>3}");
        for (v, w) in variants.iter().zip(&w) {
            let cell = r
                .results
                .iter()
                .find(|x| {
                    x.bench == *bench && x.variant == *v && x.threads == *thr && param(x) == *p
                })
                .map_or("-".to_string(), |x| format!("{:.3}", x.mops));
            let _ = write!(out, "  {cell:>w$}");
        }
        out.push('\n');
    }
    out
}

/// Mops/s, fences/op, flushed lines/op, non-temporal bytes/op.
/// (Mops/s, fences, flushed lines, nt bytes, repeated-line write-backs) per op.
type M = (f64, f64, f64, f64, f64);

/// Runs `n` operations and returns their [`M`].
fn measure(n: u64, mut op: impl FnMut(u64) -> Result<()>) -> Result<M> {
    let before = persist::thread_stats();
    let t = CpuTimer::start();
    for i in 0..n {
        op(i)?;
    }
    let secs = t.secs();
    let d = persist::thread_stats().since(before);
    Ok((
        n as f64 / secs / 1e6,
        d.fences as f64 / n as f64,
        d.flushed_lines as f64 / n as f64,
        d.nt_bytes as f64 / n as f64,
        d.repeated_lines as f64 / n as f64,
    ))
}

/// Runs `reps` measurements (each after `setup`) and keeps the median by Mops/s.
fn median(
    reps: usize,
    mut setup: impl FnMut() -> Result<()>,
    mut run: impl FnMut() -> Result<M>,
) -> Result<M> {
    let mut v = Vec::new();
    for _ in 0..reps.max(1) {
        setup()?;
        v.push(run()?);
    }
    v.sort_by(|a, b| a.0.total_cmp(&b.0));
    Ok(v[v.len() / 2])
}

fn cell(bench: &str, variant: &str, param: usize, (mops, f, l, nt, rp): M) -> BenchResult {
    let r = BenchResult::new(bench, variant, Some(param.into()), 1, mops)
        .with("fences_per_op", f)
        .with("lines_per_op", l)
        .with("repeated_lines_per_op", rp);
    if nt > 0.0 {
        r.with("nt_bytes_per_op", nt)
    } else {
        r
    }
}

/// Runs one family: `log`, `page`, `inplace` or `interleave`.
pub fn run(which: &str, o: &BenchOpts) -> Result<BenchOutput> {
    match which {
        "log" => bench_log(o),
        "page" => bench_page(o),
        "inplace" => bench_inplace(o),
        "interleave" => bench_interleave(o),
        _ => Err(PmioError::Invalid(format!(
            "unknown benchmark {which:?} (log, page, inplace, interleave)"
        ))),
    }
}

fn ratio(r: &Report, bench: &str, a: &str, b: &str, param: usize) -> Option<f64> {
    let get = |v: &str| {
        r.results
            .iter()
            .find(|x| x.bench == bench && x.variant == v && x.param_f64() == Some(param as f64))
            .map(|x| x.mops)
    };
    Some(get(a)? / get(b)?)
}

// ----- Fig. 8: logs ------------------------------------------------------------------

fn bench_log(o: &BenchOpts) -> Result<BenchOutput> {
    let ops = o.ops.unwrap_or(100_000);
    let sizes: Vec<usize> = if o.quick {
        vec![16, 56, 64, 120, 128, 256]
    } else {
        (1..=32).map(|i| i * 8).collect()
    };
    let max = *sizes.iter().max().unwrap_or(&8);
    let seg = ops as usize * LogKind::Classic.entry_bytes(true, max) + 4096;
    let tp = TempPool::create(&o.pool_dir, "log", 2 * seg as u64 + (64 << 20))?;
    let pool = tp.pool();
    let mut r = env::report("log", &o.pool_dir);
    r.environment
        .suite
        .insert("timing".into(), "thread CPU time, median of reps".into());
    for padded in [false, true] {
        let bench = if padded { "padded" } else { "unpadded" };
        for kind in LogKind::ALL {
            let name = format!("bench-{}-{padded}", kind.name());
            let cfg = LogConfig {
                kind,
                padded,
                segment_bytes: seg,
            };
            let mut log = PmLog::open_or_create(pool, &name, cfg)?;
            for &size in &sizes {
                let mut payload: Vec<u8> = (0..size).map(|i| (i * 29 + 7) as u8).collect();
                let log = std::cell::RefCell::new(&mut log);
                let m = median(
                    o.reps,
                    || log.borrow_mut().reset(),
                    || {
                        let mut l = log.borrow_mut();
                        measure(ops, |i| {
                            payload[0] = i as u8;
                            l.append(&payload).map(|_| ())
                        })
                    },
                )?;
                r.results.push(cell(bench, kind.name(), size, m));
            }
            if padded {
                // Group append: 8 entries of 64 bytes per call, the barriers of
                // one append (the WAL's group commit).
                let payload = vec![0x5au8; 64];
                let group: Vec<&[u8]> = (0..8).map(|_| payload.as_slice()).collect();
                let log = std::cell::RefCell::new(&mut log);
                let (mops, f, l, nt, rp) = median(
                    o.reps,
                    || log.borrow_mut().reset(),
                    || {
                        let mut lg = log.borrow_mut();
                        measure(ops / 8, |_| lg.append_group(&group).map(|_| ()))
                    },
                )?;
                r.results.push(cell(
                    "group-of-8",
                    kind.name(),
                    64,
                    (mops * 8.0, f / 8.0, l / 8.0, nt / 8.0, rp / 8.0),
                ));
            }
            drop(log);
            pool.delete_object(&name)?;
        }
    }
    for padded in ["unpadded", "padded"] {
        if let Some(x) = ratio(&r, padded, "poplog", "classic", 64) {
            r.notes.push(format!(
                "{padded} 64-byte entries: poplog / classic = {x:.2}x"
            ));
        }
    }
    for kind in LogKind::ALL {
        let v: Vec<f64> = sizes
            .iter()
            .filter_map(|&s| {
                let p = ratio_cross(&r, kind.name(), s)?;
                Some(p)
            })
            .collect();
        if !v.is_empty() {
            let mean = v.iter().sum::<f64>() / v.len() as f64;
            let min = v.iter().cloned().fold(f64::INFINITY, f64::min);
            r.notes.push(format!(
                "{}: padded / unpadded mean {mean:.2}x, min {min:.2}x over {} sizes",
                kind.name(),
                v.len()
            ));
        }
    }
    let svg = chart::line_chart(
        "Log append throughput over entry size (thesis Fig. 8)",
        "entry payload bytes",
        "M appends/s",
        &r.series_by_param(|x| !x.bench.starts_with("group")),
        false,
    );
    env::finish(&mut r);
    Ok(BenchOutput {
        report: r,
        svg,
        extra_cols: vec!["fences_per_op", "lines_per_op", "repeated_lines_per_op"],
    })
}

fn ratio_cross(r: &Report, variant: &str, size: usize) -> Option<f64> {
    let get = |b: &str| {
        r.results
            .iter()
            .find(|x| x.bench == b && x.variant == variant && x.param_f64() == Some(size as f64))
            .map(|x| x.mops)
    };
    Some(get("padded")? / get("unpadded")?)
}

// ----- Fig. 7: page propagation ------------------------------------------------------

fn bench_page(o: &BenchOpts) -> Result<BenchOutput> {
    let ops = o.ops.unwrap_or(40_000);
    let page_size = 16 << 10;
    let lines = page_size / 64;
    let pages = 1024usize;
    let tp = TempPool::create(
        &o.pool_dir,
        "page",
        ((pages + 80) * (page_size + 64)) as u64 + (64 << 20),
    )?;
    let pool = tp.pool();
    let mut r = env::report("page", &o.pool_dir);
    r.environment
        .suite
        .insert("timing".into(), "thread CPU time, median of reps".into());
    let model = calibrate(pool, "calibration", page_size, 2000)?;
    pool.delete_object("calibration")?;
    let mut st = PageStore::open_or_create(
        pool,
        "bench-pages",
        PageStoreConfig {
            page_size,
            slots: pages + 1,
        },
    )?;
    st.set_cost_model(model);
    let mut page = vec![0x3cu8; page_size];
    let all = DirtyMask::all(lines);
    for pid in 0..pages as u64 {
        st.write(pid, &page, &all, Method::Cow)?;
    }
    let dirty: Vec<usize> = if o.quick {
        vec![1, 16, 64, 256]
    } else {
        vec![
            1, 2, 4, 8, 12, 16, 20, 24, 28, 32, 40, 48, 64, 96, 128, 192, 256,
        ]
    };
    let mut crossover = None;
    for &d in &dirty {
        let mut mask = DirtyMask::default();
        for k in 0..d {
            mask.set(k * lines / d);
        }
        let mut best = Vec::new();
        for (variant, m) in [
            ("cow", Method::Cow),
            ("ulog", Method::MicroLog),
            ("auto", Method::Auto),
        ] {
            let mut rng = SplitMix(d as u64);
            let res = median(
                o.reps,
                || Ok(()),
                || {
                    measure(ops, |i| {
                        page[0] = i as u8;
                        st.write(rng.below(pages as u64), &page, &mask, m)
                            .map(|_| ())
                    })
                },
            )?;
            best.push(res.0);
            r.results.push(cell("flush", variant, d, res));
        }
        if crossover.is_none() && best[0] >= best[1] {
            crossover = Some(d);
        }
    }
    r.notes.push(format!(
        "measured crossover: CoW is at least as fast from {} dirty lines of {lines}",
        crossover.map_or("(never)".to_string(), |d| d.to_string())
    ));
    r.notes.push(format!(
        "calibrated cost model: cow {:.0} ns, ulog {:.0} + {:.1} ns/line -> crossover {:.1} lines",
        model.cow_ns,
        model.ulog_base_ns,
        model.ulog_line_ns,
        model.crossover()
    ));
    if o.threads > 1 {
        drop(st);
        page_threads(o, pool, &mut r, &dirty, ops, page_size)?;
    }
    r.environment
        .suite
        .insert("page_bytes".into(), page_size.into());
    let series: Vec<Series> = r
        .series_by_param(|x| x.threads == 1)
        .into_iter()
        .map(|mut s| {
            s.points.iter_mut().for_each(|p| p.1 *= 1000.0);
            s
        })
        .collect();
    let svg = chart::line_chart(
        "16 KiB page propagation over dirty cache lines (thesis Fig. 7)",
        "dirty cache lines (of 256)",
        "k pages/s",
        &series,
        true,
    );
    env::finish(&mut r);
    Ok(BenchOutput {
        report: r,
        svg,
        extra_cols: vec!["fences_per_op", "lines_per_op", "nt_bytes_per_op"],
    })
}

/// Fig. 7b: `threads` threads, each propagating its own share of the pages
/// through its own store (and micro log). Wall-clock time over all threads.
fn page_threads(
    o: &BenchOpts,
    pool: &Pool,
    r: &mut Report,
    dirty: &[usize],
    ops: u64,
    page_size: usize,
) -> Result<()> {
    let n = o.threads;
    let lines = page_size / 64;
    let per = (1024 / n).max(1);
    let page = vec![0x3cu8; page_size];
    let mut stores = Vec::new();
    for t in 0..n {
        let mut st = PageStore::open_or_create(
            pool,
            &format!("bench-pages-t{t}"),
            PageStoreConfig {
                page_size,
                slots: per + 1,
            },
        )?;
        for pid in 0..per as u64 {
            st.write(pid, &page, &DirtyMask::all(lines), Method::Cow)?;
        }
        stores.push(st);
    }
    let mut crossover = None;
    for &d in dirty {
        let mut mask = DirtyMask::default();
        for k in 0..d {
            mask.set(k * lines / d);
        }
        let mut rates = [0.0f64; 2];
        for (vi, (variant, m)) in [("cow", Method::Cow), ("ulog", Method::MicroLog)]
            .into_iter()
            .enumerate()
        {
            let stores = std::cell::RefCell::new(&mut stores);
            let res = median(
                o.reps,
                || Ok(()),
                || {
                    let mut stores = stores.borrow_mut();
                    let t0 = std::time::Instant::now();
                    let costs = std::thread::scope(|sc| {
                        let hs: Vec<_> = stores
                            .iter_mut()
                            .enumerate()
                            .map(|(t, st)| {
                                let page = &page;
                                sc.spawn(move || -> Result<persist::PersistStats> {
                                    let mut rng = SplitMix((t * 1000 + d) as u64);
                                    let before = persist::thread_stats();
                                    let mut pg = page.clone();
                                    for i in 0..ops / n as u64 {
                                        pg[0] = i as u8;
                                        st.write(rng.below(per as u64), &pg, &mask, m)?;
                                    }
                                    Ok(persist::thread_stats().since(before))
                                })
                            })
                            .collect();
                        hs.into_iter()
                            .map(|h| {
                                h.join().unwrap_or_else(|_| {
                                    Err(PmioError::Invalid("bench thread panicked".into()))
                                })
                            })
                            .collect::<Result<Vec<_>>>()
                    })?;
                    let secs = t0.elapsed().as_secs_f64();
                    let total = costs
                        .into_iter()
                        .fold(persist::PersistStats::default(), |a, b| a + b);
                    let done = (ops / n as u64 * n as u64) as f64;
                    Ok((
                        done / secs / 1e6,
                        total.fences as f64 / done,
                        total.flushed_lines as f64 / done,
                        total.nt_bytes as f64 / done,
                        total.repeated_lines as f64 / done,
                    ))
                },
            )?;
            rates[vi] = res.0;
            let mut c = cell("flush", variant, d, res);
            c.threads = n as u32;
            r.results.push(c.with("timing", "wall"));
        }
        if crossover.is_none() && rates[0] >= rates[1] {
            crossover = Some(d);
        }
    }
    drop(stores);
    for t in 0..n {
        pool.delete_object(&format!("bench-pages-t{t}"))?;
    }
    r.notes.push(format!(
        "{n} threads (wall-clock): CoW is at least as fast from {} dirty lines",
        crossover.map_or("(never)".to_string(), |d| d.to_string())
    ));
    Ok(())
}

// ----- Fig. 10: in-place updates -----------------------------------------------------

fn bench_inplace(o: &BenchOpts) -> Result<BenchOutput> {
    let ops = o.ops.unwrap_or(1_000_000);
    let count = if o.quick { 1 << 16 } else { 1 << 20 };
    let sizes = [16usize, 32, 64];
    let log_seg = ops as usize * 128 + 4096;
    let tp = TempPool::create(
        &o.pool_dir,
        "inplace",
        (count * 192 + 2 * log_seg) as u64 + (64 << 20),
    )?;
    let pool = tp.pool();
    let mut r = env::report("inplace", &o.pool_dir);
    r.environment
        .suite
        .insert("timing".into(), "thread CPU time, median of reps".into());
    let mut sink = 0u64;
    for &vs in &sizes {
        for method in InplaceMethod::ALL {
            let name = format!("bench-{}-{vs}", method.name());
            let mut a = InplaceArray::open_or_create(
                pool,
                &name,
                InplaceConfig {
                    method,
                    value_size: vs,
                    count,
                    log_bytes: log_seg,
                },
            )?;
            let mut v: Vec<u8> = (0..vs).map(|i| (i * 13 + 1) as u8 | 0x80).collect();
            for pattern in ["sequential", "random"] {
                let mut rng = SplitMix(vs as u64);
                let a = std::cell::RefCell::new(&mut a);
                let m = median(
                    o.reps,
                    || a.borrow_mut().reset_log(),
                    || {
                        let mut a = a.borrow_mut();
                        measure(ops, |i| {
                            v[1] = i as u8;
                            let k = if pattern == "random" {
                                rng.below(count as u64) as usize
                            } else {
                                i as usize % count
                            };
                            a.update(k, &v)
                        })
                    },
                )?;
                r.results.push(cell(pattern, method.name(), vs, m));
            }
            let mut out = vec![0u8; vs];
            for pattern in ["read-sequential", "read-random"] {
                let mut rng = SplitMix(vs as u64 + 1);
                let m = median(
                    o.reps,
                    || Ok(()),
                    || {
                        measure(ops, |i| {
                            let k = if pattern == "read-random" {
                                rng.below(count as u64) as usize
                            } else {
                                i as usize % count
                            };
                            a.read(k, &mut out)?;
                            sink = sink.wrapping_add(out[1] as u64);
                            Ok(())
                        })
                    },
                )?;
                r.results.push(cell(pattern, method.name(), vs, m));
            }
            drop(a);
            pool.delete_object(&name)?;
            if method == InplaceMethod::Log {
                pool.delete_object(&format!("{name}.log"))?;
            }
        }
    }
    std::hint::black_box(sink);
    for pattern in ["sequential", "random"] {
        for vs in sizes {
            if let Some(x) = ratio(&r, pattern, "fam", "cow", vs) {
                r.notes
                    .push(format!("{pattern} {vs} B updates: fam / cow = {x:.2}x"));
            }
        }
    }
    let series = r.series_by_param(|x| !x.bench.starts_with("read"));
    let svg = chart::line_chart(
        "Failure-atomic in-place updates over value size (thesis Fig. 10)",
        "value bytes",
        "M updates/s",
        &series,
        true,
    );
    env::finish(&mut r);
    Ok(BenchOutput {
        report: r,
        svg,
        extra_cols: vec!["fences_per_op", "lines_per_op"],
    })
}

// ----- Fig. 12: interleaving -----------------------------------------------------------

/// FP-tree leaf as in the thesis's experiment: used bitmap, 32 one-byte
/// fingerprints, 32 key/value pairs; 576 bytes, line-aligned.
const LEAF: usize = 576;
const KV: usize = 64;

/// Reads an 8-byte word of the leaves' region.
///
/// # Safety
/// `p` must be 8-byte aligned and inside a live mapping.
#[inline(always)]
unsafe fn rd(p: *const u8) -> u64 {
    // SAFETY: forwarded caller guarantee.
    unsafe { std::ptr::read_volatile(p as *const u64) }
}

/// Writes an 8-byte word of the leaves' region.
///
/// # Safety
/// `p` must be 8-byte aligned and inside a live mapping.
#[inline(always)]
unsafe fn wr(p: *mut u8, v: u64) {
    // SAFETY: forwarded caller guarantee.
    unsafe { std::ptr::write_volatile(p as *mut u64, v) }
}

struct Leaves<'p> {
    pool: &'p Pool,
    base: *mut u8,
    n: u64,
    /// Slots claimed by operations in flight (volatile; the executor is
    /// single-threaded so a claim needs no atomics).
    claimed: Vec<Cell<u32>>,
}

impl Leaves<'_> {
    fn leaf(&self, k: u64) -> (usize, *mut u8) {
        let i = (k % self.n) as usize;
        // SAFETY: i < n leaves of the region.
        (i, unsafe { self.base.add(i * LEAF) })
    }

    /// Claims a free slot of leaf `i` (recycles a full leaf: benchmark only).
    fn claim(&self, i: usize, p: *mut u8) -> usize {
        // SAFETY: the used word of the leaf.
        let used = unsafe { rd(p) } as u32 | self.claimed[i].get();
        let used = if used == u32::MAX {
            // SAFETY: as above.
            unsafe { wr(p, 0) };
            self.pool.flush(p, 8);
            self.claimed[i].get()
        } else {
            used
        };
        let s = (!used).trailing_zeros() as usize;
        self.claimed[i].set(self.claimed[i].get() | 1 << s);
        s
    }

    fn write_kv(&self, p: *mut u8, s: usize, k: u64) {
        // SAFETY: slot s < 32 of an in-bounds leaf.
        unsafe {
            wr(p.add(KV + 16 * s), k);
            wr(p.add(KV + 16 * s + 8), k ^ 0x5555);
            *p.add(8 + s) = (k >> 56) as u8;
        }
        // SAFETY: as above.
        self.pool.flush(unsafe { p.add(KV + 16 * s) }, 16);
        // SAFETY: as above.
        self.pool.flush(unsafe { p.add(8 + s) }, 1);
    }

    fn publish(&self, i: usize, p: *mut u8, s: usize) {
        // SAFETY: the used word.
        unsafe { wr(p, rd(p) | 1 << s) };
        self.pool.flush(p, 8);
        self.claimed[i].set(self.claimed[i].get() & !(1 << s));
    }

    fn find(&self, p: *const u8, k: u64) -> Option<usize> {
        // SAFETY: the used word and fingerprints of an in-bounds leaf.
        let used = unsafe { rd(p) } as u32;
        let fp = (k >> 56) as u8;
        (0..32).find(|&s| {
            // SAFETY: as above.
            used >> s & 1 != 0 && unsafe { *p.add(8 + s) } == fp
        })
    }

    fn value_if(&self, p: *const u8, s: usize, k: u64) -> Option<u64> {
        // SAFETY: slot s of an in-bounds leaf.
        unsafe { (rd(p.add(KV + 16 * s)) == k).then(|| rd(p.add(KV + 16 * s + 8))) }
    }

    fn insert_plain(&self, k: u64) {
        let (i, p) = self.leaf(k);
        let s = self.claim(i, p);
        self.write_kv(p, s, k);
        self.pool
            .fence()
            .expect("benchmark pools are on tmpfs: fences cannot fail");
        self.publish(i, p, s);
        self.pool
            .fence()
            .expect("benchmark pools are on tmpfs: fences cannot fail");
    }

    fn lookup_plain(&self, k: u64) -> Option<u64> {
        let (_, p) = self.leaf(k);
        let s = self.find(p, k)?;
        self.value_if(p, s, k)
    }

    fn clear(&self) {
        for i in 0..self.n as usize {
            // SAFETY: the used word of leaf i.
            unsafe { wr(self.base.add(i * LEAF), 0) };
            self.claimed[i].set(0);
        }
    }
}

fn key(i: u64) -> u64 {
    SplitMix(i).next()
}

fn bench_interleave(o: &BenchOpts) -> Result<BenchOutput> {
    let ops = o.ops.unwrap_or(1_000_000);
    let n: u64 = if o.quick { 1 << 14 } else { 1 << 17 };
    let tp = TempPool::create(&o.pool_dir, "interleave", n * LEAF as u64 + (64 << 20))?;
    let pool = tp.pool();
    let id = pool.create_object("bench-leaves", "ferrite.pmio.bench")?;
    let (heap, _) = pool.open_heap(id, |_| Ok(()))?;
    let off = heap.alloc_zeroed(n as usize * LEAF)?;
    let leaves = Leaves {
        pool,
        base: pool.at(off, n as usize * LEAF),
        n,
        claimed: (0..n).map(|_| Cell::new(0)).collect(),
    };
    let mut r = env::report("interleave", &o.pool_dir);
    r.environment
        .suite
        .insert("timing".into(), "thread CPU time, median of reps".into());
    let groups: Vec<usize> = if o.quick {
        vec![1, 4, 16]
    } else {
        vec![1, 2, 4, 8, 12, 16, 20, 24, 32]
    };
    // Baselines: plain code, one fence per persist point, no executor.
    let base_ins = median(
        o.reps,
        || {
            leaves.clear();
            Ok(())
        },
        || {
            measure(ops, |i| {
                leaves.insert_plain(key(i));
                Ok(())
            })
        },
    )?;
    let mut hits = 0u64;
    let base_look = median(
        o.reps,
        || Ok(()),
        || {
            measure(ops, |i| {
                hits += leaves.lookup_plain(key(i * 7 % ops)).is_some() as u64;
                Ok(())
            })
        },
    )?;
    r.results
        .push(cell("insert", "plain", 1, base_ins).with("speedup", 1.0));
    r.results
        .push(cell("lookup", "plain", 1, base_look).with("speedup", 1.0));
    let mut ins_pts = Vec::new();
    let mut look_pts = Vec::new();
    for &g in &groups {
        let lv = &leaves;
        let run_inserts = || -> Result<M> {
            let ex = Interleaver::new(pool);
            let exr = &ex;
            let mut i = 0u64;
            let before = persist::thread_stats();
            let t = CpuTimer::start();
            ex.run(
                g,
                || {
                    if i == ops {
                        return None;
                    }
                    let k = key(i);
                    i += 1;
                    Some(async move {
                        let (li, p) = lv.leaf(k);
                        prefetch(p);
                        exr.yield_now().await;
                        let s = lv.claim(li, p);
                        lv.write_kv(p, s, k);
                        exr.persist_point().await;
                        lv.publish(li, p, s);
                        exr.persist_point().await;
                    })
                },
                |_| {},
            )?;
            let secs = t.secs();
            let d = persist::thread_stats().since(before);
            Ok((
                ops as f64 / secs / 1e6,
                d.fences as f64 / ops as f64,
                d.flushed_lines as f64 / ops as f64,
                d.nt_bytes as f64 / ops as f64,
                d.repeated_lines as f64 / ops as f64,
            ))
        };
        let ins = median(
            o.reps,
            || {
                leaves.clear();
                Ok(())
            },
            run_inserts,
        )?;
        ins_pts.push((g as f64, ins.0 / base_ins.0));
        r.results
            .push(cell("insert", "interleaved", g, ins).with("speedup", ins.0 / base_ins.0));
        // Lookups over the keys just inserted.
        let found = Cell::new(0u64);
        let fr = &found;
        let run_lookups = || -> Result<M> {
            let ex = Interleaver::new(pool);
            let exr = &ex;
            let mut j = 0u64;
            let t = CpuTimer::start();
            ex.run(
                g,
                || {
                    if j == ops {
                        return None;
                    }
                    let k = key(j * 7 % ops);
                    j += 1;
                    Some(async move {
                        let (_, p) = lv.leaf(k);
                        prefetch(p);
                        exr.yield_now().await;
                        if let Some(s) = lv.find(p, k) {
                            // SAFETY: slot s of an in-bounds leaf.
                            prefetch(unsafe { p.add(KV + 16 * s) });
                            exr.yield_now().await;
                            if lv.value_if(p, s, k).is_some() {
                                fr.set(fr.get() + 1);
                            }
                        }
                    })
                },
                |_| {},
            )?;
            Ok((ops as f64 / t.secs() / 1e6, 0.0, 0.0, 0.0, 0.0))
        };
        let look = median(o.reps, || Ok(()), run_lookups)?;
        look_pts.push((g as f64, look.0 / base_look.0));
        r.results
            .push(cell("lookup", "interleaved", g, look).with("speedup", look.0 / base_look.0));
        hits += found.get();
    }
    std::hint::black_box(hits);
    drop(leaves);
    drop(heap);
    pool.delete_object("bench-leaves")?;
    let best = |pts: &[(f64, f64)], min_g: f64| {
        pts.iter()
            .filter(|p| p.0 >= min_g)
            .map(|p| p.1)
            .fold(0.0, f64::max)
    };
    r.notes.push(format!(
        "insert speedup at group >= 16: best {:.2}x; lookup: best {:.2}x (over plain code)",
        best(&ins_pts, 16.0),
        best(&look_pts, 16.0)
    ));
    let svg = chart::line_chart(
        "Interleaving speedup over group size (thesis Fig. 12)",
        "operations in flight",
        "speedup over plain code",
        &[
            Series::new("insert", ins_pts),
            Series::new("lookup", look_pts),
        ],
        false,
    );
    env::finish(&mut r);
    Ok(BenchOutput {
        report: r,
        svg,
        extra_cols: vec!["fences_per_op", "lines_per_op", "speedup"],
    })
}
