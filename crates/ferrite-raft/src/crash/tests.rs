use super::*;
use ferrite_pm::{CrashPoints, PoolOptions};

fn report(r: &CrashReport) {
    eprintln!(
        "{}: {} fences, {} points, {} states ({} in recovery), {} violations, {} acked",
        r.target, r.fences, r.points, r.states, r.recovery_states, r.violations, r.acked_ops
    );
    for v in r.examples.iter().take(3) {
        eprintln!("  fence {} seed {}: {}", v.fence, v.seed, v.message);
    }
}

#[test]
fn raft_list_survives_a_crash_at_every_fence() {
    let r = raft_list_target(&CrashConfig::default()).expect("explore");
    report(&r);
    assert_eq!(r.violations, 0);
    assert!(r.states >= 10_000, "only {} states", r.states);
}

#[test]
fn raft_btree_survives_a_crash_at_every_fence() {
    let r = raft_btree_target(&CrashConfig::default()).expect("explore");
    report(&r);
    assert_eq!(r.violations, 0);
    assert!(r.states >= 10_000, "only {} states", r.states);
}

/// A short sampled run with a deliberately broken structure.
fn tripped<M: CrashMap>(t: Tripwire) -> CrashReport {
    let cfg = CrashConfig {
        ops: 400,
        points: CrashPoints::Sample(300),
        recovery_crashes: false,
        ..CrashConfig::default()
    };
    let r = target::<M>("tripwire", &cfg, t).expect("explore");
    report(&r);
    r
}

#[test]
fn tripwire_list_publish_without_flush_is_caught() {
    assert!(tripped::<ListMap>(Tripwire::SkipFlush).violations > 0);
}

#[test]
fn tripwire_list_publish_before_fence_is_caught() {
    assert!(tripped::<ListMap>(Tripwire::PublishBeforeFence).violations > 0);
}

#[test]
fn tripwire_list_clean_up_before_commit_is_caught() {
    assert!(tripped::<ListMap>(Tripwire::CleanBeforeCommit).violations > 0);
}

#[test]
fn tripwire_btree_publish_without_flush_is_caught() {
    assert!(tripped::<PmBTree>(Tripwire::SkipFlush).violations > 0);
}

#[test]
fn tripwire_btree_publish_before_fence_is_caught() {
    assert!(tripped::<PmBTree>(Tripwire::PublishBeforeFence).violations > 0);
}

/// The workload exercises what the crash test claims: clean-up of the list,
/// snapshot installs, truncations, purges.
#[test]
fn the_workload_cleans_installs_and_truncates() {
    let cfg = scaled(&CrashConfig::default());
    let opts = PoolOptions {
        chunk_size: cfg.chunk_size,
        ..Default::default()
    };
    let pool = Pool::create_volatile(cfg.pool_size, &opts).unwrap();
    let sh = workload::<ListMap>(&cfg, &pool, None, Tripwire::None).unwrap();
    eprintln!("list: {sh:?}");
    assert!(sh.installs >= 5 && sh.truncations >= 20 && sh.purges >= 20 && sh.votes >= 10);
    assert!(
        sh.maintenance >= 10,
        "only {} pages cleaned",
        sh.maintenance
    );
    let pool = Pool::create_volatile(cfg.pool_size, &opts).unwrap();
    let sh = workload::<PmBTree>(&cfg, &pool, None, Tripwire::None).unwrap();
    eprintln!("btree: {sh:?}");
    assert!(sh.installs >= 5 && sh.truncations >= 20);
}
