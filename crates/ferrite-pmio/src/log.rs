//! Failure-atomic append-only logs (thesis §3.3): Classic, Header, Header with
//! dancing size fields, RAWL and PopLog behind one [`Log`] interface.
//!
//! A log is a pool object (type [`LOG_TYPE`]) whose root word 0 points at its
//! region and root word 1 holds `base_lsn << 1 | active_segment`. The region has
//! two equal segments; entries are appended to the active one.
//!
//! **Reuse and zeroing.** RAWL and PopLog decide validity from the bytes
//! themselves, so they need space that is zero beyond the tail (Classic keeps the
//! same invariant, which also protects it from stale footers). [`Log::reset`]
//! switches to the other segment (alternating segments): it first zeroes that
//! segment — scanning and rewriting only non-zero lines — and then flips the
//! segment bit and advances `base_lsn` with one 8-byte root store, so a crash
//! leaves either the old log or the empty new one. Recovery zeroes whatever a torn
//! append left beyond the recovered tail before the log accepts appends again.
//!
//! **Concurrency.** A log has one appender (`&mut self`). Concurrent appenders
//! use one log per thread (objects `wal.0`, `wal.1`, …), ordering entries across
//! logs by a sequence number carried in the payload; this keeps appends free of
//! shared cache lines, which PM punishes harder than DRAM.

use ferrite_pm::{Heap, ObjectId, PmError, Pool};

use crate::error::{corrupt, PmioError, Result};
use crate::region::{open_object, rd, round_up, wr, zero_dirty_lines};

/// Type name of log objects in the root directory.
pub const LOG_TYPE: &str = "ferrite.pmio.log";
/// On-PM format version of the log region.
pub const LOG_FORMAT_VERSION: u32 = 1;
const LOG_MAGIC: u64 = 0x4645_5252_4C4F_4701;
const FOOTER_MAGIC: u64 = 0xC1A5_51C0_F007_E400;
const RAWL_VALID: u64 = 1 << 63;
const M63: u64 = !RAWL_VALID;
/// Size fields of a dancing header, each on its own cache line (the thesis uses 64).
pub const DANCE: usize = 64;
/// A size field is `epoch << TAIL_BITS | tail`: the highest value names the
/// newest state, and a suffix truncation bumps the epoch so that one store of a
/// smaller tail outranks every older field.
const TAIL_BITS: u32 = 40;
const TAIL_MASK: u64 = (1 << TAIL_BITS) - 1;
const MAX_EPOCH: u64 = (1 << (64 - TAIL_BITS)) - 1;
/// Largest payload of one entry (PopLog's 32-bit bit count must not overflow).
pub const MAX_ENTRY: usize = (1 << 28) - 1;

/// The five logging algorithms.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum LogKind {
    /// header + payload, barrier, footer (lsn), barrier.
    Classic,
    /// header + payload, barrier, size field, barrier (libpmemlog).
    Header,
    /// Header with the size field rotating over [`DANCE`] cache lines.
    HeaderDancing,
    /// 63 data bits + 1 validity bit per word; one barrier; zeroed space.
    Rawl,
    /// header with popcount + payload; one barrier; zeroed space.
    PopLog,
}

impl LogKind {
    pub const ALL: [LogKind; 5] = [
        LogKind::Classic,
        LogKind::Header,
        LogKind::HeaderDancing,
        LogKind::Rawl,
        LogKind::PopLog,
    ];

    /// Name used on the command line and in benchmark output.
    pub fn name(self) -> &'static str {
        match self {
            LogKind::Classic => "classic",
            LogKind::Header => "header",
            LogKind::HeaderDancing => "header-dancing",
            LogKind::Rawl => "rawl",
            LogKind::PopLog => "poplog",
        }
    }

    pub fn parse(s: &str) -> Option<LogKind> {
        LogKind::ALL.into_iter().find(|k| k.name() == s)
    }

    fn code(self) -> u8 {
        self as u8 + 1
    }

    fn from_code(c: u8) -> Option<LogKind> {
        LogKind::ALL.get((c as usize).wrapping_sub(1)).copied()
    }

    /// Whether validity is read from the entry bytes (needs zero beyond the tail).
    fn scans(self) -> bool {
        matches!(self, LogKind::Classic | LogKind::Rawl | LogKind::PopLog)
    }

    fn size_fields(self) -> usize {
        match self {
            LogKind::Header => 1,
            LogKind::HeaderDancing => DANCE,
            _ => 0,
        }
    }

    /// Bytes an entry with `len` payload bytes occupies.
    pub fn entry_bytes(self, padded: bool, len: usize) -> usize {
        let r8 = round_up(len, 8);
        let raw = match self {
            LogKind::Classic => 16 + r8 + 8,
            LogKind::Header | LogKind::HeaderDancing | LogKind::PopLog => 8 + r8,
            LogKind::Rawl => 8 * (1 + (len * 8).div_ceil(63)),
        };
        if padded {
            round_up(raw, 64)
        } else {
            raw
        }
    }

    /// Persist barriers one append (or one group append) costs.
    pub fn barriers(self) -> u32 {
        match self {
            LogKind::Rawl | LogKind::PopLog => 1,
            _ => 2,
        }
    }
}

