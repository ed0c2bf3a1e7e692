//! [`Map`]: a named ordered map of byte strings (the PM range index), or a
//! volatile one; its reads, writes, compare-and-swap, read-modify-write and
//! write batches. Iteration is in [`crate::range`], transactions in
//! [`crate::txn`].

use std::ops::RangeBounds;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use ferrite_index::{FerriteIndex, OrderedKv, WriteBatch};
use ferrite_pm::{Durability, ObjectId};

use crate::error::{Error, Result};
use crate::gate::Gate;
use crate::range::Range;

/// The shared state behind every handle of one map.
pub(crate) struct MapInner {
    pub(crate) idx: FerriteIndex,
    pub(crate) gate: Gate,
    pub(crate) name: String,
    pub(crate) durability: Durability,
    /// The index object (None for a volatile map), to look at its batch-log
    /// root word after a failed commit.
    pub(crate) object: Option<ObjectId>,
    /// Set when a committed transaction could not be applied: writes are
    /// refused until the pool is reopened (which replays the log).
    pub(crate) broken: AtomicBool,
    pub(crate) broken_why: Mutex<String>,
}

/// An ordered map from byte strings to byte strings, in a pool
/// ([`Db::map`](crate::Db::map)) or in DRAM
/// ([`Db::volatile_map`](crate::Db::volatile_map)).
///
/// Keys sort lexicographically by byte (encode integers big-endian to sort
/// them numerically); keys are at most [`MAX_KEY`](crate::MAX_KEY) bytes,
/// values at most [`MAX_VALUE`](crate::MAX_VALUE). A `Map` is a cheap handle:
/// clone it and use it from any number of threads; every method takes `&self`.
///
/// **Durability**: on a map of a pool every write is durable when the call
/// returns, to the degree [`Map::durability`] states; a write that was in
/// progress when the process died is, after reopening, either complete or
/// absent, never partial.
///
/// **Isolation**: reads never wait. Each read sees a committed state: a write
/// batch or transaction whole or not at all. Writes of different keys run in
/// parallel; [`compare_and_swap`](Map::compare_and_swap),
/// [`update_with`](Map::update_with) and [`transaction`](Map::transaction)s
/// are atomic with respect to every other writer (see the crate guide).
///
/// ```
/// # fn main() -> Result<(), ferrite::Error> {
/// let db = ferrite::Db::volatile(16 << 20)?;
/// let users = db.map("users")?;
/// users.insert("alice", "admin")?;
/// assert_eq!(users.get("alice")?.as_deref(), Some(&b"admin"[..]));
/// # Ok(())
/// # }
/// ```
#[derive(Clone)]
pub struct Map {
    pub(crate) inner: Arc<MapInner>,
}

/// A failed [`Map::compare_and_swap`]: the value found instead of the
/// expected one.
///
/// ```
/// # fn main() -> Result<(), ferrite::Error> {
/// let db = ferrite::Db::volatile(16 << 20)?;
/// let m = db.map("m")?;
/// m.insert("k", "1")?;
/// let conflict = m.compare_and_swap("k", Some("0"), Some("2"))?.unwrap_err();
/// assert_eq!(conflict.current.as_deref(), Some(&b"1"[..]));
/// # Ok(())
/// # }
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Conflict {
    /// The key's value when the swap was tried (`None`: absent).
    pub current: Option<Vec<u8>>,
}

/// Several writes to one map applied all-or-nothing, for readers and across
/// a crash ([`Map::apply`]).
///
/// ```
/// # fn main() -> Result<(), ferrite::Error> {
/// let db = ferrite::Db::volatile(16 << 20)?;
/// let m = db.map("m")?;
/// let mut b = ferrite::Batch::new();
/// b.put("a", "1").put("b", "2").remove("c");
/// m.apply(&b)?;
/// assert_eq!(m.len(), 2);
/// # Ok(())
/// # }
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Batch {
    pub(crate) wb: WriteBatch,
}

impl Batch {
    /// An empty batch.
    ///
    /// ```
    /// assert!(ferrite::Batch::new().is_empty());
    /// ```
    pub fn new() -> Batch {
        Batch::default()
    }

