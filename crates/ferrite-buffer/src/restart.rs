//! Restart (thesis §4.4, ARIES-style): rebuild the page table from the PM
//! frame headers, analyse the active log, redo every line image in log order,
//! bootstrap the meta page of a new store, and undo loser transactions
//! through the registry (each undo logged as a compensation record).

use std::collections::BTreeMap;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::config::LINE;
use ferrite_pm::tripwire::{armed, Tripwire};

use crate::error::{BufferError, Result};
use crate::latch::Mode;
use crate::manager::{BufferManager, Hint};
use crate::op::Ctx;
use crate::page::{kind, meta};
use crate::table::Entry;
use crate::wal::record::{self, PageImage, Record, UndoEntry, F_CLR, F_COMMIT};

/// What a restart did and how long each phase took.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RestartReport {
    /// Scanning the PM frame headers into the page table.
    pub page_table_rebuild: Duration,
    pub pm_frames_scanned: u64,
    /// Valid PM frames: pages mapped before any log record was read.
    pub pages_mapped: u64,
    pub analysis: Duration,
    /// Records in the active log (the checkpoint record included).
    pub log_records: u64,
    pub redo: Duration,
    /// Records whose line images were applied.
    pub records_redone: u64,
    /// Distinct pages redo touched.
    pub pages_redone: u64,
    pub lines_redone: u64,
    pub undo: Duration,
    /// Transactions without a commit or end record.
    pub losers: u64,
    /// Operations undone.
    pub ops_undone: u64,
    /// A new store was created (meta page formatted).
    pub created: bool,
    pub total: Duration,
}

#[derive(Default)]
struct TxnInfo {
    undo: BTreeMap<u64, UndoEntry>,
    done: bool,
}

pub(crate) fn restart(bm: &Arc<BufferManager>, started: Instant) -> Result<RestartReport> {
    let mut rep = RestartReport::default();

    // 1. Page table from the PM frame headers.
    let t = Instant::now();
    let found = bm.pm.scan()?;
    for fr in &found {
        bm.table.shard(fr.pid).put(
            fr.pid,
            Entry {
                pm: fr.frame,
                ..Entry::NONE
            },
        );
    }
    rep.page_table_rebuild = t.elapsed();
    rep.pm_frames_scanned = bm.pm.frames() as u64;
    rep.pages_mapped = found.len() as u64;

    // 2. Analysis.
    let t = Instant::now();
    let raw = bm.wal.read_active()?;
    let mut recs = Vec::with_capacity(raw.len());
    for r in &raw {
        recs.push(record::decode(r)?);
    }
    rep.log_records = recs.len() as u64;
    let mut txns: BTreeMap<u64, TxnInfo> = BTreeMap::new();
    let (mut next_lsn, mut next_txn) = (1u64, 1u64);
    let mut last_lsn = 0;
    for r in &recs {
        let lsn = r.lsn();
        if lsn <= last_lsn && last_lsn != 0 {
            return Err(BufferError::corrupt(
                "write-ahead log",
                format!("LSN {lsn} follows {last_lsn}"),
            ));
        }
        last_lsn = lsn;
        next_lsn = next_lsn.max(lsn + 1);
        match r {
            Record::Checkpoint {
                next_txn: n,
                txns: t,
                ..
            } => {
                next_txn = next_txn.max(*n);
                for (id, entries) in t {
                    let info = txns.entry(*id).or_default();
                    for e in entries {
                        info.undo.insert(e.seq, e.clone());
                    }
                }
            }
            Record::Update {
                txn,
                seq,
                flags,
                undo,
                ..
            } if *txn != 0 => {
                next_txn = next_txn.max(txn + 1);
                let info = txns.entry(*txn).or_default();
                if flags & F_COMMIT != 0 {
                    info.done = true;
                } else if flags & F_CLR != 0 {
                    info.undo.remove(seq);
                } else if let Some((tree, payload)) = undo {
                    info.undo.insert(
                        *seq,
                        UndoEntry {
                            seq: *seq,
                            tree: *tree,
                            payload: payload.clone(),
                        },
                    );
                }
            }
            Record::Commit { txn, .. } | Record::End { txn, .. } => {
                next_txn = next_txn.max(txn + 1);
                txns.entry(*txn).or_default().done = true;
            }
            Record::Update { .. } => {}
        }
    }
    rep.analysis = t.elapsed();

    // 3. Redo: every line image, in log order.
    let t = Instant::now();
    bm.wal.set_next_lsn(next_lsn);
    bm.txns.next_id.store(next_txn, Ordering::Release);
    bm.redoing.store(true, Ordering::Release);
    let mut pages = std::collections::HashSet::new();
    let r = (|| -> Result<()> {
        for r in &recs {
            if let Record::Update { lsn, pages: ps, .. } = r {
                for p in ps {
                    redo_page(bm, p, *lsn)?;
                    pages.insert(p.pid);
                    rep.lines_redone += p.lines.len() as u64;
                }
                rep.records_redone += 1;
            }
        }
        Ok(())
    })();
    bm.redoing.store(false, Ordering::Release);
    r?;
    // PM-direct redo wrote frames without a barrier each: one for all.
    bm.pm.fence()?;
    rep.pages_redone = pages.len() as u64;
    rep.redo = t.elapsed();

    rep.created = bootstrap_meta(bm)?;

    // 4. Undo of the losers.
    let t = Instant::now();
    let losers: Vec<(u64, Vec<UndoEntry>)> = txns
        .into_iter()
        .filter(|(_, i)| !i.done)
        .map(|(id, i)| (id, i.undo.into_values().collect()))
        .collect();
    rep.losers = losers.len() as u64;
    let mut inners = Vec::new();
    for (id, undo) in losers {
        rep.ops_undone += undo.len() as u64;
        inners.push((id, bm.txns.register(id, undo)));
    }
    if !armed(Tripwire::BufferSkipUndo) {
        for (id, inner) in &inners {
            bm.abort_inner(*id, inner)?;
        }
        bm.wal.force_all()?;
    }
    rep.undo = t.elapsed();
    rep.total = started.elapsed();
    Ok(rep)
}

