//! The transactional interface TPC-C runs on: begin, reads and writes that see
//! the transaction's own writes, bounded range scans, commit or abort.
//!
//! * [`BatchStore`] gives any [`OrderedKv`] transactions: writes are buffered
//!   in the transaction and applied with one atomic `write_batch` at commit
//!   (for single-threaded drivers: there is no isolation between concurrent
//!   transactions);
//! * the buffer manager's B+-tree implements it with its own transactions
//!   (`super::designs`).

use std::collections::BTreeMap;

use ferrite_kv::{KvResult, OrderedKv, WriteBatch};

/// A store that runs transactions.
pub trait TxStore: Sync {
    fn label(&self) -> String;
    fn begin(&self) -> KvResult<Box<dyn Tx + '_>>;
}

/// One transaction. Dropping it without commit aborts it.
pub trait Tx {
    /// The value of `key` into `out` (own writes included); false when absent.
    fn get(&mut self, key: &[u8], out: &mut Vec<u8>) -> KvResult<bool>;
    /// Inserts a new key; false when it exists.
    fn insert(&mut self, key: &[u8], value: &[u8]) -> KvResult<bool>;
    /// Replaces an existing key's value; false when absent.
    fn update(&mut self, key: &[u8], value: &[u8]) -> KvResult<bool>;
    /// Removes a key; false when absent.
    fn remove(&mut self, key: &[u8]) -> KvResult<bool>;
    /// Calls `f` for the entries with `start <= key < end`, ascending, until it
    /// returns false; returns how many it was called for.
    fn scan(
        &mut self,
        start: &[u8],
        end: &[u8],
        f: &mut dyn FnMut(&[u8], &[u8]) -> bool,
    ) -> KvResult<usize>;
    /// Makes every write durable (as the store promises) and visible.
    fn commit(self: Box<Self>) -> KvResult<()>;
    /// Undoes every write.
    fn abort(self: Box<Self>) -> KvResult<()>;
}

/// Scans `[start, end)` of an [`OrderedKv`] in growing chunks, so a short
/// range reads little and a long one few times.
pub fn kv_range(
    kv: &dyn OrderedKv,
    start: &[u8],
    end: &[u8],
    f: &mut dyn FnMut(&[u8], &[u8]) -> bool,
) -> KvResult<usize> {
    let mut from = start.to_vec();
    let mut chunk = 8usize;
    let mut called = 0usize;
    loop {
        let mut stop = false;
        let mut last: Option<Vec<u8>> = None;
        let got = kv.scan(&from, chunk, &mut |k, v| {
            if stop {
                return;
            }
            if k >= end {
                stop = true;
                return;
            }
            called += 1;
            if !f(k, v) {
                stop = true;
                return;
            }
            last = Some(k.to_vec());
        })?;
        match last {
            Some(mut l) if !stop && got == chunk => {
                l.push(0);
                from = l;
                chunk = (chunk * 4).min(1024);
            }
            _ => return Ok(called),
        }
    }
}

/// Transactions over any [`OrderedKv`]: buffered writes, one `write_batch`
/// at commit.
pub struct BatchStore<'a> {
    pub kv: &'a dyn OrderedKv,
}

impl TxStore for BatchStore<'_> {
    fn label(&self) -> String {
        self.kv.name().to_string()
    }
    fn begin(&self) -> KvResult<Box<dyn Tx + '_>> {
        Ok(Box::new(BatchTx {
            kv: self.kv,
            writes: BTreeMap::new(),
        }))
    }
}

struct BatchTx<'a> {
    kv: &'a dyn OrderedKv,
    /// Key → new value, or None for a removal.
    writes: BTreeMap<Vec<u8>, Option<Vec<u8>>>,
}

impl BatchTx<'_> {
    fn exists(&mut self, key: &[u8]) -> KvResult<bool> {
        match self.writes.get(key) {
            Some(w) => Ok(w.is_some()),
            None => {
                let mut v = Vec::new();
                self.kv.get_into(key, &mut v)
            }
        }
    }
}

