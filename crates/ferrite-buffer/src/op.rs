//! Operations: the unit that changes pages and logs them. An [`Op`] holds the
//! checkpoint gate (shared) and a log reservation; data structures latch pages
//! through it, change them through their guards, and call [`Op::log`] while
//! the pages are still latched. Also: page allocation (meta page and free
//! list), the catalog of named structures, and transactions.

use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};

use crate::access::{Loc, PageGuard};
use ferrite_pm::tripwire::{armed, Tripwire};

use crate::error::{BufferError, Result};
use crate::latch::Mode;
use crate::manager::{BufferManager, Hint};
use crate::page::{kind, meta, OFF_KIND, OFF_NEXT_FREE};
use crate::registry::Compensation;
use crate::txn::{Txn, TxnInner};
use crate::wal::record::{self, UndoEntry, UpdateBuilder, F_CLR, F_COMMIT, F_SYSTEM};
use crate::wal::Reservation;

/// Whose records an operation writes.
#[derive(Clone, Copy)]
pub enum Ctx<'t> {
    /// A single operation: its logical change commits with its record.
    Auto,
    /// An operation of a transaction (undone on abort or restart).
    Txn(&'t Txn),
    /// The undo of a transaction's operation (a compensation record).
    Compensation(Compensation),
    /// A change that belongs to no transaction (catalog, structure changes).
    System,
}

enum OwnedCtx {
    Auto,
    Txn(u64, Arc<Mutex<TxnInner>>),
    Comp(Compensation),
    System,
}

/// A running operation (see the module docs).
pub struct Op<'a> {
    bm: &'a BufferManager,
    _gate: Option<parking_lot::RwLockReadGuard<'a, ()>>,
    res: Reservation,
    ctx: OwnedCtx,
    commit_lsn: Option<u64>,
}

impl Drop for Op<'_> {
    fn drop(&mut self) {
        self.bm.wal.release(&mut self.res);
    }
}

/// An entry of the catalog of named structures (meta page).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CatalogEntry {
    pub name: String,
    pub id: u32,
    pub kind: u32,
    pub root: u64,
}

impl BufferManager {
    /// Log bytes a record of `pages` whole pages plus `extra` bytes needs.
    pub fn record_bytes(&self, pages: usize, extra: usize) -> usize {
        let page = record::page_block_bytes(self.cfg.lines());
        ferrite_pmio::log::LogKind::PopLog
            .entry_bytes(true, record::HEADER + pages * page + extra + 8)
    }

    /// Starts an operation that may log up to `pages` pages and `extra` bytes
    /// of undo; runs a checkpoint first when the log lacks the space.
    pub fn begin_op(&self, ctx: Ctx<'_>, pages: usize, extra: usize) -> Result<Op<'_>> {
        let bytes = self.record_bytes(pages, extra) * 2;
        let ctx = match ctx {
            Ctx::Auto => OwnedCtx::Auto,
            Ctx::Txn(t) => {
                if t.is_finished() {
                    return Err(BufferError::TxnFinished(t.id));
                }
                OwnedCtx::Txn(t.id, t.inner.clone())
            }
            Ctx::Compensation(c) => OwnedCtx::Comp(c),
            Ctx::System => OwnedCtx::System,
        };
        let mut tried = false;
        loop {
            let gate = self.gate.read();
            if let Some(res) = self.wal.reserve(bytes)? {
                return Ok(Op {
                    bm: self,
                    _gate: Some(gate),
                    res,
                    ctx,
                    commit_lsn: None,
                });
            }
            drop(gate);
            if tried {
                return Err(BufferError::LogFull(format!(
                    "an operation needs {bytes} bytes of log, more than is free after a checkpoint ({})",
                    self.wal.available()
                )));
            }
            self.checkpoint()?;
            tried = true;
        }
    }
}

impl<'a> Op<'a> {
    pub fn bm(&self) -> &'a BufferManager {
        self.bm
    }

    /// The transaction id, if any.
    pub fn txn(&self) -> Option<u64> {
        match &self.ctx {
            OwnedCtx::Txn(id, _) => Some(*id),
            OwnedCtx::Comp(c) => Some(c.txn),
            _ => None,
        }
    }

