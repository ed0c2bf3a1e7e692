//! The list's DRAM index, and how it is rebuilt when a list is opened.
//!
//! Opening a list reads every record's header and key
//! ([`super::list::ListMap::open_or_create`]) and hands them here. The index
//! of the keys the service reads first — the metadata and the Raft log, every
//! key whose first byte is not [`keys::DATA`] — is built at once. The index of
//! the version keys (first byte [`keys::DATA`]), nearly all of a store's
//! records, is built by a background thread when there are at least
//! [`super::list::ListOptions::background_index`] of them: sorting them is
//! most of an open's time, and a replica that is far behind replaces that
//! state with a snapshot before it ever reads it (the build is then
//! abandoned). Anything that needs a version key waits for the build; the
//! other keys are served meanwhile. The build only touches copies in DRAM,
//! never the pool.
//!
//! The three key spaces are contiguous intervals — below `[DATA]`,
//! `[DATA] ..[DATA + 1]`, from `[DATA + 1]` — so while the build runs a range
//! is the concatenation of at most three ranges of the two trees.

use std::collections::BTreeMap as Tree;
use std::collections::HashMap;
use std::ops::Bound;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::thread::JoinHandle;

use crate::keys;

/// Where a live record is: its pool offset and size.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Loc {
    pub off: u64,
    pub size: u32,
}

/// One record found by a replay: its key's offset and length in the key
/// arena, and the record (`None`: a deletion).
pub(super) type Rec = (u32, u32, Option<Loc>);

const DATA_LO: &[u8] = &[keys::DATA];
const DATA_HI: &[u8] = &[keys::DATA + 1];

/// Whether `key` is in the version keys' space.
pub(super) fn is_data(key: &[u8]) -> bool {
    key.first() == Some(&keys::DATA)
}

/// A built index of version keys and the bytes of their live records.
struct Built {
    tree: Tree<Box<[u8]>, Loc>,
    live_bytes: u64,
}

/// A replay's version records and their keys.
type Input = Arc<(Vec<u8>, Vec<Rec>)>;

/// How many of a replay's last version records (in list order) are looked
/// up without waiting for a background build ([`Pending::recent`]).
const RECENT: usize = 4096;

/// The version keys' index while a background thread builds it.
struct Pending {
    input: Input,
    /// The outcome (a record, or None: deleted) of the last [`RECENT`]
    /// version records in list order, by key: an exact lookup of one of
    /// them needs no build. The last records hold what the log's newest
    /// entries wrote, which a restarting replica reads at once (its log
    /// after the applied index, entries carrying their versions); without
    /// this, that read waited for the whole build (10 ms at 76,000
    /// records). A later record decides a key, so the last records'
    /// outcome is the key's.
    recent: HashMap<Box<[u8]>, Option<Loc>, foldhash::fast::RandomState>,
    handle: Mutex<Option<JoinHandle<Option<Built>>>>,
    built: OnceLock<Built>,
    cancel: Arc<AtomicBool>,
    prio: Arc<Mutex<Prio>>,
}

impl Pending {
    /// The built index: the thread's, waited for, or — when the build was
    /// stopped ([`Index::stop_build`]) or no thread could be had — built
    /// here and now.
    fn get(&self) -> &Built {
        self.built.get_or_init(|| {
            let mut h = self.handle.lock().unwrap_or_else(|e| e.into_inner()).take();
            if h.as_ref().is_some_and(|t| !t.is_finished()) && !Prio::boost(&self.prio) {
                // The thread stays at the idle policy: it is told to stop
                // and left to end on its own; the index is built here.
                self.cancel.store(true, Ordering::Relaxed);
                h = None;
            }
            match h.map(JoinHandle::join) {
                Some(Ok(Some(b))) => b,
                // The build panicked: a bug, reported where it is needed.
                Some(Err(p)) => std::panic::resume_unwind(p),
                Some(Ok(None)) | None => {
                    build(&self.input.0, &self.input.1, None).expect("not cancelled")
                }
            }
        })
    }

    /// Whether using the index would not wait for the thread (it is built,
    /// its thread ended, or there is none). A stopped build is not done: the
    /// state is being replaced, and only a real use builds it then.
    fn done(&self) -> bool {
        self.built.get().is_some()
            || !self.cancel.load(Ordering::Relaxed)
                && self
                    .handle
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .as_ref()
                    .is_none_or(JoinHandle::is_finished)
    }
}

impl Drop for Pending {
    fn drop(&mut self) {
        // Abandoned (the list was replaced or closed): the thread stops at
        // its next check and its result is dropped.
        self.cancel.store(true, Ordering::Relaxed);
    }
}

