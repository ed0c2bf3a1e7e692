//! YCSB as the thesis runs it (§5.2): one table of records with a 4-byte key
//! and ten 100-byte fields, Zipf-distributed (z = 1) popular records scattered
//! over key space, and three workloads:
//!
//! * YCSB-RO: point lookups of one (uniformly chosen) field;
//! * YCSB-R/W x%: x% updates of one field (written in place where the store
//!   can, else read, changed and written back), the rest lookups;
//! * YCSB-SCAN: range scans of 1 to 100 records (uniform), one field of each.
//!
//! Every field starts with its record id and field number, so a read checks
//! that it got the right record ([`RunStats::wrong`]).

use std::time::{Duration, Instant};

use ferrite_kv::{KvResult, OrderedKv, WriteBatch};

use super::zipf::{scatter32, Zipf};
use crate::index::workload::Rng;

/// Fields per record.
pub const FIELDS: usize = 10;
/// Bytes per field.
pub const FIELD_LEN: usize = 100;
/// Bytes per record value.
pub const VALUE_LEN: usize = FIELDS * FIELD_LEN;
/// Bytes per key.
pub const KEY_LEN: usize = 4;
/// The thesis's Zipf exponent.
pub const ZIPF_Z: f64 = 1.0;
/// Longest scan.
pub const MAX_SCAN: usize = 100;

/// The key of record `id`: its scattered id, big-endian.
#[inline]
pub fn key(id: u32) -> [u8; KEY_LEN] {
    scatter32(id).to_be_bytes()
}

/// Writes field `f` of record `id` at `version` into `out` (`FIELD_LEN` bytes):
/// the id and field number first, then filler that changes with the version.
pub fn fill_field(id: u32, f: usize, version: u32, out: &mut [u8]) {
    debug_assert_eq!(out.len(), FIELD_LEN);
    out[..4].copy_from_slice(&id.to_le_bytes());
    out[4] = f as u8;
    out[5..9].copy_from_slice(&version.to_le_bytes());
    let mut x = (id as u64) << 32 | (f as u64) << 24 | version as u64;
    for b in out[9..].iter_mut() {
        x = x
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        *b = b'a' + ((x >> 59) as u8 % 26);
    }
}

/// The whole value of record `id` (every field at version 0).
pub fn record(id: u32, out: &mut Vec<u8>) {
    out.clear();
    out.resize(VALUE_LEN, 0);
    for f in 0..FIELDS {
        fill_field(id, f, 0, &mut out[f * FIELD_LEN..(f + 1) * FIELD_LEN]);
    }
}

/// Whether field `f` of `value` belongs to record `id`.
#[inline]
pub fn field_ok(value: &[u8], id: u32, f: usize) -> bool {
    let s = &value.get(f * FIELD_LEN..(f + 1) * FIELD_LEN);
    matches!(s, Some(s) if s[..4] == id.to_le_bytes() && s[4] == f as u8)
}

/// A YCSB workload of the thesis.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Workload {
    /// 100% point lookups.
    ReadOnly,
    /// `update_pct`% updates, the rest lookups.
    ReadWrite { update_pct: u8 },
    /// 100% scans of 1..=`MAX_SCAN` records.
    Scan,
}

impl Workload {
    /// `ycsb-ro`, `ycsb-rw50`, `ycsb-scan`.
    pub fn name(&self) -> String {
        match self {
            Workload::ReadOnly => "ycsb-ro".into(),
            Workload::ReadWrite { update_pct } => format!("ycsb-rw{update_pct}"),
            Workload::Scan => "ycsb-scan".into(),
        }
    }

    /// Parses [`Workload::name`] (`ro`, `rw50`, `scan` without the prefix too).
    pub fn parse(s: &str) -> Option<Workload> {
        let s = s.strip_prefix("ycsb-").unwrap_or(s);
        match s {
            "ro" => Some(Workload::ReadOnly),
            "scan" => Some(Workload::Scan),
            _ => {
                let p: u8 = s.strip_prefix("rw")?.parse().ok()?;
                (p <= 100).then_some(Workload::ReadWrite { update_pct: p })
            }
        }
    }