/// How a log is created.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LogConfig {
    pub kind: LogKind,
    /// Start every entry on a cache line, so no line is persisted twice in a row.
    pub padded: bool,
    /// Bytes per segment (the region holds two); rounded up to 256.
    pub segment_bytes: usize,
}

/// First cache line of a log region.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
struct LogHeader {
    magic: u64,
    version: u32,
    kind: u8,
    padded: u8,
    _reserved: u16,
    segment_bytes: u64,
    meta_bytes: u64,
    _pad: [u64; 4],
}
const _: () = assert!(std::mem::size_of::<LogHeader>() == 64);
impl crate::region::RegionHeader for LogHeader {}
const _: () = assert!(std::mem::align_of::<LogHeader>() == 8);

/// The interface the WAL, the Raft log and the log-based in-place updates use.
pub trait Log {
    /// Appends one entry durably; returns its log sequence number.
    fn append(&mut self, payload: &[u8]) -> Result<u64>;
    /// Appends several entries with the barriers of one append; returns the lsn
    /// of the first. After a crash a prefix of the group may survive, each
    /// surviving entry whole.
    fn append_group(&mut self, payloads: &[&[u8]]) -> Result<u64>;
    /// Lsn of the oldest entry held (== `next_lsn` when empty).
    fn first_lsn(&self) -> u64;
    /// Lsn the next append gets.
    fn next_lsn(&self) -> u64;
    /// Payload of entry `lsn`.
    fn read(&self, lsn: u64) -> Result<Vec<u8>>;
    /// Drops every entry (after a checkpoint) and makes the space reusable;
    /// lsns keep increasing. Failure-atomic.
    fn reset(&mut self) -> Result<()>;
    /// Bytes still free in the active segment.
    fn free_bytes(&self) -> usize;
    /// Drops every entry after `lsn`, keeping `first_lsn..=lsn` (Raft's "delete
    /// conflicting entries"); the next append gets `lsn + 1`. Failure-atomic.
    fn truncate_after(&mut self, lsn: u64) -> Result<()>;

    fn len(&self) -> usize {
        (self.next_lsn() - self.first_lsn()) as usize
    }
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// Every entry in order, as (lsn, payload).
    fn entries(&self) -> Result<Vec<(u64, Vec<u8>)>> {
        (self.first_lsn()..self.next_lsn())
            .map(|l| Ok((l, self.read(l)?)))
            .collect()
    }
}

/// A log of any [`LogKind`] over a region of a pool.
pub struct PmLog {
    pool: Pool,
    id: ObjectId,
    _heap: Heap,
    name: String,
    kind: LogKind,
    padded: bool,
    meta: *mut u8,
    segs: [*mut u8; 2],
    seg_bytes: usize,
    active: usize,
    base_lsn: u64,
    /// Start of every entry of the active segment.
    pos: Vec<u32>,
    tail: usize,
    /// Appends since open (selects the dancing size field).
    appends: u64,
    /// Truncation epoch of the size fields (`epoch << 40 | tail`).
    epoch: u64,
}

// SAFETY: the raw pointers point into the pool mapping, which `pool` keeps alive;
// all mutation goes through `&mut self`.
unsafe impl Send for PmLog {}

fn popcount(b: &[u8]) -> u64 {
    let mut it = b.chunks_exact(8);
    let mut n: u64 = 0;
    for c in &mut it {
        n += u64::from_le_bytes(c.try_into().expect("8-byte chunk")).count_ones() as u64;
    }
    n + it
        .remainder()
        .iter()
        .map(|x| x.count_ones() as u64)
        .sum::<u64>()
}

