//! openraft's storage traits for the PM stores, with group commit.
//!
//! One [`PmStore`] holds a [`RaftCore`] behind a lock and hands openraft a log
//! store ([`RaftLogStorage`]) and a state machine ([`RaftStateMachine`])
//! that share it. An `append` writes the entries into the map at once
//! (readable on return) and registers openraft's callback; the callback fires
//! when a group commit has made the entries durable. A group commits when it
//! reaches `every` modifications (inline, in the appending task) or, at the
//! latest, `interval` after its first modification (in a background thread,
//! which also runs the clean-up between commits and after inline ones).

use std::fmt::Debug;
use std::ops::{Bound, RangeBounds};
use std::sync::{Arc, Condvar, Mutex, RwLock, Weak};
use std::time::{Duration, Instant};

use openraft::storage::{LogFlushed, RaftLogStorage, RaftStateMachine};
use openraft::{LogState, OptionalSend, RaftLogReader, RaftSnapshotBuilder, Snapshot};

use crate::core::{CoreStatus, RaftCore};
use crate::error::{read_err, write_err, Result, StoreError};
use crate::map::PmMap;
use crate::snapshot::{self, Chunk, Items, SnapshotData, SnapshotSink, SnapshotSource};
use crate::types::{
    Entry, LogId, Reply, SnapshotMeta, StorageError, StoredMembership, TypeConfig, Vote,
};

/// When a group of modifications commits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CommitPolicy {
    /// Commit as soon as this many modifications are pending (the thesis's k).
    pub every: usize,
    /// Commit at the latest this long after the first pending modification
    /// (the thesis's t).
    pub interval: Duration,
}

impl Default for CommitPolicy {
    /// k = 1 and t = 20 µs, measured (`docs/BENCHMARKS.md`, "Group commit"):
    /// openraft hands the store a batch per `append` (every entry that
    /// arrived while the previous batch was written), so k = 1 still commits
    /// one group per batch with one fence, and commits it inline; a larger k
    /// defers small batches to the commit thread, whose wake-up on a loaded
    /// machine costs far more than the fence it saves (the thesis's k = 10 on
    /// dedicated cores did not hold here). t bounds the delay when k > 1.
    fn default() -> Self {
        CommitPolicy {
            every: 1,
            interval: Duration::from_micros(20),
        }
    }
}

struct Inner<M: PmMap> {
    core: RaftCore<M>,
    callbacks: Vec<LogFlushed<TypeConfig>>,
}

#[derive(Default)]
struct Signal {
    first_dirty: Option<Instant>,
    /// A group was committed inline (by the appending task): the committer
    /// runs clean-up steps in the background, as after a group of its own.
    /// Without it, a steady stream of writes committed inline (k = 1) would
    /// never give the clean-up a turn and the pool would fill with
    /// superseded versions.
    maintain: bool,
    shutdown: bool,
}

struct FlushSignal {
    state: Mutex<Signal>,
    cv: Condvar,
}

struct Shared<M: PmMap> {
    inner: RwLock<Inner<M>>,
    signal: Arc<FlushSignal>,
    policy: CommitPolicy,
    durability: String,
    /// Space is short: the committer cleans up after every group, even while
    /// new groups are waiting (see [`PmStore::set_space_pressure`]).
    pressure: std::sync::atomic::AtomicBool,
}

impl<M: PmMap> Drop for Shared<M> {
    fn drop(&mut self) {
        let mut s = self.signal.state.lock().unwrap();
        s.shutdown = true;
        self.signal.cv.notify_all();
        drop(s);
        // Whatever was written last becomes durable with the store.
        if let Ok(mut g) = self.inner.write() {
            let _ = g.core.commit();
            let cbs = std::mem::take(&mut g.callbacks);
            drop(g);
            for cb in cbs {
                cb.log_io_completed(Ok(()));
            }
        }
    }
}

/// A PM store: the log and the state machine in one map. Cheap to clone.
pub struct PmStore<M: PmMap> {
    shared: Arc<Shared<M>>,
}

impl<M: PmMap> Clone for PmStore<M> {
    fn clone(&self) -> Self {
        PmStore {
            shared: self.shared.clone(),
        }
    }
}

