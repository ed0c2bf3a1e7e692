//! Quick single-process micro-benchmark of the index (not the official numbers:
//! those come from `ferrite bench`). Usage:
//! `cargo run --release -p ferrite-bench --example micro -- [records] [ops] [threads]`

use std::collections::BTreeMap;
use std::sync::RwLock;
use std::time::Instant;

use ferrite_index::{FerriteIndex, OrderedKv};
use ferrite_pm::persist;
use ferrite_pm::{Pool, PoolOptions};

fn mix(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

thread_local! {
    static KEY_LEN: usize = std::env::var("KEY").ok().and_then(|k| k.parse().ok()).unwrap_or(8);
}

/// Key of record `id`: 8 bytes big-endian, or (KEY=16/64) a string key of that
/// length ("key-" + zero-padded hex, PiBench-like).
fn key(id: u64) -> Vec<u8> {
    let len = KEY_LEN.with(|k| *k);
    if len == 8 {
        return mix(id).to_be_bytes().to_vec();
    }
    let mut k = format!("key-{:016x}", mix(id)).into_bytes();
    k.resize(len, b'.');
    k
}

/// Minor page faults of this process so far (Linux), to spot faulting phases.
fn minflt() -> u64 {
    std::fs::read_to_string("/proc/self/stat")
        .ok()
        .and_then(|s| {
            let rest = &s[s.rfind(')')? + 2..];
            rest.split_whitespace().nth(7)?.parse().ok()
        })
        .unwrap_or(0)
}

/// Runs `ops` calls of `f` over `threads` threads; Mops/s and the threads'
/// summed persistence counters.
fn run<F: Fn(u64, u64) + Sync>(threads: u64, ops: u64, f: F) -> (f64, persist::PersistStats) {
    let t0 = Instant::now();
    let stats = std::thread::scope(|s| {
        let hs: Vec<_> = (0..threads)
            .map(|t| {
                let f = &f;
                s.spawn(move || {
                    let s0 = persist::thread_stats();
                    for i in 0..ops / threads {
                        f(t, i * threads + t);
                    }
                    persist::thread_stats().since(s0)
                })
            })
            .collect();
        hs.into_iter()
            .map(|h| h.join().unwrap())
            .fold(persist::PersistStats::default(), |a, b| a + b)
    });
    (ops as f64 / t0.elapsed().as_secs_f64() / 1e6, stats)
}

struct Locked(RwLock<BTreeMap<Vec<u8>, [u8; 8]>>);

/// Runs the operations on `idx`; returns (lookup, insert, update, scan100) Mops/s.
fn bench(name: &str, idx: &dyn OrderedKv, n: u64, ops: u64, threads: u64) -> [f64; 4] {
    let t0 = Instant::now();
    let s0 = persist::thread_stats();
    for i in 0..n {
        idx.insert(&key(i), &i.to_le_bytes()).unwrap();
    }
    let st = persist::thread_stats().since(s0);
    println!(
        "{name}: load {n} in {:.2}s ({:.2} fences/insert, {:.2} lines/insert)",
        t0.elapsed().as_secs_f64(),
        st.fences as f64 / n as f64,
        st.flushed_lines as f64 / n as f64
    );
    let f0 = minflt();
    let (lookup, _) = run(threads, ops, |_, i| {
        let mut out = Vec::with_capacity(16);
        let id = mix(i ^ 0x55) % n;
        assert!(idx.get_into(&key(id), &mut out).unwrap());
    });
    let f1 = minflt();
    let (insert, st) = run(threads, ops, |_, i| {
        idx.insert(&key(n + i), &i.to_le_bytes()).unwrap();
    });
    let f2 = minflt();
    let (update, su) = run(threads, ops, |_, i| {
        let id = mix(i ^ 0x77) % n;
        idx.update(&key(id), &i.to_le_bytes()).unwrap();
    });
    let (scan, _) = run(threads, ops / 10, |_, i| {
        let id = mix(i ^ 0x99) % n;
        let mut c = 0;
        idx.scan(&key(id), 100, &mut |_, _| c += 1).unwrap();
    });
    println!(
        "{name} {threads}t: lookup {lookup:.2} insert {insert:.2} update {update:.2} scan100 {scan:.3} Mops/s; \
         insert: {:.3} fences/op {:.2} lines/op; update: {:.3} fences/op",
        st.fences as f64 / ops as f64,
        st.flushed_lines as f64 / ops as f64,
        su.fences as f64 / ops as f64
    );
    if std::env::var("MICRO_FAULTS").is_ok() {
        println!(
            "{name}: minor faults during lookup {}, insert {}, update {}",
            f1 - f0,
            f2 - f1,
            minflt() - f2
        );
    }
    [lookup, insert, update, scan]
}

impl OrderedKv for Locked {
    fn name(&self) -> &str {
        "btreemap"
    }
    fn get_into(&self, key: &[u8], out: &mut Vec<u8>) -> ferrite_index::KvResult<bool> {
        match self.0.read().unwrap().get(key) {
            Some(v) => {
                out.clear();
                out.extend_from_slice(v);
                Ok(true)
            }
            None => Ok(false),
        }
    }
    fn insert(&self, key: &[u8], value: &[u8]) -> ferrite_index::KvResult<bool> {
        let mut m = self.0.write().unwrap();
        if m.contains_key(key) {
            return Ok(false);
        }
        m.insert(key.to_vec(), value.try_into().unwrap());
        Ok(true)
    }
    fn update(&self, key: &[u8], value: &[u8]) -> ferrite_index::KvResult<bool> {
        Ok(self
            .0
            .write()
            .unwrap()
            .get_mut(key)
            .map(|v| *v = value.try_into().unwrap())
            .is_some())
    }
    fn upsert(&self, key: &[u8], value: &[u8]) -> ferrite_index::KvResult<bool> {
        let v = value.try_into().map_err(|_| bad_value())?;
        Ok(self.0.write().unwrap().insert(key.to_vec(), v).is_none())
    }
    fn remove(&self, key: &[u8]) -> ferrite_index::KvResult<bool> {
        Ok(self.0.write().unwrap().remove(key).is_some())
    }
    fn count(&self) -> usize {
        self.0.read().unwrap().len()
    }
    fn scan(
        &self,
        start: &[u8],
        n: usize,
        f: &mut dyn FnMut(&[u8], &[u8]),
    ) -> ferrite_index::KvResult<usize> {
        let m = self.0.read().unwrap();
        let mut c = 0;
        for (a, b) in m.range(start.to_vec()..).take(n) {
            f(a, b);
            c += 1;
        }
        Ok(c)
    }
    fn write_batch(&self, b: &ferrite_index::WriteBatch) -> ferrite_index::KvResult<()> {
        // Validate first so a bad value leaves the batch unapplied (all-or-nothing).
        if b.ops
            .iter()
            .any(|op| matches!(op, ferrite_index::BatchOp::Put { value, .. } if value.len() != 8))
        {
            return Err(bad_value());
        }
        let mut m = self.0.write().unwrap();
        for op in &b.ops {
            match op {
                ferrite_index::BatchOp::Put { key, value } => {
                    m.insert(
                        key.clone(),
                        value.as_slice().try_into().map_err(|_| bad_value())?,
                    );
                }
                ferrite_index::BatchOp::Delete { key } => {
                    m.remove(key);
                }
            }
        }
        Ok(())
    }
    fn cursor(&self) -> ferrite_index::KvResult<Box<dyn ferrite_index::KvCursor + '_>> {
        Err(ferrite_index::KvError::Backend(
            "the micro benchmark's BTreeMap baseline has no cursor (use ferrite-bench's)".into(),
        ))
    }
}

