//! DRAM inner nodes: a B+-tree over the PM leaves, updated in place under
//! optimistic lock coupling (Leis et al., "The ART of practical
//! synchronization", B-tree variant).
//!
//! Every node carries a version lock (the same [`vlock`] protocol as the
//! leaves). Readers never write shared memory: per level they take the node's
//! version, pick the child, validate the node before dereferencing the child,
//! take the child's version and validate the node again (so the child was the
//! right one at the moment its version was taken), restarting from the root on
//! any failed validation. A reader that goes on to a leaf validates the level-0
//! node once more after taking the leaf's version ([`Route::still_valid`]); see
//! there for why that closes the race with leaf splits.
//!
//! Writers that change the structure (leaf splits, and leaf removals by
//! empty-leaf unlinks and merges) are
//! serialised by one mutex ([`Inner::smo`]); under it they lock the nodes they
//! modify — the level-0 node, plus each ancestor a split propagates into —
//! keep every lock until all of them are modified, and install a new root with
//! one atomic pointer store. The mutex keeps writer-vs-writer reasoning
//! trivial (splits are 1 in ~12 inserts and short; a writer spins on it
//! briefly before blocking, see [`Inner::lock`]); readers and non-splitting
//! writers never take it.
//!
//! A route may also start at a level-0 node found through the level-0
//! directory ([`dir`]), checked against that node's prefix fences instead of
//! coupled down from the root.
//!
//! Reclamation: nodes are never replaced or merged (a split keeps the left
//! half in place, the root only grows, a leaf removal never empties a node), so
//! they live as long as the tree and are freed when it is dropped. What is
//! replaced is a node's buffer of long separators (by a compacted copy when
//! it is full or the node splits, see [`Longs`]); the old buffer is retired
//! through the epoch (`crate::ebr`), so a pinned reader that still holds it never
//! sees it freed.
//!
//! Data fields are atomics read with `Relaxed` loads (plain `mov`s on x86): an
//! optimistic reader may see them torn, which is fine because nothing read is
//! trusted before the node's version validates, and every index derived from
//! torn data is bounded (`n <= KEYS`, long-key lookups are `get`s).

use std::cell::UnsafeCell;
use std::cmp::Ordering;
use std::sync::atomic::{AtomicPtr, AtomicU32, AtomicU64, AtomicUsize, Ordering as Mo};
use std::sync::{Arc, Mutex, MutexGuard};

use crate::ebr::Guard;

use crate::arena::Slab;
use crate::vlock;

mod alphabet;
mod bucket;
mod dir;
mod keymap;
use alphabet::Alphabet;
use bucket::Buckets;
use dir::Dir;

/// Maximum children per node.
pub const FANOUT: usize = 64;
/// Children per node when bulk-loading on open.
const FILL: usize = 48;
/// Attempts at the structure mutex before a writer blocks on it.
const SMO_SPINS: usize = 2000;
/// Separators a search of a node below the root reads when its parent's hint
/// places the key (see [`Node::bound_in`]): 12, three lines' worth, plus one
/// on either side to check the guess.
const WINDOW: usize = 12;
/// A child word of a node above level 0 carries the child's separator count
/// (a hint, see [`Node::hint`]) in its top byte; node addresses and leaf
/// offsets stay below.
const HINT_SHIFT: u32 = 56;
const ADDR_MASK: usize = (1 << HINT_SHIFT) - 1;
const _: () = assert!(KEYS < 1 << (usize::BITS - HINT_SHIFT));

/// A child word: `child` (a node address) with `count` as its hint.
#[inline]
fn hinted(child: usize, count: usize) -> usize {
    debug_assert!(child & !ADDR_MASK == 0);
    child | count << HINT_SHIFT
}

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
/// and `b_bytes` are only read when both keys are longer than 8 bytes. Bytes
/// shorter than their stated length (an optimistic reader's torn view of a
/// node, discarded after validation) compare as if truncated instead of
/// panicking.
#[inline]
pub fn cmp_parts(ap: u64, al: u32, a: &[u8], bp: u64, bl: u32, b: &[u8]) -> Ordering {
    match ap.cmp(&bp) {
        Ordering::Equal if al > 8 && bl > 8 => {
            a.get(8..).unwrap_or(&[]).cmp(b.get(8..).unwrap_or(&[]))
        }
        Ordering::Equal => al.cmp(&bl),
        o => o,
    }
}