    /// What it does, for the line above a table.
    pub fn describe(&self) -> String {
        let common = "4-byte keys, 10 x 100-byte fields, Zipf z=1 (popular keys scattered)";
        match self {
            Workload::ReadOnly => format!("YCSB-RO: 100% lookups of one field; {common}"),
            Workload::ReadWrite { update_pct } => format!(
                "YCSB-R/W: {update_pct}% updates of one field (in place), {}% lookups; {common}",
                100 - update_pct
            ),
            Workload::Scan => {
                format!(
                    "YCSB-SCAN: range scans of 1-100 records (uniform), one field each; {common}"
                )
            }
        }
    }
}

/// One operation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum YcsbOp {
    Read { id: u32, field: usize },
    Update { id: u32, field: usize },
    Scan { id: u32, len: usize, field: usize },
}

/// Draws the operations of a workload over `records` records.
#[derive(Debug, Clone)]
pub struct OpGen {
    workload: Workload,
    zipf: Zipf,
    rng: Rng,
}

impl OpGen {
    pub fn new(workload: Workload, records: u64, seed: u64) -> OpGen {
        OpGen {
            workload,
            zipf: Zipf::new(records.max(1), ZIPF_Z),
            rng: Rng(seed ^ 0x5943_5342),
        }
    }

    pub fn next_op(&mut self) -> YcsbOp {
        let id = self.zipf.sample(&mut self.rng) as u32;
        let field = self.rng.below(FIELDS as u64) as usize;
        match self.workload {
            Workload::ReadOnly => YcsbOp::Read { id, field },
            Workload::ReadWrite { update_pct } => {
                if self.rng.below(100) < update_pct as u64 {
                    YcsbOp::Update { id, field }
                } else {
                    YcsbOp::Read { id, field }
                }
            }
            Workload::Scan => YcsbOp::Scan {
                id,
                len: 1 + self.rng.below(MAX_SCAN as u64) as usize,
                field,
            },
        }
    }
}

/// What YCSB needs of a store. The B+-tree reads and updates one field in
/// place (the thesis: "a randomly chosen field is read or updated"); other
/// ordered stores and the outside anchors do it with their own means (a
/// whole-value read or read-modify-write where they have nothing finer).
pub trait YcsbTarget {
    /// The value of `key` into `out`; false when absent.
    fn read(&self, key: &[u8], out: &mut Vec<u8>) -> KvResult<bool>;
    /// Replaces the value of an existing key.
    fn write(&self, key: &[u8], value: &[u8]) -> KvResult<bool>;
    /// Up to `n` records from `start` on, ascending.
    fn range(&self, start: &[u8], n: usize, f: &mut dyn FnMut(&[u8], &[u8])) -> KvResult<usize>;
    /// Inserts a batch of new records (the load).
    fn load_batch(&self, batch: &[(Vec<u8>, Vec<u8>)]) -> KvResult<()>;
    /// Field `field` of `key`'s record into `out` (`FIELD_LEN` bytes); false
    /// when absent. Default: the whole value, then the field is kept.
    fn read_field(&self, key: &[u8], field: usize, out: &mut Vec<u8>) -> KvResult<bool> {
        if !self.read(key, out)? {
            return Ok(false);
        }
        let a = (field * FIELD_LEN).min(out.len());
        let b = ((field + 1) * FIELD_LEN).min(out.len());
        out.truncate(b);
        out.drain(..a);
        Ok(true)
    }
    /// Overwrites field `field` of an existing key's record with `bytes`
    /// (one durable operation); false when absent. Default: read the whole
    /// value, change the field, write it back.
    fn write_field(&self, key: &[u8], field: usize, bytes: &[u8]) -> KvResult<bool> {
        let mut v = Vec::with_capacity(VALUE_LEN);
        if !self.read(key, &mut v)? {
            return Ok(false);
        }
        match v.get_mut(field * FIELD_LEN..field * FIELD_LEN + bytes.len()) {
            Some(f) => f.copy_from_slice(bytes),
            None => return Ok(false),
        }
        self.write(key, &v)
    }
}

