//! The `buffer` crash-test target (written after the tree works).

use ferrite_pm::{CrashConfig, CrashReport};

pub fn buffer_target(_cfg: &CrashConfig) -> ferrite_pm::Result<CrashReport> {
    Ok(CrashReport::default())
}
