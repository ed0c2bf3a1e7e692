//! Baselines measured beside Ferrite's index on identical workloads:
//! a `BTreeMap` behind one `RwLock` (what a Rust program uses when nothing has to
//! survive), its `u64`-keyed form for 8-byte keys and values (no allocation per
//! entry, the fastest thing a Rust program could use there), and redb, a durable
//! embedded B-tree store a Rust user would pick.

use std::collections::BTreeMap;
use std::ops::Bound;
use std::path::{Path, PathBuf};
use std::sync::RwLock;

use ferrite_index::kv::check_sizes;
use ferrite_index::{
    BatchOp, KvCursor, KvError, KvResult, OrderedKv, WriteBatch, MAX_KEY, MAX_VALUE,
};
use redb::{Database, Durability, ReadableTable, ReadableTableMetadata, TableDefinition};

type Entry = (Vec<u8>, Vec<u8>);

/// `RwLock<BTreeMap>`: volatile, one lock for the whole map.
#[derive(Default)]
pub struct BTreeMapKv {
    map: RwLock<BTreeMap<Vec<u8>, Vec<u8>>>,
}

impl BTreeMapKv {
    pub fn new() -> Self {
        Self::default()
    }

    fn read(&self) -> std::sync::RwLockReadGuard<'_, BTreeMap<Vec<u8>, Vec<u8>>> {
        // A panic while holding the lock cannot leave the map half-modified (every
        // mutation is one BTreeMap call), so a poisoned lock is still usable.
        self.map.read().unwrap_or_else(|e| e.into_inner())
    }

    fn write(&self) -> std::sync::RwLockWriteGuard<'_, BTreeMap<Vec<u8>, Vec<u8>>> {
        self.map.write().unwrap_or_else(|e| e.into_inner())
    }
}

fn first_from(map: &BTreeMap<Vec<u8>, Vec<u8>>, lo: Bound<&[u8]>) -> Option<Entry> {
    map.range::<[u8], _>((lo, Bound::Unbounded))
        .next()
        .map(|(k, v)| (k.clone(), v.clone()))
}

fn last_before(map: &BTreeMap<Vec<u8>, Vec<u8>>, hi: Bound<&[u8]>) -> Option<Entry> {
    map.range::<[u8], _>((Bound::Unbounded, hi))
        .next_back()
        .map(|(k, v)| (k.clone(), v.clone()))
}

impl OrderedKv for BTreeMapKv {
    fn name(&self) -> &str {
        "btreemap"
    }

    fn get_into(&self, key: &[u8], out: &mut Vec<u8>) -> KvResult<bool> {
        check_sizes(key, None, MAX_KEY, MAX_VALUE)?;
        out.clear();
        match self.read().get(key) {
            Some(v) => {
                out.extend_from_slice(v);
                Ok(true)
            }
            None => Ok(false),
        }
    }

    fn insert(&self, key: &[u8], value: &[u8]) -> KvResult<bool> {
        check_sizes(key, Some(value), MAX_KEY, MAX_VALUE)?;
        let mut m = self.write();
        if m.contains_key(key) {
            return Ok(false);
        }
        m.insert(key.to_vec(), value.to_vec());
        Ok(true)
    }

    fn update(&self, key: &[u8], value: &[u8]) -> KvResult<bool> {
        check_sizes(key, Some(value), MAX_KEY, MAX_VALUE)?;
        match self.write().get_mut(key) {
            Some(v) => {
                v.clear();
                v.extend_from_slice(value);
                Ok(true)
            }
            None => Ok(false),
        }
    }

    fn upsert(&self, key: &[u8], value: &[u8]) -> KvResult<bool> {
        check_sizes(key, Some(value), MAX_KEY, MAX_VALUE)?;
        Ok(self.write().insert(key.to_vec(), value.to_vec()).is_none())
    }

    fn remove(&self, key: &[u8]) -> KvResult<bool> {
        check_sizes(key, None, MAX_KEY, MAX_VALUE)?;
        Ok(self.write().remove(key).is_some())
    }

    fn count(&self) -> usize {
        self.read().len()
    }

    fn scan(&self, start: &[u8], n: usize, f: &mut dyn FnMut(&[u8], &[u8])) -> KvResult<usize> {
        check_sizes(start, None, MAX_KEY, MAX_VALUE)?;
        let m = self.read();
        let mut seen = 0;
        for (k, v) in m
            .range::<[u8], _>((Bound::Included(start), Bound::Unbounded))
            .take(n)
        {
            f(k, v);
            seen += 1;
        }
        Ok(seen)
    }