/// Writes `payload` as RAWL words (63 data bits + validity bit) at `p`.
///
/// # Safety
/// `p` must be 8-aligned with room for `ceil(len*8/63)` words.
unsafe fn rawl_encode(p: *mut u8, payload: &[u8]) {
    let mut acc: u128 = 0;
    let mut bits = 0u32;
    let mut w = 0usize;
    let mut emit = |v: u64| {
        // SAFETY: the caller reserved one word per 63 payload bits.
        unsafe { wr(p.add(8 * w), v & M63 | RAWL_VALID) };
        w += 1;
    };
    let mut it = payload.chunks_exact(8);
    for c in &mut it {
        acc |= (u64::from_le_bytes(c.try_into().expect("8-byte chunk")) as u128) << bits;
        bits += 64;
        while bits >= 63 {
            emit(acc as u64);
            acc >>= 63;
            bits -= 63;
        }
    }
    for &b in it.remainder() {
        acc |= (b as u128) << bits;
        bits += 8;
        if bits >= 63 {
            emit(acc as u64);
            acc >>= 63;
            bits -= 63;
        }
    }
    if bits > 0 {
        emit(acc as u64);
    }
}

/// Decodes `len` bytes from RAWL words at `p`; `None` if a word is not valid.
///
/// # Safety
/// `p` must be 8-aligned with `ceil(len*8/63)` readable words.
unsafe fn rawl_decode(p: *const u8, len: usize, out: Option<&mut Vec<u8>>) -> bool {
    let words = (len * 8).div_ceil(63);
    let mut acc: u128 = 0;
    let mut bits = 0u32;
    let mut sink = out;
    for i in 0..words {
        // SAFETY: caller guarantee.
        let v = unsafe { rd(p.add(8 * i)) };
        if v & RAWL_VALID == 0 {
            return false;
        }
        if let Some(o) = sink.as_deref_mut() {
            acc |= ((v & M63) as u128) << bits;
            bits += 63;
            while bits >= 64 {
                o.extend_from_slice(&(acc as u64).to_le_bytes());
                acc >>= 64;
                bits -= 64;
            }
        }
    }
    if let Some(o) = sink {
        o.extend_from_slice(&(acc as u64).to_le_bytes()[..(bits as usize).div_ceil(8)]);
        o.truncate(len);
    }
    true
}

impl PmLog {
    /// Opens log `name`, creating it with `cfg` if absent. An existing log must
    /// have been created with the same kind and padding.
    pub fn open_or_create(pool: &Pool, name: &str, cfg: LogConfig) -> Result<PmLog> {
        Self::open_inner(pool, name, Some(cfg))
    }

    /// Opens an existing log with the configuration it was created with.
    pub fn open(pool: &Pool, name: &str) -> Result<PmLog> {
        pool.object(name, LOG_TYPE)?;
        Self::open_inner(pool, name, None)
    }

    fn open_inner(pool: &Pool, name: &str, cfg: Option<LogConfig>) -> Result<PmLog> {
        let (id, heap) = open_object(pool, name, LOG_TYPE, None)?;
        let mut region = pool.root(id, 0);
        if region == 0 {
            // A creation that crashed before publishing its region left an
            // empty object: for `open` that is no log at all.
            let cfg = cfg.ok_or_else(|| PmError::NoSuchObject(name.into()))?;
            region = Self::create_region(pool, id, &heap, cfg)?;
        }
        let size = heap.block_size(region).unwrap_or(0);
        if size < 64 || !pool.contains(region, 64) {
            return Err(corrupt(name, format!("region {region:#x} is not a block")));
        }
        // SAFETY: the region block is at least 64 bytes; LogHeader is plain data.
        let h: LogHeader = unsafe { std::ptr::read(pool.at(region, 64) as *const LogHeader) };
        if h.magic != LOG_MAGIC {
            return Err(corrupt(name, "bad log magic"));
        }
        if h.version != LOG_FORMAT_VERSION {
            return Err(corrupt(
                name,
                format!("log format version {} unsupported", h.version),
            ));
        }
        let kind = LogKind::from_code(h.kind)
            .ok_or_else(|| corrupt(name, format!("unknown log kind {}", h.kind)))?;
        let padded = h.padded != 0;
        let seg_bytes = h.segment_bytes as usize;
        let meta_bytes = h.meta_bytes as usize;
        if seg_bytes == 0
            || !seg_bytes.is_multiple_of(64)
            || seg_bytes > u32::MAX as usize
            || meta_bytes != 2 * kind.size_fields() * 64
            || 64 + meta_bytes + 2 * seg_bytes > size
        {
            return Err(corrupt(name, "inconsistent log geometry"));
        }
        if let Some(c) = cfg {
            if c.kind != kind || c.padded != padded {
                return Err(PmioError::Mismatch {
                    object: name.into(),
                    found: format!("{}{}", kind.name(), if padded { " padded" } else { "" }),
                    expected: format!("{}{}", c.kind.name(), if c.padded { " padded" } else { "" }),
                });
            }
        }
        let base = pool.at(region, 64 + meta_bytes + 2 * seg_bytes);
        // SAFETY: offsets stay within the checked region.
        let (meta, s0, s1) = unsafe {
            (
                base.add(64),
                base.add(64 + meta_bytes),
                base.add(64 + meta_bytes + seg_bytes),
            )
        };
        let state = pool.root(id, 1);
        let mut log = PmLog {
            pool: pool.clone(),
            id,
            _heap: heap,
            name: name.into(),
            kind,
            padded,
            meta,
            segs: [s0, s1],
            seg_bytes,
            active: (state & 1) as usize,
            base_lsn: state >> 1,
            pos: Vec::new(),
            tail: 0,
            appends: 0,
            epoch: 0,
        };
        log.recover()?;
        Ok(log)
    }

