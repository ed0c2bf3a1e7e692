//! The replicated state machine on one persistent map, without a separate
//! WAL (thesis §3.2–3.4): the operations openraft's log storage and state
//! machine need, written once over any [`PmMap`].
//!
//! * **Append** applies the entry to the map at once: a `SET` or `DEL` writes
//!   versions `(key, index)` (its condition decided against the newest
//!   version, which is the log before it) and the entry's log record at
//!   `(LOG, index)`, which names the keys it wrote and is the Raft entry.
//! * **Truncate** undoes a log suffix: it deletes the versions each record
//!   names, then the records.
//! * **Apply** only moves the applied index (persisted lazily as `applied`):
//!   reads see the greatest version at or below it.
//! * **Purge** deletes log records up to an index and then the versions they
//!   made obsolete: of each key they wrote, every version below the greatest
//!   one at or below the horizon (the purged index, lowered while a snapshot
//!   is being sent), and that one too when it is a deletion. The thesis drops
//!   old versions as soon as the applied index moves; here they wait for the
//!   purge because openraft may still read those log entries back (the values
//!   live only in the versions) — openraft purges right after each snapshot,
//!   and a snapshot costs nothing here.
//! * **Snapshot**: the map itself at the snapshot's index; building one writes
//!   its metadata. Installing one fills a staging map and switches to it.
//!
//! Nothing here issues a barrier except [`RaftCore::commit`] (and the vote,
//! which openraft needs durable on return): the caller decides when a group
//! commits.

use std::collections::{BTreeMap, VecDeque};

use crate::error::{Result, StoreError};
use crate::keys::{self, AppliedMeta, Effect, LogRecord, RecPayload};
use crate::map::{record, PmMap};
use crate::types::{Command, Cond, Entry, LogId, Reply, SnapshotMeta, StoredMembership, Vote};

/// Where the log and the state machine stand.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CoreStatus {
    pub last_log: Option<LogId>,
    pub purged: Option<LogId>,
    pub vote: Option<Vote>,
    pub committed: Option<LogId>,
    pub applied: Option<LogId>,
    pub membership: StoredMembership,
    pub live_keys: u64,
    pub snapshot: Option<SnapshotMeta>,
}

/// Removes the record starting at `start` of `out` (the last one) when its
/// version is a deletion: a snapshot holds the keys that have values.
fn drop_deletion(out: &mut Vec<u8>, start: Option<usize>) -> std::result::Result<(), String> {
    let Some(s) = start else { return Ok(()) };
    let (_, _, v) = record::puts(&out[s..]).next().ok_or("an empty record")??;
    match keys::parse_version(v)? {
        Some(_) => {}
        None => out.truncate(s),
    }
    Ok(())
}

/// The multi-version Raft state on a map. See the module documentation.
pub struct RaftCore<M: PmMap> {
    map: M,
    st: CoreStatus,
    /// (index, key) of versions written by entries not yet purged: the keys
    /// to clean when the purge passes them.
    gc_queue: VecDeque<(u64, Vec<u8>)>,
    /// Indexes of snapshots being read (counts).
    pins: BTreeMap<u64, usize>,
    snapshot_seq: u64,
    /// Incremented when a snapshot replaces the map (snapshot readers stop).
    generation: u64,
    poisoned: Option<String>,
}

fn enc<T: serde::Serialize>(v: &T) -> Vec<u8> {
    postcard::to_stdvec(v).expect("metadata serialises")
}

fn dec<T: serde::de::DeserializeOwned>(what: &str, b: &[u8]) -> Result<T> {
    postcard::from_bytes(b)
        .map_err(|e| StoreError::corrupt("raft metadata", format!("{what}: {e}")))
}