/// The separator right of the end of `path` (a root-to-level-0 path, each
/// node with the child taken): the next one in the last node, else the
/// nearest ancestor's right of the path (the upper fence of the nodes
/// below it); None: the end of the key space.
fn next_sep(path: &[(&Node, usize)]) -> Option<Vec<u8>> {
    path.iter()
        .rev()
        .find(|(n, i)| *i < n.count())
        .map(|(n, i)| n.sep_vec(*i))
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

/// Bytes of a node's separators longer than 8 bytes, in one append-only
/// buffer: separator `i`'s bytes start at `offs[i]` (its length is the node's
/// `lens[i]`). An insert appends the new separator's bytes and shifts `offs`
/// with the other slot fields; a removal or a split only moves offsets and
/// leaves the old bytes behind as garbage. Only when the buffer is full, or
/// the node splits, does the writer build a new, compacted one (1.5 times the
/// live bytes) and retire the old through the epoch. So a leaf split of a tree of long keys no longer
/// allocates, copies and (through the epoch, on whichever thread collects)
/// frees a whole array: that cross-thread free serialised two inserting
/// threads on the allocator's arena lock.
///
/// Readers never see a byte change: they read only below `used` (an acquire
/// load), and bytes below it are written once, before the release store that
/// raised it.
struct Longs {
    /// Start of separator `i`'s bytes in `buf` (meaningful while the
    /// separator is longer than 8 bytes). Moves with the slot.
    offs: [AtomicU32; KEYS],
    /// Bytes written; those below never change again.
    used: AtomicU32,
    buf: Box<[UnsafeCell<u8>]>,
}

// SAFETY: the only non-Sync field is `buf`. Its bytes below `used` are
// immutable; bytes at and above it are written only by the node's single
// writer (node lock and structure mutex held), and readers never read there
// (`get` clamps to the acquired `used`).
unsafe impl Sync for Longs {}

/// Smallest long-separator buffer.
const LONGS_MIN: usize = 256;

impl Longs {
    fn with_capacity(cap: usize) -> Longs {
        let cap = cap.clamp(LONGS_MIN, u32::MAX as usize);
        Longs {
            offs: std::array::from_fn(|_| AtomicU32::new(0)),
            used: AtomicU32::new(0),
            buf: (0..cap).map(|_| UnsafeCell::new(0)).collect(),
        }
    }

    /// Separator `i`'s bytes, given its length; cut short where they would
    /// reach past the written bytes (only a torn read can ask for that, and
    /// its node version will not validate).
    #[inline]
    fn get(&self, i: usize, len: usize) -> &[u8] {
        let off = self.offs[i].load(Mo::Relaxed) as usize;
        let used = self.used.load(Mo::Acquire) as usize;
        let (a, b) = (off.min(used), off.saturating_add(len).min(used));
        // SAFETY: a <= b <= used <= buf.len(). Bytes below `used` were written
        // before the release store of `used` this load acquired, and are never
        // written again: no write races with this shared slice.
        // `UnsafeCell<u8>` has the layout of `u8`.
        unsafe { std::slice::from_raw_parts(self.buf.as_ptr().add(a).cast::<u8>(), b - a) }
    }

    /// Appends `bytes` (writer only) and returns their offset; None when they
    /// do not fit.
    fn push(&self, bytes: &[u8]) -> Option<u32> {
        let u = self.used.load(Mo::Relaxed) as usize;
        if bytes.len() > self.buf.len() - u {
            return None;
        }
        // SAFETY: u + len <= buf.len(). Bytes at and above `used` are read by
        // no reader (see `get`) and written only by the single writer, which
        // is the caller; the pointer comes from the whole slice, through
        // `UnsafeCell::raw_get`, so it may write the range.
        unsafe {
            let dst = UnsafeCell::raw_get(self.buf.as_ptr().add(u));
            std::ptr::copy_nonoverlapping(bytes.as_ptr(), dst, bytes.len());
        }
        self.used.store((u + bytes.len()) as u32, Mo::Release);
        Some(u as u32)
    }
}

/// One node, in one allocation. Separator `i` and the child to its right sit
/// side by side (`pairs[i]`), so the pass that counts separators below a key
/// also brings the child pointer into the cache: one dependent miss per level.
/// Level 0 children are PM leaf offsets, higher levels' are node pointers,
/// each with the child's separator count in its top byte ([`Node::hint`]).
///
/// Writers change the atomic fields only while holding `lock` (and the
/// structure mutex); readers load them `Relaxed` and trust nothing before the
/// version validates.
#[repr(C)]
pub struct Node {
    /// Version lock ([`vlock`]; inner nodes are never marked obsolete).
    lock: AtomicU64,
    /// Separators in use (children = n + 1); never above `KEYS`.
    n: AtomicUsize,
    /// Leftmost child.
    kid0: AtomicUsize,
    /// Height above the leaves; written before the node is published and
    /// never changed.
    level: u8,
    /// Prefix fences: the first 8 bytes of the separators around this node
    /// in its parent (0 and `u64::MAX` at the tree's ends), so the node's
    /// keys have prefixes in `lo..=hi`. Changed only under the node's lock,
    /// by a split (the range only ever shrinks); what the level-0 directory
    /// ([`dir`]) checks a key against.
    lo: AtomicU64,
    hi: AtomicU64,
    /// (separator prefix, child right of the separator).
    pairs: [(AtomicU64, AtomicUsize); KEYS],
    lens: [AtomicU32; KEYS],
    /// Null while no separator of the node was ever longer than 8 bytes.
    /// Appended to in place (see [`Longs`]); replaced only by a compacted
    /// copy (release store), the old one retired through the epoch, so an
    /// optimistic reader never sees it vanish under it.
    longs: AtomicPtr<Longs>,
}

/// Frees a replaced long-separator buffer: through the epoch when the node is
/// published (`g`), at once when it never was (`None`).
fn retire_longs(old: *mut Longs, g: Option<&Guard>) {
    if old.is_null() {
        return;
    }
    match g {
        // SAFETY: `old` was unlinked from its node by the caller's store, so no
        // new reader can reach it; readers pinned before that may still hold it,
        // and the epoch defers the drop past them. It came from Box::into_raw.
        Some(g) => unsafe { g.defer_unchecked(move || drop(Box::from_raw(old))) },
        // SAFETY: the node was never published: nobody else can hold `old`.
        None => drop(unsafe { Box::from_raw(old) }),
    }
}

impl Node {
    fn new(level: u8) -> Box<Node> {
        Box::new(Node {
            lock: AtomicU64::new(0),
            n: AtomicUsize::new(0),
            kid0: AtomicUsize::new(0),
            level,
            lo: AtomicU64::new(0),
            hi: AtomicU64::new(u64::MAX),
            pairs: std::array::from_fn(|_| (AtomicU64::new(0), AtomicUsize::new(0))),
            lens: std::array::from_fn(|_| AtomicU32::new(0)),
            longs: AtomicPtr::new(std::ptr::null_mut()),
        })
    }

    /// Separators in use, bounded even when read torn.
    #[inline]
    fn count(&self) -> usize {
        self.n.load(Mo::Relaxed).min(KEYS)
    }

    fn nchildren(&self) -> usize {
        self.count() + 1
    }

    /// The long-separator buffer, if any. The reference is only used while
    /// the caller is pinned (readers) or holds the structure mutex (writers),
    /// which keeps a replaced buffer alive.
    #[inline]
    fn longs(&self) -> Option<&Longs> {
        let p = self.longs.load(Mo::Acquire);
        // SAFETY: a non-null pointer is a published buffer, freed only through
        // the epoch (or with the node), see `retire_longs`; `Longs` is Sync.
        (!p.is_null()).then(|| unsafe { &*p })
    }

    /// Separator `i`'s whole bytes when it is longer than 8 bytes, else empty.
    #[inline]
    fn full(&self, i: usize) -> &[u8] {
        let len = self.lens[i].load(Mo::Relaxed) as usize;
        match self.longs() {
            Some(l) if len > 8 => l.get(i, len),
            _ => &[],
        }
    }

    /// The word of child `i` (0..=n): the child and, above level 0, its hint.
    #[inline]
    fn child_word(&self, i: usize) -> &AtomicUsize {
        if i == 0 {
            &self.kid0
        } else {
            &self.pairs[i - 1].1
        }
    }

    /// Child `i` (0..=n).
    #[inline]
    fn child(&self, i: usize) -> usize {
        self.child_word(i).load(Mo::Relaxed) & ADDR_MASK
    }

    /// The separator count of child `i` (a node; this node is above level 0)
    /// as last recorded by a writer: what a reader uses to guess where in the
    /// child a key lies before the child's first line has arrived. Writers
    /// keep it current under the structure mutex, but a reader may see it
    /// stale, or torn from another slot: a search only trusts it as far as
    /// the separators it reads confirm it ([`Node::bound_in`]).
    #[inline]
    fn hint(&self, i: usize) -> usize {
        self.child_word(i).load(Mo::Relaxed) >> HINT_SHIFT
    }

    /// Records `count` as child `i`'s hint (writer, structure mutex held;
    /// the node itself need not be locked: no reader trusts a hint).
    fn set_hint(&self, i: usize, count: usize) {
        let w = self.child_word(i);
        w.store(hinted(w.load(Mo::Relaxed) & ADDR_MASK, count), Mo::Relaxed);
    }

    #[inline]
    fn kid(&self, i: usize) -> *const Node {
        self.child(i) as *const Node
    }

    /// Order of separator `i` relative to `k`.
    #[inline]
    fn cmp_sep(&self, i: usize, k: &SearchKey<'_>) -> Ordering {
        let (p, l) = (
            self.pairs[i].0.load(Mo::Relaxed),
            self.lens[i].load(Mo::Relaxed),
        );
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
        let n = self.count();
        self.settle(self.below(0..n, k.prefix), n, k, le)
    }

    /// [`Node::bound`], reading only the separators in `a - 1 ..= b` when
    /// they show the answer lies in `a..b` (the separator left of the window
    /// is below the key's prefix, the one right of it is not); the whole
    /// node otherwise. `a..b` is a reader's guess from its parent's hint and
    /// separators ([`window`]), made before this node's lines arrived: when
    /// it is right, the search needs only the lines the reader asked for.
    #[inline]
    fn bound_in(&self, k: &SearchKey<'_>, le: bool, a: usize, b: usize) -> usize {
        let n = self.count();
        let b = b.min(n);
        let a = a.min(b);
        let kp = k.prefix;
        let left = a == 0 || self.pairs[a - 1].0.load(Mo::Relaxed) < kp;
        let right = b == n || self.pairs[b].0.load(Mo::Relaxed) >= kp;
        if !(left && right) {
            return self.bound(k, le);
        }
        // Sorted separators: all of 0..a are below the prefix, none of b..n.
        self.settle(a + self.below(a..b, kp), n, k, le)
    }

    /// How many separators in `r` have a prefix below `kp`: a branch-free
    /// count over independent loads.
    #[inline]
    fn below(&self, r: std::ops::Range<usize>, kp: u64) -> usize {
        self.pairs[r]
            .iter()
            .map(|(p, _)| (p.load(Mo::Relaxed) < kp) as usize)
            .sum::<usize>()
    }

    /// From `i`, the separators below `k`'s prefix, moves right past those
    /// with an equal prefix that are <= k (`le`) or < k (`!le`).
    #[inline]
    fn settle(&self, mut i: usize, n: usize, k: &SearchKey<'_>, le: bool) -> usize {
        let kp = k.prefix;
        while i < n && self.pairs[i].0.load(Mo::Relaxed) == kp {
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

    /// Separator `i`'s bytes (a writer, or a reader of a validated node).
    fn sep_vec(&self, i: usize) -> Vec<u8> {
        let len = self.lens[i].load(Mo::Relaxed) as usize;
        if len <= 8 {
            self.pairs[i].0.load(Mo::Relaxed).to_be_bytes()[..len].to_vec()
        } else {
            self.full(i).to_vec()
        }
    }

    fn sep(&self, i: usize) -> Sep {
        let len = self.lens[i].load(Mo::Relaxed);
        Sep {
            prefix: self.pairs[i].0.load(Mo::Relaxed),
            len,
            full: (len > 8).then(|| Arc::from(self.full(i))),
        }
    }

    /// Copies slot `from` to slot `to` (writer; `longs` is this node's
    /// buffer, loaded once by the caller for all its moves).
    #[inline]
    fn move_slot(&self, longs: Option<&Longs>, from: usize, to: usize) {
        let (p, c) = &self.pairs[from];
        self.pairs[to].0.store(p.load(Mo::Relaxed), Mo::Relaxed);
        self.pairs[to].1.store(c.load(Mo::Relaxed), Mo::Relaxed);
        self.lens[to].store(self.lens[from].load(Mo::Relaxed), Mo::Relaxed);
        if let Some(l) = longs {
            l.offs[to].store(l.offs[from].load(Mo::Relaxed), Mo::Relaxed);
        }
    }

    /// Stores `bytes` as separator `i`'s whole bytes (writer; `lens[i]` and
    /// every other slot already in place, `live` the other slots in use).
    /// Appends to the buffer when they fit; otherwise publishes a compacted
    /// buffer with room to spare and retires the old one.
    fn set_full(&self, i: usize, bytes: &[u8], live: std::ops::Range<usize>, g: Option<&Guard>) {
        if let Some(l) = self.longs() {
            if let Some(off) = l.push(bytes) {
                l.offs[i].store(off, Mo::Relaxed);
                return;
            }
        }
        let new = self
            .compacted(live.filter(|&j| j != i).map(|j| (j, j)), bytes.len())
            .expect("room for the new separator");
        let off = new.push(bytes).expect("sized for the live bytes");
        new.offs[i].store(off, Mo::Relaxed);
        self.set_longs(Some(new), g);
    }

    /// A new buffer holding the long separators of the slots `moves` names
    /// (from this node's slot, to the new buffer's), with room for `extra`
    /// bytes: half as much again as it must hold, so appends go on for a
    /// while before the next compaction (twice measured no faster and held
    /// more DRAM). None when there is nothing to hold.
    fn compacted(
        &self,
        moves: impl Iterator<Item = (usize, usize)>,
        extra: usize,
    ) -> Option<Longs> {
        let long: Vec<(usize, usize, usize)> = moves
            .map(|(from, to)| (from, to, self.lens[from].load(Mo::Relaxed) as usize))
            .filter(|&(_, _, len)| len > 8)
            .collect();
        let need = long.iter().map(|&(_, _, len)| len).sum::<usize>() + extra;
        if need == 0 {
            return None;
        }
        let new = Longs::with_capacity(need + need / 2);
        for (from, to, _) in long {
            let off = new.push(self.full(from)).expect("sized for the live bytes");
            new.offs[to].store(off, Mo::Relaxed);
        }
        Some(new)
    }

    /// Publishes a new long-separator buffer (or none) and retires the old.
    fn set_longs(&self, new: Option<Longs>, g: Option<&Guard>) {
        let new = new.map_or(std::ptr::null_mut(), |l| Box::into_raw(Box::new(l)));
        retire_longs(self.longs.swap(new, Mo::AcqRel), g);
    }

    /// Inserts separator `s` at `i` and child `kid` right of it. The caller
    /// holds the node's lock (or the node is not yet published, `g` = None).
    fn insert_at(&self, i: usize, s: Sep, kid: usize, g: Option<&Guard>) {
        let n = self.n.load(Mo::Relaxed);
        assert!(n < KEYS, "node overflow");
        let longs = self.longs();
        for j in (i..n).rev() {
            self.move_slot(longs, j, j + 1);
        }
        self.pairs[i].0.store(s.prefix, Mo::Relaxed);
        self.pairs[i].1.store(kid, Mo::Relaxed);
        self.lens[i].store(s.len, Mo::Relaxed);
        if let Some(f) = s.full.as_deref().filter(|_| s.len > 8) {
            self.set_full(i, f, 0..n + 1, g);
        }
        self.n.store(n + 1, Mo::Relaxed);
    }

    /// Removes separator `i` and the child right of it (caller holds the lock).
    /// A long separator's bytes stay in the buffer until it is compacted.
    fn remove_at(&self, i: usize) {
        let n = self.n.load(Mo::Relaxed);
        let longs = self.longs();
        for j in i + 1..n {
            self.move_slot(longs, j, j - 1);
        }
        self.n.store(n - 1, Mo::Relaxed);
    }

    /// Splits an overfull node (caller holds its lock): keeps the left half in
    /// place and returns the separator moving up and the (unpublished) right
    /// half. Each half gets a compacted long-separator buffer (when it has
    /// long separators): left in place, half of the old buffer would be
    /// garbage.
    fn split(&self, g: &Guard) -> (Sep, Box<Node>) {
        let n = self.n.load(Mo::Relaxed);
        let mid = n / 2;
        let up = self.sep(mid);
        let right = Node::new(self.level);
        right.lo.store(up.prefix, Mo::Relaxed);
        right.hi.store(self.hi.load(Mo::Relaxed), Mo::Relaxed);
        self.hi.store(up.prefix, Mo::Relaxed);
        let rn = n - mid - 1;
        right
            .kid0
            .store(self.pairs[mid].1.load(Mo::Relaxed), Mo::Relaxed);
        for j in 0..rn {
            let (p, c) = &self.pairs[mid + 1 + j];
            right.pairs[j].0.store(p.load(Mo::Relaxed), Mo::Relaxed);
            right.pairs[j].1.store(c.load(Mo::Relaxed), Mo::Relaxed);
            right.lens[j].store(self.lens[mid + 1 + j].load(Mo::Relaxed), Mo::Relaxed);
        }
        if self.longs().is_some() {
            right.set_longs(self.compacted((0..rn).map(|j| (mid + 1 + j, j)), 0), None);
            self.set_longs(self.compacted((0..mid).map(|j| (j, j)), 0), Some(g));
        }
        right.n.store(rn, Mo::Relaxed);
        self.n.store(mid, Mo::Relaxed);
        (up, right)
    }

    /// DRAM bytes of this node (not its children).
    fn bytes(&self) -> u64 {
        let mut b = std::mem::size_of::<Node>();
        if let Some(l) = self.longs() {
            b += std::mem::size_of::<Longs>() + l.buf.len();
        }
        b as u64
    }

    fn children(&self) -> impl Iterator<Item = usize> + '_ {
        (0..=self.count()).map(|i| self.child(i))
    }
}

impl Drop for Node {
    fn drop(&mut self) {
        // Children are raw pointers, freed by `free_deep`.
        retire_longs(*self.longs.get_mut(), None);
    }
}

/// A level-0 child in the bucket table: its leaf offset over 256 (leaves
/// are 256-byte aligned), so pools up to 1 TiB; None when it does not fit
/// (its bucket's entry is then off).
const KID_SHIFT: u32 = 8;

#[inline]
fn kid_units(off: usize) -> Option<u32> {
    if !off.is_multiple_of(1 << KID_SHIFT) {
        return None;
    }
    u32::try_from(off >> KID_SHIFT).ok()
}

/// Takes a node's lock (writers, under the structure mutex).
fn lock(n: &Node) -> u64 {
    vlock::lock(&n.lock).expect("inner nodes are never obsolete")
}

/// Where a key routes: the leaf, and the level-0 node it was read from with
/// that node's version (for the final validation and for prefetching the
/// leaves that follow).
pub struct Route<'a> {
    pub leaf: u64,
    from: From<'a>,
    v: u64,
    idx: usize,
    /// The leaf's low key (the nearest separator left of the path; None =
    /// -inf), when the caller asked for it.
    pub low: Option<Sep>,
}

/// What a route read last before the leaf: a level-0 node, or a bucket
/// table entry ([`bucket`]), which writers keep exact under the same
/// protocol.
enum From<'a> {
    Node(&'a Node),
    Bucket(&'a bucket::Entry),
}

impl Route<'_> {
    /// Whether the level-0 node (or the bucket table entry) is unchanged since
    /// the route was read. A reader
    /// calls this after taking the leaf's version (`read_begin`, or after
    /// locking it); when it holds, the leaf was the right one for the key at the
    /// moment its version was taken, so what the reader then reads from the
    /// leaf under that (validated) version is complete for the key.
    ///
    /// Why this closes the split race: a split moves the upper half of leaf L
    /// to a new right sibling while holding L's lock, and inserts the new
    /// separator into L's level-0 node N (locking N, bumping its version)
    /// *before* releasing L's lock. A reader that routed through N to L then
    /// either (a) took L's version before the split locked L: its leaf
    /// validation fails; or (b) took it after the split released L (spinning
    /// while it was locked): by then N's new version is visible (the leaf
    /// unlock is a release store after N's unlock, the reader's leaf version an
    /// acquire load before this check), so this check fails unless the reader
    /// had routed with the new separator, i.e. to the right leaf. The removal
    /// of an empty leaf, and of the right leaf of a merge, is covered the same
    /// way: the removed leaf is obsolete when unlocked, and its range (with a
    /// merge, its entries too) only ever moves to its predecessor, which stays
    /// locked until the entries, the chain and this node are all updated.
    /// A level-0 node's own key range only changes when it splits, which
    /// changes its version too. The same holds for a bucket table entry: the
    /// structure modification rewrites (and so re-versions) every entry whose
    /// separators or leaves it changed before it returns, which is before the
    /// leaf is unlocked ([`Buckets::refresh`]).
    #[inline]
    pub fn still_valid(&self) -> bool {
        match self.from {
            From::Node(n) => vlock::validate(&n.lock, self.v),
            From::Bucket(e) => vlock::validate(Buckets::lock_of(e), self.v),
        }
    }

    /// The leaf `j` places after the routed one in the same level-0 node (or
    /// bucket table entry): a hint for prefetching, not validated.
    #[inline]
    pub fn leaf_after(&self, j: usize) -> Option<u64> {
        match self.from {
            From::Node(n) => {
                let i = self.idx + j;
                (i <= n.count()).then(|| n.child(i) as u64)
            }
            From::Bucket(e) => Buckets::leaf_after(e, self.idx, j),
        }
    }
}

/// The DRAM inner tree: root pointer plus the structure-modification mutex.
/// It is `Send + Sync` through its fields (`AtomicPtr`, `Mutex`); that is sound
/// because nodes are only changed through atomics, under their locks and the
/// mutex, and only read optimistically (see the module documentation).
pub struct Inner {
    root: AtomicPtr<Node>,
    /// Serialises structure modifications (see the module documentation).
    smo: Mutex<()>,
    /// Jumps from a key's top bits to its level-0 node ([`dir`]).
    dir: Dir,
    /// Jumps from a key's top bits to its leaf ([`bucket`]).
    buckets: Buckets,
    /// The byte values of the separators, for the route's guesses
    /// ([`alphabet`]).
    alpha: Alphabet,
}

impl Inner {
    /// Bulk-builds a tree over `leaves` (in key order; the first has no low key).
    pub fn build(leaves: Vec<(Option<Sep>, u64)>) -> Inner {
        let count = leaves.len();
        let alpha = Alphabet::new();
        for s in leaves.iter().filter_map(|(s, _)| s.as_ref()) {
            alpha.learn(s.prefix);
        }
        let (root, level) = build(leaves);
        let buckets = Buckets::new(count);
        // SAFETY: just built, not yet published; nodes live as long as the tree.
        buckets.turn_on_if_large(unsafe { &*root }, &alpha);
        Inner {
            root: AtomicPtr::new(root),
            smo: Mutex::new(()),
            dir: Dir::new(level > 0),
            buckets,
            alpha,
        }
    }

    /// Descends to the leaf whose range holds `k` (`le`), or the leaf holding
    /// the largest keys below `k` (`!le`), with optimistic lock coupling;
    /// `want_low` also returns the leaf's low key. Never blocks on a mutex;
    /// spins only while a node is locked by a structure modification, and
    /// restarts from the root when a validation fails.
    ///
    /// The caller is pinned (`_g`): long separators read on the way may be
    /// retired concurrently.
    #[inline]
    pub fn route<'a>(
        &'a self,
        k: &SearchKey<'_>,
        le: bool,
        want_low: bool,
        _g: &'a Guard,
    ) -> Route<'a> {
        if le && !want_low {
            if let Some((leaf, e, v, idx)) = self.buckets.route(k) {
                return Route {
                    leaf,
                    from: From::Bucket(e),
                    v,
                    idx,
                    low: None,
                };
            }
            if let Some(rt) = self.dir.route(k) {
                return rt;
            }
        }
        'restart: loop {
            let p = self.root.load(Mo::Acquire);
            // SAFETY: the root pointer always holds a fully built node (published
            // with a release store) and nodes live as long as the tree.
            let mut n: &'a Node = unsafe { &*p };
            let Some(mut v) = vlock::read_begin(&n.lock) else {
                continue;
            };
            // A root split stores the new root before it unlocks the old one: if
            // the pointer is unchanged after the old root's version was taken,
            // that version still covers every key.
            if self.root.load(Mo::Acquire) != p {
                continue;
            }
            let mut low = None;
            // The current node's prefix range (from the separators around it
            // in its parent) and the part of it to search first.
            let (mut lo, mut hi) = (0u64, u64::MAX);
            let mut win = None;
            loop {
                let i = match win {
                    Some((a, b)) => n.bound_in(k, le, a, b),
                    None => n.bound(k, le),
                };
                if want_low && i > 0 {
                    low = Some(n.sep(i - 1));
                }
                let c = n.child(i);
                if n.level > 0 {
                    // Where the key should lie in the child, guessed from its
                    // range and its hinted count; its lines are asked for now.
                    // Torn values only make a wrong guess (see `bound_in`).
                    let m = n.count();
                    if i > 0 {
                        lo = n.pairs[i - 1].0.load(Mo::Relaxed);
                    }
                    if i < m {
                        hi = n.pairs[i].0.load(Mo::Relaxed);
                    }
                    let cnt = n.hint(i);
                    win = window(&self.alpha, k.prefix, lo, hi, cnt);
                    prefetch_node(c, cnt, win);
                }
                // Validate before using `c`: a torn read may yield a slot that is
                // not (yet) a child; a validated one also makes the child's
                // initialisation visible (acquire on the version word).
                if !vlock::validate(&n.lock, v) {
                    continue 'restart;
                }
                if n.level == 0 {
                    if le {
                        self.dir.fill(k.prefix, n, v, false);
                    }
                    return Route {
                        leaf: c as u64,
                        from: From::Node(n),
                        v,
                        idx: i,
                        low,
                    };
                }
                // SAFETY: `c` comes from a validated version of a level > 0 node:
                // a published node, and nodes are never freed while the tree lives.
                let cn: &'a Node = unsafe { &*(c as *const Node) };
                let Some(cv) = vlock::read_begin(&cn.lock) else {
                    continue 'restart;
                };
                // Lock coupling: `n` unchanged after `cn`'s version was taken, so
                // `cn` held `k` at that moment (a split of `cn` locks and changes
                // `n` too, and keeps `cn` locked until `n` is updated).
                if !vlock::validate(&n.lock, v) {
                    continue 'restart;
                }
                n = cn;
                v = cv;
            }
        }
    }

    /// Builds the bucket table ([`bucket`]) from `leaves` leaves instead of
    /// the default, now if the tree already has that many (tests: small trees
    /// with a table).
    pub fn set_bucket_table_min_leaves(&self, leaves: usize) {
        self.buckets.min_leaves.store(leaves, Mo::Relaxed);
        let s = self.lock();
        self.buckets.turn_on_if_large(s.root(), &self.alpha);
    }

    /// Takes the structure-modification mutex. Tries it for a while before
    /// blocking: a holder keeps it for about a microsecond (one separator into
    /// a level-0 node), while a blocked waiter sleeps in the kernel and waits
    /// for a wake-up that costs several times that (`std`'s own spin before
    /// sleeping is shorter than the hold).
    pub fn lock(&self) -> Smo<'_> {
        use std::sync::TryLockError;
        let spun = (0..SMO_SPINS).find_map(|_| match self.smo.try_lock() {
            Ok(m) => Some(m),
            Err(TryLockError::Poisoned(e)) => Some(e.into_inner()),
            Err(TryLockError::WouldBlock) => {
                std::hint::spin_loop();
                None
            }
        });
        Smo {
            inner: self,
            _m: spun.unwrap_or_else(|| self.smo.lock().unwrap_or_else(|e| e.into_inner())),
        }
    }
}