    fn create_region(pool: &Pool, id: ObjectId, heap: &Heap, cfg: LogConfig) -> Result<u64> {
        if cfg.segment_bytes == 0 || cfg.segment_bytes > u32::MAX as usize {
            return Err(PmioError::Invalid(format!(
                "segment size {} out of range",
                cfg.segment_bytes
            )));
        }
        let seg = round_up(cfg.segment_bytes, 256);
        let meta = 2 * cfg.kind.size_fields() * 64;
        let total = 64 + meta + 2 * seg;
        let off = heap.alloc_zeroed(total)?;
        let h = LogHeader {
            magic: LOG_MAGIC,
            version: LOG_FORMAT_VERSION,
            kind: cfg.kind.code(),
            padded: cfg.padded as u8,
            _reserved: 0,
            segment_bytes: seg as u64,
            meta_bytes: meta as u64,
            _pad: [0; 4],
        };
        crate::region::write_header(pool, off, h)?;
        // State before the region pointer: until root 0 is durable the object
        // has no region and the block is garbage the next open frees.
        pool.set_root(id, 1, 1 << 1)?;
        pool.set_root(id, 0, off)?;
        Ok(off)
    }

    fn field(&self, seg: usize, i: usize) -> *mut u8 {
        // SAFETY: meta holds 2 * size_fields lines; callers pass i < size_fields.
        unsafe { self.meta.add((seg * self.kind.size_fields() + i) * 64) }
    }

    fn max_len(&self) -> usize {
        MAX_ENTRY.min(self.seg_bytes)
    }

    /// Finds the valid entries of the active segment and cleans the space after
    /// them.
    fn recover(&mut self) -> Result<()> {
        let seg = self.segs[self.active];
        let cap = self.seg_bytes;
        self.pos.clear();
        let mut pos = 0usize;
        let kind = self.kind;
        let name = self.name.clone();
        let bad = |d: String| corrupt(&name, d);
        if kind.scans() {
            let mut lsn = self.base_lsn;
            let min = kind.entry_bytes(self.padded, 0);
            while pos + min <= cap {
                // SAFETY: pos + min <= cap keeps the header words in the segment.
                let p = unsafe { seg.add(pos) };
                // SAFETY: as above.
                let w0 = unsafe { rd(p) };
                let len = match kind {
                    LogKind::Classic => {
                        if w0 != lsn {
                            break;
                        }
                        // SAFETY: Classic entries have a 16-byte header.
                        (unsafe { rd(p.add(8)) }) as usize
                    }
                    LogKind::PopLog => {
                        if w0 == 0 {
                            break;
                        }
                        (w0 & 0xffff_ffff) as usize
                    }
                    _ => {
                        if w0 & RAWL_VALID == 0 {
                            break;
                        }
                        (w0 & M63) as usize
                    }
                };
                if len > self.max_len() || pos + kind.entry_bytes(self.padded, len) > cap {
                    return Err(bad(format!("entry at {pos} claims {len} bytes")));
                }
                let ok = match kind {
                    LogKind::Classic => {
                        // SAFETY: the entry fits in the segment (checked).
                        let f = unsafe { rd(p.add(16 + round_up(len, 8))) };
                        f == lsn ^ FOOTER_MAGIC
                    }
                    LogKind::PopLog => {
                        // SAFETY: as above.
                        let body = unsafe { std::slice::from_raw_parts(p.add(8), len) };
                        popcount(body) + 1 == w0 >> 32
                    }
                    // SAFETY: as above.
                    _ => unsafe { rawl_decode(p.add(8), len, None) },
                };
                if !ok {
                    break;
                }
                self.pos.push(pos as u32);
                pos += kind.entry_bytes(self.padded, len);
                lsn += 1;
            }
            self.tail = pos;
            // Torn residue beyond the tail must be zero before the next append.
            if self.zero_range(pos, cap) {
                self.pool.fence()?;
            }
        } else {
            let fields = kind.size_fields();
            let mut best = 0u64;
            for i in 0..fields {
                // SAFETY: field pointers are aligned lines of the meta area.
                best = best.max(unsafe { rd(self.field(self.active, i)) });
            }
            self.epoch = best >> TAIL_BITS;
            let tail = (best & TAIL_MASK) as usize;
            if tail > cap || !tail.is_multiple_of(8) {
                return Err(bad(format!("size field {tail} out of range")));
            }
            while pos < tail {
                // SAFETY: pos < tail <= cap and pos is 8-aligned.
                let len = unsafe { rd(seg.add(pos)) } as usize;
                if len > self.max_len() || pos + kind.entry_bytes(self.padded, len) > tail {
                    return Err(bad(format!("entry at {pos} overruns the size field")));
                }
                self.pos.push(pos as u32);
                pos += kind.entry_bytes(self.padded, len);
            }
            self.tail = tail;
        }
        Ok(())
    }