    /// Adds "set `key` to `value`" (insert or replace).
    ///
    /// ```
    /// let mut b = ferrite::Batch::new();
    /// b.put("k", "v");
    /// assert_eq!(b.len(), 1);
    /// ```
    pub fn put(&mut self, key: impl AsRef<[u8]>, value: impl AsRef<[u8]>) -> &mut Batch {
        self.wb.put(key.as_ref(), value.as_ref());
        self
    }

    /// Adds "remove `key`" (nothing when absent).
    ///
    /// ```
    /// let mut b = ferrite::Batch::new();
    /// b.remove("k");
    /// assert_eq!(b.len(), 1);
    /// ```
    pub fn remove(&mut self, key: impl AsRef<[u8]>) -> &mut Batch {
        self.wb.delete(key.as_ref());
        self
    }

    /// Number of writes.
    ///
    /// ```
    /// let mut b = ferrite::Batch::new();
    /// b.put("a", "1").put("a", "2");
    /// assert_eq!(b.len(), 2); // applied in order: "a" ends as "2"
    /// ```
    pub fn len(&self) -> usize {
        self.wb.len()
    }

    /// The writes in order: `(key, Some(value))` for a put, `(key, None)` for
    /// a removal.
    ///
    /// ```
    /// let mut b = ferrite::Batch::new();
    /// b.put("a", "1").remove("b");
    /// let w: Vec<_> = b.iter().collect();
    /// assert_eq!(w, [(&b"a"[..], Some(&b"1"[..])), (&b"b"[..], None)]);
    /// ```
    pub fn iter(&self) -> impl Iterator<Item = (&[u8], Option<&[u8]>)> + '_ {
        self.wb.ops.iter().map(|op| match op {
            ferrite_kv::BatchOp::Put { key, value } => (key.as_slice(), Some(value.as_slice())),
            ferrite_kv::BatchOp::Delete { key } => (key.as_slice(), None),
        })
    }

    /// True when the batch holds no write.
    ///
    /// ```
    /// assert!(ferrite::Batch::new().is_empty());
    /// ```
    pub fn is_empty(&self) -> bool {
        self.wb.is_empty()
    }
}

impl Map {
    pub(crate) fn new(
        idx: FerriteIndex,
        name: &str,
        durability: Durability,
        object: Option<ObjectId>,
    ) -> Map {
        Map {
            inner: Arc::new(MapInner {
                idx,
                gate: Gate::new(),
                name: name.into(),
                durability,
                object,
                broken: AtomicBool::new(false),
                broken_why: Mutex::new(String::new()),
            }),
        }
    }

    /// The map's name (`"volatile"` for a volatile map).
    ///
    /// ```
    /// # fn main() -> Result<(), ferrite::Error> {
    /// let db = ferrite::Db::volatile(16 << 20)?;
    /// assert_eq!(db.map("users")?.name(), "users");
    /// # Ok(())
    /// # }
    /// ```
    pub fn name(&self) -> &str {
        &self.inner.name
    }

    /// What an acknowledged write of this map survives: the pool's durability
    /// for [`Db::map`](crate::Db::map) (`describe()` says it in words),
    /// [`Durability::Volatile`] for [`Db::volatile_map`](crate::Db::volatile_map).
    ///
    /// ```
    /// # fn main() -> Result<(), ferrite::Error> {
    /// let db = ferrite::Db::volatile(16 << 20)?;
    /// let v = db.volatile_map()?;
    /// assert_eq!(v.durability(), ferrite::Durability::Volatile);
    /// assert!(!v.durability().power_fail_safe());
    /// # Ok(())
    /// # }
    /// ```
    pub fn durability(&self) -> Durability {
        self.inner.durability
    }

    // ----- reads ---------------------------------------------------------

    /// The value of `key`, copied out (`None` when absent).
    ///
    /// ```
    /// # fn main() -> Result<(), ferrite::Error> {
    /// let db = ferrite::Db::volatile(16 << 20)?;
    /// let m = db.map("m")?;
    /// m.insert(7u64.to_be_bytes(), "seven")?;
    /// assert_eq!(m.get(7u64.to_be_bytes())?, Some(b"seven".to_vec()));
    /// assert_eq!(m.get(8u64.to_be_bytes())?, None);
    /// # Ok(())
    /// # }
    /// ```
    pub fn get(&self, key: impl AsRef<[u8]>) -> Result<Option<Vec<u8>>> {
        Ok(self.inner.idx.get(key.as_ref())?)
    }

