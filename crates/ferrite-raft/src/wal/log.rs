//! The baseline's write-ahead log: segment files of checksummed records on
//! the real disk, `fdatasync` before an append is acknowledged durable.
//!
//! A record is `len` (u32 LE, of what follows the checksum), `crc32` (u32 LE,
//! of type and payload), `type` (u8), payload (postcard):
//! 1 entry, 2 truncate (first index dropped), 3 purge (log id), 4 vote,
//! 5 committed. Segments are `wal-<seq, 16 hex digits>.log`; a new segment
//! starts with the vote, committed and purged ids, so a segment whose entries
//! are all purged can be deleted. Recovery replays every segment; a record
//! that does not check out ends the last segment (a torn append) and is cut
//! off, anywhere else it is corruption.

use std::collections::BTreeMap;
use std::fs::{File, OpenOptions};
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

use openraft::storage::LogFlushed;

use crate::error::{Result, StoreError};
use crate::types::{Entry, LogId, TypeConfig, Vote};

const T_ENTRY: u8 = 1;
const T_TRUNCATE: u8 = 2;
const T_PURGE: u8 = 3;
const T_VOTE: u8 = 4;
const T_COMMITTED: u8 = 5;
/// Largest record accepted when reading (a longer length is corruption).
const MAX_RECORD: u32 = 64 << 20;
/// A segment grows to about this size before the next one starts.
pub const SEGMENT_BYTES: u64 = 64 << 20;

fn seg_name(seq: u64) -> String {
    format!("wal-{seq:016x}.log")
}

fn fsync_dir(dir: &Path) -> Result<()> {
    File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(|e| StoreError::io(format!("fsync {}", dir.display()), e))
}

/// The log's state, replayed from the segments and kept in DRAM.
#[derive(Default)]
pub struct LogMem {
    pub entries: BTreeMap<u64, Entry>,
    pub purged: Option<LogId>,
    pub vote: Option<Vote>,
    pub committed: Option<LogId>,
}

impl LogMem {
    pub fn last(&self) -> Option<LogId> {
        self.entries
            .values()
            .next_back()
            .map(|e| e.log_id)
            .or(self.purged)
    }

    fn apply(&mut self, t: u8, payload: &[u8]) -> std::result::Result<(), String> {
        let err = |e: postcard::Error| e.to_string();
        match t {
            T_ENTRY => {
                let e: Entry = postcard::from_bytes(payload).map_err(err)?;
                self.entries.insert(e.log_id.index, e);
            }
            T_TRUNCATE => {
                let from: u64 = postcard::from_bytes(payload).map_err(err)?;
                self.entries.split_off(&from);
            }
            T_PURGE => {
                let p: LogId = postcard::from_bytes(payload).map_err(err)?;
                let keep = self.entries.split_off(&(p.index + 1));
                self.entries = keep;
                if self.purged.is_none_or(|q| q.index < p.index) {
                    self.purged = Some(p);
                }
            }
            T_VOTE => self.vote = Some(postcard::from_bytes(payload).map_err(err)?),
            T_COMMITTED => self.committed = postcard::from_bytes(payload).map_err(err)?,
            x => return Err(format!("record type {x}")),
        }
        Ok(())
    }
}

fn encode(t: u8, payload: &[u8], out: &mut Vec<u8>) {
    let mut h = crc32fast::Hasher::new();
    h.update(&[t]);
    h.update(payload);
    out.extend_from_slice(&(payload.len() as u32 + 1).to_le_bytes());
    out.extend_from_slice(&h.finalize().to_le_bytes());
    out.push(t);
    out.extend_from_slice(payload);
}

