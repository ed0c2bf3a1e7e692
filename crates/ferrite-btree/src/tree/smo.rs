//! Structure changes, each one system record (atomic in the log), never undone:
//!
//! * **split** (eager, top-down): descend exclusively two levels at a time;
//!   the first node on the path that cannot take what is needed (an inner node
//!   a maximal separator, the leaf the entry) is split, its parent taking the
//!   separator (it has room: it was checked one level up). A full root moves
//!   its entries into two new children and becomes their parent, keeping its
//!   page id. One split per call; the caller retries its operation.
//! * **collapse**: an emptied leaf is unlinked from its parent (its key range
//!   joins the left neighbour's, or the right one's when it is leftmost) and
//!   put on the free list. A parent left with one child stays.

use ferrite_buffer::{BufferError, BufferManager, Ctx, Hint, Mode, PageGuard, Result};

use super::{pick, Route, TreeInner};
use crate::node::{self, inner_cell_len, Entry, Header, INNER, LEAF, MAX_HEIGHT, OFF_CHILD0, SLOT};

/// Index at which to split `entries` so both halves hold about half the bytes.
fn split_point(level: u8, entries: &[Entry]) -> usize {
    let total = node::used_bytes(level, entries);
    let mut acc = 0;
    for (i, e) in entries.iter().enumerate() {
        acc += node::used_bytes(level, std::slice::from_ref(e));
        if acc * 2 >= total {
            // Leaves keep at least one entry on each side; inner nodes push
            // entry m up and need one on each side of it.
            let lo = 1;
            let hi = if level == 0 {
                entries.len() - 1
            } else {
                entries.len() - 2
            };
            return (i + 1).clamp(lo, hi);
        }
    }
    entries.len() / 2
}

/// The shortest key `s` with `left < s <= right`.
fn separator(left: &[u8], right: &[u8]) -> Vec<u8> {
    let common = left.iter().zip(right).take_while(|(a, b)| a == b).count();
    right[..(common + 1).min(right.len())].to_vec()
}

/// The halves of a split and the key separating them; inner: the child page
/// that becomes the right half's leftmost child.
struct Halves {
    left: Vec<Entry>,
    right: Vec<Entry>,
    sep: Vec<u8>,
    right_child0: u64,
}

fn halves(level: u8, mut all: Vec<Entry>) -> Result<Halves> {
    let min = if level == 0 { 2 } else { 3 };
    if all.len() < min {
        return Err(BufferError::Invalid(format!(
            "a node of level {level} with {} entries cannot be split",
            all.len()
        )));
    }
    let m = split_point(level, &all);
    if level == 0 {
        let right = all.split_off(m);
        let sep = separator(&all[m - 1].key, &right[0].key);
        Ok(Halves {
            left: all,
            right,
            sep,
            right_child0: 0,
        })
    } else {
        let mut right = all.split_off(m);
        let up = right.remove(0);
        Ok(Halves {
            left: all,
            right,
            sep: up.key,
            right_child0: u64::from_le_bytes(up.val[..8].try_into().expect("8")),
        })
    }
}

