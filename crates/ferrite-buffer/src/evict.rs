//! Replacement (thesis §4.2, Fig. 6): clock in DRAM and in PM, the admission
//! decision, and writing pages back to the tier below. Evictors take latches
//! with try-locks only, so they never wait for an operation.

use std::sync::atomic::Ordering;

use ferrite_pm::AlignedBuf;

use crate::access::is_mini;
use crate::config::LINE;
use ferrite_pm::tripwire::{armed, Tripwire};

use crate::error::{BufferError, Result};
use crate::frame::{Fid, NO_FRAME, NO_PARENT, RESIDENT};
use crate::manager::BufferManager;
use crate::pm::NO_PAGE;
use crate::ssd::SsdTier;
use crate::swip::{Swip, SWIZZLED};
use crate::table::Entry;

/// How many clock steps ahead of the hand descriptors are prefetched.
const CLOCK_AHEAD: usize = 8;

/// Rounds of a full sweep without a victim before giving up.
const IDLE_ROUNDS: usize = 200;

impl BufferManager {
    /// A free DRAM frame of the kind, latched exclusive, evicting as needed.
    pub(crate) fn alloc_dram(&self, mini: bool) -> Result<Fid> {
        let dram = self.dram();
        let mut idle = 0;
        loop {
            if let Some(f) = dram.alloc(mini) {
                return Ok(f);
            }
            if !self.cfg.evict_dram {
                return Err(BufferError::CapacityExceeded(format!(
                    "the DRAM budget of {} bytes is full and the {} design does not evict",
                    self.cfg.dram_bytes,
                    self.cfg.design.name()
                )));
            }
            if self.evict_dram_one()? {
                idle = 0;
                continue;
            }
            idle += 1;
            if idle > IDLE_ROUNDS {
                return Err(BufferError::BufferFull(self.dram_census()));
            }
            std::thread::yield_now();
        }
    }

    /// Evicts one DRAM frame chosen by the clock; false when a sweep found none.
    fn evict_dram_one(&self) -> Result<bool> {
        let dram = self.dram();
        let n = dram.slots();
        for _ in 0..2 * n {
            let hand = dram.hand.fetch_add(1, Ordering::Relaxed);
            // The descriptors the hand reaches next start loading now: most
            // steps only read a descriptor and move on, so their misses
            // overlap instead of following one another.
            dram.prefetch(dram.at_slot(hand.wrapping_add(CLOCK_AHEAD) % n), 0);
            let fid = dram.at_slot(hand % n);
            let c = dram.common(fid);
            if c.state.load(Ordering::Acquire) != RESIDENT
                || c.pinned.load(Ordering::Relaxed)
                || c.children.load(Ordering::Acquire) > 0
            {
                continue;
            }
            if c.refbit.swap(false, Ordering::Relaxed) {
                continue;
            }
            if !c.latch.try_lock_exclusive() {
                continue;
            }
            let pid = c.pid.load(Ordering::Acquire);
            if c.state.load(Ordering::Acquire) != RESIDENT
                || c.pinned.load(Ordering::Relaxed)
                || c.children.load(Ordering::Acquire) > 0
            {
                // SAFETY: locked above.
                unsafe { c.latch.unlock_exclusive() };
                continue;
            }
            // A swizzled victim: its parent is latched shared (operations that
            // descend through it hold it shared too; writers of the parent's
            // bytes hold it exclusive and are excluded), and the swip is
            // unswizzled with a compare-and-swap after the write-back.
            let parent = if c.swizzled.load(Ordering::Acquire) {
                let code = c.parent.load(Ordering::Acquire);
                let (pf, off) = ((code >> 32) as u32, (code & 0xffff_ffff) as usize);
                if code == NO_PARENT || !dram.valid(pf) || is_mini(pf) {
                    // SAFETY: locked above.
                    unsafe { c.latch.unlock_exclusive() };
                    continue;
                }
                let pc = dram.common(pf);
                // A parent this thread holds exclusive (a structure change
                // that needs a frame) is ours to unswizzle in.
                let own = crate::latch::holds_exclusive(pf);
                if !own && !pc.latch.try_lock_shared() {
                    // SAFETY: locked above.
                    unsafe { c.latch.unlock_exclusive() };
                    continue;
                }
                // SAFETY: the parent's buffer is a page that is never freed; off
                // is the 8-aligned offset of the swip this frame was swizzled
                // through (a stale one fails the compare-and-swap below).
                let w = unsafe { &*(dram.buf(pf).add(off) as *const std::sync::atomic::AtomicU64) };
                if pc.state.load(Ordering::Acquire) != RESIDENT
                    || off + 8 > self.cfg.page_size
                    || w.load(Ordering::Acquire) != SWIZZLED | fid as u64
                {
                    // SAFETY: both locked above (the parent unless ours).
                    unsafe {
                        if !own {
                            pc.latch.unlock_shared();
                        }
                        c.latch.unlock_exclusive();
                    }
                    continue;
                }
                Some((pf, w, own))
            } else {
                None
            };
            if let Err(e) = self.write_back(fid, pid, true) {
                // SAFETY: locked above.
                unsafe {
                    if let Some((pf, _, false)) = parent {
                        dram.common(pf).latch.unlock_shared();
                    }
                    c.latch.unlock_exclusive();
                }
                return Err(e);
            }
            if let Some((pf, w, own)) = parent {
                let pc = dram.common(pf);
                if w.compare_exchange(
                    SWIZZLED | fid as u64,
                    pid,
                    Ordering::AcqRel,
                    Ordering::Acquire,
                )
                .is_ok()
                {
                    pc.children.fetch_sub(1, Ordering::AcqRel);
                    self.counters.unswizzles.fetch_add(1, Ordering::Relaxed);
                }
                c.swizzled.store(false, Ordering::Release);
                c.parent.store(NO_PARENT, Ordering::Release);
                if !own {
                    // SAFETY: locked above.
                    unsafe { pc.latch.unlock_shared() };
                }
            }
            dram.counters.evictions.fetch_add(1, Ordering::Relaxed);
            dram.release(fid);
            return Ok(true);
        }
        Ok(false)
    }