    /// Copies the value of `key` into `out` (cleared first) and returns true,
    /// or returns false when absent: the lookup without an allocation.
    ///
    /// ```
    /// # fn main() -> Result<(), ferrite::Error> {
    /// let db = ferrite::Db::volatile(16 << 20)?;
    /// let m = db.map("m")?;
    /// m.insert("k", "v")?;
    /// let mut buf = Vec::new();
    /// assert!(m.get_into("k", &mut buf)?);
    /// assert_eq!(buf, b"v");
    /// # Ok(())
    /// # }
    /// ```
    pub fn get_into(&self, key: impl AsRef<[u8]>, out: &mut Vec<u8>) -> Result<bool> {
        Ok(self.inner.idx.get_into(key.as_ref(), out)?)
    }

    /// Calls `f` with the value of `key` without copying it (zero-copy: a
    /// value longer than 8 bytes is lent straight from the pool) and returns
    /// what `f` returns; `None` when the key is absent.
    ///
    /// The value is the one committed when the lookup ran, whole. While `f`
    /// runs, memory that writers free meanwhile is held back (no reader or
    /// writer waits for it): keep `f` short, and copy what you keep.
    ///
    /// ```
    /// # fn main() -> Result<(), ferrite::Error> {
    /// let db = ferrite::Db::volatile(16 << 20)?;
    /// let m = db.map("m")?;
    /// m.insert("doc", vec![b'x'; 4096])?;
    /// let xs = m.get_with("doc", |v| v.iter().filter(|&&b| b == b'x').count())?;
    /// assert_eq!(xs, Some(4096));
    /// # Ok(())
    /// # }
    /// ```
    pub fn get_with<R>(
        &self,
        key: impl AsRef<[u8]>,
        f: impl FnOnce(&[u8]) -> R,
    ) -> Result<Option<R>> {
        Ok(self.inner.idx.get_with(key.as_ref(), f)?)
    }

    /// True when `key` is present.
    ///
    /// ```
    /// # fn main() -> Result<(), ferrite::Error> {
    /// let db = ferrite::Db::volatile(16 << 20)?;
    /// let m = db.map("m")?;
    /// m.insert("k", "")?; // an empty value is a value
    /// assert!(m.contains("k")?);
    /// assert!(!m.contains("j")?);
    /// # Ok(())
    /// # }
    /// ```
    pub fn contains(&self, key: impl AsRef<[u8]>) -> Result<bool> {
        Ok(self.inner.idx.get_with(key.as_ref(), |_| ())?.is_some())
    }

    /// Number of keys. Exact when no write is in progress; while writers run,
    /// a count between the states before and after the writes in flight.
    ///
    /// ```
    /// # fn main() -> Result<(), ferrite::Error> {
    /// let db = ferrite::Db::volatile(16 << 20)?;
    /// let m = db.map("m")?;
    /// m.insert("a", "1")?;
    /// m.insert("b", "2")?;
    /// assert_eq!(m.len(), 2);
    /// # Ok(())
    /// # }
    /// ```
    pub fn len(&self) -> usize {
        self.inner.idx.count()
    }