/// The DRAM index of a list: key → live record.
#[derive(Default)]
pub(super) struct Index {
    /// Every key; while `pending`, the keys outside the version space.
    tree: Tree<Box<[u8]>, Loc>,
    pending: Option<Pending>,
    /// Keys appended in ascending order after every key of `tree` (a
    /// snapshot's records arrive sorted, [`Index::push_sorted`]), merged into
    /// `tree` in one bulk build by the first other change. Empty while
    /// `pending`.
    sorted: Vec<Entry>,
    /// Bytes of the records indexed in `tree` and `sorted` (a build's are
    /// added when it is settled).
    live: u64,
}

const EMPTY: &[u8] = &[];

type Entry = (Box<[u8]>, Loc);
type Sorted<'a> =
    std::iter::Map<std::slice::Iter<'a, Entry>, fn(&'a Entry) -> (&'a Box<[u8]>, &'a Loc)>;

/// An appended entry as a tree's iterator shows it (the item type of a
/// `BTreeMap<Box<[u8]>, Loc>` range, hence the `&Box`).
#[allow(clippy::borrowed_box)]
fn pair(e: &Entry) -> (&Box<[u8]>, &Loc) {
    (&e.0, &e.1)
}

type Part<'a> = std::iter::Flatten<
    std::option::IntoIter<std::collections::btree_map::Range<'a, Box<[u8]>, Loc>>,
>;

impl Index {
    /// Builds the index of a replay's records (`recs` in list order, their
    /// keys in `arena`). With at least `background` version records, those
    /// are indexed by a thread; otherwise here.
    #[cfg(test)]
    pub fn rebuild(arena: Vec<u8>, recs: Vec<Rec>, background: usize) -> Index {
        let mut early = Latest::default();
        let mut data = Vec::new();
        for r in recs {
            let key = &arena[r.0 as usize..(r.0 + r.1) as usize];
            if is_data(key) {
                data.push(r);
            } else {
                early.record(key, r.2);
            }
        }
        Index::rebuild_parts(arena, data, early, background)
    }

    /// [`Index::rebuild`] of a replay that kept the version records
    /// (`data`, list order, keys in `arena`) and replayed the others into
    /// `early`.
    pub fn rebuild_parts(
        arena: Vec<u8>,
        data: Vec<Rec>,
        early: Latest,
        background: usize,
    ) -> Index {
        let early = early.finish();
        let mut ix = Index {
            tree: early.tree,
            pending: None,
            sorted: Vec::new(),
            live: early.live_bytes,
        };
        if data.is_empty() {
            return ix;
        }
        let threaded = data.len() >= background;
        let mut recent = HashMap::with_capacity_and_hasher(RECENT, Default::default());
        if threaded {
            for &(o, l, loc) in &data[data.len().saturating_sub(RECENT)..] {
                recent.insert(Box::<[u8]>::from(&arena[o as usize..(o + l) as usize]), loc);
            }
        }
        let input: Input = Arc::new((arena, data));
        let cancel = Arc::new(AtomicBool::new(false));
        let prio = Arc::new(Mutex::new(Prio::default()));
        let (i, c, pr) = (input.clone(), cancel.clone(), prio.clone());
        // Without a thread (too few records, or `Err`) `Pending::get` builds
        // it: at once below, or at the first use.
        let handle = threaded
            .then(|| {
                std::thread::Builder::new()
                    .name("ferrite-list-index".into())
                    .spawn(move || {
                        Prio::lower(&pr);
                        let b = build(&i.0, &i.1, Some(&c));
                        Prio::done(&pr);
                        b
                    })
                    .ok()
            })
            .flatten();
        ix.pending = Some(Pending {
            input,
            recent,
            handle: Mutex::new(handle),
            built: OnceLock::new(),
            cancel,
            prio,
        });
        if !threaded {
            ix.settle();
        }
        ix
    }

    /// Stops a background build: a snapshot is being received that will
    /// replace this state. Should the state stay after all, its first use
    /// builds the index in the caller.
    pub fn stop_build(&self) {
        if let Some(p) = &self.pending {
            p.cancel.store(true, Ordering::Relaxed);
        }
    }

    /// Whether the version keys' index is still being built.
    pub fn building(&self) -> bool {
        self.pending.as_ref().is_some_and(|p| !p.done())
    }

    /// Merges a finished (or awaited) background build into the tree.
    pub fn settle(&mut self) {
        let Some(mut p) = self.pending.take() else {
            return;
        };
        p.get();
        let Built { tree, live_bytes } = p.built.take().expect("just built");
        self.live += live_bytes;
        // The two key sets are disjoint: the smaller goes into the larger.
        let (mut big, small) = if tree.len() >= self.tree.len() {
            (tree, std::mem::take(&mut self.tree))
        } else {
            (std::mem::take(&mut self.tree), tree)
        };
        big.extend(small);
        self.tree = big;
    }

    /// Settles first when `key` is a version key and a build is pending.
    fn settle_for(&mut self, key: &[u8]) {
        if self.pending.is_some() && is_data(key) {
            self.settle();
        }
    }

