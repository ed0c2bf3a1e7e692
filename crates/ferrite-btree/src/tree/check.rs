//! Structural check: every node's keys sorted and inside the range its parent
//! gives it, levels decreasing by one, and the set of pages the tree uses (for
//! the page accounting of the crash checker: no page leaked or used twice).

use ferrite_buffer::{BufferManager, Hint, Mode};

use super::TreeInner;
use crate::node::{self, OFF_CHILD0};

/// What the check found.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TreeShape {
    pub height: usize,
    pub leaves: u64,
    pub inner: u64,
    pub entries: u64,
    /// Every page of the tree.
    pub pages: Vec<u64>,
}

impl TreeInner {
    /// Checks the whole tree (see module docs).
    pub(crate) fn check(&self, bm: &BufferManager) -> Result<TreeShape, String> {
        let mut shape = TreeShape::default();
        let _r = bm.reader();
        let level = {
            let mut g = bm
                .fix(self.root, Mode::Shared, Hint::Whole)
                .map_err(|e| e.to_string())?;
            node::header(&mut g).map_err(|e| e.to_string())?.level
        };
        shape.height = level as usize + 1;
        self.visit(bm, self.root, level, None, None, &mut shape)?;
        Ok(shape)
    }

    fn visit(
        &self,
        bm: &BufferManager,
        pid: u64,
        level: u8,
        lower: Option<&[u8]>,
        upper: Option<&[u8]>,
        shape: &mut TreeShape,
    ) -> Result<(), String> {
        let e = |e: ferrite_buffer::BufferError| format!("page {pid}: {e}");
        shape.pages.push(pid);
        if shape.pages.len() > 1 << 26 {
            return Err("the tree has a cycle".into());
        }
        let mut g = bm.fix(pid, Mode::Shared, Hint::Whole).map_err(e)?;
        let h = node::header(&mut g).map_err(e)?;
        if h.level != level {
            return Err(format!(
                "page {pid} has level {}, expected {level}",
                h.level
            ));
        }
        let ents = node::entries(&mut g, &h).map_err(e)?;
        for w in ents.windows(2) {
            if w[0].key >= w[1].key {
                return Err(format!(
                    "page {pid}: keys {:?} and {:?} out of order",
                    w[0].key, w[1].key
                ));
            }
        }
        if let (Some(l), Some(f)) = (lower, ents.first()) {
            if f.key.as_slice() < l {
                return Err(format!(
                    "page {pid}: key {:?} below its range start {l:?}",
                    f.key
                ));
            }
        }
        if let (Some(u), Some(last)) = (upper, ents.last()) {
            if last.key.as_slice() >= u {
                return Err(format!(
                    "page {pid}: key {:?} at or above its range end {u:?}",
                    last.key
                ));
            }
        }
        if level == 0 {
            shape.leaves += 1;
            shape.entries += ents.len() as u64;
            return Ok(());
        }
        shape.inner += 1;
        let child0 = g.child_pid(OFF_CHILD0).map_err(e)?;
        drop(g);
        type Child<'k> = (u64, Option<&'k [u8]>, Option<&'k [u8]>);
        let mut children: Vec<Child<'_>> = Vec::new();
        let mut prev = lower;
        let mut c = child0;
        for en in &ents {
            children.push((c, prev, Some(&en.key)));
            prev = Some(&en.key);
            c = u64::from_le_bytes(en.val[..8].try_into().expect("8"));
        }
        children.push((c, prev, upper));
        for (c, lo, hi) in children {
            if c == 0 {
                return Err(format!("page {pid} has page 0 (the meta page) as a child"));
            }
            self.visit(bm, c, level - 1, lo, hi, shape)?;
        }
        Ok(())
    }
}