/// Replays one segment; returns the length of its valid prefix and whether
/// the rest is damaged.
fn replay(bytes: &[u8], mem: &mut LogMem) -> std::result::Result<(usize, bool), String> {
    let mut at = 0;
    while at < bytes.len() {
        if bytes.len() - at < 9 {
            return Ok((at, true));
        }
        let len = u32::from_le_bytes(bytes[at..at + 4].try_into().unwrap());
        let crc = u32::from_le_bytes(bytes[at + 4..at + 8].try_into().unwrap());
        if len == 0 || len > MAX_RECORD || bytes.len() - at - 8 < len as usize {
            return Ok((at, true));
        }
        let body = &bytes[at + 8..at + 8 + len as usize];
        if crc32fast::hash(body) != crc {
            return Ok((at, true));
        }
        mem.apply(body[0], &body[1..])?;
        at += 8 + len as usize;
    }
    Ok((at, false))
}

struct SyncState {
    /// Bytes written to the current segment file / made durable.
    written: u64,
    synced: u64,
    waiting: Vec<(u64, LogFlushed<TypeConfig>)>,
    file: Arc<File>,
    failed: Option<String>,
    shutdown: bool,
}

struct SyncShared {
    state: Mutex<SyncState>,
    cv: Condvar,
}

/// The segment files and the syncing thread.
pub struct WalLog {
    dir: PathBuf,
    seq: u64,
    seg_bytes: u64,
    /// Max entry index in each closed segment (for deletion after purges).
    closed: Vec<(u64, Option<u64>)>,
    cur_max: Option<u64>,
    sync: Arc<SyncShared>,
    pub mem: LogMem,
    /// A segment grows to about this size before the next one starts.
    segment_bytes: u64,
}

impl WalLog {
    /// Opens (or creates) the log in `dir`, replaying its segments.
    pub fn open(dir: &Path) -> Result<WalLog> {
        WalLog::open_with(dir, SEGMENT_BYTES)
    }

    /// [`WalLog::open`] with segments of about `segment_bytes` (at least 4 KiB).
    pub fn open_with(dir: &Path, segment_bytes: u64) -> Result<WalLog> {
        std::fs::create_dir_all(dir)
            .map_err(|e| StoreError::io(format!("create {}", dir.display()), e))?;
        let mut segs: Vec<u64> = std::fs::read_dir(dir)
            .map_err(|e| StoreError::io(format!("read {}", dir.display()), e))?
            .filter_map(|e| e.ok())
            .filter_map(|e| {
                let n = e.file_name().to_string_lossy().into_owned();
                n.strip_prefix("wal-")
                    .and_then(|s| s.strip_suffix(".log"))
                    .and_then(|s| u64::from_str_radix(s, 16).ok())
            })
            .collect();
        segs.sort_unstable();
        let mut mem = LogMem::default();
        let mut closed = Vec::new();
        let mut last_len = 0u64;
        for (i, &seq) in segs.iter().enumerate() {
            let path = dir.join(seg_name(seq));
            let mut bytes = Vec::new();
            File::open(&path)
                .and_then(|mut f| f.read_to_end(&mut bytes))
                .map_err(|e| StoreError::io(format!("read {}", path.display()), e))?;
            let before = mem.entries.keys().next_back().copied();
            let (valid, damaged) = replay(&bytes, &mut mem)
                .map_err(|d| StoreError::corrupt(&path.display().to_string(), d))?;
            let is_last = i + 1 == segs.len();
            if damaged && !is_last {
                return Err(StoreError::corrupt(
                    &path.display().to_string(),
                    format!("damaged record at byte {valid} of a segment that is not the last"),
                ));
            }
            if damaged {
                // A torn append: cut it off.
                let f = OpenOptions::new()
                    .write(true)
                    .open(&path)
                    .map_err(|e| StoreError::io(format!("open {}", path.display()), e))?;
                f.set_len(valid as u64)
                    .and_then(|_| f.sync_all())
                    .map_err(|e| StoreError::io(format!("truncate {}", path.display()), e))?;
            }
            let max = mem.entries.keys().next_back().copied().max(before);
            if is_last {
                last_len = valid as u64;
            } else {
                closed.push((seq, max));
            }
        }
        let seq = segs.last().copied().unwrap_or(0);
        let path = dir.join(seg_name(seq));
        let file = OpenOptions::new()
            .create(true)
            .append(true)
            .open(&path)
            .map_err(|e| StoreError::io(format!("open {}", path.display()), e))?;
        if segs.is_empty() {
            fsync_dir(dir)?;
        }
        let sync = Arc::new(SyncShared {
            state: Mutex::new(SyncState {
                written: last_len,
                synced: last_len,
                waiting: Vec::new(),
                file: Arc::new(file),
                failed: None,
                shutdown: false,
            }),
            cv: Condvar::new(),
        });
        let s2 = sync.clone();
        std::thread::Builder::new()
            .name("ferrite-wal-sync".into())
            .spawn(move || syncer(s2))
            .map_err(|e| StoreError::io("spawn the WAL sync thread", e))?;
        let cur_max = mem.entries.keys().next_back().copied();
        Ok(WalLog {
            dir: dir.to_path_buf(),
            seq,
            seg_bytes: last_len,
            closed,
            cur_max,
            sync,
            mem,
            segment_bytes: segment_bytes.max(4096),
        })
    }