fn bad_value() -> ferrite_index::KvError {
    ferrite_index::KvError::Backend("the micro baseline stores 8-byte values only".into())
}

fn main() {
    let args: Vec<u64> = std::env::args()
        .skip(1)
        .map(|a| a.parse().unwrap())
        .collect();
    let n = args.first().copied().unwrap_or(1_000_000);
    let ops = args.get(1).copied().unwrap_or(1_000_000);
    let threads = args.get(2).copied().unwrap_or(1);
    let which = std::env::var("MICRO").unwrap_or_else(|_| "ferrite,dram,btree".into());
    let mut results: Vec<(String, [f64; 4])> = Vec::new();
    if which.contains("ferrite") {
        let path = format!("/dev/shm/ferrite-micro-{}.pool", std::process::id());
        let size = (n + 2 * ops) * 64 + (256 << 20);
        let pool = Pool::create(&path, size, &PoolOptions::default()).unwrap();
        let _ = std::fs::remove_file(&path); // unlinked; the mapping stays
        let idx = FerriteIndex::open_or_create(&pool, "micro").unwrap();
        results.push(("ferrite".into(), bench("ferrite", &idx, n, ops, threads)));
        let m = idx.memory_usage();
        println!(
            "ferrite memory: {:.1} B/record DRAM, {:.1} B/record PM ({} leaves)",
            m.dram_bytes as f64 / idx.count() as f64,
            m.pm_bytes as f64 / idx.count() as f64,
            m.leaves
        );
        drop(idx);
        let t0 = Instant::now();
        let idx = FerriteIndex::open_or_create(&pool, "micro").unwrap();
        println!(
            "reopen: {:?} (rebuild {:?}, {} leaves, {} keys)",
            t0.elapsed(),
            idx.rebuild_stats().duration,
            idx.rebuild_stats().leaves,
            idx.rebuild_stats().keys
        );
    }
    if which.contains("dram") {
        let idx = FerriteIndex::volatile((n + 2 * ops) * 64 + (256 << 20)).unwrap();
        results.push((
            "ferrite-dram".into(),
            bench("ferrite-dram", &idx, n, ops, threads),
        ));
    }
    if which.contains("btree") {
        let idx = Locked(RwLock::new(BTreeMap::new()));
        results.push(("btreemap".into(), bench("btreemap", &idx, n, ops, threads)));
    }
    if let Ok(path) = std::env::var("MICRO_SVG") {
        let cats: Vec<String> = ["lookup", "insert", "update", "scan-100 (x10)"]
            .iter()
            .map(|s| s.to_string())
            .collect();
        let series: Vec<(String, Vec<f64>)> = results
            .iter()
            .map(|(n, r)| (n.clone(), vec![r[0], r[1], r[2], r[3] * 10.0]))
            .collect();
        let title = format!(
            "ferrite-index micro: {n} records, {}-byte keys, {threads} thread(s)",
            KEY_LEN.with(|k| *k)
        );
        std::fs::write(
            &path,
            ferrite_report::chart::bar_chart(&title, "Mops/s", &cats, &series),
        )
        .unwrap();
        println!("chart: {path}");
    }
}