impl<M: PmMap> RaftCore<M> {
    /// Opens the state kept in `map` (reads the metadata, finds the last log
    /// entry and the keys whose old versions still wait for a purge).
    pub fn open(map: M) -> Result<RaftCore<M>> {
        let mut st = CoreStatus::default();
        if let Some(v) = map.get(&keys::meta_key("vote"))? {
            st.vote = Some(dec("vote", &v)?);
        }
        if let Some(v) = map.get(&keys::meta_key("committed"))? {
            st.committed = dec("committed", &v)?;
        }
        if let Some(v) = map.get(&keys::meta_key("purged"))? {
            st.purged = Some(dec("purged", &v)?);
        }
        if let Some(v) = map.get(&keys::meta_key("applied"))? {
            let a: AppliedMeta = dec("applied", &v)?;
            st.applied = a.applied;
            st.membership = a.membership;
            st.live_keys = a.live_keys;
        }
        if let Some(v) = map.get(&keys::meta_key("snapshot"))? {
            st.snapshot = Some(dec("snapshot", &v)?);
        }
        let mut core = RaftCore {
            map,
            st,
            gc_queue: VecDeque::new(),
            pins: BTreeMap::new(),
            snapshot_seq: 0,
            generation: 0,
            poisoned: None,
        };
        core.st.last_log = core.find_last_log()?.or(core.st.purged);
        // Keys written by unpurged entries: cleaned when the purge passes them.
        let (from, to) = keys::log_space();
        let mut cursor = from;
        loop {
            let batch = core.map.range(&cursor, &to, 1024)?;
            let Some(last) = batch.last() else { break };
            cursor = last.0.clone();
            cursor.push(0);
            for (k, v) in &batch {
                let idx =
                    keys::parse_log_key(k).ok_or_else(|| core.bad(format!("log key {k:?}")))?;
                let rec = keys::decode_record(v)
                    .map_err(|d| core.bad(format!("log record {idx}: {d}")))?;
                if let RecPayload::Normal(e) = &rec.payload {
                    for key in e.written() {
                        core.gc_queue.push_back((idx, key.to_vec()));
                    }
                }
            }
        }
        Ok(core)
    }

    fn bad(&self, d: String) -> StoreError {
        StoreError::corrupt(self.map.kind(), d)
    }

    /// The map underneath (tests, benchmarks, checks).
    pub fn map(&self) -> &M {
        &self.map
    }

    pub fn map_mut(&mut self) -> &mut M {
        &mut self.map
    }

    pub fn status(&self) -> &CoreStatus {
        &self.st
    }

    fn check_writable(&self) -> Result<()> {
        match &self.poisoned {
            None => Ok(()),
            Some(why) => Err(StoreError::Invalid(format!(
                "the store stopped taking writes after a failed write ({why}); restart the replica to recover its last commit"
            ))),
        }
    }

    /// Runs a multi-step modification; a failure part-way poisons the store,
    /// so the partial group is never committed (a restart recovers the last
    /// commit).
    fn guarded<T>(&mut self, f: impl FnOnce(&mut Self) -> Result<T>) -> Result<T> {
        self.check_writable()?;
        let r = f(self);
        if let Err(e) = &r {
            self.poisoned = Some(e.to_string());
        }
        r
    }

    fn find_last_log(&self) -> Result<Option<LogId>> {
        let (from, _) = keys::log_space();
        match self.map.floor(&from, &keys::log_key(u64::MAX))? {
            Some((k, v)) => {
                let idx =
                    keys::parse_log_key(&k).ok_or_else(|| self.bad(format!("log key {k:?}")))?;
                let rec = keys::decode_record(&v)
                    .map_err(|d| self.bad(format!("log record {idx}: {d}")))?;
                Ok(Some(rec.log_id(idx)))
            }
            None => Ok(None),
        }
    }

    fn record(&self, index: u64) -> Result<Option<LogRecord>> {
        match self.map.get(&keys::log_key(index))? {
            Some(v) => {
                Ok(Some(keys::decode_record(&v).map_err(|d| {
                    self.bad(format!("log record {index}: {d}"))
                })?))
            }
            None => Ok(None),
        }
    }

    /// The newest version of `key` (None: absent or deleted), uncommitted
    /// entries included: the state after the whole log.
    fn newest(&self, key: &[u8]) -> Result<Option<Vec<u8>>> {
        self.version_at(key, u64::MAX)
    }

    /// The value of `key` at index `at`.
    fn version_at(&self, key: &[u8], at: u64) -> Result<Option<Vec<u8>>> {
        let lower = keys::data_key(key, 0);
        match self.map.floor(&lower, &keys::data_key(key, at))? {
            Some((_, v)) => Ok(keys::parse_version(&v)
                .map_err(|d| self.bad(format!("version of {key:?}: {d}")))?
                .map(<[u8]>::to_vec)),
            None => Ok(None),
        }
    }

