//! [`Transaction`]: multi-key reads and writes on one map, committed
//! all-or-nothing (for readers and across a crash) and serializable.
//!
//! Design: a transaction takes every stripe of the map's writer gate
//! exclusively when it begins and keeps them until it ends, so no other
//! writer of the map runs meanwhile (strict two-phase locking at map
//! granularity): its reads are repeatable and its view cannot change under
//! it. Its writes are buffered in DRAM; `commit` hands them to the index as
//! one write batch (a checksummed redo log committed by one root-word store,
//! then applied under the index's reader sequence lock), so readers see the
//! transaction whole or not at all and a crash keeps all of it or none.
//! Readers never wait for a transaction.

use std::collections::BTreeMap;
use std::ops::{Bound, RangeBounds};

use ferrite_index::{OrderedKv, WriteBatch};

use crate::error::Result;
use crate::map::Map;
use crate::range::Range;
use crate::{MAX_KEY, MAX_VALUE};

/// A transaction on one map: see [`Map::transaction`].
///
/// Reads see the map as of the transaction's start plus its own writes.
/// Dropping it without [`commit`](Transaction::commit) rolls it back.
///
/// ```
/// # fn main() -> Result<(), ferrite::Error> {
/// let db = ferrite::Db::volatile(16 << 20)?;
/// let accounts = db.map("accounts")?;
/// accounts.upsert("alice", 100u64.to_be_bytes())?;
/// accounts.upsert("bob", 0u64.to_be_bytes())?;
/// let balance = |v: Option<Vec<u8>>| u64::from_be_bytes(v.unwrap().try_into().unwrap());
///
/// let mut tx = accounts.transaction()?;
/// let (a, b) = (balance(tx.get("alice")?), balance(tx.get("bob")?));
/// tx.upsert("alice", (a - 30).to_be_bytes())?;
/// tx.upsert("bob", (b + 30).to_be_bytes())?;
/// tx.commit()?;
///
/// assert_eq!(balance(accounts.get("bob")?), 30);
/// # Ok(())
/// # }
/// ```
pub struct Transaction {
    map: Map,
    /// Buffered writes: `None` removes the key.
    writes: BTreeMap<Vec<u8>, Option<Vec<u8>>>,
    /// Holds the gate (false once released).
    holding: bool,
}

impl Map {
    /// Begins a transaction: waits until the map's other writers are done
    /// and keeps them out until the transaction commits or is dropped
    /// (readers go on). Fails with
    /// [`Error::TransactionActive`](crate::Error::TransactionActive) when
    /// this thread already holds one on this map.
    ///
    /// Isolation level: **serializable** (transactions and all other writes
    /// of the map are serialized; a transaction's reads are repeatable and
    /// phantom-free). Readers outside transactions see each committed
    /// transaction whole or not at all.
    ///
    /// ```
    /// # fn main() -> Result<(), ferrite::Error> {
    /// let db = ferrite::Db::volatile(16 << 20)?;
    /// let m = db.map("m")?;
    /// let mut tx = m.transaction()?;
    /// tx.insert("a", "1")?;
    /// assert!(m.get("a")?.is_none()); // not visible before commit
    /// tx.commit()?;
    /// assert!(m.get("a")?.is_some());
    /// # Ok(())
    /// # }
    /// ```
    pub fn transaction(&self) -> Result<Transaction> {
        self.check_writable()?;
        self.inner.gate.lock_all();
        Ok(Transaction {
            map: self.clone(),
            writes: BTreeMap::new(),
            holding: true,
        })
    }
}

fn check_key(key: &[u8]) -> Result<()> {
    Ok(ferrite_kv::check_sizes(key, None, MAX_KEY, MAX_VALUE)?)
}

fn check_kv(key: &[u8], value: &[u8]) -> Result<()> {
    Ok(ferrite_kv::check_sizes(
        key,
        Some(value),
        MAX_KEY,
        MAX_VALUE,
    )?)
}

impl Transaction {
    /// The map this transaction writes to.
    ///
    /// ```
    /// # fn main() -> Result<(), ferrite::Error> {
    /// let db = ferrite::Db::volatile(16 << 20)?;
    /// let tx = db.map("m")?.transaction()?;
    /// assert_eq!(tx.map().name(), "m");
    /// # Ok(())
    /// # }
    /// ```
    pub fn map(&self) -> &Map {
        &self.map
    }