/// YCSB through `OrderedKv` alone (whole values).
macro_rules! ordered_kv_target {
    ($($t:ty),*) => {$(
        impl YcsbTarget for $t {
            fn read(&self, key: &[u8], out: &mut Vec<u8>) -> KvResult<bool> {
                self.get_into(key, out)
            }
            fn write(&self, key: &[u8], value: &[u8]) -> KvResult<bool> {
                self.update(key, value)
            }
            fn range(
                &self,
                start: &[u8],
                n: usize,
                f: &mut dyn FnMut(&[u8], &[u8]),
            ) -> KvResult<usize> {
                self.scan(start, n, f)
            }
            fn load_batch(&self, batch: &[(Vec<u8>, Vec<u8>)]) -> KvResult<()> {
                load_through_batch(self, batch)
            }
        }
    )*};
}

ordered_kv_target!(dyn OrderedKv + '_, crate::BTreeMapKv);

fn load_through_batch(
    kv: &(impl OrderedKv + ?Sized),
    batch: &[(Vec<u8>, Vec<u8>)],
) -> KvResult<()> {
    let mut b = WriteBatch::new();
    for (k, v) in batch {
        b.put(k, v);
    }
    kv.write_batch(&b)
}

/// The B+-tree on the buffer manager: fields read and updated in place.
impl YcsbTarget for ferrite_btree::BTree {
    fn read(&self, key: &[u8], out: &mut Vec<u8>) -> KvResult<bool> {
        self.get_into(key, out)
    }
    fn write(&self, key: &[u8], value: &[u8]) -> KvResult<bool> {
        self.update(key, value)
    }
    fn range(&self, start: &[u8], n: usize, f: &mut dyn FnMut(&[u8], &[u8])) -> KvResult<usize> {
        self.scan(start, n, f)
    }
    fn load_batch(&self, batch: &[(Vec<u8>, Vec<u8>)]) -> KvResult<()> {
        load_through_batch(self, batch)
    }
    fn read_field(&self, key: &[u8], field: usize, out: &mut Vec<u8>) -> KvResult<bool> {
        self.get_part(key, field * FIELD_LEN, FIELD_LEN, out)
    }
    fn write_field(&self, key: &[u8], field: usize, bytes: &[u8]) -> KvResult<bool> {
        self.update_part(key, field * FIELD_LEN, bytes)
    }
}

/// Records per load batch (one transaction each).
pub const LOAD_BATCH: usize = 256;

/// Loads records `0..records` (in id order, so random key order) in batches;
/// `progress(done)` after each batch. Returns the seconds it took.
pub fn load<T: YcsbTarget + ?Sized>(
    t: &T,
    records: u64,
    progress: &mut dyn FnMut(u64),
) -> KvResult<f64> {
    let t0 = Instant::now();
    let mut batch: Vec<(Vec<u8>, Vec<u8>)> = Vec::with_capacity(LOAD_BATCH);
    let mut v = Vec::new();
    for id in 0..records {
        record(id as u32, &mut v);
        batch.push((key(id as u32).to_vec(), v.clone()));
        if batch.len() == LOAD_BATCH || id + 1 == records {
            t.load_batch(&batch)?;
            batch.clear();
            progress(id + 1);
        }
    }
    Ok(t0.elapsed().as_secs_f64())
}

/// How long and what to run.
#[derive(Debug, Clone)]
pub struct RunSpec {
    pub workload: Workload,
    /// Records loaded (ids `0..records`).
    pub records: u64,
    /// Measured seconds (after the warm-up).
    pub seconds: f64,
    /// Stop the measurement after this many operations (0: no cap).
    pub max_ops: u64,
    /// Operations run before the measurement (to warm the caches).
    pub warmup_ops: u64,
    /// Stop the warm-up after this long even if `warmup_ops` are not done.
    pub warmup_seconds: f64,
    pub seed: u64,
    /// Throughput samples every this many ms (0: none), for ramp-up curves.
    pub timeline_ms: u64,
}

impl RunSpec {
    pub fn new(workload: Workload, records: u64, seconds: f64) -> RunSpec {
        RunSpec {
            workload,
            records,
            seconds,
            max_ops: 0,
            warmup_ops: 0,
            warmup_seconds: 0.0,
            seed: 42,
            timeline_ms: 0,
        }
    }
}

/// What a run measured.
#[derive(Debug, Clone, Default)]
pub struct RunStats {
    pub ops: u64,
    pub secs: f64,
    /// Million operations per second.
    pub mops: f64,
    pub p50_ns: f64,
    pub p99_ns: f64,
    /// Reads that returned another record's data (must be 0).
    pub wrong: u64,
    /// Reads of loaded records that found nothing (must be 0).
    pub missing: u64,
    /// (seconds since start, Mops/s in that interval).
    pub timeline: Vec<(f64, f64)>,
    /// The sampled latencies (ns, sorted) behind `p50_ns` and `p99_ns`.
    pub samples: Vec<u32>,
    /// CPU seconds the measuring thread got during the measurement (user and
    /// system; the store does all its work in that thread). Beside `secs` it
    /// says how much of the wall-clock time the thread ran, which other
    /// processes on a shared machine take away.
    pub cpu_secs: f64,
    /// Seconds the measuring thread was runnable but waited for a CPU (the
    /// kernel's run-queue delay, `/proc/thread-self/schedstat`; 0 where it
    /// is not available): what other processes took from the measurement.
    pub rq_wait_secs: f64,
}

/// Seconds the calling thread has waited on a run queue so far (runnable,
/// not running), from `/proc/thread-self/schedstat`; None where absent.
pub fn thread_rq_wait_secs() -> Option<f64> {
    let s = std::fs::read_to_string("/proc/thread-self/schedstat").ok()?;
    let ns: u64 = s.split_whitespace().nth(1)?.parse().ok()?;
    Some(ns as f64 * 1e-9)
}

/// CPU seconds of the calling thread so far (user and system).
pub fn thread_cpu_secs() -> f64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes one timespec through a valid pointer.
    let r = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    if r != 0 {
        return 0.0;
    }
    ts.tv_sec as f64 + ts.tv_nsec as f64 * 1e-9
}

