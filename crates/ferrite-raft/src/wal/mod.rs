//! The baseline (thesis §2.3): a conventional Raft write-ahead log and
//! snapshots in ordinary files on the machine's disk, `fdatasync` before an
//! append is acknowledged durable, and the state machine in DRAM.
//!
//! Files in the store's directory: the log segments ([`log`]), `snapshot`
//! (the last snapshot, [`snapfile`]), `snapshot.recv` while one is received.
//! Start-up loads the snapshot into DRAM and replays the log; openraft then
//! re-applies the committed entries after the snapshot.

pub mod log;
pub mod snapfile;

use std::collections::BTreeMap;
use std::fmt::Debug;
use std::ops::RangeBounds;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, RwLock};

use openraft::storage::{LogFlushed, RaftLogStorage, RaftStateMachine};
use openraft::{
    EntryPayload, LogState, OptionalSend, RaftLogReader, RaftSnapshotBuilder, Snapshot,
};

use self::log::WalLog;
use self::snapfile::{FileSink, SnapReader, SnapWriter, StagedFile};
use crate::error::{read_err, write_err, Result, StoreError};
use crate::snapshot::{Inner, SnapshotData, SnapshotSink};
use crate::types::{
    Command, Cond, Entry, LogId, Reply, SnapshotMeta, StorageError, StoredMembership, TypeConfig,
    Vote,
};

struct SmState {
    map: BTreeMap<Vec<u8>, Vec<u8>>,
    applied: Option<LogId>,
    membership: StoredMembership,
    snapshot: Option<SnapshotMeta>,
    snapshot_seq: u64,
}

struct WalShared {
    dir: PathBuf,
    log: Mutex<WalLog>,
    sm: RwLock<SmState>,
}

/// The WAL baseline store. Cheap to clone.
#[derive(Clone)]
pub struct WalStore {
    shared: Arc<WalShared>,
}

/// Where a WAL store stands.
#[derive(Debug, Clone, Default)]
pub struct WalStatus {
    pub last_log: Option<LogId>,
    pub purged: Option<LogId>,
    pub committed: Option<LogId>,
    pub vote: Option<Vote>,
    pub applied: Option<LogId>,
    pub keys: u64,
}

fn apply_cmd(map: &mut BTreeMap<Vec<u8>, Vec<u8>>, cmd: &Command) -> Reply {
    match cmd {
        Command::Set { key, value, cond } => {
            let cur = map.get(key);
            let ok = match cond {
                Cond::Always => true,
                Cond::Nx => cur.is_none(),
                Cond::Xx => cur.is_some(),
                Cond::IfEq(e) => cur == Some(e),
            };
            if ok {
                map.insert(key.clone(), value.clone());
            }
            Reply::Set { applied: ok }
        }
        Command::Del { keys } => Reply::Del {
            removed: keys.iter().filter(|k| map.remove(*k).is_some()).count() as u64,
        },
    }
}

impl WalStore {
    /// Opens (or creates) the store in `dir`: loads the snapshot and replays
    /// the log.
    pub fn open(dir: &Path) -> Result<WalStore> {
        WalStore::open_with(dir, log::SEGMENT_BYTES)
    }

    /// [`WalStore::open`] with log segments of about `segment_bytes`.
    pub fn open_with(dir: &Path, segment_bytes: u64) -> Result<WalStore> {
        let log = WalLog::open_with(dir, segment_bytes)?;
        let snap = dir.join("snapshot");
        let _ = std::fs::remove_file(dir.join("snapshot.tmp"));
        let mut sm = SmState {
            map: BTreeMap::new(),
            applied: None,
            membership: StoredMembership::default(),
            snapshot: None,
            snapshot_seq: 0,
        };
        if snap.exists() {
            let mut r = SnapReader::open(&snap)?;
            while let Some((k, v)) = r.next_item()? {
                sm.map.insert(k, v);
            }
            sm.applied = r.meta.last_log_id;
            sm.membership = r.meta.last_membership.clone();
            sm.snapshot = Some(r.meta.clone());
        }
        Ok(WalStore {
            shared: Arc::new(WalShared {
                dir: dir.to_path_buf(),
                log: Mutex::new(log),
                sm: RwLock::new(sm),
            }),
        })
    }

    /// The openraft log store and state machine.
    pub fn parts(&self) -> (WalLogStore, WalStateMachine) {
        (WalLogStore(self.clone()), WalStateMachine(self.clone()))
    }

    /// A probe that turns true once every handle of this store is gone.
    pub fn closed_probe(&self) -> Box<dyn Fn() -> bool + Send + Sync> {
        let w = Arc::downgrade(&self.shared);
        Box::new(move || w.strong_count() == 0)
    }

