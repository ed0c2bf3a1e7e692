//! The write-ahead log: a DRAM buffer of encoded records in front of two PM
//! logs (PopLog, padded: one barrier per append; thesis ch. 3 Fig. 8), one of
//! them active (the buffer object's root word 1).
//!
//! * `append` gives a record the next LSN and buffers it.
//! * `force(lsn)` makes every record up to `lsn` durable. One thread at a time
//!   flushes; it takes *every* buffered record and writes them with one
//!   `append_group` (one barrier), so threads that commit while a flush runs
//!   are made durable together by the next one (group commit).
//! * Operations `reserve` their worst-case record bytes before changing a
//!   page; a reservation that does not fit asks for a checkpoint first, so an
//!   append never finds the log full.
//! * `switch` (checkpoints) resets the inactive log, writes the checkpoint
//!   record into it and makes it active with one persisted root store.

pub mod record;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

use ferrite_pm::{ObjectId, Pool};
use ferrite_pmio::log::{Log, LogConfig, LogKind, PmLog};

use crate::error::{BufferError, Result};

/// The log algorithm (see the module docs for why).
pub const WAL_KIND: LogKind = LogKind::PopLog;
/// Root word of the buffer object naming the active log.
pub(crate) const ROOT_ACTIVE_LOG: usize = 1;

struct State {
    next_lsn: u64,
    buf: Vec<Vec<u8>>,
    /// Log bytes the buffered records will take.
    buf_bytes: usize,
    /// Bytes reserved by running operations.
    reserved: usize,
    /// Free bytes of the active log as of the last flush.
    free: usize,
}

struct Io {
    logs: [PmLog; 2],
    active: usize,
}

/// Counters of the log.
#[derive(Debug, Default)]
pub(crate) struct WalCounters {
    pub records: AtomicU64,
    pub bytes: AtomicU64,
    pub forces: AtomicU64,
    pub flushes: AtomicU64,
}

pub(crate) struct Wal {
    pool: Pool,
    obj: ObjectId,
    state: Mutex<State>,
    io: Mutex<Io>,
    /// Every record with a smaller LSN is durable.
    durable: AtomicU64,
    failed: Mutex<Option<String>>,
    pub counters: WalCounters,
}

/// Log bytes an operation holds for its records.
pub(crate) struct Reservation {
    left: usize,
}

fn entry_bytes(len: usize) -> usize {
    WAL_KIND.entry_bytes(true, len)
}

impl Wal {
    /// Opens (creating) logs `<name>.wal.0` and `.1` and reads which is active.
    pub fn open(pool: &Pool, obj: ObjectId, name: &str, segment_bytes: usize) -> Result<Wal> {
        let cfg = LogConfig {
            kind: WAL_KIND,
            padded: true,
            segment_bytes,
        };
        let l0 = PmLog::open_or_create(pool, &format!("{name}.wal.0"), cfg)?;
        let l1 = PmLog::open_or_create(pool, &format!("{name}.wal.1"), cfg)?;
        let active = (pool.root(obj, ROOT_ACTIVE_LOG) & 1) as usize;
        let logs = [l0, l1];
        let free = logs[active].free_bytes();
        Ok(Wal {
            pool: pool.clone(),
            obj,
            state: Mutex::new(State {
                next_lsn: 1,
                buf: Vec::new(),
                buf_bytes: 0,
                reserved: 0,
                free,
            }),
            io: Mutex::new(Io { logs, active }),
            durable: AtomicU64::new(1),
            failed: Mutex::new(None),
            counters: WalCounters::default(),
        })
    }

    /// The active log's records, in order (restart's analysis).
    pub fn read_active(&self) -> Result<Vec<Vec<u8>>> {
        let io = self.io.lock().unwrap();
        Ok(io.logs[io.active]
            .entries()?
            .into_iter()
            .map(|(_, p)| p)
            .collect())
    }

    /// Continues LSNs after `lsn` (restart).
    pub fn set_next_lsn(&self, lsn: u64) {
        let mut s = self.state.lock().unwrap();
        s.next_lsn = lsn;
        self.durable.store(lsn, Ordering::Release);
    }

    /// Bytes of one segment of the active log.
    pub fn segment_bytes(&self) -> usize {
        let io = self.io.lock().unwrap();
        io.logs[io.active].segment_bytes()
    }

    fn check(&self) -> Result<()> {
        match &*self.failed.lock().unwrap() {
            Some(m) => Err(BufferError::LogFull(format!(
                "the log failed earlier ({m}); reopen the store"
            ))),
            None => Ok(()),
        }
    }

    /// Holds `bytes` of log space for an operation's records; `Ok(None)` when
    /// they do not fit and a checkpoint must run first.
    pub fn reserve(&self, bytes: usize) -> Result<Option<Reservation>> {
        self.check()?;
        let mut s = self.state.lock().unwrap();
        if s.buf_bytes + s.reserved + bytes > s.free {
            return Ok(None);
        }
        s.reserved += bytes;
        Ok(Some(Reservation { left: bytes }))
    }

