//! The chunk table: which object owns each chunk of the heap, claimed with one
//! barrier per claim; validated (and interrupted claims cleaned up) at open.

use std::collections::BTreeSet;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};

use crate::error::{PmError, Result};
use crate::layout::{self, chunk_kind, ChunkEntry};

use super::header::bad;
use super::mapping::{reserve, Backing};
use super::{ObjectId, OpenReport, Pool};

impl Pool {
    pub(crate) fn chunk_word(&self, i: usize) -> &AtomicU64 {
        assert!(i < self.inner.header.chunk_count as usize);
        let off = self.inner.header.chunk_table_off as usize + i * 8;
        // SAFETY: the chunk table lies inside the pool; entries are 8-byte aligned.
        unsafe { &*(self.inner.base.add(off) as *const AtomicU64) }
    }

    pub(crate) fn chunk_entry(&self, i: usize) -> ChunkEntry {
        ChunkEntry::decode(self.chunk_word(i).load(Ordering::Acquire))
    }

    /// Offset of chunk `i`'s first byte.
    pub(crate) fn chunk_off(&self, i: usize) -> u64 {
        self.inner.header.heap_off + i as u64 * self.inner.header.chunk_size
    }

    /// Chunk index holding pool offset `off`, if it is in the heap.
    pub(crate) fn chunk_of(&self, off: u64) -> Option<usize> {
        let h = &self.inner.header;
        if off < h.heap_off {
            return None;
        }
        let i = (off - h.heap_off) / h.chunk_size;
        (i < h.chunk_count).then_some(i as usize)
    }

    /// Claims `run` contiguous free chunks for `owner` and persists the claim.
    pub(crate) fn claim_chunks(
        &self,
        owner: u16,
        class: u8,
        run: usize,
        size_hint: usize,
    ) -> Result<usize> {
        self.writable()?;
        let mut free = self.inner.free_chunks.lock().unwrap();
        let start = if run == 1 {
            free.iter().next().copied()
        } else {
            let mut found = None;
            let mut cur_start = u32::MAX;
            let mut cur_len = 0usize;
            for &c in free.iter() {
                if cur_len > 0 && c == cur_start + cur_len as u32 {
                    cur_len += 1;
                } else {
                    cur_start = c;
                    cur_len = 1;
                }
                if cur_len == run {
                    found = Some(cur_start);
                    break;
                }
            }
            found
        };
        let Some(start) = start else {
            let total = self.inner.header.chunk_count * self.inner.header.chunk_size;
            let used =
                (self.inner.header.chunk_count - free.len() as u64) * self.inner.header.chunk_size;
            return Err(PmError::PoolFull {
                requested: size_hint,
                used,
                total,
            });
        };
        let start = start as usize;
        for k in 0..run {
            free.remove(&((start + k) as u32));
        }
        drop(free);
        if let Err(e) = self.reserve_chunks(start, run) {
            let mut free = self.inner.free_chunks.lock().unwrap();
            free.extend((start..start + run).map(|c| c as u32));
            return Err(e);
        }
        let e = if run == 1 && class != u8::MAX {
            ChunkEntry {
                kind: chunk_kind::SMALL,
                class,
                owner,
                run: 0,
            }
        } else {
            ChunkEntry {
                kind: chunk_kind::LARGE_HEAD,
                class: 0,
                owner,
                run: run as u32,
            }
        };
        for k in 1..run {
            let tail = ChunkEntry {
                kind: chunk_kind::LARGE_TAIL,
                class: 0,
                owner,
                run: 0,
            };
            self.chunk_word(start + k)
                .store(tail.encode(), Ordering::Release);
        }
        self.chunk_word(start).store(e.encode(), Ordering::Release);
        self.flush(
            self.chunk_word(start) as *const AtomicU64 as *const u8,
            run * 8,
        );
        self.fence()?;
        Ok(start)
    }

    /// Gives chunks `start..start + run` their file blocks unless they are
    /// known to have them (see `mapping::reserve`): a full filesystem fails
    /// the claim instead of a later store.
    pub(super) fn reserve_chunks(&self, start: usize, run: usize) -> Result<()> {
        let Backing::Mmap { _file: file, .. } = &self.inner.backing else {
            return Ok(());
        };
        let bits = &self.inner.reserved;
        let has = |c: usize| bits[c / 64].load(Ordering::Relaxed) >> (c % 64) & 1 == 1;
        if (start..start + run).all(has) {
            return Ok(());
        }
        let path = self.inner.path.as_deref().unwrap_or(Path::new("pool"));
        let size = self.inner.header.chunk_size;
        reserve(file, path, self.chunk_off(start), run as u64 * size)?;
        for c in start..start + run {
            bits[c / 64].fetch_or(1 << (c % 64), Ordering::Relaxed);
        }
        Ok(())
    }

