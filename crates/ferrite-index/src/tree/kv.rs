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
use super::write::PutMode;
use super::FerriteIndex;
use crate::{MAX_KEY, MAX_VALUE};

/// Scan results waiting for their read to be validated: the records' bytes and
/// each record's (key length, value length).
type ScanBuf = (Vec<u8>, Vec<(u32, u32)>);

/// Appends `s`; 8-byte slices (the common key and value) as one word store
/// instead of a call to `memcpy`, which dominated buffered scans.
#[inline(always)]
fn put_bytes(buf: &mut Vec<u8>, s: &[u8]) {
    match <&[u8; 8]>::try_from(s) {
        Ok(w) => buf.extend_from_slice(w),
        Err(_) => buf.extend_from_slice(s),
    }
}

thread_local! {
    /// See `scan`.
    static SCAN_BUF: std::cell::Cell<ScanBuf> = const {
        std::cell::Cell::new((Vec::new(), Vec::new()))
    };
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
        let (mut bytes, mut lens) = SCAN_BUF.take();
        let got = self.isolated(|| {
            bytes.clear();
            lens.clear();
            self.scan_impl(start, true, n, &mut |k, v| {
                put_bytes(&mut bytes, k);
                put_bytes(&mut bytes, v);
                lens.push((k.len() as u32, v.len() as u32));
            })
        });
        let mut at = 0;
        for &(kl, vl) in &lens {
            let (kl, vl) = (kl as usize, vl as usize);
            f(&bytes[at..at + kl], &bytes[at + kl..at + kl + vl]);
            at += kl + vl;
        }
        if bytes.capacity() <= 1 << 20 {
            SCAN_BUF.set((bytes, lens));
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
