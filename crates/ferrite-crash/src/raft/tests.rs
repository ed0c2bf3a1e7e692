//! The tripwires of the raft targets the registry does not list (each target
//! lists one; `ferrite-registry`'s crash suite runs the targets and those),
//! and the shape of the workload.

use ferrite_pm::tripwire::{self, Tripwire};
use ferrite_pm::{CrashPoints, PoolOptions};

use super::*;

/// A short sampled run with a deliberately broken structure.
fn tripped<M: CrashMap>(t: Tripwire) -> CrashReport {
    let cfg = CrashConfig {
        ops: 400,
        points: CrashPoints::Sample(300),
        recovery_crashes: false,
        stop_after_violations: 1,
        ..CrashConfig::default()
    };
    let r = tripwire::with(t, || target::<M>("tripwire", &cfg)).expect("explore");
    eprintln!(
        "{}: {} violations in {} states",
        t.name(),
        r.violations,
        r.states
    );
    r
}

#[test]
fn tripwire_list_publish_without_flush_is_caught() {
    assert!(tripped::<ListMap>(Tripwire::RaftListSkipFlush).violations > 0);
}

#[test]
fn tripwire_list_snapshot_records_not_written_back_are_caught() {
    assert!(tripped::<ListMap>(Tripwire::RaftListRecordsNoWriteBack).violations > 0);
}

#[test]
fn tripwire_list_publish_before_fence_is_caught() {
    assert!(tripped::<ListMap>(Tripwire::RaftListPublishBeforeFence).violations > 0);
}

#[test]
fn tripwire_btree_publish_before_fence_is_caught() {
    assert!(tripped::<PmBTree>(Tripwire::RaftBtreePublishBeforeFence).violations > 0);
}

/// The workload exercises what the crash test claims: clean-up of the list,
/// snapshot installs, truncations, purges, votes.
#[test]
fn the_workload_cleans_installs_and_truncates() {
    let cfg = scaled(&CrashConfig::default());
    let opts = PoolOptions {
        chunk_size: cfg.chunk_size,
        ..Default::default()
    };
    let pool = Pool::create_volatile(cfg.pool_size, &opts).unwrap();
    let sh = workload::<ListMap>(&cfg, &pool, None).unwrap();
    eprintln!("list: {sh:?}");
    assert!(sh.installs >= 5 && sh.truncations >= 20 && sh.purges >= 20 && sh.votes >= 10);
    assert!(
        sh.maintenance >= 10,
        "only {} pages cleaned",
        sh.maintenance
    );
    let pool = Pool::create_volatile(cfg.pool_size, &opts).unwrap();
    let sh = workload::<PmBTree>(&cfg, &pool, None).unwrap();
    eprintln!("btree: {sh:?}");
    assert!(sh.installs >= 5 && sh.truncations >= 20);
}
