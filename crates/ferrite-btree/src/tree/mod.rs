//! The B+-tree: shared state of one tree, root fixing and the descent every
//! operation starts with. Reads (`read`), writes (`write`), structure changes
//! (`smo`) and checks (`check`) are split by concern.
//!
//! Latching (docs/ARCHITECTURE.md, "Buffer manager"): inner nodes are latched
//! shared top-down with coupling; the leaf in the operation's mode while its
//! parent stays latched shared; structure changes latch exclusively top-down,
//! two levels at a time. The root keeps its page id for the tree's lifetime (a
//! root split moves its contents into two new children), so the catalog never
//! changes after creation.

mod check;
mod read;
mod smo;
mod write;

pub use check::TreeShape;
pub use read::Cursor;
pub(crate) use write::{Kind, UndoOp};

use ferrite_buffer::{BufferError, BufferManager, Hint, Mode, PageGuard, Result};

use crate::node::{self, Header};

/// What every handle of one tree shares.
pub(crate) struct TreeInner {
    pub id: u32,
    pub name: String,
    pub root: u64,
    pub label: String,
    pub max_key: usize,
    pub max_value: usize,
    /// The root's DRAM frame (it is pinned), to skip the page table.
    pub root_frame: std::sync::atomic::AtomicU32,
}

/// A latched leaf and (unless the leaf is the root) its parent, latched shared.
pub(crate) struct LeafPath<'a> {
    pub parent: Option<PageGuard<'a>>,
    pub leaf: PageGuard<'a>,
    /// Offset of the leaf's swip in the parent (0 without a parent).
    pub leaf_off: usize,
    /// What the leaf was fixed with.
    pub hint: Hint,
    /// Smallest key the leaf may hold (None: unbounded).
    pub lower: Option<Vec<u8>>,
    /// Keys from here on belong to later leaves (None: unbounded).
    pub upper: Option<Vec<u8>>,
}

/// Which child a descent takes at each inner node.
#[derive(Clone, Copy)]
pub(crate) enum Route<'k> {
    /// The child whose range holds this key.
    Key(&'k [u8]),
    /// The child holding the keys just below this key.
    Before(&'k [u8]),
    /// The rightmost child.
    Last,
}

impl<'a> LeafPath<'a> {
    /// The same leaf latched exclusive, through the parent, which stays
    /// latched shared all along (so the parent's swip still names the leaf
    /// the descent chose): a reader that met a line fault loads the line
    /// without descending again. `None` (and nothing latched) when the leaf
    /// is the root: the caller then descends again.
    pub(crate) fn relatch_exclusive(self, bm: &'a BufferManager) -> Result<Option<LeafPath<'a>>> {
        let LeafPath {
            parent,
            leaf,
            leaf_off,
            hint,
            lower,
            upper,
        } = self;
        drop(leaf);
        let Some(parent) = parent else {
            return Ok(None);
        };
        let leaf = bm.fix_child(&parent, leaf_off, Mode::Exclusive, hint)?;
        Ok(Some(LeafPath {
            parent: Some(parent),
            leaf,
            leaf_off,
            hint,
            lower,
            upper,
        }))
    }
}

impl TreeInner {
    /// Descends to the leaf `route` selects, latching it in `leaf_mode` with
    /// `hint` (the leaf's parent stays latched shared).
    pub(crate) fn descend<'a>(
        &self,
        bm: &'a BufferManager,
        route: Route<'_>,
        leaf_mode: Mode,
        hint: Hint,
    ) -> Result<LeafPath<'a>> {
        self.descend_with(bm, route, leaf_mode, hint, false)
    }

    /// [`TreeInner::descend`], also returning the leaf's key range when
    /// `bounds` (scans and cursors need it; point operations do not).
    pub(crate) fn descend_with<'a>(
        &self,
        bm: &'a BufferManager,
        route: Route<'_>,
        leaf_mode: Mode,
        hint: Hint,
        bounds: bool,
    ) -> Result<LeafPath<'a>> {
        loop {
            let mut g = bm.fix_pinned(&self.root_frame, self.root, Mode::Shared)?;
            let mut h = node::header(&mut g)?;
            if h.level == 0 {
                if leaf_mode == Mode::Exclusive {
                    drop(g);
                    g = bm.fix_pinned(&self.root_frame, self.root, Mode::Exclusive)?;
                    if node::header(&mut g)?.level != 0 {
                        continue;
                    }
                }
                return Ok(LeafPath {
                    parent: None,
                    leaf: g,
                    leaf_off: 0,
                    hint,
                    lower: None,
                    upper: None,
                });
            }
            let (mut lower, mut upper): (Option<Vec<u8>>, Option<Vec<u8>>) = (None, None);
            loop {
                let (j, off) = pick(&mut g, &h, route)?;
                if bounds && j > 0 {
                    let s = node::slot(&mut g, &h, j - 1)?;
                    lower = Some(node::key(&mut g, &h, &s)?.to_vec());
                }
                if bounds && j < h.count {
                    let s = node::slot(&mut g, &h, j)?;
                    upper = Some(node::key(&mut g, &h, &s)?.to_vec());
                }
                let leaf_next = h.level == 1;
                let (mode, ch) = if leaf_next {
                    (leaf_mode, hint)
                } else {
                    (Mode::Shared, Hint::Whole)
                };
                let mut c = bm.fix_child(&g, off, mode, ch)?;
                let chh = node::header(&mut c)?;
                if chh.level + 1 != h.level {
                    return Err(BufferError::corrupt(
                        format!("B-tree {:?}", self.name),
                        format!(
                            "page {} of level {} has child {} of level {}",
                            g.pid(),
                            h.level,
                            c.pid(),
                            chh.level
                        ),
                    ));
                }
                if leaf_next {
                    return Ok(LeafPath {
                        parent: Some(g),
                        leaf: c,
                        leaf_off: off,
                        hint,
                        lower,
                        upper,
                    });
                }
                g = c;
                h = chh;
            }
        }
    }

    /// Latches the root exclusive.
    pub(crate) fn root_x<'a>(&self, bm: &'a BufferManager) -> Result<PageGuard<'a>> {
        bm.fix_pinned(&self.root_frame, self.root, Mode::Exclusive)
    }
}

/// The child index and swip offset `route` picks in an inner node.
pub(crate) fn pick(g: &mut PageGuard<'_>, h: &Header, route: Route<'_>) -> Result<(usize, usize)> {
    let j = match route {
        Route::Key(k) => node::lower_bound(g, h, k, true)?,
        Route::Before(k) => node::lower_bound(g, h, k, false)?,
        Route::Last => h.count,
    };
    Ok((j, node::child_swip(g, h, j)?))
}
