//! The B-tree's callbacks for the buffer manager (after LeanStore's
//! `DTRegistry`): where an inner page keeps its child swips, and the logical
//! undo of a logged write.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use ferrite_buffer::{BufferError, BufferManager, Compensation, Ctx, Registry, Result};

use crate::node::{self, INNER, OFF_CHILD0, SLOT, SLOTS};
use crate::tree::{Kind, TreeInner, UndoOp};

/// Catalog kind of B-trees.
pub const BTREE_KIND: u32 = 1;

/// Open trees by catalog id, shared by every handle and by the registry.
pub(crate) type Trees = Arc<Mutex<HashMap<u32, Arc<TreeInner>>>>;

pub(crate) struct TreeRegistry {
    pub trees: Trees,
    pub label: String,
}

impl TreeRegistry {
    /// The open tree with catalog id `id`, opened from the catalog if needed.
    pub fn tree(&self, bm: &BufferManager, id: u32) -> Result<Arc<TreeInner>> {
        if let Some(t) = self.trees.lock().unwrap().get(&id) {
            return Ok(t.clone());
        }
        let e = bm
            .catalog()?
            .into_iter()
            .find(|e| e.id == id)
            .ok_or_else(|| BufferError::corrupt("catalog", format!("no structure with id {id}")))?;
        let t = crate::db::open_tree(bm, &e, &self.label)?;
        Ok(self.trees.lock().unwrap().entry(id).or_insert(t).clone())
    }
}

impl Registry for TreeRegistry {
    fn swips(&self, kind: u8, page: &[u8], out: &mut Vec<usize>) {
        if kind != INNER {
            return;
        }
        out.push(OFF_CHILD0);
        let count = u16::from_le_bytes([page[node::OFF_COUNT], page[node::OFF_COUNT + 1]]) as usize;
        let count = count.min((page.len() - SLOTS) / SLOT);
        for i in 0..count {
            let s = SLOTS + i * SLOT;
            out.push(u16::from_le_bytes([page[s], page[s + 1]]) as usize);
        }
    }

    fn undo(
        &self,
        bm: &BufferManager,
        comp: Compensation,
        tree: u32,
        payload: &[u8],
    ) -> Result<()> {
        let t = self.tree(bm, tree)?;
        let ctx = Ctx::Compensation(comp);
        match UndoOp::decode(payload)? {
            UndoOp::Remove(k) => t.write(bm, ctx, Kind::Remove, &k, &[]).map(|_| ()),
            UndoOp::Put(k, v) => t.write(bm, ctx, Kind::Upsert, &k, &v).map(|_| ()),
            UndoOp::Patch(k, off, old) => {
                if t.patch(bm, ctx, &k, off as usize, &old)? {
                    Ok(())
                } else {
                    Err(BufferError::corrupt(
                        format!("B-tree {:?}", t.name),
                        "the undo of a patch found its key gone",
                    ))
                }
            }
        }
    }
}
