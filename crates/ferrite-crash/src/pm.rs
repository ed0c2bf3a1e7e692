//! Crash-test targets of the PM layer: the allocator (through [`SlotTable`]) and
//! the root directory.

use std::collections::BTreeMap;

use ferrite_pm::account::exhaust_and_account;
use ferrite_pm::rng::SplitMix;
use ferrite_pm::{
    explore, CrashConfig, CrashReport, Journal, JournalHandle, PmError, Pool, Result,
};
use ferrite_testkit::{SlotTable, SlotValue, SLOT_TABLE_TYPE};

/// Operations of the allocator workload.
#[derive(Debug, Clone)]
pub enum SlotOp {
    Setup,
    Publish {
        slot: usize,
        version: u64,
        len: usize,
    },
    Clear {
        slot: usize,
    },
    ClearThenPublish {
        clear: usize,
        slot: usize,
        version: u64,
        len: usize,
    },
}

const SLOTS: usize = 48;
const LENS: [usize; 10] = [8, 32, 100, 200, 224, 700, 2000, 4000, 9000, 40000];

/// The allocator workload: publish, replace and clear blocks of many sizes
/// (small classes and multi-chunk large blocks).
pub fn slot_workload(
    cfg: &CrashConfig,
    pool: &Pool,
    j: &JournalHandle<SlotOp>,
) -> std::result::Result<(), String> {
    let e = |e: PmError| e.to_string();
    j.begin(SlotOp::Setup);
    let t = SlotTable::open_or_create(pool, "alloc-test", SLOTS).map_err(e)?;
    j.ack();
    let mut rng = SplitMix(cfg.seed);
    let mut full = [false; SLOTS];
    for version in 1..=cfg.ops as u64 {
        let slot = rng.below(SLOTS as u64) as usize;
        let other = rng.below(SLOTS as u64) as usize;
        if full[slot] && rng.below(3) == 0 {
            j.begin(SlotOp::Clear { slot });
            t.clear(slot).map_err(e)?;
            full[slot] = false;
        } else if full[other] && other != slot && rng.below(3) == 0 {
            let len = LENS[rng.below(LENS.len() as u64) as usize];
            j.begin(SlotOp::ClearThenPublish {
                clear: other,
                slot,
                version,
                len,
            });
            match t.clear_then_publish(other, slot, version, len) {
                Ok(()) => {
                    full[other] = false;
                    full[slot] = true;
                }
                Err(PmError::PoolFull { .. }) => {
                    // The clear happened; record it as such.
                    full[other] = false;
                    j.abandon();
                    j.begin(SlotOp::Clear { slot: other });
                }
                Err(err) => return Err(err.to_string()),
            }
        } else {
            let len = LENS[rng.below(LENS.len() as u64) as usize];
            j.begin(SlotOp::Publish { slot, version, len });
            match t.publish(slot, version, len) {
                Ok(()) => full[slot] = true,
                Err(PmError::PoolFull { .. }) => {
                    j.abandon();
                    continue;
                }
                Err(err) => return Err(err.to_string()),
            }
        }
        j.ack();
    }
    Ok(())
}

