//! An Elf in a PM pool: built in DRAM, copied into one heap block with
//! non-temporal stores and published by one root-word store; reopened without
//! rebuilding; extended by inserts into a checksummed delta and merged into the
//! next generation, published the same way.
//!
//! Pool object (type [`OBJECT_TYPE`]): root word 0 = offset of the current
//! [`Descriptor`] (0 = no Elf). The descriptor names the Elf block, the schema
//! block and the delta block of one generation.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, RwLock};

use ferrite_pm::{Heap, Marker, ObjectId, PmError, Pool};

use crate::build::{build_with_tids, Built, Meta};
use crate::elf::{Elf, ElfData, Variant, Words};
use crate::error::{ElfError, Result};
use crate::layout::*;
use crate::query::Query;
use crate::table::Schema;

/// Options for creating (or replacing) an Elf in a pool.
#[derive(Debug, Clone)]
pub struct CreateOptions {
    /// Rows the delta holds before an insert triggers a merge.
    pub delta_capacity: u64,
    /// Seed of the delta checksums (fixed in tests for determinism; `None` = random).
    pub nonce: Option<u64>,
}

impl Default for CreateOptions {
    fn default() -> Self {
        CreateOptions {
            delta_capacity: 65_536,
            nonce: None,
        }
    }
}

/// The PM blocks of one generation; freed when the generation was replaced
/// (`retired`) and the last reader let go.
struct GenBlocks {
    heap: Heap,
    desc_off: u64,
    elf_off: u64,
    delta_off: u64,
    schema_off: u64,
    retired: AtomicBool,
    free_schema: AtomicBool,
}

impl Drop for GenBlocks {
    fn drop(&mut self) {
        if self.retired.load(Ordering::Acquire) {
            // The root word no longer reaches these blocks and that store was
            // persisted by `set_root`, as `Heap::free` requires.
            let _ = self.heap.free(self.desc_off);
            let _ = self.heap.free(self.elf_off);
            let _ = self.heap.free(self.delta_off);
            if self.free_schema.load(Ordering::Acquire) && self.schema_off != 0 {
                let _ = self.heap.free(self.schema_off);
            }
        }
    }
}

/// One published generation as seen by queries.
pub struct Generation {
    pub generation: u64,
    pub elf: Elf,
    /// Delta rows (row-major), mirrored from PM.
    delta: RwLock<Vec<u32>>,
    delta_cap: u64,
    nonce: u64,
    blocks: Arc<GenBlocks>,
}

impl Generation {
    /// Rows in the delta.
    pub fn delta_rows(&self) -> u64 {
        let n = self.elf.ncols();
        self.delta.read().map(|d| (d.len() / n) as u64).unwrap_or(0)
    }

    /// Calls `f(row, tid)` for every delta row.
    pub fn for_each_delta_row(&self, mut f: impl FnMut(&[u32], u32)) {
        let n = self.elf.ncols();
        let d = self.delta.read().unwrap_or_else(|e| e.into_inner());
        let base = self.base_rows() as u32;
        for (i, row) in d.chunks_exact(n).enumerate() {
            f(row, base + i as u32);
        }
    }

    /// TID of delta entry 0.
    pub fn base_rows(&self) -> u64 {
        self.elf.nrows()
    }
}

/// An Elf object in a pool.
pub struct ElfStore {
    pool: Pool,
    heap: Heap,
    id: ObjectId,
    variant: Variant,
    schema: Option<Schema>,
    cur: RwLock<Arc<Generation>>,
    /// Serializes delta appends and publications.
    append: Mutex<()>,
    /// One merge at a time.
    merging: Mutex<()>,
}

fn read_struct<T: Header>(pool: &Pool, off: u64) -> Result<T> {
    let n = std::mem::size_of::<T>();
    if !pool.contains(off, n) || !off.is_multiple_of(8) {
        return Err(ElfError::Corrupt(format!(
            "block offset {off:#x} out of bounds"
        )));
    }
    // SAFETY: in bounds and 8-aligned (checked); T is a sealed plain-data header,
    // valid for any bit pattern.
    Ok(unsafe { std::ptr::read_volatile(pool.at(off, n) as *const T) })
}

