//! The buffer manager's crash workloads: what they exercise, and every one of
//! the buffer manager's tripwires caught (the registry's suite runs each
//! target at its default configuration and one tripwire per target).

use ferrite_buffer::Design;
use ferrite_crash::buffer::{explore_design, workload_stats, DEFAULT_OPS};
use ferrite_pm::tripwire::{self, Tripwire};
use ferrite_pm::CrashConfig;

#[test]
fn workloads_exercise_every_path() {
    for (d, ops) in [
        (Design::ThreeTier, DEFAULT_OPS),
        (Design::PmDirect, DEFAULT_OPS / 3),
        (Design::SsdBm, DEFAULT_OPS),
    ] {
        let s = workload_stats(d, ops).unwrap();
        eprintln!("{}: {s:?}", d.name());
        let min_ckpt = if d == Design::PmDirect { 1 } else { 2 };
        assert!(s.checkpoints >= min_ckpt, "{}: {s:?}", d.name());
        if d == Design::ThreeTier {
            assert!(
                s.dram_evictions > 20
                    && s.pm_admissions > 5
                    && s.pm_evictions > 3
                    && s.mini_promotions > 0
                    && s.dram_line_loads > 0
                    && s.swizzles > 0
                    && s.unswizzles > 0
                    && s.ssd_writes > 0
                    && s.ssd_syncs > 0,
                "{s:?}"
            );
        }
        if d == Design::SsdBm {
            assert!(s.dram_evictions > 0 && s.ssd_writes > 0, "{s:?}");
        }
    }
}

/// Every buffer-manager tripwire makes the crash test report violations.
#[test]
fn every_tripwire_is_caught() {
    let cases = [
        (Design::ThreeTier, Tripwire::BufferSkipCommitForce),
        (Design::ThreeTier, Tripwire::BufferSkipWalRule),
        (Design::PmDirect, Tripwire::BufferSkipWalRule),
        (Design::ThreeTier, Tripwire::BufferInvalidateBeforeSync),
        (Design::ThreeTier, Tripwire::BufferCleanBeforeSync),
        (Design::ThreeTier, Tripwire::BufferSkipUndo),
        (Design::SsdBm, Tripwire::BufferSkipUndo),
    ];
    for (d, tw) in cases {
        let cfg = CrashConfig {
            recovery_crashes: false,
            stop_after_violations: 1,
            ..CrashConfig::default()
        };
        let r = tripwire::with(tw, || explore_design(&cfg, d, DEFAULT_OPS)).unwrap();
        eprintln!(
            "{} with {}: {} violations in {} states ({} fences)",
            d.name(),
            tw.name(),
            r.violations,
            r.states,
            r.fences
        );
        assert!(
            r.violations > 0,
            "{} in {} went unnoticed",
            tw.name(),
            d.name()
        );
    }
}