    pub fn get(&self, key: &[u8]) -> Option<Vec<u8>> {
        self.shared.sm.read().unwrap().map.get(key).cloned()
    }

    pub fn status(&self) -> WalStatus {
        let l = self.shared.log.lock().unwrap();
        let sm = self.shared.sm.read().unwrap();
        WalStatus {
            last_log: l.mem.last(),
            purged: l.mem.purged,
            committed: l.mem.committed,
            vote: l.mem.vote,
            applied: sm.applied,
            keys: sm.map.len() as u64,
        }
    }

    pub fn dir(&self) -> &Path {
        &self.shared.dir
    }

    /// Bytes of the store's files (log segments and snapshots).
    pub fn disk_bytes(&self) -> u64 {
        std::fs::read_dir(&self.shared.dir)
            .map(|rd| {
                rd.flatten()
                    .filter_map(|e| e.metadata().ok())
                    .filter(|m| m.is_file())
                    .map(|m| m.len())
                    .sum()
            })
            .unwrap_or(0)
    }

    /// Log segment files in the store's directory.
    pub fn segments(&self) -> usize {
        std::fs::read_dir(&self.shared.dir)
            .map(|rd| {
                rd.flatten()
                    .filter(|e| {
                        let n = e.file_name();
                        let n = n.to_string_lossy();
                        n.starts_with("wal-") && n.ends_with(".log")
                    })
                    .count()
            })
            .unwrap_or(0)
    }

    /// Where a received snapshot goes: a file beside the current one.
    pub fn sink(&self, meta: &SnapshotMeta) -> Result<Box<dyn SnapshotSink>> {
        let w = SnapWriter::create(&self.shared.dir.join("snapshot.recv"), meta)?;
        Ok(Box::new(FileSink {
            w: Some(w),
            at: meta.last_log_id.map_or(0, |l| l.index),
        }))
    }

    fn build_snapshot(&self) -> Result<Snapshot<TypeConfig>> {
        // Serialise the state in DRAM under the lock, write the file outside.
        let (meta, items) = {
            let mut sm = self.shared.sm.write().unwrap();
            sm.snapshot_seq += 1;
            let meta = SnapshotMeta {
                last_log_id: sm.applied,
                last_membership: sm.membership.clone(),
                snapshot_id: format!(
                    "{}-{}-{}",
                    sm.applied.map_or(0, |l| l.leader_id.term),
                    sm.applied.map_or(0, |l| l.index),
                    sm.snapshot_seq
                ),
            };
            let items: Vec<(Vec<u8>, Vec<u8>)> =
                sm.map.iter().map(|(k, v)| (k.clone(), v.clone())).collect();
            (meta, items)
        };
        let mut w = SnapWriter::create(&self.shared.dir.join("snapshot"), &meta)?;
        for (k, v) in &items {
            w.item(k, v)?;
        }
        w.finish()?;
        self.shared.sm.write().unwrap().snapshot = Some(meta.clone());
        self.current_snapshot()?
            .ok_or_else(|| StoreError::Invalid("snapshot vanished".into()))
    }

    fn current_snapshot(&self) -> Result<Option<Snapshot<TypeConfig>>> {
        let path = self.shared.dir.join("snapshot");
        if self.shared.sm.read().unwrap().snapshot.is_none() {
            return Ok(None);
        }
        let r = SnapReader::open(&path)?;
        let meta = r.meta.clone();
        Ok(Some(Snapshot {
            meta,
            snapshot: Box::new(SnapshotData::source(r)),
        }))
    }

    fn install(&self, meta: &SnapshotMeta, data: SnapshotData) -> Result<()> {
        let path = self.shared.dir.join("snapshot");
        let staged = match data.0 {
            Inner::Staged(b) => match b.downcast::<StagedFile>() {
                Ok(s) => *s,
                Err(_) => {
                    return Err(StoreError::Invalid(
                        "a snapshot staged for another kind of store".into(),
                    ))
                }
            },
            other => {
                let mut data = SnapshotData(other);
                let mut w = SnapWriter::create(&self.shared.dir.join("snapshot.recv"), meta)?;
                while let Some(batch) = data.next_batch(1 << 20)? {
                    for (k, v) in batch {
                        w.item(&k, &v)?;
                    }
                }
                let (p, items) = w.finish()?;
                StagedFile { path: p, items }
            }
        };
        std::fs::rename(&staged.path, &path)
            .map_err(|e| StoreError::io(format!("rename to {}", path.display()), e))?;
        std::fs::File::open(&self.shared.dir)
            .and_then(|d| d.sync_all())
            .map_err(|e| StoreError::io("fsync the store directory", e))?;
        let mut r = SnapReader::open(&path)?;
        let mut map = BTreeMap::new();
        while let Some((k, v)) = r.next_item()? {
            map.insert(k, v);
        }
        let mut sm = self.shared.sm.write().unwrap();
        sm.map = map;
        sm.applied = meta.last_log_id;
        sm.membership = meta.last_membership.clone();
        sm.snapshot = Some(meta.clone());
        Ok(())
    }
}