    fn write_batch(&self, batch: &WriteBatch) -> KvResult<()> {
        for op in &batch.ops {
            match op {
                BatchOp::Put { key, value } => check_sizes(key, Some(value), MAX_KEY, MAX_VALUE)?,
                BatchOp::Delete { key } => check_sizes(key, None, MAX_KEY, MAX_VALUE)?,
            }
        }
        let mut m = self.write();
        for op in &batch.ops {
            match op {
                BatchOp::Put { key, value } => {
                    m.insert(key.clone(), value.clone());
                }
                BatchOp::Delete { key } => {
                    m.remove(key);
                }
            }
        }
        Ok(())
    }

    fn cursor(&self) -> KvResult<Box<dyn KvCursor + '_>> {
        Ok(Box::new(MapCursor {
            kv: self,
            pos: None,
        }))
    }
}

/// Cursor over live data: every step re-searches from the current key, so it
/// sees concurrent changes and never holds the lock between calls.
struct MapCursor<'a> {
    kv: &'a BTreeMapKv,
    pos: Option<Vec<u8>>,
}

impl MapCursor<'_> {
    fn land(&mut self, e: Option<Entry>) -> KvResult<Option<Entry>> {
        if let Some((k, _)) = &e {
            self.pos = Some(k.clone());
        }
        Ok(e)
    }
}

impl KvCursor for MapCursor<'_> {
    fn seek(&mut self, key: &[u8]) -> KvResult<Option<Entry>> {
        let e = first_from(&self.kv.read(), Bound::Included(key));
        self.pos = None;
        self.land(e)
    }
    fn first(&mut self) -> KvResult<Option<Entry>> {
        let e = first_from(&self.kv.read(), Bound::Unbounded);
        self.land(e)
    }
    fn last(&mut self) -> KvResult<Option<Entry>> {
        let e = last_before(&self.kv.read(), Bound::Unbounded);
        self.land(e)
    }
    fn next(&mut self) -> KvResult<Option<Entry>> {
        let e = match &self.pos {
            Some(p) => first_from(&self.kv.read(), Bound::Excluded(p)),
            None => first_from(&self.kv.read(), Bound::Unbounded),
        };
        self.land(e)
    }
    fn prev(&mut self) -> KvResult<Option<Entry>> {
        let e = match &self.pos {
            Some(p) => last_before(&self.kv.read(), Bound::Excluded(p)),
            None => last_before(&self.kv.read(), Bound::Unbounded),
        };
        self.land(e)
    }
}

/// `RwLock<BTreeMap<u64, u64>>`: volatile, for 8-byte keys and values only.
/// Keys are big-endian (byte order = numeric order, as the benchmark's keys);
/// values are stored as the 8 bytes they are. Other sizes are errors.
#[derive(Default)]
pub struct U64MapKv {
    map: RwLock<BTreeMap<u64, u64>>,
}

/// What the map's type is, for reports.
pub const U64_MAP_LABEL: &str = "RwLock<BTreeMap<u64, u64>>";
/// What [`BTreeMapKv`]'s type is, for reports.
pub const BTREEMAP_LABEL: &str = "RwLock<BTreeMap<Vec<u8>, Vec<u8>>>";

fn u64_key(key: &[u8]) -> KvResult<u64> {
    let k: [u8; 8] = key.try_into().map_err(|_| {
        KvError::Backend(format!(
            "btreemap-u64 takes 8-byte keys, got {} bytes",
            key.len()
        ))
    })?;
    Ok(u64::from_be_bytes(k))
}

fn u64_value(value: &[u8]) -> KvResult<u64> {
    let v: [u8; 8] = value.try_into().map_err(|_| {
        KvError::Backend(format!(
            "btreemap-u64 takes 8-byte values, got {} bytes",
            value.len()
        ))
    })?;
    Ok(u64::from_le_bytes(v))
}

fn u64_entry((k, v): (&u64, &u64)) -> Entry {
    (k.to_be_bytes().to_vec(), v.to_le_bytes().to_vec())
}

impl U64MapKv {
    pub fn new() -> Self {
        Self::default()
    }