fn io_err(e: &StoreError) -> std::io::Error {
    std::io::Error::other(e.to_string())
}

impl<M: PmMap> PmStore<M> {
    /// Wraps an opened core and starts its group-commit thread.
    pub fn new(core: RaftCore<M>, policy: CommitPolicy, durability: String) -> PmStore<M> {
        let signal = Arc::new(FlushSignal {
            state: Mutex::new(Signal::default()),
            cv: Condvar::new(),
        });
        let shared = Arc::new(Shared {
            inner: RwLock::new(Inner {
                core,
                callbacks: Vec::new(),
            }),
            signal: signal.clone(),
            policy,
            durability,
            pressure: std::sync::atomic::AtomicBool::new(false),
        });
        let weak = Arc::downgrade(&shared);
        std::thread::Builder::new()
            .name("ferrite-commit".into())
            .spawn(move || flusher(weak, signal, policy.interval))
            .expect("spawning the group-commit thread");
        PmStore { shared }
    }

    /// The openraft log store and state machine of this store.
    pub fn parts(&self) -> (PmLogStore<M>, PmStateMachine<M>) {
        (PmLogStore(self.clone()), PmStateMachine(self.clone()))
    }

    /// A probe that turns true once every handle of this store is gone (and
    /// the store, with its pool, closed).
    pub fn closed_probe(&self) -> Box<dyn Fn() -> bool + Send + Sync> {
        let w = Arc::downgrade(&self.shared);
        Box::new(move || w.strong_count() == 0)
    }

    pub fn policy(&self) -> CommitPolicy {
        self.shared.policy
    }

    /// What the pool survives (`Durability::name`).
    pub fn durability(&self) -> &str {
        &self.shared.durability
    }

    /// Asks the committer for clean-up steps after an inline commit (one
    /// wake-up per pass, not per commit).
    fn note_committed(&self) {
        let mut s = self.shared.signal.state.lock().unwrap();
        if !s.maintain {
            s.maintain = true;
            self.shared.signal.cv.notify_one();
        }
    }

    fn note_dirty(&self) {
        let mut s = self.shared.signal.state.lock().unwrap();
        if s.first_dirty.is_none() {
            s.first_dirty = Some(Instant::now());
            self.shared.signal.cv.notify_one();
        }
    }

    /// Runs `f` on the core under the write lock; afterwards commits when the
    /// group is full, or wakes the committer.
    fn write<T>(&self, f: impl FnOnce(&mut RaftCore<M>) -> Result<T>) -> Result<T> {
        let mut g = self.shared.inner.write().unwrap();
        let r = f(&mut g.core)?;
        let mut fire = Vec::new();
        let mut failed = None;
        let mut committed = false;
        if g.core.uncommitted() >= self.shared.policy.every {
            match g.core.commit() {
                Ok(()) => {
                    fire = std::mem::take(&mut g.callbacks);
                    committed = true;
                }
                Err(e) => failed = Some(e),
            }
        }
        let pending = g.core.uncommitted() > 0 || !g.callbacks.is_empty();
        drop(g);
        if committed {
            self.note_committed();
        }
        for cb in fire {
            cb.log_io_completed(Ok(()));
        }
        if let Some(e) = failed {
            return Err(e);
        }
        if pending {
            self.note_dirty();
        }
        Ok(r)
    }

    fn read<T>(&self, f: impl FnOnce(&RaftCore<M>) -> T) -> T {
        f(&self.shared.inner.read().unwrap().core)
    }

    /// Commits now (and completes the callbacks waiting for it).
    pub fn commit(&self) -> Result<()> {
        commit_now(&self.shared)
    }

    /// The value of `key` in the state machine.
    pub fn get(&self, key: &[u8]) -> Result<Option<Vec<u8>>> {
        self.read(|c| c.get(key))
    }

    pub fn status(&self) -> CoreStatus {
        self.read(|c| c.status().clone())
    }

    /// Runs `f` with the map (statistics, checks).
    pub fn with_map<T>(&self, f: impl FnOnce(&M) -> T) -> T {
        self.read(|c| f(c.map()))
    }

