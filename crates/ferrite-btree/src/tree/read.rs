//! Reads: point lookups (cache-line-grained: a leaf is searched under a shared
//! latch through its resident lines, and on a line fault again under an
//! exclusive one, which loads what is missing), range scans and the cursor.
//! Scans and cursors hold no latch between leaves: they descend again from the
//! root with the bound where the last leaf ended, as LeanStore does.

use ferrite_buffer::{BufferManager, Hint, Mode, PageGuard, Result};

use super::{Route, TreeInner};
use crate::node::{self, Header};

fn leaf_get(g: &mut PageGuard<'_>, key: &[u8], out: &mut Vec<u8>) -> Result<bool> {
    let Some((voff, vlen)) = node::find_value(g, key)? else {
        return Ok(false);
    };
    out.clear();
    out.extend_from_slice(g.read(voff, vlen)?);
    Ok(true)
}

/// Bytes `off..off+len` of the value (fewer when the value is shorter).
fn leaf_get_part(
    g: &mut PageGuard<'_>,
    key: &[u8],
    off: usize,
    len: usize,
    out: &mut Vec<u8>,
) -> Result<bool> {
    let Some((voff, vlen)) = node::find_value_prefetch(g, key, off, len)? else {
        return Ok(false);
    };
    let a = off.min(vlen);
    let b = off.saturating_add(len).min(vlen);
    out.clear();
    out.extend_from_slice(g.read(voff + a, b - a)?);
    Ok(true)
}

/// Entry `i` of a leaf, copied out.
fn entry(g: &mut PageGuard<'_>, h: &Header, i: usize) -> Result<(Vec<u8>, Vec<u8>)> {
    let s = node::slot(g, h, i)?;
    let k = node::key(g, h, &s)?.to_vec();
    let (voff, vlen) = node::leaf_value(g, &s)?;
    Ok((k, g.read(voff, vlen)?.to_vec()))
}

impl TreeInner {
    /// Copies the value of `key` into `out`; false when absent.
    pub(crate) fn get_into(
        &self,
        bm: &BufferManager,
        key: &[u8],
        out: &mut Vec<u8>,
    ) -> Result<bool> {
        let _r = bm.reader();
        self.read_leaf(bm, key, &mut |g| leaf_get(g, key, out))
    }

