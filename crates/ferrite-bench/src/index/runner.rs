//! The load and run phases, as PiBench runs them: load `n` records, then run
//! `p` operations on `t` threads picked by ratio and key distribution, timing a
//! sampled fraction of operations and counting throughput every `sampling_ms`.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{mpsc, Barrier, Mutex};
use std::time::{Duration, Instant};

use ferrite_index::{OrderedKv, WriteBatch};
use ferrite_pm::clock::thread_cpu_secs;
use ferrite_pm::persist::{self, PersistStats};

use crate::index::expected::KeySet;
use crate::index::workload::{
    scramble, unscramble, value_word, Distribution, IdGen, KeyCodec, Op, OpMix, Rng,
};
use crate::{BenchError, Result};

/// What the load phase did.
#[derive(Debug, Clone, Default)]
pub struct LoadStats {
    pub secs: f64,
    pub records: u64,
    /// Inserts that returned true (fewer than `records` only for keys < 8 bytes,
    /// whose truncated ids can collide).
    pub inserted: u64,
    pub threads: usize,
    /// Persist barriers and lines of the loading threads, summed.
    pub persist: PersistStats,
    /// On-CPU seconds of the loading threads, summed.
    pub cpu_secs: f64,
}

/// One measured run.
#[derive(Debug, Clone)]
pub struct RunSpec {
    pub mix: OpMix,
    pub dist: Distribution,
    /// Operations of the run, all workers together. Workers take them in
    /// chunks of [`RunSpec::CHUNK`] from one counter until none are left
    /// (PiBench gives each thread a fixed share instead; see [`run`]).
    pub ops: u64,
    pub threads: usize,
    pub scan_size: usize,
    /// Fraction of operations whose latency is measured (0 = none).
    pub latency_sampling: f64,
    pub sampling_ms: u64,
    pub seed: u64,
    /// Stop early after this long (throughput is then ops done / time).
    pub max_seconds: Option<f64>,
    /// Answers a worker keeps before it checks them mid-run (untimed; see
    /// `Pending`); [`RunSpec::CHECK_EVERY`] unless a test wants it small.
    pub check_every: usize,
}

impl RunSpec {
    /// Operations a worker takes from the run's counter at a time: the
    /// workers end within one chunk of each other, and the shared counter is
    /// touched once per 256 operations.
    pub const CHUNK: u64 = 256;

    /// Default of [`RunSpec::check_every`]: 8 Mi answers (128 MiB) per worker,
    /// so a run of up to that many lookups and updates is checked after it
    /// ends (a check mid-run is paused out of its worker's window, but not out
    /// of the other workers').
    pub const CHECK_EVERY: usize = 1 << 23;
    /// The most scan records a worker keeps before it checks them: 64 Ki
    /// (1 MiB), small enough to stay in the core's cache. Scans deliver 100
    /// records each; a buffer of 8 Mi of them grew through the last-level
    /// cache, costing every scan write misses and evicting the index under
    /// test (until 2026-11-29; see docs/BENCHMARKS.md).
    pub const SCAN_CHECK_EVERY: usize = 1 << 16;
}

/// Latency percentiles in nanoseconds over the sampled operations.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct Percentiles {
    pub samples: u64,
    pub p50: f64,
    pub p90: f64,
    pub p99: f64,
    pub p999: f64,
    pub p9999: f64,
    pub p99999: f64,
    pub max: f64,
}

impl Percentiles {
    /// Nearest-rank percentiles of `v` (sorted in place); None when empty.
    pub fn of(v: &mut [u64]) -> Option<Percentiles> {
        if v.is_empty() {
            return None;
        }
        v.sort_unstable();
        let at = |q: f64| {
            let i = ((q * v.len() as f64).ceil() as usize).clamp(1, v.len()) - 1;
            v[i] as f64
        };
        Some(Percentiles {
            samples: v.len() as u64,
            p50: at(0.50),
            p90: at(0.90),
            p99: at(0.99),
            p999: at(0.999),
            p9999: at(0.9999),
            p99999: at(0.99999),
            max: v[v.len() - 1] as f64,
        })
    }
}

/// What a run did.
#[derive(Debug, Clone, Default)]
pub struct RunStats {
    pub secs: f64,
    pub ops: u64,
    /// Operations of each kind issued: read, insert, update, remove, scan.
    pub issued: [u64; 5],
    /// Of those, how many found their key (read/update/remove), inserted a new
    /// key, or returned at least one record (scan).
    pub succeeded: [u64; 5],
    /// Records returned by scans.
    pub scanned: u64,
    /// Reads that returned a value belonging to another key (must be 0).
    pub wrong_values: u64,
    /// Wrong answers found by checking against the keys the index must hold
    /// (see [`Wrong`]; all 0 for a correct index).
    pub wrong: Wrong,
    pub latency: Option<Percentiles>,
    /// Million operations per second in each `sampling_ms` interval.
    pub samples: Vec<f64>,
    pub persist: PersistStats,
    /// True when `max_seconds` cut the run short.
    pub stopped_early: bool,
    /// The first wrong answer, described (None when all were right).
    pub wrong_example: Option<String>,
    /// On-CPU seconds of the workers, summed (excludes time other processes
    /// had the CPU: the machine this runs on is shared).
    pub cpu_secs: f64,
    /// Operations each worker did, in worker order (they take them from one
    /// counter: a slower worker does fewer).
    pub worker_ops: Vec<u64>,
}