    fn write(&mut self, buf: &[u8]) -> Result<u64> {
        let mut s = self.sync.state.lock().unwrap();
        if let Some(f) = &s.failed {
            return Err(StoreError::Invalid(format!("the WAL failed earlier: {f}")));
        }
        (&*s.file)
            .write_all(buf)
            .map_err(|e| StoreError::io(format!("write {}", self.dir.display()), e))?;
        s.written += buf.len() as u64;
        self.seg_bytes += buf.len() as u64;
        Ok(s.written)
    }

    fn record(&mut self, t: u8, payload: &[u8]) -> Result<u64> {
        let mut buf = Vec::with_capacity(payload.len() + 9);
        encode(t, payload, &mut buf);
        self.write(&buf)
    }

    /// Appends entries; `callback` fires once they are on disk (fdatasync).
    pub fn append(&mut self, entries: Vec<Entry>, callback: LogFlushed<TypeConfig>) -> Result<()> {
        if self.seg_bytes >= self.segment_bytes {
            self.rotate()?;
        }
        let mut buf = Vec::new();
        for e in &entries {
            encode(
                T_ENTRY,
                &postcard::to_stdvec(e).expect("entries serialise"),
                &mut buf,
            );
        }
        let upto = self.write(&buf)?;
        for e in entries {
            self.cur_max = Some(e.log_id.index);
            self.mem.entries.insert(e.log_id.index, e);
        }
        let mut s = self.sync.state.lock().unwrap();
        s.waiting.push((upto, callback));
        self.sync.cv.notify_one();
        Ok(())
    }

    /// Waits until everything written so far is on disk.
    pub fn sync_now(&mut self) -> Result<()> {
        let file = self.sync.state.lock().unwrap().file.clone();
        file.sync_data()
            .map_err(|e| StoreError::io(format!("fdatasync {}", self.dir.display()), e))
    }

    pub fn save_vote(&mut self, v: &Vote) -> Result<()> {
        self.record(T_VOTE, &postcard::to_stdvec(v).expect("votes serialise"))?;
        self.sync_now()?;
        self.mem.vote = Some(*v);
        Ok(())
    }

    pub fn save_committed(&mut self, c: Option<LogId>) -> Result<()> {
        self.record(
            T_COMMITTED,
            &postcard::to_stdvec(&c).expect("ids serialise"),
        )?;
        self.mem.committed = c;
        Ok(())
    }

    pub fn truncate(&mut self, from: u64) -> Result<()> {
        self.record(
            T_TRUNCATE,
            &postcard::to_stdvec(&from).expect("ids serialise"),
        )?;
        self.mem.entries.split_off(&from);
        Ok(())
    }

