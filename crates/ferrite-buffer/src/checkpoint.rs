//! Sharp checkpoints: with the gate held exclusively (no operation runs), force
//! the log, write every dirty DRAM page back (to its PM frame, or to SSD),
//! `fdatasync` the page files, then switch to the other log, which starts with
//! a checkpoint record carrying the undo lists of running transactions. The
//! old log's space is reused by the next checkpoint.

use std::sync::atomic::Ordering;

use crate::access::is_mini;
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

    /// Closes cleanly: a checkpoint, after which the next open redoes
    /// nothing. Running transactions stay running (their undo lists are in
    /// the checkpoint record: the next open undoes them).
    pub fn close(&self) -> Result<()> {
        self.checkpoint()
    }
}
