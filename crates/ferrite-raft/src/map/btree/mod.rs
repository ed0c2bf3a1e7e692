//! A persistent copy-on-write B+-tree of small fan-out (thesis §3.2, first
//! version; fan-out 4–7 was best there at ~10^5 keys, the default here is 6).
//!
//! Nodes are heap blocks of exactly their encoded size (format in
//! [`node`]); values longer than [`node::INLINE_MAX`] bytes live in value
//! blocks of their own. Root word 0 of the object ([`BTREE_TYPE`]) names the
//! root node (0: empty), root word 1 holds the format tag [`BTREE_FORMAT`],
//! root word 2 the fan-out.
//!
//! **Group commit by copy-on-write.** A node written since the last commit
//! (*dirty*) is modified in place; any other node is copied and the copy is
//! linked into a (dirty) parent, up to a new root. `commit` flushes every
//! dirty block, fences, stores the new root word and persists it; only then
//! are the replaced blocks freed. A crash therefore recovers the tree of the
//! last commit exactly, and the blocks of an unfinished group are unreachable
//! and free at the next open (reclamation is by reachability: opening traces
//! the tree).

pub mod node;

use std::collections::HashMap;
use std::sync::atomic::Ordering;

use ferrite_pm::{store_u64, Heap, Marker, ObjectId, PmError, Pool};

use self::node::{Node, Val, View, INLINE_MAX};
use ferrite_pm::tripwire::{armed, Tripwire};

use super::{MapStats, PmMap};
use crate::error::{Result, StoreError};

/// Type name of the tree object in the pool's directory.
pub const BTREE_TYPE: &str = "ferrite.raft.btree";
/// Format tag in root word 1 ("FRBTRE" + version 1).
pub const BTREE_FORMAT: u64 = 0x4652_4254_5245_0001;
/// Default fan-out.
pub const DEFAULT_FANOUT: usize = 6;

const R_ROOT: usize = 0;
const R_FORMAT: usize = 1;
const R_FANOUT: usize = 2;
/// Deeper than any tree of this fan-out in any pool: corrupt data stops here.
const MAX_DEPTH: usize = 64;

/// A split node's separator and new right sibling.
type Split = (Vec<u8>, u64);

/// Options of a B+-tree map.
#[derive(Debug, Clone)]
pub struct BTreeOptions {
    /// Maximum entries of a leaf and children of an inner node (4..=64).
    pub fanout: usize,
}

impl Default for BTreeOptions {
    fn default() -> Self {
        BTreeOptions {
            fanout: DEFAULT_FANOUT,
        }
    }
}

/// The persistent B+-tree. See the module documentation.
pub struct BTreeMap {
    pool: Pool,
    heap: Heap,
    id: ObjectId,
    name: String,
    published: bool,
    fanout: usize,
    root: u64,
    /// The root word as last persisted.
    durable_root: u64,
    /// Blocks written since the last commit, with the bytes to flush.
    dirty: HashMap<u64, u32>,
    /// Blocks replaced since the last commit (freed after it).
    retired: Vec<u64>,
    uncommitted: usize,
    entries: u64,
    pm_bytes: u64,
    /// Bytes of the heap blocks the tree holds (their size classes): what
    /// it takes of the pool.
    block_bytes: u64,
    live_value_bytes: u64,
    commits: u64,
    nodes_written: u64,
}

fn corrupt(name: &str, detail: String) -> PmError {
    PmError::CorruptObject {
        object: name.to_string(),
        detail,
    }
}

/// What a traversal of the persistent tree found.
#[derive(Default)]
struct TraceOut {
    entries: u64,
    bytes: u64,
    value_bytes: u64,
}