/// Wrong answers of one run, found against [`KeySet`] (the keys loaded and
/// inserted, not removed). Checks that concurrent operations of the same run
/// could make ambiguous are skipped: lost and phantom keys are only counted
/// in runs without removes, scan contents only in runs without inserts and
/// removes (other scans are still checked for order and values).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Wrong {
    /// A lookup or update did not find a key the index must hold.
    pub lost: u64,
    /// A lookup or update found a key the index must not hold, or a key a
    /// remove said it removed is found after the run.
    pub phantom: u64,
    /// An insert of a fresh key (never inserted before) returned false.
    pub failed_inserts: u64,
    /// A scan returned other records than the index holds from its start key:
    /// wrong keys, missing or extra records, wrong order or values, or none
    /// at all where it said it returned some.
    pub scans: u64,
}

impl Wrong {
    pub fn total(&self) -> u64 {
        self.lost + self.phantom + self.failed_inserts + self.scans
    }
}

impl std::ops::Add for Wrong {
    type Output = Wrong;
    fn add(self, o: Wrong) -> Wrong {
        Wrong {
            lost: self.lost + o.lost,
            phantom: self.phantom + o.phantom,
            failed_inserts: self.failed_inserts + o.failed_inserts,
            scans: self.scans + o.scans,
        }
    }
}

impl RunStats {
    /// Every wrong answer of the run: values of other keys plus [`Wrong`].
    pub fn wrong_answers(&self) -> u64 {
        self.wrong_values + self.wrong.total()
    }

    /// Throughput as if every worker had had a core to itself: operations per
    /// average on-CPU second of a worker. Robust to other load on the machine
    /// (not to its cache and memory-bandwidth interference).
    pub fn mops_cpu(&self, threads: usize) -> f64 {
        if self.cpu_secs > 0.0 {
            self.ops as f64 / (self.cpu_secs / threads.max(1) as f64) / 1e6
        } else {
            0.0
        }
    }

    pub fn mops(&self) -> f64 {
        if self.secs > 0.0 {
            self.ops as f64 / self.secs / 1e6
        } else {
            0.0
        }
    }
}

pub(crate) fn op_index(op: Op) -> usize {
    match op {
        Op::Read => 0,
        Op::Insert => 1,
        Op::Update => 2,
        Op::Remove => 3,
        Op::Scan => 4,
    }
}

/// Loads ids `0..records` (keys scrambled, so the order is random in key space)
/// with `threads` threads, each taking every `threads`-th id. `batch` > 1 groups
/// that many records into one [`WriteBatch`] (for stores where a commit per
/// record would dominate). `progress` gets the running total now and then.
pub fn load(
    kv: &dyn OrderedKv,
    codec: &KeyCodec,
    records: u64,
    threads: usize,
    batch: usize,
    progress: &(dyn Fn(u64) + Sync),
) -> Result<LoadStats> {
    let threads = threads.max(1);
    let done = AtomicU64::new(0);
    let inserted = AtomicU64::new(0);
    let first_err: Mutex<Option<BenchError>> = Mutex::new(None);
    let failed = AtomicBool::new(false);
    let total = Mutex::new(PersistStats::default());
    let cpu = Mutex::new(0.0f64);
    let t0 = Instant::now();
    std::thread::scope(|s| {
        for t in 0..threads {
            let (done, inserted, first_err, failed, total, cpu) =
                (&done, &inserted, &first_err, &failed, &total, &cpu);
            s.spawn(move || {
                let before = persist::thread_stats();
                let cpu0 = thread_cpu_secs();
                let mut k = Vec::new();
                let mut v = Vec::new();
                let mut wb = WriteBatch::new();
                let mut local = 0u64;
                let mut id = t as u64;
                let r: Result<()> = (|| {
                    while id < records {
                        if failed.load(Ordering::Relaxed) {
                            return Ok(());
                        }
                        codec.key(id, &mut k);
                        codec.value(id, 0, &mut v);
                        if batch > 1 {
                            wb.put(&k, &v);
                            if wb.len() >= batch {
                                kv.write_batch(&wb)?;
                                inserted.fetch_add(wb.len() as u64, Ordering::Relaxed);
                                wb.ops.clear();
                            }
                        } else if kv.insert(&k, &v)? {
                            inserted.fetch_add(1, Ordering::Relaxed);
                        }
                        local += 1;
                        if local.is_multiple_of(4096) {
                            let d = done.fetch_add(4096, Ordering::Relaxed) + 4096;
                            if t == 0 {
                                progress(d);
                            }
                        }
                        id += threads as u64;
                    }
                    if !wb.is_empty() {
                        kv.write_batch(&wb)?;
                        inserted.fetch_add(wb.len() as u64, Ordering::Relaxed);
                    }
                    Ok(())
                })();
                done.fetch_add(local % 4096, Ordering::Relaxed);
                let c = persist::thread_stats().since(before);
                *cpu.lock().unwrap_or_else(|e| e.into_inner()) += thread_cpu_secs() - cpu0;
                let mut tot = total.lock().unwrap_or_else(|e| e.into_inner());
                *tot = *tot + c;
                if let Err(e) = r {
                    failed.store(true, Ordering::Relaxed);
                    first_err
                        .lock()
                        .unwrap_or_else(|e| e.into_inner())
                        .get_or_insert(e);
                }
            });
        }
    });
    let secs = t0.elapsed().as_secs_f64();
    if let Some(e) = first_err.into_inner().unwrap_or_else(|e| e.into_inner()) {
        return Err(e);
    }
    progress(records);
    Ok(LoadStats {
        secs,
        records,
        inserted: inserted.into_inner(),
        threads,
        persist: total.into_inner().unwrap_or_else(|e| e.into_inner()),
        cpu_secs: cpu.into_inner().unwrap_or_else(|e| e.into_inner()),
    })
}