fn as_bytes(w: &[u32]) -> &[u8] {
    // SAFETY: u32 has no padding; the byte view covers exactly the slice.
    unsafe { std::slice::from_raw_parts(w.as_ptr() as *const u8, w.len() * 4) }
}

fn pm_err(e: PmError) -> ElfError {
    ElfError::Pm(e)
}

fn entry_words(ncols: usize) -> usize {
    ncols + 1
}

fn delta_bytes(ncols: usize, cap: u64) -> usize {
    HEADER_BYTES + cap as usize * entry_words(ncols) * 4
}

fn fresh_nonce() -> u64 {
    ferrite_pm::rng::random_u64()
}

impl ElfStore {
    /// Marks the blocks of the current generation (the heap's recovery tracer).
    fn trace(pool: &Pool, id: ObjectId, m: &mut Marker<'_>) -> ferrite_pm::Result<()> {
        let d = pool.root(id, 0);
        if d == 0 {
            return Ok(());
        }
        let desc: Descriptor = read_struct(pool, d).map_err(|e| PmError::CorruptObject {
            object: "elf".into(),
            detail: e.to_string(),
        })?;
        if !desc.valid() {
            return Err(PmError::CorruptObject {
                object: "elf".into(),
                detail: format!("descriptor at {d:#x} fails its checksum"),
            });
        }
        m.mark(d)?;
        m.mark(desc.elf_off)?;
        m.mark(desc.delta_off)?;
        if desc.schema_off != 0 {
            m.mark(desc.schema_off)?;
        }
        Ok(())
    }

    fn open_object(pool: &Pool, name: &str, create: bool) -> Result<(ObjectId, Heap)> {
        let id = if create {
            pool.open_or_create_object(name, OBJECT_TYPE)?.0
        } else {
            match pool.object(name, OBJECT_TYPE) {
                Ok(id) => id,
                Err(PmError::NoSuchObject(_)) => return Err(ElfError::NoElf(name.into())),
                Err(e) => return Err(e.into()),
            }
        };
        let (heap, _) = pool.open_heap(id, |m| Self::trace(pool, id, m))?;
        Ok((id, heap))
    }

    /// Builds `cols` into the object `name` (creating it; replacing the Elf it
    /// held, atomically) and opens it as `variant`.
    pub fn create(
        pool: &Pool,
        name: &str,
        built: &Built,
        schema: Option<&Schema>,
        opts: &CreateOptions,
        variant: Variant,
    ) -> Result<ElfStore> {
        let (id, heap) = Self::open_object(pool, name, true)?;
        let old = pool.root(id, 0);
        let (generation, nonce, old_blocks) = if old != 0 {
            let d: Descriptor = read_struct(pool, old)?;
            (
                d.generation + 1,
                d.nonce,
                Some(GenBlocks {
                    heap: heap.clone(),
                    desc_off: old,
                    elf_off: d.elf_off,
                    delta_off: d.delta_off,
                    schema_off: d.schema_off,
                    retired: AtomicBool::new(false),
                    free_schema: AtomicBool::new(true),
                }),
            )
        } else {
            (1, opts.nonce.unwrap_or_else(fresh_nonce), None)
        };
        let schema_off = match schema {
            Some(s) => write_schema(pool, &heap, s)?,
            None => 0,
        };
        let cap = opts.delta_capacity.max(1);
        let g = publish(
            pool,
            &heap,
            id,
            generation,
            nonce,
            built,
            schema_off,
            &[],
            cap,
        )?;
        if let Some(b) = old_blocks {
            b.retired.store(true, Ordering::Release);
            drop(b);
        }
        let gen = Self::load_generation(pool, &heap, g, variant, false)?;
        Ok(ElfStore {
            pool: pool.clone(),
            heap,
            id,
            variant,
            schema: schema.cloned(),
            cur: RwLock::new(Arc::new(gen)),
            append: Mutex::new(()),
            merging: Mutex::new(()),
        })
    }

