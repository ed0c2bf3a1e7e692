//! Errors of the PM I/O primitives.

use ferrite_pm::PmError;

/// Everything the logs, page store and in-place arrays can report.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum PmioError {
    #[error(transparent)]
    Pm(#[from] PmError),
    #[error("log is full: the entry needs {needed} bytes, {free} are free (reset the log)")]
    LogFull { needed: usize, free: usize },
    #[error("entry of {len} bytes exceeds the largest entry this log can hold ({max} bytes)")]
    EntryTooLarge { len: usize, max: usize },
    #[error("{object:?} is corrupt: {detail}")]
    Corrupt { object: String, detail: String },
    #[error("{object:?} was created with {found}, not {expected}")]
    Mismatch {
        object: String,
        found: String,
        expected: String,
    },
    #[error("invalid argument: {0}")]
    Invalid(String),
}

/// Result type of this crate.
pub type Result<T, E = PmioError> = std::result::Result<T, E>;

pub(crate) fn corrupt(object: &str, detail: impl Into<String>) -> PmioError {
    PmioError::Corrupt {
        object: object.into(),
        detail: detail.into(),
    }
}