    /// How much of the pool the store occupies.
    pub fn space(&self) -> crate::replica::Space {
        self.read(|c| {
            let st = c.map().stats();
            let pool = c.map().pool();
            let (chunks, free) = pool.chunk_usage();
            let cs = pool.header().chunk_size;
            crate::replica::Space {
                used: c.map().space_used(),
                live: st.live_bytes,
                capacity: Some(chunks * cs),
                unclaimed: free * cs,
                chunk: cs,
                held_back: c.held_back(),
            }
        })
    }

    /// Runs up to `steps` clean-up steps now, each under the lock for one
    /// page, as the committer does between groups; returns the bytes of the
    /// pool they gave back. For a writer that would otherwise be refused
    /// for lack of room: the background clean-up can fall behind a steady
    /// stream of writes on a loaded machine.
    pub fn reclaim(&self, steps: usize) -> Result<u64> {
        let before = self.read(|c| c.map().space_used());
        for _ in 0..steps {
            if !self.shared.inner.write().unwrap().core.maintenance()? {
                break;
            }
        }
        let after = self.read(|c| c.map().space_used());
        Ok(before.saturating_sub(after))
    }

    /// Tells the store that space is short (or no longer): the list then
    /// cleans pages with less dead data, and the committer runs clean-up
    /// steps after every group even under a steady stream of writes.
    pub fn set_space_pressure(&self, on: bool) {
        let was = self
            .shared
            .pressure
            .swap(on, std::sync::atomic::Ordering::Relaxed);
        if was != on {
            self.shared
                .inner
                .write()
                .unwrap()
                .core
                .map_mut()
                .set_space_pressure(on);
        }
    }

    /// A snapshot view at the last built snapshot, pinned until dropped.
    fn current_snapshot(&self) -> Result<Option<Snapshot<TypeConfig>>> {
        let mut g = self.shared.inner.write().unwrap();
        let Some(meta) = g.core.status().snapshot.clone() else {
            return Ok(None);
        };
        let at = meta.last_log_id.map_or(0, |l| l.index);
        g.core.pin(at);
        let generation = g.core.generation();
        drop(g);
        Ok(Some(Snapshot {
            meta,
            snapshot: Box::new(SnapshotData::source(View {
                store: self.clone(),
                at,
                generation,
                cursor: Some(crate::keys::data_space().0),
                pinned: true,
            })),
        }))
    }

    /// Where a received snapshot at index `at` goes: a staging map of this
    /// store.
    pub fn sink(&self, at: u64) -> Result<Box<dyn SnapshotSink>> {
        let staged = self.read(|c| c.staging())?;
        Ok(Box::new(Sink {
            staged: Some(staged),
            items: 0,
            at,
        }))
    }

    fn install(&self, meta: &SnapshotMeta, data: SnapshotData) -> Result<()> {
        let at = meta.last_log_id.map_or(0, |l| l.index);
        let (staged, items) = match data.0 {
            snapshot::Inner::Staged(b) => match b.downcast::<Staged<M>>() {
                Ok(s) => (s.map, s.items),
                Err(_) => {
                    return Err(StoreError::Invalid(
                        "a snapshot staged for another kind of store".into(),
                    ))
                }
            },
            other => {
                // A view of another store, or pairs in memory: stage them here.
                let mut data = SnapshotData(other);
                let mut staged = self.read(|c| c.staging())?;
                let mut n = 0;
                while let Some(batch) = data.next_batch(1 << 20)? {
                    for (k, v) in batch {
                        RaftCore::<M>::stage_item(&mut staged, at, &k, &v)?;
                        n += 1;
                    }
                }
                (staged, n)
            }
        };
        let mut g = self.shared.inner.write().unwrap();
        g.core.install(meta, staged, items)?;
        let cbs = std::mem::take(&mut g.callbacks);
        drop(g);
        for cb in cbs {
            cb.log_io_completed(Ok(()));
        }
        Ok(())
    }
}

fn commit_now<M: PmMap>(shared: &Shared<M>) -> Result<()> {
    let mut g = shared.inner.write().unwrap();
    let r = g.core.commit();
    let cbs = if r.is_ok() {
        std::mem::take(&mut g.callbacks)
    } else {
        Vec::new()
    };
    drop(g);
    for cb in cbs {
        cb.log_io_completed(Ok(()));
    }
    r
}