    /// Zeroes the non-zero bytes of `[from, to)` of the active segment (whole
    /// lines after the first) and writes them back; true if anything was written.
    fn zero_range(&self, from: usize, to: usize) -> bool {
        let seg = self.segs[self.active];
        let line_end = round_up(from, 64).min(to);
        let mut dirty = false;
        // SAFETY: from..line_end is inside the segment.
        let partial = unsafe { std::slice::from_raw_parts_mut(seg.add(from), line_end - from) };
        if partial.iter().any(|&b| b != 0) {
            partial.fill(0);
            self.pool.flush(partial.as_ptr(), partial.len());
            dirty = true;
        }
        let end = round_up(to, 64).min(self.seg_bytes);
        if end > line_end {
            // SAFETY: line_end..end is a line-aligned part of the segment.
            let rest = unsafe { seg.add(line_end) };
            if zero_dirty_lines(&self.pool, rest, end - line_end) > 0 {
                dirty = true;
            }
        }
        dirty
    }

    pub fn kind(&self) -> LogKind {
        self.kind
    }

    pub fn padded(&self) -> bool {
        self.padded
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    /// Capacity of one segment in bytes.
    pub fn segment_bytes(&self) -> usize {
        self.seg_bytes
    }

    /// Writes one entry's header and payload at segment offset `pos` (not the
    /// Classic footer) without flushing.
    fn write_entry(&self, pos: usize, lsn: u64, payload: &[u8]) {
        // SAFETY: callers checked that the entry fits in the active segment.
        let p = unsafe { self.segs[self.active].add(pos) };
        let len = payload.len();
        // SAFETY: p..p+entry_bytes(len) is inside the segment and 8-aligned.
        unsafe {
            match self.kind {
                LogKind::Classic => {
                    wr(p, lsn);
                    wr(p.add(8), len as u64);
                    std::ptr::copy_nonoverlapping(payload.as_ptr(), p.add(16), len);
                }
                LogKind::Header | LogKind::HeaderDancing => {
                    wr(p, len as u64);
                    std::ptr::copy_nonoverlapping(payload.as_ptr(), p.add(8), len);
                }
                LogKind::PopLog => {
                    std::ptr::copy_nonoverlapping(payload.as_ptr(), p.add(8), len);
                    wr(p, (popcount(payload) + 1) << 32 | len as u64);
                }
                LogKind::Rawl => {
                    wr(p, RAWL_VALID | len as u64);
                    rawl_encode(p.add(8), payload);
                }
            }
        }
    }

    fn check_sizes(&self, payloads: &[&[u8]]) -> Result<usize> {
        let mut total = 0usize;
        for p in payloads {
            if p.len() > self.max_len() {
                return Err(PmioError::EntryTooLarge {
                    len: p.len(),
                    max: self.max_len(),
                });
            }
            total += self.kind.entry_bytes(self.padded, p.len());
        }
        let free = self.seg_bytes - self.tail;
        if total > free {
            return Err(PmioError::LogFull {
                needed: total,
                free,
            });
        }
        Ok(total)
    }

    fn append_many(&mut self, payloads: &[&[u8]]) -> Result<u64> {
        let total = self.check_sizes(payloads)?;
        let first = self.next_lsn();
        let start = self.tail;
        let mut pos = start;
        for (i, p) in payloads.iter().enumerate() {
            self.write_entry(pos, first + i as u64, p);
            pos += self.kind.entry_bytes(self.padded, p.len());
        }
        let seg = self.segs[self.active];
        if !ferrite_pm::tripwire::armed(ferrite_pm::tripwire::Tripwire::LogSkipPayloadFlush) {
            // SAFETY: start..start+total is inside the active segment.
            self.pool.flush(unsafe { seg.add(start) }, total);
        }
        self.pool.fence()?;
        match self.kind {
            LogKind::Classic => {
                let mut pos = start;
                let mut last_line = usize::MAX;
                for (i, p) in payloads.iter().enumerate() {
                    let f = pos + 16 + round_up(p.len(), 8);
                    // SAFETY: the footer word is inside the entry.
                    let fp = unsafe { seg.add(f) };
                    // SAFETY: as above.
                    unsafe { wr(fp, (first + i as u64) ^ FOOTER_MAGIC) };
                    if f / 64 != last_line {
                        if last_line != usize::MAX {
                            // SAFETY: last_line is a line of this segment.
                            self.pool.flush(unsafe { seg.add(last_line * 64) }, 64);
                        }
                        last_line = f / 64;
                    }
                    pos += self.kind.entry_bytes(self.padded, p.len());
                }
                if last_line != usize::MAX {
                    // SAFETY: as above.
                    self.pool.flush(unsafe { seg.add(last_line * 64) }, 64);
                }
                self.pool.fence()?;
            }
            LogKind::Header | LogKind::HeaderDancing => {
                let i = (self.appends % self.kind.size_fields() as u64) as usize;
                let f = self.field(self.active, i);
                // SAFETY: an aligned size field.
                unsafe { wr(f, self.epoch << TAIL_BITS | pos as u64) };
                self.pool.persist(f, 8)?;
            }
            LogKind::Rawl | LogKind::PopLog => {}
        }
        let mut pos = start;
        for p in payloads {
            self.pos.push(pos as u32);
            pos += self.kind.entry_bytes(self.padded, p.len());
        }
        self.tail = pos;
        self.appends += 1;
        Ok(first)
    }
}

impl Log for PmLog {
    fn append(&mut self, payload: &[u8]) -> Result<u64> {
        self.append_many(&[payload])
    }