/// Latency of every 8th operation is timed.
const SAMPLE_EVERY: u64 = 8;

struct Exec {
    val: Vec<u8>,
    field: [u8; FIELD_LEN],
    version: u32,
    wrong: u64,
    missing: u64,
    sink: u64,
}

/// Whether `f` is field `field` of record `id`.
#[inline]
fn is_field(f: &[u8], id: u32, field: usize) -> bool {
    f.len() == FIELD_LEN && f[..4] == id.to_le_bytes() && f[4] == field as u8
}

impl Exec {
    fn op<T: YcsbTarget + ?Sized>(&mut self, t: &T, op: YcsbOp) -> KvResult<()> {
        match op {
            YcsbOp::Read { id, field } => {
                if !t.read_field(&key(id), field, &mut self.val)? {
                    self.missing += 1;
                } else if !is_field(&self.val, id, field) {
                    self.wrong += 1;
                } else {
                    self.sink = self.sink.wrapping_add(self.val[9] as u64);
                }
            }
            YcsbOp::Update { id, field } => {
                self.version = self.version.wrapping_add(1);
                fill_field(id, field, self.version, &mut self.field);
                if !t.write_field(&key(id), field, &self.field)? {
                    self.missing += 1;
                }
            }
            YcsbOp::Scan { id, len, field } => {
                let (mut wrong, mut sink) = (0u64, 0u64);
                t.range(&key(id), len, &mut |_, v| match v
                    .get(field * FIELD_LEN..(field + 1) * FIELD_LEN)
                {
                    Some(f) if f[4] == field as u8 => sink = sink.wrapping_add(f[9] as u64),
                    _ => wrong += 1,
                })?;
                self.wrong += wrong;
                self.sink = self.sink.wrapping_add(sink);
            }
        }
        Ok(())
    }
}

fn percentile(sorted: &[u32], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let i = ((sorted.len() - 1) as f64 * p).round() as usize;
    sorted[i] as f64
}

