//! Write batches: validated first, serialised into one checksummed PM block
//! (redo log), committed by one root word, applied as upserts and removes, then
//! retired; recovery replays a committed log. Also the readers' side of batch
//! atomicity: a sequence lock that makes a read overlapping a batch retry.
//!
//! Invariants relied on: batches are serialised by the batch mutex (one log
//! root word); the log block is durable before the root word names it, and the
//! root word is cleared before the block is freed; applying a log twice is
//! harmless (upserts and removes are idempotent); the sequence word is odd
//! exactly while a batch of more than one operation applies (from before its
//! log is committed until after it is retired).
//!
//! Single-key writes do not take the batch mutex. One that finds the sequence
//! odd after its write waits for the batch to end before it is acknowledged
//! ([`FerriteIndex::settle`]): otherwise a crash before the batch's log is
//! retired would replay the batch over the acknowledged write. And a committed
//! batch cannot fail half-way for want of space: everything it may allocate is
//! reserved before its log is committed (`reserve`).

use std::sync::atomic::{AtomicU64, Ordering};

use ferrite_kv::{check_sizes, BatchOp, KvError, KvResult, WriteBatch};
use ferrite_pm::Pool;

use super::write::PutMode;
use super::{FerriteIndex, R_LOG};
use crate::error::{pm, OBJECT};
use crate::{MAX_KEY, MAX_VALUE};

const LOG_MAGIC: u64 = 0x4645_4958_4c4f_4731; // "FEIXLOG1"
const LOG_HDR: usize = 32;

#[repr(align(64))]
#[derive(Default)]
pub(super) struct BatchSeq(AtomicU64);

/// Optimistic attempts before a read holds batches off with the batch mutex.
const ISOLATION_RETRIES: usize = 8;

/// Marks a batch as being applied (odd sequence) until dropped, even when the
/// batch fails half-way.
struct BatchWindow<'a>(&'a AtomicU64);

impl<'a> BatchWindow<'a> {
    fn open(seq: &'a AtomicU64) -> BatchWindow<'a> {
        seq.fetch_add(1, Ordering::Relaxed);
        // Orders the odd sequence before the batch's stores (seqlock writer).
        std::sync::atomic::fence(Ordering::Release);
        BatchWindow(seq)
    }
}

impl Drop for BatchWindow<'_> {
    fn drop(&mut self) {
        self.0.fetch_add(1, Ordering::Release);
    }
}

impl FerriteIndex {
    /// Runs the read `f` so that it sees each write batch entirely or not at
    /// all: it is retried when a batch was applied meanwhile (a sequence lock),
    /// and after [`ISOLATION_RETRIES`] attempts it holds batches off instead.
    pub(super) fn isolated<T>(&self, mut f: impl FnMut() -> KvResult<T>) -> KvResult<T> {
        let seq = &self.batch_seq.0;
        for _ in 0..ISOLATION_RETRIES {
            let s = seq.load(Ordering::Acquire);
            if s & 1 == 1 {
                std::hint::spin_loop();
                continue;
            }
            let r = f()?;
            // Orders f's reads before the re-check (seqlock reader).
            std::sync::atomic::fence(Ordering::Acquire);
            if seq.load(Ordering::Relaxed) == s {
                return Ok(r);
            }
        }
        let _b = self.batch.lock().unwrap_or_else(|e| e.into_inner());
        f()
    }

    pub(super) fn apply_batch(&self, ops: &[BatchOp]) -> KvResult<()> {
        for op in ops {
            match op {
                BatchOp::Put { key, value } => {
                    self.put(key, value, PutMode::Upsert)?;
                }
                BatchOp::Delete { key } => {
                    self.delete(key)?;
                }
            }
        }
        Ok(())
    }

    /// Called by a single-key write after it is done and before it returns:
    /// if a batch is being applied, waits until that batch's log is retired,
    /// so the write is acknowledged after the batch (a crash before then
    /// leaves it unacknowledged; after, replay no longer happens).
    #[inline]
    pub(super) fn settle(&self) {
        if self.batch_seq.0.load(Ordering::Acquire) & 1 == 1
            && !ferrite_pm::tripwire::armed(ferrite_pm::tripwire::Tripwire::IndexBatchNoWait)
        {
            self.settle_slow();
        }
    }

    #[cold]
    fn settle_slow(&self) {
        if let Some(h) = self
            .hooks
            .settle
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .as_ref()
        {
            h();
        }
        drop(self.batch.lock().unwrap_or_else(|e| e.into_inner()));
    }

