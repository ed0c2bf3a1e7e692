//! Checking a store's PM side without its SSD files (`ferrite check`): the
//! frame region, every frame header (no page held twice), and every record of
//! the active log (decodable, LSNs increasing). Restart itself needs the SSD
//! page files; this check does not run it.

use ferrite_pm::Pool;
use ferrite_pmio::log::{Log, PmLog};

use crate::error::{BufferError, Result};
use crate::pm::{PmTier, REGION_VERSION};
use crate::wal::record::{self, Record};
use crate::wal::ROOT_ACTIVE_LOG;

/// Checks the PM side of buffer manager `name` in `pool` (a private copy:
/// opening the logs may repair a torn tail). Returns a one-line verdict.
pub fn verify_pm(pool: &Pool, name: &str) -> Result<String> {
    // The page size is the region's own; open with it.
    let id = pool.object(name, crate::pm::BUFFER_TYPE)?;
    let region = pool.root(id, 0);
    if region == 0 || !pool.contains(region, 64) {
        return Err(BufferError::corrupt(name, "no frame region"));
    }
    let ps = {
        let s = pool.slice(region, 64)?;
        let b = s.to_vec();
        u32::from_le_bytes(b[12..16].try_into().expect("4")) as usize
    };
    if !ps.is_power_of_two() || !(crate::MIN_PAGE_SIZE..=crate::MAX_PAGE_SIZE).contains(&ps) {
        return Err(BufferError::corrupt(
            name,
            format!("page size {ps} in the region header"),
        ));
    }
    let pm = PmTier::open(pool, name, ps, 0, false, 0)?;
    let found = pm.scan()?;
    let active = (pool.root(id, ROOT_ACTIVE_LOG) & 1) as usize;
    let log = PmLog::open(pool, &format!("{name}.wal.{active}"))?;
    let mut n = 0;
    let (mut first, mut last) = (0u64, 0u64);
    for (_, p) in log.entries()? {
        let r: Record = record::decode(&p)?;
        if n > 0 && r.lsn() <= last {
            return Err(BufferError::corrupt(
                format!("{name}.wal.{active}"),
                format!("LSN {} follows {last}", r.lsn()),
            ));
        }
        if n == 0 {
            first = r.lsn();
        }
        last = r.lsn();
        n += 1;
    }
    Ok(format!(
        "ok: region version {REGION_VERSION}, pages of {ps} B, {} of {} PM frames hold pages, active log {active}: {n} records (LSN {first}..{last}); SSD page files not checked",
        found.len(),
        pm.frames()
    ))
}

impl crate::manager::BufferManager {
    /// Runs a checkpoint, then checks that every PM frame marked no newer
    /// than its SSD copy holds the same page as SSD (bytes 20.. of the page: all but the page id and
    /// the SSD image's LSN and checksum), which is what lets PM evict such a
    /// frame without writing it. Run with no operation running (crash
    /// checks). Returns the frames compared.
    pub fn check_clean_frames(&self) -> std::result::Result<u64, String> {
        let Some(ssd) = &self.ssd else {
            return Ok(0);
        };
        let _one = self.ckpt_lock.lock().unwrap();
        let _gate = self.gate.write();
        // DRAM's changes first: a page in DRAM may have lines newer than
        // both copies (redo puts them there after a crash that tore a write
        // to PM), and writing them back marks its frame newer.
        self.checkpoint_locked().map_err(|e| e.to_string())?;
        let ps = self.cfg.page_size;
        let mut buf = ferrite_pm::AlignedBuf::zeroed(ps);
        let mut n = 0;
        for f in 0..self.pm.frames() as u32 {
            let d = &self.pm.descs[f as usize];
            let pid = d.pid.load(std::sync::atomic::Ordering::Acquire);
            if pid == crate::pm::NO_PAGE || d.newer.load(std::sync::atomic::Ordering::Relaxed) {
                continue;
            }
            ssd.read_page(pid, buf.as_mut_slice(), false)
                .map_err(|e| format!("PM frame {f} (page {pid}): {e}"))?;
            // SAFETY: the gate is held exclusive: no operation or eviction
            // changes the frame; its data is a whole page.
            let pm = unsafe { std::slice::from_raw_parts(self.pm.data(f), ps) };
            const FROM: usize = crate::page::OFF_KIND;
            if pm[FROM..] != buf.as_slice()[FROM..] {
                let at = (FROM..ps)
                    .find(|&i| pm[i] != buf.as_slice()[i])
                    .unwrap_or(FROM);
                return Err(format!(
                    "PM frame {f} holds page {pid} marked no newer than SSD, but SSD's copy differs at byte {at}"
                ));
            }
            n += 1;
        }
        Ok(n)
    }
}
