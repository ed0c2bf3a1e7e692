//! The bucket table: from a key's first 8 bytes straight to its leaf,
//! skipping the inner nodes and the level-0 directory ([`super::dir`]).
//!
//! The table first maps the prefix ([`KeyMap`], fixed when the table is
//! built): binary keys keep it as it is, text keys are read as digits of
//! their own alphabet (hex keys: 32 bits), so that they spread over the
//! buckets instead of crowding 256 of them. The top bits of the mapped
//! value select an entry (2^16 entries for binary keys, 2^18 for text).
//! An entry covers one *bucket* in three cache lines: the separators whose
//! prefixes fall in the bucket (their mapped prefixes' bits 16..48 and
//! 0..16; the bucket gives the bits above) and the leaves around them (each
//! leaf's offset over 256). A lookup counts the separators below its key's
//! mapped prefix and has its leaf: three lines of one table instead of a
//! directory slot and then four or five lines of a level-0 node, at random
//! in 16 MiB of nodes. Measured with a prototype on a 10 M-record tree:
//! 1.12x the lookups of the directory route; with 64-byte hex keys, the
//! mapped table took lookups from 0.99 to 1.15 Mops/s and inserts from 0.79
//! to 0.91 (see `docs/BENCHMARKS.md`).
//!
//! Unlike the directory's slots, entries are exact, not hints: a reader trusts
//! an entry at a validated version as it trusts a level-0 node, and validates
//! it again after taking the leaf's version ([`super::Route::still_valid`]).
//! So every change of the leaves' separators rewrites the entries it touches
//! *before* the leaf that split (or the leaf a removal merged into) is
//! unlocked: [`Buckets::refresh`], called by the structure modifications
//! under the structure mutex. Each entry has a version lock ([`vlock`]) that
//! the refresh takes, so a reader never validates a half-written entry.
//!
//! An entry can be *off* (a reader then routes through the directory): never
//! filled, more than [`CAP`] separators in the bucket, or a separator with a
//! byte outside the map's alphabet (a key with such a byte has no bucket
//! either). A reader whose key's prefix equals a separator's
//! compares whole keys only when the entry says every separator in it is 8
//! bytes long (the key then equals the separator); otherwise it routes through
//! the directory too.
//!
//! The table is built only for trees of at least [`MIN_LEAVES`] leaves (a
//! split then touches one or two entries, and below that the level-0 nodes
//! mostly stay in the cache): at open, or by the split that reaches that many.
//! It lives as long as the tree.

use std::sync::atomic::{AtomicU16, AtomicU32, AtomicU64, AtomicUsize, Ordering as Mo};
use std::sync::OnceLock;

use ferrite_pm::anon::HugeRegion;

use super::alphabet::Alphabet;
use super::keymap::{KeyMap, Place};
use super::{kid_units, vlock, Node, SearchKey, KID_SHIFT};

/// Bits of a binary prefix below its bucket's.
#[cfg(test)]
const SHIFT: u32 = 64 - super::keymap::IDENTITY_BITS;
/// Most separators an entry holds (a bucket of a 10 M-record tree holds 9 on
/// average; more than 17 in about 1 % of them).
pub(super) const CAP: usize = 17;
/// Leaves from which a tree has a bucket table by default: about 2 M
/// records. Measured on 1 M records (58,000 leaves, whose level-0 nodes
/// mostly stay in the cache) the table was no faster than the directory; on
/// 3 M records it was 1.15x.
pub(super) const MIN_LEAVES: usize = 1 << 17;
/// `flags`: every separator of the entry is exactly 8 bytes long.
const ALL8: u32 = 1;

/// One bucket's separators and leaves (see the module documentation).
#[repr(C, align(64))]
pub(super) struct Entry {
    lock: AtomicU64,
    /// Separators in the entry plus one; 0 when the entry is off.
    n: AtomicU32,
    flags: AtomicU32,
    /// Bits 16..48 of each separator's prefix, in key order.
    mid: [AtomicU32; CAP],
    /// Bits 0..16 of each separator's prefix.
    low: [AtomicU16; CAP],
    /// The leaf left of each separator, and the last one's right: leaf offset
    /// over 256 ([`kid_units`]).
    kids: [AtomicU32; CAP + 1],
}

const _: () = assert!(std::mem::size_of::<Entry>() == 192);

/// The entries and the map that places keys in them.
struct Table {
    region: HugeRegion,
    map: KeyMap,
}

