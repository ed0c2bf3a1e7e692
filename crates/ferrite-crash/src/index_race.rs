//! `index-batch-race`: single-key writes racing write batches, through the
//! crash simulator, with the interleaving that used to lose data forced on
//! every round.
//!
//! Each round applies a batch `{a = batch_r, b = batch_r, c = batch_r}`. After
//! the batch has applied `a` (its log committed, not yet retired), a second
//! thread upserts `a = single_r`. Ferrite acknowledges that upsert only after
//! the batch's log is retired (`FerriteIndex::settle`): acknowledging it at
//! once (tripwire `index.batch-no-wait`) lets a crash before the retirement
//! replay the batch over the acknowledged upsert. One thread runs at a time
//! (the other waits on a channel), as the simulator requires.
//!
//! The journal's in-flight operation is the round, updated as its two writes
//! are acknowledged. What a recovered index must hold:
//! * every completed round: `a = single_r`, `b = c = batch_r`;
//! * the round in flight: the batch all or nothing (`b` and `c` together);
//!   `a = single_r` if the upsert was acknowledged, else `a` is the previous
//!   value, `batch_r` (only if the batch is there) or `single_r`.

use std::sync::mpsc;
use std::sync::Arc;

use ferrite_index::FerriteIndex;
use ferrite_kv::{OrderedKv, WriteBatch};
use ferrite_pm::tripwire::{self, Tripwire};
use ferrite_pm::{explore, CrashConfig, CrashReport, Journal, JournalHandle, Pool};

const OBJECT: &str = "batch-race";
const KEYS: [&[u8]; 3] = [b"a", b"b", b"c"];

/// A round, with how far it got.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RaceOp {
    Setup,
    Round { r: u64, batch: bool, single: bool },
}

fn batch_value(r: u64) -> Vec<u8> {
    format!("batch-{r}").into_bytes()
}

fn single_value(r: u64) -> Vec<u8> {
    format!("single-{r}").into_bytes()
}

/// Rounds per run when the caller passes the generic default.
pub const DEFAULT_ROUNDS: usize = 40;

enum Signal {
    /// The upsert is waiting for the batch to end.
    Waiting,
    /// The upsert returned.
    Done,
}

fn workload(rounds: usize, pool: &Pool, j: &JournalHandle<RaceOp>) -> Result<(), String> {
    let e = |e: ferrite_kv::KvError| e.to_string();
    j.begin(RaceOp::Setup);
    let idx = Arc::new(FerriteIndex::open_or_create(pool, OBJECT).map_err(e)?);
    let mut b = WriteBatch::new();
    for k in KEYS {
        b.put(k, b"initial");
    }
    idx.write_batch(&b).map_err(e)?;
    j.ack();
    let no_wait = tripwire::armed(Tripwire::IndexBatchNoWait);
    for r in 0..rounds as u64 {
        j.begin(RaceOp::Round {
            r,
            batch: false,
            single: false,
        });
        let (tx, rx) = mpsc::channel::<Signal>();
        let writer_done = Arc::new(std::sync::Mutex::new(None));
        {
            let tx = tx.clone();
            idx.set_settle_hook(Some(Box::new(move || {
                let _ = tx.send(Signal::Waiting);
            })));
        }
        let hook_idx = idx.clone();
        let hook_j = j.clone();
        let hook_done = writer_done.clone();
        let rx = std::sync::Mutex::new(rx);
        idx.set_batch_op_hook(Some(Arc::new(move |i| {
            if i != 0 {
                return;
            }
            // The batch has applied `a`: run the single-key upsert now.
            let (idx, j, tx) = (hook_idx.clone(), hook_j.clone(), tx.clone());
            let handle = std::thread::spawn(move || {
                tripwire::arm(Tripwire::IndexBatchNoWait, no_wait);
                let res = idx.upsert(KEYS[0], &single_value(r));
                if res.is_ok() && no_wait {
                    // Acknowledged while the batch is still in flight.
                    j.begin(RaceOp::Round {
                        r,
                        batch: false,
                        single: true,
                    });
                }
                let _ = tx.send(Signal::Done);
                res.map(|_| ()).map_err(|e| e.to_string())
            });
            // Wait until the upsert is done or parked behind the batch.
            let _ = rx.lock().unwrap().recv();
            *hook_done.lock().unwrap() = Some(handle);
        })));
        let mut b = WriteBatch::new();
        for k in KEYS {
            b.put(k, &batch_value(r));
        }
        idx.write_batch(&b).map_err(e)?;
        idx.set_batch_op_hook(None);
        idx.set_settle_hook(None);
        let single_acked_early = no_wait;
        j.begin(RaceOp::Round {
            r,
            batch: true,
            single: single_acked_early,
        });
        let handle = writer_done
            .lock()
            .unwrap()
            .take()
            .ok_or("the batch hook did not run")?;
        handle
            .join()
            .map_err(|_| "the writer thread panicked".to_string())??;
        j.begin(RaceOp::Round {
            r,
            batch: true,
            single: true,
        });
        j.ack();
    }
    Ok(())
}