/// Walks the subtree at `off`, checking every block with `check` and the
/// key order against `[lo, hi)`; leaves must all be at depth `leaf_depth`.
#[allow(clippy::too_many_arguments)]
fn walk(
    pool: &Pool,
    name: &str,
    fanout: usize,
    off: u64,
    depth: usize,
    leaf_depth: &mut Option<usize>,
    lo: Option<&[u8]>,
    hi: Option<&[u8]>,
    visit: &mut dyn FnMut(u64, u64, bool) -> ferrite_pm::Result<()>,
    out: &mut TraceOut,
) -> ferrite_pm::Result<()> {
    let bad = |d: String| corrupt(name, format!("node {off:#x}: {d}"));
    if depth > MAX_DEPTH {
        return Err(bad("tree deeper than any valid one".into()));
    }
    visit(off, node::HDR as u64, false)?;
    let hdr = pool.slice(off, node::HDR)?.to_vec();
    let len = View::encoded_len(&hdr).map_err(bad)?;
    visit(off, len as u64, true)?;
    out.bytes += len as u64;
    let bytes = pool.slice(off, len)?.to_vec();
    let v = View::new(&bytes).map_err(bad)?;
    let max = fanout + 1;
    if v.n() > max {
        return Err(bad(format!("{} entries, fan-out {fanout}", v.n())));
    }
    let in_range = |k: &[u8]| lo.is_none_or(|l| k >= l) && hi.is_none_or(|h| k < h);
    if v.is_leaf() {
        match leaf_depth {
            Some(d) if *d != depth => {
                return Err(bad(format!("leaf at depth {depth}, others at {d}")))
            }
            _ => *leaf_depth = Some(depth),
        }
        let mut it = v.leaf_iter();
        let mut prev: Option<Vec<u8>> = None;
        while let Some((k, val)) = it.next_entry().map_err(bad)? {
            if !in_range(k) || prev.as_deref().is_some_and(|p| p >= k) {
                return Err(bad("keys out of order".into()));
            }
            prev = Some(k.to_vec());
            if let Val::Block(b, l) = val {
                visit(b, 8 + l as u64, false)?;
                let stored = pool.slice(b, 8)?.read_u64(0)?;
                if stored != l as u64 {
                    return Err(bad(format!(
                        "value block {b:#x} holds {stored} bytes, leaf says {l}"
                    )));
                }
                visit(b, 8 + l as u64, true)?;
                out.bytes += 8 + l as u64;
                out.value_bytes += 8 + l as u64;
            }
            out.entries += 1;
        }
        return Ok(());
    }
    let mut seps = Vec::new();
    let mut it = v.sep_iter();
    while let Some(s) = it.next_sep().map_err(bad)? {
        if !in_range(s) || seps.last().is_some_and(|p: &Vec<u8>| p.as_slice() >= s) {
            return Err(bad("separators out of order".into()));
        }
        seps.push(s.to_vec());
    }
    if seps.len() + 1 != v.n() {
        return Err(bad("separator count".into()));
    }
    for i in 0..v.n() {
        let c = v.child(i).map_err(bad)?;
        let clo = if i == 0 {
            lo
        } else {
            Some(seps[i - 1].as_slice())
        };
        let chi = if i + 1 == v.n() {
            hi
        } else {
            Some(seps[i].as_slice())
        };
        walk(
            pool,
            name,
            fanout,
            c,
            depth + 1,
            leaf_depth,
            clo,
            chi,
            visit,
            out,
        )?;
    }
    Ok(())
}