    /// Returns chunks to the pool. No fence: if the release is lost in a crash,
    /// the chunks are unreachable and the next heap open frees them again.
    pub(crate) fn release_chunks(&self, start: usize, run: usize) {
        for k in (0..run).rev() {
            self.chunk_word(start + k).store(0, Ordering::Release);
        }
        self.flush(
            self.chunk_word(start) as *const AtomicU64 as *const u8,
            run * 8,
        );
        let mut free = self.inner.free_chunks.lock().unwrap();
        for k in 0..run {
            free.insert((start + k) as u32);
        }
    }

    /// Chunk usage: `(total, free)` chunk counts.
    pub fn chunk_usage(&self) -> (u64, u64) {
        (
            self.inner.header.chunk_count,
            self.inner.free_chunks.lock().unwrap().len() as u64,
        )
    }

    /// Chunks owned by each object, by directory index.
    pub fn chunks_by_owner(&self) -> Vec<(ObjectId, u64)> {
        let mut counts = vec![0u64; layout::DIR_ENTRIES + 1];
        for c in 0..self.inner.header.chunk_count as usize {
            let e = self.chunk_entry(c);
            if e.kind != chunk_kind::FREE && (e.owner as usize) <= layout::DIR_ENTRIES {
                counts[e.owner as usize] += 1;
            }
        }
        counts
            .iter()
            .enumerate()
            .skip(1)
            .filter(|(_, &n)| n > 0)
            .map(|(i, &n)| (ObjectId(i as u16), n))
            .collect()
    }

    /// Validates the chunk table against the directory (`valid`: which entries
    /// hold an object) and, unless read-only, frees chunks of interrupted claims
    /// and of deleted objects. Returns the free chunks and what was found.
    pub(super) fn scan_chunk_table(
        &self,
        valid: &[bool; layout::DIR_ENTRIES],
    ) -> Result<(BTreeSet<u32>, OpenReport)> {
        let h = self.inner.header;
        let n = h.chunk_count as usize;
        // Collected in ascending order and built in bulk at the end (inserting
        // a 4 GiB pool's 65,536 free chunks one by one took 1.3 ms of every
        // open).
        let mut free = Vec::new();
        let mut report = OpenReport::default();
        let mut release = Vec::new();
        let mut i = 0;
        while i < n {
            let e = ChunkEntry::decode(self.chunk_word(i).load(Ordering::Acquire));
            let owner_ok = e.owner >= 1
                && (e.owner as usize) <= layout::DIR_ENTRIES
                && valid[e.owner as usize - 1];
            match e.kind {
                chunk_kind::FREE => {
                    if e != ChunkEntry::FREE {
                        return Err(bad(format!("chunk table entry {i} is invalid")));
                    }
                    free.push(i as u32);
                }
                chunk_kind::SMALL => {
                    if e.class as usize >= layout::SIZE_CLASSES.len()
                        || layout::SIZE_CLASSES[e.class as usize] as u64 > h.chunk_size / 4
                    {
                        return Err(bad(format!(
                            "chunk table entry {i} has an invalid size class"
                        )));
                    }
                    if !owner_ok {
                        report.orphan_chunks += 1;
                        release.push((i, 1));
                    }
                }
                chunk_kind::LARGE_HEAD => {
                    let run = e.run as usize;
                    let complete = run >= 1
                        && i + run <= n
                        && (1..run).all(|k| {
                            let t =
                                ChunkEntry::decode(self.chunk_word(i + k).load(Ordering::Acquire));
                            t.kind == chunk_kind::LARGE_TAIL && t.owner == e.owner
                        });
                    if !complete {
                        // A crash before the run's claim was fenced: no one can
                        // reference it yet. Free the head; its tails are freed below.
                        report.torn_runs += 1;
                        release.push((i, 1));
                    } else {
                        if !owner_ok {
                            report.orphan_chunks += run as u64;
                            release.push((i, run));
                        }
                        i += run;
                        continue;
                    }
                }
                chunk_kind::LARGE_TAIL => {
                    // A tail not covered by a complete head (complete runs are
                    // skipped above): left by an interrupted claim.
                    report.torn_runs += 1;
                    release.push((i, 1));
                }
                _ => return Err(bad(format!("chunk table entry {i} has an invalid kind"))),
            }
            i += 1;
        }
        if !self.inner.read_only {
            for &(start, len) in &release {
                for k in start..start + len {
                    self.chunk_word(k).store(0, Ordering::Release);
                    free.push(k as u32);
                }
                let w = self.chunk_word(start) as *const AtomicU64 as *const u8;
                self.flush(w, len * 8);
            }
            if !release.is_empty() {
                self.fence()?;
            }
        }
        // Sorted but for released chunks; `from_iter` sorts (a pass over
        // sorted input) and builds the set in bulk.
        Ok((free.into_iter().collect(), report))
    }
}