    /// True when the map holds no key.
    ///
    /// ```
    /// # fn main() -> Result<(), ferrite::Error> {
    /// let db = ferrite::Db::volatile(16 << 20)?;
    /// assert!(db.map("m")?.is_empty());
    /// # Ok(())
    /// # }
    /// ```
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The entries with keys in `range`, in key order; the iterator is
    /// double-ended (`.rev()`, or `next_back` mixed with `next`). See
    /// [`Range`] for what it sees of concurrent writes. An unbounded range is
    /// [`Map::iter`].
    ///
    /// ```
    /// # fn main() -> Result<(), ferrite::Error> {
    /// let db = ferrite::Db::volatile(16 << 20)?;
    /// let m = db.map("m")?;
    /// for k in ["a", "b", "c", "d"] {
    ///     m.insert(k, k.to_uppercase())?;
    /// }
    /// let keys: Vec<Vec<u8>> = m.range("b".."d").map(|e| e.map(|(k, _)| k)).collect::<Result<_, _>>()?;
    /// assert_eq!(keys, [b"b".to_vec(), b"c".to_vec()]);
    /// let last_two: Vec<_> = m.range(..="c").rev().take(2).collect::<Result<Vec<_>, _>>()?;
    /// assert_eq!(last_two[0].0, b"c");
    /// assert_eq!(last_two[1].0, b"b");
    /// # Ok(())
    /// # }
    /// ```
    pub fn range<K: AsRef<[u8]>>(&self, range: impl RangeBounds<K>) -> Range {
        Range::new(self.clone(), &range)
    }

    /// Calls `f` for up to `limit` entries with keys at or after `start`, in
    /// key order, and returns how many it visited. The entries are read in
    /// one go, as one consistent view: a write batch or transaction whole or
    /// not at all. They are buffered before `f` sees them, so keep `limit`
    /// moderate (a scan of a page of results); iterate a large range with
    /// [`Map::range`].
    ///
    /// ```
    /// # fn main() -> Result<(), ferrite::Error> {
    /// let db = ferrite::Db::volatile(16 << 20)?;
    /// let m = db.map("m")?;
    /// for i in 0u64..10 {
    ///     m.insert(i.to_be_bytes(), (i * i).to_be_bytes())?;
    /// }
    /// let mut squares = Vec::new();
    /// let n = m.scan(7u64.to_be_bytes(), 100, |_, v| squares.push(v[7]))?;
    /// assert_eq!((n, squares), (3, vec![49, 64, 81]));
    /// # Ok(())
    /// # }
    /// ```
    pub fn scan(
        &self,
        start: impl AsRef<[u8]>,
        limit: usize,
        mut f: impl FnMut(&[u8], &[u8]),
    ) -> Result<usize> {
        Ok(self.inner.idx.scan(start.as_ref(), limit, &mut f)?)
    }

    /// Every entry in key order (double-ended, like [`Map::range`]).
    ///
    /// ```
    /// # fn main() -> Result<(), ferrite::Error> {
    /// let db = ferrite::Db::volatile(16 << 20)?;
    /// let m = db.map("m")?;
    /// m.insert("x", "1")?;
    /// m.insert("y", "2")?;
    /// let newest_first: Vec<_> = m.iter().rev().collect::<Result<Vec<_>, _>>()?;
    /// assert_eq!(newest_first[0], (b"y".to_vec(), b"2".to_vec()));
    /// # Ok(())
    /// # }
    /// ```
    pub fn iter(&self) -> Range {
        self.range::<&[u8]>(..)
    }

    /// Number of keys in `range` (it visits them: the cost grows with the
    /// count).
    ///
    /// ```
    /// # fn main() -> Result<(), ferrite::Error> {
    /// let db = ferrite::Db::volatile(16 << 20)?;
    /// let m = db.map("m")?;
    /// for i in 0u64..100 {
    ///     m.insert(i.to_be_bytes(), "")?;
    /// }
    /// assert_eq!(m.count_range(10u64.to_be_bytes()..20u64.to_be_bytes())?, 10);
    /// # Ok(())
    /// # }
    /// ```
    pub fn count_range<K: AsRef<[u8]>>(&self, range: impl RangeBounds<K>) -> Result<usize> {
        Range::new(self.clone(), &range).count_remaining()
    }

    // ----- writes --------------------------------------------------------

    /// Refuses writes when this thread would wait for itself, or when a
    /// failed commit left the map to be reopened.
    #[inline]
    pub(crate) fn check_writable(&self) -> Result<()> {
        let m = &self.inner;
        if m.gate.held_by_me() {
            return Err(Error::TransactionActive {
                map: m.name.clone(),
            });
        }
        if m.broken.load(Ordering::Acquire) {
            return Err(Error::NeedsReopen {
                map: m.name.clone(),
                detail: m
                    .broken_why
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .clone(),
            });
        }
        Ok(())
    }

