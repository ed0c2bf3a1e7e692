//! (being built)

use ferrite_pm::CrashTarget;

/// Crash-test targets of this crate, for `ferrite crash-test`.
pub fn crash_targets() -> Vec<(&'static str, CrashTarget)> {
    Vec::new()
}