    /// Bytes of the live records indexed (without waiting for a build: its
    /// records count once it is done).
    pub fn live_bytes(&self) -> u64 {
        self.live
            + self
                .pending
                .as_ref()
                .and_then(|p| p.built.get())
                .map_or(0, |b| b.live_bytes)
    }

    fn tree_of(&self, key: &[u8]) -> &Tree<Box<[u8]>, Loc> {
        match &self.pending {
            Some(p) if is_data(key) => &p.get().tree,
            _ => &self.tree,
        }
    }

    pub fn get(&self, key: &[u8]) -> Option<&Loc> {
        if self.sorted.first().is_some_and(|f| &*f.0 <= key) {
            return self
                .sorted
                .binary_search_by(|e| (*e.0).cmp(key))
                .ok()
                .map(|i| &self.sorted[i].1);
        }
        if let Some(p) = &self.pending {
            if is_data(key) {
                if let Some(r) = p.recent.get(key) {
                    return r.as_ref();
                }
            }
        }
        self.tree_of(key).get(key)
    }

    /// Indexes `key`, which usually comes after every key so far (a
    /// snapshot's records, in key order): then it is only appended, and the
    /// tree is built from the run in bulk later. Returns the record it
    /// replaces.
    pub fn push_sorted(&mut self, key: Box<[u8]>, loc: Loc) -> Option<Loc> {
        self.settle();
        let after = match self.sorted.last() {
            Some(last) => key > last.0,
            None => self.tree.last_key_value().is_none_or(|last| key > *last.0),
        };
        if !after {
            return self.insert(key, loc);
        }
        self.live += loc.size as u64;
        self.sorted.push((key, loc));
        None
    }

    /// Moves the appended run into the tree (one bulk build).
    fn merge_sorted(&mut self) {
        if self.sorted.is_empty() {
            return;
        }
        // Sorted and unique: `from_iter` builds it in bulk; `append` merges
        // two trees in one pass.
        let mut run: Tree<Box<[u8]>, Loc> = std::mem::take(&mut self.sorted).into_iter().collect();
        if self.tree.is_empty() {
            self.tree = run;
        } else {
            self.tree.append(&mut run);
        }
    }

    pub fn contains_key(&self, key: &[u8]) -> bool {
        self.get(key).is_some()
    }

    /// Inserts `key` (settled first if it is a version key); returns the
    /// record it replaces.
    pub fn insert(&mut self, key: Box<[u8]>, loc: Loc) -> Option<Loc> {
        self.merge_sorted();
        self.settle_for(&key);
        self.live += loc.size as u64;
        let old = self.tree.insert(key, loc);
        self.forget(old)
    }

    /// Removes `key` (settled first if it is a version key); returns its
    /// record.
    pub fn remove(&mut self, key: &[u8]) -> Option<Loc> {
        self.merge_sorted();
        self.settle_for(key);
        let old = self.tree.remove(key);
        self.forget(old)
    }

    /// Takes a record that left the index out of the live bytes.
    fn forget(&mut self, old: Option<Loc>) -> Option<Loc> {
        if let Some(o) = old {
            self.live -= o.size as u64;
        }
        old
    }

    /// Entries (waits for a build).
    pub fn len(&self) -> usize {
        self.tree.len()
            + self.sorted.len()
            + self.pending.as_ref().map_or(0, |p| p.get().tree.len())
    }

    /// Entries known without waiting (a build's count once it is done).
    pub fn len_now(&self) -> usize {
        self.tree.len()
            + self.sorted.len()
            + self
                .pending
                .as_ref()
                .and_then(|p| p.built.get())
                .map_or(0, |b| b.tree.len())
    }

    /// The entries from `lo` to `hi`, in key order (double-ended).
    pub fn range<'a>(
        &'a self,
        lo: Bound<&'a [u8]>,
        hi: Bound<&'a [u8]>,
    ) -> impl DoubleEndedIterator<Item = (&'a Box<[u8]>, &'a Loc)> + Clone + 'a {
        let part =
            |t: &'a Tree<Box<[u8]>, Loc>, lo: Bound<&'a [u8]>, hi: Bound<&'a [u8]>| -> Part<'a> {
                nonempty(lo, hi)
                    .then(|| t.range::<[u8], _>((lo, hi)))
                    .into_iter()
                    .flatten()
            };
        let from = match lo {
            Bound::Included(x) => self.sorted.partition_point(|e| &*e.0 < x),
            Bound::Excluded(x) => self.sorted.partition_point(|e| &*e.0 <= x),
            Bound::Unbounded => 0,
        };
        let to = match hi {
            Bound::Included(x) => self.sorted.partition_point(|e| &*e.0 <= x),
            Bound::Excluded(x) => self.sorted.partition_point(|e| &*e.0 < x),
            Bound::Unbounded => self.sorted.len(),
        };
        let sorted: Sorted<'a> = self.sorted[from..to.max(from)].iter().map(pair);
        let parts = match &self.pending {
            None => part(&self.tree, lo, hi)
                .chain(part(
                    &self.tree,
                    Bound::Excluded(EMPTY),
                    Bound::Excluded(EMPTY),
                ))
                .chain(part(
                    &self.tree,
                    Bound::Excluded(EMPTY),
                    Bound::Excluded(EMPTY),
                )),
            Some(p) => {
                let below = part(&self.tree, lo, min_hi(hi, DATA_LO));
                let (dlo, dhi) = (max_lo(lo, DATA_LO), min_hi(hi, DATA_HI));
                let data = if nonempty(dlo, dhi) {
                    part(&p.get().tree, dlo, dhi)
                } else {
                    part(&self.tree, Bound::Excluded(EMPTY), Bound::Excluded(EMPTY))
                };
                let above = part(&self.tree, max_lo(lo, DATA_HI), hi);
                below.chain(data).chain(above)
            }
        };
        // Every appended key comes after the tree's.
        parts.chain(sorted)
    }
}