    fn read(&self) -> std::sync::RwLockReadGuard<'_, BTreeMap<u64, u64>> {
        // Every mutation is one BTreeMap call: a poisoned lock is still consistent.
        self.map.read().unwrap_or_else(|e| e.into_inner())
    }

    fn write(&self) -> std::sync::RwLockWriteGuard<'_, BTreeMap<u64, u64>> {
        self.map.write().unwrap_or_else(|e| e.into_inner())
    }
}

impl OrderedKv for U64MapKv {
    fn name(&self) -> &str {
        "btreemap-u64"
    }

    fn get_into(&self, key: &[u8], out: &mut Vec<u8>) -> KvResult<bool> {
        let k = u64_key(key)?;
        out.clear();
        match self.read().get(&k) {
            Some(v) => {
                out.extend_from_slice(&v.to_le_bytes());
                Ok(true)
            }
            None => Ok(false),
        }
    }

    fn insert(&self, key: &[u8], value: &[u8]) -> KvResult<bool> {
        let (k, v) = (u64_key(key)?, u64_value(value)?);
        let mut m = self.write();
        if m.contains_key(&k) {
            return Ok(false);
        }
        m.insert(k, v);
        Ok(true)
    }

    fn update(&self, key: &[u8], value: &[u8]) -> KvResult<bool> {
        let (k, v) = (u64_key(key)?, u64_value(value)?);
        match self.write().get_mut(&k) {
            Some(x) => {
                *x = v;
                Ok(true)
            }
            None => Ok(false),
        }
    }

    fn upsert(&self, key: &[u8], value: &[u8]) -> KvResult<bool> {
        let (k, v) = (u64_key(key)?, u64_value(value)?);
        Ok(self.write().insert(k, v).is_none())
    }

    fn remove(&self, key: &[u8]) -> KvResult<bool> {
        let k = u64_key(key)?;
        Ok(self.write().remove(&k).is_some())
    }

    fn count(&self) -> usize {
        self.read().len()
    }

    fn scan(&self, start: &[u8], n: usize, f: &mut dyn FnMut(&[u8], &[u8])) -> KvResult<usize> {
        let k = u64_key(start)?;
        let m = self.read();
        let mut seen = 0;
        for (k, v) in m.range(k..).take(n) {
            f(&k.to_be_bytes(), &v.to_le_bytes());
            seen += 1;
        }
        Ok(seen)
    }

    fn write_batch(&self, batch: &WriteBatch) -> KvResult<()> {
        let mut ops = Vec::with_capacity(batch.ops.len());
        for op in &batch.ops {
            ops.push(match op {
                BatchOp::Put { key, value } => (u64_key(key)?, Some(u64_value(value)?)),
                BatchOp::Delete { key } => (u64_key(key)?, None),
            });
        }
        let mut m = self.write();
        for (k, v) in ops {
            match v {
                Some(v) => {
                    m.insert(k, v);
                }
                None => {
                    m.remove(&k);
                }
            }
        }
        Ok(())
    }

    fn cursor(&self) -> KvResult<Box<dyn KvCursor + '_>> {
        Ok(Box::new(U64Cursor {
            kv: self,
            pos: None,
        }))
    }
}

/// Cursor over live data, re-searching from the current key at every step.
struct U64Cursor<'a> {
    kv: &'a U64MapKv,
    pos: Option<u64>,
}

impl U64Cursor<'_> {
    fn land(&mut self, e: Option<(&u64, &u64)>) -> Option<Entry> {
        let e = e?;
        self.pos = Some(*e.0);
        Some(u64_entry(e))
    }
}

impl KvCursor for U64Cursor<'_> {
    fn seek(&mut self, key: &[u8]) -> KvResult<Option<Entry>> {
        let k = u64_key(key)?;
        let m = self.kv.read();
        self.pos = None;
        Ok(self.land(m.range(k..).next()))
    }
    fn first(&mut self) -> KvResult<Option<Entry>> {
        let m = self.kv.read();
        Ok(self.land(m.iter().next()))
    }
    fn last(&mut self) -> KvResult<Option<Entry>> {
        let m = self.kv.read();
        Ok(self.land(m.iter().next_back()))
    }
    fn next(&mut self) -> KvResult<Option<Entry>> {
        let m = self.kv.read();
        let e = match self.pos {
            Some(p) => m.range((Bound::Excluded(p), Bound::Unbounded)).next(),
            None => m.iter().next(),
        };
        Ok(self.land(e))
    }
    fn prev(&mut self) -> KvResult<Option<Entry>> {
        let m = self.kv.read();
        let e = match self.pos {
            Some(p) => m.range(..p).next_back(),
            None => m.iter().next_back(),
        };
        Ok(self.land(e))
    }
}

