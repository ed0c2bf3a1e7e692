//! The `index` crash target at its default configuration (>= 10,000 states).

use ferrite_pm::CrashConfig;

#[test]
fn index_crash_target_has_no_violations() {
    let r = ferrite_index::crash::index_target(&CrashConfig::default()).expect("explore");
    eprintln!(
        "index crash test: {} fences, {} points, {} states, {} violations, {} acked",
        r.fences, r.points, r.states, r.violations, r.acked_ops
    );
    for v in &r.examples {
        eprintln!("  fence {} seed {}: {}", v.fence, v.seed, v.message);
    }
    assert_eq!(r.violations, 0);
    assert!(r.states >= 10_000, "only {} states", r.states);
}

#[test]
fn crash_workloads_split_unlink_and_merge_leaves() {
    for var in [false, true] {
        let (splits, unlinks, merges) =
            ferrite_index::crash::crash_workload_shape(&CrashConfig::default(), var).unwrap();
        eprintln!("variable={var}: {splits} splits, {unlinks} unlinked leaves, {merges} merges");
        assert!(
            splits >= 5 && unlinks >= 2 && merges >= 2,
            "{splits} splits, {unlinks} unlinks, {merges} merges"
        );
    }
}
