//! DRAM inner nodes: a B+-tree over the PM leaves, updated by path copying.
//!
//! Readers traverse an immutable snapshot reached from one atomic root pointer
//! while pinned in an epoch (`crossbeam-epoch`); they never write shared memory
//! and never retry because of another traversal. Writers (leaf splits and leaf
//! removals, serialised by the index's structure mutex) copy the nodes on the
//! root-to-leaf path, publish the new root, and retire the replaced nodes
//! *shallowly* through the epoch: children that are not on the path are shared
//! with the new version and stay owned by it.

use std::cmp::Ordering;
use std::sync::Arc;

use crate::arena::Slab;

/// Maximum children per node.
pub const FANOUT: usize = 64;
/// Children per node when bulk-loading on open.
const FILL: usize = 48;

/// A key prepared for comparisons: the first 8 bytes as a big-endian integer
/// (zero-padded), the length, and the bytes.
#[derive(Clone, Copy)]
pub struct SearchKey<'a> {
    pub prefix: u64,
    pub len: u32,
    pub bytes: &'a [u8],
}

impl<'a> SearchKey<'a> {
    #[inline]
    pub fn new(bytes: &'a [u8]) -> SearchKey<'a> {
        SearchKey {
            prefix: prefix_of(bytes),
            len: bytes.len() as u32,
            bytes,
        }
    }
}

/// First 8 bytes of `key` as a big-endian integer, zero-padded: comparing
/// prefixes, then lengths (or the remaining bytes when both keys are longer
/// than 8 bytes) is byte-string order.
#[inline]
pub fn prefix_of(key: &[u8]) -> u64 {
    if let Ok(b) = <[u8; 8]>::try_from(key) {
        return u64::from_be_bytes(b);
    }
    let mut b = [0u8; 8];
    let n = key.len().min(8);
    b[..n].copy_from_slice(&key[..n]);
    u64::from_be_bytes(b)
}

/// Byte-string order of two keys given as (prefix, length, bytes); `a_bytes`
/// and `b_bytes` are only read when both keys are longer than 8 bytes.
#[inline]
pub fn cmp_parts(ap: u64, al: u32, a: &[u8], bp: u64, bl: u32, b: &[u8]) -> Ordering {
    match ap.cmp(&bp) {
        Ordering::Equal if al > 8 && bl > 8 => a[8..].cmp(&b[8..]),
        Ordering::Equal => al.cmp(&bl),
        o => o,
    }
}

/// A separator: the low key of the child to its right.
#[derive(Clone)]
pub struct Sep {
    pub prefix: u64,
    pub len: u32,
    /// The whole key, kept only when it is longer than 8 bytes.
    pub full: Option<Arc<[u8]>>,
}

impl Sep {
    pub fn from_key(key: &[u8]) -> Sep {
        Sep {
            prefix: prefix_of(key),
            len: key.len() as u32,
            full: (key.len() > 8).then(|| Arc::from(key)),
        }
    }

    /// The key bytes.
    pub fn to_vec(&self) -> Vec<u8> {
        match &self.full {
            Some(f) => f.to_vec(),
            None => self.prefix.to_be_bytes()[..self.len as usize].to_vec(),
        }
    }
}

/// Key slots per node (one more than the separators a full node keeps, so an
/// insert can overflow by one before the node splits).
const KEYS: usize = FANOUT;

/// One node, in one allocation. Separator `i` and the child to its right sit
/// side by side (`pairs[i]`), so the pass that counts separators below a key
/// also brings the child pointer into the cache: one dependent miss per level.
/// Level 0 children are PM leaf offsets, higher levels' are node pointers.
#[derive(Clone)]
#[repr(C)]
pub struct Node {
    n: usize,
    level: u8,
    /// Leftmost child.
    kid0: usize,
    /// (separator prefix, child right of the separator).
    pairs: [(u64, usize); KEYS],
    lens: [u32; KEYS],
    /// Empty while no separator of the node is longer than 8 bytes.
    fulls: Vec<Option<Arc<[u8]>>>,
}

impl Node {
    fn empty(level: u8) -> Node {
        Node {
            n: 0,
            level,
            kid0: 0,
            pairs: [(0, 0); KEYS],
            lens: [0; KEYS],
            fulls: Vec::new(),
        }
    }

