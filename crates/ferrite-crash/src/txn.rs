//! The `txn` crash-test target: multi-key transactions through the facade,
//! cut at every persist barrier. The workload moves money between accounts
//! in transactions (read two balances, write both, add an audit record,
//! sometimes retire an old one), mixed with plain writes, compare-and-swaps,
//! write batches and rolled-back transactions. The checker is the generic
//! [`ferrite_kv::oracle`] on the map reopened through `ferrite::Db::map`: every
//! acknowledged transaction present, the one in flight whole or absent; plus
//! the index's structure and space checks and the money invariant (the
//! balances always add up to the same total).

use ferrite_kv::oracle::{self, apply, Model, Op, Recovery};
use ferrite_kv::{BatchOp, KvCursor, KvResult, OrderedKv, WriteBatch};
use ferrite_pm::rng::SplitMix;
use ferrite_pm::{explore, CrashConfig, CrashReport, Journal, JournalHandle, Pool};

use ferrite::{Batch, Db, Map};

/// The map the workload writes.
const MAP: &str = "accounts";
/// Accounts and their opening balance.
const ACCOUNTS: u64 = 10;
const OPENING: u64 = 1000;
/// Operations of the default workload.
pub const DEFAULT_OPS: usize = 260;

fn account(i: u64) -> Vec<u8> {
    format!("acct:{i:02}").into_bytes()
}

fn audit(i: u64) -> Vec<u8> {
    format!("audit:{i:05}").into_bytes()
}

fn balance(v: &[u8]) -> Result<u64, String> {
    <[u8; 8]>::try_from(v)
        .map(u64::from_be_bytes)
        .map_err(|_| format!("balance of {} bytes", v.len()))
}

fn effect(tx_writes: &[(Vec<u8>, Option<Vec<u8>>)]) -> Op {
    let mut ops: Vec<BatchOp> = tx_writes
        .iter()
        .map(|(k, w)| match w {
            Some(v) => BatchOp::Put {
                key: k.clone(),
                value: v.clone(),
            },
            None => BatchOp::Delete { key: k.clone() },
        })
        .collect();
    ops.sort_by(|a, b| key_of(a).cmp(key_of(b)));
    Op::Batch(ops)
}

/// The effect of a facade batch, as the oracle journals it.
fn batch_op(b: &Batch) -> Op {
    Op::Batch(
        b.iter()
            .map(|(k, v)| match v {
                Some(v) => BatchOp::Put {
                    key: k.to_vec(),
                    value: v.to_vec(),
                },
                None => BatchOp::Delete { key: k.to_vec() },
            })
            .collect(),
    )
}

fn key_of(op: &BatchOp) -> &[u8] {
    match op {
        BatchOp::Put { key, .. } | BatchOp::Delete { key } => key,
    }
}

/// Runs the workload on `map`, journaling each operation's effect.
fn drive(cfg: &CrashConfig, map: &Map, j: &JournalHandle<Op>) -> Result<(), String> {
    let e = |e: ferrite::Error| e.to_string();
    let mut model = Model::new();
    let mut rng = SplitMix(cfg.seed ^ 0x0074_786e);
    // Open the accounts in one batch.
    let mut b = Batch::new();
    for i in 0..ACCOUNTS {
        b.put(account(i), OPENING.to_be_bytes());
    }
    let op = batch_op(&b);
    j.begin(op.clone());
    map.apply(&b).map_err(e)?;
    j.ack();
    apply(&mut model, &op);
    let mut next_audit = 0u64;
    let mut oldest_audit = 0u64;
    for step in 0..cfg.ops as u64 {
        let r = rng.below(100);
        let op = if r < 60 {
            // A transfer: read two balances, write both and an audit record,
            // retire the oldest audit record now and then.
            let a = rng.below(ACCOUNTS);
            let b = (a + 1 + rng.below(ACCOUNTS - 1)) % ACCOUNTS;
            let mut tx = map.transaction().map_err(e)?;
            let ba = balance(&tx.get(account(a)).map_err(e)?.ok_or("account missing")?)?;
            let bb = balance(&tx.get(account(b)).map_err(e)?.ok_or("account missing")?)?;
            let amount = rng.below(ba.min(200) + 1);
            let mut writes = vec![
                (account(a), Some((ba - amount).to_be_bytes().to_vec())),
                (account(b), Some((bb + amount).to_be_bytes().to_vec())),
                (
                    audit(next_audit),
                    Some(
                        format!("{a}->{b}:{amount}:{}", "x".repeat((step % 40) as usize))
                            .into_bytes(),
                    ),
                ),
            ];
            next_audit += 1;
            if next_audit - oldest_audit > 25 && rng.below(2) == 0 {
                writes.push((audit(oldest_audit), None));
                oldest_audit += 1;
            }
            for (k, w) in &writes {
                match w {
                    Some(v) => tx.upsert(k, v).map_err(e)?,
                    None => tx.remove(k).map_err(e)?,
                };
            }
            let op = effect(&writes);
            j.begin(op.clone());
            tx.commit().map_err(e)?;
            op
        } else if r < 70 {
            // A transaction that reads, writes and rolls back.
            let mut tx = map.transaction().map_err(e)?;
            tx.upsert(account(rng.below(ACCOUNTS)), 0u64.to_be_bytes())
                .map_err(e)?;
            tx.remove(audit(oldest_audit)).map_err(e)?;
            j.begin(Op::Nop);
            tx.rollback();
            Op::Nop
        } else if r < 80 {
            // Plain writes of notes (not money).
            let k = format!("note:{}", rng.below(30)).into_bytes();
            if rng.below(3) == 0 {
                let present = model.contains_key(&k);
                let op = if present { Op::Del(k.clone()) } else { Op::Nop };
                j.begin(op.clone());
                map.remove(&k).map_err(e)?;
                op
            } else {
                let v = vec![step as u8; 1 + (step % 50) as usize];
                let op = Op::Put(k.clone(), v.clone());
                j.begin(op.clone());
                map.upsert(&k, &v).map_err(e)?;
                op
            }
        } else if r < 90 {
            // A compare-and-swap on a sequence number.
            let cur = model.get(b"seq".as_slice()).cloned();
            let next = cur.as_deref().map_or(0, |v| balance(v).unwrap_or(0)) + 1;
            let op = Op::Put(b"seq".to_vec(), next.to_be_bytes().to_vec());
            j.begin(op.clone());
            map.compare_and_swap("seq", cur, Some(next.to_be_bytes()))
                .map_err(e)?
                .map_err(|c| format!("compare_and_swap conflict: {c:?}"))?;
            op
        } else {
            // A write batch of notes.
            let mut b = Batch::new();
            for t in 0..2 + rng.below(3) {
                let k = format!("note:{}", (step + t * 7) % 30);
                if rng.below(3) == 0 {
                    b.remove(k);
                } else {
                    b.put(k, vec![t as u8; 3 + (step % 20) as usize]);
                }
            }
            let op = batch_op(&b);
            j.begin(op.clone());
            map.apply(&b).map_err(e)?;
            op
        };
        j.ack();
        apply(&mut model, &op);
    }
    Ok(())
}