impl Drop for Inner {
    fn drop(&mut self) {
        let root = *self.root.get_mut();
        // SAFETY: `&mut self`: no reader or writer can reach the tree any more;
        // every node is owned by exactly one parent (or is the root).
        unsafe { free_deep(root) };
    }
}

/// The structure-modification mutex, held: the only way to change the tree.
pub struct Smo<'a> {
    inner: &'a Inner,
    _m: MutexGuard<'a, ()>,
}

impl<'a> Smo<'a> {
    fn root(&self) -> &'a Node {
        // SAFETY: nodes live as long as the tree; the mutex orders this load
        // after the previous writer's changes.
        unsafe { &*self.inner.root.load(Mo::Acquire) }
    }

    /// The root-to-level-0 path towards `k`, with the child index taken at each
    /// node. Nothing changes the tree while the mutex is held, so plain loads
    /// see a consistent tree.
    fn path(&self, k: &SearchKey<'_>) -> Vec<(&'a Node, usize)> {
        let mut out = Vec::with_capacity(8);
        let mut n = self.root();
        loop {
            let i = n.bound(k, true);
            out.push((n, i));
            if n.level == 0 {
                return out;
            }
            // SAFETY: children of a live node are live.
            n = unsafe { &*n.kid(i) };
        }
    }

    /// Adds leaf `leaf` with low key `sep` (which is not yet a separator), in
    /// place: the level-0 node and every ancestor the split propagates into
    /// are locked bottom-up, changed, and unlocked only when all are done (so
    /// a reader never validates a child against a parent that does not know
    /// its new sibling yet); a root split publishes a new root above the old
    /// one before the old one is unlocked. The leaf the separator came from is
    /// still locked by the caller (see [`Route::still_valid`]).
    pub fn insert(&mut self, sep: Sep, leaf: u64, g: &Guard) {
        let kb = sep.to_vec();
        self.inner.alpha.learn(sep.prefix);
        let path = self.path(&SearchKey::new(&kb));
        // The bucket table entries to rewrite: those of the prefixes from the
        // new separator's to the next separator's (or the level-0 node's
        // upper fence): the range whose leaf changes.
        let span = self.inner.buckets.is_on().then(|| next_sep(&path));
        let mut held: Vec<(&Node, u64)> = Vec::with_capacity(path.len());
        let mut carry = Some((sep, leaf as usize));
        // A level-0 node split off here (its directory slots are filled once
        // it is unlocked).
        let mut split0 = None;
        for (j, &(n, i)) in path.iter().enumerate().rev() {
            // The child this path went through gained a separator (or split,
            // and `carry` holds its right half): its hint here is refreshed,
            // before a split of this node moves it.
            let below = path.get(j + 1).map(|&(c, _)| c);
            let Some((s, c)) = carry.take() else {
                if let Some(b) = below {
                    n.set_hint(i, b.count());
                }
                break;
            };
            held.push((n, lock(n)));
            n.insert_at(i, s, c, Some(g));
            if let Some(b) = below {
                n.set_hint(i, b.count());
            }
            if n.nchildren() > FANOUT {
                let (up, right) = n.split(g);
                let rc = right.count();
                let rp = new_node(right);
                if n.level == 0 {
                    split0 = Some(rp);
                }
                carry = Some((up, hinted(rp as usize, rc)));
            }
        }
        if let Some((up, right)) = carry {
            let old = path[0].0;
            let r = Node::new(old.level + 1);
            r.kid0.store(
                hinted(old as *const Node as usize, old.count()),
                Mo::Relaxed,
            );
            r.insert_at(0, up, right, None);
            self.inner.root.store(new_node(r), Mo::Release);
            self.inner.dir.turn_on();
        }
        for (n, v) in held {
            vlock::unlock(&n.lock, v, true, false);
        }
        if let Some(rp) = split0 {
            // SAFETY: published above; nodes live as long as the tree.
            self.inner.dir.fill_node(unsafe { &*rp });
        }
        let b = &self.inner.buckets;
        b.leaves.fetch_add(1, Mo::Relaxed);
        if b.is_on() {
            // (A level-0 node split changes no entry: entries list
            // separators and leaves, whichever node holds them.)
            b.refresh(self.root(), &kb, span.flatten().as_deref());
        } else {
            b.turn_on_if_large(self.root(), &self.inner.alpha);
        }
    }

    /// Removes leaf `leaf`, whose low key is `low`, when its separator sits in
    /// its level-0 node (it is not that node's first child); false otherwise
    /// (nothing changed). Only the level-0 node is locked and changed.
    pub fn remove(&mut self, low: &[u8], leaf: u64) -> bool {
        let k = SearchKey::new(low);
        let path = self.path(&k);
        let &(n, i) = path.last().expect("non-empty path");
        if i == 0 || n.child(i) as u64 != leaf || n.cmp_sep(i - 1, &k) != Ordering::Equal {
            return false;
        }
        let v = lock(n);
        n.remove_at(i - 1);
        vlock::unlock(&n.lock, v, true, false);
        if let Some(&(p, pi)) = path.len().checked_sub(2).and_then(|j| path.get(j)) {
            p.set_hint(pi, n.count());
        }
        // The removed leaf's range, now its left neighbour's: from its low
        // key to the separator that now follows (or the node's upper fence).
        let b = &self.inner.buckets;
        b.leaves.fetch_sub(1, Mo::Relaxed);
        if b.is_on() {
            let next = if i - 1 < n.count() {
                Some(n.sep_vec(i - 1))
            } else {
                next_sep(&path[..path.len() - 1])
            };
            b.refresh(self.root(), low, next.as_deref());
        }
        true
    }

    /// DRAM bytes of the tree, its nodes and its level-0 directory
    /// (consistent: the mutex is held).
    pub fn bytes(&self) -> u64 {
        self.bytes_of_nodes() + self.inner.dir.bytes() + self.inner.buckets.bytes()
    }

    /// DRAM bytes of the nodes alone.
    pub fn bytes_of_nodes(&self) -> u64 {
        bytes(self.root())
    }

    /// Leaves of the tree in key order (tests and consistency checks).
    pub fn leaves(&self, out: &mut Vec<u64>) {
        leaves(self.root(), out)
    }

    /// Checks what the structure's readers rely on beyond the leaves: every
    /// node's separator prefixes in order, and every hint equal to its child's
    /// count (a stale hint costs readers a second round of misses, not a wrong
    /// answer, but writers keep them exact).
    pub fn check(&self) -> Result<(), String> {
        check(self.root(), 0, u64::MAX)?;
        // Every node the directory names is a level-0 node of this tree (its
        // slots may be stale: readers check the node's fences).
        let mut level0 = std::collections::HashSet::new();
        level0_nodes(self.root(), &mut level0);
        if let Some(a) = self.inner.dir.named().find(|a| !level0.contains(a)) {
            return Err(format!(
                "the level-0 directory names {a:#x}, not a level-0 node of the tree"
            ));
        }
        // The bucket table is exact: every entry as the tree says.
        self.inner.buckets.check(self.root())
    }
}

