//! The `index` crash-test target: workloads that split leaves, merge sparse
//! ones, empty and unlink them, update values across length classes and apply
//! write batches, cut at every fence. The checker is the generic
//! [`ferrite_kv::oracle`]: it reopens each crash image through the normal open
//! path and compares the index with the acknowledged operations (the one in
//! flight may be absent or complete, never partial); the index-specific parts
//! ([`IndexRecovery`]) are the open, the structure check, and the space
//! accounting that exhausts the heap to prove that no block leaked or is used
//! twice.

use ferrite_kv::oracle::{self, apply, Model, Op, Recovery};
use ferrite_kv::KvResult;
use ferrite_pm::rng::SplitMix;
use ferrite_pm::{explore, CrashConfig, CrashReport, Journal, JournalHandle, Pool};

use ferrite_index::FerriteIndex;
use ferrite_kv::{OrderedKv, WriteBatch};

/// Object name the crash workloads use.
pub const CRASH_OBJECT: &str = "crash-index";

/// The keys a workload uses.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Keys {
    /// 8-byte big-endian integers.
    Fixed,
    /// A mix of empty, short, 8-byte, 12-byte, 40-byte and 20–27-byte keys.
    Variable,
    /// Mostly 17–24-byte keys (long entries, format version 2) beside 25–28-byte
    /// ones with the same first 16 bytes (out of line) and 8-byte ones, on an
    /// index tagged version 1 when the workload starts (so the retag before the
    /// first long entry is inside the crash window too).
    Long,
}

/// The common first 16 bytes of the workloads' long keys.
const LONG_PREFIX: &str = "0123456789abcdef";

/// Key `k` of a workload.
pub fn crash_key(k: u64, keys: Keys) -> Vec<u8> {
    match keys {
        Keys::Fixed => (k * 7919).to_be_bytes().to_vec(),
        Keys::Variable => match k % 6 {
            0 if k == 0 => Vec::new(),
            0 => vec![(k >> 8) as u8, k as u8],
            1 => (k * 7919).to_be_bytes().to_vec(),
            2 => format!("key-{k:08}").into_bytes(),
            3 => format!("a-rather-long-key-{k:012}-with-a-tail").into_bytes(),
            4 => format!("{LONG_PREFIX}{k:0w$}", w = 4 + (k % 8) as usize).into_bytes(),
            _ => vec![0, 0, k as u8, 0, (k >> 8) as u8],
        },
        Keys::Long if k.is_multiple_of(5) => (k * 7919).to_be_bytes().to_vec(),
        Keys::Long => format!("{LONG_PREFIX}{k:0w$}", w = 1 + (k % 12) as usize).into_bytes(),
    }
}