/// Checks a recovered slot table against the journal, then exhausts the pool to
/// prove that no block leaked and none is handed out twice.
pub fn slot_check(
    pool: Pool,
    j: &Journal<SlotOp>,
) -> std::result::Result<Vec<Option<SlotValue>>, String> {
    let setup_acked = !j.acked.is_empty();
    let mut expect: BTreeMap<usize, Option<SlotValue>> = BTreeMap::new();
    for op in &j.acked {
        match *op {
            SlotOp::Setup => {}
            SlotOp::Publish { slot, version, len } => {
                expect.insert(slot, Some(SlotValue { version, len }));
            }
            SlotOp::Clear { slot } => {
                expect.insert(slot, None);
            }
            SlotOp::ClearThenPublish {
                clear,
                slot,
                version,
                len,
            } => {
                expect.insert(clear, None);
                expect.insert(slot, Some(SlotValue { version, len }));
            }
        }
    }
    let exists = pool.object("alloc-test", SLOT_TABLE_TYPE).is_ok();
    if !exists {
        ferrite_pm::crash::recovered(&pool);
        return if setup_acked {
            Err("acknowledged table is missing".into())
        } else {
            Ok(Vec::new())
        };
    }
    let id = pool
        .object("alloc-test", SLOT_TABLE_TYPE)
        .map_err(|e| e.to_string())?;
    if setup_acked && pool.root(id, 0) == 0 {
        return Err("acknowledged table has no root block".into());
    }
    let t = SlotTable::open_or_create(&pool, "alloc-test", SLOTS)
        .map_err(|e| format!("reopen: {e}"))?;
    ferrite_pm::crash::recovered(&pool);
    let mut live: Vec<(u64, u64)> = vec![(
        t.root_block(),
        t.heap().block_size(t.root_block()).unwrap_or(0) as u64,
    )];
    let mut found = Vec::with_capacity(t.slots());
    for slot in 0..t.slots() {
        let got = t.read(slot)?;
        found.push(got);
        let want = expect.get(&slot).copied().flatten();
        let in_flight_ok = match &j.in_flight {
            Some(SlotOp::Publish {
                slot: s,
                version,
                len,
            }) if *s == slot => {
                got == Some(SlotValue {
                    version: *version,
                    len: *len,
                })
            }
            Some(SlotOp::Clear { slot: s }) if *s == slot => got.is_none(),
            Some(SlotOp::ClearThenPublish { clear, .. }) if *clear == slot => got.is_none(),
            Some(SlotOp::ClearThenPublish {
                slot: s,
                version,
                len,
                ..
            }) if *s == slot => {
                got == Some(SlotValue {
                    version: *version,
                    len: *len,
                })
            }
            _ => false,
        };
        if got != want && !in_flight_ok {
            return Err(format!("slot {slot}: found {got:?}, acknowledged {want:?}"));
        }
        let off = t.slot(slot);
        if off != 0 {
            live.push((off, t.heap().block_size(off).unwrap_or(0) as u64));
        }
    }
    exhaust_and_account(&pool, t.heap(), live)?;
    Ok(found)
}

pub fn allocator_target(cfg: &CrashConfig) -> Result<CrashReport> {
    let c = cfg.clone();
    explore(
        "allocator",
        cfg,
        move |p, j| slot_workload(&c, p, j),
        slot_check,
    )
}

/// Default configuration of the allocator crash test: every fence, 4 images per
/// point, a 1 MiB pool of 16 KiB chunks so large blocks and exhaustion are exercised.
pub fn allocator_default_config() -> CrashConfig {
    CrashConfig {
        pool_size: 1 << 20,
        chunk_size: ferrite_pm::layout::MIN_CHUNK,
        ops: 1400,
        ..CrashConfig::default()
    }
}

/// Operations of the directory workload.
#[derive(Debug, Clone)]
pub enum DirOp {
    /// Create table `name` (if absent) and publish `version` in slot 0.
    Publish { name: usize, version: u64 },
    /// Delete table `name` and free its chunks.
    Delete { name: usize },
}

const DIR_NAMES: usize = 6;

fn dir_name(i: usize) -> String {
    format!("table-{i}")
}