    /// Runs `f` on the leaf of `key`, latched shared; on a line fault, again
    /// on the leaf latched exclusive (which loads the lines `f` reads),
    /// relatched through its parent rather than by a second descent.
    fn read_leaf(
        &self,
        bm: &BufferManager,
        key: &[u8],
        f: &mut dyn FnMut(&mut PageGuard<'_>) -> Result<bool>,
    ) -> Result<bool> {
        let mut p = self.descend(bm, Route::Key(key), Mode::Shared, Hint::Leaf)?;
        match f(&mut p.leaf) {
            Err(e) if e.is_fault() => {}
            r => return r,
        }
        let mut p = match p.relatch_exclusive(bm)? {
            Some(p) => p,
            None => self.descend(bm, Route::Key(key), Mode::Exclusive, Hint::Leaf)?,
        };
        f(&mut p.leaf)
    }

    /// Copies bytes `off..off+len` of `key`'s value into `out` (clipped to
    /// the value: empty when the value is shorter than `off`); false when
    /// the key is absent. Only the cache lines of that part of the value are
    /// touched (and loaded, cache-line-grained).
    pub(crate) fn get_part(
        &self,
        bm: &BufferManager,
        key: &[u8],
        off: usize,
        len: usize,
        out: &mut Vec<u8>,
    ) -> Result<bool> {
        let _r = bm.reader();
        self.read_leaf(bm, key, &mut |g| leaf_get_part(g, key, off, len, out))
    }

    /// Copies up to `limit` entries with key >= `from` (> when `strict`) of
    /// the leaf that holds `from` into `out`; returns where the next leaf's
    /// keys start (None: this was the last leaf).
    fn collect(
        &self,
        bm: &BufferManager,
        from: &[u8],
        strict: bool,
        limit: usize,
        out: &mut Vec<(Vec<u8>, Vec<u8>)>,
    ) -> Result<Option<Vec<u8>>> {
        let _r = bm.reader();
        let mut p = self.descend_with(bm, Route::Key(from), Mode::Shared, Hint::Whole, true)?;
        let g = &mut p.leaf;
        let h = node::header(g)?;
        let pos = node::lower_bound(g, &h, from, strict)?;
        for i in pos..h.count.min(pos.saturating_add(limit)) {
            out.push(entry(g, &h, i)?);
        }
        Ok(p.upper.take())
    }

    /// Calls `f` for up to `n` entries with key >= `start`, ascending.
    pub(crate) fn scan(
        &self,
        bm: &BufferManager,
        start: &[u8],
        n: usize,
        f: &mut dyn FnMut(&[u8], &[u8]),
    ) -> Result<usize> {
        let mut done = 0;
        let mut from = start.to_vec();
        let mut buf = Vec::new();
        while done < n {
            buf.clear();
            let upper = self.collect(bm, &from, false, n - done, &mut buf)?;
            for (k, v) in &buf {
                f(k, v);
            }
            done += buf.len();
            match upper {
                Some(u) if done < n => from = u,
                _ => break,
            }
        }
        Ok(done)
    }

    /// The first entry with key >= `key` (> when `strict`).
    pub(crate) fn next_entry(
        &self,
        bm: &BufferManager,
        key: &[u8],
        strict: bool,
    ) -> Result<Option<(Vec<u8>, Vec<u8>)>> {
        let mut buf = Vec::new();
        let mut from = key.to_vec();
        let mut strict = strict;
        loop {
            let upper = self.collect(bm, &from, strict, 1, &mut buf)?;
            if let Some(e) = buf.pop() {
                return Ok(Some(e));
            }
            match upper {
                Some(u) => {
                    from = u;
                    strict = false;
                }
                None => return Ok(None),
            }
        }
    }

    /// The last entry with key < `key` (the last entry when `key` is None).
    pub(crate) fn prev_entry(
        &self,
        bm: &BufferManager,
        key: Option<&[u8]>,
    ) -> Result<Option<(Vec<u8>, Vec<u8>)>> {
        let mut bound: Option<Vec<u8>> = key.map(|k| k.to_vec());
        loop {
            let _r = bm.reader();
            let route = match &bound {
                Some(k) => Route::Before(k),
                None => Route::Last,
            };
            let mut p = self.descend_with(bm, route, Mode::Shared, Hint::Whole, true)?;
            let g = &mut p.leaf;
            let h = node::header(g)?;
            let idx = match &bound {
                Some(k) => node::lower_bound(g, &h, k, false)?,
                None => h.count,
            };
            if idx > 0 {
                return Ok(Some(entry(g, &h, idx - 1)?));
            }
            match p.lower.take() {
                Some(l) => bound = Some(l),
                None => return Ok(None),
            }
        }
    }
}

/// A cursor over live data: every step descends from the root (no latch is
/// held between calls), so it sees concurrent changes and is never invalidated.
pub struct Cursor<'t> {
    pub(crate) tree: &'t crate::BTree,
    pub(crate) pos: Option<Vec<u8>>,
}

impl Cursor<'_> {
    fn set(&mut self, e: Option<(Vec<u8>, Vec<u8>)>) -> Option<(Vec<u8>, Vec<u8>)> {
        if let Some((k, _)) = &e {
            self.pos = Some(k.clone());
        }
        e
    }
}

impl ferrite_kv::KvCursor for Cursor<'_> {
    fn seek(&mut self, key: &[u8]) -> ferrite_kv::KvResult<Option<(Vec<u8>, Vec<u8>)>> {
        let e = self
            .tree
            .inner
            .next_entry(self.tree.bm(), key, false)
            .map_err(crate::kv_err)?;
        Ok(self.set(e))
    }

    fn first(&mut self) -> ferrite_kv::KvResult<Option<(Vec<u8>, Vec<u8>)>> {
        self.seek(&[])
    }

    fn last(&mut self) -> ferrite_kv::KvResult<Option<(Vec<u8>, Vec<u8>)>> {
        let e = self
            .tree
            .inner
            .prev_entry(self.tree.bm(), None)
            .map_err(crate::kv_err)?;
        Ok(self.set(e))
    }

    fn next(&mut self) -> ferrite_kv::KvResult<Option<(Vec<u8>, Vec<u8>)>> {
        let Some(cur) = self.pos.clone() else {
            return self.first();
        };
        let e = self
            .tree
            .inner
            .next_entry(self.tree.bm(), &cur, true)
            .map_err(crate::kv_err)?;
        Ok(self.set(e))
    }

    fn prev(&mut self) -> ferrite_kv::KvResult<Option<(Vec<u8>, Vec<u8>)>> {
        let Some(cur) = self.pos.clone() else {
            return self.last();
        };
        let e = self
            .tree
            .inner
            .prev_entry(self.tree.bm(), Some(&cur))
            .map_err(crate::kv_err)?;
        Ok(self.set(e))
    }
}