/// The table (absent until the tree is large enough).
pub(super) struct Buckets {
    table: OnceLock<Table>,
    /// Leaves of the tree, kept by the structure modifications (to know when
    /// to build the table).
    pub(super) leaves: AtomicUsize,
    /// From how many leaves (tests lower it).
    pub(super) min_leaves: AtomicUsize,
}

/// An entry's separators and leaves as computed from the tree. Fixed arrays,
/// not vectors: it is computed under the structure mutex on every split, and
/// an allocation there can wait on the allocator's lock while the other
/// writers wait on the mutex (slots past `n` stay zero).
#[derive(Debug, PartialEq, Eq)]
struct Fill {
    /// Separators held.
    n: usize,
    prefixes: [u64; CAP],
    kids: [u32; CAP + 1],
    all8: bool,
}

impl Buckets {
    pub(super) fn new(leaves: usize) -> Buckets {
        Buckets {
            table: OnceLock::new(),
            leaves: AtomicUsize::new(leaves),
            min_leaves: AtomicUsize::new(MIN_LEAVES),
        }
    }

    fn entries(&self) -> Option<(&[Entry], &KeyMap)> {
        let t = self.table.get()?;
        // SAFETY: the region holds `1 << map.bits` entries' bytes (see
        // `turn_on_if_large`), 2 MiB-aligned, zeroed on first touch (an
        // all-zero entry is a valid, unlocked, off entry), lives as long as
        // `self`, and is only accessed through the entries' atomics.
        let e = unsafe {
            std::slice::from_raw_parts(t.region.as_ptr().cast::<Entry>(), 1 << t.map.bits)
        };
        Some((e, &t.map))
    }

    pub(super) fn is_on(&self) -> bool {
        self.table.get().is_some()
    }

    pub(super) fn bytes(&self) -> u64 {
        self.table
            .get()
            .map_or(0, |t| (std::mem::size_of::<Entry>() << t.map.bits) as u64)
    }

    /// The leaf of `k` (the leaf whose range holds it) through its bucket's
    /// entry at a validated version, with the entry, the version and the
    /// index of the leaf in the entry; None: route another way.
    #[inline]
    pub(super) fn route(&self, k: &SearchKey<'_>) -> Option<(u64, &Entry, u64, usize)> {
        let (t, map) = self.entries()?;
        // A key with a byte outside the table's alphabet has no bucket, nor
        // has a key without the skipped prefix, or with fewer than 8 bytes
        // after it (such a key can sort below its bucket's first key, and a
        // separator between the two would not be in the entry).
        let c = map.skip().len();
        if (k.len as usize) < c + 8 {
            return None;
        }
        let x = if c == 0 {
            map.map(k.prefix)?
        } else {
            match map.place(k.bytes) {
                Place::In(w) => map.map(w)?,
                _ => return None,
            }
        };
        let e = &t[(x >> map.shift()) as usize];
        let base = e as *const Entry as usize;
        crate::prefetch::lines(base, std::mem::size_of::<Entry>());
        let v = vlock::try_read(&e.lock)?;
        let n1 = e.n.load(Mo::Relaxed) as usize;
        if n1 == 0 {
            return None;
        }
        let n = (n1 - 1).min(CAP);
        let (m, l) = ((x >> 16) as u32, x as u16);
        let (mut lt, mut eq) = (0, 0);
        for x in &e.mid[..n] {
            let x = x.load(Mo::Relaxed);
            lt += (x < m) as usize;
            eq += (x == m) as usize;
        }
        let mut i = lt;
        // Separators with the key's middle bits follow those below it.
        for y in &e.low[lt..(lt + eq).min(n)] {
            let y = y.load(Mo::Relaxed);
            if y < l {
                i += 1;
            } else if y == l {
                // The key's prefix is a separator's: a key of the skipped
                // prefix and 8 bytes equals such a separator, and a
                // separator is <= the keys of the leaf to its right.
                if k.len as usize == c + 8 && e.flags.load(Mo::Relaxed) & ALL8 != 0 {
                    i += 1;
                } else {
                    return None;
                }
            }
        }
        let leaf = (e.kids[i].load(Mo::Relaxed) as u64) << KID_SHIFT;
        if !vlock::validate(&e.lock, v) {
            return None;
        }
        Some((leaf, e, v, i))
    }