    /// A single-key write: announced to the writer gate (no lock) when no
    /// exclusive operation is about, else through [`Map::plain_write_slow`].
    #[inline(always)]
    fn plain_write(
        &self,
        key: &[u8],
        f: impl FnOnce(&FerriteIndex) -> ferrite_kv::KvResult<bool>,
    ) -> Result<bool> {
        let m = &self.inner;
        if let Some(w) = m.gate.write(key) {
            if !m.broken.load(Ordering::Acquire) {
                let r = f(&m.idx);
                drop(w);
                return Ok(r?);
            }
        }
        self.plain_write_slow(key, f)
    }

    /// [`Map::plain_write`] while a transaction, compare-and-swap or
    /// `update_with` holds some stripe (maybe this thread's own: then it is
    /// an error), or the map must be reopened.
    #[cold]
    #[inline(never)]
    fn plain_write_slow(
        &self,
        key: &[u8],
        f: impl FnOnce(&FerriteIndex) -> ferrite_kv::KvResult<bool>,
    ) -> Result<bool> {
        self.check_writable()?;
        let _w = self.inner.gate.write_waiting(key);
        Ok(f(&self.inner.idx)?)
    }

    /// Inserts `key` if absent: true when inserted, false (and no change)
    /// when it was present.
    ///
    /// ```
    /// # fn main() -> Result<(), ferrite::Error> {
    /// let db = ferrite::Db::volatile(16 << 20)?;
    /// let m = db.map("m")?;
    /// assert!(m.insert("k", "1")?);
    /// assert!(!m.insert("k", "2")?);
    /// assert_eq!(m.get("k")?, Some(b"1".to_vec()));
    /// # Ok(())
    /// # }
    /// ```
    pub fn insert(&self, key: impl AsRef<[u8]>, value: impl AsRef<[u8]>) -> Result<bool> {
        let (k, v) = (key.as_ref(), value.as_ref());
        self.plain_write(k, |i| i.insert(k, v))
    }

    /// Replaces the value of `key` if present: true when replaced, false (and
    /// no change) when absent.
    ///
    /// ```
    /// # fn main() -> Result<(), ferrite::Error> {
    /// let db = ferrite::Db::volatile(16 << 20)?;
    /// let m = db.map("m")?;
    /// assert!(!m.update("k", "1")?);
    /// m.insert("k", "1")?;
    /// assert!(m.update("k", "2")?);
    /// assert_eq!(m.get("k")?, Some(b"2".to_vec()));
    /// # Ok(())
    /// # }
    /// ```
    pub fn update(&self, key: impl AsRef<[u8]>, value: impl AsRef<[u8]>) -> Result<bool> {
        let (k, v) = (key.as_ref(), value.as_ref());
        self.plain_write(k, |i| i.update(k, v))
    }

    /// Sets `key` to `value`, inserting or replacing: true when the key was new.
    ///
    /// ```
    /// # fn main() -> Result<(), ferrite::Error> {
    /// let db = ferrite::Db::volatile(16 << 20)?;
    /// let m = db.map("m")?;
    /// assert!(m.upsert("k", "1")?);
    /// assert!(!m.upsert("k", "2")?);
    /// assert_eq!(m.get("k")?, Some(b"2".to_vec()));
    /// # Ok(())
    /// # }
    /// ```
    pub fn upsert(&self, key: impl AsRef<[u8]>, value: impl AsRef<[u8]>) -> Result<bool> {
        let (k, v) = (key.as_ref(), value.as_ref());
        self.plain_write(k, |i| i.upsert(k, v))
    }

    /// Removes `key`: true when it was present.
    ///
    /// ```
    /// # fn main() -> Result<(), ferrite::Error> {
    /// let db = ferrite::Db::volatile(16 << 20)?;
    /// let m = db.map("m")?;
    /// m.insert("k", "1")?;
    /// assert!(m.remove("k")?);
    /// assert!(!m.remove("k")?);
    /// # Ok(())
    /// # }
    /// ```
    pub fn remove(&self, key: impl AsRef<[u8]>) -> Result<bool> {
        let k = key.as_ref();
        self.plain_write(k, |i| i.remove(k))
    }