    /// Why no DRAM frame could be evicted, in numbers.
    fn dram_census(&self) -> String {
        let dram = self.dram();
        let (mut resident, mut pinned, mut parents, mut latched) = (0, 0, 0, 0);
        let mut swz = Vec::new();
        for i in 0..dram.slots() {
            let c = dram.common(dram.at_slot(i));
            if c.state.load(Ordering::Acquire) != RESIDENT {
                continue;
            }
            resident += 1;
            if c.pinned.load(Ordering::Relaxed) {
                pinned += 1;
            } else if c.children.load(Ordering::Relaxed) > 0 {
                parents += 1;
            } else if c.latch.try_lock_exclusive() {
                // SAFETY: locked just now.
                unsafe { c.latch.unlock_exclusive() };
                if c.swizzled.load(Ordering::Relaxed) {
                    let code = c.parent.load(Ordering::Relaxed);
                    swz.push((
                        c.pid.load(Ordering::Relaxed),
                        code >> 32,
                        code & 0xffff_ffff,
                    ));
                }
            } else {
                latched += 1;
            }
        }
        format!(
            "{resident} of {} DRAM frames resident ({} bytes of {}): {pinned} pinned, {parents} parents of swizzled pages, {latched} latched, swizzled (pid, parent frame, offset): {swz:?}; the budget is too small for the tree's height and the threads",
            dram.slots(),
            dram.used.load(Ordering::Relaxed),
            dram.budget
        )
    }

