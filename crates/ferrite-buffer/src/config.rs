//! Configuration: page size, tier capacities, the thesis's techniques (each a
//! switch) and the five designs of its evaluation as presets of the same code.

use crate::error::{BufferError, Result};

/// Bytes per cache line.
pub const LINE: usize = 64;
/// Default page size (the thesis's 16 KB).
pub const DEFAULT_PAGE_SIZE: usize = 16 << 10;
/// Smallest page size.
pub const MIN_PAGE_SIZE: usize = 1 << 10;
/// Largest page size (1024 cache lines).
pub const MAX_PAGE_SIZE: usize = 64 << 10;
/// Cache-line slots of a mini page.
pub const MINI_SLOTS: usize = 16;
/// DRAM a mini frame occupies (its 16 lines and its share of the descriptor).
pub const MINI_FRAME_BYTES: u64 = (MINI_SLOTS * LINE + LINE) as u64;
/// Default bytes per WAL segment (each of the two logs has two).
pub const DEFAULT_WAL_SEGMENT: usize = 32 << 20;

/// The techniques of the thesis's chapter 2, each switchable so that an
/// evaluation can isolate it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Techniques {
    /// Load a PM-backed page into DRAM one touched cache line at a time
    /// (§3.1); otherwise whole pages move between PM and DRAM.
    pub cache_line_grained: bool,
    /// Hold PM-backed leaves in 16-line mini frames, promoted to a full frame
    /// on overflow (§3.2). Needs `cache_line_grained`.
    pub mini_pages: bool,
    /// Parents reference DRAM-resident children by frame, not page id (§3.3).
    pub swizzling: bool,
    /// One hash table maps a page id to its DRAM and PM frames (§4.3);
    /// otherwise a DRAM table and a PM table are probed in turn.
    pub combined_table: bool,
    /// Admit a page evicted from DRAM into PM only when it was recently denied
    /// admission (§4.2); otherwise admit every evicted page.
    pub admission_set: bool,
}

impl Techniques {
    /// Every technique on (the thesis's three-tier design).
    pub const ALL: Techniques = Techniques {
        cache_line_grained: true,
        mini_pages: true,
        swizzling: true,
        combined_table: true,
        admission_set: true,
    };
    /// Every technique off (a textbook buffer manager).
    pub const NONE: Techniques = Techniques {
        cache_line_grained: false,
        mini_pages: false,
        swizzling: false,
        combined_table: false,
        admission_set: false,
    };

    /// The switched-on techniques, comma-separated (`none` when none).
    pub fn describe(&self) -> String {
        let mut v = Vec::new();
        if self.cache_line_grained {
            v.push("cache-line-grained");
        }
        if self.mini_pages {
            v.push("mini-pages");
        }
        if self.swizzling {
            v.push("swizzling");
        }
        if self.combined_table {
            v.push("combined-table");
        }
        if self.admission_set {
            v.push("admission-set");
        }
        if v.is_empty() {
            "none".into()
        } else {
            v.join(",")
        }
    }
}

/// The five storage designs of the thesis's evaluation (§5), as
/// configurations of the same buffer manager and B+-tree.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Design {
    /// Everything in DRAM (never evicts: data beyond the DRAM budget is an
    /// error); pointer swizzling; SSD only receives checkpoints.
    MainMemory,
    /// The B+-tree's pages live in PM frames and are read in place; an
    /// operation's writes go to a DRAM overlay that is applied to the PM frame
    /// after its log record is durable. No DRAM cache, no SSD: data beyond PM
    /// is an error.
    PmDirect,
    /// DRAM cache over PM with page-grained transfers, every evicted page
    /// admitted to PM, SSD behind (a FOEDUS-style buffer manager).
    BasicPm,
    /// A traditional buffer manager: DRAM cache over SSD.
    SsdBm,
    /// The thesis's design: DRAM, PM and SSD with every technique.
    ThreeTier,
}

impl Design {
    pub const ALL: [Design; 5] = [
        Design::MainMemory,
        Design::PmDirect,
        Design::BasicPm,
        Design::SsdBm,
        Design::ThreeTier,
    ];