/// The log-store half of a [`WalStore`].
#[derive(Clone)]
pub struct WalLogStore(WalStore);

/// The state-machine half of a [`WalStore`].
pub struct WalStateMachine(WalStore);

impl RaftLogReader<TypeConfig> for WalLogStore {
    async fn try_get_log_entries<RB: RangeBounds<u64> + Clone + Debug + OptionalSend>(
        &mut self,
        range: RB,
    ) -> Result<Vec<Entry>, StorageError> {
        let l = self.0.shared.log.lock().unwrap();
        let start = range.start_bound().cloned();
        let end = range.end_bound().cloned();
        let mut out = Vec::new();
        let mut expect: Option<u64> = None;
        for (&i, e) in l.mem.entries.range((start, end)) {
            if expect.is_some_and(|x| x != i) {
                break;
            }
            out.push(e.clone());
            expect = Some(i + 1);
        }
        Ok(out)
    }
}

impl RaftLogStorage<TypeConfig> for WalLogStore {
    type LogReader = WalLogStore;

    async fn get_log_state(&mut self) -> Result<LogState<TypeConfig>, StorageError> {
        let l = self.0.shared.log.lock().unwrap();
        Ok(LogState {
            last_purged_log_id: l.mem.purged,
            last_log_id: l.mem.last(),
        })
    }

    async fn get_log_reader(&mut self) -> Self::LogReader {
        self.clone()
    }

    async fn save_vote(&mut self, vote: &Vote) -> Result<(), StorageError> {
        self.0
            .shared
            .log
            .lock()
            .unwrap()
            .save_vote(vote)
            .map_err(write_err)
    }

    async fn read_vote(&mut self) -> Result<Option<Vote>, StorageError> {
        Ok(self.0.shared.log.lock().unwrap().mem.vote)
    }

    async fn save_committed(&mut self, c: Option<LogId>) -> Result<(), StorageError> {
        self.0
            .shared
            .log
            .lock()
            .unwrap()
            .save_committed(c)
            .map_err(write_err)
    }

    async fn read_committed(&mut self) -> Result<Option<LogId>, StorageError> {
        Ok(self.0.shared.log.lock().unwrap().mem.committed)
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
        self.0
            .shared
            .log
            .lock()
            .unwrap()
            .append(entries, callback)
            .map_err(write_err)
    }

    async fn truncate(&mut self, log_id: LogId) -> Result<(), StorageError> {
        self.0
            .shared
            .log
            .lock()
            .unwrap()
            .truncate(log_id.index)
            .map_err(write_err)
    }

    async fn purge(&mut self, log_id: LogId) -> Result<(), StorageError> {
        self.0
            .shared
            .log
            .lock()
            .unwrap()
            .purge(log_id)
            .map_err(write_err)
    }
}

impl RaftStateMachine<TypeConfig> for WalStateMachine {
    type SnapshotBuilder = WalSnapshotBuilder;

    async fn applied_state(&mut self) -> Result<(Option<LogId>, StoredMembership), StorageError> {
        let sm = self.0.shared.sm.read().unwrap();
        Ok((sm.applied, sm.membership.clone()))
    }

    async fn apply<I>(&mut self, entries: I) -> Result<Vec<Reply>, StorageError>
    where
        I: IntoIterator<Item = Entry> + OptionalSend,
        I::IntoIter: OptionalSend,
    {
        let mut sm = self.0.shared.sm.write().unwrap();
        let mut out = Vec::new();
        for e in entries {
            let r = match &e.payload {
                EntryPayload::Blank => Reply::None,
                EntryPayload::Normal(c) => apply_cmd(&mut sm.map, c),
                EntryPayload::Membership(m) => {
                    sm.membership = StoredMembership::new(Some(e.log_id), m.clone());
                    Reply::None
                }
            };
            sm.applied = Some(e.log_id);
            out.push(r);
        }
        Ok(out)
    }

    async fn get_snapshot_builder(&mut self) -> Self::SnapshotBuilder {
        WalSnapshotBuilder(self.0.clone())
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

/// Writes a WAL store's state to its snapshot file.
pub struct WalSnapshotBuilder(WalStore);

impl RaftSnapshotBuilder<TypeConfig> for WalSnapshotBuilder {
    async fn build_snapshot(&mut self) -> Result<Snapshot<TypeConfig>, StorageError> {
        self.0.build_snapshot().map_err(write_err)
    }
}