    /// Opens the Elf `name` without rebuilding; `check_crc` verifies the word
    /// array's checksum (one pass over it).
    pub fn open(pool: &Pool, name: &str, variant: Variant, check_crc: bool) -> Result<ElfStore> {
        let (id, heap) = Self::open_object(pool, name, false)?;
        let d = pool.root(id, 0);
        if d == 0 {
            return Err(ElfError::NoElf(name.into()));
        }
        let gen = Self::load_generation(pool, &heap, d, variant, check_crc)?;
        let desc: Descriptor = read_struct(pool, d)?;
        let schema = if desc.schema_off != 0 {
            Some(read_schema(pool, desc.schema_off)?)
        } else {
            None
        };
        Ok(ElfStore {
            pool: pool.clone(),
            heap,
            id,
            variant,
            schema,
            cur: RwLock::new(Arc::new(gen)),
            append: Mutex::new(()),
            merging: Mutex::new(()),
        })
    }

    fn load_generation(
        pool: &Pool,
        heap: &Heap,
        desc_off: u64,
        variant: Variant,
        check_crc: bool,
    ) -> Result<Generation> {
        let desc: Descriptor = read_struct(pool, desc_off)?;
        if !desc.valid() || desc.version != FORMAT_VERSION {
            return Err(ElfError::Corrupt(format!(
                "descriptor at {desc_off:#x} is invalid or of another version"
            )));
        }
        let h: ElfHeader = read_struct(pool, desc.elf_off)?;
        if !h.valid() || h.version != FORMAT_VERSION {
            return Err(ElfError::Corrupt("Elf header fails its checksum".into()));
        }
        let n = h.ncols as usize;
        if n == 0 || n > MAX_COLS || h.words > MAX_WORDS || h.nrows > MAX_ROWS {
            return Err(ElfError::Corrupt(
                "Elf header holds impossible sizes".into(),
            ));
        }
        let wbytes = h.words as usize * 4;
        let woff = desc.elf_off + HEADER_BYTES as u64;
        if !pool.contains(woff, wbytes) {
            return Err(ElfError::Corrupt("Elf words beyond the pool".into()));
        }
        let meta = Meta {
            ncols: n,
            nrows: h.nrows,
            root_kind: h.root_kind,
            root_off: h.root_off,
            card0: h.card0,
        };
        let ok_root = match h.root_kind {
            root_kind::EMPTY => true,
            root_kind::DENSE => (h.root_off as u64 + h.card0 as u64) <= h.words,
            root_kind::LIST => (h.root_off as u64) < h.words,
            _ => false,
        };
        if !ok_root || (h.words as usize) < n {
            return Err(ElfError::Corrupt("Elf root outside its words".into()));
        }
        let ptr = pool.at(woff, wbytes.max(1)) as *const u32;
        if check_crc {
            // SAFETY: woff..woff+wbytes is inside the pool (checked) and 4-aligned.
            let w = unsafe { std::slice::from_raw_parts(ptr, h.words as usize) };
            if words_crc(w) != h.words_crc {
                return Err(ElfError::Corrupt("Elf words fail their checksum".into()));
            }
        }
        // Delta.
        let dh: DeltaHeader = read_struct(pool, desc.delta_off)?;
        if !dh.valid() || dh.ncols as usize != n || dh.generation != desc.generation {
            return Err(ElfError::Corrupt("delta header is invalid".into()));
        }
        if !pool.contains(desc.delta_off, delta_bytes(n, dh.capacity)) {
            return Err(ElfError::Corrupt("delta beyond the pool".into()));
        }
        let mut delta = Vec::new();
        let ew = entry_words(n);
        let base = pool.at(
            desc.delta_off + HEADER_BYTES as u64,
            dh.capacity as usize * ew * 4,
        ) as *const u32;
        for i in 0..dh.capacity as usize {
            // SAFETY: entry i lies inside the delta block (bounds checked above).
            let e = unsafe { std::slice::from_raw_parts(base.add(i * ew), ew) };
            let vals = &e[..n];
            if e[n] != delta_entry_crc(desc.nonce, desc.generation, i as u64, vals) {
                break;
            }
            delta.extend_from_slice(vals);
        }
        let blocks = Arc::new(GenBlocks {
            heap: heap.clone(),
            desc_off,
            elf_off: desc.elf_off,
            delta_off: desc.delta_off,
            schema_off: desc.schema_off,
            retired: AtomicBool::new(false),
            free_schema: AtomicBool::new(false),
        });
        let data = Arc::new(ElfData {
            meta,
            words: Words::Pm {
                ptr,
                len: h.words as usize,
                keep: blocks.clone(),
            },
        });
        let elf = Elf::new(data, variant)?;
        Ok(Generation {
            generation: desc.generation,
            elf,
            delta: RwLock::new(delta),
            delta_cap: dh.capacity,
            nonce: desc.nonce,
            blocks,
        })
    }