    /// Sets `key` to `new` (`None`: removes it) if and only if its value is
    /// `expected` (`None`: absent), atomically with respect to every other
    /// writer. `Ok(Err(conflict))` when the value differed: nothing changed.
    ///
    /// ```
    /// # fn main() -> Result<(), ferrite::Error> {
    /// let db = ferrite::Db::volatile(16 << 20)?;
    /// let m = db.map("m")?;
    /// // Claim a lock key only if nobody holds it.
    /// assert!(m.compare_and_swap("lock", None::<&[u8]>, Some("me"))?.is_ok());
    /// assert!(m.compare_and_swap("lock", None::<&[u8]>, Some("you"))?.is_err());
    /// // Release it only if we hold it.
    /// assert!(m.compare_and_swap("lock", Some("me"), None::<&[u8]>)?.is_ok());
    /// assert!(!m.contains("lock")?);
    /// # Ok(())
    /// # }
    /// ```
    pub fn compare_and_swap(
        &self,
        key: impl AsRef<[u8]>,
        expected: Option<impl AsRef<[u8]>>,
        new: Option<impl AsRef<[u8]>>,
    ) -> Result<std::result::Result<(), Conflict>> {
        let k = key.as_ref();
        let expected = expected.as_ref().map(|e| e.as_ref());
        let new = new.as_ref().map(|n| n.as_ref());
        self.check_writable()?;
        let _g = self.inner.gate.exclusive(k);
        let idx = &self.inner.idx;
        let same = idx.get_with(k, |cur| Some(cur) == expected)?;
        let current_matches = match same {
            Some(eq) => eq,
            None => expected.is_none(),
        };
        if !current_matches {
            return Ok(Err(Conflict {
                current: idx.get(k)?,
            }));
        }
        self.set_locked(k, same.is_some(), new)?;
        Ok(Ok(()))
    }

    /// Applies `new` to `k` (present or not), the caller holding `k`'s
    /// stripe exclusively.
    fn set_locked(&self, k: &[u8], present: bool, new: Option<&[u8]>) -> Result<()> {
        let idx = &self.inner.idx;
        match (present, new) {
            (true, Some(v)) => {
                idx.update(k, v)?;
            }
            (false, Some(v)) => {
                idx.insert(k, v)?;
            }
            (true, None) => {
                idx.remove(k)?;
            }
            (false, None) => {}
        }
        Ok(())
    }

    /// Atomic read-modify-write: calls `f` once with the current value of
    /// `key` (`None`: absent) and stores what it returns (`None`: removes the
    /// key), with no other write of `key` in between. Returns the new value.
    ///
    /// `f` runs while writers of keys that share `key`'s lock stripe wait
    /// (readers never do): keep it short. Inside `f`, this thread may read
    /// the map; writing to it fails with [`Error::TransactionActive`].
    ///
    /// ```
    /// # fn main() -> Result<(), ferrite::Error> {
    /// let db = ferrite::Db::volatile(16 << 20)?;
    /// let hits = db.map("hits")?;
    /// let bump = |old: Option<&[u8]>| {
    ///     let n = old.map_or(0, |b| u64::from_be_bytes(b.try_into().unwrap()));
    ///     Some((n + 1).to_be_bytes().to_vec())
    /// };
    /// std::thread::scope(|s| {
    ///     for _ in 0..4 {
    ///         s.spawn(|| {
    ///             for _ in 0..100 {
    ///                 hits.update_with("/index.html", bump).unwrap();
    ///             }
    ///         });
    ///     }
    /// });
    /// assert_eq!(hits.get("/index.html")?, Some(400u64.to_be_bytes().to_vec()));
    /// # Ok(())
    /// # }
    /// ```
    pub fn update_with(
        &self,
        key: impl AsRef<[u8]>,
        f: impl FnOnce(Option<&[u8]>) -> Option<Vec<u8>>,
    ) -> Result<Option<Vec<u8>>> {
        let k = key.as_ref();
        self.check_writable()?;
        let _g = self.inner.gate.exclusive(k);
        let mut f = Some(f);
        let (present, new) = {
            let _mark = self.inner.gate.mark_update();
            match self
                .inner
                .idx
                .get_with(k, |cur| (f.take().expect("called once"))(Some(cur)))?
            {
                Some(new) => (true, new),
                None => (false, (f.take().expect("called once"))(None)),
            }
        };
        if let Some(v) = &new {
            ferrite_kv::check_sizes(k, Some(v), crate::MAX_KEY, crate::MAX_VALUE)?;
        }
        self.set_locked(k, present, new.as_deref())?;
        Ok(new)
    }