    /// The value of `key`: this transaction's own write if it made one,
    /// otherwise the map's.
    ///
    /// ```
    /// # fn main() -> Result<(), ferrite::Error> {
    /// let db = ferrite::Db::volatile(16 << 20)?;
    /// let m = db.map("m")?;
    /// m.insert("k", "old")?;
    /// let mut tx = m.transaction()?;
    /// tx.upsert("k", "new")?;
    /// assert_eq!(tx.get("k")?, Some(b"new".to_vec()));
    /// # Ok(())
    /// # }
    /// ```
    pub fn get(&self, key: impl AsRef<[u8]>) -> Result<Option<Vec<u8>>> {
        let k = key.as_ref();
        match self.writes.get(k) {
            Some(w) => {
                check_key(k)?;
                Ok(w.clone())
            }
            None => Ok(self.map.index().get(k)?),
        }
    }

    /// True when `key` is present (in this transaction's view).
    ///
    /// ```
    /// # fn main() -> Result<(), ferrite::Error> {
    /// let db = ferrite::Db::volatile(16 << 20)?;
    /// let mut tx = db.map("m")?.transaction()?;
    /// tx.insert("k", "v")?;
    /// assert!(tx.contains("k")?);
    /// # Ok(())
    /// # }
    /// ```
    pub fn contains(&self, key: impl AsRef<[u8]>) -> Result<bool> {
        let k = key.as_ref();
        match self.writes.get(k) {
            Some(w) => Ok(w.is_some()),
            None => Ok(self.map.index().get_with(k, |_| ())?.is_some()),
        }
    }

    /// Inserts `key` if absent (true), or leaves it (false).
    ///
    /// ```
    /// # fn main() -> Result<(), ferrite::Error> {
    /// let db = ferrite::Db::volatile(16 << 20)?;
    /// let mut tx = db.map("m")?.transaction()?;
    /// assert!(tx.insert("k", "1")?);
    /// assert!(!tx.insert("k", "2")?);
    /// # Ok(())
    /// # }
    /// ```
    pub fn insert(&mut self, key: impl AsRef<[u8]>, value: impl AsRef<[u8]>) -> Result<bool> {
        let (k, v) = (key.as_ref(), value.as_ref());
        check_kv(k, v)?;
        if self.contains(k)? {
            return Ok(false);
        }
        self.writes.insert(k.to_vec(), Some(v.to_vec()));
        Ok(true)
    }

    /// Replaces the value of `key` if present (true), or does nothing (false).
    ///
    /// ```
    /// # fn main() -> Result<(), ferrite::Error> {
    /// let db = ferrite::Db::volatile(16 << 20)?;
    /// let mut tx = db.map("m")?.transaction()?;
    /// assert!(!tx.update("k", "1")?);
    /// # Ok(())
    /// # }
    /// ```
    pub fn update(&mut self, key: impl AsRef<[u8]>, value: impl AsRef<[u8]>) -> Result<bool> {
        let (k, v) = (key.as_ref(), value.as_ref());
        check_kv(k, v)?;
        if !self.contains(k)? {
            return Ok(false);
        }
        self.writes.insert(k.to_vec(), Some(v.to_vec()));
        Ok(true)
    }

    /// Sets `key` to `value`; true when the key was new.
    ///
    /// ```
    /// # fn main() -> Result<(), ferrite::Error> {
    /// let db = ferrite::Db::volatile(16 << 20)?;
    /// let mut tx = db.map("m")?.transaction()?;
    /// assert!(tx.upsert("k", "1")?);
    /// assert!(!tx.upsert("k", "2")?);
    /// # Ok(())
    /// # }
    /// ```
    pub fn upsert(&mut self, key: impl AsRef<[u8]>, value: impl AsRef<[u8]>) -> Result<bool> {
        let (k, v) = (key.as_ref(), value.as_ref());
        check_kv(k, v)?;
        let new = !self.contains(k)?;
        self.writes.insert(k.to_vec(), Some(v.to_vec()));
        Ok(new)
    }

    /// Removes `key`; true when it was present.
    ///
    /// ```
    /// # fn main() -> Result<(), ferrite::Error> {
    /// let db = ferrite::Db::volatile(16 << 20)?;
    /// let m = db.map("m")?;
    /// m.insert("k", "v")?;
    /// let mut tx = m.transaction()?;
    /// assert!(tx.remove("k")?);
    /// assert!(!tx.contains("k")?);
    /// # Ok(())
    /// # }
    /// ```
    pub fn remove(&mut self, key: impl AsRef<[u8]>) -> Result<bool> {
        let k = key.as_ref();
        check_key(k)?;
        let had = self.contains(k)?;
        if had {
            self.writes.insert(k.to_vec(), None);
        }
        Ok(had)
    }