    /// Decides a command against the newest versions and writes its versions
    /// at `index`.
    fn execute(&mut self, index: u64, cmd: &Command) -> Result<Effect> {
        match cmd {
            Command::Set { key, value, cond } => {
                let cur = self.newest(key)?;
                let applied = match cond {
                    Cond::Always => true,
                    Cond::Nx => cur.is_none(),
                    Cond::Xx => cur.is_some(),
                    Cond::IfEq(e) => cur.as_deref() == Some(e.as_slice()),
                };
                if applied {
                    self.map
                        .put(&keys::data_key(key, index), &keys::version_value(value))?;
                }
                Ok(Effect::Set {
                    key: key.clone(),
                    cond: cond.clone(),
                    applied,
                    existed: cur.is_some(),
                    value: (!applied).then(|| value.clone()),
                })
            }
            Command::Del { keys: ks } => {
                let mut out = Vec::with_capacity(ks.len());
                for k in ks {
                    // A key named twice is removed once.
                    let dup = out.iter().any(|(o, _): &(Vec<u8>, bool)| o == k);
                    let existed = !dup && self.newest(k)?.is_some();
                    if existed {
                        self.map.put(&keys::data_key(k, index), keys::TOMBSTONE)?;
                    }
                    out.push((k.clone(), existed));
                }
                Ok(Effect::Del { keys: out })
            }
        }
    }

    /// Appends entries (their versions and log records); durable at the next
    /// [`RaftCore::commit`].
    pub fn append(&mut self, entries: &[Entry]) -> Result<()> {
        self.guarded(|c| {
            for e in entries {
                let idx = e.log_id.index;
                if c.st.last_log.is_some_and(|l| l.index >= idx) && c.record(idx)?.is_some() {
                    c.truncate_inner(idx)?;
                }
                let payload = match &e.payload {
                    openraft::EntryPayload::Blank => RecPayload::Blank,
                    openraft::EntryPayload::Membership(m) => RecPayload::Membership(m.clone()),
                    openraft::EntryPayload::Normal(cmd) => RecPayload::Normal(c.execute(idx, cmd)?),
                };
                if let RecPayload::Normal(eff) = &payload {
                    for k in eff.written() {
                        c.gc_queue.push_back((idx, k.to_vec()));
                    }
                }
                let rec = LogRecord {
                    term: e.log_id.leader_id.term,
                    node: e.log_id.leader_id.node_id,
                    payload,
                };
                c.map.put(&keys::log_key(idx), &keys::encode_record(&rec))?;
                c.st.last_log = Some(e.log_id);
            }
            Ok(())
        })
    }

    fn truncate_inner(&mut self, from: u64) -> Result<()> {
        let last = self.st.last_log.map_or(0, |l| l.index);
        let mut idx = last;
        while idx >= from {
            if let Some(rec) = self.record(idx)? {
                if let RecPayload::Normal(eff) = &rec.payload {
                    for k in eff.written() {
                        self.map.delete(&keys::data_key(k, idx))?;
                    }
                }
                self.map.delete(&keys::log_key(idx))?;
            }
            if idx == 0 {
                break;
            }
            idx -= 1;
        }
        self.st.last_log = match from.checked_sub(1) {
            Some(prev) => match self.record(prev)? {
                Some(r) => Some(r.log_id(prev)),
                None => self.st.purged,
            },
            None => self.st.purged,
        };
        Ok(())
    }

    /// Deletes log entries from `log_id.index` on, undoing their versions.
    pub fn truncate(&mut self, log_id: LogId) -> Result<()> {
        self.guarded(|c| c.truncate_inner(log_id.index))
    }

    /// Deletes log entries up to `log_id` and the versions they made obsolete.
    pub fn purge(&mut self, log_id: LogId) -> Result<()> {
        self.guarded(|c| {
            let from = c.st.purged.map_or(0, |p| p.index + 1);
            let (_, to) = keys::log_space();
            let start = keys::log_key(from);
            let end = keys::log_key(log_id.index.saturating_add(1));
            let end = if log_id.index == u64::MAX { to } else { end };
            loop {
                let batch = c.map.range(&start, &end, 1024)?;
                if batch.is_empty() {
                    break;
                }
                for (k, _) in batch {
                    c.map.delete(&k)?;
                }
            }
            if c.st.purged.is_none_or(|p| p.index < log_id.index) {
                c.st.purged = Some(log_id);
                c.map.put(&keys::meta_key("purged"), &enc(&log_id))?;
            }
            if c.st.last_log.is_none_or(|l| l.index < log_id.index) {
                c.st.last_log = Some(log_id);
            }
            c.collect_garbage()
        })
    }

    /// The index below which old versions may go: the purged index, lowered
    /// to the oldest snapshot being read.
    fn horizon(&self) -> Option<u64> {
        let p = self.st.purged?.index;
        Some(match self.pins.keys().next() {
            Some(&pin) => p.min(pin),
            None => p,
        })
    }