#[repr(align(128))]
#[derive(Default)]
struct Padded(AtomicU64);

#[derive(Default)]
struct WorkerOut {
    issued: [u64; 5],
    succeeded: [u64; 5],
    scanned: u64,
    wrong: u64,
    checks: Wrong,
    example: Option<String>,
    inserted: Vec<u64>,
    removed: Vec<u64>,
    lat: Vec<u64>,
    persist: PersistStats,
    done: u64,
    /// When this worker passed the start barrier and when it finished.
    start: Option<Instant>,
    end: Option<Instant>,
    stopped: bool,
    cpu: f64,
    /// Answers not yet checked against the expected keys.
    pending: Pending,
}

/// The answers of a worker's lookups, updates and scans, kept to be checked
/// against the expected keys outside the measured time: a check costs a
/// random read or two of the (large) expected set, which would otherwise be
/// counted in every operation's time and latency. Checked after the run, or
/// when a buffer fills (that time is taken out of the worker's window; the
/// once-a-second throughput samples still include it). `Default` is the
/// empty placeholder left behind when a worker's buffers are taken.
#[derive(Default)]
struct Pending {
    /// Lookups and updates: (id, is an update, the index's answer).
    point: Vec<(u64, bool, bool)>,
    /// Scans: (id of the start key, records the index reported, end of the
    /// records it delivered in `got`).
    scans: Vec<(u64, usize, usize)>,
    /// Delivered scan records: (decoded key hash, or `u64::MAX` for a key
    /// the harness did not make; [`value_word`] of the value). Whether the
    /// value is its key's is decided by the check, outside the measured time.
    got: Vec<(u64, u64)>,
    /// Lookup and update answers kept before a check mid-run.
    points_cap: usize,
    /// Scan records kept before a check mid-run.
    records_cap: usize,
}

impl Pending {
    /// The most lookup and update answers reserved before a run (64 MiB): a
    /// longer run's buffer grows past it.
    const RESERVED_POINTS: usize = 1 << 22;

    /// Buffers of a worker with `quota` operations that checks every
    /// `check_every` answers, and every [`RunSpec::SCAN_CHECK_EVERY`] scan
    /// records at most. They are reserved now (with room for the scan that
    /// fills them past the mark), so they do not grow in the measured window.
    fn new(check_every: usize, quota: u64, scan_size: usize) -> Pending {
        let points_cap = check_every.max(1);
        let records_cap = points_cap.min(RunSpec::SCAN_CHECK_EVERY);
        let points = usize::try_from(quota)
            .unwrap_or(usize::MAX)
            .min(points_cap)
            .min(Self::RESERVED_POINTS);
        Pending {
            point: Vec::with_capacity(points),
            scans: Vec::with_capacity(records_cap / scan_size.max(1) + 1),
            got: Vec::with_capacity(records_cap + scan_size),
            points_cap,
            records_cap,
        }
    }

    /// Whether a buffer is due for a check mid-run.
    fn full(&self) -> bool {
        self.point.len() >= self.points_cap || self.got.len() >= self.records_cap
    }

    /// Checks every kept answer against `e`, counts what is wrong in `o`, and
    /// empties the buffers. `contents`: scans must return exactly the next keys
    /// (no concurrent inserts or removes).
    fn check(
        &mut self,
        e: &KeySet,
        codec: &KeyCodec,
        scan_size: usize,
        contents: bool,
        o: &mut WorkerOut,
    ) {
        for &(id, update, answer) in &self.point {
            let must = e.contains(scramble(id));
            if must == answer {
                continue;
            }
            o.checks.lost += u64::from(must);
            o.checks.phantom += u64::from(!must);
            if !update {
                o.example.get_or_insert_with(|| {
                    format!(
                        "lookup of id {id} (key hash {:#x}): {}",
                        scramble(id),
                        if must {
                            "not found"
                        } else {
                            "found, but never loaded or removed"
                        }
                    )
                });
            }
        }
        let mut from = 0;
        let mut got = Vec::new();
        for &(id, n, to) in &self.scans {
            got.clear();
            got.extend(
                self.got[from..to]
                    .iter()
                    .map(|&(h, w)| (h, h != u64::MAX && codec.word_matches(unscramble(h), w))),
            );
            let got = &got[..];
            from = to;
            let h0 = scramble(id);
            if !scan_ok(e, h0, scan_size, n, got, contents) {
                o.checks.scans += 1;
                o.example
                    .get_or_insert_with(|| scan_example(e, h0, scan_size, n, got));
            }
        }
        self.point.clear();
        self.scans.clear();
        self.got.clear();
    }
}

