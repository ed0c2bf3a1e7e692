//! Sharp checkpoints: with the gate held exclusively (no operation runs), force
//! the log, write every dirty DRAM page back (to its PM frame, or to SSD),
//! `fdatasync` the page files, then switch to the other log, which starts with
//! a checkpoint record carrying the undo lists of running transactions. The
//! old log's space is reused by the next checkpoint.

use std::sync::atomic::Ordering;

use crate::access::is_mini;
use ferrite_pm::tripwire::{armed, Tripwire};

use crate::error::Result;
use crate::manager::BufferManager;
use crate::wal::record;

impl BufferManager {
    /// Runs a checkpoint (see the module docs).
    pub fn checkpoint(&self) -> Result<()> {
        let _one = self.ckpt_lock.lock().unwrap();
        let _gate = self.gate.write();
        self.checkpoint_locked()
    }

    pub(crate) fn checkpoint_locked(&self) -> Result<()> {
        self.wal.force_all()?;
        if let Some(dram) = &self.dram {
            for fid in dram.resident().collect::<Vec<_>>() {
                let c = dram.common(fid);
                c.latch.lock_exclusive();
                let r = if c.state.load(Ordering::Acquire) == crate::frame::RESIDENT
                    && self.frame_dirty(fid)
                {
                    self.write_back(fid, c.pid.load(Ordering::Acquire), false)
                } else {
                    Ok(())
                };
                // SAFETY: locked above.
                unsafe { c.latch.unlock_exclusive() };
                r?;
            }
        }
        if let Some(ssd) = &self.ssd {
            ssd.sync()?;
        }
        let next_txn = self.txns.next_id.load(Ordering::Acquire);
        let rec = record::checkpoint(next_txn, &self.txns.snapshot());
        self.wal.switch(rec)?;
        self.counters.checkpoints.fetch_add(1, Ordering::Relaxed);
        Ok(())
    }

    /// Whether a frame (latched) has changes its lower tier lacks.
    fn frame_dirty(&self, fid: crate::frame::Fid) -> bool {
        let dram = self.dram();
        if is_mini(fid) {
            // SAFETY: the caller holds the latch.
            unsafe { dram.mini_frame(fid).st() }.dirty != 0
        } else {
            // SAFETY: as above.
            let st = unsafe { dram.full_frame(fid).st() };
            !st.dirty.is_empty() || (dram.common(fid).pm_frame().is_none() && st.newer)
        }
    }

    /// Writes every page whose PM copy is newer than its SSD copy to SSD,
    /// syncs the page files, then marks those PM copies clean; they stay in
    /// PM. Runs a checkpoint first (so DRAM's changes are in PM), with the
    /// gate held: no operation runs meanwhile. Returns the pages written.
    ///
    /// What it is for: a bulk load through the three tiers leaves PM full
    /// of pages that never reached SSD, and each of them is written when
    /// PM first evicts it. A read-only phase after the load pays that debt
    /// in its own time (YCSB-RO at 1.9 GiB measured 0.025 SSD writes per
    /// lookup, a third of its SSD traffic, over its first minute). The
    /// debt can be settled here, once, in large sequential batches instead.
    /// Nothing is needed for correctness: a page newer in PM is durable
    /// there.
    ///
    /// Crash safety: a flag is cleared only after the page's SSD write is
    /// synced; a crash before that leaves the flag set (the page is written
    /// once more later), never a clean flag over a stale SSD copy.
    pub fn write_pm_to_ssd(&self) -> Result<u64> {
        let _one = self.ckpt_lock.lock().unwrap();
        let _gate = self.gate.write();
        self.checkpoint_locked()?;
        let Some(ssd) = &self.ssd else {
            return Ok(0);
        };
        const BATCH: usize = 256;
        let owed: Vec<(u32, u64)> = (0..self.pm.frames() as u32)
            .filter_map(|f| {
                let d = &self.pm.descs[f as usize];
                let pid = d.pid.load(Ordering::Acquire);
                (pid != crate::pm::NO_PAGE && d.newer.load(Ordering::Relaxed)).then_some((f, pid))
            })
            .collect();
        for batch in owed.chunks(BATCH) {
            for &(f, pid) in batch {
                // SAFETY: the gate is held exclusive, so no operation or
                // eviction touches the frame.
                unsafe { self.write_pm_frame_to_ssd(ssd, f, pid)? };
            }
            if armed(Tripwire::BufferCleanBeforeSync) {
                // Broken on purpose: the frames are clean in PM before
                // their pages' SSD writes are durable.
                for &(f, _) in batch {
                    self.pm.mark_clean(f);
                }
                self.pm.fence()?;
            }
            ssd.sync()?;
            for &(f, _) in batch {
                self.pm.mark_clean(f);
            }
            self.pm.fence()?;
        }
        Ok(owed.len() as u64)
    }

    /// Closes cleanly: a checkpoint, after which the next open redoes
    /// nothing. Running transactions stay running (their undo lists are in
    /// the checkpoint record: the next open undoes them).
    pub fn close(&self) -> Result<()> {
        self.checkpoint()
    }
}