    /// The leaf `j` places after leaf `i` of entry `e` (a prefetch hint, not
    /// validated).
    #[inline]
    pub(super) fn leaf_after(e: &Entry, i: usize, j: usize) -> Option<u64> {
        let n = (e.n.load(Mo::Relaxed) as usize).saturating_sub(1).min(CAP);
        let x = i + j;
        (x <= n).then(|| (e.kids[x].load(Mo::Relaxed) as u64) << KID_SHIFT)
    }

    /// The version word of an entry (what a route validates).
    #[inline]
    pub(super) fn lock_of(e: &Entry) -> &AtomicU64 {
        &e.lock
    }

    /// Builds the table when the tree has reached `min_leaves` leaves, and
    /// fills every entry (`root`: the tree, which the caller keeps from
    /// changing: the structure mutex, or the tree not yet published).
    pub(super) fn turn_on_if_large(&self, root: &Node, alpha: &Alphabet) {
        let min = self.min_leaves.load(Mo::Relaxed);
        if self.is_on() || self.leaves.load(Mo::Relaxed) < min || root.level == 0 {
            return;
        }
        let skip = common_prefix(root);
        let map = if skip.is_empty() {
            KeyMap::new(&alpha.symbols())
        } else {
            KeyMap::with_skip(&symbols_after(root, &skip), &skip)
        };
        let len = std::mem::size_of::<Entry>() << map.bits;
        let Ok(region) = HugeRegion::new(len) else {
            // No memory for the table: routes keep using the directory.
            return;
        };
        // Published zeroed (every entry off), then filled entry by entry
        // under each entry's lock: a reader sees an entry off, locked, or
        // filled from the tree as it is now.
        let _ = self.table.set(Table { region, map });
        if let Some((_, map)) = self.entries() {
            self.fill(root, map.all_buckets());
        }
    }

    /// Rewrites the entries of the buckets of the keys `from..=to` (`to`
    /// None: to the end) from the tree (the caller holds the structure mutex,
    /// or the tree is not yet published; the nodes it changed are unlocked).
    pub(super) fn refresh(&self, root: &Node, from: &[u8], to: Option<&[u8]>) {
        let Some((_, map)) = self.entries() else {
            return;
        };
        let z = to.map_or(u64::MAX, |k| map.mono_key(k));
        self.fill(root, map.buckets_between(map.mono_key(from), z));
    }

    /// Rewrites the entries of buckets `bs` from the tree (as [`Self::refresh`]).
    fn fill(&self, root: &Node, bs: std::ops::RangeInclusive<u64>) {
        let Some((t, map)) = self.entries() else {
            return;
        };
        for b in bs {
            let e = &t[b as usize];
            let f = fill_of(root, map, b);
            let v = vlock::lock(&e.lock).expect("entries are never obsolete");
            match f {
                Some(f) => {
                    for (j, &p) in f.prefixes[..f.n].iter().enumerate() {
                        e.mid[j].store((p >> 16) as u32, Mo::Relaxed);
                        e.low[j].store(p as u16, Mo::Relaxed);
                    }
                    for (j, &c) in f.kids[..=f.n].iter().enumerate() {
                        e.kids[j].store(c, Mo::Relaxed);
                    }
                    e.flags.store(if f.all8 { ALL8 } else { 0 }, Mo::Relaxed);
                    e.n.store(f.n as u32 + 1, Mo::Relaxed);
                }
                None => e.n.store(0, Mo::Relaxed),
            }
            vlock::unlock(&e.lock, v, true, false);
        }
    }

    /// Checks every entry against the tree (tests and consistency checks;
    /// the tree does not change during the call).
    pub(super) fn check(&self, root: &Node) -> Result<(), String> {
        let Some((t, map)) = self.entries() else {
            return Ok(());
        };
        for (b, e) in t.iter().enumerate() {
            let want = fill_of(root, map, b as u64);
            let n1 = e.n.load(Mo::Relaxed) as usize;
            let have = (n1 > 0).then(|| {
                let mut f = Fill::new(e.kids[0].load(Mo::Relaxed));
                f.n = n1 - 1;
                for j in 0..f.n {
                    f.prefixes[j] = (b as u64) << map.shift()
                        | u64::from(e.mid[j].load(Mo::Relaxed)) << 16
                        | u64::from(e.low[j].load(Mo::Relaxed));
                    f.kids[j + 1] = e.kids[j + 1].load(Mo::Relaxed);
                }
                f.all8 = e.flags.load(Mo::Relaxed) & ALL8 != 0;
                f
            });
            if have != want {
                return Err(format!(
                    "bucket {b:#x}: the table holds {have:?}, the tree {want:?}"
                ));
            }
        }
        Ok(())
    }
}