/// Runs the warm-up, then measures `spec.seconds` of the workload on `t`.
pub fn run<T: YcsbTarget + ?Sized>(t: &T, spec: &RunSpec) -> KvResult<RunStats> {
    let mut gen = OpGen::new(spec.workload, spec.records, spec.seed);
    let mut ex = Exec {
        val: Vec::with_capacity(VALUE_LEN),
        field: [0; FIELD_LEN],
        version: 0,
        wrong: 0,
        missing: 0,
        sink: 0,
    };
    let w0 = Instant::now();
    let wlimit = Duration::from_secs_f64(spec.warmup_seconds.max(0.0));
    for i in 0..spec.warmup_ops {
        ex.op(t, gen.next_op())?;
        if i % 256 == 0 && w0.elapsed() >= wlimit {
            break;
        }
    }
    let (wrong0, missing0) = (ex.wrong, ex.missing);
    let limit = Duration::from_secs_f64(spec.seconds.max(0.0));
    let mut lat: Vec<u32> = Vec::new();
    let mut timeline = Vec::new();
    let tick = Duration::from_millis(spec.timeline_ms.max(1));
    let cpu0 = thread_cpu_secs();
    let rq0 = thread_rq_wait_secs();
    let t0 = Instant::now();
    let (mut last_t, mut last_ops) = (Duration::ZERO, 0u64);
    let mut ops = 0u64;
    loop {
        let op = gen.next_op();
        if ops.is_multiple_of(SAMPLE_EVERY) {
            let s = Instant::now();
            ex.op(t, op)?;
            lat.push(s.elapsed().as_nanos().min(u32::MAX as u128) as u32);
        } else {
            ex.op(t, op)?;
        }
        ops += 1;
        if spec.max_ops > 0 && ops >= spec.max_ops {
            break;
        }
        if ops.is_multiple_of(64) || spec.workload == Workload::Scan {
            let e = t0.elapsed();
            if spec.timeline_ms > 0 && e - last_t >= tick {
                let d = (e - last_t).as_secs_f64();
                timeline.push((e.as_secs_f64(), (ops - last_ops) as f64 / d / 1e6));
                last_t = e;
                last_ops = ops;
            }
            if e >= limit {
                break;
            }
        }
    }
    let secs = t0.elapsed().as_secs_f64();
    let cpu_secs = thread_cpu_secs() - cpu0;
    let rq_wait_secs = match (rq0, thread_rq_wait_secs()) {
        (Some(a), Some(b)) => (b - a).max(0.0),
        _ => 0.0,
    };
    std::hint::black_box(ex.sink);
    lat.sort_unstable();
    Ok(RunStats {
        ops,
        secs,
        mops: ops as f64 / secs / 1e6,
        p50_ns: percentile(&lat, 0.5),
        p99_ns: percentile(&lat, 0.99),
        wrong: ex.wrong - wrong0,
        missing: ex.missing - missing0,
        timeline,
        samples: lat,
        cpu_secs,
        rq_wait_secs,
    })
}