fn crash_value(version: u64, rng: &mut SplitMix, keys: Keys) -> Vec<u8> {
    let len = if keys != Keys::Fixed {
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
    keys: Keys,
) -> Result<(), String> {
    j.begin(Op::Setup);
    let mut idx = FerriteIndex::open_or_create(pool, CRASH_OBJECT).map_err(|e| e.to_string())?;
    if keys == Keys::Long {
        drop(idx);
        let id = pool
            .object(CRASH_OBJECT, ferrite_index::INDEX_TYPE)
            .map_err(|e| e.to_string())?;
        pool.set_root(id, 2, ferrite_index::FORMAT_TAG_V1)
            .map_err(|e| e.to_string())?;
        idx = FerriteIndex::open_or_create(pool, CRASH_OBJECT).map_err(|e| e.to_string())?;
    }
    j.ack();
    drive(cfg, &idx, j, keys)
}

/// Where the workload records its operations.
pub enum Recorder<'a> {
    Journal(&'a JournalHandle<Op>),
    /// Nowhere (the workload-shape test runs without a crash simulator).
    #[cfg_attr(not(test), allow(dead_code))]
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
    keys: Keys,
) -> Result<(), String> {
    let j: Recorder<'a> = j.into();
    let e = |e: ferrite_kv::KvError| e.to_string();
    let mut model = Model::new();
    let mut rng = SplitMix(
        cfg.seed
            ^ match keys {
                Keys::Fixed => 0,
                Keys::Variable => 0xabcd,
                Keys::Long => 0x1234,
            },
    );
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
        let key = crash_key(k, keys);
        let value = crash_value(i + 1, &mut rng, keys);
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
                let kk = crash_key((k + t * 13) % nkeys, keys);
                if rng.below(3) == 0 {
                    b.delete(&kk);
                } else {
                    b.put(&kk, &crash_value(i * 8 + t + 1, &mut rng, keys));
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

/// The index's part of the recovery check: open the crash image through the
/// normal open path (which runs recovery), check the leaf chain against the
/// inner tree, and account for every block of the index's heap.
pub struct IndexRecovery {
    pub pool: Pool,
}

impl Recovery for IndexRecovery {
    type Store = FerriteIndex;

    fn open(&mut self) -> KvResult<FerriteIndex> {
        let idx = FerriteIndex::open_or_create(&self.pool, CRASH_OBJECT);
        // What follows (scans, structure and space checks) is not recovery.
        ferrite_pm::crash::recovered(&self.pool);
        idx
    }

    fn check_structure(&mut self, idx: &FerriteIndex) -> Result<(), String> {
        idx.check_structure().map(|_| ())
    }

    fn check_space(&mut self, idx: &FerriteIndex) -> Result<(), String> {
        idx.exhaust_and_account()
    }
}

/// Checks a recovered image against the journal (the generic oracle with the
/// index's [`IndexRecovery`]).
pub fn crash_check(pool: Pool, j: &Journal<Op>) -> Result<oracle::Model, String> {
    oracle::check_recovered(IndexRecovery { pool }, &j.acked, j.in_flight.as_ref())
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
        move |p, j| crash_workload(&c1, p, j, Keys::Fixed),
        crash_check,
    )?;
    let c2 = c.clone();
    r.absorb(explore(
        "index",
        &c,
        move |p, j| crash_workload(&c2, p, j, Keys::Variable),
        crash_check,
    )?);
    Ok(r)
}

/// The `index-long` target: long entries (keys of 17 to 24 bytes inline,
/// format version 2) beside out-of-line keys that share their first 16 bytes,
/// starting from an index tagged version 1.
pub fn long_target(cfg: &CrashConfig) -> ferrite_pm::Result<CrashReport> {
    let mut c = cfg.clone();
    if cfg.ops == CrashConfig::default().ops {
        c.ops = DEFAULT_OPS;
    }
    let c1 = c.clone();
    explore(
        "index-long",
        &c,
        move |p, j| crash_workload(&c1, p, j, Keys::Long),
        crash_check,
    )
}

/// The `index` crash target at its default configuration (>= 10,000 states).
#[cfg(test)]
mod tests {
    use super::*;

    /// Runs the workload on a volatile pool and returns the index's structure
    /// counters (splits, unlinked leaves, merges), to show that it exercises all.
    fn crash_workload_shape(cfg: &CrashConfig, keys: Keys) -> Result<(u64, u64, u64), String> {
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
        drive(&c, &idx, &Recorder::None, keys)?;
        Ok(idx.structure_stats())
    }

    /// A split whose new entry lands in the very slot a moved entry with the
    /// same fingerprint and lengths vacated, in a line whose other entries
    /// stay, leaves that line's header word as it was, and the line must still
    /// be written back. Keys k0 < … < k23 fill the head leaf slot by slot with
    /// k23 in slot 11 (line 3 holds k9, k10, k23); the split moves k12..k23, so
    /// slot 11 is the first it frees, and the 25th key lies below the split key
    /// with k23's fingerprint. Power is cut at every fence and the
    /// acknowledged key must survive. Before the split wrote back the new
    /// entry's line regardless, this lost it.
    #[test]
    fn a_split_that_refills_a_vacated_slot_persists_the_new_entry() {
        let k: Vec<u64> = (1..=24).map(|i| i * 1000).collect();
        let fp = ferrite_index::fingerprint(&k[23].to_be_bytes());
        let x = (k[11] + 1..k[12])
            .find(|x| ferrite_index::fingerprint(&x.to_be_bytes()) == fp)
            .expect("a key with that fingerprint");
        let mut keys: Vec<u64> = k[..11].to_vec();
        keys.push(k[23]);
        keys.extend(&k[11..23]);
        keys.push(x);
        let workload = move |pool: &Pool, j: &JournalHandle<Op>| {
            j.begin(Op::Setup);
            let idx =
                FerriteIndex::open_or_create(pool, CRASH_OBJECT).map_err(|e| e.to_string())?;
            j.ack();
            for (i, k) in keys.iter().enumerate() {
                let (k, v) = (k.to_be_bytes().to_vec(), (i as u64).to_le_bytes().to_vec());
                j.begin(Op::Put(k.clone(), v.clone()));
                if !idx.insert(&k, &v).map_err(|e| e.to_string())? {
                    return Err(format!("insert of {k:x?} refused"));
                }
                j.ack();
            }
            match idx.structure_stats().0 {
                1 => Ok(()),
                n => Err(format!("{n} splits, not one")),
            }
        };
        let cfg = CrashConfig {
            seeds: 2,
            ..CrashConfig::default()
        };
        let r = explore("index", &cfg, workload, crash_check).unwrap();
        assert!(r.states > 25, "{} states", r.states);
        assert_eq!(r.violations, 0, "{:?}", r.examples);
    }

    #[test]
    fn crash_workloads_split_unlink_and_merge_leaves() {
        for keys in [Keys::Fixed, Keys::Variable, Keys::Long] {
            let (splits, unlinks, merges) =
                crash_workload_shape(&CrashConfig::default(), keys).unwrap();
            eprintln!("{keys:?}: {splits} splits, {unlinks} unlinked leaves, {merges} merges");
            assert!(
                splits >= 5 && unlinks >= 2 && merges >= 2,
                "{splits} splits, {unlinks} unlinks, {merges} merges"
            );
        }
    }
}
