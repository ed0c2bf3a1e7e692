//! Stress tests of the facade's atomicity under threads: transactions move
//! money while readers check that the total never changes (in a one-chunk
//! range, in transactions, in batches of gets inside a transaction); counters
//! bumped with `update_with` and `compare_and_swap` from several threads lose
//! no increment; plain writers run beside transactions; a thread that holds
//! a transaction gets an error, not a deadlock, when it writes around it.
//!
//! These run with the gate's default barriers (`membarrier` on Linux);
//! `concurrency_fences.rs` runs the same cases with its fallback fences.

#[path = "common/concurrency_cases.rs"]
mod cases;

/// Nothing to set: the default barriers.
fn setup() {}

#[test]
fn transfers_in_transactions_never_change_the_total_any_reader_sees() {
    setup();
    cases::transfers_in_transactions_never_change_the_total_any_reader_sees();
}

#[test]
fn update_with_and_compare_and_swap_lose_no_increment() {
    setup();
    cases::update_with_and_compare_and_swap_lose_no_increment();
}

#[test]
fn writing_around_ones_own_transaction_is_an_error_not_a_deadlock() {
    setup();
    cases::writing_around_ones_own_transaction_is_an_error_not_a_deadlock();
}

#[test]
fn a_transaction_waits_for_other_writers_and_holds_them_off() {
    setup();
    cases::a_transaction_waits_for_other_writers_and_holds_them_off();
}

#[test]
fn the_gate_uses_the_expected_barriers() {
    setup();
    let _db = ferrite::Db::volatile(16 << 20).unwrap();
    assert_eq!(ferrite::writer_barriers(), "membarrier");
}