    pub fn pool(&self) -> &Pool {
        &self.pool
    }

    /// The object's heap (tests account for every block with it).
    pub fn heap(&self) -> &Heap {
        &self.heap
    }

    /// (offset, block size) of every block the current generation uses.
    pub fn live_blocks(&self) -> Vec<(u64, u64)> {
        let g = self.current();
        let b = &g.blocks;
        let mut v = vec![b.desc_off, b.elf_off, b.delta_off];
        if b.schema_off != 0 {
            v.push(b.schema_off);
        }
        v.into_iter()
            .map(|o| (o, self.heap.block_size(o).unwrap_or(0) as u64))
            .collect()
    }

    pub fn schema(&self) -> Option<&Schema> {
        self.schema.as_ref()
    }

    /// The current generation (queries on it see a consistent snapshot).
    pub fn current(&self) -> Arc<Generation> {
        self.cur.read().unwrap_or_else(|e| e.into_inner()).clone()
    }

    pub fn ncols(&self) -> usize {
        self.current().elf.ncols()
    }

    /// Rows in the Elf plus the delta.
    pub fn rows(&self) -> u64 {
        let g = self.current();
        g.base_rows() + g.delta_rows()
    }

    /// Calls `f` for every matching TID: the Elf's, then the delta's.
    pub fn query(&self, q: &Query, mut f: impl FnMut(u32)) -> Result<()> {
        let g = self.current();
        g.elf.query(q, &mut f)?;
        scan_delta(&g, q, &mut f);
        Ok(())
    }

    /// Matching TIDs (Elf part in parallel when the estimate is large).
    pub fn collect(&self, q: &Query, threads: usize) -> Result<Vec<u32>> {
        let g = self.current();
        let mut v = g.elf.collect_auto(q, threads)?;
        scan_delta(&g, q, &mut |t| v.push(t));
        Ok(v)
    }

    /// Number of matching rows.
    pub fn count(&self, q: &Query, threads: usize) -> Result<u64> {
        let g = self.current();
        let mut n = g.elf.count_auto(q, threads)?;
        scan_delta(&g, q, &mut |_| n += 1);
        Ok(n)
    }

    /// Appends a row to the delta (one persist barrier) and returns its TID;
    /// merges first when the delta is full.
    pub fn insert(&self, row: &[u32]) -> Result<u32> {
        loop {
            {
                let _a = self.append.lock().unwrap_or_else(|e| e.into_inner());
                let g = self.current();
                let n = g.elf.ncols();
                if row.len() != n {
                    return Err(ElfError::InvalidTable(format!(
                        "row has {} values, the Elf {n} columns",
                        row.len()
                    )));
                }
                if let Some(v) = row.iter().find(|&&v| v > MAX_VALUE) {
                    return Err(ElfError::InvalidTable(format!("value {v} exceeds 2^31-1")));
                }
                let i = g.delta_rows();
                let tid = g.base_rows() + i;
                if tid >= MAX_ROWS {
                    return Err(ElfError::TooLarge("the Elf holds 2^31-1 rows".into()));
                }
                if i < g.delta_cap {
                    let ew = entry_words(n);
                    let mut e = Vec::with_capacity(ew);
                    e.extend_from_slice(row);
                    e.push(delta_entry_crc(g.nonce, g.generation, i, row));
                    let off = g.blocks.delta_off + HEADER_BYTES as u64 + i * ew as u64 * 4;
                    let p = self.pool.at(off, ew * 4);
                    // SAFETY: entry i is inside the delta block (i < capacity) and
                    // only this thread (holding `append`) writes it.
                    unsafe { std::ptr::copy_nonoverlapping(e.as_ptr(), p as *mut u32, ew) };
                    self.pool.persist(p, ew * 4)?;
                    g.delta
                        .write()
                        .unwrap_or_else(|e| e.into_inner())
                        .extend_from_slice(row);
                    return Ok(tid as u32);
                }
            }
            self.merge()?;
        }
    }