/// What bucket `b`'s entry holds, from the tree under `root` (which does not
/// change during the call), its separators' prefixes as `map` maps them:
/// None when the bucket holds more than [`CAP`] separators, one with a byte
/// outside the map's alphabet, or a leaf offset that does not fit 32 bits;
/// or when no key maps to it. The separators are walked in key order across
/// level-0 nodes (through the ancestors that hold the separators between
/// them), so an entry does not depend on where level-0 nodes split.
fn fill_of(root: &Node, map: &KeyMap, b: u64) -> Option<Fill> {
    let (bs, be) = map.range(b)?;
    // The path to the leaf of the bucket's first key (the skipped prefix and
    // 8 bytes), built on the stack: no allocation under the structure mutex
    // (see `Fill`). The skipped prefix is a separator's, so at most a key long.
    let skip = map.skip();
    let whole = skip.len() + 8;
    let mut buf = [0u8; crate::MAX_KEY + 8];
    let key = buf.get_mut(..whole)?;
    key[..skip.len()].copy_from_slice(skip);
    key[skip.len()..].copy_from_slice(&bs.to_be_bytes());
    let k = SearchKey::new(key);
    // A fixed array, not a vector: no allocation under the structure mutex
    // (see `Fill`).
    let mut path = Path {
        nodes: [(root, 0); MAX_DEPTH],
        len: 0,
    };
    let mut n = root;
    loop {
        let i = n.bound(&k, false);
        path.push(n, i)?;
        if n.level == 0 {
            break;
        }
        // SAFETY: children of a live node above level 0 are live nodes.
        n = unsafe { &*n.kid(i) };
    }
    let (mut n, mut i) = path.last().expect("a path");
    let mut f = Fill::new(kid_units(n.child(i))?);
    loop {
        for j in i..n.count() {
            // Separators from the bucket's first key on: in the skipped
            // prefix or above it.
            let Place::In(p) = place_of(map, n, j) else {
                return Some(f);
            };
            if p > be {
                return Some(f);
            }
            f.push(
                map.map(p)?,
                n.lens[j].load(Mo::Relaxed) as usize == whole,
                n.child(j + 1),
            )?;
        }
        // The next level-0 node: up to the nearest ancestor with a child
        // right of the path, whose separator between the two comes next,
        // then down its leftmost children.
        path.pop();
        let (a, ai) = loop {
            let Some((a, ai)) = path.last() else {
                // This was the last level-0 node.
                return Some(f);
            };
            if ai < a.count() {
                break (a, ai);
            }
            path.pop();
        };
        let Place::In(p) = place_of(map, a, ai) else {
            return Some(f);
        };
        if p > be {
            return Some(f);
        }
        let len8 = a.lens[ai].load(Mo::Relaxed) as usize == whole;
        path.pop();
        path.push(a, ai + 1)?;
        let mut m = a;
        let mut c = ai + 1;
        while m.level > 0 {
            // SAFETY: children of a live node above level 0 are live nodes.
            m = unsafe { &*m.kid(c) };
            path.push(m, 0)?;
            c = 0;
        }
        f.push(map.map(p)?, len8, m.child(0))?;
        (n, i) = (m, 0);
    }
}

/// Where separator `j` of node `n` lies against the map's skipped prefix
/// (the caller keeps the tree from changing).
fn place_of(map: &KeyMap, n: &Node, j: usize) -> Place {
    let p = n.pairs[j].0.load(Mo::Relaxed);
    if map.skip().is_empty() {
        return Place::In(p);
    }
    let len = n.lens[j].load(Mo::Relaxed) as usize;
    if len <= 8 {
        map.place(&p.to_be_bytes()[..len])
    } else {
        map.place(n.full(j))
    }
}

/// The bytes every separator of the tree under `root` starts with: the
/// common prefix of its first and last separators (the others lie between
/// them). Empty for a tree without separators.
fn common_prefix(root: &Node) -> Vec<u8> {
    let edge = |last: bool| {
        let mut n = root;
        while n.level > 0 {
            let i = if last { n.count() } else { 0 };
            // SAFETY: children of a live node above level 0 are live nodes.
            n = unsafe { &*n.kid(i) };
        }
        let c = n.count();
        (c > 0).then(|| n.sep_vec(if last { c - 1 } else { 0 }))
    };
    match (edge(false), edge(true)) {
        (Some(a), Some(z)) => {
            let c = a.iter().zip(&z).take_while(|(x, y)| x == y).count();
            a[..c].to_vec()
        }
        _ => Vec::new(),
    }
}