fn trace_tree(
    pool: &Pool,
    name: &str,
    fanout: usize,
    root: u64,
    m: Option<&mut Marker<'_>>,
) -> ferrite_pm::Result<TraceOut> {
    let mut out = TraceOut::default();
    if root == 0 {
        return Ok(out);
    }
    let mut leaf_depth = None;
    match m {
        Some(m) => {
            let mut visit = |off: u64, len: u64, mark: bool| -> ferrite_pm::Result<()> {
                m.check_block(off, len)?;
                if mark && !m.mark(off)? {
                    return Err(corrupt(name, format!("block {off:#x} is referenced twice")));
                }
                Ok(())
            };
            walk(
                pool,
                name,
                fanout,
                root,
                0,
                &mut leaf_depth,
                None,
                None,
                &mut visit,
                &mut out,
            )?;
        }
        None => {
            let mut seen = std::collections::HashSet::new();
            let mut visit = |off: u64, len: u64, mark: bool| -> ferrite_pm::Result<()> {
                if !pool.contains(off, len as usize) {
                    return Err(corrupt(
                        name,
                        format!("block {off:#x}+{len} outside the pool"),
                    ));
                }
                if mark && !seen.insert(off) {
                    return Err(corrupt(name, format!("block {off:#x} is referenced twice")));
                }
                Ok(())
            };
            walk(
                pool,
                name,
                fanout,
                root,
                0,
                &mut leaf_depth,
                None,
                None,
                &mut visit,
                &mut out,
            )?;
        }
    }
    Ok(out)
}

impl BTreeMap {
    /// Opens the tree named `name` in `pool`, creating it if absent; opening
    /// traces the whole tree (checking it) for the heap.
    pub fn open_or_create(pool: &Pool, name: &str, opts: &BTreeOptions) -> Result<BTreeMap> {
        let (id, _) = pool.open_or_create_object(name, BTREE_TYPE)?;
        let format = pool.root(id, R_FORMAT);
        if format == 0 {
            if !(4..=64).contains(&opts.fanout) {
                return Err(StoreError::Invalid(format!(
                    "B+-tree fan-out {} is outside 4..=64",
                    opts.fanout
                )));
            }
            pool.set_root(id, R_FANOUT, opts.fanout as u64)?;
            pool.set_root(id, R_FORMAT, BTREE_FORMAT)?;
        } else if format != BTREE_FORMAT {
            return Err(StoreError::corrupt(
                name,
                format!("B+-tree format tag {format:#x}, this build reads {BTREE_FORMAT:#x}"),
            ));
        }
        let fanout = pool.root(id, R_FANOUT) as usize;
        if !(4..=64).contains(&fanout) {
            return Err(StoreError::corrupt(name, format!("fan-out {fanout}")));
        }
        let root = pool.root(id, R_ROOT);
        let mut t = TraceOut::default();
        let (heap, held) = pool.open_heap(id, |m| {
            t = trace_tree(pool, name, fanout, root, Some(m))?;
            Ok(())
        })?;
        Ok(BTreeMap {
            pool: pool.clone(),
            heap,
            id,
            name: name.to_string(),
            published: true,
            fanout,
            root,
            durable_root: root,
            dirty: HashMap::new(),
            retired: Vec::new(),
            uncommitted: 0,
            entries: t.entries,
            pm_bytes: t.bytes,
            block_bytes: held.live_bytes,
            live_value_bytes: t.value_bytes,
            commits: 0,
            nodes_written: 0,
        })
    }

    fn min_fill(&self) -> usize {
        (self.fanout / 2).max(2)
    }

    /// The encoded node at `off` as a byte slice of the pool.
    fn bytes(&self, off: u64) -> Result<&[u8]> {
        let len = (self.pool.slice(off, node::HDR)?.read_u64(0)? >> 32) as usize;
        if len < node::HDR {
            return Err(self.bad(format!("node {off:#x} claims {len} bytes")));
        }
        self.pool.slice(off, len)?; // bounds check
                                    // SAFETY: `[off, off+len)` is inside the pool (checked just above) and
                                    // is one of this tree's blocks (reached from the root, traced at open);
                                    // writers hold `&mut self`, so nothing modifies it while `&self` lends it.
        Ok(unsafe { std::slice::from_raw_parts(self.pool.at(off, len), len) })
    }