/// Bulk-builds a tree over `leaves` (in key order; the first has no low key);
/// returns the root and its level.
fn build(leaves: Vec<(Option<Sep>, u64)>) -> (*mut Node, u8) {
    let mut level: Vec<(Option<Sep>, Box<Node>)> = Vec::new();
    let mut cur: Option<(Option<Sep>, Box<Node>)> = None;
    let mut first = true;
    for (sep, off) in leaves {
        match &mut cur {
            Some((_, n)) if n.nchildren() < FILL => {
                n.insert_at(
                    n.count(),
                    sep.expect("only the first leaf has no low key"),
                    off as usize,
                    None,
                );
            }
            _ => {
                if let Some(c) = cur.take() {
                    level.push(c);
                }
                let n = Node::new(0);
                n.kid0.store(off as usize, Mo::Relaxed);
                cur = Some((if first { None } else { sep }, n));
            }
        }
        first = false;
    }
    if let Some(c) = cur.take() {
        level.push(c);
    }
    if level.is_empty() {
        level.push((None, Node::new(0)));
    }
    set_fences(&level);
    let mut lvl = 1u8;
    while level.len() > 1 {
        let mut up: Vec<(Option<Sep>, Box<Node>)> = Vec::new();
        let mut cur: Option<(Option<Sep>, Box<Node>)> = None;
        for (sep, node) in level {
            let cnt = node.count();
            let p = hinted(new_node(node) as usize, cnt);
            match &mut cur {
                Some((_, n)) if n.nchildren() < FILL => {
                    n.insert_at(
                        n.count(),
                        sep.expect("only the first node has no low key"),
                        p,
                        None,
                    );
                }
                _ => {
                    if let Some(c) = cur.take() {
                        up.push(c);
                    }
                    let n = Node::new(lvl);
                    n.kid0.store(p, Mo::Relaxed);
                    cur = Some((sep, n));
                }
            }
        }
        if let Some(c) = cur.take() {
            up.push(c);
        }
        level = up;
        set_fences(&level);
        lvl += 1;
    }
    let (_, root) = level.pop().expect("one root");
    (new_node(root), lvl - 1)
}

