//! A snapshot of the buffer manager's counters (bytes moved between tiers,
//! evictions, log traffic), for benchmarks and tests.

use std::sync::atomic::Ordering;

use crate::manager::BufferManager;

/// Counters since open.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct BufferStats {
    pub fixes: u64,
    pub misses: u64,
    pub swizzles: u64,
    pub unswizzles: u64,
    pub dram_evictions: u64,
    pub mini_promotions: u64,
    /// Cache lines copied PM → DRAM one at a time (cache-line-grained loads).
    pub dram_line_loads: u64,
    /// Whole pages copied PM → DRAM.
    pub dram_page_loads_pm: u64,
    /// Pages read SSD → DRAM.
    pub dram_page_loads_ssd: u64,
    pub dram_used_bytes: u64,
    pub pm_lines_written: u64,
    pub pm_lines_read: u64,
    pub pm_admissions: u64,
    pub pm_evictions: u64,
    pub pm_frames_used: u64,
    pub ssd_reads: u64,
    pub ssd_writes: u64,
    pub ssd_syncs: u64,
    pub wal_records: u64,
    pub wal_bytes: u64,
    pub wal_forces: u64,
    /// Appends to PM (each one barrier for PopLog): forces minus those a
    /// concurrent flush already covered (group commit).
    pub wal_flushes: u64,
    pub checkpoints: u64,
    pub page_table_entries: u64,
    /// PM lines charged by the modelled read latency, and the nanoseconds
    /// waited for them (0 unless `pm_read_ns` is set).
    pub pm_model_lines: u64,
    pub pm_model_wait_ns: u64,
}

impl BufferManager {
    /// The counters now.
    pub fn stats(&self) -> BufferStats {
        let r = |a: &std::sync::atomic::AtomicU64| a.load(Ordering::Relaxed);
        let mut s = BufferStats {
            fixes: r(&self.counters.fixes),
            misses: r(&self.counters.misses),
            swizzles: r(&self.counters.swizzles),
            unswizzles: r(&self.counters.unswizzles),
            pm_lines_written: r(&self.pm.counters.lines_written),
            pm_lines_read: r(&self.pm.counters.lines_read),
            pm_admissions: r(&self.pm.counters.admissions),
            pm_evictions: r(&self.pm.counters.evictions),
            pm_frames_used: self
                .pm
                .descs
                .iter()
                .filter(|d| d.pid.load(Ordering::Relaxed) != crate::pm::NO_PAGE)
                .count() as u64,
            wal_records: r(&self.wal.counters.records),
            wal_bytes: r(&self.wal.counters.bytes),
            wal_forces: r(&self.wal.counters.forces),
            wal_flushes: r(&self.wal.counters.flushes),
            checkpoints: r(&self.counters.checkpoints),
            page_table_entries: self.table.len() as u64,
            ..BufferStats::default()
        };
        (s.pm_model_lines, s.pm_model_wait_ns) = self.pm.model_stats();
        if let Some(d) = &self.dram {
            s.dram_evictions = r(&d.counters.evictions);
            s.mini_promotions = r(&d.counters.promotions);
            s.dram_line_loads = r(&d.counters.line_loads);
            s.dram_page_loads_pm = r(&d.counters.page_loads_pm);
            s.dram_page_loads_ssd = r(&d.counters.page_loads_ssd);
            s.dram_used_bytes = r(&d.used);
        }
        if let Some(x) = &self.ssd {
            s.ssd_reads = r(&x.counters.reads);
            s.ssd_writes = r(&x.counters.writes);
            s.ssd_syncs = r(&x.counters.syncs);
        }
        s
    }

    /// Writes per cache line of PM frame data (thesis Fig. 16), when the
    /// configuration tracks them (`track_pm_line_writes`).
    pub fn pm_line_writes(&self) -> Option<Vec<u32>> {
        self.pm.line_write_counts()
    }
}

impl BufferManager {
    /// Proves that the store's PM holds nothing unreachable: the buffer
    /// object's heap holds exactly its frame region (checked by allocating
    /// everything else: the manager must not be used afterwards), and every
    /// other object of the store (the two logs, a simulated SSD) owns no more
    /// chunks than its traced blocks need.
    pub fn exhaust_and_account(&self) -> std::result::Result<(), String> {
        let pool = &self.pool;
        let cs = pool.header().chunk_size;
        let prefix = format!("{}.", self.name);
        for o in pool.objects() {
            if !o.name.starts_with(&prefix) {
                continue;
            }
            let stats = pool
                .verify_heap(o.id, |m| {
                    let r = pool.root(o.id, 0);
                    if r != 0 {
                        m.mark(r)?;
                    }
                    Ok(())
                })
                .map_err(|e| format!("{}: {e}", o.name))?;
            let need = stats.live_bytes.div_ceil(cs).max(stats.live_blocks.min(1));
            if stats.chunks > need {
                return Err(format!(
                    "{} owns {} chunks, its live blocks need {need}: leaked",
                    o.name, stats.chunks
                ));
            }
        }
        let (region, size) = self.pm.region();
        ferrite_pm::account::exhaust_and_account(pool, self.pm.heap(), vec![(region, size)])
    }
}