impl Tx for BatchTx<'_> {
    fn get(&mut self, key: &[u8], out: &mut Vec<u8>) -> KvResult<bool> {
        match self.writes.get(key) {
            Some(Some(v)) => {
                out.clear();
                out.extend_from_slice(v);
                Ok(true)
            }
            Some(None) => {
                out.clear();
                Ok(false)
            }
            None => self.kv.get_into(key, out),
        }
    }

    fn insert(&mut self, key: &[u8], value: &[u8]) -> KvResult<bool> {
        if self.exists(key)? {
            return Ok(false);
        }
        self.writes.insert(key.to_vec(), Some(value.to_vec()));
        Ok(true)
    }

    fn update(&mut self, key: &[u8], value: &[u8]) -> KvResult<bool> {
        if !self.exists(key)? {
            return Ok(false);
        }
        self.writes.insert(key.to_vec(), Some(value.to_vec()));
        Ok(true)
    }

    fn remove(&mut self, key: &[u8]) -> KvResult<bool> {
        if !self.exists(key)? {
            return Ok(false);
        }
        self.writes.insert(key.to_vec(), None);
        Ok(true)
    }

    fn scan(
        &mut self,
        start: &[u8],
        end: &[u8],
        f: &mut dyn FnMut(&[u8], &[u8]) -> bool,
    ) -> KvResult<usize> {
        if start >= end {
            return Ok(0);
        }
        // Merge the store's range with the transaction's writes in it.
        let mut own = self
            .writes
            .range::<[u8], _>((
                std::ops::Bound::Included(start),
                std::ops::Bound::Excluded(end),
            ))
            .peekable();
        let mut called = 0usize;
        let mut stopped = false;
        let mut emit = |k: &[u8], v: &[u8], called: &mut usize| -> bool {
            *called += 1;
            f(k, v)
        };
        kv_range(self.kv, start, end, &mut |bk, bv| {
            while let Some((ok, ov)) = own.peek() {
                if ok.as_slice() > bk {
                    break;
                }
                let same = ok.as_slice() == bk;
                if let Some(v) = ov {
                    if !emit(ok, v, &mut called) {
                        stopped = true;
                        return false;
                    }
                }
                own.next();
                if same {
                    return true;
                }
            }
            if !emit(bk, bv, &mut called) {
                stopped = true;
                return false;
            }
            true
        })?;
        if !stopped {
            for (k, v) in own {
                if let Some(v) = v {
                    if !emit(k, v, &mut called) {
                        break;
                    }
                }
            }
        }
        Ok(called)
    }

    fn commit(self: Box<Self>) -> KvResult<()> {
        if self.writes.is_empty() {
            return Ok(());
        }
        let mut b = WriteBatch::new();
        for (k, v) in &self.writes {
            match v {
                Some(v) => b.put(k, v),
                None => b.delete(k),
            };
        }
        self.kv.write_batch(&b)
    }

    fn abort(self: Box<Self>) -> KvResult<()> {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::BTreeMapKv;

    fn collect(tx: &mut dyn Tx, s: &[u8], e: &[u8]) -> Vec<(Vec<u8>, Vec<u8>)> {
        let mut v = Vec::new();
        tx.scan(s, e, &mut |k, val| {
            v.push((k.to_vec(), val.to_vec()));
            true
        })
        .unwrap();
        v
    }

    #[test]
    fn a_transaction_sees_its_writes_and_commits_them_atomically() {
        let kv = BTreeMapKv::new();
        for i in 0..50u8 {
            kv.insert(&[i], &[i]).unwrap();
        }
        let st = BatchStore { kv: &kv };
        let mut tx = st.begin().unwrap();
        assert!(tx.insert(&[100], b"new").unwrap());
        assert!(!tx.insert(&[3], b"dup").unwrap());
        assert!(tx.update(&[4], b"four").unwrap());
        assert!(!tx.update(&[200], b"x").unwrap());
        assert!(tx.remove(&[5]).unwrap());
        assert!(!tx.remove(&[5]).unwrap());
        let mut out = Vec::new();
        assert!(tx.get(&[4], &mut out).unwrap() && out == b"four");
        assert!(!tx.get(&[5], &mut out).unwrap());
        // The store itself does not see them yet.
        assert_eq!(kv.get(&[4]).unwrap().unwrap(), vec![4]);
        let got = collect(tx.as_mut(), &[3], &[7]);
        let keys: Vec<u8> = got.iter().map(|(k, _)| k[0]).collect();
        assert_eq!(keys, vec![3, 4, 6]);
        assert_eq!(got[1].1, b"four");
        let got = collect(tx.as_mut(), &[48], &[255]);
        let keys: Vec<u8> = got.iter().map(|(k, _)| k[0]).collect();
        assert_eq!(keys, vec![48, 49, 100]);
        tx.commit().unwrap();
        assert_eq!(kv.get(&[4]).unwrap().unwrap(), b"four");
        assert_eq!(kv.get(&[5]).unwrap(), None);
        assert_eq!(kv.get(&[100]).unwrap().unwrap(), b"new");
    }

    #[test]
    fn abort_leaves_the_store_alone() {
        let kv = BTreeMapKv::new();
        kv.insert(b"a", b"1").unwrap();
        let st = BatchStore { kv: &kv };
        let mut tx = st.begin().unwrap();
        tx.update(b"a", b"2").unwrap();
        tx.insert(b"b", b"3").unwrap();
        tx.abort().unwrap();
        assert_eq!(kv.get(b"a").unwrap().unwrap(), b"1");
        assert_eq!(kv.count(), 1);
    }

    #[test]
    fn scans_stop_when_asked_and_cross_chunks() {
        let kv = BTreeMapKv::new();
        for i in 0..3000u32 {
            kv.insert(&i.to_be_bytes(), b"v").unwrap();
        }
        let mut n = 0;
        let called = kv_range(
            &kv,
            &10u32.to_be_bytes(),
            &2500u32.to_be_bytes(),
            &mut |_, _| {
                n += 1;
                true
            },
        )
        .unwrap();
        assert_eq!((called, n), (2490, 2490));
        let called = kv_range(&kv, &0u32.to_be_bytes(), &[255; 4], &mut |k, _| {
            k < &7u32.to_be_bytes()[..]
        })
        .unwrap();
        assert_eq!(called, 8);
        let st = BatchStore { kv: &kv };
        let mut tx = st.begin().unwrap();
        tx.remove(&11u32.to_be_bytes()).unwrap();
        let mut seen = Vec::new();
        tx.scan(&10u32.to_be_bytes(), &[255; 4], &mut |k, _| {
            seen.push(u32::from_be_bytes(k.try_into().unwrap()));
            seen.len() < 3
        })
        .unwrap();
        assert_eq!(seen, vec![10, 12, 13]);
    }
}