/// Sets the fences of one level of a tree being built: each node's range
/// runs from its low separator (none for the first) to the next node's.
fn set_fences(level: &[(Option<Sep>, Box<Node>)]) {
    for (j, (sep, n)) in level.iter().enumerate() {
        n.lo.store(sep.as_ref().map_or(0, |s| s.prefix), Mo::Relaxed);
        let hi = level.get(j + 1).and_then(|(s, _)| s.as_ref());
        n.hi.store(hi.map_or(u64::MAX, |s| s.prefix), Mo::Relaxed);
    }
}

/// Where the pairs begin in a node.
const PAIRS: usize = std::mem::offset_of!(Node, pairs);
const _: () = assert!(PAIRS + KEYS * 16 <= std::mem::size_of::<Node>());

/// The separators of a node with `count` of them, prefix range `lo..=hi`,
/// to search first for prefix `kp` (see [`Node::bound_in`]): [`WINDOW`] of
/// them around the key's place were the separators spread evenly over the
/// range (leaf low keys of uniform keys nearly are; a miss costs a second
/// round of misses for the rest). None (search all) for nodes barely larger
/// than the window.
#[inline]
fn window(alpha: &Alphabet, kp: u64, lo: u64, hi: u64, count: usize) -> Option<(usize, usize)> {
    let count = count.min(KEYS);
    if count <= WINDOW + 2 || hi <= lo {
        return None;
    }
    // In floating point: a 128-bit integer division is a library call
    // (`__udivti3`, 1 % of an update run's samples). The cast saturates.
    let frac = alpha.frac(kp, lo, hi) * count as f64;
    let a = (frac as usize)
        .saturating_sub(WINDOW / 2)
        .min(count - WINDOW);
    Some((a, a + WINDOW))
}