    fn nchildren(&self) -> usize {
        self.n + 1
    }

    #[inline]
    fn full(&self, i: usize) -> &[u8] {
        match self.fulls.get(i) {
            Some(Some(f)) => f,
            _ => &[],
        }
    }

    /// Child `i` (0..=n).
    #[inline]
    fn child(&self, i: usize) -> usize {
        if i == 0 {
            self.kid0
        } else {
            self.pairs[i - 1].1
        }
    }

    #[inline]
    fn set_child(&mut self, i: usize, c: usize) {
        if i == 0 {
            self.kid0 = c;
        } else {
            self.pairs[i - 1].1 = c;
        }
    }

    #[inline]
    fn kid(&self, i: usize) -> *mut Node {
        self.child(i) as *mut Node
    }

    /// Order of separator `i` relative to `k`.
    #[inline]
    fn cmp_sep(&self, i: usize, k: &SearchKey<'_>) -> Ordering {
        let (p, l) = (self.pairs[i].0, self.lens[i]);
        if p != k.prefix {
            return p.cmp(&k.prefix);
        }
        cmp_parts(p, l, self.full(i), k.prefix, k.len, k.bytes)
    }

    /// Number of separators <= k (`le`) or < k (`!le`). Counts prefixes below
    /// the key's with a branch-free pass over the node (independent loads, so
    /// the cache misses of a cold node overlap), then resolves equal prefixes
    /// with full comparisons.
    #[inline]
    fn bound(&self, k: &SearchKey<'_>, le: bool) -> usize {
        let n = self.n;
        let kp = k.prefix;
        let mut i = self.pairs[..n]
            .iter()
            .map(|&(p, _)| (p < kp) as usize)
            .sum::<usize>();
        while i < n && self.pairs[i].0 == kp {
            let o = self.cmp_sep(i, k);
            let right = if le {
                o != Ordering::Greater
            } else {
                o == Ordering::Less
            };
            if !right {
                break;
            }
            i += 1;
        }
        i
    }

    fn sep(&self, i: usize) -> Sep {
        Sep {
            prefix: self.pairs[i].0,
            len: self.lens[i],
            full: self.fulls.get(i).cloned().flatten(),
        }
    }

    /// Inserts separator `s` at `i` and child `kid` right of it.
    fn insert_at(&mut self, i: usize, s: Sep, kid: usize) {
        assert!(self.n < KEYS, "node overflow");
        let keep = !self.fulls.is_empty() || s.full.is_some();
        if keep && self.fulls.is_empty() {
            self.fulls = vec![None; self.n];
        }
        let n = self.n;
        self.pairs.copy_within(i..n, i + 1);
        self.lens.copy_within(i..n, i + 1);
        self.pairs[i] = (s.prefix, kid);
        self.lens[i] = s.len;
        if keep {
            self.fulls.insert(i, s.full);
        }
        self.n += 1;
    }

    /// Removes separator `i` and the child right of it.
    fn remove_at(&mut self, i: usize) {
        let n = self.n;
        self.pairs.copy_within(i + 1..n, i);
        self.lens.copy_within(i + 1..n, i);
        if !self.fulls.is_empty() {
            self.fulls.remove(i);
        }
        self.n -= 1;
    }

    /// Splits an overfull node: returns the separator moving up and the right half.
    fn split(&mut self) -> (Sep, Node) {
        let mid = self.n / 2;
        let up = self.sep(mid);
        let mut right = Node::empty(self.level);
        let rn = self.n - mid - 1;
        right.kid0 = self.pairs[mid].1;
        right.pairs[..rn].copy_from_slice(&self.pairs[mid + 1..self.n]);
        right.lens[..rn].copy_from_slice(&self.lens[mid + 1..self.n]);
        right.n = rn;
        if !self.fulls.is_empty() {
            right.fulls = self.fulls.split_off(mid + 1);
            self.fulls.truncate(mid);
        }
        self.n = mid;
        (up, right)
    }

    fn bytes(&self) -> u64 {
        let mut b = std::mem::size_of::<Node>() + self.fulls.capacity() * 16;
        for f in self.fulls.iter().flatten() {
            b += f.len() + 16;
        }
        b as u64
    }