const TABLE: TableDefinition<&[u8], &[u8]> = TableDefinition::new("kv");

fn be<E: std::fmt::Display>(e: E) -> KvError {
    KvError::Backend(format!("redb: {e}"))
}

/// redb, one write transaction per write operation, committed at the durability
/// level given at creation (see [`RedbKv::durability_text`]).
pub struct RedbKv {
    db: Database,
    durability: Durability,
    path: PathBuf,
    name: String,
}

impl RedbKv {
    /// Creates a fresh database file at `path` (replacing one that exists).
    pub fn create(path: &Path, durability: Durability, name: &str) -> KvResult<RedbKv> {
        let _ = std::fs::remove_file(path);
        let db = Database::create(path).map_err(be)?;
        let txn = db.begin_write().map_err(be)?;
        {
            txn.open_table(TABLE).map_err(be)?;
        }
        txn.commit().map_err(be)?;
        Ok(RedbKv {
            db,
            durability,
            path: path.to_path_buf(),
            name: name.to_string(),
        })
    }

    /// What a committed write survives at this setting.
    pub fn durability_text(&self) -> &'static str {
        match self.durability {
            Durability::Immediate => {
                "redb Durability::Immediate: every write is its own transaction, fsynced at commit"
            }
            Durability::Eventual => "redb Durability::Eventual: commit queued, fsync later",
            _ => "redb Durability::None: commits are not persistent until a later durable commit",
        }
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Size of the database file.
    pub fn file_bytes(&self) -> u64 {
        std::fs::metadata(&self.path).map_or(0, |m| m.len())
    }

    fn write<R>(
        &self,
        f: impl FnOnce(&mut redb::Table<&[u8], &[u8]>) -> KvResult<R>,
    ) -> KvResult<R> {
        let mut txn = self.db.begin_write().map_err(be)?;
        txn.set_durability(self.durability);
        let r = {
            let mut t = txn.open_table(TABLE).map_err(be)?;
            f(&mut t)?
        };
        txn.commit().map_err(be)?;
        Ok(r)
    }
}

impl OrderedKv for RedbKv {
    fn name(&self) -> &str {
        &self.name
    }

    fn get_into(&self, key: &[u8], out: &mut Vec<u8>) -> KvResult<bool> {
        check_sizes(key, None, MAX_KEY, MAX_VALUE)?;
        out.clear();
        let r = self.db.begin_read().map_err(be)?;
        let t = r.open_table(TABLE).map_err(be)?;
        match t.get(key).map_err(be)? {
            Some(v) => {
                out.extend_from_slice(v.value());
                Ok(true)
            }
            None => Ok(false),
        }
    }

    fn insert(&self, key: &[u8], value: &[u8]) -> KvResult<bool> {
        check_sizes(key, Some(value), MAX_KEY, MAX_VALUE)?;
        self.write(|t| {
            if t.get(key).map_err(be)?.is_some() {
                return Ok(false);
            }
            t.insert(key, value).map_err(be)?;
            Ok(true)
        })
    }

    fn update(&self, key: &[u8], value: &[u8]) -> KvResult<bool> {
        check_sizes(key, Some(value), MAX_KEY, MAX_VALUE)?;
        self.write(|t| {
            if t.get(key).map_err(be)?.is_none() {
                return Ok(false);
            }
            t.insert(key, value).map_err(be)?;
            Ok(true)
        })
    }

    fn upsert(&self, key: &[u8], value: &[u8]) -> KvResult<bool> {
        check_sizes(key, Some(value), MAX_KEY, MAX_VALUE)?;
        self.write(|t| Ok(t.insert(key, value).map_err(be)?.is_none()))
    }

    fn remove(&self, key: &[u8]) -> KvResult<bool> {
        check_sizes(key, None, MAX_KEY, MAX_VALUE)?;
        self.write(|t| Ok(t.remove(key).map_err(be)?.is_some()))
    }

    fn count(&self) -> usize {
        let n = || -> KvResult<u64> {
            let r = self.db.begin_read().map_err(be)?;
            let t = r.open_table(TABLE).map_err(be)?;
            t.len().map_err(be)
        };
        n().unwrap_or(0) as usize
    }