/// Clean-up steps, each under the lock for one page, while no new group is
/// waiting (under space pressure, a few steps regardless: a steady stream of
/// writes would otherwise starve the clean-up).
fn clean_up<M: PmMap>(sh: &Shared<M>, signal: &FlushSignal) {
    let forced = if sh.pressure.load(std::sync::atomic::Ordering::Relaxed) {
        8
    } else {
        0
    };
    for step in 0..64 {
        if step >= forced && signal.state.lock().unwrap().first_dirty.is_some() {
            break;
        }
        match sh.inner.write().unwrap().core.maintenance() {
            Ok(true) => {}
            Ok(false) => break,
            Err(e) => {
                tracing::error!("clean-up of the store failed: {e}");
                break;
            }
        }
    }
}

/// The background committer: commits `interval` after the first pending
/// modification, then runs clean-up steps while nothing else is pending.
fn flusher<M: PmMap>(shared: Weak<Shared<M>>, signal: Arc<FlushSignal>, interval: Duration) {
    // Sleep with microsecond precision (the default timer slack is 50 µs).
    // SAFETY: prctl(PR_SET_TIMERSLACK) only changes this thread's timer slack.
    unsafe { libc::prctl(libc::PR_SET_TIMERSLACK, 1000 as libc::c_ulong, 0, 0, 0) };
    loop {
        let since = {
            let mut s = signal.state.lock().unwrap();
            loop {
                if s.shutdown {
                    return;
                }
                if let Some(t) = s.first_dirty.take() {
                    break t;
                }
                if s.maintain {
                    s.maintain = false;
                    let Some(sh) = shared.upgrade() else { return };
                    drop(s);
                    clean_up(&sh, &signal);
                    drop(sh);
                    s = signal.state.lock().unwrap();
                    continue;
                }
                let (g, _) = signal
                    .cv
                    .wait_timeout(s, Duration::from_millis(200))
                    .unwrap();
                s = g;
                if s.first_dirty.is_none() {
                    // Idle: clean up a little.
                    let Some(sh) = shared.upgrade() else { return };
                    drop(s);
                    let more = sh.inner.write().unwrap().core.maintenance();
                    if let Err(e) = more {
                        tracing::error!("clean-up of the store failed: {e}");
                    }
                    drop(sh);
                    s = signal.state.lock().unwrap();
                }
            }
        };
        let due = since + interval;
        let now = Instant::now();
        if due > now {
            std::thread::sleep(due - now);
        }
        let Some(sh) = shared.upgrade() else { return };
        if let Err(e) = commit_now(&sh) {
            tracing::error!("group commit failed: {e}");
            let mut g = sh.inner.write().unwrap();
            for cb in std::mem::take(&mut g.callbacks) {
                cb.log_io_completed(Err(io_err(&e)));
            }
        }
        clean_up(&sh, &signal);
        let pending = sh.inner.read().unwrap().core.uncommitted() > 0;
        if pending {
            let mut s = signal.state.lock().unwrap();
            s.first_dirty.get_or_insert_with(Instant::now);
        }
    }
}

/// The log-store half of a [`PmStore`].
pub struct PmLogStore<M: PmMap>(PmStore<M>);

impl<M: PmMap> Clone for PmLogStore<M> {
    fn clone(&self) -> Self {
        PmLogStore(self.0.clone())
    }
}

/// The state-machine half of a [`PmStore`].
pub struct PmStateMachine<M: PmMap>(PmStore<M>);

fn bounds(range: &impl RangeBounds<u64>) -> (u64, u64) {
    let from = match range.start_bound() {
        Bound::Included(&a) => a,
        Bound::Excluded(&a) => a.saturating_add(1),
        Bound::Unbounded => 0,
    };
    let to = match range.end_bound() {
        Bound::Included(&b) => b.saturating_add(1),
        Bound::Excluded(&b) => b,
        Bound::Unbounded => u64::MAX,
    };
    (from, to)
}