    fn children(&self) -> impl Iterator<Item = usize> + '_ {
        (0..=self.n).map(|i| self.child(i))
    }
}

/// Node memory: huge-page-backed slots (see [`crate::arena`]).
static NODES: Slab = Slab::new(std::mem::size_of::<Node>());
const _: () = assert!(std::mem::align_of::<Node>() <= 64);

/// Moves `n` into a slot of [`NODES`].
fn new_node(n: Node) -> *mut Node {
    let p = NODES.alloc().cast::<Node>();
    // SAFETY: the slot is fresh, large enough and 64-byte aligned (>= Node's).
    unsafe { p.write(n) };
    p
}

/// Drops a node from [`new_node`] and returns its slot.
///
/// # Safety
/// `p` came from [`new_node`] and nobody can reach it any more.
unsafe fn drop_node(p: *mut Node) {
    // SAFETY: forwarded contract: p holds a live Node we own.
    unsafe { std::ptr::drop_in_place(p) };
    NODES.free(p.cast());
}

/// Where a key routes: the leaf, the low key of its range (None = -inf), and
/// the level-0 node holding it with its child index (for prefetching the leaves
/// that follow).
pub struct Route<'t> {
    pub leaf: u64,
    pub low: Option<(&'t Node, usize)>,
    pub bottom: &'t Node,
    pub idx: usize,
}

impl Node {
    /// Leaf `i` of a level-0 node, if it exists.
    #[inline]
    pub fn leaf_at(&self, i: usize) -> Option<u64> {
        (self.level == 0 && i <= self.n).then(|| self.child(i) as u64)
    }
}

impl Route<'_> {
    pub fn low_sep(&self) -> Option<Sep> {
        self.low.map(|(n, i)| n.sep(i))
    }
}

/// Descends from `root` to the leaf whose range holds `k` (`le`), or the leaf
/// holding the largest keys below `k` (`!le`).
///
/// # Safety
/// `root` must be a live tree root, protected by the caller's epoch guard.
#[inline]
pub unsafe fn route<'t>(root: *const Node, k: &SearchKey<'_>, le: bool) -> Route<'t> {
    // SAFETY: the caller keeps the tree alive (epoch pin); nodes are immutable.
    let mut n: &'t Node = unsafe { &*root };
    let mut low = None;
    loop {
        let i = n.bound(k, le);
        if i > 0 {
            low = Some((n, i - 1));
        }
        if n.level == 0 {
            return Route {
                leaf: n.child(i) as u64,
                low,
                bottom: n,
                idx: i,
            };
        }
        // SAFETY: children of a live node are live (same snapshot).
        n = unsafe { &*n.kid(i) };
    }
}

/// Bulk-builds a tree over `leaves` (in key order; the first has no low key).
pub fn build(leaves: Vec<(Option<Sep>, u64)>) -> *mut Node {
    let mut level: Vec<(Option<Sep>, Node)> = Vec::new();
    let mut cur: Option<(Option<Sep>, Node)> = None;
    let mut first = true;
    for (sep, off) in leaves {
        match &mut cur {
            Some((_, n)) if n.nchildren() < FILL => {
                let n_ = n.n;
                n.insert_at(
                    n_,
                    sep.expect("only the first leaf has no low key"),
                    off as usize,
                );
            }
            _ => {
                if let Some(c) = cur.take() {
                    level.push(c);
                }
                let mut n = Node::empty(0);
                n.kid0 = off as usize;
                cur = Some((if first { None } else { sep }, n));
            }
        }
        first = false;
    }
    if let Some(c) = cur.take() {
        level.push(c);
    }
    if level.is_empty() {
        level.push((None, Node::empty(0)));
    }
    let mut lvl = 1u8;
    while level.len() > 1 {
        let mut up: Vec<(Option<Sep>, Node)> = Vec::new();
        let mut cur: Option<(Option<Sep>, Node)> = None;
        for (sep, node) in level {
            let p = new_node(node) as usize;
            match &mut cur {
                Some((_, n)) if n.nchildren() < FILL => {
                    let n_ = n.n;
                    n.insert_at(n_, sep.expect("only the first node has no low key"), p);
                }
                _ => {
                    if let Some(c) = cur.take() {
                        up.push(c);
                    }
                    let mut n = Node::empty(lvl);
                    n.kid0 = p;
                    cur = Some((sep, n));
                }
            }
        }
        if let Some(c) = cur.take() {
            up.push(c);
        }
        level = up;
        lvl += 1;
    }
    let (_, root) = level.pop().expect("one root");
    new_node(root)
}