    pub(super) fn batch_impl(&self, batch: &WriteBatch) -> KvResult<()> {
        for op in &batch.ops {
            match op {
                BatchOp::Put { key, value } => check_sizes(key, Some(value), MAX_KEY, MAX_VALUE)?,
                BatchOp::Delete { key } => check_sizes(key, None, MAX_KEY, MAX_VALUE)?,
            }
        }
        let _b = self.batch.lock().unwrap_or_else(|e| e.into_inner());
        if self.durable && self.pool.root(self.id, R_LOG) != 0 {
            // Only a failed write-back (a poisoned pool) leaves a committed log
            // behind; overwriting it would leave that batch half-applied.
            return Err(KvError::Backend(
                "an earlier batch could not be completed (its log is still committed); reopen the index to finish it".into(),
            ));
        }
        if batch.ops.len() <= 1 {
            return self.apply_batch(&batch.ops);
        }
        // Everything the batch may allocate, before anything is committed.
        let _reserved = super::reserve::reserve(&self.heap, &batch.ops)?;
        let _w = BatchWindow::open(&self.batch_seq.0);
        if !self.durable {
            return self.apply_batch(&batch.ops);
        }
        // Redo log: persist the batch, commit it with one root word, apply,
        // retire the log. Recovery replays a committed log (idempotent).
        let bytes = encode_log(&batch.ops);
        let off = self.heap.alloc(bytes.len()).map_err(pm)?;
        let p = self.pool.at(off, bytes.len());
        self.pool.nt_copy(p, &bytes);
        if let Err(e) = self.fence() {
            let _ = self.heap.free(off);
            return Err(e);
        }
        self.pool.set_root(self.id, R_LOG, off).map_err(pm)?;
        self.apply_batch_hooked(&batch.ops)?;
        self.pool.set_root(self.id, R_LOG, 0).map_err(pm)?;
        let _ = self.heap.free(off);
        Ok(())
    }

    /// [`Self::apply_batch`] calling the test hook after each operation.
    fn apply_batch_hooked(&self, ops: &[BatchOp]) -> KvResult<()> {
        let hook = self
            .hooks
            .batch_op
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone();
        let Some(hook) = hook else {
            return self.apply_batch(ops);
        };
        for (i, op) in ops.iter().enumerate() {
            self.apply_batch(std::slice::from_ref(op))?;
            hook(i);
        }
        Ok(())
    }

    pub(super) fn replay_log(&mut self, off: u64) -> KvResult<()> {
        let ops = decode_log(&self.pool, off).ok_or_else(|| {
            KvError::corrupt(
                OBJECT,
                format!("committed batch log at {off:#x} is corrupt"),
            )
        })?;
        self.apply_batch(&ops)?;
        self.pool.set_root(self.id, R_LOG, 0).map_err(pm)?;
        let _ = self.heap.free(off);
        self.pool.fence().map_err(pm)
    }
}

fn encode_log(ops: &[BatchOp]) -> Vec<u8> {
    let mut payload = Vec::new();
    for op in ops {
        let (kind, k, v): (u8, &[u8], &[u8]) = match op {
            BatchOp::Put { key, value } => (1, key, value),
            BatchOp::Delete { key } => (2, key, &[]),
        };
        payload.push(kind);
        payload.extend_from_slice(&(k.len() as u32).to_le_bytes());
        payload.extend_from_slice(&(v.len() as u32).to_le_bytes());
        payload.extend_from_slice(k);
        payload.extend_from_slice(v);
    }
    let mut out = Vec::with_capacity(LOG_HDR + payload.len());
    out.extend_from_slice(&LOG_MAGIC.to_le_bytes());
    out.extend_from_slice(&(ops.len() as u64).to_le_bytes());
    out.extend_from_slice(&(payload.len() as u64).to_le_bytes());
    out.extend_from_slice(&(crc32(&payload) as u64).to_le_bytes());
    out.extend_from_slice(&payload);
    out
}

fn crc32(b: &[u8]) -> u32 {
    let mut c = 0xffff_ffffu32;
    for &x in b {
        c ^= x as u32;
        for _ in 0..8 {
            c = (c >> 1) ^ (0xEDB8_8320 & (c & 1).wrapping_neg());
        }
    }
    !c
}

fn decode_log(pool: &Pool, off: u64) -> Option<Vec<BatchOp>> {
    if !pool.contains(off, LOG_HDR) {
        return None;
    }
    let rd = |o: u64| -> u64 {
        // SAFETY: callers check bounds first.
        unsafe { std::ptr::read_unaligned(pool.at(o, 8) as *const u64) }
    };
    if rd(off) != LOG_MAGIC {
        return None;
    }
    let (count, len, crc) = (rd(off + 8), rd(off + 16) as usize, rd(off + 24));
    if !pool.contains(off + LOG_HDR as u64, len) {
        return None;
    }
    // SAFETY: in bounds (checked); the log is not modified while replayed.
    let p = unsafe { std::slice::from_raw_parts(pool.at(off + LOG_HDR as u64, len), len) };
    if crc32(p) as u64 != crc {
        return None;
    }
    let mut ops = Vec::new();
    let mut i = 0;
    while i < p.len() {
        if i + 9 > p.len() {
            return None;
        }
        let kind = p[i];
        let kl = u32::from_le_bytes(p[i + 1..i + 5].try_into().ok()?) as usize;
        let vl = u32::from_le_bytes(p[i + 5..i + 9].try_into().ok()?) as usize;
        i += 9;
        if kl > MAX_KEY || vl > MAX_VALUE || i + kl + vl > p.len() {
            return None;
        }
        let key = p[i..i + kl].to_vec();
        let value = p[i + kl..i + kl + vl].to_vec();
        i += kl + vl;
        ops.push(match kind {
            1 => BatchOp::Put { key, value },
            2 => BatchOp::Delete { key },
            _ => return None,
        });
    }
    (ops.len() as u64 == count).then_some(ops)
}