    fn collect_garbage(&mut self) -> Result<()> {
        let Some(h) = self.horizon() else {
            return Ok(());
        };
        if !self.map.index_ready() {
            // The versions' index is still being built after an open (or
            // the state is about to be replaced by a snapshot): the old
            // versions stay queued until the next purge or clean-up step.
            return Ok(());
        }
        while self.gc_queue.front().is_some_and(|(i, _)| *i <= h) {
            let (_, key) = self.gc_queue.pop_front().expect("checked");
            self.clean_key(&key, h)?;
        }
        Ok(())
    }

    /// Deletes the versions of `key` that no read at or above `h` can see.
    fn clean_key(&mut self, key: &[u8], h: u64) -> Result<()> {
        let lower = keys::data_key(key, 0);
        let upper = keys::data_key(key, h);
        let Some((top, v)) = self.map.floor(&lower, &upper)? else {
            return Ok(());
        };
        loop {
            let below = self.map.range(&lower, &top, 256)?;
            if below.is_empty() {
                break;
            }
            for (k, _) in below {
                self.map.delete(&k)?;
            }
        }
        if v.as_slice() == keys::TOMBSTONE {
            self.map.delete(&top)?;
        }
        Ok(())
    }

    /// Persists the vote and commits (openraft needs it durable on return).
    pub fn save_vote(&mut self, vote: &Vote) -> Result<()> {
        self.guarded(|c| {
            c.map.put(&keys::meta_key("vote"), &enc(vote))?;
            c.st.vote = Some(*vote);
            c.map.commit()
        })
    }

    /// Records the committed log id (durable with the next commit).
    pub fn save_committed(&mut self, committed: Option<LogId>) -> Result<()> {
        self.guarded(|c| {
            c.map.put(&keys::meta_key("committed"), &enc(&committed))?;
            c.st.committed = committed;
            Ok(())
        })
    }

    /// Applies committed entries: moves the applied index (no barrier) and
    /// returns each entry's reply. Entries missing from the log (openraft's
    /// storage tests apply entries they never appended) are executed here.
    pub fn apply(&mut self, entries: &[Entry]) -> Result<Vec<Reply>> {
        self.guarded(|c| {
            let mut out = Vec::with_capacity(entries.len());
            for e in entries {
                let idx = e.log_id.index;
                let rec = c.record(idx)?.filter(|r| r.log_id(idx) == e.log_id);
                let reply = match (&e.payload, rec) {
                    (openraft::EntryPayload::Normal(cmd), rec) => {
                        let eff = match rec.map(|r| r.payload) {
                            Some(RecPayload::Normal(eff)) => eff,
                            _ => c.execute(idx, cmd)?,
                        };
                        c.st.live_keys = (c.st.live_keys as i64 + eff.live_delta()).max(0) as u64;
                        eff.reply()
                    }
                    (openraft::EntryPayload::Membership(m), _) => {
                        c.st.membership = StoredMembership::new(Some(e.log_id), m.clone());
                        Reply::None
                    }
                    (openraft::EntryPayload::Blank, _) => Reply::None,
                };
                c.st.applied = Some(e.log_id);
                out.push(reply);
            }
            if !entries.is_empty() {
                c.put_applied()?;
            }
            Ok(out)
        })
    }

    fn put_applied(&mut self) -> Result<()> {
        let a = AppliedMeta {
            applied: self.st.applied,
            membership: self.st.membership.clone(),
            live_keys: self.st.live_keys,
        };
        self.map.put(&keys::meta_key("applied"), &enc(&a))
    }

    /// The value of `key` in the state machine (at the applied index).
    pub fn get(&self, key: &[u8]) -> Result<Option<Vec<u8>>> {
        match self.st.applied {
            Some(a) => self.version_at(key, a.index),
            None => Ok(None),
        }
    }

    /// The value of `key` at index `at` (snapshot reads).
    pub fn get_at(&self, key: &[u8], at: u64) -> Result<Option<Vec<u8>>> {
        self.version_at(key, at)
    }