/// The byte values of the 8 bytes after `skip` of every separator under
/// `root` that starts with it (zero padding included, as
/// [`super::alphabet::Alphabet::learn`] counts it).
fn symbols_after(root: &Node, skip: &[u8]) -> Vec<u8> {
    let seen = super::alphabet::Alphabet::new();
    let mut stack = vec![root];
    while let Some(n) = stack.pop() {
        for j in 0..n.count() {
            let s = n.sep_vec(j);
            if let Some(rest) = s.strip_prefix(skip) {
                seen.learn(super::prefix_of(rest));
            }
        }
        if n.level > 0 {
            for i in 0..=n.count() {
                // SAFETY: children of a live node above level 0 are live nodes.
                stack.push(unsafe { &*n.kid(i) });
            }
        }
    }
    seen.symbols()
}

/// Levels a [`Path`] holds (a tree of 64-way nodes never gets near it; a
/// deeper one only turns entries off).
const MAX_DEPTH: usize = 16;

/// The nodes from the root down to a level-0 node, with the child taken in
/// each.
struct Path<'a> {
    nodes: [(&'a Node, usize); MAX_DEPTH],
    len: usize,
}

impl<'a> Path<'a> {
    fn push(&mut self, n: &'a Node, i: usize) -> Option<()> {
        *self.nodes.get_mut(self.len)? = (n, i);
        self.len += 1;
        Some(())
    }

    fn pop(&mut self) {
        self.len = self.len.saturating_sub(1);
    }

    fn last(&self) -> Option<(&'a Node, usize)> {
        self.len.checked_sub(1).map(|j| self.nodes[j])
    }
}

impl Fill {
    /// No separators yet; `first` is the leaf of the bucket's first key.
    fn new(first: u32) -> Fill {
        let mut kids = [0; CAP + 1];
        kids[0] = first;
        Fill {
            n: 0,
            prefixes: [0; CAP],
            kids,
            all8: true,
        }
    }

    /// Appends a separator and the leaf right of it; None when the entry
    /// would overflow or the leaf's offset does not fit.
    fn push(&mut self, prefix: u64, len8: bool, leaf: usize) -> Option<()> {
        if self.n == CAP {
            return None;
        }
        self.kids[self.n + 1] = kid_units(leaf)?;
        self.prefixes[self.n] = prefix;
        self.all8 &= len8;
        self.n += 1;
        Some(())
    }
}

#[cfg(test)]
mod tests {
    use super::super::{Inner, Sep};
    use super::*;
    use crate::ebr as epoch;

    const UNIT: u64 = 1 << KID_SHIFT;

    fn k(x: u64) -> Vec<u8> {
        x.to_be_bytes().to_vec()
    }

    /// Every key's bucket route (when the entry answers) against the route
    /// from the root; returns how many answered.
    fn agree(t: &Inner, keys: &[Vec<u8>]) -> usize {
        let g = epoch::pin();
        let mut hits = 0;
        for key in keys {
            let sk = SearchKey::new(key);
            let root = t.route(&sk, true, true, &g).leaf;
            if let Some((leaf, ..)) = t.buckets.route(&sk) {
                assert_eq!(leaf, root, "key {key:x?}");
                hits += 1;
            }
        }
        hits
    }

    /// A random text key (xorshift state `x`): `prefix`, 16 hex digits,
    /// padded with `k` to `len` bytes.
    fn text_key(x: &mut u64, prefix: &str, len: usize) -> Vec<u8> {
        *x ^= *x << 13;
        *x ^= *x >> 7;
        *x ^= *x << 17;
        let mut k = format!("{prefix}{:016x}", *x).into_bytes();
        k.resize(len, b'k');
        k
    }

    /// A tree of leaves separated by `n` random text keys (sorted, distinct;
    /// returned), with the table on and exact.
    fn text_tree(x: &mut u64, prefix: &str, len: usize, n: usize) -> (Inner, Vec<Vec<u8>>) {
        let mut seps: Vec<Vec<u8>> = (0..n).map(|_| text_key(x, prefix, len)).collect();
        seps.sort();
        seps.dedup();
        let t = Inner::build(
            seps.iter()
                .enumerate()
                .map(|(i, s)| ((i > 0).then(|| Sep::from_key(s)), (i as u64 + 1) * UNIT))
                .collect(),
        );
        t.set_bucket_table_min_leaves(8192);
        assert!(t.buckets.is_on());
        t.lock().check().unwrap();
        (t, seps)
    }

    /// Removes every fifth leaf of a [`text_tree`]; the table stays exact,
    /// agrees on `keys` and answers most of `inside`.
    fn remove_fifth(t: &Inner, seps: &[Vec<u8>], keys: &[Vec<u8>], inside: &[Vec<u8>]) {
        let removed = (1..seps.len())
            .step_by(5)
            .filter(|&i| t.lock().remove(&seps[i], (i as u64 + 1) * UNIT))
            .count();
        assert!(removed > seps.len() / 8, "{removed} removed");
        t.lock().check().unwrap();
        agree(t, keys);
        answers_most(t, inside);
    }

    /// The table answers more than 9 in 10 of `keys` (each as the root does).
    fn answers_most(t: &Inner, keys: &[Vec<u8>]) {
        let hits = agree(t, keys);
        assert!(hits > keys.len() * 9 / 10, "{hits} of {}", keys.len());
    }

    /// A tree of 16,384 leaves spread over the prefix space, with the table
    /// from 8,192 leaves; what an entry answers is what the root answers, for
    /// keys inside leaves and keys equal to separators, through leaf splits
    /// (level-0 node splits among them), splits in a crowded bucket (its
    /// entry goes off), long separators (ties go elsewhere) and removals;
    /// `check` finds every entry exact after each step.
    #[test]
    fn entries_follow_splits_and_removals() {
        let n = 16_384u64;
        let step = u64::MAX / n;
        let t = Inner::build(
            (0..n)
                .map(|i| ((i > 0).then(|| Sep::from_key(&k(i * step))), (i + 1) * UNIT))
                .collect(),
        );
        assert!(!t.buckets.is_on());
        t.set_bucket_table_min_leaves(8192);
        assert!(t.buckets.is_on());
        t.lock().check().unwrap();
        let mut keys: Vec<Vec<u8>> = (0..n).map(|i| k(i * step + 12_345)).collect();
        keys.extend((1..n).map(|i| k(i * step)));
        let hits = agree(&t, &keys);
        assert!(hits > keys.len() * 9 / 10, "{hits} of {}", keys.len());
        let g = epoch::pin();
        let mut next = n + 1;
        let mut add = |t: &Inner, key: Vec<u8>| {
            t.lock().insert(Sep::from_key(&key), next * UNIT, &g);
            next += 1;
        };
        // A new leaf in every other leaf's range: level-0 nodes split.
        for i in (0..n).step_by(2) {
            add(&t, k(i * step + 1_000_000));
        }
        t.lock().check().unwrap();
        keys.extend((0..n).step_by(2).map(|i| k(i * step + 1_000_000)));
        keys.extend((0..n).step_by(2).map(|i| k(i * step + 999_999)));
        assert!(agree(&t, &keys) > keys.len() * 8 / 10);
        // A crowded bucket: more separators than an entry holds.
        let crowd = 77u64 << SHIFT;
        for j in 1..=(CAP as u64 + 3) {
            add(&t, k(crowd + j * 1_000_000_000));
        }
        t.lock().check().unwrap();
        let e = &t.buckets.entries().unwrap().0[77];
        assert_eq!(e.n.load(Mo::Relaxed), 0, "a crowded bucket's entry is off");
        keys.extend((0..=CAP as u64 + 4).map(|j| k(crowd + j * 1_000_000_000 + 5)));
        agree(&t, &keys);
        // A long separator: keys sharing its prefix route elsewhere.
        let mut long = k(500 * step + 777);
        long.extend_from_slice(b"-long");
        add(&t, long.clone());
        t.lock().check().unwrap();
        let sk = SearchKey::new(&long[..8]);
        assert!(
            t.buckets.route(&sk).is_none(),
            "a tie with a long separator"
        );
        keys.push(long[..8].to_vec());
        keys.push(long.clone());
        agree(&t, &keys);
        // Removals: every third original leaf.
        // (A leaf that is its level-0 node's first child is not removed.)
        let removed = (3..n)
            .step_by(3)
            .filter(|&i| t.lock().remove(&k(i * step), (i + 1) * UNIT))
            .count();
        assert!(removed as u64 > n / 4, "{removed} removed");
        t.lock().check().unwrap();
        let hits = agree(&t, &keys);
        assert!(hits > keys.len() * 8 / 10, "{hits} of {}", keys.len());
    }

    /// Separators dense enough that buckets span level-0 nodes, with 8- and
    /// 16-byte keys: entries whose bucket crosses a fence (8 bytes long or
    /// longer) are on like the others, and every answer is the root's, for
    /// keys inside leaves, equal to separators and just below them.
    #[test]
    fn buckets_across_level0_nodes_with_long_keys() {
        for len in [8usize, 16] {
            let key = |p: u64, tail: u64| {
                let mut v = p.to_be_bytes().to_vec();
                if len > 8 {
                    v.extend_from_slice(&tail.to_be_bytes());
                }
                v
            };
            let n = 16_384u64;
            // About six separators per bucket, over a twelfth of the buckets.
            let step = (1u64 << SHIFT) / 6 + 77;
            let sep = |i: u64| key((1u64 << 60) + i * step, i);
            let t = Inner::build(
                (0..n)
                    .map(|i| ((i > 0).then(|| Sep::from_key(&sep(i))), (i + 1) * UNIT))
                    .collect(),
            );
            t.set_bucket_table_min_leaves(8192);
            assert!(t.buckets.is_on());
            t.lock().check().unwrap();
            let mut keys = Vec::new();
            for i in 1..n {
                let p = (1u64 << 60) + i * step;
                keys.push(sep(i));
                keys.push(key(p + 5, 0));
                keys.push(key(p - 1, u64::MAX));
                if len > 8 {
                    keys.push(key(p, 0));
                    keys.push(key(p, i + 1));
                }
            }
            let hits = agree(&t, &keys);
            let off = t
                .buckets
                .entries()
                .unwrap()
                .0
                .iter()
                .filter(|e| e.n.load(Mo::Relaxed) == 0)
                .count();
            if len == 8 {
                assert!(
                    hits > keys.len() * 9 / 10,
                    "8-byte keys: {hits} of {}",
                    keys.len()
                );
            } else {
                // Two of the five keys per separator do not tie its prefix.
                assert!(
                    hits > keys.len() * 2 / 5 * 9 / 10,
                    "16-byte keys: {hits} of {}",
                    keys.len()
                );
            }
            // Buckets across a fence are on like the others (more than 17
            // separators in one bucket still turns it off).
            assert!(off < 100, "{len}: {off} off");
        }
    }

    /// Text keys (hex digits, 16 and 64 bytes long): the table maps them over
    /// their alphabet, its entries answer most lookups, and every answer is
    /// the root's — through splits, a separator with a byte outside the
    /// alphabet (its entry goes off), keys with such a byte (they route
    /// another way) and removals; `check` finds every entry exact.
    #[test]
    fn text_keys_are_bucketed_over_their_alphabet() {
        for len in [16usize, 64] {
            let mut x = 42u64;
            let n = 16_384;
            let (t, seps) = text_tree(&mut x, "", len, n);
            let mut hex = || text_key(&mut x, "", len);
            let map = t.buckets.entries().expect("a table").1;
            assert_eq!(map.bits, super::super::keymap::MAPPED_BITS);
            // Keys inside leaves (entries answer them) and keys equal to
            // separators (their prefix ties a long separator's: they route
            // another way).
            let inside: Vec<Vec<u8>> = (0..4 * n).map(|_| hex()).collect();
            let mut keys = seps.clone();
            answers_most(&t, &inside);
            // Splits: new leaves among the old ones.
            let g = epoch::pin();
            let mut next = seps.len() as u64 + 1;
            for _ in 0..n / 2 {
                let k = hex();
                if seps.binary_search(&k).is_err() {
                    t.lock().insert(Sep::from_key(&k), next * UNIT, &g);
                    next += 1;
                    keys.push(k);
                }
            }
            t.lock().check().unwrap();
            agree(&t, &keys);
            answers_most(&t, &inside);
            // A separator with a byte outside the alphabet: its bucket's
            // entry goes off, and keys with such bytes have no bucket.
            let mut odd = seps[n / 2].clone();
            odd[5] = b'~';
            t.lock().insert(Sep::from_key(&odd), next * UNIT, &g);
            t.lock().check().unwrap();
            assert!(t.buckets.route(&SearchKey::new(&odd)).is_none());
            let mut near = odd.clone();
            near[5] = b'0';
            keys.push(odd);
            keys.push(near);
            agree(&t, &keys);
            remove_fifth(&t, &seps, &keys, &inside);
        }
    }

    /// Below `min_leaves` leaves a tree has no table; the split that
    /// reaches them builds it, exact.
    #[test]
    fn the_table_starts_at_min_leaves() {
        let n = 8192 - 3;
        let step = u64::MAX / (n + 10);
        let t = Inner::build(
            (0..n)
                .map(|i| ((i > 0).then(|| Sep::from_key(&k(i * step))), (i + 1) * UNIT))
                .collect(),
        );
        t.set_bucket_table_min_leaves(8192);
        assert!(!t.buckets.is_on());
        {
            let s = t.lock();
            assert_eq!(s.bytes(), s.bytes_of_nodes() + (8 << 16));
        }
        let g = epoch::pin();
        for j in 0..3 {
            assert!(!t.buckets.is_on());
            t.lock()
                .insert(Sep::from_key(&k(j * step + 99)), (n + 1 + j) * UNIT, &g);
        }
        assert!(t.buckets.is_on());
        t.lock().check().unwrap();
        let keys: Vec<Vec<u8>> = (0..n).map(|i| k(i * step + 5)).collect();
        assert!(agree(&t, &keys) > keys.len() * 8 / 10);
    }

    /// Keys with a common prefix ("user" and hex digits, as YCSB's): the
    /// table skips it and maps the bytes after it, so its entries answer most
    /// lookups (without the skip, every key fell in two buckets and every
    /// entry was off), and every answer is the root's — through splits,
    /// separators without the prefix below and above the others, keys
    /// without it or too short after it (they route another way) and
    /// removals; `check` finds every entry exact.
    #[test]
    fn keys_with_a_common_prefix_are_bucketed_after_it() {
        for len in [20usize, 64] {
            let mut x = 7u64;
            let n = 16_384;
            let (t, seps) = text_tree(&mut x, "user", len, n);
            let mut key = || text_key(&mut x, "user", len);
            let map = t.buckets.entries().expect("a table").1;
            assert_eq!(map.skip(), b"user");
            let inside: Vec<Vec<u8>> = (0..4 * n).map(|_| key()).collect();
            answers_most(&t, &inside);
            let mut keys = seps.clone();
            // Splits, some by separators without the prefix, below and
            // above the others.
            let g = epoch::pin();
            let mut next = seps.len() as u64 + 1;
            let mut add = |t: &Inner, k: Vec<u8>, keys: &mut Vec<Vec<u8>>| {
                t.lock().insert(Sep::from_key(&k), next * UNIT, &g);
                next += 1;
                keys.push(k);
            };
            for _ in 0..n / 2 {
                let k = key();
                if seps.binary_search(&k).is_err() {
                    add(&t, k, &mut keys);
                }
            }
            for k in [
                &b"apple"[..],
                b"usea-long-key-below",
                b"zebra",
                b"uses",
                b"user",
            ] {
                add(&t, k.to_vec(), &mut keys);
            }
            t.lock().check().unwrap();
            answers_most(&t, &inside);
            // Keys without the prefix, the prefix alone, too short after it.
            for k in [
                &b"a"[..],
                b"usea",
                b"user",
                b"user0",
                b"user0123456",
                b"userzzzzzzzzzzzz",
                b"zz",
            ] {
                keys.push(k.to_vec());
                assert!(
                    t.buckets.route(&SearchKey::new(k)).is_none() || k.len() >= 12,
                    "{k:?}"
                );
            }
            agree(&t, &keys);
            remove_fifth(&t, &seps, &keys, &inside);
        }
    }

    /// A key shorter than 8 bytes sorts below the first 8-byte key of its
    /// bucket when its padded prefix is that key's: a separator between the
    /// two ([0x12, 0x34, 0]) is not in the entry, so such a key routes
    /// another way (the entry would give the leaf right of that separator).
    #[test]
    fn short_keys_at_a_buckets_start_route_another_way() {
        let n = 16_384u64;
        let step = u64::MAX / n;
        let t = Inner::build(
            (0..n)
                .map(|i| ((i > 0).then(|| Sep::from_key(&k(i * step))), (i + 1) * UNIT))
                .collect(),
        );
        t.set_bucket_table_min_leaves(8192);
        let g = epoch::pin();
        t.lock()
            .insert(Sep::from_key(&[0x12, 0x34, 0]), (n + 1) * UNIT, &g);
        t.lock().check().unwrap();
        let short = [0x12u8, 0x34];
        assert!(t.buckets.route(&SearchKey::new(&short)).is_none());
        agree(
            &t,
            &[short.to_vec(), vec![0x12, 0x34, 0], vec![0x12, 0x34, 0, 0]],
        );
    }
}