/// `max(lo, Included(a))`.
fn max_lo<'a>(lo: Bound<&'a [u8]>, a: &'a [u8]) -> Bound<&'a [u8]> {
    match lo {
        Bound::Included(x) | Bound::Excluded(x) if x >= a => lo,
        _ => Bound::Included(a),
    }
}

/// `min(hi, Excluded(b))`.
fn min_hi<'a>(hi: Bound<&'a [u8]>, b: &'a [u8]) -> Bound<&'a [u8]> {
    match hi {
        Bound::Included(x) if x < b => hi,
        Bound::Excluded(x) if x <= b => hi,
        _ => Bound::Excluded(b),
    }
}

/// Whether `lo..hi` holds any key (and `BTreeMap::range` accepts it).
fn nonempty(lo: Bound<&[u8]>, hi: Bound<&[u8]>) -> bool {
    match (lo, hi) {
        (Bound::Included(l), Bound::Included(h)) => l <= h,
        (Bound::Included(l) | Bound::Excluded(l), Bound::Included(h) | Bound::Excluded(h)) => l < h,
        _ => true,
    }
}

/// The background build thread's scheduling, shared with the index that
/// may need to raise it ([`Prio::boost`]).
#[derive(Default)]
struct Prio {
    /// The build thread's id while it runs at the idle policy (0: not yet,
    /// or no longer).
    tid: libc::pid_t,
    /// A use of the index waits for the build: the thread must not (or no
    /// longer) run at the idle policy.
    boosted: bool,
}

impl Prio {
    /// Called first by the build thread: runs it at `SCHED_IDLE` — only
    /// when no other thread of the machine wants the CPU — unless the
    /// index is already waited for. A replica's open leaves most of its
    /// versions to this build, and on a replica that is behind, the
    /// snapshot it receives next makes the build moot: under nice 10 (the
    /// policy before) a stale replica's build still took 62 of the
    /// profile's samples during the snapshot's transfer, on a 2-core
    /// machine whose receiving, staging and warming threads wanted them.
    /// Alone on a core it runs as fast as ever. Refused (no permission):
    /// nice 10, as before.
    fn lower(me: &Mutex<Prio>) {
        let mut p = me.lock().unwrap_or_else(|e| e.into_inner());
        if p.boosted {
            return;
        }
        // SAFETY: gettid, sched_setscheduler and setpriority take plain
        // integers and a pointer to a live local; they have no memory
        // effects, and a failure leaves the policy as it was.
        unsafe {
            let tid = libc::gettid();
            let param = libc::sched_param { sched_priority: 0 };
            if libc::sched_setscheduler(tid, libc::SCHED_IDLE, &param) == 0 {
                p.tid = tid;
            } else {
                libc::setpriority(libc::PRIO_PROCESS, tid as libc::id_t, 10);
            }
        }
    }

    /// Called last by the build thread (its id may be reused after it).
    fn done(me: &Mutex<Prio>) {
        me.lock().unwrap_or_else(|e| e.into_inner()).tid = 0;
    }

    /// A use of the index waits for the build: returns the thread to the
    /// normal policy, so a loaded machine cannot starve the wait. False
    /// when that was refused (an unprivileged process cannot leave
    /// `SCHED_IDLE`): the caller then builds the index itself.
    fn boost(me: &Mutex<Prio>) -> bool {
        let mut p = me.lock().unwrap_or_else(|e| e.into_inner());
        p.boosted = true;
        if p.tid == 0 {
            return true;
        }
        let param = libc::sched_param { sched_priority: 0 };
        // SAFETY: as in `lower`; `tid` is a live thread of this process
        // (it clears it under this lock before it ends).
        let ok = unsafe { libc::sched_setscheduler(p.tid, libc::SCHED_OTHER, &param) } == 0;
        if ok {
            p.tid = 0;
        }
        ok
    }
}