    /// Builds the next generation from the Elf and the delta rows present now and
    /// publishes it atomically; rows inserted meanwhile move to the new delta.
    pub fn merge(&self) -> Result<()> {
        let _m = self.merging.lock().unwrap_or_else(|e| e.into_inner());
        let (g, k) = {
            let _a = self.append.lock().unwrap_or_else(|e| e.into_inner());
            let g = self.current();
            let k = g.delta_rows();
            (g, k)
        };
        if k == 0 {
            return Ok(());
        }
        let n = g.elf.ncols();
        let total = g.base_rows() as usize + k as usize;
        let mut cols: Vec<Vec<u32>> = (0..n).map(|_| Vec::with_capacity(total)).collect();
        let mut tids = Vec::with_capacity(total);
        g.elf.for_each_row(|vals, t| {
            for (c, &v) in cols.iter_mut().zip(vals) {
                c.push(v);
            }
            tids.push(t);
        })?;
        {
            let d = g.delta.read().unwrap_or_else(|e| e.into_inner());
            for i in 0..k as usize {
                for (c, col) in cols.iter_mut().enumerate() {
                    col.push(d[i * n + c]);
                }
                tids.push((g.base_rows() + i as u64) as u32);
            }
        }
        let slices: Vec<&[u32]> = cols.iter().map(Vec::as_slice).collect();
        let built = build_with_tids(&slices, Some(&tids))?;
        drop(cols);
        let _a = self.append.lock().unwrap_or_else(|e| e.into_inner());
        let g2 = self.current();
        if g2.generation != g.generation {
            return Err(ElfError::Corrupt(
                "generation changed during a merge".into(),
            ));
        }
        let rest: Vec<u32> = {
            let d = g2.delta.read().unwrap_or_else(|e| e.into_inner());
            d[k as usize * n..].to_vec()
        };
        let d = publish(
            &self.pool,
            &self.heap,
            self.id,
            g.generation + 1,
            g.nonce,
            &built,
            g.blocks.schema_off,
            &rest,
            g.delta_cap,
        )?;
        let next = Self::load_generation(&self.pool, &self.heap, d, self.variant, false)?;
        g.blocks.retired.store(true, Ordering::Release);
        *self.cur.write().unwrap_or_else(|e| e.into_inner()) = Arc::new(next);
        Ok(())
    }

    /// Runs [`ElfStore::merge`] on a background thread; queries and inserts go on
    /// meanwhile.
    pub fn start_merge(self: &Arc<Self>) -> std::thread::JoinHandle<Result<()>> {
        let s = self.clone();
        std::thread::spawn(move || s.merge())
    }
}

fn scan_delta(g: &Generation, q: &Query, f: &mut dyn FnMut(u32)) {
    let n = g.elf.ncols();
    let d = g.delta.read().unwrap_or_else(|e| e.into_inner());
    let base = g.base_rows() as u32;
    for (i, row) in d.chunks_exact(n).enumerate() {
        if q.matches(row) {
            f(base + i as u32);
        }
    }
}

fn write_schema(pool: &Pool, heap: &Heap, s: &Schema) -> Result<u64> {
    let body = s.to_bytes();
    let h = SchemaHeader {
        magic: SCHEMA_MAGIC,
        len: body.len() as u64,
        crc: crc(&body) as u64,
        _pad: [0; 5],
    };
    let off = heap.alloc(HEADER_BYTES + body.len())?;
    let p = pool.at(off, HEADER_BYTES + body.len());
    pool.nt_copy(p, bytes_of(&h));
    // SAFETY: p + 64 is inside the block just allocated.
    pool.nt_copy(unsafe { p.add(HEADER_BYTES) }, &body);
    // Made durable by the fence of the publication that follows.
    Ok(off)
}

