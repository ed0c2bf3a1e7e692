//! The `OrderedKv` implementation: thin dispatch to the read, write and batch
//! paths, plus the buffer that lets a scan be retried without calling the
//! user's callback twice.
//!
//! Invariant relied on: every read runs under `FerriteIndex::isolated`, which
//! retries it when a write batch overlapped, so records are handed to the
//! callback only after the read validated.

use std::sync::atomic::Ordering;

use ferrite_kv::{check_sizes, KvCursor, KvResult, OrderedKv, WriteBatch};

use super::cursor::Cursor;
use super::scan::ScanSink;
use super::write::PutMode;
use super::FerriteIndex;
use crate::{MAX_KEY, MAX_VALUE};

/// Scan results waiting for their read to be validated (a retried scan must
/// not call the user's callback twice): one fixed-size record per entry, an
/// inline entry's words in it, any other entry's bytes in `bytes`.
#[derive(Default)]
struct ScanBuf {
    recs: Vec<ScanRec>,
    bytes: Vec<u8>,
}

/// A buffered record. Inline (`klen <= 8`, no [`SPILLED`] bit): the key is
/// `kw`'s first `klen` big-endian bytes, the value `vw`'s first `vlen`
/// little-endian bytes. Spilled: key and value are `bytes[kw..]`.
#[derive(Clone, Copy)]
struct ScanRec {
    kw: u64,
    vw: u64,
    klen: u32,
    vlen: u32,
}

/// Marks a [`ScanRec`] whose bytes are in the buffer's `bytes`.
const SPILLED: u32 = 1 << 31;

impl ScanSink for ScanBuf {
    #[inline]
    fn inline(&mut self, kw: u64, klen: usize, vw: u64, vlen: usize) {
        self.recs.push(ScanRec {
            kw,
            vw,
            klen: klen as u32,
            vlen: vlen as u32,
        });
    }

    fn bytes(&mut self, key: &[u8], value: &[u8]) {
        let at = self.bytes.len() as u64;
        self.bytes.extend_from_slice(key);
        self.bytes.extend_from_slice(value);
        self.recs.push(ScanRec {
            kw: at,
            vw: 0,
            klen: key.len() as u32 | SPILLED,
            vlen: value.len() as u32,
        });
    }

    fn mark(&self) -> Option<usize> {
        Some(self.recs.len())
    }

    fn rollback(&mut self, mark: usize) {
        if let Some(r) = self.recs[mark.min(self.recs.len())..]
            .iter()
            .find(|r| r.klen & SPILLED != 0)
        {
            self.bytes.truncate(r.kw as usize);
        }
        self.recs.truncate(mark);
    }
}

impl ScanBuf {
    fn clear(&mut self) {
        self.recs.clear();
        self.bytes.clear();
    }

    /// Hands every record to `f`, in order.
    fn replay(&self, mut f: &mut dyn FnMut(&[u8], &[u8])) {
        for r in &self.recs {
            if r.klen & SPILLED == 0 {
                f.inline(r.kw, r.klen as usize, r.vw, r.vlen as usize);
            } else {
                let (at, kl, vl) = (r.kw as usize, (r.klen & !SPILLED) as usize, r.vlen as usize);
                let b = &self.bytes[at..at + kl + vl];
                f(&b[..kl], &b[kl..]);
            }
        }
    }
}

thread_local! {
    /// See `scan`.
    static SCAN_BUF: std::cell::Cell<ScanBuf> = std::cell::Cell::new(ScanBuf::default());
}

impl OrderedKv for FerriteIndex {
    fn name(&self) -> &str {
        if self.durable {
            "ferrite"
        } else {
            "ferrite-dram"
        }
    }

    fn limits(&self) -> (usize, usize) {
        (MAX_KEY, MAX_VALUE)
    }

    fn get_into(&self, key: &[u8], out: &mut Vec<u8>) -> KvResult<bool> {
        self.isolated(|| self.lookup(key, out))
    }

    fn insert(&self, key: &[u8], value: &[u8]) -> KvResult<bool> {
        let r = self.put(key, value, PutMode::Insert);
        self.settle();
        r
    }

    fn update(&self, key: &[u8], value: &[u8]) -> KvResult<bool> {
        let r = self.put(key, value, PutMode::Update);
        self.settle();
        r
    }

    fn upsert(&self, key: &[u8], value: &[u8]) -> KvResult<bool> {
        let r = self.put(key, value, PutMode::Upsert);
        self.settle();
        r
    }

    fn remove(&self, key: &[u8]) -> KvResult<bool> {
        let r = self.delete(key);
        self.settle();
        r
    }

    fn count(&self) -> usize {
        let n: i64 = self
            .counts
            .iter()
            .map(|s| s.0.load(Ordering::Relaxed))
            .sum();
        n.max(0) as usize
    }

    fn scan(&self, start: &[u8], n: usize, f: &mut dyn FnMut(&[u8], &[u8])) -> KvResult<usize> {
        check_sizes(start, None, MAX_KEY, MAX_VALUE)?;
        // Records are buffered until the read is known not to overlap a batch
        // (a retried scan must not call `f` twice). The buffer is taken out of
        // its slot, so an `f` that scans again gets a fresh one.
        let mut buf = SCAN_BUF.take();
        let got = self.isolated(|| {
            buf.clear();
            self.scan_impl(start, true, n, &mut buf)
        });
        buf.replay(f);
        if buf.bytes.capacity() <= 1 << 20 && buf.recs.capacity() <= 1 << 16 {
            SCAN_BUF.set(buf);
        }
        got
    }

    fn write_batch(&self, batch: &WriteBatch) -> KvResult<()> {
        self.batch_impl(batch)
    }

    fn cursor(&self) -> KvResult<Box<dyn KvCursor + '_>> {
        Ok(Box::new(Cursor::new(self)))
    }
}

/// Reads for embedders (the `ferrite` facade): a lookup that lends the value
/// instead of copying it, and the backward step of a reverse iteration.
impl FerriteIndex {
    /// Calls `f` with the value of `key` without copying it, and returns what
    /// `f` returned (`None` when the key is absent). The value is the one
    /// stored when the lookup validated, seen whole: never part of a write
    /// batch (like every read, see `isolated`). An out-of-line value is lent
    /// from the pool; an inline one (at most 8 bytes) from a copy on the
    /// stack.
    ///
    /// `f` runs while this thread is pinned in the index's reclamation epoch:
    /// blocks that writers retire meanwhile are freed only after it returns,
    /// so a long `f` holds memory back (it blocks no reader or writer).
    pub fn get_with<R>(&self, key: &[u8], f: impl FnOnce(&[u8]) -> R) -> KvResult<Option<R>> {
        let g = crate::ebr::pin();
        let found = self.isolated(|| self.lookup_ref(key, &g))?;
        Ok(found.map(|v| f(v.bytes())))
    }

    /// The entry with the largest key below `bound` (below every key when
    /// `bound` is `None`: the last entry), read whole with respect to write
    /// batches. The step of a reverse iteration.
    pub fn last_below(&self, bound: Option<&[u8]>) -> KvResult<Option<(Vec<u8>, Vec<u8>)>> {
        if let Some(b) = bound {
            check_sizes(b, None, MAX_KEY, MAX_VALUE)?;
        }
        self.isolated(|| self.prev_entry(bound))
    }
}