/// Asks for every line a search of the node at `addr` will read, as soon as
/// its address is known: its version word and the separators of `win` (and
/// the one either side of it), or all `count` of them, then arrive together
/// instead of one miss after the other. `addr` and `count` may be torn reads
/// (nothing is trusted before validation); a prefetch of any address is
/// harmless.
#[inline(always)]
fn prefetch_node(addr: usize, count: usize, win: Option<(usize, usize)>) {
    match win {
        Some((a, b)) => {
            crate::prefetch::lines(addr, 16);
            let first = PAIRS + a.saturating_sub(1) * 16;
            let end = PAIRS + (b + 1).min(KEYS) * 16;
            crate::prefetch::lines(addr.wrapping_add(first), end.saturating_sub(first));
        }
        None => crate::prefetch::lines(addr, PAIRS + count.min(KEYS) * 16),
    }
}

/// Node memory: huge-page-backed slots (see [`crate::arena`]).
static NODES: Slab = Slab::new(std::mem::size_of::<Node>());
const _: () = assert!(std::mem::align_of::<Node>() <= 64);

/// Moves a node built in a `Box` into a slot of [`NODES`] (its address is
/// then stable and published by the caller).
fn new_node(n: Box<Node>) -> *mut Node {
    let p = NODES.alloc().cast::<Node>();
    // A user-space address on every 64-bit platform we build for: its top
    // byte is free for the hint.
    assert!(p as usize & !ADDR_MASK == 0, "node address above 2^56");
    // SAFETY: the slot is fresh, large enough and 64-byte aligned (>= Node's);
    // nobody else has seen the node yet, so moving it is fine.
    unsafe { p.write(*n) };
    p
}