    /// Log entries with indexes in `[from, to)`: the present ones from the
    /// first present one on, up to the first gap.
    pub fn entries(&self, from: u64, to: u64) -> Result<Vec<Entry>> {
        let mut out = Vec::new();
        if from >= to {
            return Ok(out);
        }
        let batch = self.map.range(
            &keys::log_key(from),
            &keys::log_key(to),
            (to - from).min(1 << 20) as usize,
        )?;
        let mut expect = None;
        for (k, v) in batch {
            let idx = keys::parse_log_key(&k).ok_or_else(|| self.bad(format!("log key {k:?}")))?;
            if expect.is_some_and(|e| e != idx) {
                break;
            }
            let rec =
                keys::decode_record(&v).map_err(|d| self.bad(format!("log record {idx}: {d}")))?;
            let e = keys::entry_of(idx, &rec, |key| {
                match self.map.get(&keys::data_key(key, idx)) {
                    Ok(Some(v)) => keys::parse_version(&v)?.map(<[u8]>::to_vec).ok_or_else(|| {
                        format!("entry {idx}: its version of {key:?} is a deletion")
                    }),
                    Ok(None) => Err(format!("entry {idx}: its version of {key:?} is missing")),
                    Err(e) => Err(e.to_string()),
                }
            })
            .map_err(|d| self.bad(d))?;
            out.push(e);
            expect = Some(idx + 1);
        }
        Ok(out)
    }

    /// Records a snapshot at the applied index (the map is the snapshot).
    pub fn build_snapshot(&mut self) -> Result<SnapshotMeta> {
        self.guarded(|c| {
            c.snapshot_seq += 1;
            let last = c.st.applied;
            let meta = SnapshotMeta {
                last_log_id: last,
                last_membership: c.st.membership.clone(),
                snapshot_id: format!(
                    "{}-{}-{}",
                    last.map_or(0, |l| l.leader_id.term),
                    last.map_or(0, |l| l.index),
                    c.snapshot_seq
                ),
            };
            c.map.put(&keys::meta_key("snapshot"), &enc(&meta))?;
            c.st.snapshot = Some(meta.clone());
            Ok(meta)
        })
    }

    /// Marks a snapshot at `at` as being read: old versions it needs stay and
    /// the list's clean-up pauses until [`RaftCore::unpin`].
    pub fn pin(&mut self, at: u64) {
        *self.pins.entry(at).or_default() += 1;
    }

    pub fn unpin(&mut self, at: u64) {
        if let Some(n) = self.pins.get_mut(&at) {
            *n -= 1;
            if *n == 0 {
                self.pins.remove(&at);
            }
        }
    }

    /// Counts snapshot installations (a snapshot reader checks it between
    /// batches).
    pub fn generation(&self) -> u64 {
        self.generation
    }

    /// What holds dead space back for now: keys whose superseded or
    /// deleted versions wait for the log to be purged past the entry that
    /// superseded them (a lagging replica holds a leader's purge back), plus
    /// snapshot reads in progress (they pin old versions and pause the
    /// list's clean-up). Zero when everything dead can be reclaimed now.
    pub fn held_back(&self) -> u64 {
        (self.gc_queue.len() + self.pins.len()) as u64
    }

    /// Whether a snapshot is being read.
    pub fn pinned(&self) -> bool {
        !self.pins.is_empty()
    }

    /// Appends to `out` the state at index `at` as snapshot records: for
    /// each user key from `cursor` (a data key) on, its newest version at or
    /// below `at` unless that is a deletion, copied as it is in the map
    /// (key `(user key, index)`, version value), until `out` holds about
    /// `max_bytes`. Returns the cursor of the next batch (None: done). No
    /// item is encoded or allocated: the list copies its PM records.
    pub fn snapshot_records(
        &self,
        at: u64,
        cursor: &[u8],
        max_bytes: usize,
        out: &mut Vec<u8>,
    ) -> Result<Option<Vec<u8>>> {
        let (_, end) = keys::data_space();
        let mut user: Option<Vec<u8>> = None;
        // Where the current user key's candidate record starts in `out`.
        let mut cand: Option<usize> = None;
        let mut next = None;
        let mut bad: Option<String> = None;
        self.map.visit(cursor, &end, &mut |k, raw| {
            let Some((u, idx)) = keys::parse_data_key(k) else {
                bad = Some("a data key that does not parse".into());
                return Ok(false);
            };
            if user.as_deref() != Some(u) {
                if let Err(d) = drop_deletion(out, cand.take()) {
                    bad = Some(d);
                    return Ok(false);
                }
                if out.len() >= max_bytes {
                    next = Some(k.to_vec());
                    return Ok(false);
                }
                let v = user.get_or_insert_with(Vec::new);
                v.clear();
                v.extend_from_slice(u);
            }
            if idx <= at {
                // A newer version at or below `at` replaces the candidate.
                if let Some(s) = cand.take() {
                    out.truncate(s);
                }
                cand = Some(out.len());
                raw.append_record(k, out);
            }
            Ok(true)
        })?;
        if bad.is_none() {
            if let Err(d) = drop_deletion(out, cand) {
                bad = Some(d);
            }
        }
        match bad {
            Some(d) => Err(self.bad(d)),
            None => Ok(next),
        }
    }

