//! The buffer manager's evaluation (thesis ch. 2, §5 and appendix A), behind
//! `ferrite bench buffer …`:
//!
//! * [`ycsb`] (with [`zipf`]): YCSB-RO, YCSB-R/W, YCSB-SCAN on 4-byte keys and
//!   ten 100-byte fields, Zipf z = 1;
//! * [`tpcc`]: TPC-C with all five transactions on the transactional
//!   ordered-KV interface ([`txn`]);
//! * [`designs`]: the five designs of the thesis (presets of one buffer
//!   manager and one B+-tree) as benchmark stores;
//! * [`anchor`] (with [`cgroup`]): LMDB and SQLite on the same records, held
//!   to the DRAM budget by a memory cgroup;
//! * [`experiments`]: the figures (8, 9, 10, 15, 16, 17, the side-by-side
//!   mix and the anchors), [`output`]: their tables and charts.

pub mod anchor;
pub mod cgroup;
pub mod designs;
pub mod experiments;
pub mod output;
pub mod tpcc;
pub mod txn;
pub mod ycsb;
pub mod zipf;

pub use ferrite_btree::Design;

use crate::index::suite::Progress;
use crate::{BenchError, Result};
use designs::{Dirs, Tiers};
use ycsb::Workload;

pub use experiments::BufferRun;

const MIB: u64 = 1 << 20;

/// The experiments, in the order they run and print.
pub const EXPERIMENTS: [&str; 9] = [
    "mix",
    "ycsb",
    "tpcc",
    "drilldown",
    "updates",
    "wear",
    "restart",
    "anchors",
    "rebuild",
];

/// What `ferrite bench buffer` runs.
#[derive(Debug, Clone)]
pub struct BufferBenchConfig {
    /// Names from [`EXPERIMENTS`].
    pub experiments: Vec<String>,
    pub tiers: Tiers,
    /// The designs of the side-by-side and sweep experiments.
    pub designs: Vec<Design>,
    /// Data size of the side-by-side run (well inside DRAM), MiB.
    pub mix_mib: u64,
    /// Workloads of the side-by-side run.
    pub mix_workloads: Vec<Workload>,
    /// Warehouses of the side-by-side TPC-C run.
    pub mix_warehouses: u16,
    /// Data sizes of the YCSB-RO sweep (thesis Fig. 8), MiB.
    pub ycsb_sizes_mib: Vec<u64>,
    /// Warehouse counts of the TPC-C sweep (thesis Fig. 9).
    pub warehouses: Vec<u16>,
    /// Data size between DRAM and PM (drill-down, updates, wear; the thesis's
    /// 10 GB at 2 GB DRAM / 10 GB PM), MiB.
    pub mid_mib: u64,
    /// Update percentages of the update experiment (Fig. 15).
    pub update_pcts: Vec<u8>,
    /// Updates of the wear experiment (Fig. 16).
    pub wear_ops: u64,
    /// Data sizes of the restart experiment (Fig. 17), MiB.
    pub restart_mib: Vec<u64>,
    /// Seconds of throughput samples after a restart.
    pub restart_seconds: f64,
    /// Data sizes the anchors run at (one inside DRAM, one beyond), MiB.
    pub anchor_mib: Vec<u64>,
    pub anchor_workloads: Vec<Workload>,
    /// Rounds of the anchors run: each round measures every engine once, in
    /// turn, and a cell reports the median round (the rounds beside it), so
    /// a burst of noise from the machine's neighbours hits one round of one
    /// engine, not the ratio.
    pub anchor_rounds: usize,
    /// Slices of the YCSB and TPC-C sweeps (Figs. 8 and 9): the designs of a
    /// cell are loaded together and measured in turn, `seconds / interleave`
    /// at a time, so that the machine's slow spells (its neighbours) fall on
    /// every design of the comparison alike. 1: one run per design, in turn.
    pub interleave: usize,
    /// The command that reaches `anchor::child_main` (the `ferrite` binary
    /// and its hidden subcommand); empty: the anchors are skipped.
    pub anchor_child: Vec<String>,
    /// Measured seconds per cell.
    pub seconds: f64,
    /// Warm-up seconds per cell (after a load and before each measurement).
    pub warmup_seconds: f64,
    /// TPC-C scale (rows per warehouse); `Scale::SPEC` but in tests.
    pub tpcc_scale: tpcc::Scale,
    /// Check TPC-C's consistency conditions after every TPC-C run (else only
    /// after the side-by-side run).
    pub tpcc_check_all: bool,
    pub page_size: usize,
    /// Bytes per WAL segment (two logs of two segments each).
    pub wal_segment_bytes: usize,
    /// Modelled PM read latency in ns (0: none; see
    /// `ferrite_buffer::BufferConfig::pm_read_ns`).
    pub pm_read_ns: u64,
    pub dirs: Dirs,
    pub seed: u64,
}

