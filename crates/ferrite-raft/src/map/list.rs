//! The hybrid map (thesis §3.2, second version): an append-only singly linked
//! list of PM pages holding `put` and `delete` records, indexed by a search
//! tree in DRAM that points at the live records. Values live only in PM.
//!
//! Persistent layout (object type [`LIST_TYPE`], details in `docs/FORMAT.md`):
//!
//! * root word 0 / 1: head page of list A / list B;
//! * root word 2: the *tail*: bit 63 selects list A or B, the rest is the pool
//!   offset just past the last committed record (0: the list is empty);
//! * root word 3: format tag [`LIST_FORMAT`]; root word 4: page size.
//!
//! A page is a heap block: `next` (u64), `used` (u32, valid once the page has
//! a successor), `cap` (u32), then records. A record is `klen` (u32), `vlen`
//! (u32), `kind` (u8: 1 put, 2 delete), 7 reserved bytes, key, value, padding
//! to 8 bytes. Records never span pages; a record larger than a page gets a
//! page of its own size.
//!
//! **Group commit.** Appends write records, page headers and links with plain
//! stores and note the ranges. `commit` flushes the ranges, fences, stores the
//! new tail word and persists it: everything below the tail is durable before
//! the tail names it, so recovery (walk from the head to the page holding the
//! tail, replaying records into the DRAM tree) sees whole groups only.
//!
//! **Clean-up.** [`ListMap::maintenance`] cleans the head page: it re-appends
//! the page's live records (those the DRAM tree points at), commits, then
//! advances the head word past the page (persisted) and frees the page.
//! Replaying a list whose prefix was removed this way gives the same map,
//! because every record of the prefix that was the last word on its key was
//! re-stated after it. It runs one page at a time under the writer's lock
//! (microseconds), and pauses while a snapshot is being sent.
//!
//! **Snapshot installation.** A staging map fills a fresh page chain, then
//! [`ListMap::install`] persists it, writes its head into the inactive head
//! word and flips the list bit of the tail word with one 8-byte store.

use std::collections::VecDeque;
use std::ops::Bound;
use std::sync::atomic::Ordering;

use ferrite_pm::{store_u64, Heap, Marker, ObjectId, PmError, Pool};

use ferrite_pm::tripwire::{armed, Tripwire};

use super::list_index::{is_data, Index, Latest, Loc, Rec};
use super::record::{self, HDR as REC_HDR, KIND_DEL, KIND_PUT};
use super::{coalesce, MapStats, PmMap};
use crate::error::{Result, StoreError};

/// Type name of the list object in the pool's directory.
pub const LIST_TYPE: &str = "ferrite.raft.list";
/// Format tag in root word 3 ("FRLIST" + version 1).
pub const LIST_FORMAT: u64 = 0x4652_4c49_5354_0001;
/// Default page size (the thesis found pages of about 1 KiB best).
pub const DEFAULT_PAGE: usize = 1024;
/// Default [`ListOptions::background_index`]: below this a thread costs more
/// than the sort it would take off the open.
pub const BACKGROUND_INDEX: usize = 4096;

const R_HEAD: [usize; 2] = [0, 1];
const R_TAIL: usize = 2;
const R_FORMAT: usize = 3;
const R_PAGE: usize = 4;
const GEN_BIT: u64 = 1 << 63;

const PAGE_HDR: u64 = 16;
/// Bytes of a page that [`PmMap::put_records`] fills (the heap's largest
/// size class): a snapshot's records are copied in runs this long.
const RECORD_RUN: usize = 64 << 10;
/// How far ahead of a staging map's claims its warming thread faults free
/// chunks in (`ferrite_pm::Warmer`, nudged by every snapshot frame): a
/// frame of the stream (1 MiB) and more, so the copy of a frame finds its
/// pages mapped; at most this much of the pool is left reserved and
/// resident but unused when the staging ends.
const WARM_LEAD: u64 = 4 << 20;
/// Upper bound on pages walked at open (a cycle in corrupt data stops here).
const MAX_PAGES: usize = 1 << 28;