    /// Checks a stream of snapshot records for index `at` (every record a
    /// version at or below `at` holding a value) and writes it into a
    /// staging map; returns how many records it held.
    pub fn stage_records(staged: &mut M, at: u64, bytes: &[u8]) -> Result<u64> {
        for r in crate::snapshot::version_records(bytes, at) {
            r?;
        }
        staged.put_records(bytes)
    }

    /// A staging map for a snapshot being received.
    pub fn staging(&self) -> Result<M> {
        self.map.staging()
    }

    /// Writes one snapshot item into a staging map.
    pub fn stage_item(staged: &mut M, at: u64, key: &[u8], value: &[u8]) -> Result<()> {
        staged.put(&keys::data_key(key, at), &keys::version_value(value))
    }

    /// Installs a received snapshot: the staged state at `meta`'s index, plus
    /// this replica's vote, committed id and the log after the snapshot (with
    /// its versions), replaces the map in one switch; the log up to the
    /// snapshot counts as purged.
    pub fn install(&mut self, meta: &SnapshotMeta, mut staged: M, items: u64) -> Result<()> {
        self.guarded(|c| {
            let s = meta.last_log_id.map_or(0, |l| l.index);
            let mut last_log = meta.last_log_id;
            // The log after the snapshot, with the versions its entries wrote.
            let (_, lend) = keys::log_space();
            let mut cursor = keys::log_key(s.saturating_add(1));
            let mut gc = VecDeque::new();
            if meta.last_log_id.is_some() {
                loop {
                    let batch = c.map.range(&cursor, &lend, 256)?;
                    let Some(l) = batch.last() else { break };
                    cursor = l.0.clone();
                    cursor.push(0);
                    for (k, v) in batch {
                        let idx = keys::parse_log_key(&k).ok_or_else(|| c.bad("log key".into()))?;
                        let rec = keys::decode_record(&v).map_err(|d| c.bad(d))?;
                        if let RecPayload::Normal(eff) = &rec.payload {
                            for key in eff.written() {
                                let dk = keys::data_key(key, idx);
                                let ver = c.map.get(&dk)?.ok_or_else(|| {
                                    c.bad(format!("entry {idx} lost its version"))
                                })?;
                                staged.put(&dk, &ver)?;
                                gc.push_back((idx, key.to_vec()));
                            }
                        }
                        staged.put(&k, &v)?;
                        last_log = Some(rec.log_id(idx));
                    }
                }
            }
            if let Some(v) = c.st.vote {
                staged.put(&keys::meta_key("vote"), &enc(&v))?;
            }
            if c.st.committed.is_some() {
                staged.put(&keys::meta_key("committed"), &enc(&c.st.committed))?;
            }
            if let Some(l) = meta.last_log_id {
                staged.put(&keys::meta_key("purged"), &enc(&l))?;
            }
            let applied = AppliedMeta {
                applied: meta.last_log_id,
                membership: meta.last_membership.clone(),
                live_keys: items,
            };
            staged.put(&keys::meta_key("applied"), &enc(&applied))?;
            staged.put(&keys::meta_key("snapshot"), &enc(meta))?;
            c.map.install(staged)?;
            c.st.purged = meta.last_log_id;
            c.st.applied = meta.last_log_id;
            c.st.membership = meta.last_membership.clone();
            c.st.live_keys = items;
            c.st.snapshot = Some(meta.clone());
            c.st.last_log = last_log;
            c.gc_queue = gc;
            c.generation += 1;
            Ok(())
        })
    }

    /// Makes everything so far durable (one group commit).
    pub fn commit(&mut self) -> Result<()> {
        self.guarded(|c| c.map.commit())
    }

    /// Modifications waiting for a commit.
    pub fn uncommitted(&self) -> usize {
        self.map.uncommitted()
    }

    /// One step of the map's clean-up unless a snapshot is being read.
    pub fn maintenance(&mut self) -> Result<bool> {
        if self.pinned() || self.poisoned.is_some() {
            return Ok(false);
        }
        self.guarded(|c| {
            if !c.gc_queue.is_empty() {
                // What a purge left queued while the index was being built.
                c.collect_garbage()?;
            }
            c.map.maintenance()
        })
    }
}
