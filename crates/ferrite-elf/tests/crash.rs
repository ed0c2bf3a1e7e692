//! The `elf` crash target at its default size: >= 10,000 crash states, no violation.

use ferrite_pm::CrashConfig;

#[test]
fn elf_crash_states_all_recover() {
    let r = ferrite_elf::crash::elf_target(&CrashConfig::default()).unwrap();
    eprintln!(
        "fences {} points {} states {} violations {} acked {}",
        r.fences, r.points, r.states, r.violations, r.acked_ops
    );
    assert!(r.violations == 0, "{:#?}", r.examples);
    assert!(r.states >= 10_000, "only {} states", r.states);
}
