//! The `elf` crash-test target: builds, rebuilds, delta inserts and merges on a
//! small table, with power cut at every fence. The checker reopens the Elf through
//! the normal path and requires exactly the acknowledged rows (the in-flight
//! operation all or nothing), a structurally valid Elf whose queries agree with a
//! brute-force scan, and an allocator with nothing leaked or handed out twice.

use std::collections::BTreeMap;

use ferrite_pm::account::exhaust_and_account;
use ferrite_pm::rng::SplitMix;
use ferrite_pm::{explore, CrashConfig, CrashReport, Journal, JournalHandle, Pool};

use ferrite_elf::build::build;
use ferrite_elf::store::{CreateOptions, ElfStore};
use ferrite_elf::table::{Column, ColumnKind, Schema};
use ferrite_elf::ElfError;
use ferrite_elf::Query;
use ferrite_elf::Variant;

const NAME: &str = "crash-elf";
const NCOLS: usize = 3;
const CARD: u64 = 4;
const DELTA_CAP: u64 = 5;

/// Operations of the workload.
#[derive(Debug, Clone)]
pub enum ElfOp {
    /// Build (or replace) the Elf with these rows (row-major).
    Build(Vec<u32>),
    /// Insert one row (may merge first when the delta is full).
    Insert(Vec<u32>),
    /// Merge the delta into the next generation.
    Merge,
}

fn schema() -> Schema {
    Schema {
        columns: (0..NCOLS)
            .map(|i| Column {
                name: format!("c{i}"),
                kind: ColumnKind::Int { offset: 0 },
            })
            .collect(),
    }
}

fn random_rows(rng: &mut SplitMix, n: usize) -> Vec<u32> {
    (0..n * NCOLS).map(|_| rng.below(CARD) as u32).collect()
}

fn create(pool: &Pool, rows: &[u32]) -> Result<ElfStore, ElfError> {
    let cols: Vec<Vec<u32>> = (0..NCOLS)
        .map(|c| rows.chunks_exact(NCOLS).map(|r| r[c]).collect())
        .collect();
    let slices: Vec<&[u32]> = cols.iter().map(Vec::as_slice).collect();
    let built = build(&slices)?;
    ElfStore::create(
        pool,
        NAME,
        &built,
        Some(&schema()),
        &CreateOptions {
            delta_capacity: DELTA_CAP,
            nonce: Some(0x5EED_E1F0),
        },
        Variant::Pm,
    )
}

/// The workload: `cfg.ops` operations.
pub fn elf_workload(
    cfg: &CrashConfig,
    pool: &Pool,
    j: &JournalHandle<ElfOp>,
) -> Result<(), String> {
    let mut rng = SplitMix(cfg.seed);
    let first = random_rows(&mut rng, 8);
    j.begin(ElfOp::Build(first.clone()));
    let mut store = create(pool, &first).map_err(|e| e.to_string())?;
    j.ack();
    let mut rows = 8usize;
    for _ in 0..cfg.ops {
        let r = rng.below(100);
        if rows > 60 || r < 2 {
            let n = 1 + rng.below(12) as usize;
            let t = random_rows(&mut rng, n);
            j.begin(ElfOp::Build(t.clone()));
            drop(store);
            store = create(pool, &t).map_err(|e| e.to_string())?;
            j.ack();
            rows = n;
        } else if r < 8 {
            j.begin(ElfOp::Merge);
            store.merge().map_err(|e| e.to_string())?;
            j.ack();
        } else {
            let row = random_rows(&mut rng, 1);
            j.begin(ElfOp::Insert(row.clone()));
            store.insert(&row).map_err(|e| e.to_string())?;
            j.ack();
            rows += 1;
        }
    }
    Ok(())
}