impl<M: PmMap> RaftLogReader<TypeConfig> for PmLogStore<M> {
    async fn try_get_log_entries<RB: RangeBounds<u64> + Clone + Debug + OptionalSend>(
        &mut self,
        range: RB,
    ) -> Result<Vec<Entry>, StorageError> {
        let (from, to) = bounds(&range);
        self.0.read(|c| c.entries(from, to)).map_err(read_err)
    }
}

impl<M: PmMap> RaftLogStorage<TypeConfig> for PmLogStore<M> {
    type LogReader = PmLogStore<M>;

    async fn get_log_state(&mut self) -> Result<LogState<TypeConfig>, StorageError> {
        let st = self.0.status();
        Ok(LogState {
            last_purged_log_id: st.purged,
            last_log_id: st.last_log,
        })
    }

    async fn get_log_reader(&mut self) -> Self::LogReader {
        self.clone()
    }

    async fn save_vote(&mut self, vote: &Vote) -> Result<(), StorageError> {
        let mut g = self.0.shared.inner.write().unwrap();
        g.core.save_vote(vote).map_err(write_err)?;
        // The vote's commit made every pending append durable too.
        let cbs = std::mem::take(&mut g.callbacks);
        drop(g);
        for cb in cbs {
            cb.log_io_completed(Ok(()));
        }
        Ok(())
    }

    async fn read_vote(&mut self) -> Result<Option<Vote>, StorageError> {
        Ok(self.0.status().vote)
    }

    async fn save_committed(&mut self, committed: Option<LogId>) -> Result<(), StorageError> {
        self.0
            .write(|c| c.save_committed(committed))
            .map_err(write_err)
    }

    async fn read_committed(&mut self) -> Result<Option<LogId>, StorageError> {
        Ok(self.0.status().committed)
    }

    async fn append<I>(
        &mut self,
        entries: I,
        callback: LogFlushed<TypeConfig>,
    ) -> Result<(), StorageError>
    where
        I: IntoIterator<Item = Entry> + OptionalSend,
        I::IntoIter: OptionalSend,
    {
        let entries: Vec<Entry> = entries.into_iter().collect();
        let mut g = self.0.shared.inner.write().unwrap();
        g.core.append(&entries).map_err(write_err)?;
        g.callbacks.push(callback);
        let n = g.core.uncommitted();
        let mut fire = Vec::new();
        let committed = n == 0 || n >= self.0.shared.policy.every;
        if committed {
            g.core.commit().map_err(write_err)?;
            fire = std::mem::take(&mut g.callbacks);
        }
        let pending = !g.callbacks.is_empty() || g.core.uncommitted() > 0;
        drop(g);
        if committed {
            self.0.note_committed();
        }
        for cb in fire {
            cb.log_io_completed(Ok(()));
        }
        if pending {
            self.0.note_dirty();
        }
        Ok(())
    }

    async fn truncate(&mut self, log_id: LogId) -> Result<(), StorageError> {
        self.0.write(|c| c.truncate(log_id)).map_err(write_err)
    }

    async fn purge(&mut self, log_id: LogId) -> Result<(), StorageError> {
        self.0.write(|c| c.purge(log_id)).map_err(write_err)
    }
}

impl<M: PmMap> RaftStateMachine<TypeConfig> for PmStateMachine<M> {
    type SnapshotBuilder = PmSnapshotBuilder<M>;

    async fn applied_state(&mut self) -> Result<(Option<LogId>, StoredMembership), StorageError> {
        let st = self.0.status();
        Ok((st.applied, st.membership))
    }

    async fn apply<I>(&mut self, entries: I) -> Result<Vec<Reply>, StorageError>
    where
        I: IntoIterator<Item = Entry> + OptionalSend,
        I::IntoIter: OptionalSend,
    {
        let entries: Vec<Entry> = entries.into_iter().collect();
        self.0.write(|c| c.apply(&entries)).map_err(write_err)
    }

    async fn get_snapshot_builder(&mut self) -> Self::SnapshotBuilder {
        PmSnapshotBuilder(self.0.clone())
    }

    async fn begin_receiving_snapshot(&mut self) -> Result<Box<SnapshotData>, StorageError> {
        Ok(Box::new(SnapshotData::from_items(Vec::new())))
    }

    async fn install_snapshot(
        &mut self,
        meta: &SnapshotMeta,
        snapshot: Box<SnapshotData>,
    ) -> Result<(), StorageError> {
        self.0.install(meta, *snapshot).map_err(write_err)
    }