/// The metadata and log keys' records, replayed in list order as a replay
/// reads them: a key's last record decides, so a put replaces and a
/// deletion removes. Most of these records are cancelled by a later
/// deletion (a purged log's entries and the rollback records of applied
/// ones: a stale replica's list held 51,210 such records of which 584 were
/// live), so the map stays as small as the log's live window, and only the
/// survivors are sorted, by [`Latest::finish`]. (Keeping them all and
/// sorting them, as the version keys are, took 5.9 ms of that replica's
/// 17.8 ms open; this, 1.2 ms.)
#[derive(Default)]
pub(super) struct Latest {
    map: HashMap<Box<[u8]>, Loc, foldhash::fast::RandomState>,
}

impl Latest {
    /// The next record of `key` in list order (`None`: a deletion).
    pub fn record(&mut self, key: &[u8], loc: Option<Loc>) {
        match loc {
            Some(loc) => match self.map.get_mut(key) {
                Some(l) => *l = loc,
                None => {
                    self.map.insert(key.into(), loc);
                }
            },
            None => {
                self.map.remove(key);
            }
        }
    }

    fn finish(self) -> Built {
        let mut live: Vec<(Box<[u8]>, Loc)> = self.map.into_iter().collect();
        live.sort_unstable_by(|a, b| a.0.cmp(&b.0));
        Built {
            live_bytes: live.iter().map(|(_, l)| l.size as u64).sum(),
            // Sorted and unique: `from_iter` builds the tree in bulk.
            tree: live.into_iter().collect(),
        }
    }
}

