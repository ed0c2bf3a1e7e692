//! The `index` crash-test target: workloads that split leaves, merge sparse
//! ones, empty and unlink them, update values across length classes and apply
//! write batches, cut at every fence; the checker reopens each crash image through the normal
//! open path and compares it with a `BTreeMap` oracle of the acknowledged
//! operations (the one in flight may be absent or complete, never partial),
//! then exhausts the heap to prove that no block leaked or is used twice.

use std::collections::BTreeMap;

use ferrite_pm::sim::SplitMix;
use ferrite_pm::{explore, CrashConfig, CrashReport, Journal, JournalHandle, Pool};

use crate::kv::{BatchOp, OrderedKv, WriteBatch};
use crate::FerriteIndex;

/// Object name the crash workloads use.
pub const CRASH_OBJECT: &str = "crash-index";

/// Operations as the oracle sees them (their effect).
#[derive(Debug, Clone)]
pub enum Op {
    Setup,
    Put(Vec<u8>, Vec<u8>),
    Del(Vec<u8>),
    Batch(Vec<BatchOp>),
    /// An operation that must not change anything (insert of an existing key,
    /// update or removal of an absent one).
    Nop,
}

type Model = BTreeMap<Vec<u8>, Vec<u8>>;

fn apply(m: &mut Model, op: &Op) {
    match op {
        Op::Setup | Op::Nop => {}
        Op::Put(k, v) => {
            m.insert(k.clone(), v.clone());
        }
        Op::Del(k) => {
            m.remove(k);
        }
        Op::Batch(ops) => {
            for o in ops {
                match o {
                    BatchOp::Put { key, value } => {
                        m.insert(key.clone(), value.clone());
                    }
                    BatchOp::Delete { key } => {
                        m.remove(key);
                    }
                }
            }
        }
    }
}

/// Key `k` of a workload: 8-byte big-endian integers, or (variable mode) a mix
/// of empty, short, 8-byte, 12-byte and 40-byte keys.
pub fn crash_key(k: u64, variable: bool) -> Vec<u8> {
    if !variable {
        return (k * 7919).to_be_bytes().to_vec();
    }
    match k % 5 {
        0 if k == 0 => Vec::new(),
        0 => vec![(k >> 8) as u8, k as u8],
        1 => (k * 7919).to_be_bytes().to_vec(),
        2 => format!("key-{k:08}").into_bytes(),
        3 => format!("a-rather-long-key-{k:012}-with-a-tail").into_bytes(),
        _ => vec![0, 0, k as u8, 0, (k >> 8) as u8],
    }
}

fn crash_value(version: u64, rng: &mut SplitMix, variable: bool) -> Vec<u8> {
    let len = if variable {
        [0usize, 3, 8, 8, 20, 100, 900][rng.below(7) as usize]
    } else {
        8
    };
    (0..len)
        .map(|i| (version * 31 + i as u64 * 7) as u8)
        .collect()
}

/// Runs `ops` operations; phases grow the key set (splits), churn it (sparse
/// leaves merge), and shrink it in key order (sparse leaves merge; with
/// merging off every other time, empty leaves are unlinked).
pub fn crash_workload(
    cfg: &CrashConfig,
    pool: &Pool,
    j: &JournalHandle<Op>,
    variable: bool,
) -> Result<(), String> {
    j.begin(Op::Setup);
    let idx = FerriteIndex::open_or_create(pool, CRASH_OBJECT).map_err(|e| e.to_string())?;
    j.ack();
    drive(cfg, &idx, j, variable)
}

/// Runs the workload on a volatile pool and returns the index's structure
/// counters (splits, unlinked leaves, merges), to show that it exercises all.
pub fn crash_workload_shape(cfg: &CrashConfig, variable: bool) -> Result<(u64, u64, u64), String> {
    let pool = Pool::create_volatile(
        cfg.pool_size,
        &ferrite_pm::PoolOptions {
            chunk_size: cfg.chunk_size,
            ..Default::default()
        },
    )
    .map_err(|e| e.to_string())?;
    let idx = FerriteIndex::open_or_create(&pool, CRASH_OBJECT).map_err(|e| e.to_string())?;
    let mut c = cfg.clone();
    if cfg.ops == CrashConfig::default().ops {
        c.ops = DEFAULT_OPS;
    }
    drive(&c, &idx, &Recorder::None, variable)?;
    Ok(idx.structure_stats())
}

/// Where the workload records its operations.
pub enum Recorder<'a> {
    Journal(&'a JournalHandle<Op>),
    None,
}

impl Recorder<'_> {
    fn begin(&self, op: Op) {
        if let Recorder::Journal(j) = self {
            j.begin(op);
        }
    }
    fn ack(&self) {
        if let Recorder::Journal(j) = self {
            j.ack();
        }
    }
}

impl<'a> From<&'a JournalHandle<Op>> for Recorder<'a> {
    fn from(j: &'a JournalHandle<Op>) -> Self {
        Recorder::Journal(j)
    }
}

impl<'a> From<&'a Recorder<'a>> for Recorder<'a> {
    fn from(r: &'a Recorder<'a>) -> Self {
        match r {
            Recorder::Journal(j) => Recorder::Journal(j),
            Recorder::None => Recorder::None,
        }
    }
}

