//! Point writes: insert, update, upsert, remove, each one leaf change logged
//! with its logical undo. Every check (space, sizes, presence) happens before
//! the first byte changes, so an operation that fails leaves its pages as they
//! were; a leaf without room sends the operation through a split first.

use ferrite_buffer::{BufferError, BufferManager, Ctx, Hint, Mode, Result};

use super::{Route, TreeInner};
use crate::node::{self, leaf_cell_len, SLOT};

/// A point write.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    Insert,
    Update,
    Upsert,
    Remove,
}

/// The logical undo of a write (payload of the log record).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum UndoOp {
    /// The key was new: remove it.
    Remove(Vec<u8>),
    /// The key held this value: put it back.
    Put(Vec<u8>, Vec<u8>),
    /// Bytes at this offset of the key's value were these: write them back
    /// (the undo of a patch; the key exists, its lock held until the end).
    Patch(Vec<u8>, u16, Vec<u8>),
}

impl UndoOp {
    pub fn encode(&self) -> Vec<u8> {
        let (tag, k, v): (u8, &[u8], &[u8]) = match self {
            UndoOp::Remove(k) => (1, k, &[]),
            UndoOp::Put(k, v) => (2, k, v),
            UndoOp::Patch(k, _, v) => (3, k, v),
        };
        let mut b = Vec::with_capacity(5 + k.len() + v.len());
        b.push(tag);
        b.extend_from_slice(&(k.len() as u16).to_le_bytes());
        b.extend_from_slice(k);
        if let UndoOp::Patch(_, off, _) = self {
            b.extend_from_slice(&off.to_le_bytes());
        }
        b.extend_from_slice(v);
        b
    }

    pub fn decode(b: &[u8]) -> Result<UndoOp> {
        let bad = || BufferError::corrupt("write-ahead log", "malformed B-tree undo payload");
        if b.len() < 3 {
            return Err(bad());
        }
        let kl = u16::from_le_bytes([b[1], b[2]]) as usize;
        if b.len() < 3 + kl {
            return Err(bad());
        }
        let (k, v) = (b[3..3 + kl].to_vec(), b[3 + kl..].to_vec());
        match b[0] {
            1 if v.is_empty() => Ok(UndoOp::Remove(k)),
            2 => Ok(UndoOp::Put(k, v)),
            3 if v.len() >= 2 => Ok(UndoOp::Patch(
                k,
                u16::from_le_bytes([v[0], v[1]]),
                v[2..].to_vec(),
            )),
            _ => Err(bad()),
        }
    }
}

/// The outcome of one attempt at a write.
enum Attempt {
    Done(bool),
    /// The leaf lacks room for this many bytes: split, then retry.
    Split(usize),
    /// The leaf is now empty: remove it, then report this result.
    DoneEmpty(bool),
}

impl TreeInner {
    /// Runs a point write in `ctx`; returns what OrderedKv's method returns
    /// (insert: inserted; update: updated; upsert: new key; remove: removed).
    pub(crate) fn write(
        &self,
        bm: &BufferManager,
        ctx: Ctx<'_>,
        kind: Kind,
        key: &[u8],
        value: &[u8],
    ) -> Result<bool> {
        self.check_key(key)?;
        if kind != Kind::Remove && value.len() > self.max_value {
            return Err(BufferError::Invalid(format!(
                "value of {} bytes exceeds the limit of {} bytes",
                value.len(),
                self.max_value
            )));
        }
        loop {
            match self.attempt(bm, ctx, kind, key, value)? {
                Attempt::Done(r) => return Ok(r),
                Attempt::DoneEmpty(r) => {
                    self.collapse(bm, key)?;
                    return Ok(r);
                }
                Attempt::Split(need) => self.split_for(bm, key, need)?,
            }
        }
    }