impl RunStats {
    /// The slices of one interleaved measurement as one run: counts and
    /// times summed, percentiles over every slice's samples (timelines are
    /// dropped: they belong to single runs).
    pub fn merge(parts: Vec<RunStats>) -> RunStats {
        let mut m = RunStats::default();
        for p in parts {
            m.ops += p.ops;
            m.secs += p.secs;
            m.wrong += p.wrong;
            m.missing += p.missing;
            m.cpu_secs += p.cpu_secs;
            m.rq_wait_secs += p.rq_wait_secs;
            m.samples.extend(p.samples);
        }
        m.samples.sort_unstable();
        m.mops = if m.secs > 0.0 {
            m.ops as f64 / m.secs / 1e6
        } else {
            0.0
        };
        m.p50_ns = percentile(&m.samples, 0.5);
        m.p99_ns = percentile(&m.samples, 0.99);
        m
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::BTreeMapKv;

    #[test]
    fn records_have_the_thesis_shape_and_check_their_fields() {
        let mut v = Vec::new();
        record(7, &mut v);
        assert_eq!((key(7).len(), v.len()), (4, 1000));
        for f in 0..FIELDS {
            assert!(field_ok(&v, 7, f));
            assert!(!field_ok(&v, 8, f));
        }
        let mut w = v.clone();
        fill_field(7, 3, 5, &mut w[300..400]);
        assert!(field_ok(&w, 7, 3));
        assert_ne!(w, v, "a new version changes the field");
        assert_eq!(w[..300], v[..300]);
        assert_eq!(w[400..], v[400..]);
    }

    #[test]
    fn workload_names_round_trip() {
        for w in [
            Workload::ReadOnly,
            Workload::Scan,
            Workload::ReadWrite { update_pct: 0 },
            Workload::ReadWrite { update_pct: 50 },
            Workload::ReadWrite { update_pct: 100 },
        ] {
            assert_eq!(Workload::parse(&w.name()), Some(w));
        }
        assert_eq!(Workload::parse("rw101"), None);
        assert_eq!(Workload::parse("nope"), None);
    }

    #[test]
    fn mixes_have_their_ratios_and_scans_their_lengths() {
        let mut g = OpGen::new(Workload::ReadWrite { update_pct: 30 }, 1000, 1);
        let n = 100_000;
        let upd = (0..n)
            .filter(|_| matches!(g.next_op(), YcsbOp::Update { .. }))
            .count();
        assert!((upd as f64 / n as f64 - 0.3).abs() < 0.01, "{upd}");
        let mut g = OpGen::new(Workload::Scan, 1000, 2);
        let lens: Vec<usize> = (0..10_000)
            .map(|_| match g.next_op() {
                YcsbOp::Scan { len, .. } => len,
                o => panic!("{o:?}"),
            })
            .collect();
        assert_eq!(*lens.iter().min().unwrap(), 1);
        assert_eq!(*lens.iter().max().unwrap(), MAX_SCAN);
        let mut g = OpGen::new(Workload::ReadOnly, 1000, 3);
        let mut top = 0;
        for _ in 0..100_000 {
            match g.next_op() {
                YcsbOp::Read { id, field } => {
                    assert!(id < 1000 && field < FIELDS);
                    top += (id == 0) as u32;
                }
                o => panic!("{o:?}"),
            }
        }
        // Zipf z=1 over 1000 ranks: rank 0 has probability 1/H(1000) = 13.4%.
        assert!((12_400..14_400).contains(&top), "{top}");
    }

    #[test]
    fn load_and_run_every_workload_on_an_ordered_kv() {
        let kv = BTreeMapKv::new();
        let mut last = 0;
        let secs = load(&kv, 1000, &mut |d| last = d).unwrap();
        assert!(secs >= 0.0);
        assert_eq!((last, kv.count()), (1000, 1000));
        for w in [
            Workload::ReadOnly,
            Workload::ReadWrite { update_pct: 50 },
            Workload::Scan,
        ] {
            let mut spec = RunSpec::new(w, 1000, 10.0);
            spec.max_ops = 2000;
            spec.warmup_ops = 100;
            let s = run(&kv, &spec).unwrap();
            assert_eq!(s.ops, 2000);
            assert_eq!((s.wrong, s.missing), (0, 0), "{w:?}");
            assert!(s.mops > 0.0);
        }
        // Updates changed fields but every record still checks.
        for id in 0..1000u32 {
            let v = kv.get(&key(id)).unwrap().unwrap();
            assert!((0..FIELDS).all(|f| field_ok(&v, id, f)));
        }
    }

    #[test]
    fn a_store_returning_wrong_records_is_caught() {
        let kv = BTreeMapKv::new();
        load(&kv, 100, &mut |_| {}).unwrap();
        let mut v = Vec::new();
        record(99, &mut v);
        kv.update(&key(0), &v).unwrap();
        let mut spec = RunSpec::new(Workload::ReadOnly, 100, 10.0);
        spec.max_ops = 5000;
        let s = run(&kv, &spec).unwrap();
        assert!(s.wrong > 0);
    }
}
