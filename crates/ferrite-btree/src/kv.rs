//! [`BTree`]: a handle on one tree, implementing [`OrderedKv`] with every
//! write a single operation (its own durable commit; group commit batches
//! concurrent ones).

use std::sync::Arc;

use ferrite_buffer::{BufferManager, Ctx};
use ferrite_kv::{check_sizes, BatchOp, KvCursor, KvResult, OrderedKv, WriteBatch};

use crate::db::DbInner;
use crate::tree::{Cursor, Kind, TreeInner, TreeShape};
use crate::{kv_err, Database};

/// One B-tree of a [`Database`]. Cheap to clone; thread-safe.
#[derive(Clone)]
pub struct BTree {
    pub(crate) db: Arc<DbInner>,
    pub(crate) inner: Arc<TreeInner>,
}

impl BTree {
    pub(crate) fn bm(&self) -> &BufferManager {
        &self.db.bm
    }

    /// The tree's name in the catalog.
    pub fn tree_name(&self) -> &str {
        &self.inner.name
    }

    /// The tree's catalog id.
    pub fn id(&self) -> u32 {
        self.inner.id
    }

    /// The database the tree belongs to.
    pub fn database(&self) -> Database {
        Database {
            inner: self.db.clone(),
        }
    }

    /// Checks the tree's structure (keys ordered, within their ranges, levels).
    pub fn check(&self) -> Result<TreeShape, String> {
        self.inner.check(self.bm())
    }

    /// Copies bytes `off..off+len` of `key`'s value into `out`, clipped to
    /// the value; false when the key is absent. Touches (and, under the
    /// three-tier design, loads) only the cache lines of that part: the
    /// thesis's YCSB read of one field.
    pub fn get_part(
        &self,
        key: &[u8],
        off: usize,
        len: usize,
        out: &mut Vec<u8>,
    ) -> KvResult<bool> {
        if key.len() > self.inner.max_key {
            out.clear();
            return Ok(false);
        }
        self.inner
            .get_part(self.bm(), key, off, len, out)
            .map_err(kv_err)
    }

    /// Overwrites `bytes.len()` bytes of `key`'s value from `off` on, in
    /// place, as one durable operation (the thesis's YCSB update of one
    /// field): only those bytes' cache lines are written and logged. False
    /// when the key is absent; a range past the end of the value is an
    /// `Invalid`-argument storage error and changes nothing.
    pub fn update_part(&self, key: &[u8], off: usize, bytes: &[u8]) -> KvResult<bool> {
        check_sizes(key, None, self.inner.max_key, self.inner.max_value)?;
        self.inner
            .patch(self.bm(), Ctx::Auto, key, off, bytes)
            .map_err(kv_err)
    }

    fn write(&self, kind: Kind, key: &[u8], value: Option<&[u8]>) -> KvResult<bool> {
        check_sizes(key, value, self.inner.max_key, self.inner.max_value)?;
        self.inner
            .write(self.bm(), Ctx::Auto, kind, key, value.unwrap_or(&[]))
            .map_err(kv_err)
    }
}

impl OrderedKv for BTree {
    /// The label benchmarks print: `btree-<design>`.
    #[allow(clippy::misnamed_getters)]
    fn name(&self) -> &str {
        &self.inner.label
    }

    fn limits(&self) -> (usize, usize) {
        (self.inner.max_key, self.inner.max_value)
    }

    fn get_into(&self, key: &[u8], out: &mut Vec<u8>) -> KvResult<bool> {
        if key.len() > self.inner.max_key {
            out.clear();
            return Ok(false);
        }
        self.inner.get_into(self.bm(), key, out).map_err(kv_err)
    }

    fn insert(&self, key: &[u8], value: &[u8]) -> KvResult<bool> {
        self.write(Kind::Insert, key, Some(value))
    }

    fn update(&self, key: &[u8], value: &[u8]) -> KvResult<bool> {
        self.write(Kind::Update, key, Some(value))
    }

    fn upsert(&self, key: &[u8], value: &[u8]) -> KvResult<bool> {
        self.write(Kind::Upsert, key, Some(value))
    }

    fn remove(&self, key: &[u8]) -> KvResult<bool> {
        self.write(Kind::Remove, key, None)
    }

    /// Counts by scanning every leaf (O(n)).
    fn count(&self) -> usize {
        self.inner
            .scan(self.bm(), &[], usize::MAX, &mut |_, _| {})
            .unwrap_or(0)
    }

    fn scan(&self, start: &[u8], n: usize, f: &mut dyn FnMut(&[u8], &[u8])) -> KvResult<usize> {
        self.inner.scan(self.bm(), start, n, f).map_err(kv_err)
    }

    /// A transaction: all of it or nothing, also across a crash.
    fn write_batch(&self, batch: &WriteBatch) -> KvResult<()> {
        let db = self.database();
        let t = db.begin();
        for op in &batch.ops {
            let r = match op {
                BatchOp::Put { key, value } => t.upsert(self, key, value),
                BatchOp::Delete { key } => t.remove(self, key),
            };
            if let Err(e) = r {
                let _ = t.abort();
                return Err(e);
            }
        }
        t.commit()
    }

    /// A cursor over live data (see [`Cursor`]).
    fn cursor(&self) -> KvResult<Box<dyn KvCursor + '_>> {
        Ok(Box::new(Cursor {
            tree: self,
            pos: None,
        }))
    }
}