    /// The entries of `range` in this transaction's view (the map's entries
    /// with this transaction's writes applied), double-ended. The view does
    /// not change while the transaction holds the map.
    ///
    /// ```
    /// # fn main() -> Result<(), ferrite::Error> {
    /// let db = ferrite::Db::volatile(16 << 20)?;
    /// let m = db.map("m")?;
    /// m.insert("a", "1")?;
    /// m.insert("c", "3")?;
    /// let mut tx = m.transaction()?;
    /// tx.insert("b", "2")?;
    /// tx.remove("c")?;
    /// let keys: Vec<_> = tx.range("a"..).map(|e| e.map(|(k, _)| k)).collect::<Result<_, _>>()?;
    /// assert_eq!(keys, [b"a".to_vec(), b"b".to_vec()]);
    /// # Ok(())
    /// # }
    /// ```
    pub fn range<K: AsRef<[u8]>>(&self, range: impl RangeBounds<K>) -> TxRange<'_> {
        let lo = range.start_bound().map(|k| k.as_ref().to_vec());
        let hi = range.end_bound().map(|k| k.as_ref().to_vec());
        let overlay = (!empty_range(&lo, &hi))
            .then(|| self.writes.range::<Vec<u8>, _>((lo.as_ref(), hi.as_ref())));
        TxRange {
            base: self.map.range(range_of(&lo, &hi)),
            overlay,
            base_front: None,
            base_back: None,
            over_front: None,
            over_back: None,
        }
    }

    /// Every entry in this transaction's view.
    ///
    /// ```
    /// # fn main() -> Result<(), ferrite::Error> {
    /// let db = ferrite::Db::volatile(16 << 20)?;
    /// let mut tx = db.map("m")?.transaction()?;
    /// tx.insert("k", "v")?;
    /// assert_eq!(tx.iter().count(), 1);
    /// # Ok(())
    /// # }
    /// ```
    pub fn iter(&self) -> TxRange<'_> {
        self.range::<&[u8]>(..)
    }

    /// Number of writes buffered so far.
    ///
    /// ```
    /// # fn main() -> Result<(), ferrite::Error> {
    /// let db = ferrite::Db::volatile(16 << 20)?;
    /// let mut tx = db.map("m")?.transaction()?;
    /// tx.upsert("a", "1")?;
    /// tx.upsert("a", "2")?;
    /// assert_eq!(tx.pending_writes(), 1);
    /// # Ok(())
    /// # }
    /// ```
    pub fn pending_writes(&self) -> usize {
        self.writes.len()
    }

    /// Applies every write of the transaction at once, all-or-nothing, and
    /// ends it. On an error nothing of it is visible, except when the error
    /// is [`Error::NeedsReopen`](crate::Error::NeedsReopen) (the commit was
    /// logged and is completed when the pool is reopened).
    ///
    /// ```
    /// # fn main() -> Result<(), ferrite::Error> {
    /// let db = ferrite::Db::volatile(16 << 20)?;
    /// let m = db.map("m")?;
    /// let mut tx = m.transaction()?;
    /// tx.insert("a", "1")?;
    /// tx.insert("b", "2")?;
    /// tx.commit()?;
    /// assert_eq!(m.len(), 2);
    /// # Ok(())
    /// # }
    /// ```
    pub fn commit(mut self) -> Result<()> {
        let writes = std::mem::take(&mut self.writes);
        if writes.is_empty() {
            return Ok(());
        }
        let mut wb = WriteBatch::new();
        for (k, w) in &writes {
            match w {
                Some(v) => wb.put(k, v),
                None => wb.delete(k),
            };
        }
        if ferrite_pm::tripwire::armed(ferrite_pm::tripwire::Tripwire::TxnUnbatchedCommit) {
            // Tripwire: one write at a time (a crash can cut between them).
            let idx = self.map.index();
            for (k, w) in &writes {
                match w {
                    Some(v) => idx.upsert(k, v)?,
                    None => idx.remove(k)?,
                };
            }
            return Ok(());
        }
        self.map.write_batch(&wb)
    }

    /// Ends the transaction without applying any of its writes (what
    /// dropping it does).
    ///
    /// ```
    /// # fn main() -> Result<(), ferrite::Error> {
    /// let db = ferrite::Db::volatile(16 << 20)?;
    /// let m = db.map("m")?;
    /// let mut tx = m.transaction()?;
    /// tx.insert("a", "1")?;
    /// tx.rollback();
    /// assert!(m.is_empty());
    /// # Ok(())
    /// # }
    /// ```
    pub fn rollback(self) {}
}

/// True when no key lies between the bounds (`BTreeMap::range` would
/// panic on them).
fn empty_range(lo: &Bound<Vec<u8>>, hi: &Bound<Vec<u8>>) -> bool {
    match (lo, hi) {
        (Bound::Included(l), Bound::Included(h)) => l > h,
        (Bound::Included(l) | Bound::Excluded(l), Bound::Excluded(h))
        | (Bound::Excluded(l), Bound::Included(h)) => l >= h,
        _ => false,
    }
}