/// Result of a path-copying update: the new root and the replaced nodes, which
/// the caller retires (shallowly) after publishing the new root.
pub struct Update {
    pub root: *mut Node,
    pub retired: Vec<*mut Node>,
}

/// Adds leaf `leaf` with low key `sep` (which is not yet a separator).
///
/// # Safety
/// `root` is the current root and the caller holds the structure mutex.
pub unsafe fn insert(root: *mut Node, sep: Sep, leaf: u64) -> Update {
    let mut retired = Vec::new();
    // SAFETY: forwarded contract.
    let (new, split) = unsafe { insert_rec(root, &sep, leaf, &mut retired) };
    let root = match split {
        None => new_node(*new),
        Some((up, right)) => {
            let level = new.level + 1;
            let mut r = Node::empty(level);
            r.kid0 = new_node(*new) as usize;
            r.insert_at(0, up, new_node(*right) as usize);
            new_node(r)
        }
    };
    Update { root, retired }
}

type Split = Option<(Sep, Box<Node>)>;

unsafe fn insert_rec(
    node: *mut Node,
    sep: &Sep,
    leaf: u64,
    retired: &mut Vec<*mut Node>,
) -> (Box<Node>, Split) {
    retired.push(node);
    // SAFETY: node is live (caller's contract) and immutable.
    let n = unsafe { &*node };
    let key_bytes;
    let k = SearchKey {
        prefix: sep.prefix,
        len: sep.len,
        bytes: match &sep.full {
            Some(f) => f,
            None => {
                key_bytes = sep.to_vec();
                &key_bytes
            }
        },
    };
    let i = n.bound(&k, true);
    let mut c = Box::new(n.clone());
    if n.level == 0 {
        c.insert_at(i, sep.clone(), leaf as usize);
    } else {
        // SAFETY: children of a live node are live.
        let (child, split) = unsafe { insert_rec(n.kid(i), sep, leaf, retired) };
        c.set_child(i, new_node(*child) as usize);
        if let Some((up, right)) = split {
            c.insert_at(i, up, new_node(*right) as usize);
        }
    }
    if c.nchildren() > FANOUT {
        let (up, right) = c.split();
        (c, Some((up, Box::new(right))))
    } else {
        (c, None)
    }
}

/// Removes leaf `leaf`, whose low key is `low`, when its separator sits in its
/// level-0 node (it is not that node's first child). Returns None otherwise.
///
/// # Safety
/// As for [`insert`].
pub unsafe fn remove(root: *mut Node, low: &[u8], leaf: u64) -> Option<Update> {
    let k = SearchKey::new(low);
    let mut path = Vec::new();
    let mut node = root;
    loop {
        // SAFETY: live nodes (caller's contract).
        let n = unsafe { &*node };
        let i = n.bound(&k, true);
        path.push((node, i));
        if n.level == 0 {
            if i == 0 || n.child(i) as u64 != leaf || n.cmp_sep(i - 1, &k) != Ordering::Equal {
                return None;
            }
            break;
        }
        node = n.kid(i);
    }
    let mut retired = Vec::new();
    let mut below: Option<*mut Node> = None;
    for &(node, i) in path.iter().rev() {
        retired.push(node);
        // SAFETY: live node.
        let n = unsafe { &*node };
        let mut c = Box::new(n.clone());
        match below {
            None => c.remove_at(i - 1),
            Some(p) => c.set_child(i, p as usize),
        }
        below = Some(new_node(*c));
    }
    Some(Update {
        root: below.expect("non-empty path"),
        retired,
    })
}

/// Frees a retired node without touching its children.
///
/// # Safety
/// `p` came from this module, is no longer reachable from a published root, and
/// no reader can still hold it (its epoch has passed).
pub unsafe fn free_shallow(p: *mut Node) {
    // SAFETY: forwarded contract; Node owns no children (raw pointers).
    unsafe { drop_node(p) };
}