    fn view(&self, off: u64) -> Result<View<'_>> {
        View::new(self.bytes(off)?)
            .map_err(|d| StoreError::corrupt(&self.name, format!("node {off:#x}: {d}")))
    }

    fn load(&self, off: u64) -> Result<Node> {
        Node::decode(self.bytes(off)?)
            .map_err(|d| StoreError::corrupt(&self.name, format!("node {off:#x}: {d}")))
    }

    fn value(&self, v: &Val) -> Result<Vec<u8>> {
        match v {
            Val::Inline(b) => Ok(b.clone()),
            Val::Block(off, len) => Ok(self.pool.slice(off + 8, *len as usize)?.to_vec()),
        }
    }

    fn bad(&self, d: String) -> StoreError {
        StoreError::corrupt(&self.name, d)
    }

    /// The leaf that holds `key` (offset), or None for an empty tree.
    fn find_leaf(&self, key: &[u8]) -> Result<Option<u64>> {
        if self.root == 0 {
            return Ok(None);
        }
        let mut off = self.root;
        for _ in 0..MAX_DEPTH {
            let v = self.view(off)?;
            if v.is_leaf() {
                return Ok(Some(off));
            }
            off = v.route(key).map_err(|d| self.bad(d))?.1;
        }
        Err(self.bad("tree deeper than any valid one".into()))
    }

    fn alloc_block(&mut self, bytes: &[u8]) -> Result<u64> {
        let off = self.heap.alloc(bytes.len())?;
        self.pool.slice(off, bytes.len())?.write(0, bytes)?;
        self.dirty.insert(off, bytes.len() as u32);
        self.pm_bytes += bytes.len() as u64;
        self.block_bytes += self.heap.block_size(off).unwrap_or(bytes.len()) as u64;
        Ok(off)
    }

    fn retire(&mut self, off: u64, len: u64) -> Result<()> {
        self.pm_bytes = self.pm_bytes.saturating_sub(len);
        let block = self.heap.block_size(off).unwrap_or(len as usize) as u64;
        self.block_bytes = self.block_bytes.saturating_sub(block);
        if self.dirty.remove(&off).is_some() {
            // Never published: nothing durable points at it.
            self.heap.free(off)?;
        } else {
            self.retired.push(off);
        }
        Ok(())
    }

    fn retire_val(&mut self, v: &Val) -> Result<()> {
        if let Val::Block(off, len) = v {
            self.live_value_bytes = self.live_value_bytes.saturating_sub(8 + *len as u64);
            self.retire(*off, 8 + *len as u64)?;
        }
        Ok(())
    }

    /// Writes `n` in place of the node at `old` (in place when `old` is
    /// dirty and the encoding fits its block) and returns its offset.
    fn write_node(&mut self, old: Option<u64>, n: &Node) -> Result<u64> {
        let enc = n.encode();
        self.nodes_written += 1;
        if let Some(o) = old {
            if self.dirty.contains_key(&o)
                && self.heap.block_size(o).is_some_and(|s| s >= enc.len())
            {
                let before = self.dirty[&o] as u64;
                self.pool.slice(o, enc.len())?.write(0, &enc)?;
                self.dirty.insert(o, enc.len() as u32);
                self.pm_bytes = self.pm_bytes + enc.len() as u64 - before;
                return Ok(o);
            }
            let len = View::encoded_len(self.bytes(o)?).unwrap_or(0) as u64;
            self.retire(o, len)?;
        }
        self.alloc_block(&enc)
    }

    fn make_val(&mut self, value: &[u8]) -> Result<Val> {
        if value.len() <= INLINE_MAX {
            return Ok(Val::Inline(value.to_vec()));
        }
        if value.len() > (u32::MAX >> 1) as usize {
            return Err(StoreError::Invalid(format!(
                "value of {} bytes",
                value.len()
            )));
        }
        let mut b = Vec::with_capacity(8 + value.len());
        b.extend_from_slice(&(value.len() as u64).to_le_bytes());
        b.extend_from_slice(value);
        let off = self.alloc_block(&b)?;
        self.live_value_bytes += b.len() as u64;
        Ok(Val::Block(off, value.len() as u32))
    }

    /// Inserts into the subtree at `off`; returns its new offset and, when it
    /// split, the separator and the new right sibling.
    fn insert_rec(
        &mut self,
        off: u64,
        key: &[u8],
        val: Val,
        depth: usize,
    ) -> Result<(u64, Option<Split>)> {
        if depth > MAX_DEPTH {
            return Err(self.bad("tree deeper than any valid one".into()));
        }
        let mut n = self.load(off)?;
        match &mut n {
            Node::Leaf(entries) => {
                match entries.binary_search_by(|e| e.0.as_slice().cmp(key)) {
                    Ok(i) => {
                        let old = std::mem::replace(&mut entries[i].1, val);
                        self.retire_val(&old)?;
                    }
                    Err(i) => {
                        entries.insert(i, (key.to_vec(), val));
                        self.entries += 1;
                    }
                }
                if entries.len() <= self.fanout {
                    return Ok((self.write_node(Some(off), &n)?, None));
                }
                let right = entries.split_off(entries.len().div_ceil(2));
                let sep = right[0].0.clone();
                let r = self.write_node(None, &Node::Leaf(right))?;
                Ok((self.write_node(Some(off), &n)?, Some((sep, r))))
            }
            Node::Inner { children, seps } => {
                let i = seps.partition_point(|s| s.as_slice() <= key);
                let (c, split) = self.insert_rec(children[i], key, val, depth + 1)?;
                if c == children[i] && split.is_none() {
                    return Ok((off, None));
                }
                children[i] = c;
                if let Some((s, r)) = split {
                    seps.insert(i, s);
                    children.insert(i + 1, r);
                }
                if children.len() <= self.fanout {
                    return Ok((self.write_node(Some(off), &n)?, None));
                }
                let keep = children.len().div_ceil(2);
                let rc = children.split_off(keep);
                let mut rs = seps.split_off(keep - 1);
                let up = rs.remove(0);
                let r = self.write_node(
                    None,
                    &Node::Inner {
                        children: rc,
                        seps: rs,
                    },
                )?;
                Ok((self.write_node(Some(off), &n)?, Some((up, r))))
            }
        }
    }

    /// Removes `key` from the subtree at `off`; returns None when absent, else
    /// the subtree's new offset and its entry (or child) count.
    fn delete_rec(&mut self, off: u64, key: &[u8], depth: usize) -> Result<Option<(u64, usize)>> {
        if depth > MAX_DEPTH {
            return Err(self.bad("tree deeper than any valid one".into()));
        }
        let mut n = self.load(off)?;
        match &mut n {
            Node::Leaf(entries) => {
                let Ok(i) = entries.binary_search_by(|e| e.0.as_slice().cmp(key)) else {
                    return Ok(None);
                };
                let (_, old) = entries.remove(i);
                self.retire_val(&old)?;
                self.entries -= 1;
                let len = entries.len();
                Ok(Some((self.write_node(Some(off), &n)?, len)))
            }
            Node::Inner { children, seps } => {
                let i = seps.partition_point(|s| s.as_slice() <= key);
                let Some((c, clen)) = self.delete_rec(children[i], key, depth + 1)? else {
                    return Ok(None);
                };
                if c == children[i] && clen >= self.min_fill() {
                    return Ok(Some((off, children.len())));
                }
                children[i] = c;
                if clen < self.min_fill() && children.len() > 1 {
                    self.rebalance(children, seps, i)?;
                }
                let len = children.len();
                Ok(Some((self.write_node(Some(off), &n)?, len)))
            }
        }
    }

    /// Child `i` underflowed: borrow from a sibling or merge with it.
    fn rebalance(
        &mut self,
        children: &mut Vec<u64>,
        seps: &mut Vec<Vec<u8>>,
        i: usize,
    ) -> Result<()> {
        let (l, r) = if i > 0 { (i - 1, i) } else { (i, i + 1) };
        let mut left = self.load(children[l])?;
        let mut right = self.load(children[r])?;
        let total = left.len() + right.len();
        match (&mut left, &mut right) {
            (Node::Leaf(le), Node::Leaf(re)) => {
                if total <= self.fanout {
                    le.append(re);
                    let lo = self.write_node(Some(children[l]), &left)?;
                    let rlen = View::encoded_len(self.bytes(children[r])?).unwrap_or(0) as u64;
                    self.retire(children[r], rlen)?;
                    children[l] = lo;
                    children.remove(r);
                    seps.remove(l);
                    return Ok(());
                }
                if le.len() > re.len() {
                    let e = le.pop().expect("left has entries");
                    re.insert(0, e);
                } else {
                    let e = re.remove(0);
                    le.push(e);
                }
                seps[l] = re[0].0.clone();
            }
            (
                Node::Inner {
                    children: lc,
                    seps: ls,
                },
                Node::Inner {
                    children: rc,
                    seps: rs,
                },
            ) => {
                if total <= self.fanout {
                    ls.push(seps.remove(l));
                    ls.append(rs);
                    lc.append(rc);
                    let lo = self.write_node(Some(children[l]), &left)?;
                    let rlen = View::encoded_len(self.bytes(children[r])?).unwrap_or(0) as u64;
                    self.retire(children[r], rlen)?;
                    children[l] = lo;
                    children.remove(r);
                    return Ok(());
                }
                if lc.len() > rc.len() {
                    let c = lc.pop().expect("left has children");
                    let s = ls.pop().expect("left has separators");
                    rc.insert(0, c);
                    rs.insert(0, std::mem::replace(&mut seps[l], s));
                } else {
                    let c = rc.remove(0);
                    let s = rs.remove(0);
                    lc.push(c);
                    ls.push(std::mem::replace(&mut seps[l], s));
                }
            }
            _ => return Err(self.bad("siblings at different depths".into())),
        }
        children[l] = self.write_node(Some(children[l]), &left)?;
        children[r] = self.write_node(Some(children[r]), &right)?;
        Ok(())
    }

    /// Frees every block of the tree at `root` (after it was unlinked durably).
    fn free_tree(&self, root: u64) -> Result<()> {
        if root == 0 {
            return Ok(());
        }
        let mut stack = vec![(root, 0usize)];
        while let Some((off, depth)) = stack.pop() {
            if depth > MAX_DEPTH {
                return Err(self.bad("tree deeper than any valid one".into()));
            }
            match self.load(off)? {
                Node::Leaf(entries) => {
                    for (_, v) in entries {
                        if let Val::Block(b, _) = v {
                            self.heap.free(b)?;
                        }
                    }
                }
                Node::Inner { children, .. } => {
                    stack.extend(children.into_iter().map(|c| (c, depth + 1)));
                }
            }
            self.heap.free(off)?;
        }
        Ok(())
    }

    fn publish(&mut self) -> Result<()> {
        let w = self.pool.root_word(self.id, R_ROOT);
        if armed(Tripwire::RaftBtreePublishBeforeFence) {
            store_u64(w, self.root, Ordering::Release);
            self.pool.flush(w as *const _ as *const u8, 8);
        }
        if !armed(Tripwire::RaftBtreeSkipFlush) {
            for (&off, &len) in &self.dirty {
                self.pool.slice(off, len as usize)?.flush();
            }
        }
        self.pool.fence()?;
        store_u64(w, self.root, Ordering::Release);
        self.pool.persist(w as *const _ as *const u8, 8)?;
        self.durable_root = self.root;
        self.dirty.clear();
        for off in std::mem::take(&mut self.retired) {
            self.heap.free(off)?;
        }
        self.uncommitted = 0;
        self.commits += 1;
        Ok(())
    }
}