#[derive(Debug, Clone, Copy)]
struct Page {
    off: u64,
    cap: u32,
    used: u32,
}

/// Options of a list map.
#[derive(Debug, Clone)]
pub struct ListOptions {
    /// Page size for a new list (bytes, >= 256).
    pub page_size: usize,
    /// Opening a list with at least this many version records (keys in
    /// [`crate::keys::DATA`]'s space) indexes them in a background thread;
    /// the metadata and the Raft log are served meanwhile, and anything that
    /// needs a version waits for it (see `map/list_index.rs`).
    pub background_index: usize,
}

impl Default for ListOptions {
    fn default() -> Self {
        ListOptions {
            page_size: DEFAULT_PAGE,
            background_index: BACKGROUND_INDEX,
        }
    }
}

/// The hybrid PM list with its DRAM index. See the module documentation.
pub struct ListMap {
    pool: Pool,
    heap: Heap,
    id: ObjectId,
    name: String,
    /// False for a staging map (never publishes).
    published: bool,
    /// Which head word the list uses (0: A, 1: B).
    gen: u64,
    page_size: usize,
    pages: VecDeque<Page>,
    index: Index,
    dirty: Vec<(u64, u64)>,
    uncommitted: usize,
    /// The head word as last persisted (0: none).
    durable_head: u64,
    record_bytes: u64,
    commits: u64,
    cleaned_pages: u64,
    paused: u32,
    /// Bytes of the pages (their capacities), kept as pages come and go.
    page_bytes: u64,
    /// Space is short: clean pages with less dead data (see
    /// [`PmMap::set_space_pressure`]).
    pressure: bool,
    /// A staging map's: faults the pool's next free chunks in ahead of the
    /// snapshot's records ([`WARM_LEAD`]).
    warmer: Option<ferrite_pm::Warmer>,
}

fn corrupt(name: &str, detail: String) -> PmError {
    PmError::CorruptObject {
        object: name.to_string(),
        detail,
    }
}

impl ListMap {
    /// Opens the list named `name` in `pool`, creating it if absent, and
    /// rebuilds the DRAM index by replaying the committed records.
    pub fn open_or_create(pool: &Pool, name: &str, opts: &ListOptions) -> Result<ListMap> {
        let (id, _) = pool.open_or_create_object(name, LIST_TYPE)?;
        let format = pool.root(id, R_FORMAT);
        if format == 0 {
            // New (or a creation that crashed before this word): empty list.
            if opts.page_size < 256 || opts.page_size > 1 << 20 {
                return Err(StoreError::Invalid(format!(
                    "list page size {} is outside 256..1 MiB",
                    opts.page_size
                )));
            }
            pool.set_root(id, R_PAGE, opts.page_size as u64)?;
            pool.set_root(id, R_FORMAT, LIST_FORMAT)?;
        } else if format != LIST_FORMAT {
            return Err(StoreError::corrupt(
                name,
                format!("list format tag {format:#x}, this build reads {LIST_FORMAT:#x}"),
            ));
        }
        let page_size = pool.root(id, R_PAGE) as usize;
        if !(256..=1 << 20).contains(&page_size) {
            return Err(StoreError::corrupt(name, format!("page size {page_size}")));
        }
        let tail = pool.root(id, R_TAIL);
        let gen = tail >> 63;
        let end = tail & !GEN_BIT;
        let head = pool.root(id, R_HEAD[gen as usize]);
        let mut pages: VecDeque<Page> = VecDeque::new();
        let (heap, _) = pool.open_heap(id, |m| {
            if end != 0 {
                trace_pages(m, name, head, end, &mut pages)?;
            }
            Ok(())
        })?;
        let mut map = ListMap {
            pool: pool.clone(),
            heap,
            id,
            name: name.to_string(),
            published: true,
            gen,
            page_size,
            pages,
            index: Index::default(),
            dirty: Vec::new(),
            uncommitted: 0,
            durable_head: if end != 0 { head } else { 0 },
            record_bytes: 0,
            commits: 0,
            cleaned_pages: 0,
            paused: 0,
            page_bytes: 0,
            pressure: false,
            warmer: None,
        };
        map.page_bytes = map.pages.iter().map(|p| p.cap as u64).sum();
        map.replay(opts.background_index)?;
        Ok(map)
    }