    fn append_group(&mut self, payloads: &[&[u8]]) -> Result<u64> {
        if payloads.is_empty() {
            return Ok(self.next_lsn());
        }
        self.append_many(payloads)
    }

    fn first_lsn(&self) -> u64 {
        self.base_lsn
    }

    fn next_lsn(&self) -> u64 {
        self.base_lsn + self.pos.len() as u64
    }

    fn read(&self, lsn: u64) -> Result<Vec<u8>> {
        if lsn < self.base_lsn || lsn >= self.next_lsn() {
            return Err(PmioError::Invalid(format!(
                "lsn {lsn} is not in the log ({}..{})",
                self.base_lsn,
                self.next_lsn()
            )));
        }
        let pos = self.pos[(lsn - self.base_lsn) as usize] as usize;
        // SAFETY: recovered or appended entries lie inside the active segment
        // and were bounds-checked when found.
        unsafe {
            let p = self.segs[self.active].add(pos);
            Ok(match self.kind {
                LogKind::Classic => {
                    let len = rd(p.add(8)) as usize;
                    std::slice::from_raw_parts(p.add(16), len).to_vec()
                }
                LogKind::Header | LogKind::HeaderDancing => {
                    let len = rd(p) as usize;
                    std::slice::from_raw_parts(p.add(8), len).to_vec()
                }
                LogKind::PopLog => {
                    let len = (rd(p) & 0xffff_ffff) as usize;
                    std::slice::from_raw_parts(p.add(8), len).to_vec()
                }
                LogKind::Rawl => {
                    let len = (rd(p) & M63) as usize;
                    let mut out = Vec::with_capacity(len + 8);
                    rawl_decode(p.add(8), len, Some(&mut out));
                    out
                }
            })
        }
    }