/// Creates, fills and deletes objects: crash points fall inside object creation
/// and deletion as well as chunk claims and releases.
pub fn directory_workload(
    cfg: &CrashConfig,
    pool: &Pool,
    j: &JournalHandle<DirOp>,
) -> std::result::Result<(), String> {
    let mut rng = SplitMix(cfg.seed ^ 0xd1);
    let mut exists = [false; DIR_NAMES];
    for version in 1..=cfg.ops as u64 {
        let name = rng.below(DIR_NAMES as u64) as usize;
        if exists[name] && rng.below(3) == 0 {
            j.begin(DirOp::Delete { name });
            pool.delete_object(&dir_name(name))
                .map_err(|e| e.to_string())?;
            exists[name] = false;
        } else {
            j.begin(DirOp::Publish { name, version });
            let t =
                SlotTable::open_or_create(pool, &dir_name(name), 4).map_err(|e| e.to_string())?;
            let len = LENS[rng.below(LENS.len() as u64) as usize];
            match t.publish(0, version, len) {
                Ok(()) => exists[name] = true,
                Err(PmError::PoolFull { .. }) => {
                    j.abandon();
                    continue;
                }
                Err(e) => return Err(e.to_string()),
            }
        }
        j.ack();
    }
    Ok(())
}

/// Every acknowledged table exists with its last version, every acknowledged
/// deletion is gone, and the pool's chunks are all accounted for.
pub fn directory_check(
    pool: Pool,
    j: &Journal<DirOp>,
) -> std::result::Result<Vec<Option<Option<u64>>>, String> {
    let mut want: [Option<u64>; DIR_NAMES] = [None; DIR_NAMES];
    for op in &j.acked {
        match *op {
            DirOp::Publish { name, version } => want[name] = Some(version),
            DirOp::Delete { name } => want[name] = None,
        }
    }
    let mut tables = Vec::new();
    let mut digest = Vec::with_capacity(DIR_NAMES);
    for (name, w) in want.iter().enumerate() {
        let in_flight = match &j.in_flight {
            Some(DirOp::Publish { name: n, version }) if *n == name => Some(Some(*version)),
            Some(DirOp::Delete { name: n }) if *n == name => Some(None),
            _ => None,
        };
        let found = match pool.object(&dir_name(name), SLOT_TABLE_TYPE) {
            Err(PmError::NoSuchObject(_)) => None,
            Err(e) => return Err(e.to_string()),
            Ok(_) => {
                let t = SlotTable::open_or_create(&pool, &dir_name(name), 4)
                    .map_err(|e| e.to_string())?;
                let v = t.read(0)?.map(|v| v.version);
                tables.push(t);
                // A table created by the in-flight op may exist without a block yet.
                Some(v)
            }
        };
        digest.push(found);
        let ok = match (found, w) {
            (None, None) => true,
            (Some(Some(v)), Some(x)) if v == *x => true,
            _ => false,
        };
        let ok_in_flight = match (found, in_flight) {
            (Some(Some(v)), Some(Some(x))) => v == x,
            (Some(None), Some(Some(_))) => true, // created, block not yet published
            (Some(v), Some(None)) => v == *w,    // deletion had not happened
            (None, Some(None)) => true,
            (None, Some(Some(_))) => w.is_none(),
            _ => false,
        };
        if !ok && !ok_in_flight {
            return Err(format!(
                "{}: found {found:?}, acknowledged {w:?}",
                dir_name(name)
            ));
        }
    }
    ferrite_pm::crash::recovered(&pool);
    let owners = pool.chunks_by_owner();
    let objects = pool.objects();
    if let Some((id, _)) = owners
        .iter()
        .find(|(id, _)| !objects.iter().any(|o| o.id == *id))
    {
        return Err(format!("chunks of deleted object {id:?} survived recovery"));
    }
    if let Some(t) = tables.first() {
        let mut live = Vec::new();
        for off in [t.root_block(), t.slot(0)] {
            if off != 0 {
                live.push((off, t.heap().block_size(off).unwrap_or(0) as u64));
            }
        }
        exhaust_and_account(&pool, t.heap(), live)?;
    }
    Ok(digest)
}

pub fn directory_target(cfg: &CrashConfig) -> Result<CrashReport> {
    let mut c = cfg.clone();
    if c.ops == CrashConfig::default().ops {
        c.ops = 620;
    }
    c.chunk_size = ferrite_pm::layout::MIN_CHUNK;
    let w = c.clone();
    explore(
        "directory",
        &c,
        move |p, j| directory_workload(&w, p, j),
        directory_check,
    )
}