fn workload(cfg: &CrashConfig, pool: &Pool, j: &JournalHandle<Op>) -> Result<(), String> {
    j.begin(Op::Setup);
    let db = Db::from_pool(pool.clone());
    let map = db.map(MAP).map_err(|e| e.to_string())?;
    j.ack();
    drive(cfg, &map, j)
}

/// The recovered map as the oracle reads it.
struct Recovered(Map);

impl OrderedKv for Recovered {
    fn name(&self) -> &str {
        "ferrite-facade"
    }
    fn get_into(&self, key: &[u8], out: &mut Vec<u8>) -> KvResult<bool> {
        self.0.index().get_into(key, out)
    }
    fn insert(&self, key: &[u8], value: &[u8]) -> KvResult<bool> {
        self.0.index().insert(key, value)
    }
    fn update(&self, key: &[u8], value: &[u8]) -> KvResult<bool> {
        self.0.index().update(key, value)
    }
    fn upsert(&self, key: &[u8], value: &[u8]) -> KvResult<bool> {
        self.0.index().upsert(key, value)
    }
    fn remove(&self, key: &[u8]) -> KvResult<bool> {
        self.0.index().remove(key)
    }
    fn count(&self) -> usize {
        self.0.len()
    }
    fn scan(&self, start: &[u8], n: usize, f: &mut dyn FnMut(&[u8], &[u8])) -> KvResult<usize> {
        self.0.index().scan(start, n, f)
    }
    fn write_batch(&self, batch: &WriteBatch) -> KvResult<()> {
        self.0.index().write_batch(batch)
    }
    fn cursor(&self) -> KvResult<Box<dyn KvCursor + '_>> {
        self.0.index().cursor()
    }
}

struct TxnRecovery {
    pool: Pool,
}

impl Recovery for TxnRecovery {
    type Store = Recovered;

    fn open(&mut self) -> KvResult<Recovered> {
        let map = Db::from_pool(self.pool.clone()).map(MAP);
        // What follows (scans, structure and space checks) is not recovery.
        ferrite_pm::crash::recovered(&self.pool);
        map.map(Recovered)
            .map_err(|e| ferrite_kv::KvError::Backend(e.to_string()))
    }

    fn check_structure(&mut self, m: &Recovered) -> Result<(), String> {
        m.0.index().check_structure()?;
        // Through the facade's own reads: the balances add up (the oracle
        // checked the exact contents; this checks the facade's iterators).
        let mut total = 0;
        let mut n = 0;
        for e in m.0.range("acct:".."acct;") {
            let (_, v) = e.map_err(|e| e.to_string())?;
            total += balance(&v)?;
            n += 1;
        }
        let mut back = 0;
        for e in m.0.range("acct:".."acct;").rev() {
            e.map_err(|e| e.to_string())?;
            back += 1;
        }
        if n != 0 && (n != ACCOUNTS || total != ACCOUNTS * OPENING || back != n) {
            return Err(format!(
                "{n} accounts ({back} backwards) holding {total}, want {ACCOUNTS} holding {}",
                ACCOUNTS * OPENING
            ));
        }
        Ok(())
    }

    fn check_space(&mut self, m: &Recovered) -> Result<(), String> {
        m.0.index().exhaust_and_account()
    }
}

fn check(pool: Pool, j: &Journal<Op>) -> Result<Model, String> {
    oracle::check_recovered(TxnRecovery { pool }, &j.acked, j.in_flight.as_ref())
}

/// The `txn` target (see the module documentation); its tripwire is
/// `txn.unbatched-commit` (commits applied one write at a time).
pub fn txn_target(cfg: &CrashConfig) -> ferrite_pm::Result<CrashReport> {
    let mut c = cfg.clone();
    if cfg.ops == CrashConfig::default().ops {
        c.ops = DEFAULT_OPS;
    }
    let c1 = c.clone();
    explore("txn", &c, move |p, j| workload(&c1, p, j), check)
}