    fn reset(&mut self) -> Result<()> {
        let other = 1 - self.active;
        if self.kind.scans() {
            zero_dirty_lines(&self.pool, self.segs[other], self.seg_bytes);
        } else {
            for i in 0..self.kind.size_fields() {
                let f = self.field(other, i);
                // SAFETY: an aligned size field.
                unsafe { wr(f, 0) };
                self.pool.flush(f, 8);
            }
        }
        self.pool.fence()?;
        let next = self.next_lsn();
        self.pool.set_root(self.id, 1, next << 1 | other as u64)?;
        self.active = other;
        self.base_lsn = next;
        self.pos.clear();
        self.tail = 0;
        self.epoch = 0;
        Ok(())
    }

    fn truncate_after(&mut self, lsn: u64) -> Result<()> {
        if lsn >= self.next_lsn().saturating_sub(1) {
            return Ok(());
        }
        if lsn + 1 < self.base_lsn {
            return Err(PmioError::Invalid(format!(
                "cannot truncate after {lsn}: the log starts at {}",
                self.base_lsn
            )));
        }
        let keep = (lsn + 1 - self.base_lsn) as usize;
        let cut = self.pos[keep] as usize;
        if self.kind.scans() {
            // One 8-byte store makes the first dropped entry invalid, so the
            // recovered log ends at `cut`; the rest is only cleanup (recovery
            // would redo it).
            // SAFETY: the header word of an entry of the active segment.
            let p = unsafe { self.segs[self.active].add(cut) };
            // SAFETY: as above.
            unsafe { wr(p, 0) };
            self.pool.persist(p, 8)?;
            if self.zero_range(cut, self.tail) {
                self.pool.fence()?;
            }
        } else {
            if self.epoch >= MAX_EPOCH {
                return Err(PmioError::Invalid(
                    "too many truncations of this segment; reset the log".into(),
                ));
            }
            self.epoch += 1;
            let i = (self.appends % self.kind.size_fields() as u64) as usize;
            let f = self.field(self.active, i);
            // SAFETY: an aligned size field.
            unsafe { wr(f, self.epoch << TAIL_BITS | cut as u64) };
            self.pool.persist(f, 8)?;
            self.appends += 1;
        }
        self.pos.truncate(keep);
        self.tail = cut;
        Ok(())
    }