    /// Drops entries up to `p` and deletes segments holding only such.
    pub fn purge(&mut self, p: LogId) -> Result<()> {
        self.record(T_PURGE, &postcard::to_stdvec(&p).expect("ids serialise"))?;
        self.mem
            .apply(T_PURGE, &postcard::to_stdvec(&p).expect("ids serialise"))
            .map_err(StoreError::Invalid)?;
        // Only a prefix of the segments: a later one may hold the truncation
        // of an earlier one's entries.
        let mut keep = Vec::new();
        for (seq, max) in std::mem::take(&mut self.closed) {
            if keep.is_empty() && max.is_none_or(|m| m <= p.index) {
                let path = self.dir.join(seg_name(seq));
                std::fs::remove_file(&path)
                    .map_err(|e| StoreError::io(format!("remove {}", path.display()), e))?;
            } else {
                keep.push((seq, max));
            }
        }
        self.closed = keep;
        Ok(())
    }

    /// Closes the current segment and starts the next with the log's state.
    fn rotate(&mut self) -> Result<()> {
        self.sync_now()?;
        let next = self.seq + 1;
        let path = self.dir.join(seg_name(next));
        let file = OpenOptions::new()
            .create(true)
            .append(true)
            .open(&path)
            .map_err(|e| StoreError::io(format!("open {}", path.display()), e))?;
        fsync_dir(&self.dir)?;
        {
            let mut s = self.sync.state.lock().unwrap();
            // Callbacks waiting for the old file: it is synced.
            let fire = std::mem::take(&mut s.waiting);
            s.file = Arc::new(file);
            s.written = 0;
            s.synced = 0;
            drop(s);
            for (_, cb) in fire {
                cb.log_io_completed(Ok(()));
            }
        }
        self.closed.push((self.seq, self.cur_max));
        self.seq = next;
        self.seg_bytes = 0;
        self.cur_max = None;
        let mut buf = Vec::new();
        if let Some(v) = self.mem.vote {
            encode(
                T_VOTE,
                &postcard::to_stdvec(&v).expect("serialises"),
                &mut buf,
            );
        }
        encode(
            T_COMMITTED,
            &postcard::to_stdvec(&self.mem.committed).expect("serialises"),
            &mut buf,
        );
        if let Some(p) = self.mem.purged {
            encode(
                T_PURGE,
                &postcard::to_stdvec(&p).expect("serialises"),
                &mut buf,
            );
        }
        self.write(&buf)?;
        self.sync_now()
    }
}

impl Drop for WalLog {
    fn drop(&mut self) {
        let mut s = self.sync.state.lock().unwrap();
        s.shutdown = true;
        self.sync.cv.notify_all();
    }
}

/// The syncing thread: fdatasync as soon as an append waits (the thesis's
/// baseline syncs at once for a client write or a follower's append), and
/// every 10 ms for what was written without waiting (truncations, purges,
/// committed ids).
fn syncer(sh: Arc<SyncShared>) {
    loop {
        let (file, target) = {
            let mut s = sh.state.lock().unwrap();
            while s.waiting.is_empty() && !s.shutdown {
                let (g, timeout) = sh.cv.wait_timeout(s, Duration::from_millis(10)).unwrap();
                s = g;
                if timeout.timed_out() && s.written > s.synced {
                    break;
                }
            }
            if s.shutdown && s.waiting.is_empty() {
                let _ = s.file.sync_data();
                return;
            }
            (s.file.clone(), s.written)
        };
        let r = file.sync_data();
        let mut s = sh.state.lock().unwrap();
        if !Arc::ptr_eq(&file, &s.file) {
            continue; // rotated meanwhile: the rotation synced and answered
        }
        let fire: Vec<_> = match &r {
            Ok(()) => {
                s.synced = s.synced.max(target);
                let (done, rest): (Vec<_>, Vec<_>) = std::mem::take(&mut s.waiting)
                    .into_iter()
                    .partition(|w| w.0 <= target);
                s.waiting = rest;
                done
            }
            Err(e) => {
                s.failed = Some(e.to_string());
                std::mem::take(&mut s.waiting)
            }
        };
        drop(s);
        for (_, cb) in fire {
            cb.log_io_completed(match &r {
                Ok(()) => Ok(()),
                Err(e) => Err(std::io::Error::new(e.kind(), e.to_string())),
            });
        }
    }
}