/// Runs `spec` against a store holding ids `0..key_space`. Inserts take fresh ids
/// from `next_fresh` (shared across runs, so later runs never re-insert).
/// With `expected` (the keys the store must hold; keys of at least 8 bytes),
/// every answer is checked against it ([`RunStats::wrong`]) and it is brought
/// up to date with the run's successful inserts and removes afterwards.
///
/// The workers take the run's operations from one counter, [`RunSpec::CHUNK`]
/// at a time, until all are taken, and the window runs from the first
/// worker's start to the last one's end. PiBench gives each thread a fixed
/// share instead, so a thread slowed by its core (on a shared machine, a core
/// whose cache another tenant is using) stretches the window while the other
/// threads, done, sit idle: measured here on 2026-12-03, a 2-thread lookup
/// run of ROART's where one worker finished 0.6 s before the other, both on
/// the CPU throughout. [`RunStats::worker_ops`] shows how the operations
/// were shared.
pub fn run(
    kv: &dyn OrderedKv,
    codec: &KeyCodec,
    key_space: u64,
    next_fresh: &AtomicU64,
    spec: &RunSpec,
    expected: Option<&mut KeySet>,
) -> Result<RunStats> {
    spec.mix.validate()?;
    let threads = spec.threads.max(1);
    if spec.scan_size == 0 && spec.mix.scan > 0.0 {
        return Err(BenchError::Options("--scan_size must be at least 1".into()));
    }
    if !(0.0..=1.0).contains(&spec.latency_sampling) {
        return Err(BenchError::Options(
            "--latency_sampling is a fraction between 0 and 1".into(),
        ));
    }
    let gen = IdGen::new(key_space, spec.dist);
    // Operations handed out so far (in chunks of `RunSpec::CHUNK`).
    let handed = AtomicU64::new(0);
    let counters: Vec<Padded> = (0..threads).map(|_| Padded::default()).collect();
    let barrier = Barrier::new(threads + 1);
    let failed = AtomicBool::new(false);
    let first_err: Mutex<Option<BenchError>> = Mutex::new(None);
    let (tx, rx) = mpsc::channel::<()>();
    let mut outs: Vec<WorkerOut> = Vec::new();
    let mut samples = Vec::new();
    let check_values = codec.key_size >= 8 && codec.value_size >= 8;
    let exp: Option<&KeySet> = expected.as_deref().filter(|_| codec.decodable());
    // What concurrent operations of this run cannot make ambiguous.
    let check_presence = spec.mix.remove == 0.0;
    let check_scan_contents = spec.mix.remove == 0.0 && spec.mix.insert == 0.0;
    let record_changes = exp.is_some();
    let mut t0 = Instant::now();
    std::thread::scope(|s| {
        let mut handles = Vec::new();
        for t in 0..threads {
            // The most a worker can take (buffers are reserved for it).
            let quota = spec.ops;
            let (gen, counters, barrier, failed, first_err, handed) =
                (&gen, &counters, &barrier, &failed, &first_err, &handed);
            let tx = tx.clone();
            handles.push(s.spawn(move || {
                let _tx = tx; // dropped when this worker ends: the sampler sees it
                let mut o = WorkerOut::default();
                let mut rng = Rng(spec.seed ^ (t as u64 + 1).wrapping_mul(0xA076_1D64_78BD_642F));
                let mut k = Vec::with_capacity(codec.key_len());
                let mut v = Vec::with_capacity(codec.value_size);
                let mut out = Vec::with_capacity(codec.value_size.max(8));
                let mut pend = Pending::new(spec.check_every, quota, spec.scan_size);
                // Time spent checking a full buffer mid-run, taken out of
                // this worker's window (wall and CPU).
                let mut paused = Duration::ZERO;
                let mut paused_cpu = 0.0;
                let mut fresh = 0u64;
                let mut fresh_end = 0u64;
                let sample = spec.latency_sampling;
                if sample > 0.0 {
                    o.lat.reserve((quota as f64 * sample * 1.1) as usize + 16);
                }
                barrier.wait();
                let start = Instant::now();
                o.start = Some(start);
                let mut deadline = spec.max_seconds.map(|s| start + Duration::from_secs_f64(s));
                let before = persist::thread_stats();
                let cpu0 = thread_cpu_secs();
                let r: Result<()> = (|| {
                    // Operations are taken from the shared counter, a chunk at a
                    // time, until none are left: a worker slowed by its core
                    // (another tenant of the machine, a colder cache) takes
                    // fewer, instead of stretching the window while the others
                    // wait idle (PiBench's fixed shares).
                    let (mut i, mut end) = (0u64, 0u64);
                    loop {
                        if i == end {
                            let from = handed.fetch_add(RunSpec::CHUNK, Ordering::Relaxed);
                            if from >= spec.ops {
                                break;
                            }
                            end = i + RunSpec::CHUNK.min(spec.ops - from);
                        }
                        if i % 256 == 255 {
                            counters[t].0.store(i, Ordering::Relaxed);
                            if failed.load(Ordering::Relaxed) {
                                break;
                            }
                            if deadline.is_some_and(|d| Instant::now() >= d) {
                                o.stopped = true;
                                break;
                            }
                        }
                        let op = spec.mix.pick(rng.unit());
                        let id = if op == Op::Insert {
                            if fresh == fresh_end {
                                fresh = next_fresh.fetch_add(1024, Ordering::Relaxed);
                                fresh_end = fresh + 1024;
                            }
                            fresh += 1;
                            fresh - 1
                        } else {
                            pibench_id(gen.next(&mut rng), gen.n())
                        };
                        codec.key(id, &mut k);
                        let timed = sample > 0.0 && rng.unit() < sample;
                        let t_op = if timed { Some(Instant::now()) } else { None };
                        let ok = match op {
                            Op::Read => {
                                let hit = kv.get_into(&k, &mut out)?;
                                if hit && check_values {
                                    o.wrong += u64::from(!codec.value_matches(id, &out));
                                }
                                if exp.is_some() && check_presence {
                                    pend.point.push((id, false, hit));
                                }
                                hit
                            }
                            Op::Insert => {
                                codec.value(id, 0, &mut v);
                                let ok = kv.insert(&k, &v)?;
                                if record_changes {
                                    if ok {
                                        o.inserted.push(scramble(id));
                                    } else {
                                        o.checks.failed_inserts += 1;
                                    }
                                }
                                ok
                            }
                            Op::Update => {
                                codec.value(id, 1 + (i % 200) as u8, &mut v);
                                let ok = kv.update(&k, &v)?;
                                if exp.is_some() && check_presence {
                                    pend.point.push((id, true, ok));
                                }
                                ok
                            }
                            Op::Remove => {
                                let ok = kv.remove(&k)?;
                                if ok && record_changes {
                                    o.removed.push(scramble(id));
                                }
                                ok
                            }
                            Op::Scan => {
                                let mut sum = 0usize;
                                let got = &mut pend.got;
                                let n = kv.scan(&k, spec.scan_size, &mut |a, b| {
                                    sum = sum.wrapping_add(a.len() + b.len());
                                    if exp.is_some() {
                                        // u64::MAX: not a key of ours, never
                                        // equal to an expected hash.
                                        let h = codec.decode(a).unwrap_or(u64::MAX);
                                        got.push((h, value_word(b)));
                                    }
                                })?;
                                std::hint::black_box(sum);
                                if exp.is_some() {
                                    pend.scans.push((id, n, pend.got.len()));
                                }
                                o.scanned += n as u64;
                                n > 0
                            }
                        };
                        if let Some(t_op) = t_op {
                            o.lat.push(t_op.elapsed().as_nanos() as u64);
                        }
                        let x = op_index(op);
                        o.issued[x] += 1;
                        o.succeeded[x] += u64::from(ok);
                        o.done += 1;
                        if let (Some(e), true) = (exp, pend.full()) {
                            let p0 = Instant::now();
                            let c0 = thread_cpu_secs();
                            pend.check(e, codec, spec.scan_size, check_scan_contents, &mut o);
                            let d = p0.elapsed();
                            paused += d;
                            paused_cpu += thread_cpu_secs() - c0;
                            deadline = deadline.map(|x| x + d);
                        }
                        i += 1;
                    }
                    Ok(())
                })();
                let now = Instant::now();
                o.end = Some(now.checked_sub(paused).unwrap_or(now));
                o.cpu = thread_cpu_secs() - cpu0 - paused_cpu;
                o.pending = pend;
                o.persist = persist::thread_stats().since(before);
                counters[t].0.store(o.done, Ordering::Relaxed);
                if let Err(e) = r {
                    failed.store(true, Ordering::Relaxed);
                    first_err
                        .lock()
                        .unwrap_or_else(|e| e.into_inner())
                        .get_or_insert(e);
                }
                o
            }));
        }
        drop(tx);
        barrier.wait();
        t0 = Instant::now();
        // Throughput sampler: wakes every sampling_ms until every worker is gone.
        let every = Duration::from_millis(spec.sampling_ms.max(1));
        let mut last = 0u64;
        let mut last_t = t0;
        while let Err(mpsc::RecvTimeoutError::Timeout) = rx.recv_timeout(every) {
            let now = Instant::now();
            let total: u64 = counters.iter().map(|c| c.0.load(Ordering::Relaxed)).sum();
            let dt = now.duration_since(last_t).as_secs_f64();
            samples.push((total - last) as f64 / dt / 1e6);
            last = total;
            last_t = now;
        }
        for h in handles {
            match h.join() {
                Ok(o) => outs.push(o),
                Err(p) => std::panic::resume_unwind(p),
            }
        }
    });
    if let Some(e) = first_err.into_inner().unwrap_or_else(|e| e.into_inner()) {
        return Err(e);
    }
    // The measured window runs from the first worker's start to the last
    // one's end, as the workers saw them: a worker may pass the barrier and
    // even finish before this thread, descheduled, reads the clock for t0.
    let begin = outs.iter().filter_map(|o| o.start).min().unwrap_or(t0);
    let end = outs.iter().filter_map(|o| o.end).max().unwrap_or(begin);
    let mut st = RunStats {
        secs: end.duration_since(begin).as_secs_f64(),
        samples,
        ..RunStats::default()
    };
    let mut lat = Vec::new();
    let mut inserted = Vec::new();
    let mut removed = Vec::new();
    for mut o in outs {
        // The answers still unchecked, checked now (untimed).
        if let Some(e) = exp {
            let mut p = std::mem::take(&mut o.pending);
            p.check(e, codec, spec.scan_size, check_scan_contents, &mut o);
        }
        st.ops += o.done;
        st.worker_ops.push(o.done);
        for i in 0..5 {
            st.issued[i] += o.issued[i];
            st.succeeded[i] += o.succeeded[i];
        }
        st.scanned += o.scanned;
        st.wrong_values += o.wrong;
        st.wrong = st.wrong + o.checks;
        if st.wrong_example.is_none() {
            st.wrong_example = o.example;
        }
        inserted.extend(o.inserted);
        removed.extend(o.removed);
        st.persist = st.persist + o.persist;
        st.stopped_early |= o.stopped;
        st.cpu_secs += o.cpu;
        lat.extend(o.lat);
    }
    st.latency = Percentiles::of(&mut lat);
    if let Some(e) = expected {
        if codec.decodable() {
            // A remove that said yes must have removed (untimed check after
            // the run): found again, the key counts as a phantom.
            let mut k = Vec::new();
            let mut out = Vec::new();
            for &h in &removed {
                codec.key(unscramble(h), &mut k);
                if kv.get_into(&k, &mut out)? {
                    st.wrong.phantom += 1;
                    st.wrong_example.get_or_insert_with(|| {
                        format!(
                            "remove of key hash {h:#x} returned true, and the key is still found"
                        )
                    });
                }
            }
            e.apply(inserted, removed);
        }
    }
    Ok(st)
}

