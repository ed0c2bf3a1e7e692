//! Crash-simulator tests of the allocator: power cut at every fence of an
//! alloc/publish/free workload.

use ferrite_pm::targets::{allocator_default_config, crash_targets};
use ferrite_pm::CrashPoints;

#[test]
fn allocator_survives_a_crash_at_every_fence() {
    let cfg = allocator_default_config();
    let target = crash_targets()
        .into_iter()
        .find(|t| t.0 == "allocator")
        .unwrap()
        .1;
    let r = target(&cfg).unwrap();
    eprintln!("{r:?}");
    assert_eq!(r.violations, 0, "{:#?}", r.examples);
    assert!(r.states >= 10_000, "only {} crash states", r.states);
    assert_eq!(
        r.points,
        r.fences + 1,
        "every fence and the end are crash points"
    );
    assert!(r.acked_ops > 1000);
}

#[test]
fn sampled_exploration_tests_the_requested_number_of_points() {
    let mut cfg = allocator_default_config();
    cfg.points = CrashPoints::Sample(50);
    cfg.seeds = 2;
    cfg.ops = 300;
    let target = crash_targets()[0].1;
    let r = target(&cfg).unwrap();
    assert_eq!(r.points, 51);
    assert_eq!(r.violations, 0, "{:#?}", r.examples);
}

#[test]
fn object_creation_and_deletion_survive_a_crash_at_every_fence() {
    let target = crash_targets()
        .into_iter()
        .find(|t| t.0 == "directory")
        .unwrap()
        .1;
    let r = target(&ferrite_pm::CrashConfig::default()).unwrap();
    eprintln!("{r:?}");
    assert_eq!(r.violations, 0, "{:#?}", r.examples);
    assert!(r.states >= 10_000, "only {} crash states", r.states);
}