/// Frees a whole tree.
///
/// # Safety
/// No reader can reach `root` any more and it is not shared with a live tree.
pub unsafe fn free_deep(root: *mut Node) {
    // SAFETY: forwarded contract.
    let n = unsafe { &*root };
    if n.level > 0 {
        for k in n.children() {
            // SAFETY: each child is owned by this tree only.
            unsafe { free_deep(k as *mut Node) };
        }
    }
    // SAFETY: forwarded contract; its children are freed above.
    unsafe { drop_node(root) };
}

/// DRAM bytes of a tree.
///
/// # Safety
/// `root` is live for the duration of the call.
pub unsafe fn bytes(root: *const Node) -> u64 {
    // SAFETY: forwarded contract.
    let n = unsafe { &*root };
    let mut b = n.bytes();
    if n.level > 0 {
        for k in n.children() {
            // SAFETY: children of a live node are live.
            b += unsafe { bytes(k as *const Node) };
        }
    }
    b
}

/// Leaves of a tree in key order (tests and consistency checks).
///
/// # Safety
/// `root` is live for the duration of the call.
pub unsafe fn leaves(root: *const Node, out: &mut Vec<u64>) {
    // SAFETY: forwarded contract.
    let n = unsafe { &*root };
    if n.level == 0 {
        out.extend(n.children().map(|k| k as u64));
    } else {
        for k in n.children() {
            // SAFETY: children of a live node are live.
            unsafe { leaves(k as *const Node, out) };
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(i: u64) -> Vec<u8> {
        i.to_be_bytes().to_vec()
    }

    #[test]
    fn build_insert_route_remove() {
        let input: Vec<(Option<Sep>, u64)> = (0..1000u64)
            .map(|i| ((i > 0).then(|| Sep::from_key(&key(i * 10))), i + 1))
            .collect();
        let mut root = build(input);
        for i in 0..1000u64 {
            let k = key(i * 10 + 5);
            // SAFETY: single-threaded test; root is live.
            let r = unsafe { route(root, &SearchKey::new(&k), true) };
            assert_eq!(r.leaf, i + 1);
        }
        // Insert new leaves at i*10+5.
        for i in 0..1000u64 {
            // SAFETY: single-threaded.
            let u = unsafe { insert(root, Sep::from_key(&key(i * 10 + 5)), 5000 + i) };
            for p in u.retired {
                // SAFETY: replaced nodes are unreachable from the new root.
                unsafe { free_shallow(p) };
            }
            root = u.root;
        }
        for i in 0..1000u64 {
            let k = key(i * 10 + 6);
            // SAFETY: single-threaded.
            assert_eq!(
                unsafe { route(root, &SearchKey::new(&k), true) }.leaf,
                5000 + i
            );
            let k = key(i * 10 + 5);
            // SAFETY: single-threaded.
            let r = unsafe { route(root, &SearchKey::new(&k), false) };
            assert_eq!(r.leaf, i + 1);
        }
        let mut all = Vec::new();
        // SAFETY: single-threaded.
        unsafe { leaves(root, &mut all) };
        assert_eq!(all.len(), 2000);
        // SAFETY: single-threaded.
        let u = unsafe { remove(root, &key(505), 5050) }.expect("removable");
        for p in u.retired {
            // SAFETY: as above.
            unsafe { free_shallow(p) };
        }
        root = u.root;
        // SAFETY: single-threaded.
        assert_eq!(
            unsafe { route(root, &SearchKey::new(&key(506)), true) }.leaf,
            51
        );
        // SAFETY: single-threaded; the tree is no longer used.
        unsafe { free_deep(root) };
    }

    #[test]
    fn variable_keys_order() {
        let ks: Vec<Vec<u8>> = vec![
            vec![],
            vec![0],
            vec![0, 0],
            b"abc".to_vec(),
            b"abcdefgh".to_vec(),
            b"abcdefgh\0".to_vec(),
            b"abcdefghij".to_vec(),
            b"abcdefghik".to_vec(),
            vec![255; 20],
        ];
        for a in &ks {
            for b in &ks {
                let (x, y) = (SearchKey::new(a), SearchKey::new(b));
                assert_eq!(
                    cmp_parts(x.prefix, x.len, a, y.prefix, y.len, b),
                    a.cmp(b),
                    "{a:?} {b:?}"
                );
            }
        }
    }
}