    /// Short name (`main-memory`, `pm-direct`, `basic-pm`, `ssd-bm`, `three-tier`).
    pub fn name(self) -> &'static str {
        match self {
            Design::MainMemory => "main-memory",
            Design::PmDirect => "pm-direct",
            Design::BasicPm => "basic-pm",
            Design::SsdBm => "ssd-bm",
            Design::ThreeTier => "three-tier",
        }
    }

    /// Parses [`Design::name`].
    pub fn parse(s: &str) -> Option<Design> {
        Design::ALL.into_iter().find(|d| d.name() == s)
    }

    /// What the design is, in one line.
    pub fn describe(self) -> &'static str {
        match self {
            Design::MainMemory => "all pages in DRAM (no eviction), swizzled; SSD receives checkpoints",
            Design::PmDirect => "pages in PM, read in place, updated in place after the log force; no DRAM cache, no SSD",
            Design::BasicPm => "DRAM page cache over a page-grained PM cache over SSD; every evicted page admitted to PM",
            Design::SsdBm => "DRAM page cache over SSD",
            Design::ThreeTier => "DRAM (cache-line-grained, mini pages, swizzling) over PM (admission set) over SSD, one page table",
        }
    }

    /// The design's configuration with capacities in bytes (`pm_bytes` counts
    /// frame data and headers; `ssd_bytes` bounds the page files). Tiers a
    /// design does not have are ignored (their capacity is 0 in the result).
    pub fn config(self, dram_bytes: u64, pm_bytes: u64, ssd_bytes: u64) -> BufferConfig {
        self.config_paged(DEFAULT_PAGE_SIZE, dram_bytes, pm_bytes, ssd_bytes)
    }

    /// [`Design::config`] with pages of `page_size` bytes.
    pub fn config_paged(
        self,
        page_size: usize,
        dram_bytes: u64,
        pm_bytes: u64,
        ssd_bytes: u64,
    ) -> BufferConfig {
        let mut c = BufferConfig {
            design: self,
            page_size,
            ..BufferConfig::default()
        };
        let ps = c.page_size as u64;
        let frames = |b: u64| (b / (ps + LINE as u64)) as usize;
        match self {
            Design::MainMemory => {
                c.dram_bytes = dram_bytes;
                c.evict_dram = false;
                c.pm_frames = 0;
                c.ssd_pages = ssd_bytes / ps;
                c.techniques = Techniques {
                    swizzling: true,
                    ..Techniques::NONE
                };
            }
            Design::PmDirect => {
                c.dram_bytes = 0;
                c.pm_frames = frames(pm_bytes);
                c.ssd_pages = 0;
                c.techniques = Techniques::NONE;
            }
            Design::BasicPm => {
                c.dram_bytes = dram_bytes;
                c.pm_frames = frames(pm_bytes);
                c.ssd_pages = ssd_bytes / ps;
                c.techniques = Techniques::NONE;
            }
            Design::SsdBm => {
                c.dram_bytes = dram_bytes;
                c.pm_frames = 0;
                c.ssd_pages = ssd_bytes / ps;
                c.techniques = Techniques::NONE;
            }
            Design::ThreeTier => {
                c.dram_bytes = dram_bytes;
                c.pm_frames = frames(pm_bytes);
                c.ssd_pages = ssd_bytes / ps;
                c.techniques = Techniques::ALL;
            }
        }
        c.admission_set_size = (c.pm_frames / 2).max(16);
        c
    }
}

/// Everything that shapes a buffer manager. Build one with [`Design::config`]
/// (or `Default`, the three-tier design with small capacities) and adjust.
#[derive(Debug, Clone, PartialEq)]
pub struct BufferConfig {
    /// The design this configuration came from (a label for reports).
    pub design: Design,
    /// Bytes per page: a power of two from 1 KiB to 64 KiB.
    pub page_size: usize,
    /// DRAM budget for frames (full frames take `page_size`, mini frames
    /// [`MINI_FRAME_BYTES`]); 0: no DRAM tier (pages are accessed in PM).
    pub dram_bytes: u64,
    /// Whether DRAM evicts when full (false: data beyond the budget is an error).
    pub evict_dram: bool,
    /// PM frames (each `page_size` + a 64-byte header); 0: no PM tier.
    pub pm_frames: usize,
    /// SSD capacity in pages; 0: no SSD tier.
    pub ssd_pages: u64,
    /// Pages per SSD page file.
    pub pages_per_file: u64,
    pub techniques: Techniques,
    /// Entries of the admission set.
    pub admission_set_size: usize,
    /// PM frames evicted together (one fdatasync per batch).
    pub pm_eviction_batch: usize,
    /// Bytes per segment of each write-ahead log (two logs of two segments).
    pub wal_segment_bytes: usize,
    /// Count writes per PM frame cache line (thesis Fig. 16).
    pub track_pm_line_writes: bool,
    /// A modelled PM read latency in ns (0: off), for machines whose PM is
    /// emulated by DRAM: reads of PM frame data that miss a modelled 16 MiB
    /// CPU cache busy-wait this long (further lines of the same read 1/8 of
    /// it). Benchmarks only; results under it must say so.
    pub pm_read_ns: u64,
}

impl Default for BufferConfig {
    fn default() -> Self {
        BufferConfig {
            design: Design::ThreeTier,
            page_size: DEFAULT_PAGE_SIZE,
            dram_bytes: 16 << 20,
            evict_dram: true,
            pm_frames: 1024,
            ssd_pages: 1 << 20,
            pages_per_file: 1 << 16,
            techniques: Techniques::ALL,
            admission_set_size: 512,
            pm_eviction_batch: 16,
            wal_segment_bytes: DEFAULT_WAL_SEGMENT,
            track_pm_line_writes: false,
            pm_read_ns: 0,
        }
    }
}

impl BufferConfig {
    /// Cache lines per page.
    pub fn lines(&self) -> usize {
        self.page_size / LINE
    }