    /// Gives back what is left of a reservation.
    pub fn release(&self, r: &mut Reservation) {
        let mut s = self.state.lock().unwrap();
        s.reserved -= r.left;
        r.left = 0;
    }

    /// Free log bytes beyond buffered records and reservations.
    pub fn available(&self) -> usize {
        let s = self.state.lock().unwrap();
        s.free.saturating_sub(s.buf_bytes + s.reserved)
    }

    /// Buffers a record and returns its LSN. `res` pays for it (an overrun
    /// is taken from free space if there is any).
    pub fn append(&self, mut rec: Vec<u8>, res: Option<&mut Reservation>) -> Result<u64> {
        self.check()?;
        let n = entry_bytes(rec.len());
        let mut s = self.state.lock().unwrap();
        let paid = match res {
            Some(r) => {
                let p = r.left.min(n);
                r.left -= p;
                s.reserved -= p;
                p
            }
            None => 0,
        };
        if s.buf_bytes + s.reserved + (n - paid) > s.free && n > paid {
            // The operation changed pages it cannot log: the store must be
            // recovered from the log (reopened).
            let m = format!(
                "a record of {} bytes does not fit the log ({} free)",
                rec.len(),
                s.free.saturating_sub(s.buf_bytes + s.reserved)
            );
            *self.failed.lock().unwrap() = Some(m.clone());
            return Err(BufferError::LogFull(m));
        }
        let lsn = s.next_lsn;
        s.next_lsn += 1;
        record::set_lsn(&mut rec, lsn);
        s.buf_bytes += n;
        s.buf.push(rec);
        self.counters.records.fetch_add(1, Ordering::Relaxed);
        self.counters.bytes.fetch_add(n as u64, Ordering::Relaxed);
        Ok(lsn)
    }

    /// Whether every record up to `lsn` is durable.
    pub fn is_durable(&self, lsn: u64) -> bool {
        self.durable.load(Ordering::Acquire) > lsn
    }

    /// Makes every record up to `lsn` durable (group commit: see module docs).
    pub fn force(&self, lsn: u64) -> Result<()> {
        if self.is_durable(lsn) {
            return Ok(());
        }
        self.counters.forces.fetch_add(1, Ordering::Relaxed);
        let mut io = self.io.lock().unwrap();
        if self.is_durable(lsn) {
            return Ok(());
        }
        self.check()?;
        let (recs, bytes, last) = {
            let mut s = self.state.lock().unwrap();
            let recs = std::mem::take(&mut s.buf);
            (recs, s.buf_bytes, s.next_lsn - 1)
        };
        if recs.is_empty() {
            return Ok(());
        }
        let refs: Vec<&[u8]> = recs.iter().map(|r| r.as_slice()).collect();
        let active = io.active;
        if let Err(e) = io.logs[active].append_group(&refs) {
            let mut f = self.failed.lock().unwrap();
            *f = Some(e.to_string());
            return Err(e.into());
        }
        self.counters.flushes.fetch_add(1, Ordering::Relaxed);
        let free = io.logs[active].free_bytes();
        {
            let mut s = self.state.lock().unwrap();
            s.buf_bytes -= bytes;
            s.free = free;
        }
        self.durable.store(last + 1, Ordering::Release);
        Ok(())
    }

    /// Forces everything buffered.
    pub fn force_all(&self) -> Result<()> {
        let last = self.state.lock().unwrap().next_lsn - 1;
        self.force(last)
    }

    /// Checkpoint: with nothing buffered and no reservation (the caller holds
    /// the checkpoint gate and forced), resets the inactive log, writes the
    /// checkpoint record `rec` into it and makes it the active log.
    pub fn switch(&self, mut rec: Vec<u8>) -> Result<u64> {
        self.check()?;
        let mut io = self.io.lock().unwrap();
        let lsn = {
            let mut s = self.state.lock().unwrap();
            if !s.buf.is_empty() {
                return Err(BufferError::Invalid(
                    "log switch with buffered records".into(),
                ));
            }
            let l = s.next_lsn;
            s.next_lsn += 1;
            l
        };
        record::set_lsn(&mut rec, lsn);
        let next = 1 - io.active;
        let seg = io.logs[next].segment_bytes();
        if entry_bytes(rec.len()) > seg / 2 {
            return Err(BufferError::LogFull(format!(
                "the checkpoint record ({} bytes: the undo lists of the running transactions) exceeds half a log segment ({seg} bytes)",
                rec.len()
            )));
        }
        io.logs[next].reset()?;
        io.logs[next].append(&rec)?;
        self.pool.set_root(self.obj, ROOT_ACTIVE_LOG, next as u64)?;
        io.active = next;
        let free = io.logs[next].free_bytes();
        self.state.lock().unwrap().free = free;
        self.durable.store(lsn + 1, Ordering::Release);
        self.counters.records.fetch_add(1, Ordering::Relaxed);
        Ok(lsn)
    }
}