    /// Rebuilds the DRAM index from the pages (in list order).
    fn replay(&mut self, background: usize) -> Result<()> {
        // Record headers and keys are read in place; values are never copied
        // (they stay in PM, the index only points at them), which keeps the
        // start-up time proportional to the number of records, not bytes.
        //
        // The records' keys are copied into one arena; `Index::rebuild_parts`
        // sorts them (the version keys in a background thread, see
        // `map/list_index.rs`). Every record is read and checked here, so a
        // corrupt list fails the open.
        let scan = scan_pages(&self.pool, &self.name, self.pages.make_contiguous())?;
        self.record_bytes += scan.bytes;
        self.index = Index::rebuild_parts(scan.arena, scan.data, scan.early, background);
        Ok(())
    }

    /// Pauses (or resumes, with `false`) the clean-up pass; pauses nest.
    pub fn pause_cleanup(&mut self, pause: bool) {
        if pause {
            self.paused += 1;
        } else {
            self.paused = self.paused.saturating_sub(1);
        }
    }

    /// Pages in the list.
    pub fn pages(&self) -> usize {
        self.pages.len()
    }

    fn word(&self, i: usize) -> &std::sync::atomic::AtomicU64 {
        self.pool.root_word(self.id, i)
    }

    fn persist_root(&self, i: usize, v: u64) -> Result<()> {
        let w = self.word(i);
        store_u64(w, v, Ordering::Release);
        self.pool.persist(w as *const _ as *const u8, 8)?;
        Ok(())
    }

    fn note(&mut self, off: u64, len: u64) {
        if let Some((o, l)) = self.dirty.last_mut() {
            if *o + *l == off {
                *l += len;
                return;
            }
        }
        self.dirty.push((off, len));
    }

    /// Allocates a page with room for `need` bytes of records and links it
    /// after the current tail page.
    fn new_page(&mut self, need: u64) -> Result<()> {
        let want = (PAGE_HDR + need).max(self.page_size as u64) as usize;
        let off = self.heap.alloc(want)?;
        let cap = self
            .heap
            .block_size(off)
            .unwrap_or(want)
            .min(u32::MAX as usize) as u32;
        let mut hdr = [0u8; PAGE_HDR as usize];
        hdr[12..16].copy_from_slice(&cap.to_le_bytes());
        self.pool.slice(off, PAGE_HDR as usize)?.write(0, &hdr)?;
        self.note(off, PAGE_HDR);
        if let Some(last) = self.pages.back().copied() {
            let mut link = [0u8; 12];
            link[..8].copy_from_slice(&off.to_le_bytes());
            link[8..12].copy_from_slice(&last.used.to_le_bytes());
            self.pool.slice(last.off, 12)?.write(0, &link)?;
            self.note(last.off, 12);
        }
        self.pages.push_back(Page {
            off,
            cap,
            used: PAGE_HDR as u32,
        });
        self.page_bytes += cap as u64;
        Ok(())
    }