    fn attempt(
        &self,
        bm: &BufferManager,
        ctx: Ctx<'_>,
        kind: Kind,
        key: &[u8],
        value: &[u8],
    ) -> Result<Attempt> {
        let mut op = bm.begin_op(ctx, 1, 16 + key.len() + self.max_value)?;
        op.lock_key(self.id, key)?;
        let mut p = self.descend(bm, Route::Key(key), Mode::Exclusive, Hint::Leaf)?;
        let g = &mut p.leaf;
        let mut h = node::header(g)?;
        let (pos, found) = node::leaf_find(g, &h, key)?;
        let result = match kind {
            Kind::Insert => !found,
            Kind::Update | Kind::Remove => found,
            Kind::Upsert => !found,
        };
        if (kind == Kind::Insert && found)
            || (matches!(kind, Kind::Update | Kind::Remove) && !found)
        {
            return Ok(Attempt::Done(result));
        }
        let new_cell = leaf_cell_len(key.len(), value.len());
        let undo;
        if found {
            let s = node::slot(g, &h, pos)?;
            let (voff, vlen) = node::leaf_value(g, &s)?;
            let old = g.read(voff, vlen)?.to_vec();
            undo = UndoOp::Put(key.to_vec(), old);
            let old_cell = leaf_cell_len(s.klen, vlen);
            if kind == Kind::Remove {
                g.make_full()?;
                node::remove_slot(g, &mut h, pos, s.off, old_cell)?;
            } else if vlen == value.len() {
                // In place: only the value's lines change (cache-line-grained).
                g.write(voff, value)?;
            } else {
                // After removing the old entry: room for the new one?
                let at_start = s.off == h.data_start;
                let free_after = h.free() + SLOT + if at_start { old_cell } else { 0 };
                let frag_after = h.frag + if at_start { 0 } else { old_cell };
                if free_after + frag_after < SLOT + new_cell {
                    return Ok(Attempt::Split(SLOT + new_cell));
                }
                g.make_full()?;
                node::remove_slot(g, &mut h, pos, s.off, old_cell)?;
                if h.free() < SLOT + new_cell {
                    let all = node::entries(g, &h)?;
                    h = node::rebuild(g, 0, &all)?;
                }
                insert_leaf(g, &mut h, pos, key, value)?;
            }
        } else {
            undo = UndoOp::Remove(key.to_vec());
            if !node::fits(&h, SLOT + new_cell) {
                return Ok(Attempt::Split(SLOT + new_cell));
            }
            g.make_full()?;
            if h.free() < SLOT + new_cell {
                let all = node::entries(g, &h)?;
                h = node::rebuild(g, 0, &all)?;
            }
            insert_leaf(g, &mut h, pos, key, value)?;
        }
        let payload = undo.encode();
        op.log(&mut [g], Some((self.id, &payload)))?;
        let empty = h.count == 0 && p.parent.is_some();
        drop(p);
        op.finish()?;
        Ok(if empty {
            Attempt::DoneEmpty(result)
        } else {
            Attempt::Done(result)
        })
    }
}

impl TreeInner {
    /// Overwrites `bytes.len()` bytes of `key`'s value from offset `off` in
    /// place (the thesis's YCSB update of one field): only the lines of those
    /// bytes change and are logged, the undo holds their old contents. False
    /// when the key is absent; a range past the value's end is an error and
    /// changes nothing.
    pub(crate) fn patch(
        &self,
        bm: &BufferManager,
        ctx: Ctx<'_>,
        key: &[u8],
        off: usize,
        bytes: &[u8],
    ) -> Result<bool> {
        self.check_key(key)?;
        if off
            .checked_add(bytes.len())
            .is_none_or(|e| e > self.max_value)
        {
            return Err(BufferError::Invalid(format!(
                "patch of {} bytes at {off} runs past the largest value ({} bytes)",
                bytes.len(),
                self.max_value
            )));
        }
        let mut op = bm.begin_op(ctx, 1, 16 + key.len() + bytes.len())?;
        op.lock_key(self.id, key)?;
        let mut p = self.descend(bm, Route::Key(key), Mode::Exclusive, Hint::Leaf)?;
        let g = &mut p.leaf;
        let Some((voff, vlen)) = node::find_value(g, key)? else {
            return Ok(false);
        };
        if off + bytes.len() > vlen {
            return Err(BufferError::Invalid(format!(
                "patch of {} bytes at {off} runs past the value of {vlen} bytes",
                bytes.len()
            )));
        }
        if bytes.is_empty() {
            return Ok(true);
        }
        let old = g.read(voff + off, bytes.len())?.to_vec();
        g.write(voff + off, bytes)?;
        let payload = UndoOp::Patch(key.to_vec(), off as u16, old).encode();
        op.log(&mut [g], Some((self.id, &payload)))?;
        drop(p);
        op.finish()?;
        Ok(true)
    }
}

fn insert_leaf(
    g: &mut ferrite_buffer::PageGuard<'_>,
    h: &mut node::Header,
    pos: usize,
    key: &[u8],
    value: &[u8],
) -> Result<()> {
    node::insert_cell(
        g,
        h,
        pos,
        key,
        leaf_cell_len(key.len(), value.len()),
        |g, off| {
            g.put_u16(off, value.len() as u16)?;
            g.write(off + 2, key)?;
            g.write(off + 2 + key.len(), value)
        },
    )?;
    Ok(())
}

impl TreeInner {
    /// A key longer than the tree's limit is an error (nothing changes).
    fn check_key(&self, key: &[u8]) -> Result<()> {
        if key.len() > self.max_key {
            return Err(BufferError::Invalid(format!(
                "key of {} bytes exceeds the limit of {} bytes",
                key.len(),
                self.max_key
            )));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn undo_payloads_round_trip_and_reject_garbage() {
        for u in [
            UndoOp::Remove(b"k".to_vec()),
            UndoOp::Put(b"".to_vec(), b"v".to_vec()),
            UndoOp::Put(b"key".to_vec(), vec![]),
            UndoOp::Patch(b"key".to_vec(), 300, b"old".to_vec()),
            UndoOp::Patch(vec![], 0, vec![]),
        ] {
            assert_eq!(UndoOp::decode(&u.encode()).unwrap(), u);
        }
        assert!(UndoOp::decode(&[9, 0, 0]).is_err());
        assert!(UndoOp::decode(&[1, 5, 0, 1]).is_err());
        assert!(UndoOp::decode(&[1, 1, 0, 1, 2]).is_err());
        assert!(
            UndoOp::decode(&[3, 1, 0, 1, 2]).is_err(),
            "a patch needs its offset"
        );
    }
}