    /// Whether pages are accessed in PM without a DRAM tier.
    pub fn pm_direct(&self) -> bool {
        self.dram_bytes == 0
    }

    /// Checks the combination; the error says what is wrong.
    pub fn validate(&self) -> Result<()> {
        let bad = |m: String| Err(BufferError::Config(m));
        if !self.page_size.is_power_of_two()
            || self.page_size < MIN_PAGE_SIZE
            || self.page_size > MAX_PAGE_SIZE
        {
            return bad(format!(
                "page size {} is not a power of two from {MIN_PAGE_SIZE} to {MAX_PAGE_SIZE}",
                self.page_size
            ));
        }
        if self.dram_bytes == 0 && self.pm_frames == 0 {
            return bad("neither a DRAM nor a PM tier: pages need a place to be accessed".into());
        }
        if self.dram_bytes == 0 && self.ssd_pages > 0 {
            return bad(
                "without a DRAM tier (PM-direct) pages live in PM only: set ssd_pages to 0".into(),
            );
        }
        if self.dram_bytes > 0 && self.dram_bytes < 4 * self.page_size as u64 {
            return bad(format!(
                "a DRAM budget of {} bytes holds fewer than 4 pages of {}",
                self.dram_bytes, self.page_size
            ));
        }
        if self.dram_bytes > 0 && self.ssd_pages == 0 && self.pm_frames == 0 {
            return bad("a DRAM tier needs PM or SSD behind it for durability".into());
        }
        if self.pm_frames > u32::MAX as usize / 2 {
            return bad(format!("{} PM frames are too many", self.pm_frames));
        }
        if self.techniques.mini_pages && !self.techniques.cache_line_grained {
            return bad("mini pages need cache-line-grained loading".into());
        }
        if self.pages_per_file == 0 {
            return bad("pages_per_file must be at least 1".into());
        }
        if self.wal_segment_bytes < 8 * self.page_size + 4096 {
            return bad(format!(
                "a WAL segment of {} bytes is below 8 pages of {} plus 4 KiB",
                self.wal_segment_bytes, self.page_size
            ));
        }
        if self.pm_read_ns > 100_000 {
            return bad(format!(
                "a modelled PM read latency of {} ns is beyond any PM (at most 100000)",
                self.pm_read_ns
            ));
        }
        if self.pm_eviction_batch == 0 {
            return bad("pm_eviction_batch must be at least 1".into());
        }
        Ok(())
    }

    /// One line describing the tiers and techniques.
    pub fn describe(&self) -> String {
        format!(
            "{}: page {} B, DRAM {} B{}, PM {} frames, SSD {} pages, techniques: {}",
            self.design.name(),
            self.page_size,
            self.dram_bytes,
            if self.evict_dram {
                ""
            } else {
                " (no eviction)"
            },
            self.pm_frames,
            self.ssd_pages,
            self.techniques.describe()
        )
    }

    /// Bytes of PM a pool needs for this configuration: the frame region,
    /// both logs, and room for the pool's own metadata and chunk rounding.
    pub fn pool_bytes(&self) -> u64 {
        let region = 4096 + (self.pm_frames as u64) * (self.page_size as u64 + LINE as u64);
        let logs = 2 * (2 * self.wal_segment_bytes as u64 + 64 * 1024);
        let total = region + logs;
        total + total / 8 + (4 << 20)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn presets_are_valid_and_differ_in_the_documented_ways() {
        for d in Design::ALL {
            let c = d.config(64 << 20, 256 << 20, 1 << 30);
            c.validate().unwrap_or_else(|e| panic!("{}: {e}", d.name()));
            assert_eq!(Design::parse(d.name()), Some(d));
        }
        let pd = Design::PmDirect.config(64 << 20, 256 << 20, 1 << 30);
        assert!(pd.pm_direct() && pd.ssd_pages == 0 && pd.pm_frames > 0);
        let mm = Design::MainMemory.config(64 << 20, 256 << 20, 1 << 30);
        assert!(!mm.evict_dram && mm.pm_frames == 0 && mm.techniques.swizzling);
        let tt = Design::ThreeTier.config(64 << 20, 256 << 20, 1 << 30);
        assert_eq!(tt.techniques, Techniques::ALL);
        assert_eq!(Design::SsdBm.config(1 << 20, 1 << 20, 1 << 30).pm_frames, 0);
    }

    #[test]
    fn bad_combinations_are_refused_with_a_reason() {
        let mut c = BufferConfig {
            page_size: 3000,
            ..BufferConfig::default()
        };
        assert!(c
            .validate()
            .unwrap_err()
            .to_string()
            .contains("power of two"));
        c.page_size = 4096;
        c.techniques.cache_line_grained = false;
        assert!(c.validate().unwrap_err().to_string().contains("mini pages"));
        c.techniques = Techniques::ALL;
        c.dram_bytes = 0;
        assert!(c.validate().unwrap_err().to_string().contains("PM-direct"));
    }
}