    /// Takes the write lock of `key` of structure `tree` for this operation's
    /// transaction (no-wait); a single operation fails on a locked key.
    pub fn lock_key(&self, tree: u32, key: &[u8]) -> Result<()> {
        match &self.ctx {
            OwnedCtx::Auto => match self.bm.locks.holder(tree, key) {
                Some(h) => Err(BufferError::Conflict { holder: h }),
                None => Ok(()),
            },
            OwnedCtx::Txn(id, inner) => {
                if self.bm.locks.lock(tree, key, *id)? {
                    inner.lock().unwrap().locks.push((tree, key.to_vec()));
                }
                Ok(())
            }
            _ => Ok(()),
        }
    }

    pub fn fix(&self, pid: u64, mode: Mode, hint: Hint) -> Result<PageGuard<'a>> {
        self.bm.fix(pid, mode, hint)
    }

    pub fn fix_child(
        &self,
        parent: &PageGuard<'_>,
        off: usize,
        mode: Mode,
        hint: Hint,
    ) -> Result<PageGuard<'a>> {
        self.bm.fix_child(parent, off, mode, hint)
    }

    /// The meta page, latched.
    pub fn fix_meta(&self, mode: Mode) -> Result<PageGuard<'a>> {
        self.bm.fix(0, mode, Hint::Whole)
    }

    /// Logs the lines the guards' pages changed since their last record.
    /// `undo` (structure id, payload) marks the operation's logical change:
    /// in a transaction it is kept for abort and restart; for a single
    /// operation the record commits it; without it the record is a structure
    /// change. Call it while the pages are still latched.
    pub fn log(
        &mut self,
        guards: &mut [&mut PageGuard<'a>],
        undo: Option<(u32, &[u8])>,
    ) -> Result<u64> {
        let bm = self.bm;
        let (flags, txn, seq) = match (&self.ctx, undo.is_some()) {
            (_, false) => (F_SYSTEM, 0, 0),
            (OwnedCtx::Auto, true) => (F_COMMIT, 0, 0),
            (OwnedCtx::Txn(id, inner), true) => {
                let mut t = inner.lock().unwrap();
                let s = t.next_seq;
                t.next_seq += 1;
                (0, *id, s)
            }
            (OwnedCtx::Comp(c), true) => (F_CLR, c.txn, c.seq),
            (OwnedCtx::System, true) => (F_SYSTEM, 0, 0),
        };
        let mut b = UpdateBuilder::new(flags, txn, seq);
        for g in guards.iter() {
            if g.touched.is_empty() {
                continue;
            }
            let offs = match g.loc {
                Loc::Full(f) if bm.dram().common(f).children.load(Ordering::Acquire) > 0 => {
                    bm.swip_offsets(g)?
                }
                _ => Vec::new(),
            };
            let lines: Vec<u16> = g.touched.iter().map(|l| l as u16).collect();
            b.page(g.pid, g.fresh, &lines, |l, out| {
                g.line_image(l as usize, &offs, out)
            });
        }
        if b.pages() == 0 && undo.is_none() {
            return Ok(0);
        }
        let keep_undo = matches!(self.ctx, OwnedCtx::Txn(..)) && undo.is_some();
        let rec = b.finish(if keep_undo { undo } else { None });
        let lsn = bm.wal.append(rec, Some(&mut self.res))?;
        match (&self.ctx, undo) {
            (OwnedCtx::Txn(_, inner), Some((tree, payload))) => {
                inner.lock().unwrap().undo.push(UndoEntry {
                    seq,
                    tree,
                    payload: payload.to_vec(),
                });
            }
            (OwnedCtx::Comp(c), Some(_)) => {
                if let Some(t) = bm.txns.active.lock().unwrap().get(&c.txn) {
                    t.lock().unwrap().undo.retain(|e| e.seq != c.seq);
                }
            }
            (OwnedCtx::Auto, Some(_)) => self.commit_lsn = Some(lsn),
            _ => {}
        }
        let mut forced = false;
        for g in guards.iter_mut() {
            bm.settle(g, lsn, &mut forced)?;
        }
        Ok(lsn)
    }

    /// Ends the operation: releases the gate and, for a single operation that
    /// changed data, forces its commit record (after the caller dropped its
    /// page guards: other operations need not wait for the force).
    pub fn finish(mut self) -> Result<()> {
        let bm = self.bm;
        let lsn = self.commit_lsn.take();
        drop(self);
        if let Some(lsn) = lsn {
            if !armed(Tripwire::BufferSkipCommitForce) {
                bm.wal.force(lsn)?;
            }
        }
        Ok(())
    }

    /// Allocates a page (from the free list, or a new page id) and formats it
    /// as `page_kind`; `meta` is the meta page latched exclusive.
    pub fn alloc_page(&self, meta_g: &mut PageGuard<'a>, page_kind: u8) -> Result<PageGuard<'a>> {
        let head = meta_g.u64_at(meta::OFF_FREE_HEAD)?;
        let mut g = if head != 0 {
            let mut g = self.bm.fix(head, Mode::Exclusive, Hint::Whole)?;
            if g.kind()? != kind::FREE {
                return Err(BufferError::corrupt(
                    "free-page list",
                    format!("page {head} on the list has kind {}", g.kind()?),
                ));
            }
            let next = g.u64_at(OFF_NEXT_FREE)?;
            meta_g.put_u64(meta::OFF_FREE_HEAD, next)?;
            g
        } else {
            let next = meta_g.u64_at(meta::OFF_NEXT_PID)?;
            let cap = self.bm.capacity_pages();
            if next >= cap {
                return Err(BufferError::CapacityExceeded(format!(
                    "all {cap} pages of the store are in use"
                )));
            }
            let g = self.bm.fix_fresh(next)?;
            meta_g.put_u64(meta::OFF_NEXT_PID, next + 1)?;
            g
        };
        g.format(page_kind)?;
        Ok(g)
    }

    /// Puts page `g` (latched exclusive, no longer referenced) on the free list.
    pub fn free_page(&self, meta_g: &mut PageGuard<'a>, g: &mut PageGuard<'a>) -> Result<()> {
        let head = meta_g.u64_at(meta::OFF_FREE_HEAD)?;
        g.prepare(0, crate::config::LINE)?;
        g.write(OFF_KIND, &[kind::FREE])?;
        g.put_u64(OFF_NEXT_FREE, head)?;
        meta_g.put_u64(meta::OFF_FREE_HEAD, g.pid())?;
        g.pin(false);
        Ok(())
    }

    /// Adds `name` to the catalog with root page `root`; returns its id.
    pub fn catalog_add(
        &self,
        meta_g: &mut PageGuard<'a>,
        name: &str,
        skind: u32,
        root: u64,
    ) -> Result<u32> {
        if name.is_empty() || name.len() > meta::MAX_NAME {
            return Err(BufferError::Invalid(format!(
                "structure name {name:?}: 1 to {} bytes",
                meta::MAX_NAME
            )));
        }
        let n = meta_g.u32_at(meta::OFF_NTREES)? as usize;
        if n >= meta::capacity(self.bm.page_size()) {
            return Err(BufferError::CapacityExceeded(format!(
                "the catalog holds {n} structures, its maximum"
            )));
        }
        let id = meta_g.u32_at(meta::OFF_NEXT_TREE_ID)?.max(1);
        let e = meta::CATALOG + n * meta::ENTRY;
        let mut entry = [0u8; meta::ENTRY];
        entry[meta::E_NAME_LEN] = name.len() as u8;
        entry[meta::E_NAME..meta::E_NAME + name.len()].copy_from_slice(name.as_bytes());
        entry[meta::E_ID..meta::E_ID + 4].copy_from_slice(&id.to_le_bytes());
        entry[meta::E_KIND..meta::E_KIND + 4].copy_from_slice(&skind.to_le_bytes());
        entry[meta::E_ROOT..meta::E_ROOT + 8].copy_from_slice(&root.to_le_bytes());
        meta_g.write(e, &entry)?;
        meta_g.put_u32(meta::OFF_NTREES, n as u32 + 1)?;
        meta_g.put_u32(meta::OFF_NEXT_TREE_ID, id + 1)?;
        Ok(id)
    }

    /// Sets the root page of catalog entry `id`.
    pub fn catalog_set_root(&self, meta_g: &mut PageGuard<'a>, id: u32, root: u64) -> Result<()> {
        let n = meta_g.u32_at(meta::OFF_NTREES)? as usize;
        for i in 0..n.min(meta::capacity(self.bm.page_size())) {
            let e = meta::CATALOG + i * meta::ENTRY;
            if meta_g.u32_at(e + meta::E_ID)? == id {
                return meta_g.put_u64(e + meta::E_ROOT, root);
            }
        }
        Err(BufferError::Invalid(format!(
            "no structure with id {id} in the catalog"
        )))
    }
}

impl BufferManager {
    /// After a page's lines were logged (or redone) at `lsn`: DRAM frames
    /// become dirty with those lines; a PM-direct overlay is applied to the
    /// frame once the log is durable (`forced` tracks whether it was forced
    /// already; restart's redo passes `true`: its records are durable).
    pub(crate) fn settle(&self, g: &mut PageGuard<'_>, lsn: u64, forced: &mut bool) -> Result<()> {
        if g.touched.is_empty() {
            return Ok(());
        }
        match g.loc {
            Loc::Full(f) => {
                let fr = self.dram().full_frame(f);
                // SAFETY: the guard holds the frame exclusive (it wrote).
                let st = unsafe { fr.st() };
                if let Some(m) = g.touched.mask() {
                    st.dirty.union(m);
                }
                st.newer = true;
                fr.c.max_lsn.fetch_max(lsn, Ordering::AcqRel);
            }
            Loc::Mini(f) => {
                let fr = self.dram().mini_frame(f);
                // SAFETY: as above.
                let st = unsafe { fr.st() };
                for l in g.touched.iter() {
                    if let Some(p) = st.slots[..st.count as usize]
                        .iter()
                        .position(|&s| s as usize == l)
                    {
                        st.dirty |= 1 << p;
                    }
                }
                st.newer = true;
                fr.c.max_lsn.fetch_max(lsn, Ordering::AcqRel);
            }
            Loc::Pm(f) => {
                if !*forced && !armed(Tripwire::BufferSkipWalRule) {
                    self.wal.force(lsn)?;
                    *forced = true;
                }
                let lines: Vec<u16> = g.touched.iter().map(|l| l as u16).collect();
                let publish = (self.pm.hdr(f).pid1.load(Ordering::Acquire) == 0).then_some(g.pid);
                let ov = g
                    .overlay
                    .as_ref()
                    .expect("PM-direct writes go to the overlay");
                let fence = !self.redoing.load(Ordering::Relaxed);
                self.pm
                    .write_lines(f, ov.buf.as_slice(), &lines, lsn, publish, fence)?;
            }
        }
        g.touched.clear();
        g.fresh = false;
        Ok(())
    }
}

/// Parses the catalog of a meta page.
pub(crate) fn parse_catalog(g: &mut PageGuard<'_>) -> Result<Vec<CatalogEntry>> {
    let ps = g.page_size();
    let n = g.u32_at(meta::OFF_NTREES)? as usize;
    if n > meta::capacity(ps) {
        return Err(BufferError::corrupt(
            "meta page",
            format!("{n} catalog entries"),
        ));
    }
    let mut v = Vec::with_capacity(n);
    for i in 0..n {
        let e = g
            .read(meta::CATALOG + i * meta::ENTRY, meta::ENTRY)?
            .to_vec();
        let len = e[meta::E_NAME_LEN] as usize;
        if len == 0 || len > meta::MAX_NAME {
            return Err(BufferError::corrupt(
                "meta page",
                format!("catalog entry {i} has a bad name"),
            ));
        }
        v.push(CatalogEntry {
            name: String::from_utf8_lossy(&e[meta::E_NAME..meta::E_NAME + len]).into_owned(),
            id: u32::from_le_bytes(e[meta::E_ID..meta::E_ID + 4].try_into().expect("4")),
            kind: u32::from_le_bytes(e[meta::E_KIND..meta::E_KIND + 4].try_into().expect("4")),
            root: u64::from_le_bytes(e[meta::E_ROOT..meta::E_ROOT + 8].try_into().expect("8")),
        });
    }
    Ok(v)
}

impl BufferManager {
    /// The catalog of named structures.
    pub fn catalog(&self) -> Result<Vec<CatalogEntry>> {
        let _r = self.reader();
        let mut g = self.fix(0, Mode::Shared, Hint::Whole)?;
        parse_catalog(&mut g)
    }

    /// The next page id never allocated and the head of the free-page list.
    pub fn allocation_state(&self) -> Result<(u64, u64)> {
        let _r = self.reader();
        let mut g = self.fix(0, Mode::Shared, Hint::Whole)?;
        Ok((
            g.u64_at(meta::OFF_NEXT_PID)?,
            g.u64_at(meta::OFF_FREE_HEAD)?,
        ))
    }

    /// The pages on the free list, in list order (checks: a cycle or a page
    /// that is not free is corruption).
    pub fn free_pages(&self) -> Result<Vec<u64>> {
        let (next, mut p) = self.allocation_state()?;
        let _r = self.reader();
        let mut v = Vec::new();
        while p != 0 {
            if p >= next || v.len() as u64 > next {
                return Err(BufferError::corrupt(
                    "free-page list",
                    format!("page {p} beyond {next} or a cycle"),
                ));
            }
            v.push(p);
            let mut g = self.fix(p, Mode::Shared, Hint::Whole)?;
            if g.kind()? != kind::FREE {
                return Err(BufferError::corrupt(
                    "free-page list",
                    format!("page {p} is not free"),
                ));
            }
            p = g.u64_at(OFF_NEXT_FREE)?;
        }
        Ok(v)
    }

    /// Begins a transaction.
    pub fn begin(self: &Arc<Self>) -> Txn {
        let id = self.txns.next_id.fetch_add(1, Ordering::AcqRel);
        let inner = self.txns.register(id, Vec::new());
        Txn {
            id,
            inner,
            bm: self.clone(),
        }
    }

    /// A small record outside an operation (commit, end): under the gate, with
    /// a checkpoint first when the log is full.
    fn append_small(
        &self,
        rec: Vec<u8>,
        inner: &Mutex<TxnInner>,
        id: u64,
        finish: bool,
    ) -> Result<(u64, bool)> {
        let mut tried = false;
        loop {
            let gate = self.gate.read();
            if let Some(mut res) = self.wal.reserve(record::HEADER * 4)? {
                let mut t = inner.lock().unwrap();
                if t.finished {
                    self.wal.release(&mut res);
                    return Err(BufferError::TxnFinished(id));
                }
                let wrote = !t.undo.is_empty() || !finish;
                let lsn = if wrote {
                    self.wal.append(rec, Some(&mut res))?
                } else {
                    0
                };
                self.wal.release(&mut res);
                t.finished = true;
                let locks = std::mem::take(&mut t.locks);
                drop(t);
                self.locks.unlock_all(&locks, id);
                self.txns.active.lock().unwrap().remove(&id);
                drop(gate);
                return Ok((lsn, wrote));
            }
            drop(gate);
            if tried {
                return Err(BufferError::LogFull(
                    "no room for a commit record after a checkpoint".into(),
                ));
            }
            self.checkpoint()?;
            tried = true;
        }
    }

    /// Commits `txn`: its commit record is durable when this returns.
    pub fn commit(&self, txn: &Txn) -> Result<()> {
        let (lsn, wrote) = self.append_small(record::commit(txn.id), &txn.inner, txn.id, true)?;
        if wrote && !armed(Tripwire::BufferSkipCommitForce) {
            self.wal.force(lsn)?;
        }
        Ok(())
    }

    /// Aborts `txn`: undoes its operations newest first (each logged as a
    /// compensation), then ends it.
    pub fn abort(&self, txn: &Txn) -> Result<()> {
        self.abort_inner(txn.id, &txn.inner)
    }

    pub(crate) fn abort_inner(&self, id: u64, inner: &Arc<Mutex<TxnInner>>) -> Result<()> {
        let entries = {
            let t = inner.lock().unwrap();
            if t.finished {
                return Err(BufferError::TxnFinished(id));
            }
            t.undo.clone()
        };
        for e in entries.iter().rev() {
            self.registry.undo(
                self,
                Compensation {
                    txn: id,
                    seq: e.seq,
                },
                e.tree,
                &e.payload,
            )?;
            // A compensation that changed nothing logged nothing: drop the entry.
            inner.lock().unwrap().undo.retain(|x| x.seq != e.seq);
        }
        inner.lock().unwrap().undo.clear();
        self.append_small(record::end(id), inner, id, false)?;
        Ok(())
    }

    /// Latches page `pid` exclusive as a new page: not read from any tier
    /// (it is formatted next); a page id with frames (a reused one) is fixed
    /// normally.
    pub(crate) fn fix_fresh(&self, pid: u64) -> Result<PageGuard<'_>> {
        if self.dram.is_none() {
            return self.fix(pid, Mode::Exclusive, Hint::Whole);
        }
        loop {
            let e = self.table.shard(pid).lookup(pid);
            if e.dram().is_some() || e.pm().is_some() || e.evicting {
                return self.fix(pid, Mode::Exclusive, Hint::Whole);
            }
            if let Some(g) = self.load_fresh(pid)? {
                return Ok(g);
            }
        }
    }
}