    /// Applies every write of `batch` in order, all-or-nothing: readers see
    /// none or all of it, and after a crash the map holds none or all of it.
    ///
    /// ```
    /// # fn main() -> Result<(), ferrite::Error> {
    /// let db = ferrite::Db::volatile(16 << 20)?;
    /// let m = db.map("accounts")?;
    /// let mut b = ferrite::Batch::new();
    /// b.put("alice", 50u64.to_be_bytes()).put("bob", 50u64.to_be_bytes());
    /// m.apply(&b)?;
    /// assert_eq!(m.len(), 2);
    /// # Ok(())
    /// # }
    /// ```
    pub fn apply(&self, batch: &Batch) -> Result<()> {
        self.check_writable()?;
        let keys = batch.wb.ops.iter().map(|op| match op {
            ferrite_kv::BatchOp::Put { key, .. } | ferrite_kv::BatchOp::Delete { key } => {
                key.as_slice()
            }
        });
        let _g = self.inner.gate.shared_set(keys);
        self.write_batch(&batch.wb)
    }

    /// The index's write batch; a failure that leaves a committed log behind
    /// (the batch is durable but not applied) makes the map refuse writes
    /// until the pool is reopened, which replays the log.
    pub(crate) fn write_batch(&self, wb: &WriteBatch) -> Result<()> {
        match self.inner.idx.write_batch(wb) {
            Ok(()) => Ok(()),
            Err(e) => {
                let e = Error::from(e);
                if self.batch_log_pending() || self.inner.object.is_none() && wb.len() > 1 {
                    let m = &self.inner;
                    *m.broken_why.lock().unwrap_or_else(|p| p.into_inner()) = e.to_string();
                    m.broken.store(true, Ordering::Release);
                    return Err(Error::NeedsReopen {
                        map: m.name.clone(),
                        detail: e.to_string(),
                    });
                }
                Err(e)
            }
        }
    }

    /// True when the index's batch-log root word (word 1, `docs/FORMAT.md`)
    /// names a committed log: a batch was committed and not fully applied.
    fn batch_log_pending(&self) -> bool {
        self.inner
            .object
            .is_some_and(|id| self.inner.idx.pool().root(id, 1) != 0)
    }

    /// A persist barrier: returns once every write acknowledged so far is as
    /// durable as the pool gets. Writes are already durable when they return,
    /// so this only reports a failed write-back (in msync mode) that a write
    /// could not report itself.
    ///
    /// ```
    /// # fn main() -> Result<(), ferrite::Error> {
    /// let db = ferrite::Db::volatile(16 << 20)?;
    /// let m = db.map("m")?;
    /// m.insert("k", "v")?;
    /// m.flush()?;
    /// # Ok(())
    /// # }
    /// ```
    pub fn flush(&self) -> Result<()> {
        Ok(self.inner.idx.pool().fence()?)
    }

    /// Live handles of this map (clones, iterators, transactions).
    pub(crate) fn handles(&self) -> usize {
        Arc::strong_count(&self.inner)
    }

    /// The index under the map, for tools (the crash checker's structure and
    /// space checks).
    ///
    /// ```
    /// # fn main() -> Result<(), ferrite::Error> {
    /// let db = ferrite::Db::volatile(16 << 20)?;
    /// assert!(db.map("m")?.index().check_structure().is_ok());
    /// # Ok(())
    /// # }
    /// ```
    #[doc(hidden)]
    pub fn index(&self) -> &FerriteIndex {
        &self.inner.idx
    }
}

impl std::fmt::Debug for Map {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Map")
            .field("name", &self.inner.name)
            .field("durability", &self.inner.durability.name())
            .field("len", &self.len())
            .finish()
    }
}