/// The id of the `rank`-th most likely key of `n` (rank 0 the hottest under
/// a skewed distribution): rank r is id r + 1, and the last rank id 0. PiBench
/// draws ids from 1 to N, so its hottest key is id 1's and key 0, which its
/// load inserts first, is never looked at; here key 0 stays a key like any
/// other (an index that refuses it is caught) but is the coldest, not the
/// hottest (under selfsimilar 0.2 the hottest key takes about a tenth of the
/// operations at 10 M records). A permutation: uniform draws stay uniform.
#[inline]
pub fn pibench_id(rank: u64, n: u64) -> u64 {
    if rank + 1 >= n {
        0
    } else {
        rank + 1
    }
}

/// A wrong scan in words: what it returned against what the index holds.
fn scan_example(e: &KeySet, start: u64, want: usize, n: usize, got: &[(u64, bool)]) -> String {
    let must = e.scan_from(start, want);
    let first_diff = must
        .iter()
        .zip(got)
        .position(|(a, (b, _))| a != b)
        .unwrap_or(must.len().min(got.len()));
    let show = |v: &mut dyn Iterator<Item = u64>| {
        v.take(3)
            .map(|h| {
                if h == u64::MAX {
                    "?".to_string()
                } else {
                    format!("{h:#x}")
                }
            })
            .collect::<Vec<_>>()
            .join(", ")
    };
    format!(
        "scan of {want} from key hash {start:#x}: returned {n} records ({} delivered, {} with another key's value), the index holds {} from there; first difference at record {first_diff}: expected [{}], got [{}]",
        got.len(),
        got.iter().filter(|g| !g.1).count(),
        must.len(),
        show(&mut must.iter().skip(first_diff).copied()),
        show(&mut got.iter().skip(first_diff).map(|g| g.0)),
    )
}