    fn scan(&self, start: &[u8], n: usize, f: &mut dyn FnMut(&[u8], &[u8])) -> KvResult<usize> {
        check_sizes(start, None, MAX_KEY, MAX_VALUE)?;
        let r = self.db.begin_read().map_err(be)?;
        let t = r.open_table(TABLE).map_err(be)?;
        let mut seen = 0;
        for e in t.range::<&[u8]>(start..).map_err(be)? {
            if seen == n {
                break;
            }
            let (k, v) = e.map_err(be)?;
            f(k.value(), v.value());
            seen += 1;
        }
        Ok(seen)
    }

    fn write_batch(&self, batch: &WriteBatch) -> KvResult<()> {
        for op in &batch.ops {
            match op {
                BatchOp::Put { key, value } => check_sizes(key, Some(value), MAX_KEY, MAX_VALUE)?,
                BatchOp::Delete { key } => check_sizes(key, None, MAX_KEY, MAX_VALUE)?,
            }
        }
        self.write(|t| {
            for op in &batch.ops {
                match op {
                    BatchOp::Put { key, value } => {
                        t.insert(key.as_slice(), value.as_slice()).map_err(be)?;
                    }
                    BatchOp::Delete { key } => {
                        t.remove(key.as_slice()).map_err(be)?;
                    }
                }
            }
            Ok(())
        })
    }

    fn cursor(&self) -> KvResult<Box<dyn KvCursor + '_>> {
        Ok(Box::new(RedbCursor {
            kv: self,
            pos: None,
        }))
    }
}

/// Cursor over the latest committed state: each step is its own read
/// transaction positioned relative to the current key.
struct RedbCursor<'a> {
    kv: &'a RedbKv,
    pos: Option<Vec<u8>>,
}

impl RedbCursor<'_> {
    fn find(&mut self, lo: Bound<&[u8]>, hi: Bound<&[u8]>, back: bool) -> KvResult<Option<Entry>> {
        let r = self.kv.db.begin_read().map_err(be)?;
        let t = r.open_table(TABLE).map_err(be)?;
        let mut it = t.range::<&[u8]>((lo, hi)).map_err(be)?;
        let e = if back { it.next_back() } else { it.next() };
        match e {
            Some(e) => {
                let (k, v) = e.map_err(be)?;
                let ent = (k.value().to_vec(), v.value().to_vec());
                self.pos = Some(ent.0.clone());
                Ok(Some(ent))
            }
            None => Ok(None),
        }
    }
}