    async fn get_current_snapshot(&mut self) -> Result<Option<Snapshot<TypeConfig>>, StorageError> {
        self.0.current_snapshot().map_err(read_err)
    }
}

/// Builds snapshots of a [`PmStore`]: records the applied index as the
/// snapshot's and returns a view of the map there.
pub struct PmSnapshotBuilder<M: PmMap>(PmStore<M>);

impl<M: PmMap> RaftSnapshotBuilder<TypeConfig> for PmSnapshotBuilder<M> {
    async fn build_snapshot(&mut self) -> Result<Snapshot<TypeConfig>, StorageError> {
        self.0.write(|c| c.build_snapshot()).map_err(write_err)?;
        self.0
            .current_snapshot()
            .map_err(read_err)?
            .ok_or_else(|| write_err(StoreError::Invalid("snapshot vanished".into())))
    }
}

/// A pinned view of a store at a snapshot's index.
struct View<M: PmMap> {
    store: PmStore<M>,
    at: u64,
    generation: u64,
    cursor: Option<Vec<u8>>,
    pinned: bool,
}

impl<M: PmMap> SnapshotSource for View<M> {
    fn next_batch(&mut self, max_bytes: usize) -> Result<Option<Items>> {
        match self.next_chunk(max_bytes, Vec::new())? {
            Some(Chunk::Records(b)) => Ok(Some(snapshot::records_to_items(&b, self.at)?)),
            Some(Chunk::Items(i)) => Ok(Some(i)),
            None => Ok(None),
        }
    }

    /// The map's own records of the state at the snapshot's index, copied as
    /// they are (see [`RaftCore::snapshot_records`]).
    fn next_chunk(&mut self, max_bytes: usize, spare: Vec<u8>) -> Result<Option<Chunk>> {
        let mut out = spare;
        loop {
            let Some(cursor) = self.cursor.take() else {
                self.unpin();
                return Ok(None);
            };
            out.clear();
            out.reserve(max_bytes + max_bytes / 8);
            let next = self.store.read(|c| {
                if c.generation() != self.generation {
                    return Err(StoreError::Invalid(
                        "a snapshot was installed while this one was being read".into(),
                    ));
                }
                c.snapshot_records(self.at, &cursor, max_bytes, &mut out)
            })?;
            self.cursor = next;
            if !out.is_empty() {
                return Ok(Some(Chunk::Records(out)));
            }
        }
    }
}

impl<M: PmMap> View<M> {
    fn unpin(&mut self) {
        if std::mem::take(&mut self.pinned) {
            self.store.shared.inner.write().unwrap().core.unpin(self.at);
        }
    }
}

impl<M: PmMap> Drop for View<M> {
    fn drop(&mut self) {
        self.unpin();
    }
}

/// A received snapshot staged in a PM store.
struct Staged<M: PmMap> {
    map: M,
    items: u64,
}

struct Sink<M: PmMap> {
    staged: Option<M>,
    items: u64,
    at: u64,
}

impl<M: PmMap> SnapshotSink for Sink<M> {
    fn at(&self) -> u64 {
        self.at
    }

    fn push_records(&mut self, bytes: &[u8]) -> Result<u64> {
        let staged = self.staged.as_mut().expect("not finished");
        let n = RaftCore::<M>::stage_records(staged, self.at, bytes)?;
        self.items += n;
        Ok(n)
    }

    fn push(&mut self, items: Items) -> Result<()> {
        let at = self.at;
        let staged = self.staged.as_mut().expect("not finished");
        for (k, v) in items {
            RaftCore::<M>::stage_item(staged, at, &k, &v)?;
            self.items += 1;
        }
        Ok(())
    }

    fn finish(mut self: Box<Self>) -> Result<SnapshotData> {
        let map = self.staged.take().expect("finished once");
        Ok(SnapshotData::staged(Staged {
            map,
            items: self.items,
        }))
    }
}

impl<M: PmMap> Drop for Sink<M> {
    fn drop(&mut self) {
        if let Some(m) = self.staged.take() {
            let _ = M::discard(m);
        }
    }
}