fn range_of(lo: &Bound<Vec<u8>>, hi: &Bound<Vec<u8>>) -> (Bound<Vec<u8>>, Bound<Vec<u8>>) {
    (lo.clone(), hi.clone())
}

impl Drop for Transaction {
    fn drop(&mut self) {
        if self.holding {
            self.holding = false;
            // SAFETY: `Map::transaction` took every stripe for this
            // transaction; this releases them once.
            unsafe { self.map.inner.gate.unlock_all() };
        }
    }
}

impl std::fmt::Debug for Transaction {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Transaction")
            .field("map", &self.map.name())
            .field("pending_writes", &self.writes.len())
            .finish()
    }
}

type Entry = (Vec<u8>, Vec<u8>);

/// The entries of a range in a [`Transaction`]'s view: the map's entries
/// merged with the transaction's own writes, in key order, double-ended.
///
/// ```
/// # fn main() -> Result<(), ferrite::Error> {
/// let db = ferrite::Db::volatile(16 << 20)?;
/// let mut tx = db.map("m")?.transaction()?;
/// tx.insert("a", "1")?;
/// tx.insert("b", "2")?;
/// let last = tx.iter().next_back().transpose()?;
/// assert_eq!(last, Some((b"b".to_vec(), b"2".to_vec())));
/// # Ok(())
/// # }
/// ```
pub struct TxRange<'t> {
    base: Range,
    overlay: Option<std::collections::btree_map::Range<'t, Vec<u8>, Option<Vec<u8>>>>,
    base_front: Option<Entry>,
    base_back: Option<Entry>,
    over_front: Option<(&'t Vec<u8>, &'t Option<Vec<u8>>)>,
    over_back: Option<(&'t Vec<u8>, &'t Option<Vec<u8>>)>,
}

impl TxRange<'_> {
    /// The next base entry from the front: a peeked one, the iterator's, or
    /// (once the iterator is spent) the one peeked from the back.
    fn base_next(&mut self) -> Result<Option<Entry>> {
        if let Some(e) = self.base_front.take() {
            return Ok(Some(e));
        }
        match self.base.next() {
            Some(r) => r.map(Some),
            None => Ok(self.base_back.take()),
        }
    }

    fn base_next_back(&mut self) -> Result<Option<Entry>> {
        if let Some(e) = self.base_back.take() {
            return Ok(Some(e));
        }
        match self.base.next_back() {
            Some(r) => r.map(Some),
            None => Ok(self.base_front.take()),
        }
    }
}

impl Iterator for TxRange<'_> {
    type Item = Result<Entry>;

    fn next(&mut self) -> Option<Result<Entry>> {
        loop {
            let b = match self.base_next() {
                Ok(b) => b,
                Err(e) => return Some(Err(e)),
            };
            let o = self
                .over_front
                .take()
                .or_else(|| self.overlay.as_mut().and_then(|o| o.next()))
                .or_else(|| self.over_back.take());
            match (b, o) {
                (None, None) => return None,
                (Some(b), None) => return Some(Ok(b)),
                (b, Some((ok, ov))) => {
                    if let Some(b) = b {
                        if b.0 < *ok {
                            self.over_front = Some((ok, ov));
                            return Some(Ok(b));
                        }
                        if b.0 > *ok {
                            self.base_front = Some(b);
                        }
                        // Equal: the transaction's write shadows the map's.
                    }
                    if let Some(v) = ov {
                        return Some(Ok((ok.clone(), v.clone())));
                    }
                    // A removal: skip the key.
                }
            }
        }
    }
}

impl DoubleEndedIterator for TxRange<'_> {
    fn next_back(&mut self) -> Option<Result<Entry>> {
        loop {
            let b = match self.base_next_back() {
                Ok(b) => b,
                Err(e) => return Some(Err(e)),
            };
            let o = self
                .over_back
                .take()
                .or_else(|| self.overlay.as_mut().and_then(|o| o.next_back()))
                .or_else(|| self.over_front.take());
            match (b, o) {
                (None, None) => return None,
                (Some(b), None) => return Some(Ok(b)),
                (b, Some((ok, ov))) => {
                    if let Some(b) = b {
                        if b.0 > *ok {
                            self.over_back = Some((ok, ov));
                            return Some(Ok(b));
                        }
                        if b.0 < *ok {
                            self.base_back = Some(b);
                        }
                    }
                    if let Some(v) = ov {
                        return Some(Ok((ok.clone(), v.clone())));
                    }
                }
            }
        }
    }
}