/// Whether a scan from the key hash `start` that reported `n` records and
/// delivered `got` (decoded hash, value matches its key) is right. With
/// `contents`, the records must be exactly the next `min(want, held)` keys
/// the index holds; otherwise (inserts or removes run concurrently) they must
/// be ascending from `start`, and values must match their keys.
fn scan_ok(
    e: &KeySet,
    start: u64,
    want: usize,
    n: usize,
    got: &[(u64, bool)],
    contents: bool,
) -> bool {
    if n != got.len() || got.iter().any(|&(_, v)| !v) {
        return false;
    }
    if contents {
        let must = e.scan_from(start, want);
        must.len() == got.len() && must.iter().zip(got).all(|(a, (b, _))| a == b)
    } else {
        got.first().is_none_or(|&(h, _)| h >= start) && got.windows(2).all(|w| w[0].0 < w[1].0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::index::baselines::BTreeMapKv;

    fn spec(mix: OpMix, ops: u64, threads: usize) -> RunSpec {
        RunSpec {
            mix,
            dist: Distribution::Uniform,
            ops,
            threads,
            scan_size: 10,
            latency_sampling: 0.5,
            sampling_ms: 1000,
            seed: 7,
            max_seconds: None,
            check_every: RunSpec::CHECK_EVERY,
        }
    }

    /// Answers checked in many small batches mid-run (the pause taken out of
    /// the window) count exactly what one check after the run counts.
    #[test]
    fn mid_run_checks_count_what_a_check_after_the_run_counts() {
        let (kv, c, fresh) = loaded(2_000);
        // The index loses every 10th key: lookups of them must count as lost.
        let mut k = Vec::new();
        for id in (0..2_000).step_by(10) {
            c.key(id, &mut k);
            assert!(kv.remove(&k).unwrap());
        }
        let mut mix = OpMix::only(Op::Read);
        mix.read = 0.8;
        mix.scan = 0.2;
        let mut counts = Vec::new();
        for every in [usize::MAX, 64, 1] {
            let mut e = KeySet::loaded(2_000);
            let mut sp = spec(mix, 20_000, 1);
            sp.check_every = every;
            let st = run(&kv, &c, 2_000, &fresh, &sp, Some(&mut e)).unwrap();
            assert_eq!(st.ops, 20_000);
            counts.push((st.wrong.lost, st.wrong.phantom, st.wrong.scans));
        }
        assert!(counts[0].0 > 1_000 && counts[0].2 > 1_000, "{counts:?}");
        assert_eq!(counts[0].1, 0);
        assert!(counts.iter().all(|c| *c == counts[0]), "{counts:?}");
    }

    #[test]
    fn load_inserts_every_record_with_several_threads() {
        let kv = BTreeMapKv::new();
        let c = KeyCodec::new(8, 8, "").unwrap();
        let seen = AtomicU64::new(0);
        let st = load(&kv, &c, 10_000, 2, 1, &|d| {
            seen.fetch_max(d, Ordering::Relaxed);
        })
        .unwrap();
        assert_eq!(st.inserted, 10_000);
        assert_eq!(kv.count(), 10_000);
        assert_eq!(seen.load(Ordering::Relaxed), 10_000);
        // The first key is 0 (eight zero bytes), as in PiBench.
        assert!(kv.get(&[0u8; 8]).unwrap().is_some());
    }

    #[test]
    fn batched_load_matches() {
        let kv = BTreeMapKv::new();
        let c = KeyCodec::new(16, 32, "p").unwrap();
        let st = load(&kv, &c, 5_000, 1, 100, &|_| {}).unwrap();
        assert_eq!(st.inserted, 5_000);
        assert_eq!(kv.count(), 5_000);
    }

    /// A `BTreeMap` loaded with `n` 8-byte records, its codec, and the next
    /// fresh id.
    fn loaded(n: u64) -> (BTreeMapKv, KeyCodec, AtomicU64) {
        let kv = BTreeMapKv::new();
        let c = KeyCodec::new(8, 8, "").unwrap();
        load(&kv, &c, n, 1, 1, &|_| {}).unwrap();
        (kv, c, AtomicU64::new(n))
    }

    /// A store whose lookups hold up the second thread that calls it, in its
    /// first lookup, until the others have answered `release` lookups (or a
    /// minute has passed, so that a broken split fails instead of hanging).
    struct HoldsOneWorker {
        kv: BTreeMapKv,
        release: u64,
        answered: AtomicU64,
        threads: Mutex<Vec<std::thread::ThreadId>>,
        wake: std::sync::Condvar,
    }

    impl OrderedKv for HoldsOneWorker {
        fn name(&self) -> &str {
            "holds-one-worker"
        }
        fn get_into(&self, key: &[u8], out: &mut Vec<u8>) -> ferrite_kv::KvResult<bool> {
            let me = std::thread::current().id();
            let mut seen = self.threads.lock().unwrap();
            if !seen.contains(&me) {
                seen.push(me);
                if seen.len() == 2 {
                    let (_g, _) = self
                        .wake
                        .wait_timeout_while(seen, Duration::from_secs(60), |_| {
                            self.answered.load(Ordering::Relaxed) < self.release
                        })
                        .unwrap();
                }
            } else {
                drop(seen);
            }
            let r = self.kv.get_into(key, out);
            if self.answered.fetch_add(1, Ordering::Relaxed) + 1 == self.release {
                let _g = self.threads.lock().unwrap();
                self.wake.notify_all();
            }
            r
        }
        fn insert(&self, k: &[u8], v: &[u8]) -> ferrite_kv::KvResult<bool> {
            self.kv.insert(k, v)
        }
        fn update(&self, k: &[u8], v: &[u8]) -> ferrite_kv::KvResult<bool> {
            self.kv.update(k, v)
        }
        fn upsert(&self, k: &[u8], v: &[u8]) -> ferrite_kv::KvResult<bool> {
            self.kv.upsert(k, v)
        }
        fn remove(&self, k: &[u8]) -> ferrite_kv::KvResult<bool> {
            self.kv.remove(k)
        }
        fn count(&self) -> usize {
            self.kv.count()
        }
        fn scan(
            &self,
            start: &[u8],
            n: usize,
            f: &mut dyn FnMut(&[u8], &[u8]),
        ) -> ferrite_kv::KvResult<usize> {
            self.kv.scan(start, n, f)
        }
        fn write_batch(&self, b: &ferrite_kv::WriteBatch) -> ferrite_kv::KvResult<()> {
            self.kv.write_batch(b)
        }
        fn cursor(&self) -> ferrite_kv::KvResult<Box<dyn ferrite_kv::KvCursor + '_>> {
            self.kv.cursor()
        }
    }

    /// A worker held up does not hold the run up: the other takes the
    /// operations it would have done. With PiBench's fixed shares the held
    /// worker would still owe about half of them when it is released
    /// (checked against that split: this test then fails).
    #[test]
    fn a_held_up_worker_leaves_its_operations_to_the_other() {
        let (kv, c, fresh) = loaded(5_000);
        let ops = 20_000;
        let kv = HoldsOneWorker {
            kv,
            release: ops - RunSpec::CHUNK,
            answered: AtomicU64::new(0),
            threads: Mutex::new(Vec::new()),
            wake: std::sync::Condvar::new(),
        };
        let st = run(
            &kv,
            &c,
            5_000,
            &fresh,
            &spec(OpMix::only(Op::Read), ops, 2),
            None,
        )
        .unwrap();
        assert_eq!(st.ops, ops);
        assert_eq!(st.succeeded[0], ops);
        let mut w = st.worker_ops.clone();
        w.sort_unstable();
        assert_eq!(w.iter().sum::<u64>(), ops);
        // The held worker did its first chunk at most.
        assert!(w[0] <= RunSpec::CHUNK, "{:?}", st.worker_ops);
    }

    #[test]
    fn reads_hit_loaded_keys_and_values_match() {
        let (kv, c, fresh) = loaded(5_000);
        let st = run(
            &kv,
            &c,
            5_000,
            &fresh,
            &spec(OpMix::only(Op::Read), 20_000, 2),
            None,
        )
        .unwrap();
        assert_eq!(st.ops, 20_000);
        assert_eq!(st.issued[0], 20_000);
        assert_eq!(st.succeeded[0], 20_000);
        assert_eq!(st.wrong_values, 0);
        assert!(st.cpu_secs > 0.0 && st.mops_cpu(2) > 0.0);
        let l = st.latency.unwrap();
        assert!(l.samples > 5_000 && l.p50 <= l.p99 && l.p99 <= l.max);
    }

    #[test]
    fn inserts_use_fresh_keys_and_all_succeed() {
        let (kv, c, fresh) = loaded(1_000);
        let st = run(
            &kv,
            &c,
            1_000,
            &fresh,
            &spec(OpMix::only(Op::Insert), 3_000, 2),
            None,
        )
        .unwrap();
        assert_eq!(st.succeeded[1], 3_000);
        assert_eq!(kv.count(), 4_000);
    }

    #[test]
    fn mixed_run_counts_every_kind() {
        let (kv, c, fresh) = loaded(2_000);
        let mix = OpMix {
            read: 0.2,
            insert: 0.2,
            update: 0.2,
            remove: 0.2,
            scan: 0.2,
        };
        let st = run(&kv, &c, 2_000, &fresh, &spec(mix, 10_000, 2), None).unwrap();
        assert_eq!(st.issued.iter().sum::<u64>(), 10_000);
        assert!(st.issued.iter().all(|&n| n > 1_000));
        assert!(st.scanned > 0);
        let expect = 2_000 + st.succeeded[1] - st.succeeded[3];
        assert_eq!(kv.count() as u64, expect);
    }

    #[test]
    fn bad_ratios_are_rejected() {
        let kv = BTreeMapKv::new();
        let c = KeyCodec::new(8, 8, "").unwrap();
        let fresh = AtomicU64::new(0);
        let mut m = OpMix::only(Op::Read);
        m.insert = 0.5;
        assert!(run(&kv, &c, 10, &fresh, &spec(m, 10, 1), None).is_err());
    }

    #[test]
    fn skewed_runs_make_id_1_the_hottest_and_id_0_the_coldest() {
        assert_eq!(
            (pibench_id(0, 10), pibench_id(8, 10), pibench_id(9, 10)),
            (1, 9, 0)
        );
        let ids: std::collections::HashSet<u64> = (0..10).map(|r| pibench_id(r, 10)).collect();
        assert_eq!(ids.len(), 10, "a permutation of the ids");
        let n = 1000;
        let g = IdGen::new(n, Distribution::SelfSimilar(0.2));
        let mut rng = Rng(7);
        let mut hits = vec![0u32; n as usize];
        for _ in 0..100_000 {
            hits[pibench_id(g.next(&mut rng), n) as usize] += 1;
        }
        let hottest = (0..n as usize).max_by_key(|&i| hits[i]).unwrap();
        assert_eq!(hottest, 1);
        assert!(hits[0] < hits[1] / 100, "{} vs {}", hits[0], hits[1]);
    }

    /// Scan records are checked once the core's cache would hold no more of
    /// them, whatever the run's check interval for lookups and updates.
    #[test]
    fn scan_records_are_checked_before_they_outgrow_the_cache() {
        for every in [RunSpec::CHECK_EVERY, usize::MAX] {
            let mut p = Pending::new(every, 2_000_000, 100);
            assert!(p.got.capacity() >= RunSpec::SCAN_CHECK_EVERY + 100);
            p.got.resize(RunSpec::SCAN_CHECK_EVERY - 1, (0, 0));
            assert!(!p.full());
            p.got.push((0, 0));
            assert!(p.full(), "every {every}");
        }
        // 1 MiB: within this machine's 2 MiB L2 per core.
        assert!(RunSpec::SCAN_CHECK_EVERY * std::mem::size_of::<(u64, u64)>() <= 1 << 20);
        // Lookups and updates keep theirs to the run's interval.
        let mut q = Pending::new(RunSpec::CHECK_EVERY, 2_000_000, 100);
        q.point.resize(RunSpec::SCAN_CHECK_EVERY, (0, false, false));
        assert!(!q.full());
        let mut r = Pending::new(RunSpec::SCAN_CHECK_EVERY, 2_000_000, 100);
        r.point.resize(RunSpec::SCAN_CHECK_EVERY, (0, false, false));
        assert!(r.full());
        // A smaller interval applies to scan records too.
        let mut t = Pending::new(64, 2_000_000, 10);
        t.got.resize(64, (0, 0));
        assert!(t.full());
    }

    #[test]
    fn kept_answers_are_checked_against_the_expected_keys() {
        let e = KeySet::loaded(100);
        let codec = KeyCodec::new(8, 8, "").unwrap();
        let mut o = WorkerOut::default();
        let mut p = Pending::default();
        p.point.push((5, false, true)); // right
        p.point.push((6, false, false)); // a lost lookup
        p.point.push((500, false, true)); // a phantom (id 500 was never loaded)
        p.point.push((7, true, false)); // a lost update
        p.point.push((600, true, false)); // right: nothing to update

        // Scan records as the runner keeps them: the key's hash and the word
        // of the value the index returned (`right`: each key's own value).
        let rec = |h: u64, id: u64| {
            let mut v = Vec::new();
            codec.value(id, 3, &mut v);
            (h, value_word(&v))
        };
        let right = |i| -> Vec<(u64, u64)> {
            let hs = e.scan_from(scramble(i), 3);
            hs.iter().map(|&h| rec(h, unscramble(h))).collect()
        };
        p.got.extend(right(10));
        p.scans.push((10, 3, p.got.len())); // right
        p.got.extend(right(20).into_iter().rev());
        p.scans.push((20, 3, p.got.len())); // wrong order
        p.scans.push((30, 3, p.got.len())); // said 3, delivered none
        let mut r = right(40);
        r[1] = rec(r[1].0, unscramble(r[2].0));
        p.got.extend(r);
        p.scans.push((40, 3, p.got.len())); // another key's value
        let mut r = right(50);
        r[2].1 = value_word(&[1, 2, 3]);
        p.got.extend(r);
        p.scans.push((50, 3, p.got.len())); // a value cut short
        let mut r = right(60);
        r[1].0 = u64::MAX;
        p.got.extend(r);
        p.scans.push((60, 3, p.got.len())); // a key the harness never made
        p.got.extend(right(70));
        p.scans.push((70, 3, p.got.len())); // right
        p.check(&e, &codec, 3, true, &mut o);
        assert_eq!((o.checks.lost, o.checks.phantom, o.checks.scans), (2, 1, 5));
        assert!(o.example.as_deref().unwrap().contains("lookup of id 6"));
        assert!(p.point.is_empty() && p.scans.is_empty() && p.got.is_empty());
    }

    #[test]
    fn percentiles_use_nearest_rank() {
        let mut v: Vec<u64> = (1..=1000).rev().collect();
        let p = Percentiles::of(&mut v).unwrap();
        assert_eq!(p.p50, 500.0);
        assert_eq!(p.p90, 900.0);
        assert_eq!(p.p99, 990.0);
        assert_eq!(p.max, 1000.0);
        assert!(Percentiles::of(&mut []).is_none());
    }
}
