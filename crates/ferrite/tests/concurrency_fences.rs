//! The facade's concurrency cases (`common/concurrency_cases.rs`) with the
//! writer gate's fallback barriers (`fence(SeqCst)` on both sides, as on a
//! kernel without `membarrier`), chosen with `FERRITE_FENCES` (the older
//! spelling `FERRITE_GATE_FENCES` is checked by `ferrite_pm::barrier`'s tests).

#[path = "common/concurrency_cases.rs"]
#[macro_use]
mod cases;

static FENCES: std::sync::Once = std::sync::Once::new();

/// Chooses the fallback barriers before any gate of this process exists
/// (every test calls it first).
fn setup() {
    FENCES.call_once(|| std::env::set_var("FERRITE_FENCES", "1"));
}

concurrency_tests!(setup, "fences");