/// Rows (by TID) after applying `ops`.
fn apply(ops: &[ElfOp]) -> Option<BTreeMap<u32, Vec<u32>>> {
    let mut t: Option<BTreeMap<u32, Vec<u32>>> = None;
    for op in ops {
        match op {
            ElfOp::Build(rows) => {
                t = Some(
                    rows.chunks_exact(NCOLS)
                        .enumerate()
                        .map(|(i, r)| (i as u32, r.to_vec()))
                        .collect(),
                )
            }
            ElfOp::Insert(row) => {
                if let Some(m) = t.as_mut() {
                    let tid = m.len() as u32;
                    m.insert(tid, row.clone());
                }
            }
            ElfOp::Merge => {}
        }
    }
    t
}

/// The checker.
pub fn elf_check(pool: Pool, j: &Journal<ElfOp>) -> Result<BTreeMap<u32, Vec<u32>>, String> {
    let acked = apply(&j.acked);
    let with_flight = j.in_flight.as_ref().and_then(|op| {
        let mut ops = j.acked.clone();
        ops.push(op.clone());
        apply(&ops)
    });
    let opened = ElfStore::open(&pool, NAME, Variant::Pm, true);
    ferrite_pm::crash::recovered(&pool);
    let store = match opened {
        Ok(s) => s,
        Err(ElfError::NoElf(_)) => {
            return if acked.is_none() {
                Ok(BTreeMap::new())
            } else {
                Err("the acknowledged Elf is missing".into())
            };
        }
        Err(e) => return Err(format!("reopen failed: {e}")),
    };
    let g = store.current();
    g.elf.verify().map_err(|e| format!("structure: {e}"))?;
    let mut found: BTreeMap<u32, Vec<u32>> = BTreeMap::new();
    let mut dup = None;
    g.elf
        .for_each_row(|v, t| {
            if found.insert(t, v.to_vec()).is_some() {
                dup = Some(t);
            }
        })
        .map_err(|e| e.to_string())?;
    if let Some(t) = dup {
        return Err(format!("TID {t} appears twice"));
    }
    g.for_each_delta_row(|row, t| {
        if found.insert(t, row.to_vec()).is_some() {
            dup = Some(t);
        }
    });
    if let Some(t) = dup {
        return Err(format!("delta TID {t} repeats an Elf TID"));
    }
    if Some(&found) != acked.as_ref() && Some(&found) != with_flight.as_ref() {
        return Err(format!(
            "recovered {} rows, acknowledged {} (in flight: {:?})",
            found.len(),
            acked.as_ref().map_or(0, |a| a.len()),
            j.in_flight.as_ref().map(|o| match o {
                ElfOp::Build(_) => "build",
                ElfOp::Insert(_) => "insert",
                ElfOp::Merge => "merge",
            })
        ));
    }
    // Range queries against brute force over the recovered rows.
    let mut rng = SplitMix(found.len() as u64 + 7);
    for _ in 0..4 {
        let bounds: Vec<(u32, u32)> = (0..NCOLS)
            .map(|_| {
                let a = rng.below(CARD) as u32;
                let b = rng.below(CARD) as u32;
                (a.min(b), a.max(b))
            })
            .collect();
        let q = Query::range(bounds);
        let mut got = Vec::new();
        store
            .query(&q, |t| got.push(t))
            .map_err(|e| e.to_string())?;
        got.sort_unstable();
        let want: Vec<u32> = found
            .iter()
            .filter(|(_, r)| q.matches(r))
            .map(|(&t, _)| t)
            .collect();
        if got != want {
            return Err(format!("query {q:?}: {got:?} != {want:?}"));
        }
    }
    let live = store.live_blocks();
    let heap = store.heap().clone();
    drop(g);
    exhaust_and_account(&pool, &heap, live)?;
    Ok(found)
}

/// Default workload size of the target (>= 10,000 crash states with 4 seeds).
pub const DEFAULT_OPS: usize = 1700;

/// The `elf` crash-test target.
pub fn elf_target(cfg: &CrashConfig) -> ferrite_pm::Result<CrashReport> {
    let mut c = cfg.clone();
    if c.ops == CrashConfig::default().ops {
        c.ops = DEFAULT_OPS;
    }
    let wc = c.clone();
    explore("elf", &c, move |p, j| elf_workload(&wc, p, j), elf_check)
}