fn get(idx: &FerriteIndex, k: &[u8]) -> Result<Option<Vec<u8>>, String> {
    idx.get(k).map_err(|e| e.to_string())
}

/// The checker (see the module docs); returns the recovered values.
pub fn check(pool: Pool, j: &Journal<RaceOp>) -> Result<Vec<Option<Vec<u8>>>, String> {
    let opened = FerriteIndex::open_or_create(&pool, OBJECT);
    ferrite_pm::crash::recovered(&pool);
    let idx = opened.map_err(|e| format!("reopen: {e}"))?;
    let got: Vec<Option<Vec<u8>>> = KEYS
        .iter()
        .map(|k| get(&idx, k))
        .collect::<Result<_, _>>()?;
    let setup_done = !j.acked.is_empty();
    if !setup_done {
        return Ok(got);
    }
    let last = j.acked.iter().rev().find_map(|o| match o {
        RaceOp::Round { r, .. } => Some(*r),
        RaceOp::Setup => None,
    });
    let (prev_a, prev_bc) = match last {
        Some(r) => (single_value(r), batch_value(r)),
        None => (b"initial".to_vec(), b"initial".to_vec()),
    };
    let show = |v: &Option<Vec<u8>>| v.as_ref().map(|x| String::from_utf8_lossy(x).into_owned());
    let (a, b, c) = (&got[0], &got[1], &got[2]);
    match &j.in_flight {
        None | Some(RaceOp::Setup) => {
            if a.as_deref() != Some(&prev_a[..])
                || b.as_deref() != Some(&prev_bc[..])
                || c.as_deref() != Some(&prev_bc[..])
            {
                return Err(format!(
                    "after round {last:?}: a={:?} b={:?} c={:?}",
                    show(a),
                    show(b),
                    show(c)
                ));
            }
        }
        Some(RaceOp::Round { r, single, .. }) => {
            let (bv, sv) = (batch_value(*r), single_value(*r));
            let batch_applied = match (b.as_deref(), c.as_deref()) {
                (Some(x), Some(y)) if x == prev_bc && y == prev_bc => false,
                (Some(x), Some(y)) if x == bv && y == bv => true,
                _ => {
                    return Err(format!(
                        "round {r}: batch torn: b={:?} c={:?}",
                        show(b),
                        show(c)
                    ))
                }
            };
            let a_ok = if *single {
                a.as_deref() == Some(&sv[..])
            } else if batch_applied {
                a.as_deref() == Some(&bv[..]) || a.as_deref() == Some(&sv[..])
            } else {
                a.as_deref() == Some(&prev_a[..]) || a.as_deref() == Some(&sv[..])
            };
            if !a_ok {
                return Err(format!(
                    "round {r}: a={:?} but the upsert of {:?} was {} (batch {})",
                    show(a),
                    String::from_utf8_lossy(&sv),
                    if *single { "acknowledged" } else { "in flight" },
                    if batch_applied {
                        "applied"
                    } else {
                        "not applied"
                    }
                ));
            }
        }
    }
    Ok(got)
}

/// The `index-batch-race` target.
pub fn target(cfg: &CrashConfig) -> ferrite_pm::Result<CrashReport> {
    let rounds = if cfg.ops == CrashConfig::default().ops {
        DEFAULT_ROUNDS
    } else {
        cfg.ops
    };
    explore(
        "index-batch-race",
        cfg,
        move |p, j| workload(rounds, p, j),
        check,
    )
}