/// Frees a whole tree.
///
/// # Safety
/// No reader or writer can reach `root` any more.
unsafe fn free_deep(root: *mut Node) {
    // SAFETY: forwarded contract; nodes come from `new_node`.
    let n = unsafe { &*root };
    if n.level > 0 {
        for k in n.children() {
            // SAFETY: each child is owned by this node only.
            unsafe { free_deep(k as *mut Node) };
        }
    }
    // SAFETY: nobody can reach the node (contract) and its children are freed;
    // dropping it retires its long-key array.
    unsafe { std::ptr::drop_in_place(root) };
    NODES.free(root.cast());
}

/// DRAM bytes of a tree that does not change during the call.
fn bytes(n: &Node) -> u64 {
    let mut b = n.bytes();
    if n.level > 0 {
        for k in n.children() {
            // SAFETY: children of a live node are live.
            b += bytes(unsafe { &*(k as *const Node) });
        }
    }
    b
}

/// See [`Smo::check`].
fn check(n: &Node, lo: u64, hi: u64) -> Result<(), String> {
    let m = n.count();
    if (1..m).any(|i| n.pairs[i - 1].0.load(Mo::Relaxed) > n.pairs[i].0.load(Mo::Relaxed)) {
        return Err(format!(
            "inner node at level {} has separators out of order",
            n.level
        ));
    }
    let fences = (n.lo.load(Mo::Relaxed), n.hi.load(Mo::Relaxed));
    if fences != (lo, hi) {
        return Err(format!(
            "inner node at level {}: fences {:#x}..{:#x}, its parent's separators {lo:#x}..{hi:#x}",
            n.level, fences.0, fences.1
        ));
    }
    if n.level > 0 {
        for i in 0..=m {
            let clo = if i > 0 {
                n.pairs[i - 1].0.load(Mo::Relaxed)
            } else {
                lo
            };
            let chi = if i < m {
                n.pairs[i].0.load(Mo::Relaxed)
            } else {
                hi
            };
            // SAFETY: children of a live node are live.
            let c = unsafe { &*n.kid(i) };
            if n.hint(i) != c.count() {
                return Err(format!(
                    "inner node at level {}: child {i} has {} separators, its hint says {}",
                    n.level,
                    c.count(),
                    n.hint(i)
                ));
            }
            check(c, clo, chi)?;
        }
    }
    Ok(())
}

/// The level-0 nodes of a tree that does not change during the call.
fn level0_nodes(n: &Node, out: &mut std::collections::HashSet<usize>) {
    if n.level == 0 {
        out.insert(n as *const Node as usize);
    } else {
        for k in n.children() {
            // SAFETY: children of a live node are live.
            level0_nodes(unsafe { &*(k as *const Node) }, out);
        }
    }
}