fn redo_page(bm: &BufferManager, p: &PageImage, lsn: u64) -> Result<()> {
    let lines = bm.cfg.lines();
    if p.lines.iter().any(|&l| l as usize >= lines) || p.data.len() != p.lines.len() * LINE {
        return Err(BufferError::corrupt(
            "write-ahead log",
            format!(
                "record {lsn}: a line of page {} is outside a page of {lines} lines",
                p.pid
            ),
        ));
    }
    let mut g = bm.fix(p.pid, Mode::Exclusive, Hint::Whole)?;
    if p.zero_first {
        let ps = bm.page_size();
        g.bytes_mut(0, ps)?.fill(0);
    }
    for (i, &l) in p.lines.iter().enumerate() {
        g.write(l as usize * LINE, &p.data[i * LINE..(i + 1) * LINE])?;
    }
    let mut forced = true;
    bm.settle(&mut g, lsn, &mut forced)
}

/// Formats the meta page of a new store, checks an existing one, pins it.
/// Returns whether the store was created.
fn bootstrap_meta(bm: &BufferManager) -> Result<bool> {
    let mut op = bm.begin_op(Ctx::System, 1, 0)?;
    let mut g = op.fix_meta(Mode::Exclusive)?;
    let k = g.kind()?;
    let created = k != kind::META;
    if created {
        if k != kind::UNFORMATTED {
            // A crash can leave page 0 unwritten (zeros), never foreign.
            return Err(BufferError::corrupt(
                "meta page",
                format!("page 0 has kind {k}, not a meta page"),
            ));
        }
        g.format(kind::META)?;
        g.put_u64(meta::OFF_MAGIC, meta::MAGIC)?;
        g.put_u64(meta::OFF_STORE_ID, bm.pm.store_id)?;
        g.put_u64(meta::OFF_NEXT_PID, 1)?;
        g.put_u64(meta::OFF_FREE_HEAD, 0)?;
        g.put_u32(meta::OFF_NTREES, 0)?;
        g.put_u32(meta::OFF_NEXT_TREE_ID, 1)?;
        op.log(&mut [&mut g], None)?;
    } else {
        if g.u64_at(meta::OFF_MAGIC)? != meta::MAGIC {
            return Err(BufferError::corrupt("meta page", "bad magic"));
        }
        let id = g.u64_at(meta::OFF_STORE_ID)?;
        if id != bm.pm.store_id {
            return Err(BufferError::Config(format!(
                "the SSD page files belong to another store (store id {id:#x}, the PM pool's is {:#x})",
                bm.pm.store_id
            )));
        }
    }
    g.pin(true);
    if let Some(f) = g.fid() {
        bm.meta_fid.store(f, Ordering::Release);
    }
    drop(g);
    op.finish()?;
    if created {
        bm.wal.force_all()?;
    }
    Ok(created)
}