impl Default for BufferBenchConfig {
    fn default() -> Self {
        BufferBenchConfig {
            experiments: EXPERIMENTS.iter().map(|s| s.to_string()).collect(),
            tiers: Tiers::DEFAULT,
            designs: Design::ALL.to_vec(),
            mix_mib: 128,
            mix_workloads: vec![
                Workload::ReadOnly,
                Workload::ReadWrite { update_pct: 50 },
                Workload::Scan,
            ],
            mix_warehouses: 1,
            ycsb_sizes_mib: vec![128, 384, 640, 896, 1152, 1536, 1920],
            warehouses: vec![1, 2, 4, 8, 12, 16],
            mid_mib: 1024,
            update_pcts: vec![0, 25, 50, 75, 100],
            wear_ops: 1_000_000,
            restart_mib: vec![192, 768],
            restart_seconds: 10.0,
            anchor_mib: vec![128, 1024],
            anchor_workloads: vec![Workload::ReadOnly, Workload::ReadWrite { update_pct: 50 }],
            anchor_rounds: 1,
            interleave: 5,
            anchor_child: Vec::new(),
            seconds: 5.0,
            warmup_seconds: 5.0,
            tpcc_scale: tpcc::Scale::SPEC,
            tpcc_check_all: false,
            page_size: ferrite_buffer::DEFAULT_PAGE_SIZE,
            wal_segment_bytes: ferrite_buffer::DEFAULT_PAGE_SIZE * 1024,
            pm_read_ns: 0,
            dirs: Dirs {
                pool_dir: "/dev/shm".into(),
                ssd_dir: std::env::temp_dir(),
            },
            seed: 42,
        }
    }
}

impl BufferBenchConfig {
    /// Checks the options; the error says what is wrong.
    pub fn validate(&self) -> Result<()> {
        let bad = |m: String| Err(BenchError::Options(m));
        for e in &self.experiments {
            if !EXPERIMENTS.contains(&e.as_str()) {
                return bad(format!(
                    "unknown experiment {e:?} (known: {})",
                    EXPERIMENTS.join(", ")
                ));
            }
        }
        if self.interleave == 0 {
            return bad("--interleave must be at least 1".into());
        }
        if self.seconds <= 0.0 || self.warmup_seconds < 0.0 {
            return bad("--seconds must be > 0 and --warmup-seconds >= 0".into());
        }
        let t = &self.tiers;
        if t.dram == 0 || t.pm == 0 || t.ssd == 0 {
            return bad("every tier needs a capacity > 0".into());
        }
        if t.dram > t.pm || t.pm > t.ssd {
            return bad(format!(
                "capacities must grow DRAM <= PM <= SSD ({})",
                t.describe()
            ));
        }
        for d in &self.designs {
            let c = self.design_config(*d);
            c.validate()
                .map_err(|e| BenchError::Options(format!("{}: {e}", d.name())))?;
        }
        if self.warehouses.contains(&0) || self.mix_warehouses == 0 {
            return bad("warehouse counts start at 1".into());
        }
        Ok(())
    }

    /// The design's buffer-manager configuration at the configured tiers.
    pub fn design_config(&self, d: Design) -> ferrite_btree::BufferConfig {
        let t = &self.tiers;
        let mut c = d.config_paged(self.page_size, t.dram, t.pm, t.ssd);
        c.wal_segment_bytes = self.wal_segment_bytes;
        c.pm_read_ns = self.pm_read_ns;
        c
    }

    pub fn wants(&self, experiment: &str) -> bool {
        self.experiments.iter().any(|e| e == experiment)
    }

    /// YCSB records for a data size of `mib` MiB (the tree's pages after the
    /// load, at [`YCSB_BYTES_PER_RECORD`]).
    pub fn ycsb_records(&self, mib: u64) -> u64 {
        (mib * MIB / YCSB_BYTES_PER_RECORD).max(100)
    }
}

/// Bytes of B+-tree pages per YCSB record after a load in random key order
/// (measured: the leaves end up about 70% full).
pub const YCSB_BYTES_PER_RECORD: u64 = 1500;

/// Bytes of B+-tree pages per TPC-C warehouse after the load (measured).
pub const TPCC_BYTES_PER_WAREHOUSE: u64 = 150 * MIB;