impl KvCursor for RedbCursor<'_> {
    fn seek(&mut self, key: &[u8]) -> KvResult<Option<Entry>> {
        self.find(Bound::Included(key), Bound::Unbounded, false)
    }
    fn first(&mut self) -> KvResult<Option<Entry>> {
        self.find(Bound::Unbounded, Bound::Unbounded, false)
    }
    fn last(&mut self) -> KvResult<Option<Entry>> {
        self.find(Bound::Unbounded, Bound::Unbounded, true)
    }
    fn next(&mut self) -> KvResult<Option<Entry>> {
        match self.pos.clone() {
            Some(p) => self.find(Bound::Excluded(&p), Bound::Unbounded, false),
            None => self.first(),
        }
    }
    fn prev(&mut self) -> KvResult<Option<Entry>> {
        match self.pos.clone() {
            Some(p) => self.find(Bound::Unbounded, Bound::Excluded(&p), true),
            None => self.last(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[derive(Debug, Clone)]
    enum Cmd {
        Insert(u8, u8),
        Update(u8, u8),
        Upsert(u8, u8),
        Remove(u8),
        Get(u8),
        Scan(u8, u8),
        Batch(Vec<(u8, Option<u8>)>),
        Walk(u8, bool),
    }

    fn cmd() -> impl Strategy<Value = Cmd> {
        prop_oneof![
            (any::<u8>(), any::<u8>()).prop_map(|(k, v)| Cmd::Insert(k % 64, v)),
            (any::<u8>(), any::<u8>()).prop_map(|(k, v)| Cmd::Update(k % 64, v)),
            (any::<u8>(), any::<u8>()).prop_map(|(k, v)| Cmd::Upsert(k % 64, v)),
            any::<u8>().prop_map(|k| Cmd::Remove(k % 64)),
            any::<u8>().prop_map(|k| Cmd::Get(k % 64)),
            (any::<u8>(), any::<u8>()).prop_map(|(k, n)| Cmd::Scan(k % 64, n % 10)),
            proptest::collection::vec((any::<u8>(), proptest::option::of(any::<u8>())), 0..5)
                .prop_map(|v| Cmd::Batch(v.into_iter().map(|(k, x)| (k % 64, x)).collect())),
            (any::<u8>(), any::<bool>()).prop_map(|(k, b)| Cmd::Walk(k % 64, b)),
        ]
    }

    /// Keys of variable length so ordering across lengths is exercised too.
    fn key(k: u8) -> Vec<u8> {
        let mut v = vec![k / 4];
        v.extend(std::iter::repeat_n(k, (k % 4) as usize));
        v
    }

    fn check(kv: &dyn OrderedKv, cmds: &[Cmd]) {
        let mut m: BTreeMap<Vec<u8>, Vec<u8>> = BTreeMap::new();
        for c in cmds {
            match c {
                Cmd::Insert(k, v) => {
                    let new = !m.contains_key(&key(*k));
                    if new {
                        m.insert(key(*k), vec![*v; 3]);
                    }
                    assert_eq!(kv.insert(&key(*k), &[*v; 3]).unwrap(), new);
                }
                Cmd::Update(k, v) => {
                    let had = m.contains_key(&key(*k));
                    if had {
                        m.insert(key(*k), vec![*v]);
                    }
                    assert_eq!(kv.update(&key(*k), &[*v]).unwrap(), had);
                }
                Cmd::Upsert(k, v) => {
                    let new = m.insert(key(*k), vec![*v, 1]).is_none();
                    assert_eq!(kv.upsert(&key(*k), &[*v, 1]).unwrap(), new);
                }
                Cmd::Remove(k) => {
                    assert_eq!(kv.remove(&key(*k)).unwrap(), m.remove(&key(*k)).is_some())
                }
                Cmd::Get(k) => assert_eq!(kv.get(&key(*k)).unwrap(), m.get(&key(*k)).cloned()),
                Cmd::Scan(k, n) => {
                    let mut got = Vec::new();
                    let c = kv
                        .scan(&key(*k), *n as usize, &mut |a, b| {
                            got.push((a.to_vec(), b.to_vec()))
                        })
                        .unwrap();
                    let want: Vec<_> = m
                        .range(key(*k)..)
                        .take(*n as usize)
                        .map(|(a, b)| (a.clone(), b.clone()))
                        .collect();
                    assert_eq!(c, want.len());
                    assert_eq!(got, want);
                }
                Cmd::Batch(ops) => {
                    let mut b = WriteBatch::new();
                    for (k, v) in ops {
                        match v {
                            Some(v) => {
                                b.put(&key(*k), &[*v]);
                                m.insert(key(*k), vec![*v]);
                            }
                            None => {
                                b.delete(&key(*k));
                                m.remove(&key(*k));
                            }
                        }
                    }
                    kv.write_batch(&b).unwrap();
                }
                Cmd::Walk(k, fwd) => {
                    let mut cur = kv.cursor().unwrap();
                    let mut got = Vec::new();
                    let mut e = cur.seek(&key(*k)).unwrap();
                    while let Some((a, _)) = e {
                        got.push(a);
                        e = if *fwd { cur.next() } else { cur.prev() }.unwrap();
                    }
                    let first = m.range(key(*k)..).next().map(|(a, _)| a.clone());
                    let want: Vec<Vec<u8>> = match first {
                        None => vec![],
                        Some(f) if *fwd => m.range(f..).map(|(a, _)| a.clone()).collect(),
                        Some(f) => m.range(..=f).rev().map(|(a, _)| a.clone()).collect(),
                    };
                    assert_eq!(got, want);
                }
            }
            assert_eq!(kv.count(), m.len());
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(64))]
        #[test]
        fn btreemap_matches_oracle(cmds in proptest::collection::vec(cmd(), 1..80)) {
            check(&BTreeMapKv::new(), &cmds);
        }

        #[test]
        fn redb_matches_oracle(cmds in proptest::collection::vec(cmd(), 1..60)) {
            let path = std::env::temp_dir().join(format!(
                "ferrite-bench-redb-test-{}-{:?}.redb",
                std::process::id(),
                std::thread::current().id()
            ));
            let kv = RedbKv::create(&path, Durability::None, "redb").unwrap();
            check(&kv, &cmds);
            drop(kv);
            let _ = std::fs::remove_file(&path);
        }
    }

    /// 8-byte keys and values only, so the oracle's commands map ids to 8-byte keys.
    fn check_u64(cmds: &[Cmd]) {
        let kv = U64MapKv::new();
        let key8 = |k: u8| (k as u64 * 0x0101_0101_0101).to_be_bytes().to_vec();
        let val8 = |v: u8, x: u8| vec![v, x, 0, 0, 0, 0, 0, 7];
        let mut m: BTreeMap<Vec<u8>, Vec<u8>> = BTreeMap::new();
        for c in cmds {
            match c {
                Cmd::Insert(k, v) => {
                    let new = !m.contains_key(&key8(*k));
                    if new {
                        m.insert(key8(*k), val8(*v, 0));
                    }
                    assert_eq!(kv.insert(&key8(*k), &val8(*v, 0)).unwrap(), new);
                }
                Cmd::Update(k, v) => {
                    let had = m.contains_key(&key8(*k));
                    if had {
                        m.insert(key8(*k), val8(*v, 1));
                    }
                    assert_eq!(kv.update(&key8(*k), &val8(*v, 1)).unwrap(), had);
                }
                Cmd::Upsert(k, v) => {
                    let new = m.insert(key8(*k), val8(*v, 2)).is_none();
                    assert_eq!(kv.upsert(&key8(*k), &val8(*v, 2)).unwrap(), new);
                }
                Cmd::Remove(k) => {
                    assert_eq!(kv.remove(&key8(*k)).unwrap(), m.remove(&key8(*k)).is_some())
                }
                Cmd::Get(k) => assert_eq!(kv.get(&key8(*k)).unwrap(), m.get(&key8(*k)).cloned()),
                Cmd::Scan(k, n) => {
                    let mut got = Vec::new();
                    let c = kv
                        .scan(&key8(*k), *n as usize, &mut |a, b| {
                            got.push((a.to_vec(), b.to_vec()))
                        })
                        .unwrap();
                    let want: Vec<_> = m
                        .range(key8(*k)..)
                        .take(*n as usize)
                        .map(|(a, b)| (a.clone(), b.clone()))
                        .collect();
                    assert_eq!(c, want.len());
                    assert_eq!(got, want);
                }
                Cmd::Batch(ops) => {
                    let mut b = WriteBatch::new();
                    for (k, v) in ops {
                        match v {
                            Some(v) => {
                                b.put(&key8(*k), &val8(*v, 3));
                                m.insert(key8(*k), val8(*v, 3));
                            }
                            None => {
                                b.delete(&key8(*k));
                                m.remove(&key8(*k));
                            }
                        }
                    }
                    kv.write_batch(&b).unwrap();
                }
                Cmd::Walk(k, fwd) => {
                    let mut cur = kv.cursor().unwrap();
                    let mut got = Vec::new();
                    let mut e = cur.seek(&key8(*k)).unwrap();
                    while let Some((a, _)) = e {
                        got.push(a);
                        e = if *fwd { cur.next() } else { cur.prev() }.unwrap();
                    }
                    let first = m.range(key8(*k)..).next().map(|(a, _)| a.clone());
                    let want: Vec<Vec<u8>> = match first {
                        None => vec![],
                        Some(f) if *fwd => m.range(f..).map(|(a, _)| a.clone()).collect(),
                        Some(f) => m.range(..=f).rev().map(|(a, _)| a.clone()).collect(),
                    };
                    assert_eq!(got, want);
                }
            }
            assert_eq!(kv.count(), m.len());
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(64))]
        #[test]
        fn u64_map_matches_oracle(cmds in proptest::collection::vec(cmd(), 1..80)) {
            check_u64(&cmds);
        }
    }

    #[test]
    fn u64_map_refuses_other_sizes() {
        let kv = U64MapKv::new();
        assert!(kv.insert(b"short", &[0; 8]).is_err());
        assert!(kv.insert(&[0; 8], b"short").is_err());
        let mut b = WriteBatch::new();
        b.put(&[1; 8], &[1; 8]).put(b"bad", &[1; 8]);
        assert!(kv.write_batch(&b).is_err());
        assert_eq!(kv.count(), 0, "a rejected batch changes nothing");
        assert!(kv.insert(&[0; 8], &[9; 8]).unwrap());
        assert_eq!(kv.get(&[0; 8]).unwrap(), Some(vec![9; 8]));
    }

    #[test]
    fn oversized_keys_and_values_are_errors() {
        let kv = BTreeMapKv::new();
        let big = vec![0u8; MAX_KEY + 1];
        assert!(matches!(
            kv.insert(&big, b"v"),
            Err(KvError::KeyTooLarge { .. })
        ));
        let bigv = vec![0u8; MAX_VALUE + 1];
        assert!(matches!(
            kv.upsert(b"k", &bigv),
            Err(KvError::ValueTooLarge { .. })
        ));
        let mut b = WriteBatch::new();
        b.put(b"ok", b"v").put(&big, b"v");
        assert!(kv.write_batch(&b).is_err());
        assert_eq!(kv.count(), 0, "a rejected batch changes nothing");
    }
}