/// Indexes `recs` (list order; keys in `arena`): the last record of each key
/// decides, deletions drop it. `None` when `cancel` was set.
fn build(arena: &[u8], recs: &[Rec], cancel: Option<&AtomicBool>) -> Option<Built> {
    // The records are sorted by key — by its first 32 bytes held inline, the
    // whole key only when those tie, and list order among a key's records,
    // so the last one wins, as in a replay — and the tree is built in one
    // pass from the survivors, whose keys alone get an allocation of their
    // own. (Sorting pointers to separately allocated keys cost a cache miss
    // per comparison: 87 ms for a stale list of 6,500 pages.)
    let stop = || cancel.is_some_and(|c| c.load(Ordering::Relaxed));
    let key = |i: usize| {
        let (o, l, _) = recs[i];
        &arena[o as usize..(o + l) as usize]
    };
    // The key's first 32 bytes, zero-padded (a version key of a user key of
    // up to 19 bytes whole).
    let head = |i: usize| {
        let k = key(i);
        let mut b = [0u8; 32];
        let n = k.len().min(32);
        b[..n].copy_from_slice(&k[..n]);
        let w = |j: usize| u64::from_be_bytes(b[j * 8..j * 8 + 8].try_into().expect("8 bytes"));
        [w(0), w(1), w(2), w(3)]
    };
    // (head, key length, record number)
    let mut order: Vec<([u64; 4], u32, u32)> = (0..recs.len())
        .map(|i| (head(i), recs[i].1, i as u32))
        .collect();
    if stop() {
        return None;
    }
    // Equal heads of keys of at most 32 bytes: the shorter key is a prefix
    // of the longer (the rest of which is zeros), so the lengths order them
    // and equal lengths mean equal keys — no key is fetched from the arena
    // (a version key of a user key of up to 19 bytes fits, and a key the
    // list rewrote thousands of times ties thousands of times). Longer
    // keys compare whole.
    let same = |a: &([u64; 4], u32, u32), b: &([u64; 4], u32, u32)| {
        a.0 == b.0 && a.1 == b.1 && (a.1 <= 32 || key(a.2 as usize) == key(b.2 as usize))
    };
    // The record's number breaks ties, so an unstable sort keeps list order
    // among a key's records.
    order.sort_unstable_by(|a, b| {
        a.0.cmp(&b.0)
            .then_with(|| {
                if a.1 <= 32 && b.1 <= 32 {
                    a.1.cmp(&b.1)
                } else {
                    key(a.2 as usize).cmp(key(b.2 as usize))
                }
            })
            .then(a.2.cmp(&b.2))
    });
    if stop() {
        return None;
    }
    let mut live = Vec::with_capacity(order.len());
    let mut live_bytes = 0;
    for (i, o) in order.iter().enumerate() {
        let r = o.2;
        if order.get(i + 1).is_some_and(|n| same(o, n)) {
            continue; // a later record of the same key decides
        }
        if let Some(loc) = recs[r as usize].2 {
            live_bytes += loc.size as u64;
            live.push((Box::<[u8]>::from(key(r as usize)), loc));
        }
    }
    if stop() {
        return None;
    }
    // Sorted and unique: `from_iter` builds the tree in bulk.
    Some(Built {
        tree: live.into_iter().collect(),
        live_bytes,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn all(ix: &Index) -> Vec<(&[u8], &Loc)> {
        ix.range(Bound::Unbounded, Bound::Unbounded)
            .map(|(k, l)| (&**k, l))
            .collect()
    }

    fn idx(keys: &[&[u8]], background: usize) -> Index {
        let mut arena = Vec::new();
        let mut recs = Vec::new();
        for (i, k) in keys.iter().enumerate() {
            recs.push((
                arena.len() as u32,
                k.len() as u32,
                Some(Loc {
                    off: i as u64 * 64,
                    size: 64,
                }),
            ));
            arena.extend_from_slice(k);
        }
        Index::rebuild(arena, recs, background)
    }

    #[test]
    fn ranges_across_the_key_spaces_match_with_and_without_a_build() {
        let keys: [&[u8]; 11] = [
            b"",
            b"\x00a",
            b"\x00b",
            b"\x01",
            b"\x01\x00",
            b"\x01a",
            b"\x01a",
            b"\x01z",
            b"\x02",
            b"\x02a",
            b"\xff",
        ];
        let bounds: Vec<Bound<&[u8]>> = std::iter::once(Bound::Unbounded)
            .chain(
                keys.iter()
                    .flat_map(|k| [Bound::Included(*k), Bound::Excluded(*k)]),
            )
            .chain([
                Bound::Included(&b"\x01\xff"[..]),
                Bound::Excluded(&b"\x00\xff"[..]),
            ])
            .collect();
        let eager = idx(&keys, usize::MAX);
        let lazy = idx(&keys, 1);
        assert!(lazy.pending.is_some());
        for &lo in &bounds {
            for &hi in &bounds {
                if !nonempty(lo, hi) {
                    continue;
                }
                let a: Vec<_> = eager.range(lo, hi).collect();
                let b: Vec<_> = lazy.range(lo, hi).collect();
                assert_eq!(a, b, "{lo:?}..{hi:?}");
                let a: Vec<_> = eager.range(lo, hi).rev().collect();
                let b: Vec<_> = lazy.range(lo, hi).rev().collect();
                assert_eq!(a, b, "{lo:?}..{hi:?} backwards");
            }
        }
        assert_eq!(eager.len(), 10);
        assert_eq!(lazy.len(), 10);
        for k in &keys {
            assert_eq!(eager.get(k), lazy.get(k));
        }
        // The later record of a repeated key wins.
        assert_eq!(lazy.get(b"\x01a").map(|l| l.off), Some(6 * 64));
    }

    #[test]
    fn keys_pushed_in_order_read_like_a_tree() {
        let mut ix = Index::default();
        let mut oracle = Tree::new();
        // Ascending runs (appended) broken by keys that go back (merged).
        let keys: [&[u8]; 9] = [b"b", b"c", b"c\x00", b"d", b"a", b"\x01", b"e", b"e", b"f"];
        let bounds: Vec<Bound<&[u8]>> = std::iter::once(Bound::Unbounded)
            .chain(
                keys.iter()
                    .flat_map(|k| [Bound::Included(*k), Bound::Excluded(*k)]),
            )
            .collect();
        for (i, k) in keys.iter().enumerate() {
            let loc = Loc {
                off: i as u64,
                size: 1,
            };
            let old = ix.push_sorted(Box::from(*k), loc);
            assert_eq!(old, oracle.insert(Box::<[u8]>::from(*k), loc), "{i}");
            assert_eq!(ix.len(), oracle.len());
            assert_eq!(ix.live_bytes(), oracle.len() as u64);
            for &lo in &bounds {
                for &hi in &bounds {
                    if nonempty(lo, hi) {
                        let a: Vec<_> = ix.range(lo, hi).collect();
                        let b: Vec<_> = oracle.range::<[u8], _>((lo, hi)).collect();
                        assert_eq!(a, b, "{i}: {lo:?}..{hi:?}");
                        let a: Vec<_> = ix.range(lo, hi).rev().collect();
                        let b: Vec<_> = oracle.range::<[u8], _>((lo, hi)).rev().collect();
                        assert_eq!(a, b, "{i}: {lo:?}..{hi:?} backwards");
                    }
                }
            }
            for k in &keys {
                assert_eq!(ix.get(k), oracle.get(*k), "{i}: {k:?}");
            }
        }
        assert!(!ix.sorted.is_empty(), "the last run is still appended");
        assert_eq!(ix.remove(b"e"), oracle.remove(&b"e"[..]));
        assert_eq!(ix.live_bytes(), oracle.len() as u64);
        assert!(ix.sorted.is_empty());
        assert_eq!(
            ix.range(Bound::Unbounded, Bound::Unbounded)
                .collect::<Vec<_>>(),
            oracle.iter().collect::<Vec<_>>()
        );
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(256))]
        /// A replay's index against a replay into a `BTreeMap`: keys that
        /// tie in their first 32 bytes (zero-padded prefixes of each other,
        /// longer keys sharing 32 bytes), repeated keys and deletions; built
        /// here and by a thread.
        #[test]
        fn a_rebuilt_index_is_the_replay(
            ops in proptest::collection::vec(
                (0usize..4, proptest::collection::vec(0u8..3, 0..6), proptest::bool::weighted(0.2)),
                0..120,
            )
        ) {
            // Keys: a short stem, the stem after 30 zero bytes (so 32-byte
            // heads tie), or the stem with zeros appended (padding ties).
            let mut arena = Vec::new();
            let mut recs = Vec::new();
            let mut oracle: Tree<Box<[u8]>, Loc> = Tree::new();
            for (i, (shape, stem, del)) in ops.iter().enumerate() {
                let k: Vec<u8> = match shape {
                    0 => stem.clone(),
                    1 => [vec![1u8; 30], stem.clone()].concat(),
                    2 => [stem.clone(), vec![0, 0]].concat(),
                    _ => [vec![1u8; 31], stem.clone(), vec![0]].concat(),
                };
                let loc = Loc { off: i as u64 * 64, size: 64 };
                recs.push((arena.len() as u32, k.len() as u32, (!del).then_some(loc)));
                arena.extend_from_slice(&k);
                if *del {
                    oracle.remove(&k[..]);
                } else {
                    oracle.insert(k.into(), loc);
                }
            }
            let want: Vec<(&[u8], &Loc)> = oracle.iter().map(|(k, l)| (&**k, l)).collect();
            for background in [usize::MAX, 1] {
                let mut ix = Index::rebuild(arena.clone(), recs.clone(), background);
                // Exact lookups before the build is settled (the recent
                // records answer the version keys' without it).
                for (_, stem, _) in &ops {
                    for k in [stem.clone(), [vec![1u8; 30], stem.clone()].concat()] {
                        proptest::prop_assert_eq!(ix.get(&k), oracle.get(&k[..]));
                    }
                }
                ix.settle();
                proptest::prop_assert_eq!(&all(&ix), &want);
                proptest::prop_assert_eq!(ix.live_bytes(), 64 * want.len() as u64);
            }
        }
    }

    /// A restarting replica reads its newest log entries, with the versions
    /// they wrote, before anything else: those lookups are answered by the
    /// last records without the build; older ones need it.
    #[test]
    fn a_lookup_of_a_recent_version_does_not_wait_for_the_build() {
        let keys: Vec<Vec<u8>> = (0..RECENT as u32 + 10)
            .map(|i| [&[keys::DATA][..], &i.to_be_bytes()].concat())
            .collect();
        let refs: Vec<&[u8]> = keys.iter().map(|k| &k[..]).collect();
        let built = |ix: &Index| ix.pending.as_ref().unwrap().built.get().is_some();
        let last = keys.len() - 1;
        let ix = idx(&refs, 1);
        // Stopped: only a use builds it now (in the caller).
        ix.stop_build();
        assert_eq!(ix.get(&keys[last]).map(|l| l.off), Some(last as u64 * 64));
        assert_eq!(ix.get(&keys[10]).map(|l| l.off), Some(10 * 64));
        assert!(
            !built(&ix),
            "the recent versions were looked up without the build"
        );
        assert_eq!(ix.get(&keys[3]).map(|l| l.off), Some(3 * 64));
        assert!(built(&ix));
    }

    /// The build thread runs at `SCHED_IDLE` until a use waits for it; the
    /// wait returns it to the normal policy (so a busy machine cannot starve
    /// the wait), and a thread that has ended is never touched.
    #[test]
    fn a_waited_for_build_leaves_the_idle_policy() {
        fn policy(tid: libc::pid_t) -> i32 {
            // SAFETY: a plain query of a live thread of this process.
            unsafe { libc::sched_getscheduler(tid) }
        }
        let prio = Arc::new(Mutex::new(Prio::default()));
        let (tid_tx, tid_rx) = std::sync::mpsc::channel();
        let (go_tx, go_rx) = std::sync::mpsc::channel::<()>();
        let p = prio.clone();
        let t = std::thread::spawn(move || {
            Prio::lower(&p);
            // SAFETY: gettid has no memory effects.
            tid_tx.send(unsafe { libc::gettid() }).unwrap();
            go_rx.recv().unwrap();
            Prio::done(&p);
        });
        let tid = tid_rx.recv().unwrap();
        assert_eq!(policy(tid), libc::SCHED_IDLE);
        assert_eq!(prio.lock().unwrap().tid, tid);
        assert!(Prio::boost(&prio), "root may leave SCHED_IDLE");
        assert_eq!(policy(tid), libc::SCHED_OTHER);
        assert_eq!(prio.lock().unwrap().tid, 0);
        go_tx.send(()).unwrap();
        t.join().unwrap();
        // Boosted before the thread lowered itself: it stays normal.
        let prio = Arc::new(Mutex::new(Prio::default()));
        assert!(Prio::boost(&prio));
        let p = prio.clone();
        let pol = std::thread::spawn(move || {
            Prio::lower(&p);
            // SAFETY: gettid has no memory effects.
            policy(unsafe { libc::gettid() })
        })
        .join()
        .unwrap();
        assert_eq!(pol, libc::SCHED_OTHER);
    }

    /// Drops `CAP_SYS_NICE` from the calling thread's effective set
    /// (capabilities are per thread): it then cannot move another thread
    /// out of `SCHED_IDLE`, as an unprivileged process cannot.
    fn drop_sys_nice() {
        #[repr(C)]
        struct Header {
            version: u32,
            pid: i32,
        }
        #[repr(C)]
        #[derive(Clone, Copy, Default)]
        struct Data {
            effective: u32,
            permitted: u32,
            inheritable: u32,
        }
        const VERSION_3: u32 = 0x2008_0522;
        const CAP_SYS_NICE: u32 = 23;
        let mut h = Header {
            version: VERSION_3,
            pid: 0,
        };
        let mut d = [Data::default(); 2];
        // SAFETY: capget and capset read and write the header and the two
        // data words of version 3, which these locals are.
        unsafe {
            assert_eq!(libc::syscall(libc::SYS_capget, &mut h, d.as_mut_ptr()), 0);
            d[0].effective &= !(1 << CAP_SYS_NICE);
            assert_eq!(libc::syscall(libc::SYS_capset, &mut h, d.as_ptr()), 0);
        }
    }

    /// Where the wait cannot raise the build thread (a real refusal: the
    /// caller lacks `CAP_SYS_NICE` and `RLIMIT_NICE` is 0), the index is
    /// built by the caller and is right; the thread is told to stop.
    #[test]
    fn a_build_that_cannot_be_raised_is_done_by_the_caller() {
        let mut lim = libc::rlimit {
            rlim_cur: 0,
            rlim_max: 0,
        };
        // SAFETY: a plain query of this process's limit into a local.
        assert_eq!(unsafe { libc::getrlimit(libc::RLIMIT_NICE, &mut lim) }, 0);
        assert_eq!(lim.rlim_cur, 0, "RLIMIT_NICE 0, as on this machine");
        std::thread::spawn(|| {
            drop_sys_nice();
            // The refusal itself.
            let prio = Arc::new(Mutex::new(Prio::default()));
            let (tid_tx, tid_rx) = std::sync::mpsc::channel();
            let (go_tx, go_rx) = std::sync::mpsc::channel::<()>();
            let p = prio.clone();
            let t = std::thread::spawn(move || {
                Prio::lower(&p);
                // SAFETY: gettid has no memory effects.
                tid_tx.send(unsafe { libc::gettid() }).unwrap();
                go_rx.recv().unwrap();
                Prio::done(&p);
            });
            let tid = tid_rx.recv().unwrap();
            assert!(!Prio::boost(&prio), "refused without CAP_SYS_NICE");
            // SAFETY: a plain query of a live thread of this process.
            assert_eq!(unsafe { libc::sched_getscheduler(tid) }, libc::SCHED_IDLE);
            go_tx.send(()).unwrap();
            t.join().unwrap();
            // An index whose build cannot be raised still answers right.
            let keys: Vec<Vec<u8>> = (0..200_000u32)
                .map(|i| [&[keys::DATA][..], &i.to_be_bytes()].concat())
                .collect();
            let mut ix = idx(&keys.iter().map(|k| &k[..]).collect::<Vec<_>>(), 1);
            for k in keys.iter().step_by(9973) {
                assert!(ix.get(k).is_some());
            }
            ix.settle();
            assert_eq!(all(&ix).len(), keys.len());
        })
        .join()
        .unwrap();
    }

    #[test]
    fn a_stopped_build_is_done_by_its_first_use() {
        let keys: [&[u8]; 6] = [b"\x01b", b"\x00m", b"\x01a", b"\x01b", b"\x02", b"\x01c"];
        let lazy = idx(&keys, 1);
        lazy.stop_build();
        let eager = idx(&keys, usize::MAX);
        assert_eq!(all(&lazy), all(&eager));
        assert_eq!(lazy.get(b"\x01b").map(|l| l.off), Some(3 * 64));
    }

    #[test]
    fn a_settled_index_is_the_eager_one() {
        let keys: [&[u8]; 5] = [b"\x00m", b"\x01b", b"\x01a", b"\x02x", b"\x01b"];
        let mut lazy = idx(&keys, 1);
        lazy.settle();
        assert!(lazy.pending.is_none());
        // \x00m, \x02x and the last \x01b and \x01a.
        assert_eq!(lazy.live_bytes(), 4 * 64);
        let eager = idx(&keys, usize::MAX);
        assert_eq!(all(&lazy), all(&eager));
    }
}