/// A configuration small enough for tests: tiers of 4 / 16 / 128 MiB, 8 KiB
/// pages, TPC-C at 1/50 scale, fractions of a second per cell.
pub fn tiny_config() -> BufferBenchConfig {
    BufferBenchConfig {
        tiers: Tiers {
            dram: 4 * MIB,
            pm: 16 * MIB,
            ssd: 128 * MIB,
        },
        mix_mib: 1,
        ycsb_sizes_mib: vec![1, 6, 20],
        warehouses: vec![1],
        mid_mib: 10,
        update_pcts: vec![0, 100],
        wear_ops: 2000,
        restart_mib: vec![1],
        restart_seconds: 0.3,
        anchor_mib: vec![1, 4],
        seconds: 0.1,
        warmup_seconds: 0.0,
        tpcc_scale: tpcc::Scale::TINY,
        page_size: 8192,
        wal_segment_bytes: 1 << 20,
        ..BufferBenchConfig::default()
    }
}

/// Runs the configured experiments; `progress` sees the loads and runs.
pub fn run(cfg: &BufferBenchConfig, progress: &dyn Progress) -> Result<BufferRun> {
    cfg.validate()?;
    experiments::run(cfg, progress)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::index::suite::Quiet;

    #[test]
    fn a_tiny_run_of_every_experiment_but_the_anchors_fills_every_table() {
        let mut cfg = tiny_config();
        cfg.experiments.retain(|e| e != "anchors");
        // Every TPC-C run checked, the interleaved sweep's slices too.
        cfg.tpcc_check_all = true;
        let run = super::run(&cfg, &Quiet).unwrap();
        assert_eq!(run.problems, Vec::<String>::new());
        let names: Vec<&str> = run.sections.iter().map(|s| s.experiment.as_str()).collect();
        assert_eq!(
            names,
            [
                "mix",
                "ycsb",
                "tpcc",
                "drilldown",
                "updates",
                "wear",
                "restart",
                "rebuild"
            ]
        );
        // The side-by-side table has all five designs and every workload.
        let mix = &run.sections[0];
        assert_eq!(mix.head.len(), 6);
        assert_eq!(mix.rows.len(), 4);
        assert!(
            mix.rows.iter().all(|r| r.iter().all(|c| c != "-")),
            "{mix:?}"
        );
        for s in &run.sections {
            assert!(
                s.table().lines().all(|l| l.len() <= output::MAX_WIDTH),
                "{}",
                s.table()
            );
        }
        // Every cell carries the shared fields; TPC-C checked its consistency.
        for r in &run.report.results {
            assert!(r.extra.contains_key("experiment"), "{r:?}");
        }
        let tp = run
            .report
            .results
            .iter()
            .find(|r| r.bench == "tpcc" && r.extra["experiment"] == "mix")
            .unwrap();
        assert_eq!(tp.extra["consistency_violations"], 0);
        // Wear: the buffer manager writes each PM line less often than PM-direct.
        let w = |v: &str| {
            run.report
                .results
                .iter()
                .find(|r| r.extra["experiment"] == "wear" && r.variant == v)
                .unwrap()
                .extra["pm_line_writes_max"]
                .as_u64()
                .unwrap()
        };
        assert!(w("three-tier") < w("pm-direct"));
        // The sweeps measured their designs interleaved, each for its share of
        // the time (the tiny configuration keeps the default 5 slices).
        let tpcc: Vec<_> = run
            .report
            .results
            .iter()
            .filter(|r| r.extra["experiment"] == "tpcc")
            .collect();
        assert_eq!(tpcc.len(), 5);
        for r in &tpcc {
            assert_eq!(r.extra["slices"], 5, "{r:?}");
            assert_eq!(r.extra["slice_mops"].as_array().unwrap().len(), 5, "{r:?}");
            assert_eq!(r.extra["interleaved_with"], 4, "{r:?}");
            assert!(r.extra["ops"].as_u64().unwrap() > 0, "{r:?}");
            assert_eq!(r.extra["consistency_violations"], 0, "{r:?}");
        }
        // Data beyond DRAM does not fit main-memory: its sweep cell is empty.
        let big = &run.sections[1].rows[2];
        assert_eq!(big[3], "-", "{big:?}");
        assert_eq!(run.charts.len(), 7);
        assert!(run.charts.iter().all(|(_, svg)| svg.starts_with("<svg")));
    }

    #[test]
    fn bad_options_are_refused() {
        let mut c = tiny_config();
        c.experiments = vec!["nope".into()];
        assert!(c.validate().is_err());
        let mut c = tiny_config();
        c.tiers.pm = c.tiers.dram / 2;
        assert!(c.validate().unwrap_err().to_string().contains("DRAM <= PM"));
        let mut c = tiny_config();
        c.seconds = 0.0;
        assert!(c.validate().is_err());
    }
}