    /// Appends one record and returns where it is.
    fn append(&mut self, kind: u8, key: &[u8], value: &[u8]) -> Result<Loc> {
        let size = record::size(key.len(), value.len());
        if size > u32::MAX as u64 / 2 {
            return Err(StoreError::Invalid(format!("record of {size} bytes")));
        }
        match self.pages.back() {
            Some(p) if p.used as u64 + size <= p.cap as u64 => {}
            _ => self.new_page(size)?,
        }
        let p = self.pages.back_mut().expect("a tail page exists");
        let off = p.off + p.used as u64;
        p.used += size as u32;
        let hdr = record::header(kind, key.len(), value.len());
        let s = self.pool.slice(off, size as usize)?;
        s.write(0, &hdr)?;
        s.write(REC_HDR as usize, key)?;
        s.write(REC_HDR as usize + key.len(), value)?;
        self.note(off, size);
        self.uncommitted += 1;
        self.record_bytes += size;
        Ok(Loc {
            off,
            size: size as u32,
        })
    }

    fn read_value(&self, loc: Loc) -> Result<Vec<u8>> {
        let h = self.pool.slice(loc.off, REC_HDR as usize)?;
        let word = h.read_u64(0)?;
        let (klen, vlen) = (word as u32 as u64, word >> 32);
        Ok(self
            .pool
            .slice(loc.off + REC_HDR + klen, vlen as usize)?
            .to_vec())
    }

    /// The end of the committed data as the tail word encodes it.
    fn tail_word(&self) -> u64 {
        let end = self.pages.back().map_or(0, |p| p.off + p.used as u64);
        self.gen << 63 | end
    }

    /// Flushes the noted ranges, fences, persists the head word when it
    /// changed and then the tail word.
    fn publish(&mut self) -> Result<()> {
        let ranges = coalesce(std::mem::take(&mut self.dirty));
        let head = self.pages.front().map_or(0, |p| p.off);
        if armed(Tripwire::RaftListPublishBeforeFence) {
            store_u64(self.word(R_TAIL), self.tail_word(), Ordering::Release);
        }
        if !armed(Tripwire::RaftListSkipFlush) {
            for (off, len) in ranges {
                self.pool.slice(off, len as usize)?.flush();
            }
        }
        self.pool.fence()?;
        if head != self.durable_head {
            self.persist_root(R_HEAD[self.gen as usize], head)?;
            self.durable_head = head;
        }
        self.persist_root(R_TAIL, self.tail_word())?;
        self.uncommitted = 0;
        self.commits += 1;
        Ok(())
    }

    fn records_of(&self, p: Page) -> Result<Vec<(Loc, u8, Vec<u8>)>> {
        let bytes = self.pool.slice(p.off, p.used as usize)?.to_vec();
        let mut out = Vec::new();
        let mut at = PAGE_HDR as usize;
        while at + REC_HDR as usize <= bytes.len() {
            let klen = u32::from_le_bytes(bytes[at..at + 4].try_into().unwrap()) as usize;
            let vlen = u32::from_le_bytes(bytes[at + 4..at + 8].try_into().unwrap()) as usize;
            let size = record::size(klen, vlen) as usize;
            let key = bytes[at + REC_HDR as usize..at + REC_HDR as usize + klen].to_vec();
            out.push((
                Loc {
                    off: p.off + at as u64,
                    size: size as u32,
                },
                bytes[at + 8],
                key,
            ));
            at += size;
        }
        Ok(out)
    }

    /// Whether a clean-up step is worth running: more than half of the record
    /// bytes are dead (under space pressure: more than a ninth) and the list
    /// has more than a few pages.
    fn worth_cleaning(&self) -> bool {
        let live = self.index.live_bytes();
        let dead_enough = if self.pressure {
            self.record_bytes > live + live / 8
        } else {
            self.record_bytes > 2 * live
        };
        self.published && self.paused == 0 && self.pages.len() > 4 && dead_enough
    }

    fn free_pages(&self, pages: impl IntoIterator<Item = Page>) -> Result<()> {
        for p in pages {
            self.heap.free(p.off)?;
        }
        Ok(())
    }
}

/// What reading a list's pages found: the version records (their keys in
/// one arena, list order) and the other keys' records replayed.
struct Scan {
    arena: Vec<u8>,
    data: Vec<Rec>,
    early: Latest,
    /// Bytes of the records read.
    bytes: u64,
}