impl PmMap for BTreeMap {
    fn kind(&self) -> &'static str {
        "btree"
    }

    fn get(&self, key: &[u8]) -> Result<Option<Vec<u8>>> {
        let Some(leaf) = self.find_leaf(key)? else {
            return Ok(None);
        };
        let v = self.view(leaf)?;
        let mut it = v.leaf_iter();
        while let Some((k, val)) = it.next_entry().map_err(|d| self.bad(d))? {
            match k.cmp(key) {
                std::cmp::Ordering::Less => continue,
                std::cmp::Ordering::Equal => return Ok(Some(self.value(&val)?)),
                std::cmp::Ordering::Greater => break,
            }
        }
        Ok(None)
    }

    fn floor(&self, lower: &[u8], upper: &[u8]) -> Result<Option<(Vec<u8>, Vec<u8>)>> {
        if lower > upper || self.root == 0 {
            return Ok(None);
        }
        // Descend towards `upper`, remembering left siblings to fall back on.
        let mut path: Vec<(u64, usize)> = Vec::new();
        let mut off = self.root;
        loop {
            if path.len() > MAX_DEPTH {
                return Err(self.bad("tree deeper than any valid one".into()));
            }
            let v = self.view(off)?;
            if v.is_leaf() {
                break;
            }
            let (i, c) = v.route(upper).map_err(|d| self.bad(d))?;
            path.push((off, i));
            off = c;
        }
        loop {
            // The greatest entry <= upper in this leaf.
            let v = self.view(off)?;
            let mut it = v.leaf_iter();
            let mut best: Option<(&[u8], Val)> = None;
            while let Some((k, val)) = it.next_entry().map_err(|d| self.bad(d))? {
                if k > upper {
                    break;
                }
                best = Some((k, val));
            }
            if let Some((k, val)) = best {
                if k < lower {
                    return Ok(None);
                }
                return Ok(Some((k.to_vec(), self.value(&val)?)));
            }
            // Empty below `upper` here: the previous leaf (rightmost of the
            // nearest left subtree).
            loop {
                let Some((p, i)) = path.pop() else {
                    return Ok(None);
                };
                if i > 0 {
                    let mut c = self.view(p)?.child(i - 1).map_err(|d| self.bad(d))?;
                    path.push((p, i - 1));
                    loop {
                        let v = self.view(c)?;
                        if v.is_leaf() {
                            break;
                        }
                        let last = v.n() - 1;
                        path.push((c, last));
                        c = v.child(last).map_err(|d| self.bad(d))?;
                    }
                    off = c;
                    break;
                }
            }
        }
    }

    fn range(&self, from: &[u8], to: &[u8], limit: usize) -> Result<Vec<(Vec<u8>, Vec<u8>)>> {
        let mut out = Vec::new();
        if from >= to || self.root == 0 || limit == 0 {
            return Ok(out);
        }
        // Depth-first from the leaf holding `from`, via a path stack.
        let mut path: Vec<(u64, usize)> = Vec::new();
        let mut off = self.root;
        loop {
            let v = self.view(off)?;
            if v.is_leaf() {
                break;
            }
            let (i, c) = v.route(from).map_err(|d| self.bad(d))?;
            path.push((off, i));
            off = c;
        }
        loop {
            let v = self.view(off)?;
            let mut it = v.leaf_iter();
            while let Some((k, val)) = it.next_entry().map_err(|d| self.bad(d))? {
                if k < from {
                    continue;
                }
                if k >= to || out.len() >= limit {
                    return Ok(out);
                }
                out.push((k.to_vec(), self.value(&val)?));
            }
            // Next leaf: climb until a parent has a next child, then leftmost.
            loop {
                let Some((p, i)) = path.pop() else {
                    return Ok(out);
                };
                let pv = self.view(p)?;
                if i + 1 < pv.n() {
                    path.push((p, i + 1));
                    let mut c = pv.child(i + 1).map_err(|d| self.bad(d))?;
                    loop {
                        let v = self.view(c)?;
                        if v.is_leaf() {
                            break;
                        }
                        path.push((c, 0));
                        c = v.child(0).map_err(|d| self.bad(d))?;
                    }
                    off = c;
                    break;
                }
            }
        }
    }

    fn put(&mut self, key: &[u8], value: &[u8]) -> Result<()> {
        let val = self.make_val(value)?;
        self.uncommitted += 1;
        if self.root == 0 {
            self.entries += 1;
            self.root = self.write_node(None, &Node::Leaf(vec![(key.to_vec(), val)]))?;
            return Ok(());
        }
        let (r, split) = self.insert_rec(self.root, key, val, 0)?;
        self.root = match split {
            None => r,
            Some((sep, right)) => self.write_node(
                None,
                &Node::Inner {
                    children: vec![r, right],
                    seps: vec![sep],
                },
            )?,
        };
        Ok(())
    }

    fn delete(&mut self, key: &[u8]) -> Result<bool> {
        if self.root == 0 {
            return Ok(false);
        }
        let Some((r, len)) = self.delete_rec(self.root, key, 0)? else {
            return Ok(false);
        };
        self.uncommitted += 1;
        self.root = r;
        // Shrink the root: an inner root with one child, an empty leaf root.
        let v = self.view(r)?;
        if !v.is_leaf() && len == 1 {
            let child = v.child(0).map_err(|d| self.bad(d))?;
            let rl = View::encoded_len(self.bytes(r)?).unwrap_or(0) as u64;
            self.retire(r, rl)?;
            self.root = child;
        } else if v.is_leaf() && len == 0 {
            let rl = View::encoded_len(self.bytes(r)?).unwrap_or(0) as u64;
            self.retire(r, rl)?;
            self.root = 0;
        }
        Ok(true)
    }

    fn commit(&mut self) -> Result<()> {
        if !self.published
            || (self.dirty.is_empty() && self.root == self.durable_root && self.retired.is_empty())
        {
            self.uncommitted = 0;
            return Ok(());
        }
        self.publish()
    }

    fn uncommitted(&self) -> usize {
        self.uncommitted
    }

    fn len(&self) -> usize {
        self.entries as usize
    }

    fn staging(&self) -> Result<BTreeMap> {
        Ok(BTreeMap {
            pool: self.pool.clone(),
            heap: self.heap.clone(),
            id: self.id,
            name: self.name.clone(),
            published: false,
            fanout: self.fanout,
            root: 0,
            durable_root: 0,
            dirty: HashMap::new(),
            retired: Vec::new(),
            uncommitted: 0,
            entries: 0,
            pm_bytes: 0,
            block_bytes: 0,
            live_value_bytes: 0,
            commits: 0,
            nodes_written: 0,
        })
    }

    fn install(&mut self, mut staged: BTreeMap) -> Result<()> {
        if staged.id != self.id || staged.published {
            return Err(StoreError::Invalid(
                "install takes a staging map of the same tree".into(),
            ));
        }
        self.commit()?;
        let old = self.root;
        staged.published = true;
        staged.durable_root = old;
        staged.commits = self.commits;
        staged.nodes_written += self.nodes_written;
        // Publishing the staged root flushes all its (dirty) blocks.
        staged.publish()?;
        self.free_tree(old)?;
        *self = staged;
        Ok(())
    }

    fn discard(staged: BTreeMap) -> Result<()> {
        // Every block of a staging tree is dirty (never published).
        for &off in staged.dirty.keys() {
            staged.heap.free(off)?;
        }
        Ok(())
    }

    fn pool(&self) -> &Pool {
        &self.pool
    }

    fn space_used(&self) -> u64 {
        self.block_bytes
    }

    fn stats(&self) -> MapStats {
        MapStats {
            entries: self.entries,
            commits: self.commits,
            pm_bytes: self.pm_bytes,
            live_bytes: self.pm_bytes,
            maintenance: self.nodes_written,
        }
    }

    fn check(&self) -> std::result::Result<u64, String> {
        let t = trace_tree(&self.pool, &self.name, self.fanout, self.root, None)
            .map_err(|e| e.to_string())?;
        if t.entries != self.entries {
            return Err(format!(
                "tree holds {} entries, accounting says {}",
                t.entries, self.entries
            ));
        }
        Ok(t.entries)
    }
}