impl TreeInner {
    /// Splits the first node on the path to `key` that lacks room (see module
    /// docs); a leaf needs `need` bytes.
    pub(crate) fn split_for(&self, bm: &BufferManager, key: &[u8], need: usize) -> Result<()> {
        let inner_need = SLOT + inner_cell_len(self.max_key);
        let mut op = bm.begin_op(Ctx::System, 6, 0)?;
        let mut node = self.root_x(bm)?;
        let mut nh = node::header(&mut node)?;
        let mut parent: Option<(PageGuard<'_>, Header)> = None;
        loop {
            let full = if nh.level == 0 {
                !node::fits(&nh, need)
            } else {
                !node::fits(&nh, inner_need)
            };
            if full {
                let mut meta = op.fix_meta(Mode::Exclusive)?;
                let mut new_pages = match parent {
                    None => self.split_root(&op, &mut meta, &mut node, nh)?,
                    Some((ref mut p, ph)) => {
                        vec![self.split_child(&op, &mut meta, p, ph, &mut node, nh)?]
                    }
                };
                // One record for every page the split changed: atomic in the log.
                let mut gs: Vec<&mut PageGuard<'_>> = vec![&mut meta, &mut node];
                if let Some((ref mut p, _)) = parent {
                    gs.push(p);
                }
                gs.extend(new_pages.iter_mut());
                op.log(&mut gs, None)?;
                drop(gs);
                drop(new_pages);
                drop(meta);
                drop(parent);
                drop(node);
                return op.finish();
            }
            if nh.level == 0 {
                return op.finish();
            }
            let (_, off) = pick(&mut node, &nh, Route::Key(key))?;
            let mut child = bm.fix_child(&node, off, Mode::Exclusive, Hint::Whole)?;
            let ch = node::header(&mut child)?;
            parent = Some((node, nh));
            node = child;
            nh = ch;
        }
    }

    /// Splits `n` (a child of `p`): its upper half moves to a new right sibling.
    fn split_child<'a>(
        &self,
        op: &ferrite_buffer::Op<'a>,
        meta: &mut PageGuard<'a>,
        p: &mut PageGuard<'a>,
        mut ph: Header,
        n: &mut PageGuard<'a>,
        nh: Header,
    ) -> Result<PageGuard<'a>> {
        n.unswizzle_all()?;
        let all = node::entries(n, &nh)?;
        let hv = halves(nh.level, all)?;
        let sep_need = SLOT + inner_cell_len(hv.sep.len());
        if !node::fits(&ph, sep_need) {
            return Err(BufferError::Invalid(
                "split: the parent lacks room for the separator".into(),
            ));
        }
        let kind = if nh.level == 0 { LEAF } else { INNER };
        let mut r = op.alloc_page(meta, kind)?;
        node::init(&mut r, nh.level, self.id)?;
        if nh.level > 0 {
            r.set_child(OFF_CHILD0, hv.right_child0)?;
        }
        node::rebuild(&mut r, nh.level, &hv.right)?;
        node::rebuild(n, nh.level, &hv.left)?;
        // The separator goes into the parent right after n's own entry.
        if ph.free() < sep_need {
            p.unswizzle_all()?;
            let all = node::entries(p, &ph)?;
            ph = node::rebuild(p, ph.level, &all)?;
        }
        let pos = node::lower_bound(p, &ph, &hv.sep, false)?;
        let rpid = r.pid();
        let sep = hv.sep.clone();
        node::insert_cell(
            p,
            &mut ph,
            pos,
            &sep,
            inner_cell_len(sep.len()),
            |g, off| {
                g.put_u64(off, rpid)?;
                g.write(off + 8, &sep)
            },
        )?;
        Ok(r)
    }

    /// Splits the root: its entries move into two new children; the root
    /// becomes an inner node one level up over them.
    fn split_root<'a>(
        &self,
        op: &ferrite_buffer::Op<'a>,
        meta: &mut PageGuard<'a>,
        root: &mut PageGuard<'a>,
        rh: Header,
    ) -> Result<Vec<PageGuard<'a>>> {
        if rh.level as usize + 1 >= MAX_HEIGHT {
            return Err(BufferError::CapacityExceeded(format!(
                "the tree reached {MAX_HEIGHT} levels"
            )));
        }
        root.unswizzle_all()?;
        let all = node::entries(root, &rh)?;
        let child0 = if rh.level > 0 {
            root.child_pid(OFF_CHILD0)?
        } else {
            0
        };
        let hv = halves(rh.level, all)?;
        let kind = if rh.level == 0 { LEAF } else { INNER };
        let mut l = op.alloc_page(meta, kind)?;
        let mut r = op.alloc_page(meta, kind)?;
        for (g, ents, c0) in [
            (&mut l, &hv.left, child0),
            (&mut r, &hv.right, hv.right_child0),
        ] {
            node::init(g, rh.level, self.id)?;
            if rh.level > 0 {
                g.set_child(OFF_CHILD0, c0)?;
            }
            node::rebuild(g, rh.level, ents)?;
        }
        root.format(INNER)?;
        node::init(root, rh.level + 1, self.id)?;
        root.set_child(OFF_CHILD0, l.pid())?;
        let mut h = node::header(root)?;
        let rpid = r.pid();
        let sep = hv.sep.clone();
        node::insert_cell(
            root,
            &mut h,
            0,
            &sep,
            inner_cell_len(sep.len()),
            |g, off| {
                g.put_u64(off, rpid)?;
                g.write(off + 8, &sep)
            },
        )?;
        root.pin(true);
        Ok(vec![l, r])
    }

    /// Unlinks the leaf for `key` if it is (still) empty and not its parent's
    /// only child, and frees it.
    pub(crate) fn collapse(&self, bm: &BufferManager, key: &[u8]) -> Result<()> {
        let mut op = bm.begin_op(Ctx::System, 4, 0)?;
        let mut node = self.root_x(bm)?;
        let mut nh = node::header(&mut node)?;
        if nh.level == 0 {
            return op.finish();
        }
        while nh.level > 1 {
            let (_, off) = pick(&mut node, &nh, Route::Key(key))?;
            let mut c = bm.fix_child(&node, off, Mode::Exclusive, Hint::Whole)?;
            let ch = node::header(&mut c)?;
            node = c;
            nh = ch;
        }
        let (j, off) = pick(&mut node, &nh, Route::Key(key))?;
        let mut leaf = bm.fix_child(&node, off, Mode::Exclusive, Hint::Whole)?;
        let lh = node::header(&mut leaf)?;
        if lh.count != 0 || nh.count == 0 {
            drop(leaf);
            drop(node);
            return op.finish();
        }
        let mut meta = op.fix_meta(Mode::Exclusive)?;
        node.unswizzle_all()?;
        if j == 0 {
            // The leftmost child goes: the next one takes its place and range.
            let s = node::slot(&mut node, &nh, 0)?;
            let next = node.child_pid(s.off)?;
            node.set_child(OFF_CHILD0, next)?;
            node::remove_slot(&mut node, &mut nh, 0, s.off, inner_cell_len(s.klen))?;
        } else {
            // Its range joins the left neighbour's.
            let s = node::slot(&mut node, &nh, j - 1)?;
            node::remove_slot(&mut node, &mut nh, j - 1, s.off, inner_cell_len(s.klen))?;
        }
        op.free_page(&mut meta, &mut leaf)?;
        op.log(&mut [&mut node, &mut leaf, &mut meta], None)?;
        drop(meta);
        drop(leaf);
        drop(node);
        op.finish()
    }
}