/// Reads every record of `pages` (in order), checking each.
fn scan_pages(pool: &Pool, name: &str, pages: &[Page]) -> Result<Scan> {
    let mut out = Scan {
        arena: Vec::new(),
        data: Vec::new(),
        early: Latest::default(),
        bytes: 0,
    };
    // Pages are a chain of scattered blocks: start loading a few pages
    // ahead (with values larger than a page, a page holds one record and
    // each header is a cache miss).
    const AHEAD: usize = 8;
    for (i, &p) in pages.iter().enumerate() {
        if let Some(q) = pages.get(i + AHEAD) {
            if let Ok(s) = pool.slice(q.off, PAGE_HDR as usize + REC_HDR as usize) {
                s.prefetch();
            }
        }
        let used = p.used as usize;
        let mut at = PAGE_HDR as usize;
        while at < used {
            let bad = |d: &str| StoreError::corrupt(name, format!("page {:#x}+{at}: {d}", p.off));
            if at + REC_HDR as usize > used {
                return Err(bad("record header beyond the page's end"));
            }
            let h = pool.slice(p.off + at as u64, REC_HDR as usize)?;
            let lens = h.read_u64(0)?;
            let klen = lens as u32 as usize;
            let vlen = (lens >> 32) as usize;
            let kind = h.read_u64(8)? as u8;
            let size = record::size(klen, vlen) as usize;
            if at + size > used {
                return Err(bad("record beyond the page's end"));
            }
            let key = pool.slice(p.off + at as u64 + REC_HDR, klen)?;
            let loc = match kind {
                KIND_PUT => Some(Loc {
                    off: p.off + at as u64,
                    size: size as u32,
                }),
                KIND_DEL if vlen == 0 => None,
                _ => return Err(bad(&format!("record kind {kind} with {vlen}-byte value"))),
            };
            out.bytes += size as u64;
            if out.arena.len() + klen > u32::MAX as usize {
                return Err(bad("keys of more than 4 GiB in all"));
            }
            // Copied once, into the arena; a key outside the version space
            // is replayed at once and its bytes given back.
            let koff = out.arena.len();
            key.append_to(&mut out.arena);
            if is_data(&out.arena[koff..]) {
                out.data.push((koff as u32, klen as u32, loc));
            } else {
                out.early.record(&out.arena[koff..], loc);
                out.arena.truncate(koff);
            }
            at += size;
        }
    }
    Ok(out)
}

/// Walks the page chain from `head` to the page holding `end`, marking pages.
fn trace_pages(
    m: &mut Marker<'_>,
    name: &str,
    head: u64,
    end: u64,
    pages: &mut VecDeque<Page>,
) -> ferrite_pm::Result<()> {
    let mut off = head;
    loop {
        if pages.len() >= MAX_PAGES {
            return Err(corrupt(name, "page chain does not end".into()));
        }
        m.check_block(off, PAGE_HDR)?;
        let h = m.pool().slice(off, PAGE_HDR as usize)?;
        let next = h.read_u64(0)?;
        let w = h.read_u64(8)?;
        let (used, cap) = (w as u32, (w >> 32) as u32);
        m.check_block(off, cap as u64)?;
        if cap < PAGE_HDR as u32 + REC_HDR as u32 {
            return Err(corrupt(
                name,
                format!("page {off:#x} claims capacity {cap}"),
            ));
        }
        if !m.mark(off)? {
            return Err(corrupt(name, format!("page {off:#x} is linked twice")));
        }
        if end >= off + PAGE_HDR && end <= off + cap as u64 {
            pages.push_back(Page {
                off,
                cap,
                used: (end - off) as u32,
            });
            return Ok(());
        }
        if used < PAGE_HDR as u32 || used > cap || next == 0 {
            return Err(corrupt(
                name,
                format!("page {off:#x} (used {used}, next {next:#x}) precedes the tail {end:#x} but cannot"),
            ));
        }
        pages.push_back(Page { off, cap, used });
        off = next;
    }
}

