//! The facade's concurrency cases (`common/concurrency_cases.rs`) with the
//! writer gate's fallback barriers (`fence(SeqCst)` on both sides, as on a
//! kernel without `membarrier`), chosen with `FERRITE_GATE_FENCES`.

#[path = "common/concurrency_cases.rs"]
mod cases;

static FENCES: std::sync::Once = std::sync::Once::new();

/// Chooses the fallback barriers before any gate of this process exists
/// (every test calls it first).
fn setup() {
    FENCES.call_once(|| std::env::set_var("FERRITE_GATE_FENCES", "1"));
}

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
    assert_eq!(ferrite::writer_barriers(), "fences");
}
