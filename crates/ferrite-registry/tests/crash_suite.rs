//! Every registered crash-test target, at its default configuration (power cut
//! at every fence, the 8-byte model, crash during recovery on): at least
//! 10,000 crash states and no violation. And each target's tripwire (the
//! structure broken on purpose) must make it report violations, so a checker
//! that stopped checking fails here.

use ferrite_pm::tripwire;
use ferrite_pm::{CrashConfig, CrashPoints};

fn target(name: &str) -> &'static ferrite_registry::CrashTest {
    ferrite_registry::crash_test(name).unwrap_or_else(|| panic!("no target {name}"))
}

fn passes(name: &str, min_states: u64) {
    let t = target(name);
    let cfg = (t.config)();
    assert!(
        cfg.recovery_crashes,
        "the default suite crashes recovery too"
    );
    let r = (t.run)(&cfg).unwrap();
    eprintln!(
        "{name}: {} states ({} during recovery) at {} points, {} fences, {} acked, {} violations",
        r.states, r.recovery_states, r.points, r.fences, r.acked_ops, r.violations
    );
    assert_eq!(r.violations, 0, "{name}: {:#?}", r.examples);
    assert!(r.states >= min_states, "{name}: only {} states", r.states);
    // Every fence and the end of each workload (a target may run several).
    assert!(
        r.points > r.fences && r.points <= r.fences + 32,
        "{name}: {} points for {} fences",
        r.points,
        r.fences
    );
}

/// The tripwire run: smaller, without recovery crashes; must find violations.
fn caught(name: &str, ops: usize) {
    let t = target(name);
    let mut cfg = (t.config)();
    cfg.ops = ops;
    cfg.recovery_crashes = false;
    cfg.stop_after_violations = 1;
    let r = tripwire::with(t.tripwire, || (t.run)(&cfg)).unwrap();
    eprintln!(
        "{name} with tripwire {}: {} violations in {} states",
        t.tripwire.name(),
        r.violations,
        r.states
    );
    assert!(
        r.violations > 0,
        "{name}: tripwire {} broke the structure but the checker found nothing in {} states",
        t.tripwire.name(),
        r.states
    );
}

#[test]
fn allocator() {
    passes("allocator", 10_000);
}

#[test]
fn directory() {
    passes("directory", 10_000);
}

#[test]
fn log() {
    passes("log", 10_000);
}

#[test]
fn page() {
    passes("page", 10_000);
}

#[test]
fn inplace() {
    passes("inplace", 10_000);
}

#[test]
fn elf() {
    passes("elf", 10_000);
}

#[test]
fn index() {
    passes("index", 10_000);
}

#[test]
fn index_long() {
    passes("index-long", 10_000);
}

#[test]
fn index_batch_race() {
    passes("index-batch-race", 1_000);
}

#[test]
fn raft_list() {
    passes("raft-list", 10_000);
}

#[test]
fn raft_btree() {
    passes("raft-btree", 10_000);
}

#[test]
fn buffer() {
    passes("buffer", 10_000);
}

#[test]
fn buffer_pm_direct() {
    passes("buffer-pm-direct", 5_000);
}

#[test]
fn buffer_ssd_bm() {
    passes("buffer-ssd-bm", 5_000);
}

#[test]
fn txn() {
    passes("txn", 10_000);
}

#[test]
fn every_target_is_in_this_suite() {
    let here = [
        "buffer",
        "buffer-pm-direct",
        "buffer-ssd-bm",
        "allocator",
        "directory",
        "log",
        "page",
        "inplace",
        "elf",
        "index",
        "index-long",
        "index-batch-race",
        "raft-list",
        "raft-btree",
        "txn",
    ];
    for t in ferrite_registry::crash_tests() {
        assert!(here.contains(&t.name), "{} has no test here", t.name);
    }
}

#[test]
fn tripwires_are_caught() {
    for (name, ops) in [
        ("allocator", 300),
        ("directory", 200),
        ("log", 120),
        ("page", 200),
        ("inplace", 120),
        ("elf", 300),
        ("index", 400),
        ("index-long", 400),
        ("index-batch-race", 6),
        ("raft-list", 400),
        ("raft-btree", 400),
        ("buffer", 220),
        ("buffer-pm-direct", 220),
        ("buffer-ssd-bm", 220),
        ("txn", 60),
    ] {
        caught(name, ops);
    }
}

#[test]
fn sampled_exploration_tests_the_requested_number_of_points() {
    let t = target("allocator");
    let mut cfg: CrashConfig = (t.config)();
    cfg.points = CrashPoints::Sample(50);
    cfg.seeds = 2;
    cfg.ops = 300;
    let r = (t.run)(&cfg).unwrap();
    assert_eq!(r.points, 51);
    assert_eq!(r.violations, 0, "{:#?}", r.examples);
}