impl PmMap for ListMap {
    fn kind(&self) -> &'static str {
        "list"
    }

    fn get(&self, key: &[u8]) -> Result<Option<Vec<u8>>> {
        match self.index.get(key) {
            Some(&loc) => Ok(Some(self.read_value(loc)?)),
            None => Ok(None),
        }
    }

    fn floor(&self, lower: &[u8], upper: &[u8]) -> Result<Option<(Vec<u8>, Vec<u8>)>> {
        if lower > upper {
            return Ok(None);
        }
        match self
            .index
            .range(Bound::Included(lower), Bound::Included(upper))
            .next_back()
        {
            Some((k, &loc)) => Ok(Some((k.to_vec(), self.read_value(loc)?))),
            None => Ok(None),
        }
    }

    fn range(&self, from: &[u8], to: &[u8], limit: usize) -> Result<Vec<(Vec<u8>, Vec<u8>)>> {
        if from >= to {
            return Ok(Vec::new());
        }
        self.index
            .range(Bound::Included(from), Bound::Excluded(to))
            .take(limit)
            .map(|(k, &loc)| Ok((k.to_vec(), self.read_value(loc)?)))
            .collect()
    }

    fn visit(
        &self,
        from: &[u8],
        to: &[u8],
        f: &mut dyn FnMut(&[u8], super::Raw<'_>) -> Result<bool>,
    ) -> Result<()> {
        if from >= to {
            return Ok(());
        }
        let range = self.index.range(Bound::Included(from), Bound::Excluded(to));
        // A walk of a snapshot's worth of keys: each key is an allocation of
        // its own and each record elsewhere in PM, so a cursor a few entries
        // ahead starts loading both (a cache miss apiece otherwise).
        const AHEAD: usize = 8;
        let mut ahead = range.clone().skip(AHEAD);
        for (k, loc) in range {
            if let Some((k2, l2)) = ahead.next() {
                ferrite_pm::prefetch::line(k2.as_ptr());
                if let Ok(r) = self.pool.slice(l2.off, REC_HDR as usize) {
                    r.prefetch();
                }
            }
            let rec = self.pool.slice(loc.off, loc.size as usize)?;
            if !f(k, super::Raw::Record(rec))? {
                break;
            }
        }
        Ok(())
    }

    /// Copies the stream into pages as it is (runs of whole records of up to
    /// `RECORD_RUN` bytes per page, one non-temporal copy each, then one
    /// fence) and indexes its keys: the records need no encoding, and the
    /// pages no write-back after the copy.
    fn put_records(&mut self, bytes: &[u8]) -> Result<u64> {
        if let Some(w) = &self.warmer {
            w.nudge();
        }
        let recs = record::puts(bytes)
            .map(|r| r.map(|(at, k, _)| (at, k.len())))
            .collect::<std::result::Result<Vec<_>, String>>()
            .map_err(StoreError::Invalid)?;
        if recs.is_empty() {
            return Ok(0);
        }
        let end = |i: usize| recs.get(i + 1).map_or(bytes.len(), |r| r.0);
        let room = RECORD_RUN - PAGE_HDR as usize;
        let mut i = 0;
        while i < recs.len() {
            let start = recs[i].0;
            let mut j = i + 1;
            while j < recs.len() && end(j) - start <= room {
                j += 1;
            }
            let len = end(j - 1) - start;
            match self.pages.back() {
                Some(p) if p.used as u64 + len as u64 <= p.cap as u64 => {}
                _ => self.new_page(len as u64)?,
            }
            let p = self.pages.back_mut().expect("a tail page exists");
            let off = p.off + p.used as u64;
            p.used += len as u32;
            // Non-temporal: written back as copied, so neither this copy nor
            // the commit or install after it writes the records back again.
            let dst = self.pool.slice(off, len)?;
            if armed(Tripwire::RaftListRecordsNoWriteBack) {
                // Broken on purpose: plain stores, never written back.
                dst.write(0, &bytes[start..start + len])?;
            } else {
                dst.write_nt(&bytes[start..start + len])?;
            }
            for (n, &(at, klen)) in recs[i..j].iter().enumerate() {
                let size = (end(i + n) - at) as u32;
                let k = at + REC_HDR as usize;
                let loc = Loc {
                    off: off + (at - start) as u64,
                    size,
                };
                self.record_bytes += size as u64;
                // In key order (a snapshot's): appended, indexed in bulk.
                self.index.push_sorted(bytes[k..k + klen].into(), loc);
            }
            self.uncommitted += j - i;
            i = j;
        }
        // This thread's non-temporal stores drained (the commit or install
        // that publishes them may run on another thread).
        self.pool.fence()?;
        Ok(recs.len() as u64)
    }

    fn put(&mut self, key: &[u8], value: &[u8]) -> Result<()> {
        let loc = self.append(KIND_PUT, key, value)?;
        self.index.insert(key.into(), loc);
        Ok(())
    }

    fn delete(&mut self, key: &[u8]) -> Result<bool> {
        if !self.index.contains_key(key) {
            return Ok(false);
        }
        self.append(KIND_DEL, key, &[])?;
        self.index.remove(key);
        Ok(true)
    }

    fn commit(&mut self) -> Result<()> {
        if self.uncommitted == 0 && self.dirty.is_empty() {
            return Ok(());
        }
        if !self.published {
            // A staging map publishes only through `install`.
            return Ok(());
        }
        self.publish()
    }

    fn uncommitted(&self) -> usize {
        self.uncommitted
    }

    fn len(&self) -> usize {
        self.index.len()
    }

    /// A staging map; a background build of this map's index stops (the
    /// snapshot being staged replaces what it indexes).
    fn staging(&self) -> Result<ListMap> {
        self.index.stop_build();
        Ok(ListMap {
            pool: self.pool.clone(),
            heap: self.heap.clone(),
            id: self.id,
            name: self.name.clone(),
            published: false,
            gen: 1 - self.gen,
            page_size: self.page_size,
            pages: VecDeque::new(),
            index: Index::default(),
            dirty: Vec::new(),
            uncommitted: 0,
            durable_head: 0,
            record_bytes: 0,
            commits: 0,
            cleaned_pages: 0,
            paused: 0,
            page_bytes: 0,
            pressure: false,
            warmer: self.pool.warmer(WARM_LEAD),
        })
    }

    fn install(&mut self, mut staged: ListMap) -> Result<()> {
        if staged.id != self.id || staged.published || staged.gen == self.gen {
            return Err(StoreError::Invalid(
                "install takes a staging map of the same list".into(),
            ));
        }
        // Everything written so far (the old list's pending group too) first.
        self.commit()?;
        for (off, len) in coalesce(std::mem::take(&mut staged.dirty)) {
            self.pool.slice(off, len as usize)?.flush();
        }
        self.pool.fence()?;
        let head = staged.pages.front().map_or(0, |p| p.off);
        self.persist_root(R_HEAD[staged.gen as usize], head)?;
        self.persist_root(R_TAIL, staged.tail_word())?;
        let old = std::mem::take(&mut self.pages);
        self.free_pages(old)?;
        staged.published = true;
        staged.durable_head = head;
        staged.uncommitted = 0;
        staged.commits = self.commits + 1;
        staged.cleaned_pages = self.cleaned_pages;
        staged.paused = self.paused;
        staged.pressure = self.pressure;
        // Staged: the chunks the warming thread is ahead on stay free.
        staged.warmer = None;
        *self = staged;
        Ok(())
    }

    fn discard(staged: ListMap) -> Result<()> {
        staged.free_pages(staged.pages.iter().copied())
    }

    fn maintenance(&mut self) -> Result<bool> {
        if self.index.building() {
            return Ok(false);
        }
        self.index.settle();
        if !self.worth_cleaning() {
            return Ok(false);
        }
        let head = self.pages[0];
        let mut copies = 0;
        for (loc, kind, key) in self.records_of(head)? {
            if kind == KIND_PUT && self.index.get(key.as_slice()) == Some(&loc) {
                let value = self.read_value(loc)?;
                let new = self.append(KIND_PUT, &key, &value)?;
                self.index.insert(key.into_boxed_slice(), new);
                copies += 1;
            }
        }
        let next = self.pages[1].off;
        if armed(Tripwire::RaftListCleanBeforeCommit) {
            // Broken on purpose: the head moves past the page before its
            // live records' copies are durable.
            self.persist_root(R_HEAD[self.gen as usize], next)?;
            self.durable_head = next;
            self.pages.pop_front();
            self.page_bytes -= head.cap as u64;
            self.commit()?;
        } else {
            // The copies (and whatever else is pending) durable first ...
            if copies > 0 || self.uncommitted > 0 {
                self.publish()?;
            }
            // ... then the head moves past the page ...
            self.persist_root(R_HEAD[self.gen as usize], next)?;
            self.durable_head = next;
            self.pages.pop_front();
            self.page_bytes -= head.cap as u64;
        }
        // ... and the page is free (its unlinking store is durable).
        self.record_bytes -= (head.used as u64).saturating_sub(PAGE_HDR);
        self.heap.free(head.off)?;
        self.cleaned_pages += 1;
        Ok(self.worth_cleaning())
    }

    fn pool(&self) -> &Pool {
        &self.pool
    }

    fn set_space_pressure(&mut self, on: bool) {
        self.pressure = on;
    }

    fn stats(&self) -> MapStats {
        MapStats {
            // Without waiting for a background build.
            entries: self.index.len_now() as u64,
            commits: self.commits,
            pm_bytes: self.page_bytes,
            live_bytes: self.index.live_bytes(),
            maintenance: self.cleaned_pages,
        }
    }

    fn index_ready(&self) -> bool {
        !self.index.building()
    }

    fn check(&self) -> std::result::Result<u64, String> {
        // Every index entry points at a put record of its key inside a page.
        for (k, loc) in self.index.range(Bound::Unbounded, Bound::Unbounded) {
            let p = self
                .pages
                .iter()
                .find(|p| loc.off >= p.off + PAGE_HDR && loc.off < p.off + p.used as u64)
                .ok_or_else(|| format!("record {:#x} is in no page", loc.off))?;
            let h = self
                .pool
                .slice(loc.off, REC_HDR as usize)
                .and_then(|s| s.read_u64(0))
                .map_err(|e| e.to_string())?;
            let klen = h as u32 as usize;
            let key = self
                .pool
                .slice(loc.off + REC_HDR, klen)
                .map_err(|e| e.to_string())?
                .to_vec();
            if key.as_slice() != &**k || loc.off + loc.size as u64 > p.off + p.used as u64 {
                return Err(format!("record {:#x} does not hold its key", loc.off));
            }
        }
        let indexed: u64 = self
            .index
            .range(Bound::Unbounded, Bound::Unbounded)
            .map(|(_, l)| l.size as u64)
            .sum();
        if indexed != self.index.live_bytes() {
            return Err(format!(
                "the index points at {indexed} record bytes, accounting says {}",
                self.index.live_bytes()
            ));
        }
        let recs: u64 = self.pages.iter().map(|p| p.used as u64 - PAGE_HDR).sum();
        if recs != self.record_bytes {
            return Err(format!(
                "pages hold {recs} record bytes, accounting says {}",
                self.record_bytes
            ));
        }
        Ok(self.index.len() as u64)
    }
}