/// The concurrent DRAM index: `crossbeam_skiplist::SkipMap` (a lock-free
/// skip list; readers and writers never block each other). Updates replace
/// the entry (a new node per update, as the crate's API has no in-place
/// value change); an update racing with a remove of the same key may
/// re-insert it, which the benchmark's workloads never do.
#[derive(Default)]
pub struct SkipListKv {
    map: crossbeam_skiplist::SkipMap<Vec<u8>, Vec<u8>>,
}

/// What `skiplist` is, for the report.
pub const SKIPLIST_LABEL: &str = "crossbeam_skiplist::SkipMap<Vec<u8>, Vec<u8>> (lock-free)";

impl SkipListKv {
    pub fn new() -> Self {
        Self::default()
    }
}

impl OrderedKv for SkipListKv {
    fn name(&self) -> &str {
        "skiplist"
    }

    fn get_into(&self, key: &[u8], out: &mut Vec<u8>) -> KvResult<bool> {
        check_sizes(key, None, MAX_KEY, MAX_VALUE)?;
        out.clear();
        match self.map.get(key) {
            Some(e) => {
                out.extend_from_slice(e.value());
                Ok(true)
            }
            None => Ok(false),
        }
    }

    fn insert(&self, key: &[u8], value: &[u8]) -> KvResult<bool> {
        check_sizes(key, Some(value), MAX_KEY, MAX_VALUE)?;
        let mut new = false;
        self.map.get_or_insert_with(key.to_vec(), || {
            new = true;
            value.to_vec()
        });
        Ok(new)
    }