    fn free_bytes(&self) -> usize {
        self.seg_bytes - self.tail
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ferrite_pm::PoolOptions;
    use proptest::prelude::*;

    fn pool() -> Pool {
        Pool::create_volatile(4 << 20, &PoolOptions::default()).unwrap()
    }

    #[test]
    fn rawl_round_trips_every_length() {
        let mut buf = vec![0u64; 64];
        for len in 0..200usize {
            let payload: Vec<u8> = (0..len).map(|i| (i * 37 + len) as u8 | 0x80).collect();
            buf.iter_mut().for_each(|w| *w = 0);
            let p = buf.as_mut_ptr() as *mut u8;
            // SAFETY: 64 words hold ceil(200*8/63) = 26 words.
            unsafe { rawl_encode(p, &payload) };
            let mut out = Vec::new();
            // SAFETY: as above.
            assert!(unsafe { rawl_decode(p, len, Some(&mut out)) });
            assert_eq!(out, payload, "len {len}");
            let words = (len * 8).div_ceil(63);
            assert!(buf[..words].iter().all(|w| w & RAWL_VALID != 0));
            assert!(buf[words..].iter().all(|&w| w == 0));
        }
    }

    #[test]
    fn every_kind_appends_reads_reopens_and_resets() {
        let pool = pool();
        for kind in LogKind::ALL {
            for padded in [false, true] {
                let name = format!("l-{}-{padded}", kind.name());
                let cfg = LogConfig {
                    kind,
                    padded,
                    segment_bytes: 16 << 10,
                };
                let mut log = PmLog::open_or_create(&pool, &name, cfg).unwrap();
                let mut want = Vec::new();
                for i in 0..40usize {
                    let e: Vec<u8> = (0..i * 3).map(|j| (i + j) as u8).collect();
                    assert_eq!(log.append(&e).unwrap(), 1 + i as u64);
                    want.push(e);
                }
                let g: Vec<Vec<u8>> = (0..5).map(|i| vec![i as u8; 10 + i]).collect();
                let refs: Vec<&[u8]> = g.iter().map(|v| v.as_slice()).collect();
                log.append_group(&refs).unwrap();
                want.extend(g);
                drop(log);
                let mut log = PmLog::open(&pool, &name).unwrap();
                let got: Vec<Vec<u8>> = log.entries().unwrap().into_iter().map(|e| e.1).collect();
                assert_eq!(got, want, "{name}");
                log.truncate_after(30).unwrap();
                assert_eq!(log.next_lsn(), 31);
                log.append(b"x").unwrap();
                drop(log);
                let mut log = PmLog::open(&pool, &name).unwrap();
                assert_eq!(log.len(), 31);
                assert_eq!(log.read(31).unwrap(), b"x");
                assert_eq!(log.read(30).unwrap(), want[29]);
                log.reset().unwrap();
                assert!(log.is_empty());
                assert_eq!(log.first_lsn(), 32);
                log.append(b"after reset").unwrap();
                drop(log);
                let log = PmLog::open(&pool, &name).unwrap();
                assert_eq!(log.entries().unwrap(), vec![(32, b"after reset".to_vec())]);
            }
        }
    }

    #[test]
    fn full_log_and_oversized_entries_are_errors() {
        let pool = pool();
        let cfg = LogConfig {
            kind: LogKind::PopLog,
            padded: true,
            segment_bytes: 1024,
        };
        let mut log = PmLog::open_or_create(&pool, "small", cfg).unwrap();
        for _ in 0..16 {
            log.append(&[1; 40]).unwrap();
        }
        assert!(matches!(
            log.append(&[1; 40]),
            Err(PmioError::LogFull { .. })
        ));
        assert!(matches!(
            log.append(&[0; 4096]),
            Err(PmioError::EntryTooLarge { .. })
        ));
        let other = LogConfig {
            kind: LogKind::Rawl,
            ..cfg
        };
        drop(log);
        assert!(matches!(
            PmLog::open_or_create(&pool, "small", other),
            Err(PmioError::Mismatch { .. })
        ));
    }

    #[test]
    fn per_thread_logs_append_concurrently() {
        let pool = pool();
        std::thread::scope(|sc| {
            for t in 0..2 {
                let pool = &pool;
                sc.spawn(move || {
                    let cfg = LogConfig {
                        kind: LogKind::PopLog,
                        padded: true,
                        segment_bytes: 64 << 10,
                    };
                    let mut log = PmLog::open_or_create(pool, &format!("wal.{t}"), cfg).unwrap();
                    for i in 0..500u64 {
                        log.append(&(i * 2 + t).to_le_bytes()).unwrap();
                    }
                });
            }
        });
        for t in 0..2u64 {
            let log = PmLog::open(&pool, &format!("wal.{t}")).unwrap();
            let got: Vec<u64> = log
                .entries()
                .unwrap()
                .iter()
                .map(|e| u64::from_le_bytes(e.1[..8].try_into().unwrap()))
                .collect();
            assert_eq!(got, (0..500).map(|i| i * 2 + t).collect::<Vec<_>>());
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(24))]
        /// Model test: the log against a Vec of entries, over appends, groups,
        /// resets and reopens.
        #[test]
        fn log_matches_a_vec(kind in 0usize..5, padded: bool,
                             ops in proptest::collection::vec((0u8..8, 0usize..150), 1..60)) {
            let pool = pool();
            let kind = LogKind::ALL[kind];
            let cfg = LogConfig { kind, padded, segment_bytes: 4096 };
            let mut log = PmLog::open_or_create(&pool, "m", cfg).unwrap();
            let mut model: Vec<Vec<u8>> = Vec::new();
            let mut first = 1u64;
            for (i, (op, len)) in ops.into_iter().enumerate() {
                let e: Vec<u8> = (0..len).map(|j| (i * 7 + j) as u8).collect();
                match op {
                    0 => { log.reset().unwrap(); first += model.len() as u64; model.clear(); }
                    1 => { drop(log); log = PmLog::open(&pool, "m").unwrap(); }
                    3 => {
                        // Keep `len % (n + 1)` entries.
                        let keep = len % (model.len() + 1);
                        log.truncate_after(first + keep as u64 - 1).unwrap();
                        model.truncate(keep);
                    }
                    2 => {
                        let g = [e.as_slice(), &e[..len / 2]];
                        match log.append_group(&g) {
                            Ok(_) => { model.push(e.clone()); model.push(e[..len / 2].to_vec()); }
                            Err(PmioError::LogFull { .. }) => {}
                            Err(x) => panic!("{x}"),
                        }
                    }
                    _ => match log.append(&e) {
                        Ok(l) => { prop_assert_eq!(l, first + model.len() as u64); model.push(e); }
                        Err(PmioError::LogFull { .. }) => {}
                        Err(x) => panic!("{x}"),
                    },
                }
            }
            let got: Vec<Vec<u8>> = log.entries().unwrap().into_iter().map(|e| e.1).collect();
            prop_assert_eq!(got, model);
            prop_assert_eq!(log.first_lsn(), first);
        }
    }
}