fn drive<'a>(
    cfg: &CrashConfig,
    idx: &FerriteIndex,
    j: impl Into<Recorder<'a>>,
    variable: bool,
) -> Result<(), String> {
    let j: Recorder<'a> = j.into();
    let e = |e: crate::KvError| e.to_string();
    let mut model = Model::new();
    let mut rng = SplitMix(cfg.seed ^ if variable { 0xabcd } else { 0 });
    let nkeys = 160u64;
    let mut sweep = 0u64;
    for i in 0..cfg.ops as u64 {
        let phase = (i / 150) % 3;
        // Every other shrinking phase runs without merges, so that leaves also
        // empty and are unlinked (with merges a sparse leaf rarely empties).
        idx.set_leaf_merging(phase != 2 || (i / 450) % 2 == 0);
        let r = rng.below(100);
        let k = if phase == 2 {
            sweep = (sweep + 1) % nkeys;
            sweep
        } else {
            rng.below(nkeys)
        };
        let key = crash_key(k, variable);
        let value = crash_value(i + 1, &mut rng, variable);
        let present = model.contains_key(&key);
        let (put_p, del_p) = match phase {
            0 => (80, 90),
            1 => (50, 80),
            _ => (0, 97),
        };
        let op = if r < put_p {
            match r % 3 {
                0 => {
                    let eff = if present {
                        Op::Nop
                    } else {
                        Op::Put(key.clone(), value.clone())
                    };
                    j.begin(eff.clone());
                    let got = idx.insert(&key, &value).map_err(e)?;
                    if got == present {
                        return Err(format!("insert returned {got} for present={present}"));
                    }
                    eff
                }
                1 => {
                    let eff = if present {
                        Op::Put(key.clone(), value.clone())
                    } else {
                        Op::Nop
                    };
                    j.begin(eff.clone());
                    let got = idx.update(&key, &value).map_err(e)?;
                    if got != present {
                        return Err(format!("update returned {got} for present={present}"));
                    }
                    eff
                }
                _ => {
                    let eff = Op::Put(key.clone(), value.clone());
                    j.begin(eff.clone());
                    let got = idx.upsert(&key, &value).map_err(e)?;
                    if got == present {
                        return Err(format!("upsert returned {got} for present={present}"));
                    }
                    eff
                }
            }
        } else if r < del_p {
            let eff = if present {
                Op::Del(key.clone())
            } else {
                Op::Nop
            };
            j.begin(eff.clone());
            let got = idx.remove(&key).map_err(e)?;
            if got != present {
                return Err(format!("remove returned {got} for present={present}"));
            }
            eff
        } else {
            let mut b = WriteBatch::new();
            for t in 0..2 + rng.below(3) {
                let kk = crash_key((k + t * 13) % nkeys, variable);
                if rng.below(3) == 0 {
                    b.delete(&kk);
                } else {
                    b.put(&kk, &crash_value(i * 8 + t + 1, &mut rng, variable));
                }
            }
            let eff = Op::Batch(b.ops.clone());
            j.begin(eff.clone());
            idx.write_batch(&b).map_err(e)?;
            eff
        };
        j.ack();
        apply(&mut model, &op);
    }
    Ok(())
}

fn describe(got: &Model, want: &Model) -> String {
    for (k, v) in want {
        match got.get(k) {
            None => return format!("acknowledged key {k:?} is missing"),
            Some(g) if g != v => return format!("key {k:?} has value {g:?}, acknowledged {v:?}"),
            _ => {}
        }
    }
    for k in got.keys() {
        if !want.contains_key(k) {
            return format!("key {k:?} is present but was never acknowledged");
        }
    }
    "contents differ".into()
}

/// Checks a recovered image against the journal.
pub fn crash_check(pool: Pool, j: &Journal<Op>) -> Result<(), String> {
    let mut before = Model::new();
    for op in &j.acked {
        apply(&mut before, op);
    }
    let after = j.in_flight.as_ref().map(|op| {
        let mut a = before.clone();
        apply(&mut a, op);
        a
    });
    let idx = FerriteIndex::open_or_create(&pool, CRASH_OBJECT)
        .map_err(|e| format!("reopen failed: {e}"))?;
    let mut got = Model::new();
    idx.scan(&[], usize::MAX, &mut |k, v| {
        got.insert(k.to_vec(), v.to_vec());
    })
    .map_err(|e| e.to_string())?;
    if got != before && after.as_ref() != Some(&got) {
        let msg = describe(&got, &before);
        return Err(match &j.in_flight {
            Some(op) => format!("{msg} (in flight: {op:?})"),
            None => msg,
        });
    }
    for (k, v) in &got {
        match idx.get(k) {
            Ok(Some(x)) if &x == v => {}
            other => return Err(format!("get({k:?}) = {other:?}, scan saw {v:?}")),
        }
    }
    if idx.count() != got.len() {
        return Err(format!("count {} != {} keys", idx.count(), got.len()));
    }
    idx.exhaust_and_account()
}

/// Operations per workload when the caller passes the generic default.
pub const DEFAULT_OPS: usize = 2400;

/// The `index` target: an 8-byte-key workload and a variable-length one.
pub fn index_target(cfg: &CrashConfig) -> ferrite_pm::Result<CrashReport> {
    let mut c = cfg.clone();
    if cfg.ops == CrashConfig::default().ops {
        c.ops = DEFAULT_OPS;
    }
    let c1 = c.clone();
    let mut r = explore(
        "index",
        &c,
        move |p, j| crash_workload(&c1, p, j, false),
        crash_check,
    )?;
    let c2 = c.clone();
    r.absorb(explore(
        "index",
        &c,
        move |p, j| crash_workload(&c2, p, j, true),
        crash_check,
    )?);
    Ok(r)
}