    fn update(&self, key: &[u8], value: &[u8]) -> KvResult<bool> {
        check_sizes(key, Some(value), MAX_KEY, MAX_VALUE)?;
        if !self.map.contains_key(key) {
            return Ok(false);
        }
        self.map.insert(key.to_vec(), value.to_vec());
        Ok(true)
    }

    fn upsert(&self, key: &[u8], value: &[u8]) -> KvResult<bool> {
        check_sizes(key, Some(value), MAX_KEY, MAX_VALUE)?;
        let new = !self.map.contains_key(key);
        self.map.insert(key.to_vec(), value.to_vec());
        Ok(new)
    }

    fn remove(&self, key: &[u8]) -> KvResult<bool> {
        check_sizes(key, None, MAX_KEY, MAX_VALUE)?;
        Ok(self.map.remove(key).is_some())
    }

    fn count(&self) -> usize {
        self.map.len()
    }

    fn scan(&self, start: &[u8], n: usize, f: &mut dyn FnMut(&[u8], &[u8])) -> KvResult<usize> {
        check_sizes(start, None, MAX_KEY, MAX_VALUE)?;
        let mut seen = 0;
        for e in self
            .map
            .range::<[u8], _>((Bound::Included(start), Bound::Unbounded))
            .take(n)
        {
            f(e.key(), e.value());
            seen += 1;
        }
        Ok(seen)
    }

    fn write_batch(&self, batch: &WriteBatch) -> KvResult<()> {
        for op in &batch.ops {
            match op {
                BatchOp::Put { key, value } => {
                    self.upsert(key, value)?;
                }
                BatchOp::Delete { key } => {
                    self.remove(key)?;
                }
            }
        }
        Ok(())
    }

    fn cursor(&self) -> KvResult<Box<dyn KvCursor + '_>> {
        Err(KvError::Backend(
            "skiplist: no cursor (a benchmark baseline)".into(),
        ))
    }
}