    /// Frame `fid` as a whole page for writing to PM: the DRAM buffer
    /// itself when it already is one (a full frame without swizzled
    /// children), else [`BufferManager::frame_image`]'s copy. Saves a page
    /// copy (16 KiB by default) and its allocation on every write-back of a
    /// leaf. The caller holds the frame's latch until it drops the image.
    fn page_for_pm(&self, fid: Fid) -> Result<PageImage<'_>> {
        let dram = self.dram();
        if !is_mini(fid) && dram.common(fid).children.load(Ordering::Acquire) == 0 {
            // SAFETY: a full frame's buffer is a whole page, and the caller's
            // latch keeps writers out while the slice lives.
            let page = unsafe { std::slice::from_raw_parts(dram.buf(fid), self.cfg.page_size) };
            return Ok(PageImage::InPlace(page));
        }
        Ok(PageImage::Copied(self.frame_image(fid)?))
    }

    /// A copy of frame `fid` as a whole page (unloaded lines of a partly
    /// resident frame are whatever the buffer holds; callers only use loaded
    /// lines), with swizzled swips written as page ids.
    pub(crate) fn frame_image(&self, fid: Fid) -> Result<AlignedBuf> {
        let dram = self.dram();
        let c = dram.common(fid);
        let ps = self.cfg.page_size;
        let mut img;
        if is_mini(fid) {
            img = AlignedBuf::zeroed(ps);
            // SAFETY: the caller holds the frame's latch.
            let st = unsafe { dram.mini_frame(fid).st() };
            for (p, &l) in st.slots[..st.count as usize].iter().enumerate() {
                // SAFETY: slot p of the mini buffer.
                let src = unsafe { std::slice::from_raw_parts(dram.buf(fid).add(p * LINE), LINE) };
                img.as_mut_slice()[l as usize * LINE..(l as usize + 1) * LINE].copy_from_slice(src);
            }
        } else {
            // SAFETY: the buffer is a page; the caller holds the latch.
            img = AlignedBuf::from_slice(unsafe { std::slice::from_raw_parts(dram.buf(fid), ps) });
            if c.children.load(Ordering::Acquire) > 0 {
                let kind = img.as_slice()[crate::page::OFF_KIND];
                let mut offs = Vec::new();
                self.registry.swips(kind, img.as_slice(), &mut offs);
                for o in offs {
                    if o % 8 != 0 || o + 8 > ps {
                        continue;
                    }
                    let b = &mut img.as_mut_slice()[o..o + 8];
                    let w = u64::from_le_bytes((&*b).try_into().expect("8"));
                    if let Swip::Frame(f) = Swip::decode(w) {
                        b.copy_from_slice(&self.frame_pid(f)?.to_le_bytes());
                    }
                }
            }
        }
        Ok(img)
    }

    /// The WAL rule: the log is durable up to the frame's last change.
    fn wal_rule(&self, lsn: u64) -> Result<()> {
        if armed(Tripwire::BufferSkipWalRule) {
            return Ok(());
        }
        self.wal.force(lsn)
    }

    /// Writes DRAM frame `fid` (latched exclusive, holding `pid`) back:
    /// dirty lines to its PM frame; or (eviction) admitted to PM or written to
    /// SSD; or (checkpoint) written to SSD. With `evict` the page table no
    /// longer maps the frame afterwards.
    pub(crate) fn write_back(&self, fid: Fid, pid: u64, evict: bool) -> Result<()> {
        let dram = self.dram();
        let c = dram.common(fid);
        let lsn = c.max_lsn.load(Ordering::Acquire);
        let lines = self.cfg.lines();
        // (dirty lines, all resident, newer than SSD)
        let (dirty, newer): (Vec<u16>, bool) = if is_mini(fid) {
            // SAFETY: latched exclusive by the caller.
            let st = unsafe { dram.mini_frame(fid).st() };
            let d = st.slots[..st.count as usize]
                .iter()
                .enumerate()
                .filter(|(p, _)| st.dirty >> p & 1 != 0)
                .map(|(_, &l)| l)
                .collect();
            (d, st.newer)
        } else {
            // SAFETY: as above.
            let st = unsafe { dram.full_frame(fid).st() };
            (st.dirty.iter().map(|l| l as u16).collect(), st.newer)
        };
        if let Some(pmf) = c.pm_frame() {
            if !dirty.is_empty() {
                self.wal_rule(lsn)?;
                let img = self.page_for_pm(fid)?;
                let write: Vec<u16> = if self.cfg.techniques.cache_line_grained || is_mini(fid) {
                    dirty
                } else {
                    // Page-grained: the whole page goes back (every line is resident).
                    (0..lines as u16).collect()
                };
                self.pm
                    .write_lines(pmf, img.as_slice(), &write, lsn, None, true)?;
                self.clear_dirty(fid, false);
            }
            self.pm.descs[pmf as usize]
                .refbit
                .store(true, Ordering::Relaxed);
            if evict {
                let mut s = self.table.shard(pid);
                let cur = s.get(pid);
                s.put(
                    pid,
                    Entry {
                        dram: NO_FRAME,
                        ..cur
                    },
                );
            }
            return Ok(());
        }
        let has_pm = self.pm.frames() > 0;
        // To PM when there is no SSD, or (eviction) when admitted.
        // To PM when there is no SSD, or (eviction) when admitted; a checkpoint
        // writes a page to PM when a PM frame is free (PM is faster than SSD
        // and the page then restarts from PM), else to SSD.
        let frame = if !has_pm {
            None
        } else if !evict && self.ssd.is_some() {
            self.pm.take_free()
        } else {
            let admit = match (&self.admission, &self.ssd) {
                (_, None) => true,
                (Some(a), Some(_)) => a.consider(pid),
                (None, Some(_)) => true,
            };
            if admit {
                // No PM frame can be freed (all back DRAM pages): the page goes
                // to SSD.
                match self.alloc_pm_frame() {
                    Ok(f) => Some(f),
                    Err(BufferError::BufferFull(_)) if self.ssd.is_some() => None,
                    Err(e) => return Err(e),
                }
            } else {
                None
            }
        };
        if let Some(f) = frame {
            let admitted = self
                .wal_rule(lsn)
                .and_then(|()| self.page_for_pm(fid))
                .and_then(|img| self.pm.admit(f, pid, img.as_slice(), lsn, newer));
            if let Err(e) = admitted {
                self.pm.put_free(f);
                return Err(e);
            }
            let mut s = self.table.shard(pid);
            if evict {
                s.put(
                    pid,
                    Entry {
                        dram: NO_FRAME,
                        pm: f,
                        evicting: false,
                    },
                );
            } else {
                s.put(
                    pid,
                    Entry {
                        dram: fid,
                        pm: f,
                        evicting: false,
                    },
                );
                c.pm.store(f, Ordering::Release);
                self.clear_dirty(fid, false);
            }
            return Ok(());
        }
        if newer {
            let Some(ssd) = &self.ssd else {
                return Err(BufferError::CapacityExceeded(format!(
                    "page {pid} must leave DRAM but there is neither a PM frame nor an SSD tier for it"
                )));
            };
            self.wal_rule(lsn)?;
            let mut img = self.frame_image(fid)?;
            ssd.write_page(pid, img.as_mut_slice(), lsn)?;
            self.clear_dirty(fid, true);
        }
        if evict {
            self.table.shard(pid).put(pid, Entry::NONE);
        }
        Ok(())
    }

    fn clear_dirty(&self, fid: Fid, ssd_written: bool) {
        let dram = self.dram();
        if is_mini(fid) {
            // SAFETY: latched exclusive by the caller.
            let st = unsafe { dram.mini_frame(fid).st() };
            st.dirty = 0;
        } else {
            // SAFETY: as above.
            let st = unsafe { dram.full_frame(fid).st() };
            st.dirty.clear();
            if ssd_written {
                st.newer = false;
            }
        }
    }

    /// A free PM frame, evicting a batch when there is none.
    pub(crate) fn alloc_pm_frame(&self) -> Result<u32> {
        let mut idle = 0;
        loop {
            if let Some(f) = self.pm.take_free() {
                return Ok(f);
            }
            if self.ssd.is_none() {
                return Err(BufferError::CapacityExceeded(format!(
                    "all {} PM frames hold pages and there is no SSD tier to evict to",
                    self.pm.frames()
                )));
            }
            if self.evict_pm_batch()? {
                idle = 0;
                continue;
            }
            idle += 1;
            if idle > IDLE_ROUNDS {
                return Err(BufferError::BufferFull(format!(
                    "none of the {} PM frames can be evicted (their pages are in DRAM)",
                    self.pm.frames()
                )));
            }
            std::thread::yield_now();
        }
    }

    /// Evicts up to a batch of PM frames (clock): pages newer than their SSD
    /// copy are written and synced first; only then are the frames cleared.
    fn evict_pm_batch(&self) -> Result<bool> {
        let n = self.pm.frames();
        let want = self.cfg.pm_eviction_batch.max(1);
        let mut batch: Vec<(u32, u64)> = Vec::new();
        for _ in 0..2 * n {
            if batch.len() >= want {
                break;
            }
            let f = (self.pm.hand.fetch_add(1, Ordering::Relaxed) % n) as u32;
            let d = &self.pm.descs[f as usize];
            let pid = d.pid.load(Ordering::Acquire);
            if pid == NO_PAGE {
                continue;
            }
            if d.refbit.swap(false, Ordering::Relaxed) {
                continue;
            }
            if !d.latch.try_lock_exclusive() {
                continue;
            }
            let ok = {
                let mut s = self.table.shard(pid);
                let e = s.get(pid);
                if e.pm == f && e.dram().is_none() && !e.evicting {
                    s.put(
                        pid,
                        Entry {
                            evicting: true,
                            ..e
                        },
                    );
                    true
                } else {
                    false
                }
            };
            if !ok {
                // SAFETY: locked above.
                unsafe { d.latch.unlock_exclusive() };
                continue;
            }
            batch.push((f, pid));
        }
        if batch.is_empty() {
            return Ok(false);
        }
        let r = self.evict_pm_write(&batch);
        if let Err(e) = r {
            for &(f, pid) in &batch {
                let mut s = self.table.shard(pid);
                let cur = s.get(pid);
                s.put(
                    pid,
                    Entry {
                        evicting: false,
                        ..cur
                    },
                );
                drop(s);
                // SAFETY: locked in the loop above.
                unsafe { self.pm.descs[f as usize].latch.unlock_exclusive() };
            }
            return Err(e);
        }
        for &(f, pid) in &batch {
            self.table.shard(pid).put(pid, Entry::NONE);
            // SAFETY: locked in the loop above.
            unsafe { self.pm.descs[f as usize].latch.unlock_exclusive() };
            self.pm.put_free(f);
        }
        self.pm
            .counters
            .evictions
            .fetch_add(batch.len() as u64, Ordering::Relaxed);
        Ok(true)
    }

    fn evict_pm_write(&self, batch: &[(u32, u64)]) -> Result<()> {
        let ssd = self.ssd.as_ref().expect("checked by the caller");
        let early = armed(Tripwire::BufferInvalidateBeforeSync);
        for &(f, pid) in batch {
            if self.pm.descs[f as usize].newer.load(Ordering::Relaxed) {
                // SAFETY: the frame is latched exclusive.
                unsafe { self.write_pm_frame_to_ssd(ssd, f, pid)? };
            }
            if early {
                self.pm.invalidate(f);
            }
        }
        if early {
            self.pm.fence()?;
        }
        ssd.sync()?;
        for &(f, _) in batch {
            self.pm.invalidate(f);
        }
        self.pm.fence()
    }

    /// Writes PM frame `f`'s page `pid` to SSD with the frame's LSN (not
    /// synced), counting the page's read from PM.
    ///
    /// # Safety
    ///
    /// Nothing may write the frame meanwhile: it is latched exclusive, or
    /// the gate is held exclusive.
    pub(crate) unsafe fn write_pm_frame_to_ssd(
        &self,
        ssd: &SsdTier,
        f: u32,
        pid: u64,
    ) -> Result<()> {
        let ps = self.cfg.page_size;
        self.pm.model_read(f, 0, ps / LINE - 1);
        // SAFETY: the caller keeps writers out; the frame's data is a whole
        // page.
        let mut img =
            AlignedBuf::from_slice(unsafe { std::slice::from_raw_parts(self.pm.data(f), ps) });
        let lsn = self.pm.hdr(f).lsn.load(Ordering::Acquire);
        ssd.write_page(pid, img.as_mut_slice(), lsn)
    }
}

/// A DRAM frame as a page: the frame's own buffer, or a copy with its
/// swizzled swips written as page ids.
enum PageImage<'a> {
    InPlace(&'a [u8]),
    Copied(AlignedBuf),
}

impl PageImage<'_> {
    fn as_slice(&self) -> &[u8] {
        match self {
            PageImage::InPlace(p) => p,
            PageImage::Copied(b) => b.as_slice(),
        }
    }
}