/// Leaves of a tree that does not change during the call, in key order.
fn leaves(n: &Node, out: &mut Vec<u64>) {
    if n.level == 0 {
        out.extend(n.children().map(|k| k as u64));
    } else {
        for k in n.children() {
            // SAFETY: children of a live node are live.
            leaves(unsafe { &*(k as *const Node) }, out);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ebr as epoch;

    fn key(i: u64) -> Vec<u8> {
        i.to_be_bytes().to_vec()
    }

    fn leaf_of(t: &Inner, k: &[u8], le: bool) -> u64 {
        let g = epoch::pin();
        let r = t.route(&SearchKey::new(k), le, false, &g);
        assert!(r.still_valid());
        r.leaf
    }

    #[test]
    fn build_insert_route_remove() {
        let input: Vec<(Option<Sep>, u64)> = (0..1000u64)
            .map(|i| ((i > 0).then(|| Sep::from_key(&key(i * 10))), i + 1))
            .collect();
        let t = Inner::build(input);
        for i in 0..1000u64 {
            assert_eq!(leaf_of(&t, &key(i * 10 + 5), true), i + 1);
        }
        let g = epoch::pin();
        // Insert new leaves at i*10+5 (enough to split level-0 nodes and grow
        // the root).
        for i in 0..1000u64 {
            t.lock()
                .insert(Sep::from_key(&key(i * 10 + 5)), 5000 + i, &g);
        }
        for i in 0..1000u64 {
            assert_eq!(leaf_of(&t, &key(i * 10 + 6), true), 5000 + i);
            assert_eq!(leaf_of(&t, &key(i * 10 + 5), false), i + 1);
        }
        let mut all = Vec::new();
        t.lock().leaves(&mut all);
        assert_eq!(all.len(), 2000);
        t.lock().check().unwrap();
        let before = t.lock().bytes();
        assert!(t.lock().remove(&key(505), 5050));
        assert!(!t.lock().remove(&key(505), 5050));
        t.lock().check().unwrap();
        assert_eq!(leaf_of(&t, &key(506), true), 51);
        assert_eq!(t.lock().bytes(), before);
        let r = t.route(&SearchKey::new(&key(506)), true, true, &g);
        assert_eq!(r.low.map(|s| s.to_vec()), Some(key(500)));
    }

    #[test]
    fn long_separators() {
        let lk = |i: u64| format!("separator-{i:08}-long").into_bytes();
        let t = Inner::build(vec![(None, 1)]);
        let g = epoch::pin();
        for i in 0..3000u64 {
            t.lock().insert(Sep::from_key(&lk(i * 2)), 10 + i, &g);
        }
        for i in 0..3000u64 {
            assert_eq!(leaf_of(&t, &lk(i * 2 + 1), true), 10 + i);
            let g = epoch::pin();
            let r = t.route(&SearchKey::new(&lk(i * 2 + 1)), true, true, &g);
            assert_eq!(r.low.map(|s| s.to_vec()), Some(lk(i * 2)));
        }
        for i in (0..3000u64).step_by(3).skip(1) {
            t.lock().remove(&lk(i * 2), 10 + i);
        }
        // Routing after the removals: a removed separator's range went to
        // the leaf on its left.
        for i in 0..3000u64 {
            let want = if i % 3 == 0 && i > 0 { 9 + i } else { 10 + i };
            assert_eq!(leaf_of(&t, &lk(i * 2 + 1), true), want, "{i}");
        }
        let mut all = Vec::new();
        t.lock().leaves(&mut all);
        assert!(all.len() < 3001 && all.len() > 2000);
        assert!(t.lock().bytes() > all.len() as u64 * 20);
    }

    /// A node's separators (prefix, length, whole bytes through the
    /// append-only long-separator buffer) against a vector of keys, through
    /// random inserts, removes and splits: appends, compactions and the
    /// right half's own buffer all return what was stored.
    #[test]
    fn long_separator_buffer_matches_a_vector() {
        let mut model: Vec<Vec<u8>> = Vec::new();
        let mut node = Node::new(0);
        let mut x = 0x9E37_79B9_7F4A_7C15u64;
        let mut next = |m: u64| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x % m
        };
        let check = |node: &Node, model: &[Vec<u8>], step: usize| {
            assert_eq!(node.count(), model.len(), "step {step}");
            for (i, m) in model.iter().enumerate() {
                assert_eq!(node.sep(i).to_vec(), *m, "step {step}, separator {i}");
                let want: &[u8] = if m.len() > 8 { m } else { &[] };
                assert_eq!(node.full(i), want, "step {step}, separator {i}");
            }
        };
        let (mut compactions, mut last) = (0, std::ptr::null_mut());
        for step in 0..20_000 {
            let r = next(10);
            if model.len() == KEYS {
                let (up, right) = node.split(&epoch::pin());
                let mid = KEYS / 2;
                assert_eq!(up.to_vec(), model[mid], "step {step}");
                check(&right, &model[mid + 1..], step);
                model.truncate(mid);
            } else if r < 7 || model.is_empty() {
                let i = next(model.len() as u64 + 1) as usize;
                let len = if next(3) == 0 { next(9) } else { 9 + next(60) } as usize;
                let k: Vec<u8> = (0..len).map(|_| next(256) as u8).collect();
                node.insert_at(i, Sep::from_key(&k), step, None);
                model.insert(i, k);
            } else {
                let i = next(model.len() as u64) as usize;
                node.remove_at(i);
                model.remove(i);
            }
            check(&node, &model, step);
            let l = node.longs.load(Mo::Relaxed);
            if l != last {
                compactions += 1;
                last = l;
            }
            if let Some(l) = node.longs() {
                assert!(l.buf.len() <= (2 * KEYS * 68).max(LONGS_MIN), "step {step}");
            }
        }
        // Appends, not a new buffer per insert.
        assert!(compactions > 10 && compactions < 2_000, "{compactions}");
        node = Node::new(0);
        assert!(node.longs().is_none());
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

    /// A window search gives the full search's answer for every window,
    /// right or wrong, and every key: a wrong guess only costs a fallback.
    #[test]
    fn a_window_search_answers_as_the_full_search() {
        let n = Node::new(0);
        for i in 0..40u64 {
            // Pairs of equal prefixes (long keys sharing 8 bytes) among them.
            let k = if i % 5 == 0 {
                let mut k = key(i / 2 * 100);
                k.extend_from_slice(&[b'x'; 4]);
                k
            } else {
                key(i * 50)
            };
            n.insert_at(i as usize, Sep::from_key(&k), i as usize + 1, None);
        }
        let mut probes: Vec<Vec<u8>> = (0..2100u64).step_by(7).map(key).collect();
        probes.extend((0..20u64).map(|i| {
            let mut k = key(i * 100);
            k.extend(std::iter::repeat_n(b'x', 3 + (i % 3) as usize));
            k
        }));
        for k in &probes {
            let sk = SearchKey::new(k);
            for le in [true, false] {
                let want = n.bound(&sk, le);
                for a in 0..=44 {
                    for b in a..=44 {
                        assert_eq!(n.bound_in(&sk, le, a, b), want, "window {a}..{b}");
                    }
                }
            }
        }
    }

    /// A guessed window lies inside a node whatever the hint says (a hint is
    /// never above `KEYS`, but nothing is trusted), and its prefetch stays
    /// within the node.
    #[test]
    fn windows_stay_inside_the_node() {
        let n = Node::new(0);
        let base = &n as *const _ as usize;
        // The raw guess, and one over a learned alphabet (hex digits).
        let hex = Alphabet::new();
        hex.learn(prefix_of(b"01234567"));
        hex.learn(prefix_of(b"89abcdef"));
        let alphas = [Alphabet::new(), hex];
        for count in [
            0,
            1,
            WINDOW,
            WINDOW + 2,
            WINDOW + 3,
            48,
            KEYS,
            KEYS + 1,
            200,
            255,
        ] {
            for (kp, lo, hi) in [
                (5, 0, 10),
                (0, 0, u64::MAX),
                (u64::MAX, 0, u64::MAX),
                (7, 9, 3),
                (50, 10, 20),
            ] {
                for alpha in &alphas {
                    let w = window(alpha, kp, lo, hi, count);
                    if let Some((a, b)) = w {
                        assert!(
                            b <= KEYS && b - a == WINDOW,
                            "{count} {kp} {lo} {hi}: {a}..{b}"
                        );
                    } else {
                        assert!(count.min(KEYS) <= WINDOW + 2 || hi <= lo);
                    }
                    prefetch_node(base, count, w);
                    prefetch_node(base, count, Some((200, 255)));
                }
            }
        }
    }

    /// Hints only steer prefetches and first guesses: with every hint wrong,
    /// every key still routes to its leaf; and writers keep them exact.
    #[test]
    fn wrong_hints_cost_no_wrong_route() {
        let input: Vec<(Option<Sep>, u64)> = (0..5000u64)
            .map(|i| ((i > 0).then(|| Sep::from_key(&key(i * 10))), i + 1))
            .collect();
        let t = Inner::build(input);
        t.lock().check().unwrap();
        let g = epoch::pin();
        for i in 0..3000u64 {
            t.lock()
                .insert(Sep::from_key(&key(i * 10 + 5)), 10_000 + i, &g);
        }
        t.lock().check().unwrap();
        fn scramble(n: &Node, salt: &mut usize) {
            if n.level == 0 {
                return;
            }
            for i in 0..=n.count() {
                *salt = salt.wrapping_mul(31).wrapping_add(7);
                n.set_hint(i, *salt % (KEYS + 1));
                // SAFETY: children of a live node are live.
                scramble(unsafe { &*n.kid(i) }, salt);
            }
        }
        let root = t.lock().root();
        scramble(root, &mut 1);
        assert!(t.lock().check().is_err(), "the check sees wrong hints");
        for i in 0..5000u64 {
            let want = if i < 3000 { 10_000 + i } else { i + 1 };
            assert_eq!(leaf_of(&t, &key(i * 10 + 6), true), want);
            assert_eq!(leaf_of(&t, &key(i * 10 + 5), false), i + 1);
        }
    }
}