fn read_schema(pool: &Pool, off: u64) -> Result<Schema> {
    let h: SchemaHeader = read_struct(pool, off)?;
    if h.magic != SCHEMA_MAGIC || !pool.contains(off + HEADER_BYTES as u64, h.len as usize) {
        return Err(ElfError::Corrupt("schema header is invalid".into()));
    }
    let p = pool.at(off + HEADER_BYTES as u64, h.len as usize);
    // SAFETY: in bounds (checked above); the block is immutable once published.
    let body = unsafe { std::slice::from_raw_parts(p, h.len as usize) };
    if crc(body) as u64 != h.crc {
        return Err(ElfError::Corrupt("schema fails its checksum".into()));
    }
    Schema::from_bytes(body)
}

/// Writes generation `generation` (Elf block, delta block holding `delta_rows`)
/// and publishes it through a new descriptor; returns the descriptor's offset.
/// Barriers: the delta's zeroing, one for all contents, one for the descriptor,
/// one for the root word.
#[allow(clippy::too_many_arguments)]
fn publish(
    pool: &Pool,
    heap: &Heap,
    id: ObjectId,
    generation: u64,
    nonce: u64,
    built: &Built,
    schema_off: u64,
    delta_rows: &[u32],
    cap: u64,
) -> Result<u64> {
    let n = built.meta.ncols;
    let words = &built.words;
    let ebytes = HEADER_BYTES + words.len() * 4;
    let dbytes = delta_bytes(n, cap);
    let delta_off = heap.alloc_zeroed(dbytes).map_err(pm_err)?;
    let elf_off = match heap.alloc(ebytes) {
        Ok(o) => o,
        Err(e) => {
            let _ = heap.free(delta_off);
            return Err(e.into());
        }
    };
    let m = built.meta;
    let h = ElfHeader {
        magic: ELF_MAGIC,
        version: FORMAT_VERSION,
        ncols: n as u32,
        nrows: m.nrows,
        words: words.len() as u64,
        root_kind: m.root_kind,
        root_off: m.root_off,
        card0: m.card0,
        _pad: 0,
        words_crc: words_crc(words),
        _pad2: 0,
        header_crc: 0,
    }
    .seal();
    let p = pool.at(elf_off, ebytes);
    pool.nt_copy(p, bytes_of(&h));
    // SAFETY: p + 64 .. p + ebytes is inside the block just allocated.
    pool.nt_copy(unsafe { p.add(HEADER_BYTES) }, as_bytes(words));
    let dh = DeltaHeader {
        magic: DELTA_MAGIC,
        version: FORMAT_VERSION,
        ncols: n as u32,
        generation,
        capacity: cap,
        base_rows: m.nrows,
        nonce,
        _pad: 0,
        crc: 0,
    }
    .seal();
    let dp = pool.at(delta_off, dbytes);
    pool.nt_copy(dp, bytes_of(&dh));
    let ew = entry_words(n);
    let mut ents: Vec<u32> = Vec::with_capacity(delta_rows.len() / n.max(1) * ew);
    for (i, row) in delta_rows.chunks_exact(n).enumerate() {
        ents.extend_from_slice(row);
        ents.push(delta_entry_crc(nonce, generation, i as u64, row));
    }
    if !ents.is_empty() {
        // SAFETY: the entries fit: delta_rows holds at most `cap` rows.
        pool.nt_copy(unsafe { dp.add(HEADER_BYTES) }, as_bytes(&ents));
    }
    pool.fence()?;
    let desc_off = heap.alloc(HEADER_BYTES)?;
    let d = Descriptor {
        magic: DESC_MAGIC,
        version: FORMAT_VERSION,
        _pad: 0,
        generation,
        elf_off,
        schema_off,
        delta_off,
        nonce,
        crc: 0,
    }
    .seal();
    let dp = pool.at(desc_off, HEADER_BYTES);
    // SAFETY: a fresh 64-byte block.
    unsafe { std::ptr::copy_nonoverlapping(bytes_of(&d).as_ptr(), dp, HEADER_BYTES) };
    if ferrite_pm::tripwire::armed(ferrite_pm::tripwire::Tripwire::ElfPublishBeforeFence) {
        pool.set_root(id, 0, desc_off)?;
    }
    pool.persist(dp, HEADER_BYTES)?;
    pool.set_root(id, 0, desc_off)?;
    Ok(desc_off)
}
